/* CUDA backend, attention planning (cuda_internal.h): batch_begin checks the step's
 * metadata, schedules the attention work on the host, once per step for every layer, and
 * uploads both.
 *
 * Per-step metadata (batch_begin): the la_batch arrays and the attention work lists are
 * packed into one pinned host buffer and copied with one cudaMemcpyAsync; the attention
 * work is scheduled on the host there, once per step, for every layer:
 *
 *   - each sequence's new rows are cut into tiles: rows / heads_per_cta tokens for prefill,
 *     rows = the rows per CTA of the step's attn_prefill kernel (la_cuda_prefill_kernel_pick
 *     from the one asked for, LA_ATTN_PREFILL at create or la_cuda_attn_prefill_variant_set,
 *     read at each batch_begin: 256 for the warp-specialized kernel, the default on a 9.0
 *     GPU for plain steps, so 64 tokens x 4 query heads for Llama-3, 192 at head_dim 64;
 *     128 for the others: la_cuda_prefill_rows),
 *     one token for decode (a sequence with one new row);
 *   - a tile reads key slots [0, kv_len): the blocks up to the last whose first slot is
 *     causally visible to the tile's latest token (a binary search over the suffix
 *     minimum of pos0, so blocks after the question are never staged); in a lazy step
 *     (q_delta, no k_rope) on the warp-specialized kernel (la_cuda_attn_lazy_ws_set ON),
 *     which rotates an item's queries once, the prefill tiles' ranges are cut where
 *     q_delta changes (segments: a document each, the question's own blocks one more),
 *     and no item crosses a cut;
 *   - when tiles x KV-head groups would leave SMs idle (fewer CTAs than 2 per SM: a
 *     64-token question, a small decode batch), every tile (every segment) is split over
 *     its key range into balanced chunks of at least 2 key tiles so the total reaches
 *     about 2 CTAs per SM (flash-decoding; 1 warp-specialized CTA per SM, as it holds two
 *     128-row CTAs' rows). A step of decode rows only targets 1 CTA per SM, at most one
 *     wave, in chunks of at least 8 key tiles, and a grid that fits that wave runs
 *     attn_decode's deep instance, 8 warps per CTA (c->step_decode DEEP; a decode CTA
 *     is bound by latency and instruction issue: GPU_NOTES.md, versions 11-12).
 *     LA_ATTN_SPLIT_CTAS=N at create sets both targets, 1..16 CTAs per SM, for benchmarks
 *     ((N + 1) / 2 for steps with the warp-specialized kernel's prefill tiles);
 *     LA_ATTN_DECODE_MIN_SPLIT=N sets the decode-only steps' smallest chunk (key tiles).
 *     Split tiles write partial rows that attn_combine merges, except split decode rows
 *     with LA_CUDA_FUSED_MERGE (on by default): the last CTA of each split set merges them
 *     inside attn_decode (la_cuda_attn_item.merge);
 *   - a step with many decode items and none split (at least 8 CTAs per SM as above) runs
 *     them packed, one whole item per warp, sorted longest first (c->step_decode PACKED,
 *     LA_ATTN_DECODE_PACKED; attn_decode.cu);
 *   - before all this, shared-block attention (cuda_attn_shared.c) takes the runs of blocks
 *     that several sequences share out of their lists into one grouped launch, and the
 *     tiles above are cut over what is left (the derived batch); a sharer's tiles then
 *     write partial rows, merged by attn_combine with its grouped parts.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_hooks.h"
#include "backend/cuda/cuda_internal.h"

/* Key tiles (of LA_ATTN_KEYS_PER_TILE) per split item at least, in a step of decode rows
 * only (schedule_attention); LA_ATTN_DECODE_MIN_SPLIT=N at create sets it (sweeps). */
#define LA_ATTN_DECODE_MIN_SPLIT_TILES 8
/* Decode CTAs per SM, unpacked, from which AUTO packs a step's decode items one per warp
 * (la_cuda_attn_decode_packed_set): 8 = two packed CTAs per SM or more. */
#define LA_ATTN_DECODE_PACKED_MIN_CTAS_PER_SM 8

la_status la_cu_grow(void **arr, int64_t *cap, int64_t n, size_t elem, la_err *err) {
    if (n <= *cap) return LA_OK;
    int64_t nc = *cap ? *cap : 64;
    while (nc < n) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: host scratch of %lld elements: out of memory",
                              (long long)nc);
    *arr = p;
    *cap = nc;
    return LA_OK;
}

int32_t la_cu_common_prefix(const la_attn_block *a, const la_attn_block *b, int32_t n) {
    enum { CHUNK = 64 }; /* entries per memcmp before the entry-by-entry search */
    int32_t i = 0;
    while (i + CHUNK <= n && memcmp(a + i, b + i, CHUNK * sizeof *a) == 0) i += CHUNK;
    while (i < n && memcmp(a + i, b + i, sizeof *a) == 0) i++;
    return i;
}

/* ============================================================ batch_begin ============ */

static int cmp_items_longest_first(const void *a, const void *b) {
    const la_cuda_attn_item *x = a, *y = b;
    int32_t lx = x->kv1 - x->kv0, ly = y->kv1 - y->kv0;
    return (ly > lx) - (ly < lx);
}

