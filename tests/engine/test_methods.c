/* The five methods against each other on the tiny f32 checkpoint (DESIGN.md §4):
 * lazy, mepic and block equal the block-ref reference; prefix equals recompute; reuse
 * counts are exact; a pool smaller than the working set changes nothing but evictions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/engine_util.h"
#include "common/test_util.h"
#include "engine/sampling.h"

/* f32 everywhere; the methods differ only in where RoPE is applied and summation order. */
#define LOGIT_TOL 1e-4
#define N_GEN 6

static char g_dir[512];

static const char *tiny_dir(void) {
    snprintf(g_dir, sizeof g_dir, "%s/tests/fixtures/models/tiny-f32-tied", LA_SOURCE_DIR);
    return g_dir;
}

typedef struct docset {
    int32_t n;
    int32_t *len;
    int32_t **ids;
} docset;

/* n documents with lengths from `lens` (or random in 1..200), random non-special ids. */
static docset make_docs(la_rng *rng, int32_t n, const int32_t *lens) {
    docset d = {n, calloc((size_t)n, sizeof(int32_t)), calloc((size_t)n, sizeof(int32_t *))};
    for (int32_t i = 0; i < n; i++) {
        d.len[i] = lens ? lens[i] : 1 + (int32_t)(la_rng_next(rng) % 200);
        d.ids[i] = malloc(sizeof(int32_t) * (size_t)d.len[i]);
        for (int32_t t = 0; t < d.len[i]; t++) d.ids[i][t] = (int32_t)(la_rng_next(rng) % 500);
    }
    return d;
}

static void free_docs(docset *d) {
    for (int32_t i = 0; i < d->n; i++) free(d->ids[i]);
    free(d->ids);
    free(d->len);
}

static void run(la_engine *e, la_method m, const docset *d, const int32_t *order,
                const int32_t *q, int32_t nq, const char *salt, la_test_gen *g) {
    la_test_generate_docs(e, m, d->ids, d->len, d->n, order, q, nq, salt, -1, -1.0f, N_GEN, g);
}

static void assert_same(const la_test_gen *a, const la_test_gen *ref, const char *what) {
    /* every request here generates N_GEN tokens with logits: never compare empty answers */
    cr_assert(ref->n_tokens == N_GEN && ref->logits, "%s: the reference has %d tokens, logits %s", what,
              ref->n_tokens, ref->logits ? "returned" : "missing");
    cr_assert(a->logits, "%s: no logits came back", what);
    cr_assert_eq(a->n_tokens, ref->n_tokens, "%s", what);
    for (int32_t i = 0; i < ref->n_tokens; i++) {
        size_t at;
        double diff = la_test_max_abs_diff(a->logits + (size_t)i * a->n_vocab,
                                           ref->logits + (size_t)i * ref->n_vocab,
                                           (size_t)a->n_vocab, &at);
        cr_assert(diff <= LOGIT_TOL, "%s: step %d logits differ by %.3g at token %zu", what, i, diff, at);
        cr_assert_eq(a->tokens[i], ref->tokens[i], "%s: greedy token %d differs", what, i);
    }
}

static void shuffle(la_rng *rng, int32_t *v, int32_t n) {
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = (int32_t)(la_rng_next(rng) % (uint64_t)(i + 1)), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

Test(methods, lazy_mepic_block_equal_block_ref_over_many_document_sets) {
    la_engine *e = la_test_engine(tiny_dir(), 2048, 16);
    la_rng rng;
    la_rng_seed(&rng, 42);
    /* fixed edge cases first, then random sets of 1..20 documents of 1..200 tokens */
    const int32_t edge_lens[][6] = {{1}, {16}, {32, 1, 15}, {17, 16, 200, 1, 48, 3}};
    const int32_t edge_n[] = {1, 1, 3, 6};
    int32_t n_sets = 4 + 6;
    for (int32_t s = 0; s < n_sets; s++) {
        int32_t n = s < 4 ? edge_n[s] : (s == 9 ? 20 : 1 + (int32_t)(la_rng_next(&rng) % 12));
        docset d = make_docs(&rng, n, s < 4 ? edge_lens[s] : NULL);
        int32_t q[7];
        for (int i = 0; i < 7; i++) q[i] = (int32_t)(la_rng_next(&rng) % 500);
        int32_t *order = malloc(sizeof(int32_t) * (size_t)n);
        for (int32_t i = 0; i < n; i++) order[i] = i;
        for (int32_t o = 0; o < 3; o++) { /* three orders of the same documents */
            if (o > 0) shuffle(&rng, order, n);
            la_test_gen ref;
            run(e, LA_METHOD_BLOCK_REF, &d, order, q, 7, NULL, &ref);
            const la_method ms[3] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK};
            for (int k = 0; k < 3; k++) {
                la_test_gen g;
                run(e, ms[k], &d, order, q, 7, NULL, &g);
                char what[128];
                snprintf(what, sizeof what, "set %d (%d docs) order %d %s (%s cache)", s, n, o,
                         la_method_name(ms[k]), o == 0 && k != 2 ? "cold" : "warm");
                assert_same(&g, &ref, what);
                if (o > 0)
                    cr_assert_eq(g.stats.doc_tokens_computed, 0, "%s: documents recomputed", what);
                la_test_gen_free(&g);
            }
            la_test_gen_free(&ref);
        }
        free(order);
        free_docs(&d);
    }
    la_err err;
    LA_CHECK_OK(la_engine_check(e, &err), err);
    la_engine_destroy(e);
}

