/* CUDA backend (backend/backend.h): bf16 weights, activations and paged KV cache on the
 * device; cuBLAS for x W^T; our kernels (cuda_kernels.h) for the rest.
 *
 * Streams and waiting: every operation is queued in order on one stream owned by the
 * backend. The host waits only where it must read device results (to_host, kv_read_slot)
 * or replace device memory that queued work may still use (pool, RoPE table, metadata and
 * partial buffers growing). Asynchronous failures surface at those waits as LA_ERR_BACKEND.
 *
 * Per-step metadata (batch_begin): the la_batch arrays and the attention work lists are
 * packed into one pinned host buffer and copied with one cudaMemcpyAsync; the attention
 * work is scheduled on the host there, once per step, for every layer:
 *
 *   - each sequence's new rows are cut into tiles: rows / heads_per_cta tokens for prefill,
 *     rows = the attn_prefill kernel's rows per CTA (v4, the default on a 9.0 GPU for
 *     plain steps: 256, so 64 tokens x 4 query heads for Llama-3; v3, which runs the
 *     other steps, and v2: 128; v1: 64, 16 tokens; LA_ATTN_PREFILL=v1|v2|v3|v4 at create
 *     or la_cuda_attn_prefill_variant_set, read at each batch_begin), one token for
 *     decode (a sequence with one new row);
 *   - a tile reads key slots [0, kv_len): the blocks up to the last whose first slot is
 *     causally visible to the tile's latest token (a binary search over the suffix
 *     minimum of pos0, so blocks after the question are never staged);
 *   - when tiles x KV-head groups would leave SMs idle (fewer CTAs than 2 per SM: a
 *     64-token question, a small decode batch), every tile is split over its key range
 *     into balanced chunks of at least 2 key tiles so the total reaches about 2 CTAs per
 *     SM (flash-decoding; 1 v4 CTA per SM, as it holds two v3 CTAs' rows). A step of
 *     decode rows only targets 1 CTA per SM, at most one
 *     wave, in chunks of at least 8 key tiles, and a grid that fits that wave runs
 *     attn_decode v2's deep instance, 8 warps per CTA (c->step_decode_deep; a decode CTA
 *     is bound by latency and instruction issue: GPU_NOTES.md, versions 11-12).
 *     LA_ATTN_SPLIT_CTAS=N at create sets both targets, 1..16 CTAs per SM, for benchmarks
 *     (under v4, (N + 1) / 2 for steps with prefill tiles).
 *     Split tiles write partial rows that attn_combine merges, except split decode rows
 *     under decode v2 with LA_CUDA_FUSED_MERGE (on by default): the last CTA of each split
 *     set merges them inside attn_decode (la_cuda_attn_item.merge).
 *
 * Decode items run on attn_decode's kernel of c->decode_variant (LA_ATTN_DECODE=v1|v2 at create
 * or la_cuda_attn_decode_variant_set; v2, the default, streams each warp's own key range
 * through tensor cores); both take the same items and write the same partial rows; only
 * who merges them depends on it (the step keeps the variant it was scheduled for).
 * Switching frees the cached graphs.
 *
 * Block copies (kv_copy_rotate, BlockAttention) are queued on the host and run as one
 * kernel at the next operation that reads the pool (a request copies hundreds of blocks;
 * one launch each would cost more than the copies). A copy whose source or destination
 * an earlier queued copy writes flushes the queue first, so chains keep their order.
 *
 * Launches (la_cuda_launch): every kernel is launched with programmatic dependent launch on
 * compute capability 9.0+ (LA_CUDA_PDL=0 turns it off), so its launch overlaps the tail of
 * the kernel before it; each kernel waits (griddepcontrol.wait) before it reads what an
 * earlier kernel wrote: at its top, except attn_prefill v2 / v3 / v4, which first read the
 * step's host-written metadata (items, positions, block lists). cuBLAS launches its GEMMs
 * itself, without it.
 *
 * Activations come from a caching allocator: freed buffers are kept and reused by later
 * allocations of at most twice their size (the forward pass allocates sixteen per step);
 * the cache is emptied when cudaMalloc fails, then the allocation is retried.
 *
 * Fused GEMMs (matmul_group, LA_CUDA_FUSED_GEMM / la_cuda_fused_gemm_set): each layer's
 * W_q, W_k, W_v sit in one allocation stacked by rows, as do W_gate, W_up (k_fused_groups);
 * for at most LA_CUDA_FUSED_MAX_ROWS rows the group is one GEMM by the stack into a fixed
 * scratch [rows, sum of n_out] (allocated with the weights, so a captured graph's scratch
 * address stays valid and nobody else holds it), then one split_cols launch copies the
 * columns into the separate outputs. On H200 the 8 MB W_k / W_v GEMMs of Llama-3-8B run at
 * ~1 TB/s alone (latency), the 48 MB stack near the copy ceiling.
 * Two more fusions save launches, not arithmetic (bit-equal): add_rmsnorm runs a layer's
 * residual add and the next RMSNorm as one row kernel, and gate_up_swiglu computes SwiGLU
 * straight from the stacked gate/up GEMM's output instead of splitting it first
 * (LA_CUDA_FUSED_ADD_NORM, LA_CUDA_FUSED_SWIGLU), and qkv_kv_write feeds the KV write
 * from the fused QKV GEMM's output, copying q, k and v out in the same kernel
 * (LA_CUDA_FUSED_KV_WRITE). A Llama decode step is then 10 launches per layer instead of 14.
 *
 * Greedy decoding (argmax_to_host): the argmax of each logit row is taken on the device
 * (rows.cu) and only the token ids come back, instead of n_rows x vocab f32 logits.
 *
 * CUDA graphs for decode steps (on by default; LA_CUDA_GRAPHS=0 or la_cuda_graphs_enable
 * turn them off): a decode step queues about 11 operations per layer, ~450 launches for Llama-3-8B, and the
 * gaps between them cost milliseconds. A step is a graph candidate when every sequence has
 * exactly one new row, logits are wanted and profiling is off: a decode step, or the tail of
 * a long prefill (forward.c runs the last layer's attention and MLP for the logit rows as a
 * batch of one-row sequences), which is recorded, captured and replayed the same way. For a candidate,
 * batch_begin uploads the metadata as usual, except that the one array whose length
 * changes from step to step, the block list, goes last (every other array keeps its
 * device address); then every operation validates its arguments as always but only
 * records itself (op_rec: which operation, layer, weight, activations). to_host (logits)
 * or argmax_to_host (greedy token ids) completes the record and looks it up, together with a step signature (every device address and
 * count the launches read from the backend: metadata arrays, work-list lengths, RoPE
 * table, partial buffers, pool, readback buffers), in a small LRU cache:
 *
 *   - a graph whose record and signature are bit-equal: one cudaGraphLaunch. Its kernels
 *     read the metadata this step uploaded at the same addresses, so it does exactly what
 *     queuing the same operations one by one would do;
 *   - a key seen once before: capture (cudaStreamBeginCapture, thread-local mode; the
 *     recorded operations queued through the eager code; EndCapture; instantiate) and
 *     launch. Any failure ends the capture, discards it, marks the key as not capturable
 *     and runs the step eagerly;
 *   - a new key: remember it and run the operations eagerly (this first sight also warms
 *     up cuBLAS heuristics and kernel attributes outside any capture).
 *
 * Keys repeat from step to step because (1) the attention work lists of a split graph
 * step have a fixed length per batch size: decode items are padded to the decode split
 * target (split_ctas_decode x n_sm) / groups with empty items (no tokens: they return at
 * once), and combine items and in-kernel merge sets to one per sequence with empty ones
 * (never read); (2) with graphs on,
 * the activation cache breaks ties between equal sizes by address, so the forward pass's
 * sixteen allocations get the same buffers every step. A call that needs the queue in
 * order mid-step (kv_read_slot, kv_copy_rotate, la_cuda_synchronize, a new batch_begin,
 * ...) first runs the recorded operations eagerly (flush_recorded), and the rest of that
 * step runs eagerly. Nothing between capture begin and end waits or allocates: the
 * recorded operations only launch kernels and cuBLAS GEMMs (on the fixed cuBLAS
 * workspace) and copy into the pinned readback buffer; whatever may allocate (metadata,
 * partial and readback buffers, RoPE table) happens in batch_begin or in to_host /
 * argmax_to_host before the capture. The eager path (graphs off) queues exactly what it queued before graphs
 * existed.
 */
#include "backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "base/dtype.h"
#include "base/err.h"

#define LA_CUDA_MAX_ROPE_POSITIONS (1 << 21)
#define LA_CUDA_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)
#define LA_CUDA_UPLOAD_CHUNK_BYTES ((size_t)64 << 20)
/* decode graphs kept (LRU): one or two keys per decode batch size, so a server whose batch
 * size wanders over up to ~32-64 values keeps them all after the first two sightings of each */
#define LA_CUDA_GRAPH_CACHE 64
/* matmul_group fuses a group into one GEMM up to this many rows (decode batches, question
 * chunks): below it the weights' bytes bound the GEMMs, and the small ones (W_k, W_v of
 * Llama-3-8B: 8 MB) run at a third of the bandwidth of the large; above it the GEMMs turn
 * compute-bound and one large GEMM gains nothing. */
#define LA_CUDA_FUSED_MAX_ROWS 128
/* Key tiles (of LA_ATTN_KEYS_PER_TILE) per split item at least, in a step of decode rows
 * only (schedule_attention). */
#define LA_ATTN_DECODE_MIN_SPLIT_TILES 8
/* --random-weights: uniform in [-a, a) with a = 0.02 sqrt(3), i.e. std 0.02 (HF's
 * initializer_range default); RMSNorm weights 1. */
#define LA_CUDA_RANDOM_WEIGHT_BOUND 0.034641016f

/* ============================================================ types ================== */

typedef enum prof_slot {
    PROF_BATCH_BEGIN, PROF_EMBED, PROF_RMSNORM,
    PROF_MATMUL_Q, PROF_MATMUL_K, PROF_MATMUL_V, PROF_MATMUL_O,
    PROF_MATMUL_GATE, PROF_MATMUL_UP, PROF_MATMUL_DOWN, PROF_MATMUL_LM_HEAD,
    PROF_MATMUL_QKV, PROF_MATMUL_GATE_UP, PROF_MATMUL_SPLIT,
    PROF_KV_WRITE, PROF_ATTN_PREFILL, PROF_ATTN_DECODE, PROF_ATTN_COMBINE,
    PROF_SWIGLU, PROF_ADD, PROF_ADD_RMSNORM, PROF_GATHER_ROWS, PROF_TO_HOST, PROF_ARGMAX, PROF_KV_COPY_ROTATE,
    PROF_COUNT
} prof_slot;

static const char *const k_prof_names[PROF_COUNT] = {
    "batch_begin", "embed", "rmsnorm",
    "matmul_q", "matmul_k", "matmul_v", "matmul_o",
    "matmul_gate", "matmul_up", "matmul_down", "matmul_lm_head",
    "matmul_qkv", "matmul_gate_up", "matmul_split",
    "kv_write", "attn_prefill", "attn_decode", "attn_combine",
    "swiglu", "add", "add_rmsnorm", "gather_rows", "to_host", "argmax", "kv_copy_rotate",
};

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

/* Host-side work of one attention tile (before splitting). */
typedef struct tile_plan {
    int32_t seq_id, row0, n_tokens, pos_max, kv_len, decode;
} tile_plan;

/* ---- CUDA graphs (top of this file) ---- */

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
    const void *tokens, *pos, *kpos, *slots, *blocks, *logit_rows;
    const void *items_prefill, *items_decode, *combine, *merge, *merge_count;
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

typedef struct cuda_backend {
    la_backend base;
    char device_name[256];
    int n_sm;
    int32_t split_ctas;                      /* split target: CTAs per SM (LA_ATTN_SPLIT_CTAS) */
    int32_t split_ctas_decode;               /* the same in decode-only steps under decode v2 */
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
    int32_t prefill_variant;                 /* attn_prefill kernel of the next steps: 1 to 4 */
    bool wgmma;                              /* v3 and v4 can run: a 9.0 device and sm_90a code */
    int32_t decode_variant;                  /* attn_decode kernel: 1 or 2 (attn_decode.cu) */
    float *inv_freq_dev;                     /* [head_dim / 2] */
    float2 *rope;                            /* [rope_len][head_dim / 2] */
    int32_t rope_len;

    /* KV pool: [n_layers][n_blocks][n_kv_heads][block_size][head_dim] bf16 each */
    la_bf16_t *k_pool, *v_pool;
    int64_t n_blocks;
    int32_t block_size;

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
    const la_attn_block *d_blocks;
    const la_cuda_attn_item *d_items_prefill, *d_items_decode;
    const la_cuda_attn_combine_item *d_combine, *d_merge;
    int32_t n_items_prefill, n_items_decode, n_combine, n_merge;
    int32_t step_prefill_variant; /* the variant the step's prefill items were cut for */
    bool step_plain;              /* no block of the step carries rotation metadata
                                   * (la_cuda_attn_params.plain) */
    int32_t last_prefill_kernel;  /* attn_prefill kernel of the latest step with prefill
                                   * tiles (la_cuda_attn_prefill_kernel_ran) */
    int32_t step_decode_variant;  /* the decode kernel the step's items were cut for */
    bool step_decode_deep;        /* its decode CTAs fit in one wave at one per SM */
    int32_t combine_rows;         /* the largest rows of the step's combine items */
    /* host scratch of the scheduler */
    tile_plan *tiles;
    int64_t cap_tiles;
    int32_t *smin;
    int64_t cap_smin;
    la_cuda_attn_item *items_prefill, *items_decode;
    int64_t cap_items_prefill, cap_items_decode;
    la_cuda_attn_combine_item *combine;
    int64_t cap_combine;
    la_cuda_attn_combine_item *merge; /* split sets attn_decode v2 merges in the kernel */
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
    la_cuda_graph_stats gstats;
} cuda_backend;

static const la_backend_ops k_cuda_ops;

static cuda_backend *cu(la_backend *be) { return (cuda_backend *)be; }

/* graphs (section "CUDA graphs" below) */
static la_status flush_recorded(cuda_backend *c, la_err *err);
static void graph_cache_clear(cuda_backend *c);

/* ============================================================ helpers ================ */

static la_status cuda_fail(la_err *err, cudaError_t e, const char *what) {
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

static la_status dev_alloc(void **p, size_t bytes, const char *what, la_err *err) {
    *p = NULL;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        *p = NULL;
        return cuda_fail(err, e, what);
    }
    return LA_OK;
}

static void dev_free(void *p) {
    if (p) cudaFree(p);
}

/* Grow a host array to hold n elements (keeps contents). */
static la_status grow(void **arr, int64_t *cap, int64_t n, size_t elem, la_err *err) {
    if (n <= *cap) return LA_OK;
    int64_t nc = *cap ? *cap : 64;
    while (nc < n) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: host scratch of %lld elements: out of memory",
                              (long long)nc);
    *arr = p;
    *cap = nc;
    return LA_OK;
}

