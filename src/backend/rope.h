/* RoPE rotation shared by the CPU backend and the host-side references.
 *
 * HF modeling_llama.py apply_rotary_pos_emb with rotate_half: for i < head_dim/2,
 *   out[i]            = x[i] cos(a_i) - x[i + d/2] sin(a_i)
 *   out[i + d/2]      = x[i + d/2] cos(a_i) + x[i] sin(a_i)
 * with a_i = pos * inv_freq[i] (inv_freq after rope_scaling: model/config.h).
 * The angle is formed in double (transformers forms it in f32; the difference at the
 * positions of our fixtures is below 1e-6 and double keeps 100k-token offsets exact).
 */
#ifndef LA_BACKEND_ROPE_H
#define LA_BACKEND_ROPE_H

#include <math.h>
#include <stdint.h>

/* cos/sin of pos * inv_freq[i] for i < half: cs[2i] = cos, cs[2i+1] = sin. */
static inline void la_rope_cos_sin(const float *inv_freq, int32_t half, double pos, float *cs) {
    for (int32_t i = 0; i < half; i++) {
        double a = pos * (double)inv_freq[i];
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }
}

/* Rotate one head vector x[head_dim] in place with a table from la_rope_cos_sin. */
static inline void la_rope_apply(float *x, int32_t head_dim, const float *cs) {
    int32_t half = head_dim / 2;
    for (int32_t i = 0; i < half; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1];
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

#endif
