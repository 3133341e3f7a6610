#include "model/forward.h"

#include "base/err.h"

typedef struct fwd_acts {
    la_act x, h, q, k, v, o, gate, up, last, last_norm, logits;
} fwd_acts;

static void free_acts(la_backend *be, fwd_acts *a) {
    la_act *all[] = {&a->x, &a->h, &a->q, &a->k, &a->v, &a->o,
                     &a->gate, &a->up, &a->last, &a->last_norm, &a->logits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data) be->ops->act_free(be, all[i]);
}

static la_status alloc_acts(la_backend *be, const la_batch *b, fwd_acts *a, la_err *err) {
    const la_model_config *m = &be->cfg;
    int64_t n = b->n_tokens, nl = b->n_logit_rows;
    int64_t qd = (int64_t)m->n_heads * m->head_dim, kvd = (int64_t)m->n_kv_heads * m->head_dim;
    const struct {
        la_act *act;
        int64_t rows, cols;
    } plan[] = {
        {&a->x, n, m->hidden_size}, {&a->h, n, m->hidden_size}, {&a->q, n, qd},
        {&a->k, n, kvd}, {&a->v, n, kvd}, {&a->o, n, qd},
        {&a->gate, n, m->intermediate_size}, {&a->up, n, m->intermediate_size},
        {&a->last, nl, m->hidden_size}, {&a->last_norm, nl, m->hidden_size},
        {&a->logits, nl, m->vocab_size},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++)
        LA_TRY(be->ops->act_alloc(be, plan[i].rows, plan[i].cols, plan[i].act, err));
    return LA_OK;
}

/* out[i] = x W_i^T for weights w[0..n_w) of one layer sharing the input x: one
 * matmul_group where the backend has it (CUDA: one GEMM for small row counts), else one
 * matmul per weight (CPU). */
static la_status matmuls(la_backend *be, const la_act *x, const la_weight_kind *w, int32_t n_w, int32_t layer,
                         la_act *const *out, la_err *err) {
    if (be->ops->matmul_group) return be->ops->matmul_group(be, x, w, n_w, layer, out, err);
    for (int32_t i = 0; i < n_w; i++) LA_TRY(be->ops->matmul(be, x, w[i], layer, out[i], err));
    return LA_OK;
}

/* x += y, then out = RMSNorm(x) w of layer: the backend's add_rmsnorm where it has one. */
static la_status add_rmsnorm(la_backend *be, la_act *x, const la_act *y, la_weight_kind w, int32_t layer,
                             la_act *out, la_err *err) {
    if (be->ops->add_rmsnorm) return be->ops->add_rmsnorm(be, x, y, w, layer, out, err);
    LA_TRY(be->ops->add(be, x, y, err));
    return be->ops->rmsnorm(be, x, w, layer, out, err);
}

/* gate = silu(x W_gate^T) * (x W_up^T) (up: scratch): the backend's gate_up_swiglu where
 * it has one. */
static la_status gate_up_swiglu(la_backend *be, const la_act *x, int32_t layer, la_act *gate, la_act *up,
                                la_err *err) {
    static const la_weight_kind gate_up[2] = {LA_W_GATE, LA_W_UP};
    if (be->ops->gate_up_swiglu) return be->ops->gate_up_swiglu(be, x, layer, gate, up, err);
    LA_TRY(matmuls(be, x, gate_up, 2, layer, (la_act *const[]){gate, up}, err));
    return be->ops->swiglu(be, gate, up, err);
}

/* q, k, v = x W_q^T, x W_k^T, x W_v^T of layer, then the KV write of k and v: the backend's
 * qkv_kv_write where it has one. */
