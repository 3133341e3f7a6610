/* Summaries of `lazyattn bench` runs: latency distributions, throughput, cache hit ratios and
 * exact match per method, printed side by side and written as JSON.
 *
 * Definitions (also written into the JSON's "definitions"):
 *   percentiles     nearest rank over the successful requests (ITL: over all their gaps)
 *   requests_per_s  successful requests / wall time (first submit -> last answer)
 *   doc_hit_ratio   document tokens (preamble block included) served from the KV cache /
 *                   all document tokens. For recompute and prefix the documents are part of
 *                   the prompt: their reused document tokens are the prefix-cache hits that
 *                   fall inside the documents, min(prefix_tokens_reused, doc_tokens).
 *   prefix_hit_ratio  prefix_tokens_reused / prompt tokens, as the server's /metrics: for
 *                   prefix the hash-chain hit from the prompt start, for block/mepic/lazy
 *                   the question blocks found after the documents
 *   cached_ratio    usage.prompt_tokens_details.cached_tokens / prompt tokens
 *   doc_hit_ratio_by_tier  (with a KV store) doc_hit_ratio split by where the reused
 *                   document tokens were found: host, disk, shared = the request's
 *                   doc_tokens_host / _disk / _shared (loaded by its own document jobs) /
 *                   all document tokens; pool = doc_hit_ratio - the three (the block pool,
 *                   including documents another request was loading at the time)
 *   exact_match     la_rag_answer_matches (normalised containment) over successful requests
 *                   of questions with gold answers; absent for synthetic requests
 */
#ifndef LA_BENCH_REPORT_H
#define LA_BENCH_REPORT_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "bench/driver.h"
#include "bench/method_spec.h"

typedef struct la_bench_dist {
    int32_t n;
    double mean, p50, p90, p99; /* NAN when n == 0 */
} la_bench_dist;

typedef struct la_bench_summary {
    la_method_spec method;
    int32_t n_requests, n_ok;
    char first_error[LA_ERR_MSG_LEN];
    la_bench_dist ttft_ms, tpot_ms, itl_ms, e2e_ms, server_ttft_ms;
    double wall_s, requests_per_s, output_tokens_per_s, prompt_tokens_per_s;
    double doc_hit_ratio, prefix_hit_ratio, cached_ratio;
    double doc_hit_ratio_pool, doc_hit_ratio_host, doc_hit_ratio_disk, doc_hit_ratio_shared;
    bool store;                 /* a KV store was on: tables and JSON show the ratios by tier
                                   (la_bench_summarize sets it when any tier served a token;
                                   the caller may set it before printing) */
    double exact_match;         /* NAN when no request had gold answers */
    int32_t n_scored;
    double mean_prompt_tokens, mean_doc_tokens, mean_output_tokens;
    double mean_doc_tokens_recomputed; /* recovery (kv/plan.h) */
    /* the duration bound (la_bench_load.max_s): requests never sent, and those cut while
     * queued or running (in process: the queue the point ended with); saturated: some were
     * cut (the load outran the engine) */
    int32_t n_not_sent, n_cut;
    bool saturated;
} la_bench_summary;

/* v[n] sorted in place, and its mean and nearest-rank percentiles (NAN when n == 0). */
la_bench_dist la_bench_dist_of(double *v, int32_t n);

/* Nearest-rank percentile p (0-100) of the ascending v[n]; NAN when n == 0. */
double la_bench_percentile(const double *v, int32_t n, double p);

/* Summarise the measured samples[n] of items[n] (answers for exact match). */
void la_bench_summarize(la_method_spec method, const la_bench_item *items, const la_bench_sample *samples,
                        int32_t n, double wall_ms, la_bench_summary *out);

/* Print the summaries side by side: one column per method, one row per number. */
void la_bench_print_table(FILE *f, const la_bench_summary *s, int32_t n);

/* The summary as a JSON object; with samples, also its per-request arrays (ttft_ms, e2e_ms,
 * prompt_tokens, output_tokens, ok) for plots. Caller owns it. */
cJSON *la_bench_summary_json(const la_bench_summary *s, const la_bench_sample *samples, int32_t n);

/* The definitions above as a JSON object. Caller owns it. */
cJSON *la_bench_definitions_json(bool http);

#endif
