/* The CUDA kernel tests' shared pieces: cuda_attn_cases.h. */
#include "common/cuda_attn_cases.h"

#ifdef LA_HAVE_CUDA
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"
#include "common/test_util.h"

/* ============================================================ CPU / GPU pair ================ */


/* Both backends with s's weights and a pool of n_blocks x B; false (the skip line printed,
 * s freed: the caller just returns) when there is no GPU. */
bool la_test_pair_open(la_test_pair *p, la_test_synth *s, int64_t n_blocks, int32_t B) {
    la_err err = {0};
    memset(p, 0, sizeof *p);
    la_status st = la_backend_create(LA_DEVICE_CUDA, 0, &p->be[1], &err);
    if (st == LA_ERR_UNSUPPORTED) {
        printf("skipped: no GPU (%s)\n", err.msg);
        fflush(stdout);
        la_test_synth_free(s);
        return false;
    }
    LA_CHECK_OK(st, err);
    /* one operation at a time, each run as it is called (graphs record whole decode steps;
     * test_cuda_forward.c and test_cuda_fused_gemm.c test them) */
    la_cuda_graphs_enable(p->be[1], false);
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CPU, 2, &p->be[0], &err), err);
    for (int i = 0; i < 2; i++) {
        LA_CHECK_OK(la_backend_load_model(p->be[i], &s->cfg, &s->w, &err), err);
        LA_CHECK_OK(p->be[i]->ops->kv_alloc(p->be[i], n_blocks, B, &err), err);
    }
    p->cfg = &s->cfg;
    return true;
}

void la_test_pair_close(la_test_pair *p) {
    la_backend_destroy(p->be[0]);
    la_backend_destroy(p->be[1]);
}

void la_test_act_pair(la_test_pair *p, int64_t rows, int64_t cols, la_act a[2]) {
    la_err err = {0};
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p->be[i]->ops->act_alloc(p->be[i], rows, cols, &a[i], &err), err);
}

void la_test_act_pair_free(la_test_pair *p, la_act a[2]) {
    for (int i = 0; i < 2; i++) p->be[i]->ops->act_free(p->be[i], &a[i]);
}

/* The same host values (rounded to bf16) into both activations. */
void la_test_upload_pair(la_test_pair *p, la_act a[2], const float *host) {
    la_err err = {0};
    size_t n = (size_t)(a[0].n_rows * a[0].n_cols);
    memcpy(a[0].data, host, n * sizeof(float)); /* CPU activations are f32 host memory */
    LA_CHECK_OK(la_cuda_act_upload(p->be[1], &a[1], host, &err), err);
}

float *la_test_random_host(size_t n, float lo, float hi) {
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = la_test_bf16_round((float)(lo + (hi - lo) * la_test_urand()));
    return h;
}

void la_test_random_pair(la_test_pair *p, la_act a[2], float lo, float hi) {
    float *h = la_test_random_host((size_t)(a[0].n_rows * a[0].n_cols), lo, hi);
    la_test_upload_pair(p, a, h);
    free(h);
}

void la_test_poison_gpu(la_test_pair *p, la_act a[2]) {
    size_t n = (size_t)(a[1].n_rows * a[1].n_cols);
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    la_err err = {0};
    LA_CHECK_OK(la_cuda_act_upload(p->be[1], &a[1], h, &err), err);
    free(h);
}

float *la_test_read_act(la_backend *be, const la_act *a) {
    la_err err = {0};
    float *h = malloc((size_t)(a->n_rows * a->n_cols) * sizeof(float) + 1);
    LA_CHECK_OK(be->ops->to_host(be, a, h, &err), err);
    return h;
}

