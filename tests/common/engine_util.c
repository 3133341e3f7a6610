#include "common/engine_util.h"

#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

la_engine *la_test_engine(const char *model_dir, int64_t kv_blocks, int32_t block_size) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = model_dir;
    o.kv_blocks = kv_blocks;
    if (block_size) o.block_size = block_size;
    o.n_threads = 2;
    la_engine *e = NULL;
    la_err err = {0};
    la_status s = la_engine_create(&o, &e, &err);
    cr_assert(s == LA_OK, "engine on %s: %s", model_dir, err.msg);
    return e;
}

void la_test_on_event(void *user, const la_event *ev) {
    la_test_gen *g = user;
    if (ev->text_len) {
        g->text = realloc(g->text, g->text_len + ev->text_len + 1);
        memcpy(g->text + g->text_len, ev->text, ev->text_len);
        g->text_len += ev->text_len;
        g->text[g->text_len] = '\0';
    }
    if (ev->kind == LA_EVENT_TOKEN) {
        if (g->n_tokens < 4096) {
            if (ev->logits) {
                g->n_vocab = ev->n_vocab;
                g->logits = realloc(g->logits, sizeof(float) * (size_t)(g->n_tokens + 1) * (size_t)ev->n_vocab);
                memcpy(g->logits + (size_t)g->n_tokens * (size_t)ev->n_vocab, ev->logits,
                       sizeof(float) * (size_t)ev->n_vocab);
            }
            g->tokens[g->n_tokens++] = ev->token_id;
        }
    } else {
        g->stats = *ev->stats;
        g->finish = ev->finish;
        g->status = ev->status;
        strncpy(g->error, ev->error ? ev->error : "", sizeof g->error - 1);
        g->done = 1;
    }
}

void la_test_generate(la_engine *e, la_request_params *p, la_test_gen *g) {
    memset(g, 0, sizeof *g);
    p->on_event = la_test_on_event;
    p->user = g;
    la_err err = {0};
    la_status s = la_engine_submit(e, p, NULL, &err);
    cr_assert(s == LA_OK, "submit: %s", err.msg);
    while (!g->done) la_engine_step(e, &err);
    cr_assert(g->finish != LA_FINISH_ERROR, "request failed: %s", g->error);
}

void la_test_gen_free(la_test_gen *g) {
    free(g->logits);
    free(g->text);
    memset(g, 0, sizeof *g);
}

double la_test_gen_max_diff(const la_test_gen *a, const la_test_gen *b) {
    double worst = 0;
    for (int32_t i = 0; i < a->n_tokens && i < b->n_tokens; i++) {
        size_t at;
        double d = la_test_max_abs_diff(a->logits + (size_t)i * a->n_vocab, b->logits + (size_t)i * b->n_vocab,
                                        (size_t)a->n_vocab, &at);
        if (d > worst) worst = d;
    }
    return worst;
}

void la_test_generate_docs(la_engine *e, la_method m, int32_t *const *ids, const int32_t *len, int32_t n_docs,
                           const int32_t *order, const int32_t *q, int32_t nq, const char *salt,
                           int32_t recompute_first, float recompute_ratio, int32_t max_tokens, la_test_gen *g) {
    la_segment segs[64];
    cr_assert(n_docs <= 64, "la_test_generate_docs: %d documents", n_docs);
    for (int32_t i = 0; i < n_docs; i++) {
        int32_t k = order ? order[i] : i;
        segs[i] = (la_segment){.ids = ids[k], .n_ids = len[k]};
    }
    la_test_generate_segs(e, m, segs, n_docs, (la_segment){.ids = q, .n_ids = nq}, salt, recompute_first,
                          recompute_ratio, max_tokens, g);
}

la_request_params la_test_segs_params(la_method m, const la_segment *docs, int32_t n_docs, la_segment prompt,
                                      const char *salt, int32_t recompute_first, float recompute_ratio,
                                      int32_t max_tokens) {
    la_request_params rp;
    la_request_params_init(&rp);
    rp.docs = docs;
    rp.n_docs = n_docs;
    rp.prompt = prompt;
    rp.add_special = false;
    rp.method = m;
    rp.cache_salt = salt;
    rp.recompute_first = recompute_first;
    rp.recompute_ratio = recompute_ratio;
    rp.return_logits = true;
    rp.sampling.max_tokens = max_tokens;
    rp.sampling.ignore_eos = true;
    return rp;
}

void la_test_generate_segs(la_engine *e, la_method m, const la_segment *docs, int32_t n_docs, la_segment prompt,
                           const char *salt, int32_t recompute_first, float recompute_ratio, int32_t max_tokens,
                           la_test_gen *g) {
    la_request_params rp = la_test_segs_params(m, docs, n_docs, prompt, salt, recompute_first, recompute_ratio, max_tokens);
    la_test_generate(e, &rp, g);
}
