/* CUDA backend (backend/backend.h): bf16 weights, activations and paged KV cache on the
 * device; cuBLAS for x W^T; our kernels (cuda_kernels.h) for the rest. This file: the
 * lifecycle and the forward ops; the rest of the backend is listed in cuda_internal.h.
 *
 * Streams and waiting: every operation is queued in order on one stream owned by the
 * backend. The host waits only where it must read device results (to_host, kv_read_slot)
 * or replace device memory that queued work may still use (pool, RoPE table, metadata and
 * partial buffers growing). Asynchronous failures surface at those waits as LA_ERR_BACKEND.
 *
 * Launches (la_cuda_launch): every kernel is launched with programmatic dependent launch on
 * compute capability 9.0+ (LA_CUDA_PDL=0 turns it off), so its launch overlaps the tail of
 * the kernel before it; each kernel waits (griddepcontrol.wait) before it reads what an
 * earlier kernel wrote: at its top, except the attn_prefill kernels, which first read the
 * step's host-written metadata (items, positions, block lists). cuBLAS launches its GEMMs
 * itself, without it.
 *
 * Fused GEMMs (matmul_group, LA_CUDA_FUSED_GEMM / la_cuda_fused_gemm_set): each layer's
 * W_q, W_k, W_v sit in one allocation stacked by rows, as do W_gate, W_up (k_fused_groups);
 * for at most LA_CUDA_FUSED_MAX_ROWS rows the group is one GEMM by the stack into a fixed
 * scratch [rows, sum of n_out] (allocated with the weights, so a captured graph's scratch
 * address stays valid and nobody else holds it), then one split_cols launch copies the
 * columns into the separate outputs: the small GEMMs alone are latency-bound, far from the
 * copy ceiling, the stack nears it.
 * Two more fusions save launches, not arithmetic (bit-equal): add_rmsnorm runs a layer's
 * residual add and the next RMSNorm as one row kernel, and gate_up_swiglu computes SwiGLU
 * straight from the stacked gate/up GEMM's output instead of splitting it first
 * (LA_CUDA_FUSED_ADD_NORM, LA_CUDA_FUSED_SWIGLU), and qkv_kv_write feeds the KV write
 * from the fused QKV GEMM's output, copying q, k and v out in the same kernel
 * (LA_CUDA_FUSED_KV_WRITE). A Llama decode step is then 10 launches per layer instead of 14.
 *
 * Greedy decoding (argmax_to_host): the argmax of each logit row is taken on the device
 * (rows.cu) and only the token ids come back, instead of n_rows x vocab f32 logits.
 */
#include "backend/cuda/cuda_backend.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_hooks.h"
#include "backend/cuda/cuda_internal.h"
#include "base/dtype.h"
#include "base/env.h"

#define LA_CUDA_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

static const la_backend_ops k_cuda_ops;

static const char *blas_status_name(cublasStatus_t s) { return cublasGetStatusString(s); }

/* ============================================================ forward ops ============ */

#define NEED_BATCH(c)                                                                            \
    do {                                                                                         \
        if (!(c)->batch_ok)                                                                      \
            return la_err_set(err, LA_ERR_INTERNAL, "cuda backend: %s without a successful batch_begin", \
                              __func__);                                                         \
    } while (0)

static la_status shape_error(la_err *err, const char *op, const la_act *a, int64_t rows, int64_t cols) {
    return la_err_set(err, LA_ERR_INTERNAL, "cuda %s: activation [%lld, %lld], expected [%lld, %lld]", op,
                      (long long)a->n_rows, (long long)a->n_cols, (long long)rows, (long long)cols);
}


static la_status cuda_embed(la_backend *be, la_act *x, la_err *err) {
    cuda_backend *c = cu(be);
    NEED_BATCH(c);
    if (c->bad_token_row >= 0 && c->bad_token < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "token id %d at row %d: no queued argmax has row %d", c->bad_token,
                          c->bad_token_row, LA_TOKEN_PREV_ROW(c->bad_token));
    if (c->bad_token_row >= 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "token id %d outside the vocabulary [0, %d)", c->bad_token,
                          c->base.shape.vocab_size);
    if (x->n_rows != c->n_tokens || x->n_cols != c->base.shape.hidden_size)
        return shape_error(err, "embed", x, c->n_tokens, c->base.shape.hidden_size);
    if (c->recording) return la_cu_record_op(c, OP_EMBED, 0, 0, x, NULL, err);
    prof_begin(c);
    la_cuda_embed_params p = {x->data, c->embed, c->d_tokens, c->n_tokens, (int32_t)x->n_cols,
                              (const int32_t *)c->f32_dev}; /* LA_TOKEN_PREV: checked by batch_begin */
    LA_TRY(la_cuda_embed(&p, c->stream, err));
    prof_end(c, PROF_EMBED);
    return LA_OK;
}

/* *wp = the norm weight w of layer, checked with the shapes of x and out. */
static la_status norm_args(cuda_backend *c, const char *what, const la_act *x, la_weight_kind w, int32_t layer,
                           const la_act *out, const la_bf16_t **wp, la_err *err) {
    const bool head = w == LA_W_Q_NORM || w == LA_W_K_NORM; /* Qwen3: over each head's head_dim */
    *wp = (w == LA_W_ATTN_NORM || w == LA_W_MLP_NORM || w == LA_W_FINAL_NORM || head) ? la_cu_weight_ptr(c, w, layer)
                                                                                     : NULL;
    if (!*wp) return la_err_set(err, LA_ERR_INTERNAL, "cuda %s: no norm weight %d for layer %d", what, (int)w, layer);
    const int64_t width = head ? c->base.shape.head_dim : c->base.shape.hidden_size;
    if (x->n_cols != width) return shape_error(err, what, x, x->n_rows, width);
    if (out->n_rows != x->n_rows || out->n_cols != x->n_cols) return shape_error(err, what, out, x->n_rows, x->n_cols);
    return LA_OK;
}

static la_status cuda_rmsnorm(la_backend *be, const la_act *x, la_weight_kind w, int32_t layer,
                              la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    const la_bf16_t *wp;
    LA_TRY(norm_args(c, "rmsnorm", x, w, layer, out, &wp, err));
    if (c->recording) return la_cu_record_op(c, OP_RMSNORM, layer, (int32_t)w, x, out, err);
    prof_begin(c);
    la_cuda_rmsnorm_params p = {x->data, out->data, wp, x->n_rows, (int32_t)x->n_cols,
                                (float)c->base.shape.rms_norm_eps, NULL};
    LA_TRY(la_cuda_rmsnorm(&p, c->stream, err));
    prof_end(c, PROF_RMSNORM);
    return LA_OK;
}

static la_status cuda_add(la_backend *be, la_act *x, const la_act *y, la_err *err);

