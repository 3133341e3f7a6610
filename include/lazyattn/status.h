/* lazyattn: status codes and error values shared by every layer.
 *
 * A fallible function returns la_status and takes `la_err *err` last. On failure it
 * writes one sentence naming the input and the offending value into err->msg
 * (err may be NULL when the caller does not want the text).
 */
#ifndef LAZYATTN_STATUS_H
#define LAZYATTN_STATUS_H

#include "lazyattn/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum la_status {
    LA_OK = 0,
    LA_ERR_INVALID_ARG,   /* bad argument or request field */
    LA_ERR_IO,            /* file missing, unreadable, mmap failed */
    LA_ERR_FORMAT,        /* a file's content is malformed (JSON, safetensors, tokenizer) */
    LA_ERR_UNSUPPORTED,   /* valid input that this engine does not implement */
    LA_ERR_NO_MEMORY,     /* host or device allocation failed */
    LA_ERR_NO_SPACE,      /* KV pool has no free block even after eviction */
    LA_ERR_NOT_FOUND,     /* unknown id, name or route */
    LA_ERR_TOO_LONG,      /* prompt + documents exceed the context or a limit */
    LA_ERR_CANCELLED,     /* request cancelled by the caller */
    LA_ERR_BUSY,          /* queue full: try again later */
    LA_ERR_BACKEND,       /* CUDA / cuBLAS / BLAS failure */
    LA_ERR_INTERNAL,      /* a bug: an invariant did not hold */
    LA_STATUS_COUNT
} la_status;

#define LA_ERR_MSG_LEN 512

/* Frozen layout (lazyattn/abi.h). */
typedef struct la_err {
    la_status code;
    char msg[LA_ERR_MSG_LEN];
} la_err;

/* Stable lower-case name of a status ("ok", "invalid_arg", ...). Never NULL. */
LA_API const char *la_status_name(la_status s);

/* Default one-line description of a status. Never NULL. */
LA_API const char *la_status_describe(la_status s);

#ifdef __cplusplus
}
#endif
#endif
