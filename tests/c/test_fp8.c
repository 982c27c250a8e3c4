/* test_fp8.c — the FP8 recipes' numerics: the scale/amax-history update against sequences worked out
 * by hand from docs/fp8-spec.md §2–§4, and the FP8 linear's forward and three gradients against a float64
 * reference that quantizes with the same scales (agreement up to fp32 accumulation). */
#include "runner.h"
#include <float.h>
#include <stdlib.h>
#include "autograd.h"
#include "cpu/cpu_internal.h"
#include "fp8_linear.h"
#include "nn.h"
#include "ops.h"
#include "optim.h"
#include "scaling.h"
#include "rng.h"
#include "ops_raw.h"
#include <omp.h>
#include <string.h>

TEST(recipe_delayed_max_margin_by_hand) {
    fl_scaling s;
    REQUIRE_OK(fl_scaling_init(&s, FL_E4M3, FL_SCALE_DELAYED, false, 1, FL_AMAX_MAX, 4, 1));
    CHECK(s.scale == 1.0f && s.scale_inv == 1.0f, "initial scale 1");
    fl_scaling_record(&s, 2.0f);
    fl_scaling_record(&s, 1.5f);                       /* two casts in one step: max */
    fl_scaling_update(&s);                             /* amax 2: 448/2/2 = 112 */
    CHECK(s.scale == 112.0f, "step 1 scale %g", s.scale);
    CHECK(s.history[0] == 0 && s.history[1] == 2.0f, "rolled: [%g %g]", s.history[0], s.history[1]);
    fl_scaling_record(&s, 8.0f);
    fl_scaling_update(&s);                             /* max(8, 2) = 8: 448/8/2 = 28 */
    CHECK(s.scale == 28.0f, "step 2 scale %g", s.scale);
    fl_scaling_record(&s, 1.0f);
    fl_scaling_update(&s);                             /* history [1, 8, 2]: still 8 */
    CHECK(s.scale == 28.0f, "step 3 scale %g", s.scale);
    int64_t u = s.updates;
    fl_scaling_update(&s);                             /* role did not run: untouched, no roll */
    CHECK(s.updates == u && s.history[1] == 1.0f, "idle step rolled");
    fl_scaling_record(&s, 0.5f);
    fl_scaling_update(&s);                             /* [0.5, 1, 8, 2] → 8 */
    fl_scaling_record(&s, 0.25f);
    fl_scaling_update(&s);                             /* [0.25, 0.5, 1, 8]: 8 still in the window */
    CHECK(s.scale == 28.0f, "window scale %g", s.scale);
    fl_scaling_record(&s, 0.25f);
    fl_scaling_update(&s);                             /* [0.25, 0.25, 0.5, 1]: 8 dropped → 448/1/2 */
    CHECK(s.scale == 224.0f, "after the window %g", s.scale);
    fl_scaling_record(&s, NAN);
    fl_scaling_update(&s);                             /* NaN amax keeps the scale */
    CHECK(s.scale == 224.0f, "NaN kept %g", s.scale);
    fl_scaling_record(&s, INFINITY);
    fl_scaling_update(&s);                             /* NaN still in the window, then inf: kept */
    CHECK(s.scale == 224.0f, "inf kept %g", s.scale);
    CHECK(s.scale_inv == 1.0f / 224.0f, "scale_inv follows");
    fl_scaling_free(&s);
}

TEST(recipe_most_recent_interval_and_extremes) {
    fl_scaling s;
    REQUIRE_OK(fl_scaling_init(&s, FL_E5M2, FL_SCALE_DELAYED, false, 0, FL_AMAX_MOST_RECENT, 8, 2));
    fl_scaling_record(&s, 4.0f);
    fl_scaling_update(&s);                             /* update 0: recompute → 57344/4 */
    CHECK(s.scale == 14336.0f, "scale %g", s.scale);
    fl_scaling_record(&s, 1.0f);
    fl_scaling_update(&s);                             /* update 1: interval 2, kept */
    CHECK(s.scale == 14336.0f, "interval kept %g", s.scale);
    fl_scaling_record(&s, 2.0f);
    fl_scaling_update(&s);                             /* update 2: most recent 2 → 28672 */
    CHECK(s.scale == 28672.0f, "scale %g", s.scale);
    fl_scaling_record(&s, 1e-45f);                     /* a denormal amax: 57344/amax is inf → FLT_MAX */
    fl_scaling_update(&s);
    fl_scaling_record(&s, 1e-45f);
    fl_scaling_update(&s);
    CHECK(s.scale == FLT_MAX, "overflowing scale %g", s.scale);
    fl_scaling_free(&s);
    CHECK(fl_scaling_init(&s, FL_F32, FL_SCALE_DELAYED, false, 0, FL_AMAX_MAX, 4, 1) != FL_OK, "fp32 role accepted");
    CHECK(fl_scaling_init(&s, FL_E4M3, FL_SCALE_DELAYED, false, 0, FL_AMAX_MAX, 0, 1) != FL_OK, "history 0 accepted");
}

TEST(recipe_pow2_scales) {
    CHECK(fl_scale_for(3.0f, FL_E4M3, 0, true, 1) == 128.0f, "448/3 → 128");
    CHECK(fl_scale_for(3.0f, FL_E4M3, 1, true, 1) == 64.0f, "margin 1 → 64");
    CHECK(fl_scale_for(448.0f, FL_E4M3, 0, true, 1) == 1.0f, "448 → 1");
    CHECK(fl_scale_for(500.0f, FL_E4M3, 0, true, 1) == 0.5f, "500 → 0.5");
    CHECK(fl_scale_for(0.0f, FL_E4M3, 0, true, 7) == 7.0f, "amax 0 keeps the fallback");
    CHECK(fl_scale_for(NAN, FL_E5M2, 0, true, 7) == 7.0f, "NaN keeps the fallback");
    CHECK(fl_scale_for(3.0f, FL_E4M3, 0, false, 1) == 448.0f / 3.0f, "plain scale");
    /* past 2^127 (an amax of 1e-38): the largest power of two, not FLT_MAX (which is none) */
    CHECK(fl_scale_for(1e-38f, FL_E4M3, 0, true, 1) == ldexpf(1.0f, 127), "pow2 tops out at 2^127: %g",
          fl_scale_for(1e-38f, FL_E4M3, 0, true, 1));
    CHECK(fl_scale_for(1e-45f, FL_E5M2, 0, true, 1) == ldexpf(1.0f, 127), "a denormal amax: 2^127");
    /* the floor is exact: an amax an ulp above 448·2^-10 gets 2^9, where torchao's and MS-AMP's fp32 log2 round
     * the quotient up to 10 (docs/recipes.md, "Power-of-two scales round down exactly") */
    CHECK(fl_scale_for(nextafterf(ldexpf(448.0f, -10), 1.0f), FL_E4M3, 0, true, 1) == 512.0f, "exact floor: %g",
          fl_scale_for(nextafterf(ldexpf(448.0f, -10), 1.0f), FL_E4M3, 0, true, 1));
    CHECK(fl_scale_for(ldexpf(448.0f, -10), FL_E4M3, 0, true, 1) == 1024.0f, "448·2^-10 → 2^10");
}

/* ---- FP8 linear against float64 ---------------------------------------------------------------- */

static double q(double v, double s, fl_dtype f) { return fl_fp8_to_f32(fl_f32_to_fp8((float)(v * s), f, FL_SATURATE), f); }

static fl_fp8_layer *te_layer(const bool hp[3], float sx, float sw, float sg) {
    fl_scaling r[3];
    fl_scaling_init(&r[0], FL_E4M3, FL_SCALE_DELAYED, false, 0, FL_AMAX_MAX, 4, 1);
    fl_scaling_init(&r[1], FL_E4M3, FL_SCALE_DELAYED, false, 0, FL_AMAX_MAX, 4, 1);
    fl_scaling_init(&r[2], FL_E5M2, FL_SCALE_DELAYED, false, 0, FL_AMAX_MAX, 4, 1);
    r[0].scale = sx; r[1].scale = sw; r[2].scale = sg;
    for (int i = 0; i < 3; i++) r[i].scale_inv = 1.0f / r[i].scale;
    fl_fp8_layer *l = NULL;
    fl_fp8_layer_new(&l, r, hp, FL_GRAN_TENSOR);
    return l;
}

enum { N = 24, K = 48, M = 32 };

typedef struct { fl_tensor *x, *w, *b, *g; float xs[N * K], ws[M * K], bs[M], gs[N * M]; } lin_case;

static void make_case(lin_case *c) {
    fl_rng r;
    fl_rng_seed(&r, 7);
    int64_t sx[2] = { N, K }, sw[2] = { M, K }, sb[1] = { M }, sg[2] = { N, M };
    fl_randn(&c->x, &r, 2, sx, FL_F32);
    fl_randn(&c->w, &r, 2, sw, FL_F32);
    fl_randn(&c->b, &r, 1, sb, FL_F32);
    fl_randn(&c->g, &r, 2, sg, FL_F32);
    fl_tensor_read_f32(c->x, c->xs);
    fl_tensor_read_f32(c->w, c->ws);
    fl_tensor_read_f32(c->b, c->bs);
    fl_tensor_read_f32(c->g, c->gs);
    fl_tensor_set_requires_grad(c->x, true);
    fl_tensor_set_requires_grad(c->w, true);
    fl_tensor_set_requires_grad(c->b, true);
}

static void free_case(lin_case *c) {
    fl_tensor_release(c->x); fl_tensor_release(c->w); fl_tensor_release(c->b); fl_tensor_release(c->g);
}

/* y, dx, dw of the FP8 linear; caller frees. */
static fl_status run_fp8(lin_case *c, fl_fp8_layer *l, float *y, float *dx, float *dw, float *db) {
    fl_tensor *out = NULL;
    FL_TRY(fl_fp8_linear(&out, c->x, c->w, c->b, l, true, NULL, NULL));
    fl_tensor_read_f32(out, y);
    fl_status st = fl_backward(out, c->g, false);
    if (st == FL_OK) {
        fl_tensor_read_f32(c->x->grad, dx);
        fl_tensor_read_f32(c->w->grad, dw);
        fl_tensor_read_f32(c->b->grad, db);
    }
    fl_tensor_zero_grad(c->x); fl_tensor_zero_grad(c->w); fl_tensor_zero_grad(c->b);
    fl_tensor_release(out);
    return st;
}

/* |a − ref| within fp32 accumulation error: 1e-5 of Σ|terms| (passed in), plus a tiny floor. */
#define CHECK_ACC(a, ref, mag, what, i) \
    CHECK(fabs((double)(a) - (ref)) <= 1e-5 * (mag) + 1e-6, "%s[%d]: %.9g vs %.9g", what, (int)(i), (double)(a), (ref))

