/* test_optim.c — fused SGD / AdamW steps against float64 re-implementations of PyTorch's formulas
 * over several steps (small sizes and a size large enough for the threaded path), the argument
 * checks, and the Σx² / in-place scale helpers of clip_grad_norm_. */
#include "runner.h"
#include "ops.h"
#include "optim.h"
#include <stdlib.h>

static float frand(uint32_t *s) { *s = *s * 1664525u + 1013904223u; return (float)((*s >> 8) * (1.0 / 16777216.0)) * 2 - 1; }

static fl_tensor *vec(const float *v, int64_t n) {
    fl_tensor *t = NULL;
    fl_tensor_from_f32(&t, v, 1, &n, FL_F32);
    return t;
}

static void run_sgd(int64_t n, double lr, double mom, double damp, double wd, bool nesterov, int *fl__failed) {
    uint32_t seed = 7;
    float *p0 = malloc(n * 4), *zero = calloc(n, 4);
    double *p = malloc(n * 8), *buf = calloc(n, 8);
    for (int64_t i = 0; i < n; i++) p[i] = p0[i] = frand(&seed);
    fl_tensor *P = vec(p0, n), *B = vec(zero, n);
    float *g = malloc(n * 4);
    for (int step = 1; step <= 4; step++) {
        for (int64_t i = 0; i < n; i++) g[i] = frand(&seed);
        fl_tensor *G = vec(g, n);
        REQUIRE_OK(fl_sgd_step(P, G, mom != 0 ? B : NULL, lr, mom, damp, wd, nesterov, step == 1));
        fl_tensor_release(G);
        for (int64_t i = 0; i < n; i++) {   /* torch.optim.SGD, in double */
            double d = g[i] + wd * p[i];
            if (mom != 0) {
                buf[i] = step == 1 ? d : mom * buf[i] + (1 - damp) * d;
                d = nesterov ? d + mom * buf[i] : buf[i];
            }
            p[i] -= lr * d;
        }
    }
    const float *got = fl_tensor_data(P);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += fabs(got[i] - p[i]) > 1e-6 + 1e-5 * fabs(p[i]);
    CHECK(bad == 0, "sgd n=%lld mom=%g damp=%g wd=%g nesterov=%d: %d of %lld differ", (long long)n, mom, damp, wd,
          nesterov, bad, (long long)n);
    fl_tensor_release(P); fl_tensor_release(B);
    free(p0); free(zero); free(p); free(buf); free(g);
}

TEST(optim_sgd_matches_float64_reference) {
    run_sgd(37, 0.1, 0, 0, 0, false, fl__failed);
    run_sgd(37, 0.1, 0, 0, 0.01, false, fl__failed);
    run_sgd(37, 0.05, 0.9, 0, 0.01, false, fl__failed);
    run_sgd(37, 0.05, 0.9, 0.1, 0, false, fl__failed);
    run_sgd(37, 0.05, 0.9, 0, 1e-3, true, fl__failed);
    run_sgd(200003, 0.05, 0.9, 0, 1e-3, true, fl__failed);   /* OpenMP path */
}

