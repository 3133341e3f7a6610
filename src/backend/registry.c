/* The backend registry: the backends this build has, one row each (device, name, create).
 * This file alone knows them; backend.c and the backends know no other backend, and the
 * engine reaches them only through la_backend_create (backend.h). A new backend adds its
 * row here. */
#include "backend/backend.h"

#include <stddef.h>

#include "backend/cpu/cpu_backend.h"
#include "base/err.h"
#ifdef LA_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

typedef struct backend_entry {
    la_device device;
    const char *name;
    /* NULL: not built; `missing` says why */
    la_status (*create)(int n_threads, la_backend **out, la_err *err);
    const char *missing;
} backend_entry;

#ifdef LA_HAVE_CUDA
/* the CUDA backend runs its work on the GPU: no worker threads to size */
static la_status cuda_create(int n_threads, la_backend **out, la_err *err) {
    (void)n_threads;
    return la_cuda_backend_create(out, err);
}
#endif

static const backend_entry k_backends[] = {
    {LA_DEVICE_CPU, "cpu", la_cpu_backend_create, NULL},
#ifdef LA_HAVE_CUDA
    {LA_DEVICE_CUDA, "cuda", cuda_create, NULL},
#else
    {LA_DEVICE_CUDA, "cuda", NULL, "this build has no CUDA backend (nvcc was not found)"},
#endif
};

la_status la_backend_create(la_device device, int n_threads, la_backend **out, la_err *err) {
    for (size_t i = 0; i < sizeof k_backends / sizeof k_backends[0]; i++) {
        const backend_entry *b = &k_backends[i];
        if (b->device != device) continue;
        if (!b->create) return la_err_set(err, LA_ERR_UNSUPPORTED, "device %s: %s", b->name, b->missing);
        return b->create(n_threads, out, err);
    }
    return la_err_set(err, LA_ERR_INVALID_ARG, "unknown device %d", (int)device);
}
