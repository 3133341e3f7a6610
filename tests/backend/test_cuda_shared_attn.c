/* Shared-block attention (src/backend/cuda/cuda_attn_shared.c) against the per-sequence
 * kernels and the CPU backend, on random inputs: many requests sharing 1 to 8 cached
 * documents in different slots (lazy: a q_delta per request and document; mepic: keys rotated
 * at each request's slot), a prefix shared by every request (prefix caching: absolute
 * positions), mixed with unshared requests, decode rows and question rows, documents and
 * tails of block-boundary lengths, runs long enough to be cut into key ranges, at head_dim
 * 128 and 64 (Llama-3-8B's and Llama-3.2-1B's) and 24 (the mma kernel), and through the whole
 * forward pass with decode steps replayed as CUDA graphs. Every attention case runs with
 * shared-block attention off, on and auto under every attn_prefill kernel the GPU has
 * (la_test_attn_case_shared, tests/common/cuda_attn_cases.c): each within the attention tolerance (cuda_attn_cases.h) of the
 * CPU, on within SHARED_TOL (the same form) of off, and the plan's statistics say what was grouped.
 *
 * Without a GPU every test prints "skipped: no GPU" and passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda_attn_cases.h"
#include "common/test_util.h"
#ifdef LA_HAVE_CUDA
#include "engine/forward.h"
#endif

#ifndef LA_HAVE_CUDA

Test(cuda_shared_attn, skipped_without_cuda) {
    printf("skipped: no GPU (this build has no CUDA backend)\n");
}

#else

/* A document cached once, alone (the cache batch): blocks [first_block, ...), len tokens. */
typedef struct shared_doc {
    int32_t first_block, len;
} shared_doc;

/* A batch under construction: the cache batch, the query batch, the next free block. */
typedef struct shared_case {
    la_test_builder cache, q;
    int32_t B, next_block;
} shared_case;

static void case_init(shared_case *c, int32_t B) {
    la_test_builder_init(&c->cache);
    la_test_builder_init(&c->q);
    c->B = B;
    c->next_block = 1;
}

static void case_free(shared_case *c) {
    la_test_builder_free(&c->cache);
    la_test_builder_free(&c->q);
}

static int32_t blocks_of(const shared_case *c, int32_t n) { return (n + c->B - 1) / c->B; }

/* A document of len tokens cached at local positions (K rotated there, or unrotated for
 * mepic). */
static shared_doc cache_document(shared_case *c, int32_t len, bool unrotated) {
    shared_doc d = {c->next_block, len};
    la_test_cache_doc(&c->cache, c->B, d.first_block, len, unrotated);
    c->next_block += blocks_of(c, len);
    return d;
}

typedef enum view { VIEW_LAZY, VIEW_MEPIC, VIEW_PREFIX } view;

/* One request: an own preamble of pre tokens (cached, plain), the documents docs[order[i]]
 * in that order through the view (lazy: q_delta = the document's offset; mepic: keys
 * rotated at the slot; prefix: the documents at absolute positions, their keys cached
 * rotated there, so only a request with them at the same offsets shares them), then its
 * tail: n_prev cached question tokens and n_new new rows (1: a decode row). */