static void run_adamw(int64_t n, double lr, double b1, double b2, double eps, double wd, int steps, bool ams,
                      int *fl__failed) {
    uint32_t seed = 11;
    float *p0 = calloc(n, 4), *zero = calloc(n, 4), *g = malloc(n * 4);   /* calloc: GCC -O1 took p0 for unset (-Wmaybe-uninitialized) */
    double *p = malloc(n * 8), *m = calloc(n, 8), *v = calloc(n, 8), *vm = calloc(n, 8);
    for (int64_t i = 0; i < n; i++) p[i] = p0[i] = frand(&seed);
    fl_tensor *P = vec(p0, n), *M = vec(zero, n), *V = vec(zero, n), *VM = ams ? vec(zero, n) : NULL;
    for (int step = 1; step <= steps; step++) {
        for (int64_t i = 0; i < n; i++) g[i] = frand(&seed) * (i % 3 == 0 ? 1e-3f : 1.0f);
        fl_tensor *G = vec(g, n);
        REQUIRE_OK(fl_adamw_step(P, G, M, V, VM, lr, b1, b2, eps, wd, step));
        fl_tensor_release(G);
        double bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
        for (int64_t i = 0; i < n; i++) {   /* torch.optim.AdamW, in double */
            p[i] *= 1 - lr * wd;
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = b2 * v[i] + (1 - b2) * (double)g[i] * g[i];
            vm[i] = v[i] > vm[i] ? v[i] : vm[i];
            double denom = sqrt(ams ? vm[i] : v[i]) / sqrt(bc2) + eps;
            p[i] -= lr / bc1 * m[i] / denom;
        }
    }
    const float *gp = fl_tensor_data(P), *gm = fl_tensor_data(M), *gv = fl_tensor_data(V);
    const float *gvm = VM ? fl_tensor_data(VM) : NULL;
    int bad = 0, above = 0;   /* above: elements whose maximum is not the last v (amsgrad changed their step) */
    for (int64_t i = 0; i < n; i++) {
        /* m can cancel to near 0 from terms of size ~|g| <= 1: absolute tolerance one fp32 ulp of 1. */
        int b = (fabs(gp[i] - p[i]) > 1e-6 + 1e-5 * fabs(p[i])) + (fabs(gm[i] - m[i]) > 1.2e-7 + 1e-5 * fabs(m[i])) +
                (fabs(gv[i] - v[i]) > 1e-12 + 1e-5 * fabs(v[i])) +
                (gvm && fabs(gvm[i] - vm[i]) > 1e-12 + 1e-5 * fabs(vm[i]));
        above += vm[i] > v[i] * 1.01;
        if (b && bad < 3) fprintf(stderr, "  [%lld] p %.9g/%.9g m %.9g/%.9g v %.9g/%.9g\n", (long long)i, gp[i], p[i],
                                  gm[i], m[i], gv[i], v[i]);
        bad += b;
    }
    CHECK(bad == 0, "adamw n=%lld lr=%g wd=%g steps=%d amsgrad=%d: %d values differ", (long long)n, lr, wd, steps, ams,
          bad);
    CHECK(!ams || steps < 2 || above > n / 10, "amsgrad: only %d of %lld maxima above v (the test would not see it)",
          above, (long long)n);
    fl_tensor_release(P); fl_tensor_release(M); fl_tensor_release(V); fl_tensor_release(VM);
    free(p0); free(zero); free(g); free(p); free(m); free(v); free(vm);
}

TEST(optim_adamw_matches_float64_reference) {
    run_adamw(53, 1e-3, 0.9, 0.999, 1e-8, 0.01, 5, false, fl__failed);
    run_adamw(53, 1e-2, 0.8, 0.99, 1e-6, 0, 5, false, fl__failed);
    run_adamw(53, 3e-4, 0.9, 0.95, 1e-8, 0.1, 30, false, fl__failed);
    run_adamw(150001, 1e-3, 0.9, 0.999, 1e-8, 0.01, 3, false, fl__failed);   /* OpenMP path */
    /* amsgrad: a fast-forgetting v (β2 = 0.5), so the maximum often is an earlier step's */
    run_adamw(53, 1e-2, 0.9, 0.5, 1e-8, 0.01, 8, true, fl__failed);
    run_adamw(53, 3e-4, 0.9, 0.95, 1e-8, 0.1, 30, true, fl__failed);
    run_adamw(150001, 1e-3, 0.9, 0.5, 1e-8, 0.01, 4, true, fl__failed);   /* OpenMP path */
}

