#!/usr/bin/env bash
# Issue 30 on one H200 (after `scripts/device_gpu.sh prepare` here; carry .carry/dev), from the
# repository root with $OUT set:
#
#   LA_COMMIT=<sha> [LA_PHASES="tests train eval recovery"] bash tools/demo/device_causal.sh
#
#   tests     backend_test_cuda_forward (recovery and selected recovery on the GPU among them)
#   train     the ordinarily-trained tiny model: the bundled model's data, tokenizer and
#             architecture, trained for LA_TRAIN_S seconds (default 300) with FULL_FRAC=1 (every
#             batch plain causal attention, no block fine-tuning) into /tmp/rag-tiny-causal;
#             $OUT gets it as causal.tar.part-* (15 MB pieces; back here:
#             cat DIR/causal.tar.part-* | tar -C DEST -xf -). Without this phase the model is
#             taken from LA_CAUSAL_MODEL (a carried copy).
#   eval      `lazyattn eval` of that model on the 1000 held-out questions, 3 document orders,
#             methods LA_EVAL_METHODS (default: recompute, lazy, first-N and selected recovery)
#   recovery  recovery's TTFT on the Llama-3-8B shape at 8K beside recompute, prefix and lazy
#             (random weights: timing only), methods LA_RECOVERY_METHODS
#
# $OUT gets results.tgz (logs and JSON).
set -u
root=$(pwd)
: "${OUT:?OUT must be set (the device tool sets it)}"
final_out=$OUT
R=/tmp/causal_results
rm -rf "$R" && mkdir -p "$R"
trap 'tar -C "$R" -czf "$final_out/results.tgz" . 2>/dev/null' EXIT
t0=$(date +%s)
step() { echo "=== $* ($(($(date +%s) - t0)) s)"; }
. scripts/device_env.sh
la=$bin/lazyattn
phases=${LA_PHASES:-tests train eval recovery}
M=${LA_CAUSAL_MODEL:-/tmp/rag-tiny-causal}
echo "commit ${LA_COMMIT:-unknown}, phases: $phases" >"$R/run.txt"

for ph in $phases; do
case $ph in
tests)
    step "GPU forward tests"
    timeout ${LA_TEST_TIMEOUT:-150} $bin/backend_test_cuda_forward --jobs 1 >"$R/tests.log" 2>&1
    echo "tests exit $?"
    grep -E "Synthesis|FAIL|selected recovery|gpu recovery" "$R/tests.log" | head -20
    ;;
train)
    step "train the causal model"
    M=/tmp/rag-tiny-causal
    rm -rf "$M" && mkdir -p "$M"
    cp models/rag-tiny/tokenizer.json models/rag-tiny/tokenizer_config.json "$M/"
    LD_LIBRARY_PATH=$orig_ld MODEL_DIR=$M DATA_DIR=/tmp/causal_data STAGES="data train" FULL_FRAC=1.0 \
        TIME_BUDGET=${LA_TRAIN_S:-300} DEVICE=cuda bash tools/demo/run.sh >"$R/train.txt" 2>&1
    echo "train exit $?"
    tail -4 "$R/train.txt"
    cp "$M/train_log.json" "$R/" 2>/dev/null
    tar -C "$(dirname "$M")" -cf - "$(basename "$M")" | split -b 15m - "$final_out/causal.tar.part-"
    ;;
eval)
    step "eval"
    timeout ${LA_EVAL_TIMEOUT:-200} $la eval -m "$M" --dataset "$M/eval/test.jsonl" --device cuda \
        --methods ${LA_EVAL_METHODS:-recompute,lazy,lazy+r16,lazy+c15,lazy+c30,lazy+c50} --orders 3 --concurrency 32 \
        --json "$R/eval_causal_cuda.json" >"$R/eval_causal_cuda.txt" 2>"$R/eval_causal_cuda.err"
    echo "eval exit $?"
    cat "$R/eval_causal_cuda.txt"
    tail -3 "$R/eval_causal_cuda.err"
    ;;
recovery)
    step "recovery TTFT, 8B shape"
    timeout ${LA_RECOVERY_TIMEOUT:-150} $la bench --random-weights llama3-8b --tokenizer /tmp/la/data/llama3-tokenizer \
        --dataset synthetic --docs-per-request 10 --doc-tokens 800 --pool-docs 10 --requests 16 --max-tokens 1 \
        --device cuda --methods ${LA_RECOVERY_METHODS:-recompute,prefix,lazy,lazy+r16,lazy+c15,lazy+c30} \
        --json "$R/bench_recovery_8b.json" >"$R/recovery.txt" 2>"$R/recovery.err"
    echo "bench recovery exit $?"
    grep -E "TTFT|p50|recomputed" "$R/recovery.txt" | head -12
    ;;
*) echo "unknown phase $ph" ;;
esac
done
step done
