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
typedef struct la_kv_event la_kv_event; /* below: KV events */

/* ---- engine options ------------------------------------------------------------------- */

/* la_engine_options.n_threads' largest value (a pool of more threads than that is a typo). */
#define LA_MAX_THREADS 1024

/* la_engine_options.cpu_weights. */
typedef enum la_cpu_weights {
    LA_CPU_WEIGHTS_AUTO = 0,
    LA_CPU_WEIGHTS_F32,
    LA_CPU_WEIGHTS_BF16,
    LA_CPU_WEIGHTS_F16,
    LA_CPU_WEIGHTS_BF16_DOT, /* bf16 weights, activations rounded to bf16 in the products
                                (AVX512_BF16 vdpbf16ps, as llama.cpp computes bf16 models):
                                twice the multiply rate of the exact path on prefill; the
                                exact path on a CPU without AVX512_BF16 */
    LA_CPU_WEIGHTS_COUNT
} la_cpu_weights;

/* la_engine_options.cpu_kv. */
typedef enum la_cpu_kv { LA_CPU_KV_F32 = 0, LA_CPU_KV_BF16, LA_CPU_KV_COUNT } la_cpu_kv;

/* la_engine_options.kv_read: when a document found in the disk or shared tier is read. */
typedef enum la_kv_read {
    LA_KV_READ_ALWAYS = 0, /* read whenever a tier has it (the default) */
    LA_KV_READ_AUTO,       /* read when the read is estimated to finish before computing it
                              would (README "Document KV store": the tier's measured read
                              rate against the engine's measured prefill rate) */
    LA_KV_READ_COUNT
} la_kv_read;

/* la_engine_options.async_scheduling: whether the engine queues decode step t + 1 on the device
 * before it reads step t's tokens back (README "Async scheduling"). */
typedef enum la_async_scheduling {
    LA_ASYNC_AUTO = 0, /* on where it overlaps anything: a device whose steps run apart from
                          the host (CUDA); off on the CPU (the default) */
    LA_ASYNC_OFF,
    LA_ASYNC_ON,       /* on wherever the backend can (the CPU too: same answers, no overlap;
                          tests) */
    LA_ASYNC_COUNT
} la_async_scheduling;

/* Caller-allocated, sized (lazyattn/abi.h): initialize with la_engine_options_init(), which
 * writes struct_size; new fields are appended at the end. */
