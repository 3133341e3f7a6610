/* One `lazyattn bench` session (session.h). */
#include "bench/session.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "bench/machine.h"
#include "bench/store_stats.h"

const char *la_bench_sweep_name(la_bench_sweep_kind k) {
    static const char *const names[] = {"none", "kv", "rate", "concurrency", "context", "host-kv"};
    return k >= 0 && k < LA_BENCH_SWEEP_COUNT ? names[k] : "?";
}

/* ---- running ---------------------------------------------------------------------------- */

static la_status make_engine(const la_bench_session_opts *o, const la_bench_point *p, int32_t max_running,
                             la_engine **e, la_err *err) {
    la_engine_options eo = o->eo;
    if (p && p->kv_blocks) eo.kv_blocks = p->kv_blocks;
    if (p && o->sweep == LA_BENCH_SWEEP_HOST_KV) eo.host_kv_bytes = p->host_kv_bytes;
    eo.max_running = max_running > 64 ? max_running : 64;
    eo.max_queue = 1 << 16;
    return la_engine_create(&eo, e, err);
}

/* The engine's steps between two snapshots of its stats (a before b), over wall_ms:
 *   {"steps", "decode_steps", "async_steps", "rows_dropped", "rows_per_step", "wall_ms_per_step",
 *    "ms_per_step": {"schedule", "forward", "batch_begin", "after"}, "decode_step_ms",
 *    "decode_forward_ms_per_step", "decode_batch_begin_ms_per_step", "doc_token_cache_hits",
 *    "doc_token_cache_misses"}
 * (la_engine_stats: schedule = intake, admission and packing; forward = the backend's batch
 * setup, kernels and the wait for the results, of which batch_begin the setup on the host;
 * after = sampling and bookkeeping; the decode steps': every sequence one decode row, whole
 * and forward alone, null without any; the document token cache's lookups between the two
 * snapshots that it served / that went to the tokenizer: each request's documents as it is
 * submitted). NULL when no step ran. */
static cJSON *step_stats_json(const la_engine_stats *a, const la_engine_stats *b, double wall_ms) {
    const int64_t n = b->steps_computed - a->steps_computed, nd = b->steps_decode - a->steps_decode;
    if (n <= 0) return NULL;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "steps", (double)n);
    cJSON_AddNumberToObject(j, "decode_steps", (double)nd);
    cJSON_AddNumberToObject(j, "async_steps", (double)(b->steps_async - a->steps_async));
    cJSON_AddNumberToObject(j, "rows_dropped", (double)(b->rows_dropped - a->rows_dropped));
    cJSON_AddNumberToObject(j, "rows_per_step", (double)(b->step_rows - a->step_rows) / (double)n);
    cJSON_AddNumberToObject(j, "wall_ms_per_step", wall_ms / (double)n);
    cJSON *ms = cJSON_AddObjectToObject(j, "ms_per_step");
    cJSON_AddNumberToObject(ms, "schedule", 1e3 * (b->step_schedule_s - a->step_schedule_s) / (double)n);
    cJSON_AddNumberToObject(ms, "forward", 1e3 * (b->step_forward_s - a->step_forward_s) / (double)n);
    cJSON_AddNumberToObject(ms, "batch_begin", 1e3 * (b->step_batch_begin_s - a->step_batch_begin_s) / (double)n);
    cJSON_AddNumberToObject(ms, "after", 1e3 * (b->step_after_s - a->step_after_s) / (double)n);
    if (nd > 0) {
        cJSON_AddNumberToObject(j, "decode_step_ms", 1e3 * (b->step_decode_s - a->step_decode_s) / (double)nd);
        cJSON_AddNumberToObject(j, "decode_forward_ms_per_step",
                                1e3 * (b->step_decode_forward_s - a->step_decode_forward_s) / (double)nd);
        cJSON_AddNumberToObject(j, "decode_batch_begin_ms_per_step",
                                1e3 * (b->step_decode_batch_begin_s - a->step_decode_batch_begin_s) / (double)nd);
    } else { /* present, so that a reader need not test for them */
        cJSON_AddNullToObject(j, "decode_step_ms");
        cJSON_AddNullToObject(j, "decode_forward_ms_per_step");
        cJSON_AddNullToObject(j, "decode_batch_begin_ms_per_step");
    }
    cJSON_AddNumberToObject(j, "doc_token_cache_hits", (double)(b->doc_token_cache_hits - a->doc_token_cache_hits));
    cJSON_AddNumberToObject(j, "doc_token_cache_misses",
                            (double)(b->doc_token_cache_misses - a->doc_token_cache_misses));
    return j;
}

