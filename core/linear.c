/* linear.c — y = x·Wᵀ + b, the training hot path: one GEMM per direction, W read in place through a
 * transposed view (never copied), bias added in the output pass. The three GEMMs (fprop, dgrad,
 * wgrad) are separate functions so the FP8 linear can swap each for a quantized one per recipe. */
#include "nn.h"
#include "autograd.h"
#include "ops_raw.h"
#include "profiler.h"
#include "device.h"
#include <string.h>

#define SHAPE(buf, t) fl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* Output bytes from which an autocast linear with a bias asks the device for its GEMM and bias in one call
 * (linear_bias_bf16: on the CPU the bias added in place, no second result tensor; it ran blocks of rows of 2 MiB,
 * which moved bits on AMX: core/cpu/cpu_linear_act.c). */
#define FL_LINEAR_BIAS_BLOCKS_MIN (4.0 * 1024 * 1024)

/* y2[N,out] = x2[N,in] · Wᵀ  (W [out,in] seen as a column-major [in,out]) */
static fl_status gemm_fprop(fl_tensor **y2, const fl_tensor *x2, const fl_tensor *w, fl_dtype cdt, fl_dtype odt) {
    fl_tensor *wt = NULL;
    FL_TRY(fl_tensor_transpose(&wt, w, 0, 1));
    fl_status st = fl_matmul_raw(y2, x2, wt, cdt, odt);
    fl_tensor_release(wt);
    return st;
}
/* dX2[N,in] = dY2[N,out] · W[out,in] */
static fl_status gemm_dgrad(fl_tensor **dx2, const fl_tensor *dy2, const fl_tensor *w, fl_dtype cdt) {
    return fl_matmul_raw(dx2, dy2, w, cdt, FL_F32);
}
/* dW[out,in] = dY2ᵀ · X2 (the sum over all rows is the GEMM's K dimension) */
static fl_status gemm_wgrad(fl_tensor **dw, const fl_tensor *dy2, const fl_tensor *x2, fl_dtype cdt) {
    fl_tensor *dyt = NULL;
    FL_TRY(fl_tensor_transpose(&dyt, dy2, 0, 1));
    fl_status st = fl_matmul_raw(dw, dyt, x2, cdt, FL_F32);
    fl_tensor_release(dyt);
    return st;
}

/* y2 += b row-wise. y2 fp32 contiguous is done in place by the device; otherwise a broadcast add makes
 * a new tensor. */
static fl_status add_bias(fl_tensor **y2, const fl_tensor *b) {
    fl_tensor *y = *y2;
    const fl_device *dev = fl_device_get(y->device);
    if (dev && dev->bias_add && y->dtype == FL_F32 && b->dtype == FL_F32 && fl_tensor_is_contiguous(y) &&
        fl_tensor_is_contiguous(b))
        return dev->bias_add(fl_tensor_data(y), fl_tensor_data(b), y->shape[0], y->shape[1]);
    fl_tensor *s = NULL;
    FL_TRY(fl_binary_raw(&s, FL_OP_ADD, y, b));
    fl_tensor_release(y);
    *y2 = s;
    return FL_OK;
}

static fl_status linear_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    /* x2 is NULL when the weight takes no gradient, w when x takes none: the shapes are the inputs' */
    const fl_tensor *x = n->inputs[0], *x2 = n->saved[0], *w = n->saved[1];
    fl_dtype cdt = (fl_dtype)n->iargs[0];
    int64_t gs[2] = { 1, n->inputs[1]->shape[0] };   /* not -1: with no output features (g empty) it is ambiguous */
    for (int d = 0; d < x->ndim - 1; d++) gs[0] *= x->shape[d];
    fl_tensor *g2 = NULL, *gc = NULL, *t = NULL;
    fl_status st = fl_tensor_reshape(&g2, g, 2, gs);
    /* Round dY once for both GEMMs under autocast. */
    if (st == FL_OK) st = g2->dtype == cdt ? (gc = fl_tensor_retain(g2), FL_OK) : fl_tensor_to(&gc, g2, cdt);
    if (st == FL_OK && fl_node_input_needs_grad(n, 0)) {
        st = gemm_dgrad(&t, gc, w, cdt);
        if (st == FL_OK) st = fl_tensor_reshape(&gin[0], t, x->ndim, x->shape);
        fl_tensor_release(t);
    }
    if (st == FL_OK && fl_node_input_needs_grad(n, 1)) st = gemm_wgrad(&gin[1], gc, x2, cdt);
    if (st == FL_OK && fl_node_input_needs_grad(n, 2)) st = fl_reduce_raw(&gin[2], FL_OP_SUM, g2, 0, false);
    fl_tensor_release(g2);
    fl_tensor_release(gc);
    return st;
}

