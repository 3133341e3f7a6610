/* attn_prefill on mma.sync m16n8k16 (variant "v2"): compute capability 8.0 and newer, any
 * head_dim (a multiple of 8, <= 128), any step. What it computes: attn_prefill.cu.
 *
 * One CTA = 4 warps = 128 query rows (32 tokens x 4 heads for Llama-3), each warp owning
 * 32 rows as two m16 tiles, so every K fragment (ldmatrix) feeds four MMAs and every V
 * fragment four (FlashAttention-2's hd-128 shape: kBlockM 128, kBlockN 64, 4 warps). The
 * registers cannot also hold 64 query fragments: the rotated Q tile lives in shared
 * memory, written warp-locally by rotate_q_mma straight from the unrotated q in device
 * memory whenever a tile's q_delta differs from the warp's current one, and read by
 * ldmatrix per k-step; rows carry their positions and query pointers in shared memory, and
 * a warp's first rotation overlaps the first tile's copies. Each key tile runs in two
 * passes of 32 keys (S of 32 keys is 32 accumulators per thread, so the next k-step's
 * fragments are loaded while the current MMAs run). One __syncthreads per key tile: the
 * block-list entries of tile t + 2 are cp.async'd with the K/V of tile t + 1, so the K/V
 * addresses never wait on a device-memory load; the key metadata (positions, per-group
 * q_delta, k_rope, valid counts) is derived from them one tile ahead. A tile fully visible
 * to every row of a warp (all 64 keys valid, last key position <= the warp's first row
 * position) skips the per-element mask; a pass no row of a warp sees is skipped; the
 * running maximum moves only past LA_ATTN_RESCALE_SLACK (attn_tile.cuh), so O is rarely
 * rescaled. Padding slots load as zeros. Registers / shared memory per CTA (sm_90a,
 * ptxas): hd 128 236 / 104.9 KiB, hd 64 176, hd 32 164, no spills; 2 CTAs per SM at hd 128.
 */
#include "backend/cuda/kernels/attn_prefill_common.cuh"

