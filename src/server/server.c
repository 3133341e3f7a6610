/* The HTTP server: libmicrohttpd plumbing, dispatch through the route table (routes.c), the
 * engine thread, start and clean shutdown (server.h).
 *
 * ---- Request flow ------------------------------------------------------------------------
 * libmicrohttpd runs event-driven (epoll; poll where there is no epoll) on a fixed pool of
 * --http-threads worker threads that every connection shares, and calls on_access() several
 * times per request: once when the headers are in (we pick the route), once per piece of
 * body (we collect it up to max_body_bytes, then discard the rest and remember it was too
 * large), and once more at the end, when we answer. No handler waits on a worker thread:
 * one whose answer depends on the engine (generation, pre-warm, prefix-cache reset) hands
 * the wait off (la_server_defer; streams park in their content reader, generate.c), its
 * connection is suspended, and the engine's event (or the task that finished) resumes it
 * (conn.h). A body over the limit is drained before the 413 goes out, so the client reads
 * the answer instead of a reset connection; only a client that announced "Expect:
 * 100-continue" with a too large Content-Length gets its 413 at once.
 *
 * ---- Before a handler runs (dispatch) -------------------------------------------------------
 *   OPTIONS       a CORS preflight: 204 with the Access-Control-* headers for an allowed
 *                 origin, 400 for another (405 without --allowed-origins)
 *   --api-key     every route but /health and /metrics (those too with --protect-metrics)
 *                 wants "Authorization: Bearer KEY", compared in constant time: 401 in
 *                 OpenAI's error shape (invalid_api_key) otherwise
 *   draining      after la_server_drain began, every route but /metrics answers 503
 * Each connection has a small state (la_conn, MHD_OPTION_NOTIFY_CONNECTION) holding the
 * request id of the request it is serving: the client's X-Request-Id, else one made here,
 * echoed in the answer's X-Request-Id header and used by generation as its response id and
 * in logs; and where that request is, for the receive deadline (conn.h).
 */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "server/call.h"
#include "server/kv_events.h"
#include "server/respond.h"
#include "server/routes.h"
#include "server/conn.h"
#include "server/server_internal.h"

/* How long shutdown waits for the answers to requests it cancelled. */
#define SHUTDOWN_DRAIN_MS 30000

/* ============================================================ connections ============ */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    la_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) *socket_context = la_conn_open(s, conn);
    else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        la_conn_close(*socket_context);
        *socket_context = NULL;
    }
}

/* 1 to 128 visible ASCII characters. */
static bool good_id(const char *id) {
    size_t n = id ? strlen(id) : 0;
    if (n < 1 || n > 128) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)id[i] <= 0x20 || (unsigned char)id[i] >= 0x7f) return false;
    return true;
}

void la_server_request_id(la_server *s, struct MHD_Connection *conn, const char *body_id, char *buf, size_t cap) {
    la_conn *cc = la_conn_of(conn);
    if (cc && cc->chosen[0]) {
        snprintf(buf, cap, "%s", cc->chosen);
        return;
    }
    const char *hdr = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
    const char *id = good_id(hdr) ? hdr : good_id(body_id) ? body_id : NULL;
    char made[40];
    if (!id) {
        if (!cc || !cc->made[0]) {
            uint64_t k = atomic_fetch_add(&s->next_id, 1);
            snprintf(made, sizeof made, "%08x%016llx", s->id_salt, (unsigned long long)k);
            if (cc) memcpy(cc->made, made, sizeof made);
        }
        id = cc ? cc->made : made;
    }
    if (cc) snprintf(cc->chosen, sizeof cc->chosen, "%s", id);
    snprintf(buf, cap, "%s", id);
}

/* ============================================================ CORS, keys ============= */

/* Split "a, b,c" into the allowed origins. */
static bool parse_origins(la_server *s, const char *list) {
    if (!list) return true;
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *q = p;
        while (*q && *q != ',') q++;
        const char *e = q;
        while (e > p && e[-1] == ' ') e--;
        if (e > p) {
            char **o = realloc(s->origins, sizeof(char *) * (size_t)(s->n_origins + 1));
            if (!o) return false;
            s->origins = o;
            if (!(s->origins[s->n_origins] = strndup(p, (size_t)(e - p)))) return false;
            s->n_origins++;
        }
        p = q;
    }
    return true;
}

