/* The document KV store through `lazyattn serve` processes on the bundled model (issue 29,
 * acceptance 2 and the ingest / pre-warm paths), real servers started and stopped by the
 * test:
 *   - restart: server A (--kv-dir D) answers a question with documents and is stopped with
 *     SIGTERM (the engine flushes its store writes on the way out); server B on D answers
 *     the same question with the documents reordered from disk (the "lazyattn" object,
 *     usage.cached_tokens and /metrics say so) and its answer is the one A gave and the one a
 *     server without a store computes for that order;
 *   - ingest: `lazyattn ingest` fills D from the eval set's documents; a server on D answers
 *     a question over them with every document a disk hit (token counts from the tokenizer
 *     on the rendered documents), as a server without a store answers it;
 *   - POST /v1/documents: says where each document was ("computed", "pool", "disk"), and
 *     its records are on disk when it answers: a server killed with SIGKILL right after
 *     leaves them for the next one.
 * No timing assertions. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "bench/rag_dataset.h"
#include "model/prompt_template.h"
#include "server_util.h"
#include "serve_proc.h"
#include "tokenizer/tokenizer.h"

#define RAG_MODEL "models/rag-tiny"
#define EVAL_SET LA_SOURCE_DIR "/models/rag-tiny/eval/test.jsonl"

static la_rag_dataset g_ds;

static void load_questions(int32_t n) {
    la_err err = {0};
    LA_CHECK_OK(la_rag_dataset_load(EVAL_SET, n, 0, &g_ds, &err), err);
    cr_assert_eq(g_ds.n, n);
}

/* A server on the bundled model, one thread, with extra arguments (NULL-terminated, up to 6). */
static void start(la_serve_proc *p, const char *const *extra) {
    const char *args[16] = {"-m", RAG_MODEL, "--threads", "1"};
    int n = 4;
    for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    cr_assert(la_serve_start(p, args) == 0, "serve did not start: %s", p->log);
}

static void stop(la_serve_proc *p, int sig, int want) {
    int rc = la_serve_stop(p, sig, 120);
    cr_assert_eq(rc, want, "exit status %d: %s", rc, p->log);
}