/* x += y, then out = RMSNorm(x) w: one launch (la_cuda_rmsnorm with a residual) when
 * LA_CUDA_FUSED_ADD_NORM is on, else add then rmsnorm. */
static la_status cuda_add_rmsnorm(la_backend *be, la_act *x, const la_act *y, la_weight_kind w, int32_t layer,
                                  la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    if (!(c->fused & LA_CUDA_FUSED_ADD_NORM)) {
        LA_TRY(cuda_add(be, x, y, err));
        return cuda_rmsnorm(be, x, w, layer, out, err);
    }
    const la_bf16_t *wp;
    LA_TRY(norm_args(c, "add_rmsnorm", x, w, layer, out, &wp, err));
    if (y->n_rows != x->n_rows || y->n_cols != x->n_cols) return shape_error(err, "add_rmsnorm", y, x->n_rows, x->n_cols);
    if (c->recording) {
        LA_TRY(la_cu_record_op(c, OP_ADD_RMSNORM, layer, (int32_t)w, x, y, err));
        c->recs[c->n_recs - 1].c = *out;
        return LA_OK;
    }
    prof_begin(c);
    la_cuda_rmsnorm_params p = {x->data, out->data, wp, x->n_rows, (int32_t)x->n_cols,
                                (float)c->base.shape.rms_norm_eps, y->data};
    LA_TRY(la_cuda_rmsnorm(&p, c->stream, err));
    prof_end(c, PROF_ADD_RMSNORM);
    return LA_OK;
}

/* Row-major y[n_rows, n_out] = x[n_rows, n_in] W^T, W the row-major [n_out, n_in] weight,
 * bf16 in and out, f32 accumulation: column-major y^T = W^T(op T on W's column-major
 * [n_in, n_out] view) x^T. */
/* y = x W^T (+ y when accumulate: the product and y summed in f32, rounded once). */
static la_status gemm_acc(cuda_backend *c, const void *x, const la_bf16_t *w, int64_t n_rows, int64_t n_in,
                          int64_t n_out, void *y, bool accumulate, la_err *err) {
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasStatus_t st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)n_rows, (int)n_in, &alpha, w,
                                     CUDA_R_16BF, (int)n_in, x, CUDA_R_16BF, (int)n_in, &beta, y, CUDA_R_16BF,
                                     (int)n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS)
        return la_err_set(err, LA_ERR_BACKEND, "cublasGemmEx [%lld x %lld] x [%lld x %lld]^T: %s", (long long)n_rows,
                          (long long)n_in, (long long)n_out, (long long)n_in, blas_status_name(st));
    return LA_OK;
}

static la_status gemm(cuda_backend *c, const void *x, const la_bf16_t *w, int64_t n_rows, int64_t n_in,
                      int64_t n_out, void *y, la_err *err) {
    return gemm_acc(c, x, w, n_rows, n_in, n_out, y, false, err);
}

static la_status cuda_matmul(la_backend *be, const la_act *x, la_weight_kind k, int32_t layer,
                             la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    int64_t n_out, n_in;
    la_weight_shape(&c->base.shape, k, &n_out, &n_in);
    const bool matrix = k == LA_W_Q || k == LA_W_K || k == LA_W_V || k == LA_W_O || k == LA_W_GATE || k == LA_W_UP ||
                        k == LA_W_DOWN || k == LA_W_LM_HEAD;
    const la_bf16_t *w = matrix ? la_cu_weight_ptr(c, k, layer) : NULL;
    if (!w) return la_err_set(err, LA_ERR_INTERNAL, "cuda matmul: no weight %d for layer %d", (int)k, layer);
    if (x->n_cols != n_in) return shape_error(err, "matmul", x, x->n_rows, n_in);
    if (out->n_rows != x->n_rows || out->n_cols != n_out) return shape_error(err, "matmul", out, x->n_rows, n_out);
    if (x->n_rows == 0) return LA_OK;
    if (x->n_rows > INT32_MAX || n_out > INT32_MAX)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "cuda matmul: %lld rows", (long long)x->n_rows);
    if (c->recording) return la_cu_record_op(c, OP_MATMUL, layer, (int32_t)k, x, out, err);
    static const prof_slot slot_of[LA_W_KIND_COUNT] = {
        [LA_W_Q] = PROF_MATMUL_Q, [LA_W_K] = PROF_MATMUL_K, [LA_W_V] = PROF_MATMUL_V,
        [LA_W_O] = PROF_MATMUL_O, [LA_W_GATE] = PROF_MATMUL_GATE, [LA_W_UP] = PROF_MATMUL_UP,
        [LA_W_DOWN] = PROF_MATMUL_DOWN, [LA_W_LM_HEAD] = PROF_MATMUL_LM_HEAD};
    prof_begin(c);
    if (c->base.shape.qkv_bias && (k == LA_W_Q || k == LA_W_K || k == LA_W_V)) {
        /* out = bias, then out += x W^T in the GEMM: summed in f32 and rounded once, as
         * torch's addmm (nn.Linear with a bias) does */
        const la_weight_kind bk = k == LA_W_Q ? LA_W_Q_BIAS : k == LA_W_K ? LA_W_K_BIAS : LA_W_V_BIAS;
        la_cuda_bias_params bp = {out->data, la_cu_weight_ptr(c, bk, layer), x->n_rows, (int32_t)n_out};
        if (!bp.bias) return la_err_set(err, LA_ERR_INTERNAL, "cuda matmul: no bias %d for layer %d", (int)bk, layer);
        LA_TRY(la_cuda_fill_bias(&bp, c->stream, err));
        LA_TRY(gemm_acc(c, x->data, w, x->n_rows, n_in, n_out, out->data, true, err));
    } else {
        LA_TRY(gemm(c, x->data, w, x->n_rows, n_in, n_out, out->data, err));
    }
    prof_end(c, slot_of[k]);
    return LA_OK;
}

/* matmul_group (backend.h). A fused group (k_fused_groups, switched on in c->fused) of at
 * most LA_CUDA_FUSED_MAX_ROWS rows: one GEMM by the stacked weight into gemm_scratch
 * [n, sum of n_out], then one split_cols kernel into the outputs. Anything else: one
 * matmul per weight, exactly as forward.c would call them. */
