/* struct la_engine: the state that engine.c (the public API), prepare.c, scheduler.c and
 * events.c share. Private to src/engine/.
 */
#ifndef LA_ENGINE_ENGINE_INTERNAL_H
#define LA_ENGINE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "backend/backend.h"
#include "engine/request.h"
#include "kv/block_pool.h"
#include "lazyattn/lazyattn.h"
#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/encode_cache.h"
#include "tokenizer/tokenizer.h"

struct la_engine {
    la_engine_options opts;
    char *model_dir, *model_name;
    la_model_config cfg;
    la_weights *weights;
    la_tokenizer *tok;
    la_encode_cache *doc_tokens;   /* documents' ids by their text (prepare.c); NULL: off */
    struct la_chat_template *chat; /* the chat template (prepare.c), NULL: none */
    la_chat_format chat_family;    /* la_prompt_template_family(chat) */
    la_backend *be;
    la_kv_pool *pool;
    struct la_doc_store *docs; /* the KV store's side of the engine (doc_store.h) */
    char *random_shape;        /* random weights: the shape's name, else NULL */
    int32_t max_context;
    int64_t kv_blocks;     /* pool capacity, fixed at create (read by submitting threads) */

    /* held for the whole of la_engine_step: callers of other threads that read the pool or
     * the store (la_engine_document_where, la_engine_store_flush) take it */
    pthread_mutex_t step_mu;

    /* shared with submitting threads (mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    la_request *inbox_head, *inbox_tail;
    uint64_t *cancel_ids;
    int32_t n_cancel, cancel_cap;
    uint64_t next_id;
    int64_t n_queued;      /* inbox + waiting (for max_queue) */
    int64_t n_live;        /* every request not yet finished */
    la_engine_stats stats; /* snapshot, refreshed after each step */
    la_engine_store_stats store_stats; /* likewise */
    /* tests (la_engine_set_submit_hook): run by la_engine_submit once the request is queued,
     * before it returns */
    void (*submit_hook)(la_engine *e, void *user);
    void *submit_hook_user;
    bool store_busy;       /* after the last step: the KV store had I/O, copies or write-throughs
                              in flight (la_engine_has_work keeps the steps coming until they
                              are done, so their results are polled and counted) */
    bool jobs_left;        /* after the last step: document jobs still computing whose
                              requests all finished (cancelled): the steps go on until they
                              are done and unpin their blocks */

    /* la_engine_reset_prefix_cache: tickets asked (under mu) and done (by the step) */
    uint64_t resets_asked, resets_done;
    int64_t reset_dropped;             /* blocks the last reset dropped */

    /* structured output (token_choice.c): the vocabulary as the grammar sees it, built at
     * the first request that needs it, and compiled grammars by schema text (LRU) */
    pthread_mutex_t grammar_mu;
    struct la_grammar_vocab *gvocab;
    struct la_engine_grammar_slot {
        char *schema;                  /* NULL: json_object */
        struct la_grammar *g;
        uint64_t used;
    } grammars[32];
    uint64_t grammar_clock;

    /* engine thread only */
    la_request *waiting_head, *waiting_tail;
    la_request *running_head, *running_tail; /* admission order */
    la_doc_job *jobs_head, *jobs_tail;
    /* choosing tokens on the host (token_choice.c), one request per task of choose_pool:
     * one scratch per worker */
    struct la_threadpool *choose_pool;
    struct la_choose_scratch {
        void *sample;                  /* la_sample's scratch: [vocab] f32 + [vocab] int32 */
        float *logits;                 /* [vocab] processed logits */
        uint32_t *marks;               /* [vocab] penalty scratch (sampling.h) */
        uint32_t mark_epoch;
        uint64_t *mask;                /* [ceil(vocab / 64)] the allowed tokens */
        double choose_ms, grammar_ms;  /* this worker's time */
    } *choosers;
    int32_t n_choosers;
    double choose_ms, grammar_ms;      /* totals, published by la_scheduler_refresh_stats */
    int64_t timing_steps; /* steps the KV store's prefill rate could time (engine.c) */
    struct la_batch_builder *builder; /* the step's batch (scheduler.h), kept from step to
                                         step so that its arrays are not allocated anew */
    /* async scheduling (step.c): whether it is on, the step queued on the device whose
     * tokens are not read back yet (NULL: none), the other builder */
    bool async_on;
    struct la_batch_builder *ahead, *spare; /* ahead: NULL or spare (the other is builder) */
    int32_t *ids;                           /* token ids read back, [cap_ids] */
    int64_t cap_ids;
    struct la_step_time { /* engine.c's step_locked; published by la_scheduler_refresh_stats */
        int64_t computed, decode, rows;
        double schedule_ms, forward_ms, decode_forward_ms, decode_ms, after_ms;
        double begin_ms, decode_begin_ms; /* of forward_ms, decode_forward_ms: batch_begin's */
        int64_t async, dropped;
        int64_t ahead_no_space; /* steps not packed ahead for want of a tail block (tests) */
    } step_time;
    int64_t fail_forward_in; /* tests: forwards until an injected failure (0: none) */
};

/* Tests only: fn(e, user) runs inside every la_engine_submit after the request is queued and
 * before submit returns, on the submitting thread (NULL: none). A hook that steps the engine
 * there finishes a request before its submit returns: the race of issue 28, made certain. */
void la_engine_set_submit_hook(la_engine *e, void (*fn)(la_engine *e, void *user), void *user);

/* Tests only: the nth step with rows from now (1: the next) fails as a failed forward does
 * (LA_ERR_BACKEND, nothing computed), through the same recovery (la_scheduler_fail_step);
 * 0: none. Call between steps. */
void la_engine_fail_forward_in(la_engine *e, int64_t nth);

/* Wait for the step async scheduling queued ahead, if any, and drop its tokens (step.c;
 * engine shutdown). */
void la_engine_drain_async(la_engine *e);

/* The default token budget per step (la_engine_options.max_batch_tokens 0): vLLM's for its
 * OpenAI server (vllm/engine/arg_utils.py), 8192 on a GPU of 70 GiB or more and 2048 on a
 * smaller one (a step's activations share the memory the KV pool leaves); 1024 without
 * device memory of its own (the CPU: device_bytes 0); never below max_running.
 * device_bytes: the device's whole memory in bytes. */
int32_t la_engine_default_budget(int64_t device_bytes, int32_t max_running);

#endif