TEST(fp8_linear_matches_float64_reference) {
    lin_case c;
    make_case(&c);
    const float sx = 40, sw = 100, sg = 3000;
    for (int mask = 0; mask < 8; mask++) {   /* every combination of override_linear_precision */
        bool hp[3] = { mask & 1, mask & 2, mask & 4 };
        fl_fp8_layer *l = te_layer(hp, sx, sw, sg);
        static float y[N * M], dx[N * K], dw[M * K], db[M];
        REQUIRE_OK(run_fp8(&c, l, y, dx, dw, db));
        /* fprop */
        for (int i = 0; i < N; i++)
            for (int j = 0; j < M; j++) {
                double acc = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    double t = hp[0] ? (double)c.xs[i * K + k] * c.ws[j * K + k]
                                     : q(c.xs[i * K + k], sx, FL_E4M3) * q(c.ws[j * K + k], sw, FL_E4M3) / ((double)sx * sw);
                    acc += t; mag += fabs(t);
                }
                CHECK_ACC(y[i * M + j], acc + c.bs[j], mag + fabs(c.bs[j]), hp[0] ? "y(hp)" : "y", i * M + j);
            }
        /* dgrad */
        for (int i = 0; i < N; i++)
            for (int k = 0; k < K; k++) {
                double acc = 0, mag = 0;
                for (int j = 0; j < M; j++) {
                    double t = hp[1] ? (double)c.gs[i * M + j] * c.ws[j * K + k]
                                     : q(c.gs[i * M + j], sg, FL_E5M2) * q(c.ws[j * K + k], sw, FL_E4M3) / ((double)sg * sw);
                    acc += t; mag += fabs(t);
                }
                CHECK_ACC(dx[i * K + k], acc, mag, hp[1] ? "dx(hp)" : "dx", i * K + k);
            }
        /* wgrad */
        for (int j = 0; j < M; j++)
            for (int k = 0; k < K; k++) {
                double acc = 0, mag = 0;
                for (int i = 0; i < N; i++) {
                    double t = hp[2] ? (double)c.gs[i * M + j] * c.xs[i * K + k]
                                     : q(c.gs[i * M + j], sg, FL_E5M2) * q(c.xs[i * K + k], sx, FL_E4M3) / ((double)sg * sx);
                    acc += t; mag += fabs(t);
                }
                CHECK_ACC(dw[j * K + k], acc, mag, hp[2] ? "dw(hp)" : "dw", j * K + k);
            }
        for (int j = 0; j < M; j++) {
            double acc = 0;
            for (int i = 0; i < N; i++) acc += c.gs[i * M + j];
            CHECK_ACC(db[j], acc, fabs(acc) + N, "db", j);
        }
        /* the forward recorded the input amax (training): history[0] = amax(x) */
        if (!hp[0]) {
            float amax = fl_amax_f32(c.xs, N * K);
            CHECK(l->role[FL_ROLE_INPUT].history[0] == amax, "input amax %g vs %g", l->role[FL_ROLE_INPUT].history[0], amax);
        }
        fl_fp8_layer_release(l);
    }
    free_case(&c);
}

TEST(fp8_linear_eval_leaves_state_and_cache_reuses_weight) {
    lin_case c;
    make_case(&c);
    bool hp[3] = { false, false, false };
    fl_fp8_layer *l = te_layer(hp, 40, 100, 3000);
    fl_tensor *y1 = NULL, *y2 = NULL;
    bool prev = fl_set_grad_enabled(false);
    REQUIRE_OK(fl_fp8_linear(&y1, c.x, c.w, c.b, l, false, NULL, NULL));
    REQUIRE_OK(fl_fp8_linear(&y2, c.x, c.w, c.b, l, false, NULL, NULL));
    fl_set_grad_enabled(prev);
    for (int r = 0; r < 3; r++) CHECK(l->role[r].history[0] == 0, "role %d history touched by eval", r);
    CHECK(l->weight_casts == 1 && l->cache_hits == 1, "weight cast %lld times, %lld hits", (long long)l->weight_casts,
          (long long)l->cache_hits);
    int64_t idx[2] = { 0, 0 };
    REQUIRE_OK(fl_tensor_set(c.w, idx, 0.5));        /* an in-place write invalidates the cache */
    fl_tensor_release(y2); y2 = NULL;
    REQUIRE_OK(fl_fp8_linear(&y2, c.x, c.w, c.b, l, false, NULL, NULL));
    CHECK(l->weight_casts == 2, "stale weight cache reused");
    fl_tensor_release(y1); fl_tensor_release(y2);
    fl_fp8_layer_release(l);
    free_case(&c);
}

/* Per-row power-of-two scales as ao rowwise uses them, reference in float64. */
static void rowwise_scales(const float *a, int rows, int cols, int axis, float *s) {
    int n = axis == 0 ? rows : cols;
    for (int i = 0; i < n; i++) {
        float m = 0;
        for (int k = 0; k < (axis == 0 ? cols : rows); k++) {
            float v = fabsf(axis == 0 ? a[i * cols + k] : a[k * cols + i]);
            if (v > m) m = v;
        }
        s[i] = fl_scale_for(m > FL_AMAX_FLOOR ? m : FL_AMAX_FLOOR, FL_E4M3, 0, true, 1);
    }
}

TEST(fp8_linear_rowwise_matches_reference) {
    lin_case c;
    make_case(&c);
    fl_scaling r[3];
    for (int i = 0; i < 3; i++) fl_scaling_init(&r[i], FL_E4M3, FL_SCALE_CURRENT, true, 0, FL_AMAX_MAX, 1, 1);
    fl_fp8_layer *l = NULL;
    REQUIRE_OK(fl_fp8_layer_new(&l, r, NULL, FL_GRAN_ROWWISE));
    static float y[N * M], dx[N * K], dw[M * K], db[M];
    REQUIRE_OK(run_fp8(&c, l, y, dx, dw, db));
    static float sxr[N], swr[M], sgr[N], swc[K], sgc[M], sxc[K];
    rowwise_scales(c.xs, N, K, 0, sxr); rowwise_scales(c.ws, M, K, 0, swr);
    rowwise_scales(c.gs, N, M, 0, sgr); rowwise_scales(c.ws, M, K, 1, swc);
    rowwise_scales(c.gs, N, M, 1, sgc); rowwise_scales(c.xs, N, K, 1, sxc);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < M; j++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double t = q(c.xs[i * K + k], sxr[i], FL_E4M3) * q(c.ws[j * K + k], swr[j], FL_E4M3) / ((double)sxr[i] * swr[j]);
                acc += t; mag += fabs(t);
            }
            CHECK_ACC(y[i * M + j], acc + c.bs[j], mag + fabs(c.bs[j]), "y", i * M + j);
        }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < K; k++) {
            double acc = 0, mag = 0;
            for (int j = 0; j < M; j++) {
                double t = q(c.gs[i * M + j], sgr[i], FL_E4M3) * q(c.ws[j * K + k], swc[k], FL_E4M3) / ((double)sgr[i] * swc[k]);
                acc += t; mag += fabs(t);
            }
            CHECK_ACC(dx[i * K + k], acc, mag, "dx", i * K + k);
        }
    for (int j = 0; j < M; j++)
        for (int k = 0; k < K; k++) {
            double acc = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                double t = q(c.gs[i * M + j], sgc[j], FL_E4M3) * q(c.xs[i * K + k], sxc[k], FL_E4M3) / ((double)sgc[j] * sxc[k]);
                acc += t; mag += fabs(t);
            }
            CHECK_ACC(dw[j * K + k], acc, mag, "dw", j * K + k);
        }
    fl_fp8_layer_release(l);
    free_case(&c);
}

/* What a rowwise layer's autograd node keeps of x: its per-column FP8 cast (wgrad's operand, made in the forward:
 * 1 byte per element), and not x in fp32, when wgrad runs in FP8 (ROWWISE) and the weight takes a gradient; x
 * itself for ROWWISE_GW_HP (wgrad in high precision) and for a frozen weight, whose backward still gives dx
 * (fp8_linear_rowwise_matches_reference checks the values). */
static void rowwise_saved_x(const fl_tensor *out, int *f32, int *fp8_cols) {
    *f32 = *fp8_cols = 0;
    const fl_node *n = out->grad_fn;
    for (int i = 0; n && i < FL_NODE_MAX_SAVED; i++) {
        const fl_tensor *t = n->saved[i];
        if (!t || fl_tensor_numel(t) != N * K) continue;
        *f32 += t->dtype == FL_F32;
        *fp8_cols += fl_format(t->dtype)->is_fp8 && t->scale_axis == 1;
    }
}
TEST(fp8_linear_rowwise_keeps_x_per_column_in_fp8) {
    for (int kind = 0; kind < 3; kind++) {   /* ROWWISE, ROWWISE_GW_HP, ROWWISE with a frozen weight */
        lin_case c;
        make_case(&c);
        fl_scaling r[3];
        for (int i = 0; i < 3; i++) fl_scaling_init(&r[i], FL_E4M3, FL_SCALE_CURRENT, true, 0, FL_AMAX_MAX, 1, 1);
        fl_fp8_layer *l = NULL;
        REQUIRE_OK(fl_fp8_layer_new(&l, r, NULL, kind == 1 ? FL_GRAN_ROWWISE_GW_HP : FL_GRAN_ROWWISE));
        if (kind == 2) fl_tensor_set_requires_grad(c.w, false);
        fl_tensor *out = NULL;
        REQUIRE_OK(fl_fp8_linear(&out, c.x, c.w, c.b, l, true, NULL, NULL));
        int f32, cols;
        rowwise_saved_x(out, &f32, &cols);
        CHECK(kind == 0 ? f32 == 0 && cols == 1 : f32 == 1 && cols == 0,
              "kind %d: %d fp32 and %d per-column FP8 copies of x kept", kind, f32, cols);
        REQUIRE_OK(fl_backward(out, c.g, false));
        CHECK(c.x->grad && (kind == 2) == !c.w->grad, "kind %d: the gradients asked for", kind);
        fl_tensor_release(out);
        fl_fp8_layer_release(l);
        free_case(&c);
    }
}

/* rowwise_with_gw_hp: the weight gradient is the high-precision product dYᵀ·X (fp32 here, no autocast), where
 * ROWWISE quantizes both; the same layer config otherwise. The tolerance tells the two apart: ROWWISE's dW must
 * miss the exact product by more than it, or the test could not see the setting ignored. */
TEST(fp8_linear_rowwise_gw_hp_keeps_wgrad_exact) {
    lin_case c;
    make_case(&c);
    static float y[N * M], dx[N * K], dw[M * K], db[M], dw_row[M * K];
    const fl_fp8_granularity grans[2] = { FL_GRAN_ROWWISE_GW_HP, FL_GRAN_ROWWISE };
    for (int gi = 0; gi < 2; gi++) {
        fl_scaling r[3];
        for (int i = 0; i < 3; i++) fl_scaling_init(&r[i], FL_E4M3, FL_SCALE_CURRENT, true, 0, FL_AMAX_MAX, 1, 1);
        fl_fp8_layer *l = NULL;
        REQUIRE_OK(fl_fp8_layer_new(&l, r, NULL, grans[gi]));
        REQUIRE_OK(run_fp8(&c, l, y, dx, gi == 0 ? dw : dw_row, db));
        fl_fp8_layer_release(l);
    }
    int far = 0;
    for (int j = 0; j < M; j++)
        for (int k = 0; k < K; k++) {
            double acc = 0, mag = 0;
            for (int i = 0; i < N; i++) {
                double t = (double)c.gs[i * M + j] * c.xs[i * K + k];
                acc += t; mag += fabs(t);
            }
            CHECK_ACC(dw[j * K + k], acc, mag, "dw (gw_hp)", j * K + k);
            if (fabs((double)dw_row[j * K + k] - acc) > 1e-5 * mag + 1e-6) far++;
        }
    CHECK(far > M * K / 2, "ROWWISE's quantized dW is within the exact bound at %d of %d entries", M * K - far, M * K);
    free_case(&c);
}

