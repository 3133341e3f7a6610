#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#include "base/err.h"
#ifdef LA_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

la_status la_backend_create(la_device device, int n_threads, la_backend **out, la_err *err) {
    switch (device) {
    case LA_DEVICE_CPU: return la_cpu_backend_create(n_threads, out, err);
    case LA_DEVICE_CUDA:
#ifdef LA_HAVE_CUDA
        return la_cuda_backend_create(out, err);
#else
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "device cuda: this build has no CUDA backend (nvcc was not found)");
#endif
    }
    return la_err_set(err, LA_ERR_INVALID_ARG, "unknown device %d", (int)device);
}

void la_backend_destroy(la_backend *be) {
    if (be) be->ops->destroy(be);
}
