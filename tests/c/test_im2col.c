/* test_im2col.c — core/im2col.c, conv_depthwise.c and max_pool.c against slow loops written here in double: unfold
 * reads each window's position (or the pad value), fold is its adjoint (<unfold x, c> = <x, fold c>), the depthwise
 * convolution sums its kernel's products, max pooling takes each window's first maximum; bad geometries refused. */
#include "runner.h"
#include "nn.h"
#include "tensor.h"
#include "error.h"
#include "cpu/cpu_conv.h"
#include "cpu/cpu_internal.h"
#include "format.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static fl_tensor *filled(int64_t n, int64_t c, int64_t h, int64_t w, unsigned seed) {
    fl_tensor *t = NULL;
    const int64_t s[4] = { n, c, h, w };
    if (fl_tensor_empty(&t, FL_F32, 4, s, FL_DEV_CPU) != FL_OK) return NULL;
    float *v = fl_tensor_data(t);
    for (int64_t i = 0; i < n * c * h * w; i++) v[i] = (float)((int)((i * 37 + seed * 11) % 23) - 11) / 8.0f;
    return t;
}

/* the value unfold should put at (plane p, kernel offset k, window l), or the pad value */
static double ref_at(const float *x, int64_t h, int64_t w, const fl_window *g, int64_t ow, int64_t p, int64_t k,
                     int64_t l) {
    const int64_t i = k / g->kw, j = k % g->kw, oy = l / ow, ox = l % ow;
    const int64_t iy = oy * g->sh + i * g->dh - g->pt, ix = ox * g->sw + j * g->dw - g->pl;
    if (iy < 0 || iy >= h || ix < 0 || ix >= w) return g->pad_value;
    return x[(p * h + iy) * w + ix];
}

TEST(im2col_unfold_fold_adjoint) {
    const fl_window geos[] = {
        { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0 },
        { 2, 3, 2, 1, 1, 2, 0, 2, 1, 0, -1.5 },
        { 3, 2, 3, 2, 2, 1, 2, 0, 0, 3, 0 },
        { 2, 2, 1, 1, 1, 1, 0, -1, 0, -1, 0 },   /* fold's crop: the last row and column not covered */
    };
    for (size_t t = 0; t < sizeof geos / sizeof *geos; t++) {
        const fl_window *g = &geos[t];
        const int64_t N = 2, C = 3, H = 5, W = 6;
        fl_tensor *x = filled(N, C, H, W, (unsigned)t), *cols = NULL, *back = NULL, *c2 = NULL;
        REQUIRE(x, "alloc");
        REQUIRE_OK(fl_unfold(&cols, x, g));
        const int64_t K = g->kh * g->kw, L = cols->shape[3];
        const int64_t oh = (H + g->pt + g->pb - g->dh * (g->kh - 1) - 1) / g->sh + 1;
        const int64_t ow = (W + g->pl + g->pr - g->dw * (g->kw - 1) - 1) / g->sw + 1;
        CHECK(cols->shape[2] == K && L == oh * ow, "geometry %zu: shape [%lld, %lld]", t, (long long)cols->shape[2],
              (long long)L);
        const float *xv = fl_tensor_data(x), *cv = fl_tensor_data(cols);
        for (int64_t p = 0; p < N * C; p++)
            for (int64_t k = 0; k < K; k++)
                for (int64_t l = 0; l < L; l++)
                    CHECK(cv[(p * K + k) * L + l] == (float)ref_at(xv, H, W, g, ow, p, k, l),
                          "geometry %zu: plane %lld offset %lld window %lld", t, (long long)p, (long long)k,
                          (long long)l);
        /* <unfold x, c> = <x, fold c> (pad 0 for the identity) */
        fl_window z = *g;
        z.pad_value = 0;
        fl_tensor *cz = NULL;
        REQUIRE_OK(fl_unfold(&cz, x, &z));
        c2 = filled(N, C, K, L, 7);
        REQUIRE(c2, "alloc");
        REQUIRE_OK(fl_fold(&back, c2, H, W, g));
        double lhs = 0, rhs = 0;
        const float *a = fl_tensor_data(cz), *b = fl_tensor_data(c2), *f = fl_tensor_data(back);
        for (int64_t i = 0; i < N * C * K * L; i++) lhs += (double)a[i] * b[i];
        for (int64_t i = 0; i < N * C * H * W; i++) rhs += (double)xv[i] * f[i];
        CHECK_CLOSE(lhs, rhs, 1e-3, 1e-5);
        fl_tensor_release(x); fl_tensor_release(cols); fl_tensor_release(cz); fl_tensor_release(c2);
        fl_tensor_release(back);
    }
}

