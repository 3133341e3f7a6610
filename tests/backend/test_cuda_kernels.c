/* The CUDA backend's operations against the CPU backend (backend/cpu), one operation at a
 * time, on the same random inputs: a synthetic Llama-shaped model with random bf16 weights
 * (so both backends hold identical weights), random activations rounded to bf16 on the
 * host (so both read identical inputs), GPU outputs poisoned with NaN before each call
 * (an unwritten element fails the check). Attention cases cover causal prefill, lazy
 * (q_delta per document), mepic (k_rope), mixed decode + prefill batches, long contexts
 * that split over the KV length, 100k-token offsets, block sizes 16, 32 and 48, and the
 * head geometries of Llama-3-8B (head_dim 128, 4 query heads per KV head), Llama-3.2-1B
 * (head_dim 64), head_dim 72 and the tiny checkpoints (head_dim 16 and 24, MQA).
 *
 * Without a GPU every test prints "skipped: no GPU" and passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/dtype.h"
#include "common/test_util.h"
#include "engine/sampling.h"
#ifdef LA_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#endif

/* Tolerances (absolute, on values of order 1):
 * ROW_TOL_REL   element-wise ops and RMSNorm: one bf16 rounding of the output, 2^-8
 *               relative, measured against the largest reference magnitude.
 * GEMM_TOL_REL  x W^T: bf16 output rounding plus f32 accumulation in another order.
 * ATTN_TOL      attention outputs are convex combinations of V in [-1, 1]; the GPU rounds
 *               rotated q and k and the probabilities P to bf16 (2^-9 relative each), so
 *               scores move by ~1e-2 and outputs by a few 1e-3. */
#define ROW_TOL_REL 8e-3
#define GEMM_TOL_REL 1e-2
#define ATTN_TOL 2.5e-2
#define KV_TOL_REL 8e-3

#ifndef LA_HAVE_CUDA

Test(cuda_kernels, skipped_without_cuda) {
    printf("skipped: no GPU (this build has no CUDA backend)\n");
}

#else

/* ============================================================ synthetic model ======= */

typedef struct synth {
    la_model_config cfg;
    la_weights w;
    la_layer_weights *layers;
    la_st_tensor *t;
    int n_t;
} synth;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { /* [0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static float bf16_round(float x) { return la_bf16_to_f32(la_f32_to_bf16(x)); }

static la_st_tensor *synth_tensor(synth *s, int64_t rows, int64_t cols, float lo, float hi) {
    la_st_tensor *t = &s->t[s->n_t++];
    int64_t n = rows * cols;
    uint16_t *d = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) d[i] = la_f32_to_bf16((float)(lo + (hi - lo) * urand()));
    t->name = "synthetic";
    t->dtype = LA_DTYPE_BF16;
    t->n_dims = rows == 1 ? 1 : 2;
    t->shape[0] = rows == 1 ? cols : rows;
    t->shape[1] = rows == 1 ? 0 : cols;
    t->data = d;
    t->n_bytes = (size_t)n * 2;
    return t;
}

static void synth_init(synth *s, int hidden, int n_heads, int n_kv, int head_dim, int inter, int vocab,
                       int n_layers) {
    memset(s, 0, sizeof *s);
    la_model_config *c = &s->cfg;
    c->vocab_size = vocab;
    c->hidden_size = hidden;
    c->intermediate_size = inter;
    c->n_layers = n_layers;
    c->n_heads = n_heads;
    c->n_kv_heads = n_kv;
    c->head_dim = head_dim;
    c->rms_norm_eps = 1e-5;
    c->rope_theta = 500000.0;
    c->rope_scaling = (la_rope_scaling){LA_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192};
    c->max_position_embeddings = 131072;
    c->bos_id = -1;
    s->t = calloc((size_t)(3 + 9 * n_layers), sizeof(la_st_tensor));
    s->layers = calloc((size_t)n_layers, sizeof(la_layer_weights));
    int64_t qd = (int64_t)n_heads * head_dim, kvd = (int64_t)n_kv * head_dim;
    s->w.embed = synth_tensor(s, vocab, hidden, -1.f, 1.f);
    s->w.final_norm = synth_tensor(s, 1, hidden, 0.5f, 1.5f);
    s->w.lm_head = synth_tensor(s, vocab, hidden, -0.1f, 0.1f);
    for (int l = 0; l < n_layers; l++) {
        la_layer_weights *lw = &s->layers[l];
        lw->attn_norm = synth_tensor(s, 1, hidden, 0.5f, 1.5f);
        lw->wq = synth_tensor(s, qd, hidden, -0.1f, 0.1f);
        lw->wk = synth_tensor(s, kvd, hidden, -0.1f, 0.1f);
        lw->wv = synth_tensor(s, kvd, hidden, -0.1f, 0.1f);
        lw->wo = synth_tensor(s, hidden, qd, -0.1f, 0.1f);
        lw->mlp_norm = synth_tensor(s, 1, hidden, 0.5f, 1.5f);
        lw->w_gate = synth_tensor(s, inter, hidden, -0.1f, 0.1f);
        lw->w_up = synth_tensor(s, inter, hidden, -0.1f, 0.1f);
        lw->w_down = synth_tensor(s, hidden, inter, -0.1f, 0.1f);
    }
    s->w.n_layers = n_layers;
    s->w.layers = s->layers;
}

static void synth_free(synth *s) {
    for (int i = 0; i < s->n_t; i++) free((void *)s->t[i].data);
    free(s->t);
    free(s->layers);
}

/* ============================================================ CPU / GPU pair ======== */

typedef struct pair {
    la_backend *be[2]; /* [0] CPU reference, [1] CUDA */
    const la_model_config *cfg;
} pair;

/* Both backends with s's weights and a pool of n_blocks x B; false (the skip line printed,
 * s freed: the caller just returns) when there is no GPU. */
static bool pair_open(pair *p, synth *s, int64_t n_blocks, int32_t B) {
    la_err err = {0};
    memset(p, 0, sizeof *p);
    la_status st = la_backend_create(LA_DEVICE_CUDA, 0, &p->be[1], &err);
    if (st == LA_ERR_UNSUPPORTED) {
        printf("skipped: no GPU (%s)\n", err.msg);
        fflush(stdout);
        synth_free(s);
        return false;
    }
    LA_CHECK_OK(st, err);
    /* one operation at a time, each run as it is called (graphs record whole decode steps;
     * test_cuda_forward.c and test_cuda_fused_gemm.c test them) */
    la_cuda_graphs_enable(p->be[1], false);
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CPU, 2, &p->be[0], &err), err);
    for (int i = 0; i < 2; i++) {
        LA_CHECK_OK(p->be[i]->ops->load_weights(p->be[i], &s->cfg, &s->w, &err), err);
        LA_CHECK_OK(p->be[i]->ops->kv_alloc(p->be[i], n_blocks, B, &err), err);
    }
    p->cfg = &s->cfg;
    return true;
}

