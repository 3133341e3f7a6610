/* The AVX-512 kernel table (cpu_kernels.h): AVX-512 F/BW/VL with FMA and F16C, this file
 * alone compiled with those -m flags (CMakeLists.txt), run only where cpuid has them.
 *
 * gemm_nt: a group of 4 packed weight rows x up to 4 x rows, 16 zmm accumulators over k
 * (64 contiguous weights a step, x masked in the last), reduced once per output. A bf16 weight widens by a
 * 16-bit shift, an f16 one by vcvtph2ps: both exact, so the products equal f32's.
 * Attention: q held in registers for head_dim 64 and 128 (the models' sizes), any other
 * head_dim through masked 16-lane steps; exp by a Cephes polynomial and vscalefps. */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <math.h>

#include "backend/cpu/cpu_kernels.h"

#define AI static inline __attribute__((always_inline))

/* ---- loads ------------------------------------------------------------------------- */

/* 16 elements of a row of dtype T from element c, widened to f32. */
AI __m512 load16(const void *row, int64_t c, la_dtype T) {
    if (T == LA_DTYPE_F32) return _mm512_loadu_ps((const float *)row + c);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + c));
    if (T == LA_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* The lanes of mask m of load16 (the rest 0). */
AI __m512 load16m(const void *row, int64_t c, la_dtype T, __mmask16 m) {
    if (T == LA_DTYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)row + c);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + c);
    if (T == LA_DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI __mmask16 tail_mask(int64_t n) { return (__mmask16)((1u << n) - 1u); }

/* ---- gemm_nt -------------------------------------------------------------------------- */

/* y[i][j0 + r] for i < MR (<= 4, a constant after inlining), r < 4 with j0 + r < n1: one
 * group of 4 packed rows at wg, 64 contiguous weights a step, x masked past k. */
AI void tile(const float *x, int64_t ldx, const char *wg, la_dtype T, int64_t k, int64_t j0, int64_t n1,
             const float *bias, float *y, int64_t ldy, const int MR) {
    const size_t es = T == LA_DTYPE_F32 ? 4 : 2, step = 64 * es;
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[i][r] = _mm512_setzero_ps();
    const int64_t kf = k & ~(int64_t)15;
    const char *p = wg;
    for (int64_t c = 0; c < kf; c += 16, p += step) {
        /* one stream: prefetch 4 KiB ahead, each line of this step's */
        for (size_t l = 0; l < step; l += 64) _mm_prefetch(p + 4096 + l, _MM_HINT_T0);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) wv[r] = load16(p, 16 * r, T);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            __m512 xv = _mm512_loadu_ps(x + i * ldx + c);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
        }
    }
    if (kf < k) { /* the last piece: weights zero-padded, x masked */
        __mmask16 m = tail_mask(k - kf);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) wv[r] = load16(p, 16 * r, T);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + i * ldx + kf);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            if (j0 + r < n1) {
                float s = _mm512_reduce_add_ps(acc[i][r]);
                y[i * ldy + j0 + r] = bias ? s + bias[j0 + r] : s;
            }
}

