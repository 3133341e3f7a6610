#!/usr/bin/env bash
# The document KV store on the H200 (issues 29 and 22; bench/GPU_NOTES.md "The document KV
# store on the H200"), after `scripts/device_gpu.sh prepare` here. On the GPU machine, from
# the repository root with $OUT set:
#
#   LA_COMMIT=<sha> bash scripts/device_store.sh run [PHASES]
#
# Phases (default: tests store): each a few minutes, every run under its own timeout;
# JSON and logs land in $OUT.
#   tests    every GPU test binary of the bundle
#   store    issue 29's pool larger than HBM, Llama-3-8B shape, random weights, 10 documents
#            of 780 tokens a request, zipf 1.0, 160 requests at concurrency 16: all cached (a
#            200-document pool), no store (2000 documents; prefix beside lazy), a host tier of
#            $LA_HOST_GIB GiB (1600 documents: what GPU + host hold), host tier + disk tier
#            behind it (2000 documents, write on eviction)
#   restart  a 300-document pool written through to a disk tier, then a new process that
#            answers from it first thing (--no-warmup), page cache dropped where the machine
#            lets us; the same requests recomputed; ingest of a text corpus (2WikiMultihopQA
#            passages) against dd's sequential write speed on the same disk
#   shared   a redis-server here; replica A computes, replica B (a new process) loads from
#            the shared tier: TTFT and GB/s against recompute
#   iothreads  the restart's and the shared reader's runs with 2 and $LA_IO_THREADS (8) I/O
#            threads (--kv-io-threads), side by side
#   readchoice  the restart and the shared reader with --kv-read auto (read only what beats
#            computing it) and --kv-read always, each reader a new process (page cache
#            dropped before each disk reader), beside recompute
set -u
root=$(pwd)
phases=${2:-${LA_PHASES:-tests store restart shared}}
: "${OUT:?OUT must be set (the device tool sets it)}"
# the tool brings back at most 8 files: everything goes to $R, packed into $OUT at the end
final_out=$OUT
R=/tmp/store_results
rm -rf "$R" && mkdir -p "$R"
OUT=$R
trap 'tar -C "$R" -czf "$final_out/store_results.tgz" . 2>/dev/null' EXIT
t0=$(date +%s)
step() { echo "=== $* ($(($(date +%s) - t0)) s)"; }
. scripts/device_env.sh
B=$bin/lazyattn
commit=${LA_COMMIT:-unknown}
tok=/tmp/la/data/llama3-tokenizer
w8b="--random-weights llama3.1-8b --tokenizer $tok --device cuda --dataset synthetic --docs-per-request 10
     --doc-tokens 780 --zipf 1.0 --requests 160 --concurrency 16 --max-tokens 16"
nvidia-smi --query-gpu=name,serial,driver_version,memory.used,memory.total --format=csv >"$OUT/nvidia_smi.txt" 2>&1
free -g >>"$OUT/nvidia_smi.txt"; df -h /tmp >>"$OUT/nvidia_smi.txt"
bench() { # name timeout args...
    local name=$1 to=$2; shift 2
    step "bench $name"
    # shellcheck disable=SC2086
    local t1=$(date +%s.%N)
    timeout "$to" $B bench "$@" --json "$OUT/$name.json" >"$OUT/$name.txt" 2>"$OUT/$name.err"
    echo "bench $name exit $? after $(python3 -c "print(round($(date +%s.%N) - $t1, 1))") s"
    tail -2 "$OUT/$name.err"
    grep -E "TTFT ms|p50|doc hit|hit %" "$OUT/$name.txt" | head -12
}
# the restart, shared, readchoice and iothreads phases' workload: 16 requests at concurrency 1
# over a 100-document pool (each phase adds its own --salt)
w1="--random-weights llama3.1-8b --tokenizer $tok --device cuda --dataset synthetic --docs-per-request 10
    --doc-tokens 780 --pool-docs 100 --zipf 1.0 --requests 16 --concurrency 1 --max-tokens 16 --methods lazy"
