/* The forward pass against Hugging Face transformers: logits at every position of every
 * fixture prompt (tests/fixtures/models/<m>/oracle.json; regenerate with
 * `python3 tools/oracle/make_models.py`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/fixture.h"
#include "common/test_util.h"
#include "engine/backend_model.h"
#include "engine/forward.h"
#include "model/config.h"
#include "model/weights.h"

/* f32 compute on both sides (the bf16 checkpoint is upcast by the oracle too), so the only
 * differences are summation order and RoPE angle precision: measured ~2e-5. */
#define LOGIT_TOL 1e-4

/* A CPU backend with fixture model `name` loaded and a pool of n_blocks x B slots. */
typedef struct loaded {
    char dir[512];
    la_model_config cfg;
    la_weights *w;
    la_backend *be;
} loaded;

static void load(const char *name, int threads, int32_t n_blocks, int32_t B, loaded *m) {
    snprintf(m->dir, sizeof m->dir, "%s/tests/fixtures/models/%s", LA_SOURCE_DIR, name); /* the oracle's too */
    la_test_load_fixture_model(name, &m->cfg, &m->w);
    la_err err = {0};
    m->be = NULL;
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CPU, threads, &m->be, &err), err);
    LA_CHECK_OK(la_backend_load_model(m->be, &m->cfg, m->w, &err), err);
    LA_CHECK_OK(m->be->ops->kv_alloc(m->be, n_blocks, B, &err), err);
}

static void unload(loaded *m) {
    la_backend_destroy(m->be);
    la_weights_destroy(m->w);
}

static void check_model(const char *name) {
    const int32_t B = 16, n_blocks = 16;
    loaded lm;
    load(name, 2, n_blocks, B, &lm);
    const char *dir = lm.dir;
    la_model_config cfg = lm.cfg;
    la_backend *be = lm.be;
    la_err err = {0};

    cJSON *oracle = la_test_oracle(dir);
    const cJSON *p;
    int n_checked = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(oracle, "prompts")) {
        int32_t n;
        int32_t *ids = la_test_json_ints(cJSON_GetObjectItem(p, "ids"), &n);
        cr_assert(n <= n_blocks * B);
        int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
        int64_t *slots = malloc(sizeof(int64_t) * (size_t)n);
        int32_t *rows = malloc(sizeof(int32_t) * (size_t)n);
        la_attn_block blocks[16];
        for (int32_t t = 0; t < n; t++) pos[t] = rows[t] = t, slots[t] = t;
        int32_t nb = (n + B - 1) / B;
        for (int32_t b = 0; b < nb; b++)
            blocks[b] = (la_attn_block){b, n - b * B < B ? n - b * B : B, b * B, 0, 0};
        la_batch_seq seq = {0, n, 0, nb};
        la_batch batch = {n, ids, pos, pos, slots, 1, &seq, nb, blocks, n, rows};
        float *logits = malloc(sizeof(float) * (size_t)n * (size_t)cfg.vocab_size);
        LA_CHECK_OK(la_forward(be, &batch, logits, &err), err);
        int32_t t = 0;
        const cJSON *row;
        cJSON_ArrayForEach(row, cJSON_GetObjectItem(p, "logits")) {
            int32_t nv;
            float *ref = la_test_json_floats(row, &nv);
            cr_assert_eq(nv, cfg.vocab_size);
            size_t at;
            double d = la_test_max_abs_diff(logits + (size_t)t * nv, ref, (size_t)nv, &at);
            cr_assert(d <= LOGIT_TOL, "%s prompt '%.30s' position %d: max |diff| %.3g at token %zu "
                      "(ours %.6f, HF %.6f)", name, cJSON_GetObjectItem(p, "text")->valuestring, t,
                      d, at, logits[(size_t)t * nv + at], ref[at]);
            free(ref);
            t++;
        }
        cr_assert_eq(t, n);
        n_checked++;
        free(ids);
        free(pos);
        free(slots);
        free(rows);
        free(logits);
    }
    cr_assert(n_checked >= 6);
    cJSON_Delete(oracle);
    unload(&lm);
}

Test(forward_hf, f32_tied_llama3_logits_match_transformers) { check_model("tiny-f32-tied"); }
Test(forward_hf, bf16_untied_mqa_head_dim_24_logits_match_transformers) { check_model("tiny-bf16-untied"); }
Test(forward_hf, f32_linear_rope_mha_logits_match_transformers) { check_model("tiny-f32-linear"); }
Test(forward_hf, qwen2_qkv_bias_logits_match_transformers) { check_model("tiny-qwen2"); }
Test(forward_hf, qwen3_qk_norm_head_dim_24_bf16_logits_match_transformers) { check_model("tiny-qwen3"); }
Test(forward_hf, mistral_logits_match_transformers) { check_model("tiny-mistral"); }

