#include "kv/block_pool.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "kv/block_hash.h"

/* Per-block record. LRU and free lists are intrusive doubly linked lists of block ids. */
typedef struct blk {
    int32_t ref_count;
    int32_t prev, next;    /* list links (-1 = none) */
    bool indexed;
    bool on_lru;
    bool ready;            /* content computed */
    la_hash128 hash;       /* valid when indexed */
} blk;

/* Open-addressing hash table slot: block id or EMPTY / TOMBSTONE. */
#define SLOT_EMPTY (-1)
#define SLOT_TOMB (-2)

struct la_kv_pool {
    int32_t n_blocks, block_size;
    blk *blocks;
    int32_t free_head;              /* singly used via next */
    int64_t n_free;
    int32_t lru_head, lru_tail;     /* head = least recently used */
    int64_t n_cached;
    int32_t *table;                 /* [table_cap] block ids */
    int64_t table_cap;              /* power of two >= 2 * n_blocks */
    int64_t n_tombs;                /* removed entries still occupying probe chains */
    la_kv_pool_stats st;
    la_hash_ctx *hash_ctx;          /* NULL: per-process secret */
    la_kv_evict_fn on_evict;
    void *evict_user;
};

/* ---- hash table ----------------------------------------------------------------------- */

static int64_t probe_start(const la_kv_pool *p, la_hash128 h) {
    return (int64_t)(h.lo & (uint64_t)(p->table_cap - 1));
}

static int64_t table_find(const la_kv_pool *p, la_hash128 h) {
    for (int64_t i = probe_start(p, h), n = 0; n < p->table_cap; n++, i = (i + 1) & (p->table_cap - 1)) {
        int32_t id = p->table[i];
        if (id == SLOT_EMPTY) return -1;
        if (id >= 0 && la_hash128_eq(p->blocks[id].hash, h)) return i;
    }
    return -1;
}

static void table_insert(la_kv_pool *p, int32_t id) {
    for (int64_t i = probe_start(p, p->blocks[id].hash);; i = (i + 1) & (p->table_cap - 1))
        if (p->table[i] < 0) {
            p->table[i] = id;
            return;
        }
}

/* Rebuild the table without tombstones (they lengthen probe chains). */
static void table_rehash(la_kv_pool *p) {
    for (int64_t i = 0; i < p->table_cap; i++) p->table[i] = SLOT_EMPTY;
    for (int32_t id = 0; id < p->n_blocks; id++)
        if (p->blocks[id].indexed) table_insert(p, id);
    p->n_tombs = 0;
}

static void table_remove(la_kv_pool *p, int32_t id) {
    int64_t i = table_find(p, p->blocks[id].hash);
    LA_ASSERT(i >= 0 && p->table[i] == id);
    p->table[i] = SLOT_TOMB;
    if (++p->n_tombs > p->table_cap / 4) {
        p->blocks[id].indexed = false;
        table_rehash(p);
    }
}

/* ---- lists ------------------------------------------------------------------------------ */

static void lru_push_back(la_kv_pool *p, int32_t id) {
    blk *b = &p->blocks[id];
    b->prev = p->lru_tail;
    b->next = -1;
    if (p->lru_tail >= 0) p->blocks[p->lru_tail].next = id;
    else p->lru_head = id;
    p->lru_tail = id;
    b->on_lru = true;
    p->n_cached++;
}

static void lru_remove(la_kv_pool *p, int32_t id) {
    blk *b = &p->blocks[id];
    if (b->prev >= 0) p->blocks[b->prev].next = b->next;
    else p->lru_head = b->next;
    if (b->next >= 0) p->blocks[b->next].prev = b->prev;
    else p->lru_tail = b->prev;
    b->prev = b->next = -1;
    b->on_lru = false;
    p->n_cached--;
}

static void free_push(la_kv_pool *p, int32_t id) {
    p->blocks[id].next = p->free_head;
    p->blocks[id].prev = -1;
    p->free_head = id;
    p->n_free++;
}

/* ---- create ----------------------------------------------------------------------------- */

