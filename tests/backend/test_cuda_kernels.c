/* The CUDA backend's operations against the CPU backend (backend/cpu), one operation at a
 * time, on the same random inputs: a synthetic Llama-shaped model with random bf16 weights
 * (so both backends hold identical weights), random activations rounded to bf16 on the
 * host (so both read identical inputs), GPU outputs poisoned with NaN before each call
 * (an unwritten element fails the check). Attention cases cover causal prefill, lazy
 * (q_delta per document), mepic (k_rope), mixed decode + prefill batches, long contexts
 * that split over the KV length, 100k-token offsets, block sizes 16, 32 and 48, and the
 * head geometries of Llama-3-8B (head_dim 128, 4 query heads per KV head), Llama-3.2-1B
 * (head_dim 64: every attn_prefill kernel, the wgmma ones included), head_dim 72 and the
 * tiny checkpoints (head_dim 16 and 24, MQA). The helpers: tests/common/cuda_attn_cases.c.
 * Shared-block attention: test_cuda_shared_attn.c.
 *
 * Without a GPU every test prints "skipped: no GPU" and passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/dtype.h"
#include "common/test_util.h"
#include "engine/backend_model.h"
#include "engine/sampling.h"
#include "common/cuda_attn_cases.h"
#ifdef LA_HAVE_CUDA
#include "backend/cuda/cuda_hooks.h"
#include "backend/cuda/cuda_kernels.h"
#endif

#ifndef LA_HAVE_CUDA

Test(cuda_kernels, skipped_without_cuda) {
    printf("skipped: no GPU (this build has no CUDA backend)\n");
}

#else

/* ============================================================ tests: row ops ======== */

static void row_ops(int hidden, int n_heads, int n_kv, int hd, int inter, int vocab) {
    la_test_synth s;
    la_test_synth_init(&s, hidden, n_heads, n_kv, hd, inter, vocab, 2);
    la_test_pair p;
    if (!la_test_pair_open(&p, &s, 64, 16)) return;
    la_err err = {0};
    const int32_t n = 37;
    la_test_builder b;
    la_test_builder_init(&b);
    for (int32_t t = 0; t < n; t++) la_test_add_token(&b, t, t, t);
    for (int32_t t = 0; t < n; t++) b.tokens[t] = (int32_t)(la_test_urand() * vocab);
    int32_t logit_rows[3] = {0, 17, n - 1};
    la_batch batch = la_test_builder_batch(&b);
    batch.n_logit_rows = 3;
    batch.logit_rows = logit_rows;
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->batch_begin(p.be[i], &batch, &err), err);

    la_act x[2], h[2];
    la_test_act_pair(&p, n, hidden, x);
    la_test_act_pair(&p, n, hidden, h);
    la_test_poison_gpu(&p, x);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->embed(p.be[i], &x[i], &err), err);
    la_test_expect_close("embed", x, &p, 0, 0);

    la_test_random_pair(&p, x, -2.f, 2.f);
    la_test_poison_gpu(&p, h);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->rmsnorm(p.be[i], &x[i], LA_W_MLP_NORM, 1, &h[i], &err), err);
    la_test_expect_close("rmsnorm (mlp_norm, layer 1)", h, &p, 0, ROW_TOL_REL);

    const struct {
        la_weight_kind k;
        int64_t in, out;
        const char *name;
    } mm[] = {{LA_W_Q, hidden, (int64_t)n_heads * hd, "matmul q"}, {LA_W_K, hidden, (int64_t)n_kv * hd, "matmul k"},
              {LA_W_V, hidden, (int64_t)n_kv * hd, "matmul v"}, {LA_W_O, (int64_t)n_heads * hd, hidden, "matmul o"},
              {LA_W_GATE, hidden, inter, "matmul gate"}, {LA_W_UP, hidden, inter, "matmul up"},
              {LA_W_DOWN, inter, hidden, "matmul down"}, {LA_W_LM_HEAD, hidden, vocab, "matmul lm_head"}};
    for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++) {
        la_act in[2], out[2];
        la_test_act_pair(&p, n, mm[i].in, in);
        la_test_act_pair(&p, n, mm[i].out, out);
        la_test_random_pair(&p, in, -1.f, 1.f);
        la_test_poison_gpu(&p, out);
        for (int j = 0; j < 2; j++) LA_CHECK_OK(p.be[j]->ops->matmul(p.be[j], &in[j], mm[i].k, 1, &out[j], &err), err);
        la_test_expect_close(mm[i].name, out, &p, 0, GEMM_TOL_REL);
        la_test_act_pair_free(&p, in);
        la_test_act_pair_free(&p, out);
    }

    la_act g[2], u[2];
    la_test_act_pair(&p, n, inter, g);
    la_test_act_pair(&p, n, inter, u);
    la_test_random_pair(&p, g, -4.f, 4.f);
    la_test_random_pair(&p, u, -2.f, 2.f);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->swiglu(p.be[i], &g[i], &u[i], &err), err);
    la_test_expect_close("swiglu", g, &p, 0, ROW_TOL_REL);

    la_test_random_pair(&p, x, -2.f, 2.f);
    la_test_random_pair(&p, h, -2.f, 2.f);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->add(p.be[i], &x[i], &h[i], &err), err);
    la_test_expect_close("add", x, &p, 0, ROW_TOL_REL);

    /* the fused residual add + next norm (GPU) against add then rmsnorm (CPU, its unfused
     * ops, though it has a fused one too): both the stored sum and the norm; out aliases y,
     * as forward.c calls it */
    la_test_random_pair(&p, x, -2.f, 2.f);
    la_test_random_pair(&p, h, -2.f, 2.f);
    LA_CHECK_OK(p.be[0]->ops->add(p.be[0], &x[0], &h[0], &err), err);
    LA_CHECK_OK(p.be[0]->ops->rmsnorm(p.be[0], &x[0], LA_W_ATTN_NORM, 1, &h[0], &err), err);
    LA_CHECK_OK(p.be[1]->ops->add_rmsnorm(p.be[1], &x[1], &h[1], LA_W_ATTN_NORM, 1, &h[1], &err), err);
    la_test_expect_close("add_rmsnorm: x + y", x, &p, 0, ROW_TOL_REL);
    la_test_expect_close("add_rmsnorm: RMSNorm(x + y)", h, &p, 0, 2 * ROW_TOL_REL);

    /* gate_up_swiglu (GPU, one GEMM by the stacked weights, SwiGLU from its output) against
     * the CPU's two matmuls and swiglu (its unfused ops) */
    la_act up2[2];
    la_test_act_pair(&p, n, inter, up2);
    la_test_random_pair(&p, h, -1.f, 1.f);
    la_test_poison_gpu(&p, g);
    LA_CHECK_OK(p.be[0]->ops->matmul(p.be[0], &h[0], LA_W_GATE, 1, &g[0], &err), err);
    LA_CHECK_OK(p.be[0]->ops->matmul(p.be[0], &h[0], LA_W_UP, 1, &up2[0], &err), err);
    LA_CHECK_OK(p.be[0]->ops->swiglu(p.be[0], &g[0], &up2[0], &err), err);
    LA_CHECK_OK(p.be[1]->ops->gate_up_swiglu(p.be[1], &h[1], 1, &g[1], &up2[1], &err), err);
    la_test_expect_close("gate_up_swiglu", g, &p, 0, 2 * GEMM_TOL_REL);
    la_test_act_pair_free(&p, up2);

    la_act last[2], norm[2];
    la_test_act_pair(&p, 3, hidden, last);
    la_test_act_pair(&p, 3, hidden, norm);
    la_test_random_pair(&p, x, -2.f, 2.f); /* identical rows on both sides: the gather is exact */
    la_test_poison_gpu(&p, last);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->gather_rows(p.be[i], &x[i], &last[i], &err), err);
    la_test_expect_close("gather_rows", last, &p, 0, 0);
    for (int i = 0; i < 2; i++)
        LA_CHECK_OK(p.be[i]->ops->rmsnorm(p.be[i], &last[i], LA_W_FINAL_NORM, 0, &norm[i], &err), err);
    la_test_expect_close("rmsnorm (final_norm)", norm, &p, 0, ROW_TOL_REL);

    la_test_act_pair_free(&p, x);
    la_test_act_pair_free(&p, h);
    la_test_act_pair_free(&p, g);
    la_test_act_pair_free(&p, u);
    la_test_act_pair_free(&p, last);
    la_test_act_pair_free(&p, norm);
    la_test_builder_free(&b);
    la_test_pair_close(&p);
    la_test_synth_free(&s);
}

