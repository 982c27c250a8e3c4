/* half_cvt.h — fp32 <-> bf16 / fp16 bit conversions for host C (core/format.c) and CUDA (kernels/, as
 * __host__ __device__): one definition, so every device rounds 16-bit values the same way.
 *   to fp32: exact; an fp16 NaN gets the quiet bit and keeps its payload (as F16C's VCVTPH2PS does).
 *   from fp32: round to nearest even; overflow becomes inf; a NaN keeps its top payload bits with the
 *   quiet bit set.
 * Also the fp32 <-> bits reinterpretations every such conversion needs (fl_f2u, fl_u2f). */
#ifndef FL_HALF_CVT_H
#define FL_HALF_CVT_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define FL_HALF_FN static __host__ __device__ inline
#else
#define FL_HALF_FN static inline
#endif

FL_HALF_FN uint32_t fl_f2u(float x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u; memcpy(&u, &x, 4); return u;
#endif
}
FL_HALF_FN float fl_u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x; memcpy(&x, &u, 4); return x;
#endif
}

FL_HALF_FN float fl_bf16_bits_to_f32(uint16_t h) { return fl_u2f((uint32_t)h << 16); }

FL_HALF_FN uint16_t fl_f32_to_bf16_bits(float x) {
    uint32_t u = fl_f2u(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);   /* quiet NaN */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

FL_HALF_FN float fl_f16_bits_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) return fl_u2f(sign | 0x7F800000u | (m ? 0x400000u | (m << 13) : 0u));
    if (e == 0) return fl_u2f(sign | fl_f2u((float)m * 0x1p-24f));   /* exact: m < 2^10 */
    return fl_u2f(sign | ((e + 112u) << 23) | (m << 13));
}

FL_HALF_FN uint16_t fl_f32_to_f16_bits(float x) {
    uint32_t u = fl_f2u(x), sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x47800000u) return (uint16_t)(sign | 0x7C00u);       /* >= 65536 always rounds to inf */
    if (a >= 0x38800000u) {                                         /* normal: >= 2^-14 */
        uint32_t rnd = a + 0xFFFu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((rnd >> 13) - (112u << 10)));   /* a carry may reach 0x7C00 = inf */
    }
    /* subnormal: spacing 2^-24; adding 0.5 (2^-1) leaves the rounded count in the low mantissa bits */
#if defined(__CUDA_ARCH__)
    return (uint16_t)(sign | (fl_f2u(__fadd_rn(fl_u2f(a), 0.5f)) - 0x3F000000u));
#else
    return (uint16_t)(sign | (fl_f2u(fl_u2f(a) + 0.5f) - 0x3F000000u));
#endif
}

#undef FL_HALF_FN
#endif
