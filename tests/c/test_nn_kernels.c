/* test_nn_kernels.c — core/cpu/cpu_nn.h kernels against float64 references written here: forwards
 * against direct formulas, backwards against analytic float64 gradients and central differences of
 * the float64 forward contracted with a random dy. */
#include "runner.h"
#include "cpu/cpu_nn.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_nn_internal.h"
#include "error.h"
#include "format.h"
#include "half_cvt.h"
#include "ops_raw.h"
#include "rng.h"
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- helpers ------------------------------------------------------------------------------- */
static uint64_t lcg_state = 88172645463325252ull;
static double urand(void) {   /* xorshift64: independent of core/rng.c */
    lcg_state ^= lcg_state << 13; lcg_state ^= lcg_state >> 7; lcg_state ^= lcg_state << 17;
    return (double)(lcg_state >> 11) / 9007199254740992.0;
}
static float *frand(int64_t n, double lo, double hi) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * urand());
    return p;
}
static float *fzeros(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }
static double *dcopy(const float *x, int64_t n) {
    double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
/* max |a-b| / (atol + rtol|b|) over n: <= 1 means within tolerance. A NaN reference marks an
 * element that was not sampled (fd_grad with stride > 1) and is skipped. */
static double worst(const float *a, const double *b, int64_t n, double atol, double rtol) {
    double w = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(b[i])) continue;
        double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (!(e <= w)) w = e;   /* NaN counts as worst */
    }
    return w;
}

/* A scalar function of a double vector, for finite differences: f(x) = Σ dy·forward(x). */
typedef double (*scalar_fn)(const double *x, void *ctx);
/* Central differences of f at x into g (x restored afterwards). Large inputs sample about 150
 * coordinates (the rest are NaN = skipped) so the O(n²) cost stays small. */
static void fd_grad(scalar_fn f, void *ctx, double *x, int64_t n, double *g) {
    int64_t stride = n > 150 ? n / 150 + 1 : 1;
    for (int64_t i = 0; i < n; i++) g[i] = NAN;
    for (int64_t i = (n - 1) % stride; i < n; i += stride) {
        double h = 1e-6 * (1.0 + fabs(x[i])), x0 = x[i];
        x[i] = x0 + h; double fp = f(x, ctx);
        x[i] = x0 - h; double fm = f(x, ctx);
        x[i] = x0;
        g[i] = (fp - fm) / (2 * h);
    }
}

/* ---- ReLU / GELU ------------------------------------------------------------------------- */
TEST(nn_relu_fwd_bwd) {
    int64_t n = 37;
    float *x = frand(n, -2, 2), *dy = frand(n, -1, 1), *y = fzeros(n), *dx = fzeros(n);
    x[0] = 0.0f;
    fl_cpu_relu_fwd(x, y, n);
    fl_cpu_relu_bwd(x, dy, dx, n);
    for (int64_t i = 0; i < n; i++) {
        CHECK(y[i] == (x[i] > 0 ? x[i] : 0.0f), "y[%lld]", (long long)i);
        CHECK(dx[i] == (x[i] > 0 ? dy[i] : 0.0f), "dx[%lld]", (long long)i);
    }
    free(x); free(dy); free(y); free(dx);
}

static double gelu_ref(double x, int approx) {
    if (approx) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}

static void check_gelu(int *fl__failed, int approx, int64_t n) {
    float *x = frand(n, -6, 6), *dy = frand(n, -1, 1), *y = fzeros(n), *dx = fzeros(n);
    x[0] = 0.0f; x[1] = -12.0f; x[2] = 12.0f;
    double *ry = malloc(n * sizeof(double)), *rdx = malloc(n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        double v = x[i], h = 1e-6;
        ry[i] = gelu_ref(v, approx);
        rdx[i] = dy[i] * (gelu_ref(v + h, approx) - gelu_ref(v - h, approx)) / (2 * h);
    }
    fl_cpu_gelu_fwd(x, y, n, approx);
    fl_cpu_gelu_bwd(x, dy, dx, n, approx);
    double wy = worst(y, ry, n, 1e-6, 1e-5), wd = worst(dx, rdx, n, 1e-6, 1e-4);
    CHECK(wy <= 1, "gelu(approx=%d) fwd worst %g", approx, wy);
    CHECK(wd <= 1, "gelu(approx=%d) bwd worst %g", approx, wd);
    free(x); free(dy); free(y); free(dx); free(ry); free(rdx);
}
TEST(nn_gelu_exact) { check_gelu(fl__failed, 0, 1001); check_gelu(fl__failed, 0, 200003); }
TEST(nn_gelu_tanh)  { check_gelu(fl__failed, 1, 1001); check_gelu(fl__failed, 1, 200003); }
/* The tanh form has an AVX2 and an AVX-512 copy; on an AVX-512 machine the tests above run the wide
 * one, so run the AVX2 one too (a span shorter than a vector, and one with a ragged tail). */
TEST(nn_gelu_tanh_avx2) {
    fl_cpu_avx512_allowed = false;
    check_gelu(fl__failed, 1, 5);
    check_gelu(fl__failed, 1, 200003);
    fl_cpu_avx512_allowed = true;
}

/* The AVX-512 copy of the tanh form (intrinsics, its 2^k by vscalefps) gives the AVX2 copy's bits, forward and
 * backward: every 251st float bit pattern (both signs, zeros, subnormals, the range where e^-2|u| flushes to 0,
 * infinities and NaNs among them), spans with ragged tails. Skipped where the CPU has no AVX-512. */
TEST(nn_gelu_tanh_avx512_matches_avx2_bits) {
    if (!fl_cpu_avx512()) { fprintf(stderr, "  (skipped: no AVX-512 on this CPU)\n"); return; }
    const int64_t n = (int64_t)((1ull << 32) / 251) + 1;
    float *x = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4);
    float *y[2] = { malloc((size_t)n * 4), malloc((size_t)n * 4) }, *dx[2] = { malloc((size_t)n * 4), malloc((size_t)n * 4) };
    REQUIRE(x && dy && y[0] && y[1] && dx[0] && dx[1], "out of memory");
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)((uint64_t)i * 251u);
        memcpy(&x[i], &u, 4);
        dy[i] = (float)(i % 7) - 2.5f;
    }
    for (int wide = 0; wide < 2; wide++) {
        fl_cpu_avx512_allowed = wide;
        fl_cpu_gelu_fwd(x, y[wide], n, 1);
        fl_cpu_gelu_bwd(x, dy, dx[wide], n, 1);
        fl_cpu_gelu_tanh_fwd_serial(x, y[wide], 1000003);    /* the serial spans too (a ragged last span) */
        fl_cpu_gelu_tanh_bwd_serial(x, dy, dx[wide], 1000003);
    }
    fl_cpu_avx512_allowed = true;
    int64_t bad_y = 0, bad_dx = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        const bool by = memcmp(&y[0][i], &y[1][i], 4) != 0 && !(isnan(y[0][i]) && isnan(y[1][i]));
        const bool bd = memcmp(&dx[0][i], &dx[1][i], 4) != 0 && !(isnan(dx[0][i]) && isnan(dx[1][i]));
        bad_y += by; bad_dx += bd;
        if ((by || bd) && first < 0) first = i;
    }
    CHECK(bad_y == 0 && bad_dx == 0, "%lld forward and %lld backward values differ (first x = %a: y %a / %a, dx %a / %a)",
          (long long)bad_y, (long long)bad_dx, first >= 0 ? (double)x[first] : 0.0, first >= 0 ? (double)y[0][first] : 0.0,
          first >= 0 ? (double)y[1][first] : 0.0, first >= 0 ? (double)dx[0][first] : 0.0, first >= 0 ? (double)dx[1][first] : 0.0);
    free(x); free(dy); free(y[0]); free(y[1]); free(dx[0]); free(dx[1]);
}
/* The exact GELU of a bf16 input by table (stop 96): every one of the 65536 bf16 patterns, in spans of several
 * lengths at several offsets, gives the computed kernel's bits on the widened value (fl_cpu_gelu_fwd, each copy), as
 * fp32 and rounded to bf16 (NaN payloads aside, as elsewhere). */
TEST(nn_gelu_bf16_table_gives_the_kernels_bits) {
    const int64_t n = 1 << 16;
    uint16_t *b = malloc((size_t)n * 2), *y16 = malloc((size_t)n * 2);
    float *xf = malloc((size_t)n * 4), *ref = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    REQUIRE(b && y16 && xf && ref && y, "out of memory");
    for (int64_t i = 0; i < n; i++) b[i] = (uint16_t)((i * 40503) & 0xFFFF);   /* every pattern once, shuffled */
    fl_bf16_to_f32_n(b, xf, (size_t)n);
    for (int wide = 0; wide < 2; wide++) {
        fl_cpu_avx512_allowed = true;   /* (the question asked with the AVX2 turn's false still set skipped this copy) */
        if (wide && !fl_cpu_avx512()) { fprintf(stderr, "  (AVX-512 copy skipped: no AVX-512 on this CPU)\n"); break; }
        fl_cpu_avx512_allowed = wide;
        fl_cpu_gelu_fwd(xf, ref, n, 0);
        const int64_t offs[] = { 0, 1, 17, 1000 }, lens[] = { 1, 15, 1025, 3000 };
        for (int k = 0; k < 4; k++) {
            fl_cpu_act_fwd_bf16(FL_ACT_GELU, b + offs[k], y, NULL, lens[k]);
            fl_cpu_act_fwd_bf16(FL_ACT_GELU, b + offs[k], NULL, y16, lens[k]);
            for (int64_t i = 0; i < lens[k]; i++) {
                const float want = ref[offs[k] + i];
                uint16_t w16;
                fl_f32_to_bf16_n(&want, &w16, 1);
                const bool bad = (memcmp(&y[i], &want, 4) != 0 && !(isnan(y[i]) && isnan(want))) ||
                                 (w16 != y16[i] && !(isnan(want) && (y16[i] & 0x7F80) == 0x7F80 && (y16[i] & 0x7F)));
                if (bad) {
                    CHECK(0, "wide %d: bf16 0x%04x gives %a / 0x%04x, the kernel %a / 0x%04x", wide, b[offs[k] + i],
                          (double)y[i], y16[i], (double)want, w16);
                    break;
                }
            }
        }
        fl_cpu_act_fwd_bf16(FL_ACT_GELU, b, y, NULL, n);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += memcmp(&y[i], &ref[i], 4) != 0 && !(isnan(y[i]) && isnan(ref[i]));
        CHECK(bad == 0, "wide %d: %lld of the 65536 bf16 patterns give other bits than the kernel", wide,
              (long long)bad);
    }
    fl_cpu_avx512_allowed = true;
    free(b); free(y16); free(xf); free(ref); free(y);
}

/* The backward of GELU (both forms) and SiLU on a bf16 input (stop 97; the exact form's derivative by a second table):
 * every one of the 65536 bf16 patterns, against several dy, in spans of several lengths at several offsets, gives the
 * fp32 kernels' bits on the widened value (fl_cpu_gelu_bwd, fl_cpu_silu_bwd), on each copy (NaN payloads aside). */
TEST(nn_act_bf16_backward_gives_the_kernels_bits) {
    const int64_t n = 1 << 16;
    uint16_t *b = malloc((size_t)n * 2);
    float *xf = malloc((size_t)n * 4), *dy = malloc((size_t)n * 4), *ref = malloc((size_t)n * 4),
          *dx = malloc((size_t)n * 4);
    REQUIRE(b && xf && dy && ref && dx, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        b[i] = (uint16_t)((i * 40503) & 0xFFFF);   /* every pattern once, shuffled */
        dy[i] = (float)((i * 7919) % 2001 - 1000) / 37.0f;
    }
    dy[5] = 0.0f; dy[6] = -0.0f; dy[7] = INFINITY; dy[8] = NAN; dy[9] = 0x1p-140f; dy[10] = -3e38f;
    fl_bf16_to_f32_n(b, xf, (size_t)n);
    const int kinds[] = { FL_ACT_GELU, FL_ACT_GELU_TANH, FL_ACT_SILU };
    for (int wide = 0; wide < 2; wide++) {
        fl_cpu_avx512_allowed = true;   /* (the question asked with the AVX2 turn's false still set skipped this copy) */
        if (wide && !fl_cpu_avx512()) { fprintf(stderr, "  (AVX-512 copy skipped: no AVX-512 on this CPU)\n"); break; }
        fl_cpu_avx512_allowed = wide;
        for (int kk = 0; kk < 3; kk++) {
            const int kind = kinds[kk];
            if (kind == FL_ACT_SILU) fl_cpu_silu_bwd(xf, dy, ref, n);
            else fl_cpu_gelu_bwd(xf, dy, ref, n, kind == FL_ACT_GELU_TANH);
            const int64_t offs[] = { 0, 1, 17, 1000, 0 }, lens[] = { 1, 15, 1025, 3000, 1 << 16 };
            for (int k = 0; k < 5; k++) {
                fl_cpu_act_bwd_bf16(kind, b + offs[k], dy + offs[k], dx, lens[k]);
                int64_t bad = 0, first = -1;
                for (int64_t i = 0; i < lens[k]; i++) {
                    const float want = ref[offs[k] + i];
                    if (memcmp(&dx[i], &want, 4) != 0 && !(isnan(dx[i]) && isnan(want))) {
                        if (first < 0) first = i;
                        bad++;
                    }
                }
                CHECK(bad == 0, "wide %d kind %d offset %lld length %lld: %lld results differ (first bf16 0x%04x, dy %a: "
                      "%a, the kernel %a)", wide, kind, (long long)offs[k], (long long)lens[k], (long long)bad,
                      first >= 0 ? b[offs[k] + first] : 0, first >= 0 ? (double)dy[offs[k] + first] : 0.0,
                      first >= 0 ? (double)dx[first] : 0.0, first >= 0 ? (double)ref[offs[k] + first] : 0.0);
            }
        }
    }
    fl_cpu_avx512_allowed = true;
    free(b); free(xf); free(dy); free(ref); free(dx);
}

