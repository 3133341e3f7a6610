/* lazyattn bench: serving benchmark of the methods side by side on RAG requests whose
 * documents come back in a new order.
 *
 *   lazyattn bench [-m DIR | --random-weights SHAPE [--tokenizer DIR]] --dataset FILE|synthetic
 *                  [--methods LIST] [--reorder shuffle|reverse|rotate|none] [--requests N]
 *                  [--concurrency N | --rate R] [--url http://127.0.0.1:8000] [--max-tokens N]
 *                  [--max-docs N] [--json OUT] [--plot FILE.png]
 *                  [--sweep kv|rate|concurrency|context [--points LIST]]
 *                  [--device D] [--threads N] [--kv-blocks N] [--gpu-memory-fraction F]
 *                  [--seed S] [--ignore-eos]
 *                  [--docs-per-request N] [--doc-tokens N] [--pool-docs N] [--zipf S]
 *
 * Per method: the warm-up requests (bench_workload.h states the policy; not measured), then
 * the measured requests under a closed loop (--concurrency, default 1) or Poisson arrivals
 * (--rate). In process, one engine serves every method and a per-method cache salt keeps
 * their cache entries apart; with --url, the same requests go to a running `lazyattn serve`
 * with the method in each request's "method" field.
 *
 * Sweeps (one command each; --points overrides the default points):
 *   kv           KV capacity (% of the document pool's blocks, plus room for the running
 *                requests) against the document hit ratio, under Zipf document popularity;
 *                in process only (a fresh engine per point and method). Question blocks
 *                are cached too and compete with documents for the capacity (LRU)
 *   rate         Poisson request rate against TTFT; default rates are 0.5..8x the single-
 *                stream rate 1000 / (mean E2E of the first method's cold requests)
 *   concurrency  closed-loop concurrency against TPOT; synthetic defaults: every request
 *                shares one 1024-token document, 32 output tokens
 *   context      context length against TTFT: synthetic --doc-tokens points (all pool
 *                documents in every request), or a dataset's --max-docs points
 *
 * stdout: the table(s); stderr: a progress bar; --json: every number, the machine, model,
 * commit and command; --plot: the TTFT CDF and TTFT against context length, or the sweep.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/timer.h"
#include "cli/bench_driver.h"
#include "cli/bench_http.h"
#include "cli/bench_plot.h"
#include "cli/bench_report.h"
#include "cli/bench_workload.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/machine.h"
#include "lazyattn/lazyattn.h"

#ifndef LA_SOURCE_DIR
#define LA_SOURCE_DIR "."
#endif

typedef enum sweep_kind { SWEEP_NONE = 0, SWEEP_KV, SWEEP_RATE, SWEEP_CONCURRENCY, SWEEP_CONTEXT } sweep_kind;
static const char *const k_sweep_names[] = {"none", "kv", "rate", "concurrency", "context"};

#define MAX_POINTS 32

/* Everything the command line says. */
typedef struct bench_opts {
    la_engine_options eo;
    bool model_given;
    const char *url, *json_out, *plot, *tokenizer;
    la_method methods[LA_METHOD_COUNT];
    int32_t n_methods;
    la_bench_workload_opts wo;
    bool set_docs_per_request, set_doc_tokens, set_pool_docs;
    int32_t concurrency, max_tokens;
    double rate_per_s;
    bool ignore_eos, set_in_process_only;
    sweep_kind sweep;
    double points[MAX_POINTS];
    int32_t n_points;
    int timeout_s;
} bench_opts;

/* One point of a sweep (the only point without a sweep). */
typedef struct point {
    double x;                   /* the swept value as given (blocks %, rate, concurrency, ...) */
    la_bench_workload *w;       /* borrowed (shared) or owned (context sweeps) */
    bool owns_w;
    int64_t kv_blocks;          /* engine capacity (0: default) */
    la_bench_load load;
    la_bench_summary sum[LA_METHOD_COUNT];
    la_bench_sample *samples[LA_METHOD_COUNT];
    int32_t n_samples;
} point;

/* ---- progress bar ----------------------------------------------------------------------- */

typedef struct progress {
    int64_t done, total;
    double t0, t_drawn;
    const char *label;
    bool tty;
} progress;

static void progress_draw(progress *p, bool force) {
    if (!p->tty) return;
    double now = la_now_ms();
    if (!force && now - p->t_drawn < 100 && p->done != p->total) return;
    p->t_drawn = now;
    int width = 30, filled = p->total ? (int)(width * p->done / p->total) : width;
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld  %-28s %6.1fs", filled, "##############################",
            width - filled, "", (long long)p->done, (long long)p->total, p->label, (now - p->t0) / 1e3);
    fflush(stderr);
}

static void on_progress(void *user) {
    progress *p = user;
    p->done++;
    progress_draw(p, false);
}

/* ---- usage ------------------------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
            "usage: lazyattn bench [-m DIR | --random-weights SHAPE [--tokenizer DIR]]\n"
            "                      --dataset FILE|synthetic [--methods LIST] [--reorder MODE]\n"
            "                      [--requests N] [--concurrency N | --rate R] [--url URL]\n"
            "                      [--max-tokens N] [--max-docs N] [--json OUT] [--plot FILE.png]\n"
            "                      [--sweep kv|rate|concurrency|context [--points LIST]]\n"
            "                      [--device D] [--threads N] [--kv-blocks N] [--seed S] [--ignore-eos]\n"
            "                      [--gpu-memory-fraction F]\n"
            "                      [--docs-per-request N] [--doc-tokens N] [--pool-docs N] [--zipf S]\n"
            "                      [--timeout S]\n"
            "\n"
            "  --dataset      a RAG file (../shared/data, the demo set) or 'synthetic'\n"
            "  --methods      default recompute,prefix,block,mepic,lazy\n"
            "  --reorder      shuffle (default), reverse, rotate or none: the measured requests'\n"
            "                 document order against the warm-up's\n"
            "  --requests     measured requests per method (32)\n"
            "  --max-tokens   new tokens per request (32)\n"
            "  --concurrency  closed loop: requests in flight (1); --rate: Poisson arrivals per s\n"
            "  --url          benchmark a running `lazyattn serve` instead of an engine in process\n"
            "  --sweep        kv (capacity vs document hit ratio), rate (vs TTFT), concurrency\n"
            "                 (vs TPOT), context (length vs TTFT); --points sets the values\n"
            "  synthetic      --docs-per-request 4, --doc-tokens 128, --pool-docs 64, --zipf 1.0\n");
}

/* One message on stderr (fmt has one %s), exit status 2. */
static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "lazyattn bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see lazyattn bench --help)\n");
    return LA_EXIT_USAGE;
}