static void pair_close(pair *p) {
    la_backend_destroy(p->be[0]);
    la_backend_destroy(p->be[1]);
}

static void act_pair(pair *p, int64_t rows, int64_t cols, la_act a[2]) {
    la_err err = {0};
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p->be[i]->ops->act_alloc(p->be[i], rows, cols, &a[i], &err), err);
}

static void act_pair_free(pair *p, la_act a[2]) {
    for (int i = 0; i < 2; i++) p->be[i]->ops->act_free(p->be[i], &a[i]);
}

/* The same host values (rounded to bf16) into both activations. */
static void upload_pair(pair *p, la_act a[2], const float *host) {
    la_err err = {0};
    size_t n = (size_t)(a[0].n_rows * a[0].n_cols);
    memcpy(a[0].data, host, n * sizeof(float)); /* CPU activations are f32 host memory */
    LA_CHECK_OK(la_cuda_act_upload(p->be[1], &a[1], host, &err), err);
}

static float *random_host(size_t n, float lo, float hi) {
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = bf16_round((float)(lo + (hi - lo) * urand()));
    return h;
}

static void random_pair(pair *p, la_act a[2], float lo, float hi) {
    float *h = random_host((size_t)(a[0].n_rows * a[0].n_cols), lo, hi);
    upload_pair(p, a, h);
    free(h);
}

static void poison_gpu(pair *p, la_act a[2]) {
    size_t n = (size_t)(a[1].n_rows * a[1].n_cols);
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    la_err err = {0};
    LA_CHECK_OK(la_cuda_act_upload(p->be[1], &a[1], h, &err), err);
    free(h);
}

static float *read_act(la_backend *be, const la_act *a) {
    la_err err = {0};
    float *h = malloc((size_t)(a->n_rows * a->n_cols) * sizeof(float) + 1);
    LA_CHECK_OK(be->ops->to_host(be, a, h, &err), err);
    return h;
}

