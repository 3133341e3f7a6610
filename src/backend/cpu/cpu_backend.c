/* CPU backend (backend/backend.h): f32 activations; weights kept in the checkpoint's dtype
 * (f32, bf16 or f16; la_backend.weight_dtype) and the KV cache in f32 or bf16
 * (la_backend.kv_dtype).
 *
 * Kernels (cpu_kernels.h): a table per instruction set picked at run time (AVX-512, AVX2,
 * portable C). Matrix products up to the table's crossover (la_cpu_kernels.gemm_max_rows_*,
 * gemm_x_bytes; the values and their measurements are in each table) run our gemm_nt kernel
 * on the weight in its own dtype (or, with la_backend.bf16_dot, gemm_nt_bf16x on bf16
 * activations at every row count); larger ones (prefill) OpenBLAS sgemm, a weight tile
 * unpacked (and widened) to row-major f32 first. Attention is ours at every row count: an
 * online softmax over the block table, one KV block at a time.
 *
 * Parallelism: OpenBLAS is pinned to one thread and every operation splits its work over
 * our thread pool (weight products by output columns, attention by (sequence, KV head,
 * block range) with a log-sum-exp merge of the ranges, element-wise ops by rows), so the
 * two never oversubscribe the cores.
 *
 * KV pool layout (per layer, K and V alike):  [n_blocks][n_kv_heads][block_size][head_dim]
 * of kv_dtype, so one KV head of one block is a contiguous [block_size, head_dim] matrix.
 */
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/rope.h"
#include "base/dtype.h"
#include "base/env.h"
#include "base/err.h"
#include "base/threadpool.h"

/* Matrix products run gemm_nt where it beats OpenBLAS, BLAS above: the crossovers belong to
 * the kernel table (la_cpu_kernels.gemm_max_rows_*, cpu_kernels_*.c, measured with
 * bench/bench_cpu_gemm.c), unless OpenBLAS runs a core without FMA under a vector table
 * (la_cpu_blas_core_predates_fma): then every product is ours. LA_CPU_GEMM_MAX_ROWS=N makes
 * it N rows on every weight (a benchmark switch and a test hook). */
/* Output columns per task of a weight product: gemm_nt (a multiple of LA_CPU_PACK_ROWS) / a
 * BLAS tile (unpacked to f32 in the worker's scratch, 64 rows of n_in floats). */
#define GEMV_CHUNK 16
#define BLAS_CHUNK 64

/* Memory for weights and the KV pool (free with free()): 2 MiB-aligned and, from 2 MiB on,
 * asked for transparent huge pages (madvise mode: the kernel default here). A decode step
 * streams the weights once: with 4 KiB pages the hardware prefetcher stops at every page
 * boundary and the TLB misses every page. zero: zero-filled. NULL when out of memory. */
void *la_cpu_big_alloc(size_t bytes, bool zero) {
    const size_t huge = (size_t)2 << 20;
    if (bytes < huge) return zero ? calloc(1, bytes ? bytes : 1) : malloc(bytes ? bytes : 1);
    void *p = NULL;
    size_t n = (bytes + huge - 1) / huge * huge;
    if (posix_memalign(&p, huge, n) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE); /* a hint: without THP the memory works as it is */
#endif
    if (zero) memset(p, 0, bytes);
    return p;
}

/* Worker w's scratch of at least n floats; NULL (and the worker's status set) when out of
 * memory. */
float *la_cpu_scratch_get(cpu_backend *c, int w, size_t n) {
    cpu_scratch *s = &c->scratch[w];
    if (s->n < n) {
        float *p = realloc(s->p, n * sizeof(float));
        if (!p) {
            c->worker_status[w] = LA_ERR_NO_MEMORY;
            return NULL;
        }
        s->p = p;
        s->n = n;
    }
    return s->p;
}

/* LA_OK, or the first worker's failure since the last call (statuses reset). */
la_status la_cpu_workers_status(cpu_backend *c) {
    la_status s = LA_OK;
    for (int w = 0; w < c->n_workers; w++) {
        if (s == LA_OK) s = c->worker_status[w];
        c->worker_status[w] = LA_OK;
    }
    return s;
}

/* ============================================================ KV pool ================ */



static int64_t cpu_kv_block_bytes(const la_backend *be, int32_t block_size) {
    const la_backend_shape *m = &be->shape;
    return 2LL * m->n_layers * m->n_kv_heads * block_size * m->head_dim * (int64_t)la_dtype_size(be->kv_dtype);
}

