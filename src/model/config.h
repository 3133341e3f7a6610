/* la_model_config: the architecture of a LlamaForCausalLM checkpoint, read from a
 * Hugging Face model directory (config.json, plus generation_config.json's eos ids).
 * Field meanings follow transformers' LlamaConfig. */
#ifndef LA_MODEL_CONFIG_H
#define LA_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include "lazyattn/status.h"

#define LA_MAX_EOS_IDS 8

typedef enum la_rope_type {
    LA_ROPE_DEFAULT = 0, /* rope_scaling absent or rope_type "default" */
    LA_ROPE_LINEAR,      /* positions divided by factor */
    LA_ROPE_LLAMA3,      /* Llama 3.1 frequency-dependent scaling */
} la_rope_type;

typedef struct la_rope_scaling {
    la_rope_type type;
    double factor;                 /* linear and llama3 */
    double low_freq_factor;        /* llama3 */
    double high_freq_factor;       /* llama3 */
    int64_t original_max_position; /* llama3: original_max_position_embeddings */
} la_rope_scaling;

typedef struct la_model_config {
    int32_t vocab_size;
    int32_t hidden_size;       /* d_model */
    int32_t intermediate_size; /* SwiGLU inner width */
    int32_t n_layers;          /* num_hidden_layers */
    int32_t n_heads;           /* num_attention_heads */
    int32_t n_kv_heads;        /* num_key_value_heads (GQA); = n_heads when absent */
    int32_t head_dim;          /* head_dim when present, else hidden_size / n_heads */
    double rms_norm_eps;
    double rope_theta;         /* default 10000 */
    la_rope_scaling rope_scaling;
    int64_t max_position_embeddings;
    bool tie_word_embeddings;
    bool attention_bias;       /* must be false: biases are unsupported */
    bool mlp_bias;             /* must be false */
    int32_t bos_id;            /* -1 when absent */
    int32_t n_eos_ids;
    int32_t eos_ids[LA_MAX_EOS_IDS]; /* union of config.json and generation_config.json */
} la_model_config;

/* Parse <dir>/config.json (required; model_type "llama" or architectures containing
 * "LlamaForCausalLM") and <dir>/generation_config.json (optional; its eos_token_id, a
 * number or a list, is merged into eos_ids).
 * Errors: LA_ERR_IO (missing config.json), LA_ERR_FORMAT (bad JSON, missing or
 * inconsistent field, e.g. "config.json: num_key_value_heads=6 does not divide
 * num_attention_heads=32"), LA_ERR_UNSUPPORTED (unknown rope_type, biases).
 * *cfg is written only on success. */
la_status la_model_config_load(const char *dir, la_model_config *cfg, la_err *err);

/* Inverse frequencies of RoPE after rope_scaling, as transformers computes them
 * (modeling_rope_utils.py: _compute_default_rope_parameters, _compute_linear_scaling_
 * rope_parameters, _compute_llama3_parameters).
 *   inv_freq  [head_dim / 2] f32, out
 * For LINEAR the factor is folded into inv_freq (pos / factor). */
void la_rope_inv_freq(const la_model_config *cfg, float *inv_freq);

/* Whether token id is one of cfg's eos ids. */
bool la_model_config_is_eos(const la_model_config *cfg, int32_t token_id);

#endif