/* Fail unless max |gpu - cpu| <= tol_abs + tol_rel * max |cpu|; print the numbers either way. */
static void expect_close(const char *what, const la_act a[2], pair *p, double tol_abs, double tol_rel) {
    float *ref = read_act(p->be[0], &a[0]), *got = read_act(p->be[1], &a[1]);
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

typedef struct builder {
    int32_t n, cap;
    int32_t *tokens, *pos, *kpos;
    int64_t *slots;
    int32_t n_seqs;
    la_batch_seq seqs[64];
    int32_t n_blocks, cap_blocks;
    la_attn_block *blocks;
    int32_t rows[64];
} builder;

static void builder_init(builder *b) {
    memset(b, 0, sizeof *b);
    b->cap = 1 << 16;
    b->tokens = calloc((size_t)b->cap, 4);
    b->pos = calloc((size_t)b->cap, 4);
    b->kpos = calloc((size_t)b->cap, 4);
    b->slots = calloc((size_t)b->cap, 8);
    b->cap_blocks = 1 << 14;
    b->blocks = calloc((size_t)b->cap_blocks, sizeof(la_attn_block));
}

static void builder_free(builder *b) {
    free(b->tokens);
    free(b->pos);
    free(b->kpos);
    free(b->slots);
    free(b->blocks);
}

static void add_token(builder *b, int32_t pos, int32_t kpos, int64_t slot) {
    cr_assert(b->n < b->cap);
    b->tokens[b->n] = (int32_t)(urand() * 100);
    b->pos[b->n] = pos;
    b->kpos[b->n] = kpos;
    b->slots[b->n] = slot;
    b->n++;
}

static void add_block(builder *b, int32_t id, int32_t n_valid, int32_t pos0, int32_t q_delta, int32_t k_rope) {
    cr_assert(b->n_blocks < b->cap_blocks);
    b->blocks[b->n_blocks++] = (la_attn_block){id, n_valid, pos0, q_delta, k_rope};
}

static la_batch builder_batch(builder *b) {
    return (la_batch){b->n, b->tokens, b->pos, b->kpos, b->slots, b->n_seqs, b->seqs, b->n_blocks, b->blocks, 0,
                      b->rows};
}

/* A document of len tokens cached alone in blocks [first_block, ...): token i at local
 * position i, K rotated at i (lazy, block) or stored unrotated (mepic). */
static void cache_doc(builder *cache, int32_t B, int32_t first_block, int32_t len, bool unrotated) {
    for (int32_t i = 0; i < len; i++)
        add_token(cache, i, unrotated ? LA_POS_UNROTATED : i, (int64_t)(first_block + i / B) * B + i % B);
}

/* One GPU step of a case: the query batch's own K (host values kh, uploaded afresh: kv_write
 * rotates its k argument in place, so a second kv_write of the same activation would write
 * keys rotated twice) and V, then attention into o, poisoned first. */
static void gpu_step(pair *p, la_batch *b, int32_t layer, la_act *k, const float *kh, la_act *v, la_act *q,
                     la_act o[2]) {
    la_err err = {0};
    LA_CHECK_OK(la_cuda_act_upload(p->be[1], k, kh, &err), err);
    poison_gpu(p, o);
    LA_CHECK_OK(p->be[1]->ops->batch_begin(p->be[1], b, &err), err);
    LA_CHECK_OK(p->be[1]->ops->kv_write(p->be[1], layer, k, v, &err), err);
    LA_CHECK_OK(p->be[1]->ops->attention(p->be[1], layer, q, &o[1], &err), err);
}

/* Run one attention case on layer `layer`: write the cache batch's K/V, then the query
 * batch's own K/V, then attention; compare the outputs. The GPU runs the step once per
 * pair of attn_prefill variant (4 and 3: wgmma, 4 the default on a 9.0 GPU built for sm_90a,
 * head_dim 128; 2: mma.sync, 128 rows per CTA; 1: 64) and attn_decode variant (1: CUDA
 * cores, 2: tensor cores, the default) against the one CPU result, its
 * output poisoned and its K re-uploaded before each (kv_write rotates k in place: reusing
 * the activation wrote keys rotated twice into the second run). */
static uint32_t run_case(pair *p, const char *what, builder *cache, builder *query, int32_t layer) {
    const la_model_config *m = p->cfg;
    la_err err = {0};
    int64_t kvd = (int64_t)m->n_kv_heads * m->head_dim, qd = (int64_t)m->n_heads * m->head_dim;
    if (cache && cache->n > 0) {
        la_batch b = builder_batch(cache);
        la_act k[2], v[2];
        act_pair(p, cache->n, kvd, k);
        act_pair(p, cache->n, kvd, v);
        random_pair(p, k, -1.f, 1.f);
        random_pair(p, v, -1.f, 1.f);
        for (int i = 0; i < 2; i++) {
            LA_CHECK_OK(p->be[i]->ops->batch_begin(p->be[i], &b, &err), err);
            LA_CHECK_OK(p->be[i]->ops->kv_write(p->be[i], layer, &k[i], &v[i], &err), err);
        }
        act_pair_free(p, k);
        act_pair_free(p, v);
    }
    la_batch b = builder_batch(query);
    la_act k[2], v[2], q[2], o[2];
    act_pair(p, query->n, kvd, k);
    act_pair(p, query->n, kvd, v);
    act_pair(p, query->n, qd, q);
    act_pair(p, query->n, qd, o);
    float *kh = random_host((size_t)(k[0].n_rows * k[0].n_cols), -1.f, 1.f);
    upload_pair(p, k, kh);
    random_pair(p, v, -1.f, 1.f);
    random_pair(p, q, -3.f, 3.f); /* peakier softmax than [-1, 1] */
    LA_CHECK_OK(p->be[0]->ops->batch_begin(p->be[0], &b, &err), err);
    LA_CHECK_OK(p->be[0]->ops->kv_write(p->be[0], layer, &k[0], &v[0], &err), err);
    LA_CHECK_OK(p->be[0]->ops->attention(p->be[0], layer, &q[0], &o[0], &err), err);
    /* v4 and v3 (wgmma, head_dim 128 on a 9.0 GPU; elsewhere they run v2) where they exist,
     * then v2 and v1: a state one run leaves behind for the next would show in the later
     * ones. v4 runs plain steps only (no q_delta, no k_rope): under "v4" a lazy or mepic
     * case runs v3 */
    const int32_t first = la_cuda_attn_prefill_variant_set(p->be[1], 4, &err) == LA_OK ? 4 : 2;
    uint32_t ran = 0; /* bit k: attn_prefill kernel k ran a step (la_cuda_attn_prefill_kernel_ran) */
    for (int32_t variant = first; variant >= 1; variant--)
        for (int32_t dv = 2; dv >= 1; dv--) {
            LA_CHECK_OK(la_cuda_attn_prefill_variant_set(p->be[1], variant, &err), err);
            if (la_cuda_attn_prefill_kernel(p->be[1]) != variant) continue; /* v3 at hd != 128: v2's run */
            LA_CHECK_OK(la_cuda_attn_decode_variant_set(p->be[1], dv, &err), err);
            gpu_step(p, &b, layer, &k[1], kh, &v[1], &q[1], o);
            const int32_t kernel = la_cuda_attn_prefill_kernel_ran(p->be[1]);
            ran |= 1u << kernel;
            char label[160];
            snprintf(label, sizeof label, "%s [v%d ran v%d, decode v%d]", what, variant, kernel, dv);
            expect_close(label, o, p, ATTN_TOL, 0);
        }
    LA_CHECK_OK(la_cuda_attn_prefill_variant_set(p->be[1], 2, &err), err);
    LA_CHECK_OK(la_cuda_attn_decode_variant_set(p->be[1], 2, &err), err);
    /* decode v2's in-kernel merge of split rows (LA_CUDA_FUSED_MERGE, on by default) against
     * attn_combine: bit-equal (the same la_attn_merge_row); the first of these runs also
     * shows that the earlier runs left every merge counter at zero */
    const uint32_t fused = la_cuda_fused_gemm(p->be[1]);
    float *out[2];
    for (int i = 0; i < 2; i++) {
        la_cuda_fused_gemm_set(p->be[1], i == 0 ? fused | LA_CUDA_FUSED_MERGE : fused & ~LA_CUDA_FUSED_MERGE);
        gpu_step(p, &b, layer, &k[1], kh, &v[1], &q[1], o);
        out[i] = read_act(p->be[1], &o[1]);
    }
    la_cuda_fused_gemm_set(p->be[1], fused);
    const size_t n_out = (size_t)(o[1].n_rows * o[1].n_cols);
    size_t at = n_out;
    for (size_t i = 0; i < n_out && at == n_out; i++)
        if (memcmp(&out[0][i], &out[1][i], sizeof(float)) != 0) at = i;
    cr_assert(at == n_out, "%s: in-kernel decode merge differs from attn_combine at element %zu (%.6f vs %.6f)", what,
              at, at < n_out ? out[0][at] : 0.f, at < n_out ? out[1][at] : 0.f);
    free(out[0]);
    free(out[1]);
    free(kh);
    act_pair_free(p, k);
    act_pair_free(p, v);
    act_pair_free(p, q);
    act_pair_free(p, o);
    return ran;
}

/* Query rows of one sequence: n_q tokens at positions t0.., own K rotated there, in tail
 * blocks starting at first_block; appends the tail blocks to the sequence's view. */
static void add_tail(builder *q, int32_t B, int32_t first_block, int32_t t0, int32_t n_q) {
    for (int32_t t = 0; t < n_q; t++) add_token(q, t0 + t, t0 + t, (int64_t)(first_block + t / B) * B + t % B);
    for (int32_t b = 0; b * B < n_q; b++)
        add_block(q, first_block + b, n_q - b * B < B ? n_q - b * B : B, t0 + b * B, 0, 0);
}

/* One plain causal sequence of n tokens at positions 0.. in blocks from first_block: the
 * first n_cached go to the cache batch, the rest are the query batch's rows (n_cached =
 * n - 1: a decode row). Returns the next free block. */
static int32_t plain_seq(builder *cache, builder *q, int32_t B, int32_t first_block, int32_t n_cached, int32_t n) {
    const int32_t row0 = q->n, block0 = q->n_blocks;
    for (int32_t t = 0; t < n; t++) {
        const int64_t slot = (int64_t)(first_block + t / B) * B + t % B;
        add_token(t < n_cached ? cache : q, t, t, slot);
    }
    for (int32_t b = 0; b * B < n; b++) add_block(q, first_block + b, n - b * B < B ? n - b * B : B, b * B, 0, 0);
    q->seqs[q->n_seqs++] = (la_batch_seq){row0, n - n_cached, block0, q->n_blocks - block0};
    return first_block + (n + B - 1) / B;
}

typedef enum doc_method { DOC_LAZY, DOC_MEPIC } doc_method;

/* Documents of the given lengths cached alone (cache batch), then a question of n_q tokens
 * attending to all of them through the method's view; `base` offsets every logical
 * position (100k-token contexts). Returns the next free block. */
static int32_t docs_case(builder *cache, builder *q, int32_t B, const int32_t *lens, int n_docs, int32_t n_q,
                         doc_method dm, int32_t base, int32_t first_block) {
    int32_t blk = first_block, S = base;
    int32_t row0 = q->n, block0 = q->n_blocks;
    for (int d = 0; d < n_docs; d++) {
        cache_doc(cache, B, blk, lens[d], dm == DOC_MEPIC);
        for (int32_t i = 0; i * B < lens[d]; i++) {
            int32_t nv = lens[d] - i * B < B ? lens[d] - i * B : B;
            if (dm == DOC_LAZY) add_block(q, blk + i, nv, S + i * B, S, 0);
            else add_block(q, blk + i, nv, S + i * B, 0, 1);
        }
        blk += (lens[d] + B - 1) / B;
        S += lens[d];
    }
    add_tail(q, B, blk, S, n_q);
    blk += (n_q + B - 1) / B;
    q->seqs[q->n_seqs++] = (la_batch_seq){row0, n_q, block0, q->n_blocks - block0};
    return blk;
}

/* ============================================================ tests: row ops ======== */

static void row_ops(int hidden, int n_heads, int n_kv, int hd, int inter, int vocab) {
    synth s;
    synth_init(&s, hidden, n_heads, n_kv, hd, inter, vocab, 2);
    pair p;
    if (!pair_open(&p, &s, 64, 16)) return;
    la_err err = {0};
    const int32_t n = 37;
    builder b;
    builder_init(&b);
    for (int32_t t = 0; t < n; t++) add_token(&b, t, t, t);
    for (int32_t t = 0; t < n; t++) b.tokens[t] = (int32_t)(urand() * vocab);
    int32_t logit_rows[3] = {0, 17, n - 1};
    la_batch batch = builder_batch(&b);
    batch.n_logit_rows = 3;
    batch.logit_rows = logit_rows;
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->batch_begin(p.be[i], &batch, &err), err);

    la_act x[2], h[2];
    act_pair(&p, n, hidden, x);
    act_pair(&p, n, hidden, h);
    poison_gpu(&p, x);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->embed(p.be[i], &x[i], &err), err);
    expect_close("embed", x, &p, 0, 0);

    random_pair(&p, x, -2.f, 2.f);
    poison_gpu(&p, h);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->rmsnorm(p.be[i], &x[i], LA_W_MLP_NORM, 1, &h[i], &err), err);
    expect_close("rmsnorm (mlp_norm, layer 1)", h, &p, 0, ROW_TOL_REL);

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
        act_pair(&p, n, mm[i].in, in);
        act_pair(&p, n, mm[i].out, out);
        random_pair(&p, in, -1.f, 1.f);
        poison_gpu(&p, out);
        for (int j = 0; j < 2; j++) LA_CHECK_OK(p.be[j]->ops->matmul(p.be[j], &in[j], mm[i].k, 1, &out[j], &err), err);
        expect_close(mm[i].name, out, &p, 0, GEMM_TOL_REL);
        act_pair_free(&p, in);
        act_pair_free(&p, out);
    }

    la_act g[2], u[2];
    act_pair(&p, n, inter, g);
    act_pair(&p, n, inter, u);
    random_pair(&p, g, -4.f, 4.f);
    random_pair(&p, u, -2.f, 2.f);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->swiglu(p.be[i], &g[i], &u[i], &err), err);
    expect_close("swiglu", g, &p, 0, ROW_TOL_REL);

    random_pair(&p, x, -2.f, 2.f);
    random_pair(&p, h, -2.f, 2.f);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->add(p.be[i], &x[i], &h[i], &err), err);
    expect_close("add", x, &p, 0, ROW_TOL_REL);

    /* the fused residual add + next norm (GPU) against add then rmsnorm (CPU): both the
     * stored sum and the norm; out aliases y, as forward.c calls it */
    random_pair(&p, x, -2.f, 2.f);
    random_pair(&p, h, -2.f, 2.f);
    cr_assert_null(p.be[0]->ops->add_rmsnorm);
    LA_CHECK_OK(p.be[0]->ops->add(p.be[0], &x[0], &h[0], &err), err);
    LA_CHECK_OK(p.be[0]->ops->rmsnorm(p.be[0], &x[0], LA_W_ATTN_NORM, 1, &h[0], &err), err);
    LA_CHECK_OK(p.be[1]->ops->add_rmsnorm(p.be[1], &x[1], &h[1], LA_W_ATTN_NORM, 1, &h[1], &err), err);
    expect_close("add_rmsnorm: x + y", x, &p, 0, ROW_TOL_REL);
    expect_close("add_rmsnorm: RMSNorm(x + y)", h, &p, 0, 2 * ROW_TOL_REL);

    /* gate_up_swiglu (GPU, one GEMM by the stacked weights, SwiGLU from its output) against
     * the CPU's two matmuls and swiglu */
    la_act up2[2];
    act_pair(&p, n, inter, up2);
    random_pair(&p, h, -1.f, 1.f);
    poison_gpu(&p, g);
    cr_assert_null(p.be[0]->ops->gate_up_swiglu);
    LA_CHECK_OK(p.be[0]->ops->matmul(p.be[0], &h[0], LA_W_GATE, 1, &g[0], &err), err);
    LA_CHECK_OK(p.be[0]->ops->matmul(p.be[0], &h[0], LA_W_UP, 1, &up2[0], &err), err);
    LA_CHECK_OK(p.be[0]->ops->swiglu(p.be[0], &g[0], &up2[0], &err), err);
    LA_CHECK_OK(p.be[1]->ops->gate_up_swiglu(p.be[1], &h[1], 1, &g[1], &up2[1], &err), err);
    expect_close("gate_up_swiglu", g, &p, 0, 2 * GEMM_TOL_REL);
    act_pair_free(&p, up2);

    la_act last[2], norm[2];
    act_pair(&p, 3, hidden, last);
    act_pair(&p, 3, hidden, norm);
    random_pair(&p, x, -2.f, 2.f); /* identical rows on both sides: the gather is exact */
    poison_gpu(&p, last);
    for (int i = 0; i < 2; i++) LA_CHECK_OK(p.be[i]->ops->gather_rows(p.be[i], &x[i], &last[i], &err), err);
    expect_close("gather_rows", last, &p, 0, 0);
    for (int i = 0; i < 2; i++)
        LA_CHECK_OK(p.be[i]->ops->rmsnorm(p.be[i], &last[i], LA_W_FINAL_NORM, 0, &norm[i], &err), err);
    expect_close("rmsnorm (final_norm)", norm, &p, 0, ROW_TOL_REL);

    act_pair_free(&p, x);
    act_pair_free(&p, h);
    act_pair_free(&p, g);
    act_pair_free(&p, u);
    act_pair_free(&p, last);
    act_pair_free(&p, norm);
    builder_free(&b);
    pair_close(&p);
    synth_free(&s);
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
    synth s;
    synth_init(&s, 64, 4, 1, 16, 128, 512, 1);
    pair p;
    if (!pair_open(&p, &s, 8, 16)) return;
    la_err err = {0};
    const int32_t widths[2] = {128256, 1003}, R = 8;
    for (int wi = 0; wi < 2; wi++) {
        const int32_t w = widths[wi];
        float *h = random_host((size_t)R * w, -8.f, 8.f);
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
    pair_close(&p);
    synth_free(&s);
}

