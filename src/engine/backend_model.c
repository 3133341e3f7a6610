#include "engine/backend_model.h"

#include <stdlib.h>

#include "base/err.h"

void la_backend_shape_from_config(const la_model_config *cfg, float *inv_freq, la_backend_shape *shape) {
    la_rope_inv_freq(cfg, inv_freq);
    *shape = (la_backend_shape){
        .vocab_size = cfg->vocab_size,
        .hidden_size = cfg->hidden_size,
        .intermediate_size = cfg->intermediate_size,
        .n_layers = cfg->n_layers,
        .n_heads = cfg->n_heads,
        .n_kv_heads = cfg->n_kv_heads,
        .head_dim = cfg->head_dim,
        .rms_norm_eps = cfg->rms_norm_eps,
        .max_position_embeddings = cfg->max_position_embeddings,
        .tie_word_embeddings = cfg->tie_word_embeddings,
        .qkv_bias = cfg->qkv_bias,
        .qk_norm = cfg->qk_norm,
        .rope_inv_freq = inv_freq,
    };
}

/* t as a view [n_out, n_in]: n_in its innermost dimension, n_out the rest (a 1-D tensor is
 * [1, n]); a zeroed view for NULL. */
static la_tensor_view view_of(const la_st_tensor *t) {
    if (!t) return (la_tensor_view){0};
    const int64_t n = (int64_t)(t->n_bytes / la_dtype_size(t->dtype));
    const int64_t n_in = t->n_dims > 0 && t->shape[t->n_dims - 1] > 0 ? t->shape[t->n_dims - 1] : n;
    return (la_tensor_view){t->name, t->data, t->dtype, n_in > 0 ? n / n_in : 0, n_in};
}

la_status la_backend_load_model(la_backend *be, const la_model_config *cfg, const la_weights *w, la_err *err) {
    const int32_t half = cfg->head_dim / 2, rows = w && w->n_layers > 0 ? w->n_layers : 1;
    float *inv_freq = malloc(sizeof(float) * (size_t)(half > 0 ? half : 1));
    la_tensor_view *views = w ? calloc((size_t)rows * LA_W_KIND_COUNT, sizeof *views) : NULL;
    if (!inv_freq || (w && !views)) {
        free(inv_freq);
        free(views);
        return la_err_set(err, LA_ERR_NO_MEMORY, "loading the model into the %s backend: out of memory",
                          be->ops->name);
    }
    la_backend_shape shape;
    la_backend_shape_from_config(cfg, inv_freq, &shape);
    la_weight_table table = {w ? w->n_layers : 0, views};
    if (w) {
        views[LA_W_EMBED] = view_of(w->embed);
        views[LA_W_FINAL_NORM] = view_of(w->final_norm);
        views[LA_W_LM_HEAD] = view_of(w->lm_head);
        for (int32_t l = 0; l < w->n_layers; l++) {
            const la_layer_weights *lw = &w->layers[l];
            la_tensor_view *v = &views[(size_t)l * LA_W_KIND_COUNT];
            v[LA_W_ATTN_NORM] = view_of(lw->attn_norm);
            v[LA_W_Q] = view_of(lw->wq);
            v[LA_W_K] = view_of(lw->wk);
            v[LA_W_V] = view_of(lw->wv);
            v[LA_W_O] = view_of(lw->wo);
            v[LA_W_MLP_NORM] = view_of(lw->mlp_norm);
            v[LA_W_GATE] = view_of(lw->w_gate);
            v[LA_W_UP] = view_of(lw->w_up);
            v[LA_W_DOWN] = view_of(lw->w_down);
            v[LA_W_Q_BIAS] = view_of(lw->bq);
            v[LA_W_K_BIAS] = view_of(lw->bk);
            v[LA_W_V_BIAS] = view_of(lw->bv);
            v[LA_W_Q_NORM] = view_of(lw->q_norm);
            v[LA_W_K_NORM] = view_of(lw->k_norm);
        }
    }
    la_status s = be->ops->load_weights(be, &shape, w ? &table : NULL, err);
    free(views);
    free(inv_freq);
    return s;
}
