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
 *
 * ---- Async scheduling (la_engine_options.async_scheduling) --------------------------------
 * A step of decode rows only, every request greedy without logits and nothing else waiting
 * (la_scheduler_can_pack_ahead), is queued on the device (la_forward_argmax_begin) and the
 * call returns without reading its tokens back. The next call packs the step after it
 * (la_scheduler_pack_ahead: each request's row at the next position, its token the queued
 * step's, read on the device: LA_TOKEN_PREV), queues it too, and only then waits for the
 * first step's tokens and runs 5 for it. So the host's packing, the backend's batch setup
 * and the accepting of tokens of one step overlap the device's work on the step before (as
 * in vLLM's async scheduling and SGLang's overlap scheduler). A request that stops in the
 * step read back (eos, a stop string) has its row of the queued step computed and dropped
 * (LA_SEQ_DROPPED); a request's last token by length gets no row ahead. Its blocks are freed
 * when it finishes: the queued step's write into its tail runs before any later step's
 * kernels on the device's stream, and nothing else (the KV store's copies, admissions) runs
 * until the queued step is read back (can_pack_ahead). When the step after cannot be packed
 * ahead, the call waits for the queued one and returns; the next call runs 1-5.
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
static la_status step_ahead(la_engine *e, la_err *err);

/* LA_DEBUG_CHECKS builds: the pool's accounting after every step. */
static void debug_check(la_engine *e) {
#ifdef LA_DEBUG_CHECKS
    la_err cerr;
    if (la_engine_check(e, &cerr) != LA_OK) {
        fprintf(stderr, "lazyattn: %s\n", cerr.msg);
        LA_ASSERT(!"KV pool accounting check failed");
    }
#else
    (void)e;
#endif
}
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
    la_status s = e->ahead ? step_ahead(e, err) : step_locked(e, err);
    pthread_mutex_unlock(&e->step_mu);
    return s;
}

static la_batch batch_of(const la_batch_builder *b) {
    return (la_batch){(int32_t)b->n_rows, b->tokens, b->pos, b->kpos, b->slots, (int32_t)b->n_seqs,
                      b->seqs, (int32_t)b->n_blocks, b->blocks, (int32_t)b->n_logits, b->logit_rows};
}

/* e->ids holds n token ids (allocated before a step is queued, so that reading one back never
 * fails for memory). */
static la_status reserve_ids(la_engine *e, int64_t n, la_err *err) {
    if (n <= e->cap_ids) return LA_OK;
    int32_t *p = realloc(e->ids, sizeof(int32_t) * (size_t)n);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "step: out of memory for token ids");
    e->ids = p;
    e->cap_ids = n;
    return LA_OK;
}

/* The rows of b whose token is dropped (LA_SEQ_DROPPED). */
static int64_t dropped_rows(const la_batch_builder *b) {
    int64_t n = 0;
    for (int64_t i = 0; i < b->n_packed; i++) n += b->packed[i].kind == LA_SEQ_DROPPED;
    return n;
}

/* Wait for the queued step b and drop its tokens (its requests stopped or failed). */
static void drain(la_engine *e, la_batch_builder *b) {
    la_err ignored = {0};
    (void)la_forward_argmax_end(e->be, e->ids, (int32_t)b->n_logits, &ignored);
    e->step_time.dropped += dropped_rows(b);
}

void la_engine_drain_async(la_engine *e) {
    pthread_mutex_lock(&e->step_mu);
    if (e->ahead) {
        drain(e, e->ahead);
        e->ahead = NULL;
    }
    pthread_mutex_unlock(&e->step_mu);
}

/* A call with a step queued (e->ahead; top of this file): pack and queue the step after it
 * when it may, then read the queued one back and run its step 5. */
