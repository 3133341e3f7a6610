/* CPU backend (backend/backend.h): f32 everywhere, OpenBLAS sgemm for matrix products.
 *
 * Parallelism: OpenBLAS is pinned to one thread and every operation splits its work over
 * our thread pool (weight GEMMs by output columns, attention by (sequence, KV head),
 * element-wise ops by rows), so the two never oversubscribe the cores.
 *
 * KV pool layout (per layer, K and V alike):  [n_blocks][n_kv_heads][block_size][head_dim]
 * so one KV head of one block is a contiguous [block_size, head_dim] matrix.
 */
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/rope.h"
#include "base/dtype.h"
#include "base/err.h"
#include "base/threadpool.h"

typedef struct cpu_layer {
    float *w[LA_W_KIND_COUNT];
} cpu_layer;

typedef struct cpu_backend {
    la_backend base;
    la_threadpool *tp;
    /* weights, f32 */
    float *embed;       /* [vocab, hidden] */
    float *final_norm;  /* [hidden] */
    float *lm_head;     /* [vocab, hidden]; == embed when tied (not owned twice) */
    cpu_layer *layers;
    int32_t n_layers;
    float *inv_freq;    /* [head_dim / 2] */
    float *rope_cs;     /* [rope_n][head_dim / 2][cos, sin]: RoPE table by position */
    int64_t rope_n;     /* positions in the table */
    /* KV pool */
    float *k_pool, *v_pool; /* [n_layers][n_blocks][n_kv][B][hd] */
    int64_t n_blocks;
    int32_t block_size;
    /* current batch (borrowed copy of the caller's arrays) */
    la_batch batch;
    int32_t *b_tokens, *b_pos, *b_kpos, *b_logit_rows;
    int64_t *b_slots;
    la_batch_seq *b_seqs;
    la_attn_block *b_blocks;
} cpu_backend;

static cpu_backend *cpu(la_backend *be) { return (cpu_backend *)be; }

/* ============================================================ weights ================ */

static la_status to_f32(const la_st_tensor *t, float **out, la_err *err) {
    size_t n = t->n_bytes / la_dtype_size(t->dtype);
    float *p = malloc(n * sizeof(float));
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory (%zu floats)", t->name, n);
    la_convert_to_f32(p, t->data, t->dtype, n);
    *out = p;
    return LA_OK;
}

static void free_weights(cpu_backend *c) {
    if (c->lm_head != c->embed) free(c->lm_head);
    free(c->embed);
    free(c->final_norm);
    for (int32_t l = 0; l < c->n_layers; l++)
        for (int k = 0; k < LA_W_KIND_COUNT; k++) free(c->layers[l].w[k]);
    free(c->layers);
    free(c->inv_freq);
    free(c->rope_cs);
    c->rope_cs = NULL;
    c->rope_n = 0;
    c->embed = c->lm_head = c->final_norm = c->inv_freq = NULL;
    c->layers = NULL;
    c->n_layers = 0;
}

/* Random weights (w == NULL): uniform with std INIT_STD (as tools/write_random_checkpoint),
 * norm weights 1; each value a pure function of (tensor, index) through splitmix64. */
#define INIT_STD 0.02

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static la_status random_f32(int64_t n, uint64_t tensor_id, bool norm, float **out, la_err *err) {
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "random weights: out of memory (%lld floats)",
                              (long long)n);
    const double half_width = INIT_STD * sqrt(3.0); /* uniform(-a, a) has std a / sqrt(3) */
    for (int64_t i = 0; i < n; i++) {
        if (norm) {
            p[i] = 1.0f;
        } else {
            double u = (double)(mix64(tensor_id * 0x100000001b3ull + (uint64_t)i) >> 11) * 0x1.0p-53;
            p[i] = (float)((2.0 * u - 1.0) * half_width);
        }
    }
    *out = p;
    return LA_OK;
}

