/* Documents computed after the preamble (doc_context PREAMBLE, kv/plan.h "Documents after
 * the preamble"): every document d >= 1 computed at P.. seeing document 0, then placed at
 * its slot. Against transformers (tools/oracle/preamble_fixture.py, two forwards with the
 * cache re-rotated) on all six tiny models, with and without selected recovery on top;
 * lazy, mepic and block agree (one mathematics, three storage formats); R = 1 is full
 * recompute; documents are found again in any order under the same preamble and never
 * under another one or computed alone; a step budget of 8 tokens (jobs waiting for the
 * preamble, over several steps) gives what one step gives; a failed document 0 drops the
 * documents waiting on it; bad values are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/file.h"
#include "common/engine_util.h"
#include "common/fixture.h"
#include "common/test_util.h"
#include "engine/engine_internal.h"
#include "engine/sampling.h"

#define LOGIT_TOL 1e-4
#define N_GEN 5

static la_engine *engine_dc(const char *dir, la_doc_context dc, int32_t max_batch_tokens, float ratio) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = dir;
    o.doc_context = dc;
    o.recompute_ratio = ratio;
    o.kv_blocks = 4096;
    o.block_size = 16;
    o.n_threads = 2;
    if (max_batch_tokens) o.max_batch_tokens = max_batch_tokens;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    return e;
}

static char g_dir[512];

static const char *tiny_dir(void) {
    snprintf(g_dir, sizeof g_dir, "%s/tests/fixtures/models/tiny-f32-tied", LA_SOURCE_DIR);
    return g_dir;
}

static void assert_same(const la_test_gen *a, const la_test_gen *ref, const char *what) {
    cr_assert_eq(a->n_tokens, ref->n_tokens, "%s", what);
    double d = la_test_gen_max_diff(a, ref);
    cr_assert(d <= LOGIT_TOL, "%s: logits differ by %.3g", what, d);
    for (int32_t i = 0; i < a->n_tokens; i++) cr_assert_eq(a->tokens[i], ref->tokens[i], "%s: token %d", what, i);
}

/* Random documents: ids[k] of len[k] tokens. */
static void make_docs(uint64_t seed, int32_t n, const int32_t *len, int32_t **ids) {
    la_rng rng;
    la_rng_seed(&rng, seed);
    for (int32_t k = 0; k < n; k++) {
        ids[k] = malloc(sizeof(int32_t) * (size_t)len[k]);
        for (int32_t t = 0; t < len[k]; t++) ids[k][t] = (int32_t)(la_rng_next(&rng) % 500);
    }
}

static void run(la_engine *e, la_method m, int32_t **ids, const int32_t *len, int32_t n, const int32_t *order,
                float ratio, la_test_gen *g) {
    static const int32_t q[6] = {11, 12, 13, 14, 15, 16};
    la_test_generate_docs(e, m, ids, len, n, order, q, 6, NULL, -1, ratio, N_GEN, g);
    cr_assert_eq(g->status, LA_OK, "%s", g->error);
}

/* ---- transformers ------------------------------------------------------------------- */

