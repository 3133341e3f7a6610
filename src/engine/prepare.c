/* Request preparation (prepare.h): the chat template, tokenization and the segmentation of
 * a request into documents and tail.
 */
#include "engine/prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "model/chat_template.h"
#include "model/prompt_template.h"
#include "tokenizer/encode_cache.h"
#include "tokenizer/tokenizer.h"

/* ---- the chat template ------------------------------------------------------------------- */

la_status la_engine_chat_template_load(la_engine *e, const la_engine_options *o, la_err *err) {
    char *file_text = NULL, *source = NULL;
    const char *text = NULL;
    size_t len = 0;
    la_status s = LA_OK;
    if (o->chat_template_file) {
        if (!e->tok)
            return la_err_set(err, LA_ERR_INVALID_ARG,
                              "chat template %s: chat requests need a tokenizer, and this engine has none",
                              o->chat_template_file);
        LA_TRY(la_file_read(o->chat_template_file, &file_text, &len, err));
        text = file_text;
        source = strdup(o->chat_template_file);
    } else if (e->tok && la_tokenizer_chat_template(e->tok)) {
        const char *dir = o->tokenizer_dir ? o->tokenizer_dir : o->model_dir;
        text = la_tokenizer_chat_template(e->tok);
        len = strlen(text);
        if (asprintf(&source, "%s: chat_template", dir ? dir : "tokenizer") < 0) source = NULL;
    }
    if (text && !source) s = la_err_set(err, LA_ERR_NO_MEMORY, "chat template: out of memory");
    if (s == LA_OK && text)
        s = la_chat_template_create(text, len, source, la_tokenizer_bos_token(e->tok),
                                    la_tokenizer_eos_token(e->tok), &e->chat, err);
    free(file_text);
    free(source);
    if (s == LA_OK) e->chat_family = la_prompt_template_family(e->chat);
    return s;
}

static int32_t bos_id(const la_engine *e) {
    return e->tok ? la_tokenizer_bos_id(e->tok) : e->cfg.bos_id;
}

static bool tok_adds_bos(const la_engine *e) {
    return e->tok && la_tokenizer_adds_bos(e->tok) && bos_id(e) >= 0;
}

/* Tokenize one segment (text or ids). *ids is heap memory the caller frees. A document's
 * text (doc) goes through the document token cache under the request's cache salt (NULL:
 * none). */
static la_status encode_segment(const la_engine *e, const la_segment *seg, bool add_special, bool doc,
                                const char *salt, const char *what, int32_t **ids, int32_t *n, la_err *err) {
    if (seg->ids) {
        int32_t v = e->cfg.vocab_size;
        for (int32_t i = 0; i < seg->n_ids; i++)
            if (seg->ids[i] < 0 || seg->ids[i] >= v)
                return la_err_set(err, LA_ERR_INVALID_ARG, "%s: token id %d at %d outside [0, %d)",
                                  what, seg->ids[i], i, v);
        /* ids that already start with BOS get no second one (vLLM takes token ids as they are;
         * a client that tokenized with special tokens has its BOS); after documents, see
         * build_tokens */
        bool has_bos = seg->n_ids > 0 && seg->ids[0] == bos_id(e);
        int32_t extra = add_special && tok_adds_bos(e) && !has_bos ? 1 : 0;
        int32_t *p = malloc(sizeof(int32_t) * (size_t)(seg->n_ids + extra + 1));
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", what);
        if (extra) p[0] = bos_id(e);
        memcpy(p + extra, seg->ids, sizeof(int32_t) * (size_t)seg->n_ids);
        *ids = p;
        *n = seg->n_ids + extra;
        return LA_OK;
    }
    if (!e->tok)
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "%s: this engine has no tokenizer (random weights): give token ids", what);
    if (!seg->text && seg->len)
        return la_err_set(err, LA_ERR_INVALID_ARG, "%s: text is NULL with len %zu", what, seg->len);
    const char *text = seg->text ? seg->text : "";
    size_t len = seg->len ? seg->len : strlen(text);
    la_status s = la_encode_cache_encode(doc ? e->doc_tokens : NULL, e->tok, salt, text, len, add_special, ids, n, err);
    if (s != LA_OK) la_err_prefix(err, "%s", what);
    return s;
}

