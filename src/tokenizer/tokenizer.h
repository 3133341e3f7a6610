/* la_tokenizer: Hugging Face tokenizer.json (the `tokenizers` library's format), encoding
 * and decoding id-for-id and byte-for-byte as tokenizers' Tokenizer.encode/decode
 * (checked against tokenizers 0.23 by tests/tokenizer/test_tokenizer.c fixtures).
 *
 * Supported: the BPE model (byte-level as in GPT-2 / Llama 3 / Qwen2 / SmolLM2, or
 * SentencePiece-style with byte_fallback as in Llama 2 / Mistral) with every normalizer,
 * pre-tokenizer and decoder of tokenizers that BPE checkpoints use:
 *   normalizers     NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Replace (String
 *                   or Regex), Prepend, Nmt, ByteLevel, BertNormalizer, Sequence;
 *   pre-tokenizers  Split (String or Regex, every behavior, invert), ByteLevel (the last
 *                   step), Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit,
 *                   BertPreTokenizer, CharDelimiterSplit, FixedLength, Sequence;
 *   decoders        ByteLevel, or a chain of Replace (String), ByteFallback, Fuse, Strip,
 *                   Metaspace in any order tokenizers allows (ByteFallback before Fuse);
 *   post-processors TemplateProcessing, ByteLevel, Sequence.
 * Refused at load with LA_ERR_UNSUPPORTED naming the part, never silently ignored:
 * WordPiece / Unigram / WordLevel models, the Precompiled normalizer (SentencePiece
 * charsmaps), UnicodeScripts, the WordPiece / CTC / BPEDecoder decoders, Bert / Roberta
 * post-processors, regexes with \b, \B or \W inside a class.
 * Each type has a fixture against tokenizers 0.23 (tests/tokenizer/test_tokenizer.c).
 * Unicode data: utf8proc (Debian 2.8: Unicode 15) for normalization forms, categories and
 * case; HF uses older crates for some of them, so characters added since about Unicode 11
 * can differ: a sweep of every code point (tokenizer_fixtures.py --sweep --sweep-dir)
 * finds 0 differences for Qwen2's NFC + regex and for Punctuation, 134 for NFKC (e.g.
 * U+32FF, Unicode 12.1) and 496 for BertNormalizer (marks added since Unicode 11).
 * Added and special tokens (added_tokens) are matched in text before the model runs,
 * leftmost-longest, honouring their lstrip/rstrip/single_word/normalized flags as HF does.
 * BOS/EOS come from tokenizer_config.json (bos_token, eos_token) and the
 * TemplateProcessing post-processor; for tokenizer_class LlamaTokenizer(Fast) the
 * template is rebuilt from add_bos_token/add_eos_token as transformers does.
 * Regex: PCRE2 with UTF and UCP. Three Oniguruma differences are rewritten away: U+180E is
 * not whitespace in HF's engine though PCRE2's \s says it is, HF's (?i:'s) does not
 * match "'ſ" (U+017F) though PCRE2's caseless match does, and Oniguruma's \w holds marks
 * and Alphabetic characters that PCRE2's does not (see rewrite() in regex.c).
 * Unicode properties are PCRE2's (Debian 10.42: Unicode 14); HF's engine knows Unicode 16.
 * A sweep of every code point (tools/oracle/tokenizer_fixtures.py --sweep) finds 120 that
 * encode differently, all digits of scripts added since (e.g. Kawi U+11F50..U+11F59),
 * which \p{N}{1,3} groups differently.
 * Decoding is tokenizers' decode: transformers' clean_up_tokenization_spaces is not
 * applied, so decode(encode(s)) == s for the supported tokenizers.
 *
 * Threads: after load, every function may be called from any number of threads at once
 * on the same tokenizer (a la_detok belongs to one thread at a time).
 */
#ifndef LA_TOKENIZER_TOKENIZER_H
#define LA_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "lazyattn/status.h"

typedef struct la_tokenizer la_tokenizer;

/* Load <dir>/tokenizer.json and, when present, <dir>/tokenizer_config.json (and
 * <dir>/chat_template.jinja when the config has no chat_template). dir may hold only
 * tokenizer files. Caller owns *out; free with la_tokenizer_destroy().
 * Errors (messages name the file): LA_ERR_IO (missing or unreadable), LA_ERR_FORMAT (bad
 * JSON, a file that is not UTF-8, missing or ill-typed model fields, a merge whose parts
 * are not in the vocab, bos_token/eos_token that are not tokens), LA_ERR_UNSUPPORTED
 * (model type other than BPE, unknown normalizer/pre-tokenizer/decoder/post-processor).
 * *out is untouched on error. */
la_status la_tokenizer_load(const char *dir, la_tokenizer **out, la_err *err);
void la_tokenizer_destroy(la_tokenizer *tok); /* NULL: nothing */

/* Encode `len` bytes of UTF-8 text (NUL bytes allowed; text may be NULL when len is 0).
 *   add_special  true: apply the post-processor (BOS as HF's add_special_tokens=True)
 *   *out_ids     [*out_n] int32 token ids; caller owns it (never NULL on success, even
 *                for 0 ids); free with free()
 * Special tokens written in the text ("<|eot_id|>") are always matched, as HF does.
 * Invalid UTF-8 input: LA_ERR_INVALID_ARG naming the byte offset (HF's Python API
 * cannot receive invalid UTF-8 either). LA_ERR_NO_MEMORY; LA_ERR_TOO_LONG (over 2^31
 * ids). Errors leave outputs untouched. */
