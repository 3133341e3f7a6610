/* The CPU backend's vector kernels (src/backend/cpu/cpu_kernels.h): every table this CPU
 * runs (AVX-512, AVX2) equals the portable C table on random shapes, odd sizes included;
 * and through the forward pass, each table (the portable one forced once with
 * LA_CPU_ISA=portable) matches transformers' logits, prefill and one-token decode steps
 * alike, with f32 weights at the HF-oracle tolerance and bf16 / f16 weights (rounded from
 * an f32 checkpoint) at their own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "common/fixture.h"
#include "common/synth_model.h"
#include "common/test_util.h"
#include "engine/backend_model.h"
#include "model/config.h"
#include "model/weights.h"

/* Kernel against portable: the same f32 products summed in another order. Relative to the
 * sum of |terms| (the scale of the rounding), with an absolute floor. */
#define SUM_REL_TOL 2e-6
#define SUM_ABS_TOL 1e-7f
/* exp by a Cephes polynomial against expf: relative. */
#define EXP_REL_TOL 4e-7
/* Logits against transformers (f32 compute on both sides): as test_forward_hf.c. */
#define LOGIT_TOL 1e-4
/* Logits with bf16 / f16 weights rounded from an f32 checkpoint, against transformers with
 * the f32 weights: bf16 keeps 8 significant bits (relative rounding up to 2^-9), f16 11
 * (2^-12). Measured max |diff| over a 46-token prompt whose logits reach |6| (std 1.5):
 * bf16 0.126 (tiny-f32-tied), 0.236 (tiny-mistral); f16 0.015 (README "CPU backend"). */
#define BF16_WEIGHTS_LOGIT_TOL 0.4
#define F16_WEIGHTS_LOGIT_TOL 0.05
/* --cpu-weights bf16-dot (activations rounded to bf16 in every product) on a bf16 checkpoint,
 * against transformers' f32 compute: measured max |diff| on tiny-bf16-untied 0.05 (set below
 * after the measurement in README "CPU backend"). */
#define BF16_DOT_LOGIT_TOL 0.2
/* A bf16 KV cache (K and V rounded to bf16 when written), weights as the checkpoint has
 * them: measured 0.047 (tiny-f32-tied), 0.096 (tiny-bf16-untied). */
#define BF16_KV_LOGIT_TOL 0.2

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform [-1, 1) */
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* n random values stored in dtype t (f32 copy of the stored values in *f32 when asked). */
static void *random_array(la_dtype t, size_t n, float **f32) {
    void *p = malloc(n * la_dtype_size(t) + 1);
    float *f = malloc(n * sizeof(float) + 1);
    cr_assert(p && f);
    for (size_t i = 0; i < n; i++) {
        float v = frand();
        if (t == LA_DTYPE_F32) ((float *)p)[i] = v;
        else if (t == LA_DTYPE_BF16) ((uint16_t *)p)[i] = la_f32_to_bf16(v), v = la_bf16_to_f32(((uint16_t *)p)[i]);
        else ((uint16_t *)p)[i] = la_f32_to_f16(v), v = la_f16_to_f32(((uint16_t *)p)[i]);
        f[i] = v;
    }
    if (f32) *f32 = f;
    else free(f);
    return p;
}

/* The tables to check against portable: those this CPU runs (at least portable itself). */
static int vector_tables(const la_cpu_kernels **out) {
    int n = 0;
    for (int i = 0; i < LA_CPU_ISA_COUNT; i++) {
        const la_cpu_kernels *k = la_cpu_kernels_for((la_cpu_isa)i);
        if (k) out[n++] = k;
    }
    return n;
}

static const la_dtype k_dtypes[3] = {LA_DTYPE_F32, LA_DTYPE_BF16, LA_DTYPE_F16};

/* The tolerance of a computed bias + x . w (k terms) against another order of the same sum:
 * SUM_REL_TOL of the sum of |terms| plus SUM_ABS_TOL; *exact (when not NULL) the sum in
 * double. */
static double dot_tol(const float *x, const float *w, int64_t k, double bias, double *exact) {
    double abs_sum = fabs(bias), sum = bias;
    for (int64_t c = 0; c < k; c++) {
        abs_sum += fabs((double)x[c] * w[c]);
        sum += (double)x[c] * w[c];
    }
    if (exact) *exact = sum;
    return SUM_REL_TOL * abs_sum + SUM_ABS_TOL;
}

Test(cpu_kernels, this_cpu_runs_its_best_table) {
    cr_assert(la_cpu_isa_supported(LA_CPU_ISA_PORTABLE));
    const la_cpu_kernels *k = la_cpu_kernels_get();
    cr_assert(k && k->gemm_nt && k->attn_scores && k->exp_sum && k->attn_accum && k->attn_block && k->silu_mul && k->to_f32);
    printf("cpu_kernels: this CPU runs %s (avx2 %s, avx512 %s)\n", k->name,
           la_cpu_isa_supported(LA_CPU_ISA_AVX2) ? "yes" : "no", la_cpu_isa_supported(LA_CPU_ISA_AVX512) ? "yes" : "no");
}

/* A row's products do not depend on the rows beside it: row i of an m-row gemm_nt is
 * bitwise the one-row product of x's row i, for every table, dtype and m (each table
 * tiles x rows differently: 2 / 3 on AVX2, up to 4 on AVX-512). The store's tests compare
 * documents computed in steps of different sizes bit for bit on this. */
Test(cpu_kernels, gemm_nt_rows_do_not_depend_on_the_batch) {
    static const int64_t ms[] = {2, 3, 4, 5, 7, 11};
    static const int64_t ks[] = {7, 16, 33, 384};
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    const int n_tabs = vector_tables(tabs);
    for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (int ti = 0; ti < 3; ti++) {
            const int64_t k = ks[ki], n_out = 9, m_max = 11;
            float *x = random_array(LA_DTYPE_F32, (size_t)(m_max * k), NULL);
            void *wr = random_array(k_dtypes[ti], (size_t)(n_out * k), NULL);
            void *w = malloc((size_t)la_cpu_packed_elems(n_out, k) * la_dtype_size(k_dtypes[ti]));
            la_cpu_pack(w, k_dtypes[ti], wr, k_dtypes[ti], n_out, k);
            float one[9], *y = malloc(sizeof(float) * (size_t)(m_max * n_out));
            for (int t = 0; t < n_tabs; t++)
                for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
                    const int64_t m = ms[mi];
                    tabs[t]->gemm_nt(x, k, m, w, k_dtypes[ti], k, 0, n_out, NULL, y, n_out);
                    for (int64_t i = 0; i < m; i++) {
                        tabs[t]->gemm_nt(x + i * k, k, 1, w, k_dtypes[ti], k, 0, n_out, NULL, one, n_out);
                        cr_assert(!memcmp(one, y + i * n_out, sizeof one), "%s %s k=%lld: row %lld of %lld differs",
                                  tabs[t]->name, la_dtype_name(k_dtypes[ti]), (long long)k, (long long)i,
                                  (long long)m);
                    }
                }
            free(x), free(wr), free(w), free(y);
        }
}

