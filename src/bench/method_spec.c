/* Method specs (method_spec.h). */
#include "bench/method_spec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

la_method_spec la_method_spec_plain(la_method m) {
    la_method_spec s = {.method = m};
    snprintf(s.name, sizeof s.name, "%s", la_method_name(m));
    return s;
}

/* One "+..." part of a spec: rN or cP. */
static la_status parse_part(const char *s, const char *part, size_t n, la_method_spec *spec, la_err *err) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) goto bad;
    memcpy(buf, part, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    if (buf[0] == 'r' && !spec->recompute_first && buf[1] >= '0' && buf[1] <= '9') {
        long v = strtol(buf + 1, &end, 10);
        if (*end || errno || v < 1 || v > INT32_MAX) goto bad;
        spec->recompute_first = (int32_t)v;
        return LA_OK;
    }
    if (buf[0] == 'c' && spec->recompute_ratio == 0.0f && ((buf[1] >= '0' && buf[1] <= '9') || buf[1] == '.')) {
        double v = strtod(buf + 1, &end);
        if (*end || errno || !(v > 0.0 && v <= 100.0)) goto bad;
        spec->recompute_ratio = (float)(v / 100.0);
        return LA_OK;
    }
    if (!strcmp(buf, "pre") && spec->doc_context == LA_DOC_CONTEXT_ALONE) {
        spec->doc_context = LA_DOC_CONTEXT_PREAMBLE;
        return LA_OK;
    }
bad:
    return la_err_set(err, LA_ERR_INVALID_ARG,
                      "'%s': after '+' comes rN, recovery's N (tokens recomputed per document, >= 1), cP, "
                      "selected recovery's percentage of tokens (0 < P <= 100), or pre (documents computed after "
                      "the preamble), each at most once, as in lazy+r16, lazy+c15, lazy+r4+c15, lazy+pre+c15", s);
}

la_status la_method_spec_parse(const char *s, la_method_spec *out, la_err *err) {
    const char *plus = strchr(s, '+');
    char head[32];
    size_t n = plus ? (size_t)(plus - s) : strlen(s);
    if (n >= sizeof head) return la_err_set(err, LA_ERR_INVALID_ARG, "unknown method '%s'", s);
    memcpy(head, s, n);
    head[n] = '\0';
    la_method_spec spec = {0};
    LA_TRY(la_method_parse(head, &spec.method, err));
    while (plus) {
        const char *part = plus + 1, *next = strchr(part, '+');
        LA_TRY(parse_part(s, part, next ? (size_t)(next - part) : strlen(part), &spec, err));
        plus = next;
    }
    if ((spec.recompute_first || spec.recompute_ratio > 0.0f) && !la_method_is_blockwise(spec.method))
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "'%s': recovery applies to the block-wise methods (lazy, block, mepic, block-ref)", s);
    if (spec.doc_context == LA_DOC_CONTEXT_PREAMBLE && spec.method != LA_METHOD_LAZY &&
        spec.method != LA_METHOD_BLOCK && spec.method != LA_METHOD_MEPIC)
        return la_err_set(err, LA_ERR_INVALID_ARG, "'%s': pre applies to the methods that cache documents (lazy, "
                          "block, mepic)", s);
    if (strlen(s) >= sizeof spec.name) return la_err_set(err, LA_ERR_INVALID_ARG, "'%s': a name too long", s);
    snprintf(spec.name, sizeof spec.name, "%s", s);
    *out = spec;
    return LA_OK;
}

double la_method_spec_ratio_json(float ratio) { return (double)llround((double)ratio * 1e6) / 1e6; }
