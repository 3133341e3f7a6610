/* la_encode_cache (src/tokenizer/encode_cache.c) against la_tokenizer_encode on the real
 * Llama-3 tokenizer (shared data) and the bundled model's: every encode through the cache
 * gives the tokenizer's ids, hit or miss, with and without special tokens; each cache salt
 * (and no salt) has entries of its own; the least
 * recently used entry goes first and the bytes held stay under the cap; an encoding larger
 * than the cache is returned and not kept; a text the tokenizer refuses, and NULL arguments,
 * are refused the same way and nothing is kept; four threads at once get the tokenizer's ids and every call is counted
 * once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"
#include "tokenizer/encode_cache.h"
#include "tokenizer/tokenizer.h"

static la_tokenizer *load(const char *which) {
    char dir[1024];
    if (!strcmp(which, "llama3")) snprintf(dir, sizeof dir, "%s/data/tokenizers/llama3", la_test_shared_dir());
    else snprintf(dir, sizeof dir, "%s/models/rag-tiny", LA_SOURCE_DIR);
    la_tokenizer *tok = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_load(dir, &tok, &err), err);
    return tok;
}

/* Texts of a few hundred tokens each, told apart by their first words. */
static char *text_of(int i) {
    static const char *const words[] = {"river", "stone", "März", "naïve", "東京", "  spaces", "\n\nnew", "42,000", "don't"};
    size_t cap = 8192, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s, cap, "Document %d (Title: t%d)", i, i);
    for (int w = 0; w < 200; w++) n += (size_t)snprintf(s + n, cap - n, " %s", words[(w * 7 + i) % 9]);
    return s;
}

static void check_encode_salted(la_encode_cache *c, const la_tokenizer *tok, const char *salt, const char *text,
                                bool special) {
    int32_t *want = NULL, *got = NULL, nw = 0, ng = 0;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_encode(tok, text, strlen(text), special, &want, &nw, &err), err);
    LA_CHECK_OK(la_encode_cache_encode(c, tok, salt, text, strlen(text), special, &got, &ng, &err), err);
    cr_assert_eq(ng, nw, "%d ids against the tokenizer's %d (special %d)", ng, nw, special);
    cr_assert(memcmp(got, want, sizeof(int32_t) * (size_t)nw) == 0, "ids differ from the tokenizer's");
    free(want);
    free(got);
}

static void check_encode(la_encode_cache *c, const la_tokenizer *tok, const char *text, bool special) {
    check_encode_salted(c, tok, NULL, text, special);
}

Test(encode_cache, hits_and_misses_give_the_tokenizers_ids) {
    const char *toks[] = {"llama3", "rag-tiny"};
    for (int t = 0; t < 2; t++) {
        la_tokenizer *tok = load(toks[t]);
        la_encode_cache *c = NULL;
        la_err err = {0};
        LA_CHECK_OK(la_encode_cache_create(64 << 20, 0, &c, &err), err);
        for (int round = 0; round < 3; round++)
            for (int i = 0; i < 6; i++) {
                char *s = text_of(i);
                check_encode(c, tok, s, false);
                check_encode(c, tok, s, true); /* a key of its own: BOS or not */
                free(s);
            }
        check_encode(c, tok, "", false); /* no ids, and not NULL */
        check_encode(c, tok, "", false);
        la_encode_cache_stats st;
        la_encode_cache_get_stats(c, &st);
        cr_assert_eq(st.misses, 13, "%s: %lld misses", toks[t], (long long)st.misses);
        cr_assert_eq(st.hits, 25, "%s: %lld hits", toks[t], (long long)st.hits);
        cr_assert_eq(st.entries, 13);
        cr_assert_eq(st.evictions, 0);
        la_encode_cache_destroy(c);
        la_tokenizer_destroy(tok);
    }
}

/* The ids of text i, through c; whether it was a hit. */
static bool encode_hit(la_encode_cache *c, const la_tokenizer *tok, int i) {
    la_encode_cache_stats a, b;
    la_encode_cache_get_stats(c, &a);
    char *s = text_of(i);
    check_encode(c, tok, s, false);
    free(s);
    la_encode_cache_get_stats(c, &b);
    cr_assert_eq(b.hits + b.misses, a.hits + a.misses + 1);
    return b.hits == a.hits + 1;
}

/* An entry's own bytes for tok's texts: what a second one adds to a cache (the map keeps its
 * first 16 slots up to 7 entries; the texts are of near equal length). */
static int64_t one_entry_bytes(const la_tokenizer *tok) {
    la_encode_cache *c = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_encode_cache_create(1 << 20, 0, &c, &err), err);
    encode_hit(c, tok, 0);
    la_encode_cache_stats st;
    la_encode_cache_get_stats(c, &st);
    const int64_t b1 = st.bytes;
    encode_hit(c, tok, 1);
    la_encode_cache_get_stats(c, &st);
    const int64_t entry = st.bytes - b1;
    cr_assert_gt(entry, 0);
    cr_assert_gt(b1 - entry, 0, "the map's bytes count");
    la_encode_cache_destroy(c);
    return entry;
}

