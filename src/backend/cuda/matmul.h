/* x W^T for the CUDA backend (module-private; cuda_backend.c is its only user): bf16 in,
 * bf16 out, f32 accumulation, through cuBLASLt with an algorithm chosen per shape by
 * timing, or through cublasGemmEx (la_cuda_gemm_mode in cuda_backend.h; the algorithm
 * cache and its rules: the top comment of matmul.c).
 *
 * One la_cuda_matmul per backend; it borrows the backend's stream, cuBLAS handle and
 * workspace, and owns a cuBLASLt handle and two timing events. Engine thread only, like
 * the backend; the algorithm cache behind it is shared by every backend of the process
 * (locked).
 */
#ifndef LA_BACKEND_CUDA_MATMUL_H
#define LA_BACKEND_CUDA_MATMUL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/cuda_backend.h"
#include "base/err.h"

typedef struct la_cuda_matmul la_cuda_matmul;

/* One y = x W^T. Row-major throughout:
 *
 *   w       [n_out, n_in] bf16, device (a weight as loaded)
 *   x       [n_rows, n_in] bf16, device
 *   y       [n_rows, n_out] bf16, device; written (distinct from x and w)
 *   w_alt   n_alt other weights of w's shape (the same matrix in other layers), read only
 *           while timing candidate algorithms so that the timed runs stream weights from
 *           memory as the forward pass does instead of finding w in L2; may be empty
 */
typedef struct la_cuda_matmul_args {
    const void *w, *x;
    void *y;
    int64_t n_rows, n_out, n_in;
    const void *const *w_alt;
    int32_t n_alt;
} la_cuda_matmul_args;

/* Caller owns *out; free with la_cuda_matmul_destroy(). stream, blas (already bound to
 * stream and ws) and ws [ws_bytes] are borrowed and must outlive it. Errors:
 * LA_ERR_BACKEND (cuBLASLt handle, events). */
la_status la_cuda_matmul_create(cudaStream_t stream, cublasHandle_t blas, void *ws, size_t ws_bytes,
                                la_cuda_gemm_mode mode, la_cuda_matmul **out, la_err *err);
void la_cuda_matmul_destroy(la_cuda_matmul *m);

/* The caller makes sure no queued or captured work depends on the mode it replaces. */
void la_cuda_matmul_set_mode(la_cuda_matmul *m, la_cuda_gemm_mode mode);
la_cuda_gemm_mode la_cuda_matmul_mode(const la_cuda_matmul *m);

/* Queue y = x W^T on the stream. The first sight of a shape in mode LT (stream not
 * capturing, n_rows <= LA_CUDA_GEMM_TUNE_MAX_ROWS) times the candidates on these operands
 * first (it waits for the stream: never call it inside another capture); y then holds the
 * result of the winner, run last. Errors: LA_ERR_BACKEND (cuBLAS, or a CUDA error met
 * while timing); y is then undefined. */
la_status la_cuda_matmul_run(la_cuda_matmul *m, const la_cuda_matmul_args *a, la_err *err);

void la_cuda_matmul_stats(const la_cuda_matmul *m, la_cuda_gemm_stats *out);

/* The cached shapes of m's device as a JSON array (la_cuda_gemm_algos_json). */
size_t la_cuda_matmul_cache_json(const la_cuda_matmul *m, char *buf, size_t cap);

#endif