static void add_request(shared_case *c, const shared_doc *docs, const int *order, int n_docs, view v, int32_t pre,
                        int32_t n_prev, int32_t n_new) {
    const int32_t B = c->B, row0 = c->q.n, block0 = c->q.n_blocks;
    int32_t S = 0;
    if (pre > 0) {
        const int32_t fb = c->next_block;
        c->next_block += blocks_of(c, pre);
        for (int32_t t = 0; t < pre; t++) la_test_add_token(&c->cache, t, t, (int64_t)(fb + t / B) * B + t % B);
        for (int32_t i = 0; i * B < pre; i++) la_test_add_block(&c->q, fb + i, pre - i * B < B ? pre - i * B : B, i * B, 0, 0);
        S = pre;
    }
    for (int k = 0; k < n_docs; k++) {
        const shared_doc *d = &docs[order[k]];
        for (int32_t i = 0; i * B < d->len; i++) {
            const int32_t nv = d->len - i * B < B ? d->len - i * B : B;
            if (v == VIEW_LAZY) la_test_add_block(&c->q, d->first_block + i, nv, S + i * B, S, 0);
            else if (v == VIEW_MEPIC) la_test_add_block(&c->q, d->first_block + i, nv, S + i * B, 0, 1);
            else la_test_add_block(&c->q, d->first_block + i, nv, S + i * B, 0, 0);
        }
        S += d->len;
    }
    const int32_t tail = n_prev + n_new, fb = c->next_block;
    c->next_block += blocks_of(c, tail);
    for (int32_t t = 0; t < tail; t++) {
        const int64_t slot = (int64_t)(fb + t / B) * B + t % B;
        la_test_add_token(t < n_prev ? &c->cache : &c->q, S + t, S + t, slot);
    }
    for (int32_t i = 0; i * B < tail; i++) la_test_add_block(&c->q, fb + i, tail - i * B < B ? tail - i * B : B, S + i * B, 0, 0);
    la_test_add_seq(&c->q, row0, n_new, block0);
}

/* A prefix shared by requests: documents cached one after the other at absolute positions
 * (K rotated there), as prefix caching stores a prompt's full blocks. */
static void cache_prefix(shared_case *c, shared_doc *docs, const int32_t *lens, int n) {
    int32_t S = 0;
    for (int k = 0; k < n; k++) {
        docs[k] = (shared_doc){c->next_block, lens[k]};
        for (int32_t i = 0; i < lens[k]; i++)
            la_test_add_token(&c->cache, S + i, S + i, (int64_t)(docs[k].first_block + i / c->B) * c->B + i % c->B);
        c->next_block += blocks_of(c, lens[k]);
        S += lens[k];
    }
}

static int rand_int(int n) { return (int)(la_test_urand() * n) % n; }

static void shuffle(int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        const int j = rand_int(i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static const la_test_geometry k_hd128 = {512, 8, 2, 128, 16}; /* Llama-3-8B: 4 query heads per KV head */
static const la_test_geometry k_hd64 = {512, 8, 2, 64, 16};   /* Llama-3.2-1B's head_dim and GQA */

/* n_docs documents (lengths 16..335, some a whole number of blocks), 30 requests each with
 * a random subset in a random order and a random preamble (so every request has its own
 * q_delta per document), 6 unshared requests with their own document, decode rows. */
static void lazy_decode_many_docs(la_test_geometry g, int n_docs) {
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, g)) return;
    shared_case c;
    case_init(&c, g.B);
    shared_doc docs[8];
    for (int d = 0; d < n_docs; d++) docs[d] = cache_document(&c, 16 * (1 + rand_int(20)) + (d % 2 ? 0 : rand_int(16)), false);
    for (int r = 0; r < 36; r++) {
        if (r % 6 == 5) { /* unshared */
            const shared_doc own = cache_document(&c, 40 + rand_int(200), false);
            const int o = 0;
            add_request(&c, &own, &o, 1, VIEW_LAZY, 0, 1 + rand_int(20), 1);
            continue;
        }
        int order[8];
        for (int d = 0; d < n_docs; d++) order[d] = d;
        shuffle(order, n_docs);
        add_request(&c, docs, order, 1 + rand_int(n_docs), VIEW_LAZY, r % 3 ? rand_int(40) : 0, 1 + rand_int(30), 1);
    }
    char what[96];
    snprintf(what, sizeof what, "lazy: 36 decode rows, %d shared documents, hd %d", n_docs, g.hd);
    la_test_attn_case_shared(&p, what, &c.cache, &c.q, 0, 1, -1);
    case_free(&c);
    la_test_attn_close(&p, &s);
}

Test(cuda_shared_attn, lazy_decode_requests_sharing_1_to_8_documents_at_different_slots) {
    for (int n = 1; n <= 8; n *= 2) lazy_decode_many_docs(k_hd128, n);
}

Test(cuda_shared_attn, lazy_decode_requests_sharing_documents_hd64) {
    lazy_decode_many_docs(k_hd64, 3);
    lazy_decode_many_docs((la_test_geometry){512, 16, 2, 64, 32}, 2); /* 8 query heads per KV head, B 32 */
}

