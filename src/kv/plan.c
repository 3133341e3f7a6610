#include "kv/plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }
static int32_t min_i32(int32_t a, int32_t b) { return a < b ? a : b; }

static la_status tail_capacity(la_plan *plan, int32_t need, la_err *err);

static la_kv_format doc_format(la_method m) {
    return m == LA_METHOD_MEPIC ? LA_KV_FORMAT_UNROTATED : LA_KV_FORMAT_ROTATED_LOCAL;
}

/* ============================================================ release ================ */

static void free_doc(la_plan_doc *d) {
    free(d->block_ids);
    free(d->copy_ids);
    free(d->recompute_rows);
}

void la_plan_release(la_plan *plan, la_kv_pool *pool) {
    for (int32_t b = plan->n_tail_blocks - 1; b >= 0; b--) la_kv_pool_unpin(pool, plan->tail_blocks[b]);
    for (int32_t d = plan->n_docs - 1; d >= 0; d--) {
        la_plan_doc *doc = &plan->docs[d];
        for (int32_t b = doc->n_blocks - 1; b >= 0; b--) {
            if (doc->copy_ids && doc->copy_ids[b] >= 0) la_kv_pool_unpin(pool, doc->copy_ids[b]);
            if (doc->block_ids[b] >= 0) la_kv_pool_unpin(pool, doc->block_ids[b]);
        }
        free_doc(doc);
    }
    free(plan->docs);
    free(plan->tail_blocks);
    memset(plan, 0, sizeof *plan);
}

int64_t la_plan_pins(const la_plan *plan) {
    int64_t n = plan->n_tail_blocks;
    for (int32_t d = 0; d < plan->n_docs; d++) {
        const la_plan_doc *doc = &plan->docs[d];
        for (int32_t b = 0; b < doc->n_blocks; b++)
            n += (doc->block_ids[b] >= 0) + (doc->copy_ids && doc->copy_ids[b] >= 0);
    }
    return n;
}

/* ============================================================ create ================= */

/* Pass 1 for one document: hash its chain, pin the leading blocks already indexed.
 * hashes: [n_blocks] out. */
static la_status lookup_doc(la_plan *plan, la_kv_pool *pool, la_hash128 seed,
                            const la_plan_input_doc *in, la_plan_doc *doc, la_hash128 *hashes,
                            la_err *err) {
    int32_t B = plan->block_size;
    doc->n_blocks = ceil_div(doc->n_tokens, B);
    doc->block_ids = malloc(sizeof(int32_t) * (size_t)doc->n_blocks);
    bool copies = plan->method == LA_METHOD_BLOCK || doc->n_recompute > 0 ||
                  (plan->recompute_ratio > 0.0f && doc->start > 0);
    if (copies) doc->copy_ids = malloc(sizeof(int32_t) * (size_t)doc->n_blocks);
    if (!doc->block_ids || (copies && !doc->copy_ids))
        return la_err_set(err, LA_ERR_NO_MEMORY, "plan: out of memory");
    for (int32_t b = 0; b < doc->n_blocks; b++) {
        doc->block_ids[b] = -1;
        if (doc->copy_ids) doc->copy_ids[b] = -1;
    }
    int32_t k = 0;
    if (la_method_caches_docs(plan->method)) {
        la_hash_chain(la_kv_pool_hash_ctx(pool), seed, in->tokens, in->n_tokens, B, 1, hashes);
        doc->last_hash = hashes[doc->n_blocks - 1];
        while (k < doc->n_blocks) {
            int32_t id = la_kv_pool_lookup_pin(pool, hashes[k]);
            if (id < 0) break;
            doc->block_ids[k++] = id;
        }
    }
    doc->n_reused = k;
    doc->compute = k < doc->n_blocks;
    int32_t reused_tokens = min_i32(doc->n_tokens, k * B);
    plan->doc_tokens_reused += reused_tokens;
    plan->doc_tokens_computed += doc->n_tokens - reused_tokens;
    return LA_OK;
}

