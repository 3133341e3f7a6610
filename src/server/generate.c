/* POST /v1/completions and /v1/chat/completions: parse, submit, then answer with one JSON
 * response or stream server-sent events (routes.h).
 *
 * Streaming: the response body comes from sse_read(), which libmicrohttpd calls on one of
 * its shared worker threads. It turns each choice's new text and logprobs from the call's
 * event queue into chunks (chat: a role chunk per choice first; completions with echo: the
 * prompt first), a finish chunk per choice as it ends, then the usage chunk
 * (stream_options.include_usage) and "data: [DONE]". With nothing new it parks: the
 * connection is suspended and the call's next event resumes it (conn.h), so a stream
 * waiting for tokens holds no thread. A client that hangs up is noticed by the failed write
 * or, while parked, by the connection watcher (conn.h: a read EOF is probed with an SSE
 * comment line, ": "); both end in sse_free(), which cancels the request so its KV blocks
 * are released.
 *
 * Not streamed: the answer waits for the call's DONE parked the same way (la_server_defer),
 * woken by DONE only. A client that left is noticed by the watcher (a read EOF is probed
 * with an interim "100 Continue", so a client that only half-closed its side still gets
 * its answer) and its request cancelled.
 *
 * The response id is "cmpl-" / "chatcmpl-" and the request's X-Request-Id (the header, else
 * the body's request_id, else one the server made: server.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "server/api_fields.h"
#include "server/api_response.h"
#include "server/call.h"
#include "server/respond.h"
#include "server/routes.h"
#include "server/conn.h"
#include "server/server_internal.h"

/* ============================================================ streaming ============= */

typedef struct sse_choice {
    bool started;        /* role chunk (chat) or echo (completions) sent */
    bool finished;       /* its finish chunk sent */
    int64_t text_offset; /* completions logprobs: code points so far */
} sse_choice;

