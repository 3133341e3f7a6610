/* The scheduler (scheduler.h): admission of waiting requests with their plans and document
 * jobs, the packing of one step under the token budget, preemption, cancels, and the
 * bookkeeping of a step once its forward ran (or failed). Engine thread only.
 *
 * Preemption is by recompute: the victim's plan is released (cached documents stay in
 * the cache, unpinned) and it returns to the head of the queue with its generated tokens
 * appended to its prompt, so resuming continues exactly where it stopped.
 */
#include "engine/scheduler.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/timer.h"
#include "engine/doc_store.h"
#include "engine/events.h"
#include "engine/recovery.h"
#include "engine/sampling.h"
#include "engine/token_choice.h"
#include "kv/block_pool.h"
#include "kv/plan.h"

static int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

#define VEC_PUSH(vec, n, cap, val)                                                          \
    do {                                                                                    \
        if ((n) == (cap)) {                                                                 \
            int64_t nc_ = (cap) ? 2 * (cap) : 64;                                           \
            void *np_ = realloc((vec), sizeof(*(vec)) * (size_t)nc_);                       \
            if (!np_) goto oom;                                                             \
            (vec) = np_;                                                                    \
            (cap) = nc_;                                                                    \
        }                                                                                   \
        (vec)[(n)++] = (val);                                                               \
    } while (0)

/* ============================================================ admission ============== */

/* Blocks a request needs at its largest (documents, BLOCK copies, tail + max_tokens). */
int64_t la_scheduler_blocks_needed(const la_engine *e, const la_request *r) {
    int32_t B = e->opts.block_size;
    int64_t n = ceil_div(r->n_tail + r->sampling.max_tokens, B);
    for (int32_t d = 0; d < r->n_docs; d++) {
        n += (int64_t)ceil_div(r->doc_len[d], B) * (r->method == LA_METHOD_BLOCK ? 2 : 1);
        int32_t rc = r->recompute_first < r->doc_len[d] ? r->recompute_first : r->doc_len[d];
        if (r->recompute_ratio > 0.0f) rc = r->doc_len[d]; /* selected recovery copies every block */
        if (d > 0 && r->method != LA_METHOD_BLOCK) n += ceil_div(rc, B); /* recovery's copies */
    }
    /* n > 1: every other choice shares the prompt, copies its last block, grows its own */
    n += (int64_t)(r->n_choices - 1) * (ceil_div(r->sampling.max_tokens, B) + 1);
    return n;
}

/* Out of memory at document d of r: the documents from d on get no job, so no one may find
 * their blocks (the jobs already started keep theirs). */
static la_status jobs_oom(la_engine *e, la_request *r, int32_t d, la_err *err) {
    for (; d < r->plan.n_docs; d++)
        if (r->plan.docs[d].compute) la_plan_doc_unindex(&r->plan.docs[d], e->pool);
    return la_err_set(err, LA_ERR_NO_MEMORY, "document job: out of memory");
}

static la_status start_jobs(la_engine *e, la_request *r, la_err *err) {
    int32_t B = e->opts.block_size;
    for (int32_t d = 0; d < r->plan.n_docs; d++) {
        const la_plan_doc *doc = &r->plan.docs[d];
        if (!doc->compute) continue;
        la_doc_job *j = calloc(1, sizeof *j);
        int32_t *ids = j ? malloc(sizeof(int32_t) * (size_t)doc->n_blocks) : NULL;
        int32_t *tok = j ? malloc(sizeof(int32_t) * (size_t)doc->n_tokens) : NULL;
        if (!j || !ids || !tok) {
            free(j);
            free(ids);
            free(tok);
            return jobs_oom(e, r, d, err);
        }
        j->method = r->method;
        j->doc = *doc;
        j->doc.copy_ids = NULL;
        memcpy(ids, doc->block_ids, sizeof(int32_t) * (size_t)doc->n_blocks);
        j->doc.block_ids = ids;
        memcpy(tok, r->doc_ids[d], sizeof(int32_t) * (size_t)doc->n_tokens);
        j->tokens = tok;
        j->from = doc->n_reused * B;
        if (doc->enc_start > 0) { /* computed after document 0: hold its blocks too */
            const la_plan_doc *d0 = &r->plan.docs[0];
            j->ctx = *d0;
            j->ctx.copy_ids = NULL;
            j->ctx.recompute_rows = NULL;
            if (!(j->ctx.block_ids = malloc(sizeof(int32_t) * (size_t)d0->n_blocks))) {
                free(j);
                free(ids);
                free(tok);
                return jobs_oom(e, r, d, err);
            }
            memcpy(j->ctx.block_ids, d0->block_ids, sizeof(int32_t) * (size_t)d0->n_blocks);
            for (int32_t b = 0; b < d0->n_blocks; b++) la_kv_pool_ref(e->pool, d0->block_ids[b]);
        }
        for (int32_t b = 0; b < doc->n_blocks; b++) la_kv_pool_ref(e->pool, ids[b]);
        if (e->jobs_tail) e->jobs_tail->next = j;
        else e->jobs_head = j;
        e->jobs_tail = j;
        la_doc_store_job_start(e->docs, j, r); /* found in a store tier: loads instead */
    }
    return LA_OK;
}