TEST(msamp_adamw_step_matches_reference) {
    enum { P = 1000 };
    int64_t n = P;
    fl_rng r;
    fl_rng_seed(&r, 3);
    fl_tensor *p = NULL, *g = NULL, *m0 = NULL, *m = NULL, *v = NULL, *vs = NULL, *z = NULL;
    REQUIRE_OK(fl_randn(&p, &r, 1, &n, FL_F32));
    REQUIRE_OK(fl_randn(&g, &r, 1, &n, FL_F32));
    REQUIRE_OK(fl_randn(&m0, &r, 1, &n, FL_F32));
    fl_quant_opts o;
    fl_quant_opts_default(&o);
    o.scale = 64;
    REQUIRE_OK(fl_quantize(&m, m0, FL_E4M3, &o));
    REQUIRE_OK(fl_tensor_zeros(&z, FL_F32, 1, &n, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_to(&v, z, FL_F16));
    int64_t one = 1;
    REQUIRE_OK(fl_tensor_full(&vs, FL_F32, 1, &one, 1.0, FL_DEV_CPU));
    static float ps[P], gs[P], ms[P], pn[P], mn[P];
    fl_tensor_read_f32(p, ps); fl_tensor_read_f32(g, gs); fl_tensor_read_f32(m, ms);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
    REQUIRE_OK(fl_msamp_adamw_step(p, g, m, v, vs, NULL, lr, b1, b2, eps, wd, 1));
    fl_tensor_read_f32(p, pn); fl_tensor_read_f32(m, mn);
    double mmax = 0;
    for (int i = 0; i < P; i++) mmax = fmax(mmax, fabs(b1 * ms[i] + (1 - b1) * gs[i]));
    float mscale = fl_scale_for((float)mmax, FL_E4M3, 0, true, 1);
    int bad = 0;
    for (int i = 0; i < P; i++) {
        double mi = b1 * ms[i] + (1 - b1) * gs[i], vi = (1 - b2) * (double)gs[i] * gs[i];
        double ref = ps[i] * (1 - lr * wd) - lr / (1 - b1) * mi / (sqrt(vi) / sqrt(1 - b2) + eps);
        if (fabs(pn[i] - ref) > 1e-5 * fabs(ref) + 1e-6) bad++;
        if (mn[i] != (float)q(mi, mscale, FL_E4M3) / mscale) bad++;
    }
    CHECK(bad == 0, "%d mismatches against the float64 AdamW with re-quantized moments", bad);
    CHECK(*(float *)fl_tensor_data(m->scale_inv) == 1.0f / mscale, "m scale_inv");
    fl_tensor *bad_g = NULL;
    int64_t two = 2;
    REQUIRE_OK(fl_tensor_zeros(&bad_g, FL_F32, 1, &two, FL_DEV_CPU));
    CHECK(fl_msamp_adamw_step(p, bad_g, m, v, vs, NULL, lr, b1, b2, eps, wd, 2) != FL_OK, "size mismatch accepted");
    fl_tensor *t[] = { p, g, m0, m, v, vs, z, bad_g };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) fl_tensor_release(t[i]);
}

/* Every code, in both formats, through the AVX-512 table lookup and the portable loop, with a length that
 * leaves a partial vector at the end. */
TEST(fp8_decode_bf16_every_code) {
    int64_t n = 256 * 3 + 13;
    for (int wide = 1; wide >= 0; wide--)
        for (int f = 0; f < 2; f++) {
            fl_cpu_avx512_allowed = wide;
            fl_dtype fmt = f ? FL_E5M2 : FL_E4M3;
            fl_tensor *q = NULL, *d = NULL;
            REQUIRE_OK(fl_tensor_empty(&q, fmt, 1, &n, FL_DEV_CPU));
            uint8_t *b = fl_tensor_data(q);
            for (int64_t i = 0; i < n; i++) b[i] = (uint8_t)(i * 7 + i / 256);
            REQUIRE_OK(fl_fp8_decode_bf16(&d, q));
            const uint16_t *h = fl_tensor_data(d);
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = fl_fp8_to_f32(b[i], fmt), got = fl_bf16_to_f32(h[i]);
                if (isnan(want) ? !isnan(got) || signbit(got) != signbit(want)
                                : (got != want || signbit(got) != signbit(want))) bad++;
            }
            CHECK(bad == 0, "%s (%s): %d codes decode wrongly", fl_format(fmt)->name, wide ? "avx512" : "portable", bad);
            fl_tensor_release(q); fl_tensor_release(d);
        }
    fl_cpu_avx512_allowed = true;
}

/* The next of a linear congruential sequence (state *s) as a float in [0, 1), less c: the fused-cast tests' data. */
static float lcg_uniform(uint32_t *s, float c) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f - c;
}

/* The fused casts' three ways to scale (quantize_dbias, quantize_dbias_dgelu, quantize_gelu): mode 0 the host
 * scale, 1 and 2 current scaling (margin 0 and 1, pow2 off and on); ref_cast: the plain cast each must match,
 * quantize or quantize_current. */
static const float *mode_scale(int mode, const float *host) { return mode ? NULL : host; }
static int mode_margin(int mode) { return mode == 2; }
static bool mode_pow2(int mode) { return mode == 2; }
static fl_status ref_cast(const fl_device *cpu, fl_tensor *q, const fl_tensor *src, int mode, const float *host) {
    return mode ? cpu->quantize_current(q, src, -1, mode_margin(mode), mode_pow2(mode), FL_SATURATE)
                : cpu->quantize(q, src, host, -1, FL_SATURATE);
}

/* The CPU's cast of dY with its column sums (quantize_dbias) gives the bytes, scale_inv and statistics of
 * quantize (host scale) or quantize_current (current scaling) and the bits of fl_reduce's sum over dim 0, on
 * shapes with partial row chunks and columns past one reduction tile, on 1 and 2 threads. */
TEST(fp8_quantize_dbias_matches_cast_and_reduce) {
    static const int64_t shapes[][2] = { { 2048, 768 }, { 257, 33 }, { 1, 5 }, { 600, 1500 }, { 0, 7 } };
    const fl_device *cpu = fl_cpu_device();
    const int threads0 = omp_get_max_threads();
    for (unsigned si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int tm = 0; tm < 6; tm++) {
            const int threads = 1 + tm % 2, mode = tm / 2;
            omp_set_num_threads(threads);
            const int64_t R = shapes[si][0], C = shapes[si][1], sh[2] = { R, C };
            fl_tensor *src = NULL, *q1 = NULL, *q2 = NULL, *db = NULL, *ref = NULL;
            REQUIRE_OK(fl_tensor_empty(&src, FL_F32, 2, sh, FL_DEV_CPU));
            float *x = fl_tensor_data(src);
            uint32_t s = 99u + (uint32_t)si;
            for (int64_t i = 0; i < R * C; i++) {
                x[i] = lcg_uniform(&s, 0.5f) * (i % 101 == 0 ? 3e3f : 1.0f) * (i % 211 == 0 ? 1e-9f : 1.0f);
            }
            const float scale = 37.5f;
            REQUIRE_OK(fl_tensor_empty(&q1, FL_E5M2, 2, sh, FL_DEV_CPU));
            REQUIRE_OK(fl_tensor_empty(&q2, FL_E5M2, 2, sh, FL_DEV_CPU));
            REQUIRE_OK(fl_tensor_empty(&db, FL_F32, 1, &C, FL_DEV_CPU));
            REQUIRE_OK(ref_cast(cpu, q1, src, mode, &scale));
            REQUIRE_OK(cpu->quantize_dbias(q2, src, mode_scale(mode, &scale), mode_margin(mode), mode_pow2(mode),
                                           FL_SATURATE, db));
            REQUIRE_OK(fl_reduce_raw(&ref, FL_OP_SUM, src, 0, false));
            CHECK(!memcmp(fl_tensor_data(q1), fl_tensor_data(q2), (size_t)(R * C)), "%lldx%lld mode %d: bytes differ",
                  (long long)R, (long long)C, mode);
            CHECK(*(float *)fl_tensor_data(q1->scale_inv) == *(float *)fl_tensor_data(q2->scale_inv),
                  "%lldx%lld mode %d: scale_inv differs", (long long)R, (long long)C, mode);
            CHECK(q1->qstats.amax == q2->qstats.amax && q1->qstats.underflow == q2->qstats.underflow &&
                  q1->qstats.saturated == q2->qstats.saturated && q1->qstats.nan == q2->qstats.nan,
                  "%lldx%lld mode %d: statistics differ", (long long)R, (long long)C, mode);
            CHECK(!memcmp(fl_tensor_data(db), fl_tensor_data(ref), (size_t)C * sizeof(float)),
                  "%lldx%lld threads %d: column sums differ from the reduction", (long long)R, (long long)C, threads);
            fl_tensor *t[] = { src, q1, q2, db, ref };
            for (unsigned i = 0; i < 5; i++) fl_tensor_release(t[i]);
        }
    omp_set_num_threads(threads0);
}

/* The CPU's quantize_dbias_dgelu against its act_bwd (tanh GELU's derivative) then quantize_dbias, and then
 * quantize (quantize_current) where no bias gradient is asked for: the same bytes, scale_inv, statistics and column
 * sums, with the host scale and with current scaling, on shapes with partial row chunks, rows not a multiple of a
 * vector and columns past GELU's span, on 1 and 2 threads, with values that saturate, underflow and are NaN; and
 * its refusals. */
