/* conv_depthwise.c — a depthwise convolution (torch's conv2d with groups = in_channels): output channel o reads
 * input channel o / m alone (m = out_channels / in_channels) through its own kh×kw kernel, computed directly over
 * the planes (lua/fp8/nn/conv.lua takes it for such a conv2d; a GEMM per group of one channel was 8× slower). Each
 * output sums its kernel's products in fp32 in the order of the kernel offsets, one fused multiply-add each, and is
 * rounded once to the input's dtype. Backward: the input's gradient adds each output gradient times its weight back
 * into the positions the window read; the weight's gradient sums gradient × input over the batch and the windows.
 * Computed on the host for every device (host_ops.h), OpenMP over the planes. */
#include "nn.h"
#include "ops.h"
#include "device.h"
#include "autograd.h"
#include "format.h"
#include "host_ops.h"
#include "cpu/par.h"
#include "window.h"
#include "profiler.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { fl_window g; int64_t oh, ow; } dw_ctx;

/* out [N, OC, oh, ow] = the depthwise convolution of x [N, C, h, w] with k [OC, kh·kw] (fp32, contiguous) */
static fl_status dw_forward(const float *x, const float *k, float *y, int64_t N, int64_t C, int64_t OC, int64_t h,
                            int64_t w, const fl_window *g, int64_t oh, int64_t ow) {
    const int64_t m = OC / C, K = g->kh * g->kw;
    int stop = 0;
    FL_PAR_FOR(N * OC * oh * ow > 4096, schedule(static),
    for (int64_t p = 0; p < N * OC; p++) {
        FL_WIN_POLL(stop)
        const int64_t n = p / OC, o = p % OC;
        const float *src = x + (n * C + o / m) * h * w, *wk = k + o * K;
        float *dst = y + p * oh * ow;
        memset(dst, 0, (size_t)(oh * ow) * sizeof(float));
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const float wv = wk[i * g->kw + j];
                const int64_t offw = j * g->dw - g->pl;
                int64_t lo, hi;
                fl_window_inside(offw, g->sw, w, ow, &lo, &hi);
                for (int64_t oy = 0; oy < oh; oy++) {
                    const int64_t iy = oy * g->sh + i * g->dh - g->pt;
                    if (iy < 0 || iy >= h) continue;
                    const float *in = src + iy * w + offw;
                    float *out = dst + oy * ow;
                    if (g->sw == 1)
                        for (int64_t ox = lo; ox < hi; ox++) out[ox] = fmaf(wv, in[ox], out[ox]);
                    else
                        for (int64_t ox = lo; ox < hi; ox++) out[ox] = fmaf(wv, in[ox * g->sw], out[ox]);
                }
            }
    });
    return fl_window_stopped(stop);
}

/* dx [N, C, h, w] from gy [N, OC, oh, ow] and k: at each kernel offset, the m output gradients that read a position
 * times their weights (a fused multiply-add chain from 0, as the GEMM of the per-group path formed them), added in
 * the order of the kernel offsets, unfused (as its col2im added them): the per-group path's bits */
