/* Benchmark of the document KV store (issue 29; not a test, never run by ctest): the shape of
 * run the issue asks of the H200, on this machine's CPU with the bundled model.
 *
 *   bench_store [-m DIR] [--threads N] [--dir NEWDIR] [--out bench/results/store_cpu.json]
 *               [--plot bench/results/store_cpu.png] [--requests N] [--pool-docs N]
 *               [--docs-per-request N] [--doc-tokens N] [--pool-pct P] [--rounds N]
 *               [--restart-questions N] [--ingest-questions N] [--dd-mib N]
 *   bench_store [--plot FILE.png] --replot FILE.json   (redraw the chart of a run; --plot first)
 *
 * 1. A pool smaller than the working set: `lazyattn bench --dataset synthetic` sessions (zipf
 *    1.0, documents reordered, concurrency 1) at a KV capacity of --pool-pct % of the
 *    document pool's blocks (plus the room the running request needs, as --sweep kv sizes
 *    it), with no store, with a host tier that holds every document, and with a disk tier
 *    behind the pool (no host tier); and at 400 % (all cached). Prefix caching beside lazy
 *    in the no-store runs (first round). The configurations run in --rounds interleaved rounds
 *    (3), so a shared machine's slow minutes spread over all of them; reported: the median
 *    over the rounds of TTFT p50 / p90 and of TPOT p50 (which no tier changes: the machine's
 *    speed), and the document hit ratio by tier.
 * 2. Restart: engine A (--kv-dir D) answers --restart-questions questions of the bundled
 *    eval set in the file's document order, then the same questions reordered (all cached);
 *    it is destroyed (its writes flushed). Engine B on D answers the reordered questions
 *    first thing (documents from disk). A fresh engine without a store answers them too,
 *    under lazy (documents computed) and recompute. TTFT per request, p50 side by side.
 * 3. Ingest: the distinct documents of the first --ingest-questions questions into a fresh
 *    directory (bench/ingest.h): documents/s, tokens/s, GB/s end to end and with a final
 *    syncfs(); next to this disk's sequential write speed measured in the same run by
 *    `dd if=/dev/zero of=D/dd.bin bs=1M count=N conv=fdatasync`.
 * One JSON with the command, commit and machine; a gnuplot bar chart of the TTFTs.
 */
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "base/timer.h"
#include "bench/driver.h"
#include "bench/ingest.h"
#include "bench/machine.h"
#include "bench/plot.h"
#include "bench/report.h"
#include "bench/session.h"
#include "bench/session_report.h"
#include "bench/store_stats.h"
#include "bench/workload.h"

#ifndef LA_SOURCE_DIR
#define LA_SOURCE_DIR "."
#endif

typedef struct opts {
    const char *model, *dir, *out, *plot;
    int32_t threads, requests, pool_docs, docs_per_request, doc_tokens, restart_q, ingest_q, dd_mib, rounds;
    double pool_pct;
} opts;

static void die(const char *what, const la_err *err) {
    fprintf(stderr, "bench_store: %s: %s\n", what, err->msg);
    exit(1);
}

static la_engine_options engine_opts(const opts *o) {
    la_engine_options eo;
    la_engine_options_init(&eo);
    eo.model_dir = o->model;
    eo.n_threads = o->threads;
    return eo;
}

/* ---- 1. a pool smaller than the working set --------------------------------------------------- */

typedef struct config_result {
    const char *name;
    la_method method;
    double pct;
    int64_t kv_blocks;
    la_bench_summary sum;
    int round;
} config_result;

static config_result g_cfg[128];
static int g_n_cfg, g_round;

/* One `bench --sweep kv --points pcts` session over the synthetic workload, store options in
 * eo; every (point, method) lands in g_cfg and the session's JSON in arr. */
