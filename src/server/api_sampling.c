/* The sampling fields of the generation endpoints (api_sampling.h). */
#include "server/api_sampling.h"

#include <errno.h>
#include <math.h>
#include <sys/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "grammar/json_schema.h"

typedef la_api_ctx ctx;

/* ============================================================ numbers =============== */

/* seed: any integer in [-2^63, 2^64 - 1], from its text (a double holds 53 bits); a
 * negative one is taken modulo 2^64. Absent: a random one (getrandom), so that requests
 * without a seed sample differently, as OpenAI's and vLLM's do. */
static la_status parse_seed(ctx *c, const cJSON *root, uint64_t *out) {
    const cJSON *v = la_api_member(root, "seed");
    if (!v) {
        uint64_t s;
        if (getrandom(&s, sizeof s, 0) == (ssize_t)sizeof s) *out = s;
        return LA_OK; /* no entropy (a very early boot): the engine's default seed */
    }
    if (!la_api_is_integer(v) && !(cJSON_IsNumber(v) && fabs(v->valuedouble) < 1.9e19 &&
                                   v->valuedouble == floor(v->valuedouble)))
        return la_api_bad_type(c, "seed", v, "an integer");
    const char *at = NULL;
    size_t n = 0;
    char text[32];
    if (!la_api_raw_member(c->body, c->len, "seed", &at, &n) || n == 0 || n >= sizeof text)
        return la_api_fail(c, LA_ERR_INVALID_ARG, "seed", "invalid_value",
                           "Invalid value for 'seed': it must be an integer in [-2^63, 2^64 - 1].");
    memcpy(text, at, n);
    text[n] = '\0';
    bool digits = true;
    for (size_t i = text[0] == '-'; i < n; i++) digits &= text[i] >= '0' && text[i] <= '9';
    if (!digits) { /* 1.0, 3e2: exact only while a double holds it */
        if (fabs(v->valuedouble) > 9007199254740992.0)
            return la_api_fail(c, LA_ERR_INVALID_ARG, "seed", "invalid_value",
                               "Invalid value for 'seed': write an integer above 2^53 in digits.");
        *out = (uint64_t)(int64_t)v->valuedouble;
        return LA_OK;
    }
    errno = 0;
    char *end;
    if (text[0] == '-') {
        long long s = strtoll(text, &end, 10);
        if (errno == ERANGE) goto range;
        *out = (uint64_t)s;
    } else {
        unsigned long long u = strtoull(text, &end, 10);
        if (errno == ERANGE) goto range;
        *out = (uint64_t)u;
    }
    return LA_OK;
range:
    return la_api_fail(c, LA_ERR_INVALID_ARG, "seed", "invalid_value",
                       "Invalid value for 'seed': %s is outside [-2^63, 2^64 - 1].", text);
}

/* An array of token ids below vocab (kept in r). */
static la_status parse_ids(ctx *c, const cJSON *root, const char *key, int32_t vocab, la_api_request *r,
                           const int32_t **ids, int32_t *n_ids) {
    const cJSON *v = la_api_member(root, key);
    if (!v) return LA_OK;
    if (!cJSON_IsArray(v)) return la_api_bad_type(c, key, v, "an array of token ids");
    int32_t n = cJSON_GetArraySize(v), i = 0;
    if (n == 0) return LA_OK;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)n);
    LA_TRY(la_api_keep(c, r, out));
    for (const cJSON *t = v->child; t; t = t->next, i++) {
        if (!la_api_is_integer(t) || t->valuedouble < 0 || t->valuedouble >= vocab)
            return la_api_fail(c, LA_ERR_INVALID_ARG, key, "invalid_value",
                               "Invalid value for '%s'[%d]: token ids are integers in [0, %d).", key, (int)i, vocab);
        out[i] = (int32_t)t->valuedouble;
    }
    *ids = out;
    *n_ids = n;
    return LA_OK;
}