static la_status cpu_kv_alloc(la_backend *be, int64_t n_blocks, int32_t block_size, la_err *err) {
    cpu_backend *c = cpu(be);
    const la_backend_shape *m = &c->base.shape;
    free(c->k_pool);
    free(c->v_pool);
    c->k_pool = c->v_pool = NULL;
    c->n_blocks = 0;
    if (be->kv_dtype != LA_DTYPE_F32 && be->kv_dtype != LA_DTYPE_BF16)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "cpu backend: a KV cache of %s (f32 or bf16)",
                          la_dtype_name(be->kv_dtype));
    size_t n = (size_t)n_blocks * (size_t)m->n_layers * (size_t)m->n_kv_heads *
               (size_t)block_size * (size_t)m->head_dim;
    c->k_pool = la_cpu_big_alloc(n * la_dtype_size(be->kv_dtype), true);
    c->v_pool = la_cpu_big_alloc(n * la_dtype_size(be->kv_dtype), true);
    if (!c->k_pool || !c->v_pool) {
        free(c->k_pool);
        free(c->v_pool);
        c->k_pool = c->v_pool = NULL;
        return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: KV pool of %lld blocks: out of memory",
                          (long long)n_blocks);
    }
    c->n_blocks = n_blocks;
    c->block_size = block_size;
    c->pool_dtype = be->kv_dtype;
    return LA_OK;
}


/* Store n f32 values at element off of a pool row (converted to the pool's dtype). */
static void kv_store(cpu_backend *c, void *row, int64_t off, const float *src, int32_t n) {
    la_cpu_from_f32((char *)row + (size_t)off * kv_es(c), c->pool_dtype, src, (size_t)n);
}

/* ============================================================ RoPE table ============= */

/* Grow the cos/sin table to cover positions [0, n) (powers of two; computed once). Angles in
 * double as in backend/rope.h. Called before any parallel section reads the table. */
static la_status rope_reserve(cpu_backend *c, int64_t n, la_err *err) {
    if (n <= c->rope_n) return LA_OK;
    int64_t cap = c->rope_n ? c->rope_n : 1024;
    while (cap < n) cap *= 2;
    int32_t half = c->base.shape.head_dim / 2;
    float *t = realloc(c->rope_cs, sizeof(float) * (size_t)(cap * 2 * half));
    if (!t) return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: RoPE table of %lld positions", (long long)cap);
    for (int64_t p = c->rope_n; p < cap; p++) la_rope_cos_sin(c->inv_freq, half, (double)p, t + p * 2 * half);
    c->rope_cs = t;
    c->rope_n = cap;
    return LA_OK;
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
    /* LA_TOKEN_PREV: the latest argmax_begin's ids (embed checks the rest against the vocabulary) */
    for (int32_t t = 0; t < b->n_tokens; t++) {
        if (c->b_tokens[t] >= 0) continue;
        const int32_t row = LA_TOKEN_PREV_ROW(c->b_tokens[t]);
        if (c->q_last < 0 || row >= c->q_n[c->q_last]) {
            const int32_t tok = c->b_tokens[t];
            free_batch(c);
            return la_err_set(err, LA_ERR_INVALID_ARG, "token id %d at row %d: no queued argmax has row %d", tok, t, row);
        }
        c->b_tokens[t] = c->q_ids[c->q_last][row];
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
    float *out; /* add_rmsnorm's normalized output */
} rows_ctx;

static void embed_rows(void *p, int64_t b, int64_t e, int worker) {
    rows_ctx *r = p;
    const cpu_weight *em = &r->c->embed; /* packed: the token's row widened out of its group */
    for (int64_t t = b; t < e; t++)
        la_cpu_unpack_rows(r->c->kern, r->y + t * r->n_cols, em->data, em->dtype, r->n_cols, r->c->batch.tokens[t],
                           r->c->batch.tokens[t] + 1);
}

static la_status cpu_embed(la_backend *be, la_act *x, la_err *err) {
    cpu_backend *c = cpu(be);
    for (int32_t t = 0; t < c->batch.n_tokens; t++)
        if (c->batch.tokens[t] < 0 || c->batch.tokens[t] >= c->base.shape.vocab_size)
            return la_err_set(err, LA_ERR_INVALID_ARG, "token id %d outside the vocabulary [0, %d)",
                              c->batch.tokens[t], c->base.shape.vocab_size);
    rows_ctx r = {c, NULL, x->data, NULL, x->n_cols, 0, NULL};
    la_parallel_for(c->tp, c->batch.n_tokens, embed_rows, &r);
    return LA_OK;
}

/* HF LlamaRMSNorm of one row: variance in f32 (summed in double), x * rsqrt(var + eps),
 * then * weight. */
static void rmsnorm_row(const float *x, const float *w, int64_t n, float eps, float *y) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = w[i] * (x[i] * inv);
}

