/* Recovery (kv/plan.h "Recovery"): the first N tokens of every document after the first
 * recomputed in context on top of the cached documents. On the tiny f32 checkpoint:
 * lazy, mepic and block with recovery equal block-ref with the same recovery (one
 * mathematics, three storage formats); recomputing every document token equals full
 * recompute; N = 0 is plain lazy, bit for bit; the cached documents are never written;
 * the question chain keeps N apart; chunked across steps equals one step; and every method
 * with recovery equals transformers on all six tiny models. Selected recovery (R, the
 * probe's choice): the same properties, and transformers with the oracle's own choice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/file.h"
#include "common/engine_util.h"
#include "common/fixture.h"
#include "common/test_util.h"
#include "engine/sampling.h"

#define LOGIT_TOL 1e-4
#define N_GEN 5

static char g_dir[512];

static const char *tiny_dir(void) {
    snprintf(g_dir, sizeof g_dir, "%s/tests/fixtures/models/tiny-f32-tied", LA_SOURCE_DIR);
    return g_dir;
}

/* An engine whose requests take selected recovery's R = ratio by default (0: none). */
static la_engine *engine_r(int64_t kv_blocks, int32_t max_batch_tokens, float ratio) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.recompute_ratio = ratio;
    o.kv_blocks = kv_blocks;
    o.block_size = 16;
    o.n_threads = 2;
    if (max_batch_tokens) o.max_batch_tokens = max_batch_tokens;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    return e;
}

static la_engine *engine(int64_t kv_blocks, int32_t max_batch_tokens) { return engine_r(kv_blocks, max_batch_tokens, 0); }

typedef struct docset {
    int32_t n;
    int32_t len[8];
    int32_t *ids[8];
} docset;

static void make_docs(la_rng *rng, docset *d, int32_t n, const int32_t *lens) {
    d->n = n;
    for (int32_t i = 0; i < n; i++) {
        d->len[i] = lens[i];
        d->ids[i] = malloc(sizeof(int32_t) * (size_t)d->len[i]);
        for (int32_t t = 0; t < d->len[i]; t++) d->ids[i][t] = (int32_t)(la_rng_next(rng) % 500);
    }
}

static void free_docs(docset *d) {
    for (int32_t i = 0; i < d->n; i++) free(d->ids[i]);
}

/* One request: documents in `order`, question q, recovery N and R (negative: the
 * engine's default). */
static void run_nr(la_engine *e, la_method m, const docset *d, const int32_t *order, const int32_t *q, int32_t nq,
                   int32_t n_first, float ratio, la_test_gen *g) {
    la_test_generate_docs(e, m, d->ids, d->len, d->n, order, q, nq, NULL, n_first, ratio, N_GEN, g);
    cr_assert_eq(g->status, LA_OK, "%s", g->error);
}

static void run(la_engine *e, la_method m, const docset *d, const int32_t *order, const int32_t *q, int32_t nq,
                int32_t n_first, la_test_gen *g) {
    run_nr(e, m, d, order, q, nq, n_first, -1.0f, g);
}

/* The whole prompt as one token list (recompute and prefix take the documents inline). */
static void run_recompute(la_engine *e, const docset *d, const int32_t *order, const int32_t *q, int32_t nq,
                          la_test_gen *g) {
    int32_t all[4096], n = 0;
    for (int32_t i = 0; i < d->n; i++) {
        memcpy(all + n, d->ids[order[i]], sizeof(int32_t) * (size_t)d->len[order[i]]);
        n += d->len[order[i]];
    }
    memcpy(all + n, q, sizeof(int32_t) * (size_t)nq);
    n += nq;
    la_test_generate_segs(e, LA_METHOD_RECOMPUTE, NULL, 0, (la_segment){.ids = all, .n_ids = n}, NULL, -1, -1.0f, N_GEN, g);
}

static void assert_same(const la_test_gen *a, const la_test_gen *ref, const char *what) {
    cr_assert_eq(a->n_tokens, N_GEN, "%s", what);
    cr_assert_eq(ref->n_tokens, N_GEN, "%s", what);
    double d = la_test_gen_max_diff(a, ref);
    cr_assert(d <= LOGIT_TOL, "%s: logits differ by %.3g", what, d);
    for (int32_t i = 0; i < N_GEN; i++) cr_assert_eq(a->tokens[i], ref->tokens[i], "%s: token %d", what, i);
}

