/* `lazyattn bench` (src/cli/cmd_bench.c over src/bench/session.c), run as the built binary on
 * the tiny fixture model: the JSON has every method with sane values, document reuse after the
 * warm-up is what each method promises (lazy, block, mepic: every document token; recompute:
 * none), the same over HTTP against `lazyattn serve`, sweeps, plots, and the exit statuses. No
 * timing assertions. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "base/file.h"
#include "common/test_util.h"
#include "server/serve_proc.h"

#define MODEL LA_SOURCE_DIR "/tests/fixtures/models/tiny-f32-tied"
/* a handful of short requests: 3 documents of ~40 tokens, all in the pool */
#define SMALL "-m '" MODEL "' --dataset synthetic --requests 4 --docs-per-request 3 --pool-docs 3 " \
              "--doc-tokens 40 --max-tokens 4 --threads 1"

typedef struct run_result {
    int status;
    char *out, *err;
    cJSON *json; /* --json output when the command wrote it */
} run_result;

static char *slurp(const char *path) {
    char *data = NULL;
    la_err e = {0};
    LA_CHECK_OK(la_file_read(path, &data, NULL, &e), e);
    return data;
}

/* Run `env lazyattn bench <args> --json <tmp>` (json: add --json). */
static run_result run(const char *env, const char *args, int json) {
    char *dir = la_test_tmpdir();
    char *out = la_path_join(dir, "out"), *err = la_path_join(dir, "err"), *js = la_path_join(dir, "b.json");
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "%s '%s/lazyattn' bench %s %s%s%s </dev/null >'%s' 2>'%s'", env, LA_BUILD_DIR,
                       args, json ? "--json '" : "", json ? js : "", json ? "'" : "", out, err) > 0);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s did not exit normally", cmd);
    run_result r = {WEXITSTATUS(st), slurp(out), slurp(err), NULL};
    if (json && la_file_exists(js)) {
        char *text = slurp(js);
        r.json = cJSON_Parse(text);
        free(text);
    }
    free(cmd), free(out), free(err), free(js);
    la_test_rm_tree(dir);
    return r;
}

static void run_free(run_result *r) {
    free(r->out);
    free(r->err);
    cJSON_Delete(r->json);
}

static const cJSON *method_of(const cJSON *methods, const char *name) {
    const cJSON *m;
    cJSON_ArrayForEach(m, methods) {
        const cJSON *n = cJSON_GetObjectItem(m, "method");
        if (cJSON_IsString(n) && !strcmp(n->valuestring, name)) return m;
    }
    cr_assert_fail("method %s missing from the JSON", name);
    return NULL;
}

static double num(const cJSON *o, const char *path) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    for (char *save = NULL, *t = strtok_r(buf, ".", &save); t; t = strtok_r(NULL, ".", &save))
        v = cJSON_GetObjectItem(v, t);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", path);
    return v->valuedouble;
}

/* Percentiles ordered, positive, and the distribution counted over every request. */
static void check_dist(const cJSON *m, const char *key, int n) {
    const cJSON *d = cJSON_GetObjectItem(m, key);
    cr_assert(d, "%s missing", key);
    double mean = num(d, "mean"), p50 = num(d, "p50"), p90 = num(d, "p90"), p99 = num(d, "p99");
    cr_assert(p50 > 0 && p50 <= p90 && p90 <= p99 && mean > 0, "%s: mean %g p50 %g p90 %g p99 %g", key, mean,
              p50, p90, p99);
    if (n) cr_assert_eq((int)num(d, "n"), n, "%s counted %g requests", key, num(d, "n"));
}

static const char *const k_methods[] = {"recompute", "prefix", "block", "mepic", "lazy"};

