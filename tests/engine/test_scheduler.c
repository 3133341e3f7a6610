/* The scheduler (src/engine/scheduler.c, through the API of engine.c): concurrency,
 * preemption, cancellation, limits, sampling and stop strings, on the tiny f32 checkpoint. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/engine_util.h"
#include "common/test_util.h"
#include "backend/backend.h"
#include "engine/backend_model.h"
#include "engine/engine_internal.h"
#include "model/config.h"

/* The template strings, written out independently of model/prompt_template.h. */
#define LA_TEST_RAG_SYSTEM                                                                     \
    "You are an intelligent AI assistant. Please answer questions based on the user's "       \
    "instructions. Below are some reference documents that may help you in answering the "    \
    "user's question."
#define LA_TEST_RAG_INSTRUCTION                                                                \
    "Please write a high-quality answer for the given question using only the provided "      \
    "search documents (some of which might be irrelevant).\n"

static char g_dir[512];
static const char *tiny_dir(void) {
    snprintf(g_dir, sizeof g_dir, "%s/tests/fixtures/models/tiny-f32-tied", LA_SOURCE_DIR);
    return g_dir;
}

static const char *k_docs[4] = {
    "Paris is the capital and most populous city of France.",
    "Berlin is the capital and largest city of Germany by both area and population.",
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris.",
    "Mount Everest is Earth's highest mountain above sea level.",
};

static void params(la_request_params *rp, la_segment *segs, int n_docs, int shift, la_method m,
                   int32_t max_tokens) {
    for (int i = 0; i < n_docs; i++) segs[i] = (la_segment){.text = k_docs[(i + shift) % 4]};
    la_request_params_init(rp);
    rp->docs = segs;
    rp->n_docs = n_docs;
    rp->prompt.text = "Question: which city is the capital of France? Answer:";
    rp->method = m;
    rp->sampling.max_tokens = max_tokens;
    rp->sampling.ignore_eos = true;
}

static void concurrent_equals_sequential(la_method m, int64_t kv_blocks) {
    enum { N = 24 };
    la_engine *seq = la_test_engine(tiny_dir(), 4096, 16);
    la_engine *par = la_test_engine(tiny_dir(), kv_blocks, 16);
    la_test_gen ref[N], got[N];
    la_segment segs[N][4];
    for (int i = 0; i < N; i++) {
        la_request_params rp;
        params(&rp, segs[i], 1 + i % 4, i, m, 20);
        la_test_generate(seq, &rp, &ref[i]);
    }
    for (int i = 0; i < N; i++) {
        la_request_params rp;
        params(&rp, segs[i], 1 + i % 4, i, m, 20);
        memset(&got[i], 0, sizeof got[i]);
        rp.on_event = la_test_on_event;
        rp.user = &got[i];
        la_err err = {0};
        LA_CHECK_OK(la_engine_submit(par, &rp, NULL, &err), err);
    }
    la_err err = {0};
    la_engine_run(par, &err);
    for (int i = 0; i < N; i++) {
        cr_assert(got[i].done && got[i].finish == LA_FINISH_LENGTH, "request %d: %s", i, got[i].error);
        cr_assert_eq(got[i].n_tokens, ref[i].n_tokens);
        for (int t = 0; t < ref[i].n_tokens; t++)
            cr_assert_eq(got[i].tokens[t], ref[i].tokens[t], "%s request %d token %d", la_method_name(m), i, t);
        cr_assert_str_eq(got[i].text, ref[i].text);
        la_test_gen_free(&got[i]);
        la_test_gen_free(&ref[i]);
    }
    la_engine_stats st;
    la_engine_get_stats(par, &st);
    cr_assert_eq(st.kv_blocks_pinned, 0);
    cr_assert_eq(st.requests_ok, N);
    LA_CHECK_OK(la_engine_check(par, &err), err);
    if (kv_blocks < 64) {
        cr_assert_gt(st.n_preemptions, 0, "the small pool must preempt");
        cr_assert_gt(st.kv_evictions, 0, "the small pool must evict");
    }
    la_engine_destroy(seq);
    la_engine_destroy(par);
}

