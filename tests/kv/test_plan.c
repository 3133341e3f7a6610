/* src/kv/plan.c: positions, Δ, pad masks, hash chains and reuse per method. */
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"
#include "kv/plan.h"

static la_kv_pool *pool_of(int64_t n, int32_t B) {
    la_kv_pool *p = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_kv_pool_create(n, B, &p, &err), err);
    return p;
}

/* Documents of the given lengths with distinct token ids (doc d token i = 1000 d + i). */
static la_plan_input_doc *make_docs(const int32_t *lens, int32_t n, int32_t **storage) {
    la_plan_input_doc *docs = calloc((size_t)n, sizeof *docs);
    for (int32_t d = 0; d < n; d++) {
        storage[d] = malloc(sizeof(int32_t) * (size_t)lens[d]);
        for (int32_t i = 0; i < lens[d]; i++) storage[d][i] = 1000 * (d + 1) + i;
        docs[d] = (la_plan_input_doc){storage[d], lens[d]};
    }
    return docs;
}

/* Computing a plan's blocks: mark every block of the plan ready, as the engine does. */
static void mark_computed(la_plan *pl, la_kv_pool *pool, const int32_t *tail, int32_t n_tail) {
    for (int32_t d = 0; d < pl->n_docs; d++)
        for (int32_t b = 0; b < pl->docs[d].n_blocks; b++)
            la_kv_pool_mark_ready(pool, pl->docs[d].block_ids[b]);
    la_plan_register_tail(pl, pool, tail, n_tail);
}

Test(plan, worked_example_of_design_section_3) {
    /* B = 8, true lengths [6, 15, 8, 2] */
    la_kv_pool *pool = pool_of(64, 8);
    int32_t lens[4] = {6, 15, 8, 2}, *st[4];
    la_plan_input_doc *docs = make_docs(lens, 4, st);
    int32_t tail[3] = {1, 2, 3};
    la_plan pl;
    la_err err = {0};
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 4, tail, 3, &pl, &err), err);
    int32_t want_blocks[4] = {1, 2, 1, 1}, want_S[4] = {0, 6, 21, 29}, want_pad[4] = {2, 1, 0, 6};
    for (int d = 0; d < 4; d++) {
        cr_assert_eq(pl.docs[d].n_blocks, want_blocks[d]);
        cr_assert_eq(pl.docs[d].start, want_S[d]);
    }
    cr_assert_eq(pl.tail_start, 31, "question token 0 sits at logical position 31");
    la_attn_block view[16];
    int32_t n = la_plan_tail_view(&pl, 3, view);
    cr_assert_eq(n, 6);
    int k = 0;
    for (int d = 0; d < 4; d++)
        for (int b = 0; b < want_blocks[d]; b++, k++) {
            cr_assert_eq(view[k].q_delta, want_S[d], "lazy Δ_d = S_d");
            cr_assert_eq(view[k].pos0, want_S[d] + 8 * b);
            cr_assert_eq(view[k].k_rope, 0);
            if (b == want_blocks[d] - 1)
                cr_assert_eq(8 - view[k].n_valid, want_pad[d], "doc %d pad slots", d);
            else
                cr_assert_eq(view[k].n_valid, 8);
        }
    cr_assert_eq(view[5].pos0, 31);
    cr_assert_eq(view[5].n_valid, 3);
    cr_assert_eq(view[5].q_delta, 0);
    /* mepic: same positions, keys rotated in the kernel, no Δ */
    la_plan pm;
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_MEPIC, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 4, tail, 3, &pm, &err), err);
    la_plan_tail_view(&pm, 3, view);
    for (int i = 0; i < 5; i++) cr_assert(view[i].q_delta == 0 && view[i].k_rope == 1);
    /* document computation sees local positions, not S_d */
    la_attn_block dv[2];
    cr_assert_eq(la_plan_doc_view(LA_METHOD_LAZY, 8, &pl.docs[1], NULL, 15, dv), 2);
    cr_assert_eq(dv[1].pos0, 8);
    cr_assert_eq(la_plan_doc_pos(LA_METHOD_LAZY, &pl.docs[1], 14), 14);
    cr_assert_eq(la_plan_doc_k_pos(LA_METHOD_MEPIC, &pm.docs[1], 14), LA_POS_UNROTATED);
    la_plan_release(&pl, pool);
    la_plan_release(&pm, pool);
    LA_CHECK_OK(la_kv_pool_check(pool, 0, &err), err);
    for (int d = 0; d < 4; d++) free(st[d]);
    free(docs);
    la_kv_pool_destroy(pool);
}

