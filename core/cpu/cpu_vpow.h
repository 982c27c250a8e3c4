/* cpu_vpow.h — x^y for fp32 x and one finite double y (a tensor to the power of a number), evaluated in double in
 * code that `omp simd` loops vectorise (the loop called glibc's double pow once per element: x^3.5 was 4.1× torch).
 * log2|x| and 2^w are each good to a few double ulps, so x^y is one rounding to fp32 of a value within ~1e-13
 * relative of the exact one (an exact power of two exactly): the correctly rounded fp32 result, and where that value
 * lies within 2^-38 of a tie (an exact power can be one) pow's, as before (fl_vp_near_tie): no result moved from
 * (float)pow((double)x, y)'s but NaNs' signs (below), and the worst error against powl was 0.5000 ulp (tests/c/test_vpow.c,
 * docs/performance.md "Single ops against PyTorch 2.15, a wider sweep (stop 95)"); torch's SLEEF powf is 1 ulp.
 * Every multiply-add an explicit fma, so the AVX2 and the AVX-512 copy of a loop give the same bits. The special
 * values are C99's pow's (Annex F), which the loop selects: x = ±0 and ±inf by y's sign and whether y is an odd
 * integer, a negative x to an integer power signed by its parity and to any other power NaN, 1^y = 1, and for a NaN x
 * x itself quieted, its sign kept (glibc's pow drops it before an odd y: a NaN's sign is not a value torch promises
 * either). A y of 0, ±inf or NaN is left to the caller. */
#ifndef FL_CPU_VPOW_H
#define FL_CPU_VPOW_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* log2 a for a finite positive float a, in double, as e + l: a = 2^e·m with m in [√½, √2) (a subnormal a scaled
 * by 2^23 first, fl_vm_log's reduction), s = (m − 1)/(m + 1) with |s| ≤ 0.1716, ln m = 2·atanh s =
 * 2s·Σ s^2j/(2j + 1) for j ≤ 8 (the first term left out, s^18/19, is below 1e-15 of the sum), l = ln m / ln 2.
 * e is returned apart so that y·e stays exact where it can: a power of two to an integer power is exact. */
static inline __attribute__((always_inline)) double fl_vp_log2(float a, double *e_out) {
    const bool sub = a < 0x1p-126f;
    union { float f; uint32_t u; } q = { .f = sub ? a * 8388608.0f : a };
    const int32_t e = (int32_t)(q.u - 0x3F3504F3u) >> 23;   /* 0x3F3504F3: √½'s bits */
    union { uint32_t u; float f; } m = { .u = q.u - ((uint32_t)e << 23) };
    const double md = (double)m.f, s = (md - 1.0) / (md + 1.0), z = s * s;
    double p = 1.0 / 17.0;
    p = fma(p, z, 1.0 / 15.0);
    p = fma(p, z, 1.0 / 13.0);
    p = fma(p, z, 1.0 / 11.0);
    p = fma(p, z, 1.0 / 9.0);
    p = fma(p, z, 1.0 / 7.0);
    p = fma(p, z, 1.0 / 5.0);
    p = fma(p, z, 1.0 / 3.0);
    *e_out = (double)(sub ? e - 23 : e);
    return 2.0 * 0x1.71547652b82fep0 * s * fma(p, z, 1.0);   /* (2/ln 2 exact: a power of two times 1/ln 2) */
}

/* 2^w as a double for w in [-160, 130] (callers clamp; 2^-160 is below half the smallest fp32 subnormal, 2^130
 * above fp32's max): k = round(w) (w − k exact), r = (w − k)·ln 2 with |r| ≤ 0.347, e^r by its Taylor series to
 * r^12/12! (the rest below 2e-16 relative), times 2^k built from its bits (exact: the double range holds every k
 * here). */
static inline __attribute__((always_inline)) double fl_vp_exp2(double w) {
    const double SHIFT = 0x1.8p52;
    const double kk = w + SHIFT, k = kk - SHIFT;
    union { double d; uint64_t u; } kb = { .d = kk };
    const int64_t ki = (int64_t)(kb.u - 0x4338000000000000ull);
    const double r = (w - k) * 0x1.62e42fefa39efp-1;
    double p = 1.0 / 479001600.0;
    p = fma(p, r, 1.0 / 39916800.0);
    p = fma(p, r, 1.0 / 3628800.0);
    p = fma(p, r, 1.0 / 362880.0);
    p = fma(p, r, 1.0 / 40320.0);
    p = fma(p, r, 1.0 / 5040.0);
    p = fma(p, r, 1.0 / 720.0);
    p = fma(p, r, 1.0 / 120.0);
    p = fma(p, r, 1.0 / 24.0);
    p = fma(p, r, 1.0 / 6.0);
    p = fma(p, r, 0.5);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    union { uint64_t u; double d; } two_k = { .u = (uint64_t)(ki + 1023) << 52 };
    return p * two_k.d;
}

