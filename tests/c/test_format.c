/* test_format.c — format traits and conversions, checked against references built here from the
 * bit-field definitions (ldexp) and a slow nearest-value search; never against format.c itself.
 * FL_TEST_QUICK=1 samples every 61st fp32 pattern in the exhaustive tests instead of all 2^32, and the patterns whose
 * low 12 bits are 0, 1 or all ones (block_patterns). */
#include "runner.h"
#include "format.h"
#include "format_internal.h"

#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t f2u(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float u2f(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint64_t pattern_step(void) {
    const char *q = getenv("FL_TEST_QUICK");
    return q && *q && strcmp(q, "0") ? 61 : 1;
}

/* The fp32 patterns of the block [start, start + 4096) (start a multiple of 4096) that an exhaustive test takes, in
 * pat: all of them (step 1), or every step-th pattern and the block's first two and last. Those three hold what every
 * 61st pattern alone missed (3 of the 4096): every tie between two fp8, fp16 or bf16 values (a tie has at least 12 low
 * zero bits) with the patterns on either side of it, e4m3's and e5m2's overflow ties (464, 61440) among them; ±0,
 * ±inf, the first and last NaN of each sign, ±FLT_MAX, the smallest subnormals, every power of two and its
 * neighbours (of 18 such patterns every 61st took +0 alone: a cast wrong at -0, inf or a tie passed make test). */
static uint64_t block_patterns(uint64_t start, uint64_t step, uint32_t *pat) {
    uint64_t n = 0;
    if (step == 1) {
        for (uint64_t o = 0; o < 4096; o++) pat[n++] = (uint32_t)(start + o);
        return n;
    }
    pat[n++] = (uint32_t)start;
    pat[n++] = (uint32_t)(start + 1);
    for (uint64_t i = ((start + 2 + step - 1) / step) * step; i < start + 4095; i += step) pat[n++] = (uint32_t)i;
    pat[n++] = (uint32_t)(start + 4095);
    return n;
}

/* ---- independent reference -------------------------------------------------------------------
 * Decode from the bit fields with ldexp. `unbounded` decodes the all-ones exponent as if it were
 * an ordinary binade, which gives the "next value above max" that IEEE rounding compares with. */
static double ref_decode(uint32_t code, int ebits, int mbits, int bias, int unbounded) {
    int sign = (code >> (ebits + mbits)) & 1;
    uint32_t e = (code >> mbits) & ((1u << ebits) - 1), m = code & ((1u << mbits) - 1);
    double v = e == 0 ? ldexp((double)m, 1 - bias - mbits)
                      : ldexp((double)((1u << mbits) + m), (int)e - bias - mbits);
    (void)unbounded;
    return sign ? -v : v;
}

/* A rounding table: tab[0..K] are the magnitudes of codes 0..K, where code K is the first code
 * past the largest finite (its value is the unbounded next step). */
typedef struct { double tab[0x7C01]; int K; double min_half; } ref_table;

static void ref_table_init(ref_table *t, int ebits, int mbits, int bias, int K) {
    t->K = K;
    for (int c = 0; c <= K; c++) t->tab[c] = ref_decode((uint32_t)c, ebits, mbits, bias, 1);
    t->min_half = t->tab[1] / 2;
}

/* Nearest code to ax >= 0 (finite), ties to the even code; returns K on overflow. */
static int ref_round(const ref_table *t, double ax) {
    if (ax <= t->min_half) return 0;            /* at or below half the smallest subnormal → 0 */
    if (ax >= t->tab[t->K]) return t->K;
    /* branch-free binary search for the largest lo with tab[lo] <= ax (tab[0] = 0 <= ax) */
    const double *base = t->tab;
    int len = t->K + 1;
    while (len > 1) {
        int half = len / 2;
        base = base[half] <= ax ? base + half : base;
        len -= half;
    }
    int lo = (int)(base - t->tab), hi = lo + 1;
    double dl = ax - t->tab[lo], dh = t->tab[hi] - ax;
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

static ref_table *T_E4M3, *T_E5M2, *T_F16;
static void ref_init(void) {
    if (T_E4M3) return;
    T_E4M3 = malloc(sizeof *T_E4M3); T_E5M2 = malloc(sizeof *T_E5M2); T_F16 = malloc(sizeof *T_F16);
    ref_table_init(T_E4M3, 4, 3, 7, 0x7F);   /* 0x7F would be 480 */
    ref_table_init(T_E5M2, 5, 2, 15, 0x7C);  /* 0x7C would be 61440 */
    ref_table_init(T_F16, 5, 10, 15, 0x7C00);/* 0x7C00 would be 65536 */
}

/* Reference FP8 encode. NaN codes are ml_dtypes': E4M3 S.1111.111, E5M2 S.11111.10. */
static uint8_t ref_fp8(float x, fl_dtype fmt, fl_overflow p) {
    uint32_t u = f2u(x);
    uint8_t sign = (u >> 31) ? 0x80 : 0;
    int e4 = fmt == FL_E4M3;
    if (isnan(x)) return sign | (e4 ? 0x7F : 0x7E);
    const ref_table *t = e4 ? T_E4M3 : T_E5M2;
    int c = isinf(x) ? t->K : ref_round(t, fabs((double)x));
    if (c == t->K) c = p == FL_SATURATE ? t->K - 1 : (e4 ? 0x7F : 0x7C);
    return sign | (uint8_t)c;
}

/* Reference bf16: the two candidates around x are its truncation and the next code. */
static uint16_t ref_bf16(float x) {
    uint32_t u = f2u(x), t = (u >> 16) & 0x7FFF;
    double ax = fabs((double)x);
    if (isinf(x)) return (uint16_t)(u >> 16);
    /* bf16 is by definition the top half of an fp32; the code past max (0x7F80) counts as 2^128 */
    double lo = (double)u2f(t << 16), hi = t + 1 == 0x7F80 ? 0x1p128 : (double)u2f((t + 1) << 16);
    uint32_t c = ax - lo < hi - ax ? t : ax - lo > hi - ax ? t + 1 : ((t & 1) ? t + 1 : t);
    return (uint16_t)(((u >> 31) << 15) | c); /* c == 0x7F80 is +inf: IEEE overflow */
}

static double ref_f16_value(uint16_t h) {
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) return m ? NAN : ((h & 0x8000) ? -INFINITY : INFINITY);
    return ref_decode(h, 5, 10, 15, 0);
}
static double ref_fp8_value(uint8_t b, fl_dtype fmt) {
    if (fmt == FL_E4M3) {
        if ((b & 0x7F) == 0x7F) return NAN;
        return ref_decode(b, 4, 3, 7, 0);
    }
    if ((b & 0x7F) > 0x7C) return NAN;
    if ((b & 0x7F) == 0x7C) return (b & 0x80) ? -INFINITY : INFINITY;
    return ref_decode(b, 5, 2, 15, 0);
}

