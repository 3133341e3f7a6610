/* CUDA backend, shared-block attention (cuda_internal.h; DESIGN.md §10): when several
 * sequences of a step attend the same physical KV blocks (a cached document in any slot of
 * many lazy or mepic requests, a prefix-cached system prompt), the step reads each such block
 * once and multiplies it against the query rows of every sequence that attends it, instead of
 * once per sequence (Hydragen, arXiv 2402.05099; FlashInfer's cascade attention). The
 * per-sequence kernels then see only each sequence's own blocks, and attn_combine merges the
 * partial softmax states per query row with the log-sum-exp rule (attn_combine.cu).
 *
 * Runs. Block b is a candidate when two or more eligible sequences list it consistently
 * with its first holder (the ref): the same n_valid and k_rope, and one canonical frame,
 *
 *     keys stored rotated (k_rope 0):  pos0 - q_delta equal      shift = q_delta
 *     mepic (k_rope):                  q_delta equal             shift = pos0 - pos0_ref
 *
 * A sharer's shift is what its positions exceed the canonical frame's by: its causal mask
 * pos0 + j <= p is pos0' + j <= p - shift in the canonical block (pos0' = pos0 - q_delta,
 * q_delta' = 0 for stored-rotated keys; pos0' = pos0_ref, q_delta' = q_delta_ref for mepic),
 * and its query rotation, at p - q_delta (lazy, DESIGN.md §2), is at (p - shift) - q_delta'
 * there too, since <R(p - q_delta) q, R(pos0 + j) k> = <R(p - shift - q_delta) q, R(pos0_ref +
 * j) k> for mepic's keys rotated on load. So the whole group of rows is one attention item
 * over the canonical blocks whose rows carry positions p - shift: the attn_prefill kernels
 * run it unchanged, with rows gathered from many sequences (la_cuda_attn_grow). A lazy
 * document in any slot: pos0 - q_delta = the document-local position of the block, so every
 * request that lists it agrees, and its canonical blocks are plain (no rotation metadata):
 * the warp-specialized kernel runs them. Prefix caching: q_delta 0, absolute positions.
 *
 * A run is a maximal list of consecutive entries of the ref's block list that every sharer
 * lists consecutively in the same order with one shift (block b links to the block after it
 * in the ref's list when all of b's holders have it next with the same shift, and it has
 * the same holders). Worked example (B = 16): requests R1, R2 list documents A (2 blocks) and
 * C (1 block) as [A0 A1 | C0 | own tail] and R2 as [C0 | A0 A1 | own tail]; lazy q_delta: R1
 * A 0, C 20, R2 C 0, A 12 (C has 12 tokens, A 20). A0 -> A1 links (both hold A1 after A0,
 * shift 0 and 12); A1 -> C0 does not (R2 lists A1 last); runs {A0 A1}, sharers R1 (shift 0),
 * R2 (shift 12), canonical pos0' 0, 16; and {C0}, R1 shift 20, R2 shift 0, pos0' 0. R2's
 * question token at p = 40 attends A at canonical position 40 - 12 = 28, rotated at 28: the
 * same as at p - q_delta = 28 in its own view.
 *
 * Which runs are grouped (LA_ATTN_SHARED, la_cuda_attn_shared_set): off never; on every run
 * of two or more sharers; auto (default) runs of at least LA_ATTN_SHARED_MIN_SHARERS sharers
 * and LA_ATTN_SHARED_MIN_KEYS valid keys, counting only sequences of at most
 * LA_ATTN_SHARED_MAX_ROWS new rows (decode rows, short questions: the rows whose own tiles
 * would leave most of an MMA tile empty; a long question's tile is full and its reads of a
 * shared block hit L2 beside the others').
 *
 * Work. A grouped run is cut into row tiles (the grouped kernel's rows per CTA: 256 for the
 * warp-specialized kernel = 64 tokens x 4 heads for Llama-3's GQA, 192 at head_dim 64) and, when the tiles alone
 * leave SMs idle, into key ranges of LA_ATTN_SHARED_CHUNK_UNIT multiples (one wave of the
 * kernel); every (range, tile) is an item of the grouped attn_prefill launch, and every range
 * one more partial state of each of its tokens. schedule_attention (cuda_attn_plan.c) cuts
 * the sequences' own blocks as before, writes every tile of a sharer as partial rows and
 * gives its combine item the grouped parts too; la_cu_shared_items then points each grouped
 * row at its token's part (tok_gbase).
 *
 * Bytes: a decode step of N requests sharing a document of n tokens reads its K/V once, 4 n
 * n_kv_heads head_dim bytes per layer, instead of N times (1000 requests on 7000 tokens,
 * Llama-3-8B: 0.92 GB instead of 917 GB per step); the price is the partial rows (f32
 * head_dim + 8 bytes per row and part, written and read once) and one attn_combine launch per
 * layer. Host: two passes over the step's block entries (holders, links and rows in one; the
 * derived lists in the other) with one per-block record (the pool's blocks), no sort. A
 * sequence that lists a segment of the last fully counted one's entries, in the same or
 * another slot, and otherwise blocks of its own (a clone: many requests on one document)
 * costs a comparison of that segment in the first pass and its template's few actions in
 * the second (count_holders). 1000 requests x 445 entries on one document, on this
 * project's CPU host: 0.65 ms in one slot, 1.85 ms in 61 slots; 3.8 ms before clones; the
 * engine's own 1000-request decode batch: 0.68 ms, 4.2 before (GPU_NOTES.md).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_hooks.h"
#include "backend/cuda/cuda_internal.h"
#include "base/timer.h"

#define LA_ATTN_SHARED_MIN_SHARERS 4   /* auto: sharers of a run, at least */
#define LA_ATTN_SHARED_MIN_KEYS 64     /* auto: valid keys of a run, at least */
#define LA_ATTN_SHARED_MAX_ROWS 16     /* auto: new rows of a sequence, at most */
#define LA_ATTN_SHARED_CHUNK_UNIT 128  /* key slots: a multiple of every kernel's key tile */
#define LA_ATTN_SHARED_MIN_CHUNK_UNITS 2
#define LA_ATTN_SHARED_MAX_SHIFT (1 << 30) /* |shift| below it: positions stay in int32 */

