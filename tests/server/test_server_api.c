/* The OpenAI-compatible API over HTTP (src/server/): response shapes, answers equal to the
 * engine's own (greedy), streaming, document reuse reported as cached_tokens, pre-warming,
 * metrics. An in-process server on a free loopback port; a tiny socket client speaks
 * HTTP. Model: tests/fixtures/models/tiny-f32-tied (random weights, deterministic). */
#include <pthread.h>

#include "server_util.h"

/* Greedy text of the same request run on a second engine directly (no server). */
static char *direct_text(la_request_params *p, la_request_stats *st) {
    la_engine *e = la_test_engine(TS_MODEL, 0, 0);
    la_test_gen g;
    la_test_generate(e, p, &g);
    char *text = strdup(g.text ? g.text : "");
    if (st) *st = g.stats;
    la_test_gen_free(&g);
    la_engine_destroy(e);
    return text;
}

/* ============================================================ shapes ================ */

Test(server_api, health_and_models_answer) {
    test_server t;
    ts_start(&t, NULL);
    la_http_resp r;
    cr_assert(la_http_request(t.port, "GET", "/health", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(r.status, 200);
    cJSON *j = cJSON_Parse(r.body);
    cr_assert_str_eq(ts_str(j, "status", NULL), "ok");
    cr_assert_str_eq(ts_str(j, "model", NULL), "tiny-f32-tied");
    cJSON_Delete(j);
    la_http_resp_free(&r);
    cr_assert(la_http_request(t.port, "GET", "/v1/models", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(r.status, 200);
    j = cJSON_Parse(r.body);
    cr_assert_str_eq(ts_str(j, "object", NULL), "list");
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "data"), 0);
    cr_assert_str_eq(ts_str(m, "id", NULL), "tiny-f32-tied");
    cr_assert_str_eq(ts_str(m, "object", NULL), "model");
    cr_assert_eq(ts_num(m, "max_model_len", NULL), 131072);
    cJSON_Delete(j);
    la_http_resp_free(&r);
    ts_stop(&t);
}

Test(server_api, completion_equals_engine_answer_and_has_openai_shape) {
    test_server t;
    ts_start(&t, NULL);
    cJSON *j = ts_post(t.port, "/v1/completions",
                       "{\"model\": \"tiny-f32-tied\", \"prompt\": \"The capital of France is\","
                       " \"max_tokens\": 12, \"ignore_eos\": true,"
                       " \"documents\": [\"Paris is the capital of France.\", {\"title\": \"Rome\","
                       " \"text\": \"Rome is in Italy.\"}]}",
                       200);
    cr_assert_str_eq(ts_str(j, "object", NULL), "text_completion");
    cr_assert(!strncmp(ts_str(j, "id", NULL), "cmpl-", 5));
    cr_assert_str_eq(ts_str(j, "model", NULL), "tiny-f32-tied");
    cr_assert_gt(ts_num(j, "created", NULL), 1.7e9);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cr_assert_eq(ts_num(c, "index", NULL), 0);
    cr_assert_str_eq(ts_str(c, "finish_reason", NULL), "length");
    const char *text = ts_str(c, "text", NULL);

    la_segment docs[2] = {{.text = "Paris is the capital of France."},
                          {.text = "Rome is in Italy.", .title = "Rome"}};
    la_request_params p;
    la_request_params_init(&p);
    p.prompt.text = "The capital of France is";
    p.docs = docs;
    p.n_docs = 2;
    p.sampling.max_tokens = 12;
    p.sampling.ignore_eos = true;
    la_request_stats st;
    char *want = direct_text(&p, &st);
    cr_assert_str_eq(text, want, "server text '%s' != engine text '%s'", text, want);
    cr_assert_eq(ts_num(j, "usage", "completion_tokens"), 12);
    cr_assert_eq(ts_num(j, "usage", "prompt_tokens"), st.n_prompt_tokens);
    cr_assert_eq(ts_num(j, "usage", "total_tokens"), st.n_prompt_tokens + 12);
    const cJSON *details = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens_details");
    cr_assert_eq(ts_num(details, "cached_tokens", NULL), 0);
    cr_assert_str_eq(ts_str(j, "lazyattn", "method"), "lazy");
    cr_assert_eq(ts_num(j, "lazyattn", "doc_tokens"), st.n_doc_tokens);
    cr_assert_eq(ts_num(j, "lazyattn", "doc_tokens_computed"), st.n_doc_tokens);
    cr_assert_gt(ts_num(j, "lazyattn", "ttft_ms"), 0);
    free(want);
    cJSON_Delete(j);
    ts_stop(&t);
}

Test(server_api, chat_with_documents_equals_engine_answer) {
    test_server t;
    ts_start(&t, NULL);
    cJSON *j = ts_post(t.port, "/v1/chat/completions",
                       "{\"model\": \"tiny-f32-tied\", \"max_completion_tokens\": 10,"
                       " \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\","
                       " \"text\": \"Who wrote Hamlet?\"}, {\"type\": \"text\", \"text\": \"\"},"
                       " {\"type\": \"text\", \"text\": \"Answer briefly.\"}]}],"
                       " \"documents\": [{\"title\": \"Hamlet\", \"text\": \"Hamlet is a play by "
                       "Shakespeare.\"}, \"Macbeth too.\"], \"method\": \"mepic\", \"cache_salt\": \"t1\"}",
                       200);
    cr_assert_str_eq(ts_str(j, "object", NULL), "chat.completion");
    cr_assert(!strncmp(ts_str(j, "id", NULL), "chatcmpl-", 9));
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cr_assert_str_eq(ts_str(c, "message", "role"), "assistant");
    const char *content = ts_str(c, "message", "content");
    const char *finish = ts_str(c, "finish_reason", NULL);
    cr_assert(!strcmp(finish, "stop") || !strcmp(finish, "length"));
    cr_assert_str_eq(ts_str(j, "lazyattn", "method"), "mepic");

    /* the non-empty text parts are one message, joined with a newline */
    la_chat_message msgs[1] = {{"user", "Who wrote Hamlet?\nAnswer briefly."}};
    la_segment docs[2] = {{.text = "Hamlet is a play by Shakespeare.", .title = "Hamlet"},
                          {.text = "Macbeth too."}};
    la_request_params p;
    la_request_params_init(&p);
    p.messages = msgs;
    p.n_messages = 1;
    p.docs = docs;
    p.n_docs = 2;
    p.method = LA_METHOD_MEPIC;
    p.cache_salt = "t1";
    p.sampling.max_tokens = 10;
    la_request_stats st;
    char *want = direct_text(&p, &st);
    cr_assert_str_eq(content, want);
    cr_assert_eq(ts_num(j, "usage", "prompt_tokens"), st.n_prompt_tokens);
    cr_assert_eq(ts_num(j, "usage", "completion_tokens"), st.n_generated);
    free(want);
    cJSON_Delete(j);
    ts_stop(&t);
}

Test(server_api, stop_string_truncates_and_finishes_with_stop) {
    test_server t;
    ts_start(&t, NULL);
    const char *base = "{\"prompt\": \"The capital of France is\", \"max_tokens\": 24, \"ignore_eos\": true%s}";
    char body[512];
    snprintf(body, sizeof body, base, "");
    cJSON *j = ts_post(t.port, "/v1/completions", body, 200);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    char *full = strdup(ts_str(c, "text", NULL));
    cJSON_Delete(j);
    cr_assert_geq(strlen(full), 6, "need some text to cut: '%s'", full);
    /* stop at the first occurrence of a 2-byte ASCII piece of the greedy text */
    size_t at = 2;
    while (full[at] && (full[at] & 0x80 || full[at + 1] & 0x80 || full[at] == '"' ||
                        full[at + 1] == '"' || full[at] == '\\' || full[at + 1] == '\\' ||
                        (unsigned char)full[at] < 0x20 || (unsigned char)full[at + 1] < 0x20))
        at++;
    cr_assert(full[at] && full[at + 1], "no ASCII pair in '%s'", full);
    char stop[3] = {full[at], full[at + 1], 0};
    char *first = strstr(full, stop);
    char extra[64];
    snprintf(extra, sizeof extra, ", \"stop\": [\"%s\"]", stop);
    snprintf(body, sizeof body, base, extra);
    j = ts_post(t.port, "/v1/completions", body, 200);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cr_assert_str_eq(ts_str(c, "finish_reason", NULL), "stop");
    const char *cut = ts_str(c, "text", NULL);
    cr_assert_eq(strlen(cut), (size_t)(first - full), "text '%s' should end before '%s' in '%s'", cut,
                 stop, full);
    cr_assert(!strncmp(cut, full, strlen(cut)));
    cJSON_Delete(j);
    free(full);
    ts_stop(&t);
}

/* ============================================================ streaming ============= */

/* Concatenated text of an SSE body and checks of its framing. */
static char *stream_text(const char *body, bool chat, bool usage, const char **finish_out) {
    int n = 0;
    char **ev = la_sse_events(body, &n);
    cr_assert_geq(n, 3, "too few events: %s", body);
    cr_assert_str_eq(ev[n - 1], "[DONE]");
    size_t cap = 1, len = 0;
    char *text = calloc(1, 1);
    static char finish[16];
    finish[0] = '\0';
    int last = n - 2;
    if (usage) { /* the usage chunk: no choices, usage set */
        cJSON *u = cJSON_Parse(ev[last]);
        cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(u, "choices")), 0);
        cr_assert_gt(ts_num(u, "usage", "completion_tokens"), 0);
        cJSON_Delete(u);
        last--;
    }
    for (int i = 0; i <= last; i++) {
        cJSON *c = cJSON_Parse(ev[i]);
        cr_assert(c, "event %d is not JSON: %s", i, ev[i]);
        cr_assert_str_eq(ts_str(c, "object", NULL), chat ? "chat.completion.chunk" : "text_completion");
        const cJSON *u = cJSON_GetObjectItem(c, "usage");
        if (usage) cr_assert(cJSON_IsNull(u), "chunks before the last carry usage: null");
        else cr_assert(!u, "no usage without include_usage");
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0);
        const cJSON *fr = cJSON_GetObjectItem(ch, "finish_reason");
        cr_assert_eq(!cJSON_IsNull(fr), i == last, "finish_reason only on the last chunk (%d)", i);
        if (i == last) snprintf(finish, sizeof finish, "%s", fr->valuestring);
        const cJSON *piece;
        if (chat) {
            const cJSON *delta = cJSON_GetObjectItem(ch, "delta");
            const cJSON *role = cJSON_GetObjectItem(delta, "role");
            cr_assert_eq(role != NULL, i == 0, "role only in the first chunk (%d)", i);
            piece = cJSON_GetObjectItem(delta, "content");
        } else {
            piece = cJSON_GetObjectItem(ch, "text");
        }
        if (piece) {
            size_t k = strlen(piece->valuestring);
            text = realloc(text, cap += k);
            memcpy(text + len, piece->valuestring, k + 1);
            len += k;
        }
        cJSON_Delete(c);
    }
    for (int i = 0; i < n; i++) free(ev[i]);
    free(ev);
    *finish_out = finish;
    return text;
}

