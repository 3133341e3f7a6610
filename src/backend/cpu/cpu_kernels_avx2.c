/* The AVX2 kernel table (cpu_kernels.h): AVX2 + FMA + F16C, this file alone compiled with
 * those -m flags (CMakeLists.txt), run only where cpuid has them. The AVX-512 table's
 * design on 8 lanes and 16 registers: gemm_nt groups of 4 packed weight rows x up to 3
 * x rows (2 on 16-bit weights), a scalar tail past the last whole 16; exp by the same
 * Cephes polynomial, 2^n built in the exponent bits. */
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <math.h>

#include "backend/cpu/cpu_kernels.h"

#define AI static inline __attribute__((always_inline))

/* 8 elements of a row of dtype T from element c, widened to f32. */
AI __m256 load8(const void *row, int64_t c, la_dtype T) {
    if (T == LA_DTYPE_F32) return _mm256_loadu_ps((const float *)row + c);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + c));
    if (T == LA_DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* One element, widened. */
AI float load1(const void *row, int64_t c, la_dtype T) {
    if (T == LA_DTYPE_F32) return ((const float *)row)[c];
    uint16_t h = ((const uint16_t *)row)[c];
    return T == LA_DTYPE_F16 ? _cvtsh_ss(h) : la_bf16_to_f32(h);
}

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- gemm_nt -------------------------------------------------------------------------- */

/* y[i][j0 + r] for i < MR (<= 3), r < 4 with j0 + r < n1: one group of 4 packed rows at
 * wg, 16 weights of each row a step (two registers), x read through a mask past k. */
AI void tile(const float *x, int64_t ldx, const char *wg, la_dtype T, int64_t k, int64_t j0, int64_t n1,
             const float *bias, float *y, int64_t ldy, const int MR) {
    const size_t es = T == LA_DTYPE_F32 ? 4 : 2, step = 64 * es;
    __m256 acc[3][4];
#pragma GCC unroll 3
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[i][r] = _mm256_setzero_ps();
    const int64_t kf = k & ~(int64_t)15;
    const char *p = wg;
    int64_t c = 0;
    for (; c < kf; c += 16, p += step) {
        /* 16-bit weights: 2 KiB ahead; f32 ones stream faster without (Llama-3.2-1B's decode at
         * 64, 2 threads, three interleaved runs each: f32 142-165 -> 123-141 ms, bf16 83-86 ->
         * 76-83 ms against 4 KiB ahead; bench/results/cpu_gemv_prefetch_ab.md) */
        if (T != LA_DTYPE_F32)
            for (size_t l = 0; l < step; l += 64) _mm_prefetch(p + 2048 + l, _MM_HINT_T0);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256 wv[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) wv[r] = load8(p, 16 * r + 8 * h, T);
#pragma GCC unroll 3
            for (int i = 0; i < MR; i++) {
                __m256 xv = _mm256_loadu_ps(x + i * ldx + c + 8 * h);
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) acc[i][r] = _mm256_fmadd_ps(xv, wv[r], acc[i][r]);
            }
        }
    }
#pragma GCC unroll 3
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (j0 + r >= n1) continue;
            float s = hsum8(acc[i][r]);
            for (int64_t t = kf; t < k; t++) s += x[i * ldx + t] * load1(p, 16 * r + (t - kf), T);
            y[i * ldy + j0 + r] = bias ? s + bias[j0 + r] : s;
        }
}

