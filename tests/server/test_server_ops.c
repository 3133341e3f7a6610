/* Operations of issue 21 (src/server/server.c, tokenize.c): the API key (constant-time
 * Bearer check, 401 in OpenAI's shape, /health and /metrics open unless protected), CORS
 * with its preflight, X-Request-Id echoed or made and used as the response id, HTTPS with a
 * self-signed certificate made here by openssl (curl is the client), and the /tokenize,
 * /detokenize, /reset_prefix_cache and /version endpoints. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "server_util.h"
#include "serve_proc.h"

#define INVALID "invalid_request_error"

static void with_key(la_engine_options *eo, la_server_options *so) {
    (void)eo;
    so->api_key = "s3cret";
}

static void with_key_protected(la_engine_options *eo, la_server_options *so) {
    with_key(eo, so);
    so->protect_metrics = true;
}

static int status_of(int port, const char *method, const char *path, const char *body, const char *headers) {
    la_http_resp r;
    cr_assert(la_http_request(port, method, path, body, body ? strlen(body) : 0, headers, &r) == 0, "%s %s", method, path);
    int st = r.status;
    la_http_resp_free(&r);
    return st;
}

Test(server_ops, an_api_key_guards_every_route_but_health_and_metrics) {
    test_server t;
    ts_start(&t, with_key);
    const char *body = "{\"prompt\": \"x\", \"max_tokens\": 2}";
    la_http_resp r;
    cr_assert(la_http_request(t.port, "POST", "/v1/completions", body, strlen(body), NULL, &r) == 0);
    cr_assert_eq(r.status, 401);
    cr_assert(strcasestr(r.headers, "WWW-Authenticate: Bearer"));
    cJSON *j = cJSON_Parse(r.body);
    ts_check_error(j, INVALID, NULL, "invalid_api_key");
    cJSON_Delete(j);
    la_http_resp_free(&r);
    cr_assert_eq(status_of(t.port, "POST", "/v1/completions", body, "Authorization: Bearer s3cre\r\n"), 401);
    cr_assert_eq(status_of(t.port, "POST", "/v1/completions", body, "Authorization: Bearer s3cret!\r\n"), 401);
    cr_assert_eq(status_of(t.port, "POST", "/v1/completions", body, "Authorization: Basic s3cret\r\n"), 401);
    cr_assert_eq(status_of(t.port, "POST", "/v1/completions", body, "Authorization: Bearer s3cret\r\n"), 200);
    cr_assert_eq(status_of(t.port, "GET", "/v1/models", NULL, NULL), 401);
    cr_assert_eq(status_of(t.port, "POST", "/tokenize", "{\"prompt\": \"x\"}", NULL), 401);
    cr_assert_eq(status_of(t.port, "GET", "/health", NULL, NULL), 200);
    cr_assert_eq(status_of(t.port, "GET", "/metrics", NULL, NULL), 200);
    ts_stop(&t);
    ts_start(&t, with_key_protected);
    cr_assert_eq(status_of(t.port, "GET", "/health", NULL, NULL), 401);
    cr_assert_eq(status_of(t.port, "GET", "/metrics", NULL, NULL), 401);
    cr_assert_eq(status_of(t.port, "GET", "/metrics", NULL, "Authorization: Bearer s3cret\r\n"), 200);
    ts_stop(&t);
}

static void with_cors(la_engine_options *eo, la_server_options *so) {
    (void)eo;
    so->allowed_origins = "https://a.example, https://b.example";
}

Test(server_ops, cors_answers_preflights_and_marks_answers_for_allowed_origins) {
    test_server t;
    ts_start(&t, with_cors);
    la_http_resp r;
    cr_assert(la_http_request(t.port, "OPTIONS", "/v1/chat/completions", NULL, 0,
                              "Origin: https://b.example\r\nAccess-Control-Request-Method: POST\r\n"
                              "Access-Control-Request-Headers: authorization, content-type\r\n", &r) == 0);
    cr_assert_eq(r.status, 204);
    cr_assert(strcasestr(r.headers, "Access-Control-Allow-Origin: https://b.example"), "%s", r.headers);
    cr_assert(strcasestr(r.headers, "Access-Control-Allow-Methods: POST, OPTIONS"), "%s", r.headers);
    cr_assert(strcasestr(r.headers, "Access-Control-Allow-Headers: authorization, content-type"), "%s", r.headers);
    la_http_resp_free(&r);
    cr_assert_eq(status_of(t.port, "OPTIONS", "/v1/chat/completions", NULL, "Origin: https://evil.example\r\n"), 400);
    cr_assert(la_http_request(t.port, "GET", "/health", NULL, 0, "Origin: https://a.example\r\n", &r) == 0);
    cr_assert(strcasestr(r.headers, "Access-Control-Allow-Origin: https://a.example"), "%s", r.headers);
    la_http_resp_free(&r);
    cr_assert(la_http_request(t.port, "GET", "/health", NULL, 0, "Origin: https://evil.example\r\n", &r) == 0);
    cr_assert(!strcasestr(r.headers, "Access-Control-Allow-Origin"), "%s", r.headers);
    la_http_resp_free(&r);
    ts_stop(&t);
    ts_start(&t, NULL); /* no --allowed-origins: no preflight */
    cr_assert_eq(status_of(t.port, "OPTIONS", "/v1/chat/completions", NULL, "Origin: https://a.example\r\n"), 405);
    ts_stop(&t);
}

