/* The CPU backend's weights (cpu_internal.h): a checkpoint's tensors packed for the kernels in
 * the dtype they run in, or random weights of a shape. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "base/dtype.h"
#include "base/err.h"

/* Whether kind k is a matrix the products read (kept in the weight dtype); norms and
 * biases stay f32. */
static bool kind_is_matrix(int k) {
    return k == LA_W_Q || k == LA_W_K || k == LA_W_V || k == LA_W_O || k == LA_W_GATE || k == LA_W_UP ||
           k == LA_W_DOWN || k == LA_W_LM_HEAD || k == LA_W_EMBED;
}

/* The dtype a matrix whose checkpoint dtype is src is kept in: la_backend.weight_dtype when
 * set, else src where the kernels convert it fast, else f32. */
static la_dtype matrix_dtype(const cpu_backend *c, la_dtype src) {
    if (c->base.weight_dtype >= 0 && c->base.weight_dtype < LA_DTYPE_COUNT) return (la_dtype)c->base.weight_dtype;
    return la_cpu_dtype_fast(src) ? src : LA_DTYPE_F32;
}

/* n elements of f32 src to dst of dtype t (bf16 / f16: rounded to nearest even). */
void la_cpu_from_f32(void *dst, la_dtype t, const float *src, size_t n) {
    if (t == LA_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
    } else {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = t == LA_DTYPE_BF16 ? la_f32_to_bf16(src[i]) : la_f32_to_f16(src[i]);
    }
}

/* A weight matrix [n_out, n_in] of dtype st at src, packed for the kernels in dtype want
 * (cpu_kernels.h). */
static la_status load_matrix(const char *name, const void *src, la_dtype st, int64_t n_out, int64_t n_in,
                             la_dtype want, cpu_weight *out, la_err *err) {
    size_t n = (size_t)la_cpu_packed_elems(n_out, n_in);
    void *p = la_cpu_big_alloc(n * la_dtype_size(want), false);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory (%zu elements)", name, n);
    la_cpu_pack(p, want, src, st, n_out, n_in);
    out->data = p;
    out->dtype = want;
    return LA_OK;
}

/* Tensor t into memory of dtype want: a matrix packed, a vector (norm, bias) as it is. */
static la_status load_tensor(cpu_backend *c, const la_tensor_view *t, bool matrix, la_dtype want,
                             cpu_weight *out, la_err *err) {
    /* a matrix kept in another 16-bit dtype than its checkpoint's rounds its values */
    if (matrix && want != t->dtype && want != LA_DTYPE_F32) c->base.weights_rounded = true;
    if (matrix) return load_matrix(t->name, t->data, t->dtype, t->n_out, t->n_in, want, out, err);
    size_t n = (size_t)(t->n_out * t->n_in);
    float *p = malloc(n * sizeof(float) + 1);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory (%zu elements)", t->name, n);
    c->kern->to_f32(p, t->data, t->dtype, (int64_t)n);
    out->data = p;
    out->dtype = LA_DTYPE_F32;
    return LA_OK;
}

void la_cpu_free_weights(cpu_backend *c) {
    if (c->lm_head.data != c->embed.data) free(c->lm_head.data);
    free(c->embed.data);
    free(c->final_norm);
    for (int32_t l = 0; l < c->n_layers; l++)
        for (int k = 0; k < LA_W_KIND_COUNT; k++) free(c->layers[l].w[k].data);
    free(c->layers);
    free(c->inv_freq);
    c->base.shape.rope_inv_freq = NULL;
    free(c->rope_cs);
    c->rope_cs = NULL;
    c->rope_n = 0;
    c->embed.data = c->lm_head.data = NULL;
    c->final_norm = c->inv_freq = NULL;
    c->layers = NULL;
    c->n_layers = 0;
}

/* Random weights (w == NULL): uniform with std INIT_STD (as tools/write_random_checkpoint),
 * norm weights 1; each value a pure function of (tensor, index) through splitmix64.
 * Layer l's kind k is tensor 16 + l * RANDOM_KINDS_PER_LAYER + k: a constant, not
 * LA_W_KIND_COUNT, so that new weight kinds leave every value as it was. */
#define INIT_STD 0.02
#define RANDOM_KINDS_PER_LAYER 11

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static la_status random_f32(int64_t n, uint64_t tensor_id, bool norm, float **out, la_err *err) {
    float *p = malloc(sizeof(float) * (size_t)n);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "random weights: out of memory (%lld floats)",
                              (long long)n);
    const double half_width = INIT_STD * sqrt(3.0); /* uniform(-a, a) has std a / sqrt(3) */
    for (int64_t i = 0; i < n; i++) {
        if (norm) {
            p[i] = 1.0f;
        } else {
            double u = (double)(mix64(tensor_id * 0x100000001b3ull + (uint64_t)i) >> 11) * 0x1.0p-53;
            p[i] = (float)((2.0 * u - 1.0) * half_width);
        }
    }
    *out = p;
    return LA_OK;
}

/* Random tensor (above), [n_out, n_in]: a matrix packed in dtype t, a vector f32. */
static la_status random_tensor(int64_t n_out, int64_t n_in, uint64_t tensor_id, bool norm, bool matrix, la_dtype t,
                               cpu_weight *out, la_err *err) {
    float *p = NULL;
    LA_TRY(random_f32(n_out * n_in, tensor_id, norm, &p, err));
    if (!matrix) {
        out->data = p;
        out->dtype = LA_DTYPE_F32;
        return LA_OK;
    }
    la_status s = load_matrix("random weights", p, LA_DTYPE_F32, n_out, n_in, t, out, err);
    free(p);
    return s;
}