AI void gemm_t(const float *x, int64_t ldx, int64_t m, const void *w, la_dtype T, int64_t k, int64_t n0, int64_t n1,
               const float *bias, float *y, int64_t ldy) {
    const size_t es = T == LA_DTYPE_F32 ? 4 : 2;
    const int64_t kp = (k + 15) & ~(int64_t)15;
    int64_t mb, nb;
    la_cpu_gemm_blocks(m, k, es, LA_CPU_AVX2_GEMM_XBLOCK_BYTES, LA_CPU_AVX2_GEMM_PANEL_BYTES, &mb, &nb);
    for (int64_t jb = n0; jb < n1; jb += nb) /* a panel of weight rows (la_cpu_gemm_blocks) */
        for (int64_t ib = 0; ib < m; ib += mb) { /* a block of x rows */
            const int64_t jb1 = n1 - jb < nb ? n1 : jb + nb, ib1 = m - ib < mb ? m : ib + mb;
            for (int64_t j = jb; j < jb1; j += 4) {
                const char *wg = (const char *)w + (size_t)(j / 4) * 4 * (size_t)kp * es;
                int64_t i = ib;
                if (T == LA_DTYPE_F32) /* 3 x rows: 12 accumulators and the 4 weights fill the 16 registers */
                    for (; i + 3 <= ib1; i += 3) tile(x + i * ldx, ldx, wg, T, k, j, n1, bias, y + i * ldy, ldy, 3);
                /* 16-bit weights need registers to widen them: 2 x rows (3 spill: 42 against 60 GFLOP/s) */
                for (; i + 2 <= ib1; i += 2) tile(x + i * ldx, ldx, wg, T, k, j, n1, bias, y + i * ldy, ldy, 2);
                if (i < ib1) tile(x + i * ldx, ldx, wg, T, k, j, n1, bias, y + i * ldy, ldy, 1);
            }
        }
}

static void gemm_f32(const float *x, int64_t ldx, int64_t m, const void *w, int64_t k, int64_t n0, int64_t n1,
                     const float *bias, float *y, int64_t ldy) {
    gemm_t(x, ldx, m, w, LA_DTYPE_F32, k, n0, n1, bias, y, ldy);
}
static void gemm_bf16(const float *x, int64_t ldx, int64_t m, const void *w, int64_t k, int64_t n0, int64_t n1,
                      const float *bias, float *y, int64_t ldy) {
    gemm_t(x, ldx, m, w, LA_DTYPE_BF16, k, n0, n1, bias, y, ldy);
}
static void gemm_f16(const float *x, int64_t ldx, int64_t m, const void *w, int64_t k, int64_t n0, int64_t n1,
                     const float *bias, float *y, int64_t ldy) {
    gemm_t(x, ldx, m, w, LA_DTYPE_F16, k, n0, n1, bias, y, ldy);
}

static void gemm_nt(const float *x, int64_t ldx, int64_t m, const void *w, la_dtype wt, int64_t k, int64_t n0,
                    int64_t n1, const float *bias, float *y, int64_t ldy) {
    switch (wt) {
    case LA_DTYPE_BF16: gemm_bf16(x, ldx, m, w, k, n0, n1, bias, y, ldy); break;
    case LA_DTYPE_F16: gemm_f16(x, ldx, m, w, k, n0, n1, bias, y, ldy); break;
    default: gemm_f32(x, ldx, m, w, k, n0, n1, bias, y, ldy); break;
    }
}

AI void to_f32_t(float *dst, const void *src, la_dtype T, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(src, i, T));
    for (; i < n; i++) dst[i] = load1(src, i, T);
}

static void to_bf16(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = la_f32_to_bf16(src[i]);
}

static void to_f32(float *dst, const void *src, la_dtype t, int64_t n) {
    if (t == LA_DTYPE_BF16) to_f32_t(dst, src, LA_DTYPE_BF16, n);
    else if (t == LA_DTYPE_F16) to_f32_t(dst, src, LA_DTYPE_F16, n);
    else to_f32_t(dst, src, LA_DTYPE_F32, n);
}

/* ---- attention ------------------------------------------------------------------------ */

