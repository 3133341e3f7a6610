/* Acceptance 1 of issue 21: a walk of the request field table (src/server/api_fields.c) on
 * the bundled model over HTTP. Every refused field is answered 400 unsupported_parameter
 * naming it; every neutral field is accepted with its neutral value (the output equals
 * the control's) and refused with another; every implemented field has a check below that
 * asserts its effect against a control request differing only in that field (a field of
 * the table without a check fails the walk). The README's "Request fields" table must be
 * the code's table. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_fields.h"
#include "server_util.h"

#define RAG_TINY "models/rag-tiny"
#define INVALID "invalid_request_error"

/* A chat question the model answers in a few tokens, and a prompt it loops on. */
#define CHAT_Q                                                                                            \
    "\"messages\": [{\"role\": \"user\", \"content\": \"Where was Elkrak Avoltrax born?\"}], \"documents\":" \
    " [{\"title\": \"Elkrak Avoltrax\", \"text\": \"Elkrak Avoltrax (born 3 September 1972 in Chas, "     \
    "Wirnor) is a cinematographer.\"}]"
#define LOOP CHAT_Q ", \"max_tokens\": 40, \"ignore_eos\": true"
#define COMP_P "\"prompt\": \"The quick brown fox\", \"max_tokens\": 12, \"ignore_eos\": true"

static void rag_tiny(la_engine_options *eo, la_server_options *so) {
    (void)so;
    eo->model_dir = RAG_TINY;
}

static int g_port;
static la_engine *g_engine;

/* POST {fmt...} to path, expecting status. */
static cJSON *post(const char *path, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static cJSON *post(const char *path, int status, const char *fmt, ...) {
    char body[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    return ts_post(g_port, path, body, status);
}

static const cJSON *choice(const cJSON *j, int i) {
    return cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), i);
}

static const char *text_of(const cJSON *j, int i) {
    const cJSON *c = choice(j, i);
    const cJSON *t = cJSON_GetObjectItem(c, "text");
    if (!t) t = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content");
    cr_assert(cJSON_IsString(t), "no text in choice %d", i);
    return t->valuestring;
}

static const char *finish_of(const cJSON *j, int i) { return ts_str(choice(j, i), "finish_reason", NULL); }
static double completion_tokens(const cJSON *j) { return ts_num(j, "usage", "completion_tokens"); }

/* The text of one request: the chat question (chat) or the completion prompt, plus extra. */
static char *gen_text(bool chat, const char *extra) {
    cJSON *j = chat ? post("/v1/chat/completions", 200, "{" CHAT_Q "%s%s}", extra[0] ? ", " : "", extra)
                    : post("/v1/completions", 200, "{" COMP_P "%s%s}", extra[0] ? ", " : "", extra);
    char *t = strdup(text_of(j, 0));
    cJSON_Delete(j);
    return t;
}

/* How often the control's most repeated piece of text (one token's) shows up: the loop
 * prompt repeats "ia" in the control. */
static int count_sub(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
    return n;
}

/* ---- the checks of implemented fields ------------------------------------------------- */

static void check_model(void) {
    cJSON_Delete(post("/v1/completions", 200, "{" COMP_P ", \"model\": \"rag-tiny\"}"));
    cJSON *j = post("/v1/completions", 404, "{" COMP_P ", \"model\": \"gpt-4\"}");
    ts_check_error(j, INVALID, "model", "model_not_found");
    cJSON_Delete(j);
}

static void check_max_tokens(void) {
    cJSON *j = post("/v1/completions", 200, "{\"prompt\": \"The quick brown fox\", \"ignore_eos\": true, \"max_tokens\": 3}");
    cr_assert_eq(completion_tokens(j), 3);
    cJSON_Delete(j);
    j = post("/v1/completions", 200, "{\"prompt\": \"The quick brown fox\", \"ignore_eos\": true}");
    cr_assert_eq(completion_tokens(j), 16, "the control: OpenAI's default 16");
    cJSON_Delete(j);
}

static void check_max_completion_tokens(void) {
    cJSON *j = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"ignore_eos\": true, \"max_completion_tokens\": 5}");
    cr_assert_eq(completion_tokens(j), 5);
    cJSON_Delete(j);
    /* beside max_tokens: the same value is one length, two values are refused (neither ignored) */
    j = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"ignore_eos\": true, \"max_completion_tokens\": 4, \"max_tokens\": 4}");
    cr_assert_eq(completion_tokens(j), 4);
    cJSON_Delete(j);
    j = post("/v1/chat/completions", 400, "{" CHAT_Q ", \"max_completion_tokens\": 5, \"max_tokens\": 3}");
    ts_check_error(j, INVALID, "max_tokens", "invalid_value");
    cJSON_Delete(j);
}

static void check_temperature(void) {
    char *g = gen_text(false, ""), *t = gen_text(false, "\"temperature\": 1.5, \"seed\": 3");
    cr_assert_str_neq(g, t, "temperature samples");
    free(g), free(t);
}