/* Fail unless max |gpu - cpu| <= tol_abs + tol_rel * max |cpu|; print the numbers either way. */
void la_test_expect_close(const char *what, const la_act a[2], la_test_pair *p, double tol_abs, double tol_rel) {
    float *ref = la_test_read_act(p->be[0], &a[0]), *got = la_test_read_act(p->be[1], &a[1]);
    size_t n = (size_t)(a[0].n_rows * a[0].n_cols), at = 0;
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)ref[i]));
    double d = la_test_max_abs_diff(got, ref, n, &at), tol = tol_abs + tol_rel * scale;
    printf("%-48s max |gpu - cpu| = %.3g at [%zu, %zu] (gpu %.6g, cpu %.6g), max |cpu| %.3g, tolerance %.3g\n",
           what, d, at / (size_t)a[0].n_cols, at % (size_t)a[0].n_cols, got[at], ref[at], scale, tol);
    fflush(stdout);
    cr_assert(d <= tol, "%s: max |gpu - cpu| = %.4g at row %zu col %zu (gpu %.6g, cpu %.6g) > tolerance %.4g",
              what, d, at / (size_t)a[0].n_cols, at % (size_t)a[0].n_cols, got[at], ref[at], tol);
    free(ref);
    free(got);
}

/* ============================================================ batches ================ */


void la_test_builder_init(la_test_builder *b) {
    memset(b, 0, sizeof *b);
    b->cap = 1 << 16;
    b->tokens = calloc((size_t)b->cap, 4);
    b->pos = calloc((size_t)b->cap, 4);
    b->kpos = calloc((size_t)b->cap, 4);
    b->slots = calloc((size_t)b->cap, 8);
    b->cap_blocks = 1 << 17;
    b->blocks = calloc((size_t)b->cap_blocks, sizeof(la_attn_block));
}

void la_test_builder_free(la_test_builder *b) {
    free(b->tokens);
    free(b->pos);
    free(b->kpos);
    free(b->slots);
    free(b->blocks);
}

void la_test_add_token(la_test_builder *b, int32_t pos, int32_t kpos, int64_t slot) {
    cr_assert(b->n < b->cap);
    b->tokens[b->n] = (int32_t)(la_test_urand() * 100);
    b->pos[b->n] = pos;
    b->kpos[b->n] = kpos;
    b->slots[b->n] = slot;
    b->n++;
}

void la_test_add_block(la_test_builder *b, int32_t id, int32_t n_valid, int32_t pos0, int32_t q_delta, int32_t k_rope) {
    cr_assert(b->n_blocks < b->cap_blocks);
    b->blocks[b->n_blocks++] = (la_attn_block){id, n_valid, pos0, q_delta, k_rope};
}

void la_test_add_seq(la_test_builder *b, int32_t row0, int32_t n_rows, int32_t block0) {
    cr_assert(b->n_seqs < LA_TEST_MAX_SEQS, "more than %d sequences in one test batch", LA_TEST_MAX_SEQS);
    b->seqs[b->n_seqs++] = (la_batch_seq){row0, n_rows, block0, b->n_blocks - block0};
}

la_batch la_test_builder_batch(la_test_builder *b) {
    return (la_batch){b->n, b->tokens, b->pos, b->kpos, b->slots, b->n_seqs, b->seqs, b->n_blocks, b->blocks, 0,
                      b->rows};
}

/* A document of len tokens cached alone in blocks [first_block, ...): token i at local
 * position i, K rotated at i (lazy, block) or stored unrotated (mepic). */
void la_test_cache_doc(la_test_builder *cache, int32_t B, int32_t first_block, int32_t len, bool unrotated) {
    for (int32_t i = 0; i < len; i++)
        la_test_add_token(cache, i, unrotated ? LA_POS_UNROTATED : i, (int64_t)(first_block + i / B) * B + i % B);
}

/* One GPU step of a case: the query batch's own K (host values kh, uploaded afresh: kv_write
 * rotates its k argument in place, so a second kv_write of the same activation would write
 * keys rotated twice) and V, then attention into o, poisoned first. */
static void gpu_step(la_test_pair *p, la_batch *b, int32_t layer, la_act *k, const float *kh, la_act *v, la_act *q,
                     la_act o[2]) {
    la_err err = {0};
    LA_CHECK_OK(la_cuda_act_upload(p->be[1], k, kh, &err), err);
    la_test_poison_gpu(p, o);
    LA_CHECK_OK(p->be[1]->ops->batch_begin(p->be[1], b, &err), err);
    LA_CHECK_OK(p->be[1]->ops->kv_write(p->be[1], layer, k, v, &err), err);
    LA_CHECK_OK(p->be[1]->ops->attention(p->be[1], layer, q, &o[1], &err), err);
}

/* The inputs of one attention case, written and uploaded as la_test_attn_case does: the
 * cache batch's K/V into the pool of both backends, the query batch's q, k, v (kh: the host
 * K, uploaded afresh before each GPU step) and the CPU's output. */
