/* Device helpers shared by the CUDA backend's kernel files (module-private): bf16 bit
 * conversions, the RoPE table lookup, cp.async / ldmatrix / mma.sync wrappers, and the
 * launch check every launcher ends with. */
#ifndef LA_BACKEND_CUDA_KERNELS_CUDA_COMMON_CUH
#define LA_BACKEND_CUDA_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "backend/cuda/cuda_kernels.h"
#include "base/err.h"
}

/* Turn a failed launch into LA_ERR_BACKEND naming the kernel. */
static inline la_status la_cuda_launched(const char *what, la_err *err) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return la_err_set(err, LA_ERR_BACKEND, "%s: launch failed: %s", what, cudaGetErrorString(e));
    return LA_OK;
}

/* Launch kernel(params) on `stream` (every kernel of the backend takes one params struct),
 * with programmatic dependent launch (PDL: cudaLaunchAttributeProgrammaticStreamSerialization;
 * CUDA C++ Programming Guide, "Programmatic Dependent Launch and Synchronization") where
 * la_cuda_pdl_on(): the kernel may then be scheduled while the kernel before it in the
 * stream still runs, so its launch and first instructions overlap that kernel's tail.
 * The rules every kernel launched here keeps:
 *   - every thread calls la_pdl_wait() before it reads anything a kernel wrote and before
 *     it writes any device memory, and no CTA exits before its wait: a wait covers the
 *     grid just before it only, and it covers every earlier grid because that grid's CTAs
 *     all waited too;
 *   - since every kernel triggers at its top (la_pdl_trigger), the code before the wait
 *     may run beside any number of earlier kernels still in flight: it may read only what
 *     the host copied in (cudaMemcpyAsync is a full dependency) and write only shared
 *     memory and registers. Two exceptions:
 *       - the RoPE table: la_cu_ensure_rope synchronises the stream before publishing it;
 *       - in attn_decode, the keys of pool blocks that no token of this step writes
 *         (la_cuda_attn_params.kv_written, from the step's slots). Every other write to
 *         the pool is done before the step's first kernel starts. Earlier steps end
 *         before batch_begin's metadata copy. Block copies are flushed before that copy;
 *         one flushed later sets kv_written to NULL for the rest of the step. Store
 *         imports run on the copy stream, and the engine puts an imported block in a
 *         batch only after kv_copy_poll saw its event complete.
 * la_pdl_enter() at a kernel's top does both halves at once. LA_ERR_BACKEND naming `what`
 * when the launch fails. */
template <typename P>
static inline la_status la_cuda_launch(void (*kernel)(P), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                       const P &params, const char *what, la_err *err) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = la_cuda_pdl_on() ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, params);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return la_err_set(err, LA_ERR_BACKEND, "%s: launch failed: %s", what, cudaGetErrorString(e));
    }
    return la_cuda_launched(what, err);
}

/* PDL's two halves (PTX ISA griddepcontrol, sm_90; no-ops below it and in a kernel launched
 * without the attribute). la_pdl_trigger: the next kernel in the stream may be scheduled
 * once every CTA of this grid has called it or exited (it still waits in its own
 * la_pdl_wait for this grid to finish). la_pdl_wait: block until every earlier grid in the
 * stream has completed and its memory operations are visible. */
__device__ __forceinline__ void la_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void la_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
/* The top of a kernel that reads its predecessor's output from the start: both halves. */
__device__ __forceinline__ void la_pdl_enter() {
    la_pdl_trigger();
    la_pdl_wait();
}

/* Allow `kernel` `bytes` of dynamic shared memory (cudaFuncAttributeMaxDynamicSharedMemorySize,
 * needed above 48 KiB), once: *done remembers a success. LA_ERR_BACKEND naming `what`. */
static inline la_status la_cuda_allow_smem(const void *kernel, size_t bytes, bool *done, const char *what,
                                           la_err *err) {
    if (*done) return LA_OK;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess)
        return la_err_set(err, LA_ERR_BACKEND, "%s: %zu bytes of shared memory: %s", what, bytes,
                          cudaGetErrorString(e));
    *done = true;
    return LA_OK;
}

/* Grid size for n items at `per_block` items per block, capped for grid-stride loops. */
static inline unsigned la_cuda_blocks(int64_t n, int per_block) {
    int64_t b = (n + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > 65535LL * 16) b = 65535LL * 16;
    return (unsigned)b;
}

