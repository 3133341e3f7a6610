/* Acceptance 4 of issue 21: `lazyattn serve --shutdown-timeout 30` drains on SIGTERM. With 8
 * streams in flight: /health turns 503, a request sent after the signal gets 503, and all 8
 * streams run to completion (finish_reason length, then [DONE], no error event); the server
 * then exits 0. The bundled model, so that the streams outlast the signal. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "server_util.h"
#include "serve_proc.h"

#define N_STREAMS 8
#define STREAM_BODY                                                                                  \
    "{\"prompt\": \"Tell me about Wirnor\", \"max_tokens\": 400, \"ignore_eos\": true, \"stream\": true}"

/* Read fd to its end into a heap string. */
static char *read_all(int fd) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 4096 > cap) buf = realloc(buf, cap *= 2);
        ssize_t k = la_http_read_some(fd, buf + len, cap - len - 1);
        if (k <= 0) break;
        len += (size_t)k;
    }
    buf[len] = '\0';
    return buf;
}

Test(serve_drain, sigterm_lets_eight_streams_finish_and_refuses_new_requests, .timeout = 300) {
    static const char *const args[] = {"-m", "models/rag-tiny", "--threads", "2", "--shutdown-timeout", "30", NULL};
    la_serve_proc p;
    cr_assert(la_serve_start(&p, args) == 0, "serve did not start: %s", p.log);
    int fds[N_STREAMS];
    char first[4096];
    for (int i = 0; i < N_STREAMS; i++) {
        fds[i] = la_http_open(p.port, "POST", "/v1/completions", STREAM_BODY);
        cr_assert(fds[i] >= 0);
    }
    for (int i = 0; i < N_STREAMS; i++) { /* every stream has started */
        ssize_t k = la_http_read_some(fds[i], first, sizeof first - 1);
        cr_assert_gt(k, 0);
        first[k] = '\0';
        cr_assert(strstr(first, "200 OK"), "%s", first);
    }
    kill(p.pid, SIGTERM);
    la_http_resp r = {0};
    int health = 0;
    for (int waited = 0; waited < 10000 && health != 503; waited += 20) {
        la_http_resp_free(&r);
        if (la_http_request(p.port, "GET", "/health", NULL, 0, NULL, &r) == 0) health = r.status;
        ts_sleep_ms(20);
    }
    la_http_resp_free(&r);
    cr_assert_eq(health, 503, "/health turns 503 while draining");
    cr_assert(la_http_request(p.port, "GET", "/metrics", NULL, 0, NULL, &r) == 0); /* open while draining */
    cr_assert_eq(r.status, 200);
    cr_assert_eq(ts_metric(r.body, "lazyattn_inflight_http_requests"), N_STREAMS, "the streams are still in flight");
    la_http_resp_free(&r);
    const char *late = "{\"prompt\": \"late\", \"max_tokens\": 2}";
    cr_assert(la_http_request(p.port, "POST", "/v1/completions", late, strlen(late), NULL, &r) == 0);
    cr_assert_eq(r.status, 503, "a request after SIGTERM: %d %s", r.status, r.body);
    la_http_resp_free(&r);
    for (int i = 0; i < N_STREAMS; i++) {
        char *all = read_all(fds[i]);
        close(fds[i]);
        cr_assert(strstr(all, "\"finish_reason\":\"length\""), "stream %d finished: %s", i, all + strlen(all) / 2);
        cr_assert(!strstr(all, "\"error\""), "stream %d has an error event", i);
        cr_assert(strstr(all, "data: [DONE]"), "stream %d ends with [DONE]", i);
        free(all);
    }
    int rc = la_serve_stop(&p, 0, 60);
    cr_assert_eq(rc, 0, "exit status %d: %s", rc, p.log);
    cr_assert(strstr(p.log, "drained"), "%s", p.log);
}
