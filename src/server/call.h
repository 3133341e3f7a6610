/* One engine request seen from an HTTP handler: the event queue the engine's callback
 * fills (text, DONE with finish reason and stats) and the handler drains.
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
#include "server/server_internal.h"

struct la_call {
    la_server *srv;
    uint64_t request_id;      /* 0 until submitted (written under srv->mu) */
    la_call *prev, *next;     /* srv->calls (under srv->mu) */
    bool linked;
    bool observe;             /* counted in /metrics (false: a /v1/documents pre-warm job) */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    char *text;               /* all text so far */
    size_t text_len, text_cap;
    size_t text_read;         /* bytes the handler has consumed */
    int32_t n_tokens;
    bool done;
    bool oom;                 /* text lost to out of memory: the request fails */
    la_finish_reason finish;
    la_status status;
    char error[LA_ERR_MSG_LEN];
    la_request_stats stats;
};

/* A call for srv with the handler's reference. NULL on out of memory. */
la_call *la_call_create(la_server *srv);

/* Submit p with this call as its event sink (p->on_event / p->user are overwritten).
 * Errors: those of la_engine_submit (nothing queued), LA_ERR_CANCELLED when the server is
 * shutting down. */
la_status la_call_submit(la_call *c, la_request_params *p, la_err *err);

/* Wait until the request is done or has text the handler has not read, at most
 * timeout_ms. Returns true if so. */
bool la_call_wait(la_call *c, int timeout_ms);

/* Drop the handler's reference: cancels the request if it has not finished (a client
 * that went away), unlinks it from the server. c must not be used afterwards. */
void la_call_release(la_call *c);

/* Cancel the request (thread-safe; no effect once done). */
void la_call_cancel(la_call *c);

#endif
