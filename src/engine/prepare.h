/* Request preparation (prepare.c): from la_request_params to a request's token segments.
 * Private to src/engine/.
 */
#ifndef LA_ENGINE_PREPARE_H
#define LA_ENGINE_PREPARE_H

#include "engine/engine_internal.h"
#include "engine/request.h"
#include "lazyattn/lazyattn.h"

/* Fill r's documents and tail from p (r->method set), as la_engine_submit documents them
 * (lazyattn.h): chat messages are first rendered with the chat and RAG templates
 * (model/prompt_template.h) to text blocks; each segment is tokenized alone; RECOMPUTE and
 * PREFIX get everything in the tail. Errors: LA_ERR_INVALID_ARG (bad messages or segments,
 * invalid UTF-8, an empty document, a token id out of range), LA_ERR_NO_MEMORY; r then
 * holds what was built so far, which la_request_free frees. Any thread. */
la_status la_request_prepare(la_engine *e, const la_request_params *p, la_request *r,
                             la_err *err);

/* A document's tokens as a request gives them: a titled one rendered with the RAG
 * template's document block, tokenized alone without BOS (through the document token
 * cache, under the request's cache salt: NULL none); what names it in messages. *ids:
 * caller frees. Errors: as la_request_prepare's for a document. Any thread. */
la_status la_document_tokens(const la_engine *e, const la_segment *doc, const char *salt, const char *what,
                             int32_t **ids, int32_t *n, la_err *err);

/* Compile the chat template into e->chat (o->chat_template_file, else the tokenizer's
 * chat_template; none: e->chat NULL) and probe its family into e->chat_family. Errors:
 * LA_ERR_IO (the file), LA_ERR_INVALID_ARG (a file without a tokenizer), those of
 * la_chat_template_create (LA_ERR_FORMAT, LA_ERR_UNSUPPORTED naming the construct). */
la_status la_engine_chat_template_load(la_engine *e, const la_engine_options *o, la_err *err);

#endif