static fl_status dw_grad_input(const float *gy, const float *k, float *dx, int64_t N, int64_t C, int64_t OC,
                               int64_t h, int64_t w, const fl_window *g, int64_t oh, int64_t ow) {
    const int64_t m = OC / C, K = g->kh * g->kw;
    int stop = 0;
    FL_PAR_FOR(N * OC * oh * ow > 4096, schedule(static),
    for (int64_t p = 0; p < N * C; p++) {
        FL_WIN_POLL(stop)
        const int64_t n = p / C, c = p % C;
        float *dst = dx + p * h * w;
        const float *src = gy + (n * OC + c * m) * oh * ow, *wk = k + c * m * K;   /* channel c's m outputs */
        memset(dst, 0, (size_t)(h * w) * sizeof(float));
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const int64_t at = i * g->kw + j, offw = j * g->dw - g->pl;
                int64_t lo, hi;
                fl_window_inside(offw, g->sw, w, ow, &lo, &hi);
                for (int64_t oy = 0; oy < oh; oy++) {
                    const int64_t iy = oy * g->sh + i * g->dh - g->pt;
                    if (iy < 0 || iy >= h) continue;
                    float *out = dst + iy * w + offw;
                    const float *gr = src + oy * ow;
                    if (m == 1) {
                        const float wv = wk[at];
                        /* (-std=c11: no contraction, the product is rounded before the sum) */
                        if (g->sw == 1)
                            for (int64_t ox = lo; ox < hi; ox++) out[ox] = out[ox] + wv * gr[ox];
                        else
                            for (int64_t ox = lo; ox < hi; ox++) out[ox * g->sw] = out[ox * g->sw] + wv * gr[ox];
                        continue;
                    }
                    for (int64_t ox = lo; ox < hi; ox++) {
                        float t = 0;
                        for (int64_t q = 0; q < m; q++) t = fmaf(wk[q * K + at], gr[q * oh * ow + ox], t);
                        out[ox * g->sw] = out[ox * g->sw] + t;
                    }
                }
            }
    });
    return fl_window_stopped(stop);
}

/* dk [OC, kh·kw] = Σ over the batch and the windows of gy × x at the window's position; the products of one
 * kernel offset are summed lane by lane in a row of fp32 partial sums (acc), then the row */
static fl_status dw_grad_weight(const float *gy, const float *x, float *dk, int64_t N, int64_t C, int64_t OC,
                                int64_t h, int64_t w, const fl_window *g, int64_t oh, int64_t ow) {
    const int64_t m = OC / C, K = g->kh * g->kw;
    int bad = 0, stop = 0;
    FL_PAR_FOR(N * OC * oh * ow > 4096, schedule(static),
    for (int64_t o = 0; o < OC; o++) {
        FL_WIN_POLL(stop)
        float *acc = malloc((size_t)(ow > 0 ? ow : 1) * sizeof(float));
        if (!acc) {
            FL_PRAGMA(omp atomic write)
            bad = 1;
            continue;
        }
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const int64_t offw = j * g->dw - g->pl;
                int64_t lo, hi;
                fl_window_inside(offw, g->sw, w, ow, &lo, &hi);
                memset(acc, 0, (size_t)ow * sizeof(float));
                for (int64_t n = 0; n < N; n++) {
                    const float *src = x + (n * C + o / m) * h * w, *gr0 = gy + (n * OC + o) * oh * ow;
                    for (int64_t oy = 0; oy < oh; oy++) {
                        const int64_t iy = oy * g->sh + i * g->dh - g->pt;
                        if (iy < 0 || iy >= h) continue;
                        const float *in = src + iy * w + offw, *gr = gr0 + oy * ow;
                        if (g->sw == 1)
                            for (int64_t ox = lo; ox < hi; ox++) acc[ox] = fmaf(gr[ox], in[ox], acc[ox]);
                        else
                            for (int64_t ox = lo; ox < hi; ox++) acc[ox] = fmaf(gr[ox], in[ox * g->sw], acc[ox]);
                    }
                }
                float s = 0;
                for (int64_t ox = 0; ox < ow; ox++) s += acc[ox];
                dk[o * K + i * g->kw + j] = s;
            }
        free(acc);
    });
    if (bad) return FL_ERR(FL_ENOMEM, "conv_depthwise: out of memory for the weight's gradient");
    return fl_window_stopped(stop);
}

