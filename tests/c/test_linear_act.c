/* test_linear_act.c — fl_linear_relu_bf16 (a bf16-autocast feed-forward block's first linear, its ReLU and the
 * rounding to bf16 in one pass over the GEMM's sums, core/cpu/cpu_linear_act.c) against the composite it replaces,
 * fl_linear, fl_relu and the cast, bit for bit: row counts on and off the blocks' size, K past one block of the GEMM,
 * bias or none, fp32 and bf16 inputs, a strided input, and sums that round to bf16 subnormals, zeros, infinities and
 * NaNs; the AVX512_BF16 epilogue and the portable one. */
#include "runner.h"
#include "nn.h"
#include "autograd.h"
#include "ops.h"
#include "ops_raw.h"
#include "cpu/cpu_internal.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t la_state = 0x9E3779B97F4A7C15ull;
static float la_rand(void) {   /* xorshift64, uniform in [-1, 1) */
    la_state ^= la_state << 13; la_state ^= la_state >> 7; la_state ^= la_state << 17;
    return (float)((double)(la_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* relu(linear(x, w, b)) rounded to bf16 by the composite, under the caller's autocast */
static fl_status composite(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b) {
    fl_tensor *y = NULL, *r = NULL;
    fl_status st = fl_linear(&y, x, w, b);
    if (st == FL_OK) st = fl_relu(&r, y);
    if (st == FL_OK) st = fl_tensor_to(out, r, FL_BF16);
    fl_tensor_release(y);
    fl_tensor_release(r);
    return st;
}

/* x [M, K] (fp32, or rounded to bf16 when `low`; `strided`: a transposed view of [K, M]), w [N, K], b [N] or none.
 * Row 0 of x is zero, so its outputs are relu(b) (b's subnormals, -0, NaN, infinities as they are); row 1 huge, so
 * its sums overflow to infinities. *ran: whether the device's one pass ran (the tensor-level results compared). */
static void check_case(int *fl__failed, int64_t M, int64_t N, int64_t K, bool bias, bool low, bool strided, bool *ran) {
    const int64_t xs[2] = { strided ? K : M, strided ? M : K }, ws[2] = { N, K }, bs[1] = { N };
    float *xv = malloc(sizeof(float) * (size_t)(M * K)), *wv = malloc(sizeof(float) * (size_t)(N * K));
    float *bv = malloc(sizeof(float) * (size_t)N);
    for (int64_t i = 0; i < M * K; i++) xv[i] = la_rand();
    for (int64_t i = 0; i < N * K; i++) wv[i] = la_rand() / sqrtf((float)K);
    for (int64_t j = 0; j < N; j++) bv[j] = la_rand();
    const float special[] = { 1e-40f, -1e-40f, 3e-39f, 1.1754942e-38f, -0.0f, 0.0f, NAN, -NAN, INFINITY, -INFINITY,
                              1e-45f, 3.3895314e38f, -3.4e38f };
    for (int64_t j = 0; j < N && j < (int64_t)(sizeof special / sizeof *special); j++) bv[j] = special[j];
    for (int64_t k = 0; k < K; k++) {   /* (the view's element [i, k] is xv[k·M + i] when strided) */
        xv[strided ? k * M : k] = 0.0f;
        if (M > 1) xv[strided ? k * M + 1 : K + k] = 3e38f;
    }
    fl_tensor *x = NULL, *xt = NULL, *w = NULL, *b = NULL, *f = NULL, *c = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&x, xv, 2, xs, low ? FL_BF16 : FL_F32));
    REQUIRE_OK(fl_tensor_from_f32(&w, wv, 2, ws, FL_F32));
    REQUIRE_OK(fl_tensor_from_f32(&b, bv, 1, bs, FL_F32));
    if (strided) REQUIRE_OK(fl_tensor_transpose(&xt, x, 0, 1));
    const fl_tensor *xin = strided ? xt : x;
    const fl_dtype prev = fl_set_autocast_dtype(FL_BF16);
    CHECK_OK(fl_linear_relu_bf16(&f, xin, w, bias ? b : NULL));
    CHECK_OK(composite(&c, xin, w, bias ? b : NULL));
    fl_set_autocast_dtype(prev);
    if (f && c) {
        CHECK(f->dtype == FL_BF16 && f->ndim == 2 && f->shape[0] == M && f->shape[1] == N, "result is not bf16 [M, N]");
        const uint16_t *fp = fl_tensor_data(f), *cp = fl_tensor_data(c);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < M * N; i++)
            if (fp[i] != cp[i]) { bad++; if (first < 0) first = i; }
        CHECK(bad == 0, "[%lld, %lld] x [%lld, %lld]ᵀ bias %d %s%s: %lld of %lld differ from the composite, first at %lld "
              "(0x%04x, composite 0x%04x)", (long long)M, (long long)K, (long long)N, (long long)K, bias, low ? "bf16" : "fp32",
              strided ? " strided" : "", (long long)bad, (long long)(M * N), (long long)first, first >= 0 ? fp[first] : 0,
              first >= 0 ? cp[first] : 0);
    }
    /* whether the one pass runs here: the device entry on the same operands */
    bool done = false;
    fl_tensor *xb = NULL, *wb = NULL, *y = NULL;
    const int64_t ys[2] = { M, N };
    REQUIRE_OK(fl_tensor_to(&xb, xin, FL_BF16));
    REQUIRE_OK(fl_tensor_to(&wb, w, FL_BF16));
    REQUIRE_OK(fl_tensor_empty(&y, FL_BF16, 2, ys, FL_DEV_CPU));
    CHECK_OK(fl_cpu_dev_linear_relu_bf16(fl_tensor_data(xb), fl_tensor_data(wb), bias ? bv : NULL, fl_tensor_data(y), M, N,
                                         K, &done));
    if (done && c) CHECK(!memcmp(fl_tensor_data(y), fl_tensor_data(c), sizeof(uint16_t) * (size_t)(M * N)),
                         "the device entry differs from the composite");
    fl_tensor_release(xb); fl_tensor_release(wb); fl_tensor_release(y);
    fl_tensor_release(x); fl_tensor_release(xt); fl_tensor_release(w); fl_tensor_release(b);
    fl_tensor_release(f); fl_tensor_release(c);
    free(xv); free(wv); free(bv);
    *ran = done;
}