drop_page_cache() { # before a disk reader, where the machine lets us
    sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped" || echo "page cache kept"
}
redis_up() { # PORT LOG: a redis-server on loopback for the shared tier, its PID in $rpid
    $bin/redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no --maxmemory 60gb \
        --maxmemory-policy allkeys-lru >"$OUT/$2" 2>&1 &
    rpid=$!
    sleep 1
}
for phase in $phases; do
    case $phase in
    tests)
        step tests
        cd /work/main
        for t in backend_test_cuda_kernels backend_test_cuda_forward backend_test_cuda_fused_gemm \
            backend_test_cuda_kv_store backend_test_cuda_shared_attn; do
            echo "=== $t" >>"$OUT/tests.log"
            timeout ${LA_TEST_TIMEOUT:-150} $bin/$t --jobs 1 >>"$OUT/tests.log" 2>&1
            echo "=== $t exit $?" >>"$OUT/tests.log"
        done
        cd "$root"
        grep -E '^===|Synthesis|FAIL|\[----\]' "$OUT/tests.log" | head -40
        ;;
    store)
        # every run computes its whole pool in the warm-up (~40K tokens/s): 1600 documents of
        # 780 tokens are ~30 s. HBM holds ~930 of them; GPU + a $LA_HOST_GIB GiB host tier ~1640.
        # Pinning the host tier stalls the process's CUDA calls (a 100 GiB tier: ~75 s on the
        # H200 machine before the first warm-up request finished), hence store_host's timeout
        host=${LA_HOST_GIB:-70}
        bench store_allcached 50 $w8b --pool-docs 200 --methods lazy
        bench store_nostore 100 $w8b --pool-docs 1600 --methods lazy
        bench store_host 240 $w8b --pool-docs 1600 --methods lazy --host-kv-gib "$host"
        if [ -n "${LA_STORE_2000:-}" ]; then
            rm -rf /tmp/kv_evict
            bench store_host_disk 180 $w8b --pool-docs 2000 --methods lazy --host-kv-gib "$host" \
                --kv-dir /tmp/kv_evict --kv-write evict --kv-dir-gib 40
        fi
        ;;
    restart)
        rm -rf /tmp/kv_r
        w="$w1 --salt restart"
        bench restart_before 50 $w --kv-dir /tmp/kv_r
        drop_page_cache
        bench restart_after 35 $w --kv-dir /tmp/kv_r --no-warmup
        bench restart_recompute 35 ${w/--methods lazy/--methods recompute} --no-warmup
        step ingest
        python3 - /tmp/la/data/2wiki.jsonl /tmp/corpus.jsonl <<'PY' || true
import json, sys
seen, out = set(), open(sys.argv[2], "w")
for line in open(sys.argv[1]):  # FlashRAG's 2WikiMultihopQA: metadata.context.{title, content}
    ctx = json.loads(line)["metadata"]["context"]
    for title, sents in zip(ctx["title"], ctx["content"]):
        if title not in seen and len(seen) < 600:
            seen.add(title)
            out.write(json.dumps({"title": title, "text": " ".join(sents)}) + "\n")
print(len(seen), "documents")
PY
        rm -rf /tmp/kv_i
        timeout 45 $B ingest --random-weights llama3.1-8b --tokenizer $tok --device cuda \
            --corpus /tmp/corpus.jsonl --kv-dir /tmp/kv_i --batch 64 --json "$OUT/ingest.json" >"$OUT/ingest.txt" 2>&1
        echo "ingest exit $?"; tail -4 "$OUT/ingest.txt"
        timeout 20 dd if=/dev/zero of=/tmp/kv_i/dd.bin bs=1M count=2048 conv=fdatasync 2>&1 | tail -1 | tee "$OUT/dd.txt"
        rm -f /tmp/kv_i/dd.bin
        ;;
    shared)
        port=6399
        redis_up $port redis.log
        w="$w1 --salt shared --kv-store redis://127.0.0.1:$port --kv-secret-file /tmp/shared.secret"
        head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >/tmp/shared.secret
        bench shared_writer 50 $w
        bench shared_reader 35 $w --no-warmup
        $bin/redis-cli -p $port info memory | grep used_memory_human | tee "$OUT/redis_memory.txt"
        kill $rpid; wait $rpid 2>/dev/null
        ;;
    readchoice)
        rm -rf /tmp/kv_c
        w="$w1 --salt readchoice"
        bench rc_writer 50 $w --kv-dir /tmp/kv_c
        for pol in auto always; do
            drop_page_cache
            bench "rc_disk_$pol" 35 $w --kv-dir /tmp/kv_c --no-warmup --kv-read "$pol"
        done
        bench rc_recompute 35 ${w/--methods lazy/--methods recompute} --no-warmup
        port=6399
        redis_up $port redis.log
        head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >/tmp/rc.secret
        ws="$w --kv-store redis://127.0.0.1:$port --kv-secret-file /tmp/rc.secret"
        bench rc_shared_writer 50 $ws
        for pol in always auto; do # always first: auto writes back what it computes
            bench "rc_shared_$pol" 35 $ws --no-warmup --kv-read "$pol"
        done
        kill $rpid; wait $rpid 2>/dev/null
        ;;
    iothreads)
        # the restart and shared reads with 2 I/O threads (the default) and $LA_IO_THREADS
        # (8), each reader a new process, the page cache dropped before each disk reader
        n=${LA_IO_THREADS:-8}
        rm -rf /tmp/kv_t
        w="$w1 --salt iothreads"
        bench io_writer 50 $w --kv-dir /tmp/kv_t
        for t in 2 "$n"; do
            drop_page_cache
            bench "io_disk_t$t" 35 $w --kv-dir /tmp/kv_t --no-warmup --kv-io-threads "$t"
        done
        port=6399
        redis_up $port redis_io.log
        head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >/tmp/io.secret
        ws="$w --kv-store redis://127.0.0.1:$port --kv-secret-file /tmp/io.secret"
        bench io_shared_writer 50 $ws
        for t in 2 "$n"; do bench "io_shared_t$t" 35 $ws --no-warmup --kv-io-threads "$t"; done
        kill $rpid; wait $rpid 2>/dev/null
        ;;
    *) echo "device_store.sh: unknown phase $phase" ;;
    esac
done
echo "device_store.sh: $(($(date +%s) - t0)) s"
