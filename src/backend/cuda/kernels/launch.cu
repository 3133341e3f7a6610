/* What every launcher shares: the programmatic-dependent-launch switch of la_cuda_launch
 * (cuda_common.cuh), one flag for the process, written at backend create (before any
 * launch) and read at every launch; and the attention launchers' geometry check. */
#include "backend/cuda/kernels/cuda_common.cuh"

static bool g_pdl_on = false;

extern "C" void la_cuda_pdl_set(bool on) { g_pdl_on = on; }

extern "C" bool la_cuda_pdl_on(void) { return g_pdl_on; }

/* Built with every other kernel of the backend, so its attributes tell which code the
 * device runs them from. */
__global__ void pdl_probe_kernel() {}

extern "C" bool la_cuda_pdl_supported(void) {
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, pdl_probe_kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    /* griddepcontrol is compiled in from PTX 9.0 (sm_90) on: a build carrying only older PTX,
     * JIT-compiled for a 9.0 device, has the waits compiled out */
    return a.ptxVersion >= 90 && a.binaryVersion >= 90;
}

extern "C" la_status la_cuda_attn_check(const la_cuda_attn_params *p, const char *kernel, la_err *err) {
    const int hd = p->head_dim;
    if (hd <= 0 || hd % 8 != 0 || hd > LA_ATTN_MAX_HEAD_DIM)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "%s: head_dim %d (need a multiple of 8, <= %d)",
                          kernel, hd, LA_ATTN_MAX_HEAD_DIM);
    if (p->block_size % 16 != 0 || p->heads_per_cta < 1 ||
        p->heads_per_cta > LA_ATTN_MAX_HEADS_PER_CTA || p->n_kv_heads < 1 ||
        p->n_heads % p->n_kv_heads != 0 ||
        (p->n_heads / p->n_kv_heads) != p->heads_per_cta * p->n_head_chunks)
        return la_err_set(err, LA_ERR_INTERNAL,
                          "%s: bad geometry (block_size %d, heads %d/%d, heads_per_cta %d x %d)",
                          kernel, p->block_size, p->n_heads, p->n_kv_heads, p->heads_per_cta,
                          p->n_head_chunks);
    return LA_OK;
}
