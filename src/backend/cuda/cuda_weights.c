/* CUDA backend, weights (cuda_internal.h): every weight converted to bf16 on the device
 * (upload raw, convert there: weights_init.cu), the stacked groups the fused GEMMs use, and
 * the RoPE (cos, sin) table.
 *
 * Each layer's W_q, W_k, W_v sit in one allocation stacked by rows, as do W_gate, W_up
 * (k_fused_groups below), so that the fused GEMMs of cuda_backend.c multiply by a whole
 * stack at once; the fixed scratch they write into is allocated here with the weights (a
 * captured graph's scratch address stays valid and nobody else holds it).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_hooks.h"
#include "backend/cuda/cuda_internal.h"
#include "base/dtype.h"

#define LA_CUDA_MAX_ROPE_POSITIONS (1 << 21)
#define LA_CUDA_UPLOAD_CHUNK_BYTES ((size_t)64 << 20)
/* --random-weights: uniform in [-a, a) with a = 0.02 sqrt(3), i.e. std 0.02 (HF's
 * initializer_range default); RMSNorm weights 1. */
#define LA_CUDA_RANDOM_WEIGHT_BOUND 0.034641016f

/* ============================================================ weights ================ */

static const fused_group k_fused_groups[] = {
    {LA_W_Q, 3, LA_CUDA_FUSED_QKV, PROF_MATMUL_QKV},
    {LA_W_GATE, 2, LA_CUDA_FUSED_GATE_UP, PROF_MATMUL_GATE_UP},
};
#define N_FUSED_GROUPS ((int)(sizeof k_fused_groups / sizeof k_fused_groups[0]))

/* The group that starts at kind k, or NULL. */
static const fused_group *group_starting_at(int k) {
    for (int g = 0; g < N_FUSED_GROUPS; g++)
        if ((int)k_fused_groups[g].first == k) return &k_fused_groups[g];
    return NULL;
}

/* Whether kind k lives in the allocation of an earlier kind (a later member of a group). */
static bool stacked_member(int k) {
    for (int g = 0; g < N_FUSED_GROUPS; g++)
        if (k > (int)k_fused_groups[g].first && k < (int)k_fused_groups[g].first + k_fused_groups[g].n_w) return true;
    return false;
}

/* The group that w[0..n_w) is exactly (its kinds in order), or NULL. */
const fused_group *la_cu_group_of(const la_weight_kind *w, int32_t n_w) {
    const fused_group *g = n_w > 0 ? group_starting_at((int)w[0]) : NULL;
    if (!g || g->n_w != n_w || n_w > LA_CUDA_SPLIT_MAX_PARTS) return NULL;
    for (int32_t i = 1; i < n_w; i++)
        if ((int)w[i] != (int)g->first + i) return NULL;
    return g;
}

la_bf16_t *la_cu_weight_ptr(cuda_backend *c, la_weight_kind k, int32_t layer) {
    if (k == LA_W_LM_HEAD) return c->lm_head;
    if (k == LA_W_FINAL_NORM) return c->final_norm;
    if (k == LA_W_EMBED) return c->embed;
    if (!c->layer_w || layer < 0 || layer >= c->n_layers || (int)k < 0 || k >= LA_W_KIND_COUNT) return NULL;
    return c->layer_w[(size_t)layer * LA_W_KIND_COUNT + k];
}

void la_cu_free_weights(cuda_backend *c) {
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->lm_head != c->embed) dev_free(c->lm_head);
    dev_free(c->embed);
    dev_free(c->final_norm);
    if (c->layer_w)
        for (int64_t i = 0; i < (int64_t)c->n_layers * LA_W_KIND_COUNT; i++)
            if (!stacked_member((int)(i % LA_W_KIND_COUNT))) dev_free(c->layer_w[i]);
    free(c->layer_w);
    dev_free(c->gemm_scratch);
    c->gemm_scratch = NULL;
    dev_free(c->inv_freq_dev);
    free(c->inv_freq);
    c->inv_freq = NULL;
    c->base.shape.rope_inv_freq = NULL;
    dev_free(c->rope);
    c->embed = c->final_norm = c->lm_head = NULL;
    c->layer_w = NULL;
    c->inv_freq_dev = NULL;
    c->rope = NULL;
    c->rope_len = 0;
    c->n_layers = 0;
}

