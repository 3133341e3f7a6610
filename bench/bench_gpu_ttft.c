/* bench_gpu's TTFT rows (bench_gpu.h): request 1 encodes the documents, request 2 asks its
 * question over them in order B, timed per method. bench_gpu.c's header comment describes the
 * workload, the methods and what each row times. */
#include "bench_gpu.h"

#ifdef LA_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_hooks.h"
#include "base/timer.h"

/* the TTFT methods, in the order they run; --methods picks a subset (profiling one) */
const char *const k_methods[5] = {"recompute", "prefix", "block", "mepic", "lazy"};

static bool want(const bench *bn, const char *method) {
    for (size_t i = 0; i < N_METHODS; i++)
        if (!strcmp(k_methods[i], method)) return (bn->methods >> i) & 1u;
    return false;
}

/* Request 1: encode every document alone into its blocks (lazy / block layout: K rotated
 * at local positions). Returns total ms. */
static double encode_docs(bench *bn, doc_layout *L, bb *b) {
    double total = 0;
    for (int d = 0; d < N_DOCS; d++) {
        L->doc_block[d] = alloc_blocks(bn, L, L->len[d]);
        bb_reset(b);
        for (int32_t i = 0; i < L->len[d]; i++)
            bb_token(b, L->ids[d][i], i, i, (int64_t)(L->doc_block[d] + i / BLOCK) * BLOCK + i % BLOCK);
        for (int32_t k = 0; k * BLOCK < L->len[d]; k++)
            bb_block(b, L->doc_block[d] + k, L->len[d] - k * BLOCK < BLOCK ? L->len[d] - k * BLOCK : BLOCK,
                     k * BLOCK, 0, 0);
        bb_seq(b, 0, L->len[d], 0, false);
        la_batch batch = bb_batch(b);
        double ms = timed_forward(bn, &batch);
        if (ms < 0) return -1;
        total += ms;
    }
    return total;
}

/* The whole prompt in order B from token `from` on, causal over contiguous positions,
 * blocks from `first_block` (prefix reuses the earlier blocks of the same prompt). */
static void build_full(doc_layout *L, bb *b, int32_t first_block, int32_t from) {
    bb_reset(b);
    int32_t t = 0;
    for (int k = 0; k < N_DOCS; k++) {
        int d = k_order_b[k];
        for (int32_t i = 0; i < L->len[d]; i++, t++)
            if (t >= from) bb_token(b, L->ids[d][i], t, t, (int64_t)(first_block + t / BLOCK) * BLOCK + t % BLOCK);
    }
    for (int i = 0; i < L->n_q; i++, t++)
        if (t >= from) bb_token(b, L->q_ids[i], t, t, (int64_t)(first_block + t / BLOCK) * BLOCK + t % BLOCK);
    for (int32_t k = 0; k * BLOCK < t; k++)
        bb_block(b, first_block + k, t - k * BLOCK < BLOCK ? t - k * BLOCK : BLOCK, k * BLOCK, 0, 0);
    bb_seq(b, 0, b->n, 0, true);
}

typedef enum doc_view { VIEW_LAZY, VIEW_MEPIC, VIEW_BLOCK } doc_view;

/* The question of request 2 (order B) over the cached documents, per method's view. */
static void build_question(doc_layout *L, bb *b, doc_view v, const int32_t *copy_block, int32_t tail_block) {
    bb_reset(b);
    int32_t S = 0;
    for (int k = 0; k < N_DOCS; k++) {
        int d = k_order_b[k];
        for (int32_t i = 0; i * BLOCK < L->len[d]; i++) {
            int32_t nv = L->len[d] - i * BLOCK < BLOCK ? L->len[d] - i * BLOCK : BLOCK;
            if (v == VIEW_LAZY) bb_block(b, L->doc_block[d] + i, nv, S + i * BLOCK, S, 0);
            else if (v == VIEW_MEPIC) bb_block(b, L->doc_block[d] + i, nv, S + i * BLOCK, 0, 1);
            else bb_block(b, copy_block[d] + i, nv, S + i * BLOCK, 0, 0);
        }
        S += L->len[d];
    }
    for (int i = 0; i < L->n_q; i++)
        bb_token(b, L->q_ids[i], S + i, S + i, (int64_t)(tail_block + i / BLOCK) * BLOCK + i % BLOCK);
    for (int32_t k = 0; k * BLOCK < L->n_q; k++)
        bb_block(b, tail_block + k, L->n_q - k * BLOCK < BLOCK ? L->n_q - k * BLOCK : BLOCK, S + k * BLOCK, 0, 0);
    bb_seq(b, 0, L->n_q, 0, true);
}

