/* The HTTP server: libmicrohttpd plumbing, routing, the engine thread, start and clean
 * shutdown (server.h).
 *
 * ---- Request flow ------------------------------------------------------------------------
 * libmicrohttpd runs a thread per connection and calls on_access() several times per
 * request: once when the headers are in (we pick the route), once per piece of body (we
 * collect it up to max_body_bytes, then discard the rest and remember it was too large),
 * and once more at the end, when we answer. Answers to POSTs of generation block in that
 * last call (non-streamed) or in the content reader of the response (streamed), which the
 * thread-per-connection mode allows. A body over the limit is drained before the 413 goes
 * out, so the client reads the answer instead of a reset connection; only a client that
 * announced "Expect: 100-continue" with a too large Content-Length gets its 413 at once.
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "server/call.h"
#include "server/server_internal.h"

/* How long shutdown waits for the answers to requests it cancelled. */
#define SHUTDOWN_DRAIN_MS 30000

/* ============================================================ options =============== */

void la_server_options_init(la_server_options *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8000;
    o->method = LA_METHOD_LAZY;
    o->chat_format = LA_CHAT_FORMAT_AUTO;
    o->max_body_bytes = (size_t)16 << 20;
    o->max_docs = 128;
    o->default_chat_max_tokens = 512;
}

int la_server_port(const la_server *s) { return s->port; }

/* ============================================================ responses ============= */

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
        const char *allow = !strcmp(route, "/v1/models") || !strcmp(route, "/health") ||
                                    !strcmp(route, "/metrics")
                                ? "GET"
                                : "POST";
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    }
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)http_status, r);
    MHD_destroy_response(r);
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
        char msg[256];
        snprintf(msg, sizeof msg, "The model '%.64s' does not exist (this server serves '%.64s').",
                 ar->model, s->model_id);
        la_api_request_fini(ar);
        *ret = la_server_send_fault(s, conn, route, LA_HTTP_FAULT_MODEL_NOT_FOUND, msg, "model");
        return false;
    }
    return true;
}

