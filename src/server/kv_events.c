#include "server/kv_events.h"

#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <zmq.h>

#include "base/err.h"
#include "base/timer.h"

#define HWM 100000
#define MAX_QUEUED 10000

typedef struct batch {
    char *data;
    size_t len;
    struct batch *next;
} batch;

struct la_kv_events {
    void *ctx, *pub;
    char *topic;
    int32_t dp_rank;
    /* the batch being built (engine thread) */
    msgpack_sbuffer events;
    msgpack_packer pk;
    int64_t n_events;
    /* publisher thread */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    batch *head, *tail;
    int64_t n_queued, sent, dropped;
    bool stop;
    uint64_t seq;
};

static const char *medium_name(la_kv_medium m) {
    return m == LA_KV_MEDIUM_GPU ? "GPU" : m == LA_KV_MEDIUM_CPU ? "CPU" : "DISK";
}

static void pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void *publisher_main(void *arg) {
    la_kv_events *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        if (!p->head) break;
        batch *b = p->head;
        p->head = b->next;
        if (!p->head) p->tail = NULL;
        p->n_queued--;
        pthread_mutex_unlock(&p->mu);
        uint8_t seq[8];
        for (int i = 0; i < 8; i++) seq[i] = (uint8_t)(p->seq >> (56 - 8 * i));
        p->seq++;
        bool ok = zmq_send(p->pub, p->topic, strlen(p->topic), ZMQ_SNDMORE) >= 0 &&
                  zmq_send(p->pub, seq, 8, ZMQ_SNDMORE) >= 0 && zmq_send(p->pub, b->data, b->len, 0) >= 0;
        free(b->data);
        free(b);
        pthread_mutex_lock(&p->mu);
        if (ok) p->sent++;
        else p->dropped++;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

la_status la_kv_events_create(const char *endpoint, const char *topic, int32_t dp_rank, la_kv_events **out,
                              la_err *err) {
    la_kv_events *p = calloc(1, sizeof *p);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "KV events: out of memory");
    p->topic = strdup(topic ? topic : "");
    p->dp_rank = dp_rank;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    msgpack_sbuffer_init(&p->events);
    msgpack_packer_init(&p->pk, &p->events, msgpack_sbuffer_write);
    la_status s = p->topic ? LA_OK : la_err_set(err, LA_ERR_NO_MEMORY, "KV events: out of memory");
    if (s == LA_OK && !(p->ctx = zmq_ctx_new())) s = la_err_set(err, LA_ERR_NO_MEMORY, "KV events: zmq_ctx_new failed");
    if (s == LA_OK && !(p->pub = zmq_socket(p->ctx, ZMQ_PUB)))
        s = la_err_set(err, LA_ERR_INTERNAL, "KV events: zmq_socket: %s", zmq_strerror(zmq_errno()));
    if (s == LA_OK) {
        int hwm = HWM, linger = 1000;
        zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
        zmq_setsockopt(p->pub, ZMQ_LINGER, &linger, sizeof linger);
        /* vLLM's rule: bind a wildcard or local endpoint, connect to any other */
        bool bind = strchr(endpoint, '*') || strstr(endpoint, "::") || !strncmp(endpoint, "ipc://", 6) ||
                    !strncmp(endpoint, "inproc://", 9);
        int rc = bind ? zmq_bind(p->pub, endpoint) : zmq_connect(p->pub, endpoint);
        if (rc != 0)
            s = la_err_set(err, LA_ERR_INVALID_ARG, "--kv-events %s: cannot %s: %s", endpoint, bind ? "bind" : "connect",
                           zmq_strerror(zmq_errno()));
    }
    if (s == LA_OK) {
        if (pthread_create(&p->thread, NULL, publisher_main, p) != 0)
            s = la_err_set(err, LA_ERR_INTERNAL, "KV events: cannot start the publisher thread");
        else p->started = true;
    }
    if (s != LA_OK) {
        la_kv_events_destroy(p);
        return s;
    }
    *out = p;
    return LA_OK;
}

