/* Precomputing a corpus into the document KV store's disk tier (`lazyattn ingest`,
 * DESIGN.md §9), the way a search index is built before queries arrive.
 *
 * The corpus is JSON Lines: one document per line, a string (an untitled document, used
 * verbatim) or {"title"?: string, "text": string} (an empty or absent title: untitled).
 * Blank lines are skipped. Each document becomes the la_segment a request's document is
 * (the server parses `documents` the same way), so the engine renders and tokenizes it
 * exactly as it does for /v1/chat/completions and /v1/documents, and the record it writes
 * is the one a later request looks up.
 *
 * Per document, in corpus order, with up to `batch` requests in flight:
 *   1. la_engine_document_where: on disk already (or in the pool or host tier: a duplicate
 *      of this run, written through when it was computed) -> skipped. This is what makes a
 *      run resumable: a second run over the same corpus and directory skips everything.
 *   2. else one request of its own, as POST /v1/documents does: that document, the prompt
 *      "\n" without BOS, max_tokens 1, the method and cache salt given. The engine computes
 *      the document and writes it through to the disk tier (kv_write_through must be on).
 *   3. at the end, la_engine_store_flush: every queued write is on disk before the summary.
 * A line that is not a document, or a document the engine refuses (too long, invalid
 * UTF-8), is counted as failed with its line number; the run goes on.
 *
 * The caller is the engine thread (it steps the engine here).
 */
#ifndef LA_BENCH_INGEST_H
#define LA_BENCH_INGEST_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"

typedef struct la_ingest_opts {
    const char *corpus;     /* JSONL path */
    la_method method;       /* lazy, block or mepic (their KV format names the record) */
    const char *cache_salt; /* NULL: none; a salted record is found only under its salt */
    int32_t batch;          /* documents in flight (>= 1; the engine's max_running caps it) */
} la_ingest_opts;

void la_ingest_opts_init(la_ingest_opts *o); /* lazy, no salt, batch 16 */

typedef struct la_ingest_counts {
    int64_t total;          /* documents in the corpus (non-blank lines) */
    int64_t done;           /* computed + loaded + skipped + failed */
    int64_t computed;       /* documents the engine computed (and wrote through) */
    int64_t loaded;         /* found by the request in a tier la_engine_document_where could
                               not see into (the shared tier): not computed, not rewritten */
    int64_t skipped;        /* already stored (or a duplicate within this run) */
    int64_t failed;
    int64_t tokens;         /* document tokens computed */
    double elapsed_s;
} la_ingest_counts;

typedef struct la_ingest_summary {
    la_ingest_counts n;
    double seconds;            /* first document -> every write flushed */
    double documents_per_s;    /* computed documents / seconds */
    double tokens_per_s;       /* computed tokens / seconds */
    int64_t bytes_written;     /* the disk tier's, during this run */
    int64_t writes, write_failures;
    double write_s;            /* seconds of the disk tier's writes (I/O threads, summed) */
    double gb_per_s;           /* bytes_written / seconds / 1e9: end to end */
    double disk_write_gb_per_s;/* bytes_written / write_s / 1e9: the writes alone */
    char first_error[LA_ERR_MSG_LEN]; /* "corpus.jsonl:12: ..." of the first failure */
} la_ingest_summary;

/* Called after every document (from the engine thread). */
typedef void (*la_ingest_progress_fn)(void *user, const la_ingest_counts *n);

/* Ingest o->corpus into e's disk tier. A failed document is counted, not an error.
 * The engine must write computed documents through (kv_write_through, the default): with
 * "evict" they would reach the disk only when evicted.
 * Errors (nothing computed): LA_ERR_INVALID_ARG (a method that does not cache documents,
 * batch < 1), LA_ERR_IO (an engine without a usable disk tier: kv_dir missing or not
 * writable; the corpus cannot be read), LA_ERR_NO_MEMORY. */
la_status la_ingest_run(la_engine *e, const la_ingest_opts *o, la_ingest_progress_fn progress, void *user,
                        la_ingest_summary *out, la_err *err);

/* The summary as JSON ({"documents": {...}, "tokens", "seconds", "documents_per_s",
 * "tokens_per_s", "bytes_written", "gb_written", "gb_per_s", "disk_write_gb_per_s",
 * "writes", "write_failures", "first_error"?}). Caller owns it. */
cJSON *la_ingest_summary_json(const la_ingest_summary *s);

#endif
