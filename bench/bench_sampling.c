/* Sampling-feature benchmark (not a test): decode TPOT at one batch size with logprobs, with
 * penalties and with a JSON schema, side by side with plain greedy decoding, in one process
 * on one engine (issue 21).
 *
 *   bench_sampling (--model DIR | --random-weights SHAPE --tokenizer DIR) [--device cpu|cuda]
 *                  [--batch 32] [--decode-tokens 64] [--reps 3] [--threads N]
 *                  [--out bench/results/FILE.json]
 *
 * Configurations (every one greedy, so the tokens differ only by what the feature does):
 *   greedy          no feature: the CUDA backend takes the argmax on the device
 *   greedy-logits   the same tokens with the logits on the host (return_logits): the path
 *                   every feature below needs, without any of them
 *   logprobs        logprobs with the top 5
 *   penalties       presence 0.5, frequency 0.5, repetition 1.1
 *   json-schema     response_format json_schema {"text": string, "n": integer}: the grammar
 *                   mask of every step (the value is kept open until max_tokens)
 * Each configuration: a warm-up batch (grammar masks cached, CUDA graphs captured), then
 * --reps batches of --batch requests submitted together; a batch's TPOT is its requests'
 * mean time per output token after the first, averaged; the table shows the median batch. The engine's own clocks (la_engine_stats
 * choose_s, grammar_s) give the host time per decode step spent choosing tokens (summed
 * over the threads that choose in parallel) and, of it, computing grammar masks: "mask share" = mask time per step / json-schema TPOT, which
 * a machine shared with other work cannot blur the way it blurs a TPOT difference.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "bench/driver.h"
#include "bench/machine.h"
#include "lazyattn/lazyattn.h"

enum { CFG_GREEDY, CFG_GREEDY_LOGITS, CFG_LOGPROBS, CFG_PENALTIES, CFG_JSON, N_CFG };
static const char *const k_names[N_CFG] = {"greedy", "greedy-logits", "logprobs", "penalties", "json-schema"};

static const char *const k_schema =
    "{\"type\": \"object\", \"properties\": {\"text\": {\"type\": \"string\"}, \"n\": {\"type\": \"integer\"}},"
    " \"required\": [\"text\", \"n\"], \"additionalProperties\": false}";

static void params_for(int cfg, int i, int decode_tokens, la_request_params *p) {
    static char prompts[256][160];
    snprintf(prompts[i % 256], sizeof prompts[0],
             "Request %d. Write a long description of the city of Chas in Wirnor, its rivers, streets and people.", i);
    la_request_params_init(p);
    p->prompt.text = prompts[i % 256];
    p->sampling.max_tokens = decode_tokens;
    p->sampling.ignore_eos = cfg != CFG_JSON;
    if (cfg == CFG_GREEDY_LOGITS) p->return_logits = true;
    if (cfg == CFG_LOGPROBS) p->sampling.logprobs = true, p->sampling.top_logprobs = 5;
    if (cfg == CFG_PENALTIES) {
        p->sampling.presence_penalty = 0.5f;
        p->sampling.frequency_penalty = 0.5f;
        p->sampling.repetition_penalty = 1.1f;
    }
    if (cfg == CFG_JSON) {
        p->sampling.response_format = LA_RESPONSE_JSON_SCHEMA;
        p->sampling.json_schema = k_schema;
    }
}

/* One batch of n requests of cfg: mean TPOT (ms), tokens generated, and the engine's
 * host-side choosing and grammar-mask time per decode step (ms). */
