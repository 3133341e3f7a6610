#include "base/err.h"

#include <stdarg.h>
#include <string.h>

/* One table: code, name, default description. server/ maps codes to HTTP statuses. */
static const struct {
    const char *name;
    const char *describe;
} k_status_table[LA_STATUS_COUNT] = {
    [LA_OK] = {"ok", "success"},
    [LA_ERR_INVALID_ARG] = {"invalid_arg", "invalid argument"},
    [LA_ERR_IO] = {"io", "input/output error"},
    [LA_ERR_FORMAT] = {"format", "malformed file"},
    [LA_ERR_UNSUPPORTED] = {"unsupported", "not supported"},
    [LA_ERR_NO_MEMORY] = {"no_memory", "out of memory"},
    [LA_ERR_NO_SPACE] = {"no_space", "KV cache full"},
    [LA_ERR_NOT_FOUND] = {"not_found", "not found"},
    [LA_ERR_TOO_LONG] = {"too_long", "input too long"},
    [LA_ERR_CANCELLED] = {"cancelled", "cancelled"},
    [LA_ERR_BUSY] = {"busy", "queue full"},
    [LA_ERR_BACKEND] = {"backend", "backend failure"},
    [LA_ERR_INTERNAL] = {"internal", "internal error"},
};

const char *la_status_name(la_status s) {
    if ((unsigned)s >= LA_STATUS_COUNT) return "unknown";
    return k_status_table[s].name;
}

const char *la_status_describe(la_status s) {
    if ((unsigned)s >= LA_STATUS_COUNT) return "unknown status";
    return k_status_table[s].describe;
}

la_status la_err_set(la_err *err, la_status code, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

la_status la_err_prefix(la_err *err, const char *fmt, ...) {
    if (!err) return LA_OK;
    char prefix[LA_ERR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    char old[LA_ERR_MSG_LEN];
    memcpy(old, err->msg, sizeof old);
    /* "prefix: old", truncated to the buffer */
    size_t n = strlen(prefix), cap = sizeof err->msg - 1;
    if (n > cap) n = cap;
    memcpy(err->msg, prefix, n);
    const char *parts[2] = {": ", old};
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(parts[i]);
        if (k > cap - n) k = cap - n;
        memcpy(err->msg + n, parts[i], k);
        n += k;
    }
    err->msg[n] = '\0';
    return err->code;
}

void la_err_clear(la_err *err) {
    if (!err) return;
    err->code = LA_OK;
    err->msg[0] = '\0';
}
