/* Weight conversion and initialisation on the device.
 *
 * convert_to_bf16  dst = bf16(src) for an F32, F16 or BF16 source (round to nearest even,
 *                  NaN kept quiet: the same rounding as la_f32_to_bf16 on the host); the
 *                  checkpoint's bytes are uploaded raw and converted here, so loading a
 *                  16 GB checkpoint costs one pass over PCIe and no host conversion.
 * fill_uniform     dst[i] = lo + (hi - lo) u_i with u_i in [0, 1) from splitmix64(seed, i)
 *                  (24 bits): deterministic for a seed, independent of the launch shape.
 *                  --random-weights uses lo = -hi, hi = 0.02 sqrt(3): std 0.02.
 * fill_const       dst[i] = lo (RMSNorm weights: 1).
 *
 * Shapes: flat [n]. Grid-stride loops. Bytes: 2n written (+ 2 or 4 n read for convert).
 */
#include <cuda_fp16.h>

#include "backend/cuda/kernels/cuda_common.cuh"

extern "C" {
#include "base/dtype.h"
}

namespace {

constexpr int W_THREADS = 256;

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__global__ void convert_kernel(const la_cuda_convert_params p) {
    la_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n; i += stride) {
        float v;
        if (p.src_dtype == LA_DTYPE_F32) v = static_cast<const float *>(p.src)[i];
        else if (p.src_dtype == LA_DTYPE_F16) v = __half2float(static_cast<const __half *>(p.src)[i]);
        else {
            p.dst[i] = static_cast<const la_bf16_t *>(p.src)[i];
            continue;
        }
        p.dst[i] = la_f2bf(v);
    }
}

__global__ void fill_uniform_kernel(const la_cuda_fill_params p) {
    la_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const uint64_t key = splitmix64(p.seed);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n; i += stride) {
        const float u = (float)(splitmix64(key ^ (uint64_t)i) >> 40) * (1.0f / 16777216.0f);
        p.dst[i] = la_f2bf(p.lo + (p.hi - p.lo) * u);
    }
}

__global__ void fill_const_kernel(const la_cuda_fill_params p) {
    la_pdl_enter();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const la_bf16_t v = la_f2bf(p.lo);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n; i += stride) p.dst[i] = v;
}

} /* namespace */

extern "C" la_status la_cuda_convert_to_bf16(const la_cuda_convert_params *p, cudaStream_t stream,
                                             la_err *err) {
    if (p->n <= 0) return LA_OK;
    if (p->src_dtype != LA_DTYPE_F32 && p->src_dtype != LA_DTYPE_F16 && p->src_dtype != LA_DTYPE_BF16)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "convert_to_bf16: dtype %d", p->src_dtype);
    return la_cuda_launch(convert_kernel, la_cuda_blocks(p->n, W_THREADS), W_THREADS, 0,
            stream, *p, "convert_to_bf16", err);
}

extern "C" la_status la_cuda_fill_uniform(const la_cuda_fill_params *p, cudaStream_t stream, la_err *err) {
    if (p->n <= 0) return LA_OK;
    return la_cuda_launch(fill_uniform_kernel, la_cuda_blocks(p->n, W_THREADS), W_THREADS, 0,
            stream, *p, "fill_uniform", err);
}

extern "C" la_status la_cuda_fill_const(const la_cuda_fill_params *p, cudaStream_t stream, la_err *err) {
    if (p->n <= 0) return LA_OK;
    return la_cuda_launch(fill_const_kernel, la_cuda_blocks(p->n, W_THREADS), W_THREADS, 0,
            stream, *p, "fill_const", err);
}