/* A cut that leaves one candidate makes a hot sampler greedy. */
static void greedy_under(const char *cut) {
    char extra[128];
    snprintf(extra, sizeof extra, "\"temperature\": 1.5, \"seed\": 3, %s", cut);
    char *g = gen_text(false, ""), *hot = gen_text(false, "\"temperature\": 1.5, \"seed\": 3"), *c = gen_text(false, extra);
    cr_assert_str_neq(g, hot);
    cr_assert_str_eq(g, c, "%s: greedy", cut);
    free(g), free(hot), free(c);
}
static void check_top_p(void) { greedy_under("\"top_p\": 0.0001"); }
static void check_top_k(void) { greedy_under("\"top_k\": 1"); }
static void check_min_p(void) { greedy_under("\"min_p\": 0.999"); }

static void check_n(void) {
    cJSON *j = post("/v1/completions", 200, "{" COMP_P ", \"n\": 3}");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 3);
    for (int i = 1; i < 3; i++) cr_assert_str_eq(text_of(j, 0), text_of(j, i), "greedy choices are equal");
    cr_assert_eq(completion_tokens(j), 36, "usage counts every choice");
    cJSON *a = post("/v1/completions", 200, "{" COMP_P ", \"n\": 3, \"temperature\": 1, \"seed\": 42}");
    cJSON *b = post("/v1/completions", 200, "{" COMP_P ", \"n\": 3, \"temperature\": 1, \"seed\": 42}");
    for (int i = 0; i < 3; i++) cr_assert_str_eq(text_of(a, i), text_of(b, i), "choice %d is reproducible", i);
    cr_assert(strcmp(text_of(a, 0), text_of(a, 1)) || strcmp(text_of(a, 1), text_of(a, 2)), "sampled choices differ");
    cJSON_Delete(j), cJSON_Delete(a), cJSON_Delete(b);
}

static void check_best_of(void) {
    cJSON_Delete(post("/v1/completions", 200, "{" COMP_P ", \"n\": 2, \"best_of\": 2}"));
    cJSON *j = post("/v1/completions", 400, "{" COMP_P ", \"best_of\": 3}");
    ts_check_error(j, INVALID, "best_of", "unsupported_parameter");
    cJSON_Delete(j);
}

static void check_seed(void) {
    /* 2^63 + 1 and 2^63 + 3 are one double: read as text they are two seeds */
    char *a = gen_text(false, "\"temperature\": 1, \"seed\": 9223372036854775809");
    char *b = gen_text(false, "\"temperature\": 1, \"seed\": 9223372036854775811");
    char *c = gen_text(false, "\"temperature\": 1, \"seed\": 9223372036854775809");
    cr_assert_str_neq(a, b, "seeds above 2^53 stay apart");
    cr_assert_str_eq(a, c, "a seed reproduces");
    free(a), free(b), free(c);
    /* without a seed every request draws its own: four hot samples are not all one text */
    char *u[4];
    for (int i = 0; i < 4; i++) u[i] = gen_text(false, "\"temperature\": 2");
    cr_assert(strcmp(u[0], u[1]) || strcmp(u[0], u[2]) || strcmp(u[0], u[3]), "unseeded samples all equal: %s", u[0]);
    for (int i = 0; i < 4; i++) free(u[i]);
    cJSON *j = post("/v1/completions", 400, "{" COMP_P ", \"seed\": 18446744073709551616}");
    ts_check_error(j, INVALID, "seed", "invalid_value");
    cJSON_Delete(j);
}

static void check_stop(void) {
    char *g = gen_text(false, "");
    char stop[8];
    snprintf(stop, sizeof stop, "%.3s", g + 4);
    char extra[64];
    snprintf(extra, sizeof extra, "\"stop\": [\"%s\"]", stop);
    cJSON *j = post("/v1/completions", 200, "{" COMP_P ", %s}", extra);
    cr_assert_str_eq(finish_of(j, 0), "stop");
    cr_assert(!strstr(text_of(j, 0), stop) && !strncmp(g, text_of(j, 0), strlen(text_of(j, 0))), "cut before '%s'", stop);
    snprintf(extra, sizeof extra, "\"stop\": [\"%s\"], \"%%s\": true", stop);
    for (int k = 0; k < 2; k++) { /* the stop string stays */
        char ex[128];
        snprintf(ex, sizeof ex, extra, k ? "no_stop_trim" : "include_stop_str_in_output");
        char *kept = gen_text(false, ex);
        size_t n = strlen(kept);
        cr_assert(n >= 3 && !strcmp(kept + n - strlen(stop), stop), "ends with the stop string: '%s'", kept);
        free(kept);
    }
    cJSON_Delete(j);
    free(g);
}

static void check_include_stop(void) { check_stop(); }

static void check_stream(void) {
    char *g = gen_text(false, "");
    la_http_resp r;
    const char *body = "{" COMP_P ", \"stream\": true, \"stream_options\": {\"include_usage\": true}}";
    cr_assert(la_http_request(g_port, "POST", "/v1/completions", body, strlen(body), NULL, &r) == 0);
    int n = 0;
    char **ev = la_sse_events(r.body, &n);
    char text[4096] = "";
    bool usage = false;
    for (int i = 0; i < n; i++) {
        cJSON *c = cJSON_Parse(ev[i]);
        if (c && cJSON_GetArraySize(cJSON_GetObjectItem(c, "choices")) > 0)
            strncat(text, text_of(c, 0), sizeof text - strlen(text) - 1);
        if (c && cJSON_IsObject(cJSON_GetObjectItem(c, "usage"))) usage = true;
        cJSON_Delete(c);
        free(ev[i]);
    }
    free(ev);
    cr_assert_str_eq(text, g, "the stream's text is the control's");
    cr_assert(usage, "include_usage: a usage chunk");
    cr_assert(strstr(r.body, "data: [DONE]"));
    la_http_resp_free(&r);
    free(g);
    cJSON *j = post("/v1/completions", 400, "{" COMP_P ", \"stream_options\": {\"include_usage\": true}}");
    ts_check_error(j, INVALID, "stream_options", "invalid_value");
    cJSON_Delete(j);
}

