/* Chat and RAG templates (src/model/prompt_template.c, chat_template.c): exact bytes of every
 * Block-FT format, the Llama-3 RAG template byte-identical to tools/demo/prompt.py (what the
 * bundled model is trained on), the family of a template, real checkpoints' templates against
 * jinja2 (tools/oracle/chat_template_fixtures.py) with and without documents, and errors that
 * leave out untouched. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/json.h"
#include "common/test_util.h"
#include "model/prompt_template.h"

#define BOS "<|begin_of_text|>"
#define EOT "<|eot_id|>"
#define HDR(role) "<|start_header_id|>" role "<|end_header_id|>\n\n"

static la_rendered_prompt render(la_chat_format fmt, const la_chat_message *m, int n,
                                 const la_segment *docs, int n_docs) {
    la_rendered_prompt r;
    la_err err = {0};
    la_status s = la_prompt_render(fmt, m, n, docs, n_docs, &r, &err);
    LA_CHECK_OK(s, err);
    return r;
}

/* ============================================================ Llama 3 =============== */

Test(prompt_template, llama3_without_documents_is_metas_chat_template) {
    la_chat_message m[4] = {{"system", "  Be brief.\n"},
                            {"user", "Hi"},
                            {"assistant", "Hello!"},
                            {"user", "\tWhat is 2+2? \xe3\x80\x80"}}; /* U+3000 is whitespace */
    la_rendered_prompt r = render(LA_CHAT_FORMAT_LLAMA3, m, 4, NULL, 0);
    cr_assert_null(r.preamble);
    cr_assert_eq(r.n_docs, 0);
    cr_assert_str_eq(r.tail, BOS HDR("system") "Be brief." EOT HDR("user") "Hi" EOT HDR("assistant")
                     "Hello!" EOT HDR("user") "What is 2+2?" EOT HDR("assistant"));
    la_rendered_prompt_free(&r);
}

/* AUTO is the model's template (la_prompt_render_chat): never Llama 3 by default */
Test(prompt_template, auto_is_no_block_ft_format) {
    la_chat_message m[1] = {{"user", "x"}};
    la_rendered_prompt r;
    la_err err = {0};
    cr_assert_eq(la_prompt_render(LA_CHAT_FORMAT_AUTO, m, 1, NULL, 0, &r, &err), LA_ERR_INVALID_ARG);
}

Test(prompt_template, llama3_rag_is_the_block_ft_template) {
    la_chat_message m[1] = {{"user", "Who directed Alien?"}};
    la_segment docs[2] = {{.text = "Alien is a 1979 film.", .title = "Alien (film)"},
                          {.text = "Ridley Scott is a director.", .title = "Ridley Scott"}};
    la_rendered_prompt r = render(LA_CHAT_FORMAT_LLAMA3, m, 1, docs, 2);
    cr_assert_str_eq(r.preamble, BOS HDR("system") LA_RAG_DEFAULT_SYSTEM "\n\n");
    cr_assert_str_eq(r.preamble,
                     "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                     "You are an intelligent AI assistant. Please answer questions based on the user's "
                     "instructions. Below are some reference documents that may help you in answering "
                     "the user's question.\n\n");
    cr_assert_eq(r.n_docs, 2);
    cr_assert_str_eq(r.docs[0], "- Title: Alien (film)\nAlien is a 1979 film.\n");
    cr_assert_str_eq(r.docs[1], "- Title: Ridley Scott\nRidley Scott is a director.\n");
    cr_assert_str_eq(r.tail,
                     "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                     "Please write a high-quality answer for the given question using only the provided "
                     "search documents (some of which might be irrelevant).\n"
                     "Question: Who directed Alien?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    la_rendered_prompt_free(&r);
}

Test(prompt_template, llama3_rag_equals_tools_demo_prompt_py) {
    /* the template the bundled model is trained on, rendered by Python itself */
    char *py = la_test_path("tools/demo/prompt.py");
    cr_assert(la_file_exists(py), "%s is missing (it is part of the repository)", py);
    free(py);
    la_test_require("command -v python3", "python3");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd %s/tools/demo && python3 -c 'import json, prompt; print(json.dumps(prompt.prompt_blocks("
             "\"Who directed Alien?\", [{\"title\": \"Alien (film)\", \"text\": \"Alien is a 1979 film.\"},"
             " {\"title\": \"T\\u00e9\", \"text\": \"caf\\u00e9\"}])))' 2>&1",
             LA_SOURCE_DIR);
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    int rc = pclose(f);
    cr_assert(rc == 0 && n > 0, "python3 could not run tools/demo/prompt.py (status %d): %s", rc, out);
    cJSON *blocks = cJSON_Parse(out);
    cr_assert(cJSON_IsArray(blocks) && cJSON_GetArraySize(blocks) == 4, "%s", out);
    la_chat_message m[1] = {{"user", "Who directed Alien?"}};
    la_segment docs[2] = {{.text = "Alien is a 1979 film.", .title = "Alien (film)"},
                          {.text = "caf\xc3\xa9", .title = "T\xc3\xa9"}};
    la_rendered_prompt r = render(LA_CHAT_FORMAT_LLAMA3, m, 1, docs, 2);
    cr_assert_str_eq(r.preamble, cJSON_GetArrayItem(blocks, 0)->valuestring);
    cr_assert_str_eq(r.docs[0], cJSON_GetArrayItem(blocks, 1)->valuestring);
    cr_assert_str_eq(r.docs[1], cJSON_GetArrayItem(blocks, 2)->valuestring);
    cr_assert_str_eq(r.tail, cJSON_GetArrayItem(blocks, 3)->valuestring);
    la_rendered_prompt_free(&r);
    cJSON_Delete(blocks);
}

