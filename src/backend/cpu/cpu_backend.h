/* The CPU backend: f32 activations in host memory; weights in f32, bf16 or f16
 * (la_backend.weight_dtype), the KV cache in f32 or bf16 (la_backend.kv_dtype); our vector
 * kernels (cpu_kernels.h) for decode products and attention, OpenBLAS for prefill products,
 * all split across one thread pool. */
#ifndef LA_BACKEND_CPU_BACKEND_H
#define LA_BACKEND_CPU_BACKEND_H

#include "backend/backend.h"

/* Create a CPU backend with n_threads workers (<= 0: all online CPUs).
 * Caller owns *out; free with la_backend_destroy(). Errors: LA_ERR_NO_MEMORY. */
la_status la_cpu_backend_create(int n_threads, la_backend **out, la_err *err);

/* The kernel table a CPU backend runs ("avx512", "avx2", "portable"); NULL for another
 * backend. Static storage. */
const char *la_cpu_backend_isa(const la_backend *be);

#endif
