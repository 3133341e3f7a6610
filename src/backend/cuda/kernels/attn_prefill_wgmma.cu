/* attn_prefill on Hopper's warpgroup MMA (variant "v3"): the mma kernel's tiling on wgmma,
 * head_dim 64 or 128, sm_90a code on compute capability 9.0, any step (the one for steps with
 * rotation metadata, lazy and mepic, where the warp-specialized kernel does not run). What
 * it computes: attn_prefill.cu.
 *
 * One CTA = two warpgroups (8 warps) = 128 query rows, the mma kernel's tiling (the host
 * cuts the same tiles and split items); warpgroup m owns rows 64 m .. 64 m + 63 (one 64-row MMA
 * tile), its warp q rows 64 m + 16 q .. + 15 (that warp's accumulator slab). Per 64-key
 * tile: S = Q K^T by HD / 16 wgmma m64n64k16 (Q and K in shared memory, K-major), the online
 * softmax in registers exactly as the mma kernel's (base 2, conditional rescaling), then O += P V by
 * four wgmma m64nHDk16 (P in registers, V in shared memory MN-major): no ldmatrix, and the
 * tensor cores run a warpgroup's MMAs while the other warpgroups (two CTAs per SM) do
 * their softmax. Shared memory holds Q and both K/V stages in wgmma.cuh's 128-byte-swizzled
 * layout (Q [HD / 64 column halves][128 rows], K / V stage [HD / 64 halves][64 keys], rows of
 * 128 bytes). The block-list pipeline is the mma kernel's one tile deeper: each tile's group offsets are
 * derived once into shared memory (wgmma_meta) a tile before its copies are issued. The
 * visibility and mask rules, the partial rows and the rotation at p - q_delta are the mma kernel's, but
 * every decision that changes an MMA or the shared Q (skipping a tile, rotating Q) is taken
 * for the whole CTA; a tile whose visible groups need different rotations (one straddling
 * a document boundary) scores group by group with mma.sync from the same swizzled tiles.
 * Per thread at head_dim 128: O 64 f32, S 32, P 16 registers; 128 registers (ptxas, sm_90a:
 * a 24-byte stack, 44 bytes spilled), 2 CTAs per SM (~100 KiB of shared memory each). At
 * head_dim 64 (Llama-3.2-1B): O 32 f32, one column half, ~50 KiB of shared memory.
 */
#include "backend/cuda/kernels/attn_prefill_common.cuh"

