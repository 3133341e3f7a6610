/* Paged attention for decode: one new token per sequence against its whole KV block list,
 * split over the KV length so that even one sequence fills the GPU (flash-decoding), with
 * the per-block rotation metadata of backend/backend.h applied inside; tensor cores, each
 * warp streaming its own share of the item's keys.
 *
 * Formula: as attn_prefill.cu (q rotated at p - q_delta per block, keys of k_rope blocks
 * rotated at pos0 + j on load, padding and causal masks, scale 1/sqrt(head_dim), softmax
 * over the visible slots). A decode step reads every cached key once for heads_per_cta
 * query heads, 2 x heads_per_cta FLOPs per K/V byte, far below the tensor-core ridge, so
 * the kernel needs many bytes in flight: Little's law, 4.8 TB/s x ~0.8 us DRAM latency =
 * ~3.8 MB over 132 SMs = ~29 KB per SM (~40 KB with the loaded latency).
 *
 * Shapes: q, out [n_tokens, n_heads * head_dim] bf16 (rows of decode items only); the
 * layer's K/V slabs [n_blocks][n_kv_heads][block_size][head_dim] bf16; partial rows f32
 * [rows][head_dim] plus (m, l). Grid: x = decode item (one token of one sequence and a
 * range of its key slots), y = KV head x head chunk. Bytes per call: 4 x n_kv_visible x
 * n_kv_heads x head_dim per sequence (K and V, bf16) plus q/out; FLOPs: 4 x n_kv_visible x
 * n_heads x head_dim per sequence.
 *
 * 4 warps per CTA (128 threads). The item's 16-key groups (flat slots [16 i, 16 i +
 * 16); a group lies in one block since block_size is a multiple of 16, so it has one
 * q_delta and one k_rope) are cut into 4 contiguous shares, one per warp. Each warp runs
 * its own cp.async pipeline of S stages (S = 3 at head_dim 128, 4 below) of one group's
 * K and V each, waits with cp.async.wait_group + __syncwarp and never meets the other
 * warps until the end: no CTA barrier in the key loop. Per group:
 *   - the group's block entry was loaded one group ahead, so issuing the copies never
 *     waits on device memory; the visible keys are a prefix r < nv (padding, kv1 and the
 *     causal mask all cut a group at one point), and keys past nv are zero-filled, not read;
 *   - mepic (k_rope): the warp rotates its group's keys in shared memory at kpos0 + r;
 *   - lazy: the query fragments are re-rotated at p - q_delta from the unrotated f32
 *     query in shared memory when the group's q_delta differs from the warp's current one
 *     (contiguous shares: once per document the warp crosses);
 *   - S = Q K^T as mma.sync m16n8k16 (bf16, f32 accumulate) with the CTA's heads_per_cta
 *     query heads as rows 0..hpc-1 of the m16 tile (4 for Llama-3's GQA, 3 for the demo
 *     model; rows hpc..15 are zero padding), keys by ldmatrix: HD/16 x 2 MMAs;
 *   - mask, online softmax over the quad (row g of lane 4g..4g+3), O rescale, then
 *     O += P V with P straight from the score registers and V by ldmatrix.trans: HD/16 x
 *     2 MMAs.
 * At the end each warp leaves (m, l, O) for its rows in shared memory (over its own spent
 * stages) and the CTA merges its warps': M = max m_w, O = sum 2^(m_w - M) O_w, l likewise;
 * then the normalised output, or the unnormalised partial row and (M, l), merged by
 * attn_combine or, for items with merge >= 0, by the split set's last CTA right here
 * (decode_merge_if_last).
 *
 * PDL (cuda_common.cuh): before its wait a warp reads its item, block entries and the RoPE
 * table, and issues its first S - 1 groups' copies except those of blocks a token of this
 * step writes (p.kv_written; NULL: none before the wait), so the prologue's chain of
 * dependent loads and most of a short share's keys overlap the kernels before. q and the
 * new token's block come after the wait.
 *
 * Arithmetic, head_dim 128: one group = 16 keys x 128 dims x 2 B x 2 (K, V) = 8 KiB. Each
 * warp keeps S - 1 = 2 groups in flight while computing a third: 16 KiB per warp. Shared
 * memory per CTA: 4 warps x 3 stages x 2 x 16 rows x 136 bf16 = 102 KiB + 4 KiB query +
 * metadata = 106.2 KiB, so 2 CTAs per SM (228 KiB): 8 warps x 16 KiB = 128 KiB in flight
 * per SM, 3-4x the ~30-40 KB needed (64 KiB if only one CTA lands on an SM). Compute per
 * group per warp: 16 + 16 MMAs, 16 ldmatrix, ~32 cp.async and ~60 other instructions, a
 * critical path of ~8 dependent MMAs + the quad shuffles (~0.5-1k cycles); at 4.8 TB/s an
 * SM must consume 8 KiB per ~400 cycles, i.e. each of its 8 warps one group per ~3200
 * cycles: 3x headroom on paper. Measured, the kernel at batch 1 is bound by latency and
 * issue instead (bench/GPU_NOTES.md, versions 11-15). head_dim 64: 4 stages, 74.3 KiB per
 * CTA; head_dim 32: 41.3 KiB. Registers (ptxas, sm_90a): 249 / 147 / 111 at head_dim 128 /
 * 64 / 32, no spills.
 *
 * Numerics: the rotated query and P are rounded to bf16 for the MMAs (as attn_prefill
 * does); keys and values are read as stored (bf16), scores and accumulation are f32.
 *
 * The split schedule is the host's (cuda_attn_plan.c): a CTA covers a contiguous key range
 * of one item, which its 4 warps stream independently.
 *
 * Deep instance (la_cuda_attn_params.decode_instance DEEP: a decode-only step whose grid fits one
 * wave at one CTA per SM, e.g. batch 1 or 8 at 8K split into ~128 CTAs): 8 warps per CTA,
 * same stages, 204 KiB of stages at head_dim 128, one CTA per SM. A decode CTA is bound by
 * instruction issue, not by bytes in flight (ncu: bench/GPU_NOTES.md), so the deep instance
 * doubles the warps rather than the stages.
 */
