/* Chat templates through the built binary (src/cli: --chat-template FILE, --raw for run,
 * eval, bench and serve): the model's own template by default, a file instead, no template
 * with --raw; real checkpoints' templates (Qwen2.5, SmolLM2, Mistral v0.3) rendering document
 * requests end to end on their tokenizers; a template outside the Jinja subset and a model
 * without one refused with a message that names the fix. The rendered bytes are checked
 * against jinja2 in tests/model/test_prompt_template.c and tests/model/test_jinja.c. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/json.h"
#include "common/test_util.h"

#define RAG_TINY LA_SOURCE_DIR "/models/rag-tiny"
#define MODEL "-m '" RAG_TINY "' --threads 1 "
#define DOCS                                                                                       \
    "--title 'Elkrak Avoltrax' --doc 'Elkrak Avoltrax (born 3 September 1972 in Chas, Wirnor) is "  \
    "a cinematographer.' --title 'Famtond Cuxirnca' --doc 'Famtond Cuxirnca was born in Kramker, "  \
    "Gailevea, on 19 December 1946. She worked as a cinematographer.' "
#define DATASET "--dataset '" RAG_TINY "/eval/test.jsonl' "

/* A file in a fresh temporary directory holding text; *dir receives the directory. */
static char *temp_file(const char *name, const char *text, char **dir) {
    *dir = la_test_tmpdir();
    la_test_write_text(*dir, name, text);
    return la_path_join(*dir, name);
}

static char *bundled_template(void) {
    char *path = la_test_path("models/rag-tiny/tokenizer_config.json");
    cJSON *cfg = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_json_load_file(path, &cfg, &err), err);
    free(path);
    char *t = strdup(cJSON_GetObjectItem(cfg, "chat_template")->valuestring);
    cJSON_Delete(cfg);
    return t;
}

static la_test_cli_result cli(const char *fmt, const char *arg) {
    char *args = NULL;
    cr_assert(asprintf(&args, fmt, arg) > 0);
    la_test_cli_result r = la_test_cli("", args, NULL);
    free(args);
    return r;
}

Test(chat_template_cli, run_with_the_models_template_as_a_file_answers_the_same) {
    char *dir, *text = bundled_template();
    char *file = temp_file("chat.jinja", text, &dir);
    la_test_cli_result own = la_test_cli("", "run " MODEL DOCS "-p 'Where was Elkrak Avoltrax born?'", NULL);
    la_test_cli_result given = cli("run " MODEL DOCS "-p 'Where was Elkrak Avoltrax born?' --chat-template '%s'", file);
    cr_assert_eq(own.status, 0, "%s", own.err);
    cr_assert_eq(given.status, 0, "%s", given.err);
    cr_assert_str_eq(own.out, "Chas");
    cr_assert_str_eq(given.out, "Chas");
    la_test_cli_free(&own);
    la_test_cli_free(&given);
    free(file), free(text);
    la_test_rm_tree(dir);
}

Test(chat_template_cli, an_unsupported_template_fails_at_load_in_every_command) {
    char *dir;
    char *file = temp_file("bad.jinja", "{% for m in messages %}\n{{ m.content | wordwrap(40) }}{% endfor %}", &dir);
    static const char *const k_cmds[] = {
        "run " MODEL "-p q --chat-template '%s'",
        "eval " MODEL DATASET "--limit 2 --chat-template '%s'",
        "bench " MODEL DATASET "--requests 2 --methods lazy --chat-template '%s'",
        "serve " MODEL "--port 0 --chat-template '%s'",
    };
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++) {
        la_test_cli_result r = cli(k_cmds[i], file);
        cr_assert_eq(r.status, 1, "%s: exit %d (%s)", k_cmds[i], r.status, r.err);
        cr_assert(strstr(r.err, "line 2: filter 'wordwrap' is not supported"), "%s: %s", k_cmds[i], r.err);
        la_test_cli_free(&r);
    }
    la_test_cli_result r = cli("run " MODEL "-p q --chat-template '%s/missing.jinja'", dir);
    cr_assert_eq(r.status, 1, "%s", r.err);
    cr_assert(strstr(r.err, "missing.jinja"), "%s", r.err);
    la_test_cli_free(&r);
    free(file);
    la_test_rm_tree(dir);
}

