/* The document KV store through the engine (issue 29's acceptance, CPU f32 tiny checkpoint):
 *   - a document served from the host tier and from the disk tier gives logits bitwise
 *     equal to the same request with the documents computed in this process;
 *   - a restart on the same directory serves reordered documents from disk;
 *   - every rejection (truncated, flipped byte, another fingerprint / dtype / block size,
 *     another salt's or secret's record under this one's name, an unusable directory, a
 *     full disk) ends in a recompute with the same answer and a counted reason;
 *   - a pool smaller than the working set with a host tier: evictions go to the host tier
 *     and come back, with the pool accounting exact after every step;
 *   - a record written under one salt is never found under another or none;
 *   - kv_read: a disk tier slower than computing is computed instead (auto), read anyway
 *     (always), with the same answers; the choice weighs the estimates as documented;
 *   - doc_context preamble: documents computed after a document 0 read from a slow disk wait
 *     for it. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/file.h"
#include "base/log.h"
#include "common/engine_util.h"
#include "common/test_util.h"
#include "engine/doc_store.h"
#include "engine/read_choice.h"
#include "engine/sampling.h"
#include "kv/store/record.h"

#define N_GEN 5
#define LOGIT_TOL 1e-4

static char g_model[512];

static const char *tiny(const char *name) {
    snprintf(g_model, sizeof g_model, "%s/tests/fixtures/models/%s", LA_SOURCE_DIR, name);
    return g_model;
}

typedef struct eng_opts {
    const char *model;  /* fixture name; NULL: tiny-f32-tied */
    int64_t kv_blocks;  /* 0: 4096 */
    int64_t host_bytes;
    const char *kv_dir;
    const char *secret;
    int64_t dir_bytes;
    bool evict_only;    /* kv_write_through false */
    int64_t staging;    /* kv_staging_bytes */
    la_kv_read read;    /* kv_read */
    la_cpu_weights weights; /* cpu_weights */
} eng_opts;

static la_engine *make(eng_opts o) {
    /* The tests compare a read record's answers with a computation bit for bit, but the
     * documents are computed in steps of other sizes there: keep every product on gemm_nt,
     * whose rows do not depend on the batch (OpenBLAS's, taken above the kernel table's
     * crossover, 48 rows with AVX2, do in the last bits) */
    cr_assert_eq(setenv("LA_CPU_GEMM_MAX_ROWS", "1000000", 1), 0);
    la_engine_options eo;
    la_engine_options_init(&eo);
    eo.model_dir = tiny(o.model ? o.model : "tiny-f32-tied");
    eo.kv_blocks = o.kv_blocks ? o.kv_blocks : 4096;
    eo.n_threads = 2;
    eo.host_kv_bytes = o.host_bytes;
    eo.kv_dir = o.kv_dir;
    eo.kv_secret_file = o.secret;
    eo.kv_dir_bytes = o.dir_bytes;
    eo.kv_write_through = !o.evict_only;
    eo.kv_staging_bytes = o.staging;
    eo.kv_read = o.read;
    eo.cpu_weights = o.weights;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&eo, &e, &err), err);
    return e;
}

/* ---- documents and requests ----------------------------------------------------------------- */

typedef struct docset {
    int32_t n, len[16];
    int32_t ids[16][128];
} docset;

static void make_docs(docset *d, uint64_t seed, int32_t n) {
    la_rng rng;
    la_rng_seed(&rng, seed);
    d->n = n;
    for (int32_t i = 0; i < n; i++) {
        d->len[i] = 20 + (int32_t)(la_rng_next(&rng) % 100);
        for (int32_t t = 0; t < d->len[i]; t++) d->ids[i][t] = (int32_t)(la_rng_next(&rng) % 500);
    }
}

static const int32_t k_question[6] = {11, 42, 7, 99, 3, 250};
static la_doc_context g_doc_context = LA_DOC_CONTEXT_COUNT; /* ask()'s: the engine's default */

/* One request over the documents in order[] (NULL: as given), stepping and checking the
 * pool's accounting after every step. */
static void ask(la_engine *e, const docset *d, const int32_t *order, const char *salt, la_test_gen *g) {
    la_segment segs[16];
    for (int32_t i = 0; i < d->n; i++) {
        int32_t k = order ? order[i] : i;
        segs[i] = (la_segment){.ids = d->ids[k], .n_ids = d->len[k]};
    }
    la_request_params p;
    la_request_params_init(&p);
    p.docs = segs;
    p.n_docs = d->n;
    p.prompt = (la_segment){.ids = k_question, .n_ids = 6};
    p.add_special = false;
    p.method = LA_METHOD_LAZY;
    p.cache_salt = salt;
    p.doc_context = g_doc_context;
    p.return_logits = true;
    p.sampling.max_tokens = N_GEN;
    p.sampling.ignore_eos = true;
    memset(g, 0, sizeof *g);
    p.on_event = la_test_on_event;
    p.user = g;
    la_err err = {0};
    LA_CHECK_OK(la_engine_submit(e, &p, NULL, &err), err);
    while (!g->done) {
        la_engine_step(e, &err);
        LA_CHECK_OK(la_engine_check(e, &err), err);
    }
    cr_assert(g->finish != LA_FINISH_ERROR, "request failed: %s", g->error);
}

static int32_t doc_tokens(const docset *d) {
    int32_t n = 0;
    for (int32_t i = 0; i < d->n; i++) n += d->len[i];
    return n;
}

static void assert_bitwise(const la_test_gen *a, const la_test_gen *b, const char *what) {
    cr_assert_eq(a->n_tokens, b->n_tokens, "%s", what);
    for (int32_t i = 0; i < a->n_tokens; i++) cr_assert_eq(a->tokens[i], b->tokens[i], "%s: token %d", what, i);
    cr_assert(!memcmp(a->logits, b->logits, sizeof(float) * (size_t)a->n_tokens * (size_t)a->n_vocab),
              "%s: logits differ in some bit", what);
}

