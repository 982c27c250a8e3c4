/* test_vmath.c — core/cpu/cpu_vmath.h's fp32 functions against double references, in ulps of the correctly
 * rounded result (derivatives: of the sum of their terms' magnitudes, since they cross zero), over a sample of
 * every float's bit pattern (every float with FL_TEST_VMATH_ALL=1: 12 minutes on a loaded 2-core host; the worst
 * errors it found are the bars below and docs/performance.md's), and the kernels that run them (AVX2 and AVX-512
 * copies, threads, spans)
 * against the scalar functions bit for bit. */
#include "runner.h"
#include "cpu/cpu_nn.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_nn_internal.h"
#include "cpu/cpu_vmath.h"
#include "ops.h"
#include "tensor.h"
#include <stdlib.h>
#include <string.h>

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* The distance of y from the double r in units of the last place of the float nearest `scale`. A result below
 * 2^-120 is measured in units of 2^-143, 2^-120's last place, instead (tiny = true): the subnormal exponentials
 * under it, and the products that carry their rounding (x·e^x of SiLU at x ≈ −104, v·Φ(v) of GELU below v ≈ −13), are exact in absolute terms
 * only, which is all a value of 1e-36 needs. */
static double ulps(float y, double r, double scale, bool *tiny) {
    *tiny = false;
    if (isnan(r)) return isnan(y) ? 0 : INFINITY;
    if (isinf(r)) return (double)y == r ? 0 : INFINITY;
    double s = fabs(scale);
    if (s < 0x1p-120) { *tiny = true; return fabs((double)y - r) / 0x1p-143; }
    int e;
    frexp(s, &e);                                    /* s in [2^(e-1), 2^e) */
    return fabs((double)y - r) / ldexp(1.0, (e - 1) - 23);
}

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_cdf(double v) { return 0.5 * erfc(-v / sqrt(2.0)); }
static double ref_pdf(double v) { return exp(-0.5 * v * v) / sqrt(2.0 * M_PI); }

typedef struct { double worst, tiny; float at, tiny_at; } worst_t;
static void note_(worst_t *w, double e, bool tiny, float x) {
    if (!tiny && !(e <= w->worst)) { w->worst = e; w->at = x; }
    if (tiny && !(e <= w->tiny)) { w->tiny = e; w->tiny_at = x; }
}
#define note(w, call, x) do { bool tiny_; double e_ = call; note_(w, e_, tiny_, x); } while (0)

enum { SIG, TANH, SILU, SILU_D, GELU, GELU_D, EXP, LOG, NF };
static const char *const NAMES[NF] = { "sigmoid", "tanh", "silu", "silu'", "gelu", "gelu'", "exp", "log" };
/* the worst measured over every float (FL_TEST_VMATH_ALL=1, 2026-12-06), rounded up: ulps of results from 2^-120,
 * and units of 2^-143 (2^-120's last place) below */
static const double BARS[NF] = { 2.5, 1.5, 3.5, 4.5, 7.5, 4.5, 0.9, 0.83 }, TINY_BARS[NF] = { 1, 1, 2, 2, 3, 2, 1, 1 };

static void check_float(worst_t *w, float x) {
    const double v = x;
    float g;
    note(&w[SIG], ulps(fl_vm_sigmoid(x), ref_sigmoid(v), ref_sigmoid(v), &tiny_), x);
    note(&w[TANH], ulps(fl_vm_tanh(x), tanh(v), tanh(v), &tiny_), x);
    const double ex = isinf((float)exp(v)) ? INFINITY : exp(v);   /* past FLT_MAX's rounding boundary: inf */
    note(&w[EXP], ulps(fl_vm_exp(x), ex, ex, &tiny_), x);
    note(&w[LOG], ulps(fl_vm_log(x), log(v), log(v), &tiny_), x);
    if (fabs(v) < 3e38) {   /* x·σ(x) and GELU overflow nowhere below; the references' products would at inf */
        const double s = ref_sigmoid(v);
        note(&w[SILU], ulps(fl_vm_silu(x), v * s, v * s, &tiny_), x);
        note(&w[SILU_D], ulps(fl_vm_silu_grad(x), s * (1 + v * (1 - s)), s * (1 + fabs(v) * (1 - s)), &tiny_), x);
        const double c = ref_cdf(v), p = ref_pdf(v);
        const float cdf = fl_vm_normal_cdf(x, &g);
        note(&w[GELU], ulps(x * cdf, v * c, v * c, &tiny_), x);
        note(&w[GELU_D], ulps(fmaf(x, 0.39894228040143268f * g, cdf), c + v * p, c + fabs(v) * p, &tiny_), x);
    }
}

