/* format.c — the dtype traits table and bit-exact conversions between fp32 and bf16, fp16,
 * E4M3 (OCP E4M3FN) and E5M2, plus the fused quantize/amax loops (AVX-512 and portable). */
#include "format.h"
#include "format_internal.h"
#include "half_cvt.h"
#include "bf16_x86.h"
#include "fp8_x86.h"
#include "cpu/par.h"
#include "scale_rule.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#ifdef __x86_64__
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* fl_f2u / fl_u2f (bit reinterpretation): half_cvt.h. */

/* ---- FP8 encoding parameters ------------------------------------------------------------
 * One description drives the scalar, portable and AVX-512 encoders so they cannot drift apart.
 * Encoding works on |x| as fp32 bits `a`:
 *   normal range (a >= min_normal): round the 23-bit mantissa to `mant` bits (RNE, by integer
 *     add of half-ulp-minus-one plus the LSB of the kept part), then re-bias the exponent;
 *     a carry out of the mantissa bumps the exponent, which is exactly what rounding needs.
 *   subnormal range: add a "magic" power of two whose ulp equals the FP8 subnormal spacing;
 *     the FPU's own RNE rounding then produces the code in the low bits (needs DAZ/FTZ off,
 *     which is the default and what we run with).
 * A code above max_code is overflow (for E4M3 that includes 0x7F, the NaN code that 480
 * would need), then the policy picks max_code or the IEEE overflow code. */
typedef struct {
    int shift;          /* 23 - mant */
    uint32_t rebias;    /* (127 - bias) << mant, subtracted from (a >> shift) */
    uint32_t min_normal;/* fp32 bits of the smallest normal */
    uint32_t magic;     /* fp32 bits of 2^(1 - bias - mant + 23) */
    uint32_t max_code;  /* largest finite magnitude code */
    uint32_t ovf_ieee;  /* magnitude code for overflow under FL_IEEE */
    uint32_t nan_code;  /* magnitude code for a NaN input */
} fp8_params;

static const fp8_params E4M3_P = {
    20, (127u - 7u) << 3, (127u - 6u) << 23, (127u + 1u - 7u - 3u + 23u) << 23, 0x7E, 0x7F, 0x7F};
static const fp8_params E5M2_P = {
    21, (127u - 15u) << 2, (127u - 14u) << 23, (127u + 1u - 15u - 2u + 23u) << 23, 0x7B, 0x7C, 0x7E};

static inline uint32_t fp8_encode(float x, const fp8_params *P, fl_overflow pol) {
    uint32_t u = fl_f2u(x), sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | P->nan_code;
    uint32_t r;
    if (a >= P->min_normal) {
        uint32_t rnd = a + ((1u << (P->shift - 1)) - 1u) + ((a >> P->shift) & 1u);
        r = (rnd >> P->shift) - P->rebias;
        if (r > P->max_code) r = pol == FL_IEEE ? P->ovf_ieee : P->max_code;
    } else {
        r = fl_f2u(fl_u2f(a) + fl_u2f(P->magic)) - P->magic;
    }
    return sign | r;
}

static inline float fp8_decode(uint8_t b, int mant, int bias, bool has_inf) {
    uint32_t sign = (uint32_t)(b & 0x80) << 24;
    int e = (b >> mant) & ((0x7F >> mant));
    int m = b & ((1 << mant) - 1);
    int emax = 0x7F >> mant;
    if (has_inf) {
        if (e == emax) return fl_u2f(sign | (m ? 0x7FC00000u : 0x7F800000u));
    } else if (e == emax && m == (1 << mant) - 1) {
        return fl_u2f(sign | 0x7FC00000u);
    }
    if (e == 0) { /* subnormal: m * 2^(1-bias-mant), exact in fp32 */
        float v = (float)m * fl_u2f((uint32_t)(127 + 1 - bias - mant) << 23);
        return fl_u2f(sign | fl_f2u(v));
    }
    return fl_u2f(sign | ((uint32_t)(e - bias + 127) << 23) | ((uint32_t)m << (23 - mant)));
}

float fl_e4m3_to_f32(uint8_t b) { return fp8_decode(b, 3, 7, false); }
float fl_e5m2_to_f32(uint8_t b) { return fp8_decode(b, 2, 15, true); }
uint8_t fl_f32_to_e4m3(float x, fl_overflow p) { return (uint8_t)fp8_encode(x, &E4M3_P, p); }
uint8_t fl_f32_to_e5m2(float x, fl_overflow p) { return (uint8_t)fp8_encode(x, &E5M2_P, p); }

uint8_t fl_f32_to_fp8(float x, fl_dtype fmt, fl_overflow p) {
    return fmt == FL_E5M2 ? fl_f32_to_e5m2(x, p) : fl_f32_to_e4m3(x, p);
}
float fl_fp8_to_f32(uint8_t b, fl_dtype fmt) {
    return fmt == FL_E5M2 ? fl_e5m2_to_f32(b) : fl_e4m3_to_f32(b);
}
bool fl_fp8_is_nan(uint8_t b, fl_dtype fmt) {
    uint8_t m = b & 0x7F;
    return fmt == FL_E5M2 ? m > 0x7C : m == 0x7F;
}

/* ---- bf16 / fp16 scalars ------------------------------------------------------------------- */
/* The bodies are half_cvt.h's, shared with the CUDA kernels. fl_f16_to_f32's NaN handling mirrors F16C
 * (VCVTPH2PS / VCVTPS2PH) so scalar and bulk paths agree bit for bit. */
float fl_bf16_to_f32(uint16_t h) { return fl_bf16_bits_to_f32(h); }
uint16_t fl_f32_to_bf16(float x) { return fl_f32_to_bf16_bits(x); }
float fl_f16_to_f32(uint16_t h) { return fl_f16_bits_to_f32(h); }
uint16_t fl_f32_to_f16(float x) { return fl_f32_to_f16_bits(x); }

/* ---- traits table ---------------------------------------------------------------------------- */
static float to_f32_f32(uint32_t b) { return fl_u2f(b); }
static float to_f32_bf16(uint32_t b) { return fl_bf16_to_f32((uint16_t)b); }
static float to_f32_f16(uint32_t b) { return fl_f16_to_f32((uint16_t)b); }
static float to_f32_e4m3(uint32_t b) { return fl_e4m3_to_f32((uint8_t)b); }
static float to_f32_e5m2(uint32_t b) { return fl_e5m2_to_f32((uint8_t)b); }
static uint32_t from_f32_f32(float x, fl_overflow p) { (void)p; return fl_f2u(x); }
/* The 16-bit formats overflow to inf; under FL_SATURATE an infinite result becomes ±max. */
static uint32_t from_f32_bf16(float x, fl_overflow p) {
    uint16_t h = fl_f32_to_bf16(x);
    if (p == FL_SATURATE && (h & 0x7FFFu) == 0x7F80u) h = (uint16_t)((h & 0x8000u) | 0x7F7Fu);
    return h;
}
static uint32_t from_f32_f16(float x, fl_overflow p) {
    uint16_t h = fl_f32_to_f16(x);
    if (p == FL_SATURATE && (h & 0x7FFFu) == 0x7C00u) h = (uint16_t)((h & 0x8000u) | 0x7BFFu);
    return h;
}
static uint32_t from_f32_e4m3(float x, fl_overflow p) { return fl_f32_to_e4m3(x, p); }
static uint32_t from_f32_e5m2(float x, fl_overflow p) { return fl_f32_to_e5m2(x, p); }

