/* A synthetic Llama-shaped model with random bf16 weights (norm weights in [0.5, 1.5),
 * matrices in [-0.1, 0.1), the embedding in [-1, 1)), held in memory as checkpoint tensors
 * so that any backend loads it with la_backend_load_model: the CUDA tests' reference pair
 * (cuda_attn_cases.h) and CPU tests that need shapes no fixture checkpoint has. */
#ifndef LA_TESTS_COMMON_SYNTH_MODEL_H
#define LA_TESTS_COMMON_SYNTH_MODEL_H

#include "model/config.h"
#include "model/weights.h"

typedef struct la_test_synth {
    la_model_config cfg;
    la_weights w;
    la_layer_weights *layers;
    la_st_tensor *t;
    int n_t;
} la_test_synth;

/* A uniform random number in [0, 1) (xorshift, fixed seed: the tests are repeatable). */
double la_test_urand(void);
/* x rounded to bf16 and back. */
float la_test_bf16_round(float x);
/* Random weights of the given shape (Llama-3 RoPE scaling, theta 5e5); free with
 * la_test_synth_free. */
void la_test_synth_init(la_test_synth *s, int hidden, int n_heads, int n_kv, int head_dim, int inter, int vocab,
                        int n_layers);
void la_test_synth_free(la_test_synth *s);

#endif
