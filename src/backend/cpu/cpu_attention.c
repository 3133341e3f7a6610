/* The CPU backend's paged attention (cpu_internal.h). */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/rope.h"
#include "base/err.h"

/* Attention splits a sequence's blocks over several tasks when it has at most this many
 * query rows (decode) and at least twice ATTN_SPLIT_MIN_BLOCKS blocks. */
#define ATTN_SPLIT_MAX_ROWS 16
#define ATTN_SPLIT_MIN_BLOCKS 16
/* From this many rows of a sequence (prefill), attention reads keys transposed 16 at a time
 * (attn_block_kt; head_dim a multiple of 16): the transpose is paid once for rows x heads
 * queries. */
#define ATTN_KT_MIN_ROWS 4

/* Paged attention as an online softmax (FlashAttention's recurrence on the CPU): a task
 * holds, for each query vector of one (sequence, KV head) -- the GQA group's heads times the
 * sequence's rows -- a running max mx, sum l and unnormalized output acc[head_dim], and folds
 * in one KV block at a time: the block is read once for every query of the group, and the
 * causal mask of a block is a prefix of its slots (slot j is kept for a query at position p
 * iff j < n_valid and pos0 + j <= p). Queries are rotated once per run of blocks sharing
 * q_delta (lazy: once per document), mepic blocks' keys once per block into scratch.
 *
 * A decode sequence's blocks are cut into ranges run as separate tasks; each range leaves
 * (mx, l, acc) per query and a merge rescales them to the largest max:
 *   out = sum_r acc_r e^(mx_r - M) / sum_r l_r e^(mx_r - M),  M = max_r mx_r. */
typedef struct attn_task {
    int32_t seq, kvh;
    int32_t b0, b1;  /* blocks [b0, b1) of the sequence's list */
    int32_t n_split; /* ranges of this (seq, kvh); 1: the task writes out itself */
    int64_t part;    /* first float of its partial state in attn_ctx.part (n_split > 1) */
} attn_task;

typedef struct {
    cpu_backend *c;
    int32_t layer;
    const float *q;
    float *out;
    const attn_task *tasks;
    float *part;            /* [tasks with n_split > 1][G * n_rows][2 + head_dim]: mx, l, acc */
    const int32_t *merge0;  /* (seq, kvh) -> its first task, for the merge */
} attn_ctx;

