/* Paged attention for prefill: many new query tokens of a sequence against its KV block
 * list (cached blocks plus the blocks the new tokens were just written to), with the
 * per-block rotation metadata of backend/backend.h (la_attn_block) applied inside.
 *
 * What it computes, for query token t (logical position p_t), query head h and every
 * visible slot j of block b of the sequence's list (visible: j < n_valid_b and
 * pos0_b + j <= p_t):
 *
 *     q'  = R(p_t - q_delta_b) q_{t,h}             (query arrives UNROTATED; lazy: q_delta
 *                                                    = Δ_d of the block's document,
 *                                                    DESIGN.md §2; otherwise 0)
 *     k'  = R(pos0_b + j) k_j  if k_rope_b          (mepic: keys stored unrotated)
 *           k_j                otherwise            (keys stored rotated)
 *     s   = <q', k'> / sqrt(head_dim)
 *     out = sum_j softmax(s)_j v_j                   (HF LlamaAttention, eager softmax)
 *
 * R is HF rotate_half RoPE with the llama3-scaled inv_freq (backend/rope.h), read from the
 * f32 (cos, sin) table of cuda_kernels.h. GQA: query head h reads KV head
 * h / (n_heads / n_kv_heads). Flash-attention style (FlashAttention-2, Dao 2023): online
 * softmax in base 2 over tiles of 64 keys, so scores never reach device memory.
 *
 * Shapes (bf16 unless said): q, out [n_tokens, n_heads * head_dim] row-major; the layer's
 * K and V slabs [n_blocks][n_kv_heads][block_size][head_dim] (cuda_kernels.h); pos
 * [n_tokens] int32; partial rows f32 [rows][head_dim] and (m, l) pairs.
 *
 * Grid: x = KV head x head chunk, y = work item (la_cuda_attn_item: a tile of tokens of
 * one sequence and a range of its key slots, built by the host scheduler in cuda_backend.c,
 * longest first; prefill_grid). Four kernels, chosen per step from
 * la_cuda_attn_params.prefill_variant and .plain (la_cuda_attn_prefill_step_kernel; the
 * host cuts tiles to match; LA_ATTN_PREFILL=v1|v2|v3|v4). On compute capability 9.0 with
 * an sm_90a build at head_dim 128 (described at their code below), v4 (the default) runs
 * the plain steps, 256 rows per CTA, warp-specialized, and v3 the steps with rotation
 * metadata, v2's tiles on Hopper's warpgroup MMA; v2 is the default elsewhere and runs
 * every other head_dim.
 *
 * v2. One CTA = 4 warps = 128 query rows (32 tokens x 4 heads for Llama-3), each
 * warp owning 32 rows as two m16 tiles, so every K fragment (ldmatrix) feeds four MMAs and
 * every V fragment four (FlashAttention-2's hd-128 shape: kBlockM 128, kBlockN 64, 4
 * warps). The registers cannot also hold 64 query fragments: the rotated Q tile lives in
 * shared memory, written warp-locally by rotate_q_v2 straight from the unrotated q in
 * device memory whenever a tile's q_delta differs from the warp's current one, and read
 * by ldmatrix per k-step; rows carry their positions and query pointers in shared memory,
 * and a warp's first rotation overlaps the first tile's copies. Each key tile runs in two
 * passes of 32 keys (S of 32 keys is 32 accumulators per thread, so the next k-step's
 * fragments are loaded while the current MMAs run). One __syncthreads per key tile: the
 * block-list entries of tile t + 2 are cp.async'd with the K/V of tile t + 1, so the K/V
 * addresses never wait on a device-memory load; the key metadata (positions, per-group q_delta, k_rope, valid
 * counts) is derived from them one tile ahead. A tile fully visible to every row of a warp
 * (all 64 keys valid, last key position <= the warp's first row position) skips the
 * per-element mask; a pass no row of a warp sees is skipped; the running maximum moves
 * only past LA_ATTN_RESCALE_SLACK (attn_tile.cuh), so O is rarely rescaled. Padding slots
 * load as zeros. Registers / shared memory per CTA (sm_90a, ptxas): hd 128 236 / 104.9
 * KiB, hd 64 176, hd 32 164, no spills; 2 CTAs per SM at hd 128.
 *
 * v1. One CTA = 4 warps = 64 query rows; row r is token r / hpc, query head
 * r % hpc of the CTA's KV head (hpc = heads_per_cta: 4 for Llama-3's GQA, so a CTA holds
 * 16 tokens x 4 heads and every K/V tile it stages serves four query heads). Each warp
 * owns one 16-row m16 tile: S = Q K^T and O += P V with mma.sync m16n8k16 (bf16 in, f32
 * accumulate), K fragments by ldmatrix, V fragments by ldmatrix.trans, P reused from the
 * S accumulators as the A operand. K/V tiles are double-buffered with cp.async.
 * The query fragments live in registers and are re-rotated from the unrotated Q tile in
 * shared memory whenever a 16-key group's q_delta differs from the one they carry: once
 * per document run for lazy, once per CTA otherwise.
 *
 * Work per v1 CTA and key tile: 64 rows x 64 keys x head_dim x 4 FLOPs (2 for Q K^T, 2 for
 * P V) = 2.1 MFLOP at head_dim 128, against 2 x 64 x head_dim x 2 bytes = 32 KiB of K/V
 * from device memory: 64 FLOP/byte, compute-bound on Hopper when the tile's K/V is
 * shared by several query tiles (L2), bandwidth-bound for a 64-token question. Whole
 * layer: 4 n_q n_kv_visible n_heads head_dim FLOPs; K/V bytes 4 n_kv n_kv_heads head_dim
 * per query tile that reads them.
 */
#include "backend/cuda/attn_tile.cuh"
#include "backend/cuda/wgmma.cuh"

namespace {

constexpr int P_WARPS = 4;
constexpr int P_THREADS = P_WARPS * 32;
constexpr int P_ROWS = LA_ATTN_PREFILL_ROWS;
static_assert(P_ROWS == P_WARPS * 16, "one m16 row tile per warp");

/* Every prefill variant's grid: x = head group (n_kv_heads * n_head_chunks), y = item. The
 * hardware starts CTAs x-fastest and the host sorts the items longest first, so all head
 * groups of the longest item start first and the shortest items fill the last wave
 * (longest-processing-time order). With the items in x, the last head groups' longest
 * items started last and ran on alone. A list-scheduling model of 264 CTA slots
 * (Llama-3-8B, 32 tokens x 4 heads per CTA, 8 head groups) gives the tail as 37% of a
 * causal 2K prefill's attention (64 items) and 0.8% at 8K (256 items); measured on the
 * H200: recompute TTFT -1.4% at 2K, -0.7% at 8K. LA_ERR_UNSUPPORTED past
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

template <int HD> struct prefill_layout {
    static constexpr int STRIDE = HD + 8;             /* bf16 per shared-memory row */
    static constexpr int Q_ELEMS = P_ROWS * STRIDE;   /* unrotated Q tile */
    static constexpr int KV_ELEMS = LA_KT * STRIDE;   /* one of K / V, one stage */
    static constexpr size_t BYTES = (size_t)(Q_ELEMS + 4 * KV_ELEMS) * 2 + 2 * sizeof(la_tile_meta);
};

/* ---- device helpers ----------------------------------------------------------------------- */

/* This thread's A fragments (rows rowA and rowA + 8 of the CTA, PTX m16n8k16 layout:
 * reg r holds row +8 if r & 1, columns +8 if r & 2) of the query tile rotated at rposA /
 * rposB (= p - q_delta), from the unrotated tile in shared memory. */
template <int HD>
__device__ __forceinline__ void rotate_q(uint32_t (&qf)[HD / 16][4], const la_bf16_t *Qs, int rowA,
                                         int64_t rposA, int64_t rposB,
                                         const la_cuda_attn_params &p) {
    constexpr int STRIDE = HD + 8;
    const int hd = p.head_dim, half = hd / 2, c4 = threadIdx.x & 3;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int row = rowA + ((r & 1) ? 8 : 0);
            const int64_t rpos = (r & 1) ? rposB : rposA;
            const int col = ks * 16 + 2 * c4 + ((r & 2) ? 8 : 0);
            const la_bf16_t *q = Qs + row * STRIDE;
            float v[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = col + e;
                v[e] = 0.f;
                if (i < hd) {
                    const bool lo = i < half;
                    const int f = lo ? i : i - half;
                    const float x = la_bf2f(q[i]), y = la_bf2f(q[lo ? i + half : i - half]);
                    const float2 cs = la_rope_cs(p.rope, p.rope_len, half, rpos, f);
                    v[e] = lo ? x * cs.x - y * cs.y : x * cs.x + y * cs.y;
                }
            }
            qf[ks][r] = la_pack_bf16x2(v[0], v[1]);
        }
}

/* ---- kernel --------------------------------------------------------------------------------- */

