/* A method as `lazyattn bench` and `lazyattn eval` run it: an engine method and recovery's N
 * and R (kv/plan.h "Recovery"; 0: none). Written "lazy"; "lazy+r16" for lazy with the first
 * 16 tokens of every document after the first recomputed in context; "lazy+c15" for lazy
 * with the 15% of those documents' tokens that the probe finds most changed by context
 * recomputed (selected recovery, CacheBlend); "lazy+r4+c15" for both; "lazy+pre" for lazy
 * with its documents computed after the preamble (la_doc_context PREAMBLE; lazy, block,
 * mepic), "lazy+pre+c15" with selected recovery on top. */
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
    float recompute_ratio;   /* in [0, 1]; > 0 only for the block-wise methods */
    la_doc_context doc_context; /* ALONE, or PREAMBLE ("+pre": lazy, block, mepic) */
    char name[32];           /* as written: "lazy", "lazy+r16" */
} la_method_spec;

/* Parse "METHOD" followed by any of "+rN", "+cP", "+pre", each at most once (N a decimal count
 * of tokens, 1 .. 2^31 - 1; P a decimal percentage in (0, 100]; block-wise methods only;
 * pre: lazy, block, mepic). Errors:
 * LA_ERR_INVALID_ARG with a message naming what is wrong. */
la_status la_method_spec_parse(const char *s, la_method_spec *out, la_err *err);

/* R as a JSON number: the float rounded to 6 decimals (0.2, not 0.20000000298). */
double la_method_spec_ratio_json(float ratio);

/* The spec of a plain method (no recovery). */
la_method_spec la_method_spec_plain(la_method m);

#endif