static int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Block entries [at, at + n) of the batch: each names a block of the pool with 0..block_size
 * valid slots. Adds their valid slots to *keys, raises *need to the RoPE positions their
 * k_rope blocks reach, and lowers *dmin / raises *dmax to their q_delta extremes. One
 * branch-free pass; the first bad entry is looked for only when there is one. */
static la_status check_entries(const cuda_backend *c, const la_attn_block *blocks, int32_t at, int32_t n,
                               int64_t *keys, int64_t *need, int64_t *dmin, int64_t *dmax, la_err *err) {
    const la_attn_block *bl = blocks + at;
    const int64_t n_pool = c->n_blocks;
    const uint32_t B = (uint32_t)c->block_size;
    int64_t k = 0, kr = 0, lo = *dmin, hi = *dmax;
    bool bad = false;
    for (int32_t i = 0; i < n; i++) {
        const la_attn_block *x = &bl[i];
        bad |= x->block_id < 0 || x->block_id >= n_pool || (uint32_t)x->n_valid > B;
        k += x->n_valid;
        const int64_t r = x->k_rope ? llabs((int64_t)x->pos0) + c->block_size + 1 : 0;
        kr = r > kr ? r : kr;
        lo = x->q_delta < lo ? x->q_delta : lo;
        hi = x->q_delta > hi ? x->q_delta : hi;
    }
    for (int32_t i = 0; bad && i < n; i++) {
        const la_attn_block *x = &bl[i];
        if (x->block_id < 0 || x->block_id >= n_pool || (uint32_t)x->n_valid > B)
            return la_err_set(err, LA_ERR_INTERNAL, "batch: bad block %d (n_valid %d) at entry %d for a pool of %lld "
                              "blocks", x->block_id, x->n_valid, at + i, (long long)n_pool);
    }
    *keys += k;
    if (kr > *need) *need = kr;
    *dmin = lo;
    *dmax = hi;
    return LA_OK;
}

/* Validate the batch against the pool and the vocabulary, and find the RoPE positions it
 * needs. Writes nothing but c->bad_token*, c->step_keys and, per sequence, the template
 * it compared it with and their equal leading entries (c->chk_tmpl, c->chk_same: the shared
 * plan's clone search reuses them). The engine's batches list each
 * sequence's entries after the one before's (la_batch_builder), so one pass over each
 * sequence's entries checks them; another layout takes a pass over all entries first. */