Test(prompt_template, llama3_rag_takes_the_system_message_and_later_turns_verbatim) {
    la_chat_message m[4] = {{"system", "Answer in French."},
                            {"user", " Q1 "},
                            {"assistant", "A1"},
                            {"user", "Q2"}};
    la_segment docs[1] = {{.text = "untitled text, used verbatim"}};
    la_rendered_prompt r = render(LA_CHAT_FORMAT_LLAMA3, m, 4, docs, 1);
    cr_assert_str_eq(r.preamble, BOS HDR("system") "Answer in French.\n\n");
    cr_assert_str_eq(r.docs[0], "untitled text, used verbatim");
    cr_assert_str_eq(r.tail, EOT HDR("user") LA_RAG_INSTRUCTION "Question:  Q1 " EOT HDR("assistant") "A1" EOT
                     HDR("user") "Q2" EOT HDR("assistant"));
    la_rendered_prompt_free(&r);
}

/* ============================================================ Tulu ================== */

Test(prompt_template, tulu_without_documents_is_the_open_instruct_tulu_template) {
    la_chat_message m[4] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};
    la_rendered_prompt r = render(LA_CHAT_FORMAT_TULU, m, 4, NULL, 0);
    cr_assert_null(r.preamble);
    cr_assert_str_eq(r.tail, "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\nHello!<|end_of_text|>\n"
                             "<|user|>\n2+2?\n<|assistant|>\n");
    la_rendered_prompt_free(&r);
    /* a final assistant message has no newline after eos (template's loop.last) */
    la_chat_message m2[2] = {{"user", "Hi"}, {"assistant", "Hel"}};
    r = render(LA_CHAT_FORMAT_TULU, m2, 2, NULL, 0);
    cr_assert_str_eq(r.tail, "<|user|>\nHi\n<|assistant|>\nHel<|end_of_text|><|assistant|>\n");
    la_rendered_prompt_free(&r);
}

Test(prompt_template, tulu_rag_is_block_attentions_tulu_conversion) {
    /* Block-Attention data_process/rag/step2_to_tulu_format.py applied to the Llama-3 RAG
     * prompt: the system header becomes "<|user|>\n", the user header "\n\n", the assistant
     * header "\n<|assistant|>\n" */
    la_chat_message m[1] = {{"user", "Who directed Alien?"}};
    la_segment docs[1] = {{.text = "Alien is a 1979 film.", .title = "Alien (film)"}};
    la_rendered_prompt r = render(LA_CHAT_FORMAT_TULU, m, 1, docs, 1);
    la_rendered_prompt l3 = render(LA_CHAT_FORMAT_LLAMA3, m, 1, docs, 1);
    cr_assert_str_eq(r.preamble, "<|user|>\n" LA_RAG_DEFAULT_SYSTEM "\n\n");
    cr_assert_str_eq(r.docs[0], "- Title: Alien (film)\nAlien is a 1979 film.\n");
    cr_assert_str_eq(r.tail, "\n\n" LA_RAG_INSTRUCTION "Question: Who directed Alien?\n<|assistant|>\n");
    /* the conversion, done here on the Llama-3 rendering */
    char joined[4096], conv[4096];
    snprintf(joined, sizeof joined, "%s%s%s", l3.preamble, l3.docs[0], l3.tail);
    static const char *const from[3] = {BOS HDR("system"), EOT HDR("user"), EOT HDR("assistant")};
    static const char *const to[3] = {"<|user|>\n", "\n\n", "\n<|assistant|>\n"};
    for (int k = 0; k < 3; k++) {
        char *at = strstr(joined, from[k]);
        cr_assert(at);
        snprintf(conv, sizeof conv, "%.*s%s%s", (int)(at - joined), joined, to[k], at + strlen(from[k]));
        strcpy(joined, conv);
    }
    snprintf(conv, sizeof conv, "%s%s%s", r.preamble, r.docs[0], r.tail);
    cr_assert_str_eq(conv, joined);
    la_rendered_prompt_free(&r);
    la_rendered_prompt_free(&l3);
}

