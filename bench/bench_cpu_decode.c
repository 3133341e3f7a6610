/* CPU decode and prefill speed (not a test): decode ms/token at given context lengths and
 * prefill tokens/s at given prompt lengths, through the public API, one engine.
 *
 *   bench_cpu_decode (-m DIR | --random-weights SHAPE) [--contexts 64,1536,8000]
 *                    [--prefill 512,2048] [--decode-tokens 32] [--reps 3] [--threads N]
 *                    [--cpu-weights auto|f32|bf16|f16|bf16-dot] [--cpu-kv f32|bf16]
 *                    [--max-batch-tokens N]
 *                    [--kv-blocks N] [--out FILE.json]
 *
 * Every request is a prompt of pseudo-random token ids (ids below 3000: no special token of
 * the bundled model), method recompute (nothing reused between requests), greedy,
 * ignore_eos. Decode at context C: a C-token prompt, then --decode-tokens tokens; the
 * request's TPOT (mean time per output token after the first) is the row's ms/token, so
 * the context runs from C to C + decode tokens. Prefill at P: a P-token prompt, one output
 * token; P / TTFT is the row's tokens/s (the engine prefills in chunks of
 * --max-batch-tokens, 1024 by default). One warm-up request first; each row is the median
 * of --reps requests. Prints one JSON object (stdout, and --out): the rows, the machine,
 * the load average before and after. bench/cpu_speed.py runs it beside llama.cpp.
 * Uses only include/lazyattn (it links against older builds of the library too: with
 * --cpu-weights left at auto it sets no field they lack).
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/driver.h"
#include "bench/machine.h"
#include "lazyattn/lazyattn.h"

static uint64_t g_rng = 12345;
static int32_t next_id(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (int32_t)((g_rng >> 11) % 3000);
}

/* One request: n_prompt ids, max_tokens out; stats into *st. 0, or -1 with a message. */
static int run_one(la_engine *e, int n_prompt, int max_tokens, la_request_stats *st) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_prompt);
    if (!ids) return -1;
    for (int i = 0; i < n_prompt; i++) ids[i] = next_id();
    la_request_params rp;
    la_request_params_init(&rp);
    rp.prompt = (la_segment){.ids = ids, .n_ids = n_prompt};
    rp.add_special = false;
    rp.method = LA_METHOD_RECOMPUTE;
    rp.sampling.temperature = 0;
    rp.sampling.max_tokens = max_tokens;
    rp.sampling.ignore_eos = true;
    la_bench_done g;
    la_err err = {0};
    la_status s = la_bench_run_one(e, &rp, &g, &err);
    free(ids);
    if (s != LA_OK) {
        fprintf(stderr, "bench_cpu_decode: %d tokens: %s\n", n_prompt, err.msg);
        return -1;
    }
    *st = g.stats;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* "64,1536,8000" -> ints; count in *n (at most cap). */
static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