void la_doc_job_free(la_engine *e, la_doc_job *j, bool computed) {
    la_doc_store_job_end(e->docs, j, computed);
    for (int32_t b = j->doc.n_blocks - 1; b >= 0; b--) {
        int32_t id = j->doc.block_ids[b];
        if (b >= j->doc.n_reused) {
            if (computed) la_kv_pool_mark_ready(e->pool, id);
            else la_kv_pool_unregister(e->pool, id);
        }
        la_kv_pool_unpin(e->pool, id);
    }
    for (int32_t b = j->ctx.n_blocks - 1; b >= 0; b--) la_kv_pool_unpin(e->pool, j->ctx.block_ids[b]);
    free(j->ctx.block_ids);
    free(j->doc.block_ids);
    free(j->tokens);
    free(j);
}

/* Recovery: move r->rc_doc to the next document with tokens left to recompute (or n_docs). */
static void next_recompute(la_request *r) {
    while (r->rc_doc < r->plan.n_docs && r->rc_done >= r->plan.docs[r->rc_doc].n_recompute) {
        r->rc_doc++;
        r->rc_done = 0;
    }
}

static la_status admit(la_engine *e, la_request *r, la_err *err) {
    la_plan_input_doc *docs = malloc(sizeof(la_plan_input_doc) * (size_t)(r->n_docs ? r->n_docs : 1));
    if (!docs) return la_err_set(err, LA_ERR_NO_MEMORY, "admit: out of memory");
    for (int32_t d = 0; d < r->n_docs; d++) docs[d] = (la_plan_input_doc){r->doc_ids[d], r->doc_len[d]};
    const la_recovery rc = {r->recompute_first, r->recompute_ratio};
    la_status s = la_plan_create(e->pool, r->method, r->salt, &rc, r->doc_context, docs, r->n_docs, r->tail,
                                 r->n_tail, &r->plan, err);
    free(docs);
    LA_TRY(s);
    s = start_jobs(e, r, err);
    if (s != LA_OK) {
        la_plan_release(&r->plan, e->pool);
        return s;
    }
    if (r->stats.n_preemptions == 0) { /* reuse is counted once, at the first plan */
        r->stats.doc_tokens_reused = r->plan.doc_tokens_reused;
        r->stats.doc_tokens_computed = r->plan.doc_tokens_computed;
        r->stats.prefix_tokens_reused = r->plan.tail_tokens_reused;
        r->stats.doc_tokens_recomputed = r->plan.doc_tokens_recomputed;
        if (r->method == LA_METHOD_RECOMPUTE || r->method == LA_METHOD_PREFIX) {
            /* documents are part of one prompt here: the ones prefix caching did not serve
             * (reused ones are counted in prefix_tokens_reused only) */
            int64_t served = r->plan.tail_tokens_reused < r->n_doc_tokens ? r->plan.tail_tokens_reused
                                                                           : r->n_doc_tokens;
            r->stats.doc_tokens_computed = r->n_doc_tokens - served;
        }
    }
    r->n_plan_tail = r->n_tail;
    r->n_computed = r->plan.n_tail_cached;
    r->copies_done = false;
    r->probed = !(r->recompute_ratio > 0.0f);
    free(r->probe_dev); /* a preempted request probes its new plan again */
    r->probe_dev = NULL;
    r->probe_done = 0;
    r->rc_doc = 0;
    r->rc_done = 0;
    next_recompute(r);
    r->state = LA_REQ_PREFILL;
    r->t_admit = la_now_ms();
    if (r->stats.queue_ms == 0) r->stats.queue_ms = r->t_admit - r->t_submit;
    return LA_OK;
}

static int64_t count_running(const la_engine *e) {
    int64_t n = 0;
    for (la_request *r = e->running_head; r; r = r->next) n++;
    return n;
}

void la_scheduler_admit_waiting(la_engine *e) {
    while (e->waiting_head && count_running(e) < e->opts.max_running) {
        la_request *r = e->waiting_head;
        la_err err;
        la_status s = admit(e, r, &err);
        if (s == LA_ERR_NO_SPACE && (e->running_head || e->jobs_head)) return; /* wait */
        la_request_list_remove(&e->waiting_head, &e->waiting_tail, r);
        pthread_mutex_lock(&e->mu);
        e->n_queued--;
        pthread_mutex_unlock(&e->mu);
        if (s != LA_OK) {
            r->state = LA_REQ_WAITING;
            la_request_finish(e, r, LA_FINISH_ERROR, s, err.msg);
            continue;
        }
        la_request_list_push(&e->running_head, &e->running_tail, r);
    }
}

