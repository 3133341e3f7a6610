/* Selected recovery (recovery.h). */
#include "engine/recovery.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/forward.h"
#include "kv/plan.h"

/* One probe call's batch, at most cap rows. */
typedef struct probe_batch {
    int32_t *tokens, *pos, *k_pos;
    int64_t *slots;
    la_batch_seq *seqs;
    la_attn_block *blocks;
    int32_t n, n_seqs, n_blocks, cap_blocks;
} probe_batch;

static void probe_batch_free(probe_batch *b) {
    free(b->tokens), free(b->pos), free(b->k_pos), free(b->slots), free(b->seqs), free(b->blocks);
}

/* Append document d's tokens [i0, i1) as one sequence (view up to token i1 - 1). */
static la_status probe_add(probe_batch *b, const la_request *r, int32_t d, int32_t i0, int32_t i1, la_err *err) {
    const la_plan *pl = &r->plan;
    const la_plan_doc *doc = &pl->docs[d];
    const int32_t need = la_plan_recompute_view_size(pl, d, i1);
    if (b->n_blocks + need > b->cap_blocks) {
        int32_t cap = b->cap_blocks ? b->cap_blocks : 64;
        while (cap < b->n_blocks + need) cap *= 2;
        la_attn_block *p = realloc(b->blocks, sizeof *p * (size_t)cap);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "recovery probe: out of memory");
        b->blocks = p, b->cap_blocks = cap;
    }
    b->seqs[b->n_seqs++] = (la_batch_seq){b->n, i1 - i0, b->n_blocks, need};
    b->n_blocks += la_plan_recompute_view(pl, d, i1, b->blocks + b->n_blocks);
    for (int32_t i = i0; i < i1; i++, b->n++) {
        b->tokens[b->n] = r->doc_ids[d][i];
        b->pos[b->n] = doc->start + i;
        b->k_pos[b->n] = la_plan_recompute_k_pos(pl, doc, i);
        b->slots[b->n] = la_plan_recompute_slot(pl, doc, i);
    }
    return LA_OK;
}

static la_status probe_run(la_engine *e, probe_batch *b, float *dev, la_err *err) {
    if (b->n == 0) return LA_OK;
    const la_batch batch = {.n_tokens = b->n, .tokens = b->tokens, .pos = b->pos, .k_pos = b->k_pos,
                            .slots = b->slots, .n_seqs = b->n_seqs, .seqs = b->seqs, .n_blocks = b->n_blocks,
                            .blocks = b->blocks};
    la_status s = la_forward_probe(e->be, &batch, dev, err);
    b->n = b->n_seqs = b->n_blocks = 0;
    return s;
}

/* Probe tokens [from, to) of documents 1..n-1 (flat index, document order) into dev[from..to),
 * in forwards of at most max_batch_tokens rows. */
static la_status probe_range(la_engine *e, const la_request *r, int64_t from, int64_t to, float *dev, la_err *err) {
    const la_plan *pl = &r->plan;
    if (to <= from) return LA_OK;
    const int32_t cap = (int32_t)(to - from < e->opts.max_batch_tokens ? to - from : e->opts.max_batch_tokens);
    probe_batch b = {0};
    b.tokens = malloc(sizeof(int32_t) * (size_t)cap);
    b.pos = malloc(sizeof(int32_t) * (size_t)cap);
    b.k_pos = malloc(sizeof(int32_t) * (size_t)cap);
    b.slots = malloc(sizeof(int64_t) * (size_t)cap);
    b.seqs = malloc(sizeof(la_batch_seq) * (size_t)(pl->n_docs < cap ? pl->n_docs : cap));
    la_status s = LA_OK;
    if (!b.tokens || !b.pos || !b.k_pos || !b.slots || !b.seqs)
        s = la_err_set(err, LA_ERR_NO_MEMORY, "recovery probe: out of memory");
    int64_t at = 0, done = from; /* at: flat index of document d's token 0 */
    for (int32_t d = 1; s == LA_OK && d < pl->n_docs && at < to; at += pl->docs[d++].n_tokens) {
        const int32_t L = pl->docs[d].n_tokens;
        for (int64_t i0 = from > at ? from - at : 0; s == LA_OK && i0 < L && at + i0 < to;) {
            const int64_t room = cap - b.n, left = (L < to - at ? L : to - at) - i0;
            const int32_t i1 = (int32_t)(i0 + (left < room ? left : room));
            s = probe_add(&b, r, d, (int32_t)i0, i1, err);
            i0 = i1;
            if (s == LA_OK && b.n == cap) {
                const int32_t n = b.n;
                s = probe_run(e, &b, dev + done, err);
                done += n;
            }
        }
    }
    if (s == LA_OK) s = probe_run(e, &b, dev + done, err);
    probe_batch_free(&b);
    return s;
}

