/* What a request emits (events.h): TOKEN events with the text streamed so far, held back
 * and cut at stop strings, and the DONE event that finishes it.
 */
#include "engine/events.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/doc_store.h"
#include "base/timer.h"
#include "grammar/token_mask.h"
#include "kv/block_pool.h"
#include "kv/plan.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

/* ============================================================ events ================= */

static void emit(la_request *r, const la_event *ev) {
    if (r->on_event) r->on_event(r->user, ev);
}

/* Finish a request: release its blocks (indexing computed tail blocks first), emit DONE
 * with any text still held, count it, free it. r must already be unlinked. */
void la_request_finish(la_engine *e, la_request *r, la_finish_reason why, la_status status,
                       const char *msg) {
    if (r->state != LA_REQ_WAITING) {
        if (why != LA_FINISH_ERROR) la_doc_store_register_tail(e->docs, r);
        la_plan_release(&r->plan, e->pool);
    }
    double now = la_now_ms();
    r->stats.e2e_ms = now - r->t_submit;
    r->stats.n_generated = r->n_generated;
    if (r->n_generated > 1) r->stats.tpot_ms = (r->t_last - r->t_first) / (r->n_generated - 1);
    /* text held back for stop strings (or an incomplete character) goes out now */
    const char *tail_text = "";
    size_t tail_len = 0;
    if (why == LA_FINISH_LENGTH || why == LA_FINISH_STOP) {
        tail_text = r->text ? r->text + r->emitted : "";
        tail_len = r->text ? r->text_len - r->emitted : 0;
    }
    /* counters first, so /metrics and la_engine_get_stats agree with the answer the client
     * receives with DONE */
    la_kv_pool_stats ps = la_kv_pool_get_stats(e->pool);
    pthread_mutex_lock(&e->mu);
    /* every choice of a request is counted once (this one and any that never forked, which
     * end with it below), as the server's /metrics counts them; its prompt once */
    int64_t n_ends = 1 + (r->orphan_from < r->n_choices ? r->n_choices - r->orphan_from : 0);
    if (why == LA_FINISH_ERROR) e->stats.requests_error += n_ends;
    else if (why == LA_FINISH_CANCELLED) e->stats.requests_cancelled += n_ends;
    else e->stats.requests_ok += n_ends;
    if (!r->is_fork) {
        e->stats.doc_tokens_reused += r->stats.doc_tokens_reused;
        e->stats.doc_tokens_computed += r->stats.doc_tokens_computed;
        e->stats.prefix_tokens_reused += r->stats.prefix_tokens_reused;
        e->stats.prompt_tokens += r->stats.n_prompt_tokens;
    }
    e->stats.kv_blocks_free = ps.n_free;
    e->stats.kv_blocks_cached = ps.n_cached;
    e->stats.kv_blocks_pinned = ps.n_pinned;
    e->n_live--;
    pthread_mutex_unlock(&e->mu);
    la_event ev = {.request_id = r->id, .kind = LA_EVENT_DONE, .text = tail_text,
                   .text_len = tail_len, .finish = why, .status = status,
                   .error = msg ? msg : "", .stats = &r->stats, .index = r->index};
    emit(r, &ev);
    /* the choices that never became requests (n > 1 ended before its fork, or the fork
     * failed part way) end with it: nothing generated */
    la_request_stats none = r->stats;
    none.n_generated = 0;
    none.tpot_ms = 0;
    for (int32_t i = r->orphan_from; i < r->n_choices; i++) {
        la_event orphan = {.request_id = r->id, .kind = LA_EVENT_DONE, .text = "", .finish = why,
                           .status = status, .error = msg ? msg : "", .stats = &none, .index = i};
        emit(r, &orphan);
    }
    la_request_free(r);
}

void la_request_finish_waiting(la_engine *e, la_request *r, la_finish_reason why, la_status s,
                               const char *msg) {
    pthread_mutex_lock(&e->mu);
    e->n_queued--;
    pthread_mutex_unlock(&e->mu);
    la_request_finish(e, r, why, s, msg);
}

/* ============================================================ text and stopping ====== */

static la_status text_append(la_request *r, const char *s, size_t n) {
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + n + 1) cap *= 2;
        char *p = realloc(r->text, cap);
        if (!p) return LA_ERR_NO_MEMORY;
        r->text = p;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
    return LA_OK;
}

/* Earliest occurrence of any stop string in text[from:], or -1; *len: its length. */
static long find_stop(const la_request *r, size_t from, size_t *len) {
    long best = -1;
    for (int32_t i = 0; i < r->sampling.n_stop; i++) {
        const char *hit = strstr(r->text + from, r->stop[i]);
        if (hit && (best < 0 || hit - r->text < best)) {
            best = hit - r->text;
            *len = strlen(r->stop[i]);
        }
    }
    return best;
}

