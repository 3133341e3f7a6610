/* Load generation of `lazyattn bench` (driver.h). */
#include "bench/driver.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/timer.h"
#include "bench/method_spec.h"

/* ---- samples ------------------------------------------------------------------------------ */

static void sample_text(la_bench_sample *s, const char *text, size_t len) {
    if (!len) return;
    char *p = realloc(s->text, s->text_len + len + 1);
    if (!p) return;
    s->text = p;
    memcpy(s->text + s->text_len, text, len);
    s->text_len += len;
    s->text[s->text_len] = '\0';
}

/* A token event (or content chunk) arrived at now. */
static void sample_token(la_bench_sample *s, double now) {
    if (s->n_events == 0) {
        s->t_first_ms = now;
        s->ttft_ms = now - s->t_submit_ms;
    } else {
        if (s->n_itl == s->cap_itl) {
            int32_t cap = s->cap_itl ? 2 * s->cap_itl : 32;
            double *p = realloc(s->itl_ms, sizeof(double) * (size_t)cap);
            if (p) s->itl_ms = p, s->cap_itl = cap;
        }
        if (s->n_itl < s->cap_itl) s->itl_ms[s->n_itl++] = now - s->t_last_ms;
    }
    s->t_last_ms = now;
    s->n_events++;
}

/* The request ended at now; n_tokens generated in all, the last at t_last_ms. */
static void sample_done(la_bench_sample *s, double now, int32_t n_tokens) {
    s->e2e_ms = now - s->t_submit_ms;
    s->has_tpot = n_tokens > 1 && s->n_events > 0 && s->t_last_ms > s->t_first_ms;
    s->tpot_ms = s->has_tpot ? (s->t_last_ms - s->t_first_ms) / (n_tokens - 1) : 0;
}

void la_bench_samples_free(la_bench_sample *s, int32_t n) {
    for (int32_t i = 0; s && i < n; i++) {
        free(s[i].text);
        free(s[i].itl_ms);
        s[i].text = NULL;
        s[i].itl_ms = NULL;
    }
}

/* ---- shared run state ------------------------------------------------------------------- */

typedef struct run_ctx {
    const la_bench_target *t;
    const la_bench_workload *w;
    const la_bench_item *items;
    int32_t n;
    const la_bench_load *load;
    la_bench_sample *out;
    double *arrival_ms;           /* open loop: offsets from t0 */
    double t0;
    la_bench_progress_fn progress;
    void *progress_user;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t in_flight, n_done;
    atomic_int next;              /* HTTP closed loop: next item */
    atomic_bool submitted_all;    /* in process: the driver has submitted everything */
    atomic_bool past_bound;       /* the load's duration bound has passed: send nothing more */
    double t_last_done;
} run_ctx;

/* Whether the load's duration bound has passed (and say so to every thread). */
static bool past_bound(run_ctx *c) {
    if (atomic_load(&c->past_bound)) return true;
    if (c->load->max_s <= 0 || la_now_ms() - c->t0 < c->load->max_s * 1e3) return false;
    atomic_store(&c->past_bound, true);
    return true;
}

/* Item i is not sent: the duration bound passed first. */
static void not_sent(run_ctx *c, int32_t i) {
    la_bench_sample *s = &c->out[i];
    s->not_sent = true;
    snprintf(s->error, sizeof s->error, "not sent: the point's duration bound (%g s) passed", c->load->max_s);
}

