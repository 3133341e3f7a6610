/* attn_prefill on Hopper, warp-specialized (variant "v4"): 256 rows per CTA x 128-key
 * tiles in FlashAttention-3's layout, head_dim 64 or 128, sm_90a code on compute capability
 * 9.0, steps without a k_rope block. What it computes: attn_prefill.cu.
 *
 * Each item's queries are rotated once, at p - q_delta of the item's first block: plain
 * steps (full recompute, prefix caching, BlockAttention's question over its re-rotated
 * copies) have q_delta 0 everywhere, and in a lazy step the host cuts every item at the
 * blocks where q_delta changes (cuda_attn_plan.c), so an item's blocks share one q_delta
 * (one document, or the question's own blocks). mepic's keys stored unrotated (k_rope) run
 * the wgmma kernel.
 *
 * In a full prefill, what limits the wgmma kernel is not its arithmetic but the K/V it
 * streams from L2: each CTA of 128 rows reads its whole key range, so an 8K Llama-3-8B
 * prefill moves ~137 GB through L2 (bench/GPU_NOTES.md, version 31). This kernel doubles the
 * rows per CTA to 256 (64 tokens x 4 heads for Llama-3), which halves those bytes, and keeps
 * the tensor cores fed with FlashAttention-3's layout (Shah et al. 2024, "FlashAttention-3:
 * Fast and Accurate Attention with Asynchrony and Low-precision", sec. 3.1): one CTA per SM
 * of three warpgroups.
 *
 * Warpgroup 0 is the producer (40 registers per thread, setmaxnreg): its 128 threads copy
 * each 128-key K/V tile of the paged block list into a two-stage ring (cp.async, zero-filled
 * past a 16-key group's valid keys) and its first warp writes the tile's key positions. A
 * stage's arrival is an mbarrier phase (`full`: 128 cp.async arrivals as the copies land and
 * 32 ordinary ones after the positions), its release another (`empty`: one arrival per
 * consumer warp). Warpgroups 1 and 2 are the consumers (232 registers): 128 query rows each,
 * as two 64-row wgmma tiles (slabs) that share every K/V stage. Per slab and tile: S = Q K^T
 * by HD / 16 wgmma m64n128k16 (Q and K in shared memory, K-major), the wgmma kernel's online
 * softmax in registers (prefill_softmax), O += P V by eight wgmma m64nHDk16 (P in
 * registers, V MN-major). No CTA-wide barrier in the tile loop: tile t + 1's copies run
 * under tile t's MMAs, and the two consumer warpgroups drift apart, one's softmax under the
 * other's MMAs. At head_dim 64 a warpgroup also overlaps itself: both slabs' S are issued
 * at once, and each slab's softmax runs under the next MMAs in the queue (FlashAttention-3's
 * intra-warpgroup overlap; 2-4% off the 1B prefill's attention on an H100, GPU_NOTES.md).
 * Per consumer thread: O 2 x HD / 2, S 64 f32 registers (head_dim 64: 2 x 64). Shared
 * memory at head_dim 128: Q 64 KiB (the wgmma kernel's swizzled layout, 256 rows), K and V
 * 2 x 32 KiB each, ~194 KiB; at head_dim 64 (one 128-byte column half per row) half of that.
 */
#include "backend/cuda/kernels/attn_prefill_common.cuh"