static int64_t sh_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Whether entry e can share its block with the ref entry r (top of this file), and its shift. */
static inline bool frame_of(const la_attn_block *e, const la_attn_block *r, int32_t *shift) {
    if (e->n_valid != r->n_valid || (e->k_rope != 0) != (r->k_rope != 0)) return false;
    int64_t s;
    if (e->k_rope) {
        if (e->q_delta != r->q_delta) return false;
        s = (int64_t)e->pos0 - r->pos0;
    } else {
        const int64_t c = (int64_t)e->pos0 - e->q_delta;
        if (c != (int64_t)r->pos0 - r->q_delta || c < INT32_MIN || c > INT32_MAX) return false;
        s = e->q_delta;
    }
    if (s <= -LA_ATTN_SHARED_MAX_SHIFT || s >= LA_ATTN_SHARED_MAX_SHIFT) return false;
    *shift = (int32_t)s;
    return true;
}

static bool eligible(const shared_plan *sh, const la_batch_seq *sq) {
    return sq->n_rows > 0 && (sh->mode == LA_CUDA_ATTN_SHARED_ON || sq->n_rows <= LA_ATTN_SHARED_MAX_ROWS);
}

/* The grouped launch's kernel and rows per CTA for the grouped runs (plain: no k_rope; the
 * canonical blocks carry no q_delta, top of this file). */
static la_cuda_prefill_kernel grouped_kernel(const cuda_backend *c, bool plain) {
    return la_cuda_prefill_kernel_pick(c->prefill_kernel, c->wgmma, c->base.shape.head_dim,
                                       plain ? LA_CUDA_ROTATION_NONE : LA_CUDA_ROTATION_K_ROPE);
}

static la_status reserve(cuda_backend *c, const la_batch *b, la_err *err) {
    shared_plan *sh = &c->sh;
    if (sh->cap_blk < c->n_blocks) {
        free(sh->blk);
        sh->blk = calloc((size_t)c->n_blocks, sizeof(sh_block));
        sh->cap_blk = sh->blk ? c->n_blocks : 0;
        sh->epoch = 0;
        if (!sh->blk) return la_err_set(err, LA_ERR_NO_MEMORY, "shared attention: %lld block records: out of memory",
                                        (long long)c->n_blocks);
    }
    if (++sh->epoch == 0) { /* wrapped: every record looks fresh again */
        memset(sh->blk, 0, (size_t)sh->cap_blk * sizeof(sh_block));
        sh->epoch = 1;
    }
    int64_t cap = sh->cap_entries;
    LA_TRY(la_cu_grow((void **)&sh->emark, &cap, b->n_blocks, 1, err));
    cap = sh->cap_entries;
    LA_TRY(la_cu_grow((void **)&sh->eshift, &cap, b->n_blocks, sizeof(int32_t), err));
    sh->cap_entries = cap;
    LA_TRY(la_cu_grow((void **)&sh->cand, &sh->cap_cand, b->n_blocks, sizeof(int32_t), err));
    cap = sh->cap_seqs;
    LA_TRY(la_cu_grow((void **)&sh->seq_parts, &cap, b->n_seqs, sizeof(int32_t), err));
    cap = sh->cap_seqs;
    LA_TRY(la_cu_grow((void **)&sh->clone, &cap, b->n_seqs, sizeof(sh_clone), err));
    sh->cap_seqs = cap;
    int32_t max_nb = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        if (b->seqs[s].n_blocks > max_nb) max_nb = b->seqs[s].n_blocks;
    if (sh->cap_clone < (int64_t)max_nb + 1) { /* zeroed: add_clones leaves them zero */
        free(sh->cdiff);
        sh->cdiff = calloc(3 * ((size_t)max_nb + 1), sizeof(int32_t));
        sh->cap_clone = sh->cdiff ? (int64_t)max_nb + 1 : 0;
        if (!sh->cdiff) return la_err_set(err, LA_ERR_NO_MEMORY, "shared attention: out of memory");
    }
    sh->clone_lo = INT32_MAX;
    sh->clone_hi = 0;
    LA_TRY(la_cu_grow((void **)&sh->acts, &sh->cap_acts, max_nb, sizeof(int32_t), err));
    LA_TRY(la_cu_grow((void **)&sh->dseqs, &sh->cap_dseqs, b->n_seqs, sizeof(la_batch_seq), err));
    return LA_OK;
}

