/* A document record: the unit of the KV store (DESIGN.md §9). All blocks of one document,
 * all layers, K and V, in the pool's dtype, behind a fixed 128-byte header.
 *
 * ---- Layout (little-endian) ------------------------------------------------------------
 *   header   128 bytes (below)
 *   payload  n_blocks blocks of la_kv_record_block_bytes(shape) bytes each; block b holds
 *            K of layers 0..L-1, then V of layers 0..L-1, each [n_kv_heads][block_size]
 *            [head_dim] elements (the pools' per-layer block layout, so one block of one
 *            layer is one contiguous copy). Slots past the document's last token are zero.
 *
 *   offset  bytes  field
 *        0      8  magic "LAKVREC\0"
 *        8      4  version (1)
 *       12      4  header bytes (128)
 *       16     16  key: la_hash_record_key (kv/block_hash.h), which covers the deployment
 *                  secret, model fingerprint, KV format, dtype, block size, cache salt and
 *                  every token of the document
 *       32     16  model fingerprint (model/fingerprint.h)
 *       48      1  KV format (la_kv_format: rotated at local positions, or unrotated)
 *       49      1  dtype (la_dtype of the pool)
 *       50      2  zero
 *       52     16  block_size, n_layers, n_kv_heads, head_dim (u32 each)
 *       68      4  n_tokens
 *       72      4  n_blocks = ceil(n_tokens / block_size)
 *       76      4  zero
 *       80      8  payload bytes = n_blocks * block bytes
 *       88      8  payload checksum: XXH3-64 (seed 0) of the payload
 *       96     24  zero
 *      120      8  header checksum: XXH3-64 (seed 0) of bytes [0, 120)
 *
 * A record is used only if every field equals what the reader expects (la_kv_record_check);
 * anything else — short, another version, a flipped byte, another model, dtype, block size
 * or shape, another key (a record copied under another document's or salt's name) — is a
 * rejection with its reason, counted, and the document is computed instead.
 */
#ifndef LA_KV_STORE_RECORD_H
#define LA_KV_STORE_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hash.h"

#define LA_KV_RECORD_VERSION 1
#define LA_KV_RECORD_HEADER_BYTES 128

/* What every record of one engine shares. */
typedef struct la_kv_record_shape {
    la_hash128 fingerprint; /* model fingerprint */
    uint8_t kv_format;      /* la_kv_format */
    uint8_t dtype;          /* la_dtype */
    int32_t block_size, n_layers, n_kv_heads, head_dim;
} la_kv_record_shape;

typedef struct la_kv_record_header {
    la_hash128 key;
    la_kv_record_shape shape;
    int32_t n_tokens, n_blocks;
    uint64_t payload_bytes;
    uint64_t payload_checksum;
} la_kv_record_header;

/* Why a record was not used. */
typedef enum la_kv_reject {
    LA_KV_REJECT_NONE = 0,
    LA_KV_REJECT_SHORT,            /* fewer bytes than header + payload (truncated) */
    LA_KV_REJECT_MAGIC,            /* not a record */
    LA_KV_REJECT_VERSION,          /* another format version or header size */
    LA_KV_REJECT_HEADER_CHECKSUM,  /* header bytes damaged */
    LA_KV_REJECT_KEY,              /* the record of another document, salt or secret */
    LA_KV_REJECT_FINGERPRINT,      /* written by another model */
    LA_KV_REJECT_DTYPE,            /* another KV dtype */
    LA_KV_REJECT_BLOCK_SIZE,       /* another block size */
    LA_KV_REJECT_SHAPE,            /* another KV format, layer count, KV heads or head_dim */
    LA_KV_REJECT_LENGTH,           /* token / block / payload counts disagree */
    LA_KV_REJECT_PAYLOAD_CHECKSUM, /* payload bytes damaged */
    LA_KV_REJECT_COUNT
} la_kv_reject;

/* Stable lower-case name ("short", "payload_checksum", ...). Never NULL. */
const char *la_kv_reject_name(la_kv_reject r);

/* Bytes of one block of the payload: 2 * n_layers * n_kv_heads * block_size * head_dim
 * * la_dtype_size(dtype). */
size_t la_kv_record_block_bytes(const la_kv_record_shape *s);

/* The header a record of n_tokens tokens named key has (payload checksum 0: fill it in). */
la_kv_record_header la_kv_record_header_make(la_hash128 key, const la_kv_record_shape *s,
                                             int32_t n_tokens);

/* Write h as the 128 header bytes (computing the header checksum). */
void la_kv_record_header_encode(const la_kv_record_header *h, uint8_t out[LA_KV_RECORD_HEADER_BYTES]);

/* Decode the header in buf[0:len] and compare it with want (every field but the payload
 * checksum, which the caller checks with la_kv_record_checksum over the payload it read).
 * *got is written when the header decodes (magic, version, header checksum good).
 * Returns LA_KV_REJECT_NONE when it matches. */
la_kv_reject la_kv_record_header_check(const uint8_t *buf, size_t len, const la_kv_record_header *want,
                                       la_kv_record_header *got);

/* XXH3-64 over payload pieces, in order: start with la_kv_checksum_init, add every piece,
 * finish with la_kv_checksum_digest. */
typedef struct la_kv_checksum {
    XXH3_state_t state;
} la_kv_checksum;
void la_kv_checksum_init(la_kv_checksum *c);
void la_kv_checksum_update(la_kv_checksum *c, const void *data, size_t len);
uint64_t la_kv_checksum_digest(const la_kv_checksum *c);

/* "0123...": 32 lower-case hex digits of key (hi then lo), NUL-terminated. */
void la_kv_key_hex(la_hash128 key, char out[33]);

#endif
