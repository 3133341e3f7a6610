/* The AVX512_BF16 kernels of the AVX-512 table (cpu_kernels.h: gemm_nt_bf16x, to_bf16),
 * this file alone compiled with -mavx512bf16 (CMakeLists.txt); cpu_kernels.c puts them in
 * the table only where cpuid has AVX512_BF16.
 *
 * gemm_nt_bf16x: 16 bf16 of a packed weight row are one ymm; vdpbf16ps (256-bit) multiplies
 * them pairwise with 16 bf16 of an x row and adds the pair sums to 8 f32 lanes. Tiles of 4
 * weight rows x up to 6 x rows (24 ymm accumulators), x in blocks of 48 rows so a block stays
 * in L2 while the task's weight rows go by. */
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512VL__)
#include <immintrin.h>

#include "backend/cpu/cpu_kernels.h"

#define AI static inline __attribute__((always_inline))

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* y[i][j0 + r] for i < MR, r < 4 with j0 + r < n1, from the group of 4 packed rows at wg. */
AI void tile(const uint16_t *x, int64_t ldx, const uint16_t *wg, int64_t kp, int64_t j0, int64_t n1,
             const float *bias, float *y, int64_t ldy, const int MR) {
    __m256 acc[6][4];
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[i][r] = _mm256_setzero_ps();
    const uint16_t *p = wg;
    for (int64_t c = 0; c < kp; c += 16, p += 64) {
        _mm_prefetch((const char *)p + 4096, _MM_HINT_T0);
        _mm_prefetch((const char *)p + 4096 + 64, _MM_HINT_T0);
        __m256bh wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) wv[r] = (__m256bh)_mm256_loadu_si256((const __m256i *)(p + 16 * r));
#pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m256bh xv = (__m256bh)_mm256_loadu_si256((const __m256i *)(x + i * ldx + c));
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[i][r] = _mm256_dpbf16_ps(acc[i][r], xv, wv[r]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            if (j0 + r < n1) {
                float s = hsum8(acc[i][r]);
                y[i * ldy + j0 + r] = bias ? s + bias[j0 + r] : s;
            }
}

#define ROW_BLOCK 48

void la_cpu_avx512bf16_gemm_nt_bf16x(const uint16_t *x, int64_t ldx, int64_t m, const uint16_t *w, int64_t k,
                                     int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy) {
    const int64_t kp = (k + 15) & ~(int64_t)15;
    for (int64_t i0 = 0; i0 < m; i0 += ROW_BLOCK) {
        const int64_t i1 = m - i0 < ROW_BLOCK ? m : i0 + ROW_BLOCK;
        for (int64_t j = n0; j < n1; j += 4) {
            const uint16_t *wg = w + (size_t)(j / 4) * 4 * (size_t)kp;
            int64_t i = i0;
            for (; i + 6 <= i1; i += 6) tile(x + i * ldx, ldx, wg, kp, j, n1, bias, y + i * ldy, ldy, 6);
            switch (i1 - i) {
            case 5: tile(x + i * ldx, ldx, wg, kp, j, n1, bias, y + i * ldy, ldy, 5); break;
            case 4: tile(x + i * ldx, ldx, wg, kp, j, n1, bias, y + i * ldy, ldy, 4); break;
            case 3: tile(x + i * ldx, ldx, wg, kp, j, n1, bias, y + i * ldy, ldy, 3); break;
            case 2: tile(x + i * ldx, ldx, wg, kp, j, n1, bias, y + i * ldy, ldy, 2); break;
            case 1: tile(x + i * ldx, ldx, wg, kp, j, n1, bias, y + i * ldy, ldy, 1); break;
            default: break;
            }
        }
    }
}

void la_cpu_avx512bf16_to_bf16(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm256_mask_storeu_epi16(dst + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i)));
    }
}
#else
/* Not built with AVX512_BF16: never put in a table (la_cpu_kernels_for checks cpuid and
 * this build); plain C so the symbols exist. */
#include "backend/cpu/cpu_kernels.h"

void la_cpu_avx512bf16_gemm_nt_bf16x(const uint16_t *x, int64_t ldx, int64_t m, const uint16_t *w, int64_t k,
                                     int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy) {
    (void)x, (void)ldx, (void)m, (void)w, (void)k, (void)n0, (void)n1, (void)bias, (void)y, (void)ldy;
}
void la_cpu_avx512bf16_to_bf16(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = la_f32_to_bf16(src[i]);
}
#endif