/* Upload (and convert) one tensor of n_out x n_in elements into d, or initialise it:
 * RMSNorm weights to 1, the rest uniform from seed. Queued on the stream. */
static la_status fill_tensor(cuda_backend *c, const la_tensor_view *t, int64_t n_out, int64_t n_in, bool norm,
                             uint64_t seed, void *stage_dev, la_bf16_t *d, la_err *err) {
    int64_t n = n_out * n_in;
    la_status s = LA_OK;
    if (t) {
        size_t esz = la_dtype_size(t->dtype);
        if (t->n_out * t->n_in != n) {
            s = la_err_set(err, LA_ERR_FORMAT, "%s: %zu bytes, expected %lld elements of %zu bytes",
                           t->name, (size_t)(t->n_out * t->n_in) * esz, (long long)n, esz);
        } else if (t->dtype == LA_DTYPE_BF16) {
            cudaError_t e = cudaMemcpyAsync(d, t->data, (size_t)n * 2, cudaMemcpyHostToDevice, c->stream);
            if (e != cudaSuccess) s = cuda_fail(err, e, t->name);
        } else {
            int64_t chunk = (int64_t)(LA_CUDA_UPLOAD_CHUNK_BYTES / esz);
            for (int64_t off = 0; s == LA_OK && off < n; off += chunk) {
                int64_t cnt = n - off < chunk ? n - off : chunk;
                cudaError_t e = cudaMemcpyAsync(stage_dev, (const char *)t->data + off * (int64_t)esz,
                                                (size_t)cnt * esz, cudaMemcpyHostToDevice, c->stream);
                if (e != cudaSuccess) {
                    s = cuda_fail(err, e, t->name);
                    break;
                }
                la_cuda_convert_params p = {d + off, stage_dev, (int32_t)t->dtype, cnt};
                s = la_cuda_convert_to_bf16(&p, c->stream, err);
            }
        }
    } else if (norm) {
        la_cuda_fill_params p = {d, n, 0, 1.0f, 1.0f};
        s = la_cuda_fill_const(&p, c->stream, err);
    } else {
        la_cuda_fill_params p = {d, n, seed, -LA_CUDA_RANDOM_WEIGHT_BOUND, LA_CUDA_RANDOM_WEIGHT_BOUND};
        s = la_cuda_fill_uniform(&p, c->stream, err);
    }
    return s;
}

/* fill_tensor into a new allocation *out (left unchanged on failure). */
static la_status load_tensor(cuda_backend *c, const la_tensor_view *t, int64_t n_out, int64_t n_in,
                             bool norm, uint64_t seed, void *stage_dev, la_bf16_t **out, la_err *err) {
    la_bf16_t *d = NULL;
    LA_TRY(dev_alloc((void **)&d, (size_t)(n_out * n_in) * 2, "weights", err));
    la_status s = fill_tensor(c, t, n_out, n_in, norm, seed, stage_dev, d, err);
    if (s != LA_OK) {
        cudaStreamSynchronize(c->stream);
        dev_free(d);
        return s;
    }
    *out = d;
    return LA_OK;
}


