/* The state of a running server (struct la_server), shared by server.c, respond.c, call.c
 * and the route handlers. Private to src/server/. */
#ifndef LA_SERVER_SERVER_INTERNAL_H
#define LA_SERVER_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "lazyattn/lazyattn.h"
#include "server/api_request.h"

typedef struct la_server la_server;
typedef struct la_conn la_conn; /* server/conn.h */

/* A later step of a handler whose answer waits (la_server_defer, server.c): queue the
 * answer (or return MHD_NO to close the connection), or set *wait to be called again after
 * the next wake. Runs on a libmicrohttpd worker thread; must not block. */
typedef enum MHD_Result la_defer_fn(la_server *s, struct MHD_Connection *conn, void *state, bool *wait);
#include "server/metrics.h"
#include "server/options.h"

typedef struct la_server la_server; /* as in server.h */

typedef struct la_call la_call;

/* Work a handler hands off so that no libmicrohttpd worker thread waits for it: to the
 * engine thread (la_server_on_engine: the engine's calls that must not run during a step,
 * la_engine_document_info, la_engine_store_flush) or to a thread of its own
 * (la_server_offload: calls that wait for an engine step, la_engine_reset_prefix_cache).
 * The handler owns the task (zeroed, then fn and arg set) and keeps it until done. */
typedef struct la_engine_task {
    void (*fn)(la_engine *e, void *arg);
    void *arg;
    la_conn *wake;               /* woken when done (NULL: nobody) */
    bool queued;                 /* handed off (la_server_on_engine / la_server_offload) */
    bool done;                   /* under la_server.mu */
    bool own_thread;             /* la_server_offload: thread to join */
    pthread_t thread;
    struct la_engine_task *next;
} la_engine_task;

struct la_server {
    la_engine *engine;
    la_server_options opts;
    char *model_id;
    int port;
    int64_t created;          /* Unix seconds at start (/v1/models) */
    la_api_limits limits;
    struct MHD_Daemon *daemon;
    la_metrics *metrics;
    pthread_t engine_thread;
    bool engine_started;
    atomic_bool engine_stop;
    atomic_uint_fast64_t next_id;
    atomic_int n_requests;    /* HTTP requests between their headers and their completion */
    uint32_t id_salt;

    unsigned http_threads;    /* libmicrohttpd worker threads */
    char *tls_cert, *tls_key; /* HTTPS: the PEM files' contents (kept for the daemon) */
    char **origins;           /* CORS: the allowed origins ("*" alone: any) */
    int n_origins;

    pthread_mutex_t mu;       /* guards what follows */
    bool stopping;
    bool draining;            /* la_server_drain: new requests 503, in-flight go on */
    char **unknown_seen;      /* --ignore-unknown-fields: names logged already */
    int n_unknown_seen;
    la_call *calls;           /* requests in flight (doubly linked) */
    int64_t n_calls;
    la_engine_task *tasks;    /* for the engine thread, oldest first */
    pthread_cond_t task_cv;   /* a task is done */

    pthread_mutex_t conn_mu;  /* guards the la_conn fields that say so, and what follows */
    la_conn *conns;           /* every open connection (doubly linked) */
    bool closing;             /* shutdown: no connection parks any more */
    bool watch_stop;          /* the watcher thread should end */
    pthread_cond_t watch_cv;
    pthread_t watch_thread;
    bool watch_started;
};

/* Run t->fn(e, t->arg) on the engine thread between two steps (server.c); when it has
 * returned, t->done is set and t->wake woken. Does not wait; an idle engine thread picks
 * the task up within its 50 ms wait. For handlers only (the engine thread runs while the
 * HTTP daemon does). */
void la_server_on_engine(la_server *s, la_engine_task *t);

/* Run t->fn(e, t->arg) on a thread of its own (for an engine call that waits for a step),
 * then as la_server_on_engine. Errors: LA_ERR_NO_MEMORY (no thread; nothing runs). */
la_status la_server_offload(la_server *s, la_engine_task *t, la_err *err);

/* Whether t is done (t->queued). */
bool la_server_task_done(la_server *s, la_engine_task *t);

/* Wait until a handed-off task is done and join its thread; nothing for one never handed
 * off. Blocks: for freeing a handler's state when its connection closed early (shutdown). */
void la_server_task_finish(la_server *s, la_engine_task *t);

/* Answer later (server.c): fn(s, conn, state, &wait) runs now and, while it sets wait,
 * again after each wake of the connection (la_conn_wake; the connection is suspended in
 * between, costing no thread), until it queues the answer or returns MHD_NO.
 * free_state(state) runs once it has (or when the connection closes first: shutdown). A
 * route handler returns what this returns. */
enum MHD_Result la_server_defer(la_server *s, struct MHD_Connection *conn, la_defer_fn *fn, void *state,
                                void (*free_state)(void *state));

#endif
