/* Chat formats and the Block-FT RAG template (model/prompt_template.h). */
#include "model/prompt_template.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* ---- a growable string ----------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* ---- formats ----------------------------------------------------------------------------- */

la_chat_format la_chat_format_detect(const la_tokenizer *tok) {
    const char *t = tok ? la_tokenizer_chat_template(tok) : NULL;
    if (t && strstr(t, "<|start_header_id|>")) return LA_CHAT_FORMAT_LLAMA3;
    if (t && strstr(t, "<|user|>")) return LA_CHAT_FORMAT_TULU;
    return LA_CHAT_FORMAT_LLAMA3;
}

typedef enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT } role;

static la_status parse_role(const la_chat_message *m, int32_t i, role *out, la_err *err) {
    if (!m->role || !m->content)
        return la_err_set(err, LA_ERR_INVALID_ARG, "messages[%d]: role and content are required", i);
    if (!strcmp(m->role, "system")) *out = ROLE_SYSTEM;
    else if (!strcmp(m->role, "user")) *out = ROLE_USER;
    else if (!strcmp(m->role, "assistant")) *out = ROLE_ASSISTANT;
    else
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "messages[%d]: role '%s' is not one of system, user, assistant", i, m->role);
    return LA_OK;
}

/* One turn. Llama 3: <|start_header_id|>role<|end_header_id|>\n\n content <|eot_id|>.
 * Tulu 3: <|role|>\n content \n (assistant turns end with <|end_of_text|>\n). */
static void put_turn(sbuf *b, la_chat_format fmt, const char *role_name, const char *content,
                     bool assistant) {
    if (fmt == LA_CHAT_FORMAT_TULU) {
        sb_str(b, "<|");
        sb_str(b, role_name);
        sb_str(b, "|>\n");
        sb_str(b, content);
        sb_str(b, assistant ? "<|end_of_text|>\n" : "\n");
        return;
    }
    sb_str(b, "<|start_header_id|>");
    sb_str(b, role_name);
    sb_str(b, "<|end_header_id|>\n\n");
    sb_str(b, content);
    sb_str(b, "<|eot_id|>");
}

static void put_generation_header(sbuf *b, la_chat_format fmt) {
    sb_str(b, fmt == LA_CHAT_FORMAT_TULU ? "<|assistant|>\n" : "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

char *la_prompt_render_document(const la_segment *doc) {
    sbuf b = {0};
    const char *text = doc->text ? doc->text : "";
    size_t len = doc->len ? doc->len : strlen(text);
    if (doc->title) {
        sb_str(&b, "- Title: ");
        sb_str(&b, doc->title);
        sb_str(&b, "\n");
        sb_put(&b, text, len);
        sb_str(&b, "\n");
    } else {
        sb_put(&b, text, len);
    }
    if (!b.s && !b.oom) sb_str(&b, "");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

void la_rendered_prompt_free(la_rendered_prompt *p) {
    if (!p) return;
    free(p->preamble);
    for (int32_t d = 0; p->docs && d < p->n_docs; d++) free(p->docs[d]);
    free(p->docs);
    free(p->tail);
    memset(p, 0, sizeof *p);
}

la_status la_prompt_render(la_chat_format fmt, const la_chat_message *msgs, int32_t n_msgs,
                           const la_segment *docs, int32_t n_docs, la_rendered_prompt *out,
                           la_err *err) {
    if (fmt == LA_CHAT_FORMAT_AUTO) fmt = LA_CHAT_FORMAT_LLAMA3;
    const char *system = NULL;
    bool any_user = false;
    for (int32_t i = 0; i < n_msgs; i++) {
        role r;
        LA_TRY(parse_role(&msgs[i], i, &r, err));
        if (r == ROLE_SYSTEM && !system) system = msgs[i].content;
        any_user |= r == ROLE_USER;
    }
    if (!any_user) return la_err_set(err, LA_ERR_INVALID_ARG, "messages: no user message");
    la_rendered_prompt p = {0};
    sbuf pre = {0}, tail = {0};
    bool rag = n_docs > 0;
    if (rag) {
        /* preamble: the system block, documents follow as their own blocks */
        if (fmt == LA_CHAT_FORMAT_TULU) {
            sb_str(&pre, "<|system|>\n");
        } else {
            sb_str(&pre, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n");
        }
        sb_str(&pre, system ? system : LA_RAG_DEFAULT_SYSTEM);
        sb_str(&pre, "\n\n");
        p.docs = calloc((size_t)n_docs, sizeof(char *));
        if (!p.docs) pre.oom = true;
        for (int32_t d = 0; p.docs && d < n_docs; d++) {
            if (!(p.docs[d] = la_prompt_render_document(&docs[d]))) pre.oom = true;
            p.n_docs = d + 1;
        }
        if (fmt == LA_CHAT_FORMAT_LLAMA3) sb_str(&tail, "<|eot_id|>");
    } else if (fmt == LA_CHAT_FORMAT_LLAMA3) {
        sb_str(&tail, "<|begin_of_text|>");
    }
    bool first_user = true;
    for (int32_t i = 0; i < n_msgs; i++) {
        role r;
        parse_role(&msgs[i], i, &r, NULL);
        if (r == ROLE_SYSTEM && rag && msgs[i].content == system) continue; /* in the preamble */
        if (r == ROLE_USER && rag && first_user) {
            sbuf q = {0};
            sb_str(&q, LA_RAG_INSTRUCTION);
            sb_str(&q, "Question: ");
            sb_str(&q, msgs[i].content);
            put_turn(&tail, fmt, "user", q.oom ? "" : q.s, false);
            tail.oom |= q.oom;
            free(q.s);
            first_user = false;
            continue;
        }
        put_turn(&tail, fmt, msgs[i].role, msgs[i].content, r == ROLE_ASSISTANT);
    }
    put_generation_header(&tail, fmt);
    p.preamble = pre.s;
    p.tail = tail.s;
    if (pre.oom || tail.oom) {
        la_rendered_prompt_free(&p);
        return la_err_set(err, LA_ERR_NO_MEMORY, "prompt template: out of memory");
    }
    *out = p;
    return LA_OK;
}