/* Warm up and measure one method at one point. */
static la_status run_method(la_bench_session *b, la_bench_point *p, int32_t pi, int32_t mi, la_engine *e,
                             double *wall_ms, la_err *err) {
    const la_bench_session_opts *o = &b->o;
    la_method_spec m = o->methods[mi];
    char salt[96];
    snprintf(salt, sizeof salt, "lazyattn-bench:%s:%d:%s", b->nonce, pi, m.name);
    la_bench_target t = {.engine = e, .url = o->url ? &b->url : NULL, .method = m.method,
                         .recompute_first = m.recompute_first, .recompute_ratio = m.recompute_ratio,
                         .doc_context = m.doc_context,
                         .cache_salt = o->cache_salt ? o->cache_salt : salt,
                         .max_tokens = o->max_tokens, .ignore_eos = o->ignore_eos, .timeout_s = o->timeout_s,
                         .raw = o->raw};
    la_bench_workload *w = p->w;
    /* warm-up: a closed loop, as wide as the measured one (4 wide for open loops) */
    la_bench_load warm = {.concurrency = p->load.rate_per_s > 0 ? 4 : p->load.concurrency};
    la_bench_sample *ws = calloc((size_t)w->n_warmup + 1, sizeof(la_bench_sample));
    p->samples[mi] = calloc((size_t)w->n_measured + 1, sizeof(la_bench_sample));
    if (!ws || !p->samples[mi]) {
        free(ws);
        return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    }
    double wall = 0;
    char at[48] = ""; /* the sweep point, for the progress lines */
    if (o->sweep) snprintf(at, sizeof at, "%s %g: ", la_bench_sweep_name(o->sweep), p->x);
    snprintf(b->phase, sizeof b->phase, "%s%s warm-up", at, m.name);
    int32_t n_warm = o->no_warmup ? 0 : w->n_warmup;
    la_status s =
        la_bench_run(&t, w, w->warmup, n_warm, &warm, ws, &wall, b->on_request, b->progress_user, err);
    for (int32_t i = 0; s == LA_OK && i < n_warm; i++)
        if (!ws[i].ok) { /* a failing warm-up leaves nothing worth measuring */
            int32_t n_failed = 0;
            for (int32_t j = 0; j < w->n_warmup; j++) n_failed += !ws[j].ok;
            s = la_err_set(err, LA_ERR_INTERNAL, "%s: %d of %d warm-up requests failed, first: %s",
                           m.name, n_failed, w->n_warmup, ws[i].error);
        }
    la_bench_samples_free(ws, w->n_warmup);
    free(ws);
    if (s != LA_OK) return s;
    snprintf(b->phase, sizeof b->phase, "%s%s", at, m.name);
    la_engine_stats es0 = {0};
    if (e) la_engine_get_stats(e, &es0);
    s = la_bench_run(&t, w, w->measured, w->n_measured, &p->load, p->samples[mi], &wall, b->on_request,
                     b->progress_user, err);
    p->n_samples = w->n_measured;
    if (s != LA_OK) return s;
    if (e) {
        la_engine_stats es1;
        la_engine_get_stats(e, &es1);
        cJSON_Delete(p->step_stats[mi]);
        p->step_stats[mi] = step_stats_json(&es0, &es1, wall);
    }
    la_bench_summarize(m, w->measured, p->samples[mi], w->n_measured, wall, &p->sum[mi]);
    b->store = b->store || p->sum[mi].store;
    p->sum[mi].store = b->store;
    if (e) { /* the store's own numbers (flushed: the writes of this run count) */
        la_engine_store_stats ss;
        la_engine_store_flush(e);
        la_engine_get_store_stats(e, &ss);
        if (la_bench_store_enabled(&ss)) {
            la_engine_stats es;
            la_engine_get_stats(e, &es);
            cJSON_Delete(p->store_stats[mi]);
            p->store_stats[mi] = la_bench_store_stats_json(&ss, &es);
        }
    }
    /* a request the duration bound kept or cut is the point's saturation, not a failure */
    const la_bench_summary *su = &p->sum[mi];
    b->n_sent += w->n_measured - su->n_not_sent;
    b->n_failed += w->n_measured - su->n_ok - su->n_not_sent - su->n_cut;
    *wall_ms = wall;
    return LA_OK;
}

/* Tokens per word of synthetic text: from the engine's tokenizer, or over HTTP from the
 * server's document pre-warm answer; 1.3 (English with Llama-3) if neither works. */