Test(prompt_template, tulu_rag_later_turns) {
    la_chat_message m[4] = {{"system", "S"}, {"user", "Q1"}, {"assistant", "A1"}, {"user", "Q2"}};
    la_segment docs[1] = {{.text = "d"}};
    la_rendered_prompt r = render(LA_CHAT_FORMAT_TULU, m, 4, docs, 1);
    cr_assert_str_eq(r.preamble, "<|user|>\nS\n\n");
    cr_assert_str_eq(r.tail, "\n\n" LA_RAG_INSTRUCTION "Question: Q1\n<|assistant|>\nA1<|end_of_text|>\n"
                             "<|user|>\nQ2\n<|assistant|>\n");
    la_rendered_prompt_free(&r);
}

/* ============================================================ documents ============= */

Test(prompt_template, document_block_is_titled_or_verbatim) {
    la_segment titled = {.text = "body", .title = "T"};
    char *s = la_prompt_render_document(&titled);
    cr_assert_str_eq(s, "- Title: T\nbody\n");
    free(s);
    la_segment plain = {.text = "exact\ntext "};
    s = la_prompt_render_document(&plain);
    cr_assert_str_eq(s, "exact\ntext ");
    free(s);
    la_segment sized = {.text = "abcdef", .len = 3, .title = ""};
    s = la_prompt_render_document(&sized);
    cr_assert_str_eq(s, "- Title: \nabc\n");
    free(s);
}

/* ============================================================ errors ================ */

static void expect_invalid(const la_chat_message *m, int n, const la_segment *docs, int n_docs,
                           const char *needle) {
    la_rendered_prompt r = {.tail = (char *)"untouched"};
    la_err err = {0};
    la_status s = la_prompt_render(LA_CHAT_FORMAT_LLAMA3, m, n, docs, n_docs, &r, &err);
    cr_assert_eq(s, LA_ERR_INVALID_ARG, "expected invalid_arg for '%s'", needle);
    cr_assert(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
    cr_assert_str_eq(r.tail, "untouched");
}

Test(prompt_template, bad_messages_are_refused_and_out_is_untouched) {
    la_chat_message unknown[1] = {{"wizard", "x"}};
    expect_invalid(unknown, 1, NULL, 0, "unknown role");
    la_chat_message no_user[1] = {{"system", "x"}};
    expect_invalid(no_user, 1, NULL, 0, "no user message");
    la_chat_message null_content[1] = {{"user", NULL}};
    expect_invalid(null_content, 1, NULL, 0, "content");
    expect_invalid(NULL, 0, NULL, 0, "empty");
    la_segment doc = {.text = "d"};
    la_chat_message assistant_first[2] = {{"assistant", "a"}, {"user", "q"}};
    expect_invalid(assistant_first, 2, &doc, 1, "must start with a user message");
    int32_t ids[2] = {1, 2};
    la_segment id_doc = {.ids = ids, .n_ids = 2};
    la_chat_message q[1] = {{"user", "q"}};
    expect_invalid(q, 1, &id_doc, 1, "not token ids");
}

/* ============================================================ the chat template ===== */

static la_chat_template *compile(const char *text, const char *bos, const char *eos) {
    la_chat_template *t = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_chat_template_create(text, strlen(text), "test template", bos, eos, &t, &err), err);
    return t;
}

static cJSON *renders(void) {
    char *path = la_test_path("tests/fixtures/chat_templates/renders.json");
    cJSON *root = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_json_load_file(path, &root, &err), err);
    free(path);
    return root;
}

