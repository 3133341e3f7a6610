/* CPU benchmark (not a test): prefill and decode throughput, and time to first token of the
 * five methods side by side on RAG requests whose 10 documents come back in a new order.
 *
 *   bench_cpu (--model DIR | --random-weights SHAPE [--tokenizer DIR]) [--label NAME]
 *             [--dataset FILE] [--docs 10] [--doc-tokens 150] [--question-tokens 0]
 *             [--requests 3] [--prefill-tokens 512] [--decode-tokens 32] [--threads N]
 *             [--out bench/results/FILE.json]
 *
 * Method TTFT: per method, one warm-up request with the documents in the file's order (its
 * TTFT is reported as "cold"), then --requests requests, each with a fresh shuffle of the
 * same documents ("warm": what a RAG server sees when the same documents come back).
 * Documents are the first question's passages of --dataset, each truncated to --doc-tokens
 * tokens; the question is that question's text. Every number comes from one process, one
 * engine, side by side.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "bench/driver.h"
#include "bench/machine.h"
#include "bench/rag_dataset.h"
#include "lazyattn/lazyattn.h"

/* One request to its end; 0, or -1 with a message. */
static int run_one(la_engine *e, la_request_params *rp, la_bench_done *g) {
    la_err err = {0};
    if (la_bench_run_one(e, rp, g, &err) == LA_OK) return 0;
    fprintf(stderr, "bench_cpu: %s\n", err.msg);
    return -1;
}