AI void gemm_t(const float *x, int64_t ldx, int64_t m, const void *w, la_dtype T, int64_t k, int64_t n0, int64_t n1,
               const float *bias, float *y, int64_t ldy) {
    const size_t es = T == LA_DTYPE_F32 ? 4 : 2;
    const int64_t kp = (k + 15) & ~(int64_t)15;
    int64_t mb, nb;
    la_cpu_gemm_blocks(m, k, es, LA_CPU_AVX512_GEMM_XBLOCK_BYTES, LA_CPU_AVX512_GEMM_PANEL_BYTES, &mb, &nb);
    for (int64_t jb = n0; jb < n1; jb += nb) /* a panel of weight rows (la_cpu_gemm_blocks) */
        for (int64_t ib = 0; ib < m; ib += mb) { /* a block of x rows */
            const int64_t jb1 = n1 - jb < nb ? n1 : jb + nb, ib1 = m - ib < mb ? m : ib + mb;
            for (int64_t j = jb; j < jb1; j += 4) {
                const char *wg = (const char *)w + (size_t)(j / 4) * 4 * (size_t)kp * es;
                int64_t i = ib;
                for (; i + 4 <= ib1; i += 4) tile(x + i * ldx, ldx, wg, T, k, j, n1, bias, y + i * ldy, ldy, 4);
                switch (ib1 - i) {
                case 3: tile(x + i * ldx, ldx, wg, T, k, j, n1, bias, y + i * ldy, ldy, 3); break;
                case 2: tile(x + i * ldx, ldx, wg, T, k, j, n1, bias, y + i * ldy, ldy, 2); break;
                case 1: tile(x + i * ldx, ldx, wg, T, k, j, n1, bias, y + i * ldy, ldy, 1); break;
                default: break;
                }
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

static void to_bf16(uint16_t *dst, const float *src, int64_t n) { /* without AVX512_BF16 */
    for (int64_t i = 0; i < n; i++) dst[i] = la_f32_to_bf16(src[i]);
}

static void to_f32(float *dst, const void *src, la_dtype t, int64_t n) {
    int64_t i = 0;
    if (t == LA_DTYPE_F32) {
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load16(src, i, LA_DTYPE_F32));
        if (i < n) _mm512_mask_storeu_ps(dst + i, tail_mask(n - i), load16m(src, i, LA_DTYPE_F32, tail_mask(n - i)));
    } else if (t == LA_DTYPE_BF16) {
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load16(src, i, LA_DTYPE_BF16));
        if (i < n) _mm512_mask_storeu_ps(dst + i, tail_mask(n - i), load16m(src, i, LA_DTYPE_BF16, tail_mask(n - i)));
    } else {
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load16(src, i, LA_DTYPE_F16));
        if (i < n) _mm512_mask_storeu_ps(dst + i, tail_mask(n - i), load16m(src, i, LA_DTYPE_F16, tail_mask(n - i)));
    }
}

/* ---- attention ------------------------------------------------------------------------ */

/* head_dim = 16 * NC with q in NC registers; keys four at a time. */
AI float scores_nc(const float *q, const void *k, la_dtype T, int32_t n, float scale, float *s, const int NC) {
    const int32_t hd = 16 * NC;
    const size_t row = (size_t)hd * (T == LA_DTYPE_F32 ? 4 : 2);
    __m512 qv[8];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) qv[c] = _mm512_mul_ps(_mm512_loadu_ps(q + 16 * c), _mm512_set1_ps(scale));
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        const char *kr = (const char *)k + (size_t)j * row;
        __m512 a0 = _mm512_mul_ps(qv[0], load16(kr, 0, T));
        __m512 a1 = NC > 1 ? _mm512_mul_ps(qv[1], load16(kr, 16, T)) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int c = 2; c < NC; c += 2) {
            a0 = _mm512_fmadd_ps(qv[c], load16(kr, 16 * c, T), a0);
            if (c + 1 < NC) a1 = _mm512_fmadd_ps(qv[c + 1], load16(kr, 16 * (c + 1), T), a1);
        }
        float v = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
        s[j] = v;
        mx = v > mx ? v : mx;
    }
    return mx;
}

AI float scores_any(const float *q, const void *k, la_dtype T, int32_t n, int32_t hd, float scale, float *s) {
    const size_t row = (size_t)hd * (T == LA_DTYPE_F32 ? 4 : 2);
    const __m512 sv = _mm512_set1_ps(scale);
    float mx = -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        const char *kr = (const char *)k + (size_t)j * row;
        __m512 a = _mm512_setzero_ps();
        int32_t d = 0;
        for (; d + 16 <= hd; d += 16)
            a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(q + d), sv), load16(kr, d, T), a);
        if (d < hd) {
            __mmask16 m = tail_mask(hd - d);
            a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, q + d), sv), load16m(kr, d, T, m), a);
        }
        float v = _mm512_reduce_add_ps(a);
        s[j] = v;
        mx = v > mx ? v : mx;
    }
    return mx;
}

AI float scores_t(const float *q, const void *k, la_dtype T, int32_t n, int32_t hd, float scale, float *s) {
    if (hd == 64) return scores_nc(q, k, T, n, scale, s, 4);
    if (hd == 128) return scores_nc(q, k, T, n, scale, s, 8);
    return scores_any(q, k, T, n, hd, scale, s);
}

static float attn_scores(const float *q, const void *k, la_dtype kt, int32_t n, int32_t hd, float scale, float *s) {
    if (kt == LA_DTYPE_BF16) return scores_t(q, k, LA_DTYPE_BF16, n, hd, scale, s);
    return scores_t(q, k, LA_DTYPE_F32, n, hd, scale, s);
}