bool la_server_client_gone(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

/* ============================================================ simple endpoints ====== */

static char *print_json(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

static enum MHD_Result handle_models(la_server *s, struct MHD_Connection *conn, const char *route) {
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

static enum MHD_Result handle_health(la_server *s, struct MHD_Connection *conn, const char *route) {
    pthread_mutex_lock(&s->mu);
    bool stopping = s->stopping;
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

static enum MHD_Result handle_metrics(la_server *s, struct MHD_Connection *conn, const char *route) {
    la_engine_stats es;
    la_engine_get_stats(s->engine, &es);
    pthread_mutex_lock(&s->mu);
    int64_t inflight = s->n_calls;
    pthread_mutex_unlock(&s->mu);
    return la_server_send(s, conn, route, 200, "text/plain; version=0.0.4; charset=utf-8",
                          la_metrics_render(s->metrics, &es, inflight));
}

/* ============================================================ routing =============== */

typedef enum route_id {
    ROUTE_COMPLETIONS,
    ROUTE_CHAT,
    ROUTE_DOCUMENTS,
    ROUTE_MODELS,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_NONE
} route_id;

static const struct {
    const char *path;
    const char *method;
} k_routes[ROUTE_NONE] = {
    [ROUTE_COMPLETIONS] = {"/v1/completions", "POST"},
    [ROUTE_CHAT] = {"/v1/chat/completions", "POST"},
    [ROUTE_DOCUMENTS] = {"/v1/documents", "POST"},
    [ROUTE_MODELS] = {"/v1/models", "GET"},
    [ROUTE_HEALTH] = {"/health", "GET"},
    [ROUTE_METRICS] = {"/metrics", "GET"},
};

static route_id find_route(const char *url) {
    for (int r = 0; r < ROUTE_NONE; r++)
        if (!strcmp(url, k_routes[r].path)) return (route_id)r;
    return ROUTE_NONE;
}

/* State of one request on a connection (libmicrohttpd's con_cls). */
typedef struct request_ctx {
    route_id route;
    char *body;
    size_t len, cap;
    bool too_large;
    bool answered; /* an early answer was queued */
} request_ctx;

static enum MHD_Result dispatch(la_server *s, struct MHD_Connection *conn, request_ctx *rc,
                                const char *method, const char *url) {
    const char *route = rc->route == ROUTE_NONE ? "other" : k_routes[rc->route].path;
    char msg[256];
    if (rc->route == ROUTE_NONE) {
        snprintf(msg, sizeof msg, "Unknown route %s %.120s.", method, url);
        return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_ROUTE_NOT_FOUND, msg, NULL);
    }
    if (strcmp(method, k_routes[rc->route].method)) {
        snprintf(msg, sizeof msg, "Method %s is not allowed on %s (use %s).", method, route,
                 k_routes[rc->route].method);
        return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_METHOD_NOT_ALLOWED, msg, NULL);
    }
    if (rc->too_large) {
        snprintf(msg, sizeof msg, "The request body exceeds the limit of %zu bytes.",
                 s->opts.max_body_bytes);
        return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_BODY_TOO_LARGE, msg, NULL);
    }
    const char *body = rc->body ? rc->body : "";
    switch (rc->route) {
    case ROUTE_COMPLETIONS:
        return la_server_handle_generate(s, conn, route, LA_API_COMPLETION, body, rc->len);
    case ROUTE_CHAT: return la_server_handle_generate(s, conn, route, LA_API_CHAT, body, rc->len);
    case ROUTE_DOCUMENTS: return la_server_handle_documents(s, conn, route, body, rc->len);
    case ROUTE_MODELS: return handle_models(s, conn, route);
    case ROUTE_HEALTH: return handle_health(s, conn, route);
    case ROUTE_METRICS: return handle_metrics(s, conn, route);
    case ROUTE_NONE: break;
    }
    return MHD_NO;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls) {
    (void)version;
    la_server *s = cls;
    request_ctx *rc = *con_cls;
    if (!rc) { /* headers are in */
        rc = calloc(1, sizeof *rc);
        if (!rc) return MHD_NO;
        *con_cls = rc;
        atomic_fetch_add(&s->n_requests, 1);
        rc->route = find_route(url);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
        if (cl && expect && !strcasecmp(expect, "100-continue") &&
            strtoull(cl, NULL, 10) > s->opts.max_body_bytes) {
            rc->too_large = rc->answered = true;
            return dispatch(s, conn, rc, method, url);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) { /* a piece of the body */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rc->too_large) return MHD_YES;
        if (rc->len + n > s->opts.max_body_bytes) {
            rc->too_large = true;
            free(rc->body);
            rc->body = NULL;
            rc->len = rc->cap = 0;
            return MHD_YES;
        }
        if (rc->len + n + 1 > rc->cap) {
            size_t cap = rc->cap ? rc->cap : 4096;
            while (cap < rc->len + n + 1) cap *= 2;
            char *p = realloc(rc->body, cap);
            if (!p) return MHD_NO;
            rc->body = p;
            rc->cap = cap;
        }
        memcpy(rc->body + rc->len, upload_data, n);
        rc->len += n;
        rc->body[rc->len] = '\0';
        return MHD_YES;
    }
    if (rc->answered) return MHD_YES;
    rc->answered = true;
    return dispatch(s, conn, rc, method, url);
}

/* The request's answer is out (or the connection died): free its state. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)conn;
    (void)toe;
    la_server *s = cls;
    request_ctx *rc = *con_cls;
    if (!rc) return;
    free(rc->body);
    free(rc);
    *con_cls = NULL;
    atomic_fetch_sub(&s->n_requests, 1);
}

/* ============================================================ engine thread ========= */

static void *engine_main(void *arg) {
    la_server *s = arg;
    while (!atomic_load(&s->engine_stop)) {
        if (la_engine_has_work(s->engine)) {
            la_err err = {0};
            if (la_engine_step(s->engine, &err) != LA_OK)
                fprintf(stderr, "lazyattn serve: engine step failed: %s\n", err.msg);
        } else {
            la_engine_wait_work(s->engine, 50);
        }
    }
    return NULL;
}

/* ============================================================ create, destroy ======= */

/* Resolve host into a socket address. */
static la_status resolve(const char *host, int port, struct sockaddr_storage *ss, bool *ipv6,
                         la_err *err) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return la_err_set(err, LA_ERR_INVALID_ARG, "--host %s: %s", host, gai_strerror(rc));
    memset(ss, 0, sizeof *ss);
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *ipv6 = res->ai_family == AF_INET6;
    if (*ipv6) ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return LA_OK;
}

