/* The document KV store's numbers for reports (store_stats.h). */
#include "bench/store_stats.h"

bool la_bench_store_enabled(const la_engine_store_stats *s) {
    for (int t = 0; t < LA_KV_TIER_KIND_COUNT; t++)
        if (s->tier[t].enabled) return true;
    return false;
}

static void add_rate(cJSON *o, const char *key, int64_t bytes, double s) {
    if (s > 0) cJSON_AddNumberToObject(o, key, (double)bytes / s / 1e9);
    else cJSON_AddNullToObject(o, key);
}

cJSON *la_bench_store_stats_json(const la_engine_store_stats *s, const la_engine_stats *es) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "documents_computed", (double)es->documents_computed);
    cJSON_AddNumberToObject(o, "documents_loaded", (double)es->documents_loaded);
    cJSON *tiers = cJSON_AddObjectToObject(o, "tiers");
    for (int t = 0; t < LA_KV_TIER_KIND_COUNT; t++) {
        const la_engine_tier_stats *x = &s->tier[t];
        cJSON *j = cJSON_AddObjectToObject(tiers, la_engine_tier_name((la_kv_tier_kind)t));
        cJSON_AddBoolToObject(j, "enabled", x->enabled);
        cJSON_AddNumberToObject(j, "hits", (double)x->hits);
        cJSON_AddNumberToObject(j, "misses", (double)x->misses);
        cJSON_AddNumberToObject(j, "bytes_read", (double)x->bytes_read);
        cJSON_AddNumberToObject(j, "bytes_written", (double)x->bytes_written);
        cJSON_AddNumberToObject(j, "read_s", x->read_s);
        cJSON_AddNumberToObject(j, "write_s", x->write_s);
        add_rate(j, "read_gb_per_s", x->bytes_read, x->read_s);
        add_rate(j, "write_gb_per_s", x->bytes_written, x->write_s);
        cJSON_AddNumberToObject(j, "writes", (double)x->writes);
        cJSON_AddNumberToObject(j, "write_failures", (double)x->write_failures);
        cJSON_AddNumberToObject(j, "evictions", (double)x->evictions);
        cJSON_AddNumberToObject(j, "errors", (double)x->errors);
        cJSON_AddNumberToObject(j, "records", (double)x->records);
        cJSON_AddNumberToObject(j, "bytes", (double)x->bytes);
        cJSON_AddBoolToObject(j, "up", x->enabled && !x->down);
        cJSON_AddNumberToObject(j, "reads_skipped", (double)s->reads_skipped[t]);
        cJSON_AddNumberToObject(j, "read_bytes_per_s_per_thread", s->read_bytes_per_s[t]);
    }
    cJSON_AddNumberToObject(o, "rejected", (double)s->rejected);
    cJSON *why = cJSON_AddObjectToObject(o, "rejected_by_reason");
    for (int32_t i = 1; i < 16 && la_engine_reject_reason_name(i); i++) /* 0 is "none" */
        cJSON_AddNumberToObject(why, la_engine_reject_reason_name(i), (double)s->rejected_by_reason[i]);
    cJSON_AddNumberToObject(o, "timeouts", (double)s->timeouts);
    cJSON_AddNumberToObject(o, "writebacks", (double)s->writebacks);
    cJSON_AddNumberToObject(o, "spills", (double)s->spills);
    cJSON_AddNumberToObject(o, "puts_dropped", (double)s->puts_dropped);
    cJSON_AddNumberToObject(o, "promotions", (double)s->promotions);
    cJSON_AddNumberToObject(o, "lookups_dropped", (double)s->lookups_dropped);
    cJSON_AddNumberToObject(o, "copy_in_bytes", (double)s->copy_in_bytes);
    cJSON_AddNumberToObject(o, "copy_in_s", s->copy_in_s);
    cJSON_AddNumberToObject(o, "copy_out_bytes", (double)s->copy_out_bytes);
    cJSON_AddNumberToObject(o, "copy_out_s", s->copy_out_s);
    cJSON_AddNumberToObject(o, "prefill_tokens_per_s", s->prefill_tokens_per_s);
    return o;
}
