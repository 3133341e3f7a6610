/* The CUDA backend's state, shared by the files that implement it (module-private to
 * the .c files of src/backend/cuda/):
 *
 *   cuda_backend.c    lifecycle (create, destroy, the ops table) and the forward ops
 *   cuda_weights.c    weights (upload, conversion, stacked groups) and the RoPE table
 *   cuda_memory.c     KV pool, activation cache, staging and readback buffers, block copies
 *   cuda_attn_plan.c  batch_begin: checks, attention work lists, metadata upload
 *   cuda_attn_shared.c  shared-block attention: the runs of KV blocks several sequences
 *                     share, read once per step for all of them (batch_begin's plan)
 *   cuda_graphs.c     CUDA graphs for decode steps: recording, signature, capture, replay
 *   cuda_hooks.c      the test and benchmark hooks (cuda_hooks.h)
 *
 * Every function here runs on the engine thread (cuda_backend.h). The fused groups' bits
 * (LA_CUDA_FUSED_*) are cuda_hooks.h's, which the files that test them include.
 */
#ifndef LA_BACKEND_CUDA_CUDA_INTERNAL_H
#define LA_BACKEND_CUDA_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/err.h"

/* decode graphs kept (LRU): one or two keys per decode batch size, so a server whose batch
 * size wanders over up to ~32-64 values keeps them all after the first two sightings of each */
#define LA_CUDA_GRAPH_CACHE 64
/* matmul_group fuses a group into one GEMM up to this many rows (decode batches, question
 * chunks): below it the weights' bytes bound the GEMMs, and the small ones (W_k, W_v of
 * Llama-3-8B: 8 MB) run at a third of the bandwidth of the large; above it the GEMMs turn
 * compute-bound and one large GEMM gains nothing. */
#define LA_CUDA_FUSED_MAX_ROWS 128

/* ============================================================ types ================== */

typedef enum prof_slot {
    PROF_BATCH_BEGIN, PROF_EMBED, PROF_RMSNORM,
    PROF_MATMUL_Q, PROF_MATMUL_K, PROF_MATMUL_V, PROF_MATMUL_O,
    PROF_MATMUL_GATE, PROF_MATMUL_UP, PROF_MATMUL_DOWN, PROF_MATMUL_LM_HEAD,
    PROF_MATMUL_QKV, PROF_MATMUL_GATE_UP, PROF_MATMUL_SPLIT,
    PROF_KV_WRITE, PROF_ATTN_PREFILL, PROF_ATTN_DECODE, PROF_ATTN_COMBINE,
    PROF_SWIGLU, PROF_ADD, PROF_ADD_RMSNORM, PROF_GATHER_ROWS, PROF_TO_HOST, PROF_ARGMAX, PROF_KV_COPY_ROTATE,
    PROF_ATTN_SHARED,
    PROF_COUNT
} prof_slot;

/* A pinned host buffer and its device twin: one upload in flight at a time. */
typedef struct staging {
    void *host;
    void *dev;
    size_t cap;
    cudaEvent_t done; /* recorded after the copy that last read host */
    bool in_flight;
} staging;

typedef struct dev_block {
    void *ptr;
    size_t bytes;
} dev_block;

/* Host-side work of one attention tile (before splitting): key slots [0, kv_len) of its
 * sequence's list, as n_seg segments [segs[seg0 + i], segs[seg0 + i + 1]) that no item
 * crosses (one, [0, kv_len), unless schedule_attention cuts the range where q_delta
 * changes). */
typedef struct tile_plan {
    int32_t seq_id, row0, n_tokens, pos_max, kv_len, decode;
    int32_t seg0, n_seg;
} tile_plan;

/* ---- CUDA graphs (cuda_graphs.c, top comment) ---- */

