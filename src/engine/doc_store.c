/* The engine's side of the document KV store (doc_store.h).
 *
 * ---- Keys -----------------------------------------------------------------------------------
 * The pool's hash context is keyed with the deployment secret and names the namespace
 * H(model fingerprint, pool dtype, block size, layers, KV heads, head_dim[, how the CPU's
 * products round the weights: weights_rounding]), so a document's
 * block hashes, and its record key H(last block hash, length) (kv/block_hash.h), are the
 * same in every process that shares secret and model. Without a secret (no kv_dir, no
 * kv_secret_file) the key is random per process and nothing is written that outlives it.
 *
 * ---- Resident documents ---------------------------------------------------------------------
 * A document whose every block is ready in the pool is resident: key -> its blocks and
 * tokens, and every pool block lists the resident documents that hold it (a block can be
 * in two documents that begin alike). The pool's eviction hook copies a resident document
 * out whole the moment any of its blocks is reused, then forgets it: its other blocks
 * stay cached and usable, and the record is in the host tier for the rest.
 *
 * ---- Copies ----------------------------------------------------------------------------------
 * Pool <-> host copies go through the backend's kv_export / kv_import (CUDA: a copy
 * stream ordered after the compute queued before them; CPU: memcpy), each a ticket polled
 * once per step. An export's record is handed to the store (la_kv_store_put_end) when its
 * copy is done, after the padding slots of the last block are zeroed (records are
 * deterministic, and no NaN pattern ever reaches a masked slot).
 */
#include "engine/doc_store.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/array.h"
#include "base/dtype.h"
#include "base/err.h"
#include "base/file.h"
#include "base/hash_map.h"
#include "base/log.h"
#include "base/timer.h"
#include "engine/read_choice.h"
#include "kv/block_hash.h"
#include "kv/store/secret.h"
#include "kv/store/store.h"
#include "model/fingerprint.h"
#include "model/safetensors.h"

typedef struct res_doc {
    la_hash128 key;
    la_kv_format format;
    int32_t n_blocks, n_tokens;
    int32_t *blocks;  /* [n_blocks] pool blocks */
    int32_t *tokens;  /* [n_tokens] */
    bool live;
    bool pending;     /* its write-through waits in d->pending for host memory */
} res_doc;

typedef struct member {
    int32_t doc, next; /* resident document index; next member of the same block (-1) */
} member;

typedef enum { COPY_IMPORT, COPY_EXPORT } copy_kind;

typedef struct copy_op {
    copy_kind kind;
    uint64_t ticket;
    la_kv_rec *rec;
    la_doc_job *job;     /* IMPORT */
    int32_t n_blocks;    /* blocks copied */
    int32_t n_valid_last;/* EXPORT: slots of the last block to keep */
    double t_start_ms;
    struct copy_op *next;
} copy_op;

/* What a document looked like when it was last resident: the tokens and hashes its KV
 * events name when a tier reports it stored or removed. */
typedef struct doc_info {
    int32_t n_blocks, n_tokens, block_size;
    uint64_t *hashes;
    int32_t *tokens;
} doc_info;

struct la_doc_store {
    la_engine *e;
    la_kv_store *store;   /* NULL: no tier */
    la_hash_ctx hc;
    la_kv_record_shape shape;
    size_t block_bytes;
    la_kv_medium pool_medium;
    bool events;

    la_hmap resident;     /* record key -> index into docs */
    res_doc *docs;
    int32_t n_docs, free_doc; /* a freed entry's n_blocks holds the next free */
    int64_t cap_docs;
    int32_t *block_head;  /* [pool blocks] first member, -1 */
    int64_t n_pool_blocks;
    member *members;
    int32_t n_members, free_member;
    int64_t cap_members;

    la_hmap info;         /* record key -> index into infos (documents some tier holds) */
    doc_info *infos;
    int32_t n_infos;
    int64_t cap_infos;

    copy_op *copies;
    int32_t n_copies;
    la_engine_store_stats extra; /* copy times and bytes */

    /* Computed documents whose write-through (disk, shared tier) found no staging memory:
     * retried in order at every step while the pool still holds them (a burst of new
     * documents outruns the I/O threads; the pool, not the host, is where they wait). */
    la_hash128 *pending;
    int32_t n_pending;
    int64_t cap_pending;

    la_read_choice rc; /* kv_read AUTO's choice (engine/read_choice.h) */
};

#define MAX_PENDING_PUTS 65536

/* ============================================================ events ================ */

static void emit(la_doc_store *d, const la_kv_event *ev) {
    if (d->events) d->e->opts.on_kv_event(d->e->opts.kv_event_user, ev);
}

static uint64_t block_hash64(const la_doc_store *d, int32_t block) {
    la_hash128 h = {0, 0};
    la_kv_pool_block_hash(d->e->pool, block, &h);
    return h.lo;
}

