/* GEMM algorithms under the GPU's power cap (bench/GPU_NOTES.md). A sustained Llama-3-8B
 * recompute at 8K runs at the H200's 700 W limit, where a GEMM's time follows its energy
 * per FLOP rather than its speed at full clock. This times, for the prefill's GEMM shapes
 * at M rows (bf16 in, f32 accumulate, bf16 out; the backend's y = x W^T, W the row-major
 * [n_out, n_in] weight), cublasGemmEx's default (what the backend runs) and every
 * algorithm cuBLASLt's heuristic offers, each in sustained back-to-back loops of --ms
 * milliseconds, the candidates interleaved over --rounds rounds so drift in the GPU's state
 * spreads over all of them. Random operands (uniform activations in [-1, 1], weights in
 * [-0.05, 0.05]: zeros would draw less power). Not a test.
 *
 *   gemm_power [--rows M] [--algos N] [--ms T] [--rounds R] [--commit SHA] [--out FILE]
 *
 * Defaults: M 8192, 12 algorithms per shape, 400 ms per loop, 2 rounds. Prints one line per
 * candidate (median ms per GEMM over the rounds, TFLOP/s, the algorithm's tile / stages /
 * split-K / cluster ids) and writes the same as JSON. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef LA_HAVE_CUDA
int main(void) {
    fprintf(stderr, "gemm_power: this build has no CUDA backend (nvcc was not found)\n");
    return 1;
}
#else
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define MAX_ALGOS 32
#define WS_BYTES ((size_t)32 << 20) /* the backend's cuBLAS workspace (cuda_backend.c) */

#define CK(call)                                                                                     \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            fprintf(stderr, "gemm_power: %s: %s\n", #call, cudaGetErrorString(e_));                  \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

typedef struct shape {
    const char *name; /* the backend's matmul that has it */
    int64_t n, k;     /* n_out, n_in */
} shape;

/* Llama-3-8B: hidden 4096, 32 / 8 heads of 128, intermediate 14336 */
static const shape SHAPES[] = {
    {"q_o", 4096, 4096}, {"k_v", 1024, 4096}, {"gate_up", 14336, 4096}, {"down", 4096, 14336}};

typedef struct cand {
    int lt;                      /* 0: cublasGemmEx default; 1: cuBLASLt algo */
    cublasLtMatmulAlgo_t algo;
    int tile, stages, splitk, cluster, swizzle, id;
    double ms[16];               /* per round */
} cand;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* uniform [-1, 1) */
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) & 0xffffff) / (float)(1 << 23) - 1.f;
}
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static void *dev_random(size_t n, float scale) {
    uint16_t *h = malloc(n * 2);
    if (!h) exit(1);
    for (size_t i = 0; i < n; i++) h[i] = to_bf16(urand() * scale);
    void *d;
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at) {
    int v = -1;
    size_t w = 0;
    uint32_t u = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, at, &u, sizeof u, &w) == CUBLAS_STATUS_SUCCESS) v = (int)u;
    return v;
}

