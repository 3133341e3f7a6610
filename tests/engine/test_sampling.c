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

/* The logits processors on hand-computed values (formulas in engine/sampling.h). */
Test(sampling, processors_apply_bias_then_repetition_then_frequency_and_presence) {
    float v[6] = {1.0f, -1.0f, 2.0f, 0.5f, 3.0f, -2.0f};
    const int32_t prompt[2] = {0, 1}, out[4] = {2, 2, 3, 0};
    la_logit_bias bias[1] = {{5, 4.0f}};
    la_sampling_params p = {0};
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    la_token_span seen = {prompt, 2};
    la_logits_inputs in = {.seen = &seen, .n_seen = 1, .output = {out, 4}};
    uint32_t marks[6] = {0}, epoch = 0;
    la_logits_process(v, 6, &p, &in, marks, &epoch);
    /* 0: seen and generated once: 1/2 - 0.5 - 0.25; 1: -1*2; 2: twice: 2/2 - 1 - 0.25;
     * 3: once: 0.5/2 - 0.5 - 0.25; 4: untouched; 5: bias -2 + 4 = 2, never seen */
    const float want[6] = {-0.25f, -2.0f, -0.25f, -0.5f, 3.0f, 2.0f};
    for (int i = 0; i < 6; i++) cr_assert(v[i] == want[i], "v[%d] = %g, want %g", i, v[i], want[i]);
}

/* A mask leaves the draw to the allowed tokens, greedy or sampled, without a copy. */
Test(sampling, masked_sampling_draws_only_allowed_tokens) {
    float lg[130];
    for (int i = 0; i < 130; i++) lg[i] = (float)(i % 7);
    uint64_t allow[3] = {0, (uint64_t)1 << 5 | (uint64_t)1 << 40, 1}; /* tokens 69, 104, 128 */
    cr_assert_eq(la_argmax_masked(lg, 130, allow), 69, "69 % 7 = 6 beats 104 % 7 = 6 by index, 128 % 7 = 2");
    la_sampling_params p = {.temperature = 1.0f, .top_p = 1.0f};
    float scratch[260];
    la_rng rng;
    la_rng_seed(&rng, 9);
    int seen[130] = {0};
    for (int i = 0; i < 2000; i++) seen[la_sample_masked(lg, 130, &p, allow, &rng, scratch)]++;
    cr_assert_eq(seen[69] + seen[104] + seen[128], 2000);
    cr_assert(seen[69] > 500 && seen[104] > 500 && seen[128] > 0);
    uint64_t none[3] = {0, 0, 0};
    cr_assert_eq(la_sample_masked(lg, 130, &p, none, &rng, scratch), -1);
    p.temperature = 0;
    cr_assert_eq(la_sample_masked(lg, 130, &p, none, &rng, scratch), -1);
}

Test(sampling, min_p_keeps_tokens_within_its_ratio_of_the_best) {
    /* probabilities 0.5, 0.3, 0.2 (log-space); min_p 0.5 keeps p >= 0.25: the first two */
    float lg[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    la_sampling_params p = {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.5f};
    float scratch[6];
    int seen[3] = {0};
    la_rng rng;
    la_rng_seed(&rng, 3);
    for (int i = 0; i < 3000; i++) seen[la_sample(lg, 3, &p, &rng, scratch)]++;
    cr_assert_eq(seen[2], 0, "p = 0.2 < 0.5 * 0.5 is cut");
    cr_assert_gt(seen[1], 900, "the kept two renormalise to 5:3 (%d of 3000)", seen[1]);
    p.min_p = 0.999f;
    for (int i = 0; i < 100; i++) cr_assert_eq(la_sample(lg, 3, &p, &rng, scratch), 0);
}

/* la_logprobs' vectorized exp against libm in f64 on a Llama-3-sized row with -inf among
 * the logits; its top-k is the sorted head of the row. */
Test(sampling, logprobs_match_log_softmax_in_f64_on_a_large_vocabulary) {
    enum { V = 128256 };
    float *lg = malloc(sizeof(float) * V);
    la_rng rng;
    la_rng_seed(&rng, 77);
    for (int i = 0; i < V; i++) lg[i] = (float)(la_rng_uniform(&rng) * 40.0 - 30.0);
    lg[5] = -INFINITY;
    lg[99] = 12.5f;
    double mx = 12.5, sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    double lse = mx + log(sum);
    int32_t ids[20];
    float lps[20], lp;
    for (int32_t t = 0; t < V; t += 4099) {
        cr_assert_eq(la_logprobs(lg, V, t, 20, &lp, ids, lps), 20);
        cr_assert(fabs(lp - (lg[t] - lse)) < 1e-5, "token %d: %.7g vs %.7g", t, lp, lg[t] - lse);
    }
    cr_assert_eq(ids[0], 99);
    for (int k = 1; k < 20; k++) cr_assert(lps[k - 1] >= lps[k]);
    la_logprobs(lg, V, 5, 0, &lp, ids, lps);
    cr_assert(isinf(lp) && lp < 0, "-inf stays -inf");
    free(lg);
}