Test(plan, a_document_ending_on_a_block_boundary_masks_nothing) {
    la_kv_pool *pool = pool_of(16, 16);
    int32_t lens[2] = {32, 16}, *st[2];
    la_plan_input_doc *docs = make_docs(lens, 2, st);
    int32_t tail[1] = {7};
    la_plan pl;
    la_err err = {0};
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 2, tail, 1, &pl, &err), err);
    la_attn_block view[8];
    int32_t n = la_plan_tail_view(&pl, 1, view);
    cr_assert_eq(n, 4);
    for (int i = 0; i < 3; i++) cr_assert_eq(view[i].n_valid, 16);
    la_plan_release(&pl, pool);
    for (int d = 0; d < 2; d++) free(st[d]);
    free(docs);
    la_kv_pool_destroy(pool);
}

Test(plan, reordered_documents_are_reused_fully_by_lazy_and_only_up_to_the_change_by_prefix) {
    const int32_t B = 16;
    la_kv_pool *pool = pool_of(256, B);
    int32_t lens[3] = {40, 16, 23}, *st[3];
    la_plan_input_doc *docs = make_docs(lens, 3, st);
    int32_t tail[5] = {1, 2, 3, 4, 5};
    la_err err = {0};
    for (int m = 0; m < 3; m++) {
        la_method method = (la_method[]){LA_METHOD_LAZY, LA_METHOD_BLOCK, LA_METHOD_MEPIC}[m];
        la_plan a, b;
        LA_CHECK_OK(la_plan_create(pool, method, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 3, tail, 5, &a, &err), err);
        /* block and lazy store documents the same way (K at local positions) and share them */
        int64_t want = method == LA_METHOD_BLOCK ? 79 : 0;
        cr_assert_eq(a.doc_tokens_reused, want, "%s first request", la_method_name(method));
        cr_assert_eq(a.doc_tokens_computed, 79 - want);
        mark_computed(&a, pool, tail, 5);
        la_plan_release(&a, pool);
        la_plan_input_doc re[3] = {docs[2], docs[0], docs[1]};
        LA_CHECK_OK(la_plan_create(pool, method, NULL, NULL, LA_DOC_CONTEXT_ALONE, re, 3, tail, 5, &b, &err), err);
        cr_assert_eq(b.doc_tokens_reused, 79, "%s reuses every document token", la_method_name(method));
        cr_assert_eq(b.doc_tokens_computed, 0);
        for (int d = 0; d < 3; d++) cr_assert(!b.docs[d].compute);
        la_plan_release(&b, pool);
    }
    /* prefix: the prompt is [doc0 doc1 doc2 tail] then [doc0 doc2 doc1 tail]: only the blocks
     * before the first changed token are reused (doc0's 40 tokens -> 2 full blocks = 32) */
    int32_t p1[84], p2[84], n = 0;
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < lens[d]; i++) p1[n++] = st[d][i];
    for (int i = 0; i < 5; i++) p1[n++] = tail[i];
    n = 0;
    int order[3] = {0, 2, 1};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < lens[order[k]]; i++) p2[n++] = st[order[k]][i];
    for (int i = 0; i < 5; i++) p2[n++] = tail[i];
    la_plan a, b;
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_PREFIX, NULL, NULL, LA_DOC_CONTEXT_ALONE, NULL, 0, p1, 84, &a, &err), err);
    mark_computed(&a, pool, p1, 84);
    la_plan_release(&a, pool);
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_PREFIX, NULL, NULL, LA_DOC_CONTEXT_ALONE, NULL, 0, p2, 84, &b, &err), err);
    cr_assert_eq(b.tail_tokens_reused, 32);
    la_plan_release(&b, pool);
    /* the same prompt again reuses every full block but the last token's */
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_PREFIX, NULL, NULL, LA_DOC_CONTEXT_ALONE, NULL, 0, p1, 84, &b, &err), err);
    cr_assert_eq(b.tail_tokens_reused, 80);
    la_plan_release(&b, pool);
    LA_CHECK_OK(la_kv_pool_check(pool, 0, &err), err);
    for (int d = 0; d < 3; d++) free(st[d]);
    free(docs);
    la_kv_pool_destroy(pool);
}