static int parse_double(const char *s, const char *flag, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
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
    o->n_points = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_points == MAX_POINTS) return usage_error("--points: at most 32 values", "");
        double v;
        if (parse_double(t, "--points", &v) || !(v > 0)) return usage_error("--points: '%s' must be > 0", t);
        o->points[o->n_points++] = v;
    }
    return o->n_points ? 0 : usage_error("--points: empty list '%s'", s);
}

static int parse_methods(const char *s, bench_opts *o) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    o->n_methods = 0;
    la_err err = {0};
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        la_method m;
        if (la_method_parse(t, &m, &err) != LA_OK) return usage_error("--methods: %s", err.msg);
        for (int32_t i = 0; i < o->n_methods; i++)
            if (o->methods[i] == m) return usage_error("--methods: '%s' is listed twice", t);
        o->methods[o->n_methods++] = m;
    }
    return o->n_methods ? 0 : usage_error("--methods: empty list '%s'", s);
}

/* Parse argv into o. Returns 0, or the exit status (usage: 2; --help: -1 meaning exit 0). */
static int parse_args(int argc, char **argv, bench_opts *o) {
    enum {
        O_RANDOM = 1, O_TOKENIZER, O_DATASET, O_METHODS, O_REORDER, O_REQUESTS, O_CONC, O_RATE,
        O_URL, O_MAX_TOKENS, O_MAX_DOCS, O_JSON, O_PLOT, O_SWEEP, O_POINTS, O_DEVICE, O_THREADS,
        O_KV, O_SEED, O_IGNORE_EOS, O_DPR, O_DOC_TOKENS, O_POOL, O_ZIPF, O_TIMEOUT, O_GPU_FRAC
    };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},           {"random-weights", required_argument, 0, O_RANDOM},
        {"tokenizer", required_argument, 0, O_TOKENIZER}, {"dataset", required_argument, 0, O_DATASET},
        {"methods", required_argument, 0, O_METHODS},   {"method", required_argument, 0, O_METHODS},
        {"reorder", required_argument, 0, O_REORDER},   {"requests", required_argument, 0, O_REQUESTS},
        {"concurrency", required_argument, 0, O_CONC},  {"rate", required_argument, 0, O_RATE},
        {"url", required_argument, 0, O_URL},           {"max-tokens", required_argument, 0, O_MAX_TOKENS},
        {"max-docs", required_argument, 0, O_MAX_DOCS}, {"json", required_argument, 0, O_JSON},
        {"plot", required_argument, 0, O_PLOT},         {"sweep", required_argument, 0, O_SWEEP},
        {"points", required_argument, 0, O_POINTS},     {"device", required_argument, 0, O_DEVICE},
        {"threads", required_argument, 0, O_THREADS},   {"kv-blocks", required_argument, 0, O_KV},
        {"gpu-memory-fraction", required_argument, 0, O_GPU_FRAC},
        {"seed", required_argument, 0, O_SEED},         {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"docs-per-request", required_argument, 0, O_DPR}, {"doc-tokens", required_argument, 0, O_DOC_TOKENS},
        {"pool-docs", required_argument, 0, O_POOL},    {"zipf", required_argument, 0, O_ZIPF},
        {"timeout", required_argument, 0, O_TIMEOUT},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    la_engine_options_init(&o->eo);
    o->eo.model_dir = la_cli_default_model_dir();
    la_bench_workload_opts_init(&o->wo);
    o->wo.dataset = NULL;
    o->concurrency = 1;
    o->max_tokens = 32; /* the bundled model's two-hop answers take up to 18 tokens */
    o->timeout_s = 600;
    parse_methods("recompute,prefix,block,mepic,lazy", o);
    bool conc_given = false;
    la_err err = {0};
    int c, bad;
    int64_t seed;
    optind = 1;
    opterr = 0; /* usage_error says what is wrong, once */
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        bad = 0;
        switch (c) {
        case 'm': o->eo.model_dir = optarg, o->model_given = true, o->set_in_process_only = true; break;
        case O_RANDOM: o->eo.random_weights = optarg, o->set_in_process_only = true; break;
        case O_TOKENIZER: o->tokenizer = optarg, o->set_in_process_only = true; break;
        case O_DATASET: o->wo.dataset = optarg; break;
        case O_METHODS: bad = parse_methods(optarg, o); break;
        case O_REORDER:
            if (la_bench_reorder_parse(optarg, &o->wo.reorder, &err) != LA_OK)
                bad = usage_error("%s", err.msg);
            break;
        case O_REQUESTS: bad = la_cli_parse_i32(optarg, "--requests", &o->wo.n_requests); break;
        case O_CONC:
            bad = la_cli_parse_i32(optarg, "--concurrency", &o->concurrency), conc_given = true;
            break;
        case O_RATE: bad = parse_double(optarg, "--rate", &o->rate_per_s); break;
        case O_URL: o->url = optarg; break;
        case O_MAX_TOKENS:
            bad = la_cli_parse_i32(optarg, "--max-tokens", &o->max_tokens);
            break;
        case O_MAX_DOCS: bad = la_cli_parse_i32(optarg, "--max-docs", &o->wo.max_docs); break;
        case O_JSON:
            o->json_out = optarg;
            if (!*optarg) bad = usage_error("--json needs a file path%s", "");
            break;
        case O_PLOT:
            o->plot = optarg;
            if (!*optarg) bad = usage_error("--plot needs a file path%s", "");
            break;
        case O_SWEEP:
            o->sweep = SWEEP_NONE;
            for (int k = 1; k < 5; k++)
                if (!strcmp(optarg, k_sweep_names[k])) o->sweep = (sweep_kind)k;
            if (o->sweep == SWEEP_NONE)
                bad = usage_error("--sweep '%s': choose kv, rate, concurrency or context", optarg);
            break;
        case O_POINTS: bad = parse_points(optarg, o); break;
        case O_DEVICE:
            if (la_device_parse(optarg, &o->eo.device, &err) != LA_OK) bad = usage_error("%s", err.msg);
            o->set_in_process_only = true;
            break;
        case O_THREADS:
            bad = la_cli_parse_i32(optarg, "--threads", &o->eo.n_threads), o->set_in_process_only = true;
            break;
        case O_KV:
            bad = la_cli_parse_i64(optarg, "--kv-blocks", &o->eo.kv_blocks), o->set_in_process_only = true;
            break;
        case O_GPU_FRAC: {
            float f = 0;
            bad = la_cli_parse_f32(optarg, "--gpu-memory-fraction", &f), o->set_in_process_only = true;
            o->eo.gpu_memory_fraction = f;
            break;
        }
        case O_SEED: bad = la_cli_parse_i64(optarg, "--seed", &seed), o->wo.seed = (uint64_t)seed; break;
        case O_IGNORE_EOS: o->ignore_eos = true; break;
        case O_DPR:
            bad = la_cli_parse_i32(optarg, "--docs-per-request", &o->wo.docs_per_request),
            o->set_docs_per_request = true;
            break;
        case O_DOC_TOKENS:
            bad = la_cli_parse_i32(optarg, "--doc-tokens", &o->wo.doc_tokens), o->set_doc_tokens = true;
            break;
        case O_POOL:
            bad = la_cli_parse_i32(optarg, "--pool-docs", &o->wo.pool_docs), o->set_pool_docs = true;
            break;
        case O_ZIPF: bad = parse_double(optarg, "--zipf", &o->wo.zipf_s); break;
        case O_TIMEOUT: bad = la_cli_parse_i32(optarg, "--timeout", &o->timeout_s); break;
        case 'h': usage(stdout); return -1;
        default: return usage_error("unknown option or missing value in '%s'", argv[optind - 1]);
        }
        if (bad) return LA_EXIT_USAGE;
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (!o->wo.dataset) return usage_error("--dataset FILE|synthetic is required%s", "");
    if (o->wo.n_requests < 1 || o->concurrency < 1 || o->max_tokens < 1 || o->timeout_s < 1)
        return usage_error("--requests, --concurrency, --max-tokens and --timeout must be >= 1%s", "");
    if (o->rate_per_s < 0 || (o->rate_per_s > 0 && conc_given))
        return usage_error("give either --concurrency N or --rate R (> 0)%s", "");
    if (o->wo.zipf_s < 0) return usage_error("--zipf must be >= 0%s", "");
    if (o->eo.kv_blocks < 0 || o->eo.n_threads < 0)
        return usage_error("--kv-blocks and --threads must be >= 0%s", "");
    if (o->url && o->set_in_process_only)
        return usage_error(
            "--url benchmarks the server's model: -m, --random-weights, --tokenizer, --device, "
            "--threads and --kv-blocks apply in process only%s",
            "");
    if (o->model_given && o->eo.random_weights)
        return usage_error("give either -m DIR or --random-weights SHAPE%s", "");
    if (o->sweep == SWEEP_KV && o->url)
        return usage_error(
            "--sweep kv creates an engine per KV capacity: it runs in process, not with --url%s", "");
    if (o->sweep == SWEEP_KV && o->eo.kv_blocks)
        return usage_error("--sweep kv sets the KV capacity itself: use --points, not --kv-blocks%s", "");
    if (o->sweep == SWEEP_RATE && conc_given)
        return usage_error("--sweep rate sets the request rate: --concurrency does not apply%s", "");
    if (o->sweep == SWEEP_CONCURRENCY && o->rate_per_s > 0)
        return usage_error("--sweep concurrency is a closed loop: --rate does not apply%s", "");
    if (o->n_points && o->sweep == SWEEP_NONE) return usage_error("--points needs --sweep%s", "");
    if (o->sweep == SWEEP_CONCURRENCY || o->sweep == SWEEP_CONTEXT)
        for (int32_t i = 0; i < o->n_points; i++)
            if (o->points[i] != floor(o->points[i]))
                return usage_error("--points: whole numbers for this sweep%s", "");
    if (o->eo.random_weights) {
        static char llama3_tok[512];
        snprintf(llama3_tok, sizeof llama3_tok, "%s/../shared/data/tokenizers/llama3", LA_SOURCE_DIR);
        o->eo.model_dir = NULL;
        o->eo.tokenizer_dir = o->tokenizer ? o->tokenizer
                              : access(llama3_tok, R_OK) == 0 ? llama3_tok
                                                              : la_cli_default_model_dir();
        o->ignore_eos = true; /* random weights: answers mean nothing; keep decode lengths fixed */
    } else if (o->tokenizer) {
        o->eo.tokenizer_dir = o->tokenizer;
    }
    bool synthetic = !strcmp(o->wo.dataset, "synthetic");
    if (o->sweep == SWEEP_CONCURRENCY && synthetic) { /* many requests share one long document */
        if (!o->set_pool_docs) o->wo.pool_docs = 1;
        if (!o->set_docs_per_request) o->wo.docs_per_request = 1;
        if (!o->set_doc_tokens) o->wo.doc_tokens = 1024;
    }
    if (o->sweep == SWEEP_CONTEXT && synthetic && !o->set_pool_docs) o->wo.pool_docs = o->wo.docs_per_request;
    return 0;
}

