#include "engine/forward.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/timer.h"

typedef struct fwd_acts {
    la_act x, h, q, k, v, o, gate, up;
    /* the logit rows' share of the last layer after its attention (run_layers) */
    la_act last, last_q, last_o, last_h, last_gate, last_up, last_norm, logits;
} fwd_acts;

static void free_acts(la_backend *be, fwd_acts *a) {
    la_act *all[] = {&a->x, &a->h, &a->q, &a->k, &a->v, &a->o,
                     &a->gate, &a->up, &a->last, &a->last_q, &a->last_o, &a->last_h,
                     &a->last_gate, &a->last_up, &a->last_norm, &a->logits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->data) be->ops->act_free(be, all[i]);
}

/* How a step's last layer runs (run_layers): every_row, every row a logit row in order (a
 * decode step: the last layer on every row, its residual add and the final norm as one
 * add_rmsnorm); otherwise the logit rows alone after the K/V write, with W_q and the
 * attention too when rows_attn. */
typedef struct fwd_tail {
    bool every_row, rows_attn;
} fwd_tail;

static la_status alloc_acts(la_backend *be, const la_batch *b, fwd_tail t, fwd_acts *a, la_err *err) {
    const la_backend_shape *m = &be->shape;
    int64_t n = b->n_tokens, nl = b->n_logit_rows, nt = t.every_row ? 0 : nl, nq = t.rows_attn ? nl : 0;
    int64_t qd = (int64_t)m->n_heads * m->head_dim, kvd = (int64_t)m->n_kv_heads * m->head_dim;
    const struct {
        la_act *act;
        int64_t rows, cols;
    } plan[] = {
        {&a->x, n, m->hidden_size}, {&a->h, n, m->hidden_size}, {&a->q, n, qd},
        {&a->k, n, kvd}, {&a->v, n, kvd}, {&a->o, n, qd},
        {&a->gate, n, m->intermediate_size}, {&a->up, n, m->intermediate_size},
        {&a->last, nt, m->hidden_size}, {&a->last_q, nq, qd}, {&a->last_o, nt, qd},
        {&a->last_h, nt, m->hidden_size},
        {&a->last_gate, nt, m->intermediate_size}, {&a->last_up, nt, m->intermediate_size},
        {&a->last_norm, nl, m->hidden_size},
        {&a->logits, nl, m->vocab_size},
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++)
        LA_TRY(be->ops->act_alloc(be, plan[i].rows, plan[i].cols, plan[i].act, err));
    return LA_OK;
}

/* out[i] = x W_i^T (+ bias: matmul's) for weights w[0..n_w) of one layer sharing the input
 * x: one matmul_group where the backend has it (CUDA: one GEMM for small row counts) and the
 * weights have no bias, else one matmul per weight (CPU). */
