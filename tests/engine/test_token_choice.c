/* The request fields of issue 21 in the engine (src/engine/token_choice.c, sampling.c,
 * events.c, kv/plan.c's fork), each against its control on the bundled model (real
 * weights) or the tiny fixture: logprobs against the log-softmax of the logits the engine
 * returns, logit_bias, penalties, min_p, min_tokens, stop_token_ids, allowed_token_ids,
 * n > 1 (choices equal their n = 1 twins: the forked KV blocks are right), structured
 * output, the prefix-cache reset. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/engine_util.h"
#include "common/test_util.h"

static char g_dir[512];
static const char *rag_tiny(void) {
    snprintf(g_dir, sizeof g_dir, "%s/models/rag-tiny", LA_SOURCE_DIR);
    return g_dir;
}

static const la_segment k_doc = {.title = "Elkrak Avoltrax",
                                 .text = "Elkrak Avoltrax (born 3 September 1972 in Chas, Wirnor) is a cinematographer."};
static const la_chat_message k_question[] = {{"user", "Where was Elkrak Avoltrax born?"}};

/* A chat question with one document (the bundled model answers it in a few tokens). */
static void rag_params(la_request_params *p, int32_t max_tokens) {
    la_request_params_init(p);
    p->messages = k_question;
    p->n_messages = 1;
    p->docs = &k_doc;
    p->n_docs = 1;
    p->sampling.max_tokens = max_tokens;
}

/* A plain prompt the model continues at length (ignore_eos). */
static void long_params(la_request_params *p, int32_t max_tokens) {
    la_request_params_init(p);
    p->prompt.text = "The the the the the the the";
    p->sampling.max_tokens = max_tokens;
    p->sampling.ignore_eos = true;
}

static bool same_tokens(const la_test_gen *a, const la_test_gen *b) {
    return a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n_tokens);
}

/* ---- logprobs ------------------------------------------------------------------------- */

typedef struct lp_rec {
    int32_t n;
    int32_t tok[64];
    float lp[64];
    int32_t n_top[64];
    int32_t top_ids[64][20];
    float top_lps[64][20];
    float *logits; /* [n][V] */
    int32_t V;
    int done;
} lp_rec;

static void on_lp(void *user, const la_event *ev) {
    lp_rec *r = user;
    if (ev->kind == LA_EVENT_DONE) {
        r->done = 1;
        return;
    }
    int32_t i = r->n++;
    r->tok[i] = ev->token_id;
    r->lp[i] = ev->logprob;
    r->n_top[i] = ev->n_top;
    memcpy(r->top_ids[i], ev->top_ids, sizeof(int32_t) * (size_t)ev->n_top);
    memcpy(r->top_lps[i], ev->top_logprobs, sizeof(float) * (size_t)ev->n_top);
    r->V = ev->n_vocab;
    r->logits = realloc(r->logits, sizeof(float) * (size_t)r->n * (size_t)ev->n_vocab);
    memcpy(r->logits + (size_t)i * (size_t)ev->n_vocab, ev->logits, sizeof(float) * (size_t)ev->n_vocab);
}