/* Return a running request to the head of the queue, releasing its blocks. */
static void preempt(la_engine *e, la_request *r) {
    la_request_list_remove(&e->running_head, &e->running_tail, r);
    la_doc_store_register_tail(e->docs, r);
    la_plan_release(&r->plan, e->pool);
    r->state = LA_REQ_WAITING;
    r->n_computed = 0;
    r->stats.n_preemptions++;
    r->next = e->waiting_head;
    e->waiting_head = r;
    if (!e->waiting_tail) e->waiting_tail = r;
    pthread_mutex_lock(&e->mu);
    e->n_queued++;
    e->stats.n_preemptions++;
    pthread_mutex_unlock(&e->mu);
}

void la_scheduler_apply_cancels(la_engine *e, uint64_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        /* the choices of one request share its id: every one goes */
        for (la_request *r = e->waiting_head, *next; r; r = next) {
            next = r->next;
            if (r->id == ids[i]) {
                la_request_list_remove(&e->waiting_head, &e->waiting_tail, r);
                la_request_finish_waiting(e, r, LA_FINISH_CANCELLED, LA_ERR_CANCELLED, "cancelled");
            }
        }
        for (la_request *r = e->running_head, *next; r; r = next) {
            next = r->next;
            if (r->id == ids[i]) {
                la_request_list_remove(&e->running_head, &e->running_tail, r);
                la_request_finish(e, r, LA_FINISH_CANCELLED, LA_ERR_CANCELLED, "cancelled");
            }
        }
    }
}

/* ============================================================ packing ================ */

void la_batch_builder_reset(la_batch_builder *b) {
    b->n_rows = b->n_seqs = b->n_blocks = b->n_logits = b->n_packed = 0;
}

void la_batch_builder_free(la_batch_builder *b) {
    free(b->tokens);
    free(b->pos);
    free(b->kpos);
    free(b->logit_rows);
    free(b->slots);
    free(b->seqs);
    free(b->blocks);
    free(b->packed);
}

static la_status add_row(la_batch_builder *b, int32_t token, int32_t pos, int32_t kpos, int64_t slot) {
    if (b->n_rows == b->cap_rows) {
        int64_t cap = b->cap_rows ? 2 * b->cap_rows : 256;
        int32_t *t = realloc(b->tokens, sizeof(int32_t) * (size_t)cap);
        if (t) b->tokens = t;
        int32_t *p = realloc(b->pos, sizeof(int32_t) * (size_t)cap);
        if (p) b->pos = p;
        int32_t *k = realloc(b->kpos, sizeof(int32_t) * (size_t)cap);
        if (k) b->kpos = k;
        int64_t *sl = realloc(b->slots, sizeof(int64_t) * (size_t)cap);
        if (sl) b->slots = sl;
        if (!t || !p || !k || !sl) return LA_ERR_NO_MEMORY;
        b->cap_rows = cap;
    }
    b->tokens[b->n_rows] = token;
    b->pos[b->n_rows] = pos;
    b->kpos[b->n_rows] = kpos;
    b->slots[b->n_rows] = slot;
    b->n_rows++;
    return LA_OK;
}

static la_status reserve_blocks(la_batch_builder *b, int64_t n) {
    if (b->n_blocks + n > b->cap_blocks) {
        int64_t cap = b->cap_blocks ? b->cap_blocks : 256;
        while (cap < b->n_blocks + n) cap *= 2;
        la_attn_block *p = realloc(b->blocks, sizeof(la_attn_block) * (size_t)cap);
        if (!p) return LA_ERR_NO_MEMORY;
        b->blocks = p;
        b->cap_blocks = cap;
    }
    return LA_OK;
}

static la_status add_seq(la_batch_builder *b, la_packed_seq ps, int32_t row0, int32_t block0,
                         bool want_logits) {
    la_batch_seq s = {row0, ps.n_rows, block0, (int32_t)(b->n_blocks - block0)};
    VEC_PUSH(b->seqs, b->n_seqs, b->cap_seqs, s);
    ps.logit_index = -1;
    if (want_logits) {
        ps.logit_index = (int32_t)b->n_logits;
        int32_t last = row0 + ps.n_rows - 1;
        VEC_PUSH(b->logit_rows, b->n_logits, b->cap_logits, last);
    }
    VEC_PUSH(b->packed, b->n_packed, b->cap_packed, ps);
    return LA_OK;
oom:
    return LA_ERR_NO_MEMORY;
}

/* Tail rows [from, from + n) of r, attending to the view over from + n tail tokens; their
 * tokens tokens[0, n), or r's own (NULL). */
