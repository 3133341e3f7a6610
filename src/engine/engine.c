/* The engine: requests, the continuous-batching scheduler, document jobs, sampling and
 * streaming text (include/lazyattn/lazyattn.h).
 *
 * ---- One step --------------------------------------------------------------------------
 *   1. intake    move submitted requests and cancellations from the thread-safe inbox
 *   2. admit     plan waiting requests in FIFO order (kv/plan.c): cached document blocks
 *                are pinned, missing ones allocated and indexed in flight; each document
 *                this plan must compute becomes a document job shared by every request
 *                that needs it. A plan that does not fit waits (LA_ERR_NO_SPACE).
 *   3. pack      under max_batch_tokens: one decode row per generating request (growing
 *                its tail by a block when needed, preempting the newest request if the
 *                pool is full), then chunks of document jobs, then chunks of tail prefill
 *                of requests whose documents are ready (BLOCK copies are made first)
 *   4. forward   one la_forward over every packed sequence
 *   5. finish    jobs that completed mark their blocks ready; prefill that completed and
 *                decode rows sample a token, stream text, check eos / stop / length
 *
 * Preemption is by recompute: the victim's plan is released (cached documents stay in
 * the cache, unpinned) and it returns to the head of the queue with its generated tokens
 * appended to its prompt, so resuming continues exactly where it stopped.
 */
#include "lazyattn/lazyattn.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "base/err.h"
#include "base/timer.h"
#include "engine/request.h"
#include "engine/sampling.h"
#include "kv/block_pool.h"
#include "kv/plan.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/prompt_template.h"
#include "model/tokenizer.h"
#include "model/weights.h"

struct la_engine {
    la_engine_options opts;
    char *model_dir, *model_name;
    la_model_config cfg;
    la_weights *weights;
    la_tokenizer *tok;
    la_backend *be;
    la_kv_pool *pool;
    int32_t max_context;
    int64_t kv_blocks;     /* pool capacity, fixed at create (read by submitting threads) */

    /* shared with submitting threads (mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    la_request *inbox_head, *inbox_tail;
    uint64_t *cancel_ids;
    int32_t n_cancel, cancel_cap;
    uint64_t next_id;
    int64_t n_queued;      /* inbox + waiting (for max_queue) */
    int64_t n_live;        /* every request not yet finished */
    la_engine_stats stats; /* snapshot, refreshed after each step */

    /* engine thread only */
    la_request *waiting_head, *waiting_tail;
    la_request *running_head, *running_tail; /* admission order */
    la_doc_job *jobs_head, *jobs_tail;
    void *sample_scratch;
};

/* ============================================================ small helpers ========== */

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

#define VEC_PUSH(vec, n, cap, val)                                                          \
    do {                                                                                    \
        if ((n) == (cap)) {                                                                 \
            int64_t nc_ = (cap) ? 2 * (cap) : 64;                                           \
            void *np_ = realloc((vec), sizeof(*(vec)) * (size_t)nc_);                       \
            if (!np_) goto oom;                                                             \
            (vec) = np_;                                                                    \
            (cap) = nc_;                                                                    \
        }                                                                                   \
        (vec)[(n)++] = (val);                                                               \
    } while (0)

/* ============================================================ options, create ======== */

/* Upper bound on a pool sized automatically (16M tokens at block size 16): a tiny model on a
 * large GPU would otherwise get millions of blocks of host-side bookkeeping. */
#define LA_KV_MAX_AUTO_BLOCKS ((int64_t)1 << 20)

void la_engine_options_init(la_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->device = LA_DEVICE_CPU;
    o->block_size = 16;
    o->gpu_memory_fraction = 0.8;
    o->method = LA_METHOD_LAZY;
    o->max_batch_tokens = 1024;
    o->max_running = 64;
    o->max_queue = 256;
    o->max_docs = 128;
}

void la_request_params_init(la_request_params *p) {
    memset(p, 0, sizeof *p);
    p->method = LA_METHOD_COUNT;
    p->add_special = true;
    p->sampling.temperature = 0.0f;
    p->sampling.top_p = 1.0f;
    p->sampling.max_tokens = 16;
}

static la_status check_options(const la_engine_options *o, la_err *err) {
    if ((!o->model_dir || !*o->model_dir) && !o->random_weights)
        return la_err_set(err, LA_ERR_INVALID_ARG, "engine: model_dir is required");
    if (o->block_size < 1 || o->block_size > 1024)
        return la_err_set(err, LA_ERR_INVALID_ARG, "block_size=%d must be in [1, 1024]", o->block_size);
    if (o->kv_blocks < 0 || o->kv_bytes < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "KV capacity must be >= 0");
    if (!(o->gpu_memory_fraction > 0.0 && o->gpu_memory_fraction <= 1.0))
        return la_err_set(err, LA_ERR_INVALID_ARG, "gpu_memory_fraction=%g must be in (0, 1]",
                          o->gpu_memory_fraction);
    if ((unsigned)o->method >= LA_METHOD_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "engine: unknown default method %d", (int)o->method);
    if (o->max_batch_tokens < 1 || o->max_running < 1 || o->max_queue < 1 || o->max_docs < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "max_batch_tokens, max_running and max_queue must be >= 1");
    if (o->max_context < 0) return la_err_set(err, LA_ERR_INVALID_ARG, "max_context must be >= 0");
    return LA_OK;
}

/* Model name for responses: the directory's base name, or "random-<shape>". */
static char *model_name_of(const la_engine_options *o) {
    char buf[256];
    if (o->random_weights) {
        snprintf(buf, sizeof buf, "random-%s", o->random_weights);
        return dup_str(buf);
    }
    snprintf(buf, sizeof buf, "%s", o->model_dir);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
    const char *slash = strrchr(buf, '/');
    return dup_str(slash && slash[1] ? slash + 1 : buf);
}

