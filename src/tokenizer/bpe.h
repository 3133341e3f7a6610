/* The BPE model of a tokenizer.json (private to src/tokenizer/): vocabulary and
 * merge tables, the rank-ordered merge of one pre-tokenized word, and a shared cache of
 * merged words.
 *
 * Semantics follow HF tokenizers models/bpe/model.rs (BPE::merge_word, tokenize with
 * ignore_merges, byte_fallback, unk/fuse_unk) and models/bpe/word.rs (Word::merge_all).
 */
#ifndef LA_TOKENIZER_BPE_H
#define LA_TOKENIZER_BPE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/text.h"

/* ---- strings by id ---------------------------------------------------------------------- */

/* One byte string per id in a shared blob, each followed by a NUL; len[id] ==
 * LA_TOK_NO_STR for an id without one. */
#define LA_TOK_NO_STR UINT32_MAX
typedef struct la_tok_strtab {
    la_tok_buf blob;
    uint32_t *off, *len; /* [n] */
    int32_t n;
} la_tok_strtab;

bool la_tok_strtab_init(la_tok_strtab *t, int32_t n);
/* Set the string of id (ids may be set once each; later sets replace the old string,
 * leaving dead bytes in the blob). */
bool la_tok_strtab_set(la_tok_strtab *t, int32_t id, const char *s, size_t n);
static inline bool la_tok_strtab_has(const la_tok_strtab *t, int32_t id) {
    return id >= 0 && id < t->n && t->len[id] != LA_TOK_NO_STR;
}
static inline const char *la_tok_strtab_get(const la_tok_strtab *t, int32_t id, size_t *n) {
    *n = t->len[id];
    return t->blob.data + t->off[id];
}
void la_tok_strtab_fini(la_tok_strtab *t);

/* ---- string -> id ------------------------------------------------------------------------ */

/* Open addressing over ids whose keys live in a strtab (borrowed; must outlive the map). */
typedef struct la_tok_strmap {
    uint64_t *slots; /* (hash >> 32) << 32 | (id + 1); 0 = empty */
    uint64_t mask;
    const la_tok_strtab *keys;
} la_tok_strmap;

/* Index every id of keys that has a string. Later ids win on duplicate strings. */
bool la_tok_strmap_build(la_tok_strmap *m, const la_tok_strtab *keys);
int32_t la_tok_strmap_get(const la_tok_strmap *m, const char *s, size_t n); /* -1 if none */
void la_tok_strmap_fini(la_tok_strmap *m);

/* ---- (id, id) -> merge ------------------------------------------------------------------- */

typedef struct la_tok_merge {
    uint64_t key; /* (uint32 left) << 32 | uint32 right */
    uint32_t rank;
    int32_t new_id; /* -1 = empty slot */
} la_tok_merge;

typedef struct la_tok_pairmap {
    la_tok_merge *slots;
    uint64_t mask;
    size_t n;
} la_tok_pairmap;

bool la_tok_pairmap_init(la_tok_pairmap *m, size_t expected);
/* Insert or replace (HF collects merges into a HashMap: a repeated pair keeps the last). */
bool la_tok_pairmap_put(la_tok_pairmap *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id);
const la_tok_merge *la_tok_pairmap_get(const la_tok_pairmap *m, int32_t a, int32_t b);
void la_tok_pairmap_fini(la_tok_pairmap *m);

/* ---- the model ------------------------------------------------------------------------- */

typedef struct la_tok_cache la_tok_cache;

typedef struct la_tok_bpe {
    la_tok_strtab tokens; /* id -> token string, model vocab only */
    la_tok_strmap vocab;  /* token string -> id */
    la_tok_pairmap merges;
    bool ignore_merges;
    bool byte_fallback;
    bool fuse_unk;
    int32_t unk_id;        /* -1: no unk_token (unknown characters are dropped, as HF) */
    int32_t byte_ids[256]; /* byte_fallback: id of "<0xNN>", -1 if absent */
    /* Byte-level mode (the pre-tokenizer ends in ByteLevel): words arrive as raw bytes,
     * not as ByteLevel characters. raw holds each token's bytes (tokens whose every
     * character is in the ByteLevel alphabet) and raw_vocab indexes it, so the per-byte
     * mapping of HF's ByteLevel pre-tokenizer is never materialised. */
    bool byte_level;
    la_tok_strtab raw;
    la_tok_strmap raw_vocab;
    int32_t raw_byte_ids[256]; /* id of each single byte, -1 if absent */
    la_tok_cache *cache; /* may be NULL */
} la_tok_bpe;

/* Per-call working memory for la_tok_bpe_word. Zero-init; free with la_tok_bpe_scratch_fini. */
typedef struct la_tok_bpe_scratch {
    void *symbols;
    size_t symbols_cap;
    void *heap;
    size_t heap_cap;
} la_tok_bpe_scratch;
void la_tok_bpe_scratch_fini(la_tok_bpe_scratch *s);

/* Build byte-level tables (raw, raw_vocab) from tokens. */
bool la_tok_bpe_build_byte_level(la_tok_bpe *m);

/* Tokenize one word (a pre-tokenized piece, UTF-8 or raw bytes in byte-level mode) and
 * append its ids to out. Returns false only when out of memory. Thread-safe. */
bool la_tok_bpe_word(const la_tok_bpe *m, const char *w, size_t n, la_tok_bpe_scratch *sc,
                     la_tok_ids *out);

void la_tok_bpe_fini(la_tok_bpe *m);

/* The cache of merged words: LA_TOK_CACHE_SHARDS shards, each behind its own mutex. */
la_tok_cache *la_tok_cache_create(void);
void la_tok_cache_destroy(la_tok_cache *c);

#endif