/* exp(x) for x <= 0 (Cephes expf: n = round(x log2 e), x - n ln 2 in two parts, a degree-6
 * polynomial, times 2^n by vscalefps, which takes n below -126 to denormals and 0). */
AI __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

static float exp_sum(float *s, int32_t n, float mx) {
    const __m512 mv = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    int32_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
        _mm512_storeu_ps(s + j, e);
        sum = _mm512_add_ps(sum, e);
    }
    if (j < n) {
        __mmask16 m = tail_mask(n - j);
        __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), mv)));
        _mm512_mask_storeu_ps(s + j, m, e);
        sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

/* head_dim = 16 * NC: the accumulator in NC registers over every row of V. */
AI void accum_nc(float *acc, float alpha, const float *p, const void *v, la_dtype T, int32_t n, const int NC) {
    const size_t row = (size_t)(16 * NC) * (T == LA_DTYPE_F32 ? 4 : 2);
    __m512 a[8];
    const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) a[c] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * c), al);
    for (int32_t j = 0; j < n; j++) {
        const char *vr = (const char *)v + (size_t)j * row;
        const __m512 pv = _mm512_set1_ps(p[j]);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) a[c] = _mm512_fmadd_ps(pv, load16(vr, 16 * c, T), a[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) _mm512_storeu_ps(acc + 16 * c, a[c]);
}

AI void accum_any(float *acc, float alpha, const float *p, const void *v, la_dtype T, int32_t n, int32_t hd) {
    const size_t row = (size_t)hd * (T == LA_DTYPE_F32 ? 4 : 2);
    const __m512 al = _mm512_set1_ps(alpha);
    for (int32_t d = 0; d < hd; d += 16) {
        __mmask16 m = hd - d >= 16 ? (__mmask16)0xffff : tail_mask(hd - d);
        __m512 a = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + d), al);
        for (int32_t j = 0; j < n; j++)
            a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), load16m((const char *)v + (size_t)j * row, d, T, m), a);
        _mm512_mask_storeu_ps(acc + d, m, a);
    }
}

AI void accum_t(float *acc, float alpha, const float *p, const void *v, la_dtype T, int32_t n, int32_t hd) {
    if (hd == 64) accum_nc(acc, alpha, p, v, T, n, 4);
    else if (hd == 128) accum_nc(acc, alpha, p, v, T, n, 8);
    else accum_any(acc, alpha, p, v, T, n, hd);
}

static void attn_accum(float *acc, float alpha, const float *p, const void *v, la_dtype vt, int32_t n, int32_t hd) {
    if (vt == LA_DTYPE_BF16) accum_t(acc, alpha, p, v, LA_DTYPE_BF16, n, hd);
    else accum_t(acc, alpha, p, v, LA_DTYPE_F32, n, hd);
}

/* r[j] = sum of the lanes of a[j], j < 16: a transpose-and-add tree (45 shuffles and adds,
 * where 16 horizontal sums cost ~130). */
AI __m512 reduce16(const __m512 *a) {
    __m512 t[8], u[4], w[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) /* per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] of rows 2i, 2i+1 */
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) /* per 128-bit lane: the lane's sums of rows 4i .. 4i + 3 */
        u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) /* lanes 0+1 and 2+3 of rows 8i .. 8i + 7 */
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* attn_block on 16 keys, head_dim = 16 * NC: q, the scores and the accumulator in registers. */
AI void block16_nc(const float *q, const char *k, const char *v, la_dtype T, float scale, float *st, const int NC) {
    const size_t row = (size_t)(16 * NC) * (T == LA_DTYPE_F32 ? 4 : 2);
    __m512 qv[8], a[16];
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) qv[c] = _mm512_mul_ps(_mm512_loadu_ps(q + 16 * c), _mm512_set1_ps(scale));
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        const char *kr = k + (size_t)j * row;
        a[j] = _mm512_mul_ps(qv[0], load16(kr, 0, T));
