/* The CUDA backend's kernels: parameter structs and extern "C" launchers (module-private to
 * backend/cuda). Each launcher validates its arguments, launches on the given stream,
 * checks the launch and returns la_status; execution errors surface at the next
 * synchronisation (the host code turns them into LA_ERR_BACKEND there).
 *
 * Element types: la_bf16_t is the bit pattern of a bf16 (upper half of an IEEE binary32),
 * so this header stays plain C; the .cu files reinterpret it as __nv_bfloat16.
 *
 * KV pool layout (documented once, used by every kernel), K and V alike, bf16:
 *
 *     [n_layers][n_blocks][n_kv_heads][block_size][head_dim]
 *
 * so one KV head of one block is a contiguous [block_size, head_dim] tile (4 KiB for
 * block_size 16 and head_dim 128) and one layer is one contiguous slab. Slot s of the
 * pool is block s / block_size, offset s % block_size (backend/backend.h).
 *
 * RoPE table: rope[pos][i] = (cos, sin) of pos * inv_freq[i] for pos < rope_len and
 * i < head_dim / 2, f32, the angle formed and reduced in double precision (exactly as
 * backend/rope.h does on the CPU), so positions of 100k+ tokens lose nothing to f32 angle
 * rounding. Negative positions read the table at |pos| with the sine negated.
 */
#ifndef LA_BACKEND_CUDA_CUDA_KERNELS_H
#define LA_BACKEND_CUDA_CUDA_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "lazyattn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t la_bf16_t;

/* Programmatic dependent launch for every launcher below (la_cuda_launch, cuda_common.cuh):
 * process-wide, off until set; cuda_backend.c sets it at create on compute capability 9.0
 * and newer unless LA_CUDA_PDL=0. launch.cu. */
void la_cuda_pdl_set(bool on);
bool la_cuda_pdl_on(void);
/* Whether this build's kernels can wait as PDL needs on the current device: their code
 * comes from PTX 9.0 or newer and runs as sm_90+ machine code (cudaFuncGetAttributes). */
bool la_cuda_pdl_supported(void);

/* ---- attention geometry shared by the host scheduler and the kernels -------------------- */

#define LA_ATTN_PREFILL_ROWS 128     /* query rows (token x head) of one mma or wgmma prefill CTA */
#define LA_ATTN_PREFILL_ROWS_WS 256  /* query rows of one warp-specialized (wgmma_ws) prefill CTA */
#define LA_ATTN_PREFILL_ROWS_WS64 192 /* the same at head_dim 64 (three 64-row warpgroups) */
#define LA_ATTN_KEYS_PER_TILE 64     /* keys staged in shared memory per step */
#define LA_ATTN_MAX_HEADS_PER_CTA 8  /* query heads of one KV head handled together */
#define LA_ATTN_MAX_HEAD_DIM 128     /* head_dim <= 128, a multiple of 8 */
#define LA_ATTN_MAX_PREFILL_ITEMS 65535 /* prefill items per launch (attn_prefill's gridDim.y) */

/* One CTA's share of attention (x one KV-head group: the grid's y in attn_decode, x in
 * attn_prefill):
 * tokens [row0, row0 + n_tokens) of one sequence against flat slots [kv0, kv1) of its
 * block list (flat slot f = block f / block_size, offset f % block_size). kv0 is a
 * multiple of LA_ATTN_KEYS_PER_TILE. part_row0 < 0: write the normalised output; else
 * write unnormalised partial rows (combined by la_cuda_attn_combine): group g's row r
 * goes to partial row part_row0 + g * rows + r, rows = the step kernel's rows per CTA
 * (la_cuda_prefill_rows) for prefill items and heads_per_cta for decode items.
 * merge >= 0 (split decode items only): the split set's last CTA to finish
 * merges the partial rows itself (la_cuda_attn_params.merge[merge]); -1: attn_combine
 * merges them, or the item is not split. n_tokens 0: a padding item that does nothing. */
typedef struct la_cuda_attn_item {
    int32_t block0;    /* the sequence's block list: blocks[block0 ..] of the batch */
    int32_t row0;
    int32_t n_tokens;
    int32_t pos_max;   /* largest logical position among the tokens */
    int32_t kv0, kv1;
    int32_t part_row0;
    int32_t merge;
} la_cuda_attn_item;