/* ---- traits and names ---------------------------------------------------------------------- */
TEST(format_traits_values) {
    const fl_format_traits *t = fl_format(FL_E4M3);
    REQUIRE(t != NULL, "e4m3 traits");
    CHECK(t->max == 448.0 && t->min_normal == ldexp(1, -6) && t->min_subnormal == ldexp(1, -9), "e4m3 range");
    CHECK(t->bias == 7 && t->mant_bits == 3 && t->exp_bits == 4 && !t->has_inf && t->nan_count == 2, "e4m3 fields");
    CHECK(!strcmp(t->name, "e4m3") && !strcmp(t->long_name, "float8_e4m3fn"), "e4m3 names");
    t = fl_format(FL_E5M2);
    CHECK(t->max == 57344.0 && t->min_normal == ldexp(1, -14) && t->min_subnormal == ldexp(1, -16), "e5m2 range");
    CHECK(t->bias == 15 && t->mant_bits == 2 && t->has_inf && t->nan_count == 6 && t->size == 1, "e5m2 fields");
    t = fl_format(FL_F16);
    CHECK(t->max == 65504.0 && t->min_subnormal == ldexp(1, -24) && t->size == 2 && t->nan_count == 2046, "fp16");
    t = fl_format(FL_BF16);
    CHECK(t->max == (2 - ldexp(1, -7)) * ldexp(1, 127) && t->bits == 16 && t->nan_count == 254, "bf16");
    t = fl_format(FL_F32);
    CHECK(t->max == FLT_MAX && t->size == 4 && t->bits == 32, "fp32");
    CHECK(fl_format(FL_DTYPE_COUNT) == NULL, "out of range dtype");
    /* every row is filled and its traits functions round-trip a value exact in all formats */
    for (int d = 0; d < FL_DTYPE_COUNT; d++) {
        const fl_format_traits *r = fl_format((fl_dtype)d);
        REQUIRE(r && r->name && r->to_float && r->from_float, "row %d", d);
        CHECK(r->to_float(r->from_float(-1.5f, FL_SATURATE)) == -1.5f, "%s round trip", r->name);
        CHECK(r->to_float(r->from_float(INFINITY, FL_SATURATE)) == (float)r->max || d == FL_F32,
              "%s saturate", r->name);
    }
}

TEST(format_dtype_names) {
    static const struct { const char *n; fl_dtype t; } ok[] = {
        {"fp32", FL_F32}, {"FLOAT32", FL_F32}, {"float", FL_F32}, {"f32", FL_F32},
        {"bf16", FL_BF16}, {"BFloat16", FL_BF16}, {"fp16", FL_F16}, {"float16", FL_F16},
        {"half", FL_F16}, {"F16", FL_F16}, {"e4m3", FL_E4M3}, {"E4M3", FL_E4M3},
        {"float8_e4m3fn", FL_E4M3}, {"fp8_e4m3", FL_E4M3}, {"e4m3fn", FL_E4M3},
        {"e5m2", FL_E5M2}, {"Float8_E5M2", FL_E5M2}, {"fp8_e5m2", FL_E5M2}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        fl_dtype d = FL_DTYPE_COUNT;
        CHECK(fl_dtype_from_name(ok[i].n, &d) && d == ok[i].t, "%s", ok[i].n);
    }
    fl_dtype d;
    CHECK(!fl_dtype_from_name("e4m2", &d) && !fl_dtype_from_name("", &d) && !fl_dtype_from_name(NULL, &d), "unknown");
    CHECK(strstr(fl_dtype_choices(), "e4m3") && strstr(fl_dtype_choices(), "bf16"), "choices");
}

