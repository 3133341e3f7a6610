/* src/kv/store/: record headers and every rejection reason, the disk tier (atomic files,
 * size cap, restart scan), and the store's host tier, write-through, spills, and reads
 * that fall back to computing. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/dtype.h"
#include "base/file.h"
#include "base/log.h"
#include "common/test_util.h"
#include "kv/block_hash.h"
#include "kv/store/disk_tier.h"
#include "kv/store/record.h"
#include "kv/store/store.h"

static la_kv_record_shape shape_of(void) {
    return (la_kv_record_shape){.fingerprint = {0x1234, 0x5678}, .kv_format = LA_KV_FORMAT_ROTATED_LOCAL,
                                .dtype = LA_DTYPE_F32, .block_size = 4, .n_layers = 2, .n_kv_heads = 1,
                                .head_dim = 4};
}

static la_hash128 key_of(int i) { return (la_hash128){0x9e3779b97f4a7c15ull * (uint64_t)(i + 1), (uint64_t)i}; }

/* ---- record headers ------------------------------------------------------------------- */

Test(kv_record, header_round_trips_and_each_mismatch_has_its_reason) {
    la_kv_record_shape sh = shape_of();
    la_kv_record_header h = la_kv_record_header_make(key_of(1), &sh, 9);
    cr_assert_eq(h.n_blocks, 3);
    cr_assert_eq(h.payload_bytes, 3 * la_kv_record_block_bytes(&sh));
    cr_assert_eq(la_kv_record_block_bytes(&sh), 2 * 2 * 1 * 4 * 4 * 4);
    h.payload_checksum = 77;
    uint8_t buf[LA_KV_RECORD_HEADER_BYTES];
    la_kv_record_header_encode(&h, buf);
    la_kv_record_header got;
    cr_assert_eq(la_kv_record_header_check(buf, sizeof buf, &h, &got), LA_KV_REJECT_NONE);
    cr_assert_eq(got.payload_checksum, 77);
    cr_assert(la_hash128_eq(got.key, h.key));
    cr_assert_eq(la_kv_record_header_check(buf, 100, &h, &got), LA_KV_REJECT_SHORT);

    la_kv_record_header w = h;
    w.shape.fingerprint.lo ^= 1;
    cr_assert_eq(la_kv_record_header_check(buf, sizeof buf, &w, &got), LA_KV_REJECT_FINGERPRINT);
    w = h, w.shape.dtype = LA_DTYPE_BF16;
    cr_assert_eq(la_kv_record_header_check(buf, sizeof buf, &w, &got), LA_KV_REJECT_DTYPE);
    w = h, w.shape.block_size = 8;
    cr_assert_eq(la_kv_record_header_check(buf, sizeof buf, &w, &got), LA_KV_REJECT_BLOCK_SIZE);
    w = h, w.shape.kv_format = LA_KV_FORMAT_UNROTATED;
    cr_assert_eq(la_kv_record_header_check(buf, sizeof buf, &w, &got), LA_KV_REJECT_SHAPE);
    w = h, w.shape.n_layers = 3;
    cr_assert_eq(la_kv_record_header_check(buf, sizeof buf, &w, &got), LA_KV_REJECT_SHAPE);
    w = h, w.key.hi ^= 4;
    cr_assert_eq(la_kv_record_header_check(buf, sizeof buf, &w, &got), LA_KV_REJECT_KEY);
    w = h, w.n_tokens = 10;
    cr_assert_eq(la_kv_record_header_check(buf, sizeof buf, &w, &got), LA_KV_REJECT_LENGTH);

    uint8_t bad[LA_KV_RECORD_HEADER_BYTES];
    memcpy(bad, buf, sizeof bad);
    bad[0] = 'X';
    cr_assert_eq(la_kv_record_header_check(bad, sizeof bad, &h, &got), LA_KV_REJECT_MAGIC);
    memcpy(bad, buf, sizeof bad);
    bad[8] = 2;
    cr_assert_eq(la_kv_record_header_check(bad, sizeof bad, &h, &got), LA_KV_REJECT_VERSION);
    for (int at = 16; at < 120; at += 7) { /* any flipped byte of the body */
        memcpy(bad, buf, sizeof bad);
        bad[at] ^= 0x20;
        cr_assert_eq(la_kv_record_header_check(bad, sizeof bad, &h, &got), LA_KV_REJECT_HEADER_CHECKSUM,
                     "byte %d", at);
    }
    for (int r = 0; r < LA_KV_REJECT_COUNT; r++) cr_assert_str_neq(la_kv_reject_name((la_kv_reject)r), "unknown");
}

