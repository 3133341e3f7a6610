#include "model/config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "base/json.h"

/* ---- field helpers ------------------------------------------------------------ */

/* Read an int field that must be a positive int32 when present. */
static la_status get_pos_i32(const cJSON *obj, const char *key, bool required, int32_t *out,
                             const char *what, la_err *err) {
    int64_t v = INT64_MIN; /* stays so when the key is absent or null */
    LA_TRY(la_json_get_int64(obj, key, required, &v, what, err));
    if (v == INT64_MIN) return LA_OK;
    if (v <= 0 || v > INT32_MAX)
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s=%lld must be a positive 32-bit integer",
                          what, key, (long long)v);
    *out = (int32_t)v;
    return LA_OK;
}

/* Append token ids from `v` (a number or a list of numbers; null ignored) to cfg's eos
 * list, skipping duplicates. */
static la_status add_eos_ids(la_model_config *cfg, const cJSON *v, const char *what,
                             la_err *err) {
    if (!v || cJSON_IsNull(v)) return LA_OK;
    const cJSON *one = v;
    bool is_list = cJSON_IsArray(v);
    if (is_list) one = v->child;
    else if (!cJSON_IsNumber(v))
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: eos_token_id must be an integer or a list of integers", what);
    for (; one; one = is_list ? one->next : NULL) {
        if (!cJSON_IsNumber(one) || one->valuedouble != floor(one->valuedouble) ||
            one->valuedouble < 0 || one->valuedouble > INT32_MAX)
            return la_err_set(err, LA_ERR_FORMAT,
                              "%s: eos_token_id holds %s, not a non-negative 32-bit integer",
                              what, cJSON_IsNumber(one) ? "a bad number" : "a non-number");
        int32_t id = (int32_t)one->valuedouble;
        bool seen = false;
        for (int32_t i = 0; i < cfg->n_eos_ids; i++) seen |= cfg->eos_ids[i] == id;
        if (seen) continue;
        if (cfg->n_eos_ids == LA_MAX_EOS_IDS)
            return la_err_set(err, LA_ERR_UNSUPPORTED, "%s: more than %d eos token ids", what,
                              LA_MAX_EOS_IDS);
        cfg->eos_ids[cfg->n_eos_ids++] = id;
    }
    return LA_OK;
}

/* The families this engine runs: model_type and the architectures class of each. */
static const struct {
    const char *model_type, *architecture;
    la_model_arch arch;
} k_archs[] = {
    {"llama", "LlamaForCausalLM", LA_ARCH_LLAMA},
    {"mistral", "MistralForCausalLM", LA_ARCH_MISTRAL},
    {"qwen2", "Qwen2ForCausalLM", LA_ARCH_QWEN2},
    {"qwen3", "Qwen3ForCausalLM", LA_ARCH_QWEN3},
};
#define N_ARCHS (int)(sizeof k_archs / sizeof k_archs[0])

const char *la_model_arch_name(la_model_arch a) {
    for (int i = 0; i < N_ARCHS; i++)
        if (k_archs[i].arch == a) return k_archs[i].model_type;
    return "?";
}

/* The family: model_type's, which every architectures entry must agree with (a
 * *ForCausalLM of another family is a contradiction, refused rather than guessed); without
 * model_type, the one family architectures names. *out: index into k_archs. */
static la_status resolve_arch(const cJSON *root, const char *model_type, const char *what, int *out,
                              la_err *err) {
    int by_type = -1;
    for (int i = 0; model_type && i < N_ARCHS; i++)
        if (!strcmp(model_type, k_archs[i].model_type)) by_type = i;
    if (model_type && by_type < 0)
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "%s: model_type \"%s\" is not supported (llama, mistral, qwen2, qwen3)", what, model_type);
    int by_class = -1;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    for (const cJSON *x = cJSON_IsArray(a) ? a->child : NULL; x; x = x->next) {
        if (!cJSON_IsString(x)) continue;
        int k = -1;
        for (int i = 0; i < N_ARCHS; i++)
            if (!strcmp(x->valuestring, k_archs[i].architecture)) k = i;
        bool causal_lm = strstr(x->valuestring, "ForCausalLM") != NULL;
        if ((k < 0 && causal_lm) || (k >= 0 && ((by_type >= 0 && k != by_type) || (by_class >= 0 && k != by_class))))
            return la_err_set(err, k < 0 ? LA_ERR_UNSUPPORTED : LA_ERR_FORMAT,
                              "%s: architectures names %.64s, %s", what, x->valuestring,
                              k < 0 ? "which is not supported (LlamaForCausalLM, MistralForCausalLM, "
                                      "Qwen2ForCausalLM, Qwen3ForCausalLM)"
                                    : "another family than the rest of the config");
        if (k >= 0) by_class = k;
    }
    if (by_type < 0 && by_class < 0)
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: missing model_type (and architectures lists none of LlamaForCausalLM, "
                          "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)",
                          what);
    *out = by_type >= 0 ? by_type : by_class;
    return LA_OK;
}

