/* The document KV store from the command line (src/cli/engine_flags.c, cmd_ingest.c,
 * cmd_run.c --stats, cmd_bench.c --sweep host-kv) as the built binary on the bundled model:
 *   - every store flag's bad value, and a flag that means nothing without another, exits 2
 *     with one message naming the flag, in every command that takes the flags;
 *   - `run --kv-dir` twice: the second run loads every document from disk (--stats says
 *     so, with the store's numbers) and answers the same;
 *   - `ingest` computes a corpus into the directory, a second run skips all of it, a
 *     malformed line is a counted failure with its line number (exit 1), and its usage
 *     errors exit 2;
 *   - `bench --sweep host-kv` with a pool smaller than the documents: the host tier serves
 *     what the pool evicted (hit ratio by tier), none at 0 GiB.
 * No timing assertions. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "bench/rag_dataset.h"
#include "common/test_util.h"

#define MODEL "-m '" LA_SOURCE_DIR "/models/rag-tiny' --threads 1 "
#define DOCS                                                                                       \
    "--title 'Elkrak Avoltrax' --doc 'Elkrak Avoltrax (born 3 September 1972 in Chas, Wirnor) is "  \
    "a cinematographer.' --title 'Famtond Cuxirnca' --doc 'Famtond Cuxirnca was born in Kramker, "  \
    "Gailevea, on 19 December 1946. She worked as a cinematographer.' "

static cJSON *parse_file(const char *path) {
    char *text = NULL;
    la_err e = {0};
    LA_CHECK_OK(la_file_read(path, &text, NULL, &e), e);
    cJSON *j = cJSON_Parse(text);
    cr_assert(j, "%s is not JSON", path);
    free(text);
    return j;
}

static double num(const cJSON *o, const char *path) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    for (char *save = NULL, *t = strtok_r(buf, ".", &save); t; t = strtok_r(NULL, ".", &save))
        v = cJSON_GetObjectItemCaseSensitive(v, t);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", path);
    return v->valuedouble;
}

/* The last line of text that starts with '{' (the --stats line), parsed. */
static cJSON *stats_line(const char *text) {
    const char *at = NULL;
    for (const char *p = text; (p = strchr(p, '{')); p++)
        if (p == text || p[-1] == '\n') at = p;
    cr_assert(at, "no JSON line in: %s", text);
    cJSON *j = cJSON_ParseWithOpts(at, NULL, false);
    cr_assert(j, "not JSON: %s", at);
    return j;
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *p = la_path_join(dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0) n += S_ISDIR(st.st_mode) ? count_files(p) : 1;
        free(p);
    }
    closedir(d);
    return n;
}

/* ---- flag errors ------------------------------------------------------------------------------ */

typedef struct bad_case {
    const char *flags;
    const char *names; /* what the one message must mention */
} bad_case;

static const bad_case k_bad[] = {
    {"--host-kv-gib -1", "--host-kv-gib"},
    {"--host-kv-gib lots", "--host-kv-gib"},
    {"--host-kv-gib 1e9", "--host-kv-gib"},
    {"--host-kv-gib 0x10", "--host-kv-gib"}, /* decimal only, as the integer flags */
    {"--host-kv-gib ' 5'", "--host-kv-gib"},
    {"--host-kv-gib 1e1", "--host-kv-gib"},
    {"--host-kv-gib +5", "--host-kv-gib"},
    {"--kv-io-timeout-ms inf", "--kv-io-timeout-ms"},
    {"--kv-dir-gib -2", "--kv-dir-gib"},
    {"--kv-write sideways", "--kv-write"},
    {"--kv-dir ''", "--kv-dir"},
    {"--kv-secret-file ''", "--kv-secret-file"},
    {"--kv-store http://127.0.0.1:6379", "--kv-store"},
    {"--kv-store redis://127.0.0.1:99999", "--kv-store"},
    {"--kv-io-timeout-ms 0", "--kv-io-timeout-ms"},
    {"--kv-io-timeout-ms soon", "--kv-io-timeout-ms"},
    {"--kv-io-threads 0", "--kv-io-threads"},
    {"--kv-io-threads 65", "--kv-io-threads"},
    {"--kv-io-threads 2.5", "--kv-io-threads"},
    {"--kv-io-threads 0x10", "--kv-io-threads"},
    {"--kv-io-threads 1e1", "--kv-io-threads"},
    {"--kv-io-threads many", "--kv-io-threads"},
    {"--kv-read sometimes", "--kv-read"},
    {"--kv-read ''", "--kv-read"},
};