AI float scores_t(const float *q, const void *k, la_dtype T, int32_t n, int32_t hd, float scale, float *s) {
    const size_t row = (size_t)hd * (T == LA_DTYPE_F32 ? 4 : 2);
    const __m256 sv = _mm256_set1_ps(scale);
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        const char *kr = (const char *)k + (size_t)j * row;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int32_t d = 0;
        for (; d + 16 <= hd; d += 16) {
            a0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(q + d), sv), load8(kr, d, T), a0);
            a1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(q + d + 8), sv), load8(kr, d + 8, T), a1);
        }
        for (; d + 8 <= hd; d += 8) a0 = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(q + d), sv), load8(kr, d, T), a0);
        float v = hsum8(_mm256_add_ps(a0, a1));
        for (; d < hd; d++) v += q[d] * scale * load1(kr, d, T);
        s[j] = v;
        mx = v > mx ? v : mx;
    }
    return mx;
}

static float attn_scores(const float *q, const void *k, la_dtype kt, int32_t n, int32_t hd, float scale, float *s) {
    if (kt == LA_DTYPE_BF16) return scores_t(q, k, LA_DTYPE_BF16, n, hd, scale, s);
    return scores_t(q, k, LA_DTYPE_F32, n, hd, scale, s);
}

/* exp(x) for x <= 0: Cephes expf, 2^n written into the exponent (x clamped at -87.3, where
 * exp is still a normal float ~1e-38: nothing the sums can see). */
AI __m256 exp8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static float exp_sum(float *s, int32_t n, float mx) {
    const __m256 mv = _mm256_set1_ps(mx);
    __m256 sum = _mm256_setzero_ps();
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    float t = hsum8(sum);
    if (j < n) {
        float buf[8] = {0};
        for (int32_t i = j; i < n; i++) buf[i - j] = s[i] - mx;
        float out[8];
        _mm256_storeu_ps(out, exp8(_mm256_loadu_ps(buf)));
        for (int32_t i = j; i < n; i++) {
            s[i] = out[i - j];
            t += s[i];
        }
    }
    return t;
}

AI void attn_accum_t(float *acc, float alpha, const float *p, const void *v, la_dtype T, int32_t n, int32_t hd) {
    const size_t row = (size_t)hd * (T == LA_DTYPE_F32 ? 4 : 2);
    const __m256 al = _mm256_set1_ps(alpha);
    int32_t d = 0;
    for (; d + 32 <= hd; d += 32) { /* four registers of the accumulator at a time */
        __m256 a0 = _mm256_mul_ps(_mm256_loadu_ps(acc + d), al), a1 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8), al);
        __m256 a2 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 16), al), a3 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 24), al);
        for (int32_t j = 0; j < n; j++) {
            const char *vr = (const char *)v + (size_t)j * row;
            const __m256 pv = _mm256_set1_ps(p[j]);
            a0 = _mm256_fmadd_ps(pv, load8(vr, d, T), a0);
            a1 = _mm256_fmadd_ps(pv, load8(vr, d + 8, T), a1);
            a2 = _mm256_fmadd_ps(pv, load8(vr, d + 16, T), a2);
            a3 = _mm256_fmadd_ps(pv, load8(vr, d + 24, T), a3);
        }
        _mm256_storeu_ps(acc + d, a0), _mm256_storeu_ps(acc + d + 8, a1);
        _mm256_storeu_ps(acc + d + 16, a2), _mm256_storeu_ps(acc + d + 24, a3);
    }
    for (; d + 8 <= hd; d += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + d), al);
        for (int32_t j = 0; j < n; j++)
            a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), load8((const char *)v + (size_t)j * row, d, T), a);
        _mm256_storeu_ps(acc + d, a);
    }
    for (; d < hd; d++) {
        float a = acc[d] * alpha;
        for (int32_t j = 0; j < n; j++) a += p[j] * load1((const char *)v + (size_t)j * row, d, T);
        acc[d] = a;
    }
}