static void pool_session(const opts *o, const char *name, la_engine_options eo, const la_method *methods,
                         int32_t n_methods, const double *pcts, int32_t n_pcts, cJSON *arr) {
    la_bench_session_opts so = {0};
    so.eo = eo;
    for (int32_t m = 0; m < n_methods; m++) so.methods[m] = la_method_spec_plain(methods[m]);
    so.n_methods = n_methods;
    la_bench_workload_opts_init(&so.wo);
    so.wo.dataset = "synthetic";
    so.wo.n_requests = o->requests;
    so.wo.pool_docs = o->pool_docs;
    so.wo.docs_per_request = o->docs_per_request;
    so.wo.doc_tokens = o->doc_tokens;
    so.wo.zipf_s = 1.0;
    so.concurrency = 1;
    so.max_tokens = 8;
    so.sweep = LA_BENCH_SWEEP_KV;
    for (int32_t k = 0; k < n_pcts; k++) so.points[k] = pcts[k];
    so.n_points = n_pcts;
    so.timeout_s = 600;
    la_bench_session *b = NULL;
    la_err err = {0};
    if (la_bench_session_create(&so, NULL, NULL, &b, &err) != LA_OK || la_bench_session_prepare(b, &err) != LA_OK)
        die(name, &err);
    for (int32_t k = 0; k < b->n_points; k++)
        for (int32_t m = 0; m < n_methods; m++) {
            double wall = 0;
            fprintf(stderr, "bench_store: %s, %s at %g%% of the documents' blocks...\n", name,
                    la_method_name(methods[m]), b->points[k].x);
            if (la_bench_session_run(b, k, m, &wall, &err) != LA_OK) die(name, &err);
            const la_bench_summary *s = &b->points[k].sum[m];
            g_cfg[g_n_cfg++] = (config_result){name, methods[m], b->points[k].x, b->points[k].kv_blocks, *s, g_round};
            fprintf(stderr, "  TTFT p50 %.1f ms, doc hit %.1f%% (pool %.1f host %.1f disk %.1f)\n", s->ttft_ms.p50,
                    100 * s->doc_hit_ratio, 100 * s->doc_hit_ratio_pool, 100 * s->doc_hit_ratio_host,
                    100 * s->doc_hit_ratio_disk);
        }
    char *argv[] = {"bench_store", NULL};
    cJSON *j = la_bench_session_json(b, 1, argv);
    cJSON_AddStringToObject(j, "config", name);
    cJSON_AddNumberToObject(j, "round", g_round);
    cJSON_DeleteItemFromObject(j, "machine"); /* once, at the top */
    cJSON_AddItemToArray(arr, j);
    la_bench_session_destroy(b);
}

/* ---- 2. restart --------------------------------------------------------------------------------- */

typedef struct restart_run {
    const char *name;
    la_bench_summary sum;
    int64_t doc_tokens_disk, doc_tokens;
} restart_run;

static restart_run run_items(const char *name, la_engine *e, la_method m, const la_bench_workload *w,
                             const la_bench_item *items, int32_t n, const char *salt) {
    la_bench_target t = {.engine = e, .method = m, .cache_salt = salt, .max_tokens = 8};
    la_bench_load one = {.concurrency = 1};
    la_bench_sample *s = calloc((size_t)n, sizeof *s);
    double wall = 0;
    la_err err = {0};
    if (!s || la_bench_run(&t, w, items, n, &one, s, &wall, NULL, NULL, &err) != LA_OK) die(name, &err);
    restart_run r = {.name = name};
    la_bench_summarize(la_method_spec_plain(m), items, s, n, wall, &r.sum);
    for (int32_t i = 0; i < n; i++) r.doc_tokens_disk += s[i].doc_tokens_disk, r.doc_tokens += s[i].n_doc_tokens;
    if (r.sum.n_ok != n) fprintf(stderr, "bench_store: %s: %d of %d requests failed\n", name, n - r.sum.n_ok, n);
    la_bench_samples_free(s, n);
    free(s);
    fprintf(stderr, "bench_store: restart, %s: TTFT p50 %.1f ms, %lld of %lld document tokens from disk\n", name,
            r.sum.ttft_ms.p50, (long long)r.doc_tokens_disk, (long long)r.doc_tokens);
    return r;
}