static void penalty_breaks_loop(const char *field, double value) {
    cJSON *c = post("/v1/chat/completions", 200, "{" LOOP "}");
    cJSON *p = post("/v1/chat/completions", 200, "{" LOOP ", \"%s\": %g}", field, value);
    int loop = count_sub(text_of(c, 0), "ia"), after = count_sub(text_of(p, 0), "ia");
    cr_assert_geq(loop, 20, "the control loops: %s", text_of(c, 0));
    cr_assert_lt(after, loop / 2, "%s breaks the loop: %s", field, text_of(p, 0));
    cJSON_Delete(c), cJSON_Delete(p);
    cJSON *bad = post("/v1/chat/completions", 400, "{" LOOP ", \"%s\": 2.5}", field);
    ts_check_error(bad, INVALID, field, "invalid_value");
    cJSON_Delete(bad);
}
static void check_frequency_penalty(void) { penalty_breaks_loop("frequency_penalty", 2); }
static void check_presence_penalty(void) { penalty_breaks_loop("presence_penalty", 2); }
static void check_repetition_penalty(void) { penalty_breaks_loop("repetition_penalty", 2); }

/* The ids of text (no BOS) through /tokenize. */
static int tokenize(const char *text, int32_t *ids, int cap) {
    cJSON *j = post("/tokenize", 200, "{\"prompt\": \"%s\", \"add_special_tokens\": false}", text);
    int n = 0;
    for (const cJSON *t = cJSON_GetObjectItem(j, "tokens")->child; t && n < cap; t = t->next) ids[n++] = t->valueint;
    cJSON_Delete(j);
    return n;
}

static void check_logit_bias(void) {
    char *g = gen_text(false, "");
    int32_t ids[64];
    int n = tokenize(g, ids, 64);
    char extra[512] = "\"logit_bias\": {";
    bool first = true;
    for (int i = 0; i < n; i++) {
        bool seen = false; /* each token once: a name twice is not JSON the server takes */
        for (int k = 0; k < i; k++) seen |= ids[k] == ids[i];
        if (seen) continue;
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "%s\"%d\": -100", first ? "" : ", ", ids[i]);
        first = false;
    }
    strcat(extra, "}, \"logprobs\": 0");
    cJSON *j = post("/v1/completions", 200, "{" COMP_P ", %s}", extra);
    const cJSON *toks = cJSON_GetObjectItem(cJSON_GetObjectItem(choice(j, 0), "logprobs"), "tokens");
    for (const cJSON *t = toks->child; t; t = t->next) {
        int32_t got[8];
        int k = tokenize(t->valuestring, got, 8);
        for (int i = 0; i < n && k == 1; i++) cr_assert_neq(got[0], ids[i], "banned token '%s' appears", t->valuestring);
    }
    cJSON_Delete(j);
    free(g);
    j = post("/v1/completions", 400, "{" COMP_P ", \"logit_bias\": {\"99999\": 1}}");
    ts_check_error(j, INVALID, "logit_bias", "invalid_value");
    cJSON_Delete(j);
}

/* The engine's logits for the completion prompt (return_logits), greedy. */
static void engine_logits(la_test_gen *g) {
    la_request_params p;
    la_request_params_init(&p);
    p.prompt.text = "The quick brown fox";
    p.sampling.max_tokens = 12;
    p.sampling.ignore_eos = true;
    p.return_logits = true;
    memset(g, 0, sizeof *g);
    p.on_event = la_test_on_event;
    p.user = g;
    la_err err = {0};
    cr_assert(la_engine_submit(g_engine, &p, NULL, &err) == LA_OK, "%s", err.msg); /* the server steps it */
    for (int i = 0; i < 3000 && !g->done; i++) ts_sleep_ms(10);
    cr_assert(g->done);
}

static double log_softmax_at(const float *lg, int32_t V, int32_t t) {
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int32_t i = 0; i < V; i++) sum += exp(lg[i] - mx);
    return lg[t] - mx - log(sum);
}

