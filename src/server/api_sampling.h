/* The sampling fields of the generation endpoints (api_sampling.c): lengths, temperature
 * and cuts, seed (its exact 64-bit text), penalties, logit_bias, token id lists, n and
 * best_of, logprobs, echo, stream and stream_options, structured output (response_format,
 * guided_json, json_schema: the schema is compiled here once to name a refused keyword).
 * Private to src/server/.
 */
#ifndef LA_SERVER_API_SAMPLING_H
#define LA_SERVER_API_SAMPLING_H

#include <cjson/cJSON.h>

#include "server/api_parse.h"
#include "server/api_types.h"

/* Fill r->params.sampling and r's response options from root. Errors: as
 * la_api_request_parse's for these fields. */
la_status la_api_parse_sampling(la_api_ctx *c, const cJSON *root, const la_api_limits *lim, la_api_request *r);

#endif
