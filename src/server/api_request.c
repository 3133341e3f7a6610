/* Parsing the OpenAI-compatible request JSON into engine structs (api_request.h). */
#include "server/api_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "server/api_fields.h"
#include "server/api_parse.h"
#include "server/api_sampling.h"

/* ============================================================ UTF-8 ================= */

size_t la_api_utf8_invalid_at(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) k = 1;
        else if (c == 0xe0) k = 2, lo = 0xa0;
        else if (c == 0xed) k = 2, hi = 0x9f; /* no surrogates */
        else if (c >= 0xe1 && c <= 0xef) k = 2;
        else if (c == 0xf0) k = 3, lo = 0x90;
        else if (c >= 0xf1 && c <= 0xf3) k = 3;
        else if (c == 0xf4) k = 3, hi = 0x8f; /* <= U+10FFFF */
        else return i;
        if (i + k >= n) return i; /* truncated */
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t j = 2; j <= k; j++)
            if ((s[i + j] & 0xc0) != 0x80) return i;
        i += k + 1;
    }
    return n;
}

/* The helpers of api_parse.h under short names. */
typedef la_api_ctx ctx;
#define fail la_api_fail
#define field la_api_member
#define bad_type la_api_bad_type
#define is_integer la_api_is_integer
#define get_int la_api_get_int
#define get_number la_api_get_number
#define get_bool la_api_get_bool
#define get_string la_api_get_string

/* ============================================================ fields ================ */

/* A field of the request that no table or list knows, named param: LA_OK where
 * la_api_unknown_ignored lets it through (the caller skips it), else 400 unknown_parameter,
 * "Unrecognized <what>: '<param>'." (at most prec characters of param). check_fields,
 * only_fields and parse_messages call it. */
static la_status unknown_field(ctx *c, const la_api_limits *lim, const char *param, const char *what, int prec) {
    if (la_api_unknown_ignored(lim, param)) return LA_OK;
    return fail(c, LA_ERR_INVALID_ARG, param, "unknown_parameter", "Unrecognized %s: '%.*s'.", what, prec, param);
}

/* Every member of obj is one of known (NULL-terminated), else 400 unknown_parameter naming
 * it (prefix.name inside an object of the request, e.g. documents[0].txt): a misspelt field
 * is never ignored, unless the server accepts unknown fields (--ignore-unknown-fields:
 * reported once through on_unknown_field, as check_fields does). A null member counts as
 * absent. */
static la_status only_fields(ctx *c, const cJSON *obj, const char *prefix, const char *const known[],
                             const la_api_limits *lim) {
    for (const cJSON *m = obj->child; m; m = m->next) {
        bool ok = cJSON_IsNull(m);
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(m->string, known[i]);
        if (ok) continue;
        char param[96];
        snprintf(param, sizeof param, "%s%s%.64s", prefix ? prefix : "", prefix ? "." : "", m->string);
        LA_TRY(unknown_field(c, lim, param, "request argument supplied", (int)sizeof param));
    }
    return LA_OK;
}

