/* Paged attention for prefill: many new query tokens of a sequence against its KV block
 * list (cached blocks plus the blocks the new tokens were just written to), with the
 * per-block rotation metadata of backend/backend.h (la_attn_block) applied inside.
 *
 * What it computes, for query token t (logical position p_t), query head h and every
 * visible slot j of block b of the sequence's list (visible: j < n_valid_b and
 * pos0_b + j <= p_t):
 *
 *     q'  = R(p_t - q_delta_b) q_{t,h}             (query arrives UNROTATED; lazy: q_delta
 *                                                    = Δ_d of the block's document,
 *                                                    DESIGN.md §2; otherwise 0)
 *     k'  = R(pos0_b + j) k_j  if k_rope_b          (mepic: keys stored unrotated)
 *           k_j                otherwise            (keys stored rotated)
 *     s   = <q', k'> / sqrt(head_dim)
 *     out = sum_j softmax(s)_j v_j                   (HF LlamaAttention, eager softmax)
 *
 * R is HF rotate_half RoPE with the llama3-scaled inv_freq (backend/rope.h), read from the
 * f32 (cos, sin) table of cuda_kernels.h. GQA: query head h reads KV head
 * h / (n_heads / n_kv_heads). Flash-attention style (FlashAttention-2, Dao 2023): online
 * softmax in base 2 over tiles of 64 or 128 keys, so scores never reach device memory.
 *
 * Shapes (bf16 unless said): q, out [n_tokens, n_heads * head_dim] row-major; the layer's
 * K and V slabs [n_blocks][n_kv_heads][block_size][head_dim] (cuda_kernels.h); pos
 * [n_tokens] int32; partial rows f32 [rows][head_dim] and (m, l) pairs.
 *
 * Grid: x = KV head x head chunk, y = work item (la_cuda_attn_item: a tile of tokens of
 * one sequence and a range of its key slots, built by the host scheduler in
 * cuda_attn_plan.c, longest first; prefill_grid, attn_prefill_common.cuh).
 *
 * Three kernels, one table (la_cuda_prefill_kernels below), best first. A step runs the
 * first from the one asked for (la_cuda_attn_prefill_variant_set or LA_ATTN_PREFILL at
 * create; by default the first the device can run) whose needs it meets, and the host cuts
 * its tiles to match (la_cuda_prefill_kernel_pick, at batch_begin):
 *
 *   wgmma_ws  "v4"  warp-specialized, 256 rows per CTA x 128-key tiles, FlashAttention-3's
 *                   layout (attn_prefill_wgmma_ws.cu): steps without a k_rope block (full
 *                   recompute, prefix caching, BlockAttention's copies; lazy under
 *                   la_cuda_attn_lazy_ws_set ON, off by default)
 *                   at head_dim 64 or 128 on compute capability 9.0 with sm_90a code; the
 *                   host cuts a lazy tile's key range where q_delta changes (one item per
 *                   document or more), so each item rotates its queries once
 *   wgmma     "v3"  128 rows per CTA x 64-key tiles on warpgroup MMA (attn_prefill_wgmma.cu):
 *                   every other step at head_dim 64 or 128 there (mepic, lazy by
 *                   default), re-rotating the queries per 16-key group where q_delta changes
 *   mma       "v2"  128 rows per CTA x 64-key tiles on mma.sync m16n8k16
 *                   (attn_prefill_mma.cu): everything else, i.e. builds without sm_90a, GPUs
 *                   other than 9.0 (8.0 and newer), and any other head_dim (a multiple of 8
 *                   up to 128, e.g. 72 or 96: slower, the same results); the backend refuses
 *                   a head_dim above 128 or not a multiple of 8 at load_weights
 *                   (LA_ERR_UNSUPPORTED)
 *
 * Work per CTA of R rows and 64-key tile: R x 64 x head_dim x 4 FLOPs (2 for Q K^T, 2 for
 * P V) against 2 x 64 x head_dim x 2 bytes of K/V: R FLOP/byte, compute-bound on Hopper
 * when the tile's K/V is shared by several query tiles (L2), bandwidth-bound for a 64-token
 * question. Whole layer: 4 n_q n_kv_visible n_heads head_dim FLOPs; K/V bytes 4 n_kv
 * n_kv_heads head_dim per query tile that reads them.
 */
#include "backend/cuda/kernels/cuda_common.cuh"

/* In la_cuda_prefill_kernel order (best first). */
extern "C" const la_cuda_prefill_kernel_info la_cuda_prefill_kernels[LA_CUDA_PREFILL_KERNEL_COUNT] = {
    {4, "wgmma_ws", la_cuda_attn_prefill_wgmma_ws, LA_ATTN_PREFILL_ROWS_WS, LA_ATTN_PREFILL_ROWS_WS64, true, {64, 128},
     LA_CUDA_ROTATION_Q_DELTA},
    {3, "wgmma", la_cuda_attn_prefill_wgmma, LA_ATTN_PREFILL_ROWS, 0, true, {64, 128}, LA_CUDA_ROTATION_K_ROPE},
    {2, "mma", la_cuda_attn_prefill_mma, LA_ATTN_PREFILL_ROWS, 0, false, {0, 0}, LA_CUDA_ROTATION_K_ROPE},
};

extern "C" la_cuda_prefill_kernel la_cuda_prefill_kernel_pick(la_cuda_prefill_kernel asked, bool sm90a,
                                                              int32_t head_dim, la_cuda_step_rotation rotation) {
    for (int k = (int)asked; k < LA_CUDA_PREFILL_KERNEL_COUNT; k++) {
        const la_cuda_prefill_kernel_info *e = &la_cuda_prefill_kernels[k];
        const bool hd_ok = e->head_dims[0] == 0 || e->head_dims[0] == head_dim || e->head_dims[1] == head_dim;
        if ((!e->sm90a || sm90a) && hd_ok && rotation <= e->max_rotation)
            return (la_cuda_prefill_kernel)k;
    }
    return LA_CUDA_PREFILL_MMA;
}

extern "C" la_status la_cuda_attn_prefill(const la_cuda_attn_params *p, cudaStream_t stream,
                                          la_err *err) {
    if (p->n_items <= 0) return LA_OK;
    LA_TRY(la_cuda_attn_check(p, "attn_prefill", err));
    if (p->prefill_kernel < 0 || p->prefill_kernel >= LA_CUDA_PREFILL_KERNEL_COUNT)
        return la_err_set(err, LA_ERR_INTERNAL, "attn_prefill: kernel %d", (int)p->prefill_kernel);
    return la_cuda_prefill_kernels[p->prefill_kernel].launch(p, stream, err);
}
