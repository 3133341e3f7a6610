/* Prompt templates: chat formatting and the Block-FT RAG template (model/prompt_template.h).
 *
 * ---- What each format renders (exact bytes; tests/model/test_prompt_template.c) ---------
 *
 * Llama-3, no documents: Meta's Llama-3 Instruct chat_template with add_generation_prompt
 *   "<|begin_of_text|>"
 *   + per message "<|start_header_id|>{role}<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>"
 *   + "<|start_header_id|>assistant<|end_header_id|>\n\n"
 *   trim() is Jinja's `| trim` (Python str.strip(): Unicode whitespace at both ends), as in
 *   the template shipped with Llama-3 / 3.1 Instruct. Everything lands in `tail`.
 *
 * Llama-3, with documents: the Block-FT RAG template of tools/demo/prompt.py (PREAMBLE,
 *   DOC_FMT, QUESTION_FMT), byte for byte; content is used verbatim (no trim):
 *   preamble "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
 *            + (messages[0].content if it is a system message, else LA_RAG_DEFAULT_SYSTEM)
 *            + "\n\n"
 *   docs     la_prompt_render_document() of each document
 *   tail     "<|eot_id|>"
 *            + "<|start_header_id|>user<|end_header_id|>\n\n" + LA_RAG_INSTRUCTION
 *              + "Question: " + first user content + "<|eot_id|>"
 *            + each later message "<|start_header_id|>{role}<|end_header_id|>\n\n"
 *              + content + "<|eot_id|>"
 *            + "<|start_header_id|>assistant<|end_header_id|>\n\n"
 *
 * Tulu, no documents: open-instruct's "tulu" chat_template (the one Tulu 3 ships), with
 *   add_generation_prompt; no BOS is written (the template has no bos_token):
 *   system "<|system|>\n" + c + "\n"; user "<|user|>\n" + c + "\n";
 *   assistant "<|assistant|>\n" + c + "<|end_of_text|>" + ("\n" unless it is the last
 *   message); then "<|assistant|>\n". "<|end_of_text|>" is Tulu 3's eos_token.
 *
 * Tulu, with documents: the Tulu3-Block-FT RAG template, i.e. the Llama-3 RAG prompt put
 *   through Block-Attention's data_process/rag/step2_to_tulu_format.py
 *   (github.com/TemporaryLoRA/Block-Attention), which replaces
 *   "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" by "<|user|>\n",
 *   "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n" by "\n\n" and
 *   "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" by "\n<|assistant|>\n":
 *   preamble "<|user|>\n" + (system content or LA_RAG_DEFAULT_SYSTEM) + "\n\n"
 *   docs     la_prompt_render_document() of each document
 *   tail     "\n\n" + LA_RAG_INSTRUCTION + "Question: " + first user content + "\n"
 *            + each later message in the Tulu format above + "<|assistant|>\n"
 *
 * With documents, the conversation after the optional leading system message must begin
 * with a user message (the question the documents answer). A system message elsewhere is
 * rendered in place as a turn of its own.
 */
#include "model/prompt_template.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* ============================================================ string builder ======== */

typedef struct strbuf {
    char *p;
    size_t n, cap;
    bool oom;
} strbuf;

static void sb_add(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* The finished string (never NULL unless out of memory); the builder is emptied. */
static char *sb_take(strbuf *b) {
    if (!b->oom && !b->p) sb_add(b, "", 0);
    if (b->oom) {
        free(b->p);
        b->p = NULL;
    }
    char *p = b->p;
    *b = (strbuf){0};
    return p;
}

/* ============================================================ trim ================== */

/* Length of the Python-whitespace character at s[0:n] (str.isspace()), or 0. */
static size_t space_len(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c == 0xc2 && n >= 2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3) {
        unsigned cp = ((c & 0x0fu) << 12) | ((s[1] & 0x3fu) << 6) | (s[2] & 0x3fu);
        if ((c & 0xf0) == 0xe0 && (s[1] & 0xc0) == 0x80 && (s[2] & 0xc0) == 0x80 &&
            (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
             cp == 0x202f || cp == 0x205f || cp == 0x3000))
            return 3;
    }
    return 0;
}