static la_status cuda_matmul_group(la_backend *be, const la_act *x, const la_weight_kind *w, int32_t n_w,
                                   int32_t layer, la_act *const *out, la_err *err) {
    cuda_backend *c = cu(be);
    const fused_group *g = la_cu_group_of(w, n_w);
    if (!g || !(c->fused & g->bit) || x->n_rows > LA_CUDA_FUSED_MAX_ROWS || x->n_rows == 0 || !c->gemm_scratch) {
        for (int32_t i = 0; i < n_w; i++) LA_TRY(cuda_matmul(be, x, w[i], layer, out[i], err));
        return LA_OK;
    }
    const la_bf16_t *w0 = la_cu_weight_ptr(c, w[0], layer);
    if (!w0) return la_err_set(err, LA_ERR_INTERNAL, "cuda matmul_group: no weight %d for layer %d", (int)w[0], layer);
    la_cuda_split_params sp = {.x = c->gemm_scratch, .n_parts = n_w, .n_rows = (int32_t)x->n_rows};
    int64_t n_in = 0, n_total = 0;
    for (int32_t i = 0; i < n_w; i++) {
        int64_t n_out, in_i;
        la_weight_shape(&c->base.shape, w[i], &n_out, &in_i);
        /* the members are stacked right after each other (load_all) */
        if (la_cu_weight_ptr(c, w[i], layer) != w0 + n_total * in_i || (i > 0 && in_i != n_in))
            return la_err_set(err, LA_ERR_INTERNAL, "cuda matmul_group: weight %d of layer %d is not stacked", (int)w[i],
                              layer);
        n_in = in_i;
        if (out[i]->n_rows != x->n_rows || out[i]->n_cols != n_out)
            return shape_error(err, "matmul_group", out[i], x->n_rows, n_out);
        sp.out[i] = out[i]->data;
        sp.n_cols[i] = (int32_t)n_out;
        n_total += n_out;
    }
    if (x->n_cols != n_in) return shape_error(err, "matmul_group", x, x->n_rows, n_in);
    if (n_total > INT32_MAX) return la_err_set(err, LA_ERR_UNSUPPORTED, "cuda matmul_group: %lld outputs", (long long)n_total);
    if (c->recording) {
        LA_TRY(la_cu_record_op(c, OP_MATMUL_GROUP, layer, (int32_t)w[0], x, out[0], err));
        op_rec *r = &c->recs[c->n_recs - 1];
        r->n_w = n_w;
        if (n_w > 1) r->c = *out[1];
        if (n_w > 2) r->d = *out[2];
        return LA_OK;
    }
    prof_begin(c);
    LA_TRY(gemm(c, x->data, w0, x->n_rows, n_in, n_total, c->gemm_scratch, err));
    prof_end(c, g->slot);
    prof_begin(c);
    LA_TRY(la_cuda_split_cols(&sp, c->stream, err));
    prof_end(c, PROF_MATMUL_SPLIT);
    return LA_OK;
}

/* LA_ERR_INTERNAL naming `what` unless `layer` is a layer of the model and the pool exists. */
static la_status check_pool_layer(const cuda_backend *c, int32_t layer, const char *what, la_err *err) {
    if (layer < 0 || layer >= c->n_layers || !c->k_pool)
        return la_err_set(err, LA_ERR_INTERNAL, "cuda %s: layer %d (pool %s)", what, layer, c->k_pool ? "ok" : "missing");
    return LA_OK;
}

/* kv_write's parameters for `layer` of this step: K rows k (rotated in place), V rows v. */
static la_cuda_kv_write_params kv_write_params(const cuda_backend *c, int32_t layer, void *k, const void *v) {
    const la_backend_shape *m = &c->base.shape;
    const int64_t slab = (int64_t)layer * kv_slab_elems(c);
    return (la_cuda_kv_write_params){k, v, c->k_pool + slab, c->v_pool + slab, c->d_kpos, c->d_slots, c->n_tokens,
                                     m->n_kv_heads, m->head_dim, c->block_size, c->rope, c->rope_len};
}

static la_status cuda_kv_write(la_backend *be, int32_t layer, la_act *k, const la_act *v, la_err *err) {
    cuda_backend *c = cu(be);
    const la_backend_shape *m = &c->base.shape;
    NEED_BATCH(c);
    int64_t kvd = (int64_t)m->n_kv_heads * m->head_dim;
    LA_TRY(check_pool_layer(c, layer, "kv_write", err));
    if (k->n_rows != c->n_tokens || k->n_cols != kvd) return shape_error(err, "kv_write", k, c->n_tokens, kvd);
    if (v->n_rows != c->n_tokens || v->n_cols != kvd) return shape_error(err, "kv_write", v, c->n_tokens, kvd);
    if (c->recording) return la_cu_record_op(c, OP_KV_WRITE, layer, 0, k, v, err);
    LA_TRY(la_cu_flush_copies(c, err));
    prof_begin(c);
    la_cuda_kv_write_params p = kv_write_params(c, layer, k->data, v->data);
    LA_TRY(la_cuda_kv_write(&p, c->stream, err));
    prof_end(c, PROF_KV_WRITE);
    return LA_OK;
}

/* qkv_kv_write (backend.h). With LA_CUDA_FUSED_QKV and LA_CUDA_FUSED_KV_WRITE, at most
 * LA_CUDA_FUSED_MAX_ROWS rows: the fused QKV GEMM into gemm_scratch, then one qkv_kv_write
 * kernel where matmul_group and kv_write would launch split_cols and kv_write (bit-equal,
 * one launch fewer per layer). Otherwise matmul_group, then kv_write. */
static la_status cuda_qkv_kv_write(la_backend *be, const la_act *x, int32_t layer, la_act *q, la_act *k, la_act *v,
                                   la_err *err) {
    cuda_backend *c = cu(be);
    static const la_weight_kind w[3] = {LA_W_Q, LA_W_K, LA_W_V};
    const uint32_t need = LA_CUDA_FUSED_QKV | LA_CUDA_FUSED_KV_WRITE;
    if ((c->fused & need) != need || x->n_rows <= 0 || x->n_rows > LA_CUDA_FUSED_MAX_ROWS || !c->gemm_scratch) {
        LA_TRY(cuda_matmul_group(be, x, w, 3, layer, (la_act *const[]){q, k, v}, err));
        return cuda_kv_write(be, layer, k, v, err);
    }
    const la_backend_shape *m = &c->base.shape;
    NEED_BATCH(c);
    const int64_t qd = (int64_t)m->n_heads * m->head_dim, kvd = (int64_t)m->n_kv_heads * m->head_dim;
    const int64_t hidden = m->hidden_size;
    LA_TRY(check_pool_layer(c, layer, "qkv_kv_write", err));
    const la_bf16_t *w0 = la_cu_weight_ptr(c, LA_W_Q, layer);
    if (!w0 || la_cu_weight_ptr(c, LA_W_K, layer) != w0 + qd * hidden || la_cu_weight_ptr(c, LA_W_V, layer) != w0 + (qd + kvd) * hidden)
        return la_err_set(err, LA_ERR_INTERNAL, "cuda qkv_kv_write: W_q / W_k / W_v of layer %d not stacked", layer);
    if (x->n_rows != c->n_tokens || x->n_cols != hidden) return shape_error(err, "qkv_kv_write", x, c->n_tokens, hidden);
    if (q->n_rows != x->n_rows || q->n_cols != qd) return shape_error(err, "qkv_kv_write", q, x->n_rows, qd);
    if (k->n_rows != x->n_rows || k->n_cols != kvd) return shape_error(err, "qkv_kv_write", k, x->n_rows, kvd);
    if (v->n_rows != x->n_rows || v->n_cols != kvd) return shape_error(err, "qkv_kv_write", v, x->n_rows, kvd);
    if (c->recording) {
        LA_TRY(la_cu_record_op(c, OP_QKV_KV_WRITE, layer, 0, x, q, err));
        c->recs[c->n_recs - 1].c = *k;
        c->recs[c->n_recs - 1].d = *v;
        return LA_OK;
    }
    prof_begin(c);
    LA_TRY(gemm(c, x->data, w0, x->n_rows, hidden, qd + 2 * kvd, c->gemm_scratch, err));
    prof_end(c, PROF_MATMUL_QKV);
    LA_TRY(la_cu_flush_copies(c, err));
    prof_begin(c);
    la_cuda_qkv_kv_write_params p = {.kv = kv_write_params(c, layer, k->data, NULL), .qkv = c->gemm_scratch,
                                     .q = q->data, .v_act = v->data, .q_cols = (int32_t)qd};
    LA_TRY(la_cuda_qkv_kv_write(&p, c->stream, err));
    prof_end(c, PROF_KV_WRITE);
    return LA_OK;
}