static la_status check_batch(cuda_backend *c, const la_batch *b, int64_t *rope_need, la_err *err) {
    const la_backend_shape *m = &c->base.shape;
    int64_t pool_slots = c->n_blocks * c->block_size, need = 1;
    c->bad_token_row = -1;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        /* LA_TOKEN_PREV: a row of the latest queued argmax (backend.h), still in f32_dev */
        const bool prev_ok = b->tokens[t] < 0 && LA_TOKEN_PREV_ROW(b->tokens[t]) < c->prev_ids_rows;
        if (c->bad_token_row < 0 && !prev_ok && (b->tokens[t] < 0 || b->tokens[t] >= m->vocab_size)) {
            c->bad_token_row = t;
            c->bad_token = b->tokens[t];
        }
        if (b->slots[t] < 0 || b->slots[t] >= pool_slots)
            return la_err_set(err, LA_ERR_INTERNAL, "batch: slot %lld of row %d outside the pool of %lld slots",
                              (long long)b->slots[t], t, (long long)pool_slots);
        int64_t p = llabs((int64_t)b->pos[t]) + 1;
        if (p > need) need = p;
        if (b->k_pos[t] != LA_POS_UNROTATED && llabs((int64_t)b->k_pos[t]) + 1 > need)
            need = llabs((int64_t)b->k_pos[t]) + 1;
    }
    bool tiled = true; /* every entry in one sequence's list, in order */
    int64_t next = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        if (sq->row0 < 0 || sq->n_rows < 0 || (int64_t)sq->row0 + sq->n_rows > b->n_tokens ||
            sq->block0 < 0 || sq->n_blocks < 0 || (int64_t)sq->block0 + sq->n_blocks > b->n_blocks)
            return la_err_set(err, LA_ERR_INTERNAL, "batch: sequence %d has rows [%d, +%d) blocks [%d, +%d) "
                              "outside the batch", s, sq->row0, sq->n_rows, sq->block0, sq->n_blocks);
        tiled = tiled && sq->block0 == next;
        next = (int64_t)sq->block0 + sq->n_blocks;
    }
    tiled = tiled && next == b->n_blocks;
    /* A sequence whose leading entries equal those of the last one checked in full (its
     * template: 1000 requests on one document in one slot) has them checked by a memcmp;
     * their keys and q_delta extremes are the template's over as many entries (c->chk_*,
     * filled for a template once it has such a follower). */
    int64_t keys = 0, unused = 0;
    int32_t t = -1;
    bool t_sums = false; /* c->chk_* hold t's */
    int64_t cap_seqs = c->cap_chk_seqs;
    LA_TRY(la_cu_grow((void **)&c->chk_tmpl, &cap_seqs, b->n_seqs, sizeof(int32_t), err));
    cap_seqs = c->cap_chk_seqs;
    LA_TRY(la_cu_grow((void **)&c->chk_same, &cap_seqs, b->n_seqs, sizeof(int32_t), err));
    c->cap_chk_seqs = cap_seqs;
    if (!tiled) { /* every entry, in or out of a sequence's list */
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        LA_TRY(check_entries(c, b->blocks, 0, b->n_blocks, &keys, &need, &lo, &hi, err));
    }
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        c->chk_tmpl[s] = -1;
        c->chk_same[s] = 0;
        if (sq->n_blocks == 0) continue;
        int64_t dmin = INT64_MAX, dmax = INT64_MIN, *kp = tiled ? &keys : &unused;
        int32_t same = 0; /* leading entries equal to t's */
        if (t >= 0) {
            const la_batch_seq *tq = &b->seqs[t];
            same = la_cu_common_prefix(b->blocks + sq->block0, b->blocks + tq->block0,
                                       sq->n_blocks < tq->n_blocks ? sq->n_blocks : tq->n_blocks);
            c->chk_tmpl[s] = t;
            c->chk_same[s] = same;
        }
        if (same > 0) {
            if (!t_sums) { /* t's running sums, once */
                const la_batch_seq *tq = &b->seqs[t];
                int64_t cap = c->cap_chk;
                LA_TRY(la_cu_grow((void **)&c->chk_keys, &cap, tq->n_blocks + 1, sizeof(int64_t), err));
                cap = c->cap_chk;
                LA_TRY(la_cu_grow((void **)&c->chk_lo, &cap, tq->n_blocks + 1, sizeof(int32_t), err));
                cap = c->cap_chk;
                LA_TRY(la_cu_grow((void **)&c->chk_hi, &cap, tq->n_blocks + 1, sizeof(int32_t), err));
                c->cap_chk = cap;
                const la_attn_block *y = b->blocks + tq->block0;
                c->chk_keys[0] = 0;
                c->chk_lo[0] = INT32_MAX;
                c->chk_hi[0] = INT32_MIN;
                for (int32_t i = 0; i < tq->n_blocks; i++) {
                    c->chk_keys[i + 1] = c->chk_keys[i] + y[i].n_valid;
                    c->chk_lo[i + 1] = y[i].q_delta < c->chk_lo[i] ? y[i].q_delta : c->chk_lo[i];
                    c->chk_hi[i + 1] = y[i].q_delta > c->chk_hi[i] ? y[i].q_delta : c->chk_hi[i];
                }
                t_sums = true;
            }
            *kp += c->chk_keys[same];
            dmin = c->chk_lo[same];
            dmax = c->chk_hi[same];
        } else {
            t = s;
            t_sums = false;
        }
        LA_TRY(check_entries(c, b->blocks, sq->block0 + same, sq->n_blocks - same, kp, &need, &dmin, &dmax, err));
        if (sq->n_rows == 0) continue;
        /* lazy: |p - q_delta| is bounded by the extremes of both */
        int64_t pmin = INT64_MAX, pmax = INT64_MIN;
        for (int32_t r = 0; r < sq->n_rows; r++) {
            int64_t p = b->pos[sq->row0 + r];
            if (p < pmin) pmin = p;
            if (p > pmax) pmax = p;
        }
        int64_t a = llabs(pmax - dmin) + 1, z = llabs(pmin - dmax) + 1;
        if (a > need) need = a;
        if (z > need) need = z;
    }
    for (int32_t i = 0; i < b->n_logit_rows; i++)
        if (b->logit_rows[i] < 0 || b->logit_rows[i] >= b->n_tokens)
            return la_err_set(err, LA_ERR_INTERNAL, "batch: logit row %d outside [0, %d)", b->logit_rows[i],
                              b->n_tokens);
    *rope_need = need;
    c->step_keys = keys;
    return LA_OK;
}

/* Graph steps (all decode) whose tiles were split: pad the decode items to the most a
 * split schedule can produce, slots / n_groups (the split loop stops once the items x
 * groups fit in the slots), and the combine items and in-kernel merge sets in use to one
 * per tile, so the grids and metadata layout of the attention kernels depend on the batch
 * size only. A padded decode item has no tokens and returns at once (attn_decode.cu); a
 * padded combine item has no tokens and writes nothing (attn_combine.cu); no item names a
 * padded merge set. Sets *part_rows to a size fixed per batch size (the partial buffers
 * are then not regrown from step to step). */
