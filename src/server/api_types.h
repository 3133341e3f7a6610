/* The types of a parsed request of the OpenAI-compatible API (the parser: api_request.h),
 * apart so that the parser's helpers (api_parse.h, api_sampling.h) can use them. Private to
 * src/server/. */
#ifndef LA_SERVER_API_TYPES_H
#define LA_SERVER_API_TYPES_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"

typedef enum la_api_kind {
    LA_API_COMPLETION = 0, /* POST /v1/completions */
    LA_API_CHAT,           /* POST /v1/chat/completions */
    LA_API_DOCUMENTS,      /* POST /v1/documents */
    LA_API_TOKENIZE,       /* POST /tokenize: prompt or messages, documents, method,
                              add_special_tokens, return_token_strs (vLLM's fields) */
} la_api_kind;

typedef struct la_api_limits {
    int32_t max_docs;                /* documents per request (the engine's max_docs) */
    int32_t max_tokens;              /* largest max_tokens accepted (the context, tokens) */
    int32_t default_max_tokens;      /* completions without max_tokens (OpenAI: 16) */
    int32_t default_chat_max_tokens; /* chat without max_tokens / max_completion_tokens */
    int32_t max_stop;                /* stop strings per request */
    la_chat_format chat_format;      /* chat requests are rendered in this format */
    int32_t vocab_size;              /* token ids must be below it */
    bool ignore_unknown_fields;      /* unknown field names: accepted (else 400) */
    void (*on_unknown_field)(void *user, const char *name); /* each one accepted */
    void *unknown_user;
} la_api_limits;

/* A parsed request. Everything params points to lives in this struct (and its JSON tree)
 * until la_api_request_fini(). */
typedef struct la_api_request {
    la_api_kind kind;
    const char *model;          /* "model", or NULL when absent */
    bool stream;                /* "stream" */
    bool include_usage;         /* stream_options.include_usage */
    int32_t n;                  /* choices (n) */
    bool logprobs;              /* choices carry logprobs */
    int32_t top_logprobs;       /* alternatives per token (completions: logprobs) */
    bool echo;                  /* completions: the prompt is answered before the text */
    const char *request_id;     /* "request_id", or NULL */
    const char *user;           /* "user" (or safety_identifier), or NULL */
    bool return_token_strs;     /* tokenize: the tokens' strings too */
    la_request_params params;   /* on_event and user are left NULL for the caller */
    /* storage */
    cJSON *root;
    la_segment *docs;
    la_chat_message *msgs;
    const char **stops;
    int32_t *prompt_ids;
    void **owned;
    int32_t n_owned;
} la_api_request;

/* Where a request went wrong, for the OpenAI error body. */
typedef struct la_api_fault {
    char param[64];    /* the field at fault ("max_tokens", "messages[1].content"), "" if none */
    const char *code;  /* "invalid_json", "invalid_type", "invalid_value", "invalid_utf8",
                          "too_many_documents", "unsupported_parameter", "unknown_parameter",
                          or NULL */
} la_api_fault;

#endif