typedef struct la_engine_options {
    size_t struct_size;          /* the caller's sizeof(la_engine_options), written by
                                    la_engine_options_init(): do not set by hand */
    const char *model_dir;       /* Hugging Face model directory (required unless
                                    random_weights is set) */
    const char *random_weights;  /* "llama3-8b", "llama3.2-1b", "tiny": the exact shape with
                                    random weights, no checkpoint (timing only: answers are
                                    meaningless); NULL for a real model */
    const char *tokenizer_dir;   /* tokenizer to use instead of model_dir's (optional); with
                                    random_weights and no tokenizer, requests must be token ids */
    la_device device;            /* LA_DEVICE_CPU (default) or LA_DEVICE_CUDA */
    int n_threads;               /* CPU threads, at most LA_MAX_THREADS; <= 0: one per physical
                                    core the process may run on (its affinity mask) */
    int32_t block_size;          /* KV block size in tokens (default 16) */
    int64_t kv_blocks;           /* KV pool capacity in blocks; 0: from kv_bytes */
    int64_t kv_bytes;            /* KV pool capacity in bytes; 0: a default (1 GiB on CPU,
                                    gpu_memory_fraction of the GPU memory free after the
                                    weights are loaded on CUDA; at most 2^20 blocks) */
    double gpu_memory_fraction;  /* CUDA: share of the free memory for the KV pool, in (0, 1]
                                    (0.8; the rest: activations, workspace, graphs) */
    la_method method;            /* default method of requests (LA_METHOD_LAZY) */
    int32_t max_batch_tokens;    /* per-step token budget: decode rows + prefill chunks; 0 (the
                                    default): vLLM's default for its server, 8192 on a GPU of
                                    70 GiB or more, 2048 on a smaller one, and 1024 on the CPU
                                    (a 1024-row step leaves 1000 running requests 24 tokens of
                                    admission a step); never below max_running.
                                    la_engine_stats.max_batch_tokens says which is in effect */
    int32_t max_running;         /* requests in prefill/decode at once (64) */
    int32_t max_queue;           /* waiting requests before submit says LA_ERR_BUSY (256) */
    int32_t max_docs;            /* documents per request (128; 0: requests carry none) */
    int32_t max_context;         /* tokens per request incl. max_tokens; 0: the model's
                                    max_position_embeddings */

    /* The document KV store below the pool (DESIGN.md §9; README "Document KV store").
     * Tiers are looked up in this order after the pool; any of them may be off. */
    int64_t host_kv_bytes;       /* T1: records in (pinned) host memory, LRU; 0: none */
    const char *kv_dir;          /* T2: records as files, survives restart; NULL: none */
    int64_t kv_dir_bytes;        /* T2 size cap; 0: none */
    bool kv_write_through;       /* true (default): a computed document is written to T2 at
                                    once; false: only when the host tier (or, without one,
                                    the pool) evicts it */
    const char *kv_secret_file;  /* the deployment secret the replicas share (block hashes
                                    and record keys derive from it); NULL: <kv_dir>/secret,
                                    created 0600 when absent; with neither, a random
                                    per-process key */
    const char *kv_store_url;    /* T3: redis://[[USER]:PASSWORD@]HOST:PORT[/DB]; NULL: none */
    double kv_io_timeout_ms;     /* a tier read older than this is given up: computed
                                    instead (0: 10000) */
    /* KV events (what the pool and the tiers hold), on the engine thread; NULL: none */
    void (*on_kv_event)(void *user, const la_kv_event *ev);
    void *kv_event_user;

    /* Chat template (README "Chat templates and documents"): a Jinja file to render chat
     * requests with instead of the model's own (tokenizer_config.json chat_template or
     * chat_template.jinja); NULL: the model's. Compiled at create: a template outside the
     * supported Jinja subset fails la_engine_create with LA_ERR_UNSUPPORTED naming the
     * construct. Needs a tokenizer. */
    const char *chat_template_file;
    /* Host memory in bytes for records on their way between the pool and a tier (a computed
     * document being written through to disk or the shared tier, an evicted one being
     * spilled, one read from a lower tier), beside host_kv_bytes; 0: 4 GiB (allocated as
     * it is used; pinned at start on CUDA, off the engine thread). A computed document that
     * finds it full
     * waits in the pool for it (a burst of new documents outruns the writes); one larger
     * than it is not written (counted in puts_dropped). */
    int64_t kv_staging_bytes;
    /* Recovery (README "Recovery on models not fine-tuned for reuse"): the first N tokens of
     * every document after the first are recomputed in context, per request, on top of the
     * cached documents (EPIC / LegoLink, arXiv 2410.15332); the default of requests under
     * lazy, block, mepic and block-ref. 0: off. */
    int32_t recompute_first;
    /* The dtype the CPU backend keeps weight matrices in (README "CPU backend"): AUTO (0,
     * the default) keeps each in its checkpoint's dtype where the CPU computes with it fast
     * (bf16 and f16 on AVX2 / AVX-512; random weights: f32), else widens it to f32; F32, BF16,
     * F16 convert every matrix to that dtype (bf16 / f16 from an f32 checkpoint round each
     * weight: half the bytes a decode step reads), BF16_DOT as BF16 with bf16 activations in
     * the products (below). Norms and biases stay f32. Ignored by CUDA (bf16). */
    la_cpu_weights cpu_weights;
    /* The CPU backend's KV cache dtype: LA_CPU_KV_F32 (0, the default) or LA_CPU_KV_BF16
     * (half the bytes attention reads per token and per cached document; K and V rounded
     * to bf16 when written: README "CPU backend" states the effect on the logits). Records
     * of the KV store carry it: a store written with one is not read with the other. Ignored
     * by CUDA (bf16). */
    la_cpu_kv cpu_kv;
    /* Threads that read and write the disk and shared tiers (one record per task; the
     * shared tier keeps a Redis connection per thread in use). More threads, more records
     * in flight at once: a disk with a deep queue or a Redis over the network reads faster
     * with more. 0: 2; at most 64. */
    int32_t kv_io_threads;
    /* When a document the disk or the shared tier holds is read rather than computed
     * (la_kv_read; the host tier is always read): ALWAYS (0, the default) or AUTO. */
    la_kv_read kv_read;
    /* Selected recovery (README "Recovery on models not fine-tuned for reuse"; CacheBlend,
     * EuroSys 2025): of the tokens of every document after the first (past its first
     * recompute_first), the fraction R whose layer-1 value changes most in context are
     * recomputed too, chosen by a probe of layers 0-1 over those documents; the default of
     * requests under lazy, block, mepic and block-ref. In [0, 1]; 0: off. */
    float recompute_ratio;
    /* What cached documents are computed after (la_doc_context): the default of requests
     * under lazy, block and mepic. ALONE (0, the default) or PREAMBLE. */
    la_doc_context doc_context;
    /* Async scheduling (la_async_scheduling): while decode step t runs on the device, the
     * engine packs step t + 1 (every running request's next row, its token the one step t
     * chooses, read on the device) and queues it, then reads step t's tokens back and
     * streams them. Only for steps of decode rows whose requests all decode greedily
     * without logits or logprobs and when nothing waits to be admitted; a request that stops
     * at step t (eos, a stop string) has its row of step t + 1 computed and dropped. The
     * tokens are the same as without it. */
    la_async_scheduling async_scheduling;
    /* What a step takes first. false (the default): every decoding request's next row, then
     * prefill chunks (document jobs, questions) in the rest of max_batch_tokens: vLLM's
     * chunked prefill. true: while an admitted request has prefill work ready, a step packs
     * only prefill and the decoding requests wait (SGLang's default): new arrivals get their
     * first token sooner, and the requests already decoding wait for them (their
     * inter-token latency and TPOT rise; under a steady stream of arrivals they wait for as
     * long as prefill work keeps coming). */
    bool prefill_first;
    /* Host memory in bytes for the token ids of documents given as text, keyed by their text
     * (README "Document tokens"): a document seen before is not tokenized again when a
     * request brings it back. A bounded LRU (64 MiB by default: ~2,300 documents of 7,000
     * tokens); 0: off. Exact: a cached document's ids are the tokenizer's. */
    int64_t doc_token_cache_bytes;
} la_engine_options;