Test(plan, salt_separates_tenants_and_same_salt_shares) {
    la_kv_pool *pool = pool_of(64, 16);
    int32_t lens[2] = {20, 33}, *st[2];
    la_plan_input_doc *docs = make_docs(lens, 2, st);
    int32_t tail[2] = {1, 2};
    la_err err = {0};
    la_plan a, b, c;
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, "tenant-a", NULL, LA_DOC_CONTEXT_ALONE, docs, 2, tail, 2, &a, &err), err);
    mark_computed(&a, pool, tail, 2);
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, "tenant-b", NULL, LA_DOC_CONTEXT_ALONE, docs, 2, tail, 2, &b, &err), err);
    cr_assert_eq(b.doc_tokens_reused, 0, "another salt never shares a cached block");
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < b.docs[d].n_blocks; k++)
            for (int e2 = 0; e2 < 2; e2++)
                for (int k2 = 0; k2 < a.docs[e2].n_blocks; k2++)
                    cr_assert_neq(b.docs[d].block_ids[k], a.docs[e2].block_ids[k2]);
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, "tenant-a", NULL, LA_DOC_CONTEXT_ALONE, docs, 2, tail, 2, &c, &err), err);
    cr_assert_eq(c.doc_tokens_reused, 53, "the same salt shares");
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 2, tail, 2, &(la_plan){0}, &err), err);
    la_plan_release(&a, pool);
    la_plan_release(&b, pool);
    la_plan_release(&c, pool);
    for (int d = 0; d < 2; d++) free(st[d]);
    free(docs);
    la_kv_pool_destroy(pool);
}

Test(plan, one_32_token_document_does_not_alias_two_16_token_documents) {
    la_kv_pool *pool = pool_of(64, 16);
    int32_t one[32];
    for (int i = 0; i < 32; i++) one[i] = 100 + i;
    la_plan_input_doc a_docs[1] = {{one, 32}};
    la_plan_input_doc b_docs[2] = {{one, 16}, {one + 16, 16}};
    int32_t tail[40];
    for (int i = 0; i < 40; i++) tail[i] = 7 + i;
    la_err err = {0};
    la_plan a, b;
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, a_docs, 1, tail, 40, &a, &err), err);
    mark_computed(&a, pool, tail, 40);
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, b_docs, 2, tail, 40, &b, &err), err);
    /* The first 16 tokens encoded alone are the same computation either way: shared. */
    cr_assert_eq(b.docs[0].n_reused, 1);
    /* The second half differs (alone vs after the first half): not shared. */
    cr_assert_eq(b.docs[1].n_reused, 0);
    /* The question chain seed covers the boundaries: no question block is shared. */
    cr_assert_eq(b.tail_tokens_reused, 0);
    cr_assert(!la_hash128_eq(a.tail_parent, b.tail_parent));
    la_plan_release(&a, pool);
    la_plan_release(&b, pool);
    la_kv_pool_destroy(pool);
}

Test(plan, offsets_past_100000_tokens_do_not_overflow) {
    const int32_t B = 16, n_docs = 20, L = 5003; /* 100,060 document tokens */
    la_kv_pool *pool = pool_of(8192, B);
    int32_t *st[20], lens[20];
    for (int d = 0; d < n_docs; d++) lens[d] = L;
    la_plan_input_doc *docs = make_docs(lens, n_docs, st);
    int32_t tail[3] = {1, 2, 3};
    la_plan pl;
    la_err err = {0};
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, n_docs, tail, 3, &pl, &err), err);
    cr_assert_eq(pl.tail_start, n_docs * L);
    cr_assert_eq(pl.docs[19].start, 19 * L);
    int32_t nv = la_plan_view_size(&pl, 3);
    la_attn_block *view = malloc(sizeof *view * (size_t)nv);
    la_plan_tail_view(&pl, 3, view);
    int32_t k = 0;
    for (int d = 0; d < n_docs; d++)
        for (int b = 0; b < pl.docs[d].n_blocks; b++, k++) {
            cr_assert_eq(view[k].q_delta, d * L);
            cr_assert_eq(view[k].pos0, d * L + b * B);
        }
    cr_assert_eq(view[nv - 1].pos0, 100060);
    cr_assert_eq(la_plan_tail_slot(&pl, 2), (int64_t)pl.tail_blocks[0] * B + 2);
    free(view);
    la_plan_release(&pl, pool);
    for (int d = 0; d < n_docs; d++) free(st[d]);
    free(docs);
    la_kv_pool_destroy(pool);
}

Test(plan, no_space_releases_every_pin) {
    la_kv_pool *pool = pool_of(4, 16);
    int32_t lens[2] = {40, 40}, *st[2]; /* 6 blocks > 4 */
    la_plan_input_doc *docs = make_docs(lens, 2, st);
    int32_t tail[1] = {1};
    la_plan pl = {0};
    la_err err = {0};
    cr_assert_eq(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 2, tail, 1, &pl, &err), LA_ERR_NO_SPACE);
    LA_CHECK_OK(la_kv_pool_check(pool, 0, &err), err);
    cr_assert_eq(la_kv_pool_get_stats(pool).n_free, 4);
    for (int d = 0; d < 2; d++) free(st[d]);
    free(docs);
    la_kv_pool_destroy(pool);
}