typedef struct attn_inputs {
    la_act k[2], v[2], q[2], o[2];
    float *kh;
    la_batch b;
} attn_inputs;

static void inputs_open(la_test_pair *p, attn_inputs *in, la_test_builder *cache, la_test_builder *query, int32_t layer) {
    const la_model_config *m = p->cfg;
    la_err err = {0};
    const int64_t kvd = (int64_t)m->n_kv_heads * m->head_dim, qd = (int64_t)m->n_heads * m->head_dim;
    if (cache && cache->n > 0) {
        la_batch cb = la_test_builder_batch(cache);
        la_act k[2], v[2];
        la_test_act_pair(p, cache->n, kvd, k);
        la_test_act_pair(p, cache->n, kvd, v);
        la_test_random_pair(p, k, -1.f, 1.f);
        la_test_random_pair(p, v, -1.f, 1.f);
        for (int i = 0; i < 2; i++) {
            LA_CHECK_OK(p->be[i]->ops->batch_begin(p->be[i], &cb, &err), err);
            LA_CHECK_OK(p->be[i]->ops->kv_write(p->be[i], layer, &k[i], &v[i], &err), err);
        }
        la_test_act_pair_free(p, k);
        la_test_act_pair_free(p, v);
    }
    in->b = la_test_builder_batch(query);
    la_test_act_pair(p, query->n, kvd, in->k);
    la_test_act_pair(p, query->n, kvd, in->v);
    la_test_act_pair(p, query->n, qd, in->q);
    la_test_act_pair(p, query->n, qd, in->o);
    in->kh = la_test_random_host((size_t)(in->k[0].n_rows * in->k[0].n_cols), -1.f, 1.f);
    la_test_upload_pair(p, in->k, in->kh);
    la_test_random_pair(p, in->v, -1.f, 1.f);
    la_test_random_pair(p, in->q, -3.f, 3.f); /* peakier softmax than [-1, 1] */
    la_backend *c = p->be[0];
    LA_CHECK_OK(c->ops->batch_begin(c, &in->b, &err), err);
    LA_CHECK_OK(c->ops->kv_write(c, layer, &in->k[0], &in->v[0], &err), err);
    LA_CHECK_OK(c->ops->attention(c, layer, &in->q[0], &in->o[0], &err), err);
}

static void inputs_close(la_test_pair *p, attn_inputs *in) {
    free(in->kh);
    la_test_act_pair_free(p, in->k);
    la_test_act_pair_free(p, in->v);
    la_test_act_pair_free(p, in->q);
    la_test_act_pair_free(p, in->o);
}

/* The GPU runs the step once per attn_prefill variant (4 and 3: wgmma, 4 the default on a 9.0
 * GPU built for sm_90a, head_dim 64 or 128; 2: mma.sync) against the one CPU result, its
 * output poisoned and its K re-uploaded before each (kv_write rotates k in place: reusing
 * the activation wrote keys rotated twice into the second run). */