/* Make s hold `bytes` and wait until its previous upload has left the host buffer. */
static la_status staging_reserve(cuda_backend *c, staging *s, size_t bytes, la_err *err) {
    if (s->in_flight) {
        CUDA_TRY(cudaEventSynchronize(s->done), "staging upload");
        s->in_flight = false;
    }
    if (bytes <= s->cap) return LA_OK;
    size_t cap = s->cap ? s->cap : (size_t)64 << 10;
    while (cap < bytes) cap *= 2;
    CUDA_TRY(cudaStreamSynchronize(c->stream), "staging: wait before growing");
    if (s->host) cudaFreeHost(s->host);
    dev_free(s->dev);
    s->host = s->dev = NULL;
    s->cap = 0;
    CUDA_TRY(cudaMallocHost(&s->host, cap), "staging: pinned host buffer");
    la_status st = dev_alloc(&s->dev, cap, "staging: device buffer", err);
    if (st != LA_OK) {
        cudaFreeHost(s->host);
        s->host = NULL;
        return st;
    }
    s->cap = cap;
    return LA_OK;
}

static la_status staging_send(cuda_backend *c, staging *s, size_t bytes, la_err *err) {
    if (bytes == 0) return LA_OK;
    CUDA_TRY(cudaMemcpyAsync(s->dev, s->host, bytes, cudaMemcpyHostToDevice, c->stream), "staging upload");
    CUDA_TRY(cudaEventRecord(s->done, c->stream), "staging upload event");
    s->in_flight = true;
    return LA_OK;
}

static void staging_free(staging *s) {
    if (s->done) cudaEventDestroy(s->done);
    if (s->host) cudaFreeHost(s->host);
    dev_free(s->dev);
    memset(s, 0, sizeof *s);
}

static const char *blas_status_name(cublasStatus_t s) { return cublasGetStatusString(s); }

/* ============================================================ profiling ============== */

static void prof_begin(cuda_backend *c) {
    if (c->prof) cudaEventRecord(c->ev_begin, c->stream);
}

static void prof_end(cuda_backend *c, prof_slot slot) {
    if (!c->prof) return;
    float ms = 0;
    cudaEventRecord(c->ev_end, c->stream);
    if (cudaEventSynchronize(c->ev_end) == cudaSuccess &&
        cudaEventElapsedTime(&ms, c->ev_begin, c->ev_end) == cudaSuccess) {
        c->prof_ms[slot] += ms;
        c->prof_calls[slot]++;
    }
}

/* ============================================================ weights ================ */

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

static const fused_group k_fused_groups[] = {
    {LA_W_Q, 3, LA_CUDA_FUSED_QKV, PROF_MATMUL_QKV},
    {LA_W_GATE, 2, LA_CUDA_FUSED_GATE_UP, PROF_MATMUL_GATE_UP},
};
#define N_FUSED_GROUPS ((int)(sizeof k_fused_groups / sizeof k_fused_groups[0]))

/* The group that starts at kind k, or NULL. */
static const fused_group *group_starting_at(int k) {
    for (int g = 0; g < N_FUSED_GROUPS; g++)
        if ((int)k_fused_groups[g].first == k) return &k_fused_groups[g];
    return NULL;
}

/* Whether kind k lives in the allocation of an earlier kind (a later member of a group). */
static bool stacked_member(int k) {
    for (int g = 0; g < N_FUSED_GROUPS; g++)
        if (k > (int)k_fused_groups[g].first && k < (int)k_fused_groups[g].first + k_fused_groups[g].n_w) return true;
    return false;
}

/* The group that w[0..n_w) is exactly (its kinds in order), or NULL. */
static const fused_group *group_of(const la_weight_kind *w, int32_t n_w) {
    const fused_group *g = n_w > 0 ? group_starting_at((int)w[0]) : NULL;
    if (!g || g->n_w != n_w || n_w > LA_CUDA_SPLIT_MAX_PARTS) return NULL;
    for (int32_t i = 1; i < n_w; i++)
        if ((int)w[i] != (int)g->first + i) return NULL;
    return g;
}

static la_bf16_t *weight_ptr(cuda_backend *c, la_weight_kind k, int32_t layer) {
    if (k == LA_W_LM_HEAD) return c->lm_head;
    if (k == LA_W_FINAL_NORM) return c->final_norm;
    if (!c->layer_w || layer < 0 || layer >= c->n_layers || (int)k < 0 || k >= LA_W_KIND_COUNT) return NULL;
    return c->layer_w[(size_t)layer * LA_W_KIND_COUNT + k];
}

static void free_weights(cuda_backend *c) {
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->lm_head != c->embed) dev_free(c->lm_head);
    dev_free(c->embed);
    dev_free(c->final_norm);
    if (c->layer_w)
        for (int64_t i = 0; i < (int64_t)c->n_layers * LA_W_KIND_COUNT; i++)
            if (!stacked_member((int)(i % LA_W_KIND_COUNT))) dev_free(c->layer_w[i]);
    free(c->layer_w);
    dev_free(c->gemm_scratch);
    c->gemm_scratch = NULL;
    dev_free(c->inv_freq_dev);
    dev_free(c->rope);
    c->embed = c->final_norm = c->lm_head = NULL;
    c->layer_w = NULL;
    c->inv_freq_dev = NULL;
    c->rope = NULL;
    c->rope_len = 0;
    c->n_layers = 0;
}

/* Upload (and convert) one tensor of n_out x n_in elements into d, or initialise it:
 * RMSNorm weights to 1, the rest uniform from seed. Queued on the stream. */
static la_status fill_tensor(cuda_backend *c, const la_st_tensor *t, int64_t n_out, int64_t n_in, bool norm,
                             uint64_t seed, void *stage_dev, la_bf16_t *d, la_err *err) {
    int64_t n = n_out * n_in;
    la_status s = LA_OK;
    if (t) {
        size_t esz = la_dtype_size(t->dtype);
        if (t->n_bytes != (size_t)n * esz) {
            s = la_err_set(err, LA_ERR_FORMAT, "%s: %zu bytes, expected %lld elements of %zu bytes",
                           t->name, t->n_bytes, (long long)n, esz);
        } else if (t->dtype == LA_DTYPE_BF16) {
            cudaError_t e = cudaMemcpyAsync(d, t->data, (size_t)n * 2, cudaMemcpyHostToDevice, c->stream);
            if (e != cudaSuccess) s = cuda_fail(err, e, t->name);
        } else {
            int64_t chunk = (int64_t)(LA_CUDA_UPLOAD_CHUNK_BYTES / esz);
            for (int64_t off = 0; s == LA_OK && off < n; off += chunk) {
                int64_t cnt = n - off < chunk ? n - off : chunk;
                cudaError_t e = cudaMemcpyAsync(stage_dev, (const char *)t->data + off * (int64_t)esz,
                                                (size_t)cnt * esz, cudaMemcpyHostToDevice, c->stream);
                if (e != cudaSuccess) {
                    s = cuda_fail(err, e, t->name);
                    break;
                }
                la_cuda_convert_params p = {d + off, stage_dev, (int32_t)t->dtype, cnt};
                s = la_cuda_convert_to_bf16(&p, c->stream, err);
            }
        }
    } else if (norm) {
        la_cuda_fill_params p = {d, n, 0, 1.0f, 1.0f};
        s = la_cuda_fill_const(&p, c->stream, err);
    } else {
        la_cuda_fill_params p = {d, n, seed, -LA_CUDA_RANDOM_WEIGHT_BOUND, LA_CUDA_RANDOM_WEIGHT_BOUND};
        s = la_cuda_fill_uniform(&p, c->stream, err);
    }
    return s;
}

/* fill_tensor into a new allocation *out (left unchanged on failure). */
static la_status load_tensor(cuda_backend *c, const la_st_tensor *t, int64_t n_out, int64_t n_in,
                             bool norm, uint64_t seed, void *stage_dev, la_bf16_t **out, la_err *err) {
    la_bf16_t *d = NULL;
    LA_TRY(dev_alloc((void **)&d, (size_t)(n_out * n_in) * 2, "weights", err));
    la_status s = fill_tensor(c, t, n_out, n_in, norm, seed, stage_dev, d, err);
    if (s != LA_OK) {
        cudaStreamSynchronize(c->stream);
        dev_free(d);
        return s;
    }
    *out = d;
    return LA_OK;
}

static la_status ensure_rope(cuda_backend *c, int64_t need, la_err *err);

static la_status load_all(cuda_backend *c, const la_model_config *cfg, const la_weights *w,
                          void *stage_dev, la_err *err) {
    int32_t half = cfg->head_dim / 2;
    float *inv = malloc(sizeof(float) * (size_t)half);
    if (!inv) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: out of memory");
    la_rope_inv_freq(cfg, inv);
    la_status s = dev_alloc((void **)&c->inv_freq_dev, sizeof(float) * (size_t)half, "inv_freq", err);
    if (s == LA_OK) {
        cudaError_t e = cudaMemcpyAsync(c->inv_freq_dev, inv, sizeof(float) * (size_t)half,
                                        cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) s = cuda_fail(err, e, "inv_freq");
    }
    free(inv);
    if (s != LA_OK) return s;
    int64_t first = cfg->max_position_embeddings;
    if (first < 8192) first = 8192;
    if (first > 131072) first = 131072;
    LA_TRY(ensure_rope(c, first, err));

    int64_t o, i;
    la_weight_shape(cfg, LA_W_LM_HEAD, &o, &i);
    LA_TRY(load_tensor(c, w ? w->embed : NULL, o, i, false, 1, stage_dev, &c->embed, err));
    LA_TRY(load_tensor(c, w ? w->final_norm : NULL, 1, i, true, 0, stage_dev, &c->final_norm, err));
    bool tied = w ? w->lm_head == w->embed : cfg->tie_word_embeddings;
    if (tied) c->lm_head = c->embed;
    else LA_TRY(load_tensor(c, w ? w->lm_head : NULL, o, i, false, 2, stage_dev, &c->lm_head, err));
    for (int32_t l = 0; l < cfg->n_layers; l++) {
        const la_layer_weights *lw = w ? &w->layers[l] : NULL;
        const la_st_tensor *src[LA_W_KIND_COUNT] = {0};
        if (lw) {
            src[LA_W_ATTN_NORM] = lw->attn_norm, src[LA_W_Q] = lw->wq, src[LA_W_K] = lw->wk;
            src[LA_W_V] = lw->wv, src[LA_W_O] = lw->wo, src[LA_W_MLP_NORM] = lw->mlp_norm;
            src[LA_W_GATE] = lw->w_gate, src[LA_W_UP] = lw->w_up, src[LA_W_DOWN] = lw->w_down;
        }
        for (int k = 0; k <= LA_W_DOWN; k++)
            if (w && !src[k]) return la_err_set(err, LA_ERR_FORMAT, "layer %d: weight %d missing", l, k);
        la_bf16_t **lw_dev = &c->layer_w[(size_t)l * LA_W_KIND_COUNT];
        for (int k = 0; k <= LA_W_DOWN; k++) {
            const uint64_t seed = 1000 + (uint64_t)l * 16 + (uint64_t)k; /* per kind, stacked or not */
            const fused_group *g = group_starting_at(k);
            if (!g) {
                la_weight_shape(cfg, (la_weight_kind)k, &o, &i);
                bool norm = k == LA_W_ATTN_NORM || k == LA_W_MLP_NORM;
                LA_TRY(load_tensor(c, src[k], o, i, norm, seed, stage_dev, &lw_dev[k], err));
                continue;
            }
            /* one allocation for the group, members stacked by rows (k_fused_groups) */
            int64_t rows = 0;
            for (int j = 0; j < g->n_w; j++) {
                la_weight_shape(cfg, (la_weight_kind)(k + j), &o, &i);
                rows += o;
            }
            LA_TRY(dev_alloc((void **)&lw_dev[k], (size_t)(rows * i) * 2, "weights", err));
            la_bf16_t *at = lw_dev[k];
            for (int j = 0; j < g->n_w; j++) {
                la_weight_shape(cfg, (la_weight_kind)(k + j), &o, &i);
                lw_dev[k + j] = at;
                LA_TRY(fill_tensor(c, src[k + j], o, i, false, seed + (uint64_t)j, stage_dev, at, err));
                at += o * i;
            }
            k += g->n_w - 1;
        }
    }
    /* the fused GEMMs' output before the split: the widest group at the most rows fused */
    int64_t widest = 0;
    for (int g = 0; g < N_FUSED_GROUPS; g++) {
        int64_t width = 0;
        for (int j = 0; j < k_fused_groups[g].n_w; j++) {
            la_weight_shape(cfg, (la_weight_kind)((int)k_fused_groups[g].first + j), &o, &i);
            width += o;
        }
        if (width > widest) widest = width;
    }
    LA_TRY(dev_alloc((void **)&c->gemm_scratch, (size_t)(LA_CUDA_FUSED_MAX_ROWS * widest) * 2, "fused GEMM scratch",
                     err));
    CUDA_TRY(cudaStreamSynchronize(c->stream), "loading weights");
    return LA_OK;
}

static la_status cuda_load_weights(la_backend *be, const la_model_config *cfg, const la_weights *w,
                                   la_err *err) {
    cuda_backend *c = cu(be);
    if (cfg->head_dim <= 0 || cfg->head_dim % 8 != 0 || cfg->head_dim > LA_ATTN_MAX_HEAD_DIM)
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "cuda backend: head_dim %d (the CUDA kernels need a multiple of 8, at most %d)",
                          cfg->head_dim, LA_ATTN_MAX_HEAD_DIM);
    if (cfg->n_kv_heads <= 0 || cfg->n_heads % cfg->n_kv_heads != 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "cuda backend: %d heads over %d KV heads",
                          cfg->n_heads, cfg->n_kv_heads);
    if (w && w->n_layers != cfg->n_layers)
        return la_err_set(err, LA_ERR_INVALID_ARG, "cuda backend: weights have %d layers, config %d",
                          w->n_layers, cfg->n_layers);
    LA_TRY(flush_recorded(c, err));
    graph_cache_clear(c); /* graphs launch with the weights they were captured with */
    free_weights(c);
    /* the pool's geometry follows the config: drop it (kv_alloc comes next) */
    dev_free(c->k_pool);
    dev_free(c->v_pool);
    c->k_pool = c->v_pool = NULL;
    c->n_blocks = 0;
    c->n_jobs = 0;
    c->base.cfg = *cfg;
    int32_t group = cfg->n_heads / cfg->n_kv_heads, hpc = 1;
    for (int32_t d = LA_ATTN_MAX_HEADS_PER_CTA; d >= 1; d--)
        if (group % d == 0) {
            hpc = d;
            break;
        }
    c->heads_per_cta = hpc;
    c->n_head_chunks = group / hpc;
    c->layer_w = calloc((size_t)cfg->n_layers * LA_W_KIND_COUNT, sizeof(la_bf16_t *));
    if (!c->layer_w) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: out of memory");
    c->n_layers = cfg->n_layers;
    void *stage_dev = NULL;
    la_status s = LA_OK;
    if (w) s = dev_alloc(&stage_dev, LA_CUDA_UPLOAD_CHUNK_BYTES, "weight upload buffer", err);
    if (s == LA_OK) s = load_all(c, cfg, w, stage_dev, err);
    cudaStreamSynchronize(c->stream);
    dev_free(stage_dev);
    if (s != LA_OK) free_weights(c);
    return s;
}

