#!/usr/bin/env bash
# The LazyAttention paper's experiments in one command (issue 25; bench/EXPERIMENTS.md), each
# one `lazyattn bench` or `lazyattn eval` invocation writing JSON, then the report:
#
#   scripts/paper_experiments.sh [--scale paper|small] [--device cuda|cpu] [--out DIR]
#                                [--only "rq1 rq2 rq3 rq4 shared long"] [--bin PATH]
#
# paper (default): the paper's sizes on the Llama-3.1-8B shape with random weights (timing
#   only: the JSON and the report say so), on the GPU. On the H200 in two device calls of at
#   most 10 minutes: --only "rq2 rq1" and --only "rq4 rq3 shared long". With LA_DEADLINE set
#   (epoch seconds) no command runs past it: one that would is cut or skipped, and counted failed.
# small: the same commands at tiny sizes on the bundled model, on the CPU: the code path and
#   the JSON the report reads, in about a minute (tests/bench/test_paper_suite.py runs it).
#
# Every bench point has a duration bound (--duration): an overloaded point ends there and is
# reported saturated (achieved rate, requests cut), and each command runs under `timeout`.
# Writes DIR/<experiment>.json (DIR: bench/results/paper/<scale>), DIR/<experiment>.txt (the
# command's table), DIR/report.md (tools/paper_report.py), and exits 1 if any command failed.
set -u
cd "$(dirname "$0")/.."
scale=paper device= out= only="rq1 rq2 rq3 rq4 shared long" bin=build/lazyattn
while [ $# -gt 0 ]; do
    case "$1" in
    --scale) scale=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "paper_experiments.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
    esac
done
data=${LA_DATA_DIR:-../shared/data}
case "$scale" in
paper)
    device=${device:-cuda}
    model=(--random-weights llama3.1-8b --tokenizer "$data/tokenizers/llama3")
    # name=value sizes, read by the experiments below
    # sized for device calls of 10 minutes on an H200 (GPU_NOTES "paper"): rq1 with 120 warm-up
    # draws a point took 455 s for its first 13 of 20 (point, method) runs, most of it warm-up:
    # 20 draws after the cover pass now, and 8 s points
    S=(pool=100 doc=2048 per=5 rq1_requests=120 rq1_points=1,2,4,8 rq1_duration=8 warm_draws=20 rq2_requests=60
       rq2_conc=16 probe_doc=16384 probe_out=128 shared_doc=16384 shared_points=1,10,100,1000
       shared_requests=1000 shared_duration=20 shared_warm=100 long_doc=10000 long_pool=40 doc32k=32000 out32k=512
       eval_limit=200 eval_docs=10 out_tokens=32 tmax=600) ;;
small)
    device=${device:-cpu}
    model=(-m models/rag-tiny --threads 2)
    S=(pool=6 doc=32 per=2 rq1_requests=6 rq1_points=4,256 rq1_duration=1 warm_draws=2 rq2_requests=8
       rq2_conc=4 probe_doc=256 probe_out=16 shared_doc=128 shared_points=1,8 shared_requests=8
       shared_duration=2 shared_warm=2 long_doc=96 long_pool=6 doc32k=400 out32k=16 eval_limit=2 eval_docs=3
       out_tokens=4 tmax=120) ;;
*) echo "paper_experiments.sh: --scale is paper or small, not '$scale'" >&2; exit 2 ;;
esac
for kv in "${S[@]}"; do declare "${kv%%=*}=${kv#*=}"; done
out=${out:-bench/results/paper/$scale}
mkdir -p "$out"
failed=0

# seconds the next command may run: tmax, or less before $LA_DEADLINE (epoch seconds; the
# device call's end, less 30 s to pack the results); 0 when no time is left
limit() {
    local t=$tmax
    if [ -n "${LA_DEADLINE:-}" ]; then
        local left=$((LA_DEADLINE - $(date +%s) - 30))
        [ "$left" -lt "$t" ] && t=$left
        [ "$t" -lt 0 ] && t=0
    fi
    echo "$t"
}

# bench NAME ARGS...: one bench invocation into $out/NAME.json and NAME.txt
bench() {
    local name=$1 t
    shift
    rm -f "$out/$name.json" # a command skipped or cut must not leave an older result to report
    t=$(limit)
    if [ "$t" -le 0 ]; then echo "$name: skipped, no time left before LA_DEADLINE"; failed=1; return; fi
    echo "=== $name: lazyattn bench $*"
    timeout -k 10 "$t" "$bin" bench "${model[@]}" --device "$device" --dataset synthetic --ignore-eos \
        --json "$out/$name.json" "$@" >"$out/$name.txt" 2>"$out/$name.err"
    local rc=$?
    echo "$name: exit $rc"
    [ $rc -eq 0 ] || { failed=1; tail -3 "$out/$name.err"; }
}