static void attn_run(attn_ctx *a, const attn_task *t, int worker) {
    cpu_backend *c = a->c;
    const la_cpu_kernels *kn = c->kern;
    const la_backend_shape *m = &c->base.shape;
    const la_batch *b = &c->batch;
    const la_batch_seq *sq = &b->seqs[t->seq];
    const la_attn_block *blocks = b->blocks + sq->block0;
    const int32_t hd = m->head_dim, B = c->block_size, G = m->n_heads / m->n_kv_heads, n_q = sq->n_rows;
    const int32_t nQ = G * n_q;
    const int64_t qstride = (int64_t)m->n_heads * hd;
    const float scale = (float)(1.0 / sqrt((double)hd));
    const la_dtype kvt = c->pool_dtype;
    const size_t st = (size_t)hd + 2; /* state floats per query: mx, l, acc */
    /* prefill (several rows): each block's keys transposed, 16 at a time, for attn_block_kt */
    const bool use_kt = n_q >= ATTN_KT_MIN_ROWS && hd % 16 == 0;
    float *Q = la_cpu_scratch_get(c, worker, (size_t)nQ * hd + (size_t)nQ * st + 2 * (size_t)B * hd + 16 * (size_t)hd);
    if (!Q) return;
    float *S = t->n_split > 1 ? a->part + t->part : Q + (size_t)nQ * hd;
    float *Kr = Q + (size_t)nQ * hd + (size_t)nQ * st, *Vr = Kr + (size_t)B * hd, *Kt = Vr + (size_t)B * hd;
    for (int32_t i = 0; i < nQ; i++) {
        float *sti = S + (size_t)i * st;
        sti[0] = -INFINITY, sti[1] = 0.0f;
        memset(sti + 2, 0, sizeof(float) * (size_t)hd);
    }
    int32_t max_pos = INT32_MIN;
    for (int32_t i = 0; i < n_q; i++)
        if (b->pos[sq->row0 + i] > max_pos) max_pos = b->pos[sq->row0 + i];
    bool rotated = false;
    int32_t delta = 0;
    for (int32_t bi = t->b0; bi < t->b1; bi++) {
        const la_attn_block *blk = &blocks[bi];
        if (blk->n_valid <= 0 || blk->pos0 > max_pos) continue;
        if (!rotated || blk->q_delta != delta) { /* queries at p - delta, query vector hh * n_q + i */
            delta = blk->q_delta;
            rotated = true;
            for (int32_t hh = 0; hh < G; hh++)
                for (int32_t i = 0; i < n_q; i++) {
                    const int32_t row = sq->row0 + i;
                    float *qi = Q + ((size_t)hh * n_q + i) * hd;
                    memcpy(qi, a->q + row * qstride + (int64_t)(t->kvh * G + hh) * hd, sizeof(float) * (size_t)hd);
                    la_rope_apply(qi, hd, rope_row(c, (int64_t)b->pos[row] - delta));
                }
        }
        const void *K = kv_at(c, c->k_pool, a->layer, blk->block_id, t->kvh);
        const void *V = kv_at(c, c->v_pool, a->layer, blk->block_id, t->kvh);
        if (bi + 1 < t->b1) { /* the next block's K and V: scattered in the pool, no prefetcher finds them */
            const char *nk = kv_at(c, c->k_pool, a->layer, blocks[bi + 1].block_id, t->kvh);
            const char *nv = kv_at(c, c->v_pool, a->layer, blocks[bi + 1].block_id, t->kvh);
            const size_t bytes = (size_t)blocks[bi + 1].n_valid * (size_t)hd * kv_es(c);
            for (size_t off = 0; off < bytes; off += 64) {
                __builtin_prefetch(nk + off);
                __builtin_prefetch(nv + off);
            }
        }
        la_dtype kt = kvt;
        const bool heads = n_q == 1 && kvt != LA_DTYPE_F32 && kn->attn_block_heads;
        if (blk->k_rope || (kvt != LA_DTYPE_F32 && nQ > 1 && !heads)) {
            /* a bf16 block read by several queries: widened once for all of them
             * (L1-resident), except where one row's GQA heads read it in one pass
             * (attn_block_heads); mepic: slot j's key rotated at pos0 + j */
            kn->to_f32(Kr, K, kvt, (int64_t)blk->n_valid * hd);
            if (blk->k_rope)
                for (int32_t j = 0; j < blk->n_valid; j++)
                    la_rope_apply(Kr + (size_t)j * hd, hd, rope_row(c, (int64_t)blk->pos0 + j));
            K = Kr;
            if (kvt != LA_DTYPE_F32) {
                kn->to_f32(Vr, V, kvt, (int64_t)blk->n_valid * hd);
                V = Vr;
            }
            kt = LA_DTYPE_F32;
        }
        if (use_kt) { /* K and V are f32 here (nQ > 1 widened a bf16 block above) */
            for (int32_t j0 = 0; j0 < blk->n_valid; j0 += 16) {
                const int32_t nk = blk->n_valid - j0 < 16 ? blk->n_valid - j0 : 16;
                const float *Kf = (const float *)K + (size_t)j0 * hd, *Vf = (const float *)V + (size_t)j0 * hd;
                for (int32_t j = 0; j < nk; j++)
                    for (int32_t d = 0; d < hd; d++) Kt[d * 16 + j] = Kf[(size_t)j * hd + d];
                for (int32_t i = 0; i < n_q; i++) {
                    int64_t n_eff = (int64_t)b->pos[sq->row0 + i] - blk->pos0 + 1 - j0;
                    if (n_eff > nk) n_eff = nk;
                    if (n_eff <= 0) continue;
                    kn->attn_block_kt(Q + (size_t)i * hd, (int64_t)n_q * hd, G, Kt, Vf, (int32_t)n_eff, hd, scale,
                                      S + (size_t)i * st, (int64_t)n_q * (int64_t)st);
                }
            }
            continue;
        }
        if (heads && kt != LA_DTYPE_F32) {
            /* decode on a 16-bit block: the group's G heads in one pass, each element widened
             * once (the bundled model's 8K decode with --cpu-kv bf16 at one thread: 6.15 ->
             * 4.68 ms, medians of bench/results/cpu_speed_rag_tiny_avx2_{v2,heads}). An f32
             * block stays per head: fused, it measured slower (A/B of this change, 3 rounds:
             * 6.7-6.9 against 5.5-5.9 ms at 8K; not kept as a file). */
            int64_t n_eff = (int64_t)b->pos[sq->row0] - blk->pos0 + 1;
            if (n_eff > blk->n_valid) n_eff = blk->n_valid;
            if (n_eff > 0) kn->attn_block_heads(Q, hd, G, K, V, kt, (int32_t)n_eff, hd, scale, S, (int64_t)st);
            continue;
        }
        for (int32_t i = 0; i < n_q; i++) {
            int64_t n_eff = (int64_t)b->pos[sq->row0 + i] - blk->pos0 + 1;
            if (n_eff > blk->n_valid) n_eff = blk->n_valid;
            if (n_eff <= 0) continue;
            for (int32_t hh = 0; hh < G; hh++) {
                const size_t qi = (size_t)hh * n_q + i;
                float *sti = S + qi * st;
                kn->attn_block(Q + qi * hd, K, V, kt, (int32_t)n_eff, hd, scale, sti);
            }
        }
    }
    if (t->n_split > 1) return; /* the merge writes out */
    for (int32_t hh = 0; hh < G; hh++)
        for (int32_t i = 0; i < n_q; i++) {
            const float *sti = S + ((size_t)hh * n_q + i) * st;
            float *o = a->out + (int64_t)(sq->row0 + i) * qstride + (int64_t)(t->kvh * G + hh) * hd;
            float inv = sti[1] > 0 ? 1.0f / sti[1] : 0.0f;
            for (int32_t d = 0; d < hd; d++) o[d] = sti[2 + d] * inv;
        }
}

