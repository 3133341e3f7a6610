#include "base/threadpool.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/err.h"

struct la_threadpool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    uint64_t generation; /* bumped for each parallel_for */
    int n_pending;       /* workers still running the current job */
    int shutdown;
    la_parallel_fn fn;
    void *ctx;
    int64_t n;
};

static void run_chunk(la_threadpool *tp, int worker_id) {
    int64_t n = tp->n, k = tp->n_threads;
    int64_t begin = n * worker_id / k, end = n * (worker_id + 1) / k;
    if (begin < end) tp->fn(tp->ctx, begin, end, worker_id);
}

typedef struct {
    la_threadpool *tp;
    int worker_id;
} worker_arg;

static void *worker_main(void *p) {
    worker_arg a = *(worker_arg *)p;
    free(p);
    la_threadpool *tp = a.tp;
    uint64_t seen = 0;
    pthread_mutex_lock(&tp->mu);
    for (;;) {
        while (!tp->shutdown && tp->generation == seen) pthread_cond_wait(&tp->work_cv, &tp->mu);
        if (tp->shutdown) break;
        seen = tp->generation;
        pthread_mutex_unlock(&tp->mu);
        run_chunk(tp, a.worker_id);
        pthread_mutex_lock(&tp->mu);
        if (--tp->n_pending == 0) pthread_cond_signal(&tp->done_cv);
    }
    pthread_mutex_unlock(&tp->mu);
    return NULL;
}

la_status la_threadpool_create(int n_threads, la_threadpool **out, la_err *err) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
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
    tp->shutdown = 1;
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
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n = n;
    tp->n_pending = tp->n_threads - 1;
    tp->generation++;
    pthread_cond_broadcast(&tp->work_cv);
    pthread_mutex_unlock(&tp->mu);
    run_chunk(tp, 0);
    pthread_mutex_lock(&tp->mu);
    while (tp->n_pending > 0) pthread_cond_wait(&tp->done_cv, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
