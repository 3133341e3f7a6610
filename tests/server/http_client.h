/* A tiny blocking HTTP/1.1 client over loopback sockets for the server tests and the
 * serving benchmark (libcurl is not installed). Header-only, no Criterion: every function
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

/* Connect to 127.0.0.1:port; the socket times out reads after timeout_s seconds. */
static inline int la_http_connect(int port, int timeout_s) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static inline int la_http_send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Send one request. extra_headers: "Name: value\r\n..." or NULL. chunked: send the body
 * with Transfer-Encoding: chunked (in 1000-byte chunks) instead of Content-Length. */
static inline int la_http_send_request(int fd, const char *method, const char *path,
                                       const char *body, size_t len, const char *extra_headers,
                                       int chunked) {
    char head[1024];
    int n;
    if (!body)
        n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n",
                     method, path, extra_headers ? extra_headers : "");
    else if (chunked)
        n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n%s\r\n",
                     method, path, extra_headers ? extra_headers : "");
    else
        n = snprintf(head, sizeof head,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n",
                     method, path, len, extra_headers ? extra_headers : "");
    if (n < 0 || (size_t)n >= sizeof head || la_http_send_all(fd, head, (size_t)n) != 0) return -1;
    if (!body) return 0;
    if (!chunked) return la_http_send_all(fd, body, len);
    for (size_t at = 0; at < len; at += 1000) {
        size_t k = len - at < 1000 ? len - at : 1000;
        char sz[32];
        int m = snprintf(sz, sizeof sz, "%zx\r\n", k);
        if (la_http_send_all(fd, sz, (size_t)m) || la_http_send_all(fd, body + at, k) ||
            la_http_send_all(fd, "\r\n", 2))
            return -1;
    }
    return la_http_send_all(fd, "0\r\n\r\n", 5);
}

/* Read up to cap bytes (blocking); 0 at EOF, -1 on error/timeout. */
static inline ssize_t la_http_read_some(int fd, char *buf, size_t cap) {
    for (;;) {
        ssize_t k = recv(fd, buf, cap, 0);
        if (k < 0 && errno == EINTR) continue;
        return k;
    }
}

/* Decode a chunked body in place; returns the decoded length or -1. */
static inline ssize_t la_http_dechunk(char *b, size_t n) {
    size_t in = 0, out = 0;
    for (;;) {
        char *end = NULL;
        if (in >= n) return -1;
        unsigned long k = strtoul(b + in, &end, 16);
        char *nl = memchr(b + in, '\n', n - in);
        if (!nl || end == b + in) return -1;
        in = (size_t)(nl - b) + 1;
        if (k == 0) return (ssize_t)out;
        if (in + k > n) return -1;
        memmove(b + out, b + in, k);
        out += k;
        in += k + 2; /* CRLF */
    }
}

/* Read the whole response (the server closes: Connection: close) and split it. */
static inline int la_http_read_response(int fd, la_http_resp *r) {
    memset(r, 0, sizeof *r);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) return -1;
    for (;;) {
        if (n == cap) {
            char *p = realloc(buf, 2 * cap + 1);
            if (!p) break;
            buf = p;
            cap *= 2;
        }
        ssize_t k = la_http_read_some(fd, buf + n, cap - n);
        if (k <= 0) break;
        n += (size_t)k;
    }
    buf[n] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    if (!sep || sscanf(buf, "HTTP/1.%*d %d", &r->status) != 1) {
        free(buf);
        return -1;
    }
    size_t hlen = (size_t)(sep - buf) + 4;
    r->headers = strndup(buf, hlen);
    size_t blen = n - hlen;
    r->body = malloc(blen + 1);
    memcpy(r->body, buf + hlen, blen);
    r->body[blen] = '\0';
    free(buf);
    const char *te = strcasestr(r->headers, "Transfer-Encoding: chunked");
    if (te) {
        ssize_t d = la_http_dechunk(r->body, blen);
        if (d < 0) return -1;
        blen = (size_t)d;
        r->body[blen] = '\0';
    }
    r->body_len = blen;
    return 0;
}

/* One request on a fresh connection; 0 on success (any HTTP status). */
static inline int la_http_request_ex(int port, const char *method, const char *path,
                                     const char *body, size_t len, const char *extra_headers,
                                     int chunked, la_http_resp *r) {
    int fd = la_http_connect(port, 120);
    if (fd < 0) return -1;
    int rc = la_http_send_request(fd, method, path, body, len, extra_headers, chunked);
    if (rc == 0) rc = la_http_read_response(fd, r);
    close(fd);
    return rc;
}

static inline int la_http_request(int port, const char *method, const char *path, const char *body,
                                  size_t len, const char *extra_headers, la_http_resp *r) {
    return la_http_request_ex(port, method, path, body, len, extra_headers, 0, r);
}

/* Send a request and return the socket to read the (streamed) answer from, or -1. */
static inline int la_http_open(int port, const char *method, const char *path, const char *body) {
    int fd = la_http_connect(port, 120);
    if (fd < 0) return -1;
    if (la_http_send_request(fd, method, path, body, body ? strlen(body) : 0, NULL, 0) != 0) {
        close(fd);
        return -1;
    }
    return fd;
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