#pragma GCC unroll 8
        for (int c = 1; c < NC; c++) a[j] = _mm512_fmadd_ps(qv[c], load16(kr, 16 * c, T), a[j]);
    }
    const __m512 s = reduce16(a);
    const float bmax = _mm512_reduce_max_ps(s), mx = st[0] > bmax ? st[0] : bmax;
    const float alpha = st[0] == mx ? 1.0f : expf(st[0] - mx); /* 0 from an empty state (-inf) */
    const __m512 p = exp16(_mm512_sub_ps(s, _mm512_set1_ps(mx)));
    float pj[16];
    _mm512_storeu_ps(pj, p);
    st[1] = st[1] * alpha + _mm512_reduce_add_ps(p);
    st[0] = mx;
    __m512 acc[8];
    const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) acc[c] = _mm512_mul_ps(_mm512_loadu_ps(st + 2 + 16 * c), al);
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        const char *vr = v + (size_t)j * row;
        const __m512 pv = _mm512_set1_ps(pj[j]);
#pragma GCC unroll 8
        for (int c = 0; c < NC; c++) acc[c] = _mm512_fmadd_ps(pv, load16(vr, 16 * c, T), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; c++) _mm512_storeu_ps(st + 2 + 16 * c, acc[c]);
}

/* Any n and head_dim: the three pieces on up to 64 keys at a time. */
static void block_any(const float *q, const char *k, const char *v, la_dtype kvt, int32_t n, int32_t hd, float scale,
                      float *st) {
    float s[64];
    for (int32_t j0 = 0; j0 < n; j0 += 64) {
        const int32_t nj = n - j0 < 64 ? n - j0 : 64;
        const size_t off = (size_t)j0 * (size_t)hd * la_dtype_size(kvt);
        float bmax = attn_scores(q, k + off, kvt, nj, hd, scale, s);
        float mx = st[0] > bmax ? st[0] : bmax;
        float alpha = st[0] == mx ? 1.0f : expf(st[0] - mx);
        st[1] = st[1] * alpha + exp_sum(s, nj, mx);
        attn_accum(st + 2, alpha, s, v + off, kvt, nj, hd);
        st[0] = mx;
    }
}

AI void block_t(const float *q, const char *k, const char *v, la_dtype T, int32_t n, int32_t hd, float scale,
                float *st) {
    const size_t row = (size_t)hd * (T == LA_DTYPE_F32 ? 4 : 2);
    int32_t j = 0;
    if (hd == 64)
        for (; j + 16 <= n; j += 16) block16_nc(q, k + (size_t)j * row, v + (size_t)j * row, T, scale, st, 4);
    else if (hd == 128)
        for (; j + 16 <= n; j += 16) block16_nc(q, k + (size_t)j * row, v + (size_t)j * row, T, scale, st, 8);
    if (j < n) block_any(q, k + (size_t)j * row, v + (size_t)j * row, T, n - j, hd, scale, st);
}

static void attn_block(const float *q, const void *k, const void *v, la_dtype kvt, int32_t n, int32_t hd, float scale,
                       float *st) {
    if (kvt == LA_DTYPE_BF16) block_t(q, k, v, LA_DTYPE_BF16, n, hd, scale, st);
    else block_t(q, k, v, LA_DTYPE_F32, n, hd, scale, st);
}

/* attn_block_kt for G (<= 4) queries: scores as 16-lane vectors (q[d] broadcast times row d of
 * kt; even and odd d in two accumulators a query, added at the end: 2G independent FMA
 * chains, where one chain of hd dependent FMAs a query was latency-bound), the softmax step
 * on them, then V row by row into G x NC accumulator registers per 16 NC columns of
 * head_dim (NC 4 where 64 divides it, else 1). A query's sums do not depend on G. */