#include "backend/cuda/kernels/attn_tile.cuh"

namespace {

constexpr int D_MAXH = LA_ATTN_MAX_HEADS_PER_CTA;

constexpr int W_KEYS = 16; /* keys per warp stage: one 16-key group, inside one block */

/* DEEP: the instance for launches whose CTAs each have an SM to themselves
 * (la_cuda_attn_params.decode_instance DEEP): 8 warps instead of 4, most of the SM's shared memory.
 * A decode CTA is bound by instruction issue more than by bytes in flight (ncu:
 * bench/GPU_NOTES.md), so the SM's second half of warps does the work of the second CTA it
 * no longer holds. */
template <int HD, bool DEEP> struct decode_layout {
    static constexpr int WARPS = DEEP ? 8 : 4;
    static constexpr int THREADS = WARPS * 32;
    static constexpr int STAGES = HD >= 128 ? 3 : 4;                 /* cp.async stages per warp */
    static constexpr int STRIDE = HD + 8;                            /* bf16 per shared row */
    static constexpr int TILE_ELEMS = W_KEYS * STRIDE;               /* K or V of one stage */
    static constexpr int WARP_ELEMS = STAGES * 2 * TILE_ELEMS;       /* a warp's K, V stages */
    /* byte offsets */
    static constexpr size_t META = (size_t)WARPS * WARP_ELEMS * 2; /* int4 [WARPS][STAGES] */
    static constexpr size_t QU = META + (size_t)WARPS * STAGES * 16; /* f32 [D_MAXH][HD] */
    static constexpr size_t BYTES = QU + (size_t)D_MAXH * HD * 4;
    /* the packed instance: each warp's own query heads, bf16 [WARPS][D_MAXH][HD] at QU (bf16
     * keeps two CTAs per SM at head_dim 128; the heads are bf16 in q, so nothing is lost) */
    static constexpr size_t PACKED_BYTES = QU + (size_t)WARPS * D_MAXH * HD * 2;
    /* after the key loop the K/V stages hold the warps' partial results */
    static constexpr size_t MERGE_O = 0;                                      /* f32 [WARPS][D_MAXH][HD] */
    static constexpr size_t MERGE_ML = MERGE_O + (size_t)WARPS * D_MAXH * HD * 4; /* float2 [WARPS][D_MAXH] */
    static_assert(MERGE_ML + (size_t)WARPS * D_MAXH * 8 <= META, "the merge fits in the K/V stages");
};

/* Issue the cp.async copies of one 16-key group (flat slots [f0, f0 + 16) of the sequence,
 * slots [j0, j0 + 16) of block b) into this warp's stage (not when !copy: the metadata
 * only), and return its metadata (nv,
 * q_delta, k_rope, kpos0): the visible keys are the prefix r < nv (slots are valid as a
 * prefix of a block and positions grow with the slot, so padding, the item's end kv1 and
 * the causal mask all cut the group at one point); key r sits at logical position kpos0 +
 * r. Keys r >= nv are not read: cp.async zero-fills them (no stale pool value, NaN
 * included, reaches P V). Lane l copies column chunk l % CH of rows l / CH + RPI j: one
 * 64-bit address per call, stepped by RPI rows (a decode CTA is issue-bound, and a copy
 * that forms its own address costs ~25 integer instructions). */
template <int HD>
__device__ __forceinline__ int4 decode_issue(const la_cuda_attn_params &p, const la_attn_block &b, int kvh,
                                             int j0, int f0, int kv1, int pos, la_bf16_t *Ks, la_bf16_t *Vs,
                                             int lane, bool copy = true) {
    constexpr int CH = HD / 8, STRIDE = HD + 8, RPI = 32 / CH; /* rows per pass of the warp */
    static_assert(32 % CH == 0 && W_KEYS % RPI == 0, "a warp pass covers whole rows");
    const int hd = p.head_dim, kpos0 = b.pos0 + j0;
    int nv = min(min(b.n_valid - j0, W_KEYS), kv1 - f0);
    nv = max(min(nv, pos - kpos0 + 1), 0);
    const int r0 = lane / CH, c = lane - r0 * CH;
    if (copy && c * 8 < hd) {
        const int64_t off = (((int64_t)b.block_id * p.n_kv_heads + kvh) * p.block_size + j0 + r0) * hd + c * 8;
        const int64_t step = (int64_t)RPI * hd;
        const la_bf16_t *k = p.k_pool + off, *v = p.v_pool + off;
        la_bf16_t *ks = Ks + r0 * STRIDE + c * 8, *vs = Vs + r0 * STRIDE + c * 8;
#pragma unroll
        for (int j = 0; j < W_KEYS / RPI; j++) {
            const bool ok = r0 + j * RPI < nv;
            la_cp_async16(ks + j * RPI * STRIDE, ok ? k + j * step : p.k_pool, ok);
            la_cp_async16(vs + j * RPI * STRIDE, ok ? v + j * step : p.v_pool, ok);
        }
    }
    return make_int4(nv, b.q_delta, nv > 0 ? b.k_rope : 0, kpos0);
}

/* The (cos, sin) pairs decode_rotate_q needs in this lane at rpos = p - q_delta:
 * cs[ks][hi] for columns i = 16 ks + 8 hi + 2 c4, i + 1 (frequency i mod half). Fetched
 * apart from the rotation so that the first group's fetch overlaps the prologue's loads. */
template <int HD>
__device__ __forceinline__ void decode_rope_fetch(float4 (&cs)[HD / 16][2], int g, int c4, int hpc, int64_t rpos,
                                                  const la_cuda_attn_params &p) {
    const int hd = p.head_dim, half = hd / 2;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const int i = ks * 16 + hi * 8 + 2 * c4;
            cs[ks][hi] = g < hpc && i < hd ? la_rope_cs2(p.rope, p.rope_len, half, rpos, i < half ? i : i - half)
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
        }
}