/* ============================================================ RoPE table ============= */

/* Make the table cover positions [0, need). */
static la_status ensure_rope(cuda_backend *c, int64_t need, la_err *err) {
    if (need <= c->rope_len) return LA_OK;
    if (need > LA_CUDA_MAX_ROPE_POSITIONS)
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "cuda backend: RoPE position %lld beyond the table limit of %d positions",
                          (long long)need - 1, LA_CUDA_MAX_ROPE_POSITIONS);
    int64_t len = 2 * (int64_t)c->rope_len > need ? 2 * (int64_t)c->rope_len : need;
    len = (len + 4095) / 4096 * 4096;
    if (len > LA_CUDA_MAX_ROPE_POSITIONS) len = LA_CUDA_MAX_ROPE_POSITIONS;
    int32_t half = c->base.cfg.head_dim / 2;
    float2 *t = NULL;
    LA_TRY(dev_alloc((void **)&t, (size_t)len * (size_t)half * sizeof(float2), "RoPE table", err));
    la_cuda_rope_table_params p = {t, c->inv_freq_dev, half, (int32_t)len};
    la_status s = la_cuda_rope_table(&p, c->stream, err);
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (s == LA_OK && e != cudaSuccess) s = cuda_fail(err, e, "RoPE table");
    if (s != LA_OK) {
        dev_free(t);
        return s;
    }
    dev_free(c->rope);
    c->rope = t;
    c->rope_len = (int32_t)len;
    return LA_OK;
}

/* ============================================================ KV pool ================ */

static int64_t kv_slab_elems(const cuda_backend *c) {
    const la_model_config *m = &c->base.cfg;
    return c->n_blocks * m->n_kv_heads * c->block_size * m->head_dim;
}

static int64_t cuda_mem_free_bytes(la_backend *be) {
    (void)be;
    size_t free_b = 0, total = 0;
    return cudaMemGetInfo(&free_b, &total) == cudaSuccess ? (int64_t)free_b : 0;
}

static int64_t cuda_kv_block_bytes(const la_backend *be, int32_t block_size) {
    const la_model_config *m = &be->cfg;
    return 2LL * m->n_layers * m->n_kv_heads * block_size * m->head_dim * 2;
}

static la_status cuda_kv_alloc(la_backend *be, int64_t n_blocks, int32_t block_size, la_err *err) {
    cuda_backend *c = cu(be);
    const la_model_config *m = &c->base.cfg;
    if (!c->layer_w) return la_err_set(err, LA_ERR_INTERNAL, "cuda backend: kv_alloc before load_weights");
    if (block_size <= 0 || block_size % 16 != 0)
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "cuda backend: block_size %d (the CUDA attention kernels need a multiple of 16)",
                          block_size);
    if (n_blocks <= 0 || n_blocks > INT32_MAX)
        return la_err_set(err, LA_ERR_INVALID_ARG, "cuda backend: KV pool of %lld blocks", (long long)n_blocks);
    LA_TRY(flush_recorded(c, err));
    graph_cache_clear(c);
    c->n_jobs = 0; /* queued copies refer to the pool being replaced */
    cudaStreamSynchronize(c->stream);
    dev_free(c->k_pool);
    dev_free(c->v_pool);
    c->k_pool = c->v_pool = NULL;
    c->n_blocks = 0;
    size_t bytes = (size_t)n_blocks * (size_t)m->n_layers * (size_t)m->n_kv_heads * (size_t)block_size *
                   (size_t)m->head_dim * 2;
    la_status s = dev_alloc((void **)&c->k_pool, bytes, "KV pool (K)", err);
    if (s == LA_OK) s = dev_alloc((void **)&c->v_pool, bytes, "KV pool (V)", err);
    if (s == LA_OK) {
        /* zeroed, so padding slots never hold NaN bit patterns (0 x NaN in P V) */
        cudaError_t e = cudaMemsetAsync(c->k_pool, 0, bytes, c->stream);
        if (e == cudaSuccess) e = cudaMemsetAsync(c->v_pool, 0, bytes, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) s = cuda_fail(err, e, "KV pool");
    }
    if (s != LA_OK) {
        dev_free(c->k_pool);
        dev_free(c->v_pool);
        c->k_pool = c->v_pool = NULL;
        la_err_prefix(err, "KV pool of %lld blocks (%.2f GiB)", (long long)n_blocks,
                      2.0 * (double)bytes / (double)(1 << 30));
        return s;
    }
    c->n_blocks = n_blocks;
    c->block_size = block_size;
    return LA_OK;
}

/* ============================================================ activations ============ */

static size_t round_alloc(size_t b) {
    const size_t small = 512, big = (size_t)2 << 20;
    return b <= ((size_t)1 << 20) ? (b + small - 1) / small * small : (b + big - 1) / big * big;
}

static void release_cache(cuda_backend *c) {
    cudaStreamSynchronize(c->stream);
    for (int32_t i = 0; i < c->n_free; i++) dev_free(c->free_list[i].ptr);
    c->n_free = 0;
}

static la_status push_block(dev_block **arr, int32_t *n, int32_t *cap, dev_block b) {
    if (*n == *cap) {
        int32_t nc = *cap ? *cap * 2 : 32;
        dev_block *p = realloc(*arr, sizeof(dev_block) * (size_t)nc);
        if (!p) return LA_ERR_NO_MEMORY;
        *arr = p;
        *cap = nc;
    }
    (*arr)[(*n)++] = b;
    return LA_OK;
}

static la_status cuda_act_alloc(la_backend *be, int64_t n_rows, int64_t n_cols, la_act *out,
                                la_err *err) {
    cuda_backend *c = cu(be);
    if (n_rows < 0 || n_cols < 0)
        return la_err_set(err, LA_ERR_INTERNAL, "act_alloc: shape [%lld, %lld]", (long long)n_rows,
                          (long long)n_cols);
    size_t need = round_alloc((size_t)(n_rows * n_cols > 0 ? n_rows * n_cols : 1) * 2);
    int32_t best = -1;
    for (int32_t i = 0; i < c->n_free; i++) {
        size_t b = c->free_list[i].bytes;
        if (b < need || b > 2 * need + ((size_t)1 << 20)) continue;
        if (best < 0 || b < c->free_list[best].bytes) best = i;
        /* graphs: among equal sizes the lowest address, so that the same allocations get
         * the same buffers every step whatever order the free list is in (graph keys) */
        else if (c->graphs && b == c->free_list[best].bytes &&
                 (uintptr_t)c->free_list[i].ptr < (uintptr_t)c->free_list[best].ptr)
            best = i;
    }
    dev_block blk;
    if (best >= 0) {
        blk = c->free_list[best];
        c->free_list[best] = c->free_list[--c->n_free];
    } else {
        blk.bytes = need;
        cudaError_t e = cudaMalloc(&blk.ptr, need);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            LA_TRY(flush_recorded(c, err)); /* recorded operations may use cached buffers */
            release_cache(c);
            e = cudaMalloc(&blk.ptr, need);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: activation [%lld, %lld]: out of device memory",
                              (long long)n_rows, (long long)n_cols);
        }
    }
    if (push_block(&c->live, &c->n_live, &c->cap_live, blk) != LA_OK) {
        push_block(&c->free_list, &c->n_free, &c->cap_free, blk);
        return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: out of host memory");
    }
    out->data = blk.ptr;
    out->n_rows = n_rows;
    out->n_cols = n_cols;
    return LA_OK;
}

static void cuda_act_free(la_backend *be, la_act *a) {
    cuda_backend *c = cu(be);
    if (!a->data) return;
    for (int32_t i = 0; i < c->n_live; i++)
        if (c->live[i].ptr == a->data) {
            dev_block b = c->live[i];
            c->live[i] = c->live[--c->n_live];
            if (push_block(&c->free_list, &c->n_free, &c->cap_free, b) != LA_OK) {
                (void)flush_recorded(c, NULL); /* a failure resurfaces at the next wait */
                cudaStreamSynchronize(c->stream);
                dev_free(b.ptr);
            }
            break;
        }
    a->data = NULL;
    a->n_rows = a->n_cols = 0;
}

/* ============================================================ block copies =========== */

static la_status flush_copies(cuda_backend *c, la_err *err) {
    if (c->n_jobs == 0) return LA_OK;
    const la_model_config *m = &c->base.cfg;
    size_t bytes = sizeof(la_cuda_copy_job) * (size_t)c->n_jobs;
    prof_begin(c);
    la_status s = staging_reserve(c, &c->jobs_stage, bytes, err);
    if (s == LA_OK) {
        memcpy(c->jobs_stage.host, c->jobs, bytes);
        s = staging_send(c, &c->jobs_stage, bytes, err);
    }
    if (s == LA_OK) {
        la_cuda_kv_copy_params p = {c->k_pool, c->v_pool, c->jobs_stage.dev, c->n_jobs, m->n_layers,
                                    c->n_blocks, m->n_kv_heads, m->head_dim, c->block_size,
                                    c->rope, c->rope_len};
        s = la_cuda_kv_copy_rotate(&p, c->stream, err);
    }
    c->n_jobs = 0;
    prof_end(c, PROF_KV_COPY_ROTATE);
    return s;
}

static la_status cuda_kv_copy_rotate(la_backend *be, int32_t src, int32_t dst, int32_t n_valid,
                                     int32_t delta, la_err *err) {
    cuda_backend *c = cu(be);
    if (src < 0 || src >= c->n_blocks || dst < 0 || dst >= c->n_blocks || n_valid < 0 ||
        n_valid > c->block_size)
        return la_err_set(err, LA_ERR_INTERNAL, "kv_copy_rotate: bad blocks %d -> %d (n_valid %d)", src, dst, n_valid);
    LA_TRY(flush_recorded(c, err)); /* the copy comes after the operations recorded so far */
    int64_t need = (delta < 0 ? -(int64_t)delta : (int64_t)delta) + 1;
    LA_TRY(ensure_rope(c, need, err));
    for (int32_t i = 0; i < c->n_jobs; i++)
        if (c->jobs[i].dst_block == src || c->jobs[i].dst_block == dst || c->jobs[i].src_block == dst) {
            LA_TRY(flush_copies(c, err));
            break;
        }
    if (c->n_jobs == c->cap_jobs) {
        int32_t nc = c->cap_jobs ? c->cap_jobs * 2 : 256;
        la_cuda_copy_job *p = realloc(c->jobs, sizeof *p * (size_t)nc);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "kv_copy_rotate: out of memory");
        c->jobs = p;
        c->cap_jobs = nc;
    }
    c->jobs[c->n_jobs++] = (la_cuda_copy_job){src, dst, n_valid, delta};
    return LA_OK;
}

/* ============================================================ batch_begin ============ */

static int cmp_items_longest_first(const void *a, const void *b) {
    const la_cuda_attn_item *x = a, *y = b;
    int32_t lx = x->kv1 - x->kv0, ly = y->kv1 - y->kv0;
    return (ly > lx) - (ly < lx);
}

static int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Validate the batch against the pool and the vocabulary, and find the RoPE positions it
 * needs. Writes nothing but c->bad_token*. */
static la_status check_batch(cuda_backend *c, const la_batch *b, int64_t *rope_need, la_err *err) {
    const la_model_config *m = &c->base.cfg;
    int64_t pool_slots = c->n_blocks * c->block_size, need = 1;
    c->bad_token_row = -1;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        if (c->bad_token_row < 0 && (b->tokens[t] < 0 || b->tokens[t] >= m->vocab_size)) {
            c->bad_token_row = t;
            c->bad_token = b->tokens[t];
        }
        if (b->slots[t] < 0 || b->slots[t] >= pool_slots)
            return la_err_set(err, LA_ERR_INTERNAL, "batch: slot %lld of row %d outside the pool of %lld slots",
                              (long long)b->slots[t], t, (long long)pool_slots);
        int64_t p = llabs((int64_t)b->pos[t]) + 1;
        if (p > need) need = p;
        if (b->k_pos[t] != LA_POS_UNROTATED && llabs((int64_t)b->k_pos[t]) + 1 > need)
            need = llabs((int64_t)b->k_pos[t]) + 1;
    }
    for (int32_t i = 0; i < b->n_blocks; i++) {
        const la_attn_block *blk = &b->blocks[i];
        if (blk->block_id < 0 || blk->block_id >= c->n_blocks || blk->n_valid < 0 || blk->n_valid > c->block_size)
            return la_err_set(err, LA_ERR_INTERNAL, "batch: bad block %d (n_valid %d) for a pool of %lld blocks",
                              blk->block_id, blk->n_valid, (long long)c->n_blocks);
        if (blk->k_rope && llabs((int64_t)blk->pos0) + c->block_size + 1 > need)
            need = llabs((int64_t)blk->pos0) + c->block_size + 1;
    }
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        if (sq->row0 < 0 || sq->n_rows < 0 || (int64_t)sq->row0 + sq->n_rows > b->n_tokens ||
            sq->block0 < 0 || sq->n_blocks < 0 || (int64_t)sq->block0 + sq->n_blocks > b->n_blocks)
            return la_err_set(err, LA_ERR_INTERNAL, "batch: sequence %d has rows [%d, +%d) blocks [%d, +%d) "
                              "outside the batch", s, sq->row0, sq->n_rows, sq->block0, sq->n_blocks);
        /* lazy: |p - q_delta| is bounded by the extremes of both */
        int64_t pmin = INT64_MAX, pmax = INT64_MIN, dmin = INT64_MAX, dmax = INT64_MIN;
        for (int32_t r = 0; r < sq->n_rows; r++) {
            int64_t p = b->pos[sq->row0 + r];
            if (p < pmin) pmin = p;
            if (p > pmax) pmax = p;
        }
        for (int32_t i = 0; i < sq->n_blocks; i++) {
            int64_t d = b->blocks[sq->block0 + i].q_delta;
            if (d < dmin) dmin = d;
            if (d > dmax) dmax = d;
        }
        if (sq->n_rows > 0 && sq->n_blocks > 0) {
            int64_t a = llabs(pmax - dmin) + 1, z = llabs(pmin - dmax) + 1;
            if (a > need) need = a;
            if (z > need) need = z;
        }
    }
    for (int32_t i = 0; i < b->n_logit_rows; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens)
            return la_err_set(err, LA_ERR_INTERNAL, "batch: logit row %d outside [0, %d)", b->logit_rows[i],
                              b->n_tokens);
    *rope_need = need;
    return LA_OK;
}

