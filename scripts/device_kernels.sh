#!/usr/bin/env bash
# Issue 24's device call (bench/GPU_NOTES.md, "Shared-block attention and head_dim 64"): the
# kernel tests, then the numbers the issue asks for, side by side in one run. Two halves, as
# scripts/device_gpu.sh:
#
#   scripts/device_kernels.sh prepare   here: scripts/device_gpu.sh prepare (builds the GPU
#                                       tests, bench_gpu and lazyattn in .carry/build and packs
#                                       them into .carry/dev/bundle.tar.xz)
#   scripts/device_kernels.sh run       on the GPU machine, repository root, $OUT set; every
#                                       phase under its own timeout, elapsed seconds printed:
#     tests    backend_test_cuda_shared_attn, backend_test_cuda_kernels (tests.log; LA_TESTS
#              names others, e.g. backend_test_cuda_forward)
#     shared   bench_gpu --shared-kv (8B shape: the shared-KV sweep, 1 / 64 / 256 / 1000
#              requests on one 7000-token document, shared attention off and auto, and the
#              attention kernel alone) -> shared_kv_8b.json, shared_kv.log
#     peer     python3 bench/attn_peer.py on the same shapes -> attn_peer.json, peer.log
#     shapes   bench_gpu at 8K: the 1B shape (head_dim 64: v3 / v4 now) and the 8B shape's
#              recompute and lazy rows and TPOT (no worse than before) -> gpu_1b_8b.json
#     probe    bench_gpu --decode-probe (one 16K-token document, 128 steps, plain / lazy /
#              mepic at batch 1, 8, 32) -> decode_probe.json
#     engine   lazyattn bench's shared-KV sweep (concurrency 64 and 256 as a sweep, 1000 and 1
#              on their own), LA_ATTN_SHARED=auto then 0
#              -> engine_{sweep,c1000,c1}_{auto,off}.json / .txt
#     packed   the packed decode instance (LA_ATTN_DECODE_PACKED auto, then 0): bench_gpu's
#              shared-KV rows and the engine at 1000 and 256 requests on one document
#              -> shared_kv_8b_packed_{auto,0}.json, engine_c{1000,256}_packed_{auto,0}.*
#     steps    where the engine's steps go (engine_steps) at 1000 and 256 requests on one
#              document, and with a token budget that fits every request's question
#              (--max-batch-tokens 12288 / 4096); bench_gpu's shared-KV decode step at
#              256 and 1000 (eager and as a graph) -> steps_*.json, shared_kv_steps.*
#     sampling bench_sampling on the 8B shape at batch 32: TPOT with logprobs, penalties and a
#              JSON schema against greedy (issue 21) -> bench_sampling_h200_8b.json
#     budget   the engine's sweep (64 / 256 and 1000) at the old default token budget, 1024 a
#              step, beside `engine`'s default (8192 on an H100 / H200) -> engine_{sweep,c1000}_mbt1024.*
#     trace    nsys (else ncu) over bench_gpu: one 1B decode at batch 1 (plain, graphs) and one
#              lazy 8K question -> trace_{decode_b1,lazy_8k}.csv.gz, trace_tools.txt; with
#              LA_TRACE_DETAIL=1 also ncu's full set for one launch of each one's attention
#              kernel -> detail_{decode_b1,lazy_8k}.txt (LA_TRACE=0 skips the traces)
#     cpu      the machine's CPU (lscpu.txt) and backend_test_cpu_kernels on it (cpu_tests.log:
#              the AVX-512 kernels where it has them)
#   LA_PHASES="tests shared peer shapes probe engine" (the default) picks and orders them.
#
#   LA_COMMIT=$(git rev-parse --short HEAD) bash scripts/device_kernels.sh run
set -u
mode=${1:-run}
if [ "$mode" = prepare ]; then
    exec bash scripts/device_gpu.sh prepare
fi
: "${OUT:?OUT must be set (the device tool sets it)}"
root=$(pwd)
t_start=$(date +%s)
. scripts/device_env.sh
commit=${LA_COMMIT:-unknown}
step() { echo "=== $* ($(($(date +%s) - t_start)) s)"; }
nvidia-smi --query-gpu=name,serial,driver_version,clocks.sm,power.limit,memory.used,memory.total --format=csv \
    >"$OUT/nvidia_smi.txt" 2>&1

