/* The KV store's copies on the GPU (kv_export / kv_import on the copy stream) and the store
 * through the engine on the GPU:
 *   - blocks exported to pinned host memory and imported into other blocks read back
 *     bit-equal, slot by slot, and host records have the layout record.h describes;
 *   - an export sees the writes queued before it and none queued after it (a block reused
 *     at once keeps its old content in the record);
 *   - through the engine (tiny checkpoints, bf16 on the GPU): a pool smaller than the
 *     working set with a host tier, and a restart on a disk tier, give greedy tokens and
 *     logits equal to the same requests served from a large pool (the same bytes).
 * Without a GPU every test prints "skipped: no GPU" and passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#ifdef LA_HAVE_CUDA
#include "backend/cuda/cuda_hooks.h"
#endif
#include "base/dtype.h"
#include "common/engine_util.h"
#include "common/test_util.h"
#include "engine/backend_model.h"
#include "engine/sampling.h"
#include "lazyattn/lazyattn.h"
#include "model/config.h"
#include "model/weights.h"

#ifdef LA_HAVE_CUDA
static la_backend *gpu_tiny(int64_t n_blocks) {
    la_model_config cfg;
    la_weights *w;
    la_test_load_fixture_model("tiny-f32-tied", &cfg, &w);
    la_backend *be = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CUDA, 0, &be, &err), err);
    LA_CHECK_OK(la_backend_load_model(be, &cfg, w, &err), err);
    LA_CHECK_OK(be->ops->kv_alloc(be, n_blocks, 16, &err), err);
    la_weights_destroy(w);
    return be;
}

static void wait_ticket(la_backend *be, uint64_t t) {
    bool done = false;
    la_err err = {0};
    LA_CHECK_OK(be->ops->kv_copy_poll(be, t, true, &done, &err), err);
    cr_assert(done);
}
#endif

Test(cuda_kv_store, export_import_round_trips_bit_equal) {
    if (!la_test_have_gpu()) return;
#ifdef LA_HAVE_CUDA
    la_backend *be = gpu_tiny(32);
    la_err err = {0};
    LA_CHECK_OK(la_cuda_kv_fill_random(be, 7, &err), err);
    const la_backend_shape *m = &be->shape;
    size_t bytes = (size_t)be->ops->kv_block_bytes(be, 16);
    cr_assert_eq(be->kv_dtype, LA_DTYPE_BF16);
    const int32_t src[3] = {3, 7, 1}, dst[3] = {10, 11, 12};
    void *host[3];
    for (int i = 0; i < 3; i++) cr_assert_not_null(host[i] = be->ops->host_alloc(be, bytes));
    uint64_t t;
    LA_CHECK_OK(be->ops->kv_export(be, src, 3, host, &t, &err), err);
    wait_ticket(be, t);
    /* the record layout: K of every layer, then V; one layer's block [n_kv][B][hd] */
    int32_t kvd = m->n_kv_heads * m->head_dim;
    float *k = malloc(sizeof(float) * (size_t)kvd), *v = malloc(sizeof(float) * (size_t)kvd);
    for (int32_t l = 0; l < m->n_layers; l++)
        for (int32_t s = 0; s < 16; s += 5) {
            LA_CHECK_OK(be->ops->kv_read_slot(be, l, (int64_t)src[1] * 16 + s, k, v, &err), err);
            const uint16_t *hk = (const uint16_t *)host[1] + (size_t)l * (size_t)kvd * 16;
            const uint16_t *hv = (const uint16_t *)host[1] + (size_t)(m->n_layers + l) * (size_t)kvd * 16;
            for (int32_t h = 0; h < m->n_kv_heads; h++)
                for (int32_t d = 0; d < m->head_dim; d++) {
                    size_t at = ((size_t)h * 16 + (size_t)s) * (size_t)m->head_dim + (size_t)d;
                    cr_assert_eq(la_bf16_to_f32(hk[at]), k[h * m->head_dim + d], "K layer %d slot %d", l, s);
                    cr_assert_eq(la_bf16_to_f32(hv[at]), v[h * m->head_dim + d], "V layer %d slot %d", l, s);
                }
        }
    LA_CHECK_OK(be->ops->kv_import(be, dst, 3, (const void *const *)host, &t, &err), err);
    wait_ticket(be, t);
    float *k2 = malloc(sizeof(float) * (size_t)kvd), *v2 = malloc(sizeof(float) * (size_t)kvd);
    for (int i = 0; i < 3; i++)
        for (int32_t l = 0; l < m->n_layers; l++)
            for (int32_t s = 0; s < 16; s++) {
                LA_CHECK_OK(be->ops->kv_read_slot(be, l, (int64_t)src[i] * 16 + s, k, v, &err), err);
                LA_CHECK_OK(be->ops->kv_read_slot(be, l, (int64_t)dst[i] * 16 + s, k2, v2, &err), err);
                cr_assert(!memcmp(k, k2, sizeof(float) * (size_t)kvd) && !memcmp(v, v2, sizeof(float) * (size_t)kvd),
                          "block %d -> %d layer %d slot %d", src[i], dst[i], l, s);
            }
    cr_assert_eq(be->ops->kv_copy_poll(be, 12345, false, &(bool){0}, &err), LA_ERR_INVALID_ARG);
    int32_t bad = 32;
    cr_assert_eq(be->ops->kv_export(be, &bad, 1, host, &t, &err), LA_ERR_INVALID_ARG);
    for (int i = 0; i < 3; i++) be->ops->host_free(be, host[i]);
    free(k), free(v), free(k2), free(v2);
    la_backend_destroy(be);