static void attn_accum(float *acc, float alpha, const float *p, const void *v, la_dtype vt, int32_t n, int32_t hd) {
    if (vt == LA_DTYPE_BF16) attn_accum_t(acc, alpha, p, v, LA_DTYPE_BF16, n, hd);
    else attn_accum_t(acc, alpha, p, v, LA_DTYPE_F32, n, hd);
}

AI float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* The online-softmax step of 16 scores s (two registers) on state st = [mx, l, ...]: their
 * probabilities against the new max into pj[16], st's max and sum updated; returns the
 * factor the accumulator is rescaled by (block16, block16_heads). */
AI float softmax16(const __m256 s[2], float *st, float *pj) {
    const float bmax = hmax8(_mm256_max_ps(s[0], s[1])), mx = st[0] > bmax ? st[0] : bmax;
    const float alpha = st[0] == mx ? 1.0f : expf(st[0] - mx); /* 0 from an empty state (-inf) */
    const __m256 p0 = exp8(_mm256_sub_ps(s[0], _mm256_set1_ps(mx)));
    const __m256 p1 = exp8(_mm256_sub_ps(s[1], _mm256_set1_ps(mx)));
    _mm256_storeu_ps(pj, p0);
    _mm256_storeu_ps(pj + 8, p1);
    st[1] = st[1] * alpha + hsum8(_mm256_add_ps(p0, p1));
    st[0] = mx;
    return alpha;
}

/* attn_block on 16 keys, head_dim = 8 * NC (NC 8 or 16). Scores: 4 keys at a time against 8
 * query registers (one 64-wide slice of q: a load of q serves 4 keys, not 1), their 4
 * accumulators folded by two hadd levels, two such folds of 8 keys added across their
 * 128-bit halves into one vector of 8 scores; both score vectors and the exps stay in
 * registers; the output accumulator 8 registers at a time. */
AI void block16(const float *q, const char *k, const char *v, la_dtype T, float scale, float *st, const int NC) {
    const size_t row = (size_t)(8 * NC) * (T == LA_DTYPE_F32 ? 4 : 2);
    __m256 s[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256 f[2];
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++) { /* keys 8 h + 4 u + j, j < 4 */
            __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
#pragma GCC unroll 2
            for (int c0 = 0; c0 < NC; c0 += 8) {
                __m256 qv[8];
#pragma GCC unroll 8
                for (int c = 0; c < 8; c++) qv[c] = _mm256_loadu_ps(q + 8 * (c0 + c));
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    const char *kr = k + (size_t)(8 * h + 4 * u + j) * row;
#pragma GCC unroll 8
                    for (int c = 0; c < 8; c++) a[j] = _mm256_fmadd_ps(qv[c], load8(kr, 8 * (c0 + c), T), a[j]);
                }
            }
            /* [keys 0-3, lanes 0-3 summed | keys 0-3, lanes 4-7 summed] */
            f[u] = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
        }
        s[h] = _mm256_mul_ps(_mm256_add_ps(_mm256_permute2f128_ps(f[0], f[1], 0x20),
                                           _mm256_permute2f128_ps(f[0], f[1], 0x31)),
                             _mm256_set1_ps(scale));
    }
    float pj[16];
    const float alpha = softmax16(s, st, pj);
    const __m256 al = _mm256_set1_ps(alpha);
#pragma GCC unroll 2
    for (int c0 = 0; c0 < NC; c0 += 8) { /* 8 accumulator registers at a time */
        __m256 acc[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) acc[c] = _mm256_mul_ps(_mm256_loadu_ps(st + 2 + 8 * (c0 + c)), al);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            const char *vr = v + (size_t)j * row;
            const __m256 pv = _mm256_broadcast_ss(pj + j);
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) acc[c] = _mm256_fmadd_ps(pv, load8(vr, 8 * (c0 + c), T), acc[c]);
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) _mm256_storeu_ps(st + 2 + 8 * (c0 + c), acc[c]);
    }
}

