/* A method as `lazyattn bench` and `lazyattn eval` run it: an engine method and recovery's N
 * (kv/plan.h "Recovery"; 0: none). Written "lazy", or "lazy+r16" for lazy with the first 16
 * tokens of every document after the first recomputed in context. */
#ifndef LA_BENCH_METHOD_SPEC_H
#define LA_BENCH_METHOD_SPEC_H

#include <stdint.h>

#include "base/err.h"
#include "lazyattn/lazyattn.h"

/* Methods one bench or eval run compares at most. */
#define LA_BENCH_MAX_METHODS 12

typedef struct la_method_spec {
    la_method method;
    int32_t recompute_first; /* >= 0; > 0 only for the block-wise methods */
    char name[32];           /* as written: "lazy", "lazy+r16" */
} la_method_spec;

/* Parse "METHOD" or "METHOD+rN" (N a decimal count of tokens, 1 .. 2^31 - 1; block-wise
 * methods only). Errors: LA_ERR_INVALID_ARG with a message naming what is wrong. */
la_status la_method_spec_parse(const char *s, la_method_spec *out, la_err *err);

/* The spec of a plain method (recompute_first 0). */
la_method_spec la_method_spec_plain(la_method m);

#endif
