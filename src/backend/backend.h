/* The backend interface: the primitive operations the Llama forward pass (engine/forward.c)
 * is written against, once, for every device. backend/cpu implements them with f32 and
 * OpenBLAS; backend/cuda with bf16, cuBLAS and our own kernels; backend/registry.c lists
 * them for la_backend_create.
 *
 * Backends know shapes and dtypes, not checkpoints: load_weights takes a la_backend_shape
 * and a la_weight_table of tensor views, which the engine fills from the model's config
 * and weights (engine/backend_model.h).
 *
 * Activations are backend-owned row-major matrices (la_act) whose element type and memory
 * space are the backend's business (CPU: f32 host; CUDA: bf16 device). The forward pass
 * never touches their data. Per-step metadata (tokens, positions, KV slots, attention
 * block lists) travels in one la_batch, handed to the backend with batch_begin().
 *
 * Paged KV cache: the backend owns K and V storage for n_blocks blocks of block_size
 * token slots per layer. Slot s of the pool is block s / block_size, offset
 * s % block_size. What a block holds (K rotated at which angle, or unrotated) is decided
 * by the KV layer's plan and expressed per block in la_attn_block.
 */
#ifndef LA_BACKEND_BACKEND_H
#define LA_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "base/dtype.h"
#include "lazyattn/status.h"
#include "lazyattn/types.h"

/* ---- per-step metadata ------------------------------------------------------------ */

/* k_pos value meaning "store this token's K unrotated" (mepic documents). */
#define LA_POS_UNROTATED INT32_MIN

/* A token id < 0 in la_batch.tokens, on a backend with argmax_begin: the token that the
 * most recent argmax_begin before this batch's batch_begin chose for its row `row`
 * (0-based), whether or not argmax_end read it back since. Refused by batch_begin
 * (LA_ERR_INVALID_ARG, at batch_begin or embed) when that argmax had no such row, or when
 * another readback (to_host, argmax_to_host, kv_deviation) came after it. The engine's async
 * scheduling (engine/step.c) packs decode step t + 1 while step t runs, each request's new
 * token being step t's. */
#define LA_TOKEN_PREV(row) (-(int32_t)(row) - 1)
#define LA_TOKEN_PREV_ROW(token) (-((token) + 1))

/* One KV block as one sequence's attention sees it.
 *
 *   block_id  physical block in the pool
 *   n_valid   slots [0, n_valid) hold tokens; the rest are padding, masked out
 *   pos0      logical position of slot 0 (slot j sits at pos0 + j): the causal mask
 *             keeps slot j for a query at logical position p iff pos0 + j <= p
 *   q_delta   lazy: the query is rotated at p - q_delta instead of p for this block's
 *             keys (DESIGN.md §2: <R(p-Δ)q, R(i)k> = <R(p)q, R(i+Δ)k>); 0 otherwise
 *   k_rope    mepic: keys are stored unrotated; attention rotates slot j's key at
 *             pos0 + j on the fly. 0 for keys stored rotated.
 */
typedef struct la_attn_block {
    int32_t block_id;
    int32_t n_valid;
    int32_t pos0;
    int32_t q_delta;
    int32_t k_rope;
} la_attn_block;

/* One sequence of the step: its new tokens are rows [row0, row0 + n_rows) of every
 * activation, and they attend to blocks [block0, block0 + n_blocks) of la_batch.blocks
 * (which must include the blocks the new tokens themselves are written to). */
typedef struct la_batch_seq {
    int32_t row0, n_rows;
    int32_t block0, n_blocks;
} la_batch_seq;

typedef struct la_batch {
    int32_t n_tokens;
    const int32_t *tokens;      /* [n_tokens] token ids */
    const int32_t *pos;         /* [n_tokens] logical positions (causal mask, Q rotation) */
    const int32_t *k_pos;       /* [n_tokens] RoPE position applied to K before it is
                                   stored, or LA_POS_UNROTATED */
    const int64_t *slots;       /* [n_tokens] pool slot receiving each token's K/V */
    int32_t n_seqs;
    const la_batch_seq *seqs;   /* [n_seqs] */
    int32_t n_blocks;
    const la_attn_block *blocks;/* [n_blocks] */
    int32_t n_logit_rows;
    const int32_t *logit_rows;  /* [n_logit_rows] rows whose logits are wanted */
} la_batch;

/* ---- activations and weights ---------------------------------------------------------- */