Test(scheduler, concurrent_requests_match_sequential_runs_lazy) { concurrent_equals_sequential(LA_METHOD_LAZY, 4096); }
Test(scheduler, concurrent_requests_match_sequential_runs_prefix) { concurrent_equals_sequential(LA_METHOD_PREFIX, 4096); }
Test(scheduler, a_tiny_pool_preempts_and_still_matches_lazy) { concurrent_equals_sequential(LA_METHOD_LAZY, 40); }
Test(scheduler, a_tiny_pool_preempts_and_still_matches_prefix) { concurrent_equals_sequential(LA_METHOD_PREFIX, 40); }

/* la_engine_stats' step clock counts what ran: one recompute request of P prompt tokens and
 * N output tokens is one prefill step of P rows and N - 1 decode steps of one row each; its
 * times are non-negative and the decode steps' forward is within their whole time. */
Test(scheduler, step_stats_count_the_prefill_and_decode_steps) {
    la_engine *e = la_test_engine(tiny_dir(), 4096, 16);
    la_engine_stats s0, s1;
    la_engine_get_stats(e, &s0);
    la_request_params rp;
    la_segment segs[4];
    params(&rp, segs, 2, 0, LA_METHOD_RECOMPUTE, 6);
    la_test_gen g;
    la_test_generate(e, &rp, &g);
    cr_assert_eq(g.status, LA_OK, "%s", g.error);
    cr_assert_eq(g.n_tokens, 6);
    la_engine_get_stats(e, &s1);
    cr_assert_eq(s1.steps_computed - s0.steps_computed, 6);
    cr_assert_eq(s1.steps_decode - s0.steps_decode, 5);
    cr_assert_eq(s1.step_rows - s0.step_rows, g.stats.n_prompt_tokens + 5, "%lld rows, prompt %d",
                 (long long)(s1.step_rows - s0.step_rows), g.stats.n_prompt_tokens);
    cr_assert(s1.step_schedule_s >= s0.step_schedule_s && s1.step_after_s >= s0.step_after_s);
    cr_assert(s1.step_forward_s > s0.step_forward_s);
    const double dec = s1.step_decode_s - s0.step_decode_s, dec_fwd = s1.step_decode_forward_s - s0.step_decode_forward_s;
    cr_assert(dec_fwd > 0 && dec_fwd <= dec && dec_fwd <= s1.step_forward_s - s0.step_forward_s);
    /* batch_begin's host time is a part of the forward's */
    const double bb = s1.step_batch_begin_s - s0.step_batch_begin_s,
                 dec_bb = s1.step_decode_batch_begin_s - s0.step_decode_batch_begin_s;
    cr_assert(bb > 0 && bb <= s1.step_forward_s - s0.step_forward_s, "batch_begin %g s", bb);
    cr_assert(dec_bb > 0 && dec_bb <= bb && dec_bb <= dec_fwd, "decode batch_begin %g s", dec_bb);
    la_test_gen_free(&g);
    la_engine_destroy(e);
}

Test(scheduler, cancel_mid_decode_frees_every_block_and_keeps_cached_documents) {
    la_engine *e = la_test_engine(tiny_dir(), 256, 16);
    la_segment segs[4];
    la_request_params rp;
    params(&rp, segs, 3, 0, LA_METHOD_LAZY, 200);
    la_test_gen g = {0};
    rp.on_event = la_test_on_event;
    rp.user = &g;
    uint64_t id;
    la_err err = {0};
    LA_CHECK_OK(la_engine_submit(e, &rp, &id, &err), err);
    while (g.n_tokens < 5) la_engine_step(e, &err);
    LA_CHECK_OK(la_engine_cancel(e, id), err);
    la_engine_run(e, &err);
    cr_assert(g.done);
    cr_assert_eq(g.finish, LA_FINISH_CANCELLED);
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    cr_assert_eq(st.kv_blocks_pinned, 0, "cancellation frees every block");
    cr_assert_gt(st.kv_blocks_cached, 0, "the documents stay cached");
    /* the same documents again: fully reused */
    la_test_gen g2;
    params(&rp, segs, 3, 0, LA_METHOD_LAZY, 4);
    la_test_generate(e, &rp, &g2);
    cr_assert_eq(g2.stats.doc_tokens_computed, 0);
    cr_assert_gt(g2.stats.doc_tokens_reused, 0);
    la_test_gen_free(&g);
    la_test_gen_free(&g2);
    cr_assert_eq(la_engine_cancel(e, 9999), LA_ERR_NOT_FOUND);
    la_engine_destroy(e);
}

