/* KV events on ZMQ in the schema vLLM publishes (vllm/distributed/kv_events.py), so
 * KV-aware routers (llm-d's KV-cache indexer, Dynamo) can track what each replica holds.
 *
 * ---- Wire format ----------------------------------------------------------------------------
 * A PUB socket sends one three-frame message per batch: [topic, seq, payload]
 *   topic    the configured topic (empty by default, as vLLM)
 *   seq      8 bytes, big-endian, 0, 1, 2, ... per publisher
 *   payload  msgpack of KVEventBatch as msgspec encodes it with array_like=True:
 *              [ts (float64, seconds since the epoch), [event, ...], data_parallel_rank (int)]
 *            where each event is a tagged array:
 *              ["BlockStored", block_hashes [u64], parent_block_hash (u64 | nil),
 *               token_ids [int], block_size (int), lora_id (nil), medium (str),
 *               lora_name (nil), extra_keys ([per block: array | nil])]
 *              ["BlockRemoved", block_hashes [u64], medium (str)]
 *              ["AllBlocksCleared"]
 *
 * Differences from vLLM (README "KV events"):
 *   - block hashes are the low 64 bits of lazyattn's 128-bit block hashes (XXH3-128 keyed
 *     with the deployment secret: equal across replicas that share the secret and the
 *     model), not vLLM's SHA-256;
 *   - a document's blocks chain from a seed of their own, not from the prompt: a router
 *     that scores a request by prefix sees a document's blocks wherever it sits, and
 *     extra_keys names the document per block:
 *       ["lazyattn.document", key (32 hex digits: the record key, the same on every
 *        replica), block index in the document, the document's token count]
 *   - medium: "GPU" (the block pool on CUDA), "CPU" (the CPU backend's pool, and the host
 *     tier), "DISK" (the disk tier); the shared tier belongs to no replica and has none;
 *   - no replay socket.
 *
 * Endpoint: as vLLM, a tcp:// address with "*" (or ipc://, inproc://) is bound, any other
 * is connected to (a router that binds its SUB socket, as llm-d's indexer does).
 *
 * Threads: one thread (the engine's) adds events and ends batches; a publisher thread of
 * this module owns the socket, so a slow subscriber never stalls a step (ZMQ drops at the
 * high-water mark, 100,000 batches).
 */
#ifndef LA_SERVER_KV_EVENTS_H
#define LA_SERVER_KV_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"

typedef struct la_kv_events la_kv_events;

/* A publisher on endpoint with topic (NULL: "") and data_parallel_rank dp_rank.
 * Errors: LA_ERR_INVALID_ARG (an endpoint ZMQ refuses, naming it and why),
 * LA_ERR_NO_MEMORY. Caller owns *out; free with la_kv_events_destroy() (sends what is
 * queued, waiting at most a second). */
la_status la_kv_events_create(const char *endpoint, const char *topic, int32_t dp_rank, la_kv_events **out,
                              la_err *err);
void la_kv_events_destroy(la_kv_events *p);

/* Add the engine's event (lazyattn.h la_kv_event) to the batch being built. */
void la_kv_events_add(la_kv_events *p, const la_kv_event *ev);
/* la_kv_events_add as the engine's on_kv_event callback (user: the publisher). */
void la_kv_events_on_engine_event(void *user, const la_kv_event *ev);

/* Send the batch built so far (nothing when it is empty). */
void la_kv_events_flush(la_kv_events *p);

/* Batches sent and batches dropped (queue full) so far. */
void la_kv_events_counts(la_kv_events *p, int64_t *sent, int64_t *dropped);

#endif
