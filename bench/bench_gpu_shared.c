/* bench_gpu: many requests on one document (bench/GPU_NOTES.md, "Shared-block attention").
 *
 * shared_kv_sweep (--shared-kv): N requests (--shared-points, default 1,64,256,1000) decode
 * against one --shared-doc-tokens document (7000) that all of them attend, each with its own
 * tail (a 64-token question and the tokens generated so far):
 *   prefix  the document at position 0 of every request (prefix caching: the same blocks,
 *           absolute positions, q_delta 0)
 *   lazy    the document after an own preamble of 0..60 tokens that differs per request, so
 *           every request has its own q_delta (DESIGN.md §2) on the same blocks
 *   mepic   the same slots, keys stored unrotated (k_rope)
 * once per shared-attention mode (--shared-modes, default 0,auto: la_cuda_attn_shared_set).
 * Per row: TPOT (median of the steps after two warm-ups, eager and with CUDA graphs), the
 * step's KV bytes (the planner's count: each grouped run once plus every request's own
 * blocks; beside it what every request reading its whole list would read), the weight
 * bytes, the floor max(bytes / 4.8 TB/s, FLOPs / 790 TFLOP/s) (at 1000 rows the GEMMs are
 * compute-bound), the host time of the plan and the metadata bytes batch_begin uploads, and
 * the per-kernel profile of one step.
 *
 * The attention kernel alone (always with --shared-kv): one layer's attention op on the same
 * shapes (N decode rows, the shared document plus a 64-token own tail each, GQA of the
 * shape), mean of 20 calls after a warm-up, shared attention off and auto, beside its KV
 * bytes and FLOPs: the numbers bench/attn_peer.py prints for PyTorch on the same shapes.
 *
 * decode_probe (--decode-probe): the LazyAttention paper's decode probe, one 16K-token
 * document (--probe-doc-tokens), 128 decode steps (--probe-steps) with CUDA graphs, plain
 * (q_delta 0), lazy and mepic at batch 1, 8 and 32, shared attention off and auto. The 8B
 * shape's matrices at 16K positions: Llama-3.1-8B differs from Llama-3-8B only in its RoPE
 * scaling, which decode reads from a table either way (its timing is the same).
 */
#include "bench_gpu.h"

#ifdef LA_HAVE_CUDA
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_hooks.h"
#include "base/timer.h"

#define Q_TOKENS 64 /* each request's question, before the generated tokens */

typedef enum kind { KIND_PREFIX, KIND_LAZY, KIND_MEPIC, KIND_COUNT } kind;
static const char *const k_kind_names[KIND_COUNT] = {"prefix", "lazy", "mepic"};

/* N requests on one document: where every request's blocks are. */
typedef struct layout {
    kind k;
    int32_t n_req, doc_tokens, doc_block;
    int32_t *pre;        /* [n_req] own preamble tokens (lazy, mepic) */
    int32_t *pre_block;  /* [n_req] its first block */
    int32_t *tail_block; /* [n_req] the first block of its tail (question + generated) */
} layout;

static int32_t n_blocks_of(int32_t n) { return (n + BLOCK - 1) / BLOCK; }

/* Blocks from the bench's pool for n_req requests with tails of up to max_tail tokens;
 * false when the pool is too small. */
static bool layout_init(layout *L, const bench *bn, kind k, int32_t n_req, int32_t doc_tokens, int32_t max_tail) {
    memset(L, 0, sizeof *L);
    L->k = k;
    L->n_req = n_req;
    L->doc_tokens = doc_tokens;
    L->pre = xrealloc(NULL, sizeof(int32_t) * (size_t)n_req);
    L->pre_block = xrealloc(NULL, sizeof(int32_t) * (size_t)n_req);
    L->tail_block = xrealloc(NULL, sizeof(int32_t) * (size_t)n_req);
    int32_t next = 0;
    L->doc_block = next;
    next += n_blocks_of(doc_tokens);
    for (int32_t r = 0; r < n_req; r++) {
        L->pre[r] = k == KIND_PREFIX ? 0 : (int32_t)((r * 7) % 61);
        L->pre_block[r] = next;
        next += n_blocks_of(L->pre[r]);
        L->tail_block[r] = next;
        next += n_blocks_of(max_tail);
    }
    return next <= bn->n_blocks;
}

static void layout_free(layout *L) {
    free(L->pre);
    free(L->pre_block);
    free(L->tail_block);
}

/* The decode step whose new rows are tail token t (0-based: t >= Q_TOKENS is generated) of
 * every request; blocks of the tail up to and including it. */
