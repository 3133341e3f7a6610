/* Parsing the OpenAI-compatible request JSON into engine structs (api_request.h). */
#include "server/api_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

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

/* ============================================================ field helpers ========= */

typedef struct ctx {
    la_api_fault *fault;
    la_err *err;
} ctx;

static la_status fail(ctx *c, la_status s, const char *param, const char *code, const char *fmt,
                      ...) __attribute__((format(printf, 5, 6)));

static la_status fail(ctx *c, la_status s, const char *param, const char *code, const char *fmt,
                      ...) {
    if (c->fault) {
        snprintf(c->fault->param, sizeof c->fault->param, "%s", param ? param : "");
        c->fault->code = code;
    }
    if (c->err) {
        c->err->code = s;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err->msg, sizeof c->err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

/* The field, or NULL when absent or null. */
static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static const char *json_type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

static la_status bad_type(ctx *c, const char *param, const cJSON *v, const char *expected) {
    return fail(c, LA_ERR_INVALID_ARG, param, "invalid_type",
                "Invalid type for '%s': expected %s, but got %s instead.", param, expected,
                json_type_name(v));
}

static bool is_integer(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) <= 9.2e18;
}

/* Integer field in [lo, hi]; absent: *out untouched, *given false. */
static la_status get_int(ctx *c, const cJSON *o, const char *key, double lo, double hi,
                         int64_t *out, bool *given) {
    const cJSON *v = field(o, key);
    if (given) *given = v != NULL;
    if (!v) return LA_OK;
    if (!is_integer(v)) return bad_type(c, key, v, "an integer");
    if (v->valuedouble < lo || v->valuedouble > hi)
        return fail(c, LA_ERR_INVALID_ARG, key, "invalid_value",
                    "Invalid value for '%s': %.0f is outside [%.0f, %.0f].", key, v->valuedouble,
                    lo, hi);
    *out = (int64_t)v->valuedouble;
    return LA_OK;
}

static la_status get_number(ctx *c, const cJSON *o, const char *key, double lo, bool lo_open,
                            double hi, float *out) {
    const cJSON *v = field(o, key);
    if (!v) return LA_OK;
    if (!cJSON_IsNumber(v)) return bad_type(c, key, v, "a number");
    double d = v->valuedouble;
    if (!(lo_open ? d > lo : d >= lo) || d > hi)
        return fail(c, LA_ERR_INVALID_ARG, key, "invalid_value",
                    "Invalid value for '%s': %g is outside %s%g, %g].", key, d, lo_open ? "(" : "[",
                    lo, hi);
    *out = (float)d;
    return LA_OK;
}

static la_status get_bool(ctx *c, const cJSON *o, const char *key, bool *out) {
    const cJSON *v = field(o, key);
    if (!v) return LA_OK;
    if (!cJSON_IsBool(v)) return bad_type(c, key, v, "a boolean");
    *out = cJSON_IsTrue(v);
    return LA_OK;
}

static la_status get_string(ctx *c, const cJSON *o, const char *key, const char **out) {
    const cJSON *v = field(o, key);
    if (!v) return LA_OK;
    if (!cJSON_IsString(v)) return bad_type(c, key, v, "a string");
    *out = v->valuestring;
    return LA_OK;
}

static la_status keep(ctx *c, la_api_request *r, char *s) {
    if (!s) return fail(c, LA_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    char **p = realloc(r->owned, sizeof(char *) * (size_t)(r->n_owned + 1));
    if (!p) {
        free(s);
        return fail(c, LA_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    }
    r->owned = p;
    r->owned[r->n_owned++] = s;
    return LA_OK;
}

/* ============================================================ fields ================ */

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
                    "%d documents exceed the limit of %d per request.", n, lim->max_docs);
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
    r->params.cache_salt = salt;
    return LA_OK;
}

/* prompt: string | [string] | [int] | [[int]] (one prompt). */
static la_status parse_prompt(ctx *c, const cJSON *root, la_api_request *r) {
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
        r->prompt_ids[i] = (int32_t)t->valuedouble;
    }
    r->params.prompt.ids = r->prompt_ids;
    r->params.prompt.n_ids = m;
    return LA_OK;
}

/* content: string | [{type: "text", text}] (parts are concatenated). */
static la_status parse_content(ctx *c, const cJSON *v, int i, la_api_request *r, const char **out) {
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
            return fail(c, LA_ERR_UNSUPPORTED, param, "unsupported",
                        "Only content parts of type 'text' are supported.");
        if (!cJSON_IsString(text)) return bad_type(c, param, text, "a string in 'text'");
        total += strlen(text->valuestring);
    }
    char *s = malloc(total + 1);
    LA_TRY(keep(c, r, s));
    size_t at = 0;
    for (const cJSON *p = v->child; p; p = p->next) {
        const char *t = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(s + at, t, n);
        at += n;
    }
    s[at] = '\0';
    *out = s;
    return LA_OK;
}