la_status la_engine_create(const la_engine_options *o, la_engine **out, la_err *err) {
    LA_TRY(check_options(o, err));
    la_engine *e = calloc(1, sizeof *e);
    if (!e) return la_err_set(err, LA_ERR_NO_MEMORY, "engine: out of memory");
    e->opts = *o;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->next_id = 1;
    e->model_dir = o->model_dir ? dup_str(o->model_dir) : NULL;
    e->model_name = model_name_of(o);
    e->opts.model_dir = e->model_dir;
    e->opts.random_weights = e->opts.tokenizer_dir = NULL; /* borrowed: not kept */
    la_status s = e->model_name ? LA_OK : la_err_set(err, LA_ERR_NO_MEMORY, "engine: out of memory");
    const char *tok_dir = o->tokenizer_dir ? o->tokenizer_dir : o->model_dir;
    if (o->random_weights) {
        if (s == LA_OK) s = la_model_config_preset(o->random_weights, &e->cfg, err);
        if (s == LA_OK && tok_dir) s = la_tokenizer_load(tok_dir, &e->tok, err);
    } else {
        if (s == LA_OK) s = la_model_config_load(o->model_dir, &e->cfg, err);
        if (s == LA_OK) s = la_tokenizer_load(tok_dir, &e->tok, err);
        if (s == LA_OK) s = la_weights_load(o->model_dir, &e->cfg, &e->weights, err);
    }
    if (s == LA_OK) s = la_backend_create(o->device, o->n_threads, &e->be, err);
    /* weights NULL: the backend initialises random weights of cfg's shape */
    if (s == LA_OK) s = e->be->ops->load_weights(e->be, &e->cfg, e->weights, err);
    if (s == LA_OK) {
        int64_t n_blocks = o->kv_blocks;
        if (n_blocks == 0) {
            /* kv_bytes, else gpu_memory_fraction of the device memory the weights left free
             * (the rest holds activations, cuBLAS workspace, CUDA graphs), else 1 GiB */
            int64_t bytes = o->kv_bytes, free_b = 0;
            if (!bytes && e->be->ops->mem_free_bytes) free_b = e->be->ops->mem_free_bytes(e->be);
            if (!bytes) bytes = free_b > 0 ? (int64_t)(o->gpu_memory_fraction * (double)free_b)
                                           : (int64_t)1 << 30;
            n_blocks = bytes / e->be->ops->kv_block_bytes(e->be, o->block_size);
            int64_t cap = free_b > 0 ? LA_KV_MAX_AUTO_BLOCKS : (int64_t)1 << 24;
            if (n_blocks > cap) n_blocks = cap;
        }
        if (n_blocks < 1)
            s = la_err_set(err, LA_ERR_INVALID_ARG, "KV pool: %lld bytes hold no block",
                           (long long)o->kv_bytes);
        if (s == LA_OK) s = la_kv_pool_create(n_blocks, o->block_size, &e->pool, err);
        e->kv_blocks = n_blocks;
        e->stats.kv_blocks_total = n_blocks;
        e->stats.kv_blocks_free = n_blocks;
        e->stats.block_size = o->block_size;
        if (s == LA_OK) s = e->be->ops->kv_alloc(e->be, n_blocks, o->block_size, err);
    }
    if (s == LA_OK) {
        if (o->max_context > 0 && e->cfg.max_position_embeddings > 0 &&
            o->max_context > e->cfg.max_position_embeddings)
            s = la_err_set(err, LA_ERR_INVALID_ARG,
                           "max_context=%d exceeds the model's max_position_embeddings=%lld",
                           o->max_context, (long long)e->cfg.max_position_embeddings);
        int64_t mc = o->max_context ? o->max_context : e->cfg.max_position_embeddings;
        if (mc <= 0 || mc > INT32_MAX - 1) mc = INT32_MAX - 1;
        e->max_context = (int32_t)mc;
        int32_t v = e->cfg.vocab_size;
        e->sample_scratch = malloc((size_t)v * (sizeof(float) + sizeof(int32_t)));
        if (!e->sample_scratch) s = la_err_set(err, LA_ERR_NO_MEMORY, "engine: out of memory");
    }
    if (s != LA_OK) {
        la_engine_destroy(e);
        return s;
    }
    *out = e;
    return LA_OK;
}

/* ============================================================ submit ================= */

static void request_free(la_request *r) {
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
    free(r);
}

static int32_t bos_id(const la_engine *e) {
    return e->tok ? la_tokenizer_bos_id(e->tok) : e->cfg.bos_id;
}

static bool tok_adds_bos(const la_engine *e) {
    return e->tok && la_tokenizer_adds_bos(e->tok) && bos_id(e) >= 0;
}

/* Tokenize one segment (text or ids). *ids is heap memory the caller frees. */
static la_status encode_segment(const la_engine *e, const la_segment *seg, bool add_special,
                                const char *what, int32_t **ids, int32_t *n, la_err *err) {
    if (seg->ids) {
        int32_t v = e->cfg.vocab_size;
        for (int32_t i = 0; i < seg->n_ids; i++)
            if (seg->ids[i] < 0 || seg->ids[i] >= v)
                return la_err_set(err, LA_ERR_INVALID_ARG, "%s: token id %d at %d outside [0, %d)",
                                  what, seg->ids[i], i, v);
        int32_t extra = add_special && tok_adds_bos(e) ? 1 : 0;
        int32_t *p = malloc(sizeof(int32_t) * (size_t)(seg->n_ids + extra + 1));
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", what);
        if (extra) p[0] = bos_id(e);
        memcpy(p + extra, seg->ids, sizeof(int32_t) * (size_t)seg->n_ids);
        *ids = p;
        *n = seg->n_ids + extra;
        return LA_OK;
    }
    if (!e->tok)
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "%s: this engine has no tokenizer (random weights): give token ids", what);
    const char *text = seg->text ? seg->text : "";
    size_t len = seg->len ? seg->len : strlen(text);
    la_status s = la_tokenizer_encode(e->tok, text, len, add_special, ids, n, err);
    if (s != LA_OK) la_err_prefix(err, "%s", what);
    return s;
}

static bool segment_given(const la_segment *s) {
    return s->ids ? s->n_ids > 0 : (s->text && (s->len > 0 || s->text[0]));
}

