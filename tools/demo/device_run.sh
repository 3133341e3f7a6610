#!/usr/bin/env bash
# The device call that (re)builds models/rag-tiny on one H200 (about 9.5 minutes):
#   run(kind="nvidia-h200", timeout_s=600, command="bash tools/demo/device_run.sh")
# A second call can continue training from the weights in models/rag-tiny (fresh optimizer,
# short warm-up, the stream resumed after the batches already seen):
#   run(..., command="CONTINUE_FROM=<steps so far> bash tools/demo/device_run.sh")
# Runs tools/demo/run.sh, then puts the model directory into $OUT as a tar split into
# 15 MB pieces (the tool returns files of at most 16 MiB). Back here, unpack with
#   cat /work/.device/N/model.tar.part-* | tar xf -     (in the repository root)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}
mkdir -p "$OUT"
if [ -n "${CONTINUE_FROM:-}" ]; then
    export TRAIN_ARGS="--init models/rag-tiny --start-batch $CONTINUE_FROM ${TRAIN_ARGS:-}"
    export WARMUP=${WARMUP:-100} CURRICULUM=0 LR=${LR:-1e-3}
    cp models/rag-tiny/eval/train_log.json "$OUT/train_log_before.json" 2>/dev/null
fi
STAGES="data train" bash tools/demo/run.sh > "$OUT/train.txt" 2>&1
rc=$?
tail -n 4 "$OUT/train.txt"
[ $rc -eq 0 ] || exit $rc
tar cf - models/rag-tiny | split -b 15m - "$OUT/model.tar.part-"   # in case eval runs out of time
STAGES="check eval" bash tools/demo/run.sh 2>&1 | grep -v 'Loading weights\|Warning\|forward_call' > "$OUT/eval.txt"
rc=$?
cat "$OUT/eval.txt"
tar cf - models/rag-tiny | split -b 15m - "$OUT/model.tar.part-"
exit $rc