static void finish_one(run_ctx *c) {
    pthread_mutex_lock(&c->mu);
    c->in_flight--;
    c->n_done++;
    c->t_last_done = la_now_ms();
    if (c->progress) c->progress(c->progress_user);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void sleep_until(double t_ms) {
    double now = la_now_ms();
    if (t_ms <= now) return;
    double d = t_ms - now;
    struct timespec ts = {(time_t)(d / 1e3), (long)(fmod(d, 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Wait for a closed-loop slot (or an open-loop arrival time) before item i; false when the
 * duration bound passed first (nothing taken). */
static bool wait_turn(run_ctx *c, int32_t i) {
    if (c->arrival_ms) {
        double at = c->t0 + c->arrival_ms[i];
        if (c->load->max_s > 0 && at - c->t0 >= c->load->max_s * 1e3) {
            sleep_until(c->t0 + c->load->max_s * 1e3);
            past_bound(c);
            return false;
        }
        sleep_until(at);
        if (past_bound(c)) return false;
        pthread_mutex_lock(&c->mu);
        c->in_flight++;
        pthread_mutex_unlock(&c->mu);
        return true;
    }
    pthread_mutex_lock(&c->mu);
    while (c->in_flight >= c->load->concurrency && !past_bound(c)) {
        if (c->load->max_s > 0) {
            struct timespec ts = la_deadline_after_ms(50);
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
        } else {
            pthread_cond_wait(&c->cv, &c->mu);
        }
    }
    bool go = !past_bound(c);
    if (go) c->in_flight++;
    pthread_mutex_unlock(&c->mu);
    return go;
}

/* ---- in process ------------------------------------------------------------------------- */

typedef struct engine_req {
    run_ctx *c;
    la_bench_sample *s;
    uint64_t id;
    atomic_bool live;   /* submitted and not done: cancelled at the duration bound */
} engine_req;

static void on_engine_event(void *user, const la_event *ev) {
    engine_req *r = user;
    la_bench_sample *s = r->s;
    double now = la_now_ms();
    if (ev->kind == LA_EVENT_TOKEN) {
        sample_token(s, now);
        sample_text(s, ev->text, ev->text_len);
        return;
    }
    const la_request_stats *st = ev->stats;
    if (st) {
        s->n_generated = st->n_generated;
        s->n_prompt_tokens = st->n_prompt_tokens;
        s->n_doc_tokens = st->n_doc_tokens;
        s->doc_tokens_reused = st->doc_tokens_reused;
        s->doc_tokens_computed = st->doc_tokens_computed;
        s->prefix_tokens_reused = st->prefix_tokens_reused;
        s->cached_tokens = st->doc_tokens_reused + st->prefix_tokens_reused;
        s->server_ttft_ms = st->ttft_ms;
        s->doc_tokens_host = st->doc_tokens_host;
        s->doc_tokens_disk = st->doc_tokens_disk;
        s->doc_tokens_shared = st->doc_tokens_shared;
        s->doc_tokens_recomputed = st->doc_tokens_recomputed;
    }
    /* an eos token ends the request without a TOKEN event: it was generated now */
    if (s->n_events < s->n_generated) sample_token(s, now);
    s->ok = ev->finish == LA_FINISH_STOP || ev->finish == LA_FINISH_LENGTH;
    if (!s->ok)
        snprintf(s->error, sizeof s->error, "%s", ev->error && *ev->error ? ev->error : "request cancelled");
    if (ev->finish == LA_FINISH_CANCELLED && atomic_load(&r->c->past_bound)) {
        s->cut = true;
        snprintf(s->error, sizeof s->error, "cut: running at the point's duration bound (%g s)", r->c->load->max_s);
    }
    atomic_store(&r->live, false);
    sample_done(s, now, s->n_events);
    finish_one(r->c);
}

void la_bench_rag_request(const char *question, const la_rag_doc *docs, const int32_t *order, int32_t n_docs,
                          bool raw, la_chat_message *msg, la_segment *segs, la_request_params *rp) {
    for (int32_t d = 0; d < n_docs; d++) {
        const la_rag_doc *doc = &docs[order[d]];
        segs[d] = (la_segment){.text = doc->text, .title = doc->title};
    }
    *msg = (la_chat_message){"user", question};
    la_request_params_init(rp);
    if (raw) {
        rp->prompt.text = question;
    } else {
        rp->messages = msg;
        rp->n_messages = 1;
    }
    rp->docs = segs;
    rp->n_docs = n_docs;
}

/* Fill the request's chat message and titled documents (docs[item.n_docs]). */
static void item_params(const run_ctx *c, const la_bench_item *it, la_chat_message *msg,
                        la_segment *docs, la_request_params *rp) {
    la_bench_rag_request(it->question, c->w->docs, it->doc_ids, it->n_docs, c->t->raw, msg, docs, rp);
    rp->method = c->t->method;
    rp->recompute_first = c->t->recompute_first;
    rp->recompute_ratio = c->t->recompute_ratio;
    rp->doc_context = c->t->doc_context;
    rp->cache_salt = c->t->cache_salt;
    rp->sampling.max_tokens = c->t->max_tokens;
    rp->sampling.ignore_eos = c->t->ignore_eos;
}

typedef struct engine_driver {
    run_ctx *c;
    engine_req *reqs;
} engine_driver;

static void *engine_driver_main(void *arg) {
    engine_driver *d = arg;
    run_ctx *c = d->c;
    int32_t max_docs = 1;
    for (int32_t i = 0; i < c->n; i++)
        if (c->items[i].n_docs > max_docs) max_docs = c->items[i].n_docs;
    la_segment *docs = calloc((size_t)max_docs, sizeof(la_segment));
    for (int32_t i = 0; i < c->n; i++) {
        if (!wait_turn(c, i)) {
            for (int32_t j = i; j < c->n; j++) not_sent(c, j);
            break;
        }
        la_bench_sample *s = &c->out[i];
        d->reqs[i].c = c;
        d->reqs[i].s = s;
        la_chat_message msg;
        la_request_params rp;
        la_err err = {0};
        la_status st = LA_ERR_NO_MEMORY;
        if (docs) {
            item_params(c, &c->items[i], &msg, docs, &rp);
            rp.on_event = on_engine_event;
            rp.user = &d->reqs[i];
            s->t_submit_ms = la_now_ms();
            atomic_store(&d->reqs[i].live, true);
            st = la_engine_submit(c->t->engine, &rp, &d->reqs[i].id, &err);
        }
        if (st != LA_OK) {
            atomic_store(&d->reqs[i].live, false);
            snprintf(s->error, sizeof s->error, "%s", docs ? err.msg : "out of memory");
            s->e2e_ms = la_now_ms() - s->t_submit_ms;
            finish_one(c);
        }
    }
    free(docs);
    atomic_store(&c->submitted_all, true);
    return NULL;
}

static la_status run_in_process(run_ctx *c, la_err *err) {
    engine_driver d = {c, calloc((size_t)c->n, sizeof(engine_req))};
    if (!d.reqs) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    pthread_t th;
    if (pthread_create(&th, NULL, engine_driver_main, &d) != 0) {
        free(d.reqs);
        return la_err_set(err, LA_ERR_NO_MEMORY, "bench: cannot start the driver thread");
    }
    la_engine *e = c->t->engine;
    bool cancelled = false;
    for (;;) {
        if (!cancelled && past_bound(c) && atomic_load(&c->submitted_all) &&
            la_now_ms() - c->t0 >= c->load->max_s * LA_BENCH_DRAIN * 1e3) {
            /* the bound and its drain: what still runs is cut (its DONE comes from the next step) */
            for (int32_t i = 0; i < c->n; i++)
                if (atomic_load(&d.reqs[i].live)) la_engine_cancel(e, d.reqs[i].id);
            cancelled = true;
        }
        bool all = atomic_load(&c->submitted_all);
        if (la_engine_has_work(e)) {
            la_err step_err = {0};
            /* a failed step ends its requests with ERROR events: their samples say why */
            la_engine_step(e, &step_err);
        } else if (all) {
            break;
        } else {
            la_engine_wait_work(e, 2);
        }
    }
    pthread_join(th, NULL);
    double end = c->t0 + c->load->max_s * LA_BENCH_DRAIN * 1e3;
    if (cancelled && c->t_last_done > end) c->t_last_done = end;
    free(d.reqs);
    return LA_OK;
}

/* ---- over HTTP -------------------------------------------------------------------------- */

static char *chat_body(const run_ctx *c, const la_bench_item *it) {
    cJSON *o = cJSON_CreateObject();
    if (c->t->raw) { /* /v1/completions: the question after the documents, no template */
        cJSON_AddStringToObject(o, "prompt", it->question);
    } else {
        cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", it->question);
        cJSON_AddItemToArray(msgs, m);
    }
    cJSON *docs = cJSON_AddArrayToObject(o, "documents");
    for (int32_t d = 0; d < it->n_docs; d++) {
        const la_rag_doc *doc = &c->w->docs[it->doc_ids[d]];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "title", doc->title);
        cJSON_AddStringToObject(x, "text", doc->text);
        cJSON_AddItemToArray(docs, x);
    }
    cJSON_AddStringToObject(o, "method", la_method_name(c->t->method));
    /* the method spec's recovery and document context, explicit for the methods they apply to:
     * a server's own defaults (serve --recompute-first, --doc-context) never change what a
     * column measures */
    const la_method m = c->t->method;
    if (la_method_is_blockwise(m)) {
        cJSON_AddNumberToObject(o, "recompute_first", c->t->recompute_first > 0 ? c->t->recompute_first : 0);
        cJSON_AddNumberToObject(o, "recompute_ratio",
                                c->t->recompute_ratio > 0.0f ? la_method_spec_ratio_json(c->t->recompute_ratio) : 0);
    }
    if (la_method_caches_docs(m))
        cJSON_AddStringToObject(o, "doc_context", la_doc_context_name(c->t->doc_context == LA_DOC_CONTEXT_PREAMBLE
                                                                          ? LA_DOC_CONTEXT_PREAMBLE
                                                                          : LA_DOC_CONTEXT_ALONE));
    if (c->t->cache_salt) cJSON_AddStringToObject(o, "cache_salt", c->t->cache_salt);
    cJSON_AddNumberToObject(o, "max_tokens", c->t->max_tokens);
    cJSON_AddNumberToObject(o, "temperature", 0);
    if (c->t->ignore_eos) cJSON_AddBoolToObject(o, "ignore_eos", 1);
    cJSON_AddBoolToObject(o, "stream", 1);
    cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
    cJSON_AddBoolToObject(so, "include_usage", 1);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* One server-sent event of a streamed chat completion. */
static void on_sse(void *user, const char *data, size_t len) {
    la_bench_sample *s = user;
    double now = la_now_ms();
    if (len == 6 && !memcmp(data, "[DONE]", 6)) return;
    cJSON *o = cJSON_ParseWithLength(data, len);
    if (!o) return;
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(o, "error");
    if (error) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(error, "message");
        snprintf(s->error, sizeof s->error, "%s", cJSON_IsString(msg) ? msg->valuestring : "error event");
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(choices, 0), "delta");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(delta, "content");
    if (cJSON_IsString(content) && content->valuestring[0]) {
        sample_token(s, now);
        sample_text(s, content->valuestring, strlen(content->valuestring));
    }
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(choices, 0), "finish_reason");
    if (cJSON_IsString(finish)) {
        /* the finish chunk follows the last token (an eos has no text): the first and
         * last token times when no content chunk came before */
        if (s->n_events == 0) sample_token(s, now);
        else s->t_last_ms = now;
    }
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(o, "usage");
    if (cJSON_IsObject(usage)) {
        s->n_generated = (int32_t)num(usage, "completion_tokens");
        s->n_prompt_tokens = (int32_t)num(usage, "prompt_tokens");
        s->cached_tokens = (int64_t)num(cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens_details"),
                                        "cached_tokens");
    }
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "lazyattn");
    if (cJSON_IsObject(x)) {
        s->n_doc_tokens = (int32_t)num(x, "doc_tokens");
        s->doc_tokens_reused = (int64_t)num(x, "doc_tokens_reused");
        s->doc_tokens_computed = (int64_t)num(x, "doc_tokens_computed");
        s->prefix_tokens_reused = (int64_t)num(x, "prefix_tokens_reused");
        s->server_ttft_ms = num(x, "ttft_ms");
        s->doc_tokens_host = (int64_t)num(x, "doc_tokens_host"); /* 0 from a server without them */
        s->doc_tokens_disk = (int64_t)num(x, "doc_tokens_disk");
        s->doc_tokens_shared = (int64_t)num(x, "doc_tokens_shared");
        s->doc_tokens_recomputed = (int64_t)num(x, "doc_tokens_recomputed");
        s->ok = !s->error[0]; /* the usage chunk comes last, after any error */
    }
    cJSON_Delete(o);
}

static void http_one(run_ctx *c, int32_t i) {
    la_bench_sample *s = &c->out[i];
    char *body = chat_body(c, &c->items[i]);
    s->t_submit_ms = la_now_ms();
    int status = 0;
    char *answer = NULL;
    la_err err = {0};
    if (!body) {
        snprintf(s->error, sizeof s->error, "out of memory");
    } else if (la_bench_http_request(c->t->url, "POST", c->t->raw ? "/v1/completions" : "/v1/chat/completions",
                                     body, c->t->timeout_s,
                                     on_sse, s, &status, &answer, &err) != LA_OK) {
        snprintf(s->error, sizeof s->error, "%s", err.msg);
        s->ok = false;
    } else if (status != 200) {
        cJSON *o = answer ? cJSON_Parse(answer) : NULL;
        const cJSON *msg =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "error"), "message");
        snprintf(s->error, sizeof s->error, "HTTP %d: %s", status,
                 cJSON_IsString(msg) ? msg->valuestring : answer ? answer : "");
        cJSON_Delete(o);
        s->ok = false;
    } else if (!s->ok && !s->error[0]) {
        snprintf(s->error, sizeof s->error, "the stream ended without a usage chunk");
    }
    sample_done(s, la_now_ms(), s->n_generated);
    free(answer);
    free(body);
    finish_one(c);
}