static la_status cuda_attention(la_backend *be, int32_t layer, const la_act *q, la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    const la_backend_shape *m = &c->base.shape;
    NEED_BATCH(c);
    int64_t qd = (int64_t)m->n_heads * m->head_dim;
    LA_TRY(check_pool_layer(c, layer, "attention", err));
    if (q->n_rows != c->n_tokens || q->n_cols != qd) return shape_error(err, "attention", q, c->n_tokens, qd);
    if (out->n_rows != c->n_tokens || out->n_cols != qd) return shape_error(err, "attention", out, c->n_tokens, qd);
    if (c->recording) return la_cu_record_op(c, OP_ATTENTION, layer, 0, q, out, err);
    LA_TRY(la_cu_flush_copies(c, err));
    int64_t slab = (int64_t)layer * kv_slab_elems(c);
    la_cuda_attn_params p = {
        .q = q->data, .out = out->data, .k_pool = c->k_pool + slab, .v_pool = c->v_pool + slab,
        .pos = c->d_pos, .blocks = c->d_blocks, .rope = c->rope, .rope_len = c->rope_len,
        .combine = c->d_combine, .n_combine = c->n_combine, .merge = c->d_merge, .merge_count = c->merge_count,
        .part_o = c->part_o, .part_ml = c->part_ml,
        .n_heads = m->n_heads, .n_kv_heads = m->n_kv_heads, .head_dim = m->head_dim,
        .block_size = c->block_size, .heads_per_cta = c->heads_per_cta, .n_head_chunks = c->n_head_chunks,
        .scale_log2 = (float)(1.4426950408889634 / sqrt((double)m->head_dim)),
        .prefill_kernel = c->step_prefill_kernel, .combine_rows = c->combine_rows,
        .decode_instance = c->step_decode,
        .kv_written = c->copies_in_step ? NULL : c->d_written,
    };
    if (c->n_items_grouped) { /* shared-block attention first: its parts, merged by attn_combine */
        prof_begin(c);
        la_cuda_attn_params g = p;
        g.items = c->d_items_grouped;
        g.n_items = c->n_items_grouped;
        g.grows = c->d_grows;
        g.prefill_kernel = c->sh.kernel;
        LA_TRY(la_cuda_attn_prefill(&g, c->stream, err));
        prof_end(c, PROF_ATTN_SHARED);
    }
    prof_begin(c);
    p.items = c->d_items_prefill;
    p.n_items = c->n_items_prefill;
    LA_TRY(la_cuda_attn_prefill(&p, c->stream, err));
    prof_end(c, PROF_ATTN_PREFILL);
    prof_begin(c);
    p.items = c->d_items_decode;
    p.n_items = c->n_items_decode;
    LA_TRY(la_cuda_attn_decode(&p, c->stream, err));
    prof_end(c, PROF_ATTN_DECODE);
    if (c->n_combine) {
        prof_begin(c);
        LA_TRY(la_cuda_attn_combine(&p, c->stream, err));
        prof_end(c, PROF_ATTN_COMBINE);
    }
    return LA_OK;
}

static la_status cuda_swiglu(la_backend *be, la_act *gate, const la_act *up, la_err *err) {
    cuda_backend *c = cu(be);
    if (gate->n_rows != up->n_rows || gate->n_cols != up->n_cols)
        return shape_error(err, "swiglu", up, gate->n_rows, gate->n_cols);
    if (c->recording) return la_cu_record_op(c, OP_SWIGLU, 0, 0, gate, up, err);
    prof_begin(c);
    la_cuda_binary_params p = {gate->data, up->data, gate->n_rows * gate->n_cols};
    LA_TRY(la_cuda_swiglu(&p, c->stream, err));
    prof_end(c, PROF_SWIGLU);
    return LA_OK;
}

/* gate = silu(x W_gate^T) * (x W_up^T). With LA_CUDA_FUSED_SWIGLU and the gate/up group
 * fused for x's row count: one GEMM by [W_gate; W_up] into gemm_scratch, then one
 * swiglu_stacked launch straight from it (no column split). Otherwise matmul_group into
 * gate and up, then swiglu. up: [n, intermediate] scratch. */