Test(methods, prefix_equals_recompute_and_reuses_only_up_to_the_first_change) {
    la_engine *e = la_test_engine(tiny_dir(), 1024, 16);
    la_rng rng;
    la_rng_seed(&rng, 7);
    const int32_t lens[4] = {40, 16, 23, 50};
    docset d = make_docs(&rng, 4, lens);
    int32_t q[5] = {11, 12, 13, 14, 15};
    int32_t order1[4] = {0, 1, 2, 3}, order2[4] = {0, 2, 1, 3};
    la_test_gen rc, p1, p2, rc2;
    run(e, LA_METHOD_RECOMPUTE, &d, order1, q, 5, NULL, &rc);
    run(e, LA_METHOD_PREFIX, &d, order1, q, 5, NULL, &p1);
    assert_same(&p1, &rc, "prefix cold vs recompute");
    cr_assert_eq(p1.stats.prefix_tokens_reused, 0);
    run(e, LA_METHOD_PREFIX, &d, order2, q, 5, NULL, &p2);
    run(e, LA_METHOD_RECOMPUTE, &d, order2, q, 5, NULL, &rc2);
    assert_same(&p2, &rc2, "prefix warm (reordered) vs recompute");
    /* only doc 0 (40 tokens) precedes the change: 2 full blocks */
    cr_assert_eq(p2.stats.prefix_tokens_reused, 32);
    cr_assert_eq(rc2.stats.prefix_tokens_reused, 0, "recompute reuses nothing");
    la_test_gen_free(&rc);
    la_test_gen_free(&p1);
    la_test_gen_free(&p2);
    la_test_gen_free(&rc2);
    free_docs(&d);
    la_engine_destroy(e);
}

Test(methods, reordered_documents_reuse_every_document_token_under_lazy_block_mepic) {
    la_engine *e = la_test_engine(tiny_dir(), 1024, 16);
    la_rng rng;
    la_rng_seed(&rng, 9);
    const int32_t lens[5] = {33, 1, 64, 70, 2};
    docset d = make_docs(&rng, 5, lens);
    int32_t q[3] = {1, 2, 3};
    int32_t order1[5] = {0, 1, 2, 3, 4}, order2[5] = {4, 2, 0, 3, 1};
    const la_method ms[3] = {LA_METHOD_LAZY, LA_METHOD_BLOCK, LA_METHOD_MEPIC};
    for (int k = 0; k < 3; k++) {
        la_test_gen a, b;
        run(e, ms[k], &d, order1, q, 3, "salt-x", &a);
        run(e, ms[k], &d, order2, q, 3, "salt-x", &b);
        cr_assert_eq(b.stats.doc_tokens_reused, 170, "%s", la_method_name(ms[k]));
        cr_assert_eq(b.stats.doc_tokens_computed, 0, "%s", la_method_name(ms[k]));
        la_test_gen_free(&a);
        la_test_gen_free(&b);
    }
    la_test_gen c;
    run(e, LA_METHOD_LAZY, &d, order2, q, 3, "salt-y", &c);
    cr_assert_eq(c.stats.doc_tokens_reused, 0, "another tenant's salt shares nothing");
    la_test_gen_free(&c);
    free_docs(&d);
    la_engine_destroy(e);
}