Test(cuda_kernels, bad_token_id_is_invalid_arg) {
    synth s;
    synth_init(&s, 64, 4, 2, 16, 128, 100, 1);
    pair p;
    if (!pair_open(&p, &s, 8, 16)) return;
    builder b;
    builder_init(&b);
    add_token(&b, 0, 0, 0);
    add_token(&b, 1, 1, 1);
    b.tokens[1] = 100; /* == vocab_size */
    la_batch batch = builder_batch(&b);
    la_err err = {0};
    LA_CHECK_OK(p.be[1]->ops->batch_begin(p.be[1], &batch, &err), err);
    la_act x;
    LA_CHECK_OK(p.be[1]->ops->act_alloc(p.be[1], 2, 64, &x, &err), err);
    la_status st = p.be[1]->ops->embed(p.be[1], &x, &err);
    cr_assert_eq(st, LA_ERR_INVALID_ARG, "embed of token 100 with vocab 100: %s", la_status_name(st));
    cr_assert(strstr(err.msg, "100") != NULL, "message names the token: %s", err.msg);
    p.be[1]->ops->act_free(p.be[1], &x);
    builder_free(&b);
    pair_close(&p);
    synth_free(&s);
}

Test(cuda_kernels, block_size_not_a_multiple_of_16_is_unsupported) {
    synth s;
    synth_init(&s, 64, 4, 2, 16, 128, 100, 1);
    la_backend *be = NULL;
    la_err err = {0};
    la_status st = la_backend_create(LA_DEVICE_CUDA, 0, &be, &err);
    if (st == LA_ERR_UNSUPPORTED) {
        printf("skipped: no GPU (%s)\n", err.msg);
        synth_free(&s);
        return;
    }
    LA_CHECK_OK(st, err);
    LA_CHECK_OK(be->ops->load_weights(be, &s.cfg, &s.w, &err), err);
    st = be->ops->kv_alloc(be, 16, 8, &err);
    cr_assert_eq(st, LA_ERR_UNSUPPORTED, "block_size 8: %s (%s)", la_status_name(st), err.msg);
    LA_CHECK_OK(be->ops->kv_alloc(be, 16, 32, &err), err);
    la_backend_destroy(be);
    synth_free(&s);
}