/* Steps whose logit rows are not every row in order run the last layer's W_o and MLP on
 * the logit rows alone (forward.c). For each fixture model, on the longest oracle prompt of
 * n tokens: (1) logit rows {n - 1, 0, n / 2}, out of order, match transformers at those
 * positions; (2) a step of the first n - 1 tokens with no logit rows, then a one-token step
 * of token n - 1 attending to the cached slots, matches transformers at position n - 1, so
 * the first step wrote every row's K and V in every layer, the last included. */
static void check_logit_row_subsets(const char *name) {
    const int32_t B = 16;
    loaded lm;
    load(name, 2, 32, B, &lm);
    const int32_t V = lm.cfg.vocab_size;
    cJSON *oracle = la_test_oracle(lm.dir);
    const cJSON *p, *best = NULL;
    int32_t n = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(oracle, "prompts")) {
        int32_t m = cJSON_GetArraySize(cJSON_GetObjectItem(p, "ids"));
        if (m > n) n = m, best = p;
    }
    cr_assert(best && n >= 4 && 2 * n <= 16 * B, "%s: longest prompt %d tokens", name, n);
    int32_t m_ids;
    int32_t *ids = la_test_json_ints(cJSON_GetObjectItem(best, "ids"), &m_ids);
    const cJSON *ref_rows = cJSON_GetObjectItem(best, "logits");
    float *logits = malloc(sizeof(float) * 3 * (size_t)V);
    const int32_t rows[3] = {n - 1, 0, n / 2}, row0 = 0;
    la_test_seq_step(lm.be, ids, 0, n, B, 0, rows, 3, logits);
    for (int i = 0; i < 4; i++) { /* i == 3: (2), position n - 1 */
        if (i == 3) {
            la_test_seq_step(lm.be, ids, 0, n - 1, B, 16, NULL, 0, NULL);
            la_test_seq_step(lm.be, ids, n - 1, 1, B, 16, &row0, 1, logits);
        }
        const int32_t at_pos = i < 3 ? rows[i] : n - 1;
        float *ref = la_test_json_floats(cJSON_GetArrayItem(ref_rows, at_pos), &m_ids);
        size_t at;
        double d = la_test_max_abs_diff(logits + (size_t)(i < 3 ? i : 0) * V, ref, (size_t)V, &at);
        cr_assert(d <= LOGIT_TOL, "%s: %s position %d: max |diff| %.3g", name,
                  i < 3 ? "logit row subset," : "after a step without logit rows,", at_pos, d);
        free(ref);
    }
    free(ids), free(logits);
    cJSON_Delete(oracle);
    unload(&lm);
}

Test(forward_hf, logit_row_subsets_and_steps_without_logits_match_transformers) {
    check_logit_row_subsets("tiny-f32-tied");
    check_logit_row_subsets("tiny-bf16-untied");
    check_logit_row_subsets("tiny-qwen2");
    check_logit_row_subsets("tiny-qwen3");
}

/* From 256 rows without logits on, the last layer's W_q and attention run on the logit
 * rows alone too, as a second batch of one-row sequences (forward.c). On a 300-token
 * prompt (longer than the oracle's): logit rows {299, 0, 150, 257}, and a 299-token step
 * without logits followed by token 299 alone, equal the logits of the step that computes
 * every row (the path the transformers tests above check) to f32 rounding: within 4e-6
 * of the row's largest logit. The Qwen models: their q_norm and biases on that path too. */