static const fl_format_traits TRAITS[] = {
    [FL_F32] = {"fp32", "float32", 32, 4, 8, 23, 127, FLT_MAX, FLT_MIN, 0x1p-149, true, false,
                2 * ((1 << 23) - 1), to_f32_f32, from_f32_f32},
    [FL_BF16] = {"bf16", "bfloat16", 16, 2, 8, 7, 127, 0x1.FEp127, 0x1p-126, 0x1p-133, true, false,
                 2 * 127, to_f32_bf16, from_f32_bf16},
    [FL_F16] = {"fp16", "float16", 16, 2, 5, 10, 15, 65504.0, 0x1p-14, 0x1p-24, true, false,
                2 * 1023, to_f32_f16, from_f32_f16},
    [FL_E4M3] = {"e4m3", "float8_e4m3fn", 8, 1, 4, 3, 7, 448.0, 0x1p-6, 0x1p-9, false, true, 2,
                 to_f32_e4m3, from_f32_e4m3},
    [FL_E5M2] = {"e5m2", "float8_e5m2", 8, 1, 5, 2, 15, 57344.0, 0x1p-14, 0x1p-16, true, true, 6,
                 to_f32_e5m2, from_f32_e5m2},
};
static_assert(sizeof TRAITS / sizeof TRAITS[0] == FL_DTYPE_COUNT, "one traits row per fl_dtype");

const fl_format_traits *fl_format(fl_dtype t) {
    return (unsigned)t < FL_DTYPE_COUNT ? &TRAITS[t] : NULL;
}

static const struct { const char *name; fl_dtype t; } ALIASES[] = {
    {"fp32", FL_F32},  {"float32", FL_F32}, {"float", FL_F32}, {"f32", FL_F32},
    {"bf16", FL_BF16}, {"bfloat16", FL_BF16},
    {"fp16", FL_F16},  {"float16", FL_F16}, {"half", FL_F16},  {"f16", FL_F16},
    {"e4m3", FL_E4M3}, {"float8_e4m3fn", FL_E4M3}, {"fp8_e4m3", FL_E4M3}, {"e4m3fn", FL_E4M3},
    {"e5m2", FL_E5M2}, {"float8_e5m2", FL_E5M2}, {"fp8_e5m2", FL_E5M2},
};

bool fl_dtype_from_name(const char *name, fl_dtype *out) {
    if (!name) return false;
    for (size_t i = 0; i < sizeof ALIASES / sizeof ALIASES[0]; i++)
        if (strcasecmp(name, ALIASES[i].name) == 0) {
            if (out) *out = ALIASES[i].t;
            return true;
        }
    return false;
}

const char *fl_dtype_choices(void) { return "fp32, bf16, fp16, e4m3, e5m2"; }

/* ---- fused quantize ---------------------------------------------------------------------------
 * Kernels work on one block and accumulate into a fl_cast_stats; the driver splits the array
 * into blocks (interrupt polling, OpenMP). amax starts at 0 so an all-NaN source gives 0. */
#define FL_QBLOCK ((size_t)1 << 18) /* 256K elements = 1 MiB of fp32 per block */
#define FL_PAR_MIN ((size_t)1 << 15) /* below: one thread (a region costs ~1 us; 32K elements take ~10 us) */

/* Threads for n elements: one below FL_PAR_MIN, and one inside any parallel construct, active or not (the
 * callers that cast a row per iteration of their own loop; a region opened there made a team per call). */
static bool par_ok(size_t n) { return n > FL_PAR_MIN && omp_get_level() == 0 && omp_get_max_threads() > 1; }

/* Block size: FL_QBLOCK, or n shared evenly (in multiples of 64) by the threads when whole FL_QBLOCKs would
 * leave some of them idle (a weight of 256 × 1024 was one block, one thread). The block results combine by
 * max and integer sums, so the size changes no result. */
static size_t par_block(size_t n, bool par) {
    const size_t nt = (size_t)omp_get_max_threads();
    if (!par || n >= FL_QBLOCK * nt) return FL_QBLOCK;
    return ((n + nt - 1) / nt + 63) & ~(size_t)63;
}

/* Written branch-free with an integer amax (for non-negative floats the bit patterns order like
 * the values; NaN patterns are masked to 0) so the compiler can vectorise it for AVX2. */
__attribute__((optimize("tree-vectorize"), always_inline))
static inline void quant_block_portable_(const float *src, uint8_t *dst, size_t n, const fp8_params *P,
                                         float scale, const float *vsc, fl_overflow pol, fl_cast_stats *st) {
    uint32_t amax = fl_f2u(st->amax);
    uint32_t unf = 0, sat = 0, nan = 0; /* per block: n <= FL_QBLOCK */
    const uint32_t ovf = pol == FL_IEEE ? P->ovf_ieee : P->max_code, shift = (uint32_t)P->shift;
    const uint32_t half = (1u << (shift - 1)) - 1u, rebias = P->rebias, minn = P->min_normal;
    const uint32_t magic = P->magic, maxc = P->max_code, nanc = P->nan_code;
    const float magic_f = fl_u2f(magic);
    for (size_t i = 0; i < n; i++) {
        float x = src[i];
        uint32_t xa = fl_f2u(x) & 0x7FFFFFFFu;
        uint32_t xnan = xa > 0x7F800000u;
        uint32_t xm = xa & (xnan - 1u);
        amax = xm > amax ? xm : amax;
        uint32_t u = fl_f2u(x * (vsc ? vsc[i] : scale)), sign = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;
        uint32_t rn = ((a + half + ((a >> shift) & 1u)) >> shift) - rebias;
        uint32_t rs = fl_f2u(fl_u2f(a) + magic_f) - magic;
        uint32_t is_nan = a > 0x7F800000u, normal = a >= minn;
        uint32_t over = normal & (is_nan ^ 1u) & (rn > maxc);
        /* selects as masks: keeps the loop free of control flow for the vectoriser */
        uint32_t r = (rn & (0u - normal)) | (rs & (normal - 1u));
        r ^= (r ^ ovf) & (0u - over);
        r ^= (r ^ nanc) & (0u - is_nan);
        dst[i] = (uint8_t)(sign | r);
        nan += xnan;
        sat += over;
        unf += (r == 0) & (xa != 0);
    }
    st->amax = fl_u2f(amax);
    st->underflow += unf;
    st->saturated += sat;
    st->nan += nan;
}

/* vsc: one scale per element (per-column scaling of a row), or NULL for the one scale `scale`; vfin: the caller
 * found every one of vsc's scales finite and positive (the vector kernels' fast loop takes them then). */
