/* The server's routes: one table {path, method, handler} (routes.c) that server.c looks each
 * request up in; the handlers live in generate.c, prewarm.c, info.c and tokenize.c. A new endpoint is a
 * handler and one row of the table. Private to src/server/.
 */
#ifndef LA_SERVER_ROUTES_H
#define LA_SERVER_ROUTES_H

#include <stddef.h>

#include <microhttpd.h>

#include "server/server_internal.h"

/* Answer one request whose path and method are the route's and whose body is within
 * max_body_bytes: queue the response on conn (or return MHD_NO to drop the connection).
 *   route  the route's path, for metrics and messages
 *   body   [len] bytes, NUL-terminated ("" when the request has none)
 * Runs on one of libmicrohttpd's worker threads, which every connection shares: it must
 * not wait (for the engine or anything slow); an answer that waits is handed to
 * la_server_defer (server_internal.h). */
typedef enum MHD_Result la_route_handler(la_server *s, struct MHD_Connection *conn,
                                         const char *route, const char *body, size_t len);

typedef struct la_route {
    const char *path;   /* exact match, e.g. "/v1/completions" */
    const char *method; /* "GET" or "POST" */
    la_route_handler *handler;
} la_route;

/* The route of path, or NULL. */
const la_route *la_route_find(const char *path);

/* The handlers of the table. */
la_route_handler la_server_handle_completions; /* POST /v1/completions (generate.c) */
la_route_handler la_server_handle_chat;        /* POST /v1/chat/completions (generate.c) */
la_route_handler la_server_handle_documents;   /* POST /v1/documents (prewarm.c) */
la_route_handler la_server_handle_models;      /* GET /v1/models (info.c) */
la_route_handler la_server_handle_health;      /* GET /health (info.c) */
la_route_handler la_server_handle_metrics;     /* GET /metrics (info.c) */
la_route_handler la_server_handle_tokenize;    /* POST /tokenize (tokenize.c) */
la_route_handler la_server_handle_detokenize;  /* POST /detokenize (tokenize.c) */
la_route_handler la_server_handle_reset_prefix_cache; /* POST /reset_prefix_cache (tokenize.c) */
la_route_handler la_server_handle_version;     /* GET /version (tokenize.c) */

#endif