TEST(vmath_against_double) {
    worst_t w[NF];
    for (int f = 0; f < NF; f++) w[f] = (worst_t){ 0, 0, 0, 0 };
    const char *all = getenv("FL_TEST_VMATH_ALL");
    const uint32_t step = all && *all == '1' ? 1 : 4093;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += step) check_float(w, f_of((uint32_t)u));
    /* densely where the forms switch (Φ's erf/erfc at |v| = 0.5·√2, the exponentials' flushes) and near 0 */
    static const float centres[] = { 0.70710678f, -0.70710678f, 0.0f, -87.0f / 2, -14.0f, 1.0f, -1.0f, 9.0f, -9.0f };
    for (size_t c = 0; c < sizeof centres / sizeof centres[0]; c++) {
        uint32_t u0;
        memcpy(&u0, &centres[c], 4);
        for (int64_t d = -20000; d <= 20000; d++) check_float(w, f_of((uint32_t)((int64_t)u0 + d)));
    }
    for (int f = 0; f < NF; f++) {
        if (all)
            fprintf(stderr, "  %s: worst %.2f ulp at %.9g; below 2^-120: %.2f·2^-143 at %.9g\n", NAMES[f], w[f].worst,
                    (double)w[f].at, w[f].tiny, (double)w[f].tiny_at);
        CHECK(w[f].worst <= BARS[f], "%s: %.2f ulp at %.9g (bar %.1f)", NAMES[f], w[f].worst, (double)w[f].at, BARS[f]);
        CHECK(w[f].tiny <= TINY_BARS[f], "%s: %.2f·2^-143 at %.9g (bar %.1f)", NAMES[f], w[f].tiny, (double)w[f].tiny_at,
              TINY_BARS[f]);
    }
}

TEST(vmath_specials) {
    float g;
    CHECK(fl_vm_exp(-INFINITY) == 0.0f && fl_vm_exp(INFINITY) == INFINITY && isnan(fl_vm_exp(NAN)) &&
          fl_vm_exp(0.0f) == 1.0f && fl_vm_exp(-0.0f) == 1.0f && fl_vm_exp(1.0f) == 2.71828175f &&
          fl_vm_exp(88.7f) == expf(88.7f) && fl_vm_exp(88.8f) == INFINITY && fl_vm_exp(-103.5f) == 0x1p-149f &&
          fl_vm_exp(-104.5f) == 0.0f, "exp specials: e = %.9g, e^-103.5 = %g", (double)fl_vm_exp(1.0f),
          (double)fl_vm_exp(-103.5f));
    CHECK(fl_vm_log(1.0f) == 0.0f && !signbit(fl_vm_log(1.0f)) && fl_vm_log(0.0f) == -INFINITY &&
          fl_vm_log(-0.0f) == -INFINITY && isnan(fl_vm_log(-1.0f)) && isnan(fl_vm_log(-INFINITY)) &&
          isnan(fl_vm_log(NAN)) && fl_vm_log(INFINITY) == INFINITY && fl_vm_log(0x1p-149f) == logf(0x1p-149f) &&
          fl_vm_log(2.0f) == 0.693147182f, "log specials: log 2 = %.9g, log 2^-149 = %.9g", (double)fl_vm_log(2.0f),
          (double)fl_vm_log(0x1p-149f));
    CHECK(fl_vm_sigmoid(INFINITY) == 1.0f && fl_vm_sigmoid(-INFINITY) == 0.0f && isnan(fl_vm_sigmoid(NAN)) &&
          fl_vm_sigmoid(0.0f) == 0.5f, "sigmoid specials");
    CHECK(fl_vm_tanh(INFINITY) == 1.0f && fl_vm_tanh(-INFINITY) == -1.0f && isnan(fl_vm_tanh(NAN)) &&
          signbit(fl_vm_tanh(-0.0f)) && fl_vm_tanh(1e-30f) == 1e-30f && fl_vm_tanh(-1e-40f) == -1e-40f,
          "tanh specials: %g %g", (double)fl_vm_tanh(1e-30f), (double)fl_vm_tanh(-1e-40f));
    /* silu(-inf) = -inf·0: NaN, as torch's x·sigmoid(x) */
    CHECK(fl_vm_silu(INFINITY) == INFINITY && isnan(fl_vm_silu(-INFINITY)) && isnan(fl_vm_silu(NAN)) &&
          fl_vm_silu(-200.0f) == 0.0f, "silu specials %g", (double)fl_vm_silu(-INFINITY));
    CHECK(fl_vm_normal_cdf(INFINITY, &g) == 1.0f && fl_vm_normal_cdf(-INFINITY, &g) == 0.0f &&
          fl_vm_normal_cdf(0.0f, &g) == 0.5f && g == 1.0f, "Φ specials");
    /* a subnormal sigmoid: e^-100 is 3.7e-44 */
    CHECK(fl_vm_sigmoid(-100.0f) > 0.0f && fl_vm_sigmoid(-104.0f) == 0.0f, "sigmoid(-100) = %g",
          (double)fl_vm_sigmoid(-100.0f));
}