TEST(fp8_quantize_dbias_dgelu_matches_gelu_bwd_then_cast) {
    static const int64_t shapes[][2] = { { 2048, 1024 }, { 257, 33 }, { 1, 5 }, { 300, 4100 } };
    const fl_device *cpu = fl_cpu_device();
    const int threads0 = omp_get_max_threads();
    for (unsigned si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int tm = 0; tm < 6; tm++) {
            const int threads = 1 + tm % 2, mode = tm / 2;
            omp_set_num_threads(threads);
            const int64_t R = shapes[si][0], C = shapes[si][1], sh[2] = { R, C };
            fl_tensor *t[8] = { NULL };   /* src, x, dy, q1, q2, q3, db1, db2 */
            for (int i = 0; i < 3; i++) REQUIRE_OK(fl_tensor_empty(&t[i], FL_F32, 2, sh, FL_DEV_CPU));
            for (int i = 3; i < 6; i++) REQUIRE_OK(fl_tensor_empty(&t[i], FL_E5M2, 2, sh, FL_DEV_CPU));
            for (int i = 6; i < 8; i++) REQUIRE_OK(fl_tensor_empty(&t[i], FL_F32, 1, &C, FL_DEV_CPU));
            float *g = fl_tensor_data(t[0]), *x = fl_tensor_data(t[1]), *dy = fl_tensor_data(t[2]);
            uint32_t s = 17u + (uint32_t)si;
            for (int64_t i = 0; i < R * C; i++) {
                x[i] = lcg_uniform(&s, 0.5f) * 10.0f;
                g[i] = lcg_uniform(&s, 0.5f) * (i % 101 == 0 ? 3e4f : 1.0f) * (i % 211 == 0 ? 1e-9f : 1.0f);
                if (i % 1009 == 7) x[i] = NAN;
            }
            const float scale = 37.5f;
            const float *sc = mode_scale(mode, &scale);
            const int mg = mode_margin(mode);
            const bool p2 = mode_pow2(mode);
            REQUIRE_OK(cpu->act_bwd(FL_ACT_GELU_TANH, x, g, dy, R * C));
            REQUIRE_OK(cpu->quantize_dbias(t[3], t[2], sc, mg, p2, FL_SATURATE, t[6]));
            REQUIRE_OK(cpu->quantize_dbias_dgelu(t[4], t[0], t[1], sc, mg, p2, FL_SATURATE, t[7]));
            REQUIRE_OK(ref_cast(cpu, t[5], t[2], mode, &scale));
            fl_tensor *q3 = NULL;   /* no bias gradient: the bytes and statistics of the plain cast */
            REQUIRE_OK(fl_tensor_empty(&q3, FL_E5M2, 2, sh, FL_DEV_CPU));
            REQUIRE_OK(cpu->quantize_dbias_dgelu(q3, t[0], t[1], sc, mg, p2, FL_SATURATE, NULL));
            const fl_tensor *qs[3] = { t[4], t[5], q3 };
            for (int k = 0; k < 3; k++) {
                const fl_tensor *a = t[3], *b = qs[k];
                CHECK(!memcmp(fl_tensor_data(a), fl_tensor_data(b), (size_t)(R * C)),
                      "%lldx%lld threads %d mode %d (%d): bytes differ", (long long)R, (long long)C, threads, mode, k);
                CHECK(*(float *)fl_tensor_data(a->scale_inv) == *(float *)fl_tensor_data(b->scale_inv),
                      "%lldx%lld mode %d (%d): scale_inv differs", (long long)R, (long long)C, mode, k);
                CHECK(a->qstats.amax == b->qstats.amax && a->qstats.underflow == b->qstats.underflow &&
                      a->qstats.saturated == b->qstats.saturated && a->qstats.nan == b->qstats.nan,
                      "%lldx%lld threads %d mode %d (%d): statistics differ", (long long)R, (long long)C, threads, mode, k);
            }
            CHECK(!memcmp(fl_tensor_data(t[6]), fl_tensor_data(t[7]), (size_t)C * sizeof(float)),
                  "%lldx%lld threads %d: column sums differ", (long long)R, (long long)C, threads);
            CHECK(R * C < 1000 || ((mode || t[3]->qstats.saturated > 0) && t[3]->qstats.nan > 0 && t[3]->qstats.underflow > 0),
                  "%lldx%lld: the data must saturate (host scale), underflow and hold NaN", (long long)R, (long long)C);
            fl_tensor_release(q3);
            for (int i = 0; i < 8; i++) fl_tensor_release(t[i]);
        }
    omp_set_num_threads(threads0);
    /* refusals: x of another shape, a bias gradient of the wrong length, an fp32 destination */
    const int64_t sh[2] = { 4, 6 }, sh2[2] = { 6, 4 }, five = 5;
    fl_tensor *g = NULL, *x = NULL, *x2 = NULL, *q = NULL, *qf = NULL, *db = NULL;
    REQUIRE_OK(fl_tensor_empty(&g, FL_F32, 2, sh, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&x, FL_F32, 2, sh, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&x2, FL_F32, 2, sh2, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&q, FL_E5M2, 2, sh, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&qf, FL_F32, 2, sh, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&db, FL_F32, 1, &five, FL_DEV_CPU));
    float f = 1.0f;
    CHECK(cpu->quantize_dbias_dgelu(q, g, x2, &f, 0, false, FL_SATURATE, NULL) == FL_EINVAL, "x of another shape");
    CHECK(cpu->quantize_dbias_dgelu(q, g, x, NULL, 0, false, FL_SATURATE, db) == FL_EINVAL,
          "a bias gradient of 5 for 6 columns");
    CHECK(cpu->quantize_dbias_dgelu(qf, g, x, &f, 0, false, FL_SATURATE, NULL) == FL_EINVAL, "an fp32 destination");
    fl_tensor *r[] = { g, x, x2, q, qf, db };
    for (unsigned i = 0; i < 6; i++) fl_tensor_release(r[i]);
}

/* The CPU's quantize_gelu against its GELU then quantize (host scale) or quantize_current (current scaling): the
 * same bytes, scale_inv and statistics, on sizes around its chunks and GELU's spans, 1 and 2 threads, with values
 * that saturate, underflow and are NaN. */
TEST(fp8_quantize_gelu_matches_gelu_then_quantize) {
    static const int64_t sizes[] = { 0, 1, 4095, 4097, 16384, 16385, 3 * 16384 + 77, 1 << 17 };
    const fl_device *cpu = fl_cpu_device();
    const int threads0 = omp_get_max_threads();
    for (unsigned si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int tm = 0; tm < 6; tm++) {
            const int threads = 1 + tm % 2, mode = tm / 2;
            omp_set_num_threads(threads);
            const int64_t n = sizes[si];
            fl_tensor *src = NULL, *h = NULL, *q1 = NULL, *q2 = NULL;
            REQUIRE_OK(fl_tensor_empty(&src, FL_F32, 1, &n, FL_DEV_CPU));
            REQUIRE_OK(fl_tensor_empty(&h, FL_F32, 1, &n, FL_DEV_CPU));
            float *x = fl_tensor_data(src);
            uint32_t s = 5u + (uint32_t)si;
            for (int64_t i = 0; i < n; i++) {
                x[i] = lcg_uniform(&s, 0.5f) * 8.0f * (i % 97 == 0 ? 300.0f : 1.0f);
                if (i % 1009 == 5) x[i] = NAN;
            }
            const float scale = 40.0f;
            REQUIRE_OK(fl_tensor_empty(&q1, FL_E4M3, 1, &n, FL_DEV_CPU));
            REQUIRE_OK(fl_tensor_empty(&q2, FL_E4M3, 1, &n, FL_DEV_CPU));
            REQUIRE_OK(cpu->act_fwd(FL_ACT_GELU_TANH, x, fl_tensor_data(h), n));
            REQUIRE_OK(ref_cast(cpu, q1, h, mode, &scale));
            REQUIRE_OK(cpu->quantize_gelu(q2, src, mode_scale(mode, &scale), mode_margin(mode), mode_pow2(mode), 1,
                                          FL_SATURATE));
            CHECK(!memcmp(fl_tensor_data(q1), fl_tensor_data(q2), (size_t)n), "n %lld threads %d mode %d: bytes differ",
                  (long long)n, threads, mode);
            CHECK(*(float *)fl_tensor_data(q1->scale_inv) == *(float *)fl_tensor_data(q2->scale_inv),
                  "n %lld mode %d: scale_inv differs", (long long)n, mode);
            CHECK(q1->qstats.amax == q2->qstats.amax && q1->qstats.underflow == q2->qstats.underflow &&
                  q1->qstats.saturated == q2->qstats.saturated && q1->qstats.nan == q2->qstats.nan,
                  "n %lld threads %d mode %d: statistics differ", (long long)n, threads, mode);
            CHECK(n < 1000 || mode || (q1->qstats.saturated > 0 && q1->qstats.nan > 0),
                  "n %lld: the data must saturate and hold NaN", (long long)n);
            fl_tensor *t[] = { src, h, q1, q2 };
            for (unsigned i = 0; i < 4; i++) fl_tensor_release(t[i]);
        }
    omp_set_num_threads(threads0);
    float f = 1.0f;
    fl_tensor *a = NULL, *b = NULL;
    const int64_t one = 1;
    REQUIRE_OK(fl_tensor_empty(&a, FL_F32, 1, &one, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&b, FL_E4M3, 1, &one, FL_DEV_CPU));
    CHECK(cpu->quantize_gelu(b, a, &f, 0, false, 0, FL_SATURATE) == FL_EINVAL, "the erf form is not the entry's");
    fl_tensor_release(a); fl_tensor_release(b);
}

/* The CPU's quantize_rows_gelu against its GELU then quantize_rows_aux, and quantize_rows_dgelu against its GELU'
 * ⊙ dY in place then quantize_rows_aux: the same values made, bytes, per-row scales, statistics, column amaxes (and
 * bias gradient), on shapes with one row, rows past a chunk and columns past GELU's span, 1 and 2 threads, margin and
 * pow2 on and off, values that saturate, underflow and are NaN; and their refusals. */
