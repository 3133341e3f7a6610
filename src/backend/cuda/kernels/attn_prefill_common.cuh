/* What the attn_prefill kernels share (module-private to kernels/attn_prefill_*.cu): the
 * grid and launch, the block-list pipeline's metadata of a 64-key tile, the query rotation,
 * a 16-row slab's mask and online softmax, the output rows, and the wgmma pieces of the
 * two Hopper kernels. The formula, shapes and grid: attn_prefill.cu.
 */
#ifndef LA_BACKEND_CUDA_KERNELS_ATTN_PREFILL_COMMON_CUH
#define LA_BACKEND_CUDA_KERNELS_ATTN_PREFILL_COMMON_CUH

#include "backend/cuda/kernels/attn_tile.cuh"
#include "backend/cuda/kernels/wgmma.cuh"

namespace {

/* Every prefill kernel's grid: x = head group (n_kv_heads * n_head_chunks), y = item. The
 * hardware starts CTAs x-fastest and the host sorts the items longest first, so all head
 * groups of the longest item start first and the shortest items fill the last wave
 * (longest-processing-time order); with the items in x, the last head groups' longest
 * items would start last and run on alone (bench/GPU_NOTES.md, "Moved from code
 * comments"). LA_ERR_UNSUPPORTED past
 * LA_ATTN_MAX_PREFILL_ITEMS (gridDim.y; batch_begin refuses such a step first). */
la_status prefill_grid(const la_cuda_attn_params *p, dim3 *grid, la_err *err) {
    if (p->n_items > LA_ATTN_MAX_PREFILL_ITEMS)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "attn_prefill: %d items in one launch (at most %d)", p->n_items,
                          LA_ATTN_MAX_PREFILL_ITEMS);
    *grid = dim3((unsigned)(p->n_kv_heads * p->n_head_chunks), (unsigned)p->n_items);
    return LA_OK;
}

/* Launch attn_prefill kernel `kernel` (threads per CTA, `bytes` of dynamic shared memory,
 * allowed once per kernel: *attr_done) over prefill_grid. `what` names it in errors. */
la_status launch_prefill_kernel(void (*kernel)(la_cuda_attn_params), int threads, size_t bytes, bool *attr_done,
                                const char *what, const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    LA_TRY(la_cuda_allow_smem((const void *)kernel, bytes, attr_done, what, err));
    dim3 grid;
    LA_TRY(prefill_grid(p, &grid, err));
    return la_cuda_launch(kernel, grid, threads, bytes, stream, *p, "attn_prefill", err);
}

static_assert(LA_KT == 64 && LA_KT_GROUPS == 4, "64-key tiles of four 16-key groups");

/* One 64-key tile's key metadata in the mma and wgmma kernels (la_tile_meta's meaning,
 * plus what the fast path needs):
 *   kpos[k]    logical position of key k, INT_MAX when masked for every query (padding,
 *              past kv1)
 *   gmin[g]    position of group g's first valid key (INT_MAX: none), gmax[g] of its last
 *              (INT_MIN: none); gnv[g] its valid keys (16: the whole group)
 *   gdelta[g]  q_delta of group g's block; gkrope[g] k_rope of it (0 when gnv is 0)
 * The group arrays are 16-byte aligned and read as int4. */
struct prefill_meta {
    int32_t kpos[LA_KT];
    int32_t gmin[LA_KT_GROUPS], gmax[LA_KT_GROUPS], gdelta[LA_KT_GROUPS], gnv[LA_KT_GROUPS];
    int32_t gkrope[LA_KT_GROUPS];
    int32_t pad_[4];
};
static_assert(sizeof(prefill_meta) % 16 == 0, "prefill_meta keeps 16-byte alignment");

/* The mma / wgmma pipeline's raw(t): the block-list entries of tile t's four groups (one per
 * 16-key group; past the item: a dummy read of zero bytes), cp.async'd into raw slot t & 1
 * by the first 20 threads. */
__device__ __forceinline__ void prefill_issue_raw(const la_cuda_attn_params &p, const la_cuda_attn_item &it,
                                                  const la_attn_block *blocks, int n_tiles, la_attn_block *raw, int t) {
    const int tid = threadIdx.x;
    if (tid < LA_KT_GROUPS * 5) {
        const int gi = tid / 5, w = tid - gi * 5, f0 = it.kv0 + t * LA_KT + gi * 16;
        const bool ok = t < n_tiles && f0 < it.kv1;
        const int32_t *src = ok ? reinterpret_cast<const int32_t *>(blocks + f0 / p.block_size) + w
                                : reinterpret_cast<const int32_t *>(p.blocks);
        la_cp_async4(reinterpret_cast<int32_t *>(raw + (t & 1) * LA_KT_GROUPS + gi) + w, src, ok);
    }
}