/* The cache blocking of many x rows (la_cpu_gemm_blocks: panels of weight rows, blocks of
 * x rows) leaves every output the one-row product's, bit for bit, and the portable table's
 * within the sum tolerance; nothing outside the column range is written. m and k large
 * enough for several row blocks and panels under both vector tables' budgets, a column
 * range that starts inside the weight and ends inside a packed group, a bias, padded rows. */
Test(cpu_kernels, gemm_nt_blocked_rows_equal_one_row_products) {
    const int64_t m = 99, k = 4100, n_out = 75, n0 = 4, n1 = 74, ldx = k + 3, ldy = n_out + 2;
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    const int n_tabs = vector_tables(tabs);
    for (int ti = 0; ti < 3; ti++) {
        const size_t es = la_dtype_size(k_dtypes[ti]);
        int64_t mb, nb;
        la_cpu_gemm_blocks(m, k, es, LA_CPU_AVX2_GEMM_XBLOCK_BYTES, LA_CPU_AVX2_GEMM_PANEL_BYTES, &mb, &nb);
        cr_assert(mb < m && nb < n1 - n0, "AVX2's budgets: several blocks (mb %lld, nb %lld)", (long long)mb,
                  (long long)nb);
        la_cpu_gemm_blocks(m, k, es, LA_CPU_AVX512_GEMM_XBLOCK_BYTES, LA_CPU_AVX512_GEMM_PANEL_BYTES, &mb, &nb);
        cr_assert(mb < m && nb < n1 - n0, "AVX-512's budgets: several blocks (mb %lld, nb %lld)", (long long)mb,
                  (long long)nb);
        float *wf, *x = random_array(LA_DTYPE_F32, (size_t)(m * ldx), NULL);
        void *wr = random_array(k_dtypes[ti], (size_t)(n_out * k), &wf);
        void *w = malloc((size_t)la_cpu_packed_elems(n_out, k) * es);
        la_cpu_pack(w, k_dtypes[ti], wr, k_dtypes[ti], n_out, k);
        float *bias = random_array(LA_DTYPE_F32, (size_t)n_out, NULL);
        float *ref = calloc((size_t)(m * ldy), sizeof(float)), *y = malloc(sizeof(float) * (size_t)(m * ldy));
        float *one = malloc(sizeof(float) * (size_t)ldy);
        la_cpu_kernels_portable.gemm_nt(x, ldx, m, w, k_dtypes[ti], k, n0, n1, bias, ref, ldy);
        for (int t = 0; t < n_tabs; t++) {
            for (int64_t i = 0; i < m * ldy; i++) y[i] = 12345.0f; /* untouched outside [n0, n1) */
            tabs[t]->gemm_nt(x, ldx, m, w, k_dtypes[ti], k, n0, n1, bias, y, ldy);
            for (int64_t i = 0; i < m; i++) {
                for (int64_t j = 0; j < ldy; j++) one[j] = -777.0f;
                tabs[t]->gemm_nt(x + i * ldx, ldx, 1, w, k_dtypes[ti], k, n0, n1, bias, one, ldy);
                for (int64_t j = 0; j < ldy; j++) {
                    const float got = y[i * ldy + j];
                    if (j < n0 || j >= n1) {
                        cr_assert(got == 12345.0f && one[j] == -777.0f, "%s wrote outside its columns", tabs[t]->name);
                        continue;
                    }
                    cr_assert(!memcmp(&got, &one[j], sizeof got), "%s %s: row %lld of %lld, col %lld: %.9g, one row %.9g",
                              tabs[t]->name, la_dtype_name(k_dtypes[ti]), (long long)i, (long long)m, (long long)j, got,
                              one[j]);
                    const double tol = dot_tol(x + i * ldx, wf + j * k, k, bias[j], NULL);
                    cr_assert(fabs(got - ref[i * ldy + j]) <= 2 * tol,
                              "%s %s: row %lld col %lld: %.9g, portable %.9g", tabs[t]->name,
                              la_dtype_name(k_dtypes[ti]), (long long)i, (long long)j, got, ref[i * ldy + j]);
                }
            }
        }
        free(x), free(wr), free(wf), free(w), free(bias), free(ref), free(y), free(one);
    }
}

Test(cpu_kernels, gemm_nt_equals_portable_on_odd_shapes) {
    static const int64_t ms[] = {1, 2, 3, 4, 5, 7, 8, 16, 17};
    static const int64_t ks[] = {1, 7, 15, 16, 17, 24, 33, 64, 100, 384, 1031};
    static const int64_t ns[] = {1, 3, 4, 5, 9, 33};
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    int n_tabs = vector_tables(tabs), checked = 0;
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
                for (int ti = 0; ti < 3; ti++) {
                    const int64_t m = ms[mi], k = ks[ki], n_out = ns[ni] + 7, ldx = k + 5, ldy = n_out + 2;
                    const int64_t n0 = 4, n1 = 4 + ns[ni]; /* a column range inside the weight */
                    float *wf, *x = random_array(LA_DTYPE_F32, (size_t)(m * ldx), NULL);
                    void *wr = random_array(k_dtypes[ti], (size_t)(n_out * k), &wf);
                    void *w = malloc((size_t)la_cpu_packed_elems(n_out, k) * la_dtype_size(k_dtypes[ti]));
                    la_cpu_pack(w, k_dtypes[ti], wr, k_dtypes[ti], n_out, k);
                    /* x past k is never read: NaN there would poison the sums */
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t c = k; c < ldx; c++) x[i * ldx + c] = NAN;
                    float *bias = (ni % 2) ? random_array(LA_DTYPE_F32, (size_t)n_out, NULL) : NULL;
                    float *ref = calloc((size_t)(m * ldy), sizeof(float)), *y = malloc(sizeof(float) * (size_t)(m * ldy));
                    la_cpu_kernels_portable.gemm_nt(x, ldx, m, w, k_dtypes[ti], k, n0, n1, bias, ref, ldy);
                    for (int t = 0; t < n_tabs; t++) {
                        for (int64_t i = 0; i < m * ldy; i++) y[i] = 12345.0f; /* untouched outside [n0, n1) */
                        tabs[t]->gemm_nt(x, ldx, m, w, k_dtypes[ti], k, n0, n1, bias, y, ldy);
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t j = 0; j < ldy; j++) {
                                float got = y[i * ldy + j];
                                if (j < n0 || j >= n1) {
                                    cr_assert_eq(got, 12345.0f, "%s wrote outside its columns", tabs[t]->name);
                                    continue;
                                }
                                double exact;
                                const double tol = dot_tol(x + i * ldx, wf + j * k, k, bias ? bias[j] : 0.0, &exact);
                                cr_assert(fabs(got - ref[i * ldy + j]) <= 2 * tol && fabs(got - exact) <= tol,
                                          "%s %s m=%lld k=%lld row %lld col %lld: %.9g, portable %.9g, exact %.9g",
                                          tabs[t]->name, la_dtype_name(k_dtypes[ti]), (long long)m, (long long)k,
                                          (long long)i, (long long)j, got, ref[i * ldy + j], exact);
                            }
                        checked++;
                    }
                    free(x), free(w), free(wr), free(wf), free(bias), free(ref), free(y);
                }
    cr_assert(checked >= 9 * 11 * 6 * 3);
}

