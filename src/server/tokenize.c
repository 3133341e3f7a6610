/* POST /tokenize, POST /detokenize, POST /reset_prefix_cache, GET /version (routes.h), in
 * vLLM's request and response shapes:
 *
 *   /tokenize            {prompt | messages, documents?, method?, cache_salt?,
 *                        add_special_tokens?, return_token_strs?} -> {"count", "max_model_len", "tokens",
 *                        "token_strs": null | [string], "lazyattn": {"method", "documents":
 *                        [tokens of each document as the engine lays them out, a preamble
 *                        first], "first_document", "prompt_tokens"}}: the tokens a generation
 *                        request with these fields is computed from, documents first
 *   /detokenize          {tokens: [int]} -> {"prompt": text} (special tokens kept)
 *   /reset_prefix_cache  {} -> {"object": "reset_prefix_cache", "dropped_blocks": n}: every
 *                        cached KV block no running request holds leaves the cache, prefix
 *                        and document blocks alike (la_engine_reset_prefix_cache, which waits
 *                        for the engine's next step: on a thread of its own, so that no
 *                        HTTP worker thread waits)
 *   /version             -> {"version": "0.1.0"}
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/err.h"
#include "base/json.h"
#include "server/api_parse.h"
#include "server/api_response.h"
#include "server/respond.h"
#include "server/routes.h"
#include "server/conn.h"
#include "server/server_internal.h"

#ifndef LA_VERSION
#define LA_VERSION "unknown"
#endif

static char *print_json(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

enum MHD_Result la_server_handle_tokenize(la_server *s, struct MHD_Connection *conn, const char *route,
                                          const char *body, size_t len) {
    la_api_request ar;
    enum MHD_Result parse_ret;
    if (!la_server_parse_request(s, conn, route, LA_API_TOKENIZE, body, len, &ar, &parse_ret)) return parse_ret;
    if (ar.params.method == LA_METHOD_COUNT) ar.params.method = s->opts.method;
    la_request_tokens *t = NULL;
    la_err err = {0};
    la_status st = la_engine_tokenize_request(s->engine, &ar.params, &t, &err);
    bool strs = ar.return_token_strs, chat = ar.kind == LA_API_CHAT;
    la_method method = ar.params.method;
    la_api_request_fini(&ar);
    if (st != LA_OK) {
        char named[64];
        const char *param = la_server_error_param(st, err.msg, chat, named);
        return la_server_send_status(s, conn, route, st, err.msg, param, NULL);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", t->n_ids);
    cJSON_AddNumberToObject(o, "max_model_len", la_engine_max_context(s->engine));
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    for (int32_t i = 0; toks && i < t->n_ids; i++) cJSON_AddItemToArray(toks, cJSON_CreateNumber(t->ids[i]));
    if (strs) {
        cJSON *ss = cJSON_AddArrayToObject(o, "token_strs");
        for (int32_t i = 0; ss && i < t->n_ids; i++) cJSON_AddItemToArray(ss, la_api_token_string(s->engine, t->ids[i]));
    } else {
        cJSON_AddNullToObject(o, "token_strs");
    }
    cJSON *x = cJSON_AddObjectToObject(o, "lazyattn");
    if (x) {
        cJSON_AddStringToObject(x, "method", la_method_name(method));
        cJSON *docs = cJSON_AddArrayToObject(x, "documents");
        for (int32_t d = 0; docs && d < t->n_docs; d++) cJSON_AddItemToArray(docs, cJSON_CreateNumber(t->doc_lens[d]));
        cJSON_AddNumberToObject(x, "first_document", t->first_doc);
        cJSON_AddNumberToObject(x, "prompt_tokens", t->n_prompt);
    }
    la_request_tokens_free(t);
    return la_server_send(s, conn, route, 200, "application/json", print_json(o));
}

static enum MHD_Result bad_body(la_server *s, struct MHD_Connection *conn, const char *route, const char *param,
                                const char *code, const char *msg) {
    return la_server_send_status(s, conn, route, LA_ERR_INVALID_ARG, msg, param, code);
}

/* Whether body is not strict JSON (la_json_strict_check); then *ret is the 400 sent. */
static bool not_strict(la_server *s, struct MHD_Connection *conn, const char *route, const char *body, size_t len,
                       enum MHD_Result *ret) {
    char path[128], msg[256];
    const char *why = NULL;
    if (la_json_strict_check(body, len, path, sizeof path, &why)) return false;
    snprintf(msg, sizeof msg, "The request body is not valid JSON: %s%s%s%s.", why, path[0] ? " (at '" : "", path,
             path[0] ? "')" : "");
    *ret = la_server_send_status(s, conn, route, LA_ERR_INVALID_ARG, msg, path[0] ? path : NULL, "invalid_json");
    return true;
}