static void quant_block_portable(const float *src, uint8_t *dst, size_t n, const fp8_params *P,
                                 float scale, const float *vsc, bool vfin, fl_overflow pol, fl_cast_stats *st) {
    (void)vfin;
    if (vsc) quant_block_portable_(src, dst, n, P, 0.0f, vsc, pol, st);
    else quant_block_portable_(src, dst, n, P, scale, NULL, pol, st);
}

/* The first value past which |x·scale| rounds above max_code, as fp32 bits: in the bucket q = max_code + rebias
 * of the top `shift` bits, rn rounds up where the dropped bits exceed half, or equal it with q odd. */
static uint32_t over_threshold(const fp8_params *P) {
    const uint32_t q = P->max_code + P->rebias;
    return (q << P->shift) + (1u << (P->shift - 1)) - (q & 1u);
}

#ifdef __x86_64__
/* One 16-lane step: returns the 16 codes (one per 32-bit lane), updates amax, and adds the lanes that underflow,
 * saturate or are NaN to the scalar counters (popcounts of the compare masks: the integer units are otherwise
 * idle here, and the vector units are what bounds the cast). `fin_scale`: the scale is finite and positive, so
 * x·scale is NaN exactly where x is, and the NaN test of the scaled value serves for the count. */
typedef struct {
    __m512i absm, inf, half, one, minn, magic_i, maxc, ovf, nanc, b80;
    __m512 magic, vs;
} q512_consts;

typedef struct { uint32_t unf, sat, nan; } q512_counts;
/* The fast steps' counters (q512_fast, q256_fast): lanes past the overflow threshold, NaN included. */
typedef struct { uint32_t over, nan; } qfast_counts;

/* a = |x·scale| (bits) to its magnitude code where it is finite: rn rounds a normal to nearest even, rs a
 * subnormal (by the magic add); *normal: the lanes that took rn. c->half already has rebias << shift subtracted;
 * rn is only used where a >= min_normal, so the sum cannot wrap there. */
__attribute__((target("avx512f"), always_inline))
static inline __m512i q512_round(const q512_consts *c, __m512i a, __mmask16 *normal, const unsigned shift) {
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, shift), c->one);
    const __m512i rn = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, c->half), lsb), shift);
    const __m512i rs = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), c->magic)),
                                        c->magic_i);
    *normal = _mm512_cmpge_epu32_mask(a, c->minn);
    return _mm512_mask_blend_epi32(*normal, rs, rn);
}

/* Four vectors of codes (0..255 in 32-bit lanes) to 64 bytes at dst: two unsigned-saturating packs keep them,
 * interleaved by 128-bit lane (lane l of the result holds lane l of r0, r1, r2, r3 in turn); one dword permute
 * puts them in order. */
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline void store_codes64(uint8_t *dst, __m512i r0, __m512i r1, __m512i r2, __m512i r3) {
    const __m512i w = _mm512_packus_epi16(_mm512_packus_epi32(r0, r1), _mm512_packus_epi32(r2, r3));
    const __m512i ord = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    _mm512_storeu_si512(dst, _mm512_permutexvar_epi32(ord, w));
}

__attribute__((target("avx512f"), always_inline))
static inline __m512i q512_step(const q512_consts *c, __m512 x, __m512 vs, __mmask16 k, __m512 *vmax, q512_counts *n,
                                const bool fin_scale, const unsigned shift) {
    __m512i xa = _mm512_and_si512(_mm512_castps_si512(x), c->absm);
    *vmax = _mm512_max_ps(_mm512_castsi512_ps(xa), *vmax); /* NaN in 1st operand → keeps vmax */
    __m512i u = _mm512_castps_si512(_mm512_mul_ps(x, vs));
    __m512i a = _mm512_and_si512(u, c->absm);
    __mmask16 normal;
    __m512i r = q512_round(c, a, &normal, shift);
    __mmask16 is_nan = _mm512_cmpgt_epu32_mask(a, c->inf);
    __mmask16 over = _mm512_mask_cmpgt_epu32_mask(normal & ~is_nan, r, c->maxc);   /* r is rn where normal */
    r = _mm512_mask_blend_epi32(over, r, c->ovf);
    r = _mm512_mask_blend_epi32(is_nan, r, c->nanc);
    __mmask16 xnan = fin_scale ? is_nan & k : _mm512_mask_cmpgt_epu32_mask(k, xa, c->inf);
    __mmask16 zr = _mm512_mask_testn_epi32_mask(_mm512_mask_test_epi32_mask(k, xa, xa), r, r);
    n->nan += (uint32_t)__builtin_popcount(xnan);
    n->sat += (uint32_t)__builtin_popcount(over & k);
    n->unf += (uint32_t)__builtin_popcount(zr);
    return _mm512_ternarylogic_epi32(r, _mm512_srli_epi32(u, 24), c->b80, 0xF8); /* r | (u>>24 & 0x80) */
}

/* vsc: one scale per element, or NULL for c->vs. */
__attribute__((target("avx512f,avx512bw,popcnt"), always_inline))
static inline __m512 q512_scales(const q512_consts *c, const float *vsc, size_t i, __mmask16 k) {
    return vsc ? _mm512_maskz_loadu_ps(k, vsc + i) : c->vs;
}

__attribute__((target("avx512f,avx512bw,popcnt"), always_inline))
static inline void quant_loop512(const q512_consts *c, const float *src, const float *vsc, uint8_t *dst, size_t n,
                                 __m512 *vmax, q512_counts *cnt, const bool fin_scale,
                                 const unsigned shift) {
    size_t i = 0;
    for (; i + 64 <= n; i += 64) { /* 4 vectors → one full 64-byte store */
        __m512i r0 = q512_step(c, _mm512_loadu_ps(src + i), q512_scales(c, vsc, i, 0xFFFF), 0xFFFF, vmax, cnt, fin_scale, shift);
        __m512i r1 = q512_step(c, _mm512_loadu_ps(src + i + 16), q512_scales(c, vsc, i + 16, 0xFFFF), 0xFFFF, vmax, cnt,
                               fin_scale, shift);
        __m512i r2 = q512_step(c, _mm512_loadu_ps(src + i + 32), q512_scales(c, vsc, i + 32, 0xFFFF), 0xFFFF, vmax, cnt,
                               fin_scale, shift);
        __m512i r3 = q512_step(c, _mm512_loadu_ps(src + i + 48), q512_scales(c, vsc, i + 48, 0xFFFF), 0xFFFF, vmax, cnt,
                               fin_scale, shift);
        store_codes64(dst + i, r0, r1, r2, r3);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        __m512i r = q512_step(c, _mm512_maskz_loadu_ps(k, src + i), q512_scales(c, vsc, i, k), k, vmax, cnt, fin_scale, shift);
        _mm512_mask_cvtepi32_storeu_epi8(dst + i, k, r);
    }
}

/* quant_loop512 for per-element scales (unchecked: NaN comes from the source), a finite positive scale, or any other
 * one; shift is the format's, a constant where the caller passes one. */
