/* lazyattn bench: serving benchmark of the methods side by side on RAG requests whose
 * documents come back in a new order: flags -> bench/session.h -> tables, JSON, plots.
 *
 *   lazyattn bench [-m DIR | --random-weights SHAPE [--tokenizer DIR]] --dataset FILE|synthetic
 *                  [--methods LIST] [--reorder shuffle|reverse|rotate|none] [--requests N]
 *                  [--concurrency N | --rate R] [--url http://127.0.0.1:8000] [--max-tokens N]
 *                  [--max-docs N] [--json OUT] [--plot FILE.png]
 *                  [--sweep kv|rate|concurrency|context|host-kv [--points LIST]]
 *                  [--device D] [--threads N] [--kv-blocks N] [--gpu-memory-fraction F]
 *                  [--max-batch-tokens N]
 *                  [--seed S] [--ignore-eos] [--chat-template FILE | --raw]
 *                  [--docs-per-request N] [--doc-tokens N] [--pool-docs N] [--zipf S]
 *                  [--host-kv-gib N] [--kv-dir DIR] [--kv-dir-gib N] [--kv-write through|evict]
 *                  [--kv-secret-file F] [--kv-store URL] [--kv-io-timeout-ms N]
 *
 * The session (bench/session.h) runs the warm-up and the measured requests of every method,
 * in process or against a running `lazyattn serve` (--url), at every point of a sweep.
 * --sweep kv|rate|concurrency|context|host-kv runs one sweep (bench/session.h says what each
 * measures); --points overrides its default points. With a KV store tier (or --sweep
 * host-kv) the tables add the document hit ratio by tier (pool, host, disk, shared) and the
 * JSON the store's own numbers. With --dataset synthetic, a concurrency
 * sweep defaults to every request sharing one 1024-token document, a context sweep to every
 * pool document in every request.
 *
 * stdout: the table(s); stderr: a progress bar; --json: every number, the machine, model,
 * commit and command; --plot: the TTFT CDF and TTFT against context length, or the sweep.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/timer.h"
#include "bench/machine.h"
#include "bench/plot.h"
#include "bench/session.h"
#include "bench/session_report.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "lazyattn/lazyattn.h"

#ifndef LA_SOURCE_DIR
#define LA_SOURCE_DIR "."
#endif

/* Everything the command line says: the session's options and what only the command uses. */
typedef struct bench_opts {
    la_bench_session_opts so;
    bool model_given;
    const char *json_out, *plot, *tokenizer;
    bool set_docs_per_request, set_doc_tokens, set_pool_docs;
    bool set_in_process_only;
} bench_opts;

/* ---- progress bar ----------------------------------------------------------------------- */

static void on_progress(void *user) {
    la_cli_progress *p = user;
    p->done++;
    la_cli_progress_draw(p, false);
}