AI void kt_group(const float *q, int64_t qs, const float *kt, const float *v, int32_t n, int32_t hd, float scale,
                 float *st, int64_t sts, const int G, const int NC) {
    const __mmask16 km = n >= 16 ? (__mmask16)0xffff : tail_mask(n);
    __m512 s0[4], s1[4];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) s0[g] = s1[g] = _mm512_setzero_ps();
    int32_t d = 0;
    for (; d + 2 <= hd; d += 2) {
        const __m512 k0 = _mm512_loadu_ps(kt + d * 16), k1 = _mm512_loadu_ps(kt + d * 16 + 16);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            s0[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * qs + d]), k0, s0[g]);
            s1[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * qs + d + 1]), k1, s1[g]);
        }
    }
    if (d < hd) {
        const __m512 k0 = _mm512_loadu_ps(kt + d * 16);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) s0[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * qs + d]), k0, s0[g]);
    }
    float pj[4][16], alpha[4];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        float *sg = st + g * sts;
        const __m512 sc = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), km,
                                             _mm512_mul_ps(_mm512_add_ps(s0[g], s1[g]), _mm512_set1_ps(scale)));
        const float bmax = _mm512_reduce_max_ps(sc), mx = sg[0] > bmax ? sg[0] : bmax;
        alpha[g] = sg[0] == mx ? 1.0f : expf(sg[0] - mx);
        const __m512 p = _mm512_maskz_mov_ps(km, exp16(_mm512_sub_ps(sc, _mm512_set1_ps(mx))));
        _mm512_storeu_ps(pj[g], p);
        sg[1] = sg[1] * alpha[g] + _mm512_reduce_add_ps(p);
        sg[0] = mx;
    }
    for (int32_t c0 = 0; c0 < hd; c0 += 16 * NC) { /* NC registers of 16 columns per query */
        __m512 acc[4][4];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++)
                acc[g][c] = _mm512_mul_ps(_mm512_loadu_ps(st + g * sts + 2 + c0 + 16 * c), _mm512_set1_ps(alpha[g]));
        for (int32_t j = 0; j < n; j++) {
            const float *vr = v + (size_t)j * (size_t)hd + c0;
            __m512 vv[4];
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) vv[c] = _mm512_loadu_ps(vr + 16 * c);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) {
                const __m512 pv = _mm512_set1_ps(pj[g][j]);
#pragma GCC unroll 4
                for (int c = 0; c < NC; c++) acc[g][c] = _mm512_fmadd_ps(pv, vv[c], acc[g][c]);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int c = 0; c < NC; c++) _mm512_storeu_ps(st + g * sts + 2 + c0 + 16 * c, acc[g][c]);
    }
}

static void attn_block_kt(const float *q, int64_t q_stride, int32_t nq, const float *kt, const float *v, int32_t n,
                          int32_t hd, float scale, float *st, int64_t st_stride) {
    for (int32_t g = 0; g < nq; g += 4) {
        const float *qg = q + g * q_stride;
        float *sg = st + g * st_stride;
        const int nc = hd % 64 == 0 ? 4 : 1;
        switch ((nq - g < 4 ? nq - g : 4) * 8 + nc) {
        case 9: kt_group(qg, q_stride, kt, v, n, hd, scale, sg, st_stride, 1, 1); break;
        case 17: kt_group(qg, q_stride, kt, v, n, hd, scale, sg, st_stride, 2, 1); break;
        case 25: kt_group(qg, q_stride, kt, v, n, hd, scale, sg, st_stride, 3, 1); break;
        case 33: kt_group(qg, q_stride, kt, v, n, hd, scale, sg, st_stride, 4, 1); break;
        case 12: kt_group(qg, q_stride, kt, v, n, hd, scale, sg, st_stride, 1, 4); break;
        case 20: kt_group(qg, q_stride, kt, v, n, hd, scale, sg, st_stride, 2, 4); break;
        case 28: kt_group(qg, q_stride, kt, v, n, hd, scale, sg, st_stride, 3, 4); break;
        default: kt_group(qg, q_stride, kt, v, n, hd, scale, sg, st_stride, 4, 4); break;
        }
    }
}

static void silu_mul(float *g, const float *u, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), hi = _mm512_set1_ps(88.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(g + i);
        __m512 e = exp16(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), x), hi));
        _mm512_storeu_ps(g + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

const la_cpu_kernels la_cpu_kernels_avx512 = {
    .isa = LA_CPU_ISA_AVX512,
    .name = "avx512",
    .gemm_nt = gemm_nt,
    /* Zen 4 (bench/results/cpu_gemm_shapes.json): its 4 x 4 tiles sweep x once per 4 weight
     * rows, so past 4 MiB of x BLAS wins (1024 rows of 2048x8192: 36 against 67 GFLOP/s; of
     * 1024x384, 1.5 MiB: 93 against 81) */
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

#else
/* Not an x86 build: an empty table, never chosen (la_cpu_isa_supported says no). */
#include "backend/cpu/cpu_kernels.h"

const la_cpu_kernels la_cpu_kernels_avx512 = {.isa = LA_CPU_ISA_AVX512, .name = "avx512 (not built)"};
#endif
