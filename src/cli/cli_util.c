#include "cli/cli_util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"

int la_cli_parse_i64(const char *s, const char *flag, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) {
        fprintf(stderr, "lazyattn: %s: '%s' is not an integer\n", flag, s);
        return 2;
    }
    *out = v;
    return 0;
}

int la_cli_parse_i32(const char *s, const char *flag, int32_t *out) {
    int64_t v;
    if (la_cli_parse_i64(s, flag, &v)) return 2;
    if (v < INT32_MIN || v > INT32_MAX) {
        fprintf(stderr, "lazyattn: %s: %s is out of range\n", flag, s);
        return 2;
    }
    *out = (int32_t)v;
    return 0;
}

bool la_cli_is_decimal(const char *s) {
    const char *p = s + (s[0] == '-');
    size_t digits = strspn(p, "0123456789");
    p += digits;
    if (*p == '.') {
        size_t frac = strspn(p + 1, "0123456789");
        digits += frac;
        p += 1 + frac;
    }
    return digits > 0 && !*p;
}

int la_cli_parse_f32(const char *s, const char *flag, float *out) {
    char *end = NULL;
    errno = 0;
    float v = la_cli_is_decimal(s) ? strtof(s, &end) : 0.0f;
    if (!end || errno || *end || !isfinite(v)) {
        fprintf(stderr, "lazyattn: %s: '%s' is not a number\n", flag, s);
        return 2;
    }
    *out = v;
    return 0;
}

void la_cli_strings_push(la_cli_strings *l, char *s) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        char **p = realloc(l->items, sizeof(char *) * (size_t)cap);
        if (!p) return;
        l->items = p;
        l->cap = cap;
    }
    l->items[l->n++] = s;
}

void la_cli_strings_free(la_cli_strings *l) {
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

void la_cli_progress_init(la_cli_progress *p, int64_t total) {
    *p = (la_cli_progress){.total = total, .t0_ms = la_now_ms(), .label = "", .tty = isatty(STDERR_FILENO)};
}

void la_cli_progress_end(la_cli_progress *p) {
    if (!p->tty) return;
    la_cli_progress_draw(p, true);
    fputc('\n', stderr);
    fflush(stderr);
}

void la_cli_progress_draw(la_cli_progress *p, bool force) {
    double now = la_now_ms();
    if (!p->tty) { /* a log: a plain line every LA_CLI_PROGRESS_LOG_MS, never carriage returns */
        if (p->t_drawn_ms == 0) p->t_drawn_ms = p->t0_ms;
        if (now - p->t_drawn_ms < LA_CLI_PROGRESS_LOG_MS) return;
        p->t_drawn_ms = now;
        fprintf(stderr, "progress: %lld/%lld %s %.1fs%s\n", (long long)p->done, (long long)p->total, p->label,
                (now - p->t0_ms) / 1e3, p->extra);
        fflush(stderr);
        return;
    }
    if (!force && now - p->t_drawn_ms < 100 && p->done != p->total) return;
    p->t_drawn_ms = now;
    int width = 30, filled = p->total ? (int)(width * p->done / p->total) : width;
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld  %-28s %6.1fs%s", filled, "##############################",
            width - filled, "", (long long)p->done, (long long)p->total, p->label, (now - p->t0_ms) / 1e3, p->extra);
    fflush(stderr);
}