typedef enum op_kind {
    OP_EMBED, OP_RMSNORM, OP_MATMUL, OP_MATMUL_GROUP, OP_KV_WRITE, OP_ATTENTION, OP_SWIGLU,
    OP_ADD, OP_GATHER_ROWS, OP_TO_HOST, OP_ARGMAX, OP_ADD_RMSNORM, OP_GATE_UP_SWIGLU, OP_QKV_KV_WRITE
} op_kind;

/* One operation of a recorded decode step, with the arguments forward.c passed (a, b: the
 * operation's activations in argument order; unused ones zero). Compared with memcmp:
 * every field is explicit, no padding. */
typedef struct op_rec {
    int32_t kind;   /* op_kind */
    int32_t layer;
    int32_t weight; /* la_weight_kind (rmsnorm, matmul; matmul_group: the group's first) */
    int32_t n_w;    /* matmul_group: weights (consecutive kinds from weight); else 0 */
    la_act a, b;
    la_act c, d;    /* matmul_group: out[1], out[2] (b is out[0]); qkv_kv_write: k, v (b is
                       q); else zero */
} op_rec;

/* What the launches of a recorded step read from the backend besides the op_rec
 * arguments; weights, the fused-GEMM scratch and head geometry are fixed between
 * load_weights calls, which empty the cache. 8-byte fields only (memcmp). */
typedef struct step_sig {
    int64_t n_tokens, n_logit_rows, n_items_prefill, n_items_decode, n_combine, n_merge;
    int64_t rope_len, n_pool_blocks, block_size;
    int64_t n_items_grouped, grouped_kernel, combine_rows; /* shared-block attention */
    int64_t decode_instance; /* attn_decode's instance, LA_CUDA_DECODE_* */
    const void *tokens, *pos, *kpos, *slots, *written, *blocks, *logit_rows;
    const void *items_prefill, *items_decode, *combine, *merge, *merge_count;
    const void *items_grouped, *grows;
    const void *rope, *part_o, *part_ml, *k_pool, *v_pool, *f32_dev, *host_pinned;
} step_sig;

/* A cached decode step: its key (signature and operations) and, once captured, the
 * instantiated graph. */
typedef struct graph_entry {
    bool used;
    step_sig sig;
    op_rec *ops;
    int32_t n_ops;
    int32_t n_seen;       /* steps with this key so far */
    bool failed;          /* capture or launch failed: this key runs eagerly */
    cudaGraphExec_t exec; /* NULL until captured */
    uint64_t last_used;
} graph_entry;

/* Weights stacked by rows in one allocation per layer (load_all): the stack [W_q; W_k; W_v]
 * is the fused QKV weight, [W_gate; W_up] the fused gate/up weight, and each member is a
 * pointer offset into it, so memory does not grow and matmul of one member works as
 * before. matmul_group multiplies x by a whole stack in one GEMM (its members are
 * consecutive kinds from `first`). */
typedef struct fused_group {
    la_weight_kind first;
    int32_t n_w;
    uint32_t bit;   /* LA_CUDA_FUSED_* */
    prof_slot slot; /* the fused GEMM's profiling name */
} fused_group;

/* The counters behind la_cuda_graph_stats_get (cuda_hooks.h: what each counts), kept here
 * so that this header needs nothing of the hooks' header. */
typedef struct graph_counters {
    int64_t steps_recorded, steps_replayed, steps_eager, captures, capture_failures, interrupted;
} graph_counters;

/* A KV store copy in flight: done is recorded on the copy stream after it. */
typedef struct kv_copy {
    uint64_t ticket;
    cudaEvent_t done;
} kv_copy;

/* ---- shared-block attention (cuda_attn_shared.c, top comment) ---- */

/* A physical block as the step's plan sees it (indexed by block id; valid when epoch is the
 * plan's). */
