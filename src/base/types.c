#include <string.h>

#include "base/err.h"
#include "lazyattn/types.h"

static const char *const k_method_names[LA_METHOD_COUNT] = {
    [LA_METHOD_RECOMPUTE] = "recompute", [LA_METHOD_PREFIX] = "prefix",
    [LA_METHOD_BLOCK] = "block",         [LA_METHOD_MEPIC] = "mepic",
    [LA_METHOD_LAZY] = "lazy",           [LA_METHOD_BLOCK_REF] = "block-ref",
};

const char *la_method_name(la_method m) {
    return (unsigned)m < LA_METHOD_COUNT ? k_method_names[m] : "unknown";
}

la_status la_method_parse(const char *s, la_method *out, la_err *err) {
    for (int m = 0; m < LA_METHOD_COUNT; m++)
        if (!strcmp(s, k_method_names[m])) {
            *out = (la_method)m;
            return LA_OK;
        }
    return la_err_set(err, LA_ERR_INVALID_ARG,
                      "unknown method '%s' (choose recompute, prefix, block, mepic, lazy, block-ref)",
                      s);
}

bool la_method_caches_docs(la_method m) {
    return m == LA_METHOD_BLOCK || m == LA_METHOD_MEPIC || m == LA_METHOD_LAZY;
}

bool la_method_is_blockwise(la_method m) {
    return m == LA_METHOD_BLOCK || m == LA_METHOD_MEPIC || m == LA_METHOD_LAZY ||
           m == LA_METHOD_BLOCK_REF;
}

const char *la_doc_context_name(la_doc_context c) {
    return c == LA_DOC_CONTEXT_ALONE ? "alone" : c == LA_DOC_CONTEXT_PREAMBLE ? "preamble" : "unknown";
}

la_status la_doc_context_parse(const char *s, la_doc_context *out, la_err *err) {
    for (int c = 0; c < LA_DOC_CONTEXT_COUNT; c++)
        if (!strcmp(s, la_doc_context_name((la_doc_context)c))) {
            *out = (la_doc_context)c;
            return LA_OK;
        }
    return la_err_set(err, LA_ERR_INVALID_ARG, "unknown doc context '%s' (choose alone, preamble)", s);
}

la_status la_device_parse(const char *s, la_device *out, la_err *err) {
    if (!strcmp(s, "cpu")) {
        *out = LA_DEVICE_CPU;
        return LA_OK;
    }
    if (!strcmp(s, "cuda")) {
        *out = LA_DEVICE_CUDA;
        return LA_OK;
    }
    return la_err_set(err, LA_ERR_INVALID_ARG, "device '%s' is not one of cpu, cuda", s);
}
