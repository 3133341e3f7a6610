#!/usr/bin/env bash
# The HTTP edge's cost (issue 28): bench_serve (streamed RAG chat, requests/s and TTFT) at
# concurrency 1, 8, 32 against the thread-per-connection server (BEFORE: a build of the
# commit before the change) and the event-driven one (this build), alternated ROUNDS times
# on the same machine, one JSON with every run and the medians.
#
#   bench/bench_http_edge.sh BEFORE_BUILD_DIR [AFTER_BUILD_DIR=build] [ROUNDS=3] [OUT]
#
# BEFORE_BUILD_DIR holds the old `lazyattn` (e.g. `git worktree add /tmp/before 98bd105 &&
# cmake -S /tmp/before -B /tmp/before/build && cmake --build /tmp/before/build --target
# lazyattn`); the client is AFTER_BUILD_DIR's bench_serve for both.
set -euo pipefail
before=${1:?usage: bench/bench_http_edge.sh BEFORE_BUILD_DIR [AFTER_BUILD_DIR] [ROUNDS] [OUT]}
after=${2:-build}
rounds=${3:-3}
out=${4:-bench/results/http_edge_cpu.json}
requests=${REQUESTS:-64}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$rounds"); do
  for side in before after; do
    dir=$before; [ "$side" = after ] && dir=$after
    "$after/bench_serve" --bin "$dir/lazyattn" --requests "$requests" --concurrency 1,8,32 \
      --out "$tmp/$side-$r.json" >&2
  done
done
before_commit=$(git -C "$(dirname "$(readlink -f "$before")")" rev-parse --short HEAD 2>/dev/null || echo unknown)
after_commit=$(git rev-parse --short HEAD)
python3 - "$tmp" "$rounds" "$out" "$before_commit" "$after_commit" "$0 $*" <<'EOF'
import json, statistics, sys
tmp, rounds, out, bc, ac, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
runs = {s: [json.load(open(f"{tmp}/{s}-{r}.json")) for r in range(1, rounds + 1)] for s in ("before", "after")}
summary = []
for i, lv in enumerate(runs["after"][0]["levels"]):
    row = {"concurrency": lv["concurrency"]}
    for s in ("before", "after"):
        row[s] = {k: statistics.median(run["levels"][i][k] for run in runs[s])
                  for k in ("requests_per_s", "ttft_ms_p50", "ttft_ms_p99", "server_ttft_ms_p50", "e2e_ms_p50")}
    summary.append(row)
doc = {"command": cmd, "bench_command": runs["after"][0]["command"],
       "before": {"commit": bc, "http": "libmicrohttpd thread per connection (poll)"},
       "after": {"commit": ac, "http": "libmicrohttpd epoll, worker pool (--http-threads default), parked connections"},
       "machine": runs["after"][0]["machine"], "model": runs["after"][0]["model"],
       "workload": runs["after"][0]["workload"], "rounds": rounds,
       "summary_medians": summary, "runs": runs}
json.dump(doc, open(out, "w"), indent=1)
print(f"{'conc':>4} {'req/s before':>12} {'after':>8} {'TTFT p50 before':>16} {'after':>8}")
for row in summary:
    b, a = row["before"], row["after"]
    print(f"{row['concurrency']:>4} {b['requests_per_s']:>12.2f} {a['requests_per_s']:>8.2f} "
          f"{b['ttft_ms_p50']:>13.1f} ms {a['ttft_ms_p50']:>5.1f} ms")
print(f"wrote {out}")
EOF
