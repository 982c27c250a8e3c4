/* rng.c — Philox4x32-10 (Salmon et al., Random123 constants): counter-based, so any block of the
 * stream can be computed independently and the same seed gives the same numbers everywhere. */
#include "rng.h"
#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* 128-bit counter = (counter_lo, counter_hi, 0, 0), 64-bit key = seed. */
void fl_philox4x32(uint64_t key, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

void fl_rng_seed(fl_rng *r, uint64_t seed) { r->seed = seed; r->counter = 0; }

/* 24 high bits → exactly representable float in [0, 1). */
static inline float u24(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }

void fl_rng_uniform(fl_rng *r, float *dst, size_t n, float lo, float hi) {
    size_t blocks = (n + 3) / 4;
    uint64_t base = r->counter;
    #pragma omp parallel for if (n > (1u << 18)) schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        uint32_t w[4];
        fl_philox4x32(r->seed, base + b, w);
        for (int j = 0; j < 4 && b * 4 + j < n; j++)
            dst[b * 4 + j] = lo + (hi - lo) * u24(w[j]);
    }
    r->counter = base + blocks;
}

/* Box-Muller on two pairs per block; u1 in (0, 1] so log() never sees 0. */
void fl_rng_normal(fl_rng *r, float *dst, size_t n, float mean, float std) {
    size_t blocks = (n + 3) / 4;
    uint64_t base = r->counter;
    #pragma omp parallel for if (n > (1u << 16)) schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        uint32_t w[4];
        fl_philox4x32(r->seed, base + b, w);
        double z[4];
        for (int p = 0; p < 2; p++) {
            double u1 = ((double)(w[2 * p] >> 8) + 1.0) / 16777216.0;
            double u2 = (double)(w[2 * p + 1] >> 8) / 16777216.0;
            double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
            z[2 * p] = rad * cos(th);
            z[2 * p + 1] = rad * sin(th);
        }
        for (int j = 0; j < 4 && b * 4 + j < n; j++)
            dst[b * 4 + j] = (float)(mean + std * z[j]);
    }
    r->counter = base + blocks;
}

/* The core's one default generator; the binding layer keeps its own state per Lua state if it wants. */
static fl_rng fl_default = { 0, 0 };
fl_rng *fl_default_rng(void) { return &fl_default; }
void fl_manual_seed(uint64_t seed) { fl_rng_seed(&fl_default, seed); }