#endif
}

Test(cuda_kv_store, an_export_keeps_the_content_a_later_write_replaces) {
    if (!la_test_have_gpu()) return;
#ifdef LA_HAVE_CUDA
    la_backend *be = gpu_tiny(8);
    la_err err = {0};
    LA_CHECK_OK(la_cuda_kv_fill_random(be, 9, &err), err);
    size_t bytes = (size_t)be->ops->kv_block_bytes(be, 16);
    void *before = be->ops->host_alloc(be, bytes), *after = be->ops->host_alloc(be, bytes);
    const int32_t blk = 2;
    uint64_t t1, t2;
    LA_CHECK_OK(be->ops->kv_export(be, &blk, 1, &before, &t1, &err), err);
    /* overwrite block 2 right away (a new owner's prefill) with other random content */
    LA_CHECK_OK(la_cuda_kv_fill_random(be, 10, &err), err);
    LA_CHECK_OK(be->ops->kv_export(be, &blk, 1, &after, &t2, &err), err);
    wait_ticket(be, t2);
    wait_ticket(be, t1);
    cr_assert(memcmp(before, after, bytes) != 0, "the second export sees the new content");
    /* the first export holds seed 9's content: import it and compare with a fresh fill */
    LA_CHECK_OK(la_cuda_kv_fill_random(be, 9, &err), err);
    void *again = be->ops->host_alloc(be, bytes);
    LA_CHECK_OK(be->ops->kv_export(be, &blk, 1, &again, &t1, &err), err);
    wait_ticket(be, t1);
    cr_assert(!memcmp(before, again, bytes), "the first export kept the content queued before it");
    be->ops->host_free(be, before), be->ops->host_free(be, after), be->ops->host_free(be, again);
    la_backend_destroy(be);
#endif
}

/* ---- through the engine ------------------------------------------------------------------------ */

static char g_model[512];

static la_engine *gpu_engine(int64_t kv_blocks, int64_t host_bytes, const char *kv_dir) {
    snprintf(g_model, sizeof g_model, "%s/tests/fixtures/models/tiny-f32-tied", LA_SOURCE_DIR);
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = g_model;
    o.device = LA_DEVICE_CUDA;
    o.kv_blocks = kv_blocks;
    o.host_kv_bytes = host_bytes;
    o.kv_dir = kv_dir;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    return e;
}