Test(token_choice, logprobs_equal_the_log_softmax_of_the_engines_logits_and_top_k_is_sorted) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    long_params(&p, 12);
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 5;
    p.sampling.logprobs = true;
    p.sampling.top_logprobs = 5;
    p.return_logits = true;
    lp_rec rec = {0};
    p.on_event = on_lp;
    p.user = &rec;
    la_err err = {0};
    cr_assert(la_engine_submit(e, &p, NULL, &err) == LA_OK, "%s", err.msg);
    while (!rec.done) la_engine_step(e, &err);
    cr_assert_eq(rec.n, 12);
    for (int32_t i = 0; i < rec.n; i++) {
        const float *lg = rec.logits + (size_t)i * (size_t)rec.V;
        double mx = -INFINITY, sum = 0;
        for (int32_t t = 0; t < rec.V; t++) mx = lg[t] > mx ? lg[t] : mx;
        for (int32_t t = 0; t < rec.V; t++) sum += exp(lg[t] - mx);
        double lse = mx + log(sum);
        cr_assert_float_eq(rec.lp[i], lg[rec.tok[i]] - lse, 1e-5, "token %d: %g vs %g", i, rec.lp[i], lg[rec.tok[i]] - lse);
        cr_assert_eq(rec.n_top[i], 5);
        for (int32_t k = 0; k < 5; k++) {
            cr_assert_float_eq(rec.top_lps[i][k], lg[rec.top_ids[i][k]] - lse, 1e-5);
            if (k) cr_assert_geq(rec.top_lps[i][k - 1], rec.top_lps[i][k], "sorted");
        }
        /* nothing outside the top 5 is more likely than its last */
        int32_t above = 0;
        for (int32_t t = 0; t < rec.V; t++) above += lg[t] - lse > rec.top_lps[i][4] + 1e-6;
        cr_assert_leq(above, 4);
    }
    free(rec.logits);
    la_engine_destroy(e);
}

/* ---- processors ------------------------------------------------------------------------ */

Test(token_choice, a_logit_bias_of_minus_100_bans_the_greedy_tokens) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    long_params(&p, 16);
    la_test_gen control, banned;
    la_test_generate(e, &p, &control);
    la_logit_bias bias[4];
    for (int i = 0; i < 4; i++) bias[i] = (la_logit_bias){control.tokens[i], -100.0f};
    p.sampling.logit_bias = bias;
    p.sampling.n_logit_bias = 4;
    la_test_generate(e, &p, &banned);
    for (int32_t i = 0; i < banned.n_tokens; i++)
        for (int k = 0; k < 4; k++) cr_assert_neq(banned.tokens[i], bias[k].token_id, "banned token %d at %d", bias[k].token_id, i);
    la_test_gen_free(&control);
    la_test_gen_free(&banned);
    la_engine_destroy(e);
}

static int32_t count_of(const la_test_gen *g, int32_t tok) {
    int32_t c = 0;
    for (int32_t j = 0; j < g->n_tokens; j++) c += g->tokens[j] == tok;
    return c;
}

/* The token g repeats most. */
static int32_t most_repeated(const la_test_gen *g) {
    int32_t best = g->tokens[0];
    for (int32_t i = 0; i < g->n_tokens; i++)
        if (count_of(g, g->tokens[i]) > count_of(g, best)) best = g->tokens[i];
    return best;
}

Test(token_choice, penalties_break_the_repetition_loop_of_the_control) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    rag_params(&p, 40);
    p.sampling.ignore_eos = true;
    la_test_gen control;
    la_test_generate(e, &p, &control);
    int32_t looped = most_repeated(&control), loop = count_of(&control, looped);
    cr_assert_geq(loop, 20, "the control repeats a token (%d times of 40: %s)", loop, control.text);
    struct {
        float presence, frequency, repetition;
    } cases[] = {{2.0f, 0, 1}, {0, 2.0f, 1}, {0, 0, 2.0f}};
    for (size_t c = 0; c < 3; c++) {
        la_test_gen g;
        p.sampling.presence_penalty = cases[c].presence;
        p.sampling.frequency_penalty = cases[c].frequency;
        p.sampling.repetition_penalty = cases[c].repetition;
        la_test_generate(e, &p, &g);
        cr_assert_lt(count_of(&g, looped), loop / 2, "case %zu: the control's loop token still repeats %d times (control %d): %s",
                     c, count_of(&g, looped), loop, g.text);
        la_test_gen_free(&g);
    }
    la_test_gen_free(&control);
    la_engine_destroy(e);
}

Test(token_choice, min_p_near_one_makes_sampling_greedy) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    long_params(&p, 24);
    la_test_gen greedy, sampled, min_p;
    la_test_generate(e, &p, &greedy);
    p.sampling.temperature = 1.5f;
    p.sampling.seed = 11;
    la_test_generate(e, &p, &sampled);
    cr_assert_not(same_tokens(&greedy, &sampled), "the control samples something else");
    p.sampling.min_p = 0.999f;
    la_test_generate(e, &p, &min_p);
    cr_assert(same_tokens(&greedy, &min_p), "min_p 0.999 is greedy");
    la_test_gen_free(&greedy);
    la_test_gen_free(&sampled);
    la_test_gen_free(&min_p);
    la_engine_destroy(e);
}

