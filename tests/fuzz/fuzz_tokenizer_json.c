/* A tokenizer.json (and the bundled model's tokenizer_config.json beside it) loaded by
 * la_tokenizer_load: any bytes either load or are refused with a message. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static const char cfg[] = "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": \"<|eot_id|>\"}";
    fuzz_write("tokenizer_config.json", (const uint8_t *)cfg, sizeof cfg - 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write("tokenizer.json", data, size);
    la_tokenizer *tok = NULL;
    la_err err = {0};
    if (la_tokenizer_load(fuzz_dir(), &tok, &err) == LA_OK) {
        int32_t *ids = NULL, n = 0;
        if (la_tokenizer_encode(tok, "Hello world 123 <|eot_id|>", 26, true, &ids, &n, &err) == LA_OK) free(ids);
        la_tokenizer_destroy(tok);
    } else if (!err.msg[0]) {
        abort(); /* a refusal says why */
    }
    return 0;
}