static void assert_close(const la_test_gen *a, const la_test_gen *b, const char *what) {
    cr_assert_eq(a->n_tokens, b->n_tokens, "%s", what);
    for (int32_t i = 0; i < a->n_tokens; i++) {
        cr_assert_eq(a->tokens[i], b->tokens[i], "%s: greedy token %d", what, i);
        double diff = la_test_max_abs_diff(a->logits + (size_t)i * a->n_vocab, b->logits + (size_t)i * b->n_vocab,
                                           (size_t)a->n_vocab, NULL);
        cr_assert(diff <= LOGIT_TOL, "%s: step %d logits differ by %.3g", what, i, diff);
    }
}

static la_engine_store_stats store_stats(la_engine *e) {
    la_engine_store_stats s;
    la_engine_get_store_stats(e, &s);
    return s;
}

/* Every record file under dir/kv: fn(path, user) for each; how many. */
static int each_record(const char *dir, void (*fn)(const char *path, void *user), void *user) {
    char kv[600];
    snprintf(kv, sizeof kv, "%s/kv", dir);
    DIR *top = opendir(kv);
    cr_assert(top, "%s", kv);
    int n = 0;
    struct dirent *s;
    while ((s = readdir(top))) {
        if (s->d_name[0] == '.') continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%.255s", kv, s->d_name);
        DIR *dd = opendir(sub);
        struct dirent *f;
        while (dd && (f = readdir(dd)))
            if (strstr(f->d_name, ".kv")) {
                char *path = la_path_join(sub, f->d_name);
                fn(path, user);
                free(path);
                n++;
            }
        if (dd) closedir(dd);
    }
    closedir(top);
    return n;
}

static void keep_path(const char *path, void *user) {
    char **found = user;
    free(*found);
    *found = strdup(path);
}

/* The only record file under dir/kv (the test wrote one), as a heap path. */
static char *only_record(const char *dir) {
    char *found = NULL;
    int n = each_record(dir, keep_path, &found);
    cr_assert_eq(n, 1, "%d record files under %s/kv", n, dir);
    return found;
}

static const int32_t k_order1[4] = {0, 1, 2, 3}, k_order2[4] = {2, 0, 3, 1};

/* ---- host and disk tiers: bitwise equal ------------------------------------------------------ */

Test(kv_store_engine, host_tier_serves_evicted_documents_bitwise_equal) {
    docset a, b;
    make_docs(&a, 1, 4);
    make_docs(&b, 2, 4);
    /* the reference: everything stays in a large pool */
    la_engine *y = make((eng_opts){0});
    la_test_gen ya, yb, yc;
    ask(y, &a, k_order1, NULL, &ya);
    ask(y, &b, k_order1, NULL, &yb);
    ask(y, &a, k_order2, NULL, &yc);
    cr_assert_eq(yc.stats.doc_tokens_reused, doc_tokens(&a));
    /* a pool that holds one request: b's documents evict a's into the host tier */
    int32_t blocks = 0;
    for (int32_t i = 0; i < 4; i++) blocks += (a.len[i] + 15) / 16 > (b.len[i] + 15) / 16 ? (a.len[i] + 15) / 16
                                                                                         : (b.len[i] + 15) / 16;
    la_engine *x = make((eng_opts){.kv_blocks = blocks + 4, .host_bytes = 64 << 20});
    la_test_gen xa, xb, xc;
    ask(x, &a, k_order1, NULL, &xa);
    ask(x, &b, k_order1, NULL, &xb);
    ask(x, &a, k_order2, NULL, &xc);
    la_engine_store_stats st = store_stats(x);
    cr_assert(st.writebacks >= 4, "writebacks %lld", (long long)st.writebacks);
    cr_assert_eq(xc.stats.doc_tokens_reused, doc_tokens(&a));
    cr_assert(xc.stats.doc_tokens_host > 0, "served from the host tier");
    cr_assert_eq(xc.stats.doc_tokens_computed, 0);
    cr_assert(st.tier[LA_KV_TIER_KIND_HOST].hits >= 1);
    /* exclusive: every record came in as a write-back and a's left for the pool when they
     * were loaded (the 64 MiB tier evicted nothing), so it holds the rest: b's */
    cr_assert_eq(st.promotions, st.tier[LA_KV_TIER_KIND_HOST].hits);
    cr_assert_eq(st.tier[LA_KV_TIER_KIND_HOST].evictions, 0);
    cr_assert_eq(st.tier[LA_KV_TIER_KIND_HOST].records, st.writebacks - st.promotions, "host records %lld",
                 (long long)st.tier[LA_KV_TIER_KIND_HOST].records);
    assert_bitwise(&xa, &ya, "first");
    assert_bitwise(&xc, &yc, "from the host tier");
    la_engine_stats es;
    la_engine_get_stats(x, &es);
    cr_assert_eq(es.documents_computed, 8);
    cr_assert(es.documents_loaded >= 1);
    la_test_gen_free(&ya), la_test_gen_free(&yb), la_test_gen_free(&yc);
    la_test_gen_free(&xa), la_test_gen_free(&xb), la_test_gen_free(&xc);
    la_engine_destroy(x);
    la_engine_destroy(y);
}