Test(scheduler, a_full_queue_says_busy_and_loses_nothing) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.max_queue = 3;
    o.n_threads = 1;
    la_engine *e;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    la_test_gen g[3] = {0};
    la_segment segs[4];
    for (int i = 0; i < 4; i++) {
        la_request_params rp;
        params(&rp, segs, 1, 0, LA_METHOD_LAZY, 3);
        rp.on_event = la_test_on_event;
        rp.user = &g[i < 3 ? i : 0];
        la_status s = la_engine_submit(e, &rp, NULL, &err);
        if (i < 3) LA_CHECK_OK(s, err);
        else cr_assert_eq(s, LA_ERR_BUSY, "%s", err.msg);
    }
    la_engine_run(e, &err);
    for (int i = 0; i < 3; i++) {
        cr_assert(g[i].done && g[i].finish == LA_FINISH_LENGTH);
        la_test_gen_free(&g[i]);
    }
    la_engine_destroy(e);
}

Test(scheduler, bad_requests_get_clear_errors) {
    la_engine *e = la_test_engine(tiny_dir(), 64, 16);
    la_err err = {0};
    la_request_params rp;
    la_segment segs[4];
    params(&rp, segs, 1, 0, LA_METHOD_LAZY, 0);
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "max_tokens") != NULL, "%s", err.msg);
    params(&rp, segs, 1, 0, LA_METHOD_LAZY, 4);
    rp.sampling.temperature = -1;
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    params(&rp, segs, 1, 0, LA_METHOD_LAZY, 4);
    segs[0].text = "";
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "documents[0] is empty") != NULL, "%s", err.msg);
    segs[0].title = "a title"; /* renders to tokens, but the document has no text */
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "documents[0] is empty") != NULL, "%s", err.msg);
    segs[0].title = NULL;
    params(&rp, segs, 1, 0, LA_METHOD_LAZY, 4);
    rp.prompt.text = "bad \xff utf-8";
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG, "%s", err.msg);
    params(&rp, segs, 4, 0, LA_METHOD_LAZY, 2000); /* 64 blocks cannot hold it */
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_TOO_LONG);
    cr_assert(strstr(err.msg, "KV blocks") != NULL, "%s", err.msg);
    params(&rp, segs, 1, 0, (la_method)77, 4);
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    int32_t bad_id = 100000;
    params(&rp, segs, 1, 0, LA_METHOD_LAZY, 4);
    rp.prompt = (la_segment){.ids = &bad_id, .n_ids = 1};
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_INVALID_ARG);
    /* nothing was queued, and the engine still serves */
    cr_assert(!la_engine_has_work(e));
    la_test_gen g;
    params(&rp, segs, 2, 0, LA_METHOD_LAZY, 3);
    la_test_generate(e, &rp, &g);
    cr_assert_eq(g.n_tokens, 3);
    la_test_gen_free(&g);
    la_engine_destroy(e);
}

Test(scheduler, context_limit_is_enforced_at_submit) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.max_context = 40;
    la_engine *e;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    la_request_params rp;
    la_segment segs[4];
    params(&rp, segs, 2, 0, LA_METHOD_LAZY, 4);
    cr_assert_eq(la_engine_submit(e, &rp, NULL, &err), LA_ERR_TOO_LONG);
    cr_assert(strstr(err.msg, "context of 40 tokens") != NULL, "%s", err.msg);
    la_engine_destroy(e);
}

/* A context past the model's positions is refused at create (its RoPE and any position
 * table end there); the model's own limit is accepted and is the default (tiny-f32-tied:
 * max_position_embeddings 131072). */
Test(scheduler, a_context_past_the_models_positions_is_refused) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.kv_blocks = 64;
    la_engine *e = NULL;
    la_err err = {0};
    o.max_context = 131073;
    cr_assert_eq(la_engine_create(&o, &e, &err), LA_ERR_INVALID_ARG);
    cr_assert_null(e);
    cr_assert(strstr(err.msg, "max_context=131073 exceeds the model's max_position_embeddings=131072"), "%s", err.msg);
    const int32_t ok[] = {131072, 0};
    for (int i = 0; i < 2; i++) {
        o.max_context = ok[i];
        LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
        cr_assert_eq(la_engine_max_context(e), 131072);
        la_engine_destroy(e);
        e = NULL;
    }
}