typedef struct la_act {
    void *data;      /* backend memory; NULL when empty */
    int64_t n_rows;  /* tokens */
    int64_t n_cols;  /* features */
} la_act;

/* ---- the model as a backend sees it: shape and weights --------------------------------- */

/* The sizes of a Llama-family decoder, what every operation below needs to know of the
 * model (HF LlamaConfig's meanings). Set by load_weights into la_backend.shape. */
typedef struct la_backend_shape {
    int32_t vocab_size;
    int32_t hidden_size;       /* d_model */
    int32_t intermediate_size; /* SwiGLU inner width */
    int32_t n_layers;
    int32_t n_heads;
    int32_t n_kv_heads;        /* GQA: n_heads is a multiple */
    int32_t head_dim;
    double rms_norm_eps;
    int64_t max_position_embeddings; /* tokens the model was trained for (sizes the first
                                        RoPE table); positions beyond still work */
    bool tie_word_embeddings;  /* lm_head is the embedding (random weights: one tensor) */
    bool qkv_bias;             /* matmul of W_q / W_k / W_v adds LA_W_{Q,K,V}_BIAS (Qwen2) */
    bool qk_norm;              /* the model has LA_W_Q_NORM / LA_W_K_NORM (Qwen3): forward.c
                                  applies them to each head of q and k through rmsnorm */
    const float *rope_inv_freq;/* [head_dim / 2] f32 radians per position, after
                                  rope_scaling (la_rope_inv_freq, model/config.h). In
                                  load_weights' argument: the caller's, read during the
                                  call; in la_backend.shape: the backend's own copy */
} la_backend_shape;

/* Weight kinds: the per-layer ones first, then the model-wide ones. A new architecture adds
 * kinds before LA_W_FINAL_NORM and a flag in la_backend_shape saying whether the model has
 * them (a model without them has no data for them). */
typedef enum la_weight_kind {
    LA_W_ATTN_NORM, LA_W_Q, LA_W_K, LA_W_V, LA_W_O,
    LA_W_MLP_NORM, LA_W_GATE, LA_W_UP, LA_W_DOWN,
    LA_W_Q_BIAS, LA_W_K_BIAS, LA_W_V_BIAS, /* [1, q dim] / [1, kv dim]: shape.qkv_bias */
    LA_W_Q_NORM, LA_W_K_NORM,              /* [1, head_dim]: shape.qk_norm */
    LA_W_FINAL_NORM, LA_W_LM_HEAD, LA_W_EMBED,
    LA_W_KIND_COUNT
} la_weight_kind;

/* Whether kind k has one tensor per layer (else one for the model, at layer 0). */
static inline bool la_weight_kind_per_layer(la_weight_kind k) { return k < LA_W_FINAL_NORM; }

/* Index of the largest logit of logits[0, n) (lowest index on ties, as torch.argmax; NaN
 * counts below every number, so an all-NaN row gives 0): greedy decoding's token, which
 * every backend's argmax ops (argmax_to_host, argmax_begin) and the engine's sampler take
 * the same way. n >= 1. backend.c. */
int32_t la_argmax(const float *logits, int32_t n);

/* Shape of weight kind k as HF stores it, [n_out, n_in] (norm weights: [1, hidden];
 * the embedding [vocab, hidden]); both 0 for an unknown kind. Shared by every backend. */
void la_weight_shape(const la_backend_shape *shape, la_weight_kind k, int64_t *n_out, int64_t *n_in);

/* One weight tensor as the engine hands it over: host memory (a checkpoint's mmap),
 * row-major [n_out, n_in] elements of dtype (F32, F16 or BF16; a 1-D tensor is [1, n]);
 * name for messages. data NULL: the model lacks it. */
typedef struct la_tensor_view {
    const char *name;
    const void *data;
    la_dtype dtype;
    int64_t n_out, n_in;
} la_tensor_view;

/* Every weight of a model by (kind, layer): views[layer * LA_W_KIND_COUNT + kind] for the
 * per-layer kinds, layer 0's row for the model-wide ones (la_weight_table_at). When the
 * head is tied, LA_W_LM_HEAD's view has the embedding's data. */
typedef struct la_weight_table {
    int32_t n_layers;
    const la_tensor_view *views; /* [n_layers (at least 1)][LA_W_KIND_COUNT] */
} la_weight_table;

static inline const la_tensor_view *la_weight_table_at(const la_weight_table *t, la_weight_kind k, int32_t layer) {
    return &t->views[(size_t)(la_weight_kind_per_layer(k) ? layer : 0) * LA_W_KIND_COUNT + (size_t)k];
}

