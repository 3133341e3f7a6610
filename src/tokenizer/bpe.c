#include "tokenizer/bpe.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- strings by id ---------------------------------------------------------------------- */

bool la_tok_strtab_init(la_tok_strtab *t, int32_t n) {
    memset(t, 0, sizeof *t);
    t->off = malloc(((size_t)n + 1) * sizeof *t->off);
    t->len = malloc(((size_t)n + 1) * sizeof *t->len);
    if (!t->off || !t->len) {
        la_tok_strtab_fini(t);
        return false;
    }
    for (int32_t i = 0; i < n; i++) {
        t->off[i] = 0;
        t->len[i] = LA_TOK_NO_STR;
    }
    t->n = n;
    return true;
}

bool la_tok_strtab_set(la_tok_strtab *t, int32_t id, const char *s, size_t n) {
    if (id < 0 || id >= t->n || n >= LA_TOK_NO_STR || t->blob.len + n >= UINT32_MAX) return false;
    size_t off = t->blob.len;
    if (!la_tok_buf_append(&t->blob, s, n) || !la_tok_buf_append(&t->blob, "", 1)) return false;
    t->off[id] = (uint32_t)off;
    t->len[id] = (uint32_t)n;
    return true;
}

void la_tok_strtab_fini(la_tok_strtab *t) {
    la_tok_buf_free(&t->blob);
    free(t->off);
    free(t->len);
    t->off = t->len = NULL;
    t->n = 0;
}

/* ---- string -> id ------------------------------------------------------------------------ */

static uint64_t str_hash(const char *s, size_t n) { return XXH3_64bits(s, n); }

static uint64_t table_size_for(size_t n) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n + 16) cap *= 2;
    return cap;
}

bool la_tok_strmap_build(la_tok_strmap *m, const la_tok_strtab *keys) {
    size_t count = 0;
    for (int32_t id = 0; id < keys->n; id++) count += keys->len[id] != LA_TOK_NO_STR;
    uint64_t cap = table_size_for(count);
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return false;
    m->mask = cap - 1;
    m->keys = keys;
    for (int32_t id = 0; id < keys->n; id++) {
        if (keys->len[id] == LA_TOK_NO_STR) continue;
        size_t n;
        const char *s = la_tok_strtab_get(keys, id, &n);
        uint64_t h = str_hash(s, n), tag = h >> 32 << 32;
        for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
            uint64_t slot = m->slots[i];
            if (!slot) {
                m->slots[i] = tag | (uint64_t)(id + 1);
                break;
            }
            int32_t other = (int32_t)(uint32_t)slot - 1;
            size_t on;
            const char *os = la_tok_strtab_get(keys, other, &on);
            if ((slot >> 32 << 32) == tag && on == n && memcmp(os, s, n) == 0) {
                m->slots[i] = tag | (uint64_t)(id + 1);
                break;
            }
        }
    }
    return true;
}

int32_t la_tok_strmap_get(const la_tok_strmap *m, const char *s, size_t n) {
    if (!m->slots) return -1;
    uint64_t h = str_hash(s, n), tag = h >> 32 << 32;
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint64_t slot = m->slots[i];
        if (!slot) return -1;
        if ((slot >> 32 << 32) != tag) continue;
        int32_t id = (int32_t)(uint32_t)slot - 1;
        size_t kn;
        const char *k = la_tok_strtab_get(m->keys, id, &kn);
        if (kn == n && memcmp(k, s, n) == 0) return id;
    }
}

void la_tok_strmap_fini(la_tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* ---- (id, id) -> merge ------------------------------------------------------------------- */

static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }
static uint64_t pair_hash(uint64_t k) { return (k * 0x9E3779B97F4A7C15ull) ^ (k >> 29); }

bool la_tok_pairmap_init(la_tok_pairmap *m, size_t expected) {
    uint64_t cap = table_size_for(expected);
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return false;
    for (uint64_t i = 0; i < cap; i++) m->slots[i].new_id = -1;
    m->mask = cap - 1;
    m->n = 0;
    return true;
}

static bool pairmap_grow(la_tok_pairmap *m) {
    la_tok_pairmap bigger;
    if (!la_tok_pairmap_init(&bigger, (size_t)(m->mask + 1))) return false;
    for (uint64_t i = 0; i <= m->mask; i++) {
        const la_tok_merge *e = &m->slots[i];
        if (e->new_id < 0) continue;
        la_tok_pairmap_put(&bigger, (int32_t)(e->key >> 32), (int32_t)(uint32_t)e->key, e->rank,
                           e->new_id);
    }
    free(m->slots);
    *m = bigger;
    return true;
}