/* ---- specific values ----------------------------------------------------------------------- */
TEST(format_fp8_specific_values) {
    CHECK(fl_f32_to_e4m3(464.0f, FL_SATURATE) == 0x7E, "464 sat -> 0x7E");
    CHECK(fl_f32_to_e4m3(464.0f, FL_IEEE) == 0x7E, "464 is a tie, even code 448");
    CHECK(fl_f32_to_e4m3(465.0f, FL_IEEE) == 0x7F, "465 ieee -> NaN");
    CHECK(fl_f32_to_e4m3(465.0f, FL_SATURATE) == 0x7E, "465 sat -> 448");
    CHECK(fl_f32_to_e4m3(-465.0f, FL_IEEE) == 0xFF, "-465 ieee -> -NaN");
    CHECK(fl_f32_to_e4m3(448.0f, FL_IEEE) == 0x7E, "448");
    CHECK(fl_f32_to_e4m3(1e9f, FL_SATURATE) == 0x7E && fl_f32_to_e4m3(-1e9f, FL_SATURATE) == 0xFE, "big sat");
    CHECK(fl_f32_to_e4m3(INFINITY, FL_SATURATE) == 0x7E && fl_f32_to_e4m3(-INFINITY, FL_SATURATE) == 0xFE, "inf sat");
    CHECK(fl_f32_to_e4m3(INFINITY, FL_IEEE) == 0x7F && fl_f32_to_e4m3(-INFINITY, FL_IEEE) == 0xFF, "inf ieee");
    CHECK((fl_f32_to_e4m3(NAN, FL_SATURATE) & 0x7F) == 0x7F && (fl_f32_to_e4m3(NAN, FL_IEEE) & 0x7F) == 0x7F, "nan");
    /* subnormals: 2^-9 is the smallest; 0.5*2^-9 ties to 0 (even); 1.5*2^-9 ties to 2*2^-9 */
    CHECK(fl_f32_to_e4m3(ldexpf(1, -9), FL_IEEE) == 0x01, "min sub");
    CHECK(fl_f32_to_e4m3(ldexpf(1, -10), FL_IEEE) == 0x00, "half min sub ties to 0");
    CHECK(fl_f32_to_e4m3(ldexpf(1.0001f, -10), FL_IEEE) == 0x01, "just above half rounds up");
    CHECK(fl_f32_to_e4m3(ldexpf(3, -10), FL_IEEE) == 0x02, "1.5 sub ties to 2");
    CHECK(fl_f32_to_e4m3(-ldexpf(1, -10), FL_IEEE) == 0x80, "-tiny -> -0");
    CHECK(fl_f32_to_e4m3(ldexpf(15, -10), FL_IEEE) == 0x08, "7.5 subs tie to min normal (even)");
    CHECK(fl_f32_to_e4m3(-0.0f, FL_SATURATE) == 0x80 && fl_f32_to_e4m3(0.0f, FL_SATURATE) == 0x00, "signed zero");
    CHECK(fl_f32_to_e4m3(1.0f, FL_IEEE) == 0x38 && fl_f32_to_e4m3(-2.0f, FL_IEEE) == 0xC0, "1, -2");
    CHECK(fl_f32_to_e4m3(1.0625f, FL_IEEE) == 0x38 && fl_f32_to_e4m3(1.1875f, FL_IEEE) == 0x3A, "ties in normal");
    CHECK(fl_f32_to_e4m3(ldexpf(1, -149), FL_IEEE) == 0 && fl_f32_to_e4m3(-FLT_MIN, FL_IEEE) == 0x80, "fp32 denorm");

    CHECK(fl_f32_to_e5m2(57344.0f, FL_IEEE) == 0x7B, "e5m2 max");
    /* the next step above 57344 would be 65536; their midpoint 61440 ties to the even code 0x7C */
    CHECK(fl_f32_to_e5m2(61440.0f, FL_IEEE) == 0x7C, "e5m2 tie above max goes to even code = inf");
    CHECK(fl_f32_to_e5m2(61440.0f, FL_SATURATE) == 0x7B, "e5m2 tie above max, saturate");
    CHECK(fl_f32_to_e5m2(61439.0f, FL_IEEE) == 0x7B, "below tie");
    CHECK(fl_f32_to_e5m2(-INFINITY, FL_IEEE) == 0xFC && fl_f32_to_e5m2(INFINITY, FL_SATURATE) == 0x7B, "e5m2 inf");
    CHECK(fl_fp8_is_nan(fl_f32_to_e5m2(NAN, FL_IEEE), FL_E5M2) && fl_fp8_is_nan(fl_f32_to_e5m2(-NAN, FL_SATURATE), FL_E5M2), "e5m2 nan");
    CHECK(fl_f32_to_e5m2(ldexpf(1, -17), FL_IEEE) == 0 && fl_f32_to_e5m2(ldexpf(3, -17), FL_IEEE) == 2, "e5m2 sub ties");
    CHECK(fl_f32_to_fp8(3.0f, FL_E5M2, FL_IEEE) == 0x42 && fl_fp8_to_f32(0x42, FL_E5M2) == 3.0f, "dispatch");
    CHECK(fl_fp8_is_nan(0xFF, FL_E4M3) && !fl_fp8_is_nan(0x7E, FL_E4M3) && !fl_fp8_is_nan(0x7C, FL_E5M2), "is_nan");
}