TEST(im2col_depthwise_and_max_pool_vs_loops) {
    const fl_window g = { 3, 2, 2, 1, 1, 2, 1, 1, 0, 1, 0 };
    const int64_t N = 2, C = 3, m = 2, H = 7, W = 6;
    fl_tensor *x = filled(N, C, H, W, 3), *w = filled(C * m, 1, 3, 2, 5), *y = NULL, *mv = NULL, *mi = NULL;
    REQUIRE(x && w, "alloc");
    REQUIRE_OK(fl_conv_depthwise(&y, x, w, &g));
    const int64_t oh = y->shape[2], ow = y->shape[3], K = 6;
    const float *xv = fl_tensor_data(x), *wv = fl_tensor_data(w), *yv = fl_tensor_data(y);
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < C * m; o++)
            for (int64_t l = 0; l < oh * ow; l++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) s += wv[o * K + k] * ref_at(xv, H, W, &g, ow, n * C + o / m, k, l);
                CHECK_CLOSE(yv[(n * C * m + o) * oh * ow + l], s, 1e-5, 1e-5);
            }
    REQUIRE_OK(fl_max_pool(&mv, &mi, x, &g));
    const float *v = fl_tensor_data(mv), *iv = fl_tensor_data(mi);
    for (int64_t p = 0; p < N * C; p++)
        for (int64_t l = 0; l < oh * ow; l++) {
            double best = -INFINITY;
            int64_t at = -1;
            for (int64_t k = 0; k < K; k++) {
                const int64_t i = k / g.kw, j = k % g.kw, iy = (l / ow) * g.sh + i * g.dh - g.pt;
                const int64_t ix = (l % ow) * g.sw + j * g.dw - g.pl;
                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                if (at < 0 || xv[(p * H + iy) * W + ix] > best) best = xv[(p * H + iy) * W + ix], at = iy * W + ix;
            }
            CHECK(v[p * oh * ow + l] == (float)best && iv[p * oh * ow + l] == (float)at, "window %lld", (long long)l);
        }
    fl_tensor_release(x); fl_tensor_release(w); fl_tensor_release(y); fl_tensor_release(mv); fl_tensor_release(mi);
}

/* conv2d of fp32 (core/conv_cols.c): oneDNN's direct convolution where it has one (cpu/cpu_conv.c, its result
 * copied out of its channel blocks, a block with spare channels included), else the columns: both against the sum in
 * double, within the fp32 sum's bound K·2^-24·Σ|x·w|, with a bias; the direct entry either runs or writes nothing */