static bool segment_given(const la_segment *s) {
    return s->ids ? s->n_ids > 0 : (s->text && (s->len > 0 || s->text[0]));
}

/* Build a request's token segments (see la_engine_submit in the public header). */
/* A document given as text must have some: a title alone (or a chat template) would still
 * render it to tokens. Refused as the API refuses it. */
static la_status doc_has_text(const la_segment *seg, const char *what, la_err *err) {
    if (!seg->ids && (!seg->text || (seg->len == 0 && !seg->text[0])))
        return la_err_set(err, LA_ERR_INVALID_ARG, "%s is empty (no text)", what);
    return LA_OK;
}

la_status la_document_tokens(const la_engine *e, const la_segment *seg, const char *salt, const char *what,
                             int32_t **ids, int32_t *n, la_err *err) {
    LA_TRY(doc_has_text(seg, what, err));
    la_segment doc = *seg;
    char *rendered = NULL;
    if (doc.title && !doc.ids) { /* titled document: the RAG template's block */
        if (!(rendered = la_prompt_render_document(&doc)))
            return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", what);
        doc = (la_segment){.text = rendered};
    }
    la_status s = encode_segment(e, &doc, false, true, salt, what, ids, n, err);
    free(rendered);
    return s;
}

/* Bytes of text a segment holds (0 for token ids). */
static size_t text_bytes(const la_segment *s) {
    if (s->ids || !s->text) return 0;
    return (s->len ? s->len : strlen(s->text)) + (s->title ? strlen(s->title) : 0);
}

/* Refuse, before tokenizing it, text that cannot fit the context: B bytes are at least
 * B / (3 max_token_bytes) tokens for a tokenizer that deletes nothing
 * (la_tokenizer_max_token_bytes; 0: no bound). A megabyte document against an 8K context is
 * refused without the memory and time of encoding it. p is what gets tokenized (a chat
 * request: after its template, which may drop text). */
static la_status check_text_bound(const la_engine *e, const la_request_params *p, la_err *err) {
    if (!e->tok || la_tokenizer_max_token_bytes(e->tok) == 0) return LA_OK;
    size_t bytes = text_bytes(&p->prompt) + text_bytes(&p->preamble);
    for (int32_t d = 0; d < p->n_docs; d++) bytes += text_bytes(&p->docs[d]);
    const uint64_t per_token = 3 * (uint64_t)la_tokenizer_max_token_bytes(e->tok);
    const uint64_t at_least = bytes / per_token;
    if (at_least > (uint64_t)e->max_context)
        return la_err_set(err, LA_ERR_TOO_LONG,
                          "prompt and documents hold %zu bytes of text: at least %llu tokens, over the context "
                          "of %d tokens",
                          bytes, (unsigned long long)at_least, e->max_context);
    return LA_OK;
}

