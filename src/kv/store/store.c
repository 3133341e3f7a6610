/* The KV store's records, host tier and I/O threads (kv/store/store.h).
 *
 * Every live record is in one index (key -> record): LOADING, READY (host tier) and
 * FILLING ones, so two lookups of one key share one read. Records of the host tier sit on
 * an LRU list while nobody holds them. Host memory is one la_host_arena: host_bytes of it
 * for the host tier, staging_bytes more for records in transit (a computed document on
 * its way to disk, a record the host tier evicted while it is being spilled).
 *
 * The I/O threads take tasks from one queue: READ (a tier into a record's blocks, then
 * the header and payload checks) and WRITE (the payload checksum, the header, then every
 * tier of its mask). Finished tasks go to a done list that la_kv_store_poll drains on the
 * engine thread, which alone touches records' states, the index and the arena.
 */
#include "kv/store/store.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/array.h"
#include "base/err.h"
#include "base/hash_map.h"
#include "base/log.h"
#include "base/timer.h"
#include "kv/store/disk_tier.h"
#include "kv/store/tiers.h"

/* Records in transit: every document a step looks up in a lower tier, or writes through, is
 * one here while it moves (Llama-3-8B: ~100 MB for a 780-token document, so a request of 10
 * documents needs ~1 GB). 4 GiB, as vLLM's default --swap-space of host memory per GPU. */
#define DEFAULT_STAGING_BYTES ((int64_t)4 << 30)
#define DEFAULT_IO_THREADS 2
#define DEFAULT_IO_TIMEOUT_MS 10000.0

struct la_kv_rec {
    la_kv_record_header hdr;  /* what the record is (payload checksum filled by a write) */
    uint8_t hdr_buf[LA_KV_RECORD_HEADER_BYTES];
    int32_t *blocks;          /* [hdr.n_blocks] arena blocks */
    la_kv_rec_state state;
    la_kv_tier_id tier;       /* where a READY record came from */
    la_kv_put_reason why;     /* FILLING: why it is being put */
    int32_t refs;             /* callers + the task in flight */
    bool indexed;             /* in s->index */
    bool in_host;             /* a host-tier record (counted in host_blocks) */
    bool on_lru;
    bool busy;                /* a task is in flight */
    bool on_disk;             /* known to be in the disk tier */
    la_kv_tier_id next_tier;  /* LOADING: the tier its read is at */
    double t_start_ms;        /* LOADING: when the lookup began */
    la_kv_rec *wait_next;     /* LOADING, on the wait list: its blocks wait for pinned memory */
    la_kv_rec *prev, *next;   /* host LRU (head: least recently used) */
};

typedef enum { IO_READ, IO_WRITE } io_kind;

typedef struct io_task {
    io_kind kind;
    la_kv_rec *rec;
    la_kv_tier_id tier;       /* READ */
    uint32_t write_mask;      /* WRITE: bit per tier id */
    /* results, written by the I/O thread */
    la_status status[LA_KV_TIER_COUNT];
    la_kv_reject reject;
    char msg[LA_ERR_MSG_LEN];
    size_t bytes;
    double secs[LA_KV_TIER_COUNT];
    struct io_task *next;
} io_task;

struct la_kv_store {
    la_kv_store_options opts;
    char *dir, *shared_url;
    la_kv_record_shape shape;
    size_t block_bytes;
    la_host_arena *arena;
    int64_t host_cap_blocks, host_blocks;
    la_kv_tier *tier[LA_KV_TIER_COUNT]; /* [HOST] unused: the host tier is this file */
    la_hmap index;
    la_kv_rec *lru_head, *lru_tail;
    int64_t n_busy;
    la_kv_store_stats st;
    bool track;
    la_kv_change *changes;
    int32_t n_changes;
    int64_t cap_changes;

    pthread_mutex_t mu; /* queue, done list, n_queued */
    pthread_cond_t cv_work, cv_done;
    io_task *queue_head, *queue_tail, *done_head;
    int64_t n_tasks; /* queued + running + done, not yet polled */
    bool stop;
    pthread_t *threads;
    int32_t n_threads;

    /* Pinned host memory grows on its own thread (la_host_arena_set_async), every chunk from
     * the start: chunks [0, n_grown) are allocated, the engine thread adopts them in order.
     * Under mu. */
    pthread_t grower;
    bool has_grower, grow_failed;
    void **grown;        /* [arena chunk count] */
    int64_t n_grown;
    /* Lookups made while pinned memory is still growing (a restarted server's first
     * requests): LOADING records, each holding a reference, that read once their blocks
     * are there (la_kv_store_poll); oldest first. */
    la_kv_rec *wait_head, *wait_tail;
};

void la_kv_store_options_init(la_kv_store_options *o) {
    memset(o, 0, sizeof *o);
    o->dir_write_through = true;
}

/* ============================================================ I/O threads =========== */

static void payload_iov(const la_kv_store *s, const la_kv_rec *r, struct iovec *iov) {
    iov[0] = (struct iovec){(void *)r->hdr_buf, LA_KV_RECORD_HEADER_BYTES};
    for (int32_t b = 0; b < r->hdr.n_blocks; b++)
        iov[1 + b] = (struct iovec){la_host_arena_ptr(s->arena, r->blocks[b]), s->block_bytes};
}