/* Pass 2 for one document: allocate (and index, not ready) the missing blocks, and the
 * per-request copies (BLOCK, recovery). */
static la_status alloc_doc(la_plan *plan, la_kv_pool *pool, la_plan_doc *doc,
                           const la_hash128 *hashes, la_err *err) {
    if (la_method_caches_docs(plan->method) && doc->compute) {
        /* The same document earlier in this request registered its blocks a moment ago
         * (pass 1 ran before any registration): share them, computed once. Only a whole
         * remainder is taken; a partial match computes as before. */
        int32_t k = doc->n_reused;
        while (k < doc->n_blocks) {
            int32_t id = la_kv_pool_lookup_pin(pool, hashes[k]);
            if (id < 0) break;
            doc->block_ids[k++] = id;
        }
        if (k == doc->n_blocks) {
            int32_t was = min_i32(doc->n_tokens, doc->n_reused * plan->block_size);
            plan->doc_tokens_reused += doc->n_tokens - was;
            plan->doc_tokens_computed -= doc->n_tokens - was;
            doc->n_reused = k;
            doc->compute = false;
        } else {
            for (int32_t b = k - 1; b >= doc->n_reused; b--) {
                la_kv_pool_unpin(pool, doc->block_ids[b]);
                doc->block_ids[b] = -1;
            }
        }
    }
    for (int32_t b = doc->n_reused; b < doc->n_blocks; b++) {
        LA_TRY(la_kv_pool_alloc(pool, &doc->block_ids[b], err));
        if (la_method_caches_docs(plan->method)) la_kv_pool_register(pool, doc->block_ids[b], hashes[b]);
    }
    for (int32_t b = 0; b < la_plan_doc_copies(plan, doc); b++) LA_TRY(la_kv_pool_alloc(pool, &doc->copy_ids[b], err));
    return LA_OK;
}

/* Pass 1 for the tail: pin its cached full blocks (never all of the prompt: the last
 * prompt token is always computed, its logits start generation). */
static la_status lookup_tail(la_plan *plan, la_kv_pool *pool, const int32_t *tail,
                             int32_t n_tail, la_hash128 *scratch, la_err *err) {
    int32_t B = plan->block_size;
    bool cached = plan->method != LA_METHOD_RECOMPUTE && plan->method != LA_METHOD_BLOCK_REF;
    const la_hash_ctx *hc = la_kv_pool_hash_ctx(pool);
    int32_t n_full = la_hash_chain(hc, plan->tail_parent, tail, n_tail, B, 0, scratch);
    int32_t max_reuse = (n_tail - 1) / B; /* keeps >= 1 token to compute */
    LA_TRY(tail_capacity(plan, ceil_div(n_tail, B), err));
    int32_t k = 0;
    while (cached && k < n_full && k < max_reuse) {
        int32_t id = la_kv_pool_lookup_pin(pool, scratch[k]);
        if (id < 0) break;
        if (!la_kv_pool_is_ready(pool, id)) { /* only computed tail blocks are indexed */
            la_kv_pool_unpin(pool, id);
            break;
        }
        plan->tail_blocks[plan->n_tail_blocks++] = id;
        plan->tail_parent = scratch[k];
        k++;
    }
    plan->n_tail_registered = k;
    plan->n_tail_cached = k * B;
    plan->tail_tokens_reused = k * B;
    return LA_OK;
}

