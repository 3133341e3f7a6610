/* The engine's side of the document KV store (DESIGN.md §9; kv/store/store.h): document
 * jobs that load a record instead of computing, records written when a document is
 * computed (write-through) or when the pool evicts it (write-back), the copies between the
 * pool and host memory (through the backend, asynchronous), and the KV events of the pool.
 *
 *   job start     a document the plan must compute is looked up in the tiers: found, the
 *                 job LOADs (no rows are packed for it) and waits like a computing job;
 *   each step     finished reads are copied into the job's pool blocks (IMPORTING); a
 *                 finished copy completes the job (its blocks become ready) as if it had
 *                 been computed; a read that failed, or a record that was damaged,
 *                 foreign or too slow, turns the job back into computing;
 *   job done      the document is resident: its blocks are known to the eviction hook,
 *                 and it is written through (disk "through", the shared tier);
 *   eviction      the pool is about to reuse a block of a resident document: the whole
 *                 document is copied out (before the new owner writes the block) into the
 *                 host tier.
 * Engine thread only.
 */
#ifndef LA_ENGINE_DOC_STORE_H
#define LA_ENGINE_DOC_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine_internal.h"
#include "engine/request.h"

typedef struct la_doc_store la_doc_store;

/* The store e's options ask for (or one that only publishes KV events / does nothing),
 * hooked into e->pool (hash context, eviction). Call after the pool and the backend exist.
 * Errors: those of la_kv_store_create, la_kv_secret_load, la_model_fingerprint.
 * Caller owns *out; free with la_doc_store_destroy (waits for copies and writes). */
la_status la_doc_store_create(la_engine *e, la_doc_store **out, la_err *err);
void la_doc_store_destroy(la_doc_store *d);

/* A job was created for a document the plan must compute (j->doc, j->tokens, j->method
 * set; r: the request that made it). May turn it into a load. */
void la_doc_store_job_start(la_doc_store *d, la_doc_job *j, la_request *r);
/* Poll reads and copies: loading jobs advance, finished loads set j->n_done so the
 * scheduler retires them, failed loads compute. Call once per step before packing. */
void la_doc_store_step(la_doc_store *d);
/* A job is retired: computed (or loaded) when ok, else dropped (its blocks leave the index).
 * Called before its pins are dropped. */
void la_doc_store_job_end(la_doc_store *d, la_doc_job *j, bool ok);
/* la_plan_register_tail for r's first n_computed tail tokens, with the STORED events of
 * the blocks it indexes. */
void la_doc_store_register_tail(la_doc_store *d, la_request *r);
/* Whether loads or copies are in flight (the engine waits a little instead of spinning). */
bool la_doc_store_busy(const la_doc_store *d);
/* End of step: send the step's KV events. */
void la_doc_store_step_end(la_doc_store *d);

/* Where a document of tokens[0:n] for method m and salt stands: 0 nowhere, 1 pool,
 * 2 host, 3 disk, 4 shared (maybe); hashes (NULL: not wanted) receives its ceil(n / B)
 * block hashes' low halves and *key its record key. 0 for a method that does not cache
 * documents. */
int32_t la_doc_store_where(la_doc_store *d, la_method m, const char *salt, const int32_t *tokens, int32_t n,
                           uint64_t *hashes, la_hash128 *key);
/* Whether the engine should time its steps for la_doc_store_note_step: kv_read AUTO with a
 * disk or shared tier and no pinned rate (on CUDA the engine then waits for every 8th step,
 * before and after it, which it otherwise would not: engine.c). */
bool la_doc_store_times_steps(const la_doc_store *d);

/* Whether no prefill rate is known yet (no fit, nothing pinned): the engine then also times
 * every step that computes a document (the steps the fit learns most from). */
bool la_doc_store_prefill_unknown(const la_doc_store *d);
/* A step's forward ran n_rows rows (tokens: prefill, document and decode) in ms, on the
 * device: what kv_read AUTO's prefill rate is fitted to (engine/read_choice.h: the extra ms
 * a row costs). */
void la_doc_store_note_step(la_doc_store *d, int64_t n_rows, double ms);
/* Wait for every queued write. */
void la_doc_store_flush(la_doc_store *d);
void la_doc_store_get_stats(la_doc_store *d, la_engine_store_stats *s);

#endif