static la_status load_all(cuda_backend *c, const la_backend_shape *shape, const la_weight_table *w,
                          void *stage_dev, la_err *err) {
    int32_t half = shape->head_dim / 2;
    float *inv = malloc(sizeof(float) * (size_t)half);
    if (!inv) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: out of memory");
    memcpy(inv, shape->rope_inv_freq, sizeof(float) * (size_t)half);
    c->inv_freq = inv; /* be->shape.rope_inv_freq */
    c->base.shape.rope_inv_freq = inv;
    la_status s = dev_alloc((void **)&c->inv_freq_dev, sizeof(float) * (size_t)half, "inv_freq", err);
    if (s == LA_OK) {
        cudaError_t e = cudaMemcpyAsync(c->inv_freq_dev, inv, sizeof(float) * (size_t)half,
                                        cudaMemcpyHostToDevice, c->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) s = cuda_fail(err, e, "inv_freq");
    }
    if (s != LA_OK) return s;
    int64_t first = shape->max_position_embeddings;
    if (first < 8192) first = 8192;
    if (first > 131072) first = 131072;
    LA_TRY(la_cu_ensure_rope(c, first, err));

    int64_t o, i;
    la_weight_shape(shape, LA_W_EMBED, &o, &i);
    const la_tensor_view *embed = w ? la_weight_table_at(w, LA_W_EMBED, 0) : NULL;
    const la_tensor_view *lm_head = w ? la_weight_table_at(w, LA_W_LM_HEAD, 0) : NULL;
    LA_TRY(load_tensor(c, embed, o, i, false, 1, stage_dev, &c->embed, err));
    LA_TRY(load_tensor(c, w ? la_weight_table_at(w, LA_W_FINAL_NORM, 0) : NULL, 1, i, true, 0, stage_dev,
                       &c->final_norm, err));
    bool tied = w ? lm_head->data == embed->data : shape->tie_word_embeddings;
    if (tied) c->lm_head = c->embed;
    else LA_TRY(load_tensor(c, lm_head, o, i, false, 2, stage_dev, &c->lm_head, err));
    for (int32_t l = 0; l < shape->n_layers; l++) {
        const la_tensor_view *src[LA_W_KIND_COUNT] = {0};
        for (int k = 0; w && k <= LA_W_DOWN; k++) {
            const la_tensor_view *t = la_weight_table_at(w, (la_weight_kind)k, l);
            src[k] = t->data ? t : NULL;
        }
        for (int k = 0; k <= LA_W_DOWN; k++)
            if (w && !src[k]) return la_err_set(err, LA_ERR_FORMAT, "layer %d: weight %d missing", l, k);
        la_bf16_t **lw_dev = &c->layer_w[(size_t)l * LA_W_KIND_COUNT];
        for (int k = 0; k <= LA_W_DOWN; k++) {
            const uint64_t seed = 1000 + (uint64_t)l * 16 + (uint64_t)k; /* per kind, stacked or not */
            const fused_group *g = group_starting_at(k);
            if (!g) {
                la_weight_shape(shape, (la_weight_kind)k, &o, &i);
                bool norm = k == LA_W_ATTN_NORM || k == LA_W_MLP_NORM;
                LA_TRY(load_tensor(c, src[k], o, i, norm, seed, stage_dev, &lw_dev[k], err));
                continue;
            }
            /* one allocation for the group, members stacked by rows (k_fused_groups) */
            int64_t rows = 0;
            for (int j = 0; j < g->n_w; j++) {
                la_weight_shape(shape, (la_weight_kind)(k + j), &o, &i);
                rows += o;
            }
            LA_TRY(dev_alloc((void **)&lw_dev[k], (size_t)(rows * i) * 2, "weights", err));
            la_bf16_t *at = lw_dev[k];
            for (int j = 0; j < g->n_w; j++) {
                la_weight_shape(shape, (la_weight_kind)(k + j), &o, &i);
                lw_dev[k + j] = at;
                LA_TRY(fill_tensor(c, src[k + j], o, i, false, seed + (uint64_t)j, stage_dev, at, err));
                at += o * i;
            }
            k += g->n_w - 1;
        }
        /* the kinds of other families (Qwen2's biases, Qwen3's q/k norms): where the shape has them */
        for (int k = LA_W_DOWN + 1; k < LA_W_FINAL_NORM; k++) {
            la_weight_shape(shape, (la_weight_kind)k, &o, &i);
            if (o == 0) continue;
            const la_tensor_view *t = w ? la_weight_table_at(w, (la_weight_kind)k, l) : NULL;
            if (w && !t->data) return la_err_set(err, LA_ERR_FORMAT, "layer %d: weight %d missing", l, k);
            const bool norm = k == LA_W_Q_NORM || k == LA_W_K_NORM;
            LA_TRY(load_tensor(c, t && t->data ? t : NULL, o, i, norm, 1000000 + (uint64_t)l * 16 + (uint64_t)k,
                               stage_dev, &lw_dev[k], err));
        }
    }
    /* the fused GEMMs' output before the split: the widest group at the most rows fused */
    int64_t widest = 0;
    for (int g = 0; g < N_FUSED_GROUPS; g++) {
        int64_t width = 0;
        for (int j = 0; j < k_fused_groups[g].n_w; j++) {
            la_weight_shape(shape, (la_weight_kind)((int)k_fused_groups[g].first + j), &o, &i);
            width += o;
        }
        if (width > widest) widest = width;
    }
    LA_TRY(dev_alloc((void **)&c->gemm_scratch, (size_t)(LA_CUDA_FUSED_MAX_ROWS * widest) * 2, "fused GEMM scratch",
                     err));
    CUDA_TRY(cudaStreamSynchronize(c->stream), "loading weights");
    return LA_OK;
}