typedef struct cand {
    float dev;
    int64_t at; /* flat index over documents 1..n-1 */
} cand;

/* Largest deviation first; ties (and NaN, last) to the earlier token. */
static int by_deviation(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    const bool an = a->dev != a->dev, bn = b->dev != b->dev;
    if (an != bn) return an ? 1 : -1;
    if (!an && a->dev != b->dev) return a->dev > b->dev ? -1 : 1;
    return (a->at > b->at) - (a->at < b->at);
}

/* Choose from dev and write each document's rows into the plan: every document's list is
 * made before the first is given to the plan. */
static la_status choose(la_request *r, const float *dev, int64_t n_all, la_err *err) {
    la_plan *pl = &r->plan;
    bool *pick = calloc((size_t)n_all, sizeof(bool));
    cand *c = malloc(sizeof(cand) * (size_t)n_all);
    int32_t **rows = calloc((size_t)pl->n_docs, sizeof(int32_t *));
    int32_t *n_rows = calloc((size_t)pl->n_docs, sizeof(int32_t));
    la_status s = LA_OK;
    if (!pick || !c || !rows || !n_rows) s = la_err_set(err, LA_ERR_NO_MEMORY, "recovery: out of memory");
    int64_t n_cand = 0, at = 0;
    for (int32_t d = 1; s == LA_OK && d < pl->n_docs; d++)
        for (int32_t i = 0; i < pl->docs[d].n_tokens; i++, at++) {
            if (i < r->recompute_first) pick[at] = true; /* the first N, always */
            else c[n_cand++] = (cand){dev[at], at};
        }
    if (s == LA_OK) {
        int64_t k = llround((double)r->recompute_ratio * (double)n_all);
        if (k < 1) k = 1;
        if (k > n_cand) k = n_cand;
        qsort(c, (size_t)n_cand, sizeof(cand), by_deviation);
        for (int64_t j = 0; j < k; j++) pick[c[j].at] = true;
    }
    at = 0;
    for (int32_t d = 1; s == LA_OK && d < pl->n_docs; at += pl->docs[d++].n_tokens) {
        const int32_t L = pl->docs[d].n_tokens;
        for (int32_t i = 0; i < L; i++) n_rows[d] += pick[at + i];
        if (!(rows[d] = malloc(sizeof(int32_t) * (size_t)(n_rows[d] > 0 ? n_rows[d] : 1)))) {
            s = la_err_set(err, LA_ERR_NO_MEMORY, "recovery: out of memory");
            break;
        }
        for (int32_t i = 0, k = 0; i < L; i++)
            if (pick[at + i]) rows[d][k++] = i;
    }
    for (int32_t d = 1; s == LA_OK && d < pl->n_docs; d++) {
        s = la_plan_set_recompute(pl, d, rows[d], n_rows[d], err);
        if (s == LA_OK) rows[d] = NULL; /* the plan's now */
    }
    for (int32_t d = 0; rows && d < pl->n_docs; d++) free(rows[d]);
    free(rows), free(n_rows), free(pick), free(c);
    return s;
}

la_status la_recovery_probe_step(la_engine *e, la_request *r, int64_t budget, int64_t *used, la_err *err) {
    la_plan *pl = &r->plan;
    *used = 0;
    int64_t n_all = 0;
    for (int32_t d = 1; d < pl->n_docs; d++) n_all += pl->docs[d].n_tokens;
    if (n_all == 0 || !(r->recompute_ratio > 0.0f)) {
        r->probed = true;
        return LA_OK;
    }
    if (!r->probe_dev && !(r->probe_dev = malloc(sizeof(float) * (size_t)n_all)))
        return la_err_set(err, LA_ERR_NO_MEMORY, "recovery: out of memory");
    const int64_t n_layers = e->be->shape.n_layers > 0 ? e->be->shape.n_layers : 1;
    const int64_t left = n_all - r->probe_done, take = left < budget * n_layers ? left : budget * n_layers;
    LA_TRY(probe_range(e, r, r->probe_done, r->probe_done + take, r->probe_dev, err));
    r->probe_done += take;
    *used = (take + n_layers - 1) / n_layers;
    if (r->probe_done < n_all) return LA_OK;
    LA_TRY(choose(r, r->probe_dev, n_all, err));
    free(r->probe_dev);
    r->probe_dev = NULL;
    r->probed = true;
    if (r->stats.doc_tokens_probed == 0) { /* the first probe that completes (a preempted request probes again) */
        r->stats.doc_tokens_probed = n_all;
        r->stats.doc_tokens_recomputed = pl->doc_tokens_recomputed;
    }
    return LA_OK;
}
