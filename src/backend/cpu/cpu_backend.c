/* CPU backend (backend/backend.h): f32 activations; weights kept in the checkpoint's dtype
 * (f32, bf16 or f16; la_backend.weight_dtype) and the KV cache in f32 or bf16
 * (la_backend.kv_dtype).
 *
 * Kernels (cpu_kernels.h): a table per instruction set picked at run time (AVX-512, AVX2,
 * portable C). Matrix products of up to 128 rows (f32 weights) or 256 (bf16, f16), or of an
 * x of up to 4 MiB, run our gemm_nt kernel on the weight in its own dtype (or, with
 * la_backend.bf16_dot, gemm_nt_bf16x on bf16 activations at every row count); larger ones
 * (prefill of wide models) OpenBLAS sgemm, a weight tile unpacked (and widened) to
 * row-major f32 first. Attention is ours at every row count: an online softmax over the
 * block table, one KV block at a time.
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
#include <sys/mman.h>

#include "backend/cpu/cpu_kernels.h"
#include "backend/rope.h"
#include "base/dtype.h"
#include "base/err.h"
#include "base/threadpool.h"

/* Matrix products run gemm_nt where it beats OpenBLAS, one thread (bench/bench_cpu_gemm.c,
 * bench/results/cpu_gemm_shapes.json): up to 128 rows on f32 weights, 256 on bf16 / f16, and
 * at any row count while x (rows x n_in f32) stays within GEMM_X_BYTES (its 4 x 4 tiles sweep
 * x once per 4 weight rows: at 1024 rows of a 2048x8192 weight, 32 MiB of x, that is 36
 * against OpenBLAS's 67 GFLOP/s; at 1024 rows of 1024x384, 1.5 MiB, 93 against 81).
 * LA_CPU_GEMM_MAX_ROWS=N makes it N rows on every weight (a benchmark switch and a test
 * hook). */
#define GEMM_MAX_ROWS_F32 128
#define GEMM_MAX_ROWS_16BIT 256
#define GEMM_X_BYTES ((int64_t)4 << 20)
/* Output columns per task of a weight product: gemm_nt (a multiple of LA_CPU_PACK_ROWS) / a
 * BLAS tile (unpacked to f32 in the worker's scratch, 64 rows of n_in floats). */
#define GEMV_CHUNK 16
#define BLAS_CHUNK 64
/* Attention splits a sequence's blocks over several tasks when it has at most this many
 * query rows (decode) and at least twice ATTN_SPLIT_MIN_BLOCKS blocks. */
#define ATTN_SPLIT_MAX_ROWS 16
#define ATTN_SPLIT_MIN_BLOCKS 16
/* From this many rows of a sequence (prefill), attention reads keys transposed 16 at a time
 * (attn_block_kt; head_dim a multiple of 16): the transpose is paid once for rows x heads
 * queries. */
#define ATTN_KT_MIN_ROWS 4

/* One weight in memory: a matrix [n_out, n_in] packed for the kernels (cpu_kernels.h:
 * groups of 4 rows, 16-element pieces) in dtype; norms and biases plain f32 vectors. */
typedef struct cpu_weight {
    void *data; /* NULL: the model has no such tensor */
    la_dtype dtype;
} cpu_weight;

typedef struct cpu_layer {
    cpu_weight w[LA_W_KIND_COUNT];
} cpu_layer;

/* A worker's scratch, grown on demand (attention's queries and state, a widened weight tile). */
typedef struct cpu_scratch {
    float *p;
    size_t n; /* floats */
} cpu_scratch;

