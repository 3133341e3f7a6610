/* Choosing a request's next token, structured output's grammars, and the n > 1 fork
 * (token_choice.h).
 */
#include "engine/token_choice.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/json.h"
#include "base/threadpool.h"
#include "base/timer.h"
#include "engine/sampling.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "kv/plan.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

/* ============================================================ grammars =============== */

/* The vocabulary as structured output sees it: every token's bytes, special tokens and
 * eos ids left out (the end of a value is signalled to the sampler separately). Caller
 * holds grammar_mu. */
static la_status build_vocab(la_engine *e, la_err *err) {
    if (e->gvocab) return LA_OK;
    if (!e->tok) return la_err_set(err, LA_ERR_INVALID_ARG, "structured output needs a tokenizer");
    int32_t V = e->cfg.vocab_size;
    int32_t *lens = calloc((size_t)V, sizeof(int32_t));
    char **bytes = calloc((size_t)V, sizeof(char *));
    int64_t total = 0;
    for (int32_t t = 0; lens && t < V; t++) {
        if (la_tokenizer_is_special(e->tok, t) || la_model_config_is_eos(&e->cfg, t) ||
            t == la_tokenizer_eos_id(e->tok))
            continue;
        int64_t n = la_tokenizer_token_bytes(e->tok, t, NULL, 0);
        lens[t] = n > 0 ? (int32_t)n : 0;
        total += lens[t];
    }
    char *buf = lens && bytes ? malloc((size_t)total + 1) : NULL;
    la_status s = buf ? LA_OK : la_err_set(err, LA_ERR_NO_MEMORY, "structured output: out of memory");
    int64_t at = 0;
    for (int32_t t = 0; s == LA_OK && t < V; t++) {
        if (!lens[t]) continue;
        bytes[t] = buf + at;
        la_tokenizer_token_bytes(e->tok, t, bytes[t], (size_t)lens[t]);
        at += lens[t];
    }
    int missing = -1;
    if (s == LA_OK) s = la_grammar_vocab_create(V, (const char *const *)bytes, lens, &e->gvocab, &missing, err);
    if (s == LA_OK && missing >= 0)
        fprintf(stderr, "lazyattn: no token of the vocabulary is the single byte 0x%02x: a structured output "
                        "may not end within max_tokens\n", missing);
    free(buf);
    free(bytes);
    free(lens);
    return s;
}

la_status la_engine_grammar_get(la_engine *e, const la_sampling_params *p, struct la_grammar **out,
                                la_err *err) {
    *out = NULL;
    if (p->response_format == LA_RESPONSE_TEXT) return LA_OK;
    const char *schema = p->response_format == LA_RESPONSE_JSON_SCHEMA ? p->json_schema : NULL;
    pthread_mutex_lock(&e->grammar_mu);
    la_status s = build_vocab(e, err);
    struct la_engine_grammar_slot *hit = NULL, *lru = &e->grammars[0];
    for (size_t i = 0; s == LA_OK && i < sizeof e->grammars / sizeof e->grammars[0]; i++) {
        struct la_engine_grammar_slot *sl = &e->grammars[i];
        if (sl->g && ((!schema && !sl->schema) || (schema && sl->schema && !strcmp(schema, sl->schema)))) hit = sl;
        if (!sl->g || (lru->g && sl->used < lru->used)) lru = sl;
    }
    if (s == LA_OK && !hit) {
        la_json_grammar *jg = NULL;
        if (schema) {
            char path[96];
            const char *why = NULL;
            cJSON *root = la_json_strict_check(schema, strlen(schema), path, sizeof path, &why) ? cJSON_Parse(schema)
                                                                                                : NULL;
            if (why) s = la_err_set(err, LA_ERR_INVALID_ARG, "json_schema: not valid JSON: %s%s%s", why,
                                    path[0] ? " at " : "", path);
            else if (!root) s = la_err_set(err, LA_ERR_INVALID_ARG, "json_schema: not valid JSON");
            else s = la_json_grammar_compile(root, &jg, NULL, 0, err);
            cJSON_Delete(root);
        } else {
            s = la_json_grammar_object(&jg, err);
        }
        la_grammar *g = NULL;
        if (s == LA_OK) s = la_grammar_create(jg, e->gvocab, 0, &g, err); /* takes jg */
        char *copy = s == LA_OK && schema ? strdup(schema) : NULL;
        if (s == LA_OK && schema && !copy) s = la_err_set(err, LA_ERR_NO_MEMORY, "structured output: out of memory");
        if (s == LA_OK) {
            la_grammar_unref(lru->g);
            free(lru->schema);
            lru->g = g;
            lru->schema = copy;
            hit = lru;
        } else {
            la_grammar_unref(g);
        }
    }
    if (s == LA_OK) {
        hit->used = ++e->grammar_clock;
        la_grammar_ref(hit->g);
        *out = hit->g;
    }
    pthread_mutex_unlock(&e->grammar_mu);
    return s;
}

