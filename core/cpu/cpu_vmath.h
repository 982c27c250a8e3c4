/* cpu_vmath.h — fp32 transcendental functions written so that `omp simd` loops vectorise them (glibc's expf,
 * erff, tanh only vectorise under -ffast-math, and the double forms the elementwise ops used never do):
 * e^a (for a ≤ 0, and over the whole range for torch's exp), ln x, the logistic sigmoid, tanh, and the normal
 * distribution's Φ and φ of the exact GELU. Branch-free (selects the compiler turns into blends), every multiply-add an explicit fmaf (one rounding;
 * the build does not contract on its own), so an AVX2 and an AVX-512 copy of a loop give the same bits, and
 * kernels/activation.cu and kernels/elementwise.cu port them operation by operation (tests/c/test_gpu_nn.c and
 * test_gpu_ops.c compare the ports' bits on the host). Errors against the correctly rounded result, measured over
 * every float (tests/c/test_vmath.c): docs/performance.md, "Vectorised sigmoid, tanh, SiLU and exact GELU".
 * The polynomials' coefficients were fitted for fp8lab (weighted least squares towards the minimax relative
 * error, in double, on Chebyshev-spaced points), not taken from a library. */
#ifndef FL_CPU_VMATH_H
#define FL_CPU_VMATH_H
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define FL_VM_LOG2E  1.44269504088896341f
#define FL_VM_SHIFT  12582912.0f        /* 1.5·2^23: x + SHIFT rounds x to an integer held in the low bits */
#define FL_VM_LN2_HI 0.693359375f       /* ln 2 = HI − LO, HI with few bits so that k·HI is exact */
#define FL_VM_LN2_LO 2.12194440e-4f

/* The exponential's reduction for a in [-104, 89]: k = round(a·log2 e) (as a float; ki the same as an integer, from
 * the shifted sum's bits, no float-to-int conversion), r = a − k·ln 2 in [-0.35, 0.35], and p(r) of degree 5 with
 * e^r = 1 + r + r²·p(r) to ~1e-9 relative. Returns p; r through the pointer. */
static inline __attribute__((always_inline)) float fl_vm_exp_reduce(float a, float *k, int32_t *ki, float *r) {
    const float kk = fmaf(a, FL_VM_LOG2E, FL_VM_SHIFT);
    *k = kk - FL_VM_SHIFT;
    union { float f; uint32_t u; } q = { .f = kk };
    *ki = (int32_t)(q.u - 0x4B400000u);
    float rr = fmaf(*k, -FL_VM_LN2_HI, a);
    rr = fmaf(*k, FL_VM_LN2_LO, rr);
    *r = rr;
    float p = 1.9875691500e-4f;
    p = fmaf(p, rr, 1.3981999507e-3f);
    p = fmaf(p, rr, 8.3334519073e-3f);
    p = fmaf(p, rr, 4.1665795894e-2f);
    p = fmaf(p, rr, 1.6666665459e-1f);
    return fmaf(p, rr, 5.0000001201e-1f);
}

/* e^r − 1 = r + r²·p(r) of the reduction above (the sigmoid's and tanh's form: no 1 added, so no cancellation). */
static inline __attribute__((always_inline)) float fl_vm_em1_reduced(float a, float *k, int32_t *ki) {
    float r;
    const float p = fl_vm_exp_reduce(a, k, ki, &r);
    return fmaf(p, r * r, r);
}

/* 2^ki for ki in [-126, 127] */
static inline __attribute__((always_inline)) float fl_vm_pow2i(int32_t ki) {
    union { uint32_t u; float f; } s = { .u = (uint32_t)(ki + 127) << 23 };
    return s.f;
}

/* e^a for a ≤ 0, subnormal results included (2^k applied as two exact factors, as fl_nn_expf does); 0 below −104
 * (e^-104 is below half the smallest subnormal) and for a NaN (callers that may see one restore it). */