/* ---- disk tier ---------------------------------------------------------------------------- */

static la_kv_tier *disk_open(const char *dir, int64_t cap) {
    la_kv_tier *t = NULL;
    la_err err = {0};
    char warn[256];
    LA_CHECK_OK(la_disk_tier_create(dir, cap, &t, warn, sizeof warn, &err), err);
    cr_assert_str_empty(warn);
    return t;
}

static void put_bytes(la_kv_tier *t, la_hash128 key, const char *data, size_t n) {
    la_err err = {0};
    struct iovec iov[2] = {{(void *)data, n / 2}, {(void *)(data + n / 2), n - n / 2}};
    LA_CHECK_OK(t->ops->write(t, key, iov, 2, &err), err);
}

Test(kv_disk_tier, write_read_drop_and_restart_scan) {
    char *dir = la_test_tmpdir();
    la_kv_tier *t = disk_open(dir, 0);
    char data[100], back[100];
    for (int i = 0; i < 100; i++) data[i] = (char)(i * 7);
    cr_assert_eq(t->ops->probe(t, key_of(1)), LA_KV_PROBE_NO);
    put_bytes(t, key_of(1), data, sizeof data);
    cr_assert_eq(t->ops->probe(t, key_of(1)), LA_KV_PROBE_YES);
    size_t n = 0;
    la_err err = {0};
    struct iovec iov = {back, sizeof back};
    LA_CHECK_OK(t->ops->read(t, key_of(1), &iov, 1, &n, &err), err);
    cr_assert_eq(n, sizeof data);
    cr_assert_arr_eq(back, data, sizeof data);
    cr_assert_eq(la_disk_tier_records(t), 1);
    cr_assert_eq(la_disk_tier_bytes(t), 100);
    t->ops->destroy(t);

    /* a new tier over the same directory finds it; a leftover temporary file is removed */
    char hex[33], tmp[512];
    la_kv_key_hex(key_of(1), hex);
    snprintf(tmp, sizeof tmp, "%s/kv/%.2s/%s.kv.tmp.1.1", dir, hex, hex);
    la_test_write_bytes(tmp, "x", 1);
    t = disk_open(dir, 0);
    cr_assert_eq(t->ops->probe(t, key_of(1)), LA_KV_PROBE_YES);
    cr_assert_eq(access(tmp, F_OK), -1);
    t->ops->drop(t, key_of(1));
    cr_assert_eq(t->ops->probe(t, key_of(1)), LA_KV_PROBE_NO);
    cr_assert_eq(t->ops->read(t, key_of(1), &iov, 1, &n, &err), LA_ERR_NOT_FOUND);
    t->ops->destroy(t);
    la_test_rm_tree(dir);
}

Test(kv_disk_tier, size_cap_evicts_least_recently_used) {
    char *dir = la_test_tmpdir();
    la_kv_tier *t = disk_open(dir, 250);
    char data[100] = {0}, back[100];
    put_bytes(t, key_of(1), data, 100);
    put_bytes(t, key_of(2), data, 100);
    size_t n;
    la_err err = {0};
    struct iovec iov = {back, sizeof back};
    LA_CHECK_OK(t->ops->read(t, key_of(1), &iov, 1, &n, &err), err); /* 1 is now the most recent */
    put_bytes(t, key_of(3), data, 100);
    cr_assert_eq(t->ops->probe(t, key_of(2)), LA_KV_PROBE_NO);
    cr_assert_eq(t->ops->probe(t, key_of(1)), LA_KV_PROBE_YES);
    cr_assert_eq(t->ops->probe(t, key_of(3)), LA_KV_PROBE_YES);
    cr_assert_eq(la_disk_tier_bytes(t), 200);
    char big[300] = {0};
    struct iovec biov = {big, sizeof big};
    cr_assert_eq(t->ops->write(t, key_of(4), &biov, 1, &err), LA_ERR_NO_SPACE);
    t->ops->destroy(t);
    la_test_rm_tree(dir);
}

