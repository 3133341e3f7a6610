/* config.json through la_model_config_load: the input as it is, or, when it starts with the
 * byte 0x01, the rest as generation_config.json beside a valid config. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "model/config.h"

static const char k_valid[] =
    "{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 8,"
    " \"num_hidden_layers\": 1, \"num_attention_heads\": 4}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bool gen = size > 0 && data[0] == 1;
    fuzz_write("config.json", gen ? (const uint8_t *)k_valid : data, gen ? sizeof k_valid - 1 : size);
    fuzz_write("generation_config.json", gen ? data + 1 : (const uint8_t *)"{}", gen ? size - 1 : 2);
    la_model_config c;
    la_err err;
    if (la_model_config_load(fuzz_dir(), &c, &err) == LA_OK) {
        float *inv = malloc(sizeof(float) * (size_t)(c.head_dim / 2 + 1));
        la_rope_inv_freq(&c, inv);
        free(inv);
    }
    return 0;
}
