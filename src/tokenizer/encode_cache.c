/* la_encode_cache (encode_cache.h): a hash map from the text's keyed hash to an entry, and
 * the entries in a doubly linked list, most recently used first.
 *
 * Bytes: the map (la_hmap) grows at half full to 4-8 slots a live entry and never shrinks,
 * and evictions leave its slots behind. So every entry is charged its own bytes and
 * MAP_CHARGE, the map's share at 16 slots an entry, and the map is rebuilt at its live size
 * whenever it holds more than 16 slots an entry (+ 1): entries + map <= the charges +
 * MAP_CHARGE <= max_bytes, checked before an entry is kept. */
#include "tokenizer/encode_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/hash.h"
#include "base/hash_map.h"

typedef struct entry {
    la_hash128 key;
    struct entry *newer, *older;
    int32_t n;
    int32_t ids[]; /* [n] */
} entry;

struct la_encode_cache {
    pthread_mutex_t mu;
    la_hmap map; /* key -> (intptr_t)entry */
    entry *newest, *oldest;
    int64_t max_bytes, max_ids;
    int64_t entry_bytes; /* of the entries held */
    la_encode_cache_stats st;
};

#define MAP_SLOTS_PER_ENTRY 16
#define MAP_CHARGE ((int64_t)(MAP_SLOTS_PER_ENTRY * sizeof(la_hmap_slot)))

/* An entry of n ids, itself (the map's slots count apart: map_bytes). */
static int64_t entry_bytes(int32_t n) { return (int64_t)(sizeof(entry) + sizeof(int32_t) * (size_t)n); }

static int64_t map_bytes(const la_encode_cache *c) { return c->map.cap * (int64_t)sizeof(la_hmap_slot); }

/* What the entries held are charged: their bytes and MAP_CHARGE each. */
static int64_t charged(const la_encode_cache *c) { return c->entry_bytes + MAP_CHARGE * c->st.entries; }

/* st.bytes as the header defines it: the entries and the map */
static void count_bytes(la_encode_cache *c) { c->st.bytes = c->entry_bytes + map_bytes(c); }

la_status la_encode_cache_create(int64_t max_bytes, int32_t max_ids, la_encode_cache **out, la_err *err) {
    if (max_bytes < 1) return la_err_set(err, LA_ERR_INVALID_ARG, "encode cache: max_bytes %lld < 1", (long long)max_bytes);
    la_encode_cache *c = calloc(1, sizeof *c);
    if (!c) return la_err_set(err, LA_ERR_NO_MEMORY, "encode cache: out of memory");
    pthread_mutex_init(&c->mu, NULL);
    c->max_bytes = max_bytes;
    c->max_ids = max_ids > 0 ? max_ids : INT32_MAX;
    *out = c;
    return LA_OK;
}

