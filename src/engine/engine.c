/* The engine's public API (include/lazyattn/lazyattn.h): options, create and destroy,
 * submit and cancel, introspection. Submitted requests are prepared (chat template,
 * tokenization, document segmentation) in prepare.c, scheduled in scheduler.c and stepped in
 * step.c; what they emit (token events, text, stop strings, DONE) is in events.c; struct
 * la_engine is in engine_internal.h.
 */
#include "lazyattn/lazyattn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/err.h"
#include "base/log.h"
#include "base/struct_size.h"
#include "base/timer.h"
#include "engine/backend_model.h"
#include "engine/doc_store.h"
#include "engine/engine_internal.h"
#include "engine/events.h"
#include "engine/prepare.h"
#include "engine/request.h"
#include "engine/sampling.h"
#include "engine/scheduler.h"
#include "engine/token_choice.h"
#include "grammar/token_mask.h"
#include "kv/block_pool.h"
#include "kv/plan.h"
#include "kv/store/record.h"
#include "kv/store/store.h"
#include "model/chat_template.h"
#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

/* ============================================================ small helpers ========== */

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* ============================================================ options, create ======== */

/* Upper bound on a pool sized automatically (16M tokens at block size 16): a tiny model on a
 * large GPU would otherwise get millions of blocks of host-side bookkeeping. */
#define LA_KV_MAX_AUTO_BLOCKS ((int64_t)1 << 20)

static void options_defaults(la_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->device = LA_DEVICE_CPU;
    o->block_size = 16;
    o->gpu_memory_fraction = 0.8;
    o->method = LA_METHOD_LAZY;
    o->max_batch_tokens = 0; /* per device: la_engine_create */
    o->max_running = 64;
    o->max_queue = 256;
    o->max_docs = 128;
    o->kv_write_through = true;
    o->doc_token_cache_bytes = (int64_t)64 << 20;
}

static void request_params_defaults(la_request_params *p) {
    memset(p, 0, sizeof *p);
    p->method = LA_METHOD_COUNT;
    p->add_special = true;
    p->sampling.temperature = 0.0f;
    p->sampling.top_p = 1.0f;
    p->sampling.max_tokens = 16;
    p->sampling.repetition_penalty = 1.0f;
    p->sampling.n = 1;
    p->recompute_first = -1;
    p->recompute_ratio = -1.0f;
    p->doc_context = LA_DOC_CONTEXT_COUNT;
}

/* The sized inits of include/lazyattn/abi.h: the defaults, cut to the caller's size. */
void la_engine_options_init_sized(la_engine_options *o, size_t struct_size) {
    la_engine_options d;
    options_defaults(&d);
    la_struct_copy_out(o, struct_size, &d, sizeof d);
    if (struct_size >= sizeof(size_t)) o->struct_size = struct_size;
}

