/* Regression tests named after bug classes other engines shipped (issue 28): each Test
 * names the upstream issue and asserts the correct behaviour here. The tiny f32 checkpoint
 * (tests/fixtures/models/tiny-f32-tied) where only token ids matter; the bundled model
 * (models/rag-tiny) where text does (stop strings, re-tokenization). Answers are compared
 * with a fresh engine's (logits within 1e-4, greedy tokens identical). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/engine_util.h"
#include "common/test_util.h"
#include "engine/sampling.h"

#define LOGIT_TOL 1e-4
#define N_GEN 6
#define BS 16 /* block size of every engine here */

static char g_tiny[512], g_rag[512];

static const char *tiny_dir(void) {
    snprintf(g_tiny, sizeof g_tiny, "%s/tests/fixtures/models/tiny-f32-tied", LA_SOURCE_DIR);
    return g_tiny;
}

static const char *rag_dir(void) {
    snprintf(g_rag, sizeof g_rag, "%s/models/rag-tiny", LA_SOURCE_DIR);
    return g_rag;
}

/* An engine of block size 16 with kv_blocks blocks; max_batch_tokens 0: the default. */
static la_engine *engine(const char *dir, int64_t kv_blocks, int32_t max_batch_tokens) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = dir;
    o.kv_blocks = kv_blocks;
    o.block_size = BS;
    o.n_threads = 2;
    if (max_batch_tokens) o.max_batch_tokens = max_batch_tokens;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    return e;
}

static void fill(la_rng *rng, int32_t *v, int32_t n) {
    for (int32_t i = 0; i < n; i++) v[i] = (int32_t)(la_rng_next(rng) % 500);
}

static la_segment seg(const int32_t *ids, int32_t n) { return (la_segment){.ids = ids, .n_ids = n}; }

/* Token ids as given (no BOS added), greedy N_GEN tokens past eos, logits returned. */
static la_request_params params(la_method m) {
    la_request_params p;
    la_request_params_init(&p);
    p.method = m;
    p.add_special = false;
    p.return_logits = true;
    p.sampling.max_tokens = N_GEN;
    p.sampling.ignore_eos = true;
    return p;
}

/* Tokens equal, logits within LOGIT_TOL, over the first n tokens of both (n < 0: all of
 * them, and as many in a as in ref). */
static void assert_same_n(const la_test_gen *a, const la_test_gen *ref, int32_t n, const char *what) {
    cr_assert(ref->n_tokens > 0 && ref->logits, "%s: the reference returned no tokens or logits", what);
    cr_assert(a->n_tokens > 0 && a->logits, "%s: no tokens or logits came back", what);
    if (n < 0) {
        cr_assert_eq(a->n_tokens, ref->n_tokens, "%s: %d tokens, reference %d", what, a->n_tokens, ref->n_tokens);
        n = ref->n_tokens;
    }
    cr_assert(n <= a->n_tokens && n <= ref->n_tokens, "%s: fewer than %d tokens", what, n);
    for (int32_t i = 0; i < n; i++) {
        size_t at;
        double d = la_test_max_abs_diff(a->logits + (size_t)i * (size_t)a->n_vocab,
                                        ref->logits + (size_t)i * (size_t)ref->n_vocab, (size_t)a->n_vocab, &at);
        cr_assert(d <= LOGIT_TOL, "%s: step %d logits differ by %.3g at token %zu", what, i, d, at);
        cr_assert_eq(a->tokens[i], ref->tokens[i], "%s: token %d is %d, reference %d", what, i, a->tokens[i],
                     ref->tokens[i]);
    }
}

static void assert_same(const la_test_gen *a, const la_test_gen *ref, const char *what) {
    assert_same_n(a, ref, -1, what);
}

/* No request left, no job, no pinned block: la_engine_check counts the pins every live plan
 * and job holds, which is none at idle. */
static void assert_idle_and_clean(la_engine *e, const char *what) {
    la_err err = {0};
    while (la_engine_has_work(e)) LA_CHECK_OK(la_engine_step(e, &err), err);
    la_status s = la_engine_check(e, &err);
    cr_assert(s == LA_OK, "%s: %s", what, err.msg);
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    cr_assert_eq(st.n_running + st.n_waiting, 0, "%s", what);
    cr_assert_eq(st.kv_blocks_pinned, 0, "%s: %lld blocks pinned at idle", what, (long long)st.kv_blocks_pinned);
}

static int32_t floor_blocks(int32_t n) { return n / BS * BS; }

/* ============================================================ cold vs warm ========== */

/* vLLM #40896, llama.cpp #28527: greedy output changed once the prompt came from the cache.
 * The same request twice on one engine gives identical tokens (logits within 1e-4), and the
 * second really was served from the cache: under lazy every document token and the
 * question's full block, under prefix every full block of the prompt (a block holding the
 * last prompt token never is: that token is always computed, its logits start generation). */
