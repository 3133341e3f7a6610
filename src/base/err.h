/* Error helpers (module-private to the engine; the public type is in
 * include/lazyattn/status.h). */
#ifndef LA_BASE_ERR_H
#define LA_BASE_ERR_H

#include <stdio.h>
#include <stdlib.h>
#include "lazyattn/status.h"

/* Record `code` and a printf-formatted message in err (if non-NULL); returns code so
 * callers can write `return la_err_set(err, LA_ERR_IO, "%s: %s", path, strerror(errno));`. */
la_status la_err_set(la_err *err, la_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the message already in err with "prefix: " (keeps the code). Returns err->code,
 * or LA_OK when err is NULL. */
la_status la_err_prefix(la_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reset err to LA_OK with an empty message. */
void la_err_clear(la_err *err);

/* Guards our own invariants (a bug), never user input. Prints and aborts. */
#define LA_ASSERT(cond)                                                              \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "lazyattn: internal error: %s (%s:%d)\n", #cond,         \
                    __FILE__, __LINE__);                                             \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* Propagate a non-OK status. */
#define LA_TRY(expr)                                                                 \
    do {                                                                             \
        la_status la_try_s_ = (expr);                                                \
        if (la_try_s_ != LA_OK) return la_try_s_;                                    \
    } while (0)

#endif