/* la_cpu_pack lays element (j, c) where the layout says, rounds a wider dtype to nearest
 * even, pads with zeros; la_cpu_unpack_rows gives the rows back. */
Test(cpu_kernels, pack_and_unpack_round_trip) {
    const int64_t n = 7, k = 37, kp = 48;
    float *src = random_array(LA_DTYPE_F32, (size_t)(n * k), NULL);
    for (int ti = 0; ti < 3; ti++) {
        const la_dtype t = k_dtypes[ti];
        cr_assert_eq(la_cpu_packed_elems(n, k), 8 * kp);
        uint8_t *p = malloc((size_t)(8 * kp) * la_dtype_size(t));
        memset(p, 0xff, (size_t)(8 * kp) * la_dtype_size(t));
        la_cpu_pack(p, t, src, LA_DTYPE_F32, n, k);
        for (int64_t j = 0; j < 8; j++)
            for (int64_t c = 0; c < kp; c++) {
                float got;
                la_convert_to_f32(&got, p + (size_t)((j / 4) * 4 * kp + (c / 16) * 64 + (j % 4) * 16 + c % 16) *
                                                la_dtype_size(t), t, 1);
                float want = 0.0f;
                if (j < n && c < k) {
                    want = src[j * k + c];
                    if (t == LA_DTYPE_BF16) want = la_bf16_to_f32(la_f32_to_bf16(want));
                    if (t == LA_DTYPE_F16) want = la_f16_to_f32(la_f32_to_f16(want));
                }
                cr_assert_eq(got, want, "%s (%lld, %lld)", la_dtype_name(t), (long long)j, (long long)c);
            }
        float *rows = malloc(sizeof(float) * (size_t)(n * k));
        la_cpu_unpack_rows(la_cpu_kernels_get(), rows, p, t, k, 2, n);
        for (int64_t j = 2; j < n; j++)
            for (int64_t c = 0; c < k; c++) {
                float got;
                la_convert_to_f32(&got, p + (size_t)((j / 4) * 4 * kp + (c / 16) * 64 + (j % 4) * 16 + c % 16) *
                                                la_dtype_size(t), t, 1);
                cr_assert_eq(rows[(j - 2) * k + c], got);
            }
        free(p), free(rows);
    }
    free(src);
}

Test(cpu_kernels, to_f32_widens_exactly) {
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    int n_tabs = vector_tables(tabs);
    for (int ti = 0; ti < 3; ti++)
        for (int64_t n = 1; n < 70; n += 3) {
            float *f;
            void *src = random_array(k_dtypes[ti], (size_t)n, &f);
            float *dst = malloc(sizeof(float) * (size_t)(n + 1));
            for (int t = 0; t < n_tabs; t++) {
                dst[n] = -7.0f;
                tabs[t]->to_f32(dst, src, k_dtypes[ti], n);
                cr_assert(!memcmp(dst, f, sizeof(float) * (size_t)n), "%s %s n=%lld", tabs[t]->name,
                          la_dtype_name(k_dtypes[ti]), (long long)n);
                cr_assert_eq(dst[n], -7.0f, "%s wrote past n", tabs[t]->name);
            }
            free(src), free(f), free(dst);
        }
}

