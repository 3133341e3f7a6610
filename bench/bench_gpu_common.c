/* bench_gpu's shared pieces (bench_gpu.h). */
#include "bench_gpu.h"

#ifdef LA_HAVE_CUDA
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_hooks.h"
#include "base/timer.h"
#include "engine/forward.h"

/* ============================================================ output ================= */

void jprintf(jbuf *j, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(j->s + j->n, j->cap - j->n, fmt, ap);
        va_end(ap);
        if (w >= 0 && (size_t)w < j->cap - j->n) {
            j->n += (size_t)w;
            return;
        }
        j->cap = j->cap ? j->cap * 2 + (size_t)w : 1 << 16;
        j->s = realloc(j->s, j->cap);
        if (!j->s) {
            fprintf(stderr, "bench_gpu: out of memory\n");
            exit(1);
        }
    }
}

/* ============================================================ batches ================ */

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "bench_gpu: out of memory\n");
        exit(1);
    }
    return q;
}

void bb_reset(bb *b) { b->n = b->n_seqs = b->n_blocks = b->n_logit = 0; }

void bb_token(bb *b, int32_t tok, int32_t pos, int32_t kpos, int64_t slot) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 4096;
        b->tokens = xrealloc(b->tokens, 4 * (size_t)b->cap);
        b->pos = xrealloc(b->pos, 4 * (size_t)b->cap);
        b->kpos = xrealloc(b->kpos, 4 * (size_t)b->cap);
        b->logit_rows = xrealloc(b->logit_rows, 4 * (size_t)b->cap);
        b->slots = xrealloc(b->slots, 8 * (size_t)b->cap);
    }
    b->tokens[b->n] = tok, b->pos[b->n] = pos, b->kpos[b->n] = kpos, b->slots[b->n] = slot;
    b->n++;
}

void bb_block(bb *b, int32_t id, int32_t n_valid, int32_t pos0, int32_t q_delta, int32_t k_rope) {
    if (b->n_blocks == b->cap_blocks) {
        b->cap_blocks = b->cap_blocks ? 2 * b->cap_blocks : 4096;
        b->blocks = xrealloc(b->blocks, sizeof(la_attn_block) * (size_t)b->cap_blocks);
    }
    b->blocks[b->n_blocks++] = (la_attn_block){id, n_valid, pos0, q_delta, k_rope};
}

void bb_seq(bb *b, int32_t row0, int32_t n_rows, int32_t block0, bool logit) {
    if (b->n_seqs == b->cap_seqs) {
        b->cap_seqs = b->cap_seqs ? 2 * b->cap_seqs : 64;
        b->seqs = xrealloc(b->seqs, sizeof(la_batch_seq) * (size_t)b->cap_seqs);
    }
    b->seqs[b->n_seqs++] = (la_batch_seq){row0, n_rows, block0, b->n_blocks - block0};
    if (logit) b->logit_rows[b->n_logit++] = row0 + n_rows - 1;
}

la_batch bb_batch(bb *b) {
    return (la_batch){b->n, b->tokens, b->pos, b->kpos, b->slots, b->n_seqs, b->seqs,
                      b->n_blocks, b->blocks, b->n_logit, b->logit_rows};
}

void bb_free(bb *b) {
    free(b->tokens), free(b->pos), free(b->kpos), free(b->logit_rows), free(b->slots), free(b->seqs), free(b->blocks);
    memset(b, 0, sizeof *b);
}

/* ============================================================ forwards =============== */

/* Run one forward; returns wall ms (the token ids or logits on the host included when
 * logit rows are wanted, else a synchronize), or -1 on error. */