Test(cuda_kernels, row_ops_and_gemms_match_cpu_llama8b_head_geometry) { row_ops(512, 8, 2, 128, 1024, 1000); }
Test(cuda_kernels, row_ops_and_gemms_match_cpu_odd_widths) { row_ops(64, 4, 1, 24, 160, 512); }
/* hidden 8448: RMSNorm rows wider than the 8192 columns its kernel keeps in registers take
 * the two-pass path */
Test(cuda_kernels, row_ops_and_gemms_match_cpu_wide_hidden) { row_ops(8448, 66, 33, 128, 256, 512); }

/* argmax_to_host (greedy decoding on the device) against la_argmax (engine/sampling.c) on
 * the same bf16 values, at Llama-3's vocabulary width and an odd one: random rows, equal
 * maxima far apart (the lowest column wins), NaN (never wins), all NaN, all -inf. */
Test(cuda_kernels, argmax_matches_host_argmax) {
    la_test_synth s;
    la_test_synth_init(&s, 64, 4, 1, 16, 128, 512, 1);
    la_test_pair p;
    if (!la_test_pair_open(&p, &s, 8, 16)) return;
    la_err err = {0};
    const int32_t widths[2] = {128256, 1003}, R = 8;
    for (int wi = 0; wi < 2; wi++) {
        const int32_t w = widths[wi];
        float *h = la_test_random_host((size_t)R * w, -8.f, 8.f);
        float *row[8];
        for (int32_t r = 0; r < R; r++) row[r] = h + (size_t)r * w;
        int32_t want[8] = {-1, 5, 0, w - 3, 0, w - 1, 0, -1}; /* -1: whatever la_argmax says */
        row[1][w - 1] = row[1][5] = row[1][w / 2] = 100.f;
        for (int32_t c = 0; c < w; c++) row[2][c] = 1.f;
        row[3][0] = row[3][7] = NAN;
        row[3][w - 3] = 50.f;
        for (int32_t c = 0; c < w; c++) row[4][c] = NAN, row[5][c] = row[6][c] = -INFINITY;
        row[5][w - 1] = -1e30f;
        for (int32_t c = 0; c < w; c += 3) row[7][c] = NAN; /* NaN among random values */
        la_act x;
        LA_CHECK_OK(p.be[1]->ops->act_alloc(p.be[1], R, w, &x, &err), err);
        LA_CHECK_OK(la_cuda_act_upload(p.be[1], &x, h, &err), err);
        int32_t got[8];
        for (int32_t r = 0; r < R; r++) got[r] = -7;
        LA_CHECK_OK(p.be[1]->ops->argmax_to_host(p.be[1], &x, got, &err), err);
        for (int32_t r = 0; r < R; r++) {
            int32_t ref = la_argmax(row[r], w);
            if (want[r] >= 0) cr_assert_eq(ref, want[r], "width %d row %d: la_argmax %d, planted %d", w, r, ref, want[r]);
            cr_assert_eq(got[r], ref, "width %d row %d: device argmax %d, la_argmax %d", w, r, got[r], ref);
        }
        printf("argmax width %d: %d rows equal to la_argmax\n", w, R);
        p.be[1]->ops->act_free(p.be[1], &x);
        free(h);
    }
    la_test_pair_close(&p);
    la_test_synth_free(&s);
}

Test(cuda_kernels, bad_token_id_is_invalid_arg) {
    la_test_synth s;
    la_test_synth_init(&s, 64, 4, 2, 16, 128, 100, 1);
    la_test_pair p;
    if (!la_test_pair_open(&p, &s, 8, 16)) return;
    la_test_builder b;
    la_test_builder_init(&b);
    la_test_add_token(&b, 0, 0, 0);
    la_test_add_token(&b, 1, 1, 1);
    b.tokens[1] = 100; /* == vocab_size */
    la_batch batch = la_test_builder_batch(&b);
    la_err err = {0};
    LA_CHECK_OK(p.be[1]->ops->batch_begin(p.be[1], &batch, &err), err);
    la_act x;
    LA_CHECK_OK(p.be[1]->ops->act_alloc(p.be[1], 2, 64, &x, &err), err);
    la_status st = p.be[1]->ops->embed(p.be[1], &x, &err);
    cr_assert_eq(st, LA_ERR_INVALID_ARG, "embed of token 100 with vocab 100: %s", la_status_name(st));
    cr_assert(strstr(err.msg, "100") != NULL, "message names the token: %s", err.msg);
    p.be[1]->ops->act_free(p.be[1], &x);
    la_test_builder_free(&b);
    la_test_pair_close(&p);
    la_test_synth_free(&s);
}

Test(cuda_kernels, block_size_not_a_multiple_of_16_is_unsupported) {
    la_test_synth s;
    la_test_synth_init(&s, 64, 4, 2, 16, 128, 100, 1);
    la_backend *be = NULL;
    la_err err = {0};
    la_status st = la_backend_create(LA_DEVICE_CUDA, 0, &be, &err);
    if (st == LA_ERR_UNSUPPORTED) {
        printf("skipped: no GPU (%s)\n", err.msg);
        la_test_synth_free(&s);
        return;
    }
    LA_CHECK_OK(st, err);
    LA_CHECK_OK(la_backend_load_model(be, &s.cfg, &s.w, &err), err);
    st = be->ops->kv_alloc(be, 16, 8, &err);
    cr_assert_eq(st, LA_ERR_UNSUPPORTED, "block_size 8: %s (%s)", la_status_name(st), err.msg);
    LA_CHECK_OK(be->ops->kv_alloc(be, 16, 32, &err), err);
    la_backend_destroy(be);
    la_test_synth_free(&s);
}

/* ============================================================ tests: KV ============= */