/* ---- running ---------------------------------------------------------------------------- */

typedef struct bench {
    bench_opts *o;
    la_bench_url url;
    char nonce[32];
    char model[256], device[64];
    progress prog;
    point points[MAX_POINTS];
    int32_t n_points;
    la_bench_workload shared;   /* the workload of every point but context sweeps' */
    double calib_base_rate;     /* rate sweep: 1000 / cold single-stream E2E */
    double tokens_per_word;
    int64_t pool_doc_blocks;    /* kv sweep: the pool's document blocks; */
    int64_t reserve_blocks;     /*           and the room for running requests */
    int32_t block_size;
    int64_t n_failed, n_sent;
    char loadavg_start[64];     /* /proc/loadavg when the run began (a shared machine's noise) */
} bench;

/* The first three fields of /proc/loadavg ("" where there is none). */
static void read_loadavg(char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen("/proc/loadavg", "r");
    double a, b, c;
    if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3) snprintf(buf, cap, "%.2f %.2f %.2f", a, b, c);
    if (f) fclose(f);
}

static la_status make_engine(const bench_opts *o, int64_t kv_blocks, int32_t max_running, la_engine **e,
                             la_err *err) {
    la_engine_options eo = o->eo;
    if (kv_blocks) eo.kv_blocks = kv_blocks;
    eo.max_running = max_running > 64 ? max_running : 64;
    eo.max_queue = 1 << 16;
    return la_engine_create(&eo, e, err);
}

