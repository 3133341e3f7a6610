/* Engine-private request and document-job records, and the request operations every
 * engine file uses (request.c). */
#ifndef LA_ENGINE_REQUEST_H
#define LA_ENGINE_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/sampling.h"
#include "kv/plan.h"
#include "lazyattn/lazyattn.h"
#include "tokenizer/tokenizer.h"

typedef enum la_request_state {
    LA_REQ_WAITING = 0, /* queued, no blocks */
    LA_REQ_PREFILL,     /* planned; documents computing or tail prefill in progress */
    LA_REQ_DECODE,      /* generating one token per step */
} la_request_state;

typedef struct la_request {
    uint64_t id;
    la_method method;
    int32_t recompute_first; /* recovery's N (kv/plan.h), resolved */
    float recompute_ratio;   /* selected recovery's R (kv/plan.h), resolved */
    la_doc_context doc_context; /* what its cached documents are computed after, resolved */
    char *salt;
    la_sampling_params sampling; /* stop strings deep-copied below */
    char **stop;
    size_t max_stop_len;
    la_event_fn on_event;
    void *user;
    bool return_logits;
    bool keep_special;      /* special tokens stay in the text */
    /* deep copies of the sampling arrays (sampling points at them) */
    int32_t *stop_ids;
    la_logit_bias *bias;
    int32_t *allowed;
    uint64_t *allow_mask;   /* allowed_token_ids as bits [ceil(vocab / 64)], or NULL */
    size_t allow_mask_bytes;
    char *json_schema;
    struct la_grammar_matcher *gm; /* structured output's position, or NULL */

    /* n > 1: the choices of one prompt share its id; choice 0 forks the others (each a
     * request of its own from then on) when its first token is sampled */
    int32_t index;          /* this choice */
    int32_t n_choices;      /* choice 0 before the fork: sampling.n; else 1 */
    int32_t orphan_from;    /* choices [orphan_from, n_choices) have no request of their own
                               (not forked yet, or their fork failed): their DONE goes out
                               with this request's, so a caller always gets n of them */
    bool is_fork;           /* not choice 0: engine totals count the prompt once */

    /* why accepting a token failed (la_request_accept_token gave LA_FINISH_ERROR) */
    la_status error_status;
    char error_msg[LA_ERR_MSG_LEN]; /* why accept_token failed it */

    /* logprobs of the token being accepted (sampling.logprobs) */
    float lp;
    int32_t n_top;
    int32_t top_ids[20];
    float top_lps[20];

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
    bool copies_done;   /* per-request copies made (BLOCK, recovery) */
    int32_t rc_doc;     /* recovery: the document being recomputed (plan.n_docs: all done) */
    int32_t rc_done;    /* of which the first rc_done tokens have K/V */
    bool probed;        /* selected recovery: the probe chose the plan's recomputed tokens */
    float *probe_dev;   /* selected recovery: the deviations probed so far (engine/recovery.h) */
    int64_t probe_done; /* of the later documents' tokens (flat), how many are probed */
    int32_t n_generated;
    int32_t ahead_seq;  /* async scheduling: its sequence in the step packed ahead
                           (la_scheduler_pack_ahead; checked against that step's packed[]) */

    /* output */
    size_t stop_from;   /* stop strings are looked for from here (min_tokens) */
    la_rng rng;
    la_detok *detok;
    char *text;         /* generated text so far (stop strings are searched here) */
    size_t text_len, text_cap, emitted;

    /* timing (ms, la_now_ms clock) and stats */
    double t_submit, t_admit, t_first, t_last;
    la_request_stats stats;

    struct la_request *next;
} la_request;

/* How a document job gets its blocks (engine/doc_store.h). */
typedef enum la_doc_job_load {
    LA_JOB_COMPUTE = 0, /* the model computes it, chunk by chunk */
    LA_JOB_LOADING,     /* a store tier is reading its record */
    LA_JOB_IMPORTING,   /* the record is being copied into its blocks */
    LA_JOB_LOADED,      /* copied: retired like a computed job */
} la_doc_job_load;

struct la_kv_rec;

/* A document being computed (or loaded from the KV store): holds its own pins on every
 * block of the document so that requests waiting on it can come and go. */
typedef struct la_doc_job {
    la_method method;
    la_plan_doc doc;   /* block_ids owned by the job (copy) */
    la_plan_doc ctx;   /* doc.enc_start > 0 (kv/plan.h "Documents after the preamble"): the
                          request's document 0, block_ids owned and pinned by the job; the job
                          runs once they are ready. Else n_blocks 0, block_ids NULL */
    int32_t *tokens;   /* [doc.n_tokens] owned */
    int32_t from;      /* first token to compute (n_reused * B) */
    int32_t n_done;    /* tokens computed (or loaded) from `from` */
    la_doc_job_load load;
    bool loaded;       /* its blocks came from a store tier */
    struct la_kv_rec *rec; /* LOADING, IMPORTING: the record (a store reference) */
    uint64_t request_id;   /* the request whose plan made it (its stats count a load) */
    la_hash128 key;    /* record key (has_key: methods that cache documents) */
    bool has_key;
    struct la_doc_job *next;
} la_doc_job;

/* Free r and what it owns. NULL: nothing. */
void la_request_free(la_request *r);
/* Deep-copy the sampling arrays of p into r (r->sampling points at the copies; stop strings
 * are copied by la_engine_submit). Errors: LA_ERR_NO_MEMORY (r keeps what was copied). */
la_status la_request_copy_sampling(la_request *r, const la_sampling_params *p, int32_t n_vocab, la_err *err);
/* A copy of r for another choice: tokens, params, text and timing; no plan, no detok state
 * (the caller makes them). Errors: LA_ERR_NO_MEMORY. */
la_status la_request_clone(const la_request *r, la_request **out, la_err *err);
/* Append ids[0:n] to r's tail. Errors: LA_ERR_NO_MEMORY (tail unchanged). */
la_status la_request_tail_append(la_request *r, const int32_t *ids, int32_t n, la_err *err);
/* Unlink r from the list head..tail (nothing if r is not in it); append r to it. */
void la_request_list_remove(la_request **head, la_request **tail, la_request *r);
void la_request_list_push(la_request **head, la_request **tail, la_request *r);

#endif