/* logit_bias: {"token id": bias in [-100, 100]}. */
static la_status parse_logit_bias(ctx *c, const cJSON *root, int32_t vocab, la_api_request *r) {
    const cJSON *v = la_api_member(root, "logit_bias");
    if (!v) return LA_OK;
    if (!cJSON_IsObject(v)) return la_api_bad_type(c, "logit_bias", v, "an object {token id: bias}");
    int32_t n = cJSON_GetArraySize(v), i = 0;
    if (n == 0) return LA_OK; /* {}: neutral */
    la_logit_bias *lb = malloc(sizeof *lb * (size_t)n);
    LA_TRY(la_api_keep(c, r, lb));
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        char *end;
        errno = 0;
        long id = strtol(e->string, &end, 10);
        if (!e->string[0] || *end || errno || id < 0 || id >= vocab)
            return la_api_fail(c, LA_ERR_INVALID_ARG, "logit_bias", "invalid_value",
                               "Invalid value for 'logit_bias': '%.32s' is not a token id in [0, %d).", e->string, vocab);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= -100 && e->valuedouble <= 100))
            return la_api_fail(c, LA_ERR_INVALID_ARG, "logit_bias", "invalid_value",
                               "Invalid value for 'logit_bias' of token %ld: biases are numbers in [-100, 100].", id);
        lb[i] = (la_logit_bias){(int32_t)id, (float)e->valuedouble};
    }
    r->params.sampling.logit_bias = lb;
    r->params.sampling.n_logit_bias = n;
    return LA_OK;
}

/* ============================================================ lengths, logprobs ====== */

static la_status parse_lengths(ctx *c, const cJSON *root, const la_api_limits *lim, la_api_request *r) {
    la_sampling_params *sp = &r->params.sampling;
    int64_t max_tokens = r->kind == LA_API_CHAT ? lim->default_chat_max_tokens : lim->default_max_tokens;
    bool given = false;
    const char *which = "max_tokens";
    if (r->kind == LA_API_CHAT) {
        LA_TRY(la_api_get_int(c, root, "max_completion_tokens", -HUGE_VAL, HUGE_VAL, &max_tokens, &given));
        if (given) which = "max_completion_tokens";
    }
    int64_t legacy = max_tokens;
    bool legacy_given = false;
    LA_TRY(la_api_get_int(c, root, "max_tokens", -HUGE_VAL, HUGE_VAL, &legacy, &legacy_given));
    if (given && legacy_given && legacy != max_tokens) /* neither is ignored */
        return la_api_fail(c, LA_ERR_INVALID_ARG, "max_tokens", "invalid_value",
                           "'max_tokens' (%lld) and 'max_completion_tokens' (%lld) differ: give one of them.",
                           (long long)legacy, (long long)max_tokens);
    if (!given) max_tokens = legacy, given = legacy_given;
    if (given && (max_tokens < 1 || max_tokens > lim->max_tokens)) /* past int64: the number sent, as JSON read it */
        return la_api_fail(c, LA_ERR_INVALID_ARG, which, "invalid_value", "Invalid value for '%s': %.0f; it must be in [1, %d].",
                           which, la_api_member(root, which)->valuedouble, lim->max_tokens);
    if (max_tokens > lim->max_tokens) max_tokens = lim->max_tokens; /* a default over the limit */
    sp->max_tokens = (int32_t)max_tokens;
    int64_t min_tokens = 0;
    LA_TRY(la_api_get_int(c, root, "min_tokens", 0, HUGE_VAL, &min_tokens, NULL));
    if (min_tokens > sp->max_tokens)
        return la_api_fail(c, LA_ERR_INVALID_ARG, "min_tokens", "invalid_value",
                           "Invalid value for 'min_tokens': %lld exceeds max_tokens (%d).", (long long)min_tokens,
                           sp->max_tokens);
    sp->min_tokens = (int32_t)min_tokens;
    int64_t n = 1, best_of = -1;
    LA_TRY(la_api_get_int(c, root, "n", 1, 128, &n, NULL));
    LA_TRY(la_api_get_int(c, root, "best_of", 1, 128, &best_of, NULL));
    if (best_of >= 0 && best_of != n)
        return la_api_unsupported(c, "best_of",
                                  "'best_of' is only accepted equal to n (%lld): ranking more candidates by logprob is "
                                  "not supported.", (long long)n);
    r->n = (int32_t)n;
    sp->n = (int32_t)n;
    return LA_OK;
}

