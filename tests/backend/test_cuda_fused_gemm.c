/* Fused GEMMs of the CUDA backend (cuda_backend.c, matmul_group): the split_cols kernel
 * against a host copy of the columns (exact: it moves bits); matmul_group against one
 * matmul per weight on the same activations, fused (one GEMM by the stacked weight) and
 * not (above the row threshold, or switched off: then bit-equal, the very same GEMMs);
 * whole forward passes of the tiny checkpoints with fusion on against off (a 60-token
 * prefill, decode rows, a batch of 5 decode rows), and CUDA graphs replaying fused steps
 * bit-equal to eager ones (the graph tests of test_cuda_forward.c run with the default,
 * every group fused; here only QKV, so a step mixes fused and single GEMMs).
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
#include "engine/forward.h"
#include "model/config.h"
#include "model/weights.h"

#ifndef LA_HAVE_CUDA

Test(cuda_fused_gemm, skipped_without_cuda) {
    printf("skipped: no GPU (this build has no CUDA backend)\n");
}

#else

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_hooks.h"
#include "backend/cuda/cuda_kernels.h"

/* matmul_group fused against separate matmuls: both bf16 in, f32 accumulation, bf16 out;
 * cuBLAS may accumulate the wider GEMM in another order (split-K), so an output can round
 * to the neighbouring bf16 (2^-8 relative) of the largest output. */
#define GROUP_TOL_REL 8e-3
/* Logits with fusion on against off, both bf16 on the GPU, relative to 1 + max |logit| of
 * the row like test_cuda_forward.c's LOGIT_TOL_REL (8e-2, GPU against CPU) but ten times
 * tighter: only the GEMM rounding above differs, carried through the layers; wrong columns
 * or a stale split move the logits by O(1) of the scale. */
