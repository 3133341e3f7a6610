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

static bool allowed(const uint64_t *allow, int32_t t) { return (allow[t / 64] >> (t % 64)) & 1; }

int32_t la_argmax_masked(const float *logits, int32_t n, const uint64_t *allow) {
    if (!allow) return la_argmax(logits, n);
    int32_t best = -1, first = -1;
    float v = -INFINITY;
    for (int32_t w = 0; w * 64 < n; w++) {
        uint64_t bits = allow[w];
        if (!bits) continue;
        int32_t base = w * 64;
        if (first < 0) first = base + __builtin_ctzll(bits);
        if (bits == ~(uint64_t)0 && base + 64 <= n) { /* a whole word allowed: no bit tests */
            for (int32_t i = base; i < base + 64; i++)
                if (logits[i] > v) v = logits[best = i];
            continue;
        }
        for (; bits; bits &= bits - 1) {
            int32_t i = base + __builtin_ctzll(bits);
            if (i >= n) break;
            if (logits[i] > v) v = logits[best = i];
        }
    }
    return best >= 0 ? best : first; /* every allowed logit NaN or -inf: the first allowed */
}

int32_t la_sample(const float *logits, int32_t n, const la_sampling_params *p, la_rng *rng,
                  void *scratch) {
    return la_sample_masked(logits, n, p, NULL, rng, scratch);
}

int32_t la_sample_masked(const float *logits, int32_t n, const la_sampling_params *p, const uint64_t *allow,
                         la_rng *rng, void *scratch) {
    if (p->temperature <= 0.0f) return la_argmax_masked(logits, n, allow);
    float *v = scratch;
    int32_t *idx = (int32_t *)(v + n);
    float vmax = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        v[i] = allow && !allowed(allow, i) ? -INFINITY : logits[i] / p->temperature;
        if (v[i] > vmax) vmax = v[i];
    }
    if (vmax == -INFINITY) return -1; /* nothing allowed */
    const double mx = vmax;
    int32_t keep = n; /* candidates left after top-k */
    if (p->top_k > 0 && p->top_k < keep) keep = p->top_k;
    /* min-p keeps the prefix of the sorted candidates at or above this value */
    int32_t n_min_p = n;
    if (p->min_p > 0.0f) {
        const float thr = (float)(mx + log((double)p->min_p));
        n_min_p = 0;
        for (int32_t i = 0; i < n; i++) n_min_p += v[i] >= thr;
        if (n_min_p < 1) n_min_p = 1;
        if (p->top_p >= 1.0f && n_min_p < keep) keep = n_min_p; /* no top-p: the two prefixes */
    }
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
            cut = k < n_min_p ? k : n_min_p; /* min-p after top-p, as HF orders them */
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

/* ============================================================ processors ========== */

bool la_logits_processors_active(const la_sampling_params *p) {
    return p->n_logit_bias > 0 || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f ||
           (p->repetition_penalty != 0.0f && p->repetition_penalty != 1.0f);
}

/* A fresh mark value (wrapping: the marks start over). */
static uint32_t next_epoch(uint32_t *marks, int32_t n, uint32_t *epoch) {
    if (++*epoch == 0) {
        memset(marks, 0, sizeof(uint32_t) * (size_t)n);
        *epoch = 1;
    }
    return *epoch;
}

static void penalize_repeats(float *v, int32_t n, float r, la_token_span s, uint32_t *marks, uint32_t mark) {
    for (int64_t i = 0; i < s.n; i++) {
        int32_t t = s.ids[i];
        if (t < 0 || t >= n || marks[t] == mark) continue;
        marks[t] = mark;
        v[t] = v[t] < 0 ? v[t] * r : v[t] / r;
    }
}

void la_logits_process(float *v, int32_t n, const la_sampling_params *p, const la_logits_inputs *in,
                       uint32_t *marks, uint32_t *epoch) {
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        int32_t t = p->logit_bias[i].token_id;
        if (t >= 0 && t < n) v[t] += p->logit_bias[i].bias;
    }
    float r = p->repetition_penalty;
    if (r != 0.0f && r != 1.0f) {
        uint32_t mark = next_epoch(marks, n, epoch);
        for (int32_t i = 0; i < in->n_seen; i++) penalize_repeats(v, n, r, in->seen[i], marks, mark);
        penalize_repeats(v, n, r, in->output, marks, mark);
    }
    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) {
        uint32_t mark = next_epoch(marks, n, epoch);
        for (int64_t i = 0; i < in->output.n; i++) {
            int32_t t = in->output.ids[i];
            if (t < 0 || t >= n) continue;
            v[t] -= p->frequency_penalty;
            if (marks[t] != mark) {
                marks[t] = mark;
                v[t] -= p->presence_penalty;
            }
        }
    }
}

/* e^x for x <= 0 (f32, relative error < 3e-7; 0 below -87, NaN stays NaN): x = (i + f)
 * ln 2 with i an integer and |f| <= 1/2, e^x = 2^i e^(f ln 2), the second factor by its
 * Taylor series to degree 6 (remainder (ln 2 / 2)^7 / 7! ~ 1.2e-7). Branch-free and
 * without libm, so that loops over it vectorize. x must be <= 0 (a positive x is taken as
 * -87: the caller subtracts the maximum). */