TEST(fp8_quantize_rows_gelu_matches_gelu_then_rows_aux) {
    static const int64_t shapes[][2] = { { 2048, 256 }, { 1, 5 }, { 257, 4100 }, { 0, 3 } };
    const fl_device *cpu = fl_cpu_device();
    const int threads0 = omp_get_max_threads();
    for (unsigned si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int tm = 0; tm < 8; tm++) {
            const int threads = 1 + tm % 2, mode = 1 + tm / 2 % 2, back = tm / 4;
            omp_set_num_threads(threads);
            const int64_t R = shapes[si][0], C = shapes[si][1], sh[2] = { R, C };
            fl_tensor *x = NULL, *y1 = NULL, *y2 = NULL, *q1 = NULL, *q2 = NULL;
            REQUIRE_OK(fl_tensor_empty(&x, FL_F32, 2, sh, FL_DEV_CPU));
            REQUIRE_OK(fl_tensor_empty(&y1, FL_F32, 2, sh, FL_DEV_CPU));
            REQUIRE_OK(fl_tensor_empty(&y2, FL_F32, 2, sh, FL_DEV_CPU));
            float *xv = fl_tensor_data(x);
            uint32_t s = 41u + (uint32_t)si;
            for (int64_t i = 0; i < R * C; i++) {
                xv[i] = lcg_uniform(&s, 0.5f) * 6.0f * (i % 89 == 0 ? 1e4f : 1.0f) * (i % 97 == 0 ? 1e-30f : 1.0f);
                if (i % 1013 == 11) xv[i] = NAN;
            }
            fl_tensor *qs[2] = { NULL, NULL };
            for (int k = 0; k < 2; k++) {
                REQUIRE_OK(fl_tensor_empty(&qs[k], FL_E4M3, 2, sh, FL_DEV_CPU));
                fl_tensor_release(qs[k]->scale_inv);
                qs[k]->scale_inv = NULL;
                REQUIRE_OK(fl_tensor_empty(&qs[k]->scale_inv, FL_F32, 1, &R, FL_DEV_CPU));
                qs[k]->scale_axis = 0;
            }
            q1 = qs[0]; q2 = qs[1];
            float *cm1 = calloc((size_t)C + 1, sizeof(float)), *cm2 = calloc((size_t)C + 1, sizeof(float));
            REQUIRE(cm1 && cm2, "out of memory");
            fl_tensor *db1 = NULL, *db2 = NULL;
            REQUIRE_OK(fl_tensor_empty(&db1, FL_F32, 1, &C, FL_DEV_CPU));
            REQUIRE_OK(fl_tensor_empty(&db2, FL_F32, 1, &C, FL_DEV_CPU));
            const size_t n = (size_t)(R * C);
            if (back) {   /* y1, y2: the same dY, GELU' applied in place */
                float *g1 = fl_tensor_data(y1);
                for (size_t i = 0; i < n; i++) g1[i] = lcg_uniform(&s, 0.5f) * (i % 71 == 0 ? 3e3f : 1.0f);
                memcpy(fl_tensor_data(y2), g1, n * 4);
                REQUIRE_OK(cpu->act_bwd(FL_ACT_GELU_TANH, xv, g1, g1, R * C));
                REQUIRE_OK(cpu->quantize_rows_aux(q1, y1, mode_margin(mode), mode_pow2(mode), FL_SATURATE, cm1, db1));
                REQUIRE_OK(cpu->quantize_rows_dgelu(q2, y2, x, mode_margin(mode), mode_pow2(mode), FL_SATURATE, cm2,
                                                    db2));
                CHECK(!memcmp(fl_tensor_data(db1), fl_tensor_data(db2), (size_t)C * 4), "%lldx%lld threads %d: bias "
                      "gradients differ", (long long)R, (long long)C, threads);
            } else {
                REQUIRE_OK(cpu->act_fwd(FL_ACT_GELU_TANH, xv, fl_tensor_data(y1), R * C));
                REQUIRE_OK(cpu->quantize_rows_aux(q1, y1, mode_margin(mode), mode_pow2(mode), FL_SATURATE, cm1, NULL));
                REQUIRE_OK(cpu->quantize_rows_gelu(q2, y2, x, mode_margin(mode), mode_pow2(mode), FL_SATURATE, cm2));
            }
            fl_tensor_release(db1);
            fl_tensor_release(db2);
            CHECK(!memcmp(fl_tensor_data(y1), fl_tensor_data(y2), n * 4), "%lldx%lld %s: the values made differ",
                  (long long)R, (long long)C, back ? "GELU' ⊙ dY" : "GELU");
            CHECK(!memcmp(fl_tensor_data(q1), fl_tensor_data(q2), n), "%lldx%lld threads %d mode %d: bytes differ",
                  (long long)R, (long long)C, threads, mode);
            CHECK(!memcmp(fl_tensor_data(q1->scale_inv), fl_tensor_data(q2->scale_inv), (size_t)R * 4),
                  "%lldx%lld mode %d: row scales differ", (long long)R, (long long)C, mode);
            CHECK(!memcmp(cm1, cm2, (size_t)C * 4), "%lldx%lld threads %d: column amaxes differ", (long long)R,
                  (long long)C, threads);
            CHECK(q1->qstats.amax == q2->qstats.amax && q1->qstats.underflow == q2->qstats.underflow &&
                  q1->qstats.saturated == q2->qstats.saturated && q1->qstats.nan == q2->qstats.nan,
                  "%lldx%lld threads %d mode %d: statistics differ", (long long)R, (long long)C, threads, mode);
            CHECK(n < 1000 || (q1->qstats.nan > 0 && q1->qstats.underflow > 0), "%lldx%lld: the data must underflow "
                  "and hold NaN", (long long)R, (long long)C);
            free(cm1); free(cm2);
            fl_tensor *t[] = { x, y1, y2, q1, q2 };
            for (unsigned i = 0; i < 5; i++) fl_tensor_release(t[i]);
        }
    omp_set_num_threads(threads0);
    /* refusals: an output of another shape, a destination scaled per tensor */
    const int64_t sh[2] = { 4, 6 }, sh2[2] = { 6, 4 };
    fl_tensor *x = NULL, *y = NULL, *y2 = NULL, *q = NULL;
    REQUIRE_OK(fl_tensor_empty(&x, FL_F32, 2, sh, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&y, FL_F32, 2, sh, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&y2, FL_F32, 2, sh2, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&q, FL_E4M3, 2, sh, FL_DEV_CPU));
    CHECK(cpu->quantize_rows_gelu(q, y, x, 0, true, FL_SATURATE, NULL) == FL_EINVAL, "a destination scaled per tensor");
    fl_tensor_release(q->scale_inv);
    q->scale_inv = NULL;
    REQUIRE_OK(fl_tensor_empty(&q->scale_inv, FL_F32, 1, &sh[0], FL_DEV_CPU));
    q->scale_axis = 0;
    CHECK(cpu->quantize_rows_gelu(q, y2, x, 0, true, FL_SATURATE, NULL) == FL_EINVAL, "an output of another shape");
    CHECK(cpu->quantize_rows_gelu(q, y, x, 0, true, FL_SATURATE, NULL) == FL_OK, "the right shapes");
    CHECK(cpu->quantize_rows_dgelu(q, y2, x, 0, true, FL_SATURATE, NULL, NULL) == FL_EINVAL, "dY of another shape");
    fl_tensor *db5 = NULL;
    const int64_t five = 5;
    REQUIRE_OK(fl_tensor_empty(&db5, FL_F32, 1, &five, FL_DEV_CPU));
    CHECK(cpu->quantize_rows_dgelu(q, y, x, 0, true, FL_SATURATE, NULL, db5) == FL_EINVAL,
          "a bias gradient of 5 for 6 columns");
    CHECK(cpu->quantize_rows_dgelu(q, y, x, 0, true, FL_SATURATE, NULL, NULL) == FL_OK, "dY of the right shape");
    fl_tensor_release(db5);
    fl_tensor *r[] = { x, y, y2, q };
    for (unsigned i = 0; i < 4; i++) fl_tensor_release(r[i]);
}

/* Current scaling's first passes of quantize_gelu and quantize_dbias_dgelu make only the blocks whose bound reaches
 * the largest |value| made so far (cpu_quant.c). On data where that skip is at its edges they still give the
 * separate ops' amax, bytes and scale (1 and 2 threads): GELU's largest |value| on its negative side (every input
 * below 0.05), one large input first, last or mid-tensor, infinities, all NaN, all equal; GELU' ⊙ dY's largest where a
 * larger |dY| meets a GELU' near 0 (v ≈ −0.75) or a negative one (v ≈ −1.5), at a GELU' of 1.13 (v ≈ 1.5), an
 * infinite dY, NaN dY. */
static void gelu_family(float *x, float *g, int64_t n, int fam, uint32_t *s) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = lcg_uniform(s, 0.5f) * 2.0f;
        g[i] = lcg_uniform(s, 0.5f);
        switch (fam) {
        case 0: x[i] = -3.0f + (x[i] + 1.0f) * 1.525f; break;     /* [-3, 0.05]: |GELU| largest at v ≈ -0.75 */
        case 1: if (i == 0) x[i] = 40.0f; break;
        case 2: if (i == n - 1) x[i] = 40.0f; break;
        case 3: if (i == n / 2 + 3) { x[i] = 40.0f; g[i] = 9.0f; } break;
        case 4: if (i % 4099 == 1) x[i] = i % 2 ? INFINITY : -INFINITY; if (i % 5003 == 2) g[i] = INFINITY; break;
        case 5: x[i] = NAN; break;
        case 6: x[i] = 0.3f; g[i] = -2.0f; break;
        case 7: x[i] = -0.75f + x[i] * 0.01f; if (i == n / 3) g[i] = 1e3f; break;   /* GELU' ≈ 0 under the largest dY */
        case 8: x[i] = i == n - 5 ? -1.5f : x[i]; g[i] = i == n - 5 ? 100.0f : g[i]; break;   /* GELU' ≈ -0.129 */
        case 9: x[i] = -0.5f + x[i]; if (i % 777 == 0) { x[i] = 1.5f; g[i] = 3.0f + (float)(i % 5); } break;
        case 10: if (i % 3001 == 0) g[i] = NAN; break;
        }
    }
}
TEST(fp8_current_gelu_passes_skip_nothing_that_counts) {
    static const int64_t sizes[] = { 40000, 77 };
    const fl_device *cpu = fl_cpu_device();
    const int threads0 = omp_get_max_threads();
    for (unsigned si = 0; si < 2; si++)
        for (int fam = 0; fam < 11; fam++)
            for (int threads = 1; threads <= 2; threads++) {
                omp_set_num_threads(threads);
                const int64_t n = sizes[si], R = si ? 7 : 200, C = n / R, sh[2] = { R, C };
                fl_tensor *t[8] = { NULL };   /* x, g, GELU(x), GELU'(x) g, q ×4 */
                for (int i = 0; i < 4; i++) REQUIRE_OK(fl_tensor_empty(&t[i], FL_F32, 2, sh, FL_DEV_CPU));
                for (int i = 4; i < 8; i++)
                    REQUIRE_OK(fl_tensor_empty(&t[i], i < 6 ? FL_E4M3 : FL_E5M2, 2, sh, FL_DEV_CPU));
                uint32_t s = 3u + (uint32_t)fam;
                gelu_family(fl_tensor_data(t[0]), fl_tensor_data(t[1]), n, fam, &s);
                REQUIRE_OK(cpu->act_fwd(FL_ACT_GELU_TANH, fl_tensor_data(t[0]), fl_tensor_data(t[2]), n));
                REQUIRE_OK(cpu->act_bwd(FL_ACT_GELU_TANH, fl_tensor_data(t[0]), fl_tensor_data(t[1]),
                                        fl_tensor_data(t[3]), n));
                REQUIRE_OK(cpu->quantize_current(t[4], t[2], -1, 0, false, FL_SATURATE));
                REQUIRE_OK(cpu->quantize_gelu(t[5], t[0], NULL, 0, false, 1, FL_SATURATE));
                REQUIRE_OK(cpu->quantize_current(t[6], t[3], -1, 0, false, FL_SATURATE));
                REQUIRE_OK(cpu->quantize_dbias_dgelu(t[7], t[1], t[0], NULL, 0, false, FL_SATURATE, NULL));
                for (int k = 4; k < 8; k += 2) {
                    const fl_tensor *a = t[k], *b = t[k + 1];
                    CHECK(a->qstats.amax == b->qstats.amax &&
                          !memcmp(fl_tensor_data(a), fl_tensor_data(b), (size_t)n) &&
                          !memcmp(fl_tensor_data(a->scale_inv), fl_tensor_data(b->scale_inv), 4),
                          "%s, family %d, n %lld, %d threads: scale_inv %a against %a", k == 4 ? "GELU" : "GELU' ⊙ dY",
                          fam, (long long)n, threads, (double)*(float *)fl_tensor_data(a->scale_inv),
                          (double)*(float *)fl_tensor_data(b->scale_inv));
                }
                for (int i = 0; i < 8; i++) fl_tensor_release(t[i]);
            }
    omp_set_num_threads(threads0);
}

/* fl_fp8_linear_gelu against fl_gelu then fl_fp8_linear, over three steps of a delayed-scaling layer (history
 * updates between them; warmup: its first casts take current scales) or a current-scaling one (current, with
 * power-of-two scales and a margin of 1): the same outputs, input and weight gradients and recipe state bit for bit,
 * whether it fuses (per-tensor casts, every GEMM in FP8) or runs the two ops (a layer with a high-precision GEMM). */