static la_status parse_logprobs(ctx *c, const cJSON *root, la_api_request *r) {
    la_sampling_params *sp = &r->params.sampling;
    int64_t top = 0;
    if (r->kind == LA_API_COMPLETION) {
        bool given = false;
        LA_TRY(la_api_get_int(c, root, "logprobs", 0, 20, &top, &given));
        r->logprobs = given;
        LA_TRY(la_api_get_bool(c, root, "echo", &r->echo));
        if (r->echo && r->logprobs)
            return la_api_unsupported(c, "echo", "'echo' with 'logprobs' would need the prompt's logprobs, which are "
                                                 "not computed.");
    } else {
        bool given = false;
        LA_TRY(la_api_get_bool(c, root, "logprobs", &r->logprobs));
        LA_TRY(la_api_get_int(c, root, "top_logprobs", 0, 20, &top, &given));
        if (given && !r->logprobs)
            return la_api_fail(c, LA_ERR_INVALID_ARG, "top_logprobs", "invalid_value",
                               "'top_logprobs' needs 'logprobs' set to true.");
    }
    r->top_logprobs = (int32_t)top;
    sp->logprobs = r->logprobs;
    sp->top_logprobs = (int32_t)top;
    return LA_OK;
}

static la_status parse_stream(ctx *c, const cJSON *root, la_api_request *r) {
    LA_TRY(la_api_get_bool(c, root, "stream", &r->stream));
    const cJSON *so = la_api_member(root, "stream_options");
    if (!so) return LA_OK;
    if (!cJSON_IsObject(so)) return la_api_bad_type(c, "stream_options", so, "an object");
    if (!r->stream)
        return la_api_fail(c, LA_ERR_INVALID_ARG, "stream_options", "invalid_value",
                           "'stream_options' is only allowed when 'stream' is true.");
    for (const cJSON *k = so->child; k; k = k->next) {
        char param[80];
        snprintf(param, sizeof param, "stream_options.%.48s", k->string);
        if (!strcmp(k->string, "include_usage")) {
            if (!cJSON_IsNull(k) && !cJSON_IsBool(k)) return la_api_bad_type(c, param, k, "a boolean");
            r->include_usage = cJSON_IsTrue(k);
        } else if (!strcmp(k->string, "continuous_usage_stats")) {
            if (cJSON_IsTrue(k))
                return la_api_unsupported(c, param, "usage comes once, at the end of the stream.");
        } else {
            return la_api_fail(c, LA_ERR_INVALID_ARG, param, "unknown_parameter", "Unrecognized field '%s'.", param);
        }
    }
    return LA_OK;
}

/* ============================================================ structured output ===== */

/* Check schema against the supported subset (its refusal names the keyword under
 * param_prefix) and keep its text for the engine. */
static la_status take_schema(ctx *c, const cJSON *schema, const char *param_prefix, la_api_request *r) {
    la_json_grammar *g = NULL;
    char path[256];
    la_err gerr = {0};
    la_status s = la_json_grammar_compile(schema, &g, path, sizeof path, &gerr);
    la_json_grammar_destroy(g);
    if (s != LA_OK) {
        char param[64];
        snprintf(param, sizeof param, "%s%s%.40s", param_prefix, path[0] ? "." : "", path);
        if (s == LA_ERR_UNSUPPORTED) return la_api_unsupported(c, param, "%s", gerr.msg);
        return la_api_fail(c, s, param, s == LA_ERR_NO_MEMORY ? NULL : "invalid_value", "%s", gerr.msg);
    }
    char *text = cJSON_PrintUnformatted(schema);
    LA_TRY(la_api_keep(c, r, text));
    r->params.sampling.response_format = LA_RESPONSE_JSON_SCHEMA;
    r->params.sampling.json_schema = text;
    return LA_OK;
}

/* A schema given as an object or as JSON text (guided_json, json_schema). */
static la_status schema_field(ctx *c, const cJSON *root, const char *key, la_api_request *r) {
    const cJSON *v = la_api_member(root, key);
    if (!v) return LA_OK;
    if (cJSON_IsString(v)) {
        char path[96];
        const char *why = NULL;
        cJSON *parsed = la_json_strict_check(v->valuestring, strlen(v->valuestring), path, sizeof path, &why)
                            ? cJSON_Parse(v->valuestring)
                            : NULL; /* a name twice in a schema is not a schema */
        if (!parsed)
            return la_api_fail(c, LA_ERR_INVALID_ARG, key, "invalid_value", "'%s' is not a JSON schema.", key);
        la_status s = take_schema(c, parsed, key, r);
        cJSON_Delete(parsed);
        return s;
    }
    if (!cJSON_IsObject(v) && !cJSON_IsBool(v)) return la_api_bad_type(c, key, v, "a JSON schema");
    return take_schema(c, v, key, r);
}