static la_chat_template *fixture_template(const cJSON *root, const char *name) {
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "templates"), name);
    cr_assert(t, "no template %s in the fixture", name);
    const cJSON *bos = cJSON_GetObjectItem(t, "bos_token"), *eos = cJSON_GetObjectItem(t, "eos_token");
    return compile(cJSON_GetObjectItem(t, "text")->valuestring, cJSON_IsString(bos) ? bos->valuestring : NULL,
                   cJSON_IsString(eos) ? eos->valuestring : NULL);
}

Test(prompt_template, family_is_the_block_ft_format_a_template_renders_as) {
    cJSON *root = renders();
    static const struct {
        const char *name;
        la_chat_format family;
    } k_want[] = {
        {"llama3", LA_CHAT_FORMAT_LLAMA3},         {"tulu3", LA_CHAT_FORMAT_TULU},
        {"llama3.1", LA_CHAT_FORMAT_TEMPLATE},     {"llama3.2", LA_CHAT_FORMAT_TEMPLATE},
        {"qwen2.5", LA_CHAT_FORMAT_TEMPLATE},      {"qwen3", LA_CHAT_FORMAT_TEMPLATE},
        {"mistral-v0.3", LA_CHAT_FORMAT_TEMPLATE}, {"mistral-v0.1", LA_CHAT_FORMAT_TEMPLATE},
        {"smollm2", LA_CHAT_FORMAT_TEMPLATE},
    };
    for (size_t i = 0; i < sizeof k_want / sizeof k_want[0]; i++) {
        la_chat_template *t = fixture_template(root, k_want[i].name);
        cr_assert_eq(la_prompt_template_family(t), k_want[i].family, "%s: family %d", k_want[i].name,
                     la_prompt_template_family(t));
        la_chat_template_destroy(t);
    }
    /* the bundled model's template is Llama 3's: its documents keep the Block-FT layout */
    char *cfg_path = la_test_path("models/rag-tiny/tokenizer_config.json");
    cJSON *cfg = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_json_load_file(cfg_path, &cfg, &err), err);
    free(cfg_path);
    la_chat_template *t = compile(cJSON_GetObjectItem(cfg, "chat_template")->valuestring, "<|begin_of_text|>",
                                  "<|eot_id|>");
    cr_assert_eq(la_prompt_template_family(t), LA_CHAT_FORMAT_LLAMA3);
    la_chat_template_destroy(t);
    cJSON_Delete(cfg);
    /* a template that looks like Llama 3 but renders otherwise is not Llama 3 */
    t = compile("{% for m in messages %}<|start_header_id|>{{ m['role'] }}{% endfor %}", NULL, NULL);
    cr_assert_eq(la_prompt_template_family(t), LA_CHAT_FORMAT_TEMPLATE);
    la_chat_template_destroy(t);
    cr_assert_eq(la_prompt_template_family(NULL), LA_CHAT_FORMAT_AUTO);
    cJSON_Delete(root);
}

static la_chat_message *json_messages(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    la_chat_message *m = calloc((size_t)*n + 1, sizeof *m);
    cr_assert(m);
    for (int i = 0; i < *n; i++) {
        const cJSON *x = cJSON_GetArrayItem(arr, i);
        m[i].role = cJSON_GetObjectItem(x, "role")->valuestring;
        m[i].content = cJSON_GetObjectItem(x, "content")->valuestring;
    }
    return m;
}

/* Every chat case of renders.json that transformers' own context reproduces (no extra
 * kwargs), through la_prompt_render_chat: jinja2's text byte for byte, or an error. */
Test(prompt_template, chat_requests_render_as_jinja2_without_documents) {
    cJSON *root = renders();
    int n_cases = 0, bad = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "chat")) {
        if (!cJSON_IsTrue(cJSON_GetObjectItem(c, "api"))) continue;
        const char *name = cJSON_GetObjectItem(c, "template")->valuestring;
        la_chat_template *t = fixture_template(root, name);
        int n;
        la_chat_message *m = json_messages(cJSON_GetObjectItem(cJSON_GetObjectItem(c, "context"), "messages"), &n);
        bool known_roles = true;
        for (int i = 0; i < n; i++)
            known_roles = known_roles && (!strcmp(m[i].role, "system") || !strcmp(m[i].role, "user") ||
                                          !strcmp(m[i].role, "assistant"));
        bool has_user = false;
        for (int i = 0; i < n; i++) has_user = has_user || !strcmp(m[i].role, "user");
        la_rendered_prompt r;
        la_err err = {0};
        la_status s = la_prompt_render_chat(t, la_prompt_template_family(t), LA_CHAT_FORMAT_AUTO, m, n, NULL, 0,
                                            &r, &err);
        const cJSON *want = cJSON_GetObjectItem(c, "expected");
        if (known_roles && has_user && cJSON_IsString(want)) {
            if (s != LA_OK || strcmp(r.tail, want->valuestring)) {
                fprintf(stderr, "%s / %s: %s\n", name, cJSON_GetObjectItem(c, "label")->valuestring,
                        s == LA_OK ? r.tail : err.msg);
                bad++;
            }
            cr_assert(s != LA_OK || r.preamble == NULL);
        } else if (known_roles && has_user) {
            if (s == LA_OK) bad++;
        }
        if (s == LA_OK) la_rendered_prompt_free(&r);
        free(m);
        la_chat_template_destroy(t);
        n_cases++;
    }
    cr_assert_geq(n_cases, 100);
    cr_assert_eq(bad, 0, "%d of %d chat requests differ from jinja2", bad, n_cases);
    cJSON_Delete(root);
}