la_status la_cu_load_weights(la_backend *be, const la_backend_shape *shape, const la_weight_table *w,
                             la_err *err) {
    cuda_backend *c = cu(be);
    if (shape->head_dim <= 0 || shape->head_dim % 8 != 0 || shape->head_dim > LA_ATTN_MAX_HEAD_DIM)
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "cuda backend: head_dim %d (the CUDA kernels need a multiple of 8, at most %d)",
                          shape->head_dim, LA_ATTN_MAX_HEAD_DIM);
    if (shape->n_kv_heads <= 0 || shape->n_heads % shape->n_kv_heads != 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "cuda backend: %d heads over %d KV heads",
                          shape->n_heads, shape->n_kv_heads);
    if (w && w->n_layers != shape->n_layers)
        return la_err_set(err, LA_ERR_INVALID_ARG, "cuda backend: weights have %d layers, config %d",
                          w->n_layers, shape->n_layers);
    LA_TRY(la_cu_flush_recorded(c, err));
    la_cu_graph_cache_clear(c); /* graphs launch with the weights they were captured with */
    la_cu_free_weights(c);
    /* the pool's geometry follows the config: drop it (kv_alloc comes next) */
    dev_free(c->k_pool);
    dev_free(c->v_pool);
    c->k_pool = c->v_pool = NULL;
    c->n_blocks = 0;
    c->n_jobs = 0;
    c->base.shape = *shape;
    c->base.shape.rope_inv_freq = NULL; /* the backend's copy: load_all */
    int32_t group = shape->n_heads / shape->n_kv_heads, hpc = 1;
    for (int32_t d = LA_ATTN_MAX_HEADS_PER_CTA; d >= 1; d--)
        if (group % d == 0) {
            hpc = d;
            break;
        }
    c->heads_per_cta = hpc;
    c->n_head_chunks = group / hpc;
    c->layer_w = calloc((size_t)shape->n_layers * LA_W_KIND_COUNT, sizeof(la_bf16_t *));
    if (!c->layer_w) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: out of memory");
    c->n_layers = shape->n_layers;
    void *stage_dev = NULL;
    la_status s = LA_OK;
    if (w) s = dev_alloc(&stage_dev, LA_CUDA_UPLOAD_CHUNK_BYTES, "weight upload buffer", err);
    if (s == LA_OK) s = load_all(c, shape, w, stage_dev, err);
    cudaStreamSynchronize(c->stream);
    dev_free(stage_dev);
    if (s != LA_OK) la_cu_free_weights(c);
    return s;
}

/* ============================================================ RoPE table ============= */

/* Make the table cover positions [0, need). */
la_status la_cu_ensure_rope(cuda_backend *c, int64_t need, la_err *err) {
    if (need <= c->rope_len) return LA_OK;
    if (need > LA_CUDA_MAX_ROPE_POSITIONS)
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "cuda backend: RoPE position %lld beyond the table limit of %d positions",
                          (long long)need - 1, LA_CUDA_MAX_ROPE_POSITIONS);
    int64_t len = 2 * (int64_t)c->rope_len > need ? 2 * (int64_t)c->rope_len : need;
    len = (len + 4095) / 4096 * 4096;
    if (len > LA_CUDA_MAX_ROPE_POSITIONS) len = LA_CUDA_MAX_ROPE_POSITIONS;
    int32_t half = c->base.shape.head_dim / 2;
    float2 *t = NULL;
    LA_TRY(dev_alloc((void **)&t, (size_t)len * (size_t)half * sizeof(float2), "RoPE table", err));
    la_cuda_rope_table_params p = {t, c->inv_freq_dev, half, (int32_t)len};
    la_status s = la_cuda_rope_table(&p, c->stream, err);
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (s == LA_OK && e != cudaSuccess) s = cuda_fail(err, e, "RoPE table");
    if (s != LA_OK) {
        dev_free(t);
        return s;
    }
    dev_free(c->rope);
    c->rope = t;
    c->rope_len = (int32_t)len;
    return LA_OK;
}