__attribute__((target("avx512f,avx512bw,popcnt"), always_inline))
static inline void quant_loops512(const q512_consts *c, const float *src, const float *vsc, uint8_t *dst, size_t n,
                                  __m512 *vmax, q512_counts *cnt, const bool fin, const unsigned shift) {
    if (vsc) quant_loop512(c, src, vsc, dst, n, vmax, cnt, false, shift);
    else if (fin) quant_loop512(c, src, NULL, dst, n, vmax, cnt, true, shift);
    else quant_loop512(c, src, NULL, dst, n, vmax, cnt, false, shift);
}

/* q512_step for the common case, finite positive scales (one for the block, or vs per element), in fewer vector
 * operations (~20 against ~28 per 16 elements; the cast is bound by the two vector ports): overflow is one compare
 * of |x·scale| against over_threshold, which NaN and ∞ pass too, and only a vector with a lane past it (a branch
 * that is almost never taken) blends in the overflow and NaN codes and counts them (passes and NaNs: the
 * saturation count is their difference, infinite sources included, as in quant_block_avx2); the underflows are
 * counted per lane in a vector. Bytes and counts are q512_step's (test_format compares both with the scalar
 * reference). */
__attribute__((target("avx512f,avx512bw,popcnt"), always_inline))
static inline __m512i q512_fast(const q512_consts *c, __m512i thr1, __m512 x, __m512 vs, __m512 *vmax, __m512i *unf,
                                qfast_counts *n, const unsigned shift) {
    const __m512i xa = _mm512_and_si512(_mm512_castps_si512(x), c->absm);
    *vmax = _mm512_max_ps(_mm512_castsi512_ps(xa), *vmax); /* NaN in 1st operand → keeps vmax */
    const __m512i u = _mm512_castps_si512(_mm512_mul_ps(x, vs));
    const __m512i a = _mm512_and_si512(u, c->absm);
    __mmask16 normal;
    __m512i r = q512_round(c, a, &normal, shift);
    const __mmask16 over = _mm512_cmpgt_epu32_mask(a, thr1);   /* NaN and ∞ included */
    if (__builtin_expect(over != 0, 0)) {
        const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(a, c->inf);
        r = _mm512_mask_blend_epi32(over, r, c->ovf);
        r = _mm512_mask_blend_epi32(is_nan, r, c->nanc);
        n->over += (uint32_t)__builtin_popcount(over);
        n->nan += (uint32_t)__builtin_popcount(is_nan);
    }
    const __mmask16 zr = _mm512_mask_testn_epi32_mask(_mm512_test_epi32_mask(xa, xa), r, r);
    *unf = _mm512_mask_add_epi32(*unf, zr, *unf, c->one);
    return _mm512_ternarylogic_epi32(r, _mm512_srli_epi32(u, 24), c->b80, 0xF8); /* r | (u>>24 & 0x80) */
}

/* n (a multiple of 64) elements by q512_fast, four vectors to a 64-byte store; with vsc, element i by vsc[i] (every
 * one finite and positive: the caller's vfin says so), else by c->vs. */
__attribute__((target("avx512f,avx512bw,popcnt"), always_inline))
static inline void quant_fast512(const q512_consts *c, uint32_t thr, const float *src, const float *vsc, uint8_t *dst,
                                 size_t n, __m512 *vmax, q512_counts *cnt, const unsigned shift) {
    const __m512i thr1 = _mm512_set1_epi32((int)thr);
    __m512i unf = _mm512_setzero_si512();
    qfast_counts k = {0, 0};
    for (size_t i = 0; i < n; i += 64) {
        const __m512i r0 = q512_fast(c, thr1, _mm512_loadu_ps(src + i), q512_scales(c, vsc, i, 0xFFFF), vmax, &unf, &k,
                                     shift);
        const __m512i r1 = q512_fast(c, thr1, _mm512_loadu_ps(src + i + 16), q512_scales(c, vsc, i + 16, 0xFFFF), vmax,
                                     &unf, &k, shift);
        const __m512i r2 = q512_fast(c, thr1, _mm512_loadu_ps(src + i + 32), q512_scales(c, vsc, i + 32, 0xFFFF), vmax,
                                     &unf, &k, shift);
        const __m512i r3 = q512_fast(c, thr1, _mm512_loadu_ps(src + i + 48), q512_scales(c, vsc, i + 48, 0xFFFF), vmax,
                                     &unf, &k, shift);
        store_codes64(dst + i, r0, r1, r2, r3);
    }
    cnt->unf += (uint32_t)_mm512_reduce_add_epi32(unf);
    cnt->nan += k.nan;
    cnt->sat += k.over - k.nan;   /* passes that are not NaN: overflows, infinite sources included */
}

/* A block: its first nf elements (a multiple of 64; 0 unless every scale is finite and positive) by the fast loop,
 * the rest by quant_loops512. */
__attribute__((target("avx512f,avx512bw,popcnt"), always_inline))
static inline void quant_all512(const q512_consts *c, uint32_t thr, const float *src, const float *vsc, uint8_t *dst,
                                size_t n, size_t nf, __m512 *vmax, q512_counts *cnt, const bool fin,
                                const unsigned shift) {
    quant_fast512(c, thr, src, vsc, dst, nf, vmax, cnt, shift);
    quant_loops512(c, src + nf, vsc ? vsc + nf : NULL, dst + nf, n - nf, vmax, cnt, fin, shift);
}

__attribute__((target("avx512f,avx512bw,popcnt")))
static void quant_block_avx512(const float *src, uint8_t *dst, size_t n, const fp8_params *P,
                               float scale, const float *vsc, bool vfin, fl_overflow pol, fl_cast_stats *st) {
    q512_consts c;
    c.absm = _mm512_set1_epi32(0x7FFFFFFF); c.inf = _mm512_set1_epi32(0x7F800000);
    c.half = _mm512_set1_epi32((int)(((1u << (P->shift - 1)) - 1u) - (P->rebias << P->shift)));
    c.one = _mm512_set1_epi32(1);
    c.minn = _mm512_set1_epi32((int)P->min_normal);
    c.magic_i = _mm512_set1_epi32((int)P->magic); c.maxc = _mm512_set1_epi32((int)P->max_code);
    c.ovf = _mm512_set1_epi32((int)(pol == FL_IEEE ? P->ovf_ieee : P->max_code));
    c.nanc = _mm512_set1_epi32((int)P->nan_code);
    c.b80 = _mm512_set1_epi32(0x80);
    c.magic = _mm512_castsi512_ps(c.magic_i); c.vs = _mm512_set1_ps(scale);
    __m512 vmax = _mm512_set1_ps(st->amax);
    q512_counts cnt = {0, 0, 0};   /* a block is at most FL_QBLOCK elements, far below 2^32 */
    /* the two formats' shifts as immediates (a shift by a register count is two uops on Intel's cores) */
    const bool fin = scale > 0.0f && scale < INFINITY;
    /* finite positive scales (one, or per element as vfin says): whole 64s in the fast loop, the rest as before */
    const size_t nf = (vsc ? vfin : fin) ? n & ~(size_t)63 : 0;
    const uint32_t thr = over_threshold(P);
    if (P->shift == 20) quant_all512(&c, thr, src, vsc, dst, n, nf, &vmax, &cnt, fin, 20);          /* E4M3 */
    else if (P->shift == 21) quant_all512(&c, thr, src, vsc, dst, n, nf, &vmax, &cnt, fin, 21);     /* E5M2 */
    else quant_all512(&c, thr, src, vsc, dst, n, nf, &vmax, &cnt, fin, (unsigned)P->shift);
    const float amax = _mm512_reduce_max_ps(vmax);
    st->amax = amax;
    st->underflow += cnt.unf;
    st->saturated += cnt.sat;
    st->nan += cnt.nan;
}

