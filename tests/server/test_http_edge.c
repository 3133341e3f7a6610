/* The HTTP edge (issue 28, src/server/conn.c, server.c): libmicrohttpd runs event-driven on a
 * few worker threads, a request waiting on the engine parks its connection instead of a
 * thread, and the watcher enforces the receive deadline and notices clients that left.
 *   - 1000 half-open connections (a request line and one header, then silence) are held
 *     while /health and a completion still answer, by a server with a handful of threads;
 *   - with one HTTP worker thread, a parked non-streamed request and a parked stream leave
 *     it free for /health;
 *   - a client that half-closes (shutdown(SHUT_WR)) after a complete request still gets the
 *     whole answer, streamed or not, and its request is not cancelled;
 *   - a body or headers trickled a byte at a time (each byte within the idle timeout) are
 *     cut after --timeout-keep-alive seconds;
 *   - the connection limits (total, per address) still hold with the worker pool.
 * Client timeouts here are bounds on the test (liveness), never assertions on speed. */
#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include "base/timer.h"
#include "server_util.h"
#include "serve_proc.h"

#define N_HALF_OPEN 1000
#define COMPLETION "{\"prompt\": \"hello edge\", \"max_tokens\": 8, \"ignore_eos\": true}"

/* One request on a fresh connection whose sends and receives give up after timeout_s
 * without a byte. 0 on success (any status). */
static int request_within(int port, const char *method, const char *path, const char *body, int timeout_s,
                          la_http_resp *r) {
    memset(r, 0, sizeof *r);
    la_bench_url u = la_http_loopback(port);
    int fd = la_bench_http_connect(&u, timeout_s);
    if (fd < 0) return -1;
    la_bench_http_answer a = {0};
    la_err err = {0};
    int rc = la_bench_http_send(fd, &u, method, path, body, body ? strlen(body) : 0, NULL, false);
    if (rc == 0 && la_bench_http_receive(fd, &u, method, path, NULL, NULL, &a, &err) == LA_OK && a.complete) {
        r->status = a.status;
        r->headers = a.headers;
        r->body = a.body ? a.body : strdup("");
        r->body_len = a.body_len;
    } else {
        la_bench_http_answer_free(&a);
        rc = -1;
    }
    close(fd);
    return rc;
}

/* choices[0].text of a completion answer (heap). */
static char *completion_text(const char *body) {
    cJSON *j = cJSON_Parse(body);
    cr_assert(j, "not JSON: %s", body);
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text");
    cr_assert(cJSON_IsString(t), "no choices[0].text: %s", body);
    char *s = strdup(t->valuestring);
    cJSON_Delete(j);
    return s;
}

