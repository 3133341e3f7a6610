/* Field helpers of the request parsers (api_parse.h). */
#include "server/api_parse.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static la_status vfail(la_api_ctx *c, la_status s, const char *param, const char *code, const char *fmt,
                       va_list ap) {
    if (c->fault) {
        snprintf(c->fault->param, sizeof c->fault->param, "%s", param ? param : "");
        c->fault->code = code;
    }
    if (c->err) {
        c->err->code = s;
        vsnprintf(c->err->msg, sizeof c->err->msg, fmt, ap);
    }
    return s;
}

bool la_api_unknown_ignored(const la_api_limits *lim, const char *name) {
    if (!lim->ignore_unknown_fields) return false;
    if (lim->on_unknown_field) lim->on_unknown_field(lim->unknown_user, name);
    return true;
}

la_status la_api_fail(la_api_ctx *c, la_status s, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(c, s, param, code, fmt, ap);
    va_end(ap);
    return s;
}

la_status la_api_unsupported(la_api_ctx *c, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail(c, LA_ERR_UNSUPPORTED, param, "unsupported_parameter", fmt, ap);
    va_end(ap);
    return LA_ERR_UNSUPPORTED;
}

const cJSON *la_api_member(const cJSON *o, const char *key) {
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

la_status la_api_bad_type(la_api_ctx *c, const char *param, const cJSON *v, const char *expected) {
    return la_api_fail(c, LA_ERR_INVALID_ARG, param, "invalid_type",
                       "Invalid type for '%s': expected %s, but got %s instead.", param, expected, json_type_name(v));
}

bool la_api_is_integer(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) <= 9.2e18;
}

la_status la_api_get_int(la_api_ctx *c, const cJSON *o, const char *key, double lo, double hi, int64_t *out,
                         bool *given) {
    const cJSON *v = la_api_member(o, key);
    if (given) *given = v != NULL;
    if (!v) return LA_OK;
    /* a whole number past int64 (or past a double: inf) is an integer out of range, not a
     * wrong type */
    if (!cJSON_IsNumber(v) || isnan(v->valuedouble) || (isfinite(v->valuedouble) && v->valuedouble != floor(v->valuedouble)))
        return la_api_bad_type(c, key, v, "an integer");
    if (v->valuedouble < lo || v->valuedouble > hi) {
        if (isinf(hi) && !isinf(lo))
            return la_api_fail(c, LA_ERR_INVALID_ARG, key, "invalid_value", "Invalid value for '%s': %.0f must be >= %.0f.",
                               key, v->valuedouble, lo);
        return la_api_fail(c, LA_ERR_INVALID_ARG, key, "invalid_value",
                           "Invalid value for '%s': %.0f is outside [%.0f, %.0f].", key, v->valuedouble, lo, hi);
    }
    const double d = v->valuedouble, two63 = 9223372036854775808.0;
    *out = d >= two63 ? INT64_MAX : d <= -two63 ? INT64_MIN : (int64_t)d; /* saturated: lo, hi may be +-HUGE_VAL */
    return LA_OK;
}

la_status la_api_get_number(la_api_ctx *c, const cJSON *o, const char *key, double lo, bool lo_open, double hi,
                            float *out) {
    const cJSON *v = la_api_member(o, key);
    if (!v) return LA_OK;
    if (!cJSON_IsNumber(v)) return la_api_bad_type(c, key, v, "a number");
    double d = v->valuedouble;
    if (!(lo_open ? d > lo : d >= lo) || d > hi)
        return la_api_fail(c, LA_ERR_INVALID_ARG, key, "invalid_value", "Invalid value for '%s': %.15g is outside %s%g, %g].",
                           key, d, lo_open ? "(" : "[", lo, hi);
    *out = (float)d;
    return LA_OK;
}

la_status la_api_get_bool(la_api_ctx *c, const cJSON *o, const char *key, bool *out) {
    const cJSON *v = la_api_member(o, key);
    if (!v) return LA_OK;
    if (!cJSON_IsBool(v)) return la_api_bad_type(c, key, v, "a boolean");
    *out = cJSON_IsTrue(v);
    return LA_OK;
}

la_status la_api_get_string(la_api_ctx *c, const cJSON *o, const char *key, const char **out) {
    const cJSON *v = la_api_member(o, key);
    if (!v) return LA_OK;
    if (!cJSON_IsString(v)) return la_api_bad_type(c, key, v, "a string");
    *out = v->valuestring;
    return LA_OK;
}

la_status la_api_keep(la_api_ctx *c, la_api_request *r, void *p) {
    if (!p) return la_api_fail(c, LA_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    void **q = realloc(r->owned, sizeof(void *) * (size_t)(r->n_owned + 1));
    if (!q) {
        free(p);
        return la_api_fail(c, LA_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    }
    r->owned = q;
    r->owned[r->n_owned++] = p;
    return LA_OK;
}

/* ---- raw member text ------------------------------------------------------------------- */

static size_t skip_ws(const char *b, size_t i, size_t n) {
    while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) i++;
    return i;
}

/* b[i] == '"': the index after the closing quote. */
static size_t skip_string(const char *b, size_t i, size_t n) {
    for (i++; i < n && b[i] != '"'; i++)
        if (b[i] == '\\') i++;
    return i + 1;
}

static size_t skip_value(const char *b, size_t i, size_t n) {
    if (i >= n) return n;
    if (b[i] == '"') return skip_string(b, i, n);
    if (b[i] == '{' || b[i] == '[') {
        int depth = 0;
        while (i < n) {
            if (b[i] == '"') {
                i = skip_string(b, i, n);
                continue;
            }
            if (b[i] == '{' || b[i] == '[') depth++;
            if (b[i] == '}' || b[i] == ']') {
                if (--depth == 0) return i + 1;
            }
            i++;
        }
        return n;
    }
    while (i < n && !strchr(",}] \t\r\n", b[i])) i++;
    return i;
}

/* Whether the JSON string b[i:end) (quotes included) says key. */
static bool key_is(const char *b, size_t i, size_t end, const char *key) {
    size_t n = end - i - 2;
    if (!memchr(b + i, '\\', end - i)) return n == strlen(key) && !memcmp(b + i + 1, key, n);
    cJSON *s = cJSON_ParseWithLength(b + i, end - i); /* escapes: let cJSON decode it */
    bool same = cJSON_IsString(s) && !strcmp(s->valuestring, key);
    cJSON_Delete(s);
    return same;
}

bool la_api_raw_member(const char *b, size_t n, const char *key, const char **at, size_t *len) {
    size_t i = skip_ws(b, 0, n);
    if (i >= n || b[i] != '{') return false;
    i++;
    for (;;) {
        i = skip_ws(b, i, n);
        if (i >= n || b[i] != '"') return false;
        size_t k0 = i;
        i = skip_string(b, i, n);
        bool hit = key_is(b, k0, i, key);
        i = skip_ws(b, i, n);
        if (i >= n || b[i] != ':') return false;
        i = skip_ws(b, i + 1, n);
        size_t v0 = i;
        i = skip_value(b, i, n);
        if (hit) {
            *at = b + v0;
            *len = i - v0;
            return true;
        }
        i = skip_ws(b, i, n);
        if (i >= n || b[i] != ',') return false;
        i++;
    }
}
