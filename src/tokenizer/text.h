/* Text helpers private to the tokenizer (src/tokenizer/): a growable byte buffer,
 * strict UTF-8 decoding and validation, Rust's lossy UTF-8 conversion (what HF's
 * decoders produce for invalid byte sequences), the Unicode White_Space property, and
 * the GPT-2 ByteLevel byte<->character alphabet. */
#ifndef LA_TOKENIZER_TEXT_H
#define LA_TOKENIZER_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- growable buffers --------------------------------------------------------------- */

/* Bytes; data is NUL-terminated whenever len > 0 or after any append. Zero-init is empty. */
typedef struct la_tok_buf {
    char *data;
    size_t len, cap;
} la_tok_buf;

/* Append n bytes. Returns false on out-of-memory (buffer unchanged). */
bool la_tok_buf_append(la_tok_buf *b, const void *p, size_t n);
/* Append the UTF-8 encoding of code point cp (<= U+10FFFF). */
bool la_tok_buf_append_cp(la_tok_buf *b, uint32_t cp);
/* Make room for n more bytes (plus the NUL). */
bool la_tok_buf_reserve(la_tok_buf *b, size_t n);
void la_tok_buf_free(la_tok_buf *b);
/* Append s[0..n) with every occurrence of a (a_len > 0) replaced by b, scanning left to
 * right without overlaps (HF Replace with a String pattern). */
bool la_tok_replace_all(const char *s, size_t n, const char *a, size_t a_len, const char *b,
                        size_t b_len, la_tok_buf *out);

/* int32 ids. */
typedef struct la_tok_ids {
    int32_t *data;
    size_t len, cap;
} la_tok_ids;

bool la_tok_ids_push(la_tok_ids *v, int32_t id);
bool la_tok_ids_append(la_tok_ids *v, const int32_t *ids, size_t n);

/* ---- UTF-8 -------------------------------------------------------------------------- */

#define LA_UTF8_REPLACEMENT 0xFFFDu

/* Length in bytes of the well-formed character at s[0..n) (n >= 1), or:
 *   0    s is a proper prefix of a well-formed character (more bytes needed);
 *   -k   s[0..k) is ill-formed: a "maximal subpart" (Unicode §3.9, D93b; what Rust's
 *        String::from_utf8_lossy replaces with one U+FFFD), k >= 1.
 * Well-formed: Unicode Table 3-7 (no overlongs, no surrogates, <= U+10FFFF). */
int la_utf8_step(const uint8_t *s, size_t n);

/* Decode the character at s (which must be well-formed; see la_utf8_step); returns its
 * byte length and writes the code point. */
int la_utf8_decode(const uint8_t *s, uint32_t *cp);

/* Byte offset of the first ill-formed or truncated sequence in s[0..n), or n if all of
 * s is well-formed UTF-8. */
size_t la_utf8_invalid_at(const uint8_t *s, size_t n);

/* Append the lossy conversion of s[0..n) to out, as Rust's String::from_utf8_lossy:
 * each maximal ill-formed subpart becomes one U+FFFD. With at_end false, a trailing
 * proper prefix of a well-formed character is not converted (it may still complete).
 * Returns the number of bytes of s consumed, or SIZE_MAX when out of memory. */
size_t la_utf8_lossy_append(la_tok_buf *out, const uint8_t *s, size_t n, bool at_end);

/* Unicode White_Space (PropList.txt): what Rust's char::is_whitespace, the `regex`
 * crate's \s and Oniguruma's \s accept. U+180E is not White_Space since Unicode 6.3. */
bool la_unicode_is_white_space(uint32_t cp);

/* General-category tests as HF tokenizers uses them, from utf8proc's tables (Debian
 * libutf8proc 2.8: Unicode 15; HF's crates may know a newer or older version):
 *   is_numeric      Rust char::is_numeric: Nd, Nl, No (pre-tokenizer Digits)
 *   is_punctuation  ASCII punctuation or P* (Pc Pd Ps Pe Pi Pf Po): tokenizers'
 *                   is_bert_punc (BertPreTokenizer, Punctuation)
 *   is_mark         Mn, Mc, Me (unicode-normalization is_combining_mark: StripAccents)
 *   is_mark_nonspacing  Mn (BertNormalizer strip_accents)
 *   is_other        Cc, Cf, Cs, Co (unicode_categories' is_other, BertNormalizer: its
 *                   tables come from UnicodeData.txt, where no code point is Cn, so HF
 *                   keeps unassigned ones such as U+10FFFF) */
bool la_unicode_is_numeric(uint32_t cp);
bool la_unicode_is_punctuation(uint32_t cp);
bool la_unicode_is_mark(uint32_t cp);
bool la_unicode_is_mark_nonspacing(uint32_t cp);
bool la_unicode_is_other(uint32_t cp);

/* Append Rust's char::to_lowercase of cp: the simple lowercase mapping, except U+0130
 * whose unconditional full mapping (SpecialCasing.txt) is "i\u0307". */
bool la_tok_buf_append_lower(la_tok_buf *b, uint32_t cp);

/* Unicode normalization of s[0..n) (well-formed UTF-8) appended to out: form is one of
 * LA_UNICODE_NFC, _NFD, _NFKC, _NFKD (utf8proc_map; the forms of UAX #15). Returns false
 * on out of memory. */
typedef enum la_unicode_form { LA_UNICODE_NFC, LA_UNICODE_NFD, LA_UNICODE_NFKC, LA_UNICODE_NFKD } la_unicode_form;
bool la_unicode_normalize(const char *s, size_t n, la_unicode_form form, la_tok_buf *out);

/* ---- ByteLevel alphabet ---------------------------------------------------------------- */

/* GPT-2 bytes_to_unicode (openai/gpt-2 encoder.py, HF tokenizers pre_tokenizers/
 * byte_level.rs): printable bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF map to
 * themselves; the other 68 bytes map to U+0100 + k in byte order. */
uint32_t la_byte_level_char(uint8_t b);
/* Inverse: the byte a character stands for, or -1 if cp is not in the alphabet. */
int la_byte_level_byte(uint32_t cp);

#endif
