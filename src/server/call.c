/* Per-request event queues between the engine thread and HTTP handlers (call.h). */
#include "server/call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "server/conn.h"

la_call *la_call_create(la_server *srv) {
    la_call *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->srv = srv;
    c->refs = 1;
    c->observe = true;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void call_unref(la_call *c) {
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left > 0) return;
    pthread_mutex_destroy(&c->mu);
    for (int32_t i = 0; i < c->n_choices; i++) {
        free(c->choices[i].text);
        free(c->choices[i].lps);
    }
    free(c->choices);
    free(c);
}

static void unlink_call(la_call *c) {
    la_server *s = c->srv;
    pthread_mutex_lock(&s->mu);
    if (c->linked) {
        if (c->prev) c->prev->next = c->next;
        else s->calls = c->next;
        if (c->next) c->next->prev = c->prev;
        c->linked = false;
        s->n_calls--;
    }
    pthread_mutex_unlock(&s->mu);
}

/* --log-requests: one line when a request ends (its arrival has a line of its own,
 * generate.c), with the engine's numbers for it. The id is the event's: the engine may
 * finish a short request before la_call_submit has stored its id. Caller holds c->mu. */
static void log_done(const la_call *c, uint64_t request_id) {
    const la_request_stats *st = &c->stats;
    const unsigned long long id = (unsigned long long)request_id;
    if (c->finish == LA_FINISH_ERROR) {
        fprintf(stderr, "lazyattn serve: request %llu [%s] failed: %s\n", id, c->rid, c->error);
        return;
    }
    const char *why = c->finish == LA_FINISH_STOP     ? "stop"
                      : c->finish == LA_FINISH_LENGTH ? "length"
                                                      : "cancelled";
    fprintf(stderr,
            "lazyattn serve: request %llu [%s%s%s] done (%s): %d prompt tokens, %lld from the cache (%lld of %d "
            "document tokens, %lld more), %d generated; queue %.1f ms, TTFT %.1f ms, TPOT %.2f ms, total "
            "%.1f ms\n",
            id, c->rid, c->user[0] ? ", user " : "", c->user, why, st->n_prompt_tokens, (long long)(st->doc_tokens_reused + st->prefix_tokens_reused),
            (long long)st->doc_tokens_reused, st->n_doc_tokens, (long long)st->prefix_tokens_reused,
            st->n_generated, st->queue_ms, st->ttft_ms, st->tpot_ms, st->e2e_ms);
}

static bool append_text(la_call_choice *ch, const char *text, size_t n) {
    if (ch->text_len + n + 1 > ch->text_cap) {
        size_t cap = ch->text_cap ? ch->text_cap : 256;
        while (cap < ch->text_len + n + 1) cap *= 2;
        char *p = realloc(ch->text, cap);
        if (!p) return false;
        ch->text = p;
        ch->text_cap = cap;
    }
    memcpy(ch->text + ch->text_len, text, n);
    ch->text_len += n;
    ch->text[ch->text_len] = '\0';
    return true;
}

static bool append_lp(la_call_choice *ch, const la_event *ev) {
    if (ch->n_lps == ch->cap_lps) {
        int32_t cap = ch->cap_lps ? 2 * ch->cap_lps : 32;
        la_call_lp *p = realloc(ch->lps, sizeof *p * (size_t)cap);
        if (!p) return false;
        ch->lps = p;
        ch->cap_lps = cap;
    }
    la_call_lp *lp = &ch->lps[ch->n_lps++];
    lp->token = ev->token_id;
    lp->logprob = ev->logprob;
    lp->n_top = ev->n_top < 20 ? ev->n_top : 20;
    memcpy(lp->top_ids, ev->top_ids, sizeof(int32_t) * (size_t)lp->n_top);
    memcpy(lp->top_lps, ev->top_logprobs, sizeof(float) * (size_t)lp->n_top);
    return true;
}

/* Every choice is done: the call's outcome. Caller holds c->mu. */
static void finish_call(la_call *c) {
    c->done = true;
    const la_call_choice *first = &c->choices[0];
    c->finish = first->finish;
    c->status = first->status;
    snprintf(c->error, sizeof c->error, "%s", first->error);
    for (int32_t i = 0; i < c->n_choices; i++) {
        const la_call_choice *ch = &c->choices[i];
        if (ch->finish == LA_FINISH_ERROR || (ch->finish == LA_FINISH_CANCELLED && c->finish != LA_FINISH_ERROR)) {
            c->finish = ch->finish;
            c->status = ch->status;
            snprintf(c->error, sizeof c->error, "%s", ch->error);
        }
    }
    c->stats = first->stats;
    c->stats.n_generated = 0;
    for (int32_t i = 0; i < c->n_choices; i++) c->stats.n_generated += c->choices[i].stats.n_generated;
    if (c->oom && c->finish != LA_FINISH_CANCELLED) {
        c->finish = LA_FINISH_ERROR;
        c->status = LA_ERR_NO_MEMORY;
        snprintf(c->error, sizeof c->error, "server: out of memory for the response text");
    }
}

