/* la_tokenizer_token_bytes (src/tokenizer/decode.c): the raw bytes each token adds. For
 * byte-level BPE (the bundled model's and Llama 3's tokenizers) the tokens' bytes of an
 * encoding, concatenated, are the text's bytes exactly, including tokens that hold part of
 * a UTF-8 character; out-of-range ids give -1; a short buffer gets the first bytes and the
 * full length. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "common/test_util.h"
#include "tokenizer/tokenizer.h"

static void concat_is_text(const char *dir, const char *text) {
    la_tokenizer *tok = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_load(dir, &tok, &err), err);
    int32_t *ids = NULL, n = 0;
    LA_CHECK_OK(la_tokenizer_encode(tok, text, strlen(text), false, &ids, &n, &err), err);
    char out[1024];
    size_t len = 0;
    for (int32_t i = 0; i < n; i++) {
        char buf[256];
        int64_t k = la_tokenizer_token_bytes(tok, ids[i], buf, sizeof buf);
        cr_assert_gt(k, 0, "token %d", ids[i]);
        memcpy(out + len, buf, (size_t)k);
        len += (size_t)k;
    }
    out[len] = '\0';
    cr_assert_str_eq(out, text, "%s", dir);
    cr_assert_eq(la_tokenizer_token_bytes(tok, -1, NULL, 0), -1);
    cr_assert_eq(la_tokenizer_token_bytes(tok, la_tokenizer_vocab_size(tok) + 5, NULL, 0), -1);
    char two[2];
    int64_t full = la_tokenizer_token_bytes(tok, ids[0], NULL, 0);
    cr_assert_eq(la_tokenizer_token_bytes(tok, ids[0], two, 1), full, "the length, whatever the buffer");
    free(ids);
    la_tokenizer_destroy(tok);
}

Test(token_bytes, byte_level_tokens_concatenate_to_the_text) {
    char *rag = la_test_path("models/rag-tiny");
    concat_is_text(rag, "Elkrak Avoltrax was born in Chas, na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82!");
    free(rag);
}

Test(token_bytes, llama3_tokens_concatenate_to_the_text) {
    char llama3[1024];
    snprintf(llama3, sizeof llama3, "%s/data/tokenizers/llama3/tokenizer.json", la_test_shared_dir());
    cr_assert(access(llama3, R_OK) == 0, "%s is missing: the shared data (../shared or $LA_SHARED_DIR) that the "
              "llama3 tokenizer fixtures use too", llama3);
    snprintf(llama3, sizeof llama3, "%s/data/tokenizers/llama3", la_test_shared_dir());
    concat_is_text(llama3, "Structured {\"json\": [1, 2.5e3, \"\\u00e9\"]} \xe2\x82\xac\xf0\x9f\x99\x82 tabs\there");
}