static int run_batch(la_engine *e, int cfg, int n, int decode_tokens, double *tpot_ms, int64_t *tokens,
                     double *choose_ms_step, double *grammar_ms_step) {
    la_engine_stats before;
    la_engine_get_stats(e, &before);
    la_bench_done *g = calloc((size_t)n, sizeof *g);
    la_err err = {0};
    for (int i = 0; i < n; i++) {
        la_request_params p;
        params_for(cfg, i, decode_tokens, &p);
        p.on_event = la_bench_on_done;
        p.user = &g[i];
        if (la_engine_submit(e, &p, NULL, &err) != LA_OK) {
            fprintf(stderr, "bench_sampling: submit: %s\n", err.msg);
            free(g);
            return -1;
        }
    }
    while (la_engine_has_work(e)) la_engine_step(e, &err);
    double sum = 0;
    *tokens = 0;
    for (int i = 0; i < n; i++) {
        if (g[i].finish == LA_FINISH_ERROR) {
            fprintf(stderr, "bench_sampling: %s request failed: %s\n", k_names[cfg], g[i].error);
            free(g);
            return -1;
        }
        sum += g[i].stats.tpot_ms;
        *tokens += g[i].stats.n_generated;
    }
    *tpot_ms = sum / n;
    la_engine_stats after;
    la_engine_get_stats(e, &after);
    double steps = (double)(after.n_steps - before.n_steps);
    *choose_ms_step = 1e3 * (after.choose_s - before.choose_s) / steps;
    *grammar_ms_step = 1e3 * (after.grammar_s - before.grammar_s) / steps;
    free(g);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0:n] (a machine shared with other work makes means jumpy). */