TEST(linear_relu_bf16_same_bits_as_composite) {
    /* M past 128 rows (N 2048) with a tail, one row; K one tile, past 64, a long one; N odd; and [520, 2048] x
     * [2048, 1024]ᵀ, where 512-row blocks gave other sums than the composite's one call on AMX (stop 93's review) */
    const int64_t shapes[][3] = { { 300, 2048, 256 }, { 37, 40, 64 }, { 1, 33, 96 }, { 130, 96, 2080 }, { 16, 16, 32 },
                                  { 520, 1024, 2048 } };
    const bool fused_expected = fl_cpu_avx512() && !fl_cpu_fma_mm_first();
    for (int wide = 1; wide >= 0; wide--) {
        fl_cpu_linear_act_wide_allowed = wide;
        for (int s = 0; s < 6; s++)
            for (int v = 0; v < 4; v++) {
                bool ran = false;
                check_case(fl__failed, shapes[s][0], shapes[s][1], shapes[s][2], v != 1, v == 2, v == 3, &ran);
                CHECK(ran || !fused_expected, "[%lld, %lld, %lld]: the one pass did not run on a CPU whose bf16 GEMMs "
                      "are oneDNN's", (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2]);
            }
    }
    fl_cpu_linear_act_wide_allowed = true;
}

TEST(linear_relu_bf16_refuses_grad_and_other_autocast) {
    const int64_t xs[2] = { 4, 8 }, ws[2] = { 3, 8 };
    fl_tensor *x = NULL, *w = NULL, *y = NULL;
    REQUIRE_OK(fl_tensor_empty(&x, FL_F32, 2, xs, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&w, FL_F32, 2, ws, FL_DEV_CPU));
    CHECK(fl_linear_relu_bf16(&y, x, w, NULL) == FL_EINVAL && !y, "outside autocast: not refused");
    const fl_dtype prev = fl_set_autocast_dtype(FL_BF16);
    w->requires_grad = true;
    CHECK(fl_linear_relu_bf16(&y, x, w, NULL) == FL_EINVAL && !y, "a weight requiring grad: not refused");
    w->requires_grad = false;
    const int64_t bad[2] = { 3, 7 };
    fl_tensor *w2 = NULL;
    REQUIRE_OK(fl_tensor_empty(&w2, FL_F32, 2, bad, FL_DEV_CPU));
    CHECK(fl_linear_relu_bf16(&y, x, w2, NULL) == FL_EINVAL && !y, "mismatched in_features: not refused");
    fl_set_autocast_dtype(prev);
    fl_tensor_release(x); fl_tensor_release(w); fl_tensor_release(w2);
}

