/* lazyattn: the engine's public C API (DESIGN.md §6).
 *
 * Create an engine from a Hugging Face model directory, submit requests (a prompt plus
 * documents beside it), drive it with la_engine_step() on one thread (the engine thread),
 * and receive token events through each request's callback. la_engine_submit() and
 * la_engine_cancel() may be called from any thread.
 *
 *   la_engine_options o; la_engine_options_init(&o); o.model_dir = "models/rag-tiny";
 *   la_engine *e; la_engine_create(&o, &e, &err);
 *   la_request_params p; la_request_params_init(&p); p.prompt.text = "Question: ...";
 *   p.docs = docs; p.n_docs = 3; p.on_event = cb; p.user = ctx;
 *   uint64_t id; la_engine_submit(e, &p, &id, &err);
 *   while (la_engine_has_work(e)) la_engine_step(e, &err);
 *   la_engine_destroy(e);
 */
#ifndef LAZYATTN_LAZYATTN_H
#define LAZYATTN_LAZYATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/status.h"
#include "lazyattn/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct la_engine la_engine;

/* ---- engine options ------------------------------------------------------------------- */

typedef struct la_engine_options {
    const char *model_dir;       /* Hugging Face model directory (required unless
                                    random_weights is set) */
    const char *random_weights;  /* "llama3-8b", "llama3.2-1b", "tiny": the exact shape with
                                    random weights, no checkpoint (timing only: answers are
                                    meaningless); NULL for a real model */
    const char *tokenizer_dir;   /* tokenizer to use instead of model_dir's (optional); with
                                    random_weights and no tokenizer, requests must be token ids */
    la_device device;            /* LA_DEVICE_CPU (default) or LA_DEVICE_CUDA */
    int n_threads;               /* CPU threads; <= 0: all cores */
    int32_t block_size;          /* KV block size in tokens (default 16) */
    int64_t kv_blocks;           /* KV pool capacity in blocks; 0: from kv_bytes */
    int64_t kv_bytes;            /* KV pool capacity in bytes; 0: a default (1 GiB on CPU,
                                    gpu_memory_fraction of the GPU memory free after the
                                    weights are loaded on CUDA; at most 2^20 blocks) */
    double gpu_memory_fraction;  /* CUDA: share of the free memory for the KV pool, in (0, 1]
                                    (0.8; the rest: activations, workspace, graphs) */
    la_method method;            /* default method of requests (LA_METHOD_LAZY) */
    int32_t max_batch_tokens;    /* per-step token budget: decode + prefill chunks (1024) */
    int32_t max_running;         /* requests in prefill/decode at once (64) */
    int32_t max_queue;           /* waiting requests before submit says LA_ERR_BUSY (256) */
    int32_t max_docs;            /* documents per request (128) */
    int32_t max_context;         /* tokens per request incl. max_tokens; 0: the model's
                                    max_position_embeddings */
} la_engine_options;

void la_engine_options_init(la_engine_options *o);

/* Load the model (config, weights, tokenizer), create the backend and the KV pool.
 * Caller owns *out; free with la_engine_destroy(). Errors: those of the model loaders
 * (LA_ERR_IO, LA_ERR_FORMAT, LA_ERR_UNSUPPORTED), LA_ERR_INVALID_ARG (options),
 * LA_ERR_NO_MEMORY. */
la_status la_engine_create(const la_engine_options *o, la_engine **out, la_err *err);
/* Cancels every request (each gets its DONE event) and frees everything. NULL is a no-op. */
void la_engine_destroy(la_engine *e);

/* ---- requests ------------------------------------------------------------------------ */

typedef struct la_sampling_params {
    float temperature;        /* <= 0: greedy (argmax, lowest id on ties) */
    float top_p;              /* nucleus mass in (0, 1]; 1 = off */
    int32_t top_k;            /* 0 = off */
    uint64_t seed;            /* RNG seed for sampling */
    int32_t max_tokens;       /* tokens to generate (>= 1) */
    const char *const *stop;  /* stop strings (borrowed for the submit call) */
    int32_t n_stop;
    bool ignore_eos;          /* keep generating past eos ids */
} la_sampling_params;