static void run_read(la_kv_store *s, io_task *t, struct iovec *iov) {
    la_kv_rec *r = t->rec;
    la_kv_tier *tier = s->tier[t->tier];
    la_err err = {0};
    size_t n_read = 0;
    double t0 = la_now_ms();
    payload_iov(s, r, iov);
    t->status[t->tier] = tier->ops->read(tier, r->hdr.key, iov, 1 + r->hdr.n_blocks, &n_read, &err);
    t->bytes = n_read;
    if (t->status[t->tier] != LA_OK) {
        snprintf(t->msg, sizeof t->msg, "%s", err.msg);
    } else {
        la_kv_record_header got;
        size_t want_bytes = LA_KV_RECORD_HEADER_BYTES + r->hdr.payload_bytes;
        t->reject = la_kv_record_header_check(r->hdr_buf, n_read < LA_KV_RECORD_HEADER_BYTES ? n_read : LA_KV_RECORD_HEADER_BYTES,
                                              &r->hdr, &got);
        if (t->reject == LA_KV_REJECT_NONE && n_read < want_bytes) t->reject = LA_KV_REJECT_SHORT;
        if (t->reject == LA_KV_REJECT_NONE) {
            la_kv_checksum c;
            la_kv_checksum_init(&c);
            for (int32_t b = 0; b < r->hdr.n_blocks; b++) la_kv_checksum_update(&c, iov[1 + b].iov_base, s->block_bytes);
            if (la_kv_checksum_digest(&c) != got.payload_checksum) t->reject = LA_KV_REJECT_PAYLOAD_CHECKSUM;
            else r->hdr.payload_checksum = got.payload_checksum;
        }
        if (t->reject != LA_KV_REJECT_NONE) tier->ops->drop(tier, r->hdr.key);
    }
    t->secs[t->tier] = (la_now_ms() - t0) * 1e-3;
}

static void run_write(la_kv_store *s, io_task *t, struct iovec *iov) {
    la_kv_rec *r = t->rec;
    la_kv_checksum c;
    la_kv_checksum_init(&c);
    payload_iov(s, r, iov);
    for (int32_t b = 0; b < r->hdr.n_blocks; b++) la_kv_checksum_update(&c, iov[1 + b].iov_base, s->block_bytes);
    r->hdr.payload_checksum = la_kv_checksum_digest(&c);
    la_kv_record_header_encode(&r->hdr, r->hdr_buf);
    for (int id = 0; id < LA_KV_TIER_COUNT; id++) {
        if (!(t->write_mask & (1u << id))) continue;
        la_err err = {0};
        double t0 = la_now_ms();
        t->status[id] = s->tier[id]->ops->write(s->tier[id], r->hdr.key, iov, 1 + r->hdr.n_blocks, &err);
        t->secs[id] = (la_now_ms() - t0) * 1e-3;
        if (t->status[id] != LA_OK) snprintf(t->msg, sizeof t->msg, "%s", err.msg);
    }
    t->bytes = LA_KV_RECORD_HEADER_BYTES + r->hdr.payload_bytes;
}

static void *io_main(void *arg) {
    la_kv_store *s = arg;
    struct iovec *iov = NULL;
    int32_t iov_cap = 0;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->queue_head && !s->stop) pthread_cond_wait(&s->cv_work, &s->mu);
        if (!s->queue_head) break; /* stop, queue drained */
        io_task *t = s->queue_head;
        s->queue_head = t->next;
        if (!s->queue_head) s->queue_tail = NULL;
        pthread_mutex_unlock(&s->mu);
        int32_t need = 1 + t->rec->hdr.n_blocks;
        if (need > iov_cap) {
            struct iovec *p = realloc(iov, sizeof *iov * (size_t)need);
            if (p) iov = p, iov_cap = need;
        }
        if (need > iov_cap) {
            for (int id = 0; id < LA_KV_TIER_COUNT; id++) t->status[id] = LA_ERR_NO_MEMORY;
            snprintf(t->msg, sizeof t->msg, "KV store: out of memory");
        } else if (t->kind == IO_READ) {
            run_read(s, t, iov);
        } else {
            run_write(s, t, iov);
        }
        pthread_mutex_lock(&s->mu);
        t->next = s->done_head;
        s->done_head = t;
        pthread_cond_broadcast(&s->cv_done);
    }
    pthread_mutex_unlock(&s->mu);
    free(iov);
    return NULL;
}

