/* Selected recovery's probe and choice (kv/plan.h "Selected recovery"; CacheBlend, Yao et
 * al., EuroSys 2025): which tokens of a request's later documents are recomputed in context.
 * Engine thread only. Private to src/engine/.
 */
#ifndef LA_ENGINE_RECOVERY_H
#define LA_ENGINE_RECOVERY_H

#include <stdint.h>

#include "engine/engine_internal.h"
#include "engine/request.h"

/* One step's share of request r's probe (r planned under R = r->recompute_ratio > 0, its
 * documents ready, its per-request copies made): the probe (engine/forward.h
 * la_forward_probe) over the next tokens of documents 1..n-1, at most budget x n_layers of
 * them (a probed token costs about one layer of one row: *used = the rows of budget it took,
 * ceil(tokens / n_layers)), in forwards of at most max_batch_tokens rows; the deviations
 * gather in r->probe_dev. Once every token is probed it names in r's plan each document's
 * recomputed tokens: its first N, and of all those documents' tokens (the first N among
 * them) the round(R x sum_{d>=1} L_d) (at least 1) with the largest deviation, ties to the
 * earlier token (la_plan_set_recompute); sets r->probed, and r->stats.doc_tokens_probed and
 * doc_tokens_recomputed the first time a probe completes.
 * Errors: LA_ERR_NO_MEMORY and the probe's (LA_ERR_UNSUPPORTED, the backend's): the caller
 * fails the request (its question chain's hash covers R, so it must not go on with another
 * choice). */
la_status la_recovery_probe_step(la_engine *e, la_request *r, int64_t budget, int64_t *used, la_err *err);

#endif
