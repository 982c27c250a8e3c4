/* bench_fp8_gemm.c — the CPU FP8 GEMM's two paths side by side on the char GPT's twelve GEMMs (N = 2048
 * tokens, d = 256; Linears 256→768, 256→256, 256→1024, 1024→256; fprop, dgrad, wgrad in the layouts
 * core/fp8_linear.c passes): "old" = decode both operands to bf16 + oneDNN (fl_cpu_fp8_mm_allowed cleared,
 * empty caches, what a call pays without reuse), "old-cached" = oneDNN alone on operands already decoded
 * (the floor of the old path when every decode is reused), "new" = cpu_fp8_mm.c called directly (whether or not
 * fl_cpu_fp8_mm_faster would pick it; "policy" says what it picks). Min of many runs.
 * Usage: OMP_NUM_THREADS=T bench_fp8_gemm [REPS [MODE [GEMMS]]], MODE holding "mlp", "cold", "new", "bf16",
 * "avx2", "noamx", "nobf16" and/or "cpu" (e.g. cold,mlp; "-": none), GEMMS a comma-separated subset of the GEMMs as gemm:in:out (e.g.
 * wgrad:1024:256,fprop:256:768; the whole set when left out; a name that is not in the set is refused with the
 * list). mlp: the Fashion-MNIST MLP's two FP8 Linears, 784→512 and 512→256 at batch 256, instead. cold: one store
 * into each line of a 64 MiB buffer before each timed call (bench_util.h), so the operands and C come from memory
 * as in a training step. Prints one line per GEMM and path. new: only the new path. avx2: AVX-512 disallowed
 * (fl_cpu_avx512_allowed), so the AVX2 + FMA family runs, as on CPUs without AVX-512 (with bf16: fl_cpu_fma_mm
 * for the bf16 operands; the limits are still this CPU's). noamx: AMX disallowed (fl_cpu_amx_allowed, and the AVX-512
 * FMA family, fl_cpu_fma512_allowed, which Intel's CPUs run before it), so a CPU with AMX runs the AVX512_BF16 family. nobf16: AMX and AVX512_BF16 disallowed (fl_cpu_avx512_bf16_allowed), so
 * the AVX-512 FMA family runs, as on AVX-512 CPUs without BF16 (Skylake-SP to Ice Lake). bf16: the same twelve GEMMs in fp32 and bf16 through
 * the device's matmul entry instead, as the fp32 and bf16-autocast steps run them, four paths: "fp32" (fl_cpu_fma_mm_allowed cleared: oneDNN's fp32
 * GEMM), "fp32-own" (the device's choice: on CPUs without AVX-512, fl_cpu_fma_mm), "widen" (bf16, the switch
 * cleared: where oneDNN has no bf16 kernel, both operands widened to fp32 copies for oneDNN's fp32 GEMM), "own"
 * (bf16, the device's choice). peak: the fraction of this CPU's limit at the run's thread count, measured as the
 * program starts (scripts/peak.h, what build/bench_peak prints): the FP8 family avx512_bf16 and the bf16 paths
 * against the bf16 dot limit where the CPU has vdpbf16ps, everything else against the fp32 FMA limit. The limits
 * print first as "limit kind=... gflops=...".
 * cpu: every time (the limits' too) is the process's CPU time instead of the wall clock, so that a loaded host's
 * waits do not count; one thread only (OMP_NUM_THREADS=1, else refused).
 * FP8LAB_CPU_ISA caps the instruction sets as it does fp8lab's (docs/cli.md).
 * ms (and gflops, peak) is the fastest of the REPS timed calls, med_ms their median (a shared machine's calls spread
 * widely; the first call is not timed).
 *   fp8gemm gemm=fprop in=256 out=768 ... path=new family=avx2_fma threads=1 cache=warm ms=... med_ms=... gflops=... peak=0.xx */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cpu/cpu_fp8_mm.h"
#include "tensor.h"
#include "bench_util.h"
#include "peak.h"

static fl_tensor *rand_fp8(int64_t r, int64_t c, fl_dtype fmt, uint64_t seed) {
    int64_t shape[2] = { r, c };
    fl_tensor *t = NULL;
    if (fl_tensor_empty(&t, fmt, 2, shape, FL_DEV_CPU) != FL_OK) return NULL;
    uint8_t *d = fl_tensor_data(t);
    for (int64_t i = 0; i < r * c; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        d[i] = (uint8_t)((seed >> 56) & 0xbf);   /* bit 6 clear: moderate magnitudes, no NaN */
    }
    *(float *)fl_tensor_data(t->scale_inv) = 0.01f;
    return t;
}

