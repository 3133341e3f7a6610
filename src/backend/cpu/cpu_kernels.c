/* Run-time choice of the kernel table (cpu_kernels.h). */
#include "backend/cpu/cpu_kernels.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
/* cpuid feature bits that __builtin_cpu_supports does not name in every compiler (clang 14
 * knows neither "f16c" nor "avx512bf16"): F16C is leaf 1 ECX bit 29, AVX512_BF16 leaf 7
 * subleaf 1 EAX bit 5 (Intel SDM vol. 2A, CPUID). Callers check AVX / AVX-512 first, which
 * covers the OS saving the registers. */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

static bool has_avx512bf16(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
}
#endif

bool la_cpu_isa_supported(la_cpu_isa isa) {
    switch (isa) {
    case LA_CPU_ISA_PORTABLE: return true;
#if defined(__x86_64__) || defined(__i386__)
    case LA_CPU_ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case LA_CPU_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma") && has_f16c();
#endif
    default: return false;
    }
}

/* The AVX-512 table with the AVX512_BF16 kernels where cpuid has them (built once). */
static la_cpu_kernels g_avx512;
static pthread_once_t g_avx512_once = PTHREAD_ONCE_INIT;

static void avx512_init(void) {
    g_avx512 = la_cpu_kernels_avx512;
#if (defined(__x86_64__) || defined(__i386__)) && defined(LA_HAVE_AVX512BF16)
    if (has_avx512bf16()) {
        g_avx512.gemm_nt_bf16x = la_cpu_avx512bf16_gemm_nt_bf16x;
        g_avx512.to_bf16 = la_cpu_avx512bf16_to_bf16;
    }
#endif
}

const la_cpu_kernels *la_cpu_kernels_for(la_cpu_isa isa) {
    if (!la_cpu_isa_supported(isa)) return NULL;
    const la_cpu_kernels *k = NULL;
    switch (isa) {
    case LA_CPU_ISA_PORTABLE: k = &la_cpu_kernels_portable; break;
    case LA_CPU_ISA_AVX2: k = &la_cpu_kernels_avx2; break;
    case LA_CPU_ISA_AVX512:
        pthread_once(&g_avx512_once, avx512_init);
        k = &g_avx512;
        break;
    default: break;
    }
    return k && k->gemm_nt ? k : NULL; /* a table this compiler could not build is empty */
}

int la_cpu_isa_env(la_cpu_isa *cap) {
    static const char *const names[LA_CPU_ISA_COUNT] = {"portable", "avx2", "avx512"};
    const char *env = getenv("LA_CPU_ISA");
    if (!env || !*env) return 0;
    for (int i = 0; i < LA_CPU_ISA_COUNT; i++)
        if (!strcmp(env, names[i])) {
            *cap = (la_cpu_isa)i;
            return 1;
        }
    return -1;
}

const la_cpu_kernels *la_cpu_kernels_get(void) {
    la_cpu_isa cap = (la_cpu_isa)(LA_CPU_ISA_COUNT - 1);
    (void)la_cpu_isa_env(&cap); /* another value: no cap (the backend refuses it at create) */
    for (int i = (int)cap; i > LA_CPU_ISA_PORTABLE; i--) {
        const la_cpu_kernels *k = la_cpu_kernels_for((la_cpu_isa)i);
        if (k) return k;
    }
    return &la_cpu_kernels_portable;
}

int64_t la_cpu_packed_elems(int64_t n, int64_t k) {
    const int64_t np = (n + LA_CPU_PACK_ROWS - 1) / LA_CPU_PACK_ROWS * LA_CPU_PACK_ROWS;
    return np * ((k + LA_CPU_PACK_K - 1) / LA_CPU_PACK_K * LA_CPU_PACK_K);
}

/* Offset of element (j, c) in a packed matrix whose k is padded to kp. */
static inline int64_t packed_at(int64_t j, int64_t c, int64_t kp) {
    return (j / LA_CPU_PACK_ROWS) * LA_CPU_PACK_ROWS * kp + (c / LA_CPU_PACK_K) * LA_CPU_PACK_ROWS * LA_CPU_PACK_K +
           (j % LA_CPU_PACK_ROWS) * LA_CPU_PACK_K + c % LA_CPU_PACK_K;
}

void la_cpu_pack(void *dst, la_dtype dt, const void *src, la_dtype st, int64_t n, int64_t k) {
    const int64_t kp = (k + LA_CPU_PACK_K - 1) / LA_CPU_PACK_K * LA_CPU_PACK_K;
    const size_t des = la_dtype_size(dt), ses = la_dtype_size(st);
    memset(dst, 0, (size_t)la_cpu_packed_elems(n, k) * des);
    float row[LA_CPU_PACK_K];
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < k; c += LA_CPU_PACK_K) { /* one 16-element piece */
            const int64_t len = k - c < LA_CPU_PACK_K ? k - c : LA_CPU_PACK_K;
            const char *s = (const char *)src + ((size_t)j * (size_t)k + (size_t)c) * ses;
            char *d = (char *)dst + (size_t)packed_at(j, c, kp) * des;
            if (dt == st) {
                memcpy(d, s, (size_t)len * des);
                continue;
            }
            la_convert_to_f32(row, s, st, (size_t)len);
            for (int64_t i = 0; i < len; i++) {
                if (dt == LA_DTYPE_F32) {
                    memcpy(d + 4 * i, &row[i], 4);
                } else {
                    uint16_t h = dt == LA_DTYPE_BF16 ? la_f32_to_bf16(row[i]) : la_f32_to_f16(row[i]);
                    memcpy(d + 2 * i, &h, 2);
                }
            }
        }
}

void la_cpu_unpack_rows(const la_cpu_kernels *kn, float *dst, const void *w, la_dtype wt, int64_t k, int64_t j0,
                        int64_t j1) {
    const int64_t kp = (k + LA_CPU_PACK_K - 1) / LA_CPU_PACK_K * LA_CPU_PACK_K;
    const size_t es = la_dtype_size(wt);
    for (int64_t j = j0; j < j1; j++)
        for (int64_t c = 0; c < k; c += LA_CPU_PACK_K)
            kn->to_f32(dst + (j - j0) * k + c, (const char *)w + (size_t)packed_at(j, c, kp) * es, wt,
                       k - c < LA_CPU_PACK_K ? k - c : LA_CPU_PACK_K);
}

bool la_cpu_dtype_fast(la_dtype t) {
    return t == LA_DTYPE_F32 || la_cpu_isa_supported(LA_CPU_ISA_AVX2);
}