/* Entries of /proc/PID/fd, or -1. */
static int count_fds(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* "Threads:" of /proc/PID/status, or -1. */
static int count_threads(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Threads:", 8)) n = atoi(line + 8);
    fclose(f);
    return n;
}

/* A raw loopback connection, or -1. */
static int raw_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The server of the next test, stopped by its .fini even when an assertion ends the test (an
 * orphaned server would keep ctest's output pipe open). */
static la_serve_proc g_proc;

static void stop_proc(void) {
    if (g_proc.pid > 0) la_serve_stop(&g_proc, SIGKILL, 30);
}

Test(http_edge, a_thousand_half_open_connections_leave_health_and_completions_answering, .timeout = 300,
     .fini = stop_proc) {
    /* this process and the server (which inherits the limit) each hold ~1000 sockets */
    struct rlimit rl;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rlim_t want = 4096;
    if (rl.rlim_cur < want) {
        if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < N_HALF_OPEN + 200)
            cr_skip_test("skipped: RLIMIT_NOFILE hard limit %llu is below %d", (unsigned long long)rl.rlim_max,
                         N_HALF_OPEN + 200);
        rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
        cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    static const char *const args[] = {"-m", TS_MODEL, "--threads", "1", "--max-connections", "1100", NULL};
    la_serve_proc *p = &g_proc;
    cr_assert(la_serve_start(p, args) == 0, "serve did not start: %s", p->log);
    int base_fds = count_fds(p->pid); /* before any connection */
    la_http_resp r;
    cr_assert(request_within(p->port, "POST", "/v1/completions", COMPLETION, 10, &r) == 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    char *want_text = completion_text(r.body);
    la_http_resp_free(&r);

    static int fds[N_HALF_OPEN];
    const char *half = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < N_HALF_OPEN; i++) {
        fds[i] = raw_connect(p->port);
        cr_assert(fds[i] >= 0, "connection %d: %s", i, strerror(errno));
        cr_assert_eq(send(fds[i], half, strlen(half), MSG_NOSIGNAL), (ssize_t)strlen(half));
    }
    /* the server has accepted them all (each is a socket it holds) */
    int held = 0;
    for (int waited = 0; waited < 30000 && held < N_HALF_OPEN; waited += 50) {
        held = count_fds(p->pid) - base_fds;
        if (held < N_HALF_OPEN) ts_sleep_ms(50);
    }
    cr_assert_geq(held, N_HALF_OPEN, "the server holds %d of the %d connections", held, N_HALF_OPEN);
    /* ... with a fixed set of threads, not one per connection */
    int threads = count_threads(p->pid);
    cr_assert(threads > 0 && threads < 64, "%d threads for %d connections", threads, held);

    cr_assert(request_within(p->port, "GET", "/health", NULL, 10, &r) == 0, "no answer from /health");
    cr_assert_eq(r.status, 200, "%s", r.body);
    la_http_resp_free(&r);
    cr_assert(request_within(p->port, "POST", "/v1/completions", COMPLETION, 10, &r) == 0, "no completion");
    cr_assert_eq(r.status, 200, "%s", r.body);
    char *text = completion_text(r.body);
    cr_assert_str_eq(text, want_text);
    la_http_resp_free(&r);
    cr_log_info("%d half-open connections held by a server of %d threads", held, threads);

    /* they are still open (nothing answered them) */
    struct pollfd pf = {.fd = fds[0], .events = POLLIN};
    cr_assert_eq(poll(&pf, 1, 0), 0, "a half-open connection got an answer or was closed");
    for (int i = 0; i < N_HALF_OPEN; i++) close(fds[i]);
    free(text);
    free(want_text);
    int rc = la_serve_stop(p, SIGTERM, 60);
    cr_assert_eq(rc, 0, "exit status %d: %s", rc, p->log);
}

static void one_http_thread(la_engine_options *eo, la_server_options *so) {
    (void)eo;
    so->http_threads = 1;
}

static bool two_running(const la_engine_stats *s) { return s->n_running == 2; }
static bool idle_after_two_cancels(const la_engine_stats *s) {
    return s->n_running == 0 && s->n_waiting == 0 && s->requests_cancelled == 2 && s->kv_blocks_pinned == 0;
}

/* Parked requests hold no thread: one worker thread serves /health while a non-streamed
 * request and a stream wait on the engine; both are cancelled when their clients leave. */
Test(http_edge, one_worker_thread_serves_health_while_two_requests_wait) {
    test_server t;
    ts_start(&t, one_http_thread);
    int waiting = la_http_open(t.port, "POST", "/v1/completions",
                               "{\"prompt\": \"wait\", \"max_tokens\": 100000, \"ignore_eos\": true}");
    int stream = la_http_open(t.port, "POST", "/v1/completions",
                              "{\"prompt\": \"stream\", \"max_tokens\": 100000, \"ignore_eos\": true, \"stream\": true}");
    cr_assert(waiting >= 0 && stream >= 0);
    cr_assert(ts_wait_stats(t.e, two_running, 10000), "the two requests never ran");
    char buf[256];
    cr_assert_gt(la_http_read_some(stream, buf, sizeof buf), 0, "the stream sends nothing");
    for (int i = 0; i < 3; i++) {
        la_http_resp r;
        cr_assert(request_within(t.port, "GET", "/health", NULL, 10, &r) == 0, "no answer from /health");
        cr_assert_eq(r.status, 200, "%s", r.body);
        la_http_resp_free(&r);
    }
    close(waiting);
    close(stream);
    cr_assert(ts_wait_stats(t.e, idle_after_two_cancels, 20000), "the requests were not cancelled after the hang-ups");
    ts_assert_serves(t.port);
    ts_stop(&t);
}

static void one_running_slot(la_engine_options *eo, la_server_options *so) {
    (void)so;
    eo->max_running = 1;
}

static bool one_running_one_waiting(const la_engine_stats *s) { return s->n_running == 1 && s->n_waiting == 1; }
static bool one_running(const la_engine_stats *s) { return s->n_running == 1 && s->n_waiting == 0; }
static bool idle(const la_engine_stats *s) { return s->n_running == 0 && s->n_waiting == 0; }

/* Read from fd (blocking) until buf holds needle (NULL: never) or the peer closes; true if
 * found. */
static bool read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle) {
    while (!needle || !strstr(buf, needle)) {
        cr_assert_lt(*len, cap - 1, "answer too long");
        ssize_t k = recv(fd, buf + *len, cap - 1 - *len, 0);
        if (k <= 0) return false;
        *len += (size_t)k;
        buf[*len] = '\0';
    }
    return true;
}

/* The body of a chunked answer body (after its header block), de-chunked in place. */
static char *dechunk(char *p) {
    char *out = p, *w = p;
    for (;;) {
        char *end;
        unsigned long n = strtoul(p, &end, 16);
        cr_assert(end != p && !strncmp(end, "\r\n", 2), "bad chunk header");
        if (n == 0) break;
        memmove(w, end + 2, n);
        w += n;
        p = end + 2 + n;
        cr_assert(!strncmp(p, "\r\n", 2), "bad chunk end");
        p += 2;
    }
    *w = '\0';
    return out;
}

/* The text of an SSE completion stream (the "data:" events' choices[0].text joined; heap),
 * checking that it ends with [DONE]. */
static char *stream_text(const char *sse) {
    int n = 0;
    char **ev = la_sse_events(sse, &n);
    cr_assert_gt(n, 1);
    cr_assert_str_eq(ev[n - 1], "[DONE]");
    size_t cap = strlen(sse) + 1, len = 0;
    char *text = calloc(1, cap);
    for (int i = 0; i < n - 1; i++) {
        cJSON *c = cJSON_Parse(ev[i]);
        cr_assert(c, "event %d is not JSON: %s", i, ev[i]);
        const cJSON *tx = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0), "text");
        if (cJSON_IsString(tx)) {
            size_t k = strlen(tx->valuestring);
            memcpy(text + len, tx->valuestring, k);
            len += k;
        }
        cJSON_Delete(c);
    }
    for (int i = 0; i < n; i++) free(ev[i]);
    free(ev);
    return text;
}

