/* The flags of the engine options (la_engine_options): -m/--model DIR, --device D,
 * --threads N, --kv-blocks N, --gpu-memory-fraction F, --block-size B that several commands
 * share, serve's --max-batch-tokens, --max-queue, --max-running, --max-docs,
 * --max-context, --chat-template FILE, --recompute-first N, --cpu-weights T, --cpu-kv T, and the document KV store's (LA_CLI_STORE_OPTIONS:
 * run, serve, eval, bench, race and ingest take all of them). A command lists the ones it takes
 * in its own getopt table (its order there decides how glibc lists an ambiguous
 * abbreviation's candidates), with these values, and hands what getopt returns to
 * la_cli_engine_flag() before its own switch; after the loop it calls
 * la_cli_store_flags_check(). */
#ifndef LA_CLI_ENGINE_FLAGS_H
#define LA_CLI_ENGINE_FLAGS_H

#include "lazyattn/lazyattn.h"

enum {
    LA_CLI_OPT_MODEL = 'm',
    LA_CLI_OPT_DEVICE = 0x1000,
    LA_CLI_OPT_THREADS,
    LA_CLI_OPT_KV_BLOCKS,
    LA_CLI_OPT_GPU_MEMORY_FRACTION,
    LA_CLI_OPT_BLOCK_SIZE,
    LA_CLI_OPT_MAX_BATCH_TOKENS,
    LA_CLI_OPT_MAX_QUEUE,
    LA_CLI_OPT_MAX_RUNNING,
    LA_CLI_OPT_MAX_DOCS,
    LA_CLI_OPT_MAX_CONTEXT,
    LA_CLI_OPT_HOST_KV_GIB,     /* --host-kv-gib N      host tier, GiB (float, >= 0) */
    LA_CLI_OPT_KV_DIR,          /* --kv-dir DIR         disk tier */
    LA_CLI_OPT_KV_DIR_GIB,      /* --kv-dir-gib N       disk tier size cap, GiB (0: none) */
    LA_CLI_OPT_KV_WRITE,        /* --kv-write through|evict */
    LA_CLI_OPT_KV_SECRET_FILE,  /* --kv-secret-file F   the deployment secret */
    LA_CLI_OPT_KV_STORE,        /* --kv-store redis://HOST:PORT   shared tier */
    LA_CLI_OPT_KV_IO_TIMEOUT_MS,/* --kv-io-timeout-ms N a tier read older than this: computed */
    LA_CLI_OPT_KV_IO_THREADS,   /* --kv-io-threads N    disk / shared tier I/O threads */
    LA_CLI_OPT_CHAT_TEMPLATE, /* --chat-template FILE (run, serve, eval, bench) */
    LA_CLI_OPT_RECOMPUTE_FIRST, /* --recompute-first N  recovery (run, serve) */
    LA_CLI_OPT_CPU_WEIGHTS,     /* --cpu-weights auto|f32|bf16|f16|bf16-dot (run, serve, eval, bench, ingest) */
    LA_CLI_OPT_CPU_KV,          /* --cpu-kv f32|bf16 (the same commands) */
    LA_CLI_OPT_KV_READ,         /* --kv-read auto|always  when a lower tier's record is read */
    LA_CLI_OPT_RECOMPUTE_RATIO, /* --recompute-ratio R  selected recovery (run, serve) */
    LA_CLI_OPT_DOC_CONTEXT,     /* --doc-context alone|preamble (run, serve) */
    LA_CLI_OPT_ASYNC,           /* --async-scheduling auto|on|off (serve, bench) */
    LA_CLI_OPT_PREFILL_FIRST,   /* --prefill-first (serve, bench; no argument) */
    LA_CLI_OPT_DOC_TOKEN_CACHE_MIB, /* --doc-token-cache-mib N  documents' token ids, MiB (serve, bench) */
};

/* The --async-scheduling, --prefill-first and --doc-token-cache-mib lines of a command's --help. */
#define LA_CLI_ASYNC_USAGE                                                                         \
    "      --async-scheduling M auto (default: on with CUDA), on or off: queue the next decode\n"  \
    "                           step before reading this one's tokens back (README)\n"        \
    "      --prefill-first      a step with prefill work ready packs no decode rows: lower\n"  \
    "                           TTFT for arrivals, higher TPOT for requests decoding\n"  \
    "      --doc-token-cache-mib N  memory for the token ids of documents seen before, by\n" \
    "                           their text: not tokenized again (64; 0: off)\n"

