/* fp8_x86.h — FP8 codes to fp32 with AVX2 and F16C (x86-64-v3, the build's baseline), exactly, for host C:
 * core/format.c's bulk dequantize and the CPU's AVX2 + FMA GEMM family (core/cpu/cpu_fp8_mm_fma.c).
 * An E5M2 code is the upper byte of the fp16 with the same value; an E4M3 code c becomes the fp16
 * (c & 0x80) << 8 | (c & 0x7f) << 7, whose exponent field is E4M3's (bias 15 for 7) and whose mantissa's top three
 * bits are E4M3's, subnormals included, so its value is exactly 2⁻⁸ times the code's; the code 0x7f (E4M3's NaN,
 * which would read as 480) gets a NaN's exponent and mantissa. F16C's VCVTPH2PS is exact, and E4M3 values are then
 * multiplied by 2⁸ (exact). ~10 vector operations per 16 codes. */
#ifndef FL_FP8_X86_H
#define FL_FP8_X86_H
#if defined(__x86_64__) && !defined(__CUDACC__)
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

/* 16 codes in the 16-bit lanes of w → the bit patterns of the fp16 values (E4M3: 2⁻⁸ times the code's value). */
static inline __attribute__((always_inline)) __m256i fl_fp8_x86_fp16(__m256i w, bool e5) {
    if (e5) return _mm256_slli_epi16(w, 8);
    const __m256i mag = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7f)), 7);
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi16(w, 8), _mm256_set1_epi16((short)0x8000));
    const __m256i nan = _mm256_and_si256(_mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x3f80)), _mm256_set1_epi16(0x7e00));
    return _mm256_or_si256(_mm256_or_si256(mag, sign), nan);
}

/* The 16 codes at p to fp32 in *lo (codes 0-7) and *hi (8-15), each value exactly the code's, a NaN code as
 * fl_fp8_to_f32 gives it (sign | 0x7fc00000: VCVTPH2PS would keep the fp16's payload). */
static inline __attribute__((always_inline)) void fl_fp8_x86_dec16(const uint8_t *p, bool e5, __m256 *lo, __m256 *hi) {
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p)), h = fl_fp8_x86_fp16(w, e5);
    __m256 v[2] = { _mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)) };
    for (int i = 0; i < 2; i++)
        if (!e5) v[i] = _mm256_mul_ps(v[i], _mm256_set1_ps(256.0f));
    /* NaN codes (E4M3 0x7f/0xff, E5M2 0x7d-0x7f/0xfd-0xff) are rare: fixed only where there is one */
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7f));
    const __m256i nan = _mm256_cmpgt_epi16(mag, _mm256_set1_epi16(e5 ? 0x7c : 0x7e));
    if (!_mm256_testz_si256(nan, nan))
        for (int i = 0; i < 2; i++) {
            const __m256 qnan = _mm256_or_ps(_mm256_and_ps(v[i], _mm256_set1_ps(-0.0f)),
                                             _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
            v[i] = _mm256_blendv_ps(v[i], qnan, _mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
        }
    *lo = v[0];
    *hi = v[1];
}
#endif
#endif
