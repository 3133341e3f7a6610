/* The scheduler (scheduler.c): continuous batching over the engine's queues. la_engine_step
 * (engine.c) calls it in this order: intake, apply_cancels, admit_waiting, pack_step, then
 * after the forward complete_step (or fail_step), then refresh_stats. Engine thread only
 * except la_scheduler_blocks_needed. Private to src/engine/.
 */
#ifndef LA_ENGINE_SCHEDULER_H
#define LA_ENGINE_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "engine/engine_internal.h"
#include "engine/request.h"
#include "lazyattn/lazyattn.h"

/* What a packed sequence of the step computes. */
/* LA_SEQ_DROPPED: a decode row packed ahead (async scheduling) whose request stopped in the
 * step before it: computed, its token dropped. */
typedef enum la_seq_kind { LA_SEQ_DECODE, LA_SEQ_JOB, LA_SEQ_PREFILL, LA_SEQ_RECOMPUTE, LA_SEQ_DROPPED } la_seq_kind;

/* One sequence of the step: a request's decode row, tail prefill chunk or recovery chunk
 * (kv/plan.h), or a document job's chunk. */
typedef struct la_packed_seq {
    la_seq_kind kind;
    la_request *r;
    la_doc_job *j;
    int32_t n_rows;
    int32_t logit_index; /* into the logits array, or -1 */
} la_packed_seq;

/* The step's batch as it is packed: the la_batch arrays (backend.h) and the sequences. */
typedef struct la_batch_builder {
    int32_t *tokens, *pos, *kpos; /* [n_rows] */
    int64_t *slots;               /* [n_rows] */
    int64_t n_rows, cap_rows;
    la_batch_seq *seqs;
    int64_t n_seqs, cap_seqs;
    la_attn_block *blocks;
    int64_t n_blocks, cap_blocks;
    int32_t *logit_rows;
    int64_t n_logits, cap_logits;
    la_packed_seq *packed;
    int64_t n_packed, cap_packed;
} la_batch_builder;

/* Empty b for the next step, keeping its arrays. */
void la_batch_builder_reset(la_batch_builder *b);
/* Free b's arrays (not b). */
void la_batch_builder_free(la_batch_builder *b);

/* KV blocks r needs at its largest (documents, BLOCK copies, tail + max_tokens). Any thread. */
int64_t la_scheduler_blocks_needed(const la_engine *e, const la_request *r);

/* Move submitted requests from the inbox to the waiting queue and take the cancelled ids
 * (*cancels: caller frees). */
void la_scheduler_intake(la_engine *e, uint64_t **cancels, int32_t *n_cancels);
/* Finish the waiting and running requests of ids[0:n] as cancelled. */
void la_scheduler_apply_cancels(la_engine *e, uint64_t *ids, int32_t n);
/* Admit waiting requests in FIFO order while fewer than max_running run: a plan that does
 * not fit yet waits, any other error finishes the request. */
void la_scheduler_admit_waiting(la_engine *e);
/* Pack the step into b: decode rows (preempting when the pool is full), document job
 * chunks, tail prefill chunks, under max_batch_tokens. */
la_status la_scheduler_pack_step(la_engine *e, la_batch_builder *b, la_err *err);
/* Whether the step may take the backend's argmax instead of logits. */
bool la_scheduler_step_is_greedy(const la_engine *e, const la_batch_builder *b);
/* After the forward: advance jobs and requests, sample and accept tokens, retire finished
 * jobs and requests. One of logits [n_logits, vocab] and ids [n_logits] is NULL. next: the
 * step packed ahead of b's tokens (async scheduling) or NULL; the rows it has of requests
 * that finish here become LA_SEQ_DROPPED. */
void la_scheduler_complete_step(la_engine *e, la_batch_builder *b, const float *logits,
                                const int32_t *ids, la_batch_builder *next);

/* Async scheduling (step.c): whether the step after cur (packed, its tokens not read back)
 * may be packed before they are: async scheduling is on, every sequence of cur is a decode
 * row of a running request that decodes greedily without logits (or a dropped row), every
 * running request is in cur, and nothing else waits for the engine (submissions, cancellations, cache resets,
 * waiting requests, document jobs, the KV store's loads and copies, a test's injected
 * failure). */
bool la_scheduler_can_pack_ahead(la_engine *e, const la_batch_builder *cur);

/* Pack into next (reset) the decode rows of the step after cur, before cur's tokens are
 * read back: one row per request of cur, in cur's order, at the tail position after cur's
 * row, its token LA_TOKEN_PREV(cur's logit row) (backend.h); a request whose token of cur
 * ends it by length (max_tokens, the context) gets none. LA_ERR_NO_SPACE when a tail block
 * cannot be had (nothing is preempted: the caller reads cur back first; the blocks reserved
 * stay the requests'), LA_ERR_NO_MEMORY. */
la_status la_scheduler_pack_ahead(la_engine *e, const la_batch_builder *cur, la_batch_builder *next, la_err *err);
/* Retire the jobs whose every token is computed or loaded (their blocks become ready). */
void la_scheduler_retire_jobs(la_engine *e);
/* After a failed forward: fail the step's requests and jobs, keep everything else. */
void la_scheduler_fail_step(la_engine *e, la_batch_builder *b, const la_err *err);
/* Refresh the stats snapshot that la_engine_get_stats reads. */
void la_scheduler_refresh_stats(la_engine *e);

/* Drop a document job and its pins; its computed blocks become ready (computed) or leave
 * the index (not computed). j must be unlinked. */
void la_doc_job_free(la_engine *e, la_doc_job *j, bool computed);

#endif
