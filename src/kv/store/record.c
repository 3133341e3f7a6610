#include "kv/store/record.h"

#include <stdio.h>
#include <string.h>

#include "base/dtype.h"

static const char k_magic[8] = {'L', 'A', 'K', 'V', 'R', 'E', 'C', '\0'};

static const char *const k_reject_names[LA_KV_REJECT_COUNT] = {
    "none", "short", "magic", "version", "header_checksum", "key", "fingerprint",
    "dtype", "block_size", "shape", "length", "payload_checksum",
};

const char *la_kv_reject_name(la_kv_reject r) {
    return (unsigned)r < LA_KV_REJECT_COUNT ? k_reject_names[r] : "unknown";
}

size_t la_kv_record_block_bytes(const la_kv_record_shape *s) {
    return 2 * (size_t)s->n_layers * (size_t)s->n_kv_heads * (size_t)s->block_size * (size_t)s->head_dim *
           la_dtype_size((la_dtype)s->dtype);
}

la_kv_record_header la_kv_record_header_make(la_hash128 key, const la_kv_record_shape *s, int32_t n_tokens) {
    la_kv_record_header h = {.key = key, .shape = *s, .n_tokens = n_tokens};
    h.n_blocks = (n_tokens + s->block_size - 1) / s->block_size;
    h.payload_bytes = (uint64_t)h.n_blocks * la_kv_record_block_bytes(s);
    return h;
}

/* ---- little-endian fields ------------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static void put_hash(uint8_t *p, la_hash128 h) {
    put_u64(p, h.lo);
    put_u64(p + 8, h.hi);
}
static la_hash128 get_hash(const uint8_t *p) { return (la_hash128){get_u64(p), get_u64(p + 8)}; }

void la_kv_record_header_encode(const la_kv_record_header *h, uint8_t out[LA_KV_RECORD_HEADER_BYTES]) {
    memset(out, 0, LA_KV_RECORD_HEADER_BYTES);
    memcpy(out, k_magic, 8);
    put_u32(out + 8, LA_KV_RECORD_VERSION);
    put_u32(out + 12, LA_KV_RECORD_HEADER_BYTES);
    put_hash(out + 16, h->key);
    put_hash(out + 32, h->shape.fingerprint);
    out[48] = h->shape.kv_format;
    out[49] = h->shape.dtype;
    put_u32(out + 52, (uint32_t)h->shape.block_size);
    put_u32(out + 56, (uint32_t)h->shape.n_layers);
    put_u32(out + 60, (uint32_t)h->shape.n_kv_heads);
    put_u32(out + 64, (uint32_t)h->shape.head_dim);
    put_u32(out + 68, (uint32_t)h->n_tokens);
    put_u32(out + 72, (uint32_t)h->n_blocks);
    put_u64(out + 80, h->payload_bytes);
    put_u64(out + 88, h->payload_checksum);
    put_u64(out + 120, XXH3_64bits(out, 120));
}

la_kv_reject la_kv_record_header_check(const uint8_t *buf, size_t len, const la_kv_record_header *want,
                                       la_kv_record_header *got) {
    if (len < LA_KV_RECORD_HEADER_BYTES) return LA_KV_REJECT_SHORT;
    if (memcmp(buf, k_magic, 8) != 0) return LA_KV_REJECT_MAGIC;
    if (get_u32(buf + 8) != LA_KV_RECORD_VERSION || get_u32(buf + 12) != LA_KV_RECORD_HEADER_BYTES)
        return LA_KV_REJECT_VERSION;
    if (get_u64(buf + 120) != XXH3_64bits(buf, 120)) return LA_KV_REJECT_HEADER_CHECKSUM;
    la_kv_record_header h = {
        .key = get_hash(buf + 16),
        .shape = {.fingerprint = get_hash(buf + 32), .kv_format = buf[48], .dtype = buf[49],
                  .block_size = (int32_t)get_u32(buf + 52), .n_layers = (int32_t)get_u32(buf + 56),
                  .n_kv_heads = (int32_t)get_u32(buf + 60), .head_dim = (int32_t)get_u32(buf + 64)},
        .n_tokens = (int32_t)get_u32(buf + 68),
        .n_blocks = (int32_t)get_u32(buf + 72),
        .payload_bytes = get_u64(buf + 80),
        .payload_checksum = get_u64(buf + 88),
    };
    if (got) *got = h;
    const la_kv_record_shape *a = &h.shape, *b = &want->shape;
    /* the key first: a record under another's name (another document, salt or secret) */
    if (!la_hash128_eq(h.key, want->key)) return LA_KV_REJECT_KEY;
    if (!la_hash128_eq(a->fingerprint, b->fingerprint)) return LA_KV_REJECT_FINGERPRINT;
    if (a->dtype != b->dtype) return LA_KV_REJECT_DTYPE;
    if (a->block_size != b->block_size) return LA_KV_REJECT_BLOCK_SIZE;
    if (a->kv_format != b->kv_format || a->n_layers != b->n_layers || a->n_kv_heads != b->n_kv_heads ||
        a->head_dim != b->head_dim)
        return LA_KV_REJECT_SHAPE;
    if (h.n_tokens != want->n_tokens || h.n_blocks != want->n_blocks || h.payload_bytes != want->payload_bytes)
        return LA_KV_REJECT_LENGTH;
    return LA_KV_REJECT_NONE;
}

void la_kv_checksum_init(la_kv_checksum *c) { XXH3_64bits_reset(&c->state); }
void la_kv_checksum_update(la_kv_checksum *c, const void *data, size_t len) {
    XXH3_64bits_update(&c->state, data, len);
}
uint64_t la_kv_checksum_digest(const la_kv_checksum *c) { return XXH3_64bits_digest(&c->state); }

void la_kv_key_hex(la_hash128 key, char out[33]) {
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)key.hi, (unsigned long long)key.lo);
}