/* t with its last two dims swapped (a view) */
static fl_tensor *tr(const fl_tensor *t) {
    fl_tensor *v = NULL;
    return fl_tensor_transpose(&v, t, t->ndim - 2, t->ndim - 1) == FL_OK ? v : NULL;
}

/* [1, r, c] of type dt (bf16 or fp32) with moderate values */
static fl_tensor *rand_wide(int64_t r, int64_t c, fl_dtype dt, uint64_t seed) {
    int64_t shape[3] = { 1, r, c };
    fl_tensor *f = NULL, *t = NULL;
    if (fl_tensor_empty(&f, FL_F32, 3, shape, FL_DEV_CPU) != FL_OK) return NULL;
    float *d = fl_tensor_data(f);
    for (int64_t i = 0; i < r * c; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        d[i] = (float)((int)(seed >> 40) % 2001 - 1000) * 1e-3f;
    }
    if (dt == FL_F32) return f;
    fl_status st = fl_tensor_to(&t, f, dt);
    fl_tensor_release(f);
    return st == FL_OK ? t : NULL;
}

/* The GEMMS argument: which gemm:in:out to run (NULL: all). Each name must be one of the nlin Linears' three GEMMs,
 * else the program stops with the list. */
static const char *const GEMM_NAMES[3] = { "fprop", "dgrad", "wgrad" };
/* Whether the comma-separated list holds the n characters at s as one of its words. */
static bool listed(const char *list, const char *s, size_t n) {
    for (const char *p = list; *p;) {
        const size_t l = strcspn(p, ",");
        if (l == n && !strncmp(p, s, n)) return true;
        p += l + (p[l] == ',');
    }
    return false;
}
static bool wanted(const char *only, const char *gemm, int in, int out) {
    char name[64];
    snprintf(name, sizeof name, "%s:%d:%d", gemm, in, out);
    return !only || listed(only, name, strlen(name));
}
static void check_only(const char *only, const int (*lin)[2], int nlin) {
    if (!only) return;
    char known[512] = "";
    for (int i = 0; i < nlin; i++)
        for (int k = 0; k < 3; k++) {
            const size_t u = strlen(known);
            snprintf(known + u, sizeof known - u, "%s%s:%d:%d", u ? "," : "", GEMM_NAMES[k], lin[i][0], lin[i][1]);
        }
    for (const char *p = only; *p;) {
        const size_t l = strcspn(p, ",");
        if (!listed(known, p, l)) {
            fprintf(stderr, "bench_fp8_gemm: unknown GEMM '%.*s' (expected comma-separated gemm:in:out from: %s)\n",
                    (int)l, p, known);
            exit(2);
        }
        p += l + (p[l] == ',');
    }
}

/* min seconds of `reps` calls of the device's matmul entry; *med: their median */
static double time_matmul(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, bool cold, int reps, double *med) {
    double best = 1e30, *ts = malloc(sizeof *ts * (size_t)reps);
    if (!ts) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (int i = 0; i < reps + 1; i++) {
        if (cold) bench_evict();
        double t0 = bench_now();
        fl_status st = fl_cpu_device()->matmul(dst, a, b);
        double t = bench_now() - t0;
        if (st != FL_OK) { fprintf(stderr, "matmul: %s\n", fl_last_error()); exit(1); }
        if (i > 0) ts[i - 1] = t;
        if (i > 0 && t < best) best = t;
    }
    *med = bench_median(ts, reps);
    free(ts);
    return best;
}