/* The same cast on 8 lanes with AVX2, for CPUs without AVX-512 (Zen 2/3, Intel client cores): q512_step with
 * compares and blends in place of the mask registers. Every compare is signed, which is right here: a and xa
 * have the sign bit cleared, and rn is only used where a is normal, where it is a small code. */
typedef struct {
    __m256i absm, inf, half, one, minn1, magic_i, maxc, ovf, nanc, b80, zero;
    __m256 magic, vs;
    __m128i shift;
} q256_consts;

/* q512_round on 8 lanes: *normal holds all-ones lanes where a is normal (rn taken). */
__attribute__((target("avx2"), always_inline))
static inline __m256i q256_round(const q256_consts *c, __m256i a, __m256i *normal) {
    const __m256i lsb = _mm256_and_si256(_mm256_srl_epi32(a, c->shift), c->one);
    const __m256i rn = _mm256_srl_epi32(_mm256_add_epi32(_mm256_add_epi32(a, c->half), lsb), c->shift);
    const __m256i rs = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), c->magic)), c->magic_i);
    *normal = _mm256_cmpgt_epi32(a, c->minn1);
    return _mm256_blendv_epi8(rs, rn, *normal);
}

__attribute__((target("avx2,popcnt"), always_inline))
static inline __m256i q256_step(const q256_consts *c, __m256 x, __m256 vs, __m256i k, __m256 *vmax, q512_counts *n,
                                const bool fin_scale) {
    const __m256i xa = _mm256_and_si256(_mm256_castps_si256(x), c->absm);
    *vmax = _mm256_max_ps(_mm256_castsi256_ps(xa), *vmax); /* NaN in 1st operand → keeps vmax */
    const __m256i u = _mm256_castps_si256(_mm256_mul_ps(x, vs));
    const __m256i a = _mm256_and_si256(u, c->absm);
    __m256i normal;
    __m256i r = q256_round(c, a, &normal);
    const __m256i is_nan = _mm256_cmpgt_epi32(a, c->inf);
    /* r is rn where normal */
    const __m256i over = _mm256_andnot_si256(is_nan, _mm256_and_si256(normal, _mm256_cmpgt_epi32(r, c->maxc)));
    r = _mm256_blendv_epi8(r, c->ovf, over);
    r = _mm256_blendv_epi8(r, c->nanc, is_nan);
    const __m256i xnan = _mm256_and_si256(k, fin_scale ? is_nan : _mm256_cmpgt_epi32(xa, c->inf));
    const __m256i zr = _mm256_andnot_si256(_mm256_cmpeq_epi32(xa, c->zero),
                                           _mm256_and_si256(k, _mm256_cmpeq_epi32(r, c->zero)));
    n->nan += (uint32_t)__builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(xnan)));
    n->sat += (uint32_t)__builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
        _mm256_and_si256(over, k))));
    n->unf += (uint32_t)__builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(zr)));
    return _mm256_or_si256(r, _mm256_and_si256(_mm256_srli_epi32(u, 24), c->b80));
}

/* Four vectors of codes (0..255 in 32-bit lanes) to 32 bytes at dst: two unsigned-saturating packs keep them,
 * 128-bit lane l holding dwords l of r0..r3 in turn; one dword permute puts them in order. */
__attribute__((target("avx2"), always_inline))
static inline void store_codes32(uint8_t *dst, __m256i r0, __m256i r1, __m256i r2, __m256i r3) {
    const __m256i w = _mm256_packus_epi16(_mm256_packus_epi32(r0, r1), _mm256_packus_epi32(r2, r3));
    _mm256_storeu_si256((__m256i *)dst, _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* The largest of v's 8 lanes (none NaN). */
__attribute__((target("avx2")))
static float lanes_max8(__m256 v) {
    float m[8];
    _mm256_storeu_ps(m, v);
    float r = m[0];
    for (int j = 1; j < 8; j++) r = m[j] > r ? m[j] : r;
    return r;
}

/* q256_step for the common case, finite positive scales (one for the block, or vs per element), in fewer vector
 * operations (~17 against ~34 per 8 elements): overflow is one compare of |x·scale| against the last value that rounds
 * to a code ≤ max_code (`thr1`; the rounding is monotonic), which NaN passes too, and only a vector with a lane past
 * it (a branch that is almost never taken) blends in the overflow and NaN codes and counts them, so the saturation
 * count is taken as (passes − NaNs), an infinite x among the passes as the counter defines it (format.h); the
 * underflows are counted per lane in a vector; the sign is blended in from x·scale's sign bit. Bytes and counts are
 * q256_step's (test_format compares both with the scalar reference). */
__attribute__((target("avx2,popcnt"), always_inline))
static inline __m256i q256_fast(const q256_consts *c, __m256i thr1, __m256 x, __m256 vs, __m256 *vmax, __m256i *unf,
                                qfast_counts *n) {
    const __m256i xa = _mm256_and_si256(_mm256_castps_si256(x), c->absm);
    *vmax = _mm256_max_ps(_mm256_castsi256_ps(xa), *vmax); /* NaN in 1st operand → keeps vmax */
    const __m256 y = _mm256_mul_ps(x, vs);
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(y), c->absm);
    __m256i normal;
    __m256i r = q256_round(c, a, &normal);
    const __m256i over = _mm256_cmpgt_epi32(a, thr1);   /* NaN and ∞ included */
    const unsigned om = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(over));
    if (__builtin_expect(om != 0, 0)) {
        const __m256i is_nan = _mm256_cmpgt_epi32(a, c->inf);
        r = _mm256_blendv_epi8(r, c->ovf, over);
        r = _mm256_blendv_epi8(r, c->nanc, is_nan);
        n->over += (uint32_t)__builtin_popcount(om);
        n->nan += (uint32_t)__builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(is_nan)));
    }
    /* lanes with x ≠ 0 and code 0: −1 each, subtracted */
    *unf = _mm256_sub_epi32(*unf, _mm256_andnot_si256(_mm256_cmpeq_epi32(xa, c->zero), _mm256_cmpeq_epi32(r, c->zero)));
    const __m256 rf = _mm256_castsi256_ps(r);
    return _mm256_castps_si256(_mm256_blendv_ps(rf, _mm256_or_ps(rf, _mm256_castsi256_ps(c->b80)), y));
}

/* n (a multiple of 32) elements by q256_fast, four vectors to a 32-byte store; with vsc, element i by vsc[i] (every
 * one finite and positive: the caller's vfin says so), else by c->vs. */