static void build_step(const layout *L, bb *b, int32_t t) {
    bb_reset(b);
    for (int32_t r = 0; r < L->n_req; r++) {
        const int32_t block0 = b->n_blocks, pre = L->pre[r];
        for (int32_t i = 0; i * BLOCK < pre; i++)
            bb_block(b, L->pre_block[r] + i, pre - i * BLOCK < BLOCK ? pre - i * BLOCK : BLOCK, i * BLOCK, 0, 0);
        for (int32_t i = 0; i * BLOCK < L->doc_tokens; i++) {
            const int32_t nv = L->doc_tokens - i * BLOCK < BLOCK ? L->doc_tokens - i * BLOCK : BLOCK;
            if (L->k == KIND_MEPIC) bb_block(b, L->doc_block + i, nv, pre + i * BLOCK, 0, 1);
            else bb_block(b, L->doc_block + i, nv, pre + i * BLOCK, pre, 0);
        }
        const int32_t S = pre + L->doc_tokens, n = t + 1;
        for (int32_t i = 0; i * BLOCK < n; i++)
            bb_block(b, L->tail_block[r] + i, n - i * BLOCK < BLOCK ? n - i * BLOCK : BLOCK, S + i * BLOCK, 0, 0);
        bb_token(b, 1000 + (t + r) % 2000, S + t, S + t, (int64_t)(L->tail_block[r] + t / BLOCK) * BLOCK + t % BLOCK);
        bb_seq(b, b->n - 1, 1, block0, true);
    }
}

/* FLOPs of one decode step of n rows over ctx keys each: the matrices, attention, lm_head. */
static double step_flops(const la_model_config *m, double n, double ctx) {
    return 2.0 * layer_params(m) * n + 4.0 * n * ctx * m->n_layers * m->n_heads * m->head_dim +
           2.0 * (double)m->vocab_size * m->hidden_size * n;
}

static const char *mode_name(int32_t mode) {
    return mode == LA_CUDA_ATTN_SHARED_OFF ? "off" : mode == LA_CUDA_ATTN_SHARED_ON ? "on" : "auto";
}

/* What one timed row of decode steps measured. */
typedef struct decode_row {
    double tpot_ms, tpot_graphs_ms, batch_ms;
    long long replayed, recorded;
    la_cuda_attn_shared_stats st;
    char prof[8192];
} decode_row;

/* steps + 2 decode steps from tail token Q_TOKENS on, eager then with graphs (graphs only:
 * graphs_only), the profile of one more eager step (with_profile). */
static void time_decode(bench *bn, const layout *L, bb *b, int32_t steps, bool graphs_only, bool with_profile,
                        decode_row *row) {
    const int warm = 2, n = steps + warm;
    double *t = xrealloc(NULL, sizeof(double) * (size_t)n * 2);
    memset(row, 0, sizeof *row);
    snprintf(row->prof, sizeof row->prof, "{}");
    double build = 0;
    for (int graphs = graphs_only ? 1 : 0; graphs < 2; graphs++) {
        la_cuda_graphs_enable(bn->be, graphs == 1);
        la_cuda_graph_stats g0, g1;
        la_cuda_graph_stats_get(bn->be, &g0);
        for (int s = 0; s < n; s++) {
            const double t0 = la_now_ms();
            build_step(L, b, Q_TOKENS + s);
            build += la_now_ms() - t0;
            la_batch batch = bb_batch(b);
            t[graphs * n + s] = timed_forward(bn, &batch);
        }
        la_cuda_graph_stats_get(bn->be, &g1);
        if (graphs) {
            row->replayed = (long long)(g1.steps_replayed - g0.steps_replayed);
            row->recorded = (long long)(g1.steps_recorded - g0.steps_recorded);
        }
    }
    la_cuda_graphs_enable(bn->be, false);
    la_cuda_attn_shared_stats_get(bn->be, &row->st); /* the last step's plan */
    if (with_profile) {
        build_step(L, b, Q_TOKENS + n);
        la_batch batch = bb_batch(b);
        la_cuda_profile_enable(bn->be, true);
        if (timed_forward(bn, &batch) >= 0) la_cuda_profile_json(bn->be, row->prof, sizeof row->prof);
        la_cuda_profile_enable(bn->be, false);
    }
    row->tpot_ms = graphs_only ? 0 : median(t + warm, steps);
    row->tpot_graphs_ms = median(t + n + warm, steps);
    row->batch_ms = build / (double)(graphs_only ? n : 2 * n);
    free(t);
}

