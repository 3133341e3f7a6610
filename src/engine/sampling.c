#include "engine/sampling.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void la_rng_seed(la_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t la_rng_next(la_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double la_rng_uniform(la_rng *r) { return (double)(la_rng_next(r) >> 11) * 0x1.0p-53; }

int32_t la_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    float v = isnan(logits[0]) ? -INFINITY : logits[0]; /* NaN never wins (a NaN > x is false) */
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > v) v = logits[best = i];
    return best;
}

/* Candidate order: larger value first, lower index on ties (a stable sort's order). */
static bool better(const float *v, int32_t a, int32_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
}

static void sift_down(const float *v, int32_t *heap, int32_t size, int32_t i) {
    for (;;) {
        int32_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < size && better(v, heap[w], heap[l])) w = l; /* root holds the worst */
        if (r < size && better(v, heap[w], heap[r])) w = r;
        if (w == i) return;
        int32_t t = heap[i];
        heap[i] = heap[w], heap[w] = t;
        i = w;
    }
}

/* idx[0..m) = the m best of v[0..n) in candidate order, in O(n log m): a heap of the m
 * best seen so far with the worst at its root, then sorted in place. */
static void top_m(const float *v, int32_t n, int32_t m, int32_t *idx) {
    int32_t size = 0;
    for (int32_t i = 0; i < n; i++) {
        if (size < m) {
            int32_t c = size++;
            idx[c] = i;
            while (c > 0 && better(v, idx[(c - 1) / 2], idx[c])) { /* sift up the worse */
                int32_t p = (c - 1) / 2, t = idx[p];
                idx[p] = idx[c], idx[c] = t;
                c = p;
            }
        } else if (better(v, i, idx[0])) {
            idx[0] = i;
            sift_down(v, idx, size, 0);
        }
    }
    for (int32_t end = size - 1; end > 0; end--) { /* worst to the back: best first */
        int32_t t = idx[0];
        idx[0] = idx[end], idx[end] = t;
        sift_down(v, idx, end, 0);
    }
}

/* First candidates looked at; doubled while top-p or the draw needs more. Most of the mass
 * of a sampled LLM distribution sits in far fewer than this many tokens. */
#define LA_SAMPLE_FIRST_CANDIDATES 256

int32_t la_sample(const float *logits, int32_t n, const la_sampling_params *p, la_rng *rng,
                  void *scratch) {
    if (p->temperature <= 0.0f) return la_argmax(logits, n);
    float *v = scratch;
    int32_t *idx = (int32_t *)(v + n);
    float vmax = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        v[i] = logits[i] / p->temperature;
        if (v[i] > vmax) vmax = v[i];
    }
    const double mx = vmax;
    int32_t keep = n; /* candidates left after top-k */
    if (p->top_k > 0 && p->top_k < keep) keep = p->top_k;
    /* the softmax denominator over the kept candidates */
    double sum = 0;
    int32_t m = 0; /* idx[0..m) holds the m best, sorted */
    if (keep < n) {
        top_m(v, n, keep, idx);
        m = keep;
        for (int32_t i = 0; i < keep; i++) sum += exp((double)v[idx[i]] - mx);
    } else {
        for (int32_t i = 0; i < n; i++) sum += exp((double)v[i] - mx);
    }
    const double u01 = la_rng_uniform(rng);
    for (int32_t want = keep < LA_SAMPLE_FIRST_CANDIDATES ? keep : LA_SAMPLE_FIRST_CANDIDATES;;
         want = want > keep / 2 ? keep : 2 * want) {
        if (m < want) top_m(v, n, want, idx), m = want;
        int32_t cut = keep;
        double kept = sum;
        if (p->top_p < 1.0f) {
            /* smallest prefix whose mass reaches top_p (HF keeps at least one token) */
            double cum = 0;
            int32_t k = 0;
            while (k < m) {
                cum += exp((double)v[idx[k]] - mx) / sum;
                k++;
                if (cum >= p->top_p) break;
            }
            if (cum < p->top_p && m < keep) continue; /* the cut lies beyond: look further */
            cut = k;
            kept = 0;
            for (int32_t i = 0; i < cut; i++) kept += exp((double)v[idx[i]] - mx);
        }
        /* the draw, walking the candidates best first */
        double u = u01 * kept, acc = 0;
        int32_t lim = cut < m ? cut : m;
        for (int32_t i = 0; i < lim; i++) {
            acc += exp((double)v[idx[i]] - mx);
            if (u < acc) return idx[i];
        }
        if (lim == cut) return idx[cut - 1]; /* rounding left u just past the last one */
        /* the draw lies beyond the candidates sorted so far: look further */
    }
}

la_status la_sampling_params_check(const la_sampling_params *p, la_err *err) {
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return la_err_set(err, LA_ERR_INVALID_ARG, "temperature=%g must be a finite number >= 0",
                          (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return la_err_set(err, LA_ERR_INVALID_ARG, "top_p=%g must be in (0, 1]", (double)p->top_p);
    if (p->top_k < 0) return la_err_set(err, LA_ERR_INVALID_ARG, "top_k=%d must be >= 0", p->top_k);
    if (p->max_tokens < 1)
        return la_err_set(err, LA_ERR_INVALID_ARG, "max_tokens=%d must be >= 1", p->max_tokens);
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
        return la_err_set(err, LA_ERR_INVALID_ARG, "stop: bad list");
    for (int32_t i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return la_err_set(err, LA_ERR_INVALID_ARG, "stop[%d] is empty", i);
    return LA_OK;
}
