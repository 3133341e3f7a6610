/* Token sampling: greedy, temperature, top-k, top-p, seeded.
 * Order as in HF generate's logits processors: temperature, then top-k, then top-p
 * (transformers generation/logits_process.py TemperatureLogitsWarper, TopKLogitsWarper,
 * TopPLogitsWarper), then a draw from the softmax. */
#ifndef LA_ENGINE_SAMPLING_H
#define LA_ENGINE_SAMPLING_H

#include <stdint.h>

#include "lazyattn/lazyattn.h"

/* xoshiro256** (Blackman & Vigna), seeded through splitmix64. */
typedef struct la_rng {
    uint64_t s[4];
} la_rng;

void la_rng_seed(la_rng *r, uint64_t seed);
uint64_t la_rng_next(la_rng *r);
/* Uniform double in [0, 1). */
double la_rng_uniform(la_rng *r);

/* Index of the largest logit (lowest index on ties, as torch.argmax; NaN counts below
 * every number, so an all-NaN row gives 0). The CUDA backend's argmax_to_host computes
 * the same on the device. */
int32_t la_argmax(const float *logits, int32_t n);

/* Sample one token from logits[n_vocab] (f32). scratch must hold 2 * n_vocab floats'
 * worth (n_vocab floats + n_vocab int32). Greedy when temperature <= 0. */
int32_t la_sample(const float *logits, int32_t n_vocab, const la_sampling_params *p, la_rng *rng,
                  void *scratch);

/* Validate sampling params: temperature >= 0 and finite, top_p in (0, 1], top_k >= 0,
 * max_tokens >= 1. Errors: LA_ERR_INVALID_ARG naming the field. */
la_status la_sampling_params_check(const la_sampling_params *p, la_err *err);

#endif
