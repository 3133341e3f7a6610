/* lazyattn serve: an OpenAI-compatible HTTP server over one engine (DESIGN.md §7).
 *
 *   POST /v1/completions, POST /v1/chat/completions   (stream: server-sent events)
 *   POST /v1/documents                                pre-warm documents into the KV cache
 *   GET  /v1/models, GET /health, GET /metrics        (Prometheus text format)
 *
 * Threads: libmicrohttpd runs one thread per connection; handlers submit to the engine
 * and wait on a per-request event queue (server/call.h) fed by the engine's callbacks.
 * The engine runs on a thread of its own that the server starts (la_engine_step while
 * la_engine_has_work, else la_engine_wait_work), so nothing else may step the engine
 * while a server runs on it.
 */
#ifndef LA_SERVER_SERVER_H
#define LA_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/lazyattn.h"

typedef struct la_server la_server;

typedef struct la_server_options {
    const char *host;                /* address to bind, numeric or a name ("127.0.0.1") */
    int port;                        /* TCP port (8000); 0: any free port, see la_server_port */
    const char *model_id;            /* id in /v1/models and accepted as "model"; NULL: the
                                        engine's model name */
    la_method method;                /* method of requests that name none: pass the engine's
                                        default (LA_METHOD_LAZY) so responses report it */
    la_chat_format chat_format;      /* chat rendering; AUTO: from the model's chat_template */
    size_t max_body_bytes;           /* larger request bodies get 413 (16 MiB) */
    int32_t max_docs;                /* documents per request; the engine's max_docs (128) */
    int32_t default_chat_max_tokens; /* chat requests without max_tokens (512, capped by the
                                        context) */
    bool log_requests;               /* one line per request on stderr */
} la_server_options;

void la_server_options_init(la_server_options *o);

/* Start the engine thread and the HTTP daemon. e is borrowed and must outlive the server;
 * from now on only the server steps it. Caller owns *out; stop and free with
 * la_server_destroy(). Errors: LA_ERR_INVALID_ARG (host does not resolve, bad options),
 * LA_ERR_IO (cannot bind host:port, e.g. in use), LA_ERR_NO_MEMORY; nothing is left
 * running on error. */
la_status la_server_create(la_engine *e, const la_server_options *o, la_server **out, la_err *err);

/* The TCP port the server listens on (the chosen one when options.port was 0). */
int la_server_port(const la_server *s);

/* Clean shutdown: refuse new requests (503), cancel every request in flight (streams end
 * with an error event and [DONE], waiting requests get 503), stop the HTTP daemon, stop
 * the engine thread, free everything. The engine stays alive for the caller to destroy.
 * NULL: nothing. */
void la_server_destroy(la_server *s);

#endif
