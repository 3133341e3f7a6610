/* Bad input and overload over HTTP (src/server/): each answered with the OpenAI error body
 * {"error": {"message", "type", "param", "code"}} and the right status, after which the
 * server still answers a good request. In-process server, tiny fixture model. */
#include <pthread.h>

#include "server_util.h"

#define INVALID "invalid_request_error"

Test(server_errors, invalid_json_is_400) {
    test_server t;
    ts_start(&t, NULL);
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\"", 400, INVALID, NULL, "invalid_json");
    ts_expect_error(t.port, "/v1/completions", "", 400, INVALID, NULL, "invalid_json");
    ts_expect_error(t.port, "/v1/completions", "{} trailing", 400, INVALID, NULL, "invalid_json");
    ts_expect_error(t.port, "/v1/chat/completions", "[1, 2]", 400, INVALID, NULL, "invalid_json");
    ts_expect_error(t.port, "/v1/documents", "nope", 400, INVALID, NULL, "invalid_json");
    ts_assert_serves(t.port);
    ts_stop(&t);
}

/* Strict JSON (issue 28): what cJSON would take and read differently from other parsers. */
Test(server_errors, json_that_is_not_strict_is_400_naming_the_member) {
    test_server t;
    ts_start(&t, NULL);
    /* a second max_tokens: a gateway reading the last and us the first would disagree */
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 1, \"max_tokens\": 900}", 400,
                    INVALID, "max_tokens", "invalid_json");
    /* a tenant id cut at NUL would be another tenant's: "victim\u0000x" is refused, not "victim" */
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"cache_salt\": \"victim\\u0000x\"}", 400,
                    INVALID, "cache_salt", "invalid_json");
    ts_expect_error(t.port, "/v1/chat/completions",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000 dropped\"}]}", 400, INVALID,
                    "messages[0].content", "invalid_json");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"a\x01b\"}", 400, INVALID, "prompt", "invalid_json");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\":\x01\"x\"}", 400, INVALID, "prompt", "invalid_json");
    ts_expect_error(t.port, "/detokenize", "{\"tokens\": [1], \"tokens\": [2]}", 400, INVALID, "tokens",
                    "invalid_json");
    /* an empty salt would share the unsalted cache */
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"cache_salt\": \"\"}", 400, INVALID,
                    "cache_salt", "invalid_value");
    ts_assert_serves(t.port);
    ts_stop(&t);
}

