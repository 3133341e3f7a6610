/* Method specs (method_spec.h). */
#include "bench/method_spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

la_method_spec la_method_spec_plain(la_method m) {
    la_method_spec s = {.method = m};
    snprintf(s.name, sizeof s.name, "%s", la_method_name(m));
    return s;
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
    if (plus) {
        const char *num = plus + 1;
        char *end;
        errno = 0;
        long v = num[0] == 'r' ? strtol(num + 1, &end, 10) : 0;
        if (num[0] != 'r' || end == num + 1 || *end || errno || v < 1 || v > INT32_MAX || num[1] == '+' ||
            num[1] == '-' || num[1] == ' ')
            return la_err_set(err, LA_ERR_INVALID_ARG,
                              "'%s': after '+' comes rN, recovery's N (tokens recomputed per document, >= 1), "
                              "as in lazy+r16", s);
        if (!la_method_is_blockwise(spec.method))
            return la_err_set(err, LA_ERR_INVALID_ARG,
                              "'%s': recovery applies to the block-wise methods (lazy, block, mepic, block-ref)", s);
        spec.recompute_first = (int32_t)v;
    }
    snprintf(spec.name, sizeof spec.name, "%s", s);
    *out = spec;
    return LA_OK;
}
