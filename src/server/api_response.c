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
    cJSON_AddNumberToObject(x, "doc_tokens_host", (double)st->doc_tokens_host);
    cJSON_AddNumberToObject(x, "doc_tokens_disk", (double)st->doc_tokens_disk);
    cJSON_AddNumberToObject(x, "doc_tokens_shared", (double)st->doc_tokens_shared);
    cJSON_AddNumberToObject(x, "doc_tokens_recomputed", (double)st->doc_tokens_recomputed);
    cJSON_AddNumberToObject(x, "doc_tokens_probed", (double)st->doc_tokens_probed);
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

/* ---- logprobs ----------------------------------------------------------------------- */

/* A token's bytes, and its text as valid UTF-8 (invalid sequences: U+FFFD). */
static cJSON *token_string(const la_engine *e, int32_t id, char *bytes, int64_t *n_bytes) {
    int64_t n = la_engine_token_bytes(e, id, bytes, 256);
    if (n < 0) n = 0;
    if (n > 256) n = 256;
    *n_bytes = n;
    char out[256 * 3 + 1];
    size_t k = 0;
    for (size_t i = 0; i < (size_t)n;) {
        size_t bad = la_api_utf8_invalid_at(bytes + i, (size_t)n - i);
        memcpy(out + k, bytes + i, bad);
        k += bad;
        i += bad;
        if (i < (size_t)n) {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    out[k] = '\0';
    return cJSON_CreateString(out);
}

static size_t code_points(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* {"token", "logprob", "bytes"} of one token. */
static cJSON *chat_entry(const la_engine *e, int32_t id, float lp) {
    char bytes[256];
    int64_t n;
    cJSON *o = cJSON_CreateObject();
    cJSON *tok = token_string(e, id, bytes, &n);
    if (!o || !tok) {
        cJSON_Delete(o);
        cJSON_Delete(tok);
        return NULL;
    }
    cJSON_AddItemToObject(o, "token", tok);
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (int64_t i = 0; b && i < n; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)bytes[i]));
    return o;
}

static cJSON *chat_logprobs(const la_api_reply *r, const la_api_choice *ch) {
    cJSON *o = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(o, "content");
    for (int32_t i = 0; content && i < ch->n_lps; i++) {
        const la_api_lp *lp = &ch->lps[i];
        cJSON *e = chat_entry(r->engine, lp->token, lp->logprob);
        if (!e) break;
        cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int32_t k = 0; tops && k < lp->n_top; k++) cJSON_AddItemToArray(tops, chat_entry(r->engine, lp->top_ids[k], lp->top_lps[k]));
        cJSON_AddItemToArray(content, e);
    }
    cJSON_AddNullToObject(o, "refusal");
    return o;
}

static cJSON *completion_logprobs(const la_api_reply *r, const la_api_choice *ch) {
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    if (!tokens || !lps || !tops || !offs) return o;
    int64_t off = ch->text_offset;
    char bytes[256];
    int64_t n;
    for (int32_t i = 0; i < ch->n_lps; i++) {
        const la_api_lp *lp = &ch->lps[i];
        cJSON *tok = token_string(r->engine, lp->token, bytes, &n);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        if (tok) off += (int64_t)code_points(tok->valuestring);
        cJSON_AddItemToArray(tokens, tok);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp->logprob));
        cJSON *d = cJSON_CreateObject();
        bool has_sampled = false;
        for (int32_t k = 0; d && k < lp->n_top; k++) {
            cJSON *t = token_string(r->engine, lp->top_ids[k], bytes, &n);
            if (t && !cJSON_GetObjectItemCaseSensitive(d, t->valuestring))
                cJSON_AddNumberToObject(d, t->valuestring, lp->top_lps[k]);
            has_sampled |= lp->top_ids[k] == lp->token;
            cJSON_Delete(t);
        }
        if (d && !has_sampled && tok && !cJSON_GetObjectItemCaseSensitive(d, tok->valuestring))
            cJSON_AddNumberToObject(d, tok->valuestring, lp->logprob);
        cJSON_AddItemToArray(tops, d);
    }
    return o;
}

static void add_logprobs(cJSON *c, const la_api_reply *r, const la_api_choice *ch) {
    if (!r->logprobs) {
        cJSON_AddNullToObject(c, "logprobs");
        return;
    }
    cJSON *lp = r->kind == LA_API_CHAT ? chat_logprobs(r, ch) : completion_logprobs(r, ch);
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    else cJSON_AddNullToObject(c, "logprobs");
}

/* ---- responses and chunks ---------------------------------------------------------------- */

char *la_api_response_json(const la_api_reply *r, const la_api_choice *choices, int32_t n_choices,
                           const la_request_stats *st) {
    cJSON *o = envelope(r, false);
    if (!o) return NULL;
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    for (int32_t i = 0; arr && i < n_choices; i++) {
        const la_api_choice *ch = &choices[i];
        cJSON *c = cJSON_CreateObject();
        cJSON *str = string_n(ch->text ? ch->text : "", ch->text ? ch->text_len : 0);
        if (!c || !str) {
            cJSON_Delete(c);
            cJSON_Delete(str);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToArray(arr, c);
        cJSON_AddNumberToObject(c, "index", ch->index);
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
        add_logprobs(c, r, ch);
        add_finish(c, ch->why);
    }
    add_usage(o, st);
    add_extension(o, r, st);
    return finish_print(o, false);
}

char *la_api_chunk_sse(const la_api_reply *r, bool role, const la_api_choice *ch, const la_request_stats *st) {
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
    cJSON_AddNumberToObject(c, "index", ch->index);
    cJSON *str = ch->text || role ? string_n(ch->text ? ch->text : "", ch->text ? ch->text_len : 0) : NULL;
    if (r->kind == LA_API_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (d && role) cJSON_AddStringToObject(d, "role", "assistant");
        if (d && str) cJSON_AddItemToObject(d, "content", str);
        else cJSON_Delete(str);
    } else {
        if (str) cJSON_AddItemToObject(c, "text", str);
        else cJSON_AddStringToObject(c, "text", "");
    }
    if (ch->n_lps > 0) add_logprobs(c, r, ch);
    else cJSON_AddNullToObject(c, "logprobs");
    add_finish(c, ch->why);
    if (r->include_usage) cJSON_AddNullToObject(o, "usage");
    if (st) add_extension(o, r, st);
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

int64_t la_api_lp_code_points(const la_engine *e, const la_api_lp *lps, int32_t n) {
    int64_t total = 0;
    char bytes[256];
    int64_t nb;
    for (int32_t i = 0; i < n; i++) {
        cJSON *t = token_string(e, lps[i].token, bytes, &nb);
        if (t) total += (int64_t)code_points(t->valuestring);
        cJSON_Delete(t);
    }
    return total;
}

cJSON *la_api_token_string(const la_engine *e, int32_t id) {
    char bytes[256];
    int64_t n;
    return token_string(e, id, bytes, &n);
}
