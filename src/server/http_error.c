/* Status -> HTTP status / OpenAI error type / code (see http_error.h). */
#include "server/http_error.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

/* Engine statuses. Client mistakes are 400 invalid_request_error (OpenAI's type for them),
 * a full queue is 429, failures of ours are 500, a temporary lack of capacity is 503. */
static const la_http_error k_status_map[LA_STATUS_COUNT] = {
    [LA_OK] = {500, "server_error", NULL},
    [LA_ERR_INVALID_ARG] = {400, "invalid_request_error", "invalid_value"},
    [LA_ERR_IO] = {500, "server_error", NULL},
    [LA_ERR_FORMAT] = {500, "server_error", NULL},
    [LA_ERR_UNSUPPORTED] = {400, "invalid_request_error", "unsupported"},
    [LA_ERR_NO_MEMORY] = {500, "server_error", "out_of_memory"},
    [LA_ERR_NO_SPACE] = {503, "server_error", "kv_cache_full"},
    [LA_ERR_NOT_FOUND] = {404, "invalid_request_error", "not_found"},
    [LA_ERR_TOO_LONG] = {400, "invalid_request_error", "context_length_exceeded"},
    [LA_ERR_CANCELLED] = {503, "server_error", "cancelled"},
    [LA_ERR_BUSY] = {429, "rate_limit_error", "queue_full"},
    [LA_ERR_BACKEND] = {500, "server_error", NULL},
    [LA_ERR_INTERNAL] = {500, "server_error", NULL},
};

static const la_http_error k_fault_map[LA_HTTP_FAULT_COUNT] = {
    [LA_HTTP_FAULT_ROUTE_NOT_FOUND] = {404, "invalid_request_error", "not_found"},
    [LA_HTTP_FAULT_METHOD_NOT_ALLOWED] = {405, "invalid_request_error", "method_not_allowed"},
    [LA_HTTP_FAULT_BODY_TOO_LARGE] = {413, "invalid_request_error", "request_too_large"},
    [LA_HTTP_FAULT_MODEL_NOT_FOUND] = {404, "invalid_request_error", "model_not_found"},
    [LA_HTTP_FAULT_SHUTTING_DOWN] = {503, "server_error", "shutting_down"},
};

la_http_error la_http_error_for_status(la_status s) {
    if ((unsigned)s >= LA_STATUS_COUNT) return k_status_map[LA_ERR_INTERNAL];
    return k_status_map[s];
}

la_http_error la_http_error_for_fault(la_http_fault f) {
    if ((unsigned)f >= LA_HTTP_FAULT_COUNT) return k_status_map[LA_ERR_INTERNAL];
    return k_fault_map[f];
}

char *la_http_error_json(const la_http_error *e, const char *message, const char *param,
                         const char *code) {
    cJSON *root = cJSON_CreateObject();
    cJSON *err = cJSON_AddObjectToObject(root, "error");
    if (err) {
        cJSON_AddStringToObject(err, "message", message ? message : "");
        cJSON_AddStringToObject(err, "type", e->type);
        if (param) cJSON_AddStringToObject(err, "param", param);
        else cJSON_AddNullToObject(err, "param");
        if (code || e->code) cJSON_AddStringToObject(err, "code", code ? code : e->code);
        else cJSON_AddNullToObject(err, "code");
    }
    char *s = err ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}
