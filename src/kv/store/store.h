/* la_kv_store: the document KV store below the block pool (DESIGN.md §9).
 *
 *   T1  host     records in host memory (la_host_arena: pinned on CUDA), LRU, --host-kv-gib
 *   T2  disk     records as files, size-capped LRU, survives restart (kv/store/disk_tier.c)
 *   T3  shared   a store every replica reads (Redis/Valkey)
 *
 * The store moves whole document records (kv/store/record.h) between host memory and the
 * tiers below it, on its own I/O threads; the engine thread asks and polls, and never
 * waits on I/O. Copies between host memory and the block pool are the caller's (the
 * engine's, through the backend): the store hands out host blocks.
 *
 * ---- Records and their states ------------------------------------------------------------
 * A la_kv_rec is one record in host memory, reference-counted:
 *
 *   LOADING   being read from a lower tier; become READY or FAILED at a later poll
 *   READY     every block holds the payload (a host-tier hit, or a read that passed every
 *             check of la_kv_record_header_check and the payload checksum)
 *   FAILED    missing, damaged, foreign, the tier failed, or the read took longer than
 *             io_timeout_ms: the caller computes the document instead
 *   FILLING   the caller is writing the payload (a put: after the document was computed,
 *             or when the pool evicts it); la_kv_store_put_end publishes it
 *
 * Lookups go host -> disk -> shared; a lower tier's failure falls through to the next
 * tier, and past the last one to FAILED. A record read from below is kept in the host
 * tier when there is one. A record the pool evicts goes to the host tier; the host tier's
 * LRU end goes to disk (write on eviction) unless it is already there. A computed document
 * is written through to disk (policy "through") and always to the shared tier.
 *
 * Not thread-safe: one thread (the engine thread) calls everything here.
 */
#ifndef LA_KV_STORE_STORE_H
#define LA_KV_STORE_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/store/host_arena.h"
#include "kv/store/record.h"
#include "kv/store/tier.h"
#include "lazyattn/status.h"

typedef struct la_kv_store la_kv_store;
typedef struct la_kv_rec la_kv_rec;


typedef struct la_kv_store_options {
    int64_t host_bytes;        /* T1 capacity; 0: no host tier */
    int64_t staging_bytes;     /* host memory for records on their way between the pool and
                                  a lower tier, on top of host_bytes (0: 4 GiB) */
    const char *dir;           /* T2 directory; NULL: no disk tier */
    int64_t dir_bytes;         /* T2 size cap; 0: none */
    bool dir_write_through;    /* true: every computed document goes to disk; false: only
                                  what the host tier evicts (with no host tier: what the
                                  pool evicts) */
    const char *shared_url;    /* T3: redis://[:PASSWORD@]HOST:PORT[/DB]; NULL: none */
    int32_t n_io_threads;      /* 0: 2 */
    double io_timeout_ms;      /* a read older than this counts as failed (0: 10000) */
} la_kv_store_options;

void la_kv_store_options_init(la_kv_store_options *o);

typedef struct la_kv_tier_stats {
    int64_t hits, misses;          /* lookups served / not served by this tier */
    int64_t bytes_read, bytes_written;
    double read_s, write_s;        /* time spent in reads / writes (I/O threads), seconds */
    int64_t writes, write_failures;
    int64_t evictions;             /* records this tier dropped for space */
    int64_t errors;                /* reads that failed for the tier's own reasons (down) */
    int64_t records, bytes;        /* held now */
    bool down;                     /* the last operation failed */
} la_kv_tier_stats;

typedef struct la_kv_store_stats {
    la_kv_tier_stats tier[LA_KV_TIER_COUNT];
    int64_t rejected[LA_KV_REJECT_COUNT]; /* records read but not used, by reason */
    int64_t rejected_total;
    int64_t timeouts;              /* reads abandoned after io_timeout_ms */
    int64_t puts, puts_dropped;    /* records offered; offered but no host memory was free */
    int64_t promotions;            /* host-tier records moved into the pool (and out of the tier) */
    int64_t lookups_dropped;       /* lookups of lower tiers not made: no host memory was free */
    int64_t writebacks;            /* records the pool evicted that went to the host tier */
    int64_t spills;                /* host-tier records written to disk on eviction */
} la_kv_store_stats;

/* A store for records of `shape` (its kv_format is ignored: each record says its own).
 * Host memory comes from alloc (NULL: malloc). A disk directory that cannot be used or a
 * shared store that cannot be reached is not an error here: the store logs why once,
 * serves without it and counts what fails (a slow or dead tier never fails a request);
 * except LA_ERR_INVALID_ARG for a malformed shared_url or a refused password, which are
 * configuration errors the operator must see at start.
 * Errors: LA_ERR_INVALID_ARG (options), LA_ERR_NO_MEMORY.
 * Caller owns *out; free with la_kv_store_destroy() (waits for the I/O in flight). */
la_status la_kv_store_create(const la_kv_store_options *o, const la_kv_record_shape *shape,
                             const la_host_allocator *alloc, la_kv_store **out, la_err *err);
void la_kv_store_destroy(la_kv_store *s);

/* Whether the store has any tier (host, disk or shared). */
bool la_kv_store_enabled(const la_kv_store *s);
bool la_kv_store_has_tier(const la_kv_store *s, la_kv_tier_id t);

/* Look up the record want names (want: la_kv_record_header_make's header; its shape's
 * kv_format is the document's). Returns a referenced record, READY (host tier) or LOADING
 * (a read issued, or waiting for pinned memory that is still being made: la_kv_store_poll
 * issues its read once the memory is there), or NULL: in no tier, or no host memory to
 * read it into (counted in lookups_dropped). Release with la_kv_store_release(). */