static la_status random_weights(cpu_backend *c, const la_backend_shape *m, la_err *err) {
    int64_t d = m->hidden_size;
    const la_dtype wt = matrix_dtype(c, LA_DTYPE_F32);
    c->base.weights_rounded = wt != LA_DTYPE_F32; /* the random values are drawn in f32 */
    cpu_weight norm;
    LA_TRY(random_tensor(m->vocab_size, d, 1, false, true, wt, &c->embed, err));
    LA_TRY(random_tensor(1, d, 2, true, false, LA_DTYPE_F32, &norm, err));
    c->final_norm = norm.data;
    if (m->tie_word_embeddings) c->lm_head = c->embed;
    else LA_TRY(random_tensor(m->vocab_size, d, 3, false, true, wt, &c->lm_head, err));
    for (int32_t l = 0; l < m->n_layers; l++)
        for (int k = 0; k < LA_W_FINAL_NORM; k++) { /* the per-layer kinds the model has */
            int64_t o, i;
            la_weight_shape(m, (la_weight_kind)k, &o, &i);
            if (o == 0) continue;
            /* the kinds after LA_W_DOWN in a tensor-id space of their own */
            uint64_t id = k <= LA_W_DOWN ? 16 + (uint64_t)l * RANDOM_KINDS_PER_LAYER + (uint64_t)k
                                         : ((uint64_t)1 << 40) + (uint64_t)l * 64 + (uint64_t)k;
            bool is_norm = k == LA_W_ATTN_NORM || k == LA_W_MLP_NORM || k == LA_W_Q_NORM || k == LA_W_K_NORM;
            LA_TRY(random_tensor(o, i, id, is_norm, kind_is_matrix(k), wt, &c->layers[l].w[k], err));
        }
    return LA_OK;
}

la_status la_cpu_load_weights(la_backend *be, const la_backend_shape *shape,
                                  const la_weight_table *w, la_err *err) {
    cpu_backend *c = cpu(be);
    la_cpu_free_weights(c);
    if (!c->kern->gemm_nt_bf16x) c->base.bf16_dot = false; /* no AVX512_BF16: the exact path */
    c->base.weights_rounded = false;
    c->base.shape = *shape;
    c->base.shape.rope_inv_freq = NULL;
    c->layers = calloc((size_t)shape->n_layers, sizeof(cpu_layer));
    c->inv_freq = malloc(sizeof(float) * (size_t)(shape->head_dim / 2));
    if (!c->layers || !c->inv_freq) {
        la_cpu_free_weights(c);
        return la_err_set(err, LA_ERR_NO_MEMORY, "cpu backend: out of memory");
    }
    c->n_layers = shape->n_layers;
    memcpy(c->inv_freq, shape->rope_inv_freq, sizeof(float) * (size_t)(shape->head_dim / 2));
    c->base.shape.rope_inv_freq = c->inv_freq;
    if (!w) {
        la_status s = random_weights(c, shape, err);
        if (s != LA_OK) la_cpu_free_weights(c);
        return s;
    }
    const la_tensor_view *embed = la_weight_table_at(w, LA_W_EMBED, 0);
    const la_tensor_view *lm_head = la_weight_table_at(w, LA_W_LM_HEAD, 0);
    cpu_weight norm = {0};
    la_status s = load_tensor(c, embed, true, matrix_dtype(c, embed->dtype), &c->embed, err);
    if (s == LA_OK) s = load_tensor(c, la_weight_table_at(w, LA_W_FINAL_NORM, 0), false, LA_DTYPE_F32, &norm, err);
    c->final_norm = norm.data;
    if (s == LA_OK) {
        if (lm_head->data == embed->data) c->lm_head = c->embed;
        else s = load_tensor(c, lm_head, true, matrix_dtype(c, lm_head->dtype), &c->lm_head, err);
    }
    for (int32_t l = 0; s == LA_OK && l < shape->n_layers; l++)
        for (int k = 0; s == LA_OK && k < LA_W_FINAL_NORM; k++) { /* the per-layer kinds */
            const la_tensor_view *t = la_weight_table_at(w, (la_weight_kind)k, l);
            int64_t o, i;
            la_weight_shape(shape, (la_weight_kind)k, &o, &i);
            if (o > 0 && !t->data)
                s = la_err_set(err, LA_ERR_INVALID_ARG, "cpu backend: layer %d lacks weight kind %d", (int)l, k);
            else if (t->data)
                s = load_tensor(c, t, kind_is_matrix(k), matrix_dtype(c, t->dtype), &c->layers[l].w[k], err);
        }
    if (s != LA_OK) la_cpu_free_weights(c);
    return s;
}

/* Weight of kind k and its [n_out, n_in] shape (NULL for an unknown kind or one the model
 * lacks). */
const cpu_weight *la_cpu_weight(cpu_backend *c, la_weight_kind k, int32_t layer, int64_t *n_out, int64_t *n_in) {
    int64_t o, i;
    la_weight_shape(&c->base.shape, k, &o, &i);
    if (o == 0) return NULL;
    if (n_out) *n_out = o;
    if (n_in) *n_in = i;
    const cpu_weight *w = k == LA_W_LM_HEAD ? &c->lm_head : k == LA_W_EMBED ? &c->embed : &c->layers[layer].w[k];
    return w->data ? w : NULL;
}

/* An f32 vector weight (norms, biases). */
const float *la_cpu_vec_weight(cpu_backend *c, la_weight_kind k, int32_t layer) {
    if (k == LA_W_FINAL_NORM) return c->final_norm;
    return c->layers[layer].w[k].data;
}
