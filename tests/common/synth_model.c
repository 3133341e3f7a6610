/* The synthetic model: synth_model.h. */
#include "common/synth_model.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/dtype.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
double la_test_urand(void) { /* [0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
float la_test_bf16_round(float x) { return la_bf16_to_f32(la_f32_to_bf16(x)); }

static la_st_tensor *synth_tensor(la_test_synth *s, int64_t rows, int64_t cols, float lo, float hi) {
    la_st_tensor *t = &s->t[s->n_t++];
    int64_t n = rows * cols;
    uint16_t *d = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) d[i] = la_f32_to_bf16((float)(lo + (hi - lo) * la_test_urand()));
    t->name = "synthetic";
    t->dtype = LA_DTYPE_BF16;
    t->n_dims = rows == 1 ? 1 : 2;
    t->shape[0] = rows == 1 ? cols : rows;
    t->shape[1] = rows == 1 ? 0 : cols;
    t->data = d;
    t->n_bytes = (size_t)n * 2;
    return t;
}

void la_test_synth_init(la_test_synth *s, int hidden, int n_heads, int n_kv, int head_dim, int inter, int vocab,
                       int n_layers) {
    memset(s, 0, sizeof *s);
    la_model_config *c = &s->cfg;
    c->vocab_size = vocab;
    c->hidden_size = hidden;
    c->intermediate_size = inter;
    c->n_layers = n_layers;
    c->n_heads = n_heads;
    c->n_kv_heads = n_kv;
    c->head_dim = head_dim;
    c->rms_norm_eps = 1e-5;
    c->rope_theta = 500000.0;
    c->rope_scaling = (la_rope_scaling){LA_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192};
    c->max_position_embeddings = 131072;
    c->bos_id = -1;
    s->t = calloc((size_t)(3 + 9 * n_layers), sizeof(la_st_tensor));
    s->layers = calloc((size_t)n_layers, sizeof(la_layer_weights));
    int64_t qd = (int64_t)n_heads * head_dim, kvd = (int64_t)n_kv * head_dim;
    s->w.embed = synth_tensor(s, vocab, hidden, -1.f, 1.f);
    s->w.final_norm = synth_tensor(s, 1, hidden, 0.5f, 1.5f);
    s->w.lm_head = synth_tensor(s, vocab, hidden, -0.1f, 0.1f);
    for (int l = 0; l < n_layers; l++) {
        la_layer_weights *lw = &s->layers[l];
        lw->attn_norm = synth_tensor(s, 1, hidden, 0.5f, 1.5f);
        lw->wq = synth_tensor(s, qd, hidden, -0.1f, 0.1f);
        lw->wk = synth_tensor(s, kvd, hidden, -0.1f, 0.1f);
        lw->wv = synth_tensor(s, kvd, hidden, -0.1f, 0.1f);
        lw->wo = synth_tensor(s, hidden, qd, -0.1f, 0.1f);
        lw->mlp_norm = synth_tensor(s, 1, hidden, 0.5f, 1.5f);
        lw->w_gate = synth_tensor(s, inter, hidden, -0.1f, 0.1f);
        lw->w_up = synth_tensor(s, inter, hidden, -0.1f, 0.1f);
        lw->w_down = synth_tensor(s, hidden, inter, -0.1f, 0.1f);
    }
    s->w.n_layers = n_layers;
    s->w.layers = s->layers;
}

void la_test_synth_free(la_test_synth *s) {
    for (int i = 0; i < s->n_t; i++) free((void *)s->t[i].data);
    free(s->t);
    free(s->layers);
}