/* meaningful only with --kv-dir (or --kv-store): ingest always has --kv-dir */
static const bad_case k_bad_alone[] = {
    {"--kv-dir-gib 2", "--kv-dir-gib"},
    {"--kv-write evict", "--kv-write"},
    {"--kv-io-timeout-ms 100", "--kv-io-timeout-ms"},
    {"--kv-io-threads 8", "--kv-io-threads"},
    {"--kv-read auto", "--kv-read"},
};

static void expect_usage_error(const char *cmd, const char *base, const bad_case *c, bool one_line) {
    char *args = NULL;
    cr_assert(asprintf(&args, "%s %s %s", cmd, base, c->flags) > 0);
    la_test_cli_result r = la_test_cli("", args, NULL);
    cr_assert_eq(r.status, 2, "`%s`: exit %d, stderr %s", args, r.status, r.err);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "lazyattn %s: ", cmd);
    cr_assert(!strncmp(r.err, prefix, strlen(prefix)), "`%s`: %s", args, r.err);
    const char *nl = strchr(r.err, '\n');
    cr_assert(nl, "`%s`: %s", args, r.err);
    cr_assert(memmem(r.err, (size_t)(nl - r.err), c->names, strlen(c->names)), "`%s`: the message names no %s: %s",
              args, c->names, r.err);
    if (one_line) cr_assert_eq(nl[1], '\0', "`%s`: more than one line: %s", args, r.err);
    cr_assert_str_eq(r.out, "", "`%s` printed on stdout", args);
    la_test_cli_free(&r);
    free(args);
}

Test(store_cli, bad_store_flags_exit_2_with_one_message_in_every_command) {
    char *dir = la_test_tmpdir();
    char *corpus = la_path_join(dir, "c.jsonl"), *kv = la_path_join(dir, "kv");
    la_test_write_text(dir, "c.jsonl", "\"a document\"\n");
    char ingest_base[1024];
    snprintf(ingest_base, sizeof ingest_base, MODEL "--corpus '%s' --kv-dir '%s'", corpus, kv);
    const struct {
        const char *cmd, *base;
        bool one_line; /* eval and race print their usage after the message */
    } cmds[] = {
        {"run", MODEL "-p x", true},
        {"serve", MODEL, true},
        {"eval", MODEL "--dataset models/rag-tiny/eval/test.jsonl", false},
        {"bench", MODEL "--dataset synthetic", false}, /* "... (see lazyattn bench --help)" */
        {"race", MODEL, false},
        {"ingest", ingest_base, true},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        for (size_t k = 0; k < sizeof k_bad / sizeof k_bad[0]; k++)
            expect_usage_error(cmds[i].cmd, cmds[i].base, &k_bad[k], cmds[i].one_line || !strcmp(cmds[i].cmd, "bench"));
        if (strcmp(cmds[i].cmd, "ingest"))
            for (size_t k = 0; k < sizeof k_bad_alone / sizeof k_bad_alone[0]; k++)
                expect_usage_error(cmds[i].cmd, cmds[i].base, &k_bad_alone[k],
                                   cmds[i].one_line || !strcmp(cmds[i].cmd, "bench"));
    }
    cr_assert(!la_file_exists(kv), "a refused command created %s", kv);
    free(corpus), free(kv);
    la_test_rm_tree(dir);
}

