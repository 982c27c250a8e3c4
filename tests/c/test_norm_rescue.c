/* test_norm_rescue.c — fl_norm_rescue and fl_norm_gate (core/ops.h, stop 99): bf16 and fp16 norms and sums (the test
 * against the smallest normal number of the sums' dtype, the rescued slice summed in float64 and rounded once), p = 3
 * through the gate (a gradient with no NaN where |x|^2 overflows), p = 0.5 where the plain backward overflows though
 * the gradient does not (stop 100), and the gate's refusals. The reference is float64. */
#include "runner.h"
#include "ops.h"
#include "autograd.h"
#include <math.h>
#include <string.h>

/* element i of t in row-major order (any number of dims) */
static double at(const fl_tensor *t, int64_t i) {
    int64_t idx[FL_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) { idx[d] = i % t->shape[d]; i /= t->shape[d]; }
    double v = 0;
    fl_tensor_get(t, idx, &v);
    return v;
}

/* The p-norm of n floats in float64, scaled by their largest |x| */
static double norm64(const float *v, int n, double p) {
    double m = 0, s = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(v[i]));
    if (m == 0) return 0;
    for (int i = 0; i < n; i++) s += pow(fabs(v[i]) / m, p);
    return m * pow(s, 1 / p);
}

/* r, s of x [2, 3] along dim 1 by the plain formula in x's dtype: s = Σ|x|^p, r = s^(1/p) */
static void plain(const fl_tensor *x, double p, fl_tensor **r, fl_tensor **s) {
    fl_tensor *a = NULL, *ap = NULL;
    fl_unary(&a, FL_OP_ABS, x);
    fl_binary_scalar(&ap, FL_OP_POW, a, p, false);
    fl_reduce(s, FL_OP_SUM, ap, 1, false);
    fl_binary_scalar(r, FL_OP_POW, *s, 1 / p, false);
    fl_tensor_release(a); fl_tensor_release(ap);
}

TEST(norm_rescue_half_sums_rescued_in_float64) {
    const int64_t shape[2] = { 2, 3 };
    /* bf16: Σx² of row 0 overflows (inf), row 1 is in range. fp16: row 0's Σx² is below 2^-14 (fp16's smallest
     * normal, a subnormal fp16 sum), row 1's Σx² passes 65504 */
    const float vb[6] = { 1e20f, -2e20f, 3e20f, 0.5f, -1.5f, 2.0f };
    const float vh[6] = { 1e-4f, -2e-4f, 3e-4f, 300.0f, -200.0f, 250.0f };
    for (int k = 0; k < 2; k++) {
        fl_dtype dt = k == 0 ? FL_BF16 : FL_F16;
        fl_tensor *x = NULL, *r = NULL, *s = NULL, *out = NULL, *x32 = NULL;
        REQUIRE_OK(fl_tensor_from_f32(&x, k == 0 ? vb : vh, 2, shape, dt));
        plain(x, 2, &r, &s);
        REQUIRE(r && s && r->dtype == dt, "plain formula");
        REQUIRE_OK(fl_norm_rescue(&out, r, s, x, 2u, 2, NULL));
        CHECK(out->dtype == dt, "dtype %d", (int)out->dtype);
        float xv[6];
        REQUIRE_OK(fl_to(&x32, x, FL_F32));
        REQUIRE_OK(fl_tensor_read_f32(x32, xv));
        for (int row = 0; row < 2; row++) {
            bool rescued = k == 0 ? row == 0 : true;
            /* the reference rounded as the core rounds: float64, then fp32, then the dtype */
            fl_tensor *ref = NULL;
            float want32 = (float)norm64(xv + 3 * row, 3, 2);
            const int64_t one = 1;
            REQUIRE_OK(fl_tensor_from_f32(&ref, &want32, 1, &one, dt));
            if (rescued) CHECK(at(out, row) == at(ref, 0), "%s row %d: %.9g, want %.9g", k ? "fp16" : "bf16", row,
                               at(out, row), at(ref, 0));
            else CHECK(at(out, row) == at(r, row), "bf16 row %d keeps r: %.9g vs %.9g", row, at(out, row), at(r, row));
            fl_tensor_release(ref);
        }
        fl_tensor *ts[] = { x, r, s, out, x32 };
        for (int i = 0; i < 5; i++) fl_tensor_release(ts[i]);
    }
}