template <int HD>
__global__ void __launch_bounds__(P_THREADS, 2) attn_prefill_kernel(const la_cuda_attn_params p) {
    la_pdl_enter();
    using L = prefill_layout<HD>;
    constexpr int STRIDE = L::STRIDE, CH = HD / 8, NT = LA_KT / 8, DT = HD / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    la_bf16_t *Qs = reinterpret_cast<la_bf16_t *>(smem);
    la_bf16_t *Kst = Qs + L::Q_ELEMS;       /* [2][KT][STRIDE] */
    la_bf16_t *Vst = Kst + 2 * L::KV_ELEMS; /* [2][KT][STRIDE] */
    la_tile_meta *meta = reinterpret_cast<la_tile_meta *>(Vst + 2 * L::KV_ELEMS);

    const la_cuda_attn_item it = p.items[blockIdx.y];
    const int grp = blockIdx.x;
    const la_attn_group ag = la_attn_group_of(p, grp);
    const int kvh = ag.kvh, head0 = ag.head0;
    const la_attn_block *blocks = p.blocks + it.block0;
    const int hd = p.head_dim, hpc = p.heads_per_cta;
    const int64_t qstride = (int64_t)p.n_heads * hd;
    const int n_rows_used = it.n_tokens * hpc;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const unsigned full = 0xffffffffu;

    /* 1. the unrotated Q tile, zero rows past the tile; zero K/V padding columns */
    for (int i = tid; i < P_ROWS * CH; i += P_THREADS) {
        const int r = i / CH, c = i - r * CH;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < n_rows_used && c * 8 < hd) {
            const int tok = r / hpc, h = head0 + (r - tok * hpc);
            v = *reinterpret_cast<const uint4 *>(p.q + (int64_t)(it.row0 + tok) * qstride +
                                                 (int64_t)h * hd + c * 8);
        }
        *reinterpret_cast<uint4 *>(Qs + r * STRIDE + c * 8) = v;
    }
    if (hd < HD)
        for (int i = tid; i < 4 * LA_KT * CH; i += P_THREADS) {
            const int r = i / CH, c = i - r * CH;
            if (c * 8 >= hd) *reinterpret_cast<uint4 *>(Kst + r * STRIDE + c * 8) = make_uint4(0, 0, 0, 0);
        }

    /* 2. this thread's two rows */
    const int rowA = warp * 16 + g, rowB = rowA + 8;
    const int posA = rowA < n_rows_used ? p.pos[it.row0 + rowA / hpc] : INT_MIN;
    const int posB = rowB < n_rows_used ? p.pos[it.row0 + rowB / hpc] : INT_MIN;
    int warp_pos_max = max(posA, posB);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) warp_pos_max = max(warp_pos_max, __shfl_xor_sync(full, warp_pos_max, o));

    float o[DT][4];
#pragma unroll
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float mA = -INFINITY, mB = -INFINITY, lA = 0.f, lB = 0.f;
    uint32_t qf[HD / 16][4];
    bool have_q = false;
    int32_t q_delta = 0;
    const float sl2 = p.scale_log2;
    const int mi = lane >> 3, rr = lane & 7; /* ldmatrix: which 8x8 matrix / row this lane addresses */

    /* 3. key tiles, double-buffered */
    const int n_tiles = it.kv1 > it.kv0 ? (it.kv1 - it.kv0 + LA_KT - 1) / LA_KT : 0;
    if (n_tiles > 0) la_attn_load_tile<HD>(p, blocks, kvh, it.kv0, it.kv1, Kst, Vst, meta);
    la_cp_async_commit();
    for (int t = 0; t < n_tiles; t++) {
        const int st = t & 1;
        if (t + 1 < n_tiles)
            la_attn_load_tile<HD>(p, blocks, kvh, it.kv0 + (t + 1) * LA_KT, it.kv1,
                                  Kst + (st ^ 1) * L::KV_ELEMS, Vst + (st ^ 1) * L::KV_ELEMS,
                                  meta + (st ^ 1));
        la_cp_async_commit();
        la_cp_async_wait<1>();
        __syncthreads();
        const la_tile_meta *m = meta + st;
        la_bf16_t *Ks = Kst + st * L::KV_ELEMS;
        const la_bf16_t *Vs = Vst + st * L::KV_ELEMS;
        const int32_t tmin = la_tile_min_pos(m);
        if (tmin > it.pos_max) { /* causally invisible to every row of the CTA */
            __syncthreads();
            continue;
        }
        if (la_tile_any_krope(m)) {
            la_attn_rotate_keys<HD>(p, Ks, m);
            __syncthreads();
        }
        if (tmin <= warp_pos_max) {
            /* S = Q K^T. The groups this warp can see usually share one q_delta (a tile
             * straddles a document boundary only at the document's first block): then one
             * rotation serves the whole tile and the k-steps run outermost, so the eight
             * accumulator tiles form independent MMA chains. Otherwise one group (one
             * block's q_delta) at a time. Invisible groups are masked below. */
            float s[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
            bool uniform = true, found = false;
            int32_t d0 = 0;
#pragma unroll
            for (int gi = 0; gi < LA_KT_GROUPS; gi++)
                if (m->gmin[gi] <= warp_pos_max) {
                    if (!found) d0 = m->gdelta[gi], found = true;
                    else if (m->gdelta[gi] != d0) uniform = false;
                }
            if (uniform) {
                if (!have_q || d0 != q_delta) {
                    rotate_q<HD>(qf, Qs, rowA, (int64_t)posA - d0, (int64_t)posB - d0, p);
                    q_delta = d0;
                    have_q = true;
                }
#pragma unroll
                for (int ks = 0; ks < HD / 16; ks++)
#pragma unroll
                    for (int gi = 0; gi < LA_KT_GROUPS; gi++) {
                        uint32_t b0, b1, b2, b3;
                        la_ldmatrix_x4(b0, b1, b2, b3,
                                       Ks + (gi * 16 + (mi >> 1) * 8 + rr) * STRIDE + ks * 16 + (mi & 1) * 8);
                        la_mma_bf16(s[2 * gi], qf[ks], b0, b1);
                        la_mma_bf16(s[2 * gi + 1], qf[ks], b2, b3);
                    }
            } else {
#pragma unroll
                for (int gi = 0; gi < LA_KT_GROUPS; gi++) {
                    if (m->gmin[gi] > warp_pos_max) continue; /* empty or invisible to this warp */
                    const int32_t gd = m->gdelta[gi];
                    if (!have_q || gd != q_delta) {
                        rotate_q<HD>(qf, Qs, rowA, (int64_t)posA - gd, (int64_t)posB - gd, p);
                        q_delta = gd;
                        have_q = true;
                    }
#pragma unroll
                    for (int ks = 0; ks < HD / 16; ks++) {
                        uint32_t b0, b1, b2, b3;
                        la_ldmatrix_x4(b0, b1, b2, b3,
                                       Ks + (gi * 16 + (mi >> 1) * 8 + rr) * STRIDE + ks * 16 + (mi & 1) * 8);
                        la_mma_bf16(s[2 * gi], qf[ks], b0, b1);
                        la_mma_bf16(s[2 * gi + 1], qf[ks], b2, b3);
                    }
                }
            }
            /* mask (padding, causal) and scale to log2 units */
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int2 kp = *reinterpret_cast<const int2 *>(&m->kpos[nt * 8 + 2 * c4]);
                s[nt][0] = kp.x <= posA ? s[nt][0] * sl2 : -INFINITY;
                s[nt][1] = kp.y <= posA ? s[nt][1] * sl2 : -INFINITY;
                s[nt][2] = kp.x <= posB ? s[nt][2] * sl2 : -INFINITY;
                s[nt][3] = kp.y <= posB ? s[nt][3] * sl2 : -INFINITY;
            }
            /* online softmax: rows are spread over the 4 lanes of a quad */
            float mxA = -INFINITY, mxB = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                mxA = fmaxf(mxA, fmaxf(s[nt][0], s[nt][1]));
                mxB = fmaxf(mxB, fmaxf(s[nt][2], s[nt][3]));
            }
            mxA = fmaxf(mxA, __shfl_xor_sync(full, mxA, 1));
            mxA = fmaxf(mxA, __shfl_xor_sync(full, mxA, 2));
            mxB = fmaxf(mxB, __shfl_xor_sync(full, mxB, 1));
            mxB = fmaxf(mxB, __shfl_xor_sync(full, mxB, 2));
            const float nA = fmaxf(mA, mxA), nB = fmaxf(mB, mxB);
            const float aA = nA == -INFINITY ? 1.f : la_exp2(mA - nA);
            const float aB = nB == -INFINITY ? 1.f : la_exp2(mB - nB);
            const float bA = nA == -INFINITY ? 0.f : nA, bB = nB == -INFINITY ? 0.f : nB;
            float sumA = 0.f, sumB = 0.f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                s[nt][0] = la_exp2(s[nt][0] - bA);
                s[nt][1] = la_exp2(s[nt][1] - bA);
                s[nt][2] = la_exp2(s[nt][2] - bB);
                s[nt][3] = la_exp2(s[nt][3] - bB);
                sumA += s[nt][0] + s[nt][1];
                sumB += s[nt][2] + s[nt][3];
            }
            lA = lA * aA + sumA;
            lB = lB * aB + sumB;
            mA = nA;
            mB = nB;
