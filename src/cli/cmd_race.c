/* lazyattn race: two methods answer the same question side by side.
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
 * renders every drawn frame to a GIF with ImageMagick (`convert`, Debian's imagemagick, or
 * the program named by $LAZYATTN_CONVERT).
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/file.h"

#include "base/timer.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/rag_dataset.h"
#include "lazyattn/lazyattn.h"

typedef struct side {
    la_method method;
    la_engine *engine;
    pthread_mutex_t mu;
    char text[4096];
    size_t len;
    double t_start, ttft_ms, e2e_ms;
    int done, failed;
    la_request_stats stats;
    char error[LA_ERR_MSG_LEN];
} side;

typedef struct race {
    side s[2];
    const la_rag_question *q;
    int32_t *order;          /* document order of this round */
    int32_t max_tokens;
    atomic_int go;           /* start barrier */
} race;

static void on_event(void *user, const la_event *ev) {
    side *s = user;
    pthread_mutex_lock(&s->mu);
    if (ev->text_len && s->len + ev->text_len < sizeof s->text) {
        memcpy(s->text + s->len, ev->text, ev->text_len);
        s->len += ev->text_len;
        s->text[s->len] = '\0';
    }
    if (ev->kind == LA_EVENT_TOKEN && s->ttft_ms == 0) s->ttft_ms = la_now_ms() - s->t_start;
    if (ev->kind == LA_EVENT_DONE) {
        s->done = 1;
        s->failed = ev->finish == LA_FINISH_ERROR;
        s->stats = *ev->stats;
        s->e2e_ms = la_now_ms() - s->t_start;
        snprintf(s->error, sizeof s->error, "%s", ev->error ? ev->error : "");
    }
    pthread_mutex_unlock(&s->mu);
}

typedef struct worker_arg {
    race *r;
    int which;
} worker_arg;

/* Submit the question with the round's document order and step until it finishes. */
static void *worker(void *p) {
    worker_arg *a = p;
    race *r = a->r;
    side *s = &r->s[a->which];
    const la_rag_question *q = r->q;
    la_segment *docs = calloc((size_t)q->n_docs + 1, sizeof(la_segment));
    for (int32_t d = 0; d < q->n_docs; d++)
        docs[d] = (la_segment){.text = q->docs[r->order[d]].text, .title = q->docs[r->order[d]].title};
    la_chat_message msg = {"user", q->question};
    la_request_params rp;
    la_request_params_init(&rp);
    rp.messages = &msg;
    rp.n_messages = 1;
    rp.docs = docs;
    rp.n_docs = q->n_docs;
    rp.method = s->method;
    rp.sampling.max_tokens = r->max_tokens;
    rp.on_event = on_event;
    rp.user = s;
    while (!atomic_load(&r->go)) { /* spin until both threads are ready */
    }
    s->t_start = la_now_ms();
    la_err err = {0};
    if (la_engine_submit(s->engine, &rp, NULL, &err) != LA_OK) {
        pthread_mutex_lock(&s->mu);
        s->done = s->failed = 1;
        snprintf(s->error, sizeof s->error, "%s", err.msg);
        pthread_mutex_unlock(&s->mu);
    } else {
        while (la_engine_has_work(s->engine)) la_engine_step(s->engine, &err);
    }
    free(docs);
    return NULL;
}

/* ---- drawing ---------------------------------------------------------------------------- */

typedef struct frame_sink {
    FILE *f;   /* frames file for --record, or NULL */
    int n;
    double t0;
} frame_sink;

static int term_cols(void) {
    struct winsize w;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 60) return w.ws_col > 140 ? 140 : w.ws_col;
    return 100;
}

/* Append up to `width` display columns of s starting at *pos (UTF-8 aware, stops at \n). */
static int take_line(const char *s, size_t len, size_t *pos, int width, char *out, size_t cap) {
    size_t i = *pos, o = 0;
    int cols = 0;
    while (i < len && cols < width && o + 5 < cap) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') {
            i++;
            break;
        }
        size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (i + n > len) break;
        memcpy(out + o, s + i, n);
        o += n;
        i += n;
        cols++;
    }
    out[o] = '\0';
    *pos = i;
    return cols;
}

/* "<faster method>: first token N.NNx sooner than <slower> (a ms vs b ms)" of a finished
 * race, the faster side named first. */
static void verdict(const race *r, char *buf, size_t n) {
    const int f = r->s[0].ttft_ms <= r->s[1].ttft_ms ? 0 : 1;
    const side *a = &r->s[f], *b = &r->s[1 - f];
    snprintf(buf, n, "%s: first token %.2fx sooner than %s (%.1f ms vs %.1f ms)", la_method_name(a->method),
             b->ttft_ms / a->ttft_ms, la_method_name(b->method), a->ttft_ms, b->ttft_ms);
}

