/* Helpers of the in-process server tests: start an engine + server on a free loopback
 * port, post JSON, check OpenAI error bodies. Header-only (static functions), included by
 * tests/server/test_*.c. */
#ifndef LA_TESTS_SERVER_SERVER_UTIL_H
#define LA_TESTS_SERVER_SERVER_UTIL_H

#include <cjson/cJSON.h>
#include <time.h>

#include "common/engine_util.h"
#include "common/test_util.h"
#include "lazyattn/lazyattn.h"
#include "server/server.h"
#include "http_client.h"

/* Random weights, tiny byte-level BPE with Llama-3 specials: text is gibberish but
 * deterministic under greedy decoding. */
#define TS_MODEL "tests/fixtures/models/tiny-f32-tied"

typedef struct test_server {
    la_engine *e;
    la_server *s;
    int port;
} test_server;

typedef void (*ts_tweak_fn)(la_engine_options *eo, la_server_options *so);

static inline void ts_start(test_server *t, ts_tweak_fn tweak) {
    la_engine_options eo;
    la_engine_options_init(&eo);
    eo.model_dir = TS_MODEL;
    eo.n_threads = 2;
    la_server_options so;
    la_server_options_init(&so);
    so.port = 0;
    if (tweak) tweak(&eo, &so);
    so.method = eo.method;
    so.max_docs = eo.max_docs;
    la_err err = {0};
    la_status s = la_engine_create(&eo, &t->e, &err);
    cr_assert(s == LA_OK, "engine: %s", err.msg);
    s = la_server_create(t->e, &so, &t->s, &err);
    cr_assert(s == LA_OK, "server: %s", err.msg);
    t->port = la_server_port(t->s);
    cr_assert(t->port > 0);
}

static inline void ts_stop(test_server *t) {
    la_server_destroy(t->s);
    la_engine_destroy(t->e);
    memset(t, 0, sizeof *t);
}

/* POST body to path; asserts the status and returns the parsed JSON body. */
static inline cJSON *ts_post(int port, const char *path, const char *body, int status) {
    la_http_resp r;
    cr_assert(la_http_request(port, "POST", path, body, strlen(body), NULL, &r) == 0,
              "POST %s: no response", path);
    cr_assert_eq(r.status, status, "POST %s: status %d (expected %d): %s", path, r.status, status, r.body);
    cJSON *j = cJSON_Parse(r.body);
    cr_assert(j, "POST %s: body is not JSON: %s", path, r.body);
    la_http_resp_free(&r);
    return j;
}

static inline const char *ts_str(const cJSON *o, const char *path1, const char *path2) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, path1);
    if (path2) v = cJSON_GetObjectItemCaseSensitive(v, path2);
    cr_assert(cJSON_IsString(v), "field %s%s%s is not a string", path1, path2 ? "." : "", path2 ? path2 : "");
    return v->valuestring;
}

static inline double ts_num(const cJSON *o, const char *path1, const char *path2) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, path1);
    if (path2) v = cJSON_GetObjectItemCaseSensitive(v, path2);
    cr_assert(cJSON_IsNumber(v), "field %s%s%s is not a number", path1, path2 ? "." : "", path2 ? path2 : "");
    return v->valuedouble;
}

/* The OpenAI error body: {"error": {"message", "type", "param", "code"}} with these values
 * (param / code NULL: JSON null). */
static inline void ts_check_error(const cJSON *j, const char *type, const char *param, const char *code) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    cr_assert(cJSON_IsObject(e), "no error object");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    cr_assert(cJSON_IsString(m) && m->valuestring[0], "error.message missing");
    cr_assert_str_eq(ts_str(e, "type", NULL), type);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(e, "param");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
    cr_assert(p && c, "error.param and error.code must be present");
    if (param) cr_assert(cJSON_IsString(p) && !strcmp(p->valuestring, param), "param: %s (expected %s)",
                         cJSON_IsString(p) ? p->valuestring : "null", param);
    else cr_assert(cJSON_IsNull(p), "param should be null");
    if (code) cr_assert(cJSON_IsString(c) && !strcmp(c->valuestring, code), "code: %s (expected %s)",
                        cJSON_IsString(c) ? c->valuestring : "null", code);
    else cr_assert(cJSON_IsNull(c), "code should be null");
}

/* POST that must fail with status and the given error fields. */
static inline void ts_expect_error(int port, const char *path, const char *body, int status,
                                   const char *type, const char *param, const char *code) {
    cJSON *j = ts_post(port, path, body, status);
    ts_check_error(j, type, param, code);
    cJSON_Delete(j);
}

/* A good completion still works (the server survived what came before). */
static inline void ts_assert_serves(int port) {
    cJSON *j = ts_post(port, "/v1/completions",
                       "{\"prompt\": \"still alive?\", \"max_tokens\": 3, \"ignore_eos\": true}", 200);
    cr_assert_eq(ts_num(j, "usage", "completion_tokens"), 3);
    cJSON_Delete(j);
}

static inline void ts_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Wait (up to timeout_ms) until pred holds on the engine's stats. */
static inline bool ts_wait_stats(la_engine *e, bool (*pred)(const la_engine_stats *), int timeout_ms) {
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        la_engine_stats st;
        la_engine_get_stats(e, &st);
        if (pred(&st)) return true;
        ts_sleep_ms(10);
    }
    return false;
}

/* Value of an unlabelled (or fully labelled) sample line "name value" in /metrics. */
static inline double ts_metric(const char *text, const char *sample) {
    size_t n = strlen(sample);
    for (const char *p = text; (p = strstr(p, sample)) != NULL; p += n)
        if ((p == text || p[-1] == '\n') && p[n] == ' ') return strtod(p + n + 1, NULL);
    cr_assert_fail("metric %s not found", sample);
    return 0;
}

#endif