TEST(format_16bit_specific_values) {
    CHECK(fl_f32_to_bf16(1.0f) == 0x3F80 && fl_bf16_to_f32(0x3F80) == 1.0f, "bf16 1");
    CHECK(fl_f32_to_bf16(u2f(0x3F808000)) == 0x3F80, "bf16 tie to even (down)");
    CHECK(fl_f32_to_bf16(u2f(0x3F818000)) == 0x3F82, "bf16 tie to even (up)");
    CHECK(fl_f32_to_bf16(FLT_MAX) == 0x7F80, "bf16 overflow -> inf");
    CHECK(fl_f32_to_bf16(-0.0f) == 0x8000, "bf16 -0");
    uint16_t n = fl_f32_to_bf16(u2f(0x7F800001));
    CHECK((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0, "bf16 NaN stays NaN (0x%04x)", n);
    CHECK(fl_f32_to_f16(65504.0f) == 0x7BFF && fl_f32_to_f16(65520.0f) == 0x7C00 && fl_f32_to_f16(65519.0f) == 0x7BFF, "f16 max");
    CHECK(fl_f32_to_f16(ldexpf(1, -24)) == 1 && fl_f32_to_f16(ldexpf(1, -25)) == 0 && fl_f32_to_f16(-ldexpf(3, -25)) == 0x8002, "f16 sub");
    CHECK(fl_f16_to_f32(0x3C00) == 1.0f && fl_f16_to_f32(0xFC00) == -INFINITY && isnan(fl_f16_to_f32(0x7C01)), "f16 decode");
    const fl_format_traits *b = fl_format(FL_BF16), *h = fl_format(FL_F16);
    CHECK(b->from_float(INFINITY, FL_SATURATE) == 0x7F7F && b->from_float(-INFINITY, FL_IEEE) == 0xFF80, "bf16 policies");
    CHECK(h->from_float(1e6f, FL_SATURATE) == 0x7BFF && h->from_float(1e6f, FL_IEEE) == 0x7C00, "f16 policies");
}

/* ---- decode tables ------------------------------------------------------------------------- */
TEST(format_fp8_decode_all_codes) {
    for (int c = 0; c < 256; c++) {
        for (int f = 0; f < 2; f++) {
            fl_dtype fmt = f ? FL_E5M2 : FL_E4M3;
            double want = ref_fp8_value((uint8_t)c, fmt);
            float got = fl_fp8_to_f32((uint8_t)c, fmt);
            if (isnan(want)) CHECK(isnan(got) && fl_fp8_is_nan((uint8_t)c, fmt), "code 0x%02x fmt %d", c, f);
            else CHECK((double)got == want && !!signbit(got) == !!signbit(want) && !fl_fp8_is_nan((uint8_t)c, fmt),
                       "code 0x%02x fmt %d: %g vs %g", c, f, got, want);
        }
    }
}

/* The bulk dequantize (16 codes a step, exactly decoded by way of fp16, the rest by the table) gives the table's
 * bits for every code, NaN codes included, at several scales and at every tail length. */
TEST(format_bulk_dequantize_matches_table_bits) {
    enum { N = 256 * 2 + 31 };
    uint8_t q[N];
    float got[N];
    for (int i = 0; i < N; i++) q[i] = (uint8_t)(i * 167 + 11);   /* every code, in a scrambled order */
    const float scales[] = { 1.0f, 0.37f, 0x1p-20f, 3.0e4f, -1.5f };
    int bad = 0;
    for (int f = 0; f < 2; f++)
        for (size_t si = 0; si < sizeof scales / sizeof *scales; si++)
            for (int n = N - 16; n <= N; n++) {
                const fl_dtype fmt = f ? FL_E5M2 : FL_E4M3;
                fl_dequantize_f32(q, got, (size_t)n, fmt, scales[si]);
                for (int i = 0; i < n; i++) {
                    const float want = fl_fp8_to_f32(q[i], fmt) * scales[si];
                    uint32_t gw, ww;
                    memcpy(&gw, &got[i], 4);
                    memcpy(&ww, &want, 4);
                    if (gw != ww && bad++ < 3)
                        CHECK(0, "fmt %d scale %g n %d: code 0x%02x gives %08x, the table %08x", f, scales[si], n, q[i],
                              (unsigned)gw, (unsigned)ww);
                }
            }
    CHECK(bad == 0, "%d elements differ from the table", bad);
}

/* fl_fp8_add_n, the FP8 sum all-reduce's step: every pair of codes in both formats (65536 each, laid out so that
 * the 256-value chunks and the 16-lane decodes see every alignment) gives the bits of the scalar cast of the fp32
 * sum, saturation included; a NaN sum is a NaN code (which sign, fp32's NaN + NaN leaves to the order the compiler
 * gives the operands: the sanitizer build's -O1 and the -O2 build differ there). */
TEST(format_fp8_add_n_matches_scalar_for_every_pair) {
    enum { N = 65536 + 13 };
    static uint8_t a[N], b[N], want[N];
    for (int f = 0; f < 2; f++) {
        const fl_dtype fmt = f ? FL_E5M2 : FL_E4M3;
        for (int i = 0; i < N; i++) {
            a[i] = (uint8_t)(i & 255);
            b[i] = (uint8_t)((i >> 8) * 7 + 3);   /* every b code against every a code in the first 65536 */
            want[i] = fl_f32_to_fp8(fl_fp8_to_f32(a[i], fmt) + fl_fp8_to_f32(b[i], fmt), fmt, FL_SATURATE);
        }
        for (int off = 0; off < 3; off++) {   /* unaligned starts and a tail of every length below 16 */
            uint8_t bb[N];
            memcpy(bb, b, sizeof bb);
            fl_fp8_add_n(a + off, bb + off, (size_t)(N - off - off * 5), fmt);
            int bad = 0;
            for (int i = off; i < N - off * 5; i++)   /* a NaN's sign follows the compiler's order of the addition */
                if (bb[i] != want[i] && !(fl_fp8_is_nan(bb[i], fmt) && fl_fp8_is_nan(want[i], fmt)) && bad++ < 3)
                    CHECK(0, "fmt %d: 0x%02x + 0x%02x gives 0x%02x, the scalar cast 0x%02x", f, a[i], b[i], bb[i], want[i]);
            for (int i = N - off * 5; i < N; i++) CHECK(bb[i] == b[i], "byte %d past n written", i);
            CHECK(bad == 0, "fmt %d offset %d: %d sums differ from the scalar cast", f, off, bad);
        }
    }
}

TEST(format_16bit_decode_all_codes) {
    static uint16_t codes[65536];
    static float bulk[65536];
    for (int c = 0; c < 65536; c++) codes[c] = (uint16_t)c;
    fl_f16_to_f32_n(codes, bulk, 65536);
    int bad = 0;
    for (int c = 0; c < 65536 && bad < 5; c++) {
        double want = ref_f16_value((uint16_t)c);
        float got = fl_f16_to_f32((uint16_t)c);
        int ok = isnan(want) ? isnan(got) && !!signbit(got) == !!(c & 0x8000)
                             : (double)got == want && !!signbit(got) == !!(c & 0x8000);
        ok = ok && f2u(bulk[c]) == f2u(got);
        if (!ok) { bad++; CHECK(0, "fp16 code 0x%04x: %a (bulk %a) vs %a", c, got, bulk[c], want); }
    }
    fl_bf16_to_f32_n(codes, bulk, 65536);
    for (int c = 0; c < 65536 && bad < 10; c++) {
        uint32_t e = (c >> 7) & 0xFF, m = c & 0x7F;
        double want = e == 0xFF ? (m ? NAN : INFINITY) : fabs(ref_decode((uint32_t)c & 0x7FFF, 8, 7, 127, 0));
        if (c & 0x8000) want = -want;
        float got = fl_bf16_to_f32((uint16_t)c);
        int ok = (isnan(want) ? isnan(got) : (double)got == want) && f2u(bulk[c]) == f2u(got);
        if (!ok) { bad++; CHECK(0, "bf16 code 0x%04x", c); }
    }
}

/* ---- exhaustive fp32 → narrow --------------------------------------------------------------- */
TEST(format_exhaustive_fp8_all_fp32_patterns) {
    ref_init();
    uint64_t step = pattern_step(), bad = 0;
    uint32_t first_bad = 0;
    int have_first = 0;
    /* Besides the scalar casts, the fused quantize kernels (scale 1) see every pattern too. */
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : bad)
    for (int64_t hi = 0; hi < (1 << 20); hi++) {
        float xs[4096];
        uint8_t want[4][4096], got[4096];
        uint32_t pat[4096];
        const uint64_t np = block_patterns((uint64_t)hi << 12, step, pat);
        uint64_t n = 0;
        for (uint64_t k = 0; k < np; k++) {
            const uint32_t i = pat[k];
            float x = u2f(i);
            uint8_t r4 = ref_fp8(x, FL_E4M3, FL_IEEE), r5 = ref_fp8(x, FL_E5M2, FL_IEEE);
            /* saturate differs from IEEE only on overflow codes */
            uint8_t s4 = (r4 & 0x7F) == 0x7F && !isnan(x) ? (r4 & 0x80) | 0x7E : r4;
            uint8_t s5 = (r5 & 0x7F) == 0x7C ? (r5 & 0x80) | 0x7B : r5;
            int b = (fl_f32_to_e4m3(x, FL_IEEE) != r4) + (fl_f32_to_e5m2(x, FL_IEEE) != r5) +
                    (fl_f32_to_e4m3(x, FL_SATURATE) != s4) + (fl_f32_to_e5m2(x, FL_SATURATE) != s5);
            xs[n] = x;
            want[0][n] = r4; want[1][n] = r5; want[2][n] = s4; want[3][n] = s5;
            n++;
            if (b) {
                bad += (uint64_t)b;
#pragma omp critical
                if (!have_first) { have_first = 1; first_bad = i; }
            }
        }
        /* each kernel path sees both formats and both policies (AVX2: each format with one of them) */
        static const struct { fl_dtype f; fl_overflow p; int path, w; } runs[] = {
            {FL_E4M3, FL_SATURATE, FL_PATH_AVX512, 2}, {FL_E5M2, FL_SATURATE, FL_PATH_PORTABLE, 3},
            {FL_E4M3, FL_IEEE, FL_PATH_PORTABLE, 0},   {FL_E5M2, FL_IEEE, FL_PATH_AVX512, 1},
            {FL_E4M3, FL_SATURATE, FL_PATH_AVX2, 2},   {FL_E5M2, FL_IEEE, FL_PATH_AVX2, 1}};
        for (int k = 0; k < 6; k++) {
            fl_quantize_f32_path(xs, got, n, runs[k].f, 1.0f, runs[k].p, NULL, runs[k].path);
            if (memcmp(got, want[runs[k].w], n)) {
                uint64_t j = 0;
                while (got[j] == want[runs[k].w][j]) j++;
                bad++;
#pragma omp critical
                if (!have_first) { have_first = 1; first_bad = f2u(xs[j]); }
            }
        }
    }
    if (bad) {
        float x = u2f(first_bad);
        CHECK(0, "%llu mismatches; first 0x%08x (%a): e4m3 %02x/%02x want %02x, e5m2 %02x/%02x want %02x",
              (unsigned long long)bad, first_bad, x, fl_f32_to_e4m3(x, FL_IEEE), fl_f32_to_e4m3(x, FL_SATURATE),
              ref_fp8(x, FL_E4M3, FL_IEEE), fl_f32_to_e5m2(x, FL_IEEE), fl_f32_to_e5m2(x, FL_SATURATE),
              ref_fp8(x, FL_E5M2, FL_IEEE));
    }
    if (!fl_format_has_avx512()) fprintf(stderr, "  (no AVX-512 on this CPU: its path ran the portable kernel)\n");
}