/* The --cpu-weights line of a command's --help. */
#define LA_CLI_CPU_WEIGHTS_USAGE                                                                  \
    "      --cpu-weights T      CPU: weight matrices kept as f32 | bf16 | f16 (default auto:\n"    \
    "                           the checkpoint's dtype); bf16-dot: bf16, activations rounded\n"   \
    "                           to bf16 in the products (AVX512_BF16; faster prefill)\n"                                     \
    "      --cpu-kv T           CPU: KV cache in f32 (default) | bf16\n"

/* The --recompute-first line of a command's --help. */
#define LA_CLI_RECOMPUTE_FIRST_USAGE                                                              \
    "      --recompute-first N  recovery: recompute each later document's first N tokens in\n"     \
    "                           context (lazy, block, mepic, block-ref; 0: off, the default)\n"

/* The getopt entries of the store flags, for a command's option table. */
#define LA_CLI_STORE_OPTIONS                                                                   \
    {"host-kv-gib", required_argument, 0, LA_CLI_OPT_HOST_KV_GIB},                             \
        {"kv-dir", required_argument, 0, LA_CLI_OPT_KV_DIR},                                   \
        {"kv-dir-gib", required_argument, 0, LA_CLI_OPT_KV_DIR_GIB},                           \
        {"kv-write", required_argument, 0, LA_CLI_OPT_KV_WRITE},                               \
        {"kv-secret-file", required_argument, 0, LA_CLI_OPT_KV_SECRET_FILE},                   \
        {"kv-store", required_argument, 0, LA_CLI_OPT_KV_STORE},                               \
        {"kv-io-timeout-ms", required_argument, 0, LA_CLI_OPT_KV_IO_TIMEOUT_MS},               \
        {"kv-io-threads", required_argument, 0, LA_CLI_OPT_KV_IO_THREADS},                     \
        {"kv-read", required_argument, 0, LA_CLI_OPT_KV_READ}

/* The store flags' lines of a command's --help. */
#define LA_CLI_STORE_USAGE                                                                     \
    "      --host-kv-gib N      host-memory tier of document KV records, GiB (0: none)\n"      \
    "      --kv-dir DIR         disk tier: records as files, kept across restarts\n"           \
    "      --kv-dir-gib N       size cap of --kv-dir in GiB, LRU (0: none)\n"                  \
    "      --kv-write M         through (a computed document goes to disk at once, default)\n" \
    "                           or evict (only when memory evicts it)\n"                      \
    "      --kv-secret-file F   deployment secret the replicas share (default DIR/secret)\n"   \
    "      --kv-store URL       shared tier: redis://[[USER]:PASSWORD@]HOST:PORT[/DB]\n"       \
    "      --kv-io-timeout-ms N a tier read slower than this is computed instead (10000)\n"    \
    "      --kv-io-threads N    threads reading and writing the disk and shared tiers (2)\n"    \
    "      --kv-read M          always (default) or auto (read a disk or shared-tier record\n" \
    "                           only when that beats computing it, by measured rates)\n"


typedef enum la_cli_flag {
    LA_CLI_FLAG_OTHER = 0,  /* not an engine flag: the command's own */
    LA_CLI_FLAG_SET,        /* applied to the options */
    LA_CLI_FLAG_BAD_NUMBER, /* not a number: la_cli_parse_* printed why */
    LA_CLI_FLAG_BAD_DEVICE, /* no such device: err->msg says why, nothing printed */
    LA_CLI_FLAG_BAD_VALUE,  /* a store flag's bad value: err->msg says why ("--kv-write: 'x'
                               is not through or evict"), nothing printed */
} la_cli_flag;

/* la_engine_options_init() with the bundled model as the default of -m. */
void la_cli_engine_options_init(la_engine_options *eo);

/* Apply flag c (getopt's value) with its argument arg to eo. Numbers are not range-checked
 * (--threads -1 is the command's to refuse). */
la_cli_flag la_cli_engine_flag(int c, const char *arg, la_engine_options *eo, la_err *err);

/* la_cli_engine_flag() that reports a bad value itself, as run and serve do: "lazyattn
 * <command>: --device: ..." and "--threads must be >= 0" (a negative --threads is BAD_NUMBER). */
la_cli_flag la_cli_engine_flag_reported(int c, const char *arg, la_engine_options *eo, const char *command);

/* The store flags that only mean something together: --kv-dir-gib and --kv-write evict need
 * --kv-dir, --kv-io-timeout-ms and --kv-io-threads need --kv-dir or --kv-store (the host
 * tier does no I/O).
 * Returns 0, or prints "lazyattn <command>: ..." and returns 2 (LA_EXIT_USAGE). */
int la_cli_store_flags_check(const la_engine_options *eo, const char *command);

#endif
