/* cpu_norm_rescue.c — the p-norm's rescue where Σ|x|^p left its dtype's range, or (p < 1) where the plain formula's
 * gradient would (core/device.h's norm_rescue and norm_rescue_bwd): the common case is one pass over the sums and
 * norms alone; x is read only for the slices that may be rescued. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cpu_internal.h"
#include "half_cvt.h"

/* One element of an fp32, bf16 or fp16 tensor's data as a float (the three the entries take) */
static inline float ld(const void *p, fl_dtype dt, int64_t i) {
    return dt == FL_F32 ? ((const float *)p)[i]
           : dt == FL_BF16 ? fl_bf16_bits_to_f32(((const uint16_t *)p)[i])
                           : fl_f16_bits_to_f32(((const uint16_t *)p)[i]);
}
static inline void st(void *p, fl_dtype dt, int64_t i, float v) {
    if (dt == FL_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dt == FL_BF16 ? fl_f32_to_bf16_bits(v) : fl_f32_to_f16_bits(v);
}

/* The slice of x each element belongs to: x's coordinates over the dims not in mask, row-major (the order of the
 * norm's result, keepdim or not). Calls fn(ctx, slice, element index) for every element, in order. */
typedef void (*slice_fn)(void *ctx, int64_t slice, int64_t i);
static void each_element(const fl_tensor *x, uint32_t mask, slice_fn fn, void *ctx) {
    int nd = x->ndim;
    int64_t coord[FL_MAX_DIMS] = { 0 }, kstride[FL_MAX_DIMS], k = 1;
    for (int d = nd - 1; d >= 0; d--) {   /* a kept dim's stride in the slice index; a reduced one's 0 */
        kstride[d] = (mask >> d) & 1u ? 0 : k;
        if (!((mask >> d) & 1u)) k *= x->shape[d];
    }
    int64_t n = fl_tensor_numel(x), slice = 0;
    for (int64_t i = 0; i < n; i++) {
        fn(ctx, slice, i);
        for (int d = nd - 1; d >= 0; d--) {   /* the odometer: the next coordinate, the slice index kept with it */
            slice += kstride[d];
            if (++coord[d] < x->shape[d]) break;
            slice -= kstride[d] * coord[d];
            coord[d] = 0;
        }
    }
}

typedef struct {
    const void *x; fl_dtype xt; double p; const unsigned char *want; float *amax, *amin; double *sum;
    const float *scale;
} walk;

static void amax_of(void *c, int64_t o, int64_t i) {
    walk *w = c;
    if (!w->want[o]) return;
    float a = fabsf(ld(w->x, w->xt, i));
    if (a > w->amax[o] || a != a) w->amax[o] = a;   /* a NaN stays (a > NaN is false) */
    if (a > 0.0f && a < w->amin[o]) w->amin[o] = a;   /* the smallest nonzero |x| */
}

/* p < 1: the plain formula's backward (|x|^p summed, the root s^(1/p)) reaches x's gradient as (g·(1/p)·s^(1/p-1))
 * ·|x|^(p-1), times p last (core/ops_grad.c's x^s backward multiplies by s last): (1/p)·(r / |x|)^(1-p) for a unit g,
 * 1/p times the gradient itself, which passes FLT_MAX where the gradient is within a factor 1/p of it or past it (r
 * inf: the norm past FLT_MAX, its gradients finite). x:norm(0.5) of [3e38, 1e-38]: inf where float64's (and torch's)
 * is 1.73e38. Such a slice (the bound at its smallest nonzero |x| past 2^126, a margin of 4 below FLT_MAX) is rescued:
 * its gradient float64's. amin 2^-149 (the smallest subnormal) gives the bound for any x: the first pass's test. */
static bool steep(float r, float amin, double p) {
    return p < 1 && r == r && 1 / p * pow(fabs((double)r) / (double)amin, 1 - p) > 0x1p126;
}

/* |y|^p for y = x / c, exact for p 1 and 2 in float64 */
static double powp(double y, double p) {
    y = fabs(y);
    return p == 2 ? y * y : p == 1 ? y : pow(y, p);
}

static void sum_of(void *c, int64_t o, int64_t i) {
    walk *w = c;
    if (w->scale[o] != 0.0f) w->sum[o] += powp((double)ld(w->x, w->xt, i) / (double)w->scale[o], w->p);
}

/* the slices in want: sum[o] = Σ|x / scale[o]|^p over slice o (the others left at 0) */
static void scaled_sums(const fl_tensor *x, uint32_t mask, double p, const float *scale, double *sum) {
    walk w = { .x = fl_tensor_data(x), .xt = x->dtype, .p = p, .scale = scale, .sum = sum };
    each_element(x, mask, sum_of, &w);
}

static double root(double s, double p) { return p == 2 ? sqrt(s) : p == 1 ? s : pow(s, 1 / p); }

fl_status fl_cpu_dev_norm_rescue(fl_tensor *dst, fl_tensor *scale, const fl_tensor *r, const fl_tensor *s,
                                 const fl_tensor *x, uint32_t mask, double p, int64_t *rescued) {
    const int64_t n = fl_tensor_numel(r);
    const void *sv = fl_tensor_data(s);
    const fl_dtype dt = r->dtype, sdt = s->dtype;
    float *kv = fl_tensor_data(scale);
    const float tiny = (float)fl_format(sdt)->min_normal;   /* fp32's and bf16's 2^-126, fp16's 2^-14 */
    memcpy(fl_tensor_data(dst), fl_tensor_data(r), (size_t)n * fl_format(dt)->size);   /* r's bits, NaNs included */
    const void *rv = fl_tensor_data(r);
    int64_t cand = 0;
    for (int64_t o = 0; o < n; o++) {   /* the common case: this pass alone */
        float v = ld(sv, sdt, o);
        kv[o] = 0.0f;
        cand += !(v >= tiny && v < INFINITY) || steep(ld(rv, dt, o), 0x1p-149f, p);
    }
    *rescued = 0;
    if (!cand) return FL_OK;
    unsigned char *want = calloc((size_t)n, 1);
    float *amax = calloc((size_t)n, sizeof *amax), *amin = malloc((size_t)n * sizeof *amin);
    double *sum = calloc((size_t)n, sizeof *sum);
    if (!want || !amax || !amin || !sum) {
        free(want); free(amax); free(amin); free(sum);
        return FL_ERR(FL_ENOMEM, "norm: out of memory for the slices whose Σ|x|^p left the range");
    }
    fl_tensor *xc = NULL;   /* x read in its own order (a view's copy made only here) */
    fl_status st0 = fl_tensor_contiguous(&xc, x);
    if (st0 != FL_OK) { free(want); free(amax); free(amin); free(sum); return st0; }
    x = xc;
    for (int64_t o = 0; o < n; o++) {
        float v = ld(sv, sdt, o);
        want[o] = !(v >= tiny && v < INFINITY) || steep(ld(rv, dt, o), 0x1p-149f, p);
        amin[o] = INFINITY;
    }
    walk w = { .x = fl_tensor_data(x), .xt = x->dtype, .want = want, .amax = amax, .amin = amin };
    each_element(x, mask, amax_of, &w);
    for (int64_t o = 0; o < n; o++) {   /* a steep candidate kept only where its smallest nonzero |x| makes it so */
        float v = ld(sv, sdt, o);
        if (want[o] && v >= tiny && v < INFINITY && !steep(ld(rv, dt, o), amin[o], p)) want[o] = 0;
    }
    for (int64_t o = 0; o < n; o++)
        if (want[o] && amax[o] > 0.0f && amax[o] < INFINITY) {   /* not 0 (a sum of 0 that is right), inf, NaN */
            /* c = 2^k (frexp's: 2^k <= amax < 2^(k+1)), exact, so that p 1 and 2 take x / c exactly; the terms are
             * then below 2^p, and the sum below n·2^p within float64 for p <= 512. Past that c = amax: the terms
             * are at most 1 (the largest exactly 1), whatever p */
            int e;
            frexpf(amax[o], &e);
            kv[o] = p <= 512 ? ldexpf(1.0f, e - 1) : amax[o];
            (*rescued)++;
        }
    if (*rescued) {
        scaled_sums(x, mask, p, kv, sum);
        for (int64_t o = 0; o < n; o++)
            if (kv[o] != 0.0f) st(fl_tensor_data(dst), dt, o, (float)(root(sum[o], p) * (double)kv[o]));
    }
    free(want); free(amax); free(amin); free(sum);
    fl_tensor_release(xc);
    return FL_OK;
}

typedef struct {
    const void *x; fl_dtype xt; const float *g, *scale; const double *norm; double p; float *gx;
} grad_walk;

static void grad_of(void *c, int64_t o, int64_t i) {
    grad_walk *w = c;
    if (w->scale[o] == 0.0f) return;
    double y = (double)ld(w->x, w->xt, i) / (double)w->scale[o], d = 0.0;
    if (y != 0.0)   /* sign(y)·|y|^(p-1) / N^(p-1), |y| / N <= 1; 0 at y = 0 (p < 1's infinite power: _abs_pow's 0) */
        d = w->p == 2 ? y / w->norm[o] : copysign(pow(fabs(y) / w->norm[o], w->p - 1), y);
    w->gx[i] = (float)((double)w->g[o] * d);
}

fl_status fl_cpu_dev_norm_rescue_bwd(fl_tensor *gr, fl_tensor *gx, const fl_tensor *g, const fl_tensor *scale,
                                     const fl_tensor *x, uint32_t mask, double p) {
    const int64_t n = fl_tensor_numel(g), nx = fl_tensor_numel(x);
    const float *gv = fl_tensor_data(g), *kv = fl_tensor_data(scale);
    float *grv = fl_tensor_data(gr), *gxv = fl_tensor_data(gx);
    bool any = false;
    for (int64_t o = 0; o < n; o++) {
        grv[o] = kv[o] == 0.0f ? gv[o] : 0.0f;
        any |= kv[o] != 0.0f;
    }
    for (int64_t i = 0; i < nx; i++) gxv[i] = -0.0f;
    if (!any) return FL_OK;
    fl_tensor *xc = NULL;
    FL_TRY(fl_tensor_contiguous(&xc, x));
    x = xc;
    double *norm = calloc((size_t)n, sizeof *norm);
    if (!norm) {
        fl_tensor_release(xc);
        return FL_ERR(FL_ENOMEM, "norm: out of memory for the gradient of the rescued slices");
    }
    scaled_sums(x, mask, p, kv, norm);
    for (int64_t o = 0; o < n; o++) if (kv[o] != 0.0f) norm[o] = root(norm[o], p);
    grad_walk w = { .x = fl_tensor_data(x), .xt = x->dtype, .g = gv, .scale = kv, .norm = norm, .p = p, .gx = gxv };
    each_element(x, mask, grad_of, &w);
    free(norm);
    fl_tensor_release(xc);
    return FL_OK;
}
