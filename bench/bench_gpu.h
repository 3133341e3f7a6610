/* bench_gpu's pieces shared by its files (bench/bench_gpu.c: TPOT, the engine check, main;
 * bench_gpu_ttft.c: TTFT; bench_gpu_ablate.c: --ablate; bench_gpu_shared.c: the shared-KV
 * sweep, the attention kernel rows, the decode probe):
 * the JSON buffer, the batch builder, the benchmark's state, timed forwards, the workload,
 * the floors (DESIGN.md §8). bench_gpu_common.c. CUDA builds only (LA_HAVE_CUDA). */
#ifndef LA_BENCH_BENCH_GPU_H
#define LA_BENCH_BENCH_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/config.h"

#define BLOCK 16               /* KV block size of every bench_gpu workload */
#define DATASHEET_BF16 790e12  /* FLOP/s, bf16 dense measured on the H200 (DESIGN.md §8); the
                                  H100 SXM's tensor cores have the same datasheet peak */

/* The memory bandwidth the floors use, bytes/s (DESIGN.md §8), for the GPU this runs on:
 * the datasheet's H200 4.8e12 and H100 SXM 3.35e12 by device name, else the memory clock x
 * bus width x 2 from the device's attributes (*source, when not NULL: "datasheet H200",
 * "datasheet H100", "memory clock x bus width"). The first call asks the device. */
double hbm_bw(const char **source);

/* ---- JSON output ---- */
typedef struct jbuf {
    char *s;
    size_t n, cap;
} jbuf;

