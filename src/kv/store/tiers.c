#include "kv/store/tiers.h"

#include <stddef.h>

#include "base/err.h"
#include "base/log.h"
#include "kv/store/disk_tier.h"
#include "kv/store/redis_tier.h"

static la_status open_disk(const la_kv_tier_config *o, la_kv_tier **out, la_err *err) {
    if (!o->dir) return LA_OK;
    char warning[LA_ERR_MSG_LEN];
    LA_TRY(la_disk_tier_create(o->dir, o->dir_bytes, out, warning, sizeof warning, err));
    if (warning[0]) la_log("KV store: disk tier: %s", warning);
    return LA_OK;
}

static la_status open_shared(const la_kv_tier_config *o, la_kv_tier **out, la_err *err) {
    if (!o->shared_url) return LA_OK;
    char warning[LA_ERR_MSG_LEN];
    LA_TRY(la_redis_tier_create(o->shared_url, o->timeout_ms, out, warning, sizeof warning, err));
    if (warning[0]) la_log("KV store: shared tier: %s", warning);
    return LA_OK;
}

typedef la_status (*tier_open_fn)(const la_kv_tier_config *c, la_kv_tier **out, la_err *err);

static const tier_open_fn k_tiers[LA_KV_TIER_COUNT] = {
    [LA_KV_TIER_DISK] = open_disk,
    [LA_KV_TIER_SHARED] = open_shared,
};

const char *la_kv_tier_name(la_kv_tier_id t) {
    static const char *const names[LA_KV_TIER_COUNT] = {"host", "disk", "shared"};
    return (unsigned)t < LA_KV_TIER_COUNT ? names[t] : "unknown";
}

la_status la_kv_tier_open(la_kv_tier_id id, const la_kv_tier_config *c, la_kv_tier **out, la_err *err) {
    *out = NULL;
    if ((unsigned)id >= LA_KV_TIER_COUNT || !k_tiers[id])
        return la_err_set(err, LA_ERR_INVALID_ARG, "KV store: no tier %d", (int)id);
    return k_tiers[id](c, out, err);
}