/* ============================================================ tests: KV ============= */

Test(cuda_kernels, kv_write_and_copy_rotate_match_cpu) {
    synth s;
    synth_init(&s, 256, 8, 2, 128, 256, 100, 2);
    pair p;
    const int32_t B = 16;
    if (!pair_open(&p, &s, 64, B)) return;
    la_err err = {0};
    const la_model_config *m = p.cfg;
    int64_t kvd = (int64_t)m->n_kv_heads * m->head_dim;
    builder b;
    builder_init(&b);
    /* 40 tokens in blocks 0..2: rotated at small, 100k and unrotated positions */
    for (int32_t t = 0; t < 40; t++)
        add_token(&b, t, t % 3 == 0 ? 100000 + t : (t % 3 == 1 ? t : LA_POS_UNROTATED), t);
    la_batch batch = builder_batch(&b);
    la_act k[2], v[2];
    act_pair(&p, b.n, kvd, k);
    act_pair(&p, b.n, kvd, v);
    random_pair(&p, k, -1.f, 1.f);
    random_pair(&p, v, -1.f, 1.f);
    for (int i = 0; i < 2; i++) {
        LA_CHECK_OK(p.be[i]->ops->batch_begin(p.be[i], &batch, &err), err);
        LA_CHECK_OK(p.be[i]->ops->kv_write(p.be[i], 1, &k[i], &v[i], &err), err);
    }
    expect_close("kv_write: K rotated in place", k, &p, 0, KV_TOL_REL);
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
    for (int i = 0; i < 2; i++) {
        free(kr[i]);
        free(vr[i]);
    }
    act_pair_free(&p, k);
    act_pair_free(&p, v);
    builder_free(&b);
    pair_close(&p);
    synth_free(&s);
}

/* qkv_kv_write on the GPU, fused (one kernel from the QKV GEMM's output) and with that
 * fusion off (matmul_group, split, kv_write), one after the other on the same layer and
 * slots: q, k, v and every pool slot bit-equal; and against the CPU's three matmuls and
 * kv_write within the GEMM and KV tolerances. 40 rows rotated at small and 100k positions
 * and stored unrotated (mepic). */