static la_status parse_messages(ctx *c, const cJSON *root, la_api_request *r) {
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
        LA_TRY(parse_content(c, field(m, "content"), i, r, &r->msgs[i].content));
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

/* Fields of the OpenAI API this engine does not implement: refused, never ignored. */
static la_status refuse_unsupported(ctx *c, const cJSON *root, la_api_kind kind) {
    int64_t n = 1;
    LA_TRY(get_int(c, root, "n", 1, 1, &n, NULL));
    if (kind == LA_API_COMPLETION) {
        LA_TRY(get_int(c, root, "best_of", 1, 1, &n, NULL));
        bool echo = false;
        LA_TRY(get_bool(c, root, "echo", &echo));
        if (echo) return fail(c, LA_ERR_UNSUPPORTED, "echo", "unsupported", "'echo' is not supported.");
        if (field(root, "logprobs"))
            return fail(c, LA_ERR_UNSUPPORTED, "logprobs", "unsupported",
                        "'logprobs' is not supported.");
        const cJSON *suffix = field(root, "suffix");
        if (suffix && !(cJSON_IsString(suffix) && !suffix->valuestring[0]))
            return fail(c, LA_ERR_UNSUPPORTED, "suffix", "unsupported", "'suffix' is not supported.");
    } else if (kind == LA_API_CHAT) {
        bool lp = false;
        LA_TRY(get_bool(c, root, "logprobs", &lp));
        if (lp)
            return fail(c, LA_ERR_UNSUPPORTED, "logprobs", "unsupported",
                        "'logprobs' is not supported.");
        if (field(root, "tools") && cJSON_GetArraySize(field(root, "tools")) > 0)
            return fail(c, LA_ERR_UNSUPPORTED, "tools", "unsupported", "'tools' is not supported.");
    }
    return LA_OK;
}

static la_status parse_sampling(ctx *c, const cJSON *root, const la_api_limits *lim,
                                 la_api_request *r) {
    la_sampling_params *sp = &r->params.sampling;
    int64_t max_tokens = r->kind == LA_API_CHAT ? lim->default_chat_max_tokens : lim->default_max_tokens;
    bool given = false;
    if (r->kind == LA_API_CHAT) {
        LA_TRY(get_int(c, root, "max_completion_tokens", -9.2e18, 9.2e18, &max_tokens, &given));
        if (given && (max_tokens < 1 || max_tokens > lim->max_tokens))
            return fail(c, LA_ERR_INVALID_ARG, "max_completion_tokens", "invalid_value",
                        "Invalid value for 'max_completion_tokens': %lld; it must be in [1, %d].",
                        (long long)max_tokens, lim->max_tokens);
    }
    if (!given) {
        LA_TRY(get_int(c, root, "max_tokens", -9.2e18, 9.2e18, &max_tokens, &given));
        if (given && (max_tokens < 1 || max_tokens > lim->max_tokens))
            return fail(c, LA_ERR_INVALID_ARG, "max_tokens", "invalid_value",
                        "Invalid value for 'max_tokens': %lld; it must be in [1, %d].",
                        (long long)max_tokens, lim->max_tokens);
    }
    if (max_tokens > lim->max_tokens) max_tokens = lim->max_tokens; /* a default over the limit */
    sp->max_tokens = (int32_t)max_tokens;
    LA_TRY(get_number(c, root, "temperature", 0, false, 2, &sp->temperature));
    LA_TRY(get_number(c, root, "top_p", 0, true, 1, &sp->top_p));
    int64_t top_k = 0;
    LA_TRY(get_int(c, root, "top_k", -1, INT32_MAX, &top_k, NULL));
    sp->top_k = top_k < 0 ? 0 : (int32_t)top_k; /* -1: off, as in vLLM */
    int64_t seed = 0;
    LA_TRY(get_int(c, root, "seed", -9.2e18, 9.2e18, &seed, NULL));
    sp->seed = (uint64_t)seed;
    LA_TRY(get_bool(c, root, "ignore_eos", &sp->ignore_eos));
    return parse_stop(c, root, lim, r);
}

/* ============================================================ entry ================= */

la_status la_api_request_parse(la_api_kind kind, const char *body, size_t len,
                               const la_api_limits *lim, la_api_request *out,
                               la_api_fault *fault, la_err *err) {
    ctx c = {fault, err};
    if (fault) *fault = (la_api_fault){{0}, NULL};
    size_t bad = la_api_utf8_invalid_at(body, len);
    if (bad < len)
        return fail(&c, LA_ERR_INVALID_ARG, NULL, "invalid_utf8",
                    "The request body is not valid UTF-8 (byte %zu).", bad);
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
    if (s == LA_OK) s = get_string(&c, root, "model", &r.model);
    if (s == LA_OK) s = parse_documents(&c, root, lim, &r, kind == LA_API_DOCUMENTS);
    if (s == LA_OK) s = parse_method_salt(&c, root, &r);
    if (kind != LA_API_DOCUMENTS) {
        if (s == LA_OK) s = refuse_unsupported(&c, root, kind);
        if (s == LA_OK) s = kind == LA_API_CHAT ? parse_messages(&c, root, &r) : parse_prompt(&c, root, &r);
        if (s == LA_OK) s = parse_sampling(&c, root, lim, &r);
        if (s == LA_OK) s = get_bool(&c, root, "stream", &r.stream);
        const cJSON *so = s == LA_OK ? field(root, "stream_options") : NULL;
        if (so && !cJSON_IsObject(so)) s = bad_type(&c, "stream_options", so, "an object");
        if (so && s == LA_OK) {
            s = get_bool(&c, so, "include_usage", &r.include_usage);
            if (s != LA_OK && fault) snprintf(fault->param, sizeof fault->param, "stream_options.include_usage");
        }
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