Test(store_cli, bench_store_flags_apply_in_process_only) {
    const bad_case cases[] = {
        {"--sweep host-kv --url http://127.0.0.1:1", "--sweep host-kv"},
        {"--sweep host-kv --host-kv-gib 1", "--host-kv-gib"},
        {"--kv-dir /tmp/x --url http://127.0.0.1:1", "store flags"},
        {"--sweep kv --points 0,1", "--points"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_usage_error("bench", "--dataset synthetic", &cases[i], true);
}

/* ---- run ---------------------------------------------------------------------------------- */

Test(store_cli, run_twice_on_a_kv_dir_loads_every_document_from_disk) {
    char *dir = la_test_tmpdir();
    char *args = NULL;
    cr_assert(asprintf(&args, "run " MODEL DOCS "-p 'Where was Elkrak Avoltrax born?' --stats --kv-dir '%s/kv'", dir) >
              0);
    la_test_cli_result a = la_test_cli("", args, NULL), b = la_test_cli("", args, NULL);
    cr_assert_eq(a.status, 0, "%s", a.err);
    cr_assert_eq(b.status, 0, "%s", b.err);
    cr_assert_str_eq(a.out, "Chas");
    cr_assert_str_eq(b.out, a.out);
    cJSON *sa = stats_line(a.err), *sb = stats_line(b.err);
    double doc_tokens = num(sa, "doc_tokens");
    /* the first run computes the preamble block and both documents, and writes them */
    cr_assert_eq(num(sa, "doc_tokens_computed"), doc_tokens);
    cr_assert_eq(num(sa, "doc_tokens_disk"), 0);
    cr_assert_eq(num(sa, "store.tiers.disk.writes"), 3, "%s", a.err);
    cr_assert_eq(num(sa, "store.documents_computed"), 3);
    cr_assert_gt(num(sa, "store.tiers.disk.bytes_written"), 0);
    /* the second loads all three */
    cr_assert_eq(num(sb, "doc_tokens"), doc_tokens);
    cr_assert_eq(num(sb, "doc_tokens_disk"), doc_tokens, "%s", b.err);
    cr_assert_eq(num(sb, "doc_tokens_reused"), doc_tokens);
    cr_assert_eq(num(sb, "doc_tokens_computed"), 0);
    cr_assert_eq(num(sb, "doc_tokens_host") + num(sb, "doc_tokens_shared"), 0);
    cr_assert_eq(num(sb, "store.tiers.disk.hits"), 3);
    cr_assert_eq(num(sb, "store.documents_loaded"), 3);
    cr_assert_eq(num(sb, "store.tiers.disk.bytes_read"), num(sa, "store.tiers.disk.bytes_written"));
    cr_assert_eq(num(sb, "store.rejected"), 0);
    cJSON_Delete(sa), cJSON_Delete(sb);
    la_test_cli_free(&a), la_test_cli_free(&b);
    free(args);
    la_test_rm_tree(dir);
}

/* ---- ingest ------------------------------------------------------------------------------- */

/* The documents of the first n questions of the bundled model's eval set, one {"title",
 * "text"} per line; *n_unique: how many distinct ones. */
static char *write_corpus(const char *dir, int32_t n_questions, int32_t *n_docs, int32_t *n_unique) {
    la_rag_dataset ds;
    la_err err = {0};
    LA_CHECK_OK(la_rag_dataset_load(LA_SOURCE_DIR "/models/rag-tiny/eval/test.jsonl", n_questions, 0, &ds, &err), err);
    char *path = la_path_join(dir, "corpus.jsonl");
    FILE *f = fopen(path, "w");
    cr_assert(f);
    *n_docs = *n_unique = 0;
    for (int32_t q = 0; q < ds.n; q++)
        for (int32_t d = 0; d < ds.q[q].n_docs; d++) {
            const la_rag_doc *doc = &ds.q[q].docs[d];
            bool seen = false;
            for (int32_t q2 = 0; q2 <= q && !seen; q2++)
                for (int32_t d2 = 0; d2 < (q2 == q ? d : ds.q[q2].n_docs) && !seen; d2++)
                    seen = !strcmp(ds.q[q2].docs[d2].title, doc->title) && !strcmp(ds.q[q2].docs[d2].text, doc->text);
            *n_unique += !seen;
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "title", doc->title);
            cJSON_AddStringToObject(o, "text", doc->text);
            char *line = cJSON_PrintUnformatted(o);
            fprintf(f, "%s\n%s", line, d == 0 ? "\n" : ""); /* a blank line is no document */
            free(line);
            cJSON_Delete(o);
            (*n_docs)++;
        }
    fclose(f);
    la_rag_dataset_free(&ds);
    return path;
}

static cJSON *ingest(const char *corpus, const char *kv, const char *json, int expect_status) {
    char *args = NULL;
    cr_assert(asprintf(&args, "ingest " MODEL "--corpus '%s' --kv-dir '%s' --json '%s' --batch 4", corpus, kv, json) >
              0);
    la_test_cli_result r = la_test_cli("", args, NULL);
    cr_assert_eq(r.status, expect_status, "`%s`: exit %d: %s", args, r.status, r.err);
    cr_assert(strstr(r.out, "lazyattn ingest: "), "no summary: %s", r.out);
    cr_assert(strstr(r.out, "GB written"), "no summary: %s", r.out);
    la_test_cli_free(&r);
    free(args);
    return parse_file(json);
}

Test(store_cli, ingest_fills_the_dir_and_a_second_run_skips_everything) {
    char *dir = la_test_tmpdir();
    char *kv = la_path_join(dir, "kv"), *json = la_path_join(dir, "ingest.json");
    int32_t n_docs, n_unique;
    char *corpus = write_corpus(dir, 3, &n_docs, &n_unique);
    cr_assert_geq(n_unique, 20);

    cJSON *a = ingest(corpus, kv, json, 0);
    cr_assert_eq(num(a, "summary.documents.total"), n_docs);
    cr_assert_eq(num(a, "summary.documents.computed"), n_unique);
    cr_assert_eq(num(a, "summary.documents.skipped"), n_docs - n_unique); /* duplicates */
    cr_assert_eq(num(a, "summary.documents.failed"), 0);
    cr_assert_eq(num(a, "summary.writes"), n_unique);
    cr_assert_eq(num(a, "summary.write_failures"), 0);
    cr_assert_gt(num(a, "summary.tokens"), 0);
    cr_assert_gt(num(a, "summary.bytes_written"), 0);
    cr_assert_eq(num(a, "summary.bytes_written"), num(a, "store.tiers.disk.bytes_written"));
    cr_assert_eq(num(a, "store.tiers.disk.records"), n_unique);
    cr_assert(cJSON_GetObjectItem(a, "machine") && cJSON_GetObjectItem(a, "command"));
    char *records = la_path_join(kv, "kv");
    cr_assert_eq(count_files(records), n_unique, "record files under %s", records);

    cJSON *b = ingest(corpus, kv, json, 0); /* resumed: everything is there */
    cr_assert_eq(num(b, "summary.documents.computed"), 0);
    cr_assert_eq(num(b, "summary.documents.skipped"), n_docs);
    cr_assert_eq(num(b, "summary.bytes_written"), 0);
    cr_assert_eq(num(b, "summary.tokens"), 0);
    cr_assert_eq(count_files(records), n_unique);

    /* a malformed line and an empty text: counted failures with their line, exit 1; the
     * good new document is still computed */
    FILE *f = fopen(corpus, "a");
    fprintf(f, "{\"title\": \"X\"}\nnot json\n\"a new document, untitled\"\n");
    fclose(f);
    cJSON *c = ingest(corpus, kv, json, 1);
    cr_assert_eq(num(c, "summary.documents.failed"), 2);
    cr_assert_eq(num(c, "summary.documents.computed"), 1);
    const cJSON *first = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "summary"), "first_error");
    cr_assert(cJSON_IsString(first) && strstr(first->valuestring, "corpus.jsonl:") &&
                  strstr(first->valuestring, "\"text\""),
              "first_error: %s", cJSON_IsString(first) ? first->valuestring : "-");
    cJSON_Delete(a), cJSON_Delete(b), cJSON_Delete(c);
    free(records), free(corpus), free(kv), free(json);
    la_test_rm_tree(dir);
}

