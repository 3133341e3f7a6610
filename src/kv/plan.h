/* la_plan: how one request's tokens map onto KV blocks under its method (DESIGN.md §3-§5),
 * and the attention metadata the backend executes.
 *
 * ---- The layout ---------------------------------------------------------------------------
 * A request is documents d = 0..n-1 (an optional preamble is document 0) followed by the
 * tail: question tokens, then generated tokens. Block size B. Document d has true length
 * L_d and owns ceil(L_d / B) whole blocks, so no two documents share a block; the slots
 * past L_d in its last block are padding and are masked out of every score.
 *
 * Logical positions have no padding: document d token i sits at S_d + i with
 * S_d = sum_{e<d} L_e, and tail token t at T + t with T = sum_e L_e.
 *
 *   method      doc K stored as          doc tokens computed at     tail attends doc block
 *   lazy        R(i) k  (local)          positions i (alone)        q rotated at p - S_d  (q_delta)
 *   block       R(i) k, then per request copied and re-rotated by S_d -> R(S_d+i) k
 *   mepic       k unrotated              positions i (alone)        key rotated at S_d + i (k_rope)
 *   block-ref   R(S_d+i) k, fresh        positions S_d + i          plain
 *   recompute / prefix: no documents in the plan; the whole prompt is the tail (T = 0).
 *
 * Recovery (recompute_first N > 0, blockwise methods; EPIC / LegoLink arXiv 2410.15332, the
 * seed's MEPIC_FIRST_BLOCK_RECOMPUTE): the first n_recompute = min(N, L_d) tokens of every
 * document d >= 1 are computed again in context, attending to documents 0..d-1 as the tail
 * sees them (their own recomputed tokens included) and causally to themselves, into
 * per-request copies of the document's first ceil(n_recompute / B) blocks (copy_ids; the
 * cached rows past n_recompute are copied with them). Their K is stored as the document's
 * cached K is (lazy: R(i) k; mepic: unrotated; block and block-ref: R(S_d + i) k), so the
 * view of a copy is the view of the block it replaces. Document 0 starts at position 0:
 * alone and in context are the same, nothing to recompute. The cached blocks stay as they
 * are; the question chain's seed covers N.
 *
 * Selected recovery (recompute_ratio R > 0; CacheBlend, Yao et al., EuroSys 2025): of the
 * tokens of documents d >= 1 past their first N, the round(R x sum_{d>=1} L_d) (at least 1) whose layer-1
 * V deviates most from the cached V are recomputed as well (ties: the earlier token). The
 * deviation comes from a probe (engine/forward.h la_forward_probe) after the plan is made:
 * layer 0 in context, then layer 1's V. Every block of those documents gets a copy at
 * create (which tokens are chosen is known only after the probe); la_plan_set_recompute
 * then names each document's tokens (recompute_rows, ascending). A recomputed token attends
 * to the documents before its own as the tail sees them and, in its own document, to every
 * token up to itself: recomputed values for the chosen ones, cached values for the rest
 * (CacheBlend's selective recompute). Without a probe (R = 0) the chosen tokens are the
 * first N and recompute_rows stays NULL.
 *
 * Documents after the preamble (doc_context PREAMBLE, lazy / block / mepic, n_docs >= 2; README
 * "Documents encoded after the preamble"): document d >= 1 is computed at positions P + i
 * (enc_start = P = L_0), attending to document 0's blocks and causally to itself, and its
 * chain seed covers document 0's last hash and length (kv/block_hash.h), so it is reused in
 * any slot under the same preamble. K is stored as computed (lazy, block: R(P + i) k; mepic
 * unrotated); the tail sees it moved by S_d - P: lazy's Δ_d = S_d - P, block's copy
 * re-rotated by S_d - P, mepic rotates at S_d + i as before. A document job waits until
 * document 0's blocks are ready. Recovery on top recomputes at S_d + i as above and stores
 * K as the cached K (lazy: R(P + i) k). block-ref has no such mode (its documents are fresh
 * at their slots). Document 0 and, under ALONE, every document: enc_start 0.
 *
 * Worked example (DESIGN.md §3, pinned in tests/kv/test_plan.c): B = 8, lengths
 * [6, 15, 8, 2] -> blocks per document [1, 2, 1, 1] (padded lengths [8, 16, 8, 8]);
 * S = [0, 6, 21, 29]; T = 31, so question token 0 sits at logical position 31; the last
 * block of each document masks [2, 1, 0, 6] pad slots (n_valid [6, 7, 8, 2]); lazy
 * de-rotates the query by Δ = S = [0, 6, 21, 29] for those documents' blocks.
 *
 * ---- Caching ------------------------------------------------------------------------------
 * Document blocks are looked up by their hash chain (kv/block_hash.h), pinned on the spot,
 * and the missing ones are allocated AND indexed at once (not yet ready): a second request
 * needing the same document finds them in flight and waits instead of computing them
 * again. The engine computes them through a job (it holds its own pins, so cancelling the
 * request that started it does not strand the waiters). Tail blocks are indexed only after
 * they are computed (la_plan_register_tail). Positions and block ids are int32 (a request
 * is limited to 2^31 - 1 tokens; every sum is checked), never 16-bit.
 */