/* A sliding window (Mistral v0.1, Qwen2 with use_sliding_window) is attention over the last
 * `window` keys only; over contexts no longer than the window it is full attention. So the
 * context is capped at the window instead of implementing the window: exact, shorter. */
static la_status parse_sliding_window(const cJSON *root, la_model_config *c, const char *what, la_err *err) {
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(root, "sliding_window");
    if (!sw || cJSON_IsNull(sw)) return LA_OK;
    if (c->arch == LA_ARCH_QWEN2 || c->arch == LA_ARCH_QWEN3) { /* they keep the key but use it only when asked */
        bool use = false;
        LA_TRY(la_json_get_bool(root, "use_sliding_window", false, &use, what, err));
        if (!use) return LA_OK;
    }
    int64_t w = 0;
    LA_TRY(la_json_get_int64(root, "sliding_window", false, &w, what, err));
    if (w <= 0) return la_err_set(err, LA_ERR_FORMAT, "%s: sliding_window=%lld must be positive", what, (long long)w);
    if (w < c->max_position_embeddings) {
        c->sliding_window = w;
        c->max_position_embeddings = w;
    }
    return LA_OK;
}

/* ---- RoPE parameters -------------------------------------------------------------
 * transformers 4 wrote {"rope_scaling": {"rope_type"|"type": ..., "factor": ...},
 * "rope_theta": T}; transformers 5 writes {"rope_parameters": {"rope_type": ...,
 * "rope_theta": T, "factor": ...}}. Both reduce to one dict plus fallbacks. */
static la_status parse_rope(const cJSON *root, la_model_config *c, const char *what,
                            la_err *err) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    const char *dict_key = "rope_scaling";
    if (!rs || cJSON_IsNull(rs)) {
        rs = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
        dict_key = "rope_parameters";
    }
    if (rs && cJSON_IsNull(rs)) rs = NULL;
    if (rs && !cJSON_IsObject(rs))
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s must be an object or null", what,
                          dict_key);

    c->rope_theta = 10000.0;
    LA_TRY(la_json_get_double(root, "rope_theta", false, &c->rope_theta, what, err));
    c->rope_scaling = (la_rope_scaling){.type = LA_ROPE_DEFAULT, .factor = 1.0};
    if (rs) {
        char dwhat[300];
        snprintf(dwhat, sizeof dwhat, "%s: %s", what, dict_key);
        LA_TRY(la_json_get_double(rs, "rope_theta", false, &c->rope_theta, dwhat, err));

        const char *type = "default";
        LA_TRY(la_json_get_string(rs, "type", false, &type, dwhat, err));
        LA_TRY(la_json_get_string(rs, "rope_type", false, &type, dwhat, err));
        if (strcmp(type, "default") == 0) {
            c->rope_scaling.type = LA_ROPE_DEFAULT;
        } else if (strcmp(type, "linear") == 0) {
            c->rope_scaling.type = LA_ROPE_LINEAR;
        } else if (strcmp(type, "llama3") == 0) {
            c->rope_scaling.type = LA_ROPE_LLAMA3;
        } else {
            return la_err_set(err, LA_ERR_UNSUPPORTED,
                              "%s: rope_type \"%s\" is not supported (supported: default, "
                              "linear, llama3)",
                              dwhat, type);
        }
        double partial = 1.0;
        LA_TRY(la_json_get_double(rs, "partial_rotary_factor", false, &partial, dwhat, err));
        if (partial != 1.0)
            return la_err_set(err, LA_ERR_UNSUPPORTED,
                              "%s: partial_rotary_factor=%g is not supported (only 1)", dwhat,
                              partial);
        if (c->rope_scaling.type != LA_ROPE_DEFAULT) {
            LA_TRY(la_json_get_double(rs, "factor", true, &c->rope_scaling.factor, dwhat, err));
            if (!(c->rope_scaling.factor > 0))
                return la_err_set(err, LA_ERR_FORMAT, "%s: factor=%g must be positive", dwhat,
                                  c->rope_scaling.factor);
        }
        if (c->rope_scaling.type == LA_ROPE_LLAMA3) {
            la_rope_scaling *s = &c->rope_scaling;
            LA_TRY(la_json_get_double(rs, "low_freq_factor", true, &s->low_freq_factor, dwhat,
                                      err));
            LA_TRY(la_json_get_double(rs, "high_freq_factor", true, &s->high_freq_factor,
                                      dwhat, err));
            if (!(s->low_freq_factor > 0) || !(s->low_freq_factor < s->high_freq_factor))
                return la_err_set(err, LA_ERR_FORMAT,
                                  "%s: need 0 < low_freq_factor < high_freq_factor, got "
                                  "low_freq_factor=%g high_freq_factor=%g",
                                  dwhat, s->low_freq_factor, s->high_freq_factor);
            s->original_max_position = c->max_position_embeddings;
            LA_TRY(la_json_get_int64(rs, "original_max_position_embeddings", false,
                                     &s->original_max_position, dwhat, err));
            LA_TRY(la_json_get_int64(root, "original_max_position_embeddings", false,
                                     &s->original_max_position, what, err));
            if (s->original_max_position <= 0)
                return la_err_set(err, LA_ERR_FORMAT,
                                  "%s: original_max_position_embeddings=%lld must be positive",
                                  dwhat, (long long)s->original_max_position);
        }
    }
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        return la_err_set(err, LA_ERR_FORMAT, "%s: rope_theta=%g must be positive", what,
                          c->rope_theta);
    return LA_OK;
}

