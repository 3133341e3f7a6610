#include "kv/block_hash.h"

#include <string.h>

void la_hash_field(la_hasher *h, la_hash_kind kind, const void *data, uint32_t len) {
    uint8_t k = (uint8_t)kind;
    la_hasher_update(h, &k, 1);
    la_hasher_update(h, &len, sizeof len);
    if (len) la_hasher_update(h, data, len);
}

static void init(la_hasher *h, const la_hash_ctx *ctx) {
    if (ctx) la_hasher_init_key(h, &ctx->key);
    else la_hasher_init(h);
}

static void field_hash(la_hasher *h, la_hash_kind kind, la_hash128 v) {
    uint8_t p[16];
    memcpy(p, &v.lo, 8);
    memcpy(p + 8, &v.hi, 8);
    la_hash_field(h, kind, p, sizeof p);
}

/* A seed's first fields: its name, then the context's namespace if it has one. */
static void seed_start(la_hasher *h, const la_hash_ctx *ctx, const char *name) {
    init(h, ctx);
    la_hash_field(h, LA_HASH_SEED, name, (uint32_t)strlen(name));
    if (ctx && ctx->has_ns) field_hash(h, LA_HASH_NAMESPACE, ctx->ns);
}

static void field_str(la_hasher *h, la_hash_kind kind, const char *s) {
    la_hash_field(h, kind, s ? s : "", s ? (uint32_t)strlen(s) : 0);
}

static void field_u32(la_hasher *h, la_hash_kind kind, uint32_t v) {
    la_hash_field(h, kind, &v, sizeof v);
}

/* DOC (a document's last block hash, its length): 20 bytes. */
static void field_doc(la_hasher *h, la_hash128 last_hash, int32_t n_tokens) {
    uint8_t buf[20];
    memcpy(buf, &last_hash.lo, 8);
    memcpy(buf + 8, &last_hash.hi, 8);
    memcpy(buf + 16, &n_tokens, 4);
    la_hash_field(h, LA_HASH_DOC, buf, sizeof buf);
}

la_hash128 la_hash_doc_seed(const la_hash_ctx *ctx, la_kv_format format, const char *salt) {
    la_hasher h;
    seed_start(&h, ctx, "doc");
    field_u32(&h, LA_HASH_FORMAT, (uint32_t)format);
    field_str(&h, LA_HASH_SALT, salt);
    return la_hasher_digest(&h);
}

la_hash128 la_hash_doc_seed_after(const la_hash_ctx *ctx, la_kv_format format, const char *salt,
                                  la_hash128 preamble_last_hash, int32_t preamble_tokens) {
    la_hasher h;
    seed_start(&h, ctx, "doc");
    field_u32(&h, LA_HASH_FORMAT, (uint32_t)format);
    field_str(&h, LA_HASH_SALT, salt);
    field_doc(&h, preamble_last_hash, preamble_tokens);
    return la_hasher_digest(&h);
}

la_hash128 la_hash_prefix_seed(const la_hash_ctx *ctx, const char *salt) {
    la_hasher h;
    seed_start(&h, ctx, "prefix");
    field_str(&h, LA_HASH_SALT, salt);
    return la_hasher_digest(&h);
}

la_hash128 la_hash_tail_seed(const la_hash_ctx *ctx, la_kv_format format, const char *salt,
                             int32_t n_docs, const la_hash128 *last_hash, const int32_t *n_tokens,
                             int32_t recompute_first, float recompute_ratio) {
    la_hasher h;
    seed_start(&h, ctx, "tail");
    field_u32(&h, LA_HASH_FORMAT, (uint32_t)format);
    field_str(&h, LA_HASH_SALT, salt);
    for (int32_t d = 0; d < n_docs; d++) field_doc(&h, last_hash[d], n_tokens[d]);
    if (recompute_first > 0) field_u32(&h, LA_HASH_RECOMPUTE, (uint32_t)recompute_first);
    if (recompute_ratio > 0.0f) {
        uint32_t bits;
        memcpy(&bits, &recompute_ratio, sizeof bits);
        field_u32(&h, LA_HASH_RECOMPUTE_RATIO, bits);
    }
    return la_hasher_digest(&h);
}

la_hash128 la_hash_block(const la_hash_ctx *ctx, la_hash128 parent, const int32_t *ids, int32_t n) {
    la_hasher h;
    init(&h, ctx);
    field_hash(&h, LA_HASH_PARENT, parent);
    la_hash_field(&h, LA_HASH_TOKENS, ids, (uint32_t)n * (uint32_t)sizeof(int32_t));
    return la_hasher_digest(&h);
}

int32_t la_hash_chain(const la_hash_ctx *ctx, la_hash128 seed, const int32_t *ids, int32_t n,
                      int32_t block_size, int include_partial, la_hash128 *out) {
    int32_t k = 0;
    la_hash128 parent = seed;
    for (int32_t at = 0; at < n; at += block_size) {
        int32_t len = n - at < block_size ? n - at : block_size;
        if (len < block_size && !include_partial) break;
        parent = la_hash_block(ctx, parent, ids + at, len);
        out[k++] = parent;
    }
    return k;
}

la_hash128 la_hash_record_key(const la_hash_ctx *ctx, la_hash128 last_hash, int32_t n_tokens) {
    la_hasher h;
    seed_start(&h, ctx, "record");
    field_hash(&h, LA_HASH_PARENT, last_hash);
    field_u32(&h, LA_HASH_DOC, (uint32_t)n_tokens);
    return la_hasher_digest(&h);
}
