/* bench_gpu --ablate (bench_gpu.h): what each operation costs inside a step, timing only. */
#include "bench_gpu.h"

#ifdef LA_HAVE_CUDA
#include <stdio.h>
#include <string.h>

/* A TTFT or TPOT row with operations taken out of the step: the backend's op table is swapped, for
 * that row's forwards only, for a copy whose named entries do nothing (or less), so the
 * graph replays the step without them. The difference to the full row is what the
 * operation costs in the stream, overlap (PDL, graphs) included, which ncu's kernels replayed
 * one by one do not show (GPU_NOTES.md, "The 1B shape kernel by kernel"). The answers are
 * meaningless, as with every random-weight row. */
enum {
    ABL_ATTENTION = 1u << 0, /* attention: no-op */
    ABL_NORM = 1u << 1,      /* add_rmsnorm, rmsnorm: no-op */
    ABL_QKV = 1u << 2,       /* qkv_kv_write: no-op (the QKV GEMM, RoPE and the KV write) */
    ABL_KV_WRITE = 1u << 3,  /* qkv_kv_write: the QKV GEMM alone (matmul_group) */
    ABL_O = 1u << 4,         /* matmul W_o: no-op */
    ABL_GATE_UP = 1u << 5,   /* gate_up_swiglu: no-op */
    ABL_SWIGLU = 1u << 6,    /* gate_up_swiglu: the gate/up GEMM alone (matmul_group) */
    ABL_DOWN = 1u << 7,      /* matmul W_down: no-op */
    ABL_LM_HEAD = 1u << 8,   /* matmul lm_head: no-op */
};
static const struct {
    const char *name;
    uint32_t bit;
} k_ablations[] = {{"attention", ABL_ATTENTION}, {"norm", ABL_NORM},       {"qkv", ABL_QKV},
                   {"kv_write", ABL_KV_WRITE},   {"o", ABL_O},             {"gate_up", ABL_GATE_UP},
                   {"swiglu", ABL_SWIGLU},       {"down", ABL_DOWN},       {"lm_head", ABL_LM_HEAD}};

static uint32_t g_ablate;              /* the row's ABL_* set */
static const la_backend_ops *g_real;  /* the backend's own table */
static la_backend_ops g_ablated;      /* g_real with the ablated entries replaced */

static la_status abl_attention(la_backend *be, int32_t layer, const la_act *q, la_act *out, la_err *err) {
    return g_ablate & ABL_ATTENTION ? LA_OK : g_real->attention(be, layer, q, out, err);
}
static la_status abl_rmsnorm(la_backend *be, const la_act *x, la_weight_kind w, int32_t layer, la_act *out,
                             la_err *err) {
    return g_ablate & ABL_NORM ? LA_OK : g_real->rmsnorm(be, x, w, layer, out, err);
}
static la_status abl_add_rmsnorm(la_backend *be, la_act *x, const la_act *y, la_weight_kind w, int32_t layer,
                                 la_act *out, la_err *err) {
    return g_ablate & ABL_NORM ? LA_OK : g_real->add_rmsnorm(be, x, y, w, layer, out, err);
}
static la_status abl_qkv_kv_write(la_backend *be, const la_act *x, int32_t layer, la_act *q, la_act *k, la_act *v,
                                  la_err *err) {
    static const la_weight_kind qkv[3] = {LA_W_Q, LA_W_K, LA_W_V};
    if (g_ablate & ABL_QKV) return LA_OK;
    if (g_ablate & ABL_KV_WRITE) return g_real->matmul_group(be, x, qkv, 3, layer, (la_act *const[]){q, k, v}, err);
    return g_real->qkv_kv_write(be, x, layer, q, k, v, err);
}
static la_status abl_matmul(la_backend *be, const la_act *x, la_weight_kind w, int32_t layer, la_act *out,
                            la_err *err) {
    if ((w == LA_W_O && g_ablate & ABL_O) || (w == LA_W_DOWN && g_ablate & ABL_DOWN) ||
        (w == LA_W_LM_HEAD && g_ablate & ABL_LM_HEAD))
        return LA_OK;
    return g_real->matmul(be, x, w, layer, out, err);
}
static la_status abl_gate_up_swiglu(la_backend *be, const la_act *x, int32_t layer, la_act *gate, la_act *up,
                                    la_err *err) {
    static const la_weight_kind gu[2] = {LA_W_GATE, LA_W_UP};
    if (g_ablate & ABL_GATE_UP) return LA_OK;
    if (g_ablate & ABL_SWIGLU) return g_real->matmul_group(be, x, gu, 2, layer, (la_act *const[]){gate, up}, err);
    return g_real->gate_up_swiglu(be, x, layer, gate, up, err);
}

