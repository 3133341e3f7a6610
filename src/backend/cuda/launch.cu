/* The programmatic-dependent-launch switch of la_cuda_launch (cuda_common.cuh): one flag for
 * the process, written at backend create (before any launch) and read at every launch. */
#include "backend/cuda/cuda_common.cuh"

static bool g_pdl_on = false;

extern "C" void la_cuda_pdl_set(bool on) { g_pdl_on = on; }

extern "C" bool la_cuda_pdl_on(void) { return g_pdl_on; }
