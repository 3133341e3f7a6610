#include "base/json.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"

la_status la_json_parse(const char *text, size_t len, const char *what, cJSON **out,
                        la_err *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        long at = end ? (long)(end - text) : -1;
        return la_err_set(err, LA_ERR_FORMAT, "%s: invalid JSON near byte %ld", what, at);
    }
    *out = root;
    return LA_OK;
}

la_status la_json_load_file(const char *path, cJSON **out, la_err *err) {
    char *text = NULL;
    size_t len = 0;
    LA_TRY(la_file_read(path, &text, &len, err));
    la_status s = la_json_parse(text, len, path, out, err);
    free(text);
    return s;
}

static const cJSON *get_field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (v && cJSON_IsNull(v)) return NULL;
    return v;
}

la_status la_json_get_int64(const cJSON *obj, const char *key, bool required, int64_t *out,
                            const char *what, la_err *err) {
    const cJSON *v = get_field(obj, key);
    if (!v) {
        if (required) return la_err_set(err, LA_ERR_FORMAT, "%s: missing field %s", what, key);
        return LA_OK;
    }
    if (!cJSON_IsNumber(v))
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s must be an integer", what, key);
    double d = v->valuedouble;
    if (d != floor(d) || d < -9.2e18 || d > 9.2e18)
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s=%g is not an integer", what, key, d);
    *out = (int64_t)d;
    return LA_OK;
}

la_status la_json_get_double(const cJSON *obj, const char *key, bool required, double *out,
                             const char *what, la_err *err) {
    const cJSON *v = get_field(obj, key);
    if (!v) {
        if (required) return la_err_set(err, LA_ERR_FORMAT, "%s: missing field %s", what, key);
        return LA_OK;
    }
    if (!cJSON_IsNumber(v))
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s must be a number", what, key);
    *out = v->valuedouble;
    return LA_OK;
}

la_status la_json_get_bool(const cJSON *obj, const char *key, bool required, bool *out,
                           const char *what, la_err *err) {
    const cJSON *v = get_field(obj, key);
    if (!v) {
        if (required) return la_err_set(err, LA_ERR_FORMAT, "%s: missing field %s", what, key);
        return LA_OK;
    }
    if (!cJSON_IsBool(v))
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s must be true or false", what, key);
    *out = cJSON_IsTrue(v);
    return LA_OK;
}

la_status la_json_get_string(const cJSON *obj, const char *key, bool required,
                             const char **out, const char *what, la_err *err) {
    const cJSON *v = get_field(obj, key);
    if (!v) {
        if (required) return la_err_set(err, LA_ERR_FORMAT, "%s: missing field %s", what, key);
        return LA_OK;
    }
    if (!cJSON_IsString(v))
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s must be a string", what, key);
    *out = v->valuestring;
    return LA_OK;
}

/* ---- strict checking (RFC 8259) ------------------------------------------------------- */

#define STRICT_MAX_DEPTH 128

typedef struct {
    const char *b;
    size_t n, i;
    int depth;
    char *path;       /* the member being read, "a.b[3]" */
    size_t path_cap, path_len;
    const char *why;  /* static */
    bool syntax;      /* the failure is of the text's syntax: no member to name */
    char *key;        /* decoded keys of the objects being read (a stack of arenas) */
    size_t key_len, key_cap;
} strict;

typedef struct {
    size_t off, len;
} key_span;

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_ws(strict *s) {
    while (s->i < s->n && is_ws(s->b[s->i])) s->i++;
}

/* A member's value refused (its path named). */
static bool fail_at(strict *s, const char *why) {
    if (!s->why) s->why = why;
    return false;
}

/* The text is not JSON at all. */
static bool fail_syntax(strict *s, const char *why) {
    if (!s->why) s->why = why, s->syntax = true;
    return false;
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | d;
    }
    return v;
}

static bool key_put(strict *s, const char *p, size_t len) {
    if (s->key_len + len + 1 > s->key_cap) {
        size_t cap = s->key_cap ? s->key_cap : 256;
        while (cap < s->key_len + len + 1) cap *= 2;
        char *k = realloc(s->key, cap);
        if (!k) return fail_at(s, "out of memory");
        s->key = k, s->key_cap = cap;
    }
    memcpy(s->key + s->key_len, p, len);
    s->key_len += len;
    return true;
}