Test(kv_disk_tier, unusable_directory_opens_empty_and_writes_fail) {
    char *dir = la_test_tmpdir();
    char *file = la_path_join(dir, "not-a-dir");
    la_test_write_bytes(file, "x", 1);
    la_kv_tier *t = NULL;
    la_err err = {0};
    char warn[256];
    LA_CHECK_OK(la_disk_tier_create(file, 0, &t, warn, sizeof warn, &err), err);
    cr_assert(strstr(warn, "Not a directory"), "%s", warn);
    cr_assert_eq(t->ops->probe(t, key_of(1)), LA_KV_PROBE_NO);
    char data[10] = {0};
    struct iovec iov = {data, sizeof data};
    cr_assert_eq(t->ops->write(t, key_of(1), &iov, 1, &err), LA_ERR_IO);
    t->ops->destroy(t);
    free(file);
    la_test_rm_tree(dir);
}

/* ---- the store ------------------------------------------------------------------------------ */

static la_kv_store *store_open_with(int64_t host_bytes, const char *dir, bool through, const la_host_allocator *alloc) {
    la_kv_store_options o;
    la_kv_store_options_init(&o);
    o.host_bytes = host_bytes;
    o.staging_bytes = 16 << 10;
    o.dir = dir;
    o.dir_write_through = through;
    la_kv_record_shape sh = shape_of();
    la_kv_store *s = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_kv_store_create(&o, &sh, alloc, &s, &err), err);
    return s;
}

static la_kv_store *store_open(int64_t host_bytes, const char *dir, bool through) {
    return store_open_with(host_bytes, dir, through, NULL);
}

/* Fill record blocks with a pattern of (seed, block, byte). */
static void fill(la_kv_store *s, la_kv_rec *r, int seed) {
    const la_kv_record_header *h = la_kv_rec_header(r);
    for (int32_t b = 0; b < h->n_blocks; b++) {
        uint8_t *p = la_kv_rec_block(s, r, b);
        for (size_t i = 0; i < la_kv_store_block_bytes(s); i++) p[i] = (uint8_t)(seed * 31 + b * 7 + (int)i);
    }
}

static bool matches(la_kv_store *s, la_kv_rec *r, int seed) {
    const la_kv_record_header *h = la_kv_rec_header(r);
    for (int32_t b = 0; b < h->n_blocks; b++) {
        const uint8_t *p = la_kv_rec_block(s, r, b);
        for (size_t i = 0; i < la_kv_store_block_bytes(s); i++)
            if (p[i] != (uint8_t)(seed * 31 + b * 7 + (int)i)) return false;
    }
    return true;
}

static la_kv_record_header hdr_of(int i, int32_t n_tokens) {
    la_kv_record_shape sh = shape_of();
    return la_kv_record_header_make(key_of(i), &sh, n_tokens);
}

static void put(la_kv_store *s, int i, int32_t n_tokens, la_kv_put_reason why) {
    la_kv_record_header h = hdr_of(i, n_tokens);
    cr_assert(la_kv_store_wants(s, h.key, why));
    la_kv_rec *r = la_kv_store_put_begin(s, &h, why);
    cr_assert_not_null(r);
    fill(s, r, i);
    la_kv_store_put_end(s, r, true);
}

/* find, then poll until the read settles; returns the record (caller releases). */
static la_kv_rec *find_settled(la_kv_store *s, int i, int32_t n_tokens) {
    la_kv_record_header h = hdr_of(i, n_tokens);
    la_kv_rec *r = la_kv_store_find(s, &h);
    for (int k = 0; r && la_kv_rec_state_of(r) == LA_KV_REC_LOADING && k < 2000; k++) {
        usleep(1000);
        la_kv_store_poll(s);
    }
    return r;
}