#ifndef LA_KV_PLAN_H
#define LA_KV_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "lazyattn/types.h"

typedef struct la_plan_doc {
    int32_t n_tokens;      /* L_d */
    int32_t start;         /* S_d, logical position of token 0 */
    int32_t enc_start;     /* position token 0 is computed at (P after the preamble, else 0;
                              BLOCK_REF computes at S_d whatever this says) */
    int32_t n_blocks;      /* ceil(L_d / B) */
    int32_t *block_ids;    /* [n_blocks] pinned by the plan */
    int32_t n_reused;      /* leading blocks found in the index (ready or in flight) */
    bool compute;          /* blocks [n_reused, n_blocks) were allocated by this plan and
                              must be computed by a job */
    int32_t *copy_ids;     /* [n_blocks] per-request copies or -1 (NULL: none): BLOCK every
                              block, re-rotated by S_d; recovery the first
                              ceil(n_recompute / B) blocks (la_plan_doc_copies) */
    int32_t n_recompute;   /* recovery: tokens recomputed in context into copy_ids */
    int32_t *recompute_rows; /* [n_recompute] their indices, ascending (NULL: 0..n_recompute-1) */
    la_hash128 last_hash;  /* hash of the last block (question-chain seed input) */
} la_plan_doc;

/* A request's recovery (top of this file); zero: none. */
typedef struct la_recovery {
    int32_t first; /* N: every later document's first N tokens (>= 0) */
    float ratio;   /* R in [0, 1]: more tokens chosen by the probe's deviation (0: none) */
} la_recovery;

typedef struct la_plan {
    la_method method;
    int32_t block_size;
    int32_t recompute_first;   /* N of recovery (0: none) */
    float recompute_ratio;     /* R of recovery (0: none) */
    la_doc_context doc_context; /* PREAMBLE only where it applies (cached methods, 2+ docs) */
    int32_t n_docs;
    la_plan_doc *docs;
    int32_t tail_start;        /* T: logical position of tail token 0 */
    int32_t n_tail_prompt;     /* prompt tokens in the tail */
    int32_t n_tail_cached;     /* leading tail tokens found computed in the cache */
    int32_t n_tail_blocks;
    int32_t tail_cap;
    int32_t *tail_blocks;      /* [n_tail_blocks] pinned by the plan */
    int32_t n_tail_registered; /* leading full tail blocks indexed */
    la_hash128 tail_parent;    /* hash of the last indexed tail block, or the chain seed */
    /* reuse counters, fixed at plan time */
    int64_t doc_tokens_reused;
    int64_t doc_tokens_computed;
    int64_t tail_tokens_reused;
    int64_t doc_tokens_recomputed; /* recovery: sum of n_recompute (R: after the probe) */
} la_plan;

