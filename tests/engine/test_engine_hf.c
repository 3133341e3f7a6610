/* The engine end to end against Hugging Face transformers (oracle fixtures; regenerate with
 * `python3 tools/oracle/make_models.py`): greedy continuations of every prompt under every
 * full-attention method, and the block-mask cases (4-D mask in HF) under block-ref, lazy,
 * mepic and block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/engine_util.h"
#include "common/fixture.h"
#include "common/test_util.h"

/* f32 compute on both sides; see tests/model/test_forward_hf.c. */
#define LOGIT_TOL 1e-4

static void model_dir(const char *name, char *dir, size_t n) {
    snprintf(dir, n, "%s/tests/fixtures/models/%s", LA_SOURCE_DIR, name);
}

static void greedy_prompts(const char *name, la_method method) {
    char dir[512];
    model_dir(name, dir, sizeof dir);
    la_engine *e = la_test_engine(dir, 64, 16);
    cJSON *oracle = la_test_oracle(dir);
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(oracle, "prompts")) {
        int32_t n, n_ref;
        int32_t *ids = la_test_json_ints(cJSON_GetObjectItem(p, "ids"), &n);
        int32_t *ref = la_test_json_ints(cJSON_GetObjectItem(p, "greedy"), &n_ref);
        /* twice: the second run of prefix reuses the cached prompt blocks */
        for (int rep = 0; rep < 2; rep++) {
            la_request_params rp;
            la_request_params_init(&rp);
            rp.prompt.ids = ids;
            rp.prompt.n_ids = n;
            rp.add_special = false;
            rp.method = method;
            rp.sampling.max_tokens = n_ref;
            rp.sampling.ignore_eos = true;
            la_test_gen g;
            la_test_generate(e, &rp, &g);
            cr_assert_eq(g.n_tokens, n_ref);
            for (int32_t i = 0; i < n_ref; i++)
                cr_assert_eq(g.tokens[i], ref[i], "%s %s prompt '%.30s' rep %d: token %d is %d, HF %d",
                             name, la_method_name(method), cJSON_GetObjectItem(p, "text")->valuestring,
                             rep, i, g.tokens[i], ref[i]);
            la_test_gen_free(&g);
        }
        free(ids);
        free(ref);
    }
    cJSON_Delete(oracle);
    la_engine_destroy(e);
}

Test(engine_hf, greedy_matches_transformers_recompute) {
    for (int m = 0; m < 3; m++) greedy_prompts(la_test_models[m], LA_METHOD_RECOMPUTE);
}
Test(engine_hf, greedy_matches_transformers_prefix) {
    for (int m = 0; m < 3; m++) greedy_prompts(la_test_models[m], LA_METHOD_PREFIX);
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
        int32_t nv;
        float *ref_last = la_test_json_floats(cJSON_GetArrayItem(rows, n_rows - 1), &nv);
        const char *case_name = cJSON_GetObjectItem(c, "name")->valuestring;
        for (int rep = 0; rep < 2; rep++) { /* cold, then warm cache */
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
            la_test_gen g;
            la_test_generate(e, &rp, &g);
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
        for (int32_t s = 0; s < n_segs; s++) free(ids[s]);
        free(ids);
        free(lens);
        free(docs);
        free(ref);
        free(ref_last);
    }
    cJSON_Delete(oracle);
    la_engine_destroy(e);
}

Test(engine_hf, block_ref_matches_transformers_4d_block_mask) {
    for (int m = 0; m < 3; m++) block_cases(la_test_models[m], LA_METHOD_BLOCK_REF);
}
Test(engine_hf, lazy_matches_transformers_4d_block_mask) {
    for (int m = 0; m < 3; m++) block_cases(la_test_models[m], LA_METHOD_LAZY);
}
Test(engine_hf, mepic_matches_transformers_4d_block_mask) {
    for (int m = 0; m < 3; m++) block_cases(la_test_models[m], LA_METHOD_MEPIC);
}
Test(engine_hf, block_matches_transformers_4d_block_mask) {
    for (int m = 0; m < 3; m++) block_cases(la_test_models[m], LA_METHOD_BLOCK);
}