Test(scheduler, stop_strings_end_the_text_before_the_stop) {
    la_engine *e = la_test_engine(tiny_dir(), 256, 16);
    la_request_params rp;
    la_segment segs[4];
    la_test_gen full, cut;
    params(&rp, segs, 2, 0, LA_METHOD_LAZY, 24);
    la_test_generate(e, &rp, &full);
    cr_assert_gt(full.text_len, 6);
    /* stop at a substring that first occurs in the middle of the text */
    char stop[4];
    size_t at = full.text_len / 2;
    while (at > 0 && (full.text[at] & 0xC0) == 0x80) at--;
    memcpy(stop, full.text + at, 3);
    stop[3] = '\0';
    const char *first = strstr(full.text, stop);
    const char *stops[1] = {stop};
    params(&rp, segs, 2, 0, LA_METHOD_LAZY, 24);
    rp.sampling.stop = stops;
    rp.sampling.n_stop = 1;
    la_test_generate(e, &rp, &cut);
    cr_assert_eq(cut.finish, LA_FINISH_STOP);
    cr_assert_eq(cut.text_len, (size_t)(first - full.text), "text stops right before the stop string");
    cr_assert(strncmp(cut.text ? cut.text : "", full.text, cut.text_len) == 0);
    la_test_gen_free(&full);
    la_test_gen_free(&cut);
    la_engine_destroy(e);
}

Test(scheduler, seeded_sampling_is_reproducible) {
    la_engine *e = la_test_engine(tiny_dir(), 256, 16);
    la_request_params rp;
    la_segment segs[4];
    la_test_gen a, b, c;
    for (int k = 0; k < 3; k++) {
        params(&rp, segs, 2, 0, LA_METHOD_LAZY, 24);
        rp.sampling.temperature = 1.0f;
        rp.sampling.top_p = 0.9f;
        rp.sampling.top_k = 50;
        rp.sampling.seed = k == 2 ? 99 : 5;
        la_test_generate(e, &rp, k == 0 ? &a : k == 1 ? &b : &c);
    }
    cr_assert_eq(memcmp(a.tokens, b.tokens, sizeof(int32_t) * 24), 0, "same seed, same tokens");
    cr_assert_neq(memcmp(a.tokens, c.tokens, sizeof(int32_t) * 24), 0, "another seed, other tokens");
    la_test_gen_free(&a);
    la_test_gen_free(&b);
    la_test_gen_free(&c);
    la_engine_destroy(e);
}

Test(scheduler, chat_messages_render_the_rag_template) {
    la_engine *e = la_test_engine(tiny_dir(), 256, 16);
    la_segment docs[2] = {{.text = "Paris is in France.", .title = "Paris"},
                          {.text = "Berlin is in Germany.", .title = "Berlin"}};
    la_chat_message msg = {"user", "Where is Paris?"};
    la_request_params rp;
    la_request_params_init(&rp);
    rp.messages = &msg;
    rp.n_messages = 1;
    rp.docs = docs;
    rp.n_docs = 2;
    rp.sampling.max_tokens = 8;
    rp.sampling.ignore_eos = true;
    la_test_gen chat, raw;
    la_test_generate(e, &rp, &chat);
    /* the same blocks written out by hand */
    la_segment raw_docs[2] = {{.text = "- Title: Paris\nParis is in France.\n"},
                              {.text = "- Title: Berlin\nBerlin is in Germany.\n"}};
    la_request_params_init(&rp);
    rp.preamble.text = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" LA_TEST_RAG_SYSTEM "\n\n";
    rp.docs = raw_docs;
    rp.n_docs = 2;
    rp.prompt.text = "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n" LA_TEST_RAG_INSTRUCTION
                     "Question: Where is Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    rp.add_special = false;
    rp.sampling.max_tokens = 8;
    rp.sampling.ignore_eos = true;
    la_test_generate(e, &rp, &raw);
    cr_assert_eq(chat.stats.n_prompt_tokens, raw.stats.n_prompt_tokens);
    cr_assert_eq(memcmp(chat.tokens, raw.tokens, sizeof(int32_t) * 8), 0);
    la_test_gen_free(&chat);
    la_test_gen_free(&raw);
    la_engine_destroy(e);
}