typedef struct la_backend la_backend;

typedef struct la_backend_ops {
    const char *name; /* "cpu", "cuda" */
    void (*destroy)(la_backend *be);

    /* Convert and upload every weight (and RoPE tables) for shape; w's views are read
     * during the call only. w == NULL: random weights of the exact shape (uniform, std
     * 0.02, norm weights 1, deterministic), for timing without a checkpoint. */
    la_status (*load_weights)(la_backend *be, const la_backend_shape *shape, const la_weight_table *w,
                              la_err *err);
    /* Allocate K/V storage: n_blocks x block_size slots per layer. Replaces any previous
     * pool (its contents are lost). */
    la_status (*kv_alloc)(la_backend *be, int64_t n_blocks, int32_t block_size, la_err *err);
    /* Bytes of K+V storage per block over all layers (for sizing pools). */
    int64_t (*kv_block_bytes)(const la_backend *be, int32_t block_size);
    /* Bytes of device memory free now (call after load_weights: sizes the KV pool from
     * what the weights left), and in *total (may be NULL) the device's whole memory; 0 for
     * a backend without its own device memory (CPU). */
    int64_t (*mem_free_bytes)(la_backend *be, int64_t *total);

    la_status (*act_alloc)(la_backend *be, int64_t n_rows, int64_t n_cols, la_act *out,
                           la_err *err);
    void (*act_free)(la_backend *be, la_act *a);

    /* Hand over the step's metadata (the CUDA backend copies it to the device). The
     * pointers in b need not outlive this call. */
    la_status (*batch_begin)(la_backend *be, const la_batch *b, la_err *err);

    /* x[t] = embed[tokens[t]]                               x: [n_tokens, hidden] */
    la_status (*embed)(la_backend *be, la_act *x, la_err *err);
    /* out = x / rms(x) * w (HF LlamaRMSNorm: f32 variance, eps inside sqrt), over each row
     * of x's n_cols (hidden; head_dim for LA_W_Q_NORM / LA_W_K_NORM, x then viewed as
     * [n_tokens * heads, head_dim]); out may be x */
    la_status (*rmsnorm)(la_backend *be, const la_act *x, la_weight_kind w, int32_t layer,
                         la_act *out, la_err *err);
    /* out = x W^T, W the [n_out, n_in] HF weight (+ the bias of W_q / W_k / W_v when
     * shape.qkv_bias)                                             x: [n, n_in] */
    la_status (*matmul)(la_backend *be, const la_act *x, la_weight_kind w, int32_t layer,
                        la_act *out, la_err *err);
    /* Optional (NULL: forward.c calls matmul once per weight). x times several weights of
     * one layer that share the input: out[i] = x W_i^T for the n_w weights w[i], outputs
     * separate, the same values as n_w matmul calls up to the rounding of another GEMM
     * (the CUDA backend multiplies x by the weights stacked by rows in one GEMM for small
     * row counts: vLLM's QKVParallelLinear / MergedColumnParallelLinear).
     *   x: [n, n_in]; out[i]: [n, n_out of w[i]] */
    la_status (*matmul_group)(la_backend *be, const la_act *x, const la_weight_kind *w, int32_t n_w,
                              int32_t layer, la_act *const *out, la_err *err);
    /* Rotate each row's K heads at k_pos[t] (skip LA_POS_UNROTATED), HF rotate_half
     * convention, then write K and V rows to the pool at slots[t] for `layer`.
     *   k, v: [n_tokens, n_kv_heads * head_dim]; k is modified in place. */
    la_status (*kv_write)(la_backend *be, int32_t layer, la_act *k, const la_act *v,
                          la_err *err);
    /* Optional (NULL: forward.c calls matmul_group / matmul for W_q, W_k, W_v of layer,
     * then kv_write). q, k, v = x W_q^T, x W_k^T, x W_v^T, then kv_write(layer, k, v): the
     * same values as those calls (k left rotated as kv_write leaves it).
     *   x: [n_tokens, hidden]; q: [n_tokens, n_heads * head_dim] (unrotated);
     *   k, v: [n_tokens, n_kv_heads * head_dim] */
    la_status (*qkv_kv_write)(la_backend *be, const la_act *x, int32_t layer, la_act *q, la_act *k, la_act *v,
                              la_err *err);
    /* Paged attention of every sequence's new rows against its block list, applying each
     * block's q_delta / k_rope / n_valid / causal rules (la_attn_block).
     *   q: [n_tokens, n_heads * head_dim] UNROTATED queries; out: same shape.
     * GQA: query head h reads KV head h / (n_heads / n_kv_heads). Scale 1/sqrt(head_dim). */
    la_status (*attention)(la_backend *be, int32_t layer, const la_act *q, la_act *out,
                           la_err *err);
    /* Optional (NULL: forward.c calls matmul_group / matmul for W_gate and W_up of layer,
     * then swiglu). gate = silu(x W_gate^T) * (x W_up^T) (HF LlamaMLP: act_fn(gate_proj(x))
     * * up_proj(x)), the same values as those calls.
     *   x: [n, hidden]; gate: [n, intermediate] out; up: [n, intermediate] scratch (left
     *   holding x W_up^T or unspecified values) */
    la_status (*gate_up_swiglu)(la_backend *be, const la_act *x, int32_t layer, la_act *gate, la_act *up,
                                la_err *err);
    /* gate = silu(gate) * up (SwiGLU, HF LlamaMLP) */
    la_status (*swiglu)(la_backend *be, la_act *gate, const la_act *up, la_err *err);
    /* x += y */
    la_status (*add)(la_backend *be, la_act *x, const la_act *y, la_err *err);
    /* Optional (NULL: forward.c calls add, then rmsnorm). x += y, then out = RMSNorm(x) w
     * (a decoder layer's residual add and the next block's norm), the same values as add
     * then rmsnorm. x, y, out: [n, hidden]; out may be y. */
    la_status (*add_rmsnorm)(la_backend *be, la_act *x, const la_act *y, la_weight_kind w, int32_t layer,
                             la_act *out, la_err *err);
    /* out[i] = x[logit_rows[i]]                       out: [n_logit_rows, n_cols] */
    la_status (*gather_rows)(la_backend *be, const la_act *x, la_act *out, la_err *err);
    /* Copy an activation to host f32 memory: host [n_rows * n_cols]. */
    la_status (*to_host)(la_backend *be, const la_act *x, float *host, la_err *err);
    /* Optional (NULL: greedy decoding copies the logits with to_host and takes the argmax
     * on the host). Greedy token ids of x's rows, computed where x lives:
     *   x: [n_rows, vocab] logits; ids: host int32 [n_rows], ids[r] = the column of the
     *   largest x[r][c], the lowest column on ties, NaN below every number (the same as
     *   la_argmax (above) on to_host's values; torch.argmax on NaN-free rows).
     * Saves copying n_rows x vocab logits to the host (16 MB per step at batch 32 for
     * Llama-3's 128256-token vocabulary). */
    la_status (*argmax_to_host)(la_backend *be, const la_act *x, int32_t *ids, la_err *err);
    /* Optional, both or neither (NULL: no async scheduling). argmax_begin queues what
     * argmax_to_host computes and returns without waiting for it: the ids stay where x lives
     * for the next batch's LA_TOKEN_PREV tokens. argmax_end waits for the oldest argmax_begin
     * not yet ended and copies its ids out: ids host int32 [n], n its x->n_rows (else
     * LA_ERR_INTERNAL). At most two may be pending (LA_ERR_INTERNAL for a third; the engine
     * has one step in flight while it queues the next). Errors of the step's operations may
     * surface in argmax_end. */
    la_status (*argmax_begin)(la_backend *be, const la_act *x, la_err *err);
    la_status (*argmax_end)(la_backend *be, int32_t *ids, int32_t n, la_err *err);

    /* BlockAttention's per-request copy: for every layer, copy slots [0, n_valid) of block
     * src to block dst and rotate the copied keys by delta positions (R(Δ)R(i)k = R(i+Δ)k).
     * V is copied unchanged. */
    la_status (*kv_copy_rotate)(la_backend *be, int32_t src_block, int32_t dst_block,
                                int32_t n_valid, int32_t delta, la_err *err);
    /* Read back one slot's K and V for a layer into host f32 arrays of n_kv_heads*head_dim
     * (tests). */
    la_status (*kv_read_slot)(la_backend *be, int32_t layer, int64_t slot, float *k, float *v,
                              la_err *err);
    /* Optional (NULL: selected recovery is refused on this backend). For every row t of the
     * current batch, the squared distance of v's row from the V the pool holds at the row's
     * slot for `layer`: dev[t] = sum_j (v[t][j] - V[layer][slots[t]][j])^2 over the
     * n_kv_heads * head_dim values, in f32 (both widened from their dtype), copied to host
     * (the call waits for it). The probe of selected recovery (engine/forward.h).
     *   v: [n_tokens, n_kv_heads * head_dim]; dev: host f32 [n_tokens] */
    la_status (*kv_deviation)(la_backend *be, int32_t layer, const la_act *v, float *dev, la_err *err);

    /* ---- the KV store's copies (optional: NULL where a backend has none) ----
     * Host memory for records: pinned on CUDA, so copies run on the copy engines at full
     * speed and overlap compute. NULL on failure; free with host_free. */
    void *(*host_alloc)(la_backend *be, size_t bytes);
    void (*host_free)(la_backend *be, void *p);
    /* Copy pool blocks ids[0:n] to host[i] (export), or host[i] into them (import), each
     * host buffer kv_block_bytes(block_size) bytes laid out as K of layers 0..L-1, then V of
     * layers 0..L-1, each [n_kv_heads][block_size][head_dim] in kv_dtype (one block of one
     * layer of the pool, contiguous; kv/store/record.h). Asynchronous: *ticket names the
     * copy for kv_copy_poll; host memory must stay valid until it is done.
     * Ordering: the copy sees every pool write queued before the call and no write queued
     * after it (an export's blocks may be reused at once: later writes wait for it); an
     * import's blocks may be read by any operation queued after kv_copy_poll said done.
     * Errors: LA_ERR_INVALID_ARG (a block outside the pool), LA_ERR_BACKEND. */
    la_status (*kv_export)(la_backend *be, const int32_t *ids, int32_t n, void *const *host, uint64_t *ticket,
                           la_err *err);
    la_status (*kv_import)(la_backend *be, const int32_t *ids, int32_t n, const void *const *host,
                           uint64_t *ticket, la_err *err);
    /* Whether the copy `ticket` has finished (*done); wait: block until it has. A ticket
     * that polled done (or failed) is forgotten. Errors: LA_ERR_BACKEND (the copy failed),
     * LA_ERR_INVALID_ARG (an unknown ticket). */
    la_status (*kv_copy_poll)(la_backend *be, uint64_t ticket, bool wait, bool *done, la_err *err);
    /* Block until every operation queued so far has run (a forward without logit rows may
     * return before the device has run it). NULL where every operation is synchronous (CPU).
     * Errors: LA_ERR_BACKEND. */
    la_status (*synchronize)(la_backend *be, la_err *err);
} la_backend_ops;