typedef struct sh_block {
    uint32_t epoch;
    int32_t ref;     /* batch entry of its first consistent holder (la_batch.blocks index) */
    int32_t cnt;     /* consistent holders (the ref included) */
    int32_t seq;     /* the holder counted last: a second entry in one sequence makes it bad */
    int32_t link;    /* holders whose next entry is the block after the ref's, same shift */
    int32_t run;     /* its run, -1 before the runs are cut */
    int32_t rows;    /* new rows of its consistent holders (a run's rows: its head's) */
    uint8_t bad;     /* listed twice by one sequence, or its first holder's frame is out of
                        range (cuda_attn_shared.c, frame_of): never shared */
    uint8_t has_prev;/* a full link leads into it: not the head of a run */
    uint8_t pad_[2];
} sh_block;

/* A clone's segment (cuda_attn_shared.c, count_holders): its entries [i0, i0 + m) are its
 * template's [j0, j0 + m), positions and shifts moved by one delta. */
typedef struct sh_clone {
    int32_t i0, j0, m;
} sh_clone;

/* A run: consecutive blocks of its first holder's list that every sharer lists in the same
 * order with one shift (cuda_attn_shared.c). */
typedef struct sh_run {
    int32_t ref0, n_blocks;   /* batch entries [ref0, ref0 + n_blocks) of the first holder */
    int32_t sharer0, n_sharers; /* plan.sharers[sharer0 ..] (sequence ids, batch order) */
    int32_t n_rows;           /* query tokens of its sharers */
    int32_t n_keys;           /* valid slots */
    int32_t canon0;           /* its canonical blocks in the derived block list */
    int32_t n_chunks;         /* key ranges it is cut into (each one part per token) */
    int32_t chunk_keys;       /* slots per range, a multiple of LA_ATTN_KEYS_PER_TILE */
    int32_t krope;            /* its blocks carry k_rope (mepic) */
    int32_t grouped;          /* read once for its sharers this step */
} sh_run;

/* What the last plans did (la_cuda_attn_shared_stats_get, cuda_hooks.h). */
typedef struct sh_stats {
    int64_t steps, steps_grouped;
    int64_t runs, sharers, rows, items, chunks_max;
    int64_t keys_shared, keys_own, keys_per_seq;
    double plan_ms;
    int64_t meta_bytes;
} sh_stats;

typedef struct shared_plan {
    int32_t mode;                 /* LA_CUDA_ATTN_SHARED_* (cuda_hooks.h) */
    uint32_t epoch;
    sh_block *blk;                /* [cap_blk >= pool blocks] */
    int64_t cap_blk;
    uint8_t *emark;               /* [batch entries] SH_COUNTED | SH_LINKED (cuda_attn_shared.c) */
    int32_t *eshift;              /* [batch entries] its shift (cuda_attn_shared.c) */
    int64_t cap_entries;
    sh_clone *clone;              /* [n_seqs] its segment counted as its template's (m 0: none) */
    int32_t *cdiff;               /* [3][template entries + 1] clones' holders, rows and links, */
    int64_t cap_clone;            /* as differences along the template's entries */
    int32_t clone_lo, clone_hi;   /* the template's entries the clones cover (lo > hi: none) */
    bool no_clones;               /* count every sequence in full (attn_plan_sim compares) */
    int32_t *acts;                /* the template's derived-list actions (cuda_attn_shared.c) */
    int64_t cap_acts;
    int32_t *cand;                /* distinct candidate blocks, first-visit order */
    int64_t cap_cand;
    sh_run *runs;
    int64_t cap_runs;
    int32_t n_runs;
    int32_t *sharers;             /* [sharers] sequence ids, per run in batch order */
    int32_t *sharer_shift;        /* its shift in the run's canonical frame */
    int32_t *sharer_run_fill;     /* its tokens' first part of the run (0 .. seq_parts - 1) */
    int64_t cap_sharers;
    int32_t *seq_parts;           /* [n_seqs] grouped parts of each token of the sequence */
    int64_t cap_seqs;             /* of seq_parts and clone */
    la_attn_block *dblocks;       /* the derived block list: own blocks, then canonical runs */
    int64_t cap_dblocks;
    la_batch_seq *dseqs;
    int64_t cap_dseqs;
    int32_t *tok_gbase, *tok_gstride; /* [n_tokens] partial row of grouped part 0 (schedule_attention) */
    int64_t cap_tok;
    la_cuda_attn_item *items;     /* the grouped launch's items */
    int64_t cap_items;
    int32_t n_items;
    la_cuda_attn_grow *grows;
    int64_t cap_grows;
    int32_t n_grows;
    la_cuda_prefill_kernel kernel; /* the grouped launch's attn_prefill kernel */
    int64_t rope_need;
    bool active;                  /* this step has grouped items */
    sh_stats stats;
} shared_plan;