static fl_status gelu_linear_steps(bool fused, const bool hp[3], int warmup, bool current, fl_fp8_granularity gran,
                                   float *y, float *dx, float *dw, float *hist, int *nfused) {
    *nfused = 0;
    lin_case c;
    make_case(&c);
    fl_scaling r[3];
    static const fl_dtype fmts[3] = { FL_E4M3, FL_E4M3, FL_E5M2 };
    const bool rows = gran != FL_GRAN_TENSOR;   /* torchao's rowwise: E4M3, current power-of-two scales */
    fl_status st = FL_OK;
    for (int i = 0; i < 3 && st == FL_OK; i++) {
        st = rows ? fl_scaling_init(&r[i], FL_E4M3, FL_SCALE_CURRENT, true, 0, FL_AMAX_MAX, 1, 1)
                  : fl_scaling_init(&r[i], fmts[i], current ? FL_SCALE_CURRENT : FL_SCALE_DELAYED, current, current,
                                    FL_AMAX_MAX, 4, 1);
        r[i].warmup = warmup;   /* MS-AMP's: the first `warmup` casts take current scales */
    }
    fl_fp8_layer *l = NULL;
    if (st == FL_OK) st = fl_fp8_layer_new(&l, r, hp, gran);
    for (int step = 0; step < 3 && st == FL_OK; step++) {
        fl_tensor *out = NULL, *h = NULL;
        if (fused) st = fl_fp8_linear_gelu(&out, c.x, c.w, c.b, l, true, NULL, NULL);
        else {
            st = fl_gelu(&h, c.x, 1);
            if (st == FL_OK) st = fl_fp8_linear(&out, h, c.w, c.b, l, true, NULL, NULL);
        }
        /* the fused node: the layer's own, flagged (the two ops' layer node reads GELU's output) */
        if (st == FL_OK && out->grad_fn && out->grad_fn->iargs[2]) (*nfused)++;
        if (st == FL_OK) st = fl_backward(out, c.g, false);
        if (st == FL_OK) {
            fl_tensor_read_f32(out, y + step * N * M);
            fl_tensor_read_f32(c.x->grad, dx + step * N * K);
            if (c.w->grad) fl_tensor_read_f32(c.w->grad, dw + step * M * K);
        }
        if (st == FL_OK && !rows) st = fl_fp8_layer_update(l);
        for (int i = 0; i < 3 && st == FL_OK; i++) {
            hist[step * 6 + 2 * i] = l->role[i].scale;
            hist[step * 6 + 2 * i + 1] = l->role[i].history[0];
        }
        fl_tensor_zero_grad(c.x); fl_tensor_zero_grad(c.w); fl_tensor_zero_grad(c.b);
        fl_tensor_release(out); fl_tensor_release(h);
    }
    fl_fp8_layer_release(l);
    free_case(&c);
    return st;
}

/* The same under ao's rowwise scaling: fused (GELU made once for x's per-row and per-column casts) where the weight
 * takes a gradient and wgrad runs in FP8 (ROWWISE, also with dgrad in high precision); GELU then the layer for
 * ROWWISE_GW_HP and for a frozen weight. The same outputs, gradients and recipe state bit for bit. */
TEST(fp8_linear_gelu_rowwise_matches_gelu_then_linear) {
    static const bool none[3] = { false, false, false }, dgrad_hp[3] = { false, true, false };
    for (int kind = 0; kind < 4; kind++) {   /* ROWWISE, ROWWISE with dgrad in high precision, GW_HP, frozen weight */
        const fl_fp8_granularity gran = kind == 2 ? FL_GRAN_ROWWISE_GW_HP : FL_GRAN_ROWWISE;
        static float y[2][3 * N * M], dx[2][3 * N * K], dw[2][3 * M * K], hist[2][18];
        memset(dw, 0, sizeof dw);
        int nf[2];
        for (int f = 0; f < 2; f++) {
            fl_status st;
            if (kind == 3) {   /* gelu_linear_steps' weight frozen: its own case, the flag set before the steps */
                st = FL_OK;
                lin_case c;
                make_case(&c);
                fl_scaling r[3];
                for (int i = 0; i < 3; i++)
                    fl_scaling_init(&r[i], FL_E4M3, FL_SCALE_CURRENT, true, 0, FL_AMAX_MAX, 1, 1);
                fl_fp8_layer *l = NULL;
                REQUIRE_OK(fl_fp8_layer_new(&l, r, NULL, gran));
                fl_tensor_set_requires_grad(c.w, false);
                fl_tensor *out = NULL, *h = NULL;
                if (f) REQUIRE_OK(fl_fp8_linear_gelu(&out, c.x, c.w, c.b, l, true, NULL, NULL));
                else {
                    REQUIRE_OK(fl_gelu(&h, c.x, 1));
                    REQUIRE_OK(fl_fp8_linear(&out, h, c.w, c.b, l, true, NULL, NULL));
                }
                nf[f] = out->grad_fn && out->grad_fn->iargs[2];
                REQUIRE_OK(fl_backward(out, c.g, false));
                fl_tensor_read_f32(out, y[f]);
                fl_tensor_read_f32(c.x->grad, dx[f]);
                fl_tensor_release(out); fl_tensor_release(h);
                fl_fp8_layer_release(l);
                free_case(&c);
                memset(hist[f], 0, sizeof hist[f]);
            } else {
                st = gelu_linear_steps(f, kind == 1 ? dgrad_hp : none, 0, true, gran, y[f], dx[f], dw[f], hist[f],
                                       &nf[f]);
            }
            REQUIRE_OK(st);
        }
        CHECK(nf[0] == 0 && nf[1] == (kind < 2 ? 3 : 0), "kind %d: %d fused steps", kind, nf[1]);
        CHECK(!memcmp(y[0], y[1], sizeof y[0]), "kind %d: outputs differ", kind);
        CHECK(!memcmp(dx[0], dx[1], sizeof dx[0]), "kind %d: input gradients differ", kind);
        CHECK(!memcmp(dw[0], dw[1], sizeof dw[0]), "kind %d: weight gradients differ", kind);
        CHECK(!memcmp(hist[0], hist[1], sizeof hist[0]), "kind %d: recipe state differs", kind);
    }
}

TEST(fp8_linear_gelu_matches_gelu_then_linear) {
    static const bool hps[2][3] = { { false, false, false }, { false, true, false } };
    for (int hi = 0; hi < 2; hi++)
        for (int sc = 0; sc < 3; sc++) {   /* delayed, delayed with a warm-up of 2 casts, current */
            const int warmup = sc == 1 ? 2 : 0;
            float y[2][3 * N * M], dx[2][3 * N * K], dw[2][3 * M * K], hist[2][18];
            int nf[2];
            for (int f = 0; f < 2; f++)
                REQUIRE_OK(gelu_linear_steps(f, hps[hi], warmup, sc == 2, FL_GRAN_TENSOR, y[f], dx[f], dw[f], hist[f],
                                             &nf[f]));
            /* fused: every step of the all-FP8 layer, whatever its scaling; never with a high-precision GEMM */
            CHECK(nf[0] == 0 && nf[1] == (hi ? 0 : 3), "hp %d scaling %d: %d fused steps", hi, sc, nf[1]);
            CHECK(!memcmp(y[0], y[1], sizeof y[0]), "hp %d warm-up %d: outputs differ", hi, warmup);
            CHECK(!memcmp(dx[0], dx[1], sizeof dx[0]), "hp %d warm-up %d: input gradients differ", hi, warmup);
            CHECK(!memcmp(dw[0], dw[1], sizeof dw[0]), "hp %d warm-up %d: weight gradients differ", hi, warmup);
            CHECK(!memcmp(hist[0], hist[1], sizeof hist[0]), "hp %d warm-up %d: recipe state differs", hi, warmup);
        }
}

/* The residual of fl_fp8_linear / fl_fp8_linear_gelu against the layer and then fl_binary's add, over three steps
 * with history updates: out = res + layer(x) + res ⊙ res (the residual with a second consumer, so its gradient
 * sums two terms). The same outputs, gradients of x, w, b and res and recipe state bit for bit. kind 0: per-tensor
 * delayed scaling (the add in the GEMM's store); 1: fprop in high precision; 2: rowwise current scaling; 3: GELU
 * before the layer (its cast in GELU's pass); 4: a bf16 residual and 5: a residual [M] broadcast over the rows (both
 * added by fl_binary after the layer). *nres: the steps whose residual the GEMM added. */
static fl_status residual_steps(int kind, bool fused, float *y, float *dx, float *dw, float *db, float *dr, float *hist,
                                int *nres) {
    *nres = 0;
    lin_case c;
    make_case(&c);
    fl_scaling r[3];
    static const fl_dtype fmts[3] = { FL_E4M3, FL_E4M3, FL_E5M2 };
    const bool rowwise = kind == 2;
    const bool hp[3] = { kind == 1, false, false };
    fl_status st = FL_OK;
    for (int i = 0; i < 3 && st == FL_OK; i++)
        st = rowwise ? fl_scaling_init(&r[i], FL_E4M3, FL_SCALE_CURRENT, true, 0, FL_AMAX_MAX, 1, 1)
                     : fl_scaling_init(&r[i], fmts[i], FL_SCALE_DELAYED, false, 0, FL_AMAX_MAX, 4, 1);
    fl_fp8_layer *l = NULL;
    if (st == FL_OK) st = fl_fp8_layer_new(&l, r, hp, rowwise ? FL_GRAN_ROWWISE : FL_GRAN_TENSOR);
    fl_tensor *res = NULL, *res32 = NULL;
    fl_rng rg;
    fl_rng_seed(&rg, 11);
    const int64_t rs2[2] = { N, M }, rs1[1] = { M };
    if (st == FL_OK) st = kind == 5 ? fl_randn(&res32, &rg, 1, rs1, FL_F32) : fl_randn(&res32, &rg, 2, rs2, FL_F32);
    if (st == FL_OK) st = kind == 4 ? fl_tensor_to(&res, res32, FL_BF16) : (res = fl_tensor_retain(res32), FL_OK);
    if (st == FL_OK) fl_tensor_set_requires_grad(res, true);
    for (int step = 0; step < 3 && st == FL_OK; step++) {
        fl_tensor *out = NULL, *h = NULL, *lin = NULL, *sq = NULL, *tot = NULL;
        if (fused) {
            st = kind == 3 ? fl_fp8_linear_gelu(&out, c.x, c.w, c.b, l, true, NULL, res)
                           : fl_fp8_linear(&out, c.x, c.w, c.b, l, true, NULL, res);
        } else {
            if (kind == 3) st = fl_gelu(&h, c.x, 1);
            if (st == FL_OK) st = fl_fp8_linear(&lin, kind == 3 ? h : c.x, c.w, c.b, l, true, NULL, NULL);
            if (st == FL_OK) st = fl_binary(&out, FL_OP_ADD, res, lin);
        }
        if (st == FL_OK && out->grad_fn && out->grad_fn->ninputs == 4) (*nres)++;
        if (st == FL_OK) st = fl_binary(&sq, FL_OP_MUL, res, res);
        if (st == FL_OK) st = fl_binary(&tot, FL_OP_ADD, out, sq);
        if (st == FL_OK) st = fl_backward(tot, c.g, false);
        if (st == FL_OK) {
            fl_tensor_read_f32(out, y + step * N * M);
            fl_tensor_read_f32(c.x->grad, dx + step * N * K);
            fl_tensor_read_f32(c.w->grad, dw + step * M * K);
            fl_tensor_read_f32(c.b->grad, db + step * M);
            fl_tensor_read_f32(res->grad, dr + step * N * M);
        }
        if (st == FL_OK && !rowwise) st = fl_fp8_layer_update(l);
        for (int i = 0; i < 3 && st == FL_OK; i++) {
            hist[step * 6 + 2 * i] = l->role[i].scale;
            hist[step * 6 + 2 * i + 1] = l->role[i].history[0];
        }
        fl_tensor_zero_grad(c.x); fl_tensor_zero_grad(c.w); fl_tensor_zero_grad(c.b); fl_tensor_zero_grad(res);
        fl_tensor *t[] = { out, h, lin, sq, tot };
        for (unsigned i = 0; i < 5; i++) fl_tensor_release(t[i]);
    }
    fl_tensor_release(res); fl_tensor_release(res32);
    fl_fp8_layer_release(l);
    free_case(&c);
    return st;
}