static la_status pack_tail(la_batch_builder *b, la_request *r, la_seq_kind kind, int32_t from,
                           int32_t n, bool want_logits, const int32_t *tokens) {
    int32_t row0 = (int32_t)b->n_rows, block0 = (int32_t)b->n_blocks;
    if (!tokens) tokens = r->tail + from;
    for (int32_t t = from; t < from + n; t++) {
        int32_t p = r->plan.tail_start + t;
        LA_TRY(add_row(b, tokens[t - from], p, p, la_plan_tail_slot(&r->plan, t)));
    }
    LA_TRY(reserve_blocks(b, la_plan_view_size(&r->plan, from + n)));
    b->n_blocks += la_plan_tail_view(&r->plan, from + n, b->blocks + b->n_blocks);
    la_packed_seq ps = {.kind = kind, .r = r, .n_rows = n};
    return add_seq(b, ps, row0, block0, want_logits);
}

static la_status pack_job(la_batch_builder *b, la_engine *e, la_doc_job *j, int32_t n) {
    int32_t B = e->opts.block_size, row0 = (int32_t)b->n_rows, block0 = (int32_t)b->n_blocks;
    int32_t from = j->from + j->n_done;
    for (int32_t i = from; i < from + n; i++)
        LA_TRY(add_row(b, j->tokens[i], la_plan_doc_pos(j->method, &j->doc, i),
                       la_plan_doc_k_pos(j->method, &j->doc, i), la_plan_doc_slot(B, &j->doc, i)));
    LA_TRY(reserve_blocks(b, la_plan_doc_view_size(B, &j->doc, &j->ctx, from + n)));
    b->n_blocks += la_plan_doc_view(j->method, B, &j->doc, &j->ctx, from + n, b->blocks + b->n_blocks);
    la_packed_seq ps = {.kind = LA_SEQ_JOB, .j = j, .n_rows = n};
    return add_seq(b, ps, row0, block0, false);
}

/* Recovery: recomputed tokens [r->rc_done, + n) of document r->rc_doc (each attends to its
 * own document up to itself: the view reaches the last of them). */
static la_status pack_recompute(la_batch_builder *b, la_request *r, int32_t n) {
    const la_plan *pl = &r->plan;
    const la_plan_doc *doc = &pl->docs[r->rc_doc];
    int32_t row0 = (int32_t)b->n_rows, block0 = (int32_t)b->n_blocks, to = r->rc_done + n;
    for (int32_t k = r->rc_done; k < to; k++) {
        const int32_t i = la_plan_recompute_row(doc, k);
        LA_TRY(add_row(b, r->doc_ids[r->rc_doc][i], doc->start + i, la_plan_recompute_k_pos(pl, doc, i),
                       la_plan_recompute_slot(pl, doc, i)));
    }
    const int32_t n_visible = la_plan_recompute_row(doc, to - 1) + 1;
    LA_TRY(reserve_blocks(b, la_plan_recompute_view_size(pl, r->rc_doc, n_visible)));
    b->n_blocks += la_plan_recompute_view(pl, r->rc_doc, n_visible, b->blocks + b->n_blocks);
    la_packed_seq ps = {.kind = LA_SEQ_RECOMPUTE, .r = r, .n_rows = n};
    return add_seq(b, ps, row0, block0, false);
}

/* The per-request copies of r's document blocks, once: BLOCK copies every block and
 * re-rotates it by S_d - enc_start; recovery copies the blocks it recomputes into, as they are. */
static la_status make_copies(la_engine *e, la_request *r, la_err *err) {
    int32_t B = e->opts.block_size;
    for (int32_t d = 0; d < r->plan.n_docs; d++) {
        const la_plan_doc *doc = &r->plan.docs[d];
        for (int32_t b = 0; b < la_plan_doc_copies(&r->plan, doc); b++) {
            int32_t n_valid = doc->n_tokens - b * B < B ? doc->n_tokens - b * B : B;
            LA_TRY(e->be->ops->kv_copy_rotate(e->be, doc->block_ids[b], doc->copy_ids[b], n_valid,
                                              r->method == LA_METHOD_BLOCK ? la_plan_doc_delta(doc) : 0, err));
        }
    }
    r->copies_done = true;
    return LA_OK;
}

/* Whether a job computed after document 0 can run: document 0's blocks are ready. */
static bool job_ctx_ready(const la_engine *e, const la_doc_job *j) {
    for (int32_t b = 0; b < j->ctx.n_blocks; b++)
        if (!la_kv_pool_is_ready(e->pool, j->ctx.block_ids[b])) return false;
    return true;
}

/* The preemption victim: the newest running request. Decode rows are packed from the
 * oldest request on, so a victim other than the request asking is not packed yet. */
static la_request *pick_victim(la_engine *e) { return e->running_tail; }

static bool job_ctx_stranded(const la_engine *e, const la_doc_job *j);
static void drop_stranded(la_engine *e, const la_batch_builder *b, const la_err *err);

/* Tokens of job j that step 2 of la_scheduler_pack_step may compute now (<= 0: none: a
 * store tier serves it, its context is not ready, or it is done). */
static int32_t job_tokens_ready(const la_engine *e, const la_doc_job *j) {
    if (j->load != LA_JOB_COMPUTE || !job_ctx_ready(e, j)) return 0;
    return j->doc.n_tokens - j->from - j->n_done;
}

