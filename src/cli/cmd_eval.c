/* lazyattn eval: answer a RAG question set with one or more methods and score it
 * (flags -> bench/eval.h -> table, JSON).
 *
 *   lazyattn eval [-m DIR] --dataset FILE [--methods lazy,mepic,block,block-ref,recompute]
 *                 [--orders K] [--limit N] [--max-docs N] [--max-tokens N] [--json OUT]
 *                 [--device D] [--threads N] [--kv-blocks N] [--concurrency N] [--seed S]
 *                 [store flags: --host-kv-gib, --kv-dir, ... as run's]
 *                 [--chat-template FILE | --raw] [--margins]
 *
 * bench/eval.h says how questions are asked and scored (exact match overall and by hops,
 * agreement with the first method, and for --orders K > 1 the share of questions answered the
 * same under K document orders).
 * stdout: a table; stderr: a progress bar; --json: every number plus per-question answers.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/eval.h"
#include "bench/machine.h"
#include "bench/rag_dataset.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "lazyattn/lazyattn.h"

/* bench/eval.h's hooks: the progress bar (user: a la_cli_progress) and a line per failed
 * request. */
static void on_progress(void *user, int64_t done, int64_t total) {
    la_cli_progress *p = user;
    if (done == p->done && total == p->total) return;
    p->done = done;
    p->total = total;
    if (done == total) la_cli_progress_end(p);
    else la_cli_progress_draw(p, false);
}

static void on_failed(void *user, const char *message) {
    (void)user;
    fprintf(stderr, "\nlazyattn eval: %s\n", message);
}

static void usage(FILE *f) {
    fprintf(f, "usage: lazyattn eval [-m DIR] --dataset FILE [--methods LIST] [--orders K] [--limit N]\n"
               "                     [--max-docs N] [--max-tokens N] [--json OUT] [--device D]\n"
               "                     [--threads N] [--kv-blocks N] [--concurrency N] [--seed S]\n"
               "                     [--gpu-memory-fraction F] [--chat-template FILE | --raw]\n"
               "                     [--cpu-weights f32|bf16|f16|bf16-dot] [--cpu-kv f32|bf16] [--margins]\n"
               "  --methods LIST   comma-separated methods to answer with (lazy); the first is the\n"
               "                   reference of the same-as-1st column. METHOD+rN: with recovery,\n"
               "                   each later document's first N tokens recomputed in context;\n"
               "                   METHOD+cP: selected recovery, the P%% of those documents'\n"
               "                   tokens context changes most recomputed; METHOD+pre: the\n"
               "                   documents after the first computed after document 0 (the\n"
               "                   preamble: --doc-context preamble); combined as lazy+pre+c15\n"
               "                   (e.g. recompute,lazy,lazy+r16,lazy+c15,lazy+pre)\n"
               "  --orders K       answer each question with its documents in K orders: the file's,\n"
               "                   then K - 1 seeded shuffles (--seed, 1); orders-same: the share of\n"
               "                   questions answered the same in all K (1)\n"
               "  --limit N        first N questions (0: all)\n"
               "  --max-docs N     at most N documents per question (0: all)\n"
               "  --max-tokens N   new tokens per answer (32)\n"
               "  --concurrency N  questions in flight (64)\n"
               "  --device D       cpu (default) or cuda\n"
               "  --chat-template FILE  ask with this Jinja chat template instead of the model's\n"
               "  --raw            no chat template: BOS, the documents' blocks, then the question\n"
               "  --margins        record each token's logit margin (greedy token minus runner-up,\n"
               "                   log-softmax of the raw logits) and, for each method, where its\n"
               "                   answers part from the first method's: how many, the first\n"
               "                   method's median margin there (margin@div), and how many took\n"
               "                   its runner-up (JSON: every divergence)\n"
               "  TTFT is not a benchmark: it includes the queueing --concurrency causes (timings:\n"
               "  lazyattn bench). Each method has a cache salt of its own: cold = order 0, its\n"
               "  documents computed; warm = the later orders, its documents cached\n"
               "document KV store (README \"Document KV store\"):\n" LA_CLI_STORE_USAGE);
}

