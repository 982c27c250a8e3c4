/* test_hypot.c — hypot on fp32 (core/hypot1.h, FL_OP_HYPOT, fl_hypot) is correctly rounded: each result checked
 * against the exact x² + y² in binary128 (its two midpoints' squares exact there), over random pairs of every
 * exponent and the pairs where √(x² + y²) computed in double and rounded to fp32 is wrong (x = k²·2^-24 − 1/4 rounded,
 * y = k·2^-12: the exact value within 2^-30 of a midpoint); the specials bit for bit; the op (AVX2 and AVX-512 copies,
 * broadcast, a number operand, bf16) against the scalar function. */
#include "runner.h"
#include "cpu/cpu_internal.h"
#include "hypot1.h"
#include "ops.h"
#include "tensor.h"
#include <float.h>
#include <stdlib.h>
#include <string.h>

static float hf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t hbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* whether g (finite, ≥ 0) is the correctly rounded √(x² + y²): the exact sum of squares between the squares of g's
 * two midpoints (binary128: the squares of 25-bit midpoints exact; x² + y² exact but where one square is below 2^-60
 * of the other, too little to move it past a midpoint), a tie going to the even one */
static bool is_correctly_rounded(float x, float y, float g) {
    const __float128 X = x, Y = y, S = X * X + Y * Y;
    const uint32_t b = hbits(g);
    const __float128 G = g, lo = b ? ((__float128)hf(b - 1) + G) / 2 : 0,
                     hi = b + 1 < 0x7f800000u ? ((__float128)hf(b + 1) + G) / 2 : (__float128)0x1.ffffffp127;
    if (S < lo * lo || S > hi * hi) return false;
    if (S == lo * lo || S == hi * hi) return (b & 1u) == 0;
    return true;
}

static uint64_t lcg(uint64_t *s) { *s = *s * 6364136223846793005ull + 1442695040888963407ull; return *s >> 11; }

TEST(hypot_correctly_rounded) {
    int bad = 0, total = 0, fast_wrong = 0;
    uint64_t s = 7;
    for (int i = 0; i < 400000; i++) {
        /* random exponents over the whole range (finite operands), and pairs of nearby exponents */
        float x = hf((uint32_t)lcg(&s) & 0x7fffffffu), y = hf((uint32_t)lcg(&s) & 0x7fffffffu);
        if (i & 1) {   /* ilogbf of 0, inf or NaN is INT_MIN or INT_MAX: ±3 would overflow (UBSan), so take 0 there */
            const int e = x != 0 && isfinite(x) ? ilogbf(x) : 0;
            y = ldexpf(hf(0x3f800000u | ((uint32_t)lcg(&s) & 0x7fffffu)), e + (int)(lcg(&s) % 7) - 3);
        }
        if (!isfinite(x) || !isfinite(y)) continue;
        const float g = fl_hypot1(x, y);
        total++;
        if (isinf(g) ? (double)hypotl(x, y) < 0x1.ffffffp127 : !is_correctly_rounded(x, y, g))
            if (bad++ < 6) fprintf(stderr, "  hypot(%a, %a) = %a\n", (double)x, (double)y, (double)g);
    }
    /* the hard family: k from √(2^23)·2^12 up, x = round(k²/2^24 − 1/4) < 2^24, y = k/2^12, and the same scaled */
    for (int64_t k = 11863283; k < 11863283 + 200000; k++) {
        const double xd = nearbyint((double)k * (double)k / 16777216.0 - 0.25);
        if (xd >= 16777216.0) break;
        for (int sc = -120; sc <= 100; sc += 110) {
            const float x = ldexpf((float)xd, sc), y = ldexpf((float)k / 4096.0f, sc);
            const float g = fl_hypot1(x, y), naive = (float)sqrt((double)x * x + (double)y * y);
            total++;
            fast_wrong += hbits(naive) != hbits(g);
            if (!is_correctly_rounded(x, y, g) && bad++ < 6)
                fprintf(stderr, "  hypot(%a, %a) = %a\n", (double)x, (double)y, (double)g);
            if (!is_correctly_rounded(y, -x, fl_hypot1(y, -x))) bad++;
        }
    }
    CHECK(bad == 0, "%d of %d results not correctly rounded", bad, total);
    /* the family is there to test something: √ in double rounded to fp32 is wrong on many of these */
    CHECK(fast_wrong > 1000, "only %d of the hard pairs wrong in double", fast_wrong);
}

/* +inf where either is infinite, the other NaN included; NaN otherwise where either is NaN; zeros, subnormals, the
 * overflow boundary */
