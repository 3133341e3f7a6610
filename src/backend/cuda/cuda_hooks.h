/* The CUDA backend's hooks for tests and benchmarks (cuda_hooks.c): switches, counters and
 * device facts the engine never reads or sets. Each takes a backend that
 * la_cuda_backend_is() and does nothing (or says LA_ERR_INVALID_ARG) for another. Engine
 * thread only, like every backend call. */
#ifndef LA_BACKEND_CUDA_CUDA_HOOKS_H
#define LA_BACKEND_CUDA_CUDA_HOOKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Whether be is a CUDA backend. */
bool la_cuda_backend_is(const la_backend *be);

/* Copy host f32 [a->n_rows * a->n_cols] into an activation (rounded to bf16).
 * Errors: LA_ERR_INVALID_ARG (not a CUDA backend), LA_ERR_BACKEND. */
la_status la_cuda_act_upload(la_backend *be, la_act *a, const float *host, la_err *err);

/* Fill every K and V slot of the pool with uniform values in [-1, 1) from seed (benchmarks
 * time decode without prefilling long contexts first). Errors: as la_cuda_act_upload. */
la_status la_cuda_kv_fill_random(la_backend *be, uint64_t seed, la_err *err);

/* Wait for all queued work; LA_ERR_BACKEND names the first asynchronous failure. */
la_status la_cuda_synchronize(la_backend *be, la_err *err);

/* Per-operation timing: when on, every op is bracketed by CUDA events and waited for
 * (slower: no overlap of host and device), and its device time accumulates per kind
 * (the matmuls per weight, attention per kernel). Turning it on resets the totals. */
void la_cuda_profile_enable(la_backend *be, bool on);
/* Write the totals as one JSON object {"op": {"ms": total, "calls": n}, ...} into buf
 * (NUL-terminated, truncated to cap). Returns the length it needed. */
size_t la_cuda_profile_json(const la_backend *be, char *buf, size_t cap);

/* ---- CUDA graphs for decode steps (cuda_graphs.c, top comment) ---------------------------- */

/* Whether decode steps (every sequence of the batch has exactly one new row, logits wanted)
 * are recorded and replayed as CUDA graphs. The default comes from the environment when the
 * backend is created: on, unless LA_CUDA_GRAPHS=0 (another value than 0 or 1 fails the
 * create with LA_ERR_INVALID_ARG). Off, every operation is queued as it is called, exactly
 * as without this feature. Turning graphs off (or on) runs any step in progress and frees the cached
 * graphs. Engine thread only, like every other call. */
void la_cuda_graphs_enable(la_backend *be, bool on);
bool la_cuda_graphs_enabled(const la_backend *be);

/* Counters since the backend was created (tests and benchmarks check that replays really
 * happened). */
typedef struct la_cuda_graph_stats {
    int64_t steps_recorded;  /* steps whose operations were recorded (graph candidates: decode
                                steps and the logit-row tails of long prefills, forward.c) */
    int64_t steps_replayed;  /* of those: ran as one cudaGraphLaunch of a cached graph */
    int64_t steps_eager;     /* of those: ran operation by operation (first sight of a key,
                                a failed capture, a key whose capture failed before) */
    int64_t captures;        /* graphs captured and instantiated */
    int64_t capture_failures;/* captures, instantiations or launches that failed (the step
                                ran eagerly instead; the key is not captured again) */
    int64_t interrupted;     /* recorded steps cut short by another call (kv_read_slot, a
                                block copy, a new batch_begin, ...): run eagerly up to there */
    int64_t cached;          /* graphs instantiated now */
} la_cuda_graph_stats;
void la_cuda_graph_stats_get(const la_backend *be, la_cuda_graph_stats *out);

/* Tests: make the next capture fail inside cudaStreamBeginCapture/EndCapture (an illegal
 * call on the capturing stream invalidates it), to exercise the fallback. */
void la_cuda_graphs_break_next_capture(la_backend *be);

/* ---- fused operations (cuda_backend.c: matmul_group, add_rmsnorm, gate_up_swiglu,
 * qkv_kv_write) ---------------------------------------------------------------------------- */

/* Groups of operations the backend runs fused, each one bit:
 *   QKV, GATE_UP  for at most 128 rows of x (decode steps, question chunks), x [W_q; W_k;
 *                 W_v]^T and x [W_gate; W_up]^T as one GEMM each, the weights stacked by
 *                 rows in one allocation per layer, then one kernel splits the columns
 *                 into the separate outputs. The same values as separate GEMMs up to bf16
 *                 GEMM rounding (cuBLAS picks another kernel for the wider shape). Above
 *                 128 rows, or off, one GEMM per weight.
 *   ADD_NORM      a decoder layer's residual add and the next RMSNorm in one launch
 *                 (add_rmsnorm). Bit-equal to add then rmsnorm.
 *   SWIGLU        with GATE_UP fused: SwiGLU reads gate and up straight from the fused
 *                 GEMM's output (gate_up_swiglu; no column split). Bit-equal to the split
 *                 and swiglu.
 *   MERGE         decode rows split over the KV length: the last CTA of each split set
 *                 merges the partial rows (attn_decode.cu) instead of an attn_combine
 *                 launch after the kernel. Bit-equal to attn_combine (the
 *                 same la_attn_merge_row).
 *   KV_WRITE      with QKV fused: the KV write reads K and V straight from the fused GEMM's
 *                 output and copies q, k and v out in the same kernel (qkv_kv_write; no
 *                 split_cols launch). Bit-equal to the split and kv_write. */