TEST(norm_rescue_p3_through_the_gate_has_no_nan_gradient) {
    const int64_t shape[2] = { 2, 3 };
    const float v[6] = { 1e20f, -2e20f, 3e20f, 0.5f, -1.5f, 2.0f };
    for (int gated = 0; gated < 2; gated++) {
        fl_tensor *x = NULL, *xg = NULL, *r = NULL, *s = NULL, *out = NULL, *tot = NULL;
        REQUIRE_OK(fl_tensor_from_f32(&x, v, 2, shape, FL_F32));
        fl_tensor_set_requires_grad(x, true);
        if (gated) REQUIRE_OK(fl_norm_gate(&xg, x, 2u));
        plain(gated ? xg : x, 3, &r, &s);
        REQUIRE_OK(fl_norm_rescue(&out, r, s, x, 2u, 3, gated ? xg : NULL));
        REQUIRE_OK(fl_reduce(&tot, FL_OP_SUM, out, FL_ALL_DIMS, false));
        REQUIRE_OK(fl_backward(tot, NULL, false));
        REQUIRE(x->grad, "no gradient");
        double N = norm64(v, 3, 3);
        CHECK(at(out, 0) == (double)(float)N, "row 0: %.9g, want %.9g", at(out, 0), N);
        bool nan = false;
        for (int i = 0; i < 3; i++) nan |= isnan(at(x->grad, i));
        if (!gated) {
            CHECK(nan, "without the gate the plain backward is NaN in the rescued row (0·inf): the test's premise");
        } else {
            for (int i = 0; i < 3; i++) {   /* ∂N/∂x = sign(x)·(|x| / N)^2, rounded once */
                double want = copysign(pow(fabs((double)v[i]) / N, 2), v[i]);
                CHECK(at(x->grad, i) == (double)(float)want, "grad %d: %.9g, want %.9g", i, at(x->grad, i), want);
            }
            for (int i = 3; i < 6; i++) CHECK(isfinite(at(x->grad, i)), "row 1's gradient %d", i);
        }
        fl_tensor *ts[] = { x, xg, r, s, out, tot };
        for (int i = 0; i < 6; i++) fl_tensor_release(ts[i]);
    }
}

/* p = 0.5 of [3e38, 1e-38]: Σ|x|^p and r are in range, but the plain backward reaches (1/p)·(r / |x|)^(1-p) = 3.46e38
 * at x = 1e-38 before its last factor p (inf in fp32) where the gradient is 1.73e38: the slice is rescued (stop 100),
 * its gradient float64's. The row [0.5, 2] is not: it keeps r's bits and the plain gradient. */
TEST(norm_rescue_steep_fractional_p_gradient_is_float64s) {
    const int64_t shape[2] = { 2, 2 };
    const float v[4] = { 3e38f, 1e-38f, 0.5f, 2.0f };
    fl_tensor *x = NULL, *xg = NULL, *r = NULL, *s = NULL, *out = NULL, *tot = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&x, v, 2, shape, FL_F32));
    fl_tensor_set_requires_grad(x, true);
    REQUIRE_OK(fl_norm_gate(&xg, x, 2u));
    plain(xg, 0.5, &r, &s);
    REQUIRE_OK(fl_norm_rescue(&out, r, s, x, 2u, 0.5, xg));
    REQUIRE_OK(fl_reduce(&tot, FL_OP_SUM, out, FL_ALL_DIMS, false));
    REQUIRE_OK(fl_backward(tot, NULL, false));
    REQUIRE(x->grad, "no gradient");
    double N = norm64(v, 2, 0.5);
    CHECK(at(out, 0) == (double)(float)N, "row 0: %.9g, want %.9g", at(out, 0), N);
    CHECK(at(out, 1) == at(r, 1), "row 1 keeps r: %.9g vs %.9g", at(out, 1), at(r, 1));
    for (int i = 0; i < 2; i++) {   /* ∂N/∂x = sign(x)·(|x| / N)^(p-1), rounded once */
        double want = copysign(pow(fabs((double)v[i]) / N, -0.5), v[i]);
        CHECK(at(x->grad, i) == (double)(float)want, "grad %d: %.9g, want %.9g", i, at(x->grad, i), want);
    }
    double N1 = norm64(v + 2, 2, 0.5);
    for (int i = 2; i < 4; i++) {
        double want = pow(fabs((double)v[i]) / N1, -0.5);
        CHECK(fabs(at(x->grad, i) - want) <= 1e-6 * want, "grad %d: %.9g, want %.9g", i, at(x->grad, i), want);
    }
    fl_tensor *ts[] = { x, xg, r, s, out, tot };
    for (int i = 0; i < 6; i++) fl_tensor_release(ts[i]);
}

TEST(norm_rescue_gate_refusals) {
    const int64_t shape[2] = { 2, 3 };
    const float v[6] = { 1, 2, 3, 4, 5, 6 };
    fl_tensor *x = NULL, *y = NULL, *xg = NULL, *g1 = NULL, *r = NULL, *s = NULL, *out = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&x, v, 2, shape, FL_F32));
    REQUIRE_OK(fl_tensor_from_f32(&y, v, 2, shape, FL_F32));
    fl_tensor_set_requires_grad(x, true);
    fl_tensor_set_requires_grad(y, true);
    CHECK(fl_norm_gate(&xg, x, 4u) != FL_OK && strstr(fl_last_error(), "mask"), "mask past x's dims: %s",
          fl_last_error());
    REQUIRE_OK(fl_norm_gate(&xg, x, 2u));
    REQUIRE_OK(fl_norm_gate(&g1, x, 1u));
    plain(xg, 3, &r, &s);
    CHECK(fl_norm_rescue(&out, r, s, x, 2u, 3, g1) != FL_OK && strstr(fl_last_error(), "gate"), "another mask's");
    CHECK(fl_norm_rescue(&out, r, s, x, 2u, 3, y) != FL_OK && strstr(fl_last_error(), "gate"), "not a gate");
    CHECK_OK(fl_norm_rescue(&out, r, s, x, 2u, 3, xg));
    fl_tensor *ts[] = { x, y, xg, g1, r, s, out };
    for (int i = 0; i < 7; i++) fl_tensor_release(ts[i]);
}