Test(kv_store, computed_record_written_through_is_read_back_by_a_new_store) {
    char *dir = la_test_tmpdir();
    la_kv_store *s = store_open(0, dir, true);
    put(s, 1, 9, LA_KV_PUT_COMPUTED);
    la_kv_store_flush(s);
    la_kv_store_stats st;
    la_kv_store_get_stats(s, &st);
    cr_assert_eq(st.tier[LA_KV_TIER_DISK].writes, 1);
    cr_assert_eq(st.tier[LA_KV_TIER_DISK].records, 1);
    cr_assert_eq(la_kv_store_probe(s, key_of(1)), LA_KV_TIER_DISK);
    la_kv_store_destroy(s);

    s = store_open(0, dir, true); /* a restart */
    la_kv_rec *r = find_settled(s, 1, 9);
    cr_assert_not_null(r);
    cr_assert_eq(la_kv_rec_state_of(r), LA_KV_REC_READY);
    cr_assert_eq(la_kv_rec_tier(r), LA_KV_TIER_DISK);
    cr_assert(matches(s, r, 1));
    la_kv_store_release(s, r);
    la_kv_store_get_stats(s, &st);
    cr_assert_eq(st.tier[LA_KV_TIER_DISK].hits, 1);
    cr_assert_eq(st.tier[LA_KV_TIER_DISK].bytes_read, LA_KV_RECORD_HEADER_BYTES + 3 * 256);
    /* another length of the same key is another document: not served */
    cr_assert_null(find_settled(s, 2, 9));
    la_kv_store_destroy(s);
    la_test_rm_tree(dir);
}

static void corrupt_and_expect(const char *dir, void (*damage)(const char *path), la_kv_reject why) {
    la_kv_store *s = store_open(0, dir, true);
    put(s, 5, 7, LA_KV_PUT_COMPUTED);
    la_kv_store_flush(s);
    char hex[33], path[512];
    la_kv_key_hex(key_of(5), hex);
    snprintf(path, sizeof path, "%s/kv/%.2s/%s.kv", dir, hex, hex);
    damage(path);
    la_kv_rec *r = find_settled(s, 5, 7);
    cr_assert_not_null(r);
    cr_assert_eq(la_kv_rec_state_of(r), LA_KV_REC_FAILED, "%s", la_kv_reject_name(why));
    la_kv_store_release(s, r);
    la_kv_store_stats st;
    la_kv_store_get_stats(s, &st);
    cr_assert_eq(st.rejected[why], 1, "%s: %lld", la_kv_reject_name(why), (long long)st.rejected[why]);
    cr_assert_eq(st.rejected_total, 1);
    cr_assert_eq(access(path, F_OK), -1, "a rejected record is removed");
    cr_assert_eq(la_kv_store_probe(s, key_of(5)), LA_KV_TIER_COUNT);
    la_kv_store_destroy(s);
}

static void truncate_file(const char *path) { cr_assert_eq(truncate(path, 200), 0); }
static void flip_payload(const char *path) {
    int fd = open(path, O_RDWR);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, 300), 1);
    b ^= 1;
    cr_assert_eq(pwrite(fd, &b, 1, 300), 1);
    close(fd);
}
static void flip_header(const char *path) {
    int fd = open(path, O_RDWR);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, 70), 1);
    b ^= 1;
    cr_assert_eq(pwrite(fd, &b, 1, 70), 1);
    close(fd);
}
/* overwrite with the record of another document (another key, same length) */
static const char *g_other;
static void replace_with_other(const char *path) {
    char *data;
    size_t n;
    la_err err;
    LA_CHECK_OK(la_file_read(g_other, &data, &n, &err), err);
    la_test_write_bytes(path, data, n);
    free(data);
}

Test(kv_store, damaged_or_foreign_records_are_rejected_and_counted) {
    la_log_enable(false);
    char *dir = la_test_tmpdir();
    corrupt_and_expect(dir, truncate_file, LA_KV_REJECT_SHORT);
    corrupt_and_expect(dir, flip_payload, LA_KV_REJECT_PAYLOAD_CHECKSUM);
    corrupt_and_expect(dir, flip_header, LA_KV_REJECT_HEADER_CHECKSUM);
    /* document 6's record under document 5's name */
    la_kv_store *s = store_open(0, dir, true);
    put(s, 6, 7, LA_KV_PUT_COMPUTED);
    la_kv_store_flush(s);
    la_kv_store_destroy(s);
    char hex[33], other[512];
    la_kv_key_hex(key_of(6), hex);
    snprintf(other, sizeof other, "%s/kv/%.2s/%s.kv", dir, hex, hex);
    g_other = other;
    corrupt_and_expect(dir, replace_with_other, LA_KV_REJECT_KEY);
    la_test_rm_tree(dir);
    la_log_enable(true);
}