Test(cpu_kernels, attention_pieces_equal_portable) {
    static const int32_t hds[] = {2, 16, 24, 40, 64, 80, 128, 256};
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    int n_tabs = vector_tables(tabs);
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (int32_t n = 1; n <= 33; n += 4)
            for (int kt = 0; kt < 2; kt++) { /* KV rows f32, bf16 */
                const int32_t hd = hds[hi];
                const la_dtype t = kt ? LA_DTYPE_BF16 : LA_DTYPE_F32;
                const float scale = 1.0f / sqrtf((float)hd);
                float *q = random_array(LA_DTYPE_F32, (size_t)hd, NULL), *kf, *vf;
                void *K = random_array(t, (size_t)n * hd, &kf), *V = random_array(t, (size_t)n * hd, &vf);
                float s_ref[64], s[64], p_ref[64], p[64];
                float mx_ref = la_cpu_kernels_portable.attn_scores(q, K, t, n, hd, scale, s_ref);
                float *acc0 = random_array(LA_DTYPE_F32, (size_t)hd, NULL);
                float *acc_ref = malloc(sizeof(float) * (size_t)hd), *acc = malloc(sizeof(float) * (size_t)hd);
                for (int tb = 0; tb < n_tabs; tb++) {
                    const la_cpu_kernels *kn = tabs[tb];
                    float mx = kn->attn_scores(q, K, t, n, hd, scale, s);
                    float m_true = -INFINITY;
                    for (int32_t j = 0; j < n; j++) {
                        double abs_sum = 0;
                        for (int32_t d = 0; d < hd; d++) abs_sum += fabs((double)q[d] * kf[j * hd + d]) * scale;
                        cr_assert(fabs(s[j] - s_ref[j]) <= 2 * (SUM_REL_TOL * abs_sum + SUM_ABS_TOL),
                                  "%s scores hd=%d n=%d j=%d: %.9g vs %.9g", kn->name, hd, n, j, s[j], s_ref[j]);
                        if (s[j] > m_true) m_true = s[j];
                    }
                    cr_assert_eq(mx, m_true, "%s: the max of its scores", kn->name);
                    (void)mx_ref;
                    /* exp_sum on the portable scores shifted by a spread of maxima (some
                     * exponents far below the f32 range) */
                    for (int shift = 0; shift < 3; shift++) {
                        float m = mx_ref + (float)shift * 40.0f;
                        memcpy(p_ref, s_ref, sizeof(float) * (size_t)n), memcpy(p, s_ref, sizeof(float) * (size_t)n);
                        float sum_ref = la_cpu_kernels_portable.exp_sum(p_ref, n, m), sum = kn->exp_sum(p, n, m);
                        for (int32_t j = 0; j < n; j++)
                            cr_assert(fabsf(p[j] - p_ref[j]) <= EXP_REL_TOL * p_ref[j] + 1e-37f,
                                      "%s exp(%.9g) = %.9g, expf %.9g", kn->name, s_ref[j] - m, p[j], p_ref[j]);
                        cr_assert(fabsf(sum - sum_ref) <= 4 * EXP_REL_TOL * sum_ref + 1e-37f, "%s exp sum", kn->name);
                    }
                    /* accum with the portable probabilities */
                    memcpy(acc_ref, acc0, sizeof(float) * (size_t)hd), memcpy(acc, acc0, sizeof(float) * (size_t)hd);
                    la_cpu_kernels_portable.attn_accum(acc_ref, 0.75f, p_ref, V, t, n, hd);
                    kn->attn_accum(acc, 0.75f, p_ref, V, t, n, hd);
                    for (int32_t d = 0; d < hd; d++) {
                        double abs_sum = fabs(acc0[d] * 0.75);
                        for (int32_t j = 0; j < n; j++) abs_sum += fabs((double)p_ref[j] * vf[j * hd + d]);
                        cr_assert(fabs(acc[d] - acc_ref[d]) <= 2 * (SUM_REL_TOL * abs_sum + SUM_ABS_TOL),
                                  "%s accum hd=%d n=%d d=%d: %.9g vs %.9g", kn->name, hd, n, d, acc[d], acc_ref[d]);
                    }
                }
                free(q), free(K), free(V), free(kf), free(vf), free(acc0), free(acc_ref), free(acc);
            }
}

/* attn_block (the fused online-softmax step) of every table equals the portable one, over
 * several steps of one state: n across 16-key groups and tails, head_dims with and without
 * a register path, f32 and bf16 KV, score spreads that move the running max. */
Test(cpu_kernels, attn_block_equals_portable) {
    static const int32_t hds[] = {16, 24, 64, 128, 80};
    static const int32_t ns[] = {16, 1, 5, 32, 17, 48, 3, 16};
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    int n_tabs = vector_tables(tabs);
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (int kt = 0; kt < 2; kt++) {
            const int32_t hd = hds[hi];
            const la_dtype t = kt ? LA_DTYPE_BF16 : LA_DTYPE_F32;
            float *ref = calloc((size_t)hd + 2, sizeof(float)), *st[LA_CPU_ISA_COUNT];
            ref[0] = -INFINITY;
            for (int tb = 0; tb < n_tabs; tb++) {
                st[tb] = calloc((size_t)hd + 2, sizeof(float));
                st[tb][0] = -INFINITY;
            }
            for (size_t step = 0; step < sizeof ns / sizeof *ns; step++) {
                const int32_t n = ns[step];
                float *q = random_array(LA_DTYPE_F32, (size_t)hd, NULL);
                for (int32_t d = 0; d < hd; d++) q[d] *= (float)(1 + 3 * (step % 3)); /* spread the scores */
                void *K = random_array(t, (size_t)n * hd, NULL), *V = random_array(t, (size_t)n * hd, NULL);
                const float scale = 1.0f / sqrtf((float)hd);
                la_cpu_kernels_portable.attn_block(q, K, V, t, n, hd, scale, ref);
                for (int tb = 0; tb < n_tabs; tb++) {
                    tabs[tb]->attn_block(q, K, V, t, n, hd, scale, st[tb]);
                    cr_assert(fabsf(st[tb][0] - ref[0]) <= 1e-5f * (1 + fabsf(ref[0])), "%s max %.9g vs %.9g",
                              tabs[tb]->name, st[tb][0], ref[0]);
                    cr_assert(fabsf(st[tb][1] - ref[1]) <= 1e-5f * ref[1], "%s hd=%d step %zu: sum %.9g vs %.9g",
                              tabs[tb]->name, hd, step, st[tb][1], ref[1]);
                    for (int32_t d = 0; d < hd; d++)
                        cr_assert(fabsf(st[tb][2 + d] - ref[2 + d]) <= 1e-5f * ref[1],
                                  "%s hd=%d %s step %zu: acc[%d] %.9g vs %.9g", tabs[tb]->name, hd, la_dtype_name(t),
                                  step, d, st[tb][2 + d], ref[2 + d]);
                }
                free(q), free(K), free(V);
            }
            for (int tb = 0; tb < n_tabs; tb++) free(st[tb]);
            free(ref);
        }
}

/* attn_block_kt equals the portable one, and the portable one equals attn_block on the same
 * keys (row-major there): several queries, 16-key groups and shorter, over several steps. */
