#include "engine/sampling.h"

#include <math.h>
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
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static _Thread_local const float *g_sort_vals;

static int by_value_desc(const void *a, const void *b) {
    float x = g_sort_vals[*(const int32_t *)a], y = g_sort_vals[*(const int32_t *)b];
    if (x > y) return -1;
    if (x < y) return 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

int32_t la_sample(const float *logits, int32_t n, const la_sampling_params *p, la_rng *rng,
                  void *scratch) {
    if (p->temperature <= 0.0f) return la_argmax(logits, n);
    float *v = scratch;
    int32_t *idx = (int32_t *)(v + n);
    for (int32_t i = 0; i < n; i++) {
        v[i] = logits[i] / p->temperature;
        idx[i] = i;
    }
    g_sort_vals = v;
    qsort(idx, (size_t)n, sizeof(int32_t), by_value_desc);
    int32_t keep = n;
    if (p->top_k > 0 && p->top_k < keep) keep = p->top_k;
    /* softmax over the kept candidates (sorted, largest first) */
    double mx = v[idx[0]], sum = 0;
    for (int32_t i = 0; i < keep; i++) sum += exp((double)v[idx[i]] - mx);
    if (p->top_p < 1.0f) {
        /* smallest prefix whose mass reaches top_p (HF keeps at least one token) */
        double cum = 0;
        int32_t k = 0;
        while (k < keep) {
            cum += exp((double)v[idx[k]] - mx) / sum;
            k++;
            if (cum >= p->top_p) break;
        }
        keep = k;
        sum = 0;
        for (int32_t i = 0; i < keep; i++) sum += exp((double)v[idx[i]] - mx);
    }
    double u = la_rng_uniform(rng) * sum, acc = 0;
    for (int32_t i = 0; i < keep; i++) {
        acc += exp((double)v[idx[i]] - mx);
        if (u < acc) return idx[i];
    }
    return idx[keep - 1];
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
