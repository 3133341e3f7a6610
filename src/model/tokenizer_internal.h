/* The la_tokenizer struct, shared by tokenizer.c (loading tokenizer.json),
 * tokenizer_encode.c and tokenizer_decode.c. Private to src/model/tokenizer*.c.
 *
 * Every table is built at load time and read-only afterwards, so encode and decode may
 * run on many threads at once; the only shared mutable state is the BPE word cache,
 * which locks per shard (tokenizer_bpe.c).
 */
#ifndef LA_MODEL_TOKENIZER_INTERNAL_H
#define LA_MODEL_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "model/tokenizer.h"
#include "model/tokenizer_bpe.h"
#include "model/tokenizer_text.h"

/* ---- normalizer ------------------------------------------------------------------------ */

/* The supported normalizers, flattened out of any Sequence (HF tokenizers src/normalizers). */
typedef enum la_tok_norm_kind {
    LA_TOK_NORM_PREPEND, /* Prepend: a before a non-empty string */
    LA_TOK_NORM_REPLACE, /* Replace with a String pattern: every a becomes b */
} la_tok_norm_kind;

typedef struct la_tok_norm {
    la_tok_norm_kind kind;
    char *a, *b;
    size_t a_len, b_len;
} la_tok_norm;

/* ---- pre-tokenizer --------------------------------------------------------------------- */

/* SplitDelimiterBehavior (HF tokenizer/normalizer.rs). */
typedef enum la_tok_split_behavior {
    LA_TOK_SPLIT_REMOVED,
    LA_TOK_SPLIT_ISOLATED,
    LA_TOK_SPLIT_MERGED_WITH_PREVIOUS,
    LA_TOK_SPLIT_MERGED_WITH_NEXT,
    LA_TOK_SPLIT_CONTIGUOUS,
} la_tok_split_behavior;

typedef enum la_tok_pre_kind {
    LA_TOK_PRE_SPLIT,      /* Split(pattern, behavior, invert) */
    LA_TOK_PRE_BYTE_LEVEL, /* ByteLevel(add_prefix_space, use_regex): always the last step */
    LA_TOK_PRE_METASPACE,  /* Metaspace(replacement, prepend_scheme, split) */
} la_tok_pre_kind;

typedef enum la_tok_prepend {
    LA_TOK_PREPEND_ALWAYS,
    LA_TOK_PREPEND_FIRST, /* only for the piece that starts the input */
    LA_TOK_PREPEND_NEVER,
} la_tok_prepend;

typedef struct la_tok_pre {
    la_tok_pre_kind kind;
    pcre2_code *re;   /* SPLIT with a Regex pattern; BYTE_LEVEL with use_regex (GPT-2's) */
    char *literal;    /* SPLIT with a String pattern (NULL for Regex); "" matches nothing */
    size_t literal_len;
    la_tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space; /* BYTE_LEVEL */
    char repl[5];          /* METASPACE: the replacement character, UTF-8 */
    size_t repl_len;
    la_tok_prepend prepend; /* METASPACE */
    bool split;             /* METASPACE */
} la_tok_pre;

/* ---- added tokens -------------------------------------------------------------------- */

typedef struct la_tok_added {
    int32_t id;
    char *content;
    size_t len;
    /* what id_to_token and decode show: HF 0.23 gives a normalized token its normalized
     * content (sp-tiny "[QA]" -> "▁[QA]", decoded " [QA]"); NULL = content */
    char *shown;
    size_t shown_len;
    bool special, lstrip, rstrip, single_word, normalized;
} la_tok_added;

/* A byte trie over added-token contents, matched leftmost-longest as HF's aho-corasick
 * (MatchKind::LeftmostLongest). Edges live in a pair map: (node, byte) -> child. */
typedef struct la_tok_trie {
    la_tok_pairmap edges;
    int32_t *terminal; /* [n_nodes] index into la_tokenizer.added, or -1 */
    int32_t n_nodes, cap_nodes;
    bool first_byte[256];
    bool empty; /* no patterns */
} la_tok_trie;

/* ---- decoder -------------------------------------------------------------------------- */

typedef enum la_tok_dec_kind {
    LA_TOK_DEC_JOIN,       /* decoder null: tokens joined with " " (HF TokenizerImpl::decode) */
    LA_TOK_DEC_BYTE_LEVEL, /* ByteLevel: characters -> bytes, then lossy UTF-8 */
    LA_TOK_DEC_PIECES,     /* Sequence[Replace..., ByteFallback?, Fuse?, Strip?] */
    LA_TOK_DEC_METASPACE,  /* Metaspace: replacement -> ' ', dropped in the first token */
} la_tok_dec_kind;

typedef struct la_tok_decoder {
    la_tok_dec_kind kind;
    /* per id: BYTE_LEVEL the token's bytes; PIECES the token after every Replace;
     * METASPACE and JOIN the token itself */
    la_tok_strtab text;
    int16_t *byte_of; /* PIECES with ByteFallback: [n_ids] byte of a <0xNN> token, or -1 */
    bool byte_fallback;
    bool strip; /* PIECES: Strip after Fuse */
    uint32_t strip_content;
    int32_t strip_start, strip_stop;
    uint32_t replacement;   /* METASPACE */
    bool drop_first_repl;   /* METASPACE: prepend_scheme != never */
} la_tok_decoder;

/* ---- the tokenizer --------------------------------------------------------------------- */

struct la_tokenizer {
    char *path; /* <dir>/tokenizer.json, for messages */
    int32_t n_ids; /* 1 + the largest id of the vocab and the added tokens */
    la_tok_bpe bpe;

    la_tok_norm *norms;
    int n_norms;
    la_tok_pre *pres;
    int n_pres;

    la_tok_added *added;
    int n_added;
    int32_t *added_of_id; /* [n_ids] index into added, or -1 */
    la_tok_strtab added_text; /* id -> content */
    la_tok_strmap added_map;  /* content -> id */
    la_tok_trie trie_raw;     /* normalized == false, matched on the input */
    la_tok_trie trie_norm;    /* normalized == true, matched on normalized text */
    pcre2_code *word_re;      /* Rust regex \w, for single_word; NULL if unused */

    la_tok_decoder dec;

    /* TemplateProcessing "single": ids before and after the sequence */
    int32_t *tpl_prefix, *tpl_suffix;
    int n_prefix, n_suffix;

    int32_t bos_id, eos_id;
    char *chat_template;
};

/* Run the normalizers on s[0..n), appending the result to out (HF NormalizedString
 * semantics for Prepend and Replace). Returns false on out-of-memory. */
bool la_tok_normalize(const la_tokenizer *tok, const char *s, size_t n, la_tok_buf *out);

/* Whether cp is a "word" character of Rust's regex \w (Unicode: Alphabetic, M, Nd, Pc,
 * Join_Control), used by single_word added tokens. */
bool la_tok_is_word_char(const la_tokenizer *tok, const char *s, size_t n);

#endif