static fl_status check(const fl_tensor *x, const fl_tensor *wt, const fl_window *g, int64_t *oh, int64_t *ow) {
    char sx[200], sw[200];
    for (int i = 0; i < 2; i++) {
        const fl_tensor *t = i ? wt : x;
        if (fl_format(t->dtype)->is_fp8)
            return FL_ERR(FL_EINVAL, "conv_depthwise: %s tensor: call :dequantize() first (FP8 tensors only hold "
                          "quantized data)", fl_format(t->dtype)->name);
    }
    if (x->dtype != wt->dtype)
        return FL_ERR(FL_EINVAL, "conv_depthwise: the input's dtype %s differs from the weight's %s",
                      fl_format(x->dtype)->name, fl_format(wt->dtype)->name);
    if (x->device != wt->device)   /* (matmul's check, which the per-group path had) */
        return FL_ERR(FL_EINVAL, "conv_depthwise: the input is on %s and the weight on %s: expected one device",
                      fl_device_name(x->device), fl_device_name(wt->device));
    if (x->ndim != 4 || wt->ndim != 4 || x->shape[1] < 1 || wt->shape[1] != 1 || wt->shape[0] % x->shape[1] != 0 ||
        wt->shape[2] != g->kh || wt->shape[3] != g->kw)
        return FL_ERR(FL_EINVAL, "conv_depthwise: expected an input [N, C, H, W] with C >= 1 and a weight [C·m, 1, "
                      "%lld, %lld], got %s and %s", (long long)g->kh, (long long)g->kw,
                      fl_shape_str(sx, sizeof sx, x->ndim, x->shape), fl_shape_str(sw, sizeof sw, wt->ndim, wt->shape));
    if (g->pad_value != 0)
        return FL_ERR(FL_EINVAL, "conv_depthwise: the padding holds 0, got a pad value %g", g->pad_value);
    const int64_t pos[6] = { g->kh, g->kw, g->sh, g->sw, g->dh, g->dw };
    for (int i = 0; i < 6; i++)
        if (pos[i] < 1 || pos[i] >= FL_WIN_MAX)
            return FL_ERR(FL_EINVAL, "conv_depthwise: kernel, stride and dilation must be in 1..2^31-1, got %lld",
                          (long long)pos[i]);
    const int64_t pads[4] = { g->pt, g->pb, g->pl, g->pr };
    for (int i = 0; i < 4; i++)
        if (pads[i] < 0 || pads[i] >= FL_WIN_MAX)
            return FL_ERR(FL_EINVAL, "conv_depthwise: padding must be in 0..2^31-1, got %lld", (long long)pads[i]);
    const int64_t h = x->shape[2], w = x->shape[3];
    const int64_t spanh = g->dh * (g->kh - 1) + 1, spanw = g->dw * (g->kw - 1) + 1;
    const int64_t hp = h + g->pt + g->pb, wp = w + g->pl + g->pr;
    if (hp < spanh || wp < spanw)
        return FL_ERR(FL_EINVAL, "conv_depthwise: the %lld×%lld plane padded to %lld×%lld is smaller than the kernel's "
                      "span %lld×%lld", (long long)h, (long long)w, (long long)hp, (long long)wp, (long long)spanh,
                      (long long)spanw);
    *oh = (hp - spanh) / g->sh + 1;
    *ow = (wp - spanw) / g->sw + 1;
    return FL_OK;
}

static fl_status dw_bwd(fl_node *n, const fl_tensor *gy, fl_tensor **gin);

