/* Prometheus metrics (metrics.h). */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* Histogram bucket bounds in seconds (upper bounds; +Inf implied). */
static const double k_ttft_bounds_s[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                         0.5,   1,      2.5,   5,    10,    30,   60};
static const double k_tpot_bounds_s[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                         0.1,    0.25,  0.5,    1,     2.5};
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
    m->generated_tokens += st->n_generated;
    if ((unsigned)why <= LA_FINISH_ERROR) m->finished[why]++;
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

static void put_histogram(out *o, const char *name, const char *help, const histogram *h,
                          const double *bounds, size_t n_bounds) {
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    int64_t cum = 0;
    for (size_t b = 0; b < n_bounds; b++) {
        cum += h->counts[b];
        put(o, "%s_bucket{le=\"%g\"} %lld\n", name, bounds[b], (long long)cum);
    }
    cum += h->counts[n_bounds];
    put(o, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.17g\n%s_count %lld\n", name, (long long)cum, name,
        h->sum, name, (long long)h->n);
}

char *la_metrics_render(la_metrics *m, const la_engine_stats *es, int64_t inflight) {
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
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    return o.p;
}