#define HALF_BODY(stream) \
    "{\"prompt\": \"half\", \"max_tokens\": 1000, \"ignore_eos\": true, \"stream\": " stream "}"
#define HOG "{\"prompt\": \"hog\", \"max_tokens\": 100000, \"ignore_eos\": true, \"stream\": true}"

/* A client that sends a complete request and half-closes (shutdown(SHUT_WR)) gets the same
 * answer as one that does not, streamed or not, and its request is not cancelled. It waits
 * in the queue behind another request (one running slot), so the watcher sees its read EOF
 * and probes it (conn.h): the client reads an interim "100 Continue" (not streamed) or an
 * SSE comment (streamed) while it waits; then the other request's client leaves and its
 * answer comes. */
Test(http_edge, a_half_closed_client_gets_its_whole_answer) {
    test_server t;
    ts_start(&t, one_running_slot);
    cJSON *j = ts_post(t.port, "/v1/completions", HALF_BODY("false"), 200);
    char *want = strdup(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "text")->valuestring);
    cJSON_Delete(j);
    size_t cap = 1 << 22;
    char *buf = malloc(cap);
    for (int stream = 0; stream < 2; stream++) {
        /* the stats count running requests at the end of a step: wait until the last answer's
         * request is gone from them, so that one_running below is the hog */
        cr_assert(ts_wait_stats(t.e, idle, 10000), "the engine never went idle");
        int hog = la_http_open(t.port, "POST", "/v1/completions", HOG);
        cr_assert(hog >= 0);
        /* the hog must hold the slot first: sent together, either request may reach the engine
         * first (two HTTP threads), and a half request that runs at once can finish (1000 tokens
         * of the tiny model) before the watcher's next look, with no probe to read */
        cr_assert(ts_wait_stats(t.e, one_running, 10000), "the hog never ran");
        la_bench_url u = la_http_loopback(t.port);
        int fd = la_bench_http_connect(&u, 60);
        cr_assert(fd >= 0);
        const char *body = stream ? HALF_BODY("true") : HALF_BODY("false");
        cr_assert_eq(la_bench_http_send(fd, &u, "POST", "/v1/completions", body, strlen(body), NULL, false), 0);
        cr_assert_eq(shutdown(fd, SHUT_WR), 0);
        cr_assert(ts_wait_stats(t.e, one_running_one_waiting, 10000), "the half-closed request never queued");
        size_t len = 0;
        buf[0] = '\0';
        const char *probe = stream ? "\r\n: \n\n" : "HTTP/1.1 100 Continue\r\n\r\n";
        cr_assert(read_until(fd, buf, cap, &len, probe), "no probe while it waited: %s", buf);
        close(hog); /* the other client leaves: its request is cancelled, this one runs */
        read_until(fd, buf, cap, &len, NULL); /* to the end */
        char *head = stream ? buf : buf + strlen(probe);
        cr_assert(!strncmp(head, "HTTP/1.1 200 ", 13), "%.200s", head);
        char *sep = strstr(head, "\r\n\r\n");
        cr_assert(sep);
        char *got;
        if (stream) {
            cr_assert(strcasestr(head, "Transfer-Encoding: chunked"));
            got = stream_text(dechunk(sep + 4));
        } else {
            got = completion_text(sep + 4);
        }
        cr_assert_str_eq(got, want, "stream %d", stream);
        free(got);
        close(fd);
    }
    free(buf);
    la_engine_stats es;
    la_engine_get_stats(t.e, &es);
    cr_assert_eq(es.requests_cancelled, 2, "only the two hogs are cancelled");
    free(want);
    ts_assert_serves(t.port);
    ts_stop(&t);
}

