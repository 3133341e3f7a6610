/* Collision-resistant 128-bit block hashes for the KV cache index (DESIGN.md §5):
 * XXH3-128 (Debian libxxhash) keyed with a random per-process secret, so hashes cannot
 * be predicted or forged from outside the process. */
#ifndef LA_BASE_HASH_H
#define LA_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t is a complete type */
#include <xxhash.h>

typedef struct la_hash128 {
    uint64_t lo, hi;
} la_hash128;

static inline int la_hash128_eq(la_hash128 a, la_hash128 b) { return a.lo == b.lo && a.hi == b.hi; }

/* Streaming hasher: init, update any number of times, digest. */
typedef struct la_hasher {
    XXH3_state_t state;
} la_hasher;

/* Starts a keyed stream. The secret is drawn from getrandom() on first use. */
void la_hasher_init(la_hasher *h);
void la_hasher_update(la_hasher *h, const void *data, size_t len);
la_hash128 la_hasher_digest(const la_hasher *h);

#endif