Test(cpu_kernels, attn_block_kt_equals_attn_block) {
    static const int32_t hds[] = {16, 48, 64, 80, 96, 128};
    static const int32_t ns[] = {16, 3, 16, 9, 1, 16};
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    int n_tabs = vector_tables(tabs);
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (int32_t nq = 1; nq <= 6; nq++) {
            const int32_t hd = hds[hi];
            const int64_t sts = hd + 2 + 3; /* padded state stride */
            float *ref = calloc((size_t)(nq * sts), sizeof(float)), *st[LA_CPU_ISA_COUNT];
            float *rowwise = calloc((size_t)(nq * sts), sizeof(float)); /* attn_block's states */
            for (int32_t g = 0; g < nq; g++) ref[g * sts] = rowwise[g * sts] = -INFINITY;
            for (int tb = 0; tb < n_tabs; tb++) {
                st[tb] = calloc((size_t)(nq * sts), sizeof(float));
                for (int32_t g = 0; g < nq; g++) st[tb][g * sts] = -INFINITY;
            }
            float *kt = malloc(sizeof(float) * 16 * (size_t)hd);
            for (size_t step = 0; step < sizeof ns / sizeof *ns; step++) {
                const int32_t n = ns[step];
                float *q = random_array(LA_DTYPE_F32, (size_t)(nq * (hd + 1)), NULL); /* stride hd + 1 */
                float *K = random_array(LA_DTYPE_F32, (size_t)n * hd, NULL), *V = random_array(LA_DTYPE_F32, (size_t)n * hd, NULL);
                for (int32_t i = 0; i < 16 * hd; i++) kt[i] = NAN; /* columns past n are never used */
                for (int32_t j = 0; j < n; j++)
                    for (int32_t d = 0; d < hd; d++) kt[d * 16 + j] = K[j * hd + d];
                const float scale = 1.0f / sqrtf((float)hd);
                la_cpu_kernels_portable.attn_block_kt(q, hd + 1, nq, kt, V, n, hd, scale, ref, sts);
                for (int32_t g = 0; g < nq; g++) { /* the portable kt step is attn_block's */
                    float *rw = rowwise + g * sts, *r = ref + g * sts;
                    la_cpu_kernels_portable.attn_block(q + g * (hd + 1), K, V, LA_DTYPE_F32, n, hd, scale, rw);
                    for (int32_t d = 0; d < hd + 2; d++)
                        cr_assert(fabsf(rw[d] - r[d]) <= 1e-5f * (1 + fabsf(r[1])), "portable kt against attn_block");
                }
                for (int tb = 0; tb < n_tabs; tb++) {
                    tabs[tb]->attn_block_kt(q, hd + 1, nq, kt, V, n, hd, scale, st[tb], sts);
                    for (int32_t g = 0; g < nq; g++) {
                        const float *r = ref + g * sts, *o = st[tb] + g * sts;
                        cr_assert(fabsf(o[0] - r[0]) <= 1e-5f * (1 + fabsf(r[0])) && fabsf(o[1] - r[1]) <= 1e-5f * r[1],
                                  "%s hd=%d nq=%d g=%d: max %.9g / %.9g, sum %.9g / %.9g", tabs[tb]->name, hd, nq, g,
                                  o[0], r[0], o[1], r[1]);
                        for (int32_t d = 0; d < hd; d++)
                            cr_assert(fabsf(o[2 + d] - r[2 + d]) <= 1e-5f * r[1], "%s hd=%d nq=%d g=%d acc[%d]",
                                      tabs[tb]->name, hd, nq, g, d);
                    }
                }
                free(q), free(K), free(V);
            }
            for (int tb = 0; tb < n_tabs; tb++) free(st[tb]);
            free(ref), free(rowwise), free(kt);
        }
}

/* attn_block_kt on several queries is, byte for byte, the same call on each query alone:
 * AVX2 runs four queries of 16 whole keys together (kt16), one alone otherwise, and their
 * states must not depend on the grouping (a row's result would depend on its GQA group). */
Test(cpu_kernels, attn_block_kt_groups_are_bit_equal_to_single_queries) {
    static const int32_t hds[] = {16, 48, 64, 80, 96, 128, 256};
    static const int32_t ns[] = {16, 16, 5, 16, 15, 1, 16};
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    int n_tabs = vector_tables(tabs);
    for (int tb = 0; tb < n_tabs; tb++)
        for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
            for (int32_t nq = 2; nq <= 9; nq++) {
                const int32_t hd = hds[hi];
                const int64_t sts = hd + 2;
                float *grouped = malloc(sizeof(float) * (size_t)(nq * sts)), *alone = malloc(sizeof(float) * (size_t)(nq * sts));
                for (int32_t g = 0; g < nq; g++) {
                    grouped[g * sts] = alone[g * sts] = -INFINITY, grouped[g * sts + 1] = alone[g * sts + 1] = 0.0f;
                    for (int32_t d = 0; d < hd; d++) grouped[g * sts + 2 + d] = alone[g * sts + 2 + d] = 0.0f;
                }
                float *kt = malloc(sizeof(float) * 16 * (size_t)hd);
                for (size_t step = 0; step < sizeof ns / sizeof *ns; step++) {
                    const int32_t n = ns[step];
                    float *q = random_array(LA_DTYPE_F32, (size_t)(nq * hd), NULL);
                    float *K = random_array(LA_DTYPE_F32, (size_t)16 * hd, NULL), *V = random_array(LA_DTYPE_F32, (size_t)n * hd, NULL);
                    for (int32_t j = 0; j < 16; j++)
                        for (int32_t d = 0; d < hd; d++) kt[d * 16 + j] = K[j * hd + d];
                    const float scale = 1.0f / sqrtf((float)hd);
                    tabs[tb]->attn_block_kt(q, hd, nq, kt, V, n, hd, scale, grouped, sts);
                    for (int32_t g = 0; g < nq; g++)
                        tabs[tb]->attn_block_kt(q + g * hd, hd, 1, kt, V, n, hd, scale, alone + g * sts, sts);
                    cr_assert(!memcmp(grouped, alone, sizeof(float) * (size_t)(nq * sts)), "%s hd=%d nq=%d n=%d",
                              tabs[tb]->name, hd, nq, n);
                    free(q), free(K), free(V);
                }
                free(grouped), free(alone), free(kt);
            }
}

/* attn_block_heads (a GQA group's heads against one block, decode; the tables that fuse it:
 * AVX2) is bit-equal to attn_block per query of the same table and within attn_block's
 * tolerance of the portable table; it writes nothing past each state: 1-7 queries (1-4 fused
 * at a time and the rest), f32 and bf16 KV, n across 16-key groups and tails, head_dims with
 * and without a fused path, several steps of one state. */