static void attn_tasks(void *p, int64_t b, int64_t e, int worker) {
    attn_ctx *a = p;
    for (int64_t t = b; t < e; t++) attn_run(a, &a->tasks[t], worker);
}

/* The merge of a split (sequence, KV head)'s ranges. */
static void attn_merge(void *p, int64_t b, int64_t e, int worker) {
    attn_ctx *a = p;
    const la_backend_shape *m = &a->c->base.shape;
    const int32_t hd = m->head_dim, G = m->n_heads / m->n_kv_heads;
    const int64_t qstride = (int64_t)m->n_heads * hd;
    const size_t st = (size_t)hd + 2;
    for (int64_t pair = b; pair < e; pair++) {
        const attn_task *t0 = &a->tasks[a->merge0[pair]];
        if (t0->n_split <= 1) continue;
        const la_batch_seq *sq = &a->c->batch.seqs[t0->seq];
        const int32_t n_q = sq->n_rows;
        for (int32_t hh = 0; hh < G; hh++)
            for (int32_t i = 0; i < n_q; i++) {
                const size_t qi = (size_t)hh * n_q + i;
                float M = -INFINITY, L = 0.0f;
                for (int32_t r = 0; r < t0->n_split; r++) {
                    const float *sr = a->part + t0[r].part + qi * st;
                    if (sr[0] > M) M = sr[0];
                }
                float *o = a->out + (int64_t)(sq->row0 + i) * qstride + (int64_t)(t0->kvh * G + hh) * hd;
                memset(o, 0, sizeof(float) * (size_t)hd);
                if (M == -INFINITY) continue; /* no key visible: 0, as an empty softmax */
                for (int32_t r = 0; r < t0->n_split; r++) {
                    const float *sr = a->part + t0[r].part + qi * st;
                    if (sr[1] <= 0.0f) continue;
                    float w = expf(sr[0] - M);
                    L += sr[1] * w;
                    for (int32_t d = 0; d < hd; d++) o[d] += sr[2 + d] * w;
                }
                float inv = L > 0 ? 1.0f / L : 0.0f;
                for (int32_t d = 0; d < hd; d++) o[d] *= inv;
            }
    }
}

/* Ranges a sequence's blocks are cut into: one, or for a decode sequence (few rows) among
 * fewer (sequence, KV head) pairs than the tasks wanted, enough to reach them, each range at
 * least ATTN_SPLIT_MIN_BLOCKS blocks. */
