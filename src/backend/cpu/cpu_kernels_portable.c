/* The portable kernel table (cpu_kernels.h): plain C for any CPU, written for clarity. The
 * tests compare the vector tables against it. */
#include <math.h>

#include "backend/cpu/cpu_kernels.h"

/* Element c of a row of dtype t, widened to f32. */
static inline float elem(const void *row, la_dtype t, int64_t c) {
    switch (t) {
    case LA_DTYPE_BF16: return la_bf16_to_f32(((const uint16_t *)row)[c]);
    case LA_DTYPE_F16: return la_f16_to_f32(((const uint16_t *)row)[c]);
    default: return ((const float *)row)[c];
    }
}

static void gemm_nt(const float *x, int64_t ldx, int64_t m, const void *w, la_dtype wt, int64_t k, int64_t n0,
                    int64_t n1, const float *bias, float *y, int64_t ldy) {
    const int64_t kp = (k + LA_CPU_PACK_K - 1) / LA_CPU_PACK_K * LA_CPU_PACK_K;
    for (int64_t j = n0; j < n1; j++) {
        /* row j: pieces of 16 at stride 4 * 16 elements inside its group of 4 rows */
        const int64_t base = (j / LA_CPU_PACK_ROWS) * LA_CPU_PACK_ROWS * kp + (j % LA_CPU_PACK_ROWS) * LA_CPU_PACK_K;
        for (int64_t i = 0; i < m; i++) {
            const float *xr = x + i * ldx;
            float acc = 0.0f;
            for (int64_t c = 0; c < k; c++)
                acc += xr[c] * elem(w, wt, base + (c / LA_CPU_PACK_K) * LA_CPU_PACK_ROWS * LA_CPU_PACK_K + c % LA_CPU_PACK_K);
            y[i * ldy + j] = bias ? acc + bias[j] : acc;
        }
    }
}

static void to_bf16(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = la_f32_to_bf16(src[i]);
}

static void to_f32(float *dst, const void *src, la_dtype t, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = elem(src, t, i);
}

static float attn_scores(const float *q, const void *k, la_dtype kt, int32_t n, int32_t hd, float scale, float *s) {
    const size_t row = (size_t)hd * la_dtype_size(kt);
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        const void *kr = (const char *)k + (size_t)j * row;
        float acc = 0.0f;
        for (int32_t d = 0; d < hd; d++) acc += q[d] * elem(kr, kt, d);
        s[j] = scale * acc;
        if (s[j] > mx) mx = s[j];
    }
    return mx;
}

static float exp_sum(float *s, int32_t n, float mx) {
    float sum = 0.0f;
    for (int32_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    return sum;
}

static void attn_accum(float *acc, float alpha, const float *p, const void *v, la_dtype vt, int32_t n, int32_t hd) {
    const size_t row = (size_t)hd * la_dtype_size(vt);
    for (int32_t d = 0; d < hd; d++) {
        float a = acc[d] * alpha;
        for (int32_t j = 0; j < n; j++) a += p[j] * elem((const char *)v + (size_t)j * row, vt, d);
        acc[d] = a;
    }
}

/* attn_block from the three pieces (cpu_kernels.h). */
static void attn_block(const float *q, const void *k, const void *v, la_dtype kvt, int32_t n, int32_t hd, float scale,
                       float *st) {
    float s[64];
    for (int32_t j0 = 0; j0 < n; j0 += 64) {
        const int32_t nj = n - j0 < 64 ? n - j0 : 64;
        const size_t off = (size_t)j0 * (size_t)hd * la_dtype_size(kvt);
        float bmax = attn_scores(q, (const char *)k + off, kvt, nj, hd, scale, s);
        float mx = st[0] > bmax ? st[0] : bmax;
        float alpha = st[0] == mx ? 1.0f : expf(st[0] - mx); /* 0 from an empty state (-inf) */
        st[1] = st[1] * alpha + exp_sum(s, nj, mx);
        attn_accum(st + 2, alpha, s, (const char *)v + off, kvt, nj, hd);
        st[0] = mx;
    }
}

static void attn_block_kt(const float *q, int64_t q_stride, int32_t nq, const float *kt, const float *v, int32_t n,
                          int32_t hd, float scale, float *st, int64_t st_stride) {
    for (int32_t g = 0; g < nq; g++) {
        const float *qg = q + g * q_stride;
        float *sg = st + g * st_stride, s[16], mx = sg[0];
        for (int32_t j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int32_t d = 0; d < hd; d++) acc += qg[d] * kt[d * 16 + j];
            s[j] = scale * acc;
            if (s[j] > mx) mx = s[j];
        }
        float alpha = sg[0] == mx ? 1.0f : expf(sg[0] - mx);
        sg[1] = sg[1] * alpha + exp_sum(s, n, mx);
        attn_accum(sg + 2, alpha, s, v, LA_DTYPE_F32, n, hd);
        sg[0] = mx;
    }
}

static void silu_mul(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

const la_cpu_kernels la_cpu_kernels_portable = {
    .isa = LA_CPU_ISA_PORTABLE,
    .name = "portable",
    .gemm_nt = gemm_nt,
    /* the reference, not a fast path (about 2 GFLOP/s: BLAS wins from 2 rows); it keeps the
     * widest crossovers (AVX-512's) so that forcing it (LA_CPU_ISA=portable) runs gemm_nt on
     * every product any vector table gives to gemm_nt */
    .gemm_max_rows_f32 = LA_CPU_AVX512_GEMM_MAX_ROWS_F32,
    .gemm_max_rows_16bit = LA_CPU_AVX512_GEMM_MAX_ROWS_16BIT,
    .gemm_x_bytes = LA_CPU_AVX512_GEMM_X_BYTES,
    .to_f32 = to_f32,
    .to_bf16 = to_bf16,
    .attn_scores = attn_scores,
    .exp_sum = exp_sum,
    .attn_accum = attn_accum,
    .attn_block = attn_block,
    .attn_block_kt = attn_block_kt,
    .silu_mul = silu_mul,
};