/* mepic: three documents stored unrotated, each request with all three in a rotated order
 * and some with a preamble (keys rotated at the request's slot on load). */
Test(cuda_shared_attn, mepic_decode_requests_sharing_documents_in_rotating_slots) {
    const la_test_geometry gs[2] = {k_hd128, k_hd64};
    for (int gi = 0; gi < 2; gi++) {
        la_test_pair p;
        la_test_synth s;
        if (!la_test_attn_open(&p, &s, gs[gi])) return;
        shared_case c;
        case_init(&c, gs[gi].B);
        shared_doc docs[3];
        for (int d = 0; d < 3; d++) docs[d] = cache_document(&c, 100 + rand_int(300), true);
        for (int r = 0; r < 24; r++) {
            const int order[3] = {r % 3, (r + 1) % 3, (r + 2) % 3};
            add_request(&c, docs, order, 1 + r % 3, VIEW_MEPIC, r % 4 ? 0 : 17, 10, 1);
        }
        const la_cuda_attn_shared_stats st =
            la_test_attn_case_shared(&p, gi ? "mepic: 24 decode rows, rotating slots, hd 64" : "mepic: 24 decode rows, rotating slots, hd 128",
                                     &c.cache, &c.q, 1, 3, 1);
        cr_assert(st.keys_shared > 0);
        case_free(&c);
        la_test_attn_close(&p, &s);
    }
}

/* Prefix caching: a 1000-token prompt of two documents at absolute positions shared by 40
 * decode rows (one run across both documents: shift 0 throughout), three 20-token questions
 * over it (grouped under on, their tokens' own tails causal), one 64-token question (over
 * auto's 16-row limit: it keeps its own tiles under auto) and two unshared plain decode rows. */
Test(cuda_shared_attn, prefix_shared_prompt_with_decode_rows_and_questions) {
    const la_test_geometry gs[2] = {k_hd128, k_hd64};
    for (int gi = 0; gi < 2; gi++) {
        la_test_pair p;
        la_test_synth s;
        if (!la_test_attn_open(&p, &s, gs[gi])) return;
        shared_case c;
        case_init(&c, gs[gi].B);
        shared_doc docs[2];
        const int32_t lens[2] = {600, 400};
        cache_prefix(&c, docs, lens, 2);
        const int order[2] = {0, 1};
        for (int r = 0; r < 40; r++) add_request(&c, docs, order, 2, VIEW_PREFIX, 0, 1 + rand_int(40), 1);
        for (int r = 0; r < 3; r++) add_request(&c, docs, order, 2, VIEW_PREFIX, 0, 0, 20);
        add_request(&c, docs, order, 2, VIEW_PREFIX, 0, 5, 64);
        for (int r = 0; r < 2; r++) c.next_block = la_test_plain_seq(&c.cache, &c.q, c.B, c.next_block, 299, 300);
        const la_cuda_attn_shared_stats st = la_test_attn_case_shared(
            &p, gi ? "prefix: 1000 shared tokens, decode + questions, hd 64" : "prefix: 1000 shared tokens, decode + questions, hd 128",
            &c.cache, &c.q, 0, 1, 1);
        cr_assert_eq(st.runs, 1, "the two documents of the prefix are one run (%lld runs)", (long long)st.runs);
        cr_assert_eq(st.keys_shared, 1000, "the prefix read once: %lld keys", (long long)st.keys_shared);
        case_free(&c);
        la_test_attn_close(&p, &s);
    }
}

/* Documents of 16, 32, 15, 17 and 1 tokens (whole blocks, one slot past, one short, a single
 * token) in two orders, tails ending on a block boundary (16 and 32 tokens) or just past it,
 * decode rows and 5-token questions, lazy and mepic requests side by side (separate
 * documents: mepic's are stored unrotated). */