/* Swap bn->be's op table for the ablated one while g_ablate is set (restore: ablate 0). */
static void ablate_set(bench *bn, uint32_t ablate) {
    if (!g_real) {
        g_real = bn->be->ops;
        g_ablated = *g_real;
        g_ablated.attention = abl_attention;
        g_ablated.rmsnorm = abl_rmsnorm;
        if (g_real->add_rmsnorm) g_ablated.add_rmsnorm = abl_add_rmsnorm;
        if (g_real->qkv_kv_write && g_real->matmul_group) g_ablated.qkv_kv_write = abl_qkv_kv_write;
        g_ablated.matmul = abl_matmul;
        if (g_real->gate_up_swiglu && g_real->matmul_group) g_ablated.gate_up_swiglu = abl_gate_up_swiglu;
    }
    g_ablate = ablate;
    bn->be->ops = ablate ? &g_ablated : g_real;
}

double ablated_forward(bench *bn, la_batch *batch) {
    if (bn->ablate && batch->n_logit_rows == 0) {
        fprintf(stderr, "bench_gpu: --ablate: a batch without logit rows is not ablated\n");
        bn->failures++;
        return -1;
    }
    ablate_set(bn, bn->ablate);
    const double ms = timed_forward(bn, batch);
    ablate_set(bn, 0);
    return ms;
}

const char *ablate_name(uint32_t a, char *buf, size_t cap) {
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof k_ablations / sizeof k_ablations[0]; i++)
        if (a & k_ablations[i].bit)
            snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? "+" : "", k_ablations[i].name);
    if (!buf[0]) snprintf(buf, cap, "none");
    return buf;
}

bool ablate_parse(const char *arg, uint32_t *rows, int *n_rows) {
    char list[256];
    if (strlen(arg) >= sizeof list) {
        fprintf(stderr, "bench_gpu: --ablate: a list of at most %zu characters\n", sizeof list - 1);
        return false;
    }
    snprintf(list, sizeof list, "%s", arg);
    int n_ablate = 0;
    for (char *save = NULL, *row = strtok_r(list, ",", &save); row; row = strtok_r(NULL, ",", &save)) {
        uint32_t a = 0;
        for (char *s2 = NULL, *tok = strtok_r(row, "+", &s2); tok; tok = strtok_r(NULL, "+", &s2)) {
            size_t k = 0, n = sizeof k_ablations / sizeof k_ablations[0];
            while (k < n && strcmp(k_ablations[k].name, tok)) k++;
            if (k == n && strcmp(tok, "none")) {
                fprintf(stderr, "bench_gpu: --ablate %s: expected none or some of attention, norm, qkv, "
                                "kv_write, o, gate_up, swiglu, down, lm_head ('+' joins, ',' separates rows)\n",
                        tok);
                return false;
            }
            if (k < n) a |= k_ablations[k].bit;
        }
        if (n_ablate == LA_BENCH_MAX_ABLATIONS) {
            fprintf(stderr, "bench_gpu: --ablate: at most %d rows\n", LA_BENCH_MAX_ABLATIONS);
            return false;
        }
        rows[n_ablate++] = a;
    }
    if (n_ablate == 0) {
        fprintf(stderr, "bench_gpu: --ablate: no rows\n");
        return false;
    }
    *n_rows = n_ablate;
    return true;
}
#endif