static uint64_t g_rng = 12345;
static uint32_t next_rand(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

int main(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},        {"random-weights", required_argument, 0, 1},
        {"tokenizer", required_argument, 0, 2},      {"label", required_argument, 0, 3},
        {"dataset", required_argument, 0, 4},        {"docs", required_argument, 0, 5},
        {"doc-tokens", required_argument, 0, 6},     {"requests", required_argument, 0, 7},
        {"prefill-tokens", required_argument, 0, 8}, {"decode-tokens", required_argument, 0, 9},
        {"threads", required_argument, 0, 10},       {"out", required_argument, 0, 11},
        {0, 0, 0, 0}};
    la_engine_options eo;
    la_engine_options_init(&eo);
    const char *label = NULL, *out = NULL;
    const char *dataset = LA_SOURCE_DIR "/../shared/data/hotpotqa/hotpotqa_dev_distractor_ircot_500.jsonl";
    int n_docs = 10, doc_tokens = 150, n_req = 3, prefill_tokens = 512, decode_tokens = 32, c;
    while ((c = getopt_long(argc, argv, "m:", opts, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model_dir = optarg; break;
        case 1: eo.random_weights = optarg; break;
        case 2: eo.tokenizer_dir = optarg; break;
        case 3: label = optarg; break;
        case 4: dataset = optarg; break;
        case 5: n_docs = atoi(optarg); break;
        case 6: doc_tokens = atoi(optarg); break;
        case 7: n_req = atoi(optarg); break;
        case 8: prefill_tokens = atoi(optarg); break;
        case 9: decode_tokens = atoi(optarg); break;
        case 10: eo.n_threads = atoi(optarg); break;
        case 11: out = optarg; break;
        default: fprintf(stderr, "bench_cpu: bad arguments (see the comment at the top of bench/bench_cpu.c)\n"); return 2;
        }
    }
    la_err err = {0};
    la_engine *e = NULL;
    double t_load = la_now_ms();
    if (la_engine_create(&eo, &e, &err) != LA_OK) {
        fprintf(stderr, "bench_cpu: %s\n", err.msg);
        return 1;
    }
    t_load = la_now_ms() - t_load;
    la_rag_dataset ds;
    if (la_rag_dataset_load(dataset, 1, n_docs, &ds, &err) != LA_OK) {
        fprintf(stderr, "bench_cpu: %s\n", err.msg);
        return 1;
    }
    la_rag_question *Q = &ds.q[0];
    n_docs = Q->n_docs;
    /* documents as token ids, truncated */
    int32_t **doc_ids = calloc((size_t)n_docs, sizeof(int32_t *)), *doc_len = calloc((size_t)n_docs, sizeof(int32_t));
    int64_t doc_total = 0;
    for (int d = 0; d < n_docs; d++) {
        char buf[8192];
        snprintf(buf, sizeof buf, "- Title: %s\n%s\n", Q->docs[d].title, Q->docs[d].text);
        if (la_engine_tokenize(e, buf, strlen(buf), false, &doc_ids[d], &doc_len[d], &err) != LA_OK) {
            fprintf(stderr, "bench_cpu: %s\n", err.msg);
            return 1;
        }
        if (doc_len[d] > doc_tokens) doc_len[d] = doc_tokens;
        doc_total += doc_len[d];
    }
    char qtext[2048];
    snprintf(qtext, sizeof qtext, "Question: %s\nAnswer:", Q->question);
    int32_t *q_ids = NULL, n_q = 0;
    la_engine_tokenize(e, qtext, strlen(qtext), false, &q_ids, &n_q, &err);

    cJSON *root = cJSON_CreateObject();
    char *cmd = la_command_line(argc, argv);
    cJSON_AddStringToObject(root, "command", cmd);
    free(cmd);
    cJSON_AddItemToObject(root, "machine", la_machine_json());
    cJSON_AddStringToObject(root, "model", label ? label : la_engine_model_name(e));
    if (eo.random_weights) cJSON_AddStringToObject(root, "note", "random weights of the exact shape: timing is real, answers are meaningless");
    cJSON_AddNumberToObject(root, "load_ms", t_load);
    printf("model %s (%s)%s\n", label ? label : la_engine_model_name(e), la_engine_device_name(e),
           eo.random_weights ? " [random weights: timing only]" : "");

    /* ---- throughput -------------------------------------------------------------------- */
    int32_t *pre = malloc(sizeof(int32_t) * (size_t)prefill_tokens);
    for (int i = 0; i < prefill_tokens; i++) pre[i] = doc_ids[i % n_docs][i % doc_len[i % n_docs]];
    la_request_params rp;
    la_request_params_init(&rp);
    rp.prompt = (la_segment){.ids = pre, .n_ids = prefill_tokens};
    rp.method = LA_METHOD_RECOMPUTE;
    rp.add_special = false;
    rp.sampling.max_tokens = 1;
    la_bench_done g;
    if (run_one(e, &rp, &g)) return 1;
    double prefill_tps = prefill_tokens / (g.stats.ttft_ms / 1000.0);
    rp.prompt.n_ids = 16;
    rp.sampling.max_tokens = decode_tokens;
    rp.sampling.ignore_eos = true;
    if (run_one(e, &rp, &g)) return 1;
    double decode_tps = 1000.0 / g.stats.tpot_ms;
    printf("prefill %d tokens: %.1f tokens/s   decode: %.2f tokens/s (%.1f ms/token)\n",
           prefill_tokens, prefill_tps, decode_tps, g.stats.tpot_ms);
    cJSON_AddNumberToObject(root, "prefill_tokens", prefill_tokens);
    cJSON_AddNumberToObject(root, "prefill_tokens_per_s", prefill_tps);
    cJSON_AddNumberToObject(root, "decode_tokens_per_s", decode_tps);
    cJSON_AddNumberToObject(root, "decode_ms_per_token", g.stats.tpot_ms);

    /* ---- methods, side by side ----------------------------------------------------------- */
    const la_method methods[5] = {LA_METHOD_RECOMPUTE, LA_METHOD_PREFIX, LA_METHOD_BLOCK,
                                  LA_METHOD_MEPIC, LA_METHOD_LAZY};
    cJSON *jm = cJSON_AddObjectToObject(root, "ttft");
    cJSON_AddNumberToObject(root, "n_docs", n_docs);
    cJSON_AddNumberToObject(root, "doc_tokens_total", (double)doc_total);
    cJSON_AddNumberToObject(root, "question_tokens", n_q);
    cJSON_AddNumberToObject(root, "warm_requests", n_req);
    printf("%d documents, %lld document tokens, %d question tokens, %d reordered requests per method\n",
           n_docs, (long long)doc_total, n_q, n_req);
    printf("%-10s %12s %12s %12s %14s\n", "method", "cold_ms", "warm_ms", "doc_reuse", "prefix_reuse");
    double warm_ms[5] = {0};
    la_segment *segs = calloc((size_t)n_docs, sizeof(la_segment));
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)n_docs);
    for (int m = 0; m < 5; m++) {
        double cold = 0, warm = 0, reuse = 0, prefix_reuse = 0;
        for (int r = 0; r <= n_req; r++) {
            for (int d = 0; d < n_docs; d++) perm[d] = d;
            if (r > 0) /* a fresh order per request (same sequence for every method) */
                for (int d = n_docs - 1; d > 0; d--) {
                    int j = (int)(next_rand() % (uint32_t)(d + 1)), t = perm[d];
                    perm[d] = perm[j], perm[j] = t;
                }
            for (int d = 0; d < n_docs; d++) segs[d] = (la_segment){.ids = doc_ids[perm[d]], .n_ids = doc_len[perm[d]]};
            la_request_params_init(&rp);
            rp.docs = segs;
            rp.n_docs = n_docs;
            rp.prompt = (la_segment){.ids = q_ids, .n_ids = n_q};
            rp.method = methods[m];
            rp.cache_salt = la_method_name(methods[m]); /* each method starts cold */
            rp.sampling.max_tokens = 1;
            if (run_one(e, &rp, &g)) return 1;
            if (r == 0) {
                cold = g.stats.ttft_ms;
                continue;
            }
            warm += g.stats.ttft_ms / n_req;
            double docs_all = (double)(g.stats.doc_tokens_reused + g.stats.doc_tokens_computed);
            reuse += (docs_all > 0 ? g.stats.doc_tokens_reused / docs_all : 0) / n_req;
            prefix_reuse += (double)g.stats.prefix_tokens_reused / g.stats.n_prompt_tokens / n_req;
        }
        g_rng = 12345; /* same orders for the next method */
        warm_ms[m] = warm;
        printf("%-10s %12.1f %12.1f %11.1f%% %13.1f%%\n", la_method_name(methods[m]), cold, warm,
               100 * reuse, 100 * prefix_reuse);
        cJSON *o = cJSON_AddObjectToObject(jm, la_method_name(methods[m]));
        cJSON_AddNumberToObject(o, "cold_ms", cold);
        cJSON_AddNumberToObject(o, "warm_reordered_ms", warm);
        cJSON_AddNumberToObject(o, "doc_token_reuse", reuse);
        cJSON_AddNumberToObject(o, "prefix_token_reuse", prefix_reuse);
    }
    printf("lazy vs prefix (reordered documents): TTFT %.2fx sooner; vs recompute %.2fx; "
           "vs block %.2fx; vs mepic %.2fx\n",
           warm_ms[1] / warm_ms[4], warm_ms[0] / warm_ms[4], warm_ms[2] / warm_ms[4], warm_ms[3] / warm_ms[4]);
    cJSON *ratio = cJSON_AddObjectToObject(root, "lazy_speedup_warm");
    cJSON_AddNumberToObject(ratio, "vs_prefix", warm_ms[1] / warm_ms[4]);
    cJSON_AddNumberToObject(ratio, "vs_recompute", warm_ms[0] / warm_ms[4]);
    cJSON_AddNumberToObject(ratio, "vs_block", warm_ms[2] / warm_ms[4]);
    cJSON_AddNumberToObject(ratio, "vs_mepic", warm_ms[3] / warm_ms[4]);
    if (out && la_json_write_file(out, root) != 0) fprintf(stderr, "bench_cpu: cannot write %s\n", out);
    cJSON_Delete(root);
    la_engine_destroy(e);
    return 0;
}