Test(server_errors, wrong_field_types_are_400) {
    test_server t;
    ts_start(&t, NULL);
    static const struct {
        const char *path, *body, *param, *code;
    } cases[] = {
        {"/v1/completions", "{\"prompt\": 5}", "prompt", "invalid_type"},
        {"/v1/completions", "{}", "prompt", "invalid_value"},
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"ten\"}", "max_tokens", "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 2.5}", "max_tokens", "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"temperature\": \"hot\"}", "temperature", "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"temperature\": 7}", "temperature", "invalid_value"},
        {"/v1/completions", "{\"prompt\": \"x\", \"top_p\": 0}", "top_p", "invalid_value"},
        {"/v1/completions", "{\"prompt\": \"x\", \"stream\": \"yes\"}", "stream", "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"seed\": 1.5}", "seed", "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"stop\": [1]}", "stop", "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"documents\": \"doc\"}", "documents", "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"documents\": [1]}", "documents[0]", "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"documents\": [\"a\", {\"title\": \"t\"}]}",
         "documents[1].text", "invalid_value"},
        {"/v1/completions", "{\"prompt\": \"x\", \"documents\": [{\"title\": 3, \"text\": \"t\"}]}",
         "documents[0].title", "invalid_type"},
        {"/v1/completions", "{\"prompt\": \"x\", \"documents\": [\"a\", \"\"]}", "documents[1]", "invalid_value"},
        {"/v1/completions", "{\"prompt\": \"x\", \"documents\": [{\"title\": \"\", \"text\": \"\"}]}",
         "documents[0].text", "invalid_value"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                                 "\"documents\": [{\"title\": \"T\", \"text\": \"\"}]}",
         "documents[0].text", "invalid_value"},
        {"/v1/completions", "{\"prompt\": \"x\", \"cache_salt\": 9}", "cache_salt", "invalid_type"},
        /* a misspelt field is never ignored: in a document, and in every route's body */
        {"/v1/completions", "{\"prompt\": \"x\", \"documents\": [{\"title\": \"t\", \"txt\": \"a\"}]}",
         "documents[0].txt", "unknown_parameter"},
        {"/tokenize", "{\"prompt\": \"x\", \"documents\": [{\"text\": \"a\", \"extra\": 1}]}",
         "documents[0].extra", "unknown_parameter"},
        {"/v1/documents", "{\"documents\": [\"a\"], \"cache_slat\": \"tenant\"}", "cache_slat",
         "unknown_parameter"},
        {"/v1/documents", "{\"documents\": [\"a\"], \"recompute_first\": 1}", "recompute_first",
         "unknown_parameter"},
        /* /tokenize names the field as a generation request does */
        {"/tokenize", "{\"prompt\": [5, 999999]}", "prompt", "invalid_value"},
        {"/tokenize", "{\"prompt\": \"\", \"documents\": [\"a\"]}", "prompt", "invalid_value"},
        {"/v1/completions", "{\"prompt\": [\"a\", \"b\"]}", "prompt", "invalid_value"},
        {"/v1/completions", "{\"prompt\": [5, 999999]}", "prompt", "invalid_value"}, /* past the vocab */
        {"/v1/completions", "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": 1}",
         "stream_options", "invalid_type"},
        {"/v1/chat/completions", "{\"messages\": \"hi\"}", "messages", "invalid_type"},
        {"/v1/chat/completions", "{\"messages\": []}", "messages", "invalid_value"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
         "messages[0].content", "invalid_type"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}",
         "messages[0].role", "invalid_value"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}",
         "messages", "invalid_value"},
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
                                 "\"max_completion_tokens\": \"5\"}",
         "max_completion_tokens", "invalid_type"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ts_expect_error(t.port, cases[i].path, cases[i].body, 400, INVALID, cases[i].param, cases[i].code);
    ts_assert_serves(t.port);
    ts_stop(&t);
}

Test(server_errors, unknown_method_is_400) {
    test_server t;
    ts_start(&t, NULL);
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"method\": \"magic\"}", 400,
                    INVALID, "method", "invalid_value");
    ts_expect_error(t.port, "/v1/chat/completions",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"method\": 3}", 400,
                    INVALID, "method", "invalid_type");
    ts_expect_error(t.port, "/v1/documents", "{\"documents\": [\"d\"], \"method\": \"lazyy\"}", 400,
                    INVALID, "method", "invalid_value");
    ts_assert_serves(t.port);
    ts_stop(&t);
}

Test(server_errors, max_tokens_out_of_range_is_400) {
    test_server t;
    ts_start(&t, NULL);
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 0}", 400, INVALID,
                    "max_tokens", "invalid_value");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": -3}", 400, INVALID,
                    "max_tokens", "invalid_value");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 131073}", 400,
                    INVALID, "max_tokens", "invalid_value");
    /* a whole number past int64 is out of range, not of the wrong type */
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 9223372036854775807}", 400,
                    INVALID, "max_tokens", "invalid_value");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"n\": 99999999999999999999}", 400, INVALID,
                    "n", "invalid_value");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"min_tokens\": 1e30}", 400, INVALID,
                    "min_tokens", "invalid_value");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"n\": 1e400}", 400, INVALID, "n", "invalid_value");
    ts_expect_error(t.port, "/v1/chat/completions",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_completion_tokens\": 0}",
                    400, INVALID, "max_completion_tokens", "invalid_value");
    ts_assert_serves(t.port);
    ts_stop(&t);
}

static void small_context(la_engine_options *eo, la_server_options *so) {
    (void)so;
    eo->max_context = 128;
}

