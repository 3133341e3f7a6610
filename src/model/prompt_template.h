/* Prompt templates: chat formatting and the Block-FT RAG template (documents as their own
 * blocks). Rendering produces TEXT blocks; the engine tokenizes each block alone.
 *
 * RAG layout (Block-Attention fine-tuning, Ma et al. ICLR 2025), Llama-3 header format:
 *   preamble  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
 *             + (system message, or LA_RAG_DEFAULT_SYSTEM) + "\n\n"
 *   document  "- Title: {title}\n{text}\n"   ({title, text} documents; a document given
 *             without a title is used verbatim)
 *   tail      "<|eot_id|>" + the conversation, where the first user turn reads
 *             LA_RAG_INSTRUCTION + "Question: " + content, then the assistant header.
 * The exact strings are documented in the README ("Prompt template") and used verbatim by
 * tools/demo (the bundled model was trained on them).
 */
#ifndef LA_MODEL_PROMPT_TEMPLATE_H
#define LA_MODEL_PROMPT_TEMPLATE_H

#include <stdint.h>

#include "lazyattn/lazyattn.h"
#include "model/tokenizer.h"

#define LA_RAG_DEFAULT_SYSTEM                                                                  \
    "You are an intelligent AI assistant. Please answer questions based on the user's "       \
    "instructions. Below are some reference documents that may help you in answering the "    \
    "user's question."
#define LA_RAG_INSTRUCTION                                                                     \
    "Please write a high-quality answer for the given question using only the provided "      \
    "search documents (some of which might be irrelevant).\n"

/* Pick the chat format from the tokenizer's chat_template (Llama-3 headers when it
 * mentions <|start_header_id|>, Tulu when it mentions <|user|>); LA_CHAT_FORMAT_LLAMA3 when
 * there is no template. */
la_chat_format la_chat_format_detect(const la_tokenizer *tok);

/* Rendered blocks. preamble may be NULL (no documents). Free with la_rendered_prompt_free. */
typedef struct la_rendered_prompt {
    char *preamble;
    char **docs;     /* [n_docs] */
    int32_t n_docs;
    char *tail;
} la_rendered_prompt;

/* Render messages (roles "system", "user", "assistant") and documents.
 *   docs  [n_docs]: text (and optional title) of each document
 * Errors: LA_ERR_INVALID_ARG (unknown role, no user message, NULL content),
 * LA_ERR_NO_MEMORY. *out is written only on success. */
la_status la_prompt_render(la_chat_format fmt, const la_chat_message *msgs, int32_t n_msgs,
                           const la_segment *docs, int32_t n_docs, la_rendered_prompt *out,
                           la_err *err);
void la_rendered_prompt_free(la_rendered_prompt *p);

/* One document block: "- Title: {title}\n{text}\n" when doc->title is set, else the text
 * verbatim (doc->len bytes, or NUL-terminated when len == 0). Heap string (caller frees),
 * NULL on out of memory. */
char *la_prompt_render_document(const la_segment *doc);

#endif
