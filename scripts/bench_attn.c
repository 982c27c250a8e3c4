/* bench_attn.c — one call of CPU bf16 attention (fl_cpu_sdpa_causal_fwd / _bwd with bf16 = true), the
 * per-head kernels (cpu_nn_attn_bf16.c with AVX-512 BF16, else its AVX2 + FMA family cpu_nn_attn_fma.c) against
 * the batched GEMMs they replace, best of R repetitions; or (MODE f32) fp32 attention, the AVX2 + FMA family's
 * fp32 form (fl_cpu_attn_f32_*) against the batched fp32 GEMMs. GFLOP/s counts
 * 4·B·H·T²·D forward and twice that backward (the full, unmasked products).
 * Usage: bench_attn [B H T D causal R PATH [MODE]] (default 16 4 128 64 1 200 both; PATH kernel, gemm or both);
 * threads from OMP_NUM_THREADS. MODE holds "cold" and/or "packed" (e.g. cold,packed). cold: one store into each
 * line of a 64 MiB buffer before each timed call (bench_util.h), so the operands and outputs come from memory as in
 * a training step, where the GEMMs around attention move tens of MiB through the caches. packed: the per-head kernels read q, k, v in place in one
 * [B, T, 3·H·D] tensor and write dq, dk, dv into one, as the GPT's attention does (fl_cpu_attn_bf16_fwd_at /
 * _bwd_at with the layouts of the device's sdpa_qkv entries); PATH must be kernel. f32: fp32 attention instead
 * (its kernel path where fl_cpu_attn_f32_available() says it runs). noamx: on a CPU with
 * AMX-BF16 the per-head kernels' products on the vdpbf16ps tiles, not the tile unit (fl_cpu_attn_amx_allowed
 * cleared). stats (with packed): the statistics form (fl_cpu_attn_bf16_stats_*: each row's max and 1/Σ kept in
 * place of the T × T probabilities, P made again in the backward), layout=packed-stats. cpu: every time is the
 * process's CPU time instead of the wall clock (one thread only: OMP_NUM_THREADS=1), so that a loaded host's other
 * processes do not count; the line says clock=cpu. nofetch: the AVX2 + FMA family's heads without the next head's
 * rows asked for early (fl_cpu_attn_fetch_next cleared; fetch=0 in the line). Other words are refused.
 * FP8LAB_CPU_ISA caps the instruction sets as it does fp8lab's (docs/cli.md): avx512 runs bf16 attention on the AVX2
 * + FMA family's 16-lane products, avx2 on its 8-lane ones (and fp32 attention likewise).
 * Prints one line per (path, direction):
 * ms (and gflops) is the fastest of the R timed calls, med_ms their median.
 *   attn path=kernel dir=fwd B=16 H=4 T=128 D=64 causal=1 threads=2 cache=warm layout=heads prec=bf16 ms=... med_ms=... gflops=... */
#include "cpu/cpu_internal.h"
#include "cpu/cpu_nn.h"
#include "cpu/cpu_nn_internal.h"
#include "bench_util.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float *filled(int64_t n, float amp) {
    float *x = malloc((size_t)n * sizeof(float));
    if (x) bench_fill(x, n, amp, 0x9E3779B97F4A7C15ull);
    return x;
}