static bool submit(la_kv_store *s, io_kind kind, la_kv_rec *r, la_kv_tier_id tier, uint32_t mask) {
    io_task *t = calloc(1, sizeof *t);
    if (!t) return false;
    t->kind = kind;
    t->rec = r;
    t->tier = tier;
    t->write_mask = mask;
    r->refs++;
    r->busy = true;
    s->n_busy++;
    pthread_mutex_lock(&s->mu);
    if (s->queue_tail) s->queue_tail->next = t;
    else s->queue_head = t;
    s->queue_tail = t;
    s->n_tasks++;
    pthread_cond_signal(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* ============================================================ pinned growth ========= */

static void *grow_main(void *arg) {
    la_kv_store *s = arg;
    int64_t n = la_host_arena_chunk_count(s->arena);
    for (int64_t i = 0; i < n; i++) {
        pthread_mutex_lock(&s->mu);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        void *p = la_host_arena_chunk_alloc(s->arena, la_host_arena_chunk_bytes(s->arena, i));
        pthread_mutex_lock(&s->mu);
        if (p) s->grown[s->n_grown++] = p;
        else s->grow_failed = true;
        pthread_mutex_unlock(&s->mu);
        if (!p) {
            la_log("KV store: pinned host memory stops at %lld of %lld chunks (allocation failed); the host "
                   "tier keeps what it has", (long long)i, (long long)n);
            break;
        }
    }
    return NULL;
}

/* Pinned memory still coming: the grower has chunks left to make and has not failed. */
static bool growing(la_kv_store *s) {
    if (!s->has_grower) return false;
    pthread_mutex_lock(&s->mu);
    bool g = !s->grow_failed && s->n_grown < la_host_arena_chunk_count(s->arena);
    pthread_mutex_unlock(&s->mu);
    return g;
}

/* Hand the chunks the grower made to the arena (engine thread). */
static void adopt_chunks(la_kv_store *s) {
    if (!s->has_grower) return;
    pthread_mutex_lock(&s->mu);
    for (int64_t i = la_host_arena_chunks(s->arena); i < s->n_grown; i++) la_host_arena_add_chunk(s->arena, s->grown[i]);
    pthread_mutex_unlock(&s->mu);
}

/* ============================================================ records =============== */

static void note(la_kv_store *s, la_kv_tier_id tier, la_hash128 key, bool stored) {
    if (!s->track) return;
    /* out of memory: an event lost, the router learns the block again later */
    if (!la_array_reserve((void **)&s->changes, &s->cap_changes, s->n_changes + 1, sizeof *s->changes, 64)) return;
    s->changes[s->n_changes++] = (la_kv_change){tier, key, stored};
}

static void lru_remove(la_kv_store *s, la_kv_rec *r) {
    if (!r->on_lru) return;
    if (r->prev) r->prev->next = r->next;
    else s->lru_head = r->next;
    if (r->next) r->next->prev = r->prev;
    else s->lru_tail = r->prev;
    r->prev = r->next = NULL;
    r->on_lru = false;
}

static void lru_push(la_kv_store *s, la_kv_rec *r) {
    r->prev = s->lru_tail;
    r->next = NULL;
    if (s->lru_tail) s->lru_tail->next = r;
    else s->lru_head = r;
    s->lru_tail = r;
    r->on_lru = true;
}

static void unindex(la_kv_store *s, la_kv_rec *r) {
    if (r->indexed) la_hmap_remove(&s->index, r->hdr.key);
    r->indexed = false;
    if (r->in_host) {
        note(s, LA_KV_TIER_HOST, r->hdr.key, false);
        s->host_blocks -= r->hdr.n_blocks;
        s->st.tier[LA_KV_TIER_HOST].records--;
        s->st.tier[LA_KV_TIER_HOST].bytes -= (int64_t)r->hdr.payload_bytes;
        r->in_host = false;
    }
    lru_remove(s, r);
}

static void rec_free(la_kv_store *s, la_kv_rec *r) {
    for (int32_t b = 0; b < r->hdr.n_blocks; b++)
        if (r->blocks[b] >= 0) la_host_arena_free(s->arena, r->blocks[b]);
    free(r->blocks);
    free(r);
}

/* Drop a reference; the last one frees a record that is no longer indexed, and puts an
 * idle host-tier record on the LRU list. */
static void unref(la_kv_store *s, la_kv_rec *r) {
    LA_ASSERT(r->refs > 0);
    if (--r->refs > 0) return;
    if (r->in_host) lru_push(s, r);
    else {
        unindex(s, r);
        rec_free(s, r);
    }
}

static bool disk_has(const la_kv_store *s, const la_kv_rec *r) {
    return r->on_disk || (s->tier[LA_KV_TIER_DISK] &&
                          s->tier[LA_KV_TIER_DISK]->ops->probe(s->tier[LA_KV_TIER_DISK], r->hdr.key) == LA_KV_PROBE_YES);
}

/* Take the least recently used idle host-tier record out of the host tier: spilled to disk
 * first when the disk does not have it. Returns false when there is none. */
static bool evict_host_lru(la_kv_store *s) {
    la_kv_rec *r = s->lru_head;
    if (!r) return false;
    s->st.tier[LA_KV_TIER_HOST].evictions++;
    unindex(s, r); /* off the LRU, out of the host tier's count */
    if (s->tier[LA_KV_TIER_DISK] && !disk_has(s, r) && submit(s, IO_WRITE, r, LA_KV_TIER_DISK, 1u << LA_KV_TIER_DISK)) {
        s->st.spills++;
        return true; /* the write holds it; freed when it finishes */
    }
    rec_free(s, r);
    return true;
}

/* A record for hdr with no arena blocks yet (one reference), or NULL (out of memory). */
static la_kv_rec *rec_shell(const la_kv_record_header *hdr) {
    la_kv_rec *r = calloc(1, sizeof *r);
    int32_t *blocks = r ? malloc(sizeof(int32_t) * (size_t)(hdr->n_blocks ? hdr->n_blocks : 1)) : NULL;
    if (!blocks) {
        free(r);
        return NULL;
    }
    r->hdr = *hdr;
    r->blocks = blocks;
    for (int32_t b = 0; b < hdr->n_blocks; b++) r->blocks[b] = -1;
    r->refs = 1;
    return r;
}

/* Give r the arena blocks it lacks, evicting idle host-tier records for memory. False
 * when the arena has no more now (the blocks it got are kept). */
static bool rec_fill(la_kv_store *s, la_kv_rec *r) {
    adopt_chunks(s);
    for (int32_t b = 0; b < r->hdr.n_blocks; b++)
        while (r->blocks[b] < 0 && (r->blocks[b] = la_host_arena_alloc(s->arena)) < 0)
            if (!evict_host_lru(s)) return false;
    return true;
}

/* A record with n_blocks arena blocks, or NULL. */
static la_kv_rec *rec_new(la_kv_store *s, const la_kv_record_header *hdr) {
    la_kv_rec *r = rec_shell(hdr);
    if (r && !rec_fill(s, r)) {
        rec_free(s, r);
        return NULL;
    }
    return r;
}

/* Give back the blocks of a record that will not be read (a failed lookup its caller still
 * holds), so that other lookups and puts get them. */
static void drop_blocks(la_kv_store *s, la_kv_rec *r) {
    for (int32_t b = 0; b < r->hdr.n_blocks; b++)
        if (r->blocks[b] >= 0) {
            la_host_arena_free(s->arena, r->blocks[b]);
            r->blocks[b] = -1;
        }
}

/* Lookups waiting for pinned memory: read the ones whose blocks are there now; give up on
 * those whose lookup ended (timed out) or that memory will not come for (their blocks go
 * back at once). */
static void serve_waiting(la_kv_store *s, bool give_up) {
    la_kv_rec *prev = NULL;
    for (la_kv_rec *r = s->wait_head, *n; r; r = n) {
        n = r->wait_next;
        bool live = r->state == LA_KV_REC_LOADING;
        bool ready = live && !give_up && rec_fill(s, r);
        if (live && !ready && !give_up && growing(s)) {
            prev = r;
            continue;
        }
        if (prev) prev->wait_next = n;
        else s->wait_head = n;
        if (s->wait_tail == r) s->wait_tail = prev;
        r->wait_next = NULL;
        if (live && !(ready && submit(s, IO_READ, r, r->next_tier, 0))) {
            if (!ready) s->st.lookups_dropped++;
            r->state = LA_KV_REC_FAILED;
            unindex(s, r);
        }
        if (r->state == LA_KV_REC_FAILED) drop_blocks(s, r);
        unref(s, r); /* the wait list's */
    }
}

/* Make r a host-tier record (READY), evicting others to stay within host_bytes. */
static void host_insert(la_kv_store *s, la_kv_rec *r) {
    if (s->host_cap_blocks < r->hdr.n_blocks) return;
    while (s->host_blocks + r->hdr.n_blocks > s->host_cap_blocks && evict_host_lru(s)) {}
    if (s->host_blocks + r->hdr.n_blocks > s->host_cap_blocks) return;
    if (!r->indexed && !la_hmap_put(&s->index, r->hdr.key, (int64_t)(intptr_t)r)) return;
    r->indexed = true;
    r->in_host = true;
    note(s, LA_KV_TIER_HOST, r->hdr.key, true);
    s->host_blocks += r->hdr.n_blocks;
    s->st.tier[LA_KV_TIER_HOST].records++;
    s->st.tier[LA_KV_TIER_HOST].bytes += (int64_t)r->hdr.payload_bytes;
}

/* ============================================================ create / destroy ====== */

la_status la_kv_store_create(const la_kv_store_options *o, const la_kv_record_shape *shape,
                             const la_host_allocator *alloc, la_kv_store **out, la_err *err) {
    if (o->host_bytes < 0 || o->staging_bytes < 0 || o->dir_bytes < 0 || o->io_timeout_ms < 0 || o->n_io_threads < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "KV store: sizes, timeouts and thread counts must be >= 0");
    la_kv_store *s = calloc(1, sizeof *s);
    if (!s) return la_err_set(err, LA_ERR_NO_MEMORY, "KV store: out of memory");
    s->opts = *o;
    s->shape = *shape;
    s->block_bytes = la_kv_record_block_bytes(shape);
    if (!s->opts.staging_bytes) s->opts.staging_bytes = DEFAULT_STAGING_BYTES;
    if (!s->opts.n_io_threads) s->opts.n_io_threads = DEFAULT_IO_THREADS;
    if (!s->opts.io_timeout_ms) s->opts.io_timeout_ms = DEFAULT_IO_TIMEOUT_MS;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_work, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    la_status st = LA_OK;
    s->dir = o->dir ? strdup(o->dir) : NULL;
    s->shared_url = o->shared_url ? strdup(o->shared_url) : NULL;
    if ((o->dir && !s->dir) || (o->shared_url && !s->shared_url))
        st = la_err_set(err, LA_ERR_NO_MEMORY, "KV store: out of memory");
    s->opts.dir = s->dir;
    s->opts.shared_url = s->shared_url;
    s->host_cap_blocks = (int64_t)(o->host_bytes / (int64_t)s->block_bytes);
    int64_t staging = s->opts.staging_bytes / (int64_t)s->block_bytes;
    if (staging < 1) staging = 1;
    if (st == LA_OK) {
        int64_t max_blocks = s->host_cap_blocks + staging, chunk = ((int64_t)1 << 30) / (int64_t)s->block_bytes;
        if (max_blocks >= INT32_MAX) max_blocks = INT32_MAX - 1;
        st = la_host_arena_create(s->block_bytes, max_blocks, chunk < 1 ? 1 : chunk, alloc, &s->arena, err);
    }
    if (st == LA_OK && alloc && alloc->alloc) { /* a caller's allocator is the slow pinned one */
        s->grown = calloc((size_t)la_host_arena_chunk_count(s->arena), sizeof *s->grown);
        if (!s->grown) st = la_err_set(err, LA_ERR_NO_MEMORY, "KV store: out of memory");
        else if (pthread_create(&s->grower, NULL, grow_main, s) != 0)
            st = la_err_set(err, LA_ERR_INTERNAL, "KV store: cannot start the host memory thread");
        else {
            s->has_grower = true;
            la_host_arena_set_async(s->arena, true);
        }
    }
    la_kv_tier_config tc = {s->opts.dir, s->opts.dir_bytes, s->opts.shared_url,
                            s->opts.io_timeout_ms < 2000 ? (int)s->opts.io_timeout_ms : 2000};
    for (int id = LA_KV_TIER_DISK; st == LA_OK && id < LA_KV_TIER_COUNT; id++)
        st = la_kv_tier_open((la_kv_tier_id)id, &tc, &s->tier[id], err);
    if (st == LA_OK) {
        s->threads = calloc((size_t)s->opts.n_io_threads, sizeof(pthread_t));
        if (!s->threads) st = la_err_set(err, LA_ERR_NO_MEMORY, "KV store: out of memory");
        for (int32_t i = 0; st == LA_OK && i < s->opts.n_io_threads; i++) {
            if (pthread_create(&s->threads[i], NULL, io_main, s) != 0)
                st = la_err_set(err, LA_ERR_INTERNAL, "KV store: cannot start an I/O thread");
            else s->n_threads++;
        }
    }
    if (st != LA_OK) {
        la_kv_store_destroy(s);
        return st;
    }
    *out = s;
    return LA_OK;
}

void la_kv_store_destroy(la_kv_store *s) {
    if (!s) return;
    serve_waiting(s, true); /* before the I/O threads stop: no read may be issued after */
    la_kv_store_flush(s);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv_work);
    pthread_mutex_unlock(&s->mu);
    for (int32_t i = 0; i < s->n_threads; i++) pthread_join(s->threads[i], NULL);
    free(s->threads);
    if (s->has_grower) {
        pthread_join(s->grower, NULL);
        adopt_chunks(s); /* the arena frees what it holds */
    }
    free(s->grown);
    la_kv_store_poll(s); /* frees what the last tasks held */
    for (int64_t i = 0; i < s->index.cap; i++)
        if (s->index.slots[i].state == 1) {
            la_kv_rec *r = (la_kv_rec *)(intptr_t)s->index.slots[i].value;
            r->indexed = false; /* the map goes away below */
            if (r->refs == 0) rec_free(s, r); /* records still held by callers are theirs to release */
        }
    la_hmap_fini(&s->index);
    for (int id = 0; id < LA_KV_TIER_COUNT; id++)
        if (s->tier[id]) s->tier[id]->ops->destroy(s->tier[id]);
    la_host_arena_destroy(s->arena);
    free(s->changes);
    free(s->dir);
    free(s->shared_url);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_work);
    pthread_cond_destroy(&s->cv_done);
    free(s);
}