static la_status cuda_gate_up_swiglu(la_backend *be, const la_act *x, int32_t layer, la_act *gate, la_act *up,
                                     la_err *err) {
    cuda_backend *c = cu(be);
    static const la_weight_kind w[2] = {LA_W_GATE, LA_W_UP};
    const int64_t inter = c->base.shape.intermediate_size, hidden = c->base.shape.hidden_size;
    const bool fuse = (c->fused & LA_CUDA_FUSED_SWIGLU) && (c->fused & LA_CUDA_FUSED_GATE_UP) &&
                      x->n_rows > 0 && x->n_rows <= LA_CUDA_FUSED_MAX_ROWS && c->gemm_scratch;
    if (!fuse) {
        LA_TRY(cuda_matmul_group(be, x, w, 2, layer, (la_act *const[]){gate, up}, err));
        return cuda_swiglu(be, gate, up, err);
    }
    const la_bf16_t *w0 = la_cu_weight_ptr(c, LA_W_GATE, layer);
    if (!w0 || la_cu_weight_ptr(c, LA_W_UP, layer) != w0 + inter * hidden)
        return la_err_set(err, LA_ERR_INTERNAL, "cuda gate_up_swiglu: W_gate / W_up of layer %d not stacked", layer);
    if (x->n_cols != hidden) return shape_error(err, "gate_up_swiglu", x, x->n_rows, hidden);
    if (gate->n_rows != x->n_rows || gate->n_cols != inter) return shape_error(err, "gate_up_swiglu", gate, x->n_rows, inter);
    if (up->n_rows != x->n_rows || up->n_cols != inter) return shape_error(err, "gate_up_swiglu", up, x->n_rows, inter);
    if (c->recording) {
        LA_TRY(la_cu_record_op(c, OP_GATE_UP_SWIGLU, layer, 0, x, gate, err));
        c->recs[c->n_recs - 1].c = *up;
        return LA_OK;
    }
    prof_begin(c);
    LA_TRY(gemm(c, x->data, w0, x->n_rows, hidden, 2 * inter, c->gemm_scratch, err));
    prof_end(c, PROF_MATMUL_GATE_UP);
    prof_begin(c);
    la_cuda_swiglu_stacked_params p = {c->gemm_scratch, gate->data, x->n_rows, (int32_t)inter};
    LA_TRY(la_cuda_swiglu_stacked(&p, c->stream, err));
    prof_end(c, PROF_SWIGLU);
    return LA_OK;
}

static la_status cuda_add(la_backend *be, la_act *x, const la_act *y, la_err *err) {
    cuda_backend *c = cu(be);
    if (x->n_rows != y->n_rows || x->n_cols != y->n_cols) return shape_error(err, "add", y, x->n_rows, x->n_cols);
    if (c->recording) return la_cu_record_op(c, OP_ADD, 0, 0, x, y, err);
    prof_begin(c);
    la_cuda_binary_params p = {x->data, y->data, x->n_rows * x->n_cols};
    LA_TRY(la_cuda_add(&p, c->stream, err));
    prof_end(c, PROF_ADD);
    return LA_OK;
}

static la_status cuda_gather_rows(la_backend *be, const la_act *x, la_act *out, la_err *err) {
    cuda_backend *c = cu(be);
    NEED_BATCH(c);
    if (x->n_rows != c->n_tokens) return shape_error(err, "gather_rows", x, c->n_tokens, x->n_cols);
    if (out->n_rows != c->n_logit_rows || out->n_cols != x->n_cols)
        return shape_error(err, "gather_rows", out, c->n_logit_rows, x->n_cols);
    if (c->recording) return la_cu_record_op(c, OP_GATHER_ROWS, 0, 0, x, out, err);
    prof_begin(c);
    la_cuda_gather_params p = {x->data, out->data, c->d_logit_rows, c->n_logit_rows, x->n_cols};
    LA_TRY(la_cuda_gather_rows(&p, c->stream, err));
    prof_end(c, PROF_GATHER_ROWS);
    return LA_OK;
}

/* Queue x's conversion to f32 and its copy into the pinned readback buffer (sized by
 * la_cu_reserve_readback); the caller waits. */
static la_status to_host_queue(cuda_backend *c, const la_act *x, la_err *err) {
    size_t n = (size_t)(x->n_rows * x->n_cols);
    c->prev_ids_rows = 0; /* the logits overwrite them */
    la_cuda_to_f32_params p = {x->data, c->f32_dev, (int64_t)n};
    LA_TRY(la_cuda_bf16_to_f32(&p, c->stream, err));
    CUDA_TRY(cudaMemcpyAsync(c->host_pinned, c->f32_dev, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream),
             "to_host copy");
    return LA_OK;
}

/* Queue the greedy token ids of x's rows (la_cuda_argmax) into the readback buffer (as
 * int32, sized by la_cu_reserve_readback for x->n_rows floats); la_cu_argmax_readback copies
 * them out. */
static la_status argmax_queue(cuda_backend *c, const la_act *x, la_err *err) {
    la_cuda_argmax_params p = {x->data, (int32_t *)c->f32_dev, (int32_t)x->n_rows, (int32_t)x->n_cols};
    LA_TRY(la_cuda_argmax(&p, c->stream, err));
    c->prev_ids_rows = (int32_t)x->n_rows;
    return LA_OK;
}


static la_status cuda_to_host(la_backend *be, const la_act *x, float *host, la_err *err) {
    cuda_backend *c = cu(be);
    size_t n = (size_t)(x->n_rows * x->n_cols);
    if (n == 0) return la_cu_flush_recorded(c, err);
    if (c->recording) return la_cu_graph_step_finish(c, OP_TO_HOST, x, host, err);
    prof_begin(c);
    LA_TRY(la_cu_reserve_readback(c, n, err));
    LA_TRY(to_host_queue(c, x, err));
    CUDA_TRY(cudaStreamSynchronize(c->stream), "forward pass");
    memcpy(host, c->host_pinned, n * sizeof(float));
    prof_end(c, PROF_TO_HOST);
    return LA_OK;
}

static la_status cuda_argmax_to_host(la_backend *be, const la_act *x, int32_t *ids, la_err *err) {
    cuda_backend *c = cu(be);
    if (x->n_rows == 0) return la_cu_flush_recorded(c, err);
    if (x->n_cols <= 0 || x->n_cols > INT32_MAX || x->n_rows > INT32_MAX)
        return la_err_set(err, LA_ERR_INVALID_ARG, "argmax: bad shape [%lld, %lld]", (long long)x->n_rows,
                          (long long)x->n_cols);
    if (c->recording) return la_cu_graph_step_finish(c, OP_ARGMAX, x, ids, err);
    prof_begin(c);
    LA_TRY(la_cu_reserve_readback(c, (size_t)x->n_rows, err));
    LA_TRY(argmax_queue(c, x, err));
    LA_TRY(la_cu_argmax_readback(c, (int32_t)x->n_rows, ids, err));
    prof_end(c, PROF_ARGMAX);
    return LA_OK;
}

/* argmax_begin (backend.h): argmax_to_host's kernels and copy, queued into the ring
 * (la_cu_argmax_readback) without a wait. */
static la_status cuda_argmax_begin(la_backend *be, const la_act *x, la_err *err) {
    cuda_backend *c = cu(be);
    if (x->n_rows <= 0 || x->n_cols <= 0 || x->n_cols > INT32_MAX || x->n_rows > INT32_MAX)
        return la_err_set(err, LA_ERR_INVALID_ARG, "argmax: bad shape [%lld, %lld]", (long long)x->n_rows,
                          (long long)x->n_cols);
    if (c->ids_count == 2) return la_err_set(err, LA_ERR_INTERNAL, "argmax_begin: two already pending");
    if (c->recording) return la_cu_graph_step_finish(c, OP_ARGMAX, x, NULL, err);
    LA_TRY(la_cu_reserve_readback(c, (size_t)x->n_rows, err));
    LA_TRY(argmax_queue(c, x, err));
    return la_cu_argmax_readback(c, (int32_t)x->n_rows, NULL, err);
}