namespace {

constexpr int WG_THREADS = 256;
constexpr int WG_ROWS = LA_ATTN_PREFILL_ROWS;
static_assert(WG_ROWS == 128, "two 64-row warpgroup tiles per CTA");

/* the tile metadata: prefill_meta, plus each group's pool offset (elements, this KV head, the
 * group's first key; chunk 0) for the copies */
struct wgmma_meta {
    prefill_meta m;
    int64_t gbase[LA_KT_GROUPS];
};
static_assert(sizeof(wgmma_meta) % 16 == 0, "wgmma_meta keeps 16-byte alignment");

template <int HD> struct wgmma_layout {
    static constexpr int NH = HD / 64;                 /* 128-byte column halves of a row */
    static constexpr uint32_t Q_OFF = 0;               /* [NH halves][128 rows][128 B] */
    static constexpr uint32_t Q_HALF = WG_ROWS * 128;
    static constexpr uint32_t KV_HALF = LA_KT * 128;   /* one column half of a K or V stage */
    static constexpr uint32_t STAGE = NH * KV_HALF;    /* one K or V stage */
    static constexpr uint32_t K_OFF = NH * Q_HALF;     /* [2 stages][NH halves][64 keys][128 B] */
    static constexpr uint32_t V_OFF = K_OFF + 2 * STAGE;
    static constexpr uint32_t META_OFF = V_OFF + 2 * STAGE; /* [4] wgmma_meta */
    static constexpr uint32_t RAW_OFF = META_OFF + 4 * sizeof(wgmma_meta);
    static constexpr uint32_t END = RAW_OFF + 2 * LA_KT_GROUPS * sizeof(la_attn_block);
    static constexpr size_t BYTES = END + 1024; /* the dynamic window aligned up to 1024 inside */
    static_assert(HD == 64 || HD == 128, "whole 128-byte swizzle rows");
    static_assert(Q_OFF % 1024 == 0 && K_OFF % 1024 == 0 && V_OFF % 1024 == 0 && KV_HALF % 1024 == 0,
                  "every swizzled region starts on a 1024-byte swizzle atom");
};

#ifdef LA_WGMMA

/* rows per batch of the later rotations: more than 2 adds spills to the 128 registers */
constexpr int ROT_ROWS_WGMMA = 2;
#endif

template <int HD>
__global__ void __launch_bounds__(WG_THREADS, 2) attn_prefill_wgmma_kernel(const la_cuda_attn_params p) {
    la_pdl_trigger(); /* la_pdl_wait below, once the prologue has read the host-written metadata */
#ifdef LA_WGMMA
    using L = wgmma_layout<HD>;
    constexpr int DT = HD / 8, KS = HD / 16, HALF = HD / 2; /* n8 column blocks of O; k-steps */
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const uint32_t s_raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
    const uint32_t pad = (1024u - (s_raw & 1023u)) & 1023u;
    unsigned char *smem = smem_raw + pad;
    const uint32_t sb = s_raw + pad; /* 1024-aligned: the swizzle atoms' base */
    wgmma_meta *meta = reinterpret_cast<wgmma_meta *>(smem + L::META_OFF);           /* [4] */
    la_attn_block *raw = reinterpret_cast<la_attn_block *>(smem + L::RAW_OFF); /* [2][groups] */

    __shared__ la_cuda_attn_item it;
    if (threadIdx.x == 0) it = p.items[blockIdx.y];
    __syncthreads();
    const int grp = blockIdx.x;
    const la_attn_group ag = la_attn_group_of(p, grp);
    const int kvh = ag.kvh, head0 = ag.head0;
    const la_attn_block *blocks = p.blocks + it.block0;
    const int hpc = p.heads_per_cta, B = p.block_size;
    const int n_rows_used = it.n_tokens * hpc;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
    const int wg = warp >> 2, row0 = wg * 64 + (warp & 3) * 16; /* this warp's slab */
    const unsigned full = 0xffffffffu;
    const int n_tiles = it.kv1 > it.kv0 ? (it.kv1 - it.kv0 + LA_KT - 1) / LA_KT : 0;

    /* The pipeline: the mma kernel's, one tile deeper so the copies find their addresses ready. At the
     * top of iteration t (one __syncthreads): raw(t + 2) has arrived and meta(t + 1) was
     * derived in iteration t - 1; then K/V(t + 1) is issued from meta(t + 1), raw(t + 3)
     * into raw slot (t + 3) & 1 (last read in iteration t - 1), meta(t + 2) derived into
     * slot (t + 2) & 3 while tile t is computed from slot t & 3. */
    auto derive_meta = [&](int t) {
        wgmma_meta *mt = meta + (t & 3);
        const la_attn_block *rb = raw + (t & 1) * LA_KT_GROUPS;
        prefill_derive_meta(it, B, rb, &mt->m, t);
        if (tid >= LA_KT && tid < LA_KT + LA_KT_GROUPS) { /* another warp: the group offsets */
            const int gi = tid - LA_KT, f0 = it.kv0 + t * LA_KT + gi * 16;
            mt->gbase[gi] = ((int64_t)rb[gi].block_id * p.n_kv_heads + kvh) * B * HD + (int64_t)la_slot_in_block(f0, B) * HD;
        }
    };
    /* K/V(t): thread (k0, c) copies 16-byte chunk c (of CH) of keys k0 + RPP n (n < 64 /
     * RPP; head_dim 128: one key per 16-key group) into the swizzled stage t & 1, from
     * meta(t)'s offsets; keys past a group's valid ones are zero-filled. A key RPP n rows
     * below k0 sits RPP n * 128 bytes further in the same swizzle column (RPP a multiple of 8) */
    constexpr int CH = HD / 8, RPP = WG_THREADS / CH;
    static_assert(WG_THREADS % CH == 0 && LA_KT % RPP == 0 && RPP % 8 == 0, "whole passes of 8-row swizzle groups");
    const int kv_c = (unsigned)tid % CH, kv_k0 = (unsigned)tid / CH; /* shifts */
    const uint32_t kv_dst = sb + L::K_OFF + (uint32_t)(kv_c >> 3) * L::KV_HALF + la_sw128((uint32_t)kv_k0, (uint32_t)(kv_c & 7));
    auto issue_kv = [&](int t) {
        const wgmma_meta *mt = meta + (t & 3);
        const uint32_t dst = kv_dst + (uint32_t)(t & 1) * L::STAGE;
#pragma unroll
        for (int n = 0; n < LA_KT / RPP; n++) {
            /* key kv_k0 + n RPP: group n RPP / 16 + kv_k0 / 16 (kv_k0 < RPP), key kv_k0 % 16 in it */
            const int gi = RPP == 16 ? n : n * (RPP / 16) + (kv_k0 >> 4), kk = RPP == 16 ? kv_k0 : kv_k0 & 15;
            const bool ok = kk < mt->m.gnv[gi];
            const int64_t off = ok ? mt->gbase[gi] + kk * HD + kv_c * 8 : 0;
            la_cp_async16_s(dst + n * RPP * 128, p.k_pool + off, ok);
            la_cp_async16_s(dst + n * RPP * 128 + (L::V_OFF - L::K_OFF), p.v_pool + off, ok);
        }
    };

    /* this thread's rows: row0 + g (h = 0) and row0 + g + 8 (h = 1) */
    __shared__ int32_t row_pos[WG_ROWS];
    __shared__ const la_bf16_t *row_q[WG_ROWS];
    int wmax = INT_MIN, wmin = INT_MAX;
#pragma unroll
    for (int h = 0; h < 2; h++) prefill_row_init(p, it, row0 + h * 8 + g, head0, n_rows_used, c4, row_pos, row_q, wmax, wmin);
    warp_minmax(wmax, wmin);

    float o[DT][4]; /* the warp's slab of O, C layout; the wgmmas see it as 4 DT floats */
#pragma unroll
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float(&oacc)[4 * DT] = *reinterpret_cast<float(*)[4 * DT]>(&o[0][0]);
    float mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.f, 0.f};
    bool have_q = false;
    int32_t q_delta = 0;
    const float sl2 = p.scale_log2;
    auto rotate = [&](int32_t delta, bool first) { /* every warp its rows, then visible to wgmma */
        if (first) rotate_q_wgmma<ROT_ROWS_FIRST, L::Q_HALF, HD>(smem + L::Q_OFF, p, row0, delta, row_pos, row_q);
        else rotate_q_wgmma<ROT_ROWS_WGMMA, L::Q_HALF, HD>(smem + L::Q_OFF, p, row0, delta, row_pos, row_q);
        la_fence_proxy_async();
        __syncthreads();
        q_delta = delta;
        have_q = true;
    };
    /* descriptors: this warpgroup's Q tile; a k-step or stage adds its byte offset / 16
     * to the start address field (bits 0-13: no carry below 256 KiB) */
    const uint64_t dq = la_wgmma_desc(sb + L::Q_OFF + wg * 64 * 128, 16, 1024);