/* One split tile to combine: tokens [row0, row0 + n_tokens); split s of group g row r
 * sits at partial row part_row0 + (s * n_groups + g) * rows + r. */
typedef struct la_cuda_attn_combine_item {
    int32_t row0, n_tokens;
    int32_t part_row0;
    int32_t n_splits;
    int32_t rows;
    int32_t pad_[3];
} la_cuda_attn_combine_item;

/* One query token of a grouped attention item (shared-block attention: one item's rows come
 * from many sequences that attend the same KV blocks; cuda_attn_shared.c). The item's token t
 * is grows[item.row0 + t]. Its head h (of the CTA's heads_per_cta) in KV-head group g writes
 * its unnormalised partial row part_row + g * part_stride + h (attn_combine merges it with
 * the token's other parts). pos: the token's logical position in the frame of the item's
 * block list (the sequence's position minus its shift, cuda_attn_shared.c), which is where
 * the query is rotated (minus the blocks' q_delta) and what the causal mask compares. */
typedef struct la_cuda_attn_grow {
    int32_t token;       /* row of q and out */
    int32_t pos;
    int32_t part_row;
    int32_t part_stride;
} la_cuda_attn_grow;

typedef struct la_cuda_attn_params {
    const la_bf16_t *q;           /* [n_tokens, n_heads * head_dim] UNROTATED queries */
    la_bf16_t *out;               /* [n_tokens, n_heads * head_dim] */
    const la_bf16_t *k_pool;      /* this layer's K slab [n_blocks][n_kv][B][head_dim] */
    const la_bf16_t *v_pool;      /* this layer's V slab */
    const int32_t *pos;           /* [n_tokens] logical positions */
    const la_attn_block *blocks;  /* [n_blocks of the batch] */
    const float2 *rope;           /* [rope_len][head_dim / 2] (cos, sin) */
    int32_t rope_len;             /* positions in the table */
    const la_cuda_attn_item *items;
    int32_t n_items;
    const la_cuda_attn_combine_item *combine;
    int32_t n_combine;
    /* split sets merged in the kernel by their last CTA (la_cuda_attn_item.merge): their
     * combine items, and one arrival counter per (set, KV-head group), index merge *
     * gridDim.y + group, zero before the launch; the last CTA leaves it zero again */
    const la_cuda_attn_combine_item *merge;
    int32_t *merge_count;
    float *part_o;                /* [partial rows][head_dim] f32, unnormalised */
    float2 *part_ml;              /* [partial rows] (running max in log2 units, sum) */
    int32_t n_heads, n_kv_heads, head_dim, block_size;
    int32_t heads_per_cta;        /* query heads of one KV head in one CTA */
    int32_t n_head_chunks;        /* (n_heads / n_kv_heads) / heads_per_cta */
    float scale_log2;             /* log2(e) / sqrt(head_dim) */
    int32_t prefill_kernel;       /* la_cuda_prefill_kernel the step's prefill items were cut
                                     for (la_cuda_prefill_kernel_pick) */
    int32_t combine_rows;         /* the largest rows of the combine items (grid z) */
    int32_t decode_instance;      /* attn_decode's instance (LA_CUDA_DECODE_*, below): SPLIT,
                                     4 warps splitting each item; DEEP when each decode CTA
                                     has an SM to itself (the grid fits one wave at one CTA
                                     per SM), 8 warps; PACKED, each warp one whole item, 4
                                     items per CTA (no item split; la_cuda_attn_decode_packed_set) */
    const la_cuda_attn_grow *grows; /* grouped attn_prefill launches: item token t is
                                     grows[row0 + t] and every item writes partial rows
                                     there; NULL otherwise */
    const uint32_t *kv_written;   /* attn_decode: bit b of word b / 32 set when pool block b
                                     may be written by a kernel of this step (its tokens'
                                     K/V). Keys of the other blocks are copied before the
                                     PDL wait (cuda_common.cuh's exception); NULL: every
                                     copy waits. Host-written. */
} la_cuda_attn_params;