static double calibrate_tokens_per_word(la_bench_session *b, la_engine *e) {
    const int32_t n_words = 300;
    char *text = la_bench_synthetic_text(987654321, n_words);
    double rate = 0;
    if (text && e) {
        int32_t *ids = NULL, n = 0;
        la_err err = {0};
        if (la_engine_tokenize(e, text, strlen(text), false, &ids, &n, &err) == LA_OK)
            rate = (double)n / (n_words + 2);
        free(ids);
    } else if (text && b->o.url) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "documents"), cJSON_CreateString(text));
        char salt[96];
        snprintf(salt, sizeof salt, "lazyattn-bench:%s:calibrate", b->nonce);
        cJSON_AddStringToObject(o, "cache_salt", salt);
        char *body = cJSON_PrintUnformatted(o), *answer = NULL;
        cJSON_Delete(o);
        int status = 0;
        la_err err = {0};
        if (body && la_bench_http_request(&b->url, "POST", "/v1/documents", body, b->o.timeout_s, NULL, NULL,
                                          &status, &answer, &err) == LA_OK && status == 200) {
            cJSON *a = cJSON_Parse(answer);
            const cJSON *tok = cJSON_GetObjectItemCaseSensitive(a, "tokens");
            if (cJSON_IsNumber(tok)) rate = tok->valuedouble / (n_words + 2);
            cJSON_Delete(a);
        }
        free(body);
        free(answer);
    }
    free(text);
    return rate > 0 ? rate : 1.3;
}

/* The tokens of one question alone (0 for none). */
static la_status question_tokens(la_engine *e, const char *question, int32_t *n, la_err *err) {
    int32_t *ids = NULL;
    *n = 0;
    if (!question || !*question) return LA_OK;
    la_status s = la_engine_tokenize(e, question, strlen(question), false, &ids, n, err);
    free(ids);
    return s;
}

/* kv sweep: the blocks of every pool document ("- Title: ...\n...\n" as the RAG template
 * renders it), and the fewest blocks in which every request can run alone under every
 * method of the session (the capacity's floor): its preamble and documents, its question
 * and output, and what the method holds beside them (block: a copy of every document
 * block; +rN: copies of documents 1.. first ceil(min(N, L_d) / B) blocks). The preamble and
 * the template's tokens come from one probe request, each question's from the tokenizer. */
