/* Operations on the engine's request records (request.h). */
#include "engine/request.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/token_mask.h"

void la_request_free(la_request *r) {
    if (!r) return;
    free(r->salt);
    for (int32_t i = 0; r->stop && i < r->sampling.n_stop; i++) free(r->stop[i]);
    free(r->stop);
    for (int32_t d = 0; r->doc_ids && d < r->n_docs; d++) free(r->doc_ids[d]);
    free(r->doc_ids);
    free(r->doc_len);
    free(r->tail);
    la_detok_destroy(r->detok);
    free(r->text);
    free(r->stop_ids);
    free(r->bias);
    free(r->allowed);
    free(r->allow_mask);
    free(r->json_schema);
    la_grammar_matcher_destroy(r->gm);
    free(r->probe_dev);
    free(r);
}

static void *dup_mem(const void *p, size_t n) {
    if (!p || !n) return NULL;
    void *d = malloc(n);
    if (d) memcpy(d, p, n);
    return d;
}

la_status la_request_copy_sampling(la_request *r, const la_sampling_params *p, int32_t n_vocab, la_err *err) {
    la_sampling_params *sp = &r->sampling;
    r->stop_ids = dup_mem(p->stop_token_ids, sizeof(int32_t) * (size_t)p->n_stop_token_ids);
    r->bias = dup_mem(p->logit_bias, sizeof(la_logit_bias) * (size_t)p->n_logit_bias);
    r->allowed = dup_mem(p->allowed_token_ids, sizeof(int32_t) * (size_t)p->n_allowed_token_ids);
    r->json_schema = p->json_schema ? strdup(p->json_schema) : NULL;
    sp->stop_token_ids = r->stop_ids;
    sp->logit_bias = r->bias;
    sp->allowed_token_ids = r->allowed;
    sp->json_schema = r->json_schema;
    if ((p->n_stop_token_ids && !r->stop_ids) || (p->n_logit_bias && !r->bias) ||
        (p->n_allowed_token_ids && !r->allowed) || (p->json_schema && !r->json_schema))
        return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    if (p->n_allowed_token_ids > 0 && n_vocab > 0) { /* (a clone copies the mask instead) */
        size_t words = ((size_t)n_vocab + 63) / 64;
        r->allow_mask_bytes = words * sizeof(uint64_t);
        r->allow_mask = calloc(words, sizeof(uint64_t));
        if (!r->allow_mask) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
        for (int32_t i = 0; i < p->n_allowed_token_ids; i++) {
            int32_t t = p->allowed_token_ids[i];
            r->allow_mask[t / 64] |= (uint64_t)1 << (t % 64);
        }
    }
    return LA_OK;
}

la_status la_request_clone(const la_request *r, la_request **out, la_err *err) {
    la_request *c = calloc(1, sizeof *c);
    if (!c) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    *c = *r;
    c->next = NULL;
    c->salt = NULL, c->stop = NULL, c->doc_ids = NULL, c->doc_len = NULL, c->tail = NULL;
    c->detok = NULL, c->text = NULL, c->stop_ids = NULL, c->bias = NULL, c->allowed = NULL;
    c->allow_mask = NULL, c->json_schema = NULL, c->gm = NULL;
    c->n_docs = 0;
    c->sampling.n_stop = 0;
    memset(&c->plan, 0, sizeof c->plan);
    bool ok = true;
    if (r->salt) ok = (c->salt = strdup(r->salt)) != NULL;
    if (ok && r->sampling.n_stop > 0) {
        ok = (c->stop = calloc((size_t)r->sampling.n_stop, sizeof(char *))) != NULL;
        for (int32_t i = 0; ok && i < r->sampling.n_stop; i++, c->sampling.n_stop = i)
            ok = (c->stop[i] = strdup(r->stop[i])) != NULL;
        if (ok) c->sampling.n_stop = r->sampling.n_stop;
    }
    c->sampling.stop = (const char *const *)c->stop;
    if (ok && r->n_docs > 0) {
        ok = (c->doc_ids = calloc((size_t)r->n_docs, sizeof(int32_t *))) != NULL &&
             (c->doc_len = dup_mem(r->doc_len, sizeof(int32_t) * (size_t)r->n_docs)) != NULL;
        for (int32_t d = 0; ok && d < r->n_docs; d++, c->n_docs = d)
            ok = (c->doc_ids[d] = dup_mem(r->doc_ids[d], sizeof(int32_t) * (size_t)r->doc_len[d])) != NULL;
        if (ok) c->n_docs = r->n_docs;
    }
    if (ok) ok = (c->tail = dup_mem(r->tail, sizeof(int32_t) * (size_t)r->tail_cap)) != NULL;
    if (ok && r->text) ok = (c->text = dup_mem(r->text, r->text_cap)) != NULL;
    if (ok) {
        la_sampling_params p = r->sampling;
        ok = la_request_copy_sampling(c, &p, 0, err) == LA_OK;
        if (ok && r->allow_mask) ok = (c->allow_mask = dup_mem(r->allow_mask, r->allow_mask_bytes)) != NULL;
    }
    if (!ok) {
        la_request_free(c);
        return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    }
    *out = c;
    return LA_OK;
}

/* Append ids[0:n] to the request's tail. */
la_status la_request_tail_append(la_request *r, const int32_t *ids, int32_t n, la_err *err) {
    if (n <= 0) return LA_OK; /* an empty prompt: no memcpy from or to NULL */
    if (r->n_tail + n > r->tail_cap) {
        int32_t cap = r->tail_cap ? r->tail_cap : 64;
        while (cap < r->n_tail + n) cap *= 2;
        int32_t *p = realloc(r->tail, sizeof(int32_t) * (size_t)cap);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
        r->tail = p;
        r->tail_cap = cap;
    }
    memcpy(r->tail + r->n_tail, ids, sizeof(int32_t) * (size_t)n);
    r->n_tail += n;
    return LA_OK;
}

void la_request_list_remove(la_request **head, la_request **tail, la_request *r) {
    la_request *prev = NULL;
    for (la_request *x = *head; x; prev = x, x = x->next)
        if (x == r) {
            if (prev) prev->next = r->next;
            else *head = r->next;
            if (*tail == r) *tail = prev;
            r->next = NULL;
            return;
        }
}

void la_request_list_push(la_request **head, la_request **tail, la_request *r) {
    r->next = NULL;
    if (*tail) (*tail)->next = r;
    else *head = r;
    *tail = r;
}
