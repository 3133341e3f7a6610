/* Answering an HTTP request (respond.c): the response helpers every route handler and the
 * dispatch in server.c use. Private to src/server/.
 */
#ifndef LA_SERVER_RESPOND_H
#define LA_SERVER_RESPOND_H

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "lazyattn/status.h"
#include "server/api_request.h"
#include "server/http_error.h"
#include "server/server_internal.h"

/* Queue response r (not consumed: the caller destroys it) with the headers every answer
 * carries (X-Request-Id; the CORS headers for an allowed Origin) and count it in the
 * metrics under route. */
enum MHD_Result la_server_queue(la_server *s, struct MHD_Connection *conn, const char *route, int http_status,
                                struct MHD_Response *r);

/* The request's id into buf: its X-Request-Id header (1 to 128 visible ASCII characters),
 * else body_id (a generation request's "request_id", same rule; may be NULL), else the
 * one the server made for it; the answer's X-Request-Id header echoes the one chosen. */
void la_server_request_id(la_server *s, struct MHD_Connection *conn, const char *body_id, char *buf, size_t cap);

/* The CORS headers of an answer to an allowed Origin (nothing without --allowed-origins
 * or an Origin header, or for an origin not allowed). */
void la_server_add_cors(la_server *s, struct MHD_Connection *conn, struct MHD_Response *r);

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

/* 404 model_not_found for a request naming `model`, which this server does not serve. */
enum MHD_Result la_server_send_model_not_found(la_server *s, struct MHD_Connection *conn, const char *route,
                                               const char *model);

/* The request field an engine error (status st, message msg) is about: a request past the
 * context (LA_ERR_TOO_LONG) names messages (chat) or prompt; otherwise the word msg starts
 * with before '=', ':' or a space ("max_tokens=2 is too small ...", "logit_bias: ...",
 * "prompt: no tokens after the documents"), when it is a field of a completions (chat: chat
 * completions) request; else NULL. out: 64 bytes, returned when named. */
const char *la_server_error_param(la_status st, const char *msg, bool chat, char *out);

/* Parse a request body of `kind` and check that its "model" (if any) is the one served.
 * Returns true with *ar filled (the caller calls la_api_request_fini), or false after
 * queueing the error response into *ret (nothing left to free). */
bool la_server_parse_request(la_server *s, struct MHD_Connection *conn, const char *route,
                             la_api_kind kind, const char *body, size_t len, la_api_request *ar,
                             enum MHD_Result *ret);

#endif