/* emark bits of a counted entry */
#define SH_COUNTED 1 /* a consistent holder of its block's record */
#define SH_LINKED 2  /* its count added a link to the previous entry's record */

/* Counts entries [i0, i1) of sequence s (count_holders): holders per block,
 * consistency with the ref, shifts, the rows of each block's holders; and link candidates: a
 * holder's entry whose next entry is the block after the ref's entry with the same shift
 * (linked() checks the rest once every count is final). New candidates go to sh->cand.
 * prev: the record of entry i0 - 1 when that entry was counted, else NULL. Returns the
 * record of entry i1 - 1 when it was counted, else NULL. */
static sh_block *count_entries(shared_plan *sh, const la_batch *b, int32_t s, int32_t i0, int32_t i1, sh_block *prev,
                               int32_t *n_cand) {
    const uint32_t ep = sh->epoch;
    const la_batch_seq *sq = &b->seqs[s];
    for (int32_t i = i0; i < i1; i++) {
        const int32_t e = sq->block0 + i;
        const la_attn_block *x = &b->blocks[e];
        sh_block *k = &sh->blk[x->block_id];
        sh_block *const before = prev;
        prev = NULL;
        if (x->n_valid <= 0) continue;
        int32_t shift;
        if (k->epoch != ep) { /* a block whose first holder's frame is out of range: never shared */
            const bool framed = frame_of(x, x, &shift);
            *k = (sh_block){ep, e, 1, s, 0, -1, sq->n_rows, !framed, 0, {0, 0}};
            sh->cand[(*n_cand)++] = x->block_id;
            if (!framed) continue;
        } else {
            if (k->seq == s) { /* a second entry of one sequence */
                k->bad = 1;
                continue;
            }
            k->seq = s;
            if (!frame_of(x, &b->blocks[k->ref], &shift)) continue;
            k->cnt++;
            k->rows += sq->n_rows;
        }
        sh->emark[e] = SH_COUNTED;
        sh->eshift[e] = shift;
        if (before && k->ref == before->ref + 1 && shift == sh->eshift[e - 1]) {
            before->link++;
            sh->emark[e] |= SH_LINKED;
        }
        prev = k;
    }
    return prev;
}

/* Whether block entry x of a clone is the template's entry y (counted: its emark) with
 * positions moved by d: the same block and frame, so that frame_of gives x the shift of y
 * plus d against any ref. */
static inline bool moved_by(const la_attn_block *x, const la_attn_block *y, uint8_t mark, int32_t shift, int64_t d) {
    const int64_t sh = (int64_t)shift + d;
    const bool same = (x->block_id == y->block_id) & (x->n_valid == y->n_valid) & (x->k_rope == y->k_rope);
    const bool moved = (mark & SH_COUNTED) & ((int64_t)x->pos0 == y->pos0 + d) &
                       ((int64_t)x->q_delta == y->q_delta + (y->k_rope ? 0 : d)) &
                       (sh > -LA_ATTN_SHARED_MAX_SHIFT) & (sh < LA_ATTN_SHARED_MAX_SHIFT);
    return same & ((x->n_valid <= 0) | moved); /* an empty entry is never counted */
}

/* Sequence s as a clone of template t (count_holders): its first entry whose block t lists
 * (its record's last holder is t: clones leave records' holders as they are) starts a
 * segment of t's entries, moved by one delta, and its other entries name no block t lists.
 * Sets *cl (m 0: not a clone) and *d. chk_tmpl / chk_same (cuda_backend's, from this
 * batch's check_batch): when check_batch compared s with this t from entry 0, the equal
 * leading entries it found, not compared again. */
