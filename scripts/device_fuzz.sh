#!/usr/bin/env bash
# The libFuzzer harnesses on the GPU machine's idle cores (issue 28's hour per target):
#
#   scripts/device_fuzz.sh prepare          here, after `make fuzz`: the harnesses, their
#                                           corpora (tools/fuzz_run.py stage) and the
#                                           libraries the GPU machine lacks, packed into
#                                           .carry/fuzz/bundle.tar.xz
#   LA_COMMIT=<sha> bash scripts/device_fuzz.sh run SECONDS [PROCS_PER_TARGET (2)]
#                                           there (carry [".carry/fuzz"], $OUT set): every
#                                           harness PROCS times at nice 19 (beside a GPU run, or
#                                           alone); the record comes back as
#                                           $OUT/fuzz_<commit>_<time>.json, crash inputs (if
#                                           any) as $OUT/fuzz_artifacts.tgz; LA_FUZZ_BUNDLE=
#                                           .carry/paper/bundle.tar.xz beside device_paper.sh
# Merge the records here: tools/fuzz_run.py merge bench/results/fuzz_runs/*.json --into
# bench/results/fuzz.json
set -u
mode=${1:-run}
if [ "$mode" = prepare ]; then
    set -e
    test -f build-fuzz/CMakeCache.txt || { echo "device_fuzz.sh: run make fuzz first" >&2; exit 2; }
    st=.carry/fuzz-stage
    rm -rf "$st" .carry/fuzz && mkdir -p "$st" .carry/fuzz
    python3 tools/fuzz_run.py stage build-fuzz "$st"
    . scripts/device_pack.sh
    la_pack_libs "$st/lib" "$st"/bin/fuzz_*
    strip --strip-debug "$st"/bin/fuzz_* # sanitizer reports keep function names
    tar -C "$st" -cJf .carry/fuzz/bundle.tar.xz bin lib corpus
    ls -la .carry/fuzz/bundle.tar.xz
    exit 0
fi
: "${OUT:?OUT must be set (the device tool sets it)}"
secs=${2:?seconds per process} procs=${3:-2}
root=$(pwd)
# the harnesses read fixtures under the source path they were built with
if [ ! -e /work/main/tests ]; then mkdir -p /work && ln -sfn "$root" /work/main; fi
d=/tmp/lafuzz
rm -rf "$d" && mkdir -p "$d" && tar -C "$d" -xJf "${LA_FUZZ_BUNDLE:-.carry/fuzz/bundle.tar.xz}"
commit=${LA_COMMIT:-unknown}
rec="$OUT/fuzz_${commit}_$(date -u +%Y%m%dT%H%M%S).json"
# LA_FUZZ_PROCS_FOR="api_request=4 ...": another process count for those targets
more=()
for spec in ${LA_FUZZ_PROCS_FOR:-}; do more+=(--procs-for "$spec"); done
LD_LIBRARY_PATH=$d/lib python3 tools/fuzz_run.py run "$d" --seconds "$secs" --procs "$procs" --commit "$commit" --json "$rec" "${more[@]}"
rc=$?
if [ -n "$(find "$d/artifacts" -type f 2>/dev/null | head -1)" ]; then tar -C "$d" -czf "$OUT/fuzz_artifacts.tgz" artifacts logs; fi
exit $rc
