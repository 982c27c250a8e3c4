/* bench_util.h — what the benchmark programs (bench_attn, bench_fp8_gemm) share: the clock, their MODE argument, the
 * median of their timings, the cold mode's cache eviction and FP8LAB_CPU_ISA. */
#ifndef FL_BENCH_UTIL_H
#define FL_BENCH_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cpu_isa.h"

/* The clock bench_now reads: the monotonic clock, or (a program's "cpu" mode, one thread only) the process's CPU
 * time, which on a shared, loaded host counts only the time the program ran (peak.h's limits read it too). */
static clockid_t bench_clock = CLOCK_MONOTONIC;

/* Seconds on bench_clock. */
static double bench_now(void) {
    struct timespec t;
    clock_gettime(bench_clock, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* MODE: comma-separated words from a fixed list; returns bit i for words[i]. An empty MODE is none; any other
 * word ends the program with a message naming the valid ones. */
static unsigned bench_mode(const char *prog, const char *mode, const char *const *words, int nwords) {
    unsigned bits = 0;
    for (const char *p = mode; *p;) {
        const size_t len = strcspn(p, ",");
        int i = 0;
        while (i < nwords && !(strlen(words[i]) == len && !strncmp(p, words[i], len))) i++;
        if (i == nwords) {
            fprintf(stderr, "%s: unknown mode '%.*s' (expected comma-separated words from:", prog, (int)len, p);
            for (int j = 0; j < nwords; j++) fprintf(stderr, " %s", words[j]);
            fprintf(stderr, ")\n");
            exit(2);
        }
        bits |= 1u << i;
        p += len + (p[len] == ',');
    }
    return bits;
}
/* The median of the n (≥ 1) times in t, which it sorts. A shared machine's calls spread widely, so the benchmarks
 * print it beside the fastest call. */
static int bench_cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}
static double bench_median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, bench_cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}
/* n values uniform in [-amp, amp) from a xorshift generator started at seed (not zero): the benchmarks' operands,
 * the same on every run. */
static inline void bench_fill(float *x, int64_t n, float amp, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x[i] = amp * (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

/* Stores into every 64-byte line of 64 MiB (allocated on the first call), so the next call's operands and
 * its output come from memory as in a training step, where the GEMMs around any op move tens of MiB through
 * the caches. One ordinary store per line, through a volatile pointer: memset would not do, as glibc's memset
 * of this size (rep stosb) bypasses the caches on the CPUs measured and left an 8 MiB buffer there (re-read in
 * 0.10-0.21 ms after it against 0.26-0.34 after these stores and 0.08 warm: Zen 5, 2026-11-28).
 * Out of memory ends the program. */
static void bench_evict(void) {
    enum { EVICT_BYTES = 64 << 20 };
    static unsigned char *buf;
    static unsigned round;
    if (!buf && !(buf = malloc(EVICT_BYTES))) { fprintf(stderr, "out of memory for the eviction buffer\n"); exit(1); }
    volatile unsigned char *p = buf;
    const unsigned char v = (unsigned char)++round;
    for (size_t i = 0; i < EVICT_BYTES; i += 64) p[i] = v;
}

/* FP8LAB_CPU_ISA's cap, as fp8lab takes it (core/cpu_isa.h, docs/cli.md), before anything runs: a bad word ends the
 * program with the message naming the choices. */
static void bench_cpu_isa(const char *prog) {
    const char *isa = getenv("FP8LAB_CPU_ISA");
    if (isa && *isa && fl_cpu_isa_limit(isa) != FL_OK) {
        fprintf(stderr, "%s: FP8LAB_CPU_ISA: %s\n", prog, fl_last_error_detail());
        exit(2);
    }
}
#endif