/* meta(t) (prefill_meta, into m) from raw(t) (the slot rb), by the first 64 threads, one key
 * each. */
__device__ __forceinline__ void prefill_derive_meta(const la_cuda_attn_item &it, int B, const la_attn_block *rb,
                                               prefill_meta *m, int t) {
    const int tid = threadIdx.x;
    if (tid < LA_KT) {
        const int k = tid, gi = k >> 4, kk = k & 15, f0 = it.kv0 + t * LA_KT + gi * 16;
        const la_attn_block b = rb[gi];
        const int j0 = la_slot_in_block(f0, B);
        const int nvg = f0 < it.kv1 ? max(0, min(16, min(b.n_valid - j0, it.kv1 - f0))) : 0;
        m->kpos[k] = kk < nvg ? b.pos0 + j0 + kk : INT_MAX;
        if (kk == 0) {
            m->gmin[gi] = nvg > 0 ? b.pos0 + j0 : INT_MAX;
            m->gmax[gi] = nvg > 0 ? b.pos0 + j0 + nvg - 1 : INT_MIN;
            m->gdelta[gi] = b.q_delta;
            m->gnv[gi] = nvg;
            m->gkrope[gi] = nvg > 0 ? b.k_rope : 0;
        }
    }
}

/* The loads of one query row's rotation at pos - delta (la_rope_rotate_pair's inputs: x2 =
 * q[f, f + 1], y2 = q[half + f, half + f + 1], cs by la_rope_cs2), issued unconditionally
 * so that a caller's batch of rows has all its loads in flight at once: a branch around
 * them makes the compiler wait for each row's loads before issuing the next row's (one L2
 * round trip per row).
 * q NULL (a row past the tile) reads p.q's first row instead and returns false: the caller
 * writes zeros. pos INT_MIN (past the tile) is clamped by la_rope_cs2. */
__device__ __forceinline__ bool rope_q_load(const la_cuda_attn_params &p, const la_bf16_t *q, int32_t pos,
                                            int32_t delta, int half, int f, uint32_t &x2, uint32_t &y2, float4 &cs) {
    const bool ok = q != NULL;
    if (!ok) q = p.q;
    x2 = *reinterpret_cast<const uint32_t *>(q + f);
    y2 = *reinterpret_cast<const uint32_t *>(q + half + f);
    cs = la_rope_cs2(p.rope, p.rope_len, half, (int64_t)pos - delta, f);
    return ok;
}
/* rows per batch of rope_q_load (ptxas, sm_90a): a CTA's first rotation, with nothing else
 * live yet (O is still zero); the later ones, with O live in registers: ROT_ROWS_MMA,
 * ROT_ROWS_WGMMA */
constexpr int ROT_ROWS_FIRST = 16;

/* Rotate NR query rows (CTA rows row_base ..) at p - delta for this lane's frequencies f,
 * f + 1, RB rows' loads in flight at once (rope_q_load): store(r, lo, hi) writes row r's
 * rotated pairs for columns f and half + f (zeros for a row past the tile). Shared by
 * the mma and wgmma kernels' rotations, which differ only in their shared-memory layout. */
template <int NR, int RB, class Store>
__device__ __forceinline__ void rotate_rows(const la_cuda_attn_params &p, int row_base, int32_t delta, int half, int f,
                                            const int32_t *row_pos, const la_bf16_t *const *row_q, Store store) {
    static_assert(NR % RB == 0, "whole batches of rows");
#pragma unroll
    for (int r0 = 0; r0 < NR; r0 += RB) {
        uint32_t x2[RB], y2[RB];
        float4 cs[RB];
        bool ok[RB];
#pragma unroll
        for (int j = 0; j < RB; j++)
            ok[j] = rope_q_load(p, row_q[row_base + r0 + j], row_pos[row_base + r0 + j], delta, half, f, x2[j], y2[j],
                                cs[j]);
#pragma unroll
        for (int j = 0; j < RB; j++) {
            uint32_t lo = 0, hi = 0;
            if (ok[j]) la_rope_rotate_pair(x2[j], y2[j], cs[j], lo, hi);
            store(r0 + j, lo, hi);
        }
    }
}

/* ---- rows, a 16-row slab's scores and softmax, output rows ------------------------------ */