Test(cuda_kernels, kv_write_copy_rotate_and_deviation_match_cpu) {
    la_test_synth s;
    la_test_synth_init(&s, 256, 8, 2, 128, 256, 100, 2);
    la_test_pair p;
    const int32_t B = 16;
    if (!la_test_pair_open(&p, &s, 64, B)) return;
    la_err err = {0};
    const la_model_config *m = p.cfg;
    int64_t kvd = (int64_t)m->n_kv_heads * m->head_dim;
    la_test_builder b;
    la_test_builder_init(&b);
    /* 40 tokens in blocks 0..2: rotated at small, 100k and unrotated positions */
    for (int32_t t = 0; t < 40; t++)
        la_test_add_token(&b, t, t % 3 == 0 ? 100000 + t : (t % 3 == 1 ? t : LA_POS_UNROTATED), t);
    la_batch batch = la_test_builder_batch(&b);
    la_act k[2], v[2];
    la_test_act_pair(&p, b.n, kvd, k);
    la_test_act_pair(&p, b.n, kvd, v);
    la_test_random_pair(&p, k, -1.f, 1.f);
    la_test_random_pair(&p, v, -1.f, 1.f);
    for (int i = 0; i < 2; i++) {
        LA_CHECK_OK(p.be[i]->ops->batch_begin(p.be[i], &batch, &err), err);
        LA_CHECK_OK(p.be[i]->ops->kv_write(p.be[i], 1, &k[i], &v[i], &err), err);
    }
    la_test_expect_close("kv_write: K rotated in place", k, &p, 0, KV_TOL_REL);
    /* copies: 0 -> 5 by 7, 1 -> 6 by 100000, then a chain 5 -> 7 by 3 (must see the first) */
    const int32_t jobs[][4] = {{0, 5, 16, 7}, {1, 6, 16, 100000}, {2, 9, 8, -5}, {5, 7, 16, 3}};
    for (size_t j = 0; j < sizeof jobs / sizeof jobs[0]; j++)
        for (int i = 0; i < 2; i++)
            LA_CHECK_OK(p.be[i]->ops->kv_copy_rotate(p.be[i], jobs[j][0], jobs[j][1], jobs[j][2], jobs[j][3], &err), err);
    float *kr[2], *vr[2];
    for (int i = 0; i < 2; i++) {
        kr[i] = malloc(sizeof(float) * (size_t)kvd);
        vr[i] = malloc(sizeof(float) * (size_t)kvd);
    }
    const int64_t slots[] = {0, 1, 2, 15, 16, 33, 39, 5 * 16 + 3, 6 * 16 + 15, 7 * 16 + 0, 7 * 16 + 9, 9 * 16 + 7};
    double worst = 0;
    for (size_t si = 0; si < sizeof slots / sizeof slots[0]; si++) {
        for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->kv_read_slot(p.be[i], 1, slots[si], kr[i], vr[i], &err), err);
        size_t at;
        double dk = la_test_max_abs_diff(kr[1], kr[0], (size_t)kvd, &at);
        cr_assert(dk <= KV_TOL_REL * 2.0, "slot %lld: K differs by %.4g at %zu (gpu %.6g, cpu %.6g)",
                  (long long)slots[si], dk, at, kr[1][at], kr[0][at]);
        double dv = la_test_max_abs_diff(vr[1], vr[0], (size_t)kvd, &at);
        cr_assert(dv == 0, "slot %lld: V differs by %.4g at %zu", (long long)slots[si], dv, at);
        worst = fmax(worst, dk);
    }
    printf("%-48s max |gpu - cpu| over K slots = %.3g (tolerance %.3g)\n", "kv_copy_rotate + kv_read_slot", worst,
           KV_TOL_REL * 2.0);
    /* kv_deviation (selected recovery's probe) at the batch's slots: the rows just written are
     * at distance 0 (the right slot is read), other rows at the CPU's distance (bf16 rounding) */
    la_act v2[2];
    la_test_act_pair(&p, b.n, kvd, v2);
    la_test_random_pair(&p, v2, -1.f, 1.f);
    float *dev[2][2];
    for (int i = 0; i < 2; i++) {
        LA_CHECK_OK(p.be[i]->ops->batch_begin(p.be[i], &batch, &err), err);
        for (int w = 0; w < 2; w++) {
            dev[i][w] = malloc(sizeof(float) * (size_t)b.n);
            LA_CHECK_OK(p.be[i]->ops->kv_deviation(p.be[i], 1, w ? &v2[i] : &v[i], dev[i][w], &err), err);
        }
    }
    double worst_dev = 0;
    for (int32_t t = 0; t < b.n; t++) {
        cr_assert(dev[0][0][t] == 0 && dev[1][0][t] == 0, "row %d: the written V is at distance %g (cpu) / %g (gpu)",
                  t, dev[0][0][t], dev[1][0][t]);
        const double rel = fabs((double)dev[1][1][t] - dev[0][1][t]) / fmax(dev[0][1][t], 1e-6);
        cr_assert(dev[0][1][t] > 1.0 && rel <= 2e-2, "row %d: distance gpu %g, cpu %g", t, dev[1][1][t], dev[0][1][t]);
        worst_dev = fmax(worst_dev, rel);
    }
    printf("%-48s max relative |gpu - cpu| = %.3g (tolerance 2e-2)\n", "kv_deviation", worst_dev);
    for (int i = 0; i < 2; i++)
        for (int w = 0; w < 2; w++) free(dev[i][w]);
    la_test_act_pair_free(&p, v2);
    for (int i = 0; i < 2; i++) {
        free(kr[i]);
        free(vr[i]);
    }
    la_test_act_pair_free(&p, k);
    la_test_act_pair_free(&p, v);
    la_test_builder_free(&b);
    la_test_pair_close(&p);
    la_test_synth_free(&s);
}

/* qkv_kv_write on the GPU, fused (one kernel from the QKV GEMM's output) and with that
 * fusion off (matmul_group, split, kv_write), one after the other on the same layer and
 * slots: q, k, v and every pool slot bit-equal; and against the CPU's three matmuls and
 * kv_write within the GEMM and KV tolerances. 40 rows rotated at small and 100k positions
 * and stored unrotated (mepic). */