/* Append s without leading and trailing whitespace (Jinja's `| trim`). */
static void sb_add_trimmed(strbuf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), k;
    while ((k = space_len(p, n)) > 0) {
        p += k;
        n -= k;
    }
    for (bool again = true; again && n > 0;) {
        again = false;
        for (size_t w = 1; w <= 3 && w <= n; w++)
            if (space_len(p + n - w, w) == w) {
                n -= w;
                again = true;
                break;
            }
    }
    sb_add(b, (const char *)p, n);
}

/* ============================================================ rendering ============= */

#define LLAMA3_BOS "<|begin_of_text|>"
#define LLAMA3_EOT "<|eot_id|>"
#define TULU_EOS "<|end_of_text|>"

char *la_prompt_render_document(const la_segment *doc) {
    const char *text = doc->text ? doc->text : "";
    size_t len = doc->len ? doc->len : strlen(text);
    strbuf b = {0};
    if (doc->title) {
        sb_str(&b, "- Title: ");
        sb_str(&b, doc->title);
        sb_str(&b, "\n");
        sb_add(&b, text, len);
        sb_str(&b, "\n");
    } else {
        sb_add(&b, text, len);
    }
    return sb_take(&b);
}

static void llama3_turn(strbuf *b, const char *role, const char *content, bool trim) {
    sb_str(b, "<|start_header_id|>");
    sb_str(b, role);
    sb_str(b, "<|end_header_id|>\n\n");
    if (trim) sb_add_trimmed(b, content);
    else sb_str(b, content);
    sb_str(b, LLAMA3_EOT);
}

static void tulu_turn(strbuf *b, const char *role, const char *content, bool last) {
    if (!strcmp(role, "system")) {
        sb_str(b, "<|system|>\n");
        sb_str(b, content);
        sb_str(b, "\n");
    } else if (!strcmp(role, "user")) {
        sb_str(b, "<|user|>\n");
        sb_str(b, content);
        sb_str(b, "\n");
    } else {
        sb_str(b, "<|assistant|>\n");
        sb_str(b, content);
        sb_str(b, TULU_EOS);
        if (!last) sb_str(b, "\n");
    }
}

static la_status check_messages(const la_chat_message *msgs, int32_t n_msgs, la_err *err) {
    if (n_msgs < 1 || !msgs) return la_err_set(err, LA_ERR_INVALID_ARG, "messages: empty list");
    bool user = false;
    for (int32_t i = 0; i < n_msgs; i++) {
        const char *r = msgs[i].role;
        if (!r) return la_err_set(err, LA_ERR_INVALID_ARG, "messages[%d]: role is missing", i);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            return la_err_set(err, LA_ERR_INVALID_ARG,
                              "messages[%d]: unknown role \"%.64s\" (expected system, user or "
                              "assistant)", i, r);
        if (!msgs[i].content)
            return la_err_set(err, LA_ERR_INVALID_ARG, "messages[%d]: content is missing", i);
        user |= !strcmp(r, "user");
    }
    if (!user) return la_err_set(err, LA_ERR_INVALID_ARG, "messages: no user message");
    return LA_OK;
}

