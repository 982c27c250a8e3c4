/* bench_peak.c — the arithmetic limits of this CPU, so that every training-step figure of `make bench` can
 * be read as a fraction of what the cores can do: fp32 FMA (AVX-512 `vfmadd231ps`, or AVX2 where there is
 * no AVX-512) and bf16 dot products (AVX-512 BF16 `vdpbf16ps`: 32 products summed into 16 fp32 lanes per
 * instruction). Each thread runs independent accumulator chains from registers (no memory traffic), so the
 * figure is the issue rate of the FMA units; run at 1 and at N threads. The chain loop is unrolled so the
 * accumulators stay in registers (without it GCC kept them in memory, and a load and a store per FMA halved
 * the figure).
 * Usage: bench_peak [THREADS...] (default: 1 and the OpenMP maximum). Prints one line per (kind, threads):
 *   peak kind=fp32_fma threads=1 gflops=...
 * A kind the CPU lacks prints gflops=0 with a reason. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAINS 12            /* independent accumulators: covers 4-cycle latency on 2-3 FMA ports */
#define ITERS (1L << 24)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile float sink;

__attribute__((target("avx512f"))) static double fma512(long iters) {
    __m512 acc[CHAINS], a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
        _Pragma("GCC unroll 16") for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    sink = _mm512_reduce_add_ps(s);
    return (double)iters * CHAINS * 16 * 2;   /* 16 lanes, multiply + add */
}

__attribute__((target("avx2,fma"))) static double fma256(long iters) {
    __m256 acc[CHAINS], a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
        _Pragma("GCC unroll 16") for (int c = 0; c < CHAINS; c++) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    __m256 s = acc[0];
    for (int c = 1; c < CHAINS; c++) s = _mm256_add_ps(s, acc[c]);
    float v[8];
    _mm256_storeu_ps(v, s);
    sink = v[0];
    return (double)iters * CHAINS * 8 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) static double dpbf16(long iters) {
    __m512 acc[CHAINS];
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f80);   /* 1.0 */
    for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_setzero_ps();
    for (long i = 0; i < iters; i++)
        _Pragma("GCC unroll 16") for (int c = 0; c < CHAINS; c++) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < CHAINS; c++) s = _mm512_add_ps(s, acc[c]);
    sink = _mm512_reduce_add_ps(s);
    return (double)iters * CHAINS * 32 * 2;   /* 32 bf16 pairs, multiply + add */
}

typedef double (*kernel)(long);

/* GFLOP/s of k on `threads` threads: the best of 3 runs, each timing every thread over the same span. */
static double measure(kernel k, int threads) {
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double flops = 0, t0 = now();
        #pragma omp parallel num_threads(threads) reduction(+ : flops)
        flops += k(ITERS / 4);
        double dt = now() - t0;
        if (flops / dt / 1e9 > best) best = flops / dt / 1e9;
    }
    return best;
}

int main(int argc, char **argv) {
    int counts[8], n = 0;
    for (int i = 1; i < argc && n < 8; i++) counts[n++] = atoi(argv[i]);
    if (n == 0) {
        counts[n++] = 1;
        if (omp_get_max_threads() > 1) counts[n++] = omp_get_max_threads();
    }
    __builtin_cpu_init();
    int has512 = __builtin_cpu_supports("avx512f"), hasbf16 = has512 && __builtin_cpu_supports("avx512bf16");
    int hasavx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    for (int i = 0; i < n; i++) {
        int t = counts[i] > 0 ? counts[i] : 1;
        if (has512) printf("peak kind=fp32_fma threads=%d gflops=%.1f isa=avx512\n", t, measure(fma512, t));
        else if (hasavx2) printf("peak kind=fp32_fma threads=%d gflops=%.1f isa=avx2\n", t, measure(fma256, t));
        else printf("peak kind=fp32_fma threads=%d gflops=0 (no AVX2/FMA)\n", t);
        if (hasbf16) printf("peak kind=bf16_dot threads=%d gflops=%.1f isa=avx512_bf16\n", t, measure(dpbf16, t));
        else printf("peak kind=bf16_dot threads=%d gflops=0 (no AVX-512 BF16 on this CPU)\n", t);
        fflush(stdout);
    }
    return 0;
}
