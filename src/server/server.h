/* lazyattn serve: an OpenAI-compatible HTTP server over one engine (DESIGN.md §7).
 *
 *   POST /v1/completions, POST /v1/chat/completions   (stream: server-sent events)
 *   POST /v1/documents                                pre-warm documents into the KV cache
 *   GET  /v1/models, GET /health, GET /metrics        (Prometheus text format)
 *   POST /tokenize, POST /detokenize, POST /reset_prefix_cache, GET /version
 *
 * Threads: libmicrohttpd runs event-driven on a fixed pool of worker threads
 * (options.http_threads) that every connection shares; handlers submit to the engine and
 * park their connection (suspended, no thread waiting) until the engine's callbacks fill
 * the request's event queue (server/call.h) and resume it (server/conn.h). A watcher thread
 * enforces the receive deadline and notices clients that left. The engine runs on a thread
 * of its own that the server starts (la_engine_step while la_engine_has_work, else
 * la_engine_wait_work), so nothing else may step the engine while a server runs on it.
 */
#ifndef LA_SERVER_SERVER_H
#define LA_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"
#include "server/options.h"

typedef struct la_server la_server;

/* la_server_options and la_server_options_init: server/options.h */

/* Start the engine thread and the HTTP daemon. e is borrowed and must outlive the server;
 * from now on only the server steps it. Caller owns *out; stop and free with
 * la_server_destroy(). Errors: LA_ERR_INVALID_ARG (host does not resolve, bad options),
 * LA_ERR_IO (cannot bind host:port, e.g. in use), LA_ERR_NO_MEMORY; nothing is left
 * running on error. */
la_status la_server_create(la_engine *e, const la_server_options *o, la_server **out, la_err *err);

/* The TCP port the server listens on (the chosen one when options.port was 0). */
int la_server_port(const la_server *s);

/* Drain before shutdown: /health answers 503 and so does every new request (but
 * /metrics), while requests in flight run to completion, for at most timeout_ms; returns
 * true if everything in flight ended in time. la_server_destroy follows (it cancels what is
 * left). */
bool la_server_drain(la_server *s, int timeout_ms);

/* Clean shutdown: refuse new requests (503), cancel every request in flight (streams end
 * with an error event and [DONE], waiting requests get 503), stop the HTTP daemon, stop
 * the engine thread, free everything. The engine stays alive for the caller to destroy.
 * NULL: nothing. */
void la_server_destroy(la_server *s);

#endif
