/* Row kernels of the forward pass: embedding gather, RMSNorm, row gather (logit rows),
 * column split (the outputs of a fused GEMM).
 *
 * embed        x[t] = table[tokens[t]]                        (HF nn.Embedding)
 * rmsnorm      out = w * (x / sqrt(mean(x^2) + eps))           (HF LlamaRMSNorm: variance
 *              in f32, eps inside the square root; the product is rounded to bf16 once,
 *              as the CPU backend computes it in f32); with a residual, x += residual
 *              first (the decoder layer's residual add, stored to x) and the norm is of
 *              the sum: one launch for the add and the next block's norm
 * gather_rows  out[i] = x[rows[i]]
 * split_cols   out_i[r] = x[r][c_i, c_i + n_cols_i)  (x = h [W_q; W_k; W_v]^T into q, k, v)
 * argmax       ids[r] = the column of the largest x[r][c], the lowest column on ties, NaN
 *              below every number (greedy decoding on the device: engine/sampling.c
 *              la_argmax, torch.argmax for NaN-free rows)
 *
 * Shapes: row-major bf16 [n_rows, n_cols]; table [vocab, n_cols]; w [n_cols].
 * Grid: one CTA per output row; 16-byte vectors when n_cols % 8 == 0 (every Llama shape),
 * scalars otherwise. split_cols: grid (column chunks of 256 vectors, rows), one 16-byte
 * vector (8 columns) per thread when every part's width is a multiple of 8, one element
 * otherwise. Bytes: embed, gather and split 4 x n_cols per row (read + write); rmsnorm
 * 6 x n_cols per row (x read once into registers up to 8192 columns, twice above). FLOPs: ~4 x n_cols per
 * row for rmsnorm; none otherwise. argmax: one CTA of 1024 threads per row, 2 x n_cols
 * bytes read, 4 written.
 */
#include "backend/cuda/kernels/cuda_common.cuh"

namespace {

constexpr int R_THREADS = 256;

__device__ __forceinline__ void copy_row(la_bf16_t *dst, const la_bf16_t *src, int64_t n_cols) {
    if ((n_cols & 7) == 0) {
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        for (int64_t i = threadIdx.x; i < n_cols / 8; i += blockDim.x) d[i] = s[i];
    } else {
        for (int64_t i = threadIdx.x; i < n_cols; i += blockDim.x) dst[i] = src[i];
    }
}

__global__ void __launch_bounds__(R_THREADS) embed_kernel(const la_cuda_embed_params p) {
    la_pdl_enter();
    const int t = blockIdx.x;
    int32_t tok = p.tokens[t];
    if (tok < 0) tok = p.prev_ids[LA_TOKEN_PREV_ROW(tok)]; /* the step before's argmax */
    copy_row(p.x + (int64_t)t * p.n_cols, p.table + (int64_t)tok * p.n_cols, p.n_cols);
}

__global__ void __launch_bounds__(R_THREADS) gather_kernel(const la_cuda_gather_params p) {
    la_pdl_enter();
    const int i = blockIdx.x;
    copy_row(p.out + (int64_t)i * p.n_cols, p.x + (int64_t)p.rows[i] * p.n_cols, p.n_cols);
}

__device__ __forceinline__ float block_sum(float v, float *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) s += red[w];
    return s;
}

/* 8 bf16 of x already loaded into *v (and, when ADD, of the residual in r: the sum is
 * rounded to bf16, stored back to x[i] and left in *v), adding their squares to ss. */
template <bool ADD>
__device__ __forceinline__ void rms_sum8(uint4 *v, const uint4 &r, la_bf16_t *x, int i, float &ss) {
    uint4 u = *v;
    if (ADD) {
        const uint32_t xv[4] = {u.x, u.y, u.z, u.w}, rv[4] = {r.x, r.y, r.z, r.w};
        uint32_t o[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[e] = la_pack_bf16x2(__uint_as_float(xv[e] << 16) + __uint_as_float(rv[e] << 16),
                                  __uint_as_float(xv[e] & 0xffff0000u) + __uint_as_float(rv[e] & 0xffff0000u));
        u = make_uint4(o[0], o[1], o[2], o[3]);
        reinterpret_cast<uint4 *>(x)[i] = u;
    }
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float a = __uint_as_float(w[e] << 16), b = __uint_as_float(w[e] & 0xffff0000u);
        ss += a * a + b * b;
    }
    *v = u;
}

