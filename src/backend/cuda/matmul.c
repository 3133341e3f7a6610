/* x W^T through cuBLASLt with an algorithm chosen per shape (matmul.h).
 *
 * Why: cublasGemmEx's default choice is fine for prefill-sized products (760 TFLOP/s at 8K
 * rows on an H200) but streams the weights of skinny ones (a decode batch of 1-32 rows, a
 * 64-token question) at 2.4-2.7 TB/s against 4.26 TB/s measured copy bandwidth
 * (bench/GPU_NOTES.md). Which kernel reaches the copy rate for a given shape (tile, split-K,
 * stages) is an empirical question, so we ask the device once per shape.
 *
 * The rule, per shape key (device; rows, out, in; the pointer alignments of W, x and y,
 * which decide what kernels may run):
 *
 *   - mode lt, at most LA_CUDA_GEMM_TUNE_MAX_ROWS rows, not cached (or cached untimed), the
 *     stream not capturing a graph: the candidates are the algorithms
 *     cublasLtMatmulAlgoGetHeuristic offers (up to 16), split-K variants (2, 4 and 8 ways)
 *     of the first 4 offered without split-K, and cublasGemmEx itself. Each runs once to
 *     warm up, then 4 times (2 for weights of 256 MiB and more) between two CUDA events,
 *     queued behind a ~50 us memset of the workspace so the events time kernels back to
 *     back (as a graph replays them) rather than the host's launch rate; the timed runs read the same matrix of
 *     other layers in turn (la_cuda_matmul_args.w_alt), so weights come from HBM as in a
 *     forward pass instead of from L2 (50 MB holds a whole 4096 x 4096 matrix). The fastest
 *     is cached, then run on the real operands: the trials left garbage in y;
 *   - a cached shape runs its algorithm (mode lt-heuristic: the heuristic's first);
 *   - otherwise (more rows, a full cache, a capturing stream, mode lt-heuristic) the
 *     heuristic's first algorithm: cached untimed when the shape is small enough to be
 *     timed later; above the row limit kept in a small per-backend LRU instead (prefill
 *     chunks come in every length and would fill the shared cache; the heuristic's answer
 *     is a function of the key, so asking again after eviction changes nothing).
 *
 * Numerics: every candidate accumulates in f32 as cublasGemmEx with CUBLAS_COMPUTE_32F does.
 * Split-K algorithms whose partial sums would be added in bf16 (reduction schemes INPLACE and
 * OUTPUT_TYPE) are dropped; the kept scheme (COMPUTE_TYPE: f32 partials in the workspace,
 * reduced by a second kernel) adds them in a fixed order. Where cuBLASLt has nothing to offer
 * (state of any heuristic result not SUCCESS, or none fits the workspace), the shape runs
 * cublasGemmEx (counted in shapes_no_lt); a cublasLtMatmul call that fails runs cublasGemmEx
 * instead (lt_failures).
 *
 * Determinism: a shape's entry is only ever upgraded once (untimed -> timed) and never
 * evicted; once timed its algorithm is fixed for the life of the process and shared by every
 * backend (the cache is global, under a mutex), so CUDA-graph replays, eager steps and a
 * second backend given the same inputs produce bit-equal products. When the cache is full,
 * new shapes run the heuristic's first algorithm on every call, also a fixed choice.
 *
 * CUDA graphs (cuda_backend.c): a decode step's first sight runs eagerly, which times its
 * shapes; the capture comes at the second sight and finds them cached. Nothing here
 * allocates device memory; only timing waits (cudaEventSynchronize), and timing never
 * happens while the stream is capturing (cudaStreamIsCapturing).
 */
#include "backend/cuda/matmul.h"