TEST(fp8_linear_residual_matches_linear_then_add) {
    static const char *const what[6] = { "per-tensor delayed", "high-precision fprop", "rowwise", "GELU before",
                                         "bf16 residual", "broadcast residual" };
    for (int kind = 0; kind < 6; kind++) {
        static float y[2][3 * N * M], dx[2][3 * N * K], dw[2][3 * M * K], db[2][3 * M], dr[2][3 * N * M], hist[2][18];
        memset(dr, 0, sizeof dr);
        int nr[2];
        for (int f = 0; f < 2; f++) REQUIRE_OK(residual_steps(kind, f, y[f], dx[f], dw[f], db[f], dr[f], hist[f], &nr[f]));
        /* the layer's own node takes the residual where it is fp32 of the output's shape (the CPU adds it in the GEMM) */
        CHECK(nr[0] == 0 && nr[1] == (kind >= 4 ? 0 : 3), "%s: %d steps with the residual in the layer", what[kind], nr[1]);
        CHECK(!memcmp(y[0], y[1], sizeof y[0]), "%s: outputs differ", what[kind]);
        CHECK(!memcmp(dx[0], dx[1], sizeof dx[0]), "%s: input gradients differ", what[kind]);
        CHECK(!memcmp(dw[0], dw[1], sizeof dw[0]), "%s: weight gradients differ", what[kind]);
        CHECK(!memcmp(db[0], db[1], sizeof db[0]), "%s: bias gradients differ", what[kind]);
        CHECK(!memcmp(dr[0], dr[1], kind == 5 ? 3 * M * sizeof(float) : sizeof dr[0]), "%s: residual gradients differ",
              what[kind]);
        CHECK(!memcmp(hist[0], hist[1], sizeof hist[0]), "%s: recipe state differs", what[kind]);
    }
}

/* Two FP8 layers with a tanh GELU between them (fl_fp8_linear, then fl_fp8_linear_gelu) against fl_fp8_linear,
 * fl_gelu, fl_fp8_linear over three steps, with delayed scaling (and a warm-up), with current scaling and with ao's
 * rowwise scaling: the second layer's backward casts the first layer's dY for it (the first layer's dy_handovers
 * counts those steps) where the first layer casts dY per tensor, or per row with dgrad in FP8, and GELU's input has
 * no other consumer; outputs, every gradient and both layers' recipe state are the same bits either way. */
enum { M2 = 16 };
typedef struct {
    float y[3 * N * M2], dx[3 * N * K], dw1[3 * M * K], db1[3 * M], dw2[3 * M2 * M], db2[3 * M2], hist[2][18];
    int64_t handed;
} mlp_out;

static fl_status mlp_steps(bool fused, const bool hp1[3], int warmup, bool second_use, bool current, bool rowwise,
                           mlp_out *o) {
    lin_case c;
    make_case(&c);
    fl_rng rng;
    fl_rng_seed(&rng, 11);
    const int64_t sw2[2] = { M2, M }, sb2[1] = { M2 }, sg[2] = { N, M2 };
    fl_tensor *w2 = NULL, *b2 = NULL, *g = NULL;
    fl_status st = fl_randn(&w2, &rng, 2, sw2, FL_F32);
    if (st == FL_OK) st = fl_randn(&b2, &rng, 1, sb2, FL_F32);
    if (st == FL_OK) st = fl_randn(&g, &rng, 2, sg, FL_F32);
    if (st == FL_OK) st = fl_tensor_set_requires_grad(w2, true);
    if (st == FL_OK) st = fl_tensor_set_requires_grad(b2, true);
    static const fl_dtype fmts[3] = { FL_E4M3, FL_E4M3, FL_E5M2 };
    static const bool no_hp[3] = { false, false, false };
    fl_fp8_layer *l[2] = { NULL, NULL };
    for (int k = 0; k < 2 && st == FL_OK; k++) {
        fl_scaling r[3];
        for (int i = 0; i < 3 && st == FL_OK; i++) {
            st = rowwise ? fl_scaling_init(&r[i], FL_E4M3, FL_SCALE_CURRENT, true, 0, FL_AMAX_MAX, 1, 1)
                         : fl_scaling_init(&r[i], fmts[i], current ? FL_SCALE_CURRENT : FL_SCALE_DELAYED, current, 0,
                                           FL_AMAX_MAX, 4, 1);
            r[i].warmup = k == 0 ? warmup : 0;
        }
        if (st == FL_OK)
            st = fl_fp8_layer_new(&l[k], r, k == 0 ? hp1 : no_hp, rowwise ? FL_GRAN_ROWWISE : FL_GRAN_TENSOR);
    }
    for (int step = 0; step < 3 && st == FL_OK; step++) {
        fl_tensor *h = NULL, *a = NULL, *y = NULL, *p = NULL, *out = NULL;
        st = fl_fp8_linear(&h, c.x, c.w, c.b, l[0], true, NULL, NULL);
        if (st == FL_OK && fused) st = fl_fp8_linear_gelu(&y, h, w2, b2, l[1], true, NULL, NULL);
        else if (st == FL_OK) {
            st = fl_gelu(&a, h, 1);
            if (st == FL_OK) st = fl_fp8_linear(&y, a, w2, b2, l[1], true, NULL, NULL);
        }
        if (st == FL_OK && second_use) {   /* h feeds a row sum too: its gradient has two parts */
            st = fl_reduce(&p, FL_OP_SUM, h, 1, true);
            if (st == FL_OK) st = fl_binary(&out, FL_OP_ADD, y, p);
        } else if (st == FL_OK) {
            out = fl_tensor_retain(y);
        }
        if (st == FL_OK) st = fl_backward(out, g, false);
        if (st == FL_OK) {
            fl_tensor_read_f32(out, o->y + step * N * M2);
            fl_tensor_read_f32(c.x->grad, o->dx + step * N * K);
            fl_tensor_read_f32(c.w->grad, o->dw1 + step * M * K);
            fl_tensor_read_f32(c.b->grad, o->db1 + step * M);
            fl_tensor_read_f32(w2->grad, o->dw2 + step * M2 * M);
            fl_tensor_read_f32(b2->grad, o->db2 + step * M2);
        }
        for (int k = 0; k < 2 && st == FL_OK; k++) {
            if (!rowwise) st = fl_fp8_layer_update(l[k]);
            for (int i = 0; i < 3 && st == FL_OK; i++) {
                o->hist[k][step * 6 + 2 * i] = l[k]->role[i].scale;
                o->hist[k][step * 6 + 2 * i + 1] = l[k]->role[i].history[0];
            }
        }
        fl_tensor *z[] = { c.x, c.w, c.b, w2, b2 };
        for (int i = 0; i < 5; i++) fl_tensor_zero_grad(z[i]);
        fl_tensor *rel[] = { h, a, y, p, out };
        for (int i = 0; i < 5; i++) fl_tensor_release(rel[i]);
    }
    o->handed = l[0] ? l[0]->dy_handovers : -1;
    fl_fp8_layer_release(l[0]);
    fl_fp8_layer_release(l[1]);
    fl_tensor_release(w2); fl_tensor_release(b2); fl_tensor_release(g);
    free_case(&c);
    return st;
}

TEST(fp8_linear_gelu_casts_dy_for_the_layer_before) {
    static const bool all_fp8[3] = { false, false, false }, hp_dgrad[3] = { false, true, false };
    static const bool hp_wgrad[3] = { false, false, true };
    static const struct { const bool *hp; int warmup; bool second, current, rowwise; int handed; } cases[] = {
        { all_fp8, 0, false, false, false, 3 },    /* every step */
        { all_fp8, 2, false, false, false, 3 },    /* the first layer's warm-up too (current scaling, amax first) */
        { all_fp8, 0, false, true, false, 3 },     /* current scaling (power-of-two scales), every step */
        { hp_dgrad, 0, false, false, false, 0 },   /* dgrad in high precision reads the fp32 dY */
        { all_fp8, 0, true, false, false, 0 },     /* GELU's input has a second consumer: dY is a sum */
        { all_fp8, 0, true, true, false, 0 },
        /* rowwise: dY per row with its column amaxes and bias gradient, every step; not with dgrad in high
         * precision, nor with a second consumer; with wgrad in high precision, without the column amaxes */
        { all_fp8, 0, false, true, true, 3 },
        { hp_dgrad, 0, false, true, true, 0 },
        { all_fp8, 0, true, true, true, 0 },
        { hp_wgrad, 0, false, true, true, 3 },
    };
    static mlp_out o[2];
    for (unsigned ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        for (int f = 0; f < 2; f++)
            REQUIRE_OK(mlp_steps(f, cases[ci].hp, cases[ci].warmup, cases[ci].second, cases[ci].current,
                                 cases[ci].rowwise, &o[f]));
        CHECK(o[0].handed == 0 && o[1].handed == cases[ci].handed, "case %u: %lld steps handed over, expected %d", ci,
              (long long)o[1].handed, cases[ci].handed);
        CHECK(!memcmp(o[0].y, o[1].y, sizeof o[0].y), "case %u: outputs differ", ci);
        CHECK(!memcmp(o[0].dx, o[1].dx, sizeof o[0].dx), "case %u: input gradients differ", ci);
        CHECK(!memcmp(o[0].dw1, o[1].dw1, sizeof o[0].dw1) && !memcmp(o[0].db1, o[1].db1, sizeof o[0].db1),
              "case %u: the first layer's weight or bias gradients differ", ci);
        CHECK(!memcmp(o[0].dw2, o[1].dw2, sizeof o[0].dw2) && !memcmp(o[0].db2, o[1].db2, sizeof o[0].db2),
              "case %u: the second layer's weight or bias gradients differ", ci);
        CHECK(!memcmp(o[0].hist, o[1].hist, sizeof o[0].hist), "case %u: recipe state differs", ci);
    }
}

/* The CPU's layernorm_quantize against its layernorm_fwd then quantize (host scale) or quantize_current (current
 * scaling): the same bytes, scale_inv, statistics and row statistics, with and without the affine parameters, on
 * shapes past a vector and with one row, on 1 and 2 threads, with rows that saturate, underflow and hold NaN; and
 * its refusals. */