namespace {

constexpr int MMA_WARPS = 4;
constexpr int MMA_THREADS = MMA_WARPS * 32;
constexpr int MMA_ROWS = LA_ATTN_PREFILL_ROWS;
constexpr int MMA_WROWS = 32; /* rows per warp: two m16 tiles */
static_assert(MMA_ROWS == MMA_WARPS * MMA_WROWS, "two m16 row tiles per warp");
/* rows per batch of rope_q_load in the later rotations, with O live in registers (as many
 * as keep hd 128 at 236 registers, no spills); the first: ROT_ROWS_FIRST */
constexpr int ROT_ROWS_MMA = 4;

template <int HD> struct mma_layout {
    static constexpr int STRIDE = HD + 8;
    static constexpr int Q_ELEMS = MMA_ROWS * STRIDE;  /* rotated Q tile, 32 rows per warp */
    static constexpr int KV_ELEMS = LA_KT * STRIDE;   /* one of K / V, one stage */
    static constexpr size_t META_OFF = (size_t)(Q_ELEMS + 4 * KV_ELEMS) * 2;
    static constexpr size_t RAW_OFF = META_OFF + 2 * sizeof(prefill_meta);
    static constexpr size_t BYTES = RAW_OFF + 2 * LA_KT_GROUPS * sizeof(la_attn_block);
};

/* Rotate this warp's 32 rows of the query tile at p - delta into shared memory (row r of
 * Qw = CTA row row_base + r), straight from the unrotated q in device memory; rows past
 * the tile become zeros. Lane l handles frequencies 2l and 2l + 1 of every row (hd <= 128:
 * hd / 4 <= 32 lanes busy). Warp-local: the warp's own ldmatrix reads are its only readers.
 * row_pos / row_q: each CTA row's position and unrotated query vector (NULL past the tile),
 * in shared memory (written by the warp before), so no load here waits on a device-memory
 * load and no row costs a division; RB rows' loads are in flight at once (rope_q_load). */
template <int HD, int RB>
__device__ __forceinline__ void rotate_q_mma(la_bf16_t *Qw, const la_cuda_attn_params &p, int row_base,
                                             int32_t delta, const int32_t *row_pos,
                                             const la_bf16_t *const *row_q) {
    constexpr int STRIDE = HD + 8;
    const int lane = threadIdx.x & 31, hd = p.head_dim, half = hd >> 1;
    __syncwarp();
    if (lane < (hd >> 2)) {
        const int f = 2 * lane;
        rotate_rows<MMA_WROWS, RB>(p, row_base, delta, half, f, row_pos, row_q, [&](int r, uint32_t lo, uint32_t hi) {
            *reinterpret_cast<uint32_t *>(Qw + r * STRIDE + f) = lo;
            *reinterpret_cast<uint32_t *>(Qw + r * STRIDE + half + f) = hi;
        });
    }
    __syncwarp();
}

template <int HD>
__global__ void __launch_bounds__(MMA_THREADS, 2) attn_prefill_mma_kernel(const la_cuda_attn_params p) {
    la_pdl_trigger(); /* la_pdl_wait below, once the prologue has read the host-written metadata */
    using L = mma_layout<HD>;
    constexpr int STRIDE = L::STRIDE, CH = HD / 8, NTH = LA_KT / 16, DT = HD / 8, KS = HD / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    la_bf16_t *Qs = reinterpret_cast<la_bf16_t *>(smem);
    la_bf16_t *Kst = Qs + L::Q_ELEMS;       /* [2][KT][STRIDE] */
    la_bf16_t *Vst = Kst + 2 * L::KV_ELEMS; /* [2][KT][STRIDE] */
    prefill_meta *meta = reinterpret_cast<prefill_meta *>(smem + L::META_OFF);          /* [2] */
    la_attn_block *raw = reinterpret_cast<la_attn_block *>(smem + L::RAW_OFF); /* [2][groups] */

    /* the item in shared memory: read where used rather than held in registers */
    __shared__ la_cuda_attn_item it;
    if (threadIdx.x == 0) it = p.items[blockIdx.y];
    __syncthreads();
    const int grp = blockIdx.x;
    const la_attn_group ag = la_attn_group_of(p, grp);
    const int kvh = ag.kvh, head0 = ag.head0;
    const la_attn_block *blocks = p.blocks + it.block0;
    const int hd = p.head_dim, hpc = p.heads_per_cta, B = p.block_size;
    const int n_rows_used = it.n_tokens * hpc;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const int mi = lane >> 3, rr = lane & 7; /* ldmatrix: which 8x8 matrix / row this lane addresses */
    const unsigned full = 0xffffffffu;
    const int n_tiles = it.kv1 > it.kv0 ? (it.kv1 - it.kv0 + LA_KT - 1) / LA_KT : 0;

    /* 1. zero the padding columns of Q, K and V (hd < HD): nothing else writes them */
    if (hd < HD)
        for (int i = tid; i < (MMA_ROWS + 4 * LA_KT) * CH; i += MMA_THREADS) {
            const int r = i / CH, c = i - r * CH;
            if (c * 8 >= hd) *reinterpret_cast<uint4 *>(Qs + r * STRIDE + c * 8) = make_uint4(0, 0, 0, 0);
        }

    /* The pipeline, one __syncthreads per key tile t (the one at the top of iteration t):
     *   raw(t)   the block-list entries of tile t's four groups, cp.async'd two tiles ahead
     *            into raw slot t & 1;
     *   K/V(t)   cp.async'd one tile ahead into stage t & 1, addressed from raw(t);
     *   meta(t)  derived from raw(t) one tile ahead into meta slot t & 1.
     * Iteration t: wait for every copy in flight (K/V(t), raw(t + 1)), sync, issue K/V(t + 1)
     * and raw(t + 2), derive meta(t + 1), compute tile t. Every slot written in iteration t was
     * last read in iteration t - 1 (or the prologue), before the sync. */
    auto issue_raw = [&](int t) { prefill_issue_raw(p, it, blocks, n_tiles, raw, t); };
    /* K/V(t): thread (k0, c) copies 16-byte chunk c of keys k0, k0 + RPP, ... The four
     * groups' block entries are read from shared memory first and each group's base
     * address computed once (a group's 16 keys are consecutive slots of one block), so
     * the copies wait on no shared-memory load and do no division per key. */
    auto issue_kv = [&](int t) {
        constexpr int RPP = MMA_THREADS / CH; /* key rows per pass */
        static_assert(MMA_THREADS % CH == 0 && LA_KT % RPP == 0, "whole passes over the tile");
        const int c = tid % CH, k0 = tid / CH;
        if (c * 8 >= hd) return;
        const la_attn_block *rb = raw + (t & 1) * LA_KT_GROUPS;
        const uint32_t ks0 = (uint32_t)__cvta_generic_to_shared(Kst + (t & 1) * L::KV_ELEMS + c * 8);
        const uint32_t vs0 = ks0 + 2u * (uint32_t)(2 * L::KV_ELEMS);
        const int t0 = it.kv0 + t * LA_KT;
        const int64_t blk = (int64_t)p.n_kv_heads * B * hd; /* pool elements per block */
        const int64_t head_off = (int64_t)kvh * B * hd + c * 8;
        int64_t goff = 0; /* pool offset of the current group's first key, chunk c */
        int gnv = 0;      /* its keys to copy; the rest zero-fill */
#pragma unroll
        for (int n = 0; n < LA_KT / RPP; n++) {
            /* k0 < RPP: with RPP <= 16 key k lies in group n * RPP / 16 */
            const int k = k0 + n * RPP, kk = k & 15;
            if (RPP >= 16 || n % (16 / (RPP < 16 ? RPP : 16)) == 0) { /* first key of this thread in its group */
                const int gi = RPP <= 16 ? n * RPP / 16 : k >> 4;
                const int32_t bid = rb[gi].block_id, bnv = rb[gi].n_valid;
                const int f0 = t0 + gi * 16, j0 = la_slot_in_block(f0, B);
                gnv = f0 < it.kv1 ? max(0, min(16, min(bnv - j0, it.kv1 - f0))) : 0;
                goff = (int64_t)bid * blk + head_off + j0 * hd;
            }
            const bool ok = kk < gnv; /* padding slots: zeros */
            const int64_t off = ok ? goff + kk * hd : 0;
            const uint32_t so = 2u * (uint32_t)(k * STRIDE);
            la_cp_async16_s(ks0 + so, p.k_pool + off, ok);
            la_cp_async16_s(vs0 + so, p.v_pool + off, ok);
        }
    };
    auto derive_meta = [&](int t) { prefill_derive_meta(it, B, raw + (t & 1) * LA_KT_GROUPS, meta + (t & 1), t); };

    /* 2. this thread's four rows: m16 tile i of the warp, row g (h = 0) or g + 8 (h = 1);
     * their positions (INT_MIN past the tile) wait in shared memory for the masked tiles */
    __shared__ int32_t row_pos[MMA_ROWS];
    __shared__ const la_bf16_t *row_q[MMA_ROWS]; /* the row's unrotated query (rotate_q_mma) */
    int wmax = INT_MIN, wmin = INT_MAX; /* over the warp's rows inside the tile */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            prefill_row_init(p, it, warp * MMA_WROWS + i * 16 + h * 8 + g, head0, n_rows_used, c4, row_pos, row_q, wmax,
                             wmin);
    warp_minmax(wmax, wmin);

    float o[2][DT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int d = 0; d < DT; d++) o[i][d][0] = o[i][d][1] = o[i][d][2] = o[i][d][3] = 0.f;
    float mr[2][2], lr[2][2]; /* running max (log2 units) and sum of rows (i, h) */
#pragma unroll
    for (int i = 0; i < 2; i++) mr[i][0] = mr[i][1] = -INFINITY, lr[i][0] = lr[i][1] = 0.f;
    bool have_q = false;
    int32_t q_delta = 0;
    const float sl2 = p.scale_log2;
    la_bf16_t *Qw = Qs + warp * MMA_WROWS * STRIDE;
    /* this lane's ldmatrix addresses (32-bit shared), tile / stage offsets added per use:
     * Q A fragments (m16 tile i: + i * 16 rows), K B fragments (ks / group), V.trans */
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t q_lane = sbase + 2u * (uint32_t)((warp * MMA_WROWS + (mi & 1) * 8 + rr) * STRIDE + (mi >> 1) * 8);
    const uint32_t k_lane = sbase + 2u * (uint32_t)(L::Q_ELEMS + ((mi >> 1) * 8 + rr) * STRIDE + (mi & 1) * 8);
    const uint32_t v_lane = sbase + 2u * (uint32_t)(L::Q_ELEMS + 2 * L::KV_ELEMS + ((mi & 1) * 8 + rr) * STRIDE + (mi >> 1) * 8);

    /* 3. prologue: raw(0), raw(1); then meta(0) and K/V(0) */
    issue_raw(0);
    issue_raw(1);
    la_cp_async_commit();
    la_cp_async_wait<0>();
    __syncthreads();
    /* up to here only what the host wrote (items, positions, block lists); q and the new
     * keys come from the kernels before this one (PDL: la_cuda_launch) */
    la_pdl_wait();
    if (n_tiles > 0) {
        derive_meta(0);
        issue_kv(0);
    }
    la_cp_async_commit();
    /* rotate Q for the first group of tile 0 this warp sees while K/V(0) is in flight, so
     * the rotation's loads and the first tile's overlap (the loop below re-rotates only if
     * the tile needs another q_delta) */
    __syncthreads(); /* meta(0) */
    if (n_tiles > 0) {
        int first = -1; /* the first group of tile 0 with a key visible to this warp */
#pragma unroll
        for (int gi = LA_KT_GROUPS - 1; gi >= 0; gi--)
            if (meta[0].gmin[gi] <= wmax) first = gi;
        if (first >= 0) {
            q_delta = meta[0].gdelta[first];
            rotate_q_mma<HD, ROT_ROWS_FIRST>(Qw, p, warp * MMA_WROWS, q_delta, row_pos, row_q);
            have_q = true;
        }
    }

    for (int t = 0; t < n_tiles; t++) {
        la_cp_async_wait<0>();
        __syncthreads();
        if (t + 1 < n_tiles) issue_kv(t + 1);
        issue_raw(t + 2);
        la_cp_async_commit();
        if (t + 1 < n_tiles) derive_meta(t + 1);

        const prefill_meta *m = meta + (t & 1);
        la_bf16_t *Ks = Kst + (t & 1) * L::KV_ELEMS;
        const uint32_t k_st = k_lane + (uint32_t)((t & 1) * L::KV_ELEMS * 2);
        const uint32_t v_st = v_lane + (uint32_t)((t & 1) * L::KV_ELEMS * 2);
        const int4 gmin4 = *reinterpret_cast<const int4 *>(m->gmin);
        const int32_t gmin[4] = {gmin4.x, gmin4.y, gmin4.z, gmin4.w};
        const int32_t tmin = min(min(gmin[0], gmin[1]), min(gmin[2], gmin[3]));
        if (tmin > it.pos_max) continue; /* causally invisible to every row of the CTA */
        {
            const int4 kr = *reinterpret_cast<const int4 *>(m->gkrope);
            if (kr.x | kr.y | kr.z | kr.w) { /* mepic: CTA-uniform */
                la_attn_rotate_keys<HD>(p, Ks, m);
                __syncthreads();
            }
        }
        if (tmin > wmax) continue; /* invisible to this warp's rows */

        const int4 gmax4 = *reinterpret_cast<const int4 *>(m->gmax);
        const int4 gnv4 = *reinterpret_cast<const int4 *>(m->gnv);
        const int4 gd4 = *reinterpret_cast<const int4 *>(m->gdelta);
        const int32_t gdel[4] = {gd4.x, gd4.y, gd4.z, gd4.w};
        /* every key valid and visible to every row of the warp: no per-element mask */
        const bool no_mask = gnv4.x == 16 && gnv4.y == 16 && gnv4.z == 16 && gnv4.w == 16 &&
                             max(max(gmax4.x, gmax4.y), max(gmax4.z, gmax4.w)) <= wmin;
        int vis = 0; /* groups with a key visible to some row of the warp */
        bool uniform = true;
        int32_t d0 = 0;
#pragma unroll
        for (int gi = 0; gi < LA_KT_GROUPS; gi++)
            if (gmin[gi] <= wmax) {
                if (!vis) d0 = gdel[gi];
                else if (gdel[gi] != d0) uniform = false;
                vis |= 1 << gi;
            }

        /* The visible groups usually share one q_delta (a tile straddles a document
         * boundary only at a document's first block): one rotation serves the tile.
         * Otherwise the S step below rotates Q per group. */
        if (uniform && (!have_q || d0 != q_delta)) { /* before S: no accumulators live yet */
            rotate_q_mma<HD, ROT_ROWS_MMA>(Qw, p, warp * MMA_WROWS, d0, row_pos, row_q);
            q_delta = d0;
            have_q = true;
        }
        int32_t rpos[2][2] = {{0, 0}, {0, 0}}; /* this thread's rows' positions, for the mask */
        if (!no_mask)
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) rpos[i][h] = row_pos[warp * MMA_WROWS + i * 16 + h * 8 + g];

        /* The tile in two passes of 32 keys (groups 2hh, 2hh + 1): S for 32 keys is 32
         * accumulators per thread, not 64, which leaves the registers to load the next
         * fragments while the MMAs of the current ones run. */
#pragma unroll 1 /* one copy of the pass: the kernel's code stays in the instruction cache */
        for (int hh = 0; hh < 2; hh++) {
            const int hvis = (vis >> (2 * hh)) & 3;
            if (!hvis) continue;
            float s[2][NTH][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int nt = 0; nt < NTH; nt++) s[i][nt][0] = s[i][nt][1] = s[i][nt][2] = s[i][nt][3] = 0.f;
            if (uniform) {
                /* S = Q K^T for both groups (an invisible one is masked below), Q and K
                 * fragments of k-step ks + 1 loaded while the MMAs of ks run */
                uint32_t qa[2][2][4], kb[2][2][4]; /* [buffer][m16 tile | group][reg] */
                auto load_s = [&](int ks, int buf) {
#pragma unroll
                    for (int i = 0; i < 2; i++)
                        la_ldmatrix_x4_s(qa[buf][i][0], qa[buf][i][1], qa[buf][i][2], qa[buf][i][3],
                                         q_lane + 2u * (i * 16 * STRIDE + ks * 16));
#pragma unroll
                    for (int gl = 0; gl < 2; gl++)
                        la_ldmatrix_x4_s(kb[buf][gl][0], kb[buf][gl][1], kb[buf][gl][2], kb[buf][gl][3],
                                         k_st + 2u * ((2 * hh + gl) * 16 * STRIDE + ks * 16));
                };
                load_s(0, 0);
#pragma unroll
                for (int ks = 0; ks < KS; ks++) {
                    const int cur = ks & 1;
                    if (ks + 1 < KS) load_s(ks + 1, cur ^ 1);
#pragma unroll
                    for (int gl = 0; gl < 2; gl++)
#pragma unroll
                        for (int i = 0; i < 2; i++) {
                            la_mma_bf16(s[i][2 * gl], qa[cur][i], kb[cur][gl][0], kb[cur][gl][1]);
                            la_mma_bf16(s[i][2 * gl + 1], qa[cur][i], kb[cur][gl][2], kb[cur][gl][3]);
                        }
                }
            } else {
                /* one visible group at a time, re-rotating Q for each new q_delta; a group
                 * left out stays zero and is masked below */
#pragma unroll
                for (int gl = 0; gl < 2; gl++) {
                    const int gi = 2 * hh + gl;
                    if (!(hvis & (1 << gl))) continue;
                    const int32_t dg = m->gdelta[gi]; /* shared memory: gi is not a constant */
                    if (!have_q || dg != q_delta) {
                        rotate_q_mma<HD, ROT_ROWS_MMA>(Qw, p, warp * MMA_WROWS, dg, row_pos, row_q);
                        q_delta = dg;
                        have_q = true;
                    }
#pragma unroll
                    for (int ks = 0; ks < KS; ks++) {
                        uint32_t qa[2][4], b0, b1, b2, b3;
#pragma unroll
                        for (int i = 0; i < 2; i++)
                            la_ldmatrix_x4_s(qa[i][0], qa[i][1], qa[i][2], qa[i][3], q_lane + 2u * (i * 16 * STRIDE + ks * 16));
                        la_ldmatrix_x4_s(b0, b1, b2, b3, k_st + 2u * (gi * 16 * STRIDE + ks * 16));
#pragma unroll
                        for (int i = 0; i < 2; i++) {
                            la_mma_bf16(s[i][2 * gl], qa[i], b0, b1);
                            la_mma_bf16(s[i][2 * gl + 1], qa[i], b2, b3);
                        }
                    }
                }
            }
            /* mask (padding, causal) where some key of the tile may be hidden from some row;
             * the online softmax */
            float alpha[2][2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                if (!no_mask) prefill_mask<NTH>(s[i], m->kpos + hh * NTH * 8, c4, rpos[i]);
                prefill_softmax<NTH>(s[i], mr[i], lr[i], sl2, alpha[i]);
            }
            /* rescale O only when some row's maximum moved (rare once the maxima settle) */
            if (__any_sync(full, alpha[0][0] != 1.f || alpha[0][1] != 1.f || alpha[1][0] != 1.f || alpha[1][1] != 1.f)) {
#pragma unroll
                for (int i = 0; i < 2; i++) prefill_rescale<DT>(o[i], alpha[i]);
            }
            /* O += P V: P from the S accumulators as A fragments (zero for a masked key);
             * each V fragment feeds both m16 tiles, the next one loaded during their MMAs */
            uint32_t a[2][2][4]; /* [group][m16 tile][reg] */
#pragma unroll
            for (int gl = 0; gl < 2; gl++)
#pragma unroll
                for (int i = 0; i < 2; i++) prefill_p_frag<NTH>(s[i], gl, a[gl][i]);
            uint32_t vb[2][4];
            auto load_v = [&](int step, int buf) { /* step = gl * KS + dn */
                const int gl = step / KS, dn = step - gl * KS;
                la_ldmatrix_x4_trans_s(vb[buf][0], vb[buf][1], vb[buf][2], vb[buf][3],
                                       v_st + 2u * ((2 * hh + gl) * 16 * STRIDE + dn * 16));
            };
            load_v(0, 0);
#pragma unroll
            for (int step = 0; step < 2 * KS; step++) {
                const int cur = step & 1, gl = step / KS, dn = step - gl * KS;
                if (step + 1 < 2 * KS) load_v(step + 1, cur ^ 1);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    la_mma_bf16(o[i][2 * dn], a[gl][i], vb[cur][0], vb[cur][1]);
                    la_mma_bf16(o[i][2 * dn + 1], a[gl][i], vb[cur][2], vb[cur][3]);
                }
            }
        }
    }
    la_cp_async_wait<0>();

    /* 4. write: normalised output, or a partial for the combine kernel */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            prefill_write_row<DT>(p, it, grp, warp * MMA_WROWS + i * 16 + h * 8 + g, h, head0, n_rows_used, c4, o[i],
                                  mr[i][h], lr[i][h]);
}

template <int HD>
la_status launch_prefill_mma(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    static bool attr_done = false;
    return launch_prefill_kernel(attn_prefill_mma_kernel<HD>, MMA_THREADS, mma_layout<HD>::BYTES, &attr_done,
                                 "attn_prefill_mma", p, stream, err);
}

} /* namespace */

extern "C" la_status la_cuda_attn_prefill_mma(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    const int hd = p->head_dim;
    if (hd <= 32) return launch_prefill_mma<32>(p, stream, err);
    if (hd <= 64) return launch_prefill_mma<64>(p, stream, err);
    return launch_prefill_mma<128>(p, stream, err);
}