/* Whether step 3 packs r's prefill: r is in prefill and its documents are ready. */
static bool tail_prefill_ready(const la_engine *e, const la_request *r) {
    return r->state == LA_REQ_PREFILL && la_plan_docs_ready(&r->plan, e->pool);
}

/* Whether an admitted request's prefill can move in this step (prefill_first): its own
 * tokens (documents ready), or a document job to compute whose context is ready while some
 * admitted request is still in prefill. A job whose requests are all gone (cancelled,
 * finished) runs beside the decode rows, as without prefill_first. */
static bool prefill_ready(const la_engine *e) {
    bool in_prefill = false;
    for (const la_request *r = e->running_head; r; r = r->next)
        if (r->state == LA_REQ_PREFILL) {
            if (tail_prefill_ready(e, r)) return true;
            in_prefill = true;
        }
    if (in_prefill)
        for (const la_doc_job *j = e->jobs_head; j; j = j->next)
            if (job_tokens_ready(e, j) > 0) return true;
    return false;
}

la_status la_scheduler_pack_step(la_engine *e, la_batch_builder *b, la_err *err) {
    int64_t budget = e->opts.max_batch_tokens;
    /* 0. a job computing after a document 0 that will never be ready (a record copy that
     * failed and fell back to computing after document 0's job failed) would wait forever:
     * drop it */
    for (la_doc_job *j = e->jobs_head; j; j = j->next)
        if (j->load == LA_JOB_COMPUTE && !job_ctx_ready(e, j) && job_ctx_stranded(e, j)) {
            la_err dead = {0};
            la_err_set(&dead, LA_ERR_BACKEND, "a document was to be computed after document 0 (doc_context "
                                              "preamble), whose computation failed");
            drop_stranded(e, NULL, &dead);
            break;
        }
    /* 1. decode rows (not while prefill work is ready under prefill_first) */
    for (la_request *r = e->opts.prefill_first && prefill_ready(e) ? NULL : e->running_head; r && budget > 0;) {
        la_request *next = r->next;
        if (r->state == LA_REQ_DECODE) {
            la_status s = la_plan_reserve_tail(&r->plan, e->pool, r->n_computed + 1, err);
            if (s == LA_ERR_NO_SPACE) {
                la_request *v = pick_victim(e);
                preempt(e, v);
                if (v == r) {
                    r = next;
                    continue;
                }
                continue; /* retry r with the freed blocks */
            }
            LA_TRY(s);
            LA_TRY(pack_tail(b, r, LA_SEQ_DECODE, r->n_computed, 1, true, NULL));
            budget--;
        }
        r = next;
    }
    /* 2. document jobs (not those a store tier serves) */
    for (la_doc_job *j = e->jobs_head; j && budget > 0; j = j->next) {
        int32_t left = job_tokens_ready(e, j);
        int32_t n = left < budget ? left : (int32_t)budget;
        if (n <= 0) continue;
        LA_TRY(pack_job(b, e, j, n));
        budget -= n;
    }
    /* 3. tail prefill of requests whose documents are ready */
    for (la_request *r = e->running_head, *next; r && budget > 0; r = next) {
        next = r->next;
        if (!tail_prefill_ready(e, r)) continue;
        if (!r->copies_done) LA_TRY(make_copies(e, r, err));
        if (!r->probed) { /* selected recovery: the probe picks the tokens, over steps (engine/recovery.h) */
            la_err perr = {0};
            int64_t used = 0;
            la_status ps = la_recovery_probe_step(e, r, budget, &used, &perr);
            budget -= used;
            if (ps != LA_OK) { /* this request fails alone; nothing of it is packed yet */
                la_request_list_remove(&e->running_head, &e->running_tail, r);
                la_request_finish(e, r, LA_FINISH_ERROR, ps, perr.msg);
                continue;
            }
            if (r->probed) { /* the plan's recomputed tokens are the probe's now */
                r->rc_doc = 0, r->rc_done = 0;
                next_recompute(r);
            }
            if (!r->probed || budget <= 0) continue;
        }
        /* recovery first: the tail reads the recomputed tokens. Document by document in
         * order (each reads the ones before it), all of them may go in one step: at every
         * layer the batch's K/V are written before any row attends. */
        int32_t rc_doc = r->rc_doc, rc_done = r->rc_done;
        while (r->rc_doc < r->plan.n_docs && budget > 0) {
            int32_t left = r->plan.docs[r->rc_doc].n_recompute - r->rc_done;
            int32_t n = left < budget ? left : (int32_t)budget;
            LA_TRY(pack_recompute(b, r, n));
            budget -= n;
            r->rc_done += n;
            next_recompute(r);
        }
        bool recompute_left = r->rc_doc < r->plan.n_docs;
        r->rc_doc = rc_doc, r->rc_done = rc_done; /* advanced when the step completes */
        if (recompute_left || budget == 0) continue;
        int32_t left = r->n_plan_tail - r->n_computed;
        int32_t n = left < budget ? left : (int32_t)budget;
        LA_TRY(pack_tail(b, r, LA_SEQ_PREFILL, r->n_computed, n, n == left, NULL));
        budget -= n;
    }
    return LA_OK;
}