#define LA_CUDA_FUSED_QKV 1u
#define LA_CUDA_FUSED_GATE_UP 2u
#define LA_CUDA_FUSED_ADD_NORM 4u
#define LA_CUDA_FUSED_SWIGLU 8u
#define LA_CUDA_FUSED_MERGE 16u
#define LA_CUDA_FUSED_KV_WRITE 32u
#define LA_CUDA_FUSED_ALL 63u
/* Set the fused groups (a mask of LA_CUDA_FUSED_*; 0: nothing fused). The default comes
 * from the environment at create: LA_CUDA_FUSED_GEMM=0 (none), 1 (all, also when unset),
 * qkv, gate_up, gemm (qkv and gate_up: the GEMM groups only); another value fails the
 * create with LA_ERR_INVALID_ARG. Runs any step in progress and frees the cached CUDA
 * graphs. Tests and benchmarks compare. */
void la_cuda_fused_gemm_set(la_backend *be, uint32_t groups);
/* The groups fused now; 0 for a backend that is not CUDA. */
uint32_t la_cuda_fused_gemm(const la_backend *be);

/* Which attn_prefill kernel the steps from the next batch_begin on ask for, by its variant
 * number (la_cuda_prefill_kernels, kernels/attn_prefill.cu): 4 = warp-specialized wgmma,
 * 256 rows per CTA (192 at head_dim 64), 3 = wgmma, 2 = mma.sync, 128 rows per CTA. A step runs the kernel
 * asked for, or the next in the table whose needs it meets: 4 runs steps without a k_rope
 * block (full recompute, prefix caching, BlockAttention's copies; lazy's only under
 * la_cuda_attn_lazy_ws_set ON; mepic's steps run 3), 3 and 4 need head_dim 64 or 128
 * (other head dims run 2). The default is
 * 4 on a compute capability 9.0 GPU when the build has sm_90a code (LA_CUDA_ARCHITECTURES
 * with 90a, the default), else 2. The environment variable LA_ATTN_PREFILL=v2|v3|v4 sets it
 * at create. LA_ERR_INVALID_ARG for another value or another backend, LA_ERR_UNSUPPORTED
 * for 3 or 4 where they cannot run (nothing changed either way). Tests and benchmarks
 * compare them. */
la_status la_cuda_attn_prefill_variant_set(la_backend *be, int32_t variant, la_err *err);
/* The variant of the next steps; 0 for a backend that is not CUDA. */
int32_t la_cuda_attn_prefill_variant(const la_backend *be);
/* The variant number of the kernel a plain step runs for the loaded model's head_dim (3
 * and 4 run 2 at a head_dim other than 64 and 128; under 4, a step with a k_rope block runs
 * 3); 0 for a backend that is not CUDA. */
int32_t la_cuda_attn_prefill_kernel(const la_backend *be);
/* The variant number of the attn_prefill kernel (2 to 4) that the latest step with prefill
 * tiles was scheduled for (batch_begin): under 4, 3 for a step with a k_rope block. 0 for a
 * backend that is not CUDA or before any such step. Tests and benchmarks report it. */
int32_t la_cuda_attn_prefill_kernel_ran(const la_backend *be);

/* ---- shared-block attention (cuda_attn_shared.c, top comment) ------------------------------ */

/* When a step's sequences share KV blocks (a cached document in any slot of many lazy or
 * mepic requests, a prefix-cached prompt), whether the step reads each shared run of blocks
 * once for all of them (one attn_prefill launch over the runs, rows gathered from every
 * sharer, merged per row by attn_combine) instead of once per sequence:
 *   OFF   never: every sequence reads its own list (the kernels as before)
 *   ON    every run that two or more sequences share (tests)
 *   AUTO  runs of at least 4 sharers and 64 valid keys, among sequences of at most 16 new
 *         rows in the step (decode rows, short questions); the default
 * The default comes from the environment at create: LA_ATTN_SHARED=0, 1 or auto (unset:
 * auto; another value fails the create with LA_ERR_INVALID_ARG). The same outputs either
 * way up to floating-point rounding (the kernel tests compare). */
#define LA_CUDA_ATTN_SHARED_OFF 0
#define LA_CUDA_ATTN_SHARED_ON 1
#define LA_CUDA_ATTN_SHARED_AUTO 2
/* Set the mode for the steps from the next batch_begin on. LA_ERR_INVALID_ARG for another
 * backend or mode (nothing changed). */
