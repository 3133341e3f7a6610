/* Shared by attn_prefill.cu, attn_decode.cu and attn_combine.cu: staging one tile of KV_TILE
 * keys of a sequence's paged block list into shared memory, with the per-key metadata the
 * masks and rotations need, and merging the partial rows of a row split over the KV length
 * (module-private).
 *
 * A tile covers flat slots [t0, t0 + LA_ATTN_KEYS_PER_TILE) of the sequence's block list
 * (flat slot f = block f / B, offset f % B; t0 a multiple of 64, B a multiple of 16), so
 * each 16-key group lies inside one block and shares its q_delta and k_rope:
 *
 *   kpos[k]    logical position pos0 + j of key k, or INT_MAX when the key is padding
 *              (j >= n_valid) or past kv1: such a key is masked for every query
 *   gmin[g]    position of group g's first key (its smallest; INT_MAX: group empty)
 *   gdelta[g]  q_delta of group g's block (lazy: the query is rotated at p - q_delta)
 *   gkrope[g]  k_rope of group g's block (mepic: rotate each key at kpos on load)
 *
 * K and V rows land at row stride HD + 8 bf16 (16 bytes of padding, so ldmatrix's eight
 * 16-byte row reads hit eight different bank groups). Keys past kv1 are zero-filled, so
 * no stale NaN in the pool can reach P V through a masked key.
 */
#ifndef LA_BACKEND_CUDA_KERNELS_ATTN_TILE_CUH
#define LA_BACKEND_CUDA_KERNELS_ATTN_TILE_CUH

#include <limits.h>

#include "backend/cuda/kernels/cuda_common.cuh"

#define LA_KT LA_ATTN_KEYS_PER_TILE
#define LA_KT_GROUPS (LA_ATTN_KEYS_PER_TILE / 16)

/* Online softmax, conditional rescaling: a row's running maximum m (log2 units) is raised
 * only when a tile's maximum exceeds it by more than this many, so O's rescale by
 * 2^(m_old - m_new) is rare. Between raises p = 2^(s - m) <= 2^8 = 256: f32 sums and bf16
 * P stay exact to their usual relative precision, and the result, O / l over the same m, is
 * the same softmax (the threshold of FlashAttention-4's conditional rescaling). */
#define LA_ATTN_RESCALE_SLACK 8.0f

/* KV-head group grp of an attention launch (n_kv_heads x n_head_chunks groups, GQA): its KV
 * head, and the first of the heads_per_cta query heads it serves (query head h reads KV
 * head h / (n_heads / n_kv_heads)). */
struct la_attn_group {
    int kvh, head0;
};
__device__ __forceinline__ la_attn_group la_attn_group_of(const la_cuda_attn_params &p, int grp) {
    const int kvh = grp / p.n_head_chunks, chunk = grp - kvh * p.n_head_chunks;
    return {kvh, kvh * (p.n_heads / p.n_kv_heads) + chunk * p.heads_per_cta};
}

/* Offset of flat key slot f inside its block of B slots (f % B), without a division when
 * B is a power of two (the usual block sizes). */
__device__ __forceinline__ int la_slot_in_block(int f, int B) {
    return (B & (B - 1)) == 0 ? (f & (B - 1)) : f % B;
}

/* The block of flat slot f: f / B, a shift for B a power of two (a division by a runtime B
 * is some twenty instructions). */
__device__ __forceinline__ int la_block_of(int f, int B) {
    return (B & (B - 1)) == 0 ? f >> (__ffs(B) - 1) : f / B;
}

typedef struct la_tile_meta {
    int32_t kpos[LA_KT];
    int32_t gmin[LA_KT_GROUPS];
    int32_t gdelta[LA_KT_GROUPS];
    int32_t gkrope[LA_KT_GROUPS];
} la_tile_meta;

/* Issue the cp.async copies of one tile's K and V rows and write its metadata. Every
 * thread of the CTA calls it; the caller commits the group, waits and syncs before use. */
template <int HD>
__device__ __forceinline__ void la_attn_load_tile(const la_cuda_attn_params &p,
                                                  const la_attn_block *blocks, int kvh,
                                                  int t0, int kv1, la_bf16_t *Ks,
                                                  la_bf16_t *Vs, la_tile_meta *m) {
    constexpr int CH = HD / 8, STRIDE = HD + 8;
    const int hd = p.head_dim, chunks = hd / 8, B = p.block_size;
    for (int i = threadIdx.x; i < LA_KT * CH; i += blockDim.x) {
        int k = i / CH, c = i - k * CH;
        if (c >= chunks) continue;
        int f = t0 + k;
        bool ok = f < kv1;
        const la_bf16_t *ks = p.k_pool, *vs = p.v_pool;
        if (ok) {
            int bi = f / B, j = f - bi * B;
            int64_t off = (((int64_t)blocks[bi].block_id * p.n_kv_heads + kvh) * B + j) * hd + c * 8;
            ks += off;
            vs += off;
        }
        la_cp_async16(Ks + k * STRIDE + c * 8, ks, ok);
        la_cp_async16(Vs + k * STRIDE + c * 8, vs, ok);
    }
    if (threadIdx.x < LA_KT) {
        int k = threadIdx.x, f = t0 + k;
        int32_t kp = INT_MAX, delta = 0, krope = 0;
        if (f < kv1) {
            int bi = f / B, j = f - bi * B;
            la_attn_block b = blocks[bi];
            delta = b.q_delta;
            if (j < b.n_valid) {
                kp = b.pos0 + j;
                krope = b.k_rope;
            }
        }
        m->kpos[k] = kp;
        if ((k & 15) == 0) {
            m->gmin[k >> 4] = kp;  /* slots of a block are valid as a prefix: first is min */
            m->gdelta[k >> 4] = delta;
            m->gkrope[k >> 4] = kp == INT_MAX ? 0 : krope;
        }
    }
}