/* out[i..i+8) = w x inv, 8 bf16 from the registers v (x) and g (the norm weight). */
__device__ __forceinline__ void rms_store8(la_bf16_t *y, int i, const uint4 &v, const uint4 &g, float inv) {
    const uint32_t xv[4] = {v.x, v.y, v.z, v.w}, gv[4] = {g.x, g.y, g.z, g.w};
    uint32_t out[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float a = __uint_as_float(xv[e] << 16), b = __uint_as_float(xv[e] & 0xffff0000u);
        const float wa = __uint_as_float(gv[e] << 16), wb = __uint_as_float(gv[e] & 0xffff0000u);
        out[e] = la_pack_bf16x2(wa * (a * inv), wb * (b * inv));
    }
    reinterpret_cast<uint4 *>(y)[i] = make_uint4(out[0], out[1], out[2], out[3]);
}

/* uint4 of a row (8 bf16 each) a thread keeps in registers across the block_sum: rows of up
 * to 8 x R_KEEP x R_THREADS = 8192 columns are read once (x, residual and the weight all
 * before the barrier), so a small batch's norm waits on one trip to memory, not two. */
constexpr int R_KEEP = 4;

/* ADD: x += residual first (rounded to bf16 and stored, as la_cuda_add computes it), then
 * the norm of the stored sum. Each thread reads back only the elements it wrote itself
 * (the same index sequence in both loops), and every read of residual comes before the
 * block_sum barrier, so out may be residual. Both paths sum and round in the same order. */
template <bool ADD>
__global__ void __launch_bounds__(R_THREADS) rmsnorm_kernel(const la_cuda_rmsnorm_params p) {
    la_pdl_enter();
    __shared__ float red[R_THREADS / 32];
    const int64_t row = blockIdx.x;
    const int n = p.n_cols;
    la_bf16_t *x = const_cast<la_bf16_t *>(p.x) + row * n;
    la_bf16_t *y = p.out + row * n;
    float ss = 0.f;
    const bool vec = (n & 7) == 0;
    const int n8 = n / 8, nt = (int)blockDim.x;
    if (vec && n8 <= R_KEEP * nt) {
        uint4 v[R_KEEP], g[R_KEEP], r[R_KEEP] = {};
        /* every load first, then the sums and their stores: a store to x between them
         * (residual may alias out, not x, but the compiler cannot tell) would make each
         * k's loads wait for the previous k's (one trip to memory each) */
#pragma unroll
        for (int k = 0; k < R_KEEP; k++) {
            const int i = threadIdx.x + k * nt;
            if (i < n8) {
                v[k] = reinterpret_cast<const uint4 *>(x)[i];
                if (ADD) r[k] = reinterpret_cast<const uint4 *>(p.residual + row * n)[i];
                g[k] = reinterpret_cast<const uint4 *>(p.w)[i];
            }
        }
#pragma unroll
        for (int k = 0; k < R_KEEP; k++)
            if (threadIdx.x + k * nt < n8) rms_sum8<ADD>(&v[k], r[k], x, threadIdx.x + k * nt, ss);
        ss = block_sum(ss, red);
        const float inv = 1.0f / sqrtf(ss / (float)n + p.eps);
#pragma unroll
        for (int k = 0; k < R_KEEP; k++) {
            const int i = threadIdx.x + k * nt;
            if (i < n8) rms_store8(y, i, v[k], g[k], inv);
        }
        return;
    }
    if (vec) {
        for (int i = threadIdx.x; i < n8; i += nt) {
            uint4 v = reinterpret_cast<const uint4 *>(x)[i], r = v;
            if (ADD) r = reinterpret_cast<const uint4 *>(p.residual + row * n)[i];
            rms_sum8<ADD>(&v, r, x, i, ss);
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            if (ADD) x[i] = la_f2bf(la_bf2f(x[i]) + la_bf2f(p.residual[row * n + i]));
            const float a = la_bf2f(x[i]);
            ss += a * a;
        }
    }
    ss = block_sum(ss, red);
    const float inv = 1.0f / sqrtf(ss / (float)n + p.eps);
    if (vec) {
        for (int i = threadIdx.x; i < n8; i += nt)
            rms_store8(y, i, reinterpret_cast<const uint4 *>(x)[i], reinterpret_cast<const uint4 *>(p.w)[i], inv);
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = la_f2bf(la_bf2f(p.w[i]) * (la_bf2f(x[i]) * inv));
    }
}

