/* philox.h — Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", Random123's
 * constants), for host C (core/rng.c, core/cpu/) and CUDA (kernels/, as __host__ __device__), so a
 * dropout mask drawn on the GPU is the CPU's, bit for bit. Block (key, counter): the 128-bit counter
 * is (counter_lo, counter_hi, 0, 0), the 64-bit key is the seed; ten rounds give four 32-bit words. */
#ifndef FL_PHILOX_H
#define FL_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FL_PHILOX_FN static __host__ __device__ inline
#else
#define FL_PHILOX_FN static inline
#endif

#define FL_PHILOX_M0 0xD2511F53u
#define FL_PHILOX_M1 0xCD9E8D57u
#define FL_PHILOX_W0 0x9E3779B9u   /* key schedule: k0 += W0, k1 += W1 after each round */
#define FL_PHILOX_W1 0xBB67AE85u

/* One round on the counter words (c0..c3) under round key (k0, k1). Scalar and branch-free, so a loop
 * over lanes that calls it vectorises (core/cpu/cpu_nn_act.c). */
FL_PHILOX_FN void fl_philox_round(uint32_t *c0, uint32_t *c1, uint32_t *c2, uint32_t *c3, uint32_t k0, uint32_t k1) {
    uint64_t p0 = (uint64_t)FL_PHILOX_M0 * *c0, p1 = (uint64_t)FL_PHILOX_M1 * *c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0, hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    *c0 = hi1 ^ *c1 ^ k0;
    *c1 = lo1;
    *c2 = hi0 ^ *c3 ^ k1;
    *c3 = lo0;
}

/* The four words of block (key, counter). */
FL_PHILOX_FN void fl_philox4x32_10(uint64_t key, uint64_t counter, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        fl_philox_round(&c0, &c1, &c2, &c3, k0, k1);
        k0 += FL_PHILOX_W0;
        k1 += FL_PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

#undef FL_PHILOX_FN
#endif