#define FUSED_TOL_REL 8e-3

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static float urand_pm1(void) { /* [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* ============================================================ split_cols ============= */

/* Split [n_rows, sum cols] into the parts on the device and compare every element with
 * the host's column copy (bit-exact). */
static void split_case(int32_t n_rows, const int32_t *cols, int32_t n_parts) {
    int64_t total = 0;
    for (int32_t i = 0; i < n_parts; i++) total += cols[i];
    size_t n = (size_t)(n_rows * total);
    uint16_t *x = malloc(n * 2 + 2), *got = malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) x[i] = la_f32_to_bf16(urand_pm1());
    la_cuda_split_params p = {.n_parts = n_parts, .n_rows = n_rows};
    void *dx = NULL;
    cr_assert_eq(cudaMalloc(&dx, n * 2 + 16), cudaSuccess);
    cr_assert_eq(cudaMemcpy(dx, x, n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    p.x = dx;
    for (int32_t i = 0; i < n_parts; i++) {
        p.n_cols[i] = cols[i];
        cr_assert_eq(cudaMalloc((void **)&p.out[i], (size_t)n_rows * (size_t)cols[i] * 2 + 16), cudaSuccess);
        cr_assert_eq(cudaMemset(p.out[i], 0xff, (size_t)n_rows * (size_t)cols[i] * 2), cudaSuccess);
    }
    la_err err = {0};
    LA_CHECK_OK(la_cuda_split_cols(&p, 0, &err), err);
    cr_assert_eq(cudaDeviceSynchronize(), cudaSuccess);
    int64_t c0 = 0;
    for (int32_t i = 0; i < n_parts; i++) {
        cr_assert_eq(cudaMemcpy(got, p.out[i], (size_t)n_rows * (size_t)cols[i] * 2, cudaMemcpyDeviceToHost),
                     cudaSuccess);
        for (int32_t r = 0; r < n_rows; r++)
            for (int32_t j = 0; j < cols[i]; j++) {
                uint16_t want = x[(size_t)r * (size_t)total + (size_t)(c0 + j)];
                uint16_t have = got[(size_t)r * (size_t)cols[i] + (size_t)j];
                cr_assert_eq(have, want, "%d rows, part %d of %d columns: [%d][%d] is 0x%04x, expected 0x%04x", n_rows,
                             i, cols[i], r, j, have, want);
            }
        c0 += cols[i];
        cudaFree(p.out[i]);
    }
    cudaFree(dx);
    free(x);
    free(got);
}

Test(cuda_fused_gemm, split_cols_copies_each_part_exactly) {
    if (!la_test_have_gpu()) return;
    /* 16-byte vectors: Llama-3-8B's Q, K, V widths, one decode row and a question chunk */
    const int32_t qkv[3] = {4096, 1024, 1024}, gate_up[2] = {14336, 14336};
    split_case(1, qkv, 3);
    split_case(64, qkv, 3);
    split_case(3, gate_up, 2);
    /* element by element: widths not multiples of 8, a part narrower than a vector */
    const int32_t odd[3] = {37, 5, 3}, tiny[3] = {64, 16, 16};
    split_case(1, odd, 3);
    split_case(45, odd, 3);
    split_case(128, tiny, 3);
    split_case(7, odd, 1);
}

Test(cuda_fused_gemm, split_cols_rejects_bad_parts) {
    if (!la_test_have_gpu()) return;
    la_err err = {0};
    la_cuda_split_params p = {.n_parts = 4, .n_rows = 1};
    cr_assert_eq(la_cuda_split_cols(&p, 0, &err), LA_ERR_INTERNAL);
    p.n_parts = 2;
    p.n_cols[0] = 8;
    p.n_cols[1] = 0;
    cr_assert_eq(la_cuda_split_cols(&p, 0, &err), LA_ERR_INTERNAL, "a part of 0 columns: %s", err.msg);
}

/* ============================================================ matmul_group =========== */

/* On a random-weights backend of the tiny shape: x [n_rows, hidden] times each group,
 * through matmul_group and through one matmul per weight. Fused (n_rows within the
 * threshold, fusion on): within GROUP_TOL_REL; otherwise bit-equal. */
static void group_case(la_backend *be, int32_t n_rows, bool expect_fused) {
    const la_backend_ops *op = be->ops;
    const la_backend_shape *m = &be->shape;
    la_err err = {0};
    la_act x;
    LA_CHECK_OK(op->act_alloc(be, n_rows, m->hidden_size, &x, &err), err);
    float *h = malloc(sizeof(float) * (size_t)n_rows * (size_t)m->hidden_size);
    for (int64_t i = 0; i < (int64_t)n_rows * m->hidden_size; i++) h[i] = urand_pm1();
    LA_CHECK_OK(la_cuda_act_upload(be, &x, h, &err), err);
    free(h);
    static const la_weight_kind groups[2][3] = {{LA_W_Q, LA_W_K, LA_W_V}, {LA_W_GATE, LA_W_UP}};
    const int32_t sizes[2] = {3, 2};
    for (int g = 0; g < 2; g++) {
        la_act fused[3], single[3];
        la_act *outs[3];
        for (int32_t i = 0; i < sizes[g]; i++) {
            int64_t n_out, n_in;
            la_weight_shape(m, groups[g][i], &n_out, &n_in);
            LA_CHECK_OK(op->act_alloc(be, n_rows, n_out, &fused[i], &err), err);
            LA_CHECK_OK(op->act_alloc(be, n_rows, n_out, &single[i], &err), err);
            outs[i] = &fused[i];
        }
        LA_CHECK_OK(op->matmul_group(be, &x, groups[g], sizes[g], 1, outs, &err), err);
        for (int32_t i = 0; i < sizes[g]; i++)
            LA_CHECK_OK(op->matmul(be, &x, groups[g][i], 1, &single[i], &err), err);
        for (int32_t i = 0; i < sizes[g]; i++) {
            size_t n = (size_t)(fused[i].n_rows * fused[i].n_cols);
            float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
            LA_CHECK_OK(op->to_host(be, &fused[i], a, &err), err);
            LA_CHECK_OK(op->to_host(be, &single[i], b, &err), err);
            double scale = 0;
            for (size_t j = 0; j < n; j++) scale = fmax(scale, fabs((double)b[j]));
            size_t at;
            double d = la_test_max_abs_diff(a, b, n, &at), tol = expect_fused ? GROUP_TOL_REL * scale : 0.0;
            cr_assert(d <= tol, "group %d weight %d, %d rows (%s): max |group - single| %.4g at %zu (%.6f vs %.6f) "
                      "> %.4g", g, (int)groups[g][i], n_rows, expect_fused ? "fused" : "not fused", d, at, a[at], b[at],
                      tol);
            printf("group %d weight %d, %d rows (%s): max |group - single| %.4g (scale %.4g)\n", g, (int)groups[g][i],
                   n_rows, expect_fused ? "fused" : "not fused", d, scale);
            free(a);
            free(b);
        }
        for (int32_t i = 0; i < sizes[g]; i++) {
            op->act_free(be, &fused[i]);
            op->act_free(be, &single[i]);
        }
    }
    op->act_free(be, &x);
}

/* A CUDA backend with random weights of the "tiny" preset shape (*cfg). */
static la_backend *tiny_random_backend(la_model_config *cfg) {
    la_err err = {0};
    LA_CHECK_OK(la_model_config_preset("tiny", cfg, &err), err);
    la_backend *be = NULL;
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CUDA, 0, &be, &err), err);
    LA_CHECK_OK(la_backend_load_model(be, cfg, NULL, &err), err);
    return be;
}