/* Defaults for every field (device CPU, block_size 16, method lazy, ...). struct_size: the
 * caller's sizeof(*o) (the macro passes it); writes that many bytes. */
LA_API void la_engine_options_init_sized(la_engine_options *o, size_t struct_size);
#define la_engine_options_init(o) la_engine_options_init_sized((o), sizeof *(o))

/* Load the model (config, weights, tokenizer), create the backend and the KV pool.
 * Caller owns *out; free with la_engine_destroy(). Errors: those of the model loaders
 * (LA_ERR_IO, LA_ERR_FORMAT, LA_ERR_UNSUPPORTED), LA_ERR_INVALID_ARG (options; a
 * struct_size of 0: o was not initialized), LA_ERR_UNSUPPORTED (o sets fields this library
 * does not know, lazyattn/abi.h), LA_ERR_NO_MEMORY. */
LA_API la_status la_engine_create(const la_engine_options *o, la_engine **out, la_err *err);
/* Cancels every request (each gets its DONE event) and frees everything. NULL is a no-op. */
LA_API void la_engine_destroy(la_engine *e);

/* ---- requests ------------------------------------------------------------------------ */

/* One logit_bias entry: bias (added to the logit) for token_id. */
typedef struct la_logit_bias {
    int32_t token_id;
    float bias;
} la_logit_bias;

/* Structured output: what the generated text must be. */
typedef enum la_response_format {
    LA_RESPONSE_TEXT = 0,     /* any text */
    LA_RESPONSE_JSON_OBJECT,  /* a JSON object */
    LA_RESPONSE_JSON_SCHEMA,  /* a JSON value valid against sampling.json_schema (the subset
                                 of src/grammar/json_schema.h) */
} la_response_format;