int32_t la_kv_store_io_threads(const la_kv_store *s) { return s->n_threads; }

bool la_kv_store_enabled(const la_kv_store *s) {
    return s && (s->host_cap_blocks > 0 || s->tier[LA_KV_TIER_DISK] || s->tier[LA_KV_TIER_SHARED]);
}

bool la_kv_store_has_tier(const la_kv_store *s, la_kv_tier_id t) {
    if (!s) return false;
    return t == LA_KV_TIER_HOST ? s->host_cap_blocks > 0 : (unsigned)t < LA_KV_TIER_COUNT && s->tier[t];
}

size_t la_kv_store_block_bytes(const la_kv_store *s) { return s->block_bytes; }

/* ============================================================ lookups =============== */

static la_kv_rec *indexed(const la_kv_store *s, la_hash128 key) {
    int64_t v;
    return la_hmap_get(&s->index, key, &v) ? (la_kv_rec *)(intptr_t)v : NULL;
}

bool la_kv_store_in_host(const la_kv_store *s, la_hash128 key) {
    la_kv_rec *r = s ? indexed(s, key) : NULL;
    return r && r->in_host;
}

void la_kv_store_touch(la_kv_store *s, la_kv_tier_id t, la_hash128 key) {
    if (s && t > LA_KV_TIER_HOST && t < LA_KV_TIER_COUNT && s->tier[t] && s->tier[t]->ops->touch)
        s->tier[t]->ops->touch(s->tier[t], key);
}