static la_status random_weights(cpu_backend *c, const la_model_config *m, la_err *err) {
    int64_t d = m->hidden_size;
    LA_TRY(random_f32((int64_t)m->vocab_size * d, 1, false, &c->embed, err));
    LA_TRY(random_f32(d, 2, true, &c->final_norm, err));
    if (m->tie_word_embeddings) c->lm_head = c->embed;
    else LA_TRY(random_f32((int64_t)m->vocab_size * d, 3, false, &c->lm_head, err));
    for (int32_t l = 0; l < m->n_layers; l++)
        for (int k = 0; k <= LA_W_DOWN; k++) { /* the per-layer kinds */
            int64_t o, i;
            la_weight_shape(m, (la_weight_kind)k, &o, &i);
            LA_TRY(random_f32(o * i, 16 + (uint64_t)l * LA_W_KIND_COUNT + (uint64_t)k,
                              k == LA_W_ATTN_NORM || k == LA_W_MLP_NORM, &c->layers[l].w[k], err));
        }
    return LA_OK;
}

static la_status cpu_load_weights(la_backend *be, const la_model_config *cfg,
                                  const la_weights *w, la_err *err) {
    cpu_backend *c = cpu(be);
    free_weights(c);
    c->base.cfg = *cfg;
    c->layers = calloc((size_t)cfg->n_layers, sizeof(cpu_layer));
    c->inv_freq = malloc(sizeof(float) * (size_t)(cfg->head_dim / 2));
    if (!c->layers || !c->inv_freq) {
        free_weights(c);
        return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: out of memory");
    }
    c->n_layers = cfg->n_layers;
    la_rope_inv_freq(cfg, c->inv_freq);
    if (!w) {
        la_status s = random_weights(c, cfg, err);
        if (s != LA_OK) free_weights(c);
        return s;
    }
    la_status s = to_f32(w->embed, &c->embed, err);
    if (s == LA_OK) s = to_f32(w->final_norm, &c->final_norm, err);
    if (s == LA_OK) {
        if (w->lm_head == w->embed) c->lm_head = c->embed;
        else s = to_f32(w->lm_head, &c->lm_head, err);
    }
    for (int32_t l = 0; s == LA_OK && l < cfg->n_layers; l++) {
        const la_layer_weights *lw = &w->layers[l];
        const la_st_tensor *src[LA_W_KIND_COUNT] = {
            [LA_W_ATTN_NORM] = lw->attn_norm, [LA_W_Q] = lw->wq, [LA_W_K] = lw->wk,
            [LA_W_V] = lw->wv, [LA_W_O] = lw->wo, [LA_W_MLP_NORM] = lw->mlp_norm,
            [LA_W_GATE] = lw->w_gate, [LA_W_UP] = lw->w_up, [LA_W_DOWN] = lw->w_down};
        for (int k = 0; s == LA_OK && k < LA_W_KIND_COUNT; k++)
            if (src[k]) s = to_f32(src[k], &c->layers[l].w[k], err);
    }
    if (s != LA_OK) free_weights(c);
    return s;
}

/* Weight matrix and its [n_out, n_in] shape (NULL for an unknown kind). */
static const float *weight(cpu_backend *c, la_weight_kind k, int32_t layer, int64_t *n_out,
                           int64_t *n_in) {
    int64_t o, i;
    la_weight_shape(&c->base.cfg, k, &o, &i);
    if (o == 0) return NULL;
    if (n_out) *n_out = o;
    if (n_in) *n_in = i;
    if (k == LA_W_LM_HEAD) return c->lm_head;
    if (k == LA_W_FINAL_NORM) return c->final_norm;
    return c->layers[layer].w[k];
}

/* ============================================================ KV pool ================ */

static int64_t kv_layer_elems(const cpu_backend *c) {
    const la_model_config *m = &c->base.cfg;
    return c->n_blocks * m->n_kv_heads * c->block_size * m->head_dim;
}

static int64_t cpu_kv_block_bytes(const la_backend *be, int32_t block_size) {
    const la_model_config *m = &be->cfg;
    return 2LL * m->n_layers * m->n_kv_heads * block_size * m->head_dim * (int64_t)sizeof(float);
}