/* The bulk fp32 → bf16 path takes 32 lanes, then 16, then single values (format.c), and a vector holding a
 * denormal takes the integer rounding (bf16_x86.h: VCVTNE2PS2BF16 flushes them). Every length to 100 and
 * every offset of one denormal, NaN or infinity among normals: bulk == scalar. (The exhaustive test below
 * walks patterns in runs of 4096, which never reach the 16-lane step.) */
TEST(format_bf16_bulk_lengths_with_denormals) {
    const uint32_t odd[] = { 0x00000001u, 0x807FFFFFu, 0x00400000u, 0x7FC00001u, 0xFF800001u, 0x7F800000u,
                             0x7F7FFFFFu, 0x00800000u };
    float xs[100];
    uint16_t got[100];
    int bad = 0;
    for (int n = 1; n <= 100; n++)
        for (size_t o = 0; o < sizeof odd / sizeof *odd; o++)
            for (int at = -1; at < n; at++) {
                for (int i = 0; i < n; i++) xs[i] = u2f(0x3F800000u + (uint32_t)(i * 0x9E3779u % 0x01000000u) + (i & 1u) * 0x8000u);
                if (at >= 0) xs[at] = u2f(odd[o]);
                fl_f32_to_bf16_n(xs, got, (size_t)n);
                for (int i = 0; i < n; i++) bad += got[i] != fl_f32_to_bf16(xs[i]);
            }
    CHECK(bad == 0, "%d bulk bf16 values differ from the scalar rounding", bad);
}

TEST(format_exhaustive_16bit_all_fp32_patterns) {
    ref_init();
    uint64_t step = pattern_step(), bad = 0;
    uint32_t first_bad = 0;
    int have_first = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : bad)
    for (int64_t hi = 0; hi < (1 << 20); hi++) {
        float xs[4096];
        uint16_t hb[4096], hh[4096];
        uint32_t pat[4096];
        const uint64_t n = block_patterns((uint64_t)hi << 12, step, pat);
        for (uint64_t k = 0; k < n; k++) xs[k] = u2f(pat[k]);
        fl_f32_to_bf16_n(xs, hb, n);
        fl_f32_to_f16_n(xs, hh, n);
        for (uint64_t j = 0; j < n; j++) {
            float x = xs[j];
            uint16_t b = fl_f32_to_bf16(x), h = fl_f32_to_f16(x);
            int ok;
            if (isnan(x)) {
                ok = (b & 0x7F80) == 0x7F80 && (b & 0x7F) && (b >> 15) == (f2u(x) >> 31) &&
                     (h & 0x7C00) == 0x7C00 && (h & 0x3FF) && (h >> 15) == (f2u(x) >> 31);
            } else {
                uint16_t sign = (uint16_t)((f2u(x) >> 31) << 15);
                int c = isinf(x) ? 0x7C00 : ref_round(T_F16, fabs((double)x));
                ok = b == ref_bf16(x) && h == (sign | c);
            }
            ok = ok && hb[j] == b && hh[j] == h; /* bulk (AVX-512 or AVX2, F16C) == scalar, NaNs included */
            if (!ok) {
                bad++;
#pragma omp critical
                if (!have_first) { have_first = 1; first_bad = f2u(x); }
            }
        }
    }
    if (bad) {
        float x = u2f(first_bad);
        uint16_t hb, hh;
        fl_f32_to_bf16_n(&x, &hb, 1);
        fl_f32_to_f16_n(&x, &hh, 1);
        CHECK(0, "%llu mismatches; first 0x%08x: bf16 %04x want %04x, f16 %04x", (unsigned long long)bad,
              first_bad, fl_f32_to_bf16(x), ref_bf16(x), fl_f32_to_f16(x));
    }
}