Test(cli_bench, json_has_every_method_with_sane_values) {
    run_result r = run("", SMALL, 1);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert(r.json, "no JSON written");
    for (const char *k = "command\0model\0machine\0warmup_policy\0definitions\0load\0workload\0"; *k;
         k += strlen(k) + 1)
        cr_assert(cJSON_GetObjectItem(r.json, k), "%s missing", k);
    cr_assert(strstr(cJSON_GetObjectItem(r.json, "command")->valuestring, "lazyattn bench"));
    cr_assert_str_eq(cJSON_GetObjectItem(r.json, "model")->valuestring, "tiny-f32-tied");
    cr_assert_str_eq(cJSON_GetObjectItem(r.json, "mode")->valuestring, "in-process");
    cr_assert_eq(num(r.json, "load.max_batch_tokens"), 1024); /* the engine's default budget */
    const cJSON *ms = cJSON_GetObjectItem(r.json, "methods");
    cr_assert_eq(cJSON_GetArraySize(ms), 5);
    for (int i = 0; i < 5; i++) {
        const cJSON *m = method_of(ms, k_methods[i]);
        cr_assert_eq((int)num(m, "requests_ok"), 4, "%s: %s", k_methods[i], r.err);
        check_dist(m, "ttft_ms", 4);
        check_dist(m, "e2e_ms", 4);
        check_dist(m, "tpot_ms", 4);
        check_dist(m, "itl_ms", 4 * 3); /* 4 tokens: 3 gaps each */
        cr_assert(num(m, "e2e_ms.p50") >= num(m, "ttft_ms.p50") * 0.999);
        cr_assert(num(m, "requests_per_s") > 0 && num(m, "output_tokens_per_s") > 0);
        cr_assert_eq(num(m, "mean_output_tokens"), 4);
        cr_assert(num(m, "mean_prompt_tokens") > num(m, "mean_doc_tokens") &&
                  num(m, "mean_doc_tokens") > 3 * 20);
        /* synthetic questions have no gold answers */
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(m, "exact_match")));
        /* where the engine's steps went: every measured step is counted, decode steps among them */
        cr_assert(num(m, "engine_steps.steps") >= 4 && num(m, "engine_steps.decode_steps") >= 1 &&
                      num(m, "engine_steps.decode_steps") < num(m, "engine_steps.steps"),
                  "%s: engine_steps", k_methods[i]);
        cr_assert(num(m, "engine_steps.ms_per_step.forward") > 0 &&
                  num(m, "engine_steps.decode_forward_ms_per_step") <= num(m, "engine_steps.decode_step_ms"));
        cr_assert_eq(
            cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "per_request"), "ttft_ms")), 4);
    }
    /* after the warm-up the documents are cached: reused whole in any order by the
     * position-independent methods, never by recompute, only up to the first moved
     * document by prefix */
    cr_assert_eq(num(method_of(ms, "lazy"), "doc_hit_ratio"), 1.0);
    cr_assert_eq(num(method_of(ms, "block"), "doc_hit_ratio"), 1.0);
    cr_assert_eq(num(method_of(ms, "mepic"), "doc_hit_ratio"), 1.0);
    cr_assert_eq(num(method_of(ms, "recompute"), "doc_hit_ratio"), 0.0);
    cr_assert_eq(num(method_of(ms, "recompute"), "cached_ratio"), 0.0);
    double prefix = num(method_of(ms, "prefix"), "doc_hit_ratio");
    cr_assert(prefix > 0 && prefix < 1, "prefix doc hit ratio %g", prefix);
    /* the table's header names every method; a steps line per method gives the JSON's count */
    const char *hdr_end = strstr(r.out, "\nrequests ");
    cr_assert(hdr_end, "no table:\n%s", r.out);
    const char *hdr = hdr_end;
    while (hdr > r.out && hdr[-1] != '\n') hdr--;
    char line[256], steps[96];
    snprintf(line, sizeof line, "%.*s", (int)(hdr_end - hdr), hdr);
    for (int i = 0; i < 5; i++) {
        cr_assert(strstr(line, k_methods[i]), "the table's header lacks %s: %s", k_methods[i], line);
        snprintf(steps, sizeof steps, "  steps %s: %.0f computed,", k_methods[i],
                 num(method_of(ms, k_methods[i]), "engine_steps.steps"));
        cr_assert(strstr(r.out, steps), "no '%s' in:\n%s", steps, r.out);
    }
    cr_assert(strstr(r.out, "warm-up:"), "the warm-up policy is not stated:\n%s", r.out);
    cr_assert(strstr(r.out, "engine: 1024 tokens a step"), "the CPU's default budget is not stated:\n%s", r.out);
    run_free(&r);
}

