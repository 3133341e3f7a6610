/* attn_prefill on Hopper, warp-specialized (variant "v4"): 256 rows per CTA (head_dim 64:
 * 192) x 128-key tiles in FlashAttention-3's layout, head_dim 64 or 128, sm_90a code on
 * compute capability 9.0, steps without a k_rope block. What it computes: attn_prefill.cu.
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
 * Fast and Accurate Attention with Asynchrony and Low-precision", sec. 3.1): one CTA per SM,
 * a producer warpgroup and two or three consumer warpgroups (ws_config).
 *
 * Warpgroup 0 is the producer (setmaxnreg down to 40 registers, head_dim 64: 32): its 128
 * threads copy each 128-key K/V tile of the paged block list into a ring of stages
 * (cp.async, zero-filled past a 16-key group's valid keys) and its first warp writes the
 * tile's key positions. A stage's arrival is an mbarrier phase (`full`: 128 cp.async
 * arrivals as the copies land and 32 ordinary ones after the positions), its release
 * another (`empty`: one arrival per consumer warp). The consumers (232 registers; head_dim
 * 64: 160) hold 64-row wgmma tiles (slabs) of the CTA's rows. Per slab and tile: S = Q K^T
 * by HD / 16 wgmma m64n128k16 (Q and K in shared memory, K-major), the wgmma kernel's online
 * softmax in registers (prefill_softmax), O += P V by eight wgmma m64nHDk16 (P in
 * registers, V MN-major). No CTA-wide barrier in the tile loop: later tiles' copies run
 * under this tile's MMAs, and the consumer warpgroups drift apart, one's softmax under
 * another's MMAs.
 *   head_dim 128: two consumer warpgroups of two slabs that share every stage, a two-stage
 *     ring; per thread O 2 x 64 and S 64 f32 registers. Shared memory: Q 64 KiB (the wgmma
 *     kernel's swizzled layout, 256 rows), K and V 2 x 32 KiB each, ~194 KiB.
 *   head_dim 64: three consumer warpgroups of one slab, a four-stage ring, and each
 *     warpgroup overlaps itself across tiles (FlashAttention-3's intra-warpgroup overlap):
 *     tile t's S is issued before tile t - 1's P V and t's softmax runs under it. Per thread
 *     O 32, S 64 f32 and P 32 registers. Shared memory: Q 24 KiB, K and V 4 x 16 KiB each,
 *     ~155 KiB. (Two warpgroups of two slabs before: two consumer warps per scheduler left
 *     the softmax's dependency latency exposed; bench/GPU_NOTES.md, "ncu's source view of
 *     v4 at head_dim 64".)
 */
#include "backend/cuda/kernels/attn_prefill_common.cuh"

