/* The Llama forward pass, written once against the backend interface (backend/backend.h).
 *
 * Per layer (HF modeling_llama.py LlamaDecoderLayer):
 *   h = RMSNorm(x); q,k,v = h Wq^T, h Wk^T, h Wv^T; store RoPE(k), v in the paged cache;
 *   x += Attention(q, cache) Wo^T; h = RMSNorm(x); x += (silu(h Wg^T) * (h Wu^T)) Wd^T
 * then logits = RMSNorm(x[logit rows]) W_lm^T. The last layer computes K and V for every
 * row and the rest for the logit rows alone (forward.c: nothing else reads it).
 * Where K is rotated and how the query is rotated per KV block is the batch's business
 * (la_batch: k_pos and la_attn_block); this file is the same for every method.
 */
#ifndef LA_ENGINE_FORWARD_H
#define LA_ENGINE_FORWARD_H

#include "backend/backend.h"

/* Run one step over batch on be (weights and KV pool already loaded).
 *   logits  [batch->n_logit_rows, vocab_size] f32 host memory, written on success
 * Errors: those of the backend ops (LA_ERR_NO_MEMORY, LA_ERR_BACKEND, LA_ERR_INVALID_ARG for
 * a token id outside the vocabulary); LA_ERR_INVALID_ARG for an empty batch, a model
 * without layers or a logit row in no sequence of the batch. On error the KV slots of this batch may hold partial
 * data; the caller must not mark those blocks computed. The backend's current batch
 * afterwards may be the step's logit rows alone (forward.c logit_row_batch): a caller
 * that runs backend ops after la_forward begins its own batch first. */
la_status la_forward(la_backend *be, const la_batch *batch, float *logits, la_err *err);

/* la_forward for greedy decoding with the argmax taken by the backend (argmax_to_host; on
 * the GPU only the token ids come back to the host).
 *   ids  [batch->n_logit_rows] int32 host memory: ids[i] = the argmax of logit row i,
 *        the lowest id on ties (backend/backend.h la_argmax)
 * Errors: as la_forward; LA_ERR_UNSUPPORTED when the backend has no argmax_to_host. */
la_status la_forward_argmax(la_backend *be, const la_batch *batch, int32_t *ids, la_err *err);

/* la_forward_argmax in two halves, for a backend with argmax_begin (else LA_ERR_UNSUPPORTED):
 * _begin queues the step and its argmax and returns without waiting; the next batch may
 * take its tokens as LA_TOKEN_PREV (backend.h); _end waits for the oldest step begun and not
 * yet ended and copies its ids out (ids [n] int32 host memory, n = that batch's
 * n_logit_rows). Errors: as la_forward_argmax, split between the halves (an error of the
 * step's kernels may surface in _end). */
la_status la_forward_argmax_begin(la_backend *be, const la_batch *batch, la_err *err);
la_status la_forward_argmax_end(la_backend *be, int32_t *ids, int32_t n, la_err *err);

/* Selected recovery's probe (kv/plan.h; CacheBlend, EuroSys 2025 §4): layer 0 of batch's
 * rows in context (their attention over the batch's blocks, no K/V written: the pool already
 * holds what they would write, since layer 0's K and V depend on the token alone, up to the
 * RoPE rotation that each method's block view accounts for, and the rows' slots hold their
 * own tokens' cached K/V), then layer 1's V, and each row's
 * squared distance from the V the pool holds at its slot (backend kv_deviation: how much
 * context changes the token's layer-1 value). Rows are independent (nothing is written), so
 * a caller may cut a document's rows over several calls.
 *   batch  no logit rows; slots: the cached K/V of each row's own token
 *   dev    [batch->n_tokens] f32 host memory, written on success
 * A model with one layer has nothing to probe: dev is all 0. Errors: LA_ERR_UNSUPPORTED
 * (the backend has no kv_deviation), LA_ERR_INVALID_ARG (empty batch, logit rows), the
 * backend ops' errors. The backend's current batch afterwards is batch. */
la_status la_forward_probe(la_backend *be, const la_batch *batch, float *dev, la_err *err);

#endif
