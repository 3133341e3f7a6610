/* Token masks of JSON grammars over a vocabulary trie, with a per-grammar cache
 * (token_mask.h). */
#include "grammar/token_mask.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/err.h"
#include "grammar/json_matcher.h"

/* ============================================================ vocabulary ============= */

typedef struct trie_node {
    int32_t child, sibling; /* first child, next sibling (-1: none) */
    int32_t tok;            /* first token ending here (-1: none); more via next_tok */
    uint8_t byte;           /* the edge into this node */
} trie_node;

struct la_grammar_vocab {
    int32_t n_vocab;
    trie_node *trie; /* [0] is the root */
    int32_t n_trie, cap_trie;
    int32_t *next_tok; /* [n_vocab] */
    char *bytes;       /* every token's bytes */
    int64_t *off;      /* [n_vocab + 1] into bytes; a token without text has off[i] == off[i+1] */
    int32_t max_len;
};

static int32_t trie_child(la_grammar_vocab *v, int32_t node, uint8_t b) {
    int32_t prev = -1;
    for (int32_t c = v->trie[node].child; c >= 0; prev = c, c = v->trie[c].sibling)
        if (v->trie[c].byte == b) return c;
    if (v->n_trie == v->cap_trie) {
        int32_t cap = v->cap_trie * 2;
        trie_node *p = realloc(v->trie, sizeof *p * (size_t)cap);
        if (!p) return -1;
        v->trie = p;
        v->cap_trie = cap;
    }
    int32_t id = v->n_trie++;
    v->trie[id] = (trie_node){-1, -1, -1, b};
    if (prev >= 0) v->trie[prev].sibling = id;
    else v->trie[node].child = id;
    return id;
}

la_status la_grammar_vocab_create(int32_t n_vocab, const char *const *bytes, const int32_t *n_bytes,
                                  la_grammar_vocab **out, int *missing_byte, la_err *err) {
    if (n_vocab < 1) return la_err_set(err, LA_ERR_INVALID_ARG, "grammar vocabulary: %d tokens", n_vocab);
    la_grammar_vocab *v = calloc(1, sizeof *v);
    int64_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (bytes[i] && n_bytes[i] > 0) total += n_bytes[i];
    if (v) {
        v->n_vocab = n_vocab;
        v->cap_trie = 1024;
        v->trie = malloc(sizeof(trie_node) * (size_t)v->cap_trie);
        v->next_tok = malloc(sizeof(int32_t) * (size_t)n_vocab);
        v->bytes = malloc((size_t)total + 1);
        v->off = malloc(sizeof(int64_t) * ((size_t)n_vocab + 1));
    }
    bool ok = v && v->trie && v->next_tok && v->bytes && v->off;
    if (ok) {
        v->n_trie = 1;
        v->trie[0] = (trie_node){-1, -1, -1, 0};
        int64_t at = 0;
        for (int32_t i = 0; i < n_vocab && ok; i++) {
            v->off[i] = at;
            v->next_tok[i] = -1;
            if (!bytes[i] || n_bytes[i] <= 0) continue;
            memcpy(v->bytes + at, bytes[i], (size_t)n_bytes[i]);
            at += n_bytes[i];
            if (n_bytes[i] > v->max_len) v->max_len = n_bytes[i];
            int32_t node = 0;
            for (int32_t k = 0; k < n_bytes[i] && node >= 0; k++) node = trie_child(v, node, (uint8_t)bytes[i][k]);
            if (node < 0) {
                ok = false;
                break;
            }
            v->next_tok[i] = v->trie[node].tok; /* tokens of equal bytes chain at one node */
            v->trie[node].tok = i;
        }
        v->off[n_vocab] = at;
    }
    if (!ok) {
        la_grammar_vocab_destroy(v);
        return la_err_set(err, LA_ERR_NO_MEMORY, "grammar vocabulary of %d tokens: out of memory", n_vocab);
    }
    if (missing_byte) {
        *missing_byte = -1;
        for (int b = 0x20; b < 0x7f && *missing_byte < 0; b++) {
            bool found = false;
            for (int32_t c = v->trie[0].child; c >= 0 && !found; c = v->trie[c].sibling)
                found = v->trie[c].byte == b && v->trie[c].tok >= 0;
            if (!found) *missing_byte = b;
        }
    }
    *out = v;
    return LA_OK;
}

void la_grammar_vocab_destroy(la_grammar_vocab *v) {
    if (!v) return;
    free(v->trie);
    free(v->next_tok);
    free(v->bytes);
    free(v->off);
    free(v);
}