/* Append ids[0:n] to the request's tail. */
static la_status tail_append(la_request *r, const int32_t *ids, int32_t n, la_err *err) {
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

/* Build a request's token segments (see la_engine_submit in the public header). */
static la_status build_tokens(la_engine *e, const la_request_params *p, la_request *r, la_err *err) {
    bool blockwise = la_method_is_blockwise(r->method);
    bool has_pre = segment_given(&p->preamble);
    bool bos_doc = p->add_special && !has_pre && p->n_docs > 0 && tok_adds_bos(e);
    int32_t n_segs = (has_pre || bos_doc ? 1 : 0) + p->n_docs;
    r->doc_ids = calloc((size_t)(n_segs ? n_segs : 1), sizeof(int32_t *));
    r->doc_len = calloc((size_t)(n_segs ? n_segs : 1), sizeof(int32_t));
    if (!r->doc_ids || !r->doc_len) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    int32_t k = 0;
    if (has_pre) {
        LA_TRY(encode_segment(e, &p->preamble, p->add_special, "preamble", &r->doc_ids[0], &r->doc_len[0], err));
        if (r->doc_len[0] == 0) return la_err_set(err, LA_ERR_INVALID_ARG, "preamble: no tokens");
        k = 1;
    } else if (bos_doc) {
        r->doc_ids[0] = malloc(sizeof(int32_t));
        if (!r->doc_ids[0]) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
        r->doc_ids[0][0] = bos_id(e);
        r->doc_len[0] = 1;
        k = 1;
    }
    r->n_docs = k; /* request_free sees what exists so far */
    for (int32_t d = 0; d < p->n_docs; d++, k++) {
        char what[48];
        snprintf(what, sizeof what, "documents[%d]", d);
        la_segment doc = p->docs[d];
        char *rendered = NULL;
        if (doc.title && !doc.ids) { /* titled document: the RAG template's block */
            if (!(rendered = la_prompt_render_document(&doc)))
                return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
            doc = (la_segment){.text = rendered};
        }
        la_status s = encode_segment(e, &doc, false, what, &r->doc_ids[k], &r->doc_len[k], err);
        free(rendered);
        LA_TRY(s);
        r->n_docs = k + 1;
        if (r->doc_len[k] == 0)
            return la_err_set(err, LA_ERR_INVALID_ARG, "documents[%d] is empty (no tokens)", d);
    }
    for (int32_t d = 0; d < r->n_docs; d++) r->n_doc_tokens += r->doc_len[d];

    int32_t *ids = NULL, n = 0;
    LA_TRY(encode_segment(e, &p->prompt, p->add_special && n_segs == 0, "prompt", &ids, &n, err));
    if (!blockwise) { /* the documents go inside the prompt */
        for (int32_t d = 0; d < r->n_docs; d++) {
            la_status s = tail_append(r, r->doc_ids[d], r->doc_len[d], err);
            if (s != LA_OK) {
                free(ids);
                return s;
            }
        }
    }
    la_status s = tail_append(r, ids, n, err);
    free(ids);
    LA_TRY(s);
    if (!blockwise) {
        for (int32_t d = 0; d < r->n_docs; d++) free(r->doc_ids[d]);
        r->n_docs = 0;
    }
    r->n_prompt = r->n_tail;
    if (r->n_tail == 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "prompt: no tokens after the documents");
    return LA_OK;
}

/* Blocks a request needs at its largest (documents, BLOCK copies, tail + max_tokens). */
static int64_t blocks_needed(const la_engine *e, const la_request *r) {
    int32_t B = e->opts.block_size;
    int64_t n = ceil_div(r->n_tail + r->sampling.max_tokens, B);
    for (int32_t d = 0; d < r->n_docs; d++)
        n += (int64_t)ceil_div(r->doc_len[d], B) * (r->method == LA_METHOD_BLOCK ? 2 : 1);
    return n;
}

la_status la_engine_submit(la_engine *e, const la_request_params *p, uint64_t *request_id,
                           la_err *err) {
    LA_TRY(la_sampling_params_check(&p->sampling, err));
    if (p->n_docs < 0 || (p->n_docs > 0 && !p->docs))
        return la_err_set(err, LA_ERR_INVALID_ARG, "documents: bad list");
    if (p->n_docs > e->opts.max_docs)
        return la_err_set(err, LA_ERR_INVALID_ARG, "%d documents exceed the limit of %d", p->n_docs,
                          e->opts.max_docs);
    la_method method = p->method == LA_METHOD_COUNT ? e->opts.method : p->method;
    if ((unsigned)method >= LA_METHOD_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "unknown method %d", (int)p->method);

    la_request *r = calloc(1, sizeof *r);
    if (!r) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    r->method = method;
    r->sampling = p->sampling;
    r->on_event = p->on_event;
    r->user = p->user;
    r->return_logits = p->return_logits;
    r->t_submit = la_now_ms();
    la_status s = LA_OK;
    if (p->cache_salt && !(r->salt = dup_str(p->cache_salt)))
        s = la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    if (s == LA_OK && p->sampling.n_stop > 0) {
        r->stop = calloc((size_t)p->sampling.n_stop, sizeof(char *));
        if (!r->stop) s = la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
        for (int32_t i = 0; s == LA_OK && i < p->sampling.n_stop; i++) {
            if (!(r->stop[i] = dup_str(p->sampling.stop[i])))
                s = la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
            else if (strlen(r->stop[i]) > r->max_stop_len)
                r->max_stop_len = strlen(r->stop[i]);
        }
    }
    r->sampling.stop = (const char *const *)r->stop;
    if (s == LA_OK && p->n_messages > 0) {
        /* chat: render the conversation (and the RAG template around documents) to text
         * blocks, then tokenize them like a raw request whose text carries the specials */
        la_rendered_prompt rendered;
        la_chat_format fmt = p->chat_format ? p->chat_format : la_chat_format_detect(e->tok);
        if (!e->tok)
            s = la_err_set(err, LA_ERR_INVALID_ARG, "chat messages need a tokenizer");
        else if (segment_given(&p->prompt) || segment_given(&p->preamble) || !p->messages)
            s = la_err_set(err, LA_ERR_INVALID_ARG, "give either messages or prompt/preamble, not both");
        if (s == LA_OK)
            s = la_prompt_render(fmt, p->messages, p->n_messages, p->docs, p->n_docs, &rendered, err);
        if (s == LA_OK) {
            la_segment *docs = calloc((size_t)(rendered.n_docs ? rendered.n_docs : 1), sizeof(la_segment));
            if (!docs) s = la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
            for (int32_t d = 0; docs && d < rendered.n_docs; d++) docs[d].text = rendered.docs[d];
            la_request_params q = *p;
            q.preamble = (la_segment){.text = rendered.preamble};
            q.prompt = (la_segment){.text = rendered.tail};
            q.docs = docs;
            q.n_docs = rendered.n_docs;
            q.add_special = false; /* the template writes <|begin_of_text|> itself */
            if (s == LA_OK) s = build_tokens(e, &q, r, err);
            free(docs);
            la_rendered_prompt_free(&rendered);
        }
    } else if (s == LA_OK) {
        s = build_tokens(e, p, r, err);
    }
    if (s == LA_OK) {
        int64_t total = (int64_t)r->n_doc_tokens * la_method_is_blockwise(method) + r->n_tail +
                        r->sampling.max_tokens;
        if (total > e->max_context)
            s = la_err_set(err, LA_ERR_TOO_LONG,
                           "prompt and documents (%lld tokens) plus max_tokens (%d) exceed the "
                           "context of %d tokens",
                           (long long)(total - r->sampling.max_tokens), r->sampling.max_tokens,
                           e->max_context);
    }
    if (s == LA_OK) {
        int64_t need = blocks_needed(e, r);
        if (need > e->kv_blocks)
            s = la_err_set(err, LA_ERR_TOO_LONG,
                           "request needs %lld KV blocks but the pool holds %lld", (long long)need,
                           (long long)e->kv_blocks);
    }
    if (s == LA_OK && e->tok) s = la_detok_create(e->tok, true, &r->detok, err);
    if (s != LA_OK) {
        request_free(r);
        return s;
    }
    la_rng_seed(&r->rng, p->sampling.seed);
    r->stats.n_doc_tokens = r->n_doc_tokens;
    r->stats.n_prompt_tokens = r->n_tail + (la_method_is_blockwise(method) ? r->n_doc_tokens : 0);

    pthread_mutex_lock(&e->mu);
    if (e->n_queued >= e->opts.max_queue) {
        pthread_mutex_unlock(&e->mu);
        request_free(r);
        return la_err_set(err, LA_ERR_BUSY, "queue full: %d requests waiting", e->opts.max_queue);
    }
    uint64_t id = r->id = e->next_id++; /* r may be finished and freed once unlocked */
    if (e->inbox_tail) e->inbox_tail->next = r;
    else e->inbox_head = r;
    e->inbox_tail = r;
    e->n_queued++;
    e->n_live++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (request_id) *request_id = id;
    return LA_OK;
}

la_status la_engine_cancel(la_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    bool live = id > 0 && id < e->next_id;
    if (live && e->n_cancel == e->cancel_cap) {
        int32_t cap = e->cancel_cap ? 2 * e->cancel_cap : 16;
        uint64_t *p = realloc(e->cancel_ids, sizeof(uint64_t) * (size_t)cap);
        if (!p) live = false;
        else {
            e->cancel_ids = p;
            e->cancel_cap = cap;
        }
    }
    if (live) e->cancel_ids[e->n_cancel++] = id;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return live ? LA_OK : LA_ERR_NOT_FOUND;
}

/* ============================================================ events ================= */

static void emit(la_request *r, const la_event *ev) {
    if (r->on_event) r->on_event(r->user, ev);
}

static void list_remove(la_request **head, la_request **tail, la_request *r) {
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

static void list_push(la_request **head, la_request **tail, la_request *r) {
    r->next = NULL;
    if (*tail) (*tail)->next = r;
    else *head = r;
    *tail = r;
}

/* Finish a request: release its blocks (indexing computed tail blocks first), emit DONE
 * with any text still held, count it, free it. r must already be unlinked. */
static void finish(la_engine *e, la_request *r, la_finish_reason why, la_status status,
                   const char *msg) {
    if (r->state != LA_REQ_WAITING) {
        if (why != LA_FINISH_ERROR) la_plan_register_tail(&r->plan, e->pool, r->tail, r->n_computed);
        la_plan_release(&r->plan, e->pool);
    }
    double now = la_now_ms();
    r->stats.e2e_ms = now - r->t_submit;
    r->stats.n_generated = r->n_generated;
    if (r->n_generated > 1) r->stats.tpot_ms = (r->t_last - r->t_first) / (r->n_generated - 1);
    /* text held back for stop strings (or an incomplete character) goes out now */
    const char *tail_text = "";
    size_t tail_len = 0;
    if (why == LA_FINISH_LENGTH || why == LA_FINISH_STOP) {
        tail_text = r->text ? r->text + r->emitted : "";
        tail_len = r->text ? r->text_len - r->emitted : 0;
    }
    /* counters first, so /metrics and la_engine_get_stats agree with the answer the client
     * receives with DONE */
    la_kv_pool_stats ps = la_kv_pool_get_stats(e->pool);
    pthread_mutex_lock(&e->mu);
    if (why == LA_FINISH_ERROR) e->stats.requests_error++;
    else if (why == LA_FINISH_CANCELLED) e->stats.requests_cancelled++;
    else e->stats.requests_ok++;
    e->stats.doc_tokens_reused += r->stats.doc_tokens_reused;
    e->stats.doc_tokens_computed += r->stats.doc_tokens_computed;
    e->stats.prefix_tokens_reused += r->stats.prefix_tokens_reused;
    e->stats.prompt_tokens += r->stats.n_prompt_tokens;
    e->stats.kv_blocks_free = ps.n_free;
    e->stats.kv_blocks_cached = ps.n_cached;
    e->stats.kv_blocks_pinned = ps.n_pinned;
    e->n_live--;
    pthread_mutex_unlock(&e->mu);
    la_event ev = {.request_id = r->id, .kind = LA_EVENT_DONE, .text = tail_text,
                   .text_len = tail_len, .finish = why, .status = status,
                   .error = msg ? msg : "", .stats = &r->stats};
    emit(r, &ev);
    request_free(r);
}

static void finish_waiting(la_engine *e, la_request *r, la_finish_reason why, la_status s,
                           const char *msg) {
    pthread_mutex_lock(&e->mu);
    e->n_queued--;
    pthread_mutex_unlock(&e->mu);
    finish(e, r, why, s, msg);
}

/* ============================================================ text and stopping ====== */

static la_status text_append(la_request *r, const char *s, size_t n) {
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + n + 1) cap *= 2;
        char *p = realloc(r->text, cap);
        if (!p) return LA_ERR_NO_MEMORY;
        r->text = p;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = '\0';
    return LA_OK;
}

/* Earliest occurrence of any stop string in text[from:], or -1. */
static long find_stop(const la_request *r, size_t from) {
    long best = -1;
    for (int32_t i = 0; i < r->sampling.n_stop; i++) {
        const char *hit = strstr(r->text + from, r->stop[i]);
        if (hit && (best < 0 || hit - r->text < best)) best = hit - r->text;
    }
    return best;
}

/* Handle one sampled token: stream its text, decide whether the request is done.
 * Returns the finish reason (NONE: keep going). */
static la_finish_reason accept_token(la_engine *e, la_request *r, int32_t token,
                                     const float *logits) {
    double now = la_now_ms();
    if (r->n_generated == 0) {
        r->t_first = now;
        r->stats.ttft_ms = now - r->t_submit;
    }
    r->t_last = now;
    r->n_generated++;
    r->stats.n_generated = r->n_generated;
    la_err err;
    if (tail_append(r, &token, 1, &err) != LA_OK) return LA_FINISH_ERROR;
    if (!r->sampling.ignore_eos &&
        (la_model_config_is_eos(&e->cfg, token) || (e->tok && token == la_tokenizer_eos_id(e->tok)))) {
        const char *piece;
        size_t n;
        if (r->detok && la_detok_flush(r->detok, &piece, &n, &err) == LA_OK) text_append(r, piece, n);
        return LA_FINISH_STOP;
    }
    const char *piece = "";
    size_t n = 0;
    if (r->detok && la_detok_push(r->detok, token, &piece, &n, &err) != LA_OK) return LA_FINISH_ERROR;
    if (text_append(r, piece, n) != LA_OK) return LA_FINISH_ERROR;
    bool last = r->n_generated >= r->sampling.max_tokens ||
                r->plan.tail_start + r->n_tail >= e->max_context;
    if (last && r->detok) { /* bytes of an unfinished character become U+FFFD */
        if (la_detok_flush(r->detok, &piece, &n, &err) != LA_OK) return LA_FINISH_ERROR;
        if (text_append(r, piece, n) != LA_OK) return LA_FINISH_ERROR;
    }
    la_finish_reason why = LA_FINISH_NONE;
    size_t end = r->text_len;
    if (r->sampling.n_stop > 0) {
        size_t from = r->emitted > r->max_stop_len ? r->emitted - r->max_stop_len : 0;
        long at = find_stop(r, from);
        if (at >= 0) {
            r->text_len = (size_t)at;
            r->text[at] = '\0';
            end = (size_t)at;
            why = LA_FINISH_STOP;
        } else if (!last) {
            /* hold back what could still become a stop string, on a character boundary */
            size_t hold = r->max_stop_len - 1;
            end = r->text_len > r->emitted + hold ? r->text_len - hold : r->emitted;
            while (end > r->emitted && (r->text[end] & 0xC0) == 0x80) end--;
        }
    }
    if (why == LA_FINISH_NONE && last) why = LA_FINISH_LENGTH;
    if (why != LA_FINISH_NONE) end = r->text_len; /* all remaining text goes out now */
    la_event ev = {.request_id = r->id, .kind = LA_EVENT_TOKEN, .token_id = token,
                   .text = r->text ? r->text + r->emitted : "", .text_len = end - r->emitted,
                   .logits = r->return_logits ? logits : NULL,
                   .n_vocab = e->cfg.vocab_size, .stats = &r->stats};
    r->emitted = end;
    emit(r, &ev);
    return why;
}

/* ============================================================ admission ============== */

static la_status start_jobs(la_engine *e, la_request *r, la_err *err) {
    int32_t B = e->opts.block_size;
    for (int32_t d = 0; d < r->plan.n_docs; d++) {
        const la_plan_doc *doc = &r->plan.docs[d];
        if (!doc->compute) continue;
        la_doc_job *j = calloc(1, sizeof *j);
        int32_t *ids = j ? malloc(sizeof(int32_t) * (size_t)doc->n_blocks) : NULL;
        int32_t *tok = j ? malloc(sizeof(int32_t) * (size_t)doc->n_tokens) : NULL;
        if (!j || !ids || !tok) {
            free(j);
            free(ids);
            free(tok);
            return la_err_set(err, LA_ERR_NO_MEMORY, "document job: out of memory");
        }
        j->method = r->method;
        j->doc = *doc;
        j->doc.copy_ids = NULL;
        memcpy(ids, doc->block_ids, sizeof(int32_t) * (size_t)doc->n_blocks);
        j->doc.block_ids = ids;
        memcpy(tok, r->doc_ids[d], sizeof(int32_t) * (size_t)doc->n_tokens);
        j->tokens = tok;
        j->from = doc->n_reused * B;
        for (int32_t b = 0; b < doc->n_blocks; b++) la_kv_pool_ref(e->pool, ids[b]);
        if (e->jobs_tail) e->jobs_tail->next = j;
        else e->jobs_head = j;
        e->jobs_tail = j;
    }
    return LA_OK;
}

static void job_free(la_engine *e, la_doc_job *j, bool computed) {
    for (int32_t b = j->doc.n_blocks - 1; b >= 0; b--) {
        int32_t id = j->doc.block_ids[b];
        if (b >= j->doc.n_reused) {
            if (computed) la_kv_pool_mark_ready(e->pool, id);
            else la_kv_pool_unregister(e->pool, id);
        }
        la_kv_pool_unpin(e->pool, id);
    }
    free(j->doc.block_ids);
    free(j->tokens);
    free(j);
}

static la_status admit(la_engine *e, la_request *r, la_err *err) {
    la_plan_input_doc *docs = malloc(sizeof(la_plan_input_doc) * (size_t)(r->n_docs ? r->n_docs : 1));
    if (!docs) return la_err_set(err, LA_ERR_NO_MEMORY, "admit: out of memory");
    for (int32_t d = 0; d < r->n_docs; d++) docs[d] = (la_plan_input_doc){r->doc_ids[d], r->doc_len[d]};
    la_status s = la_plan_create(e->pool, r->method, r->salt, docs, r->n_docs, r->tail, r->n_tail,
                                 &r->plan, err);
    free(docs);
    LA_TRY(s);
    s = start_jobs(e, r, err);
    if (s != LA_OK) {
        la_plan_release(&r->plan, e->pool);
        return s;
    }
    if (r->stats.n_preemptions == 0) { /* reuse is counted once, at the first plan */
        r->stats.doc_tokens_reused = r->plan.doc_tokens_reused;
        r->stats.doc_tokens_computed = r->plan.doc_tokens_computed;
        r->stats.prefix_tokens_reused = r->plan.tail_tokens_reused;
        if (r->method == LA_METHOD_RECOMPUTE || r->method == LA_METHOD_PREFIX) {
            /* documents are part of one prompt here: the ones prefix caching did not serve
             * (reused ones are counted in prefix_tokens_reused only) */
            int64_t served = r->plan.tail_tokens_reused < r->n_doc_tokens ? r->plan.tail_tokens_reused
                                                                           : r->n_doc_tokens;
            r->stats.doc_tokens_computed = r->n_doc_tokens - served;
        }
    }
    r->n_plan_tail = r->n_tail;
    r->n_computed = r->plan.n_tail_cached;
    r->copies_done = false;
    r->state = LA_REQ_PREFILL;
    r->t_admit = la_now_ms();
    if (r->stats.queue_ms == 0) r->stats.queue_ms = r->t_admit - r->t_submit;
    return LA_OK;
}

static int64_t count_running(const la_engine *e) {
    int64_t n = 0;
    for (la_request *r = e->running_head; r; r = r->next) n++;
    return n;
}

static void admit_waiting(la_engine *e) {
    while (e->waiting_head && count_running(e) < e->opts.max_running) {
        la_request *r = e->waiting_head;
        la_err err;
        la_status s = admit(e, r, &err);
        if (s == LA_ERR_NO_SPACE && (e->running_head || e->jobs_head)) return; /* wait */
        list_remove(&e->waiting_head, &e->waiting_tail, r);
        pthread_mutex_lock(&e->mu);
        e->n_queued--;
        pthread_mutex_unlock(&e->mu);
        if (s != LA_OK) {
            r->state = LA_REQ_WAITING;
            finish(e, r, LA_FINISH_ERROR, s, err.msg);
            continue;
        }
        list_push(&e->running_head, &e->running_tail, r);
    }
}

/* Return a running request to the head of the queue, releasing its blocks. */
static void preempt(la_engine *e, la_request *r) {
    list_remove(&e->running_head, &e->running_tail, r);
    la_plan_register_tail(&r->plan, e->pool, r->tail, r->n_computed);
    la_plan_release(&r->plan, e->pool);
    r->state = LA_REQ_WAITING;
    r->n_computed = 0;
    r->stats.n_preemptions++;
    r->next = e->waiting_head;
    e->waiting_head = r;
    if (!e->waiting_tail) e->waiting_tail = r;
    pthread_mutex_lock(&e->mu);
    e->n_queued++;
    e->stats.n_preemptions++;
    pthread_mutex_unlock(&e->mu);
}

static void apply_cancels(la_engine *e, uint64_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        for (la_request *r = e->waiting_head; r; r = r->next)
            if (r->id == ids[i]) {
                list_remove(&e->waiting_head, &e->waiting_tail, r);
                finish_waiting(e, r, LA_FINISH_CANCELLED, LA_ERR_CANCELLED, "cancelled");
                break;
            }
        for (la_request *r = e->running_head; r; r = r->next)
            if (r->id == ids[i]) {
                list_remove(&e->running_head, &e->running_tail, r);
                finish(e, r, LA_FINISH_CANCELLED, LA_ERR_CANCELLED, "cancelled");
                break;
            }
    }
}

