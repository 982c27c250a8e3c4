/* fp8_cvt.h — fp32 <-> E4M3/E5M2 for device (and host, for tests), C++ templates for nvcc only, by integer bit manipulation
 * so it is bit-exact with core/format.c: round to nearest even, subnormals, signed zero,
 * saturate or IEEE overflow (docs/fp8-spec.md §1). */
#ifndef FL_FP8_CVT_H
#define FL_FP8_CVT_H

#include <stdint.h>
#include <string.h>
#include <math.h>
#include "half_cvt.h"

#if defined(__CUDACC__)
#define FL_HD __host__ __device__ __forceinline__
#else
#define FL_HD static inline
#endif

/* fl_f2u / fl_u2f: core/half_cvt.h. */

/* Format constants. E4M3 (OCP E4M3FN): bias 7, 3 mantissa bits, largest finite code 0x7e (448),
 * no infinity, NaN S.1111.111. E5M2: bias 15, 2 mantissa bits, largest finite 0x7b (57344),
 * inf 0x7c, NaN 0x7e (the quiet form: top mantissa bit set, as fp32's quiet NaN truncates to). */
template <int M, int B> struct fl_fp8_fmt;
template <> struct fl_fp8_fmt<3, 7> {
    static constexpr uint32_t max_code = 0x7e, nan_code = 0x7f, ovf_code = 0x7f;  /* IEEE overflow → NaN */
    static constexpr float max = 448.0f, sub_scale = 512.0f;                   /* 2^(B+M-1) */
};
template <> struct fl_fp8_fmt<2, 15> {
    static constexpr uint32_t max_code = 0x7b, nan_code = 0x7e, ovf_code = 0x7c;  /* IEEE overflow → inf */
    static constexpr float max = 57344.0f, sub_scale = 65536.0f;
};

/* fp32 → FP8 with mantissa bits M and bias B. *over is set when a finite or infinite x rounds
 * past the largest finite code (what the "saturated" counter counts, as core/format.c does). */
template <int M, int B>
FL_HD uint8_t fl_cvt_fp8(float x, bool ieee, bool *over) {
    typedef fl_fp8_fmt<M, B> F;
    uint32_t u = fl_f2u(x);
    uint32_t sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    *over = false;
    if (a > 0x7f800000u) return (uint8_t)(sign | F::nan_code);
    uint32_t code;
    if (a < ((uint32_t)(127 + 1 - B) << 23)) {
        /* below the smallest normal: count in units of the smallest subnormal 2^(1-B-M); the
         * product is exact (power of two), rintf rounds to nearest even; 2^M lands on the
         * smallest normal's code, so the carry is right. */
        code = (uint32_t)rintf(fl_u2f(a) * F::sub_scale);
    } else if (a == 0x7f800000u) {
        code = 0xffu;                                     /* infinity: always overflows */
    } else {
        /* RNE on the fp32 pattern: a mantissa carry rolls into the exponent, as it should. */
        const int shift = 23 - M;
        uint32_t r = a + ((1u << (shift - 1)) - 1u) + ((a >> shift) & 1u);
        code = (r >> shift) - ((uint32_t)(127 - B) << M);
    }
    *over = code > F::max_code;
    if (*over) code = ieee ? F::ovf_code : F::max_code;
    return (uint8_t)(sign | code);
}

/* FP8 → fp32, exact. NaN codes give a quiet NaN with the code's sign. */
template <int M, int B>
FL_HD float fl_dec_fp8(uint8_t b) {
    typedef fl_fp8_fmt<M, B> F;
    uint32_t sign = (uint32_t)(b & 0x80u) << 24, mag = b & 0x7fu;
    uint32_t e = mag >> M, m = mag & ((1u << M) - 1u);
    if (M == 3 ? mag == 0x7fu : e == 0x1fu) {
        if (M == 2 && m == 0) return fl_u2f(sign | 0x7f800000u);   /* E5M2 infinity */
        return fl_u2f(sign | 0x7fc00000u);
    }
    (void)F::max;
    if (e == 0) {  /* subnormal: m * 2^(1-B-M), exact in fp32 */
        float v = (float)m * (1.0f / F::sub_scale);
        return fl_u2f(sign | fl_f2u(v));
    }
    return fl_u2f(sign | ((e - B + 127u) << 23) | (m << (23 - M)));
}

#endif