int32_t la_grammar_vocab_size(const la_grammar_vocab *v) { return v->n_vocab; }

/* ============================================================ the mask cache ========= */

typedef struct entry {
    uint64_t hash;
    unsigned char *key;
    size_t key_len;
    uint64_t *bits;   /* [n_words] */
    bool end_ok;
    int32_t max_after;/* largest min_finish after an allowed token */
    /* once the budget first got tight here (NULL before): the allowed tokens in the order
     * of their min_finish after them, ascending, and those values */
    int32_t *order;   /* [n_allowed] */
    int32_t *after;   /* [n_allowed] */
    int32_t n_allowed;
} entry;

struct la_grammar {
    atomic_int refs;
    la_json_grammar *jg;
    const la_grammar_vocab *v;
    int32_t n_words;
    size_t cache_cap_bytes, cache_bytes;
    pthread_mutex_t mu; /* guards everything below */
    entry **table;      /* open addressing, power-of-two capacity */
    int64_t table_cap, n_entries;
    la_jg_state *levels;/* [max_len + 1] walk scratch */
    unsigned char *keybuf;
    size_t keybuf_cap;
    la_grammar_cache_stats stats;
};

static void entry_free(entry *e) {
    if (!e) return;
    free(e->key);
    free(e->bits);
    free(e->order);
    free(e->after);
    free(e);
}

static void cache_clear(la_grammar *g) {
    for (int64_t i = 0; i < g->table_cap; i++) {
        entry_free(g->table[i]);
        g->table[i] = NULL;
    }
    g->n_entries = 0;
    g->cache_bytes = 0;
}

la_status la_grammar_create(la_json_grammar *jg, const la_grammar_vocab *v, size_t cache_bytes,
                            la_grammar **out, la_err *err) {
    la_grammar *g = calloc(1, sizeof *g);
    if (g) {
        g->jg = jg;
        g->v = v;
        g->n_words = (v->n_vocab + 63) / 64;
        g->cache_cap_bytes = cache_bytes ? cache_bytes : (size_t)64 << 20;
        g->table_cap = 64;
        g->table = calloc((size_t)g->table_cap, sizeof(entry *));
        g->levels = malloc(sizeof(la_jg_state) * (size_t)(v->max_len + 1));
        g->keybuf_cap = sizeof(la_jg_state);
        g->keybuf = malloc(g->keybuf_cap);
    }
    if (!g || !g->table || !g->levels || !g->keybuf) {
        if (g) {
            free(g->table);
            free(g->levels);
            free(g->keybuf);
            free(g);
        }
        la_json_grammar_destroy(jg);
        return la_err_set(err, LA_ERR_NO_MEMORY, "grammar: out of memory");
    }
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    *out = g;
    return LA_OK;
}

void la_grammar_ref(la_grammar *g) { atomic_fetch_add(&g->refs, 1); }

void la_grammar_unref(la_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) > 1) return;
    cache_clear(g);
    free(g->table);
    free(g->levels);
    free(g->keybuf);
    pthread_mutex_destroy(&g->mu);
    la_json_grammar_destroy(g->jg);
    free(g);
}

const la_json_grammar *la_grammar_json(const la_grammar *g) { return g->jg; }

int32_t la_grammar_min_tokens(const la_grammar *g) { return g->jg->nodes[g->jg->root].min_len; }

la_grammar_cache_stats la_grammar_get_cache_stats(la_grammar *g) {
    pthread_mutex_lock(&g->mu);
    la_grammar_cache_stats s = g->stats;
    s.entries = g->n_entries;
    pthread_mutex_unlock(&g->mu);
    return s;
}

/* The walk from levels[depth] over the children of trie node `node`; after (NULL: not
 * wanted) [n_vocab] gets each allowed token's min_finish. */
static void walk(la_grammar *g, entry *e, int32_t node, int32_t depth, int32_t *after) {
    const la_grammar_vocab *v = g->v;
    for (int32_t c = v->trie[node].child; c >= 0; c = v->trie[c].sibling) {
        la_jg_state *next = &g->levels[depth + 1];
        la_jg_state_step(g->jg, &g->levels[depth], v->trie[c].byte, next);
        if (next->n == 0) continue; /* no token under this prefix */
        if (v->trie[c].tok >= 0) {
            int32_t mf = la_jg_state_min_finish(g->jg, next);
            if (mf > e->max_after) e->max_after = mf;
            for (int32_t t = v->trie[c].tok; t >= 0; t = v->next_tok[t]) {
                e->bits[t / 64] |= (uint64_t)1 << (t % 64);
                if (after) after[t] = mf;
            }
        }
        if (v->trie[c].child >= 0) walk(g, e, c, depth + 1, after);
    }
}