#pragma unroll
            for (int d = 0; d < DT; d++) {
                o[d][0] *= aA;
                o[d][1] *= aA;
                o[d][2] *= aB;
                o[d][3] *= aB;
            }
            /* O += P V */
#pragma unroll
            for (int kk = 0; kk < LA_KT / 16; kk++) {
                if (m->gmin[kk] > warp_pos_max) continue; /* P is zero there */
                uint32_t a[4];
                a[0] = la_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
                a[1] = la_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
                a[2] = la_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = la_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int dn = 0; dn < HD / 16; dn++) {
                    uint32_t b0, b1, b2, b3;
                    la_ldmatrix_x4_trans(b0, b1, b2, b3,
                                         Vs + (kk * 16 + (mi & 1) * 8 + rr) * STRIDE + dn * 16 + (mi >> 1) * 8);
                    la_mma_bf16(o[2 * dn], a, b0, b1);
                    la_mma_bf16(o[2 * dn + 1], a, b2, b3);
                }
            }
        }
        __syncthreads(); /* the next iteration's loads overwrite this stage */
    }
    la_cp_async_wait<0>();

    /* 4. write: normalised output, or a partial for the combine kernel */
    lA += __shfl_xor_sync(full, lA, 1);
    lA += __shfl_xor_sync(full, lA, 2);
    lB += __shfl_xor_sync(full, lB, 1);
    lB += __shfl_xor_sync(full, lB, 2);
    if (it.part_row0 < 0) {
        const float iA = lA > 0.f ? 1.f / lA : 0.f, iB = lB > 0.f ? 1.f / lB : 0.f;
        const int tokA = rowA / hpc, tokB = rowB / hpc;
        la_bf16_t *outA = p.out + (int64_t)(it.row0 + tokA) * qstride + (int64_t)(head0 + rowA - tokA * hpc) * hd;
        la_bf16_t *outB = p.out + (int64_t)(it.row0 + tokB) * qstride + (int64_t)(head0 + rowB - tokB * hpc) * hd;
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
            const int d = dt * 8 + 2 * c4;
            if (d >= hd) continue;
            if (rowA < n_rows_used) *reinterpret_cast<uint32_t *>(outA + d) = la_pack_bf16x2(o[dt][0] * iA, o[dt][1] * iA);
            if (rowB < n_rows_used) *reinterpret_cast<uint32_t *>(outB + d) = la_pack_bf16x2(o[dt][2] * iB, o[dt][3] * iB);
        }
    } else {
        const int64_t prA = it.part_row0 + (int64_t)grp * P_ROWS + rowA, prB = prA + 8;
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
            const int d = dt * 8 + 2 * c4;
            if (d >= hd) continue;
            *reinterpret_cast<float2 *>(p.part_o + prA * hd + d) = make_float2(o[dt][0], o[dt][1]);
            *reinterpret_cast<float2 *>(p.part_o + prB * hd + d) = make_float2(o[dt][2], o[dt][3]);
        }
        if (c4 == 0) {
            p.part_ml[prA] = make_float2(mA, lA);
            p.part_ml[prB] = make_float2(mB, lB);
        }
    }
}

template <int HD>
la_status launch_prefill(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    static bool attr_done = false;
    return launch_prefill_kernel(attn_prefill_kernel<HD>, P_THREADS, prefill_layout<HD>::BYTES, &attr_done,
                                 "attn_prefill", p, stream, err);
}


/* ---- v2: 128 rows per CTA, two m16 tiles per warp (top of this file) ----------------------- */

constexpr int V2_WARPS = 4;
constexpr int V2_THREADS = V2_WARPS * 32;
constexpr int V2_ROWS = LA_ATTN_PREFILL_ROWS_V2;
constexpr int V2_WROWS = 32; /* rows per warp: two m16 tiles */
static_assert(V2_ROWS == V2_WARPS * V2_WROWS, "two m16 row tiles per warp");
static_assert(LA_KT == 64 && LA_KT_GROUPS == 4, "v2 assumes 64-key tiles of four 16-key groups");

/* One tile's key metadata (la_tile_meta's meaning, plus what the fast path needs):
 *   kpos[k]    logical position of key k, INT_MAX when masked for every query (padding,
 *              past kv1)
 *   gmin[g]    position of group g's first valid key (INT_MAX: none), gmax[g] of its last
 *              (INT_MIN: none); gnv[g] its valid keys (16: the whole group)
 *   gdelta[g]  q_delta of group g's block; gkrope[g] k_rope of it (0 when gnv is 0)
 * The group arrays are 16-byte aligned and read as int4. */
struct v2_meta {
    int32_t kpos[LA_KT];
    int32_t gmin[LA_KT_GROUPS], gmax[LA_KT_GROUPS], gdelta[LA_KT_GROUPS], gnv[LA_KT_GROUPS];
    int32_t gkrope[LA_KT_GROUPS];
    int32_t pad_[4];
};
static_assert(sizeof(v2_meta) % 16 == 0, "v2_meta keeps 16-byte alignment");

/* The v2 / v3 pipeline's raw(t): the block-list entries of tile t's four groups (one per
 * 16-key group; past the item: a dummy read of zero bytes), cp.async'd into raw slot t & 1
 * by the first 20 threads. */
