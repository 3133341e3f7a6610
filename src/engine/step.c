/* The engine's step (la_engine_step, la_engine_run; include/lazyattn/lazyattn.h) and where
 * its time goes (la_engine_stats.step_*).
 *
 * ---- One step --------------------------------------------------------------------------
 *   1. intake    move submitted requests and cancellations from the thread-safe inbox
 *   2. admit     plan waiting requests in FIFO order (kv/plan.c): cached document blocks
 *                are pinned, missing ones allocated and indexed in flight; each document
 *                this plan must compute becomes a document job shared by every request
 *                that needs it. A plan that does not fit waits (LA_ERR_NO_SPACE).
 *   3. pack      under max_batch_tokens: one decode row per generating request (growing
 *                its tail by a block when needed, preempting the newest request if the
 *                pool is full), then chunks of document jobs, then chunks of tail prefill
 *                of requests whose documents are ready (BLOCK copies are made first)
 *   4. forward   one la_forward over every packed sequence
 *   5. finish    jobs that completed mark their blocks ready; prefill that completed and
 *                decode rows sample a token, stream text, check eos / stop / length
 *
 * la_engine_step runs 4 between the scheduler's 1-3 and 5 (scheduler.c, which also
 * describes preemption).
 */
#include "lazyattn/lazyattn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"
#include "base/timer.h"
#include "engine/doc_store.h"
#include "engine/engine_internal.h"
#include "engine/forward.h"
#include "engine/scheduler.h"
#include "kv/block_pool.h"