Test(cli_bench, dataset_questions_are_scored_for_exact_match) {
    run_result r = run("", "-m '" MODEL "' --dataset '" LA_SOURCE_DIR "/models/rag-tiny/eval/test.jsonl' "
                       "--methods recompute,lazy --requests 3 --max-docs 3 --max-tokens 3 --reorder reverse "
                       "--concurrency 2 --threads 1", 1);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_str_eq(cJSON_GetObjectItem(r.json, "format")->valuestring, "demo");
    const cJSON *ms = cJSON_GetObjectItem(r.json, "methods");
    cr_assert_eq(cJSON_GetArraySize(ms), 2);
    for (int i = 0; i < 2; i++) {
        const cJSON *m = cJSON_GetArrayItem(ms, i);
        double em = num(m, "exact_match");
        cr_assert(em >= 0 && em <= 1);
        cr_assert_eq((int)num(m, "exact_match_scored"), 3);
    }
    cr_assert_eq(num(method_of(ms, "lazy"), "doc_hit_ratio"), 1.0);
    cr_assert_eq(num(method_of(ms, "recompute"), "doc_hit_ratio"), 0.0);
    cr_assert_eq((int)num(r.json, "workload.warmup_requests_per_method"), 3);
    run_free(&r);
}

Test(cli_bench, http_mode_reports_the_servers_reuse) {
    /* the server's own recovery default must not reach the columns: bench sends every
     * method's recompute_first and doc_context */
    static const char *const args[] = {"-m", MODEL, "--threads", "1", "--recompute-first", "4",
                                       "--doc-context", "preamble", NULL};
    la_serve_proc p;
    cr_assert(la_serve_start(&p, args) == 0, "serve did not start: %s", p.log);
    char *a = NULL;
    cr_assert(asprintf(&a, "--url http://127.0.0.1:%d --dataset synthetic --requests 4 --docs-per-request 3 "
                           "--pool-docs 3 --doc-tokens 40 --max-tokens 4 --methods recompute,prefix,lazy,lazy+r8 "
                           "--concurrency 2", p.port) > 0);
    run_result r = run("", a, 1);
    int rc = la_serve_stop(&p, SIGTERM, 60);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_eq(rc, 0, "server exit %d: %s", rc, p.log);
    cr_assert_str_eq(cJSON_GetObjectItem(r.json, "mode")->valuestring, "http");
    cr_assert_str_eq(cJSON_GetObjectItem(r.json, "model")->valuestring, "tiny-f32-tied");
    const cJSON *ms = cJSON_GetObjectItem(r.json, "methods");
    for (int i = 0; i < 4; i++) {
        const cJSON *m = cJSON_GetArrayItem(ms, i);
        cr_assert_eq((int)num(m, "requests_ok"), 4, "%s", r.err);
        check_dist(m, "ttft_ms", 4);
        check_dist(m, "server_ttft_ms", 4);
        cr_assert_eq(num(m, "mean_output_tokens"), 4);
    }
    cr_assert_eq(num(method_of(ms, "lazy"), "doc_hit_ratio"), 1.0);
    /* recovery over HTTP: the server recomputed 8 tokens of each document after the first
     * (the preamble is document 0: all 3 synthetic documents), on cached documents */
    const cJSON *rec = method_of(ms, "lazy+r8");
    cr_assert_eq(num(rec, "recompute_first"), 8);
    cr_assert_str_eq(cJSON_GetObjectItem(rec, "engine_method")->valuestring, "lazy");
    cr_assert_eq(num(rec, "mean_doc_tokens_recomputed"), 3 * 8);
    cr_assert_eq(num(rec, "doc_hit_ratio"), 1.0);
    cr_assert_eq(num(method_of(ms, "lazy"), "mean_doc_tokens_recomputed"), 0);
    cr_assert(num(method_of(ms, "lazy"), "cached_ratio") > 0.5);
    cr_assert_eq(num(method_of(ms, "recompute"), "doc_hit_ratio"), 0.0);
    run_free(&r);
    free(a);
}

