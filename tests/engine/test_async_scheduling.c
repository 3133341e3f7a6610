/* Async scheduling (engine/step.c, la_engine_options.async_scheduling): with it on, the same
 * requests give the same tokens, texts and finish reasons as with it off, through eos, stop
 * strings, lengths, preemption, cancellation and shutdown with a step queued; on the CPU
 * backend (its argmax_begin computes at once, so nothing overlaps, but every branch of the
 * engine runs). The bundled model, whose answers end with eos. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/engine_util.h"
#include "common/test_util.h"
#include "backend/backend.h"
#include "engine/engine_internal.h"

static char g_dir[512];
static const char *model_dir(void) {
    snprintf(g_dir, sizeof g_dir, "%s/models/rag-tiny", LA_SOURCE_DIR);
    return g_dir;
}

/* max_batch_tokens 0: the default; prefill_first: la_engine_options' */
static la_engine *engine_with(la_async_scheduling mode, int64_t kv_blocks, int32_t max_batch_tokens,
                              bool prefill_first) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = model_dir();
    o.kv_blocks = kv_blocks;
    o.n_threads = 2;
    o.max_running = 64;
    o.async_scheduling = mode;
    o.max_batch_tokens = max_batch_tokens;
    o.prefill_first = prefill_first;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    return e;
}

static la_engine *engine(la_async_scheduling mode, int64_t kv_blocks) { return engine_with(mode, kv_blocks, 0, false); }

static const char *k_docs[6] = {
    "Paris is the capital and most populous city of France.",
    "Berlin is the capital and largest city of Germany by both area and population.",
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris.",
    "Mount Everest is Earth's highest mountain above sea level.",
    "The Nile is a major north-flowing river in northeastern Africa.",
    "Tokyo is the capital of Japan and its most populous city.",
};
static const char *k_questions[4] = {
    "Which city is the capital of France?",
    "Where is the Eiffel Tower?",
    "What is the highest mountain?",
    "Which river flows north through Africa?",
};

enum { N = 24 };
/* KV blocks that admit all of the tiny-pool test's 6 requests but not their longest answers */
#define TINY_POOL 30

typedef struct req_spec {
    la_segment segs[3];
    int n_docs;
    const char *question;
    int32_t max_tokens;
    bool ignore_eos;
    float temperature; /* 0: greedy */
    uint64_t seed;
    char stop[16]; /* "" : none */
    const char *stop_list[1];
} req_spec;

static void spec_params(req_spec *s, la_request_params *rp) {
    la_request_params_init(rp);
    rp->docs = s->segs;
    rp->n_docs = s->n_docs;
    rp->prompt.text = s->question;
    rp->method = LA_METHOD_LAZY;
    rp->sampling.max_tokens = s->max_tokens;
    rp->sampling.ignore_eos = s->ignore_eos;
    rp->sampling.temperature = s->temperature;
    rp->sampling.seed = s->seed;
    if (s->stop[0]) {
        s->stop_list[0] = s->stop;
        rp->sampling.stop = s->stop_list;
        rp->sampling.n_stop = 1;
    }
}

static void make_specs(req_spec *specs) {
    for (int i = 0; i < N; i++) {
        req_spec *s = &specs[i];
        memset(s, 0, sizeof *s);
        s->n_docs = 1 + i % 3;
        for (int d = 0; d < s->n_docs; d++) s->segs[d] = (la_segment){.text = k_docs[(i + 2 * d) % 6]};
        s->question = k_questions[i % 4];
        s->max_tokens = 4 + (i * 7) % 19; /* 4 .. 22: requests end at different steps */
        s->ignore_eos = i % 4 == 3;       /* most end at eos when the model says so */
    }
}

/* Submit specs[0..n) to e, their events into got[i] (ids: their request ids, or NULL). */
static void submit_all(la_engine *e, req_spec *specs, la_test_gen *got, int n, uint64_t *ids) {
    for (int i = 0; i < n; i++) {
        la_request_params rp;
        spec_params(&specs[i], &rp);
        memset(&got[i], 0, sizeof got[i]);
        rp.on_event = la_test_on_event;
        rp.user = &got[i];
        la_err err = {0};
        LA_CHECK_OK(la_engine_submit(e, &rp, ids ? &ids[i] : NULL, &err), err);
    }
}

/* Submit every spec to e at once and run it to the end: got[i]. */
static void run_all(la_engine *e, req_spec *specs, la_test_gen *got, int n) {
    submit_all(e, specs, got, n, NULL);
    la_err err = {0};
    LA_CHECK_OK(la_engine_run(e, &err), err);
}