/* It lies inside la_request_params, whose struct_size covers it (lazyattn/abi.h). */
typedef struct la_sampling_params {
    float temperature;        /* <= 0: greedy (argmax, lowest id on ties) */
    float top_p;              /* nucleus mass in (0, 1]; 1 = off */
    int32_t top_k;            /* 0 = off */
    uint64_t seed;            /* RNG seed for sampling */
    int32_t max_tokens;       /* tokens to generate (>= 1) */
    const char *const *stop;  /* stop strings (borrowed for the submit call) */
    int32_t n_stop;
    bool ignore_eos;          /* keep generating past eos ids */
    /* Logits processors, applied in this order to the raw logits (vLLM's order):
     * allowed tokens / the grammar mask, min_tokens, logit_bias, repetition_penalty,
     * frequency and presence penalties; then temperature, top-k, top-p, min-p. Formulas and
     * sources: engine/sampling.h. Arrays are borrowed for the submit call. */
    float presence_penalty;   /* [-2, 2]; 0 = off */
    float frequency_penalty;  /* [-2, 2]; 0 = off */
    float repetition_penalty; /* (0, 2]; 1 (or 0) = off */
    float min_p;              /* [0, 1]; 0 = off */
    int32_t min_tokens;       /* eos and stop_token_ids cannot end the output (and stop
                                 strings are not looked for) before this many tokens */
    const int32_t *stop_token_ids; /* [n_stop_token_ids]: end the output like eos (the
                                      token's text is not part of it) */
    int32_t n_stop_token_ids;
    const la_logit_bias *logit_bias; /* [n_logit_bias], bias in [-100, 100] */
    int32_t n_logit_bias;
    const int32_t *allowed_token_ids; /* [n_allowed_token_ids]; n > 0: only these tokens */
    int32_t n_allowed_token_ids;
    int32_t n;                /* choices (sequences) from one prompt; 0 or 1: one. They share
                                 the prompt's and the documents' KV blocks and fork at the
                                 first sampled token; choice i draws from seed's stream i */
    bool logprobs;            /* TOKEN events carry logprob (and top_logprobs) */
    int32_t top_logprobs;     /* [0, 20] most likely tokens with their logprobs */
    la_response_format response_format;
    const char *json_schema;  /* LA_RESPONSE_JSON_SCHEMA: the schema as JSON text */
    bool include_stop_str;    /* a matched stop string stays at the end of the text */
} la_sampling_params;

typedef enum la_event_kind { LA_EVENT_TOKEN = 1, LA_EVENT_DONE = 2 } la_event_kind;

typedef enum la_finish_reason {
    LA_FINISH_NONE = 0,
    LA_FINISH_STOP,       /* eos token or stop string */
    LA_FINISH_LENGTH,     /* max_tokens or the context limit */
    LA_FINISH_CANCELLED,  /* la_engine_cancel() or engine destroyed */
    LA_FINISH_ERROR,      /* see la_event.status / error */
} la_finish_reason;

/* Library-allocated (lazyattn/abi.h): grows only at its end. */
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
    int64_t doc_tokens_host;      /* of doc_tokens_reused: loaded from the host tier, */
    int64_t doc_tokens_disk;      /* the disk tier, */
    int64_t doc_tokens_shared;    /* the shared tier (by this request's own document jobs) */
    int64_t doc_tokens_recomputed;/* recovery: document tokens recomputed in context (of
                                     the cached ones; not in doc_tokens_computed) */
    int64_t doc_tokens_probed;    /* selected recovery: document tokens its probe ran
                                     (layer 0 and layer 1's V of each) */
} la_request_stats;

/* Library-allocated (lazyattn/abi.h): grows only at its end. */
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
    int32_t index;                /* the choice (0 .. sampling.n - 1) */
    /* TOKEN with sampling.logprobs: log-softmax of the raw logits (before any processor,
     * temperature or mask: vLLM's "raw_logprobs") at token_id, and the top_logprobs most
     * likely tokens, logprob descending (lowest id on ties) */
    float logprob;
    int32_t n_top;
    const int32_t *top_ids;       /* [n_top] */
    const float *top_logprobs;    /* [n_top] */
} la_event;

/* Called on the engine thread; everything the event points to lives until it returns. */
typedef void (*la_event_fn)(void *user, const la_event *ev);

/* Caller-allocated, sized (lazyattn/abi.h): initialize with la_request_params_init(), which
 * writes struct_size; new fields are appended at the end. */
typedef struct la_request_params {
    size_t struct_size;           /* the caller's sizeof(la_request_params), written by
                                     la_request_params_init(): do not set by hand */
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
    const char *cache_salt;       /* tenant id; NULL: none ("" is refused: it would be none) */
    bool add_special;             /* add BOS as the tokenizer's post-processor does (true) */
    bool return_logits;           /* TOKEN events carry logits */
    bool keep_special_tokens;     /* generated special tokens appear in the text (false:
                                     skipped, as HF's skip_special_tokens=True) */
    la_sampling_params sampling;
    la_event_fn on_event;
    void *user;
    /* Recovery's N (la_engine_options.recompute_first) for this request: >= 0 under lazy,
     * block, mepic and block-ref (0: off); -1: the engine's default */
    int32_t recompute_first;
    /* Selected recovery's R (la_engine_options.recompute_ratio) for this request: in [0, 1]
     * under lazy, block, mepic and block-ref (0: off); negative: the engine's default */
    float recompute_ratio;
    /* What this request's cached documents are computed after (la_doc_context) under lazy,
     * block and mepic; LA_DOC_CONTEXT_COUNT: the engine's default (other methods: ALONE;
     * PREAMBLE is refused there) */
    la_doc_context doc_context;
} la_request_params;