static void rmsnorm_rows(void *p, int64_t b, int64_t e, int worker) {
    rows_ctx *r = p;
    for (int64_t t = b; t < e; t++) rmsnorm_row(r->x + t * r->n_cols, r->w, r->n_cols, r->eps, r->y + t * r->n_cols);
}

static la_status cpu_rmsnorm(la_backend *be, const la_act *x, la_weight_kind w, int32_t layer,
                             la_act *out, la_err *err) {
    cpu_backend *c = cpu(be);
    rows_ctx r = {c, x->data, out->data, la_cpu_vec_weight(c, w, layer), x->n_cols, (float)c->base.shape.rms_norm_eps, NULL};
    la_parallel_for(c->tp, x->n_rows, rmsnorm_rows, &r);
    return LA_OK;
}

/* x += y, then out = RMSNorm(x) w, row by row (one pass over the pool instead of two). */
static void add_rmsnorm_rows(void *p, int64_t b, int64_t e, int worker) {
    rows_ctx *r = p;
    for (int64_t t = b; t < e; t++) {
        float *x = r->y + t * r->n_cols;
        const float *y = r->x + t * r->n_cols;
        for (int64_t i = 0; i < r->n_cols; i++) x[i] += y[i];
        rmsnorm_row(x, r->w, r->n_cols, r->eps, r->out + t * r->n_cols);
    }
}

static la_status cpu_add_rmsnorm(la_backend *be, la_act *x, const la_act *y, la_weight_kind w, int32_t layer,
                                 la_act *out, la_err *err) {
    cpu_backend *c = cpu(be);
    rows_ctx r = {c, y->data, x->data, la_cpu_vec_weight(c, w, layer), x->n_cols, (float)c->base.shape.rms_norm_eps,
                  out->data};
    la_parallel_for(c->tp, x->n_rows, add_rmsnorm_rows, &r);
    return LA_OK;
}

static void swiglu_rows(void *p, int64_t b, int64_t e, int worker) {
    rows_ctx *r = p;
    r->c->kern->silu_mul(r->y + b * r->n_cols, r->x + b * r->n_cols, (e - b) * r->n_cols);
}

static la_status cpu_swiglu(la_backend *be, la_act *gate, const la_act *up, la_err *err) {
    rows_ctx r = {cpu(be), up->data, gate->data, NULL, gate->n_cols, 0, NULL};
    la_parallel_for(cpu(be)->tp, gate->n_rows, swiglu_rows, &r);
    return LA_OK;
}

static void add_rows(void *p, int64_t b, int64_t e, int worker) {
    rows_ctx *r = p;
    for (int64_t i = b * r->n_cols; i < e * r->n_cols; i++) r->y[i] += r->x[i];
}

static la_status cpu_add(la_backend *be, la_act *x, const la_act *y, la_err *err) {
    rows_ctx r = {cpu(be), y->data, x->data, NULL, x->n_cols, 0, NULL};
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
    cpu(be)->q_last = -1; /* a readback since: nothing may name the queued ids (backend.h) */
    return LA_OK;
}

/* argmax_begin (backend.h): la_argmax of each row, computed at once into the ring's next slot. */
static la_status cpu_argmax_begin(la_backend *be, const la_act *x, la_err *err) {
    cpu_backend *c = cpu(be);
    if (c->q_count == 2) return la_err_set(err, LA_ERR_INTERNAL, "argmax_begin: two already pending");
    if (x->n_rows <= 0 || x->n_rows > INT32_MAX || x->n_cols <= 0 || x->n_cols > INT32_MAX)
        return la_err_set(err, LA_ERR_INVALID_ARG, "argmax_begin: bad shape [%lld, %lld]", (long long)x->n_rows,
                          (long long)x->n_cols);
    const int32_t w = (c->q_head + c->q_count) % 2, n = (int32_t)x->n_rows;
    if (c->q_cap[w] < n) {
        int32_t *p = realloc(c->q_ids[w], sizeof(int32_t) * (size_t)n);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "argmax_begin: out of memory");
        c->q_ids[w] = p;
        c->q_cap[w] = n;
    }
    const float *v = x->data;
    for (int32_t r = 0; r < n; r++) c->q_ids[w][r] = la_argmax(v + (int64_t)r * x->n_cols, (int32_t)x->n_cols);
    c->q_n[w] = n;
    c->q_last = w;
    c->q_count++;
    return LA_OK;
}