#include <cublasLt.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GEMM_CACHE_CAP 4096       /* hash slots, a power of two */
#define GEMM_CACHE_MAX_FILL 3072  /* shapes kept at most (3/4 of the slots) */
#define GEMM_HEURISTICS 16        /* algorithms asked of the heuristic */
#define GEMM_SPLITK_BASES 4       /* of those, the first this many without split-K get variants */
#define GEMM_N_SPLITS 3           /* 2, 4, 8 ways */
#define GEMM_MAX_CANDIDATES (GEMM_HEURISTICS + GEMM_SPLITK_BASES * GEMM_N_SPLITS + 1)
#define GEMM_TUNE_REPS 4           /* timed runs per candidate */
#define GEMM_TUNE_REPS_BIG 2       /* for weights of GEMM_TUNE_BIG_BYTES or more (lm_head) */
#define GEMM_TUNE_BIG_BYTES ((double)(256 << 20))
#define GEMM_LARGE_CACHE 64       /* per backend: shapes above the timing limit */

static const int32_t k_splits[GEMM_N_SPLITS] = {2, 4, 8};

/* ============================================================ types ================== */

/* Compared with memcmp: 8-byte fields after 4-byte ones, no padding. */
typedef struct gemm_key {
    int32_t device, align_w, align_x, align_y;
    int64_t n_rows, n_out, n_in;
} gemm_key;

typedef enum run_kind { RUN_LT, RUN_GEMMEX } run_kind;

/* One way to run a shape. */
typedef struct gemm_choice {
    int32_t kind;               /* run_kind */
    cublasLtMatmulAlgo_t algo;  /* RUN_LT */
    size_t ws_bytes;            /* RUN_LT: workspace it needs */
} gemm_choice;

typedef struct gemm_entry {
    bool used, tuned;
    gemm_key key;
    gemm_choice h0;             /* the heuristic's first kept algorithm (RUN_GEMMEX: none) */
    gemm_choice best;           /* tuned: the fastest candidate */
    int32_t n_candidates, rank; /* tuned: candidates timed; the winner's index, -1 cublasGemmEx */
    float best_us, h0_us, gemmex_us;
} gemm_entry;

/* Per backend: the heuristic's first choice for shapes too large to time. */
typedef struct large_entry {
    bool used;
    gemm_key key;
    gemm_choice choice;
    uint64_t last_used;
} large_entry;

struct la_cuda_matmul {
    cublasLtHandle_t lt;
    cublasHandle_t blas;
    cudaStream_t stream;
    void *ws;
    size_t ws_bytes;
    int device;
    la_cuda_gemm_mode mode;
    cudaEvent_t ev[2];
    la_cuda_gemm_stats stats;
    large_entry large[GEMM_LARGE_CACHE];
    uint64_t clock;
};

/* Column-major views of the row-major operands, built on the stack per call (no heap):
 * W [n_out, n_in] row-major is [n_in, n_out] column-major, taken with op T; x [n_rows, n_in]
 * is [n_in, n_rows]; y [n_rows, n_out] is [n_out, n_rows]. So y^T = op_T(W) x^T, exactly
 * the cublasGemmEx call (m = n_out, n = n_rows, k = n_in, lda = ldb = n_in, ldc = n_out). */
typedef struct gemm_desc {
    cublasLtMatmulDescOpaque_t op;
    cublasLtMatrixLayoutOpaque_t lw, lx, ly;
} gemm_desc;

/* ============================================================ the shared cache ======= */

static struct {
    pthread_mutex_t mu;
    int32_t n;
    gemm_entry e[GEMM_CACHE_CAP];
} g_cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static uint32_t key_slot(const gemm_key *k) {
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32)) & (GEMM_CACHE_CAP - 1);
}

/* The slot holding k, or the empty slot where it would go (caller holds the lock; the table
 * is never full: at most GEMM_CACHE_MAX_FILL < GEMM_CACHE_CAP slots are used). */
static gemm_entry *cache_slot(const gemm_key *k) {
    uint32_t i = key_slot(k);
    while (g_cache.e[i].used && memcmp(&g_cache.e[i].key, k, sizeof *k) != 0) i = (i + 1) & (GEMM_CACHE_CAP - 1);
    return &g_cache.e[i];
}