la_status la_prompt_render(la_chat_format fmt, const la_chat_message *msgs, int32_t n_msgs,
                           const la_segment *docs, int32_t n_docs, la_rendered_prompt *out,
                           la_err *err) {
    LA_TRY(check_messages(msgs, n_msgs, err));
    if (fmt != LA_CHAT_FORMAT_LLAMA3 && fmt != LA_CHAT_FORMAT_TULU)
        return la_err_set(err, LA_ERR_INVALID_ARG, "prompt template: format %d is not a Block-FT format", (int)fmt);
    if (n_docs < 0 || (n_docs > 0 && !docs))
        return la_err_set(err, LA_ERR_INVALID_ARG, "documents: bad list");
    for (int32_t d = 0; d < n_docs; d++)
        if (docs[d].ids)
            return la_err_set(err, LA_ERR_INVALID_ARG,
                              "documents[%d]: chat requests take documents as text, not token ids", d);
    bool tulu = fmt == LA_CHAT_FORMAT_TULU;
    la_rendered_prompt r = {0};
    strbuf pre = {0}, tail = {0};

    if (n_docs == 0) {
        if (!tulu) sb_str(&tail, LLAMA3_BOS);
        for (int32_t i = 0; i < n_msgs; i++) {
            if (tulu) tulu_turn(&tail, msgs[i].role, msgs[i].content, i == n_msgs - 1);
            else llama3_turn(&tail, msgs[i].role, msgs[i].content, true);
        }
        sb_str(&tail, tulu ? "<|assistant|>\n" : "<|start_header_id|>assistant<|end_header_id|>\n\n");
    } else {
        int32_t first = 0;
        const char *system = LA_RAG_DEFAULT_SYSTEM;
        if (!strcmp(msgs[0].role, "system")) {
            system = msgs[0].content;
            first = 1;
        }
        if (first >= n_msgs || strcmp(msgs[first].role, "user"))
            return la_err_set(err, LA_ERR_INVALID_ARG,
                              "messages[%d]: with documents the conversation must start with a "
                              "user message (the question), not \"%s\"", first,
                              first < n_msgs ? msgs[first].role : "nothing");
        sb_str(&pre, tulu ? "<|user|>\n" : LLAMA3_BOS "<|start_header_id|>system<|end_header_id|>\n\n");
        sb_str(&pre, system);
        sb_str(&pre, "\n\n");
        if (tulu) {
            sb_str(&tail, "\n\n" LA_RAG_INSTRUCTION "Question: ");
            sb_str(&tail, msgs[first].content);
            sb_str(&tail, "\n");
        } else {
            sb_str(&tail, LLAMA3_EOT "<|start_header_id|>user<|end_header_id|>\n\n" LA_RAG_INSTRUCTION
                          "Question: ");
            sb_str(&tail, msgs[first].content);
            sb_str(&tail, LLAMA3_EOT);
        }
        for (int32_t i = first + 1; i < n_msgs; i++) {
            if (tulu) tulu_turn(&tail, msgs[i].role, msgs[i].content, i == n_msgs - 1);
            else llama3_turn(&tail, msgs[i].role, msgs[i].content, false);
        }
        sb_str(&tail, tulu ? "<|assistant|>\n" : "<|start_header_id|>assistant<|end_header_id|>\n\n");
        r.preamble = sb_take(&pre);
        r.docs = calloc((size_t)n_docs, sizeof(char *));
        bool ok = r.preamble && r.docs;
        for (int32_t d = 0; ok && d < n_docs; d++) {
            r.docs[d] = la_prompt_render_document(&docs[d]);
            ok = r.docs[d] != NULL;
            r.n_docs = d + 1;
        }
        if (!ok) {
            free(tail.p);
            la_rendered_prompt_free(&r);
            return la_err_set(err, LA_ERR_NO_MEMORY, "prompt template: out of memory");
        }
    }
    r.tail = sb_take(&tail);
    if (!r.tail) {
        la_rendered_prompt_free(&r);
        return la_err_set(err, LA_ERR_NO_MEMORY, "prompt template: out of memory");
    }
    *out = r;
    return LA_OK;
}

void la_rendered_prompt_free(la_rendered_prompt *p) {
    if (!p) return;
    free(p->preamble);
    for (int32_t d = 0; p->docs && d < p->n_docs; d++) free(p->docs[d]);
    free(p->docs);
    free(p->tail);
    *p = (la_rendered_prompt){0};
}

/* ============================================================ the chat template ===== */

