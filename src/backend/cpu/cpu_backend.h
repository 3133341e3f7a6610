/* The CPU backend: f32 activations in host memory; weights in f32, bf16 or f16
 * (la_backend.weight_dtype), the KV cache in f32 or bf16 (la_backend.kv_dtype); our vector
 * kernels (cpu_kernels.h) for decode products and attention, OpenBLAS for prefill products,
 * all split across one thread pool. */
#ifndef LA_BACKEND_CPU_BACKEND_H
#define LA_BACKEND_CPU_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"

/* Create a CPU backend with n_threads workers (<= 0: all online CPUs).
 * Caller owns *out; free with la_backend_destroy(). Errors: LA_ERR_NO_MEMORY. */
la_status la_cpu_backend_create(int n_threads, la_backend **out, la_err *err);

/* The kernel table a CPU backend runs ("avx512", "avx2", "portable"); NULL for another
 * backend. Static storage. */
const char *la_cpu_backend_isa(const la_backend *be);

/* Where a CPU backend's weight products run: x of at most max_rows_16bit rows (bf16 / f16
 * weights) or max_rows_f32 rows (f32 weights), or of at most x_bytes bytes, on our gemm_nt;
 * larger ones on OpenBLAS sgemm, whose core (openblas_get_corename(), OpenBLAS's static
 * string) is blas_core. INT64_MAX: never BLAS. With la_backend.bf16_dot every product runs
 * our gemm_nt_bf16x whatever these say. */
typedef struct la_cpu_gemm_route {
    const char *blas_core;
    bool blas_dynamic; /* OpenBLAS built with DYNAMIC_ARCH (openblas_get_config()): it picks its
                          core at run time, and OPENBLAS_CORETYPE can force one */
    int64_t max_rows_f32, max_rows_16bit, x_bytes;
} la_cpu_gemm_route;
/* Fill *out for a CPU backend; false (nothing written) for another backend. */
bool la_cpu_backend_gemm_route(const la_backend *be, la_cpu_gemm_route *out);

/* Whether OpenBLAS's core `core` (a name of its corename table, any case) has SGEMM kernels
 * without FMA3 (Prescott, Nehalem, Sandybridge, Generic, ...: cpu_backend.c lists them).
 * Under the AVX2 and AVX-512 tables such a BLAS never runs: the backend keeps every product
 * on gemm_nt. NULL and names it does not list (newer cores): false. */
bool la_cpu_blas_core_predates_fma(const char *core);

#endif
