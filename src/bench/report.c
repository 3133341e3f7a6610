/* Summaries of `lazyattn bench` runs (report.h). */
#include "bench/report.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bench/rag_dataset.h"

/* ---- distributions ---------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double la_bench_percentile(const double *v, int32_t n, double p) {
    if (n <= 0) return NAN;
    int32_t k = (int32_t)ceil(p / 100.0 * n) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    return v[k];
}

la_bench_dist la_bench_dist_of(double *v, int32_t n) {
    la_bench_dist d = {.n = n, .mean = NAN, .p50 = NAN, .p90 = NAN, .p99 = NAN};
    if (n == 0) return d;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += v[i];
    d.mean = sum / n;
    d.p50 = la_bench_percentile(v, n, 50);
    d.p90 = la_bench_percentile(v, n, 90);
    d.p99 = la_bench_percentile(v, n, 99);
    return d;
}

/* ---- summary ---------------------------------------------------------------------------- */

void la_bench_summarize(la_method_spec method, const la_bench_item *items, const la_bench_sample *samples,
                        int32_t n, double wall_ms, la_bench_summary *out) {
    la_bench_summary s = {.method = method, .n_requests = n, .exact_match = NAN};
    int32_t n_itl = 0;
    for (int32_t i = 0; i < n; i++) n_itl += samples[i].ok ? samples[i].n_itl : 0;
    double *ttft = malloc(sizeof(double) * (size_t)(n + 1)), *tpot = malloc(sizeof(double) * (size_t)(n + 1));
    double *e2e = malloc(sizeof(double) * (size_t)(n + 1)), *sttft = malloc(sizeof(double) * (size_t)(n + 1));
    double *itl = malloc(sizeof(double) * (size_t)(n_itl + 1));
    if (!ttft || !tpot || !e2e || !sttft || !itl) {
        free(ttft), free(tpot), free(e2e), free(sttft), free(itl);
        snprintf(s.first_error, sizeof s.first_error, "out of memory");
        *out = s;
        return;
    }
    int32_t n_tpot = 0, n_em = 0, em = 0;
    int64_t recomputed = 0;
    int64_t doc_tokens = 0, doc_reused = 0, prompt_tokens = 0, prefix_reused = 0, cached = 0, output = 0;
    int64_t tier_tokens[3] = {0}; /* host, disk, shared */
    n_itl = 0;
    bool blockwise = la_method_is_blockwise(method.method);
    for (int32_t i = 0; i < n; i++) {
        const la_bench_sample *x = &samples[i];
        s.n_not_sent += x->not_sent;
        s.n_cut += x->cut;
        if (!x->ok) {
            if (!s.first_error[0] && !x->not_sent && !x->cut)
                snprintf(s.first_error, sizeof s.first_error, "%s", x->error);
            continue;
        }
        ttft[s.n_ok] = x->ttft_ms;
        e2e[s.n_ok] = x->e2e_ms;
        sttft[s.n_ok] = x->server_ttft_ms;
        s.n_ok++;
        if (x->has_tpot) tpot[n_tpot++] = x->tpot_ms;
        for (int32_t k = 0; k < x->n_itl; k++) itl[n_itl++] = x->itl_ms[k];
        doc_tokens += x->n_doc_tokens;
        doc_reused += blockwise ? x->doc_tokens_reused
                                : (x->prefix_tokens_reused < x->n_doc_tokens ? x->prefix_tokens_reused
                                                                             : x->n_doc_tokens);
        tier_tokens[0] += x->doc_tokens_host;
        tier_tokens[1] += x->doc_tokens_disk;
        tier_tokens[2] += x->doc_tokens_shared;
        recomputed += x->doc_tokens_recomputed;
        prompt_tokens += x->n_prompt_tokens;
        prefix_reused += x->prefix_tokens_reused;
        cached += x->cached_tokens;
        output += x->n_generated;
        if (items[i].n_answers > 0) {
            n_em++;
            em += la_rag_answer_matches(x->text ? x->text : "", items[i].answers, items[i].n_answers);
        }
    }
    s.saturated = s.n_cut > 0;
    s.ttft_ms = la_bench_dist_of(ttft, s.n_ok);
    s.e2e_ms = la_bench_dist_of(e2e, s.n_ok);
    s.server_ttft_ms = la_bench_dist_of(sttft, s.n_ok);
    s.tpot_ms = la_bench_dist_of(tpot, n_tpot);
    s.itl_ms = la_bench_dist_of(itl, n_itl);
    s.wall_s = wall_ms / 1e3;
    double wall = s.wall_s > 0 ? s.wall_s : NAN;
    s.requests_per_s = s.n_ok / wall;
    s.output_tokens_per_s = (double)output / wall;
    s.prompt_tokens_per_s = (double)prompt_tokens / wall;
    s.doc_hit_ratio = doc_tokens ? (double)doc_reused / (double)doc_tokens : 0;
    if (doc_tokens) {
        s.doc_hit_ratio_host = (double)tier_tokens[0] / (double)doc_tokens;
        s.doc_hit_ratio_disk = (double)tier_tokens[1] / (double)doc_tokens;
        s.doc_hit_ratio_shared = (double)tier_tokens[2] / (double)doc_tokens;
        s.doc_hit_ratio_pool = s.doc_hit_ratio - s.doc_hit_ratio_host - s.doc_hit_ratio_disk - s.doc_hit_ratio_shared;
        if (s.doc_hit_ratio_pool < 0) s.doc_hit_ratio_pool = 0;
    }
    s.store = tier_tokens[0] + tier_tokens[1] + tier_tokens[2] > 0;
    s.prefix_hit_ratio = prompt_tokens ? (double)prefix_reused / (double)prompt_tokens : 0;
    s.cached_ratio = prompt_tokens ? (double)cached / (double)prompt_tokens : 0;
    s.n_scored = n_em;
    if (n_em) s.exact_match = (double)em / n_em;
    if (s.n_ok) {
        s.mean_prompt_tokens = (double)prompt_tokens / s.n_ok;
        s.mean_doc_tokens = (double)doc_tokens / s.n_ok;
        s.mean_doc_tokens_recomputed = (double)recomputed / s.n_ok;
        s.mean_output_tokens = (double)output / s.n_ok;
    }
    free(ttft), free(tpot), free(e2e), free(sttft), free(itl);
    *out = s;
}