static void assert_bitwise(const la_test_gen *a, const la_test_gen *b, const char *what) {
    cr_assert_eq(a->n_tokens, b->n_tokens, "%s", what);
    cr_assert(memcmp(a->logits, b->logits, sizeof(float) * (size_t)a->n_tokens * (size_t)a->n_vocab) == 0,
              "%s: logits differ (max %.3g)", what, la_test_gen_max_diff(a, b));
}

static int64_t expect_recomputed(const docset *d, const int32_t *order, int32_t n_first) {
    int64_t n = 0;
    for (int32_t i = 1; i < d->n; i++) n += d->len[order[i]] < n_first ? d->len[order[i]] : n_first;
    return n;
}

Test(recovery, lazy_mepic_block_equal_block_ref_with_the_same_recovery) {
    la_engine *e = engine(4096, 0);
    la_rng rng;
    la_rng_seed(&rng, 11);
    const int32_t lens[3][5] = {{40, 16, 23, 50, 3}, {1, 17, 33, 0, 0}, {64, 2, 31, 15, 0}};
    const int32_t ns[3] = {5, 3, 4};
    const int32_t firsts[4] = {1, 5, 16, 20};
    for (int32_t s = 0; s < 3; s++) {
        docset d;
        make_docs(&rng, &d, ns[s], lens[s]);
        int32_t q[6] = {11, 12, 13, 14, 15, 16};
        int32_t order[5] = {0, 1, 2, 3, 4}, rev[5];
        for (int32_t i = 0; i < d.n; i++) rev[i] = d.n - 1 - i;
        for (int32_t f = 0; f < 4; f++)
            for (int32_t o = 0; o < 2; o++) {
                const int32_t *ord = o ? rev : order;
                la_test_gen ref;
                run(e, LA_METHOD_BLOCK_REF, &d, ord, q, 6, firsts[f], &ref);
                cr_assert_eq(ref.stats.doc_tokens_recomputed, expect_recomputed(&d, ord, firsts[f]));
                const la_method ms[3] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK};
                for (int k = 0; k < 3; k++) {
                    la_test_gen g;
                    run(e, ms[k], &d, ord, q, 6, firsts[f], &g);
                    char what[128];
                    snprintf(what, sizeof what, "set %d, N %d, order %d, %s", s, firsts[f], o, la_method_name(ms[k]));
                    assert_same(&g, &ref, what);
                    cr_assert_eq(g.stats.doc_tokens_recomputed, expect_recomputed(&d, ord, firsts[f]), "%s", what);
                    if (f > 0) cr_assert_eq(g.stats.doc_tokens_computed, 0, "%s: documents were cached", what);
                    la_test_gen_free(&g);
                }
                la_test_gen_free(&ref);
            }
        free_docs(&d);
    }
    la_err err;
    LA_CHECK_OK(la_engine_check(e, &err), err);
    la_engine_destroy(e);
}

/* N at least every document's length, or R = 1 (selected recovery: every token of the later
 * documents chosen, all of them probed): every document token sees everything before it,
 * which is full causal attention: the recompute method's answer. */
Test(recovery, recomputing_every_document_token_equals_full_recompute) {
    la_engine *e = engine(4096, 0);
    la_rng rng;
    la_rng_seed(&rng, 12);
    const int32_t lens[4] = {23, 40, 16, 9};
    docset d;
    make_docs(&rng, &d, 4, lens);
    int32_t q[5] = {21, 22, 23, 24, 25}, order[4] = {2, 0, 3, 1};
    la_test_gen rc;
    run_recompute(e, &d, order, q, 5, &rc);
    const la_method ms[4] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK, LA_METHOD_BLOCK_REF};
    for (int k = 0; k < 4; k++)
        for (int r = 0; r < 2; r++) {
            la_test_gen g;
            run_nr(e, ms[k], &d, order, q, 5, r ? 0 : 40, r ? 1.0f : 0.0f, &g);
            char what[64];
            snprintf(what, sizeof what, "%s, %s", la_method_name(ms[k]), r ? "R = 1" : "N = 40");
            assert_same(&g, &rc, what);
            cr_assert_eq(g.stats.doc_tokens_recomputed, 40 + 9 + 23, "%s", what);
            cr_assert_eq(g.stats.doc_tokens_probed, r ? 40 + 9 + 23 : 0, "%s", what);
            la_test_gen_free(&g);
        }
    /* and plain lazy is not (the block-diagonal encoding is a different model) */
    la_test_gen plain;
    run(e, LA_METHOD_LAZY, &d, order, q, 5, 0, &plain);
    cr_assert(la_test_gen_max_diff(&plain, &rc) > 1e-3, "plain lazy equals recompute: the test cannot tell");
    la_test_gen_free(&plain);
    la_test_gen_free(&rc);
    free_docs(&d);
    la_engine_destroy(e);
}