TEST(nn_gelu_tanh_special) {
    float x[5] = { 0.0f, -0.0f, INFINITY, NAN, -30.0f }, y[5], dy[5] = { 1, 1, 1, 1, 1 }, dx[5];
    fl_cpu_gelu_fwd(x, y, 5, 1);
    fl_cpu_gelu_bwd(x, dy, dx, 5, 1);
    CHECK(y[0] == 0.0f && y[1] == 0.0f && y[2] == INFINITY && isnan(y[3]) && y[4] == 0.0f,
          "gelu(0, -0, inf, nan, -30) = %g %g %g %g %g", y[0], y[1], y[2], y[3], y[4]);
    CHECK(dx[0] == 0.5f && isnan(dx[3]) && dx[4] == 0.0f, "gelu'(0, nan, -30) = %g %g %g", dx[0], dx[3], dx[4]);
}

/* The bounds current scaling's first passes skip by (cpu_nn.h) hold for what the tanh form computes, on both copies:
 * |GELU(v)| ≤ fl_cpu_gelu_tanh_bound(v) and |GELU'(v)| ≤ fl_cpu_gelu_tanh_dbound(v), where not NaN, over every 97th
 * float bit pattern (every float with FL_TEST_GELU_BOUNDS_ALL=1) and the 2^18 floats around where they are tightest
 * (GELU's minimum near −0.75, GELU' near ±1.5 and below each quarter's edge, where it rises to). The 8-lane forms give
 * the scalar bounds' bits. */
static void check_gelu_bounds(int *fl__failed, const float *x, int64_t n, const char *what) {
    float *y = malloc((size_t)n * 4), *d = malloc((size_t)n * 4), *one = malloc((size_t)n * 4);
    REQUIRE(y && d && one, "out of memory");
    for (int64_t i = 0; i < n; i++) one[i] = 1.0f;
    for (int wide = 0; wide < 2; wide++) {
        fl_cpu_avx512_allowed = wide;
        fl_cpu_gelu_tanh_fwd_serial(x, y, n);
        fl_cpu_gelu_tanh_bwd_serial(x, one, d, n);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++) {
            bool b = (!isnan(y[i]) && !(fabsf(y[i]) <= fl_cpu_gelu_tanh_bound(x[i]))) ||
                     (!isnan(d[i]) && !(fabsf(d[i]) <= fl_cpu_gelu_tanh_dbound(x[i])));
#ifdef __x86_64__
            if (i % 8 == 0 && i + 8 <= n) {
                float b8[8], d8[8];
                _mm256_storeu_ps(b8, fl_cpu_gelu_tanh_bound8(_mm256_loadu_ps(x + i)));
                _mm256_storeu_ps(d8, fl_cpu_gelu_tanh_dbound8(_mm256_loadu_ps(x + i)));
                for (int k = 0; k < 8; k++) {
                    const float bs = fl_cpu_gelu_tanh_bound(x[i + k]), ds = fl_cpu_gelu_tanh_dbound(x[i + k]);
                    b = b || memcmp(&b8[k], &bs, 4) != 0 || memcmp(&d8[k], &ds, 4) != 0;
                }
            }
#endif
            if (b && first < 0) first = i;
            bad += b;
        }
        CHECK(bad == 0, "%s, %s copy: %lld values break a bound (first v = %a: GELU %a, GELU' %a)", what,
              wide ? "AVX-512" : "AVX2", (long long)bad, first >= 0 ? (double)x[first] : 0.0,
              first >= 0 ? (double)y[first] : 0.0, first >= 0 ? (double)d[first] : 0.0);
    }
    fl_cpu_avx512_allowed = true;
    free(y); free(d); free(one);
}
TEST(nn_gelu_tanh_bounds) {
    const char *all = getenv("FL_TEST_GELU_BOUNDS_ALL");   /* set (not "0"): every float, about a minute */
    const uint64_t stride = all && *all && strcmp(all, "0") ? 1 : 97;
    const int64_t n = 1 << 22;
    float *x = malloc((size_t)n * 4);
    REQUIRE(x, "out of memory");
    for (uint64_t u0 = 0; u0 < (1ull << 32); u0 += (uint64_t)n * stride) {
        int64_t k = 0;
        for (uint64_t u = u0; u < (1ull << 32) && k < n; u += stride, k++) {
            const uint32_t b = (uint32_t)u;
            memcpy(&x[k], &b, 4);
        }
        check_gelu_bounds(fl__failed, x, k, stride == 1 ? "every float" : "every 97th float");
    }
    static const float near[] = { -0.75f, -1.5f, 1.5f, -0.5f, -0.25f, -0.0f, 0.25f, 0.5f, 0.75f };
    int64_t k = 0;
    for (unsigned c = 0; c < sizeof near / sizeof near[0]; c++) {   /* 2^18 floats below each, and above the first 3 */
        float v = near[c];
        for (int j = 0; j < 1 << 18 && k < n; j++) x[k++] = v = nextafterf(v, -INFINITY);
        v = near[c];
        for (int j = 0; c < 3 && j < 1 << 18 && k < n; j++) x[k++] = v = nextafterf(v, INFINITY);
    }
    check_gelu_bounds(fl__failed, x, k, "the floats near the tightest places");
    free(x);
}

/* ---- softmax / log-softmax ----------------------------------------------------------------- */
typedef struct { int64_t rows, cols; const float *dy; int log; } sm_ctx;
static void softmax_ref(const double *x, double *y, int64_t rows, int64_t cols, int log_) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols; double *yr = y + r * cols;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < cols; j++) if (xr[j] > m) m = xr[j];
        for (int64_t j = 0; j < cols; j++) s += exp(xr[j] - m);
        for (int64_t j = 0; j < cols; j++) yr[j] = log_ ? xr[j] - m - log(s) : exp(xr[j] - m) / s;
    }
}
static double sm_scalar(const double *x, void *vc) {
    sm_ctx *c = vc;
    int64_t n = c->rows * c->cols;
    double *y = malloc(n * sizeof(double)), s = 0;
    softmax_ref(x, y, c->rows, c->cols, c->log);
    for (int64_t i = 0; i < n; i++) s += c->dy[i] * y[i];
    free(y);
    return s;
}

static void check_softmax(int *fl__failed, int log_, int64_t rows, int64_t cols, int fd) {
    int64_t n = rows * cols;
    float *x = frand(n, -8, 8), *dy = frand(n, -1, 1), *y = fzeros(n), *dx = fzeros(n);
    double *xd = dcopy(x, n), *ry = malloc(n * sizeof(double)), *rdx = malloc(n * sizeof(double));
    softmax_ref(xd, ry, rows, cols, log_);
    /* analytic float64 backward */
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t j = 0; j < cols; j++) s += log_ ? dy[r * cols + j] : dy[r * cols + j] * ry[r * cols + j];
        for (int64_t j = 0; j < cols; j++) {
            int64_t i = r * cols + j;
            rdx[i] = log_ ? dy[i] - exp(ry[i]) * s : ry[i] * (dy[i] - s);
        }
    }
    if (log_) { fl_cpu_log_softmax_fwd(x, y, rows, cols); fl_cpu_log_softmax_bwd(y, dy, dx, rows, cols); }
    else { fl_cpu_softmax_fwd(x, y, rows, cols); fl_cpu_softmax_bwd(y, dy, dx, rows, cols); }
    double wy = worst(y, ry, n, 1e-6, 1e-5), wd = worst(dx, rdx, n, 1e-6, 1e-4);
    CHECK(wy <= 1, "%s [%lld,%lld] fwd worst %g", log_ ? "log_softmax" : "softmax", (long long)rows, (long long)cols, wy);
    CHECK(wd <= 1, "%s [%lld,%lld] bwd worst %g", log_ ? "log_softmax" : "softmax", (long long)rows, (long long)cols, wd);
    if (fd) {   /* independent check of the analytic reference itself */
        sm_ctx c = { rows, cols, dy, log_ };
        double *g = malloc(n * sizeof(double));
        fd_grad(sm_scalar, &c, xd, n, g);
        double wf = worst(dx, g, n, 1e-5, 1e-4);
        CHECK(wf <= 1, "%s [%lld,%lld] bwd vs finite differences worst %g", log_ ? "log_softmax" : "softmax",
              (long long)rows, (long long)cols, wf);
        free(g);
    }
    free(x); free(dy); free(y); free(dx); free(xd); free(ry); free(rdx);
}
TEST(nn_softmax) {
    check_softmax(fl__failed, 0, 1, 1, 1);
    check_softmax(fl__failed, 0, 1, 13, 1);
    check_softmax(fl__failed, 0, 7, 37, 1);
    check_softmax(fl__failed, 0, 3, 1000, 0);
    check_softmax(fl__failed, 0, 257, 1001, 0);   /* threaded path */
}
TEST(nn_log_softmax) {
    check_softmax(fl__failed, 1, 1, 1, 1);
    check_softmax(fl__failed, 1, 1, 13, 1);
    check_softmax(fl__failed, 1, 7, 37, 1);
    check_softmax(fl__failed, 1, 257, 1001, 0);
}
TEST(nn_softmax_stable_extremes) {
    /* huge logits (naive exp overflows) and -inf entries (masked) */
    float x[6] = { 1e4f, 1e4f - 1.0f, -INFINITY, -1e4f, 1e4f, -INFINITY }, y[6], ly[6];
    fl_cpu_softmax_fwd(x, y, 2, 3);
    fl_cpu_log_softmax_fwd(x, ly, 2, 3);
    double e1 = exp(-1.0), s = 1 + e1;
    CHECK_CLOSE(y[0], 1 / s, 1e-7, 1e-6); CHECK_CLOSE(y[1], e1 / s, 1e-7, 1e-6); CHECK(y[2] == 0.0f, "%g", y[2]);
    CHECK(y[3] == 0.0f && y[5] == 0.0f, "%g %g", y[3], y[5]); CHECK_CLOSE(y[4], 1.0, 0, 1e-7);
    CHECK_CLOSE(ly[0], -log(s), 1e-6, 1e-5); CHECK(isinf(ly[2]) && ly[2] < 0, "%g", ly[2]);
    CHECK_CLOSE(ly[3], -2e4, 0, 1e-6); CHECK_CLOSE(ly[4], 0.0, 1e-7, 0);
    /* the kernel's exp over its whole range, subnormal results included: rows [0, a] → y1 = e^a/(1+e^a) */
    const float as[] = { -110.0f, -103.0f, -90.0f, -50.0f, -1.0f, 0.5f, 30.0f };
    for (unsigned k = 0; k < sizeof as / sizeof as[0]; k++) {
        float r[2] = { 0.0f, as[k] }, o[2];
        fl_cpu_softmax_fwd(r, o, 1, 2);
        double ea = exp((double)as[k]);
        CHECK_CLOSE(o[1], ea / (1 + ea), 1.5e-45, 1e-5);
    }
    float z[3] = { 1.0f, NAN, 2.0f }, o[3];
    fl_cpu_log_softmax_fwd(z, o, 1, 3);   /* NaN anywhere in a row → NaN row, as in PyTorch */
    CHECK(isnan(o[0]) && isnan(o[2]), "NaN row: %g %g", o[0], o[2]);
}

/* ---- cross-entropy ------------------------------------------------------------------------- */
typedef struct { int64_t rows, cols, ii; double eps; const float *t; } ce_ctx;
static double ce_ref(const double *x, void *vc) {   /* -Σ q log p, mean over non-ignored rows */
    ce_ctx *c = vc;
    double tot = 0; int64_t cnt = 0;
    for (int64_t r = 0; r < c->rows; r++) {
        if ((int64_t)c->t[r] == c->ii) continue;
        const double *xr = x + r * c->cols;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < c->cols; j++) if (xr[j] > m) m = xr[j];
        for (int64_t j = 0; j < c->cols; j++) s += exp(xr[j] - m);
        for (int64_t j = 0; j < c->cols; j++) {
            double q = c->eps / c->cols + (j == (int64_t)c->t[r] ? 1 - c->eps : 0);
            tot -= q * (xr[j] - m - log(s));
        }
        cnt++;
    }
    return tot / cnt;
}