static inline __attribute__((always_inline)) float fl_vm_exp_neg(float a) {
    const float ac = a >= -104.0f ? a : -104.0f;
    float k;
    int32_t ki;
    const float y = fl_vm_em1_reduced(ac, &k, &ki) + 1.0f;
    const int32_t k1 = ki >> 1, k2 = ki - k1;   /* each in [-75, 0] */
    return a >= -104.0f ? y * fl_vm_pow2i(k1) * fl_vm_pow2i(k2) : 0.0f;
}

/* e^a over the whole float range (torch's exp): e^r = 1 + r·(1 + r·p(r)), the outer step one fused multiply-add, so
 * only the inner sum's rounding (scaled by |r| ≤ 0.35) and the last one remain: 0.89 ulp at worst
 * (glibc's expf, 0.502, is a call per element that does not vectorise); then 2^k as two exact factors (subnormal
 * results rounded once, overflow to inf at the same point as the correctly rounded result). NaN stays itself, −inf
 * gives 0, +inf and anything above 89 inf. */
static inline __attribute__((always_inline)) float fl_vm_exp(float a) {
    float ac = a >= -104.0f ? a : -104.0f;   /* a NaN becomes −104 here and is restored at the end */
    ac = ac <= 89.0f ? ac : 89.0f;
    float k, r;
    int32_t ki;
    const float p = fl_vm_exp_reduce(ac, &k, &ki, &r);
    const float y = fmaf(r, fmaf(p, r, 1.0f), 1.0f);
    const int32_t k1 = ki >> 1, k2 = ki - k1;   /* each in [-75, 64] */
    const float e = y * fl_vm_pow2i(k1) * fl_vm_pow2i(k2);
    return a != a ? a : (a >= -104.0f ? e : 0.0f);
}

/* fl_vm_exp for a in [-86.5, 88] (fl_vm_exp_plain), where e^a is a normal float: k in [-125, 127], so 2^k is one
 * factor and y·2^k is exact as y·2^k1·2^k2 is; the same bits without the clamps and the checks. */
static inline __attribute__((always_inline)) int fl_vm_exp_plain(float a) { return a >= -86.5f && a <= 88.0f; }
static inline __attribute__((always_inline)) float fl_vm_exp_normal(float a) {
    float k, r;
    int32_t ki;
    const float p = fl_vm_exp_reduce(a, &k, &ki, &r);
    return fmaf(r, fmaf(p, r, 1.0f), 1.0f) * fl_vm_pow2i(ki);
}

/* ln x (torch's log): x = 2^e·m with m in [√½, √2) (a subnormal x scaled by 2^23 first), f = m − 1 exact, and
 * ln(1 + f) = f − f²/2 + f³·q(f), q of degree 7 (fitted for fp8lab as the others: ~0.1 ulp), e·ln 2 added last in
 * two parts (e·HI exact). 0.82 ulp at worst (glibc's logf 0.805). ln(±0) = −inf, ln of a negative number (−inf
 * too) the NaN 0x7fc00000 (torch's), ln(+inf) = +inf, a NaN stays itself (a signalling one too, as tanh's and the
 * sigmoid's here: torch and glibc set its quiet bit). */
/* ln of q = 2^(e − adj)·m, q's exponent field read as e (adj: 23 for a subnormal scaled by 2^23, else 0); no checks. */
static inline __attribute__((always_inline)) float fl_vm_log_parts(float qf, int32_t adj) {
    union { float f; uint32_t u; } q = { .f = qf };
    const int32_t e = (int32_t)(q.u - 0x3F3504F3u) >> 23;   /* 0x3F3504F3: √½'s bits */
    union { uint32_t u; float f; } m = { .u = q.u - ((uint32_t)e << 23) };
    const float f = m.f - 1.0f;
    const float ef = (float)(e - adj);
    const float z = f * f;
    float c = -7.6344296336e-02f;
    c = fmaf(c, f, 1.2761549652e-01f);
    c = fmaf(c, f, -1.3160194457e-01f);
    c = fmaf(c, f, 1.4201761782e-01f);
    c = fmaf(c, f, -1.6623356938e-01f);
    c = fmaf(c, f, 2.0001226664e-01f);
    c = fmaf(c, f, -2.5000822544e-01f);
    c = fmaf(c, f, 3.3333331347e-01f);
    float y = fmaf(f * z, c, ef * -FL_VM_LN2_LO);
    y = fmaf(-0.5f, fmaf(f, f, -z), y);   /* f² = z + (f² − z) exactly: the part of f²/2 that z rounded off */
    y = fmaf(-0.5f, z, y);
    return fmaf(ef, FL_VM_LN2_HI, f + y);
}

