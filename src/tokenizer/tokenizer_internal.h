/* The la_tokenizer struct and its parts, shared by tokenizer.c and pipeline.c (loading
 * tokenizer.json), encode.c and decode.c. Private to src/tokenizer/. Types only, over bpe.h
 * and text.h: every tokenizer file may include it without an include circle.
 *
 * Every table is built at load time and read-only afterwards, so encode and decode may
 * run on many threads at once; the only shared mutable state is the BPE word cache,
 * which locks per shard (bpe.c).
 */
#ifndef LA_TOKENIZER_INTERNAL_H
#define LA_TOKENIZER_INTERNAL_H

#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"
#include "tokenizer/text.h"

typedef struct la_tokenizer la_tokenizer; /* as in tokenizer.h */

/* ---- normalizer ------------------------------------------------------------------------ */

/* The supported normalizers, flattened out of any Sequence (HF tokenizers src/normalizers). */
typedef enum la_tok_norm_kind {
    LA_TOK_NORM_PREPEND,       /* Prepend: a before a non-empty string */
    LA_TOK_NORM_REPLACE,       /* Replace with a String pattern: every a becomes b */
    LA_TOK_NORM_REPLACE_REGEX, /* Replace with a Regex pattern: every match of re becomes b */
    LA_TOK_NORM_UNICODE,       /* NFC, NFD, NFKC, NFKD (form) */
    LA_TOK_NORM_LOWERCASE,     /* Lowercase: Rust char::to_lowercase per character */
    LA_TOK_NORM_STRIP,         /* Strip: White_Space off the left and/or right end */
    LA_TOK_NORM_STRIP_ACCENTS, /* StripAccents: combining marks (M*) removed */
    LA_TOK_NORM_NMT,           /* Nmt: some controls removed, some spaces made ' ' */
    LA_TOK_NORM_BYTE_LEVEL,    /* ByteLevel: every byte becomes its alphabet character */
    LA_TOK_NORM_BERT,          /* BertNormalizer (clean_text, chinese, strip_accents, lower) */
} la_tok_norm_kind;

typedef struct la_tok_norm {
    la_tok_norm_kind kind;
    char *a, *b;
    size_t a_len, b_len;
    pcre2_code *re;         /* REPLACE_REGEX */
    la_unicode_form form;   /* UNICODE */
    bool left, right;       /* STRIP */
    bool clean_text, chinese_chars, strip_accents, lowercase; /* BERT */
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

/* Every pre-tokenizer is one of these steps, run in order on the pieces of the one before;
 * BertPreTokenizer and Whitespace are read as the steps they are made of. */
typedef enum la_tok_pre_kind {
    LA_TOK_PRE_SPLIT,        /* Split(pattern, behavior, invert); Whitespace */
    LA_TOK_PRE_BYTE_LEVEL,   /* ByteLevel(add_prefix_space, use_regex): always the last step */
    LA_TOK_PRE_METASPACE,    /* Metaspace(replacement, prepend_scheme, split) */
    LA_TOK_PRE_CHARS,        /* split at each character of a class: Digits, Punctuation,
                                WhitespaceSplit, CharDelimiterSplit, BertPreTokenizer */
    LA_TOK_PRE_FIXED_LENGTH, /* FixedLength: pieces of `length` characters */
} la_tok_pre_kind;

typedef enum la_tok_char_class {
    LA_TOK_CHARS_NUMERIC,   /* Rust char::is_numeric (Digits) */
    LA_TOK_CHARS_PUNCT,     /* ASCII punctuation or P* (Punctuation, BertPreTokenizer) */
    LA_TOK_CHARS_SPACE,     /* White_Space (WhitespaceSplit, BertPreTokenizer) */
    LA_TOK_CHARS_DELIMITER, /* one character (CharDelimiterSplit) */
} la_tok_char_class;

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
    la_tok_split_behavior behavior; /* SPLIT, CHARS */
    bool invert;
    bool add_prefix_space; /* BYTE_LEVEL */
    char repl[5];          /* METASPACE: the replacement character, UTF-8 */
    size_t repl_len;
    la_tok_prepend prepend; /* METASPACE */
    bool split;             /* METASPACE */
    la_tok_char_class chars; /* CHARS */
    uint32_t delimiter;      /* CHARS with LA_TOK_CHARS_DELIMITER */
    size_t length;           /* FIXED_LENGTH, in characters */
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
    LA_TOK_DEC_PIECES,     /* a chain of the steps below, ByteFallback and Fuse (decode.c) */
} la_tok_dec_kind;

/* A per-token step of a decoder chain: Replace (String pattern a -> b), Strip (up to start /
 * stop `content` characters off each end), Metaspace (replacement -> ' ', dropped in the
 * first token unless prepend_scheme is never). */
typedef enum la_tok_dstep_kind {
    LA_TOK_DSTEP_REPLACE,
    LA_TOK_DSTEP_STRIP,
    LA_TOK_DSTEP_METASPACE,
} la_tok_dstep_kind;

typedef struct la_tok_dstep {
    la_tok_dstep_kind kind;
    char *a, *b;
    size_t a_len, b_len;     /* REPLACE */
    uint32_t content;        /* STRIP */
    int32_t start, stop;     /* STRIP */
    uint32_t replacement;    /* METASPACE */
    bool drop_first;         /* METASPACE */
} la_tok_dstep;

/* The chain of a PIECES decoder, in HF's order of its Sequence:
 *   steps[0 .. n_table)            Replace steps at the head, applied to every token at load
 *                                  (text below holds their result);
 *   steps[n_table .. n_before)     per-token steps before ByteFallback (or before Fuse when
 *                                  there is no ByteFallback), on each token as it arrives;
 *   ByteFallback (byte_fallback)   runs of <0xNN> tokens become their text, or one U+FFFD
 *                                  token per byte when the run is not UTF-8;
 *   steps[n_before .. n_fuse)      per-token steps on what ByteFallback gives;
 *   Fuse (fused)                   everything becomes one token;
 *   steps[n_fuse .. n_steps)       steps on that one token: the whole text, streamed. */
typedef struct la_tok_decoder {
    la_tok_dec_kind kind;
    /* per id: BYTE_LEVEL the token's bytes; PIECES the token after steps[0 .. n_table);
     * JOIN the token itself */
    la_tok_strtab text;
    la_tok_dstep *steps;
    int n_steps, n_table, n_before, n_fuse;
    bool byte_fallback, fused;
} la_tok_decoder;

/* ---- the tokenizer --------------------------------------------------------------------- */

struct la_tokenizer {
    char *path; /* <dir>/tokenizer.json, for messages */
    int32_t max_token_bytes; /* la_tokenizer_max_token_bytes */
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
    char *bos_token, *eos_token; /* tokenizer_config.json's strings, NULL when absent */
    char *chat_template;
};

#endif