enum MHD_Result la_server_handle_detokenize(la_server *s, struct MHD_Connection *conn, const char *route,
                                            const char *body, size_t len) {
    enum MHD_Result strict_ret;
    if (not_strict(s, conn, route, body, len, &strict_ret)) return strict_ret;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return bad_body(s, conn, route, NULL, "invalid_json", "The request body must be a JSON object.");
    }
    enum MHD_Result ret;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    const char *bad = NULL;
    for (const cJSON *m = root->child; m && !bad; m = m->next)
        if (strcmp(m->string, "model") && strcmp(m->string, "tokens") && !la_api_unknown_ignored(&s->limits, m->string))
            bad = m->string;
    if (bad) {
        char msg[160];
        snprintf(msg, sizeof msg, "Unrecognized request argument supplied: '%.64s'.", bad);
        ret = bad_body(s, conn, route, bad, "unknown_parameter", msg);
    } else if (model && !cJSON_IsNull(model) && !cJSON_IsString(model)) {
        ret = bad_body(s, conn, route, "model", "invalid_type", "Invalid type for 'model': expected a string.");
    } else if (model && !cJSON_IsNull(model) && strcmp(model->valuestring, s->model_id)) {
        ret = la_server_send_model_not_found(s, conn, route, model->valuestring);
    } else if (!cJSON_IsArray(tokens)) {
        ret = bad_body(s, conn, route, "tokens", "invalid_type", "'tokens' must be an array of token ids.");
    } else {
        int32_t n = cJSON_GetArraySize(tokens), i = 0, V = la_engine_vocab_size(s->engine);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
        bool ok = ids != NULL;
        for (const cJSON *t = tokens->child; ok && t; t = t->next, i++) {
            ok = cJSON_IsNumber(t) && t->valuedouble >= 0 && t->valuedouble < V &&
                 t->valuedouble == (double)(int32_t)t->valuedouble;
            if (ok) ids[i] = (int32_t)t->valuedouble;
        }
        char *text = NULL;
        size_t tlen = 0;
        la_err err = {0};
        if (!ids) {
            ret = la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
        } else if (!ok) {
            char msg[120];
            snprintf(msg, sizeof msg, "tokens[%d] is not a token id in [0, %d).", (int)i - 1, V);
            ret = bad_body(s, conn, route, "tokens", "invalid_value", msg);
        } else if (la_engine_detokenize(s->engine, ids, n, false, &text, &tlen, &err) != LA_OK) {
            ret = la_server_send_status(s, conn, route, err.code, err.msg, "tokens", NULL);
        } else {
            /* the text as valid UTF-8 (decoding already replaced broken sequences) */
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "prompt", text);
            ret = la_server_send(s, conn, route, 200, "application/json", print_json(o));
        }
        free(text);
        free(ids);
    }
    cJSON_Delete(root);
    return ret;
}

/* A prefix-cache reset waits for the engine's next step: on a thread of its own
 * (la_server_offload), the connection parked meanwhile (la_server_defer). The answer then
 * waits for a task of the engine thread, which runs once that step has returned, so the
 * engine's stats (la_engine_get_stats) already say what the reset did when it arrives. */
typedef struct reset_job {
    la_server *s;
    const char *route;
    la_engine_task task;  /* the reset */
    la_engine_task after; /* nothing, between two steps after the reset's */
    int64_t dropped;
    la_status st;
    la_err err;
} reset_job;

static void reset_run(la_engine *e, void *arg) {
    reset_job *j = arg;
    j->st = la_engine_reset_prefix_cache(e, &j->dropped, &j->err);
}

static void after_step(la_engine *e, void *arg) {
    (void)e;
    (void)arg;
}

static void reset_free(void *state) {
    reset_job *j = state;
    la_server_task_finish(j->s, &j->task);
    la_server_task_finish(j->s, &j->after);
    free(j);
}

static enum MHD_Result reset_step(la_server *s, struct MHD_Connection *conn, void *state, bool *wait) {
    reset_job *j = state;
    if (!la_server_task_done(s, &j->task)) {
        *wait = true;
        return MHD_YES;
    }
    if (!j->after.queued) {
        la_server_task_finish(s, &j->task); /* joins its thread */
        j->after = (la_engine_task){.fn = after_step, .wake = j->task.wake};
        la_server_on_engine(s, &j->after);
    }
    if (!la_server_task_done(s, &j->after)) {
        *wait = true;
        return MHD_YES;
    }
    if (j->st != LA_OK) return la_server_send_status(s, conn, j->route, j->st, j->err.msg, NULL, NULL);
    if (s->opts.log_requests)
        fprintf(stderr, "lazyattn serve: prefix cache reset: %lld blocks dropped\n", (long long)j->dropped);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "reset_prefix_cache");
    cJSON_AddNumberToObject(o, "dropped_blocks", (double)j->dropped);
    return la_server_send(s, conn, j->route, 200, "application/json", print_json(o));
}

enum MHD_Result la_server_handle_reset_prefix_cache(la_server *s, struct MHD_Connection *conn, const char *route,
                                                    const char *body, size_t len) {
    la_conn *cc = la_conn_of(conn);
    if (!cc) /* no state for this connection (out of memory when it opened): cannot wait */
        return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
    enum MHD_Result strict_ret;
    if (len > 0 && not_strict(s, conn, route, body, len, &strict_ret)) return strict_ret;
    if (len > 0) { /* {} or nothing */
        cJSON *root = cJSON_ParseWithLength(body, len);
        bool empty = cJSON_IsObject(root) && !root->child;
        cJSON_Delete(root);
        if (!empty) return bad_body(s, conn, route, NULL, "invalid_value", "/reset_prefix_cache takes no arguments.");
    }
    reset_job *j = calloc(1, sizeof *j);
    la_err err = {0};
    if (!j) return la_server_send_status(s, conn, route, LA_ERR_NO_MEMORY, "out of memory", NULL, NULL);
    j->s = s;
    j->route = route;
    j->task = (la_engine_task){.fn = reset_run, .arg = j, .wake = cc};
    if (la_server_offload(s, &j->task, &err) != LA_OK) {
        free(j);
        return la_server_send_status(s, conn, route, err.code, err.msg, NULL, NULL);
    }
    return la_server_defer(s, conn, reset_step, j, reset_free);
}

enum MHD_Result la_server_handle_version(la_server *s, struct MHD_Connection *conn, const char *route,
                                         const char *body, size_t len) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", LA_VERSION);
    return la_server_send(s, conn, route, 200, "application/json", print_json(o));
}
