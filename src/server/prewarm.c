/* POST /v1/documents: pre-warm documents into the KV cache (routes.h).
 *
 *   request   {"documents": [string | {title?, text}], "cache_salt"?, "method"?, "doc_context"?,
 *              "model"?}: any other field 400 unknown_parameter
 *   response  {"object": "documents.prewarm", "model", "method",
 *              "documents": [{"index", "tokens", "cached", "cached_tokens", "found", "key",
 *                             "block_hashes"}],
 *              "tokens": sum, "cached_tokens": sum, "found": {"computed": n, "pool": n, ...}}
 *
 * Done through the public engine API only: each document becomes one request of its own
 * (that document, a one-token prompt "\n", no BOS, max_tokens 1, the given method and
 * cache salt). A document's KV is keyed by its own tokens, method family and salt, never
 * by what precedes it (DESIGN.md §5), so the blocks this computes are the ones a later
 * /v1/completions or /v1/chat/completions request finds for the same document text:
 * titled documents go through la_prompt_render_document() on both paths.
 *   tokens         the document's tokens (request stats n_doc_tokens)
 *   cached_tokens  of those, found in the cache (doc_tokens_reused)
 *   cached         cached_tokens == tokens: the document was already fully cached (or
 *                  being computed by another request) when this request was planned
 *   key            the document's record key (32 hex digits; the same on every replica
 *                  that shares the deployment secret), block_hashes the low 64 bits of its
 *                  blocks' hashes: what KV events name
 *   found          where the document was before this call: "pool" (the block pool, as
 *                  la_engine_document_where said before the submit), else the store tier
 *                  its request loaded it from ("host", "disk", "shared"), else "computed"
 *                  (a lower tier's record that was missing or rejected, or computed
 *                  instead of read under kv_read auto, is "computed" too)
 * Persistence: with a disk or shared tier, the documents this call computes are written
 * through by the engine (kv_write_through; with --kv-write evict only on eviction), and
 * the answer waits until the engine has flushed every queued store write
 * (la_engine_store_flush), so a record is on disk when the client reads the answer.
 * la_engine_document_where and the flush run on the engine thread (la_server_on_engine).
 * Nothing waits on a worker thread: the handler is a sequence of steps (la_server_defer)
 * that parks the connection while the engine thread or the requests work.
 * Only methods that cache documents on their own qualify (lazy, block, mepic); prefix
 * caches by position from the prompt start, recompute and block-ref cache nothing: 400.
 * Requests are submitted together so the engine batches them; when the queue is full we
 * wait for an earlier one and retry (429 only when nothing of ours is in flight). A client
 * that leaves does not stop a pre-warm: what it computes stays cached.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "server/call.h"
#include "server/respond.h"
#include "server/routes.h"
#include "server/conn.h"
#include "server/server_internal.h"

/* la_engine_document_info of every document (engine thread): where it is, its record key
 * and block hashes (the numbers KV events report). */
typedef struct where_task {
    const la_api_request *ar;
    la_method method;
    la_document_info *info; /* [n_docs]; where 0 and no hashes where the call fails (the
                               submit then says why) */
} where_task;

static void where_all(la_engine *e, void *arg) {
    where_task *t = arg;
    for (int32_t d = 0; d < t->ar->params.n_docs; d++) {
        la_err err = {0};
        if (la_engine_document_info(e, &t->ar->docs[d], t->method, t->ar->params.cache_salt, &t->info[d], &err) !=
            LA_OK)
            t->info[d] = (la_document_info){0};
    }
}

static void flush_store(la_engine *e, void *arg) {
    (void)arg;
    la_engine_store_flush(e);
}

/* "found" of a document (the header's rule). */
static const char *found_name(int32_t where, const la_request_stats *rs) {
    if (where == 1) return "pool";
    if (rs->doc_tokens_host > 0) return "host";
    if (rs->doc_tokens_disk > 0) return "disk";
    if (rs->doc_tokens_shared > 0) return "shared";
    return rs->doc_tokens_computed > 0 ? "computed" : "pool";
}