static void check_ce(int *fl__failed, int64_t rows, int64_t cols, double eps, int64_t ii, int nignored) {
    int64_t n = rows * cols;
    float *x = frand(n, -5, 5), *t = malloc(rows * sizeof(float)), *dx = fzeros(n);
    for (int64_t r = 0; r < rows; r++) t[r] = (float)(int64_t)(urand() * cols);
    for (int i = 0; i < nignored && i < rows; i++) t[(i * 3) % rows] = (float)ii;
    ce_ctx c = { rows, cols, ii, eps, t };
    double *xd = dcopy(x, n), *g = malloc(n * sizeof(double));
    double ref = ce_ref(xd, &c), loss = -1; int64_t count = -1;
    CHECK_OK(fl_cpu_cross_entropy_fwd(x, t, rows, cols, ii, (float)eps, &loss, &count));
    int64_t expect = 0;
    for (int64_t r = 0; r < rows; r++) expect += (int64_t)t[r] != ii;
    CHECK(count == expect, "count %lld vs %lld", (long long)count, (long long)expect);
    CHECK_CLOSE(loss, ref, 1e-6, 1e-5);
    float dloss = 0.75f;
    CHECK_OK(fl_cpu_cross_entropy_bwd(x, t, rows, cols, ii, (float)eps, dloss, dx));
    fd_grad(ce_ref, &c, xd, n, g);
    for (int64_t i = 0; i < n; i++) g[i] *= dloss;   /* NaN (unsampled) stays NaN */
    double w = worst(dx, g, n, 1e-6, 1e-4);
    CHECK(w <= 1, "ce [%lld,%lld] eps %g bwd vs finite differences worst %g", (long long)rows, (long long)cols, eps, w);
    for (int64_t r = 0; r < rows; r++) if ((int64_t)t[r] == ii)
        for (int64_t j = 0; j < cols; j++) CHECK(dx[r * cols + j] == 0.0f, "ignored row %lld has grad", (long long)r);
    free(x); free(t); free(dx); free(xd); free(g);
}
TEST(nn_cross_entropy) {
    check_ce(fl__failed, 1, 1, 0.0, -100, 0);
    check_ce(fl__failed, 1, 5, 0.0, -100, 0);
    check_ce(fl__failed, 9, 11, 0.0, -100, 0);
    check_ce(fl__failed, 9, 11, 0.1, -100, 3);   /* label smoothing + ignore_index */
    check_ce(fl__failed, 6, 37, 0.25, 2, 2);     /* ignore_index inside the class range */
    check_ce(fl__failed, 70, 1003, 0.1, -100, 5); /* threaded path; fd samples coordinates */
}
TEST(nn_cross_entropy_all_ignored) {
    float x[6] = { 1, 2, 3, 4, 5, 6 }, t[2] = { -100, -100 }, dx[6];
    double loss = 0; int64_t count = -1;
    CHECK_OK(fl_cpu_cross_entropy_fwd(x, t, 2, 3, -100, 0.1f, &loss, &count));
    CHECK(isnan(loss), "loss %g (PyTorch: nan)", loss);
    CHECK(count == 0, "count %lld", (long long)count);
    for (int i = 0; i < 6; i++) dx[i] = 7;
    CHECK_OK(fl_cpu_cross_entropy_bwd(x, t, 2, 3, -100, 0.1f, 1.0f, dx));
    for (int i = 0; i < 6; i++) CHECK(dx[i] == 0.0f, "dx[%d] = %g", i, dx[i]);
}
TEST(nn_cross_entropy_bad_target) {
    float x[6] = { 1, 2, 3, 4, 5, 6 }, dx[6];
    const float bad[] = { 3.0f, -1.0f, 1.5f, NAN, -100.5f };
    for (unsigned k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        float t[2] = { 0.0f, bad[k] };
        double loss = 0; int64_t count = 0;
        fl_clear_error();
        fl_status st = fl_cpu_cross_entropy_fwd(x, t, 2, 3, -100, 0.0f, &loss, &count);
        CHECK(st == FL_EINVAL, "target %g: status %d", bad[k], (int)st);
        CHECK(strstr(fl_last_error(), bad[k] == 1.5f ? "is not a whole number" : "out of range [0, 3)")
              && strstr(fl_last_error(), "row 1"), "message: %s", fl_last_error());
        st = fl_cpu_cross_entropy_bwd(x, t, 2, 3, -100, 0.0f, 1.0f, dx);
        CHECK(st == FL_EINVAL, "bwd target %g: status %d", bad[k], (int)st);
    }
}

/* ---- layernorm ----------------------------------------------------------------------------- */
typedef struct { int64_t rows, cols; double eps; const float *dy; int which; double *x, *w, *b; } ln_ctx;
static void ln_ref(const double *x, const double *w, const double *b, double *y, int64_t rows, int64_t cols, double eps) {
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double m = 0, v = 0;
        for (int64_t j = 0; j < cols; j++) m += xr[j];
        m /= cols;
        for (int64_t j = 0; j < cols; j++) v += (xr[j] - m) * (xr[j] - m);
        v /= cols;
        for (int64_t j = 0; j < cols; j++)
            y[r * cols + j] = (xr[j] - m) / sqrt(v + eps) * (w ? w[j] : 1) + (b ? b[j] : 0);
    }
}
/* f = Σ dy·LN(x; w, b) as a function of one of x (which=0), w (1), b (2). */
static double ln_scalar(const double *p, void *vc) {
    ln_ctx *c = vc;
    int64_t n = c->rows * c->cols;
    double *y = malloc(n * sizeof(double)), s = 0;
    ln_ref(c->which == 0 ? p : c->x, c->which == 1 ? p : c->w, c->which == 2 ? p : c->b, y, c->rows, c->cols, c->eps);
    for (int64_t i = 0; i < n; i++) s += c->dy[i] * y[i];
    free(y);
    return s;
}

static void check_ln(int *fl__failed, int64_t rows, int64_t cols, int affine, int fd) {
    int64_t n = rows * cols;
    float eps = 1e-5f;
    float *x = frand(n, -3, 5), *dy = frand(n, -1, 1), *w = affine ? frand(cols, 0.5, 1.5) : NULL,
          *b = affine ? frand(cols, -1, 1) : NULL;
    float *y = fzeros(n), *mean = fzeros(rows), *rstd = fzeros(rows), *dx = fzeros(n);
    float *dw = frand(cols, 1, 1), *db = frand(cols, -2, -2);   /* pre-filled: the kernel accumulates */
    double *xd = dcopy(x, n), *wd = affine ? dcopy(w, cols) : NULL, *bd = affine ? dcopy(b, cols) : NULL;
    double *ry = malloc(n * sizeof(double));
    ln_ref(xd, wd, bd, ry, rows, cols, eps);
    fl_cpu_layernorm_fwd(x, w, b, y, mean, rstd, rows, cols, eps);
    double wy = worst(y, ry, n, 1e-5, 1e-5);
    CHECK(wy <= 1, "layernorm [%lld,%lld] affine %d fwd worst %g", (long long)rows, (long long)cols, affine, wy);
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < cols; j++) m += xd[r * cols + j];
        m /= cols;
        for (int64_t j = 0; j < cols; j++) v += (xd[r * cols + j] - m) * (xd[r * cols + j] - m);
        CHECK_CLOSE(mean[r], m, 1e-6, 1e-6);
        CHECK_CLOSE(rstd[r], 1 / sqrt(v / cols + eps), 0, 1e-5);
    }
    fl_cpu_layernorm_bwd(x, w, mean, rstd, dy, dx, affine ? dw : NULL, affine ? db : NULL, rows, cols);
    /* analytic float64 reference */
    double *rdx = calloc(n, sizeof(double)), *rdw = calloc(cols, sizeof(double)), *rdb = calloc(cols, sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0, sg = 0, sgx = 0;
        for (int64_t j = 0; j < cols; j++) m += xd[r * cols + j];
        m /= cols;
        for (int64_t j = 0; j < cols; j++) v += (xd[r * cols + j] - m) * (xd[r * cols + j] - m);
        double rs = 1 / sqrt(v / cols + eps);
        for (int64_t j = 0; j < cols; j++) {
            double xh = (xd[r * cols + j] - m) * rs, g = dy[r * cols + j] * (affine ? wd[j] : 1);
            sg += g; sgx += g * xh;
            rdw[j] += dy[r * cols + j] * xh; rdb[j] += dy[r * cols + j];
        }
        for (int64_t j = 0; j < cols; j++) {
            double xh = (xd[r * cols + j] - m) * rs, g = dy[r * cols + j] * (affine ? wd[j] : 1);
            rdx[r * cols + j] = rs * (g - sg / cols - xh * sgx / cols);
        }
    }
    double wdx = worst(dx, rdx, n, 1e-4, 1e-3);
    CHECK(wdx <= 1, "layernorm [%lld,%lld] dx worst %g", (long long)rows, (long long)cols, wdx);
    if (affine) {
        for (int64_t j = 0; j < cols; j++) { rdw[j] += 1; rdb[j] += -2; }
        double ww = worst(dw, rdw, cols, 1e-4, 1e-4), wb = worst(db, rdb, cols, 1e-4, 1e-4);
        CHECK(ww <= 1 && wb <= 1, "layernorm dw worst %g, db worst %g", ww, wb);
    }
    if (fd) {   /* finite differences of the float64 forward, for x, w and b */
        ln_ctx c = { rows, cols, eps, dy, 0, xd, wd, bd };
        double *g = malloc(n * sizeof(double));
        fd_grad(ln_scalar, &c, xd, n, g);
        double wf = worst(dx, g, n, 1e-4, 1e-3);
        CHECK(wf <= 1, "layernorm [%lld,%lld] dx vs fd worst %g", (long long)rows, (long long)cols, wf);
        if (affine) {
            c.which = 1; fd_grad(ln_scalar, &c, wd, cols, g);
            for (int64_t j = 0; j < cols; j++) g[j] += 1;
            double w1 = worst(dw, g, cols, 1e-4, 1e-4);
            c.which = 2; fd_grad(ln_scalar, &c, bd, cols, g);
            for (int64_t j = 0; j < cols; j++) g[j] += -2;
            double w2 = worst(db, g, cols, 1e-4, 1e-4);
            CHECK(w1 <= 1 && w2 <= 1, "layernorm dw/db vs fd worst %g %g", w1, w2);
        }
        free(g);
    }
    free(x); free(dy); free(w); free(b); free(y); free(mean); free(rstd); free(dx); free(dw); free(db);
    free(xd); free(wd); free(bd); free(ry); free(rdx); free(rdw); free(rdb);
}
/* LayerNorm's row statistics in their documented order (cpu_nn_norm.c, ln_stats: 8 partial sums in double, lane l
 * adding the elements j ≡ l (mod 8) in turn, the last cols % 8 to lane 0, then 0 + lane 0 + … + lane 7), and y,
 * its FP8 cast and the cast's statistics: the AVX-512 rows (two at a time) and the AVX2 ones give these bits, over
 * row counts odd and even and row lengths around 8 and 16. */
static double ln_order_sum(const float *x, int64_t n, bool sq, double mu) {
    double l[8] = { 0 }, s = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double d = (double)x[j];
        if (sq) { d -= mu; d *= d; }
        l[j < (n & ~(int64_t)7) ? j % 8 : 0] += d;
    }
    for (int i = 0; i < 8; i++) s += l[i];
    return s;
}
TEST(nn_layernorm_avx512_same_bits) {
    static const int64_t Rs[] = { 1, 2, 5, 64 }, Cs[] = { 1, 3, 7, 8, 9, 15, 16, 17, 33, 256, 257 };
    for (unsigned ri = 0; ri < sizeof Rs / sizeof Rs[0]; ri++)
        for (unsigned ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++) {
            const int64_t R = Rs[ri], C = Cs[ci], n = R * C;
            /* so that the double sums round and their order shows: each lane of the 8 takes ±2^30, a value near
             * 2^-20, ∓2^30, another, in turn (a small value after a large one is lost, after the cancelling one
             * kept), the lanes alternate in sign (their sums cancel in the final sum), and the tail takes small
             * values */
            float *x = frand(n, 1, 2), *w = frand(C, 0.5, 1.5), *b = frand(C, -1, 1);
            for (int64_t i = 0; i < n; i++) {
                const int64_t j = i % C, k = j / 8, l = j % 8;
                const float sg = l % 2 ? -1.0f : 1.0f;
                if (j < (C & ~(int64_t)7) && k % 2 == 0) x[i] = (k % 4 ? -sg : sg) * 0x1p30f;
                else x[i] = (i % 3 ? 1.0f : -1.0f) * ldexpf(x[i], -20);
            }
            float *y[2] = { fzeros(n), fzeros(n) }, mean[2][64], rstd[2][64];
            uint8_t *q[2] = { malloc((size_t)n), malloc((size_t)n) };
            fl_cast_stats st[2];
            for (int wide = 0; wide < 2; wide++) {
                fl_cpu_avx512_allowed = wide;
                fl_cpu_layernorm_fwd(x, w, b, y[wide], mean[wide], rstd[wide], R, C, 1e-5f);
                const float sc = 40.0f;
                float used;
                REQUIRE_OK(fl_cpu_layernorm_quantize(x, w, b, q[wide], mean[wide], rstd[wide], R, C, 1e-5f, FL_E4M3,
                                                     &sc, 0, false, FL_SATURATE, &st[wide], &used));
                fl_cpu_avx512_allowed = true;
            }
            int bad = 0;
            for (int64_t r = 0; r < R; r++) {
                const double mu = ln_order_sum(x + r * C, C, false, 0.0) / (double)C;
                const double v = ln_order_sum(x + r * C, C, true, mu);
                const float m = (float)mu, rs = (float)(1.0 / sqrt(v / (double)C + (double)1e-5f));
                for (int wide = 0; wide < 2; wide++)
                    bad += fl_f2u(mean[wide][r]) != fl_f2u(m) || fl_f2u(rstd[wide][r]) != fl_f2u(rs);
                for (int64_t j = 0; j < C; j++) {
                    const float want = (x[r * C + j] - m) * rs * w[j] + b[j];
                    for (int wide = 0; wide < 2; wide++) bad += fl_f2u(y[wide][r * C + j]) != fl_f2u(want);
                }
            }
            CHECK(bad == 0, "[%lld, %lld]: %d values off the documented order", (long long)R, (long long)C, bad);
            CHECK(memcmp(q[0], q[1], (size_t)n) == 0 && fl_f2u(st[0].amax) == fl_f2u(st[1].amax) &&
                      st[0].underflow == st[1].underflow && st[0].saturated == st[1].saturated &&
                      st[0].nan == st[1].nan,
                  "[%lld, %lld]: the FP8 cast of y differs between AVX2 and AVX-512", (long long)R, (long long)C);
            free(x); free(w); free(b); free(y[0]); free(y[1]); free(q[0]); free(q[1]);
        }
}
TEST(nn_layernorm) {
    check_ln(fl__failed, 1, 1, 1, 1);     /* zero variance: y = b */
    check_ln(fl__failed, 1, 13, 1, 1);
    check_ln(fl__failed, 5, 37, 1, 1);
    check_ln(fl__failed, 5, 37, 0, 1);
    check_ln(fl__failed, 3, 1000, 1, 0);
    check_ln(fl__failed, 130, 1027, 1, 0);   /* threaded, column blocks with a ragged tail */
    /* a large offset: single-pass E[x²]−E[x]² in float would lose everything here */
    float x[4] = { 10000.0f, 10000.5f, 10001.0f, 10001.5f }, y[4], m, rs;
    fl_cpu_layernorm_fwd(x, NULL, NULL, y, &m, &rs, 1, 4, 0.0f);
    /* mean 10000.75, deviations ±0.25, ±0.75, variance 0.3125 */
    CHECK_CLOSE(m, 10000.75, 0, 1e-9);
    CHECK_CLOSE(y[0], -0.75 / sqrt(0.3125), 1e-5, 1e-5);
    CHECK_CLOSE(y[3], 0.75 / sqrt(0.3125), 1e-5, 1e-5);
}