/* A copy of k's entry into *out; false if k is not cached. */
static bool cache_get(const gemm_key *k, gemm_entry *out) {
    pthread_mutex_lock(&g_cache.mu);
    gemm_entry *e = cache_slot(k);
    bool found = e->used;
    if (found) *out = *e;
    pthread_mutex_unlock(&g_cache.mu);
    return found;
}

static bool cache_full(void) {
    pthread_mutex_lock(&g_cache.mu);
    bool full = g_cache.n >= GEMM_CACHE_MAX_FILL;
    pthread_mutex_unlock(&g_cache.mu);
    return full;
}

/* Insert *e (key set), or upgrade the cached entry from untimed to timed. Where the cached
 * entry is already at least as good (another backend got there first), *e becomes a copy
 * of it, so every caller runs what the cache holds. False when the cache is full (*e kept). */
static bool cache_put(gemm_entry *e) {
    pthread_mutex_lock(&g_cache.mu);
    gemm_entry *slot = cache_slot(&e->key);
    bool ok = true;
    if (slot->used) {
        if (e->tuned && !slot->tuned) {
            e->h0 = slot->h0; /* keep the untimed entry's first choice: what lt-heuristic ran */
            *slot = *e;
        } else {
            *e = *slot;
        }
    } else if (g_cache.n >= GEMM_CACHE_MAX_FILL) {
        ok = false;
    } else {
        *slot = *e;
        slot->used = true;
        g_cache.n++;
    }
    pthread_mutex_unlock(&g_cache.mu);
    return ok;
}

