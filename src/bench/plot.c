/* Plots of `lazyattn bench` through gnuplot (plot.h). */
#include "bench/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"

bool la_bench_plot_available(void) {
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

/* One colour per method, the same in every plot; with recovery, a darker one of its own. */
static const char *method_color(la_method_spec s) {
    if (s.recompute_first > 0 || s.recompute_ratio > 0.0f) return s.method == LA_METHOD_LAZY ? "#17becf" : "#8c564b";
    switch (s.method) {
    case LA_METHOD_RECOMPUTE: return "#d62728";
    case LA_METHOD_PREFIX: return "#ff7f0e";
    case LA_METHOD_BLOCK: return "#9467bd";
    case LA_METHOD_MEPIC: return "#1f77b4";
    case LA_METHOD_LAZY: return "#2ca02c";
    default: return "#7f7f7f";
    }
}

/* s as a gnuplot double-quoted string: backslash and quote escaped, a newline as \n. */
static void put_quoted(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '\n') {
            fputs("\\n", f);
            continue;
        }
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Line width and point type of the m-th of n series: earlier series draw wider, so a line
 * hidden under a later one with the same values still shows at its edges. */
static double series_lw(int32_t m, int32_t n) { return 1.6 + 0.7 * (n - 1 - m); }
static int series_pt(int32_t m) {
    static const int pt[] = {7, 5, 9, 11, 13, 15};
    return pt[m % 6];
}

typedef struct plot_dir {
    char path[64];
} plot_dir;

static la_status dir_open(plot_dir *d, la_err *err) {
    snprintf(d->path, sizeof d->path, "/tmp/lazyattn-plot-XXXXXX");
    if (!mkdtemp(d->path)) return la_err_set(err, LA_ERR_IO, "--plot: cannot create a temporary directory");
    return LA_OK;
}

static void dir_close(plot_dir *d) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->path);
    if (system(cmd) != 0) {
    } /* a leftover temp dir is harmless */
}

static FILE *dir_file(const plot_dir *d, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", d->path, name);
    return fopen(path, "w");
}

/* The script's first lines: terminal (pngcairo when available), output. */
static void put_terminal(FILE *f, const char *png, int width, int height) {
    static int cairo = -1;
    if (cairo < 0) {
        FILE *p = popen("gnuplot -e 'set terminal' 2>&1", "r");
        char line[256];
        cairo = 0;
        while (p && fgets(line, sizeof line, p))
            if (strstr(line, "pngcairo")) cairo = 1;
        if (p) pclose(p);
    }
    if (cairo)
        fprintf(f, "set terminal pngcairo size %d,%d enhanced font 'DejaVu Sans,11' linewidth 1.3\n", width,
                height);
    else
        fprintf(f, "set terminal png size %d,%d\n", width, height);
    fprintf(f, "set output ");
    put_quoted(f, png);
    fprintf(f, "\nset grid lc rgb '#dddddd'\nset border lc rgb '#555555'\nset key noenhanced\n");
}

