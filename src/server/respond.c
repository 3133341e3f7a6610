/* Answering an HTTP request (respond.h): queue a response and count it, OpenAI error
 * responses, request bodies parsed and checked against the model served.
 */
#include "server/respond.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_fields.h"
#include "server/routes.h"

enum MHD_Result la_server_send(la_server *s, struct MHD_Connection *conn, const char *route,
                               int http_status, const char *content_type, char *body) {
    static char oom_body[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                             "\"param\":null,\"code\":\"out_of_memory\"}}";
    struct MHD_Response *r;
    if (body) {
        r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    } else {
        http_status = 500;
        content_type = "application/json";
        r = MHD_create_response_from_buffer(strlen(oom_body), oom_body, MHD_RESPMEM_PERSISTENT);
    }
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (http_status == 405) {
        const la_route *rt = la_route_find(route);
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, rt ? rt->method : "POST");
    }
    if (http_status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ret = la_server_queue(s, conn, route, http_status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result la_server_queue(la_server *s, struct MHD_Connection *conn, const char *route, int http_status,
                                struct MHD_Response *r) {
    char rid[136];
    la_server_request_id(s, conn, NULL, rid, sizeof rid);
    MHD_add_response_header(r, "X-Request-Id", rid);
    la_server_add_cors(s, conn, r);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)http_status, r);
    la_metrics_count_http(s->metrics, route, http_status);
    return ret;
}

static enum MHD_Result send_error(la_server *s, struct MHD_Connection *conn, const char *route,
                                  la_http_error e, const char *message, const char *param,
                                  const char *code) {
    if (s->opts.log_requests)
        fprintf(stderr, "lazyattn serve: %s -> %d: %s\n", route, e.http_status, message);
    return la_server_send(s, conn, route, e.http_status, "application/json",
                          la_http_error_json(&e, message, param, code));
}

const char *la_server_error_param(la_status st, const char *msg, bool chat, char *out) {
    if (st == LA_ERR_TOO_LONG) return chat ? "messages" : "prompt";
    if (!msg) return NULL;
    size_t n = strspn(msg, "abcdefghijklmnopqrstuvwxyz_");
    if (n == 0 || n >= 64 || (msg[n] != '=' && msg[n] != ':' && msg[n] != ' ')) return NULL;
    memcpy(out, msg, n);
    out[n] = '\0';
    return la_api_field_find(out, chat) ? out : NULL;
}

enum MHD_Result la_server_send_status(la_server *s, struct MHD_Connection *conn, const char *route,
                                      la_status st, const char *message, const char *param,
                                      const char *code) {
    return send_error(s, conn, route, la_http_error_for_status(st),
                      message && *message ? message : la_status_describe(st), param, code);
}

enum MHD_Result la_server_send_fault(la_server *s, struct MHD_Connection *conn, const char *route,
                                     la_http_fault f, const char *message, const char *param) {
    return send_error(s, conn, route, la_http_error_for_fault(f), message, param, NULL);
}

enum MHD_Result la_server_send_model_not_found(la_server *s, struct MHD_Connection *conn, const char *route,
                                               const char *model) {
    char msg[256];
    snprintf(msg, sizeof msg, "The model '%.64s' does not exist (this server serves '%.64s').", model, s->model_id);
    return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_MODEL_NOT_FOUND, msg, "model");
}

bool la_server_parse_request(la_server *s, struct MHD_Connection *conn, const char *route,
                             la_api_kind kind, const char *body, size_t len, la_api_request *ar,
                             enum MHD_Result *ret) {
    la_api_fault fault;
    la_err err = {0};
    la_status st = la_api_request_parse(kind, body, len, &s->limits, ar, &fault, &err);
    if (st != LA_OK) {
        *ret = la_server_send_status(s, conn, route, st, err.msg, fault.param[0] ? fault.param : NULL,
                                     fault.code);
        return false;
    }
    if (ar->model && strcmp(ar->model, s->model_id)) {
        *ret = la_server_send_model_not_found(s, conn, route, ar->model);
        la_api_request_fini(ar);
        return false;
    }
    return true;
}
