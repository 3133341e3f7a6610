set -u
root=$(pwd); t0=$(date +%s)
export LA_COMMIT=${LA_COMMIT:-26c78ad+producer}
export LA_BUNDLE=.carry/dev11/bundle.tar.xz
. scripts/device_env.sh
nvidia-smi --query-gpu=name,serial,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
el() { echo $(( $(date +%s) - t0 )); }
show() { python3 - "$1" <<'PY'
import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception as e: print("  no json", e); sys.exit()
for s in d['shapes']:
  for r in s['ttft']:
    if r.get('method') in ('recompute','lazy','prefix'):
      pm=r.get('profile_ms') or {}
      print("  %s %s %s %.3f ms = %.3fx floor, attn %.3f ms" % (s['shape'] if isinstance(s['shape'],str) else s['shape'].get('name'), r['method'], r.get('prefill_kernel'), r['ttft_ms'], r['ratio_to_floor'], (pm.get('attn_prefill') or {}).get('ms', -1)))
PY
}
mkdir -p $OUT/r
cd /work/main
timeout 150 $bin/test_kernels_new --jobs 1 --filter 'cuda_attention/*' > $OUT/r/tests_new.log 2>&1; echo "tests new rc $? ($(el) s)"; tail -1 $OUT/r/tests_new.log
cd $root
i=0
for v in ${LA_VARS-new t1 new t1 t1 new}; do
  i=$((i+1))
  timeout 90 $bin/bench_gpu_$v --commit $LA_COMMIT --shapes llama3.2-1b --contexts 8192 --methods recompute --no-tpot --no-engine --reps 5 --out $OUT/r/rc_${i}_$v.json > $OUT/r/rc_${i}_$v.txt 2>&1
  echo "--- $i $v rc $? ($(el) s)"; show $OUT/r/rc_${i}_$v.json
done
for v in ${LA_VARS8-new t1 t1 new}; do
  i=$((i+1))
  timeout 90 $bin/bench_gpu_$v --commit $LA_COMMIT --shapes llama3-8b --contexts 8192 --methods recompute --no-tpot --no-engine --reps 3 --out $OUT/r/rc8_${i}_$v.json > $OUT/r/rc8_${i}_$v.txt 2>&1
  echo "--- 8B $i $v rc $? ($(el) s)"; show $OUT/r/rc8_${i}_$v.json
done
cd $OUT && tar czf r.tgz r && rm -rf r
echo "done ($(el) s)"
