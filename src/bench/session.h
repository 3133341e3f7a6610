/* One `lazyattn bench` session: the methods side by side on RAG requests whose documents come
 * back in a new order, at every point of a sweep (one point without a sweep), in process or
 * against a running `lazyattn serve`.
 *
 * Per method: the warm-up requests (bench/workload.h states the policy; not measured), then
 * the measured requests under a closed loop (concurrency) or Poisson arrivals (rate_per_s).
 * In process, one engine serves every method and a per-method cache salt keeps their cache
 * entries apart; with a URL, the same requests go to the server with the method in each
 * request's "method" field.
 *
 * Sweeps (default points unless the options give some):
 *   kv           KV capacity (% of the document pool's blocks) against the document hit
 *                ratio, under Zipf document popularity; in process only (a fresh engine per
 *                point and method). The capacity is the whole KV pool, as a GPU memory
 *                fraction is: cached documents and the running requests' blocks share it, the
 *                same for every method, and never below what one request needs alone under
 *                each method (kv_floor_blocks). Question blocks are cached too (LRU)
 *   rate         Poisson request rate against TTFT; default rates are 0.5..8x the single-
 *                stream rate 1000 / (mean E2E of the first method's cold requests)
 *   concurrency  closed-loop concurrency against TPOT
 *   context      context length against TTFT: synthetic doc_tokens points (all pool
 *                documents in every request), or a dataset's max_docs points
 *   host-kv      size of the KV store's host tier (GiB, 0: none; default 0, 0.25, 1) against
 *                TTFT and the document hit ratio per tier; in process only (a fresh engine
 *                per point and method, the options' pool, e.g. --kv-blocks smaller than the
 *                documents, and the options' other store tiers)
 *
 * Use: la_bench_session_create(), _prepare(), _run() for every point and method, then the
 * outputs of bench/session_report.h, then la_bench_session_destroy().
 */
#ifndef LA_BENCH_SESSION_H
#define LA_BENCH_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "bench/driver.h"
#include "bench/http.h"
#include "bench/report.h"
#include "bench/workload.h"
#include "lazyattn/lazyattn.h"

typedef enum la_bench_sweep_kind {
    LA_BENCH_SWEEP_NONE = 0,
    LA_BENCH_SWEEP_KV,
    LA_BENCH_SWEEP_RATE,
    LA_BENCH_SWEEP_CONCURRENCY,
    LA_BENCH_SWEEP_CONTEXT,
    LA_BENCH_SWEEP_HOST_KV,
    LA_BENCH_SWEEP_COUNT,
} la_bench_sweep_kind;

/* "none", "kv", "rate", "concurrency", "context", "host-kv". */
const char *la_bench_sweep_name(la_bench_sweep_kind k);

#define LA_BENCH_MAX_POINTS 32

typedef struct la_bench_session_opts {
    la_engine_options eo;       /* the engine of an in-process session */
    const char *url;            /* a running `lazyattn serve` (http://...), or NULL: in process */
    la_method_spec methods[LA_BENCH_MAX_METHODS]; /* "lazy", "lazy+r16" (method_spec.h) */
    int32_t n_methods;
    la_bench_workload_opts wo;
    int32_t concurrency;        /* closed loop: requests in flight (rate_per_s <= 0) */
    double rate_per_s;          /* > 0: open loop, Poisson arrivals */
    int32_t max_tokens;
    bool ignore_eos;
    la_bench_sweep_kind sweep;
    double points[LA_BENCH_MAX_POINTS]; /* the swept values; n_points 0: the defaults */
    int32_t n_points;
    int timeout_s;              /* HTTP: give up on a silent server after this long */
    double duration_s;          /* per point and method: la_bench_load.max_s (0: none) */
    bool requests_set;          /* wo.n_requests was given: a concurrency sweep keeps it */
    const char *cache_salt;     /* every request's salt (NULL: one of this run's own per point
                                   and method, so runs never share a cache); set it to reuse a
                                   KV store a previous run or `lazyattn ingest` filled */
    bool no_warmup;             /* measure the first requests (a restart on a filled store) */
    bool raw;                   /* no chat template: raw requests (la_bench_rag_request) */
} la_bench_session_opts;