/* ============================================================ packing ================ */

typedef enum { SEQ_DECODE, SEQ_JOB, SEQ_PREFILL } seq_kind;

typedef struct packed_seq {
    seq_kind kind;
    la_request *r;
    la_doc_job *j;
    int32_t n_rows;
    int32_t logit_index; /* into the logits array, or -1 */
} packed_seq;

typedef struct batch_builder {
    int32_t *tokens, *pos, *kpos; /* [n_rows] */
    int64_t *slots;               /* [n_rows] */
    int64_t n_rows, cap_rows;
    la_batch_seq *seqs;
    int64_t n_seqs, cap_seqs;
    la_attn_block *blocks;
    int64_t n_blocks, cap_blocks;
    int32_t *logit_rows;
    int64_t n_logits, cap_logits;
    packed_seq *packed;
    int64_t n_packed, cap_packed;
} batch_builder;

static void builder_free(batch_builder *b) {
    free(b->tokens);
    free(b->pos);
    free(b->kpos);
    free(b->logit_rows);
    free(b->slots);
    free(b->seqs);
    free(b->blocks);
    free(b->packed);
}

static la_status add_row(batch_builder *b, int32_t token, int32_t pos, int32_t kpos, int64_t slot) {
    if (b->n_rows == b->cap_rows) {
        int64_t cap = b->cap_rows ? 2 * b->cap_rows : 256;
        int32_t *t = realloc(b->tokens, sizeof(int32_t) * (size_t)cap);
        if (t) b->tokens = t;
        int32_t *p = realloc(b->pos, sizeof(int32_t) * (size_t)cap);
        if (p) b->pos = p;
        int32_t *k = realloc(b->kpos, sizeof(int32_t) * (size_t)cap);
        if (k) b->kpos = k;
        int64_t *sl = realloc(b->slots, sizeof(int64_t) * (size_t)cap);
        if (sl) b->slots = sl;
        if (!t || !p || !k || !sl) return LA_ERR_NO_MEMORY;
        b->cap_rows = cap;
    }
    b->tokens[b->n_rows] = token;
    b->pos[b->n_rows] = pos;
    b->kpos[b->n_rows] = kpos;
    b->slots[b->n_rows] = slot;
    b->n_rows++;
    return LA_OK;
}

