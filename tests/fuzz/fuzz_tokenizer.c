/* Encode and decode with real tokenizers: the bundled model's (Llama 3 style byte-level BPE)
 * and a SentencePiece-style one (Metaspace, byte fallback). Text in, ids out and back; ids
 * from the bytes decoded. Nothing may crash; a decode of an encode is valid UTF-8. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static la_tokenizer *g_tok[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *dirs[2] = {LA_SOURCE_DIR "/models/rag-tiny", LA_SOURCE_DIR "/tests/fixtures/tokenizer/dec-bytefallback-metaspace"};
    for (int i = 0; i < 2; i++) {
        la_err err;
        if (la_tokenizer_load(dirs[i], &g_tok[i], &err) != LA_OK) abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    la_tokenizer *tok = g_tok[data[0] & 1];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    la_err err;
    int32_t *ids = NULL, n = 0;
    if (la_tokenizer_encode(tok, text, len, (data[0] & 2) != 0, &ids, &n, &err) == LA_OK) {
        char *back = NULL;
        size_t back_len = 0;
        if (la_tokenizer_decode(tok, ids, n, (data[0] & 4) != 0, &back, &back_len, &err) != LA_OK) abort();
        free(back);
        free(ids);
    }
    /* the bytes as ids */
    int32_t vocab = la_tokenizer_vocab_size(tok), m = (int32_t)(len / 2);
    int32_t *raw = malloc(sizeof(int32_t) * (size_t)(m ? m : 1));
    for (int32_t i = 0; i < m; i++) raw[i] = (int32_t)((data[1 + 2 * i] | data[2 + 2 * i] << 8) % (uint32_t)vocab);
    char *out = NULL;
    size_t out_len = 0;
    if (la_tokenizer_decode(tok, raw, m, (data[0] & 8) != 0, &out, &out_len, &err) == LA_OK) free(out);
    free(raw);
    return 0;
}
