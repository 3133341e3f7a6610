/* GPU benchmark (bench/GPU_NOTES.md): TTFT of the five methods and TPOT, Llama-3-8B and
 * Llama-3.2-1B shapes with random bf16 weights made on the device (timing only: the
 * answers are meaningless), each number beside its physical floor (DESIGN.md §8).
 *
 *   bench_gpu [--shapes llama3-8b,llama3.2-1b] [--contexts 2048,8192,32768] [--reps N]
 *             [--prefill-variants v2,v3,v4] [--fused off,on|both|qkv|...]
 *             [--readback argmax,logits] [--ablate none,attention,...] [--out FILE]
 *             [--commit SHA] [--methods recompute,prefix,block,mepic,lazy] [--no-engine]
 *             [--no-ttft] [--no-tpot] [--question-tokens 64] [--tpot-batches 1,8,32]
 *             [--tpot-kinds plain,lazy,lazy_shared] [--shared-kv [--shared-points 1,64,256,1000]
 *             [--shared-doc-tokens 7000] [--shared-kinds prefix,lazy,mepic]
 *             [--shared-modes 0,1,auto] [--shared-steps 8]]
 *             [--decode-probe [--probe-doc-tokens 16384] [--probe-steps 128]]
 *
 * Workload: 10 documents and a 64-token question (synthetic token ids; --question-tokens N
 * for the TTFT rows, e.g. a long question that fills the GPU on its own), contexts of about
 * 2K, 8K and 32K tokens. The question's floor is the weights and K/V streamed once, or, when
 * larger, its share of a full prefill's FLOPs. Request 1 has the documents in order A (it caches them); the timed
 * request 2 has order B = A with documents 1 and 2 swapped (so prefix caching can reuse
 * document 0, its best case for a reordering). Per method, what request 2 computes:
 *   recompute  the whole prompt, causal (nothing cached)
 *   prefix     everything after the full blocks of document 0, causal over the prefix
 *   block      copy + re-rotate every cached document block, then the question
 *   mepic      the question; attention rotates every cached key (stored unrotated)
 *   lazy       the question; attention de-rotates the query once per document
 * TTFT = wall time of that step's forward pass (block: plus its copies) from the call to
 * the greedy token id on the host (argmax on the device, as the engine does for greedy
 * requests), median of --reps after one warm-up. The documents were encoded by
 * real forward passes first (timed too: doc_encode_ms). The TTFT rows: bench_gpu_ttft.c.
 *
 * TPOT at 8K: decode steps of batch 1, 8 and 32 sequences, each with its own 8K context
 * (KV filled with random values: decode time does not depend on them), lazy (q_delta per
 * document) against plain paged decode (q_delta 0, same blocks), plus lazy with all
 * sequences sharing the documents' blocks (the real lazy layout). Median of 10 steps.
 * Each is timed twice on the same steps: queued op by op (tpot_ms) and with CUDA graphs
 * for decode steps on (tpot_graphs_ms; the first step of a batch shape runs eagerly, the
 * second captures, the rest replay: the two warm-up steps cover both; "graphs" counts the
 * replays, so a key that changed mid-run shows).
 *
 * --prefill-variants times the recompute, prefix, mepic and lazy rows once per attn_prefill
 * kernel (la_cuda_attn_prefill_variant_set; default: the backend's, v4 on an H100/H200, else
 * v2), in the same run; every TTFT row names the "prefill_variant" asked for (v3 and v4 run
 * v2 at head_dims other than 64 and 128: la_cuda_attn_prefill_kernel) and the "prefill_kernel"
 * that ran (v4 runs v3 for steps with a k_rope block, mepic's questions:
 * la_cuda_attn_prefill_kernel_ran).
 *
 * Every TPOT row names its "decode_variant": v2, the one attn_decode kernel (GPU_NOTES.md
 * numbers the kernels; v1 is deleted).
 *
 * --fused times the block, mepic and lazy TTFT rows (64-row questions) and every TPOT row
 * once per fused-GEMM setting (la_cuda_fused_gemm_set; default: the backend's, all groups
 * unless LA_CUDA_FUSED_GEMM says otherwise): off, qkv, gate_up, gemm (both GEMM groups),
 * on (also the add + norm and SwiGLU fusions, the in-kernel decode merge and the KV write
 * from the QKV GEMM), nomerge (on without that merge: attn_combine after attn_decode),
 * nokv_write (on without qkv_kv_write: split_cols and kv_write); "both" = off,on. Recompute and prefix run with the default (over 128 rows nothing is fused).
 * Every TTFT and TPOT row carries "fused" (any group fused) and "fused_groups".
 *
 * --ablate none,attention,norm+swiglu times every TTFT and TPOT row once per comma-separated set of
 * operations taken out of the step (attention, norm, qkv, kv_write, o, gate_up, swiglu, down,
 * lm_head; '+' joins; none: the whole step): what each costs in the stream, graphs and PDL
 * included (bench_gpu_ablate.c). Every TTFT and TPOT row names what was "ablated".
 *
 * --readback times every TPOT row once per way the step's result reaches the host:
 * argmax (default; la_forward_argmax: greedy token ids, 4 bytes per sequence) or logits
 * (la_forward: every sequence's vocab_size f32 logits, what sampling on the host needs);
 * every TPOT row names its "readback".
 *
 * Per-kernel device times (la_cuda_profile_*) for recompute and lazy at 8K and decode.
 * An engine-level cross-check (public API, --random-weights) times lazy / prefix /
 * recompute TTFT at 8K through la_engine_step with its scheduler (--no-engine skips it;
 * --no-ttft skips the TTFT rows, e.g. to profile the decode steps alone under ncu; --no-tpot
 * the TPOT rows; --methods times only the TTFT rows of the methods named, e.g. one method's
 * kernels under ncu; the documents are encoded as always).
 *
 * --shared-kv: many requests decoding on one shared document (bench_gpu_shared.c: TPOT beside
 * the step's KV and weight bytes, shared-block attention off and auto, and the attention
 * kernel alone on bench/attn_peer.py's shapes); --decode-probe: the LazyAttention paper's
 * decode probe (one 16K-token document, 128 steps, plain / lazy / mepic at batch 1, 8, 32).
 * Prints a table on stderr, writes JSON to --out (or stdout). The files: bench_gpu.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h> /* environ */

