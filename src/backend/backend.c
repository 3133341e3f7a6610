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

void la_weight_shape(const la_model_config *m, la_weight_kind k, int64_t *n_out, int64_t *n_in) {
    int64_t d = m->hidden_size, qd = (int64_t)m->n_heads * m->head_dim,
            kvd = (int64_t)m->n_kv_heads * m->head_dim, f = m->intermediate_size;
    int64_t o = 0, i = 0;
    switch (k) {
    case LA_W_Q: o = qd, i = d; break;
    case LA_W_K:
    case LA_W_V: o = kvd, i = d; break;
    case LA_W_O: o = d, i = qd; break;
    case LA_W_GATE:
    case LA_W_UP: o = f, i = d; break;
    case LA_W_DOWN: o = d, i = f; break;
    case LA_W_LM_HEAD: o = m->vocab_size, i = d; break;
    case LA_W_ATTN_NORM:
    case LA_W_MLP_NORM:
    case LA_W_FINAL_NORM: o = 1, i = d; break;
    default: break;
    }
    *n_out = o;
    *n_in = i;
}
