#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

static atomic_bool g_off;

void la_log_enable(bool on) { atomic_store(&g_off, !on); }

void la_log(const char *fmt, ...) {
    if (atomic_load(&g_off)) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "lazyattn: %s\n", line);
}
