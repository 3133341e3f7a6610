/* The server's state of one HTTP connection (conn.c): its request ids, where its current
 * request is (receiving headers, receiving the body, being answered) for the receive
 * deadline, and the parking of a request whose answer waits on the engine. Private to
 * src/server/.
 *
 * ---- Parking ------------------------------------------------------------------------------
 * libmicrohttpd runs every connection on a small pool of worker threads, so a handler never
 * waits for the engine on one: it suspends its connection (MHD_suspend_connection) and
 * returns, and whoever has news (the engine's event callback, the engine thread after a
 * task, a helper thread) wakes it (MHD_resume_connection), after which libmicrohttpd calls
 * the handler or content reader again on a worker thread. A waiter does
 *
 *     for (;;) {
 *         la_conn_arm(cc);               // forget older wakes
 *         if (<its condition holds> || la_conn_gone(cc)) break;
 *         int k = la_conn_suspend(cc);   // 1: parked, return to libmicrohttpd
 *         ...                            // 0: a wake came meanwhile: check again
 *     }                                  // -1: the server stops: give up
 *
 * and a waker calls la_conn_wake(cc) after making the condition true (any thread; a wake
 * while the connection is not suspended is remembered until the next la_conn_arm).
 *
 * ---- The watcher thread ------------------------------------------------------------------
 * One thread (started by la_conns_start) looks at every connection four times a second:
 *   - receive deadline: a request's headers must arrive within --timeout-keep-alive seconds
 *     of the connection opening (or of the previous answer), and its body within as many
 *     seconds of its headers, or the socket is shut down (libmicrohttpd's own timeout only
 *     closes a connection where nothing moves, so a byte every few seconds would hold it);
 *   - hang-ups of parked requests that asked for it (la_conn_watch): a peer that closed its
 *     side (read EOF) either left or only half-closed (shutdown(SHUT_WR) after a complete
 *     request), which TCP cannot tell apart until the server writes. So the watcher writes:
 *     a non-streamed HTTP/1.1 request gets an interim "100 Continue" (every HTTP/1.1 client
 *     must accept 1xx responses before the final one), a stream an SSE comment line; a
 *     peer that left answers with a reset, and then the request is marked gone and woken
 *     (its handler cancels it). Over HTTPS or HTTP/1.0 nothing may be written raw before
 *     the answer, so there a non-streamed request's read EOF counts as gone at once.
 */
#ifndef LA_SERVER_CONN_H
#define LA_SERVER_CONN_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "lazyattn/status.h"
#include "server/server_internal.h"

typedef enum la_conn_phase {
    LA_CONN_HEADERS, /* waiting for a request's headers (new or kept-alive connection) */
    LA_CONN_BODY,    /* headers in, body coming */
    LA_CONN_ANSWER,  /* the request is complete: being answered (never timed out here) */
} la_conn_phase;

typedef struct la_conn {
    /* used by the connection's worker thread only */
    char made[40];    /* request id generated for the request being served */
    char chosen[136]; /* the id its answer carries, once chosen */
    la_defer_fn *defer; /* a waiting answer's next step (NULL: none) */
    void *defer_state;
    void (*defer_free)(void *state);

    /* the rest under la_server.conn_mu */
    la_server *srv;
    struct MHD_Connection *mhd;
    int fd;                 /* its socket (libmicrohttpd's; only shut down, never closed) */
    struct la_conn *prev, *next; /* la_server.conns */
    la_conn_phase phase;
    double since_ms;        /* when the phase began (la_now_ms) */
    bool http11;            /* the current request is HTTP/1.1 (1xx answers allowed) */
    bool reaped;            /* shut down for its receive deadline */
    bool suspended;         /* suspended by la_conn_suspend; a wake resumes it */
    bool woken;             /* a wake came while it was not suspended */
    bool watch;             /* la_conn_watch: its parked request wants hang-ups noticed */
    bool stream;            /* ... and is a stream (probe with an SSE comment) */
    bool probed;            /* read EOF seen and the probe written */
    bool probe_wanted;      /* a stream should write an SSE comment (la_conn_take_probe) */
    bool gone;              /* its client is known to have left */
} la_conn;

/* Start the watcher thread (once, before the HTTP daemon). Errors: LA_ERR_NO_MEMORY. */
la_status la_conns_start(la_server *s, la_err *err);

/* Shutdown, before MHD_stop_daemon: no connection parks any more (la_conn_suspend returns
 * -1) and every parked one is resumed (libmicrohttpd must not stop with one suspended). */
void la_conns_release(la_server *s);

/* Stop and join the watcher thread (after MHD_stop_daemon). */
void la_conns_stop(la_server *s);

/* libmicrohttpd's connection notifications: a new connection (its state, NULL on out of
 * memory: it then has no request ids of its own and never parks) and a closed one (its
 * state freed). */
la_conn *la_conn_open(la_server *s, struct MHD_Connection *mhd);
void la_conn_close(la_conn *cc);

/* The state of conn (NULL if la_conn_open failed for it). */
la_conn *la_conn_of(struct MHD_Connection *conn);

/* A request's headers are in (phase BODY: http11 from its version line, the per-request
 * flags cleared), it is complete (ANSWER), or it was answered (HEADERS: the next one may
 * come). Each restarts the phase's clock. */
void la_conn_set_phase(la_conn *cc, la_conn_phase phase, bool http11);

/* Parking (the header's protocol). la_conn_suspend must run in libmicrohttpd's access
 * handler or content reader of this connection. */
void la_conn_arm(la_conn *cc);
int la_conn_suspend(la_conn *cc);
void la_conn_wake(la_conn *cc);

/* The parked request wants its client's hang-up noticed (stream: probe with an SSE comment
 * rather than an interim response). */
void la_conn_watch(la_conn *cc, bool stream);

/* The client is known to have left (the request should be cancelled and the connection
 * closed). */
bool la_conn_gone(la_conn *cc);

/* A stream's content reader: whether to write an SSE comment now (asked once). */
bool la_conn_take_probe(la_conn *cc);

#endif