fl_status fl_linear_check(const char *who, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                          const char *fp8_hint) {
    char sx[200], sw[200], sb[200];
    const fl_tensor *ts[3] = { x, w, b };
    for (int i = 0; i < 3; i++)
        if (ts[i] && fl_format(ts[i]->dtype)->is_fp8)
            return FL_ERR(FL_EINVAL, "%s: %s is %s; %s", who, i == 0 ? "input" : i == 1 ? "weight" : "bias",
                          fl_format(ts[i]->dtype)->name, fp8_hint);
    if (w->ndim != 2)
        return FL_ERR(FL_EINVAL, "%s: weight must be 2-D [out_features, in_features], got %s", who, SHAPE(sw, w));
    if (x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        return FL_ERR(FL_EINVAL, "%s: input %s does not match weight %s (in_features %lld)", who,
                      SHAPE(sx, x), SHAPE(sw, w), (long long)w->shape[1]);
    if (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))
        return FL_ERR(FL_EINVAL, "%s: bias %s does not match weight %s (expected [%lld])", who,
                      SHAPE(sb, b), SHAPE(sw, w), (long long)w->shape[0]);
    return FL_OK;
}

fl_status fl_linear(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b) {
    *out = NULL;
    FL_PROF_SCOPE("linear"); FL_PROF_SHAPES(x, w, b);   /* no FLOPs here: its GEMM ("matmul") counts them */
    const fl_tensor *ts[3] = { x, w, b };
    FL_TRY(fl_linear_check("linear", x, w, b, "dequantize it first (FP8 GEMMs go through the FP8 linear)"));
    if (x->device != w->device || (b && b->device != w->device))
        return FL_ERR(FL_EINVAL, "linear: input, weight and bias must be on one device (%s, %s%s%s)",
                      fl_device_name(x->device), fl_device_name(w->device), b ? ", " : "", b ? fl_device_name(b->device) : "");
    fl_dtype cdt, odt;
    if (!fl_autocast_gemm(x->dtype, w->dtype, &cdt, &odt)) { cdt = x->dtype == w->dtype ? x->dtype : FL_F32; odt = cdt; }

    /* the rows counted, not -1: with no input features (x empty) -1 is ambiguous */
    int64_t x2s[2] = { 1, w->shape[1] };
    for (int d = 0; d < x->ndim - 1; d++) x2s[0] *= x->shape[d];
    int64_t ys[FL_MAX_DIMS];
    memcpy(ys, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    ys[x->ndim - 1] = w->shape[0];
    fl_tensor *x2 = NULL, *xc = NULL, *wc = NULL, *y2 = NULL;
    fl_status st = fl_tensor_reshape(&x2, x, 2, x2s);
    if (st == FL_OK) st = x2->dtype == cdt ? (xc = fl_tensor_retain(x2), FL_OK) : fl_tensor_to(&xc, x2, cdt);
    if (st == FL_OK) st = w->dtype == cdt ? (wc = fl_tensor_retain((fl_tensor *)w), FL_OK) : fl_tensor_to(&wc, w, cdt);
    /* A bf16/fp16 result with a bias of its dtype: the GEMM's fp32 sums take the bias before the one rounding
     * (torch's addmm; rounding the product first and then the sum was up to 2 ulps off, 2026-12-05) */
    bool round_after = b && (odt == FL_BF16 || odt == FL_F16) && b->dtype == odt;
    /* bf16 operands, an fp32 result and bias past the caches' size: the device's blocks take the bias while in cache
     * (linear_bias_bf16; the bits of the GEMM then add_bias) */
    const fl_device *dev = fl_device_get(x->device);
    bool fused = false;
    if (st == FL_OK && b && cdt == FL_BF16 && odt == FL_F32 && b->dtype == FL_F32 && fl_tensor_is_contiguous(b) &&
        dev && dev->linear_bias_bf16 && fl_tensor_is_contiguous(xc) && fl_tensor_is_contiguous(wc) &&
        (double)x2s[0] * (double)w->shape[0] * 4.0 >= FL_LINEAR_BIAS_BLOCKS_MIN && w->shape[1] > 0) {
        FL_PROF_SCOPE("matmul"); FL_PROF_SHAPES(xc, wc);
        FL_PROF_FLOPS(2.0 * (double)x2s[0] * (double)w->shape[0] * (double)w->shape[1]);
        const int64_t s2[2] = { x2s[0], w->shape[0] };
        st = fl_tensor_empty(&y2, FL_F32, 2, s2, x->device);
        if (st == FL_OK)
            st = dev->linear_bias_bf16(fl_tensor_data(xc), fl_tensor_data(wc), fl_tensor_data(b), fl_tensor_data(y2),
                                       x2s[0], w->shape[0], w->shape[1], &fused);
        if (st == FL_OK && !fused) { fl_tensor_release(y2); y2 = NULL; }
    }
    if (st == FL_OK && !fused) st = gemm_fprop(&y2, xc, wc, cdt, round_after ? FL_F32 : odt);
    if (st == FL_OK && b && !fused) st = add_bias(&y2, b);
    if (st == FL_OK && round_after) {
        fl_tensor *r = NULL;
        st = fl_tensor_to(&r, y2, odt);
        fl_tensor_release(y2);
        y2 = r;
    }
    if (st == FL_OK) st = fl_tensor_view(out, y2, x->ndim, ys);
    if (st == FL_OK && fl_any_requires_grad(3, ts)) {
        fl_node *n = NULL;
        st = fl_node_new(&n, "LinearBackward", linear_bwd, 3, ts);
        if (st == FL_OK) {
            fl_autograd_attach(*out, n);
            /* The (possibly rounded) operands the forward GEMM used: backward reuses them. */
            fl_node_save(n, 0, xc);
            fl_node_save(n, 1, wc);
            n->saved_for[0] = 2;   /* x for the weight's gradient, W for x's: a write matters only then (torch's) */
            n->saved_for[1] = 1;
            n->iargs[0] = cdt;
            /* an autocast copy is what backward reads: x's own storage may go (torch's keeps the bf16 copy alone) */
            if (xc->storage != x->storage) st = fl_node_input_stub(n, 0);
            if (st == FL_OK && wc != w) st = fl_node_input_stub(n, 1);   /* the weight's likewise (a frozen one's) */
            /* x read only for a frozen weight's gradient, the weight (or its copy) only for x's when x takes none */
            for (int j = 0; j < 2 && st == FL_OK; j++) st = fl_node_drop_unread(n, j, j);
        }
    }
    fl_tensor_release(x2);
    fl_tensor_release(xc);
    fl_tensor_release(wc);
    fl_tensor_release(y2);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* relu(linear(x, w, b)) rounded once to bf16 under a bf16 autocast, recording nothing: the device's one pass
 * (linear_relu_bf16) where it gives the composite's bits, else the composite (fl_linear, fl_relu, the cast). */
fl_status fl_linear_relu_bf16(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b) {
    *out = NULL;
    const fl_tensor *ts[3] = { x, w, b };
    FL_TRY(fl_linear_check("linear_relu", x, w, b, "dequantize it first (FP8 GEMMs go through the FP8 linear)"));
    if (x->device != w->device || (b && b->device != w->device))
        return FL_ERR(FL_EINVAL, "linear_relu: input, weight and bias must be on one device (%s, %s%s%s)",
                      fl_device_name(x->device), fl_device_name(w->device), b ? ", " : "", b ? fl_device_name(b->device) : "");
    if (fl_autocast_dtype() != FL_BF16)
        return FL_ERR(FL_EINVAL, "linear_relu: the rounded form runs under a bf16 autocast, got autocast %s",
                      fl_format(fl_autocast_dtype())->name);
    if (fl_any_requires_grad(3, ts))
        return FL_ERR(FL_EINVAL, "linear_relu: the rounded form records no gradient; an input requires grad (use "
                      "linear, then relu)");
    const fl_device *dev = fl_device_get(x->device);
    int64_t x2s[2] = { 1, w->shape[1] };
    for (int d = 0; d < x->ndim - 1; d++) x2s[0] *= x->shape[d];
    const int64_t M = x2s[0], N = w->shape[0], K = w->shape[1];
    int64_t ys[FL_MAX_DIMS];
    memcpy(ys, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    ys[x->ndim - 1] = N;
    fl_tensor *x2 = NULL, *xc = NULL, *wc = NULL, *y2 = NULL, *r = NULL;
    fl_status st = FL_OK;
    bool done = false;
    /* the one pass: fl_linear's operands (x and the fp32 weight rounded to bf16, an fp32 bias) */
    if (dev && dev->linear_relu_bf16 && (x->dtype == FL_F32 || x->dtype == FL_BF16) && w->dtype == FL_F32 &&
        (!b || (b->dtype == FL_F32 && fl_tensor_is_contiguous(b))) && M > 0 && N > 0 && K > 0) {
        FL_PROF_SCOPE("linear_relu"); FL_PROF_SHAPES(x, w, b);
        FL_PROF_FLOPS(2.0 * (double)M * (double)N * (double)K);
        st = fl_tensor_reshape(&x2, x, 2, x2s);
        if (st == FL_OK) st = x2->dtype == FL_BF16 && fl_tensor_is_contiguous(x2) ? (xc = fl_tensor_retain(x2), FL_OK)
                                                                                  : fl_tensor_to(&xc, x2, FL_BF16);
        if (st == FL_OK) st = fl_tensor_to(&wc, w, FL_BF16);
        const int64_t s2[2] = { M, N };
        if (st == FL_OK) st = fl_tensor_empty(&y2, FL_BF16, 2, s2, x->device);
        if (st == FL_OK)
            st = dev->linear_relu_bf16(fl_tensor_data(xc), fl_tensor_data(wc), b ? fl_tensor_data(b) : NULL,
                                       fl_tensor_data(y2), M, N, K, &done);
        if (st == FL_OK && done) st = fl_tensor_view(out, y2, x->ndim, ys);
    }
    if (st == FL_OK && !done) {   /* the composite */
        fl_tensor *lin = NULL;
        st = fl_linear(&lin, x, w, b);
        if (st == FL_OK) st = fl_relu(&r, lin);
        if (st == FL_OK) st = fl_tensor_to(out, r, FL_BF16);
        fl_tensor_release(lin);
    }
    fl_tensor_release(x2);
    fl_tensor_release(xc);
    fl_tensor_release(wc);
    fl_tensor_release(y2);
    fl_tensor_release(r);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}