/* Validate what both attention launchers require: head_dim a multiple of 8 and at most
 * LA_ATTN_MAX_HEAD_DIM (LA_ERR_UNSUPPORTED), block_size a multiple of 16 and a head geometry
 * with n_heads / n_kv_heads = heads_per_cta x n_head_chunks, heads_per_cta in
 * [1, LA_ATTN_MAX_HEADS_PER_CTA] (LA_ERR_INTERNAL). `kernel` names the caller in messages.
 * kernels/launch.cu. */
la_status la_cuda_attn_check(const la_cuda_attn_params *p, const char *kernel, la_err *err);

/* ---- attn_prefill: the kernels, and the one table that chooses among them ------------- */

/* Prefill: tensor cores (bf16 in, f32 accumulate), online softmax, the per-block rotation
 * metadata applied inside (kernels/attn_prefill.cu). Grid (n_kv_heads * n_head_chunks,
 * n_items): every head group of the longest item first (LA_ERR_UNSUPPORTED past
 * LA_ATTN_MAX_PREFILL_ITEMS). One entry per kernel: */
la_status la_cuda_attn_prefill_wgmma_ws(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err);
la_status la_cuda_attn_prefill_wgmma(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err);
la_status la_cuda_attn_prefill_mma(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err);

/* The kernels, best first: the order in which a step tries them. */
typedef enum la_cuda_prefill_kernel {
    LA_CUDA_PREFILL_WGMMA_WS, /* warp-specialized wgmma, 256 rows (head_dim 64: 192) x 128-key tiles */
    LA_CUDA_PREFILL_WGMMA,    /* wgmma, 128 rows x 64-key tiles */
    LA_CUDA_PREFILL_MMA,      /* mma.sync m16n8k16, 128 rows x 64-key tiles */
    LA_CUDA_PREFILL_KERNEL_COUNT
} la_cuda_prefill_kernel;

/* The rotation metadata a step's block entries carry (backend/backend.h, la_attn_block),
 * least first: what decides which attn_prefill kernels can run it. */
typedef enum la_cuda_step_rotation {
    LA_CUDA_ROTATION_NONE,    /* plain: no q_delta, no k_rope (recompute, prefix caching,
                                 BlockAttention's copies) */
    LA_CUDA_ROTATION_Q_DELTA, /* some block has a q_delta, none a k_rope (lazy) */
    LA_CUDA_ROTATION_K_ROPE   /* some block has a k_rope (mepic) */
} la_cuda_step_rotation;

/* What a kernel needs and how the host cuts its tiles: one row per la_cuda_prefill_kernel. */
typedef struct la_cuda_prefill_kernel_info {
    int32_t variant;  /* its number n in LA_ATTN_PREFILL=v<n>, la_cuda_attn_prefill_variant_set
                         and bench_gpu (bench/GPU_NOTES.md calls the kernels v2, v3, v4) */
    const char *name; /* "wgmma_ws", "wgmma", "mma" */
    la_status (*launch)(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err);
    int32_t rows;     /* query rows (token x head) per CTA: prefill tiles are rows /
                         heads_per_cta tokens (la_cuda_prefill_rows) */
    int32_t rows_hd64; /* the same at head_dim 64 where it differs (v4: 192); 0: rows */
    bool sm90a;       /* needs wgmma: compute capability 9.0 and sm_90a code */
    int32_t head_dims[2]; /* the head_dims it runs (Llama-3.2-1B's 64, Llama-3-8B's 128);
                             {0, 0}: any (a multiple of 8, <= 128) */
    la_cuda_step_rotation max_rotation; /* the most rotation metadata it runs: Q_DELTA for the
                                           warp-specialized kernel, whose items the host cuts
                                           where q_delta changes (it rotates an item's
                                           queries once, at its first block's q_delta);
                                           K_ROPE for the others */
} la_cuda_prefill_kernel_info;

extern const la_cuda_prefill_kernel_info la_cuda_prefill_kernels[LA_CUDA_PREFILL_KERNEL_COUNT];

/* Query rows (token x head) per CTA of kernel k at head_dim head_dim: what the host cuts
 * prefill tiles and partial rows by. */
static inline int32_t la_cuda_prefill_rows(la_cuda_prefill_kernel k, int32_t head_dim) {
    const la_cuda_prefill_kernel_info *e = &la_cuda_prefill_kernels[k];
    return head_dim == 64 && e->rows_hd64 > 0 ? e->rows_hd64 : e->rows;
}