static cJSON *restart_bench(const opts *o, const char *kv, restart_run *out) {
    la_bench_workload_opts wo;
    la_bench_workload_opts_init(&wo);
    wo.dataset = LA_SOURCE_DIR "/models/rag-tiny/eval/test.jsonl";
    wo.n_requests = o->restart_q;
    la_bench_workload w;
    la_err err = {0};
    if (la_bench_workload_create(&wo, &w, &err) != LA_OK) die("restart workload", &err);
    la_engine_options eo = engine_opts(o);
    eo.kv_dir = kv;
    la_engine *a = NULL, *b = NULL, *c = NULL;
    if (la_engine_create(&eo, &a, &err) != LA_OK) die("engine A", &err);
    run_items("A: file order (computed, written through)", a, LA_METHOD_LAZY, &w, w.warmup, w.n_warmup, "restart");
    out[0] = run_items("A: reordered, all cached (pool)", a, LA_METHOD_LAZY, &w, w.measured, w.n_measured, "restart");
    la_engine_destroy(a); /* flushes */
    if (la_engine_create(&eo, &b, &err) != LA_OK) die("engine B", &err);
    out[1] = run_items("B after the restart: reordered, documents from disk", b, LA_METHOD_LAZY, &w, w.measured,
                       w.n_measured, "restart");
    la_engine_destroy(b);
    la_engine_options plain = engine_opts(o);
    if (la_engine_create(&plain, &c, &err) != LA_OK) die("engine C", &err);
    out[2] = run_items("no store: reordered, lazy computes the documents", c, LA_METHOD_LAZY, &w, w.measured,
                       w.n_measured, "cold-lazy");
    out[3] = run_items("no store: reordered, recompute", c, LA_METHOD_RECOMPUTE, &w, w.measured, w.n_measured,
                       "cold-recompute");
    la_engine_destroy(c);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "dataset", wo.dataset);
    cJSON_AddNumberToObject(j, "questions", w.n_measured);
    cJSON_AddStringToObject(j, "policy",
                            "engine A (--kv-dir) answers the questions in the file's document order, then reordered "
                            "(all cached); A is destroyed; engine B on the same directory answers the reordered "
                            "questions first (documents from disk); a fresh engine without a store answers them "
                            "under lazy (documents computed) and recompute. Concurrency 1, max_tokens 8");
    cJSON *runs = cJSON_AddArrayToObject(j, "runs");
    for (int i = 0; i < 4; i++) {
        cJSON *x = la_bench_summary_json(&out[i].sum, NULL, 0);
        cJSON_AddStringToObject(x, "run", out[i].name);
        cJSON_AddNumberToObject(x, "doc_tokens_disk", (double)out[i].doc_tokens_disk);
        cJSON_AddNumberToObject(x, "doc_tokens", (double)out[i].doc_tokens);
        cJSON_AddItemToArray(runs, x);
    }
    la_bench_workload_free(&w);
    return j;
}

/* ---- 3. ingest and the disk's own speed --------------------------------------------------------- */

static char *write_corpus(const opts *o, int64_t *n) {
    la_rag_dataset ds;
    la_err err = {0};
    if (la_rag_dataset_load(LA_SOURCE_DIR "/models/rag-tiny/eval/test.jsonl", o->ingest_q, 0, &ds, &err) != LA_OK)
        die("corpus", &err);
    char *path = la_path_join(o->dir, "corpus.jsonl");
    FILE *f = fopen(path, "w");
    if (!f) die("corpus", &(la_err){.msg = "cannot write the corpus"});
    *n = 0;
    for (int32_t q = 0; q < ds.n; q++)
        for (int32_t d = 0; d < ds.q[q].n_docs; d++) {
            cJSON *x = cJSON_CreateObject();
            cJSON_AddStringToObject(x, "title", ds.q[q].docs[d].title);
            cJSON_AddStringToObject(x, "text", ds.q[q].docs[d].text);
            char *line = cJSON_PrintUnformatted(x);
            fprintf(f, "%s\n", line);
            free(line);
            cJSON_Delete(x);
            (*n)++;
        }
    fclose(f);
    la_rag_dataset_free(&ds);
    return path;
}

