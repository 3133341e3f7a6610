/* CUDA backend, device memory (cuda_internal.h): the paged KV pool, the activation cache,
 * the staging buffers of host-to-device uploads and the readback buffers, and the queue of
 * block copies.
 *
 * Block copies (kv_copy_rotate, BlockAttention) are queued on the host and run as one
 * kernel at the next operation that reads the pool (a request copies hundreds of blocks;
 * one launch each would cost more than the copies). A copy whose source or destination
 * an earlier queued copy writes flushes the queue first, so chains keep their order.
 *
 * KV store copies (kv_export / kv_import) run on a copy stream of their own, so they
 * overlap compute on the copy engines: each waits for an event recorded on the compute
 * stream at the call (it sees every pool write queued before it), and the compute stream
 * waits for an export's end (no later write can change a block before it is copied out).
 * One block is two cudaMemcpy2DAsync calls (K, V): L rows of one layer's block, strided
 * by a layer of the pool on the device and contiguous in the pinned host record.
 *
 * Activations come from a caching allocator: freed buffers are kept and reused by later
 * allocations of at most twice their size (the forward pass allocates sixteen per step);
 * the cache is emptied when cudaMalloc fails, then the allocation is retried.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

/* ============================================================ staging ================ */

/* Make s hold `bytes` and wait until its previous upload has left the host buffer. */
la_status la_cu_staging_reserve(cuda_backend *c, staging *s, size_t bytes, la_err *err) {
    if (s->in_flight) {
        CUDA_TRY(cudaEventSynchronize(s->done), "staging upload");
        s->in_flight = false;
    }
    if (bytes <= s->cap) return LA_OK;
    size_t cap = s->cap ? s->cap : (size_t)64 << 10;
    while (cap < bytes) cap *= 2;
    CUDA_TRY(cudaStreamSynchronize(c->stream), "staging: wait before growing");
    if (s->host) cudaFreeHost(s->host);
    dev_free(s->dev);
    s->host = s->dev = NULL;
    s->cap = 0;
    CUDA_TRY(cudaMallocHost(&s->host, cap), "staging: pinned host buffer");
    la_status st = dev_alloc(&s->dev, cap, "staging: device buffer", err);
    if (st != LA_OK) {
        cudaFreeHost(s->host);
        s->host = NULL;
        return st;
    }
    s->cap = cap;
    return LA_OK;
}

la_status la_cu_staging_send(cuda_backend *c, staging *s, size_t bytes, la_err *err) {
    if (bytes == 0) return LA_OK;
    CUDA_TRY(cudaMemcpyAsync(s->dev, s->host, bytes, cudaMemcpyHostToDevice, c->stream), "staging upload");
    CUDA_TRY(cudaEventRecord(s->done, c->stream), "staging upload event");
    s->in_flight = true;
    return LA_OK;
}

void la_cu_staging_free(staging *s) {
    if (s->done) cudaEventDestroy(s->done);
    if (s->host) cudaFreeHost(s->host);
    dev_free(s->dev);
    memset(s, 0, sizeof *s);
}

/* ============================================================ KV pool ================ */

int64_t la_cu_mem_free_bytes(la_backend *be, int64_t *total) {
    (void)be;
    size_t free_b = 0, all = 0;
    if (cudaMemGetInfo(&free_b, &all) != cudaSuccess) free_b = all = 0;
    if (total) *total = (int64_t)all;
    return (int64_t)free_b;
}

int64_t la_cu_kv_block_bytes(const la_backend *be, int32_t block_size) {
    const la_backend_shape *m = &be->shape;
    return 2LL * m->n_layers * m->n_kv_heads * block_size * m->head_dim * 2;
}

la_status la_cu_kv_alloc(la_backend *be, int64_t n_blocks, int32_t block_size, la_err *err) {
    cuda_backend *c = cu(be);
    const la_backend_shape *m = &c->base.shape;
    if (!c->layer_w) return la_err_set(err, LA_ERR_INTERNAL, "cuda backend: kv_alloc before load_weights");
    if (block_size <= 0 || block_size % 16 != 0)
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "cuda backend: block_size %d (the CUDA attention kernels need a multiple of 16)",
                          block_size);
    if (n_blocks <= 0 || n_blocks > INT32_MAX)
        return la_err_set(err, LA_ERR_INVALID_ARG, "cuda backend: KV pool of %lld blocks", (long long)n_blocks);
    LA_TRY(la_cu_flush_recorded(c, err));
    la_cu_graph_cache_clear(c);
    c->n_jobs = 0; /* queued copies refer to the pool being replaced */
    cudaStreamSynchronize(c->stream);
    dev_free(c->k_pool);
    dev_free(c->v_pool);
    c->k_pool = c->v_pool = NULL;
    c->n_blocks = 0;
    size_t bytes = (size_t)n_blocks * (size_t)m->n_layers * (size_t)m->n_kv_heads * (size_t)block_size *
                   (size_t)m->head_dim * 2;
    la_status s = dev_alloc((void **)&c->k_pool, bytes, "KV pool (K)", err);
    if (s == LA_OK) s = dev_alloc((void **)&c->v_pool, bytes, "KV pool (V)", err);
    if (s == LA_OK) {
        /* zeroed, so padding slots never hold NaN bit patterns (0 x NaN in P V) */
        cudaError_t e = cudaMemsetAsync(c->k_pool, 0, bytes, c->stream);
        if (e == cudaSuccess) e = cudaMemsetAsync(c->v_pool, 0, bytes, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) s = cuda_fail(err, e, "KV pool");
    }
    if (s != LA_OK) {
        dev_free(c->k_pool);
        dev_free(c->v_pool);
        c->k_pool = c->v_pool = NULL;
        la_err_prefix(err, "KV pool of %lld blocks (%.2f GiB)", (long long)n_blocks,
                      2.0 * (double)bytes / (double)(1 << 30));
        return s;
    }
    c->n_blocks = n_blocks;
    c->block_size = block_size;
    return LA_OK;
}

/* ============================================================ activations ============ */

static size_t round_alloc(size_t b) {
    const size_t small = 512, big = (size_t)2 << 20;
    return b <= ((size_t)1 << 20) ? (b + small - 1) / small * small : (b + big - 1) / big * big;
}

static void release_cache(cuda_backend *c) {
    cudaStreamSynchronize(c->stream);
    for (int32_t i = 0; i < c->n_free; i++) dev_free(c->free_list[i].ptr);
    c->n_free = 0;
}

static la_status push_block(dev_block **arr, int32_t *n, int32_t *cap, dev_block b) {
    if (*n == *cap) {
        int32_t nc = *cap ? *cap * 2 : 32;
        dev_block *p = realloc(*arr, sizeof(dev_block) * (size_t)nc);
        if (!p) return LA_ERR_NO_MEMORY;
        *arr = p;
        *cap = nc;
    }
    (*arr)[(*n)++] = b;
    return LA_OK;
}

la_status la_cu_act_alloc(la_backend *be, int64_t n_rows, int64_t n_cols, la_act *out,
                          la_err *err) {
    cuda_backend *c = cu(be);
    if (n_rows < 0 || n_cols < 0)
        return la_err_set(err, LA_ERR_INTERNAL, "act_alloc: shape [%lld, %lld]", (long long)n_rows,
                          (long long)n_cols);
    size_t need = round_alloc((size_t)(n_rows * n_cols > 0 ? n_rows * n_cols : 1) * 2);
    int32_t best = -1;
    for (int32_t i = 0; i < c->n_free; i++) {
        size_t b = c->free_list[i].bytes;
        if (b < need || b > 2 * need + ((size_t)1 << 20)) continue;
        if (best < 0 || b < c->free_list[best].bytes) best = i;
        /* graphs: among equal sizes the lowest address, so that the same allocations get
         * the same buffers every step whatever order the free list is in (graph keys) */
        else if (c->graphs && b == c->free_list[best].bytes &&
                 (uintptr_t)c->free_list[i].ptr < (uintptr_t)c->free_list[best].ptr)
            best = i;
    }
    dev_block blk;
    if (best >= 0) {
        blk = c->free_list[best];
        c->free_list[best] = c->free_list[--c->n_free];
    } else {
        blk.bytes = need;
        cudaError_t e = cudaMalloc(&blk.ptr, need);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            LA_TRY(la_cu_flush_recorded(c, err)); /* recorded operations may use cached buffers */
            release_cache(c);
            e = cudaMalloc(&blk.ptr, need);
        }
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: activation [%lld, %lld]: out of device memory",
                              (long long)n_rows, (long long)n_cols);
        }
    }
    if (push_block(&c->live, &c->n_live, &c->cap_live, blk) != LA_OK) {
        push_block(&c->free_list, &c->n_free, &c->cap_free, blk);
        return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: out of host memory");
    }
    out->data = blk.ptr;
    out->n_rows = n_rows;
    out->n_cols = n_cols;
    return LA_OK;
}

void la_cu_act_free(la_backend *be, la_act *a) {
    cuda_backend *c = cu(be);
    if (!a->data) return;
    for (int32_t i = 0; i < c->n_live; i++)
        if (c->live[i].ptr == a->data) {
            dev_block b = c->live[i];
            c->live[i] = c->live[--c->n_live];
            if (push_block(&c->free_list, &c->n_free, &c->cap_free, b) != LA_OK) {
                (void)la_cu_flush_recorded(c, NULL); /* a failure resurfaces at the next wait */
                cudaStreamSynchronize(c->stream);
                dev_free(b.ptr);
            }
            break;
        }
    a->data = NULL;
    a->n_rows = a->n_cols = 0;
}

/* ============================================================ block copies =========== */

la_status la_cu_flush_copies(cuda_backend *c, la_err *err) {
    if (c->n_jobs == 0) return LA_OK;
    if (c->batch_ok) c->copies_in_step = true; /* mid-step: not in the step's d_written */
    const la_backend_shape *m = &c->base.shape;
    size_t bytes = sizeof(la_cuda_copy_job) * (size_t)c->n_jobs;
    prof_begin(c);
    la_status s = la_cu_staging_reserve(c, &c->jobs_stage, bytes, err);
    if (s == LA_OK) {
        memcpy(c->jobs_stage.host, c->jobs, bytes);
        s = la_cu_staging_send(c, &c->jobs_stage, bytes, err);
    }
    if (s == LA_OK) {
        la_cuda_kv_copy_params p = {c->k_pool, c->v_pool, c->jobs_stage.dev, c->n_jobs, m->n_layers,
                                    c->n_blocks, m->n_kv_heads, m->head_dim, c->block_size,
                                    c->rope, c->rope_len};
        s = la_cuda_kv_copy_rotate(&p, c->stream, err);
    }
    c->n_jobs = 0;
    prof_end(c, PROF_KV_COPY_ROTATE);
    return s;
}

la_status la_cu_kv_copy_rotate(la_backend *be, int32_t src, int32_t dst, int32_t n_valid,
                               int32_t delta, la_err *err) {
    cuda_backend *c = cu(be);
    if (src < 0 || src >= c->n_blocks || dst < 0 || dst >= c->n_blocks || n_valid < 0 ||
        n_valid > c->block_size)
        return la_err_set(err, LA_ERR_INTERNAL, "kv_copy_rotate: bad blocks %d -> %d (n_valid %d)", src, dst, n_valid);
    LA_TRY(la_cu_flush_recorded(c, err)); /* the copy comes after the operations recorded so far */
    int64_t need = (delta < 0 ? -(int64_t)delta : (int64_t)delta) + 1;
    LA_TRY(la_cu_ensure_rope(c, need, err));
    for (int32_t i = 0; i < c->n_jobs; i++)
        if (c->jobs[i].dst_block == src || c->jobs[i].dst_block == dst || c->jobs[i].src_block == dst) {
            LA_TRY(la_cu_flush_copies(c, err));
            break;
        }
    if (c->n_jobs == c->cap_jobs) {
        int32_t nc = c->cap_jobs ? c->cap_jobs * 2 : 256;
        la_cuda_copy_job *p = realloc(c->jobs, sizeof *p * (size_t)nc);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "kv_copy_rotate: out of memory");
        c->jobs = p;
        c->cap_jobs = nc;
    }
    c->jobs[c->n_jobs++] = (la_cuda_copy_job){src, dst, n_valid, delta};
    return LA_OK;
}

/* ============================================================ readback ============== */

/* Device f32 scratch and pinned host buffer of n floats each. */
la_status la_cu_reserve_readback(cuda_backend *c, size_t n, la_err *err) {
    size_t bytes = n * sizeof(float);
    if (bytes > c->cap_f32_dev || bytes > c->cap_host_pinned) {
        size_t cap = bytes * 2 > ((size_t)1 << 20) ? bytes * 2 : ((size_t)1 << 20);
        CUDA_TRY(cudaStreamSynchronize(c->stream), "readback buffers");
        float *old = c->f32_dev;
        c->f32_dev = NULL;
        if (c->host_pinned) cudaFreeHost(c->host_pinned);
        c->host_pinned = NULL;
        c->cap_f32_dev = c->cap_host_pinned = 0;
        la_status s = dev_alloc((void **)&c->f32_dev, cap, "readback buffer", err);
        /* the latest queued argmax's ids move along: the next batch may name them (LA_TOKEN_PREV) */
        if (s == LA_OK && old && c->prev_ids_rows > 0) {
            cudaError_t e = cudaMemcpyAsync(c->f32_dev, old, (size_t)c->prev_ids_rows * sizeof(int32_t),
                                            cudaMemcpyDeviceToDevice, c->stream);
            if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream); /* before old is freed */
            if (e != cudaSuccess)
                s = la_err_set(err, LA_ERR_BACKEND, "readback buffer: keeping the queued ids: %s", cudaGetErrorString(e));
        }
        dev_free(old);
        if (s != LA_OK) {
            c->prev_ids_rows = 0;
            return s;
        }
        CUDA_TRY(cudaMallocHost(&c->host_pinned, cap), "pinned readback buffer");
        c->cap_f32_dev = c->cap_host_pinned = cap;
    }
    return LA_OK;
}

la_status la_cu_argmax_readback(cuda_backend *c, int32_t n, int32_t *ids, la_err *err) {
    const size_t bytes = (size_t)n * sizeof(int32_t);
    if (ids) { /* read back here: not for a later LA_TOKEN_PREV (the CPU backend's rule too) */
        c->prev_ids_rows = 0;
        CUDA_TRY(cudaMemcpyAsync(c->host_pinned, c->f32_dev, bytes, cudaMemcpyDeviceToHost, c->stream), "argmax copy");
        CUDA_TRY(cudaStreamSynchronize(c->stream), "forward pass");
        memcpy(ids, c->host_pinned, bytes);
        return LA_OK;
    }
    const int32_t w = (c->ids_head + c->ids_count) % 2;
    if (c->ids_cap[w] < n) { /* slot w's last copy was waited for by its argmax_end */
        if (c->ids_host[w]) cudaFreeHost(c->ids_host[w]);
        c->ids_host[w] = NULL;
        c->ids_cap[w] = 0;
        CUDA_TRY(cudaMallocHost((void **)&c->ids_host[w], bytes), "pinned ids buffer");
        c->ids_cap[w] = n;
    }
    if (!c->ids_ev[w]) CUDA_TRY(cudaEventCreateWithFlags(&c->ids_ev[w], cudaEventDisableTiming), "ids event");
    CUDA_TRY(cudaMemcpyAsync(c->ids_host[w], c->f32_dev, bytes, cudaMemcpyDeviceToHost, c->stream), "argmax copy");
    CUDA_TRY(cudaEventRecord(c->ids_ev[w], c->stream), "ids event");
    c->ids_n[w] = n;
    c->ids_count++;
    return LA_OK;
}

/* ============================================================ KV store copies ======== */

void *la_cu_host_alloc(la_backend *be, size_t bytes) {
    (void)be;
    void *p = NULL;
    return cudaHostAlloc(&p, bytes, cudaHostAllocPortable) == cudaSuccess ? p : NULL;
}

void la_cu_host_free(la_backend *be, void *p) {
    (void)be;
    if (p) cudaFreeHost(p);
}

