/* POST /v1/completions and /v1/chat/completions: parse, submit, then answer with one JSON
 * response or stream server-sent events (server_internal.h).
 *
 * Streaming: the response body comes from sse_read(), which libmicrohttpd calls on the
 * connection's own thread (thread-per-connection mode lets it block). It waits on the
 * call's event queue, turns new text into chunks, and ends with the finish chunk, the
 * usage chunk (stream_options.include_usage) and "data: [DONE]". A client that hangs up is
 * noticed either by the hang-up check while waiting or by the failed write; both end in
 * sse_free(), which cancels the request so its KV blocks are released.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "server/api_response.h"
#include "server/call.h"
#include "server/server_internal.h"

/* How often a waiting handler checks whether its client is still there. */
#define WAIT_SLICE_MS 50

/* ============================================================ streaming ============= */

typedef struct sse_stream {
    la_server *srv;
    la_call *call;
    struct MHD_Connection *conn;
    la_api_reply reply;
    char id[48];
    bool role_sent, finished;
    char *buf; /* SSE bytes not yet handed to libmicrohttpd */
    size_t len, cap, off;
} sse_stream;

static bool buf_add(sse_stream *st, const char *s) {
    if (!s) return false;
    size_t n = strlen(s);
    if (st->len + n > st->cap) {
        size_t cap = st->cap ? st->cap : 4096;
        while (cap < st->len + n) cap *= 2;
        char *p = realloc(st->buf, cap);
        if (!p) return false;
        st->buf = p;
        st->cap = cap;
    }
    memcpy(st->buf + st->len, s, n);
    st->len += n;
    return true;
}

static bool buf_take(sse_stream *st, char *s) {
    bool ok = buf_add(st, s);
    free(s);
    return ok;
}