/* The kernels (both ISA copies, threads, ragged spans) give the scalar functions' bits. */
TEST(vmath_kernels_match_scalar) {
    const int64_t n = 3 * FL_CPU_ACT_SPAN + 77;
    float *x = malloc(n * 4), *dy = malloc(n * 4), *y = malloc(n * 4), *d = malloc(n * 4);
    uint64_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 40.0 - 20.0);
        dy[i] = (float)((double)((s >> 7) & 0xFFFF) / 65536.0 - 0.5);
    }
    x[0] = NAN; x[1] = INFINITY; x[2] = -INFINITY; x[3] = -0.0f; x[4] = 1e-42f; x[5] = 0.0f; x[6] = 3e38f;
    for (int64_t i = 7; i < n; i += 3) x[i] = expf(x[i] * 4.0f);   /* positive values from 2e-35 to 5e34, for log */
    for (int wide = 0; wide < 2; wide++) {
        fl_cpu_avx512_allowed = wide;
        fl_cpu_silu_fwd(x, y, n);
        fl_cpu_silu_bwd(x, dy, d, n);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float a = fl_vm_silu(x[i]), b = dy[i] * fl_vm_silu_grad(x[i]);
            bad += memcmp(&a, &y[i], 4) != 0 || memcmp(&b, &d[i], 4) != 0;
        }
        CHECK(bad == 0, "silu kernels (wide %d): %d elements differ from the scalar function", wide, bad);
        fl_cpu_gelu_fwd(x, y, n, 0);
        fl_cpu_gelu_bwd(x, dy, d, n, 0);
        bad = 0;
        for (int64_t i = 0; i < n; i++) {
            float g, c = fl_vm_normal_cdf(x[i], &g);
            float a = x[i] * c, b = dy[i] * fmaf(x[i], 0.39894228040143268f * g, c);
            bad += memcmp(&a, &y[i], 4) != 0 || memcmp(&b, &d[i], 4) != 0;
        }
        CHECK(bad == 0, "exact gelu kernels (wide %d): %d elements differ from the scalar function", wide, bad);
        /* the elementwise tanh, sigmoid, exp and log, on a contiguous tensor and a strided one (the tile path) */
        static const int OPS[4] = { FL_OP_TANH, FL_OP_SIGMOID, FL_OP_EXP, FL_OP_LOG };
        static const char *const OP_NAMES[4] = { "tanh", "sigmoid", "exp", "log" };
        for (int op = 0; op < 4; op++) {
            fl_tensor *t = NULL, *r = NULL, *tt = NULL, *rt = NULL;
            int64_t shape[2] = { n / 77, 77 };
            REQUIRE_OK(fl_tensor_empty(&t, FL_F32, 2, shape, FL_DEV_CPU));
            memcpy(fl_tensor_data(t), x, (size_t)(shape[0] * shape[1]) * 4);
            REQUIRE_OK(fl_unary(&r, OPS[op], t));
            REQUIRE_OK(fl_transpose(&tt, t, 0, 1));
            REQUIRE_OK(fl_unary(&rt, OPS[op], tt));
            const float *ry = fl_tensor_data(r);
            bad = 0;
            for (int64_t i = 0; i < shape[0] * shape[1]; i++) {
                float a = op == 0 ? fl_vm_tanh(x[i]) : op == 1 ? fl_vm_sigmoid(x[i]) : op == 2 ? fl_vm_exp(x[i])
                                                                                      : fl_vm_log(x[i]);
                bad += memcmp(&a, &ry[i], 4) != 0;
            }
            fl_tensor *rc = NULL;
            REQUIRE_OK(fl_contiguous(&rc, rt));   /* [77, rows]: element (j, i) is f(x[i·77 + j]) */
            const float *cy = fl_tensor_data(rc);
            int bad_t = 0;
            for (int64_t i = 0; i < shape[0]; i++)
                for (int64_t j = 0; j < shape[1]; j++)
                    bad_t += memcmp(&cy[j * shape[0] + i], &ry[i * shape[1] + j], 4) != 0;
            CHECK(bad == 0 && bad_t == 0, "%s (wide %d): %d elements differ from the scalar function, %d on the "
                  "transposed input", OP_NAMES[op], wide, bad, bad_t);
            fl_tensor_release(rc);
            fl_tensor_release(t); fl_tensor_release(r); fl_tensor_release(tt); fl_tensor_release(rt);
        }
    }
    fl_cpu_avx512_allowed = true;
    free(x); free(dy); free(y); free(d);
}