Test(server_errors, prompt_and_documents_over_the_context_are_400_context_length_exceeded) {
    test_server t;
    ts_start(&t, small_context);
    char text[1024];
    memset(text, 'a', 600);
    for (int i = 0; i < 600; i += 6) memcpy(text + i, "word  ", 6);
    text[600] = '\0';
    char body[2048];
    snprintf(body, sizeof body, "{\"prompt\": \"%s\", \"max_tokens\": 4}", text);
    ts_expect_error(t.port, "/v1/completions", body, 400, INVALID, "prompt", "context_length_exceeded");
    snprintf(body, sizeof body, "{\"prompt\": \"short\", \"max_tokens\": 4, \"documents\": [\"%s\"]}", text);
    ts_expect_error(t.port, "/v1/completions", body, 400, INVALID, "prompt", "context_length_exceeded");
    snprintf(body, sizeof body,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"max_tokens\": 4,"
             " \"documents\": [\"%s\"]}", text);
    ts_expect_error(t.port, "/v1/chat/completions", body, 400, INVALID, "messages", "context_length_exceeded");
    /* max_tokens alone over the (small) context */
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": 129}", 400, INVALID,
                    "max_tokens", "invalid_value");
    ts_assert_serves(t.port);
    ts_stop(&t);
}

static void four_docs(la_engine_options *eo, la_server_options *so) {
    (void)so;
    eo->max_docs = 4;
}

Test(server_errors, too_many_documents_is_400) {
    test_server t;
    ts_start(&t, four_docs);
    ts_expect_error(t.port, "/v1/completions",
                    "{\"prompt\": \"x\", \"documents\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 400, INVALID,
                    "documents", "too_many_documents");
    ts_expect_error(t.port, "/v1/documents", "{\"documents\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}", 400,
                    INVALID, "documents", "too_many_documents");
    cJSON *j = ts_post(t.port, "/v1/completions",
                       "{\"prompt\": \"x\", \"max_tokens\": 1, \"documents\": [\"a\", \"b\", \"c\", \"d\"]}", 200);
    cJSON_Delete(j);
    ts_assert_serves(t.port);
    ts_stop(&t);
}

static void small_body(la_engine_options *eo, la_server_options *so) {
    (void)eo;
    so->max_body_bytes = 4096;
}

Test(server_errors, body_over_the_size_limit_is_413) {
    test_server t;
    ts_start(&t, small_body);
    size_t n = 20000;
    char *body = malloc(n + 64);
    int k = sprintf(body, "{\"prompt\": \"");
    memset(body + k, 'z', n);
    strcpy(body + k + n, "\"}");
    size_t len = strlen(body);
    for (int mode = 0; mode < 3; mode++) { /* Content-Length, chunked, Expect: 100-continue */
        la_http_resp r;
        int rc = la_http_request_ex(t.port, "POST", "/v1/completions", body, len,
                                    mode == 2 ? "Expect: 100-continue\r\n" : NULL, mode == 1, &r);
        cr_assert(rc == 0, "mode %d: no response", mode);
        cr_assert_eq(r.status, 413, "mode %d: status %d: %s", mode, r.status, r.body);
        cJSON *j = cJSON_Parse(r.body);
        ts_check_error(j, INVALID, NULL, "request_too_large");
        cJSON_Delete(j);
        la_http_resp_free(&r);
    }
    free(body);
    /* a body just under the limit is fine */
    ts_assert_serves(t.port);
    ts_stop(&t);
}

Test(server_errors, non_utf8_text_is_400) {
    test_server t;
    ts_start(&t, NULL);
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"bad \xff byte\"}", 400, INVALID, NULL,
                    "invalid_utf8");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"overlong \xc0\xaf\"}", 400, INVALID, NULL,
                    "invalid_utf8");
    ts_expect_error(t.port, "/v1/chat/completions",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"surrogate \xed\xa0\x80\"}]}", 400,
                    INVALID, NULL, "invalid_utf8");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"documents\": [\"cut \xe2\x82\"]}",
                    400, INVALID, NULL, "invalid_utf8");
    /* a lone surrogate escape is not text either (strict JSON names the member) */
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"\\ud800\"}", 400, INVALID, "prompt",
                    "invalid_json");
    /* valid multi-byte text passes */
    cJSON *j = ts_post(t.port, "/v1/completions",
                       "{\"prompt\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\u00e9\", \"max_tokens\": 2}", 200);
    cJSON_Delete(j);
    ts_assert_serves(t.port);
    ts_stop(&t);
}