/* Warm up and measure one method at one point. */
static la_status run_method(bench *b, point *p, int32_t pi, int32_t mi, la_engine *e, la_err *err) {
    const bench_opts *o = b->o;
    la_method m = o->methods[mi];
    char salt[96], label[64];
    snprintf(salt, sizeof salt, "lazyattn-bench:%s:%d:%s", b->nonce, pi, la_method_name(m));
    la_bench_target t = {.engine = e, .url = o->url ? &b->url : NULL, .method = m, .cache_salt = salt,
                         .max_tokens = o->max_tokens, .ignore_eos = o->ignore_eos, .timeout_s = o->timeout_s};
    la_bench_workload *w = p->w;
    /* warm-up: a closed loop, as wide as the measured one (4 wide for open loops) */
    la_bench_load warm = {.concurrency = p->load.rate_per_s > 0 ? 4 : p->load.concurrency};
    la_bench_sample *ws = calloc((size_t)w->n_warmup + 1, sizeof(la_bench_sample));
    p->samples[mi] = calloc((size_t)w->n_measured + 1, sizeof(la_bench_sample));
    if (!ws || !p->samples[mi]) {
        free(ws);
        return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    }
    double wall = 0;
    char at[48] = ""; /* the sweep point, for the progress lines */
    if (o->sweep) snprintf(at, sizeof at, "%s %g: ", k_sweep_names[o->sweep], p->x);
    snprintf(label, sizeof label, "%s%s warm-up", at, la_method_name(m));
    b->prog.label = label;
    la_status s = la_bench_run(&t, w, w->warmup, w->n_warmup, &warm, ws, &wall, on_progress, &b->prog, err);
    for (int32_t i = 0; s == LA_OK && i < w->n_warmup; i++)
        if (!ws[i].ok) { /* a failing warm-up leaves nothing worth measuring */
            int32_t n_failed = 0;
            for (int32_t j = 0; j < w->n_warmup; j++) n_failed += !ws[j].ok;
            s = la_err_set(err, LA_ERR_INTERNAL, "%s: %d of %d warm-up requests failed, first: %s",
                           la_method_name(m), n_failed, w->n_warmup, ws[i].error);
        }
    la_bench_samples_free(ws, w->n_warmup);
    free(ws);
    if (s != LA_OK) return s;
    snprintf(label, sizeof label, "%s%s", at, la_method_name(m));
    s = la_bench_run(&t, w, w->measured, w->n_measured, &p->load, p->samples[mi], &wall, on_progress,
                     &b->prog, err);
    p->n_samples = w->n_measured;
    if (s != LA_OK) return s;
    la_bench_summarize(m, w->measured, p->samples[mi], w->n_measured, wall, &p->sum[mi]);
    b->n_sent += w->n_measured;
    b->n_failed += w->n_measured - p->sum[mi].n_ok;
    if (!b->prog.tty)
        fprintf(stderr, "lazyattn bench: %s%s: %d/%d requests ok, %.1f s\n", at, la_method_name(m),
                p->sum[mi].n_ok, w->n_measured, wall / 1e3);
    return LA_OK;
}

/* Tokens per word of synthetic text: from the engine's tokenizer, or over HTTP from the
 * server's document pre-warm answer; 1.3 (English with Llama-3) if neither works. */
static double calibrate_tokens_per_word(bench *b, la_engine *e) {
    const int32_t n_words = 300;
    char *text = la_bench_synthetic_text(987654321, n_words);
    double rate = 0;
    if (text && e) {
        int32_t *ids = NULL, n = 0;
        la_err err = {0};
        if (la_engine_tokenize(e, text, strlen(text), false, &ids, &n, &err) == LA_OK)
            rate = (double)n / (n_words + 2);
        free(ids);
    } else if (text && b->o->url) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "documents"), cJSON_CreateString(text));
        char salt[96];
        snprintf(salt, sizeof salt, "lazyattn-bench:%s:calibrate", b->nonce);
        cJSON_AddStringToObject(o, "cache_salt", salt);
        char *body = cJSON_PrintUnformatted(o), *answer = NULL;
        cJSON_Delete(o);
        int status = 0;
        la_err err = {0};
        if (body && la_bench_http_request(&b->url, "POST", "/v1/documents", body, b->o->timeout_s, NULL, NULL,
                                          &status, &answer, &err) == LA_OK && status == 200) {
            cJSON *a = cJSON_Parse(answer);
            const cJSON *tok = cJSON_GetObjectItemCaseSensitive(a, "tokens");
            if (cJSON_IsNumber(tok)) rate = tok->valuedouble / (n_words + 2);
            cJSON_Delete(a);
        }
        free(body);
        free(answer);
    }
    free(text);
    return rate > 0 ? rate : 1.3;
}

/* kv sweep: the blocks of every pool document ("- Title: ...\n...\n" as the RAG template
 * renders it), and the room the running requests need beyond the cache: per request its
 * documents and the preamble twice (block copies every document block), the question and
 * the output. The preamble and question sizes come from one probe request. */