/* Defaults: engine's method, add_special, greedy, top_p 1, max_tokens 16. struct_size: the
 * caller's sizeof(*p) (the macro passes it); writes that many bytes. */
LA_API void la_request_params_init_sized(la_request_params *p, size_t struct_size);
#define la_request_params_init(p) la_request_params_init_sized((p), sizeof *(p))

/* Validate and tokenize the request, then queue it. Thread-safe. Token segments:
 *   preamble: encode(preamble, BOS if add_special);  documents: encode(doc) without BOS;
 *   prompt: encode(prompt), with BOS only if there are no documents and no preamble.
 *   If add_special, there are documents and no preamble, BOS alone is document 0. A prompt
 *   or preamble given as token ids that already starts with BOS gets no second one.
 *   RECOMPUTE / PREFIX concatenate all of it into one prompt.
 * *request_id (may be NULL) is written before the engine thread can see the request, so
 * it is known before any of the request's events can be delivered.
 * Errors (nothing queued): LA_ERR_INVALID_ARG (bad params, invalid UTF-8, empty document,
 * token id out of range, too many documents), LA_ERR_TOO_LONG (prompt + documents +
 * max_tokens over max_context), LA_ERR_BUSY (queue full), LA_ERR_UNSUPPORTED (p sets fields
 * this library does not know, lazyattn/abi.h). */
LA_API la_status la_engine_submit(la_engine *e, const la_request_params *p, uint64_t *request_id,
                                  la_err *err);

/* Cancel a request: it finishes with LA_FINISH_CANCELLED at the next step and every block
 * it held is released (cached documents stay cached). Thread-safe. Returns
 * LA_ERR_NOT_FOUND for an id this engine never issued; cancelling a request that already
 * finished does nothing and returns LA_OK. */
LA_API la_status la_engine_cancel(la_engine *e, uint64_t request_id);

/* ---- driving -------------------------------------------------------------------------- */

/* Run one scheduler step (engine thread only): admit waiting requests, pack decode tokens
 * and prefill chunks under the token budget, run one forward, emit events.
 * Errors: LA_ERR_BACKEND and the like; the requests of the failed step get DONE with
 * ERROR, other requests and the cache are unaffected. */
LA_API la_status la_engine_step(la_engine *e, la_err *err);

/* Whether any request is queued or running, or, as of the last step, the KV store still had
 * work of finished requests in flight (tier reads and writes, pool copies, write-throughs
 * waiting for staging memory): steps poll it and count what it did; or a document that
 * cancelled requests started is still being computed: steps finish it (it is cached for the
 * next request) and release its blocks. Thread-safe. */
LA_API bool la_engine_has_work(la_engine *e);

/* Block until there is work or timeout_ms passes (engine thread). */
LA_API void la_engine_wait_work(la_engine *e, int timeout_ms);

/* Run steps until no request is left (convenience for single-threaded callers). */
LA_API la_status la_engine_run(la_engine *e, la_err *err);

/* ---- introspection -------------------------------------------------------------------- */