/* The kernel a step runs: the first of the table from `asked` on whose needs the step and
 * the device meet (sm90a: the device and the build can run wgmma; head_dim one it runs;
 * rotation: the step's, la_cuda_step_rotation). LA_CUDA_PREFILL_MMA meets every
 * step of a head_dim the backend loads (a multiple of 8, <= 128: la_cu_load_weights refuses
 * others with LA_ERR_UNSUPPORTED), so a head_dim other than 64 and 128 (e.g. 72, 96) runs the
 * slower mma kernel, never a wrong one. */
la_cuda_prefill_kernel la_cuda_prefill_kernel_pick(la_cuda_prefill_kernel asked, bool sm90a, int32_t head_dim,
                                                   la_cuda_step_rotation rotation);

/* Run p->prefill_kernel's entry over p->items (nothing for none). */
la_status la_cuda_attn_prefill(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err);

/* ---- attn_decode, attn_combine ------------------------------------------------------------ */

/* Decode: one token per item, split over the KV length; mma.sync with the heads as rows of
 * an m16 tile, each warp streaming its own share of the item's keys. attn_decode.cu. */
la_status la_cuda_attn_decode(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err);
/* attn_decode's instances: four warps splitting each item; the deep one (8 warps per CTA,
 * ~208 KB of shared memory at head_dim 128, which needs a GPU that lets one CTA opt in to
 * that much, as sm_90 does); the packed one (4 warps, one whole item each, ~110 KB). */
enum { LA_CUDA_DECODE_SPLIT = 0, LA_CUDA_DECODE_DEEP = 1, LA_CUDA_DECODE_PACKED = 2 };
/* Dynamic shared memory, bytes, of attn_decode at this head_dim (<= 128) for an instance
 * (LA_CUDA_DECODE_*). attn_decode.cu. */
size_t la_cuda_attn_decode_smem(int32_t head_dim, int32_t instance);
/* Merge the partial rows of split items (p->combine). attn_combine.cu. */
la_status la_cuda_attn_combine(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err);

/* ---- RoPE, KV write, block copy (rope_kv.cu) ---------------------------------------------- */

typedef struct la_cuda_rope_table_params {
    float2 *rope;            /* out [n_pos][half] */
    const float *inv_freq;   /* [half] device */
    int32_t half;
    int32_t n_pos;
} la_cuda_rope_table_params;
la_status la_cuda_rope_table(const la_cuda_rope_table_params *p, cudaStream_t stream,
                             la_err *err);

typedef struct la_cuda_kv_write_params {
    la_bf16_t *k;               /* [n_tokens, n_kv_heads * head_dim], rotated in place */
    const la_bf16_t *v;         /* [n_tokens, n_kv_heads * head_dim] */
    la_bf16_t *k_pool;          /* this layer's K slab */
    la_bf16_t *v_pool;          /* this layer's V slab */
    const int32_t *k_pos;       /* [n_tokens] RoPE position or LA_POS_UNROTATED */
    const int64_t *slots;       /* [n_tokens] */
    int32_t n_tokens, n_kv_heads, head_dim, block_size;
    const float2 *rope;
    int32_t rope_len;
} la_cuda_kv_write_params;
la_status la_cuda_kv_write(const la_cuda_kv_write_params *p, cudaStream_t stream, la_err *err);

/* kv_write fed straight from the fused QKV GEMM's output qkv [n_tokens, q_cols + 2 x
 * n_kv_heads x head_dim] (row t: q, k, v of token t): q [n_tokens, q_cols] gets the query
 * columns, kv.k the key columns rotated as kv_write rotates them, v_act the value columns,
 * and the pool kv_write's K and V (kv.v unused). Replaces split_cols + kv_write for a fused
 * QKV step (cuda_backend.c qkv_kv_write): bit-equal to them, one launch instead of two.
 * q_cols a multiple of 8. rope_kv.cu. */
typedef struct la_cuda_qkv_kv_write_params {
    la_cuda_kv_write_params kv;
    const la_bf16_t *qkv;
    la_bf16_t *q;
    la_bf16_t *v_act;
    int32_t q_cols;
} la_cuda_qkv_kv_write_params;
la_status la_cuda_qkv_kv_write(const la_cuda_qkv_kv_write_params *p, cudaStream_t stream, la_err *err);