static inline __attribute__((always_inline)) float fl_vm_log(float x) {
    const bool sub = x < 0x1p-126f;
    float l = fl_vm_log_parts(sub ? x * 8388608.0f : x, sub ? 23 : 0);
    l = x > 0.0f ? l : (x == 0.0f ? -INFINITY : NAN);
    l = x == INFINITY ? x : l;
    return x != x ? x : l;
}

/* Whether fl_vm_log(x) is fl_vm_log_parts(x, 0): x positive, normal and finite (its bits in [2^-126's, inf's)). */
static inline __attribute__((always_inline)) int fl_vm_log_plain(float x) {
    union { float f; uint32_t u; } b = { .f = x };
    return b.u - 0x00800000u < 0x7F000000u;
}

/* σ(x) = 1/(1 + e^-x): with e = e^-|x| ≤ 1 (never overflows), 1/(1+e) for x ≥ 0 and e/(1+e) below, one division.
 * σ(±inf) = 1, 0; a NaN stays NaN. */
static inline __attribute__((always_inline)) float fl_vm_sigmoid(float x) {
    const float e = fl_vm_exp_neg(-fabsf(x));
    const float y = (x < 0.0f ? e : 1.0f) / (1.0f + e);
    return x != x ? x : y;
}

/* tanh x = sign(x)·t(|x|): below 0.9, t(a) = a + a³·P(a²) (P of degree 7, ~6e-8 relative, a term at most a third
 * of t: no cancellation, tanh of a subnormal is itself); from there t = 1 − 2e/(1 + e) with e = e^(−2a) < 0.17,
 * whose error is a small part of t's last place (the form m/(2 − m) with m = 1 − e doubled e's error near 1: 2.5
 * ulp; switching at 0.5493, where 2e/(1 + e) is half of t, left 2.25). ±1 past |x| ≈ 9, tanh(-0) = -0, NaN stays
 * NaN. */
#define FL_VM_TANH_EDGE 0.9f
#define FL_VM_TANH_P7 7.654416840523481e-4f
#define FL_VM_TANH_P6 -2.7027507312595844e-3f
#define FL_VM_TANH_P5 5.204496439546347e-3f
#define FL_VM_TANH_P4 -9.80947632342577e-3f
#define FL_VM_TANH_P3 2.214633673429489e-2f
#define FL_VM_TANH_P2 -5.400605499744415e-2f
#define FL_VM_TANH_P1 1.333351880311966e-1f
#define FL_VM_TANH_P0 -3.333333432674408e-1f
/* t(a) below the edge (a = |x|) */
static inline __attribute__((always_inline)) float fl_vm_tanh_near(float a) {
    const float a2 = a * a;
    float p = FL_VM_TANH_P7;
    p = fmaf(p, a2, FL_VM_TANH_P6);
    p = fmaf(p, a2, FL_VM_TANH_P5);
    p = fmaf(p, a2, FL_VM_TANH_P4);
    p = fmaf(p, a2, FL_VM_TANH_P3);
    p = fmaf(p, a2, FL_VM_TANH_P2);
    p = fmaf(p, a2, FL_VM_TANH_P1);
    p = fmaf(p, a2, FL_VM_TANH_P0);
    return fmaf(a * a2, p, a);
}
/* t(a) from the edge on. e = e^(−2a) as fl_vm_exp_neg computes it, with −2a clamped at −86.5 (fl_vm_exp_plain's
 * range) instead of −104: there 2^k is one normal factor (y·2^k is exact as y·2^k1·2^k2 was) and no check for −104 is
 * left. For a > 43.25 e is e^−86.5 ≈ 2.7e-38 instead of a smaller number or 0, and t is 1 either way (2e/(1 + e) <
 * 2^-25). The same bits for every float (checked over all 2^32 for the AVX2 and AVX-512 loops), ~16% less time on x
 * [4096, 1024] (docs/performance.md, "tanh and the compute-bound rows (stop 99)"). */
