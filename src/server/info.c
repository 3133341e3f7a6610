/* GET /v1/models, GET /health and GET /metrics (routes.h). */
#include <pthread.h>
#include <stdbool.h>

#include <cjson/cJSON.h>

#include "server/respond.h"
#include "server/routes.h"
#include "server/server_internal.h"

static char *print_json(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

enum MHD_Result la_server_handle_models(la_server *s, struct MHD_Connection *conn,
                                        const char *route, const char *body, size_t len) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "lazyattn");
    cJSON_AddNumberToObject(m, "max_model_len", la_engine_max_context(s->engine));
    return la_server_send(s, conn, route, 200, "application/json", print_json(o));
}

enum MHD_Result la_server_handle_health(la_server *s, struct MHD_Connection *conn,
                                        const char *route, const char *body, size_t len) {
    pthread_mutex_lock(&s->mu);
    bool stopping = s->stopping || s->draining;
    pthread_mutex_unlock(&s->mu);
    if (stopping)
        return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_SHUTTING_DOWN,
                                    "The server is shutting down.", NULL);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddStringToObject(o, "device", la_engine_device_name(s->engine));
    return la_server_send(s, conn, route, 200, "application/json", print_json(o));
}

enum MHD_Result la_server_handle_metrics(la_server *s, struct MHD_Connection *conn,
                                         const char *route, const char *body, size_t len) {
    la_engine_stats es;
    la_engine_get_stats(s->engine, &es);
    la_engine_store_stats ss;
    la_engine_get_store_stats(s->engine, &ss);
    pthread_mutex_lock(&s->mu);
    int64_t inflight = s->n_calls;
    pthread_mutex_unlock(&s->mu);
    return la_server_send(s, conn, route, 200, "text/plain; version=0.0.4; charset=utf-8",
                          la_metrics_render(s->metrics, &es, &ss, inflight));
}
