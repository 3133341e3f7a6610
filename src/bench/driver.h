/* Load generation of `lazyattn bench`: send a list of requests to one engine in this process
 * or to `lazyattn serve` over HTTP, under a closed loop (a fixed number of requests in
 * flight) or an open loop (Poisson arrivals at a mean rate), and time every token.
 *
 * In process, the calling thread is the engine thread (it runs la_engine_step() while there
 * is work) and a driver thread submits the requests; timestamps come from the event
 * callbacks. Over HTTP, client threads send streamed chat completions (the method in the
 * request's "method" field, the cache salt in "cache_salt") and time each server-sent event.
 *
 * Times (all ms, from the client's clock):
 *   ttft  submit (or request sent) -> first token event (first content chunk over HTTP)
 *   itl   gaps between consecutive token events (content chunks over HTTP, where one chunk
 *         may carry several tokens)
 *   tpot  (last token - first token) / (tokens - 1): mean time per output token after the
 *         first, for requests with >= 2 tokens. An eos token has no TOKEN event or text: in
 *         process its time is the DONE event's; over HTTP the finish chunk's (which is also
 *         the first token's time when no content came before it)
 *   e2e   submit -> done (end of stream)
 */
#ifndef LA_BENCH_DRIVER_H
#define LA_BENCH_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#include "bench/http.h"
#include "bench/workload.h"
#include "lazyattn/lazyattn.h"

typedef struct la_bench_sample {
    bool ok;
    char error[LA_ERR_MSG_LEN];   /* why the request failed ("" when ok) */
    char *text;                   /* generated text (heap, NUL-terminated; may be NULL) */
    size_t text_len;
    double t_submit_ms;           /* la_now_ms() at submit */
    double t_first_ms, t_last_ms; /* la_now_ms() of the first and last token event */
    double ttft_ms, tpot_ms, e2e_ms;
    bool has_tpot;                /* >= 2 tokens over time: tpot_ms is meaningful */
    double *itl_ms;               /* [n_itl] gaps between token events */
    int32_t n_itl, cap_itl;
    int32_t n_events;             /* token events (content chunks over HTTP) */
    /* from the engine (DONE event stats, or usage + the "lazyattn" extension over HTTP) */
    int32_t n_generated, n_prompt_tokens, n_doc_tokens;
    int64_t doc_tokens_reused, doc_tokens_computed, prefix_tokens_reused, cached_tokens;
    double server_ttft_ms;
    int64_t doc_tokens_host, doc_tokens_disk, doc_tokens_shared; /* of doc_tokens_reused: loaded
                                                                    from that store tier */
    int64_t doc_tokens_recomputed; /* recovery (kv/plan.h) */
    /* the load's duration bound (la_bench_load.max_s): never sent, or cut (cancelled in
     * process; over HTTP still running at the bound, not waited for past --timeout) */
    bool not_sent, cut;
} la_bench_sample;

typedef struct la_bench_load {
    int32_t concurrency;  /* closed loop: requests in flight (used when rate_per_s <= 0) */
    double rate_per_s;    /* open loop: Poisson arrivals at this mean rate (requests/s) */
    uint64_t seed;        /* of the arrival times */
    double max_s;         /* duration bound (0: none): no request is sent after max_s seconds,
                             and in process the ones still queued or running at
                             LA_BENCH_DRAIN x max_s are cancelled (cut); a point with cut
                             requests could not keep up: saturated */
} la_bench_load;

/* The drain after a duration bound, as a factor of it: requests sent just before the bound
 * finish normally unless the engine is behind. */
#define LA_BENCH_DRAIN 1.25

typedef struct la_bench_target {
    la_engine *engine;          /* in process (engine thread: the caller) ... */
    const la_bench_url *url;    /* ... or a running `lazyattn serve` */
    la_method method;
    int32_t recompute_first;    /* recovery's N (kv/plan.h; 0: none) */
    float recompute_ratio;      /* selected recovery's R (kv/plan.h; 0: none) */
    la_doc_context doc_context; /* what documents are computed after (la_doc_context) */
    const char *cache_salt;     /* separates this run's cache entries (may be NULL) */
    int32_t max_tokens;
    bool ignore_eos;
    int timeout_s;              /* HTTP: give up on a silent server after this long */
    bool raw;                   /* no chat template: la_bench_rag_request's raw requests (over
                                   HTTP: /v1/completions with the documents) */
} la_bench_target;

/* Called once per finished request (from the engine thread or a client thread, never two
 * at once). */
typedef void (*la_bench_progress_fn)(void *user);

/* Send items[n] (documents from w) under `load`; out[n] receives one sample per item
 * (zeroed first; free with la_bench_samples_free) and *wall_ms the time from the first
 * submit to the last answer (at most LA_BENCH_DRAIN x load->max_s when a bound cut the run). A request that
 * fails is a sample with ok = false and its error, not a failure of the run. Errors: LA_ERR_INVALID_ARG (target or load), LA_ERR_NO_MEMORY;
 * samples written so far are kept. */
la_status la_bench_run(const la_bench_target *t, const la_bench_workload *w,
                       const la_bench_item *items, int32_t n, const la_bench_load *load,
                       la_bench_sample *out, double *wall_ms, la_bench_progress_fn progress,
                       void *progress_user, la_err *err);

void la_bench_samples_free(la_bench_sample *s, int32_t n);

/* The request of a RAG question with the titled documents docs[order[d]] for d < n_docs:
 * the question as one user chat message, rendered by the model's chat template around the
 * documents (README "Chat templates and documents"), or with raw the question as the prompt
 * after the documents' blocks, no template (BOS, documents, question). Fills *msg and
 * segs[n_docs], which rp points to (they must outlive the submit), and initialises the rest of
 * rp (la_request_params_init). */
void la_bench_rag_request(const char *question, const la_rag_doc *docs, const int32_t *order, int32_t n_docs,
                          bool raw, la_chat_message *msg, la_segment *segs, la_request_params *rp);

/* What a request's DONE event said, for in-process tools that step the engine themselves
 * (bench/bench_cpu*.c, bench/bench_sampling.c). */
typedef struct la_bench_done {
    bool done;
    la_request_stats stats;
    la_finish_reason finish;
    char error[256];
} la_bench_done;

/* la_request_params.on_event filling the la_bench_done that user points to. */
void la_bench_on_done(void *user, const la_event *ev);

/* Submit rp (its on_event and user are set here) and step e on the calling thread until it
 * is done; *out gets its DONE. Errors: the submit's, or LA_ERR_INTERNAL with the request's
 * own error when it finished with LA_FINISH_ERROR. */
la_status la_bench_run_one(la_engine *e, la_request_params *rp, la_bench_done *out, la_err *err);

#endif