Test(regressions, cold_and_warm_greedy_are_identical_and_the_warm_run_hit_the_cache) {
    la_rng rng;
    la_rng_seed(&rng, 1);
    int32_t all[100], *d0 = all, *d1 = all + 40, *d2 = all + 63, *q = all + 80; /* 40 + 23 + 17 + 20 */
    fill(&rng, all, 100);
    la_engine *e = engine(tiny_dir(), 1024, 0);

    la_segment docs[3] = {seg(d0, 40), seg(d1, 23), seg(d2, 17)};
    la_request_params p = params(LA_METHOD_LAZY);
    p.docs = docs;
    p.n_docs = 3;
    p.prompt = seg(q, 20);
    la_test_gen cold, warm;
    la_test_generate(e, &p, &cold);
    la_test_generate(e, &p, &warm);
    assert_same(&warm, &cold, "lazy warm vs cold");
    cr_assert_eq(cold.stats.doc_tokens_reused, 0);
    cr_assert_eq(cold.stats.doc_tokens_computed, 80);
    cr_assert_eq(warm.stats.doc_tokens_reused, 80, "lazy warm: every document token from the cache");
    cr_assert_eq(warm.stats.doc_tokens_computed, 0);
    cr_assert_eq(warm.stats.prefix_tokens_reused, 16, "lazy warm: the question's full block from the cache");
    la_test_gen_free(&cold), la_test_gen_free(&warm);

    p = params(LA_METHOD_PREFIX);
    p.prompt = seg(all, 100);
    la_test_generate(e, &p, &cold);
    la_test_generate(e, &p, &warm);
    assert_same(&warm, &cold, "prefix warm vs cold");
    cr_assert_eq(cold.stats.prefix_tokens_reused, 0);
    cr_assert_eq(warm.stats.prefix_tokens_reused, 96, "prefix warm: the prompt's 6 full blocks from the cache");
    la_test_gen_free(&cold), la_test_gen_free(&warm);
    assert_idle_and_clean(e, "after cold and warm");
    la_engine_destroy(e);
}

/* ============================================================ stop strings ========== */

/* The bundled model answering a question about two documents (chat template, BOS). */
static const la_segment rag_docs[2] = {
    {.title = "Elkrak Avoltrax",
     .text = "Elkrak Avoltrax (born 3 September 1972 in Chas, Wirnor) is a cinematographer."},
    {.title = "Famtond Cuxirnca",
     .text = "Famtond Cuxirnca was born in Kramker, Gailevea, on 19 December 1946. She worked as a "
             "cinematographer."}};
static const la_chat_message rag_question[1] = {{"user", "Where was Elkrak Avoltrax born?"}};

static la_request_params rag_params(la_method m) {
    la_request_params p = params(m);
    p.docs = rag_docs;
    p.n_docs = 2;
    p.messages = rag_question;
    p.n_messages = 1;
    p.add_special = true;
    p.sampling.max_tokens = 32;
    return p;
}

/* vLLM #5543: a request that ended on a stop string left the cache in a state that changed
 * later answers. On the bundled model, under prefix and lazy: a request stopped by a string
 * that starts at its first generated token past a block boundary (so the blocks it registers
 * hold generated tokens); then a follow-up whose prompt holds the stopped request's
 * generated ids (it reuses every full block of what the stopped request computed: all its
 * tokens but the last) and the first request again without the stop. Both equal a fresh
 * engine's answers. */