#include "backend/backend.h"
#include "base/timer.h"
#include "engine/backend_model.h"
#include "lazyattn/lazyattn.h"
#include "model/config.h"

#ifndef LA_HAVE_CUDA
int main(void) {
    fprintf(stderr, "bench_gpu: this build has no CUDA backend (nvcc was not found)\n");
    return 1;
}
#else
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_hooks.h"
#include "bench_gpu.h"

#define N_QUESTION 64 /* the decode rows' and the engine check's question; TTFT: --question-tokens */

/* ============================================================ TPOT =================== */

typedef enum decode_kind { DEC_PLAIN, DEC_LAZY, DEC_LAZY_SHARED } decode_kind;

static void tpot(bench *bn, int32_t batch_size, decode_kind kind, bb *b, const char *name) {
    const la_model_config *m = &bn->cfg;
    doc_layout L;
    doc_layout_init(&L, 8192, N_QUESTION, m->vocab_size);
    const int32_t prompt = 8192, steps = 12, warm = 2;
    /* per sequence: its documents' blocks (or a contiguous prompt) and a tail */
    int32_t *first = xrealloc(NULL, sizeof(int32_t) * (size_t)batch_size * (N_DOCS + 1));
    int32_t shared[N_DOCS];
    for (int d = 0; d < N_DOCS; d++) shared[d] = alloc_blocks(bn, &L, L.len[d]);
    for (int32_t s = 0; s < batch_size; s++) {
        int32_t *f = first + s * (N_DOCS + 1);
        if (kind == DEC_PLAIN) f[0] = alloc_blocks(bn, &L, prompt + steps + 16);
        else {
            for (int d = 0; d < N_DOCS; d++) f[d] = kind == DEC_LAZY_SHARED ? shared[d] : alloc_blocks(bn, &L, L.len[d]);
            f[N_DOCS] = alloc_blocks(bn, &L, N_QUESTION + steps + 16);
        }
    }
    double *t = xrealloc(NULL, sizeof(double) * (size_t)steps * 2); /* [graphs off, on][step] */
    char prof[8192] = "{}";
    la_cuda_graph_stats g0, g1;
    for (int graphs = 0; graphs < 2; graphs++) {
        la_cuda_graphs_enable(bn->be, graphs == 1);
        la_cuda_graph_stats_get(bn->be, &g0);
        for (int32_t step = 0; step < steps; step++) {
            bb_reset(b);
            for (int32_t s = 0; s < batch_size; s++) {
                const int32_t *f = first + s * (N_DOCS + 1);
                int32_t block0 = b->n_blocks, p = prompt + step;
                if (kind == DEC_PLAIN) {
                    for (int32_t k = 0; k * BLOCK <= p; k++)
                        bb_block(b, f[0] + k, p + 1 - k * BLOCK < BLOCK ? p + 1 - k * BLOCK : BLOCK, k * BLOCK, 0, 0);
                    bb_token(b, 1000 + step, p, p, (int64_t)(f[0] + p / BLOCK) * BLOCK + p % BLOCK);
                } else {
                    int32_t S = 0;
                    for (int d = 0; d < N_DOCS; d++) {
                        for (int32_t i = 0; i * BLOCK < L.len[d]; i++)
                            bb_block(b, f[d] + i, L.len[d] - i * BLOCK < BLOCK ? L.len[d] - i * BLOCK : BLOCK,
                                     S + i * BLOCK, S, 0);
                        S += L.len[d];
                    }
                    int32_t tail_n = N_QUESTION + step + 1; /* question + generated + this token */
                    for (int32_t k = 0; k * BLOCK < tail_n; k++)
                        bb_block(b, f[N_DOCS] + k, tail_n - k * BLOCK < BLOCK ? tail_n - k * BLOCK : BLOCK,
                                 S + k * BLOCK, 0, 0);
                    int32_t ti = tail_n - 1;
                    bb_token(b, 1000 + step, S + ti, S + ti, (int64_t)(f[N_DOCS] + ti / BLOCK) * BLOCK + ti % BLOCK);
                }
                bb_seq(b, b->n - 1, 1, block0, true);
            }
            la_batch batch = bb_batch(b);
            if (step == steps - 1 && !graphs) {
                la_cuda_profile_enable(bn->be, true);
                ablated_forward(bn, &batch);
                la_cuda_profile_json(bn->be, prof, sizeof prof);
                la_cuda_profile_enable(bn->be, false);
            }
            t[graphs * steps + step] = ablated_forward(bn, &batch);
        }
        la_cuda_graph_stats_get(bn->be, &g1);
    }
    la_cuda_graphs_enable(bn->be, false);
    double ms = median(t + warm, steps - warm), ms_graphs = median(t + steps + warm, steps - warm);
    long long replayed = (long long)(g1.steps_replayed - g0.steps_replayed);
    long long recorded = (long long)(g1.steps_recorded - g0.steps_recorded);
    long long captures = (long long)(g1.captures - g0.captures);
    long long failed = (long long)(g1.capture_failures - g0.capture_failures);
    double kv = kv_bytes_per_token(m) * (prompt + N_QUESTION) * batch_size;
    double floor_ms = (weight_bytes(m) + kv) / hbm_bw(NULL) * 1e3;
    jprintf(bn->out, "%s\n      {\"context\": %d, \"batch\": %d, \"kind\": \"%s\", \"tpot_ms\": %.3f, \"floor_ms\": %.3f, "
                     "\"ratio_to_floor\": %.3f, \"tpot_graphs_ms\": %.3f, \"graphs_ratio_to_floor\": %.3f, "
                     "\"graphs\": {\"steps\": %lld, \"replayed\": %lld, \"captures\": %lld, "
                     "\"capture_failures\": %lld}, \"decode_variant\": \"v2\", \"readback\": \"%s\"",
            bn->first_row ? "" : ",", prompt, batch_size, name, ms, floor_ms, ms / floor_ms, ms_graphs,
            ms_graphs / floor_ms, recorded, replayed, captures, failed, bn->argmax ? "argmax" : "logits");
    char abl[128];
    ablate_name(bn->ablate, abl, sizeof abl);
    emit_fused(bn);
    jprintf(bn->out, ", \"ablated\": \"%s\", \"profile_ms\": %s}", abl, prof);
    bn->first_row = false;
    fprintf(stderr, "  decode %-12s batch %2d  fused %-7s  attn_decode v2  %-6s  TPOT %8.3f ms  graphs %8.3f ms "
                    "(%lld/%lld replayed)  floor %7.3f ms  ratio %5.2f / %5.2f%s%s\n", name, batch_size,
            fused_name(la_cuda_fused_gemm(bn->be)), bn->argmax ? "argmax" : "logits",
            ms, ms_graphs, replayed, recorded, floor_ms, ms / floor_ms, ms_graphs / floor_ms,
            bn->ablate ? "  ablated " : "", bn->ablate ? abl : "");
    free(t);
    free(first);
    doc_layout_free(&L);
}