/* Documents: the conversation of README "Chat templates and documents" rendered by jinja2
 * with the sentinel, cut there; the Block-FT formats (llama3, tulu3) give the same bytes. */
Test(prompt_template, chat_requests_with_documents_cut_jinja2s_render_at_the_documents) {
    cJSON *root = renders();
    const cJSON *rag = cJSON_GetObjectItem(root, "rag");
    cr_assert_str_eq(cJSON_GetObjectItem(rag, "default_system")->valuestring, LA_RAG_DEFAULT_SYSTEM);
    cr_assert_str_eq(cJSON_GetObjectItem(rag, "instruction")->valuestring, LA_RAG_INSTRUCTION);
    cr_assert_str_eq(cJSON_GetObjectItem(rag, "sentinel")->valuestring, LA_CHAT_DOCUMENTS_SENTINEL);
    int n_cases = 0, n_inline = 0, bad = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "rag_cases")) {
        if (!cJSON_IsTrue(cJSON_GetObjectItem(c, "api"))) continue; /* needs a fixed date_string */
        const char *name = cJSON_GetObjectItem(c, "template")->valuestring;
        const char *label = cJSON_GetObjectItem(c, "label")->valuestring;
        la_chat_template *t = fixture_template(root, name);
        la_chat_format family = la_prompt_template_family(t);
        bool user_layout = !strcmp(cJSON_GetObjectItem(c, "layout")->valuestring, "user");
        if (family == LA_CHAT_FORMAT_TEMPLATE)
            cr_assert_eq(la_chat_template_system_layout(t), !user_layout, "%s: layout", name);
        int n;
        la_chat_message *m = json_messages(cJSON_GetObjectItem(c, "messages"), &n);
        const cJSON *docs_json = cJSON_GetObjectItem(c, "documents");
        int n_docs = cJSON_GetArraySize(docs_json);
        la_segment docs[8] = {{0}};
        for (int d = 0; d < n_docs; d++) {
            const cJSON *x = cJSON_GetArrayItem(docs_json, d);
            docs[d].text = cJSON_GetObjectItem(x, "text")->valuestring;
            const cJSON *title = cJSON_GetObjectItem(x, "title");
            docs[d].title = cJSON_IsString(title) ? title->valuestring : NULL;
        }
        la_rendered_prompt r;
        la_err err = {0};
        la_status s = la_prompt_render_chat(t, family, LA_CHAT_FORMAT_AUTO, m, n, docs, n_docs, &r, &err);
        if (s != LA_OK) {
            fprintf(stderr, "%s / %s: %s\n", name, label, err.msg);
            bad++;
        } else {
            bool ok = !strcmp(r.preamble, cJSON_GetObjectItem(c, "preamble")->valuestring) &&
                      !strcmp(r.tail, cJSON_GetObjectItem(c, "tail")->valuestring) && r.n_docs == n_docs;
            for (int d = 0; ok && d < n_docs; d++)
                ok = !strcmp(r.docs[d], cJSON_GetArrayItem(cJSON_GetObjectItem(c, "doc_blocks"), d)->valuestring);
            if (ok && cJSON_IsTrue(cJSON_GetObjectItem(c, "inline_equal"))) {
                /* and the whole prompt is jinja2's with the documents written inline */
                size_t len = strlen(r.preamble) + strlen(r.tail) + 1;
                for (int d = 0; d < n_docs; d++) len += strlen(r.docs[d]);
                char *all = calloc(len, 1);
                strcat(all, r.preamble);
                for (int d = 0; d < n_docs; d++) strcat(all, r.docs[d]);
                strcat(all, r.tail);
                ok = !strcmp(all, cJSON_GetObjectItem(c, "inline")->valuestring);
                free(all);
                n_inline++;
            }
            if (!ok) {
                fprintf(stderr, "%s / %s: preamble \"%.200s\" tail \"%.200s\"\n", name, label, r.preamble, r.tail);
                bad++;
            }
            la_rendered_prompt_free(&r);
        }
        free(m);
        la_chat_template_destroy(t);
        n_cases++;
    }
    cr_assert_geq(n_cases, 40);
    cr_assert_geq(n_inline, 28);
    cr_assert_eq(bad, 0, "%d of %d document requests differ from jinja2", bad, n_cases);
    cJSON_Delete(root);
}

