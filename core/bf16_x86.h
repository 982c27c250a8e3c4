/* bf16_x86.h — fp32 → bf16 on 32 lanes with AVX512_BF16's VCVTNE2PS2BF16, bit for bit fl_f32_to_bf16_bits
 * (half_cvt.h): both round to nearest even and quiet a NaN by truncating it and setting bit 6; the instruction
 * differs only on denormal inputs, which it flushes to ±0, so a vector holding one takes the integer path
 * (half_cvt.h's rounding on 16 lanes). Host x86-64 only; callers check avx512bf16 at run time
 * (fl_bf16_x86_available) and compile the caller with FL_BF16_X86_TARGET. */
#ifndef FL_BF16_X86_H
#define FL_BF16_X86_H
#if defined(__x86_64__) && !defined(__CUDACC__)
#include <immintrin.h>
#include <stdbool.h>
#include "cpu_isa.h"

#define FL_BF16_X86_TARGET __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16")))
#define FL_BF16_X86_INLINE static inline __attribute__((always_inline)) FL_BF16_X86_TARGET

static inline bool fl_bf16_x86_available(void) {
    return fl_cpu_isa_allows(FL_ISA_AVX512_BF16) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bf16");
}

/* x's 16 lanes rounded to bf16 (half_cvt.h's integer rounding), each in the low half of its 32-bit lane. */
FL_BF16_X86_INLINE __m512i fl_bf16_x86_int16(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 isnan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                    _mm512_set1_epi32(0x7F800000));
    const __m512i rnd = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                                         _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
    return _mm512_srli_epi32(_mm512_mask_blend_epi32(isnan, rnd, _mm512_or_si512(u, _mm512_set1_epi32(0x400000))), 16);
}

/* 32 bf16: lo's 16 lanes, then hi's. */
FL_BF16_X86_INLINE __m512i fl_bf16_x86_pack32(__m512 lo, __m512 hi) {
    if (__builtin_expect((_mm512_fpclass_ps_mask(lo, 0x20) | _mm512_fpclass_ps_mask(hi, 0x20)) != 0, 0))
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(fl_bf16_x86_int16(lo))),
                                  _mm512_cvtepi32_epi16(fl_bf16_x86_int16(hi)), 1);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* 16 bf16 of x's lanes. */
FL_BF16_X86_INLINE __m256i fl_bf16_x86_pack16(__m512 x) {
    if (__builtin_expect(_mm512_fpclass_ps_mask(x, 0x20) != 0, 0)) return _mm512_cvtepi32_epi16(fl_bf16_x86_int16(x));
    return (__m256i)_mm512_cvtneps_pbh(x);
}
#endif
#endif