/* mepic: rotate the valid keys of k_rope groups in shared memory at their own positions
 * (HF rotate_half convention; keys were stored unrotated). Caller syncs before and after.
 * M: la_tile_meta or any metadata with the same kpos[] and gkrope[] fields. */
template <int HD, typename M>
__device__ __forceinline__ void la_attn_rotate_keys(const la_cuda_attn_params &p, la_bf16_t *Ks,
                                                    const M *m) {
    constexpr int STRIDE = HD + 8;
    const int half = p.head_dim / 2;
    for (int i = threadIdx.x; i < LA_KT * half; i += blockDim.x) {
        int k = i / half, f = i - k * half;
        if (!m->gkrope[k >> 4] || m->kpos[k] == INT_MAX) continue;
        float2 cs = la_rope_cs(p.rope, p.rope_len, half, m->kpos[k], f);
        la_bf16_t *row = Ks + k * STRIDE;
        float x = la_bf2f(row[f]), y = la_bf2f(row[f + half]);
        row[f] = la_f2bf(x * cs.x - y * cs.y);
        row[f + half] = la_f2bf(y * cs.x + x * cs.y);
    }
}

/* Merge one output row split over the KV length and write it, bf16, to out[0, hd): the
 * flash-decoding reduction of attn_combine.cu's top comment,
 *
 *     M = max_s m_s,   out = sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s,
 *
 * over n_splits partial rows, split s at row row0 + s * stride of part_o [rows][hd] f32 and
 * part_ml [rows] (m, l). A row no split saw (every m = -inf) is written as zeros. One warp,
 * every lane calls; lane l owns dims 4l..4l+3 (hd <= 128, a multiple of 4). Lane s holds
 * split s's (m, l) (the first 32 are loaded once), the weights reach the other lanes by
 * shuffle, and the partial rows are loaded LA_MERGE_BATCH splits at a time with no branch
 * around the loads, so a batch's loads are in flight together: 1 + ceil(n_splits / 8)
 * dependent trips to L2 (a split past n_splits in the last batch loads a valid row and
 * weighs it 0, which leaves every sum bit-identical to the split-by-split loop; a lane past
 * hd loads dims 0..3 and its sums are never written; a load behind a branch per split
 * would make one L2 round trip per split). Loads go
 * through L2 only (ld.global.cg): the partial rows may have been written by other CTAs of
 * the running grid (attn_decode.cu's in-kernel merge). */
#define LA_MERGE_BATCH 8
__device__ __forceinline__ void la_attn_merge_row(const float *part_o, const float2 *part_ml, int64_t row0,
                                                  int64_t stride, int n_splits, int hd, la_bf16_t *out) {
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x & 31, d = lane * 4;
    const bool active = d < hd;
    const float2 none = make_float2(-INFINITY, 0.f);
    const float2 ml0 = lane < n_splits ? __ldcg(part_ml + row0 + lane * stride) : none;
    float M = ml0.x;
    for (int s = lane + 32; s < n_splits; s += 32) M = fmaxf(M, __ldcg(part_ml + row0 + s * stride).x);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(full, M, o));
    float den = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (M != -INFINITY)
        for (int s0 = 0; s0 < n_splits; s0 += 32) {
            const int s = s0 + lane, n = n_splits - s0 < 32 ? n_splits - s0 : 32;
            const float2 ml = s0 == 0 ? ml0 : (s < n_splits ? __ldcg(part_ml + row0 + s * stride) : none);
            const float w_lane = la_exp2(ml.x - M); /* 0 for m = -inf and past the splits */
            den += w_lane * ml.y;
            const float *po = part_o + (row0 + (int64_t)s0 * stride) * hd + (active ? d : 0);
            for (int j0 = 0; j0 < n; j0 += LA_MERGE_BATCH) { /* j0 + k <= 31: n <= 32 */
                float4 v[LA_MERGE_BATCH];
#pragma unroll
                for (int k = 0; k < LA_MERGE_BATCH; k++) {
                    const int j = j0 + k < n ? j0 + k : n - 1;
                    v[k] = __ldcg(reinterpret_cast<const float4 *>(po + (int64_t)j * stride * hd));
                }
#pragma unroll
                for (int k = 0; k < LA_MERGE_BATCH; k++) {
                    const float w = __shfl_sync(full, w_lane, j0 + k); /* 0 past the splits */
                    acc.x += w * v[k].x;
                    acc.y += w * v[k].y;
                    acc.z += w * v[k].z;
                    acc.w += w * v[k].w;
                }
            }
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(full, den, o);
    const float inv = den > 0.f ? 1.f / den : 0.f;
    if (active) {
        uint2 o;
        o.x = la_pack_bf16x2(acc.x * inv, acc.y * inv);
        o.y = la_pack_bf16x2(acc.z * inv, acc.w * inv);
        *reinterpret_cast<uint2 *>(out + d) = o;
    }
}

__device__ __forceinline__ int32_t la_tile_min_pos(const la_tile_meta *m) {
    int32_t v = m->gmin[0];
#pragma unroll
    for (int g = 1; g < LA_KT_GROUPS; g++) v = min(v, m->gmin[g]);
    return v;
}

__device__ __forceinline__ bool la_tile_any_krope(const la_tile_meta *m) {
    int32_t v = 0;
#pragma unroll
    for (int g = 0; g < LA_KT_GROUPS; g++) v |= m->gkrope[g];
    return v != 0;
}

#endif
