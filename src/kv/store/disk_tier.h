/* The disk tier (kv/store/disk_tier.c): records as files under DIR/kv, size-capped LRU,
 * surviving restarts. */
#ifndef LA_KV_STORE_DISK_TIER_H
#define LA_KV_STORE_DISK_TIER_H

#include <stddef.h>
#include <stdint.h>

#include "kv/store/tier.h"

/* A disk tier over dir (created 0700 if absent), at most cap_bytes of records (0: no
 * cap). A directory that cannot be created is not an error: the tier starts empty and a
 * sentence saying why goes to warning (empty when all is well); its writes then fail.
 * Errors: LA_ERR_INVALID_ARG (no dir, negative cap), LA_ERR_NO_MEMORY.
 * Caller owns *out; free with (*out)->ops->destroy(*out). */
la_status la_disk_tier_create(const char *dir, int64_t cap_bytes, la_kv_tier **out, char *warning,
                              size_t warning_cap, la_err *err);

/* Bytes and records the index holds now. */
int64_t la_disk_tier_bytes(la_kv_tier *t);
int64_t la_disk_tier_records(la_kv_tier *t);

#endif