static la_status cpu_argmax_end(la_backend *be, int32_t *ids, int32_t n, la_err *err) {
    cpu_backend *c = cpu(be);
    if (c->q_count == 0) return la_err_set(err, LA_ERR_INTERNAL, "argmax_end: nothing pending");
    const int32_t h = c->q_head;
    if (n != c->q_n[h]) return la_err_set(err, LA_ERR_INTERNAL, "argmax_end: %d ids asked, %d queued", n, c->q_n[h]);
    memcpy(ids, c->q_ids[h], sizeof(int32_t) * (size_t)n);
    c->q_head = (h + 1) % 2;
    c->q_count--;
    return LA_OK;
}

/* ============================================================ matmul ================= */

/* Up to three products out[i] = x W_i^T sharing x, their output columns numbered one after
 * another and cut into chunks of `chunk` columns (a chunk never straddles two weights). With
 * swiglu (gate_up_swiglu: W_0 = gate, W_1 = up, cut together), a task computes the same
 * columns of both and applies silu(gate) * up to them. */
typedef struct {
    cpu_backend *c;
    const float *x;
    int64_t n, n_in;
    int n_w;
    const cpu_weight *w[3];
    const float *bias[3]; /* [n_out] added to every row; NULL: none */
    float *y[3];
    int64_t n_out[3];
    int64_t chunks[3]; /* chunks of each weight */
    int64_t chunk;
    bool small; /* gemm_nt (else BLAS) */
    bool swiglu;
    const uint16_t *xb; /* x in bf16, rows of xb_ld (bf16_dot): gemm_nt_bf16x */
    int64_t xb_ld;
} mm_ctx;

/* Columns [c0, c1) of y = x W^T (+ bias). */
static void mm_cols(mm_ctx *m, int i, int64_t c0, int64_t c1, int worker) {
    const cpu_weight *w = m->w[i];
    float *y = m->y[i];
    const int64_t n_out = m->n_out[i];
    if (m->xb && w->dtype == LA_DTYPE_BF16) {
        m->c->kern->gemm_nt_bf16x(m->xb, m->xb_ld, m->n, w->data, m->n_in, c0, c1, m->bias[i], y, n_out);
        return;
    }
    if (m->small) {
        m->c->kern->gemm_nt(m->x, m->n_in, m->n, w->data, w->dtype, m->n_in, c0, c1, m->bias[i], y, n_out);
        return;
    }
    /* this tile of the weight unpacked (and widened) to row-major f32 first */
    float *wf = la_cpu_scratch_get(m->c, worker, (size_t)((c1 - c0) * m->n_in));
    if (!wf) return;
    la_cpu_unpack_rows(m->c->kern, wf, w->data, w->dtype, m->n_in, c0, c1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m->n, (int)(c1 - c0), (int)m->n_in, 1.0f, m->x,
                (int)m->n_in, wf, (int)m->n_in, 0.0f, y + c0, (int)n_out);
    if (m->bias[i]) /* nn.Linear: x W^T + b, the product rounded to f32 first */
        for (int64_t r = 0; r < m->n; r++)
            for (int64_t j = c0; j < c1; j++) y[r * n_out + j] += m->bias[i][j];
}

static void mm_tasks(void *p, int64_t b, int64_t e, int worker) {
    mm_ctx *m = p;
    /* runs of consecutive chunks of one weight become one call */
    for (int64_t t = b; t < e;) {
        int i = 0;
        int64_t base = 0;
        while (t >= base + m->chunks[i]) base += m->chunks[i++];
        int64_t t_end = e < base + m->chunks[i] ? e : base + m->chunks[i];
        int64_t c0 = (t - base) * m->chunk, c1 = (t_end - base) * m->chunk;
        if (c1 > m->n_out[i]) c1 = m->n_out[i];
        mm_cols(m, i, c0, c1, worker);
        if (m->swiglu) { /* the up columns of the same chunks, then the gate's activation */
            mm_cols(m, 1, c0, c1, worker);
            for (int64_t r = 0; r < m->n; r++)
                m->c->kern->silu_mul(m->y[0] + r * m->n_out[0] + c0, m->y[1] + r * m->n_out[1] + c0, c1 - c0);
        }
        t = t_end;
    }
}

