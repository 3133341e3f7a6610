/* la_kv_pool: bookkeeping of the paged KV cache's blocks (the storage itself lives in the
 * backend). Each block is in exactly one of three states:
 *
 *   free      on the free list; holds nothing
 *   pinned    ref_count > 0; in use by one or more requests (may also be indexed)
 *   cached    ref_count == 0 but indexed by hash; on the LRU list, evictable
 *
 * The hash index maps a 128-bit block hash (kv/block_hash.h) to the block holding that
 * content. Allocation takes a free block, else evicts the least recently released cached
 * block (dropping it from the index). A block found in the index must be pinned before
 * anything else allocates (la_kv_pool_lookup_pin does both at once).
 *
 * Not thread-safe: the engine thread owns the pool.
 */
#ifndef LA_KV_BLOCK_POOL_H
#define LA_KV_BLOCK_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/hash.h"
#include "lazyattn/status.h"

typedef struct la_kv_pool la_kv_pool;

typedef struct la_kv_pool_stats {
    int64_t n_blocks;      /* capacity */
    int64_t n_free;        /* on the free list */
    int64_t n_cached;      /* unpinned, indexed (evictable) */
    int64_t n_pinned;      /* ref_count > 0 */
    int64_t hits;          /* lookups that found a block */
    int64_t misses;        /* lookups that found nothing */
    int64_t evictions;     /* cached blocks reclaimed by allocation */
} la_kv_pool_stats;

/* Create bookkeeping for n_blocks blocks of block_size slots (n_blocks, block_size > 0;
 * n_blocks < 2^31). Caller owns it; free with la_kv_pool_destroy().
 * Errors: LA_ERR_INVALID_ARG, LA_ERR_NO_MEMORY. */
la_status la_kv_pool_create(int64_t n_blocks, int32_t block_size, la_kv_pool **out, la_err *err);
void la_kv_pool_destroy(la_kv_pool *p);

int32_t la_kv_pool_block_size(const la_kv_pool *p);

/* The hash context every chain of this pool is keyed with (kv/block_hash.h): NULL (the
 * default) for the per-process secret and no namespace. set copies *ctx (NULL: back to
 * the default); call it before the first lookup, as it renames every block. */
struct la_hash_ctx;
la_status la_kv_pool_set_hash_ctx(la_kv_pool *p, const struct la_hash_ctx *ctx, la_err *err);
const struct la_hash_ctx *la_kv_pool_hash_ctx(const la_kv_pool *p);

/* Find the block indexed under h and pin it (ref_count + 1; a cached block leaves the LRU
 * list). Returns the block id, or -1 when absent. Counts a hit or a miss. */
int32_t la_kv_pool_lookup_pin(la_kv_pool *p, la_hash128 h);

/* Whether h is indexed (no pin, no counters). */
bool la_kv_pool_contains(const la_kv_pool *p, la_hash128 h);

/* Allocate a block for new content, pinned once, not indexed. Takes a free block, else
 * evicts the least recently used cached block.
 * Errors: LA_ERR_NO_SPACE when every block is pinned (nothing changes). */
la_status la_kv_pool_alloc(la_kv_pool *p, int32_t *block_id, la_err *err);

/* Called when allocation is about to reuse a cached block (its content is still intact;
 * the new owner writes it after the call): the KV store writes documents back, KV events
 * report the removal. NULL fn: none. */
typedef void (*la_kv_evict_fn)(void *user, int32_t block_id, la_hash128 hash);
void la_kv_pool_set_evict_hook(la_kv_pool *p, la_kv_evict_fn fn, void *user);

/* The hash a block is indexed under; false when it is not indexed. */
bool la_kv_pool_block_hash(const la_kv_pool *p, int32_t block_id, la_hash128 *hash);

/* Number of blocks an allocation could get right now (free + cached). */
int64_t la_kv_pool_available(const la_kv_pool *p);

/* Pin an already pinned block once more (sharing). */
void la_kv_pool_ref(la_kv_pool *p, int32_t block_id);

/* Drop one pin. At zero an indexed block becomes cached (most recently used end of the
 * LRU list); an unindexed block returns to the free list. */
void la_kv_pool_unpin(la_kv_pool *p, int32_t block_id);

/* Index a pinned block under h once its content is computed. If h is already indexed by
 * another block, nothing changes and that block's id is returned (the caller may keep
 * using its own copy); else block_id is returned. A block is indexed under one hash. */
int32_t la_kv_pool_register(la_kv_pool *p, int32_t block_id, la_hash128 h);

/* Content readiness. A block is not ready from allocation until its K/V are computed and
 * la_kv_pool_mark_ready() is called. Indexing happens at allocation for document blocks,
 * so a second request needing the same missing document finds its blocks in flight, pins
 * them, and waits for readiness instead of computing them again. */
void la_kv_pool_mark_ready(la_kv_pool *p, int32_t block_id);
bool la_kv_pool_is_ready(const la_kv_pool *p, int32_t block_id);

/* Remove a block from the index (its content will never be computed, e.g. the job that
 * was computing it failed). Pins are unchanged. */
void la_kv_pool_unregister(la_kv_pool *p, int32_t block_id);

/* Drop every cached block (indexed, unpinned): each leaves the index and returns to the
 * free list, the evict hook called first as for an eviction. Pinned blocks (indexed or
 * not) stay. Returns how many were dropped. */
int64_t la_kv_pool_drop_cached(la_kv_pool *p);

int32_t la_kv_pool_ref_count(const la_kv_pool *p, int32_t block_id);
bool la_kv_pool_is_indexed(const la_kv_pool *p, int32_t block_id);

la_kv_pool_stats la_kv_pool_get_stats(const la_kv_pool *p);

/* Accounting check: every block in exactly one state, list and index consistent,
 * free + cached + pinned == n_blocks, and the sum of ref counts equals expected_refs
 * (pass -1 to skip that part). Returns LA_ERR_INTERNAL describing the first violation. */
la_status la_kv_pool_check(const la_kv_pool *p, int64_t expected_refs, la_err *err);

#endif