/* Graph steps (all decode) whose tiles were split: pad the decode items to the most a
 * split schedule can produce, slots / n_groups (the split loop stops once the items x
 * groups fit in the slots), and the combine items and in-kernel merge sets in use to one
 * per tile, so the grids and metadata layout of the attention kernels depend on the batch
 * size only. A padded decode item has no tokens and returns at once (attn_decode.cu); a
 * padded combine item has no tokens and writes nothing (attn_combine.cu); no item names a
 * padded merge set. Sets *part_rows to a size fixed per batch size (the partial buffers
 * are then not regrown from step to step). */
static la_status pad_split_schedule(cuda_backend *c, const la_batch *b, int64_t slots, int64_t n_groups,
                                    int64_t n_tiles, int64_t *n_d, int64_t *n_c, int64_t *n_m,
                                    int64_t *part_rows, la_err *err) {
    const int64_t cap_d = slots / n_groups, R = c->heads_per_cta;
    if (*n_d > cap_d || *n_c > n_tiles || *n_m > n_tiles) /* cannot happen (see above); if it did, */
        return LA_OK; /* the real lists stay: still correct, only the graph key varies */
    LA_TRY(grow((void **)&c->items_decode, &c->cap_items_decode, cap_d, sizeof(la_cuda_attn_item), err));
    const int32_t row = b->seqs[0].row0;
    for (int64_t i = *n_d; i < cap_d; i++)
        c->items_decode[i] = (la_cuda_attn_item){0, row, 0, b->pos[row], 0, 0, -1, -1};
    *n_d = cap_d;
    la_cuda_attn_combine_item **lists[2] = {&c->combine, &c->merge};
    int64_t *caps[2] = {&c->cap_combine, &c->cap_merge}, *ns[2] = {n_c, n_m};
    for (int l = 0; l < 2; l++) {
        if (*ns[l] == 0) continue;
        LA_TRY(grow((void **)lists[l], caps[l], n_tiles, sizeof(la_cuda_attn_combine_item), err));
        for (int64_t i = *ns[l]; i < n_tiles; i++)
            (*lists[l])[i] = (la_cuda_attn_combine_item){row, 0, 0, 0, (int32_t)R, {0}};
        *ns[l] = n_tiles;
    }
    *part_rows = cap_d * n_groups * R;
    if (*part_rows > INT32_MAX) return la_err_set(err, LA_ERR_UNSUPPORTED, "attention: too many partial rows");
    return LA_OK;
}

/* The attention work lists (see the top of this file). fixed_grid: a graph step (every
 * sequence one decode row); pad the lists (pad_split_schedule). */
static la_status schedule_attention(cuda_backend *c, const la_batch *b, bool fixed_grid, la_err *err) {
    const la_model_config *m = &c->base.cfg;
    bool plain = true; /* la_cuda_attn_params.plain */
    for (int32_t i = 0; i < b->n_blocks && plain; i++) plain = b->blocks[i].q_delta == 0 && b->blocks[i].k_rope == 0;
    const int32_t kernel = la_cuda_attn_prefill_step_kernel(c->prefill_variant, m->head_dim, plain);
    const int32_t rows = la_cuda_attn_prefill_rows(kernel);
    const int32_t B = c->block_size, hpc = c->heads_per_cta, TT = rows / hpc;
    const int64_t n_groups = (int64_t)m->n_kv_heads * c->n_head_chunks;
    int64_t n_tiles = 0, max_nb = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        if (sq->n_rows <= 0) continue;
        n_tiles += sq->n_rows == 1 ? 1 : ceil_div64(sq->n_rows, TT);
        if (sq->n_blocks > max_nb) max_nb = sq->n_blocks;
    }
    LA_TRY(grow((void **)&c->tiles, &c->cap_tiles, n_tiles, sizeof(tile_plan), err));
    LA_TRY(grow((void **)&c->smin, &c->cap_smin, max_nb + 1, sizeof(int32_t), err));
    int64_t k = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        if (sq->n_rows <= 0) continue;
        const la_attn_block *bl = b->blocks + sq->block0;
        int32_t nb = sq->n_blocks;
        c->smin[nb] = INT32_MAX;
        for (int32_t i = nb - 1; i >= 0; i--) {
            int32_t v = bl[i].n_valid > 0 ? bl[i].pos0 : INT32_MAX;
            c->smin[i] = v < c->smin[i + 1] ? v : c->smin[i + 1];
        }
        int32_t step = sq->n_rows == 1 ? 1 : TT;
        for (int32_t r0 = 0; r0 < sq->n_rows; r0 += step) {
            int32_t n = sq->n_rows - r0 < step ? sq->n_rows - r0 : step;
            int32_t pmax = INT32_MIN;
            for (int32_t r = 0; r < n; r++)
                if (b->pos[sq->row0 + r0 + r] > pmax) pmax = b->pos[sq->row0 + r0 + r];
            int32_t lo = 0, hi = nb; /* first block index whose suffix minimum is past pmax */
            while (lo < hi) {
                int32_t mid = lo + (hi - lo) / 2;
                if (c->smin[mid] > pmax) hi = mid;
                else lo = mid + 1;
            }
            c->tiles[k++] = (tile_plan){s, sq->row0 + r0, n, pmax, lo * B, sq->n_rows == 1};
        }
    }
    /* split over the key range when the tiles alone leave SMs idle */
    const int64_t KT = LA_ATTN_KEYS_PER_TILE;
    int64_t key_tiles = 0;
    bool all_decode = true;
    for (int64_t t = 0; t < n_tiles; t++) {
        key_tiles += ceil_div64(c->tiles[t].kv_len, KT);
        all_decode = all_decode && c->tiles[t].decode;
    }
    key_tiles *= n_groups;
    /* decode v2's target in decode-only steps; v1 keeps the one it was measured with */
    const bool decode_target = all_decode && c->decode_variant == 2;
    /* a v4 CTA holds two v3 CTAs' rows and runs one per SM: half the CTAs per SM in a step
     * with v4's prefill tiles */
    const int64_t per_sm = decode_target                  ? c->split_ctas_decode
                           : kernel == 4 && !all_decode ? (c->split_ctas + 1) / 2
                                                          : c->split_ctas;
    const int64_t slots = per_sm * c->n_sm;
    int64_t chunk = INT64_MAX;
    if (n_tiles * n_groups < slots && key_tiles > 0) {
        chunk = ceil_div64(key_tiles, slots);
        /* at least 2 key tiles per split; 8 (512 keys) in a decode-only step, whose items
         * are too short otherwise (Llama-3-8B, batch 1 at 8K: 33 splits of 256 keys, the
         * combine merging 33 partial rows per head; GPU_NOTES.md, split sweep) */
        const int64_t min_chunk = all_decode ? LA_ATTN_DECODE_MIN_SPLIT_TILES : 2;
        if (chunk < min_chunk) chunk = min_chunk;
        for (;;) {
            int64_t total = 0;
            for (int64_t t = 0; t < n_tiles; t++) {
                int64_t ntk = ceil_div64(c->tiles[t].kv_len, KT);
                total += ntk > 1 ? ceil_div64(ntk, chunk) : 1;
            }
            if (total * n_groups <= slots) break;
            chunk++;
        }
    }
    /* split decode tiles under decode v2 merge in attn_decode's last CTA (LA_CUDA_FUSED_MERGE) */
    const bool merge_decode = c->decode_variant == 2 && (c->fused & LA_CUDA_FUSED_MERGE);
    int64_t n_p = 0, n_d = 0, n_c = 0, n_m = 0, part_rows = 0;
    int32_t combine_rows = hpc;
    for (int64_t t = 0; t < n_tiles; t++) {
        const tile_plan *tp = &c->tiles[t];
        int64_t ntk = ceil_div64(tp->kv_len, KT);
        int64_t n_split = (chunk == INT64_MAX || ntk <= 1) ? 1 : ceil_div64(ntk, chunk);
        int32_t R = tp->decode ? hpc : rows;
        la_cuda_attn_item item = {b->seqs[tp->seq_id].block0, tp->row0, tp->n_tokens, tp->pos_max, 0, tp->kv_len,
                                  -1, -1};
        int64_t *n_items = tp->decode ? &n_d : &n_p;
        la_cuda_attn_item **items = tp->decode ? &c->items_decode : &c->items_prefill;
        int64_t *cap = tp->decode ? &c->cap_items_decode : &c->cap_items_prefill;
        LA_TRY(grow((void **)items, cap, *n_items + n_split, sizeof(la_cuda_attn_item), err));
        if (n_split == 1) {
            (*items)[(*n_items)++] = item;
            continue;
        }
        int64_t base = part_rows, per = ntk / n_split, extra = ntk % n_split, t0 = 0;
        part_rows += n_split * n_groups * R;
        if (part_rows > INT32_MAX) return la_err_set(err, LA_ERR_UNSUPPORTED, "attention: too many partial rows");
        const la_cuda_attn_combine_item ci = {tp->row0, tp->n_tokens, (int32_t)base, (int32_t)n_split, R, {0}};
        if (tp->decode && merge_decode) {
            LA_TRY(grow((void **)&c->merge, &c->cap_merge, n_m + 1, sizeof(la_cuda_attn_combine_item), err));
            item.merge = (int32_t)n_m;
            c->merge[n_m++] = ci;
        } else {
            LA_TRY(grow((void **)&c->combine, &c->cap_combine, n_c + 1, sizeof(la_cuda_attn_combine_item), err));
            c->combine[n_c++] = ci;
            if (R > combine_rows) combine_rows = R;
        }
        for (int64_t s = 0; s < n_split; s++) {
            int64_t nt = per + (s < extra ? 1 : 0);
            item.kv0 = (int32_t)(t0 * KT);
            item.kv1 = (int32_t)((t0 + nt) * KT < tp->kv_len ? (t0 + nt) * KT : tp->kv_len);
            item.part_row0 = (int32_t)(base + s * n_groups * R);
            t0 += nt;
            (*items)[(*n_items)++] = item;
        }
    }
    if (n_p > LA_ATTN_MAX_PREFILL_ITEMS) /* refused here, before the step writes anything */
        return la_err_set(err, LA_ERR_UNSUPPORTED, "attention: %lld prefill tiles in one step (at most %d)",
                          (long long)n_p, LA_ATTN_MAX_PREFILL_ITEMS);
    if (n_p > 1) qsort(c->items_prefill, (size_t)n_p, sizeof(la_cuda_attn_item), cmp_items_longest_first);
    if (fixed_grid && n_c + n_m > 0)
        LA_TRY(pad_split_schedule(c, b, slots, n_groups, n_tiles, &n_d, &n_c, &n_m, &part_rows, err));
    if (n_m * n_groups > c->cap_merge_count) { /* counters: zero, and left zero by every launch */
        int64_t cap = n_m * n_groups * 2;
        cudaStreamSynchronize(c->stream);
        dev_free(c->merge_count);
        c->merge_count = NULL;
        c->cap_merge_count = 0;
        LA_TRY(dev_alloc((void **)&c->merge_count, (size_t)cap * sizeof(int32_t), "attention merge counters", err));
        cudaError_t e = cudaMemsetAsync(c->merge_count, 0, (size_t)cap * sizeof(int32_t), c->stream);
        if (e != cudaSuccess) return cuda_fail(err, e, "attention merge counters");
        c->cap_merge_count = cap;
    }
    if (part_rows > c->cap_part_rows) {
        int64_t cap = part_rows * 2;
        cudaStreamSynchronize(c->stream);
        dev_free(c->part_o);
        dev_free(c->part_ml);
        c->part_o = NULL;
        c->part_ml = NULL;
        c->cap_part_rows = 0;
        LA_TRY(dev_alloc((void **)&c->part_o, (size_t)cap * (size_t)m->head_dim * sizeof(float), "attention partials", err));
        LA_TRY(dev_alloc((void **)&c->part_ml, (size_t)cap * sizeof(float2), "attention partials", err));
        c->cap_part_rows = cap;
    }
    c->n_items_prefill = (int32_t)n_p;
    c->n_items_decode = (int32_t)n_d;
    c->n_combine = (int32_t)n_c;
    c->n_merge = (int32_t)n_m;
    c->step_prefill_variant = c->prefill_variant;
    c->step_plain = plain;
    if (n_p > 0) c->last_prefill_kernel = kernel;
    c->step_decode_variant = c->decode_variant;
    /* a decode-only grid within one wave at one CTA per SM: every CTA has an SM to itself,
     * so attn_decode v2 takes its deep instance, 8 warps per CTA (attn_decode.cu) */
    c->step_decode_deep = decode_target && n_d * n_groups <= c->n_sm &&
                          la_cuda_attn_decode_smem(m->head_dim, 1) <= c->smem_optin;
    c->combine_rows = combine_rows;
    return LA_OK;
}

static size_t pack_at(size_t *off, size_t bytes) {
    size_t at = *off;
    *off = (at + bytes + 15) / 16 * 16;
    return at;
}

/* A graph candidate (top of this file): every sequence one new row, logits wanted, graphs
 * on and profiling off. */
static bool graph_candidate(const cuda_backend *c, const la_batch *b) {
    if (!c->graphs || c->prof || b->n_tokens <= 0 || b->n_logit_rows <= 0 || b->n_seqs != b->n_tokens)
        return false;
    for (int32_t s = 0; s < b->n_seqs; s++)
        if (b->seqs[s].n_rows != 1) return false;
    return true;
}

