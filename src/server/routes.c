/* The route table (routes.h): every endpoint of the server, in one place. */
#include "server/routes.h"

#include <string.h>

static const la_route k_routes[] = {
    {"/v1/completions", "POST", la_server_handle_completions},
    {"/v1/chat/completions", "POST", la_server_handle_chat},
    {"/v1/documents", "POST", la_server_handle_documents},
    {"/v1/models", "GET", la_server_handle_models},
    {"/health", "GET", la_server_handle_health},
    {"/metrics", "GET", la_server_handle_metrics},
    {"/tokenize", "POST", la_server_handle_tokenize},
    {"/detokenize", "POST", la_server_handle_detokenize},
    {"/reset_prefix_cache", "POST", la_server_handle_reset_prefix_cache},
    {"/version", "GET", la_server_handle_version},
};

const la_route *la_route_find(const char *path) {
    for (size_t i = 0; i < sizeof k_routes / sizeof k_routes[0]; i++)
        if (!strcmp(path, k_routes[i].path)) return &k_routes[i];
    return NULL;
}