/* Caller-allocated, filled through la_engine_get_stats (lazyattn/abi.h); grows at its end. */
typedef struct la_engine_stats {
    int64_t n_waiting, n_running;
    int64_t requests_ok, requests_error, requests_cancelled; /* finished, by outcome: each of a
                                                                 request's n choices once */
    int64_t doc_tokens_reused, doc_tokens_computed;   /* totals over finished plans */
    int64_t prefix_tokens_reused, prompt_tokens;
    int64_t kv_blocks_total, kv_blocks_free, kv_blocks_cached, kv_blocks_pinned;
    int64_t kv_hits, kv_misses, kv_evictions;
    int64_t n_preemptions, n_steps;
    int32_t block_size;
    int64_t documents_computed;   /* document jobs that ran the model */
    int64_t documents_loaded;     /* document jobs served by a store tier instead */
    double choose_s;              /* seconds spent choosing tokens on the host from logits
                                     (processors, masks, sampling, logprobs), summed over
                                     the threads that choose them in parallel */
    double grammar_s;             /* of which computing structured output's token masks */
    /* Where the engine thread's steps go, summed over the steps whose forward succeeded: */
    int64_t steps_computed;       /* those steps */
    int64_t steps_decode;         /* of which every sequence was one decode row */
    int64_t step_rows;            /* rows over those steps */
    double step_schedule_s;       /* seconds before the forward: intake, admission, the KV store's
                                     step, packing the batch */
    double step_forward_s;        /* in the forward: the backend's batch setup, its kernels and
                                     the wait for the step's logits or token ids (on a device
                                     that queues work: also waits for earlier queued work, and
                                     a step without logits may return before its kernels ran) */
    double step_after_s;          /* after the forward: sampling, accepting tokens, retiring */
    double step_decode_forward_s; /* the decode-only steps' forward seconds */
    double step_decode_s;         /* the decode-only steps' whole seconds (schedule, forward, after) */
    double step_batch_begin_s;    /* of step_forward_s: the backend's batch setup on the host (its
                                     checks, the attention plan, the metadata upload; the GPU
                                     waits for it; on a device that queues work, it may also
                                     wait for a step queued before) */
    double step_decode_batch_begin_s; /* of step_decode_forward_s: the same */
    int32_t max_batch_tokens;     /* the per-step token budget in effect (la_engine_options) */
    int64_t steps_async;          /* of steps_decode: those queued on the device and read back
                                     one call later (la_engine_options.async_scheduling) */
    int64_t rows_dropped;         /* rows such steps computed for requests that had stopped the
                                     step before (eos, a stop string): their tokens were dropped */
    bool async_scheduling;        /* whether async scheduling is on (la_engine_options) */
    /* Lookups of documents given as text (requests, la_engine_tokenize_request,
     * la_engine_document_info / _where) that the document token cache served / that went to
     * the tokenizer, refused text included (la_engine_options.doc_token_cache_bytes; both 0
     * with it off), and what it holds now: entries, and bytes of entries and hash map */
    int64_t doc_token_cache_hits, doc_token_cache_misses;
    int64_t doc_token_cache_entries, doc_token_cache_bytes;
    int64_t doc_token_cache_evictions; /* entries dropped for room, least recently used first */
} la_engine_stats;

/* Thread-safe snapshot. struct_size: the caller's sizeof(*s) (the macro passes it). */
LA_API void la_engine_get_stats_sized(la_engine *e, la_engine_stats *s, size_t struct_size);
#define la_engine_get_stats(e, s) la_engine_get_stats_sized((e), (s), sizeof *(s))

/* ---- the document KV store ------------------------------------------------------------ */

typedef enum la_kv_tier_kind { LA_KV_TIER_KIND_HOST = 0, LA_KV_TIER_KIND_DISK, LA_KV_TIER_KIND_SHARED,
                               LA_KV_TIER_KIND_COUNT } la_kv_tier_kind;

/* Frozen layout (lazyattn/abi.h): la_engine_store_stats holds an array of it. */
typedef struct la_engine_tier_stats {
    bool enabled;
    int64_t hits, misses;             /* document lookups this tier served / did not */
    int64_t bytes_read, bytes_written;
    double read_s, write_s;           /* seconds spent in reads / writes (I/O threads) */
    int64_t writes, write_failures, evictions, errors;
    int64_t records, bytes;           /* held now */
    bool down;                        /* its last operation failed */
} la_engine_tier_stats;

/* Caller-allocated, filled through la_engine_get_store_stats (lazyattn/abi.h); grows at its
 * end. */
typedef struct la_engine_store_stats {
    la_engine_tier_stats tier[LA_KV_TIER_KIND_COUNT];
    int64_t rejected;                 /* records read but not used (damaged, foreign, short) */
    int64_t rejected_by_reason[16];   /* indexed like la_engine_reject_reason_name */
    int64_t timeouts;                 /* reads given up after kv_io_timeout_ms */
    int64_t writebacks;               /* documents the pool evicted into the host tier */
    int64_t spills;                   /* host-tier records written to disk on eviction */
    int64_t puts_dropped;             /* records not stored: no host memory free */
    double copy_in_s, copy_out_s;     /* seconds of pool <-> host copies (as polled) */
    int64_t copy_in_bytes, copy_out_bytes;
    int64_t promotions;               /* host-tier records moved into the pool: they leave the
                                         host tier (the pool and the host tier hold a document
                                         once between them) */
    int64_t lookups_dropped;          /* lower-tier lookups not made: no staging memory free
                                         (the document is computed; kv_staging_bytes) */
    /* kv_read AUTO: documents computed instead of read from a tier, the read estimated
     * slower (by tier, la_kv_tier_kind; the disk tier held them, the shared tier may have),
     * and the estimates' inputs now: each tier's read rate (bytes per second per I/O thread,
     * over its recent reads; 0: none yet) and the engine's prefill rate (tokens per second
     * that extra rows in a step cost: 1 / b of step ms = a + b x rows fitted over the recent
     * steps, or LA_KV_PREFILL_TOKENS_PER_S; 0: not known yet) */
    int64_t reads_skipped[LA_KV_TIER_KIND_COUNT];
    double read_bytes_per_s[LA_KV_TIER_KIND_COUNT];
    double prefill_tokens_per_s;
} la_engine_store_stats;

