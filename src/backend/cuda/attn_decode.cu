/* Paged attention for decode: one new token per sequence against its whole KV block list,
 * split over the KV length so that even one sequence fills the GPU (flash-decoding), with
 * the per-block rotation metadata of backend/backend.h applied inside.
 *
 * Formula: as attn_prefill.cu (q rotated at p - q_delta per block, keys of k_rope blocks
 * rotated at pos0 + j on load, padding and causal masks, scale 1/sqrt(head_dim), softmax
 * over the visible slots); here in f32 on the CUDA cores: a decode step reads every
 * cached key once for heads_per_cta query heads, 2 x heads_per_cta FLOPs per K/V byte,
 * far below the tensor-core ridge, so the kernel is bound by device memory bandwidth.
 *
 * Shapes: q, out [n_tokens, n_heads * head_dim] bf16 (rows of decode items only); the
 * layer's K/V slabs [n_blocks][n_kv_heads][block_size][head_dim] bf16; partial rows f32
 * [rows][head_dim] plus (m, l).
 *
 * Grid: x = decode item (one token of one sequence and a range of its key slots), y = KV
 * head x head chunk; 256 threads (8 warps: a decode CTA waits on memory, more warps hide
 * more of it). K/V tiles of 64 keys are double-buffered into shared
 * memory with cp.async; per tile: (1) rotate the query for each 16-key group whose
 * q_delta differs from the last (lazy: once per document), (2) scores for every (head,
 * key) pair, one thread each, (3) online-softmax update per head by one warp, (4) P V
 * with thread (head, 4 dims) accumulating over half of the tile's 64 keys (the two halves
 * are summed once at the end). The unnormalised
 * output and (m, l) go to the partial rows when the item is one of several splits.
 *
 * Bytes per call: 4 x n_kv_visible x n_kv_heads x head_dim per sequence (K and V, bf16)
 * plus q/out; FLOPs: 4 x n_kv_visible x n_heads x head_dim per sequence.
 */
#include "backend/cuda/attn_tile.cuh"