static la_status cpu_kv_alloc(la_backend *be, int64_t n_blocks, int32_t block_size, la_err *err) {
    cpu_backend *c = cpu(be);
    const la_model_config *m = &c->base.cfg;
    free(c->k_pool);
    free(c->v_pool);
    c->k_pool = c->v_pool = NULL;
    c->n_blocks = 0;
    size_t n = (size_t)n_blocks * (size_t)m->n_layers * (size_t)m->n_kv_heads *
               (size_t)block_size * (size_t)m->head_dim;
    c->k_pool = calloc(n, sizeof(float));
    c->v_pool = calloc(n, sizeof(float));
    if (!c->k_pool || !c->v_pool) {
        free(c->k_pool);
        free(c->v_pool);
        c->k_pool = c->v_pool = NULL;
        return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: KV pool of %lld blocks: out of memory",
                          (long long)n_blocks);
    }
    c->n_blocks = n_blocks;
    c->block_size = block_size;
    return LA_OK;
}

/* Pointer to [block_size, head_dim] of (layer, block, kv head). */
static float *kv_at(cpu_backend *c, float *pool, int32_t layer, int64_t block, int32_t kvh) {
    const la_model_config *m = &c->base.cfg;
    return pool + layer * kv_layer_elems(c) +
           ((block * m->n_kv_heads + kvh) * c->block_size) * m->head_dim;
}

/* ============================================================ RoPE table ============= */

/* Grow the cos/sin table to cover positions [0, n) (powers of two; computed once). Angles in
 * double as in backend/rope.h. Called before any parallel section reads the table. */
static la_status rope_reserve(cpu_backend *c, int64_t n, la_err *err) {
    if (n <= c->rope_n) return LA_OK;
    int64_t cap = c->rope_n ? c->rope_n : 1024;
    while (cap < n) cap *= 2;
    int32_t half = c->base.cfg.head_dim / 2;
    float *t = realloc(c->rope_cs, sizeof(float) * (size_t)(cap * 2 * half));
    if (!t) return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: RoPE table of %lld positions", (long long)cap);
    for (int64_t p = c->rope_n; p < cap; p++) la_rope_cos_sin(c->inv_freq, half, (double)p, t + p * 2 * half);
    c->rope_cs = t;
    c->rope_n = cap;
    return LA_OK;
}

/* The table row of position pos (0 <= pos < rope_n). */
static const float *rope_row(const cpu_backend *c, int64_t pos) {
    return c->rope_cs + pos * c->base.cfg.head_dim;
}

/* ============================================================ activations ============ */

static la_status cpu_act_alloc(la_backend *be, int64_t n_rows, int64_t n_cols, la_act *out,
                               la_err *err) {
    float *p = malloc((size_t)(n_rows * n_cols > 0 ? n_rows * n_cols : 1) * sizeof(float));
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: activation [%lld, %lld]: out of memory",
                              (long long)n_rows, (long long)n_cols);
    out->data = p;
    out->n_rows = n_rows;
    out->n_cols = n_cols;
    return LA_OK;
}

static void cpu_act_free(la_backend *be, la_act *a) {
    free(a->data);
    a->data = NULL;
    a->n_rows = a->n_cols = 0;
}

static void *dup_array(const void *src, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (p && bytes) memcpy(p, src, bytes);
    return p;
}

static void free_batch(cpu_backend *c) {
    free(c->b_tokens);
    free(c->b_pos);
    free(c->b_kpos);
    free(c->b_slots);
    free(c->b_seqs);
    free(c->b_blocks);
    free(c->b_logit_rows);
    c->b_tokens = c->b_pos = c->b_kpos = c->b_logit_rows = NULL;
    c->b_slots = NULL;
    c->b_seqs = NULL;
    c->b_blocks = NULL;
    memset(&c->batch, 0, sizeof c->batch);
}