static void ask(la_engine *e, const int32_t (*ids)[96], const int32_t *len, const int32_t *order, int32_t n,
                la_test_gen *g) {
    static const int32_t q[5] = {5, 17, 42, 9, 100};
    la_segment segs[8];
    for (int32_t i = 0; i < n; i++) segs[i] = (la_segment){.ids = ids[order[i]], .n_ids = len[order[i]]};
    la_request_params p;
    la_request_params_init(&p);
    p.docs = segs;
    p.n_docs = n;
    p.prompt = (la_segment){.ids = q, .n_ids = 5};
    p.add_special = false;
    p.return_logits = true;
    p.sampling.max_tokens = 5;
    p.sampling.ignore_eos = true;
    la_test_generate(e, &p, g);
}

Test(cuda_kv_store, host_and_disk_tiers_through_the_engine_equal_the_pool) {
    if (!la_test_have_gpu()) return;
    la_rng rng;
    la_rng_seed(&rng, 3);
    int32_t ids[8][96], len[8];
    for (int32_t d = 0; d < 8; d++) {
        len[d] = 30 + (int32_t)(la_rng_next(&rng) % 60);
        for (int32_t t = 0; t < len[d]; t++) ids[d][t] = (int32_t)(la_rng_next(&rng) % 500);
    }
    const int32_t a1[4] = {0, 1, 2, 3}, b1[4] = {4, 5, 6, 7}, a2[4] = {3, 1, 0, 2};
    la_engine *y = gpu_engine(4096, 0, NULL);
    la_test_gen ya, yb, yc;
    ask(y, ids, len, a1, 4, &ya);
    ask(y, ids, len, b1, 4, &yb);
    ask(y, ids, len, a2, 4, &yc);
    la_engine_destroy(y);
    char *dir = la_test_tmpdir();
    la_engine *x = gpu_engine(30, 16 << 20, dir); /* 30 blocks: b's documents evict a's */
    la_test_gen xa, xb, xc;
    ask(x, ids, len, a1, 4, &xa);
    ask(x, ids, len, b1, 4, &xb);
    ask(x, ids, len, a2, 4, &xc);
    cr_assert(xc.stats.doc_tokens_host > 0, "host-tier hits");
    cr_assert_eq(xc.stats.doc_tokens_computed, 0);
    la_engine_store_flush(x);
    la_engine_destroy(x);
    la_engine *z = gpu_engine(4096, 0, dir); /* a restart on the disk tier */
    la_test_gen zc;
    ask(z, ids, len, a2, 4, &zc);
    cr_assert(zc.stats.doc_tokens_disk > 0 && zc.stats.doc_tokens_computed == 0);
    la_engine_destroy(z);
    const la_test_gen *got[2] = {&xc, &zc};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(got[k]->n_tokens, yc.n_tokens);
        for (int32_t i = 0; i < yc.n_tokens; i++) cr_assert_eq(got[k]->tokens[i], yc.tokens[i], "tier %d token %d", k, i);
        /* the same KV bytes in the same step shapes: the same logits up to how a kernel
         * schedule may differ (a wrong or shifted document moves them by O(1)) */
        for (int32_t i = 0; i < yc.n_tokens; i++) {
            const float *r = yc.logits + (size_t)i * yc.n_vocab, *g = got[k]->logits + (size_t)i * yc.n_vocab;
            double big = 1, d = la_test_max_abs_diff(g, r, (size_t)yc.n_vocab, NULL);
            for (int32_t c = 0; c < yc.n_vocab; c++) big = fmax(big, fabs((double)r[c]));
            cr_assert(d <= 1e-3 * big, "tier %d step %d: logits differ by %.3g", k, i, d);
        }
    }
    la_test_gen_free(&ya), la_test_gen_free(&yb), la_test_gen_free(&yc);
    la_test_gen_free(&xa), la_test_gen_free(&xb), la_test_gen_free(&xc), la_test_gen_free(&zc);
    la_test_rm_tree(dir);
}
