/* One engine request seen from an HTTP handler: the event queue the engine's callback
 * fills (text, DONE with finish reason and stats) and the handler drains; each event (or
 * only the last) wakes the handler's parked connection (la_call_watch, conn.h).
 *
 * Lifetime: reference-counted. The handler holds one reference from la_call_create() to
 * la_call_release(); the engine holds one from a successful la_call_submit() to its DONE
 * event. Every field below mu is guarded by mu.
 */
#ifndef LA_SERVER_CALL_H
#define LA_SERVER_CALL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"
#include "server/api_response.h"
#include "server/server_internal.h"

/* One generated token's logprobs (sampling.logprobs). */
typedef la_api_lp la_call_lp;

/* One choice (n > 1: one per index) as the engine's events fill it. */
typedef struct la_call_choice {
    char *text;               /* all text so far */
    size_t text_len, text_cap;
    size_t text_read;         /* bytes the handler has consumed */
    la_call_lp *lps;          /* logprobs of the tokens so far */
    int32_t n_lps, cap_lps, lps_read;
    int32_t n_tokens;
    bool done;
    bool done_read;           /* the handler has answered its end */
    la_finish_reason finish;
    la_status status;
    char error[LA_ERR_MSG_LEN];
    la_request_stats stats;
} la_call_choice;

struct la_call {
    la_server *srv;
    uint64_t request_id;      /* 0 until submitted (written under srv->mu) */
    la_call *prev, *next;     /* srv->calls (under srv->mu) */
    bool linked;
    bool observe;             /* counted in /metrics (false: a /v1/documents pre-warm job) */
    char rid[136];            /* the HTTP request's id (X-Request-Id) for logs, or "" */
    char user[72];            /* the request's "user", for logs, or "" */

    pthread_mutex_t mu;
    int refs;
    int32_t n_choices;
    la_call_choice *choices;  /* [n_choices] */
    int32_t n_done;
    bool want_lps;            /* keep logprobs */
    la_conn *waker;           /* la_call_watch: woken by events (NULL: nobody) */
    bool wake_when_done;      /* ... by the last one only */
    bool oom;                 /* text lost to out of memory: the request fails */
    /* once every choice is done: */
    bool done;
    la_finish_reason finish;  /* ERROR or CANCELLED if a choice ended so, else choice 0's */
    la_status status;
    char error[LA_ERR_MSG_LEN];
    la_request_stats stats;   /* choice 0's, with n_generated summed over the choices */
};

/* A call for srv with the handler's reference. NULL on out of memory. */
la_call *la_call_create(la_server *srv);

/* Wake cc (la_conn_wake) on every event from now on, or only once the request is done
 * (when_done), until la_call_release. cc must outlive that. */
void la_call_watch(la_call *c, la_conn *cc, bool when_done);

/* Submit p with this call as its event sink (p->on_event / p->user are overwritten); the
 * call gets one choice per p->sampling.n.
 * Errors: those of la_engine_submit (nothing queued), LA_ERR_CANCELLED when the server is
 * shutting down. */
la_status la_call_submit(la_call *c, la_request_params *p, la_err *err);

/* Whether the request is done or a choice has text, logprobs or its end that the handler
 * has not read. Does not wait. */
bool la_call_has_news(la_call *c);

/* Drop the handler's reference: stops the wakes of la_call_watch, cancels the request if it
 * has not finished (a client that went away), unlinks it from the server. c must not be
 * used afterwards. */
void la_call_release(la_call *c);

/* Cancel the request (thread-safe; no effect once done). */
void la_call_cancel(la_call *c);

#endif