int main(int argc, char **argv) {
    int64_t m = 8192;
    int n_algos = 12, rounds = 2;
    double loop_ms = 400;
    const char *out_path = NULL, *commit = "unknown";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) m = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--algos") && i + 1 < argc) n_algos = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ms") && i + 1 < argc) loop_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "--commit") && i + 1 < argc) commit = argv[++i];
        else {
            fprintf(stderr, "usage: gemm_power [--rows M] [--algos N] [--ms T] [--rounds R] [--commit SHA] [--out FILE]\n");
            return 2;
        }
    }
    if (m < 1 || n_algos < 1 || n_algos > MAX_ALGOS || rounds < 1 || rounds > 16 || loop_ms <= 0) {
        fprintf(stderr, "gemm_power: bad arguments\n");
        return 2;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *ws;
    CK(cudaMalloc(&ws, WS_BYTES));
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS || cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "gemm_power: cuBLAS init failed\n");
        return 1;
    }
    cublasSetWorkspace(blas, ws, WS_BYTES);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    FILE *out = out_path ? fopen(out_path, "w") : NULL;
    if (out_path && !out) {
        fprintf(stderr, "gemm_power: cannot write %s\n", out_path);
        return 1;
    }
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    if (out) {
        fprintf(out, "{\n  \"command\": \"");
        for (int i = 0; i < argc; i++) fprintf(out, "%s%s", i ? " " : "", argv[i]);
        fprintf(out, "\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n  \"gpu\": \"%s\",\n  \"rows\": %lld,\n"
                     "  \"loop_ms\": %.0f,\n  \"rounds\": %d,\n  \"shapes\": [",
                commit, date, prop.name, (long long)m, loop_ms, rounds);
    }
    const float alpha = 1.f, beta = 0.f;
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        const shape *sh = &SHAPES[si];
        void *x = dev_random((size_t)(m * sh->k), 1.f), *w = dev_random((size_t)(sh->n * sh->k), 0.05f);
        void *y;
        CK(cudaMalloc(&y, (size_t)(m * sh->n) * 2));
        /* column-major view, as gemm() in cuda_backend.c: y^T [n, m] = W [k, n]^T x^T [k, m] */
        cublasLtMatmulDesc_t op;
        cublasLtMatrixLayout_t la, lb, lc;
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
        cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, (uint64_t)sh->k, (uint64_t)sh->n, sh->k);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, (uint64_t)sh->k, (uint64_t)m, sh->k);
        cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, (uint64_t)sh->n, (uint64_t)m, sh->n);
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulPreferenceCreate(&pref);
        size_t wsb = WS_BYTES;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
        cublasLtMatmulHeuristicResult_t res[MAX_ALGOS];
        int n_res = 0;
        cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, n_algos, res, &n_res);
        cand c[MAX_ALGOS + 1];
        int nc = 0;
        memset(c, 0, sizeof c);
        c[nc++].lt = 0;
        for (int i = 0; i < n_res; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
            cand *k = &c[nc++];
            k->lt = 1;
            k->algo = res[i].algo;
            k->id = algo_attr(&k->algo, CUBLASLT_ALGO_CONFIG_ID);
            k->tile = algo_attr(&k->algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
            k->stages = algo_attr(&k->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
            k->splitk = algo_attr(&k->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
            k->swizzle = algo_attr(&k->algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
            k->cluster = algo_attr(&k->algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
        }
        const double flop = 2.0 * (double)m * (double)sh->n * (double)sh->k;
        /* one GEMM of candidate i; false when it fails */
#define RUN(i)                                                                                                  \
    (c[i].lt ? cublasLtMatmul(lt, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &c[i].algo, ws, WS_BYTES, 0) == \
                   CUBLAS_STATUS_SUCCESS                                                                        \
             : cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)sh->n, (int)m, (int)sh->k, &alpha, w,         \
                            CUDA_R_16BF, (int)sh->k, x, CUDA_R_16BF, (int)sh->k, &beta, y, CUDA_R_16BF,         \
                            (int)sh->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS)
        int iters[MAX_ALGOS + 1];
        for (int i = 0; i < nc; i++) { /* warm-up and the loop length */
            float ms = 0;
            bool ok = true;
            for (int r = 0; r < 3 && ok; r++) ok = RUN(i);
            CK(cudaEventRecord(e0, 0));
            for (int r = 0; r < 5 && ok; r++) ok = RUN(i);
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            iters[i] = ok ? (int)(loop_ms / (ms / 5)) + 1 : 0;
        }
        for (int r = 0; r < rounds; r++)
            for (int j = 0; j < nc; j++) {
                const int i = r % 2 ? nc - 1 - j : j; /* forward, then backward */
                if (!iters[i]) continue;
                float ms = 0;
                CK(cudaEventRecord(e0, 0));
                for (int t = 0; t < iters[i]; t++) (void)RUN(i);
                CK(cudaEventRecord(e1, 0));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                c[i].ms[r] = ms / iters[i];
            }
        if (out) fprintf(out, "%s\n    {\"shape\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"candidates\": [", si ? "," : "",
                         sh->name, (long long)m, (long long)sh->n, (long long)sh->k);
        double ref = 0;
        for (int i = 0; i < nc; i++) {
            if (!iters[i]) {
                printf("%-8s %s %2d failed\n", sh->name, c[i].lt ? "lt" : "gemmex", i);
                continue;
            }
            double v[16];
            memcpy(v, c[i].ms, sizeof(double) * (size_t)rounds);
            qsort(v, (size_t)rounds, sizeof v[0], cmp_double);
            const double med = rounds % 2 ? v[rounds / 2] : 0.5 * (v[rounds / 2 - 1] + v[rounds / 2]);
            if (i == 0) ref = med;
            printf("%-8s %-6s #%-2d  %8.4f ms  %6.1f TFLOP/s  %+5.1f%% vs gemmex  id %d tile %d stages %d splitk %d "
                   "cluster %d swizzle %d\n",
                   sh->name, c[i].lt ? "lt" : "gemmex", i, med, flop / med / 1e9, 100.0 * (med / ref - 1.0), c[i].id,
                   c[i].tile, c[i].stages, c[i].splitk, c[i].cluster, c[i].swizzle);
            if (out) {
                fprintf(out, "%s\n      {\"api\": \"%s\", \"heuristic_rank\": %d, \"ms\": %.5f, \"tflop_s\": %.1f, "
                             "\"vs_gemmex\": %.4f, \"algo_id\": %d, \"tile_id\": %d, \"stages_id\": %d, \"splitk\": %d, "
                             "\"cluster_id\": %d, \"swizzle\": %d, \"ms_per_round\": [",
                        i ? "," : "", c[i].lt ? "cublasLt" : "cublasGemmEx", i ? i - 1 : -1, med, flop / med / 1e9,
                        med / ref, c[i].id, c[i].tile, c[i].stages, c[i].splitk, c[i].cluster, c[i].swizzle);
                for (int r = 0; r < rounds; r++) fprintf(out, "%s%.5f", r ? ", " : "", c[i].ms[r]);
                fprintf(out, "]}");
            }
        }
        fflush(stdout);
        if (out) fprintf(out, "\n    ]}");
#undef RUN
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
        cudaFree(x), cudaFree(w), cudaFree(y);
    }
    if (out) {
        fprintf(out, "\n  ]\n}\n");
        fclose(out);
    }
    cublasLtDestroy(lt);
    cublasDestroy(blas);
    cudaFree(ws);
    return 0;
}
#endif