/* Engine options out of range are refused at create with a message naming the field; the
 * CPU pool defaults to 1 GiB worth of blocks (gpu_memory_fraction applies to CUDA only). */
Test(scheduler, bad_memory_options_are_refused_and_the_cpu_pool_defaults_to_1_gib) {
    /* each a double of la_engine_options, by its offset */
#define BAD(field, v) {#field, offsetof(la_engine_options, field), v}
    static const struct {
        const char *name;
        size_t offset;
        double value;
    } bad[] = {BAD(gpu_memory_fraction, 0.0), BAD(gpu_memory_fraction, -0.5), BAD(gpu_memory_fraction, 1.5),
               BAD(kv_io_timeout_ms, NAN),    BAD(kv_io_timeout_ms, -1.0),    BAD(kv_io_timeout_ms, INFINITY),
               BAD(kv_io_timeout_ms, 86400001.0)};
#undef BAD
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        la_engine_options o;
        la_engine_options_init(&o);
        o.model_dir = tiny_dir();
        *(double *)((char *)&o + bad[i].offset) = bad[i].value;
        la_engine *e = NULL;
        la_err err = {0};
        cr_assert_eq(la_engine_create(&o, &e, &err), LA_ERR_INVALID_ARG, "%s=%g", bad[i].name, bad[i].value);
        cr_assert(strstr(err.msg, bad[i].name), "%s", err.msg);
        cr_assert_null(e);
    }
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.n_threads = 1;
    la_engine *e;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    la_backend *be = NULL;
    LA_CHECK_OK(la_backend_create(LA_DEVICE_CPU, 1, &be, &err), err);
    la_model_config cfg;
    LA_CHECK_OK(la_model_config_load(tiny_dir(), &cfg, &err), err);
    LA_CHECK_OK(la_backend_load_model(be, &cfg, NULL, &err), err);
    cr_assert_eq(st.kv_blocks_total, ((int64_t)1 << 30) / be->ops->kv_block_bytes(be, st.block_size));
    la_backend_destroy(be);
    la_engine_destroy(e);
}

/* One engine option or environment knob the CPU backend cannot honour: la_engine_create's error,
 * naming it (NULL env: none set). */
static void refused(void (*edit)(la_engine_options *), const char *env, const char *value, const char *named) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.n_threads = 1;
    if (edit) edit(&o);
    if (env) cr_assert_eq(setenv(env, value, 1), 0);
    la_engine *e = NULL;
    la_err err = {0};
    la_status s = la_engine_create(&o, &e, &err);
    if (env) unsetenv(env);
    cr_assert_eq(s, LA_ERR_INVALID_ARG, "%s: %s", named, err.msg);
    cr_assert(strstr(err.msg, named), "%s", err.msg);
    cr_assert_null(e);
}
static void too_many_threads(la_engine_options *o) { o->n_threads = LA_MAX_THREADS + 1; }
static void cpu_weights_on_cuda(la_engine_options *o) { o->device = LA_DEVICE_CUDA, o->cpu_weights = LA_CPU_WEIGHTS_F32; }
static void cpu_kv_on_cuda(la_engine_options *o) { o->device = LA_DEVICE_CUDA, o->cpu_kv = LA_CPU_KV_BF16; }