Test(kv_store_engine, restart_serves_reordered_documents_from_disk_bitwise_equal) {
    char *dir = la_test_tmpdir();
    docset a;
    make_docs(&a, 3, 4);
    la_engine *y = make((eng_opts){0});
    la_test_gen y1, y2;
    ask(y, &a, k_order1, NULL, &y1);
    ask(y, &a, k_order2, NULL, &y2);
    la_engine_destroy(y);

    la_engine *x = make((eng_opts){.kv_dir = dir});
    la_test_gen x1;
    ask(x, &a, k_order1, NULL, &x1);
    la_engine_store_flush(x);
    la_engine_store_stats st = store_stats(x);
    cr_assert_eq(st.tier[LA_KV_TIER_KIND_DISK].writes, 4);
    la_engine_destroy(x);

    la_engine *z = make((eng_opts){.kv_dir = dir}); /* restarted on the same directory */
    la_test_gen z2;
    ask(z, &a, k_order2, NULL, &z2);
    st = store_stats(z);
    cr_assert_eq(st.tier[LA_KV_TIER_KIND_DISK].hits, 4);
    cr_assert_eq(st.rejected, 0);
    cr_assert_eq(z2.stats.doc_tokens_disk, doc_tokens(&a));
    cr_assert_eq(z2.stats.doc_tokens_reused, doc_tokens(&a));
    cr_assert_eq(z2.stats.doc_tokens_computed, 0);
    assert_bitwise(&x1, &y1, "computed");
    assert_bitwise(&z2, &y2, "from the disk tier after a restart");
    int32_t where = -1;
    la_err err = {0};
    la_segment seg = {.ids = a.ids[0], .n_ids = a.len[0]};
    LA_CHECK_OK(la_engine_document_where(z, &seg, LA_METHOD_LAZY, NULL, &where, &err), err);
    cr_assert_eq(where, 1, "now in the pool");
    la_test_gen_free(&y1), la_test_gen_free(&y2), la_test_gen_free(&x1), la_test_gen_free(&z2);
    la_engine_destroy(z);
    /* another checkpoint, another block size: other names, never a hit */
    la_engine *w = make((eng_opts){.kv_dir = dir, .model = "tiny-f32-linear"});
    la_test_gen w2;
    ask(w, &a, k_order2, NULL, &w2);
    cr_assert_eq(store_stats(w).tier[LA_KV_TIER_KIND_DISK].hits, 0);
    cr_assert_eq(w2.stats.doc_tokens_computed, doc_tokens(&a));
    la_test_gen_free(&w2);
    la_engine_destroy(w);
    la_test_rm_tree(dir);
}

/* An f32 checkpoint kept in bf16 computes other K/V than the same checkpoint kept in f32 (or
 * left in its dtype): its records live in a namespace of their own, and each engine finds its
 * own after a restart. */
Test(kv_store_engine, records_of_weights_kept_rounded_are_kept_apart) {
    char *dir = la_test_tmpdir();
    docset a;
    make_docs(&a, 5, 3);
    const int32_t order[3] = {0, 1, 2};
    struct {
        la_cpu_weights weights;
        int64_t hits;
    } runs[] = {{LA_CPU_WEIGHTS_AUTO, 0},  /* writes the f32 records */
                {LA_CPU_WEIGHTS_BF16, 0},  /* rounds the f32 weights: computes, writes its own */
                {LA_CPU_WEIGHTS_F32, 3},   /* what auto keeps: auto's records */
                {LA_CPU_WEIGHTS_BF16, 3},  /* its own, after a restart */
                {LA_CPU_WEIGHTS_F16, 0}};  /* another rounding, another namespace */
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        la_engine *e = make((eng_opts){.kv_dir = dir, .weights = runs[i].weights});
        la_test_gen g;
        ask(e, &a, order, NULL, &g);
        la_engine_store_flush(e);
        cr_assert_eq(store_stats(e).tier[LA_KV_TIER_KIND_DISK].hits, runs[i].hits, "run %zu", i);
        cr_assert_eq(g.stats.doc_tokens_computed, runs[i].hits ? 0 : doc_tokens(&a), "run %zu", i);
        la_test_gen_free(&g);
        la_engine_destroy(e);
    }
    la_test_rm_tree(dir);
}

static void keep_largest(const char *path, void *user) {
    struct stat st;
    int64_t *max = user;
    if (stat(path, &st) == 0 && st.st_size > *max) *max = st.st_size;
}

/* The largest record file under dir/kv, in bytes. */
static int64_t largest_record(const char *dir) {
    int64_t max = 0;
    each_record(dir, keep_largest, &max);
    return max;
}

/* Four documents computed in one step with host memory for one record in transit: the
 * write-throughs that find it taken wait in the pool and are all written, none dropped;
 * a restart finds every one. A record larger than that memory is dropped and counted. */
Test(kv_store_engine, write_throughs_wait_for_staging_memory_instead_of_being_dropped) {
    char *big = la_test_tmpdir(), *small = la_test_tmpdir();
    docset a;
    make_docs(&a, 3, 4);
    la_engine *x = make((eng_opts){.kv_dir = big});
    la_test_gen x1;
    ask(x, &a, k_order1, NULL, &x1);
    la_engine_store_flush(x);
    cr_assert_eq(store_stats(x).tier[LA_KV_TIER_KIND_DISK].writes, 4);
    la_engine_destroy(x);
    int64_t one = largest_record(big);
    cr_assert(one > 0);

    la_engine *y = make((eng_opts){.kv_dir = small, .staging = one});
    la_test_gen y1;
    ask(y, &a, k_order1, NULL, &y1);
    la_engine_store_flush(y);
    la_engine_store_stats st = store_stats(y);
    cr_assert_eq(st.puts_dropped, 0);
    cr_assert_eq(st.tier[LA_KV_TIER_KIND_DISK].writes, 4, "%lld written", (long long)st.tier[LA_KV_TIER_KIND_DISK].writes);
    la_engine_destroy(y);
    la_engine *z = make((eng_opts){.kv_dir = small});
    la_test_gen z2, z1;
    ask(z, &a, k_order2, NULL, &z2);
    cr_assert_eq(store_stats(z).tier[LA_KV_TIER_KIND_DISK].hits, 4);
    cr_assert_eq(z2.stats.doc_tokens_computed, 0);
    la_engine_destroy(z);

    la_test_rm_tree(small);
    small = la_test_tmpdir();
    la_engine *w = make((eng_opts){.kv_dir = small, .staging = 1}); /* one block: no record fits */
    ask(w, &a, k_order1, NULL, &z1);
    la_engine_store_flush(w);
    st = store_stats(w);
    cr_assert_eq(st.puts_dropped, 4);
    cr_assert_eq(st.tier[LA_KV_TIER_KIND_DISK].writes, 0);
    assert_bitwise(&z1, &x1, "computed with nothing stored");
    la_engine_destroy(w);
    la_test_gen_free(&x1), la_test_gen_free(&y1), la_test_gen_free(&z1), la_test_gen_free(&z2);
    la_test_rm_tree(big);
    la_test_rm_tree(small);
}

