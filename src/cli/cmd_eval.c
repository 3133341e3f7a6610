/* lazyattn eval: answer a RAG question set with one or more methods and score it.
 *
 *   lazyattn eval [-m DIR] --dataset FILE [--methods lazy,mepic,block,block-ref,recompute]
 *                 [--orders K] [--limit N] [--max-docs N] [--max-tokens N] [--json OUT]
 *                 [--device D] [--threads N] [--kv-blocks N] [--concurrency N] [--seed S]
 *
 * Each question is asked as a chat turn with its documents (the RAG template of
 * model/prompt_template.h), greedy. Reports exact match (normalised containment, as in
 * Block-Attention's evaluation) overall and by hops, agreement of every method with the
 * first one, and for --orders K > 1 the share of questions whose answer is the same under K
 * different document orders (order 0 is the file's; the others are seeded shuffles).
 * stdout: a table; stderr: a progress bar; --json: every number plus per-question answers.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/timer.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/machine.h"
#include "cli/rag_dataset.h"
#include "lazyattn/lazyattn.h"

typedef struct answer_slot {
    char *text;
    size_t len;
    int done;
    int failed;
    la_request_stats stats;
} answer_slot;

static void on_event(void *user, const la_event *ev) {
    answer_slot *a = user;
    if (ev->text_len) {
        char *p = realloc(a->text, a->len + ev->text_len + 1);
        if (p) {
            a->text = p;
            memcpy(a->text + a->len, ev->text, ev->text_len);
            a->len += ev->text_len;
            a->text[a->len] = '\0';
        }
    }
    if (ev->kind == LA_EVENT_DONE) {
        a->done = 1;
        a->failed = ev->finish == LA_FINISH_ERROR;
        a->stats = *ev->stats;
        if (a->failed) fprintf(stderr, "\nlazyattn eval: request failed: %s\n", ev->error);
    }
}

static void progress(int64_t done, int64_t total, double t0) {
    static int64_t last = -1; /* print each count once; off a terminal, every 50 answers */
    if (done == last) return;
    if (!isatty(fileno(stderr)) && done != total && last >= 0 && done / 50 == last / 50) return;
    last = done;
    int width = 30, filled = total ? (int)(width * done / total) : width;
    double el = (la_now_ms() - t0) / 1000.0;
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld  %.1fs", filled, "##############################",
            width - filled, "", (long long)done, (long long)total, el);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* Permutation k of n documents (k = 0: identity). */
