/* A KV store record header read back (kv/store/record.h): any bytes decode or are rejected
 * with a reason; one that is accepted re-encodes to a header that decodes to the same. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/store/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    la_kv_record_header want, got;
    memset(&want, 0, sizeof want);
    if (size >= LA_KV_RECORD_HEADER_BYTES) { /* want what the bytes say, or nearly */
        la_kv_record_header probe;
        if (la_kv_record_header_check(data, size, &want, &probe) != LA_KV_REJECT_NONE) want = probe;
    }
    memset(&got, 0, sizeof got);
    la_kv_reject r = la_kv_record_header_check(data, size, &want, &got);
    if (r == LA_KV_REJECT_NONE) {
        uint8_t again[LA_KV_RECORD_HEADER_BYTES];
        la_kv_record_header_encode(&got, again);
        la_kv_record_header back;
        memset(&back, 0, sizeof back);
        if (la_kv_record_header_check(again, sizeof again, &got, &back) != LA_KV_REJECT_NONE) abort();
        if (memcmp(&back, &got, sizeof back)) abort();
    }
    return 0;
}
