/* Small-batch GEMM for decode steps: y = x W^T (+ bias) (+ y), x of 1 to
 * LA_CUDA_GEMV_MAX_ROWS rows (cuda_kernels.h).
 *
 * At a few rows the product is bound by reading W once (2 n_out n_in bytes); cuBLAS'
 * kernels for these shapes reach 2.7-3.0 TB/s on an H100/H200 at n_out <= 4096 (GPU_NOTES,
 * "Where a batch-1 decode step goes"), and their launches cannot overlap the kernel before
 * them. Here each warp owns one row of W: its lanes stride over the row's 16-byte chunks
 * (8 bf16), GEMV_BATCH chunks a lane in flight and the next batch loaded while this one is
 * multiplied; the first batch is loaded before the PDL wait (la_pdl_wait), so with
 * programmatic dependent launch the weight stream starts during the previous kernel's tail.
 * x is read after the wait through the read-only path (it is the previous kernel's output,
 * complete once the wait returns), W with L1::no_allocate so that it does not evict x.
 *
 * Accumulation: per row m of x, two f32 partial sums a lane (even and odd elements of each
 * chunk), added, then summed over the warp's lanes by a butterfly; the bias and the old y
 * are added to that sum in f32 and the result rounded to bf16 once. The order depends on
 * n_in only, never on n_out or the row's place in W.
 *
 * Grid: ceil(n_out / GEMV_WARPS) CTAs of GEMV_WARPS warps. Bytes: 2 n_out n_in (W) + the
 * x rows from L1/L2 + 2 n_rows n_out written. FLOPs: 2 n_rows n_out n_in.
 */
#include "backend/cuda/kernels/cuda_common.cuh"

namespace {

constexpr int GEMV_WARPS = 4;
constexpr int GEMV_BATCH = 8; /* 16-byte chunks a lane loads at once: 4 KiB of W a warp */

/* 16 bytes of W, streamed: not kept in L1 (x is). */
__device__ __forceinline__ uint4 ld_stream(const uint4 *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* Chunks [c0 + j * 32 + lane] of the row, j < GEMV_BATCH; zeros past n_chunks. */
__device__ __forceinline__ void load_batch(uint4 (&dst)[GEMV_BATCH], const uint4 *row, int32_t c0, int32_t lane,
                                           int32_t n_chunks) {
#pragma unroll
    for (int j = 0; j < GEMV_BATCH; j++) {
        const int32_t c = c0 + j * 32 + lane;
        dst[j] = c < n_chunks ? ld_stream(row + c) : make_uint4(0, 0, 0, 0);
    }
}

__device__ __forceinline__ float lo_f(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi_f(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }

/* a += even elements' products, b += odd ones' (8 bf16 of w and x). */
__device__ __forceinline__ void dot8(const uint4 w, const uint4 x, float &a, float &b) {
    a = fmaf(lo_f(w.x), lo_f(x.x), a);
    b = fmaf(hi_f(w.x), hi_f(x.x), b);
    a = fmaf(lo_f(w.y), lo_f(x.y), a);
    b = fmaf(hi_f(w.y), hi_f(x.y), b);
    a = fmaf(lo_f(w.z), lo_f(x.z), a);
    b = fmaf(hi_f(w.z), hi_f(x.z), b);
    a = fmaf(lo_f(w.w), lo_f(x.w), a);
    b = fmaf(hi_f(w.w), hi_f(x.w), b);
}

template <int M> __global__ void __launch_bounds__(GEMV_WARPS * 32) gemv_kernel(const la_cuda_gemv_params p) {
    la_pdl_trigger();
    const int32_t lane = threadIdx.x & 31;
    const int32_t n = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const int32_t n_chunks = p.n_in / 8;
    /* a warp past n_out streams row 0 again rather than branch around the wait */
    const uint4 *row = reinterpret_cast<const uint4 *>(p.w) + (int64_t)(n < p.n_out ? n : 0) * n_chunks;
    uint4 cur[GEMV_BATCH];
    load_batch(cur, row, 0, lane, n_chunks);
    la_pdl_wait();

    const uint4 *x = reinterpret_cast<const uint4 *>(p.x);
    float a[M], b[M];
#pragma unroll
    for (int m = 0; m < M; m++) a[m] = b[m] = 0.f;
    for (int32_t c0 = 0; c0 < n_chunks; c0 += 32 * GEMV_BATCH) {
        uint4 next[GEMV_BATCH];
        const bool more = c0 + 32 * GEMV_BATCH < n_chunks;
        if (more) load_batch(next, row, c0 + 32 * GEMV_BATCH, lane, n_chunks);
#pragma unroll
        for (int j = 0; j < GEMV_BATCH; j++) {
            const int32_t c = c0 + j * 32 + lane;
            if (c < n_chunks) {
#pragma unroll
                for (int m = 0; m < M; m++) dot8(cur[j], __ldg(x + (int64_t)m * n_chunks + c), a[m], b[m]);
            }
        }
        if (more) {
#pragma unroll
            for (int j = 0; j < GEMV_BATCH; j++) cur[j] = next[j];
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++) {
        float s = a[m] + b[m];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        a[m] = s;
    }
    if (lane != 0 || n >= p.n_out) return;
    const float bias = p.bias ? la_bf2f(p.bias[n]) : 0.f;
#pragma unroll
    for (int m = 0; m < M; m++) {
        la_bf16_t *y = p.y + (int64_t)m * p.n_out + n;
        float v = a[m] + bias;
        if (p.accumulate) v += la_bf2f(*y);
        *y = la_f2bf(v);
    }
}

template <int M> la_status launch(const la_cuda_gemv_params *p, cudaStream_t stream, la_err *err) {
    const unsigned grid = (unsigned)((p->n_out + GEMV_WARPS - 1) / GEMV_WARPS);
    return la_cuda_launch(gemv_kernel<M>, grid, GEMV_WARPS * 32, 0, stream, *p, "gemv", err);
}

} /* namespace */

extern "C" bool la_cuda_gemv_fits(const void *x, const void *w, int64_t n_rows, int64_t n_in, int64_t n_out) {
    return n_rows >= 1 && n_rows <= LA_CUDA_GEMV_MAX_ROWS && n_in > 0 && n_in % 8 == 0 && n_in <= INT32_MAX &&
           n_out > 0 && n_out <= INT32_MAX && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w & 15) == 0;
}

extern "C" la_status la_cuda_gemv(const la_cuda_gemv_params *p, cudaStream_t stream, la_err *err) {
    if (!la_cuda_gemv_fits(p->x, p->w, p->n_rows, p->n_in, p->n_out))
        return la_err_set(err, LA_ERR_INTERNAL, "gemv: %d rows of %d into %d (need 1 to %d rows, a multiple of 8 "
                          "columns, 16-byte aligned x and W)", p->n_rows, p->n_in, p->n_out, LA_CUDA_GEMV_MAX_ROWS);
    switch (p->n_rows) {
    case 1: return launch<1>(p, stream, err);
    case 2: return launch<2>(p, stream, err);
    case 3: return launch<3>(p, stream, err);
    case 4: return launch<4>(p, stream, err);
    case 5: return launch<5>(p, stream, err);
    case 6: return launch<6>(p, stream, err);
    case 7: return launch<7>(p, stream, err);
    default: return launch<8>(p, stream, err);
    }
}
