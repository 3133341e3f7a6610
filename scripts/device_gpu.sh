#!/usr/bin/env bash
# The GPU run (bench/GPU_NOTES.md). Two halves:
#
#   scripts/device_gpu.sh prepare   here (a machine with nvcc and the Debian -dev libraries):
#                                   build the GPU tests and bench_gpu in .carry/build (Release,
#                                   sm_90a) and pack them with every shared library they need
#                                   that the GPU machine lacks into .carry/dev/bundle.tar.xz
#                                   (the paper's runs and the fuzzers have their own bundles:
#                                   scripts/device_paper.sh prepare, scripts/device_fuzz.sh prepare)
#   scripts/device_gpu.sh run       on the GPU machine (builds nothing), from the repository
#                                   root, with $OUT set: unpack, run the GPU tests, bench_gpu
#                                   and the transformers peer; everything lands in $OUT:
#                                   nvidia_smi.txt tests.log bench.log gpu_h200.json
#                                   hf_peer.json hf.log (LA_HF=0 skips the peer)
#
# The run is given with the commit it measures: LA_COMMIT=<sha> scripts/device_gpu.sh run
set -u
mode=${1:-run}
root=$(pwd)

if [ "$mode" = prepare ]; then
    set -e
    cmake -S . -B .carry/build -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build .carry/build -j2 --target backend_test_cuda_kernels backend_test_cuda_forward backend_test_cuda_fused_gemm backend_test_cuda_kv_store backend_test_cuda_shared_attn backend_test_cpu_kernels bench_gpu bench_sampling lazyattn
    rm -rf .carry/stage && mkdir -p .carry/stage/bin .carry/stage/lib .carry/stage/data .carry/dev
    bins="backend_test_cuda_kernels backend_test_cuda_forward backend_test_cuda_fused_gemm backend_test_cuda_kv_store backend_test_cuda_shared_attn backend_test_cpu_kernels bench_gpu bench_sampling lazyattn"
    # the engine runs (scripts/device_engine.sh) read a real RAG file and the Llama-3
    # tokenizer; ../shared does not travel to the GPU machine
    data=${LA_SHARED_DATA:-../shared/data}
    cp "$data/2wikimultihopqa/2wikimultihopqa_dev_first200_flashrag.jsonl" .carry/stage/data/2wiki.jsonl
    mkdir -p .carry/stage/data/llama3-tokenizer
    cp "$data/tokenizers/llama3/tokenizer.json" "$data/tokenizers/llama3/tokenizer_config.json" .carry/stage/data/llama3-tokenizer/
    for b in $bins; do cp .carry/build/$b .carry/stage/bin/; done
    . scripts/device_pack.sh
    la_pack_libs .carry/stage/lib $(for b in $bins; do echo .carry/build/$b; done)
    # the shared tier's runs (issue 22) need a redis-server there: Debian's, with the two
    # libraries Ubuntu's image lacks
    if command -v redis-server >/dev/null; then
        cp "$(command -v redis-server)" "$(command -v redis-cli)" .carry/stage/bin/
        for lib in liblzf.so.1 libjemalloc.so.2; do cp -L "/lib/x86_64-linux-gnu/$lib" .carry/stage/lib/; done
    fi
    tar -C .carry/stage -cJf .carry/dev/bundle.tar.xz bin lib data
    ls -la .carry/dev/bundle.tar.xz
    exit 0
fi

: "${OUT:?OUT must be set (the device tool sets it)}"
t_start=$(date +%s)
. scripts/device_env.sh
{
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total --format=csv
    echo "cuBLAS from: ${cublas:-not found}"
    ldd /tmp/la/bin/bench_gpu | grep -E 'not found|cublas'
} >"$OUT/nvidia_smi.txt" 2>&1

cd /work/main
for t in backend_test_cuda_kernels backend_test_cuda_forward backend_test_cuda_fused_gemm backend_test_cuda_kv_store backend_test_cuda_shared_attn; do
    echo "=== $t" >>"$OUT/tests.log"
    timeout ${LA_TEST_TIMEOUT:-75} /tmp/la/bin/$t --jobs 1 >>"$OUT/tests.log" 2>&1
    echo "=== $t exit $?" >>"$OUT/tests.log"
done
grep -E '^===|Synthesis|FAIL|\[----\]' "$OUT/tests.log" | head -40

timeout ${LA_BENCH_TIMEOUT:-150} /tmp/la/bin/bench_gpu --commit "${LA_COMMIT:-unknown}" --out "$OUT/gpu_h200.json" \
    ${LA_BENCH_ARGS:-} 2>"$OUT/bench.log"
echo "bench_gpu exit $?"
cat "$OUT/bench.log" | tail -60

if [ "${LA_HF:-1}" = 1 ]; then
    LD_LIBRARY_PATH=$orig_ld PYTHONUNBUFFERED=1 timeout ${LA_HF_TIMEOUT:-100} python3 bench/hf_peer.py ${LA_HF_ARGS:-} >"$OUT/hf_peer.json" 2>"$OUT/hf.log"
    echo "hf_peer exit $?"
    tail -20 "$OUT/hf.log"
fi
echo "device_gpu.sh: $(($(date +%s) - t_start)) s"