static la_status cuda_batch_begin(la_backend *be, const la_batch *b, la_err *err) {
    cuda_backend *c = cu(be);
    LA_TRY(flush_recorded(c, err)); /* a step left unfinished runs before this one */
    c->batch_ok = false;
    if (!c->layer_w) return la_err_set(err, LA_ERR_INTERNAL, "cuda backend: batch before load_weights");
    if (b->n_tokens < 0 || b->n_seqs < 0 || b->n_blocks < 0 || b->n_logit_rows < 0)
        return la_err_set(err, LA_ERR_INTERNAL, "batch: negative counts");
    LA_TRY(flush_copies(c, err));
    prof_begin(c);
    int64_t rope_need = 1;
    LA_TRY(check_batch(c, b, &rope_need, err));
    LA_TRY(ensure_rope(c, rope_need, err));
    const bool record = graph_candidate(c, b);
    LA_TRY(schedule_attention(c, b, record, err));
    size_t n = (size_t)b->n_tokens, off = 0;
    size_t o_tok = pack_at(&off, n * 4), o_pos = pack_at(&off, n * 4), o_kpos = pack_at(&off, n * 4);
    size_t o_slots = pack_at(&off, n * 8);
    const size_t blocks_bytes = (size_t)b->n_blocks * sizeof(la_attn_block);
    size_t o_blocks = record ? 0 : pack_at(&off, blocks_bytes);
    size_t o_rows = pack_at(&off, (size_t)b->n_logit_rows * 4);
    size_t o_ip = pack_at(&off, (size_t)c->n_items_prefill * sizeof(la_cuda_attn_item));
    size_t o_id = pack_at(&off, (size_t)c->n_items_decode * sizeof(la_cuda_attn_item));
    size_t o_cb = pack_at(&off, (size_t)c->n_combine * sizeof(la_cuda_attn_combine_item));
    size_t o_mg = pack_at(&off, (size_t)c->n_merge * sizeof(la_cuda_attn_combine_item));
    if (record) o_blocks = pack_at(&off, blocks_bytes); /* last: the only length that changes */
    LA_TRY(staging_reserve(c, &c->meta, off, err));
    char *h = c->meta.host, *d = c->meta.dev;
    if (n) {
        memcpy(h + o_tok, b->tokens, n * 4);
        memcpy(h + o_pos, b->pos, n * 4);
        memcpy(h + o_kpos, b->k_pos, n * 4);
        memcpy(h + o_slots, b->slots, n * 8);
    }
    if (b->n_blocks) memcpy(h + o_blocks, b->blocks, (size_t)b->n_blocks * sizeof(la_attn_block));
    if (b->n_logit_rows) memcpy(h + o_rows, b->logit_rows, (size_t)b->n_logit_rows * 4);
    if (c->n_items_prefill)
        memcpy(h + o_ip, c->items_prefill, (size_t)c->n_items_prefill * sizeof(la_cuda_attn_item));
    if (c->n_items_decode)
        memcpy(h + o_id, c->items_decode, (size_t)c->n_items_decode * sizeof(la_cuda_attn_item));
    if (c->n_combine) memcpy(h + o_cb, c->combine, (size_t)c->n_combine * sizeof(la_cuda_attn_combine_item));
    if (c->n_merge) memcpy(h + o_mg, c->merge, (size_t)c->n_merge * sizeof(la_cuda_attn_combine_item));
    LA_TRY(staging_send(c, &c->meta, off, err));
    c->d_tokens = (const int32_t *)(d + o_tok);
    c->d_pos = (const int32_t *)(d + o_pos);
    c->d_kpos = (const int32_t *)(d + o_kpos);
    c->d_slots = (const int64_t *)(d + o_slots);
    c->d_blocks = (const la_attn_block *)(d + o_blocks);
    c->d_logit_rows = (const int32_t *)(d + o_rows);
    c->d_items_prefill = (const la_cuda_attn_item *)(d + o_ip);
    c->d_items_decode = (const la_cuda_attn_item *)(d + o_id);
    c->d_combine = (const la_cuda_attn_combine_item *)(d + o_cb);
    c->d_merge = (const la_cuda_attn_combine_item *)(d + o_mg);
    c->n_tokens = b->n_tokens;
    c->n_seqs = b->n_seqs;
    c->n_logit_rows = b->n_logit_rows;
    c->batch_ok = true;
    c->recording = record;
    c->n_recs = 0;
    if (record) c->gstats.steps_recorded++;
    prof_end(c, PROF_BATCH_BEGIN);
    return LA_OK;
}

/* ============================================================ forward ops ============ */

#define NEED_BATCH(c)                                                                            \
    do {                                                                                         \
        if (!(c)->batch_ok)                                                                      \
            return la_err_set(err, LA_ERR_INTERNAL, "cuda backend: %s without a successful batch_begin", \
                              __func__);                                                         \
    } while (0)

static la_status shape_error(la_err *err, const char *op, const la_act *a, int64_t rows, int64_t cols) {
    return la_err_set(err, LA_ERR_INTERNAL, "cuda %s: activation [%lld, %lld], expected [%lld, %lld]", op,
                      (long long)a->n_rows, (long long)a->n_cols, (long long)rows, (long long)cols);
}

/* Graph steps: append an operation, already validated, to the step's record instead of
 * queuing it (run_recorded queues it later through the same function). */
static la_status record_op(cuda_backend *c, op_kind kind, int32_t layer, int32_t weight, const la_act *a,
                           const la_act *b, la_err *err) {
    if (c->n_recs == c->cap_recs) {
        int32_t nc = c->cap_recs ? 2 * c->cap_recs : 1024;
        op_rec *p = realloc(c->recs, sizeof *p * (size_t)nc);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: recording a decode step: out of memory");
        c->recs = p;
        c->cap_recs = nc;
    }
    op_rec *r = &c->recs[c->n_recs++];
    memset(r, 0, sizeof *r);
    r->kind = (int32_t)kind;
    r->layer = layer;
    r->weight = weight;
    r->a = *a;
    if (b) r->b = *b;
    return LA_OK;
}

static la_status cuda_embed(la_backend *be, la_act *x, la_err *err) {
    cuda_backend *c = cu(be);
    NEED_BATCH(c);
    if (c->bad_token_row >= 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "token id %d outside the vocabulary [0, %d)", c->bad_token,
                          c->base.cfg.vocab_size);
    if (x->n_rows != c->n_tokens || x->n_cols != c->base.cfg.hidden_size)
        return shape_error(err, "embed", x, c->n_tokens, c->base.cfg.hidden_size);
    if (c->recording) return record_op(c, OP_EMBED, 0, 0, x, NULL, err);
    prof_begin(c);
    la_cuda_embed_params p = {x->data, c->embed, c->d_tokens, c->n_tokens, (int32_t)x->n_cols};
    LA_TRY(la_cuda_embed(&p, c->stream, err));
    prof_end(c, PROF_EMBED);
    return LA_OK;
}

/* *wp = the norm weight w of layer, checked with the shapes of x and out. */
static la_status norm_args(cuda_backend *c, const char *what, const la_act *x, la_weight_kind w, int32_t layer,
                           const la_act *out, const la_bf16_t **wp, la_err *err) {
    *wp = (w == LA_W_ATTN_NORM || w == LA_W_MLP_NORM || w == LA_W_FINAL_NORM) ? weight_ptr(c, w, layer) : NULL;
    if (!*wp) return la_err_set(err, LA_ERR_INTERNAL, "cuda %s: no norm weight %d for layer %d", what, (int)w, layer);
    if (x->n_cols != c->base.cfg.hidden_size) return shape_error(err, what, x, x->n_rows, c->base.cfg.hidden_size);
    if (out->n_rows != x->n_rows || out->n_cols != x->n_cols) return shape_error(err, what, out, x->n_rows, x->n_cols);
    return LA_OK;
}

static la_status cuda_rmsnorm(la_backend *be, const la_act *x, la_weight_kind w, int32_t layer,
                              la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    const la_bf16_t *wp;
    LA_TRY(norm_args(c, "rmsnorm", x, w, layer, out, &wp, err));
    if (c->recording) return record_op(c, OP_RMSNORM, layer, (int32_t)w, x, out, err);
    prof_begin(c);
    la_cuda_rmsnorm_params p = {x->data, out->data, wp, x->n_rows, (int32_t)x->n_cols,
                                (float)c->base.cfg.rms_norm_eps, NULL};
    LA_TRY(la_cuda_rmsnorm(&p, c->stream, err));
    prof_end(c, PROF_RMSNORM);
    return LA_OK;
}

static la_status cuda_add(la_backend *be, la_act *x, const la_act *y, la_err *err);

/* x += y, then out = RMSNorm(x) w: one launch (la_cuda_rmsnorm with a residual) when
 * LA_CUDA_FUSED_ADD_NORM is on, else add then rmsnorm. */
static la_status cuda_add_rmsnorm(la_backend *be, la_act *x, const la_act *y, la_weight_kind w, int32_t layer,
                                  la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    if (!(c->fused & LA_CUDA_FUSED_ADD_NORM)) {
        LA_TRY(cuda_add(be, x, y, err));
        return cuda_rmsnorm(be, x, w, layer, out, err);
    }
    const la_bf16_t *wp;
    LA_TRY(norm_args(c, "add_rmsnorm", x, w, layer, out, &wp, err));
    if (y->n_rows != x->n_rows || y->n_cols != x->n_cols) return shape_error(err, "add_rmsnorm", y, x->n_rows, x->n_cols);
    if (c->recording) {
        LA_TRY(record_op(c, OP_ADD_RMSNORM, layer, (int32_t)w, x, y, err));
        c->recs[c->n_recs - 1].c = *out;
        return LA_OK;
    }
    prof_begin(c);
    la_cuda_rmsnorm_params p = {x->data, out->data, wp, x->n_rows, (int32_t)x->n_cols,
                                (float)c->base.cfg.rms_norm_eps, y->data};
    LA_TRY(la_cuda_rmsnorm(&p, c->stream, err));
    prof_end(c, PROF_ADD_RMSNORM);
    return LA_OK;
}

/* Row-major y[n_rows, n_out] = x[n_rows, n_in] W^T, W the row-major [n_out, n_in] weight,
 * bf16 in and out, f32 accumulation: column-major y^T = W^T(op T on W's column-major
 * [n_in, n_out] view) x^T. */
static la_status gemm(cuda_backend *c, const void *x, const la_bf16_t *w, int64_t n_rows, int64_t n_in,
                      int64_t n_out, void *y, la_err *err) {
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)n_rows, (int)n_in, &alpha, w,
                                     CUDA_R_16BF, (int)n_in, x, CUDA_R_16BF, (int)n_in, &beta, y, CUDA_R_16BF,
                                     (int)n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return la_err_set(err, LA_ERR_BACKEND, "cublasGemmEx [%lld x %lld] x [%lld x %lld]^T: %s", (long long)n_rows,
                          (long long)n_in, (long long)n_out, (long long)n_in, blas_status_name(st));
    return LA_OK;
}

static la_status cuda_matmul(la_backend *be, const la_act *x, la_weight_kind k, int32_t layer,
                             la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    int64_t n_out, n_in;
    la_weight_shape(&c->base.cfg, k, &n_out, &n_in);
    const la_bf16_t *w = (k == LA_W_ATTN_NORM || k == LA_W_MLP_NORM || k == LA_W_FINAL_NORM) ? NULL
                                                                                          : weight_ptr(c, k, layer);
    if (!w) return la_err_set(err, LA_ERR_INTERNAL, "cuda matmul: no weight %d for layer %d", (int)k, layer);
    if (x->n_cols != n_in) return shape_error(err, "matmul", x, x->n_rows, n_in);
    if (out->n_rows != x->n_rows || out->n_cols != n_out) return shape_error(err, "matmul", out, x->n_rows, n_out);
    if (x->n_rows == 0) return LA_OK;
    if (x->n_rows > INT32_MAX || n_out > INT32_MAX)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "cuda matmul: %lld rows", (long long)x->n_rows);
    if (c->recording) return record_op(c, OP_MATMUL, layer, (int32_t)k, x, out, err);
    static const prof_slot slot_of[LA_W_KIND_COUNT] = {
        [LA_W_Q] = PROF_MATMUL_Q, [LA_W_K] = PROF_MATMUL_K, [LA_W_V] = PROF_MATMUL_V,
        [LA_W_O] = PROF_MATMUL_O, [LA_W_GATE] = PROF_MATMUL_GATE, [LA_W_UP] = PROF_MATMUL_UP,
        [LA_W_DOWN] = PROF_MATMUL_DOWN, [LA_W_LM_HEAD] = PROF_MATMUL_LM_HEAD};
    prof_begin(c);
    LA_TRY(gemm(c, x->data, w, x->n_rows, n_in, n_out, out->data, err));
    prof_end(c, slot_of[k]);
    return LA_OK;
}

/* matmul_group (backend.h). A fused group (k_fused_groups, switched on in c->fused) of at
 * most LA_CUDA_FUSED_MAX_ROWS rows: one GEMM by the stacked weight into gemm_scratch
 * [n, sum of n_out], then one split_cols kernel into the outputs. Anything else: one
 * matmul per weight, exactly as forward.c would call them. */
static la_status cuda_matmul_group(la_backend *be, const la_act *x, const la_weight_kind *w, int32_t n_w,
                                   int32_t layer, la_act *const *out, la_err *err) {
    cuda_backend *c = cu(be);
    const fused_group *g = group_of(w, n_w);
    if (!g || !(c->fused & g->bit) || x->n_rows > LA_CUDA_FUSED_MAX_ROWS || x->n_rows == 0 || !c->gemm_scratch) {
        for (int32_t i = 0; i < n_w; i++) LA_TRY(cuda_matmul(be, x, w[i], layer, out[i], err));
        return LA_OK;
    }
    const la_bf16_t *w0 = weight_ptr(c, w[0], layer);
    if (!w0) return la_err_set(err, LA_ERR_INTERNAL, "cuda matmul_group: no weight %d for layer %d", (int)w[0], layer);
    la_cuda_split_params sp = {.x = c->gemm_scratch, .n_parts = n_w, .n_rows = (int32_t)x->n_rows};
    int64_t n_in = 0, n_total = 0;
    for (int32_t i = 0; i < n_w; i++) {
        int64_t n_out, in_i;
        la_weight_shape(&c->base.cfg, w[i], &n_out, &in_i);
        /* the members are stacked right after each other (load_all) */
        if (weight_ptr(c, w[i], layer) != w0 + n_total * in_i || (i > 0 && in_i != n_in))
            return la_err_set(err, LA_ERR_INTERNAL, "cuda matmul_group: weight %d of layer %d is not stacked", (int)w[i],
                              layer);
        n_in = in_i;
        if (out[i]->n_rows != x->n_rows || out[i]->n_cols != n_out)
            return shape_error(err, "matmul_group", out[i], x->n_rows, n_out);
        sp.out[i] = out[i]->data;
        sp.n_cols[i] = (int32_t)n_out;
        n_total += n_out;
    }
    if (x->n_cols != n_in) return shape_error(err, "matmul_group", x, x->n_rows, n_in);
    if (n_total > INT32_MAX) return la_err_set(err, LA_ERR_UNSUPPORTED, "cuda matmul_group: %lld outputs", (long long)n_total);
    if (c->recording) {
        LA_TRY(record_op(c, OP_MATMUL_GROUP, layer, (int32_t)w[0], x, out[0], err));
        op_rec *r = &c->recs[c->n_recs - 1];
        r->n_w = n_w;
        if (n_w > 1) r->c = *out[1];
        if (n_w > 2) r->d = *out[2];
        return LA_OK;
    }
    prof_begin(c);
    LA_TRY(gemm(c, x->data, w0, x->n_rows, n_in, n_total, c->gemm_scratch, err));
    prof_end(c, g->slot);
    prof_begin(c);
    LA_TRY(la_cuda_split_cols(&sp, c->stream, err));
    prof_end(c, PROF_MATMUL_SPLIT);
    return LA_OK;
}

/* LA_ERR_INTERNAL naming `what` unless `layer` is a layer of the model and the pool exists. */
static la_status check_pool_layer(const cuda_backend *c, int32_t layer, const char *what, la_err *err) {
    if (layer < 0 || layer >= c->n_layers || !c->k_pool)
        return la_err_set(err, LA_ERR_INTERNAL, "cuda %s: layer %d (pool %s)", what, layer, c->k_pool ? "ok" : "missing");
    return LA_OK;
}

/* kv_write's parameters for `layer` of this step: K rows k (rotated in place), V rows v. */
static la_cuda_kv_write_params kv_write_params(const cuda_backend *c, int32_t layer, void *k, const void *v) {
    const la_model_config *m = &c->base.cfg;
    const int64_t slab = (int64_t)layer * kv_slab_elems(c);
    return (la_cuda_kv_write_params){k, v, c->k_pool + slab, c->v_pool + slab, c->d_kpos, c->d_slots, c->n_tokens,
                                     m->n_kv_heads, m->head_dim, c->block_size, c->rope, c->rope_len};
}