static void emit_ttft(bench *bn, int32_t ctx, const char *method, double ms, double floor_ms, const char *floor_kind,
                      int32_t computed, const char *profile) {
    jbuf *j = bn->out;
    const int32_t variant = la_cuda_attn_prefill_kernel(bn->be);   /* the variant asked for */
    const int32_t ran = la_cuda_attn_prefill_kernel_ran(bn->be); /* the kernel that ran */
    jprintf(j, "%s\n      {\"context\": %d, \"method\": \"%s\", \"prefill_variant\": \"v%d\", "
               "\"prefill_kernel\": \"v%d\", \"ttft_ms\": %.3f, \"floor_ms\": %.3f, \"floor\": \"%s\", "
               "\"ratio_to_floor\": %.3f, \"tokens_computed\": %d",
            bn->first_row ? "" : ",", ctx, method, variant, ran, ms, floor_ms, floor_kind, ms / floor_ms, computed);
    emit_fused(bn);
    char abl[128];
    ablate_name(bn->ablate, abl, sizeof abl);
    jprintf(j, ", \"ablated\": \"%s\"", abl);
    if (profile) jprintf(j, ", \"profile_ms\": %s", profile);
    jprintf(j, "}");
    bn->first_row = false;
    fprintf(stderr, "  %-10s ctx %6d  v%d (ran v%d)  fused %-7s  TTFT %9.3f ms  floor %8.3f ms (%s)  ratio %6.2f%s%s\n",
            method, ctx, variant, ran, fused_name(la_cuda_fused_gemm(bn->be)), ms, floor_ms, floor_kind, ms / floor_ms,
            bn->ablate ? "  ablated " : "", bn->ablate ? abl : "");
}

static char g_prof[8192];

static const char *profile_of(bench *bn, la_batch *b) {
    la_cuda_profile_enable(bn->be, true);
    double ms = timed_forward(bn, b);
    la_cuda_profile_json(bn->be, g_prof, sizeof g_prof);
    la_cuda_profile_enable(bn->be, false);
    return ms < 0 ? "{}" : g_prof;
}

/* Time `batch` (reps after one warm-up) under each --prefill-variants kernel, and with
 * fused_modes under each --fused setting, and emit a row for each; with_profile adds its
 * per-kernel times. Restores the backend's defaults. */
static void ttft_variants(bench *bn, int32_t ctx, const char *method, la_batch *batch, int reps, double *t,
                          double floor_ms, const char *floor_kind, int32_t computed, bool with_profile,
                          bool fused_modes) {
    la_err err = {0};
    const int n_fused = fused_modes ? bn->n_fused : 1;
    for (int f = 0; f < n_fused; f++) {
        la_cuda_fused_gemm_set(bn->be, fused_modes ? bn->fused[f] : bn->default_fused);
        for (int v = 0; v < bn->n_variants; v++) {
            if (la_cuda_attn_prefill_variant_set(bn->be, bn->variants[v], &err) != LA_OK) {
                fprintf(stderr, "bench_gpu: %s\n", err.msg);
                bn->failures++;
                continue;
            }
            for (int a = 0; a < bn->n_ablations; a++) {
                bn->ablate = bn->ablations[a];
                for (int r = 0; r <= reps; r++) t[r] = ablated_forward(bn, batch);
                const char *prof = with_profile && !bn->ablate ? profile_of(bn, batch) : NULL;
                emit_ttft(bn, ctx, method, median(t + 1, reps), floor_ms, floor_kind, computed, prof);
            }
            bn->ablate = 0;
        }
    }
    (void)la_cuda_attn_prefill_variant_set(bn->be, bn->default_variant, &err);
    la_cuda_fused_gemm_set(bn->be, bn->default_fused);
}

/* Block's request 2, reps + 1 times: queue the copies re-rotated by each document's
 * offset, then the question over the copies; t[r] = wall ms of copies and forward. */