/* One input document: tokens borrowed for the call. */
typedef struct la_plan_input_doc {
    const int32_t *tokens;
    int32_t n_tokens;
} la_plan_input_doc;

/* Build the plan: hash, look up and pin cached blocks, allocate the rest (documents,
 * BLOCK copies, and the tail's prompt blocks).
 *   docs       [n_docs] documents (must be empty for RECOMPUTE / PREFIX: pass the whole
 *              prompt as the tail)
 *   tail       [n_tail] prompt tokens after the documents (n_tail >= 1)
 *   salt       cache salt (NULL = none): enters every hash chain
 *   recovery   N and R (NULL: none; block-wise methods only): see the top of this file
 *   doc_context  ALONE, or PREAMBLE (lazy, block, mepic): documents d >= 1 computed after
 *              document 0 (top of this file); with fewer than 2 documents it changes nothing
 * Errors: LA_ERR_INVALID_ARG (empty document, empty tail, documents under RECOMPUTE/PREFIX,
 * recovery outside the block-wise methods or out of range, PREAMBLE under another method),
 * LA_ERR_TOO_LONG (total over INT32_MAX), LA_ERR_NO_SPACE (pool cannot hold the request;
 * every pin taken is released: the pool is as before apart from hit/miss counters),
 * LA_ERR_NO_MEMORY. *plan is written only on success; free with la_plan_release(). */
la_status la_plan_create(la_kv_pool *pool, la_method method, const char *salt, const la_recovery *recovery,
                         la_doc_context doc_context, const la_plan_input_doc *docs, int32_t n_docs, const int32_t *tail,
                         int32_t n_tail, la_plan *plan, la_err *err);

/* Fork a plan for another sequence of the same request (n > 1 choices) whose first
 * n_filled tail tokens have their K/V written: the new plan shares every document block
 * (and BLOCK copy) and every full tail block among them, each pinned once more; a last,
 * partly filled tail block cannot be shared (each sequence writes its own tokens after
 * it), so a new block is allocated for the copy, and *copy_src / *copy_dst name the blocks
 * and *copy_n_valid the slots the caller must copy (backend kv_copy_rotate with delta 0);
 * *copy_src = -1 when the tail ends on a block boundary. Tail blocks past n_filled are
 * not taken (the fork reserves its own). Errors: LA_ERR_NO_SPACE (no block for the copy;
 * nothing is pinned), LA_ERR_NO_MEMORY. *out is written only on success. */
la_status la_plan_fork(const la_plan *src, la_kv_pool *pool, int32_t n_filled, la_plan *out, int32_t *copy_src,
                       int32_t *copy_dst, int32_t *copy_n_valid, la_err *err);

/* Unpin everything the plan holds (last blocks first, so LRU evicts a document's end
 * before its start) and free its arrays. */
void la_plan_release(la_plan *plan, la_kv_pool *pool);

/* A document of a plan that will not be computed after all (its plan failed, or its job could
 * not start): unindexes the blocks the plan allocated for it (from n_reused on) that are not
 * ready, so that no later lookup finds blocks nothing will ever compute. Pins are untouched. */
void la_plan_doc_unindex(const la_plan_doc *doc, la_kv_pool *pool);

/* Number of pins the plan holds (for accounting checks). */
int64_t la_plan_pins(const la_plan *plan);

/* Make sure tail blocks exist for n_tail tokens (grows by whole blocks).
 * Errors: LA_ERR_NO_SPACE (plan unchanged), LA_ERR_NO_MEMORY. */
la_status la_plan_reserve_tail(la_plan *plan, la_kv_pool *pool, int32_t n_tail, la_err *err);

/* Pool slot of tail token t (< n_tail_blocks * B). */
int64_t la_plan_tail_slot(const la_plan *plan, int32_t t);