TEST(conv2d_fp32_direct_vs_loops) {
    static const struct { int64_t N, C, OC, H, W, groups; fl_window g; } cs[] = {
        { 3, 5, 5, 9, 7, 1, { 3, 2, 2, 1, 1, 2, 1, 0, 2, 1, 0 } },      /* 5 channels: a block of 16 or 8, part spare */
        { 2, 4, 6, 8, 8, 2, { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0 } },      /* groups */
        { 2, 8, 8, 10, 9, 4, { 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 0 } },     /* 2 channels a group, dilated */
        { 1, 3, 17, 12, 11, 1, { 5, 4, 3, 2, 1, 1, 2, 3, 0, 1, 0 } },
    };
    for (size_t t = 0; t < sizeof cs / sizeof *cs; t++) {
        const fl_window *g = &cs[t].g;
        const int64_t N = cs[t].N, C = cs[t].C, OC = cs[t].OC, H = cs[t].H, W = cs[t].W, gr = cs[t].groups;
        const int64_t cg = C / gr, ocg = OC / gr, K = cg * g->kh * g->kw;
        fl_tensor *x = filled(N, C, H, W, (unsigned)t + 1), *w = filled(OC, cg, g->kh, g->kw, (unsigned)t + 7);
        fl_tensor *b = NULL, *y = NULL;
        const int64_t bs[1] = { OC };
        REQUIRE(x && w, "alloc");
        REQUIRE_OK(fl_tensor_empty(&b, FL_F32, 1, bs, FL_DEV_CPU));
        for (int64_t o = 0; o < OC; o++) ((float *)fl_tensor_data(b))[o] = 0.25f * (float)o - 1.0f;
        REQUIRE_OK(fl_conv2d_cols(&y, x, w, b, g, gr, false, false));
        const int64_t oh = y->shape[2], ow = y->shape[3];
        const float *xv = fl_tensor_data(x), *wv = fl_tensor_data(w), *bv = fl_tensor_data(b);
        /* the direct entry alone, without a bias: all of y written where it ran, nothing where it did not */
        float *yd = malloc((size_t)(N * OC * oh * ow) * sizeof *yd);
        REQUIRE(yd, "alloc");
        for (int64_t i = 0; i < N * OC * oh * ow; i++) yd[i] = NAN;
        const int64_t geo[10] = { g->kh, g->kw, g->sh, g->sw, g->dh, g->dw, g->pt, g->pb, g->pl, g->pr };
        bool ran = false;
        REQUIRE_OK(fl_cpu_conv2d(yd, xv, wv, NULL, FL_F32, N, C, H, W, OC, gr, geo, oh, ow, &ran));
        const float *yv = fl_tensor_data(y);
        for (int64_t n = 0; n < N; n++)
            for (int64_t o = 0; o < OC; o++)
                for (int64_t l = 0; l < oh * ow; l++) {
                    double s = 0, m = 0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t k = 0; k < g->kh * g->kw; k++) {
                            const double p = wv[(o * cg + c) * g->kh * g->kw + k] *
                                             ref_at(xv, H, W, g, ow, n * C + (o / ocg) * cg + c, k, l);
                            s += p, m += fabs(p);
                        }
                    const int64_t at = (n * OC + o) * oh * ow + l;
                    const double bound = (double)(K + 1) * 0x1p-24 * (m + fabs(bv[o])) + 1e-30;
                    CHECK(fabs(yv[at] - (s + bv[o])) <= bound, "case %zu: y[%lld] %.9g, want %.9g", t, (long long)at,
                          yv[at], s + bv[o]);
                    if (ran)
                        CHECK(fabs(yd[at] - s) <= bound, "case %zu direct: y[%lld] %.9g, want %.9g", t,
                              (long long)at, yd[at], s);
                    else
                        CHECK(isnan(yd[at]), "case %zu: declined but wrote y[%lld]", t, (long long)at);
                }
        if (t == 0) CHECK(ran, "case 0: oneDNN's direct convolution was expected to run");
        free(yd);
        fl_tensor_release(x); fl_tensor_release(w); fl_tensor_release(b); fl_tensor_release(y);
    }
}

/* conv2d's fp32 gradients by oneDNN's backward primitives (cpu/cpu_conv.c, stop 99): dx, dw and db against sums in
 * double (each within its fp32 sum's bound), every element written where the entry ran (NaN-filled first), nothing
 * where it declined; Ctrl-C between chunks stops both with FL_EINTR, the flag cleared */