/* ", \"kv_bytes\": ..." of a row: the step's KV bytes with the plan and per sequence, the
 * weights, the floor. */
static void emit_bytes(bench *bn, const decode_row *row, int32_t n_req, double ctx, double *floor_ms) {
    const la_model_config *m = &bn->cfg;
    const double kvt = kv_bytes_per_token(m);
    const double kv = (double)(row->st.keys_shared + row->st.keys_own) * kvt, kv_seq = (double)row->st.keys_per_seq * kvt;
    const double bytes_ms = (weight_bytes(m) + kv) / hbm_bw(NULL) * 1e3;
    const double flops_ms = step_flops(m, n_req, ctx) / DATASHEET_BF16 * 1e3;
    *floor_ms = bytes_ms > flops_ms ? bytes_ms : flops_ms;
    jprintf(bn->out, ", \"kv_bytes\": %.0f, \"kv_bytes_per_seq_path\": %.0f, \"weight_bytes\": %.0f, "
                     "\"bytes_floor_ms\": %.3f, \"flops_floor_ms\": %.3f, \"floor_ms\": %.3f, "
                     "\"shared\": {\"runs\": %lld, \"sharers\": %lld, \"items\": %lld, \"chunks_max\": %lld, "
                     "\"keys_shared\": %lld, \"keys_own\": %lld, \"keys_per_seq\": %lld, \"plan_ms\": %.3f, "
                     "\"meta_bytes\": %lld}",
            kv, kv_seq, weight_bytes(m), bytes_ms, flops_ms, *floor_ms, (long long)row->st.runs,
            (long long)row->st.sharers, (long long)row->st.items, (long long)row->st.chunks_max,
            (long long)row->st.keys_shared, (long long)row->st.keys_own, (long long)row->st.keys_per_seq,
            row->st.plan_ms, (long long)row->st.meta_bytes);
}

/* ============================================================ the sweep ============== */

static void sweep_rows(bench *bn, const shared_opts *o, bb *b) {
    la_err err = {0};
    bool first = true;
    jprintf(bn->out, "\n    \"shared_kv\": [");
    for (int k = 0; k < KIND_COUNT; k++) {
        if (!((o->kinds >> k) & 1u)) continue;
        for (int pi = 0; pi < o->n_points; pi++) {
            const int32_t n_req = o->points[pi];
            layout L;
            if (!layout_init(&L, bn, (kind)k, n_req, o->doc_tokens, Q_TOKENS + o->steps + 8)) {
                fprintf(stderr, "bench_gpu: shared-kv: %d requests on %d tokens do not fit the pool of %lld blocks\n",
                        n_req, o->doc_tokens, (long long)bn->n_blocks);
                bn->failures++;
                layout_free(&L);
                continue;
            }
            for (int mi = 0; mi < o->n_modes; mi++) {
                if (la_cuda_attn_shared_set(bn->be, o->modes[mi], &err) != LA_OK) {
                    fprintf(stderr, "bench_gpu: %s\n", err.msg);
                    bn->failures++;
                    continue;
                }
                decode_row row;
                time_decode(bn, &L, b, o->steps, false, true, &row);
                const double ctx = (double)o->doc_tokens + Q_TOKENS + o->steps / 2 + (k == KIND_PREFIX ? 0 : 30);
                jprintf(bn->out, "%s\n      {\"kind\": \"%s\", \"requests\": %d, \"doc_tokens\": %d, \"shared_mode\": \"%s\", "
                                 "\"tpot_ms\": %.3f, \"tpot_graphs_ms\": %.3f, \"graphs\": {\"steps\": %lld, "
                                 "\"replayed\": %lld}, \"bench_batch_build_ms\": %.3f",
                        first ? "" : ",", k_kind_names[k], n_req, o->doc_tokens, mode_name(o->modes[mi]), row.tpot_ms,
                        row.tpot_graphs_ms, row.recorded, row.replayed, row.batch_ms);
                double floor_ms = 0;
                emit_bytes(bn, &row, n_req, ctx, &floor_ms);
                jprintf(bn->out, ", \"graphs_ratio_to_floor\": %.3f, \"profile_ms\": %s}", row.tpot_graphs_ms / floor_ms,
                        row.prof);
                first = false;
                fprintf(stderr, "  shared-kv %-6s N %4d  shared %-4s  TPOT %8.3f ms  graphs %8.3f ms (%lld/%lld replayed)  "
                                "KV %7.2f GB (per-seq path %8.2f GB)  weights %5.2f GB  floor %7.3f ms  ratio %5.2f  "
                                "plan %.3f ms  meta %.2f MB  runs %lld items %lld\n",
                        k_kind_names[k], n_req, mode_name(o->modes[mi]), row.tpot_ms, row.tpot_graphs_ms, row.replayed,
                        row.recorded, (double)(row.st.keys_shared + row.st.keys_own) * kv_bytes_per_token(&bn->cfg) / 1e9,
                        (double)row.st.keys_per_seq * kv_bytes_per_token(&bn->cfg) / 1e9, weight_bytes(&bn->cfg) / 1e9,
                        floor_ms, row.tpot_graphs_ms / floor_ms, row.st.plan_ms, (double)row.st.meta_bytes / 1e6,
                        (long long)row.st.runs, (long long)row.st.items);
            }
            layout_free(&L);
        }
    }
    jprintf(bn->out, "\n    ],");
    (void)la_cuda_attn_shared_set(bn->be, LA_CUDA_ATTN_SHARED_AUTO, &err);
}

