/* The CPU backend's state and what its files share (internal to src/backend/cpu):
 * cpu_backend.c the ops table, activations, products, the KV pool's writes and copies;
 * cpu_weights.c loading and packing the weights (and random ones); cpu_attention.c paged
 * attention. The layout of weights and KV pool: cpu_backend.c's top comment. */
#ifndef LA_BACKEND_CPU_CPU_INTERNAL_H
#define LA_BACKEND_CPU_CPU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "base/dtype.h"
#include "base/threadpool.h"

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
    /* argmax_begin's results (backend.h): a ring of two, q_head the oldest not ended, q_count
     * pending; q_last the slot the latest begin wrote (LA_TOKEN_PREV reads it), -1: none */
    int32_t *q_ids[2];
    int32_t q_n[2], q_cap[2];
    int32_t q_head, q_count, q_last;
} cpu_backend;

static inline cpu_backend *cpu(la_backend *be) { return (cpu_backend *)be; }

/* ---- cpu_backend.c ---- */

/* Memory for weights and the KV pool (free with free()): from 2 MiB on, 2 MiB-aligned and
 * asked for transparent huge pages; zero: zero-filled. NULL when out of memory. */
void *la_cpu_big_alloc(size_t bytes, bool zero);

/* Worker w's scratch of at least n floats; NULL (and the worker's status set) when out of
 * memory. Owned by the backend. */
float *la_cpu_scratch_get(cpu_backend *c, int w, size_t n);

/* LA_OK, or the first worker's failure since the last call (statuses reset). */
la_status la_cpu_workers_status(cpu_backend *c);

/* ---- cpu_weights.c ---- */

/* n elements of f32 src to dst of dtype t (f32, bf16 or f16; rounded to nearest even). */
void la_cpu_from_f32(void *dst, la_dtype t, const float *src, size_t n);

/* The ops table's load_weights (backend.h): w NULL loads random weights of the shape.
 * Errors: those of backend.h's load_weights (LA_ERR_NO_MEMORY, a tensor's shape or dtype). */
la_status la_cpu_load_weights(la_backend *be, const la_backend_shape *shape, const la_weight_table *w,
                              la_err *err);

/* Free every weight and the RoPE tables (the backend stays usable: load again). */
void la_cpu_free_weights(cpu_backend *c);

/* Weight of kind k (of layer) and its [n_out, n_in] shape; NULL for a kind the model lacks. */
const cpu_weight *la_cpu_weight(cpu_backend *c, la_weight_kind k, int32_t layer, int64_t *n_out, int64_t *n_in);

/* An f32 vector weight (norms, biases) of [n] floats; NULL where the model has none. */
const float *la_cpu_vec_weight(cpu_backend *c, la_weight_kind k, int32_t layer);

/* ---- cpu_attention.c ---- */

/* The ops table's attention (backend.h) over the current batch's block tables. Errors:
 * LA_ERR_NO_MEMORY, LA_ERR_INTERNAL (a block or q_delta outside the batch's metadata). */
la_status la_cpu_attention(la_backend *be, int32_t layer, const la_act *q, la_act *out, la_err *err);

/* ---- the KV pool and RoPE table (cpu_backend.c fills them) ---- */

static inline size_t kv_es(const cpu_backend *c) { return la_dtype_size(c->pool_dtype); }

static inline int64_t kv_layer_elems(const cpu_backend *c) {
    const la_backend_shape *m = &c->base.shape;
    return c->n_blocks * m->n_kv_heads * c->block_size * m->head_dim;
}

/* [block_size, head_dim] of (layer, block, kv head), elements of pool_dtype. */
static inline void *kv_at(cpu_backend *c, void *pool, int32_t layer, int64_t block, int32_t kvh) {
    const la_backend_shape *m = &c->base.shape;
    return (char *)pool + (size_t)(layer * kv_layer_elems(c) + ((block * m->n_kv_heads + kvh) * c->block_size) *
                                                                   m->head_dim) * kv_es(c);
}

/* The table row of position pos (0 <= pos < rope_n). */
static inline const float *rope_row(const cpu_backend *c, int64_t pos) {
    return c->rope_cs + pos * c->base.shape.head_dim;
}

#endif