void la_request_params_init_sized(la_request_params *p, size_t struct_size) {
    la_request_params d;
    request_params_defaults(&d);
    la_struct_copy_out(p, struct_size, &d, sizeof d);
    if (struct_size >= sizeof(size_t)) p->struct_size = struct_size;
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
    if (o->recompute_first < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "recompute_first=%d must be >= 0", (int)o->recompute_first);
    if (!(o->recompute_ratio >= 0.0f && o->recompute_ratio <= 1.0f))
        return la_err_set(err, LA_ERR_INVALID_ARG, "recompute_ratio=%g must be in [0, 1]", (double)o->recompute_ratio);
    if ((unsigned)o->doc_context >= LA_DOC_CONTEXT_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "engine: unknown doc_context %d", (int)o->doc_context);
    if ((unsigned)o->cpu_weights >= LA_CPU_WEIGHTS_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "engine: unknown cpu_weights %d", (int)o->cpu_weights);
    if ((unsigned)o->cpu_kv >= LA_CPU_KV_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "engine: unknown cpu_kv %d", (int)o->cpu_kv);
    if (o->device != LA_DEVICE_CPU && (o->cpu_weights != LA_CPU_WEIGHTS_AUTO || o->cpu_kv != LA_CPU_KV_F32))
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "cpu_weights and cpu_kv apply to the CPU backend (the GPU keeps bf16 weights and KV)");
    if (o->n_threads > LA_MAX_THREADS)
        return la_err_set(err, LA_ERR_INVALID_ARG, "n_threads=%d must be at most %d (0: the physical cores)",
                          (int)o->n_threads, LA_MAX_THREADS);
    if ((unsigned)o->async_scheduling >= LA_ASYNC_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "engine: unknown async_scheduling %d", (int)o->async_scheduling);
    if ((unsigned)o->kv_read >= LA_KV_READ_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "engine: unknown kv_read %d", (int)o->kv_read);
    if (o->max_batch_tokens < 0 || o->max_running < 1 || o->max_queue < 1 || o->max_docs < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "max_batch_tokens must be >= 0 (0: the device's default), max_running and max_queue >= 1");
    if (o->max_context < 0) return la_err_set(err, LA_ERR_INVALID_ARG, "max_context must be >= 0");
    if (o->kv_io_threads < 0 || o->kv_io_threads > 64)
        return la_err_set(err, LA_ERR_INVALID_ARG, "kv_io_threads=%d must be in [0, 64] (0: 2)", (int)o->kv_io_threads);
    if (o->kv_io_threads > 0 && !o->kv_dir && !o->kv_store_url)
        return la_err_set(err, LA_ERR_INVALID_ARG, "kv_io_threads reads and writes the disk and shared tiers: it "
                                                   "needs kv_dir or kv_store_url");
    if (o->kv_read != LA_KV_READ_ALWAYS && !o->kv_dir && !o->kv_store_url)
        return la_err_set(err, LA_ERR_INVALID_ARG, "kv_read says when disk and shared-tier records are read: it "
                                                   "needs kv_dir or kv_store_url");
    if (o->kv_dir_bytes > 0 && !o->kv_dir)
        return la_err_set(err, LA_ERR_INVALID_ARG, "kv_dir_bytes caps the disk tier: it needs kv_dir");
    if (o->host_kv_bytes < 0 || o->kv_dir_bytes < 0 || o->kv_staging_bytes < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "KV store sizes must be >= 0");
    if (!(o->kv_io_timeout_ms >= 0 && o->kv_io_timeout_ms <= 86400e3)) /* NaN too */
        return la_err_set(err, LA_ERR_INVALID_ARG, "kv_io_timeout_ms=%g must be in [0, 86400000] (0: 10000)",
                          o->kv_io_timeout_ms);
    if (o->kv_dir && !*o->kv_dir) return la_err_set(err, LA_ERR_INVALID_ARG, "kv_dir is empty");
    if (o->doc_token_cache_bytes < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "doc_token_cache_bytes must be >= 0 (0: off)");
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

int32_t la_engine_default_budget(int64_t device_bytes, int32_t max_running) {
    int32_t n = device_bytes <= 0 ? 1024 : device_bytes >= ((int64_t)70 << 30) ? 8192 : 2048;
    return n > max_running ? n : max_running;
}

/* The token budget per step (lazyattn.h): the options', else la_engine_default_budget of the
 * backend's device memory. */
static int32_t default_budget(la_engine *e, const la_engine_options *o) {
    if (o->max_batch_tokens) return o->max_batch_tokens;
    int64_t total = 0;
    if (e->be->ops->mem_free_bytes) e->be->ops->mem_free_bytes(e->be, &total);
    return la_engine_default_budget(total, o->max_running);
}

