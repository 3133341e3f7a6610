/* la_plan_fork and la_kv_pool_drop_cached (src/kv/plan.c, block_pool.c): a fork shares every
 * document block (and BLOCK copy) and the full tail blocks, copies only the partly filled
 * last one, and the pins of both plans balance out; a fork that gets no block for its copy
 * pins nothing; dropping the cache frees every unpinned indexed block and no pinned one. */
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

static void plan_with_docs(la_kv_pool *pool, la_method m, la_plan *pl, int32_t *tail, int32_t n_tail) {
    static int32_t d0[10], d1[20];
    for (int i = 0; i < 10; i++) d0[i] = 100 + i;
    for (int i = 0; i < 20; i++) d1[i] = 200 + i;
    la_plan_input_doc docs[2] = {{d0, 10}, {d1, 20}};
    la_err err = {0};
    LA_CHECK_OK(la_plan_create(pool, m, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 2, tail, n_tail, pl, &err), err);
}

Test(plan_fork, shares_documents_and_full_tail_blocks_and_copies_the_partial_one) {
    const la_method methods[2] = {LA_METHOD_LAZY, LA_METHOD_BLOCK};
    for (int k = 0; k < 2; k++) {
        la_kv_pool *pool = pool_of(64, 8);
        int32_t tail[13];
        for (int i = 0; i < 13; i++) tail[i] = 7 + i;
        la_plan a, b;
        plan_with_docs(pool, methods[k], &a, tail, 13); /* 13 tail tokens: one full block + 5 */
        int64_t pins_a = la_plan_pins(&a);
        int32_t src, dst, n_valid;
        la_err err = {0};
        LA_CHECK_OK(la_plan_fork(&a, pool, 13, &b, &src, &dst, &n_valid, &err), err);
        cr_assert_eq(src, a.tail_blocks[1]);
        cr_assert_neq(dst, src);
        cr_assert_eq(n_valid, 5);
        cr_assert_eq(b.n_tail_blocks, 2);
        cr_assert_eq(b.tail_blocks[0], a.tail_blocks[0], "the full block is shared");
        cr_assert_eq(b.tail_blocks[1], dst, "the partial one is the copy");
        for (int d = 0; d < 2; d++)
            for (int i = 0; i < a.docs[d].n_blocks; i++) {
                cr_assert_eq(b.docs[d].block_ids[i], a.docs[d].block_ids[i]);
                cr_assert_eq(la_kv_pool_ref_count(pool, a.docs[d].block_ids[i]), 2);
                if (methods[k] == LA_METHOD_BLOCK) cr_assert_eq(b.docs[d].copy_ids[i], a.docs[d].copy_ids[i]);
            }
        cr_assert_eq(la_plan_view_size(&b, 13), la_plan_view_size(&a, 13));
        LA_CHECK_OK(la_kv_pool_check(pool, pins_a + la_plan_pins(&b), &err), err);
        la_plan_release(&b, pool);
        LA_CHECK_OK(la_kv_pool_check(pool, pins_a, &err), err);
        la_plan_release(&a, pool);
        LA_CHECK_OK(la_kv_pool_check(pool, 0, &err), err);
        la_kv_pool_destroy(pool);
    }
}

Test(plan_fork, a_tail_on_a_block_boundary_needs_no_copy_and_a_full_pool_pins_nothing) {
    la_kv_pool *pool = pool_of(8, 8); /* docs 2 + 3 blocks, tail 2 blocks, one free */
    int32_t tail[16];
    for (int i = 0; i < 16; i++) tail[i] = 7 + i;
    la_plan a, b;
    plan_with_docs(pool, LA_METHOD_LAZY, &a, tail, 16);
    int32_t src, dst, n_valid;
    la_err err = {0};
    LA_CHECK_OK(la_plan_fork(&a, pool, 16, &b, &src, &dst, &n_valid, &err), err);
    cr_assert_eq(src, -1);
    la_plan_release(&b, pool);
    LA_CHECK_OK(la_plan_fork(&a, pool, 15, &b, &src, &dst, &n_valid, &err), err); /* one block was free */
    la_plan c;
    la_kv_pool_stats before = la_kv_pool_get_stats(pool);
    cr_assert_eq(la_plan_fork(&a, pool, 15, &c, &src, &dst, &n_valid, &err), LA_ERR_NO_SPACE);
    la_kv_pool_stats after = la_kv_pool_get_stats(pool);
    cr_assert_eq(after.n_pinned, before.n_pinned, "nothing pinned");
    LA_CHECK_OK(la_kv_pool_check(pool, la_plan_pins(&a) + la_plan_pins(&b), &err), err);
    la_plan_release(&b, pool);
    la_plan_release(&a, pool);
    la_kv_pool_destroy(pool);
}

static int g_evicted;
static void on_evict(void *user, int32_t id, la_hash128 h) {
    (void)user, (void)id, (void)h;
    g_evicted++;
}

Test(plan_fork, drop_cached_frees_every_unpinned_indexed_block_only) {
    la_kv_pool *pool = pool_of(32, 8);
    la_kv_pool_set_evict_hook(pool, on_evict, NULL);
    int32_t tail[9];
    for (int i = 0; i < 9; i++) tail[i] = 7 + i;
    la_plan a, b;
    plan_with_docs(pool, LA_METHOD_LAZY, &a, tail, 9);
    for (int d = 0; d < a.n_docs; d++)
        for (int i = 0; i < a.docs[d].n_blocks; i++) la_kv_pool_mark_ready(pool, a.docs[d].block_ids[i]);
    la_plan_register_tail(&a, pool, tail, 9);
    la_plan_release(&a, pool); /* 5 document blocks + 1 tail block cached */
    int32_t t2[3] = {1, 2, 3};
    static int32_t other[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    la_plan_input_doc docs[1] = {{other, 8}};
    la_err err = {0};
    LA_CHECK_OK(la_plan_create(pool, LA_METHOD_LAZY, NULL, NULL, LA_DOC_CONTEXT_ALONE, docs, 1, t2, 3, &b, &err), err); /* pinned */
    la_kv_pool_stats st = la_kv_pool_get_stats(pool);
    cr_assert_eq(st.n_cached, 6);
    g_evicted = 0;
    cr_assert_eq(la_kv_pool_drop_cached(pool), 6);
    cr_assert_eq(g_evicted, 6, "each one through the evict hook");
    st = la_kv_pool_get_stats(pool);
    cr_assert_eq(st.n_cached, 0);
    cr_assert_eq(st.n_pinned, la_plan_pins(&b));
    LA_CHECK_OK(la_kv_pool_check(pool, la_plan_pins(&b), &err), err);
    cr_assert(la_kv_pool_is_indexed(pool, b.docs[0].block_ids[0]), "a pinned document stays indexed");
    la_plan_release(&b, pool);
    la_kv_pool_destroy(pool);
}
