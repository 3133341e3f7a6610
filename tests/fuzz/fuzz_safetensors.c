/* A model.safetensors (header and data) opened by la_st_open; every tensor it lists is
 * looked up again by name and its bytes read. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write("model.safetensors", data, size);
    la_st_file *f = NULL;
    la_err err;
    if (la_st_open(fuzz_dir(), &f, &err) == LA_OK) {
        for (int64_t i = 0; i < la_st_count(f); i++) {
            const la_st_tensor *t = la_st_get(f, i);
            if (la_st_find(f, t->name) == NULL) abort();
            volatile uint8_t sum = 0;
            for (size_t b = 0; b < t->n_bytes; b++) sum += ((const uint8_t *)t->data)[b];
            (void)sum;
        }
        la_st_close(f);
    }
    return 0;
}
