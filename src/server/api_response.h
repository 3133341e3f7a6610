/* Response JSON of the OpenAI-compatible API: whole responses, server-sent-event chunks,
 * usage, logprobs, and the "lazyattn" extension object with timing and reuse:
 *
 *   "usage": {"prompt_tokens", "completion_tokens" (every choice's), "total_tokens",
 *             "prompt_tokens_details": {"cached_tokens": doc_tokens_reused
 *                                                      + prefix_tokens_reused}}
 *   "lazyattn": {"method", "ttft_ms", "tpot_ms", "queue_ms", "e2e_ms", "doc_tokens",
 *                "doc_tokens_reused", "doc_tokens_computed", "prefix_tokens_reused",
 *                "preemptions", "doc_tokens_host", "doc_tokens_disk", "doc_tokens_shared",
 *                "doc_tokens_recomputed" (recovery, kv/plan.h), "doc_tokens_probed" (selected
 *                recovery's probe)}
 *   (doc_tokens_host / _disk / _shared: of doc_tokens_reused, the tokens this request's own
 *   document jobs loaded from that store tier; cached_tokens counts them too)
 *   logprobs, chat         {"content": [{"token", "logprob", "bytes", "top_logprobs":
 *                           [{"token", "logprob", "bytes"}]}], "refusal": null}
 *   logprobs, completions  {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}]
 *                           (the sampled token among them, as OpenAI's legacy API),
 *                           "text_offset" (code points into the choice's text)}
 * A token's "token" is its bytes as UTF-8 (a part of a character becomes U+FFFD); "bytes"
 * are the raw bytes. Every function returns a heap string (caller frees) or NULL on out of
 * memory.
 */
#ifndef LA_SERVER_API_RESPONSE_H
#define LA_SERVER_API_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"
#include "server/api_request.h"

/* One generated token's logprobs. */
typedef struct la_api_lp {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t top_ids[20];
    float top_lps[20];
} la_api_lp;

/* What every response of one request repeats. */
typedef struct la_api_reply {
    la_api_kind kind;     /* LA_API_COMPLETION or LA_API_CHAT */
    const char *id;       /* "cmpl-..." / "chatcmpl-..." */
    int64_t created;      /* Unix time, seconds */
    const char *model;    /* the served model id */
    const char *method;   /* the method the engine used ("lazy") */
    bool include_usage;   /* streaming: chunks carry "usage": null, a usage chunk ends */
    bool logprobs;        /* choices carry "logprobs" (else null) */
    int32_t top_logprobs; /* completions: the sampled token joins its top ones */
    const la_engine *engine; /* token strings of logprobs */
} la_api_reply;

/* One choice's part of a response or chunk. */
typedef struct la_api_choice {
    int32_t index;
    const char *text;     /* [text_len] bytes (NULL: none) */
    size_t text_len;
    const la_api_lp *lps; /* [n_lps] the tokens' logprobs in this part */
    int32_t n_lps;
    int64_t text_offset;  /* completions: code points before this part's first token */
    la_finish_reason why; /* LA_FINISH_NONE: not finished (finish_reason null) */
} la_api_choice;

/* "stop" / "length", or NULL (JSON null) for any other reason. */
const char *la_api_finish_name(la_finish_reason why);

/* The whole non-streamed response (text_completion or chat.completion). */
char *la_api_response_json(const la_api_reply *r, const la_api_choice *choices, int32_t n_choices,
                           const la_request_stats *st);

/* One event "data: {chunk}\n\n" for one choice.
 *   role  chat: the first chunk of the choice, delta {"role": "assistant", "content": ""}
 *   ch    its new text (NULL text: none; chat: delta {}), logprobs, finish
 *   st    non-NULL on the request's last chunk: it carries the "lazyattn" object */
char *la_api_chunk_sse(const la_api_reply *r, bool role, const la_api_choice *ch, const la_request_stats *st);

/* The final usage chunk of stream_options.include_usage: "choices": [], "usage": {...}. */
char *la_api_usage_chunk_sse(const la_api_reply *r, const la_request_stats *st);

/* A token's string as responses show it: its bytes as UTF-8, a part of a character
 * replaced by U+FFFD (a JSON string; NULL on out of memory). */
struct cJSON *la_api_token_string(const la_engine *e, int32_t id);

/* Code points of the token strings of lps[0:n] (completions' text_offset advances by it). */
int64_t la_api_lp_code_points(const la_engine *e, const la_api_lp *lps, int32_t n);

/* "data: [DONE]\n\n" terminator (static string). */
extern const char la_api_sse_done[];

#endif