Test(server_ops, x_request_id_is_echoed_or_made_and_names_the_response) {
    test_server t;
    ts_start(&t, NULL);
    const char *body = "{\"prompt\": \"x\", \"max_tokens\": 2}";
    la_http_resp r;
    cr_assert(la_http_request(t.port, "POST", "/v1/completions", body, strlen(body), "X-Request-Id: req-7\r\n", &r) == 0);
    cr_assert(strcasestr(r.headers, "X-Request-Id: req-7\r\n"), "%s", r.headers);
    cJSON *j = cJSON_Parse(r.body);
    cr_assert_str_eq(ts_str(j, "id", NULL), "cmpl-req-7");
    cJSON_Delete(j);
    la_http_resp_free(&r);
    cr_assert(la_http_request(t.port, "POST", "/v1/completions", body, strlen(body), NULL, &r) == 0);
    const char *h = strcasestr(r.headers, "X-Request-Id: ");
    cr_assert(h, "%s", r.headers);
    char made[64];
    sscanf(h + strlen("X-Request-Id: "), "%63[^\r]", made);
    cr_assert_eq(strlen(made), 24, "a made id: %s", made);
    j = cJSON_Parse(r.body);
    char want[80];
    snprintf(want, sizeof want, "cmpl-%s", made);
    cr_assert_str_eq(ts_str(j, "id", NULL), want);
    cJSON_Delete(j);
    la_http_resp_free(&r);
    /* the two requests in the e2e and queue-time histograms, labelled with the model */
    cr_assert(la_http_request(t.port, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(ts_metric(r.body, "lazyattn_e2e_request_latency_seconds_count{model_name=\"tiny-f32-tied\"}"), 2);
    cr_assert_eq(ts_metric(r.body, "lazyattn_request_queue_time_seconds_count{model_name=\"tiny-f32-tied\"}"), 2);
    cr_assert_eq(ts_metric(r.body, "lazyattn_request_queue_time_seconds_bucket{model_name=\"tiny-f32-tied\",le=\"+Inf\"}"), 2);
    cr_assert_eq(ts_metric(r.body, "lazyattn_model_info{model_name=\"tiny-f32-tied\"}"), 1);
    la_http_resp_free(&r);
    ts_stop(&t);
}

Test(server_ops, tokenize_detokenize_reset_and_version) {
    test_server t;
    ts_start(&t, NULL);
    cJSON *j = ts_post(t.port, "/tokenize", "{\"prompt\": \"hello world\", \"return_token_strs\": true}", 200);
    const cJSON *toks = cJSON_GetObjectItem(j, "tokens");
    int32_t ids[64];
    int32_t n = 0;
    for (const cJSON *x = toks->child; x; x = x->next) ids[n++] = x->valueint;
    int32_t *want = NULL, n_want = 0;
    la_err err = {0};
    cr_assert(la_engine_tokenize(t.e, "hello world", 11, true, &want, &n_want, &err) == LA_OK);
    cr_assert_eq(n, n_want);
    cr_assert(!memcmp(ids, want, sizeof(int32_t) * (size_t)n), "the engine's tokens");
    cr_assert_eq(ts_num(j, "count", NULL), n);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "token_strs")), n);
    free(want);
    cJSON_Delete(j);
    /* detokenize the ids back (BOS stays as written) */
    char body[512] = "{\"tokens\": [";
    for (int32_t i = 1; i < n; i++) snprintf(body + strlen(body), sizeof body - strlen(body), "%s%d", i > 1 ? ", " : "", ids[i]);
    strcat(body, "]}");
    j = ts_post(t.port, "/detokenize", body, 200);
    cr_assert_str_eq(ts_str(j, "prompt", NULL), "hello world");
    cJSON_Delete(j);
    ts_expect_error(t.port, "/detokenize", "{\"tokens\": [-1]}", 400, INVALID, "tokens", "invalid_value");
    /* documents count as the engine lays them out: BOS alone is document 0 */
    j = ts_post(t.port, "/tokenize", "{\"prompt\": \"q\", \"documents\": [\"doc one\", \"doc two\"]}", 200);
    const cJSON *docs = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "lazyattn"), "documents");
    cr_assert_eq(cJSON_GetArraySize(docs), 3);
    cr_assert_eq(ts_num(j, "lazyattn", "first_document"), 1);
    int total = (int)ts_num(j, "lazyattn", "prompt_tokens");
    for (const cJSON *d = docs->child; d; d = d->next) total += d->valueint;
    cr_assert_eq(total, ts_num(j, "count", NULL));
    cJSON_Delete(j);
    /* cache a document, reset, and it is computed again */
    const char *gen = "{\"prompt\": \"q\", \"max_tokens\": 1, \"documents\": [\"a document to forget\"]}";
    cJSON_Delete(ts_post(t.port, "/v1/completions", gen, 200));
    j = ts_post(t.port, "/v1/completions", gen, 200);
    cr_assert_gt(ts_num(j, "lazyattn", "doc_tokens_reused"), 0);
    cJSON_Delete(j);
    j = ts_post(t.port, "/reset_prefix_cache", "", 200);
    cr_assert_gt(ts_num(j, "dropped_blocks", NULL), 0);
    cJSON_Delete(j);
    la_engine_stats st;
    la_engine_get_stats(t.e, &st);
    cr_assert_eq(st.kv_blocks_cached, 0);
    j = ts_post(t.port, "/v1/completions", gen, 200);
    cr_assert_eq(ts_num(j, "lazyattn", "doc_tokens_reused"), 0, "the reset dropped the document");
    cJSON_Delete(j);
    la_http_resp r;
    cr_assert(la_http_request(t.port, "GET", "/version", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body, "\"version\":\"0."), "%s", r.body);
    la_http_resp_free(&r);
    ts_stop(&t);
}