static void hf_cases(const char *name, la_method method) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", LA_SOURCE_DIR, name);
    snprintf(path, sizeof path, "%s/preamble_oracle.json", dir);
    char *text = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_file_read(path, &text, NULL, &err), err);
    cJSON *oracle = cJSON_Parse(text);
    free(text);
    cr_assert(oracle, "%s: not JSON", path);
    la_engine *e = engine_dc(dir, LA_DOC_CONTEXT_PREAMBLE, 0, 0.0f);
    int n_cases = 0, n_selected = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(oracle, "cases")) {
        const cJSON *segs = cJSON_GetObjectItem(c, "segments"), *rows = cJSON_GetObjectItem(c, "rows");
        int32_t n_segs = cJSON_GetArraySize(segs), lens[16];
        int32_t *ids[16];
        la_segment docs[16];
        cr_assert(n_segs <= 16);
        const float ratio = (float)cJSON_GetObjectItem(c, "ratio")->valuedouble;
        int64_t expect = 0;
        for (int32_t s = 0; s < n_segs; s++) {
            ids[s] = la_test_json_ints(cJSON_GetArrayItem(segs, s), &lens[s]);
            docs[s] = (la_segment){.ids = ids[s], .n_ids = lens[s]};
            if (rows && s < n_segs - 1) expect += cJSON_GetArraySize(cJSON_GetArrayItem(rows, s));
        }
        int32_t n_ref, nv;
        int32_t *ref = la_test_json_ints(cJSON_GetObjectItem(c, "greedy"), &n_ref);
        float *ref_last = la_test_json_floats(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "logits"), 0), &nv);
        const char *case_name = cJSON_GetObjectItem(c, "name")->valuestring;
        for (int rep = 0; rep < 2; rep++) { /* cold, then every document found */
            la_test_gen g;
            la_test_generate_segs(e, method, docs, n_segs - 1, docs[n_segs - 1], NULL, -1, ratio, n_ref, &g);
            cr_assert_eq(g.status, LA_OK, "%s", g.error);
            cr_assert_eq(g.n_vocab, nv);
            size_t at;
            double d = la_test_max_abs_diff(g.logits, ref_last, (size_t)nv, &at);
            cr_assert(d <= LOGIT_TOL, "%s %s case %s R %g rep %d: last tail logits differ by %.3g at %zu", name,
                      la_method_name(method), case_name, (double)ratio, rep, d, at);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(g.tokens[i], ref[i], "%s %s case %s R %g rep %d: token %d is %d, HF %d", name,
                             la_method_name(method), case_name, (double)ratio, rep, i, g.tokens[i], ref[i]);
            cr_assert_eq(g.stats.doc_tokens_recomputed, expect, "%s case %s R %g", name, case_name, (double)ratio);
            if (rep == 1) cr_assert_eq(g.stats.doc_tokens_computed, 0, "%s case %s: documents cached", name, case_name);
            la_test_gen_free(&g);
        }
        n_cases++;
        n_selected += ratio > 0.0f;
        for (int32_t s = 0; s < n_segs; s++) free(ids[s]);
        free(ref);
        free(ref_last);
    }
    cr_assert(n_cases >= 7 && n_selected >= 2, "%s: %d cases, %d with selected recovery", name, n_cases, n_selected);
    cJSON_Delete(oracle);
    la_err cerr;
    LA_CHECK_OK(la_engine_check(e, &cerr), cerr);
    la_engine_destroy(e);
}

Test(doc_context, every_method_matches_transformers) {
    const la_method ms[3] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK};
    for (int m = 0; m < LA_TEST_N_MODELS; m++)
        for (int k = 0; k < 3; k++) hf_cases(la_test_models[m], ms[k]);
}

/* ---- properties on the tiny f32 model ------------------------------------------------ */

/* Block-boundary and odd lengths, two orders: mepic and block give lazy's answer; the
 * documents are found again reordered under the same preamble (nothing computed) and the
 * answer is a cold engine's for that order; alone is a different encoding. */
