#!/usr/bin/env bash
# Smoke test of `lazyattn serve` with curl: start it on a free loopback port, hit every
# endpoint, check the status codes (and a word of each body) with grep, stop it with
# SIGTERM and check it exits 0.
#
#   scripts/smoke_serve.sh [BIN] [MODEL_DIR]
#     BIN        the lazyattn binary (build/lazyattn)
#     MODEL_DIR  the model (models/rag-tiny when it has weights, else the tiny test fixture)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/lazyattn}
MODEL=${2:-}
if [ -z "$MODEL" ]; then
  if ls models/rag-tiny/*.safetensors >/dev/null 2>&1; then MODEL=models/rag-tiny
  else MODEL=tests/fixtures/models/tiny-f32-tied; fi
fi
LOG=$(mktemp)
BODY=$(mktemp)
"$BIN" serve -m "$MODEL" --port 0 --max-body-bytes 65536 2>"$LOG" &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; rm -f "$LOG" "$BODY"' EXIT
for _ in $(seq 600); do
  grep -q "listening on" "$LOG" && break
  kill -0 "$PID" 2>/dev/null || { cat "$LOG"; echo "smoke_serve: server exited"; exit 1; }
  sleep 0.1
done
PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$LOG" | grep -o '[0-9]*$')
URL="http://127.0.0.1:$PORT"
echo "smoke_serve: $MODEL on $URL"

N=0
# check STATUS GREP_PATTERN curl-args...
check() {
  local want=$1 pattern=$2; shift 2
  local got
  got=$(curl -s -o "$BODY" -w '%{http_code}' "$@")
  if [ "$got" != "$want" ] || ! grep -q -- "$pattern" "$BODY"; then
    echo "FAIL: curl $* -> $got (want $want, body must match '$pattern'):"; cat "$BODY"; echo
    exit 1
  fi
  N=$((N + 1))
  echo "ok   $got $*" | cut -c1-110
}
J=(-H 'Content-Type: application/json')
DOCS='"documents": [{"title": "Paris", "text": "Paris is the capital of France."}, "Berlin is in Germany."]'

check 200 '"status":"ok"' "$URL/health"
check 200 '"object":"list"' "$URL/v1/models"
check 200 '"text_completion"' "${J[@]}" -d "{\"prompt\": \"The capital of France is\", \"max_tokens\": 8, $DOCS}" "$URL/v1/completions"
check 200 '"chat.completion"' "${J[@]}" -d "{\"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of France?\"}], \"max_tokens\": 8, $DOCS}" "$URL/v1/chat/completions"
check 200 'cached_tokens' "${J[@]}" -d "{\"messages\": [{\"role\": \"user\", \"content\": \"And of Germany?\"}], \"max_tokens\": 8, \"method\": \"prefix\", $DOCS}" "$URL/v1/chat/completions"
check 200 'data: \[DONE\]' -N "${J[@]}" -d "{\"messages\": [{\"role\": \"user\", \"content\": \"Stream it\"}], \"max_tokens\": 8, \"stream\": true, \"stream_options\": {\"include_usage\": true}, $DOCS}" "$URL/v1/chat/completions"
check 200 '"cached":true' "${J[@]}" -d "{$DOCS}" "$URL/v1/documents"
check 200 'lazyattn_kv_blocks_total' "$URL/metrics"
check 400 'invalid_json' "${J[@]}" -d '{"prompt": ' "$URL/v1/completions"
check 400 '"param":"method"' "${J[@]}" -d '{"prompt": "x", "method": "magic"}' "$URL/v1/completions"
check 400 '"param":"max_tokens"' "${J[@]}" -d '{"prompt": "x", "max_tokens": 0}' "$URL/v1/completions"
check 404 'not_found' "$URL/v1/nothing"
check 405 'method_not_allowed' "$URL/v1/completions"
head -c 100000 /dev/zero | tr '\0' 'a' | sed 's/^/{"prompt": "/; s/$/"}/' > "$LOG.big"
check 413 'request_too_large' "${J[@]}" --data-binary "@$LOG.big" "$URL/v1/completions"
rm -f "$LOG.big"
check 200 '"status":"ok"' "$URL/health"

kill -TERM "$PID"
RC=0
wait "$PID" || RC=$?
trap 'rm -f "$LOG" "$BODY"' EXIT
[ "$RC" = 0 ] || { cat "$LOG"; echo "smoke_serve: exit status $RC after SIGTERM"; exit 1; }
echo "smoke_serve: $N checks passed, clean shutdown (exit 0)"
