/* la_chat_template: a checkpoint's own chat template (tokenizer_config.json chat_template,
 * chat_template.jinja, or a file given instead), compiled once at load by the Jinja subset
 * of model/jinja.h and rendered as transformers' apply_chat_template(messages,
 * add_generation_prompt=True) renders it: variables messages, add_generation_prompt,
 * tools = None, documents = None, bos_token / eos_token (tokenizer_config.json's strings,
 * when set).
 *
 * Documents stay blocks of their own (README "Chat templates and documents"): the template
 * renders a conversation where one marker, LA_CHAT_DOCUMENTS_SENTINEL, stands where the
 * documents go, and the text is cut there into a preamble (before) and a tail (after).
 * The conversation around documents, for messages [system?] user(question) rest...:
 *   layout "system" (the template writes a system message's content):
 *     system: (the system content, or LA_RAG_DEFAULT_SYSTEM) + "\n\n" + SENTINEL
 *     user:   LA_RAG_INSTRUCTION + "Question: " + question;  then rest
 *   layout "user" (the template raises on a system role or drops it):
 *     user:   system + "\n\n" + SENTINEL + "\n\n" + LA_RAG_INSTRUCTION + "Question: " +
 *             question;  then rest
 * (the two layouts of the Block-FT RAG formats of model/prompt_template.h: Llama 3's and
 * Tulu's). The layout is probed at load. A template that writes the marker other than once
 * is an error at render, never a prompt without its documents.
 */
#ifndef LA_MODEL_CHAT_TEMPLATE_H
#define LA_MODEL_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/types.h"

#define LA_RAG_DEFAULT_SYSTEM                                                                  \
    "You are an intelligent AI assistant. Please answer questions based on the user's "       \
    "instructions. Below are some reference documents that may help you in answering the "    \
    "user's question."
#define LA_RAG_INSTRUCTION                                                                     \
    "Please write a high-quality answer for the given question using only the provided "      \
    "search documents (some of which might be irrelevant).\n"
/* Where the documents go in the rendered conversation; no message may contain it. */
#define LA_CHAT_DOCUMENTS_SENTINEL "[[lazyattn-documents-7f3e]]"

typedef struct la_chat_template la_chat_template;

/* Compile text[len]; source names it in messages (a file path, "<dir>/tokenizer_config.json
 * chat_template"); bos_token / eos_token may be NULL (not passed to the template). Caller
 * owns *out; free with la_chat_template_destroy(). Errors: those of la_jinja_compile
 * (LA_ERR_FORMAT, LA_ERR_UNSUPPORTED naming the construct and line, LA_ERR_NO_MEMORY),
 * prefixed with source. *out untouched on error. */
la_status la_chat_template_create(const char *text, size_t len, const char *source, const char *bos_token,
                                  const char *eos_token, la_chat_template **out, la_err *err);
void la_chat_template_destroy(la_chat_template *t); /* NULL: nothing */

const char *la_chat_template_source(const la_chat_template *t);
/* Whether the documents go in the system message (layout "system") or the first user
 * message (layout "user"); probed at create. */
bool la_chat_template_system_layout(const la_chat_template *t);

/* The conversation msgs[n] rendered (add_generation_prompt=True). *out: heap, caller
 * frees. Errors: LA_ERR_INVALID_ARG (what the template raised, e.g. roles that do not
 * alternate, naming source and line), LA_ERR_TOO_LONG, LA_ERR_NO_MEMORY. */
la_status la_chat_template_render(const la_chat_template *t, const la_chat_message *msgs, int32_t n,
                                  char **out, la_err *err);

/* The conversation around documents (above) rendered and cut at the documents' place.
 * msgs must be [system?] user ... (checked by the caller). *preamble, *tail: heap, caller
 * frees both. Errors: as la_chat_template_render, and LA_ERR_INVALID_ARG when a message
 * contains the sentinel or the template writes it other than once. Outputs untouched on
 * error. */
la_status la_chat_template_render_around(const la_chat_template *t, const la_chat_message *msgs, int32_t n,
                                         char **preamble, char **tail, la_err *err);

#endif