static const float *bias_of(cpu_backend *c, la_weight_kind k, int32_t layer) {
    if (!c->base.shape.qkv_bias || (k != LA_W_Q && k != LA_W_K && k != LA_W_V)) return NULL;
    return c->layers[layer].w[k == LA_W_Q ? LA_W_Q_BIAS : k == LA_W_K ? LA_W_K_BIAS : LA_W_V_BIAS].data;
}

/* out[i] = x W_i^T for n_w <= 3 weights of layer; swiglu: out[0] = silu(x W_0^T) * x W_1^T. */
static la_status matmuls(cpu_backend *c, const la_act *x, const la_weight_kind *k, int n_w, int32_t layer,
                         la_act *const *out, bool swiglu, la_err *err) {
    mm_ctx m = {.c = c, .x = x->data, .n = x->n_rows, .n_w = swiglu ? 1 : n_w, .swiglu = swiglu};
    const cpu_weight *w0 = la_cpu_weight(c, k[0], layer, NULL, NULL);
    m.small = x->n_rows <= (w0 && w0->dtype != LA_DTYPE_F32 ? c->gemm_max_rows_16bit : c->gemm_max_rows_f32) ||
              x->n_rows * x->n_cols * (int64_t)sizeof(float) <= c->gemm_x_bytes;
    if (c->base.bf16_dot && c->kern->gemm_nt_bf16x && w0 && w0->dtype == LA_DTYPE_BF16) {
        /* x rounded to bf16 once for every weight of the call, rows padded with zeros to 16 */
        const int64_t ld = (x->n_cols + 15) & ~(int64_t)15;
        const size_t need = (size_t)(x->n_rows * ld);
        if (c->xb_n < need) {
            uint16_t *p = realloc(c->xb, need * sizeof(uint16_t));
            if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "cpu matmul: bf16 activations: out of memory");
            c->xb = p;
            c->xb_n = need;
        }
        for (int64_t r = 0; r < x->n_rows; r++) {
            c->kern->to_bf16(c->xb + r * ld, (const float *)x->data + r * x->n_cols, x->n_cols);
            memset(c->xb + r * ld + x->n_cols, 0, sizeof(uint16_t) * (size_t)(ld - x->n_cols));
        }
        m.xb = c->xb, m.xb_ld = ld, m.small = true;
    }
    m.chunk = m.small ? GEMV_CHUNK : BLAS_CHUNK;
    int64_t n_tasks = 0;
    for (int i = 0; i < n_w; i++) {
        int64_t n_out, n_in;
        m.w[i] = la_cpu_weight(c, k[i], layer, &n_out, &n_in);
        if (!m.w[i] || x->n_cols != n_in || out[i]->n_cols != n_out || out[i]->n_rows != x->n_rows)
            return la_err_set(err, LA_ERR_INTERNAL, "cpu matmul: shape mismatch for weight %d", (int)k[i]);
        m.n_in = n_in;
        m.n_out[i] = n_out;
        m.y[i] = out[i]->data;
        m.bias[i] = bias_of(c, k[i], layer);
        m.chunks[i] = (n_out + m.chunk - 1) / m.chunk;
        if (i < m.n_w) n_tasks += m.chunks[i];
    }
    if (swiglu && m.n_out[0] != m.n_out[1])
        return la_err_set(err, LA_ERR_INTERNAL, "cpu gate_up_swiglu: gate and up differ in width");
    la_parallel_for(c->tp, n_tasks, mm_tasks, &m);
    la_status s = la_cpu_workers_status(c);
    if (s != LA_OK) return la_err_set(err, s, "cpu matmul: a weight tile: out of memory");
    return LA_OK;
}

static la_status cpu_matmul(la_backend *be, const la_act *x, la_weight_kind k, int32_t layer,
                            la_act *out, la_err *err) {
    return matmuls(cpu(be), x, &k, 1, layer, &out, false, err);
}

static la_status cpu_matmul_group(la_backend *be, const la_act *x, const la_weight_kind *w, int32_t n_w, int32_t layer,
                                  la_act *const *out, la_err *err) {
    for (int32_t i = 0; i < n_w; i += 3) LA_TRY(matmuls(cpu(be), x, w + i, n_w - i < 3 ? n_w - i : 3, layer, out + i,
                                                        false, err));
    return LA_OK;
}