static void qkv_kv_write_case(int hidden, int n_heads, int n_kv, int hd) {
    la_test_synth s;
    la_test_synth_init(&s, hidden, n_heads, n_kv, hd, 128, 100, 2);
    la_test_pair p;
    const int32_t B = 16;
    if (!la_test_pair_open(&p, &s, 8, B)) return;
    la_err err = {0};
    const int64_t kvd = (int64_t)n_kv * hd, qd = (int64_t)n_heads * hd;
    la_test_builder b;
    la_test_builder_init(&b);
    for (int32_t t = 0; t < 40; t++)
        la_test_add_token(&b, t, t % 3 == 0 ? 100000 + t : (t % 3 == 1 ? t : LA_POS_UNROTATED), t);
    la_batch batch = la_test_builder_batch(&b);
    la_act x[2], q[2], k[2], v[2], q2, k2, v2;
    la_test_act_pair(&p, b.n, hidden, x);
    la_test_random_pair(&p, x, -1.f, 1.f);
    la_test_act_pair(&p, b.n, qd, q);
    la_test_act_pair(&p, b.n, kvd, k);
    la_test_act_pair(&p, b.n, kvd, v);
    la_backend *g = p.be[1];
    LA_CHECK_OK(g->ops->act_alloc(g, b.n, qd, &q2, &err), err);
    LA_CHECK_OK(g->ops->act_alloc(g, b.n, kvd, &k2, &err), err);
    LA_CHECK_OK(g->ops->act_alloc(g, b.n, kvd, &v2, &err), err);
    const uint32_t fused = la_cuda_fused_gemm(g);
    cr_assert(fused & LA_CUDA_FUSED_KV_WRITE, "the fused KV write is on by default");
    /* the pool slots each way: [way][slot][K then V] */
    const size_t slot_floats = 2 * (size_t)kvd;
    float *pool[2];
    for (int way = 0; way < 2; way++) {
        pool[way] = malloc(sizeof(float) * slot_floats * (size_t)b.n);
        la_cuda_fused_gemm_set(g, way == 0 ? fused : fused & ~LA_CUDA_FUSED_KV_WRITE);
        LA_CHECK_OK(g->ops->batch_begin(g, &batch, &err), err);
        if (way == 0) LA_CHECK_OK(g->ops->qkv_kv_write(g, &x[1], 0, &q[1], &k[1], &v[1], &err), err);
        else LA_CHECK_OK(g->ops->qkv_kv_write(g, &x[1], 0, &q2, &k2, &v2, &err), err);
        for (int64_t slot = 0; slot < b.n; slot++) {
            float *at = pool[way] + (size_t)slot * slot_floats;
            LA_CHECK_OK(g->ops->kv_read_slot(g, 0, slot, at, at + kvd, &err), err);
        }
    }
    la_cuda_fused_gemm_set(g, fused);
    cr_assert(memcmp(pool[0], pool[1], sizeof(float) * slot_floats * (size_t)b.n) == 0,
              "qkv_kv_write, hd %d: the pool differs between the fused kernel and split + kv_write", hd);
    const la_act *fa[3] = {&q[1], &k[1], &v[1]}, *ua[3] = {&q2, &k2, &v2};
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        float *a = la_test_read_act(g, fa[i]), *c = la_test_read_act(g, ua[i]);
        cr_assert(memcmp(a, c, sizeof(float) * (size_t)(fa[i]->n_rows * fa[i]->n_cols)) == 0,
                  "qkv_kv_write, hd %d: %s differs between the fused kernel and split + kv_write", hd, names[i]);
        free(a);
        free(c);
    }
    /* the CPU: forward.c's fallback (it has no qkv_kv_write) */
    la_backend *c = p.be[0];
    cr_assert(c->ops->qkv_kv_write == NULL);
    LA_CHECK_OK(c->ops->batch_begin(c, &batch, &err), err);
    const la_weight_kind w[3] = {LA_W_Q, LA_W_K, LA_W_V};
    la_act *co[3] = {&q[0], &k[0], &v[0]};
    for (int i = 0; i < 3; i++) LA_CHECK_OK(c->ops->matmul(c, &x[0], w[i], 0, co[i], &err), err);
    LA_CHECK_OK(c->ops->kv_write(c, 0, &k[0], &v[0], &err), err);
    char what[64];
    snprintf(what, sizeof what, "qkv_kv_write hd %d: q", hd);
    la_test_expect_close(what, q, &p, 0, GEMM_TOL_REL);
    snprintf(what, sizeof what, "qkv_kv_write hd %d: k (rotated)", hd);
    la_test_expect_close(what, k, &p, 0, GEMM_TOL_REL + KV_TOL_REL);
    snprintf(what, sizeof what, "qkv_kv_write hd %d: v", hd);
    la_test_expect_close(what, v, &p, 0, GEMM_TOL_REL);
    free(pool[0]);
    free(pool[1]);
    g->ops->act_free(g, &q2);
    g->ops->act_free(g, &k2);
    g->ops->act_free(g, &v2);
    la_test_act_pair_free(&p, x);
    la_test_act_pair_free(&p, q);
    la_test_act_pair_free(&p, k);
    la_test_act_pair_free(&p, v);
    la_test_builder_free(&b);
    la_test_pair_close(&p);
    la_test_synth_free(&s);
}

Test(cuda_kernels, qkv_kv_write_fused_equals_split_and_kv_write) {
    qkv_kv_write_case(256, 8, 2, 128); /* Llama-3's head geometry */
    qkv_kv_write_case(192, 6, 3, 72);  /* head_dim 72, 3 KV heads */
    qkv_kv_write_case(64, 4, 1, 16);   /* MQA, head_dim 16 */
}

/* ============================================================ tests: attention ====== */

/* Each attention case returns the attn_prefill kernels that ran (la_test_attn_case), 0 without
 * a GPU. */
static uint32_t causal_prefill(la_test_geometry g, int32_t n, const char *what) {
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, g)) return 0;
    la_test_builder q;
    la_test_builder_init(&q);
    la_test_add_tail(&q, g.B, 3, 0, n);
    q.seqs[q.n_seqs++] = (la_batch_seq){0, n, 0, q.n_blocks};
    const uint32_t ran = la_test_attn_case(&p, what, NULL, &q, 1);
    la_test_builder_free(&q);
    la_test_attn_close(&p, &s);
    return ran;
}

Test(cuda_attention, causal_prefill_llama8b_geometry) {
    causal_prefill((la_test_geometry){512, 8, 2, 128, 16}, 300, "causal prefill 300 tokens, hd 128, GQA 4");
}
Test(cuda_attention, causal_prefill_llama1b_geometry_block32) {
    causal_prefill((la_test_geometry){512, 16, 2, 64, 32}, 123, "causal prefill 123 tokens, hd 64, GQA 8, B 32");
}
/* a block size that is not a power of two: the kernels' slot-in-block arithmetic takes
 * its division path */
Test(cuda_attention, causal_prefill_block48) {
    causal_prefill((la_test_geometry){512, 8, 2, 128, 48}, 200, "causal prefill 200 tokens, hd 128, GQA 4, B 48");
}
Test(cuda_attention, causal_prefill_tiny_geometries) {
    causal_prefill((la_test_geometry){64, 4, 1, 24, 16}, 50, "causal prefill 50 tokens, hd 24, MQA 4");
    causal_prefill((la_test_geometry){64, 4, 2, 16, 16}, 70, "causal prefill 70 tokens, hd 16, GQA 2");
    causal_prefill((la_test_geometry){64, 4, 4, 16, 16}, 90, "causal prefill 90 tokens, hd 16, MHA");
    causal_prefill((la_test_geometry){64, 3, 1, 16, 16}, 40, "causal prefill 40 tokens, hd 16, 3 heads per KV");
}

static uint32_t docs_question(la_test_geometry g, la_test_doc_method dm, int32_t base, int32_t n_q, const char *what) {
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, g)) return 0;
    la_test_builder cache, q;
    la_test_builder_init(&cache);
    la_test_builder_init(&q);
    const int32_t lens[] = {37, 16, 100, 5, 1, 250, 17};
    la_test_docs_case(&cache, &q, g.B, lens, 7, n_q, dm, base, 10);
    const uint32_t ran = la_test_attn_case(&p, what, &cache, &q, 0);
    la_test_builder_free(&cache);
    la_test_builder_free(&q);
    la_test_attn_close(&p, &s);
    return ran;
}

