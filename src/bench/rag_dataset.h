/* RAG question sets for `lazyattn eval` and `lazyattn bench`: loading the public files in
 * ../shared/data and the demo model's eval set, and answer matching. */
#ifndef LA_BENCH_RAG_DATASET_H
#define LA_BENCH_RAG_DATASET_H

#include <stdint.h>

#include "lazyattn/status.h"

typedef struct la_rag_doc {
    char *title; /* may be "" */
    char *text;
} la_rag_doc;

typedef struct la_rag_question {
    char *id;
    char *question;
    la_rag_doc *docs;
    int32_t n_docs;
    char **answers;
    int32_t n_answers;
    int32_t hops;   /* 1 or 2 for the demo set; 0 when the file does not say */
    char *type;     /* question type when the file gives one, else "" */
    int32_t n_empty_docs; /* documents of the file with no text, left out (the engine refuses them) */
} la_rag_question;

typedef struct la_rag_dataset {
    la_rag_question *q;
    int32_t n;
    const char *format; /* "demo", "hotpotqa", "2wiki-flashrag", "cacheblend", "nq", "triviaqa" */
    int32_t n_empty_docs; /* summed over the questions */
} la_rag_dataset;

/* Load a dataset file, recognising its format from the first record's keys (formats in
 * ../shared/data/README.md; the demo set is {id, question, documents:[{title,text}],
 * answers, hops, type} per line). .gz files are read through `gzip -dc`. At most max_docs
 * documents per question (<= 0: all) and max_q questions (<= 0: all). A document with no
 * text (TriviaQA's retrievals have some) is left out and counted in n_empty_docs; it does not
 * count towards max_docs.
 * Errors: LA_ERR_IO, LA_ERR_FORMAT naming the file and line. Free with la_rag_dataset_free. */
la_status la_rag_dataset_load(const char *path, int32_t max_q, int32_t max_docs,
                              la_rag_dataset *out, la_err *err);
void la_rag_dataset_free(la_rag_dataset *d);

/* Normalise as SQuAD's evaluation does: lower case, drop punctuation and the articles
 * a/an/the, collapse whitespace. Heap string. */
char *la_rag_normalize(const char *s);

/* Exact match, relaxed to containment as in Block-Attention's and LazyAttention's RAG
 * evaluation: 1 when some normalised gold answer occurs in the normalised prediction. */
int la_rag_answer_matches(const char *prediction, char *const *answers, int32_t n_answers);

#endif