/* LayerNorm's dw and db are each column's sums over chunks of 64 rows in double, combined in chunk order: bit for
 * bit that serial loop's sums whatever the thread count (widths under and past a vector, a ragged last chunk, one
 * row), and dx the same with and without them, and with its AVX-512 passes as with the AVX2 ones. */
TEST(nn_layernorm_param_grads_in_chunk_order) {
    static const int64_t shapes[][2] = { { 300, 256 }, { 77, 1027 }, { 5, 9 }, { 2048, 96 }, { 1, 40 } };
    const int threads0 = omp_get_max_threads();
    for (unsigned si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1], chunks = (rows + 63) / 64;
        float *x = frand(rows * cols, -2, 3), *dy = frand(rows * cols, -1, 1), *w = frand(cols, 0.5, 1.5);
        float *mean = malloc(rows * sizeof(float)), *rstd = malloc(rows * sizeof(float)), *y = fzeros(rows * cols);
        float *rw = frand(cols, -1, 1), *rb = frand(cols, -1, 1), *w0 = malloc(cols * sizeof(float)), *b0 = malloc(cols * sizeof(float));
        memcpy(w0, rw, cols * sizeof(float));   /* the sums add to what dw and db hold */
        memcpy(b0, rb, cols * sizeof(float));
        fl_cpu_layernorm_fwd(x, w, NULL, y, mean, rstd, rows, cols, 1e-5f);
        for (int64_t j = 0; j < cols; j++) {
            double tw = 0, tb = 0;
            for (int64_t ch = 0; ch < chunks; ch++) {
                double pw = 0, pb = 0;
                for (int64_t r = ch * 64; r < rows && r < (ch + 1) * 64; r++) {
                    const float g = dy[r * cols + j];
                    pw += (double)(g * (x[r * cols + j] - mean[r]) * rstd[r]);
                    pb += (double)g;
                }
                tw += pw; tb += pb;
            }
            rw[j] += (float)tw;
            rb[j] += (float)tb;
        }
        float *dx1 = fzeros(rows * cols);
        fl_cpu_avx512_allowed = false;
        REQUIRE_OK(fl_cpu_layernorm_bwd(x, w, mean, rstd, dy, dx1, NULL, NULL, rows, cols));
        for (int run = 0; run < 4; run++) {
            const int threads = run < 3 ? run + 1 : 2;
            fl_cpu_avx512_allowed = run < 3;   /* the AVX-512 passes where the CPU has them, then AVX2's */
            omp_set_num_threads(threads);
            float *dw = malloc(cols * sizeof(float)), *db = malloc(cols * sizeof(float)), *dx = fzeros(rows * cols);
            memcpy(dw, w0, cols * sizeof(float));
            memcpy(db, b0, cols * sizeof(float));
            REQUIRE_OK(fl_cpu_layernorm_bwd(x, w, mean, rstd, dy, dx, dw, db, rows, cols));
            CHECK(!memcmp(dw, rw, cols * sizeof(float)) && !memcmp(db, rb, cols * sizeof(float)),
                  "[%lld,%lld] threads %d: dw/db are not the chunked sums", (long long)rows, (long long)cols, threads);
            CHECK(!memcmp(dx, dx1, rows * cols * sizeof(float)), "[%lld,%lld] threads %d: dx differs", (long long)rows,
                  (long long)cols, threads);
            free(dw); free(db); free(dx);
        }
        fl_cpu_avx512_allowed = true;
        free(x); free(dy); free(w); free(mean); free(rstd); free(y); free(rw); free(rb); free(w0); free(b0); free(dx1);
    }
    omp_set_num_threads(threads0);
}

/* ---- embedding ----------------------------------------------------------------------------- */
TEST(nn_embedding) {
    int64_t vocab = 7, dim = 19, n = 11;
    float *wt = frand(vocab * dim, -1, 1), idx[11] = { 0, 6, 3, 3, 1, 0, 6, 6, 2, 5, 4 };
    float *y = fzeros(n * dim), *dy = frand(n * dim, -1, 1), *dw = frand(vocab * dim, 0.5, 0.5);
    CHECK_OK(fl_cpu_embedding_fwd(idx, n, wt, vocab, dim, y));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < dim; j++) CHECK(y[i * dim + j] == wt[(int64_t)idx[i] * dim + j], "y[%lld,%lld]", (long long)i, (long long)j);
    fl_cpu_embedding_bwd(idx, n, dy, dim, dw);
    double *ref = malloc(vocab * dim * sizeof(double));
    for (int64_t e = 0; e < vocab * dim; e++) ref[e] = 0.5;
    for (int64_t i = 0; i < n; i++) for (int64_t j = 0; j < dim; j++) ref[(int64_t)idx[i] * dim + j] += dy[i * dim + j];
    double w = worst(dw, ref, vocab * dim, 1e-6, 1e-6);
    CHECK(w <= 1, "embedding dweight worst %g", w);
    const float bad[] = { 7.0f, -1.0f, 2.5f, NAN };
    for (unsigned k = 0; k < 4; k++) {
        float bi[3] = { 1, 2, bad[k] };
        fl_status st = fl_cpu_embedding_fwd(bi, 3, wt, vocab, dim, y);
        CHECK(st == FL_EINVAL, "index %g: status %d", bad[k], (int)st);
        /* 2.5 lies inside [0, 7): said not to be a whole number, the others out of range */
        CHECK(strstr(fl_last_error(), bad[k] == 2.5f ? "is not a whole number" : "vocab size 7") != NULL,
              "message: %s", fl_last_error());
    }
    free(wt); free(y); free(dy); free(dw); free(ref);
    /* large: threaded column split with many repeats */
    vocab = 50; dim = 300; n = 1000;
    wt = frand(vocab * dim, -1, 1); dy = frand(n * dim, -1, 1); dw = fzeros(vocab * dim);
    float *ix = malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) ix[i] = (float)(int64_t)(urand() * vocab);
    fl_cpu_embedding_bwd(ix, n, dy, dim, dw);
    ref = calloc(vocab * dim, sizeof(double));
    for (int64_t i = 0; i < n; i++) for (int64_t j = 0; j < dim; j++) ref[(int64_t)ix[i] * dim + j] += dy[i * dim + j];
    w = worst(dw, ref, vocab * dim, 1e-5, 1e-5);
    CHECK(w <= 1, "embedding large dweight worst %g", w);
    free(wt); free(dy); free(dw); free(ref); free(ix);
}

/* ---- dropout ------------------------------------------------------------------------------- */
TEST(nn_dropout) {
    int64_t n = 1000003;
    float *x = frand(n, -1, 1), *y = fzeros(n), *y2 = fzeros(n), *dy = frand(n, -1, 1), *dx = fzeros(n);
    uint8_t *mask = malloc(n), *mask2 = malloc(n);
    fl_cpu_dropout_fwd(x, y, mask, n, 0.0f, 42, 0);
    int same = 1;
    for (int64_t i = 0; i < n; i++) same &= y[i] == x[i] && mask[i] == 1;
    CHECK(same, "p = 0 is the identity");
    fl_cpu_dropout_fwd(x, y, mask, n, 0.5f, 42, 0);
    int64_t kept = 0; int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        kept += mask[i];
        ok &= mask[i] ? y[i] == x[i] * 2.0f : y[i] == 0.0f;
    }
    double frac = (double)kept / n;
    CHECK(fabs(frac - 0.5) < 0.003, "kept fraction %g", frac);   /* 6 sigma at n = 1e6 */
    CHECK(ok, "kept values scaled by 1/(1-p), dropped are 0");
    fl_cpu_dropout_fwd(x, y2, mask2, n, 0.5f, 42, 0);
    CHECK(memcmp(mask, mask2, n) == 0 && memcmp(y, y2, n * sizeof(float)) == 0, "same seed → same mask");
    fl_cpu_dropout_fwd(x, y2, mask2, n, 0.5f, 43, 0);
    CHECK(memcmp(mask, mask2, n) != 0, "another seed → another mask");
    /* the mask of element i depends only on (seed, offset + i/4): a shifted call reproduces it */
    fl_cpu_dropout_fwd(x + 8, y2, mask2, 1001, 0.5f, 42, 2);
    CHECK(memcmp(mask + 8, mask2, 1001) == 0, "offset counts 4-element Philox blocks");
    /* the contract: element i keeps iff the top 24 bits of word i%4 of fl_philox4x32(seed, offset + i/4) >= p·2^24 */
    ok = 1;
    for (int64_t i = 0; i < 4099; i++) {
        uint32_t wd[4];
        fl_philox4x32(42, 5 + (uint64_t)(i / 4), wd);
        if (i == 0) fl_cpu_dropout_fwd(x, y2, mask2, 4099, 0.5f, 42, 5);
        ok &= mask2[i] == ((double)(wd[i % 4] >> 8) / 16777216.0 >= 0.5);
    }
    CHECK(ok, "mask follows fl_philox4x32(seed, offset + i/4)");
    fl_cpu_dropout_bwd(mask, dy, dx, n, 0.5f);
    ok = 1;
    for (int64_t i = 0; i < n; i++) ok &= dx[i] == (mask[i] ? dy[i] * 2.0f : 0.0f);
    CHECK(ok, "backward applies the forward mask and scale");
    {   /* a dropped element's gradient is dy·0, as torch's dy·mask·scale: NaN from a NaN or inf, -0 from a negative */
        const uint8_t m4[4] = { 0, 0, 0, 1 };
        const float g4[4] = { NAN, -INFINITY, -3.0f, NAN };
        float d4[4];
        fl_cpu_dropout_bwd(m4, g4, d4, 4, 0.5f);
        CHECK(isnan(d4[0]) && isnan(d4[1]) && isnan(d4[3]), "a NaN or inf gradient stays NaN where dropped");
        CHECK(d4[2] == 0.0f && signbit(d4[2]), "a negative gradient gives -0 where dropped, got %g", d4[2]);
        fl_cpu_dropout_bwd(m4, g4, d4, 4, 1.0f);   /* p = 1: every element dropped, dy·0 */
        CHECK(isnan(d4[1]) && signbit(d4[2]) && d4[2] == 0.0f, "p = 1: dy·0");
    }
    fl_cpu_dropout_fwd(x, y, mask, n, 0.1f, 7, 0);
    kept = 0;
    for (int64_t i = 0; i < n; i++) kept += mask[i];
    CHECK(fabs((double)kept / n - 0.9) < 0.002, "p = 0.1 kept fraction %g", (double)kept / n);
    CHECK_CLOSE(y[0], mask[0] ? x[0] / 0.9 : 0.0, 1e-7, 1e-6);
    fl_cpu_dropout_fwd(x, y, mask, 5, 1.0f, 7, 0);
    for (int i = 0; i < 5; i++) CHECK(y[i] == 0.0f && mask[i] == 0, "p = 1 drops all");
    free(x); free(y); free(y2); free(dy); free(dx); free(mask); free(mask2);
}