typedef struct cuda_backend {
    la_backend base;
    char device_name[256];
    int n_sm;
    int32_t split_ctas;                      /* split target: CTAs per SM (LA_ATTN_SPLIT_CTAS) */
    int32_t split_ctas_decode;               /* the same in decode-only steps */
    int32_t decode_min_split;                /* key tiles per split decode item at least, in decode-only
                                              * steps (LA_ATTN_DECODE_MIN_SPLIT; 0: the planner's default) */
    int32_t decode_packed;                   /* LA_CUDA_DECODE_PACKED_* (cuda_hooks.h) */
    int32_t lazy_ws;                         /* LA_CUDA_LAZY_WS_* (cuda_hooks.h) */
    size_t smem_optin;                       /* shared memory a CTA may opt in to, bytes */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;

    /* weights, bf16 */
    la_bf16_t *embed, *final_norm, *lm_head; /* lm_head == embed when tied */
    la_bf16_t **layer_w;                     /* [n_layers][LA_W_KIND_COUNT]; a stacked group's
                                                later members point into the first's
                                                allocation (k_fused_groups) */
    uint32_t fused;                          /* LA_CUDA_FUSED_* groups matmul_group fuses */
    la_bf16_t *gemm_scratch;                 /* [LA_CUDA_FUSED_MAX_ROWS, widest group] */
    int32_t n_layers;
    int32_t heads_per_cta, n_head_chunks;    /* GQA packing of attention CTAs */
    la_cuda_prefill_kernel prefill_kernel;   /* attn_prefill kernel asked for: the next steps run
                                                it or the next in the table they can
                                                (la_cuda_prefill_kernel_pick) */
    bool wgmma;                              /* the wgmma kernels can run: a 9.0 device and
                                                sm_90a code */
    float *inv_freq;                         /* [head_dim / 2] host (be->shape.rope_inv_freq) */
    float *inv_freq_dev;                     /* [head_dim / 2] */
    float2 *rope;                            /* [rope_len][head_dim / 2] */
    int32_t rope_len;

    /* KV pool: [n_layers][n_blocks][n_kv_heads][block_size][head_dim] bf16 each */
    la_bf16_t *k_pool, *v_pool;
    int64_t n_blocks;
    int32_t block_size;

    /* the KV store's copies between the pool and pinned host memory (cuda_memory.c) */
    cudaStream_t copy_stream;                /* created on the first copy */
    kv_copy *copies;                         /* [n_copies] in flight, oldest first */
    int32_t n_copies, cap_copies;
    uint64_t next_ticket;

    /* activation cache */
    dev_block *free_list, *live;
    int32_t n_free, cap_free, n_live, cap_live;

    /* the current step (batch_begin) */
    bool batch_ok;
    int32_t n_tokens, n_seqs, n_logit_rows;
    int32_t bad_token_row; /* first row with a token outside the vocabulary, or -1 */
    int32_t bad_token;
    staging meta;
    const int32_t *d_tokens, *d_pos, *d_kpos, *d_logit_rows;
    const int64_t *d_slots;
    const uint32_t *d_written;    /* bit b of word b / 32: pool block b receives a token's K/V
                                     in this step (batch_begin, from slots) */
    bool copies_in_step;          /* block copies were flushed (launched) after batch_begin:
                                     d_written does not cover what they write, and the
                                     step's later attention launches pass NULL */
    const la_attn_block *d_blocks;
    const la_cuda_attn_item *d_items_prefill, *d_items_decode;
    const la_cuda_attn_combine_item *d_combine, *d_merge;
    int32_t n_items_prefill, n_items_decode, n_combine, n_merge;
    const la_cuda_attn_item *d_items_grouped; /* shared-block attention: the grouped launch */
    const la_cuda_attn_grow *d_grows;
    int32_t n_items_grouped;                  /* 0: none this step */
    shared_plan sh;
    la_cuda_prefill_kernel step_prefill_kernel; /* the kernel the step's prefill items were
                                                 * cut for */
    int32_t last_prefill_kernel;  /* the variant number of the attn_prefill kernel of the
                                   * latest step with prefill tiles
                                   * (la_cuda_attn_prefill_kernel_ran); 0 before any */
    int32_t step_decode;          /* attn_decode's instance for its decode items
                                     (LA_CUDA_DECODE_*: DEEP when its decode CTAs fit in one
                                     wave at one per SM, PACKED one item per warp) */
    int32_t combine_rows;         /* the largest rows of the step's combine items */
    int64_t step_keys;            /* valid slots of the step's block entries (check_batch) */
    /* host scratch of the scheduler */
    tile_plan *tiles;
    int64_t cap_tiles;
    int32_t *segs; /* the tiles' segment bounds (tile_plan) */
    int64_t cap_segs;
    int32_t *smin;
    int64_t cap_smin;
    int64_t *chk_keys;                       /* check_batch: its template's valid keys, q_delta */
    int32_t *chk_lo, *chk_hi;                /* extremes, over its entries [0, i) */
    int64_t cap_chk;
    int32_t *chk_tmpl, *chk_same;            /* check_batch, per sequence: the template it was
                                                compared with (-1: none) and the leading
                                                entries equal to the template's */
    int64_t cap_chk_seqs;
    la_cuda_attn_item *items_prefill, *items_decode;
    int64_t cap_items_prefill, cap_items_decode;
    la_cuda_attn_combine_item *combine;
    int64_t cap_combine;
    la_cuda_attn_combine_item *merge; /* split sets attn_decode merges in the kernel */
    int64_t cap_merge;
    /* partial rows of split attention items */
    float *part_o;
    float2 *part_ml;
    int64_t cap_part_rows;
    int32_t *merge_count; /* [cap_merge_count] arrival counters of in-kernel merges, zero */
    int64_t cap_merge_count;

    /* queued block copies */
    la_cuda_copy_job *jobs;
    int32_t n_jobs, cap_jobs;
    staging jobs_stage;

    /* to_host / kv_read_slot */
    float *f32_dev;
    size_t cap_f32_dev;
    void *host_pinned;
    size_t cap_host_pinned;
    /* argmax_begin (backend.h): the latest queued argmax's rows (its ids stay in f32_dev for
     * the next batch's LA_TOKEN_PREV tokens; 0 once to_host overwrites them), and the ring of
     * two pinned buffers the queued ids are copied to, each with the event of its copy */
    int32_t prev_ids_rows;
    int32_t *ids_host[2];
    int32_t ids_cap[2], ids_n[2];
    cudaEvent_t ids_ev[2];
    int32_t ids_head, ids_count;

    /* profiling */
    bool prof;
    cudaEvent_t ev_begin, ev_end;
    double prof_ms[PROF_COUNT];
    int64_t prof_calls[PROF_COUNT];

    /* CUDA graphs for decode steps */
    bool graphs;               /* the switch (la_cuda_graphs_enable, LA_CUDA_GRAPHS) */
    bool pdl;                  /* programmatic dependent launch asked for (LA_CUDA_PDL) */
    bool recording;            /* this step's operations are recorded, not queued */
    bool break_next_capture;   /* tests: make the next capture fail */
    op_rec *recs;              /* this step's operations so far */
    int32_t n_recs, cap_recs;
    graph_entry cache[LA_CUDA_GRAPH_CACHE];
    uint64_t graph_clock;
    graph_counters gstats;
} cuda_backend;

