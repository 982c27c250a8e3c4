/* peak.h — the CPU's arithmetic limits, measured, for the benchmarks that report a fraction of them
 * (bench_peak.c prints them; bench_fp8_gemm.c divides by them): fp32 FMA (AVX-512 `vfmadd231ps`, or AVX2 where
 * there is no AVX-512) and bf16 dot products (AVX-512 BF16 `vdpbf16ps`: 32 products summed into 16 fp32 lanes per
 * instruction), and where the CPU has AMX-BF16 (Intel Xeon since Sapphire Rapids) bf16 tile products (`tdpbf16ps`:
 * 16 × 16 × 32 products an instruction). Each thread runs independent accumulator chains from registers (no memory traffic), so the figure
 * is the issue rate of the units. The chains must cover latency × issue width: with 12, Zen 5 (two 512-bit pipes)
 * reached 420-500 GFLOP/s of vdpbf16ps per thread and with 16, 531-540 (2026-11-28); AVX-512 has 32 registers for
 * 16 chains, AVX2 only 16, so its kernel keeps 12 (more would spill). The chain loop is unrolled so the
 * accumulators stay in registers (without it GCC kept them in memory, and a load and a store per FMA halved the
 * figure). */
#ifndef FL_BENCH_PEAK_H
#define FL_BENCH_PEAK_H
#include <immintrin.h>
#include <omp.h>
#include <string.h>
#include "bench_util.h"
#include "../core/cpu/cpu_amx.h"

#define PEAK_CHAINS_512 16
#define PEAK_CHAINS_256 12
#define PEAK_ITERS (1L << 22)

static volatile float peak_sink;

__attribute__((target("avx512f"))) static double peak_fma512(long iters) {
    __m512 acc[PEAK_CHAINS_512], a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
    for (int c = 0; c < PEAK_CHAINS_512; c++) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
        _Pragma("GCC unroll 16") for (int c = 0; c < PEAK_CHAINS_512; c++) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < PEAK_CHAINS_512; c++) s = _mm512_add_ps(s, acc[c]);
    peak_sink = _mm512_reduce_add_ps(s);
    return (double)iters * PEAK_CHAINS_512 * 16 * 2;   /* 16 lanes, multiply + add */
}

__attribute__((target("avx2,fma"))) static double peak_fma256(long iters) {
    __m256 acc[PEAK_CHAINS_256], a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
    for (int c = 0; c < PEAK_CHAINS_256; c++) acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
        _Pragma("GCC unroll 16") for (int c = 0; c < PEAK_CHAINS_256; c++) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
    __m256 s = acc[0];
    for (int c = 1; c < PEAK_CHAINS_256; c++) s = _mm256_add_ps(s, acc[c]);
    float v[8];
    _mm256_storeu_ps(v, s);
    peak_sink = v[0];
    return (double)iters * PEAK_CHAINS_256 * 8 * 2;
}

__attribute__((target("avx512f,avx512bf16"))) static double peak_dpbf16(long iters) {
    __m512 acc[PEAK_CHAINS_512];
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f80);   /* 1.0 */
    for (int c = 0; c < PEAK_CHAINS_512; c++) acc[c] = _mm512_setzero_ps();
    for (long i = 0; i < iters; i++)
        _Pragma("GCC unroll 16") for (int c = 0; c < PEAK_CHAINS_512; c++) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    __m512 s = acc[0];
    for (int c = 1; c < PEAK_CHAINS_512; c++) s = _mm512_add_ps(s, acc[c]);
    peak_sink = _mm512_reduce_add_ps(s);
    return (double)iters * PEAK_CHAINS_512 * 32 * 2;   /* 32 bf16 pairs, multiply + add */
}

/* AMX-BF16 tile products (tdpbf16ps: 16 × 16 fp32 += 16 × 32 bf16 · 32 × 16 bf16 an instruction): four
 * independent accumulator tiles (0-3) over two A tiles (4, 5) and two B tiles (6, 7), as a GEMM's micro-tile
 * holds them, from the tile registers only. The process must have asked for the tiles (fl_amx_request). */
FL_CPU_AMX static double peak_amx(long iters) {
    static unsigned short one[16 * 32];
    for (int i = 0; i < 16 * 32; i++) one[i] = 0x3f80;   /* 1.0 */
    fl_amx_begin();   /* the core's tile configuration (core/cpu/cpu_amx.h): tiles 0-7, 16 rows of 64 bytes */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, one, 64);
    _tile_loadd(5, one, 64);
    _tile_loadd(6, one, 64);
    _tile_loadd(7, one, 64);
    iters /= 16;   /* an instruction takes ~16 cycles: as long a run as the vector kinds' */
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float out[16 * 16];
    _tile_stored(0, out, 64);
    fl_amx_end();
    peak_sink = out[0];
    return (double)iters * 4 * 16 * 16 * 32 * 2;
}
/* The instruction set a kind is measured with on this CPU ("avx512", "avx2", "avx512_bf16", "amx_bf16"), NULL where
 * the CPU has none for it. kind: "fp32_fma", "bf16_dot" or "bf16_tile". */
static const char *peak_isa(const char *kind) {
    __builtin_cpu_init();
    const int has512 = __builtin_cpu_supports("avx512f");
    if (strcmp(kind, "bf16_tile") == 0) return fl_amx_request() ? "amx_bf16" : NULL;
    if (strcmp(kind, "bf16_dot") == 0) return has512 && __builtin_cpu_supports("avx512bf16") ? "avx512_bf16" : NULL;
    if (has512) return "avx512";
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "avx2" : NULL;
}

/* GFLOP/s of `kind` on `threads` threads: the best of 3 runs, each timing every thread over the same span;
 * 0 where the CPU lacks it (peak_isa NULL). */
static double peak_gflops(const char *kind, int threads) {
    const char *isa = peak_isa(kind);
    if (!isa) return 0;
    double (*k)(long) = strcmp(isa, "amx_bf16") == 0      ? peak_amx
                        : strcmp(isa, "avx512_bf16") == 0 ? peak_dpbf16
                        : strcmp(isa, "avx512") == 0      ? peak_fma512
                                                          : peak_fma256;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double flops = 0, t0 = bench_now();
        #pragma omp parallel num_threads(threads) reduction(+ : flops)
        flops += k(PEAK_ITERS);
        const double dt = bench_now() - t0;
        if (flops / dt / 1e9 > best) best = flops / dt / 1e9;
    }
    return best;
}
#endif