Test(cuda_fused_gemm, matmul_group_matches_separate_matmuls) {
    if (!la_test_have_gpu()) return;
    la_model_config cfg;
    la_backend *be = tiny_random_backend(&cfg);
    cr_assert_not_null(be->ops->matmul_group);
    la_cuda_fused_gemm_set(be, LA_CUDA_FUSED_ALL);
    cr_assert_eq(la_cuda_fused_gemm(be), LA_CUDA_FUSED_ALL);
    group_case(be, 1, true);
    group_case(be, 5, true);
    group_case(be, 128, true);
    group_case(be, 129, false); /* above the threshold: one GEMM per weight */
    la_cuda_fused_gemm_set(be, 0);
    group_case(be, 5, false);
    la_cuda_fused_gemm_set(be, LA_CUDA_FUSED_QKV);
    cr_assert_eq(la_cuda_fused_gemm(be), LA_CUDA_FUSED_QKV);
    la_backend_destroy(be);
}

/* LA_CUDA_FUSED_GEMM at create: unset or 1 all groups, 0 none, qkv / gate_up one; any
 * other value fails the create with LA_ERR_INVALID_ARG (no backend made). */
Test(cuda_fused_gemm, env_sets_the_default_groups) {
    if (!la_test_have_gpu()) return;
    const struct {
        const char *value;
        uint32_t groups;
    } cases[] = {{NULL, LA_CUDA_FUSED_ALL}, {"1", LA_CUDA_FUSED_ALL}, {"0", 0}, {"qkv", LA_CUDA_FUSED_QKV},
                 {"gate_up", LA_CUDA_FUSED_GATE_UP}, {"gemm", LA_CUDA_FUSED_QKV | LA_CUDA_FUSED_GATE_UP}};
    la_err err = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].value) setenv("LA_CUDA_FUSED_GEMM", cases[i].value, 1);
        else unsetenv("LA_CUDA_FUSED_GEMM");
        la_backend *be = NULL;
        LA_CHECK_OK(la_backend_create(LA_DEVICE_CUDA, 0, &be, &err), err);
        cr_assert_eq(la_cuda_fused_gemm(be), cases[i].groups, "LA_CUDA_FUSED_GEMM=%s: groups %u, expected %u",
                     cases[i].value ? cases[i].value : "(unset)", la_cuda_fused_gemm(be), cases[i].groups);
        la_backend_destroy(be);
    }
    la_test_cuda_env_rejected("LA_CUDA_FUSED_GEMM", "yes");
}

/* A list that is not a stacked group (K alone with Q in another order) runs as separate
 * matmuls: bit-equal to them. */