/* ---- usage ------------------------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
            "usage: lazyattn bench [-m DIR | --random-weights SHAPE [--tokenizer DIR]]\n"
            "                      --dataset FILE|synthetic [--methods LIST] [--reorder MODE]\n"
            "                      [--requests N] [--concurrency N | --rate R] [--url URL]\n"
            "                      [--max-tokens N] [--max-docs N] [--json OUT] [--plot FILE.png]\n"
            "                      [--sweep kv|rate|concurrency|context|host-kv [--points LIST]]\n"
            "                      [--device D] [--threads N] [--kv-blocks N] [--seed S] [--ignore-eos]\n"
            "                      [--gpu-memory-fraction F] [--cpu-weights f32|bf16|f16|bf16-dot]\n"
            "                      [--cpu-kv f32|bf16] [--max-batch-tokens N] [--async-scheduling M]\n"
            "                      [--prefill-first] [--doc-token-cache-mib N]\n"
            "                      [--docs-per-request N] [--doc-tokens N] [--pool-docs N] [--zipf S]\n"
            "                      [--timeout S] [--duration S] [--salt S] [--no-warmup]\n"
            "                      [--warmup-draws N]\n"
            "                      [--chat-template FILE | --raw]\n"
            "                      [store flags below]\n"
            "\n"
            "  --dataset      a RAG file (../shared/data, the demo set) or 'synthetic'\n"
            "  --methods      default recompute,prefix,block,mepic,lazy; lazy+r16, lazy+c15,\n"
            "                 lazy+r4+c15: with recovery (README \"Recovery\"); lazy+pre,\n"
            "                 lazy+pre+c15: documents computed after the preamble\n"
            "  --reorder      shuffle (default), reverse, rotate or none: the measured requests'\n"
            "                 document order against the warm-up's\n"
            "  --requests     measured requests per method and point (32; a concurrency sweep's\n"
            "                 default: twice its largest concurrency)\n"
            "  --duration     bound per point and method, seconds: nothing is sent after it and\n"
            "                 (in process) what still runs at 1.25x it is cancelled; a point with\n"
            "                 such requests is reported saturated, with its achieved rate\n"
            "  --max-tokens   new tokens per request (32)\n"
            "  --concurrency  closed loop: requests in flight (1); --rate: Poisson arrivals per s\n"
            "  --max-batch-tokens  the engine's token budget per step: decode rows plus prefill\n"
            "                 chunks (0: 1024 on the CPU, 8192 on a GPU of 70 GiB or more, else\n"
            "                 2048; at least the engine's max_running: --concurrency or the\n"
            "                 sweep's largest point, 64 at least); the requests admitted together\n"
            "                 share their first steps\n"
            "  --async-scheduling  auto (on with CUDA), on or off: the engine queues the next\n"
            "                 decode step before it reads this one's tokens back\n"
            "  --prefill-first  a step with prefill work ready packs no decode rows (README\n"
            "                 \"Async scheduling\"): lower TTFT, higher TPOT\n"
            "  --doc-token-cache-mib  memory for documents' token ids by their text (64; 0:\n"
            "                 off: every request's documents are tokenized as it is submitted)\n"
            "  --url          benchmark a running `lazyattn serve` instead of an engine in process\n"
            "  --sweep        kv (capacity vs document hit ratio), rate (vs TTFT), concurrency\n"
            "                 (vs TPOT), context (length vs TTFT), host-kv (host tier GiB vs TTFT and\n"
            "                 hits per tier; 0,0.25,1); --points sets the values\n"
            "  synthetic      --docs-per-request 4, --doc-tokens 128, --pool-docs 64, --zipf 1.0\n"
            "  --salt         every request's cache salt (default: one per run, point and method);\n"
            "                 with --kv-dir, a later run (or `lazyattn ingest --salt`) finds its records\n"
            "  --no-warmup    measure from the first request (e.g. a restart on a filled --kv-dir)\n"
            "  --warmup-draws synthetic: warm-up requests drawn by popularity after the pass that\n"
            "                 covers the pool once (default: as many as --requests)\n"
            "  requests       the question as a chat message, rendered by the model's chat template\n"
            "                 around the documents; --chat-template FILE: by that Jinja template\n"
            "                 instead (in process); --raw: no template, BOS + documents + question\n"
            "document KV store (README \"Document KV store\"; in process only):\n" LA_CLI_STORE_USAGE);
}

/* One message on stderr (fmt has one %s), exit status 2. */
static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "lazyattn bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see lazyattn bench --help)\n");
    return LA_EXIT_USAGE;
}

static int parse_double(const char *s, const char *flag, double *out) {
    char *end = NULL;
    errno = 0;
    double v = la_cli_is_decimal(s) ? strtod(s, &end) : 0.0;
    if (!end || errno || *end || !isfinite(v)) {
        fprintf(stderr, "lazyattn bench: %s: '%s' is not a number\n", flag, s);
        return LA_EXIT_USAGE;
    }
    *out = v;
    return 0;
}