/* "host", "disk", "shared". */
LA_API const char *la_engine_tier_name(la_kv_tier_kind t);
/* Name of rejected_by_reason[i] ("short", "payload_checksum", ...), NULL past the last. */
LA_API const char *la_engine_reject_reason_name(int32_t i);

/* Thread-safe snapshot (all zero when the engine has no store). struct_size: the caller's
 * sizeof(*s) (the macro passes it). */
LA_API void la_engine_get_store_stats_sized(la_engine *e, la_engine_store_stats *s, size_t struct_size);
#define la_engine_get_store_stats(e, s) la_engine_get_store_stats_sized((e), (s), sizeof *(s))

/* Where a document (as a request would give it: text with optional title, or ids) stands
 * for method m (LA_METHOD_COUNT: the default) and cache_salt: 0 = nowhere, 1 = in the
 * pool, 2 = host tier, 3 = disk tier, 4 = the shared tier may have it. Thread-safe (waits
 * for a step in progress). Errors: as la_engine_submit's for a document. */
LA_API la_status la_engine_document_where(la_engine *e, const la_segment *doc, la_method m, const char *cache_salt,
                                          int32_t *where, la_err *err);

/* What names a document in the KV cache and the store, as la_engine_document_where takes
 * it: its record key (the same on every replica sharing the deployment secret) and the
 * low 64 bits of each block's hash (what KV events report). */
typedef struct la_document_info {
    int32_t where;                /* as la_engine_document_where */
    int32_t n_tokens, n_blocks;
    uint64_t key_lo, key_hi;
    uint64_t *block_hashes;       /* [n_blocks]; caller frees with free() */
} la_document_info;
/* Thread-safe. Errors: as la_engine_document_where; LA_ERR_INVALID_ARG for a method that
 * does not cache documents on their own (recompute, prefix, block-ref). */
LA_API la_status la_engine_document_info(la_engine *e, const la_segment *doc, la_method m, const char *cache_salt,
                                         la_document_info *info, la_err *err);

/* Wait until every queued store write has finished (ingest, shutdown, a pre-warm that
 * promises persistence). Thread-safe (waits for a step in progress). */
LA_API void la_engine_store_flush(la_engine *e);

/* ---- KV events -------------------------------------------------------------------------- */

typedef enum la_kv_event_kind { LA_KV_EVENT_STORED = 1, LA_KV_EVENT_REMOVED, LA_KV_EVENT_CLEARED } la_kv_event_kind;
typedef enum la_kv_medium { LA_KV_MEDIUM_GPU = 0, LA_KV_MEDIUM_CPU, LA_KV_MEDIUM_DISK } la_kv_medium;

/* A change of what one medium holds, in vLLM's terms (BlockStored / BlockRemoved /
 * AllBlocksCleared). Hashes are the low 64 bits of the blocks' 128-bit hashes. */
/* Library-allocated (lazyattn/abi.h): grows only at its end. */
struct la_kv_event {
    la_kv_event_kind kind;
    la_kv_medium medium;
    int32_t n_blocks;
    const uint64_t *block_hashes;     /* [n_blocks] */
    bool has_parent;                  /* STORED: parent_hash is the block before the first */
    uint64_t parent_hash;
    const int32_t *token_ids;         /* STORED: [n_tokens] the blocks' tokens */
    int32_t n_tokens;
    int32_t block_size;
    bool is_document;                 /* STORED: the blocks are a document's */
    uint64_t doc_key_lo, doc_key_hi;  /* its record key (the same on every replica) */
    int32_t doc_block0;               /* index of block_hashes[0] in the document */
    int32_t doc_n_tokens;
};

/* Model facts for callers: vocabulary size, context limit, model name (directory base
 * name), and tokenizer access for counting tokens. Strings valid while e lives. */
LA_API int32_t la_engine_vocab_size(const la_engine *e);
LA_API int32_t la_engine_max_context(const la_engine *e);
LA_API const char *la_engine_model_name(const la_engine *e);
LA_API const char *la_engine_device_name(const la_engine *e);

/* Tokenize text with the engine's tokenizer (thread-safe). *ids: caller frees with free().
 * Errors: LA_ERR_INVALID_ARG (invalid UTF-8). */