Test(regressions, a_request_that_ended_on_a_stop_string_changes_no_later_answer) {
    const la_method ms[2] = {LA_METHOD_PREFIX, LA_METHOD_LAZY};
    for (int k = 0; k < 2; k++) {
        const char *mn = la_method_name(ms[k]);
        la_engine *fresh = engine(rag_dir(), 512, 0), *e = engine(rag_dir(), 512, 0);
        la_err err = {0};
        la_request_params p = rag_params(ms[k]);
        la_test_gen ref;
        la_test_generate(fresh, &p, &ref);
        cr_assert_eq(ref.n_tokens, 32, "%s", mn);

        /* the request's tokens: documents (prefix: inside the prompt), then its tail */
        la_request_tokens *t = NULL;
        LA_CHECK_OK(la_engine_tokenize_request(e, &p, &t, &err), err);
        int32_t n_tail = t->n_prompt, n_doc_tokens = t->n_ids - t->n_prompt;
        /* the stop string starts in generated token g, the first at a block boundary: the
         * stopped request computes the tokens before it, so it fills a block that holds
         * generated tokens */
        int32_t g = BS - n_tail % BS;
        char *head = NULL;
        size_t off = 0;
        LA_CHECK_OK(la_engine_detokenize(e, ref.tokens, g, true, &head, &off, &err), err);
        cr_assert(off < ref.text_len && memcmp(ref.text, head, off) == 0, "%s: tokens 0..%d decode to \"%s\" in \"%s\"",
                  mn, g, head, ref.text);
        free(head);
        /* long enough that its first match is where it starts, cut at a character boundary */
        char stop[128];
        size_t len = 0;
        const char *first = NULL;
        do {
            len++;
            while (off + len < ref.text_len && ((unsigned char)ref.text[off + len] & 0xC0) == 0x80) len++;
            cr_assert(len < sizeof stop && off + len <= ref.text_len, "%s: no stop string is unique in \"%s\"", mn,
                      ref.text);
            memcpy(stop, ref.text + off, len);
            stop[len] = '\0';
            first = strstr(ref.text, stop);
        } while (first != ref.text + off || len < 3);

        const char *stops[1] = {stop};
        p.sampling.stop = stops;
        p.sampling.n_stop = 1;
        la_test_gen stopped;
        la_test_generate(e, &p, &stopped);
        cr_assert_eq(stopped.finish, LA_FINISH_STOP, "%s: \"%s\" did not stop \"%s\"", mn, stop, ref.text);
        cr_assert_eq(stopped.text_len, off, "%s: stopped text \"%s\"", mn, stopped.text ? stopped.text : "");
        cr_assert(memcmp(stopped.text, ref.text, off) == 0);
        cr_assert(stopped.n_tokens > g && stopped.n_tokens < ref.n_tokens, "%s: %d tokens", mn, stopped.n_tokens);
        assert_same_n(&stopped, &ref, stopped.n_tokens, "stopped vs fresh");

        /* follow-up: the same documents and tail as ids, the stopped request's tokens, more */
        int32_t more[3] = {300, 301, 302}, n_ids = t->n_ids + stopped.n_tokens + 3;
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_ids);
        memcpy(ids, t->ids, sizeof(int32_t) * (size_t)t->n_ids);
        memcpy(ids + t->n_ids, stopped.tokens, sizeof(int32_t) * (size_t)stopped.n_tokens);
        memcpy(ids + t->n_ids + stopped.n_tokens, more, sizeof more);
        la_segment docs[8];
        cr_assert(t->n_docs <= 8);
        int32_t at = 0;
        for (int32_t d = 0; d < t->n_docs; d++) {
            docs[d] = seg(ids + at, t->doc_lens[d]);
            at += t->doc_lens[d];
        }
        la_request_params f = params(ms[k]);
        f.docs = docs;
        f.n_docs = t->n_docs;
        f.prompt = seg(ids + at, n_ids - at);
        la_test_gen follow, follow_ref;
        la_test_generate(e, &f, &follow);
        la_engine *fresh2 = engine(rag_dir(), 512, 0);
        la_test_generate(fresh2, &f, &follow_ref);
        assert_same(&follow, &follow_ref, "follow-up after the stop vs a fresh engine");
        cr_assert_eq(follow.stats.doc_tokens_reused, n_doc_tokens, "%s", mn);
        cr_assert_eq(follow.stats.prefix_tokens_reused, floor_blocks(n_tail + stopped.n_tokens - 1),
                     "%s: the follow-up reuses what the stopped request computed (%d tail + %d generated)", mn, n_tail,
                     stopped.n_tokens);
        cr_assert_gt(follow.stats.prefix_tokens_reused, floor_blocks(n_tail), "%s: no generated block reused", mn);

        /* the first request again, without the stop */
        p.sampling.stop = NULL;
        p.sampling.n_stop = 0;
        la_test_gen again;
        la_test_generate(e, &p, &again);
        assert_same(&again, &ref, "the request again without the stop vs a fresh engine");
        cr_assert_gt(again.stats.prefix_tokens_reused, 0, "%s: nothing reused", mn);
        assert_idle_and_clean(e, mn);

        la_test_gen_free(&ref), la_test_gen_free(&stopped), la_test_gen_free(&follow),
            la_test_gen_free(&follow_ref), la_test_gen_free(&again);
        free(ids);
        la_request_tokens_free(t);
        la_engine_destroy(fresh2);
        la_engine_destroy(fresh);
        la_engine_destroy(e);
    }
}

/* ============================================================ block boundaries ====== */

/* SGLang #22819: a shared prefix ending exactly on a block boundary was reused wrongly. Under
 * prefix, two prompts sharing exactly their first 16 (one block) or 48 (three) tokens: the
 * second reuses exactly that, and its logits are a fresh engine's. A third prompt that is
 * exactly the shared tokens (ends on the boundary) reuses all blocks but its last, whose
 * last token must be computed. */