static la_status size_kv(bench *b, la_engine *e, la_err *err) {
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    /* the options' block size when the engine's stats leave it 0 */
    int32_t B = b->block_size = st.block_size > 0 ? st.block_size : b->o->eo.block_size;
    la_bench_workload *w = &b->shared;
    int32_t *doc_tokens = calloc((size_t)w->n_docs + 1, sizeof(int32_t));
    if (!doc_tokens) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    b->pool_doc_blocks = 0;
    la_status s = LA_OK;
    for (int32_t d = 0; d < w->n_docs && s == LA_OK; d++) {
        size_t cap = strlen(w->docs[d].title) + strlen(w->docs[d].text) + 16;
        char *text = malloc(cap);
        int32_t *ids = NULL;
        if (!text) {
            s = la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
            break;
        }
        snprintf(text, cap, "- Title: %s\n%s\n", w->docs[d].title, w->docs[d].text);
        s = la_engine_tokenize(e, text, strlen(text), false, &ids, &doc_tokens[d], err);
        free(text);
        free(ids);
        b->pool_doc_blocks += (doc_tokens[d] + B - 1) / B;
    }
    /* the probe: preamble = its document tokens beyond the documents', tail = the rest */
    char salt[96];
    snprintf(salt, sizeof salt, "lazyattn-bench:%s:probe", b->nonce);
    la_bench_target t = {.engine = e, .method = LA_METHOD_LAZY, .cache_salt = salt, .max_tokens = 1};
    la_bench_load one = {.concurrency = 1};
    la_bench_sample probe;
    double wall;
    if (s == LA_OK) s = la_bench_run(&t, w, w->measured, 1, &one, &probe, &wall, NULL, NULL, err);
    if (s == LA_OK && !probe.ok)
        s = la_err_set(err, LA_ERR_INTERNAL, "--sweep kv: probe request failed: %s", probe.error);
    if (s == LA_OK) {
        int64_t docs0 = 0;
        for (int32_t d = 0; d < w->measured[0].n_docs; d++) docs0 += doc_tokens[w->measured[0].doc_ids[d]];
        int64_t preamble = probe.n_doc_tokens - docs0, tail = probe.n_prompt_tokens - probe.n_doc_tokens;
        if (preamble < 0) preamble = 0;
        int64_t biggest = 0;
        for (int32_t i = 0; i < w->n_measured + w->n_warmup; i++) {
            const la_bench_item *it = i < w->n_measured ? &w->measured[i] : &w->warmup[i - w->n_measured];
            int64_t need = (preamble + B - 1) / B;
            for (int32_t d = 0; d < it->n_docs; d++) need += (doc_tokens[it->doc_ids[d]] + B - 1) / B;
            if (need > biggest) biggest = need;
        }
        int32_t c = b->o->rate_per_s > 0 ? 4 : b->o->concurrency;
        b->reserve_blocks = (int64_t)c * (2 * biggest + (tail + 32 + b->o->max_tokens + B - 1) / B);
    }
    la_bench_samples_free(&probe, 1);
    free(doc_tokens);
    return s;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Rate sweep default points: multiples of the single-stream rate of the first method's cold
 * (warm-up) requests, measured at concurrency 1 under a salt of its own. */
static la_status calibrate_rate(bench *b, la_engine *e, la_err *err) {
    la_bench_workload *w = &b->shared;
    int32_t n = w->n_warmup < 8 ? w->n_warmup : 8;
    char salt[96];
    snprintf(salt, sizeof salt, "lazyattn-bench:%s:calibrate-rate", b->nonce);
    la_bench_target t = {.engine = e, .url = b->o->url ? &b->url : NULL, .method = b->o->methods[0],
                         .cache_salt = salt, .max_tokens = b->o->max_tokens, .ignore_eos = b->o->ignore_eos,
                         .timeout_s = b->o->timeout_s};
    la_bench_load one = {.concurrency = 1};
    la_bench_sample *s = calloc((size_t)n + 1, sizeof(la_bench_sample));
    if (!s) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    double wall = 0, e2e = 0;
    b->prog.label = "calibrating the rate";
    la_status st = la_bench_run(&t, w, w->warmup, n, &one, s, &wall, NULL, NULL, err);
    int32_t ok = 0;
    for (int32_t i = 0; i < n; i++)
        if (s[i].ok) e2e += s[i].e2e_ms, ok++;
    la_bench_samples_free(s, n);
    free(s);
    if (st != LA_OK) return st;
    if (!ok) return la_err_set(err, LA_ERR_INTERNAL, "--sweep rate: every calibration request failed");
    b->calib_base_rate = 1000.0 / (e2e / ok);
    static const double mult[] = {0.5, 1, 2, 4, 8};
    b->o->n_points = 5;
    for (int i = 0; i < 5; i++) {
        double r = b->calib_base_rate * mult[i];
        double mag = pow(10, floor(log10(r)) - 1); /* two significant digits */
        b->o->points[i] = round(r / mag) * mag;
    }
    return LA_OK;
}

/* The points of the run (one without a sweep). */
static la_status plan_points(bench *b, la_err *err) {
    bench_opts *o = b->o;
    static const double kv_pct[] = {10, 25, 50, 100, 200, 400};
    static const double conc[] = {1, 2, 4, 8, 16};
    static const double ctx_tokens[] = {64, 128, 256, 512, 1024};
    static const double ctx_docs[] = {1, 2, 4, 6, 8, 10};
    bool synthetic = !strcmp(o->wo.dataset, "synthetic");
    if (!o->n_points) {
        const double *def = NULL;
        int n = 0;
        if (o->sweep == SWEEP_KV) def = kv_pct, n = 6;
        if (o->sweep == SWEEP_CONCURRENCY) def = conc, n = 5;
        if (o->sweep == SWEEP_CONTEXT) def = synthetic ? ctx_tokens : ctx_docs, n = synthetic ? 5 : 6;
        for (int i = 0; i < n; i++) o->points[i] = def[i];
        if (n) o->n_points = n;
    }
    if (o->sweep != SWEEP_RATE && o->sweep != SWEEP_CONTEXT)
        qsort(o->points, (size_t)o->n_points, sizeof(double), cmp_dbl);
    b->n_points = o->sweep == SWEEP_NONE ? 1 : o->n_points;
    for (int32_t k = 0; k < b->n_points; k++) {
        point *p = &b->points[k];
        p->x = o->sweep == SWEEP_NONE ? 0 : o->points[k];
        p->w = &b->shared;
        p->load = (la_bench_load){
            .concurrency = o->concurrency, .rate_per_s = o->rate_per_s, .seed = o->wo.seed + (uint64_t)k};
        if (o->sweep == SWEEP_KV)
            p->kv_blocks = b->reserve_blocks + (int64_t)ceil(p->x / 100.0 * (double)b->pool_doc_blocks);
        if (o->sweep == SWEEP_RATE) p->load.rate_per_s = p->x;
        if (o->sweep == SWEEP_CONCURRENCY) p->load.concurrency = (int32_t)p->x;
        if (o->sweep == SWEEP_CONTEXT) {
            la_bench_workload_opts wo = o->wo;
            wo.tokens_per_word = b->tokens_per_word;
            if (synthetic) wo.doc_tokens = (int32_t)p->x;
            else wo.max_docs = (int32_t)p->x;
            p->w = calloc(1, sizeof(la_bench_workload));
            if (!p->w) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
            p->owns_w = true;
            LA_TRY(la_bench_workload_create(&wo, p->w, err));
        }
    }
    return LA_OK;
}

/* ---- output ----------------------------------------------------------------------------- */

static const char *load_text(const la_bench_load *l, char *buf, size_t cap) {
    if (l->rate_per_s > 0) snprintf(buf, cap, "open loop, Poisson %.3g req/s", l->rate_per_s);
    else snprintf(buf, cap, "closed loop, concurrency %d", l->concurrency);
    return buf;
}

static const char *sweep_x_label(const bench *b) {
    switch (b->o->sweep) {
    case SWEEP_KV: return "KV capacity (% of the document pool's blocks)";
    case SWEEP_RATE: return "request rate (req/s, Poisson arrivals)";
    case SWEEP_CONCURRENCY: return "concurrency (requests in flight)";
    case SWEEP_CONTEXT: return "prompt tokens (mean per request)";
    default: return "";
    }
}

/* The main number of a sweep point for method m, and its plot label. */
static double sweep_y(const bench *b, const point *p, int32_t m) {
    const la_bench_summary *s = &p->sum[m];
    switch (b->o->sweep) {
    case SWEEP_KV: return 100 * s->doc_hit_ratio;
    case SWEEP_RATE: return s->ttft_ms.p50;
    case SWEEP_CONCURRENCY: return s->tpot_ms.p50;
    case SWEEP_CONTEXT: return s->ttft_ms.p50;
    default: return NAN;
    }
}

static const char *sweep_y_label(const bench *b) {
    switch (b->o->sweep) {
    case SWEEP_KV: return "document hit ratio (%)";
    case SWEEP_RATE: return "TTFT p50 (ms)";
    case SWEEP_CONCURRENCY: return "TPOT p50 (ms per output token)";
    case SWEEP_CONTEXT: return "TTFT p50 (ms)";
    default: return "";
    }
}

static double sweep_x(const bench *b, const point *p, int32_t m) {
    return b->o->sweep == SWEEP_CONTEXT ? p->sum[m].mean_prompt_tokens : p->x;
}

static void print_header(const bench *b, FILE *f) {
    const bench_opts *o = b->o;
    char lt[96];
    fprintf(f, "lazyattn bench: %s on %s (%s)%s\n", b->model, b->device, o->url ? o->url : "in process",
            o->eo.random_weights ? " [random weights: timing only, answers meaningless]" : "");
    fprintf(f, "dataset %s (%s); %d measured requests per method%s; max_tokens %d%s; %s\n", o->wo.dataset,
            b->shared.format ? b->shared.format : b->points[0].w->format, b->points[0].w->n_measured,
            o->sweep ? " and point" : "", o->max_tokens, o->ignore_eos ? " (ignore eos)" : "",
            o->sweep == SWEEP_NONE   ? load_text(&b->points[0].load, lt, sizeof lt)
            : o->sweep == SWEEP_RATE ? "open loop per point"
                                     : load_text(&b->points[0].load, lt, sizeof lt));
    fprintf(f, "warm-up: %s\n", b->points[0].w->warmup_policy);
}

static void print_sweep(const bench *b, FILE *f) {
    const bench_opts *o = b->o;
    fprintf(f, "\nsweep %s: %s by method\n", k_sweep_names[o->sweep], sweep_y_label(b));
    fprintf(f, "%-12s", o->sweep == SWEEP_KV ? "kv %pool" : o->sweep == SWEEP_RATE ? "req/s"
                        : o->sweep == SWEEP_CONCURRENCY ? "concurrency" : "point");
    if (o->sweep == SWEEP_KV) fprintf(f, " %10s", "kv blocks");
    if (o->sweep == SWEEP_CONTEXT) fprintf(f, " %10s", "prompt tok");
    for (int32_t m = 0; m < o->n_methods; m++) fprintf(f, " %11s", la_method_name(o->methods[m]));
    fputc('\n', f);
    for (int32_t k = 0; k < b->n_points; k++) {
        const point *p = &b->points[k];
        fprintf(f, "%-12g", p->x);
        if (o->sweep == SWEEP_KV) fprintf(f, " %10lld", (long long)p->kv_blocks);
        if (o->sweep == SWEEP_CONTEXT) fprintf(f, " %10.0f", p->sum[0].mean_prompt_tokens);
        for (int32_t m = 0; m < o->n_methods; m++) {
            double y = sweep_y(b, p, m);
            if (isnan(y)) fprintf(f, " %11s", "-");
            else fprintf(f, " %11.2f", y);
        }
        fputc('\n', f);
    }
}

static cJSON *build_json(const bench *b, int argc, char **argv) {
    const bench_opts *o = b->o;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "tool", "lazyattn bench");
    char *cmd = la_command_line(argc, argv);
    cJSON_AddStringToObject(root, "command", cmd ? cmd : "");
    free(cmd);
    cJSON_AddItemToObject(root, "machine", la_machine_json());
    char load_end[64];
    read_loadavg(load_end, sizeof load_end);
    cJSON *la = cJSON_AddObjectToObject(root, "loadavg_1_5_15min");
    cJSON_AddStringToObject(la, "start", b->loadavg_start);
    cJSON_AddStringToObject(la, "end", load_end);
    cJSON_AddStringToObject(root, "model", b->model);
    cJSON_AddStringToObject(root, "device", b->device);
    if (o->eo.random_weights) {
        cJSON_AddStringToObject(root, "random_weights", o->eo.random_weights);
        cJSON_AddStringToObject(root, "note",
                                "random weights of the exact shape: timing is real, answers are meaningless");
    }
    cJSON_AddStringToObject(root, "mode", o->url ? "http" : "in-process");
    if (o->url) cJSON_AddStringToObject(root, "url", o->url);
    cJSON_AddStringToObject(root, "dataset", o->wo.dataset);
    cJSON_AddStringToObject(root, "format", b->points[0].w->format);
    cJSON *wl = cJSON_AddObjectToObject(root, "workload");
    cJSON_AddNumberToObject(wl, "requests_per_method", b->points[0].w->n_measured);
    cJSON_AddNumberToObject(wl, "warmup_requests_per_method", b->points[0].w->n_warmup);
    cJSON_AddStringToObject(wl, "reorder", la_bench_reorder_name(o->wo.reorder));
    cJSON_AddNumberToObject(wl, "max_tokens", o->max_tokens);
    cJSON_AddBoolToObject(wl, "ignore_eos", o->ignore_eos);
    cJSON_AddStringToObject(wl, "sampling", "greedy");
    cJSON_AddNumberToObject(wl, "seed", (double)o->wo.seed);
    if (strcmp(o->wo.dataset, "synthetic")) {
        cJSON_AddNumberToObject(wl, "max_docs", o->wo.max_docs);
    } else {
        cJSON *sy = cJSON_AddObjectToObject(wl, "synthetic");
        cJSON_AddNumberToObject(sy, "docs_per_request", o->wo.docs_per_request);
        cJSON_AddNumberToObject(sy, "doc_tokens", o->wo.doc_tokens);
        cJSON_AddNumberToObject(sy, "pool_docs", o->wo.pool_docs);
        cJSON_AddNumberToObject(sy, "zipf_s", o->wo.zipf_s);
        cJSON_AddNumberToObject(sy, "tokens_per_word", b->tokens_per_word);
    }
    cJSON_AddStringToObject(wl, "prompt",
                            "one user chat message (the question) with titled documents: the Block-FT "
                            "RAG template; each method's requests carry a cache salt of their own");
    cJSON_AddStringToObject(root, "warmup_policy", b->points[0].w->warmup_policy);
    cJSON *ld = cJSON_AddObjectToObject(root, "load");
    if (o->sweep == SWEEP_RATE || (o->sweep != SWEEP_CONCURRENCY && o->rate_per_s > 0)) {
        cJSON_AddStringToObject(ld, "mode", "open loop (Poisson arrivals)");
        if (o->sweep != SWEEP_RATE) cJSON_AddNumberToObject(ld, "rate_per_s", o->rate_per_s);
    } else {
        cJSON_AddStringToObject(ld, "mode", "closed loop");
        if (o->sweep != SWEEP_CONCURRENCY) cJSON_AddNumberToObject(ld, "concurrency", o->concurrency);
    }
    cJSON_AddItemToObject(root, "definitions", la_bench_definitions_json(o->url != NULL));
    if (o->sweep == SWEEP_NONE) {
        const point *p = &b->points[0];
        cJSON *ms = cJSON_AddArrayToObject(root, "methods");
        for (int32_t m = 0; m < o->n_methods; m++)
            cJSON_AddItemToArray(ms, la_bench_summary_json(&p->sum[m], p->samples[m], p->n_samples));
        return root;
    }
    cJSON *sw = cJSON_AddObjectToObject(root, "sweep");
    cJSON_AddStringToObject(sw, "kind", k_sweep_names[o->sweep]);
    cJSON_AddStringToObject(sw, "x", sweep_x_label(b));
    cJSON_AddStringToObject(sw, "y", sweep_y_label(b));
    if (o->sweep == SWEEP_KV) {
        cJSON_AddNumberToObject(sw, "block_size", b->block_size);
        cJSON_AddNumberToObject(sw, "pool_doc_blocks", (double)b->pool_doc_blocks);
        cJSON_AddNumberToObject(sw, "reserve_blocks", (double)b->reserve_blocks);
        cJSON_AddStringToObject(sw, "kv_blocks",
                                "reserve_blocks (room for the running requests) + x% of pool_doc_blocks");
    }
    if (o->sweep == SWEEP_RATE && b->calib_base_rate > 0) {
        cJSON_AddNumberToObject(sw, "single_stream_rate_per_s", b->calib_base_rate);
        cJSON_AddStringToObject(
            sw, "points_from",
            "0.5, 1, 2, 4, 8 x 1000 / mean E2E of the first method's cold requests at concurrency 1");
    }
    cJSON *pts = cJSON_AddArrayToObject(sw, "points");
    for (int32_t k = 0; k < b->n_points; k++) {
        const point *p = &b->points[k];
        cJSON *jp = cJSON_CreateObject();
        cJSON_AddNumberToObject(jp, "x", p->x);
        if (o->sweep == SWEEP_KV) cJSON_AddNumberToObject(jp, "kv_blocks", (double)p->kv_blocks);
        if (o->sweep == SWEEP_RATE) cJSON_AddNumberToObject(jp, "rate_per_s", p->load.rate_per_s);
        if (o->sweep == SWEEP_CONCURRENCY) cJSON_AddNumberToObject(jp, "concurrency", p->load.concurrency);
        if (o->sweep == SWEEP_CONTEXT)
            cJSON_AddNumberToObject(jp, strcmp(o->wo.dataset, "synthetic") ? "max_docs" : "doc_tokens", p->x);
        cJSON *ms = cJSON_AddArrayToObject(jp, "methods");
        for (int32_t m = 0; m < o->n_methods; m++)
            cJSON_AddItemToArray(ms, la_bench_summary_json(&p->sum[m], NULL, 0));
        cJSON_AddItemToArray(pts, jp);
    }
    return root;
}

