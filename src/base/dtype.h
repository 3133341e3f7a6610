/* Element types of tensors on disk and in memory, and scalar conversions.
 * bf16: the upper 16 bits of an IEEE-754 binary32. f16: IEEE-754 binary16. */
#ifndef LA_BASE_DTYPE_H
#define LA_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum la_dtype { LA_DTYPE_F32 = 0, LA_DTYPE_F16, LA_DTYPE_BF16, LA_DTYPE_COUNT } la_dtype;

/* Bytes per element. */
static inline size_t la_dtype_size(la_dtype t) { return t == LA_DTYPE_F32 ? 4 : 2; }
/* "F32", "F16", "BF16" (safetensors spelling). */
const char *la_dtype_name(la_dtype t);

static inline float la_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, NaN kept quiet (as torch does). */
static inline uint16_t la_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float la_f16_to_f32(uint16_t h);
uint16_t la_f32_to_f16(float f);

/* Convert n elements of type t at src (any alignment) to f32 at dst. */
void la_convert_to_f32(float *dst, const void *src, la_dtype t, size_t n);

#endif