/* The value of Access-Control-Allow-Origin for origin, or NULL when not allowed. */
static const char *allowed_origin(const la_server *s, const char *origin) {
    if (!origin || !s->n_origins) return NULL;
    for (int i = 0; i < s->n_origins; i++) {
        if (!strcmp(s->origins[i], "*")) return "*";
        if (!strcmp(s->origins[i], origin)) return origin;
    }
    return NULL;
}

void la_server_add_cors(la_server *s, struct MHD_Connection *conn, struct MHD_Response *r) {
    const char *allow = allowed_origin(s, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin"));
    if (!allow) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow);
    if (strcmp(allow, "*")) MHD_add_response_header(r, "Vary", "Origin");
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Request-Id");
}

/* Bytes equal, in time that depends on the length of given only. */
static bool same_key(const char *given, const char *key) {
    size_t n = strlen(given), m = strlen(key);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(given[i] ^ key[m ? i % m : 0]);
    return diff == 0 && m > 0;
}

static bool authorized(const la_server *s, struct MHD_Connection *conn, const char *route) {
    if (!s->opts.api_key) return true;
    if (!s->opts.protect_metrics && (!strcmp(route, "/health") || !strcmp(route, "/metrics"))) return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    return same_key(h, s->opts.api_key);
}

static enum MHD_Result preflight(la_server *s, struct MHD_Connection *conn, const char *route) {
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    const char *allow = allowed_origin(s, origin);
    if (!allow) {
        char msg[200];
        snprintf(msg, sizeof msg, "Disallowed CORS origin '%.100s'.", origin ? origin : "");
        return la_server_send_status(s, conn, route, LA_ERR_INVALID_ARG, msg, NULL, "cors_origin");
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    const la_route *rt = la_route_find(route);
    char methods[32];
    snprintf(methods, sizeof methods, "%s, OPTIONS", rt ? rt->method : "GET");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
    const char *hdrs = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            hdrs ? hdrs : "Authorization, Content-Type, X-Request-Id");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result ret = la_server_queue(s, conn, route, 204, r);
    MHD_destroy_response(r);
    return ret;
}

/* ============================================================ routing =============== */

/* State of one request on a connection (libmicrohttpd's con_cls). */
typedef struct request_ctx {
    const la_route *route; /* NULL: no such path */
    char *body;
    size_t len, cap;
    bool too_large;
    bool answered; /* an early answer was queued */
} request_ctx;

static enum MHD_Result dispatch(la_server *s, struct MHD_Connection *conn, request_ctx *rc,
                                const char *method, const char *url) {
    const char *route = rc->route ? rc->route->path : "other";
    char msg[256];
    if (!rc->route) {
        snprintf(msg, sizeof msg, "Unknown route %s %.120s.", method, url);
        return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_ROUTE_NOT_FOUND, msg, NULL);
    }
    if (!strcmp(method, "OPTIONS") && s->n_origins) return preflight(s, conn, route);
    if (!authorized(s, conn, route)) {
        static const la_http_error unauthorized = {401, "invalid_request_error", "invalid_api_key"};
        return la_server_send(s, conn, route, 401, "application/json",
                              la_http_error_json(&unauthorized,
                                                 "Incorrect API key provided: send 'Authorization: Bearer <key>'.",
                                                 NULL, NULL));
    }
    pthread_mutex_lock(&s->mu);
    bool draining = s->draining || s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (draining && strcmp(route, "/metrics"))
        return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_SHUTTING_DOWN, "The server is shutting down.", NULL);
    if (strcmp(method, rc->route->method)) {
        snprintf(msg, sizeof msg, "Method %s is not allowed on %s (use %s).", method, route,
                 rc->route->method);
        return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_METHOD_NOT_ALLOWED, msg, NULL);
    }
    if (rc->too_large) {
        snprintf(msg, sizeof msg, "The request body exceeds the limit of %zu bytes.",
                 s->opts.max_body_bytes);
        return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_BODY_TOO_LARGE, msg, NULL);
    }
    const char *body = rc->body ? rc->body : "";
    return rc->route->handler(s, conn, route, body, rc->len);
}

/* The waiting answer of cc is over (answered, or its connection closes): free its state. */
static void end_deferred(la_conn *cc) {
    void *state = cc->defer_state;
    void (*free_state)(void *) = cc->defer_free;
    cc->defer = NULL;
    cc->defer_state = NULL;
    cc->defer_free = NULL;
    if (free_state) free_state(state);
}