Test(methods, a_pool_smaller_than_the_working_set_evicts_without_changing_outputs) {
    la_rng rng;
    la_rng_seed(&rng, 11);
    enum { N_SETS = 6 };
    docset sets[N_SETS];
    for (int s = 0; s < N_SETS; s++) sets[s] = make_docs(&rng, 4, NULL);
    int32_t q[4] = {5, 6, 7, 8};
    la_engine *big = la_test_engine(tiny_dir(), 4096, 16);
    la_engine *small = la_test_engine(tiny_dir(), 72, 16); /* holds about one set */
    for (int round = 0; round < 2; round++)
        for (int s = 0; s < N_SETS; s++) {
            la_test_gen a, b;
            run(big, LA_METHOD_LAZY, &sets[s], NULL, q, 4, NULL, &a);
            run(small, LA_METHOD_LAZY, &sets[s], NULL, q, 4, NULL, &b);
            assert_same(&b, &a, "small pool vs large pool");
            la_test_gen_free(&a);
            la_test_gen_free(&b);
            la_err err;
            LA_CHECK_OK(la_engine_check(small, &err), err);
        }
    la_engine_stats st;
    la_engine_get_stats(small, &st);
    cr_assert_gt(st.kv_evictions, 0, "the small pool must have evicted");
    cr_assert_eq(st.kv_blocks_pinned, 0, "no pins left after every request finished");
    for (int s = 0; s < N_SETS; s++) free_docs(&sets[s]);
    la_engine_destroy(big);
    la_engine_destroy(small);
}

Test(methods, concurrent_requests_sharing_a_missing_document_compute_it_once) {
    la_engine *e = la_test_engine(tiny_dir(), 1024, 16);
    la_rng rng;
    la_rng_seed(&rng, 13);
    const int32_t lens[3] = {50, 20, 9};
    docset d = make_docs(&rng, 3, lens);
    int32_t q[3] = {4, 4, 4};
    /* sequential reference */
    la_test_gen ref;
    run(e, LA_METHOD_LAZY, &d, NULL, q, 3, "seq", &ref);
    /* 8 concurrent requests, different orders, same salt (cold) */
    enum { N = 8 };
    la_test_gen g[N];
    la_segment segs[N][3];
    int32_t orders[N][3];
    for (int r = 0; r < N; r++) {
        for (int i = 0; i < 3; i++) orders[r][i] = (i + r) % 3;
        if (r % 2) {
            int32_t t = orders[r][0];
            orders[r][0] = orders[r][2];
            orders[r][2] = t;
        }
    }
    for (int r = 0; r < N; r++) {
        memset(&g[r], 0, sizeof g[r]);
        for (int i = 0; i < 3; i++)
            segs[r][i] = (la_segment){.ids = d.ids[orders[r][i]], .n_ids = d.len[orders[r][i]]};
        la_request_params rp;
        la_request_params_init(&rp);
        rp.docs = segs[r];
        rp.n_docs = 3;
        rp.prompt = (la_segment){.ids = q, .n_ids = 3};
        rp.add_special = false;
        rp.method = LA_METHOD_LAZY;
        rp.cache_salt = "conc";
        rp.return_logits = true;
        rp.sampling.max_tokens = N_GEN;
        rp.sampling.ignore_eos = true;
        rp.on_event = la_test_on_event;
        rp.user = &g[r];
        la_err err;
        LA_CHECK_OK(la_engine_submit(e, &rp, NULL, &err), err);
    }
    la_err err;
    la_engine_run(e, &err);
    int64_t computed = 0;
    int32_t n_twins = 0;
    for (int r = 0; r < N; r++) {
        cr_assert(g[r].done && g[r].finish == LA_FINISH_LENGTH);
        computed += g[r].stats.doc_tokens_computed;
        /* the same documents in the same order as an earlier request -> identical tokens */
        for (int s = 0; s < r; s++)
            if (memcmp(orders[r], orders[s], sizeof orders[r]) == 0) {
                assert_same(&g[r], &g[s], "concurrent requests in one order");
                n_twins++;
                break;
            }
    }
    cr_assert_eq(n_twins, 2, "requests 6 and 7 repeat the orders of 0 and 1");
    cr_assert_eq(computed, 79, "each missing document is computed once across all requests");
    /* request with the sequential order gives the sequential answer */
    for (int r = 0; r < N; r++)
        if (orders[r][0] == 0 && orders[r][1] == 1 && orders[r][2] == 2) assert_same(&g[r], &ref, "concurrent vs sequential");
    for (int r = 0; r < N; r++) la_test_gen_free(&g[r]);
    la_test_gen_free(&ref);
    LA_CHECK_OK(la_engine_check(e, &err), err);
    free_docs(&d);
    la_engine_destroy(e);
}