static void check_last_layer_attention(const char *name) {
    const int32_t B = 16, n = 300;
    loaded lm;
    load(name, 2, 64, B, &lm);
    const int32_t V = lm.cfg.vocab_size;
    int32_t ids[300], all_rows[300];
    for (int32_t t = 0; t < n; t++) ids[t] = (t * 37 + 11) % V, all_rows[t] = t;
    float *all = malloc(sizeof(float) * (size_t)n * (size_t)V), *sub = malloc(sizeof(float) * 4 * (size_t)V);
    la_test_seq_step(lm.be, ids, 0, n, B, 0, all_rows, n, all);
    const int32_t rows[4] = {299, 0, 150, 257}, row0 = 0;
    la_test_seq_step(lm.be, ids, 0, n, B, 20, rows, 4, sub);
    for (int i = 0; i < 5; i++) {
        if (i == 4) {
            la_test_seq_step(lm.be, ids, 0, n - 1, B, 40, NULL, 0, NULL);
            la_test_seq_step(lm.be, ids, n - 1, 1, B, 40, &row0, 1, sub);
        }
        const int32_t r = i < 4 ? rows[i] : n - 1;
        size_t at;
        double d = la_test_max_abs_diff(sub + (size_t)(i < 4 ? i : 0) * V, all + (size_t)r * V, (size_t)V, &at);
        /* relative to the row's largest logit: the one-row step runs OpenBLAS's GEMV
         * kernels, the 300-row step its GEMM kernels, whose rounding differs by CPU */
        double big = 1;
        for (int32_t c = 0; c < V; c++) big = fmax(big, fabs((double)all[(size_t)r * V + c]));
        cr_assert(d <= 4e-6 * big, "%s position %d (%s): max |diff| %.3g against the every-row step (bound %.3g)",
                  name, r, i < 4 ? "logit row subset" : "after a step without logit rows", d, 4e-6 * big);
    }
    free(all), free(sub);
    unload(&lm);
}

Test(forward_hf, last_layer_attention_on_logit_rows_equals_every_row_step) {
    check_last_layer_attention("tiny-bf16-untied");
    check_last_layer_attention("tiny-qwen2");
    check_last_layer_attention("tiny-qwen3");
}

/* Logit rows of several sequences in one step: each row's last-layer attention must read
 * its own sequence's blocks (forward.c logit_row_batch). Two sequences of n0 and n1 tokens
 * (blocks 0.. and 20..), logit rows out of order from both and from their middles, against
 * each sequence run alone with every row's logits (blocks 40.. and 60..): once with more
 * than 256 rows without logits (W_q and the attention on the logit rows too) and once
 * with fewer (W_o and the MLP only). */
static void check_two_sequences(la_backend *be, int32_t V, int32_t n0, int32_t n1, const int32_t *rows, int32_t n_rows) {
    const int32_t B = 16, n = n0 + n1, nb0 = (n0 + B - 1) / B, nb1 = (n1 + B - 1) / B;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *all_rows = malloc(sizeof(int32_t) * (size_t)n);
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)n);
    la_attn_block blocks[40];
    cr_assert(nb0 <= 20 && nb1 <= 20);
    for (int32_t t = 0; t < n; t++) {
        const bool second = t >= n0;
        const int32_t p = second ? t - n0 : t;
        ids[t] = ((second ? 7 : 3) * p + 11 * (second ? 2 : 1)) % V, pos[t] = p, all_rows[t] = t;
        slots[t] = (int64_t)(second ? 20 : 0) * B + p;
    }
    for (int32_t b = 0; b < nb0; b++) blocks[b] = (la_attn_block){b, n0 - b * B < B ? n0 - b * B : B, b * B, 0, 0};
    for (int32_t b = 0; b < nb1; b++) blocks[nb0 + b] = (la_attn_block){20 + b, n1 - b * B < B ? n1 - b * B : B, b * B, 0, 0};
    const la_batch_seq seqs[3] = {{0, n0, 0, nb0}, {n0, 0, 0, 0}, {n0, n1, nb0, nb1}}; /* the middle one: no rows */
    const la_batch batch = {n, ids, pos, pos, slots, 3, seqs, nb0 + nb1, blocks, n_rows, rows};
    float *got = malloc(sizeof(float) * (size_t)n_rows * (size_t)V);
    float *ref0 = malloc(sizeof(float) * (size_t)n0 * (size_t)V), *ref1 = malloc(sizeof(float) * (size_t)n1 * (size_t)V);
    la_err err = {0};
    LA_CHECK_OK(la_forward(be, &batch, got, &err), err);
    la_test_seq_step(be, ids, 0, n0, B, 40, all_rows, n0, ref0);
    la_test_seq_step(be, ids + n0, 0, n1, B, 60, all_rows, n1, ref1);
    for (int32_t i = 0; i < n_rows; i++) {
        const int32_t r = rows[i];
        const float *ref = r < n0 ? ref0 + (size_t)r * V : ref1 + (size_t)(r - n0) * V;
        size_t at;
        double d = la_test_max_abs_diff(got + (size_t)i * V, ref, (size_t)V, &at);
        cr_assert(d <= 1e-5, "%d + %d tokens: logit row %d (batch row %d, sequence %d): max |diff| %.3g against the "
                  "sequence alone", n0, n1, i, r, r < n0 ? 0 : 2, d);
    }
    free(ids), free(pos), free(all_rows), free(slots), free(got), free(ref0), free(ref1);
}