static void compute(la_grammar *g, entry *e, const la_jg_state *st, int32_t *after) {
    memset(e->bits, 0, sizeof(uint64_t) * (size_t)g->n_words);
    e->max_after = 0;
    la_jg_state_copy(&g->levels[0], st);
    walk(g, e, 0, 0, after);
    e->end_ok = la_jg_state_can_end(g->jg, st);
}

/* The entry's tokens sorted by their min_finish (a counting sort: the values are small).
 * Returns the bytes it took, 0 on out of memory. */
static size_t sort_by_after(la_grammar *g, entry *e, const la_jg_state *st) {
    int32_t V = g->v->n_vocab;
    int32_t *after = malloc(sizeof(int32_t) * (size_t)V);
    if (!after) return 0;
    for (int32_t t = 0; t < V; t++) after[t] = -1;
    compute(g, e, st, after);
    int32_t n = 0;
    for (int32_t t = 0; t < V; t++) n += after[t] >= 0;
    int32_t *count = calloc((size_t)e->max_after + 2, sizeof(int32_t));
    e->order = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    e->after = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!count || !e->order || !e->after) {
        free(count), free(after), free(e->order), free(e->after);
        e->order = e->after = NULL;
        return 0;
    }
    for (int32_t t = 0; t < V; t++)
        if (after[t] >= 0) count[after[t] + 1]++;
    for (int32_t k = 1; k <= e->max_after + 1; k++) count[k] += count[k - 1];
    for (int32_t t = 0; t < V; t++)
        if (after[t] >= 0) {
            int32_t at = count[after[t]]++;
            e->order[at] = t;
            e->after[at] = after[t];
        }
    e->n_allowed = n;
    free(count);
    free(after);
    return 2 * sizeof(int32_t) * (size_t)n;
}

static bool cache_grow(la_grammar *g) {
    if (g->table_cap <= 0 || (uint64_t)g->table_cap > SIZE_MAX / (2 * sizeof(entry *))) return false;
    int64_t cap = g->table_cap * 2;
    entry **t = calloc((size_t)cap, sizeof(entry *));
    if (!t) return false;
    for (int64_t i = 0; i < g->table_cap; i++) {
        entry *e = g->table[i];
        if (!e) continue;
        int64_t k = (int64_t)(e->hash & (uint64_t)(cap - 1));
        while (t[k]) k = (k + 1) & (cap - 1);
        t[k] = e;
    }
    free(g->table);
    g->table = t;
    g->table_cap = cap;
    return true;
}

/* The entry of state st (computed on a miss). Caller holds g->mu. NULL: out of memory. */
static entry *lookup(la_grammar *g, const la_jg_state *st) {
    size_t need = la_jg_state_key(st, g->keybuf, g->keybuf_cap);
    if (need > g->keybuf_cap) { /* cannot happen: a key is at most a whole state */
        unsigned char *p = realloc(g->keybuf, need);
        if (!p) return NULL;
        g->keybuf = p;
        g->keybuf_cap = need;
        la_jg_state_key(st, g->keybuf, need);
    }
    uint64_t h = XXH3_64bits(g->keybuf, need);
    int64_t k = (int64_t)(h & (uint64_t)(g->table_cap - 1));
    for (; g->table[k]; k = (k + 1) & (g->table_cap - 1)) {
        entry *e = g->table[k];
        if (e->hash == h && e->key_len == need && !memcmp(e->key, g->keybuf, need)) {
            g->stats.hits++;
            return e;
        }
    }
    g->stats.misses++;
    size_t bytes = sizeof(entry) + need + sizeof(uint64_t) * (size_t)g->n_words;
    if (g->cache_bytes + bytes > g->cache_cap_bytes) { /* full: start over */
        cache_clear(g);
        k = (int64_t)(h & (uint64_t)(g->table_cap - 1));
    }
    if (2 * (g->n_entries + 1) > g->table_cap) {
        if (!cache_grow(g)) return NULL;
        k = (int64_t)(h & (uint64_t)(g->table_cap - 1));
        while (g->table[k]) k = (k + 1) & (g->table_cap - 1);
    }
    entry *e = calloc(1, sizeof *e);
    if (e) {
        e->hash = h;
        e->key_len = need;
        e->key = malloc(need);
        e->bits = malloc(sizeof(uint64_t) * (size_t)g->n_words);
    }
    if (!e || !e->key || !e->bits) {
        entry_free(e);
        return NULL;
    }
    memcpy(e->key, g->keybuf, need);
    compute(g, e, st, NULL);
    g->table[k] = e;
    g->n_entries++;
    g->cache_bytes += bytes;
    return e;
}