static la_status parse_response_format(ctx *c, const cJSON *root, la_api_request *r) {
    const char *given[3] = {0};
    int n_given = 0;
    const char *keys[3] = {"response_format", "guided_json", "json_schema"};
    for (int i = 0; i < 3; i++)
        if (la_api_member(root, keys[i])) given[n_given++] = keys[i];
    if (n_given > 1)
        return la_api_fail(c, LA_ERR_INVALID_ARG, given[1], "invalid_value", "'%s' and '%s' both ask for a format.",
                           given[0], given[1]);
    LA_TRY(schema_field(c, root, "guided_json", r));
    LA_TRY(schema_field(c, root, "json_schema", r));
    const cJSON *rf = la_api_member(root, "response_format");
    if (!rf) return LA_OK;
    if (!cJSON_IsObject(rf)) return la_api_bad_type(c, "response_format", rf, "an object {type}");
    const cJSON *type = la_api_member(rf, "type");
    if (!cJSON_IsString(type))
        return la_api_fail(c, LA_ERR_INVALID_ARG, "response_format.type", "invalid_value",
                           "'response_format.type' must be one of text, json_object, json_schema.");
    for (const cJSON *k = rf->child; k; k = k->next)
        if (strcmp(k->string, "type") && !(strcmp(k->string, "json_schema") == 0 && !strcmp(type->valuestring, "json_schema")))
            return la_api_fail(c, LA_ERR_INVALID_ARG, "response_format", "unknown_parameter",
                               "Unrecognized field 'response_format.%.40s'.", k->string);
    if (!strcmp(type->valuestring, "text")) return LA_OK;
    if (!strcmp(type->valuestring, "json_object")) {
        r->params.sampling.response_format = LA_RESPONSE_JSON_OBJECT;
        return LA_OK;
    }
    if (strcmp(type->valuestring, "json_schema"))
        return la_api_fail(c, LA_ERR_INVALID_ARG, "response_format.type", "invalid_value",
                           "Invalid value for 'response_format.type': '%.40s' is not one of text, json_object, "
                           "json_schema.", type->valuestring);
    const cJSON *js = la_api_member(rf, "json_schema");
    if (!cJSON_IsObject(js))
        return la_api_fail(c, LA_ERR_INVALID_ARG, "response_format.json_schema", "invalid_value",
                           "Missing required parameter: 'response_format.json_schema' {name, schema, strict}.");
    const cJSON *schema = NULL;
    for (const cJSON *k = js->child; k; k = k->next) {
        char param[80];
        snprintf(param, sizeof param, "response_format.json_schema.%.40s", k->string);
        if (!strcmp(k->string, "schema")) schema = k;
        else if (!strcmp(k->string, "name") || !strcmp(k->string, "description")) {
            if (!cJSON_IsString(k)) return la_api_bad_type(c, param, k, "a string");
        } else if (!strcmp(k->string, "strict")) {
            if (!cJSON_IsBool(k) && !cJSON_IsNull(k)) return la_api_bad_type(c, param, k, "a boolean");
        } else {
            return la_api_fail(c, LA_ERR_INVALID_ARG, param, "unknown_parameter", "Unrecognized field '%s'.", param);
        }
    }
    const cJSON *name = la_api_member(js, "name");
    if (!name)
        return la_api_fail(c, LA_ERR_INVALID_ARG, "response_format.json_schema.name", "invalid_value",
                           "Missing required parameter: 'response_format.json_schema.name'.");
    if (!schema || cJSON_IsNull(schema)) { /* OpenAI: no schema is any JSON object */
        r->params.sampling.response_format = LA_RESPONSE_JSON_OBJECT;
        return LA_OK;
    }
    return take_schema(c, schema, "response_format.json_schema.schema", r);
}