namespace {

constexpr int WS_THREADS = 384;
constexpr int WS_PRODUCERS = 128; /* warpgroup 0 */
constexpr int WS_ROWS = LA_ATTN_PREFILL_ROWS_WS;
constexpr int WS_KT = 128; /* keys per tile */
constexpr int WS_GROUPS = WS_KT / 16;
constexpr int WS_CONSUMER_WARPS = 8;
constexpr int WS_PRODUCER_REGS = 40, WS_CONSUMER_REGS = 232;
static_assert(WS_ROWS == 256 && WS_CONSUMER_WARPS * 32 == WS_THREADS - WS_PRODUCERS,
              "two consumer warpgroups of two 64-row slabs");
static_assert(WS_GROUPS * 16 == WS_KT, "a tile is whole 16-key groups");
static_assert(WS_PRODUCERS * WS_PRODUCER_REGS + (WS_THREADS - WS_PRODUCERS) * WS_CONSUMER_REGS <= 65536,
              "the register file of one SM");

/* tile metadata, written by the producer's first warp: key positions (INT_MAX past a
 * group's valid keys), the tile's smallest and largest valid position (INT_MAX / INT_MIN:
 * none), whether all 128 keys are valid */
struct ws_meta {
    int32_t kpos[WS_KT];
    int32_t tmin, tmax, all_valid, pad_;
};
static_assert(sizeof(ws_meta) % 16 == 0, "ws_meta keeps 16-byte alignment");

template <int HD> struct ws_layout {
    static constexpr int NH = HD / 64;  /* 128-byte column halves of a row */
    static constexpr uint32_t Q_OFF = 0; /* [NH halves][256 rows][128 B] */
    static constexpr uint32_t Q_HALF = WS_ROWS * 128;
    static constexpr uint32_t KV_HALF = WS_KT * 128; /* one column half of a K or V stage */
    static constexpr uint32_t STAGE = NH * KV_HALF;
    static constexpr uint32_t K_OFF = NH * Q_HALF; /* [2 stages][NH halves][128 keys][128 B] */
    static constexpr uint32_t V_OFF = K_OFF + 2 * STAGE;
    static constexpr uint32_t META_OFF = V_OFF + 2 * STAGE;             /* [2] ws_meta */
    static constexpr uint32_t BAR_OFF = META_OFF + 2 * sizeof(ws_meta); /* full[2], empty[2] */
    static constexpr uint32_t END = BAR_OFF + 4 * 8;
    static constexpr size_t BYTES = END + 1024;
    static_assert(HD == 64 || HD == 128, "whole 128-byte swizzle rows");
    static_assert(Q_OFF % 1024 == 0 && K_OFF % 1024 == 0 && V_OFF % 1024 == 0 && KV_HALF % 1024 == 0 &&
                      Q_HALF % 1024 == 0,
                  "every swizzled region starts on a 1024-byte swizzle atom");
};

template <int HD>
__global__ void __launch_bounds__(WS_THREADS, 1) attn_prefill_wgmma_ws_kernel(const la_cuda_attn_params p) {
    la_pdl_trigger();
#ifdef LA_WGMMA
    using L = ws_layout<HD>;
    constexpr int DT = HD / 8; /* n8 column blocks of O */
    constexpr int NT = WS_KT / 8;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t s_raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t pad = (1024u - (s_raw & 1023u)) & 1023u;
    unsigned char *smem = smem_raw + pad;
    const uint32_t sb = s_raw + pad;
    ws_meta *meta = reinterpret_cast<ws_meta *>(smem + L::META_OFF);
    const uint32_t bar_full = sb + L::BAR_OFF, bar_empty = sb + L::BAR_OFF + 16; /* stage s: + 8 s */

    __shared__ la_cuda_attn_item it;
    __shared__ int32_t row_pos[WS_ROWS];
    __shared__ const la_bf16_t *row_q[WS_ROWS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const unsigned full = 0xffffffffu;
    if (tid == 0) {
        it = p.items[blockIdx.y];
        for (int s = 0; s < 2; s++) {
            la_mbar_init(bar_full + 8 * s, WS_PRODUCERS + 32);
            la_mbar_init(bar_empty + 8 * s, WS_CONSUMER_WARPS);
        }
        la_mbar_init_fence();
    }
    __syncthreads();
    const la_attn_group ag = la_attn_group_of(p, blockIdx.x);
    const int kvh = ag.kvh, head0 = ag.head0, B = p.block_size;
    const int n_tiles = it.kv1 > it.kv0 ? (it.kv1 - it.kv0 + WS_KT - 1) / WS_KT : 0;
    /* everything below reads q or the pool, written by the kernels before this one */
    la_pdl_wait();

    if (warp < WS_PRODUCERS / 32) {
        la_setmaxnreg_dec<WS_PRODUCER_REGS>();
        /* ---- producer: thread (k0, c) copies 16-byte chunk c (of CH) of keys k0 + RPP i, i <
         * NP (head_dim 128: RPP 8, two per 16-key group, group i / 2, key k0 + 8 (i % 2) in
         * it; 64: RPP 16, group i, key k0); key k0 + RPP i sits RPP i rows below key k0 in
         * the same swizzle column */
        constexpr int CH = HD / 8, RPP = WS_PRODUCERS / CH, NP = WS_KT / RPP;
        static_assert(WS_PRODUCERS % CH == 0 && RPP % 8 == 0 && 16 % RPP == 0, "whole 8-row swizzle groups");
        const la_attn_block *blocks = p.blocks + it.block0;
        const int c = (unsigned)tid % CH, k0 = (unsigned)tid / CH; /* shifts */
        const uint32_t dst0 = sb + (uint32_t)(c >> 3) * L::KV_HALF + la_sw128((uint32_t)k0, (uint32_t)(c & 7));
        /* 16-key group gi of tile t: its valid keys, its first key's position and pool row
         * (key slot of this KV head: elements / head_dim, below 2^31 for any pool a GPU holds) */
        auto group = [&](int t, int gi, int32_t &nvg, int32_t &gpos, int32_t &grow) {
            const int f0 = it.kv0 + t * WS_KT + gi * 16, j0 = la_slot_in_block(f0, B);
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
            int32_t nvg[WS_GROUPS], grow[WS_GROUPS];
#pragma unroll
            for (int gi = 0; gi < WS_GROUPS; gi++) {
                int32_t gpos;
                group(t, gi, nvg[gi], gpos, grow[gi]);
            }
            if (t >= 2) la_mbar_wait(bar_empty + 8 * s, ((t >> 1) - 1) & 1);
            const uint32_t dk = dst0 + L::K_OFF + s * L::STAGE, dv = dst0 + L::V_OFF + s * L::STAGE;
#pragma unroll
            for (int i = 0; i < NP; i++) {
                const int gi = i * RPP / 16, kk = k0 + (i * RPP) % 16;
                const bool ok = kk < nvg[gi];
                const int64_t off = ok ? (int64_t)(grow[gi] + kk) * HD + c * 8 : 0;
                la_cp_async16_s(dk + (uint32_t)(i * RPP * 128), p.k_pool + off, ok);
                la_cp_async16_s(dv + (uint32_t)(i * RPP * 128), p.v_pool + off, ok);
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
    la_setmaxnreg_inc<WS_CONSUMER_REGS>();

    /* ---- consumers: warp cw of 8 in warpgroup wg; its slab j holds rows
     * 128 wg + 64 j + 16 (cw % 4) .. + 15 */
    const int cw = warp - WS_PRODUCERS / 32, wg = cw >> 2, g = lane >> 2, c4 = lane & 3;
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
    /* the item's q_delta: one for all its blocks (top of this file) */
    const int32_t q_delta = it.kv1 > it.kv0 ? p.blocks[it.block0 + it.kv0 / B].q_delta : 0;
#pragma unroll
    for (int j = 0; j < 2; j++)
        rotate_q_wgmma<ROT_ROWS_FIRST, L::Q_HALF, HD>(smem + L::Q_OFF, p, row0[j], q_delta, row_pos, row_q);
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
        const ws_meta *m = meta + s;
        if (m->tmin <= it.pos_max) {
            la_fence_proxy_async(); /* the producer's copies, seen through the barrier, to wgmma */
            const uint64_t dk = la_wgmma_desc(sb + L::K_OFF + s * L::STAGE, 16, 1024);
            const uint64_t dv = la_wgmma_desc(sb + L::V_OFF + s * L::STAGE, L::KV_HALF, 1024);
            const bool all_valid = m->all_valid;
            const int32_t tmax = m->tmax;
            if constexpr (HD == 64) {
                /* both slabs' S issued at once, so each slab's softmax runs under the tensor
                 * cores' next MMAs (slab 1's Q K^T, then slab 0's P V): groups S0, S1, PV0, PV1
                 * in order, each wait leaving the newest one running (FlashAttention-3's
                 * intra-warpgroup overlap; at head_dim 128 the second S does not fit) */
                float sc[2][NT][4];
                uint32_t a[2][WS_GROUPS][4]; /* read by P V until its wait: one set per slab */
                la_wgmma_fence();
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const uint64_t dq = la_wgmma_desc(sb + L::Q_OFF + (wg * 128 + j * 64) * 128, 16, 1024);
                    qk_wgmma_issue<WS_KT, HD>(*reinterpret_cast<float(*)[4 * NT]>(&sc[j][0][0]), dq, dk, L::Q_HALF,
                                              L::KV_HALF);
                    la_wgmma_commit();
                }
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    float(&sacc)[4 * NT] = *reinterpret_cast<float(*)[4 * NT]>(&sc[j][0][0]);
                    float(&oacc)[4 * DT] = *reinterpret_cast<float(*)[4 * DT]>(&o[j][0][0]);
                    la_wgmma_wait<1>(); /* S j done; S 1 (j = 0) or P V 0 (j = 1) may run */
#pragma unroll
                    for (int k = 0; k < 4 * NT; k++) la_wgmma_fence_operand(sacc[k]);
                    prefill_scores_to_p<NT, DT>(sc[j], o[j], mr[j], lr[j], sl2, all_valid && tmax <= wmin[j], m->kpos,
                                                c4, rpos[j], a[j]);
                    /* P and O written above, then read by P V in flight: pinned both sides
                     * of the issue (CUTLASS's warpgroup_fence_operand) */
#pragma unroll
                    for (int k = 0; k < 4 * DT; k++) la_wgmma_fence_operand(oacc[k]);
#pragma unroll
                    for (int k = 0; k < 4 * WS_GROUPS; k++) la_wgmma_fence_operand((&a[j][0][0])[k]);
                    la_wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < WS_GROUPS; kk++) pv_wgmma<HD>(oacc, a[j][kk], dv + ((kk * 16 * 128) >> 4));
                    la_wgmma_commit();
#pragma unroll
                    for (int k = 0; k < 4 * DT; k++) la_wgmma_fence_operand(oacc[k]);
#pragma unroll
                    for (int k = 0; k < 4 * WS_GROUPS; k++) la_wgmma_fence_operand((&a[j][0][0])[k]);
                }
                la_wgmma_wait<0>();
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int k = 0; k < 4 * DT; k++) la_wgmma_fence_operand((&o[j][0][0])[k]);
            } else {
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const uint64_t dq = la_wgmma_desc(sb + L::Q_OFF + (wg * 128 + j * 64) * 128, 16, 1024);
                    float sc[NT][4];
                    float(&sacc)[4 * NT] = *reinterpret_cast<float(*)[4 * NT]>(&sc[0][0]);
                    float(&oacc)[4 * DT] = *reinterpret_cast<float(*)[4 * DT]>(&o[j][0][0]);
                    qk_wgmma<WS_KT, HD>(sacc, dq, dk, L::Q_HALF, L::KV_HALF);
#pragma unroll
                    for (int k = 0; k < 4 * NT; k++) la_wgmma_fence_operand(sacc[k]);
                    uint32_t a[WS_GROUPS][4];
                    prefill_scores_to_p<NT, DT>(sc, o[j], mr[j], lr[j], sl2, all_valid && tmax <= wmin[j], m->kpos, c4,
                                                rpos[j], a);
                    la_wgmma_fence();
#pragma unroll
                    for (int kk = 0; kk < WS_GROUPS; kk++) pv_wgmma<HD>(oacc, a[kk], dv + ((kk * 16 * 128) >> 4));
                    la_wgmma_commit();
                    la_wgmma_wait<0>();
#pragma unroll
                    for (int k = 0; k < 4 * DT; k++) la_wgmma_fence_operand(oacc[k]);
                }
            }
        }
        __syncwarp();
        if (lane == 0) la_mbar_arrive(bar_empty + 8 * s); /* this warp is done with stage s */
    }
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            prefill_write_row<DT, WS_ROWS>(p, it, blockIdx.x, row0[j] + h * 8 + g, h, head0, n_rows_used, c4, o[j],
                                          mr[j][h], lr[j][h]);
#else
    __trap(); /* not built for sm_90a: the host never launches this instance */
#endif
}

template <int HD>
la_status launch_prefill_wgmma_ws(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    static bool attr_done = false;
    return launch_prefill_kernel(attn_prefill_wgmma_ws_kernel<HD>, WS_THREADS, ws_layout<HD>::BYTES, &attr_done,
                                 "attn_prefill_wgmma_ws", p, stream, err);
}

} /* namespace */

/* head_dim 64 or 128 (la_cuda_prefill_kernels: the table sends no other here) */
extern "C" la_status la_cuda_attn_prefill_wgmma_ws(const la_cuda_attn_params *p, cudaStream_t stream,
                                                   la_err *err) {
    if (p->head_dim == 128) return launch_prefill_wgmma_ws<128>(p, stream, err);
    if (p->head_dim == 64) return launch_prefill_wgmma_ws<64>(p, stream, err);
    return la_err_set(err, LA_ERR_INTERNAL, "attn_prefill_wgmma_ws: head_dim %d (64 or 128 only)", p->head_dim);
}