static inline cuda_backend *cu(la_backend *be) { return (cuda_backend *)be; }

/* the error of asking for a wgmma attn_prefill kernel where it cannot run (create, hooks) */
#define LA_CU_NO_WGMMA                                                                                        \
    "attn_prefill v3 and v4 need compute capability 9.0 and a build for sm_90a (LA_CUDA_ARCHITECTURES with 90a)"

/* The row of la_cuda_prefill_kernels whose variant number is `variant`, or -1. */
static inline int la_cu_prefill_kernel_numbered(int32_t variant) {
    for (int k = 0; k < LA_CUDA_PREFILL_KERNEL_COUNT; k++)
        if (la_cuda_prefill_kernels[k].variant == variant) return k;
    return -1;
}

/* ============================================================ helpers ================ */

static inline la_status cuda_fail(la_err *err, cudaError_t e, const char *what) {
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not sticky: clear it so later launch checks stay clean */
        return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: %s: out of device memory", what);
    }
    return la_err_set(err, LA_ERR_BACKEND, "cuda backend: %s: %s", what, cudaGetErrorString(e));
}

#define CUDA_TRY(call, what)                                  \
    do {                                                      \
        cudaError_t e_ = (call);                              \
        if (e_ != cudaSuccess) return cuda_fail(err, e_, what); \
    } while (0)

