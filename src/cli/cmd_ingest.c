/* lazyattn ingest: precompute a corpus into the document KV store's disk tier
 * (flags -> bench/ingest.h -> summary).
 *
 *   lazyattn ingest [-m DIR] --corpus FILE.jsonl --kv-dir DIR [--device D]
 *                   [--method lazy|block|mepic] [--salt S] [--batch N] [--json OUT]
 *                   [--threads N] [--kv-blocks N] [--block-size B] [--gpu-memory-fraction F]
 *                   [--host-kv-gib N] [--kv-dir-gib N] [--kv-secret-file F] [--kv-store URL]
 *                   [--kv-io-timeout-ms N]
 *
 * stderr: a progress bar with documents/s and tokens/s (on a terminal); stdout: the summary
 * (documents computed / skipped / failed, tokens, seconds, GB written, GB/s); --json: the
 * same numbers with the store's, the machine, model, commit and command. Exit status 1
 * when a document failed or a write did not reach the disk.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "bench/ingest.h"
#include "bench/machine.h"
#include "bench/store_stats.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "lazyattn/lazyattn.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: lazyattn ingest [-m DIR] --corpus FILE.jsonl --kv-dir DIR [options]\n"
            "  -m, --model DIR        model directory (default: the bundled model)\n"
            "      --corpus FILE      JSON Lines: per line a string or {\"title\", \"text\"}, rendered\n"
            "                         as a request's documents are\n"
            "      --kv-dir DIR       the disk tier to fill (required); documents already there\n"
            "                         are skipped, so a second run resumes the first\n"
            "      --method M         lazy | block | mepic (lazy): requests must use the same\n"
            "                         family (lazy and block share records; mepic has its own)\n"
            "      --salt S           cache salt: the records serve requests with this cache_salt\n"
            "      --batch N          documents in flight (16)\n"
            "      --json OUT         the summary, the store's numbers, machine and command\n"
            "      --device D         cpu | cuda (cpu)\n"
            "      --threads N, --kv-blocks N, --block-size B, --gpu-memory-fraction F\n"
            LA_CLI_CPU_WEIGHTS_USAGE
            "      --random-weights SHAPE --tokenizer DIR   random weights of a named shape (timing:\n"
            "                         what they compute means nothing) with a real tokenizer\n"
            "document KV store (README \"Document KV store\"; --kv-write through only):\n" LA_CLI_STORE_USAGE);
}

typedef struct bar {
    la_cli_progress p;
} bar;

static void on_progress(void *user, const la_ingest_counts *n) {
    bar *b = user;
    b->p.done = n->done;
    b->p.total = n->total;
    double s = n->elapsed_s > 0 ? n->elapsed_s : 1e-9;
    snprintf(b->p.extra, sizeof b->p.extra, "  %.1f docs/s  %.0f tok/s", (double)n->computed / s,
             (double)n->tokens / s);
    la_cli_progress_draw(&b->p, false);
}

int la_cli_ingest(int argc, char **argv) {
    enum { O_CORPUS = 1, O_METHOD, O_SALT, O_BATCH, O_JSON, O_RANDOM, O_TOKENIZER };
    static const struct option opts[] = {
        {"model", required_argument, 0, LA_CLI_OPT_MODEL},  {"corpus", required_argument, 0, O_CORPUS},
        {"method", required_argument, 0, O_METHOD},         {"salt", required_argument, 0, O_SALT},
        {"batch", required_argument, 0, O_BATCH},           {"json", required_argument, 0, O_JSON},
        {"device", required_argument, 0, LA_CLI_OPT_DEVICE},
        {"threads", required_argument, 0, LA_CLI_OPT_THREADS},
        {"cpu-weights", required_argument, 0, LA_CLI_OPT_CPU_WEIGHTS},
        {"cpu-kv", required_argument, 0, LA_CLI_OPT_CPU_KV},
        {"kv-blocks", required_argument, 0, LA_CLI_OPT_KV_BLOCKS},
        {"block-size", required_argument, 0, LA_CLI_OPT_BLOCK_SIZE},
        {"gpu-memory-fraction", required_argument, 0, LA_CLI_OPT_GPU_MEMORY_FRACTION},
        {"random-weights", required_argument, 0, O_RANDOM}, {"tokenizer", required_argument, 0, O_TOKENIZER},
        LA_CLI_STORE_OPTIONS,
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    la_engine_options eo;
    la_cli_engine_options_init(&eo);
    la_ingest_opts io;
    la_ingest_opts_init(&io);
    const char *json_out = NULL;
    la_err err = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        la_cli_flag ef = la_cli_engine_flag_reported(c, optarg, &eo, "ingest");
        if (ef == LA_CLI_FLAG_SET) continue;
        if (ef != LA_CLI_FLAG_OTHER) return LA_EXIT_USAGE;
        switch (c) {
        case O_CORPUS: io.corpus = optarg; break;
        case O_METHOD:
            if (la_method_parse(optarg, &io.method, &err) != LA_OK) {
                fprintf(stderr, "lazyattn ingest: --method: %s\n", err.msg);
                return LA_EXIT_USAGE;
            }
            break;
        case O_SALT: io.cache_salt = optarg; break;
        case O_BATCH:
            if (la_cli_parse_i32(optarg, "--batch", &io.batch) != 0) return LA_EXIT_USAGE;
            break;
        case O_JSON: json_out = optarg; break;
        case O_RANDOM: eo.random_weights = optarg; break;
        case O_TOKENIZER: eo.tokenizer_dir = optarg; break;
        case 'h': usage(stdout); return LA_EXIT_OK;
        default: usage(stderr); return LA_EXIT_USAGE;
        }
    }
    const char *bad = optind < argc ? "unexpected argument"
                      : !io.corpus  ? "--corpus FILE.jsonl is required"
                      : !eo.kv_dir  ? "--kv-dir DIR is required (the disk tier to fill)"
                      : !eo.kv_write_through ? "--kv-write evict does not apply: ingest writes every document through"
                      : io.batch < 1 ? "--batch must be >= 1"
                      : io.method != LA_METHOD_LAZY && io.method != LA_METHOD_BLOCK && io.method != LA_METHOD_MEPIC
                          ? "--method must be lazy, block or mepic (the methods that cache documents on their own)"
                      : json_out && !*json_out ? "--json needs a file path"
                      : eo.random_weights && !eo.tokenizer_dir ? "--random-weights needs --tokenizer DIR (the corpus is text)"
                                               : NULL;
    if (bad) {
        fprintf(stderr, "lazyattn ingest: %s%s%s\n", bad, optind < argc ? " " : "", optind < argc ? argv[optind] : "");
        return LA_EXIT_USAGE;
    }
    if (la_cli_store_flags_check(&eo, "ingest")) return LA_EXIT_USAGE;
    if (json_out && la_output_path_check(json_out) != 0) { /* now, not after the whole run */
        fprintf(stderr, "lazyattn ingest: --json %s: cannot write there (%s)\n", json_out, strerror(errno));
        return LA_EXIT_ERROR;
    }
    eo.method = io.method;
    if (eo.max_running < io.batch) eo.max_running = io.batch;
    if (eo.max_queue < io.batch) eo.max_queue = io.batch;
    la_engine *e = NULL;
    la_status cs = la_engine_create(&eo, &e, &err);
    if (cs != LA_OK) {
        fprintf(stderr, "lazyattn ingest: %s\n", err.msg);
        return LA_EXIT_FOR(cs);
    }
    bar b;
    la_cli_progress_init(&b.p, 0);
    la_ingest_summary sum;
    la_status s = la_ingest_run(e, &io, on_progress, &b, &sum, &err);
    if (sum.n.done) la_cli_progress_end(&b.p);
    int rc = LA_EXIT_OK;
    if (s != LA_OK) {
        fprintf(stderr, "lazyattn ingest: %s\n", err.msg);
        rc = s == LA_ERR_INVALID_ARG ? LA_EXIT_USAGE : LA_EXIT_ERROR;
    } else {
        printf("lazyattn ingest: %lld documents in %s: %lld computed, %lld skipped (stored already), %lld failed\n",
               (long long)sum.n.total, io.corpus, (long long)sum.n.computed, (long long)sum.n.skipped,
               (long long)sum.n.failed);
        if (sum.n.loaded)
            printf("  %lld loaded from the shared tier (not rewritten to disk)\n", (long long)sum.n.loaded);
        printf("  %lld tokens in %.2f s: %.1f documents/s, %.0f tokens/s\n", (long long)sum.n.tokens, sum.seconds,
               sum.documents_per_s, sum.tokens_per_s);
        printf("  %.4f GB written to %s in %lld records (%.3f GB/s end to end; the writes alone %.3f GB/s)\n",
               (double)sum.bytes_written / 1e9, eo.kv_dir, (long long)sum.writes, sum.gb_per_s,
               sum.disk_write_gb_per_s);
        if (sum.first_error[0]) fprintf(stderr, "lazyattn ingest: first failure: %s\n", sum.first_error);
        if (sum.write_failures)
            fprintf(stderr, "lazyattn ingest: %lld records could not be written (see the log above)\n",
                    (long long)sum.write_failures);
        if (sum.n.failed || sum.write_failures) rc = LA_EXIT_ERROR;
        if (json_out) {
            cJSON *root = cJSON_CreateObject();
            cJSON_AddStringToObject(root, "tool", "lazyattn ingest");
            char *cmd = la_command_line(argc + 1, argv - 1);
            cJSON_AddStringToObject(root, "command", cmd ? cmd : "");
            free(cmd);
            cJSON_AddItemToObject(root, "machine", la_machine_json());
            cJSON_AddStringToObject(root, "model", la_engine_model_name(e));
            cJSON_AddStringToObject(root, "device", la_engine_device_name(e));
            cJSON_AddStringToObject(root, "corpus", io.corpus);
            cJSON_AddStringToObject(root, "kv_dir", eo.kv_dir);
            cJSON_AddStringToObject(root, "method", la_method_name(io.method));
            cJSON_AddItemToObject(root, "summary", la_ingest_summary_json(&sum));
            la_engine_store_stats ss;
            la_engine_stats es;
            la_engine_get_store_stats(e, &ss);
            la_engine_get_stats(e, &es);
            cJSON_AddItemToObject(root, "store", la_bench_store_stats_json(&ss, &es));
            if (la_json_write_file(json_out, root) != 0) {
                fprintf(stderr, "lazyattn ingest: --json %s: cannot write the file (%s)\n", json_out, strerror(errno));
                rc = LA_EXIT_ERROR;
            } else {
                fprintf(stderr, "lazyattn ingest: wrote %s\n", json_out);
            }
            cJSON_Delete(root);
        }
    }
    la_engine_destroy(e);
    return rc;
}