/* la_engine_has_work stays true until the store's writes of a finished request are done and
 * counted: stepping while it says so leaves the stats exact without a flush (a server's
 * engine thread does only that; its /metrics showed writes still missing). */
Test(kv_store_engine, has_work_lasts_until_the_stores_writes_are_counted) {
    char *dir = la_test_tmpdir();
    docset a;
    make_docs(&a, 5, 4);
    la_engine *x = make((eng_opts){.kv_dir = dir});
    la_test_gen g;
    ask(x, &a, k_order1, NULL, &g);
    la_err err = {0};
    while (la_engine_has_work(x)) LA_CHECK_OK(la_engine_step(x, &err), err);
    la_engine_store_stats st = store_stats(x);
    cr_assert_eq(st.tier[LA_KV_TIER_KIND_DISK].writes, 4, "%lld written",
                 (long long)st.tier[LA_KV_TIER_KIND_DISK].writes);
    la_test_gen_free(&g);
    la_engine_destroy(x);
    la_test_rm_tree(dir);
}

/* ---- rejections ------------------------------------------------------------------------------ */

typedef void (*damage_fn)(const char *record, const char *dir);

static void rewrite_header(const char *path, void (*edit)(la_kv_record_header *)) {
    int fd = open(path, O_RDWR);
    cr_assert(fd >= 0);
    uint8_t buf[LA_KV_RECORD_HEADER_BYTES];
    cr_assert_eq(pread(fd, buf, sizeof buf, 0), (ssize_t)sizeof buf);
    la_kv_record_header h;
    la_kv_record_header want = {0};
    la_kv_record_header_check(buf, sizeof buf, &want, &h); /* decodes into h whatever it says */
    edit(&h);
    la_kv_record_header_encode(&h, buf); /* a valid header checksum: only the field is wrong */
    cr_assert_eq(pwrite(fd, buf, sizeof buf, 0), (ssize_t)sizeof buf);
    close(fd);
}

static void edit_fingerprint(la_kv_record_header *h) { h->shape.fingerprint.hi ^= 1; }
static void edit_dtype(la_kv_record_header *h) { h->shape.dtype = 2; }
static void edit_block_size(la_kv_record_header *h) { h->shape.block_size = 32; }

static void d_truncate(const char *p, const char *dir) {
    (void)dir;
    cr_assert_eq(truncate(p, 1000), 0);
}
static void d_flip(const char *p, const char *dir) {
    (void)dir;
    int fd = open(p, O_RDWR);
    uint8_t b;
    cr_assert_eq(pread(fd, &b, 1, 4000), 1);
    b ^= 0x10;
    cr_assert_eq(pwrite(fd, &b, 1, 4000), 1);
    close(fd);
}
static void d_fingerprint(const char *p, const char *dir) { (void)dir, rewrite_header(p, edit_fingerprint); }
static void d_dtype(const char *p, const char *dir) { (void)dir, rewrite_header(p, edit_dtype); }
static void d_block_size(const char *p, const char *dir) { (void)dir, rewrite_header(p, edit_block_size); }

static void reject_case(damage_fn damage, la_kv_reject why, const la_test_gen *ref, const docset *one) {
    char *dir = la_test_tmpdir();
    la_engine *x = make((eng_opts){.kv_dir = dir});
    la_test_gen g;
    ask(x, one, NULL, NULL, &g);
    la_test_gen_free(&g);
    la_engine_destroy(x);
    char *rec = only_record(dir);
    damage(rec, dir);
    la_engine *z = make((eng_opts){.kv_dir = dir});
    ask(z, one, NULL, NULL, &g);
    la_engine_store_stats st = store_stats(z);
    cr_assert_eq(st.rejected_by_reason[why], 1, "%s: %lld", la_kv_reject_name(why),
                 (long long)st.rejected_by_reason[why]);
    cr_assert_eq(st.rejected, 1);
    cr_assert_eq(g.stats.doc_tokens_computed, one->len[0], "%s: recomputed", la_kv_reject_name(why));
    cr_assert_eq(g.stats.doc_tokens_disk, 0);
    assert_close(&g, ref, la_kv_reject_name(why));
    la_test_gen_free(&g);
    la_engine_destroy(z);
    free(rec);
    la_test_rm_tree(dir);
}

Test(kv_store_engine, damaged_or_foreign_records_are_recomputed_and_counted) {
    la_log_enable(false);
    docset one;
    make_docs(&one, 4, 1);
    one.len[0] = 100; /* 7 blocks: byte 4000 is in the payload */
    la_engine *y = make((eng_opts){0});
    la_test_gen ref;
    ask(y, &one, NULL, NULL, &ref);
    la_engine_destroy(y);
    reject_case(d_truncate, LA_KV_REJECT_SHORT, &ref, &one);
    reject_case(d_flip, LA_KV_REJECT_PAYLOAD_CHECKSUM, &ref, &one);
    reject_case(d_fingerprint, LA_KV_REJECT_FINGERPRINT, &ref, &one);
    reject_case(d_dtype, LA_KV_REJECT_DTYPE, &ref, &one);
    reject_case(d_block_size, LA_KV_REJECT_BLOCK_SIZE, &ref, &one);
    la_test_gen_free(&ref);
    la_log_enable(true);
}

/* Write the document's record under (salt_a, secret_a), the same document's under (salt_b,
 * secret_b), put the first in the second's place; an engine of (salt_b, secret_b) must
 * reject it. */