void la_engine_grammars_free(la_engine *e) {
    for (size_t i = 0; i < sizeof e->grammars / sizeof e->grammars[0]; i++) {
        la_grammar_unref(e->grammars[i].g);
        free(e->grammars[i].schema);
        e->grammars[i].g = NULL;
        e->grammars[i].schema = NULL;
    }
    la_grammar_vocab_destroy(e->gvocab);
    e->gvocab = NULL;
}

/* ============================================================ choosing =============== */

la_status la_choosers_create(la_engine *e, int32_t V, la_err *err) {
    int n = e->opts.n_threads > 0 ? e->opts.n_threads : la_physical_cores();
    if (n < 1) n = 1;
    if (n > 16) n = 16;
    e->choosers = calloc((size_t)n, sizeof *e->choosers);
    if (!e->choosers) return la_err_set(err, LA_ERR_NO_MEMORY, "engine: out of memory");
    e->n_choosers = n;
    for (int i = 0; i < n; i++) {
        struct la_choose_scratch *c = &e->choosers[i];
        c->sample = malloc((size_t)V * (sizeof(float) + sizeof(int32_t)));
        c->logits = malloc(sizeof(float) * (size_t)V);
        c->marks = calloc((size_t)V, sizeof(uint32_t));
        c->mask = malloc(sizeof(uint64_t) * (((size_t)V + 63) / 64));
        if (!c->sample || !c->logits || !c->marks || !c->mask)
            return la_err_set(err, LA_ERR_NO_MEMORY, "engine: out of memory");
    }
    return n > 1 ? la_threadpool_create(n, &e->choose_pool, err) : LA_OK;
}

void la_choosers_destroy(la_engine *e) {
    la_threadpool_destroy(e->choose_pool);
    for (int32_t i = 0; e->choosers && i < e->n_choosers; i++) {
        free(e->choosers[i].sample);
        free(e->choosers[i].logits);
        free(e->choosers[i].marks);
        free(e->choosers[i].mask);
    }
    free(e->choosers);
    e->choosers = NULL;
}

bool la_request_needs_logits(const la_request *r) {
    const la_sampling_params *p = &r->sampling;
    return p->temperature > 0.0f || r->return_logits || p->logprobs || la_logits_processors_active(p) || r->gm ||
           r->allow_mask || r->n_generated < p->min_tokens;
}

static void set_bit(uint64_t *m, int32_t t) { m[t / 64] |= (uint64_t)1 << (t % 64); }

/* The eos ids of the model and the tokenizer (at most LA_MAX_EOS_IDS + 1) into ids. */
static int32_t eos_ids(const la_engine *e, int32_t *ids) {
    int32_t n = 0;
    for (int32_t i = 0; i < e->cfg.n_eos_ids; i++) ids[n++] = e->cfg.eos_ids[i];
    int32_t te = e->tok ? la_tokenizer_eos_id(e->tok) : -1;
    if (te >= 0 && !la_model_config_is_eos(&e->cfg, te)) ids[n++] = te;
    return n;
}

