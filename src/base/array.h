/* Growable arrays: the one place that doubles a capacity. */
#ifndef LA_BASE_ARRAY_H
#define LA_BASE_ARRAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Make *arr (an array of elem-byte elements with room for *cap) hold at least need:
 * the capacity doubles from min_cap until it does (realloc). Returns false when memory ran
 * out; then *arr and *cap are as they were. */
bool la_array_reserve(void **arr, int64_t *cap, int64_t need, size_t elem, int64_t min_cap);

#endif