/* N = 0 is plain lazy bit for bit; a request with recovery leaves the cached documents as
 * they were (plain lazy after it is bit for bit plain lazy before it); the question chain
 * keeps N apart (a 40-token question fills cached tail blocks under each N). */
Test(recovery, zero_is_plain_lazy_and_the_cache_is_never_written) {
    la_engine *e = engine(4096, 0);
    la_rng rng;
    la_rng_seed(&rng, 13);
    const int32_t lens[3] = {30, 20, 45};
    docset d;
    make_docs(&rng, &d, 3, lens);
    int32_t q[40], order[3] = {0, 1, 2};
    for (int i = 0; i < 40; i++) q[i] = 100 + i;
    la_test_gen cold, plain1, zero, rec1, rec2, plain2;
    run(e, LA_METHOD_LAZY, &d, order, q, 40, -1, &cold); /* engine default: 0 */
    run(e, LA_METHOD_LAZY, &d, order, q, 40, -1, &plain1); /* warm: what every run below is */
    run(e, LA_METHOD_LAZY, &d, order, q, 40, 0, &zero);
    cr_assert_eq(zero.stats.prefix_tokens_reused, 32, "the question's blocks are cached");
    assert_bitwise(&zero, &plain1, "N = 0");
    cr_assert_eq(zero.stats.doc_tokens_recomputed, 0);
    run(e, LA_METHOD_LAZY, &d, order, q, 40, 8, &rec1);
    cr_assert_eq(rec1.stats.prefix_tokens_reused, 0, "N = 8 must not read N = 0's question blocks");
    cr_assert(la_test_gen_max_diff(&rec1, &plain1) > 1e-4, "recovery changed nothing: the field is ignored");
    run(e, LA_METHOD_LAZY, &d, order, q, 40, 8, &rec2);
    cr_assert_eq(rec2.stats.prefix_tokens_reused, 32, "N = 8's own question blocks are reused");
    assert_same(&rec2, &rec1, "N = 8 warm");
    run(e, LA_METHOD_LAZY, &d, order, q, 40, 0, &plain2);
    assert_bitwise(&plain2, &plain1, "plain lazy after recovery");
    la_test_gen_free(&cold), la_test_gen_free(&plain1), la_test_gen_free(&zero), la_test_gen_free(&rec1), la_test_gen_free(&rec2),
        la_test_gen_free(&plain2);
    la_err err;
    LA_CHECK_OK(la_engine_check(e, &err), err);
    free_docs(&d);
    la_engine_destroy(e);
}

/* A step budget of 8 tokens: the recomputed tokens go over several steps, document by
 * document, and give what one step gives, with N = 20 and with R = 0.3 (whose probe then
 * takes several steps too, 8 x n_layers tokens a step). The cached documents are not
 * written: plain lazy after selected recovery is plain lazy before it, bit for bit. */