Test(token_choice, min_tokens_lengthens_a_short_answer_and_stop_token_ids_end_one) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    rag_params(&p, 32);
    la_test_gen control, longer, stopped;
    la_test_generate(e, &p, &control);
    cr_assert_eq(control.finish, LA_FINISH_STOP);
    cr_assert_leq(control.n_tokens, 4, "the answer is short (%d tokens: %s)", control.n_tokens, control.text);
    p.sampling.min_tokens = 12;
    la_test_generate(e, &p, &longer);
    cr_assert_geq(longer.n_tokens, 12, "min_tokens: %d tokens", longer.n_tokens);
    p.sampling.min_tokens = 0;
    int32_t stop_id = control.tokens[1];
    p.sampling.stop_token_ids = &stop_id;
    p.sampling.n_stop_token_ids = 1;
    la_test_generate(e, &p, &stopped);
    cr_assert_eq(stopped.finish, LA_FINISH_STOP);
    cr_assert_eq(stopped.n_tokens, 1, "the stop id ends the output (its text not in it): %d", stopped.n_tokens);
    la_test_gen_free(&control);
    la_test_gen_free(&longer);
    la_test_gen_free(&stopped);
    la_engine_destroy(e);
}

Test(token_choice, allowed_token_ids_keep_only_those) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    long_params(&p, 10);
    p.sampling.temperature = 1.0f;
    int32_t allowed[3] = {100, 200, 300};
    p.sampling.allowed_token_ids = allowed;
    p.sampling.n_allowed_token_ids = 3;
    la_test_gen g;
    la_test_generate(e, &p, &g);
    for (int32_t i = 0; i < g.n_tokens; i++) cr_assert(g.tokens[i] == 100 || g.tokens[i] == 200 || g.tokens[i] == 300);
    la_test_gen_free(&g);
    la_engine_destroy(e);
}

Test(token_choice, out_of_range_values_are_refused_at_submit) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    la_err err = {0};
    int32_t bad = 999999;
    la_logit_bias lb = {5, 101.0f};
    for (int c = 0; c < 6; c++) {
        long_params(&p, 4);
        if (c == 0) p.sampling.frequency_penalty = 2.5f;
        if (c == 1) p.sampling.repetition_penalty = -1.0f;
        if (c == 2) p.sampling.stop_token_ids = &bad, p.sampling.n_stop_token_ids = 1;
        if (c == 3) p.sampling.logit_bias = &lb, p.sampling.n_logit_bias = 1;
        if (c == 4) p.sampling.min_tokens = 5;
        if (c == 5) p.sampling.top_logprobs = 3;
        cr_assert_eq(la_engine_submit(e, &p, NULL, &err), LA_ERR_INVALID_ARG, "case %d", c);
    }
    la_engine_destroy(e);
}

/* ---- n > 1 ------------------------------------------------------------------------------- */

typedef struct choices {
    la_test_gen g[4];
    int32_t n_done;
} choices;

static void on_choice(void *user, const la_event *ev) {
    choices *c = user;
    cr_assert(ev->index >= 0 && ev->index < 4);
    la_test_on_event(&c->g[ev->index], ev);
    if (ev->kind == LA_EVENT_DONE) c->n_done++;
}

static void run_choices(la_engine *e, la_request_params *p, choices *c) {
    memset(c, 0, sizeof *c);
    p->on_event = on_choice;
    p->user = c;
    la_err err = {0};
    cr_assert(la_engine_submit(e, p, NULL, &err) == LA_OK, "%s", err.msg);
    while (c->n_done < p->sampling.n) la_engine_step(e, &err);
    cr_assert(!la_engine_has_work(e));
    cr_assert(la_engine_check(e, &err) == LA_OK, "%s", err.msg);
}