static la_status write_plot(const bench *b, la_err *err) {
    const bench_opts *o = b->o;
    la_make_parent_dirs(o->plot);
    char title[1024];
    if (o->sweep == SWEEP_NONE) {
        const point *p = &b->points[0];
        char lt[96];
        snprintf(title, sizeof title,
                 "lazyattn bench: %s, %s (%s), %d requests per method, docs reordered: %s, %s", b->model,
                 b->device, p->w->format, p->w->n_measured, la_bench_reorder_name(o->wo.reorder),
                 load_text(&p->load, lt, sizeof lt));
        const la_bench_sample *samples[LA_METHOD_COUNT];
        int32_t n[LA_METHOD_COUNT];
        for (int32_t m = 0; m < o->n_methods; m++) samples[m] = p->samples[m], n[m] = p->n_samples;
        return la_bench_plot_requests(o->plot, title, o->methods, samples, n, o->n_methods, err);
    }
    double *x = calloc((size_t)(b->n_points * o->n_methods), sizeof(double));
    double *y = calloc((size_t)(b->n_points * o->n_methods), sizeof(double));
    if (!x || !y) {
        free(x), free(y);
        return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    }
    double lo = INFINITY, hi = 0;
    for (int32_t k = 0; k < b->n_points; k++)
        for (int32_t m = 0; m < o->n_methods; m++) {
            x[k * o->n_methods + m] = sweep_x(b, &b->points[k], m);
            double v = y[k * o->n_methods + m] = sweep_y(b, &b->points[k], m);
            if (v > 0 && v < lo) lo = v;
            if (v > hi) hi = v;
        }
    const char *what = o->sweep == SWEEP_KV ? "document hit ratio against KV capacity"
                       : o->sweep == SWEEP_RATE ? "TTFT against request rate"
                       : o->sweep == SWEEP_CONCURRENCY ? "TPOT against concurrency"
                                                       : "TTFT against context length";
    char detail[200];
    const la_bench_workload_opts *wo = &o->wo;
    if (strcmp(wo->dataset, "synthetic"))
        snprintf(detail, sizeof detail, "%s (%s), documents reordered: %s", wo->dataset,
                 b->points[0].w->format, la_bench_reorder_name(wo->reorder));
    else if (o->sweep == SWEEP_CONTEXT)
        snprintf(detail, sizeof detail,
                 "synthetic: %d documents per request from a pool of %d, reordered: %s", wo->docs_per_request,
                 wo->pool_docs, la_bench_reorder_name(wo->reorder));
    else if (wo->pool_docs == 1)
        snprintf(detail, sizeof detail, "synthetic: every request shares one ~%d-token document",
                 wo->doc_tokens);
    else
        snprintf(detail, sizeof detail,
                 "synthetic: %d documents per request of ~%d tokens from a pool of %d, zipf %.2g",
                 wo->docs_per_request, wo->doc_tokens, wo->pool_docs, wo->zipf_s);
    snprintf(title, sizeof title, "lazyattn bench: %s\n%s, %s; %s", what, b->model, b->device, detail);
    la_bench_sweep_plot sp = {.png = o->plot,
                              .title = title,
                              .xlabel = sweep_x_label(b),
                              .ylabel = sweep_y_label(b),
                              .log_x = true, /* every sweep's default points grow geometrically */
                              .log_y = o->sweep != SWEEP_KV && hi > 0 && lo < INFINITY && hi / lo > 20,
                              .y_max = o->sweep == SWEEP_KV ? 102 : 0,
                              .ticks_at_points = true,
                              .methods = o->methods,
                              .n_methods = o->n_methods,
                              .n_points = b->n_points,
                              .x = x,
                              .y = y};
    la_status s = la_bench_plot_sweep(&sp, err);
    free(x), free(y);
    return s;
}