/* Run a waiting answer's next steps until it answers or parks (la_server_defer). */
static enum MHD_Result run_deferred(la_server *s, struct MHD_Connection *conn, la_conn *cc) {
    for (;;) {
        la_conn_arm(cc);
        bool wait = false;
        enum MHD_Result ret = cc->defer(s, conn, cc->defer_state, &wait);
        if (!wait) {
            end_deferred(cc);
            return ret;
        }
        int k = la_conn_suspend(cc);
        if (k > 0) return MHD_YES; /* parked: a wake resumes the connection, then on_access */
        if (k < 0) {               /* the server stops: close the connection */
            end_deferred(cc);
            return MHD_NO;
        }
    }
}

enum MHD_Result la_server_defer(la_server *s, struct MHD_Connection *conn, la_defer_fn *fn, void *state,
                                void (*free_state)(void *state)) {
    la_conn *cc = la_conn_of(conn);
    if (!cc) { /* its state could not be allocated: nothing to park with */
        if (free_state) free_state(state);
        return MHD_NO;
    }
    cc->defer = fn;
    cc->defer_state = state;
    cc->defer_free = free_state;
    return run_deferred(s, conn, cc);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls) {
    la_server *s = cls;
    request_ctx *rc = *con_cls;
    la_conn *cc = la_conn_of(conn);
    if (!rc) { /* headers are in */
        rc = calloc(1, sizeof *rc);
        if (!rc) return MHD_NO;
        *con_cls = rc;
        atomic_fetch_add(&s->n_requests, 1);
        if (cc) { /* a new request on this connection: new ids */
            memset(cc->made, 0, sizeof cc->made);
            memset(cc->chosen, 0, sizeof cc->chosen);
        }
        la_conn_set_phase(cc, LA_CONN_BODY, version && !strcmp(version, MHD_HTTP_VERSION_1_1));
        rc->route = la_route_find(url);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
        if (cl && expect && !strcasecmp(expect, "100-continue") &&
            strtoull(cl, NULL, 10) > s->opts.max_body_bytes) {
            rc->too_large = rc->answered = true;
            la_conn_set_phase(cc, LA_CONN_ANSWER, false);
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
    if (cc && cc->defer) return run_deferred(s, conn, cc); /* woken */
    if (rc->answered) return MHD_YES;
    rc->answered = true;
    la_conn_set_phase(cc, LA_CONN_ANSWER, false);
    return dispatch(s, conn, rc, method, url);
}

/* The request's answer is out (or the connection died): free its state. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    la_server *s = cls;
    request_ctx *rc = *con_cls;
    if (!rc) return;
    la_conn *cc = la_conn_of(conn);
    if (cc && cc->defer) end_deferred(cc); /* closed while its answer waited (shutdown) */
    la_conn_set_phase(cc, LA_CONN_HEADERS, false); /* the next request's clock */
    free(rc->body);
    free(rc);
    *con_cls = NULL;
    atomic_fetch_sub(&s->n_requests, 1);
}

/* ============================================================ engine thread ========= */

/* t has run: mark it done and wake its connection, under mu (the handler frees t once it
 * sees done, so nothing touches t after the unlock). */
static void task_done(la_server *s, la_engine_task *t) {
    pthread_mutex_lock(&s->mu);
    t->done = true;
    if (t->wake) la_conn_wake(t->wake);
    pthread_cond_broadcast(&s->task_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Run the tasks handlers queued (la_server_on_engine), between two steps. */
static void run_tasks(la_server *s) {
    pthread_mutex_lock(&s->mu);
    while (s->tasks) {
        la_engine_task *t = s->tasks;
        s->tasks = t->next;
        pthread_mutex_unlock(&s->mu);
        t->fn(s->engine, t->arg);
        task_done(s, t);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *engine_main(void *arg) {
    la_server *s = arg;
    while (!atomic_load(&s->engine_stop)) {
        if (la_engine_has_work(s->engine)) {
            la_err err = {0};
            if (la_engine_step(s->engine, &err) != LA_OK)
                fprintf(stderr, "lazyattn serve: engine step failed: %s\n", err.msg);
            la_kv_events_flush(s->opts.kv_events); /* one KVEventBatch per step */
        } else {
            la_engine_wait_work(s->engine, 50);
        }
        run_tasks(s);
    }
    run_tasks(s);
    return NULL;
}

void la_server_on_engine(la_server *s, la_engine_task *t) {
    t->queued = true;
    t->done = false;
    t->next = NULL;
    pthread_mutex_lock(&s->mu);
    la_engine_task **at = &s->tasks;
    while (*at) at = &(*at)->next;
    *at = t;
    pthread_mutex_unlock(&s->mu);
}

typedef struct offload_arg {
    la_server *s;
    la_engine_task *t;
} offload_arg;

static void *offload_main(void *arg) {
    offload_arg a = *(offload_arg *)arg;
    free(arg);
    a.t->fn(a.s->engine, a.t->arg);
    task_done(a.s, a.t);
    return NULL;
}

la_status la_server_offload(la_server *s, la_engine_task *t, la_err *err) {
    offload_arg *a = malloc(sizeof *a);
    if (!a) return la_err_set(err, LA_ERR_NO_MEMORY, "server: out of memory");
    *a = (offload_arg){s, t};
    t->done = false;
    if (pthread_create(&t->thread, NULL, offload_main, a) != 0) {
        free(a);
        return la_err_set(err, LA_ERR_NO_MEMORY, "server: cannot start a thread");
    }
    t->queued = t->own_thread = true;
    return LA_OK;
}

bool la_server_task_done(la_server *s, la_engine_task *t) {
    pthread_mutex_lock(&s->mu);
    bool done = t->done;
    pthread_mutex_unlock(&s->mu);
    return done;
}

void la_server_task_finish(la_server *s, la_engine_task *t) {
    if (!t->queued) return;
    pthread_mutex_lock(&s->mu);
    while (!t->done) pthread_cond_wait(&s->task_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (t->own_thread) pthread_join(t->thread, NULL);
    t->queued = t->own_thread = false;
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
    pthread_cond_destroy(&s->task_cv);
    pthread_cond_destroy(&s->watch_cv);
    pthread_mutex_destroy(&s->conn_mu);
    for (int i = 0; i < s->n_origins; i++) free(s->origins[i]);
    free(s->origins);
    for (int i = 0; i < s->n_unknown_seen; i++) free(s->unknown_seen[i]);
    free(s->unknown_seen);
    free(s->tls_cert);
    free(s->tls_key);
    pthread_mutex_destroy(&s->mu);
    free(s->model_id);
    free(s);
}

/* --ignore-unknown-fields: one line per unknown name, the first time it is seen. */
static void log_unknown_field(void *user, const char *name) {
    la_server *s = user;
    pthread_mutex_lock(&s->mu);
    bool seen = false;
    for (int i = 0; i < s->n_unknown_seen && !seen; i++) seen = !strcmp(s->unknown_seen[i], name);
    if (!seen && s->n_unknown_seen < 1024) {
        char **p = realloc(s->unknown_seen, sizeof(char *) * (size_t)(s->n_unknown_seen + 1));
        if (p) {
            s->unknown_seen = p;
            if ((p[s->n_unknown_seen] = strdup(name))) s->n_unknown_seen++;
        }
        fprintf(stderr, "lazyattn serve: ignoring the unknown request field '%.100s' (--ignore-unknown-fields; "
                        "logged once)\n", name);
    }
    pthread_mutex_unlock(&s->mu);
}

/* A whole PEM file (for HTTPS). */
static la_status read_pem(const char *path, const char *what, char **out, la_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return la_err_set(err, LA_ERR_IO, "%s %s: %s", what, path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", what);
            }
            buf = p;
        }
        size_t k = fread(buf + n, 1, 4096, f);
        n += k;
        if (k < 4096) break;
    }
    fclose(f);
    buf[n] = '\0';
    if (!strstr(buf, "-----BEGIN")) {
        free(buf);
        return la_err_set(err, LA_ERR_FORMAT, "%s %s is not a PEM file", what, path);
    }
    *out = buf;
    return LA_OK;
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
    pthread_cond_init(&s->task_cv, NULL);
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_cond_init(&s->watch_cv, NULL);
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
                                .chat_format = o->chat_format,
                                .vocab_size = la_engine_vocab_size(e),
                                .ignore_unknown_fields = o->ignore_unknown_fields,
                                .on_unknown_field = log_unknown_field,
                                .unknown_user = s};
    la_status st = s->model_id ? LA_OK : la_err_set(err, LA_ERR_NO_MEMORY, "server: out of memory");
    if (st == LA_OK && !parse_origins(s, o->allowed_origins)) st = la_err_set(err, LA_ERR_NO_MEMORY, "server: out of memory");
    if (st == LA_OK && (!o->ssl_certfile) != (!o->ssl_keyfile))
        st = la_err_set(err, LA_ERR_INVALID_ARG, "HTTPS needs both --ssl-certfile and --ssl-keyfile");
    if (st == LA_OK && o->ssl_certfile && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        st = la_err_set(err, LA_ERR_UNSUPPORTED, "this libmicrohttpd was built without TLS");
    if (st == LA_OK && o->ssl_certfile) st = read_pem(o->ssl_certfile, "--ssl-certfile", &s->tls_cert, err);
    if (st == LA_OK && o->ssl_keyfile) st = read_pem(o->ssl_keyfile, "--ssl-keyfile", &s->tls_key, err);
    if (st == LA_OK && o->api_key && !o->api_key[0])
        st = la_err_set(err, LA_ERR_INVALID_ARG, "the API key is empty");
    if (st == LA_OK) st = la_metrics_create(&s->metrics, err);
    if (st == LA_OK) la_metrics_set_model_name(s->metrics, s->model_id);
    if (st == LA_OK) st = la_conns_start(s, err);
    if (st != LA_OK) {
        server_free(s);
        return st;
    }
    if (pthread_create(&s->engine_thread, NULL, engine_main, s) != 0) {
        la_conns_stop(s);
        server_free(s);
        return la_err_set(err, LA_ERR_NO_MEMORY, "server: cannot start the engine thread");
    }
    s->engine_started = true;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    s->http_threads = o->http_threads ? o->http_threads : cores >= 4 ? 4 : cores >= 1 ? (unsigned)cores : 1;
    /* event-driven: a fixed pool of worker threads shares every connection; a request
     * waiting on the engine suspends its connection (conn.h). ITC: resumes wake the
     * workers, and la_server_destroy quiesces the daemon. */
    unsigned flags = MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
                     (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES ? MHD_USE_EPOLL_INTERNAL_THREAD
                                                                            : MHD_USE_POLL_INTERNAL_THREAD);
    if (ipv6) flags |= MHD_USE_IPv6;
    if (s->tls_cert) flags |= MHD_USE_TLS;
    struct MHD_OptionItem tls[] = {{MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key},
                                   {MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert},
                                   {MHD_OPTION_END, 0, NULL}};
    s->daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_CONNECTION_LIMIT,
                                 o->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_connections_per_ip,
                                 MHD_OPTION_CONNECTION_TIMEOUT, o->idle_timeout_s, MHD_OPTION_THREAD_POOL_SIZE,
                                 s->http_threads, MHD_OPTION_ARRAY, s->tls_cert ? tls : tls + 2, MHD_OPTION_END);
    if (!s->daemon) {
        atomic_store(&s->engine_stop, true);
        pthread_join(s->engine_thread, NULL);
        la_conns_stop(s);
        server_free(s);
        if (o->ssl_certfile)
            return la_err_set(err, LA_ERR_IO, "cannot listen on %s:%d with HTTPS (address in use, or the key does "
                                              "not match the certificate?)", o->host ? o->host : "127.0.0.1", o->port);
        return la_err_set(err, LA_ERR_IO, "cannot listen on %s:%d (address in use or not local?)",
                          o->host ? o->host : "127.0.0.1", o->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di && di->port ? di->port : o->port;
    *out = s;
    return LA_OK;
}

int la_server_port(const la_server *s) { return s->port; }

bool la_server_drain(la_server *s, int timeout_ms) {
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    pthread_mutex_unlock(&s->mu);
    for (int waited_ms = 0; waited_ms < timeout_ms; waited_ms += 5) {
        pthread_mutex_lock(&s->mu);
        int64_t calls = s->n_calls;
        pthread_mutex_unlock(&s->mu);
        if (calls == 0 && atomic_load(&s->n_requests) == 0) return true;
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return false;
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
     *    Idle keep-alive connections hold no request and do not delay this. The watcher
     *    still runs: a client that trickles a request is cut at its deadline. */
    for (int waited_ms = 0; atomic_load(&s->n_requests) > 0 && waited_ms < SHUTDOWN_DRAIN_MS;
         waited_ms += 5) {
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
    /* 3. what still waits (past the drain time) is closed: nothing parks any more and every
     *    suspended connection is resumed (libmicrohttpd must not stop with one suspended).
     *    Then stop HTTP (joins its worker threads), the connection watcher and the engine
     *    thread, which the closing connections may still wait on. */
    la_conns_release(s);
    if (s->daemon) MHD_stop_daemon(s->daemon);
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd);
    la_conns_stop(s);
    if (s->engine_started) {
        atomic_store(&s->engine_stop, true);
        pthread_join(s->engine_thread, NULL);
    }
    server_free(s);
}
