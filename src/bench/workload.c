/* Workloads of `lazyattn bench` (workload.h). */
#include "bench/workload.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static const char *const k_reorder_names[] = {"shuffle", "reverse", "rotate", "none"};

const char *la_bench_reorder_name(la_bench_reorder r) {
    return (unsigned)r < 4 ? k_reorder_names[r] : "?";
}

la_status la_bench_reorder_parse(const char *s, la_bench_reorder *out, la_err *err) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, k_reorder_names[i])) {
            *out = (la_bench_reorder)i;
            return LA_OK;
        }
    return la_err_set(err, LA_ERR_INVALID_ARG,
                      "--reorder '%s': choose shuffle, reverse, rotate or none", s);
}

void la_bench_workload_opts_init(la_bench_workload_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_requests = 32;
    o->reorder = LA_BENCH_REORDER_SHUFFLE;
    o->seed = 1;
    o->docs_per_request = 4;
    o->doc_tokens = 128;
    o->pool_docs = 64;
    o->zipf_s = 1.0;
    o->tokens_per_word = 1.3;
    o->warmup_draws = -1;
}

/* ---- seeded randomness ------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *x) { return (double)(splitmix64(x) >> 11) * 0x1.0p-53; }

/* ---- synthetic text --------------------------------------------------------------------- */

static const char *const k_words[] = {
    "river",  "stone",  "market", "winter",  "harbor", "lamp",    "garden", "copper",
    "letter", "forest", "bridge", "violin",  "orchard", "signal", "canyon", "thread",
    "north",  "family", "school", "history", "village", "engine", "summer", "island",
    "paper",  "music",  "station", "window", "castle", "story",   "mountain", "city",
    "the",    "of",     "and",    "in",      "was",    "with",    "for",    "on",
    "by",     "from",   "old",    "new",     "small",  "great",   "early",  "later",
    "built",  "known",  "written", "opened", "moved",  "played",  "named",  "found",
    "first",  "second", "long",   "short",   "east",   "west",    "south",  "red"};
#define N_WORDS ((int)(sizeof k_words / sizeof k_words[0]))

char *la_bench_synthetic_text(int64_t doc_id, int32_t n_words) {
    size_t cap = 64 + (size_t)(n_words > 0 ? n_words : 0) * 10, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    n += (size_t)snprintf(s, cap, "Record %lld.", (long long)doc_id);
    uint64_t x = 0x5eed0000ull + (uint64_t)doc_id * 0x100000001b3ull;
    for (int32_t w = 0; w < n_words; w++) {
        const char *word = k_words[splitmix64(&x) % N_WORDS];
        n += (size_t)snprintf(s + n, cap - n, " %s", word);
    }
    return s;
}

/* ---- orders ----------------------------------------------------------------------------- */

static int same_order(const int32_t *a, const int32_t *b, int32_t n) {
    return memcmp(a, b, sizeof(int32_t) * (size_t)n) == 0;
}

/* Reorder base[n] into out[n] for measured request `index`, its `variant`-th repeat. */
static void reorder_docs(la_bench_reorder mode, const int32_t *base, int32_t n, uint64_t seed,
                         int32_t index, int32_t variant, int32_t *out) {
    if (n < 2 || mode == LA_BENCH_REORDER_NONE) {
        memcpy(out, base, sizeof(int32_t) * (size_t)n);
        return;
    }
    if (mode == LA_BENCH_REORDER_REVERSE) {
        for (int32_t i = 0; i < n; i++) out[i] = base[n - 1 - i];
        return;
    }
    if (mode == LA_BENCH_REORDER_ROTATE) {
        int32_t k = (1 + variant) % n;
        if (k == 0) k = 1;
        for (int32_t i = 0; i < n; i++) out[i] = base[(i + k) % n];
        return;
    }
    /* shuffle: Fisher-Yates, retried until the order differs from the base */
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)index * 1000003ull + 17;
    do {
        memcpy(out, base, sizeof(int32_t) * (size_t)n);
        for (int32_t i = n - 1; i > 0; i--) {
            int32_t j = (int32_t)(splitmix64(&x) % (uint64_t)(i + 1)), t = out[i];
            out[i] = out[j];
            out[j] = t;
        }
    } while (same_order(out, base, n));
}

/* ---- building --------------------------------------------------------------------------- */

static char *own(la_bench_workload *w, char *s) {
    if (!s) return NULL;
    char **p = realloc(w->owned, sizeof(char *) * (size_t)(w->n_owned + 1));
    if (!p) {
        free(s);
        return NULL;
    }
    w->owned = p;
    w->owned[w->n_owned++] = s;
    return s;
}