/* Step e until a step is queued ahead (every request decodes). */
static void step_until_queued(la_engine *e) {
    la_err err = {0};
    for (int steps = 0; !e->ahead && steps < 100; steps++) {
        LA_CHECK_OK(la_engine_step(e, &err), err);
    }
    cr_assert(e->ahead != NULL, "a step is queued once every request decodes");
}

static void assert_same(const la_test_gen *ref, const la_test_gen *got, int i) {
    cr_assert(got->done && ref->done, "request %d did not finish", i);
    cr_assert_eq(got->status, ref->status, "request %d: %s / %s", i, got->error, ref->error);
    cr_assert_eq(got->finish, ref->finish, "request %d: finish %d, off %d", i, (int)got->finish, (int)ref->finish);
    cr_assert_eq(got->n_tokens, ref->n_tokens, "request %d: %d tokens, off %d", i, got->n_tokens, ref->n_tokens);
    for (int t = 0; t < ref->n_tokens; t++)
        cr_assert_eq(got->tokens[t], ref->tokens[t], "request %d token %d", i, t);
    cr_assert_str_eq(got->text ? got->text : "", ref->text ? ref->text : "", "request %d", i);
}

/* The specs with a stop string cut from the middle of the reference answer of every third
 * request (found by a run without stops), so that those stop a few tokens in: their row of
 * the step queued ahead is dropped. */
static void add_stops(req_spec *specs, const la_test_gen *plain, int n) {
    for (int i = 0; i < n; i += 3) {
        const char *t = plain[i].text ? plain[i].text : "";
        size_t n = strlen(t);
        if (n < 6) continue;
        snprintf(specs[i].stop, sizeof specs[i].stop, "%.2s", t + n / 2);
    }
}

static void on_equals_off(int64_t kv_blocks, int n, bool long_answers) {
    req_spec specs[N];
    make_specs(specs);
    for (int i = 0; long_answers && i < n; i++) specs[i].ignore_eos = true, specs[i].max_tokens = 40;
    la_test_gen plain[N], ref[N], got[N];
    la_engine *off = engine(LA_ASYNC_OFF, kv_blocks);
    run_all(off, specs, plain, n);
    if (!long_answers) add_stops(specs, plain, n);
    run_all(off, specs, ref, n);
    la_engine *on = engine(LA_ASYNC_ON, kv_blocks);
    run_all(on, specs, got, n);
    int n_stop = 0, n_eos = 0, n_len = 0;
    for (int i = 0; i < n; i++) {
        assert_same(&ref[i], &got[i], i);
        if (specs[i].stop[0] && ref[i].finish == LA_FINISH_STOP) n_stop++;
        else if (ref[i].finish == LA_FINISH_STOP) n_eos++;
        else n_len++;
    }
    if (n == N) /* the cases the test is for did occur */
        cr_assert(n_stop >= 2 && n_eos >= 2 && n_len >= 2, "stop strings %d, eos %d, lengths %d", n_stop, n_eos, n_len);
    la_engine_stats st, st_off;
    la_engine_get_stats(on, &st);
    la_engine_get_stats(off, &st_off);
    cr_assert(st.async_scheduling && !st_off.async_scheduling);
    cr_assert_gt(st.steps_async, 10, "steps queued ahead: %lld", (long long)st.steps_async);
    cr_assert_eq(st_off.steps_async, 0);
    if (!long_answers) cr_assert_gt(st.rows_dropped, 0, "a request that stopped had its queued row dropped");
    cr_assert_eq(st.kv_blocks_pinned, 0);
    cr_assert_eq(st.requests_ok, n);
    if (kv_blocks < 256) /* packing ahead found no block, and the engine preempted after reading back */
        cr_assert(on->step_time.ahead_no_space > 0 && st.n_preemptions > 0, "%lld steps without a block, %lld preemptions",
                  (long long)on->step_time.ahead_no_space, (long long)st.n_preemptions);
    la_err err = {0};
    LA_CHECK_OK(la_engine_check(on, &err), err);
    for (int i = 0; i < n; i++) {
        la_test_gen_free(&plain[i]);
        la_test_gen_free(&ref[i]);
        la_test_gen_free(&got[i]);
    }
    la_engine_destroy(on);
    la_engine_destroy(off);
}

Test(async_scheduling, same_tokens_texts_and_finish_reasons_as_without) { on_equals_off(4096, N, false); }

/* A pool too small for every request's tail: packing ahead finds no block and the engine
 * reads the queued step back first, then preempts as without async scheduling. */
Test(async_scheduling, a_tiny_pool_falls_back_and_still_matches) { on_equals_off(TINY_POOL, 6, true); }

/* A request cancelled while a step holding its row is queued finishes cancelled; the others
 * end as without async scheduling; no block stays pinned. */
