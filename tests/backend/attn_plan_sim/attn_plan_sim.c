/* Host simulation of the CUDA backend's attention planning, for developers and CI without a
 * GPU: cuda_attn_plan.c and cuda_attn_shared.c compiled as they are against stubs of the
 * CUDA runtime, then an emulator of the attention kernels' contract
 * (cuda_kernels.h: items over block lists, la_cuda_attn_grow rows, partial rows, combine and
 * merge items; f64, exact softmax) run on the uploaded metadata, against a direct reference of
 * every sequence's attention over its own block list. It checks what the GPU tests cannot
 * check without a GPU: that the plans (per-sequence tiles, splits, shared-block runs, their
 * canonical frames and shifts, the parts each token's combine merges) compute the right
 * attention, and it catches a partial row written twice, never written or out of range.
 * Each plan is made twice, with and without clones (cuda_attn_shared.c, count_holders), and
 * the uploaded metadata must be the same bytes. It does not check the kernels themselves
 * (test_cuda_kernels.c, test_cuda_shared_attn.c). A ctest where the CUDA backend is built
 * (backend/attn_plan_sim); by hand:
 *
 *   gcc -O2 -std=gnu17 -D_GNU_SOURCE -I/usr/local/cuda/include -Iinclude -Isrc \
 *       tests/backend/attn_plan_sim/attn_plan_sim.c src/base/err.c -lm -o /tmp/attn_plan_sim
 *   /tmp/attn_plan_sim        # prints one line per case, "all ok" and exit 0, or the failures
 *   /tmp/attn_plan_sim --time N [REPS]      # or --time-pre
 *
 * --time: the host's cost of one decode step's planning at issue 24's shape (N requests
 * decoding on one 7000-token lazy document, GQA 32/8, head_dim 128, shared attention auto,
 * a graph step): la_cu_batch_begin's wall time, best and mean of REPS (30), and the shared
 * plan's part (its mean). --time-pre: each request has its own preamble of 0..60 tokens before the
 * document, as bench_gpu's lazy rows do. No emulation and no check; for profiling (perf
 * record) without a GPU, by hand (ctest runs the checks only, no timing).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/timer.h"
#include "backend/cuda/cuda_attn_plan.c"
#include "backend/cuda/cuda_attn_shared.c"

/* ---- stubs ---- */
la_status la_cu_flush_recorded(cuda_backend *c, la_err *err) { (void)c; (void)err; return LA_OK; }
la_status la_cu_flush_copies(cuda_backend *c, la_err *err) { (void)c; (void)err; return LA_OK; }
static int64_t g_rope_need;
la_status la_cu_ensure_rope(cuda_backend *c, int64_t need, la_err *err) { (void)c; (void)err; g_rope_need = need; return LA_OK; }
la_status la_cu_staging_reserve(cuda_backend *c, staging *s, size_t bytes, la_err *err) {
    (void)c; (void)err;
    if (bytes > s->cap) { free(s->host); s->host = calloc(1, bytes); s->dev = s->host; s->cap = bytes; }
    return LA_OK;
}
la_status la_cu_staging_send(cuda_backend *c, staging *s, size_t bytes, la_err *err) { (void)c;(void)s;(void)bytes;(void)err; return LA_OK; }
size_t la_cuda_attn_decode_smem(int32_t hd, int32_t deep) { (void)hd; (void)deep; return 1; }
const la_cuda_prefill_kernel_info la_cuda_prefill_kernels[LA_CUDA_PREFILL_KERNEL_COUNT] = {
    {4, "wgmma_ws", NULL, LA_ATTN_PREFILL_ROWS_WS, LA_ATTN_PREFILL_ROWS_WS64, true, {64, 128},
     LA_CUDA_ROTATION_Q_DELTA},
    {3, "wgmma", NULL, LA_ATTN_PREFILL_ROWS, 0, true, {64, 128}, LA_CUDA_ROTATION_K_ROPE},
    {2, "mma", NULL, LA_ATTN_PREFILL_ROWS, 0, false, {0, 0}, LA_CUDA_ROTATION_K_ROPE},
};
la_cuda_prefill_kernel la_cuda_prefill_kernel_pick(la_cuda_prefill_kernel asked, bool sm90a, int32_t head_dim,
                                                   la_cuda_step_rotation rotation) {
    for (int k = (int)asked; k < LA_CUDA_PREFILL_KERNEL_COUNT; k++) {
        const la_cuda_prefill_kernel_info *e = &la_cuda_prefill_kernels[k];
        const bool hd_ok = e->head_dims[0] == 0 || e->head_dims[0] == head_dim || e->head_dims[1] == head_dim;
        if ((!e->sm90a || sm90a) && hd_ok && rotation <= e->max_rotation) return (la_cuda_prefill_kernel)k;
    }
    return LA_CUDA_PREFILL_MMA;
}
cudaError_t cudaMalloc(void **p, size_t n) { *p = malloc(n); return cudaSuccess; }
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { (void)s; return cudaSuccess; }
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) { (void)s; memset(p, v, n); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) { (void)e; (void)s; return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) { (void)e; return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { (void)a; (void)b; *ms = 0; return cudaSuccess; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { (void)e; return "stub"; }

/* ---- the model ---- */
static int HD = 16, NH = 8, NKV = 2, B = 16, NPOOL = 3000;
static double *Kp, *Vp; /* [block][kvh][B][HD] */
static double *Q;       /* [token][NH][HD] */
static double inv_freq[64];
static uint64_t rng = 88172645463325252ull;
static double ur(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (double)(rng >> 11) / 9007199254740992.0; }
static int ri(int n) { return (int)(ur() * n); }

static void rope(const double *x, double *y, int64_t pos) {
    int half = HD / 2;
    for (int i = 0; i < half; i++) {
        double a = (double)pos * inv_freq[i], c = cos(a), s = sin(a);
        y[i] = x[i] * c - x[i + half] * s;
        y[i + half] = x[i + half] * c + x[i] * s;
    }
}
static const double *kv_at(const double *pool, int blk, int kvh, int j) { return pool + (((int64_t)blk * NKV + kvh) * B + j) * HD; }

typedef struct part { double m, l; double o[128]; } part;

/* one row against keys [kv0, kv1) of list L: partial state. item_delta: NULL rotates the
 * query at rpos - q_delta of each key's block (the wgmma and mma kernels, the reference);
 * else at rpos - *item_delta for every key (the warp-specialized kernel's contract: an item
 * rotates its queries once, at its first block's q_delta) */
static void attend(const la_attn_block *L, int kv0, int kv1, int kvh, const double *q, int32_t rpos,
                   const int32_t *item_delta, part *P) {
    P->m = -INFINITY; P->l = 0; memset(P->o, 0, sizeof P->o);
    double qr[128], kr[128];
    double sc = 1.0 / sqrt((double)HD);
    /* two passes: max, then sums */
    double *s = malloc(sizeof(double) * (size_t)(kv1 > kv0 ? kv1 - kv0 : 1));
    int64_t angle = INT64_MIN;
    for (int f = kv0; f < kv1; f++) {
        const la_attn_block *b = &L[f / B];
        int j = f % B;
        s[f - kv0] = -INFINITY;
        if (j >= b->n_valid || (int64_t)b->pos0 + j > rpos) continue;
        const int64_t delta = item_delta ? *item_delta : b->q_delta;
        if ((int64_t)rpos - delta != angle) { angle = (int64_t)rpos - delta; rope(q, qr, angle); }
        const double *k = kv_at(Kp, b->block_id, kvh, j);
        if (b->k_rope) { rope(k, kr, (int64_t)b->pos0 + j); k = kr; }
        double d = 0; for (int i = 0; i < HD; i++) d += qr[i] * k[i];
        s[f - kv0] = d * sc;
        if (s[f - kv0] > P->m) P->m = s[f - kv0];
    }
    if (P->m > -INFINITY)
        for (int f = kv0; f < kv1; f++) {
            if (s[f - kv0] == -INFINITY) continue;
            const la_attn_block *b = &L[f / B];
            double w = exp(s[f - kv0] - P->m);
            P->l += w;
            const double *v = kv_at(Vp, b->block_id, kvh, f % B);
            for (int i = 0; i < HD; i++) P->o[i] += w * v[i];
        }
    free(s);
}

static void merge(const part *ps, int n, double *out) {
    double M = -INFINITY, l = 0;
    for (int s = 0; s < n; s++) { if (isnan(ps[s].m) || isnan(ps[s].l)) { for (int i = 0; i < HD; i++) out[i] = NAN; return; } if (ps[s].m > M) M = ps[s].m; }
    double acc[128] = {0};
    if (M > -INFINITY) for (int s = 0; s < n; s++) { double w = ps[s].m == -INFINITY ? 0 : exp(ps[s].m - M); l += w * ps[s].l; for (int i = 0; i < HD; i++) acc[i] += w * ps[s].o[i]; }
    for (int i = 0; i < HD; i++) out[i] = l > 0 ? acc[i] / l : 0;
}

static part *parts; static int64_t n_parts_cap;
static part *part_at(int64_t r) {
    if (r < 0 || r >= n_parts_cap) { fprintf(stderr, "partial row %lld out of range %lld\n", (long long)r, (long long)n_parts_cap); exit(3); }
    return &parts[r];
}

/* emulate the step: prefill items (per-seq), grouped items, decode items, combine + merge */
static void emulate(cuda_backend *c, const la_batch *b, double *out) {
    const int hpc = c->heads_per_cta, ng = NKV * c->n_head_chunks;
    n_parts_cap = c->cap_part_rows;
    parts = realloc(parts, sizeof(part) * (size_t)(n_parts_cap + 1));
    for (int64_t i = 0; i < n_parts_cap; i++) { parts[i].m = NAN; parts[i].l = NAN; }
    for (int64_t i = 0; i < (int64_t)b->n_tokens * NH * HD; i++) out[i] = NAN;
    const la_attn_block *blocks = c->d_blocks;
    for (int pass = 0; pass < 3; pass++) {
        const la_cuda_attn_item *items = pass == 0 ? c->d_items_grouped : pass == 1 ? c->d_items_prefill : c->d_items_decode;
        int n = pass == 0 ? c->n_items_grouped : pass == 1 ? c->n_items_prefill : c->n_items_decode;
        const la_cuda_attn_grow *gr = pass == 0 ? c->d_grows : NULL;
        const la_cuda_prefill_kernel kern = pass == 0 ? c->sh.kernel : c->step_prefill_kernel;
        int rows = pass == 2 ? hpc : la_cuda_prefill_rows(kern, HD);
        const bool ws = pass < 2 && kern == LA_CUDA_PREFILL_WGMMA_WS; /* 128-key tiles from any 16-key group */
        for (int it = 0; it < n; it++) {
            const la_cuda_attn_item *I = &items[it];
            if (I->n_tokens == 0) continue;
            if (pass == 2 && I->n_tokens != 1) { fprintf(stderr, "decode item with %d tokens\n", I->n_tokens); exit(3); }
            if (I->kv0 % 16) { fprintf(stderr, "kv0 %d not a multiple of 16\n", I->kv0); exit(3); }
            if (pass < 2 && !ws && I->kv0 % 64) { fprintf(stderr, "prefill kv0 %d not a multiple of 64\n", I->kv0); exit(3); }
            const int32_t item_delta = I->kv1 > I->kv0 ? blocks[I->block0 + I->kv0 / B].q_delta : 0;
            if (I->n_tokens * hpc > rows) { fprintf(stderr, "item rows %d > %d\n", I->n_tokens * hpc, rows); exit(3); }
            for (int g = 0; g < ng; g++) {
                int kvh = g / c->n_head_chunks, head0 = kvh * (NH / NKV) + (g % c->n_head_chunks) * hpc;
                for (int t = 0; t < I->n_tokens; t++) {
                    int tok; int32_t rpos;
                    if (gr) { tok = gr[I->row0 + t].token; rpos = gr[I->row0 + t].pos; }
                    else { tok = I->row0 + t; rpos = b->pos[tok]; }
                    if (rpos > I->pos_max) { fprintf(stderr, "row pos %d > item pos_max %d\n", rpos, I->pos_max); exit(3); }
                    for (int h = 0; h < hpc; h++) {
                        part P;
                        attend(blocks + I->block0, I->kv0, I->kv1, kvh, Q + ((int64_t)tok * NH + head0 + h) * HD, rpos,
                               ws ? &item_delta : NULL, &P);
                        if (gr) *part_at(gr[I->row0 + t].part_row + (int64_t)g * gr[I->row0 + t].part_stride + h) = P;
                        else if (I->part_row0 >= 0) *part_at(I->part_row0 + (int64_t)g * rows + t * hpc + h) = P;
                        else merge(&P, 1, out + ((int64_t)tok * NH + head0 + h) * HD);
                    }
                }
            }
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        const la_cuda_attn_combine_item *ci = pass ? c->d_merge : c->d_combine;
        int n = pass ? c->n_merge : c->n_combine;
        for (int i = 0; i < n; i++) {
            const la_cuda_attn_combine_item *C = &ci[i];
            if (C->n_tokens == 0) continue;
            for (int g = 0; g < ng; g++) {
                int kvh = g / c->n_head_chunks, head0 = kvh * (NH / NKV) + (g % c->n_head_chunks) * hpc;
                for (int r = 0; r < C->n_tokens * hpc && r < C->rows; r++) {
                    int tok = r / hpc, h = r % hpc;
                    part *ps = malloc(sizeof(part) * (size_t)C->n_splits);
                    for (int s = 0; s < C->n_splits; s++) ps[s] = *part_at(C->part_row0 + ((int64_t)s * ng + g) * C->rows + r);
                    merge(ps, C->n_splits, out + ((int64_t)(C->row0 + tok) * NH + head0 + h) * HD);
                    free(ps);
                }
            }
        }
    }
}

static void reference(const la_batch *b, double *out) {
    for (int s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        for (int t = 0; t < sq->n_rows; t++)
            for (int h = 0; h < NH; h++) {
                int tok = sq->row0 + t, kvh = h / (NH / NKV);
                part P;
                attend(b->blocks + sq->block0, 0, sq->n_blocks * B, kvh, Q + ((int64_t)tok * NH + h) * HD, b->pos[tok], NULL,
                       &P);
                merge(&P, 1, out + ((int64_t)tok * NH + h) * HD);
            }
    }
}

/* ---- batches ---- */
typedef struct bt { int n, nb, ns; int32_t tok[20000], pos[20000], kpos[20000]; int64_t slot[20000]; la_attn_block blk[500000]; la_batch_seq seq[2000]; } bt;
static bt B0;
static int next_block = 1;

/* a sequence: documents (ids from the shared pool, lengths) in slots, then a tail of own blocks
 * holding n_prev cached question tokens and n_new new rows; method: 0 lazy, 1 mepic, 2 prefix (one doc) */
typedef struct doc { int first_block, len; } doc;
static void add_seq(bt *x, const doc *docs, const int *order, int n_docs, int method, int pre_own, int n_prev, int n_new) {
    int block0 = x->nb, S = 0;
    if (pre_own > 0) { /* own leading segment (a per-request preamble), plain */
        int fb = next_block; next_block += (pre_own + B - 1) / B;
        for (int i = 0; i * B < pre_own; i++) x->blk[x->nb++] = (la_attn_block){fb + i, pre_own - i * B < B ? pre_own - i * B : B, i * B, 0, 0};
        S = pre_own;
    }
    for (int k = 0; k < n_docs; k++) {
        const doc *d = &docs[order[k]];
        for (int i = 0; i * B < d->len; i++) {
            int nv = d->len - i * B < B ? d->len - i * B : B;
            if (method == 0) x->blk[x->nb++] = (la_attn_block){d->first_block + i, nv, S + i * B, S, 0};
            else if (method == 1) x->blk[x->nb++] = (la_attn_block){d->first_block + i, nv, S + i * B, 0, 1};
            else x->blk[x->nb++] = (la_attn_block){d->first_block + i, nv, S + i * B, 0, 0};
        }
        S += d->len;
    }
    int tail = n_prev + n_new, fb = next_block; next_block += (tail + B - 1) / B;
    for (int i = 0; i * B < tail; i++) x->blk[x->nb++] = (la_attn_block){fb + i, tail - i * B < B ? tail - i * B : B, S + i * B, 0, 0};
    int row0 = x->n;
    for (int t = n_prev; t < tail; t++) { x->tok[x->n] = 5; x->pos[x->n] = S + t; x->kpos[x->n] = S + t; x->slot[x->n] = (int64_t)(fb + t / B) * B + t % B; x->n++; }
    x->seq[x->ns++] = (la_batch_seq){row0, n_new, block0, x->nb - block0};
}

/* a sequence of the given entries, then a one-token tail block of its own (the row at p) */
static void add_list(bt *x, const la_attn_block *e, int n, int p) {
    int block0 = x->nb, fb = next_block++;
    for (int i = 0; i < n; i++) x->blk[x->nb++] = e[i];
    x->blk[x->nb++] = (la_attn_block){fb, 1, p, 0, 0};
    x->tok[x->n] = 5; x->pos[x->n] = p; x->kpos[x->n] = p; x->slot[x->n] = (int64_t)fb * B;
    x->seq[x->ns++] = (la_batch_seq){x->n, 1, block0, x->nb - block0};
    x->n++;
}

static int32_t g_lazy_ws = LA_CUDA_LAZY_WS_OFF; /* run_case's la_cuda_attn_lazy_ws_set mode */
static int32_t g_decode_min_split; /* run_case's LA_ATTN_DECODE_MIN_SPLIT (0: the default) */
static la_cuda_prefill_kernel g_step_kernel;     /* the attn_prefill kernel run_case's step ran */

/* The backend state the planning reads, for the geometry in HD / NH / NKV and a pool of n_pool
 * blocks (heads per CTA: the largest divisor of the GQA group up to 8), with run_case's
 * g_lazy_ws and g_decode_min_split. */
static cuda_backend *sim_backend(int mode, int prefill_kernel, bool wgmma, int n_sm, int64_t n_pool) {
    cuda_backend *c = calloc(1, sizeof *c);
    c->base.shape.head_dim = HD; c->base.shape.n_heads = NH; c->base.shape.n_kv_heads = NKV;
    int group = NH / NKV, hpc = 1;
    for (int d = 8; d >= 1; d--) if (group % d == 0) { hpc = d; break; }
    c->heads_per_cta = hpc; c->n_head_chunks = group / hpc;
    c->n_blocks = n_pool; c->block_size = B; c->n_sm = n_sm; c->split_ctas = 2; c->split_ctas_decode = 1;
    c->fused = LA_CUDA_FUSED_ALL; c->prefill_kernel = prefill_kernel; c->wgmma = wgmma; c->layer_w = (la_bf16_t **)1;
    c->lazy_ws = g_lazy_ws;
    c->decode_min_split = g_decode_min_split;
    c->base.shape.vocab_size = 100; c->smem_optin = 1 << 20;
    c->sh.mode = mode;
    return c;
}

static void sim_backend_free(cuda_backend *c) {
    la_cu_shared_free(&c->sh);
    free(c->tiles); free(c->segs); free(c->smin); free(c->items_prefill); free(c->items_decode); free(c->combine); free(c->merge);
    free(c->part_o); free(c->part_ml); free(c->merge_count); free(c->meta.host);
    free(c->chk_keys); free(c->chk_lo); free(c->chk_hi); free(c->chk_tmpl); free(c->chk_same);
    free(c);
}
static int run_case(const char *what, bt *x, int mode, int hd, int nh, int nkv, int prefill_kernel, bool wgmma, int n_sm) {
    HD = hd; NH = nh; NKV = nkv;
    for (int i = 0; i < HD / 2; i++) inv_freq[i] = pow(10000.0, -2.0 * i / HD);
    cuda_backend *c = sim_backend(mode, prefill_kernel, wgmma, n_sm, NPOOL);
    Kp = malloc(sizeof(double) * (size_t)NPOOL * NKV * B * HD); Vp = malloc(sizeof(double) * (size_t)NPOOL * NKV * B * HD);
    for (int64_t i = 0; i < (int64_t)NPOOL * NKV * B * HD; i++) { Kp[i] = ur() * 2 - 1; Vp[i] = ur() * 2 - 1; }
    Q = malloc(sizeof(double) * (size_t)x->n * NH * HD);
    for (int64_t i = 0; i < (int64_t)x->n * NH * HD; i++) Q[i] = ur() * 6 - 3;
    int32_t logit_rows[1] = {0};
    la_batch b = {x->n, x->tok, x->pos, x->kpos, x->slot, x->ns, x->seq, x->nb, x->blk, 0, logit_rows};
    la_err err = {0};
    /* the plan without clones (every sequence counted in full) first: the uploaded metadata
     * must be the same bytes with them (cuda_attn_shared.c, count_holders) */
    c->sh.no_clones = true;
    la_status st = la_cu_batch_begin(&c->base, &b, &err);
    if (st != LA_OK) { printf("%s: batch_begin failed: %s\n", what, err.msg); return 1; }
    const size_t n_meta = (size_t)c->sh.stats.meta_bytes;
    const int64_t rope_full = g_rope_need;
    char *full = malloc(n_meta + 1);
    memcpy(full, c->meta.host, n_meta);
    c->sh.no_clones = false;
    st = la_cu_batch_begin(&c->base, &b, &err);
    if (st != LA_OK) { printf("%s: batch_begin failed: %s\n", what, err.msg); return 1; }
    int n_clones = 0;
    for (int s = 0; c->sh.clone && s < x->ns; s++) n_clones += c->sh.clone[s].m > 0;
    const bool same = (size_t)c->sh.stats.meta_bytes == n_meta && memcmp(full, c->meta.host, n_meta) == 0 &&
                      g_rope_need == rope_full;
    free(full);
    if (!same) {
        printf("%s mode %d hd %d: the plan with %d clones differs from the plan without\n", what, mode, hd, n_clones);
        return 1;
    }
    double *o = malloc(sizeof(double) * (size_t)x->n * NH * HD), *r = malloc(sizeof(double) * (size_t)x->n * NH * HD);
    emulate(c, &b, o);
    reference(&b, r);
    double worst = 0; int64_t at = 0;
    for (int64_t i = 0; i < (int64_t)x->n * NH * HD; i++) { double d = fabs(o[i] - r[i]); if (isnan(o[i]) || d > worst) { worst = isnan(o[i]) ? INFINITY : d; at = i; } }
    la_cuda_attn_shared_stats s; memset(&s, 0, sizeof s);
    const sh_stats *ss = &c->sh.stats;
    printf("%-60s mode %d hd %3d: clones %3d grouped %d runs %lld sharers %lld items %lld (kernel v%d) chunks %lld keys shared %lld own %lld per-seq %lld | items p %d (v%d) d %d comb %d merge %d | max err %.3g at %lld (rope need %lld)\n",
           what, mode, hd, n_clones, c->n_items_grouped > 0, (long long)ss->runs, (long long)ss->sharers, (long long)ss->items,
           la_cuda_prefill_kernels[c->sh.kernel].variant, (long long)ss->chunks_max, (long long)ss->keys_shared, (long long)ss->keys_own,
           (long long)ss->keys_per_seq, c->n_items_prefill, la_cuda_prefill_kernels[c->step_prefill_kernel].variant,
           c->n_items_decode, c->n_combine, c->n_merge, worst, (long long)at, (long long)g_rope_need);
    (void)s;
    int bad = !(worst < 1e-9);
    g_step_kernel = c->step_prefill_kernel;
    free(o); free(r); free(Q); free(Kp); free(Vp);
    sim_backend_free(c);
    return bad;
}

/* --time (header); pre: every request's own preamble of 0..60 tokens first (--time-pre,
 * bench_gpu's lazy rows) */
static int time_plan(int nseq, int reps, bool pre) {
    const char *mode = pre ? "--time-pre" : "--time";
    HD = 128; NH = 32; NKV = 8;
    memset(&B0, 0, sizeof B0);
    next_block = 1;
    doc d0 = {next_block, 7000};
    next_block += (7000 + B - 1) / B;
    int o0 = 0;
    for (int s = 0; s < nseq; s++) add_seq(&B0, &d0, &o0, 1, 0, pre ? s % 61 : 0, 64 + s % 32, 1);
    cuda_backend *c = sim_backend(LA_CUDA_ATTN_SHARED_AUTO, 0, true, 132, next_block);
    c->graphs = true;
    int32_t logit_rows[1] = {0};
    la_batch b = {B0.n, B0.tok, B0.pos, B0.kpos, B0.slot, B0.ns, B0.seq, B0.nb, B0.blk, 1, logit_rows};
    la_err err = {0};
    double best = INFINITY, sum = 0, plan = 0;
    for (int r = 0; r < reps; r++) {
        const double t0 = la_now_ms();
        if (la_cu_batch_begin(&c->base, &b, &err) != LA_OK) {
            printf("%s: batch_begin failed: %s\n", mode, err.msg);
            return 1;
        }
        const double t = la_now_ms() - t0;
        best = t < best ? t : best;
        sum += t;
        plan += c->sh.stats.plan_ms;
    }
    printf("%d request%s on one 7000-token document%s, %d block entries: batch_begin best %.3f mean %.3f ms "
           "(shared plan, mean %.3f), %d grouped items, %.2f MB of metadata\n",
           nseq, nseq == 1 ? "" : "s", pre && nseq > 1 ? " after own preambles (request s: s mod 61 tokens)" : "", B0.nb, best, sum / reps, plan / reps,
           c->n_items_grouped, (double)c->sh.stats.meta_bytes / 1e6);
    sim_backend_free(c);
    return 0;
}

/* A whole decimal number in [lo, hi] from s into *v; false otherwise. */
static bool parse_count(const char *s, long lo, long hi, int *v) {
    char *end = NULL;
    errno = 0;
    const long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) return false;
    *v = (int)x;
    return true;
}

int main(int argc, char **argv) {
    if ((argc == 3 || argc == 4) && (!strcmp(argv[1], "--time") || !strcmp(argv[1], "--time-pre"))) {
        int nseq = 0, reps = 30;
        if (!parse_count(argv[2], 1, 1000, &nseq) || (argc == 4 && !parse_count(argv[3], 1, 100000, &reps))) {
            printf("%s N [REPS]: N 1 to 1000 requests, REPS 1 to 100000\n", argv[1]);
            return 2;
        }
        return time_plan(nseq, reps, !strcmp(argv[1], "--time-pre"));
    }
    if (argc > 1) {
        printf("usage: attn_plan_sim [--time N [REPS] | --time-pre N [REPS]]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    int fails = 0;
    for (int variant = 0; variant < 3; variant++)
    for (int mode = 0; mode < 3; mode++) {
        const int hd = variant == 2 ? 24 : variant == 1 ? 64 : 128;
        const int pk = variant == 2 ? 2 : 0;
        char name[128];
        /* 1. many decode requests sharing 1..8 documents in different slots, lazy, mixed with unshared */
        for (int nd = 1; nd <= 8; nd *= 2) {
            memset(&B0, 0, sizeof B0); next_block = 1;
            doc docs[8];
            for (int d = 0; d < nd; d++) { int len = 16 * (1 + ri(20)) + (d % 2 ? 0 : ri(16)); docs[d] = (doc){next_block, len}; next_block += (len + B - 1) / B; }
            for (int s = 0; s < 40; s++) {
                int order[8]; for (int d = 0; d < nd; d++) order[d] = d;
                for (int d = nd - 1; d > 0; d--) { int j = ri(d + 1), t = order[d]; order[d] = order[j]; order[j] = t; }
                int use = s % 5 == 4 ? 0 : 1 + ri(nd); /* every fifth unshared */
                if (use == 0) { doc own = {next_block, 40 + ri(100)}; next_block += (own.len + B - 1) / B; int o0 = 0; add_seq(&B0, &own, &o0, 1, s % 3 == 2 ? 1 : 0, 0, 5, 1); }
                else add_seq(&B0, docs, order, use, (s % 7 == 3) ? 2 : 0, s % 3 == 0 ? 1 + ri(40) : 0, 3 + ri(30), 1);
            }
            snprintf(name, sizeof name, "lazy decode, %d docs, 40 seqs", nd);
            fails += run_case(name, &B0, mode, hd, 8, 2, pk, true, 132);
        }
        /* 2. mepic decode sharing 3 docs in different slots */
        memset(&B0, 0, sizeof B0); next_block = 1;
        { doc docs[3]; for (int d = 0; d < 3; d++) { int len = 100 + ri(300); docs[d] = (doc){next_block, len}; next_block += (len + B - 1) / B; }
          for (int s = 0; s < 24; s++) { int order[3] = {s % 3, (s + 1) % 3, (s + 2) % 3}; add_seq(&B0, docs, order, 1 + s % 3, 1, s % 4 ? 0 : 17, 10, 1); }
          fails += run_case("mepic decode, 3 docs in rotating slots, 24 seqs", &B0, mode, hd, 8, 2, pk, true, 132); }
        /* 3. prefix: one 1000-token shared prefix, 50 decode + 3 questions of 20 rows and a 64-row one */
        memset(&B0, 0, sizeof B0); next_block = 1;
        { doc d0 = {next_block, 1000}; next_block += 63; int o0 = 0;
          for (int s = 0; s < 50; s++) add_seq(&B0, &d0, &o0, 1, 2, 0, 8 + ri(20), 1);
          for (int s = 0; s < 3; s++) add_seq(&B0, &d0, &o0, 1, 2, 0, 0, 20);
          add_seq(&B0, &d0, &o0, 1, 0, 0, 0, 64);
          fails += run_case("prefix 1000 tokens, 50 decode + question rows", &B0, mode, hd, 8, 2, pk, true, 132); }
        /* 4. block-boundary lengths: docs of exactly 16, 32, 15, 17 tokens; many sharers; question prefill of 5 rows */
        memset(&B0, 0, sizeof B0); next_block = 1;
        { int lens[4] = {16, 32, 15, 17}; doc docs[4]; for (int d = 0; d < 4; d++) { docs[d] = (doc){next_block, lens[d]}; next_block += (lens[d] + B - 1) / B; }
          for (int s = 0; s < 30; s++) { int order[4] = {0, 1, 2, 3}; if (s % 2) { order[0] = 2; order[2] = 0; } add_seq(&B0, docs, order, 4, s % 3 == 1 ? 1 : 0, 0, s % 5, s % 4 == 0 ? 5 : 1); }
          fails += run_case("block-boundary docs 16/32/15/17, 30 seqs", &B0, mode, hd, 8, 2, pk, true, 132); }
        /* 4b. lazy questions (prefill rows, documents past the first at q_delta != 0, no mepic)
         * over 1..5 documents in rotating slots, some after a preamble, some over 64 rows (two
         * tiles), beside decode rows: under the warp-specialized kernel each prefill item must
         * stay inside one q_delta (its contract, emulate); on 132 SMs (split) and on 2 (not) */
        for (int n_sm = 132; n_sm >= 2; n_sm = n_sm == 132 ? 2 : 0)
        for (g_lazy_ws = LA_CUDA_LAZY_WS_OFF; g_lazy_ws <= LA_CUDA_LAZY_WS_ON; g_lazy_ws++) {
            memset(&B0, 0, sizeof B0); next_block = 1;
            doc docs[5];
            for (int d = 0; d < 5; d++) { int len = 16 * (1 + ri(12)) + (d % 2 ? ri(16) : 0); docs[d] = (doc){next_block, len}; next_block += (len + B - 1) / B; }
            for (int s = 0; s < 12; s++) {
                int order[5] = {s % 5, (s + 1) % 5, (s + 2) % 5, (s + 3) % 5, (s + 4) % 5};
                add_seq(&B0, docs, order, 1 + s % 5, 0, s % 4 == 3 ? 9 : 0, s % 3, s % 4 == 0 ? 1 : 3 + ri(90));
            }
            snprintf(name, sizeof name, "lazy questions over 1-5 docs, %d SMs, lazy_ws %s", n_sm,
                     g_lazy_ws == LA_CUDA_LAZY_WS_ON ? "on" : "off");
            fails += run_case(name, &B0, mode, hd, 8, 2, pk, true, n_sm);
        }
        g_lazy_ws = LA_CUDA_LAZY_WS_OFF;
        /* 4c. more cut items than one launch takes (2000 two-row questions over 33 one-block
         * documents: 68000 segments > LA_ATTN_MAX_PREFILL_ITEMS): lazy_ws on falls back to v3,
         * uncut, instead of refusing the step */
        if (variant == 0 && mode == 0) {
            memset(&B0, 0, sizeof B0); next_block = 1;
            doc docs[33]; int order[33];
            for (int d = 0; d < 33; d++) { docs[d] = (doc){next_block++, 16}; order[d] = d; }
            for (int s = 0; s < 2000; s++) add_seq(&B0, docs, order, 33, 0, 0, 0, 2);
            g_lazy_ws = LA_CUDA_LAZY_WS_ON;
            fails += run_case("2000 questions over 33 docs, lazy_ws on: too many cut items", &B0, mode, hd, 8, 2, pk, true, 132);
            g_lazy_ws = LA_CUDA_LAZY_WS_OFF;
            if (g_step_kernel != LA_CUDA_PREFILL_WGMMA) {
                printf("FAIL: the step ran v%d, expected v3\n", la_cuda_prefill_kernels[g_step_kernel].variant);
                fails++;
            }
        }
        /* 4d. batch 1 and 3, lazy decode over 10 documents (~1.5K keys, where a split item
         * can be one key tile, and ~8K: split over the key range, attn_decode's deep
         * instance) at LA_ATTN_DECODE_MIN_SPLIT 1, the default, 16 and 64 */
        for (int len0 = 140; len0 <= 700; len0 += 560)
        for (int nseq = 1; nseq <= 3; nseq += 2) {
            memset(&B0, 0, sizeof B0); next_block = 1;
            doc docs[10];
            for (int d = 0; d < 10; d++) { int len = len0 + ri(len0 / 4); docs[d] = (doc){next_block, len}; next_block += (len + B - 1) / B; }
            for (int sq = 0; sq < nseq; sq++) { /* document sq first, the rest in order */
                int order[10];
                for (int d = 0; d < 10; d++) order[d] = d;
                order[0] = sq; order[sq] = 0;
                add_seq(&B0, docs, order, 10, 0, 0, 40 + sq, 1);
            }
            static const int32_t splits[4] = {1, 0, 16, 64};
            for (int k = 0; k < 4; k++) {
                g_decode_min_split = splits[k];
                snprintf(name, sizeof name, "lazy decode over 10 docs of ~%d, %d seqs, min split %d", len0, nseq, (int)splits[k]);
                fails += run_case(name, &B0, mode, hd, 8, 2, pk, true, 132);
            }
            g_decode_min_split = 0;
        }
        /* 5. 1000 decode requests on one 7000-token document (the sweep), GQA 32/8 */
        memset(&B0, 0, sizeof B0); next_block = 1;
        if (mode != 0 && variant == 1) { doc d0 = {next_block, 2000}; next_block += 125; int o0 = 0;
          for (int s = 0; s < 300; s++) add_seq(&B0, &d0, &o0, 1, s % 10 == 9 ? 2 : 0, 0, 64 + s % 32, 1);
          fails += run_case("300 decode (lazy, prefix) on one 2000-token doc, GQA 32/8", &B0, mode, 64, 32, 8, 0, true, 132); }
        /* 6. clone chains (cuda_attn_shared.c, count_holders): each sequence repeats the one
         * before's document entries, over 3, 2 or 1 documents of one order, every third after
         * a preamble of its own (the documents in another slot); among them a block listed
         * twice, an empty entry, a tail entry naming a document block or another sequence's
         * tail block, mepic sequences and 20-row questions */
        memset(&B0, 0, sizeof B0); next_block = 1;
        { doc docs[3]; for (int d = 0; d < 3; d++) { int len = 40 + ri(120); docs[d] = (doc){next_block, len}; next_block += (len + B - 1) / B; }
          int order[3] = {0, 1, 2};
          for (int s = 0; s < 36; s++) {
              add_seq(&B0, docs, order, 3 - (s / 4) % 3, s % 9 == 4 ? 1 : 0, s % 3 == 1 ? 1 + ri(30) : 0, 5 + s % 7,
                      s % 11 == 5 ? 20 : 1);
              la_batch_seq *sq = &B0.seq[B0.ns - 1];
              if (s % 10 == 3) B0.blk[sq->block0 + 1].block_id = B0.blk[sq->block0].block_id;
              if (s % 10 == 6) B0.blk[sq->block0 + 2].n_valid = 0;
              if (s % 10 == 8) B0.blk[sq->block0 + sq->n_blocks - 1].block_id = docs[0].first_block + 1;
              if (s % 7 == 2 && s >= 2) { /* a tail block of the sequence two before */
                  const la_batch_seq *pq = &B0.seq[B0.ns - 3];
                  B0.blk[sq->block0 + sq->n_blocks - 1].block_id = B0.blk[pq->block0 + pq->n_blocks - 1].block_id;
              }
          }
          fails += run_case("clone chains over 3/2/1 docs, 36 seqs", &B0, mode, hd, 8, 2, pk, true, 132); }
        /* 7. a block whose first holder's frame is out of range (pos0 - q_delta beyond int32:
         * never shared), listed again by sequences that repeat that holder's entries and by
         * others in range (a review's counter-example to an earlier clone rule) */
        if (variant == 1 && mode != 0) {
            const la_attn_block a = {10, 16, 0, 0, 0}, a2 = {11, 16, 16, 0, 0}, x_far = {20, 16, INT32_MAX - 5, -10, 0},
                                x_ok = {20, 16, 100, 0, 0};
            const la_attn_block l0[] = {a, a2, x_far}, l1[] = {x_ok, a, a2, x_far}, l2[] = {a, a2, x_ok},
                                l3[] = {a, a2, x_far, x_ok}, l4[] = {x_ok};
            memset(&B0, 0, sizeof B0); next_block = 1000;
            add_list(&B0, l0, 3, 300); add_list(&B0, l1, 4, 300);
            for (int k = 0; k < 5; k++) add_list(&B0, l4, 1, 300);
            fails += run_case("a block out of frame, then its clones", &B0, mode, 64, 8, 2, 0, true, 132);
            memset(&B0, 0, sizeof B0); next_block = 1000;
            add_list(&B0, l0, 3, 300); add_list(&B0, l2, 3, 300); add_list(&B0, l3, 4, 300);
            for (int k = 0; k < 5; k++) add_list(&B0, l4, 1, 300);
            fails += run_case("a block out of frame after a clone's segment", &B0, mode, 64, 8, 2, 0, true, 132);
        }
    }
    printf(fails ? "FAILED %d\n" : "all ok\n", fails);
    return fails != 0;
}
