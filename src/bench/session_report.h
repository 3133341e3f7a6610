/* What a `lazyattn bench` session (bench/session.h) reports: the text tables, the JSON of
 * every number with the machine, model, commit and command, and the plots (bench/plot.h). */
#ifndef LA_BENCH_SESSION_REPORT_H
#define LA_BENCH_SESSION_REPORT_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "bench/session.h"

/* The lines before the first point: model, device, dataset, load, warm-up policy. */
void la_bench_session_print_header(const la_bench_session *b, FILE *f);

/* The results of point k once every method ran there: without a sweep the table of
 * la_bench_print_table(), with one a line per method of the point's main numbers. */
void la_bench_session_print_point(const la_bench_session *b, int32_t k, FILE *f);

/* A sweep's summary: its main number (document hit ratio, TTFT or TPOT) by point and method. */
void la_bench_session_print_sweep(const la_bench_session *b, FILE *f);

/* Every number of the session; argv[argc]: the command line to record. Caller owns it. */
cJSON *la_bench_session_json(const la_bench_session *b, int argc, char **argv);

/* Without a sweep the TTFT CDF and TTFT against context length, else the sweep's main number
 * against its points, written to png (parent directories created). Errors: those of
 * bench/plot.h, LA_ERR_NO_MEMORY. */
la_status la_bench_session_plot(const la_bench_session *b, const char *png, la_err *err);

#endif