static la_status choose(la_engine *e, struct la_choose_scratch *w, la_request *r, const float *lg, int32_t *token,
                        la_err *err);

typedef struct choose_job {
    la_engine *e;
    la_choice_task *tasks;
} choose_job;

static void choose_range(void *ctx, int64_t begin, int64_t end, int worker) {
    choose_job *j = ctx;
    struct la_choose_scratch *w = &j->e->choosers[worker];
    for (int64_t i = begin; i < end; i++) {
        la_choice_task *t = &j->tasks[i];
        if (!t->lg) {
            t->token = t->argmax_id;
            t->status = LA_OK;
            continue;
        }
        const double t0 = la_now_ms();
        t->status = choose(j->e, w, t->r, t->lg, &t->token, &t->err);
        w->choose_ms += la_now_ms() - t0;
    }
}

void la_requests_choose(la_engine *e, la_choice_task *tasks, int32_t n) {
    choose_job j = {e, tasks};
    la_parallel_for(n > 1 ? e->choose_pool : NULL, n, choose_range, &j);
    for (int32_t i = 0; i < e->n_choosers; i++) { /* the workers' clocks into the totals */
        e->choose_ms += e->choosers[i].choose_ms;
        e->grammar_ms += e->choosers[i].grammar_ms;
        e->choosers[i].choose_ms = e->choosers[i].grammar_ms = 0;
    }
}

static la_status choose(la_engine *e, struct la_choose_scratch *w, la_request *r, const float *lg, int32_t *token,
                        la_err *err) {
    const int32_t V = e->cfg.vocab_size;
    const la_sampling_params *p = &r->sampling;
    la_logits_inputs in = {0};
    const uint64_t *allow = NULL;
    int32_t W = (V + 63) / 64;
    if (r->gm) { /* the grammar: its tokens, eos once the value may end */
        bool end_ok = false;
        const double t0 = la_now_ms();
        la_status ms = la_grammar_matcher_mask(r->gm, p->max_tokens - r->n_generated, w->mask, &end_ok, err);
        w->grammar_ms += la_now_ms() - t0;
        LA_TRY(ms);
        if (end_ok) {
            int32_t ids[LA_MAX_EOS_IDS + 1];
            int32_t n = eos_ids(e, ids);
            for (int32_t i = 0; i < n; i++)
                if (ids[i] < V) set_bit(w->mask, ids[i]);
        }
        if (r->allow_mask)
            for (int32_t k = 0; k < W; k++) w->mask[k] &= r->allow_mask[k];
        allow = w->mask;
    } else {
        allow = r->allow_mask;
    }
    if (r->n_generated < p->min_tokens) { /* eos and stop ids cannot end it yet: clear them */
        if (allow != w->mask) {
            if (allow) memcpy(w->mask, allow, sizeof(uint64_t) * (size_t)W);
            else memset(w->mask, 0xff, sizeof(uint64_t) * (size_t)W);
            allow = w->mask;
        }
        int32_t ids[LA_MAX_EOS_IDS + 1];
        int32_t n = eos_ids(e, ids);
        for (int32_t i = 0; i < n; i++)
            if (ids[i] < V) w->mask[ids[i] / 64] &= ~((uint64_t)1 << (ids[i] % 64));
        for (int32_t i = 0; i < p->n_stop_token_ids; i++) {
            int32_t t = p->stop_token_ids[i];
            w->mask[t / 64] &= ~((uint64_t)1 << (t % 64));
        }
    }
    const float *v = lg;
    if (la_logits_processors_active(p)) { /* bias and penalties: on a copy */
        la_token_span *seen = NULL;
        int32_t n_seen = 0;
        if (p->repetition_penalty != 0.0f && p->repetition_penalty != 1.0f) { /* the whole input */
            seen = malloc(sizeof(la_token_span) * (size_t)(r->n_docs + 1));
            if (!seen) return la_err_set(err, LA_ERR_NO_MEMORY, "sampling: out of memory");
            for (int32_t d = 0; d < r->n_docs; d++) seen[n_seen++] = (la_token_span){r->doc_ids[d], r->doc_len[d]};
            seen[n_seen++] = (la_token_span){r->tail, r->n_tail - r->n_generated};
        }
        in.seen = seen;
        in.n_seen = n_seen;
        in.output = (la_token_span){r->tail + r->n_tail - r->n_generated, r->n_generated};
        memcpy(w->logits, lg, sizeof(float) * (size_t)V);
        la_logits_process(w->logits, V, p, &in, w->marks, &w->mark_epoch);
        free(seen);
        v = w->logits;
    }
    int32_t t = la_sample_masked(v, V, p, allow, &r->rng, w->sample);
    if (t < 0 || !(v[t] > -INFINITY))
        return la_err_set(err, LA_ERR_INVALID_ARG, /* the request's own masks, together: its mistake */
                          "allowed_token_ids: no token is allowed at output token %d (the response format or "
                          "min_tokens masks every one of them)", (int)r->n_generated);
    if (p->logprobs) r->n_top = la_logprobs(lg, V, t, p->top_logprobs, &r->lp, r->top_ids, r->top_lps);
    *token = t;
    return LA_OK;
}