/* Any n and head_dim: the three pieces on up to 64 keys at a time. */
static void block_any(const float *q, const void *k, const void *v, la_dtype kvt, int32_t n, int32_t hd, float scale,
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

AI void block_t(const float *q, const char *k, const char *v, la_dtype T, int32_t n, int32_t hd, float scale,
                float *st) {
    const size_t row = (size_t)hd * (T == LA_DTYPE_F32 ? 4 : 2);
    int32_t j = 0;
    if (hd == 64)
        for (; j + 16 <= n; j += 16) block16(q, k + (size_t)j * row, v + (size_t)j * row, T, scale, st, 8);
    else if (hd == 128)
        for (; j + 16 <= n; j += 16) block16(q, k + (size_t)j * row, v + (size_t)j * row, T, scale, st, 16);
    if (j < n) block_any(q, k + (size_t)j * row, v + (size_t)j * row, T, n - j, hd, scale, st);
}

/* attn_block (cpu_kernels.h): block16 on whole 16-key groups at head_dim 64 and 128, the three
 * pieces elsewhere. */
static void attn_block(const float *q, const void *k, const void *v, la_dtype kvt, int32_t n, int32_t hd, float scale,
                       float *st) {
    if (kvt == LA_DTYPE_BF16) block_t(q, k, v, LA_DTYPE_BF16, n, hd, scale, st);
    else block_t(q, k, v, LA_DTYPE_F32, n, hd, scale, st);
}

/* block16 for H (<= 4) queries that see the same 16 keys (a GQA group's heads at one
 * position): each K and V element is loaded and widened once for all H. Scores: two keys at
 * a time against H queries (2H accumulators), each pair folded by one hadd into hp; the
 * pairs' second hadd and the halves' sum as in block16. V: two accumulator registers per
 * query at a time. Every sum runs in block16's order, so each query's state is bit-equal to
 * block16's. The loops over pairs, keys and head_dim are unrolled by 4 at most: fully
 * unrolled, the 16 instances took clang with the fuzzers' sanitizers over 20 minutes. */
AI void block16_heads(const float *q, int64_t q_stride, const char *k, const char *v, la_dtype T, float scale,
                      float *st, int64_t st_stride, const int NC, const int H) {
    const size_t row = (size_t)(8 * NC) * (T == LA_DTYPE_F32 ? 4 : 2);
    __m256 hp[4][8]; /* [query][key pair]: hadd of the pair's two accumulators */
#pragma GCC unroll 1
    for (int pr = 0; pr < 8; pr++) {
        const char *k0 = k + (size_t)(2 * pr) * row, *k1 = k0 + row;
        __m256 a[4][2];
#pragma GCC unroll 4
        for (int g = 0; g < H; g++) a[g][0] = a[g][1] = _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const __m256 x0 = load8(k0, 8 * c, T), x1 = load8(k1, 8 * c, T);
#pragma GCC unroll 4
            for (int g = 0; g < H; g++) {
                const __m256 qv = _mm256_loadu_ps(q + g * q_stride + 8 * c);
                a[g][0] = _mm256_fmadd_ps(qv, x0, a[g][0]);
                a[g][1] = _mm256_fmadd_ps(qv, x1, a[g][1]);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < H; g++) hp[g][pr] = _mm256_hadd_ps(a[g][0], a[g][1]);
    }
    float pj[4][16], alpha[4];
#pragma GCC unroll 4
    for (int g = 0; g < H; g++) {
        float *sg = st + g * st_stride;
        __m256 s[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) { /* keys 8h..8h+3 are pairs 4h, 4h+1; 8h+4.. pairs 4h+2, 4h+3 */
            const __m256 f0 = _mm256_hadd_ps(hp[g][4 * h], hp[g][4 * h + 1]);
            const __m256 f1 = _mm256_hadd_ps(hp[g][4 * h + 2], hp[g][4 * h + 3]);
            s[h] = _mm256_mul_ps(_mm256_add_ps(_mm256_permute2f128_ps(f0, f1, 0x20), _mm256_permute2f128_ps(f0, f1, 0x31)),
                                 _mm256_set1_ps(scale));
        }
        alpha[g] = softmax16(s, sg, pj[g]);
    }
#pragma GCC unroll 1
    for (int c = 0; c < NC; c += 2) { /* acc registers c, c + 1 of every query */
        __m256 acc[4][2];
#pragma GCC unroll 4
        for (int g = 0; g < H; g++) {
            const __m256 al = _mm256_set1_ps(alpha[g]);
            acc[g][0] = _mm256_mul_ps(_mm256_loadu_ps(st + g * st_stride + 2 + 8 * c), al);
            acc[g][1] = _mm256_mul_ps(_mm256_loadu_ps(st + g * st_stride + 2 + 8 * c + 8), al);
        }
#pragma GCC unroll 4
        for (int j = 0; j < 16; j++) {
            const char *vr = v + (size_t)j * row;
            const __m256 v0 = load8(vr, 8 * c, T), v1 = load8(vr, 8 * c + 8, T);
#pragma GCC unroll 4
            for (int g = 0; g < H; g++) {
                const __m256 pv = _mm256_broadcast_ss(&pj[g][j]);
                acc[g][0] = _mm256_fmadd_ps(pv, v0, acc[g][0]);
                acc[g][1] = _mm256_fmadd_ps(pv, v1, acc[g][1]);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < H; g++) {
            _mm256_storeu_ps(st + g * st_stride + 2 + 8 * c, acc[g][0]);
            _mm256_storeu_ps(st + g * st_stride + 2 + 8 * c + 8, acc[g][1]);
        }
    }
}

/* block16_heads over the whole 16-key groups, H and NC fixed. */
AI void heads_t(const float *q, int64_t q_stride, const char *k, const char *v, la_dtype T, int32_t n16, float scale,
                float *st, int64_t st_stride, const int NC, const int H) {
    const size_t row = (size_t)(8 * NC) * (T == LA_DTYPE_F32 ? 4 : 2);
    for (int32_t j = 0; j < n16; j += 16)
        block16_heads(q, q_stride, k + (size_t)j * row, v + (size_t)j * row, T, scale, st, st_stride, NC, H);
}

#define HEADS_CASES(NC_)                                                                              \
    switch (h) {                                                                                      \
    case 2: heads_t(qg, q_stride, k, v, LA_DTYPE_BF16, n16, scale, sg, st_stride, NC_, 2); break;     \
    case 3: heads_t(qg, q_stride, k, v, LA_DTYPE_BF16, n16, scale, sg, st_stride, NC_, 3); break;     \
    default: heads_t(qg, q_stride, k, v, LA_DTYPE_BF16, n16, scale, sg, st_stride, NC_, 4); break;    \
    }

/* attn_block_heads (cpu_kernels.h): on a bf16 block at head_dim 64 and 128 the whole 16-key
 * groups run block16_heads, four queries at a time; the rest (f32 blocks, other head_dims,
 * the last n % 16 keys, a single query: block16 keeps its 8 query registers) runs
 * attn_block. Six instances of block16_heads (two head_dims, 2-4 queries) keep the file's
 * compile time bounded. */
static void attn_block_heads(const float *q, int64_t q_stride, int32_t nq, const void *k, const void *v, la_dtype kvt,
                             int32_t n, int32_t hd, float scale, float *st, int64_t st_stride) {
    const int32_t n16 = nq > 1 && kvt == LA_DTYPE_BF16 && (hd == 64 || hd == 128) ? n & ~15 : 0;
    if (n16 > 0)
        for (int32_t g0 = 0; g0 < nq; g0 += 4) {
            const int h = nq - g0 < 4 ? nq - g0 : 4;
            const float *qg = q + g0 * q_stride;
            float *sg = st + g0 * st_stride;
            if (h == 1) attn_block(qg, k, v, kvt, n16, hd, scale, sg); /* then the tail below: attn_block's order */
            else if (hd == 64) HEADS_CASES(8)
            else HEADS_CASES(16)
        }
    if (n16 == n) return;
    const size_t off = (size_t)n16 * (size_t)hd * la_dtype_size(kvt);
    for (int32_t g = 0; g < nq; g++)
        attn_block(q + g * q_stride, (const char *)k + off, (const char *)v + off, kvt, n - n16, hd, scale,
                   st + g * st_stride);
}
#undef HEADS_CASES

/* kt16 for H (<= 4) queries on 16 whole keys: the scores as 2H independent accumulators
 * (q[g][d] broadcast times row d of kt; one query's two chains of hd dependent FMAs were
 * latency-bound), then per query softmax16 and the accumulator 8 registers at a time. Every
 * sum runs in kt_any's order (scores over d from 0; exp_sum's vector sum; acc rescaled, then
 * keys in order), so for finite scores the states are bit-equal to it (a NaN score, from a
 * non-finite q or K, makes the state NaN here as in block16; kt_any's max skips it). */
AI void kt16(const float *q, int64_t q_stride, const float *kt, const float *v, int32_t hd, float scale, float *st,
             int64_t st_stride, const int H) {
    __m256 a[4][2];
#pragma GCC unroll 4
    for (int g = 0; g < H; g++) a[g][0] = a[g][1] = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; d++) {
        const __m256 k0 = _mm256_loadu_ps(kt + d * 16), k1 = _mm256_loadu_ps(kt + d * 16 + 8);
#pragma GCC unroll 4
        for (int g = 0; g < H; g++) {
            const __m256 qd = _mm256_broadcast_ss(q + g * q_stride + d);
            a[g][0] = _mm256_fmadd_ps(qd, k0, a[g][0]);
            a[g][1] = _mm256_fmadd_ps(qd, k1, a[g][1]);
        }
    }
    const __m256 sc = _mm256_set1_ps(scale);
    float sv[4][16]; /* through memory: a[g] indexed by a rolled loop would spill the d loop's accumulators */
#pragma GCC unroll 4
    for (int g = 0; g < H; g++) {
        _mm256_storeu_ps(sv[g], _mm256_mul_ps(a[g][0], sc));
        _mm256_storeu_ps(sv[g] + 8, _mm256_mul_ps(a[g][1], sc));
    }
#pragma GCC unroll 1
    for (int g = 0; g < H; g++) {
        float *sg = st + g * st_stride, pj[16];
        const __m256 s[2] = {_mm256_loadu_ps(sv[g]), _mm256_loadu_ps(sv[g] + 8)};
        const __m256 al = _mm256_set1_ps(softmax16(s, sg, pj));
        float *acc = sg + 2;
        int32_t d = 0;
        for (; d + 64 <= hd; d += 64) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) r[c] = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8 * c), al);
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) {
                const __m256 pv = _mm256_broadcast_ss(pj + j);
#pragma GCC unroll 8
                for (int c = 0; c < 8; c++) r[c] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + j * hd + d + 8 * c), r[c]);
            }
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) _mm256_storeu_ps(acc + d + 8 * c, r[c]);
        }
        for (; d < hd; d += 16) { /* hd a multiple of 16 */
            __m256 r0 = _mm256_mul_ps(_mm256_loadu_ps(acc + d), al), r1 = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8), al);
            for (int j = 0; j < 16; j++) {
                const __m256 pv = _mm256_broadcast_ss(pj + j);
                r0 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + j * hd + d), r0);
                r1 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + j * hd + d + 8), r1);
            }
            _mm256_storeu_ps(acc + d, r0), _mm256_storeu_ps(acc + d + 8, r1);
        }
    }
}