namespace {

constexpr int WS_PRODUCERS = 128; /* warpgroup 0 */
constexpr int WS_KT = 128;        /* keys per tile */
constexpr int WS_GROUPS = WS_KT / 16;
static_assert(WS_GROUPS * 16 == WS_KT, "a tile is whole 16-key groups");

/* The CTA's shape per head_dim (top of this file). ROWS is what the host cuts tiles by:
 * la_cuda_prefill_rows(LA_CUDA_PREFILL_WGMMA_WS, HD), cuda_kernels.h. */
template <int HD> struct ws_config {
    static constexpr int CWG = HD == 64 ? 3 : 2;   /* consumer warpgroups */
    static constexpr int SLABS = HD == 64 ? 1 : 2; /* 64-row slabs per consumer warpgroup */
    static constexpr int ROWS = CWG * SLABS * 64;
    static constexpr int STAGES = HD == 64 ? 4 : 2;
    static constexpr int THREADS = WS_PRODUCERS + CWG * 128;
    static constexpr int PRODUCER_REGS = HD == 64 ? 32 : 40, CONSUMER_REGS = HD == 64 ? 160 : 232;
    static_assert(WS_PRODUCERS * PRODUCER_REGS + CWG * 128 * CONSUMER_REGS <= 65536, "the register file of one SM");
    static_assert(ROWS == (HD == 64 ? LA_ATTN_PREFILL_ROWS_WS64 : LA_ATTN_PREFILL_ROWS_WS), "the host's rows per CTA");
};

/* tile metadata, written by the producer's first warp: key positions (INT_MAX past a
 * group's valid keys), the tile's smallest and largest valid position (INT_MAX / INT_MIN:
 * none), whether all 128 keys are valid */
struct ws_meta {
    int32_t kpos[WS_KT];
    int32_t tmin, tmax, all_valid, pad_;
};
static_assert(sizeof(ws_meta) % 16 == 0, "ws_meta keeps 16-byte alignment");

template <int HD> struct ws_layout {
    using C = ws_config<HD>;
    static constexpr int NH = HD / 64;  /* 128-byte column halves of a row */
    static constexpr uint32_t Q_OFF = 0; /* [NH halves][ROWS rows][128 B] */
    static constexpr uint32_t Q_HALF = C::ROWS * 128;
    static constexpr uint32_t KV_HALF = WS_KT * 128; /* one column half of a K or V stage */
    static constexpr uint32_t STAGE = NH * KV_HALF;
    static constexpr uint32_t K_OFF = NH * Q_HALF; /* [STAGES][NH halves][128 keys][128 B] */
    static constexpr uint32_t V_OFF = K_OFF + C::STAGES * STAGE;
    static constexpr uint32_t META_OFF = V_OFF + C::STAGES * STAGE;             /* [STAGES] ws_meta */
    static constexpr uint32_t BAR_OFF = META_OFF + C::STAGES * sizeof(ws_meta); /* full[STAGES], empty[STAGES] */
    static constexpr uint32_t END = BAR_OFF + 2 * C::STAGES * 8;
    static constexpr size_t BYTES = END + 1024;
    static_assert(HD == 64 || HD == 128, "whole 128-byte swizzle rows");
    static_assert(Q_OFF % 1024 == 0 && K_OFF % 1024 == 0 && V_OFF % 1024 == 0 && KV_HALF % 1024 == 0 &&
                      Q_HALF % 1024 == 0,
                  "every swizzled region starts on a 1024-byte swizzle atom");
};

template <int HD>
__global__ void __launch_bounds__(ws_config<HD>::THREADS, 1) attn_prefill_wgmma_ws_kernel(const la_cuda_attn_params p) {
    la_pdl_trigger();
#ifdef LA_WGMMA
    using L = ws_layout<HD>;
    using C = ws_config<HD>;
    constexpr int ST = C::STAGES, SLABS = C::SLABS;
    constexpr int DT = HD / 8; /* n8 column blocks of O */
    constexpr int NT = WS_KT / 8;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t s_raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t pad = (1024u - (s_raw & 1023u)) & 1023u;
    unsigned char *smem = smem_raw + pad;
    const uint32_t sb = s_raw + pad;
    ws_meta *meta = reinterpret_cast<ws_meta *>(smem + L::META_OFF);
    const uint32_t bar_full = sb + L::BAR_OFF, bar_empty = sb + L::BAR_OFF + 8 * ST; /* stage s: + 8 s */

    __shared__ la_cuda_attn_item it;
    __shared__ int32_t row_pos[C::ROWS];
    __shared__ const la_bf16_t *row_q[C::ROWS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const unsigned full = 0xffffffffu;
    if (tid == 0) {
        it = p.items[blockIdx.y];
        for (int s = 0; s < ST; s++) {
            la_mbar_init(bar_full + 8 * s, WS_PRODUCERS + 32);
            la_mbar_init(bar_empty + 8 * s, C::CWG * 4); /* its consumer warps */
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
        la_setmaxnreg_dec<C::PRODUCER_REGS>();
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
         * (key slot of this KV head: elements / head_dim, below 2^31 for any pool a GPU holds).
         * Lane gi < WS_GROUPS of each producer warp computes group gi of a tile and the warp
         * shares the groups by shuffles: one block-entry load and index computation per group
         * and warp, not per thread (ncu: the producer's per-thread copies of it were most of
         * its instructions, and the consumers waited on it; GPU_NOTES.md) */
        auto group = [&](int t, int gi, int32_t &nvg, int32_t &gpos, int32_t &grow) {
            const int f0 = it.kv0 + t * WS_KT + gi * 16, j0 = la_slot_in_block(f0, B);
            const bool in = f0 < it.kv1;
            const la_attn_block *b = blocks + (in ? la_block_of(f0, B) : 0);
            nvg = in ? max(0, min(16, min(b->n_valid - j0, it.kv1 - f0))) : 0;
            gpos = b->pos0 + j0;
            grow = (b->block_id * p.n_kv_heads + kvh) * B + j0;
        };
        for (int t = 0; t < n_tiles; t++) {
            const int s = t % ST;
            /* the tile's block entries are loaded before the wait for its stage, so the
             * wait hides their latency */
            int32_t my_nvg = 0, my_gpos = 0, my_grow = 0;
            if (lane < WS_GROUPS) group(t, lane, my_nvg, my_gpos, my_grow);
            if (t >= ST) la_mbar_wait(bar_empty + 8 * s, (t / ST - 1) & 1);
            int32_t nvg[WS_GROUPS], grow[WS_GROUPS];
#pragma unroll
            for (int gi = 0; gi < WS_GROUPS; gi++) {
                nvg[gi] = __shfl_sync(full, my_nvg, gi);
                grow[gi] = __shfl_sync(full, my_grow, gi);
            }
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
                const int32_t nvg = __shfl_sync(full, my_nvg, lane >> 2), gpos = __shfl_sync(full, my_gpos, lane >> 2);
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
    la_setmaxnreg_inc<C::CONSUMER_REGS>();

    /* ---- consumers: warp cw of 4 CWG in warpgroup wg; its slab j holds rows
     * 64 (SLABS wg + j) + 16 (cw % 4) .. + 15 */
    const int cw = warp - WS_PRODUCERS / 32, wg = cw >> 2, g = lane >> 2, c4 = lane & 3;
    const int hpc = p.heads_per_cta, n_rows_used = it.n_tokens * hpc;
    int row0[SLABS], wmin[SLABS];
#pragma unroll
    for (int j = 0; j < SLABS; j++) {
        row0[j] = (wg * SLABS + j) * 64 + (cw & 3) * 16;
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
    for (int j = 0; j < SLABS; j++)
        rotate_q_wgmma<ROT_ROWS_FIRST, L::Q_HALF, HD>(smem + L::Q_OFF, p, row0[j], q_delta, row_pos, row_q);
    la_fence_proxy_async();
    la_bar_sync(1 + wg, 128); /* the warpgroup's rows of Q written */
    int32_t rpos[SLABS][2];
#pragma unroll
    for (int j = 0; j < SLABS; j++) rpos[j][0] = row_pos[row0[j] + g], rpos[j][1] = row_pos[row0[j] + g + 8];

    float o[SLABS][DT][4];
#pragma unroll
    for (int j = 0; j < SLABS; j++)
#pragma unroll
        for (int d = 0; d < DT; d++) o[j][d][0] = o[j][d][1] = o[j][d][2] = o[j][d][3] = 0.f;
    float mr[SLABS][2], lr[SLABS][2];
#pragma unroll
    for (int j = 0; j < SLABS; j++) mr[j][0] = mr[j][1] = -INFINITY, lr[j][0] = lr[j][1] = 0.f;
    const float sl2 = p.scale_log2;
    /* this warp is done with stage s */
    auto release = [&](int s) {
        __syncwarp();
        if (lane == 0) la_mbar_arrive(bar_empty + 8 * s);
    };

    if (SLABS == 1 && wg * 64 >= n_rows_used) {
        /* a warpgroup whose rows are all past the item's (its last CTA, a short question)
         * multiplies nothing: it only takes its turn in each stage's release */
        for (int t = 0; t < n_tiles; t++) {
            la_mbar_wait(bar_full + 8 * (t % ST), (t / ST) & 1);
            release(t % ST);
        }
    } else if constexpr (SLABS == 1) {
        /* One slab, FlashAttention-3's intra-warpgroup overlap across tiles: tile t's S is
         * issued before tile t - 1's P V, and t's mask and softmax run while that P V is in
         * the tensor cores; O is rescaled and P(t) written only after it. So a warpgroup
         * holds stages t - 1 and t at once (four stages keep the producer ahead). Every tile
         * is multiplied: one past all of the slab's rows is masked whole (p = 0), which keeps
         * the wgmma groups the same on every path (ptxas serializes them otherwise). */
        float sc[NT][4];
        float(&sacc)[4 * NT] = *reinterpret_cast<float(*)[4 * NT]>(&sc[0][0]);
        float(&oacc)[4 * DT] = *reinterpret_cast<float(*)[4 * DT]>(&o[0][0][0]);
        uint32_t a[WS_GROUPS][4]; /* P of tile t - 1, read by its P V until that is waited for */
        const uint64_t dq = la_wgmma_desc(sb + L::Q_OFF + wg * 64 * 128, 16, 1024);
        /* S(t) to P(t) in place in sc: the mask (unless the tile is all valid and below every
         * row), the online softmax; alpha: O's factor */
        auto softmax = [&](const ws_meta *m, float (&alpha)[2]) {
#pragma unroll
            for (int k = 0; k < 4 * NT; k++) la_wgmma_fence_operand(sacc[k]);
            if (!(m->all_valid && m->tmax <= wmin[0])) prefill_mask<NT>(sc, m->kpos, c4, rpos[0]);
            prefill_softmax<NT>(sc, mr[0], lr[0], sl2, alpha);
        };
        /* O and P pinned on either side of a P V in flight (CUTLASS's warpgroup_fence_operand) */
        auto pin_pv = [&]() {
#pragma unroll
            for (int k = 0; k < 4 * DT; k++) la_wgmma_fence_operand(oacc[k]);
#pragma unroll
            for (int k = 0; k < 4 * WS_GROUPS; k++) la_wgmma_fence_operand((&a[0][0])[k]);
        };
        /* the V descriptor of stage ps */
        auto v_desc = [&](int ps) { return la_wgmma_desc(sb + L::V_OFF + ps * L::STAGE, L::KV_HALF, 1024); };
        /* O += P V with V at descriptor dv, issued and committed */
        auto issue_pv = [&](uint64_t dv) {
#pragma unroll
            for (int kk = 0; kk < WS_GROUPS; kk++) pv_wgmma<HD>(oacc, a[kk], dv + ((kk * 16 * 128) >> 4));
            la_wgmma_commit();
        };
        if (n_tiles > 0) {
            la_mbar_wait(bar_full, 0);
            la_fence_proxy_async(); /* the producer's copies, seen through the barrier, to wgmma */
            la_wgmma_fence();
            qk_wgmma_issue<WS_KT, HD>(sacc, dq, la_wgmma_desc(sb + L::K_OFF, 16, 1024), L::Q_HALF, L::KV_HALF);
            la_wgmma_commit();
            la_wgmma_wait<0>();
            float alpha[2];
            softmax(meta, alpha); /* O is zero: no rescale */
#pragma unroll
            for (int kk = 0; kk < WS_GROUPS; kk++) prefill_p_frag<NT>(sc, kk, a[kk]);
        }
        for (int t = 1; t < n_tiles; t++) {
            const int s = t % ST, ps = (t - 1) % ST;
            la_mbar_wait(bar_full + 8 * s, (t / ST) & 1);
            la_fence_proxy_async();
            pin_pv();
            la_wgmma_fence();
            qk_wgmma_issue<WS_KT, HD>(sacc, dq, la_wgmma_desc(sb + L::K_OFF + s * L::STAGE, 16, 1024), L::Q_HALF,
                                      L::KV_HALF);
            la_wgmma_commit();
            issue_pv(v_desc(ps));
            la_wgmma_wait<1>(); /* S(t) done; P V(t - 1) may run */
            float alpha[2];
            softmax(meta + s, alpha);
            la_wgmma_wait<0>();
            pin_pv();
            release(ps);
            if (__any_sync(full, alpha[0] != 1.f || alpha[1] != 1.f)) prefill_rescale<DT>(o[0], alpha);
#pragma unroll
            for (int kk = 0; kk < WS_GROUPS; kk++) prefill_p_frag<NT>(sc, kk, a[kk]);
        }
        if (n_tiles > 0) {
            const int ps = (n_tiles - 1) % ST;
            const uint64_t dv = v_desc(ps);
            pin_pv();
            la_wgmma_fence();
            issue_pv(dv);
            la_wgmma_wait<0>();
#pragma unroll
            for (int k = 0; k < 4 * DT; k++) la_wgmma_fence_operand(oacc[k]);
            release(ps);
        }
    } else {
        for (int t = 0; t < n_tiles; t++) {
            const int s = t % ST;
            la_mbar_wait(bar_full + 8 * s, (t / ST) & 1);
            const ws_meta *m = meta + s;
            if (m->tmin <= it.pos_max) {
                la_fence_proxy_async(); /* the producer's copies, seen through the barrier, to wgmma */
                const uint64_t dk = la_wgmma_desc(sb + L::K_OFF + s * L::STAGE, 16, 1024);
                const uint64_t dv = la_wgmma_desc(sb + L::V_OFF + s * L::STAGE, L::KV_HALF, 1024);
                const bool all_valid = m->all_valid;
                const int32_t tmax = m->tmax;
#pragma unroll
                for (int j = 0; j < SLABS; j++) {
                    const uint64_t dq = la_wgmma_desc(sb + L::Q_OFF + (wg * SLABS + j) * 64 * 128, 16, 1024);
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
            release(s);
        }
    }
#pragma unroll
    for (int j = 0; j < SLABS; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            prefill_write_row<DT, C::ROWS>(p, it, blockIdx.x, row0[j] + h * 8 + g, h, head0, n_rows_used, c4, o[j],
                                           mr[j][h], lr[j][h]);
#else
    __trap(); /* not built for sm_90a: the host never launches this instance */
#endif
}

template <int HD>
la_status launch_prefill_wgmma_ws(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    static bool attr_done = false;
    return launch_prefill_kernel(attn_prefill_wgmma_ws_kernel<HD>, ws_config<HD>::THREADS, ws_layout<HD>::BYTES,
                                 &attr_done, "attn_prefill_wgmma_ws", p, stream, err);
}

} /* namespace */

/* head_dim 64 or 128 (la_cuda_prefill_kernels: the table sends no other here) */
extern "C" la_status la_cuda_attn_prefill_wgmma_ws(const la_cuda_attn_params *p, cudaStream_t stream,
                                                   la_err *err) {
    if (p->head_dim == 128) return launch_prefill_wgmma_ws<128>(p, stream, err);
    if (p->head_dim == 64) return launch_prefill_wgmma_ws<64>(p, stream, err);
    return la_err_set(err, LA_ERR_INTERNAL, "attn_prefill_wgmma_ws: head_dim %d (64 or 128 only)", p->head_dim);
}