/* Remember a document's hashes and tokens for the events of the tiers below the pool. */
static void info_put(la_doc_store *d, la_hash128 key, const int32_t *blocks, int32_t n_blocks,
                     const int32_t *tokens, int32_t n_tokens) {
    if (!d->events || la_hmap_get(&d->info, key, NULL)) return;
    if (!la_array_reserve((void **)&d->infos, &d->cap_infos, d->n_infos + 1, sizeof *d->infos, 64)) return;
    doc_info in = {n_blocks, n_tokens, d->shape.block_size, malloc(sizeof(uint64_t) * (size_t)n_blocks),
                   malloc(sizeof(int32_t) * (size_t)n_tokens)};
    if (!in.hashes || !in.tokens || !la_hmap_put(&d->info, key, d->n_infos)) {
        free(in.hashes);
        free(in.tokens);
        return;
    }
    for (int32_t b = 0; b < n_blocks; b++) in.hashes[b] = block_hash64(d, blocks[b]);
    memcpy(in.tokens, tokens, sizeof(int32_t) * (size_t)n_tokens);
    d->infos[d->n_infos++] = in;
}

static void tier_event(la_doc_store *d, const la_kv_change *c) {
    int64_t i;
    if (!la_hmap_get(&d->info, c->key, &i)) return; /* found on disk at start: never resident here */
    const doc_info *in = &d->infos[i];
    la_kv_event ev = {.kind = c->stored ? LA_KV_EVENT_STORED : LA_KV_EVENT_REMOVED,
                      .medium = c->tier == LA_KV_TIER_HOST ? LA_KV_MEDIUM_CPU : LA_KV_MEDIUM_DISK,
                      .n_blocks = in->n_blocks, .block_hashes = in->hashes, .token_ids = in->tokens,
                      .n_tokens = c->stored ? in->n_tokens : 0, .block_size = in->block_size,
                      .is_document = c->stored, .doc_key_lo = c->key.lo, .doc_key_hi = c->key.hi,
                      .doc_block0 = 0, .doc_n_tokens = in->n_tokens};
    emit(d, &ev);
}

/* ============================================================ resident documents ===== */

static void member_add(la_doc_store *d, int32_t block, int32_t doc) {
    int32_t m;
    if (d->free_member >= 0) {
        m = d->free_member;
        d->free_member = d->members[m].next;
    } else {
        /* out of memory: not tracked, its eviction writes nothing back */
        if (!la_array_reserve((void **)&d->members, &d->cap_members, d->n_members + 1, sizeof *d->members, 256))
            return;
        m = d->n_members++;
    }
    d->members[m] = (member){doc, d->block_head[block]};
    d->block_head[block] = m;
}

static void member_remove(la_doc_store *d, int32_t block, int32_t doc) {
    for (int32_t *at = &d->block_head[block]; *at >= 0; at = &d->members[*at].next)
        if (d->members[*at].doc == doc) {
            int32_t m = *at;
            *at = d->members[m].next;
            d->members[m].next = d->free_member;
            d->free_member = m;
            return;
        }
}

static void resident_remove(la_doc_store *d, int32_t i) {
    res_doc *r = &d->docs[i];
    for (int32_t b = 0; b < r->n_blocks; b++) member_remove(d, r->blocks[b], i);
    la_hmap_remove(&d->resident, r->key);
    free(r->blocks);
    free(r->tokens);
    *r = (res_doc){0};
    r->n_blocks = d->free_doc; /* the free chain */
    d->free_doc = i;
}

static void resident_add(la_doc_store *d, la_hash128 key, la_kv_format fmt, const int32_t *blocks,
                         int32_t n_blocks, const int32_t *tokens, int32_t n_tokens) {
    int64_t old;
    if (la_hmap_get(&d->resident, key, &old)) resident_remove(d, (int32_t)old); /* blocks may differ */
    int32_t i;
    if (d->free_doc >= 0) {
        i = d->free_doc;
        d->free_doc = d->docs[i].n_blocks;
    } else {
        if (!la_array_reserve((void **)&d->docs, &d->cap_docs, d->n_docs + 1, sizeof *d->docs, 64)) return;
        i = d->n_docs++;
    }
    res_doc r = {.key = key, .format = fmt, .n_blocks = n_blocks, .n_tokens = n_tokens,
                 .blocks = malloc(sizeof(int32_t) * (size_t)n_blocks),
                 .tokens = malloc(sizeof(int32_t) * (size_t)n_tokens), .live = true};
    if (!r.blocks || !r.tokens || !la_hmap_put(&d->resident, key, i)) {
        free(r.blocks);
        free(r.tokens);
        d->docs[i] = (res_doc){.n_blocks = d->free_doc};
        d->free_doc = i;
        return;
    }
    memcpy(r.blocks, blocks, sizeof(int32_t) * (size_t)n_blocks);
    memcpy(r.tokens, tokens, sizeof(int32_t) * (size_t)n_tokens);
    d->docs[i] = r;
    for (int32_t b = 0; b < n_blocks; b++) member_add(d, blocks[b], i);
}

/* ============================================================ copies ================ */

static la_kv_record_header header_of(const la_doc_store *d, la_hash128 key, la_kv_format fmt, int32_t n_tokens) {
    la_kv_record_shape sh = d->shape;
    sh.kv_format = (uint8_t)fmt;
    return la_kv_record_header_make(key, &sh, n_tokens);
}

