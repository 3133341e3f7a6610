/* What a request emits (events.c): a TOKEN event per sampled token with the text that is
 * final (held back while it could still become a stop string), and the DONE event that
 * finishes the request. Engine thread only. Private to src/engine/.
 */
#ifndef LA_ENGINE_EVENTS_H
#define LA_ENGINE_EVENTS_H

#include <stdint.h>

#include "engine/engine_internal.h"
#include "engine/request.h"
#include "lazyattn/lazyattn.h"

/* Release r's blocks, emit DONE with the text still held, count it, free r. r must be
 * unlinked from every list. */
void la_request_finish(la_engine *e, la_request *r, la_finish_reason why, la_status status,
                       const char *msg);
/* la_request_finish for a request that was still counted as queued. */
void la_request_finish_waiting(la_engine *e, la_request *r, la_finish_reason why, la_status s,
                               const char *msg);
/* Take one sampled token: append it, stream its text, check eos, stop strings and length.
 * Returns the finish reason (LA_FINISH_NONE: keep going). */
la_finish_reason la_request_accept_token(la_engine *e, la_request *r, int32_t token,
                                         const float *logits);

#endif