Test(store_cli, ingest_usage_and_other_errors) {
    char *dir = la_test_tmpdir();
    la_test_write_text(dir, "c.jsonl", "\"a document\"\n");
    char *corpus = la_path_join(dir, "c.jsonl");
    const struct {
        const char *args; /* %1$s: the corpus, %2$s: the temporary directory */
        int status;
        const char *says;
    } cases[] = {
        {"--kv-dir '%2$s/kv'", 2, "--corpus"},
        {"--corpus '%1$s'", 2, "--kv-dir"},
        {"--corpus '%1$s' --kv-dir '%2$s/kv' --kv-write evict", 2, "--kv-write"},
        {"--corpus '%1$s' --kv-dir '%2$s/kv' --method prefix", 2, "--method"},
        {"--corpus '%1$s' --kv-dir '%2$s/kv' --batch 0", 2, "--batch"},
        {"--corpus '%2$s/missing.jsonl' --kv-dir '%2$s/kv'", 1, "missing.jsonl"},
        {"--corpus '%1$s' --kv-dir '%1$s/kv'", 1, "no usable disk tier"}, /* under a regular file */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *flags = NULL, *args = NULL;
        cr_assert(asprintf(&flags, cases[i].args, corpus, dir) > 0);
        cr_assert(asprintf(&args, "ingest " MODEL "%s", flags) > 0);
        la_test_cli_result r = la_test_cli("", args, NULL);
        cr_assert_eq(r.status, cases[i].status, "`%s`: exit %d: %s", args, r.status, r.err);
        cr_assert(strstr(r.err, "lazyattn ingest: ") && strstr(r.err, cases[i].says), "`%s`: %s", args, r.err);
        la_test_cli_free(&r);
        free(flags), free(args);
    }
    free(corpus);
    la_test_rm_tree(dir);
}