/* The bf16 mode: the twelve GEMMs in bf16 (and fp32) through the device's matmul entry. */
static int bench_bf16(int reps, bool cold, bool mlp, const char *only) {
    const int T = mlp ? 256 : 2048, nlin = mlp ? 2 : 4;
    const int gpts[4][2] = { { 256, 768 }, { 256, 256 }, { 256, 1024 }, { 1024, 256 } }, mlps[2][2] = { { 784, 512 }, { 512, 256 } };
    const int (*gpt)[2] = mlp ? mlps : gpts;
    check_only(only, gpt, nlin);
    const int threads = omp_get_max_threads();
    const double fma = peak_gflops("fp32_fma", threads), dot = peak_gflops("bf16_dot", threads);
    const double wide = dot > 0 ? dot : fma, lim[4] = { fma, fma, wide, wide };   /* per path, as the header says */
    printf("limit kind=fp32_fma threads=%d gflops=%.1f\n", threads, fma);
    if (dot > 0) printf("limit kind=bf16_dot threads=%d gflops=%.1f\n", threads, dot);
    double tot[4] = { 0, 0, 0, 0 };
    for (int l = 0; l < nlin; l++) {
        const int in = gpt[l][0], out = gpt[l][1];
        for (int p = 0; p < 4; p++) {
            const fl_dtype dt = p < 2 ? FL_F32 : FL_BF16;
            fl_tensor *X = rand_wide(T, in, dt, 1 + l), *W = rand_wide(out, in, dt, 11 + l), *dY = rand_wide(T, out, dt, 21 + l);
            fl_tensor *Wt = tr(W), *dYt = tr(dY);
            struct { const char *name; const fl_tensor *a, *b; } g[3] = { { "fprop", X, Wt }, { "dgrad", dY, W }, { "wgrad", dYt, X } };
            for (int k = 0; k < 3; k++) {
                if (!wanted(only, g[k].name, in, out)) continue;
                int64_t shape[3] = { 1, g[k].a->shape[1], g[k].b->shape[2] };
                fl_tensor *dst = NULL;
                fl_tensor_empty(&dst, FL_F32, 3, shape, FL_DEV_CPU);
                const double flops = 2.0 * (double)shape[1] * (double)shape[2] * (double)g[k].a->shape[2];
                const char *path[4] = { "fp32", "fp32-own", "widen", "own" };
                fl_cpu_fma_mm_allowed = p & 1;
                double med, s = time_matmul(dst, g[k].a, g[k].b, cold, reps, &med);
                tot[p] += s;
                printf("bf16gemm gemm=%s in=%d out=%d M=%lld N=%lld K=%lld path=%s threads=%d cache=%s ms=%.3f med_ms=%.3f gflops=%.1f peak=%.2f\n",
                       g[k].name, in, out, (long long)shape[1], (long long)shape[2], (long long)g[k].a->shape[2], path[p],
                       threads, cold ? "cold" : "warm", 1e3 * s, 1e3 * med, flops / s * 1e-9, lim[p] > 0 ? flops / s * 1e-9 / lim[p] : 0.0);
                fl_tensor_release(dst);
            }
            fl_tensor *all[] = { X, W, dY, Wt, dYt };
            for (int i = 0; i < 5; i++) fl_tensor_release(all[i]);
        }
    }
    printf("bf16gemm total threads=%d fp32_ms=%.3f fp32_own_ms=%.3f widen_ms=%.3f own_ms=%.3f\n", threads, 1e3 * tot[0],
           1e3 * tot[1], 1e3 * tot[2], 1e3 * tot[3]);
    fl_cpu_fma_mm_allowed = true;
    return 0;
}


/* min seconds of `reps` calls of fp8_gemm(dst, a, b, bias, caches), or (direct) of cpu_fp8_mm.c itself, as the
 * device entry calls it but without its shape policy (fl_cpu_fp8_mm_faster) */
