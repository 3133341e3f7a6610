/* Request JSON of the OpenAI-compatible API, parsed into engine structs. Request JSON never
 * leaves server/: handlers get a la_request_params ready for la_engine_submit().
 *
 *   POST /v1/completions        prompt (string | [string] | [int] | [[int]], one prompt)
 *   POST /v1/chat/completions   messages [{role, content (string | [{type: "text", text}])}]
 *   POST /v1/documents          documents, cache_salt, method, doc_context, model
 *   POST /tokenize              model, prompt | messages, documents, method, cache_salt,
 *                               add_special_tokens, return_token_strs, add_generation_prompt,
 *                               continue_final_message
 * A document is a string or {title?, text}. On /v1/documents and /tokenize, and inside a
 * document, any other name is answered 400 unknown_parameter (or ignored as below).
 * Every other field of the two generation endpoints is in the table of api_fields.h: an
 * implemented field is parsed here (api_sampling.c for the sampling ones), a neutral one
 * accepted only with a value that asks for nothing, a refused one answered 400
 * unsupported_parameter, an unknown name 400 unknown_parameter (or, with
 * ignore_unknown_fields, reported once through on_unknown_field and ignored). Fields set to
 * null count as absent.
 */
#ifndef LA_SERVER_API_REQUEST_H
#define LA_SERVER_API_REQUEST_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"
#include "server/api_types.h"

/* Parse a request body of len bytes (not NUL-terminated).
 * Errors (out untouched, fault and err say why): LA_ERR_INVALID_ARG (body not UTF-8, not
 * JSON, not an object; a field of the wrong type or out of range; an unknown method or
 * field name; too many documents; an ill-formed schema), LA_ERR_UNSUPPORTED (a refused
 * field, a value the engine cannot honour, a schema keyword outside the subset),
 * LA_ERR_NO_MEMORY. Checks that need the tokenizer (context length, empty documents) are
 * the engine's, at submit. */
la_status la_api_request_parse(la_api_kind kind, const char *body, size_t len,
                               const la_api_limits *lim, la_api_request *out,
                               la_api_fault *fault, la_err *err);
void la_api_request_fini(la_api_request *r);

/* Byte offset of the first invalid UTF-8 sequence in s[0:n] (overlong forms, surrogates
 * and code points above U+10FFFF are invalid), or n if s is valid. */
size_t la_api_utf8_invalid_at(const char *s, size_t n);

#endif
