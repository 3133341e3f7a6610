/* Hash chains that name KV blocks (DESIGN.md §5).
 *
 * Every hashed field is written as [kind: u8][length: u32][bytes], so two kinds of extra
 * key (a cache salt, a KV format, a parent hash, token ids) can never be confused with
 * each other, and no field can run into the next.
 *
 *   document chain   seed_doc  = H(SEED "doc", FORMAT f, SALT s)
 *                    block_0   = H(PARENT seed_doc, TOKENS t[0:B])
 *                    block_i   = H(PARENT block_{i-1}, TOKENS t[iB:(i+1)B])  (last may be short)
 *                    It does not depend on what precedes the document, so a document has the
 *                    same hashes in every slot of every prompt.
 *   after preamble   seed_doc' = H(SEED "doc", FORMAT f, SALT s, DOC (last hash of doc 0, L_0)):
 *                    the seed of documents d >= 1 computed after document 0 (la_doc_context
 *                    PREAMBLE); the same in every slot under the same preamble, never equal
 *                    to a document's chain computed alone or after another preamble.
 *   question chain   seed_tail = H(SEED "tail", FORMAT f, SALT s,
 *                                  DOC (last hash of doc 0, L_0), DOC (..., L_1), ...)
 *                    then full blocks of question + generated tokens as above. Because every
 *                    document's last hash and length enter the seed, one 32-token document
 *                    and two 16-token documents with the same tokens give different seeds.
 *   prefix chain     seed_pre  = H(SEED "prefix", SALT s), then full blocks of the whole
 *                    prompt from its first token (vLLM automatic prefix caching).
 *
 * Worked example (B = 4): document [5 6 7 8 9] -> block hashes h0 = H(seed_doc, [5 6 7 8]),
 * h1 = H(h0, [9]). Placed first or third in a prompt, it is looked up under h0, h1 alike.
 *
 * H is XXH3-128 keyed with the pool's hash context (la_hash_ctx: a per-process random
 * secret, or a key derived from the deployment secret), and every seed covers the
 * context's namespace (model fingerprint, KV dtype and shape, block size) when it has one,
 * so a hash names the same content in every process that shares secret and model, and
 * different content under another model (DESIGN.md §9).
 *
 *   record key       key = H(SEED "record", PARENT last block hash, DOC n_tokens): the name
 *                    of a document's record in the KV store tiers (kv/store/record.h)
 */
#ifndef LA_KV_BLOCK_HASH_H
#define LA_KV_BLOCK_HASH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/hash.h"

/* How a document's K is stored: rotated at document-local positions (lazy, block) or
 * unrotated (mepic). Caches of different formats never share blocks. */
typedef enum la_kv_format {
    LA_KV_FORMAT_ROTATED_LOCAL = 1,
    LA_KV_FORMAT_UNROTATED = 2,
} la_kv_format;

typedef enum la_hash_kind {
    LA_HASH_SEED = 1,
    LA_HASH_FORMAT = 2,
    LA_HASH_SALT = 3,
    LA_HASH_PARENT = 4,
    LA_HASH_TOKENS = 5,
    LA_HASH_DOC = 6,
    LA_HASH_NAMESPACE = 7,
    LA_HASH_RECOMPUTE = 8,
    LA_HASH_RECOMPUTE_RATIO = 9,
} la_hash_kind;

/* What keys every hash of one pool. ctx NULL in the functions below: the per-process
 * secret and no namespace. */
typedef struct la_hash_ctx {
    la_hash_key key;
    bool has_ns;
    la_hash128 ns; /* hash of model fingerprint, KV dtype and shape, block size */
} la_hash_ctx;

/* Append one tagged field to a running hash. */
void la_hash_field(la_hasher *h, la_hash_kind kind, const void *data, uint32_t len);

/* Seed of a document chain. salt may be NULL (no salt: the field is still written, empty,
 * which differs from every non-empty salt). */
la_hash128 la_hash_doc_seed(const la_hash_ctx *ctx, la_kv_format format, const char *salt);

/* Seed of a document chain computed after a preamble of preamble_tokens tokens whose last
 * block hashes to preamble_last_hash (kv/plan.h "Documents after the preamble"). */
la_hash128 la_hash_doc_seed_after(const la_hash_ctx *ctx, la_kv_format format, const char *salt,
                                  la_hash128 preamble_last_hash, int32_t preamble_tokens);

/* Seed of the prefix chain. */
la_hash128 la_hash_prefix_seed(const la_hash_ctx *ctx, const char *salt);

/* Seed of the question chain over n_docs documents: last_hash[d] is the hash of document
 * d's last block and n_tokens[d] its true length; recompute_first and recompute_ratio are
 * recovery's N and R (kv/plan.h; the question's K/V depend on them; each written only when
 * > 0, so a request without recovery hashes as before they existed). */
la_hash128 la_hash_tail_seed(const la_hash_ctx *ctx, la_kv_format format, const char *salt,
                             int32_t n_docs, const la_hash128 *last_hash, const int32_t *n_tokens,
                             int32_t recompute_first, float recompute_ratio);

/* Next link: H(PARENT parent, TOKENS ids[0:n]). */
la_hash128 la_hash_block(const la_hash_ctx *ctx, la_hash128 parent, const int32_t *ids, int32_t n);

/* Hashes of ceil(n / block_size) blocks of ids chained from seed (last block may be short
 * when include_partial is 1; with 0 only full blocks are hashed). Returns the number of
 * hashes written to out. */
int32_t la_hash_chain(const la_hash_ctx *ctx, la_hash128 seed, const int32_t *ids, int32_t n,
                      int32_t block_size, int include_partial, la_hash128 *out);

/* Store key of a document of n_tokens tokens whose last block hashes to last_hash. */
la_hash128 la_hash_record_key(const la_hash_ctx *ctx, la_hash128 last_hash, int32_t n_tokens);

#endif