Test(cuda_fused_gemm, matmul_group_of_other_weights_runs_separately) {
    if (!la_test_have_gpu()) return;
    la_err err = {0};
    la_model_config cfg;
    la_backend *be = tiny_random_backend(&cfg);
    const la_backend_ops *op = be->ops;
    const int32_t n_rows = 3;
    la_act x, out[2][2];
    LA_CHECK_OK(op->act_alloc(be, n_rows, cfg.hidden_size, &x, &err), err);
    float *h = malloc(sizeof(float) * (size_t)n_rows * (size_t)cfg.hidden_size);
    for (int64_t i = 0; i < (int64_t)n_rows * cfg.hidden_size; i++) h[i] = urand_pm1();
    LA_CHECK_OK(la_cuda_act_upload(be, &x, h, &err), err);
    free(h);
    const la_weight_kind w[2] = {LA_W_K, LA_W_Q};
    for (int k = 0; k < 2; k++) {
        int64_t n_out, n_in;
        la_weight_shape(&be->shape, w[k], &n_out, &n_in);
        for (int j = 0; j < 2; j++) LA_CHECK_OK(op->act_alloc(be, n_rows, n_out, &out[j][k], &err), err);
    }
    LA_CHECK_OK(op->matmul_group(be, &x, w, 2, 0, (la_act *const[]){&out[0][0], &out[0][1]}, &err), err);
    for (int k = 0; k < 2; k++) LA_CHECK_OK(op->matmul(be, &x, w[k], 0, &out[1][k], &err), err);
    for (int k = 0; k < 2; k++) {
        size_t n = (size_t)(out[0][k].n_rows * out[0][k].n_cols);
        float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
        LA_CHECK_OK(op->to_host(be, &out[0][k], a, &err), err);
        LA_CHECK_OK(op->to_host(be, &out[1][k], b, &err), err);
        cr_assert(memcmp(a, b, sizeof(float) * n) == 0, "weight %d differs", (int)w[k]);
        free(a);
        free(b);
        for (int j = 0; j < 2; j++) op->act_free(be, &out[j][k]);
    }
    op->act_free(be, &x);
    la_backend_destroy(be);
}

/* ============================================================ forward passes ========= */

/* Sequences of a hand-driven paged KV cache: sequence i owns blocks [2 + i * F_BLOCKS, +
 * F_BLOCKS) (blocks 0, 1 unused) and holds tokens at positions [0, len). */
#define F_BLOCK 16
#define F_SEQS 5
#define F_BLOCKS 80 /* 1280 tokens per sequence: long enough for decode rows to split */
#define F_ROWS 256

typedef struct fpair {
    la_model_config cfg;
    la_weights *w;
    la_backend *be[2];
    float *logits[2];
    int32_t len[F_SEQS];
    int32_t ids[F_SEQS][F_BLOCKS * F_BLOCK];
    int32_t n_steps;
} fpair;

/* Two CUDA backends on the checkpoint's weights: graphs[i], fused[i] (LA_CUDA_FUSED_*). */
static void fpair_init(fpair *f, const char *model, const bool graphs[2], const uint32_t fused[2]) {
    memset(f, 0, sizeof *f);
    la_test_load_fixture_model(model, &f->cfg, &f->w);
    la_err err = {0};
    for (int i = 0; i < 2; i++) {
        LA_CHECK_OK(la_backend_create(LA_DEVICE_CUDA, 0, &f->be[i], &err), err);
        la_cuda_graphs_enable(f->be[i], graphs[i]);
        la_cuda_fused_gemm_set(f->be[i], fused[i]);
        cr_assert_eq(la_cuda_fused_gemm(f->be[i]), fused[i]);
        LA_CHECK_OK(la_backend_load_model(f->be[i], &f->cfg, f->w, &err), err);
        LA_CHECK_OK(f->be[i]->ops->kv_alloc(f->be[i], 2 + F_SEQS * F_BLOCKS, F_BLOCK, &err), err);
        f->logits[i] = malloc(sizeof(float) * F_ROWS * (size_t)f->cfg.vocab_size);
    }
    uint64_t r = 4242;
    for (int32_t s = 0; s < F_SEQS; s++)
        for (int32_t t = 0; t < F_BLOCKS * F_BLOCK; t++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            f->ids[s][t] = (int32_t)((r >> 33) % (uint64_t)f->cfg.vocab_size);
        }
}