/* Document helpers, usable without the plan (a document job keeps a copy of its doc and
 * of document 0): pool slot of token i; position of token i as the document is computed
 * (enc_start + i, or S_d + i for BLOCK_REF); the RoPE position its K is stored at
 * (LA_POS_UNROTATED for MEPIC); how far it moves from there to its slot (S_d - enc_start);
 * and the attention view while computing its first n_visible tokens: document 0's blocks
 * when doc->enc_start > 0 (ctx: document 0; NULL otherwise), then its own
 * (la_plan_doc_view_size entries; returns the count). */
int64_t la_plan_doc_slot(int32_t block_size, const la_plan_doc *doc, int32_t i);
int32_t la_plan_doc_pos(la_method method, const la_plan_doc *doc, int32_t i);
int32_t la_plan_doc_k_pos(la_method method, const la_plan_doc *doc, int32_t i);
int32_t la_plan_doc_delta(const la_plan_doc *doc);
int32_t la_plan_doc_view_size(int32_t block_size, const la_plan_doc *doc, const la_plan_doc *ctx,
                              int32_t n_visible);
int32_t la_plan_doc_view(la_method method, int32_t block_size, const la_plan_doc *doc, const la_plan_doc *ctx,
                         int32_t n_visible, la_attn_block *out);

/* Recovery. Leading blocks of doc with a per-request copy (copy_ids[0:n] >= 0; every block
 * under BLOCK and under R > 0); the pool slot and the RoPE position of K (as the
 * document's cached K is stored) of document token i in its copy; and the attention view
 * of document d's recomputed tokens up to token n_visible - 1: documents 0..d-1 as the tail
 * sees them, then d's copies (out must hold la_plan_recompute_view_size entries; returns
 * the count). */
int32_t la_plan_doc_copies(const la_plan *plan, const la_plan_doc *doc);
int64_t la_plan_recompute_slot(const la_plan *plan, const la_plan_doc *doc, int32_t i);
/* Token index of document doc's k-th recomputed token (k < n_recompute). */
int32_t la_plan_recompute_row(const la_plan_doc *doc, int32_t k);
/* Selected recovery: document d recomputes rows[0:n] (ascending token indices < L_d, taken
 * over: freed with the plan); plan->doc_tokens_recomputed is updated. Only for a plan with
 * R > 0 and d >= 1 (their blocks all have copies). Errors: LA_ERR_INVALID_ARG (nothing is
 * taken: the caller frees rows). */
la_status la_plan_set_recompute(la_plan *plan, int32_t d, int32_t *rows, int32_t n, la_err *err);
int32_t la_plan_recompute_k_pos(const la_plan *plan, const la_plan_doc *doc, int32_t i);
int32_t la_plan_recompute_view_size(const la_plan *plan, int32_t d, int32_t n_visible);
int32_t la_plan_recompute_view(const la_plan *plan, int32_t d, int32_t n_visible, la_attn_block *out);

/* Attention view of a tail token when the first n_visible tail tokens have K/V: every
 * document block (with q_delta / k_rope / copies per method), then the tail blocks.
 * out must hold la_plan_view_size(plan, n_visible) entries; returns the count. */
int32_t la_plan_view_size(const la_plan *plan, int32_t n_visible);
int32_t la_plan_tail_view(const la_plan *plan, int32_t n_visible, la_attn_block *out);

/* Whether every document block the tail reads is computed (a job may still be running). */
bool la_plan_docs_ready(const la_plan *plan, const la_kv_pool *pool);

/* Index the full tail blocks among the first n_computed tail tokens (tokens = the tail's
 * tokens so far) under the question chain (blockwise methods) or the prefix chain (PREFIX).
 * RECOMPUTE and BLOCK_REF never index. A block whose hash another block already holds
 * stays unindexed (private to this request). */
void la_plan_register_tail(la_plan *plan, la_kv_pool *pool, const int32_t *tokens,
                           int32_t n_computed);

#endif