/* The bundled model with a tokenizer_config.json that has no chat_template. */
static char *model_without_template(void) {
    char *dir = la_test_tmpdir();
    static const char *const k_files[] = {"config.json", "generation_config.json", "model.safetensors",
                                          "tokenizer.json"};
    for (size_t i = 0; i < sizeof k_files / sizeof k_files[0]; i++) {
        char *cmd = NULL;
        cr_assert(asprintf(&cmd, "ln -s '%s/%s' '%s/%s'", RAG_TINY, k_files[i], dir, k_files[i]) > 0);
        cr_assert_eq(system(cmd), 0);
        free(cmd);
    }
    char *path = la_test_path("models/rag-tiny/tokenizer_config.json");
    cJSON *cfg = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_json_load_file(path, &cfg, &err), err);
    free(path);
    cJSON_DeleteItemFromObject(cfg, "chat_template");
    char *text = cJSON_Print(cfg);
    la_test_write_text(dir, "tokenizer_config.json", text);
    free(text);
    cJSON_Delete(cfg);
    return dir;
}

Test(chat_template_cli, a_model_without_a_template_refuses_chat_and_takes_raw_or_a_file) {
    char *dir = model_without_template();
    la_test_cli_result chat = cli("run -m '%s' --threads 1 -p 'Where was Elkrak Avoltrax born?'", dir);
    cr_assert_eq(chat.status, 2, "%s", chat.err); /* a request the engine refuses (invalid_arg) */
    cr_assert(strstr(chat.err, "--chat-template FILE"), "%s", chat.err);
    la_test_cli_free(&chat);
    /* raw blocks: the Block-FT RAG prompt written out by hand answers as the template does
     * (the shell keeps the trailing newlines by printing an X after them) */
    const char *env =
        "P=\"$(printf '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n\\nYou are an intelligent AI "
        "assistant. Please answer questions based on the user\\047s instructions. Below are some reference "
        "documents that may help you in answering the user\\047s question.\\n\\nX')\"; P=\"${P%X}\"; "
        "Q=\"$(printf '<|eot_id|><|start_header_id|>user<|end_header_id|>\\n\\nPlease write a high-quality answer "
        "for the given question using only the provided search documents (some of which might be irrelevant)."
        "\\nQuestion: Where was Elkrak Avoltrax born?<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
        "\\n\\nX')\"; Q=\"${Q%X}\";";
    char *raw_args = NULL;
    cr_assert(asprintf(&raw_args, "run -m '%s' --threads 1 --raw --no-special --preamble \"$P\" " DOCS "-p \"$Q\"",
                       dir) > 0);
    la_test_cli_result raw = la_test_cli(env, raw_args, NULL);
    free(raw_args);
    cr_assert_eq(raw.status, 0, "%s", raw.err);
    cr_assert_str_eq(raw.out, "Chas");
    la_test_cli_free(&raw);
    /* eval: an error per question without a template; --chat-template gives the model one */
    la_test_cli_result ev = cli("eval -m '%s' --threads 1 " DATASET "--limit 2 --max-tokens 4", dir);
    cr_assert_eq(ev.status, 1, "%s", ev.err);
    cr_assert(strstr(ev.err, "--chat-template FILE"), "%s", ev.err);
    la_test_cli_free(&ev);
    char *tdir, *text = bundled_template();
    char *file = temp_file("chat.jinja", text, &tdir);
    char *args = NULL;
    cr_assert(asprintf(&args, "eval -m '%s' --threads 1 " DATASET "--limit 4 --max-tokens 20 --chat-template '%s'",
                       dir, file) > 0);
    la_test_cli_result with_file = la_test_cli("", args, NULL);
    la_test_cli_result own = la_test_cli("", "eval " MODEL DATASET "--limit 4 --max-tokens 20", NULL);
    cr_assert_eq(with_file.status, 0, "%s", with_file.err);
    cr_assert_eq(own.status, 0, "%s", own.err);
    /* the same template gives the same scores as the model's own (the table, ttft aside) */
    char *a = strstr(with_file.out, "\nlazy"), *b = strstr(own.out, "\nlazy");
    cr_assert(a && b, "%s / %s", with_file.out, own.out);
    cr_assert_eq(strncmp(a, b, 40), 0, "with the file: %s\nits own: %s", a, b);
    la_test_cli_free(&with_file);
    la_test_cli_free(&own);
    free(args), free(file), free(text);
    la_test_rm_tree(tdir);
    la_test_rm_tree(dir);
}

