/* Serving benchmark: requests/s and TTFT percentiles of `lazyattn serve` at several client
 * concurrencies, over HTTP on loopback (not a test; never run by ctest).
 *
 *   bench_serve [-m DIR] [--label NAME] [--method lazy] [--concurrency 1,8,32]
 *               [--requests N] [--docs 3] [--corpus 24] [--max-tokens 16] [--threads N]
 *               [--kv-blocks N] [--bin PATH] [--port P] [--out bench/results/serve_cpu.json]
 *
 * Starts `lazyattn serve -m DIR` on a free port (or uses a running server with --port).
 * Workload: streamed chat requests (RAG: --docs documents drawn from a corpus of synthetic
 * documents, seeded per request; every level has requests of its own). Warm-up, the
 * reordered-RAG case of DESIGN.md §1: every measured request is first sent once with its
 * documents in the reverse order (concurrency 8, not measured), so document reuse needs
 * position independence (lazy, block, mepic) while prefix caching shares only the prompt
 * start. Then at each concurrency C, C client threads send the level's N requests. TTFT
 * is measured by the client: request sent -> first SSE event after the role chunk (the
 * first token's text); the server's own TTFT (lazyattn.ttft_ms) is reported beside it.
 * Writes one JSON with the command and the machine.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/http.h"
#include "bench/machine.h"
#include "../tests/server/serve_proc.h"

typedef struct sample {
    double ttft_ms;        /* client: sent -> first token event */
    double e2e_ms;         /* client: sent -> end of stream */
    double server_ttft_ms; /* lazyattn.ttft_ms */
    int completion_tokens;
    int cached_tokens;
    int ok;
} sample;

typedef struct level_run {
    int port;
    int n_requests;
    int id0;      /* request ids id0 .. id0 + n_requests - 1 */
    int reversed; /* documents in reverse order (the warm-up) */
    int n_docs, corpus, max_tokens;
    const char *method;
    atomic_int next;
    sample *samples;
} level_run;

static double now_ms(void) { return la_serve_now_s() * 1e3; }

/* Synthetic corpus: distinct documents of ~60 words. */
static void doc_text(int i, char *out, size_t cap) {
    static const char *const words[] = {"river", "stone", "market", "winter", "harbor", "lamp",
                                        "garden", "copper", "letter", "forest", "bridge", "violin",
                                        "orchard", "signal", "canyon", "thread"};
    size_t n = (size_t)snprintf(out, cap, "Document %d. ", i);
    unsigned x = 2654435761u * (unsigned)(i + 1);
    for (int w = 0; w < 60 && n + 16 < cap; w++) {
        x = x * 1103515245u + 12345u;
        n += (size_t)snprintf(out + n, cap - n, "%s ", words[(x >> 16) % 16]);
    }
}

