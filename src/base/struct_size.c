/* Sized structs of the public ABI (struct_size.h). */
#include "base/struct_size.h"

#include <string.h>

#include "base/err.h"

#define LA_STRUCT_SIZE_MAX ((size_t)1 << 16)

la_status la_struct_copy_in(void *dst, size_t dst_size, const void *src, const char *name, la_err *err) {
    size_t src_size;
    memcpy(&src_size, src, sizeof src_size);
    if (src_size < sizeof(size_t) || src_size > LA_STRUCT_SIZE_MAX)
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "%s.struct_size=%zu: initialize it with %s_init()", name, src_size, name);
    const unsigned char *s = src;
    for (size_t i = dst_size; i < src_size; i++)
        if (s[i])
            return la_err_set(err, LA_ERR_UNSUPPORTED,
                              "%s: byte %zu of the caller's %zu-byte struct is set, past the %zu "
                              "bytes of this library (%s): a field it does not know",
                              name, i, src_size, dst_size, LA_VERSION_STRING);
    memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
    memcpy(dst, &dst_size, sizeof dst_size);
    return LA_OK;
}

void la_struct_copy_out(void *dst, size_t dst_size, const void *src, size_t src_size) {
    size_t n = dst_size < src_size ? dst_size : src_size;
    memcpy(dst, src, n);
    if (dst_size > n) memset((unsigned char *)dst + n, 0, dst_size - n);
}