/* A printf-formatted string owned by w; NULL when out of memory. */
static char *own_printf(la_bench_workload *w, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return own(w, strdup(buf));
}

static la_status build_dataset(const la_bench_workload_opts *o, la_bench_workload *w, la_err *err) {
    LA_TRY(la_rag_dataset_load(o->dataset, o->n_requests, o->max_docs, &w->ds, err));
    if (w->ds.n == 0)
        return la_err_set(err, LA_ERR_FORMAT, "%s: no questions", o->dataset);
    w->format = w->ds.format;
    int32_t nq = w->ds.n, n_docs = 0;
    for (int32_t q = 0; q < nq; q++) n_docs += w->ds.q[q].n_docs;
    w->docs = calloc((size_t)(n_docs ? n_docs : 1), sizeof(la_rag_doc));
    w->warmup = calloc((size_t)nq, sizeof(la_bench_item));
    w->measured = calloc((size_t)o->n_requests, sizeof(la_bench_item));
    if (!w->docs || !w->warmup || !w->measured)
        return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    int32_t *first = calloc((size_t)nq, sizeof(int32_t));
    if (!first) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    for (int32_t q = 0; q < nq; q++) {
        la_rag_question *Q = &w->ds.q[q];
        first[q] = w->n_docs;
        for (int32_t d = 0; d < Q->n_docs; d++) {
            w->docs[w->n_docs].title = Q->docs[d].title ? Q->docs[d].title : "";
            w->docs[w->n_docs].text = Q->docs[d].text ? Q->docs[d].text : "";
            w->n_docs++;
        }
    }
    la_status s = LA_OK;
    for (int32_t r = -nq; r < o->n_requests && s == LA_OK; r++) {
        int32_t q = r < 0 ? r + nq : r % nq;
        la_rag_question *Q = &w->ds.q[q];
        la_bench_item *it = r < 0 ? &w->warmup[w->n_warmup++] : &w->measured[w->n_measured++];
        *it = (la_bench_item){.question_id = q, .question = Q->question, .answers = Q->answers,
                              .n_answers = Q->n_answers, .n_docs = Q->n_docs};
        it->doc_ids = malloc(sizeof(int32_t) * (size_t)(Q->n_docs + 1));
        int32_t *base = malloc(sizeof(int32_t) * (size_t)(Q->n_docs + 1));
        if (!it->doc_ids || !base) {
            free(base);
            s = la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
            break;
        }
        for (int32_t d = 0; d < Q->n_docs; d++) base[d] = first[q] + d;
        if (r < 0) memcpy(it->doc_ids, base, sizeof(int32_t) * (size_t)Q->n_docs);
        else reorder_docs(o->reorder, base, Q->n_docs, o->seed, r, r / nq, it->doc_ids);
        free(base);
    }
    free(first);
    if (s == LA_OK)
        snprintf(w->warmup_policy, sizeof w->warmup_policy,
                 "each of the %d questions is first asked once with the file's document order "
                 "(not measured); the %d measured requests cycle through them with the documents "
                 "reordered by '%s'",
                 nq, o->n_requests, la_bench_reorder_name(o->reorder));
    return s;
}

/* Draw k distinct documents from a pool by weight (weight[i] = 1/(i+1)^s: Zipf popularity),
 * without replacement (a chosen document's weight drops to 0); O(pool) per document.
 * Writes the ids to out[k] in ascending order. */
static void draw_docs(const double *weight, int32_t pool, int32_t k, uint64_t *x, double *scratch,
                      int32_t *out) {
    memcpy(scratch, weight, sizeof(double) * (size_t)pool);
    double total = 0;
    for (int32_t i = 0; i < pool; i++) total += scratch[i];
    for (int32_t j = 0; j < k; j++) {
        double u = uniform01(x) * total, acc = 0;
        int32_t pick = -1;
        for (int32_t i = 0; i < pool; i++) {
            if (scratch[i] <= 0) continue;
            pick = i;
            acc += scratch[i];
            if (acc > u) break;
        }
        total -= scratch[pick];
        scratch[pick] = 0;
        /* insertion into the sorted prefix */
        int32_t at = j;
        while (at > 0 && out[at - 1] > pick) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = pick;
    }
}