static la_status cuda_argmax_end(la_backend *be, int32_t *ids, int32_t n, la_err *err) {
    cuda_backend *c = cu(be);
    if (c->ids_count == 0) return la_err_set(err, LA_ERR_INTERNAL, "argmax_end: nothing pending");
    const int32_t h = c->ids_head;
    if (n != c->ids_n[h]) return la_err_set(err, LA_ERR_INTERNAL, "argmax_end: %d ids asked, %d queued", n, c->ids_n[h]);
    c->ids_head = (h + 1) % 2;
    c->ids_count--;
    CUDA_TRY(cudaEventSynchronize(c->ids_ev[h]), "forward pass");
    memcpy(ids, c->ids_host[h], (size_t)n * sizeof(int32_t));
    return LA_OK;
}

static la_status cuda_synchronize(la_backend *be, la_err *err) {
    CUDA_TRY(cudaStreamSynchronize(cu(be)->stream), "synchronize");
    return LA_OK;
}

static la_status cuda_kv_read_slot(la_backend *be, int32_t layer, int64_t slot, float *k, float *v, la_err *err) {
    cuda_backend *c = cu(be);
    const la_backend_shape *m = &c->base.shape;
    if (layer < 0 || layer >= c->n_layers || slot < 0 || slot >= c->n_blocks * c->block_size)
        return la_err_set(err, LA_ERR_INVALID_ARG, "slot %lld of layer %d outside the pool", (long long)slot, layer);
    LA_TRY(la_cu_flush_recorded(c, err));
    LA_TRY(la_cu_flush_copies(c, err));
    int32_t hd = m->head_dim, nkv = m->n_kv_heads;
    LA_TRY(la_cu_reserve_readback(c, (size_t)nkv * hd, err));
    int64_t blk = slot / c->block_size, off = slot % c->block_size;
    int64_t base = (int64_t)layer * kv_slab_elems(c) + ((blk * nkv) * c->block_size + off) * hd;
    la_bf16_t *h = c->host_pinned;
    for (int pass = 0; pass < 2; pass++) {
        const la_bf16_t *src = (pass ? c->v_pool : c->k_pool) + base;
        CUDA_TRY(cudaMemcpy2DAsync(h, (size_t)hd * 2, src, (size_t)c->block_size * hd * 2, (size_t)hd * 2,
                                   (size_t)nkv, cudaMemcpyDeviceToHost, c->stream), "kv_read_slot");
        CUDA_TRY(cudaStreamSynchronize(c->stream), "kv_read_slot");
        float *dst = pass ? v : k;
        for (int32_t i = 0; i < nkv * hd; i++) dst[i] = la_bf16_to_f32(h[i]);
    }
    return LA_OK;
}

static la_status cuda_kv_deviation(la_backend *be, int32_t layer, const la_act *v, float *dev, la_err *err) {
    cuda_backend *c = cu(be);
    const la_backend_shape *m = &c->base.shape;
    NEED_BATCH(c);
    const int64_t kvd = (int64_t)m->n_kv_heads * m->head_dim;
    LA_TRY(check_pool_layer(c, layer, "kv_deviation", err));
    if (v->n_rows != c->n_tokens || v->n_cols != kvd) return shape_error(err, "kv_deviation", v, c->n_tokens, kvd);
    if (c->n_tokens == 0) return LA_OK;
    LA_TRY(la_cu_flush_recorded(c, err));
    LA_TRY(la_cu_flush_copies(c, err));
    LA_TRY(la_cu_reserve_readback(c, (size_t)c->n_tokens, err));
    c->prev_ids_rows = 0; /* f32_dev takes the deviations */
    la_cuda_kv_deviation_params p = {v->data, c->v_pool + (int64_t)layer * kv_slab_elems(c), c->d_slots, c->f32_dev,
                                     c->n_tokens, m->n_kv_heads, m->head_dim, c->block_size};
    LA_TRY(la_cuda_kv_deviation(&p, c->stream, err));
    CUDA_TRY(cudaMemcpyAsync(c->host_pinned, c->f32_dev, (size_t)c->n_tokens * sizeof(float), cudaMemcpyDeviceToHost,
                             c->stream), "kv_deviation copy");
    CUDA_TRY(cudaStreamSynchronize(c->stream), "kv_deviation");
    memcpy(dev, c->host_pinned, (size_t)c->n_tokens * sizeof(float));
    return LA_OK;
}

/* Queue one recorded operation through its eager function (c->recording is false here). */
la_status la_cu_run_op(cuda_backend *c, const op_rec *r, la_err *err) {
    la_backend *be = &c->base;
    la_act a = r->a, b = r->b;
    switch ((op_kind)r->kind) {
    case OP_EMBED: return cuda_embed(be, &a, err);
    case OP_RMSNORM: return cuda_rmsnorm(be, &a, (la_weight_kind)r->weight, r->layer, &b, err);
    case OP_MATMUL: return cuda_matmul(be, &a, (la_weight_kind)r->weight, r->layer, &b, err);
    case OP_MATMUL_GROUP: {
        la_act c2 = r->c, d2 = r->d;
        la_act *const out[LA_CUDA_SPLIT_MAX_PARTS] = {&b, &c2, &d2};
        la_weight_kind w[LA_CUDA_SPLIT_MAX_PARTS];
        for (int32_t i = 0; i < r->n_w && i < LA_CUDA_SPLIT_MAX_PARTS; i++) w[i] = (la_weight_kind)(r->weight + i);
        return cuda_matmul_group(be, &a, w, r->n_w, r->layer, out, err);
    }
    case OP_KV_WRITE: return cuda_kv_write(be, r->layer, &a, &b, err);
    case OP_ATTENTION: return cuda_attention(be, r->layer, &a, &b, err);
    case OP_SWIGLU: return cuda_swiglu(be, &a, &b, err);
    case OP_ADD: return cuda_add(be, &a, &b, err);
    case OP_GATHER_ROWS: return cuda_gather_rows(be, &a, &b, err);
    case OP_TO_HOST: return to_host_queue(c, &a, err);
    case OP_ARGMAX: return argmax_queue(c, &a, err);
    case OP_ADD_RMSNORM: {
        la_act out = r->c;
        return cuda_add_rmsnorm(be, &a, &b, (la_weight_kind)r->weight, r->layer, &out, err);
    }
    case OP_GATE_UP_SWIGLU: {
        la_act up = r->c;
        return cuda_gate_up_swiglu(be, &a, r->layer, &b, &up, err);
    }
    case OP_QKV_KV_WRITE: {
        la_act k = r->c, v = r->d;
        return cuda_qkv_kv_write(be, &a, r->layer, &b, &k, &v, err);
    }
    }
    return la_err_set(err, LA_ERR_INTERNAL, "cuda backend: recorded operation %d", r->kind);
}

