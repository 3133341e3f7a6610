/* la_weights: every tensor a Llama forward pass needs, found in the checkpoint by its
 * Hugging Face name and checked against la_model_config. Tensors stay in the mmap in
 * their file dtype; backends convert (CPU: f32, CUDA: bf16) when they load them. */
#ifndef LA_MODEL_WEIGHTS_H
#define LA_MODEL_WEIGHTS_H

#include "model/config.h"
#include "model/safetensors.h"

typedef struct la_layer_weights {
    const la_st_tensor *attn_norm; /* model.layers.L.input_layernorm.weight [hidden] */
    const la_st_tensor *wq;        /* self_attn.q_proj.weight [n_heads*head_dim, hidden] */
    const la_st_tensor *wk;        /* self_attn.k_proj.weight [n_kv_heads*head_dim, hidden] */
    const la_st_tensor *wv;        /* self_attn.v_proj.weight [n_kv_heads*head_dim, hidden] */
    const la_st_tensor *wo;        /* self_attn.o_proj.weight [hidden, n_heads*head_dim] */
    const la_st_tensor *mlp_norm;  /* post_attention_layernorm.weight [hidden] */
    const la_st_tensor *w_gate;    /* mlp.gate_proj.weight [intermediate, hidden] */
    const la_st_tensor *w_up;      /* mlp.up_proj.weight [intermediate, hidden] */
    const la_st_tensor *w_down;    /* mlp.down_proj.weight [hidden, intermediate] */
    /* cfg->qkv_bias (Qwen2): self_attn.{q,k,v}_proj.bias [n_heads*head_dim] / [n_kv_heads*head_dim] */
    const la_st_tensor *bq, *bk, *bv;
    /* cfg->qk_norm (Qwen3): self_attn.{q,k}_norm.weight [head_dim] */
    const la_st_tensor *q_norm, *k_norm;
} la_layer_weights;

typedef struct la_weights {
    la_st_file *file;              /* owned */
    const la_st_tensor *embed;     /* model.embed_tokens.weight [vocab, hidden] */
    const la_st_tensor *final_norm;/* model.norm.weight [hidden] */
    const la_st_tensor *lm_head;   /* lm_head.weight [vocab, hidden]; = embed when tied */
    int32_t n_layers;
    la_layer_weights *layers;      /* [n_layers], owned */
} la_weights;

/* Open dir's safetensors (la_st_open) and bind every tensor cfg needs by its HF name,
 * checking presence and exact shape. Dtypes may be F32, F16 or BF16, mixed.
 *   lm_head: tie_word_embeddings true  -> embed (a stored lm_head.weight is ignored,
 *                                         as transformers ties it)
 *            tie_word_embeddings false -> lm_head.weight, required
 * Tensors the config does not need (e.g. rotary_emb.inv_freq) are ignored.
 * Errors: as la_st_open, plus LA_ERR_FORMAT for a missing tensor ("<dir>/model.safetensors:
 * tensor model.norm.weight is missing") or a misshapen one ("<shard>: tensor
 * model.layers.3.mlp.up_proj.weight has shape [64, 32], expected [128, 32]"),
 * LA_ERR_NO_MEMORY. Caller owns *out (untouched on error); free with
 * la_weights_destroy(). */
la_status la_weights_load(const char *dir, const la_model_config *cfg, la_weights **out,
                          la_err *err);
/* Free w and close its file; la_weights_destroy(NULL) does nothing. */
void la_weights_destroy(la_weights *w);

#endif