/* ============================================================ entry ================= */

la_status la_api_parse_sampling(ctx *c, const cJSON *root, const la_api_limits *lim, la_api_request *r) {
    la_sampling_params *sp = &r->params.sampling;
    LA_TRY(parse_lengths(c, root, lim, r));
    LA_TRY(la_api_get_number(c, root, "temperature", 0, false, 2, &sp->temperature));
    LA_TRY(la_api_get_number(c, root, "top_p", 0, true, 1, &sp->top_p));
    LA_TRY(la_api_get_number(c, root, "min_p", 0, false, 1, &sp->min_p));
    int64_t top_k = 0;
    LA_TRY(la_api_get_int(c, root, "top_k", -1, INT32_MAX, &top_k, NULL));
    sp->top_k = top_k < 0 ? 0 : (int32_t)top_k; /* -1: off, as in vLLM */
    LA_TRY(parse_seed(c, root, &sp->seed));
    LA_TRY(la_api_get_number(c, root, "frequency_penalty", -2, false, 2, &sp->frequency_penalty));
    LA_TRY(la_api_get_number(c, root, "presence_penalty", -2, false, 2, &sp->presence_penalty));
    LA_TRY(la_api_get_number(c, root, "repetition_penalty", 0, true, 2, &sp->repetition_penalty));
    LA_TRY(parse_logit_bias(c, root, lim->vocab_size, r));
    LA_TRY(parse_ids(c, root, "stop_token_ids", lim->vocab_size, r, &sp->stop_token_ids, &sp->n_stop_token_ids));
    LA_TRY(parse_ids(c, root, "allowed_token_ids", lim->vocab_size, r, &sp->allowed_token_ids,
                     &sp->n_allowed_token_ids));
    const cJSON *allowed = la_api_member(root, "allowed_token_ids");
    if (allowed && sp->n_allowed_token_ids == 0)
        return la_api_fail(c, LA_ERR_INVALID_ARG, "allowed_token_ids", "invalid_value",
                           "'allowed_token_ids' must not be empty.");
    LA_TRY(la_api_get_bool(c, root, "ignore_eos", &sp->ignore_eos));
    bool keep_stop = false, no_trim = false, skip_special = true;
    LA_TRY(la_api_get_bool(c, root, "include_stop_str_in_output", &keep_stop));
    LA_TRY(la_api_get_bool(c, root, "no_stop_trim", &no_trim));
    sp->include_stop_str = keep_stop || no_trim;
    LA_TRY(la_api_get_bool(c, root, "skip_special_tokens", &skip_special));
    r->params.keep_special_tokens = !skip_special;
    if (r->kind == LA_API_COMPLETION) LA_TRY(la_api_get_bool(c, root, "add_special_tokens", &r->params.add_special));
    LA_TRY(parse_logprobs(c, root, r));
    LA_TRY(parse_stream(c, root, r));
    LA_TRY(parse_response_format(c, root, r));
    if (sp->response_format != LA_RESPONSE_TEXT && sp->ignore_eos)
        return la_api_unsupported(c, "ignore_eos", "'ignore_eos' cannot be combined with a JSON response format (the "
                                                   "output ends with its value).");
    if (sp->response_format != LA_RESPONSE_TEXT && sp->min_tokens > 0)
        return la_api_unsupported(c, "min_tokens", "'min_tokens' cannot be combined with a JSON response format (the "
                                                   "output ends with its value).");
    if (sp->response_format != LA_RESPONSE_TEXT && sp->n_stop_token_ids > 0)
        return la_api_unsupported(c, "stop_token_ids", "'stop_token_ids' cannot be combined with a JSON response format "
                                                       "(one inside the value would cut it; the output ends with its value).");
    if (sp->response_format != LA_RESPONSE_TEXT && sp->n_stop > 0)
        return la_api_unsupported(c, "stop", "'stop' cannot be combined with a JSON response format (a stop string "
                                             "inside the value would cut it; the output ends with its value).");
    LA_TRY(la_api_get_string(c, root, "request_id", &r->request_id));
    LA_TRY(la_api_get_string(c, root, "user", &r->user));
    if (!r->user) LA_TRY(la_api_get_string(c, root, "safety_identifier", &r->user));
    return LA_OK;
}