Test(server_errors, unknown_route_and_unknown_model_are_404) {
    test_server t;
    ts_start(&t, NULL);
    la_http_resp r;
    cr_assert(la_http_request(t.port, "GET", "/v2/nothing", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(r.status, 404);
    cJSON *j = cJSON_Parse(r.body);
    ts_check_error(j, INVALID, NULL, "not_found");
    cJSON_Delete(j);
    la_http_resp_free(&r);
    ts_expect_error(t.port, "/v1/embeddings", "{\"input\": \"x\"}", 404, INVALID, NULL, "not_found");
    ts_expect_error(t.port, "/v1/completions", "{\"model\": \"gpt-4\", \"prompt\": \"x\"}", 404, INVALID,
                    "model", "model_not_found");
    ts_assert_serves(t.port);
    ts_stop(&t);
}

Test(server_errors, wrong_http_method_is_405) {
    test_server t;
    ts_start(&t, NULL);
    static const struct {
        const char *method, *path, *allow;
    } cases[] = {{"GET", "/v1/completions", "POST"},
                 {"GET", "/v1/chat/completions", "POST"},
                 {"PUT", "/v1/documents", "POST"},
                 {"POST", "/health", "GET"},
                 {"DELETE", "/v1/models", "GET"},
                 {"POST", "/metrics", "GET"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        la_http_resp r;
        bool post = !strcmp(cases[i].method, "POST") || !strcmp(cases[i].method, "PUT");
        cr_assert(la_http_request(t.port, cases[i].method, cases[i].path, post ? "{}" : NULL,
                                  post ? 2 : 0, NULL, &r) == 0);
        cr_assert_eq(r.status, 405, "%s %s: %d", cases[i].method, cases[i].path, r.status);
        char allow[32];
        snprintf(allow, sizeof allow, "Allow: %s", cases[i].allow);
        cr_assert(strcasestr(r.headers, allow), "%s %s: no '%s' header", cases[i].method, cases[i].path, allow);
        cJSON *j = cJSON_Parse(r.body);
        ts_check_error(j, INVALID, NULL, "method_not_allowed");
        cJSON_Delete(j);
        la_http_resp_free(&r);
    }
    ts_assert_serves(t.port);
    ts_stop(&t);
}

/* A few refusals (tests/server/test_api_fields.c walks the whole field table). */
Test(server_errors, unsupported_features_are_refused) {
    test_server t;
    ts_start(&t, NULL);
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"n\": 200}", 400, INVALID, "n",
                    "invalid_value");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"logprobs\": 3, \"echo\": true}", 400,
                    INVALID, "echo", "unsupported_parameter");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"suffix\": \"y\"}", 400, INVALID, "suffix",
                    "unsupported_parameter");
    ts_expect_error(t.port, "/v1/completions", "{\"prompt\": \"x\", \"foo\": 1}", 400, INVALID, "foo",
                    "unknown_parameter");
    ts_expect_error(t.port, "/v1/chat/completions",
                    "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", 400,
                    INVALID, "messages[0].content[0]", "unsupported_parameter");
    /* neutral values and nulls are fine */
    cJSON *j = ts_post(t.port, "/v1/completions",
                       "{\"prompt\": \"x\", \"n\": 1, \"max_tokens\": 1, \"user\": \"u\", \"logprobs\": null,"
                       " \"frequency_penalty\": 0, \"suffix\": \"\", \"logit_bias\": {}}", 200);
    cJSON_Delete(j);
    ts_assert_serves(t.port);
    ts_stop(&t);
}

/* ---- overload ------------------------------------------------------------------------ */

