/* cpu_avx2.h — AVX2 helpers the CPU's AVX2 + FMA kernels share (the GEMM's family in cpu_fp8_mm_fma.c and the
 * bf16 attention in cpu_nn_attn_fma.c). */
#ifndef FL_CPU_AVX2_H
#define FL_CPU_AVX2_H
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

/* The 8 × 8 matrix of floats in r[0..8) (row i in r[i]) transposed in place. */
static inline __attribute__((always_inline)) void fl_avx2_transpose8(__m256 r[8]) {
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* r[q] (rows 0-3) and r[4 + q] (rows 4-7), 128-bit lane l: column 4l + q */
    for (int q = 0; q < 4; q++) {
        t[q] = _mm256_permute2f128_ps(r[q], r[4 + q], 0x20);
        t[4 + q] = _mm256_permute2f128_ps(r[q], r[4 + q], 0x31);
    }
    for (int i = 0; i < 8; i++) r[i] = t[i];
}

/* Lanes [0, n) of 8 set, as a maskload/maskstore mask. */
static inline __m256i fl_avx2_lanes(int64_t n) {
    const int k = n <= 0 ? 0 : n >= 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* n floats at p from lane 0: a whole vector when n ≥ 8, else a masked load whose other lanes are +0 (n ≤ 0: none
 * read). Unmasked where it can be: a masked load is slower. */
static inline __m256 fl_avx2_load_n(const float *p, int64_t n) {
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, fl_avx2_lanes(n));
}

/* The exponential's last steps on 8 lanes, shared by fl_nn_expf's 8-lane copies (softmax's FMA-free expf8, attention's
 * exp8): y = p(r) ≈ e^r times 2^k, applied as fl_nn_expf applies it (two exact power-of-two factors, so a k of -126
 * and below keeps its subnormal); then x below lo gives +0, above hi +inf, and a NaN x itself. k holds whole numbers
 * (as floats) in [-150, 128]. */
static inline __m256 fl_avx2_exp_finish(__m256 y, __m256 k, __m256 x, __m256 lo, __m256 hi) {
    const __m256i ki = _mm256_cvttps_epi32(k), k1 = _mm256_srai_epi32(ki, 1), b = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, b), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ki, k1), b), 23));
    y = _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
    y = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
#endif
