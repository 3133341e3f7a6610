#include "base/array.h"

#include <stdlib.h>

bool la_array_reserve(void **arr, int64_t *cap, int64_t need, size_t elem, int64_t min_cap) {
    if (need <= *cap) return true;
    int64_t c = *cap > 0 ? *cap : (min_cap > 0 ? min_cap : 1);
    while (c < need) c *= 2;
    void *p = realloc(*arr, elem * (size_t)c);
    if (!p) return false;
    *arr = p;
    *cap = c;
    return true;
}