static void copy_push(la_doc_store *d, copy_op *c) {
    c->next = d->copies;
    d->copies = c;
    d->n_copies++;
}

/* Copy blocks[0:n] of the pool to (export) or from (import) record blocks [b0, b0 + n). */
static la_status copy_start(la_doc_store *d, copy_kind kind, la_kv_rec *rec, int32_t b0, const int32_t *blocks,
                            int32_t n, uint64_t *ticket, la_err *err) {
    la_backend *be = d->e->be;
    void **host = malloc(sizeof(void *) * (size_t)(n ? n : 1));
    if (!host) return la_err_set(err, LA_ERR_NO_MEMORY, "KV store copy: out of memory");
    for (int32_t i = 0; i < n; i++) host[i] = la_kv_rec_block(d->store, rec, b0 + i);
    la_status s = kind == COPY_EXPORT ? be->ops->kv_export(be, blocks, n, host, ticket, err)
                                      : be->ops->kv_import(be, blocks, n, (const void *const *)host, ticket, err);
    free(host);
    return s;
}

/* Start the import of a READY record into the job's missing blocks. False: compute. */
static bool import_start(la_doc_store *d, la_doc_job *j) {
    int32_t b0 = j->doc.n_reused, n = j->doc.n_blocks - b0;
    copy_op *c = calloc(1, sizeof *c);
    la_err err = {0};
    if (!c || copy_start(d, COPY_IMPORT, j->rec, b0, j->doc.block_ids + b0, n, &c->ticket, &err) != LA_OK) {
        if (err.msg[0]) la_log("KV store: copying a record into the pool failed (%s); computing it", err.msg);
        free(c);
        return false;
    }
    c->kind = COPY_IMPORT;
    c->rec = j->rec;
    c->job = j;
    c->n_blocks = n;
    c->t_start_ms = la_now_ms();
    copy_push(d, c);
    j->load = LA_JOB_IMPORTING;
    return true;
}

/* Zero slots [n_valid, block_size) of every (layer, K/V, head) of a record block. */
static void zero_padding(const la_doc_store *d, void *block, int32_t n_valid) {
    const la_kv_record_shape *s = &d->shape;
    if (n_valid >= s->block_size) return;
    size_t el = la_dtype_size((la_dtype)s->dtype), row = (size_t)s->head_dim * el;
    uint8_t *p = block;
    for (int64_t chunk = 0; chunk < 2LL * s->n_layers * s->n_kv_heads; chunk++) {
        uint8_t *head = p + (size_t)chunk * (size_t)s->block_size * row;
        memset(head + (size_t)n_valid * row, 0, (size_t)(s->block_size - n_valid) * row);
    }
}

/* Copy a resident document out into a record of the store (put reason why). A computed
 * document's put that finds no host memory waits in d->pending (wait: the caller may
 * queue it); otherwise it is dropped and counted. Returns false when it did not start. */
static bool export_doc(la_doc_store *d, res_doc *r, la_kv_put_reason why, bool wait) {
    la_kv_record_header h = header_of(d, r->key, r->format, r->n_tokens);
    la_kv_rec *rec = wait ? la_kv_store_put_try(d->store, &h, why) : la_kv_store_put_begin(d->store, &h, why);
    if (!rec) return false;
    copy_op *c = calloc(1, sizeof *c);
    la_err err = {0};
    if (!c || copy_start(d, COPY_EXPORT, rec, 0, r->blocks, r->n_blocks, &c->ticket, &err) != LA_OK) {
        if (err.msg[0]) la_log("KV store: copying a document out of the pool failed (%s)", err.msg);
        free(c);
        la_kv_store_put_end(d->store, rec, false);
        return true; /* failed, not waiting */
    }
    info_put(d, r->key, r->blocks, r->n_blocks, r->tokens, r->n_tokens);
    c->kind = COPY_EXPORT;
    c->rec = rec;
    c->n_blocks = r->n_blocks;
    c->n_valid_last = r->n_tokens - (r->n_blocks - 1) * d->shape.block_size;
    c->t_start_ms = la_now_ms();
    copy_push(d, c);
    return true;
}

/* A computed document's write-through: now, or queued until host memory frees up. */
static void export_computed(la_doc_store *d, int32_t i) {
    res_doc *r = &d->docs[i];
    if (d->n_pending == 0 && export_doc(d, r, LA_KV_PUT_COMPUTED, true)) return;
    if (!la_kv_store_can_hold(d->store, r->n_blocks) || d->n_pending >= MAX_PENDING_PUTS ||
        !la_array_reserve((void **)&d->pending, &d->cap_pending, d->n_pending + 1, sizeof *d->pending, 64)) {
        la_kv_store_put_dropped(d->store);
        return;
    }
    d->pending[d->n_pending++] = r->key;
    r->pending = true;
}