/* ============================================================ n > 1 ================== */

/* The seed of choice i's stream: choice 0 draws as a request with n = 1 would. */
static uint64_t choice_seed(uint64_t seed, int32_t i) { return seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)i); }

static la_status make_choice(la_engine *e, la_request *r, int32_t i, la_request **out, bool *waiting, la_err *err) {
    la_request *c = NULL;
    LA_TRY(la_request_clone(r, &c, err));
    c->index = i;
    c->n_choices = 1;
    c->is_fork = true;
    la_rng_seed(&c->rng, choice_seed(r->sampling.seed, i));
    la_status s = LA_OK;
    if (e->tok) s = la_detok_create(e->tok, !r->keep_special, &c->detok, err);
    if (s == LA_OK && r->gm) s = la_grammar_matcher_clone(r->gm, &c->gm, err);
    int32_t src = -1, dst = -1, n_valid = 0;
    *waiting = false;
    if (s == LA_OK) {
        la_err perr;
        la_status ps = la_plan_fork(&r->plan, e->pool, r->n_computed, &c->plan, &src, &dst, &n_valid, &perr);
        if (ps == LA_ERR_NO_SPACE) { /* recompute the prompt later; documents stay shared */
            c->state = LA_REQ_WAITING;
            c->n_computed = 0;
            *waiting = true;
        } else if (ps != LA_OK) {
            s = ps;
            *err = perr;
        }
    }
    if (s == LA_OK && !*waiting && src >= 0) {
        s = e->be->ops->kv_copy_rotate(e->be, src, dst, n_valid, 0, err);
        if (s != LA_OK) la_plan_release(&c->plan, e->pool);
    }
    if (s != LA_OK) {
        c->state = LA_REQ_WAITING; /* no plan to release */
        la_request_free(c);
        return s;
    }
    *out = c;
    return LA_OK;
}

la_status la_request_fork(la_engine *e, la_request *r, la_request **kids, int32_t *n_kids, la_err *err) {
    int32_t n = r->n_choices;
    *n_kids = 0;
    for (int32_t i = 1; i < n; i++) {
        la_request *c;
        bool waiting;
        LA_TRY(make_choice(e, r, i, &c, &waiting, err)); /* choices i.. stay this request's */
        r->orphan_from = i + 1;
        pthread_mutex_lock(&e->mu);
        e->n_live++;
        if (waiting) e->n_queued++;
        pthread_mutex_unlock(&e->mu);
        if (waiting) {
            la_request_list_push(&e->waiting_head, &e->waiting_tail, c);
        } else {
            la_request_list_push(&e->running_head, &e->running_tail, c);
            kids[(*n_kids)++] = c;
        }
    }
    r->n_choices = 1; /* forked once */
    return LA_OK;
}