/* Whether v, |x^y| in double before its rounding to fp32, may round to another float than the exact power does: v
 * moved by 2^-38 of itself either way rounds to two floats (a tie between them lies that near; subnormal results and
 * the overflow boundary included). v is within 2^-42 of the exact value: 2^-43.9 at worst on every 97th float for
 * twenty exponents, y = -149 the worst, errors growing with |y·log2 x| ≤ 160. Without it an exact power that is a
 * tie came out on either side: 0x1.e08p-31^2.5 = 62^5·2^-105, 25 bits, gave 0x1.b4d89ep-76 where pow and torch give
 * 0x1.b4d8ap-76 (until stop 95's review). Floating-point compares: the 64-bit integer ones cost half the loop. */
static inline __attribute__((always_inline)) int fl_vp_near_tie(double v) {
    return (float)(v * (1.0 + 0x1p-38)) != (float)(v * (1.0 - 0x1p-38));
}

/* x^y for one finite nonzero y; y_int: y is an integer, y_odd: an odd one (both found once by the caller). *tie: the
 * result is a value near a tie (fl_vp_near_tie), which the caller takes from (float)pow((double)x, y) instead.
 * lane_edge (a constant where inlined): pick 0^y's and inf^y's value by a compare of a alone between two values chosen
 * once by y's sign, where the other form compares a's test with y's (a lane's bool against a scalar one): GCC makes
 * that a byte-wide mask, and the byte's 64 (AVX-512) or 32 (AVX2) lanes set the loop's vectorisation factor: the
 * AVX-512 copy ran 32 floats a turn in 256-bit double vectors with its constants spilled (1960 instructions; x^2.5
 * 1.4× torch, stop 96), and runs 16 a turn in 512-bit ones with it (1346). The AVX2 copy keeps the byte's form, whose
 * 32 lanes a turn ran faster there (20 against 24 ms on 4M floats: four chains of its fma polynomials at once). The
 * same value either way (a selection). */
static inline __attribute__((always_inline)) float fl_vp_pow_fast(float x, double y, bool y_int, bool y_odd,
                                                                    bool lane_edge, int *tie) {
    const float a = fabsf(x);
    double e;
    const double l = fl_vp_log2(a, &e);       /* (garbage for a zero, infinite or NaN x: selected away below) */
    double w = fma(y, e, y * l);              /* y·log2|x|, y·e's product exact before the one rounding */
    w = w > -160.0 ? w : -160.0;
    w = w < 130.0 ? w : 130.0;
    const double vd = fl_vp_exp2(w);
    const float v = (float)vd;                /* the one rounding to fp32: subnormals, overflow to inf */
    union { uint32_t u; float f; } dnan = { .u = 0xFFC00000u };   /* the NaN x86's invalid operations give, glibc's pow's */
    float r = x > 0.0f ? v : (y_int ? (y_odd ? -v : v) : dnan.f);
    const float e_zero = y > 0.0 ? 0.0f : INFINITY, e_inf = y > 0.0 ? INFINITY : 0.0f;   /* 0^y, inf^y */
    const float edge = lane_edge ? (a == 0.0f ? e_zero : e_inf) : ((a == 0.0f) == (y > 0.0) ? 0.0f : INFINITY);
    r = a == 0.0f || a == INFINITY ? (y_odd && signbit(x) ? -edge : edge) : r;
    *tie = fl_vp_near_tie(vd);   /* (never for a zero, infinite or NaN x: vd is then 2^±160 or 1) */
    return x != x ? x + x : r;   /* (a select of |x| for an odd y, glibc's sign, kept gcc from vectorising the loop) */
}

/* x^y, one element: fl_vp_pow_fast, or pow where that is near a tie (the scalar form of the op's loop) */
static inline float fl_vp_pow(float x, double y, bool y_int, bool y_odd) {
    int tie;
    const float r = fl_vp_pow_fast(x, y, y_int, y_odd, true, &tie);
    return tie ? (float)pow((double)x, y) : r;
}

#endif