/* Start the waiting write-throughs that host memory now allows, oldest first. */
static void retry_pending(la_doc_store *d) {
    int32_t k = 0;
    for (; k < d->n_pending; k++) {
        int64_t i;
        if (!la_hmap_get(&d->resident, d->pending[k], &i)) continue; /* evicted: counted then */
        res_doc *r = &d->docs[i];
        if (!r->pending) continue; /* evicted, then resident again (loaded): no write-through */
        if (!la_kv_store_can_hold(d->store, r->n_blocks)) { /* pinned memory stopped short */
            r->pending = false;
            la_kv_store_put_dropped(d->store);
            continue;
        }
        if (!la_kv_store_wants(d->store, r->key, LA_KV_PUT_COMPUTED)) {
            r->pending = false;
            continue;
        }
        if (!export_doc(d, r, LA_KV_PUT_COMPUTED, true)) break;
        r->pending = false;
    }
    if (k == 0) return;
    memmove(d->pending, d->pending + k, sizeof *d->pending * (size_t)(d->n_pending - k));
    d->n_pending -= k;
}

static la_request *running(la_engine *e, uint64_t id) {
    for (la_request *r = e->running_head; r; r = r->next)
        if (r->id == id) return r;
    return NULL;
}

/* A copy finished (ok) or failed. */
static void copy_done(la_doc_store *d, copy_op *c, bool ok) {
    double secs = (la_now_ms() - c->t_start_ms) * 1e-3;
    int64_t bytes = (int64_t)c->n_blocks * (int64_t)d->block_bytes;
    if (c->kind == COPY_EXPORT) {
        if (ok) {
            d->extra.copy_out_s += secs;
            d->extra.copy_out_bytes += bytes;
            const la_kv_record_header *h = la_kv_rec_header(c->rec);
            zero_padding(d, la_kv_rec_block(d->store, c->rec, h->n_blocks - 1), c->n_valid_last);
        }
        la_kv_store_put_end(d->store, c->rec, ok);
        return;
    }
    la_doc_job *j = c->job;
    if (ok) {
        d->extra.copy_in_s += secs;
        d->extra.copy_in_bytes += bytes;
        la_kv_tier_id tier = la_kv_rec_tier(j->rec);
        int32_t n = j->doc.n_tokens - j->from;
        j->n_done = n; /* the scheduler retires it as computed */
        j->loaded = true;
        la_request *r = running(d->e, j->request_id);
        if (r && r->stats.n_preemptions == 0) {
            r->stats.doc_tokens_reused += n;
            r->stats.doc_tokens_computed -= n;
            if (tier == LA_KV_TIER_HOST) r->stats.doc_tokens_host += n;
            else if (tier == LA_KV_TIER_DISK) r->stats.doc_tokens_disk += n;
            else r->stats.doc_tokens_shared += n;
        }
    } else {
        j->load = LA_JOB_COMPUTE;
    }
    if (ok) la_kv_store_release_moved(d->store, j->rec); /* the pool holds it now */
    else la_kv_store_release(d->store, j->rec);
    j->rec = NULL;
    if (ok) j->load = LA_JOB_LOADED;
}

/* ============================================================ the eviction hook ===== */

static void on_evict(void *user, int32_t block, la_hash128 hash) {
    la_doc_store *d = user;
    uint64_t h64 = hash.lo;
    emit(d, &(la_kv_event){.kind = LA_KV_EVENT_REMOVED, .medium = d->pool_medium, .n_blocks = 1,
                           .block_hashes = &h64});
    while (d->block_head && d->block_head[block] >= 0) {
        int32_t i = d->members[d->block_head[block]].doc;
        if (d->store && d->docs[i].pending) la_kv_store_put_dropped(d->store); /* its write-through */
        if (d->store && la_kv_store_wants(d->store, d->docs[i].key, LA_KV_PUT_EVICTED))
            export_doc(d, &d->docs[i], LA_KV_PUT_EVICTED, false);
        resident_remove(d, i);
    }
}

/* ============================================================ create / destroy ====== */

/* The secret file at path, read if it exists (a read-only directory is fine), else created
 * when create_ok; a new secret is said in the log: nothing written under another one is
 * found with it (a mistyped --kv-secret-file shows up here). */
static la_status load_secret(const char *path, bool create_ok, la_hash_key *key, la_err *err) {
    la_status s = la_kv_secret_load(path, false, key, err);
    if (s != LA_ERR_NOT_FOUND || !create_ok) return s;
    la_err_clear(err);
    LA_TRY(la_kv_secret_load(path, true, key, err));
    la_log("KV store: created a new deployment secret in %s; records written under another secret are not "
           "found with it (replicas that share records share one secret file)", path);
    return LA_OK;
}

/* The hash key: the deployment secret's, or a random one when there is none. */
static la_status make_key(const la_engine *e, la_hash_key *key, bool *stable, la_err *err) {
    const la_engine_options *o = &e->opts;
    *stable = false;
    if (o->kv_secret_file) {
        LA_TRY(load_secret(o->kv_secret_file, true, key, err));
        *stable = true;
        return LA_OK;
    }
    if (o->kv_dir) {
        char *path = la_path_join(o->kv_dir, "secret");
        if (!path) return la_err_set(err, LA_ERR_NO_MEMORY, "KV store: out of memory");
        /* the directory may be unusable: then the disk tier stays empty and the key random */
        la_status s = load_secret(path, access(o->kv_dir, W_OK) == 0 || mkdir(o->kv_dir, 0700) == 0, key, err);
        free(path);
        if (s == LA_OK) {
            *stable = true;
            return LA_OK;
        }
        la_log("KV store: %s: no usable secret (%s); keys are random for this process", o->kv_dir,
               s == LA_ERR_NOT_FOUND ? "none there, and the directory is not writable" : err->msg);
        la_err_clear(err);
    }
    la_hash_key_random(key);
    return LA_OK;
}