typedef struct sse_stream {
    la_server *srv;
    la_call *call;
    la_conn *cc;         /* its connection's state: parking, hang-ups */
    la_api_reply reply;
    char id[192];
    char *echo;          /* completions' echo text, or NULL */
    size_t echo_len;
    sse_choice *ch;      /* [call->n_choices] */
    bool ended;
    char *buf;           /* SSE bytes not yet handed to libmicrohttpd */
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

/* The events that end a stream once every choice is done. */
static bool add_ending(sse_stream *st, la_finish_reason why, la_status status, const char *error,
                       const la_request_stats *stats) {
    bool ok = true;
    if (why == LA_FINISH_STOP || why == LA_FINISH_LENGTH) {
        if (st->reply.include_usage) ok = buf_take(st, la_api_usage_chunk_sse(&st->reply, stats));
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

/* What one choice has that the stream has not sent, taken under the call's lock. */
typedef struct taken {
    char *text;
    size_t text_len;
    la_api_lp *lps;
    int32_t n_lps;
    bool done;
    la_finish_reason why;
} taken;

static bool take(la_call_choice *cc, taken *t) {
    memset(t, 0, sizeof *t);
    t->text_len = cc->text_len - cc->text_read;
    t->n_lps = cc->n_lps - cc->lps_read;
    if (t->text_len) {
        if (!(t->text = malloc(t->text_len + 1))) return false;
        memcpy(t->text, cc->text + cc->text_read, t->text_len);
        t->text[t->text_len] = '\0';
    }
    if (t->n_lps) {
        if (!(t->lps = malloc(sizeof(la_api_lp) * (size_t)t->n_lps))) return false;
        memcpy(t->lps, cc->lps + cc->lps_read, sizeof(la_api_lp) * (size_t)t->n_lps);
    }
    cc->text_read = cc->text_len;
    cc->lps_read = cc->n_lps;
    if (cc->done && !cc->done_read) {
        cc->done_read = true;
        t->done = true;
        t->why = cc->finish;
    }
    return true;
}

/* One round: every choice's news into chunks. false: out of memory. */
static bool stream_round(sse_stream *st) {
    la_call *c = st->call;
    int32_t n = c->n_choices;
    taken *t = calloc((size_t)n, sizeof *t);
    if (!t) return false;
    bool ok = true;
    pthread_mutex_lock(&c->mu);
    for (int32_t i = 0; i < n && ok; i++) ok = take(&c->choices[i], &t[i]);
    bool all_done = c->done;
    la_finish_reason why = c->finish;
    la_status status = c->status;
    la_request_stats stats = c->stats;
    char error[LA_ERR_MSG_LEN];
    memcpy(error, c->error, sizeof error);
    pthread_mutex_unlock(&c->mu);
    bool failed = false;
    for (int32_t i = 0; i < n; i++) failed |= t[i].done && t[i].why != LA_FINISH_STOP && t[i].why != LA_FINISH_LENGTH;
    if (failed) la_call_cancel(c); /* one choice failed: the request fails */
    int32_t last_finish = -1;
    for (int32_t i = 0; i < n; i++)
        if (t[i].done && (t[i].why == LA_FINISH_STOP || t[i].why == LA_FINISH_LENGTH)) last_finish = i;
    for (int32_t i = 0; i < n && ok; i++) {
        if (t[i].text_len || t[i].n_lps) {
            la_api_choice ch = {.index = i, .text = t[i].text, .text_len = t[i].text_len, .lps = t[i].lps,
                                .n_lps = t[i].n_lps, .text_offset = st->ch[i].text_offset};
            ok = buf_take(st, la_api_chunk_sse(&st->reply, false, &ch, NULL));
            st->ch[i].text_offset += la_api_lp_code_points(st->reply.engine, t[i].lps, t[i].n_lps);
        }
        if (ok && t[i].done && (t[i].why == LA_FINISH_STOP || t[i].why == LA_FINISH_LENGTH)) {
            la_api_choice ch = {.index = i, .why = t[i].why};
            bool carries_ext = all_done && i == last_finish && why != LA_FINISH_ERROR && why != LA_FINISH_CANCELLED;
            ok = buf_take(st, la_api_chunk_sse(&st->reply, false, &ch, carries_ext ? &stats : NULL));
            st->ch[i].finished = true;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        free(t[i].text);
        free(t[i].lps);
    }
    free(t);
    if (ok && all_done) {
        ok = add_ending(st, why, status, error, &stats);
        st->ended = true;
    }
    return ok;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *out, size_t max) {
    (void)pos;
    sse_stream *st = cls;
    la_call *c = st->call;
    while (st->off == st->len) {
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        st->off = st->len = 0;
        bool started = false;
        for (int32_t i = 0; i < c->n_choices; i++) {
            if (st->ch[i].started) continue;
            st->ch[i].started = started = true;
            la_api_choice ch = {.index = i, .text = st->echo, .text_len = st->echo_len};
            if (st->reply.kind == LA_API_CHAT) {
                ch.text = NULL;
                if (!buf_take(st, la_api_chunk_sse(&st->reply, true, &ch, NULL))) return MHD_CONTENT_READER_END_WITH_ERROR;
            } else if (st->echo) {
                if (!buf_take(st, la_api_chunk_sse(&st->reply, false, &ch, NULL))) return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        if (started && st->len) continue;
        la_conn_arm(st->cc); /* before the checks: a wake after them resumes the parked stream */
        if (la_conn_take_probe(st->cc)) { /* the client sent EOF: left, or half-closed? */
            if (!buf_add(st, ": \n\n")) return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        if (la_conn_gone(st->cc)) {
            la_call_cancel(c);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (!la_call_has_news(c)) {
            int k = la_conn_suspend(st->cc);
            if (k > 0) return 0; /* parked: the call's next event resumes the connection */
            if (k < 0) {         /* the server stops */
                la_call_cancel(c);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            continue;            /* an event came meanwhile */
        }
        if (!stream_round(st)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t k = st->len - st->off < max ? st->len - st->off : max;
    memcpy(out, st->buf + st->off, k);
    st->off += k;
    return (ssize_t)k;
}

static void sse_free(void *cls) {
    sse_stream *st = cls;
    la_call_release(st->call); /* cancels the request if the client left early */
    free(st->echo);
    free(st->ch);
    free(st->buf);
    free(st);
}

/* ============================================================ handler =============== */

static void make_id(const char *rid, la_api_kind kind, char *id, size_t n) {
    snprintf(id, n, "%s-%s", kind == LA_API_CHAT ? "chatcmpl" : "cmpl", rid);
}

/* The whole answer, once every choice is done. */
static enum MHD_Result answer_done(la_server *s, struct MHD_Connection *conn, const char *route, la_call *c,
                                   const la_api_reply *reply, const char *echo, size_t echo_len) {
    if (c->finish == LA_FINISH_CANCELLED)
        return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_SHUTTING_DOWN, "The server is shutting down.", NULL);
    if (c->finish != LA_FINISH_STOP && c->finish != LA_FINISH_LENGTH) {
        char named[64];
        return la_server_send_status(s, conn, route, c->status, c->error,
                                     la_server_error_param(c->status, c->error, reply->kind == LA_API_CHAT, named), NULL);
    }
    int32_t n = c->n_choices;
    la_api_choice *ch = calloc((size_t)n, sizeof *ch);
    char **texts = calloc((size_t)n, sizeof *texts);
    bool ok = ch && texts;
    int64_t echo_cp = 0;
    for (size_t i = 0; echo && i < echo_len; i++) echo_cp += ((unsigned char)echo[i] & 0xC0) != 0x80;
    for (int32_t i = 0; ok && i < n; i++) {
        const la_call_choice *cc = &c->choices[i];
        ch[i] = (la_api_choice){.index = i, .text = cc->text, .text_len = cc->text_len, .lps = cc->lps,
                                .n_lps = cc->n_lps, .text_offset = echo_cp, .why = cc->finish};
        if (echo) { /* completions: the prompt, then the completion */
            ok = (texts[i] = malloc(echo_len + cc->text_len + 1)) != NULL;
            if (ok) {
                memcpy(texts[i], echo, echo_len);
                if (cc->text_len) memcpy(texts[i] + echo_len, cc->text, cc->text_len);
                ch[i].text = texts[i];
                ch[i].text_len = echo_len + cc->text_len;
            }
        }
    }
    enum MHD_Result ret = la_server_send(s, conn, route, 200, "application/json",
                                         ok ? la_api_response_json(reply, ch, n, &c->stats) : NULL);
    for (int32_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(ch);
    return ret;
}

/* The prompt as the completion's echo: its text, or its ids decoded. */
static char *echo_text(la_server *s, const la_api_request *ar, size_t *len) {
    const la_segment *p = &ar->params.prompt;
    if (p->ids) {
        char *t = NULL;
        la_err err;
        if (la_engine_detokenize(s->engine, p->ids, p->n_ids, false, &t, len, &err) != LA_OK) return NULL;
        return t;
    }
    *len = p->len ? p->len : strlen(p->text ? p->text : "");
    char *t = malloc(*len + 1);
    if (t) {
        memcpy(t, p->text ? p->text : "", *len);
        t[*len] = '\0';
    }
    return t;
}

/* A non-streamed answer waiting for DONE (la_server_defer). */
typedef struct gen_wait {
    la_call *call;
    la_conn *cc;
    const char *route;
    la_api_reply reply;
    char id[192];
    char *echo; /* completions' echo, or NULL */
    size_t echo_len;
} gen_wait;

static enum MHD_Result gen_step(la_server *s, struct MHD_Connection *conn, void *state, bool *wait) {
    gen_wait *g = state;
    if (la_conn_gone(g->cc)) return MHD_NO; /* the client left: close; gen_free cancels */
    pthread_mutex_lock(&g->call->mu);
    bool done = g->call->done;
    pthread_mutex_unlock(&g->call->mu);
    if (!done) {
        *wait = true;
        return MHD_YES;
    }
    return answer_done(s, conn, g->route, g->call, &g->reply, g->echo, g->echo_len); /* done: no more writers */
}

static void gen_free(void *state) {
    gen_wait *g = state;
    la_call_release(g->call); /* cancels the request if it has not finished */
    free(g->echo);
    free(g);
}

static enum MHD_Result handle_generate(la_server *s, struct MHD_Connection *conn, const char *route,
                                       la_api_kind kind, const char *body, size_t len) {
    la_conn *cc = la_conn_of(conn);
    if (!cc) /* no state for this connection (out of memory when it opened): cannot wait */
        return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
    la_api_request ar;
    enum MHD_Result parse_ret;
    if (!la_server_parse_request(s, conn, route, kind, body, len, &ar, &parse_ret)) return parse_ret;
    la_err err = {0};
    if (ar.params.method == LA_METHOD_COUNT) ar.params.method = s->opts.method;
    la_api_reply reply = {.kind = kind, .created = (int64_t)time(NULL), .model = s->model_id,
                          .method = la_method_name(ar.params.method),
                          .include_usage = ar.stream && ar.include_usage, .logprobs = ar.logprobs,
                          .top_logprobs = ar.top_logprobs, .engine = s->engine};
    bool stream = ar.stream;
    char rid[136];
    la_server_request_id(s, conn, ar.request_id, rid, sizeof rid);
    size_t echo_len = 0;
    char *echo = ar.echo ? echo_text(s, &ar, &echo_len) : NULL;
    la_call *c = la_call_create(s);
    if (!c || (ar.echo && !echo)) {
        free(echo);
        la_call_release(c);
        la_api_request_fini(&ar);
        return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
    }
    snprintf(c->rid, sizeof c->rid, "%s", rid);
    snprintf(c->user, sizeof c->user, "%s", ar.user ? ar.user : "");
    la_call_watch(c, cc, !stream); /* its events wake the connection (a stream: each one) */
    la_status st = la_call_submit(c, &ar.params, &err);
    la_api_request_fini(&ar); /* submit copied what it needs */
    if (st != LA_OK) {
        free(echo);
        la_call_release(c);
        if (st == LA_ERR_CANCELLED)
            return la_server_send_fault(s, conn, route, LA_HTTP_FAULT_SHUTTING_DOWN, err.msg, NULL);
        char named[64];
        const char *param = la_server_error_param(st, err.msg, kind == LA_API_CHAT, named);
        return la_server_send_status(s, conn, route, st, err.msg, param,
                                     st == LA_ERR_UNSUPPORTED ? "unsupported_parameter" : NULL);
    }
    if (s->opts.log_requests)
        fprintf(stderr, "lazyattn serve: %s request %llu [%s] (%s%s)\n", route, (unsigned long long)c->request_id,
                rid, reply.method, stream ? ", stream" : "");

    if (stream) {
        sse_stream *ss = calloc(1, sizeof *ss);
        struct MHD_Response *r = NULL;
        if (ss && (ss->ch = calloc((size_t)c->n_choices, sizeof *ss->ch))) {
            ss->srv = s;
            ss->call = c;
            ss->cc = cc;
            ss->reply = reply;
            ss->echo = echo;
            ss->echo_len = echo_len;
            echo = NULL;
            int64_t echo_cp = 0; /* completions' text_offset counts the echo */
            for (size_t i = 0; i < echo_len; i++) echo_cp += ((unsigned char)ss->echo[i] & 0xC0) != 0x80;
            for (int32_t i = 0; i < c->n_choices; i++) ss->ch[i].text_offset = echo_cp;
            make_id(rid, kind, ss->id, sizeof ss->id);
            ss->reply.id = ss->id;
            r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, ss, sse_free);
        }
        if (!r) {
            if (ss) {
                free(ss->echo);
                free(ss->ch);
            }
            free(ss);
            free(echo);
            la_call_release(c);
            return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        la_conn_watch(cc, true);
        enum MHD_Result ret = la_server_queue(s, conn, route, 200, r);
        MHD_destroy_response(r); /* sse_free runs when libmicrohttpd is done with it */
        return ret;
    }

    /* not streamed: park until DONE, giving up if the client leaves */
    la_conn_watch(cc, false);
    gen_wait *g = calloc(1, sizeof *g);
    if (!g) {
        free(echo);
        la_call_release(c);
        return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
    }
    *g = (gen_wait){.call = c, .cc = cc, .route = route, .reply = reply, .echo = echo, .echo_len = echo_len};
    make_id(rid, kind, g->id, sizeof g->id);
    g->reply.id = g->id;
    return la_server_defer(s, conn, gen_step, g, gen_free);
}

enum MHD_Result la_server_handle_completions(la_server *s, struct MHD_Connection *conn, const char *route,
                                             const char *body, size_t len) {
    return handle_generate(s, conn, route, LA_API_COMPLETION, body, len);
}

enum MHD_Result la_server_handle_chat(la_server *s, struct MHD_Connection *conn, const char *route,
                                      const char *body, size_t len) {
    return handle_generate(s, conn, route, LA_API_CHAT, body, len);
}