TEST(hypot_specials) {
    const struct { float x, y, want; } c[] = {
        { INFINITY, NAN, INFINITY }, { NAN, -INFINITY, INFINITY }, { -INFINITY, 1.0f, INFINITY },
        { 0.0f, 0.0f, 0.0f }, { -0.0f, -0.0f, 0.0f }, { -0.0f, 3.0f, 3.0f }, { -3.0f, -4.0f, 5.0f },
        { 0x1p-149f, 0x1p-149f, 0x1p-149f }, { 0x3p-149f, 0x4p-149f, 0x5p-149f }, { 0x1p-149f, 0.0f, 0x1p-149f },
        { FLT_MAX, FLT_MAX, INFINITY }, { FLT_MAX, 1.0f, FLT_MAX }, { 0x1p127f, 0x1p127f, 0x1.6a09e6p127f },
        { 3e-40f, 4e-40f, 5e-40f }, { 1e-45f, 1e20f, 1e20f },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const float g = fl_hypot1(c[i].x, c[i].y);
        CHECK(hbits(g) == hbits(c[i].want), "hypot(%a, %a) = %a, want %a", (double)c[i].x, (double)c[i].y, (double)g,
              (double)c[i].want);
    }
    CHECK(isnan(fl_hypot1(NAN, 1.0f)) && isnan(fl_hypot1(0.0f, -NAN)), "NaN in, NaN out");
}

/* the op: contiguous, broadcast [R, 1] against [R, C], a number, both ISA copies, bf16 (the fp32 result rounded) */
TEST(hypot_op_matches_scalar) {
    const int64_t R = 61, C = 257, n = R * C;
    fl_tensor *a = NULL, *b = NULL, *col = NULL, *ab = NULL;
    int64_t shape[2] = { R, C }, cshape[2] = { R, 1 };
    REQUIRE_OK(fl_tensor_empty(&a, FL_F32, 2, shape, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&b, FL_F32, 2, shape, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&col, FL_F32, 2, cshape, FL_DEV_CPU));
    float *x = fl_tensor_data(a), *y = fl_tensor_data(b), *cv = fl_tensor_data(col);
    uint64_t s = 3;
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = 11863283 + i;   /* every third a hard pair, the rest random */
        x[i] = i % 3 == 0 ? (float)nearbyint((double)k * (double)k / 16777216.0 - 0.25) : hf((uint32_t)lcg(&s));
        y[i] = i % 3 == 0 ? (float)k / 4096.0f : (float)((double)lcg(&s) / 9007199254740992.0 * 8.0 - 4.0);
    }
    for (int64_t i = 0; i < R; i++) cv[i] = (float)i * 0.37f - 7.0f;
    x[1] = NAN; y[2] = INFINITY; x[4] = 0x1p-149f; y[4] = 0x1p-148f;
    REQUIRE_OK(fl_tensor_to(&ab, a, FL_BF16));
    const float sc = -2.75f;
    for (int wide = 0; wide < 2; wide++) {
        fl_cpu_avx512_allowed = wide;
        fl_tensor *r = NULL, *rc = NULL, *rs = NULL, *rb = NULL, *rbf = NULL;
        REQUIRE_OK(fl_binary(&r, FL_OP_HYPOT, a, b));
        REQUIRE_OK(fl_hypot(&rc, col, a));
        REQUIRE_OK(fl_binary_scalar(&rs, FL_OP_HYPOT, a, sc, false));
        REQUIRE_OK(fl_hypot(&rb, ab, ab));
        REQUIRE(rb->dtype == FL_BF16, "bf16 operands give bf16");
        REQUIRE_OK(fl_tensor_to(&rbf, rb, FL_F32));
        const float *rv = fl_tensor_data(r), *cvv = fl_tensor_data(rc), *sv = fl_tensor_data(rs);
        const float *bv = fl_tensor_data(rbf);
        const float *xb = NULL;
        fl_tensor *abf = NULL;
        REQUIRE_OK(fl_tensor_to(&abf, ab, FL_F32));
        xb = fl_tensor_data(abf);
        int bad = 0, bad_c = 0, bad_s = 0, bad_b = 0;
        for (int64_t i = 0; i < n; i++) {
            bad += hbits(rv[i]) != hbits(fl_hypot1(x[i], y[i])) && !(isnan(rv[i]) && isnan(x[i]));
            bad_c += hbits(cvv[i]) != hbits(fl_hypot1(cv[i / C], x[i])) && !(isnan(cvv[i]) && isnan(x[i]));
            bad_s += hbits(sv[i]) != hbits(fl_hypot1(x[i], sc)) && !(isnan(sv[i]) && isnan(x[i]));
            const float wb = fl_bf16_to_f32(fl_f32_to_bf16(fl_hypot1(xb[i], xb[i])));
            bad_b += hbits(bv[i]) != hbits(wb) && !(isnan(bv[i]) && isnan(wb));
        }
        CHECK(bad == 0 && bad_c == 0 && bad_s == 0 && bad_b == 0,
              "wide %d: %d elements, %d broadcast, %d with a number, %d bf16 differ from fl_hypot1", wide, bad, bad_c,
              bad_s, bad_b);
        fl_tensor *all[] = { r, rc, rs, rb, rbf, abf };
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) fl_tensor_release(all[j]);
    }
    fl_cpu_avx512_allowed = true;
    fl_tensor *all[] = { a, b, col, ab };
    for (size_t j = 0; j < sizeof all / sizeof *all; j++) fl_tensor_release(all[j]);
}