Test(token_choice, n3_at_temperature_0_gives_three_equal_choices) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    long_params(&p, 20);
    p.sampling.n = 3;
    choices c;
    run_choices(e, &p, &c);
    for (int i = 1; i < 3; i++) cr_assert(same_tokens(&c.g[0], &c.g[i]), "choice %d", i);
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    cr_assert_eq(st.requests_ok, 3, "each choice counted once");
    cr_assert_eq(st.prompt_tokens, c.g[0].stats.n_prompt_tokens, "the prompt once");
    for (int i = 0; i < 3; i++) la_test_gen_free(&c.g[i]);
    la_engine_destroy(e);
}

/* Choice i draws from the stream of seed ^ (golden * i) over KV blocks it shares with the
 * others (prompt and documents) plus a copy of the last prompt block: each must equal a
 * request of its own with that seed, computed from scratch. */
Test(token_choice, n3_sampled_choices_are_reproducible_and_equal_their_n1_twins) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_engine *fresh = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    rag_params(&p, 24);
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 0x123456789abcdefull;
    p.sampling.ignore_eos = true;
    p.sampling.n = 3;
    choices a, b;
    run_choices(e, &p, &a);
    run_choices(e, &p, &b);
    for (int i = 0; i < 3; i++) cr_assert(same_tokens(&a.g[i], &b.g[i]), "choice %d reproducible", i);
    cr_assert(!same_tokens(&a.g[0], &a.g[1]) || !same_tokens(&a.g[1], &a.g[2]), "sampled choices differ");
    for (int i = 0; i < 3; i++) {
        la_request_params q;
        rag_params(&q, 24);
        q.sampling.temperature = 1.0f;
        q.sampling.ignore_eos = true;
        q.sampling.seed = p.sampling.seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)i);
        la_test_gen twin;
        la_test_generate(fresh, &q, &twin);
        cr_assert(same_tokens(&a.g[i], &twin), "choice %d equals its n = 1 twin", i);
        la_test_gen_free(&twin);
    }
    for (int i = 0; i < 3; i++) la_test_gen_free(&a.g[i]), la_test_gen_free(&b.g[i]);
    la_engine_destroy(e);
    la_engine_destroy(fresh);
}

/* A pool of 64 blocks: the choices' copies and growing tails share it with the prompt's
 * blocks, and the accounting check after the run finds every pin returned. */
Test(token_choice, n_choices_on_a_small_pool_are_equal_and_return_every_pin) {
    la_engine *e = la_test_engine(rag_tiny(), 64, 16);
    la_request_params p;
    rag_params(&p, 8);
    p.sampling.ignore_eos = true;
    p.sampling.n = 3;
    choices c;
    run_choices(e, &p, &c);
    for (int i = 1; i < 3; i++) cr_assert(same_tokens(&c.g[0], &c.g[i]), "choice %d", i);
    for (int i = 0; i < 3; i++) la_test_gen_free(&c.g[i]);
    la_engine_destroy(e);
}

/* An n = 3 request that ends before its choices fork -- cancelled while queued, or queued
 * when the engine is destroyed -- still ends every choice: one DONE per index (a caller
 * waits for n of them; the server's call did, and leaked). */
