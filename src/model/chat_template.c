/* A checkpoint's chat template (model/chat_template.h): the Jinja render context built as
 * transformers builds it, and the documents' place found by the sentinel. */
#include "model/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "model/jinja.h"

struct la_chat_template {
    la_jinja *jinja;
    char *source, *bos_token, *eos_token;
    bool system_layout;
};

static char *dup_or_null(const char *s, bool *oom) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = true;
    return d;
}

/* messages -> {"messages": [...], "add_generation_prompt": true, "tools": null,
 * "documents": null, "bos_token": ..., "eos_token": ...} */
static cJSON *context(const la_chat_template *t, const la_chat_message *msgs, int32_t n) {
    cJSON *ctx = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(ctx, "messages");
    bool ok = ctx && list;
    for (int32_t i = 0; ok && i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        ok = m && cJSON_AddStringToObject(m, "role", msgs[i].role) &&
             cJSON_AddStringToObject(m, "content", msgs[i].content) && cJSON_AddItemToArray(list, m);
        if (!ok) cJSON_Delete(m);
    }
    ok = ok && cJSON_AddNullToObject(ctx, "tools") && cJSON_AddNullToObject(ctx, "documents") &&
         cJSON_AddTrueToObject(ctx, "add_generation_prompt");
    if (ok && t->bos_token) ok = cJSON_AddStringToObject(ctx, "bos_token", t->bos_token) != NULL;
    if (ok && t->eos_token) ok = cJSON_AddStringToObject(ctx, "eos_token", t->eos_token) != NULL;
    if (!ok) {
        cJSON_Delete(ctx);
        return NULL;
    }
    return ctx;
}

static la_status render(const la_chat_template *t, const la_chat_message *msgs, int32_t n, char **out,
                        la_err *err) {
    cJSON *ctx = context(t, msgs, n);
    if (!ctx) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", t->source);
    la_status s = la_jinja_render(t->jinja, ctx, out, NULL, err);
    cJSON_Delete(ctx);
    return s;
}

la_status la_chat_template_create(const char *text, size_t len, const char *source, const char *bos_token,
                                  const char *eos_token, la_chat_template **out, la_err *err) {
    if (!source) source = "chat template";
    la_chat_template *t = calloc(1, sizeof *t);
    bool oom = !t;
    if (t) {
        t->source = dup_or_null(source, &oom);
        t->bos_token = dup_or_null(bos_token, &oom);
        t->eos_token = dup_or_null(eos_token, &oom);
    }
    if (oom) {
        la_chat_template_destroy(t);
        return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", source);
    }
    la_status s = la_jinja_compile(text, len, source, &t->jinja, err);
    if (s == LA_OK) {
        /* layout probe: does a system message's content reach the text? */
        la_chat_message probe[2] = {{"system", LA_CHAT_DOCUMENTS_SENTINEL}, {"user", "q"}};
        char *text_out = NULL;
        la_err ignored = {0};
        if (render(t, probe, 2, &text_out, &ignored) == LA_OK)
            t->system_layout = strstr(text_out, LA_CHAT_DOCUMENTS_SENTINEL) != NULL;
        else if (ignored.code == LA_ERR_NO_MEMORY)
            s = la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", source);
        free(text_out);
    }
    if (s != LA_OK) {
        la_chat_template_destroy(t);
        return s;
    }
    *out = t;
    return LA_OK;
}

void la_chat_template_destroy(la_chat_template *t) {
    if (!t) return;
    la_jinja_destroy(t->jinja);
    free(t->source);
    free(t->bos_token);
    free(t->eos_token);
    free(t);
}

const char *la_chat_template_source(const la_chat_template *t) { return t->source; }
bool la_chat_template_system_layout(const la_chat_template *t) { return t->system_layout; }

la_status la_chat_template_render(const la_chat_template *t, const la_chat_message *msgs, int32_t n,
                                  char **out, la_err *err) {
    return render(t, msgs, n, out, err);
}

static char *concat(const char *a, const char *b, const char *c, const char *d, const char *e) {
    const char *parts[5] = {a, b, c, d, e};
    size_t n = 0;
    for (int i = 0; i < 5; i++) n += parts[i] ? strlen(parts[i]) : 0;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    s[0] = 0;
    for (int i = 0; i < 5; i++)
        if (parts[i]) strcat(s, parts[i]);
    return s;
}

la_status la_chat_template_render_around(const la_chat_template *t, const la_chat_message *msgs, int32_t n,
                                         char **preamble, char **tail, la_err *err) {
    for (int32_t i = 0; i < n; i++)
        if (strstr(msgs[i].content, LA_CHAT_DOCUMENTS_SENTINEL))
            return la_err_set(err, LA_ERR_INVALID_ARG, "messages[%d] contains the documents' marker %s", i,
                              LA_CHAT_DOCUMENTS_SENTINEL);
    const char *system = LA_RAG_DEFAULT_SYSTEM;
    int32_t first = 0;
    if (n > 0 && !strcmp(msgs[0].role, "system")) {
        system = msgs[0].content;
        first = 1;
    }
    if (first >= n) return la_err_set(err, LA_ERR_INVALID_ARG, "messages: no question after the system message");
    la_chat_message *conv = calloc((size_t)(n + 1), sizeof *conv);
    char *a = NULL, *b = NULL;
    if (!conv) return la_err_set(err, LA_ERR_NO_MEMORY, "chat template: out of memory");
    int32_t k = 0;
    if (t->system_layout) {
        a = concat(system, "\n\n", LA_CHAT_DOCUMENTS_SENTINEL, NULL, NULL);
        b = concat(LA_RAG_INSTRUCTION, "Question: ", msgs[first].content, NULL, NULL);
        conv[k++] = (la_chat_message){"system", a};
        conv[k++] = (la_chat_message){"user", b};
    } else {
        a = concat(system, "\n\n" LA_CHAT_DOCUMENTS_SENTINEL "\n\n", LA_RAG_INSTRUCTION, "Question: ",
                   msgs[first].content);
        conv[k++] = (la_chat_message){"user", a};
    }
    for (int32_t i = first + 1; i < n; i++) conv[k++] = msgs[i];
    la_status s = LA_OK;
    char *text = NULL;
    if (!a || (t->system_layout && !b)) s = la_err_set(err, LA_ERR_NO_MEMORY, "chat template: out of memory");
    if (s == LA_OK) s = render(t, conv, k, &text, err);
    free(conv);
    free(a);
    free(b);
    if (s != LA_OK) return s;
    char *at = strstr(text, LA_CHAT_DOCUMENTS_SENTINEL);
    size_t count = 0;
    for (char *p = at; p; p = strstr(p + 1, LA_CHAT_DOCUMENTS_SENTINEL)) count++;
    if (count != 1) {
        free(text);
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "%s: the template writes the documents' place %zu times, not once (the system "
                          "message's content, or the first user message's)",
                          t->source, count);
    }
    *at = 0;
    char *pre = strdup(text), *post = strdup(at + strlen(LA_CHAT_DOCUMENTS_SENTINEL));
    free(text);
    if (!pre || !post) {
        free(pre);
        free(post);
        return la_err_set(err, LA_ERR_NO_MEMORY, "chat template: out of memory");
    }
    *preamble = pre;
    *tail = post;
    return LA_OK;
}
