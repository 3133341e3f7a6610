/* The normalizer of tokenizer.json (normalizer.c): reading it into la_tokenizer and running
 * it, which encoding and the loading of normalized added tokens share. Private to
 * src/tokenizer/.
 */
#ifndef LA_TOKENIZER_NORMALIZER_H
#define LA_TOKENIZER_NORMALIZER_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "lazyattn/status.h"
#include "tokenizer/tokenizer_internal.h"

/* "normalizer" (NULL: none) -> tok->norms, a Sequence flattened: Prepend, Replace (String or
 * Regex pattern), NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Nmt, ByteLevel,
 * BertNormalizer. Errors: LA_ERR_FORMAT (a malformed part), LA_ERR_UNSUPPORTED (another
 * type, e.g. Precompiled), LA_ERR_NO_MEMORY; messages name tok->path. What was appended
 * before an error stays for la_tokenizer_destroy to free. */
la_status la_tok_add_normalizer(la_tokenizer *tok, const cJSON *n, la_err *err);

/* Run the normalizers on s[0..n) (well-formed UTF-8), appending the result to out, as HF's
 * NormalizedString does. Returns false on out-of-memory (or a regex match failure). */
bool la_tok_normalize(const la_tokenizer *tok, const char *s, size_t n, la_tok_buf *out);

/* Free what a step owns. */
void la_tok_norm_fini(la_tok_norm *step);

#endif