static void foreign_case(const char *salt_a, const char *salt_b, bool other_secret) {
    char *dir_a = la_test_tmpdir(), *dir_b = la_test_tmpdir();
    char *secret_a = la_path_join(dir_a, "secret"), *secret_b = la_path_join(dir_b, "secret");
    la_test_write_bytes(secret_a, "deployment-secret-AAAA", 22);
    la_test_write_bytes(secret_b, other_secret ? "deployment-secret-BBBB" : "deployment-secret-AAAA", 22);
    docset one;
    make_docs(&one, 5, 1);
    la_test_gen g;
    la_engine *a = make((eng_opts){.kv_dir = dir_a, .secret = secret_a});
    ask(a, &one, NULL, salt_a, &g);
    la_test_gen_free(&g);
    la_engine_destroy(a);
    la_engine *b = make((eng_opts){.kv_dir = dir_b, .secret = secret_b});
    la_test_gen ref;
    ask(b, &one, NULL, salt_b, &ref);
    la_engine_destroy(b);
    char *ra = only_record(dir_a), *rb = only_record(dir_b);
    cr_assert_str_neq(strrchr(ra, '/'), strrchr(rb, '/'), "the two records have different names");
    char *data;
    size_t n;
    la_err err = {0};
    LA_CHECK_OK(la_file_read(ra, &data, &n, &err), err);
    la_test_write_bytes(rb, data, n);
    free(data);
    b = make((eng_opts){.kv_dir = dir_b, .secret = secret_b});
    ask(b, &one, NULL, salt_b, &g);
    la_engine_store_stats st = store_stats(b);
    cr_assert_eq(st.rejected_by_reason[LA_KV_REJECT_KEY], 1);
    cr_assert_eq(g.stats.doc_tokens_computed, one.len[0]);
    assert_close(&g, &ref, "foreign record");
    la_test_gen_free(&g), la_test_gen_free(&ref);
    la_engine_destroy(b);
    free(ra), free(rb), free(secret_a), free(secret_b);
    la_test_rm_tree(dir_a);
    la_test_rm_tree(dir_b);
}

Test(kv_store_engine, another_salts_or_secrets_record_is_never_used) {
    la_log_enable(false);
    foreign_case("tenant-a", "tenant-b", false);
    foreign_case(NULL, NULL, true);
    la_log_enable(true);
}

Test(kv_store_engine, unusable_directory_keeps_serving_and_counts_write_failures) {
    la_log_enable(false);
    char *tmp = la_test_tmpdir();
    char *file = la_path_join(tmp, "a-file"), *secret = la_path_join(tmp, "secret");
    la_test_write_bytes(file, "x", 1);
    docset one;
    make_docs(&one, 6, 1);
    la_engine *y = make((eng_opts){0});
    la_test_gen ref, g;
    ask(y, &one, NULL, NULL, &ref);
    la_engine_destroy(y);
    /* with a secret of its own: the disk tier exists, every write fails */
    la_engine *x = make((eng_opts){.kv_dir = file, .secret = secret});
    ask(x, &one, NULL, NULL, &g);
    la_engine_store_flush(x);
    la_engine_store_stats st = store_stats(x);
    cr_assert_eq(st.tier[LA_KV_TIER_KIND_DISK].write_failures, 1);
    cr_assert(st.tier[LA_KV_TIER_KIND_DISK].down);
    assert_close(&g, &ref, "unusable directory");
    la_test_gen_free(&g);
    la_engine_destroy(x);
    /* without: no secret can be made there, the engine serves without a disk tier */
    x = make((eng_opts){.kv_dir = file});
    ask(x, &one, NULL, NULL, &g);
    cr_assert(!store_stats(x).tier[LA_KV_TIER_KIND_DISK].enabled);
    assert_close(&g, &ref, "no disk tier");
    la_test_gen_free(&g), la_test_gen_free(&ref);
    la_engine_destroy(x);
    free(file), free(secret);
    la_test_rm_tree(tmp);
    la_log_enable(true);
}

Test(kv_store_engine, full_disk_keeps_serving_and_counts_write_failures) {
    la_log_enable(false);
    char *dir = la_test_tmpdir();
    /* a 1 MiB tmpfs where the test may mount one; else the tier's own size cap (1 MiB) */
    bool tmpfs = mount("tmpfs", dir, "tmpfs", 0, "size=1m") == 0;
    if (!tmpfs) cr_log_info("no tmpfs mount here: the disk tier's size cap stands in for a full disk");
    char *secret_dir = la_test_tmpdir();
    char *secret = la_path_join(secret_dir, "secret");
    la_engine *x = make((eng_opts){.kv_dir = dir, .secret = secret, .dir_bytes = tmpfs ? 0 : 1 << 20});
    la_engine *y = make((eng_opts){0});
    for (int32_t i = 0; i < 24; i++) { /* 24 records of 64 KiB (8 blocks of 8 KiB) */
        docset one;
        make_docs(&one, 100 + (uint64_t)i, 1);
        one.len[0] = 120;
        la_test_gen g, ref;
        ask(x, &one, NULL, NULL, &g);
        ask(y, &one, NULL, NULL, &ref);
        assert_close(&g, &ref, "full disk");
        la_test_gen_free(&g), la_test_gen_free(&ref);
    }
    la_engine_store_flush(x);
    la_engine_store_stats st = store_stats(x);
    if (tmpfs) {
        cr_assert(st.tier[LA_KV_TIER_KIND_DISK].write_failures >= 8, "failures %lld writes %lld",
                  (long long)st.tier[LA_KV_TIER_KIND_DISK].write_failures, (long long)st.tier[LA_KV_TIER_KIND_DISK].writes);
        cr_assert(st.tier[LA_KV_TIER_KIND_DISK].writes >= 4);
    } else {
        cr_assert(st.tier[LA_KV_TIER_KIND_DISK].evictions >= 8); /* the cap keeps what fits */
    }
    la_engine_destroy(x);
    la_engine_destroy(y);
    if (tmpfs) umount(dir);
    free(secret);
    la_test_rm_tree(secret_dir);
    la_test_rm_tree(dir);
    la_log_enable(true);
}

/* ---- a working set larger than the pool -------------------------------------------------------- */