typedef struct cpu_backend {
    la_backend base;
    la_threadpool *tp;
    const la_cpu_kernels *kern;
    int64_t gemm_max_rows_f32, gemm_max_rows_16bit, gemm_x_bytes;
    int n_workers;
    cpu_scratch *scratch; /* [n_workers] */
    la_status *worker_status; /* [n_workers]: LA_ERR_NO_MEMORY where a worker's scratch failed */
    /* weights */
    cpu_weight embed;   /* [vocab, hidden] */
    cpu_weight lm_head; /* [vocab, hidden]; .data == embed.data when tied (not owned twice) */
    float *final_norm;  /* [hidden] */
    cpu_layer *layers;
    int32_t n_layers;
    float *inv_freq;    /* [head_dim / 2] */
    float *rope_cs;     /* [rope_n][head_dim / 2][cos, sin]: RoPE table by position */
    int64_t rope_n;     /* positions in the table */
    /* KV pool */
    void *k_pool, *v_pool; /* [n_layers][n_blocks][n_kv][B][hd] of base.kv_dtype */
    int64_t n_blocks;
    int32_t block_size;
    la_dtype pool_dtype; /* the dtype the pool was allocated in */
    /* x rounded to bf16 for gemm_nt_bf16x (la_backend.bf16_dot), grown on demand */
    uint16_t *xb;
    size_t xb_n;
    /* attention's per-call arrays, grown on demand */
    void *attn_mem;
    size_t attn_mem_bytes;
    /* current batch (borrowed copy of the caller's arrays) */
    la_batch batch;
    int32_t *b_tokens, *b_pos, *b_kpos, *b_logit_rows;
    int64_t *b_slots;
    la_batch_seq *b_seqs;
    la_attn_block *b_blocks;
} cpu_backend;

static cpu_backend *cpu(la_backend *be) { return (cpu_backend *)be; }

/* Memory for weights and the KV pool (free with free()): 2 MiB-aligned and, from 2 MiB on,
 * asked for transparent huge pages (madvise mode: the kernel default here). A decode step
 * streams the weights once: with 4 KiB pages the hardware prefetcher stops at every page
 * boundary and the TLB misses every page. zero: zero-filled. NULL when out of memory. */