/* ============================================================ helpers ================ */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The largest power of two up to 256 dividing the address (cuBLASLt's alignment classes). */
static int32_t ptr_align(const void *p) {
    uintptr_t v = (uintptr_t)p;
    int32_t a = 256;
    while (a > 1 && v % (uintptr_t)a) a /= 2;
    return a;
}

static gemm_key key_of(const la_cuda_matmul *m, const la_cuda_matmul_args *a) {
    gemm_key k;
    memset(&k, 0, sizeof k);
    k.device = m->device;
    k.align_w = ptr_align(a->w);
    k.align_x = ptr_align(a->x);
    k.align_y = ptr_align(a->y);
    k.n_rows = a->n_rows;
    k.n_out = a->n_out;
    k.n_in = a->n_in;
    return k;
}

static cublasStatus_t desc_init(gemm_desc *d, const la_cuda_matmul_args *a) {
    const int32_t op_t = (int32_t)CUBLAS_OP_T, op_n = (int32_t)CUBLAS_OP_N;
    cublasStatus_t s = cublasLtMatmulDescInit(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(&d->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(&d->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutInit(&d->lw, CUDA_R_16BF, (uint64_t)a->n_in, (uint64_t)a->n_out, a->n_in);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutInit(&d->lx, CUDA_R_16BF, (uint64_t)a->n_in, (uint64_t)a->n_rows, a->n_in);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutInit(&d->ly, CUDA_R_16BF, (uint64_t)a->n_out, (uint64_t)a->n_rows, a->n_out);
    return s;
}

static int32_t algo_i32(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    int32_t v = 0;
    size_t w = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(algo, attr, &v, sizeof v, &w) == CUBLAS_STATUS_SUCCESS ? v : -1;
}

static uint32_t algo_u32(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v = 0;
    size_t w = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(algo, attr, &v, sizeof v, &w) == CUBLAS_STATUS_SUCCESS ? v : 0;
}

static uint16_t algo_u16(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint16_t v = 0;
    size_t w = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(algo, attr, &v, sizeof v, &w) == CUBLAS_STATUS_SUCCESS ? v : 0;
}

/* Whether the algorithm accumulates in f32 throughout (no split-K partials added in bf16). */
static bool f32_throughout(const cublasLtMatmulAlgo_t *algo) {
    int32_t splits = algo_i32(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
    uint32_t scheme = algo_u32(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
    return splits <= 1 || scheme == CUBLASLT_REDUCTION_SCHEME_NONE || scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
}

/* Up to `cap` algorithms offered for this shape, kept ones only, in the heuristic's order
 * (always GEMM_HEURISTICS asked, so the first kept one does not depend on cap). */
static cublasStatus_t heuristics(la_cuda_matmul *m, gemm_desc *d, const gemm_key *k, gemm_choice *out, int cap,
                                 int *n_out) {
    *n_out = 0;
    cublasLtMatmulPreferenceOpaque_t pref;
    cublasStatus_t s = cublasLtMatmulPreferenceInit(&pref);
    const uint64_t ws = m->ws_bytes;
    const uint32_t aw = (uint32_t)k->align_w, ax = (uint32_t)k->align_x, ay = (uint32_t)k->align_y;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aw, sizeof aw);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ax, sizeof ax);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ay, sizeof ay);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(&pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ay, sizeof ay);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    cublasLtMatmulHeuristicResult_t res[GEMM_HEURISTICS];
    memset(res, 0, sizeof res);
    int got = 0;
    s = cublasLtMatmulAlgoGetHeuristic(m->lt, &d->op, &d->lw, &d->lx, &d->ly, &d->ly, &pref, GEMM_HEURISTICS, res,
                                       &got);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) return CUBLAS_STATUS_SUCCESS; /* nothing on offer: *n_out = 0 */
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    for (int i = 0; i < got && *n_out < cap; i++) {
        if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > m->ws_bytes) continue;
        if (!f32_throughout(&res[i].algo)) continue;
        out[*n_out] = (gemm_choice){.kind = RUN_LT, .algo = res[i].algo, .ws_bytes = res[i].workspaceSize};
        (*n_out)++;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Split-K variants (f32 partials) of the first GEMM_SPLITK_BASES candidates in c[0, n) that
 * run unsplit and support it, appended to c (up to cap); each checked by
 * cublasLtMatmulAlgoCheck, which also gives its workspace. */
static int add_splitk(la_cuda_matmul *m, gemm_desc *d, gemm_choice *c, int n, int cap) {
    int bases = 0, total = n;
    for (int i = 0; i < n && bases < GEMM_SPLITK_BASES; i++) {
        if (c[i].kind != RUN_LT || algo_i32(&c[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1) continue;
        int32_t support = 0;
        uint32_t schemes = 0;
        size_t w = 0;
        if (cublasLtMatmulAlgoCapGetAttribute(&c[i].algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support, sizeof support,
                                              &w) != CUBLAS_STATUS_SUCCESS || !support)
            continue;
        if (cublasLtMatmulAlgoCapGetAttribute(&c[i].algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                              sizeof schemes, &w) != CUBLAS_STATUS_SUCCESS ||
            !(schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE))
            continue;
        bases++;
        for (int j = 0; j < GEMM_N_SPLITS && total < cap; j++) {
            cublasLtMatmulAlgo_t algo = c[i].algo;
            const int32_t splits = k_splits[j];
            const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            cublasLtMatmulHeuristicResult_t r;
            memset(&r, 0, sizeof r);
            if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits) !=
                    CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                                     sizeof scheme) != CUBLAS_STATUS_SUCCESS ||
                cublasLtMatmulAlgoCheck(m->lt, &d->op, &d->lw, &d->lx, &d->ly, &d->ly, &algo, &r) !=
                    CUBLAS_STATUS_SUCCESS ||
                r.workspaceSize > m->ws_bytes)
                continue;
            c[total++] = (gemm_choice){.kind = RUN_LT, .algo = algo, .ws_bytes = r.workspaceSize};
        }
    }
    return total;
}

static cublasStatus_t run_gemmex(la_cuda_matmul *m, const la_cuda_matmul_args *a, const void *w) {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasGemmEx(m->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)a->n_out, (int)a->n_rows, (int)a->n_in, &alpha, w,
                        CUDA_R_16BF, (int)a->n_in, a->x, CUDA_R_16BF, (int)a->n_in, &beta, a->y, CUDA_R_16BF,
                        (int)a->n_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

static cublasStatus_t run_choice(la_cuda_matmul *m, gemm_desc *d, const gemm_choice *c, const la_cuda_matmul_args *a,
                                 const void *w) {
    if (c->kind == RUN_GEMMEX) return run_gemmex(m, a, w);
    const float alpha = 1.0f, beta = 0.0f; /* beta 0: y is not read */
    return cublasLtMatmul(m->lt, &d->op, &alpha, w, &d->lw, a->x, &d->lx, &beta, a->y, &d->ly, a->y, &d->ly,
                          &c->algo, m->ws, m->ws_bytes, m->stream);
}

static la_status cuda_error(la_err *err, cudaError_t e, const la_cuda_matmul_args *a, const char *what) {
    return la_err_set(err, LA_ERR_BACKEND, "cuda matmul [%lld x %lld] x [%lld x %lld]^T: %s: %s", (long long)a->n_rows,
                      (long long)a->n_in, (long long)a->n_out, (long long)a->n_in, what, cudaGetErrorString(e));
}

/* ============================================================ timing ================= */

/* Mean device time of one run of c in microseconds (INFINITY if it does not run): one
 * warm-up on the real weight, then GEMM_TUNE_REPS runs (2 for a weight of 256 MiB or more:
 * each run is long enough to time, and Llama-3's 1 GiB lm_head would otherwise take ~40 ms
 * of timing per row count) on the alternate weights in turn (*alt_next counts across
 * candidates, so consecutive runs never reread one matrix). */
static la_status time_choice(la_cuda_matmul *m, gemm_desc *d, const gemm_choice *c, const la_cuda_matmul_args *a,
                             int32_t *alt_next, float *us, la_err *err) {
    *us = INFINITY;
    if (run_choice(m, d, c, a, a->w) != CUBLAS_STATUS_SUCCESS) { /* warm-up: loads the kernels */
        (void)cudaGetLastError(); /* a refused launch is not sticky: keep later checks clean */
        return LA_OK;
    }
    /* keep the device busy (two passes over the 64 MiB workspace, ~50 us) while the host
     * queues the timed runs: the events then time back-to-back kernels, as in a graph
     * replay, not the host's launch rate (a skinny GEMM runs in a few us) */
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 2 && e == cudaSuccess; i++) e = cudaMemsetAsync(m->ws, 0, m->ws_bytes, m->stream);
    if (e == cudaSuccess) e = cudaEventRecord(m->ev[0], m->stream);
    if (e != cudaSuccess) return cuda_error(err, e, a, "timing event");
    const int reps =
        2.0 * (double)a->n_out * (double)a->n_in >= GEMM_TUNE_BIG_BYTES ? GEMM_TUNE_REPS_BIG : GEMM_TUNE_REPS;
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    for (int r = 0; r < reps && s == CUBLAS_STATUS_SUCCESS; r++) {
        const void *w = a->n_alt > 0 ? a->w_alt[(*alt_next)++ % a->n_alt] : a->w;
        s = run_choice(m, d, c, a, w);
    }
    if (s != CUBLAS_STATUS_SUCCESS) (void)cudaGetLastError();
    e = cudaEventRecord(m->ev[1], m->stream);
    if (e == cudaSuccess) e = cudaEventSynchronize(m->ev[1]);
    float ms = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, m->ev[0], m->ev[1]);
    if (e != cudaSuccess) return cuda_error(err, e, a, "timing candidates");
    if (s == CUBLAS_STATUS_SUCCESS) *us = ms * 1e3f / (float)reps;
    return LA_OK;
}

/* Time every candidate for a's shape and fill e (key left to the caller). */
static la_status tune(la_cuda_matmul *m, gemm_desc *d, const gemm_key *k, const la_cuda_matmul_args *a, gemm_entry *e,
                      la_err *err) {
    double t0 = now_ms();
    gemm_choice cand[GEMM_MAX_CANDIDATES];
    int n = 0;
    if (heuristics(m, d, k, cand, GEMM_HEURISTICS, &n) != CUBLAS_STATUS_SUCCESS) n = 0;
    memset(e, 0, sizeof *e);
    e->h0 = n > 0 ? cand[0] : (gemm_choice){.kind = RUN_GEMMEX};
    n = add_splitk(m, d, cand, n, GEMM_MAX_CANDIDATES - 1);
    int gemmex = n;
    cand[n++] = (gemm_choice){.kind = RUN_GEMMEX};
    int32_t alt_next = 0;
    int best = gemmex;
    float best_us = INFINITY;
    for (int i = 0; i < n; i++) {
        float us;
        LA_TRY(time_choice(m, d, &cand[i], a, &alt_next, &us, err));
        if (i == 0) e->h0_us = isfinite(us) ? us : 0;
        if (i == gemmex) e->gemmex_us = isfinite(us) ? us : 0;
        if (us < best_us) best_us = us, best = i;
    }
    e->tuned = true;
    e->best = cand[best];
    e->n_candidates = n;
    e->rank = best == gemmex ? -1 : best;
    e->best_us = isfinite(best_us) ? best_us : 0;
    if (e->h0.kind == RUN_GEMMEX) e->h0_us = e->gemmex_us;
    m->stats.tune_ms += now_ms() - t0;
    m->stats.shapes_tuned++;
    return LA_OK;
}

/* ============================================================ create / run =========== */

la_status la_cuda_matmul_create(cudaStream_t stream, cublasHandle_t blas, void *ws, size_t ws_bytes,
                                la_cuda_gemm_mode mode, la_cuda_matmul **out, la_err *err) {
    *out = NULL;
    la_cuda_matmul *m = calloc(1, sizeof *m);
    if (!m) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda matmul: out of memory");
    m->stream = stream;
    m->blas = blas;
    m->ws = ws;
    m->ws_bytes = ws_bytes;
    m->mode = mode;
    la_status st = LA_OK;
    cudaError_t e = cudaGetDevice(&m->device);
    if (e == cudaSuccess) e = cudaEventCreate(&m->ev[0]);
    if (e == cudaSuccess) e = cudaEventCreate(&m->ev[1]);
    if (e != cudaSuccess) {
        st = la_err_set(err, LA_ERR_BACKEND, "cuda matmul: device or events: %s", cudaGetErrorString(e));
    } else {
        cublasStatus_t s = cublasLtCreate(&m->lt);
        if (s != CUBLAS_STATUS_SUCCESS) {
            m->lt = NULL;
            st = la_err_set(err, LA_ERR_BACKEND, "cublasLtCreate: %s", cublasGetStatusString(s));
        }
    }
    if (st != LA_OK) {
        la_cuda_matmul_destroy(m);
        return st;
    }
    *out = m;
    return LA_OK;
}

void la_cuda_matmul_destroy(la_cuda_matmul *m) {
    if (!m) return;
    if (m->lt) cublasLtDestroy(m->lt);
    if (m->ev[0]) cudaEventDestroy(m->ev[0]);
    if (m->ev[1]) cudaEventDestroy(m->ev[1]);
    free(m);
}

void la_cuda_matmul_set_mode(la_cuda_matmul *m, la_cuda_gemm_mode mode) { m->mode = mode; }

la_cuda_gemm_mode la_cuda_matmul_mode(const la_cuda_matmul *m) { return m->mode; }

static la_status blas_error(la_err *err, cublasStatus_t s, const la_cuda_matmul_args *a, const char *what) {
    return la_err_set(err, LA_ERR_BACKEND, "%s [%lld x %lld] x [%lld x %lld]^T: %s", what, (long long)a->n_rows,
                      (long long)a->n_in, (long long)a->n_out, (long long)a->n_in, cublasGetStatusString(s));
}

static la_status gemmex_call(la_cuda_matmul *m, const la_cuda_matmul_args *a, la_err *err) {
    cublasStatus_t s = run_gemmex(m, a, a->w);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_error(err, s, a, "cublasGemmEx");
    m->stats.calls_gemmex++;
    return LA_OK;
}

/* The heuristic's first kept algorithm for k (RUN_GEMMEX when cuBLASLt offers none). */
static gemm_choice first_choice(la_cuda_matmul *m, gemm_desc *d, const gemm_key *k) {
    gemm_choice c[GEMM_HEURISTICS];
    int n = 0;
    if (heuristics(m, d, k, c, GEMM_HEURISTICS, &n) != CUBLAS_STATUS_SUCCESS) n = 0;
    return n > 0 ? c[0] : (gemm_choice){.kind = RUN_GEMMEX};
}

/* Shapes above the timing limit: the heuristic's first, remembered per backend in a small
 * LRU (a function of the key, so forgetting and asking again gives the same choice). */
static gemm_choice large_choice(la_cuda_matmul *m, gemm_desc *d, const gemm_key *k) {
    large_entry *victim = &m->large[0];
    m->clock++;
    for (int i = 0; i < GEMM_LARGE_CACHE; i++) {
        large_entry *l = &m->large[i];
        if (l->used && memcmp(&l->key, k, sizeof *k) == 0) {
            l->last_used = m->clock;
            return l->choice;
        }
        if (victim->used && (!l->used || l->last_used < victim->last_used)) victim = l;
    }
    victim->used = true;
    victim->key = *k;
    victim->choice = first_choice(m, d, k);
    victim->last_used = m->clock;
    return victim->choice;
}

/* Shapes up to the timing limit: the cached choice, timing it first where the rules say so
 * (top of this file). */
static la_status small_choice(la_cuda_matmul *m, gemm_desc *d, const gemm_key *k, const la_cuda_matmul_args *a,
                              gemm_choice *out, la_err *err) {
    gemm_entry e;
    bool have = cache_get(k, &e);
    bool want_timing = m->mode == LA_CUDA_GEMM_LT && (have ? !e.tuned : !cache_full());
    if (want_timing) {
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        cudaError_t ce = cudaStreamIsCapturing(m->stream, &cs);
        if (ce != cudaSuccess) return cuda_error(err, ce, a, "cudaStreamIsCapturing");
        if (cs == cudaStreamCaptureStatusNone) {
            LA_TRY(tune(m, d, k, a, &e, err));
            e.key = *k;
            if (e.h0.kind == RUN_GEMMEX) m->stats.shapes_no_lt++;
            /* a full cache after all (another backend filled it): the heuristic's first,
             * as for every shape the cache cannot hold */
            if (!cache_put(&e)) e.tuned = false;
            *out = e.tuned ? e.best : e.h0;
            return LA_OK;
        }
        m->stats.capture_untuned++;
    }
    if (!have) {
        memset(&e, 0, sizeof e);
        e.key = *k;
        e.h0 = first_choice(m, d, k);
        if (e.h0.kind == RUN_GEMMEX) m->stats.shapes_no_lt++;
        (void)cache_put(&e); /* may hand back an entry another backend timed meanwhile */
    }
    *out = m->mode == LA_CUDA_GEMM_LT && e.tuned ? e.best : e.h0;
    return LA_OK;
}

la_status la_cuda_matmul_run(la_cuda_matmul *m, const la_cuda_matmul_args *a, la_err *err) {
    if (m->mode == LA_CUDA_GEMM_GEMMEX) return gemmex_call(m, a, err);
    gemm_desc d;
    if (desc_init(&d, a) != CUBLAS_STATUS_SUCCESS) {
        m->stats.lt_failures++;
        return gemmex_call(m, a, err);
    }
    const gemm_key k = key_of(m, a);
    gemm_choice c;
    if (a->n_rows > LA_CUDA_GEMM_TUNE_MAX_ROWS) c = large_choice(m, &d, &k);
    else LA_TRY(small_choice(m, &d, &k, a, &c, err));
    if (c.kind == RUN_GEMMEX) return gemmex_call(m, a, err);
    cublasStatus_t s = run_choice(m, &d, &c, a, a->w);
    if (s != CUBLAS_STATUS_SUCCESS) {
        (void)cudaGetLastError();
        m->stats.lt_failures++;
        return gemmex_call(m, a, err);
    }
    m->stats.calls_lt++;
    return LA_OK;
}

void la_cuda_matmul_stats(const la_cuda_matmul *m, la_cuda_gemm_stats *out) { *out = m->stats; }

/* ============================================================ report ================= */

/* Append printf output at *n of buf[cap] (truncating); *n counts what was needed. */
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (w <= 0) return;
    if ((size_t)w >= sizeof tmp) w = (int)sizeof tmp - 1;
    for (int i = 0; i < w; i++) {
        if (buf && *n + 1 < cap) buf[*n] = tmp[i];
        (*n)++;
    }
    if (buf && cap) buf[*n < cap ? *n : cap - 1] = '\0';
}