static la_status cuda_kv_write(la_backend *be, int32_t layer, la_act *k, const la_act *v, la_err *err) {
    cuda_backend *c = cu(be);
    const la_model_config *m = &c->base.cfg;
    NEED_BATCH(c);
    int64_t kvd = (int64_t)m->n_kv_heads * m->head_dim;
    LA_TRY(check_pool_layer(c, layer, "kv_write", err));
    if (k->n_rows != c->n_tokens || k->n_cols != kvd) return shape_error(err, "kv_write", k, c->n_tokens, kvd);
    if (v->n_rows != c->n_tokens || v->n_cols != kvd) return shape_error(err, "kv_write", v, c->n_tokens, kvd);
    if (c->recording) return record_op(c, OP_KV_WRITE, layer, 0, k, v, err);
    LA_TRY(flush_copies(c, err));
    prof_begin(c);
    la_cuda_kv_write_params p = kv_write_params(c, layer, k->data, v->data);
    LA_TRY(la_cuda_kv_write(&p, c->stream, err));
    prof_end(c, PROF_KV_WRITE);
    return LA_OK;
}

/* qkv_kv_write (backend.h). With LA_CUDA_FUSED_QKV and LA_CUDA_FUSED_KV_WRITE, at most
 * LA_CUDA_FUSED_MAX_ROWS rows: the fused QKV GEMM into gemm_scratch, then one qkv_kv_write
 * kernel where matmul_group and kv_write would launch split_cols and kv_write (bit-equal,
 * one launch fewer per layer). Otherwise matmul_group, then kv_write. */
static la_status cuda_qkv_kv_write(la_backend *be, const la_act *x, int32_t layer, la_act *q, la_act *k, la_act *v,
                                   la_err *err) {
    cuda_backend *c = cu(be);
    static const la_weight_kind w[3] = {LA_W_Q, LA_W_K, LA_W_V};
    const uint32_t need = LA_CUDA_FUSED_QKV | LA_CUDA_FUSED_KV_WRITE;
    if ((c->fused & need) != need || x->n_rows <= 0 || x->n_rows > LA_CUDA_FUSED_MAX_ROWS || !c->gemm_scratch) {
        LA_TRY(cuda_matmul_group(be, x, w, 3, layer, (la_act *const[]){q, k, v}, err));
        return cuda_kv_write(be, layer, k, v, err);
    }
    const la_model_config *m = &c->base.cfg;
    NEED_BATCH(c);
    const int64_t qd = (int64_t)m->n_heads * m->head_dim, kvd = (int64_t)m->n_kv_heads * m->head_dim;
    const int64_t hidden = m->hidden_size;
    LA_TRY(check_pool_layer(c, layer, "qkv_kv_write", err));
    const la_bf16_t *w0 = weight_ptr(c, LA_W_Q, layer);
    if (!w0 || weight_ptr(c, LA_W_K, layer) != w0 + qd * hidden || weight_ptr(c, LA_W_V, layer) != w0 + (qd + kvd) * hidden)
        return la_err_set(err, LA_ERR_INTERNAL, "cuda qkv_kv_write: W_q / W_k / W_v of layer %d not stacked", layer);
    if (x->n_rows != c->n_tokens || x->n_cols != hidden) return shape_error(err, "qkv_kv_write", x, c->n_tokens, hidden);
    if (q->n_rows != x->n_rows || q->n_cols != qd) return shape_error(err, "qkv_kv_write", q, x->n_rows, qd);
    if (k->n_rows != x->n_rows || k->n_cols != kvd) return shape_error(err, "qkv_kv_write", k, x->n_rows, kvd);
    if (v->n_rows != x->n_rows || v->n_cols != kvd) return shape_error(err, "qkv_kv_write", v, x->n_rows, kvd);
    if (c->recording) {
        LA_TRY(record_op(c, OP_QKV_KV_WRITE, layer, 0, x, q, err));
        c->recs[c->n_recs - 1].c = *k;
        c->recs[c->n_recs - 1].d = *v;
        return LA_OK;
    }
    prof_begin(c);
    LA_TRY(gemm(c, x->data, w0, x->n_rows, hidden, qd + 2 * kvd, c->gemm_scratch, err));
    prof_end(c, PROF_MATMUL_QKV);
    LA_TRY(flush_copies(c, err));
    prof_begin(c);
    la_cuda_qkv_kv_write_params p = {.kv = kv_write_params(c, layer, k->data, NULL), .qkv = c->gemm_scratch,
                                     .q = q->data, .v_act = v->data, .q_cols = (int32_t)qd};
    LA_TRY(la_cuda_qkv_kv_write(&p, c->stream, err));
    prof_end(c, PROF_KV_WRITE);
    return LA_OK;
}

static la_status cuda_attention(la_backend *be, int32_t layer, const la_act *q, la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    const la_model_config *m = &c->base.cfg;
    NEED_BATCH(c);
    int64_t qd = (int64_t)m->n_heads * m->head_dim;
    LA_TRY(check_pool_layer(c, layer, "attention", err));
    if (q->n_rows != c->n_tokens || q->n_cols != qd) return shape_error(err, "attention", q, c->n_tokens, qd);
    if (out->n_rows != c->n_tokens || out->n_cols != qd) return shape_error(err, "attention", out, c->n_tokens, qd);
    if (c->recording) return record_op(c, OP_ATTENTION, layer, 0, q, out, err);
    LA_TRY(flush_copies(c, err));
    int64_t slab = (int64_t)layer * kv_slab_elems(c);
    la_cuda_attn_params p = {
        .q = q->data, .out = out->data, .k_pool = c->k_pool + slab, .v_pool = c->v_pool + slab,
        .pos = c->d_pos, .blocks = c->d_blocks, .rope = c->rope, .rope_len = c->rope_len,
        .combine = c->d_combine, .n_combine = c->n_combine, .merge = c->d_merge, .merge_count = c->merge_count,
        .part_o = c->part_o, .part_ml = c->part_ml,
        .n_heads = m->n_heads, .n_kv_heads = m->n_kv_heads, .head_dim = m->head_dim,
        .block_size = c->block_size, .heads_per_cta = c->heads_per_cta, .n_head_chunks = c->n_head_chunks,
        .scale_log2 = (float)(1.4426950408889634 / sqrt((double)m->head_dim)),
        .prefill_variant = c->step_prefill_variant, .plain = c->step_plain, .combine_rows = c->combine_rows,
        .decode_variant = c->step_decode_variant, .decode_deep = c->step_decode_deep,
    };
    prof_begin(c);
    p.items = c->d_items_prefill;
    p.n_items = c->n_items_prefill;
    LA_TRY(la_cuda_attn_prefill(&p, c->stream, err));
    prof_end(c, PROF_ATTN_PREFILL);
    prof_begin(c);
    p.items = c->d_items_decode;
    p.n_items = c->n_items_decode;
    LA_TRY(la_cuda_attn_decode(&p, c->stream, err));
    prof_end(c, PROF_ATTN_DECODE);
    if (c->n_combine) {
        prof_begin(c);
        LA_TRY(la_cuda_attn_combine(&p, c->stream, err));
        prof_end(c, PROF_ATTN_COMBINE);
    }
    return LA_OK;
}

static la_status cuda_swiglu(la_backend *be, la_act *gate, const la_act *up, la_err *err) {
    cuda_backend *c = cu(be);
    if (gate->n_rows != up->n_rows || gate->n_cols != up->n_cols)
        return shape_error(err, "swiglu", up, gate->n_rows, gate->n_cols);
    if (c->recording) return record_op(c, OP_SWIGLU, 0, 0, gate, up, err);
    prof_begin(c);
    la_cuda_binary_params p = {gate->data, up->data, gate->n_rows * gate->n_cols};
    LA_TRY(la_cuda_swiglu(&p, c->stream, err));
    prof_end(c, PROF_SWIGLU);
    return LA_OK;
}

/* gate = silu(x W_gate^T) * (x W_up^T). With LA_CUDA_FUSED_SWIGLU and the gate/up group
 * fused for x's row count: one GEMM by [W_gate; W_up] into gemm_scratch, then one
 * swiglu_stacked launch straight from it (no column split). Otherwise matmul_group into
 * gate and up, then swiglu. up: [n, intermediate] scratch. */
static la_status cuda_gate_up_swiglu(la_backend *be, const la_act *x, int32_t layer, la_act *gate, la_act *up,
                                     la_err *err) {
    cuda_backend *c = cu(be);
    static const la_weight_kind w[2] = {LA_W_GATE, LA_W_UP};
    const int64_t inter = c->base.cfg.intermediate_size, hidden = c->base.cfg.hidden_size;
    const bool fuse = (c->fused & LA_CUDA_FUSED_SWIGLU) && (c->fused & LA_CUDA_FUSED_GATE_UP) &&
                      x->n_rows > 0 && x->n_rows <= LA_CUDA_FUSED_MAX_ROWS && c->gemm_scratch;
    if (!fuse) {
        LA_TRY(cuda_matmul_group(be, x, w, 2, layer, (la_act *const[]){gate, up}, err));
        return cuda_swiglu(be, gate, up, err);
    }
    const la_bf16_t *w0 = weight_ptr(c, LA_W_GATE, layer);
    if (!w0 || weight_ptr(c, LA_W_UP, layer) != w0 + inter * hidden)
        return la_err_set(err, LA_ERR_INTERNAL, "cuda gate_up_swiglu: W_gate / W_up of layer %d not stacked", layer);
    if (x->n_cols != hidden) return shape_error(err, "gate_up_swiglu", x, x->n_rows, hidden);
    if (gate->n_rows != x->n_rows || gate->n_cols != inter) return shape_error(err, "gate_up_swiglu", gate, x->n_rows, inter);
    if (up->n_rows != x->n_rows || up->n_cols != inter) return shape_error(err, "gate_up_swiglu", up, x->n_rows, inter);
    if (c->recording) {
        LA_TRY(record_op(c, OP_GATE_UP_SWIGLU, layer, 0, x, gate, err));
        c->recs[c->n_recs - 1].c = *up;
        return LA_OK;
    }
    prof_begin(c);
    LA_TRY(gemm(c, x->data, w0, x->n_rows, hidden, 2 * inter, c->gemm_scratch, err));
    prof_end(c, PROF_MATMUL_GATE_UP);
    prof_begin(c);
    la_cuda_swiglu_stacked_params p = {c->gemm_scratch, gate->data, x->n_rows, (int32_t)inter};
    LA_TRY(la_cuda_swiglu_stacked(&p, c->stream, err));
    prof_end(c, PROF_SWIGLU);
    return LA_OK;
}

static la_status cuda_add(la_backend *be, la_act *x, const la_act *y, la_err *err) {
    cuda_backend *c = cu(be);
    if (x->n_rows != y->n_rows || x->n_cols != y->n_cols) return shape_error(err, "add", y, x->n_rows, x->n_cols);
    if (c->recording) return record_op(c, OP_ADD, 0, 0, x, y, err);
    prof_begin(c);
    la_cuda_binary_params p = {x->data, y->data, x->n_rows * x->n_cols};
    LA_TRY(la_cuda_add(&p, c->stream, err));
    prof_end(c, PROF_ADD);
    return LA_OK;
}

static la_status cuda_gather_rows(la_backend *be, const la_act *x, la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    NEED_BATCH(c);
    if (x->n_rows != c->n_tokens) return shape_error(err, "gather_rows", x, c->n_tokens, x->n_cols);
    if (out->n_rows != c->n_logit_rows || out->n_cols != x->n_cols)
        return shape_error(err, "gather_rows", out, c->n_logit_rows, x->n_cols);
    if (c->recording) return record_op(c, OP_GATHER_ROWS, 0, 0, x, out, err);
    prof_begin(c);
    la_cuda_gather_params p = {x->data, out->data, c->d_logit_rows, c->n_logit_rows, x->n_cols};
    LA_TRY(la_cuda_gather_rows(&p, c->stream, err));
    prof_end(c, PROF_GATHER_ROWS);
    return LA_OK;
}

/* Device f32 scratch and pinned host buffer of n floats each. */
static la_status reserve_readback(cuda_backend *c, size_t n, la_err *err) {
    size_t bytes = n * sizeof(float);
    if (bytes > c->cap_f32_dev || bytes > c->cap_host_pinned) {
        size_t cap = bytes * 2 > ((size_t)1 << 20) ? bytes * 2 : ((size_t)1 << 20);
        CUDA_TRY(cudaStreamSynchronize(c->stream), "readback buffers");
        dev_free(c->f32_dev);
        if (c->host_pinned) cudaFreeHost(c->host_pinned);
        c->f32_dev = NULL;
        c->host_pinned = NULL;
        c->cap_f32_dev = c->cap_host_pinned = 0;
        LA_TRY(dev_alloc((void **)&c->f32_dev, cap, "readback buffer", err));
        CUDA_TRY(cudaMallocHost(&c->host_pinned, cap), "pinned readback buffer");
        c->cap_f32_dev = c->cap_host_pinned = cap;
    }
    return LA_OK;
}

/* Queue x's conversion to f32 and its copy into the pinned readback buffer (sized by
 * reserve_readback); the caller waits. */
static la_status to_host_queue(cuda_backend *c, const la_act *x, la_err *err) {
    size_t n = (size_t)(x->n_rows * x->n_cols);
    la_cuda_to_f32_params p = {x->data, c->f32_dev, (int64_t)n};
    LA_TRY(la_cuda_bf16_to_f32(&p, c->stream, err));
    CUDA_TRY(cudaMemcpyAsync(c->host_pinned, c->f32_dev, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream),
             "to_host copy");
    return LA_OK;
}

/* Queue the greedy token ids of x's rows (la_cuda_argmax) into the readback buffer (as
 * int32, sized by reserve_readback for x->n_rows floats) and their copy into the pinned
 * buffer; the caller waits. */
static la_status argmax_queue(cuda_backend *c, const la_act *x, la_err *err) {
    la_cuda_argmax_params p = {x->data, (int32_t *)c->f32_dev, (int32_t)x->n_rows, (int32_t)x->n_cols};
    LA_TRY(la_cuda_argmax(&p, c->stream, err));
    CUDA_TRY(cudaMemcpyAsync(c->host_pinned, c->f32_dev, (size_t)x->n_rows * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, c->stream), "argmax copy");
    return LA_OK;
}

static la_status graph_step_finish(cuda_backend *c, op_kind last, const la_act *x, void *host, la_err *err);

