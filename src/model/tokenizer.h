/* la_tokenizer: Hugging Face tokenizer.json (the `tokenizers` library's format).
 *
 * Supported models:
 *   - byte-level BPE as in Llama 3 / GPT-2: pre_tokenizer Sequence[Split(regex,
 *     behavior Isolated), ByteLevel(use_regex false)] or ByteLevel(use_regex true), the
 *     ByteLevel byte->unicode alphabet, `ignore_merges` honoured, decoder ByteLevel;
 *   - SentencePiece-style BPE as in Llama 2 / Mistral: normalizer Prepend("▁") +
 *     Replace(" ", "▁") (or the Metaspace pre-tokenizer), byte_fallback with <0xNN>
 *     tokens, decoder Replace/ByteFallback/Fuse/Strip.
 * Added and special tokens (added_tokens) are matched in text before the model runs,
 * honouring their lstrip/rstrip/single_word/normalized flags as HF does.
 * BOS/EOS come from tokenizer_config.json (bos_token, eos_token, add_bos_token) and the
 * TemplateProcessing post-processor.
 * Regex: PCRE2 with UTF and UCP; U+180E is not whitespace in HF's engine (Rust
 * fancy-regex/onig) though PCRE2 says it is: the tokenizer matches HF.
 */
#ifndef LA_MODEL_TOKENIZER_H
#define LA_MODEL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "lazyattn/status.h"

typedef struct la_tokenizer la_tokenizer;

/* Load <dir>/tokenizer.json and, when present, <dir>/tokenizer_config.json. dir may
 * hold only tokenizer files. Caller owns *out; free with la_tokenizer_destroy().
 * Errors: LA_ERR_IO (missing), LA_ERR_FORMAT (bad JSON, non-UTF-8 file, missing model
 * fields), LA_ERR_UNSUPPORTED (model type other than BPE, unknown pre-tokenizer). */
la_status la_tokenizer_load(const char *dir, la_tokenizer **out, la_err *err);
void la_tokenizer_destroy(la_tokenizer *tok);

/* Encode `len` bytes of UTF-8 text.
 *   add_special  true: apply the post-processor (BOS as HF's add_special_tokens=True)
 *   *out_ids     caller owns it; free with free(); *out_n tokens
 * Invalid UTF-8 input: LA_ERR_INVALID_ARG naming the byte offset (HF's Python API
 * cannot receive invalid UTF-8 either). Errors leave outputs untouched. */
la_status la_tokenizer_encode(const la_tokenizer *tok, const char *text, size_t len,
                              bool add_special, int32_t **out_ids, int32_t *out_n,
                              la_err *err);

/* Decode ids to UTF-8 text as HF's decode(ids, skip_special_tokens=skip_special).
 * Invalid UTF-8 produced by byte tokens becomes U+FFFD as in HF.
 *   *out_text  caller owns it (NUL-terminated); free with free()
 * Errors: LA_ERR_INVALID_ARG (id out of range). */
la_status la_tokenizer_decode(const la_tokenizer *tok, const int32_t *ids, int32_t n,
                              bool skip_special, char **out_text, size_t *out_len,
                              la_err *err);

int32_t la_tokenizer_vocab_size(const la_tokenizer *tok); /* includes added tokens */
int32_t la_tokenizer_bos_id(const la_tokenizer *tok);     /* -1 if none */
int32_t la_tokenizer_eos_id(const la_tokenizer *tok);     /* -1 if none */
bool la_tokenizer_adds_bos(const la_tokenizer *tok);      /* post-processor adds BOS */
/* Id of a token string (added tokens included), or -1. */
int32_t la_tokenizer_token_to_id(const la_tokenizer *tok, const char *token);
/* Whether id is a special added token. */
bool la_tokenizer_is_special(const la_tokenizer *tok, int32_t id);
/* The chat_template string of tokenizer_config.json, or NULL. Valid while tok lives. */
const char *la_tokenizer_chat_template(const la_tokenizer *tok);

/* Incremental detokenizer for streaming: feed ids one at a time, get the new text that
 * is final. Never emits a broken UTF-8 sequence: bytes of an unfinished character are
 * held until it completes (or replaced with U+FFFD when it cannot complete), and the
 * concatenation of all pieces plus la_detok_flush() equals la_tokenizer_decode() of the
 * whole id sequence (skip_special as given at init). */
typedef struct la_detok la_detok;
la_status la_detok_create(const la_tokenizer *tok, bool skip_special, la_detok **out,
                          la_err *err);
void la_detok_destroy(la_detok *d);
/* Append id; *piece is the newly final text (NUL-terminated, may be ""), valid until the
 * next call on d. Errors: LA_ERR_INVALID_ARG (id out of range; state unchanged). */
la_status la_detok_push(la_detok *d, int32_t id, const char **piece, size_t *piece_len,
                        la_err *err);
/* Remaining held text at end of stream (U+FFFD for an incomplete character). */
la_status la_detok_flush(la_detok *d, const char **piece, size_t *piece_len, la_err *err);

#endif