    /* prologue: raw(0), raw(1); meta(0), meta(1); then raw(2) and K/V(0) */
    prefill_issue_raw(p, it, blocks, n_tiles, raw, 0);
    prefill_issue_raw(p, it, blocks, n_tiles, raw, 1);
    la_cp_async_commit();
    la_cp_async_wait<0>();
    __syncthreads();
    derive_meta(0);
    derive_meta(1);
    __syncthreads(); /* meta(0), meta(1); raw slot 0 read */
    prefill_issue_raw(p, it, blocks, n_tiles, raw, 2);
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
        prefill_issue_raw(p, it, blocks, n_tiles, raw, t + 3);
        la_cp_async_commit();
        if (t + 2 < n_tiles) derive_meta(t + 2);

        const prefill_meta *m = &meta[t & 3].m;
        const uint32_t kst = sb + L::K_OFF + (uint32_t)(t & 1) * L::STAGE;
        const uint32_t vst = sb + L::V_OFF + (uint32_t)(t & 1) * L::STAGE;
        const int4 gmin4 = *reinterpret_cast<const int4 *>(m->gmin);
        const int32_t gmin[4] = {gmin4.x, gmin4.y, gmin4.z, gmin4.w};
        const int32_t tmin = min(min(gmin[0], gmin[1]), min(gmin[2], gmin[3]));
        if (tmin > it.pos_max) continue;
        {
            const int4 kr = *reinterpret_cast<const int4 *>(m->gkrope);
            if (kr.x | kr.y | kr.z | kr.w) { /* mepic: rotate the keys in place, swizzled */
                unsigned char *Ks = smem + L::K_OFF + (t & 1) * L::STAGE;
                for (int i = tid; i < LA_KT * HALF; i += WG_THREADS) {
                    const int k = (unsigned)i / HALF, f = (unsigned)i % HALF; /* shifts */
                    if (!m->gkrope[k >> 4] || m->kpos[k] == INT_MAX) continue;
                    const float2 cs = la_rope_cs(p.rope, p.rope_len, HALF, m->kpos[k], f);
                    la_bf16_t *xp = reinterpret_cast<la_bf16_t *>(Ks + sw_elem(L::KV_HALF, k, f));
                    la_bf16_t *yp = reinterpret_cast<la_bf16_t *>(Ks + sw_elem(L::KV_HALF, k, HALF + f));
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
            qk_wgmma<LA_KT, HD>(sacc, dq, dk, L::Q_HALF, L::KV_HALF);
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
                for (int ks = 0; ks < KS; ks++) {
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
        for (int kk = 0; kk < LA_KT_GROUPS; kk++) pv_wgmma<HD>(oacc, a[kk], dv + ((kk * 16 * 128) >> 4));
        la_wgmma_commit();
        /* waited here, not under the next tile's S: ptxas serialises every wgmma of the
         * kernel when O's MMAs stay in flight across the tile loop */
        la_wgmma_wait<0>();
    }
    la_wgmma_wait<0>();
    la_cp_async_wait<0>();
#pragma unroll
    for (int j = 0; j < 4 * DT; j++) la_wgmma_fence_operand(oacc[j]);

    /* write: as the mma kernel's, rows row0 + 8 h + g */
#pragma unroll
    for (int h = 0; h < 2; h++)
        prefill_write_row<DT>(p, it, grp, row0 + h * 8 + g, h, head0, n_rows_used, c4, o, mr[h], lr[h]);
#else
    __trap(); /* not built for sm_90a: the host never launches this instance */
#endif
}

template <int HD>
la_status launch_prefill_wgmma(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    static bool attr_done = false;
    return launch_prefill_kernel(attn_prefill_wgmma_kernel<HD>, WG_THREADS, wgmma_layout<HD>::BYTES, &attr_done,
                                 "attn_prefill_wgmma", p, stream, err);
}

} /* namespace */

/* head_dim 64 or 128 (la_cuda_prefill_kernels: the table sends no other here) */
extern "C" la_status la_cuda_attn_prefill_wgmma(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    if (p->head_dim == 128) return launch_prefill_wgmma<128>(p, stream, err);
    if (p->head_dim == 64) return launch_prefill_wgmma<64>(p, stream, err);
    return la_err_set(err, LA_ERR_INTERNAL, "attn_prefill_wgmma: head_dim %d (64 or 128 only)", p->head_dim);
}