int la_cli_eval(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, LA_CLI_OPT_MODEL},  {"dataset", required_argument, 0, 1},
        {"methods", required_argument, 0, 2},               {"method", required_argument, 0, 2},
        {"orders", required_argument, 0, 3},                {"limit", required_argument, 0, 4},
        {"max-docs", required_argument, 0, 5},              {"max-tokens", required_argument, 0, 6},
        {"json", required_argument, 0, 7},
        {"device", required_argument, 0, LA_CLI_OPT_DEVICE},
        {"threads", required_argument, 0, LA_CLI_OPT_THREADS},
        {"cpu-weights", required_argument, 0, LA_CLI_OPT_CPU_WEIGHTS},
        {"cpu-kv", required_argument, 0, LA_CLI_OPT_CPU_KV},
        {"kv-blocks", required_argument, 0, LA_CLI_OPT_KV_BLOCKS},
        {"concurrency", required_argument, 0, 11},          {"seed", required_argument, 0, 12},
        {"gpu-memory-fraction", required_argument, 0, LA_CLI_OPT_GPU_MEMORY_FRACTION},
        LA_CLI_STORE_OPTIONS,
        {"chat-template", required_argument, 0, LA_CLI_OPT_CHAT_TEMPLATE}, {"raw", no_argument, 0, 13},
        {"margins", no_argument, 0, 14},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    la_engine_options eo;
    la_cli_engine_options_init(&eo);
    const char *dataset = NULL, *json_out = NULL, *methods_arg = "lazy";
    int32_t orders = 1, limit = 0, max_docs = 0, max_tokens = 32, concurrency = 64;
    int64_t seed = 1;
    bool raw = false, margins = false;
    la_err err = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        la_cli_flag ef = la_cli_engine_flag(c, optarg, &eo, &err);
        if (ef == LA_CLI_FLAG_SET) continue;
        if (ef == LA_CLI_FLAG_BAD_DEVICE || ef == LA_CLI_FLAG_BAD_VALUE) fprintf(stderr, "lazyattn eval: %s\n", err.msg);
        int bad = 0;
        switch (c) { /* a bad engine flag lands in default */
        case 1: dataset = optarg; break;
        case 2: methods_arg = optarg; break;
        case 3: bad = la_cli_parse_i32(optarg, "--orders", &orders); break;
        case 4: bad = la_cli_parse_i32(optarg, "--limit", &limit); break;
        case 5: bad = la_cli_parse_i32(optarg, "--max-docs", &max_docs); break;
        case 6: bad = la_cli_parse_i32(optarg, "--max-tokens", &max_tokens); break;
        case 7: json_out = optarg; break;
        case 11: bad = la_cli_parse_i32(optarg, "--concurrency", &concurrency); break;
        case 12: bad = la_cli_parse_i64(optarg, "--seed", &seed); break;
        case 13: raw = true; break;
        case 14: margins = true; break;
        case 'h': usage(stdout); return LA_EXIT_OK;
        default: bad = 1;
        }
        if (bad) {
            usage(stderr);
            return LA_EXIT_USAGE;
        }
    }
    const char *bad_arg = optind < argc ? "unexpected argument"
                          : !dataset        ? "--dataset FILE is required"
                          : orders < 1      ? "--orders must be >= 1"
                          : concurrency < 1 ? "--concurrency must be >= 1"
                          : max_tokens < 1  ? "--max-tokens must be >= 1"
                          : limit < 0       ? "--limit must be >= 0 (0: every question)"
                          : eo.n_threads < 0 ? "--threads must be >= 0 (0: all cores)"
                          : json_out && !*json_out ? "--json needs a file path"
                          : raw && eo.chat_template_file ? "give either --chat-template FILE or --raw"
                                            : NULL;
    if (bad_arg) {
        fprintf(stderr, "lazyattn eval: %s%s%s\n", bad_arg, optind < argc ? " " : "",
                optind < argc ? argv[optind] : "");
        usage(stderr);
        return LA_EXIT_USAGE;
    }
    if (la_cli_store_flags_check(&eo, "eval")) return LA_EXIT_USAGE;
    if (json_out && la_output_path_check(json_out) != 0) { /* now, not after the whole run */
        fprintf(stderr, "lazyattn eval: --json %s: cannot write there (%s)\n", json_out, strerror(errno));
        return LA_EXIT_ERROR;
    }
    la_method_spec methods[LA_BENCH_MAX_METHODS];
    int32_t n_methods = 0;
    {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", methods_arg);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (n_methods == LA_BENCH_MAX_METHODS) {
                fprintf(stderr, "lazyattn eval: --methods: at most %d methods\n", LA_BENCH_MAX_METHODS);
                return LA_EXIT_USAGE;
            }
            if (la_method_spec_parse(t, &methods[n_methods], &err) != LA_OK) {
                fprintf(stderr, "lazyattn eval: --methods: %s\n", err.msg);
                return LA_EXIT_USAGE;
            }
            for (int32_t i = 0; i < n_methods; i++)
                if (!strcmp(methods[i].name, t)) {
                    fprintf(stderr, "lazyattn eval: --methods: '%s' is listed twice\n", t);
                    return LA_EXIT_USAGE;
                }
            n_methods++;
        }
        if (n_methods == 0) {
            fprintf(stderr, "lazyattn eval: --methods lists no method\n");
            return LA_EXIT_USAGE;
        }
    }
    la_rag_dataset ds;
    if (la_rag_dataset_load(dataset, limit, max_docs, &ds, &err) != LA_OK) {
        fprintf(stderr, "lazyattn eval: %s\n", err.msg);
        return LA_EXIT_ERROR;
    }
    if (ds.n_empty_docs)
        fprintf(stderr, "lazyattn eval: %s: %d documents with no text left out\n", dataset, ds.n_empty_docs);
    eo.max_running = concurrency;
    eo.max_queue = concurrency > 256 ? concurrency : 256;
    la_engine *e = NULL;
    la_status cs = la_engine_create(&eo, &e, &err);
    if (cs != LA_OK) {
        fprintf(stderr, "lazyattn eval: %s\n", err.msg);
        la_rag_dataset_free(&ds);
        return LA_EXIT_FOR(cs);
    }
    la_eval ev = {.ds = &ds, .n_methods = n_methods, .orders = orders, .max_tokens = max_tokens,
                  .concurrency = concurrency, .seed = (uint64_t)seed, .raw = raw,
                  .margins = margins};
    memcpy(ev.methods, methods, sizeof methods);
    la_cli_progress prog;
    la_cli_progress_init(&prog, 0);
    prog.done = -1;
    la_eval_hooks hooks = {.progress = on_progress, .failed = on_failed, .user = &prog};
    la_status rs = la_eval_run(&ev, e, &hooks, &err);
    int rc = LA_EXIT_OK;
    if (rs == LA_ERR_NO_MEMORY) fprintf(stderr, "lazyattn eval: %s\n", err.msg);
    if (rs != LA_OK) rc = LA_EXIT_ERROR; /* a failed request: on_failed said why */
    if (rc == LA_EXIT_OK) {
        printf("%-14s %8s %8s %8s %10s %10s %9s %9s %10s", "method", "EM", "EM-1hop", "EM-2hop",
               "same-as-1st", "orders-same", "ttft-cold", "ttft-warm", "recomputed");
        if (orders > 1) printf(" %8s %12s", "EM-all", "same-all");
        if (margins) printf(" %8s %10s %10s", "diverged", "margin@div", "runner-up");
        printf("\n");
        int32_t nq = ds.n;
        for (int32_t m = 0; m < n_methods; m++) {
            la_eval_score sc;
            la_eval_score_method(&ev, m, &sc);
            printf("%-14s %7.1f%% ", methods[m].name, sc.em_pct);
            if (sc.em_1hop_pct >= 0) printf("%7.1f%% ", sc.em_1hop_pct); else printf("%8s ", "-");
            if (sc.em_2hop_pct >= 0) printf("%7.1f%% ", sc.em_2hop_pct); else printf("%8s ", "-");
            printf("%9.1f%% ", 100.0 * sc.same_as_first / nq);
            if (orders > 1) printf("%9.1f%% ", 100.0 * sc.same_across_orders / nq); else printf("%10s ", "-");
            printf("%9.2f ", sc.mean_ttft_cold_ms);
            if (orders > 1) printf("%9.2f ", sc.mean_ttft_warm_ms); else printf("%9s ", "-");
            printf("%10lld", (long long)sc.doc_tokens_recomputed);
            if (orders > 1)
                printf(" %7.1f%% %11.1f%%", sc.em_all_orders_pct,
                       100.0 * (double)sc.same_as_first_all_orders / ((double)nq * orders));
            if (margins && m > 0) {
                printf(" %8lld ", (long long)sc.n_diverged);
                if (sc.ref_margin_at_divergence_median >= 0) printf("%10.4f ", sc.ref_margin_at_divergence_median);
                else printf("%10s ", "-");
                printf("%10lld", (long long)sc.n_diverged_runner_up);
            }
            printf("\n");
        }
        if (margins) {
            double med, p5;
            la_eval_reference_margins(&ev, &med, &p5);
            printf("margins (nats, greedy token minus runner-up) of %s over all its tokens: median %.4f, "
                   "5th percentile %.4f\n",
                   methods[0].name, med, p5);
        }
        if (json_out) {
            cJSON *root = la_eval_json(&ev, dataset, la_engine_model_name(e), la_engine_device_name(e), argc + 1,
                                       argv - 1);
            if (la_json_write_file(json_out, root) != 0) {
                fprintf(stderr, "lazyattn eval: --json %s: cannot write the file (%s)\n", json_out,
                        strerror(errno));
                rc = LA_EXIT_ERROR;
            } else {
                fprintf(stderr, "lazyattn eval: wrote %s\n", json_out);
            }
            cJSON_Delete(root);
        }
    }
    la_eval_fini(&ev);
    la_engine_destroy(e);
    la_rag_dataset_free(&ds);
    return rc;
}
