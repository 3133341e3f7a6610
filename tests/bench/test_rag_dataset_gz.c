/* .gz datasets (src/bench/rag_dataset.c) are read with zlib: the bundled model's held-out
 * questions gzipped here (zlib's gzwrite, into a path holding a quote, a '$(...)' and a
 * space, which a shell command would have broken on or run) load to the same records as
 * the plain file; a damaged .gz is an error naming the file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "bench/rag_dataset.h"
#include "common/test_util.h"

static void gzip_to(const char *src, const char *dst, size_t keep_bytes) {
    FILE *in = fopen(src, "rb");
    cr_assert(in, "%s", src);
    gzFile out = gzopen(dst, "wb");
    cr_assert(out, "%s", dst);
    char buf[1 << 16];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0 && (!keep_bytes || total < keep_bytes)) {
        cr_assert_eq(gzwrite(out, buf, (unsigned)n), (int)n);
        total += n;
    }
    fclose(in);
    gzclose(out);
}

Test(rag_dataset_gz, a_gzipped_dataset_loads_like_the_plain_one_whatever_its_path) {
    char *src = la_test_path("models/rag-tiny/eval/test.jsonl");
    char *dir = la_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/it's $(touch pwned) a \"set\".jsonl.gz", dir);
    gzip_to(src, path, 0);
    la_rag_dataset plain, gz;
    la_err err = {0};
    LA_CHECK_OK(la_rag_dataset_load(src, 50, 0, &plain, &err), err);
    LA_CHECK_OK(la_rag_dataset_load(path, 50, 0, &gz, &err), err);
    cr_assert_eq(gz.n, plain.n);
    cr_assert_eq(gz.n, 50);
    for (int32_t i = 0; i < gz.n; i++) {
        cr_assert_str_eq(gz.q[i].question, plain.q[i].question);
        cr_assert_eq(gz.q[i].n_docs, plain.q[i].n_docs);
        cr_assert_str_eq(gz.q[i].docs[0].text, plain.q[i].docs[0].text);
    }
    la_rag_dataset_free(&plain);
    la_rag_dataset_free(&gz);
    char pwned[1024];
    snprintf(pwned, sizeof pwned, "%s/pwned", dir);
    cr_assert_neq(access("pwned", F_OK), 0, "nothing ran");
    cr_assert_neq(access(pwned, F_OK), 0, "nothing ran");
    /* a damaged file: its first bytes are gzip's, then garbage */
    char bad[1024];
    snprintf(bad, sizeof bad, "%s/bad.jsonl.gz", dir);
    gzip_to(src, bad, 0);
    FILE *f = fopen(bad, "r+b");
    fseek(f, 40, SEEK_SET);
    for (int i = 0; i < 64; i++) fputc(0x55, f);
    fclose(f);
    la_status s = la_rag_dataset_load(bad, 0, 0, &gz, &err);
    cr_assert_neq(s, LA_OK, "a damaged .gz is an error");
    cr_assert(strstr(err.msg, "bad.jsonl.gz"), "%s", err.msg);
    free(src);
    la_test_rm_tree(dir);
}

/* TriviaQA's retrievals hold documents with a title and no text (question 3 of
 * retrievalqa_triviaqa_subset50.jsonl has four); the engine refuses an empty document, so the
 * loader leaves them out and counts them, and --max-docs counts only documents kept. */
Test(rag_dataset, documents_with_no_text_are_left_out_and_counted) {
    char *dir = la_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/trivia.jsonl", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("{\"question_id\": \"q1\", \"question\": \"Which bird?\", \"ground_truth\": [\"wren\"], \"context\": ["
          "{\"title\": \"A\", \"text\": \"first\"}, {\"title\": \"Portal:Birds\", \"text\": \"\"}, "
          "{\"title\": \"B\"}, {\"title\": \"C\", \"text\": \"third\"}, {\"title\": \"D\", \"text\": \"fourth\"}]}\n",
          f);
    fclose(f);
    la_rag_dataset d;
    la_err err = {0};
    LA_CHECK_OK(la_rag_dataset_load(path, 0, 3, &d, &err), err);
    cr_assert_str_eq(d.format, "triviaqa");
    cr_assert_eq(d.n, 1);
    cr_assert_eq(d.q[0].n_docs, 3);
    cr_assert_str_eq(d.q[0].docs[0].text, "first");
    cr_assert_str_eq(d.q[0].docs[1].text, "third");
    cr_assert_str_eq(d.q[0].docs[2].text, "fourth");
    cr_assert_eq(d.q[0].n_empty_docs, 2);
    cr_assert_eq(d.n_empty_docs, 2);
    la_rag_dataset_free(&d);
    la_test_rm_tree(dir);
}