la_status la_plan_create(la_kv_pool *pool, la_method method, const char *salt, const la_recovery *recovery,
                         la_doc_context doc_context, const la_plan_input_doc *docs, int32_t n_docs, const int32_t *tail,
                         int32_t n_tail, la_plan *out, la_err *err) {
    const int32_t recompute_first = recovery ? recovery->first : 0;
    const float recompute_ratio = recovery ? recovery->ratio : 0.0f;
    if ((unsigned)method >= LA_METHOD_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "plan: unknown method %d", (int)method);
    if ((unsigned)doc_context >= LA_DOC_CONTEXT_COUNT ||
        (doc_context == LA_DOC_CONTEXT_PREAMBLE && !la_method_caches_docs(method)))
        return la_err_set(err, LA_ERR_INVALID_ARG, "plan: doc_context %d under %s (preamble: lazy, block, mepic)",
                          (int)doc_context, la_method_name(method));
    if (n_tail < 1) return la_err_set(err, LA_ERR_INVALID_ARG, "plan: the prompt after the documents is empty");
    if (n_docs < 0 || (n_docs > 0 && !la_method_is_blockwise(method)))
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "plan: method %s takes the documents inside the prompt", la_method_name(method));
    if (recompute_first < 0 || (recompute_first > 0 && !la_method_is_blockwise(method)))
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "plan: recompute_first %d (a count of tokens, for the block-wise methods; %s "
                          "computes every document in context already)",
                          (int)recompute_first, la_method_name(method));
    if (!(recompute_ratio >= 0.0f && recompute_ratio <= 1.0f) ||
        (recompute_ratio > 0.0f && !la_method_is_blockwise(method)))
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "plan: recompute_ratio %g (a fraction in [0, 1], for the block-wise methods; %s "
                          "computes every document in context already)",
                          (double)recompute_ratio, la_method_name(method));
    int64_t total = n_tail, doc_blocks = 0;
    int32_t B = la_kv_pool_block_size(pool);
    for (int32_t d = 0; d < n_docs; d++) {
        if (docs[d].n_tokens < 1)
            return la_err_set(err, LA_ERR_INVALID_ARG, "plan: document %d is empty", d);
        total += docs[d].n_tokens;
        doc_blocks += ceil_div(docs[d].n_tokens, B);
    }
    if (total > INT32_MAX - 1)
        return la_err_set(err, LA_ERR_TOO_LONG, "plan: %lld tokens exceed the %d-token limit",
                          (long long)total, INT32_MAX - 1);

    la_plan plan = {0};
    plan.method = method;
    plan.block_size = B;
    plan.recompute_first = recompute_first;
    plan.recompute_ratio = recompute_ratio;
    plan.doc_context = doc_context == LA_DOC_CONTEXT_PREAMBLE && n_docs >= 2 ? doc_context : LA_DOC_CONTEXT_ALONE;
    size_t nd = (size_t)(n_docs > 0 ? n_docs : 1);
    /* hashes of every document block, then the tail's full blocks */
    la_hash128 *hashes = malloc(sizeof(la_hash128) * (size_t)(doc_blocks + n_tail / B + 1));
    la_hash128 *last = malloc(sizeof(la_hash128) * nd);
    int32_t *lens = malloc(sizeof(int32_t) * nd);
    plan.docs = calloc(nd, sizeof(la_plan_doc));
    la_status s = LA_OK;
    if (!hashes || !last || !lens || !plan.docs) s = la_err_set(err, LA_ERR_NO_MEMORY, "plan: out of memory");

    /* Pass 1: every lookup pins before anything allocates (DESIGN.md §5). */
    la_kv_format fmt = doc_format(method);
    la_hash128 doc_seed = la_hash_doc_seed(la_kv_pool_hash_ctx(pool), fmt, salt);
    int32_t start = 0;
    int64_t h0 = 0;
    for (int32_t d = 0; s == LA_OK && d < n_docs; d++) {
        la_plan_doc *doc = &plan.docs[d];
        doc->n_tokens = docs[d].n_tokens;
        doc->start = start;
        const bool after = d > 0 && plan.doc_context == LA_DOC_CONTEXT_PREAMBLE;
        doc->enc_start = after ? plan.docs[0].n_tokens : 0;
        doc->n_recompute = d > 0 ? min_i32(recompute_first, doc->n_tokens) : 0;
        plan.doc_tokens_recomputed += doc->n_recompute;
        plan.n_docs = d + 1; /* release() must see it even if lookup_doc fails */
        const la_hash128 seed = after ? la_hash_doc_seed_after(la_kv_pool_hash_ctx(pool), fmt, salt,
                                                               plan.docs[0].last_hash, plan.docs[0].n_tokens)
                                      : doc_seed;
        s = lookup_doc(&plan, pool, seed, &docs[d], doc, hashes + h0, err);
        last[d] = doc->last_hash;
        lens[d] = doc->n_tokens;
        start += doc->n_tokens;
        h0 += doc->n_blocks;
    }
    if (s == LA_OK) {
        plan.tail_start = start;
        plan.n_tail_prompt = n_tail;
        plan.tail_parent = method == LA_METHOD_PREFIX
                               ? la_hash_prefix_seed(la_kv_pool_hash_ctx(pool), salt)
                               : la_hash_tail_seed(la_kv_pool_hash_ctx(pool), fmt, salt, n_docs,
                                                   last, lens, recompute_first, recompute_ratio);
        s = lookup_tail(&plan, pool, tail, n_tail, hashes + h0, err);
    }
    /* Pass 2: allocate what is missing. */
    h0 = 0;
    for (int32_t d = 0; s == LA_OK && d < n_docs; d++) {
        s = alloc_doc(&plan, pool, &plan.docs[d], hashes + h0, err);
        h0 += plan.docs[d].n_blocks;
    }
    if (s == LA_OK) s = la_plan_reserve_tail(&plan, pool, n_tail, err);
    free(hashes);
    free(last);
    free(lens);
    if (s != LA_OK) {
        /* Undo: unindex the blocks this plan allocated for documents, then unpin all. */
        for (int32_t d = 0; d < plan.n_docs; d++) la_plan_doc_unindex(&plan.docs[d], pool);
        la_plan_release(&plan, pool);
        return s;
    }
    *out = plan;
    return LA_OK;
}