Test(cuda_shared_attn, block_boundary_lengths) {
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, k_hd128)) return;
    shared_case c;
    case_init(&c, 16);
    const int32_t lens[5] = {16, 32, 15, 17, 1};
    shared_doc lazy[5], mepic[5];
    for (int d = 0; d < 5; d++) lazy[d] = cache_document(&c, lens[d], false);
    for (int d = 0; d < 5; d++) mepic[d] = cache_document(&c, lens[d], true);
    const int32_t tails[4] = {16, 32, 17, 1}; /* the tail's length after this step */
    for (int r = 0; r < 24; r++) {
        int order[5] = {0, 1, 2, 3, 4};
        if (r % 2) order[0] = 3, order[3] = 0;
        const int32_t n_new = r % 6 == 0 ? 5 : 1, n_prev = tails[r % 4] > n_new ? tails[r % 4] - n_new : 0;
        add_request(&c, r % 3 == 2 ? mepic : lazy, order, 5, r % 3 == 2 ? VIEW_MEPIC : VIEW_LAZY, 0, n_prev, n_new);
    }
    la_test_attn_case_shared(&p, "block-boundary documents and tails, lazy + mepic", &c.cache, &c.q, 1, 5, 0);
    case_free(&c);
    la_test_attn_close(&p, &s);
}

/* Few sharers of a long document: the grouped run is cut into key ranges (several parts per
 * row, merged by attn_combine), and many sharers: several row tiles per range. */
Test(cuda_shared_attn, long_runs_cut_into_key_ranges_and_row_tiles) {
    const la_test_geometry gs[2] = {k_hd128, {1024, 32, 8, 64, 16}}; /* the second: Llama-3.2-1B's 32 / 8 heads */
    for (int gi = 0; gi < 2; gi++) {
        la_test_pair p;
        la_test_synth s;
        if (!la_test_attn_open(&p, &s, gs[gi])) return;
        shared_case c;
        case_init(&c, 16);
        const shared_doc d = cache_document(&c, 3001, false);
        const int o = 0;
        const int n_req = gi ? 100 : 8;
        for (int r = 0; r < n_req; r++) add_request(&c, &d, &o, 1, VIEW_LAZY, r % 5 ? 7 * r % 50 : 0, 20 + r % 13, 1);
        char what[96];
        snprintf(what, sizeof what, "lazy: %d decode rows on one 3001-token document, hd %d", n_req, gs[gi].hd);
        const la_cuda_attn_shared_stats st = la_test_attn_case_shared(&p, what, &c.cache, &c.q, 0, 1, 1);
        if (gi == 0) cr_assert(st.chunks_max > 1, "8 sharers of 3001 keys: the run is cut (%lld ranges)", (long long)st.chunks_max);
        case_free(&c);
        la_test_attn_close(&p, &s);
    }
}

/* Auto groups a run of 4 or more sharers, not one of 3 (both checked against off and the CPU). */
Test(cuda_shared_attn, auto_groups_four_sharers_not_three) {
    for (int n = 3; n <= 4; n++) {
        la_test_pair p;
        la_test_synth s;
        if (!la_test_attn_open(&p, &s, k_hd128)) return;
        shared_case c;
        case_init(&c, 16);
        const shared_doc d = cache_document(&c, 500, false);
        const int o = 0;
        for (int r = 0; r < n; r++) add_request(&c, &d, &o, 1, VIEW_LAZY, 3 * r, 4, 1);
        char what[64];
        snprintf(what, sizeof what, "lazy: %d sharers of a 500-token document", n);
        la_test_attn_case_shared(&p, what, &c.cache, &c.q, 0, 1, n >= 4 ? 1 : 0);
        case_free(&c);
        la_test_attn_close(&p, &s);
    }
}

/* 700 requests on one 600-token document, each with its own 20-60-token tail and a decode
 * row (issue 24's many-sharers shape, small): auto groups the document and packs the 700
 * own tails one per decode warp (700 x 2 KV-head groups >= 8 CTAs per SM); both against
 * the CPU, and against the unpacked, ungrouped run (la_test_attn_case_shared). */
Test(cuda_shared_attn, many_sharers_own_tails_run_packed) {
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, k_hd128)) return;
    shared_case c;
    case_init(&c, 16);
    const shared_doc d = cache_document(&c, 600, false);
    const int o = 0;
    for (int r = 0; r < 700; r++) add_request(&c, &d, &o, 1, VIEW_LAZY, r % 5, 20 + rand_int(40), 1);
    la_test_attn_case_shared(&p, "lazy: 700 sharers of a 600-token document", &c.cache, &c.q, 0, 1, 1);
    cr_assert(la_test_shared_auto_packed, "auto: 700 own tails beside the grouped document ran unpacked");
    case_free(&c);
    la_test_attn_close(&p, &s);
}

