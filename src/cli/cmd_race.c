/* lazyattn race: two methods answer the same question side by side (flags -> bench/race.h ->
 * the terminal, a GIF).
 *
 *   lazyattn race [-m DIR] [--left lazy] [--right prefix] [--dataset FILE] [--question N]
 *                 [--seed S] [--max-tokens N] [--threads-each N] [--device cpu|cuda]
 *                 [--record FILE.gif] [--fps N]
 *
 * Round 1 warms both caches: each side answers the question with its documents in the
 * retrieved order. Round 2 is the race: the same documents come back in a new order (a
 * seeded shuffle) and both sides start at the same instant, each on its own engine and
 * thread, streaming into its own column with a live time-to-first-token counter. At the end:
 * the TTFT ratio and whether the answers are identical.
 *
 * On a terminal the race is drawn live; otherwise only the summary is printed. --record
 * renders every drawn frame to a GIF (bench/frames.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/timer.h"
#include "bench/frames.h"
#include "bench/race.h"
#include "bench/rag_dataset.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "lazyattn/lazyattn.h"

static int term_cols(void) {
    struct winsize w;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 60) return w.ws_col > 140 ? 140 : w.ws_col;
    return 100;
}

/* Where round 2 is drawn: the terminal (tty) and the --record frames. */
typedef struct screen {
    la_race *r;
    const char *title, *gold;
    la_frames *rec;
    bool tty;
} screen;

static void draw(screen *sc, bool final) {
    char buf[65536];
    la_race_frame(sc->r, sc->title, sc->gold, final, term_cols(), buf, sizeof buf);
    if (sc->tty) {
        fputs("\033[H\033[J", stdout);
        fputs(buf, stdout);
        fflush(stdout);
    }
    if (sc->rec->f) la_frames_add(sc->rec, buf);
}

static void on_tick(void *user) { draw(user, false); }

static void usage(FILE *f) {
    fprintf(f, "usage: lazyattn race [-m DIR] [--left lazy] [--right prefix] [--dataset FILE]\n"
               "                     [--question N] [--seed S] [--max-tokens N] [--threads-each N]\n"
               "                     [--device cpu|cuda] [--record FILE.gif] [--fps N]\n"
               "  --left, --right  the two methods (lazy, prefix), each on its own engine\n"
               "  --dataset FILE   a RAG question file (the model's eval/test.jsonl)\n"
               "  --question N     which question of the file (0); its documents come back in a\n"
               "                   new order, shuffled with --seed (7)\n"
               "  --max-tokens N   answer length cap (24)\n"
               "  --threads-each N CPU threads per engine (1)\n"
               "  --record FILE    also write the race as an animated GIF (ImageMagick convert,\n"
               "                   LAZYATTN_CONVERT names another binary), --fps frames per s (30)\n"
               "document KV store (README \"Document KV store\"; both engines use it):\n" LA_CLI_STORE_USAGE);
}

