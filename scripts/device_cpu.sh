#!/usr/bin/env bash
# Issue 27 on another CPU: the device machine's host CPU (AVX-512 where it has it), our CPU
# backend against llama.cpp built for AVX-512, side by side (bench/cpu_speed.py), and the
# baseline binary for a before/after of the kernels. Two halves:
#
#   LA_BASE_BIN=/tmp/base/b/bench_cpu_decode LA_LLAMACPP_PY=DIR LA_LLAMACPP_SRC=DIR \
#     scripts/device_cpu.sh prepare
#       here: bench_cpu_decode and write_random_checkpoint from .carry/build, the baseline's
#       bench_cpu_decode (LA_BASE_BIN, built from an earlier commit), llama-cpp-python built
#       for AVX-512 and unpacked into LA_LLAMACPP_PY (with diskcache beside it: pip wheel with
#       CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON
#       -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON ..."), llama.cpp's converter from its
#       source (LA_LLAMACPP_SRC: vendor/llama.cpp of the sdist) and the Llama-3 tokenizer,
#       packed into .carry/cpu/bundle.tar.xz
#   scripts/device_cpu.sh repack
#       here: the same, but llama-cpp-python, the converter and the tokenizer come from the
#       bundle already in .carry/cpu (a build of llama-cpp-python takes ~10 minutes on 2 cores);
#       our binaries are rebuilt, and the baseline binary is kept unless LA_BASE_BIN is given
#   LA_BASE_COMMIT=<sha> scripts/device_cpu.sh run
#       there, repository root, $OUT set: lscpu; GGUFs of models/rag-tiny (bf16, f16, f32)
#       and of a random Llama-3.2-1B checkpoint (LA_1B_DTYPES, default bf16); cpu_speed.py on
#       the bundled model (LA_TINY_CONFIGS, 1 and 2 threads, LA_TINY_ROUNDS rounds) and on
#       the 1B shape (LA_1B_CONFIGS, 2 threads, LA_1B_ROUNDS; decode at LA_1B_CONTEXTS, default
#       64,1536, prefill at LA_1B_PREFILL, default 512,2048, either may be empty)
#       -> cpu_speed_{rag_tiny,llama32_1b}.json/.md.
#       The device tool brings back only ~8 files of $OUT: end the command with
#       `cd $OUT && tar -czf /tmp/o.tgz . && rm -rf $OUT/* && mv /tmp/o.tgz $OUT/`.
#       LA_1B=0 skips the 1B shape, LA_TINY=0 the bundled model's; LA_1B_DIAG=1 first runs
#       the 1B decode at 64 with each KV dtype under perf stat (diag_64_*) and bench_cpu_gemm
#       (this build's and the baseline's: bench_cpu_gemm*.txt) after the kernels' tests on that CPU
#       (cpu_kernel_tests.log); LA_1B_CONFIGS=none stops there, and then a bundle of bin, lib
#       and tok alone will do (LA_CPU_BUNDLE names it: it fits one call beside the GPU's). Times on the H100 machine's Xeon
#       (bench/results/cpu_speed_avx512_emr_device): the bundled model's table ~330 s, the
#       1B checkpoint and its bf16 GGUF ~25 s, and one 1B configuration over 250 s at 2
#       threads while OpenBLAS's Prescott fallback ran its prefills (20 tokens/s at 2048).
set -u
mode=${1:-run}
if [ "$mode" = prepare ] || [ "$mode" = repack ]; then
    set -e
    st=.carry/cpu_stage
    if [ "$mode" = prepare ]; then
        : "${LA_BASE_BIN:?the baseline bench_cpu_decode}" "${LA_LLAMACPP_PY:?}" "${LA_LLAMACPP_SRC:?}"
        rm -rf $st && mkdir -p $st/bin $st/lib $st/conv $st/tok .carry/cpu
        cp -r "$LA_LLAMACPP_PY" $st/py
        cp -r "$LA_LLAMACPP_SRC/convert_hf_to_gguf.py" "$LA_LLAMACPP_SRC/conversion" "$LA_LLAMACPP_SRC/gguf-py" $st/conv/
        data=${LA_SHARED_DATA:-../shared/data}
        cp "$data/tokenizers/llama3/tokenizer.json" "$data/tokenizers/llama3/tokenizer_config.json" $st/tok/
    else
        [ -f .carry/cpu/bundle.tar.xz ] || { echo "device_cpu.sh repack: no .carry/cpu/bundle.tar.xz (run prepare)"; exit 1; }
        rm -rf $st && mkdir -p $st && tar -C $st -xJf .carry/cpu/bundle.tar.xz
    fi
    cmake --build .carry/build -j2 --target bench_cpu_decode bench_cpu_gemm write_random_checkpoint backend_test_cpu_kernels
    cp .carry/build/bench_cpu_decode .carry/build/bench_cpu_gemm .carry/build/write_random_checkpoint \
        .carry/build/backend_test_cpu_kernels $st/bin/
    [ -z "${LA_BASE_BIN:-}" ] || cp "$LA_BASE_BIN" $st/bin/bench_cpu_decode_base
    # the baseline's bench_cpu_gemm where it was built beside its bench_cpu_decode
    [ -z "${LA_BASE_BIN:-}" ] || [ ! -x "$(dirname "$LA_BASE_BIN")/bench_cpu_gemm" ] ||
        cp "$(dirname "$LA_BASE_BIN")/bench_cpu_gemm" $st/bin/bench_cpu_gemm_base
    . scripts/device_pack.sh
    la_pack_libs $st/lib $st/bin/*
    tar -C $st -cJf .carry/cpu/bundle.tar.xz bin lib py conv tok
    ls -la .carry/cpu/bundle.tar.xz
    exit 0
fi
: "${OUT:?OUT must be set (the device tool sets it)}"
t0=$(date +%s)
step() { echo "=== $* ($(($(date +%s) - t0)) s)"; }
lc=/tmp/lacpu
mkdir -p $lc && tar -C $lc -xJf "${LA_CPU_BUNDLE:-.carry/cpu/bundle.tar.xz}"
export LD_LIBRARY_PATH=$lc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$lc/py${PYTHONPATH:+:$PYTHONPATH}
lscpu >"$OUT/lscpu.txt" 2>&1
grep -E 'Model name|^CPU\(s\)|Thread|Flags' "$OUT/lscpu.txt" | cut -c1-300
python3 -c "import llama_cpp; print(llama_cpp.llama_cpp.llama_print_system_info().decode())" | tee "$OUT/llamacpp_system_info.txt"
OPENBLAS_VERBOSE=2 $lc/bin/bench_cpu_decode --help 2>&1 | grep -i core | tee "$OUT/openblas_core.txt"
base=(--base-bin $lc/bin/bench_cpu_decode_base --base-commit "${LA_BASE_COMMIT:-}")

if [ "${LA_TINY:-1}" != 0 ]; then
step "rag-tiny GGUFs"
for t in bf16 f16 f32; do
    python3 tools/peers/convert_gguf.py --llamacpp $lc/conv --outtype $t models/rag-tiny /tmp/rag-tiny-$t.gguf \
        >"$OUT/convert_rag_tiny_$t.log" 2>&1 || echo "convert rag-tiny $t failed"
done
step "cpu_speed rag-tiny"
python3 bench/cpu_speed.py --label rag-tiny-device-cpu --hf models/rag-tiny --gguf-bf16 /tmp/rag-tiny-bf16.gguf \
    --gguf-f16 /tmp/rag-tiny-f16.gguf --gguf-f32 /tmp/rag-tiny-f32.gguf --build $lc/bin "${base[@]}" \
    --configs "${LA_TINY_CONFIGS:-before,ours,ours-kv-bf16,ours-f32,llamacpp-bf16,llamacpp-f16,llamacpp-f32}" \
    --threads 1,2 --rounds "${LA_TINY_ROUNDS:-2}" --out "$OUT/cpu_speed_rag_tiny.json" 2>"$OUT/cpu_speed_rag_tiny.log"
echo "exit $?"
cat "$OUT/cpu_speed_rag_tiny.md" 2>/dev/null
fi

[ "${LA_1B:-1}" = 0 ] && { step done; exit 0; }
step "1B checkpoint and GGUFs"
$lc/bin/write_random_checkpoint --shape llama3.2-1b --tokenizer $lc/tok --out /tmp/l1b >"$OUT/l1b.log" 2>&1
gg=()
for t in ${LA_1B_DTYPES:-bf16}; do
    if python3 tools/peers/convert_gguf.py --llamacpp $lc/conv --outtype $t /tmp/l1b /tmp/l1b-$t.gguf \
        >"$OUT/convert_l1b_$t.log" 2>&1; then gg+=(--gguf-$t /tmp/l1b-$t.gguf); else echo "convert 1B $t failed"; fi
done
if [ "${LA_1B_DIAG:-0}" = 1 ]; then
    # the f32-KV decode at 64 (180 ms in cpu_speed_llama32_1b_avx512_emr_device, against 112-118
    # with a bf16 KV cache and 113-121 at 1536): each KV dtype twice in one process, with the
    # process's page faults, context switches and migrations (perf stat, else time -v)
    step "1B decode at 64, f32 and bf16 KV"
    for r in 1:f32 2:bf16; do
        kv=${r#*:} tag=${r%%:*}_${r#*:}
        run=($lc/bin/bench_cpu_decode -m /tmp/l1b --contexts 64,64 --prefill 16 --decode-tokens 16 --reps 2
             --threads 2 --cpu-kv $kv)
        if perf stat -e task-clock true >/dev/null 2>&1; then # perf may be there and refused
            perf stat -e task-clock,context-switches,cpu-migrations,page-faults -o "$OUT/diag_64_$tag.perf" \
                "${run[@]}" >/dev/null 2>"$OUT/diag_64_$tag.log"
        elif [ -x /usr/bin/time ]; then
            /usr/bin/time -v "${run[@]}" >/dev/null 2>"$OUT/diag_64_$tag.log"
        else
            "${run[@]}" >/dev/null 2>"$OUT/diag_64_$tag.log"
        fi
        grep -E "decode at|prefill" "$OUT/diag_64_$tag.log" | sed "s/^/$tag KV: /"
    done
    # the kernels' tests on this CPU (its vector table against the portable one; the fixtures
    # under the source path the test was built with)
    [ -e /work/main/tests ] || { mkdir -p /work && ln -sfn "$(pwd)" /work/main; }
    $lc/bin/backend_test_cpu_kernels --jobs 1 >"$OUT/cpu_kernel_tests.log" 2>&1
    tail -1 "$OUT/cpu_kernel_tests.log"
    # gemm_nt against OpenBLAS per 1B shape, one thread, this build and the baseline's
    step "bench_cpu_gemm"
    for g in bench_cpu_gemm bench_cpu_gemm_base; do
        [ -x $lc/bin/$g ] || continue
        $lc/bin/$g --rows 48,512 --shapes 2048x2048,8192x2048,2048x8192 --out "$OUT/$g.json" | tee "$OUT/$g.txt"
    done
fi
[ "${LA_1B_CONFIGS:-}" = none ] && { step done; exit 0; } # the diagnostics alone
step "cpu_speed 1B"
python3 bench/cpu_speed.py --label llama32-1b-device-cpu --hf /tmp/l1b "${gg[@]}" --build $lc/bin "${base[@]}" \
    --configs "${LA_1B_CONFIGS:-before,ours,llamacpp-bf16}" --threads 2 --rounds "${LA_1B_ROUNDS:-1}" \
    --contexts "${LA_1B_CONTEXTS-64,1536}" --prefill "${LA_1B_PREFILL-512,2048}" --decode-tokens 16 \
    --out "$OUT/cpu_speed_llama32_1b.json" \
    2>"$OUT/cpu_speed_llama32_1b.log"
echo "exit $?"
cat "$OUT/cpu_speed_llama32_1b.md" 2>/dev/null
step done