static la_status cuda_to_host(la_backend *be, const la_act *x, float *host, la_err *err) {
    cuda_backend *c = cu(be);
    size_t n = (size_t)(x->n_rows * x->n_cols);
    if (n == 0) return flush_recorded(c, err);
    if (c->recording) return graph_step_finish(c, OP_TO_HOST, x, host, err);
    prof_begin(c);
    LA_TRY(reserve_readback(c, n, err));
    LA_TRY(to_host_queue(c, x, err));
    CUDA_TRY(cudaStreamSynchronize(c->stream), "forward pass");
    memcpy(host, c->host_pinned, n * sizeof(float));
    prof_end(c, PROF_TO_HOST);
    return LA_OK;
}

static la_status cuda_argmax_to_host(la_backend *be, const la_act *x, int32_t *ids, la_err *err) {
    cuda_backend *c = cu(be);
    if (x->n_rows == 0) return flush_recorded(c, err);
    if (x->n_cols <= 0 || x->n_cols > INT32_MAX || x->n_rows > INT32_MAX)
        return la_err_set(err, LA_ERR_INVALID_ARG, "argmax: bad shape [%lld, %lld]", (long long)x->n_rows,
                          (long long)x->n_cols);
    if (c->recording) return graph_step_finish(c, OP_ARGMAX, x, ids, err);
    prof_begin(c);
    LA_TRY(reserve_readback(c, (size_t)x->n_rows, err));
    LA_TRY(argmax_queue(c, x, err));
    CUDA_TRY(cudaStreamSynchronize(c->stream), "forward pass");
    memcpy(ids, c->host_pinned, (size_t)x->n_rows * sizeof(int32_t));
    prof_end(c, PROF_ARGMAX);
    return LA_OK;
}

static la_status cuda_kv_read_slot(la_backend *be, int32_t layer, int64_t slot, float *k, float *v, la_err *err) {
    cuda_backend *c = cu(be);
    const la_model_config *m = &c->base.cfg;
    if (layer < 0 || layer >= c->n_layers || slot < 0 || slot >= c->n_blocks * c->block_size)
        return la_err_set(err, LA_ERR_INVALID_ARG, "slot %lld of layer %d outside the pool", (long long)slot, layer);
    LA_TRY(flush_recorded(c, err));
    LA_TRY(flush_copies(c, err));
    int32_t hd = m->head_dim, nkv = m->n_kv_heads;
    LA_TRY(reserve_readback(c, (size_t)nkv * hd, err));
    int64_t blk = slot / c->block_size, off = slot % c->block_size;
    int64_t base = (int64_t)layer * kv_slab_elems(c) + ((blk * nkv) * c->block_size + off) * hd;
    la_bf16_t *h = c->host_pinned;
    for (int pass = 0; pass < 2; pass++) {
        const la_bf16_t *src = (pass ? c->v_pool : c->k_pool) + base;
        CUDA_TRY(cudaMemcpy2DAsync(h, (size_t)hd * 2, src, (size_t)c->block_size * hd * 2, (size_t)hd * 2,
                                   (size_t)nkv, cudaMemcpyDeviceToHost, c->stream), "kv_read_slot");
        CUDA_TRY(cudaStreamSynchronize(c->stream), "kv_read_slot");
        float *dst = pass ? v : k;
        for (int32_t i = 0; i < nkv * hd; i++) dst[i] = la_bf16_to_f32(h[i]);
    }
    return LA_OK;
}

/* ============================================================ CUDA graphs ========== */

/* Queue one recorded operation through its eager function (c->recording is false here). */
static la_status run_op(cuda_backend *c, const op_rec *r, la_err *err) {
    la_backend *be = &c->base;
    la_act a = r->a, b = r->b;
    switch ((op_kind)r->kind) {
    case OP_EMBED: return cuda_embed(be, &a, err);
    case OP_RMSNORM: return cuda_rmsnorm(be, &a, (la_weight_kind)r->weight, r->layer, &b, err);
    case OP_MATMUL: return cuda_matmul(be, &a, (la_weight_kind)r->weight, r->layer, &b, err);
    case OP_MATMUL_GROUP: {
        la_act c2 = r->c, d2 = r->d;
        la_act *const out[LA_CUDA_SPLIT_MAX_PARTS] = {&b, &c2, &d2};
        la_weight_kind w[LA_CUDA_SPLIT_MAX_PARTS];
        for (int32_t i = 0; i < r->n_w && i < LA_CUDA_SPLIT_MAX_PARTS; i++) w[i] = (la_weight_kind)(r->weight + i);
        return cuda_matmul_group(be, &a, w, r->n_w, r->layer, out, err);
    }
    case OP_KV_WRITE: return cuda_kv_write(be, r->layer, &a, &b, err);
    case OP_ATTENTION: return cuda_attention(be, r->layer, &a, &b, err);
    case OP_SWIGLU: return cuda_swiglu(be, &a, &b, err);
    case OP_ADD: return cuda_add(be, &a, &b, err);
    case OP_GATHER_ROWS: return cuda_gather_rows(be, &a, &b, err);
    case OP_TO_HOST: return to_host_queue(c, &a, err);
    case OP_ARGMAX: return argmax_queue(c, &a, err);
    case OP_ADD_RMSNORM: {
        la_act out = r->c;
        return cuda_add_rmsnorm(be, &a, &b, (la_weight_kind)r->weight, r->layer, &out, err);
    }
    case OP_GATE_UP_SWIGLU: {
        la_act up = r->c;
        return cuda_gate_up_swiglu(be, &a, r->layer, &b, &up, err);
    }
    case OP_QKV_KV_WRITE: {
        la_act k = r->c, v = r->d;
        return cuda_qkv_kv_write(be, &a, r->layer, &b, &k, &v, err);
    }
    }
    return la_err_set(err, LA_ERR_INTERNAL, "cuda backend: recorded operation %d", r->kind);
}

/* Queue the recorded operations in order; stops at the first error. */
static la_status run_recorded(cuda_backend *c, la_err *err) {
    for (int32_t i = 0; i < c->n_recs; i++) LA_TRY(run_op(c, &c->recs[i], err));
    return LA_OK;
}

/* Queue the operations recorded so far and stop recording: the rest of the step is
 * queued as it comes, as with graphs off. Nothing to do when not recording. On error the
 * operations after the failing one are dropped (the eager path would not have got past
 * it either). */
static la_status flush_recorded(cuda_backend *c, la_err *err) {
    if (!c->recording) return LA_OK;
    c->recording = false;
    c->gstats.interrupted++;
    c->gstats.steps_eager++;
    la_status s = run_recorded(c, err);
    c->n_recs = 0;
    return s;
}

static void graph_entry_free(graph_entry *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    free(g->ops);
    memset(g, 0, sizeof *g);
}

/* Destroy every cached graph (none is in flight: to_host waits for each launch). */
static void graph_cache_clear(cuda_backend *c) {
    for (int i = 0; i < LA_CUDA_GRAPH_CACHE; i++) graph_entry_free(&c->cache[i]);
}

static void step_signature(const cuda_backend *c, step_sig *s) {
    memset(s, 0, sizeof *s);
    s->n_tokens = c->n_tokens;
    s->n_logit_rows = c->n_logit_rows;
    s->n_items_prefill = c->n_items_prefill;
    s->n_items_decode = c->n_items_decode;
    s->n_combine = c->n_combine;
    s->n_merge = c->n_merge;
    s->rope_len = c->rope_len;
    s->n_pool_blocks = c->n_blocks;
    s->block_size = c->block_size;
    s->tokens = c->d_tokens;
    s->pos = c->d_pos;
    s->kpos = c->d_kpos;
    s->slots = c->d_slots;
    s->blocks = c->d_blocks;
    s->logit_rows = c->d_logit_rows;
    s->items_prefill = c->d_items_prefill;
    s->items_decode = c->d_items_decode;
    s->combine = c->d_combine;
    s->merge = c->d_merge;
    s->merge_count = c->merge_count;
    s->rope = c->rope;
    s->part_o = c->part_o;
    s->part_ml = c->part_ml;
    s->k_pool = c->k_pool;
    s->v_pool = c->v_pool;
    s->f32_dev = c->f32_dev;
    s->host_pinned = c->host_pinned;
}

/* The cache entry whose key (signature and operations) equals this step's, counting this
 * sighting. A new key takes a free entry or the least recently used one (destroying its
 * graph). NULL if a new entry cannot be allocated (the step then runs eagerly). */
static graph_entry *graph_lookup(cuda_backend *c, const step_sig *sig) {
    const size_t ops_bytes = sizeof(op_rec) * (size_t)c->n_recs;
    graph_entry *victim = NULL;
    c->graph_clock++;
    for (int i = 0; i < LA_CUDA_GRAPH_CACHE; i++) {
        graph_entry *g = &c->cache[i];
        if (g->used && g->n_ops == c->n_recs && memcmp(&g->sig, sig, sizeof *sig) == 0 &&
            memcmp(g->ops, c->recs, ops_bytes) == 0) {
            g->n_seen++;
            g->last_used = c->graph_clock;
            return g;
        }
        if (!victim || (victim->used && (!g->used || g->last_used < victim->last_used))) victim = g;
    }
    op_rec *ops = malloc(ops_bytes ? ops_bytes : 1);
    if (!ops) return NULL;
    memcpy(ops, c->recs, ops_bytes);
    graph_entry_free(victim);
    victim->used = true;
    victim->sig = *sig;
    victim->ops = ops;
    victim->n_ops = c->n_recs;
    victim->n_seen = 1;
    victim->last_used = c->graph_clock;
    return victim;
}

/* Capture the recorded operations into g->exec (true on success). On any failure the
 * capture is ended and discarded (the stream never stays capturing), the error cleared,
 * g marked failed, and the caller runs the step eagerly. */
static bool graph_capture(cuda_backend *c, graph_entry *g) {
    la_err ignored = {0};
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        la_status s = run_recorded(c, &ignored);
        if (c->break_next_capture) {
            c->break_next_capture = false;
            (void)cudaStreamSynchronize(c->stream); /* illegal while capturing: invalidates it */
        }
        e = cudaStreamEndCapture(c->stream, &graph);
        if (e == cudaSuccess && (s != LA_OK || !graph)) e = cudaErrorUnknown;
    }
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
        cudaGraph_t rest = NULL;
        (void)cudaStreamEndCapture(c->stream, &rest);
        if (rest) cudaGraphDestroy(rest);
    }
    (void)cudaGetLastError(); /* capture errors are not sticky; keep later launch checks clean */
    if (e != cudaSuccess) {
        g->failed = true;
        c->gstats.capture_failures++;
        return false;
    }
    g->exec = exec;
    c->gstats.captures++;
    return true;
}

/* to_host / argmax_to_host of a recorded step (top of this file): complete the record with
 * the readback (`last`: OP_TO_HOST or OP_ARGMAX), then launch a cached graph, capture one
 * (second sight of a key) or queue the operations eagerly; wait, copy the logits (f32) or
 * token ids (int32) out to host. */
static la_status graph_step_finish(cuda_backend *c, op_kind last, const la_act *x, void *host, la_err *err) {
    /* the step's result: f32 logits (OP_TO_HOST) or int32 token ids (OP_ARGMAX) */
    size_t n = (size_t)(last == OP_ARGMAX ? x->n_rows : x->n_rows * x->n_cols);
    c->recording = false;
    la_status s = reserve_readback(c, n, err); /* may wait and reallocate: before any capture */
    if (s == LA_OK) s = record_op(c, last, 0, 0, x, NULL, err);
    if (s != LA_OK) {
        la_err ignored = {0};
        (void)run_recorded(c, &ignored); /* what the eager path had queued before failing */
        c->n_recs = 0;
        c->gstats.steps_eager++;
        return s;
    }
    step_sig sig;
    step_signature(c, &sig);
    graph_entry *g = graph_lookup(c, &sig);
    /* n_jobs is 0 (kv_copy_rotate ends recording); a queued copy would wait inside capture */
    if (g && !g->exec && !g->failed && g->n_seen >= 2 && c->n_jobs == 0) graph_capture(c, g);
    bool launched = false;
    if (g && g->exec) {
        if (cudaGraphLaunch(g->exec, c->stream) == cudaSuccess) {
            launched = true;
        } else {
            (void)cudaGetLastError();
            cudaGraphExecDestroy(g->exec);
            g->exec = NULL;
            g->failed = true;
            c->gstats.capture_failures++;
        }
    }
    if (launched) {
        c->gstats.steps_replayed++;
    } else {
        c->gstats.steps_eager++;
        s = run_recorded(c, err);
    }
    c->n_recs = 0;
    LA_TRY(s);
    CUDA_TRY(cudaStreamSynchronize(c->stream), "forward pass");
    memcpy(host, c->host_pinned, n * 4); /* f32 or int32 */
    return LA_OK;
}

/* ============================================================ lifecycle ============== */

static void cuda_destroy(la_backend *be) {
    cuda_backend *c = cu(be);
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    graph_cache_clear(c);
    free(c->recs);
    free_weights(c);
    dev_free(c->k_pool);
    dev_free(c->v_pool);
    for (int32_t i = 0; i < c->n_free; i++) dev_free(c->free_list[i].ptr);
    for (int32_t i = 0; i < c->n_live; i++) dev_free(c->live[i].ptr);
    free(c->free_list);
    free(c->live);
    staging_free(&c->meta);
    staging_free(&c->jobs_stage);
    free(c->tiles);
    free(c->smin);
    free(c->items_prefill);
    free(c->items_decode);
    free(c->combine);
    free(c->merge);
    dev_free(c->part_o);
    dev_free(c->part_ml);
    dev_free(c->merge_count);
    free(c->jobs);
    dev_free(c->f32_dev);
    if (c->host_pinned) cudaFreeHost(c->host_pinned);
    if (c->ev_begin) cudaEventDestroy(c->ev_begin);
    if (c->ev_end) cudaEventDestroy(c->ev_end);
    if (c->blas) cublasDestroy(c->blas);
    dev_free(c->blas_ws);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static const la_backend_ops k_cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .load_weights = cuda_load_weights,
    .kv_alloc = cuda_kv_alloc,
    .kv_block_bytes = cuda_kv_block_bytes,
    .mem_free_bytes = cuda_mem_free_bytes,
    .act_alloc = cuda_act_alloc,
    .act_free = cuda_act_free,
    .batch_begin = cuda_batch_begin,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .matmul = cuda_matmul,
    .matmul_group = cuda_matmul_group,
    .kv_write = cuda_kv_write,
    .attention = cuda_attention,
    .swiglu = cuda_swiglu,
    .add = cuda_add,
    .gather_rows = cuda_gather_rows,
    .to_host = cuda_to_host,
    .argmax_to_host = cuda_argmax_to_host,
    .add_rmsnorm = cuda_add_rmsnorm,
    .gate_up_swiglu = cuda_gate_up_swiglu,
    .qkv_kv_write = cuda_qkv_kv_write,
    .kv_copy_rotate = cuda_kv_copy_rotate,
    .kv_read_slot = cuda_kv_read_slot,
};