static double time_gemm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias, bool cached, bool direct,
                        bool cold, int reps, double *med) {
    fl_tensor *ac = NULL, *bc = NULL;
    double best = 1e30, *ts = malloc(sizeof *ts * (size_t)reps);
    if (!ts) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (int i = 0; i < reps + 1; i++) {
        if (cold) bench_evict();
        double t0 = bench_now();
        bool done = true;
        fl_status st = direct ? fl_cpu_fp8_mm(dst, a, b, bias ? fl_tensor_data(bias) : NULL, NULL, &done)
                              : fl_cpu_device()->fp8_gemm(dst, a, b, bias, cached ? &ac : NULL, cached ? &bc : NULL, false);
        if (!done) { fprintf(stderr, "fp8 mm declined\n"); exit(1); }
        double t = bench_now() - t0;
        if (st != FL_OK) { fprintf(stderr, "fp8_gemm: %s\n", fl_last_error()); exit(1); }
        if (i > 0) ts[i - 1] = t;
        if (i > 0 && t < best) best = t;   /* the first call makes the caches (cached) and warms up */
    }
    *med = bench_median(ts, reps);
    free(ts);
    fl_tensor_release(ac);
    fl_tensor_release(bc);
    return best;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 30;
    if (reps < 1) { fprintf(stderr, "bench_fp8_gemm: REPS must be at least 1 (got '%s')\n", argv[1]); return 2; }
    static const char *const modes[] = { "mlp", "cold", "new", "bf16", "avx2", "noamx", "nobf16", "cpu" };
    const unsigned mode = argc > 2 && strcmp(argv[2], "-") ? bench_mode("bench_fp8_gemm", argv[2], modes, 8) : 0;
    if (mode & 128) {   /* cpu: the process's CPU time, which is one thread's only with one thread */
        if (omp_get_max_threads() != 1) {
            fprintf(stderr, "bench_fp8_gemm: mode cpu times one thread's CPU time (expected OMP_NUM_THREADS=1, got %d threads)\n",
                    omp_get_max_threads());
            return 2;
        }
        bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    }
    const bool mlp = mode & 1, cold = mode & 2, only_new = mode & 4;
    bench_cpu_isa("bench_fp8_gemm");
    if (mode & 16) fl_cpu_avx512_allowed = false;   /* the AVX2 + FMA families, as on CPUs without AVX-512 */
    if (mode & 32) {                                 /* the AVX512_BF16 family on a CPU with AMX */
        fl_cpu_amx_allowed = false;
        fl_cpu_fma512_allowed = false;
    }
    if (mode & 64) {                                 /* the AVX-512 FMA family on a CPU with AVX512_BF16 */
        fl_cpu_amx_allowed = false;
        fl_cpu_avx512_bf16_allowed = false;
    }
    const char *only = argc > 3 ? argv[3] : NULL;
    if (mode & 8) return bench_bf16(reps, cold, mlp, only);
    const int T = mlp ? 256 : 2048, nlin = mlp ? 2 : 4;
    const int gpt[4][2] = { { 256, 768 }, { 256, 256 }, { 256, 1024 }, { 1024, 256 } }, mlps[2][2] = { { 784, 512 }, { 512, 256 } };
    const int (*lin)[2] = mlp ? mlps : gpt;
    check_only(only, lin, nlin);
    const int threads = omp_get_max_threads();
    const char *family = fl_cpu_fp8_mm_family() ? fl_cpu_fp8_mm_family() : "none";
    const char *kind = strcmp(family, "amx_bf16") == 0      ? "bf16_tile"   /* the family's instruction */
                       : strcmp(family, "avx512_bf16") == 0 ? "bf16_dot"
                                                            : "fp32_fma";
    const double limit = peak_gflops(kind, threads);
    printf("limit kind=%s threads=%d gflops=%.1f\n", kind, threads, limit);
    double tot[3] = { 0, 0, 0 };
    for (int l = 0; l < nlin; l++) {
        const int in = lin[l][0], out = lin[l][1];
        fl_tensor *X = rand_fp8(T, in, FL_E4M3, 1 + l), *W = rand_fp8(out, in, FL_E4M3, 11 + l),
                  *dY = rand_fp8(T, out, FL_E5M2, 21 + l), *Wt = tr(W), *dYt = tr(dY), *bias = NULL;
        int64_t bs = out;
        fl_tensor_zeros(&bias, FL_F32, 1, &bs, FL_DEV_CPU);
        struct { const char *name; const fl_tensor *a, *b, *bias; } g[3] = {
            { "fprop", X, Wt, bias }, { "dgrad", dY, W, NULL }, { "wgrad", dYt, X, NULL } };
        for (int k = 0; k < 3; k++) {
            if (!wanted(only, g[k].name, in, out)) continue;
            int64_t shape[2] = { g[k].a->shape[0], g[k].b->shape[1] };
            fl_tensor *dst = NULL;
            fl_tensor_empty(&dst, FL_F32, 2, shape, FL_DEV_CPU);
            const double flops = 2.0 * (double)shape[0] * (double)shape[1] * (double)g[k].a->shape[1];
            const char *path[3] = { "old", "old-cached", "new" };
            for (int p = only_new ? 2 : 0; p < 3; p++) {
                fl_cpu_fp8_mm_allowed = p == 2;
                double med, s = time_gemm(dst, g[k].a, g[k].b, g[k].bias, p == 1, p == 2, cold, reps, &med);
                tot[p] += s;
                printf("fp8gemm gemm=%s in=%d out=%d M=%lld N=%lld K=%lld path=%s family=%s threads=%d cache=%s ms=%.3f med_ms=%.3f gflops=%.1f peak=%.2f policy=%s\n",
                       g[k].name, in, out, (long long)shape[0], (long long)shape[1], (long long)g[k].a->shape[1], path[p],
                       p == 2 ? family : "onednn", threads, cold ? "cold" : "warm", 1e3 * s, 1e3 * med, flops / s * 1e-9,
                       limit > 0 ? flops / s * 1e-9 / limit : 0.0,
                       fl_cpu_fp8_mm_faster(g[k].a, g[k].b) ? "new" : "old");
            }
            fl_tensor_release(dst);
        }
        fl_tensor *all[] = { X, W, dY, Wt, dYt, bias };
        for (int i = 0; i < 6; i++) fl_tensor_release(all[i]);
    }
    printf("fp8gemm total threads=%d old_ms=%.3f old_cached_ms=%.3f new_ms=%.3f\n", threads, 1e3 * tot[0], 1e3 * tot[1], 1e3 * tot[2]);
    fl_cpu_fp8_mm_allowed = true;
    return 0;
}