/* How the CPU backend's products round what the checkpoint holds: 0 when they compute with the
 * checkpoint's values exactly (its dtype kept, or widened to f32), else the dtype the weights
 * were rounded to, plus 0x80 when the activations are rounded to bf16 (bf16-dot, where it
 * runs). Records of engines that differ here hold different numbers: the namespace keeps them
 * apart. The GPU keeps bf16 weights and a bf16 pool (a namespace of its own by the pool's
 * dtype where the CPU's is f32). */
static uint8_t weights_rounding(const la_engine *e) {
    if (e->opts.device != LA_DEVICE_CPU) return 0;
    /* weights_rounded: some matrix (embedding, head or layer) stored in another 16-bit dtype than
     * its checkpoint's, which only an explicit weight_dtype does */
    const uint8_t tag = e->be->weights_rounded ? (uint8_t)e->be->weight_dtype : 0;
    return (uint8_t)(tag | (e->be->bf16_dot ? 0x80 : 0));
}

la_status la_doc_store_create(la_engine *e, la_doc_store **out, la_err *err) {
    la_doc_store *d = calloc(1, sizeof *d);
    if (!d) return la_err_set(err, LA_ERR_NO_MEMORY, "KV store: out of memory");
    d->e = e;
    d->free_doc = d->free_member = -1;
    d->events = e->opts.on_kv_event != NULL;
    d->pool_medium = e->opts.device == LA_DEVICE_CUDA ? LA_KV_MEDIUM_GPU : LA_KV_MEDIUM_CPU;
    const la_backend_shape *bs = &e->be->shape;
    d->shape = (la_kv_record_shape){.dtype = (uint8_t)e->be->kv_dtype, .block_size = e->opts.block_size,
                                    .n_layers = bs->n_layers, .n_kv_heads = bs->n_kv_heads,
                                    .head_dim = bs->head_dim};
    d->block_bytes = la_kv_record_block_bytes(&d->shape);
    la_read_choice_init(&d->rc);
    bool stable = false;
    la_status s = make_key(e, &d->hc.key, &stable, err);
    /* the model fingerprint: what records of another checkpoint can never match */
    la_hash128 fp = {0, 0};
    if (s == LA_OK && e->random_shape) {
        fp = la_model_fingerprint_random(e->random_shape, &d->hc.key);
    } else if (s == LA_OK && stable) {
        int32_t n = la_st_file_count(e->weights->file);
        const char **paths = malloc(sizeof(char *) * (size_t)(n ? n : 1));
        char *cache = e->opts.kv_dir ? la_path_join(e->opts.kv_dir, "fingerprints") : NULL;
        if (!paths) s = la_err_set(err, LA_ERR_NO_MEMORY, "KV store: out of memory");
        for (int32_t i = 0; paths && i < n; i++) paths[i] = la_st_file_path(e->weights->file, i);
        if (s == LA_OK) s = la_model_fingerprint(e->model_dir, paths, n, &d->hc.key, cache, &fp, err);
        free(paths);
        free(cache);
    }
    if (s == LA_OK) {
        d->shape.fingerprint = fp;
        la_hasher h;
        la_hasher_init_key(&h, &d->hc.key);
        la_hasher_update(&h, "namespace", 9);
        uint8_t shape_bytes[LA_KV_RECORD_HEADER_BYTES];
        la_kv_record_header ns = header_of(d, (la_hash128){0, 0}, LA_KV_FORMAT_ROTATED_LOCAL, 1);
        la_kv_record_header_encode(&ns, shape_bytes); /* fingerprint, dtype and every size */
        la_hasher_update(&h, shape_bytes + 32, 48);
        const uint8_t rounding = weights_rounding(e); /* 0 leaves the namespace of before */
        if (rounding) la_hasher_update(&h, &rounding, 1);
        d->hc.ns = la_hasher_digest(&h);
        d->hc.has_ns = true;
        s = la_kv_pool_set_hash_ctx(e->pool, &d->hc, err);
    }
    const la_engine_options *o = &e->opts;
    bool want_store = o->host_kv_bytes > 0 || o->kv_dir || o->kv_store_url;
    if (s == LA_OK && want_store) {
        if (!e->be->ops->kv_export || !e->be->ops->kv_import || !e->be->ops->kv_copy_poll)
            s = la_err_set(err, LA_ERR_UNSUPPORTED, "KV store: the %s backend cannot copy KV blocks",
                           e->be->ops->name);
    }
    if (s == LA_OK && want_store) {
        la_kv_store_options so;
        la_kv_store_options_init(&so);
        so.host_bytes = o->host_kv_bytes;
        so.dir = stable ? o->kv_dir : NULL; /* records named by a random key would be litter */
        so.dir_bytes = o->kv_dir_bytes;
        so.dir_write_through = o->kv_write_through;
        so.shared_url = o->kv_store_url;
        so.io_timeout_ms = o->kv_io_timeout_ms;
        so.staging_bytes = o->kv_staging_bytes;
        so.n_io_threads = o->kv_io_threads;
        la_host_allocator al = {0};
        if (e->be->ops->host_alloc)
            al = (la_host_allocator){(void *(*)(void *, size_t))e->be->ops->host_alloc,
                                     (void (*)(void *, void *))e->be->ops->host_free, e->be};
        if (o->kv_dir && !stable && !o->kv_store_url && o->host_kv_bytes == 0) {
            /* nothing left to store into: run without a store */
        } else {
            s = la_kv_store_create(&so, &d->shape, al.alloc ? &al : NULL, &d->store, err);
        }
        if (s == LA_OK && d->store) la_kv_store_track_changes(d->store, d->events);
    }
    if (s == LA_OK) {
        d->n_pool_blocks = e->kv_blocks;
        d->block_head = malloc(sizeof(int32_t) * (size_t)d->n_pool_blocks);
        if (!d->block_head) s = la_err_set(err, LA_ERR_NO_MEMORY, "KV store: out of memory");
        for (int64_t b = 0; d->block_head && b < d->n_pool_blocks; b++) d->block_head[b] = -1;
    }
    if (s != LA_OK) {
        la_doc_store_destroy(d);
        return s;
    }
    la_kv_pool_set_evict_hook(e->pool, on_evict, d);
    *out = d;
    return LA_OK;
}