Test(kv_store, host_tier_keeps_evicted_records_and_spills_its_lru_end_to_disk) {
    char *dir = la_test_tmpdir();
    /* room for two 3-block records (768 bytes each) in the host tier */
    la_kv_store *s = store_open(2 * 3 * 256, dir, false);
    /* "on eviction": a computed document is neither written nor kept */
    cr_assert(!la_kv_store_wants(s, key_of(1), LA_KV_PUT_COMPUTED));
    put(s, 1, 9, LA_KV_PUT_EVICTED);
    put(s, 2, 9, LA_KV_PUT_EVICTED);
    cr_assert(la_kv_store_in_host(s, key_of(1)) && la_kv_store_in_host(s, key_of(2)));
    cr_assert(!la_kv_store_wants(s, key_of(1), LA_KV_PUT_EVICTED), "already in the host tier");
    la_kv_rec *r = find_settled(s, 1, 9); /* host hit: READY at once; 1 becomes most recent */
    cr_assert_eq(la_kv_rec_state_of(r), LA_KV_REC_READY);
    cr_assert_eq(la_kv_rec_tier(r), LA_KV_TIER_HOST);
    cr_assert(matches(s, r, 1));
    la_kv_store_release(s, r);
    put(s, 3, 9, LA_KV_PUT_EVICTED); /* evicts 2, the least recently used, to disk */
    la_kv_store_flush(s);
    cr_assert(!la_kv_store_in_host(s, key_of(2)));
    cr_assert_eq(la_kv_store_probe(s, key_of(2)), LA_KV_TIER_DISK);
    la_kv_store_stats st;
    la_kv_store_get_stats(s, &st);
    cr_assert_eq(st.spills, 1);
    cr_assert_eq(st.writebacks, 3);
    cr_assert_eq(st.tier[LA_KV_TIER_HOST].evictions, 1);
    cr_assert_eq(st.tier[LA_KV_TIER_HOST].records, 2);
    r = find_settled(s, 2, 9); /* back from disk, into the host tier again */
    cr_assert_eq(la_kv_rec_state_of(r), LA_KV_REC_READY);
    cr_assert_eq(la_kv_rec_tier(r), LA_KV_TIER_DISK);
    cr_assert(matches(s, r, 2));
    la_kv_store_release(s, r);
    cr_assert(la_kv_store_in_host(s, key_of(2)));
    la_kv_store_destroy(s);
    la_test_rm_tree(dir);
}

/* n_io_threads starts that many I/O threads (0: 2), and a record written by one store is
 * read back through them by another with a different count. */
Test(kv_store, io_threads_as_asked) {
    char *dir = la_test_tmpdir();
    for (int32_t n = 0; n <= 5; n += 5) {
        la_kv_store_options o;
        la_kv_store_options_init(&o);
        o.staging_bytes = 16 << 10;
        o.dir = dir;
        o.n_io_threads = n;
        la_kv_record_shape sh = shape_of();
        la_kv_store *s = NULL;
        la_err err = {0};
        LA_CHECK_OK(la_kv_store_create(&o, &sh, NULL, &s, &err), err);
        cr_assert_eq(la_kv_store_io_threads(s), n ? n : 2);
        if (n == 0) {
            put(s, 3, 9, LA_KV_PUT_COMPUTED);
            la_kv_store_flush(s);
        } else {
            la_kv_rec *r = find_settled(s, 3, 9);
            cr_assert_not_null(r);
            cr_assert_eq(la_kv_rec_state_of(r), LA_KV_REC_READY);
            cr_assert(matches(s, r, 3));
            la_kv_store_release(s, r);
        }
        la_kv_store_destroy(s);
    }
    la_test_rm_tree(dir);
}

