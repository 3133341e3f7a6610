/* What a `lazyattn bench` session reports (session_report.h). */
#include "bench/session_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "bench/machine.h"
#include "bench/plot.h"

static const char *load_text(const la_bench_load *l, char *buf, size_t cap) {
    if (l->rate_per_s > 0) snprintf(buf, cap, "open loop, Poisson %.3g req/s", l->rate_per_s);
    else snprintf(buf, cap, "closed loop, concurrency %d", l->concurrency);
    return buf;
}

static const char *sweep_x_label(const la_bench_session *b) {
    switch (b->o.sweep) {
    case LA_BENCH_SWEEP_KV: return "KV capacity (% of the document pool's blocks)";
    case LA_BENCH_SWEEP_RATE: return "request rate (req/s, Poisson arrivals)";
    case LA_BENCH_SWEEP_CONCURRENCY: return "concurrency (requests in flight)";
    case LA_BENCH_SWEEP_CONTEXT: return "prompt tokens (mean per request)";
    case LA_BENCH_SWEEP_HOST_KV: return "host KV tier (GiB)";
    default: return "";
    }
}

/* The main number of a sweep point for method m, and its plot label. */
static double sweep_y(const la_bench_session *b, const la_bench_point *p, int32_t m) {
    const la_bench_summary *s = &p->sum[m];
    switch (b->o.sweep) {
    case LA_BENCH_SWEEP_KV: return 100 * s->doc_hit_ratio;
    case LA_BENCH_SWEEP_RATE: return s->ttft_ms.p50;
    case LA_BENCH_SWEEP_CONCURRENCY: return s->tpot_ms.p50;
    case LA_BENCH_SWEEP_CONTEXT: return s->ttft_ms.p50;
    case LA_BENCH_SWEEP_HOST_KV: return s->ttft_ms.p50;
    default: return NAN;
    }
}

static const char *sweep_y_label(const la_bench_session *b) {
    switch (b->o.sweep) {
    case LA_BENCH_SWEEP_KV: return "document hit ratio (%)";
    case LA_BENCH_SWEEP_RATE: return "TTFT p50 (ms)";
    case LA_BENCH_SWEEP_CONCURRENCY: return "TPOT p50 (ms per output token)";
    case LA_BENCH_SWEEP_CONTEXT: return "TTFT p50 (ms)";
    case LA_BENCH_SWEEP_HOST_KV: return "TTFT p50 (ms)";
    default: return "";
    }
}

static double sweep_x(const la_bench_session *b, const la_bench_point *p, int32_t m) {
    return b->o.sweep == LA_BENCH_SWEEP_CONTEXT ? p->sum[m].mean_prompt_tokens : p->x;
}

void la_bench_session_print_header(const la_bench_session *b, FILE *f) {
    const la_bench_session_opts *o = &b->o;
    char lt[96];
    fprintf(f, "lazyattn bench: %s on %s (%s)%s\n", b->model, b->device, o->url ? o->url : "in process",
            o->eo.random_weights ? " [random weights: timing only, answers meaningless]" : "");
    fprintf(f, "dataset %s (%s); %d measured requests per method%s; max_tokens %d%s; %s\n", o->wo.dataset,
            b->shared.format ? b->shared.format : b->points[0].w->format, b->points[0].w->n_measured,
            o->sweep ? " and point" : "", o->max_tokens, o->ignore_eos ? " (ignore eos)" : "",
            o->sweep == LA_BENCH_SWEEP_NONE   ? load_text(&b->points[0].load, lt, sizeof lt)
            : o->sweep == LA_BENCH_SWEEP_RATE ? "open loop per point"
                                     : load_text(&b->points[0].load, lt, sizeof lt));
    if (!o->url)
        fprintf(f, "engine: %d tokens a step (%s); document token cache %s\n", b->max_batch_tokens,
                o->eo.prefill_first ? "prefill first: no decode rows while prefill is ready"
                                    : "decode rows and prefill chunks",
                o->eo.doc_token_cache_bytes > 0 ? "on" : "off");
    fprintf(f, "warm-up: %s\n", b->points[0].w->warmup_policy);
}

