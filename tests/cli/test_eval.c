/* `lazyattn eval` run as the built binary on the bundled model: method specs with recovery
 * (bench/method_spec.h), the per-method counts and TTFT fields of the JSON, agreement computed
 * from the answers it lists, and the refusals of a bad spec. No timing assertions. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/file.h"
#include "common/test_util.h"

#define MODEL LA_SOURCE_DIR "/models/rag-tiny"
#define DATA LA_SOURCE_DIR "/models/rag-tiny/eval/test.jsonl"

/* Run `lazyattn eval <args>`; the exit status, stderr, and the --json file when json. */
static int eval(const char *args, char **err_text, cJSON **json) {
    char *dir = la_test_tmpdir();
    char *err = la_path_join(dir, "err"), *js = la_path_join(dir, "e.json"), *cmd = NULL;
    cr_assert(asprintf(&cmd, "'%s/lazyattn' eval -m '%s' --dataset '%s' --threads 2 %s %s%s%s </dev/null >/dev/null 2>'%s'",
                       LA_BUILD_DIR, MODEL, DATA, args, json ? "--json '" : "", json ? js : "", json ? "'" : "",
                       err) > 0);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s", cmd);
    la_err e = {0};
    LA_CHECK_OK(la_file_read(err, err_text, NULL, &e), e);
    if (json) {
        char *text = NULL;
        *json = NULL;
        if (WEXITSTATUS(st) == 0) {
            LA_CHECK_OK(la_file_read(js, &text, NULL, &e), e);
            *json = cJSON_Parse(text);
            cr_assert(*json, "eval wrote no JSON");
        }
        free(text);
    }
    la_test_rm_tree(dir);
    free(cmd), free(err), free(js); /* la_test_rm_tree freed dir */
    return WEXITSTATUS(st);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(o, k);
    cr_assert(cJSON_IsNumber(v), "no number %s", k);
    return v->valuedouble;
}

Test(cli_eval, recovery_specs_report_their_counts_and_agreement) {
    char *err = NULL;
    cJSON *j = NULL;
    int st = eval("--methods lazy,lazy+r8,block+r3 --limit 6 --orders 2 --max-tokens 8", &err, &j);
    cr_assert_eq(st, 0, "eval exited %d: %s", st, err);
    const cJSON *ms = cJSON_GetObjectItem(j, "methods");
    cr_assert_eq(cJSON_GetArraySize(ms), 3);
    const char *names[3] = {"lazy", "lazy+r8", "block+r3"}, *engine[3] = {"lazy", "lazy", "block"};
    const int firsts[3] = {0, 8, 3};
    const cJSON *first_answers = cJSON_GetObjectItem(cJSON_GetArrayItem(ms, 0), "answers");
    double recomputed[3];
    for (int m = 0; m < 3; m++) {
        const cJSON *o = cJSON_GetArrayItem(ms, m);
        cr_assert_str_eq(cJSON_GetObjectItem(o, "method")->valuestring, names[m]);
        cr_assert_str_eq(cJSON_GetObjectItem(o, "engine_method")->valuestring, engine[m]);
        cr_assert_eq(num(o, "recompute_first"), firsts[m]);
        recomputed[m] = num(o, "doc_tokens_recomputed");
        cr_assert(num(o, "mean_ttft_cold_ms") > 0 && num(o, "mean_ttft_warm_ms") > 0);
        /* same_answer_as_first_method is what the answers say */
        const cJSON *answers = cJSON_GetObjectItem(o, "answers");
        cr_assert_eq(cJSON_GetArraySize(answers), 6);
        int same = 0;
        for (int q = 0; q < 6; q++)
            same += !strcmp(cJSON_GetArrayItem(answers, q)->valuestring,
                            cJSON_GetArrayItem(first_answers, q)->valuestring);
        cr_assert_float_eq(num(o, "same_answer_as_first_method"), same / 6.0, 1e-9);
    }
    /* every question has its preamble and >= 2 documents of >= 8 tokens: N per later one */
    cr_assert_eq(recomputed[0], 0);
    cr_assert(recomputed[1] > 0 && (long long)recomputed[1] % 8 == 0, "%g", recomputed[1]);
    cr_assert_float_eq(recomputed[2], recomputed[1] / 8 * 3, 1e-9);
    cJSON_Delete(j);
    free(err);
}

Test(cli_eval, bad_specs_are_refused_with_the_reason) {
    const char *cases[][2] = {
        {"--methods prefix+r4", "recovery applies to the block-wise methods"},
        {"--methods lazy+4", "after '+' comes rN"},
        {"--methods lazy+r0", "after '+' comes rN"},
        {"--methods lazy+r-2", "after '+' comes rN"},
        {"--methods lazy,lazy", "'lazy' is listed twice"},
        {"--methods lazy+r8,lazy+r8", "'lazy+r8' is listed twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err = NULL;
        int st = eval(cases[i][0], &err, NULL);
        cr_assert_eq(st, 2, "%s: exit %d", cases[i][0], st);
        cr_assert(strstr(err, cases[i][1]), "%s: stderr %s", cases[i][0], err);
        free(err);
    }
}