__device__ __forceinline__ float la_bf2f(la_bf16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ la_bf16_t la_f2bf(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

/* Two floats to a packed bf16x2 (lo in the low half, as mma fragments and memory want). */
__device__ __forceinline__ uint32_t la_pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* 2^x with the hardware approximation (2 ulp; 2^-inf = 0), for softmax weights. */
__device__ __forceinline__ float la_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* (cos, sin) of pos * inv_freq[f] from the table; |pos| beyond the table is clamped (the
 * host grows the table to cover every position a batch can use, so only masked pairs,
 * whose scores are discarded, can reach the clamp). */
__device__ __forceinline__ float2 la_rope_cs(const float2 *rope, int32_t rope_len, int32_t half,
                                             int64_t pos, int32_t f) {
    int64_t a = pos < 0 ? -pos : pos;
    if (a >= rope_len) a = rope_len - 1;
    float2 cs = __ldg(rope + a * half + f);
    if (pos < 0) cs.y = -cs.y;
    return cs;
}

/* (cos f, sin f, cos f+1, sin f+1): la_rope_cs of two adjacent frequencies in one 16-byte
 * load (f even; half a multiple of 4, so the pair is 16-byte aligned). */
__device__ __forceinline__ float4 la_rope_cs2(const float2 *rope, int32_t rope_len, int32_t half,
                                              int64_t pos, int32_t f) {
    int64_t a = pos < 0 ? -pos : pos;
    if (a >= rope_len) a = rope_len - 1;
    float4 cs = __ldg(reinterpret_cast<const float4 *>(rope + a * half + f));
    if (pos < 0) {
        cs.y = -cs.y;
        cs.w = -cs.w;
    }
    return cs;
}

/* RoPE (rotate_half) of frequencies f and f + 1 of one head vector: x2 = v[f, f + 1], y2 =
 * v[half + f, half + f + 1] as bf16 pairs, cs = (cos, sin) of both (la_rope_cs2); lo / hi:
 * the rotated pairs for columns f and half + f (rope_kv.cu's formula, per element). */
__device__ __forceinline__ void la_rope_rotate_pair(uint32_t x2, uint32_t y2, float4 cs, uint32_t &lo, uint32_t &hi) {
    const float x0 = __uint_as_float(x2 << 16), x1 = __uint_as_float(x2 & 0xffff0000u);
    const float y0 = __uint_as_float(y2 << 16), y1 = __uint_as_float(y2 & 0xffff0000u);
    lo = la_pack_bf16x2(x0 * cs.x - y0 * cs.y, x1 * cs.z - y1 * cs.w);
    hi = la_pack_bf16x2(y0 * cs.x + x0 * cs.y, y1 * cs.z + x1 * cs.w);
}

/* 4-byte async copy global -> shared (through L1); pred false writes zeros, reads nothing. */
__device__ __forceinline__ void la_cp_async4(void *smem, const void *gmem, bool pred) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = pred ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n)
                 : "memory");
}

/* 16-byte async copy global -> shared at a 32-bit shared-memory address
 * (__cvta_generic_to_shared); pred false writes zeros and reads nothing. */
__device__ __forceinline__ void la_cp_async16_s(uint32_t s, const void *gmem, bool pred) {
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n)
                 : "memory");
}
/* The same at a generic pointer into shared memory. */
__device__ __forceinline__ void la_cp_async16(void *smem, const void *gmem, bool pred) {
    la_cp_async16_s((uint32_t)__cvta_generic_to_shared(smem), gmem, pred);
}
__device__ __forceinline__ void la_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void la_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void la_ldmatrix_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                               uint32_t &r3, const void *smem) {
    unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}

/* The same two loads at a 32-bit shared-memory address (__cvta_generic_to_shared), for
 * kernels that keep per-lane addresses in 32-bit registers. */
__device__ __forceinline__ void la_ldmatrix_x4_s(uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                 uint32_t &r3, uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}
__device__ __forceinline__ void la_ldmatrix_x4_trans_s(uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                       uint32_t &r3, uint32_t a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}

__device__ __forceinline__ void la_ldmatrix_x4_trans(uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                     uint32_t &r3, const void *smem) {
    unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(a));
}

/* d += a b, m16n8k16, bf16 in, f32 accumulate (PTX ISA "mma.sync" fragment layouts). */
__device__ __forceinline__ void la_mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif
