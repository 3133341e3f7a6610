/* CUDA backend, the hooks for tests and benchmarks (cuda_hooks.h): the engine never calls
 * them. */
#include "backend/cuda/cuda_hooks.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "base/dtype.h"

static const char *const k_prof_names[PROF_COUNT] = {
    "batch_begin", "embed", "rmsnorm",
    "matmul_q", "matmul_k", "matmul_v", "matmul_o",
    "matmul_gate", "matmul_up", "matmul_down", "matmul_lm_head",
    "matmul_qkv", "matmul_gate_up", "matmul_split",
    "kv_write", "attn_prefill", "attn_decode", "attn_combine",
    "swiglu", "add", "add_rmsnorm", "gather_rows", "to_host", "argmax", "kv_copy_rotate",
    "attn_shared",
};

la_status la_cuda_attn_prefill_variant_set(la_backend *be, int32_t variant, la_err *err) {
    if (!la_cuda_backend_is(be))
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_prefill_variant_set: not a CUDA backend");
    const int k = la_cu_prefill_kernel_numbered(variant);
    if (k < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_prefill_variant_set: variant %d (2 to 4)", variant);
    if (la_cuda_prefill_kernels[k].sm90a && !cu(be)->wgmma)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "la_cuda_attn_prefill_variant_set: v%d: %s", variant, LA_CU_NO_WGMMA);
    cu(be)->prefill_kernel = (la_cuda_prefill_kernel)k;
    return LA_OK;
}

int32_t la_cuda_attn_prefill_variant(const la_backend *be) {
    return la_cuda_backend_is(be) ? la_cuda_prefill_kernels[((const cuda_backend *)be)->prefill_kernel].variant : 0;
}

int32_t la_cuda_attn_prefill_kernel(const la_backend *be) {
    if (!la_cuda_backend_is(be)) return 0;
    const cuda_backend *c = (const cuda_backend *)be;
    return la_cuda_prefill_kernels[la_cuda_prefill_kernel_pick(c->prefill_kernel, c->wgmma, c->base.shape.head_dim,
                                                               LA_CUDA_ROTATION_NONE)]
        .variant;
}

int32_t la_cuda_attn_prefill_kernel_ran(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->last_prefill_kernel : 0;
}

la_status la_cuda_attn_shared_set(la_backend *be, int32_t mode, la_err *err) {
    if (!la_cuda_backend_is(be))
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_shared_set: not a CUDA backend");
    if (mode != LA_CUDA_ATTN_SHARED_OFF && mode != LA_CUDA_ATTN_SHARED_ON && mode != LA_CUDA_ATTN_SHARED_AUTO)
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_shared_set: mode %d (0 off, 1 on, 2 auto)", mode);
    cu(be)->sh.mode = mode;
    return LA_OK;
}

la_status la_cuda_attn_decode_packed_set(la_backend *be, int32_t mode, la_err *err) {
    if (!la_cuda_backend_is(be))
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_decode_packed_set: not a CUDA backend");
    if (mode != LA_CUDA_DECODE_PACKED_OFF && mode != LA_CUDA_DECODE_PACKED_ON && mode != LA_CUDA_DECODE_PACKED_AUTO)
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_decode_packed_set: mode %d (0 off, 1 on, 2 auto)",
                          mode);
    cu(be)->decode_packed = mode;
    return LA_OK;
}

int32_t la_cuda_attn_decode_packed(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->decode_packed : -1;
}

bool la_cuda_attn_decode_packed_ran(const la_backend *be) {
    return la_cuda_backend_is(be) && ((const cuda_backend *)be)->step_decode == LA_CUDA_DECODE_PACKED;
}

la_status la_cuda_attn_lazy_ws_set(la_backend *be, int32_t mode, la_err *err) {
    if (!la_cuda_backend_is(be))
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_lazy_ws_set: not a CUDA backend");
    if (mode != LA_CUDA_LAZY_WS_OFF && mode != LA_CUDA_LAZY_WS_ON)
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_attn_lazy_ws_set: mode %d (0 off, 1 on)", mode);
    cu(be)->lazy_ws = mode;
    return LA_OK;
}

int32_t la_cuda_attn_lazy_ws(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->lazy_ws : -1;
}

int32_t la_cuda_attn_shared(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->sh.mode : -1;
}

void la_cuda_attn_shared_stats_get(const la_backend *be, la_cuda_attn_shared_stats *out) {
    memset(out, 0, sizeof *out);
    if (!la_cuda_backend_is(be)) return;
    const sh_stats *s = &((const cuda_backend *)be)->sh.stats;
    *out = (la_cuda_attn_shared_stats){s->steps, s->steps_grouped, s->runs, s->sharers, s->rows, s->items,
                                       s->chunks_max, s->keys_shared, s->keys_own, s->keys_per_seq, s->plan_ms,
                                       s->meta_bytes};
}