__attribute__((target("avx2,popcnt"), always_inline))
static inline void quant_fast256(const q256_consts *c, uint32_t thr, const float *src, const float *vsc, uint8_t *dst,
                                 size_t n, __m256 *vmax, q512_counts *cnt) {
    const __m256i thr1 = _mm256_set1_epi32((int)thr);
    __m256i unf = _mm256_setzero_si256();
    qfast_counts k = {0, 0};
#define Q256_VS(o) (vsc ? _mm256_loadu_ps(vsc + i + (o)) : c->vs)
    for (size_t i = 0; i + 32 <= n; i += 32) {
        const __m256i r0 = q256_fast(c, thr1, _mm256_loadu_ps(src + i), Q256_VS(0), vmax, &unf, &k);
        const __m256i r1 = q256_fast(c, thr1, _mm256_loadu_ps(src + i + 8), Q256_VS(8), vmax, &unf, &k);
        const __m256i r2 = q256_fast(c, thr1, _mm256_loadu_ps(src + i + 16), Q256_VS(16), vmax, &unf, &k);
        const __m256i r3 = q256_fast(c, thr1, _mm256_loadu_ps(src + i + 24), Q256_VS(24), vmax, &unf, &k);
        store_codes32(dst + i, r0, r1, r2, r3);
    }
#undef Q256_VS
    uint32_t u[8];
    _mm256_storeu_si256((__m256i *)u, unf);
    for (int j = 0; j < 8; j++) cnt->unf += u[j];
    cnt->nan += k.nan;
    cnt->sat += k.over - k.nan;   /* passes that are not NaN: overflows, infinite sources included */
}

__attribute__((target("avx2,popcnt"), always_inline))
static inline void quant_loop256(const q256_consts *c, const float *src, const float *vsc, uint8_t *dst, size_t n,
                                 __m256 *vmax, q512_counts *cnt, const bool fin_scale) {
    const __m256i all = _mm256_set1_epi32(-1);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* 4 vectors → one 32-byte store */
        __m256i r[4];
        for (int v = 0; v < 4; v++)
            r[v] = q256_step(c, _mm256_loadu_ps(src + i + 8 * v), vsc ? _mm256_loadu_ps(vsc + i + 8 * v) : c->vs, all,
                             vmax, cnt, fin_scale);
        store_codes32(dst + i, r[0], r[1], r[2], r[3]);
    }
    for (; i < n; i += 8) {
        const int64_t left = (int64_t)(n - i);
        const __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32(left >= 8 ? 8 : (int)left),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256 vs = vsc ? _mm256_maskload_ps(vsc + i, k) : c->vs;
        uint32_t codes[8];
        _mm256_storeu_si256((__m256i *)codes, q256_step(c, _mm256_maskload_ps(src + i, k), vs, k, vmax, cnt, fin_scale));
        for (int64_t j = 0; j < left && j < 8; j++) dst[i + (size_t)j] = (uint8_t)codes[j];
    }
}

__attribute__((target("avx2,popcnt")))
static void quant_block_avx2(const float *src, uint8_t *dst, size_t n, const fp8_params *P,
                             float scale, const float *vsc, bool vfin, fl_overflow pol, fl_cast_stats *st) {
    q256_consts c;
    c.absm = _mm256_set1_epi32(0x7FFFFFFF); c.inf = _mm256_set1_epi32(0x7F800000);
    c.half = _mm256_set1_epi32((int)(((1u << (P->shift - 1)) - 1u) - (P->rebias << P->shift)));
    c.one = _mm256_set1_epi32(1);
    c.minn1 = _mm256_set1_epi32((int)P->min_normal - 1);
    c.magic_i = _mm256_set1_epi32((int)P->magic); c.maxc = _mm256_set1_epi32((int)P->max_code);
    c.ovf = _mm256_set1_epi32((int)(pol == FL_IEEE ? P->ovf_ieee : P->max_code));
    c.nanc = _mm256_set1_epi32((int)P->nan_code);
    c.b80 = _mm256_set1_epi32(0x80);
    c.zero = _mm256_setzero_si256();
    c.magic = _mm256_castsi256_ps(c.magic_i); c.vs = _mm256_set1_ps(scale);
    c.shift = _mm_cvtsi32_si128(P->shift);
    __m256 vmax = _mm256_set1_ps(st->amax);
    q512_counts cnt = {0, 0, 0};   /* a block is at most FL_QBLOCK elements, far below 2^32 */
    size_t nf = 0;                 /* elements the fast loop cast */
    if (vsc && vfin) {
        /* per-element scales, each finite and positive (per-column scaling's: the common case), as one scale */
        nf = n & ~(size_t)31;
        quant_fast256(&c, over_threshold(P), src, vsc, dst, nf, &vmax, &cnt);
        quant_loop256(&c, src + nf, vsc + nf, dst + nf, n - nf, &vmax, &cnt, false);
    } else if (vsc) {
        quant_loop256(&c, src, vsc, dst, n, &vmax, &cnt, false);   /* scales unchecked: NaN from the source */
    } else if (scale > 0.0f && scale < INFINITY) {   /* whole 32s in the fast loop, the rest as before */
        nf = n & ~(size_t)31;
        quant_fast256(&c, over_threshold(P), src, NULL, dst, nf, &vmax, &cnt);
        quant_loop256(&c, src + nf, NULL, dst + nf, n - nf, &vmax, &cnt, true);
    } else quant_loop256(&c, src, NULL, dst, n, &vmax, &cnt, false);
    const float amax = lanes_max8(vmax);
    st->amax = amax;
    st->underflow += cnt.unf;
    st->saturated += cnt.sat;
    st->nan += cnt.nan;
}
#endif

typedef void (*quant_block_fn)(const float *, uint8_t *, size_t, const fp8_params *, float, const float *, bool,
                               fl_overflow, fl_cast_stats *);

/* Whether the n scales are all finite and positive (NaN is not): vfin of the block kernels. */
static bool scales_finite_pos(const float *s, size_t n) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= (s[i] > 0.0f) & (s[i] < INFINITY);
    return ok != 0;
}

/* vfin for kernel fn and scales vsc[0, n): checked only for the kernels that read it (AVX2 and AVX-512; the portable
 * one takes per-element scales through its general loop), so it skips the pass. */
static bool vfin_for(quant_block_fn fn, const float *vsc, size_t n) {
#ifdef __x86_64__
    return vsc && (fn == quant_block_avx2 || fn == quant_block_avx512) && scales_finite_pos(vsc, n);
#else
    (void)fn, (void)vsc, (void)n;
    return false;
#endif
}

int fl_format_has_avx512(void) {
#ifdef __x86_64__
    return fl_cpu_isa_allows(FL_ISA_AVX512) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#else
    return 0;
#endif
}

/* AUTO: AVX-512 where the CPU has it, else AVX2; AVX512 or AVX2 asked for: that kernel, or the portable one
 * where the CPU has not got it. */
