/* The document KV store's numbers for reports: `lazyattn run --stats`, `lazyattn ingest`'s
 * summary and `lazyattn bench`'s JSON print the same object (README "Document KV store").
 *
 *   {"documents_computed", "documents_loaded",
 *    "tiers": {"host" | "disk" | "shared": {"enabled", "hits", "misses", "bytes_read",
 *              "bytes_written", "read_s", "write_s", "read_gb_per_s", "write_gb_per_s",
 *              "writes", "write_failures", "evictions", "errors", "records", "bytes", "up",
 *              "reads_skipped", "read_bytes_per_s_per_thread"}},
 *    "rejected", "rejected_by_reason": {"short": n, ...}, "timeouts", "writebacks", "spills",
 *    "puts_dropped", "promotions", "lookups_dropped", "copy_in_bytes", "copy_in_s", "copy_out_bytes",
 *    "copy_out_s", "prefill_tokens_per_s"}
 *
 * GB/s are bytes / seconds of the tier's I/O threads (10^9 bytes; null before any I/O).
 */
#ifndef LA_BENCH_STORE_STATS_H
#define LA_BENCH_STORE_STATS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "lazyattn/lazyattn.h"

/* Whether the engine of these stats has any store tier. */
bool la_bench_store_enabled(const la_engine_store_stats *s);

/* The object above from a snapshot of the engine's store (la_engine_get_store_stats) and
 * stats (la_engine_get_stats). Caller owns it. */
cJSON *la_bench_store_stats_json(const la_engine_store_stats *s, const la_engine_stats *es);

#endif
