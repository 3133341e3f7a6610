/* src/kv/block_pool.c: states, LRU eviction, pinning, the hash index, accounting. */
#include <string.h>

#include "common/test_util.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

static la_hash128 h_of(int32_t x) { return la_hash_block(NULL, la_hash_prefix_seed(NULL, NULL), &x, 1); }

static la_kv_pool *pool_of(int64_t n) {
    la_kv_pool *p = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_kv_pool_create(n, 16, &p, &err), err);
    return p;
}

Test(block_pool, create_rejects_bad_sizes) {
    la_kv_pool *p = NULL;
    la_err err = {0};
    cr_assert_eq(la_kv_pool_create(0, 16, &p, &err), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_kv_pool_create(8, 0, &p, &err), LA_ERR_INVALID_ARG);
    cr_assert_null(p);
}

Test(block_pool, alloc_until_full_then_no_space_leaves_state_unchanged) {
    la_kv_pool *p = pool_of(4);
    la_err err = {0};
    int32_t ids[4];
    for (int i = 0; i < 4; i++) LA_CHECK_OK(la_kv_pool_alloc(p, &ids[i], &err), err);
    la_kv_pool_stats before = la_kv_pool_get_stats(p);
    int32_t x = -7;
    cr_assert_eq(la_kv_pool_alloc(p, &x, &err), LA_ERR_NO_SPACE);
    cr_assert_eq(x, -7);
    cr_assert(strstr(err.msg, "KV cache full") != NULL);
    la_kv_pool_stats after = la_kv_pool_get_stats(p);
    cr_assert_eq(before.n_pinned, after.n_pinned);
    LA_CHECK_OK(la_kv_pool_check(p, 4, &err), err);
    la_kv_pool_destroy(p);
}

Test(block_pool, unpinned_unindexed_block_returns_to_free_list) {
    la_kv_pool *p = pool_of(2);
    la_err err = {0};
    int32_t a;
    LA_CHECK_OK(la_kv_pool_alloc(p, &a, &err), err);
    la_kv_pool_unpin(p, a);
    la_kv_pool_stats s = la_kv_pool_get_stats(p);
    cr_assert_eq(s.n_free, 2);
    cr_assert_eq(s.n_cached, 0);
    LA_CHECK_OK(la_kv_pool_check(p, 0, &err), err);
    la_kv_pool_destroy(p);
}

Test(block_pool, unpinned_blocks_evicted_lru_first) {
    la_kv_pool *p = pool_of(3);
    la_err err = {0};
    int32_t ids[3];
    for (int i = 0; i < 3; i++) {
        LA_CHECK_OK(la_kv_pool_alloc(p, &ids[i], &err), err);
        la_kv_pool_register(p, ids[i], h_of(i));
        la_kv_pool_mark_ready(p, ids[i]);
    }
    /* release in order 1, 0, 2: LRU order is 1, 0, 2 */
    la_kv_pool_unpin(p, ids[1]);
    la_kv_pool_unpin(p, ids[0]);
    la_kv_pool_unpin(p, ids[2]);
    cr_assert_eq(la_kv_pool_get_stats(p).n_cached, 3);
    int32_t x;
    LA_CHECK_OK(la_kv_pool_alloc(p, &x, &err), err);
    cr_assert_eq(x, ids[1], "the least recently released block goes first");
    cr_assert(!la_kv_pool_contains(p, h_of(1)));
    cr_assert(la_kv_pool_contains(p, h_of(0)));
    /* touching block 0 (lookup) makes block 2 the next victim */
    cr_assert_eq(la_kv_pool_lookup_pin(p, h_of(0)), ids[0]);
    la_kv_pool_unpin(p, ids[0]);
    int32_t y;
    LA_CHECK_OK(la_kv_pool_alloc(p, &y, &err), err);
    cr_assert_eq(y, ids[2]);
    cr_assert_eq(la_kv_pool_get_stats(p).evictions, 2);
    LA_CHECK_OK(la_kv_pool_check(p, 2, &err), err);
    la_kv_pool_destroy(p);
}

