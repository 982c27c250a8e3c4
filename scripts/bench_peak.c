/* bench_peak.c — the arithmetic limits of this CPU (scripts/peak.h), so that every training-step figure of
 * `make bench` can be read as a fraction of what the cores can do: fp32 FMA, bf16 dot products and (AMX) bf16 tile
 * products, at 1 and at
 * N threads.
 * Usage: bench_peak [THREADS...] (default: 1 and the OpenMP maximum). Prints one line per (kind, threads):
 *   peak kind=fp32_fma threads=1 gflops=...
 * A kind the CPU lacks prints gflops=0 with a reason. */
#include <stdio.h>
#include <stdlib.h>
#include "peak.h"

int main(int argc, char **argv) {
    int counts[8], n = 0;
    for (int i = 1; i < argc && n < 8; i++) counts[n++] = atoi(argv[i]);
    if (n == 0) {
        counts[n++] = 1;
        if (omp_get_max_threads() > 1) counts[n++] = omp_get_max_threads();
    }
    const char *fma = peak_isa("fp32_fma"), *dot = peak_isa("bf16_dot"), *tile = peak_isa("bf16_tile");
    for (int i = 0; i < n; i++) {
        int t = counts[i] > 0 ? counts[i] : 1;
        if (fma) printf("peak kind=fp32_fma threads=%d gflops=%.1f isa=%s\n", t, peak_gflops("fp32_fma", t), fma);
        else printf("peak kind=fp32_fma threads=%d gflops=0 (no AVX2/FMA)\n", t);
        if (dot) printf("peak kind=bf16_dot threads=%d gflops=%.1f isa=%s\n", t, peak_gflops("bf16_dot", t), dot);
        else printf("peak kind=bf16_dot threads=%d gflops=0 (no AVX-512 BF16 on this CPU)\n", t);
        if (tile) printf("peak kind=bf16_tile threads=%d gflops=%.1f isa=%s\n", t, peak_gflops("bf16_tile", t), tile);
        else printf("peak kind=bf16_tile threads=%d gflops=0 (no AMX-BF16 on this CPU, or the kernel refused it)\n", t);
        fflush(stdout);
    }
    return 0;
}