bool la_tok_pairmap_put(la_tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    if (2 * (m->n + 1) > m->mask + 1 && !pairmap_grow(m)) return false;
    uint64_t k = pair_key(a, b);
    for (uint64_t i = pair_hash(k) & m->mask;; i = (i + 1) & m->mask) {
        la_tok_merge *e = &m->slots[i];
        if (e->new_id < 0) {
            m->n++;
        } else if (e->key != k) {
            continue;
        }
        e->key = k;
        e->rank = rank;
        e->new_id = new_id;
        return true;
    }
}

const la_tok_merge *la_tok_pairmap_get(const la_tok_pairmap *m, int32_t a, int32_t b) {
    uint64_t k = pair_key(a, b);
    for (uint64_t i = pair_hash(k) & m->mask;; i = (i + 1) & m->mask) {
        const la_tok_merge *e = &m->slots[i];
        if (e->new_id < 0) return NULL;
        if (e->key == k) return e;
    }
}

void la_tok_pairmap_fini(la_tok_pairmap *m) {
    free(m->slots);
    m->slots = NULL;
}

/* ---- the cache of merged words ------------------------------------------------------- */

/* Words of at most LA_TOK_CACHE_MAX_KEY bytes that needed merging are remembered with
 * their ids. Each shard is a 4-way set-associative table behind a mutex, so threads that
 * encode at once rarely wait for each other; a full set evicts one entry chosen by the
 * hash. Hits copy the ids out under the lock. */
#define LA_TOK_CACHE_SHARDS 64
#define LA_TOK_CACHE_SLOTS 512 /* per shard, power of two */
#define LA_TOK_CACHE_WAYS 4
#define LA_TOK_CACHE_MAX_KEY 256

typedef struct cache_entry {
    uint64_t hash;
    uint32_t key_len, n_ids;
    int32_t *data; /* n_ids ids, then key_len key bytes; NULL = empty */
} cache_entry;

typedef struct cache_shard {
    pthread_mutex_t lock;
    cache_entry slots[LA_TOK_CACHE_SLOTS];
} cache_shard;

struct la_tok_cache {
    cache_shard shards[LA_TOK_CACHE_SHARDS];
};

la_tok_cache *la_tok_cache_create(void) {
    la_tok_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    for (int i = 0; i < LA_TOK_CACHE_SHARDS; i++) pthread_mutex_init(&c->shards[i].lock, NULL);
    return c;
}

void la_tok_cache_destroy(la_tok_cache *c) {
    if (!c) return;
    for (int i = 0; i < LA_TOK_CACHE_SHARDS; i++) {
        for (int j = 0; j < LA_TOK_CACHE_SLOTS; j++) free(c->shards[i].slots[j].data);
        pthread_mutex_destroy(&c->shards[i].lock);
    }
    free(c);
}

static cache_shard *cache_shard_of(la_tok_cache *c, uint64_t h, size_t *set) {
    *set = (h >> 8) & (LA_TOK_CACHE_SLOTS - 1) & ~(size_t)(LA_TOK_CACHE_WAYS - 1);
    return &c->shards[h & (LA_TOK_CACHE_SHARDS - 1)];
}

/* 1 = hit (ids appended), 0 = miss, -1 = out of memory. */
static int cache_get(la_tok_cache *c, uint64_t h, const char *w, size_t n, la_tok_ids *out) {
    size_t set;
    cache_shard *sh = cache_shard_of(c, h, &set);
    int found = 0;
    pthread_mutex_lock(&sh->lock);
    for (size_t k = 0; k < LA_TOK_CACHE_WAYS; k++) {
        const cache_entry *e = &sh->slots[set + k];
        if (e->data && e->hash == h && e->key_len == n &&
            memcmp((const char *)(e->data + e->n_ids), w, n) == 0) {
            found = la_tok_ids_append(out, e->data, e->n_ids) ? 1 : -1;
            break;
        }
    }
    pthread_mutex_unlock(&sh->lock);
    return found;
}

static void cache_put(la_tok_cache *c, uint64_t h, const char *w, size_t n, const int32_t *ids,
                      size_t n_ids) {
    int32_t *data = malloc(n_ids * sizeof *ids + n);
    if (!data) return; /* caching is best effort */
    memcpy(data, ids, n_ids * sizeof *ids);
    memcpy((char *)(data + n_ids), w, n);
    size_t set;
    cache_shard *sh = cache_shard_of(c, h, &set);
    pthread_mutex_lock(&sh->lock);
    size_t victim = set + ((h >> 40) & (LA_TOK_CACHE_WAYS - 1));
    for (size_t k = 0; k < LA_TOK_CACHE_WAYS; k++) {
        if (!sh->slots[set + k].data) {
            victim = set + k;
            break;
        }
    }
    cache_entry *e = &sh->slots[victim];
    free(e->data);
    e->hash = h;
    e->key_len = (uint32_t)n;
    e->n_ids = (uint32_t)n_ids;
    e->data = data;
    pthread_mutex_unlock(&sh->lock);
}

