/* la_encode_cache: a bounded LRU of encodings, keyed by the text's bytes, for text that
 * comes back again and again: a RAG deployment's documents. Their KV is cached by token
 * ids (DESIGN.md §5); this caches the step before, the ids of the document's text, so a
 * request whose documents were seen before is not tokenized again (a 7000-token document
 * costs 0.5-1.3 ms of one core to encode, which bounds how fast one thread can submit).
 *
 * Keys are keyed XXH3-128 hashes (base/hash.h) of (salt, add_special, text): the same trust
 * the KV cache's block hashes get; the text itself is not kept. The salt is the request's
 * cache salt: tenants that do not share KV do not share entries either, so a hit's speed
 * tells no one what another tenant sent. One cache belongs to one tokenizer (it does not key
 * by tokenizer).
 *
 * Threads: every function may be called from any number of threads at once; encoding a
 * miss runs outside the cache's lock.
 */
#ifndef LA_TOKENIZER_ENCODE_CACHE_H
#define LA_TOKENIZER_ENCODE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/status.h"
#include "tokenizer/tokenizer.h"

typedef struct la_encode_cache la_encode_cache;

typedef struct la_encode_cache_stats {
    int64_t hits, misses; /* encodes served from the cache / that ran the tokenizer */
    int64_t evictions;    /* entries dropped for room (least recently used first) */
    int64_t entries;      /* held now */
    int64_t bytes;        /* held now: the entries (ids and bookkeeping) and the hash map's
                             slots, at most max_bytes (malloc's own overhead not counted) */
} la_encode_cache_stats;

/* A cache holding at most max_bytes (>= 1): its entries and its hash map, each entry charged
 * its ids, its bookkeeping and a share of the map (512 bytes), so a text of a few tokens
 * costs mostly the share. Encodings of more than max_ids ids (<= 0: no limit; an engine
 * passes its context length, which no longer document can serve) are returned and not
 * kept. Caller owns *out; free with la_encode_cache_destroy. Errors: LA_ERR_INVALID_ARG
 * (max_bytes < 1), LA_ERR_NO_MEMORY. */
la_status la_encode_cache_create(int64_t max_bytes, int32_t max_ids, la_encode_cache **out, la_err *err);
void la_encode_cache_destroy(la_encode_cache *c); /* NULL: nothing */

/* la_tokenizer_encode(tok, text, len, add_special, ids, n, err) through cache c (NULL: no
 * cache), under salt (NUL-terminated; NULL: none, which differs from every salt, "" too):
 * the same ids, and the same errors (LA_ERR_INVALID_ARG for NULL arguments or invalid
 * UTF-8, LA_ERR_NO_MEMORY, LA_ERR_TOO_LONG; a failed encode is not cached). *ids is the
 * caller's (a copy), freed with free(). An encoding larger than the whole cache (or than
 * max_ids) is returned and not kept. */
la_status la_encode_cache_encode(la_encode_cache *c, const la_tokenizer *tok, const char *salt, const char *text,
                                 size_t len, bool add_special, int32_t **ids, int32_t *n, la_err *err);

/* A snapshot (zeros for NULL). */
void la_encode_cache_get_stats(la_encode_cache *c, la_encode_cache_stats *s);

#endif
