/* Tokenizer throughput: encode the HotpotQA passages (the RAG documents this engine
 * caches) with the Llama-3 tokenizer, on the CPU.
 *
 *   bench_tokenizer [--tokenizer DIR] [--data FILE.jsonl] [--out FILE.json] [--repeat N]
 *                   [--threads N]
 *
 * Defaults (run from the repository root): DIR = $LA_SHARED_DIR or ../shared, then
 * data/tokenizers/llama3; FILE = data/hotpotqa/hotpotqa_dev_distractor_ircot_500.jsonl
 * there; OUT = bench/results/tokenizer_cpu.json; N = 5; threads = online CPUs.
 *
 * Measures, over every paragraph_text of the file (input bytes, UTF-8):
 *   encode_cold   one pass with a fresh tokenizer (empty word cache), MB/s
 *   encode_warm   best of N passes after it (cache filled), MB/s
 *   encode_threads  best of N passes, the passages split over `threads` threads, MB/s
 *   decode        la_tokenizer_decode of every passage's ids, MB/s of text produced
 *   detok         la_detok_push one id at a time, tokens/s
 * MB = 10^6 bytes. Writes one JSON object with the command and the machine (uname, CPU
 * model from /proc/cpuinfo, load average at start) and prints a summary.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "base/json.h"
#include "base/threadpool.h"
#include "base/timer.h"
#include "tokenizer/tokenizer.h"

typedef struct corpus {
    char **texts;
    size_t *lens;
    int n;
    size_t bytes;
} corpus;

static int die(const char *msg, const char *detail) {
    fprintf(stderr, "bench_tokenizer: %s%s\n", msg, detail ? detail : "");
    return 1;
}

static int load_corpus(const char *path, corpus *c) {
    FILE *f = fopen(path, "r");
    if (!f) return die("cannot open ", path);
    char *line = NULL;
    size_t cap = 0;
    int cap_texts = 0;
    while (getline(&line, &cap, f) > 0) {
        cJSON *q = cJSON_Parse(line);
        const cJSON *ctx;
        cJSON_ArrayForEach(ctx, cJSON_GetObjectItem(q, "contexts")) {
            const cJSON *p = cJSON_GetObjectItem(ctx, "paragraph_text");
            if (!cJSON_IsString(p)) continue;
            if (c->n == cap_texts) {
                cap_texts = cap_texts ? 2 * cap_texts : 1024;
                c->texts = realloc(c->texts, (size_t)cap_texts * sizeof *c->texts);
                c->lens = realloc(c->lens, (size_t)cap_texts * sizeof *c->lens);
                if (!c->texts || !c->lens) return die("out of memory", NULL);
            }
            c->texts[c->n] = strdup(p->valuestring);
            c->lens[c->n] = strlen(p->valuestring);
            c->bytes += c->lens[c->n];
            c->n++;
        }
        cJSON_Delete(q);
    }
    free(line);
    fclose(f);
    return c->n > 0 ? 0 : die("no paragraph_text in ", path);
}

typedef struct pass_ctx {
    const la_tokenizer *tok;
    const corpus *c;
    int32_t **ids; /* [n] kept from the last pass, or NULL */
    int32_t *n_ids;
    int failed;
} pass_ctx;

static void encode_range(void *arg, int64_t begin, int64_t end, int worker_id) {
    (void)worker_id;
    pass_ctx *p = arg;
    for (int64_t i = begin; i < end; i++) {
        int32_t *ids = NULL, n = 0;
        la_err err = {0};
        if (la_tokenizer_encode(p->tok, p->c->texts[i], p->c->lens[i], false, &ids, &n, &err) != LA_OK) {
            p->failed = 1;
            continue;
        }
        if (p->ids) {
            free(p->ids[i]);
            p->ids[i] = ids;
            p->n_ids[i] = n;
        } else {
            free(ids);
        }
    }
}