static la_status reserve_blocks(batch_builder *b, int64_t n) {
    if (b->n_blocks + n > b->cap_blocks) {
        int64_t cap = b->cap_blocks ? b->cap_blocks : 256;
        while (cap < b->n_blocks + n) cap *= 2;
        la_attn_block *p = realloc(b->blocks, sizeof(la_attn_block) * (size_t)cap);
        if (!p) return LA_ERR_NO_MEMORY;
        b->blocks = p;
        b->cap_blocks = cap;
    }
    return LA_OK;
}

static la_status add_seq(batch_builder *b, packed_seq ps, int32_t row0, int32_t block0,
                         bool want_logits) {
    la_batch_seq s = {row0, ps.n_rows, block0, (int32_t)(b->n_blocks - block0)};
    VEC_PUSH(b->seqs, b->n_seqs, b->cap_seqs, s);
    ps.logit_index = -1;
    if (want_logits) {
        ps.logit_index = (int32_t)b->n_logits;
        int32_t last = row0 + ps.n_rows - 1;
        VEC_PUSH(b->logit_rows, b->n_logits, b->cap_logits, last);
    }
    VEC_PUSH(b->packed, b->n_packed, b->cap_packed, ps);
    return LA_OK;
oom:
    return LA_ERR_NO_MEMORY;
}