static void append_algo(char *buf, size_t cap, size_t *n, const gemm_choice *c) {
    if (c->kind != RUN_LT) {
        append(buf, cap, n, "null");
        return;
    }
    const cublasLtMatmulAlgo_t *a = &c->algo;
    append(buf, cap, n,
           "{\"id\": %d, \"tile\": %u, \"splitk\": %d, \"reduction\": %u, \"stages\": %u, \"swizzle\": %u, "
           "\"custom\": %u, \"inner_shape\": %u, \"cluster\": %u}",
           algo_i32(a, CUBLASLT_ALGO_CONFIG_ID), algo_u32(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
           algo_i32(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), algo_u32(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
           algo_u32(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), algo_u32(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
           algo_u32(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION), (unsigned)algo_u16(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
           (unsigned)algo_u16(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
}

static int cmp_entry(const void *pa, const void *pb) {
    const gemm_entry *a = pa, *b = pb;
    if (a->key.n_out != b->key.n_out) return a->key.n_out < b->key.n_out ? -1 : 1;
    if (a->key.n_in != b->key.n_in) return a->key.n_in < b->key.n_in ? -1 : 1;
    if (a->key.n_rows != b->key.n_rows) return a->key.n_rows < b->key.n_rows ? -1 : 1;
    return memcmp(&a->key, &b->key, sizeof a->key);
}

size_t la_cuda_matmul_cache_json(const la_cuda_matmul *m, char *buf, size_t cap) {
    const int device = m->device;
    size_t n = 0;
    if (buf && cap) buf[0] = '\0';
    gemm_entry *list = NULL;
    int32_t count = 0;
    pthread_mutex_lock(&g_cache.mu);
    if (g_cache.n > 0) list = malloc(sizeof *list * (size_t)g_cache.n);
    for (int32_t i = 0; list && i < GEMM_CACHE_CAP; i++)
        if (g_cache.e[i].used && g_cache.e[i].key.device == device) list[count++] = g_cache.e[i];
    pthread_mutex_unlock(&g_cache.mu);
    if (count > 1) qsort(list, (size_t)count, sizeof *list, cmp_entry);
    append(buf, cap, &n, "[");
    for (int32_t i = 0; i < count; i++) {
        const gemm_entry *e = &list[i];
        const gemm_choice *c = e->tuned ? &e->best : &e->h0;
        append(buf, cap, &n,
               "%s{\"rows\": %lld, \"out\": %lld, \"in\": %lld, \"tuned\": %s, \"run\": \"%s\", \"algo\": ",
               i ? ", " : "", (long long)e->key.n_rows, (long long)e->key.n_out, (long long)e->key.n_in,
               e->tuned ? "true" : "false", c->kind == RUN_LT ? "lt" : "gemmex");
        append_algo(buf, cap, &n, c);
        append(buf, cap, &n,
               ", \"ws_bytes\": %zu, \"candidates\": %d, \"rank\": %d, \"best_us\": %.2f, \"heuristic_us\": %.2f, "
               "\"gemmex_us\": %.2f, \"heuristic_algo\": ",
               c->kind == RUN_LT ? c->ws_bytes : (size_t)0, e->n_candidates, e->tuned ? e->rank : 0,
               (double)e->best_us, (double)e->h0_us, (double)e->gemmex_us);
        append_algo(buf, cap, &n, &e->h0);
        append(buf, cap, &n, "}");
    }
    append(buf, cap, &n, "]");
    free(list);
    return n;
}