static la_status matmuls(la_backend *be, const la_act *x, const la_weight_kind *w, int32_t n_w, int32_t layer,
                         la_act *const *out, la_err *err) {
    const bool biased = be->shape.qkv_bias && (w[0] == LA_W_Q || w[0] == LA_W_K);
    if (be->ops->matmul_group && !biased) return be->ops->matmul_group(be, x, w, n_w, layer, out, err);
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

/* Qwen3's q_norm / k_norm: each head of x ([n, heads * head_dim]) RMS-normalized over
 * head_dim with weight w of layer, in place (Qwen3Attention: q_norm(q_proj(x).view(...,
 * head_dim)) before RoPE). No-op for a model without them. */
static la_status head_norm(la_backend *be, la_act *x, la_weight_kind w, int32_t layer, la_err *err) {
    if (!be->shape.qk_norm) return LA_OK;
    const int32_t hd = be->shape.head_dim;
    la_act heads = {x->data, x->n_rows * (x->n_cols / hd), hd};
    return be->ops->rmsnorm(be, &heads, w, layer, &heads, err);
}

/* q, k, v = x W_q^T, x W_k^T, x W_v^T of layer (Qwen2: + biases; Qwen3: q and k head-normed),
 * then the KV write of k and v: the backend's fused qkv_kv_write where it has one and the
 * model is plain Llama. */
static la_status qkv_kv_write(la_backend *be, const la_act *x, int32_t layer, la_act *q, la_act *k, la_act *v,
                              la_err *err) {
    static const la_weight_kind qkv[3] = {LA_W_Q, LA_W_K, LA_W_V};
    const bool plain = !be->shape.qkv_bias && !be->shape.qk_norm;
    if (be->ops->qkv_kv_write && plain) return be->ops->qkv_kv_write(be, x, layer, q, k, v, err);
    LA_TRY(matmuls(be, x, qkv, 3, layer, (la_act *const[]){q, k, v}, err));
    LA_TRY(head_norm(be, q, LA_W_Q_NORM, layer, err));
    LA_TRY(head_norm(be, k, LA_W_K_NORM, layer, err));
    return be->ops->kv_write(be, layer, k, v, err);
}

/* op->batch_begin, its host time added to be->batch_begin_ms. */
static la_status begin_batch(la_backend *be, const la_batch *b, la_err *err) {
    const double t0 = la_now_ms();
    const la_status s = be->ops->batch_begin(be, b, err);
    be->batch_begin_ms += la_now_ms() - t0;
    return s;
}

/* Rows without logits from which the last layer's W_q and attention, too, run on the logit
 * rows alone (a second batch_begin, one-row sequences: logit_row_batch). Below it only W_o
 * and the MLP do: on a 64-token question the second batch_begin and the K/V GEMMs without
 * W_q (unfused) would cost about what they save (an estimate; bench/GPU_NOTES.md version
 * 29). */
#define LAST_LAYER_ATTN_MIN_ROWS 256

/* Begin the batch of b's logit rows alone, for the last layer's attention: logit row i of
 * b becomes row i, a one-row sequence at the same position with the block list of the
 * sequence it came from; its logit rows are 0 .. n_logit_rows - 1 in order. The K/V slots
 * of b are written by then, so each row sees what it saw in b. LA_ERR_INVALID_ARG for a
 * logit row in no sequence; LA_ERR_NO_MEMORY; the backend's batch_begin errors. */
static la_status logit_row_batch(la_backend *be, const la_batch *b, la_err *err) {
    const int32_t nl = b->n_logit_rows;
    const size_t n = (size_t)nl;
    void *mem = malloc(n * (4 * sizeof(int32_t) + sizeof(int64_t) + sizeof(la_batch_seq)));
    if (!mem) return la_err_set(err, LA_ERR_NO_MEMORY, "forward: the logit rows' batch: out of memory");
    int64_t *slots = mem;
    la_batch_seq *seqs = (la_batch_seq *)(slots + n);
    int32_t *tokens = (int32_t *)(seqs + n), *pos = tokens + n, *k_pos = pos + n, *rows = k_pos + n;
    int32_t s = 0;
    for (int32_t i = 0; i < nl; i++) {
        const int32_t r = b->logit_rows[i];
        /* the sequence holding row r: usually s or the next one (logit rows in row order) */
        int32_t k = 0;
        for (; k < b->n_seqs; k++) {
            const la_batch_seq *q = &b->seqs[(s + k) % b->n_seqs];
            if (r >= q->row0 && r < q->row0 + q->n_rows) break;
        }
        if (k == b->n_seqs || r < 0 || r >= b->n_tokens) {
            free(mem);
            return la_err_set(err, LA_ERR_INVALID_ARG, "forward: logit row %d is in no sequence of the batch", r);
        }
        s = (s + k) % b->n_seqs;
        seqs[i] = (la_batch_seq){i, 1, b->seqs[s].block0, b->seqs[s].n_blocks};
        tokens[i] = b->tokens[r], pos[i] = b->pos[r], k_pos[i] = b->k_pos[r], slots[i] = b->slots[r], rows[i] = i;
    }
    const la_batch sub = {nl, tokens, pos, k_pos, slots, nl, seqs, b->n_blocks, b->blocks, nl, rows};
    la_status st = begin_batch(be, &sub, err);
    free(mem);
    return st;
}

/* How run_layers hands the step's result over: logits (to_host), ids (argmax_to_host), or
 * queued for la_forward_argmax_end (argmax_begin). */
typedef enum fwd_out { FWD_LOGITS, FWD_IDS, FWD_QUEUE } fwd_out;

/* The forward pass; the step's result goes to logits (f32, to_host), to ids (greedy token
 * ids, argmax_to_host) or to the backend's queue (argmax_begin), by out.
 *
 * Unless every row is a logit row in order (a decode step), the last layer computes K and
 * V for every row (later steps attend to them) and the rest for the logit rows alone:
 * W_o, the MLP and the final norm always, and W_q and the attention too from
 * LAST_LAYER_ATTN_MIN_ROWS rows without logits on. Nothing else reads a row's last-layer
 * output (llama.cpp skips the same rows: inp_out_ids in its graph builders). A step with no
 * logit rows (documents being cached) ends at the last layer's K/V write. The logit rows'
 * values are the same computation on fewer rows (a GEMM of another row count may round
 * differently in its last bit). At 8K tokens this skips 3.0% of the FLOPs of a Llama-3-8B prefill
 * (bench_gpu.c prefill_flops: 4.0 of 131.9 TFLOP). */
static la_status run_layers(la_backend *be, const la_batch *b, fwd_tail t, fwd_acts *a, fwd_out out, float *logits,
                            int32_t *ids, la_err *err) {
    const la_backend_ops *op = be->ops;
    const int32_t n_layers = be->shape.n_layers, last = n_layers - 1;
    const bool every_row = t.every_row, rows_attn = t.rows_attn;
    LA_TRY(begin_batch(be, b, err));
    LA_TRY(op->embed(be, &a->x, err));
    LA_TRY(op->rmsnorm(be, &a->x, LA_W_ATTN_NORM, 0, &a->h, err));
    for (int32_t l = 0; l < n_layers; l++) {
        /* attention block (h = the attention norm of x, from the step before) */
        if (l == last && rows_attn) { /* K and V of every row; q of the logit rows below */
            static const la_weight_kind kv[2] = {LA_W_K, LA_W_V};
            LA_TRY(matmuls(be, &a->h, kv, 2, l, (la_act *const[]){&a->k, &a->v}, err));
            LA_TRY(head_norm(be, &a->k, LA_W_K_NORM, l, err));
            LA_TRY(op->kv_write(be, l, &a->k, &a->v, err));
            break;
        }
        LA_TRY(qkv_kv_write(be, &a->h, l, &a->q, &a->k, &a->v, err));
        if (l == last && !every_row) break; /* the logit rows' rest: below */
        LA_TRY(op->attention(be, l, &a->q, &a->o, err));
        LA_TRY(op->matmul(be, &a->o, LA_W_O, l, &a->h, err));
        /* x += attention output; MLP block */
        LA_TRY(add_rmsnorm(be, &a->x, &a->h, LA_W_MLP_NORM, l, &a->h, err));
        LA_TRY(gate_up_swiglu(be, &a->h, l, &a->gate, &a->up, err));
        LA_TRY(op->matmul(be, &a->gate, LA_W_DOWN, l, &a->h, err));
        /* x += MLP output, then the next layer's attention norm (the final norm after the
         * last layer) */
        if (l < last) LA_TRY(add_rmsnorm(be, &a->x, &a->h, LA_W_ATTN_NORM, l + 1, &a->h, err));
        else LA_TRY(add_rmsnorm(be, &a->x, &a->h, LA_W_FINAL_NORM, 0, &a->last_norm, err));
    }
    if (b->n_logit_rows == 0) return LA_OK;
    if (!every_row) { /* the last layer's rest, the logit rows only */
        LA_TRY(op->gather_rows(be, &a->x, &a->last, err));
        if (rows_attn) {
            LA_TRY(op->gather_rows(be, &a->h, &a->last_h, err));
            LA_TRY(logit_row_batch(be, b, err)); /* from here on, the logit rows are the batch */
            LA_TRY(op->matmul(be, &a->last_h, LA_W_Q, last, &a->last_q, err));
            LA_TRY(head_norm(be, &a->last_q, LA_W_Q_NORM, last, err));
            LA_TRY(op->attention(be, last, &a->last_q, &a->last_o, err));
        } else {
            LA_TRY(op->attention(be, last, &a->q, &a->o, err));
            LA_TRY(op->gather_rows(be, &a->o, &a->last_o, err));
        }
        LA_TRY(op->matmul(be, &a->last_o, LA_W_O, last, &a->last_h, err));
        LA_TRY(add_rmsnorm(be, &a->last, &a->last_h, LA_W_MLP_NORM, last, &a->last_h, err));
        LA_TRY(gate_up_swiglu(be, &a->last_h, last, &a->last_gate, &a->last_up, err));
        LA_TRY(op->matmul(be, &a->last_gate, LA_W_DOWN, last, &a->last_h, err));
        LA_TRY(add_rmsnorm(be, &a->last, &a->last_h, LA_W_FINAL_NORM, 0, &a->last_norm, err));
    }
    LA_TRY(op->matmul(be, &a->last_norm, LA_W_LM_HEAD, 0, &a->logits, err));
    if (out == FWD_QUEUE) return op->argmax_begin(be, &a->logits, err);
    if (out == FWD_IDS) return op->argmax_to_host(be, &a->logits, ids, err);
    return op->to_host(be, &a->logits, logits, err);
}

static la_status forward(la_backend *be, const la_batch *batch, fwd_out out, float *logits, int32_t *ids,
                         la_err *err) {
    if (batch->n_tokens <= 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "forward: empty batch");
    if (be->shape.n_layers < 1) return la_err_set(err, LA_ERR_INVALID_ARG, "forward: a model without layers");
    fwd_tail t = {batch->n_logit_rows == batch->n_tokens, false};
    for (int32_t i = 0; t.every_row && i < batch->n_logit_rows; i++) t.every_row = batch->logit_rows[i] == i;
    t.rows_attn = !t.every_row && batch->n_tokens - batch->n_logit_rows >= LAST_LAYER_ATTN_MIN_ROWS;
    fwd_acts a = {0};
    be->batch_begin_ms = 0;
    la_status s = alloc_acts(be, batch, t, &a, err);
    if (s == LA_OK) s = run_layers(be, batch, t, &a, out, logits, ids, err);
    free_acts(be, &a);
    return s;
}

la_status la_forward(la_backend *be, const la_batch *batch, float *logits, la_err *err) {
    return forward(be, batch, FWD_LOGITS, logits, NULL, err);
}

la_status la_forward_argmax(la_backend *be, const la_batch *batch, int32_t *ids, la_err *err) {
    if (!be->ops->argmax_to_host)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "forward: the %s backend has no argmax", be->ops->name);
    return forward(be, batch, FWD_IDS, NULL, ids, err);
}