/* ---- fused quantize ------------------------------------------------------------------------- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_special(float *x, size_t n) {
    static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 448.0f, 464.0f,
                                     465.0f, -480.0f, 57344.0f, 61440.0f, 1e-30f, -1e-45f, 0x1p-10f, 0x1p-9f};
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next();
        switch (r % 8) {
        case 0: x[i] = specials[(r >> 8) % 16]; break;
        case 1: x[i] = u2f((uint32_t)(r >> 16)); break;                   /* any bit pattern */
        default: x[i] = (float)((double)(int64_t)(r >> 11) / 9007199254740992.0 * 1000.0 *
                                ldexp(1, (int)((r >> 3) % 20) - 14)); break; /* wide magnitudes */
        }
    }
}

/* The scalar reference of a cast: want[i] = fp8(x[i]·scale), or ·sc[i] with per-element scales, and the
 * counters by their definitions in format.h. */
static fl_cast_stats ref_cast(const float *x, float scale, const float *sc, size_t n, fl_dtype fmt, fl_overflow pol,
                              uint8_t *want) {
    const int e5 = fmt == FL_E5M2;
    fl_cast_stats ref = {0};
    for (size_t i = 0; i < n; i++) {
        float y = x[i] * (sc ? sc[i] : scale);
        want[i] = ref_fp8(y, fmt, pol);
        if (fabsf(x[i]) > ref.amax) ref.amax = fabsf(x[i]);
        if (isnan(x[i])) ref.nan++;
        if (x[i] != 0 && !isnan(x[i]) && (want[i] & 0x7F) == 0) ref.underflow++;
        /* saturated: a source, ±inf included, whose scaled value is not NaN and rounds past max */
        if (!isnan(y) && (isinf(y) || ref_round(e5 ? T_E5M2 : T_E4M3, fabs((double)y)) == (e5 ? 0x7C : 0x7F)))
            ref.saturated++;
    }
    return ref;
}

/* The cast's kernels: portable, AVX-512 and AVX2 (each falls back to portable where the CPU has not got it). */
static const int paths[3] = { FL_PATH_PORTABLE, FL_PATH_AVX512, FL_PATH_AVX2 };
static const char *const path_name[3] = { "portable", "avx512", "avx2" };

TEST(format_quantize_paths_match_reference) {
    ref_init();
    static const size_t lens[] = {0, 1, 7, 15, 16, 17, 31, 33, 100, 1000, 4099, 65537, 300001};
    static const float scales[] = {1.0f, 0.5f, 3.7f, 1e-3f, 1e20f, 0.0f, INFINITY};   /* the last two: x·scale is NaN where x is not */
    float *x = malloc(300001 * sizeof *x);
    uint8_t *want = malloc(300001), *a = malloc(300001);
    REQUIRE(x && want && a, "alloc");
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        fill_special(x, n);
        for (int f = 0; f < 2; f++)
            for (int pol = 0; pol < 2; pol++)
                for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
                    fl_dtype fmt = f ? FL_E5M2 : FL_E4M3;
                    float s = scales[si];
                    fl_cast_stats sa, ref = ref_cast(x, s, NULL, n, fmt, (fl_overflow)pol, want);
                    for (int k = 0; k < 3; k++) {
                        memset(a, 0xAA ^ k, n);
                        REQUIRE_OK(fl_quantize_f32_path(x, a, n, fmt, s, (fl_overflow)pol, &sa, paths[k]));
                        CHECK(memcmp(a, want, n) == 0, "%s bytes n=%zu f=%d pol=%d s=%g", path_name[k], n, f, pol, s);
                        CHECK(f2u(sa.amax) == f2u(ref.amax), "%s amax %g %g", path_name[k], sa.amax, ref.amax);
                        CHECK(sa.nan == ref.nan, "%s nan %lld %lld", path_name[k], (long long)sa.nan,
                              (long long)ref.nan);
                        CHECK(sa.underflow == ref.underflow, "%s underflow %lld %lld n=%zu s=%g", path_name[k],
                              (long long)sa.underflow, (long long)ref.underflow, n, s);
                        CHECK(sa.saturated == ref.saturated, "%s saturated %lld %lld n=%zu s=%g", path_name[k],
                              (long long)sa.saturated, (long long)ref.saturated, n, s);
                        if (n) CHECK(fl_amax_f32_path(x, n, paths[k]) == ref.amax, "%s amax fn", path_name[k]);
                    }
                    if (n) CHECK(fl_amax_f32(x, n) == ref.amax, "amax fn");
                }
    }
    if (!fl_format_has_avx512()) fprintf(stderr, "  (no AVX-512 on this CPU: its path ran the portable kernel)\n");
    free(x); free(want); free(a);
}

/* amax ignores NaN wherever it sits: every length to 80 (each kernel's main loop, its 8- or 16-lane steps and its
 * scalar tail) with one NaN at each position, and with the largest |x| at each position, on every path. The
 * magnitudes fall with the index, so a NaN that replaced a lane's running maximum would lose the true one. */