static la_status parse_documents(ctx *c, const cJSON *root, const la_api_limits *lim,
                                 la_api_request *r, bool required) {
    const cJSON *v = field(root, "documents");
    if (!v) {
        if (required)
            return fail(c, LA_ERR_INVALID_ARG, "documents", "invalid_value",
                        "Missing required parameter: 'documents'.");
        return LA_OK;
    }
    if (!cJSON_IsArray(v)) return bad_type(c, "documents", v, "an array");
    int n = cJSON_GetArraySize(v);
    if (required && n == 0)
        return fail(c, LA_ERR_INVALID_ARG, "documents", "invalid_value",
                    "'documents' must not be empty.");
    if (n > lim->max_docs)
        return fail(c, LA_ERR_INVALID_ARG, "documents", "too_many_documents",
                    "Too many documents: %d, the limit is %d per request.", n, lim->max_docs);
    if (n == 0) return LA_OK;
    r->docs = calloc((size_t)n, sizeof(la_segment));
    if (!r->docs) return fail(c, LA_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    int i = 0;
    char param[64];
    for (const cJSON *d = v->child; d; d = d->next, i++) {
        snprintf(param, sizeof param, "documents[%d]", i);
        if (cJSON_IsString(d)) {
            if (!d->valuestring[0])
                return fail(c, LA_ERR_INVALID_ARG, param, "invalid_value", "'%s' must not be empty.", param);
            r->docs[i].text = d->valuestring;
        } else if (cJSON_IsObject(d)) {
            static const char *const doc_fields[] = {"title", "text", NULL};
            LA_TRY(only_fields(c, d, param, doc_fields, lim));
            const cJSON *text = field(d, "text"), *title = field(d, "title");
            snprintf(param, sizeof param, "documents[%d].text", i);
            if (!text)
                return fail(c, LA_ERR_INVALID_ARG, param, "invalid_value",
                            "Missing required parameter: '%s'.", param);
            if (!cJSON_IsString(text)) return bad_type(c, param, text, "a string");
            if (!text->valuestring[0])
                return fail(c, LA_ERR_INVALID_ARG, param, "invalid_value", "'%s' must not be empty.", param);
            r->docs[i].text = text->valuestring;
            if (title) {
                snprintf(param, sizeof param, "documents[%d].title", i);
                if (!cJSON_IsString(title)) return bad_type(c, param, title, "a string");
                /* an empty title: an untitled document */
                r->docs[i].title = title->valuestring[0] ? title->valuestring : NULL;
            }
        } else {
            return bad_type(c, param, d, "a string or an object {title, text}");
        }
    }
    r->params.docs = r->docs;
    r->params.n_docs = n;
    return LA_OK;
}

static la_status parse_method_salt(ctx *c, const cJSON *root, la_api_request *r) {
    const char *method = NULL, *salt = NULL;
    LA_TRY(get_string(c, root, "method", &method));
    if (method) {
        la_err e;
        if (la_method_parse(method, &r->params.method, &e) != LA_OK)
            return fail(c, LA_ERR_INVALID_ARG, "method", "invalid_value", "%s", e.msg);
    }
    LA_TRY(get_string(c, root, "cache_salt", &salt));
    if (salt && !salt[0]) /* "" would share the unsalted cache: a tenant id is never empty */
        return fail(c, LA_ERR_INVALID_ARG, "cache_salt", "invalid_value",
                    "'cache_salt' must not be empty (leave it out for no salt).");
    r->params.cache_salt = salt;
    int64_t n_first = -1;
    LA_TRY(get_int(c, root, "recompute_first", 0, INT32_MAX, &n_first, NULL));
    la_method m = r->params.method; /* the server's default: the engine says (400 too) */
    if (n_first > 0 && m != LA_METHOD_COUNT && !la_method_is_blockwise(m))
        return fail(c, LA_ERR_INVALID_ARG, "recompute_first", "invalid_value",
                    "'recompute_first' applies to the block-wise methods (lazy, block, mepic, block-ref): "
                    "%s computes every document in context already.", la_method_name(m));
    r->params.recompute_first = (int32_t)n_first;
    float ratio = -1.0f;
    LA_TRY(get_number(c, root, "recompute_ratio", 0.0, false, 1.0, &ratio));
    if (ratio > 0.0f && m != LA_METHOD_COUNT && !la_method_is_blockwise(m))
        return fail(c, LA_ERR_INVALID_ARG, "recompute_ratio", "invalid_value",
                    "'recompute_ratio' applies to the block-wise methods (lazy, block, mepic, block-ref): "
                    "%s computes every document in context already.", la_method_name(m));
    r->params.recompute_ratio = ratio;
    const char *dc = NULL;
    LA_TRY(get_string(c, root, "doc_context", &dc));
    if (dc) {
        la_err e;
        if (la_doc_context_parse(dc, &r->params.doc_context, &e) != LA_OK)
            return fail(c, LA_ERR_INVALID_ARG, "doc_context", "invalid_value", "%s", e.msg);
        if (r->params.doc_context == LA_DOC_CONTEXT_PREAMBLE && m != LA_METHOD_COUNT && m != LA_METHOD_LAZY &&
            m != LA_METHOD_BLOCK && m != LA_METHOD_MEPIC)
            return fail(c, LA_ERR_INVALID_ARG, "doc_context", "invalid_value",
                        "'doc_context' preamble applies to the methods that cache documents (lazy, block, mepic), "
                        "not %s.", la_method_name(m));
    }
    return LA_OK;
}

/* prompt: string | [string] | [int] | [[int]] (one prompt). */
static la_status parse_prompt(ctx *c, const cJSON *root, int32_t vocab, la_api_request *r) {
    const cJSON *v = field(root, "prompt");
    if (!v)
        return fail(c, LA_ERR_INVALID_ARG, "prompt", "invalid_value",
                    "Missing required parameter: 'prompt'.");
    if (cJSON_IsString(v)) {
        r->params.prompt.text = v->valuestring;
        return LA_OK;
    }
    if (!cJSON_IsArray(v)) return bad_type(c, "prompt", v, "a string or an array");
    int n = cJSON_GetArraySize(v);
    if (n == 0)
        return fail(c, LA_ERR_INVALID_ARG, "prompt", "invalid_value", "'prompt' must not be empty.");
    const cJSON *first = v->child;
    const cJSON *ids = NULL;
    if (cJSON_IsString(first) || cJSON_IsArray(first)) {
        if (n > 1)
            return fail(c, LA_ERR_INVALID_ARG, "prompt", "invalid_value",
                        "Only one prompt per request is supported (got %d).", n);
        if (cJSON_IsString(first)) {
            r->params.prompt.text = first->valuestring;
            return LA_OK;
        }
        ids = first;
    } else if (cJSON_IsNumber(first)) {
        ids = v;
    } else {
        return bad_type(c, "prompt", first, "a string or token ids");
    }
    int m = cJSON_GetArraySize(ids);
    if (m == 0)
        return fail(c, LA_ERR_INVALID_ARG, "prompt", "invalid_value", "'prompt' must not be empty.");
    r->prompt_ids = malloc(sizeof(int32_t) * (size_t)m);
    if (!r->prompt_ids) return fail(c, LA_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    int i = 0;
    for (const cJSON *t = ids->child; t; t = t->next, i++) {
        if (!is_integer(t) || t->valuedouble < 0 || t->valuedouble > INT32_MAX)
            return fail(c, LA_ERR_INVALID_ARG, "prompt", "invalid_value",
                        "Invalid token id at prompt[%d]: expected a non-negative integer.", i);
        if (vocab > 0 && t->valuedouble >= vocab)
            return fail(c, LA_ERR_INVALID_ARG, "prompt", "invalid_value",
                        "Invalid token id at prompt[%d]: %.0f is not in [0, %d).", i, t->valuedouble, (int)vocab);
        r->prompt_ids[i] = (int32_t)t->valuedouble;
    }
    r->params.prompt.ids = r->prompt_ids;
    r->params.prompt.n_ids = m;
    return LA_OK;
}

/* content: string | [{type: "text", text}]. The non-empty parts are joined with "\n" between
 * them, as vLLM renders a text-only parts list for a string chat template (one part: its
 * text as is). python/lazyattn/request.py's parse_content is the same rule. */
static la_status parse_content(ctx *c, const cJSON *v, int i, const la_api_limits *lim, la_api_request *r,
                               const char **out) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (!v)
        return fail(c, LA_ERR_INVALID_ARG, param, "invalid_value", "Missing required parameter: '%s'.",
                    param);
    if (cJSON_IsString(v)) {
        *out = v->valuestring;
        return LA_OK;
    }
    if (!cJSON_IsArray(v)) return bad_type(c, param, v, "a string or an array of content parts");
    size_t total = 0;
    int k = 0;
    for (const cJSON *p = v->child; p; p = p->next, k++) {
        snprintf(param, sizeof param, "messages[%d].content[%d]", i, k);
        if (!cJSON_IsObject(p)) return bad_type(c, param, p, "an object {type, text}");
        const cJSON *type = field(p, "type"), *text = field(p, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text"))
            return la_api_unsupported(c, param, "Only content parts of type 'text' are supported.");
        if (!cJSON_IsString(text)) return bad_type(c, param, text, "a string in 'text'");
        static const char *const known[] = {"type", "text", NULL};
        LA_TRY(only_fields(c, p, param, known, lim)); /* e.g. cache_control: never ignored */
        total += strlen(text->valuestring) + 1;
    }
    char *s = malloc(total + 1);
    LA_TRY(la_api_keep(c, r, s));
    size_t at = 0;
    for (const cJSON *p = v->child; p; p = p->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t n = strlen(t);
        if (!n) continue;
        if (at) s[at++] = '\n';
        memcpy(s + at, t, n);
        at += n;
    }
    s[at] = '\0';
    *out = s;
    return LA_OK;
}

static la_status parse_messages(ctx *c, const cJSON *root, const la_api_limits *lim, la_api_request *r) {
    const cJSON *v = field(root, "messages");
    if (!v)
        return fail(c, LA_ERR_INVALID_ARG, "messages", "invalid_value",
                    "Missing required parameter: 'messages'.");
    if (!cJSON_IsArray(v)) return bad_type(c, "messages", v, "an array");
    int n = cJSON_GetArraySize(v);
    if (n == 0)
        return fail(c, LA_ERR_INVALID_ARG, "messages", "invalid_value",
                    "'messages' must not be empty.");
    r->msgs = calloc((size_t)n, sizeof(la_chat_message));
    if (!r->msgs) return fail(c, LA_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    int i = 0;
    bool user = false;
    char param[64];
    for (const cJSON *m = v->child; m; m = m->next, i++) {
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return bad_type(c, param, m, "an object {role, content}");
        for (const cJSON *k = m->child; k; k = k->next) { /* nothing in a message is silently ignored */
            snprintf(param, sizeof param, "messages[%d].%.32s", i, k->string);
            if (!strcmp(k->string, "role") || !strcmp(k->string, "content") || cJSON_IsNull(k)) continue;
            if (!strcmp(k->string, "name") || !strcmp(k->string, "tool_calls") ||
                !strcmp(k->string, "tool_call_id") || !strcmp(k->string, "refusal") || !strcmp(k->string, "audio"))
                return la_api_unsupported(c, param, "'%s' is not supported: the chat template has no place for it.",
                                          param);
            LA_TRY(unknown_field(c, lim, param, "message field", (int)sizeof param));
        }
        const cJSON *role = field(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!role)
            return fail(c, LA_ERR_INVALID_ARG, param, "invalid_value",
                        "Missing required parameter: '%s'.", param);
        if (!cJSON_IsString(role)) return bad_type(c, param, role, "a string");
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system"; /* OpenAI's newer name for system */
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant"))
            return fail(c, LA_ERR_INVALID_ARG, param, "invalid_value",
                        "Invalid value for '%s': '%.64s' is not one of system, developer, user, "
                        "assistant.", param, rs);
        user |= !strcmp(rs, "user");
        r->msgs[i].role = rs;
        LA_TRY(parse_content(c, field(m, "content"), i, lim, r, &r->msgs[i].content));
    }
    if (!user)
        return fail(c, LA_ERR_INVALID_ARG, "messages", "invalid_value",
                    "'messages' must contain a user message.");
    r->params.messages = r->msgs;
    r->params.n_messages = n;
    return LA_OK;
}

static la_status parse_stop(ctx *c, const cJSON *root, const la_api_limits *lim, la_api_request *r) {
    const cJSON *v = field(root, "stop");
    if (!v) return LA_OK;
    int n = 1;
    if (cJSON_IsArray(v)) n = cJSON_GetArraySize(v);
    else if (!cJSON_IsString(v)) return bad_type(c, "stop", v, "a string or an array of strings");
    if (n > lim->max_stop)
        return fail(c, LA_ERR_INVALID_ARG, "stop", "invalid_value",
                    "At most %d stop sequences are supported (got %d).", lim->max_stop, n);
    if (n == 0) return LA_OK;
    r->stops = calloc((size_t)n, sizeof(char *));
    if (!r->stops) return fail(c, LA_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    int i = 0;
    for (const cJSON *s = cJSON_IsArray(v) ? v->child : v; s && i < n; s = s->next, i++) {
        if (!cJSON_IsString(s)) return bad_type(c, "stop", s, "a string");
        if (!s->valuestring[0])
            return fail(c, LA_ERR_INVALID_ARG, "stop", "invalid_value",
                        "Stop sequences must not be empty.");
        r->stops[i] = s->valuestring;
    }
    r->params.sampling.stop = (const char *const *)r->stops;
    r->params.sampling.n_stop = n;
    return LA_OK;
}

/* The table pass (api_fields.h): every member's name is looked up; refused and neutral
 * fields are settled here, implemented ones are left to their parsers. */
static la_status check_fields(ctx *c, const cJSON *root, la_api_kind kind, const la_api_limits *lim) {
    for (const cJSON *m = root->child; m; m = m->next) {
        const la_api_field *f = la_api_field_find(m->string, kind == LA_API_CHAT);
        if (!f) {
            LA_TRY(unknown_field(c, lim, m->string, "request argument supplied", 64));
            continue;
        }
        if (cJSON_IsNull(m) || f->status == LA_FIELD_IMPLEMENTED) continue;
        if (f->status == LA_FIELD_REFUSED)
            return la_api_unsupported(c, m->string, "'%s' is not supported: %s.", m->string, f->note);
        if (f->is_neutral && !f->is_neutral(m))
            return la_api_unsupported(c, m->string, "'%s' is only accepted as %s (%s).", m->string, f->neutral,
                                      f->note);
    }
    return LA_OK;
}

/* POST /tokenize: what a generation request would be computed from (vLLM's request, plus
 * lazyattn's documents, method and cache_salt: the salt picks the tenant's document token
 * cache, as a generation request's does). */
static la_status parse_tokenize(ctx *c, const cJSON *root, const la_api_limits *lim, la_api_request *r) {
    static const char *const known[] = {"model", "prompt", "messages", "documents", "method", "cache_salt",
                                        "add_special_tokens", "return_token_strs", "add_generation_prompt",
                                        "continue_final_message", NULL};
    LA_TRY(only_fields(c, root, NULL, known, lim));
    bool chat = field(root, "messages") != NULL;
    if (chat && field(root, "prompt"))
        return fail(c, LA_ERR_INVALID_ARG, "prompt", "invalid_value", "Give 'prompt' or 'messages', not both.");
    const cJSON *agp = field(root, "add_generation_prompt"), *cfm = field(root, "continue_final_message");
    if (agp && !cJSON_IsTrue(agp))
        return la_api_unsupported(c, "add_generation_prompt", "the assistant header always follows (true only).");
    if (cfm && !cJSON_IsFalse(cfm))
        return la_api_unsupported(c, "continue_final_message", "not supported (false only).");
    LA_TRY(chat ? parse_messages(c, root, lim, r) : parse_prompt(c, root, lim->vocab_size, r));
    if (!chat) LA_TRY(get_bool(c, root, "add_special_tokens", &r->params.add_special));
    else {
        bool add = false;
        LA_TRY(get_bool(c, root, "add_special_tokens", &add));
        if (add) return la_api_unsupported(c, "add_special_tokens", "the chat template writes BOS (false only).");
    }
    r->kind = chat ? LA_API_CHAT : LA_API_COMPLETION;
    return get_bool(c, root, "return_token_strs", &r->return_token_strs);
}

/* ============================================================ entry ================= */

la_status la_api_request_parse(la_api_kind kind, const char *body, size_t len,
                               const la_api_limits *lim, la_api_request *out,
                               la_api_fault *fault, la_err *err) {
    ctx c = {fault, err, body, len};
    if (fault) *fault = (la_api_fault){{0}, NULL};
    size_t bad = la_api_utf8_invalid_at(body, len);
    if (bad < len)
        return fail(&c, LA_ERR_INVALID_ARG, NULL, "invalid_utf8",
                    "The request body is not valid UTF-8 (byte %zu).", bad);
    char path[128];
    const char *why = NULL;
    if (!la_json_strict_check(body, len, path, sizeof path, &why))
        return fail(&c, LA_ERR_INVALID_ARG, path[0] ? path : NULL, "invalid_json",
                    "The request body is not valid JSON: %s%s%s%s.", why, path[0] ? " (at '" : "", path,
                    path[0] ? "')" : "");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (root && end) {
        while (end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
        if (end != body + len) {
            cJSON_Delete(root);
            root = NULL;
        }
    }
    if (!root)
        return fail(&c, LA_ERR_INVALID_ARG, NULL, "invalid_json",
                    "The request body is not valid JSON (near byte %ld).",
                    end ? (long)(end - body) : 0L);
    la_api_request r = {0};
    r.kind = kind;
    r.root = root;
    la_request_params_init(&r.params);
    r.params.chat_format = lim->chat_format;
    la_status s = LA_OK;
    if (!cJSON_IsObject(root))
        s = fail(&c, LA_ERR_INVALID_ARG, NULL, "invalid_json", "The request body must be a JSON object.");
    static const char *const prewarm_fields[] = {"model", "documents", "method", "cache_salt", "doc_context", NULL};
    if (s == LA_OK && kind == LA_API_DOCUMENTS) s = only_fields(&c, root, NULL, prewarm_fields, lim);
    if (s == LA_OK) s = get_string(&c, root, "model", &r.model);
    if (s == LA_OK) s = parse_documents(&c, root, lim, &r, kind == LA_API_DOCUMENTS);
    if (s == LA_OK) s = parse_method_salt(&c, root, &r);
    if (kind == LA_API_TOKENIZE && s == LA_OK) s = parse_tokenize(&c, root, lim, &r);
    if (kind == LA_API_COMPLETION || kind == LA_API_CHAT) {
        if (s == LA_OK) s = check_fields(&c, root, kind, lim);
        if (s == LA_OK) s = kind == LA_API_CHAT ? parse_messages(&c, root, lim, &r) : parse_prompt(&c, root, lim->vocab_size, &r);
        if (s == LA_OK) s = parse_stop(&c, root, lim, &r);
        if (s == LA_OK) s = la_api_parse_sampling(&c, root, lim, &r);
    }
    if (s != LA_OK) {
        la_api_request_fini(&r);
        return s;
    }
    *out = r;
    return LA_OK;
}

void la_api_request_fini(la_api_request *r) {
    if (!r) return;
    cJSON_Delete(r->root);
    free(r->docs);
    free(r->msgs);
    free(r->stops);
    free(r->prompt_ids);
    for (int32_t i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    memset(r, 0, sizeof *r);
}
