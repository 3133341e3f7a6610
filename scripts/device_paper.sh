#!/usr/bin/env bash
# The paper's experiments on the GPU machine (issue 25; bench/EXPERIMENTS.md):
#
#   scripts/device_paper.sh prepare                  here: build lazyattn in .carry/build and
#                                                    pack it, the libraries the GPU machine
#                                                    lacks and the datasets into
#                                                    .carry/paper/bundle.tar.xz (with
#                                                    the fuzzers when staged: device_fuzz.sh;
#                                                    LA_PAPER_TESTS=1 adds the GPU tests
#                                                    staged by device_gpu.sh prepare)
#   LA_COMMIT=<sha> LA_BUDGET_S=595 bash scripts/device_paper.sh run "rq2 rq1"             # call 1: 537 s
#   LA_COMMIT=<sha> LA_BUDGET_S=595 bash scripts/device_paper.sh run "rq4 rq3 shared long" # call 2: 481 s
#   (d8cb6e6; device tool timeout_s 600; RQ2 first: an overrun cuts RQ1, not RQ2)
#
# run (on the GPU machine, carry [".carry/paper"], $OUT set): scripts/paper_experiments.sh at
# the paper's scale in the order given, every command cut before the call's 600 s end
# (LA_DEADLINE; $LA_BUDGET_S seconds from the start, default 570); the files come back as
# $OUT/paper.tar.gz (the tool returns at most 8 files), packed again after each experiment so
# that a call killed early keeps what finished, and the report as $OUT/report.md.
set -u
mode=${1:-run}
case "$mode" in
prepare | run) ;;
*) echo "device_paper.sh: prepare or run \"EXPERIMENTS\", not '$mode'" >&2; exit 2 ;;
esac
if [ "$mode" = prepare ]; then
    set -e
    cmake -S . -B .carry/build -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build .carry/build -j2 --target lazyattn
    st=.carry/paper-stage
    rm -rf "$st" .carry/paper && mkdir -p "$st/bin" "$st/data/shared" .carry/paper
    cp .carry/build/lazyattn "$st/bin/"
    . scripts/device_pack.sh
    la_pack_libs "$st/lib" .carry/build/lazyattn
    # scripts/paper_experiments.sh reads ../shared/data's layout
    data=${LA_SHARED_DATA:-../shared/data}
    for f in 2wikimultihopqa/2wikimultihopqa_dev_first200_flashrag.jsonl hotpotqa/hotpotqa_dev_distractor_ircot_500.jsonl \
             nq/nq-open-oracle.jsonl.gz triviaqa/retrievalqa_triviaqa_subset50.jsonl tokenizers/llama3/tokenizer.json \
             tokenizers/llama3/tokenizer_config.json; do
        mkdir -p "$st/data/shared/$(dirname "$f")" && cp "$data/$f" "$st/data/shared/$f"
    done
    # the fuzzers, when staged (scripts/device_fuzz.sh prepare), travel in this bundle too and
    # run on the idle cores beside it: two bundles would pass the carry limit
    # (LA_PAPER_FUZZ="api_request ...": only those); LA_PAPER_TESTS=1 adds the GPU test
    # binaries that scripts/device_gpu.sh prepare staged, so that one call runs both
    extra=
    if [ -d .carry/fuzz-stage/bin ]; then
        for t in ${LA_PAPER_FUZZ:-$(cd .carry/fuzz-stage/bin && ls fuzz_* | sed 's/^fuzz_//')}; do
            cp ".carry/fuzz-stage/bin/fuzz_$t" "$st/bin/" && mkdir -p "$st/corpus" && cp -r ".carry/fuzz-stage/corpus/$t" "$st/corpus/"
        done
        cp -n .carry/fuzz-stage/lib/* "$st/lib/"
        extra=corpus
    fi
    if [ "${LA_PAPER_TESTS:-0}" = 1 ]; then
        cp .carry/stage/bin/backend_test_cuda_* "$st/bin/" && cp -n .carry/stage/lib/* "$st/lib/"
        rm -f "$st/lib/libjemalloc.so.2" "$st/lib/liblzf.so.1" # redis-server's, not carried here
    fi
    XZ_OPT=-9e tar -C "$st" -cJf .carry/paper/bundle.tar.xz bin lib data $extra
    ls -la .carry/paper/bundle.tar.xz
    exit 0
fi
: "${OUT:?OUT must be set (the device tool sets it)}"
case "${LA_BUDGET_S:-570}" in
'' | *[!0-9]*) echo "device_paper.sh: LA_BUDGET_S is seconds, not '$LA_BUDGET_S'" >&2; exit 2 ;;
esac
export LA_DEADLINE=$(($(date +%s) + 10#${LA_BUDGET_S:-570}))
root=$(pwd)
LA_BUNDLE=.carry/paper/bundle.tar.xz
. scripts/device_env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/nvidia_smi.txt" 2>&1
rm -rf /tmp/paper && mkdir -p /tmp/paper # a warm machine's earlier call must not leave its results in this one's
only=${2:-rq1 rq2 rq3 rq4 shared long}
for x in $only; do # every name checked before the first runs
    case "$x" in rq1 | rq2 | rq3 | rq4 | shared | long) ;; *) echo "device_paper.sh: unknown experiment '$x'" >&2; exit 2 ;; esac
done
echo "{\"commit\": \"${LA_COMMIT:-unknown}\", \"machine\": \"$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)\", \"only\": \"$only\"}" >/tmp/paper/run_$(echo "$only" | tr ' ' _).json
# one experiment at a time, packed after each: a call killed before its end keeps what finished
rc=0
for x in $only; do
    LA_DATA_DIR=/tmp/la/data/shared bash scripts/paper_experiments.sh --scale paper --device cuda \
        --bin "$bin/lazyattn" --only "$x" --out /tmp/paper || rc=1
    cp /tmp/paper/report.md "$OUT/report.md" 2>/dev/null
    tar -C /tmp -czf "$OUT/paper.tar.gz.part" paper && mv "$OUT/paper.tar.gz.part" "$OUT/paper.tar.gz"
done
exit $rc