/* A whole number in [lo, hi] into *out; -1 for anything else (*out untouched). */
static int int_arg(const char *s, long lo, long hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},        {"random-weights", required_argument, 0, 1},
        {"contexts", required_argument, 0, 2},       {"prefill", required_argument, 0, 3},
        {"decode-tokens", required_argument, 0, 4},  {"reps", required_argument, 0, 5},
        {"threads", required_argument, 0, 6},        {"cpu-weights", required_argument, 0, 7},
        {"max-batch-tokens", required_argument, 0, 8}, {"out", required_argument, 0, 9},
        {"kv-blocks", required_argument, 0, 10},     {"cpu-kv", required_argument, 0, 11},
        {0, 0, 0, 0}};
    la_engine_options eo;
    memset(&eo, 0, sizeof eo); /* an older library refuses fields it lacks unless zero */
    la_engine_options_init(&eo);
    int contexts[16] = {64, 1536, 8000}, n_ctx = 3, prefills[16] = {512, 2048}, n_pre = 2;
    int decode_tokens = 32, reps = 3, c, bad = 0, threads = 0, max_batch = 0;
    const char *out = NULL, *weights = "auto", *kv = "f32";
    while ((c = getopt_long(argc, argv, "m:", opts, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model_dir = optarg; break;
        case 1: eo.random_weights = optarg; break;
        case 2: n_ctx = parse_list(optarg, contexts, 16); break;
        case 3: n_pre = parse_list(optarg, prefills, 16); break;
        case 4: bad |= int_arg(optarg, 2, 1 << 20, &decode_tokens); break;
        case 5: bad |= int_arg(optarg, 1, 1000, &reps); break;
        case 6: bad |= int_arg(optarg, 0, LA_MAX_THREADS, &threads), eo.n_threads = threads; break;
        case 7: weights = optarg; break;
        case 8: bad |= int_arg(optarg, 0, 1 << 24, &max_batch), eo.max_batch_tokens = max_batch; break;
        case 9: out = optarg; break;
        case 10: eo.kv_blocks = atoll(optarg); break;
        case 11: kv = optarg; break;
        default: fprintf(stderr, "bench_cpu_decode: bad arguments (see bench/bench_cpu_decode.c)\n"); return 2;
        }
    }
    if (bad || n_ctx < 0 || n_pre < 0 || (strcmp(kv, "f32") && strcmp(kv, "bf16"))) {
        fprintf(stderr, "bench_cpu_decode: bad --contexts, --prefill, --reps, --decode-tokens (2 or more), "
                        "--threads (0: one per core), --max-batch-tokens or --cpu-kv (f32 or bf16)\n");
        return 2;
    }
    if (strcmp(weights, "auto")) {
        static const char *const names[] = {"auto", "f32", "bf16", "f16", "bf16-dot"};
        int i = 0;
        while (i < 5 && strcmp(weights, names[i])) i++;
        if (i == 5) {
            fprintf(stderr, "bench_cpu_decode: --cpu-weights %s\n", weights);
            return 2;
        }
        eo.cpu_weights = (la_cpu_weights)i;
    }
    if (!strcmp(kv, "bf16")) eo.cpu_kv = LA_CPU_KV_BF16; /* f32: the field stays 0 */
    int max_len = 0;
    for (int i = 0; i < n_ctx; i++)
        if (contexts[i] + decode_tokens > max_len) max_len = contexts[i] + decode_tokens;
    for (int i = 0; i < n_pre; i++)
        if (prefills[i] + 1 > max_len) max_len = prefills[i] + 1;
    if (!eo.kv_blocks) eo.kv_blocks = max_len / 16 + 64;
    char load_before[64];
    la_machine_loadavg(load_before, sizeof load_before);
    la_err err = {0};
    la_engine *e = NULL;
    if (la_engine_create(&eo, &e, &err) != LA_OK) {
        fprintf(stderr, "bench_cpu_decode: %s\n", err.msg);
        return 1;
    }
    la_request_stats st;
    if (run_one(e, 64, 4, &st)) return 1; /* warm-up: first-touch of the weights, allocations */
    cJSON *root = cJSON_CreateObject();
    char *cmd = la_command_line(argc, argv);
    cJSON_AddStringToObject(root, "command", cmd);
    free(cmd);
    cJSON_AddItemToObject(root, "machine", la_machine_json());
    cJSON_AddStringToObject(root, "cpu_weights", weights);
    cJSON_AddStringToObject(root, "cpu_kv", kv);
    cJSON_AddNumberToObject(root, "threads", eo.n_threads);
    cJSON *rows = cJSON_AddArrayToObject(root, "decode");
    double v[64];
    if (reps > 64) reps = 64;
    for (int i = 0; i < n_ctx; i++) {
        for (int r = 0; r < reps; r++) {
            if (run_one(e, contexts[i], decode_tokens, &st)) return 1;
            v[r] = st.tpot_ms;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "context", contexts[i]);
        cJSON_AddNumberToObject(o, "ms_per_token", median(v, reps));
        cJSON_AddItemToArray(rows, o);
        fprintf(stderr, "decode at %d: %.2f ms/token\n", contexts[i], median(v, reps));
    }
    rows = cJSON_AddArrayToObject(root, "prefill");
    for (int i = 0; i < n_pre; i++) {
        for (int r = 0; r < reps; r++) {
            if (run_one(e, prefills[i], 1, &st)) return 1;
            v[r] = prefills[i] / (st.ttft_ms / 1000.0);
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "tokens", prefills[i]);
        cJSON_AddNumberToObject(o, "tokens_per_s", median(v, reps));
        cJSON_AddItemToArray(rows, o);
        fprintf(stderr, "prefill %d: %.1f tokens/s\n", prefills[i], median(v, reps));
    }
    char load_after[64];
    la_machine_loadavg(load_after, sizeof load_after);
    cJSON_AddStringToObject(root, "loadavg_before", load_before);
    cJSON_AddStringToObject(root, "loadavg_after", load_after);
    char *js = cJSON_PrintUnformatted(root);
    printf("%s\n", js);
    free(js);
    if (out && la_json_write_file(out, root) != 0) fprintf(stderr, "bench_cpu_decode: cannot write %s\n", out);
    cJSON_Delete(root);
    la_engine_destroy(e);
    return 0;
}