Test(doc_context, methods_agree_and_documents_are_reused_in_any_order) {
    la_engine *pre = engine_dc(tiny_dir(), LA_DOC_CONTEXT_PREAMBLE, 0, 0.0f);
    la_engine *alone = engine_dc(tiny_dir(), LA_DOC_CONTEXT_ALONE, 0, 0.0f);
    const int32_t len[5] = {21, 16, 33, 50, 3};
    int32_t *ids[5];
    make_docs(31, 5, len, ids);
    const int32_t orders[2][5] = {{0, 1, 2, 3, 4}, {0, 3, 1, 4, 2}};
    for (int o = 0; o < 2; o++) {
        la_test_gen lz, al;
        run(pre, LA_METHOD_LAZY, ids, len, 5, orders[o], -1.0f, &lz);
        if (o == 1) cr_assert_eq(lz.stats.doc_tokens_computed, 0, "reordered under one preamble: all found");
        la_engine *cold = engine_dc(tiny_dir(), LA_DOC_CONTEXT_PREAMBLE, 0, 0.0f);
        la_test_gen c;
        run(cold, LA_METHOD_LAZY, ids, len, 5, orders[o], -1.0f, &c);
        assert_same(&lz, &c, "found against computed");
        la_test_gen_free(&c);
        la_engine_destroy(cold);
        const la_method ms[2] = {LA_METHOD_MEPIC, LA_METHOD_BLOCK};
        for (int k = 0; k < 2; k++) {
            la_test_gen g;
            run(pre, ms[k], ids, len, 5, orders[o], -1.0f, &g);
            char what[64];
            snprintf(what, sizeof what, "order %d, %s", o, la_method_name(ms[k]));
            assert_same(&g, &lz, what);
            la_test_gen_free(&g);
        }
        run(alone, LA_METHOD_LAZY, ids, len, 5, orders[o], -1.0f, &al);
        cr_assert(la_test_gen_max_diff(&al, &lz) > 1e-3, "alone equals after the preamble: the option does nothing");
        cr_assert_eq(al.stats.doc_tokens_computed, o == 0 ? 21 + 16 + 33 + 50 + 3 : 0,
                     "an engine of its own: computed once");
        la_test_gen_free(&lz), la_test_gen_free(&al);
    }
    /* another preamble: the later documents are computed again */
    const int32_t order2[5] = {3, 1, 2, 0, 4};
    la_test_gen other;
    run(pre, LA_METHOD_LAZY, ids, len, 5, order2, -1.0f, &other);
    cr_assert_eq(other.stats.doc_tokens_computed, 50 + 16 + 33 + 21 + 3,
                 "document 3 first (cached only after document 0 so far): every document computed");
    /* and a request asking for alone on this engine finds documents 0 and 3 (computed
     * alone as preambles) and none of the copies computed after a preamble */
    la_segment segs[5];
    for (int k = 0; k < 5; k++) segs[k] = (la_segment){.ids = ids[k], .n_ids = len[k]};
    la_request_params rp;
    la_request_params_init(&rp);
    static const int32_t q[6] = {11, 12, 13, 14, 15, 16};
    rp.docs = segs, rp.n_docs = 5, rp.prompt = (la_segment){.ids = q, .n_ids = 6}, rp.add_special = false;
    rp.doc_context = LA_DOC_CONTEXT_ALONE;
    la_test_gen own;
    la_test_generate(pre, &rp, &own);
    cr_assert_eq(own.status, LA_OK, "%s", own.error);
    cr_assert_eq(own.stats.doc_tokens_computed, 16 + 33 + 3, "alone found a copy computed after a preamble");
    la_test_gen_free(&own);
    la_test_gen_free(&other);
    la_err err;
    LA_CHECK_OK(la_engine_check(pre, &err), err);
    for (int k = 0; k < 5; k++) free(ids[k]);
    la_engine_destroy(pre), la_engine_destroy(alone);
}

/* R = 1 on top: every later token recomputed in context, which is full causal attention. */
Test(doc_context, recomputing_every_document_token_equals_full_recompute) {
    la_engine *e = engine_dc(tiny_dir(), LA_DOC_CONTEXT_PREAMBLE, 0, 0.0f);
    const int32_t len[4] = {23, 40, 16, 9};
    int32_t *ids[4];
    make_docs(32, 4, len, ids);
    int32_t all[256], n = 0;
    for (int k = 0; k < 4; k++) memcpy(all + n, ids[k], sizeof(int32_t) * (size_t)len[k]), n += len[k];
    const int32_t q[6] = {11, 12, 13, 14, 15, 16};
    memcpy(all + n, q, sizeof q), n += 6;
    la_test_gen rc;
    la_test_generate_segs(e, LA_METHOD_RECOMPUTE, NULL, 0, (la_segment){.ids = all, .n_ids = n}, NULL, -1, -1.0f, N_GEN,
                          &rc);
    const la_method ms[3] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK};
    for (int k = 0; k < 3; k++) {
        la_test_gen g;
        run(e, ms[k], ids, len, 4, NULL, 1.0f, &g);
        assert_same(&g, &rc, la_method_name(ms[k]));
        cr_assert_eq(g.stats.doc_tokens_recomputed, 40 + 16 + 9);
        la_test_gen_free(&g);
    }
    la_test_gen_free(&rc);
    for (int k = 0; k < 4; k++) free(ids[k]);
    la_engine_destroy(e);
}