/* dd's sequential write speed into dir, bytes/s (0 when dd failed). */
static double dd_speed(const char *dir, int32_t mib, char *line, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "dd if=/dev/zero of='%s/dd.bin' bs=1M count=%d conv=fdatasync 2>&1; rm -f '%s/dd.bin'",
             dir, mib, dir);
    FILE *p = popen(cmd, "r");
    double bps = 0;
    line[0] = '\0';
    char buf[512];
    while (p && fgets(buf, sizeof buf, p)) {
        long long bytes;
        double secs;
        /* "536870912 bytes (537 MB, 512 MiB) copied, 1.2 s, 447 MB/s" */
        if (sscanf(buf, "%lld bytes", &bytes) == 1 && strstr(buf, "copied, ")) {
            secs = strtod(strstr(buf, "copied, ") + 8, NULL);
            if (secs > 0) bps = (double)bytes / secs;
            snprintf(line, cap, "%.*s", (int)strcspn(buf, "\n"), buf);
        }
    }
    if (p) pclose(p);
    return bps;
}

static cJSON *ingest_bench(const opts *o, la_ingest_summary *sum, double *sync_s, double *dd_bps) {
    int64_t n = 0;
    char *corpus = write_corpus(o, &n);
    char *kv = la_path_join(o->dir, "ingest-kv");
    la_engine_options eo = engine_opts(o);
    eo.kv_dir = kv;
    eo.max_running = 64;
    la_engine *e = NULL;
    la_err err = {0};
    if (la_engine_create(&eo, &e, &err) != LA_OK) die("ingest engine", &err);
    la_ingest_opts io;
    la_ingest_opts_init(&io);
    io.corpus = corpus;
    io.batch = 16;
    fprintf(stderr, "bench_store: ingesting %lld documents...\n", (long long)n);
    if (la_ingest_run(e, &io, NULL, NULL, sum, &err) != LA_OK) die("ingest", &err);
    double t0 = la_now_ms();
    int fd = open(kv, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) syncfs(fd), close(fd);
    *sync_s = (la_now_ms() - t0) / 1e3;
    la_engine_store_stats ss;
    la_engine_stats es;
    la_engine_get_store_stats(e, &ss);
    la_engine_get_stats(e, &es);
    cJSON *store = la_bench_store_stats_json(&ss, &es);
    la_engine_destroy(e);
    char dd_line[256];
    fprintf(stderr, "bench_store: dd %d MiB with conv=fdatasync...\n", o->dd_mib);
    *dd_bps = dd_speed(o->dir, o->dd_mib, dd_line, sizeof dd_line);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "corpus", "the distinct documents of the first questions of models/rag-tiny/eval/test.jsonl");
    cJSON_AddNumberToObject(j, "questions", o->ingest_q);
    cJSON_AddItemToObject(j, "summary", la_ingest_summary_json(sum));
    cJSON_AddNumberToObject(j, "syncfs_s", *sync_s);
    double durable = sum->seconds + *sync_s;
    cJSON_AddNumberToObject(j, "gb_per_s_with_syncfs", durable > 0 ? (double)sum->bytes_written / durable / 1e9 : 0);
    cJSON_AddNumberToObject(j, "mean_record_bytes", sum->writes ? (double)sum->bytes_written / (double)sum->writes : 0);
    cJSON_AddStringToObject(j, "note",
                            "records are written with write() and rename() and not fsynced (page cache): gb_per_s is "
                            "end to end, gb_per_s_with_syncfs adds one syncfs() of the directory at the end");
    cJSON *dd = cJSON_AddObjectToObject(j, "dd");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "dd if=/dev/zero of=DIR/dd.bin bs=1M count=%d conv=fdatasync", o->dd_mib);
    cJSON_AddStringToObject(dd, "command", cmd);
    cJSON_AddStringToObject(dd, "output", dd_line);
    cJSON_AddNumberToObject(dd, "gb_per_s", *dd_bps / 1e9);
    cJSON_AddItemToObject(j, "store", store);
    free(corpus);
    free(kv);
    return j;
}