static la_status cpu_gate_up_swiglu(la_backend *be, const la_act *x, int32_t layer, la_act *gate, la_act *up,
                                    la_err *err) {
    static const la_weight_kind gate_up[2] = {LA_W_GATE, LA_W_UP};
    return matmuls(cpu(be), x, gate_up, 2, layer, (la_act *const[]){gate, up}, true, err);
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
    const la_backend_shape *m = &c->base.shape;
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
            kv_store(c, kv_at(c, c->k_pool, w->layer, blk, h), off * hd, k + h * hd, hd);
            kv_store(c, kv_at(c, c->v_pool, w->layer, blk, h), off * hd, v + h * hd, hd);
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

static la_status cpu_kv_copy_rotate(la_backend *be, int32_t src, int32_t dst, int32_t n_valid,
                                    int32_t delta, la_err *err) {
    cpu_backend *c = cpu(be);
    const la_backend_shape *m = &c->base.shape;
    int32_t hd = m->head_dim;
    if (src < 0 || src >= c->n_blocks || dst < 0 || dst >= c->n_blocks || n_valid > c->block_size)
        return la_err_set(err, LA_ERR_INTERNAL, "kv_copy_rotate: bad blocks %d -> %d", src, dst);
    /* cos/sin of delta computed directly: delta may be negative (a block moved to an
     * earlier position), where the position table has no row */
    float *cs = malloc(sizeof(float) * (size_t)hd * 2);
    if (!cs) return la_err_set(err, LA_ERR_NO_MEMORY, "kv_copy_rotate: out of memory");
    float *row = cs + hd;
    la_rope_cos_sin(c->inv_freq, hd / 2, (double)delta, cs);
    const size_t bytes = (size_t)n_valid * (size_t)hd * kv_es(c);
    for (int32_t l = 0; l < m->n_layers; l++)
        for (int32_t h = 0; h < m->n_kv_heads; h++) {
            char *ks = kv_at(c, c->k_pool, l, src, h), *kd = kv_at(c, c->k_pool, l, dst, h);
            memmove(kv_at(c, c->v_pool, l, dst, h), kv_at(c, c->v_pool, l, src, h), bytes);
            for (int32_t j = 0; j < n_valid; j++) { /* R(Δ) on the f32 value, stored back */
                c->kern->to_f32(row, ks + (size_t)j * hd * kv_es(c), c->pool_dtype, hd);
                la_rope_apply(row, hd, cs);
                kv_store(c, kd, (int64_t)j * hd, row, hd);
            }
        }
    free(cs);
    return LA_OK;
}

static la_status cpu_kv_read_slot(la_backend *be, int32_t layer, int64_t slot, float *k, float *v,
                                  la_err *err) {
    cpu_backend *c = cpu(be);
    const la_backend_shape *m = &c->base.shape;
    if (slot < 0 || slot >= c->n_blocks * c->block_size)
        return la_err_set(err, LA_ERR_INVALID_ARG, "slot %lld outside the pool", (long long)slot);
    int64_t blk = slot / c->block_size, off = slot % c->block_size;
    const size_t at = (size_t)(off * m->head_dim) * kv_es(c);
    for (int32_t h = 0; h < m->n_kv_heads; h++) {
        c->kern->to_f32(k + h * m->head_dim, (char *)kv_at(c, c->k_pool, layer, blk, h) + at, c->pool_dtype,
                        m->head_dim);
        c->kern->to_f32(v + h * m->head_dim, (char *)kv_at(c, c->v_pool, layer, blk, h) + at, c->pool_dtype,
                        m->head_dim);
    }
    return LA_OK;
}

static la_status cpu_kv_deviation(la_backend *be, int32_t layer, const la_act *v, float *dev, la_err *err) {
    cpu_backend *c = cpu(be);
    const la_backend_shape *m = &c->base.shape;
    const int32_t hd = m->head_dim, kvd = m->n_kv_heads * hd;
    if (layer < 0 || layer >= m->n_layers || v->n_rows != c->batch.n_tokens || v->n_cols != kvd)
        return la_err_set(err, LA_ERR_INTERNAL, "kv_deviation: layer %d, v [%lld, %lld] for %d rows", layer,
                          (long long)v->n_rows, (long long)v->n_cols, c->batch.n_tokens);
    float *row = malloc(sizeof(float) * (size_t)hd);
    if (!row) return la_err_set(err, LA_ERR_NO_MEMORY, "kv_deviation: out of memory");
    const float *vd = v->data;
    for (int32_t t = 0; t < c->batch.n_tokens; t++) {
        const int64_t slot = c->batch.slots[t];
        if (slot < 0 || slot >= c->n_blocks * c->block_size) {
            free(row);
            return la_err_set(err, LA_ERR_INTERNAL, "kv_deviation: slot %lld outside the pool", (long long)slot);
        }
        const int64_t blk = slot / c->block_size, off = slot % c->block_size;
        double sum = 0.0;
        for (int32_t h = 0; h < m->n_kv_heads; h++) {
            c->kern->to_f32(row, (char *)kv_at(c, c->v_pool, layer, blk, h) + (size_t)(off * hd) * kv_es(c),
                            c->pool_dtype, hd);
            for (int32_t j = 0; j < hd; j++) {
                const double d = (double)vd[(int64_t)t * kvd + h * hd + j] - row[j];
                sum += d * d;
            }
        }
        dev[t] = (float)sum;
    }
    free(row);
    return LA_OK;
}

/* ============================================================ KV store copies ======== */

/* One block of one layer, K or V, is contiguous in the pool ([n_kv][B][hd]); a record
 * block is K of every layer, then V of every layer, in the pool's dtype. Copies are done
 * when the call returns: every ticket is 0 and polls done. */
static la_status cpu_kv_copy(cpu_backend *c, const int32_t *ids, int32_t n, void *const *host, bool out,
                             la_err *err) {
    const la_backend_shape *m = &c->base.shape;
    size_t chunk = (size_t)m->n_kv_heads * (size_t)c->block_size * (size_t)m->head_dim * kv_es(c);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->n_blocks)
            return la_err_set(err, LA_ERR_INVALID_ARG, "kv copy: block %d outside the pool of %lld", ids[i],
                              (long long)c->n_blocks);
    for (int32_t i = 0; i < n; i++) {
        char *h = host[i];
        for (int32_t kv = 0; kv < 2; kv++)
            for (int32_t l = 0; l < m->n_layers; l++, h += chunk) {
                void *p = kv_at(c, kv ? c->v_pool : c->k_pool, l, ids[i], 0);
                if (out) memcpy(h, p, chunk);
                else memcpy(p, h, chunk);
            }
    }
    return LA_OK;
}