la_status la_cuda_act_upload(la_backend *be, la_act *a, const float *host, la_err *err) {
    if (!la_cuda_backend_is(be)) return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_act_upload: not a CUDA backend");
    cuda_backend *c = cu(be);
    size_t n = (size_t)(a->n_rows * a->n_cols);
    if (n == 0) return LA_OK;
    LA_TRY(la_cu_flush_recorded(c, err)); /* recorded operations may read a */
    uint16_t *tmp = malloc(n * 2);
    if (!tmp) return la_err_set(err, LA_ERR_NO_MEMORY, "la_cuda_act_upload: out of memory");
    for (size_t i = 0; i < n; i++) tmp[i] = la_f32_to_bf16(host[i]);
    cudaError_t e = cudaMemcpyAsync(a->data, tmp, n * 2, cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    free(tmp);
    if (e != cudaSuccess) return cuda_fail(err, e, "la_cuda_act_upload");
    return LA_OK;
}

la_status la_cuda_kv_fill_random(la_backend *be, uint64_t seed, la_err *err) {
    if (!la_cuda_backend_is(be)) return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_kv_fill_random: not a CUDA backend");
    cuda_backend *c = cu(be);
    LA_TRY(la_cu_flush_recorded(c, err));
    int64_t n = kv_slab_elems(c) * c->n_layers;
    la_cuda_fill_params p = {c->k_pool, n, seed, -1.0f, 1.0f};
    LA_TRY(la_cuda_fill_uniform(&p, c->stream, err));
    p.dst = c->v_pool;
    p.seed = seed + 1;
    LA_TRY(la_cuda_fill_uniform(&p, c->stream, err));
    CUDA_TRY(cudaStreamSynchronize(c->stream), "la_cuda_kv_fill_random");
    return LA_OK;
}

la_status la_cuda_synchronize(la_backend *be, la_err *err) {
    if (!la_cuda_backend_is(be)) return la_err_set(err, LA_ERR_INVALID_ARG, "la_cuda_synchronize: not a CUDA backend");
    cuda_backend *c = cu(be);
    LA_TRY(la_cu_flush_recorded(c, err));
    LA_TRY(la_cu_flush_copies(c, err));
    CUDA_TRY(cudaStreamSynchronize(c->stream), "synchronize");
    return LA_OK;
}

void la_cuda_profile_enable(la_backend *be, bool on) {
    if (!la_cuda_backend_is(be)) return;
    cuda_backend *c = cu(be);
    (void)la_cu_flush_recorded(c, NULL); /* a failure resurfaces at the next wait */
    if (c->stream) cudaStreamSynchronize(c->stream);
    c->prof = on;
    if (on) {
        memset(c->prof_ms, 0, sizeof c->prof_ms);
        memset(c->prof_calls, 0, sizeof c->prof_calls);
    }
}

void la_cuda_graphs_enable(la_backend *be, bool on) {
    if (!la_cuda_backend_is(be)) return;
    cuda_backend *c = cu(be);
    (void)la_cu_flush_recorded(c, NULL); /* a failure resurfaces at the next wait */
    if (c->stream) cudaStreamSynchronize(c->stream);
    la_cu_graph_cache_clear(c);
    c->graphs = on;
}

void la_cuda_fused_gemm_set(la_backend *be, uint32_t groups) {
    if (!la_cuda_backend_is(be)) return;
    cuda_backend *c = cu(be);
    (void)la_cu_flush_recorded(c, NULL); /* a failure resurfaces at the next wait */
    la_cu_graph_cache_clear(c);          /* cached graphs launch the GEMMs they were captured with */
    c->fused = groups & LA_CUDA_FUSED_ALL;
}

uint32_t la_cuda_fused_gemm(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->fused : 0;
}

bool la_cuda_graphs_enabled(const la_backend *be) {
    return la_cuda_backend_is(be) && ((const cuda_backend *)be)->graphs;
}

void la_cuda_graph_stats_get(const la_backend *be, la_cuda_graph_stats *out) {
    memset(out, 0, sizeof *out);
    if (!la_cuda_backend_is(be)) return;
    const cuda_backend *c = (const cuda_backend *)be;
    *out = (la_cuda_graph_stats){.steps_recorded = c->gstats.steps_recorded,
                                 .steps_replayed = c->gstats.steps_replayed,
                                 .steps_eager = c->gstats.steps_eager,
                                 .captures = c->gstats.captures,
                                 .capture_failures = c->gstats.capture_failures,
                                 .interrupted = c->gstats.interrupted};
    for (int i = 0; i < LA_CUDA_GRAPH_CACHE; i++) out->cached += c->cache[i].exec != NULL;
}

void la_cuda_graphs_break_next_capture(la_backend *be) {
    if (la_cuda_backend_is(be)) cu(be)->break_next_capture = true;
}

/* Append printf output at *n of buf[cap] (truncating); *n counts what was needed. */
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (w <= 0) return;
    for (int i = 0; i < w && (size_t)i < sizeof tmp - 1; i++) {
        if (buf && *n + 1 < cap) buf[*n] = tmp[i];
        (*n)++;
    }
    if (buf && cap) buf[*n < cap ? *n : cap - 1] = '\0';
}

size_t la_cuda_profile_json(const la_backend *be, char *buf, size_t cap) {
    if (!la_cuda_backend_is(be)) return 0;
    const cuda_backend *c = (const cuda_backend *)be;
    size_t n = 0;
    if (buf && cap) buf[0] = '\0';
    append(buf, cap, &n, "{");
    bool first = true;
    for (int i = 0; i < PROF_COUNT; i++) {
        if (!c->prof_calls[i]) continue;
        append(buf, cap, &n, "%s\"%s\": {\"ms\": %.4f, \"calls\": %lld}", first ? "" : ", ", k_prof_names[i],
               c->prof_ms[i], (long long)c->prof_calls[i]);
        first = false;
    }
    append(buf, cap, &n, "}");
    return n;
}

const char *la_cuda_device_name(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->device_name : "";
}

int la_cuda_device_sm_count(const la_backend *be) {
    return la_cuda_backend_is(be) ? ((const cuda_backend *)be)->n_sm : 0;
}