la_status la_kv_pool_create(int64_t n_blocks, int32_t block_size, la_kv_pool **out, la_err *err) {
    if (n_blocks <= 0 || n_blocks >= INT32_MAX / 4)
        return la_err_set(err, LA_ERR_INVALID_ARG, "KV pool: n_blocks=%lld must be in [1, %d)",
                          (long long)n_blocks, INT32_MAX / 4);
    if (block_size <= 0 || block_size > 4096)
        return la_err_set(err, LA_ERR_INVALID_ARG, "KV pool: block_size=%d must be in [1, 4096]",
                          block_size);
    la_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "KV pool: out of memory");
    p->n_blocks = (int32_t)n_blocks;
    p->block_size = block_size;
    p->table_cap = 16;
    while (p->table_cap < 2 * n_blocks) p->table_cap *= 2;
    p->blocks = calloc((size_t)n_blocks, sizeof(blk));
    p->table = malloc(sizeof(int32_t) * (size_t)p->table_cap);
    if (!p->blocks || !p->table) {
        la_kv_pool_destroy(p);
        return la_err_set(err, LA_ERR_NO_MEMORY, "KV pool of %lld blocks: out of memory",
                          (long long)n_blocks);
    }
    for (int64_t i = 0; i < p->table_cap; i++) p->table[i] = SLOT_EMPTY;
    p->free_head = -1;
    p->lru_head = p->lru_tail = -1;
    for (int32_t i = p->n_blocks - 1; i >= 0; i--) free_push(p, i); /* block 0 first out */
    p->st.n_blocks = n_blocks;
    *out = p;
    return LA_OK;
}

void la_kv_pool_destroy(la_kv_pool *p) {
    if (!p) return;
    free(p->blocks);
    free(p->table);
    free(p->hash_ctx);
    free(p);
}

int32_t la_kv_pool_block_size(const la_kv_pool *p) { return p->block_size; }

la_status la_kv_pool_set_hash_ctx(la_kv_pool *p, const la_hash_ctx *ctx, la_err *err) {
    la_hash_ctx *c = NULL;
    if (ctx) {
        if (!(c = malloc(sizeof *c))) return la_err_set(err, LA_ERR_NO_MEMORY, "KV pool: out of memory");
        *c = *ctx;
    }
    free(p->hash_ctx);
    p->hash_ctx = c;
    return LA_OK;
}

const la_hash_ctx *la_kv_pool_hash_ctx(const la_kv_pool *p) { return p->hash_ctx; }

void la_kv_pool_set_evict_hook(la_kv_pool *p, la_kv_evict_fn fn, void *user) {
    p->on_evict = fn;
    p->evict_user = user;
}

bool la_kv_pool_block_hash(const la_kv_pool *p, int32_t block_id, la_hash128 *hash) {
    if (block_id < 0 || block_id >= p->n_blocks || !p->blocks[block_id].indexed) return false;
    *hash = p->blocks[block_id].hash;
    return true;
}

/* ---- operations, in the order a request uses them ----------------------------------------- */

int32_t la_kv_pool_lookup_pin(la_kv_pool *p, la_hash128 h) {
    int64_t i = table_find(p, h);
    if (i < 0) {
        p->st.misses++;
        return -1;
    }
    int32_t id = p->table[i];
    if (p->blocks[id].on_lru) lru_remove(p, id);
    p->blocks[id].ref_count++;
    p->st.hits++;
    return id;
}

bool la_kv_pool_contains(const la_kv_pool *p, la_hash128 h) { return table_find(p, h) >= 0; }

int64_t la_kv_pool_available(const la_kv_pool *p) { return p->n_free + p->n_cached; }

la_status la_kv_pool_alloc(la_kv_pool *p, int32_t *block_id, la_err *err) {
    int32_t id;
    if (p->free_head >= 0) {
        id = p->free_head;
        p->free_head = p->blocks[id].next;
        p->n_free--;
    } else if (p->lru_head >= 0) {
        id = p->lru_head; /* least recently released */
        if (p->on_evict) p->on_evict(p->evict_user, id, p->blocks[id].hash);
        lru_remove(p, id);
        table_remove(p, id);
        p->blocks[id].indexed = false;
        p->st.evictions++;
    } else {
        return la_err_set(err, LA_ERR_NO_SPACE,
                          "KV cache full: all %d blocks are in use by running requests",
                          p->n_blocks);
    }
    blk *b = &p->blocks[id];
    b->ref_count = 1;
    b->prev = b->next = -1;
    b->ready = false;
    *block_id = id;
    return LA_OK;
}

void la_kv_pool_ref(la_kv_pool *p, int32_t block_id) {
    LA_ASSERT(block_id >= 0 && block_id < p->n_blocks && p->blocks[block_id].ref_count > 0);
    p->blocks[block_id].ref_count++;
}

void la_kv_pool_unpin(la_kv_pool *p, int32_t block_id) {
    LA_ASSERT(block_id >= 0 && block_id < p->n_blocks);
    blk *b = &p->blocks[block_id];
    LA_ASSERT(b->ref_count > 0);
    if (--b->ref_count > 0) return;
    if (b->indexed) lru_push_back(p, block_id);
    else free_push(p, block_id);
}