/* ============================================================ lifecycle ============== */

static void cuda_destroy(la_backend *be) {
    cuda_backend *c = cu(be);
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < 2; i++) {
        if (c->ids_host[i]) cudaFreeHost(c->ids_host[i]);
        if (c->ids_ev[i]) cudaEventDestroy(c->ids_ev[i]);
    }
    la_cu_kv_copies_fini(c);
    la_cu_graph_cache_clear(c);
    free(c->recs);
    la_cu_free_weights(c);
    dev_free(c->k_pool);
    dev_free(c->v_pool);
    for (int32_t i = 0; i < c->n_free; i++) dev_free(c->free_list[i].ptr);
    for (int32_t i = 0; i < c->n_live; i++) dev_free(c->live[i].ptr);
    free(c->free_list);
    free(c->live);
    la_cu_staging_free(&c->meta);
    la_cu_staging_free(&c->jobs_stage);
    la_cu_shared_free(&c->sh);
    free(c->tiles);
    free(c->segs);
    free(c->smin);
    free(c->chk_keys);
    free(c->chk_lo);
    free(c->chk_hi);
    free(c->chk_tmpl);
    free(c->chk_same);
    free(c->items_prefill);
    free(c->items_decode);
    free(c->combine);
    free(c->merge);
    dev_free(c->part_o);
    dev_free(c->part_ml);
    dev_free(c->merge_count);
    free(c->jobs);
    dev_free(c->f32_dev);
    if (c->host_pinned) cudaFreeHost(c->host_pinned);
    if (c->ev_begin) cudaEventDestroy(c->ev_begin);
    if (c->ev_end) cudaEventDestroy(c->ev_end);
    if (c->blas) cublasDestroy(c->blas);
    dev_free(c->blas_ws);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
}

static const la_backend_ops k_cuda_ops = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .load_weights = la_cu_load_weights,
    .kv_alloc = la_cu_kv_alloc,
    .kv_block_bytes = la_cu_kv_block_bytes,
    .mem_free_bytes = la_cu_mem_free_bytes,
    .act_alloc = la_cu_act_alloc,
    .act_free = la_cu_act_free,
    .batch_begin = la_cu_batch_begin,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .matmul = cuda_matmul,
    .matmul_group = cuda_matmul_group,
    .kv_write = cuda_kv_write,
    .attention = cuda_attention,
    .swiglu = cuda_swiglu,
    .add = cuda_add,
    .gather_rows = cuda_gather_rows,
    .to_host = cuda_to_host,
    .argmax_begin = cuda_argmax_begin,
    .argmax_end = cuda_argmax_end,
    .argmax_to_host = cuda_argmax_to_host,
    .add_rmsnorm = cuda_add_rmsnorm,
    .gate_up_swiglu = cuda_gate_up_swiglu,
    .qkv_kv_write = cuda_qkv_kv_write,
    .kv_copy_rotate = la_cu_kv_copy_rotate,
    .kv_read_slot = cuda_kv_read_slot,
    .kv_deviation = cuda_kv_deviation,
    .host_alloc = la_cu_host_alloc,
    .host_free = la_cu_host_free,
    .kv_export = la_cu_kv_export,
    .kv_import = la_cu_kv_import,
    .kv_copy_poll = la_cu_kv_copy_poll,
    .synchronize = cuda_synchronize,
};

static la_status create_resources(cuda_backend *c, la_err *err) {
    int dev = 0;
    CUDA_TRY(cudaGetDevice(&dev), "cudaGetDevice");
    struct cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    snprintf(c->device_name, sizeof c->device_name, "%s", prop.name);
    c->n_sm = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    c->smem_optin = prop.sharedMemPerBlockOptin;
#ifdef LA_CUDA_SM90A
    c->wgmma = prop.major == 9 && prop.minor == 0;
#endif
    if (prop.major < 8)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "cuda backend: %s has compute capability %d.%d; bf16 "
                          "tensor cores need 8.0 or newer", prop.name, prop.major, prop.minor);
    la_cuda_pdl_set(c->pdl && prop.major >= 9 && la_cuda_pdl_supported()); /* griddepcontrol: sm_90 code */
    CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream");
    CUDA_TRY(cudaEventCreate(&c->ev_begin), "event");
    CUDA_TRY(cudaEventCreate(&c->ev_end), "event");
    CUDA_TRY(cudaEventCreateWithFlags(&c->meta.done, cudaEventDisableTiming), "event");
    CUDA_TRY(cudaEventCreateWithFlags(&c->jobs_stage.done, cudaEventDisableTiming), "event");
    cublasStatus_t st = cublasCreate(&c->blas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        return la_err_set(err, LA_ERR_BACKEND, "cublasCreate: %s", blas_status_name(st));
    }
    LA_TRY(dev_alloc(&c->blas_ws, LA_CUDA_BLAS_WORKSPACE_BYTES, "cuBLAS workspace", err));
    st = cublasSetStream(c->blas, c->stream);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetWorkspace(c->blas, c->blas_ws, LA_CUDA_BLAS_WORKSPACE_BYTES);
    if (st != CUBLAS_STATUS_SUCCESS)
        return la_err_set(err, LA_ERR_BACKEND, "cuBLAS stream/workspace: %s", blas_status_name(st));
    return LA_OK;
}

/* *k = the attn_prefill kernel (la_cuda_prefill_kernels) LA_ATTN_PREFILL=v<n> names by its
 * variant number; unset or empty -> -1 (the backend's default); another value is
 * LA_ERR_INVALID_ARG, naming the numbers there are. */
static la_status env_prefill_kernel(int *k, la_err *err) {
    const char *e = getenv("LA_ATTN_PREFILL");
    *k = -1;
    if (!e || !*e) return LA_OK;
    if (e[0] == 'v' && e[1] >= '0' && e[1] <= '9' && !e[2]) *k = la_cu_prefill_kernel_numbered(e[1] - '0');
    if (*k >= 0) return LA_OK;
    char names[64] = "";
    size_t n = 0;
    for (int i = LA_CUDA_PREFILL_KERNEL_COUNT - 1; i >= 0 && n < sizeof names; i--) /* lowest number first */
        n += (size_t)snprintf(names + n, sizeof names - n, "%sv%d", i == LA_CUDA_PREFILL_KERNEL_COUNT - 1 ? ""
                                                                   : i == 0 ? " or " : ", ",
                              (int)la_cuda_prefill_kernels[i].variant);
    return la_err_set(err, LA_ERR_INVALID_ARG, "LA_ATTN_PREFILL=%s: expected %s", e, names);
}