la_status la_cuda_attn_shared_set(la_backend *be, int32_t mode, la_err *err);
/* The mode now; -1 for a backend that is not CUDA. */
int32_t la_cuda_attn_shared(const la_backend *be);

/* Packed decode (attn_decode.cu): each warp runs one whole decode item, four items per CTA,
 * instead of a CTA's four warps splitting one item. It pays where a step has many more
 * decode items than CTA slots and each is a few key groups (a thousand requests' own tails
 * beside a shared document read by the grouped launch), so that a CTA's fixed costs
 * (query staging, the cross-warp merge, its launch) dominate. Modes:
 *   OFF   never
 *   ON    every step whose decode items are all unsplit (tests: small shapes)
 *   AUTO  those steps with at least 8 decode CTAs per SM unpacked, i.e. two per SM or more
 *         packed; the default
 * The default comes from the environment at create: LA_ATTN_DECODE_PACKED=0, 1 or auto
 * (unset: auto; another value fails the create with LA_ERR_INVALID_ARG). The same outputs
 * either way up to floating-point rounding (the kernel tests compare). */
#define LA_CUDA_DECODE_PACKED_OFF 0
#define LA_CUDA_DECODE_PACKED_ON 1
#define LA_CUDA_DECODE_PACKED_AUTO 2
/* Set the mode for the steps from the next batch_begin on. LA_ERR_INVALID_ARG for another
 * backend or mode (nothing changed). */
la_status la_cuda_attn_decode_packed_set(la_backend *be, int32_t mode, la_err *err);
/* The mode now; -1 for a backend that is not CUDA. */
int32_t la_cuda_attn_decode_packed(const la_backend *be);
/* Whether the last step's decode items ran packed (tests); false for another backend. */
bool la_cuda_attn_decode_packed_ran(const la_backend *be);

/* Lazy steps (some block with a q_delta, none with a k_rope) on the warp-specialized prefill
 * kernel (v4; la_cuda_attn_prefill_variant_set). v4 rotates an item's queries once, so the
 * host cuts each lazy prefill tile's key range where q_delta changes (cuda_attn_plan.c): one
 * item, and one more partial state per query row, per document. Measured on an H100 for one
 * 64-token question over 10 documents, v4 is as fast as v3 or 1-2% slower (too few CTAs;
 * bench/GPU_NOTES.md, "attn_prefill v4 for lazy steps"); for long questions or many per
 * step the extra partial rows grow with question tokens x heads x documents (tens of GB for
 * an 8K-token question over 100 documents), so v4 is not the default. Modes:
 *   OFF   lazy steps run v3; the default
 *   ON    lazy steps run v4 when it is asked for, unless the cut would make more items than
 *         one launch takes (LA_ATTN_MAX_PREFILL_ITEMS): then v3 (tests, benchmarks)
 * The default comes from the environment at create: LA_ATTN_LAZY_WS=0 or 1 (unset: 0;
 * another value fails the create with LA_ERR_INVALID_ARG). The same outputs either way up
 * to floating-point rounding (the kernel tests compare). */
#define LA_CUDA_LAZY_WS_OFF 0
#define LA_CUDA_LAZY_WS_ON 1
/* Set the mode for the steps from the next batch_begin on. LA_ERR_INVALID_ARG for another
 * backend or mode (nothing changed). */
la_status la_cuda_attn_lazy_ws_set(la_backend *be, int32_t mode, la_err *err);
/* The mode now; -1 for a backend that is not CUDA. */
int32_t la_cuda_attn_lazy_ws(const la_backend *be);

/* What the latest batch_begin planned (step fields) and counters since create. Keys are
 * valid KV slots (one token of every layer and KV head): a step reads keys_shared +
 * keys_own of them (each grouped run once, each sequence's own blocks), against
 * keys_per_seq with every sequence reading its whole list. */
typedef struct la_cuda_attn_shared_stats {
    int64_t steps, steps_grouped;  /* batch_begins since create, and those with grouped runs */
    int64_t runs;                  /* grouped runs of the latest step */
    int64_t sharers;               /* (run, sequence) pairs of them */
    int64_t rows;                  /* query tokens over those pairs */
    int64_t items;                 /* attn_prefill items of the grouped launch */
    int64_t chunks_max;            /* key ranges of its most-cut run */
    int64_t keys_shared, keys_own, keys_per_seq;
    double plan_ms;                /* host time of the plan (cuda_attn_shared.c) */
    int64_t meta_bytes;            /* bytes batch_begin uploaded (metadata and work lists) */
} la_cuda_attn_shared_stats;
void la_cuda_attn_shared_stats_get(const la_backend *be, la_cuda_attn_shared_stats *out);

/* The device's name ("NVIDIA H200") and its multiprocessor count. */
const char *la_cuda_device_name(const la_backend *be);
int la_cuda_device_sm_count(const la_backend *be);

#endif