Test(kv_store_engine, small_pool_with_host_tier_reloads_and_keeps_accounting_exact) {
    docset all;
    make_docs(&all, 8, 12);
    la_engine *x = make((eng_opts){.kv_blocks = 40, .host_bytes = 32 << 20});
    la_engine *y = make((eng_opts){0});
    la_rng rng;
    la_rng_seed(&rng, 9);
    const char *salts[3] = {NULL, "t1", "t2"};
    for (int round = 0; round < 24; round++) {
        docset d = {.n = 3};
        for (int32_t i = 0; i < 3; i++) {
            int32_t k = (int32_t)(la_rng_next(&rng) % 12);
            d.len[i] = all.len[k] < 60 ? all.len[k] : 60;
            memcpy(d.ids[i], all.ids[k], sizeof d.ids[i]);
        }
        const char *salt = salts[la_rng_next(&rng) % 3];
        la_test_gen g, ref;
        ask(x, &d, NULL, salt, &g);
        ask(y, &d, NULL, salt, &ref);
        char what[64];
        snprintf(what, sizeof what, "round %d", round);
        assert_close(&g, &ref, what);
        la_test_gen_free(&g), la_test_gen_free(&ref);
    }
    la_engine_stats es;
    la_engine_get_stats(x, &es);
    la_engine_store_stats st = store_stats(x);
    cr_assert(es.kv_evictions > 0);
    cr_assert(st.writebacks > 0);
    cr_assert(st.tier[LA_KV_TIER_KIND_HOST].hits > 0, "reloads came back from the host tier");
    cr_assert(es.documents_loaded > 0);
    cr_assert_eq(es.kv_blocks_pinned, 0);
    la_err err = {0};
    LA_CHECK_OK(la_engine_check(x, &err), err);
    la_engine_destroy(x);
    la_engine_destroy(y);
}

Test(kv_store_engine, a_salted_record_is_not_found_under_another_salt) {
    docset a, b;
    make_docs(&a, 10, 4);
    make_docs(&b, 11, 4);
    la_engine *x = make((eng_opts){.kv_blocks = 40, .host_bytes = 32 << 20});
    la_test_gen g;
    ask(x, &a, NULL, "tenant-a", &g), la_test_gen_free(&g);
    ask(x, &b, NULL, "tenant-a", &g), la_test_gen_free(&g); /* a's documents leave the pool */
    ask(x, &a, NULL, "tenant-b", &g);
    cr_assert_eq(g.stats.doc_tokens_host, 0);
    cr_assert_eq(g.stats.doc_tokens_computed, doc_tokens(&a));
    la_test_gen_free(&g);
    ask(x, &b, NULL, "tenant-b", &g), la_test_gen_free(&g);
    ask(x, &a, NULL, NULL, &g);
    cr_assert_eq(g.stats.doc_tokens_host, 0);
    cr_assert_eq(g.stats.doc_tokens_computed, doc_tokens(&a));
    la_test_gen_free(&g);
    ask(x, &b, NULL, NULL, &g), la_test_gen_free(&g);
    ask(x, &a, NULL, "tenant-a", &g);
    cr_assert(g.stats.doc_tokens_host > 0, "the same salt finds it");
    cr_assert_eq(g.stats.doc_tokens_computed, 0);
    la_test_gen_free(&g);
    la_engine_destroy(x);
}

/* ---- read or compute (kv_read) ---------------------------------------------------------------- */

Test(kv_store_engine, read_pays_weighs_the_read_against_the_compute) {
    /* nothing measured yet: read */
    cr_assert(la_read_pays(1e8, 0, 0, 2, 780, 0, 40e3));
    cr_assert(la_read_pays(1e8, 0, 0.74e9, 2, 780, 0, 0));
    /* the H200's 8B shape (README "Document KV store"): a 780-token document is 100 MB of KV;
     * the disk read 0.74 GB/s a thread: 135 ms; computed at 40K tokens/s: 19.5 ms */
    cr_assert(!la_read_pays(1e8, 0, 0.74e9, 2, 780, 0, 40e3));
    /* the host tier's memory speed: 10 ms, read */
    cr_assert(la_read_pays(1e8, 0, 10e9, 2, 780, 0, 40e3));
    /* the queues: 1 GB of reads ahead on 2 threads (0.81 s) against 100K tokens to compute
     * ahead (2.5 s), then against 10K (0.27 s) */
    cr_assert(la_read_pays(1e8, 1e9, 0.74e9, 2, 780, 100e3, 40e3));
    cr_assert(!la_read_pays(1e8, 1e9, 0.74e9, 2, 780, 10e3, 40e3));
    /* the margin: a read up to LA_READ_CHOICE_MARGIN x the compute time is still a read */
    double t_compute = 1000.0 / 10e3; /* 1000 tokens at 10K tokens/s: 0.1 s */
    double at_margin = LA_READ_CHOICE_MARGIN * t_compute * 1e9; /* bytes read at 1 GB/s, 1 thread */
    cr_assert(la_read_pays(at_margin * 0.9, 0, 1e9, 1, 1000, 0, 10e3));
    cr_assert(!la_read_pays(at_margin * 1.01, 0, 1e9, 1, 1000, 0, 10e3));
    /* more I/O threads share the reads queued ahead, not one record's own read */
    cr_assert(!la_read_pays(at_margin * 1.01, 0, 1e9, 8, 1000, 0, 10e3));
    cr_assert(!la_read_pays(at_margin * 0.5, at_margin, 1e9, 1, 1000, 0, 10e3));
    cr_assert(la_read_pays(at_margin * 0.5, at_margin, 1e9, 2, 1000, 0, 10e3));
}