/* ============================================================ async scheduling ====== */

bool la_scheduler_can_pack_ahead(la_engine *e, const la_batch_builder *cur) {
    if (!e->async_on || cur->n_packed == 0 || cur->n_logits != cur->n_packed || e->fail_forward_in > 0 ||
        e->waiting_head || e->jobs_head || la_doc_store_busy(e->docs))
        return false;
    int64_t n_running = 0;
    for (la_request *r = e->running_head; r; r = r->next) {
        if (r->state != LA_REQ_DECODE) return false;
        n_running++;
    }
    int64_t n_live = 0; /* cur's rows of requests that stopped before it are dropped */
    for (int64_t i = 0; i < cur->n_packed; i++) {
        const la_packed_seq *ps = &cur->packed[i];
        if (ps->kind == LA_SEQ_DROPPED) continue;
        if (ps->kind != LA_SEQ_DECODE || ps->logit_index < 0 || la_request_needs_logits(ps->r)) return false;
        n_live++;
    }
    if (n_running != n_live) return false;
    pthread_mutex_lock(&e->mu);
    const bool quiet = !e->inbox_head && e->n_cancel == 0 && e->resets_asked == e->resets_done;
    pthread_mutex_unlock(&e->mu);
    return quiet;
}

la_status la_scheduler_pack_ahead(la_engine *e, const la_batch_builder *cur, la_batch_builder *next, la_err *err) {
    la_batch_builder_reset(next);
    for (int64_t i = 0; i < cur->n_packed; i++) {
        const la_packed_seq *ps = &cur->packed[i];
        la_request *r = ps->r;
        if (ps->kind == LA_SEQ_DROPPED) continue;
        /* cur's token ends r by length (la_request_accept_token's rule): no row */
        if (r->n_generated + 1 >= r->sampling.max_tokens || r->plan.tail_start + r->n_tail + 1 >= e->max_context)
            continue;
        const int32_t t = r->n_computed + 1; /* cur computes tail token n_computed */
        LA_TRY(la_plan_reserve_tail(&r->plan, e->pool, t + 1, err));
        const int32_t token = LA_TOKEN_PREV(ps->logit_index);
        r->ahead_seq = (int32_t)next->n_packed;
        if (pack_tail(next, r, LA_SEQ_DECODE, t, 1, true, &token) != LA_OK)
            return la_err_set(err, LA_ERR_NO_MEMORY, "async scheduling: out of memory");
    }
    return LA_OK;
}

/* r is leaving the running requests: its row in the step packed ahead, if any, is dropped. */
static void drop_ahead(la_batch_builder *next, const la_request *r) {
    if (next && r->ahead_seq >= 0 && r->ahead_seq < next->n_packed && next->packed[r->ahead_seq].r == r) {
        next->packed[r->ahead_seq].kind = LA_SEQ_DROPPED;
        next->packed[r->ahead_seq].r = NULL;
    }
}

/* ============================================================ step =================== */

void la_scheduler_intake(la_engine *e, uint64_t **cancels, int32_t *n_cancels) {
    pthread_mutex_lock(&e->mu);
    for (la_request *r = e->inbox_head, *next; r; r = next) {
        next = r->next;
        la_request_list_push(&e->waiting_head, &e->waiting_tail, r);
    }
    e->inbox_head = e->inbox_tail = NULL;
    *cancels = e->cancel_ids;
    *n_cancels = e->n_cancel;
    e->cancel_ids = NULL;
    e->n_cancel = e->cancel_cap = 0;
    pthread_mutex_unlock(&e->mu);
}