static char *request_body(const level_run *lr, int r) {
    r += lr->id0;
    cJSON *o = cJSON_CreateObject();
    cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    char q[128];
    snprintf(q, sizeof q, "Question %d: which documents mention a harbor?", r);
    cJSON_AddStringToObject(m, "content", q);
    cJSON_AddItemToArray(msgs, m);
    cJSON_AddNumberToObject(o, "max_tokens", lr->max_tokens);
    cJSON_AddBoolToObject(o, "ignore_eos", 1);
    cJSON_AddBoolToObject(o, "stream", 1);
    cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
    cJSON_AddBoolToObject(so, "include_usage", 1);
    cJSON_AddStringToObject(o, "method", lr->method);
    cJSON *docs = cJSON_AddArrayToObject(o, "documents");
    unsigned x = 0x9e3779b9u * (unsigned)(r + 7);
    int picked[64];
    for (int d = 0; d < lr->n_docs && d < 64; d++) {
        int k;
        for (;;) { /* distinct documents, shuffled order */
            x = x * 1664525u + 1013904223u;
            k = (int)((x >> 8) % (unsigned)lr->corpus);
            int dup = 0;
            for (int e = 0; e < d; e++) dup |= picked[e] == k;
            if (!dup) break;
        }
        picked[d] = k;
    }
    for (int d = 0; d < lr->n_docs && d < 64; d++) {
        char text[1024];
        doc_text(picked[lr->reversed ? lr->n_docs - 1 - d : d], text, sizeof text);
        cJSON_AddItemToArray(docs, cJSON_CreateString(text));
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* The events of one streamed answer as they arrive. */
typedef struct stream {
    sample *s;
    double t0;
    int events;
    char *last[2]; /* the payloads of the last two events: the usage chunk, then [DONE] */
} stream;

static void on_event(void *user, const char *data, size_t len) {
    stream *st = user;
    /* TTFT: the role chunk, then the first token's */
    if (++st->events == 2 && st->s->ttft_ms == 0) st->s->ttft_ms = now_ms() - st->t0;
    free(st->last[0]);
    st->last[0] = st->last[1];
    st->last[1] = strndup(data, len);
}

static void run_request(level_run *lr, int r) {
    sample *s = &lr->samples[r];
    char *body = request_body(lr, r);
    la_bench_url u = {.host = "127.0.0.1"};
    snprintf(u.port, sizeof u.port, "%d", lr->port);
    stream st = {.s = s, .t0 = now_ms()};
    int status = 0;
    la_err err = {0};
    la_status rc = la_bench_http_request(&u, "POST", "/v1/chat/completions", body, 120, on_event, &st, &status,
                                         NULL, &err);
    s->e2e_ms = now_ms() - st.t0;
    free(body);
    if (rc == LA_OK && status == 200 && st.events >= 2 && st.last[1] && !strcmp(st.last[1], "[DONE]")) {
        cJSON *j = cJSON_Parse(st.last[0]);
        const cJSON *usage = cJSON_GetObjectItem(j, "usage");
        const cJSON *ext = cJSON_GetObjectItem(j, "lazyattn");
        if (usage && ext) {
            s->completion_tokens = cJSON_GetObjectItem(usage, "completion_tokens")->valueint;
            s->cached_tokens = cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "prompt_tokens_details"),
                                                   "cached_tokens")->valueint;
            s->server_ttft_ms = cJSON_GetObjectItem(ext, "ttft_ms")->valuedouble;
            s->ok = 1;
        }
        cJSON_Delete(j);
    }
    free(st.last[0]);
    free(st.last[1]);
}