Test(recovery, chunked_over_steps_equals_one_step) {
    la_engine *big = engine(4096, 0), *small = engine(4096, 8);
    la_rng rng;
    la_rng_seed(&rng, 14);
    const int32_t lens[4] = {18, 33, 5, 27};
    docset d;
    make_docs(&rng, &d, 4, lens);
    int32_t q[3] = {7, 8, 9}, order[4] = {3, 1, 0, 2};
    la_test_gen before, after;
    run_nr(small, LA_METHOD_LAZY, &d, order, q, 3, 0, 0.0f, &before);
    cr_assert_eq(before.stats.doc_tokens_probed, 0);
    const la_method ms[3] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK};
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < 2; r++) {
            la_test_gen a, b;
            const int32_t n_first = r ? 0 : 20;
            const float ratio = r ? 0.3f : 0.0f;
            run_nr(big, ms[k], &d, order, q, 3, n_first, ratio, &a);
            run_nr(small, ms[k], &d, order, q, 3, n_first, ratio, &b);
            char what[64];
            snprintf(what, sizeof what, "%s, %s", la_method_name(ms[k]), r ? "R = 0.3" : "N = 20");
            assert_same(&b, &a, what);
            /* 18 + 5 + 20 (the later documents, N = 20); round(0.3 x (33 + 18 + 5)) */
            cr_assert_eq(b.stats.doc_tokens_recomputed, r ? 17 : 43, "%s", what);
            la_test_gen_free(&a), la_test_gen_free(&b);
        }
    run_nr(small, LA_METHOD_LAZY, &d, order, q, 3, 0, 0.0f, &after);
    assert_bitwise(&after, &before, "plain lazy after selected recovery");
    la_test_gen_free(&before), la_test_gen_free(&after);
    free_docs(&d);
    la_engine_destroy(big);
    la_engine_destroy(small);
}

/* The engine's default applies to the block-wise methods and not to recompute / prefix;
 * a request's own value outside them, or below -1, is refused with a message. */
Test(recovery, defaults_and_bad_values) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.kv_blocks = 4096;
    o.recompute_first = 16;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    la_rng rng;
    la_rng_seed(&rng, 15);
    const int32_t lens[3] = {20, 30, 10};
    docset d;
    make_docs(&rng, &d, 3, lens);
    int32_t q[3] = {1, 2, 3}, order[3] = {0, 1, 2};
    la_test_gen g, p;
    run(e, LA_METHOD_LAZY, &d, order, q, 3, -1, &g);
    cr_assert_eq(g.stats.doc_tokens_recomputed, 16 + 10);
    run(e, LA_METHOD_PREFIX, &d, order, q, 3, -1, &p); /* documents inline under prefix */
    cr_assert_eq(p.stats.doc_tokens_recomputed, 0);
    la_test_gen_free(&g), la_test_gen_free(&p);

    la_segment seg = {.ids = q, .n_ids = 3};
    la_request_params rp;
    la_request_params_init(&rp);
    rp.prompt = seg;
    rp.method = LA_METHOD_PREFIX;
    rp.recompute_first = 4;
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "recompute_first applies to the block-wise methods"), "%s", err.msg);
    rp.method = LA_METHOD_LAZY;
    rp.recompute_first = 0;
    rp.cache_salt = ""; /* would be the unsalted cache: refused as the server refuses it */
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "cache_salt must not be empty"), "%s", err.msg);
    rp.cache_salt = NULL;
    rp.recompute_first = -2;
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "recompute_first=-2"), "%s", err.msg);
    la_engine_destroy(e);

    o.recompute_first = -1;
    cr_assert_eq(la_engine_create(&o, &e, &err), LA_ERR_INVALID_ARG);
    free_docs(&d);
}

/* Against transformers (tools/oracle/recovery_fixture.py: one forward with every document
 * alone, its recomputed tokens again beside it and a 4-D mask): for every tiny model and
 * case, the last tail logits within 1e-4 and the greedy continuation identical under lazy,
 * mepic, block and block-ref with the case's N, cold and warm. */