Test(cpu_kernels, attn_block_heads_equals_attn_block) {
    static const int32_t hds[] = {64, 128, 48};
    static const int32_t ns[] = {16, 37, 1, 32, 15, 64};
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    int n_tabs = vector_tables(tabs);
    cr_assert(!la_cpu_isa_supported(LA_CPU_ISA_AVX2) || la_cpu_kernels_for(LA_CPU_ISA_AVX2)->attn_block_heads,
              "the AVX2 table fuses the heads");
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++)
        for (int kt = 0; kt < 2; kt++)
            for (int32_t nq = 1; nq <= 7; nq++) {
                const int32_t hd = hds[hi];
                const la_dtype t = kt ? LA_DTYPE_BF16 : LA_DTYPE_F32;
                const int64_t qs = hd + 3, sts = hd + 2 + 5; /* padded strides */
                for (int tb = 0; tb < n_tabs; tb++) {
                    const la_cpu_kernels *kn = tabs[tb];
                    if (!kn->attn_block_heads) continue;
                    float *fused = calloc((size_t)(nq * sts), sizeof(float));
                    for (int32_t i = 0; i < nq * sts; i++) fused[i] = 12345.0f; /* the padding's sentinel */
                    float *each = calloc((size_t)(nq * sts), sizeof(float));
                    float *ref = calloc((size_t)(nq * sts), sizeof(float));
                    for (int32_t g = 0; g < nq; g++) {
                        fused[g * sts] = each[g * sts] = ref[g * sts] = -INFINITY;
                        fused[g * sts + 1] = 0.0f;
                        for (int32_t d = 0; d < hd; d++) fused[g * sts + 2 + d] = 0.0f;
                    }
                    for (size_t step = 0; step < sizeof ns / sizeof *ns; step++) {
                        const int32_t n = ns[step];
                        float *q = random_array(LA_DTYPE_F32, (size_t)(nq * qs), NULL);
                        for (int32_t i = 0; i < nq * qs; i++) q[i] *= (float)(1 + 3 * (step % 3));
                        void *K = random_array(t, (size_t)n * hd, NULL), *V = random_array(t, (size_t)n * hd, NULL);
                        const float scale = 1.0f / sqrtf((float)hd);
                        kn->attn_block_heads(q, qs, nq, K, V, t, n, hd, scale, fused, sts);
                        for (int32_t g = 0; g < nq; g++) {
                            kn->attn_block(q + g * qs, K, V, t, n, hd, scale, each + g * sts);
                            la_cpu_kernels_portable.attn_block(q + g * qs, K, V, t, n, hd, scale, ref + g * sts);
                        }
                        for (int32_t g = 0; g < nq; g++) {
                            const float *o = fused + g * sts, *e = each + g * sts, *r = ref + g * sts;
                            cr_assert(memcmp(o, e, sizeof(float) * (size_t)(hd + 2)) == 0,
                                      "%s hd=%d %s nq=%d g=%d step %zu: not attn_block's state", kn->name, hd,
                                      la_dtype_name(t), nq, g, step);
                            cr_assert(fabsf(o[0] - r[0]) <= 1e-5f * (1 + fabsf(r[0])) && fabsf(o[1] - r[1]) <= 1e-5f * r[1],
                                      "%s hd=%d nq=%d g=%d: max/sum against the portable table", kn->name, hd, nq, g);
                            for (int32_t d = 0; d < hd; d++)
                                cr_assert(fabsf(o[2 + d] - r[2 + d]) <= 1e-5f * r[1], "%s hd=%d nq=%d g=%d acc[%d]",
                                          kn->name, hd, nq, g, d);
                            for (int64_t i = hd + 2; i < sts; i++)
                                cr_assert_eq(o[i], 12345.0f, "%s hd=%d nq=%d g=%d: wrote past its state", kn->name,
                                             hd, nq, g);
                        }
                        free(q), free(K), free(V);
                    }
                    free(fused), free(each), free(ref);
                }
            }
}

Test(cpu_kernels, silu_mul_equals_portable) {
    const la_cpu_kernels *tabs[LA_CPU_ISA_COUNT];
    int n_tabs = vector_tables(tabs);
    for (int64_t n = 1; n < 80; n += 7) {
        float *g0 = random_array(LA_DTYPE_F32, (size_t)n, NULL), *u = random_array(LA_DTYPE_F32, (size_t)n, NULL);
        for (int64_t i = 0; i < n; i++) g0[i] *= (float)(i % 5) * 30.0f; /* up to |120|: exp's clamps */
        float *ref = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
        memcpy(ref, g0, sizeof(float) * (size_t)n);
        la_cpu_kernels_portable.silu_mul(ref, u, n);
        for (int tb = 0; tb < n_tabs; tb++) {
            memcpy(g, g0, sizeof(float) * (size_t)n);
            tabs[tb]->silu_mul(g, u, n);
            for (int64_t i = 0; i < n; i++)
                cr_assert(fabsf(g[i] - ref[i]) <= 1e-6f * fabsf(ref[i]) + 1e-30f, "%s silu(%.9g) * %.9g: %.9g vs %.9g",
                          tabs[tb]->name, g0[i], u[i], g[i], ref[i]);
        }
        free(g0), free(u), free(ref), free(g);
    }
}

/* ---- through the forward pass ------------------------------------------------------------ */

/* LA_CPU_GEMM_MAX_ROWS for the next backends (NULL: the default thresholds, under which the
 * fixtures' prompts all run gemm_nt): "8" sends their prefill to the BLAS path. */
static const char *g_gemm_max_rows;
/* la_backend.bf16_dot for the next backends. */
static bool g_bf16_dot;

/* Fixture model `name` on a CPU backend running kernel table `isa` (LA_CPU_ISA), with
 * weights kept in weight_dtype and a KV pool of kv_dtype, n_blocks x B slots. */
static la_backend *load_backend(const char *name, const char *isa, int32_t weight_dtype, la_dtype kv_dtype,
                                int32_t n_blocks, int32_t B, la_model_config *cfg) {
    la_weights *w;
    la_test_load_fixture_model(name, cfg, &w);
    setenv("LA_CPU_ISA", isa, 1);
    if (g_gemm_max_rows) setenv("LA_CPU_GEMM_MAX_ROWS", g_gemm_max_rows, 1);
    la_backend *be = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CPU, 2, &be, &err), err);
    unsetenv("LA_CPU_ISA");
    unsetenv("LA_CPU_GEMM_MAX_ROWS");
    be->weight_dtype = weight_dtype;
    be->kv_dtype = kv_dtype;
    be->bf16_dot = g_bf16_dot;
    LA_CHECK_OK(la_backend_load_model(be, cfg, w, &err), err);
    LA_CHECK_OK(be->ops->kv_alloc(be, n_blocks, B, &err), err);
    la_weights_destroy(w);
    return be;
}

/* The longest oracle prompt of `name` through backends of every table this CPU runs: a
 * prefill of its first n - 8 tokens (gemm_nt, or BLAS under g_gemm_max_rows "8"), then
 * one-token decode steps (gemm_nt) with one-slot blocks (B = 1: decode attention over up to 46
 * blocks, split into ranges from 32 on), each row's logits within tol of transformers. */