/* Tail rows [from, from + n) of r, attending to the view over from + n tail tokens. */
static la_status pack_tail(batch_builder *b, la_request *r, seq_kind kind, int32_t from, int32_t n,
                           bool want_logits) {
    int32_t row0 = (int32_t)b->n_rows, block0 = (int32_t)b->n_blocks;
    for (int32_t t = from; t < from + n; t++) {
        int32_t p = r->plan.tail_start + t;
        LA_TRY(add_row(b, r->tail[t], p, p, la_plan_tail_slot(&r->plan, t)));
    }
    LA_TRY(reserve_blocks(b, la_plan_view_size(&r->plan, from + n)));
    b->n_blocks += la_plan_tail_view(&r->plan, from + n, b->blocks + b->n_blocks);
    packed_seq ps = {.kind = kind, .r = r, .n_rows = n};
    return add_seq(b, ps, row0, block0, want_logits);
}

static la_status pack_job(batch_builder *b, la_engine *e, la_doc_job *j, int32_t n) {
    int32_t B = e->opts.block_size, row0 = (int32_t)b->n_rows, block0 = (int32_t)b->n_blocks;
    int32_t from = j->from + j->n_done;
    for (int32_t i = from; i < from + n; i++)
        LA_TRY(add_row(b, j->tokens[i], la_plan_doc_pos(j->method, &j->doc, i),
                       la_plan_doc_k_pos(j->method, &j->doc, i), la_plan_doc_slot(B, &j->doc, i)));
    LA_TRY(reserve_blocks(b, ceil_div(from + n, B)));
    b->n_blocks += la_plan_doc_view(j->method, B, &j->doc, from + n, b->blocks + b->n_blocks);
    packed_seq ps = {.kind = SEQ_JOB, .j = j, .n_rows = n};
    return add_seq(b, ps, row0, block0, false);
}

/* BLOCK: copy every document block of r and re-rotate the copy by S_d (once). */
static la_status make_copies(la_engine *e, la_request *r, la_err *err) {
    int32_t B = e->opts.block_size;
    for (int32_t d = 0; d < r->plan.n_docs; d++) {
        const la_plan_doc *doc = &r->plan.docs[d];
        for (int32_t b = 0; b < doc->n_blocks; b++) {
            int32_t n_valid = doc->n_tokens - b * B < B ? doc->n_tokens - b * B : B;
            LA_TRY(e->be->ops->kv_copy_rotate(e->be, doc->block_ids[b], doc->copy_ids[b], n_valid,
                                              doc->start, err));
        }
    }
    r->copies_done = true;
    return LA_OK;
}

