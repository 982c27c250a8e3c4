/* resample.c — one dim of a tensor resampled as a weighted sum of source positions (F.interpolate's linear and
 * cubic modes, lua/fp8/nn/upsample.lua): y[..., j, ...] = Σ_t x[..., pos[j·taps + t], ...] · w[j·taps + t].
 * It was `taps` index_selects, as many products and taps − 1 additions, each a pass over the whole result and a node;
 * now one pass and one node. Forward: each product rounded to fp32 and the sum taken left to right (t = 0 first),
 * as the composite's ops did, so the same bits. Backward: the gradient of each output position scattered to its taps'
 * sources (dy·w, added in the order of j, then t), where the composite summed one index_add per tap and then the taps'
 * gradients: the same terms in another order. Computed on the host in fp32 (host_ops.h). */
#include "ops.h"
#include "host_ops.h"
#include "cpu/par.h"
#include "profiler.h"
#include "autograd.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RESAMPLE_POLL (1 << 22)   /* output elements between two interrupt polls */

typedef struct {
    int dim, taps;
    int64_t m;
    int64_t *pos;   /* m·taps source positions */
    float *w;       /* m·taps weights */
} resample_ctx;

static void ctx_free(void *p) {
    resample_ctx *c = p;
    if (!c) return;
    free(c->pos);
    free(c->w);
    free(c);
}

static void around(const fl_tensor *a, int dim, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (i < dim) *outer *= a->shape[i];
        if (i > dim) *inner *= a->shape[i];
    }
}

/* y [outer, m, inner] from x [outer, n, inner], outer slices o0 .. o1 - 1 */
static void forward_slices(const float *x, float *y, const resample_ctx *c, int64_t n, int64_t inner, int64_t o0,
                           int64_t o1) {
    const int64_t m = c->m, rows = (o1 - o0) * m;
    const int taps = c->taps;
    FL_PAR_FOR(rows * inner * taps > (1 << 16), schedule(static),
    for (int64_t r = 0; r < rows; r++) {
        const int64_t o = o0 + r / m, j = r % m;
        const int64_t *p = c->pos + j * taps;
        const float *w = c->w + j * taps;
        const float *xs = x + o * n * inner;
        float *yr = y + (o * m + j) * inner;
        const float *x0 = xs + p[0] * inner;
        const float w0 = w[0];
        for (int64_t i = 0; i < inner; i++) yr[i] = x0[i] * w0;
        for (int t = 1; t < taps; t++) {
            const float *xt = xs + p[t] * inner;
            const float wt = w[t];
            for (int64_t i = 0; i < inner; i++) yr[i] = yr[i] + xt[i] * wt;
        }
    });
}

/* dx [outer, n, inner] (zeroed) += the scatter of dy [outer, m, inner]; threads take whole outer slices (distinct
 * destinations), a slice in the order j, then t */
static void backward_slices(const float *dy, float *dx, const resample_ctx *c, int64_t n, int64_t inner, int64_t o0,
                            int64_t o1) {
    const int64_t m = c->m;
    const int taps = c->taps;
    FL_PAR_FOR((o1 - o0) > 1 && (o1 - o0) * m * inner * taps > (1 << 16), schedule(static),
    for (int64_t o = o0; o < o1; o++)
        for (int64_t j = 0; j < m; j++) {
            const float *g = dy + (o * m + j) * inner;
            for (int t = 0; t < taps; t++) {
                float *d = dx + (o * n + c->pos[j * taps + t]) * inner;
                const float wt = c->w[j * taps + t];
                for (int64_t i = 0; i < inner; i++) d[i] = d[i] + g[i] * wt;
            }
        });
}

/* outer slices per chunk between interrupt polls (at least one) */
static int64_t slices_per_poll(int64_t per_slice) {
    return per_slice > 0 && per_slice < RESAMPLE_POLL ? RESAMPLE_POLL / per_slice : 1;
}

