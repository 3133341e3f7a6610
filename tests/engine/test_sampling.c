/* Token sampling (src/engine/sampling.c) against a plain reference: sort every candidate,
 * cut top-k, cut top-p, draw walking best first. The engine's sampler only sorts as many
 * candidates as the cut and the draw need, so it must pick exactly the reference's token for
 * every seed, on peaked and flat distributions and on a Llama-3-sized vocabulary; and its
 * draws must follow the softmax. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sampling.h"

static const float *g_vals;

static int by_value_desc(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (g_vals[i] > g_vals[j]) return -1;
    if (g_vals[i] < g_vals[j]) return 1;
    return i - j;
}

/* The definition, written the slow way. Denominators: over the top-k candidates in sorted
 * order when top-k cuts, else over the whole vocabulary in index order (as the engine). */
static int32_t reference_sample(const float *logits, int32_t n, const la_sampling_params *p,
                                la_rng *rng) {
    float *v = malloc(sizeof(float) * (size_t)n);
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)n);
    float vmax = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        v[i] = logits[i] / p->temperature, idx[i] = i;
        if (v[i] > vmax) vmax = v[i];
    }
    double mx = vmax;
    g_vals = v;
    qsort(idx, (size_t)n, sizeof(int32_t), by_value_desc);
    int32_t keep = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    double sum = 0;
    if (keep < n)
        for (int32_t i = 0; i < keep; i++) sum += exp((double)v[idx[i]] - mx);
    else
        for (int32_t i = 0; i < n; i++) sum += exp((double)v[i] - mx);
    double u01 = la_rng_uniform(rng), kept = sum;
    if (p->top_p < 1.0f) {
        double cum = 0;
        int32_t k = 0;
        while (k < keep) {
            cum += exp((double)v[idx[k]] - mx) / sum;
            k++;
            if (cum >= p->top_p) break;
        }
        keep = k;
        kept = 0;
        for (int32_t i = 0; i < keep; i++) kept += exp((double)v[idx[i]] - mx);
    }
    double u = u01 * kept, acc = 0;
    int32_t out = idx[keep - 1];
    for (int32_t i = 0; i < keep; i++) {
        acc += exp((double)v[idx[i]] - mx);
        if (u < acc) {
            out = idx[i];
            break;
        }
    }
    free(v);
    free(idx);
    return out;
}

/* Logits of n tokens: Gaussian-ish with scale `spread` (large: peaked), some exact ties. */
static void make_logits(float *l, int32_t n, double spread, uint64_t seed) {
    la_rng r;
    la_rng_seed(&r, seed);
    for (int32_t i = 0; i < n; i++) {
        double g = la_rng_uniform(&r) + la_rng_uniform(&r) + la_rng_uniform(&r) - 1.5;
        l[i] = (float)(spread * g);
        if (i % 97 == 5) l[i] = l[i / 2]; /* ties: resolved by the lower index */
    }
}

static void check_matches_reference(int32_t n, double spread, int n_draws) {
    float *logits = malloc(sizeof(float) * (size_t)n);
    void *scratch = malloc((size_t)n * (sizeof(float) + sizeof(int32_t)));
    const struct {
        float temperature, top_p;
        int32_t top_k;
    } cases[] = {{1.0f, 1.0f, 0}, {0.7f, 0.9f, 0}, {1.0f, 0.95f, 50}, {1.3f, 1.0f, 40},
                 {0.5f, 0.5f, 0}, {2.0f, 0.99f, 0}, {1.0f, 1.0f, 1}, {1.0f, 0.3f, 1000}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        la_sampling_params p = {.temperature = cases[c].temperature, .top_p = cases[c].top_p,
                                .top_k = cases[c].top_k, .max_tokens = 1};
        make_logits(logits, n, spread, 1000 + c);
        for (int d = 0; d < n_draws; d++) {
            la_rng a, b;
            la_rng_seed(&a, (uint64_t)d * 7919 + c);
            la_rng_seed(&b, (uint64_t)d * 7919 + c);
            int32_t got = la_sample(logits, n, &p, &a, scratch);
            int32_t want = reference_sample(logits, n, &p, &b);
            cr_assert_eq(got, want, "n=%d spread=%g T=%g top_p=%g top_k=%d draw %d: %d, reference %d",
                         n, spread, (double)p.temperature, (double)p.top_p, p.top_k, d, got, want);
        }
    }
    free(logits);
    free(scratch);
}

Test(sampling, picks_the_reference_token_on_a_small_vocabulary) {
    check_matches_reference(300, 3.0, 200); /* fewer tokens than the first candidate batch */
    check_matches_reference(300, 0.05, 200);
}

Test(sampling, picks_the_reference_token_on_peaked_and_flat_large_vocabularies) {
    check_matches_reference(128256, 12.0, 12); /* Llama-3 vocabulary, peaked */
    check_matches_reference(128256, 0.5, 6);   /* flat: the cut and the draw go deep */
}

Test(sampling, greedy_is_argmax_with_the_lowest_index_on_ties) {
    float l[5] = {1, 3, 2, 3, 0};
    la_sampling_params p = {.temperature = 0, .top_p = 1, .max_tokens = 1};
    la_rng r;
    la_rng_seed(&r, 1);
    float scratch[10];
    cr_assert_eq(la_sample(l, 5, &p, &r, scratch), 1);
}

/* la_argmax, which the CUDA backend's device argmax must equal (rows.cu): NaN never wins,
 * wherever it stands; a row of NaN or of -inf gives 0. */
Test(sampling, argmax_skips_nan_and_takes_the_lowest_index_of_equal_maxima) {
    const float nan = NAN, inf = INFINITY;
    const struct {
        float v[5];
        int32_t want;
    } cases[] = {
        {{nan, 1, 3, 3, 2}, 2}, {{1, nan, 0, 5, nan}, 3}, {{nan, nan, nan, nan, nan}, 0},
        {{-inf, -inf, -inf, -inf, -inf}, 0}, {{nan, -inf, -inf, 0, -1}, 3}, {{-inf, nan, -1, -1, -inf}, 2},
        {{2, 2, 2, 2, 2}, 0}, {{0, 0, inf, inf, 1}, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(la_argmax(cases[i].v, 5), cases[i].want, "case %zu: %d, want %d", i,
                     la_argmax(cases[i].v, 5), cases[i].want);
}

/* Draw frequencies follow softmax(logits / T) restricted to top-k: chi-square over 4
 * tokens (3 degrees of freedom; 16.3 is the 0.1% critical value). */
Test(sampling, draws_follow_the_softmax) {
    float l[6] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};
    la_sampling_params p = {.temperature = 0.8f, .top_p = 1.0f, .top_k = 4, .max_tokens = 1};
    double prob[4], z = 0;
    for (int i = 0; i < 4; i++) z += prob[i] = exp(l[i] / 0.8);
    la_rng r;
    la_rng_seed(&r, 42);
    float scratch[12];
    int counts[6] = {0};
    const int N = 200000;
    for (int i = 0; i < N; i++) counts[la_sample(l, 6, &p, &r, scratch)]++;
    cr_assert_eq(counts[4] + counts[5], 0, "top-k removed tokens 4 and 5");
    double chi2 = 0;
    for (int i = 0; i < 4; i++) {
        double e = N * prob[i] / z;
        chi2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    cr_assert(chi2 < 16.3, "chi-square %.2f over 4 tokens", chi2);
}