static void wait_copies(la_doc_store *d) {
    la_backend *be = d->e->be;
    for (copy_op *c = d->copies, *n; c; c = n) {
        n = c->next;
        bool done = false;
        la_err err;
        bool ok = be->ops->kv_copy_poll(be, c->ticket, true, &done, &err) == LA_OK && done;
        copy_done(d, c, ok);
        free(c);
    }
    d->copies = NULL;
    d->n_copies = 0;
}

void la_doc_store_destroy(la_doc_store *d) {
    if (!d) return;
    if (d->store && d->n_pending) la_doc_store_flush(d); /* write-throughs still waiting */
    if (d->e->pool) la_kv_pool_set_evict_hook(d->e->pool, NULL, NULL);
    wait_copies(d);
    for (la_doc_job *j = d->e->jobs_head; j; j = j->next)
        if (j->rec) {
            la_kv_store_release(d->store, j->rec);
            j->rec = NULL;
        }
    la_kv_store_destroy(d->store);
    for (int32_t i = 0; i < d->n_docs; i++) {
        free(d->docs[i].live ? d->docs[i].blocks : NULL);
        free(d->docs[i].live ? d->docs[i].tokens : NULL);
    }
    free(d->docs);
    free(d->members);
    free(d->block_head);
    la_hmap_fini(&d->resident);
    for (int32_t i = 0; i < d->n_infos; i++) {
        free(d->infos[i].hashes);
        free(d->infos[i].tokens);
    }
    free(d->infos);
    la_hmap_fini(&d->info);
    free(d->pending);
    free(d);
}

/* ============================================================ jobs ================== */

static la_kv_format format_of(la_method m) {
    return m == LA_METHOD_MEPIC ? LA_KV_FORMAT_UNROTATED : LA_KV_FORMAT_ROTATED_LOCAL;
}

/* ============================================================ read or compute ======= */

/* kv_read AUTO: whether j's document, which tier t holds, is read (else computed). The
 * host tier is always read. */
static bool read_or_compute(la_doc_store *d, const la_doc_job *j, la_kv_tier_id t) {
    if (d->e->opts.kv_read == LA_KV_READ_ALWAYS || t == LA_KV_TIER_HOST || t >= LA_KV_TIER_COUNT) return true;
    la_kv_store_stats st;
    la_kv_store_get_stats(d->store, &st);
    double bytes_in_flight = 0, tokens_pending = 0;
    for (const la_doc_job *o = d->e->jobs_head; o; o = o->next) {
        if (o == j) continue;
        if (o->load == LA_JOB_LOADING) bytes_in_flight += (double)o->doc.n_blocks * (double)d->block_bytes;
        else if (o->load == LA_JOB_COMPUTE) tokens_pending += o->doc.n_tokens - o->from - o->n_done;
    }
    bool read = la_read_choice_decide(&d->rc, t, la_read_choice_tier_rate(&d->rc, &st.tier[t], t),
                                      (double)j->doc.n_blocks * (double)d->block_bytes, bytes_in_flight,
                                      la_kv_store_io_threads(d->store), j->doc.n_tokens - j->from, tokens_pending);
    if (!read) la_kv_store_touch(d->store, t, j->key); /* used: as recently as a read would make it */
    return read;
}

bool la_doc_store_times_steps(const la_doc_store *d) {
    return d->store && d->e->opts.kv_read == LA_KV_READ_AUTO && d->rc.prefill_pinned <= 0 &&
           (la_kv_store_has_tier(d->store, LA_KV_TIER_DISK) || la_kv_store_has_tier(d->store, LA_KV_TIER_SHARED));
}