Test(regressions, a_shared_prefix_of_exactly_one_or_three_blocks_is_reused_exactly) {
    const int32_t shared[2] = {16, 48};
    for (int s = 0; s < 2; s++) {
        int32_t S = shared[s], a[64], b[64];
        la_rng rng;
        la_rng_seed(&rng, 100 + (uint64_t)S);
        fill(&rng, a, S + 9);
        memcpy(b, a, sizeof(int32_t) * (size_t)S);
        fill(&rng, b + S, 9);
        b[S] = (a[S] + 1) % 500; /* the first token after the shared ones differs */
        la_engine *e = engine(tiny_dir(), 256, 0);
        la_test_gen ga, gb, gc, ref;
        la_request_params p = params(LA_METHOD_PREFIX);
        p.prompt = seg(a, S + 9);
        la_test_generate(e, &p, &ga);
        p.prompt = seg(b, S + 9);
        la_test_generate(e, &p, &gb);
        cr_assert_eq(gb.stats.prefix_tokens_reused, S, "shared %d: reused %lld", S,
                     (long long)gb.stats.prefix_tokens_reused);
        la_engine *fresh = engine(tiny_dir(), 256, 0);
        la_test_generate(fresh, &p, &ref);
        assert_same(&gb, &ref, S == 16 ? "one shared block vs fresh" : "three shared blocks vs fresh");
        la_engine_destroy(fresh);
        la_test_gen_free(&ref);

        p.prompt = seg(a, S); /* the prompt is the shared blocks */
        la_test_generate(e, &p, &gc);
        cr_assert_eq(gc.stats.prefix_tokens_reused, S - BS, "prompt of exactly %d tokens", S);
        fresh = engine(tiny_dir(), 256, 0);
        la_test_generate(fresh, &p, &ref);
        assert_same(&gc, &ref, "a prompt ending on the boundary vs fresh");
        assert_idle_and_clean(e, "after the boundary prompts");
        la_test_gen_free(&ga), la_test_gen_free(&gb), la_test_gen_free(&gc), la_test_gen_free(&ref);
        la_engine_destroy(fresh);
        la_engine_destroy(e);
    }
}

/* ============================================================ eviction pressure ===== */

/* vLLM #37076: under eviction pressure a freed block was handed to two requests in one step.
 * A pool of 10 blocks (the largest request needs 8) and 8 requests submitted at once, lazy
 * ones sharing four documents in different subsets and orders, and prefix ones holding the
 * same documents inline: the pool accounting holds after every step, every answer equals
 * the answer computed alone on a large pool, and the pool did evict. */
Test(regressions, shared_documents_under_eviction_pressure_answer_as_sequentially) {
    la_rng rng;
    la_rng_seed(&rng, 37076);
    const int32_t lens[4] = {40, 30, 20, 33}; /* 3 + 2 + 2 + 3 blocks */
    int32_t doc[4][40];
    for (int d = 0; d < 4; d++) fill(&rng, doc[d], lens[d]);
    enum { N = 8 };
    /* document subsets, in order; the last two requests are prefix with them inline */
    const int32_t sets[N][3] = {{0, 1, -1}, {1, 2, -1}, {2, 0, -1}, {0, 1, 2}, {3, 0, -1}, {1, 3, -1},
                                {0, 1, -1}, {2, 0, 1}};
    int32_t q[N][5], inline_ids[N][128];
    la_segment segs[N][3];
    la_request_params ps[N];
    for (int r = 0; r < N; r++) {
        fill(&rng, q[r], 5);
        la_method m = r < 6 ? LA_METHOD_LAZY : LA_METHOD_PREFIX;
        ps[r] = params(m);
        int32_t n = 0, at = 0;
        for (int i = 0; i < 3 && sets[r][i] >= 0; i++, n++) {
            int32_t d = sets[r][i];
            segs[r][i] = seg(doc[d], lens[d]);
            memcpy(inline_ids[r] + at, doc[d], sizeof(int32_t) * (size_t)lens[d]);
            at += lens[d];
        }
        memcpy(inline_ids[r] + at, q[r], sizeof q[r]);
        if (m == LA_METHOD_LAZY) {
            ps[r].docs = segs[r];
            ps[r].n_docs = n;
            ps[r].prompt = seg(q[r], 5);
        } else {
            ps[r].prompt = seg(inline_ids[r], at + 5);
        }
    }
    la_test_gen seq[N], conc[N];
    la_engine *big = engine(tiny_dir(), 4096, 0);
    for (int r = 0; r < N; r++) la_test_generate(big, &ps[r], &seq[r]);
    la_engine_destroy(big);

    la_engine *e = engine(tiny_dir(), 10, 0);
    la_err err = {0};
    for (int r = 0; r < N; r++) {
        memset(&conc[r], 0, sizeof conc[r]);
        ps[r].on_event = la_test_on_event;
        ps[r].user = &conc[r];
        LA_CHECK_OK(la_engine_submit(e, &ps[r], NULL, &err), err);
    }
    int32_t steps = 0;
    while (la_engine_has_work(e)) {
        LA_CHECK_OK(la_engine_step(e, &err), err);
        la_status s = la_engine_check(e, &err);
        cr_assert(s == LA_OK, "step %d: %s", steps, err.msg);
        cr_assert(++steps < 10000, "no progress");
    }
    for (int r = 0; r < N; r++) {
        char what[64];
        snprintf(what, sizeof what, "request %d (%s) vs alone", r, la_method_name(ps[r].method));
        cr_assert(conc[r].done && conc[r].finish == LA_FINISH_LENGTH, "%s: %s", what, conc[r].error);
        assert_same(&conc[r], &seq[r], what);
        la_test_gen_free(&conc[r]), la_test_gen_free(&seq[r]);
    }
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    cr_assert_gt(st.kv_evictions, 0, "the 10-block pool never evicted: the test proves nothing");
    assert_idle_and_clean(e, "after the pressure");
    la_engine_destroy(e);
}

