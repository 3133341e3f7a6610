/* The HTTP client of the benchmark harness and of the server tests: one blocking HTTP/1.1
 * request per connection (Connection: close), a chunked body decoded as it arrives, and
 * server-sent events handed to a callback the moment each one is complete, so the caller can
 * time every token. No TLS: http:// URLs only.
 *
 * la_bench_http_request() is the whole exchange; la_bench_http_connect(), _send() and
 * _receive() are its steps, for callers that send what a client normally would not (a chunked
 * body, extra headers) or read the raw bytes themselves (tests/server/http_client.h).
 */
#ifndef LA_BENCH_HTTP_H
#define LA_BENCH_HTTP_H

#include <stdbool.h>
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

/* Connect to u's host and port; sends and receives time out after timeout_s without a byte.
 * Returns the socket (caller closes it), or -1 with errno set where the system said why. */
int la_bench_http_connect(const la_bench_url *u, int timeout_s);

/* Send the request head and the body of len bytes (body NULL: none). extra_headers: lines
 * "Name: value\r\n..." appended to the head, or NULL. chunked: the body goes in 1000-byte
 * chunks under Transfer-Encoding: chunked instead of Content-Length. Returns 0, or -1 when a
 * send failed or the head exceeds 1 KiB. */
int la_bench_http_send(int fd, const la_bench_url *u, const char *method, const char *path,
                       const char *body, size_t len, const char *extra_headers, bool chunked);

/* An answer as la_bench_http_receive() read it. */
typedef struct la_bench_http_answer {
    int status;       /* the HTTP status code */
    char *headers;    /* the header block, status line and blank line included (heap) */
    char *body;       /* the body, de-chunked and NUL-terminated (heap; NULL when the events
                       * went to on_event) */
    size_t body_len;
    bool complete;    /* false: a chunked body ended before its last chunk */
} la_bench_http_answer;

/* Read the answer to the request sent on fd until the server closes the connection (or the
 * chunked body ends); interim 1xx answers before it (100 Continue) are skipped. Events go to on_event as for la_bench_http_request; u, method and path
 * only name the request in messages. Errors: LA_ERR_IO (no byte within the socket's timeout,
 * malformed response), *out zeroed. Free *out with la_bench_http_answer_free(). */
la_status la_bench_http_receive(int fd, const la_bench_url *u, const char *method, const char *path,
                                la_bench_sse_fn on_event, void *user, la_bench_http_answer *out,
                                la_err *err);
void la_bench_http_answer_free(la_bench_http_answer *a);

#endif