/* la_backend.weight_dtype's default: each matrix in its checkpoint's dtype where the backend
 * computes with it fast (CPU: bf16 and f16 on AVX2 / AVX-512), else f32. */
#define LA_WEIGHT_DTYPE_AUTO (-1)

struct la_backend {
    const la_backend_ops *ops;
    la_backend_shape shape; /* set by load_weights */
    la_dtype kv_dtype;      /* element type of the KV pool (CPU: F32 by default, BF16 when the
                               caller sets it before kv_alloc; CUDA: BF16) */
    int32_t weight_dtype;   /* CPU: the la_dtype load_weights keeps weight matrices in (norms and
                               biases stay f32), or LA_WEIGHT_DTYPE_AUTO (the default); set by the
                               caller between la_backend_create and load_weights. CUDA: unused
                               (bf16) */
    double batch_begin_ms;  /* host milliseconds in batch_begin during the last la_forward (its
                               checks, attention planning and metadata upload; set by forward.c) */
    bool bf16_dot;          /* CPU: products with bf16 weight matrices round the activations to
                               bf16 and multiply bf16 pairs (AVX512_BF16 vdpbf16ps, llama.cpp's
                               bf16 arithmetic: twice the multiply rate, ~1e-2 on logits); where
                               the CPU lacks AVX512_BF16, the exact path, and load_weights
                               clears it (so it says what runs). Default false */
    bool weights_rounded;   /* CPU, set by load_weights: some weight matrix is kept in a 16-bit dtype
                               other than its checkpoint's (weight_dtype rounded its values), so
                               the products differ from the checkpoint's own numbers */
};

/* Create a backend for device (backend/registry.c). n_threads: CPU worker threads (<= 0:
 * all cores). Caller owns it; free with la_backend_destroy(). Errors: LA_ERR_UNSUPPORTED
 * (CUDA not built, or no GPU), LA_ERR_NO_MEMORY. */
la_status la_backend_create(la_device device, int n_threads, la_backend **out, la_err *err);
void la_backend_destroy(la_backend *be);

#endif
