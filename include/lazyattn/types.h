/* lazyattn: value types shared by the public API and the engine's layers. */
#ifndef LAZYATTN_TYPES_H
#define LAZYATTN_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "lazyattn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a request's documents are encoded and reused (DESIGN.md §4).
 *   RECOMPUTE  full causal prefill of the whole prompt; nothing cached
 *   PREFIX     full causal attention; vLLM-style chained hashes over full blocks from the
 *              prompt start; the longest cached prefix is reused
 *   BLOCK      BlockAttention: documents encoded alone (K rotated at local positions) and
 *              cached; per request every document block is copied and the copy's K
 *              re-rotated to its slot
 *   MEPIC      EPIC-like: documents cached with K unrotated; attention rotates every
 *              cached key at its slot
 *   LAZY       LazyAttention: documents cached as for BLOCK; attention de-rotates the query
 *              by Δ_d once per document; cached K/V never copied or touched
 *   BLOCK_REF  the reference for BLOCK/MEPIC/LAZY: the whole sequence computed fresh at
 *              positions 0..N-1 with a block-diagonal mask over the documents; no cache
 */
typedef enum la_method {
    LA_METHOD_RECOMPUTE = 0,
    LA_METHOD_PREFIX,
    LA_METHOD_BLOCK,
    LA_METHOD_MEPIC,
    LA_METHOD_LAZY,
    LA_METHOD_BLOCK_REF,
    LA_METHOD_COUNT
} la_method;

/* "recompute", "prefix", "block", "mepic", "lazy", "block-ref". */
LA_API const char *la_method_name(la_method m);
/* Parse a method name. Errors: LA_ERR_INVALID_ARG naming the value and the choices. */
LA_API la_status la_method_parse(const char *s, la_method *out, la_err *err);
/* Whether the method encodes documents block-diagonally (BLOCK, MEPIC, LAZY, BLOCK_REF). */
LA_API bool la_method_is_blockwise(la_method m);
/* Whether the method keeps each document's K/V in the shared, hashed document cache, reused
 * in any slot (BLOCK, MEPIC, LAZY; BLOCK_REF computes documents fresh per request). */
LA_API bool la_method_caches_docs(la_method m);

/* What a cached document's K/V are computed after (lazy, block, mepic; README "Documents
 * encoded after the preamble"; APE, arXiv 2502.05431, shares the prefix the same way).
 *   ALONE     each document from position 0, seeing itself only (DESIGN.md §2): exact for
 *             models fine-tuned for block attention
 *   PREAMBLE  each document after document 0 (the preamble, or the first document when a
 *             request has none): computed at positions P..P+L-1 seeing the P preamble tokens
 *             and itself, then placed at its slot as ALONE's are (lazy's query de-rotation
 *             by S_d - P); its cache key covers the preamble, so it is reused in any order
 *             under the same preamble. Wins back most of what ALONE loses on models trained
 *             only with full causal attention. */
typedef enum la_doc_context {
    LA_DOC_CONTEXT_ALONE = 0,
    LA_DOC_CONTEXT_PREAMBLE,
    LA_DOC_CONTEXT_COUNT
} la_doc_context;

/* "alone", "preamble". */
LA_API const char *la_doc_context_name(la_doc_context c);
/* Parse a doc context name. Errors: LA_ERR_INVALID_ARG naming the value and the choices. */
LA_API la_status la_doc_context_parse(const char *s, la_doc_context *out, la_err *err);

/* Where the model runs. */
typedef enum la_device { LA_DEVICE_CPU = 0, LA_DEVICE_CUDA } la_device;

/* Parse "cpu" / "cuda". Errors: LA_ERR_INVALID_ARG naming the value. */
LA_API la_status la_device_parse(const char *s, la_device *out, la_err *err);

/* Frozen layout (lazyattn/abi.h): callers pass arrays of it.
 * A span of input: text (UTF-8, `len` bytes or NUL-terminated when len == 0), or token
 * ids when ids != NULL (then text is ignored). */
typedef struct la_segment {
    const char *text;
    size_t len;
    const int32_t *ids;
    int32_t n_ids;
    const char *title;  /* documents of chat requests: rendered "- Title: {title}\n{text}\n" */
} la_segment;

/* Chat formatting of la_request_params.messages (model/prompt_template.h). */
typedef enum la_chat_format {
    LA_CHAT_FORMAT_AUTO = 0, /* the model's chat template: rendered as it is, except that one
                                that renders as LLAMA3 or TULU does gets that format's Block-FT
                                RAG layout for documents (model/prompt_template.h) */
    LA_CHAT_FORMAT_LLAMA3,   /* Block-FT, Llama-3 headers: <|start_header_id|>role ... <|eot_id|> */
    LA_CHAT_FORMAT_TULU,     /* Block-FT, Tulu: <|user|> / <|assistant|> */
    LA_CHAT_FORMAT_TEMPLATE, /* the model's chat template (Jinja), also for documents */
} la_chat_format;

/* Frozen layout (lazyattn/abi.h): callers pass arrays of it. */
typedef struct la_chat_message {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;  /* UTF-8 */
} la_chat_message;

#ifdef __cplusplus
}
#endif
#endif
