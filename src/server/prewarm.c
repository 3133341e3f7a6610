/* POST /v1/documents: pre-warm documents into the KV cache (server_internal.h).
 *
 *   request   {"documents": [string | {title?, text}], "cache_salt"?, "method"?, "model"?}
 *   response  {"object": "documents.prewarm", "model", "method",
 *              "documents": [{"index", "tokens", "cached", "cached_tokens"}],
 *              "tokens": sum, "cached_tokens": sum}
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
 * Only methods that cache documents on their own qualify (lazy, block, mepic); prefix
 * caches by position from the prompt start, recompute and block-ref cache nothing: 400.
 * Requests are submitted together so the engine batches them; when the queue is full we
 * wait for an earlier one and retry (429 only when nothing of ours is in flight).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "server/call.h"
#include "server/server_internal.h"

static void wait_done(la_call *c) {
    for (;;) {
        pthread_mutex_lock(&c->mu);
        bool done = c->done;
        c->text_read = c->text_len;
        pthread_mutex_unlock(&c->mu);
        if (done) return;
        la_call_wait(c, 50);
    }
}

enum MHD_Result la_server_handle_documents(la_server *s, struct MHD_Connection *conn,
                                           const char *route, const char *body, size_t len) {
    la_api_request ar;
    enum MHD_Result parse_ret;
    if (!la_server_parse_request(s, conn, route, LA_API_DOCUMENTS, body, len, &ar, &parse_ret))
        return parse_ret;
    la_err err = {0};
    la_status st;
    char msg[LA_ERR_MSG_LEN + 64];
    la_method method = ar.params.method == LA_METHOD_COUNT ? s->opts.method : ar.params.method;
    if (!la_method_is_blockwise(method) || method == LA_METHOD_BLOCK_REF) {
        snprintf(msg, sizeof msg,
                 "Method '%s' does not cache documents on their own; pre-warming needs lazy, "
                 "block or mepic.", la_method_name(method));
        la_api_request_fini(&ar);
        return la_server_send_status(s, conn, route, LA_ERR_INVALID_ARG, msg, "method", "invalid_value");
    }
    int32_t n = ar.params.n_docs;
    la_call **calls = calloc((size_t)n, sizeof *calls);
    if (!calls) {
        la_api_request_fini(&ar);
        return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
    }
    int32_t oldest = 0; /* first call not yet known to be done */
    int32_t failed_at = -1;
    for (int32_t d = 0; d < n && failed_at < 0; d++) {
        la_request_params p;
        la_request_params_init(&p);
        p.docs = &ar.docs[d];
        p.n_docs = 1;
        p.prompt.text = "\n";
        p.add_special = false;
        p.method = method;
        p.cache_salt = ar.params.cache_salt;
        p.sampling.max_tokens = 1;
        for (;;) {
            if (!(calls[d] = la_call_create(s))) {
                st = la_err_set(&err, LA_ERR_NO_MEMORY, "out of memory");
                break;
            }
            calls[d]->observe = false; /* not a request: not counted in /metrics */
            st = la_call_submit(calls[d], &p, &err);
            if (st == LA_OK) break;
            la_call_release(calls[d]);
            calls[d] = NULL;
            if (st != LA_ERR_BUSY || oldest == d) break;
            wait_done(calls[oldest++]); /* the queue is full of ours: let one finish */
        }
        if (st != LA_OK) failed_at = d;
    }
    /* wait for everything submitted (cancelling it all if one failed) */
    for (int32_t d = 0; d < n; d++) {
        if (!calls[d]) continue;
        if (failed_at >= 0) la_call_cancel(calls[d]);
        wait_done(calls[d]);
    }
    enum MHD_Result ret;
    if (failed_at >= 0) {
        char param[48];
        snprintf(param, sizeof param, "documents[%d]", failed_at);
        if (st == LA_ERR_CANCELLED)
            ret = la_server_send_fault(s, conn, route, LA_HTTP_FAULT_SHUTTING_DOWN, err.msg, NULL);
        else
            ret = la_server_send_status(s, conn, route, st, err.msg,
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
            for (int32_t d = 0; d < n; d++) {
                const la_request_stats *rs = &calls[d]->stats;
                cJSON *x = cJSON_CreateObject();
                cJSON_AddItemToArray(arr, x);
                cJSON_AddNumberToObject(x, "index", d);
                cJSON_AddNumberToObject(x, "tokens", rs->n_doc_tokens);
                cJSON_AddBoolToObject(x, "cached", rs->doc_tokens_reused >= rs->n_doc_tokens);
                cJSON_AddNumberToObject(x, "cached_tokens", (double)rs->doc_tokens_reused);
                total += rs->n_doc_tokens;
                cached_total += (double)rs->doc_tokens_reused;
            }
            cJSON_AddNumberToObject(o, "tokens", total);
            cJSON_AddNumberToObject(o, "cached_tokens", cached_total);
            char *json = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
            ret = la_server_send(s, conn, route, 200, "application/json", json);
        }
    }
    for (int32_t d = 0; d < n; d++) la_call_release(calls[d]);
    free(calls);
    la_api_request_fini(&ar);
    return ret;
}