Test(server_ops, https_with_a_self_signed_certificate, .timeout = 300) {
    la_test_require("command -v openssl", "openssl");
    la_test_require("command -v curl", "curl");
    char *dir = la_test_tmpdir();
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
             "subjectAltName=IP:127.0.0.1 -keyout %s/key.pem -out %s/cert.pem >/dev/null 2>&1", dir, dir);
    cr_assert_eq(system(cmd), 0, "openssl could not make a certificate");
    char cert[600], key[600];
    snprintf(cert, sizeof cert, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir);
    const char *args[] = {"-m", TS_MODEL, "--threads", "1", "--ssl-certfile", cert, "--ssl-keyfile", key, NULL};
    la_serve_proc p;
    cr_assert(la_serve_start(&p, args) == 0, "serve did not start: %s", p.log);
    cr_assert(strstr(p.log, "listening on https://"), "%s", p.log);
    char out[600];
    snprintf(out, sizeof out, "%s/out.json", dir);
    snprintf(cmd, sizeof cmd,
             "curl -s --cacert %s -o %s -w '%%{http_code}' https://127.0.0.1:%d/v1/completions "
             "-d '{\"prompt\": \"x\", \"max_tokens\": 3, \"ignore_eos\": true}'", cert, out, p.port);
    FILE *f = popen(cmd, "r");
    char code[16] = "";
    cr_assert(fgets(code, sizeof code, f));
    pclose(f);
    cr_assert_str_eq(code, "200", "HTTPS completion: %s", code);
    char text[4096] = "";
    f = fopen(out, "r");
    size_t k = fread(text, 1, sizeof text - 1, f);
    text[k] = '\0';
    fclose(f);
    cJSON *j = cJSON_Parse(text);
    cr_assert_eq(ts_num(j, "usage", "completion_tokens"), 3, "%s", text);
    cJSON_Delete(j);
    /* plain HTTP on the HTTPS port is no answer; a client that does not trust the cert fails */
    snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -m 10 https://127.0.0.1:%d/health", p.port);
    cr_assert_neq(system(cmd), 0, "curl without the CA must refuse the self-signed certificate");
    cr_assert_eq(la_serve_stop(&p, SIGTERM, 60), 0, "%s", p.log);
    snprintf(cmd, sizeof cmd, "%s/cert.pem", dir);
    const char *bad[] = {"-m", TS_MODEL, "--ssl-certfile", cmd, NULL}; /* a key is needed too */
    la_serve_proc q;
    cr_assert_eq(la_serve_run_to_exit(&q, bad), 2, "%s", q.log);
    la_test_rm_tree(dir);
}
