/* Field helpers of the request parsers (api_request.c, api_sampling.c): typed getters that
 * answer a wrong type or value with the OpenAI error's param and code, and the raw text of
 * a top-level member (numbers cJSON would round through a double). Private to src/server/.
 */
#ifndef LA_SERVER_API_PARSE_H
#define LA_SERVER_API_PARSE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api_types.h"

/* Where the parse reports: the fault (param, code) and the message. */
typedef struct la_api_ctx {
    la_api_fault *fault;
    la_err *err;
    const char *body; /* the request body and its length, for raw member text */
    size_t len;
} la_api_ctx;

/* Record status s, the param and code of the fault, and a message; returns s. */
la_status la_api_fail(la_api_ctx *c, la_status s, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Whether a field name no parser knows is let through: with lim->ignore_unknown_fields
 * (--ignore-unknown-fields) it is reported through lim->on_unknown_field and true; else
 * false, and the caller answers 400 unknown_parameter. The one place that decides. */
bool la_api_unknown_ignored(const la_api_limits *lim, const char *name);

/* 400 unsupported_parameter naming param. */
la_status la_api_unsupported(la_api_ctx *c, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The member key of o, or NULL when absent or null. */
const cJSON *la_api_member(const cJSON *o, const char *key);

/* "Invalid type for 'param': expected ..." (invalid_type). */
la_status la_api_bad_type(la_api_ctx *c, const char *param, const cJSON *v, const char *expected);

/* Whether v is a number with an integral value (and in int64's range). */
bool la_api_is_integer(const cJSON *v);

/* Typed members (absent: *out untouched; given, when not NULL, says whether it was there).
 *   get_int     an integer in [lo, hi] (a whole number; past int64's range it saturates, for
 *               the bounds +-HUGE_VAL: a caller that checks the value itself names its range)
 *   get_number  a number in [lo, hi] (lo excluded when lo_open) */
la_status la_api_get_int(la_api_ctx *c, const cJSON *o, const char *key, double lo, double hi, int64_t *out,
                         bool *given);
la_status la_api_get_number(la_api_ctx *c, const cJSON *o, const char *key, double lo, bool lo_open, double hi,
                            float *out);
la_status la_api_get_bool(la_api_ctx *c, const cJSON *o, const char *key, bool *out);
la_status la_api_get_string(la_api_ctx *c, const cJSON *o, const char *key, const char **out);

/* Keep heap memory p until la_api_request_fini (NULL: out of memory, reported). */
la_status la_api_keep(la_api_ctx *c, la_api_request *r, void *p);

/* The text of the top-level member key of the body's object (the first with that name, as
 * cJSON finds it): *at and *n span its value. false when absent. The body must be valid
 * JSON (cJSON accepted it). */
bool la_api_raw_member(const char *body, size_t len, const char *key, const char **at, size_t *n);

#endif