/* ---- config.json ------------------------------------------------------------------ */

static la_status parse_config(const cJSON *root, la_model_config *c, const char *what,
                              la_err *err) {
    if (!cJSON_IsObject(root))
        return la_err_set(err, LA_ERR_FORMAT, "%s: top level must be a JSON object", what);

    const char *model_type = NULL;
    LA_TRY(la_json_get_string(root, "model_type", false, &model_type, what, err));
    int arch = 0;
    LA_TRY(resolve_arch(root, model_type, what, &arch, err));

    const char *act = "silu";
    LA_TRY(la_json_get_string(root, "hidden_act", false, &act, what, err));
    if (strcmp(act, "silu") != 0)
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "%s: hidden_act \"%s\" is not supported (only silu)", what, act);

    *c = (la_model_config){.rms_norm_eps = 1e-6, .max_position_embeddings = 2048, .bos_id = -1,
                           .arch = k_archs[arch].arch};
    LA_TRY(get_pos_i32(root, "vocab_size", true, &c->vocab_size, what, err));
    LA_TRY(get_pos_i32(root, "hidden_size", true, &c->hidden_size, what, err));
    LA_TRY(get_pos_i32(root, "intermediate_size", true, &c->intermediate_size, what, err));
    LA_TRY(get_pos_i32(root, "num_hidden_layers", true, &c->n_layers, what, err));
    LA_TRY(get_pos_i32(root, "num_attention_heads", true, &c->n_heads, what, err));
    c->n_kv_heads = c->n_heads;
    LA_TRY(get_pos_i32(root, "num_key_value_heads", false, &c->n_kv_heads, what, err));
    c->head_dim = c->hidden_size / c->n_heads;
    LA_TRY(get_pos_i32(root, "head_dim", false, &c->head_dim, what, err));
    if (c->head_dim <= 0)
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: hidden_size=%d / num_attention_heads=%d gives head_dim 0", what,
                          c->hidden_size, c->n_heads);
    if (c->n_heads % c->n_kv_heads != 0)
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: num_key_value_heads=%d does not divide num_attention_heads=%d",
                          what, c->n_kv_heads, c->n_heads);
    if (c->head_dim % 2 != 0)
        return la_err_set(err, LA_ERR_FORMAT, "%s: head_dim=%d must be even for RoPE", what,
                          c->head_dim);
    if (c->head_dim > LA_MAX_HEAD_DIM)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "%s: head_dim=%d is above %d", what, c->head_dim,
                          LA_MAX_HEAD_DIM);

    LA_TRY(la_json_get_double(root, "rms_norm_eps", false, &c->rms_norm_eps, what, err));
    if (!(c->rms_norm_eps > 0))
        return la_err_set(err, LA_ERR_FORMAT, "%s: rms_norm_eps=%g must be positive", what,
                          c->rms_norm_eps);
    LA_TRY(la_json_get_int64(root, "max_position_embeddings", false,
                             &c->max_position_embeddings, what, err));
    if (c->max_position_embeddings <= 0)
        return la_err_set(err, LA_ERR_FORMAT, "%s: max_position_embeddings=%lld must be positive",
                          what, (long long)c->max_position_embeddings);
    LA_TRY(parse_rope(root, c, what, err));
    LA_TRY(parse_sliding_window(root, c, what, err));

    LA_TRY(la_json_get_bool(root, "tie_word_embeddings", false, &c->tie_word_embeddings, what,
                            err));
    bool attention_bias = false, mlp_bias = false;
    LA_TRY(la_json_get_bool(root, "attention_bias", false, &attention_bias, what, err));
    LA_TRY(la_json_get_bool(root, "mlp_bias", false, &mlp_bias, what, err));
    if (attention_bias) /* Llama's and Qwen3's: o_proj too */
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "%s: attention_bias=true is not supported (a bias on o_proj)", what);
    c->qkv_bias = c->arch == LA_ARCH_QWEN2; /* Qwen2Attention: q/k/v_proj bias=True, o_proj none */
    c->qk_norm = c->arch == LA_ARCH_QWEN3;  /* Qwen3Attention: RMSNorm of each head of q and k */
    if (mlp_bias)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "%s: mlp_bias=true is not supported", what);

    int64_t bos = -1;
    LA_TRY(la_json_get_int64(root, "bos_token_id", false, &bos, what, err));
    if (bos < -1 || bos > INT32_MAX)
        return la_err_set(err, LA_ERR_FORMAT, "%s: bos_token_id=%lld is not a token id", what,
                          (long long)bos);
    c->bos_id = (int32_t)bos;
    LA_TRY(add_eos_ids(c, cJSON_GetObjectItemCaseSensitive(root, "eos_token_id"), what, err));
    return LA_OK;
}

