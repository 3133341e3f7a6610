/* la_server_options: what la_server_create (server.h) is configured with. A header of its
 * own so that the server's private state (server_internal.h) holds them without including
 * server.h.
 */
#ifndef LA_SERVER_OPTIONS_H
#define LA_SERVER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/types.h"

typedef struct la_server_options {
    const char *host;                /* address to bind, numeric or a name ("127.0.0.1") */
    int port;                        /* TCP port (8000); 0: any free port, see la_server_port */
    const char *model_id;            /* id in /v1/models and accepted as "model"; NULL: the
                                        engine's model name */
    la_method method;                /* method of requests that name none: pass the engine's
                                        default (LA_METHOD_LAZY) so responses report it */
    la_doc_context doc_context;      /* the engine's default doc context (la_engine_options):
                                        /v1/documents refuses PREAMBLE (its documents are
                                        keyed by a preamble a pre-warm does not have) */
    la_chat_format chat_format;      /* chat rendering; AUTO: from the model's chat_template */
    size_t max_body_bytes;           /* larger request bodies get 413 (16 MiB) */
    int32_t max_docs;                /* documents per request; the engine's max_docs (128) */
    int32_t default_chat_max_tokens; /* chat requests without max_tokens (512, capped by the
                                        context) */
    bool log_requests;               /* one line per request on stderr */
    struct la_kv_events *kv_events;  /* KV event publisher (server/kv_events.h) the engine's
                                        on_kv_event feeds; the server sends one batch per
                                        engine step. NULL: none. Borrowed. */
    bool ignore_unknown_fields;      /* unknown request fields: accepted and logged once per
                                        name (vLLM's behaviour), instead of 400 */
    const char *api_key;             /* non-NULL: every route but /health and /metrics wants
                                        "Authorization: Bearer <api_key>" (401 otherwise) */
    bool protect_metrics;            /* /health and /metrics want the key too */
    const char *allowed_origins;     /* CORS: "*" or a comma-separated list of origins; NULL:
                                        no CORS headers, OPTIONS answered 405 */
    const char *ssl_certfile;        /* HTTPS: PEM certificate (chain) and private key files */
    const char *ssl_keyfile;
    unsigned idle_timeout_s;         /* a connection with nothing to read or write for this
                                        long is closed: idle keep-alives, headers or a body
                                        that stopped coming (60; 0: never). A request being
                                        answered is not idle. */
    unsigned max_connections;        /* open connections at most (1000) */
    unsigned max_connections_per_ip; /* from one client address at most (0: no limit; a
                                        proxy in front is one address) */
    unsigned http_threads;           /* libmicrohttpd worker threads that every connection
                                        shares (0: min(4, online cores)) */
} la_server_options;

void la_server_options_init(la_server_options *o);

#endif