int la_cli_race(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, LA_CLI_OPT_MODEL},  {"left", required_argument, 0, 1},
        {"right", required_argument, 0, 2},                 {"dataset", required_argument, 0, 3},
        {"question", required_argument, 0, 4},              {"seed", required_argument, 0, 5},
        {"max-tokens", required_argument, 0, 6},            {"threads-each", required_argument, 0, 7},
        {"device", required_argument, 0, LA_CLI_OPT_DEVICE},
        {"record", required_argument, 0, 9},                {"fps", required_argument, 0, 10},
        LA_CLI_STORE_OPTIONS,
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    la_engine_options eo;
    la_cli_engine_options_init(&eo);
    eo.n_threads = 1;
    la_method left = LA_METHOD_LAZY, right = LA_METHOD_PREFIX;
    const char *dataset = NULL, *record = NULL;
    int32_t qi = 0, max_tokens = 24, fps = 30;
    int64_t seed = 7;
    la_err err = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        la_cli_flag ef = la_cli_engine_flag(c, optarg, &eo, &err);
        if (ef == LA_CLI_FLAG_SET) continue;
        int bad = 0;
        switch (c) { /* a bad engine flag lands in default */
        case 1: bad = la_method_parse(optarg, &left, &err) != LA_OK; break;
        case 2: bad = la_method_parse(optarg, &right, &err) != LA_OK; break;
        case 3: dataset = optarg; break;
        case 4: bad = la_cli_parse_i32(optarg, "--question", &qi); break;
        case 5: bad = la_cli_parse_i64(optarg, "--seed", &seed); break;
        case 6: bad = la_cli_parse_i32(optarg, "--max-tokens", &max_tokens); break;
        case 7: bad = la_cli_parse_i32(optarg, "--threads-each", &eo.n_threads); break;
        case 9: record = optarg; break;
        case 10: bad = la_cli_parse_i32(optarg, "--fps", &fps); break;
        case 'h': usage(stdout); return LA_EXIT_OK;
        default: bad = 1;
        }
        if (bad) {
            if (err.msg[0]) fprintf(stderr, "lazyattn race: %s\n", err.msg);
            usage(stderr);
            return LA_EXIT_USAGE;
        }
    }
    if (optind < argc || qi < 0 || max_tokens < 1 || fps < 1 || fps > 120) {
        fprintf(stderr, "lazyattn race: %s\n",
                optind < argc ? "unexpected argument"
                : qi < 0      ? "--question must be >= 0"
                : max_tokens < 1 ? "--max-tokens must be >= 1"
                                 : "--fps must be in [1, 120]");
        usage(stderr);
        return LA_EXIT_USAGE;
    }
    if (la_cli_store_flags_check(&eo, "race")) return LA_EXIT_USAGE;
    char default_ds[4200];
    if (!dataset) {
        snprintf(default_ds, sizeof default_ds, "%s/eval/test.jsonl", eo.model_dir);
        dataset = default_ds;
    }
    la_rag_dataset ds;
    if (la_rag_dataset_load(dataset, qi + 1, 0, &ds, &err) != LA_OK) {
        fprintf(stderr, "lazyattn race: %s\n", err.msg);
        return LA_EXIT_ERROR;
    }
    if (qi >= ds.n) {
        fprintf(stderr, "lazyattn race: --question %d: the dataset has %d questions\n", qi, ds.n);
        la_rag_dataset_free(&ds);
        return LA_EXIT_USAGE;
    }
    la_race r;
    int rc = LA_EXIT_OK;
    if (la_race_init(&r, &eo, &ds.q[qi], left, right, max_tokens, &err) != LA_OK) {
        fprintf(stderr, "lazyattn race: %s\n", err.msg);
        rc = LA_EXIT_ERROR;
    }
    bool tty = isatty(STDOUT_FILENO);
    la_frames rec = {0};
    if (rc == LA_EXIT_OK && record && la_frames_open(&rec) != 0) {
        fprintf(stderr, "lazyattn race: cannot create a frames file\n");
        rc = LA_EXIT_ERROR;
    }
    if (rc == LA_EXIT_OK) {
        char gold[512] = "";
        for (int32_t i = 0; i < r.q->n_answers; i++)
            snprintf(gold + strlen(gold), sizeof gold - strlen(gold), "%s%s", i ? " / " : "", r.q->answers[i]);
        int32_t n_docs = r.q->n_docs;
        la_race_round(&r, NULL, NULL, fps); /* round 1: the retrieved order, warming both caches */
        la_race_shuffle(&r, (uint64_t)seed); /* round 2: a new order */
        char title[256];
        snprintf(title, sizeof title, "lazyattn race: the same %d documents, new order (%s, %s)", n_docs,
                 la_engine_model_name(r.s[0].engine), la_engine_device_name(r.s[0].engine));
        rec.t0 = la_now_ms();
        screen sc = {&r, title, gold, &rec, tty};
        la_race_round(&r, on_tick, &sc, fps);
        if (r.s[0].failed || r.s[1].failed) {
            fprintf(stderr, "lazyattn race: %s\n", r.s[0].failed ? r.s[0].error : r.s[1].error);
            rc = LA_EXIT_ERROR;
        } else {
            draw(&sc, true);
            if (!tty) { /* plain summary */
                printf("%s\nQ: %s\ngold: %s\n", title, r.q->question, gold);
                for (int k = 0; k < 2; k++)
                    printf("%-9s TTFT %8.1f ms  answer: %s\n", la_method_name(r.s[k].method),
                           r.s[k].ttft_ms, r.s[k].text);
                char v[256];
                la_race_verdict(&r, v, sizeof v);
                printf("%s; answers identical: %s\n", v, strcmp(r.s[0].text, r.s[1].text) == 0 ? "yes" : "NO");
            }
        }
    }
    if (rec.f) {
        la_frames_close(&rec);
        if (rc == LA_EXIT_OK && la_frames_write_gif(&rec, record) != 0) {
            fprintf(stderr, "lazyattn race: --record %s: ImageMagick's convert failed: is the path "
                            "writable, and are imagemagick and fonts-dejavu-core installed?\n", record);
            rc = LA_EXIT_ERROR;
        } else if (rc == LA_EXIT_OK) {
            fprintf(stderr, "lazyattn race: recorded %d frames to %s\n", rec.n, record);
        }
        la_frames_remove(&rec);
    }
    la_race_fini(&r);
    la_rag_dataset_free(&ds);
    return rc;
}
