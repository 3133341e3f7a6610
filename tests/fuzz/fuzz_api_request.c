/* An HTTP request body into la_request_params (src/server/api_request.c): every route's
 * parser; the first byte picks the route. Nothing may crash, leak or read out of bounds;
 * a body the parser accepts must be strict JSON. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/json.h"
#include "server/api_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const la_api_kind kinds[4] = {LA_API_COMPLETION, LA_API_CHAT, LA_API_DOCUMENTS, LA_API_TOKENIZE};
    la_api_kind kind = kinds[data[0] % 4];
    la_api_limits lim = {.max_docs = 16, .max_tokens = 4096, .default_max_tokens = 16,
                         .default_chat_max_tokens = 512, .max_stop = 16, .vocab_size = 512,
                         .ignore_unknown_fields = (data[0] & 4) != 0};
    la_api_request r;
    la_api_fault fault;
    la_err err;
    const char *body = (const char *)data + 1;
    if (la_api_request_parse(kind, body, size - 1, &lim, &r, &fault, &err) == LA_OK) {
        char path[64];
        const char *why;
        if (!la_json_strict_check(body, size - 1, path, sizeof path, &why)) abort();
        la_api_request_fini(&r);
    }
    return 0;
}