static inline la_status dev_alloc(void **p, size_t bytes, const char *what, la_err *err) {
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        *p = NULL;
        return cuda_fail(err, e, what);
    }
    return LA_OK;
}

static inline void dev_free(void *p) {
    if (p) cudaFree(p);
}

static inline int64_t kv_slab_elems(const cuda_backend *c) {
    const la_backend_shape *m = &c->base.shape;
    return c->n_blocks * m->n_kv_heads * c->block_size * m->head_dim;
}

/* ============================================================ profiling ============== */

static inline void prof_begin(cuda_backend *c) {
    if (c->prof) cudaEventRecord(c->ev_begin, c->stream);
}

static inline void prof_end(cuda_backend *c, prof_slot slot) {
    if (!c->prof) return;
    float ms = 0;
    cudaEventRecord(c->ev_end, c->stream);
    if (cudaEventSynchronize(c->ev_end) == cudaSuccess &&
        cudaEventElapsedTime(&ms, c->ev_begin, c->ev_end) == cudaSuccess) {
        c->prof_ms[slot] += ms;
        c->prof_calls[slot]++;
    }
}

/* ============================================================ across the files ======= */

/* cuda_weights.c */
const fused_group *la_cu_group_of(const la_weight_kind *w, int32_t n_w);
la_bf16_t *la_cu_weight_ptr(cuda_backend *c, la_weight_kind k, int32_t layer);
void la_cu_free_weights(cuda_backend *c);
la_status la_cu_load_weights(la_backend *be, const la_backend_shape *shape, const la_weight_table *w, la_err *err);
la_status la_cu_ensure_rope(cuda_backend *c, int64_t need, la_err *err);

/* cuda_memory.c */
la_status la_cu_staging_reserve(cuda_backend *c, staging *s, size_t bytes, la_err *err);
la_status la_cu_staging_send(cuda_backend *c, staging *s, size_t bytes, la_err *err);
void la_cu_staging_free(staging *s);
int64_t la_cu_mem_free_bytes(la_backend *be, int64_t *total);
int64_t la_cu_kv_block_bytes(const la_backend *be, int32_t block_size);
la_status la_cu_kv_alloc(la_backend *be, int64_t n_blocks, int32_t block_size, la_err *err);
la_status la_cu_act_alloc(la_backend *be, int64_t n_rows, int64_t n_cols, la_act *out, la_err *err);
void la_cu_act_free(la_backend *be, la_act *a);
la_status la_cu_flush_copies(cuda_backend *c, la_err *err);
void *la_cu_host_alloc(la_backend *be, size_t bytes);
void la_cu_host_free(la_backend *be, void *p);
la_status la_cu_kv_export(la_backend *be, const int32_t *ids, int32_t n, void *const *host, uint64_t *ticket,
                          la_err *err);
