/* Collision-resistant 128-bit block hashes for the KV cache index (DESIGN.md §5):
 * XXH3-128 (Debian libxxhash) keyed with a secret, so hashes cannot be predicted or forged
 * by anyone who does not hold it. The secret is a random per-process one by default, or a
 * key derived from a deployment secret shared by the replicas of one deployment (the KV
 * store's records and KV events name documents by hashes that must agree across
 * processes: DESIGN.md §9). */
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

/* An XXH3 secret (XXH3 needs >= XXH3_SECRET_SIZE_MIN = 136 bytes). */
#define LA_HASH_SECRET_BYTES 192
typedef struct la_hash_key {
    unsigned char secret[LA_HASH_SECRET_BYTES];
} la_hash_key;

/* A fresh random key (getrandom). */
void la_hash_key_random(la_hash_key *k);
/* The key derived from seed[0:len] (any bytes, e.g. a deployment secret file):
 * XXH3_generateSecret, so equal seeds give equal keys in every process. */
void la_hash_key_derive(la_hash_key *k, const void *seed, size_t len);

/* Streaming hasher: init, update any number of times, digest. */
typedef struct la_hasher {
    XXH3_state_t state;
} la_hasher;

/* Starts a stream keyed with the per-process secret (drawn from getrandom() on first use). */
void la_hasher_init(la_hasher *h);
/* Starts a stream keyed with k (borrowed: k must outlive the stream; XXH3 keeps a pointer). */
void la_hasher_init_key(la_hasher *h, const la_hash_key *k);
void la_hasher_update(la_hasher *h, const void *data, size_t len);
la_hash128 la_hasher_digest(const la_hasher *h);

#endif