void la_plan_doc_unindex(const la_plan_doc *doc, la_kv_pool *pool) {
    /* from n_reused on, every block was allocated by this plan (a repeat of the document in
     * the same request pins the same blocks, so their count may be 2; no other request can
     * hold a block before its job starts) */
    for (int32_t b = doc->n_reused; doc->block_ids && b < doc->n_blocks; b++)
        if (doc->block_ids[b] >= 0 && la_kv_pool_is_indexed(pool, doc->block_ids[b]) &&
            !la_kv_pool_is_ready(pool, doc->block_ids[b]))
            la_kv_pool_unregister(pool, doc->block_ids[b]);
}

/* ============================================================ fork =================== */

la_status la_plan_fork(const la_plan *src, la_kv_pool *pool, int32_t n_filled, la_plan *out, int32_t *copy_src,
                       int32_t *copy_dst, int32_t *copy_n_valid, la_err *err) {
    int32_t B = src->block_size, n_full = n_filled / B, rem = n_filled % B;
    int32_t n_tail = n_full + (rem > 0);
    la_plan p = *src;
    p.docs = calloc((size_t)(src->n_docs > 0 ? src->n_docs : 1), sizeof(la_plan_doc));
    p.tail_cap = n_tail > 8 ? n_tail : 8;
    p.tail_blocks = malloc(sizeof(int32_t) * (size_t)p.tail_cap);
    bool ok = p.docs && p.tail_blocks;
    for (int32_t d = 0; ok && d < src->n_docs; d++) {
        const la_plan_doc *sd = &src->docs[d];
        la_plan_doc *dd = &p.docs[d];
        *dd = *sd;
        dd->recompute_rows = NULL; /* read by the prefill only, which is over: not forked */
        dd->n_recompute = 0;
        dd->block_ids = malloc(sizeof(int32_t) * (size_t)sd->n_blocks);
        dd->copy_ids = sd->copy_ids ? malloc(sizeof(int32_t) * (size_t)sd->n_blocks) : NULL;
        ok = dd->block_ids && (!sd->copy_ids || dd->copy_ids);
        if (ok) memcpy(dd->block_ids, sd->block_ids, sizeof(int32_t) * (size_t)sd->n_blocks);
        if (ok && sd->copy_ids) memcpy(dd->copy_ids, sd->copy_ids, sizeof(int32_t) * (size_t)sd->n_blocks);
    }
    int32_t dst = -1;
    if (ok && rem > 0) {
        la_status s = la_kv_pool_alloc(pool, &dst, err);
        if (s != LA_OK) {
            for (int32_t d = 0; d < src->n_docs; d++) free_doc(&p.docs[d]);
            free(p.docs);
            free(p.tail_blocks);
            return s;
        }
    }
    if (!ok) {
        for (int32_t d = 0; p.docs && d < src->n_docs; d++) free_doc(&p.docs[d]);
        free(p.docs);
        free(p.tail_blocks);
        return la_err_set(err, LA_ERR_NO_MEMORY, "plan: out of memory");
    }
    /* every allocation succeeded: take the pins */
    for (int32_t d = 0; d < src->n_docs; d++) {
        const la_plan_doc *sd = &src->docs[d];
        for (int32_t b = 0; b < sd->n_blocks; b++) {
            if (sd->block_ids[b] >= 0) la_kv_pool_ref(pool, sd->block_ids[b]);
            if (sd->copy_ids && sd->copy_ids[b] >= 0) la_kv_pool_ref(pool, sd->copy_ids[b]);
        }
    }
    for (int32_t b = 0; b < n_full; b++) {
        p.tail_blocks[b] = src->tail_blocks[b];
        la_kv_pool_ref(pool, src->tail_blocks[b]);
    }
    if (rem > 0) p.tail_blocks[n_full] = dst;
    p.n_tail_blocks = n_tail;
    *copy_src = rem > 0 ? src->tail_blocks[n_full] : -1;
    *copy_dst = dst;
    *copy_n_valid = rem;
    *out = p;
    return LA_OK;
}

