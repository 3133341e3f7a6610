/* Response JSON of the OpenAI-compatible API (api_response.h). */
#include "server/api_response.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

const char la_api_sse_done[] = "data: [DONE]\n\n";

const char *la_api_finish_name(la_finish_reason why) {
    if (why == LA_FINISH_STOP) return "stop";
    if (why == LA_FINISH_LENGTH) return "length";
    return NULL;
}

/* A JSON string of len bytes (text may lack a NUL at len). */
static cJSON *string_n(const char *text, size_t len) {
    char *tmp = malloc(len + 1);
    if (!tmp) return NULL;
    memcpy(tmp, text, len);
    tmp[len] = '\0';
    cJSON *s = cJSON_CreateString(tmp);
    free(tmp);
    return s;
}

static void add_usage(cJSON *o, const la_request_stats *st) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    if (!u) return;
    cJSON_AddNumberToObject(u, "prompt_tokens", st->n_prompt_tokens);
    cJSON_AddNumberToObject(u, "completion_tokens", st->n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)st->n_prompt_tokens + st->n_generated);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    if (d)
        cJSON_AddNumberToObject(d, "cached_tokens",
                                (double)(st->doc_tokens_reused + st->prefix_tokens_reused));
}

static void add_extension(cJSON *o, const la_api_reply *r, const la_request_stats *st) {
    cJSON *x = cJSON_AddObjectToObject(o, "lazyattn");
    if (!x) return;
    cJSON_AddStringToObject(x, "method", r->method);
    cJSON_AddNumberToObject(x, "ttft_ms", st->ttft_ms);
    cJSON_AddNumberToObject(x, "tpot_ms", st->tpot_ms);
    cJSON_AddNumberToObject(x, "queue_ms", st->queue_ms);
    cJSON_AddNumberToObject(x, "e2e_ms", st->e2e_ms);
    cJSON_AddNumberToObject(x, "doc_tokens", st->n_doc_tokens);
    cJSON_AddNumberToObject(x, "doc_tokens_reused", (double)st->doc_tokens_reused);
    cJSON_AddNumberToObject(x, "doc_tokens_computed", (double)st->doc_tokens_computed);
    cJSON_AddNumberToObject(x, "prefix_tokens_reused", (double)st->prefix_tokens_reused);
    cJSON_AddNumberToObject(x, "preemptions", st->n_preemptions);
}

static cJSON *envelope(const la_api_reply *r, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "id", r->id);
    const char *object = r->kind == LA_API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                : "text_completion";
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddNullToObject(o, "system_fingerprint");
    return o;
}

static void add_finish(cJSON *choice, la_finish_reason why) {
    const char *f = la_api_finish_name(why);
    if (f) cJSON_AddStringToObject(choice, "finish_reason", f);
    else cJSON_AddNullToObject(choice, "finish_reason");
}

/* Print o (deleted here) as JSON, or as an SSE event when sse. */
static char *finish_print(cJSON *o, bool sse) {
    if (!o) return NULL;
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!json || !sse) return json;
    size_t n = strlen(json);
    char *ev = malloc(n + 9);
    if (ev) {
        memcpy(ev, "data: ", 6);
        memcpy(ev + 6, json, n);
        memcpy(ev + 6 + n, "\n\n", 3);
    }
    free(json);
    return ev;
}

char *la_api_response_json(const la_api_reply *r, const char *text, size_t text_len,
                           la_finish_reason why, const la_request_stats *st) {
    cJSON *o = envelope(r, false);
    if (!o) return NULL;
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON *str = string_n(text ? text : "", text ? text_len : 0);
    if (!choices || !c || !str) {
        cJSON_Delete(c);
        cJSON_Delete(str);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->kind == LA_API_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        if (m) {
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddItemToObject(m, "content", str);
        } else {
            cJSON_Delete(str);
        }
    } else {
        cJSON_AddItemToObject(c, "text", str);
    }
    cJSON_AddNullToObject(c, "logprobs");
    add_finish(c, why);
    add_usage(o, st);
    add_extension(o, r, st);
    return finish_print(o, false);
}

char *la_api_chunk_sse(const la_api_reply *r, bool role, const char *text, size_t text_len,
                       la_finish_reason why, const la_request_stats *st) {
    cJSON *o = envelope(r, true);
    if (!o) return NULL;
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    if (!choices || !c) {
        cJSON_Delete(c);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *str = text || role ? string_n(text ? text : "", text ? text_len : 0) : NULL;
    if (r->kind == LA_API_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (d && role) cJSON_AddStringToObject(d, "role", "assistant");
        if (d && str) cJSON_AddItemToObject(d, "content", str);
        else cJSON_Delete(str);
    } else {
        if (str) cJSON_AddItemToObject(c, "text", str);
        else cJSON_AddStringToObject(c, "text", "");
    }
    cJSON_AddNullToObject(c, "logprobs");
    add_finish(c, why);
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    if (why != LA_FINISH_NONE && st) add_extension(o, r, st);
    return finish_print(o, true);
}

char *la_api_usage_chunk_sse(const la_api_reply *r, const la_request_stats *st) {
    cJSON *o = envelope(r, true);
    if (!o) return NULL;
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, st);
    add_extension(o, r, st);
    return finish_print(o, true);
}