Test(async_scheduling, cancel_while_a_step_is_queued) {
    req_spec specs[N];
    make_specs(specs);
    for (int i = 0; i < N; i++) specs[i].ignore_eos = true, specs[i].max_tokens = 20;
    la_test_gen ref[N], got[N];
    la_engine *off = engine(LA_ASYNC_OFF, 4096);
    run_all(off, specs, ref, N);
    la_engine *on = engine(LA_ASYNC_ON, 4096);
    uint64_t ids[N];
    submit_all(on, specs, got, N, ids);
    step_until_queued(on);
    la_err err = {0};
    for (int k = 0; k < 3; k++) {
        LA_CHECK_OK(la_engine_step(on, &err), err);
    }
    cr_assert(on->ahead != NULL);
    la_engine_cancel(on, ids[5]);
    LA_CHECK_OK(la_engine_run(on, &err), err);
    for (int i = 0; i < N; i++) {
        if (i == 5) {
            cr_assert(got[i].done && got[i].finish == LA_FINISH_CANCELLED, "finish %d", (int)got[i].finish);
            cr_assert_lt(got[i].n_tokens, 20);
            for (int t = 0; t < got[i].n_tokens; t++) cr_assert_eq(got[i].tokens[t], ref[i].tokens[t]);
        } else {
            assert_same(&ref[i], &got[i], i);
        }
    }
    la_engine_stats st;
    la_engine_get_stats(on, &st);
    cr_assert_eq(st.kv_blocks_pinned, 0);
    cr_assert_eq(st.requests_cancelled, 1);
    LA_CHECK_OK(la_engine_check(on, &err), err);
    for (int i = 0; i < N; i++) {
        la_test_gen_free(&ref[i]);
        la_test_gen_free(&got[i]);
    }
    la_engine_destroy(on);
    la_engine_destroy(off);
}

/* Destroying the engine with a step queued waits for it and ends its requests cancelled
 * (ASan: nothing leaks or is read after free). */
Test(async_scheduling, destroy_with_a_step_queued) {
    req_spec specs[N];
    make_specs(specs);
    la_test_gen got[N];
    la_engine *on = engine(LA_ASYNC_ON, 4096);
    for (int i = 0; i < N; i++) specs[i].ignore_eos = true, specs[i].max_tokens = 30;
    submit_all(on, specs, got, N, NULL);
    step_until_queued(on);
    la_engine_destroy(on);
    for (int i = 0; i < N; i++) {
        cr_assert(got[i].done && got[i].finish == LA_FINISH_CANCELLED, "request %d: finish %d", i, (int)got[i].finish);
        la_test_gen_free(&got[i]);
    }
}

/* Requests that want logits, logprobs or sampling never run ahead (their tokens are chosen on
 * the host from the logits); AUTO is off on the CPU; a bad mode is refused. */
Test(async_scheduling, only_greedy_steps_without_logits_run_ahead_and_auto_is_off_on_the_cpu) {
    la_engine *on = engine(LA_ASYNC_ON, 4096);
    req_spec specs[N];
    make_specs(specs);
    la_test_gen got[4];
    for (int i = 0; i < 4; i++) {
        specs[i].ignore_eos = true, specs[i].max_tokens = 8;
        specs[i].temperature = 0.7f, specs[i].seed = 7 + (uint64_t)i;
    }
    run_all(on, specs, got, 4);
    la_err err = {0};
    la_engine_stats st;
    la_engine_get_stats(on, &st);
    cr_assert_eq(st.steps_async, 0);
    cr_assert_eq(st.requests_ok, 4);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(got[i].n_tokens, 8);
        la_test_gen_free(&got[i]);
    }
    la_engine_destroy(on);

    la_engine *dflt = engine(LA_ASYNC_AUTO, 4096);
    la_engine_get_stats(dflt, &st);
    cr_assert(!st.async_scheduling, "AUTO: off on the CPU, whose steps do not run apart from the host");
    la_engine_destroy(dflt);

    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = model_dir();
    o.async_scheduling = LA_ASYNC_COUNT;
    la_engine *bad = NULL;
    cr_assert_eq(la_engine_create(&o, &bad, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "async_scheduling"), "%s", err.msg);
}

/* ---- prefill_first (la_engine_options.prefill_first, scheduler.c) ---------------------- */

/* A request's events and the global order of its first two tokens. */
typedef struct ordered {
    la_test_gen *g;
    int *clock;
    int first, second; /* the clock at its first / second TOKEN event (first: DONE when it
                          ended at its first token); 0: not yet */
} ordered;