/* The events that end a stream, once the request is done. */
static bool add_ending(sse_stream *st, la_finish_reason why, la_status status, const char *error,
                       const la_request_stats *stats) {
    bool ok = true;
    if (why == LA_FINISH_STOP || why == LA_FINISH_LENGTH) {
        ok = buf_take(st, la_api_chunk_sse(&st->reply, false, NULL, 0, why, stats));
        if (ok && st->reply.include_usage) ok = buf_take(st, la_api_usage_chunk_sse(&st->reply, stats));
    } else { /* an error event, as OpenAI streams them */
        bool shutdown = why == LA_FINISH_CANCELLED;
        la_http_error e = shutdown ? la_http_error_for_fault(LA_HTTP_FAULT_SHUTTING_DOWN)
                                   : la_http_error_for_status(status);
        char *json = la_http_error_json(&e, shutdown ? "The server is shutting down." : error, NULL, NULL);
        ok = json && buf_add(st, "data: ") && buf_add(st, json) && buf_add(st, "\n\n");
        free(json);
    }
    return ok && buf_add(st, la_api_sse_done);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    sse_stream *st = cls;
    la_call *c = st->call;
    while (st->off == st->len) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        st->off = st->len = 0;
        if (st->reply.kind == LA_API_CHAT && !st->role_sent) {
            st->role_sent = true;
            if (!buf_take(st, la_api_chunk_sse(&st->reply, true, NULL, 0, LA_FINISH_NONE, NULL)))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        while (!la_call_wait(c, WAIT_SLICE_MS)) {
            if (la_server_client_gone(st->conn)) {
                la_call_cancel(c);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        pthread_mutex_lock(&c->mu);
        size_t n = c->text_len - c->text_read;
        char *piece = n ? malloc(n + 1) : NULL;
        if (piece) {
            memcpy(piece, c->text + c->text_read, n);
            piece[n] = '\0';
        }
        c->text_read = c->text_len;
        bool done = c->done;
        la_finish_reason why = c->finish;
        la_status status = c->status;
        la_request_stats stats = c->stats;
        char error[LA_ERR_MSG_LEN];
        memcpy(error, c->error, sizeof error);
        pthread_mutex_unlock(&c->mu);
        bool ok = !n || piece;
        if (ok && n) ok = buf_take(st, la_api_chunk_sse(&st->reply, false, piece, n, LA_FINISH_NONE, NULL));
        free(piece);
        if (ok && done) {
            ok = add_ending(st, why, status, error, &stats);
            st->finished = true;
        }
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t k = st->len - st->off < max ? st->len - st->off : max;
    memcpy(out, st->buf + st->off, k);
    st->off += k;
    return (ssize_t)k;
}

static void sse_free(void *cls) {
    sse_stream *st = cls;
    la_call_release(st->call); /* cancels the request if the client left early */
    free(st->buf);
    free(st);
}

/* ============================================================ handler =============== */

static void make_id(la_server *s, la_api_kind kind, char *id, size_t n) {
    uint64_t k = atomic_fetch_add(&s->next_id, 1);
    snprintf(id, n, "%s-%08x%016llx", kind == LA_API_CHAT ? "chatcmpl" : "cmpl", s->id_salt,
             (unsigned long long)k);
}

static enum MHD_Result answer_done(la_server *s, struct MHD_Connection *conn, const char *route,
                                   la_call *c, const la_api_reply *reply) {
    enum MHD_Result ret;
    if (c->finish == LA_FINISH_STOP || c->finish == LA_FINISH_LENGTH)
        ret = la_server_send(s, conn, route, 200, "application/json",
                             la_api_response_json(reply, c->text, c->text_len, c->finish, &c->stats));
    else if (c->finish == LA_FINISH_CANCELLED)
        ret = la_server_send_fault(s, conn, route, LA_HTTP_FAULT_SHUTTING_DOWN,
                                   "The server is shutting down.", NULL);
    else
        ret = la_server_send_status(s, conn, route, c->status, c->error, NULL, NULL);
    return ret;
}

enum MHD_Result la_server_handle_generate(la_server *s, struct MHD_Connection *conn,
                                          const char *route, la_api_kind kind, const char *body,
                                          size_t len) {
    la_api_request ar;
    enum MHD_Result parse_ret;
    if (!la_server_parse_request(s, conn, route, kind, body, len, &ar, &parse_ret)) return parse_ret;
    la_err err = {0};
    if (ar.params.method == LA_METHOD_COUNT) ar.params.method = s->opts.method;
    la_api_reply reply = {.kind = kind, .created = (int64_t)time(NULL), .model = s->model_id,
                          .method = la_method_name(ar.params.method),
                          .include_usage = ar.stream && ar.include_usage};
    bool stream = ar.stream;
    la_call *c = la_call_create(s);
    if (!c) {
        la_api_request_fini(&ar);
        return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
    }
    la_status st = la_call_submit(c, &ar.params, &err);
    la_api_request_fini(&ar); /* submit copied what it needs */
    if (st != LA_OK) {
        la_call_release(c);
        if (st == LA_ERR_CANCELLED)
            return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_SHUTTING_DOWN, err.msg, NULL);
        const char *param = st == LA_ERR_TOO_LONG ? (kind == LA_API_CHAT ? "messages" : "prompt")
                            : NULL;
        return la_server_send_status(s, conn, route, st, err.msg, param, NULL);
    }
    if (s->opts.log_requests)
        fprintf(stderr, "lazyattn serve: %s request %llu (%s%s)\n", route,
                (unsigned long long)c->request_id, reply.method, stream ? ", stream" : "");

    if (stream) {
        sse_stream *ss = calloc(1, sizeof *ss);
        struct MHD_Response *r = NULL;
        if (ss) {
            ss->srv = s;
            ss->call = c;
            ss->conn = conn;
            ss->reply = reply;
            make_id(s, kind, ss->id, sizeof ss->id);
            ss->reply.id = ss->id;
            r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, ss, sse_free);
        }
        if (!r) {
            free(ss);
            la_call_release(c);
            return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(conn, 200, r);
        MHD_destroy_response(r); /* sse_free runs when libmicrohttpd is done with it */
        la_metrics_count_http(s->metrics, route, 200);
        return ret;
    }

    /* not streamed: wait for DONE, giving up if the client leaves */
    for (;;) {
        la_call_wait(c, WAIT_SLICE_MS);
        pthread_mutex_lock(&c->mu);
        c->text_read = c->text_len; /* the text is answered at once at the end */
        bool done = c->done;
        pthread_mutex_unlock(&c->mu);
        if (done) break;
        if (la_server_client_gone(conn)) {
            la_call_release(c); /* cancels the request */
            return MHD_NO;
        }
    }
    char id[48];
    make_id(s, kind, id, sizeof id);
    reply.id = id;
    enum MHD_Result ret = answer_done(s, conn, route, c, &reply); /* done: no more writers */
    la_call_release(c);
    return ret;
}