static void hf_cases(const char *name, la_method method) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", LA_SOURCE_DIR, name);
    snprintf(path, sizeof path, "%s/recovery_oracle.json", dir);
    char *text = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_file_read(path, &text, NULL, &err), err);
    cJSON *oracle = cJSON_Parse(text);
    free(text);
    cr_assert(oracle, "%s: not JSON", path);
    la_engine *e = la_test_engine(dir, 256, 16);
    int n_cases = 0, n_recovered = 0, n_selected = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(oracle, "cases")) {
        const cJSON *segs = cJSON_GetObjectItem(c, "segments");
        int32_t n_segs = cJSON_GetArraySize(segs), lens[16];
        int32_t *ids[16];
        la_segment docs[16];
        cr_assert(n_segs <= 16);
        int64_t expect = 0;
        int32_t n_first = (int32_t)cJSON_GetObjectItem(c, "n_first")->valuedouble;
        const cJSON *jr = cJSON_GetObjectItem(c, "ratio"), *rows = cJSON_GetObjectItem(c, "rows");
        const float ratio = jr ? (float)jr->valuedouble : 0.0f; /* selected recovery: the oracle's choice */
        for (int32_t s = 0; s < n_segs; s++) {
            ids[s] = la_test_json_ints(cJSON_GetArrayItem(segs, s), &lens[s]);
            docs[s] = (la_segment){.ids = ids[s], .n_ids = lens[s]};
            if (s > 0 && s < n_segs - 1) expect += lens[s] < n_first ? lens[s] : n_first;
            if (rows && s < n_segs - 1) expect += cJSON_GetArraySize(cJSON_GetArrayItem(rows, s));
        }
        int32_t n_ref, nv;
        int32_t *ref = la_test_json_ints(cJSON_GetObjectItem(c, "greedy"), &n_ref);
        float *ref_last = la_test_json_floats(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "logits"), 0), &nv);
        const char *case_name = cJSON_GetObjectItem(c, "name")->valuestring;
        for (int rep = 0; rep < 2; rep++) {
            la_test_gen g;
            la_test_generate_segs(e, method, docs, n_segs - 1, docs[n_segs - 1], NULL, n_first, ratio, n_ref, &g);
            cr_assert_eq(g.status, LA_OK, "%s", g.error);
            cr_assert_eq(g.n_vocab, nv);
            size_t at;
            double d = la_test_max_abs_diff(g.logits, ref_last, (size_t)nv, &at);
            cr_assert(d <= LOGIT_TOL, "%s %s case %s N %d R %g rep %d: last tail logits differ by %.3g at %zu",
                      name, la_method_name(method), case_name, n_first, (double)ratio, rep, d, at);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(g.tokens[i], ref[i], "%s %s case %s N %d R %g rep %d: token %d is %d, HF %d", name,
                             la_method_name(method), case_name, n_first, (double)ratio, rep, i, g.tokens[i], ref[i]);
            cr_assert_eq(g.stats.doc_tokens_recomputed, expect, "%s case %s R %g", name, case_name, (double)ratio);
            la_test_gen_free(&g);
        }
        n_cases++;
        n_recovered += expect > 0;
        n_selected += ratio > 0.0f;
        for (int32_t s = 0; s < n_segs; s++) free(ids[s]);
        free(ref);
        free(ref_last);
    }
    cr_assert(n_cases >= 12 && n_recovered >= 9 && n_selected >= 4, "%s: %d cases, %d with recomputed tokens, %d "
              "selected", name, n_cases, n_recovered, n_selected);
    cJSON_Delete(oracle);
    la_engine_destroy(e);
}

Test(recovery, every_method_matches_transformers) {
    const la_method ms[4] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK, LA_METHOD_BLOCK_REF};
    for (int m = 0; m < LA_TEST_N_MODELS; m++)
        for (int k = 0; k < 4; k++) hf_cases(la_test_models[m], ms[k]);
}

/* ---- selected recovery (R) ---------------------------------------------------------- */

static int64_t later_tokens(const docset *d, const int32_t *order) {
    int64_t n = 0;
    for (int32_t i = 1; i < d->n; i++) n += d->len[order[i]];
    return n;
}

/* R < 1: lazy, mepic and block choose what block-ref chooses (one probe, three storage
 * formats) and give its answer; round(R x later tokens) are recomputed; the answer differs
 * from plain lazy, from full recompute and from first-N with as many tokens; the question
 * chain keeps R apart; R beside N adds to it. */