static la_status step_ahead(la_engine *e, la_err *err) {
    la_err local = {0};
    if (!err) err = &local;
    la_batch_builder *cur = e->ahead, *next = e->builder; /* cur is e->spare */
    const double t_begin = la_now_ms();
    bool queued = false;
    double begin_ms = 0, t_fwd = t_begin; /* t_fwd: packing ahead done, the forward's clock */
    if (la_scheduler_can_pack_ahead(e, cur)) {
        la_err perr = {0}; /* not this call's error: without the step ahead, the next call packs it */
        la_status ps = la_scheduler_pack_ahead(e, cur, next, &perr);
        e->step_time.ahead_no_space += ps == LA_ERR_NO_SPACE;
        t_fwd = la_now_ms();
        if (ps == LA_OK && next->n_rows > 0 && reserve_ids(e, next->n_logits, &perr) == LA_OK) {
            la_batch batch = batch_of(next);
            e->be->batch_begin_ms = 0;
            queued = la_forward_argmax_begin(e->be, &batch, &perr) == LA_OK;
            begin_ms = e->be->batch_begin_ms;
        }
    }
    la_status s = la_forward_argmax_end(e->be, e->ids, (int32_t)cur->n_logits, err);
    const double t1 = la_now_ms();
    if (s == LA_OK) {
        la_scheduler_complete_step(e, cur, NULL, e->ids, queued ? next : NULL);
        if (queued && dropped_rows(next) == next->n_packed) { /* every request stopped: nothing to keep */
            drain(e, next);
            queued = false;
        }
        struct la_step_time *tm = &e->step_time;
        const double t2 = la_now_ms();
        tm->computed++;
        tm->decode++;
        tm->async++;
        tm->dropped += dropped_rows(cur);
        tm->rows += cur->n_rows;
        tm->schedule_ms += t_fwd - t_begin;
        tm->forward_ms += t1 - t_fwd;
        tm->begin_ms += begin_ms;
        tm->after_ms += t2 - t1;
        tm->decode_forward_ms += t1 - t_fwd;
        tm->decode_begin_ms += begin_ms;
        tm->decode_ms += t2 - t_begin;
    } else {
        if (queued) drain(e, next); /* the same requests: they fail below */
        queued = false;
        la_scheduler_fail_step(e, cur, err);
    }
    la_batch_builder_reset(cur);
    e->builder = cur; /* free again */
    e->spare = next;
    e->ahead = queued ? next : NULL;
    la_scheduler_refresh_stats(e);
    debug_check(e);
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
    la_err rerr = {0}; /* without the ids buffer the step runs as without async scheduling */
    if (s == LA_OK && b->n_rows > 0 && la_scheduler_can_pack_ahead(e, b) && reserve_ids(e, b->n_logits, &rerr) == LA_OK) {
        /* async scheduling: queue it; the next call packs the step after it, then reads it */
        const double t_fwd = la_now_ms();
        la_batch batch = batch_of(b);
        e->be->batch_begin_ms = 0;
        s = la_forward_argmax_begin(e->be, &batch, err);
        if (s == LA_OK) {
            struct la_step_time *tm = &e->step_time; /* its forward and after: the next call's */
            tm->schedule_ms += t_fwd - t_begin;
            tm->begin_ms += e->be->batch_begin_ms;
            tm->decode_begin_ms += e->be->batch_begin_ms;
            tm->decode_ms += la_now_ms() - t_begin;
            e->ahead = b;
            e->builder = e->spare;
            e->spare = b;
        } else {
            la_scheduler_fail_step(e, b, err);
        }
        la_scheduler_refresh_stats(e);
        debug_check(e);
        return s;
    }
    if (s == LA_OK && b->n_rows > 0) {
        size_t n_logits = (size_t)(b->n_logits ? b->n_logits : 1);
        bool greedy = la_scheduler_step_is_greedy(e, b);
        if (greedy) ids = malloc(sizeof(int32_t) * n_logits);
        else logits = malloc(sizeof(float) * n_logits * (size_t)e->cfg.vocab_size);
        if (!logits && !ids) s = la_err_set(err, LA_ERR_NO_MEMORY, "step: out of memory for logits");
        la_batch batch = batch_of(b);
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
            la_scheduler_complete_step(e, b, logits, ids, NULL);
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
    debug_check(e);
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