static int parse_points(const char *s, bench_opts *o) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    o->so.n_points = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->so.n_points == LA_BENCH_MAX_POINTS) return usage_error("--points: at most 32 values", "");
        double v; /* > 0 is checked once --sweep is known (host-kv takes 0) */
        if (parse_double(t, "--points", &v) || !(v >= 0)) return usage_error("--points: '%s' must be >= 0", t);
        o->so.points[o->so.n_points++] = v;
    }
    return o->so.n_points ? 0 : usage_error("--points: empty list '%s'", s);
}

static int parse_methods(const char *s, bench_opts *o) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    o->so.n_methods = 0;
    la_err err = {0};
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        la_method_spec m;
        if (o->so.n_methods == LA_BENCH_MAX_METHODS)
            return usage_error("--methods: more than 12 methods in '%s'", s); /* LA_BENCH_MAX_METHODS */
        if (la_method_spec_parse(t, &m, &err) != LA_OK) return usage_error("--methods: %s", err.msg);
        for (int32_t i = 0; i < o->so.n_methods; i++)
            if (!strcmp(o->so.methods[i].name, m.name)) return usage_error("--methods: '%s' is listed twice", t);
        o->so.methods[o->so.n_methods++] = m;
    }
    return o->so.n_methods ? 0 : usage_error("--methods: empty list '%s'", s);
}

