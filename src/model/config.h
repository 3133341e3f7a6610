/* la_model_config: the architecture of a LlamaForCausalLM checkpoint, read from a
 * Hugging Face model directory (config.json, plus generation_config.json's eos ids).
 * Field meanings and defaults follow transformers' LlamaConfig
 * (models/llama/configuration_llama.py) and modeling_rope_utils.py. */
#ifndef LA_MODEL_CONFIG_H
#define LA_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include "lazyattn/status.h"

#define LA_MAX_EOS_IDS 8
/* head_dim above this is refused at load (the largest in use: 256); it sizes per-head
 * scratch, RoPE tables and attention tiles, so a corrupt config cannot ask for gigabytes. */
#define LA_MAX_HEAD_DIM 1024

typedef enum la_rope_type {
    LA_ROPE_DEFAULT = 0, /* rope_scaling absent or rope_type "default" */
    LA_ROPE_LINEAR,      /* positions divided by factor */
    LA_ROPE_LLAMA3,      /* Llama 3.1 frequency-dependent scaling */
} la_rope_type;

typedef struct la_rope_scaling {
    la_rope_type type;
    double factor;                 /* linear and llama3; 1 for default */
    double low_freq_factor;        /* llama3 */
    double high_freq_factor;       /* llama3 */
    int64_t original_max_position; /* llama3: original_max_position_embeddings, tokens */
} la_rope_scaling;

/* The decoder families (HF model_type). All are Llama's decoder with, at most, these
 * differences: Qwen2 has biases on q/k/v_proj; Qwen3 an RMSNorm over head_dim of every
 * query and key head before RoPE (q_norm, k_norm); Mistral a sliding window (see
 * sliding_window). */
typedef enum la_model_arch { LA_ARCH_LLAMA = 0, LA_ARCH_MISTRAL, LA_ARCH_QWEN2, LA_ARCH_QWEN3 } la_model_arch;

/* "llama", "mistral", "qwen2", "qwen3". */
const char *la_model_arch_name(la_model_arch a);

typedef struct la_model_config {
    la_model_arch arch;
    int32_t vocab_size;
    int32_t hidden_size;       /* d_model */
    int32_t intermediate_size; /* SwiGLU inner width */
    int32_t n_layers;          /* num_hidden_layers */
    int32_t n_heads;           /* num_attention_heads */
    int32_t n_kv_heads;        /* num_key_value_heads (GQA); = n_heads when absent */
    int32_t head_dim;          /* head_dim when present, else hidden_size / n_heads (floor, as HF) */
    double rms_norm_eps;       /* default 1e-6 */
    double rope_theta;         /* default 10000 */
    la_rope_scaling rope_scaling;
    int64_t max_position_embeddings; /* tokens; default 2048 */
    bool tie_word_embeddings;  /* default false */
    bool attention_bias;       /* always false: true is rejected (unsupported) */
    bool qkv_bias;             /* q/k/v_proj carry a bias (Qwen2) */
    bool qk_norm;              /* q_norm / k_norm over head_dim before RoPE (Qwen3) */
    int64_t sliding_window;    /* 0: none; else the window the config names, and
                                  max_position_embeddings was capped at it (attention over a
                                  context no longer than the window is full attention) */
    bool mlp_bias;             /* always false: true is rejected (unsupported) */
    int32_t bos_id;            /* -1 when absent (unlike LlamaConfig's default 1) */
    int32_t n_eos_ids;         /* 0 when neither file names one */
    int32_t eos_ids[LA_MAX_EOS_IDS]; /* union of config.json and generation_config.json,
                                      * config.json's first, no duplicates */
} la_model_config;

/* Parse <dir>/config.json (required) and <dir>/generation_config.json (optional; its
 * eos_token_id, a number or a list, is merged into eos_ids).
 *
 * config.json must say model_type "llama", "mistral", "qwen2" or "qwen3", or list its
 * *ForCausalLM class in architectures.
 * RoPE parameters are read from "rope_scaling" (transformers 4) or "rope_parameters"
 * (transformers 5; rope_scaling wins when both are non-null, as in transformers'
 * convert_rope_params_to_dict); the type from "rope_type" or the legacy "type";
 * rope_theta from inside that dict, else the top-level "rope_theta", else 10000.
 * llama3's original_max_position_embeddings: a top-level key of that name wins (as
 * transformers' standardize_rope_params), else the dict's, else max_position_embeddings.
 *
 * Errors (each message names the file and the key and value):
 *   LA_ERR_IO           config.json missing or unreadable
 *   LA_ERR_FORMAT       bad JSON in either file, a missing required field (vocab_size,
 *                       hidden_size, intermediate_size, num_hidden_layers,
 *                       num_attention_heads), a field of the wrong type, a size <= 0,
 *                       num_key_value_heads not dividing num_attention_heads, odd
 *                       head_dim, rms_norm_eps/rope_theta <= 0, a scaling dict missing
 *                       factor (linear, llama3) or low/high_freq_factor (llama3), factor
 *                       <= 0, low_freq_factor >= high_freq_factor, negative token ids
 *   LA_ERR_UNSUPPORTED  another model_type, hidden_act other than "silu", unknown or
 *                       unimplemented rope type (named), partial_rotary_factor != 1,
 *                       head_dim above LA_MAX_HEAD_DIM,
 *                       attention_bias or mlp_bias true, more than LA_MAX_EOS_IDS eos ids
 * *cfg is written only on success. */
la_status la_model_config_load(const char *dir, la_model_config *cfg, la_err *err);

/* Inverse frequencies of RoPE after rope_scaling, bit-for-bit as transformers computes
 * them on CPU in float32 (models/llama/modeling_llama.py compute_default_rope_parameters;
 * modeling_rope_utils.py _compute_linear_scaling_rope_parameters and
 * _compute_llama3_parameters), one torch op per C statement, no fused multiply-add.
 *   inv_freq  [head_dim / 2] f32, out; radians per token position
 * For LINEAR the factor is folded into inv_freq (inv_freq / factor). The attention
 * scaling these types return is 1.0, so it has no output here.
 * Checked against tests/fixtures/rope/inv_freq.json (tools/oracle/rope_fixture.py). */
void la_rope_inv_freq(const la_model_config *cfg, float *inv_freq);

/* Whether token_id is one of cfg's eos ids. */
bool la_model_config_is_eos(const la_model_config *cfg, int32_t token_id);

/* Fill cfg with a named shape: "llama3.2-1b", "llama3-8b" or "tiny" (vocab 128256, the
 * Llama-3 tokenizer's). Errors: LA_ERR_INVALID_ARG naming the shape; *cfg untouched.
 * (model/config_preset.c) */
la_status la_model_config_preset(const char *name, la_model_config *cfg, la_err *err);

#endif