double timed_forward(bench *bn, la_batch *b) {
    la_err err = {0};
    if (bn->argmax && b->n_logit_rows > bn->cap_ids) {
        bn->cap_ids = b->n_logit_rows;
        bn->ids = xrealloc(bn->ids, sizeof(int32_t) * (size_t)bn->cap_ids);
    }
    if (!bn->argmax && b->n_logit_rows > bn->cap_logit_rows) {
        fprintf(stderr, "bench_gpu: %d logit rows, the logits buffer holds %d\n", b->n_logit_rows, bn->cap_logit_rows);
        bn->failures++;
        return -1;
    }
    double t0 = la_now_ms();
    la_status s = bn->argmax && b->n_logit_rows > 0 ? la_forward_argmax(bn->be, b, bn->ids, &err)
                                                    : la_forward(bn->be, b, bn->logits, &err);
    if (s == LA_OK && b->n_logit_rows == 0) s = la_cuda_synchronize(bn->be, &err);
    double t1 = la_now_ms();
    if (s != LA_OK) {
        fprintf(stderr, "bench_gpu: %s: forward of %d rows failed: %s\n", bn->shape, b->n_tokens, err.msg);
        bn->failures++;
        return -1;
    }
    return t1 - t0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ============================================================ workload =============== */

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

int32_t alloc_blocks(bench *bn, doc_layout *L, int32_t n_tokens) {
    int32_t first = L->next_block, n = ceil_div(n_tokens, BLOCK);
    if (first + n > bn->n_blocks) {
        fprintf(stderr, "bench_gpu: KV pool too small (%d + %d > %lld blocks)\n", first, n, (long long)bn->n_blocks);
        exit(1);
    }
    L->next_block += n;
    return first;
}

void doc_layout_init(doc_layout *L, int32_t ctx, int32_t n_q, int32_t vocab) {
    memset(L, 0, sizeof *L);
    L->ctx = ctx;
    L->n_q = n_q;
    int32_t docs = ctx - n_q, base = docs / N_DOCS, used = 0;
    for (int d = 0; d < N_DOCS; d++) {
        int32_t len = d == N_DOCS - 1 ? docs - used : base + (int32_t)(rnd() % 11) - 5;
        L->len[d] = len;
        used += len;
        L->ids[d] = xrealloc(NULL, sizeof(int32_t) * (size_t)len);
        for (int32_t i = 0; i < len; i++) L->ids[d][i] = 1000 + (int32_t)(rnd() % (uint32_t)(vocab - 2000));
    }
    L->q_ids = xrealloc(NULL, sizeof(int32_t) * (size_t)n_q);
    for (int i = 0; i < n_q; i++) L->q_ids[i] = 1000 + (int32_t)(rnd() % (uint32_t)(vocab - 2000));
}

void doc_layout_free(doc_layout *L) {
    for (int d = 0; d < N_DOCS; d++) free(L->ids[d]);
    free(L->q_ids);
}

const int k_order_b[N_DOCS] = {0, 2, 1, 3, 4, 5, 6, 7, 8, 9};

/* ============================================================ floors ================= */

/* Parameters in the per-layer matrices (no embedding table, no lm_head). */
double layer_params(const la_model_config *m) {
    double d = m->hidden_size, qd = (double)m->n_heads * m->head_dim, kvd = (double)m->n_kv_heads * m->head_dim;
    return (double)m->n_layers * (d * (qd + 2 * kvd) + qd * d + 3.0 * d * m->intermediate_size);
}
/* Bytes of weights a forward pass streams: every layer matrix and lm_head, bf16. */
double weight_bytes(const la_model_config *m) {
    return 2.0 * (layer_params(m) + (double)m->vocab_size * m->hidden_size);
}
double kv_bytes_per_token(const la_model_config *m) {
    return 2.0 * 2.0 * m->n_layers * m->n_kv_heads * m->head_dim;
}
/* Full prefill of n tokens, causal: 2 P n for the matrices + 2 n^2 L H d for attention
 * (QK^T and PV over the causal half) (+ lm_head for one row): DESIGN.md §8's formula. */
double prefill_flops(const la_model_config *m, double n) {
    return 2.0 * layer_params(m) * n + 2.0 * n * n * m->n_layers * m->n_heads * m->head_dim +
           2.0 * (double)m->vocab_size * m->hidden_size;
}

/* ============================================================ fused settings ========= */

const fused_setting k_fused_settings[7] = {
    {"off", 0},
    {"qkv", LA_CUDA_FUSED_QKV},
    {"gate_up", LA_CUDA_FUSED_GATE_UP},
    {"gemm", LA_CUDA_FUSED_QKV | LA_CUDA_FUSED_GATE_UP},
    {"on", LA_CUDA_FUSED_ALL},
    {"nomerge", LA_CUDA_FUSED_ALL & ~LA_CUDA_FUSED_MERGE},
    {"nokv_write", LA_CUDA_FUSED_ALL & ~LA_CUDA_FUSED_KV_WRITE},
};

/* The --fused name of a mask ("mask" for one no name stands for). */
const char *fused_name(uint32_t mask) {
    for (size_t i = 0; i < sizeof k_fused_settings / sizeof k_fused_settings[0]; i++)
        if (k_fused_settings[i].mask == (mask & LA_CUDA_FUSED_ALL)) return k_fused_settings[i].name;
    return "mask";
}

/* ", \"fused\": ..., \"fused_groups\": ..." of the backend's setting now. */
void emit_fused(bench *bn) {
    static const char *const bits[6] = {"qkv", "gate_up", "add_norm", "swiglu", "merge", "kv_write"};
    const uint32_t f = la_cuda_fused_gemm(bn->be);
    char groups[80] = "";
    for (int b = 0; b < 6; b++)
        if (f & (1u << b)) snprintf(groups + strlen(groups), sizeof groups - strlen(groups), "%s%s",
                                    groups[0] ? "," : "", bits[b]);
    jprintf(bn->out, ", \"fused\": %s, \"fused_groups\": \"%s\"", f ? "true" : "false", groups[0] ? groups : "none");
}

double hbm_bw(const char **source) {
    static double bw;
    static const char *src;
    if (bw == 0) {
        struct cudaDeviceProp p;
        int dev = 0, clock_khz = 0, bus_bits = 0;
        cudaGetDevice(&dev);
        const bool named = cudaGetDeviceProperties(&p, dev) == cudaSuccess;
        if (named && strstr(p.name, "H200")) bw = 4.8e12, src = "datasheet H200";
        else if (named && strstr(p.name, "H100") && strstr(p.name, "HBM3")) bw = 3.35e12, src = "datasheet H100";
        else if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
                 cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess &&
                 clock_khz > 0 && bus_bits > 0)
            bw = 2.0 * clock_khz * 1e3 * bus_bits / 8.0, src = "memory clock x bus width";
        else
            bw = 4.8e12, src = "datasheet H200 (device not known)";
    }
    if (source) *source = src;
    return bw;
}

#endif /* LA_HAVE_CUDA */
