/* The pipeline parts of tokenizer.json after the normalizer (pipeline.c), read into
 * la_tokenizer by la_tokenizer_load (tokenizer.c). Private to src/tokenizer/.
 *
 * The readers take the part's JSON value (NULL: the part is absent, LA_OK) and append to
 * tok's tables. Errors: LA_ERR_FORMAT (a malformed part), LA_ERR_UNSUPPORTED (a part this
 * engine does not implement), LA_ERR_NO_MEMORY; the message names tok->path. On error
 * what was appended stays for la_tokenizer_destroy to free.
 */
#ifndef LA_TOKENIZER_PIPELINE_H
#define LA_TOKENIZER_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "lazyattn/status.h"
#include "tokenizer/tokenizer_internal.h"

/* "pre_tokenizer": Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace,
 * WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, FixedLength, Sequence of those ->
 * tok->pres (UnicodeScripts and others: LA_ERR_UNSUPPORTED). */
la_status la_tok_add_pre_tokenizer(la_tokenizer *tok, const cJSON *n, la_err *err);

/* "decoder" -> tok->dec's kind and chain (the per-id table is built by the caller). */
la_status la_tok_parse_decoder(la_tokenizer *tok, const cJSON *d, la_err *err);

/* "post_processor": TemplateProcessing (ids before and after the sequence), ByteLevel,
 * Sequence of those -> tok->tpl_prefix / tpl_suffix. */
la_status la_tok_parse_post_processor(la_tokenizer *tok, const cJSON *p, la_err *err);

#endif