static void check_stream_equals(const char *path, const char *fields, bool chat) {
    test_server t;
    ts_start(&t, NULL);
    char body[1024];
    snprintf(body, sizeof body, "{%s}", fields);
    cJSON *j = ts_post(t.port, path, body, 200);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const char *want = chat ? ts_str(c, "message", "content") : ts_str(c, "text", NULL);
    const char *want_finish = ts_str(c, "finish_reason", NULL);
    for (int usage = 0; usage < 2; usage++) {
        snprintf(body, sizeof body, "{%s, \"stream\": true%s}", fields,
                 usage ? ", \"stream_options\": {\"include_usage\": true}" : "");
        la_http_resp r;
        cr_assert(la_http_request(t.port, "POST", path, body, strlen(body), NULL, &r) == 0);
        cr_assert_eq(r.status, 200);
        cr_assert(strcasestr(r.headers, "Content-Type: text/event-stream"));
        const char *finish;
        char *got = stream_text(r.body, chat, usage, &finish);
        cr_assert_str_eq(got, want, "streamed '%s' != non-streamed '%s'", got, want);
        cr_assert_str_eq(finish, want_finish);
        free(got);
        la_http_resp_free(&r);
    }
    cJSON_Delete(j);
    ts_stop(&t);
}

Test(server_api, streamed_completion_equals_non_streamed) {
    check_stream_equals("/v1/completions",
                        "\"prompt\": \"Streaming test\", \"max_tokens\": 20, \"ignore_eos\": true,"
                        " \"documents\": [\"one document\", \"another document\"]",
                        false);
}