static inline float exp_le0(float x) {
    /* x = max(x, -87) on the bits (an integer select vectorizes where a float one may trap):
     * as uint32, a negative float of larger magnitude is larger, and 0 is below them all;
     * -inf becomes -87 */
    union {
        float f;
        uint32_t u;
    } xb = {.f = x}, lim = {.f = -87.0f};
    xb.u = xb.u > lim.u ? lim.u : xb.u;
    x = xb.f;
    float t = x * 1.44269504f; /* log2(e) */
    int32_t i = (int32_t)(t - 0.5f); /* round to nearest for t <= 0 */
    float f = (t - (float)i) * 0.69314718f;
    float p = 1.0f + f * (1.0f + f * (0.5f + f * (0.16666667f + f * (0.041666668f + f * (0.008333334f + f * 0.0013888889f)))));
    union {
        int32_t i;
        float f;
    } scale = {.i = (i + 127) << 23};
    return p * scale.f;
}

/* sum_i e^(l[i] - mx) for l[i] <= mx: exp_le0 over runs of 256 into a buffer, summed in 8
 * lanes of f32, the runs in f64; fixed-length loops the compiler vectorizes (over Llama 3's
 * 128K logits, many times faster than libm's exp in f64). */
static double sum_exp_le0(const float *l, int32_t n, float mx) {
    double s = 0;
    float tmp[256];
    int32_t i = 0;
    for (; i + 256 <= n; i += 256) {
        for (int j = 0; j < 256; j++) tmp[j] = exp_le0(l[i + j] - mx);
        float lane[8] = {0};
        for (int j = 0; j < 256; j += 8)
            for (int k = 0; k < 8; k++) lane[k] += tmp[j + k];
        float run = 0;
        for (int k = 0; k < 8; k++) run += lane[k];
        s += run;
    }
    for (; i < n; i++) s += exp_le0(l[i] - mx);
    return s;
}

int32_t la_logprobs(const float *logits, int32_t n, int32_t token, int32_t k, float *lp, int32_t *top_ids,
                    float *top_lps) {
    float vmax = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > vmax) vmax = logits[i];
    const double lse = vmax + log(sum_exp_le0(logits, n, vmax));
    *lp = (float)((double)logits[token] - lse);
    if (k > n) k = n;
    if (k <= 0) return 0;
    top_m(logits, n, k, top_ids);
    for (int32_t i = 0; i < k; i++) top_lps[i] = (float)((double)logits[top_ids[i]] - lse);
    return k;
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
    struct {
        const char *name;
        float v, lo, hi;
        bool lo_open;
    } ranges[] = {{"presence_penalty", p->presence_penalty, -2, 2, false},
                  {"frequency_penalty", p->frequency_penalty, -2, 2, false},
                  {"repetition_penalty", p->repetition_penalty, 0, 2, false},
                  {"min_p", p->min_p, 0, 1, false}};
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++)
        if (!(ranges[i].v >= ranges[i].lo && ranges[i].v <= ranges[i].hi))
            return la_err_set(err, LA_ERR_INVALID_ARG, "%s=%g must be in [%g, %g]", ranges[i].name,
                              (double)ranges[i].v, (double)ranges[i].lo, (double)ranges[i].hi);
    if (p->min_tokens < 0 || p->min_tokens > p->max_tokens)
        return la_err_set(err, LA_ERR_INVALID_ARG, "min_tokens=%d must be in [0, max_tokens=%d]", p->min_tokens,
                          p->max_tokens);
    if (p->n < 0 || p->n > 128) return la_err_set(err, LA_ERR_INVALID_ARG, "n=%d must be in [1, 128]", p->n);
    if (p->top_logprobs < 0 || p->top_logprobs > 20)
        return la_err_set(err, LA_ERR_INVALID_ARG, "top_logprobs=%d must be in [0, 20]", p->top_logprobs);
    if (p->top_logprobs > 0 && !p->logprobs)
        return la_err_set(err, LA_ERR_INVALID_ARG, "top_logprobs needs logprobs");
    if ((p->n_logit_bias > 0 && !p->logit_bias) || p->n_logit_bias < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "logit_bias: bad list");
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (!(p->logit_bias[i].bias >= -100.0f && p->logit_bias[i].bias <= 100.0f))
            return la_err_set(err, LA_ERR_INVALID_ARG, "logit_bias[%d]=%g must be in [-100, 100]",
                              p->logit_bias[i].token_id, (double)p->logit_bias[i].bias);
    if ((p->n_stop_token_ids > 0 && !p->stop_token_ids) || p->n_stop_token_ids < 0 ||
        (p->n_allowed_token_ids > 0 && !p->allowed_token_ids) || p->n_allowed_token_ids < 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "stop_token_ids / allowed_token_ids: bad list");
    if ((unsigned)p->response_format > LA_RESPONSE_JSON_SCHEMA)
        return la_err_set(err, LA_ERR_INVALID_ARG, "response_format %d is unknown", (int)p->response_format);
    if (p->response_format == LA_RESPONSE_JSON_SCHEMA && (!p->json_schema || !p->json_schema[0]))
        return la_err_set(err, LA_ERR_INVALID_ARG, "response_format json_schema needs a schema");
    return LA_OK;
}