static bool call_done(la_call *c) {
    pthread_mutex_lock(&c->mu);
    bool done = c->done;
    pthread_mutex_unlock(&c->mu);
    return done;
}

/* One pre-warm request between its steps (la_server_defer). */
typedef enum { PW_WHERE, PW_SUBMIT, PW_WAIT, PW_FLUSH, PW_ANSWER } pw_stage;

typedef struct prewarm {
    la_conn *cc;
    const char *route;
    la_api_request ar;
    la_method method;
    int32_t n;
    la_call **calls;        /* [n] NULL: not submitted */
    la_document_info *info; /* [n + 1] */
    where_task wt;
    la_engine_task task;    /* where_all, then flush_store */
    pw_stage stage;
    int32_t next;           /* next document to submit */
    int32_t oldest;         /* first call not yet known to be done */
    bool busy;              /* the queue was full: retry next once calls[oldest] is done */
    int32_t failed_at;      /* -1: none */
    la_status st;
    la_err err;
} prewarm;

static void prewarm_free(void *state) {
    prewarm *pw = state;
    la_server_task_finish(pw->cc->srv, &pw->task); /* only if its connection closed early */
    for (int32_t d = 0; d < pw->n; d++) la_call_release(pw->calls[d]);
    for (int32_t d = 0; d < pw->n; d++) free(pw->info[d].block_hashes);
    free(pw->calls);
    free(pw->info);
    la_api_request_fini(&pw->ar);
    free(pw);
}

/* Submit document pw->next. false: wait (the queue is full of ours). */
static bool submit_next(la_server *s, prewarm *pw) {
    int32_t d = pw->next;
    if (pw->busy) { /* retry once the oldest of ours is done */
        if (!call_done(pw->calls[pw->oldest])) return false;
        pw->oldest++;
        pw->busy = false;
    }
    la_request_params p;
    la_request_params_init(&p);
    p.docs = &pw->ar.docs[d];
    p.n_docs = 1;
    p.prompt.text = "\n";
    p.add_special = false;
    p.method = pw->method;
    p.cache_salt = pw->ar.params.cache_salt;
    p.sampling.max_tokens = 1;
    if (!(pw->calls[d] = la_call_create(s))) {
        pw->st = la_err_set(&pw->err, LA_ERR_NO_MEMORY, "out of memory");
        pw->failed_at = d;
        return true;
    }
    pw->calls[d]->observe = false; /* not a request: not counted in /metrics */
    la_call_watch(pw->calls[d], pw->cc, true);
    pw->st = la_call_submit(pw->calls[d], &p, &pw->err);
    if (pw->st == LA_OK) {
        pw->next++;
        return true;
    }
    la_call_release(pw->calls[d]);
    pw->calls[d] = NULL;
    if (pw->st == LA_ERR_BUSY && pw->oldest < d) { /* the queue is full of ours: let one finish */
        pw->busy = true;
        return true;
    }
    pw->failed_at = d;
    return true;
}

static enum MHD_Result prewarm_answer(la_server *s, struct MHD_Connection *conn, prewarm *pw);

