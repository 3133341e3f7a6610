/* The shared tier on Redis / Valkey (kv/store/redis_tier.c). */
#ifndef LA_KV_STORE_REDIS_TIER_H
#define LA_KV_STORE_REDIS_TIER_H

#include <stddef.h>

#include "kv/store/tier.h"

typedef struct la_redis_url {
    char host[256];
    int port;          /* 6379 when absent */
    int db;            /* 0 when absent */
    char user[128];    /* empty: none (Redis 6 ACL user) */
    char password[256];/* empty: none */
} la_redis_url;

/* Parse redis://[[USER]:PASSWORD@]HOST[:PORT][/DB].
 * Errors: LA_ERR_INVALID_ARG (malformed, naming the part), LA_ERR_UNSUPPORTED (rediss://:
 * this hiredis has no TLS). */
la_status la_redis_url_parse(const char *url, la_redis_url *out, la_err *err);

/* A tier on the store at url, each command bounded by timeout_ms (<= 0: 2000). It connects
 * once now: a refused password is LA_ERR_INVALID_ARG; a store that cannot be reached is not
 * an error (warning says why; the tier retries with back-off).
 * Errors: those of la_redis_url_parse, LA_ERR_INVALID_ARG (AUTH refused), LA_ERR_NO_MEMORY.
 * Caller owns *out; free with (*out)->ops->destroy(*out). */
la_status la_redis_tier_create(const char *url, int timeout_ms, la_kv_tier **out, char *warning,
                               size_t warning_cap, la_err *err);

#endif