la_kv_rec *la_kv_store_find(la_kv_store *s, const la_kv_record_header *want);

/* Tier t's record key was used without being read (its document computed instead): the
 * tier keeps it as recently used as a read would (disk: its LRU place and mtime). */
void la_kv_store_touch(la_kv_store *s, la_kv_tier_id t, la_hash128 key);

/* Whether key is in the host tier now (no counters, no I/O). */
bool la_kv_store_in_host(const la_kv_store *s, la_hash128 key);
/* Where key is as far as the indexes know without I/O: the first tier whose index holds
 * it, LA_KV_TIER_SHARED when only the shared tier might (it cannot tell), or
 * LA_KV_TIER_COUNT when in none. */
la_kv_tier_id la_kv_store_probe(const la_kv_store *s, la_hash128 key);

typedef enum la_kv_rec_state {
    LA_KV_REC_LOADING = 0,
    LA_KV_REC_READY,
    LA_KV_REC_FAILED,
    LA_KV_REC_FILLING,
} la_kv_rec_state;

la_kv_rec_state la_kv_rec_state_of(const la_kv_rec *r);
/* The tier a READY record was found in. */
la_kv_tier_id la_kv_rec_tier(const la_kv_rec *r);
const la_kv_record_header *la_kv_rec_header(const la_kv_rec *r);
/* Host address of payload block b (la_kv_record_block_bytes bytes), b < n_blocks. */
void *la_kv_rec_block(const la_kv_store *s, const la_kv_rec *r, int32_t b);

/* Drop the caller's reference. */
void la_kv_store_release(la_kv_store *s, la_kv_rec *r);
/* The caller copied r into the pool: release it and take it out of the host tier, so the
 * pool and the host tier hold a document once between them (exclusive caching, as CPU caches'
 * victim caches: their capacities add up). The pool's eviction writes it back. A record a
 * spill to disk still reads stays until that write is done. */
void la_kv_store_release_moved(la_kv_store *s, la_kv_rec *r);

/* Why the caller offers a record. */
typedef enum la_kv_put_reason {
    LA_KV_PUT_COMPUTED = 0, /* just computed: written through to disk ("through") and to
                               the shared tier; kept in host memory only if a host tier
                               asks for it (never: the pool holds it now) */
    LA_KV_PUT_EVICTED,      /* the pool is reusing its blocks: into the host tier (or with
                               none, to disk when the policy is "on eviction") */
} la_kv_put_reason;

/* Whether a put of key for reason would store anything (false: skip the copy). */
bool la_kv_store_wants(const la_kv_store *s, la_hash128 key, la_kv_put_reason why);

/* Begin a put of the record hdr describes: a FILLING record whose blocks the caller
 * writes (slots past n_tokens zeroed), then hands over with la_kv_store_put_end. NULL
 * when no host memory is free (counted in puts_dropped). */
la_kv_rec *la_kv_store_put_begin(la_kv_store *s, const la_kv_record_header *hdr, la_kv_put_reason why);
/* la_kv_store_put_begin for a caller that can wait: NULL when no host memory is free now,
 * counted nowhere; the caller tries again later (the pool still holds the document) or
 * gives up with la_kv_store_put_dropped. */
la_kv_rec *la_kv_store_put_try(la_kv_store *s, const la_kv_record_header *hdr, la_kv_put_reason why);
void la_kv_store_put_dropped(la_kv_store *s);
/* Whether a record of n_blocks blocks fits in the host memory the store may ever have (all
 * it was given, or, once pinning more failed, what it got). */
bool la_kv_store_can_hold(la_kv_store *s, int32_t n_blocks);
/* The payload is in place (ok) or the copy failed (!ok: the record is dropped). Takes the
 * caller's reference. */
void la_kv_store_put_end(la_kv_store *s, la_kv_rec *r, bool ok);

/* Collect finished I/O: LOADING records become READY or FAILED, finished writes release
 * their records, reads past io_timeout_ms fail. Call once per engine step. */
void la_kv_store_poll(la_kv_store *s);

/* Whether I/O is in flight (reads, writes). */
bool la_kv_store_busy(const la_kv_store *s);
/* Whether lookups wait for pinned memory (no I/O yet: la_kv_store_flush does not wait for
 * them; an engine with nothing else to do sleeps rather than spins). */
bool la_kv_store_waiting(const la_kv_store *s);
/* Block until every queued write has finished (ingest, shutdown; not on a serving path). */
void la_kv_store_flush(la_kv_store *s);

void la_kv_store_get_stats(const la_kv_store *s, la_kv_store_stats *out);

/* What the host and disk tiers came to hold or stopped holding (KV events). Recorded only
 * after la_kv_store_track_changes(s, true). */
typedef struct la_kv_change {
    la_kv_tier_id tier;
    la_hash128 key;
    bool stored; /* false: removed */
} la_kv_change;
void la_kv_store_track_changes(la_kv_store *s, bool on);
/* Move up to max changes, oldest first, into out; returns how many. */
int32_t la_kv_store_take_changes(la_kv_store *s, la_kv_change *out, int32_t max);

/* Bytes of one record block (la_kv_record_block_bytes of the store's shape). */
size_t la_kv_store_block_bytes(const la_kv_store *s);
/* The I/O threads running (la_kv_store_options.n_io_threads; 0 there: 2). */
int32_t la_kv_store_io_threads(const la_kv_store *s);

#endif