/* The engine's callback (engine thread). */
static void on_event(void *user, const la_event *ev) {
    la_call *c = user;
    pthread_mutex_lock(&c->mu);
    la_call_choice *ch = &c->choices[ev->index >= 0 && ev->index < c->n_choices ? ev->index : 0];
    if (ev->text_len && !c->oom && !append_text(ch, ev->text, ev->text_len)) c->oom = true;
    if (ev->kind == LA_EVENT_TOKEN) {
        ch->n_tokens++;
        if (c->want_lps && !c->oom && !append_lp(ch, ev)) c->oom = true;
    }
    bool done = ev->kind == LA_EVENT_DONE;
    if (done) {
        ch->done = true;
        ch->finish = ev->finish;
        ch->status = ev->status;
        if (ev->stats) ch->stats = *ev->stats;
        snprintf(ch->error, sizeof ch->error, "%s", ev->error ? ev->error : "");
        /* /metrics counts a client request's n choices as n finished requests, each with its
         * engine outcome and latencies (la_engine_stats counts them so too, and also counts
         * pre-warm jobs, which are not observed here); counted before the handler can answer,
         * so /metrics never lags a response */
        if (c->observe) la_metrics_observe(c->srv->metrics, &ch->stats, ch->finish);
        if (++c->n_done == c->n_choices) {
            finish_call(c);
            if (c->observe && c->srv->opts.log_requests) log_done(c, ev->request_id);
        }
    }
    /* under mu: la_call_release clears waker under it before the connection can go */
    if (c->waker && (!c->wake_when_done || c->done)) la_conn_wake(c->waker);
    pthread_mutex_unlock(&c->mu);
    if (done) call_unref(c); /* one of the engine's references */
}

void la_call_watch(la_call *c, la_conn *cc, bool when_done) {
    pthread_mutex_lock(&c->mu);
    c->waker = cc;
    c->wake_when_done = when_done;
    pthread_mutex_unlock(&c->mu);
}

la_status la_call_submit(la_call *c, la_request_params *p, la_err *err) {
    la_server *s = c->srv;
    pthread_mutex_lock(&s->mu);
    if (s->stopping || s->draining) {
        pthread_mutex_unlock(&s->mu);
        return la_err_set(err, LA_ERR_CANCELLED, "the server is shutting down");
    }
    c->next = s->calls;
    c->prev = NULL;
    if (s->calls) s->calls->prev = c;
    s->calls = c;
    c->linked = true;
    s->n_calls++;
    pthread_mutex_unlock(&s->mu);

    int32_t n = p->sampling.n > 1 ? p->sampling.n : 1;
    la_call_choice *choices = calloc((size_t)n, sizeof *choices);
    if (!choices) {
        unlink_call(c);
        return la_err_set(err, LA_ERR_NO_MEMORY, "server: out of memory");
    }
    pthread_mutex_lock(&c->mu);
    c->choices = choices;
    c->n_choices = n;
    c->want_lps = p->sampling.logprobs;
    c->refs += n; /* the engine's, one per choice until its DONE */
    pthread_mutex_unlock(&c->mu);
    p->on_event = on_event;
    p->user = c;
    uint64_t id = 0;
    la_status st = la_engine_submit(s->engine, p, &id, err);
    if (st != LA_OK) {
        pthread_mutex_lock(&c->mu);
        c->refs -= n;
        pthread_mutex_unlock(&c->mu);
        unlink_call(c);
        return st;
    }
    pthread_mutex_lock(&s->mu);
    c->request_id = id;
    bool stop = s->stopping; /* shutdown began while we submitted: it missed this id */
    pthread_mutex_unlock(&s->mu);
    if (stop) la_engine_cancel(s->engine, id);
    return LA_OK;
}

bool la_call_has_news(la_call *c) {
    pthread_mutex_lock(&c->mu);
    bool ready = c->done;
    for (int32_t i = 0; i < c->n_choices && !ready; i++)
        ready = c->choices[i].text_read < c->choices[i].text_len || c->choices[i].lps_read < c->choices[i].n_lps ||
                (c->choices[i].done && !c->choices[i].done_read);
    pthread_mutex_unlock(&c->mu);
    return ready;
}

void la_call_cancel(la_call *c) {
    pthread_mutex_lock(&c->srv->mu);
    uint64_t id = c->request_id;
    pthread_mutex_unlock(&c->srv->mu);
    pthread_mutex_lock(&c->mu);
    bool done = c->done;
    pthread_mutex_unlock(&c->mu);
    if (id && !done) la_engine_cancel(c->srv->engine, id);
}

void la_call_release(la_call *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->waker = NULL;
    pthread_mutex_unlock(&c->mu);
    la_call_cancel(c);
    unlink_call(c);
    call_unref(c);
}
