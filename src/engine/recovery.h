/* Selected recovery's probe and choice (kv/plan.h "Selected recovery"; CacheBlend, Yao et
 * al., EuroSys 2025): which tokens of a request's later documents are recomputed in context.
 * Engine thread only. Private to src/engine/.
 */
#ifndef LA_ENGINE_RECOVERY_H
#define LA_ENGINE_RECOVERY_H

#include "engine/engine_internal.h"
#include "engine/request.h"

/* For request r (planned, under R = r->recompute_ratio > 0, its documents ready and its
 * per-request copies made): run the probe (engine/forward.h la_forward_probe) over every
 * token of documents 1..n-1, in pieces of at most max_batch_tokens rows, then name in r's
 * plan each document's recomputed tokens: its first N, and of the other tokens of those
 * documents the round(R x sum_{d>=1} L_d) (at least 1) with the largest deviation, ties to
 * the earlier token (la_plan_set_recompute). Sets r->stats.doc_tokens_probed and
 * doc_tokens_recomputed (first plan only, as the other reuse counters).
 *
 * A probe that fails (out of memory, a backend error) fails nothing: the request recomputes
 * its first N alone, as without R, and the failure is logged (la_log) with
 * doc_tokens_probed left 0. Returns the probe's status for tests. */
la_status la_recovery_select(la_engine *e, la_request *r);

#endif