TEST(format_amax_nan_and_max_at_every_position) {
    float x[80];
    for (int n = 1; n <= 80; n++)
        for (int p = 0; p < n; p++)
            for (int kind = 0; kind < 2; kind++) {
                for (int i = 0; i < n; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * (0.25f + 0.001f * (float)(n - i));
                x[p] = kind ? -1000.0f : NAN;
                float want = 0.0f;
                for (int i = 0; i < n; i++) if (!isnan(x[i]) && fabsf(x[i]) > want) want = fabsf(x[i]);
                for (int k = 0; k < 3; k++) {
                    const float got = fl_amax_f32_path(x, (size_t)n, paths[k]);
                    if (f2u(got) != f2u(want)) {
                        CHECK(0, "%s amax n=%d, %s at %d: %g, want %g", path_name[k], n, kind ? "max" : "NaN", p, got, want);
                        return;
                    }
                }
            }
}

/* One scale per element (a row of a per-column scaled matrix): bytes and counters as the scalar reference of
 * each element with its own scale, on both kernels. The scales: cycling through specials (0, ∞); every one finite
 * and positive (the vector kernels' fast loop); and those with one 0, ∞ or NaN among them, at the start, middle or
 * end (the kernels then take the checked loop for that block). */
TEST(format_quantize_per_element_scales_match_reference) {
    ref_init();
    static const size_t lens[] = {1, 15, 17, 64, 100, 1000, 4099, 65537, 300001};
    static const float cyc[] = {1.0f, 0.5f, 3.7f, 1e-3f, 1e20f, 0.0f, INFINITY, 448.0f / 3.0f, 2.5e-5f, 7.0f, 0.125f};
    static const float fin[] = {1.0f, 0.5f, 3.7f, 1e-3f, 1e20f, 448.0f / 3.0f, 2.5e-5f, 7.0f, 0.125f, 0x1p-130f};
    const size_t ncyc = sizeof cyc / sizeof cyc[0], nfin = sizeof fin / sizeof fin[0];
    float *x = malloc(300001 * sizeof *x), *sc = malloc(300001 * sizeof *sc);
    uint8_t *want = malloc(300001), *a = malloc(300001);
    REQUIRE(x && sc && want && a, "alloc");
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int set = 0; set < 5; set++) {
            size_t n = lens[li];
            fill_special(x, n);
            for (size_t i = 0; i < n; i++) sc[i] = set == 0 ? cyc[(i * 7 + li) % ncyc] : fin[(i * 7 + li) % nfin];
            if (set >= 2) sc[set == 2 ? 0 : set == 3 ? n / 2 : n - 1] = set == 2 ? 0.0f : set == 3 ? INFINITY : NAN;
            for (int f = 0; f < 2; f++)
                for (int pol = 0; pol < 2; pol++) {
                    fl_dtype fmt = f ? FL_E5M2 : FL_E4M3;
                    fl_cast_stats sa, ref = ref_cast(x, 0.0f, sc, n, fmt, (fl_overflow)pol, want);
                    for (int k = 0; k < 3; k++) {
                        memset(a, 0xAA ^ k, n);
                        REQUIRE_OK(fl_quantize_f32_scales_path(x, a, n, fmt, sc, (fl_overflow)pol, &sa, paths[k]));
                        CHECK(memcmp(a, want, n) == 0, "%s bytes n=%zu set=%d f=%d pol=%d", path_name[k], n, set, f,
                              pol);
                        CHECK(f2u(sa.amax) == f2u(ref.amax), "%s amax %g %g", path_name[k], sa.amax, ref.amax);
                        CHECK(sa.nan == ref.nan, "%s nan %lld %lld", path_name[k], (long long)sa.nan,
                              (long long)ref.nan);
                        CHECK(sa.underflow == ref.underflow, "%s underflow %lld %lld n=%zu", path_name[k],
                              (long long)sa.underflow, (long long)ref.underflow, n);
                        CHECK(sa.saturated == ref.saturated, "%s saturated %lld %lld n=%zu", path_name[k],
                              (long long)sa.saturated, (long long)ref.saturated, n);
                    }
                }
        }
    CHECK(fl_quantize_f32_scales(x, a, 5, FL_E4M3, NULL, FL_SATURATE, NULL) == FL_EINVAL, "NULL scales accepted");
    free(x); free(sc); free(want); free(a);
}

/* A matrix with one scale per column (fl_quantize_f32_cols: the scales checked once for all rows): bytes and the
 * summed statistics as the scalar reference row by row, on every path, for widths on both sides of the fast
 * loop's 32, with every scale finite and positive and with one 0, ∞ or NaN scale; then the arguments it refuses. */
TEST(format_quantize_cols_matches_rows_reference) {
    ref_init();
    static const size_t shapes[][2] = {{1, 1}, {3, 17}, {5, 32}, {4, 64}, {7, 100}, {3, 1000}, {2, 4099}};
    static const float fin[] = {1.0f, 0.5f, 3.7f, 1e-3f, 1e20f, 448.0f / 3.0f, 2.5e-5f, 7.0f, 0.125f, 0x1p-130f};
    enum { NMAX = 7 * 100 > 3 * 1000 ? 7 * 100 : 3 * 4099 };
    float *x = malloc(NMAX * sizeof *x), *sc = malloc(4099 * sizeof *sc);
    uint8_t *want = malloc(NMAX), *a = malloc(NMAX);
    REQUIRE(x && sc && want && a, "alloc");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int set = 0; set < 4; set++) {
            const size_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
            fill_special(x, n);
            for (size_t j = 0; j < cols; j++) sc[j] = fin[(j * 3 + si) % (sizeof fin / sizeof fin[0])];
            if (set) sc[set == 1 ? 0 : set == 2 ? cols / 2 : cols - 1] = set == 1 ? 0.0f : set == 2 ? INFINITY : NAN;
            for (int f = 0; f < 2; f++)
                for (int pol = 0; pol < 2; pol++) {
                    const fl_dtype fmt = f ? FL_E5M2 : FL_E4M3;
                    fl_cast_stats ref = {0};
                    for (size_t r = 0; r < rows; r++) {
                        fl_cast_stats rr =
                            ref_cast(x + r * cols, 0.0f, sc, cols, fmt, (fl_overflow)pol, want + r * cols);
                        fl_cast_stats_merge(&ref, &rr);
                    }
                    for (int k = 0; k < 3; k++) {
                        fl_cast_stats got;
                        memset(a, 0x55 ^ k, n);
                        REQUIRE_OK(
                            fl_quantize_f32_cols_path(x, a, rows, cols, fmt, sc, (fl_overflow)pol, &got, paths[k]));
                        CHECK(memcmp(a, want, n) == 0, "%s bytes %zux%zu set=%d f=%d pol=%d", path_name[k], rows, cols,
                              set, f, pol);
                        CHECK(f2u(got.amax) == f2u(ref.amax) && got.nan == ref.nan && got.underflow == ref.underflow &&
                                  got.saturated == ref.saturated,
                              "%s stats %zux%zu set=%d: amax %g/%g nan %lld/%lld unf %lld/%lld sat %lld/%lld",
                              path_name[k], rows, cols, set, got.amax, ref.amax, (long long)got.nan, (long long)ref.nan,
                              (long long)got.underflow, (long long)ref.underflow, (long long)got.saturated,
                              (long long)ref.saturated);
                    }
                }
        }
    CHECK(fl_quantize_f32_cols(x, a, 2, 3, FL_E4M3, NULL, FL_SATURATE, NULL) == FL_EINVAL, "NULL scales accepted");
    CHECK(fl_quantize_f32_cols(x, a, 2, 3, FL_F32, sc, FL_SATURATE, NULL) == FL_EINVAL, "fp32 target accepted");
    REQUIRE_OK(fl_quantize_f32_cols(NULL, NULL, 0, 3, FL_E4M3, NULL, FL_SATURATE, NULL));
    free(x); free(sc); free(want); free(a);
}