Test(cli_bench, kv_sweep_hit_ratio_grows_with_capacity) {
    run_result r =
        run("",
            "-m '" MODEL "' --dataset synthetic --sweep kv --points 10,400 --requests 8 "
            "--pool-docs 12 --docs-per-request 2 --doc-tokens 32 --max-tokens 2 --methods recompute,lazy "
            "--threads 1",
            1);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    const cJSON *sw = cJSON_GetObjectItem(r.json, "sweep"), *pts = cJSON_GetObjectItem(sw, "points");
    cr_assert_eq(cJSON_GetArraySize(pts), 2);
    const cJSON *small = cJSON_GetObjectItem(cJSON_GetArrayItem(pts, 0), "methods");
    const cJSON *big = cJSON_GetObjectItem(cJSON_GetArrayItem(pts, 1), "methods");
    /* the whole pool, the same for every method: x% of the documents' blocks, at least what one
     * request needs alone */
    double pool = num(sw, "pool_doc_blocks"), floor_ = num(sw, "floor_blocks");
    cr_assert(floor_ >= num(sw, "request_doc_blocks") + num(sw, "request_tail_blocks"));
    cr_assert_eq(num(cJSON_GetArrayItem(pts, 0), "kv_blocks"), fmax(ceil(0.10 * pool), floor_));
    cr_assert_eq(num(cJSON_GetArrayItem(pts, 1), "kv_blocks"), fmax(ceil(4.00 * pool), floor_));
    cr_assert(num(cJSON_GetArrayItem(pts, 0), "kv_blocks") < num(cJSON_GetArrayItem(pts, 1), "kv_blocks"));
    double lo = num(method_of(small, "lazy"), "doc_hit_ratio"),
           hi = num(method_of(big, "lazy"), "doc_hit_ratio");
    cr_assert(lo < hi, "lazy: %g at 10%% vs %g at 400%%", lo, hi);
    cr_assert_eq(hi, 1.0); /* the warm-up covered the whole pool and it all fits */
    cr_assert_eq(num(method_of(big, "recompute"), "doc_hit_ratio"), 0.0);
    run_free(&r);
}

Test(cli_bench, kv_sweep_runs_more_methods_than_the_engine_has) {
    /* seven method specs (five methods and two recoveries) at the floor's capacity: every one runs,
     * and no per-method array of a point is shorter than the list */
    run_result r = run("",
                       "-m '" MODEL "' --dataset synthetic --sweep kv --points 1 --requests 4 --pool-docs 6 "
                       "--docs-per-request 3 --doc-tokens 40 --max-tokens 2 --concurrency 2 --threads 1 "
                       "--methods recompute,prefix,block,mepic,lazy,block-ref,lazy+r8",
                       1);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    const cJSON *sw = cJSON_GetObjectItem(r.json, "sweep"), *pts = cJSON_GetObjectItem(sw, "points");
    const cJSON *ms = cJSON_GetObjectItem(cJSON_GetArrayItem(pts, 0), "methods");
    cr_assert_eq(cJSON_GetArraySize(ms), 7);
    for (int i = 0; i < 7; i++)
        cr_assert_eq((int)num(cJSON_GetArrayItem(ms, i), "requests_ok"), 4, "method %d", i);
    /* 1% of the pool is below one request: the floor, block's documents twice */
    cr_assert_eq(num(cJSON_GetArrayItem(pts, 0), "kv_blocks"), num(sw, "floor_blocks"));
    cr_assert(num(sw, "floor_blocks") >= 2 * num(sw, "request_doc_blocks") + num(sw, "request_tail_blocks"));
    run_free(&r);
}

Test(cli_bench, open_loop_rate_is_recorded) {
    run_result r = run("", SMALL " --methods lazy --rate 50", 1);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    const cJSON *load = cJSON_GetObjectItem(r.json, "load");
    cr_assert(strstr(cJSON_GetObjectItem(load, "mode")->valuestring, "open loop"));
    cr_assert_eq(num(load, "rate_per_s"), 50);
    cr_assert_eq((int)num(cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "methods"), 0), "requests_ok"), 4);
    run_free(&r);
}