/* Row `row` of a prefill CTA (token row / hpc of the item, query head head0 + row % hpc):
 * its position (INT_MIN past the tile) and unrotated query (NULL past the tile) into shared
 * memory (lane c4 == 0 writes), folded into the caller's bounds over its rows in the tile.
 * A grouped launch (p.grows set: shared-block attention, cuda_attn_shared.c) gathers token
 * t of the item from p.grows[it.row0 + t]: its q / out row and its position in the frame of
 * the item's (canonical) blocks. */
__device__ __forceinline__ void prefill_row_init(const la_cuda_attn_params &p, const la_cuda_attn_item &it, int row,
                                                 int head0, int n_rows_used, int c4, int32_t *row_pos,
                                                 const la_bf16_t **row_q, int &wmax, int &wmin) {
    const int hpc = p.heads_per_cta, hd = p.head_dim;
    int32_t rp = INT_MIN;
    const la_bf16_t *rq = NULL;
    if (row < n_rows_used) {
        const int tok = row / hpc;
        int64_t qrow = it.row0 + tok;
        if (p.grows) { /* a grouped item: the row's token and its position in the item's key frame */
            const int4 gr = __ldg(reinterpret_cast<const int4 *>(p.grows) + it.row0 + tok);
            qrow = gr.x;
            rp = gr.y;
        } else {
            rp = p.pos[it.row0 + tok];
        }
        rq = p.q + qrow * p.n_heads * hd + (int64_t)(head0 + row - tok * hpc) * hd;
        wmax = max(wmax, rp);
        wmin = min(wmin, rp);
    }
    if (c4 == 0) row_pos[row] = rp, row_q[row] = rq;
}

/* the bounds over the warp */
__device__ __forceinline__ void warp_minmax(int &wmax, int &wmin) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, o));
        wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, o));
    }
}

/* Scores of one 16-row slab over NT blocks of 8 keys in the mma C layout (s[nt][e]: row g +
 * 8 (e / 2) of the slab, key 8 nt + 2 c4 + e % 2): masked (-inf) where the key's position
 * kpos[8 nt + 2 c4 + e % 2] (INT_MAX: padding) is past the row's, rp[e / 2]. */
template <int NT>
__device__ __forceinline__ void prefill_mask(float (&s)[NT][4], const int32_t *kpos, int c4, const int32_t (&rp)[2]) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int2 kp = *reinterpret_cast<const int2 *>(&kpos[nt * 8 + 2 * c4]);
        if (kp.x > rp[0]) s[nt][0] = -INFINITY;
        if (kp.y > rp[0]) s[nt][1] = -INFINITY;
        if (kp.x > rp[1]) s[nt][2] = -INFINITY;
        if (kp.y > rp[1]) s[nt][3] = -INFINITY;
    }
}

/* Online softmax of one slab's scores (layout of prefill_mask), base 2: p = 2^(s sl2 - m)
 * with a row spread over the 4 lanes of a quad. The running maximum m[h] (log2 units) moves
 * only when the scores' exceeds it by more than LA_ATTN_RESCALE_SLACK (attn_tile.cuh); s
 * becomes p, l[h] += sum p after scaling by alpha[h] = 2^(m_old - m_new), the factor the
 * row's O must be scaled by (1: unchanged). The row's maximum is a tree and its sum four
 * chains: with two or three warps per scheduler, a serial chain of 2 NT dependent adds
 * would leave the issue slot idle for most of its latency. */
template <int NT>
__device__ __forceinline__ void prefill_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2], float sl2,
                                                float (&alpha)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mt[NT];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) mt[nt] = fmaxf(s[nt][2 * h], s[nt][2 * h + 1]);
#pragma unroll
        for (int w = 1; w < NT; w *= 2)
#pragma unroll
            for (int nt = 0; nt + w < NT; nt += 2 * w) mt[nt] = fmaxf(mt[nt], mt[nt + w]);
        float mx = mt[0];
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float cand = mx * sl2;
        const float nm = cand > m[h] + LA_ATTN_RESCALE_SLACK ? cand : m[h];
        alpha[h] = nm == -INFINITY ? 1.f : la_exp2(m[h] - nm);
        const float bias = nm == -INFINITY ? 0.f : nm;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            s[nt][2 * h] = la_exp2(fmaf(s[nt][2 * h], sl2, -bias));
            s[nt][2 * h + 1] = la_exp2(fmaf(s[nt][2 * h + 1], sl2, -bias));
            acc[nt & 3] += s[nt][2 * h] + s[nt][2 * h + 1];
        }
        const float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        l[h] = l[h] * alpha[h] + sum;
        m[h] = nm;
    }
}

