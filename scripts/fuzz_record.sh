#!/usr/bin/env bash
# A longer run of every libFuzzer harness (README "Fuzzing"), recorded in
# bench/results/fuzz.json as {"targets": [{"target", "cpu_s", "execs", "crashes", "commit"}]}.
#
#   scripts/fuzz_record.sh [SECONDS_PER_TARGET (3600)] [JOBS (2)]
#
# Builds build-fuzz (make fuzz's) and runs the harnesses JOBS at a time, each for the given
# seconds on one core from its ctest corpus; a crash is counted and its input kept in
# build-fuzz/crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3600} jobs=${2:-2}
make --no-print-directory fuzz FUZZ_SECONDS=1 >/dev/null
commit=$(git rev-parse --short HEAD)
out=build-fuzz/fuzz-record
rm -rf "$out" && mkdir -p "$out"
targets=$(cd build-fuzz && ls fuzz_* | grep -v '\.' )
run_one() {
    local t=$1 name=${1#fuzz_}
    local corpus=build-fuzz/fuzz-corpus/$name
    mkdir -p "$corpus"
    local t0=$(date +%s)
    (cd build-fuzz && "./$t" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=20 \
        -print_final_stats=1 "fuzz-corpus/$name" >"fuzz-record/$name.log" 2>&1) || true
    echo "$name $(( $(date +%s) - t0 ))" >"$out/$name.time"
}
export -f run_one
export secs out
printf '%s\n' $targets | xargs -P "$jobs" -I{} bash -c 'run_one {}'
python3 - "$out" "$commit" "$secs" <<'PY'
import glob, json, os, re, sys
out, commit, secs = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = []
for log in sorted(glob.glob(f"{out}/*.log")):
    name = os.path.basename(log)[:-4]
    text = open(log, errors="replace").read()
    execs = re.search(r"stat::number_of_executed_units:\s*(\d+)", text)
    wall = int(open(f"{out}/{name}.time").read().split()[1])
    rows.append({"target": name, "cpu_s": wall, "execs": int(execs.group(1)) if execs else None,
                 "crashes": 1 if "Test unit written to" in text else 0, "commit": commit})
json.dump({"command": f"scripts/fuzz_record.sh {secs}", "note": "each harness on one core for cpu_s seconds "
           "(wall time of a single-threaded libFuzzer run), clang 14 libFuzzer with ASan and UBSan",
           "targets": rows}, open("bench/results/fuzz.json", "w"), indent=1)
for r in rows: print(r)
PY
