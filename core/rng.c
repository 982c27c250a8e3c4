/* rng.c — the Philox4x32-10 generator (core/philox.h): counter-based, so any block of the
 * stream can be computed independently and the same seed gives the same numbers everywhere. */
#include "rng.h"
#include "cpu/par.h"
#include "philox.h"
#include <math.h>

/* 128-bit counter = (counter_lo, counter_hi, 0, 0), 64-bit key = seed (philox.h). */
void fl_philox4x32(uint64_t key, uint64_t counter, uint32_t out[4]) { fl_philox4x32_10(key, counter, out); }

void fl_rng_seed(fl_rng *r, uint64_t seed) { r->seed = seed; r->counter = 0; }

/* 24 high bits → exactly representable float in [0, 1). */
static inline float u24(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }

void fl_rng_uniform(fl_rng *r, float *dst, size_t n, float lo, float hi) {
    size_t blocks = (n + 3) / 4;
    uint64_t base = r->counter;
    FL_PAR_FOR(n > (1u << 18), schedule(static),
    for (size_t b = 0; b < blocks; b++) {
        uint32_t w[4];
        fl_philox4x32(r->seed, base + b, w);
        for (int j = 0; j < 4 && b * 4 + j < n; j++)
            dst[b * 4 + j] = lo + (hi - lo) * u24(w[j]);
    });
    r->counter = base + blocks;
}

/* Box-Muller on two pairs per block; u1 in (0, 1] so log() never sees 0. */
void fl_rng_normal(fl_rng *r, float *dst, size_t n, float mean, float std) {
    size_t blocks = (n + 3) / 4;
    uint64_t base = r->counter;
    FL_PAR_FOR(n > (1u << 16), schedule(static),
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
    });
    r->counter = base + blocks;
}

/* w0·2^32 + w1, times range, keeping the high 64 bits: uniform in [0, range) up to a bias below range / 2^64 */
static inline uint64_t below(uint32_t w0, uint32_t w1, uint64_t range) {
    const unsigned __int128 x = (unsigned __int128)(((uint64_t)w0 << 32) | w1) * range;
    return (uint64_t)(x >> 64);
}

void fl_rng_integers(fl_rng *r, float *dst, size_t n, int64_t lo, int64_t hi) {
    const size_t blocks = (n + 1) / 2;
    const uint64_t base = r->counter, range = (uint64_t)(hi - lo);
    FL_PAR_FOR(n > (1u << 18), schedule(static),
    for (size_t b = 0; b < blocks; b++) {
        uint32_t w[4];
        fl_philox4x32(r->seed, base + b, w);
        for (int j = 0; j < 2 && b * 2 + j < n; j++)
            dst[b * 2 + j] = (float)(lo + (int64_t)below(w[2 * j], w[2 * j + 1], range));
    });
    r->counter = base + blocks;
}

void fl_rng_permutation(fl_rng *r, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (float)i;
    uint64_t block = r->counter;
    uint32_t w[4];
    int used = 2;   /* draws left in w: none yet */
    for (size_t i = n; i-- > 1;) {
        if (used == 2) { fl_philox4x32(r->seed, block++, w); used = 0; }
        const size_t j = (size_t)below(w[2 * used], w[2 * used + 1], (uint64_t)i + 1);
        used++;
        const float t = dst[i];
        dst[i] = dst[j];
        dst[j] = t;
    }
    r->counter = block;
}

/* The core's one default generator; the binding layer keeps its own state per Lua state if it wants. */
static fl_rng fl_default = { 0, 0 };
fl_rng *fl_default_rng(void) { return &fl_default; }
void fl_manual_seed(uint64_t seed) { fl_rng_seed(&fl_default, seed); }