static void draw(race *r, const char *title, const char *gold, int final, frame_sink *sink,
                 bool tty) {
    int W = term_cols(), col = (W - 3) / 2;
    char buf[65536];
    size_t n = 0;
#define OUT(...) n += (size_t)snprintf(buf + n, sizeof buf - n, __VA_ARGS__)
    OUT("%s\n", title);
    OUT("Q: %.*s\n", W - 4, r->q->question);
    OUT("gold: %s\n", gold);
    for (int i = 0; i < W; i++) OUT("-");
    OUT("\n");
    char head[2][128], body[2][4096];
    size_t blen[2];
    for (int k = 0; k < 2; k++) {
        side *s = &r->s[k];
        pthread_mutex_lock(&s->mu);
        double now = la_now_ms();
        if (s->ttft_ms > 0)
            snprintf(head[k], sizeof head[k], "%-9s TTFT %8.1f ms%s", la_method_name(s->method), s->ttft_ms,
                     s->done ? "  done" : "");
        else
            snprintf(head[k], sizeof head[k], "%-9s prefill... %6.1f ms", la_method_name(s->method),
                     s->t_start > 0 ? now - s->t_start : 0.0);
        memcpy(body[k], s->text, s->len + 1);
        blen[k] = s->len;
        pthread_mutex_unlock(&s->mu);
    }
    OUT("%-*s | %s\n", col, head[0], head[1]);
    size_t pos[2] = {0, 0};
    for (int line = 0; line < 6; line++) {
        char l0[1024], l1[1024];
        int c0 = take_line(body[0], blen[0], &pos[0], col, l0, sizeof l0);
        take_line(body[1], blen[1], &pos[1], col, l1, sizeof l1);
        OUT("%s%*s | %s\n", l0, col - c0, "", l1);
    }
    if (final) {
        char v[256];
        verdict(r, v, sizeof v);
        OUT("\n%s; answers identical: %s\n", v, strcmp(r->s[0].text, r->s[1].text) == 0 ? "yes" : "NO");
        for (int k = 0; k < 2; k++) {
            const la_request_stats *st = &r->s[k].stats;
            if (la_method_is_blockwise(r->s[k].method))
                OUT("%-9s document tokens served from the cache: %lld of %lld\n", la_method_name(r->s[k].method),
                    (long long)st->doc_tokens_reused, (long long)(st->doc_tokens_reused + st->doc_tokens_computed));
            else
                OUT("%-9s prompt tokens served from the cache (prefix): %lld of %d\n", la_method_name(r->s[k].method),
                    (long long)st->prefix_tokens_reused, st->n_prompt_tokens);
        }
    }
#undef OUT
    if (tty) {
        fputs("\033[H\033[J", stdout);
        fputs(buf, stdout);
        fflush(stdout);
    }
    if (sink->f) {
        fprintf(sink->f, "@@frame %d %.1f\n%s", sink->n++, la_now_ms() - sink->t0, buf);
        fflush(sink->f);
    }
}

/* Run one round: both sides start together; draw until both are done. */
static void round_run(race *r, const char *title, const char *gold, frame_sink *sink, bool tty,
                      int fps) {
    for (int k = 0; k < 2; k++) {
        side *s = &r->s[k];
        s->len = 0;
        s->text[0] = '\0';
        s->t_start = s->ttft_ms = s->e2e_ms = 0;
        s->done = s->failed = 0;
    }
    atomic_store(&r->go, 0);
    pthread_t th[2];
    worker_arg args[2] = {{r, 0}, {r, 1}};
    for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, worker, &args[k]);
    atomic_store(&r->go, 1);
    struct timespec ts = {0, 1000000000L / fps};
    while (!(r->s[0].done && r->s[1].done)) {
        draw(r, title, gold, 0, sink, tty);
        nanosleep(&ts, NULL);
    }
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
}

/* ImageMagick's convert: $LAZYATTN_CONVERT, else `convert` on PATH. */
static const char *convert_cmd(void) {
    const char *c = getenv("LAZYATTN_CONVERT");
    return c && *c ? c : "convert";
}

