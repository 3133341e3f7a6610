/* What every backend shares: destroy through the ops, weight shapes, the greedy token. The
 * backends themselves are listed in registry.c, which defines la_backend_create. */
#include "backend/backend.h"

#include <math.h>

int32_t la_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    float v = isnan(logits[0]) ? -INFINITY : logits[0]; /* NaN never wins (a NaN > x is false) */
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > v) v = logits[best = i];
    return best;
}

void la_backend_destroy(la_backend *be) {
    if (be) be->ops->destroy(be);
}

void la_weight_shape(const la_backend_shape *m, la_weight_kind k, int64_t *n_out, int64_t *n_in) {
    int64_t d = m->hidden_size, qd = (int64_t)m->n_heads * m->head_dim,
            kvd = (int64_t)m->n_kv_heads * m->head_dim, f = m->intermediate_size;
    int64_t o = 0, i = 0;
    switch (k) {
    case LA_W_Q: o = qd, i = d; break;
    case LA_W_K:
    case LA_W_V: o = kvd, i = d; break;
    case LA_W_O: o = d, i = qd; break;
    case LA_W_GATE:
    case LA_W_UP: o = f, i = d; break;
    case LA_W_DOWN: o = d, i = f; break;
    case LA_W_LM_HEAD:
    case LA_W_EMBED: o = m->vocab_size, i = d; break;
    case LA_W_ATTN_NORM:
    case LA_W_MLP_NORM:
    case LA_W_FINAL_NORM: o = 1, i = d; break;
    case LA_W_Q_BIAS: o = m->qkv_bias ? 1 : 0, i = qd; break;
    case LA_W_K_BIAS:
    case LA_W_V_BIAS: o = m->qkv_bias ? 1 : 0, i = kvd; break;
    case LA_W_Q_NORM:
    case LA_W_K_NORM: o = m->qk_norm ? 1 : 0, i = m->head_dim; break;
    default: break;
    }
    *n_out = o;
    *n_in = i;
}