la_status la_model_config_load(const char *dir, la_model_config *cfg, la_err *err) {
    char *path = la_path_join(dir, "config.json");
    char *gen_path = la_path_join(dir, "generation_config.json");
    cJSON *root = NULL, *gen = NULL;
    la_model_config c;
    la_status s = LA_OK;
    if (!path || !gen_path) {
        s = la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
        goto done;
    }
    s = la_json_load_file(path, &root, err);
    if (s != LA_OK) goto done;
    s = parse_config(root, &c, path, err);
    if (s != LA_OK) goto done;
    if (la_file_exists(gen_path)) {
        s = la_json_load_file(gen_path, &gen, err);
        if (s != LA_OK) goto done;
        if (!cJSON_IsObject(gen)) {
            s = la_err_set(err, LA_ERR_FORMAT, "%s: top level must be a JSON object", gen_path);
            goto done;
        }
        s = add_eos_ids(&c, cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id"), gen_path,
                        err);
        if (s != LA_OK) goto done;
    }
    *cfg = c;
done:
    cJSON_Delete(root);
    cJSON_Delete(gen);
    free(path);
    free(gen_path);
    return s;
}

/* ---- RoPE inverse frequencies ------------------------------------------------------
 * Each statement is one float32 torch op, in transformers' order:
 *
 *   inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim))
 *
 * `python_scalar / tensor` is Tensor.__rtruediv__ = reciprocal(tensor) * scalar, and
 * a Python double scalar enters a float32 op rounded to float. torch's float pow is
 * correctly rounded here; (float)pow(double, double) reproduces it (checked against the
 * fixture bit for bit). llama3 (_compute_llama3_parameters):
 *
 *   wavelen  = 2*pi / inv_freq
 *   inv_l    = where(wavelen > old/low, inv_freq / factor, inv_freq)
 *   smooth   = (old / wavelen - low) / (high - low)
 *   smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
 *   inv_l    = where(!(wavelen < old/high) & !(wavelen > old/low), smoothed, inv_l)
 *
 * with old = original_max_position_embeddings. Every intermediate is stored in a float
 * so no step is kept in wider precision (C17 on x86-64: FLT_EVAL_METHOD 0, and ISO
 * mode does not contract a*b+c into an FMA). */
void la_rope_inv_freq(const la_model_config *cfg, float *inv_freq) {
    const int32_t dim = cfg->head_dim;
    const float base = (float)cfg->rope_theta;
    const la_rope_scaling *rs = &cfg->rope_scaling;
    for (int32_t i = 0; i < dim / 2; i++) {
        float expo = (float)(2 * i) / (float)dim;
        float p = (float)pow((double)base, (double)expo);
        float inv = 1.0f / p;
        if (rs->type == LA_ROPE_LINEAR) {
            inv = inv / (float)rs->factor;
        } else if (rs->type == LA_ROPE_LLAMA3) {
            const double old = (double)rs->original_max_position;
            const float low_wavelen = (float)(old / rs->low_freq_factor);
            const float high_wavelen = (float)(old / rs->high_freq_factor);
            const float factor = (float)rs->factor;
            float wavelen = 1.0f / inv;
            wavelen = wavelen * (float)(2.0 * M_PI);
            float inv_l = wavelen > low_wavelen ? inv / factor : inv;
            float smooth = 1.0f / wavelen;
            smooth = smooth * (float)old;
            smooth = smooth - (float)rs->low_freq_factor;
            smooth = smooth / (float)(rs->high_freq_factor - rs->low_freq_factor);
            float a = 1.0f - smooth;
            a = a * inv_l;
            a = a / factor;
            float b = smooth * inv_l;
            float smoothed = a + b;
            bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
            inv = medium ? smoothed : inv_l;
        }
        inv_freq[i] = inv;
    }
}

bool la_model_config_is_eos(const la_model_config *cfg, int32_t token_id) {
    for (int32_t i = 0; i < cfg->n_eos_ids; i++)
        if (cfg->eos_ids[i] == token_id) return true;
    return false;
}
