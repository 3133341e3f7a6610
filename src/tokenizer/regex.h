/* Regular expressions of tokenizer.json (private to src/tokenizer/): Oniguruma patterns (what
 * HF tokenizers' SysRegex runs) rewritten for PCRE2, and the splits HF computes from a
 * pattern: the matches of a regex, a literal or a character predicate, with the gaps
 * between them, in order (tokenizers' Pattern::find_matches, tokenizer/pattern.rs).
 */
#ifndef LA_TOKENIZER_REGEX_H
#define LA_TOKENIZER_REGEX_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A split of s[0..n): [start, end) byte ranges in order, covering s; match marks the
 * pattern's matches (the others are the gaps between them). */
typedef struct la_tok_range {
    size_t start, end;
    bool match;
} la_tok_range;

typedef struct la_tok_ranges {
    la_tok_range *v;
    size_t n, cap;
} la_tok_ranges;

bool la_tok_ranges_push(la_tok_ranges *l, size_t start, size_t end, bool match);

typedef enum la_tok_regex_result {
    LA_TOK_REGEX_OK = 0,
    LA_TOK_REGEX_NO_MEMORY,
    LA_TOK_REGEX_BAD,         /* PCRE2 does not compile it: msg says why */
    LA_TOK_REGEX_UNSUPPORTED, /* a construct whose meaning differs between the engines */
} la_tok_regex_result;

/* Compile an Oniguruma pattern as PCRE2 (UTF, UCP, JIT when available) with the same
 * meaning; see the essay at rewrite() in regex.c. *out: free with pcre2_code_free().
 * On failure msg[msg_len] holds the reason. */
la_tok_regex_result la_tok_regex_compile(const char *pat, pcre2_code **out, char *msg,
                                         size_t msg_len);

/* The matches of re in s[0..n) and the gaps between them, appended to out, in the order
 * Oniguruma's find_iter (the onig crate) yields them: an empty match right where the
 * previous match ended is skipped by advancing one character. md: match data of re.
 * Returns 0, 1 when out of memory, or a PCRE2 error code (< 0). */
int la_tok_regex_ranges(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n,
                        la_tok_ranges *out);

/* The same for a literal string (no match when lit_len == 0). Returns false on OOM. */
bool la_tok_literal_ranges(const char *lit, size_t lit_len, const char *s, size_t n,
                           la_tok_ranges *out);

/* The same for a character predicate: every character for which pred is true is one
 * match of its own (tokenizers' `impl Pattern for Fn(char) -> bool`). */
bool la_tok_char_ranges(bool (*pred)(uint32_t cp, const void *ctx), const void *ctx,
                        const char *s, size_t n, la_tok_ranges *out);

#endif