namespace {

constexpr int D_THREADS = 256;
constexpr int D_MAXH = LA_ATTN_MAX_HEADS_PER_CTA;

template <int HD> struct decode_layout {
    static constexpr int STRIDE = HD + 8;
    static constexpr int KV_ELEMS = LA_KT * STRIDE; /* one of K / V, one stage */
    /* byte offsets */
    static constexpr size_t META = (size_t)4 * KV_ELEMS * 2;
    static constexpr size_t QU = META + 2 * sizeof(la_tile_meta);        /* [D_MAXH][HD] f32 */
    static constexpr size_t QR = QU + (size_t)D_MAXH * HD * 4;           /* [groups][D_MAXH][HD] f32 */
    static constexpr size_t S = QR + (size_t)LA_KT_GROUPS * D_MAXH * HD * 4; /* [D_MAXH][KT] f32 */
    static constexpr size_t RUN = S + (size_t)D_MAXH * LA_KT * 4;         /* m, l, alpha [D_MAXH] */
    static constexpr size_t BYTES = RUN + 3 * D_MAXH * 4;
};

template <int HD>
__global__ void __launch_bounds__(D_THREADS, 2) attn_decode_kernel(const la_cuda_attn_params p) {
    using L = decode_layout<HD>;
    constexpr int STRIDE = L::STRIDE;
    constexpr int TPH = HD / 4; /* threads per head in P V (4 dims each) */
    extern __shared__ __align__(16) unsigned char smem[];
    la_bf16_t *Kst = reinterpret_cast<la_bf16_t *>(smem);
    la_bf16_t *Vst = Kst + 2 * L::KV_ELEMS;
    la_tile_meta *meta = reinterpret_cast<la_tile_meta *>(smem + L::META);
    float *Qu = reinterpret_cast<float *>(smem + L::QU);
    float *Qr = reinterpret_cast<float *>(smem + L::QR);
    float *S = reinterpret_cast<float *>(smem + L::S);
    float *m_run = reinterpret_cast<float *>(smem + L::RUN);
    float *l_run = m_run + D_MAXH;
    float *alpha = l_run + D_MAXH;

    const la_cuda_attn_item it = p.items[blockIdx.x];
    const int grp = blockIdx.y, kvh = grp / p.n_head_chunks, chunk = grp - kvh * p.n_head_chunks;
    const la_batch_seq sq = p.seqs[it.seq_id];
    const la_attn_block *blocks = p.blocks + sq.block0;
    const int hd = p.head_dim, half = hd / 2, hpc = p.heads_per_cta;
    const int head0 = kvh * (p.n_heads / p.n_kv_heads) + chunk * hpc;
    const int64_t qstride = (int64_t)p.n_heads * hd;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const unsigned full = 0xffffffffu;
    const int pos = p.pos[it.row0];
    const float sl2 = p.scale_log2;

    /* 1. unrotated query heads (f32), zeroed rotated copies, running stats */
    const la_bf16_t *qrow = p.q + (int64_t)it.row0 * qstride + (int64_t)head0 * hd;
    for (int i = tid; i < D_MAXH * HD; i += D_THREADS) {
        const int h = i / HD, d = i - h * HD;
        Qu[i] = (h < hpc && d < hd) ? la_bf2f(qrow[h * hd + d]) : 0.f;
    }
    for (int i = tid; i < LA_KT_GROUPS * D_MAXH * HD; i += D_THREADS) Qr[i] = 0.f;
    if (hd < HD) /* K/V columns past head_dim are never loaded: keep them zero */
        for (int i = tid; i < 4 * LA_KT * (HD / 8); i += D_THREADS) {
            const int r = i / (HD / 8), c = i - r * (HD / 8);
            if (c * 8 >= hd) *reinterpret_cast<uint4 *>(Kst + r * STRIDE + c * 8) = make_uint4(0, 0, 0, 0);
        }
    if (tid < D_MAXH) {
        m_run[tid] = -INFINITY;
        l_run[tid] = 0.f;
        alpha[tid] = 1.f;
    }
    /* P V: item = (head, 4 dims); when the items fill at most half the threads, the two
     * halves take one half of each tile's keys and are summed at the end */
    const int n_pv = hpc * TPH, ksplit = n_pv <= D_THREADS / 2 ? 2 : 1;
    const int item = ksplit == 2 ? tid % (D_THREADS / 2) : tid, khalf = ksplit == 2 ? tid / (D_THREADS / 2) : 0;
    const bool pv = item < n_pv;
    const int ph = pv ? item / TPH : 0, dq = (item % TPH) * 4;
    const int k_begin = khalf * (LA_KT / ksplit), k_end = k_begin + LA_KT / ksplit;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    int32_t qd[LA_KT_GROUPS];
    bool qok[LA_KT_GROUPS];
#pragma unroll
    for (int gi = 0; gi < LA_KT_GROUPS; gi++) qd[gi] = 0, qok[gi] = false;

    /* 2. key tiles, double-buffered */
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
        if (la_tile_min_pos(m) > pos) {
            __syncthreads();
            continue;
        }
        if (la_tile_any_krope(m)) {
            la_attn_rotate_keys<HD>(p, Ks, m);
            __syncthreads();
        }
        /* (1) the query, rotated at pos - q_delta, for groups whose q_delta changed */
        unsigned redo = 0;
#pragma unroll
        for (int gi = 0; gi < LA_KT_GROUPS; gi++)
            if (m->gmin[gi] != INT_MAX && (!qok[gi] || m->gdelta[gi] != qd[gi])) redo |= 1u << gi;
        if (redo) {
            for (int i = tid; i < LA_KT_GROUPS * hpc * half; i += D_THREADS) {
                const int gi = i / (hpc * half), rem = i - gi * hpc * half, h = rem / half, f = rem - h * half;
                if (!((redo >> gi) & 1u)) continue;
                const float2 cs = la_rope_cs(p.rope, p.rope_len, half, (int64_t)pos - m->gdelta[gi], f);
                const float x = Qu[h * HD + f], y = Qu[h * HD + f + half];
                float *qr = Qr + (gi * D_MAXH + h) * HD;
                qr[f] = x * cs.x - y * cs.y;
                qr[f + half] = y * cs.x + x * cs.y;
            }
#pragma unroll
            for (int gi = 0; gi < LA_KT_GROUPS; gi++)
                if ((redo >> gi) & 1u) qd[gi] = m->gdelta[gi], qok[gi] = true;
            __syncthreads();
        }
        /* (2) scores, masked, in log2 units */
        for (int pi = tid; pi < hpc * LA_KT; pi += D_THREADS) {
            const int h = pi / LA_KT, k = pi - h * LA_KT;
            float sc = -INFINITY;
            if (m->kpos[k] <= pos) {
                const float *qr = Qr + ((k >> 4) * D_MAXH + h) * HD;
                const la_bf16_t *kr = Ks + k * STRIDE;
                float a = 0.f;
#pragma unroll
                for (int d = 0; d < HD; d += 8) {
                    const uint4 kv = *reinterpret_cast<const uint4 *>(kr + d);
                    const float4 q0 = *reinterpret_cast<const float4 *>(qr + d);
                    const float4 q1 = *reinterpret_cast<const float4 *>(qr + d + 4);
                    a += q0.x * __uint_as_float(kv.x << 16) + q0.y * __uint_as_float(kv.x & 0xffff0000u);
                    a += q0.z * __uint_as_float(kv.y << 16) + q0.w * __uint_as_float(kv.y & 0xffff0000u);
                    a += q1.x * __uint_as_float(kv.z << 16) + q1.y * __uint_as_float(kv.z & 0xffff0000u);
                    a += q1.z * __uint_as_float(kv.w << 16) + q1.w * __uint_as_float(kv.w & 0xffff0000u);
                }
                sc = a * sl2;
            }
            S[h * LA_KT + k] = sc;
        }
        __syncthreads();
        /* (3) online softmax, one warp per head */
        for (int h = warp; h < hpc; h += D_THREADS / 32) {
            float s0 = S[h * LA_KT + lane], s1 = S[h * LA_KT + lane + 32];
            float mx = fmaxf(s0, s1);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(full, mx, o));
            const float mo = m_run[h], mn = fmaxf(mo, mx);
            const float a = mn == -INFINITY ? 1.f : la_exp2(mo - mn);
            const float base = mn == -INFINITY ? 0.f : mn;
            s0 = la_exp2(s0 - base);
            s1 = la_exp2(s1 - base);
            S[h * LA_KT + lane] = s0;
            S[h * LA_KT + lane + 32] = s1;
            float sum = s0 + s1;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(full, sum, o);
            if (lane == 0) {
                l_run[h] = l_run[h] * a + sum;
                m_run[h] = mn;
                alpha[h] = a;
            }
        }
        __syncthreads();
        /* (4) O = alpha O + P V (this thread's head, 4 dims, half or all of the keys) */
        if (pv) {
            const float a = alpha[ph];
            acc[0] *= a;
            acc[1] *= a;
            acc[2] *= a;
            acc[3] *= a;
            const float *prob = S + ph * LA_KT;
#pragma unroll 8
            for (int k = k_begin; k < k_end; k++) {
                const float pk = prob[k];
                const uint2 v = *reinterpret_cast<const uint2 *>(Vs + k * STRIDE + dq);
                acc[0] += pk * __uint_as_float(v.x << 16);
                acc[1] += pk * __uint_as_float(v.x & 0xffff0000u);
                acc[2] += pk * __uint_as_float(v.y << 16);
                acc[3] += pk * __uint_as_float(v.y & 0xffff0000u);
            }
        }
        __syncthreads(); /* the next iteration's loads overwrite this stage */
    }
    la_cp_async_wait<0>();
    __syncthreads();

    /* 3. sum the key halves (through S, free now), then write */
    if (ksplit == 2) {
        if (khalf == 1 && pv) *reinterpret_cast<float4 *>(S + item * 4) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        __syncthreads();
        if (khalf == 1) return;
        if (pv) {
            const float4 o = *reinterpret_cast<const float4 *>(S + item * 4);
            acc[0] += o.x;
            acc[1] += o.y;
            acc[2] += o.z;
            acc[3] += o.w;
        }
    }
    if (!pv || dq >= hd) return;
    if (it.part_row0 < 0) {
        const float l = l_run[ph], inv = l > 0.f ? 1.f / l : 0.f;
        la_bf16_t *o = p.out + (int64_t)it.row0 * qstride + (int64_t)(head0 + ph) * hd + dq;
        uint2 w;
        w.x = la_pack_bf16x2(acc[0] * inv, acc[1] * inv);
        w.y = la_pack_bf16x2(acc[2] * inv, acc[3] * inv);
        *reinterpret_cast<uint2 *>(o) = w;
    } else {
        const int64_t pr = it.part_row0 + (int64_t)grp * hpc + ph;
        *reinterpret_cast<float4 *>(p.part_o + pr * hd + dq) = make_float4(acc[0], acc[1], acc[2], acc[3]);
        if (dq == 0) p.part_ml[pr] = make_float2(m_run[ph], l_run[ph]);
    }
}