Test(prompt_template, no_template_is_an_error_never_a_fallback) {
    la_chat_message q[1] = {{"user", "q"}};
    la_rendered_prompt r = {.tail = (char *)"untouched"};
    la_err err = {0};
    la_status s = la_prompt_render_chat(NULL, LA_CHAT_FORMAT_AUTO, LA_CHAT_FORMAT_AUTO, q, 1, NULL, 0, &r, &err);
    cr_assert_eq(s, LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "--chat-template FILE"), "%s", err.msg);
    cr_assert_str_eq(r.tail, "untouched");
    s = la_prompt_render_chat(NULL, LA_CHAT_FORMAT_AUTO, LA_CHAT_FORMAT_TEMPLATE, q, 1, NULL, 0, &r, &err);
    cr_assert_eq(s, LA_ERR_INVALID_ARG);
    /* an explicit Block-FT format needs no template */
    LA_CHECK_OK(la_prompt_render_chat(NULL, LA_CHAT_FORMAT_AUTO, LA_CHAT_FORMAT_LLAMA3, q, 1, NULL, 0, &r, &err), err);
    cr_assert_str_eq(r.tail, BOS HDR("user") "q" EOT HDR("assistant"));
    la_rendered_prompt_free(&r);
}

Test(prompt_template, a_template_that_loses_the_documents_is_an_error) {
    /* writes neither the system content nor the first user message */
    la_chat_template *t = compile("{% for m in messages %}{% if m.role == 'assistant' %}{{ m.content }}{% endif %}"
                                  "{% endfor %}x", NULL, NULL);
    la_chat_message q[1] = {{"user", "q"}};
    la_segment doc = {.text = "d"};
    la_rendered_prompt r = {.tail = (char *)"untouched"};
    la_err err = {0};
    la_status s = la_prompt_render_chat(t, LA_CHAT_FORMAT_TEMPLATE, LA_CHAT_FORMAT_AUTO, q, 1, &doc, 1, &r, &err);
    cr_assert_eq(s, LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "0 times"), "%s", err.msg);
    cr_assert_str_eq(r.tail, "untouched");
    /* twice */
    la_chat_template_destroy(t);
    t = compile("{% for m in messages %}{{ m.content }}{{ m.content }}{% endfor %}", NULL, NULL);
    s = la_prompt_render_chat(t, LA_CHAT_FORMAT_TEMPLATE, LA_CHAT_FORMAT_AUTO, q, 1, &doc, 1, &r, &err);
    cr_assert_eq(s, LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "2 times"), "%s", err.msg);
    /* a message may not carry the marker */
    la_chat_message sneaky[1] = {{"user", "x " LA_CHAT_DOCUMENTS_SENTINEL}};
    s = la_prompt_render_chat(t, LA_CHAT_FORMAT_TEMPLATE, LA_CHAT_FORMAT_AUTO, sneaky, 1, &doc, 1, &r, &err);
    cr_assert_eq(s, LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "marker"), "%s", err.msg);
    la_chat_template_destroy(t);
}

Test(prompt_template, an_unsupported_template_fails_at_compile_naming_the_construct) {
    la_chat_template *t = NULL;
    la_err err = {0};
    const char *text = "{% for m in messages %}\n{{ m.content | wordwrap(40) }}{% endfor %}";
    la_status s = la_chat_template_create(text, strlen(text), "models/x/tokenizer_config.json", NULL, NULL, &t, &err);
    cr_assert_eq(s, LA_ERR_UNSUPPORTED);
    cr_assert_null(t);
    cr_assert(strstr(err.msg, "models/x/tokenizer_config.json line 2: filter 'wordwrap' is not supported"), "%s",
              err.msg);
}