static void *http_closed_main(void *arg) {
    run_ctx *c = arg;
    for (int32_t i; (i = atomic_fetch_add(&c->next, 1)) < c->n;) {
        if (past_bound(c)) {
            not_sent(c, i);
            continue;
        }
        pthread_mutex_lock(&c->mu);
        c->in_flight++;
        pthread_mutex_unlock(&c->mu);
        http_one(c, i);
    }
    return NULL;
}

typedef struct http_arrival {
    run_ctx *c;
    int32_t i;
} http_arrival;

static void *http_open_main(void *arg) {
    http_arrival *a = arg;
    http_one(a->c, a->i);
    return NULL;
}

static la_status run_http(run_ctx *c, la_err *err) {
    la_status s = LA_OK;
    if (!c->arrival_ms) { /* closed loop: `concurrency` clients */
        int32_t k = c->load->concurrency < c->n ? c->load->concurrency : c->n;
        pthread_t *th = calloc((size_t)k, sizeof(pthread_t));
        if (!th) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
        int32_t started = 0;
        for (; started < k; started++)
            if (pthread_create(&th[started], NULL, http_closed_main, c) != 0) break;
        if (started == 0) s = la_err_set(err, LA_ERR_NO_MEMORY, "bench: cannot start client threads");
        for (int32_t i = 0; i < started; i++) pthread_join(th[i], NULL);
        free(th);
        return s;
    }
    /* open loop: one client thread per arrival */
    pthread_t *th = calloc((size_t)c->n, sizeof(pthread_t));
    http_arrival *args = calloc((size_t)c->n, sizeof(http_arrival));
    bool *started = calloc((size_t)c->n, sizeof(bool));
    if (!th || !args || !started) {
        free(th), free(args), free(started);
        return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    }
    for (int32_t i = 0; i < c->n; i++) {
        if (!wait_turn(c, i)) {
            not_sent(c, i);
            continue;
        }
        args[i] = (http_arrival){c, i};
        started[i] = pthread_create(&th[i], NULL, http_open_main, &args[i]) == 0;
        if (!started[i]) { /* no thread: answer inline (late, but never lost) */
            http_one(c, i);
        }
    }
    for (int32_t i = 0; i < c->n; i++)
        if (started[i]) pthread_join(th[i], NULL);
    free(th), free(args), free(started);
    return s;
}

