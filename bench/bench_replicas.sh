#!/usr/bin/env bash
# Two replicas behind nginx on a zipf document workload, with the shared tier (Redis) and
# without it (issue 22's benchmark; README "Several replicas"). Each configuration is a fresh
# deployment (scripts/replicas_up.sh): the same `lazyattn bench --url` run through nginx's
# round robin, then every replica's /metrics. Printed side by side and saved as JSON.
#
#   bench/bench_replicas.sh [--out FILE.json] [--requests N] [--concurrency C]
#                           [--pool-docs P] [--kv-blocks K] [-- SERVE ARGS...]
#
# Defaults: the bundled model on the CPU, 4 documents of ~128 tokens per request from a pool
# of 48 (zipf 1.0), 48 measured requests at concurrency 2. --kv-blocks (default 2048) keeps
# every document in each replica's pool, so the difference is only what the replicas share.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bench/results/replicas_cpu.json" requests=48 conc=2 pool=48 kv_blocks=2048
serve=(-m "$root/models/rag-tiny")
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --concurrency) conc=$2; shift 2 ;;
    --pool-docs) pool=$2; shift 2 ;;
    --kv-blocks) kv_blocks=$2; shift 2 ;;
    --) shift; serve=("$@"); break ;;
    *) echo "bench_replicas: unknown argument $1" >&2; exit 2 ;;
    esac
done
bin="$root/build/lazyattn"
work=$(mktemp -d /tmp/lazyattn-bench-replicas-XXXXXX)
trap '"$root/scripts/replicas_down.sh" "$work/shared" >/dev/null 2>&1 || true;
      "$root/scripts/replicas_down.sh" "$work/none" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
bench_args=(--dataset synthetic --docs-per-request 4 --doc-tokens 128 --pool-docs "$pool" --zipf 1.0
            --requests "$requests" --concurrency "$conc" --methods lazy --max-tokens 8)
for mode in shared none; do
    flags=()
    [ "$mode" = none ] && flags=(--no-shared)
    "$root/scripts/replicas_up.sh" -n 2 --dir "$work/$mode" "${flags[@]}" -- "${serve[@]}" --kv-blocks "$kv_blocks" \
        >"$work/$mode.up.log"
    # shellcheck disable=SC1091
    . "$work/$mode/env"
    "$bin" bench --url "$URL" "${bench_args[@]}" --json "$work/$mode.json" >"$work/$mode.txt"
    for p in $REPLICA_PORTS; do curl -fs "http://127.0.0.1:$p/metrics"; echo "# ---- end of replica"; done \
        >"$work/$mode.metrics"
    "$root/scripts/replicas_down.sh" "$work/$mode" >/dev/null
done
python3 - "$work" "$out" "$0 $*" <<'PY'
import json, os, subprocess, sys
work, out, cmd = sys.argv[1:4]

def metric(text, name):
    """Per replica: the value of an unlabelled counter."""
    vals, cur = [], None
    for line in text.splitlines():
        if line.startswith("# ---- end of replica"):
            vals.append(cur or 0.0)
            cur = None
        elif line.startswith(name + " "):
            cur = float(line.split()[1])
    return vals

rows = {}
for mode in ("shared", "none"):
    b = json.load(open(f"{work}/{mode}.json"))
    m = b["methods"][0]
    text = open(f"{work}/{mode}.metrics").read()
    computed = metric(text, "lazyattn_documents_computed_total")
    loaded = metric(text, "lazyattn_documents_loaded_total")
    rows[mode] = {"documents_computed_per_replica": computed, "documents_computed": sum(computed),
                  "documents_loaded_per_replica": loaded, "documents_loaded": sum(loaded),
                  "ttft_ms": m["ttft_ms"], "doc_hit_ratio": m["doc_hit_ratio"],
                  "doc_hit_ratio_by_tier": m.get("doc_hit_ratio_by_tier"), "requests_ok": m["requests_ok"],
                  "bench_command": b["command"]}
    machine, workload = b["machine"], b["workload"]
commit = subprocess.run(["git", "-C", os.path.dirname(out), "rev-parse", "--short", "HEAD"],
                        capture_output=True, text=True).stdout.strip()
report = {"tool": "bench/bench_replicas.sh", "command": cmd.strip(), "commit": commit, "machine": machine,
          "deployment": "2 x lazyattn serve behind nginx round robin (scripts/replicas_up.sh); shared: "
                        "+ redis-server as the KV store's shared tier; none: --no-shared",
          "workload": workload,
          "note": "documents_computed counts document jobs that ran the model over the warm-up and the "
                  "measured requests together, summed over both replicas",
          "configs": rows}
json.dump(report, open(out, "w"), indent=1)
s, n = rows["shared"], rows["none"]
print(f"{'':28}{'shared tier':>14}{'no sharing':>14}")
print(f"{'documents computed':28}{s['documents_computed']:>14.0f}{n['documents_computed']:>14.0f}")
print(f"{'documents loaded (shared)':28}{s['documents_loaded']:>14.0f}{n['documents_loaded']:>14.0f}")
print(f"{'document hit % (measured)':28}{100 * s['doc_hit_ratio']:>14.1f}{100 * n['doc_hit_ratio']:>14.1f}")
for q in ("p50", "p99"):
    print(f"{'TTFT ms ' + q:28}{s['ttft_ms'][q]:>14.1f}{n['ttft_ms'][q]:>14.1f}")
print(f"saved {out}")
PY