static void block_request(bench *bn, const doc_layout *L, const int32_t *copy_block, la_batch *batch, int reps,
                          double *t) {
    for (int r = 0; r <= reps; r++) {
        la_err err = {0};
        double t0 = la_now_ms();
        int32_t S = 0;
        for (int k = 0; k < N_DOCS; k++) {
            int d = k_order_b[k];
            for (int32_t i = 0; i * BLOCK < L->len[d]; i++) {
                int32_t nv = L->len[d] - i * BLOCK < BLOCK ? L->len[d] - i * BLOCK : BLOCK;
                if (bn->be->ops->kv_copy_rotate(bn->be, L->doc_block[d] + i, copy_block[d] + i, nv, S, &err) != LA_OK) {
                    fprintf(stderr, "bench_gpu: kv_copy_rotate: %s\n", err.msg);
                    bn->failures++;
                }
            }
            S += L->len[d];
        }
        double ms = timed_forward(bn, batch);
        t[r] = ms < 0 ? -1 : la_now_ms() - t0;
    }
}

void ttft_context(bench *bn, int32_t ctx, bb *b) {
    const la_model_config *m = &bn->cfg;
    doc_layout L;
    doc_layout_init(&L, ctx, bn->question, m->vocab_size);
    int reps = ctx >= 32768 ? (bn->reps < 3 ? bn->reps : 3) : bn->reps;
    double *t = xrealloc(NULL, sizeof(double) * (size_t)(reps + 1));
    double compute_floor = prefill_flops(m, ctx) / DATASHEET_BF16 * 1e3;
    /* a question over cached documents: the weights and K/V streamed once, or, for a long
     * question, its share of a full prefill's FLOPs (prefix's floor does the same) */
    double stream_floor = (weight_bytes(m) + kv_bytes_per_token(m) * ctx) / hbm_bw(NULL) * 1e3;
    const double question_compute = compute_floor * (double)L.n_q / ctx;
    const char *question_floor = question_compute > stream_floor ? "compute (question's share)" : "weights + KV streaming";
    if (question_compute > stream_floor) stream_floor = question_compute;

    double enc = encode_docs(bn, &L, b);
    fprintf(stderr, "  documents  ctx %6d  encode %9.3f ms (10 forwards, request 1)\n", ctx, enc);
    jprintf(bn->out, "%s\n      {\"context\": %d, \"method\": \"doc_encode\", \"ms\": %.3f}", bn->first_row ? "" : ",",
            ctx, enc);
    bn->first_row = false;

    /* recompute: order B whole prompt */
    int32_t full_block = alloc_blocks(bn, &L, ctx);
    build_full(&L, b, full_block, 0);
    la_batch batch = bb_batch(b);
    if (want(bn, "recompute"))
        ttft_variants(bn, ctx, "recompute", &batch, reps, t, compute_floor, "compute", ctx, ctx == 8192, false);

    /* prefix: reuse the full blocks of document 0 (same tokens in both orders) */
    int32_t reuse = L.len[0] / BLOCK * BLOCK;
    build_full(&L, b, full_block, reuse);
    batch = bb_batch(b);
    double prefix_floor = prefill_flops(m, ctx) / DATASHEET_BF16 * 1e3 * (double)(ctx - reuse) / ctx;
    if (want(bn, "prefix"))
        ttft_variants(bn, ctx, "prefix", &batch, reps, t, prefix_floor, "compute (uncached part)", ctx - reuse, false,
                  false);

    /* block: copies re-rotated by S_d, then the question over the copies */
    int32_t copy_block[N_DOCS], tail = alloc_blocks(bn, &L, L.n_q);
    for (int d = 0; d < N_DOCS; d++) copy_block[d] = alloc_blocks(bn, &L, L.len[d]);
    build_question(&L, b, VIEW_BLOCK, copy_block, tail);
    batch = bb_batch(b);
    for (int f = 0; want(bn, "block") && f < bn->n_fused; f++) {
        la_cuda_fused_gemm_set(bn->be, bn->fused[f]);
        block_request(bn, &L, copy_block, &batch, reps, t);
        emit_ttft(bn, ctx, "block", median(t + 1, reps), stream_floor, question_floor, L.n_q, NULL);
    }
    la_cuda_fused_gemm_set(bn->be, bn->default_fused);

    build_question(&L, b, VIEW_MEPIC, NULL, tail);
    batch = bb_batch(b);
    if (want(bn, "mepic"))
        ttft_variants(bn, ctx, "mepic", &batch, reps, t, stream_floor, question_floor, L.n_q, false, true);

    build_question(&L, b, VIEW_LAZY, NULL, tail);
    batch = bb_batch(b);
    if (want(bn, "lazy"))
        ttft_variants(bn, ctx, "lazy", &batch, reps, t, stream_floor, question_floor, L.n_q, true, true);
    free(t);
    doc_layout_free(&L);
}
#endif