/* ---- table ------------------------------------------------------------------------------ */

typedef struct row {
    const char *group, *name;
    size_t offset;   /* of a double in la_bench_summary */
    const char *fmt; /* printf of the value */
    double scale;
} row;

#define DIST_ROWS(field, title)                                                                \
    {title, "mean", offsetof(la_bench_summary, field.mean), "%.2f", 1},                       \
        {"", "p50", offsetof(la_bench_summary, field.p50), "%.2f", 1},                         \
        {"", "p90", offsetof(la_bench_summary, field.p90), "%.2f", 1},                         \
        {"", "p99", offsetof(la_bench_summary, field.p99), "%.2f", 1}

static const row k_rows[] = {
    DIST_ROWS(ttft_ms, "TTFT ms"),
    DIST_ROWS(tpot_ms, "TPOT ms"),
    DIST_ROWS(itl_ms, "ITL ms"),
    DIST_ROWS(e2e_ms, "E2E ms"),
    {"throughput", "req/s", offsetof(la_bench_summary, requests_per_s), "%.2f", 1},
    {"", "out tok/s", offsetof(la_bench_summary, output_tokens_per_s), "%.1f", 1},
    {"", "prompt tok/s", offsetof(la_bench_summary, prompt_tokens_per_s), "%.0f", 1},
    {"cache", "doc hit %", offsetof(la_bench_summary, doc_hit_ratio), "%.1f", 100},
    {"", "prefix hit %", offsetof(la_bench_summary, prefix_hit_ratio), "%.1f", 100},
    {"", "cached %", offsetof(la_bench_summary, cached_ratio), "%.1f", 100},
    {"tokens", "prompt", offsetof(la_bench_summary, mean_prompt_tokens), "%.0f", 1},
    {"", "documents", offsetof(la_bench_summary, mean_doc_tokens), "%.0f", 1},
    {"", "recomputed", offsetof(la_bench_summary, mean_doc_tokens_recomputed), "%.0f", 1},
    {"", "output", offsetof(la_bench_summary, mean_output_tokens), "%.1f", 1},
    {"answers", "exact match %", offsetof(la_bench_summary, exact_match), "%.1f", 100},
};

/* With a KV store, after "cached %". */
static const row k_tier_rows[] = {
    {"", "pool hit %", offsetof(la_bench_summary, doc_hit_ratio_pool), "%.1f", 100},
    {"", "host hit %", offsetof(la_bench_summary, doc_hit_ratio_host), "%.1f", 100},
    {"", "disk hit %", offsetof(la_bench_summary, doc_hit_ratio_disk), "%.1f", 100},
    {"", "shared hit %", offsetof(la_bench_summary, doc_hit_ratio_shared), "%.1f", 100},
};

static void print_row(FILE *f, const row *w, const la_bench_summary *s, int32_t n) {
    fprintf(f, "%-12s %-14s", w->group, w->name);
    for (int32_t m = 0; m < n; m++) {
        double v = *(const double *)((const char *)&s[m] + w->offset);
        char b[32];
        if (isnan(v)) snprintf(b, sizeof b, "-");
        else snprintf(b, sizeof b, w->fmt, v * w->scale);
        fprintf(f, " %11s", b);
    }
    fputc('\n', f);
}