fl_status fl_conv_depthwise(fl_tensor **out, const fl_tensor *x, const fl_tensor *wt, const fl_window *g) {
    *out = NULL;
    FL_PROF_SCOPE("conv_depthwise"); FL_PROF_SHAPES(x, wt);
    int64_t oh = 0, ow = 0, numel;
    FL_TRY(check(x, wt, g, &oh, &ow));
    const int64_t N = x->shape[0], C = x->shape[1], OC = wt->shape[0];
    const int64_t shape[4] = { N, OC, oh, ow };
    FL_TRY(fl_shape_numel("conv_depthwise", 4, shape, &numel));
    FL_PROF_FLOPS(2.0 * (double)numel * (double)(g->kh * g->kw));
    fl_tensor *hx = NULL, *hw = NULL, *y = NULL;
    fl_status st = fl_host_f32_read(&hx, x);
    if (st == FL_OK) st = fl_host_f32_read(&hw, wt);
    if (st == FL_OK) st = fl_tensor_empty(&y, FL_F32, 4, shape, FL_DEV_CPU);
    if (st == FL_OK && numel > 0)
        st = dw_forward(fl_tensor_data(hx), fl_tensor_data(hw), fl_tensor_data(y), N, C, OC, x->shape[2], x->shape[3], g,
                   oh, ow);
    fl_tensor_release(hx);
    fl_tensor_release(hw);
    if (st == FL_OK) st = fl_host_result(out, y, x->dtype, x->device), y = NULL;
    fl_tensor_release(y);
    if (st != FL_OK) return st;
    const fl_tensor *ins[2] = { x, wt };
    if (!fl_any_requires_grad(2, ins)) return FL_OK;
    dw_ctx *c = malloc(sizeof *c);
    if (!c) { fl_tensor_release(*out); *out = NULL; return FL_ERR(FL_ENOMEM, "conv_depthwise: out of memory"); }
    c->g = *g, c->oh = oh, c->ow = ow;
    fl_node *nd = NULL;
    st = fl_autograd_record(out, &nd, "ConvDepthwiseBackward", dw_bwd, 2, ins);
    if (st != FL_OK) { free(c); return st; }
    nd->ctx = c;
    nd->ctx_free = free;
    nd->inputs_read = 3u;   /* the input for the weight's gradient, the weight for the input's */
    return FL_OK;
}

static fl_status dw_bwd(fl_node *n, const fl_tensor *gy, fl_tensor **gin) {
    const dw_ctx *c = n->ctx;
    const fl_tensor *x = n->inputs[0], *wt = n->inputs[1];
    const int64_t N = x->shape[0], C = x->shape[1], OC = wt->shape[0], h = x->shape[2], w = x->shape[3];
    const bool need_x = fl_node_input_needs_grad(n, 0), need_w = fl_node_input_needs_grad(n, 1);
    fl_tensor *hg = NULL, *hx = NULL, *hw = NULL, *dx = NULL, *dk = NULL;
    fl_status st = fl_host_f32_read(&hg, gy);
    if (st == FL_OK && need_w) st = fl_host_f32_read(&hx, x);
    if (st == FL_OK && need_x) st = fl_host_f32_read(&hw, wt);
    if (st == FL_OK && need_x) st = fl_tensor_empty(&dx, FL_F32, 4, x->shape, FL_DEV_CPU);
    if (st == FL_OK && need_w) st = fl_tensor_empty(&dk, FL_F32, 4, wt->shape, FL_DEV_CPU);
    if (st == FL_OK && dx && fl_tensor_numel(dx) > 0)
        st = dw_grad_input(fl_tensor_data(hg), fl_tensor_data(hw), fl_tensor_data(dx), N, C, OC, h, w, &c->g, c->oh,
                      c->ow);
    if (st == FL_OK && dk && fl_tensor_numel(dk) > 0)
        st = dw_grad_weight(fl_tensor_data(hg), fl_tensor_data(hx), fl_tensor_data(dk), N, C, OC, h, w, &c->g, c->oh,
                            c->ow);
    fl_tensor_release(hg);
    fl_tensor_release(hx);
    fl_tensor_release(hw);
    fl_tensor *rx = NULL, *rk = NULL;
    if (st == FL_OK && dx) st = fl_host_result(&rx, dx, FL_F32, x->device), dx = NULL;
    if (st == FL_OK && dk) st = fl_host_result(&rk, dk, FL_F32, wt->device), dk = NULL;
    fl_tensor_release(dx);
    fl_tensor_release(dk);
    if (st != FL_OK) { fl_tensor_release(rx); fl_tensor_release(rk); return st; }
    gin[0] = rx;
    gin[1] = rk;
    return FL_OK;
}