la_status la_cu_kv_import(la_backend *be, const int32_t *ids, int32_t n, const void *const *host,
                          uint64_t *ticket, la_err *err);
la_status la_cu_kv_copy_poll(la_backend *be, uint64_t ticket, bool wait, bool *done, la_err *err);
/* Wait for every KV store copy and free the copy stream (destroy). */
void la_cu_kv_copies_fini(cuda_backend *c);
la_status la_cu_kv_copy_rotate(la_backend *be, int32_t src, int32_t dst, int32_t n_valid, int32_t delta, la_err *err);
la_status la_cu_reserve_readback(cuda_backend *c, size_t n, la_err *err);
/* After the argmax kernel of n rows (into f32_dev) is queued: ids not NULL, copy them to the
 * host and wait (argmax_to_host); NULL, queue their copy into the ring and return
 * (argmax_begin, which made sure that fewer than two are pending). They are the ids the next
 * batch's LA_TOKEN_PREV tokens read, if queued (with ids, nothing may name them).
 * cuda_memory.c. */
la_status la_cu_argmax_readback(cuda_backend *c, int32_t n, int32_t *ids, la_err *err);

/* cuda_attn_plan.c */
la_status la_cu_batch_begin(la_backend *be, const la_batch *b, la_err *err);
/* Grow a host array to hold n elements of elem bytes (keeps contents; LA_ERR_NO_MEMORY). */
la_status la_cu_grow(void **arr, int64_t *cap, int64_t n, size_t elem, la_err *err);
/* The number of leading entries of a and b (both at least n long) that are equal, bytewise. */
int32_t la_cu_common_prefix(const la_attn_block *a, const la_attn_block *b, int32_t n);

/* cuda_attn_shared.c (its top comment). Plan the step's shared-block attention before
 * schedule_attention, in the mode c->sh.mode: find the runs, decide which are grouped, build
 * the derived batch (*db: b with each sequence's block list cut down to its own blocks, the
 * runs' canonical blocks after them) and c->sh.seq_parts; *grouped false (and *db = *b) when
 * nothing is grouped. The grouped runs are cut into key ranges for one wave of the grouped
 * kernel over the SMs. Raises *rope_need to what the grouped rotations read. db points into
 * c->sh until the next plan. */
la_status la_cu_shared_plan(cuda_backend *c, const la_batch *b, la_batch *db, bool *grouped, int64_t *rope_need,
                            la_err *err);
/* After schedule_attention filled c->sh.tok_gbase / tok_gstride: the grouped launch's items
 * and rows (c->sh.items, c->sh.grows). */
la_status la_cu_shared_items(cuda_backend *c, const la_batch *b, const la_batch *db, la_err *err);
/* The grouped CTAs the plan will launch (before the split of the per-sequence tiles). */
int64_t la_cu_shared_ctas(const cuda_backend *c);
void la_cu_shared_free(shared_plan *sh);

/* cuda_graphs.c */
la_status la_cu_record_op(cuda_backend *c, op_kind kind, int32_t layer, int32_t weight, const la_act *a,
                          const la_act *b, la_err *err);
la_status la_cu_flush_recorded(cuda_backend *c, la_err *err);
void la_cu_graph_cache_clear(cuda_backend *c);
/* host NULL with OP_ARGMAX: argmax_begin's step (its ids queued, la_cu_argmax_readback) */
la_status la_cu_graph_step_finish(cuda_backend *c, op_kind last, const la_act *x, void *host, la_err *err);

/* cuda_backend.c */
la_status la_cu_run_op(cuda_backend *c, const op_rec *r, la_err *err);

#endif