/* A span of input: text (UTF-8, `len` bytes or NUL-terminated when len == 0), or token
 * ids when ids != NULL (then text is ignored). */
typedef struct la_segment {
    const char *text;
    size_t len;
    const int32_t *ids;
    int32_t n_ids;
    const char *title;  /* documents of chat requests: rendered "- Title: {title}\n{text}\n" */
} la_segment;

/* Chat formatting of la_request_params.messages (model/prompt_template.h). */
typedef enum la_chat_format {
    LA_CHAT_FORMAT_AUTO = 0, /* from tokenizer_config.json's chat_template */
    LA_CHAT_FORMAT_LLAMA3,   /* <|start_header_id|>role<|end_header_id|> ... <|eot_id|> */
    LA_CHAT_FORMAT_TULU,     /* <|user|> / <|assistant|> */
} la_chat_format;

typedef struct la_chat_message {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;  /* UTF-8 */
} la_chat_message;

typedef enum la_event_kind { LA_EVENT_TOKEN = 1, LA_EVENT_DONE = 2 } la_event_kind;

typedef enum la_finish_reason {
    LA_FINISH_NONE = 0,
    LA_FINISH_STOP,       /* eos token or stop string */
    LA_FINISH_LENGTH,     /* max_tokens or the context limit */
    LA_FINISH_CANCELLED,  /* la_engine_cancel() or engine destroyed */
    LA_FINISH_ERROR,      /* see la_event.status / error */
} la_finish_reason;

typedef struct la_request_stats {
    int32_t n_prompt_tokens;      /* documents + prompt, as computed */
    int32_t n_doc_tokens;         /* tokens in documents (incl. preamble) */
    int64_t doc_tokens_reused;    /* document tokens served from the cache */
    int64_t doc_tokens_computed;  /* document tokens this request's plan computed */
    int64_t prefix_tokens_reused; /* prompt tokens after the documents (or, for prefix,
                                     from the prompt start) served from the cache */
    int32_t n_generated;
    int32_t n_preemptions;
    double queue_ms;              /* submit -> admitted */
    double ttft_ms;               /* submit -> first token */
    double tpot_ms;               /* mean time per output token after the first */
    double e2e_ms;                /* submit -> done */
} la_request_stats;

typedef struct la_event {
    uint64_t request_id;
    la_event_kind kind;
    int32_t token_id;             /* TOKEN: the sampled token */
    const char *text;             /* TOKEN: newly final text (may be ""); DONE: "" */
    size_t text_len;
    const float *logits;          /* TOKEN with return_logits: [vocab] f32 that produced it */
    int32_t n_vocab;
    la_finish_reason finish;      /* DONE */
    la_status status;             /* DONE: LA_OK unless finish == ERROR */
    const char *error;            /* DONE with ERROR: message */
    const la_request_stats *stats;/* DONE (and each TOKEN): current stats */
} la_event;

/* Called on the engine thread; everything the event points to lives until it returns. */
typedef void (*la_event_fn)(void *user, const la_event *ev);

typedef struct la_request_params {
    /* Either a raw prompt ... */
    la_segment prompt;            /* text after the documents (the question) */
    la_segment preamble;          /* optional document 0 (e.g. a system block) */
    const la_segment *docs;       /* [n_docs] documents, each tokenized alone, no BOS */
    int32_t n_docs;
    /* ... or chat messages, rendered with the RAG template when there are documents
     * (then prompt and preamble must be empty; see model/prompt_template.h) */
    const la_chat_message *messages;
    int32_t n_messages;
    la_chat_format chat_format;
    la_method method;             /* LA_METHOD_COUNT: the engine's default */
    const char *cache_salt;       /* tenant id; NULL: none */
    bool add_special;             /* add BOS as the tokenizer's post-processor does (true) */
    bool return_logits;           /* TOKEN events carry logits */
    la_sampling_params sampling;
    la_event_fn on_event;
    void *user;
} la_request_params;

void la_request_params_init(la_request_params *p);

