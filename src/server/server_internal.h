/* Module-private pieces of the server shared by server.c, call.c, generate.c, prewarm.c. */
#ifndef LA_SERVER_SERVER_INTERNAL_H
#define LA_SERVER_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "server/api_request.h"
#include "server/http_error.h"
#include "server/metrics.h"
#include "server/server.h"

typedef struct la_call la_call;

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

    pthread_mutex_t mu;       /* guards what follows */
    bool stopping;
    la_call *calls;           /* requests in flight (doubly linked) */
    int64_t n_calls;
};

/* ---- responses (server.c) ----------------------------------------------------------- */

/* Queue a response with body (takes ownership; NULL means out of memory: 500) and count it
 * in the metrics under route. */
enum MHD_Result la_server_send(la_server *s, struct MHD_Connection *conn, const char *route,
                               int http_status, const char *content_type, char *body);
/* Queue an OpenAI error response for an engine status / an HTTP fault. param and code may
 * be NULL. */
enum MHD_Result la_server_send_status(la_server *s, struct MHD_Connection *conn, const char *route,
                                      la_status st, const char *message, const char *param,
                                      const char *code);
enum MHD_Result la_server_send_fault(la_server *s, struct MHD_Connection *conn, const char *route,
                                     la_http_fault f, const char *message, const char *param);

/* Parse a request body of `kind` and check that its "model" (if any) is the one served.
 * Returns true with *ar filled (the caller calls la_api_request_fini), or false after
 * queueing the error response into *ret (nothing left to free). */
bool la_server_parse_request(la_server *s, struct MHD_Connection *conn, const char *route,
                             la_api_kind kind, const char *body, size_t len, la_api_request *ar,
                             enum MHD_Result *ret);

/* Whether the client of conn has closed its side (peer hang-up), without blocking. */
bool la_server_client_gone(struct MHD_Connection *conn);

/* ---- handlers ----------------------------------------------------------------------- */

/* POST /v1/completions and /v1/chat/completions (generate.c). */
enum MHD_Result la_server_handle_generate(la_server *s, struct MHD_Connection *conn,
                                          const char *route, la_api_kind kind, const char *body,
                                          size_t len);
/* POST /v1/documents (prewarm.c). */
enum MHD_Result la_server_handle_documents(la_server *s, struct MHD_Connection *conn,
                                           const char *route, const char *body, size_t len);

#endif
