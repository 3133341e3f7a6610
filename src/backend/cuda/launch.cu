/* The programmatic-dependent-launch switch of la_cuda_launch (cuda_common.cuh): one flag for
 * the process, written at backend create (before any launch) and read at every launch. */
#include "backend/cuda/cuda_common.cuh"

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
