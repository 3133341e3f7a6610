/* Per-request event queues between the engine thread and HTTP handlers (call.h). */
#include "server/call.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/timer.h"

la_call *la_call_create(la_server *srv) {
    la_call *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->srv = srv;
    c->refs = 1;
    c->observe = true;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    return c;
}

static void call_unref(la_call *c) {
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left > 0) return;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->text);
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
 * generate.c), with the engine's numbers for it. Caller holds c->mu. */
static void log_done(const la_call *c) {
    const la_request_stats *st = &c->stats;
    const unsigned long long id = (unsigned long long)c->request_id;
    if (c->finish == LA_FINISH_ERROR) {
        fprintf(stderr, "lazyattn serve: request %llu failed: %s\n", id, c->error);
        return;
    }
    const char *why = c->finish == LA_FINISH_STOP     ? "stop"
                      : c->finish == LA_FINISH_LENGTH ? "length"
                                                      : "cancelled";
    fprintf(stderr,
            "lazyattn serve: request %llu done (%s): %d prompt tokens, %lld from the cache (%lld of %d "
            "document tokens, %lld more), %d generated; queue %.1f ms, TTFT %.1f ms, TPOT %.2f ms, total "
            "%.1f ms\n",
            id, why, st->n_prompt_tokens, (long long)(st->doc_tokens_reused + st->prefix_tokens_reused),
            (long long)st->doc_tokens_reused, st->n_doc_tokens, (long long)st->prefix_tokens_reused,
            st->n_generated, st->queue_ms, st->ttft_ms, st->tpot_ms, st->e2e_ms);
}

/* The engine's callback (engine thread). */
static void on_event(void *user, const la_event *ev) {
    la_call *c = user;
    pthread_mutex_lock(&c->mu);
    if (ev->text_len && !c->oom) {
        if (c->text_len + ev->text_len + 1 > c->text_cap) {
            size_t cap = c->text_cap ? c->text_cap : 256;
            while (cap < c->text_len + ev->text_len + 1) cap *= 2;
            char *p = realloc(c->text, cap);
            if (p) {
                c->text = p;
                c->text_cap = cap;
            } else {
                c->oom = true;
            }
        }
        if (!c->oom) {
            memcpy(c->text + c->text_len, ev->text, ev->text_len);
            c->text_len += ev->text_len;
            c->text[c->text_len] = '\0';
        }
    }
    if (ev->kind == LA_EVENT_TOKEN) c->n_tokens++;
    bool done = ev->kind == LA_EVENT_DONE;
    if (done) {
        c->done = true;
        c->finish = ev->finish;
        c->status = ev->status;
        if (ev->stats) c->stats = *ev->stats;
        snprintf(c->error, sizeof c->error, "%s", ev->error ? ev->error : "");
        if (c->oom && c->finish != LA_FINISH_CANCELLED) {
            c->finish = LA_FINISH_ERROR;
            c->status = LA_ERR_NO_MEMORY;
            snprintf(c->error, sizeof c->error, "server: out of memory for the response text");
        }
    }
    /* counted before the handler can answer, so /metrics never lags a response */
    if (done && c->observe) la_metrics_observe(c->srv->metrics, &c->stats, c->finish);
    if (done && c->observe && c->srv->opts.log_requests) log_done(c);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (done) call_unref(c); /* the engine's reference */
}

la_status la_call_submit(la_call *c, la_request_params *p, la_err *err) {
    la_server *s = c->srv;
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
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

    pthread_mutex_lock(&c->mu);
    c->refs++; /* the engine's, until DONE */
    pthread_mutex_unlock(&c->mu);
    p->on_event = on_event;
    p->user = c;
    uint64_t id = 0;
    la_status st = la_engine_submit(s->engine, p, &id, err);
    if (st != LA_OK) {
        pthread_mutex_lock(&c->mu);
        c->refs--;
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

bool la_call_wait(la_call *c, int timeout_ms) {
    struct timespec ts = la_deadline_after_ms(timeout_ms);
    pthread_mutex_lock(&c->mu);
    while (!c->done && c->text_read == c->text_len)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) break;
    bool ready = c->done || c->text_read < c->text_len;
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
    la_call_cancel(c);
    unlink_call(c);
    call_unref(c);
}
