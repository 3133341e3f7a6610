/* RoPE for the KV cache: the (cos, sin) table, the RoPE + KV write of new tokens, and
 * BlockAttention's per-request copy with re-rotation.
 *
 * Rotation (HF modeling_llama.py apply_rotary_pos_emb, rotate_half; backend/rope.h):
 * for i < d/2,  x'[i] = x[i] cos(a_i) - x[i + d/2] sin(a_i),
 *               x'[i + d/2] = x[i + d/2] cos(a_i) + x[i] sin(a_i),   a_i = pos * inv_freq[i]
 * inv_freq after llama3 / linear scaling (la_rope_inv_freq). Rotating rotated keys adds
 * angles: R(Δ) R(i) k = R(i + Δ) k (BlockAttention's copy).
 *
 * rope_table      rope[pos][i] = (cos, sin)(pos * inv_freq[i]) with the angle formed and
 *                 reduced in double precision, rounded to f32 once: identical to the CPU's
 *                 la_rope_cos_sin, exact at 100k+ positions where an f32 angle is not.
 *                 Grid-stride over n_pos x half. Bytes: 8 n_pos half written.
 * kv_write        one CTA per new token: rotate its K heads at k_pos (skipped for
 *                 LA_POS_UNROTATED: mepic), write the rotated K back to the activation (the
 *                 interface modifies k in place) and K, V to the pool slot. Bytes: k and v
 *                 read, k written back, both written to the pool: 8 x n_kv_heads x head_dim
 *                 per token (bf16).
 * kv_copy_rotate  grid (job, layer): copy slots [0, n_valid) of the source block to the
 *                 destination block, keys rotated by delta, values as they are. Bytes:
 *                 8 x n_valid x n_kv_heads x head_dim per job and layer.
 * Shapes: k, v [n_tokens, n_kv_heads * head_dim] bf16; pool slabs as cuda_kernels.h.
 */
#include "backend/cuda/cuda_common.cuh"

namespace {

__global__ void rope_table_kernel(const la_cuda_rope_table_params p) {
    la_pdl_enter();
    const int64_t n = (int64_t)p.n_pos * p.half;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t pos = i / p.half;
        const int f = (int)(i - pos * p.half);
        double s, c;
        sincos((double)pos * (double)p.inv_freq[f], &s, &c);
        p.rope[i] = make_float2((float)c, (float)s);
    }
}

/* Thread u of a token's CTA: frequencies 2u', 2u' + 1 of K head h (u = h x half / 2 + u')
 * as bf16 pairs, and the 8 bytes of V at the same index; every load of the thread is
 * issued before its first store (one pass, one trip to memory). */
__global__ void __launch_bounds__(512) kv_write_kernel(const la_cuda_kv_write_params p) {
    la_pdl_enter();
    const int t = blockIdx.x, hd = p.head_dim, half = hd / 2, nkv = p.n_kv_heads, pairs = half / 2;
    const int32_t kp = p.k_pos[t];
    const int64_t slot = p.slots[t];
    const int64_t blk = slot / p.block_size, off = slot - blk * p.block_size;
    la_bf16_t *k = p.k + (int64_t)t * nkv * hd;
    const la_bf16_t *v = p.v + (int64_t)t * nkv * hd;
    for (int u = threadIdx.x; u < nkv * pairs; u += blockDim.x) {
        const int h = u / pairs, f = 2 * (u - h * pairs);
        la_bf16_t *kr = k + h * hd;
        uint32_t lo = *reinterpret_cast<const uint32_t *>(kr + f), hi = *reinterpret_cast<const uint32_t *>(kr + half + f);
        const uint2 vv = *reinterpret_cast<const uint2 *>(v + 4 * u); /* V: 4 bf16 per thread */
        if (kp != LA_POS_UNROTATED) {
            la_rope_rotate_pair(lo, hi, la_rope_cs2(p.rope, p.rope_len, half, kp, f), lo, hi);
            *reinterpret_cast<uint32_t *>(kr + f) = lo;
            *reinterpret_cast<uint32_t *>(kr + half + f) = hi;
        }
        la_bf16_t *dst = p.k_pool + ((blk * nkv + h) * p.block_size + off) * hd;
        *reinterpret_cast<uint32_t *>(dst + f) = lo;
        *reinterpret_cast<uint32_t *>(dst + half + f) = hi;
        const int hv = (4 * u) / hd, cv = 4 * u - hv * hd;
        *reinterpret_cast<uint2 *>(p.v_pool + ((blk * nkv + hv) * p.block_size + off) * hd + cv) = vv;
    }
}