Test(cuda_attention, lazy_question_over_documents) {
    docs_question((la_test_geometry){512, 8, 2, 128, 16}, LA_TEST_DOC_LAZY, 0, 64, "lazy: 7 documents, 64-token question");
    docs_question((la_test_geometry){512, 8, 2, 128, 16}, LA_TEST_DOC_LAZY, 0, 1, "lazy: 7 documents, decode row");
}
Test(cuda_attention, mepic_question_over_documents) {
    docs_question((la_test_geometry){512, 8, 2, 128, 16}, LA_TEST_DOC_MEPIC, 0, 64, "mepic: 7 documents, 64-token question");
    docs_question((la_test_geometry){512, 8, 2, 128, 16}, LA_TEST_DOC_MEPIC, 0, 1, "mepic: 7 documents, decode row");
}
Test(cuda_attention, lazy_and_mepic_at_100k_offsets) {
    docs_question((la_test_geometry){512, 8, 2, 128, 16}, LA_TEST_DOC_LAZY, 100000, 20, "lazy at +100000: 20-token question");
    docs_question((la_test_geometry){512, 8, 2, 128, 16}, LA_TEST_DOC_MEPIC, 100000, 1, "mepic at +100000: decode row");
    docs_question((la_test_geometry){512, 16, 2, 64, 32}, LA_TEST_DOC_LAZY, 120000, 33, "lazy at +120000, hd 64, B 32");
}
/* head_dim 72: not a power of two, so the mma.sync kernels (prefill v2, decode) run
 * their 128-wide instances with zero-padded columns (v3 is for 128 only) */
Test(cuda_attention, lazy_head_dim_72) {
    docs_question((la_test_geometry){512, 8, 2, 72, 16}, LA_TEST_DOC_LAZY, 0, 40, "lazy, hd 72: 40-token question");
    docs_question((la_test_geometry){512, 8, 2, 72, 16}, LA_TEST_DOC_LAZY, 0, 1, "lazy, hd 72: decode row");
}
/* block size 48 (not a power of two) under both document methods */
Test(cuda_attention, lazy_and_mepic_block48) {
    docs_question((la_test_geometry){512, 8, 2, 128, 48}, LA_TEST_DOC_LAZY, 0, 64, "lazy, B 48: 7 documents, 64-token question");
    docs_question((la_test_geometry){512, 8, 2, 128, 48}, LA_TEST_DOC_MEPIC, 0, 64, "mepic, B 48: 7 documents, 64-token question");
    docs_question((la_test_geometry){512, 8, 2, 128, 48}, LA_TEST_DOC_LAZY, 0, 1, "lazy, B 48: decode row");
}

/* lazy, block size 16: the sequence's first key tile is a document placed after the
 * question (logical positions 1000.., seen by no row: the kernels skip the tile before
 * any rotation), and the second straddles two documents with different q_delta (one
 * block of A at 0.., three of B at 16..), so prefill v3 rotates Q for the first time
 * inside its group-by-group path (its `!have_q` branch), v2 in its per-group rotation. */
static uint32_t straddling_tile(la_test_geometry g) {
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, g)) return 0;
    la_test_builder cache, q;
    la_test_builder_init(&cache);
    la_test_builder_init(&q);
    const int32_t B = g.B, n_q = 40, row0 = q.n, block0 = q.n_blocks;
    int32_t blk = 10;
    /* X: 64 tokens at logical 1000.., seen by no row, so its q_delta never applies (0: the
     * CPU backend requires p - q_delta >= 0 for every row) */
    la_test_cache_doc(&cache, B, blk, 64, false);
    for (int32_t i = 0; i < 4; i++) la_test_add_block(&q, blk + i, B, 1000 + i * B, 0, 0);
    blk += 4;
    la_test_cache_doc(&cache, B, blk, 16, false); /* A: 16 tokens, logical 0.. */
    la_test_add_block(&q, blk, B, 0, 0, 0);
    blk += 1;
    la_test_cache_doc(&cache, B, blk, 48, false); /* B: 48 tokens, logical 16.. */
    for (int32_t i = 0; i < 3; i++) la_test_add_block(&q, blk + i, B, 16 + i * B, 16, 0);
    blk += 3;
    la_test_add_tail(&q, B, blk, 64, n_q);
    q.seqs[q.n_seqs++] = (la_batch_seq){row0, n_q, block0, q.n_blocks - block0};
    char what[96];
    snprintf(what, sizeof what, "lazy: an unseen first tile, then one straddling two documents, hd %d", g.hd);
    const uint32_t ran = la_test_attn_case(&p, what, &cache, &q, 0);
    la_test_builder_free(&cache);
    la_test_builder_free(&q);
    la_test_attn_close(&p, &s);
    return ran;
}

Test(cuda_attention, lazy_straddling_tile_after_an_unseen_one) { straddling_tile((la_test_geometry){512, 8, 2, 128, 16}); }

Test(cuda_attention, lazy_tiny_geometries) {
    docs_question((la_test_geometry){64, 4, 1, 24, 16}, LA_TEST_DOC_LAZY, 0, 9, "lazy, hd 24 MQA: 9-token question");
    docs_question((la_test_geometry){64, 4, 2, 16, 16}, LA_TEST_DOC_MEPIC, 0, 1, "mepic, hd 16: decode row");
}

/* A step of continuous batching: three decode rows with contexts of 10, 700 and 3000
 * tokens (the last splits over its KV length), a 40-token prefill chunk whose earlier
 * 200 tokens are cached, and a lazy question, all in one batch. */
static uint32_t mixed_batch(la_test_geometry g) {
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, g)) return 0;
    la_test_builder cache, q;
    la_test_builder_init(&cache);
    la_test_builder_init(&q);
    int32_t blk = 1;
    const int32_t ctx[3] = {10, 700, 3000};
    for (int i = 0; i < 3; i++) blk = la_test_plain_seq(&cache, &q, g.B, blk, ctx[i] - 1, ctx[i]);
    blk = la_test_plain_seq(&cache, &q, g.B, blk, 200, 240); /* prefill chunk: tokens 200..239, 0..199 cached */
    const int32_t lens[] = {30, 64, 9};
    la_test_docs_case(&cache, &q, g.B, lens, 3, 25, LA_TEST_DOC_LAZY, 0, blk);
    char what[96];
    snprintf(what, sizeof what, "mixed batch: 3 decode rows, prefill chunk, lazy question, hd %d", g.hd);
    const uint32_t ran = la_test_attn_case(&p, what, &cache, &q, 1);
    la_test_builder_free(&cache);
    la_test_builder_free(&q);
    la_test_attn_close(&p, &s);
    return ran;
}

Test(cuda_attention, mixed_decode_and_prefill_batch) { mixed_batch((la_test_geometry){512, 8, 2, 128, 16}); }

/* A 64-token question against 6000 cached tokens: few query tiles, so the prefill kernel
 * splits over the KV length and attn_combine merges the partials. */
/* split_ctas: LA_ATTN_SPLIT_CTAS for the GPU backend (NULL: unset, the default 2 CTAs
 * per SM): another split target gives other split counts and chunk boundaries. */
static uint32_t long_context_question(const char *split_ctas, la_test_geometry g) {
    la_test_pair p;
    la_test_synth s;
    if (split_ctas) setenv("LA_ATTN_SPLIT_CTAS", split_ctas, 1);
    bool open = la_test_attn_open(&p, &s, g);
    unsetenv("LA_ATTN_SPLIT_CTAS");
    if (!open) return 0;
    la_test_builder cache, q;
    la_test_builder_init(&cache);
    la_test_builder_init(&q);
    const int32_t lens[] = {1500, 1499, 1501, 1000, 500};
    la_test_docs_case(&cache, &q, g.B, lens, 5, 64, LA_TEST_DOC_LAZY, 0, 1);
    char what[96];
    snprintf(what, sizeof what, "lazy: 6000 cached tokens, 64-token question, hd %d, LA_ATTN_SPLIT_CTAS=%s", g.hd,
             split_ctas ? split_ctas : "(unset)");
    const uint32_t ran = la_test_attn_case(&p, what, &cache, &q, 0);
    la_test_builder_free(&cache);
    la_test_builder_free(&q);
    la_test_attn_close(&p, &s);
    return ran;
}