/* The preemption victim: the newest running request. Decode rows are packed from the
 * oldest request on, so a victim other than the request asking is not packed yet. */
static la_request *pick_victim(la_engine *e) { return e->running_tail; }

static la_status pack_step(la_engine *e, batch_builder *b, la_err *err) {
    int64_t budget = e->opts.max_batch_tokens;
    /* 1. decode rows */
    for (la_request *r = e->running_head; r && budget > 0;) {
        la_request *next = r->next;
        if (r->state == LA_REQ_DECODE) {
            la_status s = la_plan_reserve_tail(&r->plan, e->pool, r->n_computed + 1, err);
            if (s == LA_ERR_NO_SPACE) {
                la_request *v = pick_victim(e);
                preempt(e, v);
                if (v == r) {
                    r = next;
                    continue;
                }
                continue; /* retry r with the freed blocks */
            }
            LA_TRY(s);
            LA_TRY(pack_tail(b, r, SEQ_DECODE, r->n_computed, 1, true));
            budget--;
        }
        r = next;
    }
    /* 2. document jobs */
    for (la_doc_job *j = e->jobs_head; j && budget > 0; j = j->next) {
        int32_t left = j->doc.n_tokens - j->from - j->n_done;
        int32_t n = left < budget ? left : (int32_t)budget;
        if (n <= 0) continue;
        LA_TRY(pack_job(b, e, j, n));
        budget -= n;
    }
    /* 3. tail prefill of requests whose documents are ready */
    for (la_request *r = e->running_head; r && budget > 0; r = r->next) {
        if (r->state != LA_REQ_PREFILL || !la_plan_docs_ready(&r->plan, e->pool)) continue;
        if (r->method == LA_METHOD_BLOCK && !r->copies_done) LA_TRY(make_copies(e, r, err));
        int32_t left = r->n_plan_tail - r->n_computed;
        int32_t n = left < budget ? left : (int32_t)budget;
        LA_TRY(pack_tail(b, r, SEQ_PREFILL, r->n_computed, n, n == left));
        budget -= n;
    }
    return LA_OK;
}

/* ============================================================ step =================== */

static void intake(la_engine *e, uint64_t **cancels, int32_t *n_cancels) {
    pthread_mutex_lock(&e->mu);
    for (la_request *r = e->inbox_head, *next; r; r = next) {
        next = r->next;
        list_push(&e->waiting_head, &e->waiting_tail, r);
    }
    e->inbox_head = e->inbox_tail = NULL;
    *cancels = e->cancel_ids;
    *n_cancels = e->n_cancel;
    e->cancel_ids = NULL;
    e->n_cancel = e->cancel_cap = 0;
    pthread_mutex_unlock(&e->mu);
}

static void refresh_stats(la_engine *e) {
    la_kv_pool_stats ps = la_kv_pool_get_stats(e->pool);
    int64_t n_wait = 0;
    for (la_request *r = e->waiting_head; r; r = r->next) n_wait++;
    pthread_mutex_lock(&e->mu);
    e->stats.n_waiting = n_wait;
    for (la_request *r = e->inbox_head; r; r = r->next) e->stats.n_waiting++;
    e->stats.n_running = count_running(e);
    e->stats.kv_blocks_total = ps.n_blocks;
    e->stats.kv_blocks_free = ps.n_free;
    e->stats.kv_blocks_cached = ps.n_cached;
    e->stats.kv_blocks_pinned = ps.n_pinned;
    e->stats.kv_hits = ps.hits;
    e->stats.kv_misses = ps.misses;
    e->stats.kv_evictions = ps.evictions;
    e->stats.block_size = e->opts.block_size;
    e->stats.n_steps++;
    pthread_mutex_unlock(&e->mu);
}

/* After a failed forward: fail every request and job of the step (their blocks may hold
 * partial data), keep everything else. */
static void fail_step(la_engine *e, batch_builder *b, const la_err *err) {
    for (int64_t i = 0; i < b->n_packed; i++) {
        packed_seq *ps = &b->packed[i];
        if (ps->kind == SEQ_JOB) {
            la_doc_job *prev = NULL;
            for (la_doc_job *j = e->jobs_head; j; prev = j, j = j->next)
                if (j == ps->j) {
                    if (prev) prev->next = j->next;
                    else e->jobs_head = j->next;
                    if (e->jobs_tail == j) e->jobs_tail = prev;
                    job_free(e, j, false);
                    break;
                }
        }
    }
    /* requests of the step, and requests waiting on documents that will now never be
     * ready (their jobs were dropped above) */
    for (la_request *r = e->running_head, *next; r; r = next) {
        next = r->next;
        bool in_step = false;
        for (int64_t i = 0; i < b->n_packed; i++) in_step |= b->packed[i].r == r;
        bool stranded = false;
        for (int32_t d = 0; d < r->plan.n_docs && !stranded; d++)
            for (int32_t k = 0; k < r->plan.docs[d].n_blocks; k++) {
                int32_t id = r->plan.docs[d].block_ids[k];
                if (!la_kv_pool_is_ready(e->pool, id) && !la_kv_pool_is_indexed(e->pool, id)) {
                    bool owned = false;
                    for (la_doc_job *j = e->jobs_head; j && !owned; j = j->next)
                        for (int32_t q = 0; q < j->doc.n_blocks; q++) owned |= j->doc.block_ids[q] == id;
                    if (!owned) stranded = true;
                }
            }
        if (in_step || stranded) {
            list_remove(&e->running_head, &e->running_tail, r);
            finish(e, r, LA_FINISH_ERROR, err->code, err->msg);
        }
    }
}

/* Whether every logit row of the step is a greedy request that does not want its logits
 * back: then the backend's argmax (argmax_to_host: on the GPU, only token ids cross to the
 * host) gives the same tokens as la_sample on the logits. */
static bool step_is_greedy(const la_engine *e, const batch_builder *b) {
    if (!e->be->ops->argmax_to_host) return false;
    for (int64_t i = 0; i < b->n_packed; i++) {
        const packed_seq *ps = &b->packed[i];
        if (ps->kind != SEQ_JOB && ps->logit_index >= 0 &&
            (ps->r->sampling.temperature > 0.0f || ps->r->return_logits))
            return false;
    }
    return true;
}