run_rq1() { # RQ1: TTFT against the Poisson rate, up to saturation
    bench rq1_rate --pool-docs "$pool" --doc-tokens "$doc" --docs-per-request "$per" --zipf 2.1 \
        --requests "$rq1_requests" --sweep rate --points "$rq1_points" --duration "$rq1_duration" --warmup-draws "$warm_draws" \
        --max-tokens "$out_tokens"
}
run_rq2() { # RQ2: document hit ratio against KV capacity (% of the pool's document blocks)
    bench rq2_kv --pool-docs "$pool" --doc-tokens "$doc" --docs-per-request "$per" --zipf 2.1 \
        --requests "$rq2_requests" --concurrency "$rq2_conc" --sweep kv --points 30,60,90 --max-tokens 8 \
        --warmup-draws "$warm_draws" \
        --methods prefix,block,mepic,lazy
}
run_rq3() { # RQ3: the decode probe, one long document, lazy / mepic against plain attention
    bench rq3_decode --pool-docs 1 --docs-per-request 1 --doc-tokens "$probe_doc" --requests 4 \
        --max-tokens "$probe_out" --methods recompute,mepic,lazy
}
run_shared() { # many requests on one document (DESIGN.md §10)
    bench shared_kv --pool-docs 1 --docs-per-request 1 --doc-tokens "$shared_doc" --sweep concurrency \
        --points "$shared_points" --requests "$shared_requests" --duration "$shared_duration" --max-tokens "$out_tokens" \
        --warmup-draws "$shared_warm" \
        --methods prefix,lazy
}
run_long() { # long context; the cover pass caches every document, so no popularity draws:
    # they would only repeat cached documents, at a full prefill each for recompute and prefix
    # (~50 s of the call at the paper's sizes)
    bench long_5x10k --pool-docs 5 --docs-per-request 5 --doc-tokens "$long_doc" --requests 4 --max-tokens "$out_tokens" \
        --warmup-draws 0
    bench long_8x5x10k --pool-docs "$long_pool" --docs-per-request 5 --doc-tokens "$long_doc" --requests 8 \
        --concurrency 8 --max-tokens "$out_tokens" --warmup-draws 0
    bench long_32k --pool-docs 1 --docs-per-request 1 --doc-tokens "$doc32k" --requests 2 \
        --max-tokens "$out32k" --methods recompute,prefix,mepic,lazy --warmup-draws 0
}
run_rq4() { # RQ4: answers on real data, the bundled model (trained weights) on $device
    for ds in 2wikimultihopqa/2wikimultihopqa_dev_first200_flashrag.jsonl \
              hotpotqa/hotpotqa_dev_distractor_ircot_500.jsonl nq/nq-open-oracle.jsonl.gz \
              triviaqa/retrievalqa_triviaqa_subset50.jsonl; do
        name=rq4_$(basename "${ds%%/*}")
        rm -f "$out/$name.json"
        t=$(limit)
        if [ "$t" -le 0 ]; then echo "$name: skipped, no time left before LA_DEADLINE"; failed=1; continue; fi
        echo "=== $name: lazyattn eval on $ds"
        timeout -k 10 "$t" "$bin" eval -m models/rag-tiny --device "$device" --dataset "$data/$ds" \
            --methods block-ref,lazy,mepic,block,recompute --limit "$eval_limit" --max-docs "$eval_docs" --max-tokens 16 \
            --json "$out/$name.json" >"$out/$name.txt" 2>"$out/$name.err"
        rc=$?
        echo "$name: exit $rc"
        [ $rc -eq 0 ] || { failed=1; tail -3 "$out/$name.err"; }
    done
}
for x in $only; do # every name checked before anything runs
    case "$x" in
    rq1 | rq2 | rq3 | rq4 | shared | long) ;;
    *) echo "paper_experiments.sh: unknown experiment '$x' (rq1 rq2 rq3 rq4 shared long)" >&2; exit 2 ;;
    esac
done
# in the order --only names them: a device call that runs out of time loses its last one
for x in $only; do "run_$x"; done
python3 tools/paper_report.py "$out" --scale "$scale" >"$out/report.md" || failed=1
echo "wrote $out/report.md"
exit $failed