/* ============================================================ abort mid-prefill ===== */

/* SGLang #38319: a request aborted in the middle of a chunked prefill left state behind that
 * broke the next request on the same documents. A 16-token step budget spreads the prefill
 * over several steps; for every step k before the first token, a request cancelled after
 * step k finishes cancelled, the steps go on until the documents it started are computed
 * and no block is pinned (they pinned 5 at idle before: la_engine_has_work ignored the
 * jobs), the pool accounting holds, and the same request submitted again equals a fresh
 * engine's answer and reuses what the cancelled one computed. Lazy (documents computed as
 * jobs) and prefix (the prompt in chunks). */
Test(regressions, abort_in_the_middle_of_a_chunked_prefill_then_the_same_documents) {
    la_rng rng;
    la_rng_seed(&rng, 38319);
    int32_t all[90], *d0 = all, *d1 = all + 40, *q = all + 70; /* 40 + 30 + 20 */
    fill(&rng, all, 90);
    la_segment docs[2] = {seg(d0, 40), seg(d1, 30)};
    const la_method ms[2] = {LA_METHOD_LAZY, LA_METHOD_PREFIX};
    for (int k = 0; k < 2; k++) {
        const char *mn = la_method_name(ms[k]);
        la_request_params p = params(ms[k]);
        if (ms[k] == LA_METHOD_LAZY) {
            p.docs = docs;
            p.n_docs = 2;
            p.prompt = seg(q, 20);
        } else {
            p.prompt = seg(all, 90);
        }
        la_engine *fresh = engine(tiny_dir(), 256, 16);
        la_test_gen ref;
        la_test_generate(fresh, &p, &ref);
        la_engine_destroy(fresh);
        int32_t cancelled = 0;
        for (int32_t after = 1;; after++) {
            la_engine *e = engine(tiny_dir(), 256, 16);
            la_err err = {0};
            la_test_gen g = {0};
            p.on_event = la_test_on_event;
            p.user = &g;
            uint64_t id = 0;
            LA_CHECK_OK(la_engine_submit(e, &p, &id, &err), err);
            for (int32_t s = 0; s < after; s++) LA_CHECK_OK(la_engine_step(e, &err), err);
            if (g.n_tokens > 0) { /* the prefill is over: every step before it was tried */
                la_test_gen_free(&g);
                la_engine_destroy(e);
                break;
            }
            LA_CHECK_OK(la_engine_cancel(e, id), err);
            while (!g.done) LA_CHECK_OK(la_engine_step(e, &err), err);
            cr_assert_eq(g.finish, LA_FINISH_CANCELLED, "%s, cancelled after step %d", mn, after);
            la_status s = la_engine_check(e, &err);
            cr_assert(s == LA_OK, "%s, cancelled after step %d: %s", mn, after, err.msg);
            assert_idle_and_clean(e, "after the cancel");
            la_test_gen_free(&g);

            la_test_gen again;
            la_test_generate(e, &p, &again);
            char what[96];
            snprintf(what, sizeof what, "%s resubmitted after a cancel after step %d vs fresh", mn, after);
            assert_same(&again, &ref, what);
            /* what the cancelled request computed, 16 tokens a step, is reused: the documents
             * (finished after the cancel) and every full block of the prompt */
            int32_t done = 16 * after, tail = ms[k] == LA_METHOD_LAZY ? done - 70 : done;
            if (ms[k] == LA_METHOD_LAZY) {
                cr_assert_eq(again.stats.doc_tokens_reused, 70, "%s", what);
                cr_assert_eq(again.stats.doc_tokens_computed, 0, "%s", what);
            }
            cr_assert_eq(again.stats.prefix_tokens_reused, tail > 0 ? floor_blocks(tail) : 0, "%s: reused %lld", what,
                         (long long)again.stats.prefix_tokens_reused);
            assert_idle_and_clean(e, what);
            la_test_gen_free(&again);
            la_engine_destroy(e);
            cancelled++;
        }
        cr_assert_geq(cancelled, 4, "%s: the prefill of 90 tokens took %d steps of 16", mn, cancelled + 1);
        la_test_gen_free(&ref);
    }
}