uint32_t la_test_attn_case(la_test_pair *p, const char *what, la_test_builder *cache, la_test_builder *query, int32_t layer) {
    la_err err = {0};
    attn_inputs in;
    inputs_open(p, &in, cache, query, layer);
    la_batch b = in.b;
    la_act *k = in.k, *v = in.v, *q = in.q, *o = in.o;
    const float *kh = in.kh;
    /* v4 and v3 (wgmma, head_dim 64 or 128 on a 9.0 GPU; elsewhere they run v2) where they exist,
     * then v2: a state one run leaves behind for the next would show in the later ones. v4
     * runs every step without a k_rope block, a lazy case's too (la_cuda_attn_lazy_ws_set ON
     * here; the default, OFF, runs them on v3), its items cut where q_delta changes: under
     * "v4" a mepic case runs v3 */
    const int32_t first = la_cuda_attn_prefill_variant_set(p->be[1], 4, &err) == LA_OK ? 4 : 2;
    const int32_t lazy_ws_mode = la_cuda_attn_lazy_ws(p->be[1]);
    LA_CHECK_OK(la_cuda_attn_lazy_ws_set(p->be[1], LA_CUDA_LAZY_WS_ON, &err), err);
    uint32_t ran = 0; /* bit k: attn_prefill kernel k ran a step (la_cuda_attn_prefill_kernel_ran) */
    for (int32_t variant = first; variant >= 2; variant--) {
        LA_CHECK_OK(la_cuda_attn_prefill_variant_set(p->be[1], variant, &err), err);
        if (la_cuda_attn_prefill_kernel(p->be[1]) != variant) continue; /* v3 at another hd: v2's run */
        gpu_step(p, &b, layer, &k[1], kh, &v[1], &q[1], o);
        const int32_t kernel = la_cuda_attn_prefill_kernel_ran(p->be[1]);
        ran |= 1u << kernel;
        char label[160];
        snprintf(label, sizeof label, "%s [v%d ran v%d]", what, variant, kernel);
        la_test_expect_close(label, o, p, ATTN_TOL_ABS, ATTN_TOL_REL);
    }
    LA_CHECK_OK(la_cuda_attn_prefill_variant_set(p->be[1], 2, &err), err);
    LA_CHECK_OK(la_cuda_attn_lazy_ws_set(p->be[1], lazy_ws_mode, &err), err);
    /* attn_decode's in-kernel merge of split rows (LA_CUDA_FUSED_MERGE, on by default) against
     * attn_combine: bit-equal (the same la_attn_merge_row); the first of these runs also
     * shows that the earlier runs left every merge counter at zero */
    const uint32_t fused = la_cuda_fused_gemm(p->be[1]);
    float *out[2];
    for (int i = 0; i < 2; i++) {
        la_cuda_fused_gemm_set(p->be[1], i == 0 ? fused | LA_CUDA_FUSED_MERGE : fused & ~LA_CUDA_FUSED_MERGE);
        gpu_step(p, &b, layer, &k[1], kh, &v[1], &q[1], o);
        out[i] = la_test_read_act(p->be[1], &o[1]);
    }
    la_cuda_fused_gemm_set(p->be[1], fused);
    /* the packed decode instance (one item per warp) wherever no decode item is split */
    const int32_t packed_mode = la_cuda_attn_decode_packed(p->be[1]);
    LA_CHECK_OK(la_cuda_attn_decode_packed_set(p->be[1], LA_CUDA_DECODE_PACKED_ON, &err), err);
    gpu_step(p, &b, layer, &k[1], kh, &v[1], &q[1], o);
    la_test_case_packed = la_cuda_attn_decode_packed_ran(p->be[1]);
    if (la_test_case_packed) {
        char label[160];
        snprintf(label, sizeof label, "%s [decode packed]", what);
        la_test_expect_close(label, o, p, ATTN_TOL_ABS, ATTN_TOL_REL);
    }
    LA_CHECK_OK(la_cuda_attn_decode_packed_set(p->be[1], packed_mode, &err), err);
    const size_t n_out = (size_t)(o[1].n_rows * o[1].n_cols);
    size_t at = n_out;
    for (size_t i = 0; i < n_out && at == n_out; i++)
        if (memcmp(&out[0][i], &out[1][i], sizeof(float)) != 0) at = i;
    cr_assert(at == n_out, "%s: in-kernel decode merge differs from attn_combine at element %zu (%.6f vs %.6f)", what,
              at, at < n_out ? out[0][at] : 0.f, at < n_out ? out[1][at] : 0.f);
    free(out[0]);
    free(out[1]);
    inputs_close(p, &in);
    return ran;
}

/* Query rows of one sequence: n_q tokens at positions t0.., own K rotated there, in tail
 * blocks starting at first_block; appends the tail blocks to the sequence's view. */
void la_test_add_tail(la_test_builder *q, int32_t B, int32_t first_block, int32_t t0, int32_t n_q) {
    for (int32_t t = 0; t < n_q; t++) la_test_add_token(q, t0 + t, t0 + t, (int64_t)(first_block + t / B) * B + t % B);
    for (int32_t b = 0; b * B < n_q; b++)
        la_test_add_block(q, first_block + b, n_q - b * B < B ? n_q - b * B : B, t0 + b * B, 0, 0);
}

/* One plain causal sequence of n tokens at positions 0.. in blocks from first_block: the
 * first n_cached go to the cache batch, the rest are the query batch's rows (n_cached =
 * n - 1: a decode row). Returns the next free block. */
