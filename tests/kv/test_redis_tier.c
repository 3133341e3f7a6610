/* src/kv/store/redis_tier.c against a real redis-server started here on a loopback port:
 * records round-trip through the shared tier into a second store (another replica), and
 * every fault the issue names ends in a miss that is counted: garbage under the key, a
 * chunk evicted, the server killed (and hits again once it is back), OOM on writes, a
 * wrong password at start. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/dtype.h"
#include "base/log.h"
#include "common/services.h"
#include "common/test_util.h"
#include "kv/block_hash.h"
#include "kv/store/record.h"
#include "kv/store/redis_tier.h"
#include "kv/store/store.h"

static la_kv_record_shape shape_of(void) {
    return (la_kv_record_shape){.fingerprint = {7, 8}, .kv_format = LA_KV_FORMAT_ROTATED_LOCAL,
                                .dtype = LA_DTYPE_BF16, .block_size = 16, .n_layers = 4, .n_kv_heads = 2,
                                .head_dim = 64};
}

static la_hash128 key_of(int i) { return (la_hash128){0xabcdef12345ull * (uint64_t)(i + 3), (uint64_t)i << 7}; }

static la_kv_store *store_on(int port, la_status *status) {
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    la_kv_store_options o;
    la_kv_store_options_init(&o);
    o.shared_url = url;
    o.staging_bytes = 64 << 20;
    o.io_timeout_ms = 3000;
    la_kv_record_shape sh = shape_of();
    la_kv_store *s = NULL;
    la_err err = {0};
    la_status st = la_kv_store_create(&o, &sh, NULL, &s, &err);
    if (status) *status = st;
    else LA_CHECK_OK(st, err);
    return s;
}

static void fill(la_kv_store *s, la_kv_rec *r, int seed) {
    for (int32_t b = 0; b < la_kv_rec_header(r)->n_blocks; b++) {
        uint8_t *p = la_kv_rec_block(s, r, b);
        for (size_t i = 0; i < la_kv_store_block_bytes(s); i++) p[i] = (uint8_t)(seed + b * 13 + (int)(i * 7));
    }
}

static bool matches(la_kv_store *s, la_kv_rec *r, int seed) {
    for (int32_t b = 0; b < la_kv_rec_header(r)->n_blocks; b++) {
        const uint8_t *p = la_kv_rec_block(s, r, b);
        for (size_t i = 0; i < la_kv_store_block_bytes(s); i++)
            if (p[i] != (uint8_t)(seed + b * 13 + (int)(i * 7))) return false;
    }
    return true;
}

/* A record of n_tokens (32 KiB per block of shape_of). */
static void put(la_kv_store *s, int i, int32_t n_tokens) {
    la_kv_record_shape sh = shape_of();
    la_kv_record_header h = la_kv_record_header_make(key_of(i), &sh, n_tokens);
    cr_assert(la_kv_store_wants(s, h.key, LA_KV_PUT_COMPUTED));
    la_kv_rec *r = la_kv_store_put_begin(s, &h, LA_KV_PUT_COMPUTED);
    cr_assert_not_null(r);
    fill(s, r, i);
    la_kv_store_put_end(s, r, true);
    la_kv_store_flush(s);
}

static la_kv_rec_state find_state(la_kv_store *s, int i, int32_t n_tokens, int seed_check) {
    la_kv_record_shape sh = shape_of();
    la_kv_record_header h = la_kv_record_header_make(key_of(i), &sh, n_tokens);
    la_kv_rec *r = la_kv_store_find(s, &h);
    cr_assert_not_null(r, "the shared tier is always asked");
    for (int k = 0; la_kv_rec_state_of(r) == LA_KV_REC_LOADING && k < 5000; k++) {
        usleep(1000);
        la_kv_store_poll(s);
    }
    la_kv_rec_state st = la_kv_rec_state_of(r);
    if (st == LA_KV_REC_READY && seed_check >= 0) cr_assert(matches(s, r, seed_check));
    la_kv_store_release(s, r);
    return st;
}