/* ============================================================ tail growth ============ */

/* Grow the tail block array to hold at least `need` ids (allocates no block). */
static la_status tail_capacity(la_plan *plan, int32_t need, la_err *err) {
    if (need <= plan->tail_cap && plan->tail_blocks) return LA_OK;
    int32_t cap = plan->tail_cap ? plan->tail_cap : 8;
    while (cap < need) cap *= 2;
    int32_t *nb = realloc(plan->tail_blocks, sizeof(int32_t) * (size_t)cap);
    if (!nb) return la_err_set(err, LA_ERR_NO_MEMORY, "plan: out of memory");
    plan->tail_blocks = nb;
    plan->tail_cap = cap;
    return LA_OK;
}

la_status la_plan_reserve_tail(la_plan *plan, la_kv_pool *pool, int32_t n_tail, la_err *err) {
    int32_t need = ceil_div(n_tail, plan->block_size);
    LA_TRY(tail_capacity(plan, need, err));
    int32_t have = plan->n_tail_blocks;
    while (plan->n_tail_blocks < need) {
        la_status s = la_kv_pool_alloc(pool, &plan->tail_blocks[plan->n_tail_blocks], err);
        if (s != LA_OK) {
            while (plan->n_tail_blocks > have) la_kv_pool_unpin(pool, plan->tail_blocks[--plan->n_tail_blocks]);
            return s;
        }
        plan->n_tail_blocks++;
    }
    return LA_OK;
}

/* ============================================================ addressing ============= */

int64_t la_plan_tail_slot(const la_plan *plan, int32_t t) {
    int32_t B = plan->block_size;
    return (int64_t)plan->tail_blocks[t / B] * B + t % B;
}

int64_t la_plan_doc_slot(int32_t block_size, const la_plan_doc *doc, int32_t i) {
    return (int64_t)doc->block_ids[i / block_size] * block_size + i % block_size;
}

int32_t la_plan_doc_pos(la_method method, const la_plan_doc *doc, int32_t i) {
    return method == LA_METHOD_BLOCK_REF ? doc->start + i : doc->enc_start + i;
}

int32_t la_plan_doc_delta(const la_plan_doc *doc) { return doc->start - doc->enc_start; }

