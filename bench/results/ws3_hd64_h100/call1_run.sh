# Session of 2026-12-07 (fifteenth): attn_prefill v4 with three consumer warpgroups at
# head_dim 64 (w3, /work/w3's tree: producer_shuffle.diff + ws_config) against HEAD's (t1).
set -u
root=$(pwd); t0=$(date +%s)
export LA_COMMIT=${LA_COMMIT:-ed04b58+w3}
. scripts/device_env.sh
mkdir -p /tmp/w3 && tar -C /tmp/w3 -xJf .carry/dev13/bundle.tar.xz
[ -e /work/w3 ] || ln -sfn "$root" /work/w3
nvidia-smi --query-gpu=name,serial,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
el() { echo $(( $(date +%s) - t0 )); }
show() { python3 - "$1" <<'PY'
import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception as e: print("  no json", e); sys.exit()
for s in d['shapes']:
  for r in s['ttft']:
    pm=r.get('profile_ms') or {}
    print("  %s %s ctx %s %s %.3f ms = %.3fx floor, attn %.3f ms" % (s['shape'] if isinstance(s['shape'],str) else s['shape'].get('name'), r['method'], r.get('context'), r.get('prefill_kernel'), r['ttft_ms'], r['ratio_to_floor'], (pm.get('attn_prefill') or {}).get('ms', -1)))
PY
}
b_w3=/tmp/w3/bin/bench_gpu_w3; b_t1=$bin/bench_gpu
cd /work/main
timeout ${T_TESTS:-240} /tmp/w3/bin/test_kernels_w3 --jobs 1 --filter 'cuda_attention/*' > $OUT/tests_w3.log 2>&1; echo "tests w3 rc $? ($(el) s)"; grep -E "Synthesis|FAIL|ASSERT" $OUT/tests_w3.log | head -20
timeout 120 /tmp/w3/bin/test_shared_w3 --jobs 1 > $OUT/tests_shared_w3.log 2>&1; echo "shared tests w3 rc $? ($(el) s)"; grep -E "Synthesis|FAIL" $OUT/tests_shared_w3.log | head
cd $root
i=0
for v in ${LA_VARS-w3 t1 w3 t1}; do
  i=$((i+1)); b=b_$v
  timeout 90 ${!b} --commit $LA_COMMIT --shapes llama3.2-1b --contexts 8192 --methods recompute,prefix,lazy --no-tpot --no-engine --reps 5 --out $OUT/b1_${i}_$v.json > $OUT/b1_${i}_$v.txt 2>&1
  echo "--- 1B $i $v rc $? ($(el) s)"; show $OUT/b1_${i}_$v.json
done
for v in ${LA_VARS8-w3 t1}; do
  i=$((i+1)); b=b_$v
  timeout 100 ${!b} --commit $LA_COMMIT --shapes llama3-8b --contexts 8192 --methods recompute,lazy --no-tpot --no-engine --reps 3 --out $OUT/b8_${i}_$v.json > $OUT/b8_${i}_$v.txt 2>&1
  echo "--- 8B $i $v rc $? ($(el) s)"; show $OUT/b8_${i}_$v.json
done
cd /work/main
[ $(el) -lt 420 ] && timeout $((540 - $(el))) /tmp/w3/bin/test_forward_w3 --jobs 1 > $OUT/tests_forward_w3.log 2>&1; echo "forward tests w3 rc $? ($(el) s)"; grep -E "Synthesis|FAIL" $OUT/tests_forward_w3.log | head
echo "done ($(el) s)"