TEST(optim_rejects_bad_arguments) {
    float a[6] = {0}, b[4] = {0};
    fl_tensor *P = vec(a, 6), *G = vec(b, 4), *G6 = vec(a, 6), *M = vec(a, 6), *H = NULL, *T = NULL;
    CHECK(fl_sgd_step(P, G, NULL, 0.1, 0, 0, 0, false, true) == FL_EINVAL && strstr(fl_last_error(), "gradient has 4"),
          "%s", fl_last_error());
    CHECK(fl_sgd_step(P, G6, NULL, 0.1, 0.9, 0, 0, false, true) == FL_EINVAL &&
          strstr(fl_last_error(), "momentum buffer is missing"), "%s", fl_last_error());
    CHECK(fl_sgd_step(P, G6, M, 0.1, 0.9, 0.5, 0, true, true) == FL_EINVAL && strstr(fl_last_error(), "nesterov"),
          "%s", fl_last_error());
    CHECK(fl_adamw_step(P, G6, M, M, NULL, 0.1, 0.9, 0.999, 1e-8, 0, 0) == FL_EINVAL && strstr(fl_last_error(), "step"),
          "%s", fl_last_error());
    CHECK(fl_adamw_step(P, G6, M, M, NULL, 0.1, 1.0, 0.999, 1e-8, 0, 1) == FL_EINVAL &&
          strstr(fl_last_error(), "betas"),
          "%s", fl_last_error());
    REQUIRE_OK(fl_tensor_to(&H, P, FL_BF16));
    CHECK(fl_adamw_step(H, G6, M, M, NULL, 0.1, 0.9, 0.999, 1e-8, 0, 1) == FL_EUNSUPPORTED &&
          strstr(fl_last_error(), "bf16"),
          "%s", fl_last_error());
    /* a parameter whose elements overlap (an expand) cannot be written in place: refused, as torch refuses it */
    int64_t s13[2] = {1, 3}, s23[2] = {2, 3};
    fl_tensor *R = NULL, *E = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&R, a, 2, s13, FL_F32));
    REQUIRE_OK(fl_tensor_expand(&E, R, 2, s23));
    CHECK(fl_sgd_step(E, G6, NULL, 0.1, 0, 0, 0, false, true) == FL_EINVAL &&
          strstr(fl_last_error(), "single memory location"), "%s", fl_last_error());
    fl_tensor_release(P); fl_tensor_release(G); fl_tensor_release(G6); fl_tensor_release(M);
    fl_tensor_release(H); fl_tensor_release(T); fl_tensor_release(R); fl_tensor_release(E);
}

/* A transposed parameter (a strided leaf, which torch steps in place) is updated through its view: element (i, j)
 * of the view gets gradient (i, j) of the contiguous gradient. */
TEST(optim_steps_a_transposed_parameter) {
    float v[6] = {1, 2, 3, 4, 5, 6}, gv[6] = {10, 20, 30, 40, 50, 60};
    int64_t s2[2] = {2, 3}, s32[2] = {3, 2};
    fl_tensor *P2 = NULL, *T = NULL, *G = NULL, *M = NULL, *V = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&P2, v, 2, s2, FL_F32));
    REQUIRE_OK(fl_tensor_transpose(&T, P2, 0, 1));   /* [3, 2], strides (1, 3) */
    REQUIRE_OK(fl_tensor_from_f32(&G, gv, 2, s32, FL_F32));
    REQUIRE_OK(fl_sgd_step(T, G, NULL, 0.01, 0, 0, 0, false, true));
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 2; j++) {
            double x = 0;
            REQUIRE_OK(fl_tensor_get(P2, (int64_t[]){j, i}, &x));
            CHECK(fabs(x - (v[j * 3 + i] - 0.01 * gv[i * 2 + j])) < 1e-6, "P2[%lld, %lld] = %g", (long long)j,
                  (long long)i, x);
        }
    /* AdamW's first step moves every element by lr (sign of its gradient) */
    float z[6] = {0};
    M = vec(z, 6); V = vec(z, 6);
    REQUIRE_OK(fl_adamw_step(T, G, M, V, NULL, 0.5, 0.9, 0.999, 1e-8, 0, 1));
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 2; j++) {
            double x = 0;
            REQUIRE_OK(fl_tensor_get(P2, (int64_t[]){j, i}, &x));
            CHECK(fabs(x - (v[j * 3 + i] - 0.01f * gv[i * 2 + j] - 0.5)) < 1e-5, "P2[%lld, %lld] = %g", (long long)j,
                  (long long)i, x);
        }
    fl_tensor_release(P2); fl_tensor_release(T); fl_tensor_release(G); fl_tensor_release(M); fl_tensor_release(V);
}