static void find_clone(const shared_plan *sh, const la_batch *b, const int32_t *chk_tmpl, const int32_t *chk_same,
                       int32_t s, int32_t t, sh_clone *cl, int32_t *d) {
    const la_batch_seq *sq = &b->seqs[s], *tq = &b->seqs[t];
    const la_attn_block *x = b->blocks + sq->block0, *y = b->blocks + tq->block0;
    const uint32_t ep = sh->epoch;
    *cl = (sh_clone){0, 0, 0};
    int32_t i0 = 0, j0 = 0, m = 0;
#define T_LISTS(id) (sh->blk[id].epoch == ep && sh->blk[id].seq == t)
    while (i0 < sq->n_blocks && (x[i0].n_valid <= 0 || !T_LISTS(x[i0].block_id))) i0++;
    if (i0 == sq->n_blocks) return;
    while (j0 < tq->n_blocks && y[j0].block_id != x[i0].block_id) j0++;
    if (j0 == tq->n_blocks) return;
    const int64_t delta = (int64_t)x[i0].pos0 - y[j0].pos0;
    const int32_t n = sq->n_blocks - i0 < tq->n_blocks - j0 ? sq->n_blocks - i0 : tq->n_blocks - j0;
    if (delta == 0 && i0 == 0 && j0 == 0 && chk_tmpl[s] == t) {
        m = chk_same[s]; /* check_batch compared these very entries */
    } else if (delta == 0) { /* the same entries: the same choices, whatever they were */
        m = la_cu_common_prefix(x + i0, y + j0, n);
    } else { /* 64 entries at a time without branches, then the first that differs */
        const uint8_t *mk = sh->emark + tq->block0 + j0;
        const int32_t *sf = sh->eshift + tq->block0 + j0;
        enum { CHUNK = 64 };
        for (; m + CHUNK <= n; m += CHUNK) {
            bool ok = true;
            for (int32_t i = m; i < m + CHUNK; i++) ok &= moved_by(&x[i0 + i], &y[j0 + i], mk[i], sf[i], delta);
            if (!ok) break;
        }
        while (m < n && moved_by(&x[i0 + m], &y[j0 + m], mk[m], sf[m], delta)) m++;
    }
    if (m == 0 || delta < INT32_MIN || delta > INT32_MAX) return;
    for (int32_t i = i0 + m; i < sq->n_blocks; i++)
        if (x[i].n_valid > 0 && T_LISTS(x[i].block_id)) return;
#undef T_LISTS
    *cl = (sh_clone){i0, j0, m};
    *d = (int32_t)delta;
}

/* Adds the clones of template t (sh->cdiff: holders, rows and links as differences along t's
 * entries) to the records t's entries were counted in: entry j has every clone whose segment
 * covers it as one more holder, with its rows, and one more link where t's count linked it
 * and the segment covers the entry before too. */
static void add_clones(shared_plan *sh, const la_batch *b, int32_t t) {
    const int32_t e0 = b->seqs[t].block0, W = (int32_t)sh->cap_clone;
    int32_t *dc = sh->cdiff, *dr = sh->cdiff + W, *dl = sh->cdiff + 2 * W;
    int32_t n = 0, rows = 0, links = 0;
    for (int32_t j = sh->clone_lo; j < sh->clone_hi; j++) {
        n += dc[j];
        rows += dr[j];
        links += dl[j];
        dc[j] = dr[j] = dl[j] = 0;
        const uint8_t mk = sh->emark[e0 + j];
        if (mk & SH_COUNTED) {
            sh_block *k = &sh->blk[b->blocks[e0 + j].block_id];
            k->cnt += n;
            k->rows += rows;
        }
        if (mk & SH_LINKED) sh->blk[b->blocks[e0 + j - 1].block_id].link += links;
    }
    if (sh->clone_hi > 0) dc[sh->clone_hi] = dr[sh->clone_hi] = dl[sh->clone_hi] = 0;
    sh->clone_lo = INT32_MAX;
    sh->clone_hi = 0;
}

/* The one pass over the step's block entries (count_entries), in batch order. A sequence
 * that lists a segment of the entries of the last sequence counted in full (its template),
 * its positions moved by one delta (the same document in another slot: lazy; or the same
 * slot), and otherwise no block the template lists (its own preamble and tail, blocks some
 * other sequences share) is a clone (find_clone): counted entry by entry, its segment would
 * meet the template's records and make the template's choices with every shift moved by the
 * delta. So it is counted as one more holder of each (add_clones, once the template's clones
 * are known), and its own entries as usual. Any other sequence is counted in full and
 * becomes the template. The records end as a count of every sequence in full would leave
 * them (1000 requests on one document are 999 clones of the first); sh->clone[s] is s's
 * segment. Returns the number of candidates in sh->cand (distinct blocks, first-visit
 * order). */
