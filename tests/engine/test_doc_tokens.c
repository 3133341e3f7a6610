/* The document token cache (la_engine_options.doc_token_cache_bytes; src/tokenizer/
 * encode_cache.h) in the engine, on the bundled model: chat and raw requests whose documents
 * come back in new orders answer as an engine without it does (tokens, text, prompt and
 * document token counts), the documents' KV names (key and block hashes, which hash their
 * ids) are the same, each distinct document is tokenized once and every later use is a hit;
 * a request under a cache salt shares no entry with the unsalted ones;
 * a document the tokenizer refuses is refused the same way every time and nothing is kept
 * (and a prompt of NULL text with a length is refused);
 * a negative size is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/engine_util.h"
#include "common/test_util.h"

#define N_DOCS 4

/* Both engines hash with one deployment secret, so that their documents' KV names compare. */
static char g_secret[1024];

static la_engine *engine_with(int64_t cache_bytes) {
    if (!g_secret[0]) {
        char *tmp = la_test_tmpdir();
        snprintf(g_secret, sizeof g_secret, "%s/secret", tmp);
        free(tmp);
        FILE *f = fopen(g_secret, "w");
        cr_assert(f);
        fputs("doc-tokens-test-secret", f);
        fclose(f);
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/rag-tiny", LA_SOURCE_DIR);
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = dir;
    o.n_threads = 2;
    o.kv_blocks = 2048;
    o.kv_secret_file = g_secret;
    if (cache_bytes >= 0) o.doc_token_cache_bytes = cache_bytes;
    la_engine *e = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_engine_create(&o, &e, &err), err);
    return e;
}

static const char *const k_titles[N_DOCS] = {"Lake Baikal", "Zürich", "The Nile", "Mount Fuji (富士山)"};
static const char *const k_texts[N_DOCS] = {
    "Lake Baikal is a rift lake in Siberia. It is the deepest lake in the world, at 1,642 metres, and holds "
    "about a fifth of the fresh surface water on Earth.",
    "Zürich is the largest city in Switzerland. It lies at the north-west end of Lake Zürich; its old town "
    "stretches along both banks of the Limmat.",
    "The Nile flows north through eleven countries into the Mediterranean Sea. Its two main tributaries meet "
    "at Khartoum: the White Nile and the Blue Nile.",
    "Mount Fuji is the highest mountain in Japan, 3,776 m. It is an active stratovolcano that last erupted "
    "in 1707-1708, and a pilgrimage site for centuries."};

/* Request r: three of the documents in an order of its own. */
static void order_of(int r, int32_t *ids) {
    for (int k = 0; k < 3; k++) ids[k] = (r + k * (r % 2 ? 1 : 3)) % N_DOCS;
}

static void run_salted(la_engine *e, int r, bool chat, const char *salt, la_test_gen *g) {
    la_segment docs[3];
    int32_t ids[3];
    order_of(r, ids);
    for (int k = 0; k < 3; k++) docs[k] = (la_segment){.text = k_texts[ids[k]], .title = k_titles[ids[k]]};
    la_chat_message msg = {"user", "Which of these is the deepest lake, and how deep is it?"};
    la_request_params p;
    la_request_params_init(&p);
    if (chat) {
        p.messages = &msg;
        p.n_messages = 1;
    } else {
        p.prompt.text = "Question: which of these is the deepest lake? Answer:";
    }
    p.docs = docs;
    p.n_docs = 3;
    p.method = LA_METHOD_LAZY;
    p.sampling.max_tokens = 6;
    p.sampling.ignore_eos = true;
    p.cache_salt = salt;
    la_test_generate(e, &p, g);
}

static void run(la_engine *e, int r, bool chat, la_test_gen *g) { run_salted(e, r, chat, NULL, g); }

