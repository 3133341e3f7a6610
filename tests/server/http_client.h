/* The server tests' HTTP calls on loopback, a thin layer over the harness's client
 * (bench/http.h) with the answer read whole. Header-only, no Criterion: every function
 * returns -1 / NULL on failure.
 *
 *   la_http_resp r;
 *   if (la_http_request(port, "POST", "/v1/completions", body, strlen(body), NULL, &r) == 0)
 *       ... r.status, r.body (de-chunked, NUL-terminated) ...
 *   la_http_resp_free(&r);
 *
 * Streams: la_http_open() sends a request and returns the socket; la_http_read_some()
 * reads raw bytes (headers and chunk framing included) so a test can hang up mid-stream.
 */
#ifndef LA_TESTS_SERVER_HTTP_CLIENT_H
#define LA_TESTS_SERVER_HTTP_CLIENT_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bench/http.h"

typedef struct la_http_resp {
    int status;     /* HTTP status code */
    char *headers;  /* raw header block (status line included), NUL-terminated */
    char *body;     /* body, de-chunked, NUL-terminated */
    size_t body_len;
} la_http_resp;

static inline void la_http_resp_free(la_http_resp *r) {
    free(r->headers);
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* 127.0.0.1:port as the client's URL. */
static inline la_bench_url la_http_loopback(int port) {
    la_bench_url u = {.host = "127.0.0.1"};
    snprintf(u.port, sizeof u.port, "%d", port);
    return u;
}

/* One request on a fresh connection; 0 on success (any HTTP status). extra_headers:
 * "Name: value\r\n..." or NULL. chunked: send the body with Transfer-Encoding: chunked (in
 * 1000-byte chunks) instead of Content-Length. A chunked answer cut short is a failure. */
static inline int la_http_request_ex(int port, const char *method, const char *path,
                                     const char *body, size_t len, const char *extra_headers,
                                     int chunked, la_http_resp *r) {
    memset(r, 0, sizeof *r);
    la_bench_url u = la_http_loopback(port);
    int fd = la_bench_http_connect(&u, 120);
    if (fd < 0) return -1;
    la_bench_http_answer a;
    la_err err = {0};
    int rc = la_bench_http_send(fd, &u, method, path, body, len, extra_headers, chunked != 0);
    if (rc == 0 && la_bench_http_receive(fd, &u, method, path, NULL, NULL, &a, &err) == LA_OK) {
        if (a.complete) {
            r->status = a.status;
            r->headers = a.headers;
            r->body = a.body ? a.body : strdup("");
            r->body_len = a.body_len;
        } else {
            la_bench_http_answer_free(&a);
            rc = -1;
        }
    } else {
        rc = -1;
    }
    close(fd);
    return rc;
}

static inline int la_http_request(int port, const char *method, const char *path, const char *body,
                                  size_t len, const char *extra_headers, la_http_resp *r) {
    return la_http_request_ex(port, method, path, body, len, extra_headers, 0, r);
}

/* Send a request and return the socket to read the (streamed) answer from, or -1. */
static inline int la_http_open(int port, const char *method, const char *path, const char *body) {
    la_bench_url u = la_http_loopback(port);
    int fd = la_bench_http_connect(&u, 120);
    if (fd < 0) return -1;
    if (la_bench_http_send(fd, &u, method, path, body, body ? strlen(body) : 0, NULL, false) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Read up to cap bytes (blocking); 0 at EOF, -1 on error/timeout. */
static inline ssize_t la_http_read_some(int fd, char *buf, size_t cap) {
    for (;;) {
        ssize_t k = recv(fd, buf, cap, 0);
        if (k < 0 && errno == EINTR) continue;
        return k;
    }
}

/* The JSON payloads of the "data: " events of an SSE body, in order, as a heap array of
 * heap strings (caller frees each and the array); *n their count. */
static inline char **la_sse_events(const char *body, int *n) {
    int cap = 16;
    char **ev = malloc(sizeof(char *) * (size_t)cap);
    *n = 0;
    const char *p = body;
    while ((p = strstr(p, "data: ")) != NULL) {
        p += 6;
        const char *end = strstr(p, "\n\n");
        if (!end) end = p + strlen(p);
        if (*n == cap) {
            cap *= 2;
            ev = realloc(ev, sizeof(char *) * (size_t)cap);
        }
        ev[(*n)++] = strndup(p, (size_t)(end - p));
        p = end;
    }
    return ev;
}

#endif