static inline __attribute__((always_inline)) float fl_vm_tanh_far(float a) {
    const float m = -2.0f * a, mc = m >= -86.5f ? m : -86.5f;
    float k;
    int32_t ki;
    const float e = (fl_vm_em1_reduced(mc, &k, &ki) + 1.0f) * fl_vm_pow2i(ki);
    return 1.0f - (e + e) / (1.0f + e);
}
/* Both branches for every element and a select (the loops vectorise it so); the AVX-512 map computes each element's
 * own branch only (cpu_vtanh.h), the same bits. */
static inline __attribute__((always_inline)) float fl_vm_tanh(float x) {
    const float a = fabsf(x);
    const float t = a < FL_VM_TANH_EDGE ? fl_vm_tanh_near(a) : fl_vm_tanh_far(a);
    return x != x ? x : copysignf(t, x);
}

/* SiLU x·σ(x) = x/(1 + e^-x), the same way (one division), and its derivative σ(x)·(1 + x·(1 − σ(x))) with
 * 1 − σ(x) = e/(1+e) for x ≥ 0, 1/(1+e) below (no cancellation on either side). */
static inline __attribute__((always_inline)) float fl_vm_silu(float x) {
    const float e = fl_vm_exp_neg(-fabsf(x));
    const float y = (x < 0.0f ? x * e : x) / (1.0f + e);
    return x != x ? x : y;
}
static inline __attribute__((always_inline)) float fl_vm_silu_grad(float x) {
    const float e = fl_vm_exp_neg(-fabsf(x));
    const float r = 1.0f / (1.0f + e);
    const float sig = x < 0.0f ? e * r : r, one_minus = x < 0.0f ? r : e * r;
    const float d = sig * fmaf(x, one_minus, 1.0f);
    return x != x ? x : d;
}

/* The standard normal's Φ(v) and e^(−v²/2) (φ(v)·√(2π)) together, the exact GELU's two parts. With z = |v|/√2:
 * below 0.5, Φ = 0.5 + 0.5·erf(±z) and erf(z) = z·P(z²) (P of degree 4, ~1.4e-9 relative); from there,
 * erfc(z) = e^(−z²)·R(t), t = 1/(1 + z/2) (R of degree 9, ~1.7e-9 relative on [0.5, 10.5]) and Φ = 1 − erfc/2 or
 * erfc/2 by v's sign, so the left tail keeps its relative precision (0.5·(1 + erf) lost it below v ≈ −3). e^(−z²)
 * = e^(−v²/2) from v itself, v² split into its rounded value and fmaf's exact remainder (z² from a rounded z
 * would lose ~1e-6 relative at v = −4). Φ(v) is 0 below v ≈ −14, where GELU rounds to −0 anyway; Φ(±inf) = 1, 0
 * (so GELU(−inf) = −inf·0 = NaN, as torch's); a NaN v gives a number (the callers multiply it by v). */