/* Sizes around the one-thread limit (32K) and FL_QBLOCK (256K), where the threads now share a tensor that
 * used to be one block: bytes, amax and every counter the same with 1 and 2 threads, bytes as the scalar cast. */
TEST(format_quantize_split_sizes_agree_across_threads) {
    const size_t sizes[] = { 32768, 32769, 100003, 262144, 262145, 524287 };
    const size_t nmax = 524287;
    float *x = malloc(nmax * sizeof *x);
    uint8_t *q1 = malloc(nmax), *q2 = malloc(nmax), *r = malloc(nmax);
    REQUIRE(x && q1 && q2 && r, "alloc");
    fill_special(x, nmax);
    const int threads0 = omp_get_max_threads();
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const size_t n = sizes[i];
        for (int f = 0; f < 2; f++) {
            const fl_dtype fmt = f ? FL_E5M2 : FL_E4M3;
            fl_cast_stats s1, s2;
            memset(q1, 0xAA, n); memset(q2, 0x55, n);
            omp_set_num_threads(1);
            REQUIRE_OK(fl_quantize_f32(x, q1, n, fmt, 3.0f, FL_SATURATE, &s1));
            const float a1 = fl_amax_f32(x, n);
            omp_set_num_threads(2);
            REQUIRE_OK(fl_quantize_f32(x, q2, n, fmt, 3.0f, FL_SATURATE, &s2));
            const float a2 = fl_amax_f32(x, n);
            for (size_t j = 0; j < n; j++) r[j] = f ? fl_f32_to_e5m2(x[j] * 3.0f, FL_SATURATE) : fl_f32_to_e4m3(x[j] * 3.0f, FL_SATURATE);
            CHECK(memcmp(q1, r, n) == 0 && memcmp(q2, r, n) == 0, "bytes n=%zu f=%d", n, f);
            CHECK(f2u(s1.amax) == f2u(s2.amax) && f2u(a1) == f2u(s1.amax) && f2u(a2) == f2u(s1.amax), "amax n=%zu", n);
            CHECK(s1.underflow == s2.underflow && s1.saturated == s2.saturated && s1.nan == s2.nan,
                  "counters n=%zu f=%d: %lld/%lld %lld/%lld %lld/%lld", n, f, (long long)s1.underflow, (long long)s2.underflow,
                  (long long)s1.saturated, (long long)s2.saturated, (long long)s1.nan, (long long)s2.nan);
        }
    }
    omp_set_num_threads(threads0);
    free(x); free(q1); free(q2); free(r);
}

TEST(format_quantize_large_parallel_and_errors) {
    size_t n = (1u << 20) + 12345;
    float *x = malloc(n * sizeof *x);
    uint8_t *q = malloc(n), *r = malloc(n);
    float *d = malloc(n * sizeof *d);
    REQUIRE(x && q && r && d, "alloc");
    fill_special(x, n);
    fl_cast_stats st, one = {0};
    REQUIRE_OK(fl_quantize_f32(x, q, n, FL_E4M3, 2.0f, FL_SATURATE, &st));
    for (size_t i = 0; i < n; i++) {
        r[i] = fl_f32_to_e4m3(x[i] * 2.0f, FL_SATURATE);
        float ax = fabsf(x[i]);
        if (ax > one.amax) one.amax = ax;
        if (isnan(x[i])) one.nan++;
    }
    CHECK(memcmp(q, r, n) == 0, "parallel bytes");
    CHECK(st.amax == one.amax && st.nan == one.nan, "parallel stats");
    fl_dequantize_f32(q, d, n, FL_E4M3, 0.5f);
    int bad = 0;
    for (size_t i = 0; i < n && bad < 3; i++) {
        double want = ref_fp8_value(q[i], FL_E4M3) * 0.5;
        if (!(isnan(want) ? isnan(d[i]) : (double)d[i] == want)) { bad++; CHECK(0, "dequant %zu", i); }
    }
    CHECK_OK(fl_quantize_f32(x, q, 5, FL_E5M2, 1.0f, FL_IEEE, NULL));
    CHECK(fl_quantize_f32(x, q, 5, FL_BF16, 1.0f, FL_IEEE, NULL) == FL_EINVAL &&
          strstr(fl_last_error(), "bf16"), "non-fp8 rejected: %s", fl_last_error());
    fl_interrupt_set();
    CHECK(fl_quantize_f32(x, q, n, FL_E4M3, 1.0f, FL_IEEE, &st) == FL_EINTR, "interrupt");
    CHECK(!fl_interrupt_pending() && strstr(fl_last_error(), "interrupted"), "flag cleared");
    free(x); free(q); free(r); free(d);
}

TEST(format_scale_from_amax) {
    CHECK(fl_scale_from_amax(448.0f, FL_E4M3, 0, 7.0f) == 1.0f, "unit");
    CHECK(fl_scale_from_amax(2.0f, FL_E4M3, 1, 7.0f) == 112.0f, "margin");
    CHECK(fl_scale_from_amax(57344.0f, FL_E5M2, 0, 7.0f) == 1.0f, "e5m2");
    CHECK(fl_scale_from_amax(0.0f, FL_E4M3, 0, 7.0f) == 7.0f && fl_scale_from_amax(-1.0f, FL_E4M3, 0, 7.0f) == 7.0f, "fallback");
    CHECK(fl_scale_from_amax(NAN, FL_E4M3, 0, 7.0f) == 7.0f && fl_scale_from_amax(INFINITY, FL_E4M3, 0, 7.0f) == 7.0f, "non-finite");
    CHECK(fl_scale_from_amax(1e-45f, FL_E4M3, 0, 7.0f) == FLT_MAX, "inf -> FLT_MAX");
    /* a quotient below fp32's smallest normal (0 or a subnormal, whose reciprocal is inf) becomes 2^-126 */
    CHECK(fl_scale_from_amax(3e38f, FL_E4M3, 40, 7.0f) == FLT_MIN, "0 -> 2^-126");
    CHECK(fl_scale_from_amax(3e38f, FL_E4M3, 20, 7.0f) == FLT_MIN, "subnormal -> 2^-126");
}