TEST(conv2d_fp32_direct_backward_vs_loops) {
    /* must: the primitives expected to run (1 backward data, 2 backward weights): a first layer's input gradient and
     * a 1×1 kernel's gradients are the columns' by measurement */
    static const struct { int64_t N, C, OC, H, W, groups; fl_window g; int must; } cs[] = {
        { 3, 5, 5, 9, 7, 1, { 3, 2, 2, 1, 1, 2, 1, 0, 2, 1, 0 }, 0 },   /* 5 channels: a block, part spare */
        { 2, 16, 24, 8, 8, 1, { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0 }, 3 },   /* 3×3, "same" */
        { 2, 16, 8, 7, 8, 1, { 3, 3, 1, 2, 1, 1, 2, 0, 0, 1, 0 }, 3 },    /* asymmetric padding and strides */
        { 2, 32, 16, 9, 9, 1, { 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0 }, 3 },   /* stride 2 */
        { 2, 3, 16, 10, 10, 1, { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0 }, 2 },  /* a first layer */
        { 2, 32, 16, 9, 9, 1, { 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 0 }, 0 },   /* 1×1, stride 2: declined */
        { 2, 4, 6, 8, 8, 2, { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0 }, 0 },     /* groups */
        { 1, 3, 17, 12, 11, 1, { 5, 4, 3, 2, 1, 1, 2, 3, 0, 1, 0 }, 0 },
    };
    for (size_t t = 0; t < sizeof cs / sizeof *cs; t++) {
        const fl_window *g = &cs[t].g;
        const int64_t N = cs[t].N, C = cs[t].C, OC = cs[t].OC, H = cs[t].H, W = cs[t].W, gr = cs[t].groups;
        const int64_t cg = C / gr, ocg = OC / gr, KK = g->kh * g->kw;
        const int64_t oh = (H + g->pt + g->pb - g->dh * (g->kh - 1) - 1) / g->sh + 1;
        const int64_t ow = (W + g->pl + g->pr - g->dw * (g->kw - 1) - 1) / g->sw + 1;
        fl_tensor *x = filled(N, C, H, W, (unsigned)t + 1), *w = filled(OC, cg, g->kh, g->kw, (unsigned)t + 7);
        fl_tensor *gy = filled(N, OC, oh, ow, (unsigned)t + 3);
        REQUIRE(x && w && gy, "alloc");
        const float *xv = fl_tensor_data(x), *wv = fl_tensor_data(w), *gv = fl_tensor_data(gy);
        const int64_t nx = N * C * H * W, nw = OC * cg * KK;
        double *rx = calloc((size_t)nx, sizeof *rx), *mx = calloc((size_t)nx, sizeof *mx);
        double *rw = calloc((size_t)nw, sizeof *rw), *mw = calloc((size_t)nw, sizeof *mw);
        double *rb = calloc((size_t)OC, sizeof *rb), *mb = calloc((size_t)OC, sizeof *mb);
        float *dx = malloc((size_t)nx * sizeof *dx), *dw = malloc((size_t)nw * sizeof *dw);
        float *db = malloc((size_t)OC * sizeof *db);
        REQUIRE(rx && mx && rw && mw && rb && mb && dx && dw && db, "alloc");
        for (int64_t n = 0; n < N; n++)
            for (int64_t o = 0; o < OC; o++)
                for (int64_t l = 0; l < oh * ow; l++) {
                    const double gval = gv[(n * OC + o) * oh * ow + l];
                    rb[o] += gval, mb[o] += fabs(gval);
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t k = 0; k < KK; k++) {
                            const int64_t i = k / g->kw, j = k % g->kw, oy = l / ow, ox = l % ow;
                            const int64_t iy = oy * g->sh + i * g->dh - g->pt, ix = ox * g->sw + j * g->dw - g->pl;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                            const int64_t xi = ((n * C + (o / ocg) * cg + c) * H + iy) * W + ix;
                            const int64_t wi = (o * cg + c) * KK + k;
                            rx[xi] += gval * wv[wi], mx[xi] += fabs(gval * wv[wi]);
                            rw[wi] += gval * xv[xi], mw[wi] += fabs(gval * xv[xi]);
                        }
                }
        const int64_t geo[10] = { g->kh, g->kw, g->sh, g->sw, g->dh, g->dw, g->pt, g->pb, g->pl, g->pr };
        for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
        for (int64_t i = 0; i < nw; i++) dw[i] = NAN;
        for (int64_t i = 0; i < OC; i++) db[i] = NAN;
        bool ran_d = false, ran_w = false;
        REQUIRE_OK(fl_cpu_conv2d_bwd_data(dx, gv, wv, FL_F32, N, C, H, W, OC, gr, geo, oh, ow, &ran_d));
        REQUIRE_OK(fl_cpu_conv2d_bwd_weights(dw, db, xv, gv, FL_F32, N, C, H, W, OC, gr, geo, oh, ow, &ran_w));
        /* (which primitives oneDNN has depends on the CPU: `must` is AVX-512's; without it, on Zen 3, case 2's
         * backward data is declined) */
        const int must = fl_cpu_avx512() ? cs[t].must : 0;
        CHECK((ran_d || !(must & 1)) && (ran_w || !(must & 2)),
              "case %zu: oneDNN's backward primitives were expected to run (data %d, weights %d)", t, ran_d, ran_w);
        if (t == 5) CHECK(!ran_d && !ran_w, "case 5: a 1×1 kernel's gradients were expected from the columns");
        for (int64_t i = 0; i < nx; i++) {
            const double bound = (double)(ocg * KK + 1) * 0x1p-24 * mx[i] + 1e-30;
            if (ran_d) CHECK(fabs(dx[i] - rx[i]) <= bound, "case %zu: dx[%lld] %.9g, want %.9g", t, (long long)i,
                             dx[i], rx[i]);
            else CHECK(isnan(dx[i]), "case %zu: declined but wrote dx[%lld]", t, (long long)i);
        }
        for (int64_t i = 0; i < nw + OC; i++) {
            const bool isb = i >= nw;
            const double got = isb ? db[i - nw] : dw[i], want = isb ? rb[i - nw] : rw[i];
            const double bound = (double)(N * oh * ow + 1) * 0x1p-24 * (isb ? mb[i - nw] : mw[i]) + 1e-30;
            if (ran_w) CHECK(fabs(got - want) <= bound, "case %zu: %s[%lld] %.9g, want %.9g", t, isb ? "db" : "dw",
                             (long long)(isb ? i - nw : i), got, want);
            else CHECK(isnan(got), "case %zu: declined but wrote the %s", t, isb ? "bias's gradient" : "weight's");
        }
        if ((cs[t].must & 1) && ran_d) {
            fl_interrupt_set();
            CHECK(fl_cpu_conv2d_bwd_data(dx, gv, wv, FL_F32, N, C, H, W, OC, gr, geo, oh, ow, &ran_d) == FL_EINTR &&
                  !fl_interrupt_pending(), "case %zu: backward data went on past Ctrl-C", t);
        }
        if ((cs[t].must & 2) && ran_w) {
            fl_interrupt_set();
            CHECK(fl_cpu_conv2d_bwd_weights(dw, NULL, xv, gv, FL_F32, N, C, H, W, OC, gr, geo, oh, ow, &ran_w) ==
                  FL_EINTR && !fl_interrupt_pending(), "case %zu: backward weights went on past Ctrl-C", t);
        }
        free(rx); free(mx); free(rw); free(mw); free(rb); free(mb); free(dx); free(dw); free(db);
        fl_tensor_release(x); fl_tensor_release(w); fl_tensor_release(gy);
    }
}