Test(token_choice, n_choices_that_never_fork_each_get_their_done) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    rag_params(&p, 8);
    p.sampling.n = 3;
    choices c;
    memset(&c, 0, sizeof c);
    p.on_event = on_choice;
    p.user = &c;
    la_err err = {0};
    uint64_t id = 0;
    LA_CHECK_OK(la_engine_submit(e, &p, &id, &err), err);
    la_engine_cancel(e, id); /* before any step: still queued */
    while (c.n_done < 3 && la_engine_has_work(e)) la_engine_step(e, &err);
    cr_assert_eq(c.n_done, 3, "%d DONE events", c.n_done);
    for (int i = 0; i < 3; i++) cr_assert_eq(c.g[i].finish, LA_FINISH_CANCELLED, "choice %d", i);
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    cr_assert_eq(st.requests_cancelled, 3, "each choice counted once");
    cr_assert_eq(st.requests_ok + st.requests_error, 0);
    for (int i = 0; i < 3; i++) la_test_gen_free(&c.g[i]);
    la_engine_destroy(e);

    /* destroyed with the request queued: each choice ends (cancelled) */
    e = la_test_engine(rag_tiny(), 0, 16);
    rag_params(&p, 8);
    p.sampling.n = 4;
    memset(&c, 0, sizeof c);
    p.on_event = on_choice;
    p.user = &c;
    LA_CHECK_OK(la_engine_submit(e, &p, NULL, &err), err);
    la_engine_destroy(e);
    cr_assert_eq(c.n_done, 4, "%d DONE events", c.n_done);
    for (int i = 0; i < 4; i++) cr_assert_eq(c.g[i].finish, LA_FINISH_CANCELLED, "choice %d", i);
    for (int i = 0; i < 4; i++) la_test_gen_free(&c.g[i]);
}

/* ---- structured output, the cache reset --------------------------------------------------- */

Test(token_choice, json_schema_output_parses_and_has_the_required_properties) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    rag_params(&p, 48);
    p.sampling.response_format = LA_RESPONSE_JSON_SCHEMA;
    p.sampling.json_schema = "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"},"
                             " \"year\": {\"type\": \"integer\"}}, \"required\": [\"city\", \"year\"]}";
    for (int sampled = 0; sampled < 2; sampled++) {
        p.sampling.temperature = sampled ? 1.0f : 0.0f;
        la_test_gen g;
        la_test_generate(e, &p, &g);
        cJSON *j = cJSON_Parse(g.text);
        cr_assert(j, "not JSON: %s", g.text);
        cr_assert(cJSON_IsString(cJSON_GetObjectItem(j, "city")) && cJSON_IsNumber(cJSON_GetObjectItem(j, "year")), "%s", g.text);
        cJSON_Delete(j);
        la_test_gen_free(&g);
    }
    la_err err = {0};
    p.sampling.max_tokens = 10; /* {"city":"","year":0} is 21 bytes */
    cr_assert_eq(la_engine_submit(e, &p, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "max_tokens"), "%s", err.msg);
    p.sampling.json_schema = "{\"type\": \"string\", \"pattern\": \"x\"}";
    p.sampling.max_tokens = 40;
    cr_assert_eq(la_engine_submit(e, &p, NULL, &err), LA_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "pattern"), "%s", err.msg);
    la_engine_destroy(e);
}

typedef struct reset_call {
    la_engine *e;
    int64_t dropped;
    volatile int done;
} reset_call;

static void *reset_thread(void *arg) {
    reset_call *rc = arg;
    la_err err = {0};
    la_engine_reset_prefix_cache(rc->e, &rc->dropped, &err);
    rc->done = 1;
    return NULL;
}

Test(token_choice, reset_prefix_cache_drops_every_unpinned_block_documents_included) {
    la_engine *e = la_test_engine(rag_tiny(), 0, 16);
    la_request_params p;
    rag_params(&p, 4);
    la_test_gen g;
    la_test_generate(e, &p, &g);
    la_test_gen_free(&g);
    la_engine_step(e, NULL);
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    cr_assert_gt(st.kv_blocks_cached, 0);
    int64_t cached = st.kv_blocks_cached;
    reset_call rc = {e, -1, 0};
    pthread_t th;
    pthread_create(&th, NULL, reset_thread, &rc);
    while (!rc.done) { /* the engine thread's part */
        la_engine_wait_work(e, 10);
        if (la_engine_has_work(e)) la_engine_step(e, NULL);
    }
    pthread_join(th, NULL);
    cr_assert_eq(rc.dropped, cached);
    la_engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_cached, 0);
    cr_assert_eq(st.kv_blocks_free, st.kv_blocks_total);
    /* the document is computed again */
    la_test_generate(e, &p, &g);
    cr_assert_eq(g.stats.doc_tokens_reused, 0);
    la_test_gen_free(&g);
    la_engine_destroy(e);
}