static void qkv_kv_write_case(int hidden, int n_heads, int n_kv, int hd) {
    synth s;
    synth_init(&s, hidden, n_heads, n_kv, hd, 128, 100, 2);
    pair p;
    const int32_t B = 16;
    if (!pair_open(&p, &s, 8, B)) return;
    la_err err = {0};
    const int64_t kvd = (int64_t)n_kv * hd, qd = (int64_t)n_heads * hd;
    builder b;
    builder_init(&b);
    for (int32_t t = 0; t < 40; t++)
        add_token(&b, t, t % 3 == 0 ? 100000 + t : (t % 3 == 1 ? t : LA_POS_UNROTATED), t);
    la_batch batch = builder_batch(&b);
    la_act x[2], q[2], k[2], v[2], q2, k2, v2;
    act_pair(&p, b.n, hidden, x);
    random_pair(&p, x, -1.f, 1.f);
    act_pair(&p, b.n, qd, q);
    act_pair(&p, b.n, kvd, k);
    act_pair(&p, b.n, kvd, v);
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
        float *a = read_act(g, fa[i]), *c = read_act(g, ua[i]);
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
    expect_close(what, q, &p, 0, GEMM_TOL_REL);
    snprintf(what, sizeof what, "qkv_kv_write hd %d: k (rotated)", hd);
    expect_close(what, k, &p, 0, GEMM_TOL_REL + KV_TOL_REL);
    snprintf(what, sizeof what, "qkv_kv_write hd %d: v", hd);
    expect_close(what, v, &p, 0, GEMM_TOL_REL);
    free(pool[0]);
    free(pool[1]);
    g->ops->act_free(g, &q2);
    g->ops->act_free(g, &k2);
    g->ops->act_free(g, &v2);
    act_pair_free(&p, x);
    act_pair_free(&p, q);
    act_pair_free(&p, k);
    act_pair_free(&p, v);
    builder_free(&b);
    pair_close(&p);
    synth_free(&s);
}

Test(cuda_kernels, qkv_kv_write_fused_equals_split_and_kv_write) {
    qkv_kv_write_case(256, 8, 2, 128); /* Llama-3's head geometry */
    qkv_kv_write_case(192, 6, 3, 72);  /* head_dim 72, 3 KV heads */
    qkv_kv_write_case(64, 4, 1, 16);   /* MQA, head_dim 16 */
}

/* ============================================================ tests: attention ====== */

typedef struct geometry {
    int hidden, n_heads, n_kv, hd;
    int32_t B;
} geometry;

static bool attn_open(pair *p, synth *s, geometry g) {
    synth_init(s, g.hidden, g.n_heads, g.n_kv, g.hd, 128, 100, 2);
    return pair_open(p, s, 4096, g.B);
}

static void attn_close(pair *p, synth *s) {
    pair_close(p);
    synth_free(s);
}

static void causal_prefill(geometry g, int32_t n, const char *what) {
    pair p;
    synth s;
    if (!attn_open(&p, &s, g)) return;
    builder q;
    builder_init(&q);
    add_tail(&q, g.B, 3, 0, n);
    q.seqs[q.n_seqs++] = (la_batch_seq){0, n, 0, q.n_blocks};
    run_case(&p, what, NULL, &q, 1);
    builder_free(&q);
    attn_close(&p, &s);
}

Test(cuda_attention, causal_prefill_llama8b_geometry) {
    causal_prefill((geometry){512, 8, 2, 128, 16}, 300, "causal prefill 300 tokens, hd 128, GQA 4");
}
Test(cuda_attention, causal_prefill_llama1b_geometry_block32) {
    causal_prefill((geometry){512, 16, 2, 64, 32}, 123, "causal prefill 123 tokens, hd 64, GQA 8, B 32");
}
/* a block size that is not a power of two: the kernels' slot-in-block arithmetic takes
 * its division path */
Test(cuda_attention, causal_prefill_block48) {
    causal_prefill((geometry){512, 8, 2, 128, 48}, 200, "causal prefill 200 tokens, hd 128, GQA 4, B 48");
}
Test(cuda_attention, causal_prefill_tiny_geometries) {
    causal_prefill((geometry){64, 4, 1, 24, 16}, 50, "causal prefill 50 tokens, hd 24, MQA 4");
    causal_prefill((geometry){64, 4, 2, 16, 16}, 70, "causal prefill 70 tokens, hd 16, GQA 2");
    causal_prefill((geometry){64, 4, 4, 16, 16}, 90, "causal prefill 90 tokens, hd 16, MHA");
    causal_prefill((geometry){64, 3, 1, 16, 16}, 40, "causal prefill 40 tokens, hd 16, 3 heads per KV");
}

static void docs_question(geometry g, doc_method dm, int32_t base, int32_t n_q, const char *what) {
    pair p;
    synth s;
    if (!attn_open(&p, &s, g)) return;
    builder cache, q;
    builder_init(&cache);
    builder_init(&q);
    const int32_t lens[] = {37, 16, 100, 5, 1, 250, 17};
    docs_case(&cache, &q, g.B, lens, 7, n_q, dm, base, 10);
    run_case(&p, what, &cache, &q, 0);
    builder_free(&cache);
    builder_free(&q);
    attn_close(&p, &s);
}

Test(cuda_attention, lazy_question_over_documents) {
    docs_question((geometry){512, 8, 2, 128, 16}, DOC_LAZY, 0, 64, "lazy: 7 documents, 64-token question");
    docs_question((geometry){512, 8, 2, 128, 16}, DOC_LAZY, 0, 1, "lazy: 7 documents, decode row");
}
Test(cuda_attention, mepic_question_over_documents) {
    docs_question((geometry){512, 8, 2, 128, 16}, DOC_MEPIC, 0, 64, "mepic: 7 documents, 64-token question");
    docs_question((geometry){512, 8, 2, 128, 16}, DOC_MEPIC, 0, 1, "mepic: 7 documents, decode row");
}
Test(cuda_attention, lazy_and_mepic_at_100k_offsets) {
    docs_question((geometry){512, 8, 2, 128, 16}, DOC_LAZY, 100000, 20, "lazy at +100000: 20-token question");
    docs_question((geometry){512, 8, 2, 128, 16}, DOC_MEPIC, 100000, 1, "mepic at +100000: decode row");
    docs_question((geometry){512, 16, 2, 64, 32}, DOC_LAZY, 120000, 33, "lazy at +120000, hd 64, B 32");
}
/* head_dim 72: not a power of two, so the mma.sync kernels (prefill v2, v1, decode) run
 * their 128-wide instances with zero-padded columns (v3 is for 128 only) */