TEST(optim_sumsq_and_scale) {
    float v[6] = {1, -2, 3, 0.5f, -0.25f, 4};
    int64_t s2[2] = {2, 3};
    fl_tensor *t = NULL, *tt = NULL, *h = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&t, v, 2, s2, FL_F32));
    double ss = 0, want = 0;
    for (int i = 0; i < 6; i++) want += (double)v[i] * v[i];
    REQUIRE_OK(fl_sumsq(t, &ss));
    CHECK_CLOSE(ss, want, 0, 1e-15);
    REQUIRE_OK(fl_tensor_transpose(&tt, t, 0, 1));
    REQUIRE_OK(fl_sumsq(tt, &ss));
    CHECK_CLOSE(ss, want, 0, 1e-15);
    REQUIRE_OK(fl_tensor_to(&h, t, FL_BF16));
    REQUIRE_OK(fl_sumsq(h, &ss));
    CHECK_CLOSE(ss, want, 0, 1e-15);   /* these values are exact in bf16 */
    REQUIRE_OK(fl_scale_(tt, 0.5));    /* strided view writes through to t */
    const float *d = fl_tensor_data(t);
    for (int i = 0; i < 6; i++) CHECK_CLOSE(d[i], v[i] * 0.5, 0, 0);
    REQUIRE_OK(fl_scale_(t, 2.0));
    for (int i = 0; i < 6; i++) CHECK_CLOSE(d[i], v[i], 0, 0);
    CHECK(fl_scale_(h, 2.0) == FL_EUNSUPPORTED, "bf16 scale_ must be refused");
    fl_tensor_release(t); fl_tensor_release(tt); fl_tensor_release(h);
}

/* Σx² of several tensors at once (clip_grad_norm_): each out[i] is fl_sumsq of ts[i], bit for bit, whatever the
 * layout and dtype, across the batches that bound the copies (two FP8 tensors of 9M elements dequantize to 36
 * MiB each: more than the 64 MiB a batch may hold), and missing tensors are refused. */
TEST(optim_sumsq_many_matches_one_at_a_time) {
    enum { N = 7 };
    const int64_t big = 9 << 20, s2[2] = { 300, 7 }, s0[1] = { 0 };
    float *x = malloc((size_t)big * sizeof *x);
    REQUIRE(x != NULL, "out of memory");
    for (int64_t i = 0; i < big; i++) x[i] = (float)((i * 2654435761u) % 2001) / 500.0f - 2.0f;
    fl_tensor *src = NULL, *ts[N] = { NULL };
    REQUIRE_OK(fl_tensor_from_f32(&src, x, 1, &big, FL_F32));
    REQUIRE_OK(fl_quantize(&ts[0], src, FL_E4M3, NULL));
    REQUIRE_OK(fl_tensor_from_f32(&ts[1], x, 2, s2, FL_F32));
    REQUIRE_OK(fl_tensor_transpose(&ts[2], ts[1], 0, 1));
    REQUIRE_OK(fl_quantize(&ts[3], src, FL_E5M2, NULL));
    REQUIRE_OK(fl_tensor_to(&ts[4], ts[1], FL_BF16));
    REQUIRE_OK(fl_tensor_from_f32(&ts[5], x, 1, s0, FL_F32));
    REQUIRE_OK(fl_tensor_to(&ts[6], ts[1], FL_F16));
    double got[N], one;
    for (int i = 0; i < N; i++) got[i] = -1.0;
    REQUIRE_OK(fl_sumsq_many((const fl_tensor *const *)ts, N, got));
    for (int i = 0; i < N; i++) {
        REQUIRE_OK(fl_sumsq(ts[i], &one));
        CHECK(got[i] == one, "tensor %d: %.17g in the batch, %.17g alone", i, got[i], one);
    }
    CHECK(got[5] == 0.0 && got[0] > 0.0 && got[3] > 0.0, "empty %g, e4m3 %g, e5m2 %g", got[5], got[0], got[3]);
    CHECK_CLOSE(got[2], got[1], 0, 1e-12);   /* a transposed view: its elements summed in another order */
    REQUIRE_OK(fl_sumsq_many(NULL, 0, NULL));
    fl_tensor *gap[2] = { ts[1], NULL };
    CHECK(fl_sumsq_many((const fl_tensor *const *)gap, 2, got) == FL_EINVAL && strstr(fl_last_error(), "2 of 2"),
          "%s", fl_last_error());
    CHECK(fl_sumsq_many((const fl_tensor *const *)ts, -1, got) == FL_EINVAL, "n = -1: %s", fl_last_error());
    for (int i = 0; i < N; i++) fl_tensor_release(ts[i]);
    fl_tensor_release(src);
    free(x);
}