static fl_status resample_bwd(fl_node *nd, const fl_tensor *gy, fl_tensor **gin) {
    const resample_ctx *c = nd->ctx;
    const fl_tensor *x = nd->inputs[0];
    const int64_t n = x->shape[c->dim];
    int64_t outer, inner;
    around(x, c->dim, &outer, &inner);
    fl_tensor *hg = NULL, *dx = NULL;
    fl_status st = fl_host_f32_read(&hg, gy);
    if (st == FL_OK) st = fl_tensor_zeros(&dx, FL_F32, x->ndim, x->shape, FL_DEV_CPU);
    const int64_t step = slices_per_poll(c->m * inner * c->taps);
    for (int64_t o = 0; st == FL_OK && o < outer; o += step) {
        backward_slices(fl_tensor_data(hg), fl_tensor_data(dx), c, n, inner, o, o + step < outer ? o + step : outer);
        st = fl_check_interrupt();
    }
    fl_tensor_release(hg);
    if (st != FL_OK) { fl_tensor_release(dx); return st; }
    return fl_host_result(&gin[0], dx, FL_F32, x->device);   /* (takes dx over) */
}

fl_status fl_resample(fl_tensor **out, const fl_tensor *x, int dim, int64_t m, int taps, const int64_t *pos,
                      const float *w) {
    char sx[200];
    *out = NULL;
    FL_PROF_SCOPE("resample"); FL_PROF_SHAPES(x);
    if (x->dtype != FL_F32)
        return FL_ERR(FL_EINVAL, "resample: expected an fp32 input, got %s", fl_format(x->dtype)->name);
    if (dim < 0 || dim >= x->ndim)
        return FL_ERR(FL_EINVAL, "resample: dim %d out of range for a tensor of shape %s", dim + 1,
                      fl_shape_str(sx, sizeof sx, x->ndim, x->shape));
    if (taps < 1 || taps > 8) return FL_ERR(FL_EINVAL, "resample: taps must be 1..8, got %d", taps);
    const int64_t n = x->shape[dim];
    if (m < 1) return FL_ERR(FL_EINVAL, "resample: the output size must be >= 1, got %lld", (long long)m);
    if (n < 1) return FL_ERR(FL_EINVAL, "resample: dim %d of %s is empty", dim + 1,
                             fl_shape_str(sx, sizeof sx, x->ndim, x->shape));
    if (m > INT64_MAX / taps) return FL_ERR(FL_EINVAL, "resample: %lld positions of %d taps overflow", (long long)m, taps);
    for (int64_t k = 0; k < m * taps; k++) {
        if (pos[k] < 0 || pos[k] >= n)
            return FL_ERR(FL_EINVAL, "resample: source position %lld out of range 0..%lld for dim %d", (long long)pos[k],
                          (long long)n - 1, dim + 1);
        if (!isfinite(w[k])) return FL_ERR(FL_EINVAL, "resample: weight %d of position %lld is %g", (int)(k % taps) + 1,
                                           (long long)(k / taps), (double)w[k]);
    }
    int64_t shape[FL_MAX_DIMS], numel;
    for (int i = 0; i < x->ndim; i++) shape[i] = i == dim ? m : x->shape[i];
    FL_TRY(fl_shape_numel("resample", x->ndim, shape, &numel));
    int64_t outer, inner;
    around(x, dim, &outer, &inner);
    resample_ctx *c = calloc(1, sizeof *c);
    if (c) {
        c->dim = dim, c->taps = taps, c->m = m;
        c->pos = malloc((size_t)(m * taps) * sizeof *c->pos);
        c->w = malloc((size_t)(m * taps) * sizeof *c->w);
    }
    if (!c || !c->pos || !c->w) {
        ctx_free(c);
        return FL_ERR(FL_ENOMEM, "resample: out of memory for %lld positions", (long long)(m * taps));
    }
    memcpy(c->pos, pos, (size_t)(m * taps) * sizeof *pos);
    memcpy(c->w, w, (size_t)(m * taps) * sizeof *w);
    fl_tensor *hx = NULL, *y = NULL;
    fl_status st = fl_host_f32_read(&hx, x);
    if (st == FL_OK) st = fl_tensor_empty(&y, FL_F32, x->ndim, shape, FL_DEV_CPU);
    const int64_t step = slices_per_poll(m * inner * taps);
    for (int64_t o = 0; st == FL_OK && numel > 0 && o < outer; o += step) {
        forward_slices(fl_tensor_data(hx), fl_tensor_data(y), c, n, inner, o, o + step < outer ? o + step : outer);
        st = fl_check_interrupt();
    }
    fl_tensor_release(hx);
    if (st == FL_OK) st = fl_host_result(out, y, FL_F32, x->device), y = NULL;
    fl_tensor_release(y);
    if (st != FL_OK || !fl_any_requires_grad(1, &x)) { ctx_free(c); return st; }
    return fl_autograd_record_ctx(out, "ResampleBackward", resample_bwd, x, c, ctx_free);
}
