#include "kv/store/host_arena.h"

#include <stdlib.h>

#include "base/err.h"

struct la_host_arena {
    size_t block_bytes;
    int64_t max_blocks, chunk_blocks, n_chunks_cap, n_chunks;
    uint8_t **chunks;    /* [n_chunks_cap], the first n_chunks allocated */
    int32_t *next_free;  /* [max_blocks] free-list links (-1 = end) */
    int32_t free_head;   /* -1: no freed block; then blocks come from the next fresh index */
    int64_t n_fresh;     /* blocks [0, n_fresh) have been handed out at least once */
    int64_t in_use;
    la_host_allocator al;
    bool async;          /* chunks come from la_host_arena_add_chunk, never from alloc */
};

static void *default_alloc(void *user, size_t bytes) {
    (void)user;
    void *p = NULL;
    return posix_memalign(&p, 64, bytes) == 0 ? p : NULL;
}

static void default_free(void *user, void *p) {
    (void)user;
    free(p);
}

la_status la_host_arena_create(size_t block_bytes, int64_t max_blocks, int64_t chunk_blocks,
                               const la_host_allocator *alloc, la_host_arena **out, la_err *err) {
    if (block_bytes == 0 || max_blocks <= 0 || max_blocks >= INT32_MAX || chunk_blocks <= 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "host KV arena: %zu-byte blocks x %lld (chunks of %lld)",
                          block_bytes, (long long)max_blocks, (long long)chunk_blocks);
    la_host_arena *a = calloc(1, sizeof *a);
    if (!a) return la_err_set(err, LA_ERR_NO_MEMORY, "host KV arena: out of memory");
    a->block_bytes = block_bytes;
    a->max_blocks = max_blocks;
    a->chunk_blocks = chunk_blocks < max_blocks ? chunk_blocks : max_blocks;
    a->n_chunks_cap = (max_blocks + a->chunk_blocks - 1) / a->chunk_blocks;
    a->chunks = calloc((size_t)a->n_chunks_cap, sizeof *a->chunks);
    a->next_free = malloc(sizeof(int32_t) * (size_t)max_blocks);
    a->free_head = -1;
    a->al = alloc && alloc->alloc ? *alloc : (la_host_allocator){default_alloc, default_free, NULL};
    if (!a->chunks || !a->next_free) {
        la_host_arena_destroy(a);
        return la_err_set(err, LA_ERR_NO_MEMORY, "host KV arena: out of memory");
    }
    *out = a;
    return LA_OK;
}

void la_host_arena_destroy(la_host_arena *a) {
    if (!a) return;
    for (int64_t c = 0; a->chunks && c < a->n_chunks; c++) a->al.free(a->al.user, a->chunks[c]);
    free(a->chunks);
    free(a->next_free);
    free(a);
}

int32_t la_host_arena_alloc(la_host_arena *a) {
    int32_t b;
    if (a->free_head >= 0) {
        b = a->free_head;
        a->free_head = a->next_free[b];
    } else {
        if (a->n_fresh == a->max_blocks) return -1;
        if (a->n_fresh == a->n_chunks * a->chunk_blocks) { /* the next chunk */
            if (a->async) return -1; /* not here yet: la_host_arena_add_chunk brings it */
            int64_t left = a->max_blocks - a->n_chunks * a->chunk_blocks;
            int64_t n = left < a->chunk_blocks ? left : a->chunk_blocks;
            uint8_t *p = a->al.alloc(a->al.user, (size_t)n * a->block_bytes);
            if (!p) return -1;
            a->chunks[a->n_chunks++] = p;
        }
        b = (int32_t)a->n_fresh++;
    }
    a->in_use++;
    return b;
}

void la_host_arena_free(la_host_arena *a, int32_t block) {
    LA_ASSERT(block >= 0 && block < a->n_fresh && a->in_use > 0);
    a->next_free[block] = a->free_head;
    a->free_head = block;
    a->in_use--;
}

void *la_host_arena_ptr(const la_host_arena *a, int32_t block) {
    return a->chunks[block / a->chunk_blocks] + (size_t)(block % a->chunk_blocks) * a->block_bytes;
}

size_t la_host_arena_block_bytes(const la_host_arena *a) { return a->block_bytes; }
int64_t la_host_arena_capacity(const la_host_arena *a) { return a->max_blocks; }
int64_t la_host_arena_in_use(const la_host_arena *a) { return a->in_use; }
int64_t la_host_arena_allocated_bytes(const la_host_arena *a) {
    int64_t n = 0;
    for (int64_t c = 0; c < a->n_chunks; c++) {
        int64_t left = a->max_blocks - c * a->chunk_blocks;
        n += (left < a->chunk_blocks ? left : a->chunk_blocks) * (int64_t)a->block_bytes;
    }
    return n;
}

void la_host_arena_set_async(la_host_arena *a, bool on) { a->async = on; }

int64_t la_host_arena_chunk_count(const la_host_arena *a) { return a->n_chunks_cap; }

size_t la_host_arena_chunk_bytes(const la_host_arena *a, int64_t i) {
    if (i < 0 || i >= a->n_chunks_cap) return 0;
    int64_t left = a->max_blocks - i * a->chunk_blocks;
    return (size_t)(left < a->chunk_blocks ? left : a->chunk_blocks) * a->block_bytes;
}

int64_t la_host_arena_chunks(const la_host_arena *a) { return a->n_chunks; }
int64_t la_host_arena_chunk_blocks(const la_host_arena *a) { return a->chunk_blocks; }

void *la_host_arena_chunk_alloc(const la_host_arena *a, size_t bytes) { return a->al.alloc(a->al.user, bytes); }

void la_host_arena_add_chunk(la_host_arena *a, void *p) {
    if (a->n_chunks == a->n_chunks_cap) {
        a->al.free(a->al.user, p);
        return;
    }
    a->chunks[a->n_chunks++] = p;
}

void la_host_arena_chunk_free(const la_host_arena *a, void *p) { a->al.free(a->al.user, p); }
