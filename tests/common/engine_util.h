/* Test helpers around the engine: run one request to completion and collect its tokens,
 * logits, text and stats. */
#ifndef LA_TEST_ENGINE_UTIL_H
#define LA_TEST_ENGINE_UTIL_H

#include <stdint.h>

#include "lazyattn/lazyattn.h"

typedef struct la_test_gen {
    int32_t n_tokens;
    int32_t tokens[4096];
    float *logits;        /* [n_tokens][n_vocab] when return_logits */
    int32_t n_vocab;
    char *text;           /* all text of TOKEN and DONE events */
    size_t text_len;
    la_request_stats stats;
    la_finish_reason finish;
    la_status status;
    char error[512];
    int done;
} la_test_gen;

/* Engine on a model directory with a small KV pool (kv_blocks; 0 = default 1 GiB). */
la_engine *la_test_engine(const char *model_dir, int64_t kv_blocks, int32_t block_size);

/* Submit p (on_event/user are overwritten) and step until it finishes. Fails the test on a
 * submit error. Free with la_test_gen_free(). */
void la_test_generate(la_engine *e, la_request_params *p, la_test_gen *g);
void la_test_gen_free(la_test_gen *g);

/* The largest |a - b| over the logits of the tokens both generated (f32; 0 when none). */
double la_test_gen_max_diff(const la_test_gen *a, const la_test_gen *b);

/* la_test_generate of the method tests' request: documents as token ids (document order[i],
 * or i when order is NULL, in slot i; at most 64), then the question q[nq], no template,
 * method m, recompute_first and recompute_ratio (negative: the engine's default), cache salt (NULL: none), logits
 * returned, ignore_eos, max_tokens tokens. */
void la_test_generate_docs(la_engine *e, la_method m, int32_t *const *ids, const int32_t *len, int32_t n_docs,
                           const int32_t *order, const int32_t *q, int32_t nq, const char *salt,
                           int32_t recompute_first, float recompute_ratio, int32_t max_tokens, la_test_gen *g);

/* The method tests' request as parameters, for a test that submits and steps itself:
 * documents docs[n_docs] (n_docs 0: none, the whole prompt inline), then prompt, no
 * template, method m, salt, recovery (negative: the engine's default), logits returned,
 * ignore_eos, max_tokens; on_event / user are left for the caller. */
la_request_params la_test_segs_params(la_method m, const la_segment *docs, int32_t n_docs, la_segment prompt,
                                      const char *salt, int32_t recompute_first, float recompute_ratio,
                                      int32_t max_tokens);

/* The same request with the documents and the question as segments (la_test_segs_params),
 * run to completion. */
void la_test_generate_segs(la_engine *e, la_method m, const la_segment *docs, int32_t n_docs, la_segment prompt,
                           const char *salt, int32_t recompute_first, float recompute_ratio, int32_t max_tokens,
                           la_test_gen *g);

/* Event callback collecting into a la_test_gen (for tests that submit many at once). */
void la_test_on_event(void *user, const la_event *ev);

#endif
