#include "base/hash.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/err.h"

/* 192 random bytes (XXH3 needs >= XXH3_SECRET_SIZE_MIN = 136). */
static unsigned char g_secret[192];
static pthread_once_t g_secret_once = PTHREAD_ONCE_INIT;

static void make_secret(void) {
    size_t got = 0;
    while (got < sizeof g_secret) {
        ssize_t n = getrandom(g_secret + got, sizeof g_secret - got, 0);
        if (n <= 0) break;
        got += (size_t)n;
    }
    LA_ASSERT(got == sizeof g_secret); /* the kernel always has entropy after boot */
}

void la_hasher_init(la_hasher *h) {
    pthread_once(&g_secret_once, make_secret);
    XXH3_128bits_reset_withSecret(&h->state, g_secret, sizeof g_secret);
}

void la_hasher_update(la_hasher *h, const void *data, size_t len) {
    XXH3_128bits_update(&h->state, data, len);
}

la_hash128 la_hasher_digest(const la_hasher *h) {
    XXH128_hash_t d = XXH3_128bits_digest(&h->state);
    la_hash128 r = {d.low64, d.high64};
    return r;
}
