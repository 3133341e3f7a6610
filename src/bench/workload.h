/* Workloads of `lazyattn bench`: the warm-up and measured requests of one run, built from a
 * RAG dataset file (bench/rag_dataset.h) or from a synthetic generator.
 *
 * A request is a question plus documents in prompt order; the driver sends it as one chat
 * turn with titled documents (the Block-FT RAG template, model/prompt_template.h).
 *
 * Warm-up policy (stated in the bench output):
 *   dataset    every question used is asked once with the file's document order (not
 *              measured); the measured requests then cycle through those questions with
 *              the documents reordered by --reorder (request r: question r mod Q, variant
 *              r / Q, so repeats get a different order where the mode allows one).
 *   synthetic  requests that cover every pool document once, then as many requests as
 *              measured ones drawn from the same document popularity (not measured,
 *              documents in id order); measured requests reorder their documents by
 *              --reorder. A steady state: with room for the whole pool every document is
 *              cached, and under a small KV capacity the recent requests' documents compete
 *              for it as the measured ones do.
 */
#ifndef LA_BENCH_WORKLOAD_H
#define LA_BENCH_WORKLOAD_H

#include <stdint.h>

#include "bench/rag_dataset.h"
#include "lazyattn/status.h"

typedef enum la_bench_reorder {
    LA_BENCH_REORDER_SHUFFLE = 0, /* a seeded permutation per request */
    LA_BENCH_REORDER_REVERSE,     /* the base order reversed */
    LA_BENCH_REORDER_ROTATE,      /* the base order rotated left by 1 (+1 per repeat) */
    LA_BENCH_REORDER_NONE,        /* the base order (prefix caching reuses everything) */
} la_bench_reorder;

/* "shuffle", "reverse", "rotate", "none". */
const char *la_bench_reorder_name(la_bench_reorder r);
/* Errors: LA_ERR_INVALID_ARG naming the value and the choices. */
la_status la_bench_reorder_parse(const char *s, la_bench_reorder *out, la_err *err);

typedef struct la_bench_workload_opts {
    const char *dataset;        /* a RAG file (rag_dataset.h formats) or "synthetic" */
    int32_t n_requests;         /* measured requests (>= 1) */
    int32_t max_docs;           /* dataset: documents per question (<= 0: all) */
    la_bench_reorder reorder;
    uint64_t seed;
    /* synthetic only */
    int32_t docs_per_request;   /* distinct documents per request (>= 1) */
    int32_t doc_tokens;         /* about this many tokens per document text (>= 1) */
    int32_t pool_docs;          /* documents to draw from (>= docs_per_request) */
    double zipf_s;              /* popularity of the document of rank k ~ 1 / k^s (0: uniform) */
    int32_t warmup_draws;       /* warm-up requests drawn by popularity after the pass that covers
                                 * the pool once (< 0: as many as n_requests); the draws share
                                 * one random stream with the measured requests, so a different
                                 * count measures different requests */
    double tokens_per_word;     /* the tokenizer's rate on synthetic text (la_bench_synthetic_text) */
} la_bench_workload_opts;

void la_bench_workload_opts_init(la_bench_workload_opts *o);

typedef struct la_bench_item {
    int32_t question_id;        /* dataset: the question's index in the file; synthetic: -1 */
    const char *question;       /* borrowed from the workload */
    char *const *answers;       /* gold answers (borrowed); NULL for synthetic */
    int32_t n_answers;
    int32_t *doc_ids;           /* [n_docs] indices into la_bench_workload.docs, prompt order */
    int32_t n_docs;
} la_bench_item;

typedef struct la_bench_workload {
    la_rag_doc *docs;           /* the document table; title and text never NULL */
    int32_t n_docs;
    la_bench_item *warmup;      /* [n_warmup] not measured, sent first */
    int32_t n_warmup;
    la_bench_item *measured;    /* [n_measured] */
    int32_t n_measured;
    const char *format;         /* the dataset's format, or "synthetic" */
    char warmup_policy[512];    /* one sentence for the table and the JSON */
    /* owned storage */
    la_rag_dataset ds;
    char **owned;               /* synthetic texts and questions */
    int32_t n_owned;
} la_bench_workload;

/* Build a workload. Errors: LA_ERR_INVALID_ARG (options), those of la_rag_dataset_load
 * (LA_ERR_IO, LA_ERR_FORMAT), LA_ERR_NO_MEMORY; *w is left zeroed on error.
 * Free with la_bench_workload_free(). */
la_status la_bench_workload_create(const la_bench_workload_opts *o, la_bench_workload *w, la_err *err);
void la_bench_workload_free(la_bench_workload *w);

/* The synthetic text of document doc_id: n_words common English words, the same for the same
 * arguments. Heap string (caller frees), NULL when out of memory. */
char *la_bench_synthetic_text(int64_t doc_id, int32_t n_words);

#endif