/* One element of the staged query heads (f32, or bf16 in the packed instance) as f32. */
__device__ __forceinline__ float decode_q_elem(float x) { return x; }
__device__ __forceinline__ float decode_q_elem(la_bf16_t x) { return la_bf2f(x); }

/* This lane's A fragments of the query tile (rows = the CTA's query heads; PTX m16n8k16:
 * reg 0 row g columns 2 c4 + {0, 1}, reg 2 the same + 8; regs 1, 3 are rows g + 8, padding,
 * left zero by the caller) rotated by cs (decode_rope_fetch) from the unrotated heads Qu. */
template <int HD, typename QT>
__device__ __forceinline__ void decode_rotate_q(uint32_t (&qf)[HD / 16][4], const QT *Qu, int g, int c4,
                                                int hpc, const float4 (&cs_all)[HD / 16][2],
                                                const la_cuda_attn_params &p) {
    const int hd = p.head_dim, half = hd / 2;
    const QT *q = Qu + g * HD;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++)
#pragma unroll
        for (int hi = 0; hi < 2; hi++) {
            const int i = ks * 16 + hi * 8 + 2 * c4; /* even; i, i + 1 on one side of half */
            float v0 = 0.f, v1 = 0.f;
            if (g < hpc && i < hd) {
                const bool lo = i < half;
                const int j = lo ? i + half : i - half;
                const float4 cs = cs_all[ks][hi];
                const float x0 = decode_q_elem(q[i]), x1 = decode_q_elem(q[i + 1]);
                const float y0 = decode_q_elem(q[j]), y1 = decode_q_elem(q[j + 1]);
                v0 = lo ? x0 * cs.x - y0 * cs.y : x0 * cs.x + y0 * cs.y;
                v1 = lo ? x1 * cs.z - y1 * cs.w : x1 * cs.z + y1 * cs.w;
            }
            qf[ks][hi * 2] = la_pack_bf16x2(v0, v1);
        }
}

