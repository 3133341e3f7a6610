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
 * y = KV head x head chunk, z = groups of 4 rows; one warp per output row: lanes reduce
 * (m, l) over the splits, then each lane sums 4 dims (16-byte loads) over the splits, the
 * split weights passed by shuffle (head_dim <= 128).
 * Bytes per call: 4 x head_dim + 8 per partial row read, 2 x head_dim per row written.
 */
#include "backend/cuda/cuda_common.cuh"

namespace {

constexpr int C_WARPS = 4;

__global__ void __launch_bounds__(C_WARPS * 32) attn_combine_kernel(const la_cuda_attn_params p) {
    const la_cuda_attn_combine_item ci = p.combine[blockIdx.x];
    const int grp = blockIdx.y, n_groups = gridDim.y;
    const int kvh = grp / p.n_head_chunks, chunk = grp - kvh * p.n_head_chunks;
    const int hd = p.head_dim, hpc = p.heads_per_cta;
    const int head0 = kvh * (p.n_heads / p.n_kv_heads) + chunk * hpc;
    const int64_t qstride = (int64_t)p.n_heads * hd;
    const int r = blockIdx.z * C_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const unsigned full = 0xffffffffu;
    if (r >= ci.n_tokens * hpc || r >= ci.rows) return; /* whole warp leaves together */
    const int64_t row0 = ci.part_row0 + (int64_t)grp * ci.rows + r, split_stride = (int64_t)n_groups * ci.rows;
    float M = -INFINITY;
    for (int s = lane; s < ci.n_splits; s += 32) M = fmaxf(M, p.part_ml[row0 + s * split_stride].x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(full, M, o));
    float den = 0.f;
    if (M != -INFINITY)
        for (int s = lane; s < ci.n_splits; s += 32) {
            const float2 ml = p.part_ml[row0 + s * split_stride];
            den += la_exp2(ml.x - M) * ml.y;
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(full, den, o);
    const float inv = den > 0.f ? 1.f / den : 0.f;
    const int tok = r / hpc, h = head0 + (r - tok * hpc);
    la_bf16_t *out = p.out + (int64_t)(ci.row0 + tok) * qstride + (int64_t)h * hd;
    /* head_dim <= 128 = 32 lanes x 4 dims. Splits in chunks of 32: lane s computes split
     * s's weight once, the inner loop takes it by shuffle, so its loads do not wait on a
     * (m, l) load and unrolling issues several splits' rows at once (a b1 decode step has
     * ~33 splits per row: one dependent load chain each cost ~13 us per layer). */
    const int d = lane * 4;
    const bool active = d < hd;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (M != -INFINITY)
        for (int s0 = 0; s0 < ci.n_splits; s0 += 32) {
            const int s = s0 + lane, n = ci.n_splits - s0 < 32 ? ci.n_splits - s0 : 32;
            const float w_lane = s < ci.n_splits ? la_exp2(p.part_ml[row0 + s * split_stride].x - M) : 0.f;
            const float *po = p.part_o + (row0 + (int64_t)s0 * split_stride) * hd + d;
#pragma unroll 8
            for (int j = 0; j < n; j++) {
                const float w = __shfl_sync(full, w_lane, j);
                if (active) {
                    const float4 v = *reinterpret_cast<const float4 *>(po + (int64_t)j * split_stride * hd);
                    acc.x += w * v.x;
                    acc.y += w * v.y;
                    acc.z += w * v.z;
                    acc.w += w * v.w;
                }
            }
        }
    if (active) {
        uint2 o;
        o.x = la_pack_bf16x2(acc.x * inv, acc.y * inv);
        o.y = la_pack_bf16x2(acc.z * inv, acc.w * inv);
        *reinterpret_cast<uint2 *>(out + d) = o;
    }
}

} /* namespace */

extern "C" la_status la_cuda_attn_combine(const la_cuda_attn_params *p, cudaStream_t stream,
                                          la_err *err) {
    if (p->n_combine <= 0) return LA_OK;
    if (p->n_kv_heads < 1 || p->n_head_chunks < 1 || p->heads_per_cta < 1 || p->head_dim <= 0 ||
        p->head_dim % 4 != 0 || p->head_dim > 128)
        return la_err_set(err, LA_ERR_INTERNAL, "attn_combine: bad geometry");
    const int max_rows = p->combine_rows > 0 ? p->combine_rows : LA_ATTN_PREFILL_ROWS_V2;
    dim3 grid((unsigned)p->n_combine, (unsigned)(p->n_kv_heads * p->n_head_chunks),
              (unsigned)((max_rows + C_WARPS - 1) / C_WARPS));
    attn_combine_kernel<<<grid, C_WARPS * 32, 0, stream>>>(*p);
    return la_cuda_launched("attn_combine", err);
}