static la_status step_locked(la_engine *e, la_err *err);
/* Prefix-cache resets asked since the last step: the pool drops what nobody pins. */
static void run_resets(la_engine *e) {
    pthread_mutex_lock(&e->mu);
    uint64_t asked = e->resets_asked;
    pthread_mutex_unlock(&e->mu);
    if (asked == e->resets_done) return;
    int64_t n = la_kv_pool_drop_cached(e->pool);
    la_kv_pool_stats ps = la_kv_pool_get_stats(e->pool);
    pthread_mutex_lock(&e->mu);
    e->reset_dropped = n;
    e->resets_done = asked;
    /* the pool's counters as the reset left them, before the waiter returns: the step's own
     * refresh comes after it, too late for a caller that reads la_engine_get_stats next */
    e->stats.kv_blocks_free = ps.n_free;
    e->stats.kv_blocks_cached = ps.n_cached;
    e->stats.kv_blocks_pinned = ps.n_pinned;
    e->stats.kv_evictions = ps.evictions;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Whether step b computes document rows (a document job). */
static bool packs_documents(const la_batch_builder *b) {
    for (int64_t i = 0; i < b->n_packed; i++)
        if (b->packed[i].kind == LA_SEQ_JOB) return true;
    return false;
}

la_status la_engine_step(la_engine *e, la_err *err) {
    la_err local = {0};
    if (!err) err = &local; /* a failed step hands its message to the requests it fails */
    pthread_mutex_lock(&e->step_mu);
    la_status s = step_locked(e, err);
    pthread_mutex_unlock(&e->step_mu);
    return s;
}

#define STEP_SAMPLE 8

/* Whether every sequence of the step is one decode row. */
static bool decode_only(const la_batch_builder *b) {
    for (int64_t i = 0; i < b->n_packed; i++)
        if (b->packed[i].kind != LA_SEQ_DECODE) return false;
    return b->n_packed > 0;
}

static la_status step_locked(la_engine *e, la_err *err) {
    const double t_begin = la_now_ms();
    uint64_t *cancels;
    int32_t n_cancels;
    run_resets(e);
    la_scheduler_intake(e, &cancels, &n_cancels);
    la_scheduler_apply_cancels(e, cancels, n_cancels);
    free(cancels);
    la_scheduler_admit_waiting(e);
    la_doc_store_step(e->docs);   /* loads and copies of the KV store */
    la_scheduler_retire_jobs(e);  /* documents that finished loading */

    la_batch_builder *const b = e->builder; /* allocated by la_engine_create */
    la_batch_builder_reset(b);
    float *logits = NULL;
    int32_t *ids = NULL;
    la_status s = la_scheduler_pack_step(e, b, err);
    if (s == LA_OK && b->n_rows > 0) {
        size_t n_logits = (size_t)(b->n_logits ? b->n_logits : 1);
        bool greedy = la_scheduler_step_is_greedy(e, b);
        if (greedy) ids = malloc(sizeof(int32_t) * n_logits);
        else logits = malloc(sizeof(float) * n_logits * (size_t)e->cfg.vocab_size);
        if (!logits && !ids) s = la_err_set(err, LA_ERR_NO_MEMORY, "step: out of memory for logits");
        la_batch batch = {(int32_t)b->n_rows, b->tokens, b->pos, b->kpos, b->slots, (int32_t)b->n_seqs,
                          b->seqs, (int32_t)b->n_blocks, b->blocks, (int32_t)b->n_logits, b->logit_rows};
        /* The KV store's prefill rate (doc_store.h) from the forward's time on the device. A
         * backend whose operations are asynchronous (CUDA: ops->synchronize) has this step
         * start behind whatever is queued (earlier steps, KV copies) and, without logit rows,
         * return before it ran: every STEP_SAMPLE-th step is timed, waited for before and
         * after, and, while no rate is known, every step that computes a document; the others
         * keep their overlap. A synchronous backend's steps are all timed. */
        la_status (*sync)(la_backend *, la_err *) = e->be->ops->synchronize;
        bool timed = s == LA_OK && la_doc_store_times_steps(e->docs) &&
                     (!sync || ++e->timing_steps % STEP_SAMPLE == 0 ||
                      (la_doc_store_prefill_unknown(e->docs) && packs_documents(b)));
        const double t_fwd = la_now_ms(); /* the step's clock (la_engine_stats.step_*) */
        if (timed && sync) s = sync(e->be, err);
        if (s == LA_OK && e->fail_forward_in > 0 && --e->fail_forward_in == 0)
            s = la_err_set(err, LA_ERR_BACKEND, "step: forward failure injected by a test");
        double t0 = la_now_ms();
        if (s == LA_OK) s = greedy ? la_forward_argmax(e->be, &batch, ids, err) : la_forward(e->be, &batch, logits, err);
        if (s == LA_OK && timed && sync && b->n_logits == 0) s = sync(e->be, err);
        if (s == LA_OK && timed) la_doc_store_note_step(e->docs, b->n_rows, la_now_ms() - t0);
        const double t1 = la_now_ms();
        if (s == LA_OK) {
            la_scheduler_complete_step(e, b, logits, ids);
            struct la_step_time *tm = &e->step_time; /* engine thread only */
            const bool dec = decode_only(b);
            const double t2 = la_now_ms();
            tm->computed++;
            tm->decode += dec;
            tm->rows += b->n_rows;
            tm->schedule_ms += t_fwd - t_begin;
            tm->forward_ms += t1 - t_fwd;
            tm->begin_ms += e->be->batch_begin_ms;
            tm->after_ms += t2 - t1;
            if (dec) {
                tm->decode_forward_ms += t1 - t_fwd;
                tm->decode_begin_ms += e->be->batch_begin_ms;
                tm->decode_ms += t2 - t_begin;
            }
        }
    } else if (s == LA_ERR_NO_MEMORY && err && err->msg[0] == '\0') {
        la_err_set(err, s, "step: out of memory");
    }
    if (s != LA_OK) la_scheduler_fail_step(e, b, err);
    bool idle = b->n_rows == 0;
    free(logits);
    free(ids);
    /* nothing to compute while documents load: wait for the I/O instead of spinning */
    if (idle && s == LA_OK && la_doc_store_busy(e->docs)) usleep(200);
    la_scheduler_refresh_stats(e);
#ifdef LA_DEBUG_CHECKS
    la_err cerr;
    if (la_engine_check(e, &cerr) != LA_OK) {
        fprintf(stderr, "lazyattn: %s\n", cerr.msg);
        LA_ASSERT(!"KV pool accounting check failed");
    }
#endif
    return s;
}

bool la_engine_has_work(la_engine *e) {
    pthread_mutex_lock(&e->mu);
    bool w = e->n_live > 0 || e->n_cancel > 0 || e->resets_asked != e->resets_done || e->store_busy ||
             e->jobs_left;
    pthread_mutex_unlock(&e->mu);
    return w;
}

void la_engine_wait_work(la_engine *e, int timeout_ms) {
    pthread_mutex_lock(&e->mu);
    if (e->n_live == 0 && e->n_cancel == 0 && e->resets_asked == e->resets_done && !e->store_busy &&
        !e->jobs_left) {
        struct timespec ts = la_deadline_after_ms(timeout_ms);
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
}

la_status la_engine_run(la_engine *e, la_err *err) {
    la_status first = LA_OK;
    while (la_engine_has_work(e)) {
        la_status s = la_engine_step(e, err);
        if (s != LA_OK && first == LA_OK) first = s;
    }
    return first;
}