/* mepic: rotate the nv visible keys of a k_rope group at kpos0 + r in this warp's stage
 * (HF rotate_half, rounded to bf16 as la_attn_rotate_keys does). Caller syncs the warp
 * before and after. */
template <int HD>
__device__ __forceinline__ void decode_rotate_keys(la_bf16_t *Ks, int nv, int kpos0, int lane,
                                                   const la_cuda_attn_params &p) {
    constexpr int STRIDE = HD + 8;
    const int half = p.head_dim / 2, pairs = half / 2;
    for (int i = lane; i < nv * pairs; i += 32) {
        const int r = i / pairs, f = (i - r * pairs) * 2;
        const float4 cs = la_rope_cs2(p.rope, p.rope_len, half, (int64_t)kpos0 + r, f);
        la_bf16_t *row = Ks + r * STRIDE;
        uint32_t *x = reinterpret_cast<uint32_t *>(row + f), *y = reinterpret_cast<uint32_t *>(row + f + half);
        la_rope_rotate_pair(*x, *y, cs, *x, *y);
    }
}

/* The in-kernel merge of a split decode item (it.merge >= 0), after this CTA wrote its
 * partial rows: the split set's last CTA to arrive merges the set's partial rows for its
 * KV-head group (la_attn_merge_row, one warp per query head) and writes the output, so the
 * step needs no attn_combine launch. Arrival: every thread fences its partial-row stores
 * to device scope, then one thread bumps the set's counter (threadFenceReduction, CUDA
 * samples); the last resets it to zero for the next launch (the next layer, a replayed
 * graph). */
__device__ __forceinline__ void decode_merge_if_last(const la_cuda_attn_params &p, const la_cuda_attn_item &it,
                                                     int grp, int head0, int64_t qstride) {
    __shared__ int last;
    const la_cuda_attn_combine_item ci = p.merge[it.merge];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t *count = p.merge_count + (int64_t)it.merge * gridDim.y + grp;
        last = atomicAdd(count, 1) == ci.n_splits - 1;
        if (last) *count = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    const int hd = p.head_dim, warp = threadIdx.x >> 5;
    for (int h = warp; h < p.heads_per_cta; h += (int)(blockDim.x >> 5))
        la_attn_merge_row(p.part_o, p.part_ml, ci.part_row0 + (int64_t)grp * ci.rows + h,
                          (int64_t)gridDim.y * ci.rows, ci.n_splits, hd,
                          p.out + (int64_t)ci.row0 * qstride + (int64_t)(head0 + h) * hd);
}

/* PACKED (la_cuda_attn_params.decode_instance PACKED: many more unsplit decode items than CTA
 * slots, e.g. a thousand requests' own tails beside a shared document): warp w of CTA x runs
 * item 4 x + w whole, its query heads staged per warp, its output written from its own
 * registers: no CTA barrier, no cross-warp merge, a quarter of the CTAs (a CTA's fixed costs
 * dominate an item of a few key groups). Otherwise the CTA's warps split one item. */
