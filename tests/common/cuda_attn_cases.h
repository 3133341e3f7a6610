/* The CUDA kernel tests' shared pieces (tests/backend/test_cuda_kernels.c,
 * test_cuda_shared_attn.c): the synthetic model (common/synth_model.h) loaded into a CPU
 * backend (the reference) and a CUDA backend side by side, activations uploaded
 * to both, batch builders for attention cases (plain prefills, lazy and mepic documents,
 * decode rows), and the attention case runners that compare the GPU with the CPU under
 * every attn_prefill kernel (and, for shared blocks, with shared-block attention off, on and
 * auto). Only in builds with the CUDA backend (LA_HAVE_CUDA). */
#ifndef LA_TESTS_COMMON_CUDA_ATTN_CASES_H
#define LA_TESTS_COMMON_CUDA_ATTN_CASES_H

#ifdef LA_HAVE_CUDA
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_hooks.h"
#include "common/synth_model.h"
#include "engine/backend_model.h"

/* Tolerances (absolute, on values of order 1):
 * ROW_TOL_REL   element-wise ops and RMSNorm: one bf16 rounding of the output, 2^-8
 *               relative, measured against the largest reference magnitude.
 * GEMM_TOL_REL  x W^T: bf16 output rounding plus f32 accumulation in another order.
 * ATTN_TOL_ABS + ATTN_TOL_REL x max |cpu|
 *               attention outputs are convex combinations of V in [-1, 1]; the GPU rounds
 *               rotated q and k and the probabilities P to bf16 (2^-9 relative each), so
 *               outputs move by under 0.7% of the largest (4682 comparisons in the H100 logs
 *               under bench/results: at most 0.25 of this tolerance). Relative, because over
 *               thousands of keys the outputs shrink (max |cpu| 0.05 at 6000 keys): an
 *               absolute 0.025 there let a dropped 16-key block (0.008) pass.
 * SHARED_TOL    shared-block attention against the per-sequence kernels on the GPU, the same
 *               form: the same bf16 roundings of q, k and P, but P rounded at another running
 *               maximum and partial states merged in another order (each within the
 *               tolerance of the CPU). */
#define ROW_TOL_REL 8e-3
#define GEMM_TOL_REL 1e-2
#define ATTN_TOL_ABS 1e-3
#define ATTN_TOL_REL 2e-2
#define KV_TOL_REL 8e-3


#define LA_TEST_MAX_SEQS 1024 /* sequences of one test batch */

typedef struct la_test_pair {
    la_backend *be[2]; /* [0] CPU reference, [1] CUDA */
    const la_model_config *cfg;
} la_test_pair;

typedef struct la_test_builder {
    int32_t n, cap;
    int32_t *tokens, *pos, *kpos;
    int64_t *slots;
    int32_t n_seqs;
    la_batch_seq seqs[LA_TEST_MAX_SEQS];
    int32_t n_blocks, cap_blocks;
    la_attn_block *blocks;
    int32_t rows[64];
} la_test_builder;

typedef enum la_test_doc_method { LA_TEST_DOC_LAZY, LA_TEST_DOC_MEPIC } la_test_doc_method;

typedef struct la_test_geometry {
    int hidden, n_heads, n_kv, hd;
    int32_t B;
} la_test_geometry;

/* ---- the synthetic model, both backends ---- */

/* (la_test_synth, la_test_urand: common/synth_model.h) */
/* Both backends with s's weights and a pool of n_blocks x B; false (the skip line printed,
 * s freed: the caller just returns) when there is no GPU. */
bool la_test_pair_open(la_test_pair *p, la_test_synth *s, int64_t n_blocks, int32_t B);
void la_test_pair_close(la_test_pair *p);
/* Attention geometry: the pair with a 2-layer model of it and a 4096-block pool. */
bool la_test_attn_open(la_test_pair *p, la_test_synth *s, la_test_geometry g);
void la_test_attn_close(la_test_pair *p, la_test_synth *s);