__global__ void __launch_bounds__(256) kv_copy_rotate_kernel(const la_cuda_kv_copy_params p) {
    la_pdl_enter();
    const la_cuda_copy_job job = p.jobs[blockIdx.x];
    const int layer = blockIdx.y, hd = p.head_dim, half = hd / 2, nkv = p.n_kv_heads, B = p.block_size;
    const int64_t block_elems = (int64_t)nkv * B * hd;
    const int64_t layer_off = (int64_t)layer * p.n_blocks * block_elems;
    const la_bf16_t *ks = p.k_pool + layer_off + job.src_block * block_elems;
    const la_bf16_t *vs = p.v_pool + layer_off + job.src_block * block_elems;
    la_bf16_t *kd = p.k_pool + layer_off + job.dst_block * block_elems;
    la_bf16_t *vd = p.v_pool + layer_off + job.dst_block * block_elems;
    const int n = job.n_valid;
    for (int i = threadIdx.x; i < nkv * n * half; i += blockDim.x) {
        const int h = i / (n * half), rem = i - h * n * half, j = rem / half, f = rem - j * half;
        const int64_t row = ((int64_t)h * B + j) * hd;
        const float2 cs = la_rope_cs(p.rope, p.rope_len, half, job.delta, f);
        const float x = la_bf2f(ks[row + f]), y = la_bf2f(ks[row + f + half]);
        kd[row + f] = la_f2bf(x * cs.x - y * cs.y);
        kd[row + f + half] = la_f2bf(y * cs.x + x * cs.y);
    }
    const int chunks = hd / 8;
    for (int i = threadIdx.x; i < nkv * n * chunks; i += blockDim.x) {
        const int h = i / (n * chunks), rem = i - h * n * chunks, j = rem / chunks, c = rem - j * chunks;
        const int64_t at = ((int64_t)h * B + j) * hd + c * 8;
        *reinterpret_cast<uint4 *>(vd + at) = *reinterpret_cast<const uint4 *>(vs + at);
    }
}

} /* namespace */

/* ---- launchers -------------------------------------------------------------------------- */

extern "C" la_status la_cuda_rope_table(const la_cuda_rope_table_params *p, cudaStream_t stream,
                                        la_err *err) {
    if (p->n_pos <= 0 || p->half <= 0 || !p->rope || !p->inv_freq)
        return la_err_set(err, LA_ERR_INTERNAL, "rope_table: bad arguments (n_pos %d, half %d)",
                          p->n_pos, p->half);
    return la_cuda_launch(rope_table_kernel, la_cuda_blocks((int64_t)p->n_pos * p->half, 256), 256, 0,
            stream, *p, "rope_table", err);
}

extern "C" la_status la_cuda_kv_write(const la_cuda_kv_write_params *p, cudaStream_t stream,
                                      la_err *err) {
    if (p->n_tokens <= 0) return LA_OK;
    if (p->head_dim % 8 != 0 || p->n_kv_heads < 1 || p->block_size < 1 || !p->rope)
        return la_err_set(err, LA_ERR_INTERNAL, "kv_write: bad geometry (head_dim %d, n_kv_heads %d)",
                          p->head_dim, p->n_kv_heads);
    /* one thread per (KV head, two rotation pairs), so a row's loads are all in flight at
     * once (ncu, Llama-3-8B batch 1: 4 us per layer with 128 threads looping over 512 pairs;
     * one thread per pair with 2-byte accesses: 55 us per layer at 8K rows) */
    const int units = p->n_kv_heads * (p->head_dim / 4);
    const int threads = units < 64 ? 64 : units > 512 ? 512 : (units + 31) / 32 * 32;
    return la_cuda_launch(kv_write_kernel, (unsigned)p->n_tokens, (unsigned)threads, 0, stream, *p, "kv_write", err);
}

extern "C" la_status la_cuda_kv_copy_rotate(const la_cuda_kv_copy_params *p, cudaStream_t stream,
                                            la_err *err) {
    if (p->n_jobs <= 0 || p->n_layers <= 0) return LA_OK;
    if (p->head_dim % 8 != 0 || p->n_layers > 65535 || !p->rope)
        return la_err_set(err, LA_ERR_INTERNAL, "kv_copy_rotate: bad geometry (head_dim %d, %d layers)",
                          p->head_dim, p->n_layers);
    dim3 grid((unsigned)p->n_jobs, (unsigned)p->n_layers);
    return la_cuda_launch(kv_copy_rotate_kernel, grid, 256, 0, stream, *p, "kv_copy_rotate", err);
}