/* ============================================================ the kernel alone ======= */

static void kernel_rows(bench *bn, const shared_opts *o, bb *b) {
    const la_model_config *m = &bn->cfg;
    la_err err = {0};
    bool first = true;
    const int reps = 20;
    jprintf(bn->out, "\n    \"attn_shared_kernel\": [");
    la_cuda_graphs_enable(bn->be, false); /* one op at a time */
    for (int k = 0; k < 2; k++) { /* prefix (the peer's shapes), lazy (a q_delta per request) */
        for (int pi = 0; pi < o->n_points; pi++) {
            const int32_t n_req = o->points[pi];
            layout L;
            if (!layout_init(&L, bn, (kind)k, n_req, o->doc_tokens, Q_TOKENS + 1)) {
                layout_free(&L);
                continue;
            }
            build_step(&L, b, Q_TOKENS - 1); /* the question's last token: 64 own keys */
            la_batch batch = bb_batch(b);
            const int64_t qd = (int64_t)m->n_heads * m->head_dim;
            la_act q, out;
            if (bn->be->ops->act_alloc(bn->be, n_req, qd, &q, &err) != LA_OK ||
                bn->be->ops->act_alloc(bn->be, n_req, qd, &out, &err) != LA_OK) {
                fprintf(stderr, "bench_gpu: attention kernel rows: %s\n", err.msg);
                bn->failures++;
                layout_free(&L);
                continue;
            }
            float *h = xrealloc(NULL, sizeof(float) * (size_t)(n_req * qd));
            for (int64_t i = 0; i < n_req * qd; i++) h[i] = (float)((i * 2654435761u) % 2001) * 1e-3f - 1.f;
            la_cuda_act_upload(bn->be, &q, h, &err);
            free(h);
            for (int mi = 0; mi < o->n_modes; mi++) {
                (void)la_cuda_attn_shared_set(bn->be, o->modes[mi], &err);
                la_status s = bn->be->ops->batch_begin(bn->be, &batch, &err);
                if (s == LA_OK) s = bn->be->ops->attention(bn->be, 0, &q, &out, &err); /* warm-up */
                if (s == LA_OK) s = la_cuda_synchronize(bn->be, &err);
                const double t0 = la_now_ms();
                for (int r = 0; s == LA_OK && r < reps; r++) s = bn->be->ops->attention(bn->be, r % m->n_layers, &q, &out, &err);
                if (s == LA_OK) s = la_cuda_synchronize(bn->be, &err);
                const double us = (la_now_ms() - t0) * 1e3 / reps;
                if (s != LA_OK) {
                    fprintf(stderr, "bench_gpu: attention kernel rows: %s\n", err.msg);
                    bn->failures++;
                    continue;
                }
                la_cuda_attn_shared_stats st;
                la_cuda_attn_shared_stats_get(bn->be, &st);
                const double per_key = 4.0 * m->n_kv_heads * m->head_dim; /* K and V of one key, one layer */
                const double bytes = (double)(st.keys_shared + st.keys_own) * per_key;
                const double flops = 4.0 * n_req * m->n_heads * m->head_dim * ((double)o->doc_tokens + Q_TOKENS);
                jprintf(bn->out, "%s\n      {\"kind\": \"%s\", \"queries\": %d, \"shared_keys\": %d, \"own_keys\": %d, "
                                 "\"n_heads\": %d, \"n_kv_heads\": %d, \"head_dim\": %d, \"shared_mode\": \"%s\", "
                                 "\"attention_us\": %.2f, \"kv_bytes\": %.0f, \"kv_bytes_per_seq_path\": %.0f, "
                                 "\"gb_s\": %.1f, \"tflop_s\": %.1f, \"runs\": %lld, \"items\": %lld, \"plan_ms\": %.3f}",
                        first ? "" : ",", k_kind_names[k], n_req, o->doc_tokens, Q_TOKENS, m->n_heads, m->n_kv_heads,
                        m->head_dim, mode_name(o->modes[mi]), us, bytes, (double)st.keys_per_seq * per_key,
                        bytes / (us * 1e-6) / 1e9, flops / (us * 1e-6) / 1e12, (long long)st.runs, (long long)st.items,
                        st.plan_ms);
                first = false;
                fprintf(stderr, "  attention %-6s %4d queries x %d + %d keys  shared %-4s  %9.2f us  %7.1f GB/s  "
                                "%6.1f TFLOP/s  (KV %.1f MB, per-seq path %.1f MB)\n",
                        k_kind_names[k], n_req, o->doc_tokens, Q_TOKENS, mode_name(o->modes[mi]), us,
                        bytes / (us * 1e-6) / 1e9, flops / (us * 1e-6) / 1e12, bytes / 1e6,
                        (double)st.keys_per_seq * per_key / 1e6);
            }
            bn->be->ops->act_free(bn->be, &q);
            bn->be->ops->act_free(bn->be, &out);
            layout_free(&L);
        }
    }
    jprintf(bn->out, "\n    ],");
    (void)la_cuda_attn_shared_set(bn->be, LA_CUDA_ATTN_SHARED_AUTO, &err);
}

