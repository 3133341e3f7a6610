/* Answering a RAG question set with one or more methods and scoring it (`lazyattn eval`).
 *
 * Each question is asked as a chat turn with its documents (rendered by the model's chat
 * template, or --chat-template's, around the documents: README "Chat templates and
 * documents"), or with raw as a plain prompt after the documents' blocks, greedy, in batches of `concurrency` questions on one engine.
 * Scores: exact match (la_rag_answer_matches: normalised containment, as in
 * Block-Attention's evaluation) overall and by hops, agreement of every method with the
 * first one, and for orders > 1 the share of questions whose answer is the same under every
 * document order (order 0 is the file's; the others are seeded shuffles). Each method has a
 * cache salt of its own: it computes its documents itself in order 0 (cold) and finds them
 * cached in the later orders (warm), whatever the order of the methods.
 */
#ifndef LA_BENCH_EVAL_H
#define LA_BENCH_EVAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/method_spec.h"
#include "bench/rag_dataset.h"
#include "lazyattn/lazyattn.h"

typedef struct la_eval_answer {
    char *text;                 /* the generated text (heap; NULL: nothing) */
    size_t len;
    int done;
    int failed;
    la_request_stats stats;
    /* with la_eval.margins, per generated token (heap, [n_tokens] each): the token, the
     * runner-up (the most likely other token; -1: none) and the margin, log-softmax of the
     * raw logits at the most likely token minus at the runner-up (nats, >= 0) */
    int32_t *tokens, *runner_up;
    float *margins;
    int32_t n_tokens;
} la_eval_answer;

/* Called as answers arrive, and once per request that failed with one line saying why
 * ("question 3: ..." when the engine refused it, "request failed: ..." when it failed). */
typedef struct la_eval_hooks {
    void (*progress)(void *user, int64_t done, int64_t total);
    void (*failed)(void *user, const char *message);
    void *user;
} la_eval_hooks;

typedef struct la_eval {
    const la_rag_dataset *ds;   /* borrowed */
    la_method_spec methods[LA_BENCH_MAX_METHODS]; /* the first is the reference of same_as_first */
    int32_t n_methods;
    int32_t orders;             /* document orders per question (>= 1) */
    int32_t max_tokens;         /* new tokens per answer */
    int32_t concurrency;        /* questions in flight */
    uint64_t seed;              /* of the shuffled orders */
    bool raw;                   /* no chat template (la_bench_rag_request) */
    bool margins;               /* record each token's logit margin (la_eval_answer; top 2
                                   logprobs per token) and score where answers diverge */
    la_eval_answer *answers;    /* [(m * orders + order) * ds->n + q], written by la_eval_run */
} la_eval;

/* Answer every question of ev->ds with every method in every order on engine e (the caller
 * is the engine thread). Errors: LA_ERR_NO_MEMORY; LA_ERR_INTERNAL when a request failed
 * (hooks->failed said why; the run stopped after its batch). Free with la_eval_fini(). */
la_status la_eval_run(la_eval *ev, la_engine *e, const la_eval_hooks *hooks, la_err *err);
void la_eval_fini(la_eval *ev);

typedef struct la_eval_score {
    double em_pct;              /* exact match, % of the questions */
    double em_1hop_pct, em_2hop_pct; /* of the 1- and 2-hop questions; -1 when there are none */
    int64_t n_1hop, n_2hop;
    int64_t same_as_first;      /* questions answered as the first method answered them */
    int64_t same_across_orders; /* questions answered the same in every order */
    /* mean TTFT, ms, including the queueing of the batch (not a benchmark): order 0, the
     * method's documents computed (cold), and the later orders, found cached (warm; -1 with
     * one order) */
    double mean_ttft_cold_ms, mean_ttft_warm_ms;
    int64_t doc_tokens_recomputed; /* recovery, over order 0 */
    int64_t doc_tokens_probed;     /* selected recovery's probe, over order 0 */
    /* over every order (each order's answer against the answers of its own question): exact
     * match, % of questions x orders, and answers equal to the first method's in the same
     * order */
    double em_all_orders_pct;
    int64_t same_as_first_all_orders;
    /* with margins, over the questions answered differently from the first method: how
     * many, the first method's margin at the first token where the two differ (median,
     * nats; -1: none), and how many of those tokens are the first method's runner-up */
    int64_t n_diverged, n_diverged_runner_up;
    double ref_margin_at_divergence_median;
} la_eval_score;

/* The scores of method m (answers in the file's document order). */
void la_eval_score_method(const la_eval *ev, int32_t m, la_eval_score *out);

/* With margins: the first method's margins over every token it generated in the file's
 * document order: the median and the 5th percentile (nats; -1 when there is none). */
void la_eval_reference_margins(const la_eval *ev, double *median, double *p5);

/* The scores of every method with its answers ("answers": the first order's, "answers_other_orders":
 * [order - 1][question] when there are several), the dataset, model, device, machine and the
 * command argv[argc]. Caller owns it. */
cJSON *la_eval_json(const la_eval *ev, const char *dataset, const char *model, const char *device, int argc,
                    char **argv);

#endif
