/* Plots of `lazyattn bench --plot FILE.png`, drawn by the gnuplot program (Debian's gnuplot or
 * gnuplot-nox; not a build dependency: --plot fails with a message naming the package when it
 * is missing). The pngcairo terminal is used when gnuplot has it, else png. Each method keeps
 * one colour in every plot.
 */
#ifndef LA_BENCH_PLOT_H
#define LA_BENCH_PLOT_H

#include <stdbool.h>

#include "bench/driver.h"
#include "bench/method_spec.h"

/* Whether `gnuplot` is on PATH. */
bool la_bench_plot_available(void);

/* The message for a missing gnuplot. */
#define LA_BENCH_PLOT_MISSING \
    "--plot needs the gnuplot program, which is not on PATH (apt-get install gnuplot-nox)"

/* Two panels: the TTFT CDF per method, and TTFT against the request's prompt tokens (one
 * point per request). samples[m] holds n[m] samples of methods[m]; failed ones are skipped.
 * Errors: LA_ERR_IO (temporary files, gnuplot failed: its first line of stderr). */
la_status la_bench_plot_requests(const char *png, const char *title, const la_method_spec *methods,
                                 const la_bench_sample *const *samples, const int32_t *n,
                                 int32_t n_methods, la_err *err);

/* One panel: a line per method through its points (x[p * n_methods + m], y[...] likewise;
 * NAN points are skipped). Errors: as la_bench_plot_requests. */
typedef struct la_bench_sweep_plot {
    const char *png, *title, *xlabel, *ylabel;
    bool log_x, log_y;
    double y_max;               /* > 0: the y axis runs 0..y_max (percentages) */
    bool ticks_at_points;       /* x tics at the first method's x values */
    const la_method_spec *methods;
    int32_t n_methods, n_points;
    const double *x, *y;
} la_bench_sweep_plot;

la_status la_bench_plot_sweep(const la_bench_sweep_plot *p, la_err *err);

#endif
