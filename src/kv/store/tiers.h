/* The table of KV store tiers below host memory (kv/store/tier.h): which options make
 * which tier. Only the store (kv/store/store.c) reads it. */
#ifndef LA_KV_STORE_TIERS_H
#define LA_KV_STORE_TIERS_H

#include "kv/store/tier.h"

/* Open tier id (LA_KV_TIER_DISK or LA_KV_TIER_SHARED) as c asks: *out NULL when c names
 * none. A tier that cannot be used now (directory not writable, store not reachable)
 * still opens (its operations fail and are counted; the reason is logged once).
 * Errors: LA_ERR_INVALID_ARG (a malformed URL, a refused password), LA_ERR_UNSUPPORTED,
 * LA_ERR_NO_MEMORY. */
la_status la_kv_tier_open(la_kv_tier_id id, const la_kv_tier_config *c, la_kv_tier **out, la_err *err);

#endif