static la_status cpu_batch_begin(la_backend *be, const la_batch *b, la_err *err) {
    cpu_backend *c = cpu(be);
    free_batch(c);
    size_t n = (size_t)b->n_tokens;
    c->b_tokens = dup_array(b->tokens, n * sizeof(int32_t));
    c->b_pos = dup_array(b->pos, n * sizeof(int32_t));
    c->b_kpos = dup_array(b->k_pos, n * sizeof(int32_t));
    c->b_slots = dup_array(b->slots, n * sizeof(int64_t));
    c->b_seqs = dup_array(b->seqs, (size_t)b->n_seqs * sizeof(la_batch_seq));
    c->b_blocks = dup_array(b->blocks, (size_t)b->n_blocks * sizeof(la_attn_block));
    c->b_logit_rows = dup_array(b->logit_rows, (size_t)b->n_logit_rows * sizeof(int32_t));
    if (!c->b_tokens || !c->b_pos || !c->b_kpos || !c->b_slots || !c->b_seqs || !c->b_blocks ||
        !c->b_logit_rows) {
        free_batch(c);
        return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: batch metadata: out of memory");
    }
    c->batch = (la_batch){b->n_tokens, c->b_tokens, c->b_pos, c->b_kpos, c->b_slots,
                          b->n_seqs, c->b_seqs, b->n_blocks, c->b_blocks,
                          b->n_logit_rows, c->b_logit_rows};
    /* every position RoPE will be evaluated at: K positions, query positions (minus Δ >= 0
     * for lazy, checked by the plan), mepic key positions pos0 + j */
    int64_t max_pos = 0;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        if (b->pos[t] < 0 || (b->k_pos[t] < 0 && b->k_pos[t] != LA_POS_UNROTATED)) {
            free_batch(c);
            return la_err_set(err, LA_ERR_INTERNAL, "batch: negative position at row %d", t);
        }
        if (b->pos[t] > max_pos) max_pos = b->pos[t];
        if (b->k_pos[t] > max_pos) max_pos = b->k_pos[t];
    }
    for (int32_t i = 0; i < b->n_blocks; i++)
        if ((int64_t)b->blocks[i].pos0 + c->block_size > max_pos) max_pos = (int64_t)b->blocks[i].pos0 + c->block_size;
    la_status s = rope_reserve(c, max_pos + 1, err);
    if (s != LA_OK) free_batch(c);
    return s;
}

/* ============================================================ element-wise ops ======= */

typedef struct {
    cpu_backend *c;
    const float *x;
    float *y;
    const float *w;
    int64_t n_cols;
    float eps;
} rows_ctx;

static void embed_rows(void *p, int64_t b, int64_t e, int worker) {
    rows_ctx *r = p;
    for (int64_t t = b; t < e; t++)
        memcpy(r->y + t * r->n_cols, r->c->embed + (int64_t)r->c->batch.tokens[t] * r->n_cols,
               (size_t)r->n_cols * sizeof(float));
}

static la_status cpu_embed(la_backend *be, la_act *x, la_err *err) {
    cpu_backend *c = cpu(be);
    for (int32_t t = 0; t < c->batch.n_tokens; t++)
        if (c->batch.tokens[t] < 0 || c->batch.tokens[t] >= c->base.cfg.vocab_size)
            return la_err_set(err, LA_ERR_INVALID_ARG, "token id %d outside the vocabulary [0, %d)",
                              c->batch.tokens[t], c->base.cfg.vocab_size);
    rows_ctx r = {c, NULL, x->data, NULL, x->n_cols, 0};
    la_parallel_for(c->tp, c->batch.n_tokens, embed_rows, &r);
    return LA_OK;
}

/* HF LlamaRMSNorm: variance in f32, x * rsqrt(var + eps), then * weight. */
static void rmsnorm_rows(void *p, int64_t b, int64_t e, int worker) {
    rows_ctx *r = p;
    for (int64_t t = b; t < e; t++) {
        const float *x = r->x + t * r->n_cols;
        float *y = r->y + t * r->n_cols;
        double ss = 0;
        for (int64_t i = 0; i < r->n_cols; i++) ss += (double)x[i] * x[i];
        float inv = (float)(1.0 / sqrt(ss / (double)r->n_cols + r->eps));
        for (int64_t i = 0; i < r->n_cols; i++) y[i] = r->w[i] * (x[i] * inv);
    }
}