__device__ __forceinline__ void v2_issue_raw(const la_cuda_attn_params &p, const la_cuda_attn_item &it,
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

/* meta(t) (v2_meta, into m) from raw(t) (the slot rb), by the first 64 threads, one key
 * each. */
__device__ __forceinline__ void v2_derive_meta(const la_cuda_attn_item &it, int B, const la_attn_block *rb,
                                               v2_meta *m, int t) {
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
 * them makes the compiler wait for each row's loads before issuing the next row's (ncu,
 * v3 on the 64-token question: one L2 round trip per row, ~15% of the kernel's samples).
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
 * live yet (O is still zero), and v2's later ones, with O live in registers (236 registers
 * at hd 128 either way, no spills); v3's later ones: ROT_ROWS_V3 */
constexpr int ROT_ROWS_FIRST = 16, ROT_ROWS_V2 = 4;

/* Rotate NR query rows (CTA rows row_base ..) at p - delta for this lane's frequencies f,
 * f + 1, RB rows' loads in flight at once (rope_q_load): store(r, lo, hi) writes row r's
 * rotated pairs for columns f and half + f (zeros for a row past the tile). Shared by
 * v2's and v3's rotations, which differ only in their shared-memory layout. */
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

/* ---- shared by v2 and v3: rows, a 16-row slab's scores and softmax, output rows -------- */

/* Row `row` of a v2 / v3 CTA (token row / hpc of the item, query head head0 + row % hpc):
 * its position (INT_MIN past the tile) and unrotated query (NULL past the tile) into shared
 * memory (lane c4 == 0 writes), folded into the caller's bounds over its rows in the tile. */
__device__ __forceinline__ void prefill_row_init(const la_cuda_attn_params &p, const la_cuda_attn_item &it, int row,
                                                 int head0, int n_rows_used, int c4, int32_t *row_pos,
                                                 const la_bf16_t **row_q, int &wmax, int &wmin) {
    const int hpc = p.heads_per_cta, hd = p.head_dim;
    int32_t rp = INT_MIN;
    const la_bf16_t *rq = NULL;
    if (row < n_rows_used) {
        const int tok = row / hpc;
        rp = p.pos[it.row0 + tok];
        rq = p.q + (int64_t)(it.row0 + tok) * p.n_heads * hd + (int64_t)(head0 + row - tok * hpc) * hd;
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
 * row's O must be scaled by (1: unchanged). */
template <int NT>
__device__ __forceinline__ void prefill_softmax(float (&s)[NT][4], float (&m)[2], float (&l)[2], float sl2,
                                                float (&alpha)[2]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float cand = mx * sl2;
        const float nm = cand > m[h] + LA_ATTN_RESCALE_SLACK ? cand : m[h];
        alpha[h] = nm == -INFINITY ? 1.f : la_exp2(m[h] - nm);
        const float bias = nm == -INFINITY ? 0.f : nm;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            s[nt][2 * h] = la_exp2(fmaf(s[nt][2 * h], sl2, -bias));
            s[nt][2 * h + 1] = la_exp2(fmaf(s[nt][2 * h + 1], sl2, -bias));
            sum += s[nt][2 * h] + s[nt][2 * h + 1];
        }
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

/* Write row `row` of a v2 / v3 / v4 CTA of ROWS rows (its half h of the slab's C layout, O
 * in o): the normalised bf16 output, or for a split item the unnormalised partial row and
 * (m, l) for attn_combine. l: this lane's part of the row's sum, summed here over the
 * row's quad, so every lane of the warp calls. */
template <int DT, int ROWS = LA_ATTN_PREFILL_ROWS_V2>
__device__ __forceinline__ void prefill_write_row(const la_cuda_attn_params &p, const la_cuda_attn_item &it, int grp,
                                                  int row, int h, int head0, int n_rows_used, int c4,
                                                  const float (&o)[DT][4], float m, float l) {
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int hd = p.head_dim, hpc = p.heads_per_cta;
    if (it.part_row0 < 0) {
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
        const int64_t pr = it.part_row0 + (int64_t)grp * ROWS + row;
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
            const int d = dt * 8 + 2 * c4;
            if (d < hd) *reinterpret_cast<float2 *>(p.part_o + pr * hd + d) = make_float2(o[dt][2 * h], o[dt][2 * h + 1]);
        }
        if (c4 == 0) p.part_ml[pr] = make_float2(m, l);
    }
}

template <int HD> struct prefill_v2_layout {
    static constexpr int STRIDE = HD + 8;
    static constexpr int Q_ELEMS = V2_ROWS * STRIDE;  /* rotated Q tile, 32 rows per warp */
    static constexpr int KV_ELEMS = LA_KT * STRIDE;   /* one of K / V, one stage */
    static constexpr size_t META_OFF = (size_t)(Q_ELEMS + 4 * KV_ELEMS) * 2;
    static constexpr size_t RAW_OFF = META_OFF + 2 * sizeof(v2_meta);
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
__device__ __forceinline__ void rotate_q_v2(la_bf16_t *Qw, const la_cuda_attn_params &p, int row_base,
                                            int32_t delta, const int32_t *row_pos,
                                            const la_bf16_t *const *row_q) {
    constexpr int STRIDE = HD + 8;
    const int lane = threadIdx.x & 31, hd = p.head_dim, half = hd >> 1;
    __syncwarp();
    if (lane < (hd >> 2)) {
        const int f = 2 * lane;
        rotate_rows<V2_WROWS, RB>(p, row_base, delta, half, f, row_pos, row_q, [&](int r, uint32_t lo, uint32_t hi) {
            *reinterpret_cast<uint32_t *>(Qw + r * STRIDE + f) = lo;
            *reinterpret_cast<uint32_t *>(Qw + r * STRIDE + half + f) = hi;
        });
    }
    __syncwarp();
}

template <int HD>
__global__ void __launch_bounds__(V2_THREADS, 2) attn_prefill_v2_kernel(const la_cuda_attn_params p) {
    la_pdl_trigger(); /* la_pdl_wait below, once the prologue has read the host-written metadata */
    using L = prefill_v2_layout<HD>;
    constexpr int STRIDE = L::STRIDE, CH = HD / 8, NTH = LA_KT / 16, DT = HD / 8, KS = HD / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    la_bf16_t *Qs = reinterpret_cast<la_bf16_t *>(smem);
    la_bf16_t *Kst = Qs + L::Q_ELEMS;       /* [2][KT][STRIDE] */
    la_bf16_t *Vst = Kst + 2 * L::KV_ELEMS; /* [2][KT][STRIDE] */
    v2_meta *meta = reinterpret_cast<v2_meta *>(smem + L::META_OFF);          /* [2] */
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
        for (int i = tid; i < (V2_ROWS + 4 * LA_KT) * CH; i += V2_THREADS) {
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
    auto issue_raw = [&](int t) { v2_issue_raw(p, it, blocks, n_tiles, raw, t); };
    /* K/V(t): thread (k0, c) copies 16-byte chunk c of keys k0, k0 + RPP, ... The four
     * groups' block entries are read from shared memory first and each group's base
     * address computed once (a group's 16 keys are consecutive slots of one block), so
     * the copies wait on no shared-memory load and do no division per key. */
    auto issue_kv = [&](int t) {
        constexpr int RPP = V2_THREADS / CH; /* key rows per pass */
        static_assert(V2_THREADS % CH == 0 && LA_KT % RPP == 0, "whole passes over the tile");
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
    auto derive_meta = [&](int t) { v2_derive_meta(it, B, raw + (t & 1) * LA_KT_GROUPS, meta + (t & 1), t); };

    /* 2. this thread's four rows: m16 tile i of the warp, row g (h = 0) or g + 8 (h = 1);
     * their positions (INT_MIN past the tile) wait in shared memory for the masked tiles */
    __shared__ int32_t row_pos[V2_ROWS];
    __shared__ const la_bf16_t *row_q[V2_ROWS]; /* the row's unrotated query (rotate_q_v2) */
    int wmax = INT_MIN, wmin = INT_MAX; /* over the warp's rows inside the tile */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            prefill_row_init(p, it, warp * V2_WROWS + i * 16 + h * 8 + g, head0, n_rows_used, c4, row_pos, row_q, wmax,
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
    la_bf16_t *Qw = Qs + warp * V2_WROWS * STRIDE;
    /* this lane's ldmatrix addresses (32-bit shared), tile / stage offsets added per use:
     * Q A fragments (m16 tile i: + i * 16 rows), K B fragments (ks / group), V.trans */
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t q_lane = sbase + 2u * (uint32_t)((warp * V2_WROWS + (mi & 1) * 8 + rr) * STRIDE + (mi >> 1) * 8);
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
            rotate_q_v2<HD, ROT_ROWS_FIRST>(Qw, p, warp * V2_WROWS, q_delta, row_pos, row_q);
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

        const v2_meta *m = meta + (t & 1);
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
            rotate_q_v2<HD, ROT_ROWS_V2>(Qw, p, warp * V2_WROWS, d0, row_pos, row_q);
            q_delta = d0;
            have_q = true;
        }
        int32_t rpos[2][2] = {{0, 0}, {0, 0}}; /* this thread's rows' positions, for the mask */
        if (!no_mask)
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) rpos[i][h] = row_pos[warp * V2_WROWS + i * 16 + h * 8 + g];

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
                        rotate_q_v2<HD, ROT_ROWS_V2>(Qw, p, warp * V2_WROWS, dg, row_pos, row_q);
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
            prefill_write_row<DT>(p, it, grp, warp * V2_WROWS + i * 16 + h * 8 + g, h, head0, n_rows_used, c4, o[i],
                                  mr[i][h], lr[i][h]);
}

template <int HD>
la_status launch_prefill_v2(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    static bool attr_done = false;
    return launch_prefill_kernel(attn_prefill_v2_kernel<HD>, V2_THREADS, prefill_v2_layout<HD>::BYTES, &attr_done,
                                 "attn_prefill v2", p, stream, err);
}

/* ---- v3: v2's tiling on Hopper's warpgroup MMA (wgmma, sm_90a), head_dim 128 ------------ */

/* One CTA = two warpgroups (8 warps) = 128 query rows, the tiling of v2 (the host cuts the
 * same tiles and split items); warpgroup m owns rows 64 m .. 64 m + 63 (one 64-row MMA
 * tile), its warp q rows 64 m + 16 q .. + 15 (that warp's accumulator slab). Per 64-key
 * tile: S = Q K^T by eight wgmma m64n64k16 (Q and K in shared memory, K-major), the online
 * softmax in registers exactly as v2's (base 2, conditional rescaling), then O += P V by
 * four wgmma m64n128k16 (P in registers, V in shared memory MN-major): no ldmatrix, and the
 * tensor cores run a warpgroup's MMAs while the other warpgroups (two CTAs per SM) do
 * their softmax. Shared memory holds Q and both K/V stages in wgmma.cuh's 128-byte-swizzled
 * layout (Q [2 column halves][128 rows], K / V stage [2 halves][64 keys], rows of 128
 * bytes). The block-list pipeline is v2's one tile deeper: each tile's group offsets are
 * derived once into shared memory (v3_meta) a tile before its copies are issued. The
 * visibility and mask rules, the partial rows and the rotation at p - q_delta are v2's, but
 * every decision that changes an MMA or the shared Q (skipping a tile, rotating Q) is taken
 * for the whole CTA; a tile whose visible groups need different rotations (one straddling
 * a document boundary) scores group by group with mma.sync from the same swizzled tiles.
 * Per thread: O 64 f32, S 32, P 16 registers; 128 registers (ptxas, sm_90a: a 24-byte
 * stack, 44 bytes spilled), 2 CTAs per SM (~100 KiB of shared memory each). Head dim 128 only (the launcher runs v2 for others); sm_90a only
 * (wgmma), the backend picks it on compute capability 9.0. */
constexpr int V3_THREADS = 256;
constexpr int V3_ROWS = LA_ATTN_PREFILL_ROWS_V2;
static_assert(V3_ROWS == 128, "two 64-row warpgroup tiles per CTA");

/* v3's tile metadata: v2's, plus each group's pool offset (elements, this KV head, the
 * group's first key; chunk 0) for the copies */
struct v3_meta {
    v2_meta m;
    int64_t gbase[LA_KT_GROUPS];
};
static_assert(sizeof(v3_meta) % 16 == 0, "v3_meta keeps 16-byte alignment");

struct prefill_v3_layout {
    static constexpr uint32_t Q_OFF = 0;              /* [2 halves][128 rows][128 B] */
    static constexpr uint32_t Q_HALF = V3_ROWS * 128;
    static constexpr uint32_t KV_HALF = LA_KT * 128;  /* one column half of a K or V stage */
    static constexpr uint32_t K_OFF = 2 * Q_HALF;     /* [2 stages][2 halves][64 keys][128 B] */
    static constexpr uint32_t V_OFF = K_OFF + 4 * KV_HALF;
    static constexpr uint32_t META_OFF = V_OFF + 4 * KV_HALF; /* [4] v3_meta */
    static constexpr uint32_t RAW_OFF = META_OFF + 4 * sizeof(v3_meta);
    static constexpr uint32_t END = RAW_OFF + 2 * LA_KT_GROUPS * sizeof(la_attn_block);
    static constexpr size_t BYTES = END + 1024; /* the dynamic window aligned up to 1024 inside */
};
static_assert(prefill_v3_layout::Q_OFF % 1024 == 0 && prefill_v3_layout::K_OFF % 1024 == 0 &&
                  prefill_v3_layout::V_OFF % 1024 == 0 && prefill_v3_layout::KV_HALF % 1024 == 0,
              "every swizzled region starts on a 1024-byte swizzle atom");

#ifdef LA_WGMMA /* compiled for sm_90a only, as the kernel body that uses them */
/* byte offset of element e (0..127) of row r in a two-half swizzled region (half_bytes per
 * half) */
__device__ __forceinline__ uint32_t v3_elem(uint32_t half_bytes, uint32_t r, uint32_t e) {
    return (e >> 6) * half_bytes + la_sw128(r, (e & 63) >> 3) + (e & 7) * 2;
}

/* S = Q K^T of one 64-row warpgroup tile over head_dim 128, for N keys (64: v3, 128: v4):
 * eight k-steps of 16 by wgmma, Q and K K-major in two 128-byte-swizzled column halves
 * q_half / kv_half bytes apart, dq and dk the descriptors of their first rows; the first
 * k-step writes S without reading it. Committed and waited for. */
template <int N>
__device__ __forceinline__ void qk_wgmma(float (&sacc)[N / 2], uint64_t dq, uint64_t dk, uint32_t q_half,
                                         uint32_t kv_half) {
    static_assert(N == 64 || N == 128, "the wgmma shapes of wgmma.cuh");
    la_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 8; ks++) {
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
    la_wgmma_commit();
    la_wgmma_wait<0>();
}

/* rows per batch of v3's later rotations: more than 2 adds spills to its 128 registers */
constexpr int ROT_ROWS_V3 = 2;

/* v3's and v4's Q rotation: this warp's 16 rows (row0 ..) at p - delta, written swizzled
 * into a Q of two Q_HALF-byte column halves; lane l does frequencies 2 l, 2 l + 1; RB rows'
 * loads in flight at once (rope_q_load). The caller fences and syncs. */
template <int RB, uint32_t Q_HALF = prefill_v3_layout::Q_HALF>
__device__ __forceinline__ void rotate_q_v3(unsigned char *Qs, const la_cuda_attn_params &p, int row0, int32_t delta,
                                            const int32_t *row_pos, const la_bf16_t *const *row_q) {
    const int f = 2 * (threadIdx.x & 31);
    rotate_rows<16, RB>(p, row0, delta, 64, f, row_pos, row_q, [&](int r, uint32_t lo, uint32_t hi) {
        *reinterpret_cast<uint32_t *>(Qs + v3_elem(Q_HALF, row0 + r, f)) = lo;
        *reinterpret_cast<uint32_t *>(Qs + v3_elem(Q_HALF, row0 + r, 64 + f)) = hi;
    });
}
#endif

__global__ void __launch_bounds__(V3_THREADS, 2) attn_prefill_v3_kernel(const la_cuda_attn_params p) {
    la_pdl_trigger(); /* la_pdl_wait below, once the prologue has read the host-written metadata */
#ifdef LA_WGMMA
    using L = prefill_v3_layout;
    constexpr int DT = 16; /* n8 column blocks of O (head_dim 128) */
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t s_raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t pad = (1024u - (s_raw & 1023u)) & 1023u;
    unsigned char *smem = smem_raw + pad;
    const uint32_t sb = s_raw + pad; /* 1024-aligned: the swizzle atoms' base */
    v3_meta *meta = reinterpret_cast<v3_meta *>(smem + L::META_OFF);           /* [4] */
    la_attn_block *raw = reinterpret_cast<la_attn_block *>(smem + L::RAW_OFF); /* [2][groups] */

    __shared__ la_cuda_attn_item it;
    if (threadIdx.x == 0) it = p.items[blockIdx.y];
    __syncthreads();
    const int grp = blockIdx.x;
    const la_attn_group ag = la_attn_group_of(p, grp);
    const int kvh = ag.kvh, head0 = ag.head0;
    const la_attn_block *blocks = p.blocks + it.block0;
    const int hd = 128, hpc = p.heads_per_cta, B = p.block_size;
    const int n_rows_used = it.n_tokens * hpc;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const int wg = warp >> 2, row0 = wg * 64 + (warp & 3) * 16; /* this warp's slab */
    const unsigned full = 0xffffffffu;
    const int n_tiles = it.kv1 > it.kv0 ? (it.kv1 - it.kv0 + LA_KT - 1) / LA_KT : 0;

    /* The pipeline: v2's, one tile deeper so the copies find their addresses ready. At the
     * top of iteration t (one __syncthreads): raw(t + 2) has arrived and meta(t + 1) was
     * derived in iteration t - 1; then K/V(t + 1) is issued from meta(t + 1), raw(t + 3)
     * into raw slot (t + 3) & 1 (last read in iteration t - 1), meta(t + 2) derived into
     * slot (t + 2) & 3 while tile t is computed from slot t & 3. */
    auto derive_meta = [&](int t) {
        v3_meta *mt = meta + (t & 3);
        const la_attn_block *rb = raw + (t & 1) * LA_KT_GROUPS;
        v2_derive_meta(it, B, rb, &mt->m, t);
        if (tid >= LA_KT && tid < LA_KT + LA_KT_GROUPS) { /* another warp: the group offsets */
            const int gi = tid - LA_KT, f0 = it.kv0 + t * LA_KT + gi * 16;
            mt->gbase[gi] = ((int64_t)rb[gi].block_id * p.n_kv_heads + kvh) * B * hd + (int64_t)la_slot_in_block(f0, B) * hd;
        }
    };
    /* K/V(t): thread (k0, c) copies 16-byte chunk c (of 16) of keys k0, k0 + 16, k0 + 32,
     * k0 + 48 (one per group) into the swizzled stage t & 1, from meta(t)'s offsets; keys
     * past a group's valid ones are zero-filled */
    const int kv_c = tid & 15, kv_k0 = tid >> 4;
    const uint32_t kv_dst = sb + L::K_OFF + (uint32_t)(kv_c >> 3) * L::KV_HALF + la_sw128((uint32_t)kv_k0, (uint32_t)(kv_c & 7));
    auto issue_kv = [&](int t) {
        const v3_meta *mt = meta + (t & 3);
        const uint32_t dst = kv_dst + (uint32_t)(t & 1) * 2 * L::KV_HALF;
#pragma unroll
        for (int gi = 0; gi < LA_KT_GROUPS; gi++) {
            const bool ok = kv_k0 < mt->m.gnv[gi];
            const int64_t off = ok ? mt->gbase[gi] + kv_k0 * hd + kv_c * 8 : 0;
            la_cp_async16_s(dst + gi * 16 * 128, p.k_pool + off, ok);
            la_cp_async16_s(dst + gi * 16 * 128 + 4 * L::KV_HALF, p.v_pool + off, ok);
        }
    };

    /* this thread's rows: row0 + g (h = 0) and row0 + g + 8 (h = 1) */
    __shared__ int32_t row_pos[V3_ROWS];
    __shared__ const la_bf16_t *row_q[V3_ROWS];
    int wmax = INT_MIN, wmin = INT_MAX;
#pragma unroll
    for (int h = 0; h < 2; h++) prefill_row_init(p, it, row0 + h * 8 + g, head0, n_rows_used, c4, row_pos, row_q, wmax, wmin);
    warp_minmax(wmax, wmin);

    float o[DT][4]; /* the warp's slab of O, C layout; the wgmmas see it as 64 floats */
#pragma unroll
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float(&oacc)[4 * DT] = *reinterpret_cast<float(*)[4 * DT]>(&o[0][0]);
    float mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.f, 0.f};
    bool have_q = false;
    int32_t q_delta = 0;
    const float sl2 = p.scale_log2;
    auto rotate = [&](int32_t delta, bool first) { /* every warp its rows, then visible to wgmma */
        if (first) rotate_q_v3<ROT_ROWS_FIRST>(smem + L::Q_OFF, p, row0, delta, row_pos, row_q);
        else rotate_q_v3<ROT_ROWS_V3>(smem + L::Q_OFF, p, row0, delta, row_pos, row_q);
        la_fence_proxy_async();
        __syncthreads();
        q_delta = delta;
        have_q = true;
    };
    /* descriptors: this warpgroup's Q tile; a k-step or stage adds its byte offset / 16
     * to the start address field (bits 0-13: no carry below 256 KiB) */
    const uint64_t dq = la_wgmma_desc(sb + L::Q_OFF + wg * 64 * 128, 16, 1024);

    /* prologue: raw(0), raw(1); meta(0), meta(1); then raw(2) and K/V(0) */
    v2_issue_raw(p, it, blocks, n_tiles, raw, 0);
    v2_issue_raw(p, it, blocks, n_tiles, raw, 1);
    la_cp_async_commit();
    la_cp_async_wait<0>();
    __syncthreads();
    derive_meta(0);
    derive_meta(1);
    __syncthreads(); /* meta(0), meta(1); raw slot 0 read */
    v2_issue_raw(p, it, blocks, n_tiles, raw, 2);
    /* up to here only what the host wrote (items, positions, block lists); q and the new
     * keys come from the kernels before this one (PDL: la_cuda_launch) */
    la_pdl_wait();
    if (n_tiles > 0) issue_kv(0);
    la_cp_async_commit();
    if (n_tiles > 0) {
        int first = -1; /* the first group of tile 0 visible to some row of the CTA */
#pragma unroll
        for (int gi = LA_KT_GROUPS - 1; gi >= 0; gi--)
            if (meta[0].m.gmin[gi] <= it.pos_max) first = gi;
        if (first >= 0) rotate(meta[0].m.gdelta[first], true);
    }

    for (int t = 0; t < n_tiles; t++) {
        la_wgmma_wait<0>(); /* none in flight (P V is waited at its tile's end); kept so every
                             * path into the copies below is visibly closed */
        la_cp_async_wait<0>();
        la_fence_proxy_async();
        __syncthreads();
        if (t + 1 < n_tiles) issue_kv(t + 1);
        v2_issue_raw(p, it, blocks, n_tiles, raw, t + 3);
        la_cp_async_commit();
        if (t + 2 < n_tiles) derive_meta(t + 2);

        const v2_meta *m = &meta[t & 3].m;
        const uint32_t kst = sb + L::K_OFF + (uint32_t)(t & 1) * 2 * L::KV_HALF;
        const uint32_t vst = sb + L::V_OFF + (uint32_t)(t & 1) * 2 * L::KV_HALF;
        const int4 gmin4 = *reinterpret_cast<const int4 *>(m->gmin);
        const int32_t gmin[4] = {gmin4.x, gmin4.y, gmin4.z, gmin4.w};
        const int32_t tmin = min(min(gmin[0], gmin[1]), min(gmin[2], gmin[3]));
        if (tmin > it.pos_max) continue;
        {
            const int4 kr = *reinterpret_cast<const int4 *>(m->gkrope);
            if (kr.x | kr.y | kr.z | kr.w) { /* mepic: rotate the keys in place, swizzled */
                unsigned char *Ks = smem + L::K_OFF + (t & 1) * 2 * L::KV_HALF;
                for (int i = tid; i < LA_KT * 64; i += V3_THREADS) {
                    const int k = i >> 6, f = i & 63;
                    if (!m->gkrope[k >> 4] || m->kpos[k] == INT_MAX) continue;
                    const float2 cs = la_rope_cs(p.rope, p.rope_len, 64, m->kpos[k], f);
                    la_bf16_t *xp = reinterpret_cast<la_bf16_t *>(Ks + v3_elem(L::KV_HALF, k, f));
                    la_bf16_t *yp = reinterpret_cast<la_bf16_t *>(Ks + v3_elem(L::KV_HALF, k, 64 + f));
                    const float x = la_bf2f(*xp), y = la_bf2f(*yp);
                    *xp = la_f2bf(x * cs.x - y * cs.y);
                    *yp = la_f2bf(y * cs.x + x * cs.y);
                }
                la_fence_proxy_async();
                __syncthreads();
            }
        }
        const int4 gmax4 = *reinterpret_cast<const int4 *>(m->gmax);
        const int4 gnv4 = *reinterpret_cast<const int4 *>(m->gnv);
        const int4 gd4 = *reinterpret_cast<const int4 *>(m->gdelta);
        const int32_t gdel[4] = {gd4.x, gd4.y, gd4.z, gd4.w};
        /* per warp: every key valid and visible to every row of the warp */
        const bool no_mask = gnv4.x == 16 && gnv4.y == 16 && gnv4.z == 16 && gnv4.w == 16 &&
                             max(max(gmax4.x, gmax4.y), max(gmax4.z, gmax4.w)) <= wmin;
        /* for the CTA: groups with a key visible to some row, and whether they share q_delta */
        int vis = 0;
        bool uniform = true;
        int32_t d0 = 0;
#pragma unroll
        for (int gi = 0; gi < LA_KT_GROUPS; gi++)
            if (gmin[gi] <= it.pos_max) {
                if (!vis) d0 = gdel[gi];
                else if (gdel[gi] != d0) uniform = false;
                vis |= 1 << gi;
            }
        /* no warpgroup still reads Q: every S was waited for before the barrier above */
        if (uniform && (!have_q || d0 != q_delta)) rotate(d0, false);
        int32_t rpos[2] = {0, 0};
        if (!no_mask) rpos[0] = row_pos[row0 + g], rpos[1] = row_pos[row0 + g + 8];

        /* S: [4 nt + e] = key 8 nt + 2 c4 + e % 2 of row h = e / 2. Written by the S
         * wgmmas only (the first k-step writes without reading): an ordinary write or
         * read of an accumulator while a wgmma is in flight makes ptxas serialise them */
        float s[LA_KT / 8][4];
        float(&sacc)[LA_KT / 2] = *reinterpret_cast<float(*)[LA_KT / 2]>(&s[0][0]);
        const uint64_t dk = la_wgmma_desc(kst, 16, 1024);
        if (uniform) {
            qk_wgmma<LA_KT>(sacc, dq, dk, L::Q_HALF, L::KV_HALF);
        } else {
            /* the visible groups need different rotations (a tile straddling a document
             * boundary, rare): one visible group at a time, Q rotated for each new
             * q_delta, this warp's 16 rows x 16 keys by mma.sync from the same swizzled
             * tiles (its C fragments are the wgmma slab's layout); an invisible group's
             * scores stay zero and are masked below. No wgmma here: ptxas serialises
             * every wgmma of a kernel whose second wgmma path it cannot pipeline. */
#pragma unroll
            for (int j = 0; j < LA_KT / 2; j++) sacc[j] = 0.f;
            const int mi = lane >> 3, rr = lane & 7;
#pragma unroll
            for (int gl = 0; gl < LA_KT_GROUPS; gl++) {
                if (!(vis & (1 << gl))) continue;
                const int32_t dg = gdel[gl];
                if (!have_q || dg != q_delta) {
                    __syncthreads(); /* no warpgroup still reads Q */
                    rotate(dg, false);
                }
                const uint32_t key = (uint32_t)(gl * 16 + (mi >> 1) * 8 + rr);
#pragma unroll
                for (int ks = 0; ks < 8; ks++) {
                    uint32_t qa[4], b0, b1, b2, b3;
                    la_ldmatrix_x4_s(qa[0], qa[1], qa[2], qa[3],
                                     sb + L::Q_OFF + (ks >> 2) * L::Q_HALF +
                                         la_sw128((uint32_t)(row0 + (mi & 1) * 8 + rr), (uint32_t)(2 * (ks & 3) + (mi >> 1))));
                    la_ldmatrix_x4_s(b0, b1, b2, b3,
                                     kst + (ks >> 2) * L::KV_HALF + la_sw128(key, (uint32_t)(2 * (ks & 3) + (mi & 1))));
                    la_mma_bf16(s[2 * gl], qa, b0, b1);
                    la_mma_bf16(s[2 * gl + 1], qa, b2, b3);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < LA_KT / 2; j++) la_wgmma_fence_operand(sacc[j]);
        if (!no_mask) prefill_mask<LA_KT / 8>(s, m->kpos, c4, rpos);
        float alpha[2];
        prefill_softmax<LA_KT / 8>(s, mr, lr, sl2, alpha);
        if (__any_sync(full, alpha[0] != 1.f || alpha[1] != 1.f)) prefill_rescale<DT>(o, alpha);
        uint32_t a[LA_KT_GROUPS][4]; /* P of keys 16 kk .. 16 kk + 15 */
#pragma unroll
        for (int kk = 0; kk < LA_KT_GROUPS; kk++) prefill_p_frag<LA_KT / 8>(s, kk, a[kk]);
        const uint64_t dv = la_wgmma_desc(vst, L::KV_HALF, 1024);
        la_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < LA_KT_GROUPS; kk++) la_wgmma_rs_n128_tb(oacc, a[kk], dv + ((kk * 16 * 128) >> 4));
        la_wgmma_commit();
        /* waited here, not under the next tile's S: ptxas serialises every wgmma of the
         * kernel when O's MMAs stay in flight across the tile loop */
        la_wgmma_wait<0>();
    }
    la_wgmma_wait<0>();
    la_cp_async_wait<0>();
#pragma unroll
    for (int j = 0; j < 4 * DT; j++) la_wgmma_fence_operand(oacc[j]);

    /* write: as v2's, rows row0 + 8 h + g */
#pragma unroll
    for (int h = 0; h < 2; h++)
        prefill_write_row<DT>(p, it, grp, row0 + h * 8 + g, h, head0, n_rows_used, c4, o, mr[h], lr[h]);
#else
    __trap(); /* not built for sm_90a: the host never launches this instance */
#endif
}

la_status launch_prefill_v3(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    static bool attr_done = false;
    return launch_prefill_kernel(attn_prefill_v3_kernel, V3_THREADS, prefill_v3_layout::BYTES, &attr_done,
                                 "attn_prefill v3", p, stream, err);
}

/* ---- v4: warp-specialized, 256 rows x 128-key tiles, for plain steps ------------------ */

/* Full recompute, prefix caching and BlockAttention's question over its re-rotated copies are
 * plain steps (la_cuda_attn_params.plain: no block carries a q_delta or k_rope), where each
 * query is rotated once, at its own position. There, what limits v3 is not its arithmetic
 * but the K/V it streams from L2: each CTA of 128 rows reads its whole key range, so an 8K
 * Llama-3-8B prefill moves ~137 GB through L2 (measured on the H200 with a first draft of
 * v4 at 128 rows per CTA: with the copies alone the kernel took 30 ms of its 52, with the
 * MMAs and softmax alone 35; GPU_NOTES.md, version 31). v4 doubles the rows per CTA to 256
 * (64 tokens x 4 heads for Llama-3), which halves those bytes, and keeps the tensor cores
 * fed with FlashAttention-3's layout (Shah
 * et al. 2024, "FlashAttention-3: Fast and Accurate Attention with Asynchrony and
 * Low-precision", sec. 3.1): one CTA per SM of three warpgroups.
 *
 * Warpgroup 0 is the producer (40 registers per thread, setmaxnreg): its 128 threads copy
 * each 128-key K/V tile of the paged block list into a two-stage ring (cp.async, zero-filled
 * past a 16-key group's valid keys) and its first warp writes the tile's key positions. A
 * stage's arrival is an mbarrier phase (`full`: 128 cp.async arrivals as the copies land and
 * 32 ordinary ones after the positions), its release another (`empty`: one arrival per
 * consumer warp). Warpgroups 1 and 2 are the consumers (232 registers): 128 query rows each,
 * as two 64-row wgmma tiles (slabs) that share every K/V stage. Per slab and tile: S = Q K^T
 * by eight wgmma m64n128k16 (Q and K in shared memory, K-major), v3's online softmax in
 * registers (prefill_softmax), O += P V by eight wgmma m64n128k16 (P in registers, V
 * MN-major). No CTA-wide barrier in the tile loop: tile t + 1's copies run under tile t's
 * MMAs, and the two consumer warpgroups drift apart, one's softmax under the other's MMAs.
 * Per consumer thread: O 2 x 64, S 64 f32 registers. Shared memory: Q 64 KiB (v3's swizzled
 * layout, 256 rows), K and V 2 x 32 KiB each, ~194 KiB. Head dim 128, sm_90a. */
constexpr int V4_THREADS = 384;
constexpr int V4_PRODUCERS = 128; /* warpgroup 0 */
constexpr int V4_ROWS = LA_ATTN_PREFILL_ROWS_V4;
constexpr int V4_KT = 128; /* keys per tile */
constexpr int V4_GROUPS = V4_KT / 16;
constexpr int V4_CONSUMER_WARPS = 8;
constexpr int V4_PRODUCER_REGS = 40, V4_CONSUMER_REGS = 232;
static_assert(V4_ROWS == 256 && V4_CONSUMER_WARPS * 32 == V4_THREADS - V4_PRODUCERS,
              "two consumer warpgroups of two 64-row slabs");
static_assert(V4_GROUPS * 16 == V4_KT, "a tile is whole 16-key groups");
static_assert(V4_PRODUCERS * V4_PRODUCER_REGS + (V4_THREADS - V4_PRODUCERS) * V4_CONSUMER_REGS <= 65536,
              "the register file of one SM");

/* tile metadata, written by the producer's first warp: key positions (INT_MAX past a
 * group's valid keys), the tile's smallest and largest valid position (INT_MAX / INT_MIN:
 * none), whether all 128 keys are valid */
struct v4_meta {
    int32_t kpos[V4_KT];
    int32_t tmin, tmax, all_valid, pad_;
};
static_assert(sizeof(v4_meta) % 16 == 0, "v4_meta keeps 16-byte alignment");

struct prefill_v4_layout {
    static constexpr uint32_t Q_OFF = 0; /* [2 halves][256 rows][128 B] */
    static constexpr uint32_t Q_HALF = V4_ROWS * 128;
    static constexpr uint32_t KV_HALF = V4_KT * 128; /* one column half of a K or V stage */
    static constexpr uint32_t STAGE = 2 * KV_HALF;
    static constexpr uint32_t K_OFF = 2 * Q_HALF; /* [2 stages][2 halves][128 keys][128 B] */
    static constexpr uint32_t V_OFF = K_OFF + 2 * STAGE;
    static constexpr uint32_t META_OFF = V_OFF + 2 * STAGE;             /* [2] v4_meta */
    static constexpr uint32_t BAR_OFF = META_OFF + 2 * sizeof(v4_meta); /* full[2], empty[2] */
    static constexpr uint32_t END = BAR_OFF + 4 * 8;
    static constexpr size_t BYTES = END + 1024;
};
static_assert(prefill_v4_layout::Q_OFF % 1024 == 0 && prefill_v4_layout::K_OFF % 1024 == 0 &&
                  prefill_v4_layout::V_OFF % 1024 == 0 &&
                  prefill_v4_layout::KV_HALF % 1024 == 0 && prefill_v4_layout::Q_HALF % 1024 == 0,
              "every swizzled region starts on a 1024-byte swizzle atom");

__global__ void __launch_bounds__(V4_THREADS, 1) attn_prefill_v4_kernel(const la_cuda_attn_params p) {
    la_pdl_trigger();
#ifdef LA_WGMMA
    using L = prefill_v4_layout;
    constexpr int DT = 16; /* n8 column blocks of O (head_dim 128) */
    constexpr int NT = V4_KT / 8;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t s_raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t pad = (1024u - (s_raw & 1023u)) & 1023u;
    unsigned char *smem = smem_raw + pad;
    const uint32_t sb = s_raw + pad;
    v4_meta *meta = reinterpret_cast<v4_meta *>(smem + L::META_OFF);
    const uint32_t bar_full = sb + L::BAR_OFF, bar_empty = sb + L::BAR_OFF + 16; /* stage s: + 8 s */

    __shared__ la_cuda_attn_item it;
    __shared__ int32_t row_pos[V4_ROWS];
    __shared__ const la_bf16_t *row_q[V4_ROWS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const unsigned full = 0xffffffffu;
    if (tid == 0) {
        it = p.items[blockIdx.y];
        for (int s = 0; s < 2; s++) {
            la_mbar_init(bar_full + 8 * s, V4_PRODUCERS + 32);
            la_mbar_init(bar_empty + 8 * s, V4_CONSUMER_WARPS);
        }
        la_mbar_init_fence();
    }
    __syncthreads();
    const la_attn_group ag = la_attn_group_of(p, blockIdx.x);
    const int kvh = ag.kvh, head0 = ag.head0, hd = 128, B = p.block_size;
    const int n_tiles = it.kv1 > it.kv0 ? (it.kv1 - it.kv0 + V4_KT - 1) / V4_KT : 0;
    /* everything below reads q or the pool, written by the kernels before this one */
    la_pdl_wait();

    if (warp < V4_PRODUCERS / 32) {
        la_setmaxnreg_dec<V4_PRODUCER_REGS>();
        /* ---- producer: thread (k0, c) copies 16-byte chunk c of keys k0 + 8 i, i < 16 (two
         * per 16-key group: group i / 2, key k0 + 8 (i % 2) in it) of K and V; key k0 + 8 i
         * sits 8 i rows below key k0 in the same swizzle column */
        const la_attn_block *blocks = p.blocks + it.block0;
        const int c = tid & 15, k0 = tid >> 4;
        const uint32_t dst0 = sb + (uint32_t)(c >> 3) * L::KV_HALF + la_sw128((uint32_t)k0, (uint32_t)(c & 7));
        /* 16-key group gi of tile t: its valid keys, its first key's position and pool row
         * (key slot of this KV head: elements / head_dim, below 2^31 for any pool a GPU holds) */
        auto group = [&](int t, int gi, int32_t &nvg, int32_t &gpos, int32_t &grow) {
            const int f0 = it.kv0 + t * V4_KT + gi * 16, j0 = la_slot_in_block(f0, B);
            const bool in = f0 < it.kv1;
            const la_attn_block *b = blocks + (in ? f0 / B : 0);
            nvg = in ? max(0, min(16, min(b->n_valid - j0, it.kv1 - f0))) : 0;
            gpos = b->pos0 + j0;
            grow = (b->block_id * p.n_kv_heads + kvh) * B + j0;
        };
        for (int t = 0; t < n_tiles; t++) {
            const int s = t & 1;
            /* the tile's block entries are loaded before the wait for its stage, so the
             * wait hides their latency */
            int32_t nvg[V4_GROUPS], grow[V4_GROUPS];
#pragma unroll
            for (int gi = 0; gi < V4_GROUPS; gi++) {
                int32_t gpos;
                group(t, gi, nvg[gi], gpos, grow[gi]);
            }
            if (t >= 2) la_mbar_wait(bar_empty + 8 * s, ((t >> 1) - 1) & 1);
            const uint32_t dk = dst0 + L::K_OFF + s * L::STAGE, dv = dst0 + L::V_OFF + s * L::STAGE;
#pragma unroll
            for (int gi = 0; gi < V4_GROUPS; gi++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int kk = k0 + 8 * h, i = 2 * gi + h;
                    const bool ok = kk < nvg[gi];
                    const int64_t off = ok ? (int64_t)(grow[gi] + kk) * hd + c * 8 : 0;
                    la_cp_async16_s(dk + (uint32_t)i * 1024, p.k_pool + off, ok);
                    la_cp_async16_s(dv + (uint32_t)i * 1024, p.v_pool + off, ok);
                }
            }
            la_mbar_arrive_cp_async(bar_full + 8 * s);
            if (warp == 0) { /* lane l: keys 4 l .. 4 l + 3, all in group l / 4 */
                int32_t nvg, gpos, grow;
                group(t, lane >> 2, nvg, gpos, grow);
                const int kk = (lane & 3) * 4;
                int4 kp;
                kp.x = kk < nvg ? gpos + kk : INT_MAX;
                kp.y = kk + 1 < nvg ? gpos + kk + 1 : INT_MAX;
                kp.z = kk + 2 < nvg ? gpos + kk + 2 : INT_MAX;
                kp.w = kk + 3 < nvg ? gpos + kk + 3 : INT_MAX;
                *reinterpret_cast<int4 *>(&meta[s].kpos[4 * lane]) = kp;
                const int32_t tmin = __reduce_min_sync(full, nvg > 0 ? gpos : INT_MAX);
                const int32_t tmax = __reduce_max_sync(full, nvg > 0 ? gpos + nvg - 1 : INT_MIN);
                const bool all_valid = __all_sync(full, nvg == 16);
                if (lane == 0) {
                    meta[s].tmin = tmin;
                    meta[s].tmax = tmax;
                    meta[s].all_valid = all_valid;
                }
                la_mbar_arrive(bar_full + 8 * s);
            }
        }
        la_cp_async_commit(); /* the copies were never committed: wait_group covers them so */
        la_cp_async_wait<0>(); /* nothing is in flight when the thread exits */
        return;
    }
    la_setmaxnreg_inc<V4_CONSUMER_REGS>();

    /* ---- consumers: warp cw of 8 in warpgroup wg; its slab j holds rows
     * 128 wg + 64 j + 16 (cw % 4) .. + 15 */
    const int cw = warp - V4_PRODUCERS / 32, wg = cw >> 2, g = lane >> 2, c4 = lane & 3;
    const int hpc = p.heads_per_cta, n_rows_used = it.n_tokens * hpc;
    int row0[2], wmin[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        row0[j] = wg * 128 + j * 64 + (cw & 3) * 16;
        int wmax = INT_MIN;
        wmin[j] = INT_MAX;
#pragma unroll
        for (int h = 0; h < 2; h++)
            prefill_row_init(p, it, row0[j] + h * 8 + g, head0, n_rows_used, c4, row_pos, row_q, wmax, wmin[j]);
        warp_minmax(wmax, wmin[j]);
    }
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 2; j++) rotate_q_v3<ROT_ROWS_FIRST, L::Q_HALF>(smem + L::Q_OFF, p, row0[j], 0, row_pos, row_q);
    la_fence_proxy_async();
    la_bar_sync(1 + wg, 128); /* the warpgroup's 128 rows of Q written */
    int32_t rpos[2][2];
#pragma unroll
    for (int j = 0; j < 2; j++) rpos[j][0] = row_pos[row0[j] + g], rpos[j][1] = row_pos[row0[j] + g + 8];

    float o[2][DT][4];
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int d = 0; d < DT; d++) o[j][d][0] = o[j][d][1] = o[j][d][2] = o[j][d][3] = 0.f;
    float mr[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}}, lr[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    const float sl2 = p.scale_log2;

    for (int t = 0; t < n_tiles; t++) {
        const int s = t & 1;
        la_mbar_wait(bar_full + 8 * s, (t >> 1) & 1);
        const v4_meta *m = meta + s;
        if (m->tmin <= it.pos_max) {
            la_fence_proxy_async(); /* the producer's copies, seen through the barrier, to wgmma */
            const uint64_t dk = la_wgmma_desc(sb + L::K_OFF + s * L::STAGE, 16, 1024);
            const uint64_t dv = la_wgmma_desc(sb + L::V_OFF + s * L::STAGE, L::KV_HALF, 1024);
            const bool all_valid = m->all_valid;
            const int32_t tmax = m->tmax;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const uint64_t dq = la_wgmma_desc(sb + L::Q_OFF + (wg * 128 + j * 64) * 128, 16, 1024);
                float sc[NT][4];
                float(&sacc)[4 * NT] = *reinterpret_cast<float(*)[4 * NT]>(&sc[0][0]);
                float(&oacc)[4 * DT] = *reinterpret_cast<float(*)[4 * DT]>(&o[j][0][0]);
                qk_wgmma<V4_KT>(sacc, dq, dk, L::Q_HALF, L::KV_HALF);
#pragma unroll
                for (int k = 0; k < 4 * NT; k++) la_wgmma_fence_operand(sacc[k]);
                if (!(all_valid && tmax <= wmin[j])) prefill_mask<NT>(sc, m->kpos, c4, rpos[j]);
                float alpha[2];
                prefill_softmax<NT>(sc, mr[j], lr[j], sl2, alpha);
                if (__any_sync(full, alpha[0] != 1.f || alpha[1] != 1.f)) prefill_rescale<DT>(o[j], alpha);
                uint32_t a[V4_GROUPS][4];
#pragma unroll
                for (int kk = 0; kk < V4_GROUPS; kk++) prefill_p_frag<NT>(sc, kk, a[kk]);
                la_wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < V4_GROUPS; kk++) la_wgmma_rs_n128_tb(oacc, a[kk], dv + ((kk * 16 * 128) >> 4));
                la_wgmma_commit();
                la_wgmma_wait<0>();
#pragma unroll
                for (int k = 0; k < 4 * DT; k++) la_wgmma_fence_operand(oacc[k]);
            }
        }
        __syncwarp();
        if (lane == 0) la_mbar_arrive(bar_empty + 8 * s); /* this warp is done with stage s */
    }
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            prefill_write_row<DT, V4_ROWS>(p, it, blockIdx.x, row0[j] + h * 8 + g, h, head0, n_rows_used, c4, o[j],
                                          mr[j][h], lr[j][h]);
#else
    __trap(); /* not built for sm_90a: the host never launches this instance */
#endif
}

la_status launch_prefill_v4(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    static bool attr_done = false;
    return launch_prefill_kernel(attn_prefill_v4_kernel, V4_THREADS, prefill_v4_layout::BYTES, &attr_done,
                                 "attn_prefill v4", p, stream, err);
}

} /* namespace */

/* ---- launcher --------------------------------------------------------------------------------- */

extern "C" la_status la_cuda_attn_prefill(const la_cuda_attn_params *p, cudaStream_t stream,
                                          la_err *err) {
    if (p->n_items <= 0) return LA_OK;
    LA_TRY(la_cuda_attn_check(p, "attn_prefill", err));
    const int hd = p->head_dim;
    if (p->prefill_variant == 1) {
        if (hd <= 32) return launch_prefill<32>(p, stream, err);
        if (hd <= 64) return launch_prefill<64>(p, stream, err);
        return launch_prefill<128>(p, stream, err);
    }
    const int32_t kernel = la_cuda_attn_prefill_step_kernel(p->prefill_variant, hd, p->plain);
    if (kernel == 4) return launch_prefill_v4(p, stream, err);
    if (kernel == 3) return launch_prefill_v3(p, stream, err);
    if (hd <= 32) return launch_prefill_v2<32>(p, stream, err);
    if (hd <= 64) return launch_prefill_v2<64>(p, stream, err);
    return launch_prefill_v2<128>(p, stream, err);
}