Test(forward_hf, logit_rows_of_two_sequences_read_their_own_blocks) {
    loaded lm;
    load("tiny-bf16-untied", 2, 80, 16, &lm);
    const int32_t long_rows[4] = {299, 119, 40, 200}; /* 120 + 180 tokens: 296 rows without logits */
    check_two_sequences(lm.be, lm.cfg.vocab_size, 120, 180, long_rows, 4);
    const int32_t short_rows[3] = {129, 59, 10}; /* 60 + 70 tokens: 127 */
    check_two_sequences(lm.be, lm.cfg.vocab_size, 60, 70, short_rows, 3);
    unload(&lm);
}

/* The CPU backend has no argmax_to_host (the engine samples from its logits on the host):
 * la_forward_argmax says so before running anything. */
Test(forward_hf, forward_argmax_without_backend_argmax_is_unsupported) {
    la_err err = {0};
    la_backend *be = NULL;
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CPU, 1, &be, &err), err);
    cr_assert_null(be->ops->argmax_to_host);
    int32_t tok = 0, pos = 0, id = -1;
    int64_t slot = 0;
    la_batch b = {.n_tokens = 1, .tokens = &tok, .pos = &pos, .k_pos = &pos, .slots = &slot};
    cr_assert_eq(la_forward_argmax(be, &b, &id, &err), LA_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "no argmax"), "message: %s", err.msg);
    cr_assert_eq(id, -1);
    la_backend_destroy(be);
}

/* BlockAttention's re-rotated copy on the CPU backend: copying a block of keys written at
 * positions p and rotating it by delta gives the keys written at p + delta, for positive
 * and negative delta (a block moved to an earlier position). */
Test(forward_hf, kv_copy_rotate_matches_keys_written_at_shifted_positions) {
    const int32_t B = 8, n = 8;
    loaded lm;
    load("tiny-f32-tied", 1, 8, B, &lm);
    la_model_config cfg = lm.cfg;
    la_backend *be = lm.be;
    la_err err = {0};
    const int32_t deltas[] = {5, -5, 37, -3};
    for (size_t di = 0; di < sizeof deltas / sizeof deltas[0]; di++) {
        int32_t delta = deltas[di], base = 10;
        /* block 0: tokens at base..base+n-1; block 1: the same tokens at base+delta.. */
        int32_t ids[16], pos[16], kpos[16], rows[16];
        int64_t slots[16];
        for (int32_t t = 0; t < 2 * n; t++) {
            ids[t] = 3 + (t % n) * 7;
            pos[t] = kpos[t] = base + (t % n) + (t >= n ? delta : 0);
            slots[t] = t, rows[t] = t;
        }
        la_attn_block blocks[2] = {{0, n, base, 0, 0}, {1, n, base + delta, 0, 0}};
        la_batch_seq seqs[2] = {{0, n, 0, 1}, {n, n, 1, 1}};
        la_batch batch = {2 * n, ids, pos, kpos, slots, 2, seqs, 2, blocks, 0, rows};
        LA_CHECK_OK(la_forward(be, &batch, NULL, &err), err);
        LA_CHECK_OK(be->ops->kv_copy_rotate(be, 0, 2, n, delta, &err), err);
        int64_t kvd = (int64_t)cfg.n_kv_heads * cfg.head_dim;
        float *k1 = malloc(sizeof(float) * (size_t)kvd), *v1 = malloc(sizeof(float) * (size_t)kvd);
        float *k2 = malloc(sizeof(float) * (size_t)kvd), *v2 = malloc(sizeof(float) * (size_t)kvd);
        double worst = 0;
        for (int32_t l = 0; l < cfg.n_layers; l++)
            for (int32_t j = 0; j < n; j++) {
                LA_CHECK_OK(be->ops->kv_read_slot(be, l, B + j, k1, v1, &err), err);
                LA_CHECK_OK(be->ops->kv_read_slot(be, l, 2 * B + j, k2, v2, &err), err);
                size_t at;
                double d = la_test_max_abs_diff(k1, k2, (size_t)kvd, &at);
                worst = d > worst ? d : worst;
                cr_assert(la_test_max_abs_diff(v1, v2, (size_t)kvd, &at) <= 1e-5);
            }
        cr_assert(worst <= 1e-4, "delta %d: max |K(p+delta) - rotate(K(p), delta)| = %.3g", delta, worst);
        free(k1), free(v1), free(k2), free(v2);
    }
    unload(&lm);
}
