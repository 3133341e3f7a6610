#include <string.h>

#include "base/err.h"
#include "base/struct_size.h"
#include "lazyattn/lazyattn.h"
#include "model/config.h"

/* Fills a full la_model_info, then copies the caller's struct_size bytes (abi.h). */
la_status la_model_info_load_sized(const char *dir, la_model_info *caller_info, size_t struct_size,
                                   la_err *err) {
    la_model_config c;
    LA_TRY(la_model_config_load(dir, &c, err));
    la_model_info full, *info = &full;
    memset(info, 0, sizeof *info);
    info->vocab_size = c.vocab_size;
    info->hidden_size = c.hidden_size;
    info->intermediate_size = c.intermediate_size;
    info->n_layers = c.n_layers;
    info->n_heads = c.n_heads;
    info->n_kv_heads = c.n_kv_heads;
    info->head_dim = c.head_dim;
    info->rms_norm_eps = c.rms_norm_eps;
    info->rope_theta = c.rope_theta;
    info->rope_type = c.rope_scaling.type == LA_ROPE_LLAMA3   ? "llama3"
                      : c.rope_scaling.type == LA_ROPE_LINEAR ? "linear"
                                                              : "default";
    info->rope_factor = c.rope_scaling.type == LA_ROPE_DEFAULT ? 1.0 : c.rope_scaling.factor;
    info->max_position_embeddings = c.max_position_embeddings;
    info->tie_word_embeddings = c.tie_word_embeddings;
    info->bos_id = c.bos_id;
    info->n_eos_ids = c.n_eos_ids < 8 ? c.n_eos_ids : 8;
    memcpy(info->eos_ids, c.eos_ids, sizeof(int32_t) * (size_t)info->n_eos_ids);
    int64_t d = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
    int64_t per_layer = d * hd * c.n_heads * 2 + d * hd * c.n_kv_heads * 2 + 3 * d * f + 2 * d;
    if (c.qkv_bias) per_layer += hd * (c.n_heads + 2 * (int64_t)c.n_kv_heads);
    if (c.qk_norm) per_layer += 2 * hd;
    info->family = la_model_arch_name(c.arch);
    info->qkv_bias = c.qkv_bias;
    info->qk_norm = c.qk_norm;
    info->sliding_window = c.sliding_window;
    info->n_params = (int64_t)c.vocab_size * d * (c.tie_word_embeddings ? 1 : 2) +
                     per_layer * c.n_layers + d;
    la_struct_copy_out(caller_info, struct_size, &full, sizeof full);
    return LA_OK;
}