/* A step budget of 8 tokens: the preamble's job and the documents' jobs go over several
 * steps (a document waits until the preamble is ready), with and without R = 0.5. */
Test(doc_context, chunked_over_steps_equals_one_step) {
    const int32_t len[4] = {19, 16, 25, 7};
    int32_t *ids[4];
    make_docs(33, 4, len, ids);
    for (int r = 0; r < 2; r++) {
        const float ratio = r ? 0.5f : 0.0f;
        la_engine *big = engine_dc(tiny_dir(), LA_DOC_CONTEXT_PREAMBLE, 0, ratio);
        la_engine *small = engine_dc(tiny_dir(), LA_DOC_CONTEXT_PREAMBLE, 8, ratio);
        const la_method ms[3] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK};
        for (int k = 0; k < 3; k++) {
            la_test_gen a, b;
            run(big, ms[k], ids, len, 4, NULL, -1.0f, &a);
            run(small, ms[k], ids, len, 4, NULL, -1.0f, &b);
            char what[64];
            snprintf(what, sizeof what, "%s R %g", la_method_name(ms[k]), (double)ratio);
            assert_same(&b, &a, what);
            cr_assert_eq(b.stats.doc_tokens_recomputed, a.stats.doc_tokens_recomputed, "%s", what);
            la_test_gen_free(&a), la_test_gen_free(&b);
        }
        la_err err;
        LA_CHECK_OK(la_engine_check(small, &err), err);
        la_engine_destroy(big), la_engine_destroy(small);
    }
    for (int k = 0; k < 4; k++) free(ids[k]);
}

/* A failed forward while document 0 is computed (la_engine_fail_forward_in; the first step
 * computes document 0 alone, the others wait for it): the request fails with the step's
 * error, the jobs waiting on that document 0 are dropped with it (the engine goes idle with
 * nothing pinned), and the same request afterwards equals a fresh engine's. */
Test(doc_context, a_failed_document_0_drops_the_documents_waiting_on_it) {
    const int32_t len[4] = {19, 16, 25, 7};
    int32_t *ids[4];
    make_docs(35, 4, len, ids);
    la_engine *fresh = engine_dc(tiny_dir(), LA_DOC_CONTEXT_PREAMBLE, 0, 0.0f);
    la_test_gen ref, g, again;
    run(fresh, LA_METHOD_LAZY, ids, len, 4, NULL, -1.0f, &ref);
    la_engine_destroy(fresh);

    la_engine *e = engine_dc(tiny_dir(), LA_DOC_CONTEXT_PREAMBLE, 0, 0.0f);
    static const int32_t q[6] = {11, 12, 13, 14, 15, 16};
    la_segment segs[4];
    for (int k = 0; k < 4; k++) segs[k] = (la_segment){.ids = ids[k], .n_ids = len[k]};
    la_request_params p =
        la_test_segs_params(LA_METHOD_LAZY, segs, 4, (la_segment){.ids = q, .n_ids = 6}, NULL, -1, -1.0f, N_GEN);
    p.on_event = la_test_on_event;
    p.user = &g;
    memset(&g, 0, sizeof g);
    la_err err = {0};
    LA_CHECK_OK(la_engine_submit(e, &p, NULL, &err), err);
    la_engine_fail_forward_in(e, 1);
    cr_assert_eq(la_engine_step(e, &err), LA_ERR_BACKEND, "%s", err.msg);
    for (int i = 0; i < 50 && la_engine_has_work(e); i++) la_engine_step(e, &err);
    cr_assert(g.done && g.finish == LA_FINISH_ERROR && strstr(g.error, "injected"), "finish %d: %s", g.finish,
              g.error);
    cr_assert(!la_engine_has_work(e), "jobs left waiting on a document 0 that will never be ready");
    LA_CHECK_OK(la_engine_check(e, &err), err);
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_pinned, 0);
    run(e, LA_METHOD_LAZY, ids, len, 4, NULL, -1.0f, &again);
    assert_same(&again, &ref, "the same request after the failure");
    cr_assert_eq(again.stats.doc_tokens_computed, 19 + 16 + 25 + 7, "every document computed again");
    /* a failed step without an error out-parameter: the request still gets the message */
    la_test_gen_free(&g);
    memset(&g, 0, sizeof g);
    p.prompt = (la_segment){.ids = q, .n_ids = 5};
    LA_CHECK_OK(la_engine_submit(e, &p, NULL, &err), err);
    la_engine_fail_forward_in(e, 1);
    cr_assert_eq(la_engine_step(e, NULL), LA_ERR_BACKEND);
    cr_assert(g.done && g.finish == LA_FINISH_ERROR && strstr(g.error, "injected"), "%s", g.error);
    la_test_gen_free(&ref), la_test_gen_free(&g), la_test_gen_free(&again);
    la_engine_destroy(e);
    for (int k = 0; k < 4; k++) free(ids[k]);
}

