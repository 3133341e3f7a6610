/* Response JSON of the OpenAI-compatible API: whole responses, server-sent-event chunks,
 * usage, and the "lazyattn" extension object with timing and reuse:
 *
 *   "usage": {"prompt_tokens", "completion_tokens", "total_tokens",
 *             "prompt_tokens_details": {"cached_tokens": doc_tokens_reused
 *                                                      + prefix_tokens_reused}}
 *   "lazyattn": {"method", "ttft_ms", "tpot_ms", "queue_ms", "e2e_ms", "doc_tokens",
 *                "doc_tokens_reused", "doc_tokens_computed", "prefix_tokens_reused",
 *                "preemptions"}
 * Every function returns a heap string (caller frees) or NULL on out of memory.
 */
#ifndef LA_SERVER_API_RESPONSE_H
#define LA_SERVER_API_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"
#include "server/api_request.h"

/* What every response of one request repeats. */
typedef struct la_api_reply {
    la_api_kind kind;     /* LA_API_COMPLETION or LA_API_CHAT */
    const char *id;       /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;      /* Unix time, seconds */
    const char *model;    /* the served model id */
    const char *method;   /* the method the engine used ("lazy") */
    bool include_usage;   /* streaming: chunks carry "usage": null, a usage chunk ends */
} la_api_reply;

/* "stop" / "length", or NULL (JSON null) for any other reason. */
const char *la_api_finish_name(la_finish_reason why);

/* The whole non-streamed response (text_completion or chat.completion). */
char *la_api_response_json(const la_api_reply *r, const char *text, size_t text_len,
                           la_finish_reason why, const la_request_stats *st);

/* One event "data: {chunk}\n\n".
 *   role  chat: the first chunk, delta {"role": "assistant", "content": ""}
 *   text  new text (NULL: none; chat: delta {} when NULL and not role)
 *   why   LA_FINISH_NONE: finish_reason null; else the last chunk, which also carries the
 *         "lazyattn" object from st */
char *la_api_chunk_sse(const la_api_reply *r, bool role, const char *text, size_t text_len,
                       la_finish_reason why, const la_request_stats *st);

/* The final usage chunk of stream_options.include_usage: "choices": [], "usage": {...}. */
char *la_api_usage_chunk_sse(const la_api_reply *r, const la_request_stats *st);

/* "data: [DONE]\n\n" terminator (static string). */
extern const char la_api_sse_done[];

#endif