int32_t la_test_plain_seq(la_test_builder *cache, la_test_builder *q, int32_t B, int32_t first_block, int32_t n_cached, int32_t n) {
    const int32_t row0 = q->n, block0 = q->n_blocks;
    for (int32_t t = 0; t < n; t++) {
        const int64_t slot = (int64_t)(first_block + t / B) * B + t % B;
        la_test_add_token(t < n_cached ? cache : q, t, t, slot);
    }
    for (int32_t b = 0; b * B < n; b++) la_test_add_block(q, first_block + b, n - b * B < B ? n - b * B : B, b * B, 0, 0);
    la_test_add_seq(q, row0, n - n_cached, block0);
    return first_block + (n + B - 1) / B;
}


/* Documents of the given lengths cached alone (cache batch), then a question of n_q tokens
 * attending to all of them through the method's view; `base` offsets every logical
 * position (100k-token contexts). Returns the next free block. */
int32_t la_test_docs_case(la_test_builder *cache, la_test_builder *q, int32_t B, const int32_t *lens, int n_docs, int32_t n_q,
                         la_test_doc_method dm, int32_t base, int32_t first_block) {
    int32_t blk = first_block, S = base;
    int32_t row0 = q->n, block0 = q->n_blocks;
    for (int d = 0; d < n_docs; d++) {
        la_test_cache_doc(cache, B, blk, lens[d], dm == LA_TEST_DOC_MEPIC);
        for (int32_t i = 0; i * B < lens[d]; i++) {
            int32_t nv = lens[d] - i * B < B ? lens[d] - i * B : B;
            if (dm == LA_TEST_DOC_LAZY) la_test_add_block(q, blk + i, nv, S + i * B, S, 0);
            else la_test_add_block(q, blk + i, nv, S + i * B, 0, 1);
        }
        blk += (lens[d] + B - 1) / B;
        S += lens[d];
    }
    la_test_add_tail(q, B, blk, S, n_q);
    blk += (n_q + B - 1) / B;
    la_test_add_seq(q, row0, n_q, block0);
    return blk;
}


bool la_test_attn_open(la_test_pair *p, la_test_synth *s, la_test_geometry g) {
    la_test_synth_init(s, g.hidden, g.n_heads, g.n_kv, g.hd, 128, 100, 2);
    return la_test_pair_open(p, s, 4096, g.B);
}

void la_test_attn_close(la_test_pair *p, la_test_synth *s) {
    la_test_pair_close(p);
    la_test_synth_free(s);
}

bool la_test_shared_auto_packed;
bool la_test_case_packed;