/* Selected recovery's probe (backend.h kv_deviation): dev[t] = sum_j (v[t][j] - V[slot_t][j])^2
 * over the n_kv_heads x head_dim values of token t, f32 from bf16. One CTA per token.
 * rope_kv.cu. */
typedef struct la_cuda_kv_deviation_params {
    const la_bf16_t *v;         /* [n_tokens, n_kv_heads * head_dim] */
    const la_bf16_t *v_pool;    /* this layer's V slab */
    const int64_t *slots;       /* [n_tokens] */
    float *dev;                 /* [n_tokens] device */
    int32_t n_tokens, n_kv_heads, head_dim, block_size;
} la_cuda_kv_deviation_params;
la_status la_cuda_kv_deviation(const la_cuda_kv_deviation_params *p, cudaStream_t stream, la_err *err);

typedef struct la_cuda_copy_job {
    int32_t src_block, dst_block, n_valid, delta;
} la_cuda_copy_job;

typedef struct la_cuda_kv_copy_params {
    la_bf16_t *k_pool, *v_pool;     /* whole pools */
    const la_cuda_copy_job *jobs;   /* [n_jobs] device */
    int32_t n_jobs, n_layers;
    int64_t n_blocks;
    int32_t n_kv_heads, head_dim, block_size;
    const float2 *rope;
    int32_t rope_len;
} la_cuda_kv_copy_params;
/* For every job and layer: copy slots [0, n_valid) of src to dst, K rotated by delta. */
la_status la_cuda_kv_copy_rotate(const la_cuda_kv_copy_params *p, cudaStream_t stream,
                                 la_err *err);

/* ---- row kernels (rows.cu) ------------------------------------------------------------- */

typedef struct la_cuda_embed_params {
    la_bf16_t *x;               /* out [n_tokens, n_cols] */
    const la_bf16_t *table;     /* [vocab, n_cols] */
    const int32_t *tokens;      /* [n_tokens], already checked against vocab; LA_TOKEN_PREV(r)
                                   (backend.h): prev_ids[r] */
    int32_t n_tokens, n_cols;
    const int32_t *prev_ids;    /* the latest queued argmax's ids (device: the readback
                                   buffer), written by the kernels before this one; read only
                                   for LA_TOKEN_PREV tokens, which batch_begin let through only
                                   when it holds them (it may be NULL otherwise) */
} la_cuda_embed_params;
la_status la_cuda_embed(const la_cuda_embed_params *p, cudaStream_t stream, la_err *err);

typedef struct la_cuda_rmsnorm_params {
    const la_bf16_t *x;         /* [n_rows, n_cols]; written (x += residual) when residual is set */
    la_bf16_t *out;             /* [n_rows, n_cols]; may be residual */
    const la_bf16_t *w;         /* [n_cols] */
    int64_t n_rows;
    int32_t n_cols;
    float eps;
    const la_bf16_t *residual;  /* NULL, or [n_rows, n_cols]: x += residual (bf16, as la_cuda_add)
                                   before the norm, which is then of the sum */
} la_cuda_rmsnorm_params;
la_status la_cuda_rmsnorm(const la_cuda_rmsnorm_params *p, cudaStream_t stream, la_err *err);

typedef struct la_cuda_gather_params {
    const la_bf16_t *x;         /* [*, n_cols] */
    la_bf16_t *out;             /* [n_rows, n_cols] */
    const int32_t *rows;        /* [n_rows] */
    int32_t n_rows;
    int64_t n_cols;
} la_cuda_gather_params;
la_status la_cuda_gather_rows(const la_cuda_gather_params *p, cudaStream_t stream, la_err *err);

#define LA_CUDA_SPLIT_MAX_PARTS 3 /* outputs of one split (Q, K, V) */

/* Split the columns of x into n_parts matrices: part i gets columns [c_i, c_i + n_cols[i])
 * with c_i = n_cols[0] + ... + n_cols[i - 1] (the outputs of one GEMM by weights stacked by
 * rows, cuda_backend.c matmul_group). */