static int64_t attn_split(const la_batch_seq *sq, int64_t pairs, int64_t want) {
    if (sq->n_rows > ATTN_SPLIT_MAX_ROWS || pairs >= want) return 1;
    int64_t split = (want + pairs - 1) / pairs;
    if (split > sq->n_blocks / ATTN_SPLIT_MIN_BLOCKS) split = sq->n_blocks / ATTN_SPLIT_MIN_BLOCKS;
    return split < 1 ? 1 : split;
}

la_status la_cpu_attention(la_backend *be, int32_t layer, const la_act *q, la_act *out,
                               la_err *err) {
    cpu_backend *c = cpu(be);
    const la_batch *b = &c->batch;
    const la_backend_shape *m = &c->base.shape;
    for (int32_t i = 0; i < b->n_blocks; i++) {
        const la_attn_block *blk = &b->blocks[i];
        if (blk->block_id < 0 || blk->block_id >= c->n_blocks || blk->n_valid < 0 ||
            blk->n_valid > c->block_size)
            return la_err_set(err, LA_ERR_INTERNAL, "attention: bad block %d (n_valid %d)",
                              blk->block_id, blk->n_valid);
    }
    for (int32_t s = 0; s < b->n_seqs; s++) { /* lazy: p - Δ must stay >= 0 */
        const la_batch_seq *sq = &b->seqs[s];
        int32_t min_pos = INT32_MAX;
        for (int32_t r = sq->row0; r < sq->row0 + sq->n_rows; r++)
            if (b->pos[r] < min_pos) min_pos = b->pos[r];
        for (int32_t i = sq->block0; i < sq->block0 + sq->n_blocks; i++)
            if (b->blocks[i].q_delta < 0 || b->blocks[i].q_delta > min_pos)
                return la_err_set(err, LA_ERR_INTERNAL, "attention: q_delta %d outside [0, %d]",
                                  b->blocks[i].q_delta, min_pos);
    }
    /* Tasks: (seq, kv head, block range); a decode sequence with few (seq, kv head) pairs
     * beside the workers is cut into ranges of at least ATTN_SPLIT_MIN_BLOCKS blocks. */
    const int32_t nkv = m->n_kv_heads, G = m->n_heads / nkv;
    const int64_t pairs = (int64_t)b->n_seqs * nkv;
    const int64_t want = 4 * (int64_t)c->n_workers; /* tasks wanted, for balance */
    int64_t n_tasks = 0, part_floats = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        const int64_t split = attn_split(sq, pairs, want);
        n_tasks += split * nkv;
        if (split > 1) part_floats += split * nkv * (int64_t)G * sq->n_rows * (m->head_dim + 2);
    }
    size_t bytes = (size_t)n_tasks * sizeof(attn_task) + (size_t)pairs * sizeof(int32_t) +
                   (size_t)part_floats * sizeof(float) + 64;
    if (c->attn_mem_bytes < bytes) {
        void *p = realloc(c->attn_mem, bytes);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "attention: %zu bytes of task state: out of memory", bytes);
        c->attn_mem = p;
        c->attn_mem_bytes = bytes;
    }
    attn_task *tasks = c->attn_mem;
    int32_t *merge0 = (int32_t *)(tasks + n_tasks);
    float *part = (float *)(((uintptr_t)(merge0 + pairs) + 63) & ~(uintptr_t)63);
    int64_t nt = 0, pf = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        const int64_t split = attn_split(sq, pairs, want);
        for (int32_t g = 0; g < nkv; g++) {
            merge0[(int64_t)s * nkv + g] = (int32_t)nt;
            for (int64_t r = 0; r < split; r++) {
                attn_task *t = &tasks[nt++];
                t->seq = s, t->kvh = g, t->n_split = (int32_t)split;
                t->b0 = (int32_t)(sq->n_blocks * r / split);
                t->b1 = (int32_t)(sq->n_blocks * (r + 1) / split);
                t->part = split > 1 ? pf : 0;
                if (split > 1) pf += (int64_t)G * sq->n_rows * (m->head_dim + 2);
            }
        }
    }
    attn_ctx a = {c, layer, q->data, out->data, tasks, part, merge0};
    la_parallel_for(c->tp, n_tasks, attn_tasks, &a);
    la_status s = la_cpu_workers_status(c);
    if (s != LA_OK) return la_err_set(err, s, "attention: scratch: out of memory");
    if (part_floats > 0) la_parallel_for(c->tp, pairs, attn_merge, &a);
    return LA_OK;
}

/* ============================================================ block copy ============= */