static la_status build_synthetic(const la_bench_workload_opts *o, la_bench_workload *w, la_err *err) {
    if (o->docs_per_request < 1 || o->doc_tokens < 1 || o->pool_docs < o->docs_per_request ||
        o->zipf_s < 0 || !(o->tokens_per_word > 0))
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "synthetic: need --docs-per-request >= 1, --doc-tokens >= 1, --pool-docs "
                          ">= --docs-per-request (got %d, %d, %d) and --zipf >= 0",
                          o->docs_per_request, o->doc_tokens, o->pool_docs);
    w->format = "synthetic";
    int32_t pool = o->pool_docs, k = o->docs_per_request, n = o->n_requests;
    int32_t n_words = (int32_t)ceil(o->doc_tokens / o->tokens_per_word);
    w->docs = calloc((size_t)pool, sizeof(la_rag_doc));
    w->measured = calloc((size_t)n, sizeof(la_bench_item));
    double *weight = malloc(sizeof(double) * (size_t)pool), *scratch = malloc(sizeof(double) * (size_t)pool);
    int32_t *base = malloc(sizeof(int32_t) * (size_t)k);
    la_status s = LA_OK;
    if (!w->docs || !w->measured || !weight || !scratch || !base)
        s = la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    for (int32_t i = 0; i < pool && s == LA_OK; i++) {
        w->docs[i].title = own_printf(w, "Record %d", i);
        w->docs[i].text = own(w, la_bench_synthetic_text(i, n_words));
        weight[i] = pow((double)(i + 1), -o->zipf_s);
        if (!w->docs[i].title || !w->docs[i].text)
            s = la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
        else w->n_docs++;
    }
    /* warm-up: every pool document once (in id order, k per request), then n requests drawn
     * by popularity; then the n measured requests */
    int32_t n_cover = (pool + k - 1) / k, nd = o->warmup_draws < 0 ? n : o->warmup_draws;
    w->warmup = calloc((size_t)(n_cover + nd), sizeof(la_bench_item));
    if (!w->warmup && s == LA_OK) s = la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    uint64_t x = o->seed * 0x2545f4914f6cdd1dull + 99;
    for (int32_t r = -(n_cover + nd); r < n && s == LA_OK; r++) {
        la_bench_item *it = r < 0 ? &w->warmup[w->n_warmup++] : &w->measured[w->n_measured++];
        int32_t qid = r + n_cover + nd;
        const char *word = k_words[(uint64_t)qid * 7 % 32];
        it->question_id = -1;
        it->question = own_printf(w, "Which records mention the %s? (question %d)", word, qid);
        it->n_docs = k;
        it->doc_ids = malloc(sizeof(int32_t) * (size_t)k);
        if (!it->question || !it->doc_ids) {
            s = la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
            break;
        }
        if (r < -nd) { /* cover: documents c*k .. c*k+k-1 (wrapping at the pool's end) */
            int32_t c = r + n_cover + nd;
            for (int32_t j = 0; j < k; j++) base[j] = (c * k + j) % pool;
            /* distinct and ascending even where the last request wraps */
            for (int32_t j = 1; j < k; j++)
                for (int32_t i = j; i > 0 && base[i - 1] > base[i]; i--) {
                    int32_t t = base[i];
                    base[i] = base[i - 1];
                    base[i - 1] = t;
                }
        } else {
            draw_docs(weight, pool, k, &x, scratch, base);
        }
        if (r < 0) memcpy(it->doc_ids, base, sizeof(int32_t) * (size_t)k);
        else reorder_docs(o->reorder, base, k, o->seed, r, 0, it->doc_ids);
    }
    free(weight);
    free(scratch);
    free(base);
    if (s == LA_OK)
        snprintf(w->warmup_policy, sizeof w->warmup_policy,
                 "%d requests covering each of the %d pool documents once, then %d requests drawn "
                 "from the document popularity (zipf s=%g), in document id order and not measured; "
                 "then %d measured requests drawn the same way with the documents reordered by '%s'",
                 n_cover, pool, nd, o->zipf_s, n, la_bench_reorder_name(o->reorder));
    return s;
}

la_status la_bench_workload_create(const la_bench_workload_opts *o, la_bench_workload *w, la_err *err) {
    memset(w, 0, sizeof *w);
    if (!o->dataset || o->n_requests < 1)
        return la_err_set(err, LA_ERR_INVALID_ARG, "bench: a dataset and --requests >= 1 are required");
    la_status s = !strcmp(o->dataset, "synthetic") ? build_synthetic(o, w, err) : build_dataset(o, w, err);
    if (s != LA_OK) la_bench_workload_free(w);
    return s;
}

void la_bench_workload_free(la_bench_workload *w) {
    if (!w) return;
    for (int32_t i = 0; i < w->n_warmup; i++) free(w->warmup[i].doc_ids);
    for (int32_t i = 0; i < w->n_measured; i++) free(w->measured[i].doc_ids);
    free(w->warmup);
    free(w->measured);
    free(w->docs);
    for (int32_t i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    if (w->ds.q) la_rag_dataset_free(&w->ds);
    memset(w, 0, sizeof *w);
}