/* ---- medians over the rounds -------------------------------------------------------------------- */

typedef struct median_result {
    const char *name;
    la_method method;
    double pct;
    int64_t kv_blocks;
    double ttft_p50, ttft_p90, tpot_p50;
    double rounds_p50[16];
    int n_rounds;
    const la_bench_summary *first; /* hit ratios (the same in every round) */
} median_result;

static median_result g_med[32];
static int g_n_med;

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Group g_cfg by (configuration, method) in first-seen order. */
static void medians(void) {
    for (int i = 0; i < g_n_cfg; i++) {
        const config_result *r = &g_cfg[i];
        int k = 0;
        while (k < g_n_med && !(g_med[k].method == r->method && !strcmp(g_med[k].name, r->name))) k++;
        if (k == g_n_med) g_med[g_n_med++] = (median_result){.name = r->name, .method = r->method, .pct = r->pct,
                                                              .kv_blocks = r->kv_blocks, .first = &r->sum};
    }
    for (int k = 0; k < g_n_med; k++) {
        median_result *m = &g_med[k];
        double p50[16], p90[16], tpot[16];
        int n = 0;
        for (int i = 0; i < g_n_cfg && n < 16; i++)
            if (g_cfg[i].method == m->method && !strcmp(g_cfg[i].name, m->name)) {
                p50[n] = m->rounds_p50[n] = g_cfg[i].sum.ttft_ms.p50;
                p90[n] = g_cfg[i].sum.ttft_ms.p90;
                tpot[n] = g_cfg[i].sum.tpot_ms.p50;
                n++;
            }
        m->n_rounds = n;
        m->ttft_p50 = median(p50, n);
        m->ttft_p90 = median(p90, n);
        m->tpot_p50 = median(tpot, n);
    }
}

/* ---- the plot ----------------------------------------------------------------------------------- */

/* The bar chart, from the JSON this program writes (so --replot FILE.json redraws it). */
static void plot(const char *png, const cJSON *root) {
    if (!png || !la_bench_plot_available()) {
        if (png) fprintf(stderr, "bench_store: %s\n", LA_BENCH_PLOT_MISSING);
        return;
    }
    la_make_parent_dirs(png);
    FILE *g = popen("gnuplot", "w");
    if (!g) return;
    fprintf(g, "set terminal pngcairo size 1200,600 font 'DejaVu Sans,10'\nset output '%s'\n", png);
    fprintf(g, "set title \"lazyattn document KV store, rag-tiny on the CPU (2 cores): TTFT p50, ms (log scale)\\n"
               "left: a pool of 25%% of the documents' blocks (medians over the rounds); right: the first "
               "requests after a restart\" noenhanced\n");
    fprintf(g, "set style data histograms\nset style fill solid 0.8\nset boxwidth 0.7\nset logscale y\n"
               "set grid ytics\nset ylabel 'TTFT p50 (ms)'\nset xtics rotate by -30 left noenhanced\n"
               "set key off\nset yrange [1:2000]\nset bmargin 9\nset rmargin 10\n");
    fprintf(g, "$d << EOD\n");
    const cJSON *x;
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(root, "summary")) {
        const char *cfg = cJSON_GetObjectItem(x, "configuration")->valuestring;
        const char *m = cJSON_GetObjectItem(x, "method")->valuestring;
        double pct = cJSON_GetObjectItem(x, "pool_pct")->valuedouble;
        fprintf(g, "\"%s, %s (%g%%)\" %.3f\n", m, cfg, pct, cJSON_GetObjectItem(x, "ttft_p50_ms_median")->valuedouble);
    }
    static const char *const short_names[] = {"restart: pool (before)", "restart: from disk", "restart: lazy, computed",
                                              "restart: recompute"};
    int i = 0;
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(cJSON_GetObjectItem(root, "restart"), "runs")) {
        if (i < 4)
            fprintf(g, "\"%s\" %.3f\n", short_names[i],
                    cJSON_GetObjectItem(cJSON_GetObjectItem(x, "ttft_ms"), "p50")->valuedouble);
        i++;
    }
    fprintf(g, "EOD\nplot $d using 2:xtic(1) lc rgb '#4477aa', '' using 0:2:(sprintf('%%.1f', $2)) with labels "
               "offset 0,0.7\n");
    pclose(g);
    fprintf(stderr, "bench_store: wrote %s\n", png);
}

