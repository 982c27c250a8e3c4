/* hypot1.h — hypot of two fp32 numbers, correctly rounded to fp32: the CPU's loop (core/cpu/cpu_elementwise.c) and
 * the CUDA kernels (kernels/elementwise.cu) share these definitions, so the two give the same bits.
 * Why double: x² and y² of fp32 x and y are exact in double (24-bit significands give 48 bits, and the exponents,
 * 2^-298 to 2^256, lie inside double's normal range), so s = x² + y² is rounded once (relative error ≤ 2^-53) and
 * r = √s once more: |r − √(x² + y²)| ≤ 1.5·2^-53·h, 1.5 double ulps of r. Rounding r to fp32 is then the correctly
 * rounded hypot unless a midpoint between two floats lies within those 1.5 ulps of r (29 bits below fp32's last
 * one: about one pair in 10^8), or the result is subnormal (a coarser grid). Those results, NaN included, are flagged
 * (fl_hypot_hard) and decided exactly (fl_hypot_exact): a midpoint m of 25 bits has m² exact in double, and x² + y²
 * is s + e exactly (TwoSum), so the sign of (s − m²) + e (s − m² exact: the two lie within 2^-21 of each other, or
 * are both multiples of 2^-300 below 2^-250) says on which side of m the exact hypot lies, a tie included, which
 * goes to even. glibc's hypotf is the double expression alone; torch's CPU hypot is SLEEF's hypotf_u05 (0.5001
 * ulp) on vectors of 8 and std::hypot on the rest. */
#ifndef FL_HYPOT1_H
#define FL_HYPOT1_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FL_HYP_FN __host__ __device__ static inline
#else
#define FL_HYP_FN static inline __attribute__((always_inline))
#endif

FL_HYP_FN uint64_t fl_hyp_bits64(double d) { uint64_t u; memcpy(&u, &d, sizeof u); return u; }
FL_HYP_FN uint32_t fl_hyp_bits32(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
FL_HYP_FN float fl_hyp_float(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

/* √(x² + y²) in double, before the rounding to fp32: x and y are |x| and |y| as doubles */
FL_HYP_FN double fl_hypot_root(double x, double y) { return sqrt(x * x + y * y); }

/* r must be decided exactly: NaN, below fp32's normal range (0 included), or within 2 ulps of a midpoint between two
 * floats (r's 29 bits under fp32's precision within 2 of 2^28) */
FL_HYP_FN bool fl_hypot_hard(double r) {
    const int64_t low = (int64_t)(fl_hyp_bits64(r) & 0x1fffffffu) - 0x10000000;
    return !(r >= 0x1p-126) || (low >= -2 && low <= 2);
}

/* the float of bits u ≥ 0 as a double, counting on past the largest float as if the exponent had no bound (0x7f800000
 * is 2^128, the next 2^128 + 2^104), so that midpoints at the top are 2^128 − 2^103 and so on */
FL_HYP_FN double fl_hyp_at(uint32_t u) {
    return u < 0x7f800000u ? (double)fl_hyp_float(u) : 0x1p128 + (double)(u - 0x7f800000u) * 0x1p104;
}

/* the sign of x² + y² − m², x and y as doubles (their squares exact), m the midpoint: −1, 0 or 1 */
FL_HYP_FN int fl_hyp_side(double x, double y, double m) {
    const double a = x * x, b = y * y, s = a + b;
    const double bv = s - a, e = (a - (s - bv)) + (b - bv);   /* TwoSum: a + b = s + e exactly */
    const double t = (s - m * m) + e;
    return t > 0 ? 1 : t < 0 ? -1 : 0;
}

/* the correctly rounded hypot of finite x and y (|x| and |y| as doubles), r = fl_hypot_root(x, y) */
FL_HYP_FN float fl_hypot_exact(double x, double y, double r) {
    if (r != r) return (float)r;
    const uint32_t b0 = fl_hyp_bits32((float)r);
    if (b0 == 0) return 0.0f;   /* r = 0 only at (0, 0): x² + y² ≥ 2^-298 otherwise */
    const double f = fl_hyp_at(b0);
    const int lo = fl_hyp_side(x, y, 0.5 * (fl_hyp_at(b0 - 1) + f));
    uint32_t b = b0;
    if (lo <= 0) b = lo < 0 || (b0 & 1u) ? b0 - 1 : b0;   /* a tie to the even one */
    else {
        const int hi = fl_hyp_side(x, y, 0.5 * (f + fl_hyp_at(b0 + 1)));
        if (hi > 0 || (hi == 0 && (b0 & 1u))) b = b0 + 1;
    }
    return fl_hyp_float(b < 0x7f800000u ? b : 0x7f800000u);
}

/* hypot(x, y) for fp32 x and y: +inf where either is infinite (the other NaN included: C's hypot, torch's), NaN
 * where either is NaN otherwise, else correctly rounded */
FL_HYP_FN float fl_hypot1(float x, float y) {
    const double ax = fabs((double)x), ay = fabs((double)y), r = fl_hypot_root(ax, ay);
    if (ax == INFINITY || ay == INFINITY) return INFINITY;
    return fl_hypot_hard(r) ? fl_hypot_exact(ax, ay, r) : (float)r;
}

#undef FL_HYP_FN
#endif
