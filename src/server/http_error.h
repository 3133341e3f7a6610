/* The one mapping from engine statuses (and HTTP-only conditions) to an HTTP status and an
 * OpenAI error type/code, and the OpenAI error body:
 *
 *   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
 *              "code": null}}
 *
 * Every error response of the server goes through this file (STYLE.md: server/ maps each
 * status code in one place).
 */
#ifndef LA_SERVER_HTTP_ERROR_H
#define LA_SERVER_HTTP_ERROR_H

#include "lazyattn/status.h"

typedef struct la_http_error {
    int http_status;   /* 400, 404, 405, 413, 429, 500, 503 */
    const char *type;  /* OpenAI error type: "invalid_request_error", "server_error", ... */
    const char *code;  /* OpenAI error code ("context_length_exceeded", ...) or NULL */
} la_http_error;

/* Conditions of the HTTP layer that have no la_status. */
typedef enum la_http_fault {
    LA_HTTP_FAULT_ROUTE_NOT_FOUND = 0, /* 404 */
    LA_HTTP_FAULT_METHOD_NOT_ALLOWED,  /* 405 */
    LA_HTTP_FAULT_BODY_TOO_LARGE,      /* 413 */
    LA_HTTP_FAULT_MODEL_NOT_FOUND,     /* 404, code model_not_found */
    LA_HTTP_FAULT_SHUTTING_DOWN,       /* 503 */
    LA_HTTP_FAULT_COUNT
} la_http_fault;

/* The HTTP status, type and default code of an engine status (LA_OK is not an error:
 * it maps to 500, a bug if ever used). */
la_http_error la_http_error_for_status(la_status s);
la_http_error la_http_error_for_fault(la_http_fault f);

/* The OpenAI error body as a heap string (caller frees; NULL on out of memory).
 *   message  one sentence (UTF-8)
 *   param    the request field at fault, or NULL
 *   code     overrides e->code when non-NULL */
char *la_http_error_json(const la_http_error *e, const char *message, const char *param,
                         const char *code);

#endif