void la_encode_cache_destroy(la_encode_cache *c) {
    if (!c) return;
    for (entry *x = c->newest, *next; x; x = next) {
        next = x->older;
        free(x);
    }
    la_hmap_fini(&c->map);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* (salt, add_special, text): the salt with its length, so that no salt and text run into
 * each other, and a flag byte that tells "no salt" from "" */
static la_hash128 text_key(const char *salt, const char *text, size_t len, bool add_special) {
    la_hasher h;
    la_hasher_init(&h);
    const unsigned char flags = (unsigned char)((add_special ? 1 : 0) | (salt ? 2 : 0));
    la_hasher_update(&h, &flags, 1);
    if (salt) {
        const uint64_t n = strlen(salt);
        la_hasher_update(&h, &n, sizeof n);
        la_hasher_update(&h, salt, (size_t)n);
    }
    if (len) la_hasher_update(&h, text, len);
    return la_hasher_digest(&h);
}

static void unlink_entry(la_encode_cache *c, entry *x) {
    if (x->newer) x->newer->older = x->older;
    else c->newest = x->older;
    if (x->older) x->older->newer = x->newer;
    else c->oldest = x->newer;
    x->newer = x->older = NULL;
}

static void push_newest(la_encode_cache *c, entry *x) {
    x->newer = NULL;
    x->older = c->newest;
    if (c->newest) c->newest->newer = x;
    c->newest = x;
    if (!c->oldest) c->oldest = x;
}

static void drop_oldest(la_encode_cache *c) {
    entry *x = c->oldest;
    unlink_entry(c, x);
    la_hmap_remove(&c->map, x->key);
    c->entry_bytes -= entry_bytes(x->n);
    c->st.entries--;
    c->st.evictions++;
    free(x);
}

/* The map rebuilt at the size of what it holds when it holds more than MAP_SLOTS_PER_ENTRY
 * slots a live entry (+ 1): after evictions. Without memory for the new one, the entries
 * are dropped, oldest first, until the old map is small enough for them. */
static void fit_map(la_encode_cache *c) {
    while (c->map.cap > MAP_SLOTS_PER_ENTRY * (c->map.n_used + 1)) {
        la_hmap m = {0};
        bool ok = true;
        for (entry *x = c->oldest; x && ok; x = x->newer) ok = la_hmap_put(&m, x->key, (int64_t)(intptr_t)x);
        if (ok) {
            la_hmap_fini(&c->map);
            c->map = m;
            return;
        }
        la_hmap_fini(&m);
        if (!c->oldest) {
            la_hmap_fini(&c->map);
            return;
        }
        drop_oldest(c);
    }
}

/* A copy of x's ids for the caller (malloc'd; at least one int so that 0 ids is not NULL). */
static int32_t *copy_ids(const int32_t *ids, int32_t n) {
    int32_t *p = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (p && n > 0) memcpy(p, ids, sizeof(int32_t) * (size_t)n);
    return p;
}

la_status la_encode_cache_encode(la_encode_cache *c, const la_tokenizer *tok, const char *salt, const char *text,
                                 size_t len, bool add_special, int32_t **ids, int32_t *n, la_err *err) {
    if (!c || !tok || (!text && len) || !ids || !n) /* the tokenizer's own checks and errors */
        return la_tokenizer_encode(tok, text, len, add_special, ids, n, err);
    const la_hash128 key = text_key(salt, text, len, add_special);
    int64_t v;
    pthread_mutex_lock(&c->mu);
    if (la_hmap_get(&c->map, key, &v)) {
        entry *x = (entry *)(intptr_t)v;
        int32_t *p = copy_ids(x->ids, x->n);
        if (p) {
            unlink_entry(c, x);
            push_newest(c, x);
            c->st.hits++;
            *ids = p;
            *n = x->n;
        }
        pthread_mutex_unlock(&c->mu);
        return p ? LA_OK : la_err_set(err, LA_ERR_NO_MEMORY, "encode: out of memory");
    }
    c->st.misses++;
    pthread_mutex_unlock(&c->mu);

    int32_t *got = NULL, n_got = 0;
    LA_TRY(la_tokenizer_encode(tok, text, len, add_special, &got, &n_got, err));
    const int64_t need = entry_bytes(n_got), charge = need + MAP_CHARGE;
    const bool keep = n_got <= c->max_ids && charge + MAP_CHARGE <= c->max_bytes;
    entry *x = keep ? malloc(sizeof(entry) + sizeof(int32_t) * (size_t)n_got) : NULL;
    if (x) { /* kept: best effort, a full map or no memory only skips keeping it */
        x->key = key;
        x->n = n_got;
        if (n_got > 0) memcpy(x->ids, got, sizeof(int32_t) * (size_t)n_got);
        pthread_mutex_lock(&c->mu);
        if (la_hmap_get(&c->map, key, &v)) { /* another thread encoded it meanwhile */
            free(x);
        } else {
            while (c->oldest && charged(c) + charge + MAP_CHARGE > c->max_bytes) drop_oldest(c);
            fit_map(c);
            if (la_hmap_put(&c->map, key, (int64_t)(intptr_t)x)) {
                push_newest(c, x);
                c->entry_bytes += need;
                c->st.entries++;
            } else {
                free(x);
            }
            count_bytes(c);
        }
        pthread_mutex_unlock(&c->mu);
    }
    *ids = got;
    *n = n_got;
    return LA_OK;
}

void la_encode_cache_get_stats(la_encode_cache *c, la_encode_cache_stats *s) {
    memset(s, 0, sizeof *s);
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    *s = c->st;
    pthread_mutex_unlock(&c->mu);
}