static void two_second_timeout(la_engine_options *eo, la_server_options *so) {
    (void)eo;
    so->idle_timeout_s = 2;
}

/* Send head, then the bytes of tail one every 400 ms (within the 2 s idle timeout) until the
 * server closes the connection; returns how many bytes of tail went out before it did, or
 * -1 if it never closed. */
static int trickle(int port, const char *head, const char *tail) {
    int fd = raw_connect(port);
    cr_assert(fd >= 0);
    cr_assert_eq(send(fd, head, strlen(head), MSG_NOSIGNAL), (ssize_t)strlen(head));
    size_t n = strlen(tail);
    for (size_t i = 0; i < n; i++) {
        struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
        if (poll(&pf, 1, 400) > 0) { /* closed (an answer would be a bug: none can be complete) */
            char buf[512];
            ssize_t k = recv(fd, buf, sizeof buf, 0);
            cr_assert_leq(k, 0, "the server answered an incomplete request: %.*s", (int)(k > 0 ? k : 0), buf);
            close(fd);
            return (int)i;
        }
        if (send(fd, tail + i, 1, MSG_NOSIGNAL) != 1) {
            close(fd);
            return (int)i;
        }
    }
    close(fd);
    return -1;
}

/* libmicrohttpd's timeout only closes a connection where nothing moves; a request trickled a
 * byte at a time is cut by the receive deadline (--timeout-keep-alive after the headers
 * began, then after they ended). 60 bytes at 2.5 per second would take 24 s. */
