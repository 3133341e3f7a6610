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
 * y = KV head x head chunk; 128 threads stride over (row, dim).
 * Bytes per call: 4 x head_dim + 8 per partial row read, 2 x head_dim per row written.
 */
#include "backend/cuda/cuda_common.cuh"

namespace {

constexpr int C_THREADS = 128;

__global__ void __launch_bounds__(C_THREADS) attn_combine_kernel(const la_cuda_attn_params p) {
    const la_cuda_attn_combine_item ci = p.combine[blockIdx.x];
    const int grp = blockIdx.y, n_groups = gridDim.y;
    const int kvh = grp / p.n_head_chunks, chunk = grp - kvh * p.n_head_chunks;
    const int hd = p.head_dim, hpc = p.heads_per_cta;
    const int head0 = kvh * (p.n_heads / p.n_kv_heads) + chunk * hpc;
    const int64_t qstride = (int64_t)p.n_heads * hd;
    const int n_rows_used = ci.n_tokens * hpc;
    for (int i = threadIdx.x; i < n_rows_used * hd; i += C_THREADS) {
        const int r = i / hd, d = i - r * hd;
        float M = -INFINITY;
        for (int s = 0; s < ci.n_splits; s++)
            M = fmaxf(M, p.part_ml[ci.part_row0 + ((int64_t)s * n_groups + grp) * ci.rows + r].x);
        float num = 0.f, den = 0.f;
        if (M != -INFINITY)
            for (int s = 0; s < ci.n_splits; s++) {
                const int64_t row = ci.part_row0 + ((int64_t)s * n_groups + grp) * ci.rows + r;
                const float2 ml = p.part_ml[row];
                const float w = exp2f(ml.x - M);
                num += w * p.part_o[row * hd + d];
                den += w * ml.y;
            }
        const int tok = r / hpc, h = head0 + (r - tok * hpc);
        p.out[(int64_t)(ci.row0 + tok) * qstride + (int64_t)h * hd + d] = la_f2bf(den > 0.f ? num / den : 0.f);
    }
}

} /* namespace */

extern "C" la_status la_cuda_attn_combine(const la_cuda_attn_params *p, cudaStream_t stream,
                                          la_err *err) {
    if (p->n_combine <= 0) return LA_OK;
    if (p->n_kv_heads < 1 || p->n_head_chunks < 1 || p->heads_per_cta < 1 || p->head_dim <= 0)
        return la_err_set(err, LA_ERR_INTERNAL, "attn_combine: bad geometry");
    dim3 grid((unsigned)p->n_combine, (unsigned)(p->n_kv_heads * p->n_head_chunks));
    attn_combine_kernel<<<grid, C_THREADS, 0, stream>>>(*p);
    return la_cuda_launched("attn_combine", err);
}
