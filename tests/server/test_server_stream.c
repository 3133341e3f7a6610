/* Streams that end early (src/server/generate.c, server.c): a client that hangs up
 * mid-stream cancels its request and frees its KV blocks; a server shutting down ends every
 * stream with an error event and [DONE], answers waiting requests with 503 and keeps the
 * cache consistent. In-process server, tiny fixture model. */
#include <pthread.h>

#include "server_util.h"

#define LONG_STREAM                                                                       \
    "{\"prompt\": \"Tell me everything\", \"max_tokens\": 100000, \"ignore_eos\": true,"  \
    " \"stream\": true, \"documents\": [\"a document that stays cached after the cancel\"]}"

static bool running(const la_engine_stats *s) { return s->n_running >= 1; }
static bool cancelled_and_free(const la_engine_stats *s) {
    return s->n_running == 0 && s->n_waiting == 0 && s->requests_cancelled == 1 &&
           s->kv_blocks_pinned == 0;
}

/* Read from fd until at least n "data: " events arrived; returns the bytes read. */
static size_t read_events(int fd, int n, char *buf, size_t cap) {
    size_t len = 0;
    for (;;) {
        int seen = 0;
        for (const char *p = buf; len && (p = strstr(p, "data: ")); p += 6) seen++;
        if (seen >= n) return len;
        cr_assert_lt(len, cap - 1, "stream too long before %d events", n);
        ssize_t k = la_http_read_some(fd, buf + len, cap - 1 - len);
        cr_assert_gt(k, 0, "stream ended before %d events: %.*s", n, (int)len, buf);
        len += (size_t)k;
        buf[len] = '\0';
    }
}

Test(server_stream, client_disconnect_mid_stream_cancels_and_frees_blocks) {
    test_server t;
    ts_start(&t, NULL);
    int fd = la_http_open(t.port, "POST", "/v1/completions", LONG_STREAM);
    cr_assert(fd >= 0);
    char *buf = malloc(1 << 20);
    read_events(fd, 3, buf, 1 << 20);
    cr_assert(ts_wait_stats(t.e, running, 5000));
    close(fd); /* hang up mid-stream */
    cr_assert(ts_wait_stats(t.e, cancelled_and_free, 20000), "request not cancelled after the hang-up");
    la_engine_stats es;
    la_engine_get_stats(t.e, &es);
    cr_assert_gt(es.kv_blocks_cached, 0, "cached documents stay cached");
    /* and /metrics says so too */
    la_http_resp r;
    cr_assert(la_http_request(t.port, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(ts_metric(r.body, "lazyattn_engine_requests_total{outcome=\"cancelled\"}"), 1);
    cr_assert_eq(ts_metric(r.body, "lazyattn_requests_finished_total{reason=\"cancelled\"}"), 1);
    cr_assert_eq(ts_metric(r.body, "lazyattn_kv_blocks_pinned"), 0);
    cr_assert_eq(ts_metric(r.body, "lazyattn_running_requests"), 0);
    cr_assert_eq(ts_metric(r.body, "lazyattn_inflight_http_requests"), 0);
    la_http_resp_free(&r);
    free(buf);
    ts_assert_serves(t.port);
    ts_stop(&t);
}

Test(server_stream, client_disconnect_while_waiting_non_streamed_cancels) {
    test_server t;
    ts_start(&t, NULL);
    int fd = la_http_open(t.port, "POST", "/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"go on\"}],"
                          " \"max_tokens\": 100000, \"ignore_eos\": true}");
    cr_assert(fd >= 0);
    cr_assert(ts_wait_stats(t.e, running, 5000));
    close(fd);
    cr_assert(ts_wait_stats(t.e, cancelled_and_free, 20000), "request not cancelled after the hang-up");
    ts_assert_serves(t.port);
    ts_stop(&t);
}

typedef struct destroyer {
    test_server *t;
} destroyer;

static void *destroy_server(void *arg) {
    destroyer *d = arg;
    la_server_destroy(d->t->s);
    return NULL;
}

Test(server_stream, shutdown_ends_streams_with_an_error_event_and_done) {
    test_server t;
    ts_start(&t, NULL);
    int fd = la_http_open(t.port, "POST", "/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"user\", \"content\": \"go on\"}],"
                          " \"max_tokens\": 100000, \"ignore_eos\": true, \"stream\": true}");
    cr_assert(fd >= 0);
    char *buf = malloc(1 << 22);
    size_t len = read_events(fd, 3, buf, 1 << 22);
    destroyer d = {&t};
    pthread_t th;
    pthread_create(&th, NULL, destroy_server, &d);
    for (;;) { /* the rest of the stream, to EOF */
        ssize_t k = la_http_read_some(fd, buf + len, (1 << 22) - 1 - len);
        cr_assert_geq(k, 0, "read failed");
        if (k == 0) break;
        len += (size_t)k;
        cr_assert_lt(len, (1u << 22) - 1);
    }
    buf[len] = '\0';
    close(fd);
    pthread_join(th, NULL);
    cr_assert(strstr(buf, "\"code\":\"shutting_down\""), "no shutdown error event");
    const char *done = strstr(buf, "data: [DONE]\n\n");
    cr_assert(done, "no [DONE]");
    cr_assert(strstr(done, "0\r\n\r\n"), "chunked body not terminated after [DONE]");
    la_engine_stats es;
    la_engine_get_stats(t.e, &es);
    cr_assert_eq(es.requests_cancelled, 1);
    la_err err;
    cr_assert(la_engine_check(t.e, &err) == LA_OK, "%s", err.msg);
    la_engine_destroy(t.e);
    free(buf);
}
