#!/usr/bin/env bash
# The paper's experiments on the GPU machine (the device tool; after `scripts/device_gpu.sh
# prepare` here, with carry [".carry/dev"] and $OUT set): scripts/paper_experiments.sh at the
# paper's scale with the bundle's lazyattn and data; its files come back as $OUT/paper.tar.gz
# ($OUT returns at most 8 files) and its report as $OUT/report.md.
#
#   LA_COMMIT=<sha> bash scripts/device_paper.sh "rq1 rq2 rq3"     # call 1 (~9 min)
#   LA_COMMIT=<sha> bash scripts/device_paper.sh "shared long rq4" # call 2
set -u
: "${OUT:?OUT must be set (the device tool sets it)}"
root=$(pwd)
. scripts/device_env.sh
LA_DATA_DIR=/tmp/la/data/shared bash scripts/paper_experiments.sh --scale paper --device cuda \
    --bin "$bin/lazyattn" --only "${1:-rq1 rq2 rq3 rq4 shared long}" --out /tmp/paper
rc=$?
cp /tmp/paper/report.md "$OUT/report.md"
tar -C /tmp -czf "$OUT/paper.tar.gz" paper
exit $rc
