/* The HTTP client of `lazyattn bench --url`: one blocking HTTP/1.1 request per connection
 * (Connection: close), a chunked body decoded as it arrives, and server-sent events handed to
 * a callback the moment each one is complete, so the caller can time every token.
 *
 * tests/server/http_client.h (the server tests' client) connects to loopback only and
 * decodes a body once it is whole; the benchmark needs any host and per-event arrival
 * times, hence this small client. No TLS: http:// URLs only.
 */
#ifndef LA_CLI_BENCH_HTTP_H
#define LA_CLI_BENCH_HTTP_H

#include <stddef.h>

#include "lazyattn/status.h"

typedef struct la_bench_url {
    char host[256];  /* name or address ("127.0.0.1", "::1" without brackets) */
    char port[16];   /* "8000" unless the URL says otherwise */
    char prefix[256];/* path before /v1/..., without a trailing '/' ("" mostly) */
} la_bench_url;

/* Parse "http://host[:port][/prefix]". Errors: LA_ERR_INVALID_ARG naming the URL. */
la_status la_bench_url_parse(const char *url, la_bench_url *out, la_err *err);

/* Called for the payload of each "data:" event (without the "data: " and the blank line;
 * not NUL-terminated past len, but data[len] is readable and '\0'). */
typedef void (*la_bench_sse_fn)(void *user, const char *data, size_t len);

/* Send `method` `prefix+path` with an optional JSON body. If the answer is 200 with
 * Content-Type text/event-stream and on_event is set, every event goes to on_event as it
 * arrives and *body_out stays NULL; otherwise the whole body is returned in *body_out
 * (caller frees; may be NULL). *http_status: the status code.
 * Errors: LA_ERR_IO (resolve, connect, send, receive, timeout after timeout_s without a
 * byte, malformed response) naming host and port. */
la_status la_bench_http_request(const la_bench_url *u, const char *method, const char *path,
                                const char *body, int timeout_s, la_bench_sse_fn on_event,
                                void *user, int *http_status, char **body_out, la_err *err);

#endif