static double step_num(const cJSON *j, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* One line per method of the engine's steps (the JSON's engine_steps; in-process only). */
static void print_steps(const la_bench_session *b, const la_bench_point *p, FILE *f) {
    for (int32_t m = 0; m < b->o.n_methods; m++) {
        const cJSON *j = p->step_stats[m];
        if (!j) continue;
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(j, "ms_per_step");
        fprintf(f, "  steps %s: %.0f computed, %.1f rows a step, %.2f ms of wall time a step (forward %.2f, of it batch_begin "
                   "%.2f); %.0f decode-only",
                b->o.methods[m].name, step_num(j, "steps"), step_num(j, "rows_per_step"),
                step_num(j, "wall_ms_per_step"), step_num(ms, "forward"), step_num(ms, "batch_begin"),
                step_num(j, "decode_steps"));
        if (step_num(j, "decode_steps") > 0)
            fprintf(f, " at %.2f ms, %.0f of them queued ahead (async scheduling), %.0f rows dropped",
                    step_num(j, "decode_step_ms"), step_num(j, "async_steps"), step_num(j, "rows_dropped"));
        fputc('\n', f);
    }
}

void la_bench_session_print_point(const la_bench_session *b, int32_t k, FILE *f) {
    const la_bench_session_opts *o = &b->o;
    const la_bench_point *p = &b->points[k];
    if (o->sweep == LA_BENCH_SWEEP_NONE) {
        fputc('\n', f);
        la_bench_print_table(f, p->sum, o->n_methods);
        print_steps(b, p, f);
        return;
    }
    bool synthetic = !strcmp(o->wo.dataset, "synthetic");
    char lt[96];
    fprintf(f, "\n%s %g%s%s (%s):\n", la_bench_sweep_name(o->sweep), p->x,
            o->sweep == LA_BENCH_SWEEP_KV ? "% of the pool" : o->sweep == LA_BENCH_SWEEP_HOST_KV ? " GiB" : "",
            o->sweep == LA_BENCH_SWEEP_CONTEXT ? (synthetic ? " doc tokens" : " docs") : "",
            load_text(&p->load, lt, sizeof lt));
    fprintf(f, "  %-10s %9s %9s %9s %9s %8s %8s %8s %6s", "method", "TTFT p50", "TTFT p99", "TPOT p50",
            "E2E p50", "req/s", "doc hit%", "prompt", "EM%");
    if (b->store) fprintf(f, " %7s %7s %7s %7s", "pool%", "host%", "disk%", "shared%");
    fputc('\n', f);
    for (int32_t m = 0; m < o->n_methods; m++) {
        const la_bench_summary *su = &p->sum[m];
        char em[16] = "-";
        if (!isnan(su->exact_match)) snprintf(em, sizeof em, "%.1f", 100 * su->exact_match);
        fprintf(f, "  %-10s %9.2f %9.2f %9.2f %9.2f %8.2f %8.1f %8.0f %6s", su->method.name,
                su->ttft_ms.p50, su->ttft_ms.p99, su->tpot_ms.p50, su->e2e_ms.p50, su->requests_per_s,
                100 * su->doc_hit_ratio, su->mean_prompt_tokens, em);
        if (b->store)
            fprintf(f, " %7.1f %7.1f %7.1f %7.1f", 100 * su->doc_hit_ratio_pool, 100 * su->doc_hit_ratio_host,
                    100 * su->doc_hit_ratio_disk, 100 * su->doc_hit_ratio_shared);
        fputc('\n', f);
    }
    print_steps(b, p, f);
}