/* Run argv (no shell, so frame text needs no quoting); 0 when it exits 0. */
static int run_argv(char *const *argv) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, STDERR_FILENO);
        execvp(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Render one text frame to PNG: ImageMagick -annotate (its '%' escapes doubled). */
static int render_frame(const char *text, const char *png) {
    size_t n = strlen(text);
    char *esc = malloc(2 * n + 1);
    if (!esc) return -1;
    int lines = 1, cols = 0, col = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] == '%') esc[k++] = '%';
        esc[k++] = text[i];
        if (text[i] == '\n') {
            lines++;
            col = 0;
        } else if (((unsigned char)text[i] & 0xC0) != 0x80 && ++col > cols) {
            cols = col;
        }
    }
    esc[k] = '\0';
    char size[32];
    snprintf(size, sizeof size, "%dx%d", cols * 9 + 24, lines * 17 + 16);
    char *argv[] = {(char *)convert_cmd(), "-size", size, "xc:#101418", "-font", "DejaVu-Sans-Mono",
                    "-pointsize", "14", "-fill", "#d8dee9", "-annotate", "+12+20", esc, (char *)png,
                    NULL};
    int rc = run_argv(argv);
    free(esc);
    return rc;
}

/* Turn the recorded text frames into a GIF; each frame shows for the time it was on screen. */
static int record_gif(const char *frames_path, const char *gif) {
    char dir[] = "/tmp/lazyattn-race-XXXXXX";
    if (!mkdtemp(dir)) return -1;
    char *all = NULL;
    size_t len = 0;
    la_err err;
    if (la_file_read(frames_path, &all, &len, &err) != LA_OK) return -1;
    /* frames: "@@frame <index> <ms>\n<text>" repeated */
    int n = 0, rc = 0, cap = 0;
    double *t_ms = NULL;
    char *p = all;
    while (rc == 0 && (p = strstr(p, "@@frame ")) != NULL) {
        int idx;
        double t;
        if (sscanf(p, "@@frame %d %lf", &idx, &t) != 2) break;
        char *body = strchr(p, '\n');
        if (!body) break;
        body++;
        char *next = strstr(body, "@@frame ");
        size_t blen = next ? (size_t)(next - body) : strlen(body);
        char *text = malloc(blen + 1);
        memcpy(text, body, blen);
        text[blen] = '\0';
        char png[128];
        snprintf(png, sizeof png, "%s/f%05d.png", dir, n);
        rc = render_frame(text, png);
        free(text);
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            t_ms = realloc(t_ms, sizeof(double) * (size_t)cap);
        }
        t_ms[n++] = t;
        p = body;
    }
    free(all);
    if (rc == 0 && n > 0) {
        /* convert -loop 0 -delay d0 f0.png -delay d1 f1.png ... out.gif: 3 + 3 n + 1
         * arguments and the NULL */
        char **argv = calloc((size_t)(3 * n + 5), sizeof(char *));
        char (*delay)[16] = calloc((size_t)n, sizeof *delay);
        char (*png)[128] = calloc((size_t)n, sizeof *png);
        int k = 0;
        argv[k++] = (char *)convert_cmd();
        argv[k++] = "-loop";
        argv[k++] = "0";
        for (int i = 0; i < n; i++) {
            double ms = i + 1 < n ? t_ms[i + 1] - t_ms[i] : 4000.0; /* hold the result */
            int cs = (int)(ms / 10.0 + 0.5);
            snprintf(delay[i], sizeof delay[i], "%d", cs < 2 ? 2 : cs);
            snprintf(png[i], sizeof png[i], "%s/f%05d.png", dir, i);
            argv[k++] = "-delay";
            argv[k++] = delay[i];
            argv[k++] = png[i];
        }
        argv[k++] = (char *)gif;
        argv[k] = NULL;
        rc = run_argv(argv);
        struct stat st;
        if (rc == 0 && (stat(gif, &st) != 0 || st.st_size == 0)) rc = -1; /* convert wrote nothing */
        free(argv);
        free(delay);
        free(png);
    }
    free(t_ms);
    char *rm[] = {"rm", "-rf", dir, NULL};
    run_argv(rm);
    return n > 0 ? rc : -1;
}

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
               "                   LAZYATTN_CONVERT names another binary), --fps frames per s (30)\n");
}