TEST(fp8_layernorm_quantize_matches_layernorm_then_cast) {
    static const int64_t shapes[][2] = { { 300, 256 }, { 7, 33 }, { 1, 5 }, { 40, 1100 }, { 0, 8 } };
    const fl_device *cpu = fl_cpu_device();
    const int threads0 = omp_get_max_threads();
    for (unsigned si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int affine = 0; affine <= 1; affine++)
            for (int tm = 0; tm < 6; tm++) {
                const int threads = 1 + tm % 2, mode = tm / 2;
                omp_set_num_threads(threads);
                const int64_t R = shapes[si][0], C = shapes[si][1], sh[2] = { R, C };
                fl_tensor *x = NULL, *y = NULL, *w = NULL, *b = NULL, *q1 = NULL, *q2 = NULL, *m[2] = { NULL }, *rs[2] = { NULL };
                REQUIRE_OK(fl_tensor_empty(&x, FL_F32, 2, sh, FL_DEV_CPU));
                REQUIRE_OK(fl_tensor_empty(&y, FL_F32, 2, sh, FL_DEV_CPU));
                REQUIRE_OK(fl_tensor_empty(&w, FL_F32, 1, &C, FL_DEV_CPU));
                REQUIRE_OK(fl_tensor_empty(&b, FL_F32, 1, &C, FL_DEV_CPU));
                REQUIRE_OK(fl_tensor_empty(&q1, FL_E4M3, 2, sh, FL_DEV_CPU));
                REQUIRE_OK(fl_tensor_empty(&q2, FL_E4M3, 2, sh, FL_DEV_CPU));
                for (int k = 0; k < 2; k++) {
                    REQUIRE_OK(fl_tensor_empty(&m[k], FL_F32, 1, &R, FL_DEV_CPU));
                    REQUIRE_OK(fl_tensor_empty(&rs[k], FL_F32, 1, &R, FL_DEV_CPU));
                }
                float *xd = fl_tensor_data(x), *wd = fl_tensor_data(w), *bd = fl_tensor_data(b);
                uint32_t s = 23u + (uint32_t)si;
                for (int64_t i = 0; i < R * C; i++) {
                    xd[i] = lcg_uniform(&s, 0.3f) * 5.0f;
                    if (i == C + 3) xd[i] = NAN;   /* row 1 is NaN throughout */
                }
                for (int64_t j = 0; j < C; j++) {
                    wd[j] = j % 17 == 0 ? 400.0f : j % 13 == 0 ? 1e-6f : 0.5f + (float)j / (float)C;
                    bd[j] = 0.01f * (float)(j % 7) - 0.03f;
                }
                const float scale = 3.0f;
                const fl_tensor *wa = affine ? w : NULL, *ba = affine ? b : NULL;
                REQUIRE_OK(cpu->layernorm_fwd(xd, wa ? wd : NULL, ba ? bd : NULL, fl_tensor_data(y), fl_tensor_data(m[0]),
                                              fl_tensor_data(rs[0]), R, C, 1e-5f));
                REQUIRE_OK(ref_cast(cpu, q1, y, mode, &scale));
                REQUIRE_OK(cpu->layernorm_quantize(q2, x, wa, ba, m[1], rs[1], 1e-5f, mode_scale(mode, &scale),
                                                   mode_margin(mode), mode_pow2(mode), FL_SATURATE));
                CHECK(!memcmp(fl_tensor_data(q1), fl_tensor_data(q2), (size_t)(R * C)),
                      "%lldx%lld affine %d threads %d mode %d: bytes differ", (long long)R, (long long)C, affine, threads,
                      mode);
                CHECK(*(float *)fl_tensor_data(q1->scale_inv) == *(float *)fl_tensor_data(q2->scale_inv),
                      "%lldx%lld mode %d: scale_inv differs", (long long)R, (long long)C, mode);
                CHECK(q1->qstats.amax == q2->qstats.amax && q1->qstats.underflow == q2->qstats.underflow &&
                      q1->qstats.saturated == q2->qstats.saturated && q1->qstats.nan == q2->qstats.nan,
                      "%lldx%lld affine %d threads %d mode %d: statistics differ", (long long)R, (long long)C, affine,
                      threads, mode);
                CHECK(!memcmp(fl_tensor_data(m[0]), fl_tensor_data(m[1]), (size_t)R * 4) &&
                      !memcmp(fl_tensor_data(rs[0]), fl_tensor_data(rs[1]), (size_t)R * 4), "row statistics differ");
                CHECK(R * C < 1000 || !affine ||
                      ((mode || q1->qstats.saturated > 0) && q1->qstats.nan > 0 && q1->qstats.underflow > 0),
                      "%lldx%lld: the data must saturate (host scale), underflow and hold NaN", (long long)R, (long long)C);
                fl_tensor *t[] = { x, y, w, b, q1, q2, m[0], m[1], rs[0], rs[1] };
                for (unsigned i = 0; i < 10; i++) fl_tensor_release(t[i]);
            }
    omp_set_num_threads(threads0);
    /* refusals: a weight of the wrong length, an fp32 destination, row statistics of the wrong length */
    const int64_t sh[2] = { 4, 6 }, five = 5, four = 4, three = 3;
    fl_tensor *x = NULL, *q = NULL, *qf = NULL, *w5 = NULL, *m = NULL, *r = NULL, *m3 = NULL;
    REQUIRE_OK(fl_tensor_zeros(&x, FL_F32, 2, sh, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&q, FL_E4M3, 2, sh, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&qf, FL_F32, 2, sh, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_zeros(&w5, FL_F32, 1, &five, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&m, FL_F32, 1, &four, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&r, FL_F32, 1, &four, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&m3, FL_F32, 1, &three, FL_DEV_CPU));
    float f = 1.0f;
    CHECK(cpu->layernorm_quantize(q, x, w5, NULL, m, r, 1e-5f, &f, 0, false, FL_SATURATE) == FL_EINVAL,
          "a weight of 5 for 6 columns");
    CHECK(cpu->layernorm_quantize(qf, x, NULL, NULL, m, r, 1e-5f, NULL, 0, false, FL_SATURATE) == FL_EINVAL,
          "an fp32 destination");
    CHECK(cpu->layernorm_quantize(q, x, NULL, NULL, m3, r, 1e-5f, &f, 0, false, FL_SATURATE) == FL_EINVAL,
          "a mean of 3 for 4 rows");
    fl_tensor *t[] = { x, q, qf, w5, m, r, m3 };
    for (unsigned i = 0; i < 7; i++) fl_tensor_release(t[i]);
}

/* fl_fp8_linear_layernorm against fl_layer_norm then fl_fp8_linear over three steps of a delayed-scaling layer (with
 * or without a warm-up) or a current-scaling one (power-of-two scales, a margin of 1): the same outputs, input,
 * LayerNorm and layer gradients and recipe state bit for bit, whether it fuses (per-tensor casts, every GEMM in FP8:
 * LayerNorm's output then exists only as its FP8 cast) or runs the two. */
static fl_status ln_linear_steps(bool fused, const bool hp[3], int warmup, bool current, float *y, float *dx, float *dlw,
                                 float *dlb, float *dw, float *hist, int *nfused) {
    *nfused = 0;
    lin_case c;
    make_case(&c);
    fl_rng rng;
    fl_rng_seed(&rng, 5);
    const int64_t kk = K;
    fl_tensor *lw = NULL, *lb = NULL;
    fl_status st = fl_rand(&lw, &rng, 1, &kk, FL_F32);
    if (st == FL_OK) st = fl_randn(&lb, &rng, 1, &kk, FL_F32);
    if (st == FL_OK) st = fl_tensor_set_requires_grad(lw, true);
    if (st == FL_OK) st = fl_tensor_set_requires_grad(lb, true);
    fl_scaling r[3];
    static const fl_dtype fmts[3] = { FL_E4M3, FL_E4M3, FL_E5M2 };
    for (int i = 0; i < 3 && st == FL_OK; i++) {
        st = fl_scaling_init(&r[i], fmts[i], current ? FL_SCALE_CURRENT : FL_SCALE_DELAYED, current, current,
                             FL_AMAX_MAX, 4, 1);
        r[i].warmup = warmup;
    }
    fl_fp8_layer *l = NULL;
    if (st == FL_OK) st = fl_fp8_layer_new(&l, r, hp, FL_GRAN_TENSOR);
    for (int step = 0; step < 3 && st == FL_OK; step++) {
        fl_tensor *out = NULL, *h = NULL;
        if (fused) st = fl_fp8_linear_layernorm(&out, c.x, lw, lb, 1e-5, c.w, c.b, l, true, NULL);
        else {
            st = fl_layer_norm(&h, c.x, lw, lb, 1e-5);
            if (st == FL_OK) st = fl_fp8_linear(&out, h, c.w, c.b, l, true, NULL, NULL);
        }
        if (st == FL_OK) st = fl_backward(out, c.g, false);
        if (st == FL_OK) {
            fl_tensor_read_f32(out, y + step * N * M);
            fl_tensor_read_f32(c.x->grad, dx + step * N * K);
            fl_tensor_read_f32(lw->grad, dlw + step * K);
            fl_tensor_read_f32(lb->grad, dlb + step * K);
            fl_tensor_read_f32(c.w->grad, dw + step * M * K);
        }
        if (st == FL_OK) st = fl_fp8_layer_update(l);
        for (int i = 0; i < 3 && st == FL_OK; i++) {
            hist[step * 6 + 2 * i] = l->role[i].scale;
            hist[step * 6 + 2 * i + 1] = l->role[i].history[0];
        }
        fl_tensor *z[] = { c.x, c.w, c.b, lw, lb };
        for (int i = 0; i < 5; i++) fl_tensor_zero_grad(z[i]);
        fl_tensor_release(out); fl_tensor_release(h);
    }
    if (l) *nfused = (int)l->fused_input_casts;   /* forwards whose input cast ran in LayerNorm's pass */
    fl_fp8_layer_release(l);
    fl_tensor_release(lw); fl_tensor_release(lb);
    free_case(&c);
    return st;
}

TEST(fp8_linear_layernorm_matches_layernorm_then_linear) {
    static const bool hps[2][3] = { { false, false, false }, { false, true, false } };
    for (int hi = 0; hi < 2; hi++)
        for (int sc = 0; sc < 3; sc++) {   /* delayed, delayed with a warm-up of 2 casts, current */
            const int warmup = sc == 1 ? 2 : 0;
            float y[2][3 * N * M], dx[2][3 * N * K], dlw[2][3 * K], dlb[2][3 * K], dw[2][3 * M * K], hist[2][18];
            int nf[2];
            for (int f = 0; f < 2; f++)
                REQUIRE_OK(ln_linear_steps(f, hps[hi], warmup, sc == 2, y[f], dx[f], dlw[f], dlb[f], dw[f], hist[f],
                                           &nf[f]));
            CHECK(nf[0] == 0 && nf[1] == (hi ? 0 : 3), "hp %d scaling %d: %d fused steps", hi, sc, nf[1]);
            CHECK(!memcmp(y[0], y[1], sizeof y[0]), "hp %d warm-up %d: outputs differ", hi, warmup);
            CHECK(!memcmp(dx[0], dx[1], sizeof dx[0]), "hp %d warm-up %d: input gradients differ", hi, warmup);
            CHECK(!memcmp(dlw[0], dlw[1], sizeof dlw[0]) && !memcmp(dlb[0], dlb[1], sizeof dlb[0]),
                  "hp %d warm-up %d: LayerNorm's gradients differ", hi, warmup);
            CHECK(!memcmp(dw[0], dw[1], sizeof dw[0]), "hp %d warm-up %d: weight gradients differ", hi, warmup);
            CHECK(!memcmp(hist[0], hist[1], sizeof hist[0]), "hp %d warm-up %d: recipe state differs", hi, warmup);
        }
    /* a header without storage: shape and history only; never an FP8 one */
    fl_tensor *h = NULL;
    const int64_t sh[2] = { 3, 4 };
    REQUIRE_OK(fl_tensor_header(&h, FL_F32, 2, sh, FL_DEV_CPU));
    CHECK(!h->storage && !fl_tensor_data(h) && fl_tensor_numel(h) == 12 && fl_tensor_is_contiguous(h), "header");
    fl_tensor_release(h);
    CHECK(fl_tensor_header(&h, FL_E4M3, 2, sh, FL_DEV_CPU) == FL_EINVAL && !h, "an FP8 header is refused");
}