template <int HD, bool DEEP, bool PACKED>
__global__ void __launch_bounds__(decode_layout<HD, DEEP>::THREADS, DEEP ? 1 : 2)
    attn_decode_kernel(const la_cuda_attn_params p) {
    la_pdl_trigger(); /* la_pdl_wait once the copies of keys no kernel of this step writes are out */
    using L = decode_layout<HD, DEEP>;
    static_assert(!(PACKED && DEEP), "the packed instance has 4 warps");
    constexpr int W_WARPS = L::WARPS, W_THREADS = L::THREADS;
    constexpr int S = L::STAGES, STRIDE = L::STRIDE, TILE = L::TILE_ELEMS, CH = HD / 8, DT = HD / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const int mi = lane >> 3, rr = lane & 7; /* ldmatrix: which 8x8 matrix / row this lane addresses */
    const unsigned full = 0xffffffffu;
    la_bf16_t *Kw = reinterpret_cast<la_bf16_t *>(smem) + warp * L::WARP_ELEMS; /* stage st: K, then V */
    int4 *wmeta = reinterpret_cast<int4 *>(smem + L::META) + warp * S;
    float *Qu = reinterpret_cast<float *>(smem + L::QU);
    la_bf16_t *Qb = reinterpret_cast<la_bf16_t *>(smem + L::QU) + warp * D_MAXH * HD; /* PACKED */

    const int item_ix = PACKED ? (int)blockIdx.x * W_WARPS + warp : (int)blockIdx.x;
    if (PACKED && item_ix >= p.n_items) { /* the last CTA's spare warps */
        la_pdl_wait();
        return;
    }
    const la_cuda_attn_item it = p.items[item_ix];
    if (it.n_tokens == 0) { /* padding of a graph step's fixed work list */
        la_pdl_wait();
        return;
    }
    const int grp = blockIdx.y;
    const la_attn_group ag = la_attn_group_of(p, grp);
    const int kvh = ag.kvh, head0 = ag.head0;
    const la_attn_block *blocks = p.blocks + it.block0;
    const int hd = p.head_dim, hpc = p.heads_per_cta, B = p.block_size;
    const int64_t qstride = (int64_t)p.n_heads * hd;
    const int pos = p.pos[it.row0];
    const float sl2 = p.scale_log2;
    /* 1. this warp's groups: a contiguous share of the item's 16-key groups (contiguous, so
     * a lazy warp re-rotates its query once per document it crosses) */
    const int gb = it.kv0 / W_KEYS;
    const int n_item = it.kv1 > it.kv0 ? (it.kv1 - it.kv0 + W_KEYS - 1) / W_KEYS : 0;
    const int g_lo = PACKED ? gb : gb + n_item * warp / W_WARPS;
    const int n_g = PACKED ? n_item : gb + n_item * (warp + 1) / W_WARPS - g_lo;

    /* 2. issue the first S - 1 groups (their addresses need only the block list), before the
     * PDL wait where p.kv_written says no kernel of this step writes the group's block
     * (cuda_common.cuh: the keys of earlier steps are as fixed as the host's metadata); the
     * others (the new token's own block) after it. Then stage the unrotated query heads
     * (f32) and zero K/V columns past head_dim */
    if (hd < HD)
        for (int i = lane; i < S * 2 * W_KEYS * CH; i += 32) {
            const int r = i / CH, c = i - r * CH;
            if (c * 8 >= hd) *reinterpret_cast<uint4 *>(Kw + r * STRIDE + c * 8) = make_uint4(0, 0, 0, 0);
        }
    /* the next group to issue: block ib of the list, slots [jb, jb + 16) (one division) */
    int ib = g_lo * W_KEYS / B, jb = g_lo * W_KEYS - ib * B;
    int4 mt0 = make_int4(0, 0, 0, 0); /* the first group's metadata */
    int late = 0;                     /* bit s: group s waits for the PDL wait */
    int ib_late[S - 1], jb_late[S - 1];
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (s < n_g) {
            const la_attn_block b = blocks[ib];
            const bool now = p.kv_written && !((p.kv_written[b.block_id >> 5] >> (b.block_id & 31)) & 1u);
            const int4 mt = decode_issue<HD>(p, b, kvh, jb, (g_lo + s) * W_KEYS, it.kv1, pos, Kw + s * 2 * TILE,
                                             Kw + s * 2 * TILE + TILE, lane, now);
            if (!now) late |= 1 << s;
            ib_late[s] = ib, jb_late[s] = jb;
            if (lane == 0) wmeta[s] = mt;
            if (s == 0) mt0 = mt;
            jb += W_KEYS;
            if (jb == B) jb = 0, ib++;
        }
        la_cp_async_commit();
    }
    la_attn_block nb = {0, 0, 0, 0, 0}; /* block ib, loaded a group ahead of its issue */
    if (S - 1 < n_g) nb = blocks[ib];
    float4 cs0[HD / 16][2]; /* the first group's rotation, fetched while its keys are in flight */
    if (mt0.x > 0) decode_rope_fetch<HD>(cs0, g, c4, hpc, (int64_t)pos - mt0.y, p);

    /* from here on q and this step's new keys, written by the kernels before this one */
    la_pdl_wait();
    if (late) { /* one more commit group; the key loop waits for it at its first late group */
#pragma unroll
        for (int s = 0; s < S - 1; s++)
            if (late & (1 << s))
                decode_issue<HD>(p, blocks[ib_late[s]], kvh, jb_late[s], (g_lo + s) * W_KEYS, it.kv1, pos,
                                 Kw + s * 2 * TILE, Kw + s * 2 * TILE + TILE, lane);
        la_cp_async_commit();
    }
    /* the CTA's query heads (adjacent in q), 8 bf16 per thread */
    static_assert(D_MAXH * HD / 8 <= W_THREADS, "one 16-byte query load per thread");
    const int q8 = hpc * hd / 8;
    const uint4 *qsrc = reinterpret_cast<const uint4 *>(p.q + (int64_t)it.row0 * qstride + (int64_t)head0 * hd);
    if (PACKED) /* the warp's heads as they are (bf16), row h at Qb + h * HD */
        for (int i = lane; i < q8; i += 32) {
            const int h = i * 8 / hd, d = i * 8 - h * hd;
            *reinterpret_cast<uint4 *>(Qb + h * HD + d) = qsrc[i];
        }
    if (!PACKED && tid < q8) { /* Qu: [D_MAXH][HD] f32; only heads < hpc and dims < hd are read */
        const uint4 qv = qsrc[tid];
        const int h = tid * 8 / hd, d = tid * 8 - h * hd;
        const uint32_t w[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            Qu[h * HD + d + 2 * e] = __uint_as_float(w[e] << 16);
            Qu[h * HD + d + 2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
        }
    }
    if (PACKED) __syncwarp();
    else __syncthreads();

    float o[DT][4];
#pragma unroll
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    uint32_t qf[HD / 16][4];
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) qf[ks][0] = qf[ks][1] = qf[ks][2] = qf[ks][3] = 0u;
    float m_run = -INFINITY, l_run = 0.f; /* row g; l_run over this lane's keys until the end */
    bool have_q = false;
    int32_t q_delta = 0;
    if (mt0.x > 0) { /* the first group's rotation now, while its keys are in flight */
        if (PACKED) decode_rotate_q<HD>(qf, Qb, g, c4, hpc, cs0, p);
        else decode_rotate_q<HD>(qf, Qu, g, c4, hpc, cs0, p);
        q_delta = mt0.y;
        have_q = true;
    }

    /* 3. the groups: issue group t + S - 1, wait for group t, use it; no CTA barrier */
    int st = 0, st_issue = S - 1;
    for (int t = 0; t < n_g; t++) {
        if (t + S - 1 < n_g) {
            la_bf16_t *Ki = Kw + st_issue * 2 * TILE;
            const int4 mt = decode_issue<HD>(p, nb, kvh, jb, (g_lo + t + S - 1) * W_KEYS, it.kv1, pos, Ki,
                                             Ki + TILE, lane);
            if (lane == 0) wmeta[st_issue] = mt;
            jb += W_KEYS;
            if (jb == B) jb = 0, ib++;
            if (t + S < n_g) nb = blocks[ib];
        }
        la_cp_async_commit();
        /* committed so far: the first S - 1 groups, the late groups' commit if any, one
         * per iteration (S + 1 + t in all). wait<S - 1> (all but the newest S - 1
         * complete) covers tile t, except a late tile t < S - 2 (t is 0 or 1), whose
         * commit is the Sth: wait<t + 1> */
        if (t < S - 2 && ((late >> t) & 1)) {
            if (t == 0) la_cp_async_wait<1>();
            else la_cp_async_wait<2>();
        } else {
            la_cp_async_wait<S - 1>();
        }
        __syncwarp();
        const int4 mt = wmeta[st];
        la_bf16_t *Ks = Kw + st * 2 * TILE;
        const la_bf16_t *Vs = Ks + TILE;
        const int nv = mt.x;
        if (nv > 0) {
            if (mt.z) {
                decode_rotate_keys<HD>(Ks, nv, mt.w, lane, p);
                __syncwarp();
            }
            if (!have_q || mt.y != q_delta) {
                float4 cs[HD / 16][2];
                decode_rope_fetch<HD>(cs, g, c4, hpc, (int64_t)pos - mt.y, p);
                if (PACKED) decode_rotate_q<HD>(qf, Qb, g, c4, hpc, cs, p);
                else decode_rotate_q<HD>(qf, Qu, g, c4, hpc, cs, p);
                q_delta = mt.y;
                have_q = true;
            }
            /* S = Q K^T: keys 0-7 and 8-15, two independent MMA chains */
            float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
            for (int ks = 0; ks < HD / 16; ks++) {
                uint32_t b0, b1, b2, b3;
                la_ldmatrix_x4(b0, b1, b2, b3, Ks + ((mi >> 1) * 8 + rr) * STRIDE + ks * 16 + (mi & 1) * 8);
                la_mma_bf16(s[0], qf[ks], b0, b1);
                la_mma_bf16(s[1], qf[ks], b2, b3);
            }
            /* mask (keys r >= nv) and scale to log2 units; row g only (g + 8 is padding) */
            float x[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int k = (e >> 1) * 8 + 2 * c4 + (e & 1);
                x[e] = k < nv ? s[e >> 1][e & 1] * sl2 : -INFINITY;
            }
            float mx = fmaxf(fmaxf(x[0], x[1]), fmaxf(x[2], x[3]));
            mx = fmaxf(mx, __shfl_xor_sync(full, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(full, mx, 2));
            const float mn = fmaxf(m_run, mx); /* finite: key 0 is visible */
            const float a = la_exp2(m_run - mn);
#pragma unroll
            for (int e = 0; e < 4; e++) x[e] = la_exp2(x[e] - mn);
            l_run = l_run * a + (x[0] + x[1]) + (x[2] + x[3]);
            m_run = mn;
#pragma unroll
            for (int d = 0; d < DT; d++) {
                o[d][0] *= a;
                o[d][1] *= a;
            }
            /* O += P V, P from the score registers (rows g + 8 zero) */
            const uint32_t pa[4] = {la_pack_bf16x2(x[0], x[1]), 0u, la_pack_bf16x2(x[2], x[3]), 0u};
#pragma unroll
            for (int dn = 0; dn < HD / 16; dn++) {
                uint32_t b0, b1, b2, b3;
                la_ldmatrix_x4_trans(b0, b1, b2, b3, Vs + ((mi & 1) * 8 + rr) * STRIDE + dn * 16 + (mi >> 1) * 8);
                la_mma_bf16(o[2 * dn], pa, b0, b1);
                la_mma_bf16(o[2 * dn + 1], pa, b2, b3);
            }
        }
        __syncwarp(); /* the next issue overwrites this stage's metadata slot two groups on */
        st = st + 1 == S ? 0 : st + 1;
        st_issue = st_issue + 1 == S ? 0 : st_issue + 1;
    }
    la_cp_async_wait<0>();
    l_run += __shfl_xor_sync(full, l_run, 1);
    l_run += __shfl_xor_sync(full, l_run, 2);
    if constexpr (PACKED) { /* the whole item: row g's columns d * 8 + 2 c4 + {0, 1} as they are */
        if (g < hpc) {
            if (it.part_row0 < 0) {
                const float inv = l_run > 0.f ? 1.f / l_run : 0.f;
                la_bf16_t *orow = p.out + (int64_t)it.row0 * qstride + (int64_t)(head0 + g) * hd;
#pragma unroll
                for (int d = 0; d < DT; d++)
                    if (d * 8 < hd)
                        *reinterpret_cast<uint32_t *>(orow + d * 8 + 2 * c4) =
                            la_pack_bf16x2(o[d][0] * inv, o[d][1] * inv);
            } else {
                const int64_t pr = it.part_row0 + (int64_t)grp * hpc + g;
#pragma unroll
                for (int d = 0; d < DT; d++)
                    if (d * 8 < hd)
                        *reinterpret_cast<float2 *>(p.part_o + pr * hd + d * 8 + 2 * c4) = make_float2(o[d][0], o[d][1]);
                if (c4 == 0) p.part_ml[pr] = make_float2(m_run, l_run);
            }
        }
        return;
    }
    __syncthreads(); /* every warp is done with its stages: they become the merge area */

    /* 4. the warps' (m, l, O) through shared memory, merged per (head, 4 dims) */
    float *Om = reinterpret_cast<float *>(smem + L::MERGE_O);
    float2 *ML = reinterpret_cast<float2 *>(smem + L::MERGE_ML);
    if (g < hpc) {
        float *orow = Om + (warp * D_MAXH + g) * HD;
#pragma unroll
        for (int d = 0; d < DT; d++) *reinterpret_cast<float2 *>(orow + d * 8 + 2 * c4) = make_float2(o[d][0], o[d][1]);
        if (c4 == 0) ML[warp * D_MAXH + g] = make_float2(m_run, l_run);
    }
    __syncthreads();
    const int q4 = hd / 4;
    for (int i = tid; i < hpc * q4; i += W_THREADS) {
        const int h = i / q4, d = (i - h * q4) * 4;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < W_WARPS; w++) M = fmaxf(M, ML[w * D_MAXH + h].x);
        float l = 0.f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        if (M != -INFINITY)
#pragma unroll
            for (int w = 0; w < W_WARPS; w++) {
                const float2 ml = ML[w * D_MAXH + h];
                const float wt = ml.x == -INFINITY ? 0.f : la_exp2(ml.x - M);
                const float4 v = *reinterpret_cast<const float4 *>(Om + (w * D_MAXH + h) * HD + d);
                l += wt * ml.y;
                acc.x += wt * v.x;
                acc.y += wt * v.y;
                acc.z += wt * v.z;
                acc.w += wt * v.w;
            }
        if (it.part_row0 < 0) {
            const float inv = l > 0.f ? 1.f / l : 0.f;
            uint2 wv;
            wv.x = la_pack_bf16x2(acc.x * inv, acc.y * inv);
            wv.y = la_pack_bf16x2(acc.z * inv, acc.w * inv);
            *reinterpret_cast<uint2 *>(p.out + (int64_t)it.row0 * qstride + (int64_t)(head0 + h) * hd + d) = wv;
        } else {
            const int64_t pr = it.part_row0 + (int64_t)grp * hpc + h;
            *reinterpret_cast<float4 *>(p.part_o + pr * hd + d) = acc;
            if (d == 0) p.part_ml[pr] = make_float2(M, l);
        }
    }
    if (it.part_row0 >= 0 && it.merge >= 0) decode_merge_if_last(p, it, grp, head0, qstride);
}

