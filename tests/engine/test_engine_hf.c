/* The engine end to end against Hugging Face transformers (oracle fixtures; regenerate with
 * `python3 tools/oracle/make_models.py`): greedy continuations of every prompt under every
 * full-attention method, and the block-mask cases (4-D mask in HF) under block-ref, lazy,
 * mepic and block; HF's logits at every prompt and tail position (each prefix of the prompt
 * or tail as a request of its own, after the full one: warm under prefix and the caching
 * methods). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/engine_util.h"
#include "common/fixture.h"
#include "common/test_util.h"

/* f32 compute on both sides; see tests/model/test_forward_hf.c. */
#define LOGIT_TOL 1e-4
#define BS 16
/* what tools/oracle/make_models.py writes per model: 7 prompts, 7 block-mask cases; fewer
 * means a truncated or stale oracle, not a pass */
#define MIN_PROMPTS 7
#define MIN_BLOCK_CASES 7

static void model_dir(const char *name, char *dir, size_t n) {
    snprintf(dir, n, "%s/tests/fixtures/models/%s", LA_SOURCE_DIR, name);
}

/* The logits of the first generated token of p (max_tokens 1) against HF's row. */
static void assert_row(la_engine *e, la_request_params p, const float *want, int32_t nv, const char *what, int32_t row) {
    p.return_logits = true;
    p.sampling.max_tokens = 1;
    la_test_gen g;
    la_test_generate(e, &p, &g);
    cr_assert(g.n_tokens == 1 && g.logits && g.n_vocab == nv, "%s row %d: %d tokens, logits %s, vocab %d of %d",
              what, row, g.n_tokens, g.logits ? "returned" : "missing", g.n_vocab, nv);
    size_t at;
    double d = la_test_max_abs_diff(g.logits, want, (size_t)nv, &at);
    cr_assert(d <= LOGIT_TOL, "%s row %d: logits differ by %.3g at %zu", what, row, d, at);
    la_test_gen_free(&g);
}

static void greedy_prompts(const char *name, la_method method) {
    char dir[512];
    model_dir(name, dir, sizeof dir);
    la_engine *e = la_test_engine(dir, 64, 16);
    cJSON *oracle = la_test_oracle(dir);
    const cJSON *p;
    int32_t n_prompts = 0;
    int64_t warm_reused = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(oracle, "prompts")) {
        int32_t n, n_ref;
        int32_t *ids = la_test_json_ints(cJSON_GetObjectItem(p, "ids"), &n);
        int32_t *ref = la_test_json_ints(cJSON_GetObjectItem(p, "greedy"), &n_ref);
        const char *text = cJSON_GetObjectItem(p, "text")->valuestring;
        la_request_params rp;
        la_request_params_init(&rp);
        rp.prompt.ids = ids;
        rp.prompt.n_ids = n;
        rp.add_special = false;
        rp.method = method;
        rp.sampling.max_tokens = n_ref;
        rp.sampling.ignore_eos = true;
        /* twice: the second run of prefix reuses the cached prompt blocks */
        for (int rep = 0; rep < 2; rep++) {
            la_test_gen g;
            la_test_generate(e, &rp, &g);
            cr_assert_eq(g.n_tokens, n_ref);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(g.tokens[i], ref[i], "%s %s prompt '%.30s' rep %d: token %d is %d, HF %d",
                             name, la_method_name(method), text, rep, i, g.tokens[i], ref[i]);
            /* prefix reuses every full block but the one holding the last prompt token */
            if (rep == 1 && method == LA_METHOD_PREFIX) {
                cr_assert_eq(g.stats.prefix_tokens_reused, (n - 1) / BS * BS, "%s prompt '%.30s': warm reuse %lld",
                             name, text, (long long)g.stats.prefix_tokens_reused);
                warm_reused += g.stats.prefix_tokens_reused;
            }
            la_test_gen_free(&g);
        }
        /* HF's logits at every prompt position: the prompt cut after it */
        const cJSON *rows = cJSON_GetObjectItem(p, "logits");
        cr_assert_eq(cJSON_GetArraySize(rows), n, "%s prompt '%.30s': a logits row per position", name, text);
        char what[128];
        snprintf(what, sizeof what, "%s %s prompt '%.30s'", name, la_method_name(method), text);
        for (int32_t r = 0; r < n; r++) {
            int32_t nv;
            float *want = la_test_json_floats(cJSON_GetArrayItem(rows, r), &nv);
            rp.prompt.n_ids = r + 1;
            assert_row(e, rp, want, nv, what, r);
            free(want);
        }
        free(ids);
        free(ref);
        n_prompts++;
    }
    cr_assert_geq(n_prompts, MIN_PROMPTS, "%s: %d prompts in the oracle", name, n_prompts);
    if (method == LA_METHOD_PREFIX) cr_assert_gt(warm_reused, 0, "%s: the warm prefix runs reused no block", name);
    cJSON_Delete(oracle);
    la_engine_destroy(e);
}

