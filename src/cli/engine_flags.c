/* The flags of the engine options (engine_flags.h). */
#include "cli/engine_flags.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "kv/store/redis_tier.h"

void la_cli_engine_options_init(la_engine_options *eo) {
    la_engine_options_init(eo);
    eo->model_dir = la_cli_default_model_dir();
}

static la_cli_flag i32_flag(const char *arg, const char *flag, int32_t *out) {
    return la_cli_parse_i32(arg, flag, out) ? LA_CLI_FLAG_BAD_NUMBER : LA_CLI_FLAG_SET;
}

/* A decimal number (la_cli_is_decimal) in [lo, hi] (lo > 0: a positive one); false with err
 * set. */
static bool number_in(const char *arg, const char *flag, double lo, double hi, const char *unit, double *out,
                      la_err *err) {
    char *end = NULL;
    errno = 0;
    double v = la_cli_is_decimal(arg) ? strtod(arg, &end) : 0.0;
    if (!end || *end || !isfinite(v)) {
        la_err_set(err, LA_ERR_INVALID_ARG, "%s: '%s' is not a number", flag, arg);
        return false;
    }
    if (v < lo) {
        la_err_set(err, LA_ERR_INVALID_ARG, "%s: %s must be %s %s", flag, arg, lo > 0 ? "> 0" : ">= 0", unit);
        return false;
    }
    if (v > hi) {
        la_err_set(err, LA_ERR_INVALID_ARG, "%s: %s is over the limit of %.0f %s", flag, arg, hi, unit);
        return false;
    }
    *out = v;
    return true;
}

#define GIB 1073741824.0
#define MAX_GIB 1048576.0 /* 1 PiB: far beyond any machine, and far below int64 bytes */

/* The store flags: set eo, or BAD_VALUE with err saying why. */
static la_cli_flag store_flag(int c, const char *arg, la_engine_options *eo, la_err *err) {
    double v;
    switch (c) {
    case LA_CLI_OPT_HOST_KV_GIB:
        if (!number_in(arg, "--host-kv-gib", 0, MAX_GIB, "GiB (0: no host tier)", &v, err)) return LA_CLI_FLAG_BAD_VALUE;
        eo->host_kv_bytes = (int64_t)(v * GIB);
        return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_KV_DIR_GIB:
        if (!number_in(arg, "--kv-dir-gib", 0, MAX_GIB, "GiB (0: no cap)", &v, err)) return LA_CLI_FLAG_BAD_VALUE;
        eo->kv_dir_bytes = (int64_t)(v * GIB);
        return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_KV_IO_TIMEOUT_MS:
        if (!number_in(arg, "--kv-io-timeout-ms", 1e-300, 86400e3, "ms", &v, err)) return LA_CLI_FLAG_BAD_VALUE;
        eo->kv_io_timeout_ms = v;
        return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_KV_IO_THREADS: { /* decimal digits only: no 0x10, 1e1 or 0.5 */
        char *end = NULL;
        errno = 0;
        long n = isdigit((unsigned char)arg[0]) ? strtol(arg, &end, 10) : 0;
        if (!isdigit((unsigned char)arg[0]) || *end || errno || n < 1 || n > 64) {
            la_err_set(err, LA_ERR_INVALID_ARG, "--kv-io-threads: '%s' is not a whole number of threads from 1 to 64",
                       arg);
            return LA_CLI_FLAG_BAD_VALUE;
        }
        eo->kv_io_threads = (int32_t)n;
        return LA_CLI_FLAG_SET;
    }
    case LA_CLI_OPT_KV_DIR:
    case LA_CLI_OPT_KV_SECRET_FILE:
        if (!*arg) {
            la_err_set(err, LA_ERR_INVALID_ARG, "%s needs a path", c == LA_CLI_OPT_KV_DIR ? "--kv-dir" : "--kv-secret-file");
            return LA_CLI_FLAG_BAD_VALUE;
        }
        if (c == LA_CLI_OPT_KV_DIR) eo->kv_dir = arg;
        else eo->kv_secret_file = arg;
        return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_ASYNC:
        if (strcmp(arg, "auto") && strcmp(arg, "on") && strcmp(arg, "off")) {
            la_err_set(err, LA_ERR_INVALID_ARG, "--async-scheduling: '%s' is not one of auto, on, off", arg);
            return LA_CLI_FLAG_BAD_VALUE;
        }
        eo->async_scheduling = !strcmp(arg, "on") ? LA_ASYNC_ON : !strcmp(arg, "off") ? LA_ASYNC_OFF : LA_ASYNC_AUTO;
        return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_PREFILL_FIRST: eo->prefill_first = true; return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_DOC_TOKEN_CACHE_MIB:
        if (!number_in(arg, "--doc-token-cache-mib", 0, MAX_GIB, "MiB (0: off)", &v, err)) return LA_CLI_FLAG_BAD_VALUE;
        eo->doc_token_cache_bytes = (int64_t)ceil(v * 1048576.0); /* a tiny size stays on */
        return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_KV_READ:
        if (strcmp(arg, "auto") && strcmp(arg, "always")) {
            la_err_set(err, LA_ERR_INVALID_ARG, "--kv-read: '%s' is not one of auto, always", arg);
            return LA_CLI_FLAG_BAD_VALUE;
        }
        eo->kv_read = strcmp(arg, "auto") ? LA_KV_READ_ALWAYS : LA_KV_READ_AUTO;
        return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_KV_WRITE:
        if (strcmp(arg, "through") && strcmp(arg, "evict")) {
            la_err_set(err, LA_ERR_INVALID_ARG, "--kv-write: '%s' is not one of through, evict", arg);
            return LA_CLI_FLAG_BAD_VALUE;
        }
        eo->kv_write_through = !strcmp(arg, "through");
        return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_KV_STORE: {
        la_redis_url u;
        la_err e = {0};
        if (la_redis_url_parse(arg, &u, &e) != LA_OK) {
            la_err_set(err, LA_ERR_INVALID_ARG, "--kv-store: %s", e.msg);
            return LA_CLI_FLAG_BAD_VALUE;
        }
        eo->kv_store_url = arg;
        return LA_CLI_FLAG_SET;
    }
    default: return LA_CLI_FLAG_OTHER;
    }
}

