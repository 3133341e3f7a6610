#include "base/threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/err.h"

/* Workers and the caller spin for a short while before they sleep: the operations of a
 * decode step come back to back, tens of microseconds apart, and a futex wake-up costs
 * about as much as the work (perf: finish_task_switch and the wake-ups were 8% of a
 * decode step of the bundled model). */
#define SPIN_NS 50000

struct la_threadpool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    _Atomic uint64_t generation; /* bumped for each parallel_for (release: the job is set) */
    _Atomic int n_pending;       /* workers still running the current job */
    int n_sleeping;              /* workers waiting on work_cv (under mu) */
    _Atomic int shutdown;
    la_parallel_fn fn;
    void *ctx;
    int64_t n, grain;
    _Atomic int64_t next; /* the first index no worker has taken yet */
};

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One round of a spin: a pause for the first iterations, then sched_yield, so a spinning
 * thread on a busy machine (more runnable threads than cores) hands its core to the thread
 * whose work it waits for. */
static inline void cpu_relax(unsigned i) {
    if (i < 256) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        sched_yield();
    }
}

/* Take chunks of `grain` indices until none is left: a worker slowed down (another process
 * on its core, a cache miss storm) leaves its share to the others instead of holding
 * everyone at the end of the loop. */
static void run_chunk(la_threadpool *tp, int worker_id) {
    const int64_t n = tp->n, grain = tp->grain;
    for (;;) {
        int64_t begin = atomic_fetch_add_explicit(&tp->next, grain, memory_order_relaxed);
        if (begin >= n) return;
        tp->fn(tp->ctx, begin, begin + grain < n ? begin + grain : n, worker_id);
    }
}

typedef struct {
    la_threadpool *tp;
    int worker_id;
} worker_arg;

/* Wait until the generation differs from seen (spin, then sleep); false on shutdown. */
static bool wait_work(la_threadpool *tp, uint64_t seen) {
    uint64_t t0 = 0;
    for (unsigned i = 0;; i++) {
        if (atomic_load_explicit(&tp->generation, memory_order_acquire) != seen) return true;
        if (atomic_load_explicit(&tp->shutdown, memory_order_relaxed)) return false;
        if ((i & 63) == 63) {
            uint64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) break;
        }
        cpu_relax(i);
    }
    pthread_mutex_lock(&tp->mu);
    tp->n_sleeping++;
    while (!atomic_load(&tp->shutdown) && atomic_load(&tp->generation) == seen) pthread_cond_wait(&tp->work_cv, &tp->mu);
    tp->n_sleeping--;
    bool go = !atomic_load(&tp->shutdown);
    pthread_mutex_unlock(&tp->mu);
    return go;
}

static void *worker_main(void *p) {
    worker_arg a = *(worker_arg *)p;
    free(p);
    la_threadpool *tp = a.tp;
    uint64_t seen = 0;
    while (wait_work(tp, seen)) {
        seen = atomic_load_explicit(&tp->generation, memory_order_acquire);
        run_chunk(tp, a.worker_id);
        if (atomic_fetch_sub_explicit(&tp->n_pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu); /* the caller may sleep on done_cv */
            pthread_cond_signal(&tp->done_cv);
            pthread_mutex_unlock(&tp->mu);
        }
    }
    return NULL;
}