static void check_logprobs_completions(void) {
    cJSON *j = post("/v1/completions", 200, "{" COMP_P ", \"logprobs\": 5}");
    const cJSON *lp = cJSON_GetObjectItem(choice(j, 0), "logprobs");
    const cJSON *tl = cJSON_GetObjectItem(lp, "token_logprobs"), *tops = cJSON_GetObjectItem(lp, "top_logprobs");
    cr_assert_eq(cJSON_GetArraySize(tl), 12);
    la_test_gen g;
    engine_logits(&g);
    for (int i = 0; i < 12; i++) {
        double want = log_softmax_at(g.logits + (size_t)i * g.n_vocab, g.n_vocab, g.tokens[i]);
        double got = cJSON_GetArrayItem(tl, i)->valuedouble;
        cr_assert(fabs(got - want) < 1e-4, "token %d: logprob %g, log-softmax of the engine's logits %g", i, got, want);
        const cJSON *d = cJSON_GetArrayItem(tops, i);
        cr_assert_geq(cJSON_GetArraySize(d), 5);
        double prev = 1;
        for (const cJSON *e = d->child; e; e = e->next) { /* greedy: the sampled token is the best */
            cr_assert_leq(e->valuedouble, prev + 1e-9, "top_logprobs sorted");
            cr_assert_leq(e->valuedouble, got + 1e-6);
            prev = e->valuedouble;
        }
    }
    la_test_gen_free(&g);
    cJSON_Delete(j);
}

static void check_logprobs_chat(void) {
    cJSON *j = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"logprobs\": true, \"top_logprobs\": 3}");
    const cJSON *content = cJSON_GetObjectItem(cJSON_GetObjectItem(choice(j, 0), "logprobs"), "content");
    cr_assert_eq(cJSON_GetArraySize(content), completion_tokens(j) - (strcmp(finish_of(j, 0), "stop") ? 0 : 1),
                 "one entry per token of the text (the eos that ended it has none)");
    char text[1024] = "";
    for (const cJSON *e = content->child; e; e = e->next) {
        strncat(text, ts_str(e, "token", NULL), sizeof text - strlen(text) - 1);
        const cJSON *tops = cJSON_GetObjectItem(e, "top_logprobs");
        cr_assert_eq(cJSON_GetArraySize(tops), 3);
        for (int k = 1; k < 3; k++)
            cr_assert_geq(ts_num(cJSON_GetArrayItem(tops, k - 1), "logprob", NULL), ts_num(cJSON_GetArrayItem(tops, k), "logprob", NULL));
        cr_assert_leq(ts_num(e, "logprob", NULL), 0);
    }
    cr_assert_str_eq(text, text_of(j, 0), "the tokens spell the text");
    cJSON_Delete(j);
    j = post("/v1/chat/completions", 400, "{" CHAT_Q ", \"top_logprobs\": 3}");
    ts_check_error(j, INVALID, "top_logprobs", "invalid_value");
    cJSON_Delete(j);
}
static void check_top_logprobs(void) { check_logprobs_chat(); }

static void check_response_format(void) {
    cJSON *j = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"response_format\": {\"type\": \"json_object\"}}");
    cJSON *v = cJSON_Parse(text_of(j, 0));
    cr_assert(cJSON_IsObject(v), "json_object: %s", text_of(j, 0));
    cJSON_Delete(v), cJSON_Delete(j);
    j = post("/v1/chat/completions", 400, "{" CHAT_Q ", \"response_format\": {\"type\": \"bogus\"}}");
    ts_check_error(j, INVALID, "response_format.type", "invalid_value");
    cJSON_Delete(j);
    j = post("/v1/chat/completions", 400,
             "{" CHAT_Q ", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\":"
             " {\"type\": \"string\", \"maxLength\": 3}}}}");
    ts_check_error(j, INVALID, "response_format.json_schema.schema.maxLength", "unsupported_parameter");
    cJSON_Delete(j);
    /* a stop string inside the value would cut it (a schema of one string, stop '"' gave '""') */
    j = post("/v1/chat/completions", 400,
             "{" CHAT_Q ", \"stop\": [\"\\\"\"], \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
             "{\"name\": \"x\", \"schema\": {\"type\": \"string\"}}}}");
    ts_check_error(j, INVALID, "stop", "unsupported_parameter");
    cJSON_Delete(j);
    /* stop_token_ids likewise (stop id 25, ':', gave '{"x"') */
    j = post("/v1/chat/completions", 400,
             "{" CHAT_Q ", \"stop_token_ids\": [25], \"response_format\": {\"type\": \"json_object\"}}");
    ts_check_error(j, INVALID, "stop_token_ids", "unsupported_parameter");
    cJSON_Delete(j);
    /* allowed ids the value cannot use: the request's mistake, a 400 naming the field (was a 500) */
    j = post("/v1/chat/completions", 400,
             "{" CHAT_Q ", \"allowed_token_ids\": [1, 2, 3], \"response_format\": {\"type\": \"json_object\"}}");
    ts_check_error(j, INVALID, "allowed_token_ids", "invalid_value");
    cJSON_Delete(j);
    /* the engine's refusal names its field too */
    j = post("/v1/chat/completions", 400,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2, \"response_format\": "
             "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {\"type\": \"object\", "
             "\"properties\": {\"answer\": {\"type\": \"string\"}}, \"required\": [\"answer\"]}}}}");
    ts_check_error(j, INVALID, "max_tokens", "invalid_value");
    cJSON_Delete(j);
}

/* A schema field (guided_json, json_schema) gives a value of the schema. */
static void schema_field(const char *field) {
    cJSON *j = post("/v1/chat/completions", 200,
                    "{" CHAT_Q ", \"max_tokens\": 60, \"%s\": {\"type\": \"object\", \"properties\": {\"born\": {\"type\": "
                    "\"string\"}, \"year\": {\"type\": \"integer\"}}, \"required\": [\"born\", \"year\"]}}",
                    field);
    cJSON *v = cJSON_Parse(text_of(j, 0));
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(v, "born")) && cJSON_IsNumber(cJSON_GetObjectItem(v, "year")),
              "%s: %s", field, text_of(j, 0));
    cJSON_Delete(v), cJSON_Delete(j);
}
static void check_guided_json(void) { schema_field("guided_json"); }
static void check_json_schema(void) { schema_field("json_schema"); }

