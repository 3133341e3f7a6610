#!/usr/bin/env bash
# Rebuild the bundled demo model models/rag-tiny from nothing: data, tokenizer,
# Block-FT training, export, checks, HF evaluation. Needs python3 with torch,
# transformers, tokenizers, safetensors, numpy; a CUDA GPU for training (one H200:
# 7 minutes of training). Deterministic data and tokenizer; training itself is
# not bit-reproducible on a GPU (and stops at TIME_BUDGET seconds if that comes first).
#
#   tools/demo/run.sh                      # everything
#   STAGES="data eval" tools/demo/run.sh   # only some stages (data tok train check eval)
#
# Knobs (environment): MODEL_DIR (models/rag-tiny), DATA_DIR (tools/demo/data),
# STEPS, TIME_BUDGET (seconds), BATCH, QUESTIONS (packed per example), LR, WARMUP, CURRICULUM,
# LM_WEIGHT, FULL_FRAC, N_TEST, DEVICE, TRAIN_ARGS / EVAL_ARGS (extra arguments; e.g.
# TRAIN_ARGS="--init models/rag-tiny --start-batch 7000" continues from the current weights).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
PY=${PYTHON:-python3}
MODEL_DIR=${MODEL_DIR:-models/rag-tiny}
DATA_DIR=${DATA_DIR:-tools/demo/data}
STAGES=${STAGES:-data tok train check eval}
N_TEST=${N_TEST:-1000}
has() { [[ " $STAGES " == *" $1 "* ]]; }

if has data; then
    $PY tools/demo/gen_data.py --out "$DATA_DIR" --n-val 500 --n-test "$N_TEST" --n-train-sample 20000
    mkdir -p "$MODEL_DIR/eval"
    cp "$DATA_DIR/test.jsonl" "$MODEL_DIR/eval/test.jsonl"
fi
if has tok; then
    $PY tools/demo/make_tokenizer.py --corpus "$DATA_DIR/train_sample.jsonl" --out "$MODEL_DIR" --vocab-size 3072
fi
if has train; then
    $PY tools/demo/train.py --tokenizer "$MODEL_DIR" --out "$MODEL_DIR" --val "$DATA_DIR/val.jsonl" \
        --steps "${STEPS:-100000}" --time-budget "${TIME_BUDGET:-450}" --batch "${BATCH:-64}" \
        --questions "${QUESTIONS:-6}" \
        --lr "${LR:-1.5e-3}" --warmup "${WARMUP:-300}" --curriculum "${CURRICULUM:-1200}" \
        --lm-weight "${LM_WEIGHT:-0}" --full-frac "${FULL_FRAC:-0.25}" ${DEVICE:+--device "$DEVICE"} \
        --log-json "$MODEL_DIR/eval/train_log.json" ${TRAIN_ARGS:-}
fi
if has check; then
    $PY tools/demo/check_export.py --model "$MODEL_DIR" --test "$MODEL_DIR/eval/test.jsonl"
fi
if has eval; then
    $PY tools/demo/eval_hf.py --model "$MODEL_DIR" --test "$MODEL_DIR/eval/test.jsonl" \
        --out "$MODEL_DIR/eval/hf_results.json" --orders 3 --card "$MODEL_DIR/README.md" \
        ${DEVICE:+--device "$DEVICE"} ${EVAL_ARGS:-}
fi