/* ============================================================ peaks ================== */

static void peaks(bench *bn) {
    const la_model_config *m = &bn->cfg;
    la_err err = {0};
    /* device-to-device copy, 2 GiB each way */
    size_t bytes = (size_t)2 << 30;
    void *a = NULL, *c = NULL;
    double copy_gbs = 0, gemm_tflops = 0;
    if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&c, bytes) == cudaSuccess) {
        cudaMemset(a, 1, bytes);
        cudaMemcpy(c, a, bytes, cudaMemcpyDeviceToDevice);
        cudaDeviceSynchronize();
        double t0 = la_now_ms();
        for (int i = 0; i < 10; i++) cudaMemcpy(c, a, bytes, cudaMemcpyDeviceToDevice);
        cudaDeviceSynchronize();
        copy_gbs = 10.0 * 2.0 * (double)bytes / ((la_now_ms() - t0) * 1e-3) / 1e9;
    }
    if (a) cudaFree(a);
    if (c) cudaFree(c);
    (void)cudaGetLastError();
    /* the model's own gate GEMM at 8192 rows through the backend (cuBLAS) */
    la_act x, y;
    int64_t n = 8192;
    if (bn->be->ops->act_alloc(bn->be, n, m->hidden_size, &x, &err) == LA_OK &&
        bn->be->ops->act_alloc(bn->be, n, m->intermediate_size, &y, &err) == LA_OK) {
        float *h = xrealloc(NULL, sizeof(float) * (size_t)(n * m->hidden_size));
        for (int64_t i = 0; i < n * m->hidden_size; i++) h[i] = (float)((int32_t)(rnd() % 2001) - 1000) * 1e-3f;
        la_cuda_act_upload(bn->be, &x, h, &err);
        free(h);
        bn->be->ops->matmul(bn->be, &x, LA_W_GATE, 0, &y, &err);
        la_cuda_synchronize(bn->be, &err);
        double t0 = la_now_ms();
        for (int i = 0; i < 20; i++) bn->be->ops->matmul(bn->be, &x, LA_W_GATE, i % m->n_layers, &y, &err);
        la_cuda_synchronize(bn->be, &err);
        gemm_tflops = 20.0 * 2.0 * (double)n * m->hidden_size * m->intermediate_size / ((la_now_ms() - t0) * 1e-3) / 1e12;
        bn->be->ops->act_free(bn->be, &x);
        bn->be->ops->act_free(bn->be, &y);
    }
    fprintf(stderr, "  peaks: device copy %.0f GB/s (read + write), gate GEMM [%lld x %d] x [%d x %d]^T %.0f TFLOP/s\n",
            copy_gbs, (long long)n, m->hidden_size, m->intermediate_size, m->hidden_size, gemm_tflops);
    const char *bw_source;
    const double bw = hbm_bw(&bw_source);
    jprintf(bn->out, "\n    \"peaks\": {\"copy_gb_s\": %.1f, \"gate_gemm_tflop_s\": %.1f, \"datasheet_bw_gb_s\": %.0f, "
                     "\"datasheet_bw_source\": \"%s\", \"bf16_reference_tflop_s\": %.0f},",
            copy_gbs, gemm_tflops, bw / 1e9, bw_source, DATASHEET_BF16 / 1e12);
}