static la_status cpu_kv_export(la_backend *be, const int32_t *ids, int32_t n, void *const *host, uint64_t *ticket,
                               la_err *err) {
    *ticket = 0;
    return cpu_kv_copy(cpu(be), ids, n, host, true, err);
}

static la_status cpu_kv_import(la_backend *be, const int32_t *ids, int32_t n, const void *const *host,
                               uint64_t *ticket, la_err *err) {
    *ticket = 0;
    return cpu_kv_copy(cpu(be), ids, n, (void *const *)host, false, err);
}

static la_status cpu_kv_copy_poll(la_backend *be, uint64_t ticket, bool wait, bool *done, la_err *err) {
    (void)be, (void)wait;
    *done = true;
    return ticket == 0 ? LA_OK : la_err_set(err, LA_ERR_INVALID_ARG, "kv copy: no ticket %llu",
                                             (unsigned long long)ticket);
}

/* ============================================================ lifecycle ============== */

static void cpu_destroy(la_backend *be) {
    cpu_backend *c = cpu(be);
    la_cpu_free_weights(c);
    free(c->k_pool);
    free(c->v_pool);
    free_batch(c);
    free(c->q_ids[0]);
    free(c->q_ids[1]);
    free(c->attn_mem);
    free(c->xb);
    for (int w = 0; c->scratch && w < c->n_workers; w++) free(c->scratch[w].p);
    free(c->scratch);
    free(c->worker_status);
    la_threadpool_destroy(c->tp);
    free(c);
}

static const la_backend_ops k_cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .load_weights = la_cpu_load_weights,
    .kv_alloc = cpu_kv_alloc,
    .kv_block_bytes = cpu_kv_block_bytes,
    .mem_free_bytes = NULL,
    .act_alloc = cpu_act_alloc,
    .act_free = cpu_act_free,
    .batch_begin = cpu_batch_begin,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .matmul_group = cpu_matmul_group,
    .kv_write = cpu_kv_write,
    .attention = la_cpu_attention,
    .gate_up_swiglu = cpu_gate_up_swiglu,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .add_rmsnorm = cpu_add_rmsnorm,
    .gather_rows = cpu_gather_rows,
    .to_host = cpu_to_host,
    .argmax_begin = cpu_argmax_begin,
    .argmax_end = cpu_argmax_end,
    .kv_copy_rotate = cpu_kv_copy_rotate,
    .kv_read_slot = cpu_kv_read_slot,
    .kv_deviation = cpu_kv_deviation,
    .kv_export = cpu_kv_export,
    .kv_import = cpu_kv_import,
    .kv_copy_poll = cpu_kv_copy_poll,
};