static double median(const double *v, int n) {
    double s[16];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},   {"random-weights", required_argument, 0, 1},
        {"tokenizer", required_argument, 0, 2}, {"device", required_argument, 0, 3},
        {"batch", required_argument, 0, 4},     {"decode-tokens", required_argument, 0, 5},
        {"reps", required_argument, 0, 6},      {"threads", required_argument, 0, 7},
        {"out", required_argument, 0, 8},       {0, 0, 0, 0}};
    la_engine_options eo;
    la_engine_options_init(&eo);
    const char *out = NULL;
    int batch = 32, decode_tokens = 64, reps = 3, c;
    la_err err = {0};
    while ((c = getopt_long(argc, argv, "m:", opts, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model_dir = optarg; break;
        case 1: eo.random_weights = optarg; break;
        case 2: eo.tokenizer_dir = optarg; break;
        case 3:
            if (la_device_parse(optarg, &eo.device, &err) != LA_OK) {
                fprintf(stderr, "bench_sampling: %s\n", err.msg);
                return 2;
            }
            break;
        case 4: batch = atoi(optarg); break;
        case 5: decode_tokens = atoi(optarg); break;
        case 6: reps = atoi(optarg); break;
        case 7: eo.n_threads = atoi(optarg); break;
        case 8: out = optarg; break;
        default:
            fprintf(stderr, "usage: bench_sampling (--model DIR | --random-weights SHAPE --tokenizer DIR) "
                            "[--device cpu|cuda] [--batch 32] [--decode-tokens 64] [--reps 3] [--threads N] "
                            "[--out FILE.json]\n");
            return 2;
        }
    }
    if (!eo.model_dir && !eo.random_weights) eo.model_dir = LA_SOURCE_DIR "/models/rag-tiny";
    if (batch < 1 || decode_tokens < 8 || reps < 1) {
        fprintf(stderr, "bench_sampling: --batch >= 1, --decode-tokens >= 8, --reps >= 1\n");
        return 2;
    }
    if (out && la_output_path_check(out) != 0) {
        perror(out);
        return 1;
    }
    eo.max_running = batch > eo.max_running ? batch : eo.max_running;
    la_engine *e = NULL;
    if (la_engine_create(&eo, &e, &err) != LA_OK) {
        fprintf(stderr, "bench_sampling: %s\n", err.msg);
        return 1;
    }
    double tpot[N_CFG][16] = {{0}}, mean[N_CFG] = {0}, choose[N_CFG] = {0}, grammar[N_CFG] = {0};
    int64_t tokens[N_CFG] = {0};
    if (reps > 16) reps = 16;
    for (int cfg = 0; cfg < N_CFG; cfg++) {
        double t, cm, gm;
        int64_t n;
        if (run_batch(e, cfg, batch, decode_tokens, &t, &n, &cm, &gm) != 0) return 1; /* warm-up */
    }
    for (int r = 0; r < reps; r++) /* interleaved, so drifts hit every configuration alike */
        for (int cfg = 0; cfg < N_CFG; cfg++) {
            int64_t n;
            double cm, gm;
            if (run_batch(e, cfg, batch, decode_tokens, &tpot[cfg][r], &n, &cm, &gm) != 0) return 1;
            mean[cfg] += tpot[cfg][r] / reps;
            choose[cfg] += cm / reps;
            grammar[cfg] += gm / reps;
            tokens[cfg] += n;
        }
    double med[N_CFG];
    for (int cfg = 0; cfg < N_CFG; cfg++) med[cfg] = median(tpot[cfg], reps);
    printf("bench_sampling: %s on %s, batch %d, %d tokens per request, %d reps (TPOT: the median rep)\n",
           la_engine_model_name(e), la_engine_device_name(e), batch, decode_tokens, reps);
    printf("%-14s %10s %12s %18s %16s %16s\n", "config", "TPOT ms", "vs greedy", "vs greedy-logits",
           "choose ms/step", "mask ms/step");
    for (int cfg = 0; cfg < N_CFG; cfg++)
        printf("%-14s %10.3f %11.3fx %17.3fx %16.3f %16.3f\n", k_names[cfg], med[cfg], med[cfg] / med[CFG_GREEDY],
               med[cfg] / med[CFG_GREEDY_LOGITS], choose[cfg], grammar[cfg]);
    double mask_cost = med[CFG_JSON] / med[CFG_GREEDY_LOGITS] - 1;
    double mask_share = grammar[CFG_JSON] / med[CFG_JSON];
    printf("grammar mask: %.3f ms per step of %d sequences = %.1f%% of the json-schema TPOT (measured inside the "
           "engine); TPOT %+.1f%% over greedy-logits, %+.1f%% over greedy\n", grammar[CFG_JSON], batch,
           100 * mask_share, 100 * mask_cost, 100 * (med[CFG_JSON] / med[CFG_GREEDY] - 1));
    if (out) {
        cJSON *root = cJSON_CreateObject();
        char *cmd = la_command_line(argc, argv);
        cJSON_AddStringToObject(root, "command", cmd);
        free(cmd);
        cJSON_AddItemToObject(root, "machine", la_machine_json());
        cJSON_AddStringToObject(root, "model", la_engine_model_name(e));
        cJSON_AddStringToObject(root, "device", la_engine_device_name(e));
        cJSON_AddNumberToObject(root, "batch", batch);
        cJSON_AddNumberToObject(root, "decode_tokens", decode_tokens);
        cJSON_AddNumberToObject(root, "reps", reps);
        cJSON_AddStringToObject(root, "schema", k_schema);
        cJSON *cfgs = cJSON_AddObjectToObject(root, "tpot_ms");
        for (int cfg = 0; cfg < N_CFG; cfg++) {
            cJSON *o = cJSON_AddObjectToObject(cfgs, k_names[cfg]);
            cJSON_AddNumberToObject(o, "mean", mean[cfg]);
            cJSON_AddNumberToObject(o, "median", med[cfg]);
            cJSON *arr = cJSON_AddArrayToObject(o, "reps");
            for (int r = 0; r < reps; r++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(tpot[cfg][r]));
            cJSON_AddNumberToObject(o, "vs_greedy", med[cfg] / med[CFG_GREEDY]);
            cJSON_AddNumberToObject(o, "vs_greedy_logits", med[cfg] / med[CFG_GREEDY_LOGITS]);
            cJSON_AddNumberToObject(o, "tokens", (double)tokens[cfg]);
            cJSON_AddNumberToObject(o, "choose_ms_per_step", choose[cfg]);
            cJSON_AddNumberToObject(o, "grammar_mask_ms_per_step", grammar[cfg]);
        }
        cJSON_AddNumberToObject(root, "grammar_mask_share_of_tpot", mask_share);
        cJSON_AddNumberToObject(root, "grammar_mask_cost_vs_greedy_logits", mask_cost);
        cJSON_AddNumberToObject(root, "grammar_mask_cost_vs_greedy", med[CFG_JSON] / med[CFG_GREEDY] - 1);
        if (la_json_write_file(out, root) != 0) perror(out);
        cJSON_Delete(root);
    }
    la_engine_destroy(e);
    return 0;
}