/* ============================================================ engine cross-check ===== */

typedef struct ev_wait {
    bool done;
    la_request_stats st;
} ev_wait;

static void on_ev(void *user, const la_event *ev) {
    ev_wait *w = user;
    if (ev->kind == LA_EVENT_DONE) {
        w->done = true;
        w->st = *ev->stats;
    }
}

static void engine_check(bench *bn) {
    la_engine_options o;
    la_engine_options_init(&o);
    o.random_weights = bn->shape;
    o.device = LA_DEVICE_CUDA;
    o.kv_bytes = (int64_t)24 << 30;
    o.max_batch_tokens = 16384;
    /* the engine refuses contexts past the model's positions (Llama-3-8B: 8192), so the
     * prompt is one token short of them: room for the first generated token */
    const int32_t max_pos = bn->cfg.max_position_embeddings < 40000 ? (int32_t)bn->cfg.max_position_embeddings : 40000;
    o.max_context = max_pos;
    const int32_t ctx = max_pos - 1 < 8192 ? max_pos - 1 : 8192;
    la_engine *e = NULL;
    la_err err = {0};
    if (la_engine_create(&o, &e, &err) != LA_OK) {
        fprintf(stderr, "bench_gpu: engine (%s): %s\n", bn->shape, err.msg);
        jprintf(bn->out, "\n    \"engine\": {\"error\": \"engine create failed\"},");
        bn->failures++;
        return;
    }
    doc_layout L;
    doc_layout_init(&L, ctx, N_QUESTION, bn->cfg.vocab_size);
    const la_method ms[3] = {LA_METHOD_LAZY, LA_METHOD_PREFIX, LA_METHOD_RECOMPUTE};
    jprintf(bn->out, "\n    \"engine\": {\"context\": %d, \"note\": \"public API, la_engine_step, max_batch_tokens "
                     "16384, request 2 reorders the documents\"", ctx);
    for (int k = 0; k < 3; k++) {
        double ttft[2] = {0, 0};
        for (int req = 0; req < 2; req++) {
            la_segment docs[N_DOCS];
            int32_t flat[8192];
            int32_t n = 0;
            for (int i = 0; i < N_DOCS; i++) {
                int d = req ? k_order_b[i] : i;
                docs[i] = (la_segment){.ids = L.ids[d], .n_ids = L.len[d]};
                for (int32_t t = 0; t < L.len[d]; t++) flat[n++] = L.ids[d][t];
            }
            for (int i = 0; i < N_QUESTION; i++) flat[n++] = L.q_ids[i];
            la_request_params rp;
            la_request_params_init(&rp);
            bool blockwise = ms[k] == LA_METHOD_LAZY;
            if (blockwise) {
                rp.docs = docs;
                rp.n_docs = N_DOCS;
                rp.prompt = (la_segment){.ids = L.q_ids, .n_ids = N_QUESTION};
            } else {
                rp.prompt = (la_segment){.ids = flat, .n_ids = n};
            }
            rp.add_special = false;
            rp.method = ms[k];
            rp.sampling.max_tokens = 1;
            rp.sampling.ignore_eos = true;
            ev_wait w = {0};
            rp.on_event = on_ev;
            rp.user = &w;
            if (la_engine_submit(e, &rp, NULL, &err) != LA_OK) {
                fprintf(stderr, "bench_gpu: engine submit: %s\n", err.msg);
                bn->failures++;
                break;
            }
            while (!w.done) la_engine_step(e, &err);
            ttft[req] = w.st.ttft_ms;
        }
        jprintf(bn->out, ", \"%s_ttft_ms\": {\"request1\": %.3f, \"request2\": %.3f}", la_method_name(ms[k]), ttft[0],
                ttft[1]);
        fprintf(stderr, "  engine %-10s ctx %d  TTFT request 1 %9.3f ms, request 2 (reordered) %9.3f ms\n",
                la_method_name(ms[k]), ctx, ttft[0], ttft[1]);
    }
    jprintf(bn->out, "},");
    doc_layout_free(&L);
    la_engine_destroy(e);
}