/* A string at s->i (its opening quote); decoded into the key arena when key. */
static bool strict_string(strict *s, bool key) {
    s->i++;
    while (s->i < s->n) {
        unsigned char c = (unsigned char)s->b[s->i];
        if (c == '"') {
            s->i++;
            return true;
        }
        if (c < 0x20) return fail_at(s, "a string holds a raw control character (escape it)");
        if (c != '\\') {
            if (key && !key_put(s, (const char *)&s->b[s->i], 1)) return false;
            s->i++;
            continue;
        }
        if (s->i + 1 >= s->n) break;
        char e = s->b[s->i + 1];
        if (e == 'u') {
            int v = s->i + 6 <= s->n ? hex4(s->b + s->i + 2) : -1;
            if (v < 0) return fail_syntax(s, "a string has a bad \\u escape");
            if (v == 0) return fail_at(s, "a string holds \\u0000 (NUL), which is not supported");
            s->i += 6;
            uint32_t cp = (uint32_t)v;
            if (cp >= 0xDC00 && cp < 0xE000) return fail_at(s, "a string has an unpaired surrogate escape");
            if (cp >= 0xD800 && cp < 0xDC00) { /* a pair, or nothing cJSON would read */
                int lo = s->i + 6 <= s->n && s->b[s->i] == '\\' && s->b[s->i + 1] == 'u' ? hex4(s->b + s->i + 2) : -1;
                if (lo < 0xDC00 || lo >= 0xE000) return fail_at(s, "a string has an unpaired surrogate escape");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (uint32_t)(lo - 0xDC00);
                s->i += 6;
            }
            if (key) { /* keys compare as UTF-8 */
                char u[4];
                size_t k = 0;
                if (cp < 0x80) u[k++] = (char)cp;
                else if (cp < 0x800) u[k++] = (char)(0xC0 | cp >> 6), u[k++] = (char)(0x80 | (cp & 0x3F));
                else if (cp < 0x10000)
                    u[k++] = (char)(0xE0 | cp >> 12), u[k++] = (char)(0x80 | ((cp >> 6) & 0x3F)),
                    u[k++] = (char)(0x80 | (cp & 0x3F));
                else
                    u[k++] = (char)(0xF0 | cp >> 18), u[k++] = (char)(0x80 | ((cp >> 12) & 0x3F)),
                    u[k++] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[k++] = (char)(0x80 | (cp & 0x3F));
                if (!key_put(s, u, k)) return false;
            }
            continue;
        }
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *at = strchr(from, e);
        if (!at || !e) return fail_syntax(s, "a string has a bad escape");
        if (key && !key_put(s, &to[at - from], 1)) return false;
        s->i += 2;
    }
    return fail_syntax(s, "a string is not closed");
}

/* Back to the path of length n (the enclosing object or array). */
static void path_cut(strict *s, size_t n) {
    s->path_len = n;
    s->path[n] = 0;
}

static void path_push(strict *s, const char *fmt, const char *str, size_t len, int64_t index) {
    if (s->path_len + 1 >= s->path_cap) return;
    if (str && len > 64) { /* a long name: its first 64 bytes, cut between characters */
        len = 64;
        while (len > 0 && ((unsigned char)str[len] & 0xC0) == 0x80) len--;
    }
    int k = str ? snprintf(s->path + s->path_len, s->path_cap - s->path_len, fmt, (int)len, str)
                : snprintf(s->path + s->path_len, s->path_cap - s->path_len, fmt, (long long)index);
    if (k <= 0) return;
    if ((size_t)k < s->path_cap - s->path_len) {
        s->path_len += (size_t)k;
        return;
    }
    /* the buffer is full: end it between characters, not inside one */
    size_t end = s->path_cap - 1, lead = end;
    while (lead > 0 && ((unsigned char)s->path[lead - 1] & 0xC0) == 0x80) lead--;
    if (lead > 0) {
        unsigned char c = (unsigned char)s->path[lead - 1];
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (end - (lead - 1) < need) end = lead - 1;
    }
    s->path[end] = 0;
    s->path_len = end;
}

/* The arena qsort compares in: qsort takes no context, so each sort holds g_cmp_mu. */
static const char *g_cmp_keys;
static pthread_mutex_t g_cmp_mu = PTHREAD_MUTEX_INITIALIZER;