/* Run gnuplot on the script; on failure its first stderr line goes into err. */
static la_status run_gnuplot(const plot_dir *d, const char *script, const char *png, la_err *err) {
    char cmd[512], log[256];
    snprintf(log, sizeof log, "%s/gnuplot.log", d->path);
    snprintf(cmd, sizeof cmd, "gnuplot '%s' >'%s' 2>&1", script, log);
    int rc = system(cmd);
    if (rc == 0 && access(png, R_OK) == 0) return LA_OK;
    char first[200] = "", line[200];
    FILE *f = fopen(log, "r"); /* gnuplot's message is its last non-empty line */
    while (f && fgets(line, sizeof line, f))
        if (strspn(line, " \t\n^") < strlen(line)) snprintf(first, sizeof first, "%s", line);
    if (f) fclose(f);
    first[strcspn(first, "\n")] = '\0';
    return la_err_set(err, LA_ERR_IO, "--plot %s: gnuplot failed%s%s", png, first[0] ? ": " : "", first);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- per-request plots ------------------------------------------------------------------ */

la_status la_bench_plot_requests(const char *png, const char *title, const la_method_spec *methods,
                                 const la_bench_sample *const *samples, const int32_t *n,
                                 int32_t n_methods, la_err *err) {
    plot_dir d;
    LA_TRY(dir_open(&d, err));
    la_status s = LA_OK;
    double lo = INFINITY, hi = 0;
    int any = 0;
    for (int32_t m = 0; m < n_methods && s == LA_OK; m++) {
        char path[128], name[32];
        double *v = malloc(sizeof(double) * (size_t)(n[m] + 1));
        int32_t k = 0;
        for (int32_t i = 0; v && i < n[m]; i++)
            if (samples[m][i].ok) v[k++] = samples[m][i].ttft_ms;
        snprintf(name, sizeof name, "cdf%d", m);
        FILE *f = v ? dir_file(&d, name, path, sizeof path) : NULL;
        if (!f) {
            free(v);
            s = la_err_set(err, LA_ERR_IO, "--plot: cannot write a data file");
            break;
        }
        qsort(v, (size_t)k, sizeof(double), cmp_double);
        for (int32_t i = 0; i < k; i++) {
            if (i == 0) fprintf(f, "%g 0\n", v[0]);
            fprintf(f, "%g %g\n", v[i], (double)(i + 1) / k);
            if (v[i] > 0 && v[i] < lo) lo = v[i];
            if (v[i] > hi) hi = v[i];
            any = 1;
        }
        fclose(f);
        free(v);
        snprintf(name, sizeof name, "pts%d", m);
        f = dir_file(&d, name, path, sizeof path);
        if (!f) {
            s = la_err_set(err, LA_ERR_IO, "--plot: cannot write a data file");
            break;
        }
        for (int32_t i = 0; i < n[m]; i++)
            if (samples[m][i].ok) fprintf(f, "%d %g\n", samples[m][i].n_prompt_tokens, samples[m][i].ttft_ms);
        fclose(f);
    }
    char script[128];
    FILE *f = s == LA_OK ? dir_file(&d, "plot.gp", script, sizeof script) : NULL;
    if (s == LA_OK && !f) s = la_err_set(err, LA_ERR_IO, "--plot: cannot write the gnuplot script");
    if (s == LA_OK && !any) s = la_err_set(err, LA_ERR_INVALID_ARG, "--plot: no successful request to plot");
    if (s == LA_OK) {
        bool log_ttft = hi > 0 && lo < INFINITY && hi / lo > 20;
        put_terminal(f, png, 1500, 600);
        fprintf(f, "set multiplot layout 1,2 title ");
        put_quoted(f, title);
        fprintf(f, " font ',13' noenhanced\n");
        fprintf(f, "set title 'TTFT distribution (CDF per method)'\n"
                   "set xlabel 'time to first token (ms)%s'\nset ylabel 'fraction of requests'\n"
                   "set yrange [0:1.02]\nset key bottom right box opaque\n%s",
                log_ttft ? ", log scale" : "", log_ttft ? "set logscale x\n" : "");
        fprintf(f, "plot ");
        for (int32_t m = 0; m < n_methods; m++)
            fprintf(f, "%s'%s/cdf%d' using 1:2 with steps lw %.1f lc rgb '%s' title '%s'",
                    m ? ", \\\n     " : "", d.path, m, series_lw(m, n_methods), method_color(methods[m]),
                    methods[m].name);
        fprintf(f, "\nunset logscale\nset autoscale y\n");
        fprintf(f,
                "set title 'TTFT against context length (one point per request)'\n"
                "set xlabel 'prompt tokens (documents + question)'\nset ylabel 'time to first token (ms)%s'\n"
                "set key top left box opaque\n%s",
                log_ttft ? ", log scale" : "", log_ttft ? "set logscale y\n" : "set yrange [0:*]\n");
        fprintf(f, "plot ");
        for (int32_t m = 0; m < n_methods; m++)
            fprintf(f, "%s'%s/pts%d' using 1:2 with points pt %d ps 1.0 lc rgb '%s' title '%s'",
                    m ? ", \\\n     " : "", d.path, m, series_pt(m), method_color(methods[m]),
                    methods[m].name);
        fprintf(f, "\nunset multiplot\n");
        fclose(f);
        s = run_gnuplot(&d, script, png, err);
    } else if (f) {
        fclose(f);
    }
    dir_close(&d);
    return s;
}

/* ---- sweeps ----------------------------------------------------------------------------- */

la_status la_bench_plot_sweep(const la_bench_sweep_plot *p, la_err *err) {
    plot_dir d;
    LA_TRY(dir_open(&d, err));
    la_status s = LA_OK;
    for (int32_t m = 0; m < p->n_methods && s == LA_OK; m++) {
        char path[128], name[32];
        snprintf(name, sizeof name, "s%d", m);
        FILE *f = dir_file(&d, name, path, sizeof path);
        if (!f) {
            s = la_err_set(err, LA_ERR_IO, "--plot: cannot write a data file");
            break;
        }
        for (int32_t k = 0; k < p->n_points; k++) {
            double x = p->x[k * p->n_methods + m], y = p->y[k * p->n_methods + m];
            if (!isnan(x) && !isnan(y) && (!p->log_y || y > 0)) fprintf(f, "%g %g\n", x, y);
        }
        fclose(f);
    }
    char script[128];
    FILE *f = s == LA_OK ? dir_file(&d, "plot.gp", script, sizeof script) : NULL;
    if (s == LA_OK && !f) s = la_err_set(err, LA_ERR_IO, "--plot: cannot write the gnuplot script");
    if (s == LA_OK) {
        put_terminal(f, p->png, 1000, 640);
        fprintf(f, "set title ");
        put_quoted(f, p->title);
        fprintf(f, " font ',13' noenhanced\nset xlabel ");
        put_quoted(f, p->xlabel);
        fprintf(f, "\nset ylabel ");
        put_quoted(f, p->ylabel);
        fprintf(f, "\nset key outside right top box\n%s", p->log_x ? "set logscale x 2\n" : "");
        double x_lo = INFINITY, x_hi = 0;
        for (int32_t k = 0; k < p->n_points * p->n_methods; k++)
            if (p->x[k] > 0) x_lo = p->x[k] < x_lo ? p->x[k] : x_lo, x_hi = p->x[k] > x_hi ? p->x[k] : x_hi;
        if (p->log_x && x_hi > 0) fprintf(f, "set xrange [%g:%g]\n", x_lo / 1.25, x_hi * 1.25);
        if (p->ticks_at_points) {
            fprintf(f, "set xtics (");
            for (int32_t k = 0; k < p->n_points; k++) {
                double x = p->x[k * p->n_methods];
                fprintf(f, "%s\"%.4g\" %g", k ? ", " : "", x >= 100 ? round(x) : x, x);
            }
            fprintf(f, ")\n");
        }
        if (p->y_max > 0) fprintf(f, "set yrange [0:%g]\n", p->y_max);
        else fprintf(f, "%s", p->log_y ? "set logscale y\n" : "set yrange [0:*]\n");
        fprintf(f, "plot ");
        for (int32_t m = 0; m < p->n_methods; m++)
            fprintf(f, "%s'%s/s%d' using 1:2 with linespoints lw %.1f pt %d ps 1.4 lc rgb '%s' title '%s'",
                    m ? ", \\\n     " : "", d.path, m, series_lw(m, p->n_methods), series_pt(m),
                    method_color(p->methods[m]), p->methods[m].name);
        fprintf(f, "\n");
        fclose(f);
        s = run_gnuplot(&d, script, p->png, err);
    } else if (f) {
        fclose(f);
    }
    dir_close(&d);
    return s;
}