/* ============================================================ main =================== */

static int parse_list(const char *s, int32_t *out, int max) {
    int n = 0;
    while (s && *s && n < max) {
        out[n++] = (int32_t)strtol(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

/* --prefill-variants: up to 3 of v<min>..v<max> (flag's value) into v[0..*n); false (and a
 * message) otherwise. */
static bool parse_variants(const char *flag, const char *value, int32_t min, int32_t max, int32_t v[3], int *n) {
    char list[32];
    snprintf(list, sizeof list, "%s", value);
    *n = 0;
    bool bad = false;
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        const int32_t k = tok[0] == 'v' && tok[1] >= '0' + min && tok[1] <= '0' + max && !tok[2] ? tok[1] - '0' : 0;
        if (k == 0 || *n == 3) bad = true;
        else v[(*n)++] = k;
    }
    if (bad || *n == 0) fprintf(stderr, "bench_gpu: %s %s: expected a list of v%d..v%d\n", flag, value, min, max);
    return !bad && *n > 0;
}

int main(int argc, char **argv) {
    const char *shapes = "llama3-8b,llama3.2-1b", *out_path = NULL, *commit = "unknown";
    int32_t ctxs[8] = {2048, 8192, 32768};
    int n_ctx = 3, reps = 5;
    bool engine = true, ttft = true, tpots = true, probe = false, shared = false;
    int32_t question = N_QUESTION; /* --question-tokens */
    int32_t tpot_batches[3] = {1, 8, 32};
    int n_tpot_batches = 3;
    uint32_t tpot_kinds = 7u; /* bit k: kinds[k] of the TPOT loop (plain, lazy, lazy_shared) */
    uint32_t ablate[LA_BENCH_MAX_ABLATIONS] = {0}; /* --ablate: the rows' sets (0: the whole step) */
    int n_ablate = 1;
    shared_opts so = {.points = {1, 64, 256, 1000}, .n_points = 4, .doc_tokens = 7000, .kinds = 3u,
                      .modes = {LA_CUDA_ATTN_SHARED_OFF, LA_CUDA_ATTN_SHARED_AUTO}, .n_modes = 2, .steps = 8};
    int32_t probe_doc = 16384, probe_steps = 128;
    uint32_t methods = (1u << N_METHODS) - 1;
    int32_t variants[3] = {0, 0, 0}; /* 0: the backend's default */
    int n_variants = 1;
    uint32_t fused[4] = {0};
    int n_fused = 0; /* 0: the backend's default */
    bool readbacks[2] = {true, false};
    int n_readbacks = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = argv[++i];
        else if (!strcmp(argv[i], "--contexts") && i + 1 < argc) n_ctx = parse_list(argv[++i], ctxs, 8);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--commit") && i + 1 < argc) commit = argv[++i];
        else if (!strcmp(argv[i], "--no-engine")) engine = false;
        else if (!strcmp(argv[i], "--no-ttft")) ttft = false;
        else if (!strcmp(argv[i], "--no-tpot")) tpots = false;
        else if (!strcmp(argv[i], "--question-tokens") && i + 1 < argc) {
            question = atoi(argv[++i]);
            if (question < 1 || question > 4096) {
                fprintf(stderr, "bench_gpu: --question-tokens %s: expected 1 to 4096\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--tpot-batches") && i + 1 < argc) {
            n_tpot_batches = parse_list(argv[++i], tpot_batches, 3);
            for (int j = 0; j < n_tpot_batches; j++)
                if (tpot_batches[j] < 1 || tpot_batches[j] > 64) n_tpot_batches = 0;
            if (n_tpot_batches == 0) {
                fprintf(stderr, "bench_gpu: --tpot-batches %s: expected up to 3 batch sizes in 1..64\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--tpot-kinds") && i + 1 < argc) {
            char list[64];
            snprintf(list, sizeof list, "%s", argv[++i]);
            tpot_kinds = 0;
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                const int k = !strcmp(tok, "plain") ? 0 : !strcmp(tok, "lazy") ? 1 : !strcmp(tok, "lazy_shared") ? 2 : -1;
                if (k < 0) {
                    fprintf(stderr, "bench_gpu: --tpot-kinds %s: expected some of plain,lazy,lazy_shared\n", tok);
                    return 2;
                }
                tpot_kinds |= 1u << k;
            }
        }
        else if (!strcmp(argv[i], "--ablate") && i + 1 < argc) {
            if (!ablate_parse(argv[++i], ablate, &n_ablate)) return 2;
        }
        else if (!strcmp(argv[i], "--shared-kv")) shared = true;
        else if (!strcmp(argv[i], "--shared-points") && i + 1 < argc) so.n_points = parse_list(argv[++i], so.points, 8);
        else if (!strcmp(argv[i], "--shared-doc-tokens") && i + 1 < argc) so.doc_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shared-steps") && i + 1 < argc) so.steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shared-kinds") && i + 1 < argc) {
            char list[64];
            snprintf(list, sizeof list, "%s", argv[++i]);
            so.kinds = 0;
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                const int k = !strcmp(tok, "prefix") ? 0 : !strcmp(tok, "lazy") ? 1 : !strcmp(tok, "mepic") ? 2 : -1;
                if (k < 0) {
                    fprintf(stderr, "bench_gpu: --shared-kinds %s: expected some of prefix,lazy,mepic\n", tok);
                    return 2;
                }
                so.kinds |= 1u << k;
            }
        } else if (!strcmp(argv[i], "--shared-modes") && i + 1 < argc) {
            char list[64];
            snprintf(list, sizeof list, "%s", argv[++i]);
            so.n_modes = 0;
            for (char *tok = strtok(list, ","); tok && so.n_modes < 3; tok = strtok(NULL, ",")) {
                const int md = !strcmp(tok, "0") ? LA_CUDA_ATTN_SHARED_OFF : !strcmp(tok, "1") ? LA_CUDA_ATTN_SHARED_ON
                               : !strcmp(tok, "auto") ? LA_CUDA_ATTN_SHARED_AUTO : -1;
                if (md < 0) {
                    fprintf(stderr, "bench_gpu: --shared-modes %s: expected some of 0,1,auto\n", tok);
                    return 2;
                }
                so.modes[so.n_modes++] = md;
            }
        } else if (!strcmp(argv[i], "--decode-probe")) probe = true;
        else if (!strcmp(argv[i], "--probe-doc-tokens") && i + 1 < argc) probe_doc = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--probe-steps") && i + 1 < argc) probe_steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--methods") && i + 1 < argc) {
            char list[128];
            snprintf(list, sizeof list, "%s", argv[++i]);
            methods = 0;
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                size_t j = 0;
                while (j < N_METHODS && strcmp(tok, k_methods[j])) j++;
                if (j == N_METHODS) {
                    fprintf(stderr, "bench_gpu: --methods %s: expected some of recompute,prefix,block,mepic,lazy\n", tok);
                    return 2;
                }
                methods |= 1u << j;
            }
        }
        else if (!strcmp(argv[i], "--prefill-variants") && i + 1 < argc) {
            if (!parse_variants(argv[i], argv[i + 1], 2, 4, variants, &n_variants)) return 2;
            i++;
        } else if (!strcmp(argv[i], "--fused") && i + 1 < argc) {
            char list[64];
            snprintf(list, sizeof list, "%s", argv[++i]);
            n_fused = 0;
            bool bad = false;
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                const bool both = !strcmp(tok, "both");
                int k = -1;
                for (size_t j = 0; j < sizeof k_fused_settings / sizeof k_fused_settings[0]; j++)
                    if (!strcmp(tok, k_fused_settings[j].name)) k = (int)j;
                const uint32_t m = k >= 0 ? k_fused_settings[k].mask : 0;
                if (!both && k < 0) bad = true;
                else if (n_fused + (both ? 2 : 1) > 4) bad = true;
                else if (both) fused[n_fused++] = 0, fused[n_fused++] = LA_CUDA_FUSED_ALL;
                else fused[n_fused++] = m;
            }
            if (bad || n_fused == 0) {
                fprintf(stderr, "bench_gpu: --fused %s: expected up to 4 of off, qkv, gate_up, gemm, on, nomerge, nokv_write "
                                "(or both = off,on)\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--readback") && i + 1 < argc) {
            char list[32];
            snprintf(list, sizeof list, "%s", argv[++i]);
            n_readbacks = 0;
            bool bad = false;
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                const int r = !strcmp(tok, "argmax") ? 1 : !strcmp(tok, "logits") ? 0 : -1;
                if (r < 0 || n_readbacks == 2) bad = true;
                else readbacks[n_readbacks++] = r == 1;
            }
            if (bad || n_readbacks == 0) {
                fprintf(stderr, "bench_gpu: --readback %s: expected argmax, logits or both (argmax,logits)\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_gpu [--shapes A,B] [--contexts N,..] [--reps N] [--prefill-variants v2,v3,v4] "
                            "[--fused off,qkv,gate_up,gemm,on,nomerge,nokv_write|both] [--readback argmax,logits] "
                            "[--methods recompute,prefix,block,mepic,lazy] [--out FILE] [--commit SHA] [--no-engine] "
                            "[--no-ttft] [--no-tpot] [--question-tokens 64] [--tpot-batches 1,8,32] [--tpot-kinds plain,lazy,lazy_shared] [--shared-kv [--shared-points 1,64,256,1000] [--shared-doc-tokens N] "
                            "[--shared-kinds prefix,lazy,mepic] [--shared-modes 0,1,auto] [--shared-steps N]] "
                            "[--decode-probe [--probe-doc-tokens N] [--probe-steps N]]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    for (int c = 0; ttft && c < n_ctx; c++)
        if (ctxs[c] - question < N_DOCS * BLOCK) {
            fprintf(stderr, "bench_gpu: context %d leaves less than %d document tokens beside a %d-token question\n",
                    ctxs[c], N_DOCS * BLOCK, question);
            return 2;
        }
    jbuf out = {0};
    char cmd[1024] = "";
    for (int i = 0; i < argc; i++) {
        strncat(cmd, argv[i], sizeof cmd - strlen(cmd) - 2);
        strncat(cmd, " ", sizeof cmd - strlen(cmd) - 1);
    }
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    int failures = 0;
    bool first_shape = true;
    char gpu[256] = "";
    jprintf(&out, "{\n  \"command\": \"%s\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n  \"env\": {",
            cmd, commit, date);
    /* the LA_ knobs this run had (kernel choices, splits): a JSON without them cannot be told
     * from its neighbours in an A/B */
    bool first_env = true;
    for (char **ev = environ; *ev; ev++) {
        const char *eq = strchr(*ev, '=');
        bool plain = true; /* printable ASCII without quote or backslash: no escaping needed */
        for (const char *ch = *ev; *ch && plain; ch++) plain = *ch >= 0x20 && *ch < 0x7f && *ch != '"' && *ch != '\\';
        if (strncmp(*ev, "LA_", 3) != 0 || !eq || !plain) continue;
        jprintf(&out, "%s\"%.*s\": \"%s\"", first_env ? "" : ", ", (int)(eq - *ev), *ev, eq + 1);
        first_env = false;
    }
    jprintf(&out, "},\n  \"weights\": \"random bf16 (--random-weights; timing only)\",\n  \"shapes\": [");
    char list[256];
    snprintf(list, sizeof list, "%s", shapes);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        bench bn = {.shape = tok, .reps = reps, .out = &out, .first_row = true, .argmax = true,
                    .readbacks = {readbacks[0], readbacks[1]}, .n_readbacks = n_readbacks, .methods = methods,
                    .question = question, .n_ablations = n_ablate};
        memcpy(bn.ablations, ablate, sizeof ablate);
        la_err err = {0};
        if (la_model_config_preset(tok, &bn.cfg, &err) != LA_OK ||
            la_backend_create(LA_DEVICE_CUDA, 0, &bn.be, &err) != LA_OK) {
            fprintf(stderr, "bench_gpu: %s: %s\n", tok, err.msg);
            return 1;
        }
        snprintf(gpu, sizeof gpu, "%s", la_cuda_device_name(bn.be));
        bn.n_variants = n_variants;
        bn.default_variant = la_cuda_attn_prefill_variant(bn.be);
        for (int v = 0; v < n_variants; v++)
            bn.variants[v] = variants[v] ? variants[v] : la_cuda_attn_prefill_variant(bn.be);
        bn.default_fused = la_cuda_fused_gemm(bn.be);
        bn.n_fused = n_fused ? n_fused : 1;
        for (int f = 0; f < bn.n_fused; f++) bn.fused[f] = n_fused ? fused[f] : bn.default_fused;
        double t0 = la_now_ms();
        if (la_backend_load_model(bn.be, &bn.cfg, NULL, &err) != LA_OK) {
            fprintf(stderr, "bench_gpu: %s: load_weights: %s\n", tok, err.msg);
            return 1;
        }
        double load_ms = la_now_ms() - t0;
        /* pool: the 32K TTFT workload (~4 contexts' worth) and 32 x 8K decode sequences */
        int64_t block_bytes = bn.be->ops->kv_block_bytes(bn.be, BLOCK);
        bn.n_blocks = 24000;
        if (bn.be->ops->kv_alloc(bn.be, bn.n_blocks, BLOCK, &err) != LA_OK) {
            fprintf(stderr, "bench_gpu: %s: kv_alloc: %s\n", tok, err.msg);
            return 1;
        }
        bn.logits = xrealloc(NULL, sizeof(float) * 64 * (size_t)bn.cfg.vocab_size);
        bn.cap_logit_rows = 64;
        fprintf(stderr, "%s on %s: random weights made in %.1f ms; KV pool %lld blocks x %d (%.1f GiB)\n", tok, gpu,
                load_ms, (long long)bn.n_blocks, BLOCK, (double)(bn.n_blocks * block_bytes) / (1 << 30));
        jprintf(&out, "%s\n  {\n    \"shape\": \"%s\",\n    \"gpu\": \"%s\",\n    \"weight_bytes_streamed\": %.0f,"
                      "\n    \"kv_bytes_per_token\": %.0f,",
                first_shape ? "" : ",", tok, gpu, weight_bytes(&bn.cfg), kv_bytes_per_token(&bn.cfg));
        first_shape = false;
        peaks(&bn);
        bb b = {0};
        jprintf(&out, "\n    \"ttft\": [");
        for (int c = 0; ttft && c < n_ctx; c++) ttft_context(&bn, ctxs[c], &b);
        jprintf(&out, "\n    ],\n    \"tpot\": [");
        bn.first_row = true;
        la_err ferr = {0};
        if (la_cuda_kv_fill_random(bn.be, 7, &ferr) != LA_OK) fprintf(stderr, "bench_gpu: fill: %s\n", ferr.msg);
        const decode_kind kinds[3] = {DEC_PLAIN, DEC_LAZY, DEC_LAZY_SHARED};
        const char *const kind_names[3] = {"plain", "lazy", "lazy_shared"};
        for (int i = 0; tpots && i < n_tpot_batches; i++)
            for (int k = 0; k < 3; k++) {
                if (!(tpot_kinds >> k & 1u)) continue;
                for (int f = 0; f < bn.n_fused; f++)
                    for (int r = 0; r < bn.n_readbacks; r++)
                        for (int a = 0; a < bn.n_ablations; a++) {
                            la_cuda_fused_gemm_set(bn.be, bn.fused[f]);
                            bn.argmax = bn.readbacks[r];
                            bn.ablate = bn.ablations[a];
                            tpot(&bn, tpot_batches[i], kinds[k], &b, kind_names[k]);
                        }
            }
        bn.ablate = 0;
        bn.argmax = true;
        la_cuda_fused_gemm_set(bn.be, bn.default_fused);
        jprintf(&out, "\n    ],");
        if (shared) shared_kv_sweep(&bn, &so, &b);
        if (probe) decode_probe(&bn, probe_doc, probe_steps, &b);
        la_backend_destroy(bn.be);
        bn.be = NULL;
        if (engine) engine_check(&bn);
        jprintf(&out, "\n    \"failures\": %d\n  }", bn.failures);
        failures += bn.failures;
        free(bn.logits);
        free(bn.ids);
        bb_free(&b);
    }
    jprintf(&out, "\n  ]\n}\n");
    FILE *f = out_path ? fopen(out_path, "w") : stdout;
    if (!f) {
        fprintf(stderr, "bench_gpu: cannot write %s\n", out_path);
        return 1;
    }
    fwrite(out.s, 1, out.n, f);
    if (f != stdout) fclose(f);
    free(out.s);
    return failures ? 1 : 0;
}
#endif