la_chat_format la_prompt_template_family(const la_chat_template *t) {
    if (!t) return LA_CHAT_FORMAT_AUTO;
    static const la_chat_message k_probes[][4] = {
        {{"user", "Hello"}},
        {{"system", "Be brief."}, {"user", "Hi"}},
        {{"user", "a"}, {"assistant", "b"}, {"user", "c"}},
        {{"system", "s"}, {"user", "q"}, {"assistant", "x"}, {"user", "y"}},
        {{"user", "  spaced \n"}},
    };
    static const int k_lens[] = {1, 2, 3, 4, 1};
    static const la_chat_format k_formats[] = {LA_CHAT_FORMAT_LLAMA3, LA_CHAT_FORMAT_TULU};
    for (size_t f = 0; f < sizeof k_formats / sizeof k_formats[0]; f++) {
        bool same = true;
        for (size_t p = 0; same && p < sizeof k_lens / sizeof k_lens[0]; p++) {
            la_rendered_prompt want = {0};
            char *got = NULL;
            la_err ignored = {0};
            if (la_prompt_render(k_formats[f], k_probes[p], k_lens[p], NULL, 0, &want, &ignored) != LA_OK)
                return LA_CHAT_FORMAT_TEMPLATE;
            same = la_chat_template_render(t, k_probes[p], k_lens[p], &got, &ignored) == LA_OK &&
                   !strcmp(got, want.tail);
            free(got);
            la_rendered_prompt_free(&want);
        }
        if (same) return k_formats[f];
    }
    return LA_CHAT_FORMAT_TEMPLATE;
}

la_status la_prompt_render_chat(const la_chat_template *tpl, la_chat_format family, la_chat_format fmt,
                                const la_chat_message *msgs, int32_t n_msgs, const la_segment *docs,
                                int32_t n_docs, la_rendered_prompt *out, la_err *err) {
    LA_TRY(check_messages(msgs, n_msgs, err));
    la_chat_format eff = fmt == LA_CHAT_FORMAT_AUTO ? family : fmt;
    if (eff == LA_CHAT_FORMAT_AUTO || (eff == LA_CHAT_FORMAT_TEMPLATE && !tpl))
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "chat messages need a chat template, and this model has none (no chat_template in "
                          "tokenizer_config.json, no chat_template.jinja): give one (--chat-template FILE), "
                          "choose a format (llama3, tulu) or send a raw prompt (--raw)");
    if (eff != LA_CHAT_FORMAT_TEMPLATE && eff != LA_CHAT_FORMAT_LLAMA3 && eff != LA_CHAT_FORMAT_TULU)
        return la_err_set(err, LA_ERR_INVALID_ARG, "chat format %d is unknown", (int)fmt);
    if (eff != LA_CHAT_FORMAT_TEMPLATE && (n_docs > 0 || !tpl || eff != family))
        return la_prompt_render(eff, msgs, n_msgs, docs, n_docs, out, err);
    if (n_docs < 0 || (n_docs > 0 && !docs)) return la_err_set(err, LA_ERR_INVALID_ARG, "documents: bad list");
    la_rendered_prompt r = {0};
    la_status s;
    if (n_docs == 0) {
        s = la_chat_template_render(tpl, msgs, n_msgs, &r.tail, err);
    } else {
        int32_t first = strcmp(msgs[0].role, "system") ? 0 : 1;
        if (first >= n_msgs || strcmp(msgs[first].role, "user"))
            return la_err_set(err, LA_ERR_INVALID_ARG,
                              "messages[%d]: with documents the conversation must start with a user message (the "
                              "question), not \"%s\"", first, first < n_msgs ? msgs[first].role : "nothing");
        for (int32_t d = 0; d < n_docs; d++)
            if (docs[d].ids)
                return la_err_set(err, LA_ERR_INVALID_ARG,
                                  "documents[%d]: chat requests take documents as text, not token ids", d);
        s = la_chat_template_render_around(tpl, msgs, n_msgs, &r.preamble, &r.tail, err);
        if (s == LA_OK) {
            r.docs = calloc((size_t)n_docs, sizeof(char *));
            for (int32_t d = 0; r.docs && d < n_docs; d++) {
                if (!(r.docs[d] = la_prompt_render_document(&docs[d]))) break;
                r.n_docs = d + 1;
            }
            if (r.n_docs != n_docs) s = la_err_set(err, LA_ERR_NO_MEMORY, "prompt template: out of memory");
        }
    }
    if (s != LA_OK) {
        la_rendered_prompt_free(&r);
        return s;
    }
    *out = r;
    return LA_OK;
}
