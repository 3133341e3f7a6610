# Session of 2026-12-07 (fifteenth), second call: w3 (three consumer warpgroups at head_dim
# 64) against its variants (s2 / s3: 2 or 3 stages; p24 / p40: producer registers 24 / 40,
# consumers 160 / 152) and HEAD (t1); the 8B shape no worse; all of w3's kernel tests.
set -u
root=$(pwd); t0=$(date +%s)
export LA_COMMIT=${LA_COMMIT:-ed04b58+w3}
. scripts/device_env.sh
mkdir -p /tmp/v && tar -C /tmp/v -xJf .carry/dev14/bundle.tar.xz
[ -e /work/w3 ] || ln -sfn "$root" /work/w3
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,serial,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
el() { echo $(( $(date +%s) - t0 )); }
show() { grep -E "^  (recompute|prefix|lazy) " "$1" | sed 's/^/  /'; }
cp $bin/bench_gpu /tmp/v/bin/bench_gpu_t1
cd /work/main
timeout 200 /tmp/v/bin/test_kernels_w3 --jobs 1 > $R/tests_kernels_w3.log 2>&1; echo "kernel tests w3 rc $? ($(el) s)"; grep -E "Synthesis|FAIL" $R/tests_kernels_w3.log | head
cd $root
i=0
for v in w3 s2 s3 p24 p40 t1 t1 p40 p24 s3 s2 w3; do
  i=$((i+1))
  timeout 60 /tmp/v/bin/bench_gpu_$v --commit $LA_COMMIT --shapes llama3.2-1b --contexts 8192 --methods recompute,prefix --no-tpot --no-engine --reps 5 --out $R/b1_${i}_$v.json > $R/b1_${i}_$v.txt 2>&1
  echo "--- 1B $i $v rc $? ($(el) s)"; show $R/b1_${i}_$v.txt
done
for v in w3 t1 t1 w3; do
  i=$((i+1))
  timeout 90 /tmp/v/bin/bench_gpu_$v --commit $LA_COMMIT --shapes llama3-8b --contexts 8192 --methods recompute,prefix,lazy --no-tpot --no-engine --reps 3 --out $R/b8_${i}_$v.json > $R/b8_${i}_$v.txt 2>&1
  echo "--- 8B $i $v rc $? ($(el) s)"; show $R/b8_${i}_$v.txt
done
cd $OUT && tar czf r.tgz r && rm -rf r
echo "done ($(el) s)"