Test(encode_cache, the_least_recently_used_goes_first_and_the_cap_holds) {
    la_tokenizer *tok = load("llama3");
    la_err err = {0};
    la_encode_cache_stats st;
    const int64_t entry = one_entry_bytes(tok);

    la_encode_cache *c = NULL;
    /* room for two: each entry is charged its bytes and a 512-byte share of the map, and one
     * more share is kept free (encode_cache.h) */
    const int64_t share = 512, cap = share + 2 * (entry + share) + (entry + share) / 2;
    LA_CHECK_OK(la_encode_cache_create(cap, 0, &c, &err), err);
    cr_assert(!encode_hit(c, tok, 0));
    cr_assert(!encode_hit(c, tok, 1));
    cr_assert(encode_hit(c, tok, 0)); /* 0 is now the most recent */
    cr_assert(!encode_hit(c, tok, 2)); /* evicts 1 */
    la_encode_cache_get_stats(c, &st);
    cr_assert_eq(st.evictions, 1);
    cr_assert_eq(st.entries, 2);
    cr_assert_leq(st.bytes, cap);
    cr_assert(encode_hit(c, tok, 0));
    cr_assert(encode_hit(c, tok, 2));
    cr_assert(!encode_hit(c, tok, 1), "1 was the least recently used: evicted");
    for (int i = 0; i < 40; i++) encode_hit(c, tok, i % 7);
    la_encode_cache_get_stats(c, &st);
    cr_assert_leq(st.bytes, cap);
    cr_assert_leq(st.entries, 2);
    la_encode_cache_destroy(c);

    /* many short texts through a small cache: the bytes stay under the cap (the map is rebuilt
     * as entries go) and it keeps serving hits */
    LA_CHECK_OK(la_encode_cache_create(64 << 10, 0, &c, &err), err);
    for (int i = 0; i < 20000; i++) {
        char w[32];
        snprintf(w, sizeof w, "w%d", i);
        check_encode(c, tok, w, false);
        if (i % 97 == 0) {
            la_encode_cache_get_stats(c, &st);
            cr_assert_leq(st.bytes, 64 << 10, "after %d texts: %lld bytes", i, (long long)st.bytes);
        }
    }
    la_encode_cache_get_stats(c, &st);
    cr_assert_gt(st.entries, 50);
    cr_assert_leq(st.bytes, 64 << 10);
    la_encode_cache_stats before;
    la_encode_cache_get_stats(c, &before);
    check_encode(c, tok, "w19999", false);
    la_encode_cache_get_stats(c, &st);
    cr_assert_eq(st.hits, before.hits + 1, "the newest short text is still a hit");
    la_encode_cache_destroy(c);

    /* more ids than max_ids: the ids, nothing kept */
    LA_CHECK_OK(la_encode_cache_create(1 << 20, 10, &c, &err), err);
    cr_assert(!encode_hit(c, tok, 3));
    cr_assert(!encode_hit(c, tok, 3));
    check_encode(c, tok, "short", false);
    check_encode(c, tok, "short", false);
    la_encode_cache_get_stats(c, &st);
    cr_assert_eq(st.entries, 1);
    cr_assert_eq(st.hits, 1);
    la_encode_cache_destroy(c);

    /* larger than the whole cache: the ids, nothing kept */
    LA_CHECK_OK(la_encode_cache_create(entry + share, 0, &c, &err), err);
    cr_assert(!encode_hit(c, tok, 3));
    cr_assert(!encode_hit(c, tok, 3));
    la_encode_cache_get_stats(c, &st);
    cr_assert_eq(st.entries, 0);
    cr_assert_eq(st.bytes, 0);
    la_encode_cache_destroy(c);
    la_tokenizer_destroy(tok);
}

/* A cache salt is a tenant: its entries are its own, and no salt is not the salt "". */
Test(encode_cache, each_salt_keeps_entries_of_its_own) {
    la_tokenizer *tok = load("llama3");
    la_encode_cache *c = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_encode_cache_create(64 << 20, 0, &c, &err), err);
    const char *salts[] = {NULL, "", "tenant-a", "tenant-b", "tenant-a\x01"};
    char *s = text_of(4);
    for (int round = 0; round < 2; round++)
        for (int k = 0; k < 5; k++) {
            la_encode_cache_stats a, b;
            la_encode_cache_get_stats(c, &a);
            check_encode_salted(c, tok, salts[k], s, false);
            la_encode_cache_get_stats(c, &b);
            cr_assert_eq(b.hits, a.hits + (round == 1), "salt %d round %d: a hit only for its own entry", k, round);
        }
    la_encode_cache_stats st;
    la_encode_cache_get_stats(c, &st);
    cr_assert_eq(st.entries, 5);
    free(s);
    la_encode_cache_destroy(c);
    la_tokenizer_destroy(tok);
}

