/* The CPU backend: f32 weights and activations in host memory, GEMMs through OpenBLAS
 * (single-threaded calls, split across our own thread pool), our own loops for the rest. */
#ifndef LA_BACKEND_CPU_BACKEND_H
#define LA_BACKEND_CPU_BACKEND_H

#include "backend/backend.h"

/* Create a CPU backend with n_threads workers (<= 0: all online CPUs).
 * Caller owns *out; free with la_backend_destroy(). Errors: LA_ERR_NO_MEMORY. */
la_status la_cpu_backend_create(int n_threads, la_backend **out, la_err *err);

#endif