/* One point of a sweep (the only point without a sweep). */
typedef struct la_bench_point {
    double x;                   /* the swept value as given (blocks %, rate, concurrency, ...) */
    la_bench_workload *w;       /* borrowed (shared) or owned (context sweeps) */
    bool owns_w;
    int64_t kv_blocks;          /* engine capacity (0: default) */
    int64_t host_kv_bytes;      /* host-kv sweep: the host tier of this point's engine */
    la_bench_load load;
    la_bench_summary sum[LA_BENCH_MAX_METHODS];
    la_bench_sample *samples[LA_BENCH_MAX_METHODS];
    cJSON *store_stats[LA_BENCH_MAX_METHODS]; /* in process with a store: its engine's
                                   la_bench_store_stats_json after the method ran (a sweep's
                                   fresh engine: this run; else the session's totals so far) */
    cJSON *step_stats[LA_BENCH_MAX_METHODS]; /* in process: where the engine's steps went over
                                   the measured run (step_stats_json in session.c) */
    int32_t n_samples;
} la_bench_point;

/* The session's state; callers read it, the functions below write it. */
typedef struct la_bench_session {
    la_bench_session_opts o;    /* a copy; _prepare() fills in the points and sizes */
    la_bench_url url;
    char nonce[32];
    char model[256], device[64];
    char phase[64];             /* what runs now ("lazy warm-up", "kv 25: lazy"), for progress */
    la_bench_progress_fn on_request;
    void *progress_user;
    la_engine *engine;          /* in process */
    la_bench_point points[LA_BENCH_MAX_POINTS];
    int32_t n_points;
    la_bench_workload shared;   /* the workload of every point but context sweeps' */
    double calib_base_rate;     /* rate sweep: 1000 / cold single-stream E2E */
    double tokens_per_word;
    int64_t pool_doc_blocks;    /* kv sweep: the pool's document blocks; */
    int64_t kv_request_doc_blocks;  /*   the largest request's preamble and documents, */
    int64_t kv_request_tail_blocks; /*   the largest question and output, */
    int64_t kv_floor_blocks;        /*   and the least capacity every request runs in */
    int32_t block_size;
    int32_t max_batch_tokens;   /* in process: the engine's token budget per step (its stats: the
                                   device's default where the options leave 0) */
    int64_t n_failed, n_sent;   /* measured requests (the duration bound's are neither) */
    char loadavg_start[64];     /* /proc/loadavg when the run began (a shared machine's noise) */
    bool store;                 /* a KV store tier is configured (in process), or a server's
                                   answers named tier hits: tables show hit ratios by tier */
} la_bench_session;

/* A session of the options o (copied; the strings they point to are borrowed for the
 * session's life). on_request(progress_user) is called once per finished request.
 * Errors: LA_ERR_INVALID_ARG (a malformed URL), LA_ERR_NO_MEMORY. Caller owns *out; free
 * with la_bench_session_destroy(). */
la_status la_bench_session_create(const la_bench_session_opts *o, la_bench_progress_fn on_request,
                                  void *progress_user, la_bench_session **out, la_err *err);

/* Connect to the server (its model id) or create the engine, calibrate what the options leave
 * to measurement (tokens per word of synthetic text, the single-stream rate of a rate sweep,
 * the KV room of a kv sweep), build the workloads and plan the points. Errors: those of the
 * engine, the workload and the HTTP client; the session can then only be destroyed. */
la_status la_bench_session_prepare(la_bench_session *b, la_err *err);

/* Warm up and measure method mi at point k (a kv sweep first replaces the engine by a fresh
 * one of the point's capacity); *wall_ms: the measured requests' wall time. A failed request
 * is counted in n_failed, not an error. Errors: a failing warm-up (LA_ERR_INTERNAL), those of
 * la_bench_run() and of the engine. */
la_status la_bench_session_run(la_bench_session *b, int32_t k, int32_t mi, double *wall_ms, la_err *err);

void la_bench_session_destroy(la_bench_session *b);

#endif
