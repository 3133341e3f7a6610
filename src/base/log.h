/* One-line diagnostics on stderr ("lazyattn: <message>"), for what a library layer must
 * tell the operator without failing anything: a tier that went down or came back, a
 * setting that had no effect. Thread-safe (one fprintf per line). */
#ifndef LA_BASE_LOG_H
#define LA_BASE_LOG_H

#include <stdbool.h>

/* Print "lazyattn: " + the formatted message + "\n" to stderr, unless logging is off. */
void la_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Turn la_log off (tests that provoke failures on purpose) or back on. */
void la_log_enable(bool on);

#endif
