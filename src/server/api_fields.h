/* Every request field of the OpenAI-compatible API in one table (api_fields.c): the fields
 * of OpenAI's completions and chat completions, the common extensions vLLM, SGLang and
 * llama.cpp users send, and lazyattn's own, each marked
 *
 *   implemented  the engine does what the field asks (api_request.c parses it)
 *   neutral      only values that ask for nothing are accepted (penalty 0, "[]", false):
 *                any other value is refused
 *   refused      any value but null is refused
 *
 * A refused field or a value the engine cannot honour is answered 400 with code
 * "unsupported_parameter" naming it; a name the table does not know is answered 400 with
 * code "unknown_parameter" (OpenAI's behaviour), or accepted and logged once per name
 * under --ignore-unknown-fields (vLLM's). The README's "Request fields" table is this
 * table (tests/server/test_api_fields.c compares them).
 */
#ifndef LA_SERVER_API_FIELDS_H
#define LA_SERVER_API_FIELDS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum la_field_status { LA_FIELD_IMPLEMENTED = 0, LA_FIELD_NEUTRAL, LA_FIELD_REFUSED } la_field_status;

/* Which endpoints a row is about (a name may have one row per endpoint). */
enum { LA_FIELD_COMPLETIONS = 1, LA_FIELD_CHAT = 2, LA_FIELD_BOTH = 3 };

typedef struct la_api_field {
    const char *name;
    unsigned apis;            /* LA_FIELD_COMPLETIONS | LA_FIELD_CHAT */
    la_field_status status;
    const char *origin;       /* "OpenAI", "vLLM", "SGLang", "llama.cpp", "lazyattn" */
    const char *neutral;      /* NEUTRAL: the accepted values, as the README writes them */
    bool (*is_neutral)(const cJSON *v); /* NEUTRAL: whether v asks for nothing (NULL: the
                                           parser decides, e.g. best_of against n) */
    const char *note;         /* what it does here, or why it is refused */
} la_api_field;

/* The table, in the README's order; *n its rows. */
const la_api_field *la_api_fields(size_t *n);

/* The row of name for an endpoint (chat: true for /v1/chat/completions), or NULL. */
const la_api_field *la_api_field_find(const char *name, bool chat);

/* "implemented", "neutral", "refused". */
const char *la_api_field_status_name(la_field_status s);

#endif