int32_t la_plan_doc_k_pos(la_method method, const la_plan_doc *doc, int32_t i) {
    return method == LA_METHOD_MEPIC ? LA_POS_UNROTATED : la_plan_doc_pos(method, doc, i);
}

int32_t la_plan_doc_view_size(int32_t block_size, const la_plan_doc *doc, const la_plan_doc *ctx,
                              int32_t n_visible) {
    return ceil_div(n_visible, block_size) + (doc->enc_start > 0 && ctx ? ctx->n_blocks : 0);
}

int32_t la_plan_doc_view(la_method method, int32_t block_size, const la_plan_doc *doc, const la_plan_doc *ctx,
                         int32_t n_visible, la_attn_block *out) {
    int32_t B = block_size, k = 0;
    const bool mepic = method == LA_METHOD_MEPIC;
    if (doc->enc_start > 0 && ctx) /* document 0 at 0..P-1, as it was computed */
        for (int32_t b = 0; b < ctx->n_blocks; b++)
            out[k++] = (la_attn_block){.block_id = ctx->block_ids[b], .n_valid = min_i32(B, ctx->n_tokens - b * B),
                                       .pos0 = b * B, .k_rope = mepic};
    int32_t base = la_plan_doc_pos(method, doc, 0);
    for (int32_t b = 0; b < ceil_div(n_visible, B); b++)
        out[k++] = (la_attn_block){.block_id = doc->block_ids[b],
                                   .n_valid = min_i32(B, n_visible - b * B),
                                   .pos0 = base + b * B,
                                   .q_delta = 0,
                                   .k_rope = mepic};
    return k;
}

/* The attention view of doc's first n_visible tokens as a later token sees them: its blocks
 * in order (each block's per-request copy where it has one) with the method's rotation
 * metadata; returns the count written to out. The fields that are the same for every block
 * are read once before the loop (a store through out could alias them, so the compiler
 * would read them again for every block). */
static int32_t doc_view(const la_plan *plan, const la_plan_doc *doc, int32_t n_visible, la_attn_block *out) {
    const int32_t B = plan->block_size, n = ceil_div(n_visible, B), start = doc->start;
    const int32_t *ids = doc->block_ids, *copies = doc->copy_ids;
    int32_t q_delta = 0, k_rope = 0;
    switch (plan->method) {
    case LA_METHOD_LAZY: q_delta = la_plan_doc_delta(doc); break; /* Δ_d = S_d - enc_start */
    case LA_METHOD_MEPIC: k_rope = 1; break;                       /* rotate at S_d + i */
    default: break; /* BLOCK: the R(S_d + i) copy; BLOCK_REF: absolute */
    }
    for (int32_t b = 0; b < n; b++)
        out[b] = (la_attn_block){.block_id = copies && copies[b] >= 0 ? copies[b] : ids[b],
                                 .n_valid = min_i32(B, n_visible - b * B),
                                 .pos0 = start + b * B,
                                 .q_delta = q_delta,
                                 .k_rope = k_rope};
    return n;
}

int32_t la_plan_doc_copies(const la_plan *plan, const la_plan_doc *doc) {
    if (!doc->copy_ids) return 0;
    if (plan->method == LA_METHOD_BLOCK || plan->recompute_ratio > 0.0f) return doc->n_blocks;
    return ceil_div(doc->n_recompute, plan->block_size);
}

int32_t la_plan_recompute_row(const la_plan_doc *doc, int32_t k) {
    return doc->recompute_rows ? doc->recompute_rows[k] : k;
}

