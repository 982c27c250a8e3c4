/* gpu_test.h — what the GPU test files share: skipping without a GPU, float bit comparisons, and a pool
 * of device allocations freed together at the end of a test. */
#ifndef FL_GPU_TEST_H
#define FL_GPU_TEST_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "device.h"

/* The cuda device, or NULL after printing "skipped: no GPU" (the test then returns and passes). */
static inline const fl_device *gpu_or_skip(void) {
    const fl_device *d = fl_device_get(FL_DEV_CUDA);
    if (!d) printf("  skipped: no GPU\n");
    return d;
}

/* The error bound of an FP8 tensor-core GEMM against exact arithmetic, as a multiple of Σ|a·b| over k
 * products. Hopper's FP8 MMA adds each group of 32 products with about 14 significant bits (aligned to
 * the group's largest term, DeepSeek-V3 §3.3.2); cuBLASLt's split accumulation only moves the running sum
 * into fp32 between groups of instructions, so both modes lose up to 2^-13 of the running sum per group.
 * Measured on an H100 (2026-11-26, k = 128..512): max |err|/Σ|a·b| = 5.6e-4 split, 8.2e-4 fast; an
 * fp32-accumulation bound (1e-5) fails by 30x there. Wrong scales or layouts are off by O(|ref|). */
static inline double fp8_mma_tol(int64_t k) { return (double)(k / 32 + 2) * 0x1p-13; }

static inline uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float from_bits(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
/* Same bits, or both NaN. */
static inline bool same_float(float a, float b) { return bits_of(a) == bits_of(b) || (a != a && b != b); }

/* Device allocations of one test, freed together. */
typedef struct { const fl_device *d; void *p[64]; int n; } pool;
static inline void *dalloc(pool *pl, size_t bytes) {
    void *p = NULL;
    if (pl->n == 64 || pl->d->alloc(bytes ? bytes : 1, &p) != FL_OK) return NULL;
    return pl->p[pl->n++] = p;
}
static inline void *dput(pool *pl, const void *host, size_t bytes) {
    void *p = dalloc(pl, bytes);
    if (p && bytes && pl->d->from_host(p, host, bytes) != FL_OK) return NULL;
    return p;
}
static inline fl_status dget(pool *pl, void *host, const void *dev, size_t bytes) {
    return pl->d->to_host(host, dev, bytes);
}
static inline void pool_free(pool *pl) { for (int i = 0; i < pl->n; i++) pl->d->free(pl->p[i]); pl->n = 0; }

#endif