la_cuda_attn_shared_stats la_test_attn_case_shared(la_test_pair *p, const char *what, la_test_builder *cache,
                                                   la_test_builder *query, int32_t layer, int64_t min_runs,
                                                   int auto_grouped) {
    la_err err = {0};
    attn_inputs in;
    inputs_open(p, &in, cache, query, layer);
    la_backend *g = p->be[1];
    const size_t n_out = (size_t)(in.o[1].n_rows * in.o[1].n_cols);
    const int32_t modes[3] = {LA_CUDA_ATTN_SHARED_OFF, LA_CUDA_ATTN_SHARED_ON, LA_CUDA_ATTN_SHARED_AUTO};
    const char *const names[3] = {"off", "on", "auto"};
    la_cuda_attn_shared_stats on_stats;
    memset(&on_stats, 0, sizeof on_stats);
    const int32_t first = la_cuda_attn_prefill_variant_set(g, 4, &err) == LA_OK ? 4 : 2;
    const int32_t lazy_ws_mode = la_cuda_attn_lazy_ws(g); /* v4 on the lazy own tiles too */
    LA_CHECK_OK(la_cuda_attn_lazy_ws_set(g, LA_CUDA_LAZY_WS_ON, &err), err);
    for (int32_t variant = first; variant >= 2; variant--) {
        LA_CHECK_OK(la_cuda_attn_prefill_variant_set(g, variant, &err), err);
        if (la_cuda_attn_prefill_kernel(g) != variant) continue; /* v3 / v4 at another head_dim: v2's run */
        float *out[2] = {NULL, NULL}; /* off, on */
        for (int mi = 0; mi < 3; mi++) {
            LA_CHECK_OK(la_cuda_attn_shared_set(g, modes[mi], &err), err);
            gpu_step(p, &in.b, layer, &in.k[1], in.kh, &in.v[1], &in.q[1], in.o);
            la_cuda_attn_shared_stats st;
            la_cuda_attn_shared_stats_get(g, &st);
            char label[200];
            snprintf(label, sizeof label, "%s [v%d, shared %s: %lld runs, %lld sharers, %lld items, keys %lld + %lld of %lld]",
                     what, variant, names[mi], (long long)st.runs, (long long)st.sharers, (long long)st.items,
                     (long long)st.keys_shared, (long long)st.keys_own, (long long)st.keys_per_seq);
            la_test_expect_close(label, in.o, p, ATTN_TOL_ABS, ATTN_TOL_REL);
            if (mi == 0) cr_assert_eq(st.runs, 0, "%s: shared off grouped %lld runs", what, (long long)st.runs);
            if (mi == 1) {
                cr_assert(st.runs >= min_runs, "%s: shared on grouped %lld runs, expected at least %lld", what,
                          (long long)st.runs, (long long)min_runs);
                cr_assert(st.keys_shared + st.keys_own < st.keys_per_seq || min_runs == 0,
                          "%s: grouped, yet reads %lld + %lld keys of %lld", what, (long long)st.keys_shared,
                          (long long)st.keys_own, (long long)st.keys_per_seq);
                on_stats = st;
            }
            if (mi == 2) la_test_shared_auto_packed = la_cuda_attn_decode_packed_ran(g);
            if (mi == 2 && auto_grouped >= 0)
                cr_assert_eq(st.runs > 0, auto_grouped == 1, "%s: shared auto grouped %lld runs", what, (long long)st.runs);
            if (mi < 2) out[mi] = la_test_read_act(g, &in.o[1]);
        }
        size_t at = 0;
        const double d = la_test_max_abs_diff(out[1], out[0], n_out, &at);
        double scale = 0;
        for (size_t i = 0; i < n_out; i++) scale = fmax(scale, fabs((double)out[0][i]));
        const double tol = ATTN_TOL_ABS + ATTN_TOL_REL * scale;
        printf("%-48s [v%d] max |shared on - off| = %.3g at [%zu, %zu], max |off| %.3g, tolerance %.3g\n", what,
               variant, d, at / (size_t)in.o[1].n_cols, at % (size_t)in.o[1].n_cols, scale, tol);
        fflush(stdout);
        cr_assert(d <= tol, "%s [v%d]: shared on differs from off by %.4g at row %zu col %zu (%.6f vs %.6f)", what,
                  variant, d, at / (size_t)in.o[1].n_cols, at % (size_t)in.o[1].n_cols, out[1][at], out[0][at]);
        free(out[0]);
        free(out[1]);
        /* shared on, the sharers' own tails through the packed decode instance */
        const int32_t packed_mode = la_cuda_attn_decode_packed(g);
        LA_CHECK_OK(la_cuda_attn_shared_set(g, LA_CUDA_ATTN_SHARED_ON, &err), err);
        LA_CHECK_OK(la_cuda_attn_decode_packed_set(g, LA_CUDA_DECODE_PACKED_ON, &err), err);
        gpu_step(p, &in.b, layer, &in.k[1], in.kh, &in.v[1], &in.q[1], in.o);
        if (la_cuda_attn_decode_packed_ran(g)) {
            char label[200];
            snprintf(label, sizeof label, "%s [v%d, shared on, decode packed]", what, variant);
            la_test_expect_close(label, in.o, p, ATTN_TOL_ABS, ATTN_TOL_REL);
        }
        LA_CHECK_OK(la_cuda_attn_decode_packed_set(g, packed_mode, &err), err);
    }
    LA_CHECK_OK(la_cuda_attn_prefill_variant_set(g, 2, &err), err);
    LA_CHECK_OK(la_cuda_attn_lazy_ws_set(g, lazy_ws_mode, &err), err);
    LA_CHECK_OK(la_cuda_attn_shared_set(g, LA_CUDA_ATTN_SHARED_AUTO, &err), err);
    inputs_close(p, &in);
    return on_stats;
}

#endif /* LA_HAVE_CUDA */
