/* Engine-private request and document-job records (engine/engine.c). */
#ifndef LA_ENGINE_REQUEST_H
#define LA_ENGINE_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/sampling.h"
#include "kv/plan.h"
#include "lazyattn/lazyattn.h"
#include "model/tokenizer.h"

typedef enum la_request_state {
    LA_REQ_WAITING = 0, /* queued, no blocks */
    LA_REQ_PREFILL,     /* planned; documents computing or tail prefill in progress */
    LA_REQ_DECODE,      /* generating one token per step */
} la_request_state;

typedef struct la_request {
    uint64_t id;
    la_method method;
    char *salt;
    la_sampling_params sampling; /* stop strings deep-copied below */
    char **stop;
    size_t max_stop_len;
    la_event_fn on_event;
    void *user;
    bool return_logits;

    /* tokens */
    int32_t n_docs;
    int32_t **doc_ids;  /* [n_docs][doc_len[d]] (blockwise methods; else empty) */
    int32_t *doc_len;
    int32_t n_doc_tokens;
    int32_t *tail;      /* prompt after the documents, then generated tokens */
    int32_t n_tail, tail_cap;
    int32_t n_prompt;   /* prompt tokens in tail at submit */

    /* scheduling */
    la_request_state state;
    bool cancel;
    la_plan plan;       /* valid when state != WAITING */
    int32_t n_plan_tail;/* tail tokens given to the plan (prompt, or prompt + generated
                           after a preemption) */
    int32_t n_computed; /* tail tokens whose K/V are written */
    bool copies_done;   /* BLOCK: per-request copies made */
    int32_t n_generated;

    /* output */
    la_rng rng;
    la_detok *detok;
    char *text;         /* generated text so far (stop strings are searched here) */
    size_t text_len, text_cap, emitted;

    /* timing (ms, la_now_ms clock) and stats */
    double t_submit, t_admit, t_first, t_last;
    la_request_stats stats;

    struct la_request *next;
} la_request;

/* A document being computed: holds its own pins on every block of the document so that
 * requests waiting on it can come and go. */
typedef struct la_doc_job {
    la_method method;
    la_plan_doc doc;   /* block_ids owned by the job (copy) */
    int32_t *tokens;   /* [doc.n_tokens] owned */
    int32_t from;      /* first token to compute (n_reused * B) */
    int32_t n_done;    /* tokens computed from `from` */
    struct la_doc_job *next;
} la_doc_job;

#endif