static void check_echo(void) {
    cJSON *j = post("/v1/completions", 200, "{" COMP_P ", \"echo\": true}");
    char *g = gen_text(false, "");
    char want[1024];
    snprintf(want, sizeof want, "The quick brown fox%s", g);
    cr_assert_str_eq(text_of(j, 0), want);
    free(g);
    cJSON_Delete(j);
}

static void check_min_tokens(void) {
    cJSON *c = post("/v1/chat/completions", 200, "{" CHAT_Q "}");
    cJSON *m = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"min_tokens\": 12}");
    cr_assert_leq(completion_tokens(c), 4, "a short answer: %s", text_of(c, 0));
    cr_assert_geq(completion_tokens(m), 12);
    cJSON_Delete(c), cJSON_Delete(m);
}

static void check_ignore_eos(void) {
    cJSON *c = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"max_tokens\": 16}");
    cJSON *m = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"max_tokens\": 16, \"ignore_eos\": true}");
    cr_assert_lt(completion_tokens(c), 16);
    cr_assert_eq(completion_tokens(m), 16);
    cJSON_Delete(c), cJSON_Delete(m);
}

static void check_stop_token_ids(void) {
    cJSON *c = post("/v1/chat/completions", 200, "{" CHAT_Q "}");
    int32_t ids[16];
    int n = tokenize(text_of(c, 0), ids, 16);
    cr_assert_geq(n, 2);
    cJSON *s = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"stop_token_ids\": [%d]}", ids[1]);
    cr_assert_str_eq(finish_of(s, 0), "stop");
    cr_assert_eq(completion_tokens(s), 2, "the first token, then the stop id");
    cJSON_Delete(c), cJSON_Delete(s);
}

static void check_skip_special_tokens(void) {
    cJSON *c = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"max_tokens\": 12, \"ignore_eos\": true}");
    cJSON *k = post("/v1/chat/completions", 200,
                    "{" CHAT_Q ", \"max_tokens\": 12, \"ignore_eos\": true, \"skip_special_tokens\": false}");
    cr_assert(!strstr(text_of(c, 0), "<|"), "%s", text_of(c, 0));
    cr_assert(strstr(text_of(k, 0), "<|"), "special tokens appear: %s", text_of(k, 0));
    cJSON_Delete(c), cJSON_Delete(k);
}

static void check_allowed_token_ids(void) {
    int32_t ids[4];
    cr_assert_eq(tokenize(" Chas", ids, 4), 1);
    cJSON *j = post("/v1/completions", 200, "{" COMP_P ", \"allowed_token_ids\": [%d]}", ids[0]);
    char want[256] = "";
    for (int i = 0; i < 12; i++) strcat(want, " Chas");
    cr_assert_str_eq(text_of(j, 0), want);
    cJSON_Delete(j);
}

static void check_request_id(void) {
    cJSON *j = post("/v1/completions", 200, "{" COMP_P ", \"request_id\": \"abc-123\"}");
    cr_assert_str_eq(ts_str(j, "id", NULL), "cmpl-abc-123");
    cJSON_Delete(j);
}

static void check_add_special_tokens(void) {
    cJSON *c = post("/v1/completions", 200, "{" COMP_P "}");
    cJSON *a = post("/v1/completions", 200, "{" COMP_P ", \"add_special_tokens\": false}");
    cr_assert_eq(ts_num(a, "usage", "prompt_tokens"), ts_num(c, "usage", "prompt_tokens") - 1, "no BOS");
    cJSON_Delete(c), cJSON_Delete(a);
}

static void check_cache_salt(void) {
    const char *req = "{" CHAT_Q ", \"max_tokens\": 2, \"cache_salt\": \"%s\"}";
    cJSON_Delete(post("/v1/chat/completions", 200, req, "tenant-a"));
    cJSON *same = post("/v1/chat/completions", 200, req, "tenant-a");
    cJSON *other = post("/v1/chat/completions", 200, req, "tenant-b");
    cr_assert_gt(ts_num(same, "lazyattn", "doc_tokens_reused"), 0);
    cr_assert_eq(ts_num(other, "lazyattn", "doc_tokens_reused"), 0, "another tenant shares nothing: %s", cJSON_PrintUnformatted(other));
    cJSON_Delete(same), cJSON_Delete(other);
}

static void check_documents(void) {
    cJSON *d = post("/v1/chat/completions", 200, "{" CHAT_Q "}");
    cJSON *n = post("/v1/chat/completions", 200,
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"Where was Elkrak Avoltrax born?\"}]}");
    cr_assert_gt(ts_num(d, "lazyattn", "doc_tokens"), 0);
    cr_assert_str_neq(text_of(d, 0), text_of(n, 0));
    cJSON_Delete(d), cJSON_Delete(n);
}

