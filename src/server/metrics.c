/* Prometheus metrics (metrics.h). */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* Histogram bucket bounds in seconds (upper bounds; +Inf implied). */
static const double k_ttft_bounds_s[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5,   1,      2.5,   5,    10,    30,   60};
static const double k_tpot_bounds_s[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                         0.1,    0.25,  0.5,    1,     2.5};
/* End-to-end latency and queue time (submit -> admitted), seconds. */
static const double k_e2e_bounds_s[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
static const double k_queue_bounds_s[] = {0.0001, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
#define N_E2E (sizeof k_e2e_bounds_s / sizeof k_e2e_bounds_s[0])
#define N_QUEUE (sizeof k_queue_bounds_s / sizeof k_queue_bounds_s[0])
#define N_TTFT (sizeof k_ttft_bounds_s / sizeof k_ttft_bounds_s[0])
#define N_TPOT (sizeof k_tpot_bounds_s / sizeof k_tpot_bounds_s[0])

typedef struct histogram {
    int64_t counts[16]; /* per bucket (not cumulative); [n_bounds] is +Inf */
    double sum;
    int64_t n;
} histogram;

typedef struct http_count {
    const char *route;
    int code;
    int64_t n;
} http_count;

struct la_metrics {
    pthread_mutex_t mu;
    http_count *http;
    int n_http, cap_http;
    histogram ttft, tpot;
    histogram e2e, queue;    /* labelled with model_name */
    char model_name[128];
    int64_t generated_tokens;
    int64_t finished[LA_FINISH_ERROR + 1];
};

la_status la_metrics_create(la_metrics **out, la_err *err) {
    la_metrics *m = calloc(1, sizeof *m);
    if (!m) return la_err_set(err, LA_ERR_NO_MEMORY, "metrics: out of memory");
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return LA_OK;
}

void la_metrics_destroy(la_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->http);
    free(m);
}

void la_metrics_count_http(la_metrics *m, const char *route, int http_status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_http && !(m->http[i].code == http_status && !strcmp(m->http[i].route, route))) i++;
    if (i == m->n_http) {
        if (m->n_http == m->cap_http) {
            int cap = m->cap_http ? 2 * m->cap_http : 32;
            http_count *p = realloc(m->http, sizeof *p * (size_t)cap);
            if (!p) {
                pthread_mutex_unlock(&m->mu);
                return; /* a lost count, never a failed request */
            }
            m->http = p;
            m->cap_http = cap;
        }
        m->http[m->n_http++] = (http_count){route, http_status, 0};
    }
    m->http[i].n++;
    pthread_mutex_unlock(&m->mu);
}

static void observe(histogram *h, const double *bounds, size_t n_bounds, double v) {
    size_t b = 0;
    while (b < n_bounds && v > bounds[b]) b++;
    h->counts[b]++;
    h->sum += v;
    h->n++;
}

void la_metrics_observe(la_metrics *m, const la_request_stats *st, la_finish_reason why) {
    pthread_mutex_lock(&m->mu);
    if (st->n_generated > 0) observe(&m->ttft, k_ttft_bounds_s, N_TTFT, st->ttft_ms / 1e3);
    if (st->n_generated > 1) observe(&m->tpot, k_tpot_bounds_s, N_TPOT, st->tpot_ms / 1e3);
    if (why == LA_FINISH_STOP || why == LA_FINISH_LENGTH) {
        observe(&m->e2e, k_e2e_bounds_s, N_E2E, st->e2e_ms / 1e3);
        observe(&m->queue, k_queue_bounds_s, N_QUEUE, st->queue_ms / 1e3);
    }
    m->generated_tokens += st->n_generated;
    if ((unsigned)why <= LA_FINISH_ERROR) m->finished[why]++;
    pthread_mutex_unlock(&m->mu);
}

void la_metrics_set_model_name(la_metrics *m, const char *name) {
    pthread_mutex_lock(&m->mu);
    size_t k = 0; /* a label value: no quote, backslash or newline */
    for (const char *p = name; *p && k + 1 < sizeof m->model_name; p++)
        if (*p != '"' && *p != '\\' && *p != '\n') m->model_name[k++] = *p;
    m->model_name[k] = '\0';
    pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ---------------------------------------------------------------------- */

typedef struct out {
    char *p;
    size_t n, cap;
    bool oom;
} out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *fmt, ...) {
    if (o->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->p ? o->p + o->n : NULL, o->p ? o->cap - o->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            o->oom = true;
            return;
        }
        if (o->p && o->n + (size_t)k < o->cap) {
            o->n += (size_t)k;
            return;
        }
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->n + (size_t)k + 1) cap *= 2;
        char *p = realloc(o->p, cap);
        if (!p) {
            o->oom = true;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
}

