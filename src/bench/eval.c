/* Answering a RAG question set and scoring it (eval.h). */
#include "bench/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "bench/driver.h"
#include "bench/machine.h"
#include "bench/report.h"

/* A request's user pointer: its answer and where to report a failure. */
typedef struct eval_req {
    la_eval_answer *a;
    const la_eval_hooks *hooks;
} eval_req;

/* One generated token's margin (la_eval.margins); nothing recorded when out of memory. */
static void add_margin(la_eval_answer *a, const la_event *ev) {
    int32_t n = a->n_tokens + 1;
    int32_t *t = realloc(a->tokens, sizeof(int32_t) * (size_t)n);
    if (t) a->tokens = t;
    int32_t *ru = realloc(a->runner_up, sizeof(int32_t) * (size_t)n);
    if (ru) a->runner_up = ru;
    float *mg = realloc(a->margins, sizeof(float) * (size_t)n);
    if (mg) a->margins = mg;
    if (!t || !ru || !mg) return;
    /* top_ids[0] is the greedy choice; the runner-up is the most likely other token */
    t[n - 1] = ev->token_id;
    ru[n - 1] = ev->n_top >= 2 ? ev->top_ids[1] : -1;
    mg[n - 1] = ev->n_top >= 2 ? ev->top_logprobs[0] - ev->top_logprobs[1] : INFINITY;
    a->n_tokens = n;
}

static void on_event(void *user, const la_event *ev) {
    eval_req *r = user;
    la_eval_answer *a = r->a;
    if (ev->kind == LA_EVENT_TOKEN && ev->n_top > 0) add_margin(a, ev);
    if (ev->text_len) {
        char *p = realloc(a->text, a->len + ev->text_len + 1);
        if (p) {
            a->text = p;
            memcpy(a->text + a->len, ev->text, ev->text_len);
            a->len += ev->text_len;
            a->text[a->len] = '\0';
        }
    }
    if (ev->kind == LA_EVENT_DONE) {
        a->done = 1;
        a->failed = ev->finish == LA_FINISH_ERROR;
        a->stats = *ev->stats;
        if (a->failed && r->hooks->failed) {
            char msg[LA_ERR_MSG_LEN + 32];
            snprintf(msg, sizeof msg, "request failed: %s", ev->error);
            r->hooks->failed(r->hooks->user, msg);
        }
    }
}