/* ============================================================ salts ================= */

static const char *salt_doc_text[2] = {
    "The river runs north past the old mill, under the stone bridge and on to the sea.",
    "A lantern hangs by the door of the inn on the hill, lit every night since the war."};

/* One request on the tiny fixture: the two text documents (or only the second), the
 * question, BOS, salt. */
static void salted(la_engine *e, la_method m, const char *salt, bool both_docs, la_test_gen *g) {
    la_segment docs[2] = {{.text = salt_doc_text[0]}, {.text = salt_doc_text[1]}};
    la_request_params p = params(m);
    p.docs = both_docs ? docs : docs + 1;
    p.n_docs = both_docs ? 2 : 1;
    p.prompt = (la_segment){.text = "Where does the lantern hang, and since when?"};
    p.add_special = true;
    p.cache_salt = salt;
    la_test_generate(e, &p, g);
}

/* vLLM #44701: a cache salt collided with another extra key of the block hash. Under lazy and
 * prefix, with the same documents cached without a salt (the request run twice: it is
 * reused), a request with salt "x", one whose salt is the first document's text, and one
 * with that salt and only the second document (what a salt hashed as text before the
 * documents would alias) share nothing, and each gives the unsalted answer of its
 * documents; its own repeat is then reused. The documents' hashes under the three salts
 * all differ. */
Test(regressions, a_cache_salt_never_shares_with_no_salt_nor_with_document_text) {
    const la_method ms[2] = {LA_METHOD_LAZY, LA_METHOD_PREFIX};
    const struct {
        const char *salt;
        bool both_docs;
    } cases[3] = {{"x", true}, {salt_doc_text[0], true}, {salt_doc_text[0], false}};
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < 3; c++) {
            bool lazy = ms[k] == LA_METHOD_LAZY;
            char what[96];
            snprintf(what, sizeof what, "%s, salt %s, %s", la_method_name(ms[k]), c == 0 ? "\"x\"" : "= document 0",
                     cases[c].both_docs ? "both documents" : "document 1 only");
            la_engine *e = engine(tiny_dir(), 1024, 0);
            la_test_gen both, both2, plain, s1, s2;
            salted(e, ms[k], NULL, true, &both);
            salted(e, ms[k], NULL, true, &both2);
            cr_assert_gt(lazy ? both2.stats.doc_tokens_reused : both2.stats.prefix_tokens_reused, 0, "%s: no reuse",
                         what);
            if (cases[c].both_docs) plain = both;
            else salted(e, ms[k], NULL, false, &plain);
            salted(e, ms[k], cases[c].salt, cases[c].both_docs, &s1);
            cr_assert_eq(s1.stats.doc_tokens_reused, 0, "%s: shared document tokens", what);
            cr_assert_eq(s1.stats.prefix_tokens_reused, 0, "%s: shared prompt blocks", what);
            assert_same(&s1, &plain, what);
            salted(e, ms[k], cases[c].salt, cases[c].both_docs, &s2);
            if (lazy) cr_assert_eq(s2.stats.doc_tokens_computed, 0, "%s: the repeat computed documents", what);
            else cr_assert_gt(s2.stats.prefix_tokens_reused, 0, "%s: the repeat reused nothing", what);
            assert_same(&s2, &plain, what);
            if (!cases[c].both_docs) la_test_gen_free(&plain);
            la_test_gen_free(&both), la_test_gen_free(&both2), la_test_gen_free(&s1), la_test_gen_free(&s2);
            la_engine_destroy(e);
        }

    la_engine *e = engine(tiny_dir(), 64, 0);
    la_segment doc = {.text = salt_doc_text[1]};
    const char *salts[3] = {NULL, "x", salt_doc_text[0]};
    la_document_info info[3];
    la_err err = {0};
    for (int i = 0; i < 3; i++) LA_CHECK_OK(la_engine_document_info(e, &doc, LA_METHOD_LAZY, salts[i], &info[i], &err), err);
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++) {
            cr_assert(info[i].key_lo != info[j].key_lo || info[i].key_hi != info[j].key_hi, "salts %d, %d: one key", i, j);
            for (int32_t b = 0; b < info[i].n_blocks; b++)
                cr_assert_neq(info[i].block_hashes[b], info[j].block_hashes[b], "salts %d, %d: block %d", i, j, b);
        }
    for (int i = 0; i < 3; i++) free(info[i].block_hashes);
    la_engine_destroy(e);
}