static const la_test_geometry k_hd128 = {512, 8, 2, 128, 16};

Test(cuda_attention, long_context_question_splits_over_kv) { long_context_question(NULL, k_hd128); }
Test(cuda_attention, long_context_question_other_split_targets) {
    long_context_question("1", k_hd128);
    long_context_question("16", k_hd128);
}

/* LA_CUDA_PDL: programmatic dependent launch on by default where the build and device can
 * (la_cuda_pdl_supported), off with 0; another value fails the create. The process-wide
 * switch is left as the default create sets it. */
Test(cuda_kernels, pdl_env_sets_the_launch_switch) {
    if (!la_test_have_gpu()) return;
    const struct {
        const char *value;
        bool on;
    } cases[] = {{"0", false}, {"1", true}, {NULL, true}};
    la_err err = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].value) setenv("LA_CUDA_PDL", cases[i].value, 1);
        else unsetenv("LA_CUDA_PDL");
        la_backend *be = NULL;
        LA_CHECK_OK(la_backend_create(LA_DEVICE_CUDA, 0, &be, &err), err);
        cr_assert_eq(la_cuda_pdl_on(), cases[i].on && la_cuda_pdl_supported(), "LA_CUDA_PDL=%s",
                     cases[i].value ? cases[i].value : "(unset)");
        la_backend_destroy(be);
    }
    la_test_cuda_env_rejected("LA_CUDA_PDL", "yes");
}

/* LA_ATTN_SPLIT_CTAS outside 1..16 fails the create with LA_ERR_INVALID_ARG. */
Test(cuda_attention, split_ctas_env_rejects_bad_values) {
    if (!la_test_have_gpu()) return;
    const char *bad[] = {"0", "17", "two", "2x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) la_test_cuda_env_rejected("LA_ATTN_SPLIT_CTAS", bad[i]);
}

/* Several causal prefills of ragged lengths in one batch (tiles of 16 / 32 tokens end
 * mid-sequence, positions restart per sequence, one sequence continues after 90 cached
 * tokens with a padded last block), beside a 150-token lazy question whose tiles cover
 * document boundaries inside a key tile and its own causal diagonal; 3 query heads per KV
 * head (126 of a v2 CTA's 128 rows used). */
Test(cuda_attention, ragged_causal_prefills_and_long_lazy_question) {
    la_test_geometry g = {96, 6, 2, 16, 16};
    for (int gi = 0; gi < 2; gi++) {
        if (gi == 1) g = (la_test_geometry){768, 6, 2, 128, 16};
        la_test_pair p;
        la_test_synth s;
        if (!la_test_attn_open(&p, &s, g)) return;
        la_test_builder cache, q;
        la_test_builder_init(&cache);
        la_test_builder_init(&q);
        int32_t blk = 1;
        const int32_t lens[3] = {45, 130, 77};
        for (int i = 0; i < 3; i++) {
            la_test_add_tail(&q, g.B, blk, 0, lens[i]);
            q.seqs[q.n_seqs++] = (la_batch_seq){q.n - lens[i], lens[i], q.n_blocks - (lens[i] + g.B - 1) / g.B,
                                                (lens[i] + g.B - 1) / g.B};
            blk += (lens[i] + g.B - 1) / g.B;
        }
        /* tokens 90..162 of a sequence whose first 90 are cached (last block: 3 of 16 slots) */
        blk = la_test_plain_seq(&cache, &q, g.B, blk, 90, 163);
        const int32_t dl[] = {21, 3, 40, 16, 70};
        la_test_docs_case(&cache, &q, g.B, dl, 5, 150, LA_TEST_DOC_LAZY, 0, blk);
        la_test_attn_case(&p, gi == 0 ? "ragged prefills + 150-token lazy question, hd 16 hpc 3"
                             : "ragged prefills + 150-token lazy question, hd 128 hpc 3", &cache, &q, 1);
        la_test_builder_free(&cache);
        la_test_builder_free(&q);
        la_test_attn_close(&p, &s);
    }
}

/* Plain steps (no q_delta, no k_rope), which attn_prefill v4 runs at head_dim 128 with 256
 * rows per CTA, against the CPU, asserting that v4 ran where it exists. First ragged causal
 * prefills from position 0, a prefill chunk over 90 cached tokens and a prefix-caching
 * question (64 new tokens over 2000 cached), in one batch, at 3 query heads per KV head (255
 * of a v4 CTA's 256 rows used) and block size 16, then at 4 and block size 48: few CTAs, so
 * every tile splits over its KV length (attn_combine merges) and each CTA sees one or two
 * 128-key tiles. Then one 2500-token prefill with 8 KV heads: 160 CTAs, no split, up to 20
 * key tiles per CTA, so the two-stage K/V ring wraps many times. */
static void plain_prefills(const la_test_geometry gs[3]) {
    for (int gi = 0; gi < 3; gi++) {
        const la_test_geometry g = gs[gi];
        la_test_pair p;
        la_test_synth s;
        if (!la_test_attn_open(&p, &s, g)) return;
        la_test_builder cache, q;
        la_test_builder_init(&cache);
        la_test_builder_init(&q);
        char what[128];
        if (gi < 2) {
            int32_t blk = 1;
            const int32_t lens[3] = {45, 300, 77};
            for (int i = 0; i < 3; i++) blk = la_test_plain_seq(&cache, &q, g.B, blk, 0, lens[i]);
            blk = la_test_plain_seq(&cache, &q, g.B, blk, 90, 163);
            la_test_plain_seq(&cache, &q, g.B, blk, 2000, 2064);
            snprintf(what, sizeof what, "plain: ragged prefills, chunk, prefix question; hd %d hpc %d B %d", g.hd,
                     g.n_heads / g.n_kv, g.B);
        } else {
            la_test_plain_seq(&cache, &q, g.B, 1, 0, 2500);
            snprintf(what, sizeof what, "plain: 2500-token prefill; hd %d, 8 KV heads", g.hd);
        }
        const uint32_t ran = la_test_attn_case(&p, what, &cache, &q, 1);
        la_err err = {0};
        if (la_cuda_attn_prefill_variant_set(p.be[1], 4, &err) == LA_OK)
            cr_assert(ran & (1u << 4), "%s: attn_prefill v4 never ran (kernels 0x%x)", what, ran);
        la_test_builder_free(&cache);
        la_test_builder_free(&q);
        la_test_attn_close(&p, &s);
    }
}

Test(cuda_attention, plain_prefills_and_prefix_question_hd128) {
    const la_test_geometry gs[3] = {{768, 6, 2, 128, 16}, {512, 8, 2, 128, 48}, {2048, 16, 8, 128, 16}};
    plain_prefills(gs);
}

/* The same plain steps at head_dim 64 (Llama-3.2-1B), where v4 runs them with 192 rows per
 * CTA: 5 query heads per KV head (38 tokens, 190 of the 192 rows used), block size 48, and 8
 * KV heads with 2 query heads each (Llama-3.2-1B's 32 / 8 has 4: the other cases) */
Test(cuda_attention, plain_prefills_and_prefix_question_hd64) {
    const la_test_geometry gs[3] = {{640, 10, 2, 64, 16}, {512, 8, 2, 64, 48}, {1024, 16, 8, 64, 16}};
    plain_prefills(gs);
}

/* Whether the wgmma kernels (v3, v4) run on this GPU and build (la_cuda_attn_prefill_variant_set). */
static bool wgmma_available(void) {
    la_backend *be = NULL;
    la_err err = {0};
    if (la_backend_create(LA_DEVICE_CUDA, 0, &be, &err) != LA_OK) return false;
    const bool ok = la_cuda_attn_prefill_variant_set(be, 4, &err) == LA_OK;
    la_backend_destroy(be);
    return ok;
}

/* head_dim 64 (Llama-3.2-1B: 4 query heads per KV head) on this file's attention matrix,
 * where v3 and v4 run now (asserted where the GPU has them): a causal prefill (v4), lazy and
 * mepic questions and decode rows (v3), a tile straddling two documents after an unseen one
 * (v3's group-by-group path), a mixed continuous-batching step, a question split over 6000
 * cached tokens, block size 48. */
Test(cuda_attention, head_dim_64_runs_the_wgmma_kernels_on_the_kernel_matrix) {
    if (!la_test_have_gpu()) return;
    const la_test_geometry g = {512, 8, 2, 64, 16}, g48 = {512, 8, 2, 64, 48};
    const bool wg = wgmma_available();
    const struct {
        const char *what;
        uint32_t ran, want; /* want: a kernel that must have run where wgmma is available */
    } r[] = {
        {"causal prefill", causal_prefill(g, 300, "causal prefill 300 tokens, hd 64, GQA 4"), 1u << 4},
        {"lazy question", docs_question(g, LA_TEST_DOC_LAZY, 0, 64, "lazy, hd 64: 7 documents, 64-token question"), 1u << 3},
        {"lazy decode row", docs_question(g, LA_TEST_DOC_LAZY, 0, 1, "lazy, hd 64: 7 documents, decode row"), 0},
        {"mepic question", docs_question(g, LA_TEST_DOC_MEPIC, 0, 64, "mepic, hd 64: 7 documents, 64-token question"), 1u << 3},
        {"mepic decode row", docs_question(g, LA_TEST_DOC_MEPIC, 0, 1, "mepic, hd 64: decode row"), 0},
        {"straddling tile", straddling_tile(g), 1u << 3},
        {"mixed batch", mixed_batch(g), 1u << 3},
        {"split question", long_context_question(NULL, g), 1u << 3},
        {"lazy B 48", docs_question(g48, LA_TEST_DOC_LAZY, 0, 64, "lazy, hd 64, B 48: 64-token question"), 1u << 3},
        {"mepic B 48", docs_question(g48, LA_TEST_DOC_MEPIC, 0, 64, "mepic, hd 64, B 48: 64-token question"), 1u << 3},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        printf("hd 64 %-18s kernels 0x%x\n", r[i].what, r[i].ran);
        if (wg && r[i].want) cr_assert(r[i].ran & r[i].want, "hd 64 %s: kernel 0x%x never ran (0x%x)", r[i].what, r[i].want, r[i].ran);
    }
}

/* Head dims the wgmma kernels do not have run the mma kernel (v2) whichever kernel is asked
 * for, with the same results (hd 96: a multiple of 8, not of 64); a head_dim the CUDA kernels
 * cannot run at all (above 128, or not a multiple of 8) is refused when the weights load,
 * LA_ERR_UNSUPPORTED naming it, never run wrong. */
Test(cuda_attention, other_head_dims_run_the_mma_kernel_or_are_refused) {
    if (!la_test_have_gpu()) return;
    const la_test_geometry g = {768, 8, 2, 96, 16};
    const uint32_t a = docs_question(g, LA_TEST_DOC_LAZY, 0, 64, "lazy, hd 96: 64-token question");
    const uint32_t b = causal_prefill(g, 200, "causal prefill 200 tokens, hd 96");
    cr_assert_eq(a | b, 1u << 2, "hd 96 ran the mma kernel only (kernels 0x%x)", a | b);
    const int bad[] = {136, 256, 60};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        la_test_synth s;
        la_test_synth_init(&s, 512, 4, 1, bad[i], 128, 100, 1);
        la_backend *be = NULL;
        la_err err = {0};
        LA_CHECK_OK(la_backend_create(LA_DEVICE_CUDA, 0, &be, &err), err);
        const la_status st = la_backend_load_model(be, &s.cfg, &s.w, &err);
        cr_assert_eq(st, LA_ERR_UNSUPPORTED, "head_dim %d: status %s", bad[i], la_status_name(st));
        char num[16];
        snprintf(num, sizeof num, "%d", bad[i]);
        cr_assert(strstr(err.msg, num) != NULL, "the message names head_dim %d: %s", bad[i], err.msg);
        printf("head_dim %d refused: %s\n", bad[i], err.msg);
        la_backend_destroy(be);
        la_test_synth_free(&s);
    }
}

