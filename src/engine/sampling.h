/* Token sampling: greedy, temperature, top-k, top-p, seeded.
 * Order as in HF generate's logits processors: temperature, then top-k, then top-p
 * (transformers generation/logits_process.py TemperatureLogitsWarper, TopKLogitsWarper,
 * TopPLogitsWarper), then a draw from the softmax. */
#ifndef LA_ENGINE_SAMPLING_H
#define LA_ENGINE_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h" /* la_argmax */
#include "lazyattn/lazyattn.h"

/* xoshiro256** (Blackman & Vigna), seeded through splitmix64. */
typedef struct la_rng {
    uint64_t s[4];
} la_rng;

void la_rng_seed(la_rng *r, uint64_t seed);
uint64_t la_rng_next(la_rng *r);
/* Uniform double in [0, 1). */
double la_rng_uniform(la_rng *r);

/* la_argmax: backend/backend.h (the backends' argmax ops compute the same). */

/* Sample one token from logits[n_vocab] (f32). scratch must hold 2 * n_vocab floats'
 * worth (n_vocab floats + n_vocab int32). Greedy when temperature <= 0.
 * min_p > 0 then keeps, of what top-k and top-p kept, the tokens whose probability is at
 * least min_p times the largest one (HF MinPLogitsWarper, applied after TopPLogitsWarper;
 * Nguyen et al., "Min P Sampling", arXiv 2407.01082): v_i >= v_max + log(min_p) on the
 * temperature-scaled logits. min_p near 1 leaves the argmax alone: greedy. */
int32_t la_sample(const float *logits, int32_t n_vocab, const la_sampling_params *p, la_rng *rng,
                  void *scratch);

/* la_sample over the allowed tokens only: allow [ceil(n_vocab / 64)] bits (NULL: all), a
 * token without its bit counts as -inf (the grammar mask, allowed_token_ids, the bans of
 * min_tokens), without a copy of the logits: greedy takes the argmax of the allowed ones,
 * sampling masks while it scales by the temperature. Returns -1 when no token is allowed. */
int32_t la_sample_masked(const float *logits, int32_t n_vocab, const la_sampling_params *p, const uint64_t *allow,
                         la_rng *rng, void *scratch);
/* la_argmax of the allowed tokens (NULL: all); -1 when none is. */
int32_t la_argmax_masked(const float *logits, int32_t n, const uint64_t *allow);

/* A run of token ids (borrowed). */
typedef struct la_token_span {
    const int32_t *ids;
    int64_t n;
} la_token_span;

/* What the logits processors read besides the params. */
typedef struct la_logits_inputs {
    const la_token_span *seen;  /* [n_seen] the prompt's tokens (documents and tail), for
                                   repetition_penalty */
    int32_t n_seen;
    la_token_span output;       /* the tokens generated so far */
} la_logits_inputs;

/* Whether p has a processor that changes logits (bias or a penalty). */
bool la_logits_processors_active(const la_sampling_params *p);

/* Apply the processors of p, in this order, to v[n_vocab] (a copy of the raw logits; the
 * masks that come first in vLLM's order, allowed tokens and bans, are la_sample_masked's):
 *   1. logit_bias                      v[t] += bias            (OpenAI API reference)
 *   2. repetition_penalty r, once for every distinct token t of seen and output:
 *        v[t] = v[t] < 0 ? v[t] * r : v[t] / r
 *      (HF RepetitionPenaltyLogitsProcessor; Keskar et al., "CTRL", arXiv 1909.05858)
 *   3. frequency f and presence p over the output, c[t] = occurrences of t in it:
 *        v[t] -= c[t] * f + (c[t] > 0) * p
 *      (OpenAI API reference, "Frequency and presence penalties"; vLLM applies both to the
 *      generated tokens only, as here)
 * marks: [n_vocab] scratch that this call leaves to the next one; *epoch its counter. */
void la_logits_process(float *v, int32_t n_vocab, const la_sampling_params *p, const la_logits_inputs *in,
                       uint32_t *marks, uint32_t *epoch);

/* Logprobs of raw logits[n_vocab]: *lp = logits[token] - logsumexp(logits) (f64 sums), and
 * the k (<= 20) most likely tokens into top_ids / top_lps [k], logprob descending, lowest
 * id on ties; returns how many were written (k, or fewer for a tiny vocabulary). */
int32_t la_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t k, float *lp, int32_t *top_ids,
                    float *top_lps);

/* Validate sampling params: temperature >= 0 and finite, top_p in (0, 1], top_k >= 0,
 * max_tokens >= 1, penalties and min_p in their ranges (lazyattn.h), 0 <= min_tokens <=
 * max_tokens, n in [0, 128], top_logprobs in [0, 20], logit_bias values in [-100, 100], a
 * schema for LA_RESPONSE_JSON_SCHEMA. Token ids are checked against the vocabulary by
 * la_engine_submit. Errors: LA_ERR_INVALID_ARG naming the field. */
la_status la_sampling_params_check(const la_sampling_params *p, la_err *err);

#endif