void la_bench_session_print_sweep(const la_bench_session *b, FILE *f) {
    const la_bench_session_opts *o = &b->o;
    fprintf(f, "\nsweep %s: %s by method\n", la_bench_sweep_name(o->sweep), sweep_y_label(b));
    fprintf(f, "%-12s", o->sweep == LA_BENCH_SWEEP_KV ? "kv %pool" : o->sweep == LA_BENCH_SWEEP_RATE ? "req/s"
                        : o->sweep == LA_BENCH_SWEEP_CONCURRENCY ? "concurrency"
                        : o->sweep == LA_BENCH_SWEEP_HOST_KV ? "host GiB" : "point");
    if (o->sweep == LA_BENCH_SWEEP_KV) fprintf(f, " %10s", "kv blocks");
    if (o->sweep == LA_BENCH_SWEEP_CONTEXT) fprintf(f, " %10s", "prompt tok");
    for (int32_t m = 0; m < o->n_methods; m++) fprintf(f, " %11s", o->methods[m].name);
    fputc('\n', f);
    for (int32_t k = 0; k < b->n_points; k++) {
        const la_bench_point *p = &b->points[k];
        fprintf(f, "%-12g", p->x);
        if (o->sweep == LA_BENCH_SWEEP_KV) fprintf(f, " %10lld", (long long)p->kv_blocks);
        if (o->sweep == LA_BENCH_SWEEP_CONTEXT) fprintf(f, " %10.0f", p->sum[0].mean_prompt_tokens);
        for (int32_t m = 0; m < o->n_methods; m++) {
            double y = sweep_y(b, p, m);
            if (isnan(y)) fprintf(f, " %11s", "-");
            else fprintf(f, " %11.2f", y);
        }
        fputc('\n', f);
    }
}

