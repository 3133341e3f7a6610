/* Helpers of the two files that read tokenizer.json (tokenizer.c, pipeline.c): errors
 * that name the file, and field getters shaped as HF tokenizers' serde reads them.
 * Static inline: private to src/tokenizer/, no symbols of their own.
 */
#ifndef LA_TOKENIZER_FIELDS_H
#define LA_TOKENIZER_FIELDS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/file.h"
#include "base/json.h"
#include "tokenizer/tokenizer_internal.h"

/* Ids above this are refused: tables are sized by the largest id. */
#define LA_TOK_MAX_ID (1 << 24)

/* ---- errors ------------------------------------------------------------------------- */

static inline la_status fail(const la_tokenizer *tok, la_err *err, la_status code,
                             const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline la_status fail(const la_tokenizer *tok, la_err *err, la_status code,
                             const char *fmt, ...) {
    char msg[LA_ERR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return la_err_set(err, code, "%s: %s", tok->path, msg);
}

static inline la_status oom(const la_tokenizer *tok, la_err *err) {
    return fail(tok, err, LA_ERR_NO_MEMORY, "out of memory");
}

/* ---- JSON helpers -------------------------------------------------------------------- */

/* Read and parse a JSON file whose bytes must be UTF-8. *out NULL when optional and
 * absent. */
static inline la_status load_json(const char *path, bool required, cJSON **out, la_err *err) {
    *out = NULL;
    if (!required && !la_file_exists(path)) return LA_OK;
    char *text = NULL;
    size_t len = 0;
    LA_TRY(la_file_read(path, &text, &len, err));
    size_t bad = la_utf8_invalid_at((const uint8_t *)text, len);
    if (bad < len) {
        free(text);
        return la_err_set(err, LA_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", path, bad);
    }
    la_status s = la_json_parse(text, len, path, out, err);
    free(text);
    return s;
}

static inline const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static inline const char *str_field(const cJSON *obj, const char *key) {
    const cJSON *v = field(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static inline bool bool_field(const cJSON *obj, const char *key, bool dflt) {
    const cJSON *v = field(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* A whole number in [0, LA_TOK_MAX_ID], or -1. */
static inline int32_t id_value(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (d < 0 || d > LA_TOK_MAX_ID || d != (double)(int32_t)d) return -1;
    return (int32_t)d;
}

/* {"String": s} -> s; {"Regex": r} -> *is_regex. NULL if neither. */
static inline const char *pattern_field(const cJSON *obj, bool *is_regex) {
    const cJSON *p = field(obj, "pattern");
    const char *s = str_field(p, "String");
    *is_regex = false;
    if (s) return s;
    s = str_field(p, "Regex");
    if (s) *is_regex = true;
    return s;
}

static inline char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Compile a tokenizer.json regex (regex.h); where names the part in messages. */
static inline la_status compile_regex(la_tokenizer *tok, const char *where, const char *pat,
                                      pcre2_code **out, la_err *err) {
    char msg[256];
    switch (la_tok_regex_compile(pat, out, msg, sizeof msg)) {
    case LA_TOK_REGEX_OK: return LA_OK;
    case LA_TOK_REGEX_NO_MEMORY: return oom(tok, err);
    case LA_TOK_REGEX_UNSUPPORTED:
        return fail(tok, err, LA_ERR_UNSUPPORTED, "%s regex \"%s\": %s", where, pat, msg);
    default:
        return fail(tok, err, LA_ERR_FORMAT, "%s regex \"%s\" does not compile: %s", where, pat, msg);
    }
}

static inline bool valid_utf8(const char *s) {
    size_t n = strlen(s);
    return la_utf8_invalid_at((const uint8_t *)s, n) == n;
}

#endif
