/* bench_quantize.c — GB/s of fl_quantize_f32 (fp32 → E4M3 with amax and counters) against memcpy
 * on the same buffer, 1 and 2 threads; then the time of one cast at the tensor sizes of a training step;
 * prints two markdown tables. Built by `make $(BUILD)/bench_quantize`.
 * Bytes counted = bytes read + bytes written (quantize: 4n + n; memcpy: 4n + 4n). */
#include "format.h"
#include "format_internal.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    size_t n = mib * 1024 * 1024 / sizeof(float);
    float *src = aligned_alloc(64, n * sizeof(float)), *cpy = aligned_alloc(64, n * sizeof(float));
    uint8_t *dst = aligned_alloc(64, n);
    if (!src || !cpy || !dst) { fprintf(stderr, "bench_quantize: out of memory for %zu MiB\n", mib); return 1; }
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) { /* xorshift: values spread over ±500, some saturate */
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        src[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 1000.0 - 500.0);
    }
    memset(cpy, 0, n * sizeof(float));
    memset(dst, 0, n);
    printf("| threads | kernel | MiB in | best time (ms) | GB/s (read+write) | vs memcpy |\n");
    printf("|---|---|---|---|---|---|\n");
    const char *names[] = {"memcpy", "quantize e4m3+amax (AVX-512)", "quantize e4m3+amax (portable)",
                           "quantize e4m3+amax (AVX2)"};
    for (int th = 1; th <= 2; th++) {
        omp_set_num_threads(th);
        double best[4] = {1e30, 1e30, 1e30, 1e30};
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            /* memcpy split across the same threads, so both sides get the same parallelism */
#pragma omp parallel for schedule(static) num_threads(th)
            for (int k = 0; k < th; k++) {
                size_t lo = n / th * k, hi = k == th - 1 ? n : n / th * (k + 1);
                memcpy(cpy + lo, src + lo, (hi - lo) * sizeof(float));
            }
            double t1 = now();
            fl_cast_stats st;
            fl_quantize_f32_path(src, dst, n, FL_E4M3, 0.9f, FL_SATURATE, &st, FL_PATH_AVX512);
            double t2 = now();
            fl_quantize_f32_path(src, dst, n, FL_E4M3, 0.9f, FL_SATURATE, &st, FL_PATH_PORTABLE);
            double t3 = now();
            fl_quantize_f32_path(src, dst, n, FL_E4M3, 0.9f, FL_SATURATE, &st, FL_PATH_AVX2);
            double t4 = now();
            if (t1 - t0 < best[0]) best[0] = t1 - t0;
            if (t2 - t1 < best[1]) best[1] = t2 - t1;
            if (t3 - t2 < best[2]) best[2] = t3 - t2;
            if (t4 - t3 < best[3]) best[3] = t4 - t3;
        }
        double bytes[4] = {8.0 * n, 5.0 * n, 5.0 * n, 5.0 * n};
        double gbs0 = bytes[0] / best[0] / 1e9;
        for (int k = 0; k < 4; k++) {
            if (k == 1 && !fl_format_has_avx512()) continue;
            if (k == 3 && !__builtin_cpu_supports("avx2")) continue;
            double gbs = bytes[k] / best[k] / 1e9;
            printf("| %d | %s | %zu | %.2f | %.2f | %.0f%% |\n", th, names[k], mib, best[k] * 1e3, gbs,
                   100.0 * gbs / gbs0);
        }
    }
    /* The sizes a training step casts (the char GPT's weights, 64K-256K elements, and its 2048 × 256 inputs):
     * tensors above 32K elements are shared by the threads (format.c par_block); microseconds per cast, best of
     * many, data in cache; the kernel the cast picks on this CPU (AVX-512, else AVX2). */
    printf("\n| elements | threads | best time (us) | elements / ns |\n|---|---|---|---|\n");
    const size_t sizes[] = { 65536, 196608, 262144, 524288 };
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t m = sizes[k] < n ? sizes[k] : n;
        for (int th = 1; th <= 2; th++) {
            omp_set_num_threads(th);
            double best = 1e30;
            for (int r = 0; r < 50 * reps; r++) {
                fl_cast_stats st;
                double t0 = now();
                fl_quantize_f32(src, dst, m, FL_E4M3, 0.9f, FL_SATURATE, &st);
                double t = now() - t0;
                if (t < best) best = t;
            }
            printf("| %zu | %d | %.1f | %.2f |\n", m, th, best * 1e6, (double)m / best * 1e-9);
        }
    }
    free(src); free(cpy); free(dst);
    return 0;
}