static bool is_stop_id(const la_request *r, int32_t token) {
    for (int32_t i = 0; i < r->sampling.n_stop_token_ids; i++)
        if (r->sampling.stop_token_ids[i] == token) return true;
    return false;
}

static la_finish_reason failed(la_request *r, la_status s, const char *msg) {
    r->error_status = s;
    snprintf(r->error_msg, sizeof r->error_msg, "%s", msg);
    return LA_FINISH_ERROR;
}

/* Handle one sampled token: stream its text, decide whether the request is done.
 * Returns the finish reason (NONE: keep going). */
la_finish_reason la_request_accept_token(la_engine *e, la_request *r, int32_t token,
                                         const float *logits) {
    double now = la_now_ms();
    if (r->n_generated == 0) {
        r->t_first = now;
        r->stats.ttft_ms = now - r->t_submit;
    }
    r->t_last = now;
    r->n_generated++;
    r->stats.n_generated = r->n_generated;
    la_err err;
    if (la_request_tail_append(r, &token, 1, &err) != LA_OK) return failed(r, LA_ERR_NO_MEMORY, "out of memory");
    bool eos = !r->sampling.ignore_eos &&
               (la_model_config_is_eos(&e->cfg, token) || (e->tok && token == la_tokenizer_eos_id(e->tok)));
    if (eos || is_stop_id(r, token)) { /* its text is not part of the output */
        const char *piece;
        size_t n;
        if (r->detok && la_detok_flush(r->detok, &piece, &n, &err) == LA_OK) text_append(r, piece, n);
        return LA_FINISH_STOP;
    }
    if (r->gm && la_grammar_matcher_accept(r->gm, token, &err) != LA_OK)
        return failed(r, LA_ERR_INTERNAL, "the sampled token does not continue the response format");
    const char *piece = "";
    size_t n = 0;
    /* an id the tokenizer has no token for (a model's vocabulary padded past the
     * tokenizer's, random weights) decodes to nothing, as `tokenizers` skips it */
    bool known = e->tok && token < la_tokenizer_vocab_size(e->tok);
    if (r->detok && known && la_detok_push(r->detok, token, &piece, &n, &err) != LA_OK)
        return failed(r, err.code, err.msg);
    if (text_append(r, piece, n) != LA_OK) return failed(r, LA_ERR_NO_MEMORY, "out of memory");
    bool value_done = r->gm && la_grammar_matcher_done(r->gm); /* nothing may follow */
    bool last = r->n_generated >= r->sampling.max_tokens || value_done ||
                r->plan.tail_start + r->n_tail >= e->max_context;
    if (last && r->detok) { /* bytes of an unfinished character become U+FFFD */
        if (la_detok_flush(r->detok, &piece, &n, &err) != LA_OK) return failed(r, LA_ERR_INTERNAL, "detokenizing failed");
        if (text_append(r, piece, n) != LA_OK) return failed(r, LA_ERR_NO_MEMORY, "out of memory");
    }
    la_finish_reason why = LA_FINISH_NONE;
    size_t end = r->text_len;
    if (r->n_generated <= r->sampling.min_tokens) r->stop_from = r->text_len; /* not yet */
    if (r->sampling.n_stop > 0 && r->n_generated > r->sampling.min_tokens) {
        size_t from = r->emitted > r->max_stop_len ? r->emitted - r->max_stop_len : 0;
        if (from < r->stop_from) from = r->stop_from;
        size_t stop_len = 0;
        long at = find_stop(r, from, &stop_len);
        if (at >= 0) {
            size_t cut = (size_t)at + (r->sampling.include_stop_str ? stop_len : 0);
            r->text_len = cut;
            r->text[cut] = '\0';
            end = cut;
            why = LA_FINISH_STOP;
        } else if (!last) {
            /* hold back what could still become a stop string, on a character boundary */
            size_t hold = r->max_stop_len - 1;
            end = r->text_len > r->emitted + hold ? r->text_len - hold : r->emitted;
            while (end > r->emitted && (r->text[end] & 0xC0) == 0x80) end--;
        }
    }
    if (why == LA_FINISH_NONE && value_done) why = LA_FINISH_STOP; /* the JSON value is complete */
    if (why == LA_FINISH_NONE && last) why = LA_FINISH_LENGTH;
    if (why != LA_FINISH_NONE) end = r->text_len; /* all remaining text goes out now */
    la_event ev = {.request_id = r->id, .kind = LA_EVENT_TOKEN, .token_id = token,
                   .text = r->text ? r->text + r->emitted : "", .text_len = end - r->emitted,
                   .logits = r->return_logits ? logits : NULL,
                   .n_vocab = e->cfg.vocab_size, .stats = &r->stats, .index = r->index};
    if (r->sampling.logprobs) {
        ev.logprob = r->lp;
        ev.n_top = r->n_top;
        ev.top_ids = r->top_ids;
        ev.top_logprobs = r->top_lps;
    }
    r->emitted = end;
    emit(r, &ev);
    return why;
}