/* The chat request of question q with its documents in order[] (NULL: the file's). */
static char *chat_body(int32_t q, const int32_t *order) {
    const la_rag_question *x = &g_ds.q[q];
    cJSON *o = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(o, "messages"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", x->question);
    cJSON_AddItemToArray(msgs, m);
    cJSON *docs = cJSON_AddArrayToObject(o, "documents");
    for (int32_t d = 0; d < x->n_docs; d++) {
        const la_rag_doc *doc = &x->docs[order ? order[d] : d];
        cJSON *dj = cJSON_CreateObject();
        cJSON_AddStringToObject(dj, "title", doc->title);
        cJSON_AddStringToObject(dj, "text", doc->text);
        cJSON_AddItemToArray(docs, dj);
    }
    cJSON_AddNumberToObject(o, "max_tokens", 32);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static void reversed(int32_t n, int32_t *order) {
    for (int32_t d = 0; d < n; d++) order[d] = n - 1 - d;
}

typedef struct answer {
    char *text;
    double doc_tokens, reused, computed, host, disk, shared, cached;
} answer;

static answer ask(int port, const char *body) {
    cJSON *j = ts_post(port, "/v1/chat/completions", body, 200);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    answer a = {.text = strdup(ts_str(c, "message", "content")),
                .doc_tokens = ts_num(j, "lazyattn", "doc_tokens"),
                .reused = ts_num(j, "lazyattn", "doc_tokens_reused"),
                .computed = ts_num(j, "lazyattn", "doc_tokens_computed"),
                .host = ts_num(j, "lazyattn", "doc_tokens_host"),
                .disk = ts_num(j, "lazyattn", "doc_tokens_disk"),
                .shared = ts_num(j, "lazyattn", "doc_tokens_shared")};
    a.cached = ts_num(cJSON_GetObjectItemCaseSensitive(j, "usage"), "prompt_tokens_details", "cached_tokens");
    cJSON_Delete(j);
    return a;
}

/* The value of one sample line ("name{labels}") of GET /metrics. */
static double metric(int port, const char *sample) {
    la_http_resp r;
    cr_assert(la_http_request(port, "GET", "/metrics", NULL, 0, NULL, &r) == 0);
    cr_assert_eq(r.status, 200);
    char key[256];
    snprintf(key, sizeof key, "\n%s ", sample);
    const char *at = strstr(r.body, key);
    cr_assert(at, "/metrics has no %s", sample);
    double v = strtod(at + strlen(key), NULL);
    la_http_resp_free(&r);
    return v;
}

/* The answer of a server without a store (the documents computed in it). */
static char *fresh_answer(const char *body) {
    la_serve_proc p;
    start(&p, NULL);
    answer a = ask(p.port, body);
    cr_assert_eq(a.disk + a.host + a.shared, 0);
    stop(&p, SIGTERM, 0);
    return a.text;
}

Test(kv_store_serve, restart_serves_reordered_documents_from_disk_with_the_same_answer) {
    load_questions(1);
    char *dir = la_test_tmpdir(), *kv = la_path_join(dir, "kv");
    const char *const store[] = {"--kv-dir", kv, NULL};
    char *body = chat_body(0, NULL);

    la_serve_proc a;
    start(&a, store);
    answer first = ask(a.port, body);
    cr_assert_eq(first.computed, first.doc_tokens, "a fresh directory holds nothing");
    cr_assert_eq(first.disk, 0);
    cr_assert_eq(metric(a.port, "lazyattn_kv_store_enabled{tier=\"disk\"}"), 1);
    stop(&a, SIGTERM, 0); /* flushes the store's writes */

    int32_t order[16];
    reversed(g_ds.q[0].n_docs, order);
    char *rbody = chat_body(0, order);
    la_serve_proc b;
    start(&b, store);
    answer again = ask(b.port, rbody);
    int n_docs = g_ds.q[0].n_docs + 1; /* and the system block, a document of its own */
    cr_assert_eq(again.doc_tokens, first.doc_tokens);
    cr_assert_eq(again.disk, again.doc_tokens, "every document token from disk: %g of %g", again.disk,
                 again.doc_tokens);
    cr_assert_eq(again.reused, again.doc_tokens);
    cr_assert_eq(again.computed, 0);
    cr_assert_eq(again.host + again.shared, 0);
    cr_assert_geq(again.cached, again.doc_tokens);
    cr_assert_eq(metric(b.port, "lazyattn_kv_store_hits_total{tier=\"disk\"}"), n_docs);
    cr_assert_eq(metric(b.port, "lazyattn_kv_store_misses_total{tier=\"disk\"}"), 0);
    cr_assert_eq(metric(b.port, "lazyattn_documents_loaded_total"), n_docs);
    cr_assert_eq(metric(b.port, "lazyattn_documents_computed_total"), 0);
    cr_assert_gt(metric(b.port, "lazyattn_kv_store_read_bytes_total{tier=\"disk\"}"), 0);
    cr_assert_gt(metric(b.port, "lazyattn_kv_copy_bytes_total{direction=\"in\"}"), 0);
    cr_assert_eq(metric(b.port, "lazyattn_kv_store_rejected_total{reason=\"payload_checksum\"}"), 0);
    stop(&b, SIGTERM, 0);

    char *ref = fresh_answer(rbody);
    cr_assert_str_eq(again.text, ref, "from disk: '%s'; computed: '%s'", again.text, ref);
    cr_assert_str_eq(again.text, first.text, "reordered: '%s'; first: '%s'", again.text, first.text);
    free(ref), free(first.text), free(again.text), free(body), free(rbody), free(kv);
    la_test_rm_tree(dir);
    la_rag_dataset_free(&g_ds);
}

/* Tokens of a titled document as the engine renders it (the RAG template's block). */
static int32_t doc_tokens(const la_tokenizer *tok, const la_rag_doc *doc) {
    la_segment seg = {.text = doc->text, .title = doc->title[0] ? doc->title : NULL};
    char *text = la_prompt_render_document(&seg);
    cr_assert(text);
    int32_t *ids = NULL, n = 0;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_encode(tok, text, strlen(text), false, &ids, &n, &err), err);
    free(ids);
    free(text);
    return n;
}

Test(kv_store_serve, ingested_corpus_serves_every_document_from_disk) {
    load_questions(3);
    char *dir = la_test_tmpdir(), *kv = la_path_join(dir, "kv"), *corpus = la_path_join(dir, "corpus.jsonl");
    FILE *f = fopen(corpus, "w");
    cr_assert(f);
    for (int32_t q = 0; q < g_ds.n; q++)
        for (int32_t d = 0; d < g_ds.q[q].n_docs; d++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "title", g_ds.q[q].docs[d].title);
            cJSON_AddStringToObject(o, "text", g_ds.q[q].docs[d].text);
            char *line = cJSON_PrintUnformatted(o);
            fprintf(f, "%s\n", line);
            free(line);
            cJSON_Delete(o);
        }
    fclose(f);
    char *args = NULL;
    cr_assert(asprintf(&args, "ingest -m " RAG_MODEL " --threads 1 --corpus '%s' --kv-dir '%s'", corpus, kv) > 0);
    la_test_cli_result r = la_test_cli("", args, NULL);
    cr_assert_eq(r.status, 0, "ingest: %s", r.err);
    cr_assert(strstr(r.out, " 0 failed"), "%s", r.out);
    la_test_cli_free(&r);

    /* question 1, its documents reversed */
    const int32_t q = 1;
    int32_t order[16];
    reversed(g_ds.q[q].n_docs, order);
    char *body = chat_body(q, order);
    la_tokenizer *tok = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_load(RAG_MODEL, &tok, &err), err);
    int32_t want = 0;
    for (int32_t d = 0; d < g_ds.q[q].n_docs; d++) want += doc_tokens(tok, &g_ds.q[q].docs[d]);
    la_tokenizer_destroy(tok);

    const char *const store[] = {"--kv-dir", kv, NULL};
    la_serve_proc p;
    start(&p, store);
    answer a = ask(p.port, body);
    cr_assert_eq(a.disk, want, "document tokens from disk: %g, the documents have %d", a.disk, want);
    /* the rest is the system block, which ingest never saw: computed here */
    cr_assert_eq(a.computed, a.doc_tokens - want);
    cr_assert_gt(a.computed, 0);
    cr_assert_eq(metric(p.port, "lazyattn_kv_store_hits_total{tier=\"disk\"}"), g_ds.q[q].n_docs);
    cr_assert_eq(metric(p.port, "lazyattn_kv_store_misses_total{tier=\"disk\"}"), 1);
    cr_assert_eq(metric(p.port, "lazyattn_documents_loaded_total"), g_ds.q[q].n_docs);
    stop(&p, SIGTERM, 0);

    char *ref = fresh_answer(body);
    cr_assert_str_eq(a.text, ref, "from disk: '%s'; computed: '%s'", a.text, ref);
    cr_assert(la_rag_answer_matches(a.text, g_ds.q[q].answers, g_ds.q[q].n_answers), "answer '%s'", a.text);
    free(ref), free(a.text), free(body), free(args), free(corpus), free(kv);
    la_test_rm_tree(dir);
    la_rag_dataset_free(&g_ds);
}

