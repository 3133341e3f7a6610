/* Chat and RAG templates (src/model/prompt_template.c): exact bytes of every format, the
 * Llama-3 RAG template byte-identical to tools/demo/prompt.py (what the bundled model is
 * trained on), format detection from chat_template, and errors that leave out untouched. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "common/test_util.h"
#include "model/prompt_template.h"
#include "model/tokenizer.h"

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

Test(prompt_template, auto_renders_as_llama3) {
    la_chat_message m[1] = {{"user", "x"}};
    la_rendered_prompt r = render(LA_CHAT_FORMAT_AUTO, m, 1, NULL, 0);
    cr_assert_str_eq(r.tail, BOS HDR("user") "x" EOT HDR("assistant"));
    la_rendered_prompt_free(&r);
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
    if (!la_file_exists(py)) {
        free(py);
        cr_skip_test("tools/demo/prompt.py not present");
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cd %s/tools/demo && python3 -c 'import json, prompt; print(json.dumps(prompt.prompt_blocks("
             "\"Who directed Alien?\", [{\"title\": \"Alien (film)\", \"text\": \"Alien is a 1979 film.\"},"
             " {\"title\": \"T\\u00e9\", \"text\": \"caf\\u00e9\"}])))' 2>/dev/null",
             LA_SOURCE_DIR);
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    int rc = pclose(f);
    free(py);
    if (rc != 0 || n == 0) cr_skip_test("python3 could not run tools/demo/prompt.py");
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

/* ============================================================ detection ============= */

/* A tokenizer directory: the fixture's tokenizer.json with chat_template set to tmpl (or
 * removed when NULL). */
static la_tokenizer *tokenizer_with_template(const char *tmpl) {
    char *dir = la_test_tmpdir();
    char *src = la_test_path("tests/fixtures/models/tiny-f32-tied/tokenizer.json");
    char *src_cfg = la_test_path("tests/fixtures/models/tiny-f32-tied/tokenizer_config.json");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/tokenizer.json'", src, dir);
    cr_assert_eq(system(cmd), 0);
    char *text = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_file_read(src_cfg, &text, NULL, &err), err);
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    cJSON_DeleteItemFromObject(cfg, "chat_template");
    if (tmpl) cJSON_AddStringToObject(cfg, "chat_template", tmpl);
    char *out = cJSON_Print(cfg);
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    fputs(out, f);
    fclose(f);
    free(out);
    cJSON_Delete(cfg);
    la_tokenizer *tok = NULL;
    LA_CHECK_OK(la_tokenizer_load(dir, &tok, &err), err);
    free(src);
    free(src_cfg);
    free(dir);
    return tok;
}

Test(prompt_template, format_is_detected_from_the_chat_template) {
    la_tokenizer *tok = tokenizer_with_template(NULL);
    cr_assert_eq(la_chat_format_detect(tok), LA_CHAT_FORMAT_LLAMA3);
    la_tokenizer_destroy(tok);
    tok = tokenizer_with_template("{% for m in messages %}<|start_header_id|>{{ m['role'] }}{% endfor %}");
    cr_assert_eq(la_chat_format_detect(tok), LA_CHAT_FORMAT_LLAMA3);
    la_tokenizer_destroy(tok);
    tok = tokenizer_with_template("{% for message in messages %}{{ '<|user|>\\n' + message['content'] }}"
                                  "{% endfor %}");
    cr_assert_eq(la_chat_format_detect(tok), LA_CHAT_FORMAT_TULU);
    la_tokenizer_destroy(tok);
    cr_assert_eq(la_chat_format_detect(NULL), LA_CHAT_FORMAT_LLAMA3);
}