/* The same 150-token question over mepic documents at a 100k offset, hd 64 (8 query heads
 * per KV head: 16 tokens per v2 CTA), block size 32. */
Test(cuda_attention, mepic_long_question_hd64) {
    docs_question((la_test_geometry){512, 16, 2, 64, 32}, LA_TEST_DOC_MEPIC, 100000, 150, "mepic at +100000: 150-token question, hd 64");
}

/* Decode rows of sequences with very different contexts in one batch: 1 token (its own
 * key only), 17 (one lazy document of 16), 700 (three mepic documents, keys rotated in
 * shared memory) and 5000 (three lazy documents at a 100k offset, split over the KV
 * length and combined), plus a plain causal 2000-token decode row; hd 64 with 3 query
 * heads per KV head (rows 3..15 of attn_decode's m16 tile are padding). Each decode warp's
 * share of a short item may be empty or end mid-document. */
Test(cuda_attention, decode_rows_of_very_different_lengths) {
    la_test_geometry g = {384, 6, 2, 64, 16};
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, g)) return;
    la_test_builder cache, q;
    la_test_builder_init(&cache);
    la_test_builder_init(&q);
    int32_t blk = 1;
    blk = la_test_docs_case(&cache, &q, g.B, NULL, 0, 1, LA_TEST_DOC_LAZY, 0, blk);
    const int32_t l17[] = {16};
    blk = la_test_docs_case(&cache, &q, g.B, l17, 1, 1, LA_TEST_DOC_LAZY, 0, blk);
    const int32_t l700[] = {300, 199, 200};
    blk = la_test_docs_case(&cache, &q, g.B, l700, 3, 1, LA_TEST_DOC_MEPIC, 0, blk);
    const int32_t l5000[] = {1500, 1000, 2499};
    blk = la_test_docs_case(&cache, &q, g.B, l5000, 3, 1, LA_TEST_DOC_LAZY, 100000, blk);
    blk = la_test_plain_seq(&cache, &q, g.B, blk, 1999, 2000); /* a plain 2000-token sequence's decode row */
    la_test_attn_case(&p, "decode rows of 1, 17, 700, 5000, 2000 tokens, hd 64 hpc 3", &cache, &q, 1);
    la_test_builder_free(&cache);
    la_test_builder_free(&q);
    la_test_attn_close(&p, &s);
}