/* ---- main --------------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    opts o = {.model = LA_SOURCE_DIR "/models/rag-tiny", .threads = 0, .requests = 32, .pool_docs = 128,
              .docs_per_request = 4, .doc_tokens = 128, .pool_pct = 25, .restart_q = 16, .ingest_q = 200,
              .dd_mib = 512, .rounds = 3, .out = "bench/results/store_cpu.json", .plot = "bench/results/store_cpu.png"};
    static const struct option lo[] = {
        {"model", required_argument, 0, 'm'},       {"threads", required_argument, 0, 't'},
        {"dir", required_argument, 0, 'd'},         {"out", required_argument, 0, 'o'},
        {"plot", required_argument, 0, 'p'},        {"requests", required_argument, 0, 'r'},
        {"pool-docs", required_argument, 0, 'P'},   {"docs-per-request", required_argument, 0, 'D'},
        {"doc-tokens", required_argument, 0, 'T'},  {"pool-pct", required_argument, 0, 'c'},
        {"restart-questions", required_argument, 0, 'R'}, {"ingest-questions", required_argument, 0, 'I'},
        {"dd-mib", required_argument, 0, 'M'},      {"rounds", required_argument, 0, 'N'},
        {"replot", required_argument, 0, 'X'},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "m:", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o.model = optarg; break;
        case 't': o.threads = atoi(optarg); break;
        case 'd': o.dir = optarg; break;
        case 'o': o.out = optarg; break;
        case 'p': o.plot = optarg; break;
        case 'r': o.requests = atoi(optarg); break;
        case 'P': o.pool_docs = atoi(optarg); break;
        case 'D': o.docs_per_request = atoi(optarg); break;
        case 'T': o.doc_tokens = atoi(optarg); break;
        case 'c': o.pool_pct = atof(optarg); break;
        case 'R': o.restart_q = atoi(optarg); break;
        case 'I': o.ingest_q = atoi(optarg); break;
        case 'M': o.dd_mib = atoi(optarg); break;
        case 'X': {
            char *text = NULL;
            la_err err = {0};
            if (la_file_read(optarg, &text, NULL, &err) != LA_OK) die("--replot", &err);
            cJSON *j = cJSON_Parse(text);
            free(text);
            if (!j) die("--replot", &(la_err){.msg = "not JSON"});
            plot(o.plot, j);
            cJSON_Delete(j);
            return 0;
        }
        case 'N': o.rounds = atoi(optarg) < 1 ? 1 : atoi(optarg) > 16 ? 16 : atoi(optarg); break;
        default: fprintf(stderr, "bench_store: see the comment at the top of bench/bench_store.c\n"); return 2;
        }
    }
    char tmpl[] = "/tmp/lazyattn-bench-store-XXXXXX";
    bool own_dir = !o.dir;
    if (own_dir && !(o.dir = mkdtemp(tmpl))) {
        perror("bench_store: mkdtemp");
        return 1;
    }
    if (!own_dir && mkdir(o.dir, 0700) != 0) {
        fprintf(stderr, "bench_store: --dir %s: must be a new directory (it is removed at the end)\n", o.dir);
        return 2;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "tool", "bench_store");
    char *cmd = la_command_line(argc, argv);
    cJSON_AddStringToObject(root, "command", cmd);
    free(cmd);
    cJSON_AddItemToObject(root, "machine", la_machine_json());
    char load[64];
    la_machine_loadavg(load, sizeof load);
    cJSON *lavg = cJSON_AddObjectToObject(root, "loadavg_1_5_15min");
    cJSON_AddStringToObject(lavg, "start", load);
    cJSON_AddStringToObject(root, "model", o.model);
    cJSON_AddStringToObject(root, "device", "cpu");
    cJSON_AddStringToObject(root, "note",
                            "the CPU backend's pool is host memory already: a host-tier hit is a memcpy into the "
                            "pool, not a PCIe copy; the disk is this machine's (shared, virtualised)");

    /* 1 */
    char hostbuf[64];
    cJSON *pool = cJSON_AddArrayToObject(root, "pool_smaller_than_working_set");
    const la_method both[] = {LA_METHOD_PREFIX, LA_METHOD_LAZY}, lazy[] = {LA_METHOD_LAZY};
    const double small[] = {o.pool_pct}, all[] = {400};
    la_engine_options eo = engine_opts(&o);
    la_engine_options host = eo;
    host.host_kv_bytes = (int64_t)2 << 30; /* holds every document of the pool */
    snprintf(hostbuf, sizeof hostbuf, "host tier 2 GiB");
    char *disk_dir[16] = {0};
    for (g_round = 0; g_round < o.rounds; g_round++) {
        const la_method *ms = g_round == 0 ? both : lazy; /* prefix once: it never uses the store */
        int32_t nm = g_round == 0 ? 2 : 1;
        pool_session(&o, "no store", eo, ms, nm, small, 1, pool);
        pool_session(&o, hostbuf, host, lazy, 1, small, 1, pool);
        la_engine_options disk = eo;
        char name[32];
        snprintf(name, sizeof name, "pool-kv-%d", g_round); /* a fresh directory per round */
        disk.kv_dir = disk_dir[g_round] = la_path_join(o.dir, name);
        pool_session(&o, "disk tier", disk, lazy, 1, small, 1, pool);
        pool_session(&o, "all cached", eo, ms, nm, all, 1, pool);
    }
    medians();

    /* 2 */
    restart_run rs[4];
    char *rkv = la_path_join(o.dir, "restart-kv");
    cJSON_AddItemToObject(root, "restart", restart_bench(&o, rkv, rs));

    /* 3 */
    la_ingest_summary isum;
    double sync_s = 0, dd_bps = 0;
    cJSON_AddItemToObject(root, "ingest", ingest_bench(&o, &isum, &sync_s, &dd_bps));

    /* the summary table */
    cJSON *tab = cJSON_AddArrayToObject(root, "summary");
    printf("\nmedians over %d rounds:\n%-30s %-7s %9s %9s %9s %9s %7s %7s %7s %7s\n", o.rounds, "configuration",
           "method", "kv blocks", "TTFT p50", "TTFT p90", "TPOT p50", "doc hit", "pool", "host", "disk");
    double cached_ms = NAN;
    for (int i = 0; i < g_n_med; i++) {
        const median_result *r = &g_med[i];
        const la_bench_summary *f = r->first;
        char name[64];
        snprintf(name, sizeof name, "%s, pool %g%%", r->name, r->pct);
        printf("%-30s %-7s %9lld %9.1f %9.1f %9.2f %6.1f%% %6.1f%% %6.1f%% %6.1f%%\n", name, la_method_name(r->method),
               (long long)r->kv_blocks, r->ttft_p50, r->ttft_p90, r->tpot_p50, 100 * f->doc_hit_ratio,
               100 * f->doc_hit_ratio_pool, 100 * f->doc_hit_ratio_host, 100 * f->doc_hit_ratio_disk);
        if (!strcmp(r->name, "all cached") && r->method == LA_METHOD_LAZY) cached_ms = r->ttft_p50;
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "configuration", r->name);
        cJSON_AddStringToObject(x, "method", la_method_name(r->method));
        cJSON_AddNumberToObject(x, "pool_pct", r->pct);
        cJSON_AddNumberToObject(x, "kv_blocks", (double)r->kv_blocks);
        cJSON_AddNumberToObject(x, "rounds", r->n_rounds);
        cJSON_AddNumberToObject(x, "ttft_p50_ms_median", r->ttft_p50);
        cJSON *rp = cJSON_AddArrayToObject(x, "ttft_p50_ms_by_round");
        for (int k = 0; k < r->n_rounds; k++) cJSON_AddItemToArray(rp, cJSON_CreateNumber(r->rounds_p50[k]));
        cJSON_AddNumberToObject(x, "ttft_p90_ms_median", r->ttft_p90);
        cJSON_AddNumberToObject(x, "tpot_p50_ms_median", r->tpot_p50);
        cJSON_AddNumberToObject(x, "doc_hit_ratio", f->doc_hit_ratio);
        cJSON_AddNumberToObject(x, "doc_hit_ratio_pool", f->doc_hit_ratio_pool);
        cJSON_AddNumberToObject(x, "doc_hit_ratio_host", f->doc_hit_ratio_host);
        cJSON_AddNumberToObject(x, "doc_hit_ratio_disk", f->doc_hit_ratio_disk);
        cJSON_AddItemToArray(tab, x);
    }
    for (int i = 0; i < g_n_med; i++)
        if (g_med[i].method == LA_METHOD_LAZY && cached_ms > 0)
            printf("  lazy, %s: TTFT p50 %.2fx the all-cached one\n", g_med[i].name, g_med[i].ttft_p50 / cached_ms);
    printf("\nrestart (%d questions, reordered):\n", o.restart_q);
    for (int i = 0; i < 4; i++)
        printf("  %-52s TTFT p50 %8.1f ms  p90 %8.1f ms\n", rs[i].name, rs[i].sum.ttft_ms.p50, rs[i].sum.ttft_ms.p90);
    printf("\ningest: %lld documents computed (%lld tokens) in %.2f s: %.1f documents/s, %.0f tokens/s;\n"
           "  %.4f GB in %lld records, %.3f GB/s end to end, %.3f GB/s with a final syncfs (%.2f s)\n"
           "  this disk: dd conv=fdatasync %.3f GB/s\n",
           (long long)isum.n.computed, (long long)isum.n.tokens, isum.seconds, isum.documents_per_s,
           isum.tokens_per_s, (double)isum.bytes_written / 1e9, (long long)isum.writes, isum.gb_per_s,
           (double)isum.bytes_written / (isum.seconds + sync_s) / 1e9, sync_s, dd_bps / 1e9);
    la_machine_loadavg(load, sizeof load);
    cJSON_AddStringToObject(lavg, "end", load);
    if (la_json_write_file(o.out, root) != 0) fprintf(stderr, "bench_store: cannot write %s\n", o.out);
    else fprintf(stderr, "bench_store: wrote %s\n", o.out);
    plot(o.plot, root);
    cJSON_Delete(root);
    for (int k = 0; k < 16; k++) free(disk_dir[k]);
    free(rkv);
    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf '%s'", o.dir);
    if (system(rm) != 0) fprintf(stderr, "bench_store: could not remove %s\n", o.dir);
    return 0;
}
