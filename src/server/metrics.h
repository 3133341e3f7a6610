/* Server metrics in the Prometheus text exposition format (GET /metrics).
 *
 *   lazyattn_http_requests_total{route,code}     HTTP requests answered, by route and status
 *   lazyattn_ttft_seconds / lazyattn_tpot_seconds histograms over finished requests
 *   lazyattn_generated_tokens_total, lazyattn_requests_finished_total{reason}
 *   from la_engine_get_stats(): prompt and document token counters, document hit ratio
 *   (doc_tokens_reused / (reused + computed)), prefix hit ratio (prefix_tokens_reused /
 *   prompt_tokens), KV blocks (total, free, used = total - free, cached, pinned), queue
 *   depth, running requests, KV hits/misses/evictions, preemptions, engine steps
 * Thread-safe.
 */
#ifndef LA_SERVER_METRICS_H
#define LA_SERVER_METRICS_H

#include <stdint.h>

#include "lazyattn/lazyattn.h"

typedef struct la_metrics la_metrics;

/* Caller owns *out; free with la_metrics_destroy(). Errors: LA_ERR_NO_MEMORY. */
la_status la_metrics_create(la_metrics **out, la_err *err);
void la_metrics_destroy(la_metrics *m); /* NULL: nothing */

/* Count one answered HTTP request. route: a static string ("/v1/completions", "other"). */
void la_metrics_count_http(la_metrics *m, const char *route, int http_status);

/* Record a finished engine request (TTFT / TPOT histograms, generated tokens). */
void la_metrics_observe(la_metrics *m, const la_request_stats *st, la_finish_reason why);

/* The exposition text (heap string, caller frees; NULL on out of memory).
 *   es        a fresh engine snapshot
 *   inflight  HTTP requests now waiting on the engine */
char *la_metrics_render(la_metrics *m, const la_engine_stats *es, int64_t inflight);

#endif