static la_status qkv_kv_write(la_backend *be, const la_act *x, int32_t layer, la_act *q, la_act *k, la_act *v,
                              la_err *err) {
    static const la_weight_kind qkv[3] = {LA_W_Q, LA_W_K, LA_W_V};
    if (be->ops->qkv_kv_write) return be->ops->qkv_kv_write(be, x, layer, q, k, v, err);
    LA_TRY(matmuls(be, x, qkv, 3, layer, (la_act *const[]){q, k, v}, err));
    return be->ops->kv_write(be, layer, k, v, err);
}

/* The forward pass; the step's result goes to logits (f32, to_host) or, when ids is not
 * NULL, to ids (greedy token ids, argmax_to_host). */
static la_status run_layers(la_backend *be, const la_batch *b, fwd_acts *a, float *logits, int32_t *ids,
                            la_err *err) {
    const la_backend_ops *op = be->ops;
    const int32_t n_layers = be->cfg.n_layers;
    /* every row a logit row, in order (a decode step): the last residual add and the final
     * norm run as one add_rmsnorm, and no rows need gathering (the same values) */
    bool every_row = n_layers > 0 && b->n_logit_rows == b->n_tokens;
    for (int32_t i = 0; every_row && i < b->n_logit_rows; i++) every_row = b->logit_rows[i] == i;
    LA_TRY(op->batch_begin(be, b, err));
    LA_TRY(op->embed(be, &a->x, err));
    LA_TRY(op->rmsnorm(be, &a->x, LA_W_ATTN_NORM, 0, &a->h, err));
    for (int32_t l = 0; l < n_layers; l++) {
        /* attention block (h = the attention norm of x, from the step before) */
        LA_TRY(qkv_kv_write(be, &a->h, l, &a->q, &a->k, &a->v, err));
        LA_TRY(op->attention(be, l, &a->q, &a->o, err));
        LA_TRY(op->matmul(be, &a->o, LA_W_O, l, &a->h, err));
        /* x += attention output; MLP block */
        LA_TRY(add_rmsnorm(be, &a->x, &a->h, LA_W_MLP_NORM, l, &a->h, err));
        LA_TRY(gate_up_swiglu(be, &a->h, l, &a->gate, &a->up, err));
        LA_TRY(op->matmul(be, &a->gate, LA_W_DOWN, l, &a->h, err));
        /* x += MLP output, then the next layer's attention norm */
        if (l + 1 < n_layers) LA_TRY(add_rmsnorm(be, &a->x, &a->h, LA_W_ATTN_NORM, l + 1, &a->h, err));
        else if (every_row) LA_TRY(add_rmsnorm(be, &a->x, &a->h, LA_W_FINAL_NORM, 0, &a->last_norm, err));
        else LA_TRY(op->add(be, &a->x, &a->h, err));
    }
    if (b->n_logit_rows == 0) return LA_OK;
    if (!every_row) {
        LA_TRY(op->gather_rows(be, &a->x, &a->last, err));
        LA_TRY(op->rmsnorm(be, &a->last, LA_W_FINAL_NORM, 0, &a->last_norm, err));
    }
    LA_TRY(op->matmul(be, &a->last_norm, LA_W_LM_HEAD, 0, &a->logits, err));
    if (ids) return op->argmax_to_host(be, &a->logits, ids, err);
    return op->to_host(be, &a->logits, logits, err);
}

static la_status forward(la_backend *be, const la_batch *batch, float *logits, int32_t *ids, la_err *err) {
    if (batch->n_tokens <= 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "forward: empty batch");
    fwd_acts a = {0};
    la_status s = alloc_acts(be, batch, &a, err);
    if (s == LA_OK) s = run_layers(be, batch, &a, logits, ids, err);
    free_acts(be, &a);
    return s;
}

la_status la_forward(la_backend *be, const la_batch *batch, float *logits, la_err *err) {
    return forward(be, batch, logits, NULL, err);
}

la_status la_forward_argmax(la_backend *be, const la_batch *batch, int32_t *ids, la_err *err) {
    if (!be->ops->argmax_to_host)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "forward: the %s backend has no argmax", be->ops->name);
    return forward(be, batch, NULL, ids, err);
}