Test(cli_bench, plot_writes_a_png) {
    la_test_require("command -v gnuplot", "gnuplot");
    char *dir = la_test_tmpdir(), *png = la_path_join(dir, "sub/plot.png"), *args = NULL;
    cr_assert(asprintf(&args, SMALL " --methods prefix,lazy --plot '%s'", png) > 0);
    run_result r = run("", args, 0);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    FILE *f = fopen(png, "rb");
    cr_assert(f, "%s not written", png);
    unsigned char magic[8] = {0};
    cr_assert_eq(fread(magic, 1, 8, f), 8);
    fclose(f);
    cr_assert(!memcmp(magic, "\x89PNG\r\n\x1a\n", 8), "not a PNG");
    run_free(&r);
    free(args), free(png);
    la_test_rm_tree(dir);
}

Test(cli_bench, plot_without_gnuplot_fails_with_one_message) {
    run_result r = run("PATH=/nonexistent", SMALL " --plot /tmp/never-written.png", 0);
    cr_assert_eq(r.status, 1);
    cr_assert_str_eq(r.out, "");
    cr_assert(strstr(r.err, "gnuplot"), "stderr: %s", r.err);
    cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "more than one line: %s", r.err);
    run_free(&r);
}

Test(cli_bench, usage_errors_exit_2_with_one_message) {
    const char *cases[] = {"",
                           "--dataset synthetic --methods lazy,nope",
                           "--dataset synthetic --rate 2 --concurrency 3",
                           "--dataset synthetic --reorder sideways",
                           "--dataset synthetic --sweep kv --url http://127.0.0.1:1",
                           "--dataset synthetic --sweep sideways",
                           "--dataset synthetic --points 1,2",
                           "--dataset synthetic --url ftp://x",
                           "--dataset synthetic --bogus",
                           "--dataset synthetic --requests 0",
                           "--dataset synthetic --max-batch-tokens -1",
                           "--dataset synthetic --max-batch-tokens 64 --url http://127.0.0.1:1"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r = run("", cases[i], 0);
        cr_assert_eq(r.status, 2, "`bench %s` exited %d: %s", cases[i], r.status, r.err);
        cr_assert_str_eq(r.out, "");
        cr_assert(!strncmp(r.err, "lazyattn", 8), "stderr: %s", r.err);
        cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "`bench %s`: more than one line: %s",
                     cases[i], r.err);
        run_free(&r);
    }
    run_result r = run("", "--help", 0);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "usage: lazyattn bench"));
    run_free(&r);
}

/* --json (bench, eval) into a place that cannot take a file fails at once with one line,
 * before any request runs (nothing on stdout), instead of after the whole run: under a
 * regular file, and on /proc (where access() would let root pass); an empty path is a
 * usage error. */
Test(cli_bench, unwritable_json_fails_before_the_run) {
    char *dir = la_test_tmpdir();
    char *file = la_path_join(dir, "a-file"), *bad = la_path_join(file, "out.json");
    FILE *f = fopen(file, "w");
    cr_assert(f);
    fclose(f);
    char *args = NULL;
    cr_assert(asprintf(&args, SMALL " --json '%s'", bad) > 0);
    run_result r = run("", args, 0);
    cr_assert_eq(r.status, 1, "bench exited %d: %s", r.status, r.err);
    cr_assert_str_eq(r.out, "");
    cr_assert(strstr(r.err, "cannot write there (Not a directory)"), "stderr: %s", r.err);
    cr_assert_eq(strchr(r.err, '\n'), r.err + strlen(r.err) - 1, "more than one line: %s", r.err);
    run_free(&r);
    r = run("", SMALL " --json /proc/lazyattn-never.json", 0);
    cr_assert_eq(r.status, 1, "bench exited %d: %s", r.status, r.err);
    cr_assert_str_eq(r.out, "");
    cr_assert(strstr(r.err, "--json /proc/lazyattn-never.json: cannot write there ("), "stderr: %s", r.err);
    run_free(&r);
    r = run("", SMALL " --json ''", 0);
    cr_assert_eq(r.status, 2, "bench exited %d: %s", r.status, r.err);
    cr_assert(strstr(r.err, "--json needs a file path"), "stderr: %s", r.err);
    run_free(&r);
    char *out = la_path_join(dir, "eval.out"), *err = la_path_join(dir, "eval.err"), *cmd = NULL;
    cr_assert(asprintf(&cmd, "'%s/lazyattn' eval -m '%s' --dataset '%s/models/rag-tiny/eval/test.jsonl' --json '%s' "
                             "</dev/null >'%s' 2>'%s'", LA_BUILD_DIR, MODEL, LA_SOURCE_DIR, bad, out, err) > 0);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: status %d", cmd, st);
    char *eo = slurp(out), *ee = slurp(err);
    cr_assert_str_eq(eo, "");
    cr_assert(strstr(ee, "lazyattn eval: --json") && strstr(ee, "(Not a directory)"), "stderr: %s", ee);
    free(eo), free(ee), free(cmd), free(out), free(err), free(args), free(bad), free(file);
    la_test_rm_tree(dir);
}