/* head_dim 24 (the bundled model's kind): the grouped launch runs the mma kernel. */
Test(cuda_shared_attn, small_head_dim_runs_the_mma_kernel) {
    la_test_pair p;
    la_test_synth s;
    if (!la_test_attn_open(&p, &s, (la_test_geometry){64, 4, 1, 24, 16})) return;
    shared_case c;
    case_init(&c, 16);
    shared_doc docs[2] = {cache_document(&c, 90, false), cache_document(&c, 33, false)};
    for (int r = 0; r < 12; r++) {
        const int order[2] = {r % 2, 1 - r % 2};
        add_request(&c, docs, order, 2, VIEW_LAZY, r % 4 * 5, 3, r % 5 == 0 ? 3 : 1);
    }
    la_test_attn_case_shared(&p, "lazy: 12 requests, 2 documents, hd 24 MQA", &c.cache, &c.q, 1, 2, -1);
    case_free(&c);
    la_test_attn_close(&p, &s);
}

/* ============================================================ through la_forward ===== */

#define FWD_DOC 150    /* the shared document's tokens */
#define FWD_REQ 10     /* requests */
#define FWD_STEPS 8    /* step 0: each request's 3-token question; then decode steps */
/* Logits through the whole forward pass (2 layers, bf16 weights): the GPU against the CPU
 * within the forward tests' bound (LOGIT_TOL_REL of test_cuda_forward.c: 8e-2 of 1 + the
 * largest |logit|), two GPU runs (shared-block attention off against on) within half of it. */
#define FWD_TOL_REL 8e-2

/* Step k's batch: every request's rows (k = 0: its 3 question tokens at FWD_DOC..; else one
 * decode token), each attending the document (blocks 1.., positions 0..: a shared prefix)
 * and its own tail (blocks from 20 + 4 r); a logit row per request. Token ids fixed by (k, r). */
static la_batch fwd_step(la_test_builder *b, int k) {
    b->n = b->n_seqs = b->n_blocks = 0;
    const int32_t B = 16, doc_blocks = (FWD_DOC + B - 1) / B;
    for (int r = 0; r < FWD_REQ; r++) {
        const int32_t row0 = b->n, block0 = b->n_blocks, fb = 20 + 4 * r;
        const int32_t t0 = k == 0 ? 0 : 2 + k, n_new = k == 0 ? 3 : 1, tail = t0 + n_new;
        for (int32_t i = 0; i < doc_blocks; i++)
            la_test_add_block(b, 1 + i, FWD_DOC - i * B < B ? FWD_DOC - i * B : B, i * B, 0, 0);
        for (int32_t i = 0; i * B < tail; i++)
            la_test_add_block(b, fb + i, tail - i * B < B ? tail - i * B : B, FWD_DOC + i * B, 0, 0);
        for (int32_t t = t0; t < tail; t++) {
            la_test_add_token(b, FWD_DOC + t, FWD_DOC + t, (int64_t)(fb + t / B) * B + t % B);
            b->tokens[b->n - 1] = (7 * k + 13 * r + 3 * t) % 97 + 1;
        }
        la_test_add_seq(b, row0, n_new, block0);
        b->rows[r] = b->n - 1;
    }
    la_batch batch = la_test_builder_batch(b);
    batch.n_logit_rows = FWD_REQ;
    return batch;
}

/* The document encoded once (one prefill of its tokens, no logits). */
static void fwd_encode_doc(la_backend *be) {
    la_test_builder b;
    la_test_builder_init(&b);
    for (int32_t t = 0; t < FWD_DOC; t++) {
        la_test_add_token(&b, t, t, 16 + t); /* blocks 1.. */
        b.tokens[t] = (5 * t) % 97 + 1;
    }
    for (int32_t i = 0; i * 16 < FWD_DOC; i++) la_test_add_block(&b, 1 + i, FWD_DOC - i * 16 < 16 ? FWD_DOC - i * 16 : 16, i * 16, 0, 0);
    la_test_add_seq(&b, 0, FWD_DOC, 0);
    la_batch batch = la_test_builder_batch(&b);
    la_err err = {0};
    LA_CHECK_OK(la_forward(be, &batch, NULL, &err), err);
    la_test_builder_free(&b);
}