static void put_metric(out *o, const char *name, const char *type, const char *help, double v) {
    put(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* A histogram; model non-NULL: its series carry model_name="...". */
static void put_labeled_histogram(out *o, const char *name, const char *help, const char *model,
                                  const histogram *h, const double *bounds, size_t n_bounds) {
    char lab[160] = "", sep[160] = ""; /* {model_name="m"} alone, and before le= */
    if (model) {
        snprintf(lab, sizeof lab, "{model_name=\"%s\"}", model);
        snprintf(sep, sizeof sep, "model_name=\"%s\",", model);
    }
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    int64_t cum = 0;
    for (size_t b = 0; b < n_bounds; b++) {
        cum += h->counts[b];
        put(o, "%s_bucket{%sle=\"%g\"} %lld\n", name, sep, bounds[b], (long long)cum);
    }
    cum += h->counts[n_bounds];
    put(o, "%s_bucket{%sle=\"+Inf\"} %lld\n%s_sum%s %.17g\n%s_count%s %lld\n", name, sep, (long long)cum, name, lab,
        h->sum, name, lab, (long long)h->n);
}

static void put_histogram(out *o, const char *name, const char *help, const histogram *h,
                          const double *bounds, size_t n_bounds) {
    put_labeled_histogram(o, name, help, NULL, h, bounds, n_bounds);
}

/* One labelled family: HELP/TYPE, then name{label="value"} v per tier. */
static void put_tiers(out *o, const char *name, const char *type, const char *help, const la_engine_store_stats *ss,
                      size_t offset, bool is_double) {
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (int t = 0; t < LA_KV_TIER_KIND_COUNT; t++) {
        const char *p = (const char *)&ss->tier[t] + offset;
        double v = is_double ? *(const double *)p : (double)*(const int64_t *)p;
        put(o, "%s{tier=\"%s\"} %.17g\n", name, la_engine_tier_name((la_kv_tier_kind)t), v);
    }
}

#define TIER_I64(name, type, help, field) \
    put_tiers(o, name, type, help, ss, offsetof(la_engine_tier_stats, field), false)
#define TIER_F64(name, type, help, field) \
    put_tiers(o, name, type, help, ss, offsetof(la_engine_tier_stats, field), true)

/* The document KV store (metrics.h). */
static void put_store(out *o, const la_engine_stats *es, const la_engine_store_stats *ss) {
    put(o, "# HELP lazyattn_kv_store_enabled Whether the store tier is configured.\n"
           "# TYPE lazyattn_kv_store_enabled gauge\n");
    for (int t = 0; t < LA_KV_TIER_KIND_COUNT; t++)
        put(o, "lazyattn_kv_store_enabled{tier=\"%s\"} %d\n", la_engine_tier_name((la_kv_tier_kind)t),
            ss->tier[t].enabled ? 1 : 0);
    put(o, "# HELP lazyattn_kv_store_up Whether the store tier is configured and its last operation "
           "succeeded (0: down or off).\n# TYPE lazyattn_kv_store_up gauge\n");
    for (int t = 0; t < LA_KV_TIER_KIND_COUNT; t++)
        put(o, "lazyattn_kv_store_up{tier=\"%s\"} %d\n", la_engine_tier_name((la_kv_tier_kind)t),
            ss->tier[t].enabled && !ss->tier[t].down ? 1 : 0);
    TIER_I64("lazyattn_kv_store_hits_total", "counter", "Document lookups the tier served.", hits);
    TIER_I64("lazyattn_kv_store_misses_total", "counter", "Document lookups the tier did not serve.", misses);
    TIER_I64("lazyattn_kv_store_read_bytes_total", "counter", "Record bytes read from the tier.", bytes_read);
    TIER_I64("lazyattn_kv_store_written_bytes_total", "counter", "Record bytes written to the tier.",
             bytes_written);
    TIER_F64("lazyattn_kv_store_read_seconds_total", "counter",
             "Seconds the tier's reads took (I/O threads; read GB/s = rate of bytes / rate of seconds).", read_s);
    TIER_F64("lazyattn_kv_store_write_seconds_total", "counter",
             "Seconds the tier's writes took (I/O threads; write GB/s = rate of bytes / rate of seconds).",
             write_s);
    TIER_I64("lazyattn_kv_store_writes_total", "counter", "Records written to the tier.", writes);
    TIER_I64("lazyattn_kv_store_write_failures_total", "counter",
             "Record writes that failed (disk full, unwritable, store down); serving goes on.", write_failures);
    TIER_I64("lazyattn_kv_store_evictions_total", "counter", "Records the tier dropped for space.", evictions);
    TIER_I64("lazyattn_kv_store_errors_total", "counter", "Reads that failed for the tier's own reasons.", errors);
    TIER_I64("lazyattn_kv_store_records", "gauge", "Records the tier holds.", records);
    TIER_I64("lazyattn_kv_store_bytes", "gauge", "Bytes of the records the tier holds.", bytes);
    put(o, "# HELP lazyattn_kv_store_reads_skipped_total Documents computed instead of read from the tier, "
           "the read estimated slower (kv_read auto; shared: Redis may or may not have held them).\n"
           "# TYPE lazyattn_kv_store_reads_skipped_total counter\n");
    for (int t = 0; t < LA_KV_TIER_KIND_COUNT; t++)
        put(o, "lazyattn_kv_store_reads_skipped_total{tier=\"%s\"} %lld\n", la_engine_tier_name((la_kv_tier_kind)t),
            (long long)ss->reads_skipped[t]);
    put_metric(o, "lazyattn_prefill_tokens_per_second", "gauge",
               "The engine's recent prefill rate that tier reads are weighed against (0: none yet).",
               ss->prefill_tokens_per_s);
    put(o, "# HELP lazyattn_kv_store_rejected_total Records read but not used (damaged, foreign, short), "
           "by reason; the document is computed instead.\n# TYPE lazyattn_kv_store_rejected_total counter\n");
    for (int32_t i = 1; i < 16 && la_engine_reject_reason_name(i); i++) /* 0 is "none" */
        put(o, "lazyattn_kv_store_rejected_total{reason=\"%s\"} %lld\n", la_engine_reject_reason_name(i),
            (long long)ss->rejected_by_reason[i]);
    put_metric(o, "lazyattn_kv_store_timeouts_total", "counter",
               "Tier reads given up after the I/O timeout (computed instead).", (double)ss->timeouts);
    put_metric(o, "lazyattn_kv_store_writebacks_total", "counter",
               "Documents the pool evicted into the host tier.", (double)ss->writebacks);
    put_metric(o, "lazyattn_kv_store_spills_total", "counter", "Host-tier records written to disk on eviction.",
               (double)ss->spills);
    put_metric(o, "lazyattn_kv_store_puts_dropped_total", "counter",
               "Records not stored: no host memory was free.", (double)ss->puts_dropped);
    put_metric(o, "lazyattn_kv_store_promotions_total", "counter",
               "Host-tier records moved into the pool (they leave the host tier).", (double)ss->promotions);
    put_metric(o, "lazyattn_kv_store_lookups_dropped_total", "counter",
               "Lower-tier lookups not made for want of staging memory (computed instead).",
               (double)ss->lookups_dropped);
    put_metric(o, "lazyattn_documents_computed_total", "counter", "Document jobs that ran the model.",
               (double)es->documents_computed);
    put_metric(o, "lazyattn_documents_loaded_total", "counter", "Document jobs a store tier served instead.",
               (double)es->documents_loaded);
    put(o, "# HELP lazyattn_kv_copy_bytes_total Bytes copied between the KV pool and host memory "
           "(in: into the pool).\n# TYPE lazyattn_kv_copy_bytes_total counter\n"
           "lazyattn_kv_copy_bytes_total{direction=\"in\"} %lld\n"
           "lazyattn_kv_copy_bytes_total{direction=\"out\"} %lld\n",
        (long long)ss->copy_in_bytes, (long long)ss->copy_out_bytes);
    put(o, "# HELP lazyattn_kv_copy_seconds_total Seconds of copies between the KV pool and host memory, "
           "as polled.\n# TYPE lazyattn_kv_copy_seconds_total counter\n"
           "lazyattn_kv_copy_seconds_total{direction=\"in\"} %.17g\n"
           "lazyattn_kv_copy_seconds_total{direction=\"out\"} %.17g\n",
        ss->copy_in_s, ss->copy_out_s);
}

char *la_metrics_render(la_metrics *m, const la_engine_stats *es, const la_engine_store_stats *ss,
                        int64_t inflight) {
    out o = {0};
    pthread_mutex_lock(&m->mu);
    put(&o, "# HELP lazyattn_http_requests_total HTTP requests answered, by route and status code.\n"
            "# TYPE lazyattn_http_requests_total counter\n");
    for (int i = 0; i < m->n_http; i++)
        put(&o, "lazyattn_http_requests_total{route=\"%s\",code=\"%d\"} %lld\n", m->http[i].route,
            m->http[i].code, (long long)m->http[i].n);
    put_histogram(&o, "lazyattn_ttft_seconds", "Time to first token (submit to first token).",
                  &m->ttft, k_ttft_bounds_s, N_TTFT);
    put_histogram(&o, "lazyattn_tpot_seconds", "Mean time per output token after the first.",
                  &m->tpot, k_tpot_bounds_s, N_TPOT);
    put_labeled_histogram(&o, "lazyattn_e2e_request_latency_seconds",
                          "End-to-end latency of finished requests (submit to done).", m->model_name, &m->e2e,
                          k_e2e_bounds_s, N_E2E);
    put_labeled_histogram(&o, "lazyattn_request_queue_time_seconds",
                          "Time finished requests waited for admission (submit to admitted).", m->model_name,
                          &m->queue, k_queue_bounds_s, N_QUEUE);
    put(&o, "# HELP lazyattn_model_info The served model.\n# TYPE lazyattn_model_info gauge\n"
            "lazyattn_model_info{model_name=\"%s\"} 1\n", m->model_name);
    put_metric(&o, "lazyattn_generated_tokens_total", "counter", "Tokens generated.",
               (double)m->generated_tokens);
    static const char *const reasons[] = {"none", "stop", "length", "cancelled", "error"};
    put(&o, "# HELP lazyattn_requests_finished_total Engine requests finished, by reason.\n"
            "# TYPE lazyattn_requests_finished_total counter\n");
    for (int r = LA_FINISH_STOP; r <= LA_FINISH_ERROR; r++)
        put(&o, "lazyattn_requests_finished_total{reason=\"%s\"} %lld\n", reasons[r],
            (long long)m->finished[r]);
    pthread_mutex_unlock(&m->mu);

    double doc_all = (double)(es->doc_tokens_reused + es->doc_tokens_computed);
    put_metric(&o, "lazyattn_prompt_tokens_total", "counter",
               "Prompt tokens (documents + prompt) of finished requests.", (double)es->prompt_tokens);
    put_metric(&o, "lazyattn_doc_tokens_reused_total", "counter",
               "Document tokens served from the KV cache.", (double)es->doc_tokens_reused);
    put_metric(&o, "lazyattn_doc_tokens_computed_total", "counter",
               "Document tokens computed.", (double)es->doc_tokens_computed);
    put_metric(&o, "lazyattn_prefix_tokens_reused_total", "counter",
               "Prompt tokens outside documents (or, for prefix, from the prompt start) served "
               "from the KV cache.", (double)es->prefix_tokens_reused);
    put_metric(&o, "lazyattn_doc_hit_ratio", "gauge",
               "Document tokens reused / document tokens needed.",
               doc_all > 0 ? (double)es->doc_tokens_reused / doc_all : 0);
    put_metric(&o, "lazyattn_prefix_hit_ratio", "gauge", "Prefix tokens reused / prompt tokens.",
               es->prompt_tokens > 0 ? (double)es->prefix_tokens_reused / (double)es->prompt_tokens : 0);
    put_metric(&o, "lazyattn_kv_blocks_total", "gauge", "KV pool capacity in blocks.",
               (double)es->kv_blocks_total);
    put_metric(&o, "lazyattn_kv_blocks_free", "gauge", "KV blocks on the free list.",
               (double)es->kv_blocks_free);
    put_metric(&o, "lazyattn_kv_blocks_used", "gauge", "KV blocks holding data (pinned + cached).",
               (double)(es->kv_blocks_total - es->kv_blocks_free));
    put_metric(&o, "lazyattn_kv_blocks_cached", "gauge", "Unpinned cached KV blocks (evictable).",
               (double)es->kv_blocks_cached);
    put_metric(&o, "lazyattn_kv_blocks_pinned", "gauge", "KV blocks pinned by running requests.",
               (double)es->kv_blocks_pinned);
    put_metric(&o, "lazyattn_block_size_tokens", "gauge", "KV block size in tokens.",
               (double)es->block_size);
    put_metric(&o, "lazyattn_queue_depth", "gauge", "Requests waiting for admission.",
               (double)es->n_waiting);
    put_metric(&o, "lazyattn_running_requests", "gauge", "Requests in prefill or decode.",
               (double)es->n_running);
    put_metric(&o, "lazyattn_inflight_http_requests", "gauge",
               "HTTP requests waiting on the engine.", (double)inflight);
    put(&o, "# HELP lazyattn_engine_requests_total Engine requests finished, by outcome.\n"
            "# TYPE lazyattn_engine_requests_total counter\n"
            "lazyattn_engine_requests_total{outcome=\"ok\"} %lld\n"
            "lazyattn_engine_requests_total{outcome=\"error\"} %lld\n"
            "lazyattn_engine_requests_total{outcome=\"cancelled\"} %lld\n",
        (long long)es->requests_ok, (long long)es->requests_error, (long long)es->requests_cancelled);
    put_metric(&o, "lazyattn_kv_hits_total", "counter", "KV index lookups that found a block.",
               (double)es->kv_hits);
    put_metric(&o, "lazyattn_kv_misses_total", "counter", "KV index lookups that found nothing.",
               (double)es->kv_misses);
    put_metric(&o, "lazyattn_kv_evictions_total", "counter", "Cached KV blocks evicted.",
               (double)es->kv_evictions);
    put_metric(&o, "lazyattn_preemptions_total", "counter", "Requests preempted (recomputed).",
               (double)es->n_preemptions);
    put_metric(&o, "lazyattn_engine_steps_total", "counter", "Engine scheduler steps.",
               (double)es->n_steps);
    put_metric(&o, "lazyattn_engine_async_steps_total", "counter",
               "Decode steps queued before the step ahead of them was read back (async scheduling).",
               (double)es->steps_async);
    put_metric(&o, "lazyattn_engine_rows_dropped_total", "counter",
               "Rows of such steps whose request had stopped in the step before: computed, dropped.",
               (double)es->rows_dropped);
    put_metric(&o, "lazyattn_doc_token_cache_hits_total", "counter",
               "Lookups of documents given as text (requests, /tokenize, document info) that the "
               "document token cache served.",
               (double)es->doc_token_cache_hits);
    put_metric(&o, "lazyattn_doc_token_cache_misses_total", "counter",
               "Lookups of documents given as text that went to the tokenizer (refused text included).",
               (double)es->doc_token_cache_misses);
    put_metric(&o, "lazyattn_doc_token_cache_bytes", "gauge",
               "Bytes the document token cache holds (its entries and hash map).",
               (double)es->doc_token_cache_bytes);
    put_metric(&o, "lazyattn_doc_token_cache_entries", "gauge", "Documents the document token cache holds.",
               (double)es->doc_token_cache_entries);
    put_metric(&o, "lazyattn_doc_token_cache_evictions_total", "counter",
               "Document token cache entries dropped for room (least recently used first).",
               (double)es->doc_token_cache_evictions);
    put(&o, "# HELP lazyattn_engine_step_seconds_total Seconds of the engine's computed steps, by phase "
            "(batch_begin: the backend's host setup, a part of forward).\n"
            "# TYPE lazyattn_engine_step_seconds_total counter\n"
            "lazyattn_engine_step_seconds_total{phase=\"schedule\"} %.6f\n"
            "lazyattn_engine_step_seconds_total{phase=\"forward\"} %.6f\n"
            "lazyattn_engine_step_seconds_total{phase=\"batch_begin\"} %.6f\n"
            "lazyattn_engine_step_seconds_total{phase=\"after\"} %.6f\n",
        es->step_schedule_s, es->step_forward_s, es->step_batch_begin_s, es->step_after_s);
    if (ss) put_store(&o, es, ss);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    return o.p;
}