Test(cuda_attention, lazy_head_dim_72) {
    docs_question((geometry){512, 8, 2, 72, 16}, DOC_LAZY, 0, 40, "lazy, hd 72: 40-token question");
    docs_question((geometry){512, 8, 2, 72, 16}, DOC_LAZY, 0, 1, "lazy, hd 72: decode row");
}
/* block size 48 (not a power of two) under both document methods */
Test(cuda_attention, lazy_and_mepic_block48) {
    docs_question((geometry){512, 8, 2, 128, 48}, DOC_LAZY, 0, 64, "lazy, B 48: 7 documents, 64-token question");
    docs_question((geometry){512, 8, 2, 128, 48}, DOC_MEPIC, 0, 64, "mepic, B 48: 7 documents, 64-token question");
    docs_question((geometry){512, 8, 2, 128, 48}, DOC_LAZY, 0, 1, "lazy, B 48: decode row");
}

/* lazy, block size 16: the sequence's first key tile is a document placed after the
 * question (logical positions 1000.., seen by no row: the kernels skip the tile before
 * any rotation), and the second straddles two documents with different q_delta (one
 * block of A at 0.., three of B at 16..), so prefill v3 rotates Q for the first time
 * inside its group-by-group path (its `!have_q` branch), v2 in its per-group rotation. */
Test(cuda_attention, lazy_straddling_tile_after_an_unseen_one) {
    const geometry g = {512, 8, 2, 128, 16};
    pair p;
    synth s;
    if (!attn_open(&p, &s, g)) return;
    builder cache, q;
    builder_init(&cache);
    builder_init(&q);
    const int32_t B = g.B, n_q = 40, row0 = q.n, block0 = q.n_blocks;
    int32_t blk = 10;
    /* X: 64 tokens at logical 1000.., seen by no row, so its q_delta never applies (0: the
     * CPU backend requires p - q_delta >= 0 for every row) */
    cache_doc(&cache, B, blk, 64, false);
    for (int32_t i = 0; i < 4; i++) add_block(&q, blk + i, B, 1000 + i * B, 0, 0);
    blk += 4;
    cache_doc(&cache, B, blk, 16, false); /* A: 16 tokens, logical 0.. */
    add_block(&q, blk, B, 0, 0, 0);
    blk += 1;
    cache_doc(&cache, B, blk, 48, false); /* B: 48 tokens, logical 16.. */
    for (int32_t i = 0; i < 3; i++) add_block(&q, blk + i, B, 16 + i * B, 16, 0);
    blk += 3;
    add_tail(&q, B, blk, 64, n_q);
    q.seqs[q.n_seqs++] = (la_batch_seq){row0, n_q, block0, q.n_blocks - block0};
    run_case(&p, "lazy: an unseen first tile, then one straddling two documents", &cache, &q, 0);
    builder_free(&cache);
    builder_free(&q);
    attn_close(&p, &s);
}

Test(cuda_attention, lazy_tiny_geometries) {
    docs_question((geometry){64, 4, 1, 24, 16}, DOC_LAZY, 0, 9, "lazy, hd 24 MQA: 9-token question");
    docs_question((geometry){64, 4, 2, 16, 16}, DOC_MEPIC, 0, 1, "mepic, hd 16: decode row");
}

/* A step of continuous batching: three decode rows with contexts of 10, 700 and 3000
 * tokens (the last splits over its KV length), a 40-token prefill chunk whose earlier
 * 200 tokens are cached, and a lazy question, all in one batch. */
Test(cuda_attention, mixed_decode_and_prefill_batch) {
    geometry g = {512, 8, 2, 128, 16};
    pair p;
    synth s;
    if (!attn_open(&p, &s, g)) return;
    builder cache, q;
    builder_init(&cache);
    builder_init(&q);
    int32_t blk = 1;
    const int32_t ctx[3] = {10, 700, 3000};
    for (int i = 0; i < 3; i++) blk = plain_seq(&cache, &q, g.B, blk, ctx[i] - 1, ctx[i]);
    blk = plain_seq(&cache, &q, g.B, blk, 200, 240); /* prefill chunk: tokens 200..239, 0..199 cached */
    const int32_t lens[] = {30, 64, 9};
    docs_case(&cache, &q, g.B, lens, 3, 25, DOC_LAZY, 0, blk);
    run_case(&p, "mixed batch: 3 decode rows, prefill chunk, lazy question", &cache, &q, 1);
    builder_free(&cache);
    builder_free(&q);
    attn_close(&p, &s);
}

/* A 64-token question against 6000 cached tokens: few query tiles, so the prefill kernel
 * splits over the KV length and attn_combine merges the partials. */
/* split_ctas: LA_ATTN_SPLIT_CTAS for the GPU backend (NULL: unset, the default 2 CTAs
 * per SM): another split target gives other split counts and chunk boundaries. */
static void long_context_question(const char *split_ctas) {
    geometry g = {512, 8, 2, 128, 16};
    pair p;
    synth s;
    if (split_ctas) setenv("LA_ATTN_SPLIT_CTAS", split_ctas, 1);
    bool open = attn_open(&p, &s, g);
    unsetenv("LA_ATTN_SPLIT_CTAS");
    if (!open) return;
    builder cache, q;
    builder_init(&cache);
    builder_init(&q);
    const int32_t lens[] = {1500, 1499, 1501, 1000, 500};
    docs_case(&cache, &q, g.B, lens, 5, 64, DOC_LAZY, 0, 1);
    char what[96];
    snprintf(what, sizeof what, "lazy: 6000 cached tokens, 64-token question, LA_ATTN_SPLIT_CTAS=%s",
             split_ctas ? split_ctas : "(unset)");
    run_case(&p, what, &cache, &q, 0);
    builder_free(&cache);
    builder_free(&q);
    attn_close(&p, &s);
}