/* The FWD_STEPS steps on be, their logits into out [FWD_STEPS][FWD_REQ][vocab]. */
static void fwd_run(la_backend *be, float *out, int32_t vocab) {
    la_test_builder b;
    la_test_builder_init(&b);
    la_err err = {0};
    for (int k = 0; k < FWD_STEPS; k++) {
        la_batch batch = fwd_step(&b, k);
        LA_CHECK_OK(la_forward(be, &batch, out + (size_t)k * FWD_REQ * vocab, &err), err);
    }
    la_test_builder_free(&b);
}

/* Ten requests on one prefix-cached document through la_forward: a grouped question step,
 * then decode steps recorded and replayed as CUDA graphs. Graphs on equal graphs off bit for
 * bit (shared-block attention on; the replays happened), on equals the CPU and shared off. */
Test(cuda_shared_attn, grouped_decode_steps_replay_as_graphs_and_match_the_cpu) {
    la_test_synth s;
    la_test_synth_init(&s, 256, 8, 2, 128, 256, 100, 2);
    la_test_pair p;
    if (!la_test_pair_open(&p, &s, 128, 16)) return;
    la_err err = {0};
    const int32_t V = s.cfg.vocab_size;
    const size_t n = (size_t)FWD_STEPS * FWD_REQ * V;
    float *cpu = malloc(n * sizeof(float)), *gpu[3];
    for (int i = 0; i < 2; i++) fwd_encode_doc(p.be[i]);
    fwd_run(p.be[0], cpu, V);
    la_backend *g = p.be[1];
    const struct {
        int32_t mode;
        bool graphs;
    } runs[3] = {{LA_CUDA_ATTN_SHARED_ON, false}, {LA_CUDA_ATTN_SHARED_ON, true}, {LA_CUDA_ATTN_SHARED_OFF, true}};
    for (int i = 0; i < 3; i++) {
        gpu[i] = malloc(n * sizeof(float));
        LA_CHECK_OK(la_cuda_attn_shared_set(g, runs[i].mode, &err), err);
        la_cuda_graphs_enable(g, runs[i].graphs);
        la_cuda_graph_stats g0, g1;
        la_cuda_graph_stats_get(g, &g0);
        la_cuda_attn_shared_stats st;
        la_cuda_attn_shared_stats_get(g, &st);
        const int64_t grouped0 = st.steps_grouped;
        fwd_run(g, gpu[i], V);
        la_cuda_graph_stats_get(g, &g1);
        la_cuda_attn_shared_stats_get(g, &st);
        printf("forward run %d (shared %s, graphs %s): %lld steps grouped, %lld replayed\n", i,
               runs[i].mode ? "on" : "off", runs[i].graphs ? "on" : "off", (long long)(st.steps_grouped - grouped0),
               (long long)(g1.steps_replayed - g0.steps_replayed));
        if (runs[i].mode == LA_CUDA_ATTN_SHARED_ON)
            cr_assert_eq(st.steps_grouped - grouped0, FWD_STEPS, "every step grouped (%lld)",
                         (long long)(st.steps_grouped - grouped0));
        if (runs[i].graphs)
            cr_assert(g1.steps_replayed - g0.steps_replayed >= FWD_STEPS - 4, "decode steps replayed: %lld",
                      (long long)(g1.steps_replayed - g0.steps_replayed));
    }
    la_cuda_graphs_enable(g, false);
    size_t at = n;
    for (size_t i = 0; i < n && at == n; i++)
        if (memcmp(&gpu[0][i], &gpu[1][i], sizeof(float)) != 0) at = i;
    cr_assert(at == n, "graph replays of grouped steps differ from eager at logit %zu (%.6f vs %.6f)", at,
              at < n ? gpu[1][at] : 0.f, at < n ? gpu[0][at] : 0.f);
    for (int k = 0; k < FWD_STEPS; k++)
        for (int r = 0; r < FWD_REQ; r++) {
            const size_t o = ((size_t)k * FWD_REQ + r) * V;
            double m = 0;
            for (int32_t i = 0; i < V; i++) m = fmax(m, fabs((double)cpu[o + i]));
            const double tol = FWD_TOL_REL * (1.0 + m);
            size_t a, b2;
            const double d_cpu = la_test_max_abs_diff(gpu[0] + o, cpu + o, (size_t)V, &a);
            const double d_off = la_test_max_abs_diff(gpu[0] + o, gpu[2] + o, (size_t)V, &b2);
            if (r == 0) printf("step %d: |gpu - cpu| %.3g, |shared on - off| %.3g, tolerance %.3g\n", k, d_cpu, d_off, tol);
            cr_assert(d_cpu <= tol, "step %d request %d: GPU logit %zu off the CPU by %.4g > %.4g", k, r, a, d_cpu, tol);
            cr_assert(d_off <= tol / 2, "step %d request %d: shared on and off differ at logit %zu by %.4g > %.4g", k, r,
                      b2, d_off, tol / 2);
        }
    LA_CHECK_OK(la_cuda_attn_shared_set(g, LA_CUDA_ATTN_SHARED_AUTO, &err), err);
    for (int i = 0; i < 3; i++) free(gpu[i]);
    free(cpu);
    la_test_pair_close(&p);
    la_test_synth_free(&s);
}