template <int HD>
la_status launch_decode(const la_cuda_attn_params *p, cudaStream_t stream, la_err *err) {
    const size_t bytes = decode_layout<HD>::BYTES;
    static bool attr_done = false;
    if (!attr_done) {
        cudaError_t e = cudaFuncSetAttribute(attn_decode_kernel<HD>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (e != cudaSuccess)
            return la_err_set(err, LA_ERR_BACKEND, "attn_decode: %zu bytes of shared memory: %s",
                              bytes, cudaGetErrorString(e));
        attr_done = true;
    }
    dim3 grid((unsigned)p->n_items, (unsigned)(p->n_kv_heads * p->n_head_chunks));
    attn_decode_kernel<HD><<<grid, D_THREADS, bytes, stream>>>(*p);
    return la_cuda_launched("attn_decode", err);
}

} /* namespace */

extern "C" la_status la_cuda_attn_decode(const la_cuda_attn_params *p, cudaStream_t stream,
                                         la_err *err) {
    if (p->n_items <= 0) return LA_OK;
    LA_TRY(la_cuda_attn_check(p, "attn_decode", err));
    const int hd = p->head_dim;
    if (hd <= 32) return launch_decode<32>(p, stream, err);
    if (hd <= 64) return launch_decode<64>(p, stream, err);
    return launch_decode<128>(p, stream, err);
}