void la_bench_print_table(FILE *f, const la_bench_summary *s, int32_t n) {
    bool store = false;
    for (int32_t m = 0; m < n; m++) store = store || s[m].store;
    fprintf(f, "%-12s %-14s", "", "");
    for (int32_t m = 0; m < n; m++) fprintf(f, " %11s", s[m].method.name);
    fprintf(f, "\n%-12s %-14s", "requests", "ok/sent");
    for (int32_t m = 0; m < n; m++) {
        char b[32];
        snprintf(b, sizeof b, "%d/%d", s[m].n_ok, s[m].n_requests - s[m].n_not_sent);
        fprintf(f, " %11s", b);
    }
    fputc('\n', f);
    for (size_t r = 0; r < sizeof k_rows / sizeof k_rows[0]; r++) {
        print_row(f, &k_rows[r], s, n);
        if (store && k_rows[r].offset == offsetof(la_bench_summary, cached_ratio))
            for (size_t t = 0; t < sizeof k_tier_rows / sizeof k_tier_rows[0]; t++) print_row(f, &k_tier_rows[t], s, n);
    }
    for (int32_t m = 0; m < n; m++) {
        if (s[m].n_not_sent || s[m].n_cut)
            fprintf(f, "%s: at the duration bound %d of %d requests were not sent and %d still queued or running "
                       "(cut)%s\n",
                    s[m].method.name, s[m].n_not_sent, s[m].n_requests, s[m].n_cut,
                    s[m].saturated ? ": saturated" : "");
        int32_t failed = s[m].n_requests - s[m].n_ok - s[m].n_not_sent - s[m].n_cut;
        if (failed > 0)
            fprintf(f, "%s: %d failed, first: %s\n", s[m].method.name, failed, s[m].first_error);
    }
}

/* ---- JSON ------------------------------------------------------------------------------- */

static void add_num(cJSON *o, const char *key, double v) {
    if (isnan(v) || isinf(v)) cJSON_AddNullToObject(o, key);
    else cJSON_AddNumberToObject(o, key, v);
}

static void add_dist(cJSON *o, const char *key, const la_bench_dist *d) {
    cJSON *x = cJSON_AddObjectToObject(o, key);
    cJSON_AddNumberToObject(x, "n", d->n);
    add_num(x, "mean", d->mean);
    add_num(x, "p50", d->p50);
    add_num(x, "p90", d->p90);
    add_num(x, "p99", d->p99);
}

cJSON *la_bench_summary_json(const la_bench_summary *s, const la_bench_sample *samples, int32_t n) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "method", s->method.name);
    if (s->method.recompute_first > 0 || s->method.recompute_ratio > 0.0f ||
        s->method.doc_context != LA_DOC_CONTEXT_ALONE) { /* recovery, doc context (kv/plan.h) */
        cJSON_AddStringToObject(o, "engine_method", la_method_name(s->method.method));
        cJSON_AddNumberToObject(o, "recompute_first", s->method.recompute_first);
        cJSON_AddNumberToObject(o, "recompute_ratio", la_method_spec_ratio_json(s->method.recompute_ratio));
        cJSON_AddStringToObject(o, "doc_context", la_doc_context_name(s->method.doc_context));
    }
    cJSON_AddNumberToObject(o, "requests", s->n_requests);
    cJSON_AddNumberToObject(o, "requests_ok", s->n_ok);
    if (s->first_error[0]) cJSON_AddStringToObject(o, "first_error", s->first_error);
    cJSON_AddBoolToObject(o, "saturated", s->saturated);
    cJSON_AddNumberToObject(o, "requests_not_sent", s->n_not_sent);
    cJSON_AddNumberToObject(o, "requests_cut", s->n_cut);
    add_dist(o, "ttft_ms", &s->ttft_ms);
    add_dist(o, "tpot_ms", &s->tpot_ms);
    add_dist(o, "itl_ms", &s->itl_ms);
    add_dist(o, "e2e_ms", &s->e2e_ms);
    add_dist(o, "server_ttft_ms", &s->server_ttft_ms);
    add_num(o, "wall_s", s->wall_s);
    add_num(o, "requests_per_s", s->requests_per_s);
    add_num(o, "output_tokens_per_s", s->output_tokens_per_s);
    add_num(o, "prompt_tokens_per_s", s->prompt_tokens_per_s);
    add_num(o, "doc_hit_ratio", s->doc_hit_ratio);
    add_num(o, "prefix_hit_ratio", s->prefix_hit_ratio);
    add_num(o, "cached_ratio", s->cached_ratio);
    if (s->store) {
        cJSON *t = cJSON_AddObjectToObject(o, "doc_hit_ratio_by_tier");
        add_num(t, "pool", s->doc_hit_ratio_pool);
        add_num(t, "host", s->doc_hit_ratio_host);
        add_num(t, "disk", s->doc_hit_ratio_disk);
        add_num(t, "shared", s->doc_hit_ratio_shared);
    }
    add_num(o, "exact_match", s->exact_match);
    cJSON_AddNumberToObject(o, "exact_match_scored", s->n_scored);
    add_num(o, "mean_prompt_tokens", s->mean_prompt_tokens);
    add_num(o, "mean_doc_tokens", s->mean_doc_tokens);
    add_num(o, "mean_doc_tokens_recomputed", s->mean_doc_tokens_recomputed);
    add_num(o, "mean_output_tokens", s->mean_output_tokens);
    if (samples) {
        cJSON *r = cJSON_AddObjectToObject(o, "per_request");
        cJSON *ok = cJSON_AddArrayToObject(r, "ok"), *tt = cJSON_AddArrayToObject(r, "ttft_ms");
        cJSON *e2e = cJSON_AddArrayToObject(r, "e2e_ms"), *pt = cJSON_AddArrayToObject(r, "prompt_tokens");
        cJSON *ot = cJSON_AddArrayToObject(r, "output_tokens"),
              *dr = cJSON_AddArrayToObject(r, "doc_tokens_reused");
        for (int32_t i = 0; i < n; i++) {
            const la_bench_sample *x = &samples[i];
            cJSON_AddItemToArray(ok, cJSON_CreateBool(x->ok));
            cJSON_AddItemToArray(tt, cJSON_CreateNumber(round(x->ttft_ms * 1e3) / 1e3));
            cJSON_AddItemToArray(e2e, cJSON_CreateNumber(round(x->e2e_ms * 1e3) / 1e3));
            cJSON_AddItemToArray(pt, cJSON_CreateNumber(x->n_prompt_tokens));
            cJSON_AddItemToArray(ot, cJSON_CreateNumber(x->n_generated));
            cJSON_AddItemToArray(dr, cJSON_CreateNumber((double)x->doc_tokens_reused));
        }
    }
    return o;
}