static void one_at_a_time(la_engine_options *eo, la_server_options *so) {
    (void)so;
    eo->max_running = 1;
    eo->max_queue = 1;
}

static bool one_running(const la_engine_stats *s) { return s->n_running == 1; }
static bool one_waiting(const la_engine_stats *s) { return s->n_running == 1 && s->n_waiting == 1; }
static bool idle(const la_engine_stats *s) { return s->n_running == 0 && s->n_waiting == 0; }

typedef struct queued_call {
    int port;
    int status;
} queued_call;

static void *post_queued(void *arg) {
    queued_call *q = arg;
    la_http_resp r;
    const char *body = "{\"prompt\": \"queued\", \"max_tokens\": 3, \"ignore_eos\": true}";
    if (la_http_request(q->port, "POST", "/v1/completions", body, strlen(body), NULL, &r) == 0) {
        q->status = r.status;
        la_http_resp_free(&r);
    }
    return NULL;
}

Test(server_errors, full_queue_is_429) {
    test_server t;
    ts_start(&t, one_at_a_time);
    /* A: a long stream occupies the one running slot */
    int fd = la_http_open(t.port, "POST", "/v1/completions",
                          "{\"prompt\": \"long\", \"max_tokens\": 100000, \"ignore_eos\": true, \"stream\": true}");
    cr_assert(fd >= 0);
    cr_assert(ts_wait_stats(t.e, one_running, 10000), "stream A never ran");
    /* B: waits in the queue (its one slot) */
    queued_call q = {t.port, 0};
    pthread_t th;
    pthread_create(&th, NULL, post_queued, &q);
    cr_assert(ts_wait_stats(t.e, one_waiting, 10000), "request B never queued");
    /* C: the queue is full */
    ts_expect_error(t.port, "/v1/chat/completions",
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 429, "rate_limit_error",
                    NULL, "queue_full");
    ts_expect_error(t.port, "/v1/documents", "{\"documents\": [\"d\"]}", 429, "rate_limit_error", NULL,
                    "queue_full");
    /* A hangs up: it is cancelled, B runs and succeeds */
    close(fd);
    pthread_join(th, NULL);
    cr_assert_eq(q.status, 200);
    cr_assert(ts_wait_stats(t.e, idle, 10000));
    la_engine_stats es;
    la_engine_get_stats(t.e, &es);
    cr_assert_eq(es.requests_cancelled, 1);
    cr_assert_eq(es.kv_blocks_pinned, 0);
    ts_assert_serves(t.port);
    ts_stop(&t);
}

static void one_second_idle(la_engine_options *eo, la_server_options *so) {
    (void)eo;
    so->idle_timeout_s = 1;
}

/* A connection that stops sending (half-open: a request line and one header) is closed after
 * --timeout-keep-alive, instead of holding a thread forever (issue 28); a request being
 * answered is not idle, however long it takes. */
Test(server_errors, a_connection_that_stops_sending_is_closed_and_answers_outlive_the_idle_timeout) {
    test_server t;
    ts_start(&t, one_second_idle);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)t.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    const char *half = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
    cr_assert_eq(send(fd, half, strlen(half), 0), (ssize_t)strlen(half));
    struct timeval tv = {30, 0}; /* a bound on the test, not the timeout under test */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[64];
    cr_assert_eq(recv(fd, buf, sizeof buf, 0), 0, "the server closed the idle connection");
    close(fd);
    /* 6000 tokens of the tiny model: seconds of generating here (the log says how long),
     * longer than the idle timeout; the answer comes whole */
    cJSON *j = ts_post(t.port, "/v1/completions",
                       "{\"prompt\": [1, 2, 3], \"max_tokens\": 6000, \"ignore_eos\": true}", 200);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens")->valueint, 6000);
    double e2e = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "lazyattn"), "e2e_ms")->valuedouble;
    cr_log_info("a %.0f ms answer under a 1 s idle timeout", e2e);
    cJSON_Delete(j);
    ts_assert_serves(t.port);
    ts_stop(&t);
}