la_status la_plan_set_recompute(la_plan *plan, int32_t d, int32_t *rows, int32_t n, la_err *err) {
    if (d < 1 || d >= plan->n_docs || !(plan->recompute_ratio > 0.0f) || n < 0 || !plan->docs[d].copy_ids)
        return la_err_set(err, LA_ERR_INVALID_ARG, "plan: document %d takes no selected recovery", d);
    la_plan_doc *doc = &plan->docs[d];
    for (int32_t k = 0; k < n; k++)
        if (rows[k] < 0 || rows[k] >= doc->n_tokens || (k > 0 && rows[k] <= rows[k - 1]))
            return la_err_set(err, LA_ERR_INVALID_ARG, "plan: document %d: recomputed row %d (%d) out of order or "
                              "outside its %d tokens", d, k, rows[k], doc->n_tokens);
    plan->doc_tokens_recomputed += n - doc->n_recompute;
    free(doc->recompute_rows);
    doc->recompute_rows = rows;
    doc->n_recompute = n;
    return LA_OK;
}

int64_t la_plan_recompute_slot(const la_plan *plan, const la_plan_doc *doc, int32_t i) {
    int32_t B = plan->block_size;
    return (int64_t)doc->copy_ids[i / B] * B + i % B;
}

int32_t la_plan_recompute_k_pos(const la_plan *plan, const la_plan_doc *doc, int32_t i) {
    switch (plan->method) {
    case LA_METHOD_LAZY: return doc->enc_start + i;
    case LA_METHOD_MEPIC: return LA_POS_UNROTATED;
    default: return doc->start + i; /* BLOCK's copies are re-rotated; BLOCK_REF is absolute */
    }
}

int32_t la_plan_recompute_view_size(const la_plan *plan, int32_t d, int32_t n_visible) {
    int32_t n = ceil_div(n_visible, plan->block_size);
    for (int32_t e = 0; e < d; e++) n += plan->docs[e].n_blocks;
    return n;
}

int32_t la_plan_recompute_view(const la_plan *plan, int32_t d, int32_t n_visible, la_attn_block *out) {
    int32_t k = 0;
    for (int32_t e = 0; e < d; e++) k += doc_view(plan, &plan->docs[e], plan->docs[e].n_tokens, out + k);
    return k + doc_view(plan, &plan->docs[d], n_visible, out + k);
}

int32_t la_plan_view_size(const la_plan *plan, int32_t n_visible) {
    int32_t n = ceil_div(n_visible, plan->block_size);
    for (int32_t d = 0; d < plan->n_docs; d++) n += plan->docs[d].n_blocks;
    return n;
}

int32_t la_plan_tail_view(const la_plan *plan, int32_t n_visible, la_attn_block *out) {
    int32_t B = plan->block_size, k = 0;
    for (int32_t d = 0; d < plan->n_docs; d++) k += doc_view(plan, &plan->docs[d], plan->docs[d].n_tokens, out + k);
    for (int32_t b = 0; b < ceil_div(n_visible, B); b++)
        out[k++] = (la_attn_block){.block_id = plan->tail_blocks[b],
                                   .n_valid = min_i32(B, n_visible - b * B),
                                   .pos0 = plan->tail_start + b * B};
    return k;
}

bool la_plan_docs_ready(const la_plan *plan, const la_kv_pool *pool) {
    for (int32_t d = 0; d < plan->n_docs; d++)
        for (int32_t b = 0; b < plan->docs[d].n_blocks; b++)
            if (!la_kv_pool_is_ready(pool, plan->docs[d].block_ids[b])) return false;
    return true;
}

/* ============================================================ registration =========== */

void la_plan_register_tail(la_plan *plan, la_kv_pool *pool, const int32_t *tokens,
                           int32_t n_computed) {
    if (plan->method == LA_METHOD_RECOMPUTE || plan->method == LA_METHOD_BLOCK_REF) return;
    int32_t B = plan->block_size;
    for (int32_t b = plan->n_tail_registered; b < n_computed / B && b < plan->n_tail_blocks; b++) {
        la_hash128 h = la_hash_block(la_kv_pool_hash_ctx(pool), plan->tail_parent,
                                     tokens + (int64_t)b * B, B);
        int32_t id = plan->tail_blocks[b];
        la_kv_pool_mark_ready(pool, id);
        la_kv_pool_register(pool, id, h);
        plan->tail_parent = h;
        plan->n_tail_registered = b + 1;
    }
}