/* Parse argv into o. Returns 0, or the exit status (usage: 2; --help: -1 meaning exit 0). */
static int parse_args(int argc, char **argv, bench_opts *o) {
    enum {
        O_RANDOM = 1, O_TOKENIZER, O_DATASET, O_METHODS, O_REORDER, O_REQUESTS, O_CONC, O_RATE,
        O_URL, O_MAX_TOKENS, O_MAX_DOCS, O_JSON, O_PLOT, O_SWEEP, O_POINTS, O_SEED, O_IGNORE_EOS,
        O_DPR, O_DOC_TOKENS, O_POOL, O_ZIPF, O_TIMEOUT, O_SALT, O_NO_WARMUP, O_RAW,
        O_DURATION, O_WARMUP_DRAWS
    };
    static const struct option opts[] = {
        {"model", required_argument, 0, LA_CLI_OPT_MODEL},
        {"random-weights", required_argument, 0, O_RANDOM}, {"tokenizer", required_argument, 0, O_TOKENIZER},
        {"dataset", required_argument, 0, O_DATASET},       {"methods", required_argument, 0, O_METHODS},
        {"method", required_argument, 0, O_METHODS},        {"reorder", required_argument, 0, O_REORDER},
        {"requests", required_argument, 0, O_REQUESTS},     {"concurrency", required_argument, 0, O_CONC},
        {"rate", required_argument, 0, O_RATE},             {"url", required_argument, 0, O_URL},
        {"max-tokens", required_argument, 0, O_MAX_TOKENS}, {"max-docs", required_argument, 0, O_MAX_DOCS},
        {"json", required_argument, 0, O_JSON},             {"plot", required_argument, 0, O_PLOT},
        {"sweep", required_argument, 0, O_SWEEP},           {"points", required_argument, 0, O_POINTS},
        {"device", required_argument, 0, LA_CLI_OPT_DEVICE},
        {"threads", required_argument, 0, LA_CLI_OPT_THREADS},
        {"cpu-weights", required_argument, 0, LA_CLI_OPT_CPU_WEIGHTS},
        {"cpu-kv", required_argument, 0, LA_CLI_OPT_CPU_KV},
        {"kv-blocks", required_argument, 0, LA_CLI_OPT_KV_BLOCKS},
        {"max-batch-tokens", required_argument, 0, LA_CLI_OPT_MAX_BATCH_TOKENS},
        {"async-scheduling", required_argument, 0, LA_CLI_OPT_ASYNC},
        {"prefill-first", no_argument, 0, LA_CLI_OPT_PREFILL_FIRST},
        {"doc-token-cache-mib", required_argument, 0, LA_CLI_OPT_DOC_TOKEN_CACHE_MIB},
        {"gpu-memory-fraction", required_argument, 0, LA_CLI_OPT_GPU_MEMORY_FRACTION},
        {"seed", required_argument, 0, O_SEED},             {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"docs-per-request", required_argument, 0, O_DPR},
        {"chat-template", required_argument, 0, LA_CLI_OPT_CHAT_TEMPLATE}, {"raw", no_argument, 0, O_RAW},
        {"doc-tokens", required_argument, 0, O_DOC_TOKENS}, {"pool-docs", required_argument, 0, O_POOL},
        {"zipf", required_argument, 0, O_ZIPF},             {"timeout", required_argument, 0, O_TIMEOUT},
        {"duration", required_argument, 0, O_DURATION},
        {"salt", required_argument, 0, O_SALT},             {"no-warmup", no_argument, 0, O_NO_WARMUP},
        {"warmup-draws", required_argument, 0, O_WARMUP_DRAWS},
        LA_CLI_STORE_OPTIONS,
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    la_cli_engine_options_init(&o->so.eo);
    la_bench_workload_opts_init(&o->so.wo);
    o->so.wo.dataset = NULL;
    o->so.concurrency = 1;
    o->so.max_tokens = 32; /* the bundled model's two-hop answers take up to 18 tokens */
    o->so.timeout_s = 600;
    parse_methods("recompute,prefix,block,mepic,lazy", o);
    bool conc_given = false;
    la_err err = {0};
    int c, bad;
    int64_t seed;
    optind = 1;
    opterr = 0; /* usage_error says what is wrong, once */
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        la_cli_flag ef = la_cli_engine_flag(c, optarg, &o->so.eo, &err);
        if (ef != LA_CLI_FLAG_OTHER) { /* engine flags apply in process only */
            o->set_in_process_only = true;
            if (c == LA_CLI_OPT_MODEL) o->model_given = true;
            if (ef == LA_CLI_FLAG_BAD_DEVICE || ef == LA_CLI_FLAG_BAD_VALUE) return usage_error("%s", err.msg);
            if (ef == LA_CLI_FLAG_BAD_NUMBER) return LA_EXIT_USAGE;
            continue;
        }
        bad = 0;
        switch (c) {
        case O_RANDOM: o->so.eo.random_weights = optarg, o->set_in_process_only = true; break;
        case O_TOKENIZER: o->tokenizer = optarg, o->set_in_process_only = true; break;
        case O_DATASET: o->so.wo.dataset = optarg; break;
        case O_METHODS: bad = parse_methods(optarg, o); break;
        case O_REORDER:
            if (la_bench_reorder_parse(optarg, &o->so.wo.reorder, &err) != LA_OK)
                bad = usage_error("%s", err.msg);
            break;
        case O_REQUESTS:
            bad = la_cli_parse_i32(optarg, "--requests", &o->so.wo.n_requests);
            o->so.requests_set = true;
            break;
        case O_DURATION:
            bad = parse_double(optarg, "--duration", &o->so.duration_s);
            if (!bad && o->so.duration_s <= 0) return usage_error("--duration must be > 0 seconds%s", "");
            break;
        case O_CONC:
            bad = la_cli_parse_i32(optarg, "--concurrency", &o->so.concurrency), conc_given = true;
            break;
        case O_RATE: bad = parse_double(optarg, "--rate", &o->so.rate_per_s); break;
        case O_URL: o->so.url = optarg; break;
        case O_MAX_TOKENS:
            bad = la_cli_parse_i32(optarg, "--max-tokens", &o->so.max_tokens);
            break;
        case O_MAX_DOCS: bad = la_cli_parse_i32(optarg, "--max-docs", &o->so.wo.max_docs); break;
        case O_JSON:
            o->json_out = optarg;
            if (!*optarg) bad = usage_error("--json needs a file path%s", "");
            break;
        case O_PLOT:
            o->plot = optarg;
            if (!*optarg) bad = usage_error("--plot needs a file path%s", "");
            break;
        case O_SWEEP:
            o->so.sweep = LA_BENCH_SWEEP_NONE;
            for (int k = 1; k < LA_BENCH_SWEEP_COUNT; k++)
                if (!strcmp(optarg, la_bench_sweep_name((la_bench_sweep_kind)k))) o->so.sweep = (la_bench_sweep_kind)k;
            if (o->so.sweep == LA_BENCH_SWEEP_NONE)
                bad = usage_error("--sweep '%s': choose kv, rate, concurrency, context or host-kv", optarg);
            break;
        case O_POINTS: bad = parse_points(optarg, o); break;
        case O_SEED: bad = la_cli_parse_i64(optarg, "--seed", &seed), o->so.wo.seed = (uint64_t)seed; break;
        case O_IGNORE_EOS: o->so.ignore_eos = true; break;
        case O_SALT: o->so.cache_salt = optarg; break;
        case O_NO_WARMUP: o->so.no_warmup = true; break;
        case O_WARMUP_DRAWS:
            bad = la_cli_parse_i32(optarg, "--warmup-draws", &o->so.wo.warmup_draws);
            if (!bad && (o->so.wo.warmup_draws < 0 || o->so.wo.warmup_draws > 1000000))
                bad = usage_error("--warmup-draws: '%s' must be from 0 to 1000000", optarg);
            break;
        case O_DPR:
            bad = la_cli_parse_i32(optarg, "--docs-per-request", &o->so.wo.docs_per_request),
            o->set_docs_per_request = true;
            break;
        case O_DOC_TOKENS:
            bad = la_cli_parse_i32(optarg, "--doc-tokens", &o->so.wo.doc_tokens), o->set_doc_tokens = true;
            break;
        case O_POOL:
            bad = la_cli_parse_i32(optarg, "--pool-docs", &o->so.wo.pool_docs), o->set_pool_docs = true;
            break;
        case O_ZIPF: bad = parse_double(optarg, "--zipf", &o->so.wo.zipf_s); break;
        case O_TIMEOUT: bad = la_cli_parse_i32(optarg, "--timeout", &o->so.timeout_s); break;
        case O_RAW: o->so.raw = true; break;
        case 'h': usage(stdout); return -1;
        default: return usage_error("unknown option or missing value in '%s'", argv[optind - 1]);
        }
        if (bad) return LA_EXIT_USAGE;
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (!o->so.wo.dataset) return usage_error("--dataset FILE|synthetic is required%s", "");
    if (o->so.wo.n_requests < 1 || o->so.concurrency < 1 || o->so.max_tokens < 1 || o->so.timeout_s < 1)
        return usage_error("--requests, --concurrency, --max-tokens and --timeout must be >= 1%s", "");
    if (o->so.rate_per_s < 0 || (o->so.rate_per_s > 0 && conc_given))
        return usage_error("give either --concurrency N or --rate R (> 0)%s", "");
    if (o->so.wo.zipf_s < 0) return usage_error("--zipf must be >= 0%s", "");
    if (o->so.wo.warmup_draws >= 0 && (o->so.no_warmup || strcmp(o->so.wo.dataset, "synthetic")))
        return usage_error("--warmup-draws applies to --dataset synthetic with a warm-up%s", "");
    if (o->so.eo.kv_blocks < 0 || o->so.eo.n_threads < 0)
        return usage_error("--kv-blocks and --threads must be >= 0%s", "");
    if (o->so.eo.max_batch_tokens < 0)
        return usage_error("--max-batch-tokens must be >= 0 (0: the device's default)%s", "");
    if (o->so.url && o->set_in_process_only)
        return usage_error(
            "--url benchmarks the server's model: -m, --random-weights, --tokenizer, --device, "
            "--threads, --kv-blocks, --max-batch-tokens, --async-scheduling, --prefill-first, --doc-token-cache-mib, --chat-template and the store "
            "flags apply in "
            "process only%s",
            "");
    if (o->so.raw && o->so.eo.chat_template_file)
        return usage_error("give either --chat-template FILE or --raw (no template)%s", "");
    if (o->model_given && o->so.eo.random_weights)
        return usage_error("give either -m DIR or --random-weights SHAPE%s", "");
    if (o->so.sweep == LA_BENCH_SWEEP_KV && o->so.url)
        return usage_error(
            "--sweep kv creates an engine per KV capacity: it runs in process, not with --url%s", "");
    if (o->so.sweep == LA_BENCH_SWEEP_KV && o->so.eo.kv_blocks)
        return usage_error("--sweep kv sets the KV capacity itself: use --points, not --kv-blocks%s", "");
    if (o->so.sweep == LA_BENCH_SWEEP_RATE && conc_given)
        return usage_error("--sweep rate sets the request rate: --concurrency does not apply%s", "");
    if (o->so.sweep == LA_BENCH_SWEEP_CONCURRENCY && o->so.rate_per_s > 0)
        return usage_error("--sweep concurrency is a closed loop: --rate does not apply%s", "");
    if (o->so.n_points && o->so.sweep == LA_BENCH_SWEEP_NONE) return usage_error("--points needs --sweep%s", "");
    if (o->so.sweep != LA_BENCH_SWEEP_HOST_KV)
        for (int32_t i = 0; i < o->so.n_points; i++)
            if (!(o->so.points[i] > 0)) return usage_error("--points: every value must be > 0 for this sweep%s", "");
    if (o->so.sweep == LA_BENCH_SWEEP_HOST_KV && o->so.url)
        return usage_error("--sweep host-kv creates an engine per host tier size: it runs in process, not with --url%s",
                           "");
    if (o->so.sweep == LA_BENCH_SWEEP_HOST_KV && o->so.eo.host_kv_bytes)
        return usage_error("--sweep host-kv sets the host tier itself: use --points (GiB), not --host-kv-gib%s", "");
    if (la_cli_store_flags_check(&o->so.eo, "bench")) return LA_EXIT_USAGE;
    if (o->so.sweep == LA_BENCH_SWEEP_CONCURRENCY || o->so.sweep == LA_BENCH_SWEEP_CONTEXT)
        for (int32_t i = 0; i < o->so.n_points; i++)
            if (o->so.points[i] != floor(o->so.points[i]))
                return usage_error("--points: whole numbers for this sweep%s", "");
    if (o->so.eo.random_weights) {
        static char llama3_tok[512];
        snprintf(llama3_tok, sizeof llama3_tok, "%s/../shared/data/tokenizers/llama3", LA_SOURCE_DIR);
        o->so.eo.model_dir = NULL;
        o->so.eo.tokenizer_dir = o->tokenizer ? o->tokenizer
                              : access(llama3_tok, R_OK) == 0 ? llama3_tok
                                                              : la_cli_default_model_dir();
        o->so.ignore_eos = true; /* random weights: answers mean nothing; keep decode lengths fixed */
    } else if (o->tokenizer) {
        o->so.eo.tokenizer_dir = o->tokenizer;
    }
    bool synthetic = !strcmp(o->so.wo.dataset, "synthetic");
    if (o->so.sweep == LA_BENCH_SWEEP_CONCURRENCY && synthetic) { /* many requests share one long document */
        if (!o->set_pool_docs) o->so.wo.pool_docs = 1;
        if (!o->set_docs_per_request) o->so.wo.docs_per_request = 1;
        if (!o->set_doc_tokens) o->so.wo.doc_tokens = 1024;
    }
    if (o->so.sweep == LA_BENCH_SWEEP_CONTEXT && synthetic && !o->set_pool_docs) o->so.wo.pool_docs = o->so.wo.docs_per_request;
    return 0;
}

/* ---- the command ------------------------------------------------------------------------ */

int la_cli_bench(int argc, char **argv) {
    bench_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? LA_EXIT_OK : rc;
    la_err err = {0};
    if (o.plot && !la_bench_plot_available()) {
        fprintf(stderr, "lazyattn bench: %s\n", LA_BENCH_PLOT_MISSING);
        return LA_EXIT_ERROR;
    }
    /* outputs that cannot be written fail now, not after the whole run */
    const char *const outs[2][2] = {{"--json", o.json_out}, {"--plot", o.plot}};
    for (int i = 0; i < 2; i++)
        if (outs[i][1] && la_output_path_check(outs[i][1]) != 0) {
            fprintf(stderr, "lazyattn bench: %s %s: cannot write there (%s)\n", outs[i][0], outs[i][1],
                    strerror(errno));
            return LA_EXIT_ERROR;
        }
    la_cli_progress prog;
    la_cli_progress_init(&prog, 0);
    la_bench_session *b = NULL;
    la_status s = la_bench_session_create(&o.so, on_progress, &prog, &b, &err);
    if (s != LA_OK) { /* a malformed --url is a usage error */
        fprintf(stderr, "lazyattn bench: %s\n", err.msg);
        return s == LA_ERR_INVALID_ARG ? LA_EXIT_USAGE : LA_EXIT_ERROR;
    }
    prog.label = b->phase;
    const la_bench_session_opts *so = &b->o;
    s = la_bench_session_prepare(b, &err);
    if (s == LA_OK) {
        for (int32_t k = 0; k < b->n_points; k++)
            prog.total += (int64_t)so->n_methods * (b->points[k].w->n_warmup + b->points[k].w->n_measured);
        la_bench_session_print_header(b, stdout);
        fflush(stdout);
    }
    for (int32_t k = 0; k < b->n_points && s == LA_OK; k++) {
        const la_bench_point *p = &b->points[k];
        for (int32_t m = 0; m < so->n_methods && s == LA_OK; m++) {
            double wall_ms = 0;
            s = la_bench_session_run(b, k, m, &wall_ms, &err);
            if (s == LA_OK && !prog.tty) {
                char at[48] = ""; /* the sweep point */
                if (so->sweep) snprintf(at, sizeof at, "%s %g: ", la_bench_sweep_name(so->sweep), p->x);
                fprintf(stderr, "lazyattn bench: %s%s: %d/%d requests ok, %.1f s\n", at,
                        so->methods[m].name, p->sum[m].n_ok, p->w->n_measured, wall_ms / 1e3);
            }
        }
        if (s != LA_OK) break;
        la_cli_progress_end(&prog);
        la_bench_session_print_point(b, k, stdout);
        fflush(stdout);
    }
    if (s == LA_OK && so->sweep != LA_BENCH_SWEEP_NONE) la_bench_session_print_sweep(b, stdout);
    if (s == LA_OK && o.json_out) {
        cJSON *root = la_bench_session_json(b, argc + 1, argv - 1);
        if (la_json_write_file(o.json_out, root) != 0)
            s = la_err_set(&err, LA_ERR_IO, "--json %s: cannot write the file (%s)", o.json_out, strerror(errno));
        else
            fprintf(stderr, "lazyattn bench: wrote %s\n", o.json_out);
        cJSON_Delete(root);
    }
    if (s == LA_OK && o.plot) {
        s = la_bench_session_plot(b, o.plot, &err);
        if (s == LA_OK) fprintf(stderr, "lazyattn bench: wrote %s\n", o.plot);
    }
    rc = LA_EXIT_OK;
    if (s != LA_OK) {
        if (prog.tty && prog.done) fputc('\n', stderr);
        fprintf(stderr, "lazyattn bench: %s\n", err.msg);
        rc = LA_EXIT_ERROR;
    } else if (b->n_failed) {
        fprintf(stderr, "lazyattn bench: %lld of %lld measured requests failed (see the table)\n",
                (long long)b->n_failed, (long long)b->n_sent);
        rc = LA_EXIT_ERROR;
    }
    la_bench_session_destroy(b);
    return rc;
}