LA_API la_status la_engine_tokenize(const la_engine *e, const char *text, size_t len, bool add_special,
                                    int32_t **ids, int32_t *n_ids, la_err *err);

/* The bytes token id adds to decoded text in the middle of a stream (raw: a token holding
 * part of a UTF-8 character gives that part). Writes min(length, cap) bytes to buf;
 * returns the length, or -1 for an id without a token (or an engine without a tokenizer).
 * Thread-safe. */
LA_API int64_t la_engine_token_bytes(const la_engine *e, int32_t id, char *buf, size_t cap);

/* Decode ids as the engine streams them (skip_special: HF's skip_special_tokens). *text:
 * caller frees with free(); *len may be NULL. Errors: LA_ERR_INVALID_ARG (an id outside the
 * vocabulary, no tokenizer), LA_ERR_NO_MEMORY. Thread-safe. */
LA_API la_status la_engine_detokenize(const la_engine *e, const int32_t *ids, int32_t n, bool skip_special,
                                      char **text, size_t *len, la_err *err);

/* The tokens a request would be computed from, as la_engine_submit lays them out:
 * documents (the preamble first) then the prompt, for the request's method.
 * Library-allocated (lazyattn/abi.h): grows only at its end. */
typedef struct la_request_tokens {
    int32_t *ids;        /* [n_ids]: documents in order, then the prompt after them */
    int32_t n_ids;
    int32_t n_docs;      /* documents as the engine lays them out (blockwise methods; for
                            recompute / prefix they are inside the prompt: 0) */
    int32_t *doc_lens;   /* [n_docs] tokens of each */
    int32_t first_doc;   /* index of the caller's first document: a preamble (the chat
                            template's system block, or BOS alone) comes before it */
    int32_t n_prompt;    /* tokens after the documents */
} la_request_tokens;

/* Tokenize p as la_engine_submit would (chat template, documents, BOS), without
 * submitting. *out: library-allocated, free it with la_request_tokens_free (NULL on error).
 * Errors: those of la_engine_submit's preparation (LA_ERR_INVALID_ARG, LA_ERR_NO_MEMORY).
 * Thread-safe. */
LA_API la_status la_engine_tokenize_request(la_engine *e, const la_request_params *p, la_request_tokens **out,
                                            la_err *err);
/* Frees t and its arrays; NULL is a no-op. */
LA_API void la_request_tokens_free(la_request_tokens *t);

/* Drop every cached KV block no running request uses (documents and prefix blocks alike;
 * each leaves the index as an eviction does: write-back to the host tier and KV events
 * included) and say how many in *n_dropped. Runs on the engine thread at the start of its
 * next step: call it from another thread while one steps the engine (the server's engine
 * thread), never from the engine thread itself. Errors: none (LA_OK). */
LA_API la_status la_engine_reset_prefix_cache(la_engine *e, int64_t *n_dropped, la_err *err);

/* Debug-build accounting check of the KV pool against the pins every live plan and job
 * holds (DESIGN acceptance: no leaked references). Engine thread only. */
LA_API la_status la_engine_check(la_engine *e, la_err *err);

/* ---- model facts without loading weights ---------------------------------------------- */

/* Caller-allocated, filled through la_model_info_load (lazyattn/abi.h); grows at its end. */
typedef struct la_model_info {
    int32_t vocab_size, hidden_size, intermediate_size, n_layers, n_heads, n_kv_heads, head_dim;
    double rms_norm_eps, rope_theta;
    const char *rope_type;        /* "default", "linear", "llama3" */
    double rope_factor;           /* linear / llama3 */
    int64_t max_position_embeddings;
    bool tie_word_embeddings;
    int32_t bos_id, n_eos_ids, eos_ids[8];
    int64_t n_params;             /* from the config's shapes */
    const char *family;           /* "llama", "mistral", "qwen2", "qwen3" (static storage) */
    bool qkv_bias, qk_norm;       /* Qwen2's q/k/v biases; Qwen3's q_norm / k_norm */
    int64_t sliding_window;       /* 0: none; else the config's window, which caps the context */
} la_model_info;

/* Read <dir>/config.json (+ generation_config.json). struct_size: the caller's sizeof(*info)
 * (the macro passes it). Errors: as la_engine_create's config errors. */
LA_API la_status la_model_info_load_sized(const char *dir, la_model_info *info, size_t struct_size,
                                          la_err *err);
#define la_model_info_load(dir, info, err) la_model_info_load_sized((dir), (info), sizeof *(info), (err))

#ifdef __cplusplus
}
#endif
#endif