la_kv_tier_id la_kv_store_probe(const la_kv_store *s, la_hash128 key) {
    if (!s) return LA_KV_TIER_COUNT;
    if (la_kv_store_in_host(s, key)) return LA_KV_TIER_HOST;
    for (int id = LA_KV_TIER_DISK; id < LA_KV_TIER_COUNT; id++)
        if (s->tier[id] && s->tier[id]->ops->probe(s->tier[id], key) != LA_KV_PROBE_NO) return (la_kv_tier_id)id;
    return LA_KV_TIER_COUNT;
}

/* The first tier at or after `from` whose index may hold key, or LA_KV_TIER_COUNT. */
static la_kv_tier_id next_tier(const la_kv_store *s, la_hash128 key, int from) {
    for (int id = from; id < LA_KV_TIER_COUNT; id++)
        if (id != LA_KV_TIER_HOST && s->tier[id] && s->tier[id]->ops->probe(s->tier[id], key) != LA_KV_PROBE_NO)
            return (la_kv_tier_id)id;
    return LA_KV_TIER_COUNT;
}

la_kv_rec *la_kv_store_find(la_kv_store *s, const la_kv_record_header *want) {
    if (!la_kv_store_enabled(s)) return NULL;
    la_kv_rec *r = indexed(s, want->key);
    if (r && r->state != LA_KV_REC_FILLING && la_hash128_eq(r->hdr.shape.fingerprint, want->shape.fingerprint) &&
        r->hdr.n_tokens == want->n_tokens && r->hdr.shape.kv_format == want->shape.kv_format) {
        if (r->state == LA_KV_REC_READY) s->st.tier[LA_KV_TIER_HOST].hits++;
        lru_remove(s, r);
        r->refs++;
        return r;
    }
    if (s->host_cap_blocks > 0) s->st.tier[LA_KV_TIER_HOST].misses++;
    la_kv_tier_id t = r ? LA_KV_TIER_COUNT : next_tier(s, want->key, LA_KV_TIER_DISK);
    if (t == LA_KV_TIER_COUNT) {
        for (int id = LA_KV_TIER_DISK; id < LA_KV_TIER_COUNT; id++)
            if (s->tier[id]) s->st.tier[id].misses++;
        return NULL;
    }
    /* no memory while pinned memory is still growing: the lookup waits for it (up to
     * io_timeout_ms like a slow read) rather than recomputing what a lower tier holds */
    r = rec_shell(want);
    bool wait = false;
    if (r && !rec_fill(s, r)) {
        wait = growing(s) && want->n_blocks <= la_host_arena_capacity(s->arena);
        if (!wait) {
            rec_free(s, r);
            r = NULL;
        }
    }
    if (!r || !la_hmap_put(&s->index, want->key, (int64_t)(intptr_t)r)) {
        if (r) rec_free(s, r);
        s->st.lookups_dropped++; /* not a miss: nobody asked the tiers */
        return NULL;
    }
    r->indexed = true;
    r->state = LA_KV_REC_LOADING;
    r->t_start_ms = la_now_ms();
    r->next_tier = t;
    for (int id = LA_KV_TIER_DISK; id < (int)t; id++)
        if (s->tier[id]) s->st.tier[id].misses++;
    if (wait) {
        r->refs++; /* the wait list's */
        if (s->wait_tail) s->wait_tail->wait_next = r;
        else s->wait_head = r;
        s->wait_tail = r;
    } else if (!submit(s, IO_READ, r, t, 0)) {
        r->state = LA_KV_REC_FAILED;
        unindex(s, r);
    }
    r->refs++; /* the caller's */
    unref(s, r); /* rec_shell's */
    return r;
}