int la_cli_race(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"left", required_argument, 0, 1},
        {"right", required_argument, 0, 2},       {"dataset", required_argument, 0, 3},
        {"question", required_argument, 0, 4},    {"seed", required_argument, 0, 5},
        {"max-tokens", required_argument, 0, 6},  {"threads-each", required_argument, 0, 7},
        {"device", required_argument, 0, 8},      {"record", required_argument, 0, 9},
        {"fps", required_argument, 0, 10},        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    la_engine_options eo;
    la_engine_options_init(&eo);
    eo.model_dir = la_cli_default_model_dir();
    eo.n_threads = 1;
    la_method left = LA_METHOD_LAZY, right = LA_METHOD_PREFIX;
    const char *dataset = NULL, *record = NULL;
    int32_t qi = 0, max_tokens = 24, fps = 30;
    int64_t seed = 7;
    la_err err = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'm': eo.model_dir = optarg; break;
        case 1: bad = la_method_parse(optarg, &left, &err) != LA_OK; break;
        case 2: bad = la_method_parse(optarg, &right, &err) != LA_OK; break;
        case 3: dataset = optarg; break;
        case 4: bad = la_cli_parse_i32(optarg, "--question", &qi); break;
        case 5: bad = la_cli_parse_i64(optarg, "--seed", &seed); break;
        case 6: bad = la_cli_parse_i32(optarg, "--max-tokens", &max_tokens); break;
        case 7: bad = la_cli_parse_i32(optarg, "--threads-each", &eo.n_threads); break;
        case 8: bad = la_device_parse(optarg, &eo.device, &err) != LA_OK; break;
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
    race r = {0};
    r.q = &ds.q[qi];
    r.max_tokens = max_tokens;
    r.s[0].method = left;
    r.s[1].method = right;
    int rc = LA_EXIT_OK;
    for (int k = 0; k < 2 && rc == LA_EXIT_OK; k++) {
        pthread_mutex_init(&r.s[k].mu, NULL);
        if (la_engine_create(&eo, &r.s[k].engine, &err) != LA_OK) {
            fprintf(stderr, "lazyattn race: %s\n", err.msg);
            rc = LA_EXIT_ERROR;
        }
    }
    bool tty = isatty(STDOUT_FILENO);
    frame_sink sink = {0};
    char frames_path[] = "/tmp/lazyattn-frames-XXXXXX";
    if (rc == LA_EXIT_OK && record) {
        int fd = mkstemp(frames_path);
        sink.f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!sink.f) {
            fprintf(stderr, "lazyattn race: cannot create a frames file\n");
            rc = LA_EXIT_ERROR;
        }
    }
    if (rc == LA_EXIT_OK) {
        char gold[512] = "";
        for (int32_t i = 0; i < r.q->n_answers; i++)
            snprintf(gold + strlen(gold), sizeof gold - strlen(gold), "%s%s", i ? " / " : "", r.q->answers[i]);
        int32_t n_docs = r.q->n_docs;
        r.order = malloc(sizeof(int32_t) * (size_t)(n_docs + 1));
        for (int32_t d = 0; d < n_docs; d++) r.order[d] = d;
        char title[256];
        snprintf(title, sizeof title, "round 1: %d documents in the retrieved order (warming both caches)", n_docs);
        round_run(&r, title, gold, &(frame_sink){0}, false, fps);
        /* round 2: a new order */
        uint64_t x = (uint64_t)seed;
        for (int32_t d = n_docs - 1; d > 0; d--) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int32_t j = (int32_t)((x >> 33) % (uint64_t)(d + 1)), t = r.order[d];
            r.order[d] = r.order[j], r.order[j] = t;
        }
        snprintf(title, sizeof title, "lazyattn race: the same %d documents, new order (%s, %s)", n_docs,
                 la_engine_model_name(r.s[0].engine), la_engine_device_name(r.s[0].engine));
        sink.t0 = la_now_ms();
        round_run(&r, title, gold, &sink, tty, fps);
        if (r.s[0].failed || r.s[1].failed) {
            fprintf(stderr, "lazyattn race: %s\n", r.s[0].failed ? r.s[0].error : r.s[1].error);
            rc = LA_EXIT_ERROR;
        } else {
            draw(&r, title, gold, 1, &sink, tty);
            if (!tty) { /* plain summary */
                printf("%s\nQ: %s\ngold: %s\n", title, r.q->question, gold);
                for (int k = 0; k < 2; k++)
                    printf("%-9s TTFT %8.1f ms  answer: %s\n", la_method_name(r.s[k].method),
                           r.s[k].ttft_ms, r.s[k].text);
                char v[256];
                verdict(&r, v, sizeof v);
                printf("%s; answers identical: %s\n", v, strcmp(r.s[0].text, r.s[1].text) == 0 ? "yes" : "NO");
            }
        }
        free(r.order);
    }
    if (sink.f) {
        fclose(sink.f);
        if (rc == LA_EXIT_OK && record_gif(frames_path, record) != 0) {
            fprintf(stderr, "lazyattn race: --record %s: ImageMagick's convert failed: is the path "
                            "writable, and are imagemagick and fonts-dejavu-core installed?\n", record);
            rc = LA_EXIT_ERROR;
        } else if (rc == LA_EXIT_OK) {
            fprintf(stderr, "lazyattn race: recorded %d frames to %s\n", sink.n, record);
        }
        unlink(frames_path);
    }
    for (int k = 0; k < 2; k++) {
        la_engine_destroy(r.s[k].engine);
        pthread_mutex_destroy(&r.s[k].mu);
    }
    la_rag_dataset_free(&ds);
    return rc;
}