static la_status size_kv(la_bench_session *b, la_engine *e, la_err *err) {
    la_engine_stats st;
    la_engine_get_stats(e, &st);
    /* the options' block size when the engine's stats leave it 0 */
    int32_t B = b->block_size = st.block_size > 0 ? st.block_size : b->o.eo.block_size;
    la_bench_workload *w = &b->shared;
    int32_t *doc_tokens = calloc((size_t)w->n_docs + 1, sizeof(int32_t));
    if (!doc_tokens) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    b->pool_doc_blocks = 0;
    la_status s = LA_OK;
    for (int32_t d = 0; d < w->n_docs && s == LA_OK; d++) {
        size_t cap = strlen(w->docs[d].title) + strlen(w->docs[d].text) + 16;
        char *text = malloc(cap);
        int32_t *ids = NULL;
        if (!text) {
            s = la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
            break;
        }
        snprintf(text, cap, "- Title: %s\n%s\n", w->docs[d].title, w->docs[d].text);
        s = la_engine_tokenize(e, text, strlen(text), false, &ids, &doc_tokens[d], err);
        free(text);
        free(ids);
        b->pool_doc_blocks += (doc_tokens[d] + B - 1) / B;
    }
    /* the probe: preamble = its document tokens beyond the documents', tail = the rest */
    char salt[96];
    snprintf(salt, sizeof salt, "lazyattn-bench:%s:probe", b->nonce);
    la_bench_target t = {.engine = e, .method = LA_METHOD_LAZY, .cache_salt = salt, .max_tokens = 1,
                         .raw = b->o.raw};
    la_bench_load one = {.concurrency = 1};
    la_bench_sample probe;
    double wall;
    if (s == LA_OK) s = la_bench_run(&t, w, w->measured, 1, &one, &probe, &wall, NULL, NULL, err);
    if (s == LA_OK && !probe.ok)
        s = la_err_set(err, LA_ERR_INTERNAL, "--sweep kv: probe request failed: %s", probe.error);
    if (s == LA_OK) {
        int64_t docs0 = 0;
        for (int32_t d = 0; d < w->measured[0].n_docs; d++) docs0 += doc_tokens[w->measured[0].doc_ids[d]];
        int64_t preamble = probe.n_doc_tokens - docs0, tail = probe.n_prompt_tokens - probe.n_doc_tokens;
        if (preamble < 0) preamble = 0;
        int32_t q0 = 0; /* the probe's question: measured[0], the loop's first item */
        b->kv_request_doc_blocks = b->kv_request_tail_blocks = b->kv_floor_blocks = 0;
        for (int32_t i = 0; s == LA_OK && i < w->n_measured + w->n_warmup; i++) {
            const la_bench_item *it = i < w->n_measured ? &w->measured[i] : &w->warmup[i - w->n_measured];
            int32_t q = 0;
            s = question_tokens(e, it->question, &q, err);
            if (i == 0) q0 = q;
            int64_t docs = (preamble + B - 1) / B;
            for (int32_t d = 0; d < it->n_docs; d++) docs += (doc_tokens[it->doc_ids[d]] + B - 1) / B;
            /* 32: room for the question's tokens meeting the template's differently */
            int64_t tail_i = (tail - q0 + q + 32 + b->o.max_tokens + B - 1) / B;
            if (docs > b->kv_request_doc_blocks) b->kv_request_doc_blocks = docs;
            if (tail_i > b->kv_request_tail_blocks) b->kv_request_tail_blocks = tail_i;
            for (int32_t m = 0; m < b->o.n_methods; m++) {
                la_method_spec ms = b->o.methods[m];
                int64_t need = docs + tail_i;
                if (ms.method == LA_METHOD_BLOCK) need += docs;
                else if (ms.recompute_first > 0 || ms.recompute_ratio > 0.0f) /* plan document 0 is the
                                                                                 preamble, else the first */
                    for (int32_t d = preamble > 0 ? 0 : 1; d < it->n_docs; d++) {
                        int32_t L = doc_tokens[it->doc_ids[d]];
                        int32_t rc = ms.recompute_ratio > 0.0f || ms.recompute_first > L ? L : ms.recompute_first;
                        need += (rc + B - 1) / B; /* selected recovery copies every block */
                    }
                if (need > b->kv_floor_blocks) b->kv_floor_blocks = need;
            }
        }
    }
    la_bench_samples_free(&probe, 1);
    free(doc_tokens);
    return s;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Rate sweep default points: multiples of the single-stream rate of the first method's cold
 * (warm-up) requests, measured at concurrency 1 under a salt of its own. */
static la_status calibrate_rate(la_bench_session *b, la_engine *e, la_err *err) {
    la_bench_workload *w = &b->shared;
    int32_t n = w->n_warmup < 8 ? w->n_warmup : 8;
    char salt[96];
    snprintf(salt, sizeof salt, "lazyattn-bench:%s:calibrate-rate", b->nonce);
    la_bench_target t = {.engine = e, .url = b->o.url ? &b->url : NULL, .method = b->o.methods[0].method,
                         .recompute_first = b->o.methods[0].recompute_first,
                         .recompute_ratio = b->o.methods[0].recompute_ratio,
                         .doc_context = b->o.methods[0].doc_context, .cache_salt = salt, .max_tokens = b->o.max_tokens, .ignore_eos = b->o.ignore_eos,
                         .timeout_s = b->o.timeout_s, .raw = b->o.raw};
    la_bench_load one = {.concurrency = 1};
    la_bench_sample *s = calloc((size_t)n + 1, sizeof(la_bench_sample));
    if (!s) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    double wall = 0, e2e = 0;
    snprintf(b->phase, sizeof b->phase, "calibrating the rate");
    la_status st = la_bench_run(&t, w, w->warmup, n, &one, s, &wall, NULL, NULL, err);
    int32_t ok = 0;
    for (int32_t i = 0; i < n; i++)
        if (s[i].ok) e2e += s[i].e2e_ms, ok++;
    la_bench_samples_free(s, n);
    free(s);
    if (st != LA_OK) return st;
    if (!ok) return la_err_set(err, LA_ERR_INTERNAL, "--sweep rate: every calibration request failed");
    b->calib_base_rate = 1000.0 / (e2e / ok);
    static const double mult[] = {0.5, 1, 2, 4, 8};
    b->o.n_points = 5;
    for (int i = 0; i < 5; i++) {
        double r = b->calib_base_rate * mult[i];
        double mag = pow(10, floor(log10(r)) - 1); /* two significant digits */
        b->o.points[i] = round(r / mag) * mag;
    }
    return LA_OK;
}

/* The points of the run (one without a sweep). */
static la_status plan_points(la_bench_session *b, la_err *err) {
    la_bench_session_opts *o = &b->o;
    static const double kv_pct[] = {10, 25, 50, 100, 200, 400};
    static const double conc[] = {1, 2, 4, 8, 16};
    static const double ctx_tokens[] = {64, 128, 256, 512, 1024};
    static const double ctx_docs[] = {1, 2, 4, 6, 8, 10};
    static const double host_gib[] = {0, 0.25, 1};
    bool synthetic = !strcmp(o->wo.dataset, "synthetic");
    if (!o->n_points) {
        const double *def = NULL;
        int n = 0;
        if (o->sweep == LA_BENCH_SWEEP_KV) def = kv_pct, n = 6;
        if (o->sweep == LA_BENCH_SWEEP_CONCURRENCY) def = conc, n = 5;
        if (o->sweep == LA_BENCH_SWEEP_CONTEXT) def = synthetic ? ctx_tokens : ctx_docs, n = synthetic ? 5 : 6;
        if (o->sweep == LA_BENCH_SWEEP_HOST_KV) def = host_gib, n = 3;
        for (int i = 0; i < n; i++) o->points[i] = def[i];
        if (n) o->n_points = n;
    }
    if (o->sweep != LA_BENCH_SWEEP_RATE && o->sweep != LA_BENCH_SWEEP_CONTEXT)
        qsort(o->points, (size_t)o->n_points, sizeof(double), cmp_dbl);
    b->n_points = o->sweep == LA_BENCH_SWEEP_NONE ? 1 : o->n_points;
    for (int32_t k = 0; k < b->n_points; k++) {
        la_bench_point *p = &b->points[k];
        p->x = o->sweep == LA_BENCH_SWEEP_NONE ? 0 : o->points[k];
        p->w = &b->shared;
        p->load = (la_bench_load){
            .concurrency = o->concurrency, .rate_per_s = o->rate_per_s, .seed = o->wo.seed + (uint64_t)k,
            .max_s = o->duration_s};
        if (o->sweep == LA_BENCH_SWEEP_KV) { /* the whole KV pool, the same for every method */
            p->kv_blocks = (int64_t)ceil(p->x / 100.0 * (double)b->pool_doc_blocks);
            if (p->kv_blocks < b->kv_floor_blocks) p->kv_blocks = b->kv_floor_blocks;
        }
        if (o->sweep == LA_BENCH_SWEEP_RATE) p->load.rate_per_s = p->x;
        if (o->sweep == LA_BENCH_SWEEP_HOST_KV) p->host_kv_bytes = (int64_t)(p->x * 1073741824.0);
        if (o->sweep == LA_BENCH_SWEEP_CONCURRENCY) p->load.concurrency = (int32_t)p->x;
        if (o->sweep == LA_BENCH_SWEEP_CONTEXT) {
            la_bench_workload_opts wo = o->wo;
            wo.tokens_per_word = b->tokens_per_word;
            if (synthetic) wo.doc_tokens = (int32_t)p->x;
            else wo.max_docs = (int32_t)p->x;
            p->w = calloc(1, sizeof(la_bench_workload));
            if (!p->w) return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
            p->owns_w = true;
            LA_TRY(la_bench_workload_create(&wo, p->w, err));
        }
    }
    return LA_OK;
}

/* ---- the session ------------------------------------------------------------------------ */

static la_status fetch_server_model(la_bench_session *b, la_err *err) {
    int status = 0;
    char *body = NULL;
    LA_TRY(la_bench_http_request(&b->url, "GET", "/v1/models", NULL, b->o.timeout_s, NULL, NULL, &status,
                                 &body, err));
    cJSON *o = status == 200 && body ? cJSON_Parse(body) : NULL;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "data"), 0), "id");
    snprintf(b->model, sizeof b->model, "%s", cJSON_IsString(id) ? id->valuestring : "unknown");
    cJSON_Delete(o);
    free(body);
    snprintf(b->device, sizeof b->device, "server");
    if (status != 200) {
        la_err_set(err, LA_ERR_IO, "%s: GET /v1/models answered HTTP %d", b->o.url, status);
        return LA_ERR_IO;
    }
    return LA_OK;
}