/* PREAMBLE under a method that does not cache documents, an unknown value, an engine
 * default out of range: refused with a message. The engine default does not reach
 * block-ref (it computes documents fresh). One document: nothing changes. */
Test(doc_context, bad_values_and_defaults) {
    la_engine *e = engine_dc(tiny_dir(), LA_DOC_CONTEXT_PREAMBLE, 0, 0.0f);
    int32_t q[3] = {1, 2, 3}, d0[5] = {7, 8, 9, 10, 11}, d1[4] = {20, 21, 22, 23};
    la_segment docs[2] = {{.ids = d0, .n_ids = 5}, {.ids = d1, .n_ids = 4}};
    la_request_params rp;
    la_request_params_init(&rp);
    cr_assert_eq(rp.doc_context, LA_DOC_CONTEXT_COUNT, "the default is the engine's");
    rp.prompt = (la_segment){.ids = q, .n_ids = 3};
    rp.docs = docs;
    rp.n_docs = 2;
    rp.add_special = false;
    la_err err = {0};
    const la_method no[2] = {LA_METHOD_BLOCK_REF, LA_METHOD_PREFIX};
    for (int k = 0; k < 2; k++) {
        rp.method = no[k];
        rp.n_docs = no[k] == LA_METHOD_PREFIX ? 0 : 2;
        rp.doc_context = LA_DOC_CONTEXT_PREAMBLE;
        cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG, "%s", la_method_name(no[k]));
        cr_assert(strstr(err.msg, "doc_context preamble applies to the methods that cache documents"), "%s", err.msg);
    }
    rp.method = LA_METHOD_LAZY;
    rp.n_docs = 2;
    rp.doc_context = (la_doc_context)7;
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "doc_context=7"), "%s", err.msg);
    /* block-ref under an engine whose default is PREAMBLE: alone, as block-ref computes */
    la_test_gen ref, lz_alone;
    la_test_generate_segs(e, LA_METHOD_BLOCK_REF, docs, 2, rp.prompt, NULL, -1, -1.0f, 3, &ref);
    cr_assert_eq(ref.status, LA_OK, "%s", ref.error);
    la_engine *al = engine_dc(tiny_dir(), LA_DOC_CONTEXT_ALONE, 0, 0.0f);
    la_test_generate_segs(al, LA_METHOD_LAZY, docs, 2, rp.prompt, NULL, -1, -1.0f, 3, &lz_alone);
    cr_assert(la_test_gen_max_diff(&ref, &lz_alone) <= LOGIT_TOL, "block-ref took the preamble default");
    /* one document: the same as alone */
    la_test_gen one_pre, one_alone;
    la_test_generate_segs(e, LA_METHOD_LAZY, docs, 1, rp.prompt, NULL, -1, -1.0f, 3, &one_pre);
    la_test_generate_segs(al, LA_METHOD_LAZY, docs, 1, rp.prompt, NULL, -1, -1.0f, 3, &one_alone);
    cr_assert(la_test_gen_max_diff(&one_pre, &one_alone) == 0.0, "one document changed");
    la_test_gen_free(&ref), la_test_gen_free(&lz_alone), la_test_gen_free(&one_pre), la_test_gen_free(&one_alone);
    la_engine_destroy(e), la_engine_destroy(al);

    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.doc_context = (la_doc_context)5;
    cr_assert_eq(la_engine_create(&o, &e, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "doc_context"), "%s", err.msg);
}