Test(block_pool, pinned_blocks_are_never_evicted) {
    la_kv_pool *p = pool_of(2);
    la_err err = {0};
    int32_t a, b;
    LA_CHECK_OK(la_kv_pool_alloc(p, &a, &err), err);
    LA_CHECK_OK(la_kv_pool_alloc(p, &b, &err), err);
    la_kv_pool_register(p, a, h_of(10));
    la_kv_pool_register(p, b, h_of(11));
    la_kv_pool_unpin(p, b); /* b cached, a pinned */
    int32_t x;
    LA_CHECK_OK(la_kv_pool_alloc(p, &x, &err), err);
    cr_assert_eq(x, b);
    cr_assert_eq(la_kv_pool_alloc(p, &x, &err), LA_ERR_NO_SPACE);
    cr_assert(la_kv_pool_contains(p, h_of(10)));
    la_kv_pool_destroy(p);
}

Test(block_pool, lookup_pins_and_counts_hits_and_misses) {
    la_kv_pool *p = pool_of(4);
    la_err err = {0};
    int32_t a;
    LA_CHECK_OK(la_kv_pool_alloc(p, &a, &err), err);
    la_kv_pool_register(p, a, h_of(1));
    cr_assert_eq(la_kv_pool_lookup_pin(p, h_of(1)), a);
    cr_assert_eq(la_kv_pool_ref_count(p, a), 2);
    cr_assert_eq(la_kv_pool_lookup_pin(p, h_of(2)), -1);
    la_kv_pool_stats s = la_kv_pool_get_stats(p);
    cr_assert_eq(s.hits, 1);
    cr_assert_eq(s.misses, 1);
    la_kv_pool_unpin(p, a);
    la_kv_pool_unpin(p, a);
    LA_CHECK_OK(la_kv_pool_check(p, 0, &err), err);
    la_kv_pool_destroy(p);
}

Test(block_pool, register_keeps_the_first_block_for_a_hash) {
    la_kv_pool *p = pool_of(4);
    la_err err = {0};
    int32_t a, b;
    LA_CHECK_OK(la_kv_pool_alloc(p, &a, &err), err);
    LA_CHECK_OK(la_kv_pool_alloc(p, &b, &err), err);
    cr_assert_eq(la_kv_pool_register(p, a, h_of(5)), a);
    cr_assert_eq(la_kv_pool_register(p, b, h_of(5)), a);
    cr_assert(!la_kv_pool_is_indexed(p, b));
    la_kv_pool_unpin(p, b); /* unindexed: straight back to the free list */
    cr_assert_eq(la_kv_pool_get_stats(p).n_free, 3);
    la_kv_pool_unpin(p, a);
    LA_CHECK_OK(la_kv_pool_check(p, 0, &err), err);
    la_kv_pool_destroy(p);
}

Test(block_pool, check_detects_a_leaked_pin) {
    la_kv_pool *p = pool_of(4);
    la_err err = {0};
    int32_t a;
    LA_CHECK_OK(la_kv_pool_alloc(p, &a, &err), err);
    cr_assert_eq(la_kv_pool_check(p, 0, &err), LA_ERR_INTERNAL);
    cr_assert(strstr(err.msg, "leak") != NULL, "%s", err.msg);
    la_kv_pool_destroy(p);
}

Test(block_pool, many_evictions_keep_the_index_consistent) {
    la_kv_pool *p = pool_of(8);
    la_err err = {0};
    for (int32_t round = 0; round < 2000; round++) {
        int32_t id;
        LA_CHECK_OK(la_kv_pool_alloc(p, &id, &err), err);
        la_kv_pool_register(p, id, h_of(round));
        la_kv_pool_mark_ready(p, id);
        la_kv_pool_unpin(p, id);
    }
    LA_CHECK_OK(la_kv_pool_check(p, 0, &err), err);
    for (int32_t r = 1992; r < 2000; r++) cr_assert(la_kv_pool_contains(p, h_of(r)));
    cr_assert(!la_kv_pool_contains(p, h_of(1991)));
    la_kv_pool_destroy(p);
}
