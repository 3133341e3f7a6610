/* `lazyattn tokenize` (src/cli/cmd_tokenize.c), run as the built binary: output, exit
 * status (0 ok, 2 usage, 1 error) and one message on stderr. Expected ids are from the
 * Rust `tokenizers` library on the Llama-3 tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/file.h"
#include "common/test_util.h"

typedef la_test_cli_result run_result;

/* `lazyattn tokenize <args>` */
static run_result run(const char *env, const char *args, const char *input) {
    char *full = NULL;
    cr_assert(asprintf(&full, "tokenize %s", args) > 0);
    run_result r = la_test_cli(env, full, input);
    free(full);
    return r;
}

static void run_free(run_result *r) { la_test_cli_free(r); }

static char *llama3_arg(void) {
    char *s = NULL;
    cr_assert(asprintf(&s, "-m '%s/data/tokenizers/llama3'", la_test_shared_dir()) > 0);
    return s;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

Test(cli_tokenize, prints_the_ids_of_text_as_a_json_array) {
    char *m = llama3_arg(), *args = NULL;
    cr_assert(asprintf(&args, "%s 'Hello world'", m) > 0);
    run_result r = run("", args, NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "[128000,9906,1917]\n");
    cr_assert_str_eq(r.err, "");
    run_free(&r);
    free(args);
    cr_assert(asprintf(&args, "%s --no-special -- '<|eot_id|>it'\\''s'", m) > 0);
    r = run("", args, NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "[128009,275,596]\n");
    run_free(&r);
    free(args);
    free(m);
}

Test(cli_tokenize, jsonl_prints_one_array_per_line_in_order) {
    char *m = llama3_arg(), *args = NULL;
    cr_assert(asprintf(&args, "%s --jsonl", m) > 0);
    run_result r = run("", args, "\"Hello world\"\n  \"a\\u0000b\\n\\ud83d\\ude00\"  \n\"\"\n");
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    /* tokenizers: "a\0b\n😀" -> [64, 188, 65, 198, 76460, 222]; "" -> [] */
    cr_assert_str_eq(r.out, "[128000,9906,1917]\n[128000,64,188,65,198,76460,222]\n[128000]\n");
    run_free(&r);
    free(args);
    free(m);
}

Test(cli_tokenize, default_model_dir_comes_from_lazyattn_model) {
    char *env = NULL;
    cr_assert(asprintf(&env, "LAZYATTN_MODEL='%s/tests/fixtures/tokenizer/bpe-tiny'", LA_SOURCE_DIR) > 0);
    run_result r = run(env, "--no-special '<|eot_id|>'", NULL);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(r.out, "[4]\n");
    run_free(&r);
    free(env);
}

Test(cli_tokenize, usage_errors_exit_2_with_a_message) {
    const char *cases[] = {"", "--bogus x", "-m", "--jsonl text", "one two"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r = run("", cases[i], NULL);
        cr_assert_eq(r.status, 2, "`tokenize %s` exited %d", cases[i], r.status);
        cr_assert_str_eq(r.out, "");
        cr_assert(strncmp(r.err, "lazyattn tokenize: ", 19) == 0, "stderr: %s", r.err);
        run_free(&r);
    }
    run_result r = run("", "--help", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "usage: lazyattn tokenize"));
    run_free(&r);
}

Test(cli_tokenize, other_errors_exit_1_with_one_line) {
    run_result r = run("", "-m /nonexistent/dir hi", NULL);
    cr_assert_eq(r.status, 1);
    cr_assert_str_eq(r.err, "lazyattn tokenize: /nonexistent/dir/tokenizer.json: No such file or directory\n");
    run_free(&r);

    char *m = llama3_arg(), *args = NULL;
    cr_assert(asprintf(&args, "%s \"$(printf 'ab\\377')\"", m) > 0);
    r = run("", args, NULL);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "byte offset 2"), "stderr: %s", r.err);
    cr_assert_eq(count_lines(r.err), 1);
    run_free(&r);
    free(args);

    cr_assert(asprintf(&args, "%s --jsonl", m) > 0);
    r = run("", args, "\"ok\"\nnot json\n\"never read\"\n");
    cr_assert_eq(r.status, 1);
    cr_assert_str_eq(r.out, "[128000,564]\n");
    cr_assert_str_eq(r.err, "lazyattn tokenize: stdin line 2: not a JSON string\n");
    run_free(&r);
    r = run("", args, "\"\\ud800 lone surrogate\"\n");
    cr_assert_eq(r.status, 1);
    run_free(&r);
    free(args);
    free(m);
}