/* ---- attention ----------------------------------------------------------------------------- */
typedef struct { int64_t B, H, T, D; double scale; int causal; const float *dy; int which; double *q, *k, *v; } at_ctx;
static void sdpa_ref(const double *q, const double *k, const double *v, double *out, double *att,
                     int64_t BH, int64_t T, int64_t D, double scale, int causal) {
    double *s = malloc(T * sizeof(double));
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t i = 0; i < T; i++) {
            const double *qi = q + (bh * T + i) * D;
            double m = -INFINITY, z = 0;
            for (int64_t j = 0; j < T; j++) {
                if (causal && j > i) { s[j] = -INFINITY; continue; }
                double d = 0;
                for (int64_t e = 0; e < D; e++) d += qi[e] * k[(bh * T + j) * D + e];
                s[j] = d * scale;
                if (s[j] > m) m = s[j];
            }
            for (int64_t j = 0; j < T; j++) { s[j] = exp(s[j] - m); z += s[j]; }
            for (int64_t e = 0; e < D; e++) out[(bh * T + i) * D + e] = 0;
            for (int64_t j = 0; j < T; j++) {
                double p = s[j] / z;
                if (att) att[(bh * T + i) * T + j] = p;
                for (int64_t e = 0; e < D; e++) out[(bh * T + i) * D + e] += p * v[(bh * T + j) * D + e];
            }
        }
    free(s);
}
/* Analytic float64 backward from the reference probabilities: dV = Pᵀ dO, dS = P ⊙ (dO Vᵀ − rowsum),
 * dQ = scale·dS K, dK = scale·dSᵀ Q. */
static void sdpa_bwd_ref(const double *q, const double *k, const double *v, const double *att, const float *dout,
                         double *dq, double *dk, double *dv, int64_t BH, int64_t T, int64_t D, double scale) {
    double *ds = malloc(T * sizeof(double));
    for (int64_t e = 0; e < BH * T * D; e++) dq[e] = dk[e] = dv[e] = 0;
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t i = 0; i < T; i++) {
            const double *p = att + (bh * T + i) * T;
            const float *go = dout + (bh * T + i) * D;
            double rs = 0;
            for (int64_t j = 0; j < T; j++) {
                double dp = 0;
                for (int64_t e = 0; e < D; e++) dp += go[e] * v[(bh * T + j) * D + e];
                ds[j] = dp; rs += p[j] * dp;
            }
            for (int64_t j = 0; j < T; j++) {
                double g = scale * p[j] * (ds[j] - rs);
                for (int64_t e = 0; e < D; e++) {
                    dq[(bh * T + i) * D + e] += g * k[(bh * T + j) * D + e];
                    dk[(bh * T + j) * D + e] += g * q[(bh * T + i) * D + e];
                    dv[(bh * T + j) * D + e] += p[j] * go[e];
                }
            }
        }
    free(ds);
}

static double at_scalar(const double *p, void *vc) {
    at_ctx *c = vc;
    int64_t n = c->B * c->H * c->T * c->D;
    double *o = malloc(n * sizeof(double)), s = 0;
    sdpa_ref(c->which == 0 ? p : c->q, c->which == 1 ? p : c->k, c->which == 2 ? p : c->v, o, NULL,
             c->B * c->H, c->T, c->D, c->scale, c->causal);
    for (int64_t i = 0; i < n; i++) s += c->dy[i] * o[i];
    free(o);
    return s;
}

static void check_sdpa(int *fl__failed, int64_t B, int64_t H, int64_t T, int64_t D, int causal, int fd) {
    int64_t n = B * H * T * D, na = B * H * T * T;
    float scale = (float)(1.0 / sqrt((double)D));
    float *q = frand(n, -2, 2), *k = frand(n, -2, 2), *v = frand(n, -1, 1), *dy = frand(n, -1, 1);
    float *o = fzeros(n), *att = frand(na, 9, 9), *dq = frand(n, 5, 5), *dk = frand(n, 5, 5), *dv = frand(n, 5, 5);
    double *qd = dcopy(q, n), *kd = dcopy(k, n), *vd = dcopy(v, n);
    double *ro = malloc(n * sizeof(double)), *ra = malloc(na * sizeof(double));
    sdpa_ref(qd, kd, vd, ro, ra, B * H, T, D, scale, causal);
    fl_cpu_sdpa_causal_fwd(q, k, v, o, att, B, H, T, D, scale, causal, false);
    double wo = worst(o, ro, n, 1e-5, 1e-4), wa = worst(att, ra, na, 1e-6, 1e-4);
    CHECK(wo <= 1 && wa <= 1, "sdpa B%lld H%lld T%lld D%lld causal %d fwd worst out %g att %g",
          (long long)B, (long long)H, (long long)T, (long long)D, causal, wo, wa);
    fl_cpu_sdpa_causal_bwd(q, k, v, att, dy, dq, dk, dv, B, H, T, D, scale, causal, false);
    {
        double *r[3] = { malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(n * sizeof(double)) };
        sdpa_bwd_ref(qd, kd, vd, ra, dy, r[0], r[1], r[2], B * H, T, D, scale);
        const float *got[3] = { dq, dk, dv };
        for (int w = 0; w < 3; w++) {
            double e = worst(got[w], r[w], n, 1e-5, 1e-4);
            CHECK(e <= 1, "sdpa B%lld H%lld T%lld D%lld causal %d grad %d vs analytic worst %g",
                  (long long)B, (long long)H, (long long)T, (long long)D, causal, w, e);
            free(r[w]);
        }
    }
    if (fd) {
        at_ctx c = { B, H, T, D, scale, causal, dy, 0, qd, kd, vd };
        double *g = malloc(n * sizeof(double));
        const float *got[3] = { dq, dk, dv };
        double *arg[3] = { qd, kd, vd };
        const char *nm[3] = { "dq", "dk", "dv" };
        for (int w = 0; w < 3; w++) {
            c.which = w;
            fd_grad(at_scalar, &c, arg[w], n, g);
            double e = worst(got[w], g, n, 1e-4, 1e-3);
            CHECK(e <= 1, "sdpa B%lld H%lld T%lld D%lld causal %d %s vs fd worst %g",
                  (long long)B, (long long)H, (long long)T, (long long)D, causal, nm[w], e);
        }
        free(g);
    }
    free(q); free(k); free(v); free(dy); free(o); free(att); free(dq); free(dk); free(dv);
    free(qd); free(kd); free(vd); free(ro); free(ra);
}
TEST(nn_sdpa) {
    for (int causal = 0; causal <= 1; causal++) {
        check_sdpa(fl__failed, 1, 1, 1, 1, causal, 1);    /* T = 1: out = v */
        check_sdpa(fl__failed, 1, 2, 5, 3, causal, 1);
        check_sdpa(fl__failed, 2, 3, 17, 13, causal, 1);
        check_sdpa(fl__failed, 2, 2, 33, 16, causal, 0);  /* threaded path */
        check_sdpa(fl__failed, 1, 2, 130, 64, causal, 0);
    }
}
/* The GEMM path splits causal attention into blocks of query rows (about 64 each, at most 8 blocks):
 * lengths around the block size, ragged last blocks and the 8-block cap, on both row-pass copies (the fp32
 * per-head kernels, which run first, switched off). */
TEST(nn_sdpa_blocks) {
    static const int64_t Ts[] = { 2, 63, 64, 65, 127, 128, 129, 200, 577 };
    fl_cpu_attn_f32_allowed = false;
    for (int wide = 1; wide >= 0; wide--) {
        fl_cpu_avx512_allowed = wide;
        for (unsigned i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
            for (int causal = 1; causal >= 0; causal--) {
                if (Ts[i] > 200 && !causal) continue;   /* one block either way: covered above */
                check_sdpa(fl__failed, 1, 2, Ts[i], Ts[i] > 200 ? 8 : 16, causal, 0);
            }
    }
    fl_cpu_avx512_allowed = true;
    fl_cpu_attn_f32_allowed = true;
}
/* fp32 attention through the per-head AVX2 + FMA family (cpu_nn_attn_fma.c with its operands unrounded), which
 * every CPU runs (its products on 16 lanes where the CPU has AVX-512, on 8 with AVX-512 disallowed): every
 * remainder of its 6-row and 16- or 64-column register tiles, odd T and D, one and several row tiles, against the
 * float64 references (and finite differences on the small shapes). */
TEST(nn_sdpa_f32_heads) {
    REQUIRE(fl_cpu_attn_f32_available(), "the fp32 kernels do not run on this CPU");
    for (int wide = 1; wide >= 0; wide--) {
        if (wide && !fl_cpu_avx512()) continue;
        fl_cpu_avx512_allowed = wide;
        for (int causal = 0; causal <= 1; causal++) {
            check_sdpa(fl__failed, 1, 1, 1, 1, causal, 1);
            check_sdpa(fl__failed, 1, 2, 5, 3, causal, 1);
            check_sdpa(fl__failed, 2, 3, 17, 13, causal, 1);
            check_sdpa(fl__failed, 1, 3, 7, 9, causal, 1);
            check_sdpa(fl__failed, 2, 2, 33, 16, causal, 0);
            check_sdpa(fl__failed, 1, 2, 130, 64, causal, 0);
            check_sdpa(fl__failed, 1, 1, 200, 24, causal, 0);
            check_sdpa(fl__failed, 1, 1, 70, 80, causal, 0);   /* two 16-lane column blocks, the second partial */
        }
    }
    fl_cpu_avx512_allowed = true;
}
/* The per-row fallback (used when a GEMM cannot run) against the same references. */
TEST(nn_sdpa_fallback) {
    fl_cpu_sdpa_gemm_allowed = false;
    for (int causal = 0; causal <= 1; causal++) {
        check_sdpa(fl__failed, 1, 2, 5, 3, causal, 1);
        check_sdpa(fl__failed, 2, 2, 33, 16, causal, 0);
        check_sdpa(fl__failed, 1, 2, 130, 64, causal, 0);
    }
    fl_cpu_sdpa_gemm_allowed = true;
}
/* bf16 attention (bf16 autocast): q, k, v, P, dO and dS enter the GEMMs as bf16, products accumulate in
 * fp32. Checked against float64 built from the same rounded operands: P against softmax(bf16 q·bf16 kᵀ);
 * out and dV against sums over the kernel's own P rounded to bf16 (so no rounding tie can differ: fp32
 * accumulation bounds); dQ and dK, whose dS is computed in fp32 and then rounded, within bf16's half ulp
 * per term. The GEMM path and the fallback must both do it, and bf16 must differ from fp32. */
static double bfr(double x) { return fl_bf16_to_f32(fl_f32_to_bf16((float)x)); }
static void check_sdpa_bf16(int *fl__failed, int64_t B, int64_t H, int64_t T, int64_t D, int causal) {
    const int64_t BH = B * H, n = BH * T * D, na = BH * T * T;
    const float scale = (float)(1.0 / sqrt((double)D));
    float *q = frand(n, -2, 2), *k = frand(n, -2, 2), *v = frand(n, -1, 1), *dy = frand(n, -1, 1);
    float *o = fzeros(n), *o32 = fzeros(n), *att = fzeros(na), *att32 = fzeros(na);
    float *dq = fzeros(n), *dk = fzeros(n), *dv = fzeros(n);
    double *qr = malloc(n * sizeof(double)), *kr = malloc(n * sizeof(double)), *vr = malloc(n * sizeof(double));
    double *gr = malloc(n * sizeof(double)), *ra = malloc(na * sizeof(double)), *ro = malloc(n * sizeof(double));
    for (int64_t i = 0; i < n; i++) { qr[i] = bfr(q[i]); kr[i] = bfr(k[i]); vr[i] = bfr(v[i]); gr[i] = bfr(dy[i]); }
    sdpa_ref(qr, kr, vr, ro, ra, BH, T, D, scale, causal);
    fl_cpu_sdpa_causal_fwd(q, k, v, o, att, B, H, T, D, scale, causal, true);
    fl_cpu_sdpa_causal_fwd(q, k, v, o32, att32, B, H, T, D, scale, causal, false);
    CHECK(worst(att, ra, na, 1e-6, 1e-4) <= 1, "bf16 sdpa T%lld D%lld causal %d: probabilities off", (long long)T,
          (long long)D, causal);
    for (int path = 0; path < 2; path++) {   /* 0: the GEMMs; 1: the per-row fallback */
        fl_cpu_sdpa_gemm_allowed = path == 0;
        fl_cpu_sdpa_causal_fwd(q, k, v, o, att, B, H, T, D, scale, causal, true);
        fl_cpu_sdpa_causal_bwd(q, k, v, att, dy, dq, dk, dv, B, H, T, D, scale, causal, true);
        fl_cpu_sdpa_gemm_allowed = true;
        double *r_o = calloc(n, sizeof(double)), *m_o = calloc(n, sizeof(double)), *r_dv = calloc(n, sizeof(double));
        double *m_dv = calloc(n, sizeof(double)), *r_dq = calloc(n, sizeof(double)), *m_dq = calloc(n, sizeof(double));
        double *r_dk = calloc(n, sizeof(double)), *m_dk = calloc(n, sizeof(double));
        /* out and dV from the kernel's P, rounded: fp32 accumulation of exact bf16 products */
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t i = 0; i < T; i++) {
                const float *p = att + (bh * T + i) * T;
                double dp[1024], rs = 0;
                for (int64_t j = 0; j < T; j++) {
                    double pr = bfr(p[j]), d = 0;
                    for (int64_t e = 0; e < D; e++) {
                        r_o[(bh * T + i) * D + e] += pr * vr[(bh * T + j) * D + e];
                        m_o[(bh * T + i) * D + e] += fabs(pr * vr[(bh * T + j) * D + e]);
                        r_dv[(bh * T + j) * D + e] += pr * gr[(bh * T + i) * D + e];
                        m_dv[(bh * T + j) * D + e] += fabs(pr * gr[(bh * T + i) * D + e]);
                        d += gr[(bh * T + i) * D + e] * vr[(bh * T + j) * D + e];
                    }
                    dp[j] = d;
                    rs += p[j] * d;
                }
                for (int64_t j = 0; j < T; j++) {
                    double g = scale * p[j] * (dp[j] - rs);
                    for (int64_t e = 0; e < D; e++) {
                        r_dq[(bh * T + i) * D + e] += g * kr[(bh * T + j) * D + e];
                        m_dq[(bh * T + i) * D + e] += fabs(g * kr[(bh * T + j) * D + e]);
                        r_dk[(bh * T + j) * D + e] += g * qr[(bh * T + i) * D + e];
                        m_dk[(bh * T + j) * D + e] += fabs(g * qr[(bh * T + i) * D + e]);
                    }
                }
            }
        int bad_o = 0, bad_dv = 0, bad_dq = 0, bad_dk = 0, diff32 = 0;
        const double acc = (double)(T + 2) * 0x1p-24, half_ulp = 0x1p-8;
        for (int64_t i = 0; i < n; i++) {
            bad_o += !(fabs(o[i] - r_o[i]) <= acc * m_o[i] + 1e-30);
            bad_dv += !(fabs(dv[i] - r_dv[i]) <= acc * m_dv[i] + 1e-30);
            /* dS: fp32 arithmetic, then one bf16 rounding per term (half an ulp, 2^-9 relative; 2^-8 allows
             * for the fp32 dS landing on the other side of a tie) */
            bad_dq += !(fabs(dq[i] - r_dq[i]) <= (half_ulp + 1e-5) * m_dq[i] + 1e-6);
            bad_dk += !(fabs(dk[i] - r_dk[i]) <= (half_ulp + 1e-5) * m_dk[i] + 1e-6);
            diff32 += o[i] != o32[i];
        }
        CHECK(bad_o + bad_dv + bad_dq + bad_dk == 0, "bf16 sdpa %s T%lld D%lld causal %d: out %d, dv %d, dq %d, dk %d of %lld off",
              path ? "fallback" : "gemm", (long long)T, (long long)D, causal, bad_o, bad_dv, bad_dq, bad_dk, (long long)n);
        CHECK(diff32 > n / 4, "bf16 sdpa %s: only %d of %lld outputs differ from fp32 attention", path ? "fallback" : "gemm",
              diff32, (long long)n);
        free(r_o); free(m_o); free(r_dv); free(m_dv); free(r_dq); free(m_dq); free(r_dk); free(m_dk);
    }
    free(q); free(k); free(v); free(dy); free(o); free(o32); free(att); free(att32); free(dq); free(dk); free(dv);
    free(qr); free(kr); free(vr); free(gr); free(ra); free(ro);
}
/* check_sdpa_bf16 on each {B, H, T, D} of a list, without and with the causal mask */
typedef struct { int64_t B, H, T, D; } sdpa_case;
static void check_sdpa_bf16_cases(int *fl__failed, const sdpa_case *c, int n) {
    for (int causal = 0; causal <= 1; causal++)
        for (int i = 0; i < n; i++) check_sdpa_bf16(fl__failed, c[i].B, c[i].H, c[i].T, c[i].D, causal);
}
#define SDPA_CASES(...) \
    (const sdpa_case[]){ __VA_ARGS__ }, (int)(sizeof((const sdpa_case[]){ __VA_ARGS__ }) / sizeof(sdpa_case))