static void *big_alloc(size_t bytes, bool zero) {
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
static float *scratch_get(cpu_backend *c, int w, size_t n) {
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
static la_status workers_status(cpu_backend *c) {
    la_status s = LA_OK;
    for (int w = 0; w < c->n_workers; w++) {
        if (s == LA_OK) s = c->worker_status[w];
        c->worker_status[w] = LA_OK;
    }
    return s;
}

/* ============================================================ weights ================ */

/* Whether kind k is a matrix the products read (kept in the weight dtype); norms and
 * biases stay f32. */
static bool kind_is_matrix(int k) {
    return k == LA_W_Q || k == LA_W_K || k == LA_W_V || k == LA_W_O || k == LA_W_GATE || k == LA_W_UP ||
           k == LA_W_DOWN || k == LA_W_LM_HEAD || k == LA_W_EMBED;
}

/* The dtype a matrix whose checkpoint dtype is src is kept in: la_backend.weight_dtype when
 * set, else src where the kernels convert it fast, else f32. */
static la_dtype matrix_dtype(const cpu_backend *c, la_dtype src) {
    if (c->base.weight_dtype >= 0 && c->base.weight_dtype < LA_DTYPE_COUNT) return (la_dtype)c->base.weight_dtype;
    return la_cpu_dtype_fast(src) ? src : LA_DTYPE_F32;
}

/* n elements of f32 src to dst of dtype t (bf16 / f16: rounded to nearest even). */
static void from_f32(void *dst, la_dtype t, const float *src, size_t n) {
    if (t == LA_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
    } else {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = t == LA_DTYPE_BF16 ? la_f32_to_bf16(src[i]) : la_f32_to_f16(src[i]);
    }
}

/* A weight matrix [n_out, n_in] of dtype st at src, packed for the kernels in dtype want
 * (cpu_kernels.h). */
static la_status load_matrix(const char *name, const void *src, la_dtype st, int64_t n_out, int64_t n_in,
                             la_dtype want, cpu_weight *out, la_err *err) {
    size_t n = (size_t)la_cpu_packed_elems(n_out, n_in);
    void *p = big_alloc(n * la_dtype_size(want), false);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory (%zu elements)", name, n);
    la_cpu_pack(p, want, src, st, n_out, n_in);
    out->data = p;
    out->dtype = want;
    return LA_OK;
}

/* Tensor t into memory of dtype want: a matrix packed, a vector (norm, bias) as it is. */
static la_status load_tensor(const cpu_backend *c, const la_tensor_view *t, bool matrix, la_dtype want,
                             cpu_weight *out, la_err *err) {
    if (matrix) return load_matrix(t->name, t->data, t->dtype, t->n_out, t->n_in, want, out, err);
    size_t n = (size_t)(t->n_out * t->n_in);
    float *p = malloc(n * sizeof(float) + 1);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory (%zu elements)", t->name, n);
    c->kern->to_f32(p, t->data, t->dtype, (int64_t)n);
    out->data = p;
    out->dtype = LA_DTYPE_F32;
    return LA_OK;
}

static void free_weights(cpu_backend *c) {
    if (c->lm_head.data != c->embed.data) free(c->lm_head.data);
    free(c->embed.data);
    free(c->final_norm);
    for (int32_t l = 0; l < c->n_layers; l++)
        for (int k = 0; k < LA_W_KIND_COUNT; k++) free(c->layers[l].w[k].data);
    free(c->layers);
    free(c->inv_freq);
    c->base.shape.rope_inv_freq = NULL;
    free(c->rope_cs);
    c->rope_cs = NULL;
    c->rope_n = 0;
    c->embed.data = c->lm_head.data = NULL;
    c->final_norm = c->inv_freq = NULL;
    c->layers = NULL;
    c->n_layers = 0;
}

/* Random weights (w == NULL): uniform with std INIT_STD (as tools/write_random_checkpoint),
 * norm weights 1; each value a pure function of (tensor, index) through splitmix64.
 * Layer l's kind k is tensor 16 + l * RANDOM_KINDS_PER_LAYER + k: a constant, not
 * LA_W_KIND_COUNT, so that new weight kinds leave every value as it was. */
#define INIT_STD 0.02
#define RANDOM_KINDS_PER_LAYER 11

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

/* Random tensor (above), [n_out, n_in]: a matrix packed in dtype t, a vector f32. */
static la_status random_tensor(int64_t n_out, int64_t n_in, uint64_t tensor_id, bool norm, bool matrix, la_dtype t,
                               cpu_weight *out, la_err *err) {
    float *p = NULL;
    LA_TRY(random_f32(n_out * n_in, tensor_id, norm, &p, err));
    if (!matrix) {
        out->data = p;
        out->dtype = LA_DTYPE_F32;
        return LA_OK;
    }
    la_status s = load_matrix("random weights", p, LA_DTYPE_F32, n_out, n_in, t, out, err);
    free(p);
    return s;
}

static la_status random_weights(cpu_backend *c, const la_backend_shape *m, la_err *err) {
    int64_t d = m->hidden_size;
    const la_dtype wt = matrix_dtype(c, LA_DTYPE_F32);
    cpu_weight norm;
    LA_TRY(random_tensor(m->vocab_size, d, 1, false, true, wt, &c->embed, err));
    LA_TRY(random_tensor(1, d, 2, true, false, LA_DTYPE_F32, &norm, err));
    c->final_norm = norm.data;
    if (m->tie_word_embeddings) c->lm_head = c->embed;
    else LA_TRY(random_tensor(m->vocab_size, d, 3, false, true, wt, &c->lm_head, err));
    for (int32_t l = 0; l < m->n_layers; l++)
        for (int k = 0; k < LA_W_FINAL_NORM; k++) { /* the per-layer kinds the model has */
            int64_t o, i;
            la_weight_shape(m, (la_weight_kind)k, &o, &i);
            if (o == 0) continue;
            /* the kinds after LA_W_DOWN in a tensor-id space of their own */
            uint64_t id = k <= LA_W_DOWN ? 16 + (uint64_t)l * RANDOM_KINDS_PER_LAYER + (uint64_t)k
                                         : ((uint64_t)1 << 40) + (uint64_t)l * 64 + (uint64_t)k;
            bool is_norm = k == LA_W_ATTN_NORM || k == LA_W_MLP_NORM || k == LA_W_Q_NORM || k == LA_W_K_NORM;
            LA_TRY(random_tensor(o, i, id, is_norm, kind_is_matrix(k), wt, &c->layers[l].w[k], err));
        }
    return LA_OK;
}

static la_status cpu_load_weights(la_backend *be, const la_backend_shape *shape,
                                  const la_weight_table *w, la_err *err) {
    cpu_backend *c = cpu(be);
    free_weights(c);
    c->base.shape = *shape;
    c->base.shape.rope_inv_freq = NULL;
    c->layers = calloc((size_t)shape->n_layers, sizeof(cpu_layer));
    c->inv_freq = malloc(sizeof(float) * (size_t)(shape->head_dim / 2));
    if (!c->layers || !c->inv_freq) {
        free_weights(c);
        return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: out of memory");
    }
    c->n_layers = shape->n_layers;
    memcpy(c->inv_freq, shape->rope_inv_freq, sizeof(float) * (size_t)(shape->head_dim / 2));
    c->base.shape.rope_inv_freq = c->inv_freq;
    if (!w) {
        la_status s = random_weights(c, shape, err);
        if (s != LA_OK) free_weights(c);
        return s;
    }
    const la_tensor_view *embed = la_weight_table_at(w, LA_W_EMBED, 0);
    const la_tensor_view *lm_head = la_weight_table_at(w, LA_W_LM_HEAD, 0);
    cpu_weight norm = {0};
    la_status s = load_tensor(c, embed, true, matrix_dtype(c, embed->dtype), &c->embed, err);
    if (s == LA_OK) s = load_tensor(c, la_weight_table_at(w, LA_W_FINAL_NORM, 0), false, LA_DTYPE_F32, &norm, err);
    c->final_norm = norm.data;
    if (s == LA_OK) {
        if (lm_head->data == embed->data) c->lm_head = c->embed;
        else s = load_tensor(c, lm_head, true, matrix_dtype(c, lm_head->dtype), &c->lm_head, err);
    }
    for (int32_t l = 0; s == LA_OK && l < shape->n_layers; l++)
        for (int k = 0; s == LA_OK && k < LA_W_FINAL_NORM; k++) { /* the per-layer kinds */
            const la_tensor_view *t = la_weight_table_at(w, (la_weight_kind)k, l);
            int64_t o, i;
            la_weight_shape(shape, (la_weight_kind)k, &o, &i);
            if (o > 0 && !t->data)
                s = la_err_set(err, LA_ERR_INVALID_ARG, "cpu backend: layer %d lacks weight kind %d", (int)l, k);
            else if (t->data)
                s = load_tensor(c, t, kind_is_matrix(k), matrix_dtype(c, t->dtype), &c->layers[l].w[k], err);
        }
    if (s != LA_OK) free_weights(c);
    return s;
}

/* Weight of kind k and its [n_out, n_in] shape (NULL for an unknown kind or one the model
 * lacks). */
static const cpu_weight *weight(cpu_backend *c, la_weight_kind k, int32_t layer, int64_t *n_out, int64_t *n_in) {
    int64_t o, i;
    la_weight_shape(&c->base.shape, k, &o, &i);
    if (o == 0) return NULL;
    if (n_out) *n_out = o;
    if (n_in) *n_in = i;
    const cpu_weight *w = k == LA_W_LM_HEAD ? &c->lm_head : k == LA_W_EMBED ? &c->embed : &c->layers[layer].w[k];
    return w->data ? w : NULL;
}

/* An f32 vector weight (norms, biases). */
static const float *vec_weight(cpu_backend *c, la_weight_kind k, int32_t layer) {
    if (k == LA_W_FINAL_NORM) return c->final_norm;
    return c->layers[layer].w[k].data;
}

/* ============================================================ KV pool ================ */

static size_t kv_es(const cpu_backend *c) { return la_dtype_size(c->pool_dtype); }

static int64_t kv_layer_elems(const cpu_backend *c) {
    const la_backend_shape *m = &c->base.shape;
    return c->n_blocks * m->n_kv_heads * c->block_size * m->head_dim;
}

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
    c->k_pool = big_alloc(n * la_dtype_size(be->kv_dtype), true);
    c->v_pool = big_alloc(n * la_dtype_size(be->kv_dtype), true);
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

/* [block_size, head_dim] of (layer, block, kv head), elements of pool_dtype. */
static void *kv_at(cpu_backend *c, void *pool, int32_t layer, int64_t block, int32_t kvh) {
    const la_backend_shape *m = &c->base.shape;
    return (char *)pool + (size_t)(layer * kv_layer_elems(c) + ((block * m->n_kv_heads + kvh) * c->block_size) *
                                                                   m->head_dim) * kv_es(c);
}

/* Store n f32 values at element off of a pool row (converted to the pool's dtype). */
static void kv_store(cpu_backend *c, void *row, int64_t off, const float *src, int32_t n) {
    from_f32((char *)row + (size_t)off * kv_es(c), c->pool_dtype, src, (size_t)n);
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

/* The table row of position pos (0 <= pos < rope_n). */
static const float *rope_row(const cpu_backend *c, int64_t pos) {
    return c->rope_cs + pos * c->base.shape.head_dim;
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
    rows_ctx r = {c, x->data, out->data, vec_weight(c, w, layer), x->n_cols, (float)c->base.shape.rms_norm_eps, NULL};
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
    rows_ctx r = {c, y->data, x->data, vec_weight(c, w, layer), x->n_cols, (float)c->base.shape.rms_norm_eps,
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
    float *wf = scratch_get(m->c, worker, (size_t)((c1 - c0) * m->n_in));
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
    const cpu_weight *w0 = weight(c, k[0], layer, NULL, NULL);
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
        m.w[i] = weight(c, k[i], layer, &n_out, &n_in);
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
    la_status s = workers_status(c);
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

/* ============================================================ attention ============== */

/* Paged attention as an online softmax (FlashAttention's recurrence on the CPU): a task
 * holds, for each query vector of one (sequence, KV head) -- the GQA group's heads times the
 * sequence's rows -- a running max mx, sum l and unnormalized output acc[head_dim], and folds
 * in one KV block at a time: the block is read once for every query of the group, and the
 * causal mask of a block is a prefix of its slots (slot j is kept for a query at position p
 * iff j < n_valid and pos0 + j <= p). Queries are rotated once per run of blocks sharing
 * q_delta (lazy: once per document), mepic blocks' keys once per block into scratch.
 *
 * A decode sequence's blocks are cut into ranges run as separate tasks; each range leaves
 * (mx, l, acc) per query and a merge rescales them to the largest max:
 *   out = sum_r acc_r e^(mx_r - M) / sum_r l_r e^(mx_r - M),  M = max_r mx_r. */
typedef struct attn_task {
    int32_t seq, kvh;
    int32_t b0, b1;  /* blocks [b0, b1) of the sequence's list */
    int32_t n_split; /* ranges of this (seq, kvh); 1: the task writes out itself */
    int64_t part;    /* first float of its partial state in attn_ctx.part (n_split > 1) */
} attn_task;

typedef struct {
    cpu_backend *c;
    int32_t layer;
    const float *q;
    float *out;
    const attn_task *tasks;
    float *part;            /* [tasks with n_split > 1][G * n_rows][2 + head_dim]: mx, l, acc */
    const int32_t *merge0;  /* (seq, kvh) -> its first task, for the merge */
} attn_ctx;

static void attn_run(attn_ctx *a, const attn_task *t, int worker) {
    cpu_backend *c = a->c;
    const la_cpu_kernels *kn = c->kern;
    const la_backend_shape *m = &c->base.shape;
    const la_batch *b = &c->batch;
    const la_batch_seq *sq = &b->seqs[t->seq];
    const la_attn_block *blocks = b->blocks + sq->block0;
    const int32_t hd = m->head_dim, B = c->block_size, G = m->n_heads / m->n_kv_heads, n_q = sq->n_rows;
    const int32_t nQ = G * n_q;
    const int64_t qstride = (int64_t)m->n_heads * hd;
    const float scale = (float)(1.0 / sqrt((double)hd));
    const la_dtype kvt = c->pool_dtype;
    const size_t st = (size_t)hd + 2; /* state floats per query: mx, l, acc */
    /* prefill (several rows): each block's keys transposed, 16 at a time, for attn_block_kt */
    const bool use_kt = n_q >= ATTN_KT_MIN_ROWS && hd % 16 == 0;
    float *Q = scratch_get(c, worker, (size_t)nQ * hd + (size_t)nQ * st + 2 * (size_t)B * hd + 16 * (size_t)hd);
    if (!Q) return;
    float *S = t->n_split > 1 ? a->part + t->part : Q + (size_t)nQ * hd;
    float *Kr = Q + (size_t)nQ * hd + (size_t)nQ * st, *Vr = Kr + (size_t)B * hd, *Kt = Vr + (size_t)B * hd;
    for (int32_t i = 0; i < nQ; i++) {
        float *sti = S + (size_t)i * st;
        sti[0] = -INFINITY, sti[1] = 0.0f;
        memset(sti + 2, 0, sizeof(float) * (size_t)hd);
    }
    int32_t max_pos = INT32_MIN;
    for (int32_t i = 0; i < n_q; i++)
        if (b->pos[sq->row0 + i] > max_pos) max_pos = b->pos[sq->row0 + i];
    bool rotated = false;
    int32_t delta = 0;
    for (int32_t bi = t->b0; bi < t->b1; bi++) {
        const la_attn_block *blk = &blocks[bi];
        if (blk->n_valid <= 0 || blk->pos0 > max_pos) continue;
        if (!rotated || blk->q_delta != delta) { /* queries at p - delta, query vector hh * n_q + i */
            delta = blk->q_delta;
            rotated = true;
            for (int32_t hh = 0; hh < G; hh++)
                for (int32_t i = 0; i < n_q; i++) {
                    const int32_t row = sq->row0 + i;
                    float *qi = Q + ((size_t)hh * n_q + i) * hd;
                    memcpy(qi, a->q + row * qstride + (int64_t)(t->kvh * G + hh) * hd, sizeof(float) * (size_t)hd);
                    la_rope_apply(qi, hd, rope_row(c, (int64_t)b->pos[row] - delta));
                }
        }
        const void *K = kv_at(c, c->k_pool, a->layer, blk->block_id, t->kvh);
        const void *V = kv_at(c, c->v_pool, a->layer, blk->block_id, t->kvh);
        if (bi + 1 < t->b1) { /* the next block's K and V: scattered in the pool, no prefetcher finds them */
            const char *nk = kv_at(c, c->k_pool, a->layer, blocks[bi + 1].block_id, t->kvh);
            const char *nv = kv_at(c, c->v_pool, a->layer, blocks[bi + 1].block_id, t->kvh);
            const size_t bytes = (size_t)blocks[bi + 1].n_valid * (size_t)hd * kv_es(c);
            for (size_t off = 0; off < bytes; off += 64) {
                __builtin_prefetch(nk + off);
                __builtin_prefetch(nv + off);
            }
        }
        la_dtype kt = kvt;
        if (blk->k_rope || (kvt != LA_DTYPE_F32 && nQ > 1)) {
            /* a bf16 block read by several queries: widened once for all of them (L1-resident);
             * mepic: slot j's key rotated at pos0 + j */
            kn->to_f32(Kr, K, kvt, (int64_t)blk->n_valid * hd);
            if (blk->k_rope)
                for (int32_t j = 0; j < blk->n_valid; j++)
                    la_rope_apply(Kr + (size_t)j * hd, hd, rope_row(c, (int64_t)blk->pos0 + j));
            K = Kr;
            if (kvt != LA_DTYPE_F32) {
                kn->to_f32(Vr, V, kvt, (int64_t)blk->n_valid * hd);
                V = Vr;
            }
            kt = LA_DTYPE_F32;
        }
        if (use_kt) { /* K and V are f32 here (nQ > 1 widened a bf16 block above) */
            for (int32_t j0 = 0; j0 < blk->n_valid; j0 += 16) {
                const int32_t nk = blk->n_valid - j0 < 16 ? blk->n_valid - j0 : 16;
                const float *Kf = (const float *)K + (size_t)j0 * hd, *Vf = (const float *)V + (size_t)j0 * hd;
                for (int32_t j = 0; j < nk; j++)
                    for (int32_t d = 0; d < hd; d++) Kt[d * 16 + j] = Kf[(size_t)j * hd + d];
                for (int32_t i = 0; i < n_q; i++) {
                    int64_t n_eff = (int64_t)b->pos[sq->row0 + i] - blk->pos0 + 1 - j0;
                    if (n_eff > nk) n_eff = nk;
                    if (n_eff <= 0) continue;
                    kn->attn_block_kt(Q + (size_t)i * hd, (int64_t)n_q * hd, G, Kt, Vf, (int32_t)n_eff, hd, scale,
                                      S + (size_t)i * st, (int64_t)n_q * (int64_t)st);
                }
            }
            continue;
        }
        for (int32_t i = 0; i < n_q; i++) {
            int64_t n_eff = (int64_t)b->pos[sq->row0 + i] - blk->pos0 + 1;
            if (n_eff > blk->n_valid) n_eff = blk->n_valid;
            if (n_eff <= 0) continue;
            for (int32_t hh = 0; hh < G; hh++) {
                const size_t qi = (size_t)hh * n_q + i;
                float *sti = S + qi * st;
                kn->attn_block(Q + qi * hd, K, V, kt, (int32_t)n_eff, hd, scale, sti);
            }
        }
    }
    if (t->n_split > 1) return; /* the merge writes out */
    for (int32_t hh = 0; hh < G; hh++)
        for (int32_t i = 0; i < n_q; i++) {
            const float *sti = S + ((size_t)hh * n_q + i) * st;
            float *o = a->out + (int64_t)(sq->row0 + i) * qstride + (int64_t)(t->kvh * G + hh) * hd;
            float inv = sti[1] > 0 ? 1.0f / sti[1] : 0.0f;
            for (int32_t d = 0; d < hd; d++) o[d] = sti[2 + d] * inv;
        }
}

static void attn_tasks(void *p, int64_t b, int64_t e, int worker) {
    attn_ctx *a = p;
    for (int64_t t = b; t < e; t++) attn_run(a, &a->tasks[t], worker);
}

/* The merge of a split (sequence, KV head)'s ranges. */
static void attn_merge(void *p, int64_t b, int64_t e, int worker) {
    attn_ctx *a = p;
    const la_backend_shape *m = &a->c->base.shape;
    const int32_t hd = m->head_dim, G = m->n_heads / m->n_kv_heads;
    const int64_t qstride = (int64_t)m->n_heads * hd;
    const size_t st = (size_t)hd + 2;
    for (int64_t pair = b; pair < e; pair++) {
        const attn_task *t0 = &a->tasks[a->merge0[pair]];
        if (t0->n_split <= 1) continue;
        const la_batch_seq *sq = &a->c->batch.seqs[t0->seq];
        const int32_t n_q = sq->n_rows;
        for (int32_t hh = 0; hh < G; hh++)
            for (int32_t i = 0; i < n_q; i++) {
                const size_t qi = (size_t)hh * n_q + i;
                float M = -INFINITY, L = 0.0f;
                for (int32_t r = 0; r < t0->n_split; r++) {
                    const float *sr = a->part + t0[r].part + qi * st;
                    if (sr[0] > M) M = sr[0];
                }
                float *o = a->out + (int64_t)(sq->row0 + i) * qstride + (int64_t)(t0->kvh * G + hh) * hd;
                memset(o, 0, sizeof(float) * (size_t)hd);
                if (M == -INFINITY) continue; /* no key visible: 0, as an empty softmax */
                for (int32_t r = 0; r < t0->n_split; r++) {
                    const float *sr = a->part + t0[r].part + qi * st;
                    if (sr[1] <= 0.0f) continue;
                    float w = expf(sr[0] - M);
                    L += sr[1] * w;
                    for (int32_t d = 0; d < hd; d++) o[d] += sr[2 + d] * w;
                }
                float inv = L > 0 ? 1.0f / L : 0.0f;
                for (int32_t d = 0; d < hd; d++) o[d] *= inv;
            }
    }
}

/* Ranges a sequence's blocks are cut into: one, or for a decode sequence (few rows) among
 * fewer (sequence, KV head) pairs than the tasks wanted, enough to reach them, each range at
 * least ATTN_SPLIT_MIN_BLOCKS blocks. */
static int64_t attn_split(const la_batch_seq *sq, int64_t pairs, int64_t want) {
    if (sq->n_rows > ATTN_SPLIT_MAX_ROWS || pairs >= want) return 1;
    int64_t split = (want + pairs - 1) / pairs;
    if (split > sq->n_blocks / ATTN_SPLIT_MIN_BLOCKS) split = sq->n_blocks / ATTN_SPLIT_MIN_BLOCKS;
    return split < 1 ? 1 : split;
}

static la_status cpu_attention(la_backend *be, int32_t layer, const la_act *q, la_act *out,
                               la_err *err) {
    cpu_backend *c = cpu(be);
    const la_batch *b = &c->batch;
    const la_backend_shape *m = &c->base.shape;
    for (int32_t i = 0; i < b->n_blocks; i++) {
        const la_attn_block *blk = &b->blocks[i];
        if (blk->block_id < 0 || blk->block_id >= c->n_blocks || blk->n_valid < 0 ||
            blk->n_valid > c->block_size)
            return la_err_set(err, LA_ERR_INTERNAL, "attention: bad block %d (n_valid %d)",
                              blk->block_id, blk->n_valid);
    }
    for (int32_t s = 0; s < b->n_seqs; s++) { /* lazy: p - Δ must stay >= 0 */
        const la_batch_seq *sq = &b->seqs[s];
        int32_t min_pos = INT32_MAX;
        for (int32_t r = sq->row0; r < sq->row0 + sq->n_rows; r++)
            if (b->pos[r] < min_pos) min_pos = b->pos[r];
        for (int32_t i = sq->block0; i < sq->block0 + sq->n_blocks; i++)
            if (b->blocks[i].q_delta < 0 || b->blocks[i].q_delta > min_pos)
                return la_err_set(err, LA_ERR_INTERNAL, "attention: q_delta %d outside [0, %d]",
                                  b->blocks[i].q_delta, min_pos);
    }
    /* Tasks: (seq, kv head, block range); a decode sequence with few (seq, kv head) pairs
     * beside the workers is cut into ranges of at least ATTN_SPLIT_MIN_BLOCKS blocks. */
    const int32_t nkv = m->n_kv_heads, G = m->n_heads / nkv;
    const int64_t pairs = (int64_t)b->n_seqs * nkv;
    const int64_t want = 4 * (int64_t)c->n_workers; /* tasks wanted, for balance */
    int64_t n_tasks = 0, part_floats = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        const int64_t split = attn_split(sq, pairs, want);
        n_tasks += split * nkv;
        if (split > 1) part_floats += split * nkv * (int64_t)G * sq->n_rows * (m->head_dim + 2);
    }
    size_t bytes = (size_t)n_tasks * sizeof(attn_task) + (size_t)pairs * sizeof(int32_t) +
                   (size_t)part_floats * sizeof(float) + 64;
    if (c->attn_mem_bytes < bytes) {
        void *p = realloc(c->attn_mem, bytes);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "attention: %zu bytes of task state: out of memory", bytes);
        c->attn_mem = p;
        c->attn_mem_bytes = bytes;
    }
    attn_task *tasks = c->attn_mem;
    int32_t *merge0 = (int32_t *)(tasks + n_tasks);
    float *part = (float *)(((uintptr_t)(merge0 + pairs) + 63) & ~(uintptr_t)63);
    int64_t nt = 0, pf = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        const int64_t split = attn_split(sq, pairs, want);
        for (int32_t g = 0; g < nkv; g++) {
            merge0[(int64_t)s * nkv + g] = (int32_t)nt;
            for (int64_t r = 0; r < split; r++) {
                attn_task *t = &tasks[nt++];
                t->seq = s, t->kvh = g, t->n_split = (int32_t)split;
                t->b0 = (int32_t)(sq->n_blocks * r / split);
                t->b1 = (int32_t)(sq->n_blocks * (r + 1) / split);
                t->part = split > 1 ? pf : 0;
                if (split > 1) pf += (int64_t)G * sq->n_rows * (m->head_dim + 2);
            }
        }
    }
    attn_ctx a = {c, layer, q->data, out->data, tasks, part, merge0};
    la_parallel_for(c->tp, n_tasks, attn_tasks, &a);
    la_status s = workers_status(c);
    if (s != LA_OK) return la_err_set(err, s, "attention: scratch: out of memory");
    if (part_floats > 0) la_parallel_for(c->tp, pairs, attn_merge, &a);
    return LA_OK;
}

/* ============================================================ block copy ============= */

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
    free_weights(c);
    free(c->k_pool);
    free(c->v_pool);
    free_batch(c);
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
    .matmul_group = cpu_matmul_group,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .gate_up_swiglu = cpu_gate_up_swiglu,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .add_rmsnorm = cpu_add_rmsnorm,
    .gather_rows = cpu_gather_rows,
    .to_host = cpu_to_host,
    .kv_copy_rotate = cpu_kv_copy_rotate,
    .kv_read_slot = cpu_kv_read_slot,
    .kv_export = cpu_kv_export,
    .kv_import = cpu_kv_import,
    .kv_copy_poll = cpu_kv_copy_poll,
};

la_status la_cpu_backend_create(int n_threads, la_backend **out, la_err *err) {
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: out of memory");
    c->base.ops = &k_cpu_ops;
    c->base.kv_dtype = LA_DTYPE_F32;
    c->base.weight_dtype = LA_WEIGHT_DTYPE_AUTO;
    c->pool_dtype = LA_DTYPE_F32;
    c->kern = la_cpu_kernels_get();
    c->gemm_max_rows_f32 = GEMM_MAX_ROWS_F32;
    c->gemm_max_rows_16bit = GEMM_MAX_ROWS_16BIT;
    c->gemm_x_bytes = GEMM_X_BYTES;
    const char *env = getenv("LA_CPU_GEMM_MAX_ROWS"); /* a benchmark switch (README "CPU backend") */
    if (env && *env) c->gemm_max_rows_f32 = c->gemm_max_rows_16bit = strtoll(env, NULL, 10), c->gemm_x_bytes = 0;
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