static la_status kv_copy_start(cuda_backend *c, const int32_t *ids, int32_t n, void *const *host, bool out,
                               uint64_t *ticket, la_err *err) {
    const la_backend_shape *m = &c->base.shape;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->n_blocks)
            return la_err_set(err, LA_ERR_INVALID_ARG, "kv copy: block %d outside the pool of %lld", ids[i],
                              (long long)c->n_blocks);
    LA_TRY(la_cu_flush_recorded(c, err));
    LA_TRY(la_cu_flush_copies(c, err));
    if (!c->copy_stream)
        CUDA_TRY(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking), "kv copy stream");
    if (c->n_copies == c->cap_copies) {
        int32_t cap = c->cap_copies ? 2 * c->cap_copies : 16;
        kv_copy *p = realloc(c->copies, sizeof *p * (size_t)cap);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "kv copy: out of memory");
        c->copies = p;
        c->cap_copies = cap;
    }
    cudaEvent_t before, done;
    CUDA_TRY(cudaEventCreateWithFlags(&before, cudaEventDisableTiming), "kv copy event");
    cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        cudaEventDestroy(before);
        return cuda_fail(err, e, "kv copy event");
    }
    e = cudaEventRecord(before, c->stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(c->copy_stream, before, 0);
    size_t chunk = (size_t)m->n_kv_heads * (size_t)c->block_size * (size_t)m->head_dim * 2;
    size_t pitch = (size_t)kv_slab_elems(c) * 2; /* one layer of the pool */
    for (int32_t i = 0; e == cudaSuccess && i < n; i++)
        for (int kv = 0; e == cudaSuccess && kv < 2; kv++) {
            char *dev = (char *)(kv ? c->v_pool : c->k_pool) + (size_t)ids[i] * chunk;
            char *h = (char *)host[i] + (size_t)kv * (size_t)m->n_layers * chunk;
            e = out ? cudaMemcpy2DAsync(h, chunk, dev, pitch, chunk, (size_t)m->n_layers, cudaMemcpyDeviceToHost,
                                        c->copy_stream)
                    : cudaMemcpy2DAsync(dev, pitch, h, chunk, chunk, (size_t)m->n_layers, cudaMemcpyHostToDevice,
                                        c->copy_stream);
        }
    if (e == cudaSuccess) e = cudaEventRecord(done, c->copy_stream);
    if (e == cudaSuccess && out) e = cudaStreamWaitEvent(c->stream, done, 0);
    cudaEventDestroy(before); /* released once the copy stream has passed it */
    if (e != cudaSuccess) {
        cudaEventDestroy(done);
        return cuda_fail(err, e, out ? "kv export" : "kv import");
    }
    *ticket = ++c->next_ticket;
    c->copies[c->n_copies++] = (kv_copy){*ticket, done};
    return LA_OK;
}

la_status la_cu_kv_export(la_backend *be, const int32_t *ids, int32_t n, void *const *host, uint64_t *ticket,
                          la_err *err) {
    return kv_copy_start(cu(be), ids, n, host, true, ticket, err);
}

la_status la_cu_kv_import(la_backend *be, const int32_t *ids, int32_t n, const void *const *host,
                          uint64_t *ticket, la_err *err) {
    return kv_copy_start(cu(be), ids, n, (void *const *)host, false, ticket, err);
}

la_status la_cu_kv_copy_poll(la_backend *be, uint64_t ticket, bool wait, bool *done, la_err *err) {
    cuda_backend *c = cu(be);
    *done = false;
    for (int32_t i = 0; i < c->n_copies; i++) {
        if (c->copies[i].ticket != ticket) continue;
        cudaError_t e = wait ? cudaEventSynchronize(c->copies[i].done) : cudaEventQuery(c->copies[i].done);
        if (e == cudaErrorNotReady) return LA_OK;
        cudaEventDestroy(c->copies[i].done);
        memmove(c->copies + i, c->copies + i + 1, sizeof *c->copies * (size_t)(c->n_copies - i - 1));
        c->n_copies--;
        if (e != cudaSuccess) return cuda_fail(err, e, "kv copy");
        *done = true;
        return LA_OK;
    }
    return la_err_set(err, LA_ERR_INVALID_ARG, "kv copy: no ticket %llu", (unsigned long long)ticket);
}

void la_cu_kv_copies_fini(cuda_backend *c) {
    if (c->copy_stream) cudaStreamSynchronize(c->copy_stream);
    for (int32_t i = 0; i < c->n_copies; i++) cudaEventDestroy(c->copies[i].done);
    free(c->copies);
    c->copies = NULL;
    c->n_copies = c->cap_copies = 0;
    if (c->copy_stream) cudaStreamDestroy(c->copy_stream);
    c->copy_stream = NULL;
}
