/* la_hmap: an open-addressing map from 128-bit hashes (base/hash.h) to int64 values, for
 * indexes keyed by block or record hashes. The keys are already uniform (keyed XXH3), so
 * the low bits pick the slot. Linear probing, tombstones, grows at half full.
 * Not thread-safe. */
#ifndef LA_BASE_HASH_MAP_H
#define LA_BASE_HASH_MAP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/hash.h"

typedef struct la_hmap_slot {
    la_hash128 key;
    int64_t value;
    uint8_t state; /* 0 empty, 1 used, 2 removed */
} la_hmap_slot;

typedef struct la_hmap {
    la_hmap_slot *slots;
    int64_t cap;    /* power of two, or 0 before the first put */
    int64_t n_used; /* live entries */
    int64_t n_dead; /* tombstones */
} la_hmap;

/* A zeroed la_hmap is empty and valid; la_hmap_fini frees it (and leaves it empty). */
void la_hmap_fini(la_hmap *m);
/* The value under key, or false when absent. */
bool la_hmap_get(const la_hmap *m, la_hash128 key, int64_t *value);
/* Insert or replace. Returns false when memory ran out (the map is unchanged). */
bool la_hmap_put(la_hmap *m, la_hash128 key, int64_t value);
/* Remove key; returns whether it was there. */
bool la_hmap_remove(la_hmap *m, la_hash128 key);

#endif