/* A document repeated inside one request (cold) is computed once and the answer is the
 * reference's (block-ref computes every occurrence in place), for each caching method. */
Test(methods, a_document_repeated_in_one_request_is_computed_once_and_answers_alike) {
    la_engine *e = la_test_engine(tiny_dir(), 1024, 16);
    la_rng rng;
    la_rng_seed(&rng, 21);
    const int32_t lens[2] = {37, 12};
    docset base = make_docs(&rng, 2, lens);
    /* documents: A, B, A */
    docset d = {3, (int32_t[]){37, 12, 37}, (int32_t *[]){base.ids[0], base.ids[1], base.ids[0]}};
    int32_t q[4] = {4, 9, 4, 9};
    la_test_gen ref;
    run(e, LA_METHOD_BLOCK_REF, &d, NULL, q, 4, "ref", &ref);
    const la_method ms[] = {LA_METHOD_LAZY, LA_METHOD_MEPIC, LA_METHOD_BLOCK};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        la_test_gen g;
        run(e, ms[i], &d, NULL, q, 4, la_method_name(ms[i]), &g); /* cold: own salt */
        assert_same(&g, &ref, la_method_name(ms[i]));
        cr_assert_eq(g.stats.doc_tokens_computed, 49, "%s: A once, B once", la_method_name(ms[i]));
        cr_assert_eq(g.stats.doc_tokens_reused, 37, "%s: the repeat of A", la_method_name(ms[i]));
        la_test_gen_free(&g);
    }
    la_test_gen_free(&ref);
    free_docs(&base);
    la_engine_destroy(e);
}

/* Random weights of the tiny shape (Llama-3's 128256-token vocabulary) with the bundled
 * model's 3072-token tokenizer: greedy ids past the tokenizer's decode to nothing (as the
 * `tokenizers` library skips ids it has no token for), the request finishes normally. */
Test(methods, ids_the_tokenizer_lacks_decode_to_nothing) {
    char tok[512];
    snprintf(tok, sizeof tok, "%s/models/rag-tiny", LA_SOURCE_DIR);
    la_engine_options o;
    la_engine_options_init(&o);
    o.random_weights = "tiny";
    o.tokenizer_dir = tok;
    o.n_threads = 2;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    la_request_params p;
    la_request_params_init(&p);
    p.prompt = (la_segment){.text = "Where was Elkrak Avoltrax born?"};
    p.sampling.max_tokens = 12;
    p.sampling.ignore_eos = true;
    p.sampling.temperature = 1.0f; /* sampled over the whole vocabulary: ids far past 3072 */
    p.sampling.seed = 5;
    la_test_gen g;
    la_test_generate(e, &p, &g);
    cr_assert_eq(g.finish, LA_FINISH_LENGTH, "%s", g.error);
    cr_assert_eq(g.n_tokens, 12);
    int32_t beyond = 0;
    for (int32_t i = 0; i < g.n_tokens; i++) beyond += g.tokens[i] >= 3072;
    cr_assert(beyond > 0, "random weights picked no id past the tokenizer's 3072: the test proves nothing");
    la_test_gen_free(&g);
    la_engine_destroy(e);
}

/* A token-id prompt that starts with BOS gets no second one (issue 28); one without BOS
 * gets it, as text does; after documents, which the BOS precedes, neither repeats it: the
 * Llama-3-style fixture and the bundled model. */