/* O of one slab (DT blocks of 8 columns, C layout) scaled per row by alpha */
template <int DT>
__device__ __forceinline__ void prefill_rescale(float (&o)[DT][4], const float (&alpha)[2]) {
#pragma unroll
    for (int d = 0; d < DT; d++) {
        o[d][0] *= alpha[0];
        o[d][1] *= alpha[0];
        o[d][2] *= alpha[1];
        o[d][3] *= alpha[1];
    }
}

/* P (the softmax's s, layout of prefill_mask) of keys 16 kk .. 16 kk + 15 as the bf16 A
 * fragment of an m16k16 MMA (mma.sync, or wgmma with A in registers) */
template <int NT>
__device__ __forceinline__ void prefill_p_frag(const float (&s)[NT][4], int kk, uint32_t (&a)[4]) {
    a[0] = la_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
    a[1] = la_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
    a[2] = la_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    a[3] = la_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

/* A wgmma slab's scores to P, the warp-specialized kernel's step between Q K^T and P V:
 * masked unless no_mask, the online softmax, O rescaled when a row's maximum moved (a
 * warp-wide vote), and P of keys 16 kk .. 16 kk + 15 as a[kk], the register A fragment of a
 * P V wgmma. The wgmma kernel has the same steps inline: with this helper nvcc schedules
 * its code differently, so it moves here after a GPU run checks it. */
template <int NT, int DT>
__device__ __forceinline__ void prefill_scores_to_p(float (&s)[NT][4], float (&o)[DT][4], float (&m)[2],
                                                    float (&l)[2], float sl2, bool no_mask, const int32_t *kpos,
                                                    int c4, const int32_t (&rpos)[2], uint32_t (&a)[NT / 2][4]) {
    if (!no_mask) prefill_mask<NT>(s, kpos, c4, rpos);
    float alpha[2];
    prefill_softmax<NT>(s, m, l, sl2, alpha);
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) prefill_rescale<DT>(o, alpha);
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) prefill_p_frag<NT>(s, kk, a[kk]);
}

/* Write row `row` of a prefill CTA of ROWS rows (its half h of the slab's C layout, O
 * in o): the normalised bf16 output, or for a split item (and every grouped item: p.grows,
 * at its token's partial rows) the unnormalised partial row and (m, l) for attn_combine. l: this lane's part of the row's sum, summed here over the
 * row's quad, so every lane of the warp calls. */
template <int DT, int ROWS = LA_ATTN_PREFILL_ROWS>
__device__ __forceinline__ void prefill_write_row(const la_cuda_attn_params &p, const la_cuda_attn_item &it, int grp,
                                                  int row, int h, int head0, int n_rows_used, int c4,
                                                  const float (&o)[DT][4], float m, float l) {
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int hd = p.head_dim, hpc = p.heads_per_cta;
    if (it.part_row0 < 0 && !p.grows) {
        if (row >= n_rows_used) return;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int tok = row / hpc;
        la_bf16_t *out = p.out + (int64_t)(it.row0 + tok) * p.n_heads * hd + (int64_t)(head0 + row - tok * hpc) * hd;
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
            const int d = dt * 8 + 2 * c4;
            if (d < hd) *reinterpret_cast<uint32_t *>(out + d) = la_pack_bf16x2(o[dt][2 * h] * inv, o[dt][2 * h + 1] * inv);
        }
    } else {
        int64_t pr = it.part_row0 + (int64_t)grp * ROWS + row;
        if (p.grows) { /* grouped: the token's own partial rows (la_cuda_attn_grow) */
            if (row >= n_rows_used) return;
            const int tok = row / hpc;
            const int4 gr = __ldg(reinterpret_cast<const int4 *>(p.grows) + it.row0 + tok);
            pr = gr.z + (int64_t)grp * gr.w + (row - tok * hpc);
        }
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
            const int d = dt * 8 + 2 * c4;
            if (d < hd) *reinterpret_cast<float2 *>(p.part_o + pr * hd + d) = make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
        }
        if (c4 == 0) p.part_ml[pr] = make_float2(m, l);
    }
}

/* ---- the wgmma kernels' pieces -------------------------------------------------------------- */

#ifdef LA_WGMMA /* compiled for sm_90a only, as the kernel bodies that use them */
/* byte offset of element e (0..127) of row r in a two-half swizzled region (half_bytes per
 * half) */
