/* `lazyattn run` (src/cli/cmd_run.c) as the built binary on the bundled model: the question
 * and titled documents go through the model's RAG template and the model answers from them
 * (the template's bytes are checked in tests/model/test_prompt_template.c and against
 * hand-written blocks in tests/engine/test_scheduler.c); exit statuses. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#define MODEL "-m '" LA_SOURCE_DIR "/models/rag-tiny' --threads 1 "
/* two people born in different cities: the answer must come from the right document */
#define DOCS                                                                                       \
    "--title 'Elkrak Avoltrax' --doc 'Elkrak Avoltrax (born 3 September 1972 in Chas, Wirnor) is "  \
    "a cinematographer.' --title 'Famtond Cuxirnca' --doc 'Famtond Cuxirnca was born in Kramker, "  \
    "Gailevea, on 19 December 1946. She worked as a cinematographer.' "

Test(run, the_rag_template_answers_from_the_right_document) {
    la_test_cli_result a = la_test_cli("", "run " MODEL DOCS "-p 'Where was Elkrak Avoltrax born?'", NULL);
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_assert_str_eq(a.out, "Chas");
    la_test_cli_result b = la_test_cli("", "run " MODEL DOCS "-p 'Where was Famtond Cuxirnca born?' --stats", NULL);
    cr_assert_eq(b.status, 0, "%s", b.err);
    cr_assert_str_eq(b.out, "Kramker");
    cr_assert(strstr(b.err, "\"doc_tokens_computed\""), "--stats line: %s", b.err);
    la_test_cli_free(&a);
    la_test_cli_free(&b);
}

Test(run, usage_errors_exit_2) {
    const char *cases[] = {
        "run " MODEL "-p x --preamble y",    /* --preamble without --raw */
        "run " MODEL "-p x --title y",       /* a title naming no document */
        "run " MODEL "-p x --title a --title b --doc c", /* the first title names no document */
        "run " MODEL "--doc y",              /* no prompt */
        "run " MODEL "-p x -n 0",            /* max_tokens out of range */
        "run " MODEL "-p x --top-p 0",
        "run " MODEL "-p x --threads -3",
        "run " MODEL "-p x --gpu-memory-fraction 2",
        "run " MODEL "-p x --cpu-weights f8",
        "run " MODEL "-p x --cpu-kv f16",
        "run " MODEL "-p x --title a --doc ''", /* a document with a title and no text */
        "run " MODEL "-p x --doc b --doc ''",
        "run " MODEL DOCS "-p x --method recompute --doc-context preamble", /* nothing cached alone */
        "run " MODEL DOCS "-p x --method prefix --doc-context preamble",
        "run " MODEL DOCS "-p x --method block-ref --doc-context preamble",
        "run " MODEL "-p x --doc-context before",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        la_test_cli_result r = la_test_cli("", cases[i], NULL);
        cr_assert_eq(r.status, 2, "%s: exit %d, stderr %s", cases[i], r.status, r.err);
        cr_assert(strstr(r.err, "lazyattn run: "), "%s: one message: %s", cases[i], r.err);
        la_test_cli_free(&r);
    }
}

/* --doc-context preamble (README "Documents encoded after the preamble"): lazy, block and mepic
 * answer from the right document with the documents computed after the preamble, and --stats
 * says which context they were computed in. */
Test(run, documents_computed_after_the_preamble_answer_alike) {
    const char *methods[] = {"lazy", "block", "mepic"};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        char *args = NULL;
        cr_assert(asprintf(&args, "run " MODEL DOCS "-p 'Where was Famtond Cuxirnca born?' --doc-context preamble "
                                  "--stats --method %s", methods[i]) > 0);
        la_test_cli_result r = la_test_cli("", args, NULL);
        cr_assert_eq(r.status, 0, "%s: %s", methods[i], r.err);
        cr_assert_str_eq(r.out, "Kramker", "%s", methods[i]);
        cr_assert(strstr(r.err, "\"doc_context\":\"preamble\""), "%s: %s", methods[i], r.err);
        free(args);
        la_test_cli_free(&r);
    }
}

/* --cpu-weights and --cpu-kv (README "CPU backend"): the bundled bf16 checkpoint kept in
 * bf16 (auto), widened to f32 or rounded to f16, and a bf16 KV cache, each answer from the
 * right document, with the kernels this CPU runs and the portable ones. */
Test(run, cpu_weight_and_kv_dtypes_answer_alike) {
    const char *variants[] = {"", "--cpu-weights bf16", "--cpu-weights f32", "--cpu-weights f16", "--cpu-kv bf16",
                              "--cpu-weights f16 --cpu-kv bf16"};
    for (int portable = 0; portable < 2; portable++)
        for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
            char args[2048];
            snprintf(args, sizeof args, "run " MODEL DOCS "%s -p 'Where was Famtond Cuxirnca born?'", variants[i]);
            la_test_cli_result r = la_test_cli(portable ? "LA_CPU_ISA=portable" : "", args, NULL);
            cr_assert_eq(r.status, 0, "%s: %s", variants[i], r.err);
            cr_assert_str_eq(r.out, "Kramker", "%s%s", variants[i], portable ? " (portable)" : "");
            la_test_cli_free(&r);
        }
}

/* --stats: every method accounts for the document tokens it computed (recompute all of
 * them; lazy none once --warm has cached the documents). */
Test(run, stats_count_computed_document_tokens_for_every_method) {
    const struct {
        const char *method;
        bool all;
    } cases[] = {{"recompute", true}, {"lazy", false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *args = NULL;
        cr_assert(asprintf(&args, "run " MODEL DOCS "-p 'Where was Elkrak Avoltrax born?' --warm --stats "
                                  "--method %s", cases[i].method) > 0);
        la_test_cli_result r = la_test_cli("", args, NULL);
        cr_assert_eq(r.status, 0, "%s", r.err);
        cJSON *j = cJSON_Parse(r.err);
        cr_assert(j, "stats line: %s", r.err);
        double doc = cJSON_GetObjectItem(j, "doc_tokens")->valuedouble;
        double computed = cJSON_GetObjectItem(j, "doc_tokens_computed")->valuedouble;
        double reused = cJSON_GetObjectItem(j, "doc_tokens_reused")->valuedouble;
        cr_assert(doc > 40, "%s", r.err);
        if (cases[i].all) cr_assert(computed == doc && reused == 0, "%s: %s", cases[i].method, r.err);
        else cr_assert(computed == 0 && reused == doc, "%s: %s", cases[i].method, r.err);
        cJSON_Delete(j);
        free(args);
        la_test_cli_free(&r);
    }
}
