/* Defaults of la_server_options (options.h). */
#include "server/options.h"

#include <string.h>

void la_server_options_init(la_server_options *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8000;
    o->method = LA_METHOD_LAZY;
    o->chat_format = LA_CHAT_FORMAT_AUTO;
    o->max_body_bytes = (size_t)16 << 20;
    o->idle_timeout_s = 60;
    o->max_connections = 1000;
    o->max_docs = 128;
    o->default_chat_max_tokens = 512;
}