Test(methods, token_id_prompts_that_start_with_bos_get_no_second_bos) {
    char bundled[512];
    snprintf(bundled, sizeof bundled, "%s/models/rag-tiny", LA_SOURCE_DIR);
    const char *dirs[2] = {tiny_dir(), bundled};
    for (int m = 0; m < 2; m++) {
        la_engine *e = la_test_engine(dirs[m], 64, 16);
        int32_t bos = -1, *one = NULL, n_one = 0;
        la_err err = {0};
        LA_CHECK_OK(la_engine_tokenize(e, "", 0, true, &one, &n_one, &err), err);
        cr_assert_eq(n_one, 1, "%s: the tokenizer adds BOS", dirs[m]);
        bos = one[0];
        free(one);
        const int32_t with[2] = {bos, 36}, without[1] = {36};
        for (int k = 0; k < 2; k++) {
            la_request_params p;
            la_request_params_init(&p);
            p.prompt = k == 0 ? (la_segment){.ids = with, .n_ids = 2} : (la_segment){.ids = without, .n_ids = 1};
            p.add_special = true;
            la_request_tokens *t = NULL;
            LA_CHECK_OK(la_engine_tokenize_request(e, &p, &t, &err), err);
            cr_assert_eq(t->n_ids, 2, "%s: %s BOS -> %d tokens", dirs[m], k == 0 ? "with" : "without", t->n_ids);
            cr_assert_eq(t->ids[0], bos);
            cr_assert_eq(t->ids[1], 36);
            la_request_tokens_free(t);
            /* with documents the BOS opens the sequence before them (a block of its own), and
             * the prompt's own BOS is not repeated after them, for every method */
            const int32_t doc[3] = {40, 41, 42};
            p.docs = &(la_segment){.ids = doc, .n_ids = 3};
            p.n_docs = 1;
            for (int mi = 0; mi < LA_METHOD_COUNT; mi++) {
                p.method = (la_method)mi;
                LA_CHECK_OK(la_engine_tokenize_request(e, &p, &t, &err), err);
                const int32_t want[5] = {bos, 40, 41, 42, 36};
                cr_assert_eq(t->n_ids, 5, "%s: %s BOS, documents, %s -> %d tokens", dirs[m], k == 0 ? "with" : "without",
                             la_method_name(p.method), t->n_ids);
                for (int i = 0; i < 5; i++) cr_assert_eq(t->ids[i], want[i], "%s: token %d", dirs[m], i);
                cr_assert_eq(t->n_prompt, la_method_is_blockwise(p.method) ? 1 : 5);
                la_request_tokens_free(t);
            }
            /* without special tokens the ids are the caller's, a BOS among them kept */
            p.method = LA_METHOD_LAZY;
            p.add_special = false;
            LA_CHECK_OK(la_engine_tokenize_request(e, &p, &t, &err), err);
            cr_assert_eq(t->n_ids, 3 + (k == 0 ? 2 : 1));
            cr_assert_eq(t->ids[3], k == 0 ? bos : 36);
            la_request_tokens_free(t);
            /* BOS alone after documents leaves no question */
            if (k == 0) {
                p.add_special = true;
                p.prompt = (la_segment){.ids = with, .n_ids = 1};
                cr_assert_eq(la_engine_tokenize_request(e, &p, &t, &err), LA_ERR_INVALID_ARG);
                cr_assert(strstr(err.msg, "no tokens after the documents"), "%s", err.msg);
            }
        }
        la_engine_destroy(e);
    }
}

/* A text that cannot fit the context is refused before it is tokenized (issue 28): 8 MiB of
 * document against a 512-token context answers with the byte bound's message, not after
 * encoding it; a text near the context goes through the tokenizer and its own check. */
Test(methods, text_far_over_the_context_is_refused_before_tokenizing) {
    la_engine_options eo;
    la_engine_options_init(&eo);
    eo.model_dir = tiny_dir();
    eo.n_threads = 1;
    eo.kv_blocks = 256;
    eo.max_context = 512;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&eo, &e, &err), err);
    size_t n = (size_t)8 << 20;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++) big[i] = "the river "[i % 10];
    big[n] = 0;
    la_segment doc = {.text = big, .len = n};
    la_request_params p;
    la_request_params_init(&p);
    p.docs = &doc;
    p.n_docs = 1;
    p.prompt = (la_segment){.text = "Where?"};
    cr_assert_eq(la_engine_submit(e, &p, NULL, &err), LA_ERR_TOO_LONG);
    cr_assert(strstr(err.msg, "bytes of text"), "%s", err.msg);
    /* 600 words: under the byte bound, over the context once tokenized */
    doc.len = 6000;
    cr_assert_eq(la_engine_submit(e, &p, NULL, &err), LA_ERR_TOO_LONG);
    cr_assert(strstr(err.msg, "exceed the context"), "%s", err.msg);
    free(big);
    la_engine_destroy(e);
}