Test(cli_bench, other_errors_exit_1) {
    run_result r = run("", "--dataset /nonexistent.jsonl -m '" MODEL "'", 0);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "/nonexistent.jsonl"), "stderr: %s", r.err);
    run_free(&r);
    r = run("", "--dataset synthetic --url http://127.0.0.1:1", 0);
    cr_assert_eq(r.status, 1);
    cr_assert(strstr(r.err, "cannot connect"), "stderr: %s", r.err);
    run_free(&r);
}

/* --duration bounds a point: an open loop far beyond what the engine answers is cut there,
 * reported as saturated (requests cut, achieved rate), and the run still succeeds; a closed
 * loop that ends inside the bound is not. Beyond on any machine: every request decodes 256
 * tokens, 256 steps of a batch of up to 300 sequences, against a bound of 0.25 s (16 tokens
 * and 0.5 s finished all 300 on an idle 2-core machine). */
Test(cli_bench, duration_bound_reports_saturation_instead_of_hanging) {
    run_result r = run("", "-m '" MODEL "' --dataset synthetic --requests 300 --rate 5000 --duration 0.2 "
                           "--docs-per-request 4 --doc-tokens 200 --pool-docs 8 --max-tokens 256 --ignore-eos "
                           "--methods lazy --threads 1", 1);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    const cJSON *m = method_of(cJSON_GetObjectItem(r.json, "methods"), "lazy");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(m, "saturated")), "not saturated:\n%s", r.out);
    int cut = (int)num(m, "requests_cut"), ok = (int)num(m, "requests_ok"), unsent = (int)num(m, "requests_not_sent");
    cr_assert(cut > 0 && ok + cut + unsent == 300, "ok %d cut %d not sent %d", ok, cut, unsent);
    cr_assert(strstr(r.out, "saturated"), "table: %s", r.out);
    run_free(&r);
    r = run("", SMALL " --methods lazy --duration 600", 1);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    m = method_of(cJSON_GetObjectItem(r.json, "methods"), "lazy");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(m, "saturated")));
    cr_assert_eq(num(m, "requests_cut"), 0);
    cr_assert_eq(num(m, "requests_ok"), 4);
    run_free(&r);
}

/* --requests N is N measured requests per method and point, a concurrency sweep included
 * (it printed twice its largest concurrency); left out, a concurrency sweep measures twice
 * its largest concurrency. */
Test(cli_bench, requests_is_the_count_per_method_and_point) {
    run_result r = run("", "-m '" MODEL "' --dataset synthetic --sweep concurrency --points 1,4 --requests 3 "
                           "--docs-per-request 2 --doc-tokens 32 --pool-docs 4 --max-tokens 2 --methods lazy "
                           "--threads 1", 1);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_eq((int)num(r.json, "workload.requests_per_method"), 3);
    cr_assert(strstr(r.out, "3 measured requests per method and point"), "%s", r.out);
    run_free(&r);
    r = run("", "-m '" MODEL "' --dataset synthetic --sweep concurrency --points 1,20 "
                "--docs-per-request 2 --doc-tokens 32 --pool-docs 4 --max-tokens 2 --methods lazy --threads 1", 1);
    cr_assert_eq(r.status, 0, "stderr: %s", r.err);
    cr_assert_eq((int)num(r.json, "workload.requests_per_method"), 40); /* the default 32 < 2 x 20 */
    run_free(&r);
}