static inline __attribute__((always_inline)) float fl_vm_normal_cdf(float v, float *gauss) {
    const float a = fabsf(v), z = a * 0.70710678118654752f;
    const float ac = a < 20.0f ? a : 20.0f;                  /* e^-200 is 0 already; inf·inf − inf would be NaN */
    const float hi = ac * ac, lo = fmaf(ac, ac, -hi);       /* v² = hi + lo exactly */
    const float g = fl_vm_exp_neg(-0.5f * hi) * fmaf(-0.5f, lo, 1.0f);   /* e^(−v²/2) */
    const float z2 = z * z;
    float p = 4.718052036650738e-3f;
    p = fmaf(p, z2, -2.675721342306259e-2f);
    p = fmaf(p, z2, 1.128282323440478e-1f);
    p = fmaf(p, z2, -3.761260859242733e-1f);
    p = fmaf(p, z2, 1.128379165568777f);
    const float erf_z = z * p;
    const float t = 1.0f / fmaf(0.5f, z, 1.0f);
    float r = -7.368668125673768e-2f;
    r = fmaf(r, t, 3.481846544011542e-1f);
    r = fmaf(r, t, -6.054186665711102e-1f);
    r = fmaf(r, t, 4.007090827197877e-1f);
    r = fmaf(r, t, -1.045433370200122e-1f);
    r = fmaf(r, t, 2.339821784922968e-1f);
    r = fmaf(r, t, 2.351928839033002e-1f);
    r = fmaf(r, t, 2.835839711995525e-1f);
    r = fmaf(r, t, 2.819854878313426e-1f);
    r = fmaf(r, t, 3.499567743910657e-6f);
    const float half_erfc = 0.5f * g * r;
    const float near = v < 0.0f ? fmaf(-0.5f, erf_z, 0.5f) : fmaf(0.5f, erf_z, 0.5f);
    const float far = v < 0.0f ? half_erfc : 1.0f - half_erfc;
    *gauss = g;
    return z < 0.5f ? near : far;
}

/* FL_VM_MAPS(f) defines, for an element function f, map_f(x, y, n, wide): y[i] = f(x[i]), and grad_f(x, dy, dx, n,
 * wide): dx[i] = dy[i]·f(x[i]), each an AVX2 loop and an AVX-512 copy (cpu_internal.h's FL_CPU_AVX512; `wide`:
 * fl_cpu_avx512(), asked once by the caller) with f inlined into both. Static: each file that uses one has its own. */
#ifdef __x86_64__
#define FL_VM_WIDE_COPY(kind, f, params, args) \
    FL_CPU_AVX512 __attribute__((unused)) static void kind##512_##f params { kind##256_##f args; }
#else
#define FL_VM_WIDE_COPY(kind, f, params, args) \
    __attribute__((unused)) static void kind##512_##f params { kind##256_##f args; }
#endif
#define FL_VM_MAPS(f)                                                                                              \
    static inline __attribute__((always_inline)) void map256_##f(const float *x, float *y, int64_t n) {            \
        _Pragma("omp simd")                                                                                        \
        for (int64_t i = 0; i < n; i++) y[i] = f(x[i]);                                                            \
    }                                                                                                              \
    static inline __attribute__((always_inline)) void grad256_##f(const float *x, const float *dy, float *dx,      \
                                                                    int64_t n) {                                   \
        _Pragma("omp simd")                                                                                        \
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * f(x[i]);                                                   \
    }                                                                                                              \
    FL_VM_WIDE_COPY(map, f, (const float *x, float *y, int64_t n), (x, y, n))                                     \
    FL_VM_WIDE_COPY(grad, f, (const float *x, const float *dy, float *dx, int64_t n), (x, dy, dx, n))             \
    static inline __attribute__((unused)) void map_##f(const float *x, float *y, int64_t n, bool wide) {           \
        if (wide) map512_##f(x, y, n); else map256_##f(x, y, n);                                                 \
    }                                                                                                              \
    static inline __attribute__((unused)) void grad_##f(const float *x, const float *dy, float *dx, int64_t n,      \
                                                        bool wide) {                                               \
        if (wide) grad512_##f(x, dy, dx, n); else grad256_##f(x, dy, dx, n);                                     \
    }
#endif