/* a first layer (one group of under 16 channels: an image's 3) reads its NCHW input in place, by oneDNN's
 * first-layer kernel, as torch 2.15's mkldnn route does; before stop 98's "conv2d's first layer" it was reordered to
 * NHWC each call for brgconv (slower: docs/performance.md). 16 channels keep the layouts the primitive picks. Values
 * are the spec's (convfirst_spec) and conv2d_fp32_direct_vs_loops's. */
TEST(conv2d_fp32_first_layer_reads_nchw_in_place) {
    static const struct { int64_t N, C, H, OC, k, s, p; } cs[] = {
        { 32, 3, 32, 64, 3, 1, 1 }, { 2, 3, 224, 64, 7, 2, 3 }, { 4, 1, 28, 32, 3, 1, 1 }, { 2, 8, 20, 24, 5, 2, 2 },
    };
    for (size_t t = 0; t < sizeof cs / sizeof *cs; t++) {
        const int64_t geo[10] = { cs[t].k, cs[t].k, cs[t].s, cs[t].s, 1, 1, cs[t].p, cs[t].p, cs[t].p, cs[t].p };
        bool direct = false, in_place = false;
        REQUIRE_OK(fl_cpu_conv2d_route(&direct, &in_place, FL_F32, cs[t].N, cs[t].C, cs[t].H, cs[t].H, cs[t].OC, 1, geo));
        /* (oneDNN's AVX2 kernels take 8 channels as one nChw8c block, a reorder: under 8 in place on every CPU) */
        if (direct && (cs[t].C < 8 || fl_cpu_avx512()))
            CHECK(in_place, "case %zu: %lld channels: the input was reordered", t, (long long)cs[t].C);
    }
    const int64_t geo[10] = { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1 };
    bool direct = false, in_place = true;
    REQUIRE_OK(fl_cpu_conv2d_route(&direct, &in_place, FL_F32, 8, 16, 16, 16, 32, 1, geo));
    CHECK(!in_place || !direct, "16 channels: the layouts the primitive picks (a reorder) were expected");
}