la_status la_engine_create(const la_engine_options *caller_o, la_engine **out, la_err *err) {
    la_engine_options oc; /* the caller's options at this library's size (abi.h) */
    options_defaults(&oc);
    LA_TRY(la_struct_copy_in(&oc, sizeof oc, caller_o, "la_engine_options", err));
    const la_engine_options *o = &oc;
    LA_TRY(check_options(o, err));
    la_engine *e = calloc(1, sizeof *e);
    if (!e) return la_err_set(err, LA_ERR_NO_MEMORY, "engine: out of memory");
    e->opts = *o;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->step_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_mutex_init(&e->grammar_mu, NULL);
    e->next_id = 1;
    e->model_dir = o->model_dir ? dup_str(o->model_dir) : NULL;
    e->model_name = model_name_of(o);
    e->random_shape = o->random_weights ? dup_str(o->random_weights) : NULL;
    e->opts.model_dir = e->model_dir;
    e->opts.random_weights = e->opts.tokenizer_dir = NULL; /* borrowed: not kept */
    e->builder = calloc(1, sizeof *e->builder);
    e->spare = calloc(1, sizeof *e->spare);
    la_status s = e->model_name && e->builder && e->spare ? LA_OK
                                                         : la_err_set(err, LA_ERR_NO_MEMORY, "engine: out of memory");
    const char *tok_dir = o->tokenizer_dir ? o->tokenizer_dir : o->model_dir;
    if (o->random_weights) {
        if (s == LA_OK) s = la_model_config_preset(o->random_weights, &e->cfg, err);
        if (s == LA_OK && tok_dir) s = la_tokenizer_load(tok_dir, &e->tok, err);
    } else {
        if (s == LA_OK) s = la_model_config_load(o->model_dir, &e->cfg, err);
        if (s == LA_OK) s = la_tokenizer_load(tok_dir, &e->tok, err);
        if (s == LA_OK) s = la_weights_load(o->model_dir, &e->cfg, &e->weights, err);
    }
    if (s == LA_OK) s = la_engine_chat_template_load(e, o, err);
    e->opts.chat_template_file = NULL; /* borrowed: not kept */
    if (s == LA_OK) s = la_backend_create(o->device, o->n_threads, &e->be, err);
    if (s == LA_OK) { /* la_cpu_weights -> the dtype the backend keeps matrices in */
        static const int32_t k_weight_dtype[LA_CPU_WEIGHTS_COUNT] = {LA_WEIGHT_DTYPE_AUTO, LA_DTYPE_F32,
                                                                      LA_DTYPE_BF16, LA_DTYPE_F16, LA_DTYPE_BF16};
        e->be->weight_dtype = k_weight_dtype[o->cpu_weights];
        e->be->bf16_dot = o->cpu_weights == LA_CPU_WEIGHTS_BF16_DOT;
        if (o->device == LA_DEVICE_CPU && o->cpu_kv == LA_CPU_KV_BF16) e->be->kv_dtype = LA_DTYPE_BF16;
    }
    /* weights NULL: the backend initialises random weights of cfg's shape */
    if (s == LA_OK) s = la_backend_load_model(e->be, &e->cfg, e->weights, err);
    if (s == LA_OK && o->cpu_weights == LA_CPU_WEIGHTS_BF16_DOT && !e->be->bf16_dot)
        la_log("cpu_weights bf16-dot: this CPU has no AVX512_BF16, so the exact bf16 path runs");
    if (s == LA_OK) {
        int64_t n_blocks = o->kv_blocks;
        if (n_blocks == 0) {
            /* kv_bytes, else gpu_memory_fraction of the device memory the weights left free
             * (the rest holds activations, cuBLAS workspace, CUDA graphs), else 1 GiB */
            int64_t bytes = o->kv_bytes, free_b = 0;
            if (!bytes && e->be->ops->mem_free_bytes) free_b = e->be->ops->mem_free_bytes(e->be, NULL);
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
        e->opts.max_batch_tokens = default_budget(e, o);
        e->stats.max_batch_tokens = e->opts.max_batch_tokens;
        /* async scheduling: AUTO where steps run apart from the host (a backend that queues
         * its work: ops->synchronize) */
        const bool can = e->be->ops->argmax_begin && e->be->ops->argmax_end;
        if (o->async_scheduling == LA_ASYNC_ON && !can)
            s = la_err_set(err, LA_ERR_UNSUPPORTED, "async_scheduling on: the %s backend cannot queue an argmax",
                           e->be->ops->name);
        e->async_on = can && (o->async_scheduling == LA_ASYNC_ON ||
                              (o->async_scheduling == LA_ASYNC_AUTO && e->be->ops->synchronize));
        e->stats.async_scheduling = e->async_on;
    }
    if (s == LA_OK) s = la_doc_store_create(e, &e->docs, err);
    if (s == LA_OK) la_doc_store_get_stats(e->docs, &e->store_stats); /* which tiers exist, before a step */
    /* borrowed strings of the options: used above, not kept */
    e->opts.kv_dir = e->opts.kv_secret_file = e->opts.kv_store_url = NULL;
    if (s == LA_OK) {
        if (o->max_context > 0 && e->cfg.max_position_embeddings > 0 &&
            o->max_context > e->cfg.max_position_embeddings)
            s = la_err_set(err, LA_ERR_INVALID_ARG,
                           "max_context=%d exceeds the model's max_position_embeddings=%lld",
                           o->max_context, (long long)e->cfg.max_position_embeddings);
        int64_t mc = o->max_context ? o->max_context : e->cfg.max_position_embeddings;
        if (mc <= 0 || mc > INT32_MAX - 1) mc = INT32_MAX - 1;
        e->max_context = (int32_t)mc;
        if (s == LA_OK) s = la_choosers_create(e, e->cfg.vocab_size, err);
        /* a document longer than the context can serve no request: not kept */
        if (s == LA_OK && e->tok && o->doc_token_cache_bytes > 0)
            s = la_encode_cache_create(o->doc_token_cache_bytes, e->max_context, &e->doc_tokens, err);
    }
    if (s != LA_OK) {
        la_engine_destroy(e);
        return s;
    }
    *out = e;
    return LA_OK;
}

/* ============================================================ submit ================= */

/* Token ids of the sampling params against the vocabulary, and combinations the engine
 * cannot honour. */
static la_status check_sampling_ids(const la_engine *e, const la_sampling_params *sp, la_err *err) {
    int32_t V = e->cfg.vocab_size;
    for (int32_t i = 0; i < sp->n_stop_token_ids; i++)
        if (sp->stop_token_ids[i] < 0 || sp->stop_token_ids[i] >= V)
            return la_err_set(err, LA_ERR_INVALID_ARG, "stop_token_ids: %d is outside the vocabulary [0, %d)",
                              sp->stop_token_ids[i], V);
    for (int32_t i = 0; i < sp->n_logit_bias; i++)
        if (sp->logit_bias[i].token_id < 0 || sp->logit_bias[i].token_id >= V)
            return la_err_set(err, LA_ERR_INVALID_ARG, "logit_bias: token %d is outside the vocabulary [0, %d)",
                              sp->logit_bias[i].token_id, V);
    for (int32_t i = 0; i < sp->n_allowed_token_ids; i++)
        if (sp->allowed_token_ids[i] < 0 || sp->allowed_token_ids[i] >= V)
            return la_err_set(err, LA_ERR_INVALID_ARG, "allowed_token_ids: %d is outside the vocabulary [0, %d)",
                              sp->allowed_token_ids[i], V);
    if (sp->response_format != LA_RESPONSE_TEXT && sp->ignore_eos)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "ignore_eos cannot be combined with a JSON response format "
                                                   "(the output ends with its value)");
    if (sp->response_format != LA_RESPONSE_TEXT && sp->min_tokens > 0)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "min_tokens cannot be combined with a JSON response format "
                                                   "(the output ends with its value)");
    if (sp->response_format != LA_RESPONSE_TEXT && sp->n_stop > 0)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "stop strings cannot be combined with a JSON response format (one "
                                                   "inside the value would cut it; the output ends with its value)");
    if (sp->response_format != LA_RESPONSE_TEXT && sp->n_stop_token_ids > 0)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "stop_token_ids cannot be combined with a JSON response format "
                                                   "(one inside the value would cut it; the output ends with its value)");
    return LA_OK;
}

