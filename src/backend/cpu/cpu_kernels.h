/* The CPU backend's vector kernels: one table of functions per instruction set, picked at
 * run time from what the CPU has (la_cpu_kernels_get).
 *
 *   LA_CPU_ISA_AVX512    AVX-512 F/BW/VL (+ FMA, F16C): cpu_kernels_avx512.c, compiled with
 *                        those -m flags only (CMakeLists.txt)
 *   LA_CPU_ISA_AVX2      AVX2 + FMA + F16C: cpu_kernels_avx2.c
 *   LA_CPU_ISA_PORTABLE  plain C, any CPU: cpu_kernels_portable.c, the reference the tests
 *                        compare every other table against
 *
 * Every kernel accumulates in f32. Weights may be F32, BF16 or F16 (the checkpoint's
 * dtype kept in memory: half the bytes a decode step reads), converted to f32 in registers
 * (bf16: a 16-bit shift, exact; f16: vcvtph2ps, exact), so a bf16 weight gives the same
 * products as its f32 widening; only the order of the sums differs between tables.
 * KV rows may be F32 or BF16.
 *
 * Weight matrices are PACKED for gemm_nt (la_cpu_pack): a decode step streams them in one
 * sequential pass, where HF's row-major [n_out, k] read four rows at a time is four short
 * streams the hardware prefetcher does not follow (measured 6 against 17 GB/s for k = 384).
 * Rows go in groups of LA_CPU_PACK_ROWS = 4, k in chunks of LA_CPU_PACK_K = 16:
 *
 *   element (j, c) at  (j / 4) * 4 * kp + (c / 16) * 64 + (j % 4) * 16 + c % 16,
 *   kp = k rounded up to 16; rows past n_out and columns past k are zeros.
 *
 * The environment variable LA_CPU_ISA=portable|avx2|avx512 caps the table the backend uses
 * (a test hook and a benchmark switch; a name the CPU lacks falls back to the best it has;
 * another value is refused when the backend is created).
 */
#ifndef LA_BACKEND_CPU_CPU_KERNELS_H
#define LA_BACKEND_CPU_CPU_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"

typedef enum la_cpu_isa {
    LA_CPU_ISA_PORTABLE = 0,
    LA_CPU_ISA_AVX2,
    LA_CPU_ISA_AVX512,
    LA_CPU_ISA_COUNT
} la_cpu_isa;

/* AVX-512's gemm_nt / OpenBLAS crossovers (measured: cpu_kernels_avx512.c), the widest of
 * any table; the portable table keeps them too (la_cpu_kernels.gemm_max_rows_*). */
#define LA_CPU_AVX512_GEMM_MAX_ROWS_F32 128
#define LA_CPU_AVX512_GEMM_MAX_ROWS_16BIT 256
#define LA_CPU_AVX512_GEMM_X_BYTES ((int64_t)4 << 20)

