/* A fixed pool of worker threads running parallel-for loops (pthreads). */
#ifndef LA_BASE_THREADPOOL_H
#define LA_BASE_THREADPOOL_H

#include <stdint.h>
#include "lazyattn/status.h"

typedef struct la_threadpool la_threadpool;

/* Work item: called with a half-open range [begin, end) of task indices and the
 * worker index (0..n_threads-1). */
typedef void (*la_parallel_fn)(void *ctx, int64_t begin, int64_t end, int worker_id);

/* Create a pool of n_threads workers (the calling thread counts as one; n_threads <= 0
 * means la_physical_cores()). Caller owns it; free with la_threadpool_destroy().
 * Errors: LA_ERR_NO_MEMORY, LA_ERR_INTERNAL (pthread_create failed). */
la_status la_threadpool_create(int n_threads, la_threadpool **out, la_err *err);
void la_threadpool_destroy(la_threadpool *tp);
int la_threadpool_size(const la_threadpool *tp);

/* Physical cores of the CPUs this process may run on (its affinity mask: taskset, a
 * container's cpuset; distinct (package, core) pairs in /sys/devices/system/cpu/cpuN/topology;
 * SMT siblings share a core's vector units, so a second thread on one core slows these
 * kernels down): the thread pools' default. The allowed CPU count where the topology cannot
 * be read; at least 1. */
int la_physical_cores(void);

/* Run fn over [0, n) and wait: the workers take contiguous chunks of about n / (8 workers)
 * indices from a shared counter until none is left, so fn may be called several times per
 * worker, with ranges in no particular order. tp may be NULL (runs inline, one call). Not
 * reentrant: one parallel_for at a time per pool. */
void la_parallel_for(la_threadpool *tp, int64_t n, la_parallel_fn fn, void *ctx);

#endif