la_status la_bench_session_create(const la_bench_session_opts *o, la_bench_progress_fn on_request,
                                  void *progress_user, la_bench_session **out, la_err *err) {
    *out = NULL;
    la_bench_session *b = calloc(1, sizeof *b);
    if (!b) return la_err_set(err, LA_ERR_NO_MEMORY, "out of memory");
    b->o = *o;
    b->on_request = on_request;
    b->progress_user = progress_user;
    snprintf(b->nonce, sizeof b->nonce, "%lx-%x", (unsigned long)time(NULL), (unsigned)getpid());
    la_machine_loadavg(b->loadavg_start, sizeof b->loadavg_start);
    if (o->url) {
        la_status s = la_bench_url_parse(o->url, &b->url, err);
        if (s != LA_OK) {
            free(b);
            return s;
        }
    }
    *out = b;
    return LA_OK;
}

la_status la_bench_session_prepare(la_bench_session *b, la_err *err) {
    la_bench_session_opts *o = &b->o;
    la_status s = LA_OK;
    if (o->url) {
        s = fetch_server_model(b, err);
    } else {
        int32_t max_c = o->concurrency;
        if (o->sweep == LA_BENCH_SWEEP_CONCURRENCY)
            for (int32_t i = 0; i < o->n_points; i++)
                max_c = o->points[i] > max_c ? (int32_t)o->points[i] : max_c;
        s = make_engine(o, NULL, max_c, &b->engine, err);
        if (s == LA_OK) {
            snprintf(b->model, sizeof b->model, "%s", la_engine_model_name(b->engine));
            snprintf(b->device, sizeof b->device, "%s", la_engine_device_name(b->engine));
            la_engine_stats st;
            la_engine_get_stats(b->engine, &st);
            b->max_batch_tokens = st.max_batch_tokens;
        }
    }
    b->store = !o->url && (o->eo.host_kv_bytes > 0 || o->eo.kv_dir || o->eo.kv_store_url ||
                           o->sweep == LA_BENCH_SWEEP_HOST_KV);
    bool synthetic = !strcmp(o->wo.dataset, "synthetic");
    b->tokens_per_word = o->wo.tokens_per_word;
    if (s == LA_OK && synthetic)
        b->tokens_per_word = o->wo.tokens_per_word = calibrate_tokens_per_word(b, b->engine);
    if (s == LA_OK &&
        o->sweep == LA_BENCH_SWEEP_CONCURRENCY) { /* each point needs at least 2x its requests in flight */
        int32_t max_c = 1;
        for (int32_t i = 0; i < o->n_points; i++) max_c = o->points[i] > max_c ? (int32_t)o->points[i] : max_c;
        if (!o->n_points) max_c = 16;
        /* the default count only: --requests N is N measured requests per method and point */
        if (!o->requests_set && o->wo.n_requests < 2 * max_c) o->wo.n_requests = 2 * max_c;
    }
    if (s == LA_OK) s = la_bench_workload_create(&o->wo, &b->shared, err);
    if (s == LA_OK && o->sweep == LA_BENCH_SWEEP_KV) s = size_kv(b, b->engine, err);
    if (s == LA_OK && o->sweep == LA_BENCH_SWEEP_RATE && !o->n_points) s = calibrate_rate(b, b->engine, err);
    if (s == LA_OK) s = plan_points(b, err);
    return s;
}