static la_status pad_split_schedule(cuda_backend *c, const la_batch *b, int64_t slots, int64_t n_groups,
                                    int64_t n_tiles, int64_t *n_d, int64_t *n_c, int64_t *n_m,
                                    int64_t *part_rows, la_err *err) {
    const int64_t cap_d = slots / n_groups, R = c->heads_per_cta;
    if (*n_d > cap_d || *n_c > n_tiles || *n_m > n_tiles) /* cannot happen (see above); if it did, */
        return LA_OK; /* the real lists stay: still correct, only the graph key varies */
    LA_TRY(la_cu_grow((void **)&c->items_decode, &c->cap_items_decode, cap_d, sizeof(la_cuda_attn_item), err));
    const int32_t row = b->seqs[0].row0;
    for (int64_t i = *n_d; i < cap_d; i++)
        c->items_decode[i] = (la_cuda_attn_item){0, row, 0, b->pos[row], 0, 0, -1, -1};
    *n_d = cap_d;
    la_cuda_attn_combine_item **lists[2] = {&c->combine, &c->merge};
    int64_t *caps[2] = {&c->cap_combine, &c->cap_merge}, *ns[2] = {n_c, n_m};
    for (int l = 0; l < 2; l++) {
        if (*ns[l] == 0) continue;
        LA_TRY(la_cu_grow((void **)lists[l], caps[l], n_tiles, sizeof(la_cuda_attn_combine_item), err));
        for (int64_t i = *ns[l]; i < n_tiles; i++)
            (*lists[l])[i] = (la_cuda_attn_combine_item){row, 0, 0, 0, (int32_t)R, {0}};
        *ns[l] = n_tiles;
    }
    *part_rows = cap_d * n_groups * R;
    if (*part_rows > INT32_MAX) return la_err_set(err, LA_ERR_UNSUPPORTED, "attention: too many partial rows");
    return LA_OK;
}

/* The attention work lists (see the top of this file). fixed_grid: a graph step (every
 * sequence one decode row); pad the lists (pad_split_schedule). seq_parts (shared-block
 * attention, cuda_attn_shared.c; NULL: none): sequence s's tokens have seq_parts[s] more
 * partial states from the grouped launch, so every tile of such a sequence writes partial
 * rows and its combine item merges those too; the row of token t's grouped part 0 goes to
 * c->sh.tok_gbase[t], its stride between KV-head groups to tok_gstride[t]. extra_ctas: the
 * grouped launch's CTAs, counted against the split target. */
/* Segment i of tile tp (tile_plan): its key tiles, and the parts a split at `chunk` key tiles
 * a part cuts it into (INT64_MAX: no split, one part). */
static int64_t seg_key_tiles(const cuda_backend *c, const tile_plan *tp, int32_t i) {
    return ceil_div64((int64_t)c->segs[tp->seg0 + i + 1] - c->segs[tp->seg0 + i], LA_ATTN_KEYS_PER_TILE);
}
static int64_t seg_parts(int64_t key_tiles, int64_t chunk) {
    return chunk == INT64_MAX || key_tiles <= 1 ? 1 : ceil_div64(key_tiles, chunk);
}
/* The items tile tp becomes at `chunk`: every segment's parts. */
static int64_t tile_parts(const cuda_backend *c, const tile_plan *tp, int64_t chunk) {
    int64_t n = 0;
    for (int32_t i = 0; i < tp->n_seg; i++) n += seg_parts(seg_key_tiles(c, tp, i), chunk);
    return n;
}

/* The step's tiles for `kernel`'s rows per CTA, into c->tiles, with their segments in c->segs
 * (tile_plan), and what the split needs. cut: the warp-specialized kernel in a lazy step
 * rotates an item's queries once, at its first block's q_delta (attn_prefill_wgmma_ws.cu), so
 * every prefill tile's key range is cut where q_delta changes and no item crosses a
 * document's edge. */
typedef struct tiles_info {
    int64_t n_tiles, key_tiles, min_items; /* key_tiles: of all segments; min_items: one a segment */
    bool all_decode;
} tiles_info;
static la_status cut_tiles(cuda_backend *c, const la_batch *b, la_cuda_prefill_kernel kernel, bool cut, tiles_info *ti,
                           la_err *err) {
    const int32_t B = c->block_size, TT = la_cuda_prefill_rows(kernel, c->base.shape.head_dim) / c->heads_per_cta;
    int64_t n_tiles = 0, max_nb = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        if (sq->n_rows <= 0) continue;
        n_tiles += sq->n_rows == 1 ? 1 : ceil_div64(sq->n_rows, TT);
        if (sq->n_blocks > max_nb) max_nb = sq->n_blocks;
    }
    LA_TRY(la_cu_grow((void **)&c->tiles, &c->cap_tiles, n_tiles, sizeof(tile_plan), err));
    LA_TRY(la_cu_grow((void **)&c->smin, &c->cap_smin, max_nb + 1, sizeof(int32_t), err));
    int64_t k = 0, n_segs = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const la_batch_seq *sq = &b->seqs[s];
        if (sq->n_rows <= 0) continue;
        const la_attn_block *bl = b->blocks + sq->block0;
        int32_t nb = sq->n_blocks;
        c->smin[nb] = INT32_MAX;
        for (int32_t i = nb - 1; i >= 0; i--) {
            int32_t v = bl[i].n_valid > 0 ? bl[i].pos0 : INT32_MAX;
            c->smin[i] = v < c->smin[i + 1] ? v : c->smin[i + 1];
        }
        int32_t step = sq->n_rows == 1 ? 1 : TT;
        for (int32_t r0 = 0; r0 < sq->n_rows; r0 += step) {
            int32_t n = sq->n_rows - r0 < step ? sq->n_rows - r0 : step;
            int32_t pmax = INT32_MIN;
            for (int32_t r = 0; r < n; r++)
                if (b->pos[sq->row0 + r0 + r] > pmax) pmax = b->pos[sq->row0 + r0 + r];
            int32_t lo = 0, hi = nb; /* first block index whose suffix minimum is past pmax */
            while (lo < hi) {
                int32_t mid = lo + (hi - lo) / 2;
                if (c->smin[mid] > pmax) hi = mid;
                else lo = mid + 1;
            }
            tile_plan tp = {s, sq->row0 + r0, n, pmax, lo * B, sq->n_rows == 1, (int32_t)n_segs, 1};
            LA_TRY(la_cu_grow((void **)&c->segs, &c->cap_segs, n_segs + lo + 2, sizeof(int32_t), err));
            c->segs[n_segs++] = 0;
            if (cut && !tp.decode)
                for (int32_t i = 1; i < lo; i++)
                    if (bl[i].q_delta != bl[i - 1].q_delta) {
                        c->segs[n_segs++] = i * B;
                        tp.n_seg++;
                    }
            c->segs[n_segs++] = lo * B;
            c->tiles[k++] = tp;
        }
    }
    *ti = (tiles_info){n_tiles, 0, 0, true};
    for (int64_t t = 0; t < n_tiles; t++) {
        for (int32_t i = 0; i < c->tiles[t].n_seg; i++) ti->key_tiles += seg_key_tiles(c, &c->tiles[t], i);
        ti->min_items += c->tiles[t].n_seg;
        ti->all_decode = ti->all_decode && c->tiles[t].decode;
    }
    return LA_OK;
}