Test(redis_tier, url_forms_and_errors) {
    la_redis_url u;
    la_err err = {0};
    LA_CHECK_OK(la_redis_url_parse("redis://h:1234/3", &u, &err), err);
    cr_assert_str_eq(u.host, "h");
    cr_assert_eq(u.port, 1234);
    cr_assert_eq(u.db, 3);
    LA_CHECK_OK(la_redis_url_parse("redis://:pw@127.0.0.1", &u, &err), err);
    cr_assert_str_eq(u.password, "pw");
    cr_assert_eq(u.port, 6379);
    LA_CHECK_OK(la_redis_url_parse("redis://alice:pw@h:1/0", &u, &err), err);
    cr_assert_str_eq(u.user, "alice");
    cr_assert_eq(la_redis_url_parse("http://h", &u, &err), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_redis_url_parse("redis://h:99999", &u, &err), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_redis_url_parse("redis://h:1/x", &u, &err), LA_ERR_INVALID_ARG);
    cr_assert_eq(la_redis_url_parse("rediss://h", &u, &err), LA_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "TLS"), "%s", err.msg);
}

Test(redis_tier, a_record_one_replica_wrote_is_read_by_another) {
    int port = la_test_free_port();
    pid_t pid = la_test_redis_start(port, NULL, NULL);
    la_kv_store *a = store_on(port, NULL), *b = store_on(port, NULL);
    put(a, 1, 300 * 16 - 3); /* 300 blocks of 32 KiB: three 4-MiB chunks */
    la_kv_store_stats st;
    la_kv_store_get_stats(a, &st);
    cr_assert_eq(st.tier[LA_KV_TIER_SHARED].writes, 1);
    cr_assert_eq(find_state(b, 1, 300 * 16 - 3, 1), LA_KV_REC_READY);
    la_kv_store_get_stats(b, &st);
    cr_assert_eq(st.tier[LA_KV_TIER_SHARED].hits, 1);
    cr_assert_eq(find_state(b, 2, 16, -1), LA_KV_REC_FAILED); /* never written: a miss */
    la_kv_store_get_stats(b, &st);
    cr_assert_eq(st.tier[LA_KV_TIER_SHARED].misses, 1);
    cr_assert_eq(st.rejected_total, 0);
    la_kv_store_destroy(a);
    la_kv_store_destroy(b);
    la_test_proc_stop(pid, 0);
}

Test(redis_tier, garbage_and_missing_chunks_are_rejected_and_recomputed) {
    la_log_enable(false);
    int port = la_test_free_port();
    pid_t pid = la_test_redis_start(port, NULL, NULL);
    la_kv_store *s = store_on(port, NULL);
    char hex[33], cmd[512], junk[201];
    la_kv_key_hex(key_of(3), hex);
    memset(junk, 'x', 200);
    junk[200] = '\0';
    snprintf(cmd, sizeof cmd, "SET lazyattn:kv:%s %s", hex, junk);
    free(la_test_redis_cli(port, cmd));
    cr_assert_eq(find_state(s, 3, 100, -1), LA_KV_REC_FAILED);
    la_kv_store_stats st;
    la_kv_store_get_stats(s, &st);
    cr_assert_eq(st.rejected[LA_KV_REJECT_MAGIC], 1);
    /* a whole record whose second chunk is evicted */
    put(s, 4, 300 * 16);
    snprintf(cmd, sizeof cmd, "--scan --pattern 'lazyattn:kv:*:1'");
    char *keys = la_test_redis_cli(port, cmd);
    cr_assert(keys && strchr(keys, ':'), "chunk 1 exists");
    keys[strcspn(keys, "\n")] = '\0';
    snprintf(cmd, sizeof cmd, "DEL %s", keys);
    free(la_test_redis_cli(port, cmd));
    free(keys);
    cr_assert_eq(find_state(s, 4, 300 * 16, -1), LA_KV_REC_FAILED);
    la_kv_store_get_stats(s, &st);
    cr_assert_eq(st.rejected[LA_KV_REJECT_SHORT], 1);
    la_kv_store_destroy(s);
    la_test_proc_stop(pid, 0);
    la_log_enable(true);
}