/* One integer from a sysfs file; -1 when it cannot be read. */
static long read_long(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long v = -1;
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

/* The CPUs this process may run on (taskset, a container's cpuset) into a set it allocates
 * (*size bytes; CPU_FREE it), *n their count; NULL when the kernel does not say. The set is
 * sized for every configured CPU and grown while the kernel's mask is wider (EINVAL): a fixed
 * cpu_set_t holds 1024 CPUs, and the call fails on larger hosts. */
static cpu_set_t *allowed_cpus(size_t *size, long *n) {
    long conf = sysconf(_SC_NPROCESSORS_CONF);
    int bits = conf > CPU_SETSIZE ? (int)conf : CPU_SETSIZE;
    for (int tries = 0; tries < 8; tries++, bits *= 2) {
        cpu_set_t *set = CPU_ALLOC(bits);
        if (!set) return NULL;
        *size = CPU_ALLOC_SIZE(bits);
        if (sched_getaffinity(0, *size, set) == 0) {
            if ((*n = CPU_COUNT_S(*size, set)) > 0) return set;
            CPU_FREE(set);
            return NULL;
        }
        const int e = errno;
        CPU_FREE(set);
        if (e != EINVAL) return NULL;
    }
    return NULL;
}

int la_physical_cores(void) {
    size_t size = 0;
    long n_cpus = 0;
    cpu_set_t *allowed = allowed_cpus(&size, &n_cpus);
    if (!allowed) { /* every CPU online */
        n_cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (n_cpus < 1) return 1;
        allowed = CPU_ALLOC((int)n_cpus);
        if (!allowed) return (int)n_cpus;
        size = CPU_ALLOC_SIZE((int)n_cpus);
        CPU_ZERO_S(size, allowed);
        for (long cpu = 0; cpu < n_cpus; cpu++) CPU_SET_S((size_t)cpu, size, allowed);
    }
    long *seen = malloc(sizeof(long) * (size_t)n_cpus);
    if (!seen) {
        CPU_FREE(allowed);
        return (int)n_cpus;
    }
    int n_cores = 0;
    for (long cpu = 0; cpu < (long)(size * 8); cpu++) {
        if (!CPU_ISSET_S((size_t)cpu, size, allowed)) continue;
        char path[128];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/core_id", cpu);
        long core = read_long(path);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id", cpu);
        long pkg = read_long(path);
        if (core < 0 || pkg < 0) continue;
        long key = pkg * 65536 + core;
        int i = 0;
        while (i < n_cores && seen[i] != key) i++;
        if (i == n_cores && n_cores < n_cpus) seen[n_cores++] = key;
    }
    free(seen);
    CPU_FREE(allowed);
    return n_cores > 0 && n_cores <= n_cpus ? n_cores : (int)n_cpus;
}

la_status la_threadpool_create(int n_threads, la_threadpool **out, la_err *err) {
    if (n_threads <= 0) n_threads = la_physical_cores();
    la_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return la_err_set(err, LA_ERR_NO_MEMORY, "thread pool: out of memory");
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->work_cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!tp->threads) {
        free(tp);
        return la_err_set(err, LA_ERR_NO_MEMORY, "thread pool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) {
            tp->n_threads = i;
            la_threadpool_destroy(tp);
            return la_err_set(err, LA_ERR_NO_MEMORY, "thread pool: out of memory");
        }
        a->tp = tp;
        a->worker_id = i;
        if (pthread_create(&tp->threads[i], NULL, worker_main, a) != 0) {
            free(a);
            tp->n_threads = i;
            la_threadpool_destroy(tp);
            return la_err_set(err, LA_ERR_INTERNAL, "thread pool: pthread_create failed");
        }
    }
    *out = tp;
    return LA_OK;
}

void la_threadpool_destroy(la_threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->shutdown, 1);
    pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->work_cv);
    pthread_cond_destroy(&tp->done_cv);
    free(tp->threads);
    free(tp);
}

int la_threadpool_size(const la_threadpool *tp) { return tp ? tp->n_threads : 1; }

void la_parallel_for(la_threadpool *tp, int64_t n, la_parallel_fn fn, void *ctx) {
    if (n <= 0) return;
    if (!tp || tp->n_threads == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n = n;
    tp->grain = n / (8 * (int64_t)tp->n_threads); /* eight chunks a worker */
    if (tp->grain < 1) tp->grain = 1;
    atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->n_pending, tp->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_release);
    pthread_mutex_lock(&tp->mu); /* wake the sleepers (a worker checks the generation under mu) */
    if (tp->n_sleeping > 0) pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mu);
    run_chunk(tp, 0);
    uint64_t t0 = now_ns();
    for (unsigned i = 0; atomic_load_explicit(&tp->n_pending, memory_order_acquire) > 0; i++) {
        if ((i & 63) == 63 && now_ns() - t0 > SPIN_NS) {
            pthread_mutex_lock(&tp->mu);
            while (atomic_load_explicit(&tp->n_pending, memory_order_acquire) > 0)
                pthread_cond_wait(&tp->done_cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
            break;
        }
        cpu_relax(i);
    }
}