la_kv_rec_state la_kv_rec_state_of(const la_kv_rec *r) { return r->state; }
la_kv_tier_id la_kv_rec_tier(const la_kv_rec *r) { return r->tier; }
const la_kv_record_header *la_kv_rec_header(const la_kv_rec *r) { return &r->hdr; }
void *la_kv_rec_block(const la_kv_store *s, const la_kv_rec *r, int32_t b) {
    return la_host_arena_ptr(s->arena, r->blocks[b]);
}

void la_kv_store_release(la_kv_store *s, la_kv_rec *r) {
    if (r) unref(s, r);
}

void la_kv_store_release_moved(la_kv_store *s, la_kv_rec *r) {
    if (!r) return;
    if (r->in_host && !r->busy) {
        unindex(s, r); /* out of the host tier; freed at its last reference */
        s->st.promotions++;
    }
    unref(s, r);
}

/* ============================================================ puts ================== */

/* Tiers below host a put of this reason writes to. */
static uint32_t write_mask(const la_kv_store *s, la_kv_put_reason why, bool on_disk) {
    uint32_t m = 0;
    if (s->tier[LA_KV_TIER_DISK] && !on_disk &&
        (why == LA_KV_PUT_COMPUTED ? s->opts.dir_write_through : s->host_cap_blocks == 0))
        m |= 1u << LA_KV_TIER_DISK;
    if (s->tier[LA_KV_TIER_SHARED] && why == LA_KV_PUT_COMPUTED) m |= 1u << LA_KV_TIER_SHARED;
    return m;
}

