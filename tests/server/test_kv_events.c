/* src/server/kv_events.c: the three-frame messages and the msgpack layout of vLLM's
 * KVEventBatch (array_like), read back by a real ZMQ SUB socket and msgpack-c. */
#include <msgpack.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/services.h"
#include "common/test_util.h"
#include "server/kv_events.h"

static bool str_is(const msgpack_object *o, const char *s) {
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) && !memcmp(o->via.str.ptr, s, o->via.str.size);
}

Test(kv_events, batches_carry_vllm_shaped_events_in_sequence) {
    int port = la_test_free_port();
    char bind_ep[64], conn_ep[64];
    snprintf(bind_ep, sizeof bind_ep, "tcp://*:%d", port);
    snprintf(conn_ep, sizeof conn_ep, "tcp://127.0.0.1:%d", port);
    la_kv_events *p = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_kv_events_create(bind_ep, "kv", 3, &p, &err), err);
    void *ctx = zmq_ctx_new(), *sub = zmq_socket(ctx, ZMQ_SUB);
    cr_assert_eq(zmq_connect(sub, conn_ep), 0);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
    int timeout = 200;
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout, sizeof timeout);

    /* PUB drops what it sends before the subscription arrives: send probes until one lands */
    char frame[3][4096];
    int len[3] = {0};
    bool got = false;
    for (int tries = 0; tries < 50 && !got; tries++) {
        la_kv_events_add(p, &(la_kv_event){.kind = LA_KV_EVENT_CLEARED});
        la_kv_events_flush(p);
        got = zmq_recv(sub, frame[0], sizeof frame[0], 0) >= 0;
    }
    cr_assert(got, "no message reached the subscriber");
    int more = 1;
    size_t ms = sizeof more;
    while (zmq_getsockopt(sub, ZMQ_RCVMORE, &more, &ms) == 0 && more) zmq_recv(sub, frame[1], sizeof frame[1], 0);
    /* drain the other probes */
    while (zmq_recv(sub, frame[0], sizeof frame[0], ZMQ_DONTWAIT) >= 0) {}

    const uint64_t hashes[2] = {0x1111222233334444ull, 0xffffeeeeddddccccull};
    const int32_t tokens[5] = {1, 2, 3, 4, 5};
    la_kv_events_add(p, &(la_kv_event){.kind = LA_KV_EVENT_STORED, .medium = LA_KV_MEDIUM_GPU, .n_blocks = 2,
                                       .block_hashes = hashes, .has_parent = true, .parent_hash = 42,
                                       .token_ids = tokens, .n_tokens = 5, .block_size = 4, .is_document = true,
                                       .doc_key_lo = 0xabcull, .doc_key_hi = 0x123ull, .doc_block0 = 1,
                                       .doc_n_tokens = 21});
    la_kv_events_add(p, &(la_kv_event){.kind = LA_KV_EVENT_REMOVED, .medium = LA_KV_MEDIUM_DISK, .n_blocks = 1,
                                       .block_hashes = hashes});
    la_kv_events_add(p, &(la_kv_event){.kind = LA_KV_EVENT_STORED, .medium = LA_KV_MEDIUM_CPU, .n_blocks = 1,
                                       .block_hashes = hashes + 1, .token_ids = tokens, .n_tokens = 4,
                                       .block_size = 4});
    la_kv_events_flush(p);
    for (int f = 0; f < 3; f++) {
        len[f] = zmq_recv(sub, frame[f], sizeof frame[f], 0);
        cr_assert(len[f] >= 0, "frame %d", f);
    }
    cr_assert_eq(len[0], 2);
    cr_assert(!memcmp(frame[0], "kv", 2));
    cr_assert_eq(len[1], 8);
    uint64_t seq = 0;
    for (int i = 0; i < 8; i++) seq = seq << 8 | (uint8_t)frame[1][i];
    cr_assert(seq >= 1, "probes came first, seq %llu", (unsigned long long)seq);

    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    cr_assert_eq(msgpack_unpack_next(&u, frame[2], (size_t)len[2], NULL), MSGPACK_UNPACK_SUCCESS);
    msgpack_object b = u.data;
    cr_assert_eq(b.type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(b.via.array.size, 3);
    cr_assert_eq(b.via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
    cr_assert(b.via.array.ptr[0].via.f64 > 1.7e9);
    cr_assert_eq(b.via.array.ptr[2].via.u64, 3); /* data_parallel_rank */
    msgpack_object ev = b.via.array.ptr[1];
    cr_assert_eq(ev.via.array.size, 3);
    msgpack_object st = ev.via.array.ptr[0];
    cr_assert_eq(st.via.array.size, 9);
    cr_assert(str_is(&st.via.array.ptr[0], "BlockStored"));
    cr_assert_eq(st.via.array.ptr[1].via.array.size, 2);
    cr_assert_eq(st.via.array.ptr[1].via.array.ptr[1].via.u64, hashes[1]);
    cr_assert_eq(st.via.array.ptr[2].via.u64, 42);
    cr_assert_eq(st.via.array.ptr[3].via.array.size, 5);
    cr_assert_eq(st.via.array.ptr[4].via.u64, 4);
    cr_assert_eq(st.via.array.ptr[5].type, MSGPACK_OBJECT_NIL);
    cr_assert(str_is(&st.via.array.ptr[6], "GPU"));
    cr_assert_eq(st.via.array.ptr[7].type, MSGPACK_OBJECT_NIL);
    msgpack_object ek = st.via.array.ptr[8];
    cr_assert_eq(ek.via.array.size, 2);
    cr_assert(str_is(&ek.via.array.ptr[1].via.array.ptr[0], "lazyattn.document"));
    cr_assert(str_is(&ek.via.array.ptr[1].via.array.ptr[1], "00000000000001230000000000000abc"));
    cr_assert_eq(ek.via.array.ptr[1].via.array.ptr[2].via.u64, 2);
    cr_assert_eq(ek.via.array.ptr[1].via.array.ptr[3].via.u64, 21);
    msgpack_object rm = ev.via.array.ptr[1];
    cr_assert(str_is(&rm.via.array.ptr[0], "BlockRemoved"));
    cr_assert(str_is(&rm.via.array.ptr[2], "DISK"));
    msgpack_object s2 = ev.via.array.ptr[2];
    cr_assert_eq(s2.via.array.ptr[2].type, MSGPACK_OBJECT_NIL);
    cr_assert(str_is(&s2.via.array.ptr[6], "CPU"));
    cr_assert_eq(s2.via.array.ptr[8].type, MSGPACK_OBJECT_NIL);
    msgpack_unpacked_destroy(&u);

    zmq_close(sub);
    zmq_ctx_term(ctx);
    la_kv_events_destroy(p);
}

Test(kv_events, a_bad_endpoint_is_refused_with_its_reason) {
    la_kv_events *p = NULL;
    la_err err = {0};
    cr_assert_eq(la_kv_events_create("nonsense://x", NULL, 0, &p, &err), LA_ERR_INVALID_ARG);
    cr_assert_null(p);
    cr_assert(strstr(err.msg, "nonsense://x"), "%s", err.msg);
}