Test(kv_store, no_tier_means_no_lookups_and_no_puts) {
    la_kv_store *s = store_open(0, NULL, true);
    cr_assert(!la_kv_store_enabled(s));
    cr_assert(!la_kv_store_wants(s, key_of(1), LA_KV_PUT_COMPUTED));
    la_kv_record_header h = hdr_of(1, 4);
    cr_assert_null(la_kv_store_find(s, &h));
    la_kv_store_destroy(s);
}

/* A slow pinned allocator (as cudaHostAlloc on the GPU): it makes nothing until the test
 * opens the gate, then gives memory, or fails. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open, fail;
    int delay_ms; /* after the gate opens */
} gate;

static void *gate_alloc(void *user, size_t bytes) {
    gate *g = user;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    usleep((useconds_t)g->delay_ms * 1000);
    return g->fail ? NULL : aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static void gate_free(void *user, void *p) {
    (void)user;
    free(p);
}

static void gate_open(gate *g) {
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* A restarted server's first lookups come while its pinned memory is still being made:
 * they wait for it and are served from disk (the H200 run recomputed them before); if the
 * memory never comes, the lookup fails and the document is computed. A store destroyed
 * while a lookup waits (its memory arriving meanwhile) leaves nothing behind (ASan). */
Test(kv_store, lookups_wait_for_pinned_memory_still_growing) {
    char *dir = la_test_tmpdir();
    la_kv_store *s = store_open(0, dir, true);
    put(s, 1, 9, LA_KV_PUT_COMPUTED);
    la_kv_store_flush(s);
    la_kv_store_destroy(s);
    for (int fail = 0; fail < 2; fail++) {
        gate g = {.fail = fail};
        pthread_mutex_init(&g.mu, NULL);
        pthread_cond_init(&g.cv, NULL);
        la_host_allocator alloc = {gate_alloc, gate_free, &g};
        s = store_open_with(0, dir, true, &alloc);
        la_kv_record_header h = hdr_of(1, 9);
        la_kv_rec *r = la_kv_store_find(s, &h);
        cr_assert_not_null(r, "a lookup while pinned memory grows waits for it");
        la_kv_store_poll(s);
        cr_assert_eq(la_kv_rec_state_of(r), LA_KV_REC_LOADING);
        la_kv_rec *again = la_kv_store_find(s, &h);
        cr_assert_eq(again, r, "a second lookup of the key shares the waiting one");
        la_kv_store_release(s, again);
        gate_open(&g);
        for (int k = 0; la_kv_rec_state_of(r) == LA_KV_REC_LOADING && k < 5000; k++) {
            usleep(1000);
            la_kv_store_poll(s);
        }
        la_kv_store_stats st;
        la_kv_store_get_stats(s, &st);
        if (!fail) {
            cr_assert_eq(la_kv_rec_state_of(r), LA_KV_REC_READY);
            cr_assert_eq(la_kv_rec_tier(r), LA_KV_TIER_DISK);
            cr_assert(matches(s, r, 1));
            cr_assert_eq(st.tier[LA_KV_TIER_DISK].hits, 1);
            cr_assert_eq(st.lookups_dropped, 0);
        } else {
            cr_assert_eq(la_kv_rec_state_of(r), LA_KV_REC_FAILED);
            cr_assert_eq(st.lookups_dropped, 1);
            cr_assert_eq(st.tier[LA_KV_TIER_DISK].hits, 0);
        }
        la_kv_store_release(s, r);
        la_kv_store_destroy(s);
        pthread_mutex_destroy(&g.mu);
        pthread_cond_destroy(&g.cv);
    }
    gate g = {.delay_ms = 100};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    la_host_allocator alloc = {gate_alloc, gate_free, &g};
    s = store_open_with(0, dir, true, &alloc);
    la_kv_record_header h = hdr_of(1, 9);
    la_kv_rec *r = la_kv_store_find(s, &h);
    cr_assert_not_null(r);
    la_kv_store_release(s, r);
    gate_open(&g); /* the memory comes while the store is being destroyed */
    la_kv_store_destroy(s);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
    la_test_rm_tree(dir);
}