la_cli_flag la_cli_engine_flag(int c, const char *arg, la_engine_options *eo, la_err *err) {
    switch (c) {
    case LA_CLI_OPT_MODEL: eo->model_dir = arg; return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_DEVICE: {
        la_err e = {0};
        if (la_device_parse(arg, &eo->device, &e) == LA_OK) return LA_CLI_FLAG_SET;
        *err = e;
        return LA_CLI_FLAG_BAD_DEVICE;
    }
    case LA_CLI_OPT_THREADS: return i32_flag(arg, "--threads", &eo->n_threads);
    case LA_CLI_OPT_KV_BLOCKS:
        return la_cli_parse_i64(arg, "--kv-blocks", &eo->kv_blocks) ? LA_CLI_FLAG_BAD_NUMBER : LA_CLI_FLAG_SET;
    case LA_CLI_OPT_GPU_MEMORY_FRACTION: {
        float f;
        if (la_cli_parse_f32(arg, "--gpu-memory-fraction", &f)) return LA_CLI_FLAG_BAD_NUMBER;
        eo->gpu_memory_fraction = f;
        return LA_CLI_FLAG_SET;
    }
    case LA_CLI_OPT_BLOCK_SIZE: return i32_flag(arg, "--block-size", &eo->block_size);
    case LA_CLI_OPT_MAX_BATCH_TOKENS: return i32_flag(arg, "--max-batch-tokens", &eo->max_batch_tokens);
    case LA_CLI_OPT_MAX_QUEUE: return i32_flag(arg, "--max-queue", &eo->max_queue);
    case LA_CLI_OPT_MAX_RUNNING: return i32_flag(arg, "--max-running", &eo->max_running);
    case LA_CLI_OPT_MAX_DOCS: return i32_flag(arg, "--max-docs", &eo->max_docs);
    case LA_CLI_OPT_MAX_CONTEXT: return i32_flag(arg, "--max-context", &eo->max_context);
    case LA_CLI_OPT_CHAT_TEMPLATE: eo->chat_template_file = arg; return LA_CLI_FLAG_SET;
    case LA_CLI_OPT_RECOMPUTE_FIRST: {
        if (la_cli_parse_i32(arg, "--recompute-first", &eo->recompute_first)) return LA_CLI_FLAG_BAD_NUMBER;
        if (eo->recompute_first >= 0) return LA_CLI_FLAG_SET;
        la_err_set(err, LA_ERR_INVALID_ARG, "--recompute-first: %s must be >= 0 (tokens; 0: off)", arg);
        return LA_CLI_FLAG_BAD_VALUE;
    }
    case LA_CLI_OPT_RECOMPUTE_RATIO: {
        if (la_cli_parse_f32(arg, "--recompute-ratio", &eo->recompute_ratio)) return LA_CLI_FLAG_BAD_NUMBER;
        if (eo->recompute_ratio >= 0.0f && eo->recompute_ratio <= 1.0f) return LA_CLI_FLAG_SET;
        la_err_set(err, LA_ERR_INVALID_ARG, "--recompute-ratio: %s must be in [0, 1] (a fraction of the tokens; 0: off)",
                   arg);
        return LA_CLI_FLAG_BAD_VALUE;
    }
    case LA_CLI_OPT_DOC_CONTEXT: {
        la_err e;
        if (la_doc_context_parse(arg, &eo->doc_context, &e) == LA_OK) return LA_CLI_FLAG_SET;
        la_err_set(err, LA_ERR_INVALID_ARG, "--doc-context: %s", e.msg);
        return LA_CLI_FLAG_BAD_VALUE;
    }
    case LA_CLI_OPT_CPU_WEIGHTS: {
        static const char *const names[LA_CPU_WEIGHTS_COUNT] = {"auto", "f32", "bf16", "f16", "bf16-dot"};
        for (int i = 0; i < LA_CPU_WEIGHTS_COUNT; i++)
            if (!strcmp(arg, names[i])) {
                eo->cpu_weights = (la_cpu_weights)i;
                return LA_CLI_FLAG_SET;
            }
        la_err_set(err, LA_ERR_INVALID_ARG, "--cpu-weights: '%s' is not one of auto, f32, bf16, f16, bf16-dot", arg);
        return LA_CLI_FLAG_BAD_VALUE;
    }
    case LA_CLI_OPT_CPU_KV:
        if (!strcmp(arg, "f32") || !strcmp(arg, "bf16")) {
            eo->cpu_kv = !strcmp(arg, "bf16") ? LA_CPU_KV_BF16 : LA_CPU_KV_F32;
            return LA_CLI_FLAG_SET;
        }
        la_err_set(err, LA_ERR_INVALID_ARG, "--cpu-kv: '%s' is not one of f32, bf16", arg);
        return LA_CLI_FLAG_BAD_VALUE;
    default: return store_flag(c, arg, eo, err);
    }
}