/* The prefill rate: the slope of ms = a + b x rows over the steps, not one step's rows / ms. */
Test(kv_store_engine, step_fit_finds_what_a_row_adds_to_a_step) {
    la_step_fit f = {0};
    cr_assert_eq(la_step_fit_tokens_per_s(&f), 0);
    la_step_fit_add(&f, 1, 5.03); /* decode steps: 5 ms of weights and launches, 0.03 the row */
    cr_assert_eq(la_step_fit_tokens_per_s(&f), 0, "one step: no slope");
    for (int i = 0; i < 20; i++) la_step_fit_add(&f, 1, 5.03);
    cr_assert_eq(la_step_fit_tokens_per_s(&f), 0, "steps of one size: no slope");
    /* a = 5 ms, b = 0.03 ms a row (33.3K tokens/s); one step's rows / ms would say 29K at 1000 */
    for (int i = 0; i < 30; i++) {
        la_step_fit_add(&f, 50, 5.0 + 0.03 * 50);
        la_step_fit_add(&f, 1000, 5.0 + 0.03 * 1000);
        la_step_fit_add(&f, 1, 5.0 + 0.03);
    }
    cr_assert_float_eq(la_step_fit_tokens_per_s(&f), 1000.0 / 0.03, 1e-6 * 1000.0 / 0.03);
    /* the old steps fade: the device got twice as fast per row */
    for (int i = 0; i < 400; i++) {
        la_step_fit_add(&f, 1, 5.0 + 0.015);
        la_step_fit_add(&f, 1000, 5.0 + 0.015 * 1000);
    }
    cr_assert_float_eq(la_step_fit_tokens_per_s(&f), 1000.0 / 0.015, 1e-3 * 1000.0 / 0.015);
    la_step_fit_add(&f, 0, 1.0), la_step_fit_add(&f, 10, 0), la_step_fit_add(&f, 10, -1); /* ignored */
    cr_assert_float_eq(la_step_fit_tokens_per_s(&f), 1000.0 / 0.015, 1e-3 * 1000.0 / 0.015);
    la_step_fit g = {0}; /* bigger steps that are no slower: no positive slope, unknown */
    for (int i = 0; i < 10; i++) la_step_fit_add(&g, 1, 9.0), la_step_fit_add(&g, 500, 4.0);
    cr_assert_eq(la_step_fit_tokens_per_s(&g), 0);
}