static quant_block_fn pick_quant(int path) {
#ifdef __x86_64__
    if ((path == FL_PATH_AUTO || path == FL_PATH_AVX512) && fl_format_has_avx512()) return quant_block_avx512;
    if ((path == FL_PATH_AUTO || path == FL_PATH_AVX2) && __builtin_cpu_supports("avx2")) return quant_block_avx2;
#endif
    return quant_block_portable;
}

/* *P: the cast parameters of fmt, which must be an FP8 format. */
static fl_status fp8_params_of(fl_dtype fmt, const fp8_params **P) {
    if (fmt != FL_E4M3 && fmt != FL_E5M2)
        return FL_ERR(FL_EINVAL, "quantize: expected an FP8 dtype (e4m3 or e5m2), got %s",
                      fl_format(fmt) ? fl_format(fmt)->name : "an unknown dtype");
    *P = fmt == FL_E5M2 ? &E5M2_P : &E4M3_P;
    return FL_OK;
}

/* The cast of n elements by `scale`, or by scales[i] each (vsc non-NULL). */
static fl_status quantize_n(const float *src, uint8_t *dst, size_t n, fl_dtype fmt, float scale, const float *vsc,
                            fl_overflow p, fl_cast_stats *stats, int path) {
    const fp8_params *P = NULL;
    FL_TRY(fp8_params_of(fmt, &P));
    if (n && (!src || !dst)) return FL_ERR(FL_EINVAL, "quantize: NULL buffer for %zu elements", n);
    quant_block_fn fn = pick_quant(path);
    const bool vfin = vfin_for(fn, vsc, n);
    if (n <= FL_QBLOCK && !par_ok(n)) { /* one block, one thread: no OpenMP region at all */
        FL_TRY(fl_check_interrupt());
        fl_cast_stats st = {0};
        fn(src, dst, n, P, scale, vsc, vfin, p, &st);
        if (stats) *stats = st;
        return FL_OK;
    }
    const bool par = par_ok(n);
    const size_t blk = par_block(n, par), nb = (n + blk - 1) / blk;
    float amax = 0.0f;
    int64_t unf = 0, sat = 0, nan = 0;
    int stop = 0;
    /* Integer counters and max are order-independent, so the result is deterministic. */
    FL_PAR_FOR(par, schedule(static) reduction(max : amax) reduction(+ : unf, sat, nan),
    for (size_t b = 0; b < nb; b++) {
        int s;
        FL_PRAGMA(omp atomic read)
        s = stop;
        if (s) continue;
        if (fl_interrupt_pending()) {
            FL_PRAGMA(omp atomic write)
            stop = 1;
            continue;
        }
        size_t lo = b * blk, len = n - lo < blk ? n - lo : blk;
        fl_cast_stats st = {0};
        fn(src + lo, dst + lo, len, P, scale, vsc ? vsc + lo : NULL, vfin, p, &st);
        amax = st.amax > amax ? st.amax : amax;
        unf += st.underflow;
        sat += st.saturated;
        nan += st.nan;
    });
    if (stop) {
        fl_status s = fl_check_interrupt(); /* clears the flag and records "interrupted" */
        return s != FL_OK ? s : FL_ERR(FL_EINTR, "interrupted");
    }
    if (stats) {
        stats->amax = amax;
        stats->underflow = unf;
        stats->saturated = sat;
        stats->nan = nan;
    }
    return FL_OK;
}

fl_status fl_quantize_f32_path(const float *src, uint8_t *dst, size_t n, fl_dtype fmt, float scale,
                               fl_overflow p, fl_cast_stats *stats, int path) {
    return quantize_n(src, dst, n, fmt, scale, NULL, p, stats, path);
}

fl_status fl_quantize_f32_scales_path(const float *src, uint8_t *dst, size_t n, fl_dtype fmt, const float *scales,
                                      fl_overflow p, fl_cast_stats *stats, int path) {
    if (n && !scales) return FL_ERR(FL_EINVAL, "quantize: NULL scales for %zu elements", n);
    return quantize_n(src, dst, n, fmt, 0.0f, scales, p, stats, path);
}

/* Row by row on this thread, the scales checked once for all rows (per row, the check cost ~15% of the cast). */
fl_status fl_quantize_f32_cols_path(const float *src, uint8_t *dst, size_t rows, size_t cols, fl_dtype fmt,
                                    const float *scales, fl_overflow p, fl_cast_stats *stats, int path) {
    const fp8_params *P = NULL;
    FL_TRY(fp8_params_of(fmt, &P));
    if (rows && cols && (!src || !dst || !scales))
        return FL_ERR(FL_EINVAL, "quantize: NULL buffer or scales for %zu × %zu elements", rows, cols);
    FL_TRY(fl_check_interrupt());
    const quant_block_fn fn = pick_quant(path);
    const bool vfin = rows && vfin_for(fn, scales, cols);   /* no scales are read without rows */
    fl_cast_stats all = {0};
    for (size_t r = 0; r < rows; r++) {
        fl_cast_stats st = {0};
        fn(src + r * cols, dst + r * cols, cols, P, 0.0f, scales, vfin, p, &st);
        fl_cast_stats_merge(&all, &st);
    }
    if (stats) *stats = all;
    return FL_OK;
}

fl_status fl_quantize_f32_cols(const float *src, uint8_t *dst, size_t rows, size_t cols, fl_dtype fmt,
                               const float *scales, fl_overflow p, fl_cast_stats *stats) {
    return fl_quantize_f32_cols_path(src, dst, rows, cols, fmt, scales, p, stats, FL_PATH_AUTO);
}

fl_status fl_quantize_f32(const float *src, uint8_t *dst, size_t n, fl_dtype fmt, float scale,
                          fl_overflow p, fl_cast_stats *stats) {
    return fl_quantize_f32_path(src, dst, n, fmt, scale, p, stats, FL_PATH_AUTO);
}

fl_status fl_quantize_f32_scales(const float *src, uint8_t *dst, size_t n, fl_dtype fmt, const float *scales,
                                 fl_overflow p, fl_cast_stats *stats) {
    return fl_quantize_f32_scales_path(src, dst, n, fmt, scales, p, stats, FL_PATH_AUTO);
}

/* ---- amax ------------------------------------------------------------------------------------ */
static float amax_portable(const float *src, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(src[i]);
        m = a > m ? a : m;
    }
    return m;
}

#ifdef __x86_64__
__attribute__((target("avx512f")))
static float amax_avx512(const float *src, size_t n) {
    const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF);
    __m512 m0 = _mm512_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        m0 = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(src + i), absm)), m0);
        m1 = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(src + i + 16), absm)), m1);
        m2 = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(src + i + 32), absm)), m2);
        m3 = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(src + i + 48), absm)), m3);
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        __m512i x = _mm512_and_si512(_mm512_castps_si512(_mm512_maskz_loadu_ps(k, src + i)), absm);
        m0 = _mm512_max_ps(_mm512_castsi512_ps(x), m0);
    }
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

/* The same on 8 lanes for CPUs without AVX-512, where the portable loop stays scalar (GCC does not vectorise its
 * NaN-ignoring max: a chain of one vmaxss per element). */
