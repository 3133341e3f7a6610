/* Two methods answer the same RAG question side by side (`lazyattn race`): each side on its
 * own engine and thread, both started at the same instant, streaming into their own text with
 * a time-to-first-token clock; a frame shows both columns, and at the end the TTFT ratio.
 */
#ifndef LA_BENCH_RACE_H
#define LA_BENCH_RACE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/rag_dataset.h"
#include "lazyattn/lazyattn.h"

typedef struct la_race_side {
    la_method method;
    la_engine *engine;
    pthread_mutex_t mu;         /* guards what the engine thread writes below */
    char text[4096];
    size_t len;
    double t_start, ttft_ms, e2e_ms;
    int done, failed;
    la_request_stats stats;
    char error[LA_ERR_MSG_LEN];
} la_race_side;

typedef struct la_race {
    la_race_side s[2];          /* left, right */
    const la_rag_question *q;   /* borrowed */
    int32_t *order;             /* [q->n_docs] document order of this round */
    int32_t max_tokens;
    atomic_int go;              /* start barrier */
} la_race;

/* Both sides of question q, each with an engine of eo; documents in the retrieved order.
 * Errors: the engines' (the race can then only be finished). */
la_status la_race_init(la_race *r, const la_engine_options *eo, const la_rag_question *q, la_method left,
                       la_method right, int32_t max_tokens, la_err *err);
void la_race_fini(la_race *r);

/* Put the documents in a new order: a seeded shuffle of the current one. */
void la_race_shuffle(la_race *r, uint64_t seed);

/* One round: both sides answer the question with the round's document order, started
 * together; on_tick(user) (may be NULL) runs fps times a second until both are done. */
void la_race_round(la_race *r, void (*on_tick)(void *user), void *user, int fps);

/* "<faster method>: first token N.NNx sooner than <slower> (a ms vs b ms)" of a finished
 * race, the faster side named first. */
void la_race_verdict(const la_race *r, char *buf, size_t n);

/* The frame of width columns: title, question, gold answers, the two columns with their
 * TTFT (or the time spent in prefill so far) and six lines of text; final adds the verdict
 * and each side's cache reuse. Written to buf (cap bytes, NUL-terminated). */
void la_race_frame(la_race *r, const char *title, const char *gold, bool final, int width, char *buf,
                   size_t cap);

#endif