for phase in ${LA_PHASES:-tests shared peer shapes probe engine}; do
    case $phase in
    tests)
        step tests
        cd /work/main
        for t in ${LA_TESTS:-backend_test_cuda_shared_attn backend_test_cuda_kernels}; do
            echo "=== $t" >>"$OUT/tests.log"
            timeout ${LA_TEST_TIMEOUT:-150} $bin/$t --jobs 1 >>"$OUT/tests.log" 2>&1
            echo "=== $t exit $?" >>"$OUT/tests.log"
        done
        cd "$root"
        grep -E '^===|Synthesis|FAIL|\[----\]' "$OUT/tests.log" | head -40
        ;;
    shared)
        step shared
        timeout ${LA_SHARED_TIMEOUT:-200} $bin/bench_gpu --commit "$commit" --shapes llama3-8b --no-ttft --no-tpot \
            --no-engine --shared-kv --out "$OUT/shared_kv_8b.json" 2>"$OUT/shared_kv.log"
        echo "bench_gpu --shared-kv exit $?"
        grep -E 'shared-kv|attention' "$OUT/shared_kv.log" | tail -40
        ;;
    peer)
        step peer
        LD_LIBRARY_PATH=$orig_ld PYTHONUNBUFFERED=1 timeout ${LA_PEER_TIMEOUT:-120} python3 bench/attn_peer.py \
            --out "$OUT/attn_peer.json" 2>"$OUT/peer.log"
        echo "attn_peer exit $?"
        tail -8 "$OUT/peer.log"
        ;;
    shapes)
        step shapes
        timeout ${LA_SHAPES_TIMEOUT:-200} $bin/bench_gpu --commit "$commit" --shapes llama3.2-1b,llama3-8b \
            --contexts 8192 --reps 3 --methods recompute,prefix,lazy --no-engine --out "$OUT/gpu_1b_8b.json" \
            2>"$OUT/shapes.log"
        echo "bench_gpu shapes exit $?"
        grep -E 'ctx|decode' "$OUT/shapes.log" | tail -40
        ;;
    probe)
        step probe
        timeout ${LA_PROBE_TIMEOUT:-150} $bin/bench_gpu --commit "$commit" --shapes llama3-8b --no-ttft --no-tpot \
            --no-engine --decode-probe --out "$OUT/decode_probe.json" 2>"$OUT/probe.log"
        echo "bench_gpu --decode-probe exit $?"
        grep probe "$OUT/probe.log" | tail -20
        ;;
    engine)
        # the sweep, split so that no point waits on 2 x 1000 requests (a concurrency
        # sweep runs twice its largest point's requests at every point): 64 and 256 as a
        # sweep, 1000 and 1 on their own
        common="--random-weights llama3-8b --device cuda --dataset synthetic --docs-per-request 1 --doc-tokens 7000
                --pool-docs 1 --methods prefix,lazy --max-tokens 32 --ignore-eos"
        for m in auto 0; do
            tag=$([ "$m" = 0 ] && echo off || echo auto)
            for run in "sweep:--sweep concurrency --points ${LA_ENGINE_POINTS:-64,256}" \
                "c1000:--concurrency 1000 --requests 1000" "c1:--concurrency 1 --requests 16"; do
                name=${run%%:*}
                step "engine $name LA_ATTN_SHARED=$m"
                # shellcheck disable=SC2086
                LA_ATTN_SHARED=$m timeout ${LA_ENGINE_TIMEOUT:-150} $bin/lazyattn bench $common ${run#*:} \
                    --json "$OUT/engine_${name}_$tag.json" >"$OUT/engine_${name}_$tag.txt" 2>"$OUT/engine_${name}_$tag.err"
                echo "engine $name ($tag) exit $?"
                tail -6 "$OUT/engine_${name}_$tag.txt"
            done
        done
        ;;
    budget)
        # the sweep at the engine's old default token budget (1024 a step), beside the
        # default (8192 on a GPU of 70 GiB or more: la_engine_options.max_batch_tokens) that
        # `engine` runs
        common="--random-weights llama3-8b --device cuda --dataset synthetic --docs-per-request 1 --doc-tokens 7000
                --pool-docs 1 --methods prefix,lazy --max-tokens 32 --ignore-eos --max-batch-tokens 1024"
        for run in "sweep:--sweep concurrency --points ${LA_ENGINE_POINTS:-64,256}" "c1000:--concurrency 1000 --requests 1000"; do
            name=${run%%:*}
            step "engine $name --max-batch-tokens 1024"
            # shellcheck disable=SC2086
            timeout ${LA_ENGINE_TIMEOUT:-150} $bin/lazyattn bench $common ${run#*:} \
                --json "$OUT/engine_${name}_mbt1024.json" >"$OUT/engine_${name}_mbt1024.txt" 2>"$OUT/engine_${name}_mbt1024.err"
            echo "engine $name (budget 1024) exit $?"
            tail -6 "$OUT/engine_${name}_mbt1024.txt"
        done
        ;;
    packed)
        # the packed decode instance against the unpacked one, side by side: the shared-KV
        # rows of bench_gpu, then the engine's 1000- and 256-request points
        for m in auto 0; do
            step "packed LA_ATTN_DECODE_PACKED=$m"
            LA_ATTN_DECODE_PACKED=$m timeout ${LA_SHARED_TIMEOUT:-200} $bin/bench_gpu --commit "$commit" --shapes llama3-8b \
                --no-ttft --no-tpot --no-engine --shared-kv --out "$OUT/shared_kv_8b_packed_$m.json" 2>"$OUT/shared_kv_packed_$m.log"
            echo "bench_gpu --shared-kv (packed $m) exit $?"
            grep -E 'shared auto' "$OUT/shared_kv_packed_$m.log" | tail -16
        done
        common="--random-weights llama3-8b --device cuda --dataset synthetic --docs-per-request 1 --doc-tokens 7000
                --pool-docs 1 --methods lazy --max-tokens 32 --ignore-eos"
        for m in auto 0; do
            for n in 1000 256; do
                step "engine c$n LA_ATTN_DECODE_PACKED=$m"
                # shellcheck disable=SC2086
                LA_ATTN_DECODE_PACKED=$m timeout ${LA_ENGINE_TIMEOUT:-150} $bin/lazyattn bench $common --concurrency $n \
                    --requests $n --json "$OUT/engine_c${n}_packed_$m.json" >"$OUT/engine_c${n}_packed_$m.txt" \
                    2>"$OUT/engine_c${n}_packed_$m.err"
                echo "engine c$n (packed $m) exit $?"
                grep -E '^TPOT|p50' "$OUT/engine_c${n}_packed_$m.txt" | head -3
            done
        done
        ;;
    steps)
        # where the engine's steps go at 1000 and 256 requests on one document (engine_steps in
        # each JSON: schedule / forward / after per step, decode-only steps' forward), with the
        # default token budget and with a budget that fits every request's question (admission
        # in a few steps instead of ~36), then (LA_STEPS_BENCH_GPU=1, the default) bench_gpu's
        # decode step at 256 and 1000, eager and as a graph
        common="--random-weights llama3-8b --device cuda --dataset synthetic --docs-per-request 1 --doc-tokens 7000
                --pool-docs 1 --methods ${LA_STEPS_METHODS:-lazy} --max-tokens 32 --ignore-eos"
        for run in "c1000:--concurrency 1000 --requests 1000" "c256:--concurrency 256 --requests 256" \
            "c1000_mbt12288:--concurrency 1000 --requests 1000 --max-batch-tokens 12288" \
            "c256_mbt4096:--concurrency 256 --requests 256 --max-batch-tokens 4096"; do
            name=${run%%:*}
            step "engine steps $name"
            # shellcheck disable=SC2086
            timeout ${LA_ENGINE_TIMEOUT:-150} $bin/lazyattn bench $common ${run#*:} --json "$OUT/steps_$name.json" \
                >"$OUT/steps_$name.txt" 2>"$OUT/steps_$name.err"
            echo "engine $name exit $?"
            python3 -c "import json,sys; [print(m['method'], m['ttft_ms']['p50'], m['tpot_ms']['p50'], m.get('engine_steps')) for m in json.load(open(sys.argv[1]))['methods']]" \
                "$OUT/steps_$name.json"
        done
        if [ "${LA_STEPS_BENCH_GPU:-1}" = 1 ]; then # its rows time each step eagerly and as a graph
            step "bench_gpu shared-kv 256 and 1000"
            timeout ${LA_SHARED_TIMEOUT:-200} $bin/bench_gpu --commit "$commit" --shapes llama3-8b --no-ttft --no-tpot \
                --no-engine --shared-kv --shared-points 256,1000 --shared-kinds lazy --shared-modes auto \
                --out "$OUT/shared_kv_steps.json" 2>"$OUT/shared_kv_steps.log"
            echo "bench_gpu exit $?"
            grep -E 'shared auto' "$OUT/shared_kv_steps.log" | tail -6
        fi
        ;;
    sampling)
        # issue 21's H200 half: TPOT with logprobs, penalties and a JSON schema against greedy
        step sampling
        timeout ${LA_SAMPLING_TIMEOUT:-150} $bin/bench_sampling --random-weights llama3-8b \
            --tokenizer /tmp/la/data/llama3-tokenizer --device cuda --batch 32 --decode-tokens 128 --reps 5 \
            --out "$OUT/bench_sampling_h200_8b.json" >"$OUT/sampling.log" 2>&1
        echo "bench_sampling exit $?"
        tail -12 "$OUT/sampling.log"
        ;;
    cpu)
        step cpu
        lscpu >"$OUT/lscpu.txt" 2>&1
        grep -E 'Model name|^CPU\(s\)|Thread|Flags' "$OUT/lscpu.txt" | cut -c1-200
        cd /work/main
        timeout ${LA_TEST_TIMEOUT:-150} $bin/backend_test_cpu_kernels --jobs 1 >"$OUT/cpu_tests.log" 2>&1
        echo "backend_test_cpu_kernels exit $?"
        cd "$root"
        grep -E 'Synthesis|FAIL|isa|avx' "$OUT/cpu_tests.log" | head -20
        ;;
    trace)
        # one replayed decode step of the 1B shape at batch 1 and one lazy 8K question, kernel
        # by kernel: nsys where the image has it (a timeline: gaps between kernels show),
        # else ncu (each kernel's own duration, serialised). LA_TRACE_SHAPE picks the shape.
        step trace
        nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda*/nsight-systems*/bin/nsys 2>/dev/null | head -1)
        ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute*/ncu 2>/dev/null | head -1)
        echo "nsys: ${nsys:-none}; ncu: ${ncu:-none}" | tee "$OUT/trace_tools.txt"
        targs="--shapes ${LA_TRACE_SHAPE:-llama3.2-1b} --contexts 8192 --reps 1 --no-engine"
        for run in "decode_b1:--no-ttft --tpot-batches 1 --tpot-kinds plain" "lazy_8k:--no-tpot --methods lazy"; do
            [ "${LA_TRACE:-1}" = 0 ] && break
            name=${run%%:*}
            if [ -n "$nsys" ]; then
                timeout ${LA_TRACE_TIMEOUT:-120} "$nsys" profile -t cuda --cuda-graph-trace=node -o "/tmp/trace_$name" -f true \
                    $bin/bench_gpu $targs ${run#*:} --out "$OUT/trace_${name}_bench.json" >"$OUT/trace_$name.log" 2>&1
                echo "nsys $name exit $?"
                "$nsys" stats -r cuda_gpu_trace -f csv -o "/tmp/trace_$name" "/tmp/trace_$name.nsys-rep" >>"$OUT/trace_$name.log" 2>&1
                gzip -c /tmp/trace_${name}_cuda_gpu_trace.csv >"$OUT/trace_$name.csv.gz" 2>/dev/null
            elif [ -n "$ncu" ]; then
                timeout ${LA_TRACE_TIMEOUT:-120} "$ncu" --cache-control none --clock-control none --metrics gpu__time_duration.sum \
                    --csv $bin/bench_gpu $targs ${run#*:} --out "$OUT/trace_${name}_bench.json" 2>"$OUT/trace_$name.log" \
                    | gzip >"$OUT/trace_$name.csv.gz"
                echo "ncu $name exit $?"
            fi
        done
        # LA_TRACE_DETAIL=1: ncu's full set (stall reasons, memory, occupancy) for one launch
        # of the attention kernel of each run (the 21st: past the warm-up and the capture)
        if [ "${LA_TRACE_DETAIL:-0}" = 1 ] && [ -n "$ncu" ]; then
            for run in "decode_b1:attn_decode_kernel:--no-ttft --tpot-batches 1 --tpot-kinds plain" \
                "lazy_8k:attn_prefill_wgmma_kernel:--no-tpot --methods lazy"; do
                name=${run%%:*}; rest=${run#*:}; kern=${rest%%:*}
                timeout ${LA_TRACE_TIMEOUT:-120} "$ncu" --set full -k "regex:$kern" --launch-skip 20 --launch-count 1 \
                    -f -o "/tmp/detail_$name" $bin/bench_gpu $targs ${rest#*:} --out /tmp/detail_$name.json >"$OUT/detail_$name.log" 2>&1
                echo "ncu --set full $name exit $?"
                "$ncu" --import "/tmp/detail_$name.ncu-rep" --page details >"$OUT/detail_$name.txt" 2>&1
            done
        fi
        ;;
    *) echo "device_kernels.sh: unknown phase $phase" ;;
    esac
done
echo "device_kernels.sh: $(($(date +%s) - t_start)) s"