Test(plan, documents_need_a_blockwise_method_and_tokens) {
    la_kv_pool *pool = pool_of(8, 16);
    int32_t one[1] = {5};
    la_plan_input_doc docs[1] = {{one, 1}}, empty[1] = {{one, 0}};
    la_plan pl;
    la_err err = {0};
    cr_assert_eq(la_plan_create(pool, LA_METHOD_PREFIX, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 1, one, 1, &pl, &err), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, empty, 1, one, 1, &pl, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "document 0 is empty") != NULL, "%s", err.msg);
    cr_assert_eq(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 1, one, 0, &pl, &err), LA_ERR_INVALID_ARG);
    LA_CHECK_OK(la_kv_pool_check(pool, 0, &err), err);
    la_kv_pool_destroy(pool);
}

Test(plan, prefix_reuse_of_a_prompt_longer_than_eight_blocks) {
    /* regression: the tail block array must hold every reused block (it grew too late) */
    la_kv_pool *pool = pool_of(128, 16);
    int32_t prompt[300];
    for (int i = 0; i < 300; i++) prompt[i] = i;
    la_err err = {0};
    la_plan a, b;
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_PREFIX, NULL, NULL, LA_DOC_CONTEXT_ALONE, NULL, 0, prompt, 300, &a, &err), err);
    mark_computed(&a, pool, prompt, 300);
    la_plan_release(&a, pool);
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_PREFIX, NULL, NULL, LA_DOC_CONTEXT_ALONE, NULL, 0, prompt, 300, &b, &err), err);
    cr_assert_eq(b.tail_tokens_reused, 288);
    cr_assert_eq(b.n_tail_blocks, 19);
    la_plan_release(&b, pool);
    LA_CHECK_OK(la_kv_pool_check(pool, 0, &err), err);
    la_kv_pool_destroy(pool);
}

/* The same document twice in one request: the second shares the first's blocks (computed
 * once), for every method that caches documents; BLOCK still gets a copy per occurrence. */
Test(plan, a_document_repeated_in_one_request_is_computed_once) {
    const la_method methods[] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK};
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
        la_kv_pool *pool = pool_of(64, 8);
        int32_t toks[20];
        for (int i = 0; i < 20; i++) toks[i] = 500 + i;
        int32_t other[5] = {7, 8, 9, 10, 11};
        la_plan_input_doc docs[3] = {{toks, 20}, {other, 5}, {toks, 20}};
        int32_t tail[3] = {1, 2, 3};
        la_plan pl;
        la_err err = {0};
        LA_CHECK_OK(la_plan_create(pool, methods[m], NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 3, tail, 3, &pl, &err), err);
        cr_assert(pl.docs[0].compute && pl.docs[1].compute);
        cr_assert(!pl.docs[2].compute, "%s: the repeat is not computed again", la_method_name(methods[m]));
        for (int b = 0; b < 3; b++) cr_assert_eq(pl.docs[2].block_ids[b], pl.docs[0].block_ids[b]);
        cr_assert_eq(pl.doc_tokens_computed, 25);
        cr_assert_eq(pl.doc_tokens_reused, 20);
        cr_assert_eq(pl.docs[2].start, 25, "its own slot in the prompt");
        if (methods[m] == LA_METHOD_BLOCK)
            cr_assert_neq(pl.docs[2].copy_ids[0], pl.docs[0].copy_ids[0], "a copy per occurrence");
        mark_computed(&pl, pool, tail, 3);
        la_plan_release(&pl, pool);
        la_err e2 = {0};
        LA_CHECK_OK(la_kv_pool_check(pool, 0, &e2), e2); /* every pin released */
        la_kv_pool_destroy(pool);
    }
}

/* A failed plan (no space for the tail) that listed one document twice: the repeat pinned the
 * blocks the first occurrence had just allocated and indexed, and the undo must unindex them
 * anyway; otherwise they stay indexed and never ready, with no job to compute them, and the
 * next plan finds the document "cached" and waits for it forever. */
Test(plan, a_failed_plan_unindexes_a_repeated_documents_blocks) {
    la_kv_pool *pool = pool_of(5, 8);
    int32_t toks[20], tail[30];
    for (int i = 0; i < 20; i++) toks[i] = 500 + i;
    for (int i = 0; i < 30; i++) tail[i] = 1 + i;
    la_plan_input_doc docs[2] = {{toks, 20}, {toks, 20}}; /* 3 blocks, shared by the repeat */
    la_plan pl;
    la_err err = {0};
    cr_assert_eq(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 2, tail, 30, &pl, &err),
                 LA_ERR_NO_SPACE); /* + 4 tail blocks > 5 */
    LA_CHECK_OK(la_kv_pool_check(pool, 0, &err), err);
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 1, tail, 1, &pl, &err), err);
    cr_assert(pl.docs[0].compute, "the document was never computed, yet the plan found it");
    la_plan_release(&pl, pool);
    la_kv_pool_destroy(pool);
}
