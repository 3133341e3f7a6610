/* Choosing a request's next token (token_choice.c): the logits processors fed from the
 * request's params and history (engine/sampling.h), the structured-output grammar mask
 * (grammar/token_mask.h), the draw and the logprobs; and the n > 1 fork, where choice 0
 * hands copies of itself the blocks of the prompt. Private to src/engine/.
 */
#ifndef LA_ENGINE_TOKEN_CHOICE_H
#define LA_ENGINE_TOKEN_CHOICE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine_internal.h"
#include "engine/request.h"
#include "lazyattn/lazyattn.h"

struct la_grammar;

/* The compiled grammar of p's response_format (json_object, or json_schema by its text),
 * from the engine's cache or compiled and bound to the vocabulary now; *out holds a
 * reference the caller drops with la_grammar_unref. NULL for LA_RESPONSE_TEXT. Any thread.
 * Errors: LA_ERR_UNSUPPORTED / LA_ERR_INVALID_ARG (the schema: json_schema.h),
 * LA_ERR_INVALID_ARG (an engine without a tokenizer), LA_ERR_NO_MEMORY. */
la_status la_engine_grammar_get(la_engine *e, const la_sampling_params *p, struct la_grammar **out,
                                la_err *err);

/* Free the grammar cache and the vocabulary (engine destroy). */
void la_engine_grammars_free(la_engine *e);

/* The workers that choose tokens on the host and their scratch (opts.n_threads of them,
 * at most 16). Errors: LA_ERR_NO_MEMORY, LA_ERR_INTERNAL. */
la_status la_choosers_create(la_engine *e, int32_t n_vocab, la_err *err);
void la_choosers_destroy(la_engine *e);

/* Whether r's next token needs the step's logits, not only the argmax (a sampled draw,
 * logprobs, a logits processor, a grammar, allowed tokens, min_tokens still to come, or
 * logits wanted back): a step with such a request must not take the backend's argmax. */
bool la_request_needs_logits(const la_request *r);

/* One token to choose: r's next from its logits row lg [vocab] (NULL in a greedy step:
 * argmax_id, the backend's argmax). */
typedef struct la_choice_task {
    la_request *r;
    const float *lg;
    int32_t argmax_id;
    int32_t token;  /* out */
    la_status status; /* out: LA_ERR_INTERNAL (every logit masked), LA_ERR_NO_MEMORY */
    la_err err;     /* out */
} la_choice_task;

/* Choose the tokens of tasks[0:n] on the chooser workers, in parallel (each request's own
 * rng, so the tokens do not depend on how the tasks are split); fills r->lp / n_top /
 * top_* of requests that asked for logprobs. Engine thread. */
void la_requests_choose(la_engine *e, la_choice_task *tasks, int32_t n);

/* n > 1 at r's first token: make choices 1 .. n-1 of r, each sharing r's document and full
 * prompt blocks (kv/plan.h la_plan_fork; the partly filled last block is copied) and
 * appended to the running list in DECODE; a choice that gets no block for its copy waits
 * in the queue instead and recomputes its prompt (documents still shared through the
 * cache). Writes them to kids[0 .. *n_kids). Engine thread. Errors: LA_ERR_NO_MEMORY,
 * LA_ERR_BACKEND (the copy); choices made so far stay. */
la_status la_request_fork(la_engine *e, la_request *r, la_request **kids, int32_t *n_kids, la_err *err);

#endif
