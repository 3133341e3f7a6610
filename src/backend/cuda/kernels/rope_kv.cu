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
 *                 interface modifies k in place; unrotated rows are left as they are) and
 *                 K, V to the pool slot. Bytes: k and v read, k written back, both written
 *                 to the pool: 8 x n_kv_heads x head_dim per token (bf16).
 * qkv_kv_write    one CTA per new token, reading its row of the fused QKV GEMM's output
 *                 [q | k | v]: the q columns copied to q, then kv_write's work from the k and
 *                 v columns, which also go to the k (rotated) and v activations (replacing
 *                 split_cols + kv_write, bit-equal). Bytes per token: (q_cols + 2 kvd) x 2
 *                 read, q_cols x 2 + kvd x 8 written (kvd = n_kv_heads x head_dim).
 * kv_copy_rotate  grid (job, layer): copy slots [0, n_valid) of the source block to the
 *                 destination block, keys rotated by delta, values as they are. Bytes:
 *                 8 x n_valid x n_kv_heads x head_dim per job and layer.
 * kv_deviation    one CTA per token: the squared distance of its V row from the pool's V at
 *                 its slot (selected recovery's probe), f32 sums. Bytes: 4 x n_kv_heads x
 *                 head_dim read per token.
 * Shapes: k, v [n_tokens, n_kv_heads * head_dim] bf16; pool slabs as cuda_kernels.h.
 */
#include "backend/cuda/kernels/cuda_common.cuh"

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

/* Unit u (< n_kv_heads x head_dim / 4) of token t's KV write: frequencies f = 2u', 2u' + 1
 * of K head h (u = h x head_dim / 4 + u') as bf16 pairs, rotated at k_pos[t] (not for
 * LA_POS_UNROTATED), written to k_out and the pool; the 8 bytes of V at element 4u from
 * v_in to the pool (and to v_out unless NULL). Every load before the first store (one
 * trip to memory). k_in, k_out, v_in, v_out: token t's rows; k_out may be k_in. */
__device__ __forceinline__ void kv_write_unit(const la_cuda_kv_write_params &p, int t, int u, const la_bf16_t *k_in,
                                              la_bf16_t *k_out, const la_bf16_t *v_in, la_bf16_t *v_out) {
    const int hd = p.head_dim, half = hd / 2, nkv = p.n_kv_heads, pairs = half / 2;
    const int32_t kp = p.k_pos[t];
    const int64_t slot = p.slots[t];
    const int64_t blk = slot / p.block_size, off = slot - blk * p.block_size;
    const int h = u / pairs, f = 2 * (u - h * pairs);
    uint32_t lo = *reinterpret_cast<const uint32_t *>(k_in + h * hd + f);
    uint32_t hi = *reinterpret_cast<const uint32_t *>(k_in + h * hd + half + f);
    const uint2 vv = *reinterpret_cast<const uint2 *>(v_in + 4 * u);
    if (kp != LA_POS_UNROTATED) la_rope_rotate_pair(lo, hi, la_rope_cs2(p.rope, p.rope_len, half, kp, f), lo, hi);
    if (kp != LA_POS_UNROTATED || k_out != k_in) {
        *reinterpret_cast<uint32_t *>(k_out + h * hd + f) = lo;
        *reinterpret_cast<uint32_t *>(k_out + h * hd + half + f) = hi;
    }
    la_bf16_t *dst = p.k_pool + ((blk * nkv + h) * p.block_size + off) * hd;
    *reinterpret_cast<uint32_t *>(dst + f) = lo;
    *reinterpret_cast<uint32_t *>(dst + half + f) = hi;
    const int hv = (4 * u) / hd, cv = 4 * u - hv * hd;
    *reinterpret_cast<uint2 *>(p.v_pool + ((blk * nkv + hv) * p.block_size + off) * hd + cv) = vv;
    if (v_out) *reinterpret_cast<uint2 *>(v_out + 4 * u) = vv;
}

/* One CTA per token; thread u: kv_write_unit u of the token's row in place. */
__global__ void __launch_bounds__(512) kv_write_kernel(const la_cuda_kv_write_params p) {
    la_pdl_enter();
    const int t = blockIdx.x, kvd = p.n_kv_heads * p.head_dim;
    la_bf16_t *k = p.k + (int64_t)t * kvd;
    const la_bf16_t *v = p.v + (int64_t)t * kvd;
    for (int u = threadIdx.x; u < kvd / 4; u += blockDim.x) kv_write_unit(p, t, u, k, k, v, nullptr);
}

/* One CTA per token, thread i: 16 bytes of the query columns of its qkv row copied to q
 * and kv_write_unit i from the key and value columns, the q load first and its store last
 * so that no load waits behind a store. */
__global__ void __launch_bounds__(512) qkv_kv_write_kernel(const la_cuda_qkv_kv_write_params p) {
    la_pdl_enter();
    const int t = blockIdx.x, kvd = p.kv.n_kv_heads * p.kv.head_dim, qc = p.q_cols;
    const int nq = qc / 8, nkv = kvd / 4, n = nq > nkv ? nq : nkv;
    const la_bf16_t *row = p.qkv + (int64_t)t * (qc + 2 * kvd);
    uint4 *q = reinterpret_cast<uint4 *>(p.q + (int64_t)t * qc);
    la_bf16_t *k = p.kv.k + (int64_t)t * kvd, *v = p.v_act + (int64_t)t * kvd;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        uint4 qv = make_uint4(0, 0, 0, 0);
        if (i < nq) qv = reinterpret_cast<const uint4 *>(row)[i];
        if (i < nkv) kv_write_unit(p.kv, t, i, row + qc, k, row + qc + kvd, v);
        if (i < nq) q[i] = qv;
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

/* One CTA of KV_DEV_THREADS threads per token t: dev[t] = sum over its V values of (v - pool V)^2. */
constexpr int KV_DEV_THREADS = 128;
static_assert(KV_DEV_THREADS % 32 == 0 && KV_DEV_THREADS <= 1024, "whole warps");

__global__ void __launch_bounds__(KV_DEV_THREADS) kv_deviation_kernel(const la_cuda_kv_deviation_params p) {
    la_pdl_enter();
    const int t = blockIdx.x, hd = p.head_dim, kvd = p.n_kv_heads * hd;
    const int64_t slot = p.slots[t], blk = slot / p.block_size, off = slot - blk * p.block_size;
    const la_bf16_t *v = p.v + (int64_t)t * kvd;
    float sum = 0.0f;
    for (int j = threadIdx.x; j < kvd; j += blockDim.x) {
        const int h = j / hd, c = j - h * hd;
        const float d = la_bf2f(v[j]) - la_bf2f(p.v_pool[((blk * p.n_kv_heads + h) * p.block_size + off) * hd + c]);
        sum += d * d;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    __shared__ float part[KV_DEV_THREADS / 32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < KV_DEV_THREADS / 32; w++) total += part[w];
        p.dev[t] = total;
    }
}

/* kv_write's geometry (both launchers): head_dim a multiple of 8, a KV head, a block size
 * and the RoPE table. LA_ERR_INTERNAL naming `what`. */
la_status kv_write_check(const la_cuda_kv_write_params *p, const char *what, la_err *err) {
    if (p->head_dim % 8 != 0 || p->n_kv_heads < 1 || p->block_size < 1 || !p->rope)
        return la_err_set(err, LA_ERR_INTERNAL, "%s: bad geometry (head_dim %d, n_kv_heads %d)", what, p->head_dim,
                          p->n_kv_heads);
    return LA_OK;
}

/* Threads of a kv_write / qkv_kv_write CTA for `units` per-thread pieces: one thread each
 * (64..512, whole warps), so a row's loads are all in flight at once (fewer threads looping
 * over the pieces, or narrower accesses, were slower: bench/GPU_NOTES.md). */
int kv_write_threads(int units) { return units < 64 ? 64 : units > 512 ? 512 : (units + 31) / 32 * 32; }

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
    LA_TRY(kv_write_check(p, "kv_write", err));
    const int threads = kv_write_threads(p->n_kv_heads * (p->head_dim / 4));
    return la_cuda_launch(kv_write_kernel, (unsigned)p->n_tokens, (unsigned)threads, 0, stream, *p, "kv_write", err);
}

extern "C" la_status la_cuda_qkv_kv_write(const la_cuda_qkv_kv_write_params *p, cudaStream_t stream, la_err *err) {
    const la_cuda_kv_write_params *kv = &p->kv;
    if (kv->n_tokens <= 0) return LA_OK;
    LA_TRY(kv_write_check(kv, "qkv_kv_write", err));
    if (p->q_cols % 8 != 0 || p->q_cols <= 0 || ((uintptr_t)p->qkv & 15) || ((uintptr_t)p->q & 15))
        return la_err_set(err, LA_ERR_INTERNAL, "qkv_kv_write: %d query columns or misaligned rows", p->q_cols);
    const int kv_units = kv->n_kv_heads * (kv->head_dim / 4);
    const int threads = kv_write_threads(p->q_cols / 8 > kv_units ? p->q_cols / 8 : kv_units);
    return la_cuda_launch(qkv_kv_write_kernel, (unsigned)kv->n_tokens, (unsigned)threads, 0, stream, *p, "qkv_kv_write",
                          err);
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

extern "C" la_status la_cuda_kv_deviation(const la_cuda_kv_deviation_params *p, cudaStream_t stream, la_err *err) {
    if (p->n_tokens <= 0) return LA_OK;
    if (p->n_kv_heads < 1 || p->head_dim < 1 || p->block_size < 1)
        return la_err_set(err, LA_ERR_INTERNAL, "kv_deviation: bad geometry (head_dim %d, n_kv_heads %d)", p->head_dim,
                          p->n_kv_heads);
    return la_cuda_launch(kv_deviation_kernel, (unsigned)p->n_tokens, (unsigned)KV_DEV_THREADS, 0, stream, *p,
                          "kv_deviation", err);
}