/* Thread: one unit (VEC = 8 columns, or 1) of row blockIdx.y of x, copied to the part
 * whose columns hold it. */
template <int VEC> __global__ void __launch_bounds__(R_THREADS) split_kernel(const la_cuda_split_params p) {
    la_pdl_enter();
    int64_t total = 0;
    for (int i = 0; i < p.n_parts; i++) total += p.n_cols[i];
    const int64_t u = (int64_t)blockIdx.x * R_THREADS + threadIdx.x, col = u * VEC;
    if (col >= total) return;
    const int64_t row = blockIdx.y;
    int part = 0;
    int64_t c0 = 0;
    while (col >= c0 + p.n_cols[part]) c0 += p.n_cols[part++];
    const la_bf16_t *src = p.x + row * total + col;
    la_bf16_t *dst = p.out[part] + row * p.n_cols[part] + (col - c0);
    if (VEC == 8) *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
    else *dst = *src;
}

constexpr int A_THREADS = 1024;

/* (value, column) of the better of two candidates: larger value, then lower column. */
__device__ __forceinline__ void better_of(float &v, int32_t &c, float v2, int32_t c2) {
    if (v2 > v || (v2 == v && c2 < c)) {
        v = v2;
        c = c2;
    }
}

__global__ void __launch_bounds__(A_THREADS) argmax_kernel(const la_cuda_argmax_params p) {
    la_pdl_enter();
    __shared__ float sv[A_THREADS / 32];
    __shared__ int32_t sc[A_THREADS / 32];
    const la_bf16_t *x = p.x + (int64_t)blockIdx.x * p.n_cols;
    float v = -INFINITY;
    int32_t c = INT32_MAX; /* no column yet: any column, even of -inf or NaN, wins a tie */
    /* 8 columns per 16-byte load when rows stay 16-byte aligned (a 128K vocabulary row
     * takes ~5 us instead of ~48 with 2-byte loads); the result does not depend on the
     * order in which candidates meet (better_of is a total order on (value, column)) */
    const int32_t n8 = ((p.n_cols & 7) == 0 && ((uintptr_t)p.x & 15) == 0) ? p.n_cols / 8 : 0;
#pragma unroll 4
    for (int32_t i = threadIdx.x; i < n8; i += blockDim.x) {
        const uint4 u = reinterpret_cast<const uint4 *>(x)[i];
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float a = __uint_as_float(w[e] << 16), b = __uint_as_float(w[e] & 0xffff0000u);
            better_of(v, c, isnan(a) ? -INFINITY : a, 8 * i + 2 * e);
            better_of(v, c, isnan(b) ? -INFINITY : b, 8 * i + 2 * e + 1);
        }
    }
    for (int32_t i = 8 * n8 + threadIdx.x; i < p.n_cols; i += blockDim.x) {
        float xi = la_bf2f(x[i]);
        better_of(v, c, isnan(xi) ? -INFINITY : xi, i);
    }
    for (int o = 16; o > 0; o >>= 1)
        better_of(v, c, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, c, o));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sv[warp] = v;
        sc[warp] = c;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < A_THREADS / 32 ? sv[lane] : -INFINITY;
        c = lane < A_THREADS / 32 ? sc[lane] : INT32_MAX;
        for (int o = 16; o > 0; o >>= 1)
            better_of(v, c, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, c, o));
        if (lane == 0) p.ids[blockIdx.x] = c;
    }
}

} /* namespace */

