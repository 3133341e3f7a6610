/* JSON through cJSON (Debian libcjson-dev): file loading with errors that name the file. */
#ifndef LA_BASE_JSON_H
#define LA_BASE_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include "lazyattn/status.h"

/* Parse a JSON file. *out: caller owns it; free with cJSON_Delete().
 * Errors: LA_ERR_IO (unreadable), LA_ERR_FORMAT ("path: invalid JSON near byte N"). */
la_status la_json_load_file(const char *path, cJSON **out, la_err *err);

/* Parse a JSON text of `len` bytes (need not be NUL-terminated). `what` names the input
 * in messages. Errors: LA_ERR_FORMAT. */
la_status la_json_parse(const char *text, size_t len, const char *what, cJSON **out, la_err *err);

/* Whether text[0:len) is strict JSON (RFC 8259) in the ways cJSON is not: whitespace only
 * space, tab, LF and CR; no raw control character inside a string; no \u0000 (cJSON's
 * strings end at NUL, so "a\u0000b" would silently read as "a"); no name twice in one
 * object (cJSON reads the first, most parsers the last: a gateway and we would read different
 * requests); at most 128 levels of nesting. Numbers and literals are left to cJSON. On
 * false, *why says what (static text) and path (path_cap bytes) names the member where it
 * is ("messages[0].content"; empty: the top level). Thread-safe. */
bool la_json_strict_check(const char *text, size_t len, char *path, size_t path_cap, const char **why);

/* Typed field getters. Missing field: returns LA_OK and leaves *out at its default when
 * `required` is false, LA_ERR_FORMAT when true. Wrong type: LA_ERR_FORMAT naming
 * `what` and the key. Integers must be whole numbers within the target type's range. */
la_status la_json_get_int64(const cJSON *obj, const char *key, bool required, int64_t *out,
                            const char *what, la_err *err);
la_status la_json_get_double(const cJSON *obj, const char *key, bool required, double *out,
                             const char *what, la_err *err);
la_status la_json_get_bool(const cJSON *obj, const char *key, bool required, bool *out,
                           const char *what, la_err *err);
/* *out points into obj (valid while obj lives). */
la_status la_json_get_string(const cJSON *obj, const char *key, bool required,
                             const char **out, const char *what, la_err *err);

#endif