static void check_forward(const char *name, int32_t weight_dtype, la_dtype kv_dtype, double tol) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", LA_SOURCE_DIR, name);
    cJSON *oracle = la_test_oracle(dir);
    const cJSON *p, *best = NULL;
    int32_t n = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(oracle, "prompts")) {
        int32_t len = cJSON_GetArraySize(cJSON_GetObjectItem(p, "ids"));
        if (len > n) n = len, best = p;
    }
    cr_assert(best && n >= 40);
    int32_t n_ids;
    int32_t *ids = la_test_json_ints(cJSON_GetObjectItem(best, "ids"), &n_ids);
    const cJSON *ref_rows = cJSON_GetObjectItem(best, "logits");
    static const char *const isas[LA_CPU_ISA_COUNT] = {"portable", "avx2", "avx512"};
    int checked = 0;
    for (int i = 0; i < LA_CPU_ISA_COUNT; i++) {
        if (!la_cpu_isa_supported((la_cpu_isa)i)) continue;
        la_model_config cfg;
        la_backend *be = load_backend(name, isas[i], weight_dtype, kv_dtype, n, 1, &cfg);
        const int32_t V = cfg.vocab_size, n_pre = n - 8;
        float *logits = malloc(sizeof(float) * (size_t)n * (size_t)V);
        int32_t *rows = malloc(sizeof(int32_t) * (size_t)n);
        for (int32_t r = 0; r < n; r++) rows[r] = r;
        la_test_seq_step(be, ids, 0, n_pre, 1, 0, rows, n_pre, logits);
        for (int32_t t = n_pre; t < n; t++) la_test_seq_step(be, ids, t, 1, 1, 0, rows, 1, logits + (size_t)t * V);
        double worst = 0;
        for (int32_t t = 0; t < n; t++) {
            int32_t nv;
            float *ref = la_test_json_floats(cJSON_GetArrayItem(ref_rows, t), &nv);
            cr_assert_eq(nv, V);
            size_t at;
            double d = la_test_max_abs_diff(logits + (size_t)t * V, ref, (size_t)V, &at);
            cr_assert(d <= tol, "%s on %s (weights %d, kv %s) position %d: max |diff| %.3g > %.3g at token %zu", name,
                      isas[i], weight_dtype, la_dtype_name(kv_dtype), t, d, tol, at);
            if (d > worst) worst = d;
            free(ref);
        }
        printf("%s on %s (weights %d, kv %s): max |diff| %.3g (tolerance %.3g)\n", name, isas[i], weight_dtype,
               la_dtype_name(kv_dtype), worst, tol);
        free(logits), free(rows);
        la_backend_destroy(be);
        checked++;
    }
    cr_assert(checked >= 1);
    free(ids);
    cJSON_Delete(oracle);
}

Test(cpu_kernels, every_table_matches_transformers_prefill_and_decode) {
    check_forward("tiny-f32-tied", LA_WEIGHT_DTYPE_AUTO, LA_DTYPE_F32, LOGIT_TOL);       /* head_dim 16 */
    check_forward("tiny-bf16-untied", LA_WEIGHT_DTYPE_AUTO, LA_DTYPE_F32, LOGIT_TOL);    /* bf16 kept, head_dim 24 */
    check_forward("tiny-qwen2", LA_WEIGHT_DTYPE_AUTO, LA_DTYPE_F32, LOGIT_TOL);          /* q/k/v biases */
    check_forward("tiny-bf16-untied", LA_DTYPE_F32, LA_DTYPE_F32, LOGIT_TOL);            /* bf16 widened at load */
    g_gemm_max_rows = "8"; /* prefill through OpenBLAS on unpacked tiles */
    check_forward("tiny-f32-tied", LA_WEIGHT_DTYPE_AUTO, LA_DTYPE_F32, LOGIT_TOL);
    check_forward("tiny-bf16-untied", LA_WEIGHT_DTYPE_AUTO, LA_DTYPE_F32, LOGIT_TOL);
    check_forward("tiny-qwen2", LA_DTYPE_F16, LA_DTYPE_F32, F16_WEIGHTS_LOGIT_TOL);
    g_gemm_max_rows = NULL;
}

Test(cpu_kernels, bf16_and_f16_weights_from_f32_within_their_tolerances) {
    check_forward("tiny-f32-tied", LA_DTYPE_BF16, LA_DTYPE_F32, BF16_WEIGHTS_LOGIT_TOL);
    check_forward("tiny-f32-tied", LA_DTYPE_F16, LA_DTYPE_F32, F16_WEIGHTS_LOGIT_TOL);
    check_forward("tiny-mistral", LA_DTYPE_BF16, LA_DTYPE_F32, BF16_WEIGHTS_LOGIT_TOL);
}

/* gemm_nt_bf16x (where this CPU has AVX512_BF16) equals the exact sum of the bf16-rounded x
 * times the bf16 weight; and through the forward, bf16-dot within its tolerance. */
Test(cpu_kernels, bf16_dot_products) {
    const la_cpu_kernels *kn = la_cpu_kernels_get();
    if (!kn->gemm_nt_bf16x) {
        printf("cpu_kernels: no AVX512_BF16 here: bf16-dot runs the exact path\n");
    } else {
        static const int64_t ms[] = {1, 5, 6, 7, 13, 50};
        static const int64_t ks[] = {16, 17, 64, 100, 2048};
        for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                const int64_t m = ms[mi], k = ks[ki], kp = (k + 15) / 16 * 16, n_out = 11;
                float *x = random_array(LA_DTYPE_F32, (size_t)(m * k), NULL), *wf;
                void *wr = random_array(LA_DTYPE_BF16, (size_t)(n_out * k), &wf);
                uint16_t *w = malloc((size_t)la_cpu_packed_elems(n_out, k) * 2), *xb = calloc((size_t)(m * kp), 2);
                la_cpu_pack(w, LA_DTYPE_BF16, wr, LA_DTYPE_BF16, n_out, k);
                for (int64_t i = 0; i < m; i++) kn->to_bf16(xb + i * kp, x + i * k, k);
                for (int64_t i = 0; i < m * k; i++) cr_assert_eq(xb[(i / k) * kp + i % k], la_f32_to_bf16(x[i]));
                float *y = malloc(sizeof(float) * (size_t)(m * n_out));
                kn->gemm_nt_bf16x(xb, kp, m, w, k, 0, n_out, NULL, y, n_out);
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n_out; j++) {
                        double exact = 0, abs_sum = 0;
                        for (int64_t c = 0; c < k; c++) {
                            double t = (double)la_bf16_to_f32(xb[i * kp + c]) * wf[j * k + c];
                            exact += t, abs_sum += fabs(t);
                        }
                        cr_assert(fabs(y[i * n_out + j] - exact) <= SUM_REL_TOL * abs_sum + SUM_ABS_TOL,
                                  "m=%lld k=%lld (%lld, %lld): %.9g vs %.9g", (long long)m, (long long)k, (long long)i,
                                  (long long)j, y[i * n_out + j], exact);
                    }
                free(x), free(wr), free(wf), free(w), free(xb), free(y);
            }
    }
    g_bf16_dot = true;
    check_forward("tiny-bf16-untied", LA_DTYPE_BF16, LA_DTYPE_F32, BF16_DOT_LOGIT_TOL);
    check_forward("tiny-f32-tied", LA_DTYPE_BF16, LA_DTYPE_F32, BF16_WEIGHTS_LOGIT_TOL);
    g_bf16_dot = false;
}