void la_scheduler_refresh_stats(la_engine *e) {
    la_kv_pool_stats ps = la_kv_pool_get_stats(e->pool);
    la_engine_store_stats ss;
    la_doc_store_get_stats(e->docs, &ss);
    const bool store_busy = la_doc_store_busy(e->docs), jobs_left = e->jobs_head != NULL;
    int64_t n_wait = 0;
    for (la_request *r = e->waiting_head; r; r = r->next) n_wait++;
    pthread_mutex_lock(&e->mu);
    e->stats.n_waiting = n_wait;
    for (la_request *r = e->inbox_head; r; r = r->next) e->stats.n_waiting++;
    e->stats.n_running = count_running(e);
    e->stats.kv_blocks_total = ps.n_blocks;
    e->stats.kv_blocks_free = ps.n_free;
    e->stats.kv_blocks_cached = ps.n_cached;
    e->stats.kv_blocks_pinned = ps.n_pinned;
    e->stats.kv_hits = ps.hits;
    e->stats.kv_misses = ps.misses;
    e->stats.kv_evictions = ps.evictions;
    e->stats.block_size = e->opts.block_size;
    e->stats.n_steps++;
    e->stats.choose_s = e->choose_ms / 1e3;
    e->stats.grammar_s = e->grammar_ms / 1e3;
    const struct la_step_time *tm = &e->step_time;
    e->stats.steps_computed = tm->computed;
    e->stats.steps_decode = tm->decode;
    e->stats.step_rows = tm->rows;
    e->stats.step_schedule_s = tm->schedule_ms / 1e3;
    e->stats.step_forward_s = tm->forward_ms / 1e3;
    e->stats.step_decode_forward_s = tm->decode_forward_ms / 1e3;
    e->stats.step_decode_s = tm->decode_ms / 1e3;
    e->stats.step_after_s = tm->after_ms / 1e3;
    e->stats.step_batch_begin_s = tm->begin_ms / 1e3;
    e->stats.step_decode_batch_begin_s = tm->decode_begin_ms / 1e3;
    e->stats.steps_async = tm->async;
    e->stats.rows_dropped = tm->dropped;
    e->store_stats = ss;
    e->store_busy = store_busy;
    e->jobs_left = jobs_left;
    pthread_mutex_unlock(&e->mu);
}

/* Whether block id is neither ready, nor indexed, nor some job's to compute: it will never
 * be ready. */
static bool block_stranded(const la_engine *e, int32_t id) {
    if (la_kv_pool_is_ready(e->pool, id) || la_kv_pool_is_indexed(e->pool, id)) return false;
    for (la_doc_job *j = e->jobs_head; j; j = j->next)
        for (int32_t q = 0; q < j->doc.n_blocks; q++)
            if (j->doc.block_ids[q] == id) return false;
    return true;
}

static bool job_ctx_stranded(const la_engine *e, const la_doc_job *j) {
    for (int32_t b = 0; b < j->ctx.n_blocks; b++)
        if (block_stranded(e, j->ctx.block_ids[b])) return true;
    return false;
}

/* Drops the jobs that can never run, those computing or reading a document after a
 * document 0 that will never be ready (its job was dropped), until none is left (their
 * blocks will never be ready either), then fails with err the requests of the step b (NULL:
 * none) and the requests waiting on documents that will now never be ready. A job whose
 * record is being copied in (or is copied) is kept: the copy refers to it, and its record was
 * computed under that document 0 already; a read (LOADING) is dropped before its copy starts,
 * so that no later request that found its blocks waits on a read that may still fall back to
 * computing (la_doc_store_job_end releases the record). */
static void drop_stranded(la_engine *e, const la_batch_builder *b, const la_err *err) {
    for (bool dropped = true; dropped;) {
        dropped = false;
        la_doc_job *prev = NULL;
        for (la_doc_job *j = e->jobs_head, *next; j; j = next) {
            next = j->next;
            if (j->load == LA_JOB_IMPORTING || j->load == LA_JOB_LOADED || !job_ctx_stranded(e, j)) {
                prev = j;
                continue;
            }
            if (prev) prev->next = next;
            else e->jobs_head = next;
            if (e->jobs_tail == j) e->jobs_tail = prev;
            la_doc_job_free(e, j, false);
            dropped = true;
        }
    }
    for (la_request *r = e->running_head, *next; r; r = next) {
        next = r->next;
        bool in_step = false;
        for (int64_t i = 0; b && i < b->n_packed; i++) in_step |= b->packed[i].r == r;
        bool stranded = false;
        for (int32_t d = 0; d < r->plan.n_docs && !stranded; d++)
            for (int32_t k = 0; k < r->plan.docs[d].n_blocks && !stranded; k++)
                stranded = block_stranded(e, r->plan.docs[d].block_ids[k]);
        if (in_step || stranded) {
            la_request_list_remove(&e->running_head, &e->running_tail, r);
            la_request_finish(e, r, LA_FINISH_ERROR, err->code, err->msg);
        }
    }
}

/* After a failed forward: fail every request and job of the step (their blocks may hold
 * partial data), keep everything else. */
void la_scheduler_fail_step(la_engine *e, la_batch_builder *b, const la_err *err) {
    for (int64_t i = 0; i < b->n_packed; i++) {
        la_packed_seq *ps = &b->packed[i];
        if (ps->kind == LA_SEQ_JOB) {
            la_doc_job *prev = NULL;
            for (la_doc_job *j = e->jobs_head; j; prev = j, j = j->next)
                if (j == ps->j) {
                    if (prev) prev->next = j->next;
                    else e->jobs_head = j->next;
                    if (e->jobs_tail == j) e->jobs_tail = prev;
                    la_doc_job_free(e, j, false);
                    break;
                }
        }
    }
    drop_stranded(e, b, err);
}

/* Whether every logit row of the step is a greedy request that does not want its logits
 * back: then the backend's argmax (argmax_to_host: on the GPU, only token ids cross to the
 * host) gives the same tokens as la_sample on the logits. */
