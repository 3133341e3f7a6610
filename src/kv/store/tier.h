/* la_kv_tier: a KV store tier below host memory (DESIGN.md §9): local disk (T2), a shared
 * store (T3, Redis/Valkey). A tier stores whole document records (kv/store/record.h) by
 * key; it knows nothing of their content.
 *
 * Threads: probe runs on the engine thread and never does I/O (an in-memory index, or
 * MAYBE for a tier that cannot know without asking); read, write and drop run on the
 * store's I/O threads and may block. A tier is safe for these calls at once.
 *
 * Tier kinds register in one table (kv/store/tiers.c) that the store reads: the store
 * makes one tier of each kind its options name, in the table's order.
 */
#ifndef LA_KV_STORE_TIER_H
#define LA_KV_STORE_TIER_H

#include <stdint.h>
#include <sys/uio.h>

#include "base/hash.h"
#include "lazyattn/status.h"

/* The tiers, in lookup order (the host tier is the store's own memory, not a la_kv_tier). */
typedef enum la_kv_tier_id {
    LA_KV_TIER_HOST = 0,
    LA_KV_TIER_DISK,
    LA_KV_TIER_SHARED,
    LA_KV_TIER_COUNT
} la_kv_tier_id;

/* "host", "disk", "shared". */
const char *la_kv_tier_name(la_kv_tier_id t);

/* What the tiers below host memory are made from (kv/store/tiers.c). */
typedef struct la_kv_tier_config {
    const char *dir;        /* disk: the directory; NULL: no disk tier */
    int64_t dir_bytes;      /* disk: size cap; 0: none */
    const char *shared_url; /* shared: redis://...; NULL: none */
    int timeout_ms;         /* shared: per command */
} la_kv_tier_config;

typedef enum la_kv_probe {
    LA_KV_PROBE_NO = 0, /* not there */
    LA_KV_PROBE_YES,    /* the index holds it (a read may still find it gone or damaged) */
    LA_KV_PROBE_MAYBE,  /* only a read can tell */
} la_kv_probe;

typedef struct la_kv_tier la_kv_tier;

typedef struct la_kv_tier_ops {
    la_kv_probe (*probe)(la_kv_tier *t, la_hash128 key);
    /* Read record key into iov[0:n_iov] in order (the header buffer first, then payload
     * blocks). *n_read: bytes read (fewer than the iov's total: a truncated record).
     * Errors: LA_ERR_NOT_FOUND (absent), LA_ERR_IO / LA_ERR_BACKEND (the tier failed:
     * message says how). */
    la_status (*read)(la_kv_tier *t, la_hash128 key, const struct iovec *iov, int n_iov, size_t *n_read,
                      la_err *err);
    /* Store the record held in iov[0:n_iov] under key; a reader never sees it half
     * written. Errors: LA_ERR_IO (disk full, unwritable), LA_ERR_NO_SPACE (the record is
     * larger than the tier), LA_ERR_BACKEND (store down or refusing). */
    la_status (*write)(la_kv_tier *t, la_hash128 key, const struct iovec *iov, int n_iov, la_err *err);
    /* Remove key (a rejected record), best effort. */
    void (*drop)(la_kv_tier *t, la_hash128 key);
    /* Optional (NULL: the tier cannot tell): move up to max keys the tier removed on its own
     * (size cap) since the last call into keys; returns how many. Any thread. */
    int32_t (*take_evicted)(la_kv_tier *t, la_hash128 *keys, int32_t max);
    void (*destroy)(la_kv_tier *t);
    /* Optional (NULL: nothing to refresh): key was used without being read (its document
     * computed instead: engine/doc_store.h, kv_read): most recently used, as a read makes it. */
    void (*touch)(la_kv_tier *t, la_hash128 key);
} la_kv_tier_ops;

struct la_kv_tier {
    const la_kv_tier_ops *ops;
    const char *name; /* "disk", "redis": the tier's label in logs and metrics */
};

#endif