static void order_of(int32_t n, int32_t k, uint64_t seed, int32_t *perm) {
    for (int32_t i = 0; i < n; i++) perm[i] = i;
    if (k == 0) return;
    uint64_t x = seed * 1000003ull + (uint64_t)k;
    for (int32_t i = n - 1; i > 0; i--) {
        /* splitmix64 step */
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        int32_t j = (int32_t)(z % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: lazyattn eval [-m DIR] --dataset FILE [--methods LIST] [--orders K] [--limit N]\n"
               "                     [--max-docs N] [--max-tokens N] [--json OUT] [--device D]\n"
               "                     [--threads N] [--kv-blocks N] [--concurrency N] [--seed S]\n"
               "                     [--gpu-memory-fraction F]\n"
               "  --methods LIST   comma-separated methods to answer with (lazy); the first is the\n"
               "                   reference of the same-as-1st column\n"
               "  --orders K       answer each question with its documents in K orders: the file's,\n"
               "                   then K - 1 seeded shuffles (--seed, 1); orders-same: the share of\n"
               "                   questions answered the same in all K (1)\n"
               "  --limit N        first N questions (0: all)\n"
               "  --max-docs N     at most N documents per question (0: all)\n"
               "  --max-tokens N   new tokens per answer (32)\n"
               "  --concurrency N  questions in flight (64)\n"
               "  --device D       cpu (default) or cuda\n"
               "  ttft_ms is not a benchmark: it includes the queueing --concurrency causes, and the\n"
               "  methods share one engine and its document cache, so whichever method sees a\n"
               "  document first pays for encoding it (timings: lazyattn bench)\n");
}

int la_cli_eval(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"dataset", required_argument, 0, 1},
        {"methods", required_argument, 0, 2},      {"method", required_argument, 0, 2},
        {"orders", required_argument, 0, 3},       {"limit", required_argument, 0, 4},
        {"max-docs", required_argument, 0, 5},     {"max-tokens", required_argument, 0, 6},
        {"json", required_argument, 0, 7},         {"device", required_argument, 0, 8},
        {"threads", required_argument, 0, 9},      {"kv-blocks", required_argument, 0, 10},
        {"concurrency", required_argument, 0, 11}, {"seed", required_argument, 0, 12},
        {"gpu-memory-fraction", required_argument, 0, 13},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    la_engine_options eo;
    la_engine_options_init(&eo);
    eo.model_dir = la_cli_default_model_dir();
    const char *dataset = NULL, *json_out = NULL, *methods_arg = "lazy";
    int32_t orders = 1, limit = 0, max_docs = 0, max_tokens = 32, concurrency = 64;
    int64_t seed = 1;
    la_err err = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'm': eo.model_dir = optarg; break;
        case 1: dataset = optarg; break;
        case 2: methods_arg = optarg; break;
        case 3: bad = la_cli_parse_i32(optarg, "--orders", &orders); break;
        case 4: bad = la_cli_parse_i32(optarg, "--limit", &limit); break;
        case 5: bad = la_cli_parse_i32(optarg, "--max-docs", &max_docs); break;
        case 6: bad = la_cli_parse_i32(optarg, "--max-tokens", &max_tokens); break;
        case 7: json_out = optarg; break;
        case 8:
            if (la_device_parse(optarg, &eo.device, &err) != LA_OK) {
                fprintf(stderr, "lazyattn eval: %s\n", err.msg);
                bad = 1;
            }
            break;
        case 9: bad = la_cli_parse_i32(optarg, "--threads", &eo.n_threads); break;
        case 10: bad = la_cli_parse_i64(optarg, "--kv-blocks", &eo.kv_blocks); break;
        case 13: {
            float f = 0;
            bad = la_cli_parse_f32(optarg, "--gpu-memory-fraction", &f);
            eo.gpu_memory_fraction = f;
            break;
        }
        case 11: bad = la_cli_parse_i32(optarg, "--concurrency", &concurrency); break;
        case 12: bad = la_cli_parse_i64(optarg, "--seed", &seed); break;
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
                                            : NULL;
    if (bad_arg) {
        fprintf(stderr, "lazyattn eval: %s%s%s\n", bad_arg, optind < argc ? " " : "",
                optind < argc ? argv[optind] : "");
        usage(stderr);
        return LA_EXIT_USAGE;
    }
    if (json_out && la_output_path_check(json_out) != 0) { /* now, not after the whole run */
        fprintf(stderr, "lazyattn eval: --json %s: cannot write there (%s)\n", json_out, strerror(errno));
        return LA_EXIT_ERROR;
    }
    la_method methods[LA_METHOD_COUNT];
    int32_t n_methods = 0;
    {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", methods_arg);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (n_methods == LA_METHOD_COUNT || la_method_parse(t, &methods[n_methods], &err) != LA_OK) {
                fprintf(stderr, "lazyattn eval: --methods: %s\n", err.msg);
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
    eo.max_running = concurrency;
    eo.max_queue = concurrency > 256 ? concurrency : 256;
    la_engine *e = NULL;
    la_status cs = la_engine_create(&eo, &e, &err);
    if (cs != LA_OK) {
        fprintf(stderr, "lazyattn eval: %s\n", err.msg);
        la_rag_dataset_free(&ds);
        return LA_EXIT_FOR(cs);
    }
    int32_t nq = ds.n;
    /* answers[(m * orders + o) * nq + q] */
    size_t n_slots = (size_t)n_methods * (size_t)orders * (size_t)nq;
    answer_slot *ans = calloc(n_slots, sizeof(answer_slot));
    int rc = LA_EXIT_OK;
    double t0 = la_now_ms();
    int64_t done = 0, total = (int64_t)n_slots;
    double *ttft = calloc(n_slots, sizeof(double));
    for (int32_t m = 0; m < n_methods && rc == LA_EXIT_OK; m++)
        for (int32_t o = 0; o < orders && rc == LA_EXIT_OK; o++)
            for (int32_t q0 = 0; q0 < nq && rc == LA_EXIT_OK; q0 += concurrency) {
                int32_t q1 = q0 + concurrency < nq ? q0 + concurrency : nq;
                for (int32_t q = q0; q < q1; q++) {
                    la_rag_question *Q = &ds.q[q];
                    int32_t *perm = malloc(sizeof(int32_t) * (size_t)(Q->n_docs + 1));
                    la_segment *docs = calloc((size_t)(Q->n_docs + 1), sizeof(la_segment));
                    order_of(Q->n_docs, o, (uint64_t)seed + (uint64_t)q, perm);
                    for (int32_t d = 0; d < Q->n_docs; d++)
                        docs[d] = (la_segment){.text = Q->docs[perm[d]].text, .title = Q->docs[perm[d]].title};
                    la_chat_message msg = {"user", Q->question};
                    la_request_params rp;
                    la_request_params_init(&rp);
                    rp.messages = &msg;
                    rp.n_messages = 1;
                    rp.docs = docs;
                    rp.n_docs = Q->n_docs;
                    rp.method = methods[m];
                    rp.sampling.max_tokens = max_tokens;
                    rp.on_event = on_event;
                    rp.user = &ans[((size_t)m * orders + o) * nq + q];
                    if (la_engine_submit(e, &rp, NULL, &err) != LA_OK) {
                        fprintf(stderr, "\nlazyattn eval: question %d: %s\n", q, err.msg);
                        rc = LA_EXIT_ERROR;
                    }
                    free(perm);
                    free(docs);
                    if (rc != LA_EXIT_OK) break;
                }
                while (la_engine_has_work(e)) {
                    la_engine_step(e, &err);
                    int64_t now_done = 0;
                    for (int32_t q = q0; q < q1; q++) now_done += ans[((size_t)m * orders + o) * nq + q].done;
                    if (now_done + done > done) progress(done + now_done, total, t0);
                }
                for (int32_t q = q0; q < q1; q++) {
                    answer_slot *a = &ans[((size_t)m * orders + o) * nq + q];
                    if (a->failed) rc = LA_EXIT_ERROR;
                    ttft[((size_t)m * orders + o) * nq + q] = a->stats.ttft_ms;
                }
                done += q1 - q0;
                progress(done, total, t0);
            }
    if (rc == LA_EXIT_OK) {
        /* ---- scoring -------------------------------------------------------------- */
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "dataset", dataset);
        cJSON_AddStringToObject(root, "format", ds.format);
        cJSON_AddStringToObject(root, "model", la_engine_model_name(e));
        cJSON_AddStringToObject(root, "device", la_engine_device_name(e));
        cJSON_AddNumberToObject(root, "questions", nq);
        cJSON_AddNumberToObject(root, "orders", orders);
        char *cmd = la_command_line(argc + 1, argv - 1);
        cJSON_AddStringToObject(root, "command", cmd ? cmd : "");
        free(cmd);
        cJSON_AddItemToObject(root, "machine", la_machine_json());
        cJSON *jm = cJSON_AddArrayToObject(root, "methods");
        printf("%-10s %8s %8s %8s %10s %10s %9s\n", "method", "EM", "EM-1hop", "EM-2hop",
               "same-as-1st", "orders-same", "ttft_ms");
        for (int32_t m = 0; m < n_methods; m++) {
            int64_t em = 0, n1 = 0, em1 = 0, n2 = 0, em2 = 0, agree = 0, stable = 0;
            double tt = 0;
            for (int32_t q = 0; q < nq; q++) {
                la_rag_question *Q = &ds.q[q];
                answer_slot *a = &ans[((size_t)m * orders) * nq + q];
                const char *text = a->text ? a->text : "";
                int hit = la_rag_answer_matches(text, Q->answers, Q->n_answers);
                em += hit;
                if (Q->hops == 1) n1++, em1 += hit;
                if (Q->hops == 2) n2++, em2 += hit;
                const char *first = ans[q].text ? ans[q].text : "";
                agree += strcmp(first, text) == 0;
                int same = 1;
                for (int32_t o = 1; o < orders; o++) {
                    const char *t2 = ans[((size_t)m * orders + o) * nq + q].text;
                    same &= strcmp(t2 ? t2 : "", text) == 0;
                }
                stable += same;
                tt += ttft[((size_t)m * orders) * nq + q];
            }
            double pem = 100.0 * em / nq, p1 = n1 ? 100.0 * em1 / n1 : -1, p2 = n2 ? 100.0 * em2 / n2 : -1;
            printf("%-10s %7.1f%% ", la_method_name(methods[m]), pem);
            if (p1 >= 0) printf("%7.1f%% ", p1); else printf("%8s ", "-");
            if (p2 >= 0) printf("%7.1f%% ", p2); else printf("%8s ", "-");
            printf("%9.1f%% ", 100.0 * agree / nq);
            if (orders > 1) printf("%9.1f%% ", 100.0 * stable / nq); else printf("%10s ", "-");
            printf("%9.2f\n", tt / nq);
            cJSON *jo = cJSON_CreateObject();
            cJSON_AddStringToObject(jo, "method", la_method_name(methods[m]));
            cJSON_AddNumberToObject(jo, "exact_match", pem / 100);
            if (n1) cJSON_AddNumberToObject(jo, "exact_match_1hop", p1 / 100); /* null: no such question */
            else cJSON_AddNullToObject(jo, "exact_match_1hop");
            cJSON_AddNumberToObject(jo, "n_1hop", (double)n1);
            if (n2) cJSON_AddNumberToObject(jo, "exact_match_2hop", p2 / 100);
            else cJSON_AddNullToObject(jo, "exact_match_2hop");
            cJSON_AddNumberToObject(jo, "n_2hop", (double)n2);
            cJSON_AddNumberToObject(jo, "same_answer_as_first_method", (double)agree / nq);
            if (orders > 1) cJSON_AddNumberToObject(jo, "same_answer_across_orders", (double)stable / nq);
            else cJSON_AddNullToObject(jo, "same_answer_across_orders"); /* one order: nothing to compare */
            cJSON_AddNumberToObject(jo, "mean_ttft_ms", tt / nq);
            cJSON *per = cJSON_AddArrayToObject(jo, "answers");
            for (int32_t q = 0; q < nq; q++) {
                answer_slot *a = &ans[((size_t)m * orders) * nq + q];
                cJSON_AddItemToArray(per, cJSON_CreateString(a->text ? a->text : ""));
            }
            cJSON_AddItemToArray(jm, jo);
        }
        if (json_out && la_json_write_file(json_out, root) != 0) {
            fprintf(stderr, "lazyattn eval: --json %s: cannot write the file (%s)\n", json_out, strerror(errno));
            rc = LA_EXIT_ERROR;
        }
        cJSON_Delete(root);
    }
    for (size_t i = 0; i < n_slots; i++) free(ans[i].text);
    free(ans);
    free(ttft);
    la_engine_destroy(e);
    la_rag_dataset_free(&ds);
    return rc;
}