bool la_kv_store_wants(const la_kv_store *s, la_hash128 key, la_kv_put_reason why) {
    if (!la_kv_store_enabled(s)) return false;
    la_kv_rec *r = indexed(s, key);
    if (r) return false; /* in the host tier already, or on its way there */
    bool on_disk = s->tier[LA_KV_TIER_DISK] &&
                   s->tier[LA_KV_TIER_DISK]->ops->probe(s->tier[LA_KV_TIER_DISK], key) == LA_KV_PROBE_YES;
    if (why == LA_KV_PUT_EVICTED && s->host_cap_blocks > 0) return true;
    return write_mask(s, why, on_disk) != 0;
}

static la_kv_rec *put_begin(la_kv_store *s, const la_kv_record_header *hdr, la_kv_put_reason why, bool may_wait) {
    la_kv_rec *r = indexed(s, hdr->key) ? NULL : rec_new(s, hdr);
    if (!r || !la_hmap_put(&s->index, hdr->key, (int64_t)(intptr_t)r)) {
        if (r) rec_free(s, r);
        if (!may_wait) {
            s->st.puts++;
            s->st.puts_dropped++;
        }
        return NULL;
    }
    s->st.puts++;
    r->indexed = true;
    r->state = LA_KV_REC_FILLING;
    r->why = why;
    return r;
}

la_kv_rec *la_kv_store_put_begin(la_kv_store *s, const la_kv_record_header *hdr, la_kv_put_reason why) {
    return put_begin(s, hdr, why, false);
}

la_kv_rec *la_kv_store_put_try(la_kv_store *s, const la_kv_record_header *hdr, la_kv_put_reason why) {
    return put_begin(s, hdr, why, true);
}

bool la_kv_store_can_hold(la_kv_store *s, int32_t n_blocks) {
    pthread_mutex_lock(&s->mu);
    bool failed = s->grow_failed;
    pthread_mutex_unlock(&s->mu);
    if (!failed) return n_blocks <= la_host_arena_capacity(s->arena);
    adopt_chunks(s); /* pinned memory stopped growing: what it holds is all there will be */
    return (int64_t)n_blocks <= la_host_arena_chunks(s->arena) * la_host_arena_chunk_blocks(s->arena);
}

void la_kv_store_put_dropped(la_kv_store *s) {
    s->st.puts++;
    s->st.puts_dropped++;
}

void la_kv_store_put_end(la_kv_store *s, la_kv_rec *r, bool ok) {
    if (!ok) {
        unindex(s, r);
        unref(s, r);
        return;
    }
    r->state = LA_KV_REC_READY;
    r->tier = LA_KV_TIER_HOST;
    r->on_disk = s->tier[LA_KV_TIER_DISK] &&
                 s->tier[LA_KV_TIER_DISK]->ops->probe(s->tier[LA_KV_TIER_DISK], r->hdr.key) == LA_KV_PROBE_YES;
    if (r->why == LA_KV_PUT_EVICTED && s->host_cap_blocks > 0) {
        host_insert(s, r);
        if (r->in_host) s->st.writebacks++;
    }
    if (!r->in_host) unindex(s, r); /* in transit only: no lookup may find it half-written below */
    uint32_t mask = write_mask(s, r->why, r->on_disk);
    if (mask) submit(s, IO_WRITE, r, LA_KV_TIER_COUNT, mask);
    unref(s, r);
}

/* ============================================================ poll ================== */

static void tier_health(la_kv_store *s, la_kv_tier_id id, la_status st, const char *msg) {
    la_kv_tier_stats *ts = &s->st.tier[id];
    bool failed = st != LA_OK && st != LA_ERR_NOT_FOUND;
    if (failed && !ts->down) la_log("KV store: %s tier failed (%s); serving by computing until it recovers",
                                    la_kv_tier_name(id), msg);
    if (!failed && ts->down) la_log("KV store: %s tier is back", la_kv_tier_name(id));
    ts->down = failed;
}

static void finish_read(la_kv_store *s, io_task *t) {
    la_kv_rec *r = t->rec;
    la_kv_tier_stats *ts = &s->st.tier[t->tier];
    la_status st = t->status[t->tier];
    ts->read_s += t->secs[t->tier];
    tier_health(s, t->tier, st, t->msg);
    bool good = st == LA_OK && t->reject == LA_KV_REJECT_NONE;
    if (st == LA_OK) ts->bytes_read += (int64_t)t->bytes;
    if (st != LA_OK && st != LA_ERR_NOT_FOUND) ts->errors++;
    if (st == LA_OK && t->reject != LA_KV_REJECT_NONE) {
        s->st.rejected[t->reject]++;
        s->st.rejected_total++;
        if (t->tier == LA_KV_TIER_DISK) note(s, LA_KV_TIER_DISK, r->hdr.key, false); /* dropped */
    }
    if (r->state != LA_KV_REC_LOADING) return; /* abandoned after io_timeout_ms */
    if (good) {
        ts->hits++;
        r->state = LA_KV_REC_READY;
        r->tier = t->tier;
        r->on_disk = t->tier == LA_KV_TIER_DISK;
        host_insert(s, r); /* kept in the host tier when there is one */
        if (!r->in_host) unindex(s, r);
        return;
    }
    ts->misses++;
    la_kv_tier_id next = next_tier(s, r->hdr.key, t->tier + 1);
    if (next != LA_KV_TIER_COUNT && submit(s, IO_READ, r, next, 0)) {
        r->next_tier = next;
        return;
    }
    r->state = LA_KV_REC_FAILED;
    unindex(s, r);
}

