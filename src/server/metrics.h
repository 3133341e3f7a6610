/* Server metrics in the Prometheus text exposition format (GET /metrics).
 *
 *   lazyattn_http_requests_total{route,code}     HTTP requests answered, by route and status
 *   lazyattn_ttft_seconds / lazyattn_tpot_seconds histograms over finished requests
 *   lazyattn_e2e_request_latency_seconds / lazyattn_request_queue_time_seconds histograms
 *   {model_name} over requests that finished with stop or length; lazyattn_model_info
 *   lazyattn_generated_tokens_total, lazyattn_requests_finished_total{reason}
 *   from la_engine_get_stats(): prompt and document token counters, document hit ratio
 *   (doc_tokens_reused / (reused + computed)), prefix hit ratio (prefix_tokens_reused /
 *   prompt_tokens), KV blocks (total, free, used = total - free, cached, pinned), queue
 *   depth, running requests, KV hits/misses/evictions, preemptions, engine steps
 *   from la_engine_get_store_stats(), the document KV store (README "Document KV store"):
 *     per tier, label tier="host" | "disk" | "shared":
 *       lazyattn_kv_store_enabled, lazyattn_kv_store_up (gauges: configured; its last
 *       operation succeeded), lazyattn_kv_store_hits_total / _misses_total (document
 *       lookups), lazyattn_kv_store_read_bytes_total / _written_bytes_total,
 *       lazyattn_kv_store_read_seconds_total / _write_seconds_total (I/O thread time: GB/s
 *       = rate(bytes) / rate(seconds)), lazyattn_kv_store_writes_total,
 *       lazyattn_kv_store_write_failures_total, lazyattn_kv_store_evictions_total,
 *       lazyattn_kv_store_errors_total, lazyattn_kv_store_records / _bytes (held now),
 *       lazyattn_kv_store_reads_skipped_total (held, computed instead: the read estimated
 *       slower), lazyattn_prefill_tokens_per_second (the rate reads are weighed against)
 *     lazyattn_kv_store_rejected_total{reason} (records read and not used: "short",
 *     "payload_checksum", "fingerprint", ...), lazyattn_kv_store_timeouts_total,
 *     lazyattn_kv_store_writebacks_total (pool evictions into the host tier),
 *     lazyattn_kv_store_spills_total (host tier to disk), lazyattn_kv_store_puts_dropped_total,
 *     lazyattn_kv_store_promotions_total, lazyattn_kv_store_lookups_dropped_total,
 *     lazyattn_documents_computed_total / lazyattn_documents_loaded_total (document jobs
 *     that ran the model / that a tier served), lazyattn_kv_copy_bytes_total{direction} and
 *     lazyattn_kv_copy_seconds_total{direction} ("in": host -> pool, "out": pool -> host)
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

/* The model_name label of the e2e and queue-time histograms and of lazyattn_model_info
 * (the served model id). */
void la_metrics_set_model_name(la_metrics *m, const char *name);

/* Count one answered HTTP request. route: a static string ("/v1/completions", "other"). */
void la_metrics_count_http(la_metrics *m, const char *route, int http_status);

/* Record a finished engine request (TTFT / TPOT histograms, generated tokens). */
void la_metrics_observe(la_metrics *m, const la_request_stats *st, la_finish_reason why);

/* The exposition text (heap string, caller frees; NULL on out of memory).
 *   es        a fresh engine snapshot
 *   ss        a fresh store snapshot (la_engine_get_store_stats)
 *   inflight  HTTP requests now waiting on the engine */
char *la_metrics_render(la_metrics *m, const la_engine_stats *es, const la_engine_store_stats *ss,
                        int64_t inflight);

#endif