/* bf16 on oneDNN's direct primitives (stop 100): the route taken where oneDNN has a bf16 kernel (AMX, AVX512_BF16, or
 * its emulation on AVX-512: every CPU and FP8LAB_CPU_ISA cap with AVX-512; under avx2 the columns), never for fp16
 * (oneDNN 2.6 has no fp16 convolution on a CPU); the forward and both gradients of bf16 operands against the sums in
 * double of the same bf16 values, within the fp32 sum's bound (the products are exact). */
TEST(conv2d_bf16_direct_vs_loops) {
    const bool avx512 = fl_cpu_isa_allows(FL_ISA_AVX512) && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    const int64_t N = 2, C = 16, OC = 24, H = 7, W = 6, oh = 7, ow = 6, KK = 9;
    const int64_t geo[10] = { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1 };
    bool direct = true, in_place = true;
    REQUIRE_OK(fl_cpu_conv2d_route(&direct, &in_place, FL_F16, N, C, H, W, OC, 1, geo));
    CHECK(!direct, "fp16 was expected to keep the columns");
    REQUIRE_OK(fl_cpu_conv2d_route(&direct, &in_place, FL_BF16, N, C, H, W, OC, 1, geo));
    CHECK(direct == avx512, "bf16's direct route: %d, expected %d (AVX-512 allowed and present)", direct, avx512);
    const int64_t nx = N * C * H * W, nw = OC * C * KK, ny = N * OC * oh * ow;
    uint16_t *x = malloc((size_t)nx * 2), *w = malloc((size_t)nw * 2), *gy = malloc((size_t)ny * 2);
    float *y = malloc((size_t)ny * 4), *dx = malloc((size_t)nx * 4), *dw = malloc((size_t)nw * 4);
    double *ry = calloc((size_t)ny, 8), *my = calloc((size_t)ny, 8), *rx = calloc((size_t)nx, 8);
    double *mx = calloc((size_t)nx, 8), *rw = calloc((size_t)nw, 8), *mw = calloc((size_t)nw, 8);
    REQUIRE(x && w && gy && y && dx && dw && ry && my && rx && mx && rw && mw, "alloc");
    /* values with all of bf16's 8 bits, so that the sums round */
    for (int64_t i = 0; i < nx; i++) x[i] = fl_f32_to_bf16(sinf((float)i * 0.7f) * 1.9f);
    for (int64_t i = 0; i < nw; i++) w[i] = fl_f32_to_bf16(cosf((float)i * 1.3f) * 0.6f);
    for (int64_t i = 0; i < ny; i++) gy[i] = fl_f32_to_bf16(sinf((float)i * 2.1f + 0.5f));
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++)
            for (int64_t l = 0; l < oh * ow; l++) {
                const int64_t q = (n * OC + o) * oh * ow + l;
                const double gval = fl_bf16_to_f32(gy[q]);
                for (int64_t c = 0; c < C; c++)
                    for (int64_t k = 0; k < KK; k++) {
                        const int64_t iy = l / ow + k / 3 - 1, ix = l % ow + k % 3 - 1;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                        const int64_t xi = ((n * C + c) * H + iy) * W + ix, wi = (o * C + c) * KK + k;
                        const double xv = fl_bf16_to_f32(x[xi]), wv = fl_bf16_to_f32(w[wi]);
                        ry[q] += xv * wv, my[q] += fabs(xv * wv);
                        rx[xi] += gval * wv, mx[xi] += fabs(gval * wv);
                        rw[wi] += gval * xv, mw[wi] += fabs(gval * xv);
                    }
            }
    bool ran = false, ran_d = false, ran_w = false;
    REQUIRE_OK(fl_cpu_conv2d(y, x, w, NULL, FL_BF16, N, C, H, W, OC, 1, geo, oh, ow, &ran));
    REQUIRE_OK(fl_cpu_conv2d_bwd_data(dx, gy, w, FL_BF16, N, C, H, W, OC, 1, geo, oh, ow, &ran_d));
    REQUIRE_OK(fl_cpu_conv2d_bwd_weights(dw, NULL, x, gy, FL_BF16, N, C, H, W, OC, 1, geo, oh, ow, &ran_w));
    CHECK(ran == avx512 && ran_d == avx512 && ran_w == avx512, "ran %d %d %d, expected %d", ran, ran_d, ran_w, avx512);
    const struct { const float *got; const double *r, *m; int64_t n, k; const char *what; } out[3] = {
        { y, ry, my, ny, C * KK, "y" }, { dx, rx, mx, nx, OC * KK, "dx" }, { dw, rw, mw, nw, N * oh * ow, "dw" },
    };
    for (int i = 0; i < 3 && ran; i++)
        for (int64_t j = 0; j < out[i].n; j++)
            CHECK(fabs(out[i].got[j] - out[i].r[j]) <= (double)(out[i].k + 1) * 0x1p-24 * out[i].m[j] + 1e-30,
                  "%s[%lld] %.9g, want %.9g", out[i].what, (long long)j, out[i].got[j], out[i].r[j]);
    free(x); free(w); free(gy); free(y); free(dx); free(dw);
    free(ry); free(my); free(rx); free(mx); free(rw); free(mw);
}