static void check_method(void) {
    cJSON *j = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"method\": \"recompute\"}");
    cr_assert_str_eq(ts_str(j, "lazyattn", "method"), "recompute");
    cJSON_Delete(j);
}

static void check_prompt(void) {
    char *a = gen_text(false, ""), *b = gen_text(true, "\"max_tokens\": 12, \"ignore_eos\": true");
    cr_assert_str_neq(a, b);
    free(a), free(b);
    cJSON *j = post("/v1/completions", 200, "{\"prompt\": [[5, 6, 7]], \"max_tokens\": 2}");
    cr_assert_eq(ts_num(j, "usage", "prompt_tokens"), 4, "token ids, after BOS");
    cJSON_Delete(j);
}

/* recovery (README "Recovery"): the one document after the preamble has N of its tokens
 * recomputed in context, on chat and on completions with documents; without it none */
static void check_recompute_first(void) {
    cJSON *c = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"max_tokens\": 2, \"recompute_first\": 4}");
    cJSON *p = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"max_tokens\": 2}");
    cJSON *k = post("/v1/completions", 200,
                    "{" COMP_P ", \"documents\": [\"one document\", \"and another one\"], \"recompute_first\": 2}");
    cr_assert_eq(ts_num(c, "lazyattn", "doc_tokens_recomputed"), 4);
    cr_assert_eq(ts_num(p, "lazyattn", "doc_tokens_recomputed"), 0);
    cr_assert_gt(ts_num(k, "lazyattn", "doc_tokens_recomputed"), 0);
    cJSON_Delete(c), cJSON_Delete(p), cJSON_Delete(k);
}

/* selected recovery: every token of the documents after the first is probed and
 * round(R x that count) recomputed, on chat and on completions with documents */
static void check_recompute_ratio(void) {
    cJSON *c = post("/v1/chat/completions", 200, "{" CHAT_Q ", \"max_tokens\": 2, \"recompute_ratio\": 0.5}");
    cJSON *k = post("/v1/completions", 200,
                    "{" COMP_P ", \"documents\": [\"one document\", \"and another one\"], \"recompute_ratio\": 1}");
    const double probed = ts_num(c, "lazyattn", "doc_tokens_probed");
    cr_assert_gt(probed, 0);
    cr_assert_eq(ts_num(c, "lazyattn", "doc_tokens_recomputed"), (double)(int64_t)(0.5 * probed + 0.5));
    cr_assert_gt(ts_num(k, "lazyattn", "doc_tokens_probed"), 0);
    cr_assert_eq(ts_num(k, "lazyattn", "doc_tokens_recomputed"), ts_num(k, "lazyattn", "doc_tokens_probed"));
    /* a value just past the range is named as sent, not rounded into it */
    cJSON *e = post("/v1/chat/completions", 400, "{" CHAT_Q ", \"max_tokens\": 2, \"recompute_ratio\": 1.0000001}");
    const char *msg = ts_str(e, "error", "message");
    cr_assert(strstr(msg, "1.0000001 is outside [0, 1]"), "%s", msg);
    cJSON_Delete(c), cJSON_Delete(k), cJSON_Delete(e);
}

/* documents after the preamble (here BOS, document 0 of a completion): found again in any
 * order under it, and not the copies computed alone */
static void check_doc_context(void) {
#define DC_DOCS(a, b) "\"documents\": [\"" a "\", \"" b "\"]"
#define DC_X "the first of two documents here"
#define DC_Y "a second document that follows"
    cJSON *a = post("/v1/completions", 200, "{" COMP_P ", " DC_DOCS(DC_X, DC_Y) ", \"doc_context\": \"preamble\"}");
    cJSON *b = post("/v1/completions", 200, "{" COMP_P ", " DC_DOCS(DC_Y, DC_X) ", \"doc_context\": \"preamble\"}");
    cJSON *c = post("/v1/completions", 200, "{" COMP_P ", " DC_DOCS(DC_X, DC_Y) ", \"doc_context\": \"alone\"}");
    cJSON *d = post("/v1/completions", 200, "{" COMP_P ", " DC_DOCS(DC_Y, DC_X) "}");
#undef DC_DOCS
#undef DC_X
#undef DC_Y
    const double n = ts_num(a, "lazyattn", "doc_tokens_computed");
    cr_assert_gt(n, 0);
    cr_assert_eq(ts_num(b, "lazyattn", "doc_tokens_computed"), 0, "reordered under the same preamble: all found");
    cr_assert_eq(ts_num(c, "lazyattn", "doc_tokens_computed"), n, "alone: not the copies computed after the preamble");
    cr_assert_eq(ts_num(d, "lazyattn", "doc_tokens_computed"), 0, "the default is alone: found");
    cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(c), cJSON_Delete(d);
}

typedef struct check {
    const char *name;
    unsigned apis;
    void (*fn)(void);
} check;