Test(redis_tier, killed_server_counts_errors_and_hits_resume_after_restart) {
    la_log_enable(false);
    int port = la_test_free_port();
    pid_t pid = la_test_redis_start(port, NULL, NULL);
    la_kv_store *s = store_on(port, NULL);
    put(s, 5, 64);
    la_test_proc_stop(pid, 1); /* SIGKILL: its memory is gone too */
    cr_assert_eq(find_state(s, 5, 64, -1), LA_KV_REC_FAILED);
    la_kv_store_stats st;
    la_kv_store_get_stats(s, &st);
    cr_assert(st.tier[LA_KV_TIER_SHARED].errors >= 1);
    cr_assert(st.tier[LA_KV_TIER_SHARED].down);
    pid = la_test_redis_start(port, NULL, NULL);
    usleep(300000); /* past the first back-off */
    /* writes and reads work again (the old record died with the server) */
    for (int tries = 0; tries < 50; tries++) {
        put(s, 6, 64);
        la_kv_store_get_stats(s, &st);
        if (st.tier[LA_KV_TIER_SHARED].writes >= 2) break;
        usleep(200000);
    }
    cr_assert(st.tier[LA_KV_TIER_SHARED].writes >= 2, "writes resumed");
    cr_assert_eq(find_state(s, 6, 64, 6), LA_KV_REC_READY);
    la_kv_store_get_stats(s, &st);
    cr_assert(!st.tier[LA_KV_TIER_SHARED].down);
    la_kv_store_destroy(s);
    la_test_proc_stop(pid, 0);
    la_log_enable(true);
}

Test(redis_tier, oom_writes_fail_and_are_counted) {
    la_log_enable(false);
    int port = la_test_free_port();
    pid_t pid = la_test_redis_start(port, "--maxmemory 2mb --maxmemory-policy noeviction", NULL);
    la_kv_store *s = store_on(port, NULL);
    put(s, 7, 300 * 16);
    la_kv_store_stats st;
    la_kv_store_get_stats(s, &st);
    cr_assert_eq(st.tier[LA_KV_TIER_SHARED].write_failures, 1);
    cr_assert_eq(st.tier[LA_KV_TIER_SHARED].writes, 0);
    cr_assert_eq(find_state(s, 7, 300 * 16, -1), LA_KV_REC_FAILED); /* no header was written */
    la_kv_store_destroy(s);
    la_test_proc_stop(pid, 0);
    la_log_enable(true);
}

Test(redis_tier, wrong_password_is_a_startup_error) {
    int port = la_test_free_port();
    pid_t pid = la_test_redis_start(port, "--requirepass right", NULL);
    char url[96];
    snprintf(url, sizeof url, "redis://:wrong@127.0.0.1:%d", port);
    la_kv_store_options o;
    la_kv_store_options_init(&o);
    o.shared_url = url;
    la_kv_record_shape sh = shape_of();
    la_kv_store *s = NULL;
    la_err err = {0};
    cr_assert_eq(la_kv_store_create(&o, &sh, NULL, &s, &err), LA_ERR_INVALID_ARG);
    cr_assert_null(s);
    cr_assert(strstr(err.msg, "AUTH"), "%s", err.msg);
    snprintf(url, sizeof url, "redis://:right@127.0.0.1:%d", port);
    LA_CHECK_OK(la_kv_store_create(&o, &sh, NULL, &s, &err), err);
    la_kv_store_destroy(s);
    la_test_proc_stop(pid, 0);
}