static la_status schedule_attention(cuda_backend *c, const la_batch *b, bool fixed_grid, const int32_t *seq_parts,
                                    int64_t extra_ctas, la_err *err) {
    const la_backend_shape *m = &c->base.shape;
    la_cuda_step_rotation rotation = LA_CUDA_ROTATION_NONE; /* la_cuda_prefill_kernel_pick */
    for (int32_t i = 0; i < b->n_blocks && rotation != LA_CUDA_ROTATION_K_ROPE; i++)
        if (b->blocks[i].k_rope) rotation = LA_CUDA_ROTATION_K_ROPE;
        else if (b->blocks[i].q_delta) rotation = LA_CUDA_ROTATION_Q_DELTA;
    la_cuda_prefill_kernel kernel = la_cuda_prefill_kernel_pick(c->prefill_kernel, c->wgmma, m->head_dim, rotation);
    /* a lazy step on the warp-specialized kernel (its tiles cut) only under
     * la_cuda_attn_lazy_ws_set ON, and only while its cut items fit one launch; else the next
     * kernel, uncut */
    const bool lazy_ws = kernel == LA_CUDA_PREFILL_WGMMA_WS && rotation == LA_CUDA_ROTATION_Q_DELTA;
    bool cut = lazy_ws && c->lazy_ws == LA_CUDA_LAZY_WS_ON;
    tiles_info ti;
    if (cut) {
        LA_TRY(cut_tiles(c, b, kernel, true, &ti, err));
        cut = ti.min_items <= LA_ATTN_MAX_PREFILL_ITEMS;
    }
    if (lazy_ws && !cut)
        kernel = la_cuda_prefill_kernel_pick(LA_CUDA_PREFILL_WGMMA, c->wgmma, m->head_dim, rotation);
    if (!cut) LA_TRY(cut_tiles(c, b, kernel, false, &ti, err));
    const int64_t n_groups = (int64_t)m->n_kv_heads * c->n_head_chunks;
    const int32_t rows = la_cuda_prefill_rows(kernel, c->base.shape.head_dim), hpc = c->heads_per_cta;
    const int64_t n_tiles = ti.n_tiles, min_items = ti.min_items;
    const bool all_decode = ti.all_decode;
    /* split over the key range when the tiles alone leave SMs idle */
    const int64_t KT = LA_ATTN_KEYS_PER_TILE;
    const int64_t key_tiles = ti.key_tiles * n_groups;
    /* a warp-specialized CTA holds 1.5-2 128-row CTAs' rows and runs one per SM: half the CTAs
     * per SM in a step with its prefill tiles */
    const int64_t per_sm = all_decode                           ? c->split_ctas_decode
                           : kernel == LA_CUDA_PREFILL_WGMMA_WS ? (c->split_ctas + 1) / 2
                                                                : c->split_ctas;
    const int64_t slots = per_sm * c->n_sm;
    int64_t chunk = INT64_MAX;
    if (min_items * n_groups + extra_ctas < slots && key_tiles > 0) {
        chunk = ceil_div64(key_tiles, slots);
        /* at least 2 key tiles per split; 8 (512 keys) in a decode-only step, whose items
         * are too short otherwise (Llama-3-8B, batch 1 at 8K: 33 splits of 256 keys, the
         * combine merging 33 partial rows per head; GPU_NOTES.md, split sweep) */
        const int64_t min_chunk = !all_decode          ? 2
                                  : c->decode_min_split ? c->decode_min_split
                                                        : LA_ATTN_DECODE_MIN_SPLIT_TILES;
        if (chunk < min_chunk) chunk = min_chunk;
        for (;;) {
            int64_t total = 0;
            for (int64_t t = 0; t < n_tiles; t++) total += tile_parts(c, &c->tiles[t], chunk);
            if (total * n_groups + extra_ctas <= slots) break; /* min_items of them fit: ends */
            chunk++;
        }
    }
    /* split decode tiles merge in attn_decode's last CTA (LA_CUDA_FUSED_MERGE) */
    const bool merge_decode = (c->fused & LA_CUDA_FUSED_MERGE) != 0;
    int64_t n_p = 0, n_d = 0, n_c = 0, n_m = 0, part_rows = 0;
    int32_t combine_rows = hpc;
    bool decode_split = false;
    if (seq_parts) {
        int64_t cap = c->sh.cap_tok;
        LA_TRY(la_cu_grow((void **)&c->sh.tok_gbase, &cap, b->n_tokens, sizeof(int32_t), err));
        cap = c->sh.cap_tok;
        LA_TRY(la_cu_grow((void **)&c->sh.tok_gstride, &cap, b->n_tokens, sizeof(int32_t), err));
        c->sh.cap_tok = cap;
    }
    for (int64_t t = 0; t < n_tiles; t++) {
        const tile_plan *tp = &c->tiles[t];
        const int64_t n_split = tile_parts(c, tp, chunk);
        int32_t R = tp->decode ? hpc : rows;
        decode_split = decode_split || (tp->decode && n_split > 1);
        const int64_t n_grouped = seq_parts ? seq_parts[tp->seq_id] : 0; /* parts from the grouped launch */
        la_cuda_attn_item item = {b->seqs[tp->seq_id].block0, tp->row0, tp->n_tokens, tp->pos_max, 0, tp->kv_len,
                                  -1, -1};
        int64_t *n_items = tp->decode ? &n_d : &n_p;
        la_cuda_attn_item **items = tp->decode ? &c->items_decode : &c->items_prefill;
        int64_t *cap = tp->decode ? &c->cap_items_decode : &c->cap_items_prefill;
        LA_TRY(la_cu_grow((void **)items, cap, *n_items + n_split, sizeof(la_cuda_attn_item), err));
        if (n_split == 1 && n_grouped == 0) {
            (*items)[(*n_items)++] = item;
            continue;
        }
        const int64_t base = part_rows;
        part_rows += (n_split + n_grouped) * n_groups * R;
        if (part_rows > INT32_MAX) return la_err_set(err, LA_ERR_UNSUPPORTED, "attention: too many partial rows");
        const la_cuda_attn_combine_item ci = {tp->row0, tp->n_tokens, (int32_t)base, (int32_t)(n_split + n_grouped), R,
                                              {0}};
        if (n_grouped > 0) /* the grouped parts follow the tile's own splits (la_cu_shared_items) */
            for (int32_t k = 0; k < tp->n_tokens; k++) {
                c->sh.tok_gbase[tp->row0 + k] = (int32_t)(base + n_split * n_groups * R + (int64_t)k * hpc);
                c->sh.tok_gstride[tp->row0 + k] = R;
            }
        if (n_split == 1) { /* one item, as partial rows: the combine merges the grouped parts */
            item.part_row0 = (int32_t)base;
            (*items)[(*n_items)++] = item;
        }
        if (n_split == 1 || n_grouped > 0 || !(tp->decode && merge_decode)) {
            LA_TRY(la_cu_grow((void **)&c->combine, &c->cap_combine, n_c + 1, sizeof(la_cuda_attn_combine_item), err));
            c->combine[n_c++] = ci;
            if (R > combine_rows) combine_rows = R;
        } else {
            LA_TRY(la_cu_grow((void **)&c->merge, &c->cap_merge, n_m + 1, sizeof(la_cuda_attn_combine_item), err));
            item.merge = (int32_t)n_m;
            c->merge[n_m++] = ci;
        }
        if (n_split == 1) continue;
        int64_t s = 0; /* the tile's part */
        for (int32_t i = 0; i < tp->n_seg; i++) { /* each segment in balanced parts of whole key tiles */
            const int64_t lo = c->segs[tp->seg0 + i], hi = c->segs[tp->seg0 + i + 1];
            const int64_t ntk = seg_key_tiles(c, tp, i), np = seg_parts(ntk, chunk);
            const int64_t per = ntk / np, extra = ntk % np;
            for (int64_t q = 0, t0 = 0; q < np; q++, s++) {
                const int64_t nt = per + (q < extra ? 1 : 0);
                item.kv0 = (int32_t)(lo + t0 * KT);
                item.kv1 = (int32_t)(lo + (t0 + nt) * KT < hi ? lo + (t0 + nt) * KT : hi);
                item.part_row0 = (int32_t)(base + s * n_groups * R);
                t0 += nt;
                (*items)[(*n_items)++] = item;
            }
        }
    }
    if (n_p > LA_ATTN_MAX_PREFILL_ITEMS) /* refused here, before the step writes anything */
        return la_err_set(err, LA_ERR_UNSUPPORTED, "attention: %lld prefill tiles in one step (at most %d)",
                          (long long)n_p, LA_ATTN_MAX_PREFILL_ITEMS);
    if (n_p > 1) qsort(c->items_prefill, (size_t)n_p, sizeof(la_cuda_attn_item), cmp_items_longest_first);
    if (fixed_grid && !seq_parts && n_c + n_m > 0) /* a grouped step's lists follow its runs */
        LA_TRY(pad_split_schedule(c, b, slots, n_groups, n_tiles, &n_d, &n_c, &n_m, &part_rows, err));
    if (n_m * n_groups > c->cap_merge_count) { /* counters: zero, and left zero by every launch */
        int64_t cap = n_m * n_groups * 2;
        cudaStreamSynchronize(c->stream);
        dev_free(c->merge_count);
        c->merge_count = NULL;
        c->cap_merge_count = 0;
        LA_TRY(dev_alloc((void **)&c->merge_count, (size_t)cap * sizeof(int32_t), "attention merge counters", err));
        cudaError_t e = cudaMemsetAsync(c->merge_count, 0, (size_t)cap * sizeof(int32_t), c->stream);
        if (e != cudaSuccess) return cuda_fail(err, e, "attention merge counters");
        c->cap_merge_count = cap;
    }
    if (part_rows > c->cap_part_rows) {
        int64_t cap = part_rows * 2;
        cudaStreamSynchronize(c->stream);
        dev_free(c->part_o);
        dev_free(c->part_ml);
        c->part_o = NULL;
        c->part_ml = NULL;
        c->cap_part_rows = 0;
        LA_TRY(dev_alloc((void **)&c->part_o, (size_t)cap * (size_t)m->head_dim * sizeof(float), "attention partials", err));
        LA_TRY(dev_alloc((void **)&c->part_ml, (size_t)cap * sizeof(float2), "attention partials", err));
        c->cap_part_rows = cap;
    }
    c->n_items_prefill = (int32_t)n_p;
    c->n_items_decode = (int32_t)n_d;
    c->n_combine = (int32_t)n_c;
    c->n_merge = (int32_t)n_m;
    c->step_prefill_kernel = kernel;
    if (n_p > 0) c->last_prefill_kernel = la_cuda_prefill_kernels[kernel].variant;
    /* a decode-only grid within one wave at one CTA per SM: every CTA has an SM to itself,
     * so attn_decode takes its deep instance, 8 warps per CTA (attn_decode.cu) */
    const bool deep = all_decode && n_d * n_groups <= c->n_sm &&
                      la_cuda_attn_decode_smem(m->head_dim, LA_CUDA_DECODE_DEEP) <= c->smem_optin;
    /* many unsplit decode items (at least 8 CTAs per SM unpacked): one per warp, the longest
     * first so that a CTA's four items are alike (attn_decode.cu, packed instance) */
    const bool packed = n_d > 0 && !decode_split && n_m == 0 &&
                        (c->decode_packed == LA_CUDA_DECODE_PACKED_ON ||
                         (c->decode_packed == LA_CUDA_DECODE_PACKED_AUTO &&
                          n_d * n_groups >= LA_ATTN_DECODE_PACKED_MIN_CTAS_PER_SM * (int64_t)c->n_sm)) &&
                        la_cuda_attn_decode_smem(m->head_dim, LA_CUDA_DECODE_PACKED) <= c->smem_optin;
    c->step_decode = packed ? LA_CUDA_DECODE_PACKED : deep ? LA_CUDA_DECODE_DEEP : LA_CUDA_DECODE_SPLIT;
    if (packed) qsort(c->items_decode, (size_t)n_d, sizeof(la_cuda_attn_item), cmp_items_longest_first);
    c->combine_rows = combine_rows;
    return LA_OK;
}