int main(int argc, char **argv) {
    const int64_t B = argc > 1 ? atoll(argv[1]) : 16, H = argc > 2 ? atoll(argv[2]) : 4;
    const int64_t T = argc > 3 ? atoll(argv[3]) : 128, D = argc > 4 ? atoll(argv[4]) : 64;
    const int causal = argc > 5 ? atoi(argv[5]) : 1, R = argc > 6 ? atoi(argv[6]) : 200;
    const char *only = argc > 7 ? argv[7] : "both";
    if (R < 1 || B < 1 || H < 1 || T < 1 || D < 1) {
        fprintf(stderr, "bench_attn: B, H, T, D and R must be at least 1\n");
        return 2;
    }
    static const char *const modes[] = { "cold", "packed", "f32", "noamx", "stats", "cpu", "nofetch" };
    const unsigned mode = argc > 8 ? bench_mode("bench_attn", argv[8], modes, 7) : 0;
    if (mode & 64) fl_cpu_attn_fetch_next = false;
    if (mode & 32) {   /* cpu: the process's CPU time, which is one thread's only with one thread */
        if (omp_get_max_threads() != 1) {
            fprintf(stderr, "bench_attn: mode cpu times one thread's CPU time (expected OMP_NUM_THREADS=1, got %d threads)\n",
                    omp_get_max_threads());
            return 2;
        }
        bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    }
    bench_cpu_isa("bench_attn");
    if (mode & 8) fl_cpu_attn_amx_allowed = false;   /* the vdpbf16ps tiles on a CPU with AMX */
    const int cold = mode & 1, packed = (mode & 2) != 0;
    const bool bf16 = !(mode & 4);
    const bool stats = (mode & 16) != 0;
    if (stats && (!packed || !bf16 || !fl_cpu_attn_bf16_stats_available())) {
        fprintf(stderr, "bench_attn: mode stats needs packed and bf16\n");
        return 2;
    }
    fl_attn_fwd_at_fn *fwd_at = stats ? fl_cpu_attn_bf16_stats_fwd_at : bf16 ? fl_cpu_attn_bf16_fwd_at : fl_cpu_attn_f32_fwd_at;
    fl_attn_bwd_at_fn *bwd_at = stats ? fl_cpu_attn_bf16_stats_bwd_at : bf16 ? fl_cpu_attn_bf16_bwd_at : fl_cpu_attn_f32_bwd_at;
    if (packed && strcmp(only, "kernel")) {
        fprintf(stderr, "bench_attn: mode packed times the per-head kernels only: pass PATH kernel, got %s\n", only);
        return 2;
    }
    const int64_t n = B * H * T * D, na = B * H * T * T;
    const float scale = 1.0f / sqrtf((float)D);
    float *q = filled(n, 2), *k = filled(n, 2), *v = filled(n, 1), *dy = filled(n, 1);
    float *o = malloc((size_t)n * 4), *att = malloc((size_t)(stats ? B * H * T * 2 : na) * 4);
    float *dq = malloc((size_t)n * 4), *dk = malloc((size_t)n * 4), *dv = malloc((size_t)n * 4);
    if (!q || !k || !v || !dy || !o || !att || !dq || !dk || !dv) { fprintf(stderr, "out of memory\n"); return 1; }
    const double flops = 4.0 * (double)(B * H) * (double)(T * T) * (double)D;
    /* packed: q, k, v of one token side by side in qkv [B, T, 3C] (C = H·D); out and dout [B, T, C] */
    const int64_t C = H * D;
    const fl_attn_layout lin = { T * 3 * C, D, 3 * C }, lout = { T * C, D, C };
    float *qkv = packed ? filled(3 * n, 2) : NULL, *dqkv = packed ? malloc((size_t)(3 * n) * 4) : NULL;
    if (packed && (!qkv || !dqkv)) { fprintf(stderr, "out of memory\n"); return 1; }
    for (int path = 0; path < 2; path++) {
        fl_cpu_attn_bf16_allowed = fl_cpu_attn_f32_allowed = path == 0;
        const char *name = path == 0 ? "kernel" : "gemm";
        if (strcmp(only, "both") && strcmp(only, name)) continue;
        if (path == 0 && !(bf16 ? fl_cpu_attn_bf16_available() : fl_cpu_attn_f32_available())) {
            printf("attn path=kernel unavailable (neither AVX-512 BF16 nor AVX2 + FMA)\n");
            continue;
        }
        double best[2] = { 1e30, 1e30 }, *ts[2] = { malloc(sizeof(double) * (size_t)R), malloc(sizeof(double) * (size_t)R) };
        if (!ts[0] || !ts[1]) { fprintf(stderr, "out of memory\n"); return 1; }
        for (int r = 0; r < R + 3; r++) {   /* the first 3 warm up (oneDNN primitives, pages) */
            if (cold) bench_evict();
            double t0 = bench_now();
            if (packed && path == 0)
                fwd_at(qkv, qkv + C, qkv + 2 * C, lin, o, lout, att, B, H, T, D, scale, causal);
            else
                fl_cpu_sdpa_causal_fwd(q, k, v, o, att, B, H, T, D, scale, causal, bf16);
            double t1 = bench_now();
            if (cold) bench_evict();
            double t2 = bench_now();
            if (packed && path == 0)
                bwd_at(qkv, qkv + C, qkv + 2 * C, lin, att, dy, lout, dqkv, dqkv + C, dqkv + 2 * C, lin, B, H, T, D, scale,
                       causal);
            else
                fl_cpu_sdpa_causal_bwd(q, k, v, att, dy, dq, dk, dv, B, H, T, D, scale, causal, bf16);
            double t3 = bench_now();
            if (r >= 3) {
                best[0] = t1 - t0 < best[0] ? t1 - t0 : best[0];
                best[1] = t3 - t2 < best[1] ? t3 - t2 : best[1];
                ts[0][r - 3] = t1 - t0;
                ts[1][r - 3] = t3 - t2;
            }
        }
        for (int d = 0; d < 2; d++) {
            const double med = bench_median(ts[d], R);
            printf("attn path=%s dir=%s B=%lld H=%lld T=%lld D=%lld causal=%d threads=%d cache=%s layout=%s prec=%s ms=%.3f "
                   "med_ms=%.3f gflops=%.1f%s%s\n", name, d ? "bwd" : "fwd", (long long)B, (long long)H, (long long)T,
                   (long long)D, causal, omp_get_max_threads(), cold ? "cold" : "warm", stats ? "packed-stats" : packed ? "packed" : "heads",
                   bf16 ? "bf16" : "fp32", 1e3 * best[d], 1e3 * med, (d ? 2 : 1) * flops / best[d] * 1e-9,
                   bench_clock == CLOCK_PROCESS_CPUTIME_ID ? " clock=cpu" : "", fl_cpu_attn_fetch_next ? "" : " fetch=0");
        }
        free(ts[0]);
        free(ts[1]);
    }
    fl_cpu_attn_bf16_allowed = fl_cpu_attn_f32_allowed = true;
    free(q); free(k); free(v); free(dy); free(o); free(att); free(dq); free(dk); free(dv); free(qkv); free(dqkv);
    return 0;
}