bool la_scheduler_step_is_greedy(const la_engine *e, const la_batch_builder *b) {
    if (!e->be->ops->argmax_to_host) return false;
    for (int64_t i = 0; i < b->n_packed; i++) {
        const la_packed_seq *ps = &b->packed[i];
        if (ps->kind != LA_SEQ_JOB && ps->logit_index >= 0 && la_request_needs_logits(ps->r)) return false;
    }
    return true;
}

/* logits [n_logits, vocab] f32, or (a greedy step) ids [n_logits]: one of them is NULL.
 * Three passes: the bookkeeping of every sequence (n > 1 choices fork here, at their first
 * token, and take theirs from the same logits row), the tokens chosen in parallel
 * (token_choice.h), then each accepted in order (events, stop rules, finishing). */
void la_scheduler_complete_step(la_engine *e, la_batch_builder *b, const float *logits,
                                const int32_t *ids, la_batch_builder *next) {
    int32_t V = e->cfg.vocab_size;
    int64_t cap = b->n_logits + 1;
    la_choice_task *tasks = malloc(sizeof *tasks * (size_t)cap);
    int64_t n = 0;
    for (int64_t i = 0; i < b->n_packed; i++) {
        la_packed_seq *ps = &b->packed[i];
        if (ps->kind == LA_SEQ_DROPPED) continue;
        if (ps->kind == LA_SEQ_JOB) {
            ps->j->n_done += ps->n_rows;
            continue;
        }
        la_request *r = ps->r;
        if (ps->kind == LA_SEQ_RECOMPUTE) { /* in order of packing: document by document */
            r->rc_done += ps->n_rows;
            next_recompute(r);
            continue;
        }
        r->n_computed += ps->n_rows;
        if (ps->kind == LA_SEQ_PREFILL && r->n_computed == r->n_plan_tail) r->state = LA_REQ_DECODE;
        la_doc_store_register_tail(e->docs, r);
        if (ps->logit_index < 0) continue;
        const float *lg = logits ? logits + (int64_t)ps->logit_index * V : NULL;
        int32_t aid = ids ? ids[ps->logit_index] : -1;
        la_request *kids[128];
        int32_t n_kids = 0;
        la_err ferr = {0};
        la_status fs = LA_OK;
        if (r->n_choices > 1 && r->n_generated == 0) fs = la_request_fork(e, r, kids, &n_kids, &ferr);
        if (!tasks || n + 1 + n_kids > cap) {
            int64_t nc = 2 * (n + 1 + n_kids);
            la_choice_task *t = realloc(tasks, sizeof *t * (size_t)nc);
            if (!t) { /* out of memory: this request and its choices fail below */
                fs = LA_ERR_NO_MEMORY;
                la_err_set(&ferr, fs, "out of memory");
                n_kids = 0;
                if (!tasks) continue;
            } else {
                tasks = t;
                cap = nc;
            }
        }
        tasks[n++] = (la_choice_task){.r = r, .lg = lg, .argmax_id = aid, .status = fs, .err = ferr};
        for (int32_t k = 0; k < n_kids; k++) tasks[n++] = (la_choice_task){.r = kids[k], .lg = lg, .argmax_id = aid};
    }
    /* choose every token (failed forks keep their status) */
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (tasks[i].status == LA_OK) tasks[m++] = tasks[i];
        else { /* a failed fork: choice 0 fails */
            la_request *q = tasks[i].r;
            drop_ahead(next, q);
            la_request_list_remove(&e->running_head, &e->running_tail, q);
            la_request_finish(e, q, LA_FINISH_ERROR, tasks[i].status, tasks[i].err.msg);
        }
    la_requests_choose(e, tasks, (int32_t)m);
    for (int64_t i = 0; i < m; i++) {
        la_request *q = tasks[i].r;
        la_finish_reason why = tasks[i].status == LA_OK ? la_request_accept_token(e, q, tasks[i].token, tasks[i].lg)
                                                       : LA_FINISH_ERROR;
        if (why == LA_FINISH_NONE) continue;
        drop_ahead(next, q);
        la_request_list_remove(&e->running_head, &e->running_tail, q);
        if (tasks[i].status != LA_OK) la_request_finish(e, q, why, tasks[i].status, tasks[i].err.msg);
        else la_request_finish(e, q, why, why == LA_FINISH_ERROR ? q->error_status : LA_OK,
                               why == LA_FINISH_ERROR ? q->error_msg : NULL);
    }
    free(tasks);
    la_scheduler_retire_jobs(e);
}

void la_scheduler_retire_jobs(la_engine *e) {
    la_doc_job *prev = NULL;
    for (la_doc_job *j = e->jobs_head, *next; j; j = next) {
        next = j->next;
        if (j->from + j->n_done == j->doc.n_tokens) {
            if (prev) prev->next = next;
            else e->jobs_head = next;
            if (e->jobs_tail == j) e->jobs_tail = prev;
            la_doc_job_free(e, j, true);
        } else {
            prev = j;
        }
    }
}
