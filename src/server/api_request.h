/* Request JSON of the OpenAI-compatible API, parsed into engine structs. Request JSON never
 * leaves server/: handlers get a la_request_params ready for la_engine_submit().
 *
 *   POST /v1/completions        model, prompt (string | [string] | [int] | [[int]], one
 *                               prompt), max_tokens (16), temperature, top_p, top_k, seed,
 *                               stop (string | [string]), stream, stream_options
 *                               {include_usage}, n (1), best_of (1), echo (false), logprobs
 *                               (null), suffix (null), ignore_eos
 *   POST /v1/chat/completions   model, messages [{role, content (string | [{type: "text",
 *                               text}])}], max_completion_tokens / max_tokens, and the
 *                               sampling fields above (logprobs false)
 *   extensions on both          documents ([string] | [{title?, text}]), method, cache_salt,
 *                               top_k, ignore_eos
 *   POST /v1/documents          documents, cache_salt, method, model
 * Fields set to null count as absent; unknown fields are ignored, as OpenAI does.
 */
#ifndef LA_SERVER_API_REQUEST_H
#define LA_SERVER_API_REQUEST_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"

typedef enum la_api_kind { LA_API_COMPLETION = 0, LA_API_CHAT, LA_API_DOCUMENTS } la_api_kind;

typedef struct la_api_limits {
    int32_t max_docs;                /* documents per request (the engine's max_docs) */
    int32_t max_tokens;              /* largest max_tokens accepted (the context, tokens) */
    int32_t default_max_tokens;      /* completions without max_tokens (OpenAI: 16) */
    int32_t default_chat_max_tokens; /* chat without max_tokens / max_completion_tokens */
    int32_t max_stop;                /* stop strings per request */
    la_chat_format chat_format;      /* chat requests are rendered in this format */
} la_api_limits;

/* A parsed request. Everything params points to lives in this struct (and its JSON tree)
 * until la_api_request_fini(). */
typedef struct la_api_request {
    la_api_kind kind;
    const char *model;          /* "model", or NULL when absent */
    bool stream;                /* "stream" */
    bool include_usage;         /* stream_options.include_usage */
    la_request_params params;   /* on_event and user are left NULL for the caller */
    /* storage */
    cJSON *root;
    la_segment *docs;
    la_chat_message *msgs;
    const char **stops;
    int32_t *prompt_ids;
    char **owned;
    int32_t n_owned;
} la_api_request;

/* Where a request went wrong, for the OpenAI error body. */
typedef struct la_api_fault {
    char param[64];    /* the field at fault ("max_tokens", "messages[1].content"), "" if none */
    const char *code;  /* "invalid_json", "invalid_type", "invalid_value", "invalid_utf8",
                          "too_many_documents", "unsupported", or NULL */
} la_api_fault;

/* Parse a request body of len bytes (not NUL-terminated).
 * Errors (out untouched, fault and err say why): LA_ERR_INVALID_ARG (body not UTF-8, not
 * JSON, not an object; a field of the wrong type or out of range; an unknown method; n > 1;
 * too many documents), LA_ERR_UNSUPPORTED (a feature the engine lacks: logprobs, echo,
 * suffix, non-text content parts), LA_ERR_NO_MEMORY. Checks that need the tokenizer
 * (context length, empty documents) are the engine's, at submit. */
la_status la_api_request_parse(la_api_kind kind, const char *body, size_t len,
                               const la_api_limits *lim, la_api_request *out,
                               la_api_fault *fault, la_err *err);
void la_api_request_fini(la_api_request *r);

/* Byte offset of the first invalid UTF-8 sequence in s[0:n] (overlong forms, surrogates
 * and code points above U+10FFFF are invalid), or n if s is valid. */
size_t la_api_utf8_invalid_at(const char *s, size_t n);

#endif