/* logits [n_logits, vocab] f32, or (a greedy step) ids [n_logits]: one of them is NULL. */
static void complete_step(la_engine *e, batch_builder *b, const float *logits, const int32_t *ids) {
    int32_t V = e->cfg.vocab_size;
    for (int64_t i = 0; i < b->n_packed; i++) {
        packed_seq *ps = &b->packed[i];
        if (ps->kind == SEQ_JOB) {
            ps->j->n_done += ps->n_rows;
            continue;
        }
        la_request *r = ps->r;
        r->n_computed += ps->n_rows;
        if (ps->kind == SEQ_PREFILL && r->n_computed == r->n_plan_tail) r->state = LA_REQ_DECODE;
        la_plan_register_tail(&r->plan, e->pool, r->tail, r->n_computed);
        if (ps->logit_index < 0) continue;
        const float *lg = logits ? logits + (int64_t)ps->logit_index * V : NULL;
        int32_t tok = lg ? la_sample(lg, V, &r->sampling, &r->rng, e->sample_scratch) : ids[ps->logit_index];
        la_finish_reason why = accept_token(e, r, tok, lg);
        if (why != LA_FINISH_NONE) {
            list_remove(&e->running_head, &e->running_tail, r);
            finish(e, r, why, why == LA_FINISH_ERROR ? LA_ERR_NO_MEMORY : LA_OK,
                   why == LA_FINISH_ERROR ? "out of memory" : NULL);
        }
    }
    /* retire finished jobs */
    la_doc_job *prev = NULL;
    for (la_doc_job *j = e->jobs_head, *next; j; j = next) {
        next = j->next;
        if (j->from + j->n_done == j->doc.n_tokens) {
            if (prev) prev->next = next;
            else e->jobs_head = next;
            if (e->jobs_tail == j) e->jobs_tail = prev;
            job_free(e, j, true);
        } else {
            prev = j;
        }
    }
}

la_status la_engine_step(la_engine *e, la_err *err) {
    uint64_t *cancels;
    int32_t n_cancels;
    intake(e, &cancels, &n_cancels);
    apply_cancels(e, cancels, n_cancels);
    free(cancels);
    admit_waiting(e);

    batch_builder b = {0};
    float *logits = NULL;
    int32_t *ids = NULL;
    la_status s = pack_step(e, &b, err);
    if (s == LA_OK && b.n_rows > 0) {
        size_t n_logits = (size_t)(b.n_logits ? b.n_logits : 1);
        bool greedy = step_is_greedy(e, &b);
        if (greedy) ids = malloc(sizeof(int32_t) * n_logits);
        else logits = malloc(sizeof(float) * n_logits * (size_t)e->cfg.vocab_size);
        if (!logits && !ids) s = la_err_set(err, LA_ERR_NO_MEMORY, "step: out of memory for logits");
        la_batch batch = {(int32_t)b.n_rows, b.tokens, b.pos, b.kpos, b.slots, (int32_t)b.n_seqs,
                          b.seqs, (int32_t)b.n_blocks, b.blocks, (int32_t)b.n_logits, b.logit_rows};
        if (s == LA_OK) s = greedy ? la_forward_argmax(e->be, &batch, ids, err) : la_forward(e->be, &batch, logits, err);
        if (s == LA_OK) complete_step(e, &b, logits, ids);
    } else if (s == LA_ERR_NO_MEMORY && err && err->msg[0] == '\0') {
        la_err_set(err, s, "step: out of memory");
    }
    if (s != LA_OK) fail_step(e, &b, err);
    free(logits);
    free(ids);
    builder_free(&b);
    refresh_stats(e);
#ifdef LA_DEBUG_CHECKS
    la_err cerr;
    if (la_engine_check(e, &cerr) != LA_OK) {
        fprintf(stderr, "lazyattn: %s\n", cerr.msg);
        LA_ASSERT(!"KV pool accounting check failed");
    }
#endif
    return s;
}

bool la_engine_has_work(la_engine *e) {
    pthread_mutex_lock(&e->mu);
    bool w = e->n_live > 0 || e->n_cancel > 0;
    pthread_mutex_unlock(&e->mu);
    return w;
}

void la_engine_wait_work(la_engine *e, int timeout_ms) {
    pthread_mutex_lock(&e->mu);
    if (e->n_live == 0 && e->n_cancel == 0) {
        struct timespec ts = la_deadline_after_ms(timeout_ms);
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
}

la_status la_engine_run(la_engine *e, la_err *err) {
    la_status first = LA_OK;
    while (la_engine_has_work(e)) {
        la_status s = la_engine_step(e, err);
        if (s != LA_OK && first == LA_OK) first = s;
    }
    return first;
}

/* ============================================================ introspection ========== */

void la_engine_get_stats(la_engine *e, la_engine_stats *s) {
    pthread_mutex_lock(&e->mu);
    *s = e->stats;
    pthread_mutex_unlock(&e->mu);
}

int32_t la_engine_vocab_size(const la_engine *e) { return e->cfg.vocab_size; }
int32_t la_engine_max_context(const la_engine *e) { return e->max_context; }
const char *la_engine_model_name(const la_engine *e) { return e->model_name; }
const char *la_engine_device_name(const la_engine *e) { return e->be->ops->name; }

la_status la_engine_tokenize(const la_engine *e, const char *text, size_t len, bool add_special,
                             int32_t **ids, int32_t *n_ids, la_err *err) {
    if (!e->tok) return la_err_set(err, LA_ERR_INVALID_ARG, "this engine has no tokenizer");
    return la_tokenizer_encode(e->tok, text, len, add_special, ids, n_ids, err);
}

la_status la_engine_check(la_engine *e, la_err *err) {
    int64_t pins = 0;
    for (la_request *r = e->running_head; r; r = r->next) pins += la_plan_pins(&r->plan);
    for (la_doc_job *j = e->jobs_head; j; j = j->next) pins += j->doc.n_blocks;
    return la_kv_pool_check(e->pool, pins, err);
}

/* ============================================================ destroy ================ */

void la_engine_destroy(la_engine *e) {
    if (!e) return;
    if (e->pool) {
        uint64_t *cancels;
        int32_t n;
        intake(e, &cancels, &n);
        free(cancels);
        while (e->waiting_head) {
            la_request *r = e->waiting_head;
            list_remove(&e->waiting_head, &e->waiting_tail, r);
            finish_waiting(e, r, LA_FINISH_CANCELLED, LA_ERR_CANCELLED, "engine shut down");
        }
        while (e->running_head) {
            la_request *r = e->running_head;
            list_remove(&e->running_head, &e->running_tail, r);
            finish(e, r, LA_FINISH_CANCELLED, LA_ERR_CANCELLED, "engine shut down");
        }
        while (e->jobs_head) {
            la_doc_job *j = e->jobs_head;
            e->jobs_head = j->next;
            job_free(e, j, false);
        }
    }
    la_kv_pool_destroy(e->pool);
    la_backend_destroy(e->be);
    la_weights_destroy(e->weights);
    la_tokenizer_destroy(e->tok);
    free(e->sample_scratch);
    free(e->cancel_ids);
    free(e->model_dir);
    free(e->model_name);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}