__device__ __forceinline__ uint32_t sw_elem(uint32_t half_bytes, uint32_t r, uint32_t e) {
    return (e >> 6) * half_bytes + la_sw128(r, (e & 63) >> 3) + (e & 7) * 2;
}

/* S = Q K^T of one 64-row warpgroup tile over head_dim HD (64 or 128), for N keys (64:
 * wgmma, 128: wgmma_ws): HD / 16 k-steps of 16 by wgmma, Q and K K-major in HD / 64
 * 128-byte-swizzled column halves q_half / kv_half bytes apart, dq and dk the descriptors of
 * their first rows; the first k-step writes S without reading it. Issued only: the caller
 * fences before (la_wgmma_fence), commits and waits. */
template <int N, int HD>
__device__ __forceinline__ void qk_wgmma_issue(float (&sacc)[N / 2], uint64_t dq, uint64_t dk, uint32_t q_half,
                                               uint32_t kv_half) {
    static_assert(N == 64 || N == 128, "the wgmma shapes of wgmma.cuh");
    static_assert(HD == 64 || HD == 128, "whole 64-column swizzle halves");
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        const uint64_t da = dq + (((ks >> 2) * q_half + (ks & 3) * 32) >> 4);
        const uint64_t db = dk + (((ks >> 2) * kv_half + (ks & 3) * 32) >> 4);
        if constexpr (N == 64) {
            if (ks == 0) la_wgmma_ss_n64_first(sacc, da, db);
            else la_wgmma_ss_n64(sacc, da, db);
        } else {
            if (ks == 0) la_wgmma_ss_n128_first(sacc, da, db);
            else la_wgmma_ss_n128(sacc, da, db);
        }
    }
}

/* qk_wgmma_issue, fenced before, committed and waited for */
template <int N, int HD>
__device__ __forceinline__ void qk_wgmma(float (&sacc)[N / 2], uint64_t dq, uint64_t dk, uint32_t q_half,
                                         uint32_t kv_half) {
    la_wgmma_fence();
    qk_wgmma_issue<N, HD>(sacc, dq, dk, q_half, kv_half);
    la_wgmma_commit();
    la_wgmma_wait<0>();
}

/* O += P V of one 16-key step, O the warpgroup's [64 x HD] accumulator (HD / 2 floats per
 * thread), P the warp's A fragment, V MN-major at descriptor dv (uncommitted) */
template <int HD>
__device__ __forceinline__ void pv_wgmma(float (&oacc)[HD / 2], const uint32_t (&a)[4], uint64_t dv) {
    if constexpr (HD == 128) la_wgmma_rs_n128_tb(oacc, a, dv);
    else la_wgmma_rs_n64_tb(oacc, a, dv);
}

/* The wgmma kernels' Q rotation: this warp's 16 rows (row0 ..) at p - delta, written swizzled
 * into a Q of HD / 64 column halves Q_HALF bytes apart; lane l does frequencies 2 l, 2 l + 1
 * (head_dim 64: lanes 16..31 load lane 15's and store nothing); RB rows' loads in flight at
 * once (rope_q_load). The caller fences and syncs. */
template <int RB, uint32_t Q_HALF, int HD>
__device__ __forceinline__ void rotate_q_wgmma(unsigned char *Qs, const la_cuda_attn_params &p, int row0, int32_t delta,
                                               const int32_t *row_pos, const la_bf16_t *const *row_q) {
    constexpr int HALF = HD / 2;
    const int f2 = 2 * (threadIdx.x & 31);
    if constexpr (HD == 128) {
        rotate_rows<16, RB>(p, row0, delta, HALF, f2, row_pos, row_q, [&](int r, uint32_t lo, uint32_t hi) {
            *reinterpret_cast<uint32_t *>(Qs + sw_elem(Q_HALF, row0 + r, f2)) = lo;
            *reinterpret_cast<uint32_t *>(Qs + sw_elem(Q_HALF, row0 + r, HALF + f2)) = hi;
        });
    } else {
        const bool act = f2 < HALF;
        const int f = act ? f2 : HALF - 2;
        rotate_rows<16, RB>(p, row0, delta, HALF, f, row_pos, row_q, [&](int r, uint32_t lo, uint32_t hi) {
            if (act) {
                *reinterpret_cast<uint32_t *>(Qs + sw_elem(Q_HALF, row0 + r, f)) = lo;
                *reinterpret_cast<uint32_t *>(Qs + sw_elem(Q_HALF, row0 + r, HALF + f)) = hi;
            }
        });
    }
}
#endif

} /* namespace */

#endif
