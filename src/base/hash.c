#include "base/hash.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/err.h"

_Static_assert(LA_HASH_SECRET_BYTES >= XXH3_SECRET_SIZE_MIN, "XXH3 secret too short");

static la_hash_key g_key;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;

void la_hash_key_random(la_hash_key *k) {
    size_t got = 0;
    while (got < sizeof k->secret) {
        ssize_t n = getrandom(k->secret + got, sizeof k->secret - got, 0);
        if (n <= 0) break;
        got += (size_t)n;
    }
    LA_ASSERT(got == sizeof k->secret); /* the kernel always has entropy after boot */
}

void la_hash_key_derive(la_hash_key *k, const void *seed, size_t len) {
    XXH3_generateSecret(k->secret, sizeof k->secret, seed, len);
}

static void make_process_key(void) { la_hash_key_random(&g_key); }

void la_hasher_init(la_hasher *h) {
    pthread_once(&g_key_once, make_process_key);
    la_hasher_init_key(h, &g_key);
}

void la_hasher_init_key(la_hasher *h, const la_hash_key *k) {
    XXH3_128bits_reset_withSecret(&h->state, k->secret, sizeof k->secret);
}

void la_hasher_update(la_hasher *h, const void *data, size_t len) {
    XXH3_128bits_update(&h->state, data, len);
}

la_hash128 la_hasher_digest(const la_hasher *h) {
    XXH128_hash_t d = XXH3_128bits_digest(&h->state);
    la_hash128 r = {d.low64, d.high64};
    return r;
}