/* *on = the switch the environment variable `name` (LA_CUDA_GRAPHS, LA_CUDA_PDL,
 * LA_ATTN_LAZY_WS) sets: 0 -> false, 1 -> true, unset or empty -> dflt; another value is
 * LA_ERR_INVALID_ARG. */
static la_status env_switch(const char *name, bool dflt, bool *on, la_err *err) {
    const char *e = getenv(name);
    *on = dflt;
    if (!e || !*e) return LA_OK;
    if (strcmp(e, "0") == 0 || strcmp(e, "1") == 0) {
        *on = e[0] == '1';
        return LA_OK;
    }
    return la_err_set(err, LA_ERR_INVALID_ARG, "%s=%s: expected 0 or 1", name, e);
}

/* A 0 | 1 | auto switch from the environment: *mode 0, 1 or 2 (unset or empty: 2); another
 * value is LA_ERR_INVALID_ARG. The LA_CUDA_ATTN_SHARED_* and LA_CUDA_DECODE_PACKED_* modes
 * (cuda_hooks.h) are these numbers. */
_Static_assert(LA_CUDA_ATTN_SHARED_OFF == 0 && LA_CUDA_ATTN_SHARED_ON == 1 && LA_CUDA_ATTN_SHARED_AUTO == 2 &&
                   LA_CUDA_DECODE_PACKED_OFF == 0 && LA_CUDA_DECODE_PACKED_ON == 1 && LA_CUDA_DECODE_PACKED_AUTO == 2,
               "env_mode's numbers are the modes");
static la_status env_mode(const char *name, int32_t *mode, la_err *err) {
    const char *e = getenv(name);
    *mode = 2;
    if (!e || !*e || strcmp(e, "auto") == 0) return LA_OK;
    if (strcmp(e, "0") == 0 || strcmp(e, "1") == 0) {
        *mode = e[0] - '0';
        return LA_OK;
    }
    return la_err_set(err, LA_ERR_INVALID_ARG, "%s=%s: expected 0, 1 or auto", name, e);
}

la_status la_cuda_backend_create(la_backend **out, la_err *err) {
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev <= 0) {
        (void)cudaGetLastError();
        return la_err_set(err, LA_ERR_UNSUPPORTED, "device cuda: no CUDA device (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    }
    int prefill; /* la_cuda_attn_prefill_variant_set */
    LA_TRY(env_prefill_kernel(&prefill, err));
    uint32_t fused = LA_CUDA_FUSED_ALL; /* la_cuda_fused_gemm_set */
    const char *fused_env = getenv("LA_CUDA_FUSED_GEMM");
    if (fused_env && *fused_env) {
        if (strcmp(fused_env, "0") == 0) fused = 0;
        else if (strcmp(fused_env, "qkv") == 0) fused = LA_CUDA_FUSED_QKV;
        else if (strcmp(fused_env, "gate_up") == 0) fused = LA_CUDA_FUSED_GATE_UP;
        else if (strcmp(fused_env, "gemm") == 0) fused = LA_CUDA_FUSED_QKV | LA_CUDA_FUSED_GATE_UP;
        else if (strcmp(fused_env, "1") != 0)
            return la_err_set(err, LA_ERR_INVALID_ARG, "LA_CUDA_FUSED_GEMM=%s: expected 0, 1, qkv, gate_up or gemm",
                              fused_env);
    }
    /* the split targets, CTAs per SM: 2 in steps with prefill rows, 1 in decode-only steps;
     * LA_ATTN_SPLIT_CTAS sets both (sweeps) */
    int64_t ctas_env = 0;
    LA_TRY(la_env_int("LA_ATTN_SPLIT_CTAS", 1, 16, "CTAs per SM", &ctas_env, err));
    const int32_t split_ctas = ctas_env ? (int32_t)ctas_env : 2, split_ctas_decode = ctas_env ? (int32_t)ctas_env : 1;
    /* key tiles per split decode item at least (cuda_attn_plan.c; 0: its default; sweeps) */
    int64_t decode_min_split = 0;
    LA_TRY(la_env_int("LA_ATTN_DECODE_MIN_SPLIT", 1, 4096, "key tiles", &decode_min_split, err));
    int32_t shared, packed; /* la_cuda_attn_shared_set, la_cuda_attn_decode_packed_set */
    LA_TRY(env_mode("LA_ATTN_SHARED", &shared, err));
    LA_TRY(env_mode("LA_ATTN_DECODE_PACKED", &packed, err));
    bool lazy_ws, graphs, pdl; /* la_cuda_attn_lazy_ws_set (default off); la_cuda_graphs_enable; PDL */
    LA_TRY(env_switch("LA_ATTN_LAZY_WS", false, &lazy_ws, err));
    LA_TRY(env_switch("LA_CUDA_GRAPHS", true, &graphs, err));
    LA_TRY(env_switch("LA_CUDA_PDL", true, &pdl, err));
    cuda_backend *c = calloc(1, sizeof *c);
    if (!c) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: out of memory");
    c->pdl = pdl;
    c->fused = fused;
    c->split_ctas = split_ctas;
    c->split_ctas_decode = split_ctas_decode;
    c->decode_min_split = (int32_t)decode_min_split;
    c->sh.mode = shared;
    c->decode_packed = packed;
    c->lazy_ws = lazy_ws ? LA_CUDA_LAZY_WS_ON : LA_CUDA_LAZY_WS_OFF;
    c->base.ops = &k_cuda_ops;
    c->base.kv_dtype = LA_DTYPE_BF16;
    c->bad_token_row = -1;
    c->graphs = graphs;
    la_status s = create_resources(c, err);
    /* INVALID_ARG, not UNSUPPORTED: a test run asking for a wgmma kernel where it cannot run
     * must fail, not skip as if there were no GPU */
    if (s == LA_OK && prefill >= 0 && la_cuda_prefill_kernels[prefill].sm90a && !c->wgmma)
        s = la_err_set(err, LA_ERR_INVALID_ARG, "LA_ATTN_PREFILL=v%d: %s", (int)la_cuda_prefill_kernels[prefill].variant,
                       LA_CU_NO_WGMMA);
    if (s != LA_OK) {
        cuda_destroy(&c->base);
        return s;
    }
    /* the default: the best kernel this device and build can run */
    while (prefill < 0 || (la_cuda_prefill_kernels[prefill].sm90a && !c->wgmma)) prefill++;
    c->prefill_kernel = (la_cuda_prefill_kernel)prefill;
    *out = &c->base;
    return LA_OK;
}

bool la_cuda_backend_is(const la_backend *be) { return be && be->ops == &k_cuda_ops; }
