/* The bundled demo model through the chat API (src/server/ + the RAG template): answers to
 * questions of models/rag-tiny/eval/test.jsonl, sent concurrently over HTTP as chat
 * requests with their documents, equal the Hugging Face reference answers recorded in
 * models/rag-tiny/eval/hf_results.json (tools/demo/eval_hf.py): "block" (block-diagonal
 * mask, the Block-FT template of tools/demo/prompt.py) for lazy, "full" (causal) for
 * prefix. */
#include <pthread.h>

#include "base/file.h"
#include "server_util.h"

#define RAG_MODEL "models/rag-tiny"
#define N_QUESTIONS 12

typedef struct rag_call {
    int port;
    char *body;
    const char *want;
    char got[256];
    int status;
} rag_call;

static void *post_chat(void *arg) {
    rag_call *c = arg;
    la_http_resp r;
    if (la_http_request(c->port, "POST", "/v1/chat/completions", c->body, strlen(c->body), NULL, &r) != 0)
        return NULL;
    c->status = r.status;
    cJSON *j = cJSON_Parse(r.body);
    const cJSON *m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message");
    const cJSON *content = cJSON_GetObjectItem(m, "content");
    if (cJSON_IsString(content)) snprintf(c->got, sizeof c->got, "%s", content->valuestring);
    cJSON_Delete(j);
    la_http_resp_free(&r);
    return NULL;
}

static void rag_model(la_engine_options *eo, la_server_options *so) {
    (void)so;
    eo->model_dir = RAG_MODEL;
}

Test(server_rag_model, chat_answers_equal_the_hf_reference_under_lazy_and_prefix) {
    cr_assert(la_file_exists(RAG_MODEL "/model.safetensors") && la_file_exists(RAG_MODEL "/eval/hf_results.json"),
              RAG_MODEL ": the weights or the reference answers (part of the repository) are missing");
    char *text = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_file_read(RAG_MODEL "/eval/hf_results.json", &text, NULL, &err), err);
    cJSON *hf = cJSON_Parse(text);
    free(text);
    const cJSON *per_q = cJSON_GetObjectItem(hf, "per_question");
    cr_assert(cJSON_IsArray(per_q));
    LA_CHECK_OK(la_file_read(RAG_MODEL "/eval/test.jsonl", &text, NULL, &err), err);

    test_server t;
    ts_start(&t, rag_model);
    static const char *const methods[2] = {"lazy", "prefix"};
    static const char *const refs[2] = {"block", "full"}; /* hf_results.json keys */
    rag_call calls[2 * N_QUESTIONS];
    char *line = text;
    for (int q = 0; q < N_QUESTIONS; q++) {
        char *nl = strchr(line, '\n');
        cr_assert(nl);
        *nl = '\0';
        cJSON *ex = cJSON_Parse(line);
        line = nl + 1;
        const char *id = cJSON_GetObjectItem(ex, "id")->valuestring;
        const cJSON *ref = NULL;
        for (const cJSON *r = per_q->child; r && !ref; r = r->next)
            if (!strcmp(cJSON_GetObjectItem(r, "id")->valuestring, id)) ref = r;
        cr_assert(ref, "%s: no reference answer", id);
        for (int m = 0; m < 2; m++) {
            cJSON *body = cJSON_CreateObject();
            cJSON *msgs = cJSON_AddArrayToObject(body, "messages");
            cJSON *msg = cJSON_CreateObject();
            cJSON_AddStringToObject(msg, "role", "user");
            cJSON_AddStringToObject(msg, "content", cJSON_GetObjectItem(ex, "question")->valuestring);
            cJSON_AddItemToArray(msgs, msg);
            cJSON_AddItemToObject(body, "documents", cJSON_Duplicate(cJSON_GetObjectItem(ex, "documents"), 1));
            cJSON_AddNumberToObject(body, "max_tokens", 32);
            cJSON_AddStringToObject(body, "method", methods[m]);
            rag_call *c = &calls[m * N_QUESTIONS + q];
            *c = (rag_call){.port = t.port, .body = cJSON_PrintUnformatted(body),
                            .want = cJSON_GetObjectItem(ref, refs[m])->valuestring};
            cJSON_Delete(body);
        }
        cJSON_Delete(ex);
    }
    pthread_t th[2 * N_QUESTIONS];
    for (int i = 0; i < 2 * N_QUESTIONS; i++) pthread_create(&th[i], NULL, post_chat, &calls[i]);
    for (int i = 0; i < 2 * N_QUESTIONS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2 * N_QUESTIONS; i++) {
        cr_expect_eq(calls[i].status, 200);
        cr_expect_str_eq(calls[i].got, calls[i].want, "%s question %d: server '%s', HF '%s'",
                         methods[i / N_QUESTIONS], i % N_QUESTIONS, calls[i].got, calls[i].want);
        free(calls[i].body);
    }
    ts_stop(&t);
    cJSON_Delete(hf);
    free(text);
}