la_status la_tokenizer_encode(const la_tokenizer *tok, const char *text, size_t len,
                              bool add_special, int32_t **out_ids, int32_t *out_n,
                              la_err *err);

/* Decode ids to UTF-8 text as HF's decode(ids, skip_special_tokens=skip_special).
 * Invalid UTF-8 produced by byte tokens becomes U+FFFD as in HF (ByteLevel: one per
 * maximal ill-formed subsequence; ByteFallback: one per byte of an invalid run).
 *   *out_text  caller owns it (NUL-terminated); free with free()
 *   *out_len   bytes, excluding the NUL (may be NULL; the text may contain NULs)
 * Errors: LA_ERR_INVALID_ARG (an id outside [0, vocab_size) or without a token; HF
 * silently skips those), LA_ERR_NO_MEMORY. Outputs untouched on error. */
la_status la_tokenizer_decode(const la_tokenizer *tok, const int32_t *ids, int32_t n,
                              bool skip_special, char **out_text, size_t *out_len,
                              la_err *err);

/* 1 + the largest id of the vocab and the added tokens (Llama 3: 128256): the number of
 * embedding rows the ids index. Equals HF's get_vocab_size(with_added_tokens=True) when
 * the ids have no holes. */
int32_t la_tokenizer_vocab_size(const la_tokenizer *tok);
/* The longest text one token stands for, in bytes, when every input character ends up in
 * some token (nothing in this tokenizer's pipeline deletes text, and the model drops no
 * character): a text of B bytes then encodes to at least B / (3 x this) tokens (3: what a
 * Unicode normalization folds at most). 0 when no such bound holds. Lets a caller refuse a
 * text far over a context without tokenizing it. */
int32_t la_tokenizer_max_token_bytes(const la_tokenizer *tok);
/* tokenizer_config.json bos_token, else the first id the template puts before the text;
 * -1 if none. */
int32_t la_tokenizer_bos_id(const la_tokenizer *tok);
/* tokenizer_config.json eos_token (Llama 3.x Instruct: <|eot_id|>); -1 if none. The
 * model's generation_config.json may list more stop ids. */
int32_t la_tokenizer_eos_id(const la_tokenizer *tok);
/* Whether encode(..., add_special=true) starts with bos_id. */
bool la_tokenizer_adds_bos(const la_tokenizer *tok);
/* Id of a token string (added tokens first, then the model vocab), or -1. */
int32_t la_tokenizer_token_to_id(const la_tokenizer *tok, const char *token);
/* The token string of an id as stored in tokenizer.json (ByteLevel tokens in their
 * alphabet, e.g. "Ġhello"), NUL-terminated, valid while tok lives; NULL if none. */
const char *la_tokenizer_id_to_token(const la_tokenizer *tok, int32_t id);
/* The bytes id adds to decoded text in the middle of a stream (not the first token, where a
 * Metaspace decoder drops the leading space; no Strip): ByteLevel tokens' raw bytes (a part
 * of a UTF-8 character stays a part), <0xNN> byte-fallback tokens their byte, pieces with
 * their replacements applied, added tokens their content. Writes min(length, cap) bytes to
 * buf (may be NULL when cap is 0); returns the length, or -1 for an id without a token. */
int64_t la_tokenizer_token_bytes(const la_tokenizer *tok, int32_t id, char *buf, size_t cap);
/* Whether id is a special added token (skipped by skip_special). */
bool la_tokenizer_is_special(const la_tokenizer *tok, int32_t id);
/* The chat_template string of tokenizer_config.json, or NULL. Valid while tok lives. */
const char *la_tokenizer_chat_template(const la_tokenizer *tok);
/* tokenizer_config.json's bos_token / eos_token strings (what transformers hands a chat
 * template as bos_token / eos_token), NULL when the config has none. Valid while tok lives. */
const char *la_tokenizer_bos_token(const la_tokenizer *tok);
const char *la_tokenizer_eos_token(const la_tokenizer *tok);

/* Incremental detokenizer for streaming: feed ids one at a time, get the new text that
 * is final. Never emits a broken UTF-8 sequence: bytes of an unfinished character are
 * held until it completes (or replaced with U+FFFD when it cannot complete), and the
 * concatenation of all pieces plus la_detok_flush() equals la_tokenizer_decode() of the
 * whole id sequence (skip_special as given at create). Held text is bounded by one
 * character for ByteLevel tokenizers; for ByteFallback a run of <0xNN> tokens is held
 * until it ends (HF decides its validity as a whole).
 * One la_detok per stream; tok must outlive it. Caller owns *out; free with
 * la_detok_destroy(). Errors: LA_ERR_NO_MEMORY. */
typedef struct la_detok la_detok;
la_status la_detok_create(const la_tokenizer *tok, bool skip_special, la_detok **out,
                          la_err *err);
void la_detok_destroy(la_detok *d); /* NULL: nothing */
/* Append id; *piece is the newly final text (NUL-terminated, may be ""), *piece_len its
 * bytes (may be NULL), valid until the next call on d. Errors: LA_ERR_INVALID_ARG (id out
 * of range; state unchanged), LA_ERR_NO_MEMORY. */
la_status la_detok_push(la_detok *d, int32_t id, const char **piece, size_t *piece_len,
                        la_err *err);
/* Remaining held text at end of stream (U+FFFD for an incomplete character). The stream
 * then ends: push after flush starts no new stream (create another la_detok). */
la_status la_detok_flush(la_detok *d, const char **piece, size_t *piece_len, la_err *err);

#endif