Test(server_api, streamed_chat_equals_non_streamed) {
    check_stream_equals("/v1/chat/completions",
                        "\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                        " {\"role\": \"user\", \"content\": \"Stream me\"}], \"max_tokens\": 20,"
                        " \"documents\": [{\"title\": \"T\", \"text\": \"A titled document.\"}]",
                        true);
}

/* ============================================================ reuse ================= */

static void check_reordered(const char *method, bool all_docs) {
    test_server t;
    ts_start(&t, NULL);
    const char *fmt = "{\"messages\": [{\"role\": \"user\", \"content\": \"Which one?\"}],"
                      " \"max_tokens\": 4, \"method\": \"%s\", \"documents\": [%s]}";
    const char *a = "\"Alpha document with several words of text in it.\"";
    const char *b = "{\"title\": \"Beta\", \"text\": \"The second document, also long enough.\"}";
    const char *c = "\"Gamma: a third document for the reorder test.\"";
    char docs[512], body[1024];
    snprintf(docs, sizeof docs, "%s, %s, %s", a, b, c);
    snprintf(body, sizeof body, fmt, method, docs);
    cJSON *j1 = ts_post(t.port, "/v1/chat/completions", body, 200);
    double doc_tokens = ts_num(j1, "lazyattn", "doc_tokens");
    const cJSON *d1 = cJSON_GetObjectItem(cJSON_GetObjectItem(j1, "usage"), "prompt_tokens_details");
    cr_assert_eq(ts_num(d1, "cached_tokens", NULL), 0);
    snprintf(docs, sizeof docs, "%s, %s, %s", c, a, b);
    snprintf(body, sizeof body, fmt, method, docs);
    cJSON *j2 = ts_post(t.port, "/v1/chat/completions", body, 200);
    const cJSON *d2 = cJSON_GetObjectItem(cJSON_GetObjectItem(j2, "usage"), "prompt_tokens_details");
    double cached = ts_num(d2, "cached_tokens", NULL);
    cr_assert_eq(ts_num(j2, "lazyattn", "doc_tokens"), doc_tokens);
    if (all_docs) {
        cr_assert_eq(ts_num(j2, "lazyattn", "doc_tokens_reused"), doc_tokens, "%s", method);
        cr_assert_geq(cached, doc_tokens, "%s: cached %g of %g document tokens", method, cached, doc_tokens);
    } else { /* prefix: only the shared start (the preamble), in whole blocks */
        cr_assert_eq(ts_num(j2, "lazyattn", "doc_tokens_reused"), 0);
        cr_assert_lt(cached, doc_tokens, "prefix: cached %g of %g", cached, doc_tokens);
        cr_assert_gt(cached, 0);
        cr_assert_eq((long)cached % 16, 0, "whole blocks: %g", cached);
    }
    cJSON_Delete(j1);
    cJSON_Delete(j2);
    ts_stop(&t);
}

Test(server_api, reordered_documents_are_all_cached_under_lazy) { check_reordered("lazy", true); }
Test(server_api, reordered_documents_are_all_cached_under_block) { check_reordered("block", true); }
Test(server_api, reordered_documents_only_share_the_prefix_under_prefix) {
    check_reordered("prefix", false);
}

Test(server_api, prewarm_reports_tokens_and_requests_reuse_the_documents) {
    test_server t;
    ts_start(&t, NULL);
    const char *docs = "[\"First prewarmed document.\", {\"title\": \"Second\", \"text\": \"Its text.\"}]";
    char body[512];
    snprintf(body, sizeof body, "{\"documents\": %s, \"cache_salt\": \"tenant-a\"}", docs);
    cJSON *j = ts_post(t.port, "/v1/documents", body, 200);
    cr_assert_str_eq(ts_str(j, "method", NULL), "lazy");
    const cJSON *arr = cJSON_GetObjectItem(j, "documents");
    cr_assert_eq(cJSON_GetArraySize(arr), 2);
    double tokens = 0;
    for (int i = 0; i < 2; i++) {
        const cJSON *d = cJSON_GetArrayItem(arr, i);
        cr_assert_eq(ts_num(d, "index", NULL), i);
        cr_assert_gt(ts_num(d, "tokens", NULL), 0);
        cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(d, "cached")));
        tokens += ts_num(d, "tokens", NULL);
    }
    cr_assert_eq(ts_num(j, "tokens", NULL), tokens);
    cJSON_Delete(j);
    /* the same call again: everything is cached */
    j = ts_post(t.port, "/v1/documents", body, 200);
    arr = cJSON_GetObjectItem(j, "documents");
    for (int i = 0; i < 2; i++)
        cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(arr, i), "cached")));
    cr_assert_eq(ts_num(j, "cached_tokens", NULL), tokens);
    cJSON_Delete(j);
    /* a completion with those documents (same salt) reuses every prewarmed token; another
     * tenant reuses none */
    snprintf(body, sizeof body, "{\"prompt\": \"Q\", \"max_tokens\": 2, \"documents\": %s, "
             "\"cache_salt\": \"tenant-a\"}", docs);
    j = ts_post(t.port, "/v1/completions", body, 200);
    cr_assert_geq(ts_num(j, "lazyattn", "doc_tokens_reused"), tokens);
    cJSON_Delete(j);
    snprintf(body, sizeof body, "{\"prompt\": \"Q\", \"max_tokens\": 2, \"documents\": %s, "
             "\"cache_salt\": \"tenant-b\"}", docs);
    j = ts_post(t.port, "/v1/completions", body, 200);
    cr_assert_lt(ts_num(j, "lazyattn", "doc_tokens_reused"), tokens);
    cJSON_Delete(j);
    ts_stop(&t);
}