void shared_kv_sweep(bench *bn, const shared_opts *o, bb *b) {
    sweep_rows(bn, o, b);
    kernel_rows(bn, o, b);
}

/* ============================================================ the decode probe ======= */

void decode_probe(bench *bn, int32_t doc_tokens, int32_t steps, bb *b) {
    la_err err = {0};
    static const kind kinds[3] = {KIND_PREFIX, KIND_LAZY, KIND_MEPIC};
    static const char *const names[3] = {"plain", "lazy", "mepic"};
    static const int32_t batches[3] = {1, 8, 32};
    static const int32_t modes[2] = {LA_CUDA_ATTN_SHARED_OFF, LA_CUDA_ATTN_SHARED_AUTO};
    bool first = true;
    jprintf(bn->out, "\n    \"decode_probe\": [");
    for (int bi = 0; bi < 3; bi++)
        for (int mi = 0; mi < 2; mi++) {
            double plain_ms = 0;
            for (int k = 0; k < 3; k++) {
                layout L;
                if (!layout_init(&L, bn, kinds[k], batches[bi], doc_tokens, Q_TOKENS + steps + 8)) {
                    fprintf(stderr, "bench_gpu: decode probe: the pool is too small\n");
                    bn->failures++;
                    layout_free(&L);
                    continue;
                }
                (void)la_cuda_attn_shared_set(bn->be, modes[mi], &err);
                decode_row row;
                time_decode(bn, &L, b, steps, true, false, &row);
                if (k == 0) plain_ms = row.tpot_graphs_ms;
                const double vs = plain_ms > 0 ? (row.tpot_graphs_ms / plain_ms - 1.0) * 100.0 : 0;
                jprintf(bn->out, "%s\n      {\"kind\": \"%s\", \"batch\": %d, \"doc_tokens\": %d, \"steps\": %d, "
                                 "\"shared_mode\": \"%s\", \"tpot_graphs_ms\": %.3f, \"vs_plain_pct\": %.2f, "
                                 "\"replayed\": %lld",
                        first ? "" : ",", names[k], batches[bi], doc_tokens, steps, mode_name(modes[mi]),
                        row.tpot_graphs_ms, vs, row.replayed);
                double floor_ms = 0;
                emit_bytes(bn, &row, batches[bi], (double)doc_tokens + Q_TOKENS + steps / 2, &floor_ms);
                jprintf(bn->out, "}");
                first = false;
                fprintf(stderr, "  probe %-5s batch %2d  %d-token document  shared %-4s  TPOT %8.3f ms (%+.2f%% vs plain)  "
                                "floor %7.3f ms  (%lld/%lld replayed)\n",
                        names[k], batches[bi], doc_tokens, mode_name(modes[mi]), row.tpot_graphs_ms, vs, floor_ms,
                        row.replayed, row.recorded);
                layout_free(&L);
            }
        }
    jprintf(bn->out, "\n    ],");
    (void)la_cuda_attn_shared_set(bn->be, LA_CUDA_ATTN_SHARED_AUTO, &err);
}

#endif /* LA_HAVE_CUDA */
