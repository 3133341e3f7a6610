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
 * Grid: x = work item (la_cuda_attn_item: a tile of tokens of one sequence and a range of
 * its key slots, built by the host scheduler in cuda_backend.c), y = KV head x head
 * chunk. One CTA = 4 warps = 64 query rows; row r is token r / hpc, query head
 * r % hpc of the CTA's KV head (hpc = heads_per_cta: 4 for Llama-3's GQA, so a CTA holds
 * 16 tokens x 4 heads and every K/V tile it stages serves four query heads). Each warp
 * owns one 16-row m16 tile: S = Q K^T and O += P V with mma.sync m16n8k16 (bf16 in, f32
 * accumulate), K fragments by ldmatrix, V fragments by ldmatrix.trans, P reused from the
 * S accumulators as the A operand. K/V tiles are double-buffered with cp.async.
 * The query fragments live in registers and are re-rotated from the unrotated Q tile in
 * shared memory whenever a 16-key group's q_delta differs from the one they carry: once
 * per document run for lazy, once per CTA otherwise.
 *
 * Work per CTA and key tile: 64 rows x 64 keys x head_dim x 4 FLOPs (2 for Q K^T, 2 for
 * P V) = 2.1 MFLOP at head_dim 128, against 2 x 64 x head_dim x 2 bytes = 32 KiB of K/V
 * from device memory: 64 FLOP/byte, compute-bound on Hopper when the tile's K/V is
 * shared by several query tiles (L2), bandwidth-bound for a 64-token question. Whole
 * layer: 4 n_q n_kv_visible n_heads head_dim FLOPs; K/V bytes 4 n_kv n_kv_heads head_dim
 * per query tile that reads them.
 */
#include "backend/cuda/attn_tile.cuh"

namespace {

constexpr int P_WARPS = 4;
constexpr int P_THREADS = P_WARPS * 32;
constexpr int P_ROWS = LA_ATTN_PREFILL_ROWS;
static_assert(P_ROWS == P_WARPS * 16, "one m16 row tile per warp");

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
    using L = prefill_layout<HD>;
    constexpr int STRIDE = L::STRIDE, CH = HD / 8, NT = LA_KT / 8, DT = HD / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    la_bf16_t *Qs = reinterpret_cast<la_bf16_t *>(smem);
    la_bf16_t *Kst = Qs + L::Q_ELEMS;       /* [2][KT][STRIDE] */
    la_bf16_t *Vst = Kst + 2 * L::KV_ELEMS; /* [2][KT][STRIDE] */
    la_tile_meta *meta = reinterpret_cast<la_tile_meta *>(Vst + 2 * L::KV_ELEMS);

    const la_cuda_attn_item it = p.items[blockIdx.x];
    const int grp = blockIdx.y, kvh = grp / p.n_head_chunks, chunk = grp - kvh * p.n_head_chunks;
    const la_batch_seq sq = p.seqs[it.seq_id];
    const la_attn_block *blocks = p.blocks + sq.block0;
    const int hd = p.head_dim, hpc = p.heads_per_cta;
    const int head0 = kvh * (p.n_heads / p.n_kv_heads) + chunk * hpc;
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
    const size_t bytes = prefill_layout<HD>::BYTES;
    static bool attr_done = false;
    if (!attr_done) {
        cudaError_t e = cudaFuncSetAttribute(attn_prefill_kernel<HD>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (e != cudaSuccess)
            return la_err_set(err, LA_ERR_BACKEND, "attn_prefill: %zu bytes of shared memory: %s",
                              bytes, cudaGetErrorString(e));
        attr_done = true;
    }
    dim3 grid((unsigned)p->n_items, (unsigned)(p->n_kv_heads * p->n_head_chunks));
    attn_prefill_kernel<HD><<<grid, P_THREADS, bytes, stream>>>(*p);
    return la_cuda_launched("attn_prefill", err);
}

} /* namespace */

/* ---- launcher --------------------------------------------------------------------------------- */

extern "C" la_status la_cuda_attn_prefill(const la_cuda_attn_params *p, cudaStream_t stream,
                                          la_err *err) {
    if (p->n_items <= 0) return LA_OK;
    LA_TRY(la_cuda_attn_check(p, "attn_prefill", err));
    const int hd = p->head_dim;
    if (hd <= 32) return launch_prefill<32>(p, stream, err);
    if (hd <= 64) return launch_prefill<64>(p, stream, err);
    return launch_prefill<128>(p, stream, err);
}