static const check k_checks[] = {
    {"model", 3, check_model}, {"max_tokens", 3, check_max_tokens}, {"temperature", 3, check_temperature},
    {"top_p", 3, check_top_p}, {"n", 3, check_n}, {"seed", 3, check_seed}, {"stop", 3, check_stop},
    {"stream", 3, check_stream}, {"stream_options", 3, check_stream},
    {"frequency_penalty", 3, check_frequency_penalty}, {"presence_penalty", 3, check_presence_penalty},
    {"logit_bias", 3, check_logit_bias}, {"logprobs", 1, check_logprobs_completions},
    {"logprobs", 2, check_logprobs_chat}, {"top_logprobs", 2, check_top_logprobs},
    {"response_format", 3, check_response_format}, {"prompt", 1, check_prompt}, {"echo", 1, check_echo},
    {"messages", 2, check_documents},
    {"max_completion_tokens", 2, check_max_completion_tokens}, {"top_k", 3, check_top_k}, {"min_p", 3, check_min_p},
    {"repetition_penalty", 3, check_repetition_penalty}, {"min_tokens", 3, check_min_tokens},
    {"stop_token_ids", 3, check_stop_token_ids}, {"ignore_eos", 3, check_ignore_eos},
    {"include_stop_str_in_output", 3, check_include_stop}, {"no_stop_trim", 3, check_include_stop},
    {"skip_special_tokens", 3, check_skip_special_tokens}, {"allowed_token_ids", 3, check_allowed_token_ids},
    {"guided_json", 3, check_guided_json}, {"json_schema", 3, check_json_schema}, {"request_id", 3, check_request_id},
    {"add_special_tokens", 1, check_add_special_tokens}, {"cache_salt", 3, check_cache_salt},
    {"documents", 3, check_documents}, {"method", 3, check_method}, {"recompute_first", 3, check_recompute_first},
    {"recompute_ratio", 3, check_recompute_ratio}, {"doc_context", 3, check_doc_context},
};

static const check *find_check(const la_api_field *f) {
    for (size_t i = 0; i < sizeof k_checks / sizeof *k_checks; i++)
        if (!strcmp(k_checks[i].name, f->name) && (k_checks[i].apis & f->apis) == f->apis) return &k_checks[i];
    return NULL;
}

/* ---- the walk ------------------------------------------------------------------------------ */

/* A value of the field's neutral set (the first the README names) as JSON text. */
static void neutral_json(const la_api_field *f, char *out, size_t cap) {
    if (!strcmp(f->neutral, "any string")) snprintf(out, cap, "\"someone\"");
    else if (!strcmp(f->name, "best_of")) snprintf(out, cap, "1");
    else {
        snprintf(out, cap, "%s", f->neutral);
        char *comma = strstr(out, ", ");
        if (comma && out[0] != '[') *comma = '\0';
    }
}

/* A value the field's neutral predicate refuses. */
static const char *other_json(const la_api_field *f) {
    static const char *const cands[] = {"12345", "\"x-other\"", "[1]", "{\"a\": 1}", "true", "false"};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        cJSON *v = cJSON_Parse(cands[i]);
        bool neutral = f->is_neutral(v);
        cJSON_Delete(v);
        if (!neutral) return cands[i];
    }
    return NULL;
}

static void walk_field(const la_api_field *f, unsigned api) {
    bool chat = api == LA_FIELD_CHAT;
    const char *path = chat ? "/v1/chat/completions" : "/v1/completions";
    const char *base = chat ? CHAT_Q ", \"max_tokens\": 12, \"ignore_eos\": true" : COMP_P;
    if (f->status == LA_FIELD_REFUSED) {
        cJSON *j = post(path, 400, "{%s, \"%s\": 1}", base, f->name);
        ts_check_error(j, INVALID, f->name, "unsupported_parameter");
        cJSON_Delete(j);
        cJSON_Delete(post(path, 200, "{%s, \"%s\": null}", base, f->name)); /* null: absent */
    } else if (f->status == LA_FIELD_NEUTRAL) {
        char v[64];
        neutral_json(f, v, sizeof v);
        char *control = gen_text(chat, chat ? "\"max_tokens\": 12, \"ignore_eos\": true" : "");
        char extra[128];
        snprintf(extra, sizeof extra, "%s\"%s\": %s", chat ? "\"max_tokens\": 12, \"ignore_eos\": true, " : "", f->name, v);
        char *got = gen_text(chat, extra);
        cr_assert_str_eq(got, control, "%s = %s is neutral", f->name, v);
        free(control), free(got);
        if (!f->is_neutral) check_best_of(); /* the parser decides: best_of against n */
        const char *other = f->is_neutral ? other_json(f) : NULL;
        if (other) {
            cJSON *j = post(path, 400, "{%s, \"%s\": %s}", base, f->name, other);
            ts_check_error(j, INVALID, f->name, "unsupported_parameter");
            cJSON_Delete(j);
        }
    } else {
        const check *c = find_check(f);
        cr_assert(c, "implemented field '%s' (%s) has no check of its effect", f->name, chat ? "chat" : "completions");
        static bool ran[sizeof k_checks / sizeof *k_checks];
        if (!ran[c - k_checks]) c->fn(); /* a row for both endpoints: once */
        ran[c - k_checks] = true;
    }
}