TEST(nn_sdpa_bf16) {
    check_sdpa_bf16_cases(fl__failed, SDPA_CASES({ 1, 2, 5, 8 }, { 2, 2, 33, 16 }, { 1, 2, 130, 64 }));
}
/* The tests above run the per-head kernels (cpu_nn_attn_bf16.c, or cpu_nn_attn_fma.c on CPUs without AVX-512
 * BF16); run the batched GEMMs too (where oneDNN has no bf16 kernel, on CPUs without AVX-512, the per-row
 * fallback), and the kernels on odd T and D (padded pairs) and one row tile's worth of rows. */
TEST(nn_sdpa_bf16_gemm) {
    fl_cpu_attn_bf16_allowed = false;
    check_sdpa_bf16_cases(fl__failed, SDPA_CASES({ 2, 2, 33, 16 }, { 1, 2, 130, 64 }));
    fl_cpu_attn_bf16_allowed = true;
}
TEST(nn_sdpa_bf16_odd) {
    check_sdpa_bf16_cases(fl__failed, SDPA_CASES({ 1, 3, 17, 13 }, { 2, 1, 4, 7 }, { 1, 1, 1, 5 }));
}
/* Where the CPU has AMX-BF16 the kernels' products run on the tile unit (16-row tiles, whole 16-pair steps on the
 * tiles, the rest on the vdpbf16ps tiles, added): the checks with it on (D 48: 16 + 8 pairs of the head
 * dimension; T 70 and 130: remainders of the 16-row tiles, causal bands ending on 8 pairs) and off (the
 * vdpbf16ps tiles alone, as on CPUs without AMX). */
TEST(nn_sdpa_bf16_amx) {
    if (!fl_cpu_amx()) {
        fprintf(stderr, "  (skipped: no AMX-BF16 on this CPU, or Linux refused the tiles)\n");
        return;
    }
    for (int on = 1; on >= 0; on--) {
        fl_cpu_attn_amx_allowed = on;
        check_sdpa_bf16_cases(fl__failed,
                              SDPA_CASES({ 1, 2, 70, 48 }, { 1, 2, 130, 64 }, { 2, 1, 33, 32 }, { 1, 1, 17, 13 }));
    }
    fl_cpu_attn_amx_allowed = true;
}
/* The statistics form (fl_cpu_attn_bf16_stats_*: each row's max and 1/Σ kept, P made again in the backward) gives
 * the bits of the form that keeps P, forward and backward: contiguous and packed heads, causal and not, odd T and D,
 * one and two threads, in each family (the AVX512_BF16 one on the tile unit and off it, the AVX2 + FMA one on 16
 * and 8 lanes); and a NaN score row stays what it was. */
static void check_stats_bits(int *fl__failed, int64_t B, int64_t H, int64_t T, int64_t D, int causal, bool packed) {
    const int64_t C = H * D, ldi = packed ? 3 * C : C, n = B * T * ldi, no = B * T * C;
    const fl_attn_layout in = { T * ldi, D, ldi }, ol = { T * C, D, C };
    float *x = frand(n, -2, 2), *dy = frand(no, -1, 1);
    if (T > 3 && D > 1) x[2 * ldi + 1] = NAN;   /* q of row 2, head 0 of batch 0: a NaN row of scores */
    const float *q = x, *k = packed ? x + C : frand(n, -2, 2), *v = packed ? x + 2 * C : frand(n, -1, 1);
    float *o[2], *dq[2], *dk[2], *dv[2], *att = fzeros(B * H * T * T), *st = fzeros(B * H * T * 2);
    for (int f = 0; f < 2; f++) {
        o[f] = fzeros(no); dq[f] = fzeros(n); dk[f] = fzeros(n); dv[f] = fzeros(n);
        fl_status a = f ? fl_cpu_attn_bf16_stats_fwd_at(q, k, v, in, o[f], ol, st, B, H, T, D, 0.3f, causal)
                        : fl_cpu_attn_bf16_fwd_at(q, k, v, in, o[f], ol, att, B, H, T, D, 0.3f, causal);
        fl_status b = f ? fl_cpu_attn_bf16_stats_bwd_at(q, k, v, in, st, dy, ol, dq[f], dk[f], dv[f], in, B, H, T, D, 0.3f, causal)
                        : fl_cpu_attn_bf16_bwd_at(q, k, v, in, att, dy, ol, dq[f], dk[f], dv[f], in, B, H, T, D, 0.3f, causal);
        CHECK(a == FL_OK && b == FL_OK, "stats form %d: %d %d", f, a, b);
    }
    CHECK(memcmp(o[0], o[1], (size_t)no * 4) == 0 && memcmp(dq[0], dq[1], (size_t)n * 4) == 0 &&
          memcmp(dk[0], dk[1], (size_t)n * 4) == 0 && memcmp(dv[0], dv[1], (size_t)n * 4) == 0,
          "attention's statistics form differs from P's: B%lld H%lld T%lld D%lld causal %d packed %d", (long long)B,
          (long long)H, (long long)T, (long long)D, causal, packed);
    int finite = 1;   /* every row's max and 1/Σ but the NaN row's (head 0, row 2) */
    for (int64_t i = 0; i < B * H * T * 2; i++) finite &= isfinite(st[i]) || (T > 3 && D > 1 && i / 2 == 2);
    CHECK(finite, "attention statistics: a row's max or 1/Σ is not finite (B%lld H%lld T%lld D%lld)", (long long)B,
          (long long)H, (long long)T, (long long)D);
    for (int f = 0; f < 2; f++) { free(o[f]); free(dq[f]); free(dk[f]); free(dv[f]); }
    if (!packed) { free((float *)k); free((float *)v); }
    free(x); free(dy); free(att); free(st);
}
TEST(nn_sdpa_bf16_stats_same_bits) {
    REQUIRE(fl_cpu_attn_bf16_stats_available(), "attention's statistics form does not run on this CPU");
    const int nt = omp_get_max_threads();
    const int64_t shapes[][4] = { { 2, 2, 70, 48 }, { 1, 2, 130, 64 }, { 2, 1, 33, 32 }, { 1, 1, 17, 13 }, { 1, 3, 5, 8 },
                                  { 1, 1, 65, 80 } };
    for (int fam = 0; fam < 4; fam++) {   /* AVX512_BF16 with and without the tiles; AVX2 + FMA on 16 and 8 lanes */
        fl_cpu_attn_amx_allowed = fam == 0;
        fl_cpu_avx512_bf16_allowed = fam < 2;
        fl_cpu_avx512_allowed = fam < 3;
        for (int t = 1; t <= 2; t++) {
            omp_set_num_threads(t);
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
                for (int causal = 0; causal <= 1; causal++)
                    for (int packed = 0; packed <= 1; packed++)
                        check_stats_bits(fl__failed, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], causal, packed);
        }
    }
    omp_set_num_threads(nt);
    fl_cpu_attn_amx_allowed = fl_cpu_avx512_bf16_allowed = fl_cpu_avx512_allowed = true;
}
/* CPUs without AVX-512 BF16 run the kernels' AVX2 + FMA family (cpu_nn_attn_fma.c): with AVX-512 disallowed the
 * checks above run it on every CPU on 8 lanes, and with AVX512_BF16 disallowed on AVX-512 CPUs on 16: every
 * remainder of its 6-row and 16- or 64-column register tiles, odd T and D. */
TEST(nn_sdpa_bf16_fma) {
    for (int wide = 1; wide >= 0; wide--) {
        if (wide && !fl_cpu_avx512()) continue;
        fl_cpu_avx512_allowed = wide;
        fl_cpu_avx512_bf16_allowed = false;
        check_sdpa_bf16_cases(fl__failed, SDPA_CASES({ 1, 2, 5, 8 }, { 2, 2, 33, 16 }, { 1, 2, 130, 64 }, { 1, 3, 17, 13 },
                                                     { 1, 1, 1, 5 }, { 1, 1, 70, 80 }));
    }
    fl_cpu_avx512_allowed = true;
    fl_cpu_avx512_bf16_allowed = true;
}
/* The AVX2 + FMA family's products on 16 lanes (where the CPU has AVX-512) make each sum in the 8-lane products'
 * order, so both give the same bits: bf16 and fp32 forms, forward and backward, contiguous and packed heads, causal
 * and not, T and D around the tiles' 6 rows and 8, 16 and 64 columns. */
/* fetch: instead of the lanes, the next head's rows fetched early (fl_cpu_attn_fetch_next) or not, which changes no
 * bit either (prefetches only). */