bool la_doc_store_prefill_unknown(const la_doc_store *d) { return la_read_choice_prefill_rate(&d->rc) <= 0; }

void la_doc_store_note_step(la_doc_store *d, int64_t n_rows, double ms) {
    la_step_fit_add(&d->rc.fit, (double)n_rows, ms);
}

void la_doc_store_job_start(la_doc_store *d, la_doc_job *j, la_request *r) {
    j->load = LA_JOB_COMPUTE;
    j->request_id = r->id;
    if (!la_method_caches_docs(j->method)) return;
    j->key = la_hash_record_key(&d->hc, j->doc.last_hash, j->doc.n_tokens);
    j->has_key = true;
    if (!d->store) return;
    if (!read_or_compute(d, j, la_kv_store_probe(d->store, j->key))) return;
    la_kv_record_header h = header_of(d, j->key, format_of(j->method), j->doc.n_tokens);
    la_kv_rec *rec = la_kv_store_find(d->store, &h);
    if (!rec) return;
    j->rec = rec;
    j->load = LA_JOB_LOADING;
    if (la_kv_rec_state_of(rec) == LA_KV_REC_READY && !import_start(d, j)) {
        la_kv_store_release(d->store, rec);
        j->rec = NULL;
        j->load = LA_JOB_COMPUTE;
    }
}

void la_doc_store_step(la_doc_store *d) {
    if (!d->store) return;
    la_kv_store_poll(d->store);
    retry_pending(d);
    for (la_doc_job *j = d->e->jobs_head; j; j = j->next) {
        if (j->load != LA_JOB_LOADING) continue;
        la_kv_rec_state st = la_kv_rec_state_of(j->rec);
        if (st == LA_KV_REC_LOADING) continue;
        if (st == LA_KV_REC_READY && import_start(d, j)) continue;
        la_kv_store_release(d->store, j->rec); /* missing, damaged or too slow: compute */
        j->rec = NULL;
        j->load = LA_JOB_COMPUTE;
    }
    la_backend *be = d->e->be;
    for (copy_op **at = &d->copies; *at;) {
        copy_op *c = *at;
        bool done = false;
        la_err err = {0};
        la_status s = be->ops->kv_copy_poll(be, c->ticket, false, &done, &err);
        if (s == LA_OK && !done) {
            at = &c->next;
            continue;
        }
        if (s != LA_OK) la_log("KV store: a copy between the pool and host memory failed: %s", err.msg);
        *at = c->next;
        d->n_copies--;
        copy_done(d, c, s == LA_OK);
        free(c);
    }
    la_kv_change ch[64];
    int32_t n;
    while ((n = la_kv_store_take_changes(d->store, ch, 64)) > 0)
        for (int32_t i = 0; i < n; i++) tier_event(d, &ch[i]);
}

void la_doc_store_job_end(la_doc_store *d, la_doc_job *j, bool ok) {
    if (j->rec) { /* dropped while loading */
        la_kv_store_release(d->store, j->rec);
        j->rec = NULL;
    }
    if (!ok || !j->has_key) return;
    pthread_mutex_lock(&d->e->mu);
    if (j->loaded) d->e->stats.documents_loaded++;
    else d->e->stats.documents_computed++;
    pthread_mutex_unlock(&d->e->mu);
    la_kv_format fmt = format_of(j->method);
    resident_add(d, j->key, fmt, j->doc.block_ids, j->doc.n_blocks, j->tokens, j->doc.n_tokens);
    if (d->events) {
        int32_t b0 = j->doc.n_reused, n = j->doc.n_blocks - b0, B = d->shape.block_size;
        uint64_t *hashes = malloc(sizeof(uint64_t) * (size_t)(n ? n : 1));
        if (hashes) {
            for (int32_t b = 0; b < n; b++) hashes[b] = block_hash64(d, j->doc.block_ids[b0 + b]);
            la_kv_event ev = {.kind = LA_KV_EVENT_STORED, .medium = d->pool_medium, .n_blocks = n,
                              .block_hashes = hashes, .has_parent = b0 > 0,
                              .parent_hash = b0 > 0 ? block_hash64(d, j->doc.block_ids[b0 - 1]) : 0,
                              .token_ids = j->tokens + b0 * B, .n_tokens = j->doc.n_tokens - b0 * B,
                              .block_size = B, .is_document = true, .doc_key_lo = j->key.lo,
                              .doc_key_hi = j->key.hi, .doc_block0 = b0, .doc_n_tokens = j->doc.n_tokens};
            emit(d, &ev);
            free(hashes);
        }
    }
    if (!j->loaded && d->store && la_kv_store_wants(d->store, j->key, LA_KV_PUT_COMPUTED)) {
        int64_t i;
        if (la_hmap_get(&d->resident, j->key, &i)) export_computed(d, (int32_t)i);
    }
}

