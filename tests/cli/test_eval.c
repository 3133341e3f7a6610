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

/* selected recovery's spec: R 0.25 in the JSON, every later document token probed, round(R x
 * probed) per question recomputed (so between R x probed - n/2 and R x probed + n/2 over n
 * questions), and the EM over every order beside order 0's */
Test(cli_eval, selected_recovery_spec_reports_probe_and_recompute) {
    char *err = NULL;
    cJSON *j = NULL;
    int st = eval("--methods lazy,lazy+c25,lazy+r2+c25 --limit 6 --orders 2 --max-tokens 8", &err, &j);
    cr_assert_eq(st, 0, "eval exited %d: %s", st, err);
    const cJSON *ms = cJSON_GetObjectItem(j, "methods");
    const cJSON *c = cJSON_GetArrayItem(ms, 1), *rc = cJSON_GetArrayItem(ms, 2);
    cr_assert_str_eq(cJSON_GetObjectItem(c, "method")->valuestring, "lazy+c25");
    cr_assert_eq(num(c, "recompute_ratio"), 0.25);
    cr_assert_eq(num(rc, "recompute_first"), 2);
    const double probed = num(c, "doc_tokens_probed"), recomputed = num(c, "doc_tokens_recomputed");
    cr_assert(probed > 0 && num(rc, "doc_tokens_probed") == probed, "%g", probed);
    cr_assert(recomputed >= 0.25 * probed - 3 && recomputed <= 0.25 * probed + 3, "%g of %g", recomputed, probed);
    cr_assert_gt(num(rc, "doc_tokens_recomputed"), recomputed); /* the first 2 of each document beside */
    cr_assert_eq(num(cJSON_GetArrayItem(ms, 0), "doc_tokens_probed"), 0);
    for (int m = 0; m < 3; m++) {
        const cJSON *jm = cJSON_GetArrayItem(ms, m);
        const double all = num(jm, "exact_match_all_orders");
        cr_assert(all >= 0 && all <= 1, "%g", all);
        /* every order's answers are kept: they give back the order-stability it reports */
        const cJSON *first = cJSON_GetObjectItem(jm, "answers"), *later = cJSON_GetObjectItem(jm, "answers_other_orders");
        cr_assert(cJSON_GetArraySize(first) == 6 && cJSON_GetArraySize(later) == 1, "answers of 6 questions x 2 orders");
        const cJSON *second = cJSON_GetArrayItem(later, 0);
        cr_assert_eq(cJSON_GetArraySize(second), 6);
        int same = 0;
        for (int q = 0; q < 6; q++)
            same += !strcmp(cJSON_GetArrayItem(first, q)->valuestring, cJSON_GetArrayItem(second, q)->valuestring);
        cr_assert_eq(num(jm, "same_answer_across_orders"), same / 6.0);
    }
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
        {"--methods lazy+c0", "cP, selected recovery"},
        {"--methods lazy+c101", "cP, selected recovery"},
        {"--methods lazy+c20+c30", "each at most once"},
        {"--methods prefix+c20", "recovery applies to the block-wise methods"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err = NULL;
        int st = eval(cases[i][0], &err, NULL);
        cr_assert_eq(st, 2, "%s: exit %d", cases[i][0], st);
        cr_assert(strstr(err, cases[i][1]), "%s: stderr %s", cases[i][0], err);
        free(err);
    }
}

static int cmp_num(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --margins: lazy parts from block-ref nowhere (f32 CPU: the same computation), recompute
 * (full attention, another computation) on the questions whose answers differ, each listed
 * once at a token inside the reference's answer, with the counts and median the list gives.
 * --raw: the bundled model without its template is unsure enough for recompute to differ. */
Test(cli_eval, margins_list_where_answers_part_from_the_first_method) {
    char *err = NULL;
    cJSON *j = NULL;
    int st = eval("--raw --methods block-ref,lazy,recompute --limit 24 --max-tokens 8 --margins", &err, &j);
    cr_assert_eq(st, 0, "eval exited %d: %s", st, err);
    const cJSON *rm = cJSON_GetObjectItem(j, "reference_margins");
    cr_assert(rm, "no reference_margins");
    cr_assert(num(rm, "p5") >= 0 && num(rm, "median") >= num(rm, "p5"));
    const cJSON *ms = cJSON_GetObjectItem(j, "methods");
    const cJSON *ref = cJSON_GetObjectItem(cJSON_GetArrayItem(ms, 0), "answers");
    cr_assert_null(cJSON_GetObjectItem(cJSON_GetArrayItem(ms, 0), "diverged"), "the reference has no divergences");
    for (int m = 1; m < 3; m++) {
        const cJSON *o = cJSON_GetArrayItem(ms, m), *answers = cJSON_GetObjectItem(o, "answers");
        const cJSON *divs = cJSON_GetObjectItem(o, "divergences");
        int n_diff = 0, n_div = cJSON_GetArraySize(divs), n_runner = 0;
        for (int q = 0; q < 24; q++)
            n_diff += strcmp(cJSON_GetArrayItem(answers, q)->valuestring, cJSON_GetArrayItem(ref, q)->valuestring) != 0;
        cr_assert_eq(num(o, "diverged"), n_diff);
        cr_assert_eq(n_div, n_diff);
        double *v = calloc((size_t)n_div + 1, sizeof(double));
        int k = 0, last_q = -1;
        for (int i = 0; i < n_div; i++) {
            const cJSON *d = cJSON_GetArrayItem(divs, i);
            int q = (int)num(d, "question");
            cr_assert(q > last_q && q < 24, "questions listed once, in order");
            last_q = q;
            cr_assert(strcmp(cJSON_GetArrayItem(answers, q)->valuestring, cJSON_GetArrayItem(ref, q)->valuestring),
                      "question %d listed but answered alike", q);
            cr_assert(num(d, "token") >= 0 && num(d, "token") < 8);
            const cJSON *rmq = cJSON_GetObjectItem(d, "reference_margin");
            if (cJSON_IsNumber(rmq)) {
                cr_assert(rmq->valuedouble >= 0);
                v[k++] = rmq->valuedouble;
            }
            n_runner += cJSON_IsTrue(cJSON_GetObjectItem(d, "to_reference_runner_up"));
        }
        cr_assert_eq(num(o, "diverged_to_reference_runner_up"), n_runner);
        const cJSON *med = cJSON_GetObjectItem(o, "reference_margin_at_divergence_median");
        if (k) { /* nearest rank, as the bench's percentiles */
            qsort(v, (size_t)k, sizeof(double), cmp_num);
            cr_assert_float_eq(med->valuedouble, v[(k + 1) / 2 - 1], 1e-9);
        } else {
            cr_assert(cJSON_IsNull(med));
        }
        free(v);
        if (m == 1) cr_assert_eq(n_diff, 0, "lazy answered %d of 24 unlike block-ref on the CPU", n_diff);
        else cr_assert(n_diff > 0, "recompute answered like block-ref everywhere: nothing exercised");
    }
    cJSON_Delete(j);
    free(err);
}