/* One pass over the corpus on tp (NULL: this thread); returns milliseconds. */
static double timed_pass(la_threadpool *tp, pass_ctx *p) {
    double t0 = la_now_ms();
    la_parallel_for(tp, p->c->n, encode_range, p);
    return la_now_ms() - t0;
}

/* 1-minute load average (/proc/loadavg), -1 if unknown: a busy machine lowers the
 * numbers, so the result says how busy it was. */
static double load_average(void) {
    double v = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *v = strchr(line, ':');
            if (v) {
                v++;
                while (*v == ' ') v++;
                snprintf(out, n, "%s", v);
                out[strcspn(out, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

int main(int argc, char **argv) {
    const char *shared = getenv("LA_SHARED_DIR");
    if (!shared || !*shared) shared = "../shared";
    char tok_dir[1024], data[1024];
    snprintf(tok_dir, sizeof tok_dir, "%s/data/tokenizers/llama3", shared);
    snprintf(data, sizeof data, "%s/data/hotpotqa/hotpotqa_dev_distractor_ircot_500.jsonl", shared);
    const char *out_path = "bench/results/tokenizer_cpu.json";
    int repeat = 5, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) return die("missing value for ", a);
        if (!strcmp(a, "--tokenizer")) snprintf(tok_dir, sizeof tok_dir, "%s", argv[++i]);
        else if (!strcmp(a, "--data")) snprintf(data, sizeof data, "%s", argv[++i]);
        else if (!strcmp(a, "--out")) out_path = argv[++i];
        else if (!strcmp(a, "--repeat")) repeat = atoi(argv[++i]);
        else if (!strcmp(a, "--threads")) threads = atoi(argv[++i]);
        else return die("unknown option ", a);
    }
    if (repeat < 1 || threads < 1) return die("--repeat and --threads must be >= 1", NULL);

    double loadavg = load_average();
    corpus c = {0};
    if (load_corpus(data, &c)) return 1;

    la_tokenizer *tok = NULL;
    la_err err = {0};
    double t0 = la_now_ms();
    if (la_tokenizer_load(tok_dir, &tok, &err) != LA_OK) return die(err.msg, NULL);
    double load_ms = la_now_ms() - t0;

    int32_t **ids = calloc((size_t)c.n, sizeof *ids);
    int32_t *n_ids = calloc((size_t)c.n, sizeof *n_ids);
    if (!ids || !n_ids) return die("out of memory", NULL);
    pass_ctx p = {tok, &c, ids, n_ids, 0};
    double cold_ms = timed_pass(NULL, &p);
    int64_t n_tokens = 0;
    for (int i = 0; i < c.n; i++) n_tokens += n_ids[i];
    p.ids = NULL;
    double warm_ms = 1e300, mt_ms = 1e300;
    for (int r = 0; r < repeat; r++) {
        double ms = timed_pass(NULL, &p);
        if (ms < warm_ms) warm_ms = ms;
    }
    la_threadpool *tp = NULL;
    if (la_threadpool_create(threads, &tp, &err) != LA_OK) return die(err.msg, NULL);
    for (int r = 0; r < repeat; r++) {
        double ms = timed_pass(tp, &p);
        if (ms < mt_ms) mt_ms = ms;
    }
    la_threadpool_destroy(tp);
    if (p.failed) return die("an encode failed", NULL);

    size_t decoded_bytes = 0;
    t0 = la_now_ms();
    for (int i = 0; i < c.n; i++) {
        char *text = NULL;
        size_t len = 0;
        if (la_tokenizer_decode(tok, ids[i], n_ids[i], false, &text, &len, &err) != LA_OK)
            return die(err.msg, NULL);
        decoded_bytes += len;
        free(text);
    }
    double decode_ms = la_now_ms() - t0;
    t0 = la_now_ms();
    for (int i = 0; i < c.n; i++) {
        la_detok *d = NULL;
        if (la_detok_create(tok, false, &d, &err) != LA_OK) return die(err.msg, NULL);
        for (int32_t k = 0; k < n_ids[i]; k++) {
            const char *piece;
            if (la_detok_push(d, ids[i][k], &piece, NULL, &err) != LA_OK) return die(err.msg, NULL);
        }
        la_detok_destroy(d);
    }
    double detok_ms = la_now_ms() - t0;

    double mb = (double)c.bytes / 1e6;
    struct utsname u;
    uname(&u);
    char cpu[256], uname_s[1024], command[2048] = "";
    cpu_model(cpu, sizeof cpu);
    snprintf(uname_s, sizeof uname_s, "%s %s %s %s", u.sysname, u.nodename, u.release, u.machine);
    for (int i = 0; i < argc; i++) {
        strncat(command, i ? " " : "", sizeof command - strlen(command) - 1);
        strncat(command, argv[i], sizeof command - strlen(command) - 1);
    }

    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "benchmark", "tokenizer_cpu");
    cJSON_AddStringToObject(o, "command", command);
    cJSON_AddStringToObject(m, "uname", uname_s);
    cJSON_AddStringToObject(m, "cpu", cpu);
    cJSON_AddNumberToObject(m, "n_cpus", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddNumberToObject(m, "loadavg_1min_at_start", loadavg);
    cJSON_AddItemToObject(o, "machine", m);
    cJSON_AddStringToObject(o, "tokenizer", tok_dir);
    cJSON_AddStringToObject(o, "data", data);
    cJSON_AddNumberToObject(o, "n_passages", c.n);
    cJSON_AddNumberToObject(o, "input_bytes", (double)c.bytes);
    cJSON_AddNumberToObject(o, "n_tokens", (double)n_tokens);
    cJSON_AddNumberToObject(o, "load_ms", load_ms);
    cJSON_AddNumberToObject(o, "encode_cold_mb_s", mb / (cold_ms / 1e3));
    cJSON_AddNumberToObject(o, "encode_warm_mb_s", mb / (warm_ms / 1e3));
    cJSON_AddNumberToObject(o, "encode_warm_tokens_s", (double)n_tokens / (warm_ms / 1e3));
    cJSON_AddNumberToObject(o, "encode_threads", threads);
    cJSON_AddNumberToObject(o, "encode_threads_mb_s", mb / (mt_ms / 1e3));
    cJSON_AddNumberToObject(o, "decode_mb_s", (double)decoded_bytes / 1e6 / (decode_ms / 1e3));
    cJSON_AddNumberToObject(o, "detok_tokens_s", (double)n_tokens / (detok_ms / 1e3));
    cJSON_AddNumberToObject(o, "repeat", repeat);
    char *json = cJSON_Print(o);

    mkdir("bench", 0755);
    mkdir("bench/results", 0755);
    FILE *f = fopen(out_path, "w");
    if (!f) return die("cannot write ", out_path);
    fprintf(f, "%s\n", json);
    fclose(f);
    printf("tokenizer %s: %d passages, %.2f MB, %lld tokens, load %.0f ms\n", tok_dir, c.n, mb,
           (long long)n_tokens, load_ms);
    printf("encode: cold %.1f MB/s, warm %.1f MB/s (%.0f tokens/s), %d threads %.1f MB/s\n",
           mb / (cold_ms / 1e3), mb / (warm_ms / 1e3), (double)n_tokens / (warm_ms / 1e3), threads,
           mb / (mt_ms / 1e3));
    printf("decode: %.1f MB/s; detok: %.0f tokens/s\nwrote %s\n",
           (double)decoded_bytes / 1e6 / (decode_ms / 1e3), (double)n_tokens / (detok_ms / 1e3),
           out_path);

    free(json);
    cJSON_Delete(o);
    for (int i = 0; i < c.n; i++) {
        free(c.texts[i]);
        free(ids[i]);
    }
    free(c.texts);
    free(c.lens);
    free(ids);
    free(n_ids);
    la_tokenizer_destroy(tok);
    return 0;
}