void la_doc_store_register_tail(la_doc_store *d, la_request *r) {
    int32_t b0 = r->plan.n_tail_registered;
    la_plan_register_tail(&r->plan, d->e->pool, r->tail, r->n_computed);
    int32_t b1 = r->plan.n_tail_registered;
    if (!d->events || b1 <= b0) return;
    int32_t B = d->shape.block_size, n = b1 - b0;
    uint64_t *hashes = malloc(sizeof(uint64_t) * (size_t)n);
    if (!hashes) return;
    for (int32_t b = 0; b < n; b++) hashes[b] = block_hash64(d, r->plan.tail_blocks[b0 + b]);
    la_kv_event ev = {.kind = LA_KV_EVENT_STORED, .medium = d->pool_medium, .n_blocks = n, .block_hashes = hashes,
                      .has_parent = b0 > 0, .parent_hash = b0 > 0 ? block_hash64(d, r->plan.tail_blocks[b0 - 1]) : 0,
                      .token_ids = r->tail + b0 * B, .n_tokens = n * B, .block_size = B};
    emit(d, &ev);
    free(hashes);
}

bool la_doc_store_busy(const la_doc_store *d) {
    return d->n_copies > 0 || d->n_pending > 0 || la_kv_store_busy(d->store) || la_kv_store_waiting(d->store);
}

void la_doc_store_step_end(la_doc_store *d) {
    (void)d; /* events are handed over as they happen; the server batches them per step */
}

/* ============================================================ introspection ========= */

int32_t la_doc_store_where(la_doc_store *d, la_method m, const char *salt, const int32_t *tokens, int32_t n,
                           uint64_t *hashes, la_hash128 *key_out) {
    if (!la_method_caches_docs(m) || n < 1) return 0;
    int32_t B = d->shape.block_size, nb = (n + B - 1) / B;
    la_hash128 *h = malloc(sizeof *h * (size_t)nb);
    if (!h) return 0;
    la_hash128 seed = la_hash_doc_seed(&d->hc, format_of(m), salt);
    la_hash_chain(&d->hc, seed, tokens, n, B, 1, h);
    bool in_pool = true;
    for (int32_t b = 0; b < nb && in_pool; b++) in_pool = la_kv_pool_contains(d->e->pool, h[b]);
    la_hash128 key = la_hash_record_key(&d->hc, h[nb - 1], n);
    for (int32_t b = 0; hashes && b < nb; b++) hashes[b] = h[b].lo;
    if (key_out) *key_out = key;
    free(h);
    if (in_pool) return 1;
    switch (la_kv_store_probe(d->store, key)) {
    case LA_KV_TIER_HOST: return 2;
    case LA_KV_TIER_DISK: return 3;
    case LA_KV_TIER_SHARED: return 4;
    default: return 0;
    }
}

void la_doc_store_flush(la_doc_store *d) {
    for (;;) { /* until no waiting write-through can start: the writes free host memory for them */
        wait_copies(d);
        la_kv_store_flush(d->store);
        int32_t waiting = d->n_pending;
        la_doc_store_step(d); /* the changes the writes made; starts waiting write-throughs */
        /* a copy the step started may already have finished and queued its write: go round
         * again while anything moved; stop when waiting write-throughs cannot start at all */
        if (d->n_copies > 0 || la_kv_store_busy(d->store)) continue;
        if (d->n_pending == 0 || d->n_pending == waiting) break;
    }
}

void la_doc_store_get_stats(la_doc_store *d, la_engine_store_stats *out) {
    memset(out, 0, sizeof *out);
    out->copy_in_s = d->extra.copy_in_s;
    out->copy_out_s = d->extra.copy_out_s;
    out->copy_in_bytes = d->extra.copy_in_bytes;
    out->copy_out_bytes = d->extra.copy_out_bytes;
    if (!d->store) return;
    la_kv_store_stats st;
    la_kv_store_get_stats(d->store, &st);
    for (int t = 0; t < LA_KV_TIER_COUNT; t++) {
        const la_kv_tier_stats *a = &st.tier[t];
        out->tier[t] = (la_engine_tier_stats){la_kv_store_has_tier(d->store, (la_kv_tier_id)t), a->hits, a->misses,
                                              a->bytes_read, a->bytes_written, a->read_s, a->write_s, a->writes,
                                              a->write_failures, a->evictions, a->errors, a->records, a->bytes,
                                              a->down};
    }
    out->rejected = st.rejected_total;
    for (int i = 0; i < LA_KV_REJECT_COUNT && i < 16; i++) out->rejected_by_reason[i] = st.rejected[i];
    out->timeouts = st.timeouts;
    out->writebacks = st.writebacks;
    out->spills = st.spills;
    out->puts_dropped = st.puts_dropped;
    out->promotions = st.promotions;
    out->lookups_dropped = st.lookups_dropped;
    for (int t = 0; t < LA_KV_TIER_COUNT; t++) {
        out->reads_skipped[t] = d->rc.reads_skipped[t];
        out->read_bytes_per_s[t] = la_read_choice_tier_rate(&d->rc, &st.tier[t], (la_kv_tier_id)t);
    }
    out->prefill_tokens_per_s = la_read_choice_prefill_rate(&d->rc);
}