/* ---- launchers -------------------------------------------------------------------------- */

extern "C" la_status la_cuda_embed(const la_cuda_embed_params *p, cudaStream_t stream, la_err *err) {
    if (p->n_tokens <= 0) return LA_OK;
    return la_cuda_launch(embed_kernel, (unsigned)p->n_tokens, R_THREADS, 0, stream, *p, "embed", err);
}

extern "C" la_status la_cuda_rmsnorm(const la_cuda_rmsnorm_params *p, cudaStream_t stream, la_err *err) {
    if (p->n_rows <= 0) return LA_OK;
    if (p->n_cols <= 0 || p->n_rows > INT32_MAX)
        return la_err_set(err, LA_ERR_INTERNAL, "rmsnorm: bad shape [%lld, %d]", (long long)p->n_rows, p->n_cols);
    if (p->residual) return la_cuda_launch(rmsnorm_kernel<true>, (unsigned)p->n_rows, R_THREADS, 0,
            stream, *p, "add_rmsnorm", err);
    else return la_cuda_launch(rmsnorm_kernel<false>, (unsigned)p->n_rows, R_THREADS, 0, stream, *p, "rmsnorm", err);
}

extern "C" la_status la_cuda_gather_rows(const la_cuda_gather_params *p, cudaStream_t stream, la_err *err) {
    if (p->n_rows <= 0) return LA_OK;
    return la_cuda_launch(gather_kernel, (unsigned)p->n_rows, R_THREADS, 0, stream, *p, "gather_rows", err);
}

extern "C" la_status la_cuda_split_cols(const la_cuda_split_params *p, cudaStream_t stream, la_err *err) {
    if (p->n_parts < 1 || p->n_parts > LA_CUDA_SPLIT_MAX_PARTS || p->n_rows < 0 || p->n_rows > 65535)
        return la_err_set(err, LA_ERR_INTERNAL, "split_cols: %d parts of %d rows", p->n_parts, p->n_rows);
    int64_t total = 0;
    bool vec = ((uintptr_t)p->x & 15) == 0;
    for (int i = 0; i < p->n_parts; i++) {
        if (p->n_cols[i] <= 0 || !p->out[i])
            return la_err_set(err, LA_ERR_INTERNAL, "split_cols: part %d of %d columns", i, p->n_cols[i]);
        total += p->n_cols[i];
        vec = vec && p->n_cols[i] % 8 == 0 && ((uintptr_t)p->out[i] & 15) == 0;
    }
    if (p->n_rows == 0) return LA_OK;
    const int64_t units = vec ? total / 8 : total;
    const dim3 grid((unsigned)((units + R_THREADS - 1) / R_THREADS), (unsigned)p->n_rows);
    if (vec) return la_cuda_launch(split_kernel<8>, grid, R_THREADS, 0, stream, *p, "split_cols", err);
    else return la_cuda_launch(split_kernel<1>, grid, R_THREADS, 0, stream, *p, "split_cols", err);
}

extern "C" la_status la_cuda_argmax(const la_cuda_argmax_params *p, cudaStream_t stream, la_err *err) {
    if (p->n_cols <= 0 || p->n_rows < 0 || p->n_rows > INT32_MAX)
        return la_err_set(err, LA_ERR_INTERNAL, "argmax: bad shape [%d, %d]", p->n_rows, p->n_cols);
    if (p->n_rows == 0) return LA_OK;
    return la_cuda_launch(argmax_kernel, (unsigned)p->n_rows, A_THREADS, 0, stream, *p, "argmax", err);
}