static void fpair_fini(fpair *f) {
    for (int i = 0; i < 2; i++) {
        free(f->logits[i]);
        la_backend_destroy(f->be[i]);
    }
    la_weights_destroy(f->w);
}

/* One step on both backends: sequence seq[k] appends n_new[k] tokens, logits at every row.
 * tol_rel 0: bit-equal logits; else each row within tol_rel x (1 + max |logit| of be[0]'s
 * row). Returns the worst error / tolerance (0 when bit-equal). */
static double fpair_step(fpair *f, const int32_t *seq, const int32_t *n_new, int32_t n_seqs, double tol_rel,
                         const char *what) {
    static int32_t tokens[F_ROWS], pos[F_ROWS], rows[F_ROWS];
    static int64_t slots[F_ROWS];
    static la_batch_seq seqs[F_SEQS];
    static la_attn_block blocks[F_SEQS * F_BLOCKS];
    int32_t n = 0, nb = 0;
    for (int32_t k = 0; k < n_seqs; k++) {
        const int32_t s = seq[k], first = 2 + s * F_BLOCKS, end = f->len[s] + n_new[k], row0 = n, block0 = nb;
        cr_assert(end <= F_BLOCKS * F_BLOCK && n + n_new[k] <= F_ROWS, "test layout too small");
        for (int32_t t = f->len[s]; t < end; t++, n++) {
            tokens[n] = f->ids[s][t];
            pos[n] = t;
            rows[n] = n;
            slots[n] = (int64_t)(first + t / F_BLOCK) * F_BLOCK + t % F_BLOCK;
        }
        for (int32_t i = 0; i * F_BLOCK < end; i++, nb++)
            blocks[nb] = (la_attn_block){first + i, end - i * F_BLOCK < F_BLOCK ? end - i * F_BLOCK : F_BLOCK,
                                         i * F_BLOCK, 0, 0};
        seqs[k] = (la_batch_seq){row0, n_new[k], block0, nb - block0};
        f->len[s] = end;
    }
    la_batch b = {n, tokens, pos, pos, slots, n_seqs, seqs, nb, blocks, n, rows};
    la_err err = {0};
    for (int i = 0; i < 2; i++) LA_CHECK_OK(la_forward(f->be[i], &b, f->logits[i], &err), err);
    const size_t V = (size_t)f->cfg.vocab_size;
    double worst = 0;
    for (int32_t r = 0; r < n; r++) {
        const float *ref = f->logits[0] + (size_t)r * V, *got = f->logits[1] + (size_t)r * V;
        double m = 0;
        for (size_t j = 0; j < V; j++) m = fmax(m, fabs((double)ref[j]));
        size_t at;
        double d = la_test_max_abs_diff(got, ref, V, &at), tol = tol_rel * (1.0 + m);
        if (tol_rel == 0)
            cr_assert(memcmp(got, ref, V * sizeof(float)) == 0, "%s, step %d row %d: logits differ by %.4g at "
                      "token %zu (%.6f vs %.6f), expected bit-equal", what, f->n_steps, r, d, at, got[at], ref[at]);
        else
            cr_assert(d <= tol, "%s, step %d row %d: max |logit difference| %.4g at token %zu (%.6f vs %.6f) > "
                      "tolerance %.4g", what, f->n_steps, r, d, at, got[at], ref[at], tol);
        if (tol > 0 && d / tol > worst) worst = d / tol;
    }
    f->n_steps++;
    return worst;
}

/* Fusion on ([1]) against off ([0]), graphs off: a 60-token prefill (fused), decode rows,
 * a 105-row prefill of four more sequences in one step (fused), decode batches of all
 * five (5 rows), then a 150-row prefill (above the threshold: single GEMMs, reading KV the
 * fused steps wrote) and a decode row after it. Every step within FUSED_TOL_REL. */
