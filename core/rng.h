/* rng.h — counter-based Philox4x32-10 generator: same seed → same stream on every machine. */
#ifndef FL_RNG_H
#define FL_RNG_H
#include <stddef.h>
#include <stdint.h>

typedef struct { uint64_t seed; uint64_t counter; } fl_rng;

void fl_rng_seed(fl_rng *r, uint64_t seed);
/* Four 32-bit random words for (key, counter); advances nothing. */
void fl_philox4x32(uint64_t key, uint64_t counter, uint32_t out[4]);
/* Fill n floats: uniform in [lo, hi) / normal(mean, std). Advance the counter by the blocks used. */
void fl_rng_uniform(fl_rng *r, float *dst, size_t n, float lo, float hi);
void fl_rng_normal(fl_rng *r, float *dst, size_t n, float mean, float std);
/* Fill n floats with integers uniform in [lo, hi) (hi > lo, both within ±2^24 so every value is an exact float):
 * each from 64 random bits by multiply-shift, (bits · (hi − lo)) >> 64, whose bias is below (hi − lo) / 2^64. Two
 * values a Philox block; advances the counter by the blocks used. */
void fl_rng_integers(fl_rng *r, float *dst, size_t n, int64_t lo, int64_t hi);
/* dst[0..n) = a uniformly random permutation of 0, 1, ..., n − 1 (n ≤ 2^24): Fisher-Yates from the last position
 * down, position i swapped with one drawn in [0, i] as fl_rng_integers draws. */
void fl_rng_permutation(fl_rng *r, float *dst, size_t n);
/* The process default generator (seeded by fl_manual_seed; default seed 0). */
fl_rng *fl_default_rng(void);
void fl_manual_seed(uint64_t seed);
#endif