/* ---- merging one word ---------------------------------------------------------------- */

/* A symbol of the word being merged: a doubly linked list over an array, as HF's
 * Word/Symbol. len == 0 marks a symbol merged into its left neighbour. */
typedef struct symbol {
    int32_t id;
    int32_t prev, next; /* -1 at the ends */
    uint32_t len;       /* bytes of the word this symbol covers */
} symbol;

/* A candidate merge of symbols[pos] with its right neighbour. */
typedef struct heap_item {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
} heap_item;

/* HF's Merge ordering: the lowest rank first, then the lowest position. */
static bool item_before(heap_item a, heap_item b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

typedef struct heap {
    heap_item *v;
    size_t n, cap;
} heap;

static bool heap_push(heap *h, heap_item it) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        heap_item *v = realloc(h->v, cap * sizeof *v);
        if (!v) return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!item_before(it, h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = it;
    return true;
}

static heap_item heap_pop(heap *h) {
    heap_item top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && item_before(h->v[c + 1], h->v[c])) c++;
        if (!item_before(h->v[c], last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

typedef struct symbols {
    symbol *v;
    size_t n, cap;
} symbols;

static bool symbols_add(symbols *s, int32_t id, uint32_t len) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        symbol *v = realloc(s->v, cap * sizeof *v);
        if (!v) return false;
        s->v = v;
        s->cap = cap;
    }
    int32_t i = (int32_t)s->n;
    s->v[i] = (symbol){.id = id, .prev = i - 1, .next = i + 1, .len = len};
    s->n++;
    return true;
}

/* Word::merge_all without dropout (HF models/bpe/word.rs): pop the best candidate, skip it
 * if stale (its left symbol was merged away, is last, or the pair now yields another
 * token), else merge and push the new pairs with both neighbours. */
static bool merge_all(const la_tok_pairmap *merges, symbols *syms, heap *q) {
    symbol *s = syms->v;
    int32_t n = (int32_t)syms->n;
    q->n = 0;
    for (int32_t i = 0; i + 1 < n; i++) {
        const la_tok_merge *m = la_tok_pairmap_get(merges, s[i].id, s[i + 1].id);
        if (m && !heap_push(q, (heap_item){m->rank, i, m->new_id})) return false;
    }
    while (q->n) {
        heap_item top = heap_pop(q);
        symbol *cur = &s[top.pos];
        if (cur->len == 0 || cur->next < 0 || cur->next >= n) continue;
        int32_t next_pos = cur->next;
        symbol right = s[next_pos];
        const la_tok_merge *now = la_tok_pairmap_get(merges, cur->id, right.id);
        if (!now || now->new_id != top.new_id) continue;
        cur->id = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        s[next_pos].len = 0;
        if (right.next >= 0 && right.next < n) s[right.next].prev = top.pos;
        if (cur->prev >= 0) {
            const la_tok_merge *m = la_tok_pairmap_get(merges, s[cur->prev].id, cur->id);
            if (m && !heap_push(q, (heap_item){m->rank, cur->prev, m->new_id})) return false;
        }
        if (cur->next >= 0 && cur->next < n) {
            const la_tok_merge *m = la_tok_pairmap_get(merges, cur->id, s[cur->next].id);
            if (m && !heap_push(q, (heap_item){m->rank, top.pos, m->new_id})) return false;
        }
    }
    return true;
}

/* BPE::merge_word: one symbol per character (per byte in byte-level mode); a character
 * missing from the vocab becomes its <0xNN> byte tokens (byte_fallback, only if all
 * exist), else unk (consecutive unknowns fused when fuse_unk), else is dropped. */
static bool initial_symbols(const la_tok_bpe *m, const char *w, size_t n, symbols *syms) {
    syms->n = 0;
    int32_t unk_len = -1; /* pending unk symbol length, -1 = none */
    size_t i = 0;
    while (i < n) {
        size_t clen;
        int32_t id;
        if (m->byte_level) {
            clen = 1;
            id = m->raw_byte_ids[(uint8_t)w[i]];
        } else {
            uint32_t cp;
            clen = (size_t)la_utf8_decode((const uint8_t *)w + i, &cp);
            id = la_tok_strmap_get(&m->vocab, w + i, clen);
        }
        if (id >= 0) {
            if (unk_len >= 0 && !symbols_add(syms, m->unk_id, (uint32_t)unk_len)) return false;
            unk_len = -1;
            if (!symbols_add(syms, id, (uint32_t)clen)) return false;
            i += clen;
            continue;
        }
        if (m->byte_fallback) {
            /* the bytes of the character as HF sees it: in byte-level mode the
             * character is the ByteLevel image of one byte, i.e. 2 UTF-8 bytes or 1 */
            uint8_t bytes[4];
            size_t nb = 0;
            if (m->byte_level) {
                la_tok_buf tmp = {0};
                if (!la_tok_buf_append_cp(&tmp, la_byte_level_char((uint8_t)w[i]))) return false;
                nb = tmp.len;
                memcpy(bytes, tmp.data, nb);
                la_tok_buf_free(&tmp);
            } else {
                nb = clen;
                memcpy(bytes, w + i, nb);
            }
            bool all = true;
            for (size_t k = 0; k < nb; k++) all = all && m->byte_ids[bytes[k]] >= 0;
            if (all) {
                /* HF pushes byte tokens without flushing a pending unk first */
                for (size_t k = 0; k < nb; k++)
                    if (!symbols_add(syms, m->byte_ids[bytes[k]], 1)) return false;
                i += clen;
                continue;
            }
        }
        if (m->unk_id >= 0) {
            if (unk_len >= 0 && m->fuse_unk) {
                unk_len += (int32_t)clen;
            } else {
                if (unk_len >= 0 && !symbols_add(syms, m->unk_id, (uint32_t)unk_len)) return false;
                unk_len = (int32_t)clen;
            }
        }
        i += clen;
    }
    if (unk_len >= 0 && !symbols_add(syms, m->unk_id, (uint32_t)unk_len)) return false;
    return true;
}

bool la_tok_bpe_word(const la_tok_bpe *m, const char *w, size_t n, la_tok_bpe_scratch *sc,
                     la_tok_ids *out) {
    if (n == 0) return true;
    if (m->ignore_merges) {
        int32_t id = la_tok_strmap_get(m->byte_level ? &m->raw_vocab : &m->vocab, w, n);
        if (id >= 0) return la_tok_ids_push(out, id);
    }
    bool cacheable = m->cache && n <= LA_TOK_CACHE_MAX_KEY;
    uint64_t h = 0;
    if (cacheable) {
        h = str_hash(w, n);
        int r = cache_get(m->cache, h, w, n, out);
        if (r != 0) return r > 0;
    }
    symbols syms = {sc->symbols, 0, sc->symbols_cap};
    heap q = {sc->heap, 0, sc->heap_cap};
    bool ok = initial_symbols(m, w, n, &syms) && merge_all(&m->merges, &syms, &q);
    sc->symbols = syms.v;
    sc->symbols_cap = syms.cap;
    sc->heap = q.v;
    sc->heap_cap = q.cap;
    if (!ok) return false;
    size_t first = out->len;
    for (size_t i = 0; i < syms.n; i++)
        if (syms.v[i].len && !la_tok_ids_push(out, syms.v[i].id)) return false;
    if (cacheable) cache_put(m->cache, h, w, n, out->data + first, out->len - first);
    return true;
}

void la_tok_bpe_scratch_fini(la_tok_bpe_scratch *s) {
    free(s->symbols);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

bool la_tok_bpe_build_byte_level(la_tok_bpe *m) {
    if (!la_tok_strtab_init(&m->raw, m->tokens.n)) return false;
    la_tok_buf bytes = {0};
    for (int32_t id = 0; id < m->tokens.n; id++) {
        if (!la_tok_strtab_has(&m->tokens, id)) continue;
        size_t n;
        const uint8_t *s = (const uint8_t *)la_tok_strtab_get(&m->tokens, id, &n);
        bytes.len = 0;
        bool in_alphabet = true;
        for (size_t i = 0; i < n && in_alphabet;) {
            uint32_t cp;
            i += (size_t)la_utf8_decode(s + i, &cp);
            int b = la_byte_level_byte(cp);
            if (b < 0) {
                in_alphabet = false;
            } else {
                uint8_t byte = (uint8_t)b;
                if (!la_tok_buf_append(&bytes, &byte, 1)) goto oom;
            }
        }
        if (in_alphabet && n > 0 && !la_tok_strtab_set(&m->raw, id, bytes.data, bytes.len))
            goto oom;
    }
    la_tok_buf_free(&bytes);
    if (!la_tok_strmap_build(&m->raw_vocab, &m->raw)) return false;
    for (int b = 0; b < 256; b++) {
        char one = (char)b;
        m->raw_byte_ids[b] = la_tok_strmap_get(&m->raw_vocab, &one, 1);
    }
    return true;
oom:
    la_tok_buf_free(&bytes);
    return false;
}

void la_tok_bpe_fini(la_tok_bpe *m) {
    la_tok_strmap_fini(&m->vocab);
    la_tok_strmap_fini(&m->raw_vocab);
    la_tok_strtab_fini(&m->tokens);
    la_tok_strtab_fini(&m->raw);
    la_tok_pairmap_fini(&m->merges);
    la_tok_cache_destroy(m->cache);
    m->cache = NULL;
}