typedef struct la_cpu_kernels {
    la_cpu_isa isa;
    const char *name; /* "portable", "avx2", "avx512" */

    /* Small-batch GEMM against a weight kept in its own dtype:
     *   y[i * ldy + j] = sum_{c < k} x[i * ldx + c] * W[j][c]  (+ bias[j])
     * for rows i < m and output columns j in [n0, n1). W is HF nn.Linear's [n_out, k] PACKED
     * as above (la_cpu_pack), of dtype wt (F32, BF16, F16); n0 a multiple of 4; x f32, read
     * only at c < k; bias f32 [n_out] or NULL (added after the sum, as nn.Linear rounds). Any
     * m >= 1 and k >= 1; cost grows with m (the decode and small-batch kernel: prefill goes
     * to BLAS). */
    void (*gemm_nt)(const float *x, int64_t ldx, int64_t m, const void *w, la_dtype wt, int64_t k, int64_t n0,
                    int64_t n1, const float *bias, float *y, int64_t ldy);
    /* Where this table's gemm_nt beats OpenBLAS (one thread, bench/bench_cpu_gemm.c): up to
     * gemm_max_rows_f32 rows on f32 weights, gemm_max_rows_16bit on bf16 / f16, and at any row
     * count while x (rows x k f32) stays within gemm_x_bytes (0: no such rule). The CPU
     * backend runs BLAS above them. */
    int32_t gemm_max_rows_f32, gemm_max_rows_16bit;
    int64_t gemm_x_bytes;
    /* gemm_nt on bf16 activations (--cpu-weights bf16-dot, llama.cpp's bf16 arithmetic): x given
     * as bf16 rows of ldx elements, each zero-padded from k to k rounded up to 16; W packed
     * bf16; the products of bf16 pairs summed in f32 (vdpbf16ps: twice the multiply rate of
     * f32 FMA on Zen 4). NULL in a table without AVX512_BF16. */
    void (*gemm_nt_bf16x)(const uint16_t *x, int64_t ldx, int64_t m, const uint16_t *w, int64_t k, int64_t n0,
                          int64_t n1, const float *bias, float *y, int64_t ldy);
    /* dst[i] = bf16(src[i]) rounded to nearest even, for i < n. */
    void (*to_bf16)(uint16_t *dst, const float *src, int64_t n);
    /* dst[i] = (float)src[i] for i < n, src of dtype t (F32, BF16, F16). */
    void (*to_f32)(float *dst, const void *src, la_dtype t, int64_t n);

    /* Attention, one KV block at a time (the CPU backend's paged attention):
     *   s[j] = scale * <q, K_j>   for j < n; K_j = rows of hd elements of dtype kt (F32, BF16)
     *                             at k + j * hd; q f32 [hd]. Returns max_j s[j]. */
    float (*attn_scores)(const float *q, const void *k, la_dtype kt, int32_t n, int32_t hd, float scale,
                         float *s);
    /* s[j] = exp(s[j] - mx) for j < n; returns their sum (f32). */
    float (*exp_sum)(float *s, int32_t n, float mx);
    /* acc[d] = acc[d] * alpha + sum_{j < n} p[j] * V_j[d] for d < hd; V_j rows of hd elements
     * of dtype vt (F32, BF16) at v + j * hd. */
    void (*attn_accum)(float *acc, float alpha, const float *p, const void *v, la_dtype vt, int32_t n, int32_t hd);
    /* One online-softmax step of a query over n keys (the three above fused):
     *   st = [mx, l, acc[hd]] f32, the running max, sum and unnormalized output (mx = -inf,
     *   l = 0, acc = 0 before the first step); s_j = scale <q, K_j>, m = max(mx, max_j s_j),
     *   a = exp(mx - m): st becomes [m, l a + sum_j e^(s_j - m), acc a + sum_j e^(s_j - m) V_j].
     * K, V rows of hd elements of dtype kvt (F32, BF16); n >= 1. */
    void (*attn_block)(const float *q, const void *k, const void *v, la_dtype kvt, int32_t n, int32_t hd,
                       float scale, float *st);
    /* attn_block for several queries that see the same keys (a GQA group's heads at one
     * position) against up to 16 keys held TRANSPOSED, for prefill, where the block's
     * transpose is paid once for many queries and the scores need no horizontal sums:
     *   query g < nq at q + g * q_stride (f32 [hd]), its state at st + g * st_stride;
     *   kt f32 [hd][16] (key j's element d at kt[d * 16 + j]), v f32 [n][hd], keys j < n <= 16.
     * hd a multiple of 16 (the backend uses attn_block otherwise); any nq >= 1. */
    void (*attn_block_kt)(const float *q, int64_t q_stride, int32_t nq, const float *kt, const float *v, int32_t n,
                          int32_t hd, float scale, float *st, int64_t st_stride);
    /* attn_block for nq >= 1 queries that see the same keys (a GQA group's heads at one
     * position: decode), K and V read once for all of them: query g at q + g * q_stride
     * (f32 [hd]), its state at st + g * st_stride; K, V as attn_block's (row-major, dtype kvt
     * F32 or BF16); n >= 1, any hd. Each state is bit-equal to what attn_block would leave.
     * NULL in the tables without a fused version (portable, AVX-512): the backend widens a
     * 16-bit block once and runs attn_block per head there. */
    void (*attn_block_heads)(const float *q, int64_t q_stride, int32_t nq, const void *k, const void *v, la_dtype kvt,
                             int32_t n, int32_t hd, float scale, float *st, int64_t st_stride);
    /* SwiGLU: g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i] for i < n (HF LlamaMLP's
     * act_fn(gate) * up; the vector tables' exp is the Cephes polynomial, within 4e-7 of expf). */
    void (*silu_mul)(float *g, const float *u, int64_t n);
} la_cpu_kernels;

/* cpu_kernels_avx512bf16.c (AVX512_BF16; the AVX-512 table's gemm_nt_bf16x and to_bf16 where
 * cpuid has it, la_cpu_kernels_for). */
void la_cpu_avx512bf16_gemm_nt_bf16x(const uint16_t *x, int64_t ldx, int64_t m, const uint16_t *w, int64_t k,
                                     int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy);
void la_cpu_avx512bf16_to_bf16(uint16_t *dst, const float *src, int64_t n);