/* The elementwise exp and log run blocks of inputs in a plain range without their checks (cpu_elementwise.c,
 * BLOCK_MAP): blocks holding one input outside it each (for log a subnormal, ±0, a negative number, inf, NaN; for
 * exp the ends of the range and just past them, ±inf, NaN, a subnormal result, an overflow), placed first, last and
 * inside a block, beside blocks of plain inputs, give the scalar functions' bits, on both ISA copies. */
TEST(vmath_exp_log_blocks_with_special_inputs) {
    const int64_t n = 9 * 512 + 100;
    float *x = malloc(n * 4), *e = malloc(n * 4);
    uint64_t s = 777;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        e[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 160.0 - 80.0);
        x[i] = expf(e[i]);
    }
    x[512 + 5] = 1e-40f; x[3 * 512 - 1] = -0.0f; x[3 * 512] = -3.0f; x[4 * 512 + 300] = NAN;
    x[5 * 512 + 511] = INFINITY; x[6 * 512 + 7] = 0.0f; x[7 * 512] = 0x1p-126f; x[7 * 512 + 1] = 0x1.fffffep127f;
    x[n - 1] = 1e-45f;
    e[0] = -86.5f; e[1] = 88.0f; e[512 + 5] = -86.50001f; e[2 * 512 + 511] = 88.00001f; e[3 * 512] = NAN;
    e[4 * 512 + 9] = -INFINITY; e[5 * 512 + 2] = INFINITY; e[6 * 512 + 100] = -100.0f; e[7 * 512 + 3] = 89.0f;
    e[n - 1] = -87.2f;
    for (int wide = 0; wide < 2; wide++) {
        fl_cpu_avx512_allowed = wide;
        for (int op = 0; op < 2; op++) {
            const float *in = op == 0 ? e : x;
            fl_tensor *t = NULL, *r = NULL;
            int64_t shape[1] = { n };
            REQUIRE_OK(fl_tensor_empty(&t, FL_F32, 1, shape, FL_DEV_CPU));
            memcpy(fl_tensor_data(t), in, (size_t)n * 4);
            REQUIRE_OK(fl_unary(&r, op == 0 ? FL_OP_EXP : FL_OP_LOG, t));
            const float *ry = fl_tensor_data(r);
            int bad = 0;
            int64_t first = -1;
            for (int64_t i = 0; i < n; i++) {
                const float a = op == 0 ? fl_vm_exp(in[i]) : fl_vm_log(in[i]);
                if (memcmp(&a, &ry[i], 4) != 0) { bad++; if (first < 0) first = i; }
            }
            CHECK(bad == 0, "%s (wide %d): %d elements differ from the scalar function, the first at %lld",
                  op == 0 ? "exp" : "log", wide, bad, (long long)first);
            fl_tensor_release(t); fl_tensor_release(r);
        }
    }
    fl_cpu_avx512_allowed = true;
    free(x); free(e);
}

#ifdef __x86_64__
/* cpu_gelu_erf.c's AVX2 forward (each block's lanes packed by Φ's form, erfc's side run on the packed lanes alone,
 * |v| ≤ 13 by a shorter road) against the scalar v·fl_vm_normal_cdf(v) bit for bit, and against float64's v·Φ(v)
 * within vmath_against_double's GELU bar: every one of the 256 patterns of erf and erfc lanes in a block, with
 * values at the forms' switch (|v| = 0.5·√2), at and past the short road's end (13), past −104/2's flush, ±inf,
 * NaN and subnormals; lengths 0-40 at odd offsets; tiles' ends (1024 elements); and a sample of every float. */
