/* Small helpers shared by the CLI subcommands: number parsing with messages, string lists,
 * the progress bar. */
#ifndef LA_CLI_CLI_UTIL_H
#define LA_CLI_CLI_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

/* Parse a whole decimal number; on failure print "lazyattn: <flag>: ..." and return 2. */
int la_cli_parse_i32(const char *s, const char *flag, int32_t *out);
int la_cli_parse_i64(const char *s, const char *flag, int64_t *out);
int la_cli_parse_f32(const char *s, const char *flag, float *out);
/* Whether s is a decimal number as a flag takes one: [-]digits[.digits] with a digit somewhere
 * (no exponent, hex, inf, '+' or spaces, which strtod would also read). */
bool la_cli_is_decimal(const char *s);

/* A growable list of borrowed strings (items are not freed by la_cli_strings_free). */
typedef struct la_cli_strings {
    char **items;
    int n, cap;
} la_cli_strings;
void la_cli_strings_push(la_cli_strings *l, char *s);
void la_cli_strings_free(la_cli_strings *l);

/* A progress bar on stderr, drawn only when stderr is a terminal (tty), at most every
 * 100 ms unless forced or complete:
 *   "\r[#####     ] done/total  <label, 28 wide> <seconds>s<extra>" */
typedef struct la_cli_progress {
    int64_t done, total;
    double t0_ms, t_drawn_ms;  /* la_now_ms() at the start and at the last draw */
    const char *label;         /* what runs now (may change between draws; "" : nothing) */
    char extra[96];            /* appended as it is (rates: " 12.3 docs/s") */
    bool tty;
} la_cli_progress;

/* Off a terminal, a plain progress line at most this often (ms). */
#define LA_CLI_PROGRESS_LOG_MS 30000.0

/* A bar starting now; tty from isatty(stderr). Off a terminal (tty false) draw() prints a
 * plain line ("progress: done/total label seconds") every LA_CLI_PROGRESS_LOG_MS instead;
 * force does not make it print. */
void la_cli_progress_init(la_cli_progress *p, int64_t total);
void la_cli_progress_draw(la_cli_progress *p, bool force);
/* On a terminal, the bar's last draw (forced) and the newline that ends it; nothing off one
 * (its log lines end themselves). */
void la_cli_progress_end(la_cli_progress *p);

#endif