Test(api_fields, every_field_of_the_table_does_what_the_table_says, .timeout = 900) {
    test_server t;
    ts_start(&t, rag_tiny);
    g_port = t.port;
    g_engine = t.e;
    size_t n;
    const la_api_field *fields = la_api_fields(&n);
    for (size_t i = 0; i < n; i++)
        for (unsigned api = 1; api <= 2; api++)
            if (fields[i].apis & api) walk_field(&fields[i], api);
    /* a name the table does not know */
    cJSON *j = post("/v1/completions", 400, "{" COMP_P ", \"foo\": 1}");
    ts_check_error(j, INVALID, "foo", "unknown_parameter");
    cJSON_Delete(j);
    /* nor a content part's: a client's cache_control is refused, a null one is absent */
    j = post("/v1/chat/completions", 400,
             "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\", "
             "\"cache_control\": {\"type\": \"ephemeral\"}}]}], \"max_tokens\": 2}");
    ts_check_error(j, INVALID, "messages[0].content[0].cache_control", "unknown_parameter");
    cJSON_Delete(j);
    cJSON_Delete(post("/v1/chat/completions", 200,
                      "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\", "
                      "\"cache_control\": null}]}], \"max_tokens\": 2}"));
    ts_stop(&t);
}

static void ignore_unknown(la_engine_options *eo, la_server_options *so) {
    rag_tiny(eo, so);
    so->ignore_unknown_fields = true;
}

Test(api_fields, ignore_unknown_fields_accepts_unknown_names_only) {
    test_server t;
    ts_start(&t, ignore_unknown);
    g_port = t.port;
    char *control = gen_text(false, "");
    char *got = gen_text(false, "\"foo\": 1, \"bar\": {\"x\": true}");
    cr_assert_str_eq(got, control);
    cJSON *j = post("/v1/completions", 400, "{" COMP_P ", \"guided_regex\": \"a+\"}"); /* refused stays refused */
    ts_check_error(j, INVALID, "guided_regex", "unsupported_parameter");
    cJSON_Delete(j);
    /* inside a document, and on /v1/documents and /tokenize, too: a RAG client's "id" */
    char *plain = gen_text(false, "\"documents\": [{\"title\": \"T\", \"text\": \"Paris is in France.\"}]");
    char *with_id = gen_text(false, "\"documents\": [{\"title\": \"T\", \"text\": \"Paris is in France.\", \"id\": 7}]");
    cr_assert_str_eq(with_id, plain);
    cJSON_Delete(post("/v1/documents", 200, "{\"documents\": [{\"text\": \"d\", \"id\": 7}], \"source\": \"crawl\"}"));
    cJSON_Delete(post("/tokenize", 200, "{\"prompt\": \"x\", \"documents\": [{\"text\": \"d\", \"url\": \"u\"}]}"));
    cJSON_Delete(post("/v1/chat/completions", 200,
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"ts\": 1}], \"max_tokens\": 2}"));
    cJSON_Delete(post("/v1/chat/completions", 200,
                      "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\", "
                      "\"zz\": 1}]}], \"max_tokens\": 2}"));
    cJSON_Delete(post("/detokenize", 200, "{\"tokens\": [1], \"foo\": 1}")); /* every route */
    free(control), free(got), free(plain), free(with_id);
    ts_stop(&t);
}

/* /v1/documents takes doc_context as a request does: "alone" pre-warms, "preamble" is refused
 * with its reason (documents after a preamble are not pre-warmed alone), null is absent;
 * without --ignore-unknown-fields a misspelt field or a document key is refused. */
Test(api_fields, prewarm_takes_doc_context_and_refuses_unknown_names) {
    test_server t;
    ts_start(&t, rag_tiny);
    g_port = t.port;
    cJSON_Delete(post("/v1/documents", 200, "{\"documents\": [\"doc A\"], \"doc_context\": \"alone\"}"));
    cJSON_Delete(post("/v1/documents", 200, "{\"documents\": [\"doc A\"], \"doc_context\": null, \"url\": null}"));
    cJSON *j = post("/v1/documents", 400, "{\"documents\": [\"doc A\"], \"doc_context\": \"preamble\"}");
    ts_check_error(j, INVALID, "doc_context", "invalid_value");
    cJSON_Delete(j);
    j = post("/v1/documents", 400, "{\"documents\": [{\"text\": \"doc A\", \"id\": 7}]}");
    ts_check_error(j, INVALID, "documents[0].id", "unknown_parameter");
    cJSON_Delete(j);
    ts_stop(&t);
}

/* The README's table lists the code's rows, in order, with the same status. */
Test(api_fields, the_readme_table_is_the_code_table) {
    char *path = la_test_path("README.md");
    FILE *f = fopen(path, "r");
    cr_assert(f, "README.md");
    char line[1024];
    size_t n, row = 0;
    const la_api_field *fields = la_api_fields(&n);
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "<!-- request-fields:begin -->")) in = true;
        else if (strstr(line, "<!-- request-fields:end -->")) in = false;
        else if (in && !strncmp(line, "| `", 3)) {
            cr_assert_lt(row, n, "README has more rows than the table: %s", line);
            const la_api_field *fd = &fields[row++];
            char want[256];
            const char *ep = fd->apis == 3 ? "both" : fd->apis == 1 ? "completions" : "chat";
            snprintf(want, sizeof want, "| `%s` | %s | %s | %s | ", fd->name, ep, la_api_field_status_name(fd->status),
                     fd->origin);
            cr_assert(!strncmp(line, want, strlen(want)), "README row %zu: %s, the code says %s", row, line, want);
        }
    }
    fclose(f);
    free(path);
    cr_assert_eq(row, n, "README lists %zu of the %zu fields", row, n);
}
