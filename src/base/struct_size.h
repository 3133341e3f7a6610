/* Sized structs of the public ABI (include/lazyattn/abi.h): a caller built against another
 * header may hand the library a struct shorter or longer than the library's own. */
#ifndef LA_BASE_STRUCT_SIZE_H
#define LA_BASE_STRUCT_SIZE_H

#include <stddef.h>
#include "lazyattn/status.h"

/* Copy a caller's struct that starts with `size_t struct_size` into the library's `dst`
 * (dst_size bytes, already holding the library's defaults): the caller's struct_size bytes
 * replace dst's first bytes and the defaults stay for the fields after them; bytes past
 * dst_size must be zero (a field this library does not know). dst's struct_size is set to
 * dst_size. `name` names the struct in messages.
 * Errors (dst unchanged): LA_ERR_INVALID_ARG (struct_size 0 or under sizeof(size_t): not
 * initialized; over 64 KiB: garbage), LA_ERR_UNSUPPORTED (a non-zero byte past dst_size). */
la_status la_struct_copy_in(void *dst, size_t dst_size, const void *src, const char *name, la_err *err);

/* Copy the library's `src` (src_size bytes) into a caller's struct of dst_size bytes: the
 * first min(dst_size, src_size) bytes, zeros after them. */
void la_struct_copy_out(void *dst, size_t dst_size, const void *src, size_t src_size);

#endif
