#include "model/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* Format a shape as "[a, b]" into buf. */
static void shape_str(char *buf, size_t cap, int32_t n_dims, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int32_t d = 0; d < n_dims && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Find `name` in f and check it has exactly the 1-D or 2-D shape [d0] / [d0, d1]
 * (d1 < 0: 1-D). */
static la_status bind(const la_st_file *f, const char *name, int64_t d0, int64_t d1,
                      const la_st_tensor **out, la_err *err) {
    const la_st_tensor *t = la_st_find(f, name);
    if (!t)
        return la_err_set(err, LA_ERR_FORMAT, "%s: tensor %s is missing", la_st_source_path(f),
                          name);
    int64_t want[2] = {d0, d1};
    int32_t want_dims = d1 < 0 ? 1 : 2;
    bool ok = t->n_dims == want_dims;
    for (int32_t d = 0; ok && d < want_dims; d++) ok = t->shape[d] == want[d];
    if (!ok) {
        char got_s[96], want_s[96];
        shape_str(got_s, sizeof got_s, t->n_dims, t->shape);
        shape_str(want_s, sizeof want_s, want_dims, want);
        return la_err_set(err, LA_ERR_FORMAT, "%s: tensor %s has shape %s, expected %s",
                          la_st_file_path(f, t->file_id), name, got_s, want_s);
    }
    *out = t;
    return LA_OK;
}

static la_status bind_layer(const la_st_file *f, const la_model_config *c, int32_t l,
                            la_layer_weights *lw, la_err *err) {
    const int64_t hidden = c->hidden_size, inter = c->intermediate_size;
    const int64_t q_dim = (int64_t)c->n_heads * c->head_dim;
    const int64_t kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    const struct {
        const char *suffix;
        int64_t d0, d1;
        const la_st_tensor **slot;
    } k[] = {
        {"input_layernorm.weight", hidden, -1, &lw->attn_norm},
        {"self_attn.q_proj.weight", q_dim, hidden, &lw->wq},
        {"self_attn.k_proj.weight", kv_dim, hidden, &lw->wk},
        {"self_attn.v_proj.weight", kv_dim, hidden, &lw->wv},
        {"self_attn.o_proj.weight", hidden, q_dim, &lw->wo},
        {"post_attention_layernorm.weight", hidden, -1, &lw->mlp_norm},
        {"mlp.gate_proj.weight", inter, hidden, &lw->w_gate},
        {"mlp.up_proj.weight", inter, hidden, &lw->w_up},
        {"mlp.down_proj.weight", hidden, inter, &lw->w_down},
    };
    char name[128];
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        snprintf(name, sizeof name, "model.layers.%d.%s", (int)l, k[i].suffix);
        LA_TRY(bind(f, name, k[i].d0, k[i].d1, k[i].slot, err));
    }
    const struct {
        bool want;
        const char *suffix;
        int64_t d0;
        const la_st_tensor **slot;
    } x[] = {
        {c->qkv_bias, "self_attn.q_proj.bias", q_dim, &lw->bq},
        {c->qkv_bias, "self_attn.k_proj.bias", kv_dim, &lw->bk},
        {c->qkv_bias, "self_attn.v_proj.bias", kv_dim, &lw->bv},
        {c->qk_norm, "self_attn.q_norm.weight", c->head_dim, &lw->q_norm},
        {c->qk_norm, "self_attn.k_norm.weight", c->head_dim, &lw->k_norm},
    };
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) {
        if (!x[i].want) continue;
        snprintf(name, sizeof name, "model.layers.%d.%s", (int)l, x[i].suffix);
        LA_TRY(bind(f, name, x[i].d0, -1, x[i].slot, err));
    }
    return LA_OK;
}

static la_status bind_all(la_weights *w, const la_model_config *c, la_err *err) {
    const la_st_file *f = w->file;
    LA_TRY(bind(f, "model.embed_tokens.weight", c->vocab_size, c->hidden_size, &w->embed, err));
    for (int32_t l = 0; l < c->n_layers; l++) LA_TRY(bind_layer(f, c, l, &w->layers[l], err));
    LA_TRY(bind(f, "model.norm.weight", c->hidden_size, -1, &w->final_norm, err));
    if (c->tie_word_embeddings) w->lm_head = w->embed;
    else LA_TRY(bind(f, "lm_head.weight", c->vocab_size, c->hidden_size, &w->lm_head, err));
    return LA_OK;
}

la_status la_weights_load(const char *dir, const la_model_config *cfg, la_weights **out,
                          la_err *err) {
    la_weights *w = calloc(1, sizeof *w);
    if (!w) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
    w->n_layers = cfg->n_layers;
    w->layers = calloc((size_t)(cfg->n_layers > 0 ? cfg->n_layers : 1), sizeof *w->layers);
    if (!w->layers) {
        free(w);
        return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
    }
    la_status s = la_st_open(dir, &w->file, err);
    if (s == LA_OK) s = bind_all(w, cfg, err);
    if (s != LA_OK) {
        la_weights_destroy(w);
        return s;
    }
    *out = w;
    return LA_OK;
}

void la_weights_destroy(la_weights *w) {
    if (!w) return;
    la_st_close(w->file);
    free(w->layers);
    free(w);
}