Test(server_api, prewarm_refuses_methods_that_do_not_cache_documents_alone) {
    test_server t;
    ts_start(&t, NULL);
    ts_expect_error(t.port, "/v1/documents", "{\"documents\": [\"x y z\"], \"method\": \"prefix\"}", 400,
                    "invalid_request_error", "method", "invalid_value");
    ts_expect_error(t.port, "/v1/documents", "{\"documents\": []}", 400, "invalid_request_error",
                    "documents", "invalid_value");
    ts_expect_error(t.port, "/v1/documents", "{\"documents\": [\"\"]}", 400, "invalid_request_error",
                    "documents[0]", "invalid_value");
    ts_assert_serves(t.port);
    ts_stop(&t);
}

/* ============================================================ metrics =============== */

static bool three_ok_and_idle(const la_engine_stats *s) {
    return s->requests_ok == 3 && s->n_running == 0 && s->kv_blocks_pinned == 0;
}

Test(server_api, metrics_count_requests_tokens_and_kv_blocks) {
    test_server t;
    ts_start(&t, NULL);
    int generated = 0;
    for (int i = 0; i < 3; i++) {
        cJSON *j = ts_post(t.port, "/v1/completions",
                           "{\"prompt\": \"metrics\", \"max_tokens\": 5, \"ignore_eos\": true,"
                           " \"documents\": [\"a shared document for the hit ratio\"]}",
                           200);
        generated += (int)ts_num(j, "usage", "completion_tokens");
        cJSON_Delete(j);
    }
    ts_expect_error(t.port, "/v1/completions", "{", 400, "invalid_request_error", NULL, "invalid_json");
    /* the engine counts a request just after its answer went out */
    cr_assert(ts_wait_stats(t.e, three_ok_and_idle, 10000));
    la_http_resp r;
    cr_assert(la_http_request(t.port, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(r.status, 200);
    cr_assert(strcasestr(r.headers, "Content-Type: text/plain"));
    const char *m = r.body;
    cr_assert_eq(ts_metric(m, "lazyattn_http_requests_total{route=\"/v1/completions\",code=\"200\"}"), 3);
    cr_assert_eq(ts_metric(m, "lazyattn_http_requests_total{route=\"/v1/completions\",code=\"400\"}"), 1);
    cr_assert_eq(ts_metric(m, "lazyattn_generated_tokens_total"), generated);
    cr_assert_eq(ts_metric(m, "lazyattn_ttft_seconds_count"), 3);
    cr_assert_eq(ts_metric(m, "lazyattn_tpot_seconds_count"), 3);
    cr_assert_eq(ts_metric(m, "lazyattn_ttft_seconds_bucket{le=\"+Inf\"}"), 3);
    cr_assert_eq(ts_metric(m, "lazyattn_requests_finished_total{reason=\"length\"}"), 3);
    /* the document was computed once and reused twice: hit ratio 2/3 */
    double reused = ts_metric(m, "lazyattn_doc_tokens_reused_total");
    double computed = ts_metric(m, "lazyattn_doc_tokens_computed_total");
    cr_assert_gt(reused, 0);
    cr_assert_float_eq(ts_metric(m, "lazyattn_doc_hit_ratio"), reused / (reused + computed), 1e-12);
    la_engine_stats es;
    la_engine_get_stats(t.e, &es);
    cr_assert_eq(ts_metric(m, "lazyattn_kv_blocks_total"), es.kv_blocks_total);
    cr_assert_eq(ts_metric(m, "lazyattn_kv_blocks_pinned"), 0);
    cr_assert_gt(ts_metric(m, "lazyattn_kv_blocks_cached"), 0);
    cr_assert_eq(ts_metric(m, "lazyattn_kv_blocks_used"),
                 ts_metric(m, "lazyattn_kv_blocks_total") - ts_metric(m, "lazyattn_kv_blocks_free"));
    cr_assert_eq(ts_metric(m, "lazyattn_queue_depth"), 0);
    cr_assert_eq(ts_metric(m, "lazyattn_running_requests"), 0);
    cr_assert_eq(ts_metric(m, "lazyattn_engine_requests_total{outcome=\"ok\"}"), 3);
    /* where the steps went: forward took time, and batch_begin is a part of it */
    const double fwd = ts_metric(m, "lazyattn_engine_step_seconds_total{phase=\"forward\"}");
    const double bb = ts_metric(m, "lazyattn_engine_step_seconds_total{phase=\"batch_begin\"}");
    cr_assert(fwd > 0 && bb > 0 && bb <= fwd, "forward %g s, batch_begin %g s", fwd, bb);
    cr_assert_geq(ts_metric(m, "lazyattn_engine_step_seconds_total{phase=\"schedule\"}"), 0);
    la_http_resp_free(&r);
    ts_stop(&t);
}

/* n choices are n engine requests: /metrics' finish counter, latency histograms and the
 * engine's own request counter agree on them. */
Test(server_api, metrics_count_each_of_n_choices_once) {
    test_server t;
    ts_start(&t, NULL);
    cJSON *j = ts_post(t.port, "/v1/completions",
                       "{\"prompt\": \"metrics\", \"max_tokens\": 4, \"ignore_eos\": true, \"n\": 3,"
                       " \"temperature\": 1, \"seed\": 7}",
                       200);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 3);
    const int generated = (int)ts_num(j, "usage", "completion_tokens");
    cr_assert_eq(generated, 12);
    cJSON_Delete(j);
    cr_assert(ts_wait_stats(t.e, three_ok_and_idle, 10000));
    la_http_resp r;
    cr_assert(la_http_request(t.port, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
    const char *m = r.body;
    cr_assert_eq(ts_metric(m, "lazyattn_http_requests_total{route=\"/v1/completions\",code=\"200\"}"), 1);
    cr_assert_eq(ts_metric(m, "lazyattn_requests_finished_total{reason=\"length\"}"), 3);
    cr_assert_eq(ts_metric(m, "lazyattn_engine_requests_total{outcome=\"ok\"}"), 3);
    cr_assert_eq(ts_metric(m, "lazyattn_ttft_seconds_count"), 3);
    cr_assert_eq(ts_metric(m, "lazyattn_tpot_seconds_count"), 3);
    cr_assert_eq(ts_metric(m, "lazyattn_e2e_request_latency_seconds_count{model_name=\"tiny-f32-tied\"}"), 3);
    cr_assert_eq(ts_metric(m, "lazyattn_generated_tokens_total"), generated);
    la_http_resp_free(&r);
    ts_stop(&t);
}

static bool two_ok_and_idle(const la_engine_stats *s) {
    return s->requests_ok == 2 && s->n_running == 0 && s->kv_blocks_pinned == 0;
}

/* The document token cache in /metrics: two documents tokenized by the first request, found
 * again by the second in the other order (README "Document tokens"). */
Test(server_api, metrics_count_the_document_token_cache) {
    test_server t;
    ts_start(&t, NULL);
    const char *bodies[2] = {
        "{\"prompt\": \"q\", \"max_tokens\": 2, \"documents\": [\"Paris is in France.\", \"Rome is in Italy.\"]}",
        "{\"prompt\": \"q\", \"max_tokens\": 2, \"documents\": [\"Rome is in Italy.\", \"Paris is in France.\"]}"};
    for (int i = 0; i < 2; i++) cJSON_Delete(ts_post(t.port, "/v1/completions", bodies[i], 200));
    cr_assert(ts_wait_stats(t.e, two_ok_and_idle, 10000));
    la_http_resp r;
    cr_assert(la_http_request(t.port, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
    const char *m = r.body;
    cr_assert_eq(ts_metric(m, "lazyattn_doc_token_cache_misses_total"), 2);
    cr_assert_eq(ts_metric(m, "lazyattn_doc_token_cache_hits_total"), 2);
    cr_assert_eq(ts_metric(m, "lazyattn_doc_token_cache_entries"), 2);
    cr_assert_gt(ts_metric(m, "lazyattn_doc_token_cache_bytes"), 0);
    cr_assert_eq(ts_metric(m, "lazyattn_doc_token_cache_evictions_total"), 0);
    la_http_resp_free(&r);
    /* /tokenize looks documents up under its cache_salt, as a request does: a tenant's first
     * lookup of a text the unsalted requests tokenized misses, its second hits, and the
     * unsalted lookup hits the requests' entry */
    const char *tok[3] = {
        "{\"prompt\": \"q\", \"documents\": [\"Paris is in France.\"], \"cache_salt\": \"tenant-a\"}",
        "{\"prompt\": \"q\", \"documents\": [\"Paris is in France.\"], \"cache_salt\": \"tenant-a\"}",
        "{\"prompt\": \"q\", \"documents\": [\"Paris is in France.\"]}"};
    const int64_t want[3][2] = {{2, 3}, {3, 3}, {4, 3}}; /* hits, misses after each */
    for (int i = 0; i < 3; i++) {
        cJSON *j = ts_post(t.port, "/tokenize", tok[i], 200);
        cr_assert_gt(cJSON_GetObjectItem(j, "count")->valueint, 0);
        cJSON_Delete(j);
        la_engine_stats st;
        la_engine_get_stats(t.e, &st);
        cr_assert_eq(st.doc_token_cache_hits, want[i][0], "lookup %d: hits %lld", i, (long long)st.doc_token_cache_hits);
        cr_assert_eq(st.doc_token_cache_misses, want[i][1], "lookup %d: misses %lld", i,
                     (long long)st.doc_token_cache_misses);
    }
    ts_stop(&t);
}

/* POST /v1/documents runs one engine job per document; /metrics' request counters and
 * latency histograms describe client requests only, so the pre-warm adds nothing there. */
Test(server_api, prewarm_jobs_are_not_counted_as_requests_in_metrics) {
    test_server t;
    ts_start(&t, NULL);
    cJSON *j = ts_post(t.port, "/v1/documents", "{\"documents\": [\"doc A\", \"doc B\"]}", 200);
    cJSON_Delete(j);
    cr_assert(ts_wait_stats(t.e, two_ok_and_idle, 10000));
    la_http_resp r;
    cr_assert(la_http_request(t.port, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(r.status, 200);
    cr_assert_eq(ts_metric(r.body, "lazyattn_ttft_seconds_count"), 0);
    cr_assert_eq(ts_metric(r.body, "lazyattn_requests_finished_total{reason=\"length\"}"), 0);
    cr_assert_eq(ts_metric(r.body, "lazyattn_generated_tokens_total"), 0);
    cr_assert_gt(ts_metric(r.body, "lazyattn_doc_tokens_computed_total"), 0, "the documents were computed");
    la_http_resp_free(&r);
    ts_stop(&t);
}