static void *client_main(void *arg) {
    level_run *lr = arg;
    for (int r; (r = atomic_fetch_add(&lr->next, 1)) < lr->n_requests;) run_request(lr, r);
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[n]. */
static double pct(const double *v, int n, double p) {
    if (n == 0) return NAN;
    int k = (int)ceil(p / 100.0 * n) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    return v[k];
}

/* Run every request of lr once from n_threads clients; returns the failures. */
static int run_level(level_run *lr, int n_threads) {
    atomic_init(&lr->next, 0);
    lr->samples = calloc((size_t)lr->n_requests, sizeof(sample));
    pthread_t *th = calloc((size_t)n_threads, sizeof(pthread_t));
    for (int i = 0; i < n_threads; i++) pthread_create(&th[i], NULL, client_main, lr);
    for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
    free(th);
    int failed = 0;
    for (int r = 0; r < lr->n_requests; r++) failed += !lr->samples[r].ok;
    return failed;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"label", required_argument, 0, 1},
        {"method", required_argument, 0, 2},  {"concurrency", required_argument, 0, 3},
        {"requests", required_argument, 0, 4}, {"docs", required_argument, 0, 5},
        {"corpus", required_argument, 0, 6},  {"max-tokens", required_argument, 0, 7},
        {"threads", required_argument, 0, 8}, {"kv-blocks", required_argument, 0, 9},
        {"bin", required_argument, 0, 10},    {"port", required_argument, 0, 11},
        {"out", required_argument, 0, 12},    {0, 0, 0, 0}};
    const char *model = NULL, *label = NULL, *method = "lazy", *conc = "1,8,32", *threads = NULL;
    const char *kv_blocks = NULL, *out = "bench/results/serve_cpu.json";
    char bin[PATH_MAX] = "";
    int n_requests = 64, n_docs = 3, corpus = 24, max_tokens = 16, port = 0, c;
    while ((c = getopt_long(argc, argv, "m:", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 1: label = optarg; break;
        case 2: method = optarg; break;
        case 3: conc = optarg; break;
        case 4: n_requests = atoi(optarg); break;
        case 5: n_docs = atoi(optarg); break;
        case 6: corpus = atoi(optarg); break;
        case 7: max_tokens = atoi(optarg); break;
        case 8: threads = optarg; break;
        case 9: kv_blocks = optarg; break;
        case 10: snprintf(bin, sizeof bin, "%s", optarg); break;
        case 11: port = atoi(optarg); break;
        case 12: out = optarg; break;
        default: fprintf(stderr, "bench_serve: see the header of bench/bench_serve.c\n"); return 2;
        }
    }
    if (n_docs < 1 || n_docs > 64 || corpus < n_docs || n_requests < 1) {
        fprintf(stderr, "bench_serve: need 1 <= --docs <= 64, --corpus >= --docs, --requests >= 1\n");
        return 2;
    }
    if (!model) {
        model = access(LA_SOURCE_DIR "/models/rag-tiny/model.safetensors", R_OK) == 0
                    ? LA_SOURCE_DIR "/models/rag-tiny"
                    : LA_SOURCE_DIR "/tests/fixtures/models/tiny-f32-tied";
    }
    if (!bin[0]) { /* lazyattn beside this executable */
        ssize_t n = readlink("/proc/self/exe", bin, sizeof bin - 16);
        if (n <= 0) return 1;
        bin[n] = '\0';
        char *slash = strrchr(bin, '/');
        strcpy(slash ? slash + 1 : bin, "lazyattn");
    }
    la_serve_proc proc = {0};
    if (!port) {
        const char *args[16];
        int k = 0;
        args[k++] = "-m";
        args[k++] = model;
        args[k++] = "--method";
        args[k++] = method;
        args[k++] = "--max-queue";
        args[k++] = "4096";
        if (threads) {
            args[k++] = "--threads";
            args[k++] = threads;
        }
        if (kv_blocks) {
            args[k++] = "--kv-blocks";
            args[k++] = kv_blocks;
        }
        args[k] = NULL;
        if (la_serve_start_bin(&proc, bin, args) != 0) {
            fprintf(stderr, "bench_serve: %s serve did not start:\n%s", bin, proc.log);
            return 1;
        }
        port = proc.port;
    }
    int n_levels = 1;
    for (const char *p = conc; *p; p++) n_levels += *p == ',';
    { /* warm-up: every measured request once, documents reversed */
        level_run warm = {.port = port, .n_requests = n_levels * n_requests, .id0 = 0, .reversed = 1,
                          .n_docs = n_docs, .corpus = corpus, .max_tokens = max_tokens, .method = method};
        int bad = run_level(&warm, 8);
        free(warm.samples);
        if (bad) {
            fprintf(stderr, "bench_serve: %d warm-up requests failed\n", bad);
            if (proc.pid) la_serve_stop(&proc, SIGTERM, 60);
            return 1;
        }
    }

    cJSON *root = cJSON_CreateObject();
    char *cmd = la_command_line(argc, argv);
    cJSON_AddStringToObject(root, "command", cmd);
    free(cmd);
    cJSON_AddItemToObject(root, "machine", la_machine_json());
    const char *base = strrchr(model, '/');
    cJSON_AddStringToObject(root, "model", label ? label : base ? base + 1 : model);
    cJSON_AddStringToObject(root, "method", method);
    cJSON *wl = cJSON_AddObjectToObject(root, "workload");
    cJSON_AddStringToObject(wl, "endpoint", "POST /v1/chat/completions, stream, include_usage");
    cJSON_AddNumberToObject(wl, "requests_per_level", n_requests);
    cJSON_AddNumberToObject(wl, "documents_per_request", n_docs);
    cJSON_AddNumberToObject(wl, "corpus_documents", corpus);
    cJSON_AddNumberToObject(wl, "max_tokens", max_tokens);
    cJSON_AddStringToObject(wl, "cache", "warm-up: each measured request sent once before with its "
                                         "documents in reverse order (reordered RAG, DESIGN.md 1)");
    cJSON_AddStringToObject(wl, "ttft", "client: request sent -> first token event; server: lazyattn.ttft_ms");
    cJSON *levels = cJSON_AddArrayToObject(root, "levels");
    int failed = 0, level = 0;
    for (const char *p = conc; *p;) {
        int C = atoi(p);
        level_run lr = {.port = port, .n_requests = n_requests, .id0 = level * n_requests,
                        .n_docs = n_docs, .corpus = corpus, .max_tokens = max_tokens, .method = method};
        double t0 = now_ms();
        run_level(&lr, C);
        double wall_s = (now_ms() - t0) / 1e3;
        double *ttft = calloc((size_t)n_requests, sizeof(double));
        double *sttft = calloc((size_t)n_requests, sizeof(double));
        double *e2e = calloc((size_t)n_requests, sizeof(double));
        int n_ok = 0;
        long tokens = 0, cached = 0;
        for (int r = 0; r < n_requests; r++) {
            if (!lr.samples[r].ok) continue;
            ttft[n_ok] = lr.samples[r].ttft_ms;
            sttft[n_ok] = lr.samples[r].server_ttft_ms;
            e2e[n_ok] = lr.samples[r].e2e_ms;
            tokens += lr.samples[r].completion_tokens;
            cached += lr.samples[r].cached_tokens;
            n_ok++;
        }
        failed += n_requests - n_ok;
        qsort(ttft, (size_t)n_ok, sizeof(double), cmp_double);
        qsort(sttft, (size_t)n_ok, sizeof(double), cmp_double);
        qsort(e2e, (size_t)n_ok, sizeof(double), cmp_double);
        cJSON *lv = cJSON_CreateObject();
        cJSON_AddNumberToObject(lv, "concurrency", C);
        cJSON_AddNumberToObject(lv, "requests_ok", n_ok);
        cJSON_AddNumberToObject(lv, "wall_s", wall_s);
        cJSON_AddNumberToObject(lv, "requests_per_s", n_ok / wall_s);
        cJSON_AddNumberToObject(lv, "output_tokens_per_s", (double)tokens / wall_s);
        cJSON_AddNumberToObject(lv, "ttft_ms_p50", pct(ttft, n_ok, 50));
        cJSON_AddNumberToObject(lv, "ttft_ms_p99", pct(ttft, n_ok, 99));
        cJSON_AddNumberToObject(lv, "server_ttft_ms_p50", pct(sttft, n_ok, 50));
        cJSON_AddNumberToObject(lv, "server_ttft_ms_p99", pct(sttft, n_ok, 99));
        cJSON_AddNumberToObject(lv, "e2e_ms_p50", pct(e2e, n_ok, 50));
        cJSON_AddNumberToObject(lv, "mean_cached_tokens", n_ok ? (double)cached / n_ok : 0);
        cJSON_AddItemToArray(levels, lv);
        printf("concurrency %3d: %3d ok, %8.1f req/s, TTFT p50 %8.2f ms p99 %8.2f ms (server p50 %.2f)\n",
               C, n_ok, n_ok / wall_s, pct(ttft, n_ok, 50), pct(ttft, n_ok, 99), pct(sttft, n_ok, 50));
        fflush(stdout);
        free(ttft);
        free(sttft);
        free(e2e);
        free(lr.samples);
        level++;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    if (proc.pid) {
        int rc = la_serve_stop(&proc, SIGTERM, 60);
        if (rc != 0) fprintf(stderr, "bench_serve: server exit status %d\n%s", rc, proc.log);
    }
    int rc = la_json_write_file(out, root);
    cJSON_Delete(root);
    if (rc != 0) {
        fprintf(stderr, "bench_serve: cannot write %s\n", out);
        return 1;
    }
    printf("wrote %s\n", out);
    return failed ? 1 : 0;
}