static size_t pack_at(size_t *off, size_t bytes) {
    size_t at = *off;
    *off = (at + bytes + 15) / 16 * 16;
    return at;
}

/* A graph candidate (top of this file): every sequence one new row, logits wanted, graphs
 * on and profiling off. */
static bool graph_candidate(const cuda_backend *c, const la_batch *b) {
    if (!c->graphs || c->prof || b->n_tokens <= 0 || b->n_logit_rows <= 0 || b->n_seqs != b->n_tokens)
        return false;
    for (int32_t s = 0; s < b->n_seqs; s++)
        if (b->seqs[s].n_rows != 1) return false;
    return true;
}

la_status la_cu_batch_begin(la_backend *be, const la_batch *b, la_err *err) {
    cuda_backend *c = cu(be);
    LA_TRY(la_cu_flush_recorded(c, err)); /* a step left unfinished runs before this one */
    c->batch_ok = false;
    if (!c->layer_w) return la_err_set(err, LA_ERR_INTERNAL, "cuda backend: batch before load_weights");
    if (b->n_tokens < 0 || b->n_seqs < 0 || b->n_blocks < 0 || b->n_logit_rows < 0)
        return la_err_set(err, LA_ERR_INTERNAL, "batch: negative counts");
    LA_TRY(la_cu_flush_copies(c, err));
    prof_begin(c);
    int64_t rope_need = 1;
    LA_TRY(check_batch(c, b, &rope_need, err));
    /* shared-block attention (cuda_attn_shared.c): db is b with the grouped runs cut out of
     * the sequences' lists and their canonical blocks appended */
    la_batch db = *b;
    bool grouped = false;
    LA_TRY(la_cu_shared_plan(c, b, &db, &grouped, &rope_need, err));
    LA_TRY(la_cu_ensure_rope(c, rope_need, err));
    const bool record = graph_candidate(c, b);
    LA_TRY(schedule_attention(c, &db, record, grouped ? c->sh.seq_parts : NULL, la_cu_shared_ctas(c), err));
    if (grouped) LA_TRY(la_cu_shared_items(c, b, &db, err));
    const int32_t n_items_grouped = grouped ? c->sh.n_items : 0, n_grows = grouped ? c->sh.n_grows : 0;
    size_t n = (size_t)b->n_tokens, off = 0;
    size_t o_tok = pack_at(&off, n * 4), o_pos = pack_at(&off, n * 4), o_kpos = pack_at(&off, n * 4);
    size_t o_slots = pack_at(&off, n * 8);
    const size_t written_words = (size_t)(c->n_blocks + 31) / 32; /* fixed per pool */
    size_t o_written = pack_at(&off, written_words * 4);
    const size_t blocks_bytes = (size_t)db.n_blocks * sizeof(la_attn_block);
    size_t o_blocks = record ? 0 : pack_at(&off, blocks_bytes);
    size_t o_rows = pack_at(&off, (size_t)b->n_logit_rows * 4);
    size_t o_ip = pack_at(&off, (size_t)c->n_items_prefill * sizeof(la_cuda_attn_item));
    size_t o_id = pack_at(&off, (size_t)c->n_items_decode * sizeof(la_cuda_attn_item));
    size_t o_cb = pack_at(&off, (size_t)c->n_combine * sizeof(la_cuda_attn_combine_item));
    size_t o_mg = pack_at(&off, (size_t)c->n_merge * sizeof(la_cuda_attn_combine_item));
    size_t o_ig = pack_at(&off, (size_t)n_items_grouped * sizeof(la_cuda_attn_item));
    size_t o_gr = pack_at(&off, (size_t)n_grows * sizeof(la_cuda_attn_grow));
    if (record) o_blocks = pack_at(&off, blocks_bytes); /* last: the only length that changes */
    LA_TRY(la_cu_staging_reserve(c, &c->meta, off, err));
    char *h = c->meta.host, *d = c->meta.dev;
    if (n) {
        memcpy(h + o_tok, b->tokens, n * 4);
        memcpy(h + o_pos, b->pos, n * 4);
        memcpy(h + o_kpos, b->k_pos, n * 4);
        memcpy(h + o_slots, b->slots, n * 8);
    }
    /* the pool blocks this step's tokens write (check_batch kept every slot in the pool):
     * attn_decode copies the keys of the other blocks before its PDL wait */
    uint32_t *written = (uint32_t *)(h + o_written);
    memset(written, 0, written_words * 4);
    for (size_t t = 0; t < n; t++) {
        const int64_t blk = b->slots[t] / c->block_size;
        written[blk >> 5] |= 1u << (blk & 31);
    }
    if (db.n_blocks) memcpy(h + o_blocks, db.blocks, blocks_bytes);
    if (b->n_logit_rows) memcpy(h + o_rows, b->logit_rows, (size_t)b->n_logit_rows * 4);
    if (c->n_items_prefill)
        memcpy(h + o_ip, c->items_prefill, (size_t)c->n_items_prefill * sizeof(la_cuda_attn_item));
    if (c->n_items_decode)
        memcpy(h + o_id, c->items_decode, (size_t)c->n_items_decode * sizeof(la_cuda_attn_item));
    if (c->n_combine) memcpy(h + o_cb, c->combine, (size_t)c->n_combine * sizeof(la_cuda_attn_combine_item));
    if (c->n_merge) memcpy(h + o_mg, c->merge, (size_t)c->n_merge * sizeof(la_cuda_attn_combine_item));
    if (n_items_grouped) memcpy(h + o_ig, c->sh.items, (size_t)n_items_grouped * sizeof(la_cuda_attn_item));
    if (n_grows) memcpy(h + o_gr, c->sh.grows, (size_t)n_grows * sizeof(la_cuda_attn_grow));
    LA_TRY(la_cu_staging_send(c, &c->meta, off, err));
    c->sh.stats.meta_bytes = (int64_t)off;
    c->d_tokens = (const int32_t *)(d + o_tok);
    c->d_pos = (const int32_t *)(d + o_pos);
    c->d_kpos = (const int32_t *)(d + o_kpos);
    c->d_slots = (const int64_t *)(d + o_slots);
    c->d_written = (const uint32_t *)(d + o_written);
    c->d_blocks = (const la_attn_block *)(d + o_blocks);
    c->d_logit_rows = (const int32_t *)(d + o_rows);
    c->d_items_prefill = (const la_cuda_attn_item *)(d + o_ip);
    c->d_items_decode = (const la_cuda_attn_item *)(d + o_id);
    c->d_combine = (const la_cuda_attn_combine_item *)(d + o_cb);
    c->d_merge = (const la_cuda_attn_combine_item *)(d + o_mg);
    c->d_items_grouped = (const la_cuda_attn_item *)(d + o_ig);
    c->d_grows = (const la_cuda_attn_grow *)(d + o_gr);
    c->n_items_grouped = n_items_grouped;
    c->n_tokens = b->n_tokens;
    c->n_seqs = b->n_seqs;
    c->n_logit_rows = b->n_logit_rows;
    c->batch_ok = true;
    c->copies_in_step = false;
    c->recording = record;
    c->n_recs = 0;
    if (record) c->gstats.steps_recorded++;
    prof_end(c, PROF_BATCH_BEGIN);
    return LA_OK;
}
