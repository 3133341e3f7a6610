/* lazyattn run: one completion, streamed to stdout (DESIGN.md §7b).
 *
 *   lazyattn run [-m DIR] [--device cpu|cuda] [--method M] [[--title T] --doc TEXT]...
 *                [[--title T] --doc-file F]... [--raw [--preamble TEXT]] [--chat-template FILE]
 *                [--salt S] -p PROMPT
 *                [-n N] [--temperature T] [--top-p P]
 *                [--top-k K] [--seed S] [--stop S]... [--ignore-eos] [--no-special]
 *                [--warm] [--stats] [--threads N] [--kv-blocks N] [--block-size B]
 *                [--host-kv-gib N] [--kv-dir DIR] [--kv-dir-gib N] [--kv-write through|evict]
 *                [--kv-secret-file F] [--kv-store URL] [--kv-io-timeout-ms N]
 *
 * By default the question and the documents go through the model's chat template (README
 * "Chat templates and documents"), or the one of --chat-template FILE, as `serve` renders a
 * chat request. --raw sends the preamble, the documents and the prompt as text blocks
 * verbatim.
 * stdout: the completion text only. --stats: one JSON line on stderr (with a store: its
 * tiers' numbers under "store", bench/store_stats.h, after its writes are flushed).
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "bench/store_stats.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "lazyattn/lazyattn.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: lazyattn run [-m DIR] -p PROMPT [options]\n"
            "  -m, --model DIR        model directory (default: the bundled model)\n"
            "  -p, --prompt TEXT      the question (a user message of the model's chat template,\n"
            "                         the documents cut into it as blocks of their own)\n"
            "      --chat-template FILE  a Jinja chat template instead of the model's\n"
            "      --doc TEXT         a document (repeatable; each is cached on its own)\n"
            "      --doc-file FILE    a document read from FILE (repeatable)\n"
            "      --title T          title of the next --doc / --doc-file (\"- Title: T\" block);\n"
            "                         an untitled document is used verbatim\n"
            "      --raw              no template: the preamble, documents and prompt are text\n"
            "                         blocks used verbatim\n"
            "      --preamble TEXT    with --raw: document 0 (e.g. a system block)\n"
            "      --method M         recompute | prefix | block | mepic | lazy | block-ref (lazy)\n"
            "      --salt S           cache salt (tenant id)\n"
            "      --recompute-first N  recovery: recompute each later document's first N tokens\n"
            "                         in context (lazy, block, mepic, block-ref; 0: off)\n"
            "      --recompute-ratio R  selected recovery: also recompute the fraction R of the\n"
            "                         later documents' tokens whose layer-1 values change most\n"
            "                         in context (a probe of layers 0-1 picks them; 0: off)\n"
            "      --doc-context C    alone | preamble: documents after the first are computed\n"
            "                         alone (default) or after document 0, the preamble (lazy,\n"
            "                         block, mepic; cached per preamble)\n"
            "  -n, --max-tokens N     tokens to generate (64)\n"
            "      --temperature T    0 = greedy (default)\n"
            "      --top-p P, --top-k K, --seed S, --stop STR (repeatable), --ignore-eos\n"
            "      --no-special       do not add BOS\n"
            "      --warm             first run the documents in reverse order (output discarded)\n"
            "                         so this request finds them cached\n"
            "      --stats            print one JSON line of reuse and timing stats on stderr\n"
            "      --device D         cpu | cuda (cpu)\n"
            "      --threads N, --kv-blocks N, --block-size B, --gpu-memory-fraction F\n"
            LA_CLI_CPU_WEIGHTS_USAGE
            "document KV store (README \"Document KV store\"):\n" LA_CLI_STORE_USAGE);
}

typedef struct run_out {
    bool print;
    la_request_stats stats;
    la_finish_reason finish;
    la_status status;
    char error[LA_ERR_MSG_LEN];
} run_out;

static void on_event(void *user, const la_event *ev) {
    run_out *o = user;
    if (o->print && ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
    }
    if (ev->kind == LA_EVENT_DONE) {
        o->stats = *ev->stats;
        o->finish = ev->finish;
        o->status = ev->status;
        snprintf(o->error, sizeof o->error, "%s", ev->error ? ev->error : "");
    }
}

/* Append a document and the --title given before it (NULL: untitled); the title is used up. */
static void add_doc(la_cli_strings *docs, la_cli_strings *titles, char *text, const char **title) {
    la_cli_strings_push(docs, text);
    la_cli_strings_push(titles, (char *)*title);
    *title = NULL;
}