static void fma_switch_bits(int *fl__failed, int64_t B, int64_t H, int64_t T, int64_t D, int causal, bool packed, bool f32,
                            bool fetch) {
    const int64_t C = H * D, ldi = packed ? 3 * C : C, n = B * T * ldi, no = B * T * C;
    const fl_attn_layout in = { T * ldi, D, ldi }, ol = { T * C, D, C };
    float *x = frand(n, -2, 2), *y = frand(n, -2, 2), *z = frand(n, -1, 1), *dy = frand(no, -1, 1);
    const float *q = x, *k = packed ? x + C : y, *v = packed ? x + 2 * C : z;
    fl_attn_fwd_at_fn *fwd = f32 ? fl_cpu_attn_f32_fwd_at : fl_cpu_attn_fma_fwd_at;
    fl_attn_bwd_at_fn *bwd = f32 ? fl_cpu_attn_f32_bwd_at : fl_cpu_attn_fma_bwd_at;
    float *o[2], *att[2], *dq[2], *dk[2], *dv[2];
    for (int w = 0; w < 2; w++) {
        if (fetch) fl_cpu_attn_fetch_next = w == 0;
        else fl_cpu_attn_fma512_allowed = w == 0;
        o[w] = fzeros(no); att[w] = fzeros(B * H * T * T); dq[w] = fzeros(n); dk[w] = fzeros(n); dv[w] = fzeros(n);
        fl_status a = fwd(q, k, v, in, o[w], ol, att[w], B, H, T, D, 0.3f, causal);
        fl_status b = bwd(q, k, v, in, att[w], dy, ol, dq[w], dk[w], dv[w], in, B, H, T, D, 0.3f, causal);
        CHECK(a == FL_OK && b == FL_OK, "fma attention %s: %d %d",
              fetch ? (w ? "without fetch" : "with fetch") : w ? "8 lanes" : "16 lanes", a, b);
    }
    fl_cpu_attn_fma512_allowed = true;
    fl_cpu_attn_fetch_next = true;
    const size_t sa = (size_t)(B * H * T * T) * 4;
    CHECK(memcmp(o[0], o[1], (size_t)no * 4) == 0 && memcmp(att[0], att[1], sa) == 0 &&
          memcmp(dq[0], dq[1], (size_t)n * 4) == 0 && memcmp(dk[0], dk[1], (size_t)n * 4) == 0 &&
          memcmp(dv[0], dv[1], (size_t)n * 4) == 0,
          "fma attention (%s) %s: B%lld H%lld T%lld D%lld causal %d packed %d", f32 ? "fp32" : "bf16",
          fetch ? "with the next head fetched differs from without" : "on 16 lanes differs from 8",
          (long long)B, (long long)H, (long long)T, (long long)D, causal, packed);
    for (int w = 0; w < 2; w++) { free(o[w]); free(att[w]); free(dq[w]); free(dk[w]); free(dv[w]); }
    free(x); free(y); free(z); free(dy);
}
TEST(nn_sdpa_fma_wide_same_bits) {
    if (!fl_cpu_avx512()) {
        fprintf(stderr, "  (skipped: no AVX-512 on this CPU)\n");
        return;
    }
    const int64_t shapes[][4] = { { 1, 1, 1, 5 }, { 2, 2, 7, 8 }, { 1, 2, 17, 13 }, { 2, 1, 33, 16 }, { 1, 2, 70, 48 },
                                  { 1, 1, 130, 64 }, { 1, 1, 65, 80 }, { 1, 3, 24, 72 } };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int causal = 0; causal <= 1; causal++)
            for (int packed = 0; packed <= 1; packed++)
                for (int f32 = 0; f32 <= 1; f32++)
                    fma_switch_bits(fl__failed, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], causal, packed,
                                    f32, false);
}
/* The next head's rows asked for early or not: the same bits (several heads, so that every head but the last has a
 * next one; packed and contiguous heads, bf16 and fp32 forms, causal and not). The family's products on 8 lanes. */
TEST(nn_sdpa_fma_fetch_same_bits) {
    if (!fl_cpu_attn_fma_usable()) {
        fprintf(stderr, "  (skipped: no AVX2 + FMA on this CPU)\n");
        return;
    }
    fl_cpu_attn_fma512_allowed = false;
    const int64_t shapes[][4] = { { 2, 2, 7, 8 }, { 1, 3, 17, 13 }, { 2, 2, 33, 16 }, { 2, 2, 64, 64 } };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int causal = 0; causal <= 1; causal++)
            for (int packed = 0; packed <= 1; packed++)
                for (int f32 = 0; f32 <= 1; f32++)
                    fma_switch_bits(fl__failed, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], causal, packed,
                                    f32, true);
    fl_cpu_attn_fma512_allowed = true;
}
/* Each head is done by one thread in a fixed order: the results are the same bits on 1 and 2 threads, in each
 * kernel family (bf16: AVX512_BF16 where the CPU has it, AVX2 + FMA with AVX-512 disallowed; fp32: AVX2 + FMA
 * with AVX-512 disallowed). */
TEST(nn_sdpa_bf16_threads) {
    const int64_t B = 2, H = 3, T = 45, D = 24, n = B * H * T * D, na = B * H * T * T;
    float *q = frand(n, -2, 2), *k = frand(n, -2, 2), *v = frand(n, -1, 1), *dy = frand(n, -1, 1);
    float *r[2][5];
    const int nt = omp_get_max_threads();
    for (int fam = 0; fam < 3; fam++) {
        fl_cpu_avx512_allowed = fam == 0;
        const bool bf16 = fam < 2;
        for (int t = 0; t < 2; t++) {
            omp_set_num_threads(t ? 2 : 1);
            for (int i = 0; i < 5; i++) r[t][i] = fzeros(i == 1 ? na : n);
            fl_cpu_sdpa_causal_fwd(q, k, v, r[t][0], r[t][1], B, H, T, D, 0.2f, 1, bf16);
            fl_cpu_sdpa_causal_bwd(q, k, v, r[t][1], dy, r[t][2], r[t][3], r[t][4], B, H, T, D, 0.2f, 1, bf16);
        }
        omp_set_num_threads(nt);
        for (int i = 0; i < 5; i++) {
            CHECK(memcmp(r[0][i], r[1][i], (size_t)(i == 1 ? na : n) * sizeof(float)) == 0,
                  "%s sdpa output %d differs between 1 and 2 threads (AVX-512 %s)", bf16 ? "bf16" : "fp32", i,
                  fam ? "off" : "allowed");
            free(r[0][i]); free(r[1][i]);
        }
    }
    fl_cpu_avx512_allowed = true;
    free(q); free(k); free(v); free(dy);
}
/* A row whose probabilities underflow to exact zeros up to the diagonal still gets the right gradient
 * (the backward trims rows at the last nonzero probability). */
TEST(nn_sdpa_underflow_rows) {
    int64_t T = 70, D = 4, n = T * D;
    float *q = frand(n, -1, 1), *k = frand(n, -1, 1), *v = frand(n, -1, 1), *dy = frand(n, -1, 1);
    /* row 5 attends only to key 2 (its other scores are > 104 below: exp underflows to 0, so the row
     * ends in zeros before the diagonal); the other rows, whose queries are small, stay well conditioned */
    for (int64_t e = 0; e < D; e++) { k[2 * D + e] = e % 2 ? -1.0f : 1.0f; q[5 * D + e] = e % 2 ? -1000.0f : 1000.0f; }
    float *o = fzeros(n), *att = fzeros(T * T), *dq = fzeros(n), *dk = fzeros(n), *dv = fzeros(n);
    double *qd = dcopy(q, n), *kd = dcopy(k, n), *vd = dcopy(v, n), *ro = malloc(n * sizeof(double)), *ra = malloc(T * T * sizeof(double));
    double *r[3] = { malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(n * sizeof(double)) };
    sdpa_ref(qd, kd, vd, ro, ra, 1, T, D, 0.5, 1);
    fl_cpu_sdpa_causal_fwd(q, k, v, o, att, 1, 1, T, D, 0.5f, 1, false);
    int zeros = 0;
    for (int64_t j = 0; j <= 5; j++) zeros += att[5 * T + j] == 0.0f;
    CHECK(zeros == 5 && att[5 * T + 2] == 1.0f, "row 5: %d zeros, p52 %g", zeros, att[5 * T + 2]);
    fl_cpu_sdpa_causal_bwd(q, k, v, att, dy, dq, dk, dv, 1, 1, T, D, 0.5f, 1, false);
    sdpa_bwd_ref(qd, kd, vd, ra, dy, r[0], r[1], r[2], 1, T, D, 0.5);
    const float *got[3] = { dq, dk, dv };
    for (int w = 0; w < 3; w++) {
        double e = worst(got[w], r[w], n, 1e-5, 1e-4);
        CHECK(e <= 1, "grad %d worst %g", w, e);
        free(r[w]);
    }
    free(q); free(k); free(v); free(dy); free(o); free(att); free(dq); free(dk); free(dv);
    free(qd); free(kd); free(vd); free(ro); free(ra);
}
TEST(nn_sdpa_causal_mask) {
    /* first query attends only to the first key: out[0] = v[0]; att above the diagonal is exactly 0 */
    int64_t T = 6, D = 4;
    float *q = frand(T * D, -1, 1), *k = frand(T * D, -1, 1), *v = frand(T * D, -1, 1), *o = fzeros(T * D), *att = frand(T * T, 3, 3);
    fl_cpu_sdpa_causal_fwd(q, k, v, o, att, 1, 1, T, D, 0.5f, 1, false);
    for (int64_t d = 0; d < D; d++) CHECK_CLOSE(o[d], v[d], 1e-7, 1e-6);
    for (int64_t i = 0; i < T; i++) for (int64_t j = i + 1; j < T; j++) CHECK(att[i * T + j] == 0.0f, "att[%lld,%lld]", (long long)i, (long long)j);
    fl_cpu_sdpa_causal_fwd(q, k, v, o, att, 1, 1, T, D, 0.5f, 0, false);
    int any = 0;
    for (int64_t j = 1; j < T; j++) any |= att[j] != 0.0f;
    CHECK(any, "non-causal first row attends to later keys");
    free(q); free(k); free(v); free(o); free(att);
}

/* ---- column reduction (bias gradients) ------------------------------------------------------- */
/* Reducing dim 0 of a contiguous [R, C] matrix streams rows into per-column accumulators, tile by
 * tile of columns: compare with float64 sums / exact extrema, for widths around the tile size, both
 * dtypes the kernel reads differently (fp32 in place, bf16 through conversion), and check that the
 * result does not depend on the thread count. */
static void check_colreduce(int *fl__failed, int64_t R, int64_t C, fl_dtype dt) {
    int64_t shape[2] = { R, C };
    float *x = frand(R * C, -3, 3);
    if (R * C > 7) x[7] = 1e7f;   /* a large value: float accumulation would lose the small ones */
    fl_tensor *a, *out;
    if (fl_tensor_from_f32(&a, x, 2, shape, dt) != FL_OK) { CHECK(0, "from_f32: %s", fl_last_error()); free(x); return; }
    float *xv = malloc((size_t)(R * C) * sizeof(float));
    fl_tensor_read_f32(a, xv);   /* the values as stored (bf16-rounded) */
    float *got = malloc((size_t)C * sizeof(float));
    const double rtol = dt == FL_F32 ? 1e-6 : 1.0 / 256;   /* the result is stored in the input dtype */
    for (int op = 0; op < FL_REDOP_COUNT; op++) {
        if (fl_reduce_raw(&out, (fl_redop)op, a, 0, false) != FL_OK) { CHECK(0, "reduce: %s", fl_last_error()); continue; }
        fl_tensor_read_f32(out, got);
        fl_tensor_release(out);
        int bad = 0;
        for (int64_t j = 0; j < C; j++) {
            double s = 0, mx = -INFINITY, mn = INFINITY, am = 0;
            for (int64_t r = 0; r < R; r++) {
                double v = xv[r * C + j];
                s += v; mx = v > mx ? v : mx; mn = v < mn ? v : mn; am = fabs(v) > am ? fabs(v) : am;
            }
            double ref = op == FL_OP_SUM ? s : op == FL_OP_MEAN ? s / (double)R : op == FL_OP_MAX ? mx : op == FL_OP_MIN ? mn : am;
            bad += !(fabs(got[j] - ref) <= rtol * fabs(ref) + 1e-6);
        }
        CHECK(bad == 0, "%s over dim 0 of [%lld, %lld] %s: %d of %lld columns wrong", fl_redop_names[op],
              (long long)R, (long long)C, fl_format(dt)->name, bad, (long long)C);
    }
    /* thread count independence: bit-identical sums with 1 and 2 threads */
    int nt = omp_get_max_threads();
    float *g1 = malloc((size_t)C * sizeof(float));
    omp_set_num_threads(1);
    if (fl_reduce_raw(&out, FL_OP_SUM, a, 0, false) == FL_OK) { fl_tensor_read_f32(out, g1); fl_tensor_release(out); }
    omp_set_num_threads(2);
    if (fl_reduce_raw(&out, FL_OP_SUM, a, 0, false) == FL_OK) { fl_tensor_read_f32(out, got); fl_tensor_release(out); }
    omp_set_num_threads(nt);
    CHECK(memcmp(g1, got, (size_t)C * sizeof(float)) == 0, "[%lld, %lld] sum differs between 1 and 2 threads", (long long)R, (long long)C);
    free(g1); free(got); free(xv); free(x);
    fl_tensor_release(a);
}
TEST(nn_column_reduce) {
    static const int64_t Rs[] = { 1, 3, 1000 }, Cs[] = { 1, 96, 255, 256, 257, 700 };
    for (unsigned i = 0; i < 3; i++)
        for (unsigned j = 0; j < 6; j++) {
            check_colreduce(fl__failed, Rs[i], Cs[j], FL_F32);
            if (j % 2) check_colreduce(fl__failed, Rs[i], Cs[j], FL_BF16);
        }
    check_colreduce(fl__failed, 2048, 1024, FL_F32);   /* a bias gradient of the benchmark GPT */
}
/* fl_cpu_add_row_f64 (the bias gradients' column sums, a row at a time): each ps[j] + (double)row[j] exactly as the
 * scalar loop makes it, on 16 lanes and on 8, over lengths that end inside a vector of either width. */