static int gelu_avx2_diff(const float *x, int64_t n, double *worst_ulp) {
    float *y = malloc((size_t)(n + 1) * 4);
    fl_cpu_gelu_erf_fwd_avx2(x, y, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float g;
        const float a = x[i] * fl_vm_normal_cdf(x[i], &g);
        bad += memcmp(&a, &y[i], 4) != 0;
        const double v = x[i];
        if (worst_ulp && fabs(v) < 3e38) {
            bool tiny;
            const double r = v * ref_cdf(v), e = ulps(y[i], r, r, &tiny);
            if (!tiny && e > *worst_ulp) *worst_ulp = e;
        }
    }
    free(y);
    return bad;
}

TEST(gelu_erf_avx2_lane_patterns) {
    static const float FAR[] = { 0.70710683f, -0.70710683f, 0.75f, -1.5f, 3.0f, -7.25f, 12.999999f, -13.0f, 13.000001f,
                                 -13.5f, 14.4f, -14.5f, -20.0f, 25.0f, -1e4f, 3e38f, INFINITY, -INFINITY, NAN };
    static const float NEAR[] = { 0.70710677f, -0.70710677f, 0.0f, -0.0f, 1e-40f, -1e-45f, 0.3f, -0.5f, 1e-20f };
    const int nf = (int)(sizeof FAR / sizeof FAR[0]), nn = (int)(sizeof NEAR / sizeof NEAR[0]);
    const int64_t n = 256 * 8 * 3 + 13;   /* three passes over the masks, so each pattern lands in several tiles */
    float *x = malloc((size_t)n * 4);
    int64_t f = 0, q = 0;
    for (int64_t b = 0; b < 256 * 3; b++)
        for (int l = 0; l < 8; l++) x[b * 8 + l] = ((b % 256) >> l & 1) ? FAR[f++ % nf] : NEAR[q++ % nn];
    for (int64_t i = 256 * 8 * 3; i < n; i++) x[i] = FAR[i % nf];   /* a tail shorter than a block */
    double worst = 0;
    int bad = gelu_avx2_diff(x, n, &worst);
    CHECK(bad == 0, "the 256 lane patterns: %d elements differ from the scalar function", bad);
    CHECK(worst <= BARS[GELU], "the 256 lane patterns: %.2f ulp from float64's v·Φ(v) (bar %.1f)", worst, BARS[GELU]);
    /* short and ragged lengths at odd offsets, and lengths around a tile's end, on normal-like data */
    uint64_t s = 99;
    const int64_t m = 3 * 1024 + 64;
    float *z = malloc((size_t)m * 4);
    for (int64_t i = 0; i < m; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(s >> 11) / 9007199254740992.0;
        z[i] = (float)((u - 0.5) * ((s >> 3 & 7) == 0 ? 40.0 : 4.0));
    }
    int bad_len = 0;
    for (int64_t len = 0; len <= 40; len++)
        for (int64_t off = 0; off < 5; off++) bad_len += gelu_avx2_diff(z + off * 7, len, NULL);
    static const int64_t LENS[] = { 1023, 1024, 1025, 1031, 2047, 2048, 2056, 3 * 1024 + 57 };
    for (size_t k = 0; k < sizeof LENS / sizeof LENS[0]; k++) bad_len += gelu_avx2_diff(z + k % 3, LENS[k], &worst);
    CHECK(bad_len == 0, "ragged lengths and tiles' ends: %d elements differ from the scalar function", bad_len);
    CHECK(worst <= BARS[GELU], "normal-like data: %.2f ulp from float64's v·Φ(v) (bar %.1f)", worst, BARS[GELU]);
    free(x); free(z);
}

TEST(gelu_erf_avx2_every_float_sampled) {
    const int64_t n = (int64_t)(0x100000000ull / 4093) + 1;
    float *x = malloc((size_t)n * 4);
    int64_t k = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4093) x[k++] = f_of((uint32_t)u);
    const int bad = gelu_avx2_diff(x, k, NULL);
    CHECK(bad == 0, "%d of %lld sampled floats differ from the scalar function", bad, (long long)k);
    free(x);
}
#endif