static int32_t count_holders(shared_plan *sh, const la_batch *b, const int32_t *chk_tmpl, const int32_t *chk_same) {
    const int32_t W = (int32_t)sh->cap_clone;
    int32_t n_cand = 0, t = -1;
    memset(sh->emark, 0, (size_t)b->n_blocks);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        sh_clone *cl = &sh->clone[s];
        *cl = (sh_clone){0, 0, 0};
        if (!eligible(sh, sq)) continue;
        int32_t d = 0;
        if (t >= 0 && !sh->no_clones) find_clone(sh, b, chk_tmpl, chk_same, s, t, cl, &d);
        if (cl->m == 0) {
            if (t >= 0) add_clones(sh, b, t);
            count_entries(sh, b, s, 0, sq->n_blocks, NULL, &n_cand);
            t = s;
            continue;
        }
        const int32_t e = sq->block0 + cl->i0, et = b->seqs[t].block0 + cl->j0, j1 = cl->j0 + cl->m;
        memmove(sh->emark + e, sh->emark + et, (size_t)cl->m); /* e == et: a list given twice */
        if (d == 0) memmove(sh->eshift + e, sh->eshift + et, (size_t)cl->m * sizeof(int32_t));
        else /* the counted entries' (the others' shifts are never read, and may be stale) */
            for (int32_t i = 0; i < cl->m; i++)
                if (sh->emark[et + i] & SH_COUNTED) sh->eshift[e + i] = sh->eshift[et + i] + d;
        sh->cdiff[cl->j0]++;
        sh->cdiff[j1]--;
        sh->cdiff[W + cl->j0] += sq->n_rows;
        sh->cdiff[W + j1] -= sq->n_rows;
        sh->cdiff[2 * W + cl->j0 + 1]++; /* links into the segment's entries after its first */
        sh->cdiff[2 * W + j1]--;
        if (cl->j0 < sh->clone_lo) sh->clone_lo = cl->j0;
        if (j1 > sh->clone_hi) sh->clone_hi = j1;
        /* its own entries, and the links across the segment's ends as a count in full makes
         * them (the template's count linked its own neighbours) */
        sh_block *prev = count_entries(sh, b, s, 0, cl->i0, NULL, &n_cand);
        const la_attn_block *x = b->blocks + sq->block0;
        if (prev && (sh->emark[e] & SH_COUNTED) && sh->blk[x[cl->i0].block_id].ref == prev->ref + 1 &&
            sh->eshift[e] == sh->eshift[e - 1])
            prev->link++;
        const int32_t last = cl->i0 + cl->m - 1;
        prev = sh->emark[sq->block0 + last] & SH_COUNTED ? &sh->blk[x[last].block_id] : NULL;
        count_entries(sh, b, s, cl->i0 + cl->m, sq->n_blocks, prev, &n_cand);
    }
    if (t >= 0) add_clones(sh, b, t);
    return n_cand;
}

/* Whether block record k links to the block after its ref entry: every holder continues
 * there with its shift, and that block has the same holders' count. */
static bool linked(const shared_plan *sh, const la_batch *b, const sh_block *k) {
    if (k->bad || k->cnt < 2 || k->link != k->cnt || k->ref + 1 >= b->n_blocks) return false;
    const sh_block *k2 = &sh->blk[b->blocks[k->ref + 1].block_id];
    return k2->epoch == sh->epoch && !k2->bad && k2->ref == k->ref + 1 && k2->cnt == k->cnt;
}

/* The derived lists as they are filled (la_cu_shared_plan): each sequence's own entries,
 * then the grouped runs' canonical blocks. */
typedef struct derive_state {
    int64_t nd;       /* derived block entries so far */
    int64_t keys_own; /* their valid keys */
    int64_t need;     /* RoPE positions the step needs */
} derive_state;

/* Entry e of sequence s (its rows' positions in [pmin, pmax]) in the derived lists: copied
 * to the sequence's own blocks, or, the head of a grouped run (head), s joins the run's
 * sharers with its shift and *parts more partial states per token. */
static void derive_entry(shared_plan *sh, const la_batch *b, int32_t s, int32_t e, bool head, int32_t pmin,
                         int32_t pmax, int32_t *parts, derive_state *ds) {
    const la_attn_block *x = &b->blocks[e];
    if (!head) {
        sh->dblocks[ds->nd++] = *x;
        ds->keys_own += x->n_valid > 0 ? x->n_valid : 0;
        return;
    }
    sh_run *u = &sh->runs[sh->blk[x->block_id].run];
    const int32_t j = u->sharer0 + u->n_sharers++;
    sh->sharers[j] = s;
    sh->sharer_shift[j] = sh->eshift[e];
    sh->sharer_run_fill[j] = *parts; /* the token's first part of this run */
    *parts += u->n_chunks;
    if (u->krope && b->seqs[s].n_rows > 0) { /* rotations at p - shift - q_delta_ref */
        const int64_t q = b->blocks[u->ref0].q_delta;
        const int64_t a = llabs((int64_t)pmax - sh->eshift[e] - q) + 1, z = llabs((int64_t)pmin - sh->eshift[e] - q) + 1;
        if (a > ds->need) ds->need = a;
        if (z > ds->need) ds->need = z;
    }
}