/* Validate and tokenize the request, then queue it. Thread-safe. Token segments:
 *   preamble: encode(preamble, BOS if add_special);  documents: encode(doc) without BOS;
 *   prompt: encode(prompt), with BOS only if there are no documents and no preamble.
 *   If add_special, there are documents and no preamble, BOS alone is document 0.
 *   RECOMPUTE / PREFIX concatenate all of it into one prompt.
 * Errors (nothing queued): LA_ERR_INVALID_ARG (bad params, invalid UTF-8, empty document,
 * token id out of range, too many documents), LA_ERR_TOO_LONG (prompt + documents +
 * max_tokens over max_context), LA_ERR_BUSY (queue full). */
la_status la_engine_submit(la_engine *e, const la_request_params *p, uint64_t *request_id,
                           la_err *err);

/* Cancel a request: it finishes with LA_FINISH_CANCELLED at the next step and every block
 * it held is released (cached documents stay cached). Thread-safe. Returns
 * LA_ERR_NOT_FOUND for an id this engine never issued; cancelling a request that already
 * finished does nothing and returns LA_OK. */
la_status la_engine_cancel(la_engine *e, uint64_t request_id);

/* ---- driving -------------------------------------------------------------------------- */

/* Run one scheduler step (engine thread only): admit waiting requests, pack decode tokens
 * and prefill chunks under the token budget, run one forward, emit events.
 * Errors: LA_ERR_BACKEND and the like; the requests of the failed step get DONE with
 * ERROR, other requests and the cache are unaffected. */
la_status la_engine_step(la_engine *e, la_err *err);

/* Whether any request is queued or running. Thread-safe. */
bool la_engine_has_work(la_engine *e);

/* Block until there is work or timeout_ms passes (engine thread). */
void la_engine_wait_work(la_engine *e, int timeout_ms);

/* Run steps until no request is left (convenience for single-threaded callers). */
la_status la_engine_run(la_engine *e, la_err *err);

/* ---- introspection -------------------------------------------------------------------- */

typedef struct la_engine_stats {
    int64_t n_waiting, n_running;
    int64_t requests_ok, requests_error, requests_cancelled;
    int64_t doc_tokens_reused, doc_tokens_computed;   /* totals over finished plans */
    int64_t prefix_tokens_reused, prompt_tokens;
    int64_t kv_blocks_total, kv_blocks_free, kv_blocks_cached, kv_blocks_pinned;
    int64_t kv_hits, kv_misses, kv_evictions;
    int64_t n_preemptions, n_steps;
    int32_t block_size;
} la_engine_stats;

/* Thread-safe snapshot. */
void la_engine_get_stats(la_engine *e, la_engine_stats *s);

/* Model facts for callers: vocabulary size, context limit, model name (directory base
 * name), and tokenizer access for counting tokens. Strings valid while e lives. */
int32_t la_engine_vocab_size(const la_engine *e);
int32_t la_engine_max_context(const la_engine *e);
const char *la_engine_model_name(const la_engine *e);
const char *la_engine_device_name(const la_engine *e);

/* Tokenize text with the engine's tokenizer (thread-safe). *ids: caller frees with free().
 * Errors: LA_ERR_INVALID_ARG (invalid UTF-8). */
la_status la_engine_tokenize(const la_engine *e, const char *text, size_t len, bool add_special,
                             int32_t **ids, int32_t *n_ids, la_err *err);

/* Debug-build accounting check of the KV pool against the pins every live plan and job
 * holds (DESIGN acceptance: no leaked references). Engine thread only. */
la_status la_engine_check(la_engine *e, la_err *err);

/* ---- model facts without loading weights ---------------------------------------------- */

typedef struct la_model_info {
    int32_t vocab_size, hidden_size, intermediate_size, n_layers, n_heads, n_kv_heads, head_dim;
    double rms_norm_eps, rope_theta;
    const char *rope_type;        /* "default", "linear", "llama3" */
    double rope_factor;           /* linear / llama3 */
    int64_t max_position_embeddings;
    bool tie_word_embeddings;
    int32_t bos_id, n_eos_ids, eos_ids[8];
    int64_t n_params;             /* from the config's shapes */
} la_model_info;

/* Read <dir>/config.json (+ generation_config.json). Errors: as la_engine_create's config
 * errors. */
la_status la_model_info_load(const char *dir, la_model_info *info, la_err *err);

#ifdef __cplusplus
}
#endif
#endif