static void on_ordered(void *user, const la_event *ev) {
    ordered *o = user;
    if (ev->kind == LA_EVENT_TOKEN) {
        ++*o->clock;
        if (!o->first) o->first = *o->clock;
        else if (!o->second) o->second = *o->clock;
    } else if (ev->kind == LA_EVENT_DONE && !o->first) { /* ended at its first token (eos) */
        o->first = ++*o->clock;
    }
    la_test_on_event(o->g, ev);
}

/* Every spec at once on an engine whose steps hold 64 tokens (the burst's documents and
 * questions take several steps to prefill): got[i], and whether every request's first
 * token came before any request's second. */
static bool run_budgeted(bool prefill_first, req_spec *specs, la_test_gen *got) {
    la_engine *e = engine_with(LA_ASYNC_AUTO, 4096, 64, prefill_first);
    la_err err = {0};
    int clock = 0;
    ordered ord[N];
    for (int i = 0; i < N; i++) {
        la_request_params rp;
        spec_params(&specs[i], &rp);
        memset(&got[i], 0, sizeof got[i]);
        ord[i] = (ordered){.g = &got[i], .clock = &clock};
        rp.on_event = on_ordered;
        rp.user = &ord[i];
        LA_CHECK_OK(la_engine_submit(e, &rp, NULL, &err), err);
    }
    LA_CHECK_OK(la_engine_run(e, &err), err);
    la_engine_destroy(e);
    int last_first = 0, first_second = INT32_MAX;
    for (int i = 0; i < N; i++) {
        cr_assert(ord[i].first > 0 && got[i].done, "request %d did not finish: %s", i, got[i].error);
        if (ord[i].first > last_first) last_first = ord[i].first;
        if (ord[i].second && ord[i].second < first_second) first_second = ord[i].second;
    }
    return last_first < first_second;
}

/* prefill_first gives the same answers; every request's first token comes before anyone's
 * second under it, and not without it (decode rows go first, beside the prefill chunks). */
Test(async_scheduling, prefill_first_prefills_the_burst_before_anyone_decodes) {
    req_spec specs[N];
    make_specs(specs);
    static la_test_gen base[N], got[N];
    cr_assert(!run_budgeted(false, specs, base), "decode-first: some request decodes while others prefill");
    cr_assert(run_budgeted(true, specs, got), "prefill-first: every first token before any second");
    for (int i = 0; i < N; i++) assert_same(&base[i], &got[i], i);
    for (int i = 0; i < N; i++) la_test_gen_free(&base[i]), la_test_gen_free(&got[i]);
}

/* A document job whose request was cancelled keeps computing (its KV is cached for later
 * requests), beside the decode rows: under prefill_first it does not hold decoding. */
Test(async_scheduling, prefill_first_does_not_hold_decoding_for_a_cancelled_requests_document) {
    la_engine *e = engine_with(LA_ASYNC_AUTO, 4096, 64, true);
    la_err err = {0};
    req_spec a;
    memset(&a, 0, sizeof a);
    a.segs[0] = (la_segment){.text = k_docs[0]};
    a.n_docs = 1;
    a.question = k_questions[0];
    a.max_tokens = 200;
    a.ignore_eos = true;
    la_test_gen ga, gb;
    submit_all(e, &a, &ga, 1, NULL);
    for (int i = 0; i < 100 && ga.n_tokens < 1; i++) LA_CHECK_OK(la_engine_step(e, &err), err);
    cr_assert(ga.n_tokens >= 1, "A decodes");
    /* B: a long document of its own, then cancelled after one step of its job */
    static char doc[4800];
    for (size_t k = 0; k + 60 < sizeof doc; k += 59) memcpy(doc + k, "The orchard keeps forty kinds of apple in its north field. ", 59);
    doc[sizeof doc - 1] = '\0';
    req_spec b;
    memset(&b, 0, sizeof b);
    b.segs[0] = (la_segment){.text = doc};
    b.n_docs = 1;
    b.question = k_questions[0];
    b.max_tokens = 4;
    uint64_t id_b = 0;
    submit_all(e, &b, &gb, 1, &id_b);
    LA_CHECK_OK(la_engine_step(e, &err), err);
    la_engine_cancel(e, id_b);
    const int32_t before = ga.n_tokens;
    for (int i = 0; i < 10; i++) LA_CHECK_OK(la_engine_step(e, &err), err);
    cr_assert(gb.done && gb.finish == LA_FINISH_CANCELLED, "B is cancelled");
    cr_assert(e->jobs_head != NULL, "B's document is still being computed");
    cr_assert_geq(ga.n_tokens - before, 9, "A decoded %d tokens in 10 steps", ga.n_tokens - before);
    la_engine_destroy(e);
    la_test_gen_free(&ga), la_test_gen_free(&gb);
}