static enum MHD_Result prewarm_step(la_server *s, struct MHD_Connection *conn, void *state, bool *wait) {
    prewarm *pw = state;
    for (;;) {
        switch (pw->stage) {
        case PW_WHERE: /* where each document is, on the engine thread */
            if (!pw->task.queued) {
                pw->wt = (where_task){&pw->ar, pw->method, pw->info};
                pw->task = (la_engine_task){.fn = where_all, .arg = &pw->wt, .wake = pw->cc};
                la_server_on_engine(s, &pw->task);
            }
            if (!la_server_task_done(s, &pw->task)) break;
            pw->task.queued = false;
            pw->stage = PW_SUBMIT;
            continue;
        case PW_SUBMIT: /* together, so the engine batches them */
            while (pw->next < pw->n && pw->failed_at < 0)
                if (!submit_next(s, pw)) break;
            if (pw->next < pw->n && pw->failed_at < 0) break;
            if (pw->failed_at >= 0) /* cancel everything submitted */
                for (int32_t d = 0; d < pw->n; d++)
                    if (pw->calls[d]) la_call_cancel(pw->calls[d]);
            pw->stage = PW_WAIT;
            continue;
        case PW_WAIT:
            while (pw->oldest < pw->n && (!pw->calls[pw->oldest] || call_done(pw->calls[pw->oldest]))) pw->oldest++;
            if (pw->oldest < pw->n) break;
            pw->stage = pw->failed_at < 0 ? PW_FLUSH : PW_ANSWER;
            continue;
        case PW_FLUSH: /* what they computed is stored */
            if (!pw->task.queued) {
                pw->task = (la_engine_task){.fn = flush_store, .wake = pw->cc};
                la_server_on_engine(s, &pw->task);
            }
            if (!la_server_task_done(s, &pw->task)) break;
            pw->task.queued = false;
            pw->stage = PW_ANSWER;
            continue;
        case PW_ANSWER:
            return prewarm_answer(s, conn, pw);
        }
        *wait = true;
        return MHD_YES;
    }
}

enum MHD_Result la_server_handle_documents(la_server *s, struct MHD_Connection *conn,
                                           const char *route, const char *body, size_t len) {
    la_conn *cc = la_conn_of(conn);
    if (!cc) /* no state for this connection (out of memory when it opened): cannot wait */
        return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
    la_api_request ar;
    enum MHD_Result parse_ret;
    if (!la_server_parse_request(s, conn, route, LA_API_DOCUMENTS, body, len, &ar, &parse_ret))
        return parse_ret;
    char msg[LA_ERR_MSG_LEN + 64];
    la_method method = ar.params.method == LA_METHOD_COUNT ? s->opts.method : ar.params.method;
    if (!la_method_is_blockwise(method) || method == LA_METHOD_BLOCK_REF) {
        snprintf(msg, sizeof msg,
                 "Method '%s' does not cache documents on their own; pre-warming needs lazy, "
                 "block or mepic.", la_method_name(method));
        la_api_request_fini(&ar);
        return la_server_send_status(s, conn, route, LA_ERR_INVALID_ARG, msg, "method", "invalid_value");
    }
    if ((ar.params.doc_context == LA_DOC_CONTEXT_COUNT ? s->opts.doc_context : ar.params.doc_context) ==
        LA_DOC_CONTEXT_PREAMBLE) {
        la_api_request_fini(&ar);
        return la_server_send_status(s, conn, route, LA_ERR_UNSUPPORTED,
                                     "Documents computed after the preamble (doc_context preamble) are cached "
                                     "under the preamble of the requests that use them: send those requests "
                                     "instead of pre-warming.",
                                     "doc_context", "invalid_value");
    }
    int32_t n = ar.params.n_docs;
    prewarm *pw = calloc(1, sizeof *pw);
    la_call **calls = calloc((size_t)n + 1, sizeof *calls);
    la_document_info *info = calloc((size_t)n + 1, sizeof *info);
    if (!pw || !calls || !info) {
        free(pw);
        free(calls);
        free(info);
        la_api_request_fini(&ar);
        return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
    }
    *pw = (prewarm){.cc = cc, .route = route, .ar = ar, .method = method, .n = n, .calls = calls, .info = info,
                    .failed_at = -1};
    return la_server_defer(s, conn, prewarm_step, pw, prewarm_free);
}