static void fused_vs_unfused(const char *model) {
    if (!la_test_have_gpu()) return;
    fpair f;
    const bool graphs[2] = {false, false};
    const uint32_t fused[2] = {0, LA_CUDA_FUSED_ALL};
    fpair_init(&f, model, graphs, fused);
    const int32_t ones[F_SEQS] = {1, 1, 1, 1, 1}, all[F_SEQS] = {0, 1, 2, 3, 4};
    const int32_t len60[1] = {60}, lens[4] = {20, 33, 7, 45}, len150[1] = {150};
    double worst = fpair_step(&f, all, len60, 1, FUSED_TOL_REL, "prefill of 60 tokens");
    for (int s = 0; s < 4; s++) worst = fmax(worst, fpair_step(&f, all, ones, 1, FUSED_TOL_REL, "decode of 1"));
    worst = fmax(worst, fpair_step(&f, all + 1, lens, 4, FUSED_TOL_REL, "prefill of 4 sequences (105 rows)"));
    for (int s = 0; s < 6; s++) worst = fmax(worst, fpair_step(&f, all, ones, 5, FUSED_TOL_REL, "decode of 5"));
    worst = fmax(worst, fpair_step(&f, all + 3, len150, 1, FUSED_TOL_REL, "prefill of 150 tokens (not fused)"));
    worst = fmax(worst, fpair_step(&f, all + 3, ones, 1, FUSED_TOL_REL, "decode after it"));
    printf("%s: fused GEMMs on vs off, worst logit error / tolerance (%.0e x (1 + max |logit|)) = %.3f\n", model,
           FUSED_TOL_REL, worst);
    fflush(stdout);
    fpair_fini(&f);
}

Test(cuda_fused_gemm, logits_match_unfused_f32_tied) { fused_vs_unfused("tiny-f32-tied"); }
Test(cuda_fused_gemm, logits_match_unfused_bf16_untied_mqa) { fused_vs_unfused("tiny-bf16-untied"); }
Test(cuda_fused_gemm, logits_match_unfused_f32_linear_rope) { fused_vs_unfused("tiny-f32-linear"); }

/* The residual add + norm, the SwiGLU-from-the-stacked-GEMM and the KV-write-from-the-QKV-
 * GEMM fusions ([1]: all groups) against the GEMM groups alone ([0]): bit-equal logits on
 * prefills under and over 128 rows and on decode steps (the fusions change no arithmetic;
 * the KV the fused steps wrote is read back by every later step). */
Test(cuda_fused_gemm, add_norm_swiglu_and_kv_write_fusions_are_bit_equal) {
    if (!la_test_have_gpu()) return;
    fpair f;
    const bool graphs[2] = {false, false};
    const uint32_t fused[2] = {LA_CUDA_FUSED_QKV | LA_CUDA_FUSED_GATE_UP, LA_CUDA_FUSED_ALL};
    fpair_init(&f, "tiny-f32-tied", graphs, fused);
    const int32_t ones[F_SEQS] = {1, 1, 1, 1, 1}, all[F_SEQS] = {0, 1, 2, 3, 4};
    const int32_t lens[3] = {60, 30, 9}, len150[1] = {150};
    fpair_step(&f, all, lens, 3, 0, "prefill of 3 sequences (99 rows)");
    for (int s = 0; s < 5; s++) fpair_step(&f, all, ones, 3, 0, "decode of 3");
    fpair_step(&f, all + 3, len150, 1, 0, "prefill of 150 tokens (GEMMs not fused, add_norm fused)");
    for (int s = 0; s < 3; s++) fpair_step(&f, all, ones, 4, 0, "decode of 4");
    fpair_fini(&f);
}

/* Graphs on ([1]) against off ([0]) with the given groups fused: with QKV only a recorded
 * decode step mixes OP_MATMUL_GROUP and per-weight OP_MATMULs; with all groups it holds
 * OP_QKV_KV_WRITE, OP_ADD_RMSNORM and OP_GATE_UP_SWIGLU; the replays give bit-equal logits. */
