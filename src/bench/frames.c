/* Text frames to an animated GIF (frames.h). */
#include "bench/frames.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/file.h"
#include "base/timer.h"

int la_frames_open(la_frames *fr) {
    memset(fr, 0, sizeof *fr);
    snprintf(fr->path, sizeof fr->path, "/tmp/lazyattn-frames-XXXXXX");
    int fd = mkstemp(fr->path);
    fr->f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!fr->f) {
        if (fd >= 0) {
            close(fd);
            unlink(fr->path);
        }
        fr->path[0] = '\0';
        return -1;
    }
    return 0;
}

void la_frames_add(la_frames *fr, const char *text) {
    fprintf(fr->f, "@@frame %d %.1f\n%s", fr->n++, la_now_ms() - fr->t0, text);
    fflush(fr->f);
}

void la_frames_close(la_frames *fr) {
    if (fr->f) fclose(fr->f);
    fr->f = NULL;
}

void la_frames_remove(la_frames *fr) {
    la_frames_close(fr);
    if (fr->path[0]) unlink(fr->path);
    fr->path[0] = '\0';
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

int la_frames_write_gif(const la_frames *fr, const char *gif) {
    const char *frames_path = fr->path;
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