la_status la_forward_argmax_begin(la_backend *be, const la_batch *batch, la_err *err) {
    if (!be->ops->argmax_begin || !be->ops->argmax_end)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "forward: the %s backend has no queued argmax", be->ops->name);
    if (batch->n_logit_rows <= 0) return la_err_set(err, LA_ERR_INVALID_ARG, "forward: a queued argmax without logit rows");
    return forward(be, batch, FWD_QUEUE, NULL, NULL, err);
}

la_status la_forward_argmax_end(la_backend *be, int32_t *ids, int32_t n, la_err *err) {
    if (!be->ops->argmax_end)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "forward: the %s backend has no queued argmax", be->ops->name);
    return be->ops->argmax_end(be, ids, n, err);
}

la_status la_forward_probe(la_backend *be, const la_batch *batch, float *dev, la_err *err) {
    const la_backend_ops *op = be->ops;
    if (batch->n_tokens <= 0 || batch->n_logit_rows != 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "probe: %d rows, %d logit rows (rows without logits wanted)",
                          batch->n_tokens, batch->n_logit_rows);
    if (!op->kv_deviation)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "probe: the %s backend has no kv_deviation", op->name);
    if (be->shape.n_layers < 2) {
        memset(dev, 0, sizeof(float) * (size_t)batch->n_tokens);
        return LA_OK;
    }
    fwd_acts a = {0}; /* no logit rows: the last layer's logit-row activations have none */
    la_status s = alloc_acts(be, batch, (fwd_tail){false, false}, &a, err);
    if (s == LA_OK) s = op->batch_begin(be, batch, err);
    if (s == LA_OK) s = op->embed(be, &a.x, err);
    if (s == LA_OK) s = op->rmsnorm(be, &a.x, LA_W_ATTN_NORM, 0, &a.h, err);
    /* layer 0: the query alone (its K and V are the cached ones), attention, MLP */
    if (s == LA_OK) s = op->matmul(be, &a.h, LA_W_Q, 0, &a.q, err);
    if (s == LA_OK) s = head_norm(be, &a.q, LA_W_Q_NORM, 0, err);
    if (s == LA_OK) s = op->attention(be, 0, &a.q, &a.o, err);
    if (s == LA_OK) s = op->matmul(be, &a.o, LA_W_O, 0, &a.h, err);
    if (s == LA_OK) s = add_rmsnorm(be, &a.x, &a.h, LA_W_MLP_NORM, 0, &a.h, err);
    if (s == LA_OK) s = gate_up_swiglu(be, &a.h, 0, &a.gate, &a.up, err);
    if (s == LA_OK) s = op->matmul(be, &a.gate, LA_W_DOWN, 0, &a.h, err);
    if (s == LA_OK) s = add_rmsnorm(be, &a.x, &a.h, LA_W_ATTN_NORM, 1, &a.h, err);
    /* layer 1's V in context against the cached one */
    if (s == LA_OK) s = op->matmul(be, &a.h, LA_W_V, 1, &a.v, err);
    if (s == LA_OK) s = op->kv_deviation(be, 1, &a.v, dev, err);
    free_acts(be, &a);
    return s;
}