Test(cpu_kernels, bf16_kv_cache_within_its_tolerance) {
    check_forward("tiny-f32-tied", LA_WEIGHT_DTYPE_AUTO, LA_DTYPE_BF16, BF16_KV_LOGIT_TOL);
    check_forward("tiny-bf16-untied", LA_WEIGHT_DTYPE_AUTO, LA_DTYPE_BF16, BF16_KV_LOGIT_TOL);
}

/* OpenBLAS's cores without FMA (the Prescott it falls back to on a CPU its detection does not
 * know) never run a product under a vector table: every row count stays on gemm_nt. The rule's
 * names, then the backend's routes under the OpenBLAS core this process runs; ctest runs this
 * binary a second time under OPENBLAS_CORETYPE=Prescott (backend/test_cpu_kernels_prescott_blas),
 * so both branches run wherever the vector tables do. */
Test(cpu_blas, a_blas_core_without_fma_keeps_every_product_on_gemm_nt) {
    static const char *const old[] = {"Prescott", "prescott", "Nehalem", "Core2", "Sandybridge", "Barcelona", "Unknown",
                                      "GENERIC"};
    static const char *const fma[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "HASWELL", "Neoverse",
                                      "Piledriver"};
    for (size_t i = 0; i < sizeof old / sizeof *old; i++) cr_assert(la_cpu_blas_core_predates_fma(old[i]), "%s", old[i]);
    for (size_t i = 0; i < sizeof fma / sizeof *fma; i++) cr_assert(!la_cpu_blas_core_predates_fma(fma[i]), "%s", fma[i]);
    cr_assert(!la_cpu_blas_core_predates_fma(NULL));

    la_err err = {0};
    la_backend *be = NULL;
    LA_CHECK_OK(la_cpu_backend_create(1, &be, &err), err);
    la_cpu_gemm_route r;
    cr_assert(la_cpu_backend_gemm_route(be, &r));
    const la_cpu_kernels *k = la_cpu_kernels_get();
    const char *forced = getenv("OPENBLAS_CORETYPE");
    printf("OpenBLAS core %s (OPENBLAS_CORETYPE %s), table %s: gemm_nt up to %lld rows (16-bit) / %lld (f32)\n",
           r.blas_core, forced ? forced : "unset", la_cpu_backend_isa(be), (long long)r.max_rows_16bit,
           (long long)r.max_rows_f32);
    /* OPENBLAS_CORETYPE is read only by a DYNAMIC_ARCH build (Debian's) */
    if (forced && strcmp(forced, "Prescott") == 0 && r.blas_dynamic)
        cr_assert(la_cpu_blas_core_predates_fma(r.blas_core), "OPENBLAS_CORETYPE=Prescott runs core %s", r.blas_core);
    const char *env = getenv("LA_CPU_GEMM_MAX_ROWS");
    if (!env || !*env) {
        if (k->isa != LA_CPU_ISA_PORTABLE && la_cpu_blas_core_predates_fma(r.blas_core))
            cr_assert(r.max_rows_16bit == INT64_MAX && r.max_rows_f32 == INT64_MAX && r.x_bytes == INT64_MAX,
                      "core %s under %s: products still reach BLAS", r.blas_core, k->name);
        else
            cr_assert(r.max_rows_16bit == k->gemm_max_rows_16bit && r.max_rows_f32 == k->gemm_max_rows_f32 &&
                          r.x_bytes == k->gemm_x_bytes,
                      "core %s under %s: the table's crossovers", r.blas_core, k->name);
    }
    la_backend_destroy(be);
    cr_assert(!la_cpu_backend_gemm_route(NULL, &r));
    if (r.max_rows_f32 != INT64_MAX) return;
    /* where the products really run: rows of a 200-row product through the backend equal the
     * one-row products bit for bit, as gemm_nt's rows do and OpenBLAS's blocked ones need not */
    const int64_t m = 200, hidden = 512, inter = 384; /* k 512: OpenBLAS's blocked sums part from gemm_nt's */
    la_test_synth syn;
    la_test_synth_init(&syn, (int)hidden, 4, 1, 128, (int)inter, 256, 1);
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CPU, 2, &be, &err), err);
    LA_CHECK_OK(la_backend_load_model(be, &syn.cfg, &syn.w, &err), err);
    la_act x, y, x1, y1;
    LA_CHECK_OK(be->ops->act_alloc(be, m, hidden, &x, &err), err);
    LA_CHECK_OK(be->ops->act_alloc(be, m, inter, &y, &err), err);
    LA_CHECK_OK(be->ops->act_alloc(be, 1, hidden, &x1, &err), err);
    LA_CHECK_OK(be->ops->act_alloc(be, 1, inter, &y1, &err), err);
    float *xs = random_array(LA_DTYPE_F32, (size_t)(m * hidden), NULL);
    memcpy(x.data, xs, sizeof(float) * (size_t)(m * hidden));
    LA_CHECK_OK(be->ops->matmul(be, &x, LA_W_GATE, 0, &y, &err), err);
    static const int64_t rows[] = {0, 77, 199};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        memcpy(x1.data, xs + rows[i] * hidden, sizeof(float) * (size_t)hidden);
        LA_CHECK_OK(be->ops->matmul(be, &x1, LA_W_GATE, 0, &y1, &err), err);
        cr_assert(!memcmp(y1.data, (const float *)y.data + rows[i] * inter, sizeof(float) * (size_t)inter),
                  "core %s: row %lld of a %lld-row product differs from its one-row product", r.blas_core,
                  (long long)rows[i], (long long)m);
    }
    free(xs);
    be->ops->act_free(be, &x), be->ops->act_free(be, &y), be->ops->act_free(be, &x1), be->ops->act_free(be, &y1);
    la_backend_destroy(be);
    la_test_synth_free(&syn);
}