/* The tables this build compiled (NULL where the compiler could not build one). */
extern const la_cpu_kernels la_cpu_kernels_portable;
extern const la_cpu_kernels la_cpu_kernels_avx2;
extern const la_cpu_kernels la_cpu_kernels_avx512;

/* Whether this CPU runs isa's table (cpuid through __builtin_cpu_supports). */
bool la_cpu_isa_supported(la_cpu_isa isa);
/* The table of isa, or NULL when this CPU cannot run it or this build could not compile it. */
const la_cpu_kernels *la_cpu_kernels_for(la_cpu_isa isa);
/* LA_CPU_ISA: 0 when unset or empty, 1 when it names a table (portable, avx2, avx512; that
 * table in *cap), -1 for any other value (*cap untouched). */
int la_cpu_isa_env(la_cpu_isa *cap);
/* The best table this CPU runs, capped by LA_CPU_ISA when it names one. Never NULL. */
const la_cpu_kernels *la_cpu_kernels_get(void);
#define LA_CPU_PACK_ROWS 4
#define LA_CPU_PACK_K 16

/* gemm_nt's cache blocking over many x rows (the vector tables' gemm_t). A tile reads its 4
 * weight rows and its few x rows whole over k, so with every x row passing each group of 4
 * weight rows, x streams from L3 or memory once it outgrows L2 (a 512-row prefill chunk at
 * k 2048 is 4 MiB) at 2 FLOPs a byte. Then the columns go in panels of *nb weight rows
 * (about panel_bytes of weights) and, inside a panel, the x rows in blocks of *mb (about
 * xblock_bytes of f32): the block stays in L2 while the panel's groups pass over it, the
 * panel while the blocks pass, and x streams once a panel. An x of m rows that fits in 4 x
 * xblock_bytes stays one block (*mb = m): L2 holds it as it is, the loop of before. Each
 * output is still one tile's sum in the same order, so the results are the unblocked
 * loop's, bit for bit: *mb is m or a multiple of 12 (whole tiles of 2, 3 and 4 rows), *nb a
 * multiple of LA_CPU_PACK_ROWS. k in elements, weight_bytes the weight dtype's size. */
static inline void la_cpu_gemm_blocks(int64_t m, int64_t k, size_t weight_bytes, size_t xblock_bytes,
                                      size_t panel_bytes, int64_t *mb, int64_t *nb) {
    const size_t kb = k > 0 ? (size_t)k : 1;
    const int64_t r = (int64_t)(xblock_bytes / (kb * 4)) / 12 * 12;
    const int64_t c = (int64_t)(panel_bytes / (kb * weight_bytes)) / LA_CPU_PACK_ROWS * LA_CPU_PACK_ROWS;
    *mb = (size_t)m * kb * 4 <= 4 * xblock_bytes ? (m > 0 ? m : 1) : r < 12 ? 12 : r;
    *nb = c < LA_CPU_PACK_ROWS ? LA_CPU_PACK_ROWS : c;
}
/* The tables' budgets for la_cpu_gemm_blocks (bytes): AVX2's for a 512 KiB L2 (Zen 2 / 3),
 * AVX-512's for a 2 MiB one (Sapphire / Emerald Rapids; Zen 4 has 1 MiB). */
#define LA_CPU_AVX2_GEMM_XBLOCK_BYTES (96 * 1024)
#define LA_CPU_AVX2_GEMM_PANEL_BYTES (192 * 1024)
#define LA_CPU_AVX512_GEMM_XBLOCK_BYTES (256 * 1024)
#define LA_CPU_AVX512_GEMM_PANEL_BYTES (512 * 1024)

/* Elements of a packed [n, k] matrix (padding included). */
int64_t la_cpu_packed_elems(int64_t n, int64_t k);
/* Pack the row-major [n, k] matrix src of dtype st into dst of dtype dt (la_cpu_packed_elems
 * elements; bf16 / f16 from a wider dtype rounded to nearest even, the same dtype copied
 * exactly), zero padding. */
void la_cpu_pack(void *dst, la_dtype dt, const void *src, la_dtype st, int64_t n, int64_t k);
/* Rows [j0, j1) of a packed [n, k] matrix w of dtype wt, widened to f32 row-major
 * dst[(j - j0) * k + c] (kn's to_f32 on each 16-element piece). */
void la_cpu_unpack_rows(const la_cpu_kernels *kn, float *dst, const void *w, la_dtype wt, int64_t k, int64_t j0,
                        int64_t j1);

/* Whether this CPU converts dtype t in the kernels at full speed: F32 always; BF16 and F16 on
 * the AVX2 and AVX-512 tables (the portable table converts them too, slowly). */
bool la_cpu_dtype_fast(la_dtype t);

#endif
