#!/usr/bin/env bash
# The engine on the GPU (the device tool; run after `scripts/device_gpu.sh prepare` here,
# with carry [".carry/dev"] and $OUT set): the bundled model's evaluation through
# `lazyattn eval --device cuda` (all five methods, three document orders), the race,
# `lazyattn bench` on the demo set and on 2WikiMultihopQA with the Llama-3-8B shape
# (random weights: timing only), and recovery's TTFT beside lazy, prefix and recompute on the
# 8B shape at 8K tokens (10 reordered documents of 800). Everything lands in $OUT:
#   eval_cuda.json eval_cuda.txt race_cuda.txt bench_rag_tiny_gpu.json
#   bench_2wiki_8b_gpu.json bench.txt bench_recovery_8b.json recovery.txt
#
#   LA_PHASES="eval race bench recovery" (the default: all) picks phases.
#   LA_COMMIT=$(git rev-parse --short HEAD) bash scripts/device_engine.sh
# (LA_COMMIT goes into each JSON's machine.commit: the copied tree's git history, if any,
# is stale.) LA_CUDA_GRAPHS=0 runs the engine without CUDA graphs for decode (on by default).
set -u
: "${OUT:?OUT must be set (the device tool sets it)}"
t_start=$(date +%s)
root=$(pwd)
. scripts/device_env.sh
la=/tmp/la/bin/lazyattn
M=models/rag-tiny
step() { echo "=== $* ($(($(date +%s) - t_start)) s)"; }
PHASES=" ${LA_PHASES:-eval race bench recovery} "
has() { [[ "$PHASES" == *" $1 "* ]]; }

if has eval; then
step eval
timeout ${LA_EVAL_TIMEOUT:-200} $la eval -m $M --dataset $M/eval/test.jsonl --device cuda \
    --methods lazy,mepic,block,block-ref,recompute --orders 3 --concurrency 32 \
    --json "$OUT/eval_cuda.json" >"$OUT/eval_cuda.txt" 2>"$OUT/eval_cuda.err"
echo "eval exit $?"; cat "$OUT/eval_cuda.txt"; tail -3 "$OUT/eval_cuda.err"
fi

if has race; then
step race
timeout 40 $la race -m $M --device cuda --question 5 >"$OUT/race_cuda.txt" 2>&1
echo "race exit $?"; tail -8 "$OUT/race_cuda.txt"
fi

if has bench; then
step bench
{
    timeout 60 $la bench -m $M --dataset $M/eval/test.jsonl --device cuda --requests 64 \
        --json "$OUT/bench_rag_tiny_gpu.json"
    echo "bench rag-tiny exit $?"
    timeout 90 $la bench --random-weights llama3-8b --tokenizer /tmp/la/data/llama3-tokenizer \
        --dataset /tmp/la/data/2wiki.jsonl --device cuda --requests 32 --max-tokens 32 --ignore-eos \
        --json "$OUT/bench_2wiki_8b_gpu.json"
    echo "bench 2wiki 8b exit $?"
} >"$OUT/bench.txt" 2>"$OUT/bench.err"
cat "$OUT/bench.txt"; tail -3 "$OUT/bench.err"
fi

if has recovery; then
step recovery
timeout 150 $la bench --random-weights llama3-8b --tokenizer /tmp/la/data/llama3-tokenizer --dataset synthetic \
    --docs-per-request 10 --doc-tokens 800 --pool-docs 10 --requests 16 --max-tokens 1 --device cuda \
    --methods recompute,prefix,lazy,lazy+r16,lazy+r64 --json "$OUT/bench_recovery_8b.json" \
    >"$OUT/recovery.txt" 2>"$OUT/recovery.err"
echo "bench recovery exit $?"; cat "$OUT/recovery.txt"; tail -3 "$OUT/recovery.err"
fi
step done