void jprintf(jbuf *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- batches ---- */
typedef struct bb {
    int32_t n, cap;
    int32_t *tokens, *pos, *kpos, *logit_rows;
    int64_t *slots;
    int32_t n_seqs, cap_seqs;
    la_batch_seq *seqs;
    int32_t n_blocks, cap_blocks;
    la_attn_block *blocks;
    int32_t n_logit;
} bb;

void *xrealloc(void *p, size_t n); /* exits on failure (a benchmark program) */
void bb_reset(bb *b);
void bb_token(bb *b, int32_t tok, int32_t pos, int32_t kpos, int64_t slot);
void bb_block(bb *b, int32_t id, int32_t n_valid, int32_t pos0, int32_t q_delta, int32_t k_rope);
/* a sequence of rows [row0, row0 + n_rows) over blocks [block0, the last added]; logit: its
 * last row's logits wanted */
void bb_seq(bb *b, int32_t row0, int32_t n_rows, int32_t block0, bool logit);
la_batch bb_batch(bb *b);
void bb_free(bb *b);

/* ---- the benchmark ---- */
#define LA_BENCH_MAX_ABLATIONS 16 /* --ablate rows at most (bench_gpu_ablate.c) */

typedef struct bench {
    const char *shape;
    la_model_config cfg;
    la_backend *be;
    int64_t n_blocks;
    float *logits;
    int reps;
    jbuf *out;
    bool first_row;
    int failures;
    int32_t variants[3]; /* attn_prefill variants to time (--prefill-variants) */
    int n_variants;
    int32_t default_variant; /* the backend's at create */
    uint32_t fused[4];       /* fused-GEMM settings to time (--fused), LA_CUDA_FUSED_* masks */
    int n_fused;
    uint32_t default_fused;  /* the backend's at create */
    bool readbacks[2];       /* TPOT readbacks to time (--readback): true = argmax */
    int n_readbacks;
    bool argmax;             /* this forward's readback: token ids (true) or logits */
    int32_t *ids;            /* [cap_ids] the greedy token ids of the latest forward */
    int32_t cap_ids;
    int32_t cap_logit_rows;  /* rows the logits buffer holds */
    uint32_t methods;        /* TTFT methods to time (--methods), bit i = k_methods[i] */
    int32_t question;        /* the TTFT rows' question, new tokens (--question-tokens, 64) */
    uint32_t ablate;         /* the row's operations taken out (bench_gpu.c ABL_*) */
    uint32_t ablations[LA_BENCH_MAX_ABLATIONS]; /* --ablate: each TTFT and TPOT row once per set (0: the whole step) */
    int n_ablations;
} bench;

/* Run one forward; returns wall ms (the token ids or logits on the host included when
 * logit rows are wanted, else a synchronize), or -1 on error (counted in bn->failures). */
double timed_forward(bench *bn, la_batch *b);
/* ---- --ablate (bench_gpu_ablate.c) ---- */
/* Parse --ablate's argument: comma-separated rows, each "none" or '+'-joined operation names
 * (attention, norm, qkv, kv_write, o, gate_up, swiglu, down, lm_head) into rows[0 .. *n_rows)
 * (at most LA_BENCH_MAX_ABLATIONS); false, with a message on stderr, for a bad list. */
bool ablate_parse(const char *arg, uint32_t *rows, int *n_rows);
/* timed_forward with bn->ablate's operations taken out: the backend's op table swapped for
 * one whose named entries do nothing, for this forward only. A batch without logit rows is
 * not ablated (timed_forward waits for it through la_cuda_synchronize, which refuses the
 * swapped table): -1, counted in bn->failures. */
double ablated_forward(bench *bn, la_batch *batch);
/* The names of ablation set a, '+'-joined, into buf[cap] ("none" for 0); returns buf. */
const char *ablate_name(uint32_t a, char *buf, size_t cap);
/* The median of v[0 .. n) (sorts v). */
double median(double *v, int n);

/* ---- the workload: N_DOCS documents and a question (bench_gpu.c's header; bench_gpu_common.c) ---- */
#define N_DOCS 10 /* documents in every context of TTFT, TPOT and the engine check */

typedef struct doc_layout {
    int32_t ctx;                 /* documents + question, tokens */
    int32_t len[N_DOCS];         /* document lengths, order A */
    int32_t *ids[N_DOCS];
    int32_t n_q;                 /* question tokens */
    int32_t *q_ids;
    int32_t doc_block[N_DOCS];   /* first block of each cached document */
    int32_t next_block;          /* bump allocator over the pool */
} doc_layout;

/* The next number of the xorshift64 stream of the token ids and document lengths (one state for the run). */
uint32_t rnd(void);
/* Take ceil(n_tokens / BLOCK) blocks from L's bump allocator; returns the first block id (exits past bn->n_blocks). */
int32_t alloc_blocks(bench *bn, doc_layout *L, int32_t n_tokens);
/* ctx tokens, n_q of them the question: N_DOCS documents of ~(ctx - n_q) / N_DOCS tokens, ids 1000..vocab-1001. */
void doc_layout_init(doc_layout *L, int32_t ctx, int32_t n_q, int32_t vocab);
/* Free what doc_layout_init allocated (the token ids). */
void doc_layout_free(doc_layout *L);
/* Order B, request 2's: order A with documents 1 and 2 swapped (k_order_b[k] = the k-th document's index). */
extern const int k_order_b[N_DOCS];

/* ---- TTFT (bench_gpu_ttft.c) ---- */
/* the TTFT methods, in the order they run; --methods picks a subset (bit i of bench.methods) */
extern const char *const k_methods[5];
#define N_METHODS (sizeof k_methods / sizeof k_methods[0])
/* The TTFT rows of one context of ctx tokens (documents encoded first), appended to bn->out; b is scratch. */
void ttft_context(bench *bn, int32_t ctx, bb *b);

/* ---- floors (DESIGN.md §8) ---- */
/* Parameters in the per-layer matrices (no embedding table, no lm_head). */
double layer_params(const la_model_config *m);
/* Bytes of weights a forward pass streams: every layer matrix and lm_head, bf16. */
double weight_bytes(const la_model_config *m);
/* K and V bytes of one token over all layers, bf16. */
double kv_bytes_per_token(const la_model_config *m);
/* Full prefill of n tokens, causal: 2 P n for the matrices + 2 n^2 L H d for attention
 * (QK^T and PV over the causal half) (+ lm_head for one row). */
double prefill_flops(const la_model_config *m, double n);

/* ---- fused-GEMM settings (--fused) ---- */
typedef struct fused_setting {
    const char *name;
    uint32_t mask;
} fused_setting;
extern const fused_setting k_fused_settings[7];
/* The --fused name of a mask ("mask" for one no name stands for). */
const char *fused_name(uint32_t mask);
/* ", \"fused\": ..., \"fused_groups\": ..." of the backend's setting now. */
void emit_fused(bench *bn);

/* ---- bench_gpu_shared.c ---- */
typedef struct shared_opts {
    int32_t points[8];   /* concurrency: requests sharing the document */
    int n_points;
    int32_t doc_tokens;  /* the shared document */
    uint32_t kinds;      /* bit 0 prefix, 1 lazy, 2 mepic */
    int32_t modes[3];    /* LA_CUDA_ATTN_SHARED_* to time */
    int n_modes;
    int32_t steps;       /* decode steps per row (2 more warm up) */
} shared_opts;
/* The shared-KV sweep: decode steps of N requests sharing one document, per --shared-points
 * and shared-attention mode, TPOT beside the step's KV bytes (shared once + each request's
 * own) and the weight bytes; then the attention kernel alone on the same shapes (the peer's,
 * bench/attn_peer.py). Appends "shared_kv" and "attn_shared_kernel" arrays to bn->out. */
void shared_kv_sweep(bench *bn, const shared_opts *o, bb *b);
/* The LazyAttention paper's decode probe: one doc_tokens document (Llama-3.1's RoPE scaling
 * on the 8B shape), 128 decode steps, plain / lazy / mepic at batch 1, 8, 32, shared
 * attention off and auto. Appends a "decode_probe" array. */
void decode_probe(bench *bn, int32_t doc_tokens, int32_t steps, bb *b);

#endif