TEST(nn_add_row_f64_matches_scalar_on_both_widths) {
    static const int64_t ns[] = { 1, 7, 8, 9, 15, 16, 17, 33, 255, 1000 };
    float *row = frand(1000, -3, 3);
    double want[1000], got[1000];
    for (unsigned t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const int64_t n = ns[t];
        for (int wide = 0; wide < 2; wide++) {
            for (int64_t j = 0; j < n; j++) got[j] = want[j] = 1e-3 * (double)(j % 17) - (double)row[(j * 7) % n] * 1e8;
            for (int64_t j = 0; j < n; j++) want[j] += (double)row[j];
            fl_cpu_add_row_f64(got, row, n, wide && fl_cpu_avx512());
            CHECK(memcmp(got, want, (size_t)n * sizeof(double)) == 0, "n %lld, %s: sums differ from the scalar loop's",
                  (long long)n, wide ? "16 lanes" : "8 lanes");
        }
    }
    free(row);
}
TEST(nn_column_reduce_nan) {
    int64_t shape[2] = { 4, 300 };
    float *x = frand(4 * 300, -1, 1);
    x[2 * 300 + 299] = NAN;
    fl_tensor *a, *out;
    REQUIRE_OK(fl_tensor_from_f32(&a, x, 2, shape, FL_F32));
    float got[300];
    for (int op = 0; op < FL_REDOP_COUNT; op++) {
        REQUIRE_OK(fl_reduce_raw(&out, (fl_redop)op, a, 0, false));
        fl_tensor_read_f32(out, got);
        fl_tensor_release(out);
        CHECK(isnan(got[299]) && !isnan(got[298]), "%s: NaN column %g, clean column %g", fl_redop_names[op], got[299], got[298]);
    }
    fl_tensor_release(a);
    free(x);
}

/* ---- group and batch norms (cpu_nn_chnorm.c) ------------------------------------------------ */

/* x [N, C, P]: the statistics set of element (n, c): GroupNorm's (n, group) for G > 0, BatchNorm's channel for 0. */
static int64_t chn_set(int64_t n, int64_t c, int64_t C, int64_t G) { return G > 0 ? n * G + c / (C / G) : c; }

/* a [N, C, P] array's values in the order [N, P, C] (to = 1) or back (to = 0), into a new array */
static float *chn_perm(const float *a, int64_t N, int64_t C, int64_t P, int to) {
    float *o = fzeros(N * C * P);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t p = 0; p < P; p++) {
                const int64_t i = (n * C + c) * P + p, j = (n * P + p) * C + c;
                if (to) o[j] = a[i]; else o[i] = a[j];
            }
    return o;
}

/* fl_cpu_chnorm_fwd/bwd (cl: the NHWC entries fl_cpu_dev_chnorm_fwd_cl/bwd_cl on x, dy in [N, P, C] order, their y
 * and dx read back) against float64: mean, rstd, biased var and y from the sets' two-pass statistics; dx from
 * rstd·(g − mean(g) − x̂·mean(g·x̂)) (g = dy·w), dw = Σ dy·x̂, db = Σ dy per channel (accumulated onto 0.5). */
static void check_chnorm_in(int *fl__failed, int64_t N, int64_t C, int64_t P, int64_t G, bool affine, float eps,
                            bool cl) {
    const int64_t n = N * C * P, S = G > 0 ? N * G : C;
    float *x = frand(n, -2.0, 3.0), *dy = frand(n, -1.0, 1.0), *w = affine ? frand(C, 0.5, 1.5) : NULL;
    float *b = affine ? frand(C, -1.0, 1.0) : NULL, *y = fzeros(n), *mean = fzeros(S), *rstd = fzeros(S);
    float *var = fzeros(S), *dx = fzeros(n), *dw = fzeros(C), *db = fzeros(C);
    for (int64_t c = 0; c < C; c++) dw[c] = db[c] = 0.5f;
    double *mu = calloc((size_t)S, sizeof(double)), *v = calloc((size_t)S, sizeof(double));
    double *cnt = calloc((size_t)S, sizeof(double)), *sg = calloc((size_t)S, sizeof(double));
    double *sgx = calloc((size_t)S, sizeof(double));
    if (cl) {
        float *xn = chn_perm(x, N, C, P, 1), *dyn = chn_perm(dy, N, C, P, 1), *yn = fzeros(n), *dxn = fzeros(n);
        fl_status st = fl_cpu_dev_chnorm_fwd_cl(xn, w, b, yn, mean, rstd, var, N, C, P, G, eps);
        CHECK_OK(st);
        if (st == FL_OK) CHECK_OK(fl_cpu_dev_chnorm_bwd_cl(xn, w, mean, rstd, dyn, dxn, dw, db, N, C, P, G));
        free(y), free(dx);
        y = chn_perm(yn, N, C, P, 0), dx = chn_perm(dxn, N, C, P, 0);
        free(xn), free(dyn), free(yn), free(dxn);
    } else {
        CHECK_OK(fl_cpu_chnorm_fwd(x, w, b, y, mean, rstd, var, N, C, P, G, eps));
        CHECK_OK(fl_cpu_chnorm_bwd(x, w, mean, rstd, dy, dx, dw, db, N, C, P, G));
    }
    for (int64_t i = 0; i < n; i++) { int64_t s = chn_set(i / (C * P), i / P % C, C, G); mu[s] += x[i]; cnt[s]++; }
    for (int64_t s = 0; s < S; s++) mu[s] /= cnt[s];
    for (int64_t i = 0; i < n; i++) {
        int64_t s = chn_set(i / (C * P), i / P % C, C, G);
        v[s] += (x[i] - mu[s]) * (x[i] - mu[s]);
    }
    for (int64_t s = 0; s < S; s++) {
        v[s] /= cnt[s];
        CHECK_CLOSE(mean[s], mu[s], 1e-6, 1e-6);
        CHECK_CLOSE(var[s], v[s], 1e-6, 1e-6);
        CHECK_CLOSE(rstd[s], 1.0 / sqrt(v[s] + eps), 1e-6, 1e-6);
    }
    double *dwr = calloc((size_t)C, sizeof(double)), *dbr = calloc((size_t)C, sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        const int64_t c = i / P % C, s = chn_set(i / (C * P), c, C, G);
        const double xh = (x[i] - mu[s]) / sqrt(v[s] + eps), wc = affine ? w[c] : 1.0;
        CHECK_CLOSE(y[i], xh * wc + (affine ? b[c] : 0.0), 1e-5, 1e-5);
        sg[s] += dy[i] * wc;
        sgx[s] += dy[i] * wc * xh;
        dwr[c] += dy[i] * xh;
        dbr[c] += dy[i];
    }
    for (int64_t i = 0; i < n; i++) {
        const int64_t c = i / P % C, s = chn_set(i / (C * P), c, C, G);
        const double r = 1.0 / sqrt(v[s] + eps), xh = (x[i] - mu[s]) * r, wc = affine ? w[c] : 1.0;
        CHECK_CLOSE(dx[i], r * (dy[i] * wc - sg[s] / cnt[s] - xh * sgx[s] / cnt[s]), 1e-5, 1e-4);
    }
    for (int64_t c = 0; c < C; c++) {
        CHECK_CLOSE(dw[c], 0.5 + dwr[c], 1e-4, 1e-5);
        CHECK_CLOSE(db[c], 0.5 + dbr[c], 1e-4, 1e-5);
    }
    void *all[] = { x, dy, w, b, y, mean, rstd, var, dx, dw, db, mu, v, cnt, sg, sgx, dwr, dbr };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}
static void check_chnorm(int *fl__failed, int64_t N, int64_t C, int64_t P, int64_t G, bool affine, float eps) {
    check_chnorm_in(fl__failed, N, C, P, G, affine, eps, false);
}

TEST(nn_chnorm_group_and_batch_against_float64) {
    /* GroupNorm: groups of one and of several channels, one position, one group; BatchNorm (G = 0): [N, C]
     * (P = 1, the column path), [N, C, L], and sizes past the threading threshold */
    const int64_t shapes[][4] = { { 2, 4, 5, 2 }, { 3, 6, 7, 6 }, { 4, 8, 1, 2 }, { 1, 3, 9, 1 }, { 8, 64, 257, 8 },
                                  { 5, 3, 1, 0 }, { 16, 7, 1, 0 }, { 3, 4, 11, 0 }, { 8, 32, 300, 0 } };
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
        for (int a = 0; a < 2; a++)
            check_chnorm(fl__failed, shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3], a, a ? 1e-5f : 0.1f);
}

/* The NHWC entries (stop 104, cpu_nn_chnorm_cl.c) against float64 as the NCHW ones: the same shapes, and BatchNorm
 * over more rows than one block of partial sums (CL_ROWS = 256: 8·300 = 2400 rows) */
TEST(nn_chnorm_cl_group_and_batch_against_float64) {
    const int64_t shapes[][4] = { { 2, 4, 5, 2 }, { 3, 6, 7, 6 }, { 4, 8, 1, 2 }, { 1, 3, 9, 1 }, { 8, 64, 257, 8 },
                                  { 5, 3, 1, 0 }, { 16, 7, 1, 0 }, { 3, 4, 11, 0 }, { 8, 32, 300, 0 } };
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
        for (int a = 0; a < 2; a++)
            check_chnorm_in(fl__failed, shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3], a, a ? 1e-5f : 0.1f,
                            true);
}

/* The NHWC eval entry gives the NCHW one's bits (the same expression, element by element), weight and bias or not */
TEST(nn_chnorm_eval_cl_same_bits) {
    const int64_t N = 3, C = 5, P = 7, n = N * C * P;
    float *x = frand(n, -2.0, 2.0), *m = frand(C, -0.5, 0.5), *d = frand(C, 0.5, 2.0), *w = frand(C, 0.5, 1.5);
    float *b = frand(C, -1.0, 1.0), *y = fzeros(n), *yn = fzeros(n), *xn = chn_perm(x, N, C, P, 1);
    for (int a = 0; a < 2; a++) {
        fl_cpu_chnorm_eval(x, m, d, a ? w : NULL, a ? b : NULL, y, N, C, P);
        CHECK_OK(fl_cpu_dev_chnorm_eval_cl(xn, m, d, a ? w : NULL, a ? b : NULL, yn, N, C, P));
        float *yb = chn_perm(yn, N, C, P, 0);
        CHECK(memcmp(y, yb, (size_t)n * 4) == 0, "affine %d", a);
        free(yb);
    }
    void *all[] = { x, m, d, w, b, y, yn, xn };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

/* chnorm's forward and backward entries (fl_cpu_chnorm_fwd/bwd, or the NHWC fl_cpu_dev_chnorm_fwd_cl/bwd_cl) give the
 * same bits on one thread and on three, BatchNorm's statistics (G = 0) and GroupNorm's (G = 4). */
typedef fl_status (*chnorm_fwd_fn)(const float *, const float *, const float *, float *, float *, float *, float *,
                                   int64_t, int64_t, int64_t, int64_t, float);
typedef fl_status (*chnorm_bwd_fn)(const float *, const float *, const float *, const float *, const float *, float *,
                                   float *, float *, int64_t, int64_t, int64_t, int64_t);
static void chnorm_same_on_threads(int *fl__failed, chnorm_fwd_fn fwd, chnorm_bwd_fn bwd) {
    const int64_t N = 8, C = 16, P = 1000, n = N * C * P;
    for (int G = 0; G <= 4; G += 4) {
        float *x = frand(n, -1.0, 2.0), *dy = frand(n, -1.0, 1.0), *w = frand(C, 0.5, 1.5), *b = frand(C, -1, 1);
        float *y[2], *dx[2], *dw[2], *db[2], *m[2], *r[2];
        const int64_t S = G ? N * G : C;
        for (int t = 0; t < 2; t++) {
            y[t] = fzeros(n); dx[t] = fzeros(n); dw[t] = fzeros(C); db[t] = fzeros(C); m[t] = fzeros(S); r[t] = fzeros(S);
            const int saved = omp_get_max_threads();
            omp_set_num_threads(t ? 3 : 1);
            CHECK_OK(fwd(x, w, b, y[t], m[t], r[t], NULL, N, C, P, G, 1e-5f));
            CHECK_OK(bwd(x, w, m[t], r[t], dy, dx[t], dw[t], db[t], N, C, P, G));
            omp_set_num_threads(saved);
        }
        CHECK(memcmp(y[0], y[1], (size_t)n * 4) == 0 && memcmp(dx[0], dx[1], (size_t)n * 4) == 0 &&
              memcmp(dw[0], dw[1], (size_t)C * 4) == 0 && memcmp(db[0], db[1], (size_t)C * 4) == 0, "G=%d", G);
        void *all[] = { x, dy, w, b, y[0], y[1], dx[0], dx[1], dw[0], dw[1], db[0], db[1], m[0], m[1], r[0], r[1] };
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    }
}

/* The NHWC entries (fixed blocks of rows, or one sample's rows, per partial sum) */
TEST(nn_chnorm_cl_thread_count_independent) {
    chnorm_same_on_threads(fl__failed, fl_cpu_dev_chnorm_fwd_cl, fl_cpu_dev_chnorm_bwd_cl);
}

/* The NCHW entries (each set's sums one thread's, in a fixed order) */
TEST(nn_chnorm_thread_count_independent) {
    chnorm_same_on_threads(fl__failed, fl_cpu_chnorm_fwd, fl_cpu_chnorm_bwd);
}