static la_status cpu_rmsnorm(la_backend *be, const la_act *x, la_weight_kind w, int32_t layer,
                             la_act *out, la_err *err) {
    cpu_backend *c = cpu(be);
    rows_ctx r = {c, x->data, out->data, weight(c, w, layer, NULL, NULL), x->n_cols,
                  (float)c->base.cfg.rms_norm_eps};
    la_parallel_for(c->tp, x->n_rows, rmsnorm_rows, &r);
    return LA_OK;
}

static void swiglu_rows(void *p, int64_t b, int64_t e, int worker) {
    rows_ctx *r = p;
    float *g = r->y;
    const float *u = r->x;
    for (int64_t i = b * r->n_cols; i < e * r->n_cols; i++) {
        float v = g[i];
        g[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

static la_status cpu_swiglu(la_backend *be, la_act *gate, const la_act *up, la_err *err) {
    rows_ctx r = {cpu(be), up->data, gate->data, NULL, gate->n_cols, 0};
    la_parallel_for(cpu(be)->tp, gate->n_rows, swiglu_rows, &r);
    return LA_OK;
}

static void add_rows(void *p, int64_t b, int64_t e, int worker) {
    rows_ctx *r = p;
    for (int64_t i = b * r->n_cols; i < e * r->n_cols; i++) r->y[i] += r->x[i];
}

static la_status cpu_add(la_backend *be, la_act *x, const la_act *y, la_err *err) {
    rows_ctx r = {cpu(be), y->data, x->data, NULL, x->n_cols, 0};
    la_parallel_for(cpu(be)->tp, x->n_rows, add_rows, &r);
    return LA_OK;
}

static la_status cpu_gather_rows(la_backend *be, const la_act *x, la_act *out, la_err *err) {
    cpu_backend *c = cpu(be);
    const float *src = x->data;
    float *dst = out->data;
    for (int32_t i = 0; i < c->batch.n_logit_rows; i++)
        memcpy(dst + i * x->n_cols, src + (int64_t)c->batch.logit_rows[i] * x->n_cols,
               (size_t)x->n_cols * sizeof(float));
    return LA_OK;
}

static la_status cpu_to_host(la_backend *be, const la_act *x, float *host, la_err *err) {
    memcpy(host, x->data, (size_t)(x->n_rows * x->n_cols) * sizeof(float));
    return LA_OK;
}

/* ============================================================ matmul ================= */

typedef struct {
    const float *x, *w;
    float *y;
    int64_t n, n_in, n_out, chunk;
} mm_ctx;

/* Worker: output columns [b*chunk, e*chunk) of y = x W^T. */
static void matmul_cols(void *p, int64_t b, int64_t e, int worker) {
    mm_ctx *m = p;
    int64_t c0 = b * m->chunk, c1 = e * m->chunk;
    if (c1 > m->n_out) c1 = m->n_out;
    if (c0 >= c1) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m->n, (int)(c1 - c0), (int)m->n_in,
                1.0f, m->x, (int)m->n_in, m->w + c0 * m->n_in, (int)m->n_in, 0.0f, m->y + c0,
                (int)m->n_out);
}

static la_status cpu_matmul(la_backend *be, const la_act *x, la_weight_kind k, int32_t layer,
                            la_act *out, la_err *err) {
    cpu_backend *c = cpu(be);
    int64_t n_out, n_in;
    const float *w = weight(c, k, layer, &n_out, &n_in);
    if (!w || x->n_cols != n_in || out->n_cols != n_out || out->n_rows != x->n_rows)
        return la_err_set(err, LA_ERR_INTERNAL, "cpu matmul: shape mismatch for weight %d", (int)k);
    int64_t chunk = 64;
    mm_ctx m = {x->data, w, out->data, x->n_rows, n_in, n_out, chunk};
    la_parallel_for(c->tp, (n_out + chunk - 1) / chunk, matmul_cols, &m);
    return LA_OK;
}

/* ============================================================ KV write =============== */

typedef struct {
    cpu_backend *c;
    int32_t layer;
    float *k;
    const float *v;
} kvw_ctx;

static void kv_write_rows(void *p, int64_t b, int64_t e, int worker) {
    kvw_ctx *w = p;
    cpu_backend *c = w->c;
    const la_model_config *m = &c->base.cfg;
    int32_t hd = m->head_dim, nkv = m->n_kv_heads;
    for (int64_t t = b; t < e; t++) {
        float *k = w->k + t * nkv * hd;
        const float *v = w->v + t * nkv * hd;
        int32_t kp = c->batch.k_pos[t];
        if (kp != LA_POS_UNROTATED)
            for (int32_t h = 0; h < nkv; h++) la_rope_apply(k + h * hd, hd, rope_row(c, kp));
        int64_t slot = c->batch.slots[t];
        int64_t blk = slot / c->block_size, off = slot % c->block_size;
        for (int32_t h = 0; h < nkv; h++) {
            memcpy(kv_at(c, c->k_pool, w->layer, blk, h) + off * hd, k + h * hd, hd * sizeof(float));
            memcpy(kv_at(c, c->v_pool, w->layer, blk, h) + off * hd, v + h * hd, hd * sizeof(float));
        }
    }
}

static la_status cpu_kv_write(la_backend *be, int32_t layer, la_act *k, const la_act *v,
                              la_err *err) {
    cpu_backend *c = cpu(be);
    for (int32_t t = 0; t < c->batch.n_tokens; t++)
        if (c->batch.slots[t] < 0 || c->batch.slots[t] >= c->n_blocks * c->block_size)
            return la_err_set(err, LA_ERR_INTERNAL, "kv_write: slot %lld outside the pool",
                              (long long)c->batch.slots[t]);
    kvw_ctx w = {c, layer, k->data, v->data};
    la_parallel_for(c->tp, k->n_rows, kv_write_rows, &w);
    return LA_OK;
}

/* ============================================================ attention ============== */

/* Work item: one (sequence, KV head) pair. Scratch per worker is allocated per call. */
typedef struct {
    cpu_backend *c;
    int32_t layer;
    const float *q;
    float *out;
    int64_t n_tasks;
    la_status status;
} attn_ctx;

static void attn_task(attn_ctx *a, int32_t seq_id, int32_t g) {
    cpu_backend *c = a->c;
    const la_model_config *m = &c->base.cfg;
    const la_batch *b = &c->batch;
    const la_batch_seq *sq = &b->seqs[seq_id];
    const la_attn_block *blocks = b->blocks + sq->block0;
    int32_t hd = m->head_dim, B = c->block_size;
    int32_t n_q = sq->n_rows, nb = sq->n_blocks;
    int64_t n_slots = (int64_t)nb * B;
    int32_t group = m->n_heads / m->n_kv_heads;
    int64_t qstride = (int64_t)m->n_heads * hd;
    float scale = (float)(1.0 / sqrt((double)hd));

    float *K = malloc(sizeof(float) * (size_t)(n_slots * hd));
    float *V = malloc(sizeof(float) * (size_t)(n_slots * hd));
    float *S = malloc(sizeof(float) * (size_t)(n_q * n_slots));
    float *Q = malloc(sizeof(float) * (size_t)(n_q * hd));
    if (!K || !V || !S || !Q) {
        a->status = LA_ERR_NO_MEMORY;
        goto done;
    }
    /* Gather this KV head's keys and values; mepic blocks rotate keys at pos0 + j. */
    for (int32_t bi = 0; bi < nb; bi++) {
        const la_attn_block *blk = &blocks[bi];
        memcpy(K + (int64_t)bi * B * hd, kv_at(c, c->k_pool, a->layer, blk->block_id, g),
               sizeof(float) * (size_t)(B * hd));
        memcpy(V + (int64_t)bi * B * hd, kv_at(c, c->v_pool, a->layer, blk->block_id, g),
               sizeof(float) * (size_t)(B * hd));
        if (blk->k_rope)
            for (int32_t j = 0; j < blk->n_valid; j++)
                la_rope_apply(K + ((int64_t)bi * B + j) * hd, hd, rope_row(c, (int64_t)blk->pos0 + j));
    }
    for (int32_t hh = 0; hh < group; hh++) {
        int32_t h = g * group + hh;
        /* Scores, one run of blocks sharing q_delta at a time (lazy: one run per document). */
        for (int32_t r0 = 0; r0 < nb;) {
            int32_t r1 = r0 + 1;
            while (r1 < nb && blocks[r1].q_delta == blocks[r0].q_delta) r1++;
            int32_t delta = blocks[r0].q_delta;
            for (int32_t i = 0; i < n_q; i++) {
                int32_t row = sq->row0 + i;
                float *qi = Q + (int64_t)i * hd;
                memcpy(qi, a->q + row * qstride + (int64_t)h * hd, sizeof(float) * (size_t)hd);
                la_rope_apply(qi, hd, rope_row(c, (int64_t)b->pos[row] - delta));
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_q, (r1 - r0) * B, hd, scale, Q,
                        hd, K + (int64_t)r0 * B * hd, hd, 0.0f, S + (int64_t)r0 * B, (int)n_slots);
            r0 = r1;
        }
        /* Mask (padding, causal), softmax per row. */
        for (int32_t i = 0; i < n_q; i++) {
            float *s = S + (int64_t)i * n_slots;
            int64_t p = b->pos[sq->row0 + i];
            float mx = -INFINITY;
            for (int32_t bi = 0; bi < nb; bi++) {
                const la_attn_block *blk = &blocks[bi];
                for (int32_t j = 0; j < B; j++) {
                    float *sj = s + (int64_t)bi * B + j;
                    if (j >= blk->n_valid || (int64_t)blk->pos0 + j > p) *sj = -INFINITY;
                    else if (*sj > mx) mx = *sj;
                }
            }
            double sum = 0;
            for (int64_t j = 0; j < n_slots; j++) {
                float e = s[j] == -INFINITY ? 0.0f : expf(s[j] - mx);
                s[j] = e;
                sum += e;
            }
            float inv = sum > 0 ? (float)(1.0 / sum) : 0.0f;
            for (int64_t j = 0; j < n_slots; j++) s[j] *= inv;
        }
        /* out rows = P V */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n_q, hd, (int)n_slots, 1.0f, S,
                    (int)n_slots, V, hd, 0.0f, a->out + (int64_t)sq->row0 * qstride + (int64_t)h * hd,
                    (int)qstride);
    }
done:
    free(K);
    free(V);
    free(S);
    free(Q);
}

static void attn_tasks(void *p, int64_t b, int64_t e, int worker) {
    attn_ctx *a = p;
    int32_t nkv = a->c->base.cfg.n_kv_heads;
    for (int64_t t = b; t < e; t++) attn_task(a, (int32_t)(t / nkv), (int32_t)(t % nkv));
}

static la_status cpu_attention(la_backend *be, int32_t layer, const la_act *q, la_act *out,
                               la_err *err) {
    cpu_backend *c = cpu(be);
    for (int32_t i = 0; i < c->batch.n_blocks; i++) {
        const la_attn_block *blk = &c->batch.blocks[i];
        if (blk->block_id < 0 || blk->block_id >= c->n_blocks || blk->n_valid < 0 ||
            blk->n_valid > c->block_size)
            return la_err_set(err, LA_ERR_INTERNAL, "attention: bad block %d (n_valid %d)",
                              blk->block_id, blk->n_valid);
    }
    for (int32_t s = 0; s < c->batch.n_seqs; s++) { /* lazy: p - Δ must stay >= 0 */
        const la_batch_seq *sq = &c->batch.seqs[s];
        int32_t min_pos = INT32_MAX;
        for (int32_t r = sq->row0; r < sq->row0 + sq->n_rows; r++)
            if (c->batch.pos[r] < min_pos) min_pos = c->batch.pos[r];
        for (int32_t i = sq->block0; i < sq->block0 + sq->n_blocks; i++)
            if (c->batch.blocks[i].q_delta < 0 || c->batch.blocks[i].q_delta > min_pos)
                return la_err_set(err, LA_ERR_INTERNAL, "attention: q_delta %d outside [0, %d]",
                                  c->batch.blocks[i].q_delta, min_pos);
    }
    attn_ctx a = {c, layer, q->data, out->data, 0, LA_OK};
    la_parallel_for(c->tp, (int64_t)c->batch.n_seqs * c->base.cfg.n_kv_heads, attn_tasks, &a);
    if (a.status != LA_OK) return la_err_set(err, a.status, "attention: out of memory");
    return LA_OK;
}

/* ============================================================ block copy ============= */

static la_status cpu_kv_copy_rotate(la_backend *be, int32_t src, int32_t dst, int32_t n_valid,
                                    int32_t delta, la_err *err) {
    cpu_backend *c = cpu(be);
    const la_model_config *m = &c->base.cfg;
    int32_t hd = m->head_dim;
    if (src < 0 || src >= c->n_blocks || dst < 0 || dst >= c->n_blocks || n_valid > c->block_size)
        return la_err_set(err, LA_ERR_INTERNAL, "kv_copy_rotate: bad blocks %d -> %d", src, dst);
    /* cos/sin of delta computed directly: delta may be negative (a block moved to an
     * earlier position), where the position table has no row */
    float *cs = malloc(sizeof(float) * (size_t)hd);
    if (!cs) return la_err_set(err, LA_ERR_NO_MEMORY, "kv_copy_rotate: out of memory");
    la_rope_cos_sin(c->inv_freq, hd / 2, (double)delta, cs);
    for (int32_t l = 0; l < m->n_layers; l++)
        for (int32_t h = 0; h < m->n_kv_heads; h++) {
            float *ks = kv_at(c, c->k_pool, l, src, h), *kd = kv_at(c, c->k_pool, l, dst, h);
            memcpy(kd, ks, sizeof(float) * (size_t)(n_valid * hd));
            memcpy(kv_at(c, c->v_pool, l, dst, h), kv_at(c, c->v_pool, l, src, h),
                   sizeof(float) * (size_t)(n_valid * hd));
            for (int32_t j = 0; j < n_valid; j++) la_rope_apply(kd + (int64_t)j * hd, hd, cs);
        }
    free(cs);
    return LA_OK;
}

static la_status cpu_kv_read_slot(la_backend *be, int32_t layer, int64_t slot, float *k, float *v,
                                  la_err *err) {
    cpu_backend *c = cpu(be);
    const la_model_config *m = &c->base.cfg;
    if (slot < 0 || slot >= c->n_blocks * c->block_size)
        return la_err_set(err, LA_ERR_INVALID_ARG, "slot %lld outside the pool", (long long)slot);
    int64_t blk = slot / c->block_size, off = slot % c->block_size;
    for (int32_t h = 0; h < m->n_kv_heads; h++) {
        memcpy(k + h * m->head_dim, kv_at(c, c->k_pool, layer, blk, h) + off * m->head_dim,
               sizeof(float) * (size_t)m->head_dim);
        memcpy(v + h * m->head_dim, kv_at(c, c->v_pool, layer, blk, h) + off * m->head_dim,
               sizeof(float) * (size_t)m->head_dim);
    }
    return LA_OK;
}

/* ============================================================ lifecycle ============== */

static void cpu_destroy(la_backend *be) {
    cpu_backend *c = cpu(be);
    free_weights(c);
    free(c->k_pool);
    free(c->v_pool);
    free_batch(c);
    la_threadpool_destroy(c->tp);
    free(c);
}

static const la_backend_ops k_cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .load_weights = cpu_load_weights,
    .kv_alloc = cpu_kv_alloc,
    .kv_block_bytes = cpu_kv_block_bytes,
    .mem_free_bytes = NULL,
    .act_alloc = cpu_act_alloc,
    .act_free = cpu_act_free,
    .batch_begin = cpu_batch_begin,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .gather_rows = cpu_gather_rows,
    .to_host = cpu_to_host,
    .kv_copy_rotate = cpu_kv_copy_rotate,
    .kv_read_slot = cpu_kv_read_slot,
};

la_status la_cpu_backend_create(int n_threads, la_backend **out, la_err *err) {
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: out of memory");
    c->base.ops = &k_cpu_ops;
    la_status s = la_threadpool_create(n_threads, &c->tp, err);
    if (s != LA_OK) {
        free(c);
        return s;
    }
    openblas_set_num_threads(1); /* parallelism comes from our pool (see top of file) */
    *out = &c->base;
    return LA_OK;
}
