/* `lazyattn serve` as a process (src/cli/cmd_serve.c): binds loopback, answers, shuts down
 * cleanly with exit status 0 on SIGTERM and on SIGINT (a stream in flight ends with an
 * error event and [DONE]); usage errors exit 2, other errors 1, with one message. */
#include "server_util.h"
#include "serve_proc.h"

static const char *const k_model_args[] = {"-m", TS_MODEL, "--threads", "1", NULL};

Test(serve_cli, answers_on_loopback_and_exits_0_on_sigterm) {
    la_serve_proc p;
    cr_assert(la_serve_start(&p, k_model_args) == 0, "serve did not start: %s", p.log);
    cr_assert(strstr(p.log, "listening on http://127.0.0.1:"), "not on loopback: %s", p.log);
    la_http_resp r;
    cr_assert(la_http_request(p.port, "GET", "/health", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(r.status, 200);
    la_http_resp_free(&r);
    cJSON *j = ts_post(p.port, "/v1/chat/completions",
                       "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4,"
                       " \"documents\": [\"one\", {\"title\": \"Two\", \"text\": \"two\"}]}", 200);
    cJSON_Delete(j);
    int rc = la_serve_stop(&p, SIGTERM, 60);
    cr_assert_eq(rc, 0, "exit status %d: %s", rc, p.log);
    cr_assert(strstr(p.log, "SIGTERM: shutting down"), "%s", p.log);
    cr_assert(strstr(p.log, "stopped"), "%s", p.log);
}

/* --log-requests: a line when a request arrives and one when it ends, with its numbers. */
Test(serve_cli, log_requests_logs_arrival_and_completion) {
    static const char *const args[] = {"-m", TS_MODEL, "--threads", "1", "--log-requests", NULL};
    la_serve_proc p;
    cr_assert(la_serve_start(&p, args) == 0, "serve did not start: %s", p.log);
    cJSON *j = ts_post(p.port, "/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 3, \"ignore_eos\": true}",
                       200);
    cJSON_Delete(j);
    int rc = la_serve_stop(&p, SIGTERM, 60);
    cr_assert_eq(rc, 0, "exit status %d: %s", rc, p.log);
    cr_assert(strstr(p.log, "/v1/completions request 1 ["), "no arrival line: %s", p.log);
    cr_assert(strstr(p.log, "] done (length): "), "no completion line: %s", p.log);
    cr_assert(strstr(p.log, ", 3 generated; queue "), "%s", p.log);
}

Test(serve_cli, sigint_with_a_stream_in_flight_ends_it_and_exits_0) {
    la_serve_proc p;
    cr_assert(la_serve_start(&p, k_model_args) == 0, "serve did not start: %s", p.log);
    int fd = la_http_open(p.port, "POST", "/v1/completions",
                          "{\"prompt\": \"go\", \"max_tokens\": 100000, \"ignore_eos\": true, \"stream\": true}");
    cr_assert(fd >= 0);
    size_t cap = 1 << 22, len = 0;
    char *buf = malloc(cap);
    int events = 0;
    while (events < 3) { /* the stream is running */
        ssize_t k = la_http_read_some(fd, buf + len, cap - 1 - len);
        cr_assert_gt(k, 0);
        len += (size_t)k;
        buf[len] = '\0';
        events = 0;
        for (const char *q = buf; (q = strstr(q, "data: ")); q += 6) events++;
    }
    kill(p.pid, SIGINT);
    for (;;) {
        ssize_t k = la_http_read_some(fd, buf + len, cap - 1 - len);
        cr_assert_geq(k, 0);
        if (k == 0) break;
        len += (size_t)k;
        cr_assert_lt(len, cap - 1);
    }
    buf[len] = '\0';
    close(fd);
    cr_assert(strstr(buf, "\"code\":\"shutting_down\""), "no shutdown event at the end of the stream");
    cr_assert(strstr(buf, "data: [DONE]"));
    free(buf);
    int rc = la_serve_stop(&p, 0, 60);
    cr_assert_eq(rc, 0, "exit status %d: %s", rc, p.log);
    cr_assert(strstr(p.log, "SIGINT: shutting down"), "%s", p.log);
}

Test(serve_cli, bad_options_exit_2) {
    static const char *const cases[][8] = {
        {"-m", TS_MODEL, "--port", "70000", NULL},
        {"-m", TS_MODEL, "--method", "magic", NULL},
        {"-m", TS_MODEL, "--chat-format", "chatml", NULL},
        {"-m", TS_MODEL, "--kv-blocks", "many", NULL},
        {"-m", TS_MODEL, "--device", "tpu", NULL},
        {"-m", TS_MODEL, "extra", NULL},
        {"--no-such-flag", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        la_serve_proc p;
        int rc = la_serve_run_to_exit(&p, cases[i]);
        cr_assert_eq(rc, 2, "case %zu: exit status %d: %s", i, rc, p.log);
        cr_assert(strstr(p.log, "lazyattn") || strstr(p.log, "usage"), "case %zu: no message", i);
    }
}

Test(serve_cli, missing_model_and_port_in_use_exit_1) {
    static const char *const missing[] = {"-m", "/nonexistent/model", NULL};
    la_serve_proc p;
    int rc = la_serve_run_to_exit(&p, missing);
    cr_assert_eq(rc, 1, "exit status %d: %s", rc, p.log);
    cr_assert(strstr(p.log, "lazyattn serve: "), "%s", p.log);

    la_serve_proc a;
    cr_assert(la_serve_start(&a, k_model_args) == 0, "serve did not start: %s", a.log);
    char port[16];
    snprintf(port, sizeof port, "%d", a.port);
    const char *const same_port[] = {"-m", TS_MODEL, "--threads", "1", "--port", port, NULL};
    la_serve_proc b;
    rc = la_serve_run_to_exit(&b, same_port);
    cr_assert_eq(rc, 1, "second server on port %s: exit status %d: %s", port, rc, b.log);
    cr_assert(strstr(b.log, "cannot listen"), "%s", b.log);
    cr_assert_eq(la_serve_stop(&a, SIGTERM, 60), 0, "%s", a.log);
}