Test(recovery, ratio_methods_agree_and_count) {
    la_engine *half = engine_r(4096, 0, 0.5f), *quarter = engine_r(4096, 0, 0.25f), *plain = engine(4096, 0);
    la_rng rng;
    la_rng_seed(&rng, 22);
    const int32_t lens[5] = {40, 16, 23, 50, 31};
    docset d;
    make_docs(&rng, &d, 5, lens);
    int32_t q[40], order[5] = {3, 1, 0, 4, 2};
    for (int i = 0; i < 40; i++) q[i] = 200 + i;
    const int64_t later = later_tokens(&d, order); /* 16 + 40 + 31 + 23 = 110 */
    la_test_gen ref, rc, lz, first;
    run(half, LA_METHOD_BLOCK_REF, &d, order, q, 40, -1, &ref);
    cr_assert_eq(ref.stats.doc_tokens_recomputed, 55);
    cr_assert_eq(ref.stats.doc_tokens_probed, later);
    const la_method ms[3] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK};
    for (int k = 0; k < 3; k++) {
        la_test_gen g;
        run(half, ms[k], &d, order, q, 40, -1, &g);
        assert_same(&g, &ref, la_method_name(ms[k]));
        cr_assert_eq(g.stats.doc_tokens_recomputed, 55, "%s", la_method_name(ms[k]));
        la_test_gen_free(&g);
    }
    run_recompute(half, &d, order, q, 40, &rc);
    run(plain, LA_METHOD_LAZY, &d, order, q, 40, 0, &lz);
    run(plain, LA_METHOD_LAZY, &d, order, q, 40, 14, &first); /* 14 x 4 = 56 tokens */
    cr_assert(la_test_gen_max_diff(&ref, &rc) > 1e-4, "R = 0.5 equals full recompute: the test cannot tell");
    cr_assert(la_test_gen_max_diff(&ref, &lz) > 1e-4, "R = 0.5 equals plain lazy: the field is ignored");
    cr_assert(la_test_gen_max_diff(&ref, &first) > 1e-4, "R = 0.5 chose the first tokens");
    /* warm: the question's blocks of R = 0.5 are its own */
    la_test_gen again, q25, mix;
    run(half, LA_METHOD_LAZY, &d, order, q, 40, -1, &again);
    cr_assert_eq(again.stats.prefix_tokens_reused, 32);
    assert_same(&again, &ref, "R = 0.5 warm");
    run(quarter, LA_METHOD_LAZY, &d, order, q, 40, -1, &q25);
    cr_assert_eq(q25.stats.doc_tokens_recomputed, 28); /* round(27.5) */
    cr_assert(la_test_gen_max_diff(&q25, &ref) > 1e-4, "R = 0.25 equals R = 0.5");
    run(quarter, LA_METHOD_LAZY, &d, order, q, 40, 4, &mix); /* first 4 of each, then 28 more */
    cr_assert_eq(mix.stats.doc_tokens_recomputed, 16 + 28);
    la_test_gen_free(&ref), la_test_gen_free(&rc), la_test_gen_free(&lz), la_test_gen_free(&first);
    la_test_gen_free(&again), la_test_gen_free(&q25), la_test_gen_free(&mix);
    free_docs(&d);
    la_err err;
    LA_CHECK_OK(la_engine_check(half, &err), err);
    LA_CHECK_OK(la_engine_check(quarter, &err), err);
    la_engine_destroy(half), la_engine_destroy(quarter), la_engine_destroy(plain);
}

/* R outside [0, 1], R under recompute / prefix, and an engine default outside [0, 1] are
 * refused with a message; one document has nothing to probe. */
Test(recovery, ratio_bad_values) {
    la_engine *e = engine_r(4096, 0, 0.5f);
    int32_t q[3] = {1, 2, 3};
    la_segment seg = {.ids = q, .n_ids = 3};
    la_request_params rp;
    la_request_params_init(&rp);
    rp.prompt = seg;
    la_err err = {0};
    rp.method = LA_METHOD_PREFIX;
    rp.recompute_ratio = 0.1f;
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "recompute_ratio applies to the block-wise methods"), "%s", err.msg);
    rp.method = LA_METHOD_LAZY;
    rp.recompute_ratio = 1.5f;
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "recompute_ratio=1.5"), "%s", err.msg);
    rp.recompute_ratio = 0.0f / 0.0f;
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    /* the engine's R does not reach prefix (documents inline) */
    la_rng rng;
    la_rng_seed(&rng, 24);
    const int32_t lens[1] = {20};
    docset d;
    make_docs(&rng, &d, 1, lens);
    int32_t order[1] = {0};
    la_test_gen p, one;
    run(e, LA_METHOD_PREFIX, &d, order, q, 3, -1, &p);
    cr_assert_eq(p.stats.doc_tokens_probed, 0);
    run(e, LA_METHOD_LAZY, &d, order, q, 3, -1, &one);
    cr_assert_eq(one.stats.doc_tokens_probed, 0);
    cr_assert_eq(one.stats.doc_tokens_recomputed, 0);
    la_test_gen_free(&p), la_test_gen_free(&one);
    free_docs(&d);
    la_engine_destroy(e);

    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.recompute_ratio = -0.5f;
    cr_assert_eq(la_engine_create(&o, &e, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "recompute_ratio=-0.5 must be in [0, 1]"), "%s", err.msg);
}