static void graph_replay(uint32_t groups, const char *what) {
    if (!la_test_have_gpu()) return;
    fpair f;
    const bool graphs[2] = {false, true};
    const uint32_t fused[2] = {groups, groups};
    fpair_init(&f, "tiny-bf16-untied", graphs, fused);
    const int32_t ones[F_SEQS] = {1, 1, 1, 1, 1}, all[F_SEQS] = {0, 1, 2, 3, 4}, lens[5] = {70, 30, 1, 17, 40};
    fpair_step(&f, all, lens, 5, 0, "prefill of 5 sequences");
    for (int s = 0; s < 10; s++) fpair_step(&f, all, ones, 5, 0, "decode of 5");
    la_cuda_graph_stats st;
    la_cuda_graph_stats_get(f.be[1], &st);
    printf("%s: graph steps recorded %lld, replayed %lld, captures %lld, failures %lld\n", what,
           (long long)st.steps_recorded, (long long)st.steps_replayed, (long long)st.captures,
           (long long)st.capture_failures);
    cr_assert_eq(st.steps_recorded, 10);
    cr_assert_eq(st.capture_failures, 0);
    cr_assert_geq(st.captures, 1);
    /* the first sight of a key runs eagerly, the second captures; a key may change once
     * more as the step's buffers settle (test_cuda_forward.c's graph tests) */
    cr_assert_geq(st.steps_replayed, 5, "only %lld of 10 decode steps replayed a graph", (long long)st.steps_replayed);
    fpair_fini(&f);
}

Test(cuda_fused_gemm, graph_replay_of_fused_steps_equals_eager) { graph_replay(LA_CUDA_FUSED_QKV, "qkv fused only"); }
Test(cuda_fused_gemm, graph_replay_of_all_fusions_equals_eager) { graph_replay(LA_CUDA_FUSED_ALL, "all fused"); }

/* Decode v2's in-kernel merge of rows split over the KV length ([1], graphs on: replayed
 * graphs reuse the merge counters) against attn_combine ([0], graphs off): five sequences
 * of 1200, 600, 40, 900 and 1 cached tokens (a decode-only step splits rows of more than 512
 * keys: here 3, 2, 1, 2 and 1 pieces), then decode steps of all five, bit-equal logits. */
Test(cuda_fused_gemm, in_kernel_decode_merge_equals_attn_combine) {
    if (!la_test_have_gpu()) return;
    fpair f;
    const bool graphs[2] = {false, true};
    const uint32_t fused[2] = {LA_CUDA_FUSED_ALL & ~LA_CUDA_FUSED_MERGE, LA_CUDA_FUSED_ALL};
    fpair_init(&f, "tiny-bf16-untied", graphs, fused);
    const int32_t ones[F_SEQS] = {1, 1, 1, 1, 1}, all[F_SEQS] = {0, 1, 2, 3, 4};
    const int32_t target[F_SEQS] = {1200, 600, 40, 900, 1};
    for (int32_t s = 0; s < F_SEQS; s++)
        while (f.len[s] < target[s]) {
            const int32_t n = target[s] - f.len[s] < 240 ? target[s] - f.len[s] : 240;
            fpair_step(&f, all + s, &n, 1, 0, "prefill chunk");
        }
    for (int s = 0; s < 12; s++) fpair_step(&f, all, ones, 5, 0, "decode of 5 (long contexts)");
    la_cuda_graph_stats st;
    la_cuda_graph_stats_get(f.be[1], &st);
    printf("in-kernel merge: graph steps recorded %lld, replayed %lld\n", (long long)st.steps_recorded,
           (long long)st.steps_replayed);
    cr_assert_eq(st.capture_failures, 0);
    cr_assert_geq(st.steps_replayed, 6, "only %lld of 12 decode steps replayed a graph", (long long)st.steps_replayed);
    fpair_fini(&f);
}

#endif /* LA_HAVE_CUDA */