/* Permutation k of n documents (k = 0: identity). */
static void order_of(int32_t n, int32_t k, uint64_t seed, int32_t *perm) {
    for (int32_t i = 0; i < n; i++) perm[i] = i;
    if (k == 0) return;
    uint64_t x = seed * 1000003ull + (uint64_t)k;
    for (int32_t i = n - 1; i > 0; i--) {
        /* splitmix64 step */
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        int32_t j = (int32_t)(z % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

la_status la_eval_run(la_eval *ev, la_engine *e, const la_eval_hooks *hooks, la_err *err) {
    const la_rag_dataset *ds = ev->ds;
    const int32_t nq = ds->n, orders = ev->orders, concurrency = ev->concurrency;
    size_t n_slots = (size_t)ev->n_methods * (size_t)orders * (size_t)nq;
    la_eval_answer *ans = ev->answers = calloc(n_slots + 1, sizeof(la_eval_answer));
    eval_req *reqs = calloc(n_slots + 1, sizeof(eval_req));
    if (!ans || !reqs) {
        free(reqs);
        return la_err_set(err, LA_ERR_NO_MEMORY, "eval: out of memory");
    }
    bool ok = true;
    int64_t done = 0, total = (int64_t)n_slots;
    for (int32_t m = 0; m < ev->n_methods && ok; m++)
        for (int32_t o = 0; o < orders && ok; o++)
            for (int32_t q0 = 0; q0 < nq && ok; q0 += concurrency) {
                int32_t q1 = q0 + concurrency < nq ? q0 + concurrency : nq;
                for (int32_t q = q0; q < q1; q++) {
                    const la_rag_question *Q = &ds->q[q];
                    int32_t *perm = malloc(sizeof(int32_t) * (size_t)(Q->n_docs + 1));
                    la_segment *docs = calloc((size_t)(Q->n_docs + 1), sizeof(la_segment));
                    order_of(Q->n_docs, o, ev->seed + (uint64_t)q, perm);
                    la_chat_message msg;
                    la_request_params rp;
                    la_bench_rag_request(Q->question, Q->docs, perm, Q->n_docs, ev->raw, &msg, docs, &rp);
                    char salt[64];
                    snprintf(salt, sizeof salt, "lazyattn-eval:%d:%s", m, ev->methods[m].name);
                    rp.method = ev->methods[m].method;
                    rp.recompute_first = ev->methods[m].recompute_first;
                    rp.recompute_ratio = ev->methods[m].recompute_ratio;
                    rp.doc_context = ev->methods[m].doc_context;
                    rp.cache_salt = salt;
                    rp.sampling.max_tokens = ev->max_tokens;
                    if (ev->margins) rp.sampling.logprobs = true, rp.sampling.top_logprobs = 2;
                    rp.on_event = on_event;
                    size_t slot = ((size_t)m * orders + o) * nq + q;
                    reqs[slot] = (eval_req){&ans[slot], hooks};
                    rp.user = &reqs[slot];
                    if (la_engine_submit(e, &rp, NULL, err) != LA_OK) {
                        if (hooks->failed) {
                            char line[LA_ERR_MSG_LEN + 32];
                            snprintf(line, sizeof line, "question %d: %s", q, err->msg);
                            hooks->failed(hooks->user, line);
                        }
                        ok = false;
                    }
                    free(perm);
                    free(docs);
                    if (!ok) break;
                }
                while (la_engine_has_work(e)) {
                    la_engine_step(e, err);
                    int64_t now_done = 0;
                    for (int32_t q = q0; q < q1; q++) now_done += ans[((size_t)m * orders + o) * nq + q].done;
                    if (now_done + done > done && hooks->progress)
                        hooks->progress(hooks->user, done + now_done, total);
                }
                for (int32_t q = q0; q < q1; q++)
                    if (ans[((size_t)m * orders + o) * nq + q].failed) ok = false;
                done += q1 - q0;
                if (hooks->progress) hooks->progress(hooks->user, done, total);
            }
    free(reqs);
    return ok ? LA_OK : la_err_set(err, LA_ERR_INTERNAL, "eval: a request failed");
}

void la_eval_fini(la_eval *ev) {
    size_t n_slots = ev->answers ? (size_t)ev->n_methods * (size_t)ev->orders * (size_t)ev->ds->n : 0;
    for (size_t i = 0; i < n_slots; i++) {
        free(ev->answers[i].text);
        free(ev->answers[i].tokens);
        free(ev->answers[i].runner_up);
        free(ev->answers[i].margins);
    }
    free(ev->answers);
    ev->answers = NULL;
}

/* ---- scoring ------------------------------------------------------------------------------ */

/* The first token where b's answer leaves a's (a and b differ in text): their first differing
 * token, or where the shorter one ended. */
static int32_t first_divergence(const la_eval_answer *a, const la_eval_answer *b) {
    int32_t n = a->n_tokens < b->n_tokens ? a->n_tokens : b->n_tokens, t = 0;
    while (t < n && a->tokens[t] == b->tokens[t]) t++;
    return t;
}

void la_eval_reference_margins(const la_eval *ev, double *median, double *p5) {
    *median = *p5 = -1;
    const int32_t nq = ev->ds->n;
    int64_t n = 0;
    for (int32_t q = 0; q < nq; q++) n += ev->answers[q].n_tokens;
    double *v = malloc(sizeof(double) * (size_t)(n + 1));
    if (!v || !n) {
        free(v);
        return;
    }
    int32_t k = 0;
    for (int32_t q = 0; q < nq; q++)
        for (int32_t t = 0; t < ev->answers[q].n_tokens; t++) v[k++] = ev->answers[q].margins[t];
    la_bench_dist d = la_bench_dist_of(v, k);
    *median = d.p50;
    *p5 = la_bench_percentile(v, k, 5);
    free(v);
}

/* With margins: the questions method m answers differently from the first method in the
 * file's order, and the first method's margin where they part (la_eval_score). */
static void score_divergence(const la_eval *ev, int32_t m, la_eval_score *out) {
    out->n_diverged = out->n_diverged_runner_up = 0;
    out->ref_margin_at_divergence_median = -1;
    if (!ev->margins || m == 0) return;
    const int32_t nq = ev->ds->n;
    double *v = malloc(sizeof(double) * (size_t)(nq + 1));
    if (!v) return;
    int32_t k = 0;
    for (int32_t q = 0; q < nq; q++) {
        const la_eval_answer *ref = &ev->answers[q], *a = &ev->answers[(size_t)m * ev->orders * nq + q];
        if (!strcmp(ref->text ? ref->text : "", a->text ? a->text : "")) continue;
        out->n_diverged++;
        int32_t t = first_divergence(ref, a);
        if (t >= ref->n_tokens) continue; /* the reference ended first: no margin there */
        v[k++] = ref->margins[t];
        out->n_diverged_runner_up += t < a->n_tokens && a->tokens[t] == ref->runner_up[t];
    }
    if (k) out->ref_margin_at_divergence_median = la_bench_dist_of(v, k).p50;
    free(v);
}

void la_eval_score_method(const la_eval *ev, int32_t m, la_eval_score *out) {
    const la_eval_answer *ans = ev->answers;
    const int32_t nq = ev->ds->n, orders = ev->orders;
    int64_t em = 0, n1 = 0, em1 = 0, n2 = 0, em2 = 0, agree = 0, stable = 0;
    double tt = 0, tw = 0;
    int64_t rc = 0, pr = 0, em_later = 0, agree_later = 0;
    for (int32_t q = 0; q < nq; q++) {
        const la_rag_question *Q = &ev->ds->q[q];
        const la_eval_answer *a = &ans[((size_t)m * orders) * nq + q];
        const char *text = a->text ? a->text : "";
        int hit = la_rag_answer_matches(text, Q->answers, Q->n_answers);
        em += hit;
        if (Q->hops == 1) n1++, em1 += hit;
        if (Q->hops == 2) n2++, em2 += hit;
        const char *first = ans[q].text ? ans[q].text : "";
        agree += strcmp(first, text) == 0;
        int same = 1;
        for (int32_t o = 1; o < orders; o++) { /* the later orders: the first method's answer in the same order */
            const la_eval_answer *ao = &ans[((size_t)m * orders + o) * nq + q];
            const char *t = ao->text ? ao->text : "", *f = ans[(size_t)o * nq + q].text;
            same &= strcmp(t, text) == 0;
            tw += ao->stats.ttft_ms;
            em_later += la_rag_answer_matches(t, Q->answers, Q->n_answers);
            agree_later += strcmp(t, f ? f : "") == 0;
        }
        stable += same;
        tt += a->stats.ttft_ms;
        rc += a->stats.doc_tokens_recomputed;
        pr += a->stats.doc_tokens_probed;
    }
    out->em_all_orders_pct = 100.0 * (double)(em + em_later) / ((double)nq * orders);
    out->same_as_first_all_orders = agree + agree_later;
    out->doc_tokens_probed = pr;
    out->em_pct = 100.0 * em / nq;
    out->em_1hop_pct = n1 ? 100.0 * em1 / n1 : -1;
    out->em_2hop_pct = n2 ? 100.0 * em2 / n2 : -1;
    out->n_1hop = n1;
    out->n_2hop = n2;
    out->same_as_first = agree;
    out->same_across_orders = stable;
    out->mean_ttft_cold_ms = tt / nq;
    out->mean_ttft_warm_ms = orders > 1 ? tw / ((double)nq * (orders - 1)) : -1;
    out->doc_tokens_recomputed = rc;
    score_divergence(ev, m, out);
}

/* Method m's answers in document order o, one string per question. */
static cJSON *answers_json(const la_eval *ev, int32_t m, int32_t o) {
    const int32_t nq = ev->ds->n;
    cJSON *arr = cJSON_CreateArray();
    for (int32_t q = 0; q < nq; q++) {
        const la_eval_answer *a = &ev->answers[((size_t)m * ev->orders + o) * nq + q];
        cJSON_AddItemToArray(arr, cJSON_CreateString(a->text ? a->text : ""));
    }
    return arr;
}

cJSON *la_eval_json(const la_eval *ev, const char *dataset, const char *model, const char *device, int argc,
                    char **argv) {
    const int32_t nq = ev->ds->n, orders = ev->orders;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "dataset", dataset);
    cJSON_AddStringToObject(root, "format", ev->ds->format);
    cJSON_AddStringToObject(root, "model", model);
    cJSON_AddStringToObject(root, "device", device);
    cJSON_AddNumberToObject(root, "questions", nq);
    cJSON_AddNumberToObject(root, "empty_documents_left_out", ev->ds->n_empty_docs);
    cJSON_AddNumberToObject(root, "orders", orders);
    cJSON_AddStringToObject(root, "prompt", ev->raw ? "raw" : "chat template");
    if (ev->margins) { /* the first method's margins over all its tokens, to set the divergences against */
        double med, p5;
        la_eval_reference_margins(ev, &med, &p5);
        cJSON *jr = cJSON_AddObjectToObject(root, "reference_margins");
        cJSON_AddStringToObject(jr, "definition",
                                "per generated token of the first method (file order): log-softmax of the raw "
                                "logits at the greedy token minus at the runner-up, nats");
        cJSON_AddNumberToObject(jr, "median", med);
        cJSON_AddNumberToObject(jr, "p5", p5);
    }
    char *cmd = la_command_line(argc, argv);
    cJSON_AddStringToObject(root, "command", cmd ? cmd : "");
    free(cmd);
    cJSON_AddItemToObject(root, "machine", la_machine_json());
    cJSON *jm = cJSON_AddArrayToObject(root, "methods");
    for (int32_t m = 0; m < ev->n_methods; m++) {
        la_eval_score s;
        la_eval_score_method(ev, m, &s);
        cJSON *jo = cJSON_CreateObject();
        cJSON_AddStringToObject(jo, "method", ev->methods[m].name);
        cJSON_AddStringToObject(jo, "engine_method", la_method_name(ev->methods[m].method));
        cJSON_AddNumberToObject(jo, "recompute_first", ev->methods[m].recompute_first);
        cJSON_AddNumberToObject(jo, "recompute_ratio", la_method_spec_ratio_json(ev->methods[m].recompute_ratio));
        cJSON_AddStringToObject(jo, "doc_context", la_doc_context_name(ev->methods[m].doc_context));
        cJSON_AddNumberToObject(jo, "doc_tokens_recomputed", (double)s.doc_tokens_recomputed);
        cJSON_AddNumberToObject(jo, "doc_tokens_probed", (double)s.doc_tokens_probed);
        cJSON_AddNumberToObject(jo, "exact_match_all_orders", s.em_all_orders_pct / 100);
        cJSON_AddNumberToObject(jo, "same_as_first_all_orders",
                                (double)s.same_as_first_all_orders / ((double)ev->ds->n * ev->orders));
        cJSON_AddNumberToObject(jo, "exact_match", s.em_pct / 100);
        /* null: no such question */
        if (s.n_1hop) cJSON_AddNumberToObject(jo, "exact_match_1hop", s.em_1hop_pct / 100);
        else cJSON_AddNullToObject(jo, "exact_match_1hop");
        cJSON_AddNumberToObject(jo, "n_1hop", (double)s.n_1hop);
        if (s.n_2hop) cJSON_AddNumberToObject(jo, "exact_match_2hop", s.em_2hop_pct / 100);
        else cJSON_AddNullToObject(jo, "exact_match_2hop");
        cJSON_AddNumberToObject(jo, "n_2hop", (double)s.n_2hop);
        cJSON_AddNumberToObject(jo, "same_answer_as_first_method", (double)s.same_as_first / nq);
        if (orders > 1) cJSON_AddNumberToObject(jo, "same_answer_across_orders", (double)s.same_across_orders / nq);
        else cJSON_AddNullToObject(jo, "same_answer_across_orders"); /* one order: nothing to compare */
        cJSON_AddNumberToObject(jo, "mean_ttft_cold_ms", s.mean_ttft_cold_ms);
        if (orders > 1) cJSON_AddNumberToObject(jo, "mean_ttft_warm_ms", s.mean_ttft_warm_ms);
        else cJSON_AddNullToObject(jo, "mean_ttft_warm_ms");
        if (ev->margins && m > 0) { /* where this method's answers part from the first method's */
            cJSON_AddNumberToObject(jo, "diverged", (double)s.n_diverged);
            cJSON_AddNumberToObject(jo, "diverged_to_reference_runner_up", (double)s.n_diverged_runner_up);
            if (s.ref_margin_at_divergence_median >= 0)
                cJSON_AddNumberToObject(jo, "reference_margin_at_divergence_median", s.ref_margin_at_divergence_median);
            else cJSON_AddNullToObject(jo, "reference_margin_at_divergence_median");
            cJSON *jd = cJSON_AddArrayToObject(jo, "divergences");
            for (int32_t q = 0; q < nq; q++) {
                const la_eval_answer *ref = &ev->answers[q], *a = &ev->answers[((size_t)m * orders) * nq + q];
                if (!strcmp(ref->text ? ref->text : "", a->text ? a->text : "")) continue;
                int32_t t = first_divergence(ref, a);
                cJSON *d = cJSON_CreateObject();
                cJSON_AddNumberToObject(d, "question", q);
                cJSON_AddNumberToObject(d, "token", t);
                if (t < ref->n_tokens) cJSON_AddNumberToObject(d, "reference_margin", ref->margins[t]);
                else cJSON_AddNullToObject(d, "reference_margin");
                if (t < a->n_tokens) cJSON_AddNumberToObject(d, "margin", a->margins[t]);
                else cJSON_AddNullToObject(d, "margin");
                cJSON_AddBoolToObject(d, "to_reference_runner_up",
                                      t < ref->n_tokens && t < a->n_tokens && a->tokens[t] == ref->runner_up[t]);
                cJSON_AddItemToArray(jd, d);
            }
        }
        cJSON_AddItemToObject(jo, "answers", answers_json(ev, m, 0));
        if (orders > 1) { /* [order - 1][question]: paired statistics over every order */
            cJSON *oo = cJSON_AddArrayToObject(jo, "answers_other_orders");
            for (int32_t o = 1; o < orders; o++) cJSON_AddItemToArray(oo, answers_json(ev, m, o));
        }
        cJSON_AddItemToArray(jm, jo);
    }
    return root;
}