Test(http_edge, a_trickled_body_or_header_is_cut_after_the_timeout) {
    test_server t;
    ts_start(&t, two_second_timeout);
    char tail[61];
    memset(tail, 'a', 60);
    tail[60] = '\0';
    int sent = trickle(t.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\n\r\n", tail);
    cr_assert(sent >= 0, "the trickled body was never cut");
    cr_assert_lt(sent, 60);
    cr_log_info("body cut after %d of 60 bytes", sent);
    sent = trickle(t.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ", tail);
    cr_assert(sent >= 0, "the trickled header was never cut");
    cr_assert_lt(sent, 60);
    cr_log_info("header cut after %d of 60 bytes", sent);
    ts_assert_serves(t.port);
    ts_stop(&t);
}

static void four_connections(la_engine_options *eo, la_server_options *so) {
    (void)eo;
    so->max_connections = 4;
    so->http_threads = 2; /* libmicrohttpd splits the limit among its workers */
}

static void two_per_ip(la_engine_options *eo, la_server_options *so) {
    (void)eo;
    so->max_connections_per_ip = 2;
    so->http_threads = 2;
}

/* Whether the server closes fd (EOF or reset) within 10 s. */
static bool closed_by_server(int fd) {
    struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, 10000) <= 0) return false;
    char c;
    return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/* One whole keep-alive GET /health on fd, its answer read to the last body byte: the server
 * has accepted the connection and holds it open, idle. */
static void keep_alive_once(int fd) {
    const char *req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[4096];
    size_t len = 0;
    buf[0] = '\0';
    cr_assert(read_until(fd, buf, sizeof buf, &len, "\r\n\r\n"), "no answer to a held connection's request");
    const char *cl = strcasestr(buf, "\r\ncontent-length:");
    cr_assert(cl, "no Content-Length: %.200s", buf);
    size_t want = (size_t)(strstr(buf, "\r\n\r\n") + 4 - buf) + strtoul(cl + 17, NULL, 10);
    while (len < want) {
        cr_assert_lt(want, sizeof buf, "answer too long");
        ssize_t k = recv(fd, buf + len, want - len, 0);
        cr_assert(k > 0, "answer cut short");
        len += (size_t)k;
    }
}

/* --max-connections and --max-connections-per-ip hold with the worker pool. At the total
 * limit libmicrohttpd stops accepting: a new connection waits in the listen backlog, its
 * request unanswered, until a held one closes, and then it is served. Over the per-address
 * limit it accepts and closes at once. The held connections are accepted first (each has
 * had one whole keep-alive request answered): a held connection still in the backlog when
 * the extra one arrives would let a worker thread accept the extra one first. */
Test(http_edge, connection_limits_hold_with_the_worker_pool) {
    for (int per_ip = 0; per_ip < 2; per_ip++) {
        test_server t;
        ts_start(&t, per_ip ? two_per_ip : four_connections);
        int n = per_ip ? 2 : 4, fds[4];
        for (int i = 0; i < n; i++) {
            fds[i] = raw_connect(t.port);
            cr_assert(fds[i] >= 0);
            keep_alive_once(fds[i]);
        }
        int over = raw_connect(t.port);
        cr_assert(over >= 0);
        const char *full = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        cr_assert_eq(send(over, full, strlen(full), MSG_NOSIGNAL), (ssize_t)strlen(full));
        if (per_ip) {
            cr_assert(closed_by_server(over), "the connection over the per-address limit was kept");
        } else { /* a correct server never answers it here; a wrong one would within the second */
            struct pollfd pf = {.fd = over, .events = POLLIN | POLLRDHUP};
            cr_assert_eq(poll(&pf, 1, 1000), 0, "the connection over the limit was served or closed");
        }
        for (int i = 0; i < n; i++) {
            struct pollfd pf = {.fd = fds[i], .events = POLLIN | POLLRDHUP};
            cr_assert_eq(poll(&pf, 1, 0), 0, "per_ip %d: connection %d within the limit was closed", per_ip, i);
        }
        close(fds[0]); /* a slot frees */
        if (!per_ip) { /* the waiting connection is served now */
            struct timeval tv = {10, 0};
            setsockopt(over, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            char buf[4096];
            size_t len = 0;
            buf[0] = '\0';
            read_until(over, buf, sizeof buf, &len, "\r\n\r\n");
            cr_assert(!strncmp(buf, "HTTP/1.1 200 ", 13), "the waiting connection got: %.100s", buf);
        }
        close(over);
        /* once libmicrohttpd has seen the close, a new connection serves; a failure says how
         * many tries got no complete answer (refused, closed or timed out) and the last status */
        int status = 0, tries = 0, refused = 0, last = 0;
        double t0 = la_now_ms();
        while (status != 200 && la_now_ms() - t0 < 30000) {
            la_http_resp r;
            tries++;
            if (request_within(t.port, "GET", "/health", NULL, 10, &r) == 0) status = last = r.status;
            else refused++;
            la_http_resp_free(&r);
            if (status != 200) ts_sleep_ms(100);
        }
        cr_assert_eq(status, 200,
                     "per_ip %d: no answer once a slot was free (%d tries in %.0f ms, %d without an answer, "
                     "last status %d)",
                     per_ip, tries, la_now_ms() - t0, refused, last);
        for (int i = 1; i < n; i++) close(fds[i]);
        ts_stop(&t);
    }
}

Test(http_edge, http_threads_out_of_range_exits_2) {
    static const char *const cases[][6] = {
        {"-m", TS_MODEL, "--http-threads", "0", NULL},
        {"-m", TS_MODEL, "--http-threads", "257", NULL},
        {"-m", TS_MODEL, "--http-threads", "two", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        la_serve_proc p;
        int rc = la_serve_run_to_exit(&p, cases[i]);
        cr_assert_eq(rc, 2, "case %zu: exit status %d: %s", i, rc, p.log);
        cr_assert(strstr(p.log, "--http-threads"), "case %zu: %s", i, p.log);
    }
}