cJSON *la_bench_session_json(const la_bench_session *b, int argc, char **argv) {
    const la_bench_session_opts *o = &b->o;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "tool", "lazyattn bench");
    char *cmd = la_command_line(argc, argv);
    cJSON_AddStringToObject(root, "command", cmd ? cmd : "");
    free(cmd);
    cJSON_AddItemToObject(root, "machine", la_machine_json());
    char load_end[64];
    la_machine_loadavg(load_end, sizeof load_end);
    cJSON *la = cJSON_AddObjectToObject(root, "loadavg_1_5_15min");
    cJSON_AddStringToObject(la, "start", b->loadavg_start);
    cJSON_AddStringToObject(la, "end", load_end);
    cJSON_AddStringToObject(root, "model", b->model);
    cJSON_AddStringToObject(root, "device", b->device);
    if (o->eo.random_weights) {
        cJSON_AddStringToObject(root, "random_weights", o->eo.random_weights);
        cJSON_AddStringToObject(root, "note",
                                "random weights of the exact shape: timing is real, answers are meaningless");
    }
    cJSON_AddStringToObject(root, "mode", o->url ? "http" : "in-process");
    if (o->url) cJSON_AddStringToObject(root, "url", o->url);
    cJSON_AddStringToObject(root, "dataset", o->wo.dataset);
    cJSON_AddStringToObject(root, "format", b->points[0].w->format);
    cJSON *wl = cJSON_AddObjectToObject(root, "workload");
    cJSON_AddNumberToObject(wl, "requests_per_method", b->points[0].w->n_measured);
    cJSON_AddNumberToObject(wl, "warmup_requests_per_method", b->points[0].w->n_warmup);
    cJSON_AddStringToObject(wl, "reorder", la_bench_reorder_name(o->wo.reorder));
    cJSON_AddNumberToObject(wl, "max_tokens", o->max_tokens);
    cJSON_AddStringToObject(wl, "prompt", o->raw ? "raw" : "chat template");
    cJSON_AddBoolToObject(wl, "ignore_eos", o->ignore_eos);
    cJSON_AddStringToObject(wl, "sampling", "greedy");
    cJSON_AddNumberToObject(wl, "seed", (double)o->wo.seed);
    if (strcmp(o->wo.dataset, "synthetic")) {
        cJSON_AddNumberToObject(wl, "max_docs", o->wo.max_docs);
    } else {
        cJSON *sy = cJSON_AddObjectToObject(wl, "synthetic");
        cJSON_AddNumberToObject(sy, "docs_per_request", o->wo.docs_per_request);
        cJSON_AddNumberToObject(sy, "doc_tokens", o->wo.doc_tokens);
        cJSON_AddNumberToObject(sy, "pool_docs", o->wo.pool_docs);
        cJSON_AddNumberToObject(sy, "zipf_s", o->wo.zipf_s);
        cJSON_AddNumberToObject(sy, "tokens_per_word", b->tokens_per_word);
    }
    cJSON_AddStringToObject(wl, "prompt",
                            "one user chat message (the question) with titled documents: the Block-FT "
                            "RAG template; each method's requests carry a cache salt of their own");
    cJSON_AddStringToObject(root, "warmup_policy", b->points[0].w->warmup_policy);
    cJSON *ld = cJSON_AddObjectToObject(root, "load");
    if (o->sweep == LA_BENCH_SWEEP_RATE || (o->sweep != LA_BENCH_SWEEP_CONCURRENCY && o->rate_per_s > 0)) {
        cJSON_AddStringToObject(ld, "mode", "open loop (Poisson arrivals)");
        if (o->sweep != LA_BENCH_SWEEP_RATE) cJSON_AddNumberToObject(ld, "rate_per_s", o->rate_per_s);
    } else {
        cJSON_AddStringToObject(ld, "mode", "closed loop");
        if (o->sweep != LA_BENCH_SWEEP_CONCURRENCY) cJSON_AddNumberToObject(ld, "concurrency", o->concurrency);
    }
    if (!o->url) { /* the in-process engine's token budget per step (la_engine_stats.max_batch_tokens) */
        cJSON_AddNumberToObject(ld, "max_batch_tokens", b->max_batch_tokens);
        cJSON_AddBoolToObject(ld, "prefill_first", o->eo.prefill_first);
        cJSON_AddNumberToObject(ld, "doc_token_cache_bytes", (double)o->eo.doc_token_cache_bytes);
    }
    cJSON_AddItemToObject(root, "definitions", la_bench_definitions_json(o->url != NULL));
    if (!o->url && (b->store || o->eo.kv_secret_file)) { /* the store's configuration */
        cJSON *st = cJSON_AddObjectToObject(root, "store");
        cJSON_AddNumberToObject(st, "host_kv_bytes", (double)o->eo.host_kv_bytes);
        if (o->eo.kv_dir) cJSON_AddStringToObject(st, "kv_dir", o->eo.kv_dir);
        cJSON_AddNumberToObject(st, "kv_dir_bytes", (double)o->eo.kv_dir_bytes);
        cJSON_AddStringToObject(st, "kv_write", o->eo.kv_write_through ? "through" : "evict");
        cJSON_AddStringToObject(st, "kv_read", o->eo.kv_read == LA_KV_READ_ALWAYS ? "always" : "auto");
        cJSON_AddBoolToObject(st, "kv_store", o->eo.kv_store_url != NULL); /* the URL may hold a password */
        cJSON_AddNumberToObject(st, "kv_blocks", (double)o->eo.kv_blocks);
    }
    if (o->sweep == LA_BENCH_SWEEP_NONE) {
        const la_bench_point *p = &b->points[0];
        cJSON *ms = cJSON_AddArrayToObject(root, "methods");
        for (int32_t m = 0; m < o->n_methods; m++) {
            cJSON *j = la_bench_summary_json(&p->sum[m], p->samples[m], p->n_samples);
            if (p->store_stats[m]) cJSON_AddItemToObject(j, "store", cJSON_Duplicate(p->store_stats[m], true));
            if (p->step_stats[m]) cJSON_AddItemToObject(j, "engine_steps", cJSON_Duplicate(p->step_stats[m], true));
            cJSON_AddItemToArray(ms, j);
        }
        return root;
    }
    cJSON *sw = cJSON_AddObjectToObject(root, "sweep");
    cJSON_AddStringToObject(sw, "kind", la_bench_sweep_name(o->sweep));
    cJSON_AddStringToObject(sw, "x", sweep_x_label(b));
    cJSON_AddStringToObject(sw, "y", sweep_y_label(b));
    if (o->sweep == LA_BENCH_SWEEP_KV) {
        cJSON_AddNumberToObject(sw, "block_size", b->block_size);
        cJSON_AddNumberToObject(sw, "pool_doc_blocks", (double)b->pool_doc_blocks);
        cJSON_AddNumberToObject(sw, "request_doc_blocks", (double)b->kv_request_doc_blocks);
        cJSON_AddNumberToObject(sw, "request_tail_blocks", (double)b->kv_request_tail_blocks);
        cJSON_AddNumberToObject(sw, "floor_blocks", (double)b->kv_floor_blocks);
        cJSON_AddStringToObject(sw, "kv_blocks",
                                "x% of pool_doc_blocks, at least floor_blocks (one request alone under each "
                                "method): the whole KV pool of every method's engine, cached documents and "
                                "running requests together");
    }
    if (o->sweep == LA_BENCH_SWEEP_RATE && b->calib_base_rate > 0) {
        cJSON_AddNumberToObject(sw, "single_stream_rate_per_s", b->calib_base_rate);
        cJSON_AddStringToObject(
            sw, "points_from",
            "0.5, 1, 2, 4, 8 x 1000 / mean E2E of the first method's cold requests at concurrency 1");
    }
    cJSON *pts = cJSON_AddArrayToObject(sw, "points");
    for (int32_t k = 0; k < b->n_points; k++) {
        const la_bench_point *p = &b->points[k];
        cJSON *jp = cJSON_CreateObject();
        cJSON_AddNumberToObject(jp, "x", p->x);
        if (o->sweep == LA_BENCH_SWEEP_KV) cJSON_AddNumberToObject(jp, "kv_blocks", (double)p->kv_blocks);
        if (o->sweep == LA_BENCH_SWEEP_RATE) cJSON_AddNumberToObject(jp, "rate_per_s", p->load.rate_per_s);
        if (o->sweep == LA_BENCH_SWEEP_CONCURRENCY) cJSON_AddNumberToObject(jp, "concurrency", p->load.concurrency);
        if (o->sweep == LA_BENCH_SWEEP_HOST_KV) {
            cJSON_AddNumberToObject(jp, "host_kv_gib", p->x);
            cJSON_AddNumberToObject(jp, "host_kv_bytes", (double)p->host_kv_bytes);
        }
        if (o->sweep == LA_BENCH_SWEEP_CONTEXT)
            cJSON_AddNumberToObject(jp, strcmp(o->wo.dataset, "synthetic") ? "max_docs" : "doc_tokens", p->x);
        cJSON *ms = cJSON_AddArrayToObject(jp, "methods");
        for (int32_t m = 0; m < o->n_methods; m++) {
            cJSON *j = la_bench_summary_json(&p->sum[m], NULL, 0);
            if (p->store_stats[m]) cJSON_AddItemToObject(j, "store", cJSON_Duplicate(p->store_stats[m], true));
            if (p->step_stats[m]) cJSON_AddItemToObject(j, "engine_steps", cJSON_Duplicate(p->step_stats[m], true));
            cJSON_AddItemToArray(ms, j);
        }
        cJSON_AddItemToArray(pts, jp);
    }
    return root;
}