la_status la_engine_submit(la_engine *e, const la_request_params *caller_p, uint64_t *request_id,
                           la_err *err) {
    la_request_params pc; /* the caller's params at this library's size (abi.h) */
    request_params_defaults(&pc);
    LA_TRY(la_struct_copy_in(&pc, sizeof pc, caller_p, "la_request_params", err));
    const la_request_params *p = &pc;
    LA_TRY(la_sampling_params_check(&p->sampling, err));
    if (p->n_docs < 0 || (p->n_docs > 0 && !p->docs))
        return la_err_set(err, LA_ERR_INVALID_ARG, "documents: bad list");
    if (p->n_docs > e->opts.max_docs)
        return la_err_set(err, LA_ERR_INVALID_ARG, "too many documents: %d, the limit is %d", p->n_docs,
                          e->opts.max_docs);
    la_method method = p->method == LA_METHOD_COUNT ? e->opts.method : p->method;
    if ((unsigned)method >= LA_METHOD_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "unknown method %d", (int)p->method);
    if (p->cache_salt && !p->cache_salt[0]) /* "" would share the unsalted cache */
        return la_err_set(err, LA_ERR_INVALID_ARG, "cache_salt must not be empty (NULL: no salt)");
    if (p->recompute_first < -1)
        return la_err_set(err, LA_ERR_INVALID_ARG, "recompute_first=%d must be >= 0", (int)p->recompute_first);
    if (p->recompute_first > 0 && !la_method_is_blockwise(method))
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "recompute_first applies to the block-wise methods (lazy, block, mepic, block-ref): "
                          "%s computes every document in context already", la_method_name(method));
    if (p->recompute_ratio != p->recompute_ratio || p->recompute_ratio > 1.0f)
        return la_err_set(err, LA_ERR_INVALID_ARG, "recompute_ratio=%g must be in [0, 1] (negative: the engine's "
                          "default)", (double)p->recompute_ratio);
    if (p->recompute_ratio > 0.0f && !la_method_is_blockwise(method))
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "recompute_ratio applies to the block-wise methods (lazy, block, mepic, block-ref): "
                          "%s computes every document in context already", la_method_name(method));
    const float ratio = p->recompute_ratio >= 0.0f ? p->recompute_ratio
                        : la_method_is_blockwise(method) ? e->opts.recompute_ratio : 0.0f;
    if (ratio > 0.0f && !e->be->ops->kv_deviation)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "recompute_ratio: the %s backend has no probe (kv_deviation)",
                          e->be->ops->name);

    if ((unsigned)p->doc_context > LA_DOC_CONTEXT_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "doc_context=%d is not a doc context", (int)p->doc_context);
    const bool caches_docs = la_method_caches_docs(method);
    if (p->doc_context == LA_DOC_CONTEXT_PREAMBLE && !caches_docs)
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "doc_context preamble applies to the methods that cache documents (lazy, block, mepic): "
                          "%s computes them %s", la_method_name(method),
                          method == LA_METHOD_BLOCK_REF ? "fresh at their slots" : "in context already");

    LA_TRY(check_sampling_ids(e, &p->sampling, err));
    la_request *r = calloc(1, sizeof *r);
    if (!r) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    r->method = method;
    /* the engine's default applies where it can: recompute and prefix have nothing to recover */
    r->recompute_first = p->recompute_first >= 0 ? p->recompute_first
                         : la_method_is_blockwise(method) ? e->opts.recompute_first : 0;
    r->recompute_ratio = ratio;
    r->doc_context = p->doc_context != LA_DOC_CONTEXT_COUNT ? p->doc_context
                     : caches_docs ? e->opts.doc_context : LA_DOC_CONTEXT_ALONE;
    r->sampling = p->sampling;
    r->n_choices = p->sampling.n > 1 ? p->sampling.n : 1;
    r->orphan_from = 1;
    r->keep_special = p->keep_special_tokens;
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
    if (s == LA_OK) s = la_request_copy_sampling(r, &p->sampling, e->cfg.vocab_size, err);
    if (s == LA_OK && p->sampling.response_format != LA_RESPONSE_TEXT) {
        la_grammar *g = NULL;
        s = la_engine_grammar_get(e, &p->sampling, &g, err);
        if (s == LA_OK && la_grammar_min_tokens(g) > p->sampling.max_tokens)
            s = la_err_set(err, LA_ERR_INVALID_ARG,
                           "max_tokens=%d is too small for the response format: its shortest value is %d bytes, "
                           "and a complete value is certain only with a token per byte",
                           p->sampling.max_tokens, la_grammar_min_tokens(g));
        if (s == LA_OK) s = la_grammar_matcher_create(g, &r->gm, err);
        la_grammar_unref(g);
    }
    if (s == LA_OK) s = la_request_prepare(e, p, r, err);
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
        int64_t need = la_scheduler_blocks_needed(e, r);
        if (need > e->kv_blocks)
            s = la_err_set(err, LA_ERR_TOO_LONG, "request needs %lld KV blocks but the pool holds %lld%s",
                           (long long)need, (long long)e->kv_blocks,
                           r->recompute_ratio > 0.0f || r->recompute_first > 0
                               ? " (recovery's per-request copies of the documents' blocks included)"
                               : "");
    }
    if (s == LA_OK && e->tok) s = la_detok_create(e->tok, !p->keep_special_tokens, &r->detok, err);
    if (s != LA_OK) {
        la_request_free(r);
        return s;
    }
    la_rng_seed(&r->rng, p->sampling.seed);
    r->stats.n_doc_tokens = r->n_doc_tokens;
    r->stats.n_prompt_tokens = r->n_tail + (la_method_is_blockwise(method) ? r->n_doc_tokens : 0);

    pthread_mutex_lock(&e->mu);
    if (e->n_queued >= e->opts.max_queue) {
        pthread_mutex_unlock(&e->mu);
        la_request_free(r);
        return la_err_set(err, LA_ERR_BUSY, "queue full: %d requests waiting", e->opts.max_queue);
    }
    /* the id reaches the caller before the engine thread can see the request (it takes mu
     * to move the inbox), so no event of this request can come before the caller knows it */
    uint64_t id = r->id = e->next_id++; /* r may be finished and freed once unlocked */
    if (request_id) *request_id = id;
    if (e->inbox_tail) e->inbox_tail->next = r;
    else e->inbox_head = r;
    e->inbox_tail = r;
    e->n_queued++;
    e->n_live++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->submit_hook) e->submit_hook(e, e->submit_hook_user);
    return LA_OK;
}