/* ---- bench -------------------------------------------------------------------------------- */

Test(store_cli, bench_host_kv_sweep_serves_evicted_documents_from_the_host_tier) {
    char *dir = la_test_tmpdir();
    char *json = la_path_join(dir, "b.json"), *args = NULL;
    /* 24 pool documents of ~64 tokens (4 blocks each) against a pool of 40 blocks */
    cr_assert(asprintf(&args,
                       "bench " MODEL "--dataset synthetic --sweep host-kv --points 0,0.01 --requests 8 "
                       "--pool-docs 24 --docs-per-request 3 --doc-tokens 64 --max-tokens 2 --methods lazy "
                       "--kv-blocks 40 --json '%s'",
                       json) > 0);
    la_test_cli_result r = la_test_cli("", args, NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(strstr(r.out, "host%"), "no tier columns: %s", r.out);
    cJSON *j = parse_file(json);
    const cJSON *pts = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "sweep"), "points");
    cr_assert_eq(cJSON_GetArraySize(pts), 2);
    const cJSON *none = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(pts, 0), "methods"), 0);
    const cJSON *host = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(pts, 1), "methods"), 0);
    cr_assert_eq(num(cJSON_GetArrayItem(pts, 1), "host_kv_bytes"), (double)(int64_t)(0.01 * 1073741824.0));
    cr_assert_eq(num(none, "doc_hit_ratio_by_tier.host"), 0);
    cr_assert_lt(num(none, "doc_hit_ratio"), 1, "the pool holds every document: no eviction to test");
    cr_assert_gt(num(host, "doc_hit_ratio_by_tier.host"), 0);
    cr_assert_gt(num(host, "doc_hit_ratio"), num(none, "doc_hit_ratio"));
    double sum = num(host, "doc_hit_ratio_by_tier.pool") + num(host, "doc_hit_ratio_by_tier.host") +
                 num(host, "doc_hit_ratio_by_tier.disk") + num(host, "doc_hit_ratio_by_tier.shared");
    cr_assert_float_eq(sum, num(host, "doc_hit_ratio"), 1e-9);
    /* the engine's own counts agree: the host tier served loads and took write-backs */
    cr_assert_gt(num(host, "store.tiers.host.hits"), 0);
    cr_assert_gt(num(host, "store.writebacks"), 0);
    cr_assert_gt(num(host, "store.documents_loaded"), 0);
    cr_assert(!cJSON_GetObjectItem(none, "store"), "no store at 0 GiB");
    cJSON_Delete(j);
    la_test_cli_free(&r);
    free(args), free(json);
    la_test_rm_tree(dir);
}