void la_kv_events_destroy(la_kv_events *p) {
    if (!p) return;
    la_kv_events_flush(p);
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    for (batch *b = p->head, *n; b; b = n) {
        n = b->next;
        free(b->data);
        free(b);
    }
    if (p->pub) zmq_close(p->pub);
    if (p->ctx) zmq_ctx_term(p->ctx);
    msgpack_sbuffer_destroy(&p->events);
    free(p->topic);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

static void pack_u64s(msgpack_packer *pk, const uint64_t *v, int32_t n) {
    msgpack_pack_array(pk, (size_t)n);
    for (int32_t i = 0; i < n; i++) msgpack_pack_uint64(pk, v[i]);
}

static void add_stored(la_kv_events *p, const la_kv_event *ev) {
    const int32_t n = ev->n_blocks;
    if (n <= 0) return;
    msgpack_packer *pk = &p->pk;
    msgpack_pack_array(pk, 9);
    pack_str(pk, "BlockStored");
    pack_u64s(pk, ev->block_hashes, n);
    if (ev->has_parent) msgpack_pack_uint64(pk, ev->parent_hash);
    else msgpack_pack_nil(pk);
    msgpack_pack_array(pk, (size_t)ev->n_tokens);
    for (int32_t i = 0; i < ev->n_tokens; i++) msgpack_pack_int32(pk, ev->token_ids[i]);
    msgpack_pack_int32(pk, ev->block_size);
    msgpack_pack_nil(pk); /* lora_id */
    pack_str(pk, medium_name(ev->medium));
    msgpack_pack_nil(pk); /* lora_name */
    if (ev->is_document) {
        char hex[33];
        snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)ev->doc_key_hi,
                 (unsigned long long)ev->doc_key_lo);
        msgpack_pack_array(pk, (size_t)n);
        for (int32_t i = 0; i < n; i++) {
            msgpack_pack_array(pk, 4);
            pack_str(pk, "lazyattn.document");
            pack_str(pk, hex);
            msgpack_pack_int32(pk, ev->doc_block0 + i);
            msgpack_pack_int32(pk, ev->doc_n_tokens);
        }
    } else {
        msgpack_pack_nil(pk);
    }
    p->n_events++;
}

void la_kv_events_add(la_kv_events *p, const la_kv_event *ev) {
    if (!p) return;
    switch (ev->kind) {
    case LA_KV_EVENT_STORED: add_stored(p, ev); break;
    case LA_KV_EVENT_REMOVED:
        if (ev->n_blocks <= 0) return;
        msgpack_pack_array(&p->pk, 3);
        pack_str(&p->pk, "BlockRemoved");
        pack_u64s(&p->pk, ev->block_hashes, ev->n_blocks);
        pack_str(&p->pk, medium_name(ev->medium));
        p->n_events++;
        break;
    case LA_KV_EVENT_CLEARED:
        msgpack_pack_array(&p->pk, 1);
        pack_str(&p->pk, "AllBlocksCleared");
        p->n_events++;
        break;
    }
}

void la_kv_events_on_engine_event(void *user, const la_kv_event *ev) { la_kv_events_add(user, ev); }

void la_kv_events_flush(la_kv_events *p) {
    if (!p || p->n_events == 0) return;
    msgpack_sbuffer out;
    msgpack_sbuffer_init(&out);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &out, msgpack_sbuffer_write);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_double(&pk, (double)tv.tv_sec + (double)tv.tv_usec * 1e-6);
    msgpack_pack_array(&pk, (size_t)p->n_events);
    msgpack_sbuffer_write(&out, p->events.data, p->events.size);
    msgpack_pack_int32(&pk, p->dp_rank);
    msgpack_sbuffer_clear(&p->events);
    p->n_events = 0;
    batch *b = malloc(sizeof *b);
    pthread_mutex_lock(&p->mu);
    if (!b || p->n_queued >= MAX_QUEUED) {
        p->dropped++;
        pthread_mutex_unlock(&p->mu);
        free(b);
        msgpack_sbuffer_destroy(&out);
        return;
    }
    b->len = out.size;
    b->data = msgpack_sbuffer_release(&out);
    b->next = NULL;
    if (p->tail) p->tail->next = b;
    else p->head = b;
    p->tail = b;
    p->n_queued++;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void la_kv_events_counts(la_kv_events *p, int64_t *sent, int64_t *dropped) {
    pthread_mutex_lock(&p->mu);
    *sent = p->sent;
    *dropped = p->dropped;
    pthread_mutex_unlock(&p->mu);
}