Test(cuda_attention, long_context_question_splits_over_kv) { long_context_question(NULL); }
Test(cuda_attention, long_context_question_other_split_targets) {
    long_context_question("1");
    long_context_question("16");
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
    geometry g = {96, 6, 2, 16, 16};
    for (int gi = 0; gi < 2; gi++) {
        if (gi == 1) g = (geometry){768, 6, 2, 128, 16};
        pair p;
        synth s;
        if (!attn_open(&p, &s, g)) return;
        builder cache, q;
        builder_init(&cache);
        builder_init(&q);
        int32_t blk = 1;
        const int32_t lens[3] = {45, 130, 77};
        for (int i = 0; i < 3; i++) {
            add_tail(&q, g.B, blk, 0, lens[i]);
            q.seqs[q.n_seqs++] = (la_batch_seq){q.n - lens[i], lens[i], q.n_blocks - (lens[i] + g.B - 1) / g.B,
                                                (lens[i] + g.B - 1) / g.B};
            blk += (lens[i] + g.B - 1) / g.B;
        }
        /* tokens 90..162 of a sequence whose first 90 are cached (last block: 3 of 16 slots) */
        blk = plain_seq(&cache, &q, g.B, blk, 90, 163);
        const int32_t dl[] = {21, 3, 40, 16, 70};
        docs_case(&cache, &q, g.B, dl, 5, 150, DOC_LAZY, 0, blk);
        run_case(&p, gi == 0 ? "ragged prefills + 150-token lazy question, hd 16 hpc 3"
                             : "ragged prefills + 150-token lazy question, hd 128 hpc 3", &cache, &q, 1);
        builder_free(&cache);
        builder_free(&q);
        attn_close(&p, &s);
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
Test(cuda_attention, plain_prefills_and_prefix_question_hd128) {
    const geometry gs[3] = {{768, 6, 2, 128, 16}, {512, 8, 2, 128, 48}, {2048, 16, 8, 128, 16}};
    for (int gi = 0; gi < 3; gi++) {
        const geometry g = gs[gi];
        pair p;
        synth s;
        if (!attn_open(&p, &s, g)) return;
        builder cache, q;
        builder_init(&cache);
        builder_init(&q);
        char what[128];
        if (gi < 2) {
            int32_t blk = 1;
            const int32_t lens[3] = {45, 300, 77};
            for (int i = 0; i < 3; i++) blk = plain_seq(&cache, &q, g.B, blk, 0, lens[i]);
            blk = plain_seq(&cache, &q, g.B, blk, 90, 163);
            plain_seq(&cache, &q, g.B, blk, 2000, 2064);
            snprintf(what, sizeof what, "plain: ragged prefills, chunk, prefix question; hd 128 hpc %d B %d",
                     g.n_heads / g.n_kv, g.B);
        } else {
            plain_seq(&cache, &q, g.B, 1, 0, 2500);
            snprintf(what, sizeof what, "plain: 2500-token prefill; hd 128, 8 KV heads");
        }
        const uint32_t ran = run_case(&p, what, &cache, &q, 1);
        la_err err = {0};
        if (la_cuda_attn_prefill_variant_set(p.be[1], 4, &err) == LA_OK)
            cr_assert(ran & (1u << 4), "%s: attn_prefill v4 never ran (kernels 0x%x)", what, ran);
        builder_free(&cache);
        builder_free(&q);
        attn_close(&p, &s);
    }
}

/* The same 150-token question over mepic documents at a 100k offset, hd 64 (8 query heads
 * per KV head: 16 tokens per v2 CTA), block size 32. */
Test(cuda_attention, mepic_long_question_hd64) {
    docs_question((geometry){512, 16, 2, 64, 32}, DOC_MEPIC, 100000, 150, "mepic at +100000: 150-token question, hd 64");
}

/* Decode rows of sequences with very different contexts in one batch: 1 token (its own
 * key only), 17 (one lazy document of 16), 700 (three mepic documents, keys rotated in
 * shared memory) and 5000 (three lazy documents at a 100k offset, split over the KV
 * length and combined), plus a plain causal 2000-token decode row; hd 64 with 3 query
 * heads per KV head (rows 3..15 of the decode v2 m16 tile are padding). Each v2 warp's
 * share of a short item may be empty or end mid-document. */
Test(cuda_attention, decode_rows_of_very_different_lengths) {
    geometry g = {384, 6, 2, 64, 16};
    pair p;
    synth s;
    if (!attn_open(&p, &s, g)) return;
    builder cache, q;
    builder_init(&cache);
    builder_init(&q);
    int32_t blk = 1;
    blk = docs_case(&cache, &q, g.B, NULL, 0, 1, DOC_LAZY, 0, blk);
    const int32_t l17[] = {16};
    blk = docs_case(&cache, &q, g.B, l17, 1, 1, DOC_LAZY, 0, blk);
    const int32_t l700[] = {300, 199, 200};
    blk = docs_case(&cache, &q, g.B, l700, 3, 1, DOC_MEPIC, 0, blk);
    const int32_t l5000[] = {1500, 1000, 2499};
    blk = docs_case(&cache, &q, g.B, l5000, 3, 1, DOC_LAZY, 100000, blk);
    blk = plain_seq(&cache, &q, g.B, blk, 1999, 2000); /* a plain 2000-token sequence's decode row */
    run_case(&p, "decode rows of 1, 17, 700, 5000, 2000 tokens, hd 64 hpc 3", &cache, &q, 1);
    builder_free(&cache);
    builder_free(&q);
    attn_close(&p, &s);
}

Test(cuda_attention, decode_variant_setter_rejects_unknown_variants) {
    la_backend *be = NULL;
    la_err err = {0};
    la_status st = la_backend_create(LA_DEVICE_CUDA, 0, &be, &err);
    if (st == LA_ERR_UNSUPPORTED) {
        printf("skipped: no GPU (%s)\n", err.msg);
        return;
    }
    LA_CHECK_OK(st, err);
    const int32_t before = la_cuda_attn_decode_variant(be); /* 2 unless LA_ATTN_DECODE=v1 */
    cr_assert(before == 1 || before == 2);
    cr_assert_eq(la_cuda_attn_decode_variant_set(be, 0, &err), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_cuda_attn_decode_variant(be), before);
    LA_CHECK_OK(la_cuda_attn_decode_variant_set(be, 1, &err), err);
    cr_assert_eq(la_cuda_attn_decode_variant(be), 1);
    la_backend_destroy(be);
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
    LA_CHECK_OK(la_cuda_attn_prefill_variant_set(be, 1, &err), err);
    cr_assert_eq(la_cuda_attn_prefill_variant(be), 1);
    la_backend_destroy(be);
}

#endif /* LA_HAVE_CUDA */