/* One query on n <= 16 keys (a block's last keys, the causal diagonal). */
static void kt_any(const float *qg, const float *kt, const float *v, int32_t n, int32_t hd, float scale, float *sg) {
    float s[16];
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int32_t d = 0; d < hd; d++) { /* 16 keys' scores in two registers */
        const __m256 qd = _mm256_set1_ps(qg[d]);
        a0 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kt + d * 16), a0);
        a1 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kt + d * 16 + 8), a1);
    }
    _mm256_storeu_ps(s, _mm256_mul_ps(a0, _mm256_set1_ps(scale)));
    _mm256_storeu_ps(s + 8, _mm256_mul_ps(a1, _mm256_set1_ps(scale)));
    float mx = sg[0];
    for (int32_t j = 0; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    float alpha = sg[0] == mx ? 1.0f : expf(sg[0] - mx);
    sg[1] = sg[1] * alpha + exp_sum(s, n, mx);
    attn_accum(sg + 2, alpha, s, v, LA_DTYPE_F32, n, hd);
    sg[0] = mx;
}

/* attn_block_kt (cpu_kernels.h): 16 whole keys run kt16, four queries at a time; fewer keys
 * (the causal diagonal) run kt_any per query. Prefill of 2048 tokens on Llama-3.2-1B's shape
 * (f16 weights, 2 threads, three interleaved pairs): 71.5-75.5 -> 79.0-82.2 tokens/s
 * (bench/results/cpu_prefill_attn_kt16_ab.md). */