static void make_old(const char *path, void *user) {
    (void)user;
    struct timespec t[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    cr_assert_eq(utimensat(AT_FDCWD, path, t, 0), 0, "%s", path);
}

static void count_recent(const char *path, void *user) {
    struct stat st;
    if (stat(path, &st) == 0 && st.st_mtime > time(NULL) - 600) ++*(int *)user;
}

/* Under auto with a disk tier the engine times its steps and fits a prefill rate from them
 * (unpinned: this machine's own steps; documents computed until the fit has a slope, at most
 * eight requests); under always it does not time them. */
Test(kv_store_engine, auto_fits_a_prefill_rate_from_the_engines_steps) {
    char *dir = la_test_tmpdir();
    for (int pass = 0; pass < 2; pass++) {
        la_engine *z = make((eng_opts){.kv_dir = dir, .read = pass ? LA_KV_READ_ALWAYS : LA_KV_READ_AUTO});
        double rate = 0;
        for (int i = 0; i < 8 && rate == 0; i++) {
            docset d;
            make_docs(&d, 100 + 10 * (uint64_t)pass + (uint64_t)i, 4);
            la_test_gen g;
            ask(z, &d, NULL, NULL, &g);
            la_test_gen_free(&g);
            rate = store_stats(z).prefill_tokens_per_s;
            if (pass) break;
        }
        if (pass == 0) cr_assert(rate > 0, "no prefill rate after eight requests of new documents");
        else cr_assert_eq(rate, 0, "always: the steps are not timed");
        la_engine_destroy(z);
    }
    la_test_rm_tree(dir);
}

/* A restart under auto that only reads (its own steps are 6-token questions and decode rows:
 * no slope to fit) computes one document in LEARN_EVERY (8) of those it could read once the
 * disk's rate is known, and so learns a prefill rate; the answers are bitwise a computing
 * process's. */
Test(kv_store_engine, auto_learns_the_prefill_rate_in_a_process_that_only_reads) {
    char *dir = la_test_tmpdir();
    enum { N_SETS = 5 };
    docset d[N_SETS];
    la_test_gen ref[N_SETS];
    la_engine *x = make((eng_opts){.kv_dir = dir});
    for (int i = 0; i < N_SETS; i++) {
        make_docs(&d[i], 40 + (uint64_t)i, 4);
        ask(x, &d[i], NULL, NULL, &ref[i]);
    }
    la_engine_store_flush(x);
    la_engine_destroy(x);
    la_engine *z = make((eng_opts){.kv_dir = dir, .read = LA_KV_READ_AUTO});
    int64_t read = 0, computed = 0;
    for (int i = 0; i < N_SETS; i++) {
        la_test_gen g;
        ask(z, &d[i], NULL, NULL, &g);
        read += g.stats.doc_tokens_disk;
        computed += g.stats.doc_tokens_computed;
        assert_bitwise(&g, &ref[i], "read or computed");
        la_test_gen_free(&g), la_test_gen_free(&ref[i]);
    }
    la_engine_store_stats st = store_stats(z);
    cr_assert(read > 0, "nothing read");
    cr_assert(st.reads_skipped[LA_KV_TIER_KIND_DISK] >= 1 && computed > 0,
              "no document computed to learn the prefill rate (%lld skipped)",
              (long long)st.reads_skipped[LA_KV_TIER_KIND_DISK]);
    cr_assert(st.prefill_tokens_per_s > 0, "no prefill rate learned");
    la_engine_destroy(z);
    la_test_rm_tree(dir);
}

/* A restart on a disk tier whose reads take a second each (LA_KV_DISK_READ_DELAY_MS) and a
 * prefill rate pinned at 2000 tokens/s (LA_KV_PREFILL_TOKENS_PER_S: the choice does not hang
 * on this machine's timing; la_step_fit has its own test): the first documents it finds are
 * read (the disk's rate is not known yet), later ones are computed (auto: ~1 s a read
 * against < 0.3 s for all four) and read again with kv_read always; the answers are bitwise
 * those of a process that computed everything. */
Test(kv_store_engine, a_disk_slower_than_computing_is_computed_instead) {
    char *dir = la_test_tmpdir();
    docset a, b, c[2]; /* c[pass]: documents no disk holds yet (each pass writes its own through) */
    make_docs(&a, 11, 4);
    make_docs(&b, 12, 4);
    make_docs(&c[0], 13, 4);
    make_docs(&c[1], 14, 4);
    la_engine *y = make((eng_opts){0});
    la_test_gen yc[2], ya, yb;
    ask(y, &c[0], k_order1, NULL, &yc[0]);
    ask(y, &c[1], k_order1, NULL, &yc[1]);
    ask(y, &a, k_order2, NULL, &ya);
    ask(y, &b, k_order2, NULL, &yb);
    la_engine_destroy(y);
    la_engine *x = make((eng_opts){.kv_dir = dir});
    la_test_gen g;
    ask(x, &a, k_order1, NULL, &g), la_test_gen_free(&g);
    ask(x, &b, k_order1, NULL, &g), la_test_gen_free(&g);
    la_engine_store_flush(x);
    la_engine_destroy(x);

    cr_assert_eq(setenv("LA_KV_DISK_READ_DELAY_MS", "1000", 1), 0);
    cr_assert_eq(setenv("LA_KV_PREFILL_TOKENS_PER_S", "2000", 1), 0);
    for (int pass = 0; pass < 2; pass++) {
        la_kv_read policy = pass == 0 ? LA_KV_READ_AUTO : LA_KV_READ_ALWAYS;
        la_engine *z = make((eng_opts){.kv_dir = dir, .read = policy});
        la_test_gen zc, za, zb;
        ask(z, &c[pass], k_order1, NULL, &zc); /* computed (on no disk): the steps fit the prefill rate */
        ask(z, &a, k_order2, NULL, &za); /* the disk's rate is not known yet: read */
        la_engine_store_stats st = store_stats(z);
        cr_assert_eq(st.prefill_tokens_per_s, 2000, "the pinned rate");
        cr_assert_eq(za.stats.doc_tokens_disk, doc_tokens(&a), "a: read from disk");
        cr_assert(st.read_bytes_per_s[LA_KV_TIER_KIND_DISK] > 0);
        la_engine_store_flush(z); /* c's write-throughs are on disk */
        each_record(dir, make_old, NULL); /* then b's records are the only recently used ones */
        ask(z, &b, k_order2, NULL, &zb);
        st = store_stats(z);
        int recent = 0;
        each_record(dir, count_recent, &recent);
        cr_assert_eq(recent, 4, "b's four records used (read or skipped): %d recent", recent);
        if (policy == LA_KV_READ_AUTO) { /* ~0.5 s a record against milliseconds of compute */
            cr_assert_eq(zb.stats.doc_tokens_computed, doc_tokens(&b), "b: computed, %lld read",
                         (long long)zb.stats.doc_tokens_disk);
            cr_assert_eq(st.reads_skipped[LA_KV_TIER_KIND_DISK], 4);
            cr_assert_eq(st.tier[LA_KV_TIER_KIND_DISK].hits, 4);
        } else {
            cr_assert_eq(zb.stats.doc_tokens_disk, doc_tokens(&b), "b: read (always)");
            cr_assert_eq(st.reads_skipped[LA_KV_TIER_KIND_DISK], 0);
            cr_assert_eq(st.tier[LA_KV_TIER_KIND_DISK].hits, 8);
        }
        assert_bitwise(&zc, &yc[pass], "computed");
        assert_bitwise(&za, &ya, "read from the slow disk");
        assert_bitwise(&zb, &yb, policy == LA_KV_READ_AUTO ? "computed instead of read" : "read (always)");
        la_test_gen_free(&zc), la_test_gen_free(&za), la_test_gen_free(&zb);
        la_engine_destroy(z);
    }
    unsetenv("LA_KV_DISK_READ_DELAY_MS");
    unsetenv("LA_KV_PREFILL_TOKENS_PER_S");
    la_test_gen_free(&yc[0]), la_test_gen_free(&yc[1]), la_test_gen_free(&ya), la_test_gen_free(&yb);
    la_test_rm_tree(dir);
}

/* doc_context preamble after a restart: document 0 is read from a disk whose reads take
 * 300 ms (LA_KV_DISK_READ_DELAY_MS) while the documents after it, on no disk, are computed
 * after it: their jobs wait until document 0's blocks are ready (computed over the blocks
 * still being read they would attend zeros or another document's K/V). The answers are
 * bitwise those of a process that computed everything. */
Test(kv_store_engine, documents_after_a_preamble_read_from_disk_wait_for_it) {
    char *dir = la_test_tmpdir();
    docset a, b; /* one document 0, two sets of documents after it */
    make_docs(&a, 21, 4);
    make_docs(&b, 22, 4);
    b.len[0] = a.len[0];
    memcpy(b.ids[0], a.ids[0], sizeof a.ids[0]);
    g_doc_context = LA_DOC_CONTEXT_PREAMBLE;
    la_engine *y = make((eng_opts){0});
    la_test_gen ref;
    ask(y, &b, NULL, NULL, &ref);
    la_engine_destroy(y);
    la_engine *x = make((eng_opts){.kv_dir = dir});
    la_test_gen g;
    ask(x, &a, NULL, NULL, &g), la_test_gen_free(&g); /* document 0 and a's, keyed by it, on disk */
    la_engine_store_flush(x);
    la_engine_destroy(x);

    cr_assert_eq(setenv("LA_KV_DISK_READ_DELAY_MS", "300", 1), 0);
    la_engine *z = make((eng_opts){.kv_dir = dir, .read = LA_KV_READ_ALWAYS});
    ask(z, &b, NULL, NULL, &g);
    unsetenv("LA_KV_DISK_READ_DELAY_MS");
    cr_assert_eq(g.stats.doc_tokens_disk, b.len[0], "document 0 read from disk");
    cr_assert_eq(g.stats.doc_tokens_computed, doc_tokens(&b) - b.len[0], "the others computed after it");
    assert_bitwise(&g, &ref, "computed after a document 0 read from a slow disk");
    la_test_gen_free(&g), la_test_gen_free(&ref);
    la_engine_destroy(z);
    g_doc_context = LA_DOC_CONTEXT_COUNT;
    la_test_rm_tree(dir);
}