void la_engine_set_submit_hook(la_engine *e, void (*fn)(la_engine *e, void *user), void *user) {
    e->submit_hook = fn;
    e->submit_hook_user = user;
}

void la_engine_fail_forward_in(la_engine *e, int64_t nth) { e->fail_forward_in = nth > 0 ? nth : 0; }

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

/* ============================================================ introspection ========== */

void la_engine_get_stats_sized(la_engine *e, la_engine_stats *s, size_t struct_size) {
    pthread_mutex_lock(&e->mu);
    la_engine_stats snap = e->stats;
    pthread_mutex_unlock(&e->mu);
    la_encode_cache_stats dc;
    la_encode_cache_get_stats(e->doc_tokens, &dc);
    snap.doc_token_cache_hits = dc.hits;
    snap.doc_token_cache_misses = dc.misses;
    snap.doc_token_cache_entries = dc.entries;
    snap.doc_token_cache_bytes = dc.bytes;
    snap.doc_token_cache_evictions = dc.evictions;
    la_struct_copy_out(s, struct_size, &snap, sizeof snap);
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

int64_t la_engine_token_bytes(const la_engine *e, int32_t id, char *buf, size_t cap) {
    return e->tok ? la_tokenizer_token_bytes(e->tok, id, buf, cap) : -1;
}

la_status la_engine_detokenize(const la_engine *e, const int32_t *ids, int32_t n, bool skip_special,
                               char **text, size_t *len, la_err *err) {
    if (!e->tok) return la_err_set(err, LA_ERR_INVALID_ARG, "this engine has no tokenizer");
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->cfg.vocab_size)
            return la_err_set(err, LA_ERR_INVALID_ARG, "token id %d at %d is outside the vocabulary [0, %d)",
                              ids[i], i, e->cfg.vocab_size);
    return la_tokenizer_decode(e->tok, ids, n, skip_special, text, len, err);
}