/* LA_ATTN_SHARED=0|1|auto at create, la_cuda_attn_shared_set afterwards; another value is
 * LA_ERR_INVALID_ARG and changes nothing. */
Test(cuda_shared_attn, mode_switch_and_its_errors) {
    if (!la_test_have_gpu()) return;
    const struct {
        const char *value;
        int32_t mode;
    } cases[] = {{"0", LA_CUDA_ATTN_SHARED_OFF}, {"1", LA_CUDA_ATTN_SHARED_ON}, {"auto", LA_CUDA_ATTN_SHARED_AUTO},
                 {NULL, LA_CUDA_ATTN_SHARED_AUTO}};
    la_err err = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].value) setenv("LA_ATTN_SHARED", cases[i].value, 1);
        else unsetenv("LA_ATTN_SHARED");
        la_backend *be = NULL;
        LA_CHECK_OK(la_backend_create(LA_DEVICE_CUDA, 0, &be, &err), err);
        cr_assert_eq(la_cuda_attn_shared(be), cases[i].mode, "LA_ATTN_SHARED=%s", cases[i].value ? cases[i].value : "(unset)");
        cr_assert_eq(la_cuda_attn_shared_set(be, 3, &err), LA_ERR_INVALID_ARG);
        cr_assert_eq(la_cuda_attn_shared(be), cases[i].mode, "a refused mode changed nothing");
        LA_CHECK_OK(la_cuda_attn_shared_set(be, LA_CUDA_ATTN_SHARED_ON, &err), err);
        cr_assert_eq(la_cuda_attn_shared(be), LA_CUDA_ATTN_SHARED_ON);
        la_backend_destroy(be);
    }
    unsetenv("LA_ATTN_SHARED");
    la_test_cuda_env_rejected("LA_ATTN_SHARED", "yes");
    /* the packed decode switch: LA_ATTN_DECODE_PACKED=0|1|auto, la_cuda_attn_decode_packed_set */
    la_backend *be = NULL;
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CUDA, 0, &be, &err), err);
    cr_assert_eq(la_cuda_attn_decode_packed_set(be, 3, &err), LA_ERR_INVALID_ARG);
    LA_CHECK_OK(la_cuda_attn_decode_packed_set(be, LA_CUDA_DECODE_PACKED_OFF, &err), err);
    cr_assert(!la_cuda_attn_decode_packed_ran(be), "no step ran yet");
    la_backend_destroy(be);
    la_test_cuda_env_rejected("LA_ATTN_DECODE_PACKED", "yes");
}

#endif /* LA_HAVE_CUDA */