/* ============================================================ matchers =============== */

struct la_grammar_matcher {
    la_grammar *g;
    la_jg_state st;
};

la_status la_grammar_matcher_create(la_grammar *g, la_grammar_matcher **out, la_err *err) {
    la_grammar_matcher *m = malloc(sizeof *m);
    if (!m) return la_err_set(err, LA_ERR_NO_MEMORY, "grammar matcher: out of memory");
    la_grammar_ref(g);
    m->g = g;
    la_jg_state_init(g->jg, &m->st);
    *out = m;
    return LA_OK;
}

la_status la_grammar_matcher_clone(const la_grammar_matcher *src, la_grammar_matcher **out, la_err *err) {
    la_grammar_matcher *m = malloc(sizeof *m);
    if (!m) return la_err_set(err, LA_ERR_NO_MEMORY, "grammar matcher: out of memory");
    la_grammar_ref(src->g);
    m->g = src->g;
    la_jg_state_copy(&m->st, &src->st);
    *out = m;
    return LA_OK;
}

void la_grammar_matcher_destroy(la_grammar_matcher *m) {
    if (!m) return;
    la_grammar_unref(m->g);
    free(m);
}

la_status la_grammar_matcher_mask(la_grammar_matcher *m, int32_t tokens_left, uint64_t *mask, bool *end_ok,
                                  la_err *err) {
    la_grammar *g = m->g;
    pthread_mutex_lock(&g->mu);
    entry *e = lookup(g, &m->st);
    la_status s = LA_OK;
    if (!e) {
        s = la_err_set(err, LA_ERR_NO_MEMORY, "grammar mask: out of memory");
    } else if (tokens_left - 1 >= e->max_after) {
        memcpy(mask, e->bits, sizeof(uint64_t) * (size_t)g->n_words);
    } else { /* the budget is tight: only tokens after which the value can still end */
        g->stats.tight++;
        if (!e->order) g->cache_bytes += sort_by_after(g, e, &m->st);
        if (!e->order) {
            s = la_err_set(err, LA_ERR_NO_MEMORY, "grammar mask: out of memory");
        } else {
            /* k = tokens whose min_finish fits: set those, or clear the others, whichever
             * is fewer (near the end few fit; a little earlier few do not) */
            int32_t lo = 0, hi = e->n_allowed, lim = tokens_left - 1;
            while (lo < hi) {
                int32_t mid = lo + (hi - lo) / 2;
                if (e->after[mid] <= lim) lo = mid + 1;
                else hi = mid;
            }
            if (lo < e->n_allowed - lo) {
                memset(mask, 0, sizeof(uint64_t) * (size_t)g->n_words);
                for (int32_t i = 0; i < lo; i++) mask[e->order[i] / 64] |= (uint64_t)1 << (e->order[i] % 64);
            } else {
                memcpy(mask, e->bits, sizeof(uint64_t) * (size_t)g->n_words);
                for (int32_t i = lo; i < e->n_allowed; i++) mask[e->order[i] / 64] &= ~((uint64_t)1 << (e->order[i] % 64));
            }
        }
    }
    if (e) *end_ok = e->end_ok;
    pthread_mutex_unlock(&g->mu);
    return s;
}

la_status la_grammar_matcher_accept(la_grammar_matcher *m, int32_t token, la_err *err) {
    const la_grammar_vocab *v = m->g->v;
    if (token < 0 || token >= v->n_vocab || v->off[token] == v->off[token + 1])
        return la_err_set(err, LA_ERR_INVALID_ARG, "grammar: token %d is not allowed here", token);
    la_jg_state *tmp = malloc(sizeof *tmp);
    if (!tmp) return la_err_set(err, LA_ERR_NO_MEMORY, "grammar: out of memory");
    la_jg_state_copy(tmp, &m->st);
    bool ok = la_jg_state_feed(m->g->jg, tmp, v->bytes + v->off[token], (size_t)(v->off[token + 1] - v->off[token]));
    if (ok) la_jg_state_copy(&m->st, tmp);
    free(tmp);
    return ok ? LA_OK : la_err_set(err, LA_ERR_INVALID_ARG, "grammar: token %d is not allowed here", token);
}

bool la_grammar_matcher_can_end(const la_grammar_matcher *m) { return la_jg_state_can_end(m->g->jg, &m->st); }

bool la_grammar_matcher_done(const la_grammar_matcher *m) { return la_jg_state_done(m->g->jg, &m->st); }