static void server_free(la_server *s) {
    la_metrics_destroy(s->metrics);
    pthread_mutex_destroy(&s->mu);
    free(s->model_id);
    free(s);
}

la_status la_server_create(la_engine *e, const la_server_options *o, la_server **out, la_err *err) {
    if (!e || !o || o->port < 0 || o->port > 65535 || o->max_docs < 0 || o->max_body_bytes == 0 ||
        o->default_chat_max_tokens < 1 || (unsigned)o->method >= LA_METHOD_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "server: bad options");
    struct sockaddr_storage addr;
    bool ipv6 = false;
    LA_TRY(resolve(o->host ? o->host : "127.0.0.1", o->port, &addr, &ipv6, err));
    la_server *s = calloc(1, sizeof *s);
    if (!s) return la_err_set(err, LA_ERR_NO_MEMORY, "server: out of memory");
    s->engine = e;
    s->opts = *o;
    pthread_mutex_init(&s->mu, NULL);
    s->model_id = strdup(o->model_id ? o->model_id : la_engine_model_name(e));
    s->created = (int64_t)time(NULL);
    atomic_init(&s->engine_stop, false);
    atomic_init(&s->next_id, 1);
    atomic_init(&s->n_requests, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->id_salt = (uint32_t)(ts.tv_nsec ^ (ts.tv_sec << 20) ^ (long)getpid());
    int32_t ctx = la_engine_max_context(e);
    s->limits = (la_api_limits){.max_docs = o->max_docs,
                                .max_tokens = ctx,
                                .default_max_tokens = 16 < ctx ? 16 : ctx,
                                .default_chat_max_tokens = o->default_chat_max_tokens < ctx
                                                               ? o->default_chat_max_tokens
                                                               : ctx,
                                .max_stop = 16,
                                .chat_format = o->chat_format};
    la_status st = s->model_id ? LA_OK : la_err_set(err, LA_ERR_NO_MEMORY, "server: out of memory");
    if (st == LA_OK) st = la_metrics_create(&s->metrics, err);
    if (st != LA_OK) {
        server_free(s);
        return st;
    }
    if (pthread_create(&s->engine_thread, NULL, engine_main, s) != 0) {
        server_free(s);
        return la_err_set(err, LA_ERR_NO_MEMORY, "server: cannot start the engine thread");
    }
    s->engine_started = true;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ITC; /* ITC: la_server_destroy quiesces the daemon */
    if (ipv6) flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_access, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000, MHD_OPTION_END);
    if (!s->daemon) {
        atomic_store(&s->engine_stop, true);
        pthread_join(s->engine_thread, NULL);
        server_free(s);
        return la_err_set(err, LA_ERR_IO, "cannot listen on %s:%d (address in use or not local?)",
                          o->host ? o->host : "127.0.0.1", o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di && di->port ? di->port : o->port;
    *out = s;
    return LA_OK;
}

void la_server_destroy(la_server *s) {
    if (!s) return;
    /* 1. stop accepting connections; refuse new work and cancel what is in flight:
     *    handlers and streams wake on the DONE events of the engine thread (still running)
     *    and answer (503 / an error event and [DONE]) */
    MHD_socket listen_fd = s->daemon ? MHD_quiesce_daemon(s->daemon) : MHD_INVALID_SOCKET;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (la_call *c = s->calls; c; c = c->next)
        if (c->request_id) la_engine_cancel(s->engine, c->request_id);
    pthread_mutex_unlock(&s->mu);
    /* 2. let those answers go out: libmicrohttpd's stop cuts every connection at once.
     *    Idle keep-alive connections hold no request and do not delay this. */
    for (int waited_ms = 0; atomic_load(&s->n_requests) > 0 && waited_ms < SHUTDOWN_DRAIN_MS;
         waited_ms += 5) {
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    /* 3. stop HTTP (joins every connection thread), then the engine thread */
    if (s->daemon) MHD_stop_daemon(s->daemon);
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd);
    if (s->engine_started) {
        atomic_store(&s->engine_stop, true);
        pthread_join(s->engine_thread, NULL);
    }
    server_free(s);
}