la_status la_bench_session_run(la_bench_session *b, int32_t k, int32_t mi, double *wall_ms, la_err *err) {
    la_bench_point *p = &b->points[k];
    *wall_ms = 0;
    if (b->o.sweep == LA_BENCH_SWEEP_KV || b->o.sweep == LA_BENCH_SWEEP_HOST_KV) {
        /* a fresh engine of this capacity: nothing else in it */
        la_engine_destroy(b->engine);
        b->engine = NULL;
        LA_TRY(make_engine(&b->o, p, b->o.concurrency, &b->engine, err));
    }
    return run_method(b, p, k, mi, b->engine, wall_ms, err);
}

void la_bench_session_destroy(la_bench_session *b) {
    if (!b) return;
    for (int32_t k = 0; k < b->n_points; k++) {
        la_bench_point *p = &b->points[k];
        for (int32_t m = 0; m < b->o.n_methods; m++) {
            la_bench_samples_free(p->samples[m], p->n_samples);
            free(p->samples[m]);
            cJSON_Delete(p->store_stats[m]);
            cJSON_Delete(p->step_stats[m]);
        }
        if (p->owns_w) {
            la_bench_workload_free(p->w);
            free(p->w);
        }
    }
    la_bench_workload_free(&b->shared);
    la_engine_destroy(b->engine);
    free(b);
}