Test(scheduler, cpu_options_out_of_range_or_for_another_device_are_refused) {
    refused(too_many_threads, NULL, NULL, "n_threads");
    refused(cpu_weights_on_cuda, NULL, NULL, "cpu_weights");
    refused(cpu_kv_on_cuda, NULL, NULL, "cpu_kv");
    const char *isa[] = {"bogus", "AVX2", "sse"};
    for (size_t i = 0; i < sizeof isa / sizeof isa[0]; i++) refused(NULL, "LA_CPU_ISA", isa[i], "LA_CPU_ISA");
    const char *rows[] = {"abc", "-5", "12x"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        refused(NULL, "LA_CPU_GEMM_MAX_ROWS", rows[i], "LA_CPU_GEMM_MAX_ROWS");
    /* the knobs' own values still work */
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.n_threads = 1;
    cr_assert_eq(setenv("LA_CPU_ISA", "avx512", 1), 0);
    cr_assert_eq(setenv("LA_CPU_GEMM_MAX_ROWS", "0", 1), 0);
    la_engine *e = NULL;
    la_err err = {0};
    la_status s = la_engine_create(&o, &e, &err);
    unsetenv("LA_CPU_ISA");
    unsetenv("LA_CPU_GEMM_MAX_ROWS");
    LA_CHECK_OK(s, err);
    la_engine_destroy(e);
}

/* The token budget: 0 (the default) is the device's (1024 on the CPU; a GPU's depends on its
 * memory: not tested here), raised to max_running so that a step has room for a decode row of
 * each request admitted; a value set is kept; a negative one is refused. la_engine_stats says
 * which is in effect. */
Test(scheduler, the_token_budget_defaults_per_device_and_covers_max_running) {
    const int32_t set[][3] = {{0, 64, 1024}, {0, 2000, 2000}, {64, 2000, 64}, {4096, 8, 4096}};
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) {
        la_engine_options o;
        la_engine_options_init(&o);
        cr_assert_eq(o.max_batch_tokens, 0);
        o.model_dir = tiny_dir();
        o.n_threads = 1;
        o.kv_blocks = 64;
        o.max_batch_tokens = set[i][0];
        o.max_running = set[i][1];
        la_engine *e;
        la_err err = {0};
        LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
        la_engine_stats st;
        la_engine_get_stats(e, &st);
        cr_assert_eq(st.max_batch_tokens, set[i][2], "budget %d, max_running %d: %d in effect", set[i][0],
                     set[i][1], st.max_batch_tokens);
        la_engine_destroy(e);
    }
    /* the GPU's default, from its memory: an H100 / H200 (80 / 141 GB), a 24 GB card */
    cr_assert_eq(la_engine_default_budget((int64_t)80 << 30, 64), 8192);
    cr_assert_eq(la_engine_default_budget((int64_t)141 << 30, 1000), 8192);
    cr_assert_eq(la_engine_default_budget((int64_t)24 << 30, 64), 2048);
    cr_assert_eq(la_engine_default_budget((int64_t)24 << 30, 4000), 4000);
    cr_assert_eq(la_engine_default_budget(0, 64), 1024);
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = tiny_dir();
    o.max_batch_tokens = -1;
    la_engine *e = NULL;
    la_err err = {0};
    cr_assert_eq(la_engine_create(&o, &e, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "max_batch_tokens"), "%s", err.msg);
    cr_assert_null(e);
}

/* Issue 28's race, made certain: a hook inside la_engine_submit runs the engine until the
 * request is done before submit returns. Every event must already carry the id the caller
 * was given (written before the engine could see the request), never 0 or another one. */
typedef struct race_slot {
    uint64_t id;      /* where la_engine_submit writes the request's id */
    int n_events, n_wrong, done;
} race_slot;

static void race_on_event(void *user, const la_event *ev) {
    race_slot *s = user;
    s->n_events++;
    s->n_wrong += ev->request_id != s->id || s->id == 0;
    s->done |= ev->kind == LA_EVENT_DONE;
}

static void race_step_until_idle(la_engine *e, void *user) {
    (void)user;
    la_err err = {0};
    while (la_engine_has_work(e)) LA_CHECK_OK(la_engine_step(e, &err), err);
}

Test(scheduler, a_request_finished_before_submit_returns_has_its_id_in_every_event) {
    la_engine *e = la_test_engine(tiny_dir(), 256, 16);
    la_engine_set_submit_hook(e, race_step_until_idle, NULL);
    for (int k = 0; k < 20; k++) {
        race_slot s = {0};
        int32_t ids[3] = {5 + k, 6, 7};
        la_request_params rp;
        la_request_params_init(&rp);
        rp.prompt = (la_segment){.ids = ids, .n_ids = 3};
        rp.add_special = false;
        rp.sampling.max_tokens = 1 + k % 3;
        rp.on_event = race_on_event;
        rp.user = &s;
        la_err err = {0};
        LA_CHECK_OK(la_engine_submit(e, &rp, &s.id, &err), err);
        cr_assert(s.done, "request %d: not finished inside submit: the hook did not force the race", k);
        cr_assert_eq(s.n_wrong, 0, "request %d: %d of %d events before the id was known", k, s.n_wrong, s.n_events);
        cr_assert_gt(s.n_events, 1);
    }
    la_engine_set_submit_hook(e, NULL, NULL);
    la_engine_destroy(e);
}