la_status la_bench_session_plot(const la_bench_session *b, const char *png, la_err *err) {
    const la_bench_session_opts *o = &b->o;
    la_make_parent_dirs(png);
    char title[1024];
    if (o->sweep == LA_BENCH_SWEEP_NONE) {
        const la_bench_point *p = &b->points[0];
        char lt[96];
        snprintf(title, sizeof title,
                 "lazyattn bench: %s, %s (%s), %d requests per method, docs reordered: %s, %s", b->model,
                 b->device, p->w->format, p->w->n_measured, la_bench_reorder_name(o->wo.reorder),
                 load_text(&p->load, lt, sizeof lt));
        const la_bench_sample *samples[LA_BENCH_MAX_METHODS];
        int32_t n[LA_BENCH_MAX_METHODS];
        for (int32_t m = 0; m < o->n_methods; m++) samples[m] = p->samples[m], n[m] = p->n_samples;
        return la_bench_plot_requests(png, title, o->methods, samples, n, o->n_methods, err);
    }
    double *x = calloc((size_t)(b->n_points * o->n_methods), sizeof(double));
    double *y = calloc((size_t)(b->n_points * o->n_methods), sizeof(double));
    if (!x || !y) {
        free(x), free(y);
        return la_err_set(err, LA_ERR_NO_MEMORY, "bench: out of memory");
    }
    double lo = INFINITY, hi = 0;
    for (int32_t k = 0; k < b->n_points; k++)
        for (int32_t m = 0; m < o->n_methods; m++) {
            x[k * o->n_methods + m] = sweep_x(b, &b->points[k], m);
            double v = y[k * o->n_methods + m] = sweep_y(b, &b->points[k], m);
            if (v > 0 && v < lo) lo = v;
            if (v > hi) hi = v;
        }
    const char *what = o->sweep == LA_BENCH_SWEEP_KV ? "document hit ratio against KV capacity"
                       : o->sweep == LA_BENCH_SWEEP_RATE ? "TTFT against request rate"
                       : o->sweep == LA_BENCH_SWEEP_CONCURRENCY ? "TPOT against concurrency"
                       : o->sweep == LA_BENCH_SWEEP_HOST_KV ? "TTFT against the host KV tier's size"
                                                       : "TTFT against context length";
    char detail[200];
    const la_bench_workload_opts *wo = &o->wo;
    if (strcmp(wo->dataset, "synthetic"))
        snprintf(detail, sizeof detail, "%s (%s), documents reordered: %s", wo->dataset,
                 b->points[0].w->format, la_bench_reorder_name(wo->reorder));
    else if (o->sweep == LA_BENCH_SWEEP_CONTEXT)
        snprintf(detail, sizeof detail,
                 "synthetic: %d documents per request from a pool of %d, reordered: %s", wo->docs_per_request,
                 wo->pool_docs, la_bench_reorder_name(wo->reorder));
    else if (wo->pool_docs == 1)
        snprintf(detail, sizeof detail, "synthetic: every request shares one ~%d-token document",
                 wo->doc_tokens);
    else
        snprintf(detail, sizeof detail,
                 "synthetic: %d documents per request of ~%d tokens from a pool of %d, zipf %.2g",
                 wo->docs_per_request, wo->doc_tokens, wo->pool_docs, wo->zipf_s);
    snprintf(title, sizeof title, "lazyattn bench: %s\n%s, %s; %s", what, b->model, b->device, detail);
    la_bench_sweep_plot sp = {.png = png,
                              .title = title,
                              .xlabel = sweep_x_label(b),
                              .ylabel = sweep_y_label(b),
                              /* the default points grow geometrically; host-kv's start at 0 */
                              .log_x = o->sweep != LA_BENCH_SWEEP_HOST_KV,
                              .log_y = o->sweep != LA_BENCH_SWEEP_KV && hi > 0 && lo < INFINITY && hi / lo > 20,
                              .y_max = o->sweep == LA_BENCH_SWEEP_KV ? 102 : 0,
                              .ticks_at_points = true,
                              .methods = o->methods,
                              .n_methods = o->n_methods,
                              .n_points = b->n_points,
                              .x = x,
                              .y = y};
    la_status s = la_bench_plot_sweep(&sp, err);
    free(x), free(y);
    return s;
}