int la_cli_run(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, LA_CLI_OPT_MODEL},  {"prompt", required_argument, 0, 'p'},
        {"max-tokens", required_argument, 0, 'n'},          {"doc", required_argument, 0, 1},
        {"doc-file", required_argument, 0, 2},              {"preamble", required_argument, 0, 3},
        {"method", required_argument, 0, 4},                {"salt", required_argument, 0, 5},
        {"temperature", required_argument, 0, 6},           {"top-p", required_argument, 0, 7},
        {"top-k", required_argument, 0, 8},                 {"seed", required_argument, 0, 9},
        {"stop", required_argument, 0, 10},                 {"ignore-eos", no_argument, 0, 11},
        {"no-special", no_argument, 0, 12},                 {"warm", no_argument, 0, 13},
        {"stats", no_argument, 0, 14},
        {"device", required_argument, 0, LA_CLI_OPT_DEVICE},
        {"threads", required_argument, 0, LA_CLI_OPT_THREADS},
        {"cpu-weights", required_argument, 0, LA_CLI_OPT_CPU_WEIGHTS},
        {"cpu-kv", required_argument, 0, LA_CLI_OPT_CPU_KV},
        {"kv-blocks", required_argument, 0, LA_CLI_OPT_KV_BLOCKS},
        {"gpu-memory-fraction", required_argument, 0, LA_CLI_OPT_GPU_MEMORY_FRACTION},
        {"title", required_argument, 0, 41},                {"raw", no_argument, 0, 42},
        {"block-size", required_argument, 0, LA_CLI_OPT_BLOCK_SIZE},
        LA_CLI_STORE_OPTIONS,
        {"chat-template", required_argument, 0, LA_CLI_OPT_CHAT_TEMPLATE},
        {"recompute-first", required_argument, 0, LA_CLI_OPT_RECOMPUTE_FIRST},
        {"recompute-ratio", required_argument, 0, LA_CLI_OPT_RECOMPUTE_RATIO},
        {"doc-context", required_argument, 0, LA_CLI_OPT_DOC_CONTEXT},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    la_engine_options eo;
    la_cli_engine_options_init(&eo);
    la_request_params rp;
    la_request_params_init(&rp);
    rp.sampling.max_tokens = 64;
    la_cli_strings docs = {0}, titles = {0}, stops = {0}, owned = {0};
    const char *prompt = NULL, *preamble = NULL, *title = NULL;
    bool warm = false, stats = false, raw = false;
    int rc = LA_EXIT_USAGE, c;
    la_err err = {0};
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:h", opts, NULL)) != -1) {
        la_cli_flag ef = la_cli_engine_flag_reported(c, optarg, &eo, "run");
        if (ef == LA_CLI_FLAG_SET) continue;
        if (ef != LA_CLI_FLAG_OTHER) goto out; /* rc is LA_EXIT_USAGE here */
        switch (c) {
        case 'p': prompt = optarg; break;
        case 'n':
            if (la_cli_parse_i32(optarg, "--max-tokens", &rp.sampling.max_tokens) != 0) goto out;
            break;
        case 1: add_doc(&docs, &titles, optarg, &title); break;
        case 41:
            if (title) { /* rc is LA_EXIT_USAGE here */
                fprintf(stderr, "lazyattn run: --title '%s' follows --title '%s', which names no document "
                                "(each --title names the next --doc or --doc-file)\n", optarg, title);
                goto out;
            }
            title = optarg;
            break;
        case 42: raw = true; break;
        case 2: {
            char *text = NULL;
            if (la_file_read(optarg, &text, NULL, &err) != LA_OK) {
                fprintf(stderr, "lazyattn run: --doc-file %s\n", err.msg);
                rc = LA_EXIT_ERROR;
                goto out;
            }
            la_cli_strings_push(&owned, text);
            add_doc(&docs, &titles, text, &title);
            break;
        }
        case 3: preamble = optarg; break;
        case 4:
            if (la_method_parse(optarg, &rp.method, &err) != LA_OK) {
                fprintf(stderr, "lazyattn run: --method: %s\n", err.msg);
                goto out;
            }
            eo.method = rp.method;
            break;
        case 5: rp.cache_salt = optarg; break;
        case 6:
            if (la_cli_parse_f32(optarg, "--temperature", &rp.sampling.temperature) != 0) goto out;
            break;
        case 7:
            if (la_cli_parse_f32(optarg, "--top-p", &rp.sampling.top_p) != 0) goto out;
            break;
        case 8:
            if (la_cli_parse_i32(optarg, "--top-k", &rp.sampling.top_k) != 0) goto out;
            break;
        case 9: {
            int64_t seed;
            if (la_cli_parse_i64(optarg, "--seed", &seed) != 0) goto out;
            rp.sampling.seed = (uint64_t)seed;
            break;
        }
        case 10: la_cli_strings_push(&stops, optarg); break;
        case 11: rp.sampling.ignore_eos = true; break;
        case 12: rp.add_special = false; break;
        case 13: warm = true; break;
        case 14: stats = true; break;
        case 'h':
            usage(stdout);
            rc = LA_EXIT_OK;
            goto out;
        default: usage(stderr); goto out;
        }
    }
    if (!prompt || optind < argc) {
        fprintf(stderr, optind < argc ? "lazyattn run: unexpected argument '%s'\n"
                                      : "lazyattn run: -p PROMPT is required%s\n",
                optind < argc ? argv[optind] : "");
        usage(stderr);
        goto out;
    }
    if (la_cli_store_flags_check(&eo, "run")) goto out;
    if (title || (preamble && !raw)) {
        fprintf(stderr, title ? "lazyattn run: --title must come before the --doc or --doc-file it names\n"
                              : "lazyattn run: --preamble needs --raw (the chat template writes its own)\n");
        usage(stderr);
        goto out;
    }
    rc = LA_EXIT_ERROR;
    /* one request: the flag is its own (so --method prefix with it is refused, not ignored) */
    rp.recompute_first = eo.recompute_first > 0 ? eo.recompute_first : -1;
    rp.recompute_ratio = eo.recompute_ratio > 0.0f ? eo.recompute_ratio : -1.0f;
    if (eo.doc_context == LA_DOC_CONTEXT_PREAMBLE) rp.doc_context = LA_DOC_CONTEXT_PREAMBLE;
    la_engine *e = NULL;
    la_status cs = la_engine_create(&eo, &e, &err);
    if (cs != LA_OK) {
        fprintf(stderr, "lazyattn run: %s\n", err.msg);
        rc = LA_EXIT_FOR(cs);
        goto out;
    }
    la_segment *segs = calloc((size_t)(docs.n ? docs.n : 1), sizeof(la_segment));
    for (int i = 0; i < docs.n; i++) segs[i].text = docs.items[i], segs[i].title = titles.items[i];
    la_chat_message question = {"user", prompt};
    if (raw) {
        rp.prompt.text = prompt;
        rp.preamble.text = preamble;
    } else {
        rp.messages = &question;
        rp.n_messages = 1;
    }
    rp.docs = segs;
    rp.n_docs = docs.n;
    rp.sampling.stop = (const char *const *)stops.items;
    rp.sampling.n_stop = stops.n;
    rp.on_event = on_event;
    run_out o = {0};
    rp.user = &o;
    if (warm && docs.n > 0) { /* same documents, reversed: warms the cache, prints nothing */
        la_segment *rev = calloc((size_t)docs.n, sizeof(la_segment));
        for (int i = 0; i < docs.n; i++) rev[i] = segs[docs.n - 1 - i];
        la_request_params wp = rp;
        wp.docs = rev;
        wp.sampling.max_tokens = 1;
        if (la_engine_submit(e, &wp, NULL, &err) == LA_OK) la_engine_run(e, &err);
        free(rev);
    }
    o.print = true;
    la_status ss = la_engine_submit(e, &rp, NULL, &err);
    if (ss != LA_OK) {
        fprintf(stderr, "lazyattn run: %s\n", err.msg);
        rc = LA_EXIT_FOR(ss);
    } else {
        la_engine_run(e, &err);
        if (o.finish == LA_FINISH_ERROR) {
            fprintf(stderr, "lazyattn run: %s\n", o.error);
        } else {
            rc = LA_EXIT_OK;
            if (isatty(fileno(stdout))) fputc('\n', stdout);
            if (stats) {
                cJSON *j = cJSON_CreateObject();
                const la_method m = rp.method == LA_METHOD_COUNT ? eo.method : rp.method;
                cJSON_AddStringToObject(j, "method", la_method_name(m));
                if (la_method_caches_docs(m))
                    cJSON_AddStringToObject(j, "doc_context", la_doc_context_name(eo.doc_context));
                cJSON_AddNumberToObject(j, "prompt_tokens", o.stats.n_prompt_tokens);
                cJSON_AddNumberToObject(j, "doc_tokens", o.stats.n_doc_tokens);
                cJSON_AddNumberToObject(j, "doc_tokens_reused", (double)o.stats.doc_tokens_reused);
                cJSON_AddNumberToObject(j, "doc_tokens_computed", (double)o.stats.doc_tokens_computed);
                cJSON_AddNumberToObject(j, "prefix_tokens_reused", (double)o.stats.prefix_tokens_reused);
                cJSON_AddNumberToObject(j, "doc_tokens_host", (double)o.stats.doc_tokens_host);
                cJSON_AddNumberToObject(j, "doc_tokens_disk", (double)o.stats.doc_tokens_disk);
                cJSON_AddNumberToObject(j, "doc_tokens_shared", (double)o.stats.doc_tokens_shared);
                cJSON_AddNumberToObject(j, "doc_tokens_recomputed", (double)o.stats.doc_tokens_recomputed);
                cJSON_AddNumberToObject(j, "doc_tokens_probed", (double)o.stats.doc_tokens_probed);
                cJSON_AddNumberToObject(j, "generated_tokens", o.stats.n_generated);
                cJSON_AddNumberToObject(j, "ttft_ms", o.stats.ttft_ms);
                cJSON_AddNumberToObject(j, "tpot_ms", o.stats.tpot_ms);
                cJSON_AddNumberToObject(j, "e2e_ms", o.stats.e2e_ms);
                cJSON_AddStringToObject(j, "finish", o.finish == LA_FINISH_STOP ? "stop" : "length");
                cJSON_AddStringToObject(j, "device", la_engine_device_name(e));
                la_engine_store_stats ss;
                la_engine_store_flush(e); /* the writes of this run, counted */
                la_engine_get_store_stats(e, &ss);
                if (la_bench_store_enabled(&ss)) {
                    la_engine_stats es;
                    la_engine_get_stats(e, &es);
                    cJSON_AddItemToObject(j, "store", la_bench_store_stats_json(&ss, &es));
                }
                char *line = cJSON_PrintUnformatted(j);
                fprintf(stderr, "%s\n", line);
                free(line);
                cJSON_Delete(j);
            }
        }
    }
    free(segs);
    la_engine_destroy(e);
out:
    for (int i = 0; i < owned.n; i++) free(owned.items[i]);
    la_cli_strings_free(&owned);
    la_cli_strings_free(&docs);
    la_cli_strings_free(&titles);
    la_cli_strings_free(&stops);
    return rc;
}
