/* The CUDA backend (backend/backend.h): bf16 weights, activations and paged KV cache in
 * device memory, cuBLAS for the weight GEMMs (bf16 in, f32 accumulate), our own kernels
 * for the rest (kernels/; their C interface and the KV pool layout: cuda_kernels.h). The
 * implementation is split by what the code does: cuda_internal.h lists the files; the
 * hooks for tests and benchmarks are in cuda_hooks.h.
 *
 * Everything runs in order on one CUDA stream owned by the backend; the host waits only
 * in to_host, kv_read_slot, load_weights and kv_alloc. Not thread-safe: one engine thread.
 * With graphs on (the default; la_cuda_graphs_enable, LA_CUDA_GRAPHS), the operations of a decode
 * step are recorded and run at to_host, as one replay of a cached CUDA graph where one
 * matches; a launch error of such a step is then reported by to_host.
 *
 * Limits (checked, LA_ERR_UNSUPPORTED): head_dim a multiple of 8 and at most 128;
 * block_size a multiple of 16 (each 16-key group of an attention tile lies in one block);
 * positions (and lazy offsets) below 2^21; at most 65535 prefill tiles per step (a tile:
 * up to 256 query rows of one sequence: 64 tokens x 4 heads for Llama-3 in the
 * warp-specialized attn_prefill kernel, 192 at head_dim 64, 128 rows in the others).
 */
#ifndef LA_BACKEND_CUDA_CUDA_BACKEND_H
#define LA_BACKEND_CUDA_CUDA_BACKEND_H

#include "backend/backend.h"

/* Create a CUDA backend on the current device (device 0 unless the caller chose another
 * with cudaSetDevice). Caller owns *out; free with la_backend_destroy().
 * Programmatic dependent launch (every kernel's launch overlapping the tail of the one
 * before, cuda_backend.c) is on where the device is compute capability 9.0+ and the build
 * carries sm_90 code, unless LA_CUDA_PDL=0; it is one setting for the process, and the
 * latest create sets it.
 * Errors: LA_ERR_UNSUPPORTED (no CUDA device or driver), LA_ERR_BACKEND (stream, cuBLAS
 * handle), LA_ERR_NO_MEMORY, LA_ERR_INVALID_ARG (an environment switch with a value it does
 * not take: LA_CUDA_GRAPHS, LA_CUDA_PDL, LA_CUDA_FUSED_GEMM, LA_ATTN_PREFILL,
 * LA_ATTN_SPLIT_CTAS, LA_ATTN_DECODE_MIN_SPLIT). */
la_status la_cuda_backend_create(la_backend **out, la_err *err);

#endif