la_cli_flag la_cli_engine_flag_reported(int c, const char *arg, la_engine_options *eo, const char *command) {
    la_err err = {0};
    la_cli_flag f = la_cli_engine_flag(c, arg, eo, &err);
    if (f == LA_CLI_FLAG_BAD_DEVICE) fprintf(stderr, "lazyattn %s: --device: %s\n", command, err.msg);
    if (f == LA_CLI_FLAG_BAD_VALUE) fprintf(stderr, "lazyattn %s: %s\n", command, err.msg);
    if (f == LA_CLI_FLAG_SET && c == LA_CLI_OPT_THREADS && (eo->n_threads < 0 || eo->n_threads > LA_MAX_THREADS)) {
        fprintf(stderr, "lazyattn %s: --threads must be 0 to %d (0: one per physical core)\n", command,
                LA_MAX_THREADS);
        f = LA_CLI_FLAG_BAD_NUMBER;
    }
    return f;
}

int la_cli_store_flags_check(const la_engine_options *eo, const char *command) {
    const char *why = eo->kv_dir_bytes > 0 && !eo->kv_dir ? "--kv-dir-gib caps the disk tier: it needs --kv-dir"
                      : !eo->kv_write_through && !eo->kv_dir
                          ? "--kv-write evict says when records go to disk: it needs --kv-dir"
                      : eo->kv_io_timeout_ms > 0 && !eo->kv_dir && !eo->kv_store_url
                          ? "--kv-io-timeout-ms bounds disk and shared-tier reads: it needs --kv-dir or --kv-store"
                      : eo->kv_io_threads > 0 && !eo->kv_dir && !eo->kv_store_url
                          ? "--kv-io-threads reads and writes the disk and shared tiers: it needs --kv-dir or --kv-store"
                      : eo->kv_read != LA_KV_READ_ALWAYS && !eo->kv_dir && !eo->kv_store_url
                          ? "--kv-read says when disk and shared-tier records are read: it needs --kv-dir or --kv-store"
                          : NULL;
    if (!why) return 0;
    fprintf(stderr, "lazyattn %s: %s\n", command, why);
    return LA_EXIT_USAGE;
}