/* ---- entry ------------------------------------------------------------------------------ */

la_status la_bench_run(const la_bench_target *t, const la_bench_workload *w,
                       const la_bench_item *items, int32_t n, const la_bench_load *load,
                       la_bench_sample *out, double *wall_ms, la_bench_progress_fn progress,
                       void *progress_user, la_err *err) {
    if (!t->engine == !t->url)
        return la_err_set(err, LA_ERR_INVALID_ARG, "bench: need an engine or a URL (not both)");
    if (load->rate_per_s <= 0 && load->concurrency < 1)
        return la_err_set(err, LA_ERR_INVALID_ARG, "bench: concurrency %d must be >= 1", load->concurrency);
    memset(out, 0, sizeof(la_bench_sample) * (size_t)n);
    *wall_ms = 0;
    if (n == 0) return LA_OK;
    run_ctx c = {.t = t, .w = w, .items = items, .n = n, .load = load, .out = out,
                 .progress = progress, .progress_user = progress_user};
    if (load->rate_per_s > 0) { /* Poisson process: exponential gaps, the first at 0 */
        c.arrival_ms = malloc(sizeof(double) * (size_t)n);
        if (!c.arrival_ms) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
        uint64_t x = load->seed * 0x9e3779b97f4a7c15ull + 0x51ed;
        double at = 0;
        for (int32_t i = 0; i < n; i++) {
            c.arrival_ms[i] = at;
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            double u = ((double)(x >> 11) + 0.5) * 0x1.0p-53;
            at += -log(u) / load->rate_per_s * 1e3;
        }
    }
    pthread_mutex_init(&c.mu, NULL);
    pthread_cond_init(&c.cv, NULL);
    atomic_init(&c.next, 0);
    atomic_init(&c.submitted_all, false);
    atomic_init(&c.past_bound, false);
    c.t0 = la_now_ms();
    c.t_last_done = c.t0;
    la_status s = t->engine ? run_in_process(&c, err) : run_http(&c, err);
    *wall_ms = c.t_last_done - c.t0;
    pthread_cond_destroy(&c.cv);
    pthread_mutex_destroy(&c.mu);
    free(c.arrival_ms);
    return s;
}

/* ---- one request, in process ------------------------------------------------------------- */

void la_bench_on_done(void *user, const la_event *ev) {
    la_bench_done *d = user;
    if (ev->kind != LA_EVENT_DONE) return;
    d->done = true;
    d->stats = *ev->stats;
    d->finish = ev->finish;
    snprintf(d->error, sizeof d->error, "%s", ev->error ? ev->error : "");
}

la_status la_bench_run_one(la_engine *e, la_request_params *rp, la_bench_done *out, la_err *err) {
    memset(out, 0, sizeof *out);
    rp->on_event = la_bench_on_done;
    rp->user = out;
    LA_TRY(la_engine_submit(e, rp, NULL, err));
    la_err step_err = {0};
    while (!out->done) la_engine_step(e, &step_err);
    if (out->finish == LA_FINISH_ERROR) return la_err_set(err, LA_ERR_INTERNAL, "request failed: %s", out->error);
    return LA_OK;
}
