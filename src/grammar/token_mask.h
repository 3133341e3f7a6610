/* Token-level masks of a JSON grammar over a tokenizer's vocabulary: which tokens may come
 * next so that the text stays a prefix of a value the grammar accepts, and ends within
 * the tokens left. Structured output (response_format json_object / json_schema) samples
 * only among them.
 *
 * ---- How a mask is computed -------------------------------------------------------------
 * The vocabulary's byte strings sit in a trie. From a matcher state (json_matcher.h) the
 * trie is walked depth first, stepping the state by each edge's byte; a subtree whose
 * prefix the grammar refuses is skipped whole, and a token is allowed when the state after
 * its last byte still has a reading. Masks are cached per grammar, keyed by the canonical
 * state: while a string value is being typed, or at the same position of the same object
 * in many requests, the state repeats, and a cached mask costs one lookup. (XGrammar caches
 * per grammar position for the same reason: Dong et al., "XGrammar", arXiv 2411.15100.)
 *
 * ---- Ending within max_tokens --------------------------------------------------------------
 * With L tokens left (this one included), a token is allowed only when the value can still
 * be completed in L - 1 tokens after it: min_finish of the state after it (bytes,
 * json_matcher.h) <= L - 1, every byte having a one-byte token (la_grammar_vocab_create
 * reports a vocabulary where one is missing). The cache keeps for each state the largest
 * min_finish over its tokens, so the check costs nothing until the budget is that tight;
 * then each token's min_finish is computed once and kept with the entry.
 *
 * Threads: a la_grammar may be shared by many sequences and threads (its cache is guarded
 * by a mutex); a matcher belongs to one sequence.
 */
#ifndef LA_GRAMMAR_TOKEN_MASK_H
#define LA_GRAMMAR_TOKEN_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/json_schema.h"
#include "lazyattn/status.h"

typedef struct la_grammar_vocab la_grammar_vocab;

/* The vocabulary: bytes[id][0:n_bytes[id]] is the text token id adds; n_bytes[id] <= 0
 * (or bytes[id] NULL): the token never appears in structured output (special tokens;
 * end-of-sequence ids are passed to la_grammar_matcher_mask's caller separately).
 * Bytes are copied. Caller owns *out; free with la_grammar_vocab_destroy().
 *   missing_byte  (may be NULL) -1, or the first printable ASCII byte no one-byte token
 *                 spells (then a value may fail to end within max_tokens)
 * Errors: LA_ERR_INVALID_ARG (n_vocab < 1), LA_ERR_NO_MEMORY. */
la_status la_grammar_vocab_create(int32_t n_vocab, const char *const *bytes, const int32_t *n_bytes,
                                  la_grammar_vocab **out, int *missing_byte, la_err *err);
void la_grammar_vocab_destroy(la_grammar_vocab *v); /* NULL: nothing */
int32_t la_grammar_vocab_size(const la_grammar_vocab *v);

/* A grammar bound to a vocabulary, with its mask cache. Reference-counted: create gives
 * one reference; la_grammar_unref drops one and frees at zero. */
typedef struct la_grammar la_grammar;

/* Takes ownership of jg (freed on error too); v is borrowed and must outlive the grammar.
 *   cache_bytes  memory for cached masks (0: 64 MiB); when full the cache starts over
 * Errors: LA_ERR_NO_MEMORY. */
la_status la_grammar_create(la_json_grammar *jg, const la_grammar_vocab *v, size_t cache_bytes,
                            la_grammar **out, la_err *err);
void la_grammar_ref(la_grammar *g);
void la_grammar_unref(la_grammar *g); /* NULL: nothing */
const la_json_grammar *la_grammar_json(const la_grammar *g);

/* Bytes of the shortest value (min_len of the root). The engine asks max_tokens of at least
 * that many: the budget-narrowed masks can always finish a value when every remaining byte
 * may need a token of its own (byte-level vocabularies hold one per byte); with fewer, a value
 * might fit in longer tokens, but not surely. */
int32_t la_grammar_min_tokens(const la_grammar *g);

typedef struct la_grammar_cache_stats {
    int64_t hits, misses;  /* mask lookups */
    int64_t entries;       /* cached now */
    int64_t tight;         /* masks narrowed by the token budget */
} la_grammar_cache_stats;
la_grammar_cache_stats la_grammar_get_cache_stats(la_grammar *g);

/* One sequence's position in the grammar. */
typedef struct la_grammar_matcher la_grammar_matcher;

/* At the start of the root value (holds a reference to g). Errors: LA_ERR_NO_MEMORY. */
la_status la_grammar_matcher_create(la_grammar *g, la_grammar_matcher **out, la_err *err);
/* An independent copy at the same position (n > 1 choices fork). */
la_status la_grammar_matcher_clone(const la_grammar_matcher *m, la_grammar_matcher **out, la_err *err);
void la_grammar_matcher_destroy(la_grammar_matcher *m); /* NULL: nothing */

/* The tokens allowed next.
 *   tokens_left  tokens that may still be generated, this one included (>= 1)
 *   mask         [ceil(n_vocab / 64)] uint64 out: bit t of word t / 64 set = token t allowed
 *   *end_ok      the value is complete: end-of-sequence is allowed (and, when no bit is
 *                set, the only choice)
 * Errors: LA_ERR_NO_MEMORY (mask unspecified). */
la_status la_grammar_matcher_mask(la_grammar_matcher *m, int32_t tokens_left, uint64_t *mask, bool *end_ok,
                                  la_err *err);

/* Advance by token id. Errors: LA_ERR_INVALID_ARG (the grammar does not allow it here;
 * the matcher is unchanged), LA_ERR_NO_MEMORY. */
la_status la_grammar_matcher_accept(la_grammar_matcher *m, int32_t token, la_err *err);

/* Whether the value is complete (may end), and whether nothing may follow it. */
bool la_grammar_matcher_can_end(const la_grammar_matcher *m);
bool la_grammar_matcher_done(const la_grammar_matcher *m);

#endif