/* The blocked copies' buffers are kept between calls (stop 100), at most 64 MiB of them: a call that needs more frees
 * them after, and the next small one keeps its own again. */
TEST(conv2d_direct_buffers_kept_and_bounded) {
    const int64_t geo[10] = { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1 };
    fl_tensor *x = filled(2, 16, 12, 12, 1), *w = filled(16, 16, 3, 3, 2), *xb = filled(1, 16, 720, 720, 3);
    fl_tensor *wb = filled(32, 16, 1, 1, 4);
    float *y = malloc(2 * 16 * 12 * 12 * sizeof *y), *yb = malloc((size_t)32 * 720 * 720 * sizeof *yb);
    REQUIRE(x && w && xb && wb && y && yb, "alloc");
    bool ran = false;
    REQUIRE_OK(fl_cpu_conv2d(y, fl_tensor_data(x), fl_tensor_data(w), NULL, FL_F32, 2, 16, 12, 12, 16, 1, geo, 12, 12,
                             &ran));
    const size_t small = fl_cpu_conv2d_arena_bytes();
    if (ran) CHECK(small > 0 && small <= (size_t)64 << 20, "a small conv's buffers: %zu bytes kept", small);
    REQUIRE_OK(fl_cpu_conv2d(y, fl_tensor_data(x), fl_tensor_data(w), NULL, FL_F32, 2, 16, 12, 12, 16, 1, geo, 12, 12,
                             &ran));
    CHECK(fl_cpu_conv2d_arena_bytes() == small, "the same conv again grew the buffers: %zu bytes, then %zu", small,
          fl_cpu_conv2d_arena_bytes());
    /* one sample of 16 + 32 planes of 720×720 (99 MB in blocks): past the 64 MiB kept */
    const int64_t g1[10] = { 1, 1, 1, 1, 1, 1, 0, 0, 0, 0 };
    REQUIRE_OK(fl_cpu_conv2d(yb, fl_tensor_data(xb), fl_tensor_data(wb), NULL, FL_F32, 1, 16, 720, 720, 32, 1, g1, 720,
                             720, &ran));
    if (ran) CHECK(fl_cpu_conv2d_arena_bytes() == 0, "%zu bytes kept after a call past 64 MiB",
                   fl_cpu_conv2d_arena_bytes());
    free(y); free(yb);
    fl_tensor_release(x); fl_tensor_release(w); fl_tensor_release(xb); fl_tensor_release(wb);
}

