# Session of 2026-12-07 (fifteenth), third call: on an H200 (the GPU) the engine's
# shared-KV sweep with today's engine (shared attention auto, the default token budget), then
# bench_gpu's 1B / 8B rows of the landed kernel (w3) with TPOT; on an H100 nothing (measured
# there already).
set -u
root=$(pwd); t0=$(date +%s)
export LA_COMMIT=${LA_COMMIT:-c1fa3ba}
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,serial,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
grep -q H200 $R/gpu.txt || { echo "not an H200: nothing to run"; exit 0; }
. scripts/device_env.sh
mkdir -p /tmp/v && tar -C /tmp/v -xJf .carry/dev14/bundle.tar.xz
el() { echo $(( $(date +%s) - t0 )); }
common="--random-weights llama3-8b --device cuda --dataset synthetic --docs-per-request 1 --doc-tokens 7000
        --pool-docs 1 --methods prefix,lazy --max-tokens 32 --ignore-eos"
for run in "c1000:--concurrency 1000 --requests 1000" "sweep:--sweep concurrency --points 64,256" "c1:--concurrency 1 --requests 16"; do
  name=${run%%:*}
  [ $(el) -gt 300 ] && break
  # shellcheck disable=SC2086
  timeout 150 $bin/lazyattn bench $common ${run#*:} --json $R/engine_$name.json > $R/engine_$name.txt 2> $R/engine_$name.err
  echo "engine $name rc $? ($(el) s)"; tail -8 $R/engine_$name.txt
done
if [ $(el) -lt 320 ]; then
  timeout 120 /tmp/v/bin/bench_gpu_w3 --commit $LA_COMMIT --shapes llama3.2-1b,llama3-8b --contexts 8192 --reps 3 \
    --methods recompute,prefix,lazy --tpot-batches 1,8 --tpot-kinds plain,lazy --no-engine --out $R/gpu_1b_8b.json > $R/shapes.txt 2>&1
  echo "shapes rc $? ($(el) s)"; grep -E "ctx|TPOT|decode" $R/shapes.txt | head -40
fi
cd $OUT && tar czf r.tgz r && rm -rf r
echo "done ($(el) s)"