static void attn_block_kt(const float *q, int64_t q_stride, int32_t nq, const float *kt, const float *v, int32_t n,
                          int32_t hd, float scale, float *st, int64_t st_stride) {
    if (n < 16) {
        for (int32_t g = 0; g < nq; g++) kt_any(q + g * q_stride, kt, v, n, hd, scale, st + g * st_stride);
        return;
    }
    for (int32_t g0 = 0; g0 < nq; g0 += 4) {
        const float *qg = q + g0 * q_stride;
        float *sg = st + g0 * st_stride;
        switch (nq - g0 < 4 ? nq - g0 : 4) {
        case 1: kt16(qg, q_stride, kt, v, hd, scale, sg, st_stride, 1); break;
        case 2: kt16(qg, q_stride, kt, v, hd, scale, sg, st_stride, 2); break;
        case 3: kt16(qg, q_stride, kt, v, hd, scale, sg, st_stride, 3); break;
        default: kt16(qg, q_stride, kt, v, hd, scale, sg, st_stride, 4); break;
        }
    }
}

static void silu_mul(float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), hi = _mm256_set1_ps(88.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 e = exp8(_mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), hi));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

const la_cpu_kernels la_cpu_kernels_avx2 = {
    .isa = LA_CPU_ISA_AVX2,
    .name = "avx2",
    .gemm_nt = gemm_nt,
    /* an AVX2-only EPYC (bench/results/cpu_gemm_shapes_avx2.json, one thread): ours 49-64
     * GFLOP/s from 16 rows on, OpenBLAS 50-61 at 48 rows, 68-73 at 128, 74-79 at 512, on
     * Llama-3.2-1B's and the bundled model's shapes (x's size does not change that) */
    .gemm_max_rows_f32 = 48,
    .gemm_max_rows_16bit = 48,
    .gemm_x_bytes = 0,
    .to_f32 = to_f32,
    .to_bf16 = to_bf16,
    .attn_scores = attn_scores,
    .exp_sum = exp_sum,
    .attn_accum = attn_accum,
    .attn_block = attn_block,
    .attn_block_kt = attn_block_kt,
    .attn_block_heads = attn_block_heads,
    .silu_mul = silu_mul,
};

#else
/* Not an x86 build: an empty table, never chosen (la_cpu_isa_supported says no). */
#include "backend/cpu/cpu_kernels.h"

const la_cpu_kernels la_cpu_kernels_avx2 = {.isa = LA_CPU_ISA_AVX2, .name = "avx2 (not built)"};
#endif
