/* scale_rule.h — the one rule that turns an amax into an FP8 scale (docs/fp8-spec.md §2–§4), for host
 * C (core/, core/cpu/) and CUDA (kernels/, as __host__ __device__). Plain numbers only: the caller
 * passes the format's max finite value (fl_format(fmt)->max on the host, fl_fp8_fmt<>::max or a
 * launch argument on the device), so devices need no recipe or layer header to apply it.
 *   plain:  s = (fmt_max · 2^-margin) / amax in fp32 (the product is exact, the quotient rounded once; TE's
 *           order); an infinite result becomes FLT_MAX, one below the smallest normal fp32 (a large margin and
 *           amax: margin 40, amax 3e38 gave 0, margin 20 a subnormal whose reciprocal is inf) becomes 2^-126, so
 *           that s and scale_inv = 1/s are both finite and > 0.
 *   pow2:   s = 2^(floor(log2(fmt_max / amax)) − margin), floor(log2) from the binary exponent of the
 *           double quotient (exact), clamped to 2^-126 .. 2^127, so that it stays a power of two (FLT_MAX,
 *           where it stopped before, is not one, and its reciprocal is not exact).
 *   `fallback` for a NaN, infinite or non-positive amax (delayed scaling keeps the old scale).
 *   current scaling (torchao, MS-AMP's fresh scales): the rule of max(amax, FL_AMAX_FLOOR) with
 *           fallback 1 — a NaN amax counts as the floor too, an all-zero tensor scales by
 *           fmt_max/1e-12 (finite, harmless: zeros stay zeros), and an infinite amax scales by 1 (torchao's
 *           formula would give 0 and a NaN cast; docs/fp8-spec.md §3 says why not). That is the cast's own
 *           scale; the scale an MS-AMP role records keeps the previous one there (core/scaling.c, §4). */
#ifndef FL_SCALE_RULE_H
#define FL_SCALE_RULE_H

#include <float.h>
#include <math.h>
#include <stdbool.h>

#if defined(__CUDACC__)
#define FL_SR_FN static __host__ __device__ inline
#else
#define FL_SR_FN static inline
#endif

/* The floor torchao puts under an amax before dividing (docs/fp8-spec.md §3, §6). */
#define FL_AMAX_FLOOR 1e-12f

FL_SR_FN float fl_amax_to_scale(float amax, float fmt_max, int margin, bool pow2, float fallback) {
    if (!(amax > 0.0f) || !isfinite(amax)) return fallback;
    if (!pow2) {
        /* TE's order (delayed_scaling.cu: scaled_max = fp8_max·2^-margin, then / amax): the same number unless
         * fmt_max/amax alone would overflow (amax 1e-38, margin 10: 4.4e37, not FLT_MAX) */
#if defined(__CUDA_ARCH__)
        float s = __fdiv_rn(fmt_max * ldexpf(1.0f, -margin), amax);
#else
        float s = (fmt_max * ldexpf(1.0f, -margin)) / amax;
#endif
        return isinf(s) ? FLT_MAX : s < FLT_MIN ? FLT_MIN : s;
    }
    int e;
    (void)frexp((double)fmt_max / (double)amax, &e);   /* r = f·2^e, f in [0.5, 1): floor(log2 r) = e − 1 */
    int ex = e - 1 - margin;
    if (ex > 127) ex = 127;
    if (ex < -126) ex = -126;
    return ldexpf(1.0f, ex);
}

FL_SR_FN float fl_amax_to_scale_current(float amax, float fmt_max, int margin, bool pow2) {
    return fl_amax_to_scale(amax > FL_AMAX_FLOOR ? amax : FL_AMAX_FLOOR, fmt_max, margin, pow2, 1.0f);
}

#undef FL_SR_FN
#endif