la_status la_engine_tokenize_request(la_engine *e, const la_request_params *p, la_request_tokens **out,
                                     la_err *err) {
    *out = NULL;
    la_request *r = calloc(1, sizeof *r);
    if (!r) return la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    r->method = p->method == LA_METHOD_COUNT ? e->opts.method : p->method;
    if ((unsigned)r->method >= LA_METHOD_COUNT) {
        free(r);
        return la_err_set(err, LA_ERR_INVALID_ARG, "unknown method %d", (int)p->method);
    }
    la_status s = la_request_prepare(e, p, r, err);
    la_request_tokens *t = calloc(1, sizeof *t);
    if (s == LA_OK && !t) s = la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    if (s == LA_OK) {
        t->n_ids = r->n_doc_tokens * (r->n_docs > 0) + r->n_tail;
        t->n_docs = r->n_docs;
        t->first_doc = r->n_docs - p->n_docs > 0 ? r->n_docs - p->n_docs : 0;
        t->n_prompt = r->n_tail;
        t->ids = malloc(sizeof(int32_t) * (size_t)(t->n_ids ? t->n_ids : 1));
        t->doc_lens = calloc((size_t)(t->n_docs + 1), sizeof(int32_t));
        if (!t->ids || !t->doc_lens) s = la_err_set(err, LA_ERR_NO_MEMORY, "request: out of memory");
    }
    if (s == LA_OK) {
        int32_t at = 0;
        for (int32_t d = 0; d < r->n_docs; d++) {
            memcpy(t->ids + at, r->doc_ids[d], sizeof(int32_t) * (size_t)r->doc_len[d]);
            at += r->doc_len[d];
            t->doc_lens[d] = r->doc_len[d];
        }
        memcpy(t->ids + at, r->tail, sizeof(int32_t) * (size_t)r->n_tail);
        t->n_ids = at + r->n_tail;
        *out = t;
        t = NULL;
    }
    la_request_tokens_free(t);
    la_request_free(r);
    return s;
}