/* ---- the command ------------------------------------------------------------------------ */

static la_status fetch_server_model(bench *b, la_err *err) {
    int status = 0;
    char *body = NULL;
    LA_TRY(la_bench_http_request(&b->url, "GET", "/v1/models", NULL, b->o->timeout_s, NULL, NULL, &status,
                                 &body, err));
    cJSON *o = status == 200 && body ? cJSON_Parse(body) : NULL;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "data"), 0), "id");
    snprintf(b->model, sizeof b->model, "%s", cJSON_IsString(id) ? id->valuestring : "unknown");
    cJSON_Delete(o);
    free(body);
    snprintf(b->device, sizeof b->device, "server");
    if (status != 200) {
        la_err_set(err, LA_ERR_IO, "%s: GET /v1/models answered HTTP %d", b->o->url, status);
        return LA_ERR_IO;
    }
    return LA_OK;
}

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
    bench *b = calloc(1, sizeof *b);
    if (!b) {
        fprintf(stderr, "lazyattn bench: out of memory\n");
        return LA_EXIT_ERROR;
    }
    b->o = &o;
    snprintf(b->nonce, sizeof b->nonce, "%lx-%x", (unsigned long)time(NULL), (unsigned)getpid());
    b->prog = (progress){.t0 = la_now_ms(), .tty = isatty(STDERR_FILENO), .label = ""};
    read_loadavg(b->loadavg_start, sizeof b->loadavg_start);
    la_engine *e = NULL;
    la_status s = LA_OK;
    if (o.url) {
        s = la_bench_url_parse(o.url, &b->url, &err);
        if (s != LA_OK) {
            free(b);
            fprintf(stderr, "lazyattn bench: %s\n", err.msg);
            return LA_EXIT_USAGE;
        }
        s = fetch_server_model(b, &err);
    } else {
        int32_t max_c = o.concurrency;
        if (o.sweep == SWEEP_CONCURRENCY)
            for (int32_t i = 0; i < o.n_points; i++)
                max_c = o.points[i] > max_c ? (int32_t)o.points[i] : max_c;
        s = make_engine(&o, 0, max_c, &e, &err);
        if (s == LA_OK) {
            snprintf(b->model, sizeof b->model, "%s", la_engine_model_name(e));
            snprintf(b->device, sizeof b->device, "%s", la_engine_device_name(e));
        }
    }
    bool synthetic = !strcmp(o.wo.dataset, "synthetic");
    b->tokens_per_word = o.wo.tokens_per_word;
    if (s == LA_OK && synthetic) b->tokens_per_word = o.wo.tokens_per_word = calibrate_tokens_per_word(b, e);
    if (s == LA_OK &&
        o.sweep == SWEEP_CONCURRENCY) { /* each point needs at least 2x its requests in flight */
        int32_t max_c = 1;
        for (int32_t i = 0; i < o.n_points; i++) max_c = o.points[i] > max_c ? (int32_t)o.points[i] : max_c;
        if (!o.n_points) max_c = 16;
        if (o.wo.n_requests < 2 * max_c) o.wo.n_requests = 2 * max_c;
    }
    if (s == LA_OK) s = la_bench_workload_create(&o.wo, &b->shared, &err);
    if (s == LA_OK && o.sweep == SWEEP_KV) s = size_kv(b, e, &err);
    if (s == LA_OK && o.sweep == SWEEP_RATE && !o.n_points) s = calibrate_rate(b, e, &err);
    if (s == LA_OK) s = plan_points(b, &err);
    if (s == LA_OK) {
        b->prog.total = 0;
        for (int32_t k = 0; k < b->n_points; k++)
            b->prog.total += (int64_t)o.n_methods * (b->points[k].w->n_warmup + b->points[k].w->n_measured);
        print_header(b, stdout);
        fflush(stdout);
    }
    for (int32_t k = 0; k < b->n_points && s == LA_OK; k++) {
        point *p = &b->points[k];
        for (int32_t m = 0; m < o.n_methods && s == LA_OK; m++) {
            if (o.sweep == SWEEP_KV) { /* a fresh engine of this capacity: nothing else in it */
                la_engine_destroy(e);
                e = NULL;
                s = make_engine(&o, p->kv_blocks, o.concurrency, &e, &err);
            }
            if (s == LA_OK) s = run_method(b, p, k, m, e, &err);
        }
        if (s != LA_OK) break;
        if (b->prog.tty) {
            progress_draw(&b->prog, true);
            fputc('\n', stderr);
        }
        if (o.sweep == SWEEP_NONE) {
            fputc('\n', stdout);
            la_bench_print_table(stdout, p->sum, o.n_methods);
        } else {
            char lt[96];
            printf("\n%s %g%s%s (%s):\n", k_sweep_names[o.sweep], p->x,
                   o.sweep == SWEEP_KV ? "% of the pool" : "",
                   o.sweep == SWEEP_CONTEXT ? (synthetic ? " doc tokens" : " docs") : "",
                   load_text(&p->load, lt, sizeof lt));
            printf("  %-10s %9s %9s %9s %9s %8s %8s %8s %6s\n", "method", "TTFT p50", "TTFT p99", "TPOT p50",
                   "E2E p50", "req/s", "doc hit%", "prompt", "EM%");
            for (int32_t m = 0; m < o.n_methods; m++) {
                const la_bench_summary *su = &p->sum[m];
                char em[16] = "-";
                if (!isnan(su->exact_match)) snprintf(em, sizeof em, "%.1f", 100 * su->exact_match);
                printf("  %-10s %9.2f %9.2f %9.2f %9.2f %8.2f %8.1f %8.0f %6s\n", la_method_name(su->method),
                       su->ttft_ms.p50, su->ttft_ms.p99, su->tpot_ms.p50, su->e2e_ms.p50, su->requests_per_s,
                       100 * su->doc_hit_ratio, su->mean_prompt_tokens, em);
            }
        }
        fflush(stdout);
    }
    if (s == LA_OK && o.sweep != SWEEP_NONE) print_sweep(b, stdout);
    if (s == LA_OK && o.json_out) {
        cJSON *root = build_json(b, argc + 1, argv - 1);
        if (la_json_write_file(o.json_out, root) != 0)
            s = la_err_set(&err, LA_ERR_IO, "--json %s: cannot write the file (%s)", o.json_out, strerror(errno));
        else
            fprintf(stderr, "lazyattn bench: wrote %s\n", o.json_out);
        cJSON_Delete(root);
    }
    if (s == LA_OK && o.plot) {
        s = write_plot(b, &err);
        if (s == LA_OK) fprintf(stderr, "lazyattn bench: wrote %s\n", o.plot);
    }
    rc = LA_EXIT_OK;
    if (s != LA_OK) {
        if (b->prog.tty && b->prog.done) fputc('\n', stderr);
        fprintf(stderr, "lazyattn bench: %s\n", err.msg);
        rc = LA_EXIT_ERROR;
    } else if (b->n_failed) {
        fprintf(stderr, "lazyattn bench: %lld of %lld measured requests failed (see the table)\n",
                (long long)b->n_failed, (long long)b->n_sent);
        rc = LA_EXIT_ERROR;
    }
    for (int32_t k = 0; k < b->n_points; k++) {
        point *p = &b->points[k];
        for (int32_t m = 0; m < o.n_methods; m++) {
            la_bench_samples_free(p->samples[m], p->n_samples);
            free(p->samples[m]);
        }
        if (p->owns_w) {
            la_bench_workload_free(p->w);
            free(p->w);
        }
    }
    la_bench_workload_free(&b->shared);
    la_engine_destroy(e);
    free(b);
    return rc;
}
