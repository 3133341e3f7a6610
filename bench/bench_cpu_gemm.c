/* Weight products per shape (not a test): our gemm_nt (cpu_kernels.h) on packed f32 / bf16
 * weights against OpenBLAS sgemm (the f32 weight as it is; the bf16 one unpacked to f32 first,
 * as the CPU backend's BLAS path does), and gemm_nt_bf16x (bf16 activations: --cpu-weights
 * bf16-dot) where the CPU has it, one thread, for x rows m and Llama-3.2-1B's shapes.
 * The CPU backend runs gemm_nt up to its kernel table's gemm_max_rows_* and BLAS above: this
 * is the measurement behind those crossovers.
 *
 *   bench_cpu_gemm [--rows 1,2,4,8,16,32,64,128,512] [--shapes 2048x2048,8192x2048,2048x8192]
 *                  [--out FILE.json]
 *
 * A shape NxK is W [N, K] (n_out, n_in). Each cell: the best of 5 timed runs after one
 * warm-up, as GFLOP/s (2 m N K per product); weights are 16-32 MiB: a decode-sized product
 * reads them from memory, not cache.
 */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "base/timer.h"
#include "bench/machine.h"

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"rows", required_argument, 0, 1}, {"shapes", required_argument, 0, 2},
                                         {"out", required_argument, 0, 3}, {0, 0, 0, 0}};
    int rows[32] = {1, 2, 4, 8, 16, 32, 64, 128, 512}, n_rows = 9, c;
    int shapes[16][2] = {{2048, 2048}, {8192, 2048}, {2048, 8192}}, n_shapes = 3;
    const char *out = NULL;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 1) n_rows = parse_list(optarg, rows, 32);
        else if (c == 2) {
            n_shapes = 0;
            for (const char *s = optarg; *s && n_shapes < 16;) {
                char *end;
                shapes[n_shapes][0] = (int)strtol(s, &end, 10);
                if (*end != 'x') return 2;
                shapes[n_shapes][1] = (int)strtol(end + 1, &end, 10);
                n_shapes++;
                s = *end == ',' ? end + 1 : end;
            }
        } else if (c == 3) out = optarg;
        else return 2;
    }
    if (n_rows < 1) return 2;
    openblas_set_num_threads(1);
    const la_cpu_kernels *kn = la_cpu_kernels_get();
    cJSON *root = cJSON_CreateObject();
    char *cmd = la_command_line(argc, argv);
    cJSON_AddStringToObject(root, "command", cmd);
    free(cmd);
    cJSON_AddItemToObject(root, "machine", la_machine_json());
    cJSON_AddStringToObject(root, "kernels", kn->name);
    char load[64];
    la_machine_loadavg(load, sizeof load);
    cJSON_AddStringToObject(root, "loadavg_before", load);
    cJSON *cells = cJSON_AddArrayToObject(root, "cells");
    printf("%-11s %5s %10s %10s %10s %10s %10s   GFLOP/s, one thread (%s)\n", "shape", "rows", "ours f32",
           "ours bf16", "blas f32", "blas bf16", "bf16-dot", kn->name);
    for (int si = 0; si < n_shapes; si++) {
        const int64_t N = shapes[si][0], K = shapes[si][1];
        float *w = malloc(sizeof(float) * (size_t)(N * K));
        for (int64_t i = 0; i < N * K; i++) w[i] = (float)((i * 7919) % 1000) * 1e-4f - 0.05f;
        int64_t pe = la_cpu_packed_elems(N, K);
        float *wp32 = malloc(sizeof(float) * (size_t)pe);
        uint16_t *wp16 = malloc(sizeof(uint16_t) * (size_t)pe);
        float *tile = malloc(sizeof(float) * (size_t)(64 * K));
        la_cpu_pack(wp32, LA_DTYPE_F32, w, LA_DTYPE_F32, N, K);
        la_cpu_pack(wp16, LA_DTYPE_BF16, w, LA_DTYPE_F32, N, K);
        for (int ri = 0; ri < n_rows; ri++) {
            const int64_t m = rows[ri];
            float *x = malloc(sizeof(float) * (size_t)(m * K)), *y = malloc(sizeof(float) * (size_t)(m * N));
            for (int64_t i = 0; i < m * K; i++) x[i] = (float)(i % 17) * 0.01f;
            const int64_t kp = (K + 15) & ~(int64_t)15; /* gemm_nt_bf16x's row stride */
            uint16_t *xb = calloc((size_t)(m * kp), sizeof(uint16_t));
            for (int64_t i = 0; i < m; i++) kn->to_bf16(xb + i * kp, x + i * K, K);
            double best[5];
            for (int v = 0; v < 5; v++) {
                best[v] = 1e30;
                if (v == 4 && !kn->gemm_nt_bf16x) continue;
                for (int rep = 0; rep < 6; rep++) {
                    double t0 = la_now_ms();
                    if (v == 0) kn->gemm_nt(x, K, m, wp32, LA_DTYPE_F32, K, 0, N, NULL, y, N);
                    else if (v == 1) kn->gemm_nt(x, K, m, wp16, LA_DTYPE_BF16, K, 0, N, NULL, y, N);
                    else if (v == 4) kn->gemm_nt_bf16x(xb, kp, m, wp16, K, 0, N, NULL, y, N);
                    else /* the backend's BLAS path: 64-column tiles unpacked, then sgemm */
                        for (int64_t j = 0; j < N; j += 64) {
                            const int64_t jw = N - j < 64 ? N - j : 64;
                            la_cpu_unpack_rows(kn, tile, v == 2 ? (const void *)wp32 : (const void *)wp16,
                                               v == 2 ? LA_DTYPE_F32 : LA_DTYPE_BF16, K, j, j + jw);
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)jw, (int)K, 1.0f, x,
                                        (int)K, tile, (int)K, 0.0f, y + j, (int)N);
                        }
                    double dt = la_now_ms() - t0;
                    if (rep > 0 && dt < best[v]) best[v] = dt;
                }
            }
            double flop = 2.0 * (double)m * (double)N * (double)K;
            char dot[16] = "-"; /* no AVX512_BF16 */
            if (kn->gemm_nt_bf16x) snprintf(dot, sizeof dot, "%.1f", flop / best[4] / 1e6);
            printf("%5lldx%-5lld %5lld %10.1f %10.1f %10.1f %10.1f %10s\n", (long long)N, (long long)K,
                   (long long)m, flop / best[0] / 1e6, flop / best[1] / 1e6, flop / best[2] / 1e6,
                   flop / best[3] / 1e6, dot);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "n_out", (double)N);
            cJSON_AddNumberToObject(o, "n_in", (double)K);
            cJSON_AddNumberToObject(o, "rows", (double)m);
            cJSON_AddNumberToObject(o, "ours_f32_gflops", flop / best[0] / 1e6);
            cJSON_AddNumberToObject(o, "ours_bf16_gflops", flop / best[1] / 1e6);
            cJSON_AddNumberToObject(o, "blas_f32_gflops", flop / best[2] / 1e6);
            cJSON_AddNumberToObject(o, "blas_bf16_gflops", flop / best[3] / 1e6);
            if (kn->gemm_nt_bf16x) cJSON_AddNumberToObject(o, "ours_bf16_dot_gflops", flop / best[4] / 1e6);
            cJSON_AddItemToArray(cells, o);
            free(x), free(y), free(xb);
        }
        free(w), free(wp32), free(wp16), free(tile);
    }
    la_machine_loadavg(load, sizeof load);
    cJSON_AddStringToObject(root, "loadavg_after", load);
    if (out && la_json_write_file(out, root) != 0) fprintf(stderr, "bench_cpu_gemm: cannot write %s\n", out);
    cJSON_Delete(root);
    return 0;
}