/* ============================================================ multi-turn ============ */

/* SGLang #16521: the next turn of a conversation did not reuse the previous turn's answer.
 * Turn 2's prompt is turn 1's prompt, its answer and a new user message, as token ids: it
 * reuses every block turn 1 computed (the prompt and the answer but its last token, never
 * fed back), which with these lengths is every full block of prompt + answer; its answer
 * equals a fresh engine's. Prefix (from the prompt start) and lazy (the tail after the
 * documents, every document reused). */
Test(regressions, the_next_turn_reuses_the_prompt_and_the_generated_tokens) {
    la_rng rng;
    la_rng_seed(&rng, 16521);
    int32_t d0[30], d1[18], p1[37], user[9];
    fill(&rng, d0, 30), fill(&rng, d1, 18), fill(&rng, p1, 37), fill(&rng, user, 9);
    la_segment docs[2] = {seg(d0, 30), seg(d1, 18)};
    const la_method ms[2] = {LA_METHOD_PREFIX, LA_METHOD_LAZY};
    for (int k = 0; k < 2; k++) {
        const char *mn = la_method_name(ms[k]);
        la_engine *e = engine(tiny_dir(), 512, 0);
        la_request_params p = params(ms[k]);
        if (ms[k] == LA_METHOD_LAZY) p.docs = docs, p.n_docs = 2;
        p.prompt = seg(p1, 37);
        p.sampling.max_tokens = 20;
        la_test_gen t1;
        la_test_generate(e, &p, &t1);
        cr_assert_eq(t1.n_tokens, 20);
        int32_t turn2[37 + 20 + 9];
        memcpy(turn2, p1, sizeof p1);
        memcpy(turn2 + 37, t1.tokens, sizeof(int32_t) * 20);
        memcpy(turn2 + 57, user, sizeof user);
        p.prompt = seg(turn2, 66);
        p.sampling.max_tokens = N_GEN;
        la_test_gen t2, ref;
        la_test_generate(e, &p, &t2);
        cr_assert_eq(t2.stats.prefix_tokens_reused, floor_blocks(37 + 20 - 1), "%s: reused %lld", mn,
                     (long long)t2.stats.prefix_tokens_reused);
        cr_assert_geq(t2.stats.prefix_tokens_reused, floor_blocks(37 + 20), "%s: full blocks of prompt + answer", mn);
        if (ms[k] == LA_METHOD_LAZY) cr_assert_eq(t2.stats.doc_tokens_reused, 48, "%s", mn);
        la_engine *fresh = engine(tiny_dir(), 512, 0);
        la_test_generate(fresh, &p, &ref);
        assert_same(&t2, &ref, "turn 2 vs a fresh engine");
        la_test_gen_free(&t1), la_test_gen_free(&t2), la_test_gen_free(&ref);
        la_engine_destroy(fresh);
        la_engine_destroy(e);
    }
}

/* ============================================================ re-tokenization ======= */

/* llama.cpp #11970: a reply decoded to text and encoded again merges into other tokens than
 * the ones generated, so a multi-turn prompt sent as text no longer matches the cached
 * tokens of the previous turn. What we guarantee: token-id prompts are used as given (never
 * decoded and re-encoded), so a continuation sent as ids reuses every block the previous
 * turn computed; a continuation sent as text is re-tokenized like any text, and reuses only
 * the full blocks before the first id where the re-encoding departs from the generated ids.
 * On the bundled model, under prefix: search sampled replies (temperature 1, seeds 1..)
 * for one whose re-encoding departs before the last block turn 1 computed; then turn 2 as
 * ids (prompt + reply + a user message) and as text (their decoded text) reuse exactly that
 * much. */