Test(chat_template_cli, eval_raw_asks_without_a_template_and_flags_conflict) {
    la_test_cli_result raw = la_test_cli("", "eval " MODEL DATASET "--limit 3 --max-tokens 4 --raw", NULL);
    cr_assert_eq(raw.status, 0, "%s", raw.err);
    cr_assert(strstr(raw.out, "lazy"), "%s", raw.out);
    la_test_cli_free(&raw);
    la_test_cli_result both = la_test_cli("", "eval " MODEL DATASET "--raw --chat-template x.jinja", NULL);
    cr_assert_eq(both.status, 2, "%s", both.err);
    cr_assert(strstr(both.err, "either --chat-template FILE or --raw"), "%s", both.err);
    la_test_cli_free(&both);
    both = la_test_cli("", "bench " MODEL DATASET "--raw --chat-template x.jinja", NULL);
    cr_assert_eq(both.status, 2, "%s", both.err);
    la_test_cli_free(&both);
}

/* bench --json of a run; the caller frees. */
static cJSON *bench_json(const char *args) {
    char *dir = la_test_tmpdir(), *js = la_path_join(dir, "b.json");
    char *full = NULL;
    cr_assert(asprintf(&full, "bench %s --json '%s'", args, js) > 0);
    la_test_cli_result r = la_test_cli("", full, NULL);
    cr_assert_eq(r.status, 0, "bench %s: %s", args, r.err);
    la_test_cli_free(&r);
    cJSON *root = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_json_load_file(js, &root, &err), err);
    free(full), free(js);
    la_test_rm_tree(dir);
    return root;
}

static double method_num(const cJSON *root, const char *key) {
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "methods"), 0);
    const cJSON *v = cJSON_GetObjectItem(m, key);
    cr_assert(cJSON_IsNumber(v), "%s", key);
    return v->valuedouble;
}

/* The templates of Qwen2.5, SmolLM2 and Mistral v0.3 (in the fixture tokenizers' configs)
 * render every document request, and --raw requests carry no template tokens. */
Test(chat_template_cli, real_templates_serve_document_requests_end_to_end) {
    static const char *const k_tokenizers[] = {"qwen2-tiny", "smollm2-tiny", "mistral-tiny"};
    for (size_t i = 0; i < sizeof k_tokenizers / sizeof k_tokenizers[0]; i++) {
        char *args = NULL;
        cr_assert(asprintf(&args, "--random-weights tiny --tokenizer '%s/tests/fixtures/tokenizer/%s' "
                                  "--dataset synthetic --requests 2 --docs-per-request 2 --pool-docs 2 "
                                  "--doc-tokens 30 --max-tokens 2 --threads 1 --methods lazy,recompute",
                           LA_SOURCE_DIR, k_tokenizers[i]) > 0);
        cJSON *chat = bench_json(args);
        char *raw_args = NULL;
        cr_assert(asprintf(&raw_args, "%s --raw", args) > 0);
        cJSON *raw = bench_json(raw_args);
        cr_assert_eq(method_num(chat, "requests_ok"), 2, "%s", k_tokenizers[i]);
        cr_assert_eq(method_num(raw, "requests_ok"), 2, "%s", k_tokenizers[i]);
        /* the template's preamble is a document block of its own; raw has none (or BOS) */
        cr_assert_gt(method_num(chat, "mean_doc_tokens"), method_num(raw, "mean_doc_tokens") + 10, "%s",
                     k_tokenizers[i]);
        cr_assert_gt(method_num(chat, "mean_prompt_tokens"), method_num(raw, "mean_prompt_tokens") + 20, "%s",
                     k_tokenizers[i]);
        cr_assert_eq(method_num(chat, "doc_hit_ratio"), 1.0, "%s: documents are reused", k_tokenizers[i]);
        cJSON_Delete(chat);
        cJSON_Delete(raw);
        free(args), free(raw_args);
    }
}