la_status la_cu_shared_plan(cuda_backend *c, const la_batch *b, la_batch *db, bool *grouped, int64_t *rope_need,
                            la_err *err) {
    shared_plan *sh = &c->sh;
    const double t0 = la_now_ms();
    *db = *b;
    *grouped = false;
    sh->active = false;
    sh->n_runs = sh->n_items = sh->n_grows = 0;
    sh_stats *st = &sh->stats;
    st->steps++;
    st->runs = st->sharers = st->rows = st->items = st->chunks_max = st->keys_shared = 0;
    st->keys_own = st->keys_per_seq = c->step_keys;
    st->plan_ms = 0;
    if (sh->mode == LA_CUDA_ATTN_SHARED_OFF || b->n_seqs < 2 || b->n_blocks < 2) return LA_OK;
    LA_TRY(reserve(c, b, err));
    const int32_t n_cand = count_holders(sh, b, c->chk_tmpl, c->chk_same); /* check_batch's, of b */
    /* runs: heads are candidates no full link leads into */
    for (int32_t i = 0; i < n_cand; i++) {
        const sh_block *k = &sh->blk[sh->cand[i]];
        if (linked(sh, b, k)) sh->blk[b->blocks[k->ref + 1].block_id].has_prev = 1;
    }
    const la_backend_shape *m = &c->base.shape;
    const int64_t n_groups = (int64_t)m->n_kv_heads * c->n_head_chunks;
    bool plain = true;
    int32_t n_runs = 0;
    for (int32_t i = 0; i < n_cand; i++) {
        sh_block *k = &sh->blk[sh->cand[i]];
        if (k->bad || k->cnt < 2 || k->has_prev) continue;
        LA_TRY(la_cu_grow((void **)&sh->runs, &sh->cap_runs, n_runs + 1, sizeof(sh_run), err));
        sh_run *r = &sh->runs[n_runs];
        memset(r, 0, sizeof *r);
        r->ref0 = k->ref;
        r->n_sharers = k->cnt;
        r->n_rows = k->rows; /* its sharers' new rows: the head's holders' */
        for (const sh_block *cur = k;; cur = &sh->blk[b->blocks[r->ref0 + r->n_blocks].block_id]) {
            const la_attn_block *x = &b->blocks[r->ref0 + r->n_blocks];
            sh->blk[x->block_id].run = n_runs;
            r->n_keys += x->n_valid;
            r->krope |= x->k_rope != 0;
            r->n_blocks++;
            if (!linked(sh, b, cur)) break;
        }
        r->grouped = sh->mode == LA_CUDA_ATTN_SHARED_ON ||
                     (r->n_sharers >= LA_ATTN_SHARED_MIN_SHARERS && r->n_keys >= LA_ATTN_SHARED_MIN_KEYS);
        if (r->grouped && r->krope) plain = false;
        n_runs++;
    }
    sh->n_runs = n_runs;
    /* the grouped kernel, its tiles and the key ranges: one wave of it over the SMs */
    sh->kernel = grouped_kernel(c, plain);
    const int32_t rows = la_cuda_prefill_rows(sh->kernel, c->base.shape.head_dim), TT = rows / c->heads_per_cta;
    int64_t base = 0, n_sharers = 0, n_rows = 0;
    for (int32_t r = 0; r < n_runs; r++)
        if (sh->runs[r].grouped) {
            base += sh_ceil_div(sh->runs[r].n_rows, TT) * n_groups;
            n_sharers += sh->runs[r].n_sharers;
            n_rows += sh->runs[r].n_rows;
        }
    if (base == 0) return LA_OK;
    const int64_t slots = (int64_t)c->n_sm * (sh->kernel == LA_CUDA_PREFILL_WGMMA_WS ? 1 : 2);
    int64_t factor = base < slots ? slots / base : 1, n_items = 0, n_grows = 0, chunks_max = 0;
    for (int pass = 0; pass < 2; pass++) { /* the second without splitting, if the grid overflows */
        n_items = n_grows = chunks_max = 0;
        for (int32_t r = 0; r < n_runs; r++) {
            sh_run *u = &sh->runs[r];
            if (!u->grouped) continue;
            const int64_t units = sh_ceil_div((int64_t)u->n_blocks * c->block_size, LA_ATTN_SHARED_CHUNK_UNIT);
            int64_t n_chunks = factor < units / LA_ATTN_SHARED_MIN_CHUNK_UNITS ? factor
                                                                               : units / LA_ATTN_SHARED_MIN_CHUNK_UNITS;
            if (n_chunks < 1) n_chunks = 1;
            const int64_t per = sh_ceil_div(units, n_chunks);
            u->n_chunks = (int32_t)sh_ceil_div(units, per);
            u->chunk_keys = (int32_t)(per * LA_ATTN_SHARED_CHUNK_UNIT);
            n_items += u->n_chunks * sh_ceil_div(u->n_rows, TT);
            n_grows += (int64_t)u->n_chunks * u->n_rows;
            if (u->n_chunks > chunks_max) chunks_max = u->n_chunks;
        }
        if (n_items <= LA_ATTN_MAX_PREFILL_ITEMS) break;
        factor = 1;
    }
    if (n_items > LA_ATTN_MAX_PREFILL_ITEMS || n_grows > INT32_MAX) return LA_OK; /* too big: per sequence */
    /* sharers (CSR per run), each sequence's parts, the derived lists */
    int64_t cap = sh->cap_sharers;
    LA_TRY(la_cu_grow((void **)&sh->sharers, &cap, n_sharers, sizeof(int32_t), err));
    cap = sh->cap_sharers;
    LA_TRY(la_cu_grow((void **)&sh->sharer_shift, &cap, n_sharers, sizeof(int32_t), err));
    cap = sh->cap_sharers;
    LA_TRY(la_cu_grow((void **)&sh->sharer_run_fill, &cap, n_sharers, sizeof(int32_t), err));
    sh->cap_sharers = cap;
    int64_t at = 0, canon_blocks = 0;
    for (int32_t r = 0; r < n_runs; r++)
        if (sh->runs[r].grouped) {
            sh->runs[r].sharer0 = (int32_t)at;
            sh->runs[r].n_sharers = 0; /* counted again as they are filled */
            at += sh->blk[b->blocks[sh->runs[r].ref0].block_id].cnt;
            canon_blocks += sh->runs[r].n_blocks;
        }
    LA_TRY(la_cu_grow((void **)&sh->dblocks, &sh->cap_dblocks, b->n_blocks + canon_blocks, sizeof(la_attn_block), err));
    /* each sequence's own blocks and its runs' parts (derive_entry). A clone (count_holders)
     * repeats its template's actions over its segment: sh->acts holds the template's entry
     * offsets x 2 that are copied (+0) or head a grouped run (+1), in order; its other entries
     * are inside a grouped run. */
    derive_state ds = {0, 0, *rope_need};
    int32_t n_acts = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        const bool el = eligible(sh, sq);
        const sh_clone cl = el ? sh->clone[s] : (sh_clone){0, 0, 0};
        const bool tmpl = el && cl.m == 0;
        if (tmpl) n_acts = 0; /* its acts follow */
        int32_t parts = 0, pmin = INT32_MAX, pmax = INT32_MIN;
        for (int32_t t = 0; t < sq->n_rows; t++) {
            const int32_t p = b->pos[sq->row0 + t];
            if (p < pmin) pmin = p;
            if (p > pmax) pmax = p;
        }
        sh->dseqs[s] = (la_batch_seq){sq->row0, sq->n_rows, (int32_t)ds.nd, 0};
        for (int32_t i = 0; i < sq->n_blocks; i++) {
            if (i == cl.i0 && cl.m > 0) { /* the segment: the template's actions on it */
                int32_t lo = 0, hi = n_acts; /* the first act at or after j0 */
                while (lo < hi) {
                    const int32_t mid = lo + (hi - lo) / 2;
                    if ((sh->acts[mid] >> 1) < cl.j0) lo = mid + 1;
                    else hi = mid;
                }
                for (int32_t a = lo; a < n_acts && (sh->acts[a] >> 1) < cl.j0 + cl.m; a++)
                    derive_entry(sh, b, s, sq->block0 + cl.i0 + (sh->acts[a] >> 1) - cl.j0, sh->acts[a] & 1, pmin,
                                 pmax, &parts, &ds);
                i += cl.m - 1;
                continue;
            }
            const int32_t e = sq->block0 + i;
            const sh_block *k = el && (sh->emark[e] & SH_COUNTED) ? &sh->blk[b->blocks[e].block_id] : NULL;
            const bool head = k && k->run >= 0 && sh->runs[k->run].grouped;
            if (head && sh->runs[k->run].ref0 != k->ref) continue; /* inside a grouped run */
            if (tmpl) sh->acts[n_acts++] = i * 2 + head;
            derive_entry(sh, b, s, e, head, pmin, pmax, &parts, &ds);
        }
        sh->dseqs[s].n_blocks = (int32_t)(ds.nd - sh->dseqs[s].block0);
        sh->seq_parts[s] = parts;
    }
    /* canonical blocks of the grouped runs, after every sequence's own */
    int64_t keys_shared = 0;
    for (int32_t r = 0; r < n_runs; r++) {
        sh_run *u = &sh->runs[r];
        if (!u->grouped) continue;
        u->canon0 = (int32_t)ds.nd;
        keys_shared += u->n_keys;
        for (int32_t i = 0; i < u->n_blocks; i++) {
            const la_attn_block x = b->blocks[u->ref0 + i];
            sh->dblocks[ds.nd++] = x.k_rope ? x : (la_attn_block){x.block_id, x.n_valid, x.pos0 - x.q_delta, 0, 0};
        }
    }
    db->blocks = sh->dblocks;
    db->n_blocks = (int32_t)ds.nd;
    db->seqs = sh->dseqs;
    *rope_need = ds.need;
    *grouped = true;
    sh->active = true;
    sh->n_items = (int32_t)n_items; /* the count la_cu_shared_items fills */
    sh->n_grows = (int32_t)n_grows;
    st->steps_grouped++;
    st->runs = 0;
    for (int32_t r = 0; r < n_runs; r++) st->runs += sh->runs[r].grouped;
    st->sharers = n_sharers;
    st->rows = n_rows;
    st->items = n_items;
    st->chunks_max = chunks_max;
    st->keys_shared = keys_shared;
    st->keys_own = ds.keys_own;
    st->keys_per_seq = c->step_keys; /* every entry's valid keys (check_batch) */
    st->plan_ms = la_now_ms() - t0;
    return LA_OK;
}