TEST(im2col_refuses_bad_geometry) {
    fl_tensor *x = filled(1, 1, 4, 4, 1), *out = NULL, *o2 = NULL;
    REQUIRE(x, "alloc");
    const fl_window zero_k = { 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 }, neg_top = { 1, 1, 1, 1, 1, 1, -1, 0, 0, 0, 0 };
    const fl_window too_big = { 5, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0 };
    const fl_window huge = { (INT64_C(1) << 31) - 1, 1, 1, 1, (INT64_C(1) << 31) - 1, 1, 0, 0, 0, 0, 0 };
    CHECK(fl_unfold(&out, x, &zero_k) == FL_EINVAL && !out, "kernel 0");
    CHECK(fl_unfold(&out, x, &neg_top) == FL_EINVAL && !out, "negative top padding");
    CHECK(fl_unfold(&out, x, &too_big) == FL_EINVAL && !out, "kernel past the plane");
    CHECK(fl_unfold(&out, x, &huge) == FL_EINVAL && !out, "a span past int64's reach is refused, not wrapped");
    CHECK(fl_fold(&out, x, 4, 4, &too_big) == FL_EINVAL && !out, "fold: kernel past the plane");
    CHECK(fl_max_pool(&out, &o2, x, &too_big) == FL_EINVAL && !out && !o2, "max_pool: kernel past the plane");
    CHECK(fl_conv_depthwise(&out, x, x, &too_big) == FL_EINVAL && !out, "depthwise: weight of the wrong shape");
    fl_tensor_release(x);
}

/* Ctrl-C (the interrupt flag) stops the window ops between planes: FL_EINTR, no result, the flag cleared. Before
 * 2026-12-06 their loops never polled it (a long convolution ran to its end). */
TEST(im2col_window_ops_stop_on_interrupt) {
    const fl_window g = { 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0 };
    fl_tensor *x = filled(2, 16, 24, 24, 1), *w = filled(16, 1, 3, 3, 2), *cols = NULL, *y = NULL, *i = NULL;
    REQUIRE(x && w, "alloc");
    REQUIRE_OK(fl_unfold(&cols, x, &g));
    fl_interrupt_set();
    CHECK(fl_unfold(&y, x, &g) == FL_EINTR && !y && !fl_interrupt_pending(), "unfold: %s", fl_last_error());
    fl_interrupt_set();
    CHECK(fl_fold(&y, cols, 24, 24, &g) == FL_EINTR && !y && !fl_interrupt_pending(), "fold: %s", fl_last_error());
    fl_interrupt_set();
    CHECK(fl_conv_depthwise(&y, x, w, &g) == FL_EINTR && !y && !fl_interrupt_pending(), "depthwise: %s",
          fl_last_error());
    fl_interrupt_set();
    CHECK(fl_max_pool(&y, &i, x, &g) == FL_EINTR && !y && !i && !fl_interrupt_pending(), "max_pool: %s",
          fl_last_error());
    fl_interrupt_set();
    CHECK(fl_avg_pool(&y, x, &g, true, 0) == FL_EINTR && !y && !fl_interrupt_pending(), "avg_pool: %s",
          fl_last_error());
    CHECK(strstr(fl_last_error(), "interrupted") != NULL, "message: %s", fl_last_error());
    /* and without the flag they run */
    REQUIRE_OK(fl_avg_pool(&y, x, &g, true, 0));
    fl_tensor_release(y);
    fl_tensor_release(cols); fl_tensor_release(x); fl_tensor_release(w);
}