/* Every call is done (or a submit failed): the answer. */
static enum MHD_Result prewarm_answer(la_server *s, struct MHD_Connection *conn, prewarm *pw) {
    const char *route = pw->route;
    la_call **calls = pw->calls;
    la_document_info *info = pw->info;
    int32_t n = pw->n, failed_at = pw->failed_at;
    la_method method = pw->method;
    la_status st = pw->st;
    char msg[LA_ERR_MSG_LEN + 64];
    enum MHD_Result ret;
    if (failed_at >= 0) {
        char param[48];
        snprintf(param, sizeof param, "documents[%d]", failed_at);
        if (st == LA_ERR_CANCELLED)
            ret = la_server_send_fault(s, conn, route, LA_HTTP_FAULT_SHUTTING_DOWN, pw->err.msg, NULL);
        else
            ret = la_server_send_status(s, conn, route, st, pw->err.msg,
                                        st == LA_ERR_BUSY ? NULL : param, NULL);
    } else {
        int32_t bad = -1;
        for (int32_t d = 0; d < n && bad < 0; d++)
            if (calls[d]->finish != LA_FINISH_STOP && calls[d]->finish != LA_FINISH_LENGTH) bad = d;
        if (bad >= 0 && calls[bad]->finish == LA_FINISH_CANCELLED) {
            ret = la_server_send_fault(s, conn, route, LA_HTTP_FAULT_SHUTTING_DOWN,
                                       "The server is shutting down.", NULL);
        } else if (bad >= 0) {
            snprintf(msg, sizeof msg, "documents[%d]: %s", bad, calls[bad]->error);
            ret = la_server_send_status(s, conn, route, calls[bad]->status, msg, NULL, NULL);
        } else {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "object", "documents.prewarm");
            cJSON_AddStringToObject(o, "model", s->model_id);
            cJSON_AddStringToObject(o, "method", la_method_name(method));
            cJSON *arr = cJSON_AddArrayToObject(o, "documents");
            double total = 0, cached_total = 0;
            static const char *const k_found[] = {"computed", "pool", "host", "disk", "shared"};
            int64_t found_n[5] = {0};
            for (int32_t d = 0; d < n; d++) {
                const la_request_stats *rs = &calls[d]->stats;
                cJSON *x = cJSON_CreateObject();
                cJSON_AddItemToArray(arr, x);
                cJSON_AddNumberToObject(x, "index", d);
                cJSON_AddNumberToObject(x, "tokens", rs->n_doc_tokens);
                cJSON_AddBoolToObject(x, "cached", rs->doc_tokens_reused >= rs->n_doc_tokens);
                cJSON_AddNumberToObject(x, "cached_tokens", (double)rs->doc_tokens_reused);
                const char *found = found_name(info[d].where, rs);
                cJSON_AddStringToObject(x, "found", found);
                char hex[40];
                snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)info[d].key_hi,
                         (unsigned long long)info[d].key_lo);
                cJSON_AddStringToObject(x, "key", hex);
                cJSON *hs = cJSON_AddArrayToObject(x, "block_hashes");
                for (int32_t b = 0; b < info[d].n_blocks && info[d].block_hashes; b++) {
                    char num[24]; /* exact: a JSON number as text, not through a double */
                    snprintf(num, sizeof num, "%llu", (unsigned long long)info[d].block_hashes[b]);
                    cJSON_AddItemToArray(hs, cJSON_CreateRaw(num));
                }
                for (int k = 0; k < 5; k++) found_n[k] += !strcmp(found, k_found[k]);
                total += rs->n_doc_tokens;
                cached_total += (double)rs->doc_tokens_reused;
            }
            cJSON_AddNumberToObject(o, "tokens", total);
            cJSON_AddNumberToObject(o, "cached_tokens", cached_total);
            cJSON *fo = cJSON_AddObjectToObject(o, "found");
            for (int k = 0; k < 5; k++) cJSON_AddNumberToObject(fo, k_found[k], (double)found_n[k]);
            char *json = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
            ret = la_server_send(s, conn, route, 200, "application/json", json);
        }
    }
    return ret;
}
