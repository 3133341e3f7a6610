/* Element-wise kernels of the forward pass.
 *
 * add          x += y                              (residual connection)
 * swiglu       x = silu(x) * y = x / (1 + e^-x) * y (HF LlamaMLP: act_fn(gate) * up), in f32,
 *              rounded to bf16 once
 * swiglu_stacked  out = silu(gate) * up, gate and up the two column halves of each row
 *              of x (one GEMM by [W_gate; W_up]: no copy into separate gate / up)
 * bf16_to_f32  out = (float)x                      (to_host of logits and activations)
 * fill_bias    x[r][c] = bias[c]                   (Qwen2's q/k/v_proj bias, which the GEMM then
 *              accumulates into; one element a thread, grid-stride)
 *
 * Shapes: flat [n]. Grid-stride loops over 16-byte vectors of 8 elements (acts come from
 * cudaMalloc, 256-byte aligned), the n % 8 tail element by element. Bytes: 6 n (add,
 * swiglu), 6 n (bf16_to_f32: 2 read + 4 written); FLOPs ~n (add), ~5n (swiglu).
 */
#include "backend/cuda/kernels/cuda_common.cuh"

namespace {

constexpr int E_THREADS = 256;

__device__ __forceinline__ float lo_f(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_f(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

template <bool SWIGLU> __global__ void __launch_bounds__(E_THREADS) binary_kernel(const la_cuda_binary_params p) {
    la_pdl_enter();
    const int64_t n_vec = p.n / 8;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    uint4 *x = reinterpret_cast<uint4 *>(p.x);
    const uint4 *y = reinterpret_cast<const uint4 *>(p.y);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_vec; i += stride) {
        const uint4 a = x[i], b = y[i];
        const uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
        uint32_t o[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[e] = SWIGLU ? la_pack_bf16x2(silu_mul(lo_f(av[e]), lo_f(bv[e])), silu_mul(hi_f(av[e]), hi_f(bv[e])))
                          : la_pack_bf16x2(lo_f(av[e]) + lo_f(bv[e]), hi_f(av[e]) + hi_f(bv[e]));
        x[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
    for (int64_t i = n_vec * 8 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n; i += stride) {
        const float a = la_bf2f(p.x[i]), b = la_bf2f(p.y[i]);
        p.x[i] = la_f2bf(SWIGLU ? silu_mul(a, b) : a + b);
    }
}

/* One thread per 8 output columns (VEC 8) or per column: row i / n_units of out. */
template <int VEC>
__global__ void __launch_bounds__(E_THREADS) swiglu_stacked_kernel(const la_cuda_swiglu_stacked_params p) {
    la_pdl_enter();
    const int64_t units = p.n_cols / VEC, n = p.n_rows * units;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t row = i / units, u = i % units;
        const la_bf16_t *g = p.x + row * 2 * p.n_cols + u * VEC, *up = g + p.n_cols;
        la_bf16_t *o = p.out + row * p.n_cols + u * VEC;
        if (VEC == 8) {
            const uint4 a = *reinterpret_cast<const uint4 *>(g), b = *reinterpret_cast<const uint4 *>(up);
            const uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
            uint32_t r[4];
#pragma unroll
            for (int e = 0; e < 4; e++)
                r[e] = la_pack_bf16x2(silu_mul(lo_f(av[e]), lo_f(bv[e])), silu_mul(hi_f(av[e]), hi_f(bv[e])));
            *reinterpret_cast<uint4 *>(o) = make_uint4(r[0], r[1], r[2], r[3]);
        } else {
            *o = la_f2bf(silu_mul(la_bf2f(*g), la_bf2f(*up)));
        }
    }
}

__global__ void __launch_bounds__(E_THREADS) bias_kernel(const la_cuda_bias_params p) {
    la_pdl_enter();
    const int64_t n = p.n_rows * p.n_cols, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
        p.x[i] = p.bias[i % p.n_cols];
}

__global__ void __launch_bounds__(E_THREADS) to_f32_kernel(const la_cuda_to_f32_params p) {
    la_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n; i += stride)
        p.out[i] = la_bf2f(p.x[i]);
}

template <bool SWIGLU>
la_status launch_binary(const la_cuda_binary_params *p, cudaStream_t stream, la_err *err) {
    if (p->n <= 0) return LA_OK;
    return la_cuda_launch(binary_kernel<SWIGLU>, la_cuda_blocks(p->n / 8 + 1, E_THREADS), E_THREADS, 0,
            stream, *p, SWIGLU ? "swiglu" : "add", err);
}

} /* namespace */

extern "C" la_status la_cuda_add(const la_cuda_binary_params *p, cudaStream_t stream, la_err *err) {
    return launch_binary<false>(p, stream, err);
}

extern "C" la_status la_cuda_swiglu(const la_cuda_binary_params *p, cudaStream_t stream, la_err *err) {
    return launch_binary<true>(p, stream, err);
}

extern "C" la_status la_cuda_swiglu_stacked(const la_cuda_swiglu_stacked_params *p, cudaStream_t stream,
                                            la_err *err) {
    if (p->n_rows <= 0) return LA_OK;
    if (p->n_cols <= 0) return la_err_set(err, LA_ERR_INTERNAL, "swiglu_stacked: %d columns", p->n_cols);
    const bool vec = p->n_cols % 8 == 0 && ((uintptr_t)p->x & 15) == 0 && ((uintptr_t)p->out & 15) == 0;
    const int64_t n = p->n_rows * (vec ? p->n_cols / 8 : p->n_cols);
    if (vec) return la_cuda_launch(swiglu_stacked_kernel<8>, la_cuda_blocks(n, E_THREADS), E_THREADS, 0,
            stream, *p, "swiglu_stacked", err);
    else return la_cuda_launch(swiglu_stacked_kernel<1>, la_cuda_blocks(n, E_THREADS), E_THREADS, 0,
            stream, *p, "swiglu_stacked", err);
}

extern "C" la_status la_cuda_fill_bias(const la_cuda_bias_params *p, cudaStream_t stream, la_err *err) {
    if (p->n_rows <= 0) return LA_OK;
    if (p->n_cols <= 0) return la_err_set(err, LA_ERR_INTERNAL, "fill_bias: %d columns", p->n_cols);
    return la_cuda_launch(bias_kernel, la_cuda_blocks(p->n_rows * p->n_cols, E_THREADS), E_THREADS, 0, stream, *p,
                          "fill_bias", err);
}

extern "C" la_status la_cuda_bf16_to_f32(const la_cuda_to_f32_params *p, cudaStream_t stream, la_err *err) {
    if (p->n <= 0) return LA_OK;
    return la_cuda_launch(to_f32_kernel, la_cuda_blocks(p->n, E_THREADS), E_THREADS, 0, stream, *p, "bf16_to_f32", err);
}
