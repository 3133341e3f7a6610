/* la_jinja: the subset of Jinja2 that chat templates use, rendered byte for byte as
 * transformers renders a checkpoint's chat_template (apply_chat_template:
 * ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
 * loopcontrols extension, its own tojson filter and the raise_exception and strftime_now
 * globals; transformers/utils/chat_template_utils.py). Data rendering only, no compute.
 *
 * Supported (tests/model/test_jinja.c; tools/oracle/chat_template_fixtures.py renders the
 * same templates with Python jinja2):
 *   statements  {{ }}, {% if/elif/else %}, {% for %} (tuple targets, `if` filter, else,
 *               loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/
 *               cycle), {% set %} (names, tuples, namespace attributes, {% set x %}
 *               blocks), {% macro %} (positional and keyword parameters with defaults),
 *               {% break %}, {% continue %}, {% generation %}, comments, whitespace control
 *               (-, +, trim_blocks, lstrip_blocks, the dropped trailing newline);
 *   expressions literals (strings with Python escapes, ints, floats, lists, tuples, dicts),
 *               and/or/not, comparisons (chained), in / not in, + - * / // % **, ~,
 *               a if c else b, attribute and item access, slicing, calls, filters, tests;
 *   filters     abs capitalize count default d first float indent int items join last
 *               length list lower map max min reject rejectattr replace reverse round
 *               select selectattr sort string sum title tojson trim unique upper;
 *   tests       boolean callable defined divisibleby eq equalto even false float ge gt
 *               greaterthan in integer iterable le lessthan lower lt mapping ne none number
 *               odd sameas sequence string true undefined upper (and == != < <= > >=);
 *   globals     raise_exception strftime_now range namespace dict;
 *   methods     str: strip lstrip rstrip split rsplit startswith endswith upper lower title
 *               capitalize replace find rfind count join isdigit isalpha isalnum isspace
 *               isupper islower splitlines; dict: items keys values get; loop.cycle.
 * Anything else (another statement such as include/extends/call/filter/raw/with, another
 * filter, test, function or method) is refused at compile time with LA_ERR_UNSUPPORTED
 * naming it and its line: a template that compiles renders as jinja2 does.
 *
 * Values follow Python's semantics: str is code points (len, indexing, slicing), ==
 * compares deeply, str() / repr of lists and dicts as Python prints them, ints are int64
 * (an overflow is an error). Undefined behaves as jinja2's default Undefined (prints "",
 * is false and empty; arithmetic on it or an attribute of it is an error). Filters that
 * give generators in jinja2 (select, map, items, ...) give lists here that refuse to be
 * printed, measured or indexed, as a generator does.
 * Limits: Python's str.upper/lower are full case mappings; here they are utf8proc's simple
 * ones plus U+00DF and U+0130. JSON numbers of the context are ints when integral.
 */
#ifndef LA_MODEL_JINJA_H
#define LA_MODEL_JINJA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "lazyattn/status.h"

typedef struct la_jinja la_jinja;

/* Compile template text[len] (UTF-8). name labels messages ("chat template"). Caller owns
 * *out; free with la_jinja_destroy(). Errors: LA_ERR_FORMAT (a syntax error, invalid
 * UTF-8), LA_ERR_UNSUPPORTED (a construct outside the subset above), each message naming
 * the line; LA_ERR_NO_MEMORY. *out untouched on error. */
la_status la_jinja_compile(const char *text, size_t len, const char *name, la_jinja **out,
                           la_err *err);
void la_jinja_destroy(la_jinja *t); /* NULL: nothing */

/* Render t with the variables of vars (a JSON object: null, bools, numbers, strings,
 * arrays, objects; borrowed). *out is the text, NUL-terminated, *out_len its bytes (may
 * be NULL); caller frees *out with free(). Errors (nothing written): LA_ERR_INVALID_ARG
 * for what jinja2 raises while rendering (raise_exception's message, an undefined value
 * used, a type error), naming the line; LA_ERR_TOO_LONG (output over 64 MiB or over 10^7
 * loop iterations); LA_ERR_NO_MEMORY. Thread-safe: t is read-only while rendering. */
la_status la_jinja_render(const la_jinja *t, const cJSON *vars, char **out, size_t *out_len,
                          la_err *err);

#endif
