# Session of 2026-12-07 (fifteenth), second call: kv (the stacked [W_k; W_v] GEMM above 128
# rows, on w3) and its GPU tests; w3 (three consumer warpgroups at head_dim
# 64) against its variants (s2 / s3: 2 or 3 stages; p24 / p40: producer registers 24 / 40,
# consumers 160 / 152) and HEAD (t1); the 8B shape no worse; all of w3's kernel tests.
set -u
root=$(pwd); t0=$(date +%s)
export LA_COMMIT=${LA_COMMIT:-ed04b58+w3}
. scripts/device_env.sh
mkdir -p /tmp/v && tar -C /tmp/v -xJf .carry/dev14/bundle.tar.xz && tar -C /tmp/v -xJf .carry/dev16/bundle.tar.xz
[ -e /work/w3 ] || ln -sfn "$root" /work/w3
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,serial,clocks.max.sm,power.limit --format=csv > $R/gpu.txt; cat $R/gpu.txt
el() { echo $(( $(date +%s) - t0 )); }
show() { grep -E "^  (recompute|prefix|lazy) " "$1" | sed 's/^/  /'; }
cp $bin/bench_gpu /tmp/v/bin/bench_gpu_t1
cd /work/main
for t in test_fused_kv test_forward_kv test_kv_store_kv test_kernels_w3; do
  [ $(el) -gt 260 ] && break; timeout 120 /tmp/v/bin/$t --jobs 1 > $R/$t.log 2>&1; echo "$t rc $? ($(el) s)"; grep -E "Synthesis|FAIL" $R/$t.log | head -8
done
cd $root
i=0
for v in kv w3 s2 s3 p24 p40 t1 t1 p40 p24 s3 s2 w3 kv; do
  i=$((i+1))
  timeout 60 /tmp/v/bin/bench_gpu_$v --commit $LA_COMMIT --shapes llama3.2-1b --contexts 8192 --methods recompute,prefix --no-tpot --no-engine --reps 5 --out $R/b1_${i}_$v.json > $R/b1_${i}_$v.txt 2>&1
  echo "--- 1B $i $v rc $? ($(el) s)"; show $R/b1_${i}_$v.txt
done
for v in kv w3 t1 t1 w3 kv; do
  i=$((i+1))
  timeout 90 /tmp/v/bin/bench_gpu_$v --commit $LA_COMMIT --shapes llama3-8b --contexts 8192 --methods recompute,prefix,lazy --no-tpot --no-engine --reps 3 --out $R/b8_${i}_$v.json > $R/b8_${i}_$v.txt 2>&1
  echo "--- 8B $i $v rc $? ($(el) s)"; show $R/b8_${i}_$v.txt
done
# ncu's source view of one w3 launch in the 1B recompute (the 9th layer: the document encode
# runs 160 launches first)
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
if [ -n "$ncu" ] && [ $(el) -lt 300 ]; then
  timeout 150 "$ncu" --set full --import-source yes -k regex:attn_prefill_wgmma_ws_kernel --launch-skip 168 --launch-count 1 \
    -f -o /tmp/w3 /tmp/v/bin/bench_gpu_w3 --shapes llama3.2-1b --contexts 8192 --methods recompute --no-tpot --no-engine \
    --reps 1 --out /tmp/ncu_bench.json > $R/ncu.log 2>&1; echo "ncu rc $? ($(el) s)"
  "$ncu" --import /tmp/w3.ncu-rep --page details > $R/details_w3.txt 2>&1
  "$ncu" --import /tmp/w3.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $R/sass_w3.csv.gz
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Achieved Occupancy" $R/details_w3.txt | head -12
fi
cd $OUT && tar czf r.tgz r && rm -rf r
echo "done ($(el) s)"