int32_t la_kv_pool_register(la_kv_pool *p, int32_t block_id, la_hash128 h) {
    LA_ASSERT(block_id >= 0 && block_id < p->n_blocks && p->blocks[block_id].ref_count > 0);
    int64_t i = table_find(p, h);
    if (i >= 0) return p->table[i];
    blk *b = &p->blocks[block_id];
    if (b->indexed) return block_id; /* already indexed under its own hash */
    b->hash = h;
    b->indexed = true;
    table_insert(p, block_id);
    return block_id;
}

void la_kv_pool_mark_ready(la_kv_pool *p, int32_t block_id) { p->blocks[block_id].ready = true; }

bool la_kv_pool_is_ready(const la_kv_pool *p, int32_t block_id) { return p->blocks[block_id].ready; }

void la_kv_pool_unregister(la_kv_pool *p, int32_t block_id) {
    blk *b = &p->blocks[block_id];
    if (!b->indexed) return;
    LA_ASSERT(b->ref_count > 0); /* only pinned blocks are unregistered */
    table_remove(p, block_id);
    b->indexed = false;
}

int64_t la_kv_pool_drop_cached(la_kv_pool *p) {
    int64_t n = 0;
    while (p->lru_head >= 0) {
        int32_t id = p->lru_head;
        if (p->on_evict) p->on_evict(p->evict_user, id, p->blocks[id].hash);
        lru_remove(p, id);
        table_remove(p, id);
        p->blocks[id].indexed = false;
        p->blocks[id].ready = false;
        free_push(p, id);
        n++;
    }
    return n;
}

int32_t la_kv_pool_ref_count(const la_kv_pool *p, int32_t block_id) {
    return p->blocks[block_id].ref_count;
}

bool la_kv_pool_is_indexed(const la_kv_pool *p, int32_t block_id) {
    return p->blocks[block_id].indexed;
}

la_kv_pool_stats la_kv_pool_get_stats(const la_kv_pool *p) {
    la_kv_pool_stats s = p->st;
    s.n_free = p->n_free;
    s.n_cached = p->n_cached;
    s.n_pinned = p->n_blocks - p->n_free - p->n_cached;
    return s;
}

la_status la_kv_pool_check(const la_kv_pool *p, int64_t expected_refs, la_err *err) {
    int64_t refs = 0, pinned = 0, n_lru = 0, n_free = 0, n_indexed = 0;
    for (int32_t id = p->lru_head; id >= 0; id = p->blocks[id].next) {
        const blk *b = &p->blocks[id];
        if (b->ref_count != 0 || !b->indexed || !b->on_lru)
            return la_err_set(err, LA_ERR_INTERNAL, "KV pool: block %d on LRU list with ref %d", id,
                              b->ref_count);
        if (++n_lru > p->n_blocks) return la_err_set(err, LA_ERR_INTERNAL, "KV pool: LRU list cycles");
    }
    for (int32_t id = p->free_head; id >= 0; id = p->blocks[id].next) {
        const blk *b = &p->blocks[id];
        if (b->ref_count != 0 || b->indexed || b->on_lru)
            return la_err_set(err, LA_ERR_INTERNAL, "KV pool: free block %d is in use", id);
        if (++n_free > p->n_blocks) return la_err_set(err, LA_ERR_INTERNAL, "KV pool: free list cycles");
    }
    for (int32_t id = 0; id < p->n_blocks; id++) {
        const blk *b = &p->blocks[id];
        if (b->ref_count < 0) return la_err_set(err, LA_ERR_INTERNAL, "KV pool: block %d ref < 0", id);
        refs += b->ref_count;
        if (b->ref_count > 0) pinned++;
        if (b->indexed) {
            n_indexed++;
            int64_t i = table_find(p, b->hash);
            if (i < 0 || p->table[i] != id)
                return la_err_set(err, LA_ERR_INTERNAL, "KV pool: block %d indexed but not found", id);
        }
    }
    int64_t in_table = 0;
    for (int64_t i = 0; i < p->table_cap; i++) in_table += p->table[i] >= 0;
    if (in_table != n_indexed)
        return la_err_set(err, LA_ERR_INTERNAL, "KV pool: %lld table entries for %lld indexed blocks",
                          (long long)in_table, (long long)n_indexed);
    if (n_lru != p->n_cached || n_free != p->n_free || n_lru + n_free + pinned != p->n_blocks)
        return la_err_set(err, LA_ERR_INTERNAL,
                          "KV pool: free %lld + cached %lld + pinned %lld != %d blocks",
                          (long long)n_free, (long long)n_lru, (long long)pinned, p->n_blocks);
    if (expected_refs >= 0 && refs != expected_refs)
        return la_err_set(err, LA_ERR_INTERNAL, "KV pool: %lld pins held, %lld expected (leak)",
                          (long long)refs, (long long)expected_refs);
    return LA_OK;
}
