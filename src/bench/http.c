/* The HTTP client of the benchmark harness and the server tests (http.h). */
#include "bench/http.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/err.h"

la_status la_bench_url_parse(const char *url, la_bench_url *out, la_err *err) {
    la_bench_url u = {.port = "8000"};
    const char *p = url;
    if (strncmp(p, "http://", 7) != 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "--url '%s': expected http://host[:port]", url);
    p += 7;
    const char *host_end;
    if (*p == '[') { /* [v6 address] */
        host_end = strchr(p, ']');
        if (!host_end) return la_err_set(err, LA_ERR_INVALID_ARG, "--url '%s': unclosed '['", url);
        snprintf(u.host, sizeof u.host, "%.*s", (int)(host_end - p - 1), p + 1);
        p = host_end + 1;
    } else {
        host_end = p + strcspn(p, ":/");
        snprintf(u.host, sizeof u.host, "%.*s", (int)(host_end - p), p);
        p = host_end;
    }
    if (!u.host[0]) return la_err_set(err, LA_ERR_INVALID_ARG, "--url '%s': no host", url);
    if (*p == ':') {
        p++;
        size_t n = strspn(p, "0123456789");
        if (n == 0 || n >= sizeof u.port || atoi(p) < 1 || atoi(p) > 65535)
            return la_err_set(err, LA_ERR_INVALID_ARG, "--url '%s': bad port", url);
        snprintf(u.port, sizeof u.port, "%.*s", (int)n, p);
        p += n;
    }
    if (*p && *p != '/') return la_err_set(err, LA_ERR_INVALID_ARG, "--url '%s': unexpected '%s'", url, p);
    snprintf(u.prefix, sizeof u.prefix, "%s", p);
    size_t n = strlen(u.prefix);
    while (n > 0 && u.prefix[n - 1] == '/') u.prefix[--n] = '\0';
    *out = u;
    return LA_OK;
}

/* ---- connection ------------------------------------------------------------------------- */