Test(engine_hf, greedy_matches_transformers_recompute) {
    for (int m = 0; m < LA_TEST_N_MODELS; m++) greedy_prompts(la_test_models[m], LA_METHOD_RECOMPUTE);
}
Test(engine_hf, greedy_matches_transformers_prefix) {
    for (int m = 0; m < LA_TEST_N_MODELS; m++) greedy_prompts(la_test_models[m], LA_METHOD_PREFIX);
}
Test(engine_hf, greedy_matches_transformers_lazy_without_documents) {
    greedy_prompts("tiny-f32-tied", LA_METHOD_LAZY);
}

static void block_cases(const char *name, la_method method) {
    char dir[512];
    model_dir(name, dir, sizeof dir);
    la_engine *e = la_test_engine(dir, 128, 16);
    cJSON *oracle = la_test_oracle(dir);
    const cJSON *c;
    int32_t n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(oracle, "block_cases")) {
        const cJSON *segs = cJSON_GetObjectItem(c, "segments");
        int32_t n_segs = cJSON_GetArraySize(segs);
        la_segment *docs = calloc((size_t)n_segs, sizeof(la_segment));
        int32_t **ids = calloc((size_t)n_segs, sizeof(int32_t *));
        int32_t *lens = calloc((size_t)n_segs, sizeof(int32_t));
        for (int32_t s = 0; s < n_segs; s++) {
            ids[s] = la_test_json_ints(cJSON_GetArrayItem(segs, s), &lens[s]);
            docs[s].ids = ids[s];
            docs[s].n_ids = lens[s];
        }
        int32_t n_ref, n_rows;
        int32_t *ref = la_test_json_ints(cJSON_GetObjectItem(c, "greedy"), &n_ref);
        const cJSON *rows = cJSON_GetObjectItem(c, "logits");
        n_rows = cJSON_GetArraySize(rows);
        const char *case_name = cJSON_GetObjectItem(c, "name")->valuestring;
        cr_assert_eq(n_rows, lens[n_segs - 1], "%s case %s: a logits row per tail token", name, case_name);
        int32_t nv;
        float *ref_last = la_test_json_floats(cJSON_GetArrayItem(rows, n_rows - 1), &nv);
        la_request_params rp;
        la_request_params_init(&rp);
        rp.docs = docs;
        rp.n_docs = n_segs - 1;
        rp.prompt = docs[n_segs - 1];
        rp.add_special = false;
        rp.method = method;
        rp.return_logits = true;
        rp.sampling.max_tokens = n_ref;
        rp.sampling.ignore_eos = true;
        for (int rep = 0; rep < 2; rep++) { /* cold, then warm cache */
            la_test_gen g;
            la_test_generate(e, &rp, &g);
            cr_assert(g.n_tokens == n_ref && g.logits, "%s %s case %s rep %d: %d tokens, logits %s", name,
                      la_method_name(method), case_name, rep, g.n_tokens, g.logits ? "returned" : "missing");
            size_t at;
            double d = la_test_max_abs_diff(g.logits, ref_last, (size_t)nv, &at);
            cr_assert(d <= LOGIT_TOL, "%s %s case %s rep %d: last tail logits differ by %.3g at %zu",
                      name, la_method_name(method), case_name, rep, d, at);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(g.tokens[i], ref[i], "%s %s case %s rep %d: token %d is %d, HF %d", name,
                             la_method_name(method), case_name, rep, i, g.tokens[i], ref[i]);
            if (rep == 1 && method != LA_METHOD_BLOCK_REF)
                cr_assert_eq(g.stats.doc_tokens_computed, 0, "%s: warm run recomputed documents", case_name);
            la_test_gen_free(&g);
        }
        /* HF's logits at the other tail positions: the tail cut after each (the last row is
         * the whole request's, checked above) */
        char what[128];
        snprintf(what, sizeof what, "%s %s case %s", name, la_method_name(method), case_name);
        for (int32_t r = 0; r < n_rows - 1; r++) {
            float *want = la_test_json_floats(cJSON_GetArrayItem(rows, r), &nv);
            rp.prompt.n_ids = r + 1;
            assert_row(e, rp, want, nv, what, r);
            free(want);
        }
        for (int32_t s = 0; s < n_segs; s++) free(ids[s]);
        free(ids);
        free(lens);
        free(docs);
        free(ref);
        free(ref_last);
        n_cases++;
    }
    cr_assert_geq(n_cases, MIN_BLOCK_CASES, "%s: %d block cases in the oracle", name, n_cases);
    cJSON_Delete(oracle);
    la_engine_destroy(e);
}

Test(engine_hf, block_ref_matches_transformers_4d_block_mask) {
    for (int m = 0; m < LA_TEST_N_MODELS; m++) block_cases(la_test_models[m], LA_METHOD_BLOCK_REF);
}
Test(engine_hf, lazy_matches_transformers_4d_block_mask) {
    for (int m = 0; m < LA_TEST_N_MODELS; m++) block_cases(la_test_models[m], LA_METHOD_LAZY);
}
Test(engine_hf, mepic_matches_transformers_4d_block_mask) {
    for (int m = 0; m < LA_TEST_N_MODELS; m++) block_cases(la_test_models[m], LA_METHOD_MEPIC);
}
Test(engine_hf, block_matches_transformers_4d_block_mask) {
    for (int m = 0; m < LA_TEST_N_MODELS; m++) block_cases(la_test_models[m], LA_METHOD_BLOCK);
}