Test(regressions, a_reply_that_re_tokenizes_differently_is_reused_as_ids_not_as_text) {
    la_engine *scout = engine(rag_dir(), 1024, 0);
    la_err err = {0};
    const char *q_text = "Question: Where was Elkrak Avoltrax born?\nAnswer:", *u_text = "\nQuestion: And when?\nAnswer:";
    int32_t *pr = NULL, *u = NULL, np = 0, nu = 0;
    LA_CHECK_OK(la_engine_tokenize(scout, q_text, strlen(q_text), true, &pr, &np, &err), err);
    LA_CHECK_OK(la_engine_tokenize(scout, u_text, strlen(u_text), false, &u, &nu, &err), err);
    /* no special token in the reply: their text is not what the reply says */
    la_logit_bias no_special[6];
    for (int i = 0; i < 6; i++) no_special[i] = (la_logit_bias){3066 + i, -100.0f};

    la_request_params p = params(LA_METHOD_PREFIX);
    p.prompt = seg(pr, np);
    p.return_logits = false;
    p.sampling.max_tokens = 40;
    p.sampling.temperature = 1.0f;
    p.sampling.logit_bias = no_special;
    p.sampling.n_logit_bias = 6;
    int32_t ids[4096], n_ids = 0, departs = -1;
    char *text = NULL;
    uint64_t seed = 0;
    while (departs < 0 && ++seed <= 200) {
        la_test_gen a;
        p.sampling.seed = seed;
        la_test_generate(scout, &p, &a);
        /* turn 2 as ids, and as the text of the same ids */
        n_ids = 0;
        memcpy(ids, pr, sizeof(int32_t) * (size_t)np), n_ids += np;
        memcpy(ids + n_ids, a.tokens, sizeof(int32_t) * (size_t)a.n_tokens), n_ids += a.n_tokens;
        memcpy(ids + n_ids, u, sizeof(int32_t) * (size_t)nu), n_ids += nu;
        free(text);
        size_t len;
        LA_CHECK_OK(la_engine_detokenize(scout, ids, n_ids, true, &text, &len, &err), err);
        int32_t *re = NULL, n_re = 0;
        LA_CHECK_OK(la_engine_tokenize(scout, text, len, true, &re, &n_re, &err), err);
        int32_t d = 0;
        while (d < n_re && d < n_ids && re[d] == ids[d]) d++;
        int32_t computed = np + a.n_tokens - 1; /* what turn 1 computed: all but its last token */
        cr_assert(d >= np, "seed %llu: the prompt itself re-encodes differently", (unsigned long long)seed);
        if (d < n_ids && d / BS < computed / BS) departs = d;
        free(re);
        la_test_gen_free(&a);
    }
    la_engine_destroy(scout);
    cr_assert(departs >= 0, "no sampled reply of seeds 1..200 re-encodes differently before its last block");

    la_engine *e = engine(rag_dir(), 1024, 0);
    la_test_gen t1, by_ids, by_text;
    la_test_generate(e, &p, &t1); /* turn 1 again on a fresh engine: the same reply */
    cr_assert(np + t1.n_tokens + nu == n_ids && memcmp(ids + np, t1.tokens, sizeof(int32_t) * (size_t)t1.n_tokens) == 0,
              "seed %llu: another reply on a fresh engine", (unsigned long long)seed);
    int32_t computed = np + t1.n_tokens - 1;

    la_request_params p2 = params(LA_METHOD_PREFIX);
    p2.prompt = seg(ids, n_ids);
    la_request_tokens *tk = NULL;
    LA_CHECK_OK(la_engine_tokenize_request(e, &p2, &tk, &err), err);
    cr_assert(tk->n_ids == n_ids && memcmp(tk->ids, ids, sizeof(int32_t) * (size_t)n_ids) == 0,
              "token ids were not used as given");
    la_request_tokens_free(tk);
    la_test_generate(e, &p2, &by_ids);
    cr_assert_eq(by_ids.stats.prefix_tokens_reused, floor_blocks(computed), "as ids: reused %lld of %d computed",
                 (long long)by_ids.stats.prefix_tokens_reused, computed);

    la_request_params p3 = params(LA_METHOD_PREFIX);
    p3.prompt = (la_segment){.text = text};
    p3.add_special = true;
    LA_CHECK_OK(la_engine_tokenize_request(e, &p3, &tk, &err), err);
    cr_assert(tk->n_ids != n_ids || memcmp(tk->ids, ids, sizeof(int32_t) * (size_t)n_ids) != 0);
    int32_t d = 0;
    while (d < tk->n_ids && d < n_ids && tk->ids[d] == ids[d]) d++;
    cr_assert_eq(d, departs, "the text route re-encodes like la_engine_tokenize");
    int32_t n_text = tk->n_ids;
    la_request_tokens_free(tk);
    la_test_generate(e, &p3, &by_text);
    int32_t expect = floor_blocks(d < n_text - 1 ? d : n_text - 1);
    cr_assert_eq(by_text.stats.prefix_tokens_reused, expect, "as text: reused %lld, the ids agree for %d tokens",
                 (long long)by_text.stats.prefix_tokens_reused, d);
    cr_assert_lt(by_text.stats.prefix_tokens_reused, by_ids.stats.prefix_tokens_reused);
    assert_idle_and_clean(e, "after both routes");
    la_test_gen_free(&t1), la_test_gen_free(&by_ids), la_test_gen_free(&by_text);
    free(text), free(pr), free(u);
    la_engine_destroy(e);
}