static int cmp_span(const void *a, const void *b) {
    const key_span *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(g_cmp_keys + x->off, g_cmp_keys + y->off, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static bool strict_value(strict *s);

static bool strict_object(strict *s) {
    s->i++;
    key_span *spans = NULL;
    size_t n_spans = 0, cap = 0, arena0 = s->key_len, path0 = s->path_len;
    bool ok = true;
    skip_ws(s);
    if (s->i < s->n && s->b[s->i] == '}') {
        s->i++;
        return true;
    }
    for (;;) {
        skip_ws(s);
        if (s->i >= s->n || s->b[s->i] != '"') {
            ok = fail_syntax(s, "an object member has no quoted name");
            break;
        }
        path_cut(s, path0); /* a fault in the name is the object's */
        size_t k0 = s->key_len;
        if (!strict_string(s, true)) {
            ok = false;
            break;
        }
        if (n_spans == cap) {
            cap = cap ? cap * 2 : 16;
            key_span *p = realloc(spans, cap * sizeof *spans);
            if (!p) {
                ok = fail_at(s, "out of memory");
                break;
            }
            spans = p;
        }
        spans[n_spans++] = (key_span){k0, s->key_len - k0};
        path_cut(s, path0);
        path_push(s, path0 ? ".%.*s" : "%.*s", s->key + k0, s->key_len - k0, 0);
        skip_ws(s);
        if (s->i >= s->n || s->b[s->i] != ':') {
            ok = fail_syntax(s, "an object member has no ':'");
            break;
        }
        s->i++;
        if (!strict_value(s)) {
            ok = false;
            break;
        }
        skip_ws(s);
        if (s->i < s->n && s->b[s->i] == ',') {
            s->i++;
            continue;
        }
        if (s->i < s->n && s->b[s->i] == '}') {
            s->i++;
            break;
        }
        ok = fail_syntax(s, "an object is not closed");
        break;
    }
    if (ok && n_spans > 1) { /* duplicate names: sorted, equal neighbours */
        pthread_mutex_lock(&g_cmp_mu);
        g_cmp_keys = s->key;
        qsort(spans, n_spans, sizeof *spans, cmp_span);
        size_t dup = 0;
        for (size_t k = 1; !dup && k < n_spans; k++)
            if (!cmp_span(&spans[k - 1], &spans[k])) dup = k;
        pthread_mutex_unlock(&g_cmp_mu);
        if (dup) {
            path_cut(s, path0);
            path_push(s, path0 ? ".%.*s" : "%.*s", s->key + spans[dup].off, spans[dup].len, 0);
            ok = fail_at(s, "a name appears twice in one object");
        }
    }
    free(spans);
    if (ok) {
        path_cut(s, path0);
    }
    s->key_len = arena0;
    return ok;
}

static bool strict_array(strict *s) {
    s->i++;
    size_t path0 = s->path_len;
    skip_ws(s);
    if (s->i < s->n && s->b[s->i] == ']') {
        s->i++;
        return true;
    }
    for (int64_t k = 0;; k++) {
        path_cut(s, path0);
        path_push(s, "[%lld]", NULL, 0, k);
        if (!strict_value(s)) return false;
        skip_ws(s);
        if (s->i < s->n && s->b[s->i] == ',') {
            s->i++;
            continue;
        }
        if (s->i < s->n && s->b[s->i] == ']') {
            s->i++;
            path_cut(s, path0);
            return true;
        }
        return fail_syntax(s, "an array is not closed");
    }
}

static bool strict_value(strict *s) {
    skip_ws(s);
    if (s->i >= s->n) return fail_syntax(s, "a value is missing");
    char c = s->b[s->i];
    if (c == '{' || c == '[') {
        if (++s->depth > STRICT_MAX_DEPTH) return fail_syntax(s, "values nest more than 128 deep");
        bool ok = c == '{' ? strict_object(s) : strict_array(s);
        s->depth--;
        return ok;
    }
    if (c == '"') return strict_string(s, false);
    /* a number or a literal: up to the next delimiter; cJSON checks its grammar */
    size_t i0 = s->i;
    while (s->i < s->n && !strchr(",]} \t\n\r", s->b[s->i])) {
        if ((unsigned char)s->b[s->i] < 0x20) return fail_at(s, "a control character outside a string");
        s->i++;
    }
    return s->i > i0 ? true : fail_syntax(s, "a value is missing");
}

bool la_json_strict_check(const char *text, size_t len, char *path, size_t path_cap, const char **why) {
    char dummy[1];
    strict s = {.b = text, .n = len, .path = path_cap ? path : dummy, .path_cap = path_cap ? path_cap : 1};
    s.path[0] = 0;
    /* the key arena exists from the start: an empty first name ("") still points into it
     * (found by tests/fuzz/fuzz_json_strict: a null pointer plus 0 is undefined) */
    s.key_cap = 256;
    if (!(s.key = malloc(s.key_cap))) {
        *why = "out of memory";
        return false;
    }
    bool ok = strict_value(&s);
    if (ok) {
        skip_ws(&s);
        if (s.i < s.n) ok = fail_syntax(&s, (unsigned char)s.b[s.i] < 0x20 ? "a control character outside a string"
                                                                           : "text after the JSON value");
    }
    if (ok || s.syntax) s.path[0] = 0;
    free(s.key);
    *why = ok ? NULL : s.why;
    return ok;
}