/* attn_decode copies the keys of blocks that no token of the step writes before its PDL
 * wait (la_cuda_attn_params.kv_written); the others wait for this step's kv_write. Row B's
 * new token lands in a block in the middle of a 2000-token sequence A's list (slot 0 of its
 * 51st block, a key A attends); row C (48 keys over [that block, c1, c2 = its own tail])
 * starts with that block. Case 1, rows A, B and C: A is split over its keys, its late
 * group sits after two early ones in a warp's share. Case 2, rows B and C alone: nothing
 * is split and the packed instance runs C whole, a late group at t = 0 with an early one
 * after it. Every row against the CPU, which writes every K/V before any attention. What
 * this checks is the late copies' results; whether a copy could race the write is timing
 * (cuda_common.cuh argues it cannot). */
static void written_block_rows(la_test_geometry g, const char *what) {
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, g)) return;
    const int32_t first = 1, mid = first + 50, c1 = 200, c2 = 201;
    la_test_builder cache, q, q2;
    la_test_builder_init(&cache);
    la_test_builder_init(&q);
    la_test_builder_init(&q2);
    la_test_plain_seq(&cache, &q, g.B, first, 1999, 2000);
    for (int32_t t = 16; t < 47; t++) la_test_add_token(&cache, t, t, (int64_t)(t < 32 ? c1 : c2) * g.B + t % 16);
    la_test_builder *qs[2] = {&q, &q2};
    for (int k = 0; k < 2; k++) {
        la_test_builder *b = qs[k];
        int32_t row0 = b->n, block0 = b->n_blocks;
        la_test_add_token(b, 100, 100, (int64_t)mid * g.B); /* B: overwrites the key at position 800 */
        la_test_add_block(b, mid, g.B, 85, 0, 0);
        la_test_add_seq(b, row0, 1, block0);
        row0 = b->n, block0 = b->n_blocks;
        la_test_add_token(b, 47, 47, (int64_t)c2 * g.B + 15); /* C */
        la_test_add_block(b, mid, g.B, 0, 0, 0);
        la_test_add_block(b, c1, g.B, 16, 0, 0);
        la_test_add_block(b, c2, g.B, 32, 0, 0);
        la_test_add_seq(b, row0, 1, block0);
    }
    char name[160];
    snprintf(name, sizeof name, "%s: rows A, B, C", what);
    la_test_attn_case(&p, name, &cache, &q, 1);
    snprintf(name, sizeof name, "%s: rows B, C", what);
    la_test_attn_case(&p, name, &cache, &q2, 1);
    cr_assert(la_test_case_packed, "%s: rows B and C did not run packed", what);
    la_test_builder_free(&cache);
    la_test_builder_free(&q);
    la_test_builder_free(&q2);
    la_test_attn_close(&p, &s);
}

Test(cuda_attention, decode_row_reads_a_block_another_row_writes_in_the_same_step) {
    written_block_rows((la_test_geometry){384, 6, 2, 64, 16}, "hd 64, 4 stages");
    written_block_rows((la_test_geometry){512, 8, 2, 128, 16}, "hd 128, 3 stages");
}

/* Thirteen decode rows whose contexts (1 to 512 keys: lazy and mepic documents, plain
 * sequences, block boundaries) are too short to be split over their keys: the packed decode
 * instance (one item per warp, four per CTA, the last CTA with one item) against the CPU. */
Test(cuda_attention, decode_rows_run_packed) {
    static const la_test_geometry gs[2] = {{512, 8, 2, 128, 16}, {384, 6, 2, 64, 16}};
    for (int gi = 0; gi < 2; gi++) {
        const la_test_geometry g = gs[gi];
        la_test_pair p;
        la_test_synth s;
        if (!la_test_attn_open(&p, &s, g)) return;
        la_test_builder cache, q;
        la_test_builder_init(&cache);
        la_test_builder_init(&q);
        int32_t blk = 1;
        const int32_t plain[] = {1, 16, 17, 64, 100, 257, 512};
        for (int i = 0; i < 7; i++) blk = la_test_plain_seq(&cache, &q, g.B, blk, plain[i] - 1, plain[i]);
        const int32_t l2[] = {16, 33}, l3[] = {100, 7, 160};
        blk = la_test_docs_case(&cache, &q, g.B, l2, 2, 1, LA_TEST_DOC_LAZY, 0, blk);
        blk = la_test_docs_case(&cache, &q, g.B, l3, 3, 1, LA_TEST_DOC_LAZY, 100000, blk);
        blk = la_test_docs_case(&cache, &q, g.B, l2, 2, 1, LA_TEST_DOC_MEPIC, 0, blk);
        blk = la_test_docs_case(&cache, &q, g.B, l3, 3, 1, LA_TEST_DOC_MEPIC, 0, blk);
        blk = la_test_docs_case(&cache, &q, g.B, NULL, 0, 1, LA_TEST_DOC_LAZY, 0, blk);
        blk = la_test_docs_case(&cache, &q, g.B, l3, 3, 1, LA_TEST_DOC_LAZY, 0, blk);
        char what[96];
        snprintf(what, sizeof what, "13 short decode rows, hd %d", g.hd);
        la_test_attn_case(&p, what, &cache, &q, 1);
        cr_assert(la_test_case_packed, "%s: the packed instance did not run", what);
        la_test_builder_free(&cache);
        la_test_builder_free(&q);
        la_test_attn_close(&p, &s);
    }
}

Test(cuda_attention, prefill_variant_setter_rejects_unknown_variants) {
    la_backend *be = NULL;
    la_err err = {0};
    la_status st = la_backend_create(LA_DEVICE_CUDA, 0, &be, &err);
    if (st == LA_ERR_UNSUPPORTED) {
        printf("skipped: no GPU (%s)\n", err.msg);
        return;
    }
    LA_CHECK_OK(st, err);
    const int32_t def = la_cuda_attn_prefill_variant(be);
    cr_assert(def >= 1 && def <= 4, "attn_prefill variant %d at create", def);
    cr_assert_eq(la_cuda_attn_prefill_variant_set(be, 5, &err), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_cuda_attn_prefill_variant_set(be, 0, &err), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_cuda_attn_prefill_variant_set(be, 1, &err), LA_ERR_INVALID_ARG); /* v1: deleted */
    cr_assert_eq(la_cuda_attn_prefill_variant(be), def, "a rejected variant changed nothing");
    /* v3 and v4 run where the GPU and the build allow them, and v4 is then the default
     * (unless LA_ATTN_PREFILL chose another); elsewhere setting either is
     * LA_ERR_UNSUPPORTED */
    st = la_cuda_attn_prefill_variant_set(be, 3, &err);
    cr_assert(st == LA_OK || st == LA_ERR_UNSUPPORTED, "v3: status %d (%s)", (int)st, err.msg);
    const la_status st4 = la_cuda_attn_prefill_variant_set(be, 4, &err);
    cr_assert_eq(st4, st, "v4 (status %d) runs exactly where v3 (status %d) does", (int)st4, (int)st);
    const char *env = getenv("LA_ATTN_PREFILL");
    if (!env || !*env) cr_assert_eq(def == 4, st == LA_OK, "default v%d, but v4 %s", def, st == LA_OK ? "runs" : "does not");
    if (st != LA_OK) cr_assert_eq(la_cuda_attn_prefill_variant(be), def, "a refused v3 / v4 changed nothing");
    LA_CHECK_OK(la_cuda_attn_prefill_variant_set(be, 2, &err), err); /* runs on every GPU */
    cr_assert_eq(la_cuda_attn_prefill_variant(be), 2);
    la_backend_destroy(be);
}

#endif /* LA_HAVE_CUDA */