int la_bench_http_connect(const la_bench_url *u, int timeout_s) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(u->host, u->port, &hints, &res) != 0) return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return -1;
    struct timeval tv = {timeout_s, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int la_bench_http_send(int fd, const la_bench_url *u, const char *method, const char *path,
                       const char *body, size_t len, const char *extra_headers, bool chunked) {
    char head[1024];
    int hn = snprintf(head, sizeof head,
                      "%s %s%s HTTP/1.1\r\nHost: %s:%s\r\nConnection: close\r\n"
                      "Accept: application/json, text/event-stream\r\n",
                      method, u->prefix, path, u->host, u->port);
    if (body && chunked && hn < (int)sizeof head)
        hn += snprintf(head + hn, sizeof head - (size_t)hn,
                       "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n");
    else if (body && hn < (int)sizeof head)
        hn += snprintf(head + hn, sizeof head - (size_t)hn,
                       "Content-Type: application/json\r\nContent-Length: %zu\r\n", len);
    if (hn < (int)sizeof head)
        hn += snprintf(head + hn, sizeof head - (size_t)hn, "%s\r\n", extra_headers ? extra_headers : "");
    if (hn < 0 || (size_t)hn >= sizeof head || send_all(fd, head, (size_t)hn) != 0) return -1;
    if (!body) return 0;
    if (!chunked) return send_all(fd, body, len);
    for (size_t at = 0; at < len; at += 1000) {
        size_t k = len - at < 1000 ? len - at : 1000;
        char size[32];
        int m = snprintf(size, sizeof size, "%zx\r\n", k);
        if (send_all(fd, size, (size_t)m) || send_all(fd, body + at, k) || send_all(fd, "\r\n", 2))
            return -1;
    }
    return send_all(fd, "0\r\n\r\n", 5);
}

/* ---- body decoding ---------------------------------------------------------------------- */

typedef struct growbuf {
    char *p;
    size_t len, cap;
} growbuf;

static int gb_add(growbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

/* Decoded body bytes go either to the SSE splitter or to a buffer. */
typedef struct body_sink {
    la_bench_sse_fn on_event; /* NULL: collect into all */
    void *user;
    growbuf pending;          /* SSE: bytes of the event not yet complete */
    growbuf all;
} body_sink;

/* Hand every complete event ("...\n\n") in pending to on_event. */
static int sse_feed(body_sink *s, const char *p, size_t n) {
    if (gb_add(&s->pending, p, n) != 0) return -1;
    size_t start = 0;
    for (;;) {
        char *end = strstr(s->pending.p + start, "\n\n");
        if (!end) break;
        size_t ev_len = (size_t)(end - (s->pending.p + start));
        /* data lines of the event, joined by '\n' (the server writes one) */
        growbuf data = {0};
        const char *line = s->pending.p + start, *stop = line + ev_len;
        while (line < stop) {
            const char *nl = memchr(line, '\n', (size_t)(stop - line));
            const char *le = nl ? nl : stop;
            if (le - line >= 5 && !strncmp(line, "data:", 5)) {
                const char *v = line + 5 + (line[5] == ' ');
                if (data.len) gb_add(&data, "\n", 1);
                gb_add(&data, v, (size_t)(le - v));
            }
            line = le + 1;
        }
        if (data.p) s->on_event(s->user, data.p, data.len);
        free(data.p);
        start += ev_len + 2;
    }
    memmove(s->pending.p, s->pending.p + start, s->pending.len - start + 1);
    s->pending.len -= start;
    return 0;
}

static int sink_feed(body_sink *s, const char *p, size_t n) {
    if (n == 0) return 0;
    return s->on_event ? sse_feed(s, p, n) : gb_add(&s->all, p, n);
}

/* Chunked transfer decoding as bytes arrive: raw holds what is not consumed yet. */
typedef struct dechunk {
    growbuf raw;
    size_t left;   /* bytes of the current chunk still to pass on */
    int crlf;      /* 1: the CRLF after a chunk's data is next */
    int done;
} dechunk;

static int dechunk_feed(dechunk *d, body_sink *s, const char *p, size_t n) {
    if (gb_add(&d->raw, p, n) != 0) return -1;
    size_t at = 0;
    while (!d->done && at < d->raw.len) {
        if (d->left > 0) {
            size_t k = d->raw.len - at < d->left ? d->raw.len - at : d->left;
            if (sink_feed(s, d->raw.p + at, k) != 0) return -1;
            at += k;
            d->left -= k;
            if (d->left == 0) d->crlf = 1;
            continue;
        }
        char *nl = memchr(d->raw.p + at, '\n', d->raw.len - at);
        if (!nl) break;
        if (d->crlf) { /* the empty line after a chunk */
            d->crlf = 0;
            at = (size_t)(nl - d->raw.p) + 1;
            continue;
        }
        char *end = NULL;
        unsigned long k = strtoul(d->raw.p + at, &end, 16);
        if (end == d->raw.p + at) return -1;
        at = (size_t)(nl - d->raw.p) + 1;
        if (k == 0) d->done = 1;
        d->left = k;
    }
    memmove(d->raw.p, d->raw.p + at, d->raw.len - at + 1);
    d->raw.len -= at;
    return 0;
}

/* ---- one request -------------------------------------------------------------------------- */

la_status la_bench_http_receive(int fd, const la_bench_url *u, const char *method, const char *path,
                                la_bench_sse_fn on_event, void *user, la_bench_http_answer *out,
                                la_err *err) {
    memset(out, 0, sizeof *out);
    growbuf hdr = {0};
    body_sink sink = {0};
    dechunk dc = {0};
    int chunked = 0, in_body = 0, bad = 0, st = 0;
    size_t head_len = 0;
    char buf[16384];
    for (;;) {
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            bad = 2;
            break;
        }
        if (k == 0) break;
        const char *p = buf;
        size_t n = (size_t)k;
        if (!in_body) {
            if (gb_add(&hdr, p, n) != 0) {
                bad = 1;
                break;
            }
            char *sep;
            while ((sep = strstr(hdr.p, "\r\n\r\n")) != NULL) {
                head_len = (size_t)(sep - hdr.p) + 4;
                if (sscanf(hdr.p, "HTTP/1.%*d %d", &st) != 1) {
                    bad = 1;
                    break;
                }
                if (st < 100 || st > 199 || st == 101) {
                    in_body = 1;
                    break;
                }
                /* an interim answer (1xx, e.g. 100 Continue; RFC 9110 15.2): the final one follows */
                memmove(hdr.p, hdr.p + head_len, hdr.len - head_len + 1);
                hdr.len -= head_len;
            }
            if (bad) break;
            if (!in_body) continue;
            *sep = '\0';
            chunked = strcasestr(hdr.p, "\r\ntransfer-encoding: chunked") != NULL;
            int sse = strcasestr(hdr.p, "\r\ncontent-type: text/event-stream") != NULL;
            sink.on_event = st == 200 && sse ? on_event : NULL;
            sink.user = user;
            p = sep + 4;
            n = hdr.len - (size_t)(p - hdr.p);
        }
        if ((chunked ? dechunk_feed(&dc, &sink, p, n) : sink_feed(&sink, p, n)) != 0) {
            bad = 1;
            break;
        }
        if (chunked && dc.done) break;
    }
    free(dc.raw.p);
    free(sink.pending.p);
    if (bad || !in_body) {
        free(hdr.p);
        free(sink.all.p);
        return la_err_set(err, LA_ERR_IO, "%s:%s: %s %s: %s", u->host, u->port, method, path,
                          bad == 2 ? "no answer within the timeout" : "malformed or truncated response");
    }
    memcpy(hdr.p + head_len - 4, "\r\n\r\n", 4); /* the separator the parse cut off */
    hdr.p[head_len] = '\0';
    out->status = st;
    out->headers = hdr.p;
    out->body = sink.all.p;
    out->body_len = sink.all.len;
    out->complete = !chunked || dc.done;
    return LA_OK;
}

void la_bench_http_answer_free(la_bench_http_answer *a) {
    free(a->headers);
    free(a->body);
    memset(a, 0, sizeof *a);
}

la_status la_bench_http_request(const la_bench_url *u, const char *method, const char *path,
                                const char *body, int timeout_s, la_bench_sse_fn on_event,
                                void *user, int *http_status, char **body_out, la_err *err) {
    *http_status = 0;
    if (body_out) *body_out = NULL;
    int fd = la_bench_http_connect(u, timeout_s);
    if (fd < 0)
        return la_err_set(err, LA_ERR_IO, "cannot connect to %s:%s (%s)", u->host, u->port,
                          strerror(errno ? errno : ECONNREFUSED));
    if (la_bench_http_send(fd, u, method, path, body, body ? strlen(body) : 0, NULL, false) != 0) {
        close(fd);
        return la_err_set(err, LA_ERR_IO, "%s:%s: sending %s %s failed", u->host, u->port, method, path);
    }
    la_bench_http_answer a;
    la_status s = la_bench_http_receive(fd, u, method, path, on_event, user, &a, err);
    close(fd);
    if (s != LA_OK) return s;
    *http_status = a.status;
    if (body_out) *body_out = a.body, a.body = NULL;
    la_bench_http_answer_free(&a);
    return LA_OK;
}