static la_status create_resources(cuda_backend *c, la_err *err) {
    int dev = 0;
    CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    c->n_sm = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    c->smem_optin = prop.sharedMemPerBlockOptin;
#ifdef LA_CUDA_SM90A
    c->wgmma = prop.major == 9 && prop.minor == 0;
#endif
    if (prop.major < 8)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "cuda backend: %s has compute capability %d.%d; bf16 "
                          "tensor cores need 8.0 or newer", prop.name, prop.major, prop.minor);
    la_cuda_pdl_set(c->pdl && prop.major >= 9 && la_cuda_pdl_supported()); /* griddepcontrol: sm_90 code */
    CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream");
    CUDA_TRY(cudaEventCreate(&c->ev_begin), "event");
    CUDA_TRY(cudaEventCreate(&c->ev_end), "event");
    CUDA_TRY(cudaEventCreateWithFlags(&c->meta.done, cudaEventDisableTiming), "event");
    CUDA_TRY(cudaEventCreateWithFlags(&c->jobs_stage.done, cudaEventDisableTiming), "event");
    cublasStatus_t st = cublasCreate(&c->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        return la_err_set(err, LA_ERR_BACKEND, "cublasCreate: %s", blas_status_name(st));
    }
    LA_TRY(dev_alloc(&c->blas_ws, LA_CUDA_BLAS_WORKSPACE_BYTES, "cuBLAS workspace", err));
    st = cublasSetStream(c->blas, c->stream);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetWorkspace(c->blas, c->blas_ws, LA_CUDA_BLAS_WORKSPACE_BYTES);
    if (st != CUBLAS_STATUS_SUCCESS)
        return la_err_set(err, LA_ERR_BACKEND, "cuBLAS stream/workspace: %s", blas_status_name(st));
    return LA_OK;
}

static const char k_no_wgmma[] = "attn_prefill v3 and v4 need compute capability 9.0 and a build for sm_90a "
                                 "(LA_CUDA_ARCHITECTURES with 90a)";

/* *v = the kernel variant the environment variable `name` (LA_ATTN_PREFILL, LA_ATTN_DECODE)
 * names: v1 .. v<max_variant> -> 1 .. max_variant; unset or empty -> 0 (the backend's
 * default); another value is LA_ERR_INVALID_ARG. */
static la_status env_variant(const char *name, int32_t max_variant, int32_t *v, la_err *err) {
    const char *e = getenv(name);
    *v = 0;
    if (!e || !*e) return LA_OK;
    if (e[0] == 'v' && e[1] >= '1' && e[1] <= '0' + max_variant && !e[2]) {
        *v = e[1] - '0';
        return LA_OK;
    }
    return la_err_set(err, LA_ERR_INVALID_ARG, "%s=%s: expected %s", name, e,
                      max_variant > 3 ? "v1, v2, v3 or v4" : "v1 or v2");
}

/* *on = the switch the environment variable `name` (LA_CUDA_GRAPHS, LA_CUDA_PDL) sets: 0 ->
 * false, 1 -> true, unset or empty -> true (both default on); another value is
 * LA_ERR_INVALID_ARG. */
static la_status env_switch(const char *name, bool *on, la_err *err) {
    const char *e = getenv(name);
    *on = true;
    if (!e || !*e || strcmp(e, "1") == 0) return LA_OK;
    if (strcmp(e, "0") == 0) {
        *on = false;
        return LA_OK;
    }
    return la_err_set(err, LA_ERR_INVALID_ARG, "%s=%s: expected 0 or 1", name, e);
}

la_status la_cuda_backend_create(la_backend **out, la_err *err) {
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev <= 0) {
        (void)cudaGetLastError();
        return la_err_set(err, LA_ERR_UNSUPPORTED, "device cuda: no CUDA device (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    }
    int32_t variant, decode_variant; /* la_cuda_attn_{prefill,decode}_variant_set */
    LA_TRY(env_variant("LA_ATTN_PREFILL", 4, &variant, err));
    LA_TRY(env_variant("LA_ATTN_DECODE", 2, &decode_variant, err));
    if (decode_variant == 0) decode_variant = 2;
    uint32_t fused = LA_CUDA_FUSED_ALL; /* la_cuda_fused_gemm_set */
    const char *fused_env = getenv("LA_CUDA_FUSED_GEMM");
    if (fused_env && *fused_env) {
        if (strcmp(fused_env, "0") == 0) fused = 0;
        else if (strcmp(fused_env, "qkv") == 0) fused = LA_CUDA_FUSED_QKV;
        else if (strcmp(fused_env, "gate_up") == 0) fused = LA_CUDA_FUSED_GATE_UP;
        else if (strcmp(fused_env, "gemm") == 0) fused = LA_CUDA_FUSED_QKV | LA_CUDA_FUSED_GATE_UP;
        else if (strcmp(fused_env, "1") != 0)
            return la_err_set(err, LA_ERR_INVALID_ARG, "LA_CUDA_FUSED_GEMM=%s: expected 0, 1, qkv, gate_up or gemm",
                              fused_env);
    }
    /* the split targets, CTAs per SM: 2 in steps with prefill rows, 1 in decode-only steps;
     * LA_ATTN_SPLIT_CTAS sets both (sweeps) */
    int32_t split_ctas = 2, split_ctas_decode = 1;
    const char *split_env = getenv("LA_ATTN_SPLIT_CTAS");
    if (split_env && *split_env) {
        char *end;
        long v = strtol(split_env, &end, 10);
        if (*end || v < 1 || v > 16)
            return la_err_set(err, LA_ERR_INVALID_ARG, "LA_ATTN_SPLIT_CTAS=%s: expected 1 to 16 (CTAs per SM)", split_env);
        split_ctas = split_ctas_decode = (int32_t)v;
    }
    bool graphs, pdl; /* la_cuda_graphs_enable; programmatic dependent launch */
    LA_TRY(env_switch("LA_CUDA_GRAPHS", &graphs, err));
    LA_TRY(env_switch("LA_CUDA_PDL", &pdl, err));
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: out of memory");
    c->pdl = pdl;
    c->fused = fused;
    c->split_ctas = split_ctas;
    c->split_ctas_decode = split_ctas_decode;
    c->base.ops = &k_cuda_ops;
    c->bad_token_row = -1;
    c->graphs = graphs;
    c->prefill_variant = variant;
    c->decode_variant = decode_variant;
    la_status s = create_resources(c, err);
    /* INVALID_ARG, not UNSUPPORTED: a test run asking for v3 where it cannot run must fail,
     * not skip as if there were no GPU */
    if (s == LA_OK && variant >= 3 && !c->wgmma)
        s = la_err_set(err, LA_ERR_INVALID_ARG, "LA_ATTN_PREFILL=v%d: %s", variant, k_no_wgmma);
    if (s != LA_OK) {
        cuda_destroy(&c->base);
        return s;
    }
    if (c->prefill_variant == 0) c->prefill_variant = c->wgmma ? 4 : 2;
    *out = &c->base;
    return LA_OK;
}

/* ============================================================ hooks ================== */

bool la_cuda_backend_is(const la_backend *be) { return be && be->ops == &k_cuda_ops; }

la_status la_cuda_attn_prefill_variant_set(la_backend *be, int32_t variant, la_err *err) {
    if (!la_cuda_backend_is(be))
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_prefill_variant_set: not a CUDA backend");
    if (variant < 1 || variant > 4)
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_prefill_variant_set: variant %d (1 to 4)", variant);
    if (variant >= 3 && !cu(be)->wgmma)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "la_cuda_attn_prefill_variant_set: v%d: %s", variant, k_no_wgmma);
    cu(be)->prefill_variant = variant;
    return LA_OK;
}

int32_t la_cuda_attn_prefill_variant(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->prefill_variant : 0;
}

int32_t la_cuda_attn_prefill_kernel(const la_backend *be) {
    if (!la_cuda_backend_is(be)) return 0;
    const cuda_backend *c = (const cuda_backend *)be;
    return la_cuda_attn_prefill_kernel_for(c->prefill_variant, c->base.cfg.head_dim);
}

int32_t la_cuda_attn_prefill_kernel_ran(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->last_prefill_kernel : 0;
}

la_status la_cuda_attn_decode_variant_set(la_backend *be, int32_t variant, la_err *err) {
    if (!la_cuda_backend_is(be))
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_decode_variant_set: not a CUDA backend");
    if (variant != 1 && variant != 2)
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_decode_variant_set: variant %d (1 or 2)", variant);
    cuda_backend *c = cu(be);
    LA_TRY(flush_recorded(c, err)); /* a recorded step runs with the kernel it was recorded under */
    graph_cache_clear(c);           /* cached graphs launch the decode kernel they were captured with */
    c->decode_variant = variant;
    return LA_OK;
}

int32_t la_cuda_attn_decode_variant(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->decode_variant : 0;
}

la_status la_cuda_act_upload(la_backend *be, la_act *a, const float *host, la_err *err) {
    if (!la_cuda_backend_is(be)) return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_act_upload: not a CUDA backend");
    cuda_backend *c = cu(be);
    size_t n = (size_t)(a->n_rows * a->n_cols);
    if (n == 0) return LA_OK;
    LA_TRY(flush_recorded(c, err)); /* recorded operations may read a */
    uint16_t *tmp = malloc(n * 2);
    if (!tmp) return la_err_set(err, LA_ERR_NO_MEMORY, "la_cuda_act_upload: out of memory");
    for (size_t i = 0; i < n; i++) tmp[i] = la_f32_to_bf16(host[i]);
    cudaError_t e = cudaMemcpyAsync(a->data, tmp, n * 2, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    free(tmp);
    if (e != cudaSuccess) return cuda_fail(err, e, "la_cuda_act_upload");
    return LA_OK;
}

la_status la_cuda_kv_fill_random(la_backend *be, uint64_t seed, la_err *err) {
    if (!la_cuda_backend_is(be)) return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_kv_fill_random: not a CUDA backend");
    cuda_backend *c = cu(be);
    LA_TRY(flush_recorded(c, err));
    int64_t n = kv_slab_elems(c) * c->n_layers;
    la_cuda_fill_params p = {c->k_pool, n, seed, -1.0f, 1.0f};
    LA_TRY(la_cuda_fill_uniform(&p, c->stream, err));
    p.dst = c->v_pool;
    p.seed = seed + 1;
    LA_TRY(la_cuda_fill_uniform(&p, c->stream, err));
    CUDA_TRY(cudaStreamSynchronize(c->stream), "la_cuda_kv_fill_random");
    return LA_OK;
}

la_status la_cuda_synchronize(la_backend *be, la_err *err) {
    if (!la_cuda_backend_is(be)) return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_synchronize: not a CUDA backend");
    cuda_backend *c = cu(be);
    LA_TRY(flush_recorded(c, err));
    LA_TRY(flush_copies(c, err));
    CUDA_TRY(cudaStreamSynchronize(c->stream), "synchronize");
    return LA_OK;
}

void la_cuda_profile_enable(la_backend *be, bool on) {
    if (!la_cuda_backend_is(be)) return;
    cuda_backend *c = cu(be);
    (void)flush_recorded(c, NULL); /* a failure resurfaces at the next wait */
    if (c->stream) cudaStreamSynchronize(c->stream);
    c->prof = on;
    if (on) {
        memset(c->prof_ms, 0, sizeof c->prof_ms);
        memset(c->prof_calls, 0, sizeof c->prof_calls);
    }
}

void la_cuda_graphs_enable(la_backend *be, bool on) {
    if (!la_cuda_backend_is(be)) return;
    cuda_backend *c = cu(be);
    (void)flush_recorded(c, NULL); /* a failure resurfaces at the next wait */
    if (c->stream) cudaStreamSynchronize(c->stream);
    graph_cache_clear(c);
    c->graphs = on;
}

void la_cuda_fused_gemm_set(la_backend *be, uint32_t groups) {
    if (!la_cuda_backend_is(be)) return;
    cuda_backend *c = cu(be);
    (void)flush_recorded(c, NULL); /* a failure resurfaces at the next wait */
    graph_cache_clear(c);          /* cached graphs launch the GEMMs they were captured with */
    c->fused = groups & LA_CUDA_FUSED_ALL;
}

uint32_t la_cuda_fused_gemm(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->fused : 0;
}

bool la_cuda_graphs_enabled(const la_backend *be) {
    return la_cuda_backend_is(be) && ((const cuda_backend *)be)->graphs;
}

void la_cuda_graph_stats_get(const la_backend *be, la_cuda_graph_stats *out) {
    memset(out, 0, sizeof *out);
    if (!la_cuda_backend_is(be)) return;
    const cuda_backend *c = (const cuda_backend *)be;
    *out = c->gstats;
    out->cached = 0;
    for (int i = 0; i < LA_CUDA_GRAPH_CACHE; i++) out->cached += c->cache[i].exec != NULL;
}

void la_cuda_graphs_break_next_capture(la_backend *be) {
    if (la_cuda_backend_is(be)) cu(be)->break_next_capture = true;
}

/* Append printf output at *n of buf[cap] (truncating); *n counts what was needed. */
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (w <= 0) return;
    for (int i = 0; i < w && (size_t)i < sizeof tmp - 1; i++) {
        if (buf && *n + 1 < cap) buf[*n] = tmp[i];
        (*n)++;
    }
    if (buf && cap) buf[*n < cap ? *n : cap - 1] = '\0';
}

size_t la_cuda_profile_json(const la_backend *be, char *buf, size_t cap) {
    if (!la_cuda_backend_is(be)) return 0;
    const cuda_backend *c = (const cuda_backend *)be;
    size_t n = 0;
    if (buf && cap) buf[0] = '\0';
    append(buf, cap, &n, "{");
    bool first = true;
    for (int i = 0; i < PROF_COUNT; i++) {
        if (!c->prof_calls[i]) continue;
        append(buf, cap, &n, "%s\"%s\": {\"ms\": %.4f, \"calls\": %lld}", first ? "" : ", ", k_prof_names[i],
               c->prof_ms[i], (long long)c->prof_calls[i]);
        first = false;
    }
    append(buf, cap, &n, "}");
    return n;
}

const char *la_cuda_device_name(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->device_name : "";
}

int la_cuda_device_sm_count(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->n_sm : 0;
}

la_status la_cuda_attn_check(const la_cuda_attn_params *p, const char *kernel, la_err *err) {
    const int hd = p->head_dim;
    if (hd <= 0 || hd % 8 != 0 || hd > LA_ATTN_MAX_HEAD_DIM)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "%s: head_dim %d (need a multiple of 8, <= %d)",
                          kernel, hd, LA_ATTN_MAX_HEAD_DIM);
    if (p->block_size % 16 != 0 || p->heads_per_cta < 1 ||
        p->heads_per_cta > LA_ATTN_MAX_HEADS_PER_CTA || p->n_kv_heads < 1 ||
        p->n_heads % p->n_kv_heads != 0 ||
        (p->n_heads / p->n_kv_heads) != p->heads_per_cta * p->n_head_chunks)
        return la_err_set(err, LA_ERR_INTERNAL,
                          "%s: bad geometry (block_size %d, heads %d/%d, heads_per_cta %d x %d)",
                          kernel, p->block_size, p->n_heads, p->n_kv_heads, p->heads_per_cta,
                          p->n_head_chunks);
    return LA_OK;
}