cJSON *la_bench_definitions_json(bool http) {
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "ttft_ms", http ? "client: request sent -> first streamed content chunk"
                                               : "request submitted -> first token event");
    cJSON_AddStringToObject(d, "tpot_ms",
                            "(last token - first token) / (output tokens - 1), requests with >= 2 tokens");
    cJSON_AddStringToObject(d, "itl_ms",
                            http ? "gaps between streamed content chunks (a chunk may carry several tokens)"
                                 : "gaps between consecutive token events");
    cJSON_AddStringToObject(d, "e2e_ms", "request submitted -> last event");
    cJSON_AddStringToObject(d, "server_ttft_ms", "the engine's own TTFT (submit -> first token)");
    cJSON_AddStringToObject(d, "percentiles",
                            "nearest rank over successful requests (ITL: over all their gaps)");
    cJSON_AddStringToObject(d, "requests_per_s",
                            "successful requests / wall time from the first submit to the last answer");
    cJSON_AddStringToObject(
        d, "doc_hit_ratio",
        "document tokens (preamble block included) served from the KV cache / all document "
        "tokens; for recompute and prefix, the prefix-cache hits inside the documents "
        "(min(prefix_tokens_reused, doc_tokens))");
    cJSON_AddStringToObject(d, "prefix_hit_ratio", "prefix_tokens_reused / prompt tokens (as /metrics)");
    cJSON_AddStringToObject(d, "cached_ratio", "usage.prompt_tokens_details.cached_tokens / prompt tokens");
    cJSON_AddStringToObject(d, "doc_hit_ratio_by_tier",
                            "(with a KV store) host / disk / shared: document tokens the request's own "
                            "document jobs loaded from that tier / all document tokens; pool: doc_hit_ratio "
                            "minus those");
    cJSON_AddStringToObject(
        d, "engine_steps",
        "(in-process engine only) the measured requests' engine steps (la_engine_stats between two "
        "snapshots): steps computed, decode_steps (every sequence one decode row), async_steps (of "
        "those, queued before the step ahead was read back: async scheduling), rows_dropped (rows "
        "such steps computed for requests that had stopped), rows_per_step; "
        "wall_ms_per_step = the run's wall time / steps (idle time included); ms_per_step = "
        "schedule / forward / after averaged over every step, batch_begin = the backend's host "
        "setup, a part of forward; decode_* = averages over the decode steps (null without any); "
        "doc_token_cache_hits / misses = the engine's document token cache lookups between the two "
        "snapshots (each request's documents as it is submitted) that it served / that went to the "
        "tokenizer");
    cJSON_AddStringToObject(d, "exact_match",
                            "normalised containment of a gold answer (la_rag_answer_matches)");
    return d;
}