Test(encode_cache, a_text_the_tokenizer_refuses_is_refused_alike_and_not_kept) {
    la_tokenizer *tok = load("llama3");
    la_encode_cache *c = NULL;
    la_err err = {0}, err2 = {0};
    LA_CHECK_OK(la_encode_cache_create(1 << 20, 0, &c, &err), err);
    const char bad[] = "valid then \xff\xfe not UTF-8";
    int32_t *ids = (int32_t *)&err, n = -7; /* untouched on error */
    la_status want = la_tokenizer_encode(tok, bad, sizeof bad - 1, false, &ids, &n, &err);
    cr_assert_eq(want, LA_ERR_INVALID_ARG);
    for (int k = 0; k < 2; k++) {
        la_status got = la_encode_cache_encode(c, tok, NULL, bad, sizeof bad - 1, false, &ids, &n, &err2);
        cr_assert_eq(got, want);
        cr_assert_str_eq(err2.msg, err.msg);
        cr_assert_eq(ids, (int32_t *)&err);
        cr_assert_eq(n, -7);
    }
    la_encode_cache_stats st;
    la_encode_cache_get_stats(c, &st);
    cr_assert_eq(st.entries, 0);
    cr_assert_eq(st.misses, 2);
    cr_assert_eq(st.bytes, 0);
    /* NULL arguments as the tokenizer refuses them, even once "" is cached */
    int32_t *ok_ids = NULL, ok_n = 0;
    LA_CHECK_OK(la_encode_cache_encode(c, tok, NULL, "", 0, false, &ok_ids, &ok_n, &err), err);
    free(ok_ids);
    LA_CHECK_OK(la_encode_cache_encode(c, tok, NULL, "", 0, false, &ok_ids, &ok_n, &err), err);
    free(ok_ids);
    cr_assert_eq(la_encode_cache_encode(c, tok, NULL, NULL, 5, false, &ok_ids, &ok_n, &err2), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_encode_cache_encode(c, tok, NULL, "", 0, false, NULL, &ok_n, &err2), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_encode_cache_encode(c, NULL, NULL, "x", 1, false, &ok_ids, &ok_n, &err2), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_encode_cache_create(0, 0, &c, &err), LA_ERR_INVALID_ARG);
    la_encode_cache_destroy(c);
    la_encode_cache_destroy(NULL);
    la_encode_cache_get_stats(NULL, &st);
    cr_assert_eq(st.hits + st.misses + st.entries, 0);
    la_tokenizer_destroy(tok);
}

typedef struct worker {
    la_encode_cache *c;
    const la_tokenizer *tok;
    int32_t *want[8];
    int32_t n_want[8];
    const char *salt;
    int seed, bad;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (int k = 0; k < 300; k++) {
        /* texts 0-3 three times in four, 4-7 the fourth: a hot set the LRU keeps, and cold
         * texts that make it evict */
        const int i = k % 4 == 3 ? 4 + (k / 4 + w->seed) % 4 : (k * 5 + w->seed) % 4;
        char *s = text_of(i);
        int32_t *ids = NULL, n = 0;
        la_err err = {0};
        if (la_encode_cache_encode(w->c, w->tok, w->salt, s, strlen(s), false, &ids, &n, &err) != LA_OK ||
            n != w->n_want[i] || memcmp(ids, w->want[i], sizeof(int32_t) * (size_t)n) != 0)
            w->bad++;
        free(ids);
        free(s);
    }
    return NULL;
}

Test(encode_cache, four_threads_at_once_get_the_tokenizers_ids) {
    la_tokenizer *tok = load("rag-tiny");
    la_encode_cache *c = NULL;
    la_err err = {0};
    /* room for 12 entries (each charged its bytes and a 512-byte share of the map, one share
     * kept free; encode_cache.h) of the 16 (text, salt) pairs: hits, misses and evictions all
     * happen */
    const int64_t cap = 512 + 12 * (one_entry_bytes(tok) + 512);
    la_encode_cache_stats st;
    LA_CHECK_OK(la_encode_cache_create(cap, 0, &c, &err), err);
    worker w[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        w[t] = (worker){.c = c, .tok = tok, .seed = t, .salt = t % 2 ? "tenant" : NULL};
        for (int i = 0; i < 8; i++) {
            char *s = text_of(i);
            LA_CHECK_OK(la_tokenizer_encode(tok, s, strlen(s), false, &w[t].want[i], &w[t].n_want[i], &err), err);
            free(s);
        }
        cr_assert_eq(pthread_create(&th[t], NULL, work, &w[t]), 0);
    }
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < 4; t++) {
        cr_assert_eq(w[t].bad, 0, "thread %d: %d encodes differ from the tokenizer's", t, w[t].bad);
        for (int i = 0; i < 8; i++) free(w[t].want[i]);
    }
    la_encode_cache_get_stats(c, &st);
    cr_assert_eq(st.hits + st.misses, 4 * 300);
    cr_assert_gt(st.hits, 0);
    cr_assert_gt(st.evictions, 0);
    cr_assert_leq(st.bytes, cap);
    la_encode_cache_destroy(c);
    la_tokenizer_destroy(tok);
}