static la_status build_tokens(la_engine *e, const la_request_params *p, la_request *r, la_err *err) {
    LA_TRY(check_text_bound(e, p, err));
    bool blockwise = la_method_is_blockwise(r->method);
    bool has_pre = segment_given(&p->preamble);
    bool bos_doc = p->add_special && !has_pre && p->n_docs > 0 && tok_adds_bos(e);
    int32_t n_segs = (has_pre || bos_doc ? 1 : 0) + p->n_docs;
    r->doc_ids = calloc((size_t)(n_segs ? n_segs : 1), sizeof(int32_t *));
    r->doc_len = calloc((size_t)(n_segs ? n_segs : 1), sizeof(int32_t));
    if (!r->doc_ids || !r->doc_len) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    int32_t k = 0;
    if (has_pre) {
        LA_TRY(encode_segment(e, &p->preamble, p->add_special, false, NULL, "preamble", &r->doc_ids[0], &r->doc_len[0], err));
        if (r->doc_len[0] == 0) return la_err_set(err, LA_ERR_INVALID_ARG, "preamble: no tokens");
        k = 1;
    } else if (bos_doc) {
        r->doc_ids[0] = malloc(sizeof(int32_t));
        if (!r->doc_ids[0]) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
        r->doc_ids[0][0] = bos_id(e);
        r->doc_len[0] = 1;
        k = 1;
    }
    r->n_docs = k; /* request_free sees what exists so far */
    for (int32_t d = 0; d < p->n_docs; d++, k++) {
        char what[48];
        snprintf(what, sizeof what, "documents[%d]", d);
        LA_TRY(la_document_tokens(e, &p->docs[d], p->cache_salt, what, &r->doc_ids[k], &r->doc_len[k], err));
        r->n_docs = k + 1;
        if (r->doc_len[k] == 0)
            return la_err_set(err, LA_ERR_INVALID_ARG, "documents[%d] is empty (no tokens)", d);
    }
    for (int32_t d = 0; d < r->n_docs; d++) r->n_doc_tokens += r->doc_len[d];

    int32_t *ids = NULL, n = 0;
    LA_TRY(encode_segment(e, &p->prompt, p->add_special && n_segs == 0, false, NULL, "prompt", &ids, &n, err));
    /* token ids tokenized with special tokens start with BOS, which the sequence already has
     * before the documents (a BOS block, or the preamble's): not a second time after them */
    if (p->add_special && n_segs > 0 && p->prompt.ids && n > 0 && ids[0] == bos_id(e) && tok_adds_bos(e)) {
        memmove(ids, ids + 1, sizeof(int32_t) * (size_t)(n - 1));
        n--;
    }
    if (!blockwise) { /* the documents go inside the prompt */
        for (int32_t d = 0; d < r->n_docs; d++) {
            la_status s = la_request_tail_append(r, r->doc_ids[d], r->doc_len[d], err);
            if (s != LA_OK) {
                free(ids);
                return s;
            }
        }
    }
    la_status s = la_request_tail_append(r, ids, n, err);
    free(ids);
    LA_TRY(s);
    if (!blockwise) {
        for (int32_t d = 0; d < r->n_docs; d++) free(r->doc_ids[d]);
        r->n_docs = 0;
    }
    r->n_prompt = r->n_tail;
    if (r->n_tail == 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "prompt: no tokens after the documents");
    return LA_OK;
}

la_status la_request_prepare(la_engine *e, const la_request_params *p, la_request *r, la_err *err) {
    la_status s = LA_OK;
    if (p->n_messages > 0) {
        /* the template renders an empty document to text; a raw request's documents are
         * checked where they are tokenized (la_document_tokens) */
        for (int32_t d = 0; d < p->n_docs && p->docs; d++) {
            char what[48];
            snprintf(what, sizeof what, "documents[%d]", d);
            LA_TRY(doc_has_text(&p->docs[d], what, err));
        }
        /* chat: render the conversation (and the RAG template around documents) to text
         * blocks, then tokenize them like a raw request whose text carries the specials */
        la_rendered_prompt rendered;
        if (!e->tok)
            s = la_err_set(err, LA_ERR_INVALID_ARG, "chat messages need a tokenizer");
        else if (segment_given(&p->prompt) || segment_given(&p->preamble) || !p->messages)
            s = la_err_set(err, LA_ERR_INVALID_ARG, "give either messages or prompt/preamble, not both");
        if (s == LA_OK)
            s = la_prompt_render_chat(e->chat, e->chat_family, p->chat_format, p->messages, p->n_messages,
                                      p->docs, p->n_docs, &rendered, err);
        if (s == LA_OK) {
            la_segment *docs = calloc((size_t)(rendered.n_docs ? rendered.n_docs : 1), sizeof(la_segment));
            if (!docs) s = la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
            for (int32_t d = 0; docs && d < rendered.n_docs; d++) docs[d].text = rendered.docs[d];
            la_request_params q = *p;
            q.preamble = (la_segment){.text = rendered.preamble};
            q.prompt = (la_segment){.text = rendered.tail};
            q.docs = docs;
            q.n_docs = rendered.n_docs;
            q.add_special = false; /* the template writes <|begin_of_text|> itself */
            if (s == LA_OK) s = build_tokens(e, &q, r, err);
            free(docs);
            la_rendered_prompt_free(&rendered);
        }
    } else {
        s = build_tokens(e, p, r, err);
    }
    return s;
}
