/* Small helpers shared by the CLI subcommands: number parsing with messages, string lists. */
#ifndef LA_CLI_CLI_UTIL_H
#define LA_CLI_CLI_UTIL_H

#include <stdint.h>
#include <unistd.h>

/* Parse a whole decimal number; on failure print "lazyattn: <flag>: ..." and return 2. */
int la_cli_parse_i32(const char *s, const char *flag, int32_t *out);
int la_cli_parse_i64(const char *s, const char *flag, int64_t *out);
int la_cli_parse_f32(const char *s, const char *flag, float *out);

/* A growable list of borrowed strings (items are not freed by la_cli_strings_free). */
typedef struct la_cli_strings {
    char **items;
    int n, cap;
} la_cli_strings;
void la_cli_strings_push(la_cli_strings *l, char *s);
void la_cli_strings_free(la_cli_strings *l);

#endif