/* The "found" of each document of a /v1/documents answer, and its "cached". */
static void check_found(const cJSON *j, const char *const *want, int n) {
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(j, "documents");
    cr_assert_eq(cJSON_GetArraySize(docs), n);
    for (int i = 0; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(docs, i);
        cr_assert_str_eq(ts_str(d, "found", NULL), want[i], "documents[%d]", i);
        bool cached = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "cached"));
        cr_assert_eq(cached, strcmp(want[i], "computed") != 0, "documents[%d].cached", i);
    }
    cr_assert_eq(ts_num(j, "found", want[0]) >= 1, true);
}

Test(kv_store_serve, prewarmed_documents_are_on_disk_when_the_answer_comes) {
    char *dir = la_test_tmpdir(), *kv = la_path_join(dir, "kv");
    const char *const store[] = {"--kv-dir", kv, NULL};
    static const char body[] = "{\"documents\": [\"Quorble is a town on the Fent river.\", "
                               "{\"title\": \"Zandor Pek\", \"text\": \"Zandor Pek was born in Quorble.\"}]}";
    la_serve_proc a;
    start(&a, store);
    cJSON *j = ts_post(a.port, "/v1/documents", body, 200);
    static const char *const computed[] = {"computed", "computed"};
    check_found(j, computed, 2);
    cr_assert_eq(ts_num(j, "found", "computed"), 2);
    cJSON_Delete(j);
    j = ts_post(a.port, "/v1/documents", body, 200); /* in the pool now */
    static const char *const pool[] = {"pool", "pool"};
    check_found(j, pool, 2);
    cJSON_Delete(j);
    cr_assert_eq(metric(a.port, "lazyattn_kv_store_writes_total{tier=\"disk\"}"), 2);
    /* no shutdown, no flush on the way out: the records were written before the answer */
    stop(&a, SIGKILL, 128 + SIGKILL);

    la_serve_proc b;
    start(&b, store);
    j = ts_post(b.port, "/v1/documents", body, 200);
    static const char *const disk[] = {"disk", "disk"};
    check_found(j, disk, 2);
    cr_assert_eq(ts_num(j, "cached_tokens", NULL), ts_num(j, "tokens", NULL));
    cJSON_Delete(j);
    /* a tenant's salt names other records: computed */
    j = ts_post(b.port, "/v1/documents",
                "{\"documents\": [\"Quorble is a town on the Fent river.\"], \"cache_salt\": \"t1\"}", 200);
    static const char *const salted[] = {"computed"};
    check_found(j, salted, 1);
    cJSON_Delete(j);
    cr_assert_eq(metric(b.port, "lazyattn_kv_store_hits_total{tier=\"disk\"}"), 2);
    cr_assert_eq(metric(b.port, "lazyattn_documents_loaded_total"), 2);
    stop(&b, SIGTERM, 0);
    free(kv);
    la_test_rm_tree(dir);
}
