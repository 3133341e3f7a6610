/* Prompt templates: a chat request rendered to text blocks (preamble, documents, tail) that
 * the engine tokenizes each alone, by the checkpoint's own chat template
 * (model/chat_template.h) or by a Block-FT RAG format (documents as their own blocks):
 *
 * RAG layout (Block-Attention fine-tuning, Ma et al. ICLR 2025), Llama-3 header format:
 *   preamble  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
 *             + (system message, or LA_RAG_DEFAULT_SYSTEM) + "\n\n"
 *   document  "- Title: {title}\n{text}\n"   ({title, text} documents; a document given
 *             without a title is used verbatim)
 *   tail      "<|eot_id|>" + the conversation, where the first user turn reads
 *             LA_RAG_INSTRUCTION + "Question: " + content, then the assistant header.
 * The exact strings are documented in the README ("Chat templates and documents") and used verbatim by
 * tools/demo (the bundled model was trained on them).
 */
#ifndef LA_MODEL_PROMPT_TEMPLATE_H
#define LA_MODEL_PROMPT_TEMPLATE_H

#include <stdint.h>

#include "lazyattn/types.h"
#include "model/chat_template.h"

/* Rendered blocks. preamble may be NULL (no documents). Free with la_rendered_prompt_free. */
typedef struct la_rendered_prompt {
    char *preamble;
    char **docs;     /* [n_docs] */
    int32_t n_docs;
    char *tail;
} la_rendered_prompt;

/* Render messages (roles "system", "user", "assistant") and documents in a Block-FT format
 * (fmt LA_CHAT_FORMAT_LLAMA3 or LA_CHAT_FORMAT_TULU; the exact strings are in
 * prompt_template.c).
 *   docs  [n_docs]: text (and optional title) of each document
 * Errors: LA_ERR_INVALID_ARG (unknown role, no user message, NULL content, another fmt),
 * LA_ERR_NO_MEMORY. *out is written only on success. */
la_status la_prompt_render(la_chat_format fmt, const la_chat_message *msgs, int32_t n_msgs,
                           const la_segment *docs, int32_t n_docs, la_rendered_prompt *out,
                           la_err *err);

/* The Block-FT format a chat template is: LA_CHAT_FORMAT_LLAMA3 or LA_CHAT_FORMAT_TULU when
 * it renders a set of probe conversations (system or not, multi-turn, white space to trim)
 * byte for byte as that format does without documents (the bundled model's template is
 * Llama 3's; Tulu 3's is Tulu's), else LA_CHAT_FORMAT_TEMPLATE. NULL: LA_CHAT_FORMAT_AUTO
 * (no template). Behaviour, not text: no substring of the template is looked at. */
la_chat_format la_prompt_template_family(const la_chat_template *t);

/* Render a chat request.
 *   tpl, family  the model's chat template (NULL: none) and la_prompt_template_family(tpl)
 *   fmt          the request's format; LA_CHAT_FORMAT_AUTO means family
 * With documents, LLAMA3 / TULU give their Block-FT RAG format (la_prompt_render) and
 * TEMPLATE the template's rendering around the documents (la_chat_template_render_around);
 * without documents the template renders the conversation whenever fmt is AUTO, TEMPLATE or
 * the template's own family, else the hard-coded format does. Errors: LA_ERR_INVALID_ARG
 * (as la_prompt_render; no chat template when one is needed, naming the fix; what the
 * template raised), LA_ERR_TOO_LONG, LA_ERR_NO_MEMORY. *out is written only on success. */
la_status la_prompt_render_chat(const la_chat_template *tpl, la_chat_format family, la_chat_format fmt,
                                const la_chat_message *msgs, int32_t n_msgs, const la_segment *docs,
                                int32_t n_docs, la_rendered_prompt *out, la_err *err);
void la_rendered_prompt_free(la_rendered_prompt *p);

/* One document block: "- Title: {title}\n{text}\n" when doc->title is set, else the text
 * verbatim (doc->len bytes, or NUL-terminated when len == 0). Heap string (caller frees),
 * NULL on out of memory. */
char *la_prompt_render_document(const la_segment *doc);

#endif