/* fl_linear under a bf16 autocast with a bias and an output past FL_LINEAR_BIAS_BLOCKS_MIN (the device's row blocks,
 * linear_bias_bf16) against the GEMM of the rounded operands then the bias added, bit for bit; the entry itself runs
 * where the bf16 GEMMs are oneDNN's. */
TEST(linear_bias_bf16_blocks_same_bits_as_gemm_then_bias) {
    const int64_t shapes[][3] = { { 2048, 768, 256 }, { 1100, 1000, 72 }, { 1040, 1024, 2048 } };
    const bool fused_expected = fl_cpu_avx512() && !fl_cpu_fma_mm_first();
    for (int s = 0; s < 3; s++) {
        const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        const int64_t xs[2] = { M, K }, ws[2] = { N, K }, bs[1] = { N };
        float *xv = malloc(sizeof(float) * (size_t)(M * K)), *wv = malloc(sizeof(float) * (size_t)(N * K));
        float *bv = malloc(sizeof(float) * (size_t)N);
        for (int64_t i = 0; i < M * K; i++) xv[i] = la_rand();
        for (int64_t i = 0; i < N * K; i++) wv[i] = la_rand();
        for (int64_t j = 0; j < N; j++) bv[j] = la_rand();
        bv[0] = NAN; bv[1] = INFINITY; bv[2] = -0.0f; bv[3] = 1e-40f;
        fl_tensor *x = NULL, *w = NULL, *b = NULL, *y = NULL, *xb = NULL, *wb = NULL, *wt = NULL, *p = NULL, *ref = NULL;
        REQUIRE_OK(fl_tensor_from_f32(&x, xv, 2, xs, FL_F32));
        REQUIRE_OK(fl_tensor_from_f32(&w, wv, 2, ws, FL_F32));
        REQUIRE_OK(fl_tensor_from_f32(&b, bv, 1, bs, FL_F32));
        const fl_dtype prev = fl_set_autocast_dtype(FL_BF16);
        CHECK_OK(fl_linear(&y, x, w, b));
        fl_set_autocast_dtype(prev);
        REQUIRE_OK(fl_tensor_to(&xb, x, FL_BF16));
        REQUIRE_OK(fl_tensor_to(&wb, w, FL_BF16));
        REQUIRE_OK(fl_tensor_transpose(&wt, wb, 0, 1));
        REQUIRE_OK(fl_matmul_raw(&p, xb, wt, FL_BF16, FL_F32));
        REQUIRE_OK(fl_binary(&ref, FL_OP_ADD, p, b));
        if (y) {
            CHECK(y->dtype == FL_F32, "the autocast linear's result is not fp32");
            CHECK(!memcmp(fl_tensor_data(y), fl_tensor_data(ref), sizeof(float) * (size_t)(M * N)),
                  "[%lld, %lld] x [%lld, %lld]ᵀ + b: differs from the GEMM then the bias", (long long)M, (long long)K,
                  (long long)N, (long long)K);
        }
        float *yd = malloc(sizeof(float) * (size_t)(M * N));
        bool done = false;
        CHECK_OK(fl_cpu_dev_linear_bias_bf16(fl_tensor_data(xb), fl_tensor_data(wb), bv, yd, M, N, K, &done));
        CHECK(done || !fused_expected, "the row blocks did not run on a CPU whose bf16 GEMMs are oneDNN's");
        if (done) CHECK(!memcmp(yd, fl_tensor_data(ref), sizeof(float) * (size_t)(M * N)), "the entry differs");
        free(yd);
        fl_tensor_release(x); fl_tensor_release(w); fl_tensor_release(b); fl_tensor_release(y); fl_tensor_release(xb);
        fl_tensor_release(wb); fl_tensor_release(wt); fl_tensor_release(p); fl_tensor_release(ref);
        free(xv); free(wv); free(bv);
    }
}