typedef struct la_cuda_split_params {
    const la_bf16_t *x;                          /* [n_rows, sum of n_cols] */
    la_bf16_t *out[LA_CUDA_SPLIT_MAX_PARTS];     /* out[i]: [n_rows, n_cols[i]] */
    int32_t n_cols[LA_CUDA_SPLIT_MAX_PARTS];
    int32_t n_parts;
    int32_t n_rows;
} la_cuda_split_params;
la_status la_cuda_split_cols(const la_cuda_split_params *p, cudaStream_t stream, la_err *err);

/* Greedy decoding on the device: ids[r] = the column of the largest x[r][c] (the lowest
 * column on ties; NaN counts below every number, so a row of NaN gives column 0), the
 * same as la_argmax (backend/backend.h) on the f32 values of x. */
typedef struct la_cuda_argmax_params {
    const la_bf16_t *x;         /* [n_rows, n_cols] (logits) */
    int32_t *ids;               /* [n_rows], device */
    int32_t n_rows, n_cols;
} la_cuda_argmax_params;
la_status la_cuda_argmax(const la_cuda_argmax_params *p, cudaStream_t stream, la_err *err);

/* ---- element-wise kernels (elementwise.cu) -------------------------------------------- */

typedef struct la_cuda_binary_params {
    la_bf16_t *x;               /* [n] in/out */
    const la_bf16_t *y;         /* [n] */
    int64_t n;
} la_cuda_binary_params;
/* x += y */
la_status la_cuda_add(const la_cuda_binary_params *p, cudaStream_t stream, la_err *err);
/* x = silu(x) * y (x = gate, y = up) */
la_status la_cuda_swiglu(const la_cuda_binary_params *p, cudaStream_t stream, la_err *err);

/* x[r][c] = bias[c]: the rows a GEMM then accumulates into (Qwen2's q/k/v_proj bias, added
 * in f32 before the one rounding, as torch's addmm). */
typedef struct la_cuda_bias_params {
    la_bf16_t *x;               /* [n_rows, n_cols] in/out */
    const la_bf16_t *bias;      /* [n_cols] */
    int64_t n_rows;
    int32_t n_cols;
} la_cuda_bias_params;
la_status la_cuda_fill_bias(const la_cuda_bias_params *p, cudaStream_t stream, la_err *err);

/* out = silu(gate) * up with gate and up side by side in the rows of x (the output of one
 * GEMM by [W_gate; W_up], cuda_backend.c matmul_group): x [n_rows, 2 n_cols] holds gate in
 * columns [0, n_cols) and up in [n_cols, 2 n_cols); out [n_rows, n_cols]. The same values
 * as splitting the columns and la_cuda_swiglu. */
typedef struct la_cuda_swiglu_stacked_params {
    const la_bf16_t *x;
    la_bf16_t *out;
    int64_t n_rows;
    int32_t n_cols;
} la_cuda_swiglu_stacked_params;
la_status la_cuda_swiglu_stacked(const la_cuda_swiglu_stacked_params *p, cudaStream_t stream, la_err *err);

typedef struct la_cuda_to_f32_params {
    const la_bf16_t *x;
    float *out;
    int64_t n;
} la_cuda_to_f32_params;
la_status la_cuda_bf16_to_f32(const la_cuda_to_f32_params *p, cudaStream_t stream, la_err *err);

/* ---- weight conversion and initialisation (weights_init.cu) ---------------------------- */

typedef struct la_cuda_convert_params {
    la_bf16_t *dst;             /* [n] */
    const void *src;            /* [n] of src_dtype (la_dtype: F32, F16 or BF16), device */
    int32_t src_dtype;
    int64_t n;
} la_cuda_convert_params;
la_status la_cuda_convert_to_bf16(const la_cuda_convert_params *p, cudaStream_t stream,
                                  la_err *err);

typedef struct la_cuda_fill_params {
    la_bf16_t *dst;             /* [n] */
    int64_t n;
    uint64_t seed;              /* uniform: stream id; the same seed gives the same values */
    float lo, hi;               /* uniform in [lo, hi); constant: lo */
} la_cuda_fill_params;
la_status la_cuda_fill_uniform(const la_cuda_fill_params *p, cudaStream_t stream, la_err *err);
la_status la_cuda_fill_const(const la_cuda_fill_params *p, cudaStream_t stream, la_err *err);

#ifdef __cplusplus
}
#endif
#endif
