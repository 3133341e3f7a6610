/* Integer knobs from the environment (benchmark switches and test hooks: LA_ATTN_SPLIT_CTAS,
 * LA_CPU_GEMM_MAX_ROWS, ...), one parse and one message for all of them. */
#ifndef LA_BASE_ENV_H
#define LA_BASE_ENV_H

#include <stdint.h>

#include "base/err.h"

/* The whole number in environment variable `name` into *v, which must lie in [lo, hi]
 * (hi INT64_MAX: no upper bound). Unset or empty: LA_OK, *v unchanged. Anything else
 * (not a number, trailing characters, out of range) is LA_ERR_INVALID_ARG, "NAME=VALUE:
 * expected LO to HI (unit)", *v unchanged. */
la_status la_env_int(const char *name, int64_t lo, int64_t hi, const char *unit, int64_t *v, la_err *err);

#endif