Test(doc_tokens, documents_seen_before_answer_as_without_the_cache_and_are_tokenized_once) {
    la_engine *on = engine_with(-1), *off = engine_with(0); /* the default (64 MiB), and off */
    int n_uses = 0;
    for (int r = 0; r < 6; r++) {
        for (int chat = 0; chat < 2; chat++) {
            la_test_gen a, b;
            run(on, r, chat, &a);
            run(off, r, chat, &b);
            n_uses += 3;
            cr_assert_eq(a.stats.n_prompt_tokens, b.stats.n_prompt_tokens, "request %d chat %d", r, chat);
            cr_assert_eq(a.stats.n_doc_tokens, b.stats.n_doc_tokens, "request %d chat %d", r, chat);
            cr_assert_eq(a.n_tokens, b.n_tokens);
            for (int32_t i = 0; i < a.n_tokens; i++) cr_assert_eq(a.tokens[i], b.tokens[i], "request %d token %d", r, i);
            cr_assert_eq(a.text_len, b.text_len);
            cr_assert(memcmp(a.text, b.text, a.text_len) == 0, "request %d: %s | %s", r, a.text, b.text);
            if (r > 0) cr_assert_gt(a.stats.doc_tokens_reused, 0, "request %d reuses its documents' KV", r);
            la_test_gen_free(&a);
            la_test_gen_free(&b);
        }
    }
    /* the raw path renders a titled document (la_prompt_render_document), the chat path the
     * bundled model's RAG template (Block-FT's): the same text, tokenized once */
    la_engine_stats st;
    la_engine_get_stats(on, &st);
    cr_assert_eq(st.doc_token_cache_misses, N_DOCS, "%lld misses", (long long)st.doc_token_cache_misses);
    cr_assert_eq(st.doc_token_cache_hits, n_uses - N_DOCS, "%lld hits", (long long)st.doc_token_cache_hits);
    cr_assert_eq(st.doc_token_cache_entries, N_DOCS);
    cr_assert_gt(st.doc_token_cache_bytes, 0);
    la_engine_get_stats(off, &st);
    cr_assert_eq(st.doc_token_cache_hits + st.doc_token_cache_misses + st.doc_token_cache_entries, 0);

    /* what names a document's KV hashes its ids: the same with a hit as without the cache */
    for (int d = 0; d < N_DOCS; d++) {
        la_segment doc = {.text = k_texts[d], .title = k_titles[d]};
        la_document_info x, y;
        la_err err = {0};
        LA_CHECK_OK(la_engine_document_info(on, &doc, LA_METHOD_LAZY, NULL, &x, &err), err);
        LA_CHECK_OK(la_engine_document_info(off, &doc, LA_METHOD_LAZY, NULL, &y, &err), err);
        cr_assert_eq(x.where, 1, "document %d is in the pool", d);
        cr_assert_eq(x.where, y.where);
        cr_assert_eq(x.n_tokens, y.n_tokens);
        cr_assert(x.key_lo == y.key_lo && x.key_hi == y.key_hi, "document %d: another record key", d);
        for (int32_t b = 0; b < x.n_blocks; b++) cr_assert_eq(x.block_hashes[b], y.block_hashes[b]);
        free(x.block_hashes);
        free(y.block_hashes);
    }
    la_engine_get_stats(on, &st);
    cr_assert_eq(st.doc_token_cache_misses, N_DOCS, "document_info found the raw path's entries");

    /* a tenant (cache salt) tokenizes its documents itself, then hits its own entries */
    for (int k = 0; k < 2; k++) {
        la_test_gen a, b;
        run_salted(on, 0, true, "tenant-7", &a);
        run_salted(off, 0, true, "tenant-7", &b);
        cr_assert_eq(a.n_tokens, b.n_tokens);
        for (int32_t i = 0; i < a.n_tokens; i++) cr_assert_eq(a.tokens[i], b.tokens[i]);
        la_test_gen_free(&a);
        la_test_gen_free(&b);
        la_engine_stats s2;
        la_engine_get_stats(on, &s2);
        cr_assert_eq(s2.doc_token_cache_misses, N_DOCS + 3, "salted round %d: %lld misses", k,
                     (long long)s2.doc_token_cache_misses);
        cr_assert_eq(s2.doc_token_cache_hits, st.doc_token_cache_hits + 3 * k);
    }
    la_engine_destroy(on);
    la_engine_destroy(off);
}

Test(doc_tokens, a_document_the_tokenizer_refuses_is_refused_every_time_and_not_kept) {
    la_engine *on = engine_with(-1), *off = engine_with(0);
    la_segment bad = {.text = "fine so far \xc3\x28 then not UTF-8"};
    la_request_params p;
    la_request_params_init(&p);
    p.prompt.text = "Question:";
    p.docs = &bad;
    p.n_docs = 1;
    la_err want = {0}, got = {0};
    cr_assert_eq(la_engine_submit(off, &p, NULL, &want), LA_ERR_INVALID_ARG);
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(la_engine_submit(on, &p, NULL, &got), LA_ERR_INVALID_ARG);
        cr_assert_str_eq(got.msg, want.msg);
    }
    la_engine_stats st;
    la_engine_get_stats(on, &st);
    cr_assert_eq(st.doc_token_cache_entries, 0);
    cr_assert_eq(st.doc_token_cache_misses, 2);
    la_request_params q; /* a prompt of NULL text with a length: refused, not read */
    la_request_params_init(&q);
    q.prompt = (la_segment){.text = NULL, .len = 5};
    cr_assert_eq(la_engine_submit(on, &q, NULL, &got), LA_ERR_INVALID_ARG);
    cr_assert(strstr(got.msg, "NULL"), "%s", got.msg);
    la_test_gen g; /* and the engine goes on */
    run(on, 0, true, &g);
    cr_assert_eq(g.n_tokens, 6);
    la_test_gen_free(&g);
    la_engine_destroy(on);
    la_engine_destroy(off);

    la_engine_options o;
    la_engine_options_init(&o);
    o.random_weights = "tiny";
    o.doc_token_cache_bytes = -1;
    la_engine *e = NULL;
    la_err err = {0};
    cr_assert_eq(la_engine_create(&o, &e, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "doc_token_cache_bytes"), "%s", err.msg);
}