__attribute__((target("avx2")))
static float amax_avx2(const float *src, size_t n) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {   /* NaN in the 1st operand → the 2nd: NaN ignored, as amax_portable */
        m0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i), absm), m0);
        m1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i + 8), absm), m1);
        m2 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i + 16), absm), m2);
        m3 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i + 24), absm), m3);
    }
    for (; i + 8 <= n; i += 8) m0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i), absm), m0);
    const float r = amax_portable(src + i, n - i);
    const float v = lanes_max8(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    return v > r ? v : r;
}
#endif

float fl_amax_f32_path(const float *src, size_t n, int path) {
    float (*fn)(const float *, size_t) = amax_portable;
#ifdef __x86_64__
    if ((path == FL_PATH_AUTO || path == FL_PATH_AVX512) && fl_format_has_avx512()) fn = amax_avx512;
    else if ((path == FL_PATH_AUTO || path == FL_PATH_AVX2) && __builtin_cpu_supports("avx2")) fn = amax_avx2;
#endif
    const bool par = par_ok(n);
    if (!par) return fn(src, n);
    const size_t blk = par_block(n, par), nb = (n + blk - 1) / blk;
    float m = 0.0f;
    FL_PAR_FOR(1, schedule(static) reduction(max : m),
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * blk, len = n - lo < blk ? n - lo : blk;
        float v = fn(src + lo, len);
        m = v > m ? v : m;
    });
    return m;
}

float fl_amax_f32(const float *src, size_t n) { return fl_amax_f32_path(src, n, FL_PATH_AUTO); }

/* ---- dequantize -------------------------------------------------------------------------------
 * A 256-entry decode table per format; built once at load time and read-only afterwards. */
static float LUT_E4M3[256], LUT_E5M2[256];
__attribute__((constructor)) static void build_luts(void) {
    for (int i = 0; i < 256; i++) {
        LUT_E4M3[i] = fl_e4m3_to_f32((uint8_t)i);
        LUT_E5M2[i] = fl_e5m2_to_f32((uint8_t)i);
    }
}

/* dst[i] = value(src[i]) · scale_inv for i in [0, n): 16 codes a step exactly decoded (fp8_x86.h), the rest by the
 * table; both give every code's value times scale_inv, NaN codes the table's NaN (the same bits either way). The
 * table alone, one code at a time, was 2.0% of an msamp O2 step's samples (its moments, E4M3). */
static void dequant_span(const uint8_t *src, float *dst, size_t n, fl_dtype fmt, float scale_inv) {
    size_t i = 0;
#ifdef __x86_64__
    const bool e5 = fmt == FL_E5M2;
    const __m256 s = _mm256_set1_ps(scale_inv);
    for (; i + 16 <= n; i += 16) {
        __m256 lo, hi;
        fl_fp8_x86_dec16(src + i, e5, &lo, &hi);
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(lo, s));
        _mm256_storeu_ps(dst + i + 8, _mm256_mul_ps(hi, s));
    }
#endif
    const float *lut = fmt == FL_E5M2 ? LUT_E5M2 : LUT_E4M3;
    for (; i < n; i++) dst[i] = lut[src[i]] * scale_inv;
}

void fl_dequantize_f32(const uint8_t *src, float *dst, size_t n, fl_dtype fmt, float scale_inv) {
    if (!par_ok(n)) {
        dequant_span(src, dst, n, fmt, scale_inv);
        return;
    }
    const size_t blk = par_block(n, true), nb = (n + blk - 1) / blk;
    FL_PAR_FOR(1, schedule(static),
    for (size_t b = 0; b < nb; b++) {
        const size_t off = b * blk;
        dequant_span(src + off, dst + off, n - off < blk ? n - off : blk, fmt, scale_inv);
    });
}

void fl_fp8_add_n(const uint8_t *a, uint8_t *b, size_t n, fl_dtype fmt) {
    const fp8_params *P = fmt == FL_E5M2 ? &E5M2_P : &E4M3_P;
    const quant_block_fn fn = pick_quant(FL_PATH_AUTO);
    float fa[256], fb[256];
    for (size_t i = 0; i < n; i += 256) {
        const size_t m = n - i < 256 ? n - i : 256;
        dequant_span(a + i, fa, m, fmt, 1.0f);
        dequant_span(b + i, fb, m, fmt, 1.0f);
        for (size_t j = 0; j < m; j++) fa[j] += fb[j];
        fl_cast_stats st = {0};
        fn(fa, b + i, m, P, 1.0f, NULL, false, FL_SATURATE, &st);
    }
}

/* ---- bulk 16-bit conversions ---------------------------------------------------------------
 * AVX2/F16C are in the x86-64-v3 baseline; fp32 → bf16 takes 32 lanes with AVX512_BF16's VCVTNE2PS2BF16
 * where the CPU has it (1.4x the 16-lane integer rounding it replaced, on 256K elements in L2); the scalar
 * loops finish the tails (same results). */
#ifdef __x86_64__
/* 32 lanes a step with VCVTNE2PS2BF16 (bf16_x86.h: the same bits as the scalar rounding). */
FL_BF16_X86_TARGET static size_t f32_to_bf16_avx512(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        _mm512_storeu_si512(dst + i, fl_bf16_x86_pack32(_mm512_loadu_ps(src + i), _mm512_loadu_ps(src + i + 16)));
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(dst + i), fl_bf16_x86_pack16(_mm512_loadu_ps(src + i)));
    return i;
}
#endif

void fl_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
#ifdef __x86_64__
    if (n >= 16 && fl_bf16_x86_available()) i = f32_to_bf16_avx512(src, dst, n);
#endif
#ifdef __AVX2__
    const __m256i absm = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i r7 = _mm256_set1_epi32(0x7FFF), one = _mm256_set1_epi32(1), q = _mm256_set1_epi32(0x400000);
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), inf); /* signed ok: both < 2^31 */
        __m256i rnd = _mm256_add_epi32(_mm256_add_epi32(u, r7), _mm256_and_si256(_mm256_srli_epi32(u, 16), one));
        __m256i v = _mm256_srli_epi32(_mm256_blendv_epi8(rnd, _mm256_or_si256(u, q), isnan), 16);
        __m128i p = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        _mm_storeu_si128((__m128i *)(dst + i), p);
    }
#endif
    for (; i < n; i++) dst[i] = fl_f32_to_bf16(src[i]);
}

void fl_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
#ifdef __AVX2__
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(v, 16));
    }
#endif
    for (; i < n; i++) dst[i] = fl_bf16_to_f32(src[i]);
}

void fl_f32_to_f16_n(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; i < n; i++) dst[i] = fl_f32_to_f16(src[i]);
}

void fl_f16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
#ifdef __F16C__
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = fl_f16_to_f32(src[i]);
}

/* ---- scales ----------------------------------------------------------------------------------
 * Computed in fp32 in the same order as TransformerEngine: (max / amax) / 2^margin. */
float fl_scale_from_amax(float amax, fl_dtype fmt, int margin, float fallback) {
    const fl_format_traits *t = fl_format(fmt);
    if (!t) return fallback;
    return fl_amax_to_scale(amax, (float)t->max, margin, false, fallback);
}
