#!/usr/bin/env bash
# A longer run of every libFuzzer harness here (README "Fuzzing"), recorded in
# bench/results/fuzz_runs/ and summed into bench/results/fuzz.json
# ({"targets": [{"target", "cpu_s", "execs", "crashes", "commit"}]}; tools/fuzz_run.py).
#
#   scripts/fuzz_record.sh [SECONDS_PER_PROCESS (3600)] [PROCS_PER_TARGET (1)]
#
# Builds build-fuzz (make fuzz's) and runs every harness PROCS times at nice 19, all at once,
# from its ctest inputs; a crash is counted and its input kept in build-fuzz/fuzz-record/
# artifacts. scripts/device_fuzz.sh does the same on the GPU machine's cores.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-3600} procs=${2:-1}
make --no-print-directory fuzz FUZZ_SECONDS=1 >/dev/null
commit=$(git rev-parse --short HEAD)
d=build-fuzz/fuzz-record
rm -rf "$d"
python3 tools/fuzz_run.py stage build-fuzz "$d" >/dev/null
mkdir -p bench/results/fuzz_runs
rc=0
python3 tools/fuzz_run.py run "$d" --seconds "$secs" --procs "$procs" --commit "$commit" \
    --json "bench/results/fuzz_runs/fuzz_${commit}_$(date -u +%Y%m%dT%H%M%S).json" || rc=$?
# the inputs found go back to make fuzz's corpus, where the next run (and ctest) starts from
for c in "$d"/corpus/*; do mkdir -p "build-fuzz/fuzz-corpus/$(basename "$c")" && cp -n "$c"/* "build-fuzz/fuzz-corpus/$(basename "$c")/" 2>/dev/null || true; done
python3 tools/fuzz_run.py merge bench/results/fuzz_runs/*.json --into bench/results/fuzz.json
exit $rc