/* OpenBLAS's cores whose SGEMM kernels have no FMA3: the DYNAMIC_ARCH corename table
 * (driver/others/dynamic.c) and "Generic" of a build for no particular CPU. Through 0.3.24
 * its dynamic detection takes Prescott for an Intel family-6 model it has no entry for
 * (0.3.25 on picks by CPU features). 0.3.21 (Debian 12) predates the Xeon of family 6 model
 * 207 (Emerald Rapids) of the GPU machine's host, which prefilled Llama-3.2-1B's shape there
 * at 20 tokens/s with 2 threads, ~25 GFLOP/s a core (SSE3's rate; the core name was not
 * printed there). OPENBLAS_CORETYPE=Prescott on this repository's AVX2 host: 18.8-20.0
 * tokens/s at 512 tokens against 66.1-67.0 with every product on gemm_nt
 * (bench/results/cpu_blas_prescott_ab.md). Newer and unknown names are taken as FMA cores. */
bool la_cpu_blas_core_predates_fma(const char *core) {
    static const char *const old[] = {"Unknown", "Generic", "Katmai", "Coppermine", "Northwood", "Prescott",
                                      "Banias", "Atom", "Core2", "Penryn", "Dunnington", "Nehalem", "Athlon",
                                      "Opteron", "Opteron_SSE3", "Barcelona", "Nano", "Sandybridge", "Bobcat"};
    if (!core) return false;
    for (size_t i = 0; i < sizeof old / sizeof *old; i++)
        if (strcasecmp(core, old[i]) == 0) return true;
    return false;
}

la_status la_cpu_backend_create(int n_threads, la_backend **out, la_err *err) {
    la_cpu_isa cap;
    if (la_cpu_isa_env(&cap) < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "cpu backend: LA_CPU_ISA=%s: expected portable, avx2 or avx512",
                          getenv("LA_CPU_ISA"));
    int64_t max_rows = -1; /* LA_CPU_GEMM_MAX_ROWS (README "CPU backend", a benchmark switch) */
    LA_TRY(la_env_int("LA_CPU_GEMM_MAX_ROWS", 0, INT64_MAX, "rows", &max_rows, err));
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: out of memory");
    c->base.ops = &k_cpu_ops;
    c->q_last = -1;
    c->base.kv_dtype = LA_DTYPE_F32;
    c->base.weight_dtype = LA_WEIGHT_DTYPE_AUTO;
    c->pool_dtype = LA_DTYPE_F32;
    c->kern = la_cpu_kernels_get();
    c->gemm_max_rows_f32 = c->kern->gemm_max_rows_f32;
    c->gemm_max_rows_16bit = c->kern->gemm_max_rows_16bit;
    c->gemm_x_bytes = c->kern->gemm_x_bytes;
    if (c->kern->isa != LA_CPU_ISA_PORTABLE && la_cpu_blas_core_predates_fma(openblas_get_corename()))
        c->gemm_max_rows_f32 = c->gemm_max_rows_16bit = c->gemm_x_bytes = INT64_MAX;
    if (max_rows >= 0) c->gemm_max_rows_f32 = c->gemm_max_rows_16bit = max_rows, c->gemm_x_bytes = 0;
    la_status s = la_threadpool_create(n_threads, &c->tp, err);
    if (s != LA_OK) {
        free(c);
        return s;
    }
    c->n_workers = la_threadpool_size(c->tp);
    c->scratch = calloc((size_t)c->n_workers, sizeof *c->scratch);
    c->worker_status = calloc((size_t)c->n_workers, sizeof *c->worker_status);
    if (!c->scratch || !c->worker_status) {
        cpu_destroy(&c->base);
        return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: out of memory");
    }
    openblas_set_num_threads(1); /* parallelism comes from our pool (see top of file) */
    *out = &c->base;
    return LA_OK;
}

const char *la_cpu_backend_isa(const la_backend *be) {
    return be && be->ops == &k_cpu_ops ? ((const cpu_backend *)be)->kern->name : NULL;
}

bool la_cpu_backend_gemm_route(const la_backend *be, la_cpu_gemm_route *out) {
    if (!be || be->ops != &k_cpu_ops) return false;
    const cpu_backend *c = (const cpu_backend *)be;
    const char *config = openblas_get_config();
    *out = (la_cpu_gemm_route){.blas_core = openblas_get_corename(),
                               .blas_dynamic = config && strstr(config, "DYNAMIC_ARCH"),
                               .max_rows_f32 = c->gemm_max_rows_f32,
                               .max_rows_16bit = c->gemm_max_rows_16bit, .x_bytes = c->gemm_x_bytes};
    return true;
}