static void finish_write(la_kv_store *s, io_task *t) {
    for (int id = 0; id < LA_KV_TIER_COUNT; id++) {
        if (!(t->write_mask & (1u << id))) continue;
        la_kv_tier_stats *ts = &s->st.tier[id];
        ts->write_s += t->secs[id];
        tier_health(s, (la_kv_tier_id)id, t->status[id], t->msg);
        if (t->status[id] == LA_OK) {
            ts->writes++;
            ts->bytes_written += (int64_t)t->bytes;
            if (id == LA_KV_TIER_DISK) {
                t->rec->on_disk = true;
                note(s, LA_KV_TIER_DISK, t->rec->hdr.key, true);
            }
        } else {
            ts->write_failures++;
        }
    }
}

void la_kv_store_poll(la_kv_store *s) {
    if (!s) return;
    adopt_chunks(s);
    serve_waiting(s, false);
    pthread_mutex_lock(&s->mu);
    io_task *done = s->done_head;
    s->done_head = NULL;
    pthread_mutex_unlock(&s->mu);
    /* oldest first: the done list is pushed at its head */
    io_task *rev = NULL;
    while (done) {
        io_task *n = done->next;
        done->next = rev;
        rev = done;
        done = n;
    }
    for (io_task *t = rev, *n; t; t = n) {
        n = t->next;
        la_kv_rec *r = t->rec;
        r->busy = false;
        s->n_busy--;
        if (t->kind == IO_READ) finish_read(s, t); /* may issue the next tier's read */
        else finish_write(s, t);
        unref(s, r); /* the finished task's reference (a re-issued read took its own) */
        free(t);
        pthread_mutex_lock(&s->mu);
        s->n_tasks--;
        pthread_mutex_unlock(&s->mu);
    }
    /* records the disk tier removed for its size cap */
    la_kv_tier *disk = s->tier[LA_KV_TIER_DISK];
    if (disk && disk->ops->take_evicted) {
        la_hash128 keys[64];
        int32_t n;
        while ((n = disk->ops->take_evicted(disk, keys, 64)) > 0)
            for (int32_t i = 0; i < n; i++) {
                s->st.tier[LA_KV_TIER_DISK].evictions++;
                note(s, LA_KV_TIER_DISK, keys[i], false);
            }
    }
    /* reads that took too long: the caller computes; the task still holds the record */
    double now = la_now_ms();
    for (int64_t i = 0; i < s->index.cap; i++) {
        if (s->index.slots[i].state != 1) continue;
        la_kv_rec *r = (la_kv_rec *)(intptr_t)s->index.slots[i].value;
        if (r->state == LA_KV_REC_LOADING && now - r->t_start_ms > s->opts.io_timeout_ms) {
            r->state = LA_KV_REC_FAILED;
            s->st.timeouts++;
            unindex(s, r);
        }
    }
}

bool la_kv_store_busy(const la_kv_store *s) { return s && s->n_busy > 0; }
bool la_kv_store_waiting(const la_kv_store *s) { return s && s->wait_head; }

void la_kv_store_flush(la_kv_store *s) {
    if (!s) return;
    for (;;) {
        la_kv_store_poll(s);
        pthread_mutex_lock(&s->mu);
        bool idle = s->n_tasks == 0;
        if (!idle && !s->done_head) {
            struct timespec ts = la_deadline_after_ms(50);
            pthread_cond_timedwait(&s->cv_done, &s->mu, &ts);
        }
        pthread_mutex_unlock(&s->mu);
        if (idle) return;
    }
}

void la_kv_store_get_stats(const la_kv_store *s, la_kv_store_stats *out) {
    *out = s->st;
    la_kv_tier *d = s->tier[LA_KV_TIER_DISK];
    if (d) {
        out->tier[LA_KV_TIER_DISK].records = la_disk_tier_records(d);
        out->tier[LA_KV_TIER_DISK].bytes = la_disk_tier_bytes(d);
    }
}

void la_kv_store_track_changes(la_kv_store *s, bool on) {
    if (s) s->track = on;
}

int32_t la_kv_store_take_changes(la_kv_store *s, la_kv_change *out, int32_t max) {
    if (!s) return 0;
    int32_t n = s->n_changes < max ? s->n_changes : max;
    if (n == 0) return 0;
    memcpy(out, s->changes, sizeof *out * (size_t)n);
    memmove(s->changes, s->changes + n, sizeof *out * (size_t)(s->n_changes - n));
    s->n_changes -= n;
    return n;
}