int64_t la_cu_shared_ctas(const cuda_backend *c) {
    if (!c->sh.active) return 0;
    return (int64_t)c->sh.n_items * c->base.shape.n_kv_heads * c->n_head_chunks;
}

/* Index of the first canonical block of run u whose suffix has no slot visible at pmax
 * (cuda_attn_plan.c's search over the suffix minimum of pos0; smin [n_blocks + 1]). */
static int32_t visible_blocks(const int32_t *smin, int32_t nb, int32_t pmax) {
    int32_t lo = 0, hi = nb;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (smin[mid] > pmax) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

la_status la_cu_shared_items(cuda_backend *c, const la_batch *b, const la_batch *db, la_err *err) {
    shared_plan *sh = &c->sh;
    const double t0 = la_now_ms();
    const int64_t n_groups = (int64_t)c->base.shape.n_kv_heads * c->n_head_chunks;
    const int32_t rows = la_cuda_prefill_rows(sh->kernel, c->base.shape.head_dim), TT = rows / c->heads_per_cta;
    const int32_t B = c->block_size;
    LA_TRY(la_cu_grow((void **)&sh->items, &sh->cap_items, sh->n_items, sizeof(la_cuda_attn_item), err));
    LA_TRY(la_cu_grow((void **)&sh->grows, &sh->cap_grows, sh->n_grows, sizeof(la_cuda_attn_grow), err));
    int32_t max_nb = 0;
    for (int32_t r = 0; r < sh->n_runs; r++)
        if (sh->runs[r].grouped && sh->runs[r].n_blocks > max_nb) max_nb = sh->runs[r].n_blocks;
    int32_t *smin = malloc(sizeof(int32_t) * (size_t)(max_nb + 1));
    if (!smin) return la_err_set(err, LA_ERR_NO_MEMORY, "shared attention: out of memory");
    int64_t ni = 0, ng = 0;
    for (int32_t r = 0; r < sh->n_runs; r++) {
        const sh_run *u = &sh->runs[r];
        if (!u->grouped) continue;
        const la_attn_block *cb = db->blocks + u->canon0;
        smin[u->n_blocks] = INT32_MAX;
        for (int32_t i = u->n_blocks - 1; i >= 0; i--) {
            const int32_t v = cb[i].n_valid > 0 ? cb[i].pos0 : INT32_MAX;
            smin[i] = v < smin[i + 1] ? v : smin[i + 1];
        }
        for (int32_t ch = 0; ch < u->n_chunks; ch++) {
            const int64_t g0 = ng;
            for (int32_t j = u->sharer0; j < u->sharer0 + u->n_sharers; j++) {
                const la_batch_seq *sq = &b->seqs[sh->sharers[j]];
                for (int32_t t = 0; t < sq->n_rows; t++) {
                    const int32_t tok = sq->row0 + t, stride = sh->tok_gstride[tok];
                    sh->grows[ng++] = (la_cuda_attn_grow){
                        tok, (int32_t)((int64_t)b->pos[tok] - sh->sharer_shift[j]),
                        (int32_t)(sh->tok_gbase[tok] + (int64_t)(sh->sharer_run_fill[j] + ch) * n_groups * stride),
                        stride};
                }
            }
            for (int64_t k0 = g0; k0 < ng; k0 += TT) {
                const int32_t n = ng - k0 < TT ? (int32_t)(ng - k0) : TT;
                int32_t pmax = INT32_MIN;
                for (int32_t k = 0; k < n; k++)
                    if (sh->grows[k0 + k].pos > pmax) pmax = sh->grows[k0 + k].pos;
                const int32_t kv_len = visible_blocks(smin, u->n_blocks, pmax) * B;
                const int32_t kv0 = ch * u->chunk_keys;
                int32_t kv1 = kv0 + u->chunk_keys < kv_len ? kv0 + u->chunk_keys : kv_len;
                if (kv1 < kv0) kv1 = kv0; /* nothing visible in this range: the item writes empty parts */
                sh->items[ni++] = (la_cuda_attn_item){u->canon0, (int32_t)k0, n, pmax, kv0, kv1, 0, -1};
            }
        }
    }
    free(smin);
    if (ni != sh->n_items || ng != sh->n_grows)
        return la_err_set(err, LA_ERR_INTERNAL, "shared attention: %lld items, %lld rows planned as %d, %d",
                          (long long)ni, (long long)ng, sh->n_items, sh->n_grows);
    sh->stats.plan_ms += la_now_ms() - t0;
    return LA_OK;
}

void la_cu_shared_free(shared_plan *sh) {
    free(sh->blk);
    free(sh->emark);
    free(sh->eshift);
    free(sh->cand);
    free(sh->clone);
    free(sh->cdiff);
    free(sh->acts);
    free(sh->runs);
    free(sh->sharers);
    free(sh->sharer_shift);
    free(sh->sharer_run_fill);
    free(sh->seq_parts);
    free(sh->dblocks);
    free(sh->dseqs);
    free(sh->tok_gbase);
    free(sh->tok_gstride);
    free(sh->items);
    free(sh->grows);
    memset(sh, 0, sizeof *sh);
}