/* ---- activations ---- */
void la_test_act_pair(la_test_pair *p, int64_t rows, int64_t cols, la_act a[2]);
void la_test_act_pair_free(la_test_pair *p, la_act a[2]);
/* The same host values (rounded to bf16) into both activations. */
void la_test_upload_pair(la_test_pair *p, la_act a[2], const float *host);
/* n values uniform in [lo, hi), rounded to bf16 (caller frees). */
float *la_test_random_host(size_t n, float lo, float hi);
void la_test_random_pair(la_test_pair *p, la_act a[2], float lo, float hi);
/* The GPU activation filled with NaN (an element no kernel writes fails the comparison). */
void la_test_poison_gpu(la_test_pair *p, la_act a[2]);
/* An activation on the host, f32 (caller frees). */
float *la_test_read_act(la_backend *be, const la_act *a);
/* Fail unless max |gpu - cpu| <= tol_abs + tol_rel * max |cpu|; print the numbers either way. */
void la_test_expect_close(const char *what, const la_act a[2], la_test_pair *p, double tol_abs, double tol_rel);

/* ---- batches ---- */
void la_test_builder_init(la_test_builder *b);
void la_test_builder_free(la_test_builder *b);
void la_test_add_token(la_test_builder *b, int32_t pos, int32_t kpos, int64_t slot);
void la_test_add_block(la_test_builder *b, int32_t id, int32_t n_valid, int32_t pos0, int32_t q_delta, int32_t k_rope);
/* Sequence rows [row0, row0 + n_rows) over blocks [block0, the builder's last block] (the
 * test fails past LA_TEST_MAX_SEQS). */
void la_test_add_seq(la_test_builder *b, int32_t row0, int32_t n_rows, int32_t block0);
la_batch la_test_builder_batch(la_test_builder *b);
/* A document of len tokens cached alone in blocks [first_block, ...): token i at local
 * position i, K rotated at i (lazy, block) or stored unrotated (mepic). */
void la_test_cache_doc(la_test_builder *cache, int32_t B, int32_t first_block, int32_t len, bool unrotated);
/* Query rows of one sequence: n_q tokens at positions t0.., own K rotated there, in tail
 * blocks starting at first_block; appends the tail blocks to the sequence's view. */
void la_test_add_tail(la_test_builder *q, int32_t B, int32_t first_block, int32_t t0, int32_t n_q);
/* One plain causal sequence of n tokens at positions 0.. in blocks from first_block: the
 * first n_cached go to the cache batch, the rest are the query batch's rows (n_cached =
 * n - 1: a decode row). Returns the next free block. */
int32_t la_test_plain_seq(la_test_builder *cache, la_test_builder *q, int32_t B, int32_t first_block, int32_t n_cached,
                          int32_t n);
/* Documents of the given lengths cached alone (cache batch), then a question of n_q tokens
 * attending to all of them through the method's view; `base` offsets every logical
 * position (100k-token contexts). Returns the next free block. */
int32_t la_test_docs_case(la_test_builder *cache, la_test_builder *q, int32_t B, const int32_t *lens, int n_docs,
                          int32_t n_q, la_test_doc_method dm, int32_t base, int32_t first_block);

/* ---- attention cases ---- */

/* Write the cache batch's K/V (layer `layer`), then the query batch's own K/V, then
 * attention; the GPU under every attn_prefill variant that runs at this head_dim against
 * the one CPU result (ATTN_TOL_ABS + ATTN_TOL_REL), then the in-kernel decode merge against attn_combine
 * (bit-equal), then the packed decode instance against the CPU where it runs
 * (la_test_case_packed). Returns bit k set for each attn_prefill kernel k that ran a step. */
uint32_t la_test_attn_case(la_test_pair *p, const char *what, la_test_builder *cache, la_test_builder *query,
                           int32_t layer);

/* The same case with shared-block attention off, on and auto (la_cuda_attn_shared_set) under
 * every attn_prefill variant, and on with the packed decode instance: each against the CPU
 * (the same) and on against off
 * (SHARED_TOL). Asserts that off grouped nothing, on at least min_runs runs, and auto
 * grouped (auto_grouped 1), nothing (0) or either (-1). Leaves the mode at auto. Returns
 * the statistics of the last `on` step. */
la_cuda_attn_shared_stats la_test_attn_case_shared(la_test_pair *p, const char *what, la_test_builder *cache,
                                                   la_test_builder *query, int32_t layer, int64_t min_runs,
                                                   int auto_grouped);
/* Whether the last la_test_attn_case's packed pass (la_cuda_attn_decode_packed_set ON) ran
 * its decode items packed: not where a decode item is split over its keys. */
extern bool la_test_case_packed;
/* Whether the last la_test_attn_case_shared's auto pass (shared and packed decode both at
 * their defaults) ran its decode items packed (la_cuda_attn_decode_packed_ran). */
extern bool la_test_shared_auto_packed;

#endif /* LA_HAVE_CUDA */
#endif