template <int HD, bool DEEP, bool PACKED>
la_status launch_decode(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    using L = decode_layout<HD, DEEP>;
    const size_t bytes = PACKED ? L::PACKED_BYTES : L::BYTES;
    static bool attr_done = false;
    LA_TRY(la_cuda_allow_smem((const void *)attn_decode_kernel<HD, DEEP, PACKED>, bytes, &attr_done, "attn_decode",
                              err));
    const unsigned nx = PACKED ? (unsigned)((p->n_items + L::WARPS - 1) / L::WARPS) : (unsigned)p->n_items;
    dim3 grid(nx, (unsigned)(p->n_kv_heads * p->n_head_chunks));
    return la_cuda_launch(attn_decode_kernel<HD, DEEP, PACKED>, grid, L::THREADS, bytes, stream, *p, "attn_decode",
                          err);
}

template <int HD>
la_status launch_decode(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    switch (p->decode_instance) {
    case LA_CUDA_DECODE_PACKED: return launch_decode<HD, false, true>(p, stream, err);
    case LA_CUDA_DECODE_DEEP: return launch_decode<HD, true, false>(p, stream, err);
    default: return launch_decode<HD, false, false>(p, stream, err);
    }
}

template <int HD> size_t decode_smem(int32_t instance) {
    return instance == LA_CUDA_DECODE_PACKED ? decode_layout<HD, false>::PACKED_BYTES
           : instance == LA_CUDA_DECODE_DEEP ? decode_layout<HD, true>::BYTES
                                             : decode_layout<HD, false>::BYTES;
}

} /* namespace */

extern "C" size_t la_cuda_attn_decode_smem(int32_t head_dim, int32_t instance) {
    if (head_dim <= 32) return decode_smem<32>(instance);
    if (head_dim <= 64) return decode_smem<64>(instance);
    return decode_smem<128>(instance);
}

extern "C" la_status la_cuda_attn_decode(const la_cuda_attn_params *p, cudaStream_t stream,
                                         la_err *err) {
    if (p->n_items <= 0) return LA_OK;
    LA_TRY(la_cuda_attn_check(p, "attn_decode", err));
    const int hd = p->head_dim;
    if (hd <= 32) return launch_decode<32>(p, stream, err);
    if (hd <= 64) return launch_decode<64>(p, stream, err);
    return launch_decode<128>(p, stream, err);
}
