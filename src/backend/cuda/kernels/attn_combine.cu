/* Combine the partial results of attention items split over the KV length
 * (attn_prefill.cu, attn_decode.cu), the flash-decoding reduction:
 *
 *     M = max_s m_s,   out = sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s
 *
 * where split s left the unnormalised output O_s = sum_j 2^(s_j - m_s) v_j, its running
 * maximum m_s (log2 units) and its sum l_s = sum_j 2^(s_j - m_s). A split that saw no
 * visible key has m_s = -inf and adds nothing; a row no split saw is written as zeros (the
 * CPU backend's convention for an empty softmax).
 *
 * Shapes: part_o [partial rows][head_dim] f32, part_ml [partial rows] (m, l); out
 * [n_tokens, n_heads * head_dim] bf16. Grid: x = combine item (a split tile of tokens),
 * y = KV head x head chunk, z = groups of 4 rows; one warp per output row
 * (la_attn_merge_row, attn_tile.cuh: lanes reduce (m, l) over the splits, then each lane
 * sums 4 dims over the splits, the split weights passed by shuffle; head_dim <= 128).
 * Split decode items merge in attn_decode instead (its last CTA per split set runs the
 * same la_attn_merge_row), so with LA_CUDA_FUSED_MERGE on (the default) a decode-only step
 * launches no combine.
 * Bytes per call: 4 x head_dim + 8 per partial row read, 2 x head_dim per row written.
 */
#include "backend/cuda/kernels/attn_tile.cuh"

namespace {

constexpr int C_WARPS = 4;

__global__ void __launch_bounds__(C_WARPS * 32) attn_combine_kernel(const la_cuda_attn_params p) {
    la_pdl_enter();
    const la_cuda_attn_combine_item ci = p.combine[blockIdx.x];
    const int grp = blockIdx.y, n_groups = gridDim.y;
    const int hd = p.head_dim, hpc = p.heads_per_cta, head0 = la_attn_group_of(p, grp).head0;
    const int64_t qstride = (int64_t)p.n_heads * hd;
    const int r = blockIdx.z * C_WARPS + (threadIdx.x >> 5);
    if (r >= ci.n_tokens * hpc || r >= ci.rows) return; /* whole warp leaves together */
    const int tok = r / hpc, h = head0 + (r - tok * hpc);
    la_attn_merge_row(p.part_o, p.part_ml, ci.part_row0 + (int64_t)grp * ci.rows + r, (int64_t)n_groups * ci.rows,
                      ci.n_splits, hd, p.out + (int64_t)(ci.row0 + tok) * qstride + (int64_t)h * hd);
}

} /* namespace */

extern "C" la_status la_cuda_attn_combine(const la_cuda_attn_params *p, cudaStream_t stream,
                                          la_err *err) {
    if (p->n_combine <= 0) return LA_OK;
    if (p->n_kv_heads < 1 || p->n_head_chunks < 1 || p->heads_per_cta < 1 || p->head_dim <= 0 ||
        p->head_dim % 4 != 0 || p->head_dim > 128)
        return la_err_set(err, LA_ERR_INTERNAL, "attn_combine: bad geometry");
    const int max_rows = p->combine_rows > 0 ? p->combine_rows : LA_ATTN_PREFILL_ROWS;
    dim3 grid((unsigned)p->n_combine, (unsigned)(p->n_kv_heads * p->n_head_chunks),
              (unsigned)((max_rows + C_WARPS - 1) / C_WARPS));
    return la_cuda_launch(attn_combine_kernel, grid, C_WARPS * 32, 0, stream, *p, "attn_combine", err);
}