void la_request_tokens_free(la_request_tokens *t) {
    if (!t) return;
    free(t->ids);
    free(t->doc_lens);
    free(t);
}

la_status la_engine_reset_prefix_cache(la_engine *e, int64_t *n_dropped, la_err *err) {
    (void)err;
    pthread_mutex_lock(&e->mu);
    uint64_t ticket = ++e->resets_asked;
    pthread_cond_broadcast(&e->cv); /* wakes la_engine_wait_work */
    while (e->resets_done < ticket) pthread_cond_wait(&e->cv, &e->mu);
    if (n_dropped) *n_dropped = e->reset_dropped;
    pthread_mutex_unlock(&e->mu);
    return LA_OK;
}

la_status la_engine_check(la_engine *e, la_err *err) {
    int64_t pins = 0;
    for (la_request *r = e->running_head; r; r = r->next) pins += la_plan_pins(&r->plan);
    for (la_doc_job *j = e->jobs_head; j; j = j->next) pins += j->doc.n_blocks + j->ctx.n_blocks;
    return la_kv_pool_check(e->pool, pins, err);
}

/* ============================================================ destroy ================ */

void la_engine_destroy(la_engine *e) {
    if (!e) return;
    la_engine_drain_async(e); /* a step queued ahead ends before its requests and blocks go */
    if (e->docs) la_doc_store_flush(e->docs); /* copies in flight write into jobs' blocks */
    if (e->pool) {
        uint64_t *cancels;
        int32_t n;
        la_scheduler_intake(e, &cancels, &n);
        free(cancels);
        while (e->waiting_head) {
            la_request *r = e->waiting_head;
            la_request_list_remove(&e->waiting_head, &e->waiting_tail, r);
            la_request_finish_waiting(e, r, LA_FINISH_CANCELLED, LA_ERR_CANCELLED, "engine shut down");
        }
        while (e->running_head) {
            la_request *r = e->running_head;
            la_request_list_remove(&e->running_head, &e->running_tail, r);
            la_request_finish(e, r, LA_FINISH_CANCELLED, LA_ERR_CANCELLED, "engine shut down");
        }
        while (e->jobs_head) {
            la_doc_job *j = e->jobs_head;
            e->jobs_head = j->next;
            la_doc_job_free(e, j, false);
        }
    }
    if (e->builder) la_batch_builder_free(e->builder);
    free(e->builder);
    if (e->spare) la_batch_builder_free(e->spare);
    free(e->spare);
    free(e->ids);
    la_doc_store_destroy(e->docs);
    la_kv_pool_destroy(e->pool);
    la_backend_destroy(e->be);
    la_weights_destroy(e->weights);
    la_encode_cache_destroy(e->doc_tokens);
    la_tokenizer_destroy(e->tok);
    la_chat_template_destroy(e->chat);
    la_engine_grammars_free(e);
    pthread_mutex_destroy(&e->grammar_mu);
    la_choosers_destroy(e);
    free(e->cancel_ids);
    free(e->model_dir);
    free(e->model_name);
    free(e->random_shape);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->step_mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* ============================================================ the KV store =========== */

const char *la_engine_tier_name(la_kv_tier_kind t) { return la_kv_tier_name((la_kv_tier_id)t); }

const char *la_engine_reject_reason_name(int32_t i) {
    return i >= 0 && i < LA_KV_REJECT_COUNT ? la_kv_reject_name((la_kv_reject)i) : NULL;
}

void la_engine_get_store_stats_sized(la_engine *e, la_engine_store_stats *s, size_t struct_size) {
    pthread_mutex_lock(&e->mu);
    la_engine_store_stats snap = e->store_stats;
    pthread_mutex_unlock(&e->mu);
    la_struct_copy_out(s, struct_size, &snap, sizeof snap);
}

la_status la_engine_document_info(la_engine *e, const la_segment *doc, la_method m, const char *cache_salt,
                                  la_document_info *info, la_err *err) {
    if (m == LA_METHOD_COUNT) m = e->opts.method;
    if ((unsigned)m >= LA_METHOD_COUNT) return la_err_set(err, LA_ERR_INVALID_ARG, "unknown method %d", (int)m);
    if (m == LA_METHOD_RECOMPUTE || m == LA_METHOD_PREFIX || m == LA_METHOD_BLOCK_REF)
        return la_err_set(err, LA_ERR_INVALID_ARG, "method %s does not cache documents on their own",
                          la_method_name(m));
    int32_t *ids = NULL, n = 0;
    LA_TRY(la_document_tokens(e, doc, cache_salt, "document", &ids, &n, err));
    int32_t B = e->opts.block_size, nb = (n + B - 1) / B;
    uint64_t *hashes = malloc(sizeof(uint64_t) * (size_t)(nb ? nb : 1));
    if (!hashes) {
        free(ids);
        return la_err_set(err, LA_ERR_NO_MEMORY, "document: out of memory");
    }
    la_hash128 key = {0, 0};
    pthread_mutex_lock(&e->step_mu);
    int32_t where = la_doc_store_where(e->docs, m, cache_salt, ids, n, hashes, &key);
    pthread_mutex_unlock(&e->step_mu);
    free(ids);
    *info = (la_document_info){where, n, nb, key.lo, key.hi, hashes};
    return LA_OK;
}

la_status la_engine_document_where(la_engine *e, const la_segment *doc, la_method m, const char *cache_salt,
                                   int32_t *where, la_err *err) {
    if (m == LA_METHOD_COUNT) m = e->opts.method;
    if (m == LA_METHOD_RECOMPUTE || m == LA_METHOD_PREFIX || m == LA_METHOD_BLOCK_REF) {
        *where = 0;
        return (unsigned)m < LA_METHOD_COUNT ? LA_OK : la_err_set(err, LA_ERR_INVALID_ARG, "unknown method %d", (int)m);
    }
    la_document_info info;
    LA_TRY(la_engine_document_info(e, doc, m, cache_salt, &info, err));
    free(info.block_hashes);
    *where = info.where;
    return LA_OK;
}

void la_engine_store_flush(la_engine *e) {
    pthread_mutex_lock(&e->step_mu);
    la_doc_store_flush(e->docs);
    la_engine_store_stats ss;
    la_doc_store_get_stats(e->docs, &ss);
    pthread_mutex_lock(&e->mu);
    e->store_stats = ss;
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_unlock(&e->step_mu);
}
