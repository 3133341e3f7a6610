#include "base/env.h"

#include <errno.h>
#include <stdlib.h>

la_status la_env_int(const char *name, int64_t lo, int64_t hi, const char *unit, int64_t *v, la_err *err) {
    const char *e = getenv(name);
    if (!e || !*e) return LA_OK;
    char *end;
    errno = 0;
    long long x = strtoll(e, &end, 10);
    if (*end || errno || x < lo || x > hi) {
        if (hi == INT64_MAX)
            return la_err_set(err, LA_ERR_INVALID_ARG, "%s=%s: expected %lld or more (%s)", name, e, (long long)lo, unit);
        return la_err_set(err, LA_ERR_INVALID_ARG, "%s=%s: expected %lld to %lld (%s)", name, e, (long long)lo,
                          (long long)hi, unit);
    }
    *v = (int64_t)x;
    return LA_OK;
}
