/* max_pool.c — torch's max pooling over [N, C, H, W] planes, computed directly over each window (no columns): the
 * maximum of the window's input positions and its flat 0-based input position (fp32, as the max pools' indices have
 * always been: exact to 2^24, which lua/fp8/nn/conv.lua checks). The rule is argmax's over the window padded with
 * -inf, kernel offsets in order (ops.c fl_argreduce: the first NaN, else the first strict maximum), and a window of
 * -inf alone takes its first position inside the input (torch's kernel starts there): the windows, max and gather
 * conv.lua was made of gave these same values, indices and gradients. Backward: each window's gradient goes to its
 * maximum, the windows taken last to first: two windows that reach one position reach it at kernel offsets in the
 * opposite order of the windows (the later window, below or to the right, through an offset above or to the left), so
 * each position adds its gradients in the order of the kernel offsets, then the windows: the columns' adjoint's.
 * Computed on the host for every device (host_ops.h), OpenMP over the planes. */
#include "nn.h"
#include "ops.h"
#include "autograd.h"
#include "format.h"
#include "host_ops.h"
#include "window.h"
#include "profiler.h"
#include <stdlib.h>
#include <string.h>

/* a node's record: the planes' size, and each window's maximum's input position */
/* (cl: the input was channels_last, torch's suggest_memory_format: so are the results and the input's gradient, stop
 * 103, computed on NCHW planes and copied) */
typedef struct { int64_t h, w, L; int32_t *pos; bool cl; } mp_ctx;

static void mp_ctx_free(void *p) {
    mp_ctx *c = p;
    if (c) free(c->pos);
    free(c);
}

static fl_status mp_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const mp_ctx *c = n->ctx;
    const fl_tensor *x = n->inputs[0];
    const int64_t NC = x->shape[0] * x->shape[1], L = c->L, hw = c->h * c->w;
    fl_tensor *hg = NULL, *dx = NULL;
    fl_status st = fl_host_f32_read(&hg, g);
    if (st == FL_OK) st = fl_tensor_zeros(&dx, FL_F32, 4, x->shape, FL_DEV_CPU);
    if (st == FL_OK && NC * hw > 0 && L > 0) {
        const float *gv = fl_tensor_data(hg);
        const int32_t *pos = c->pos;
        float *d = fl_tensor_data(dx);
        int stop = 0;
        #pragma omp parallel for schedule(static) if (NC * L > 32768)
        for (int64_t p = 0; p < NC; p++) {
            FL_WIN_POLL(stop)
            const int32_t *pp = pos + p * L;
            const float *gp = gv + p * L;
            float *dp = d + p * hw;
            for (int64_t l = L - 1; l >= 0; l--)
                if (pp[l] >= 0) dp[pp[l]] += gp[l];
        }
        st = fl_window_stopped(stop);
    }
    fl_tensor_release(hg);
    if (st == FL_OK) st = fl_host_result(&gin[0], dx, FL_F32, x->device), dx = NULL;
    fl_tensor_release(dx);
    if (st == FL_OK && c->cl) st = fl_tensor_channels_last_(&gin[0]);
    return st;
}

fl_status fl_max_pool(fl_tensor **values, fl_tensor **indices, const fl_tensor *x, const fl_window *g) {
    char s[200];
    *values = *indices = NULL;
    FL_PROF_SCOPE("max_pool"); FL_PROF_SHAPES(x);
    if (fl_format(x->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "max_pool: %s tensor: call :dequantize() first (FP8 tensors only hold quantized data)",
                      fl_format(x->dtype)->name);
    if (x->ndim != 4)
        return FL_ERR(FL_EINVAL, "max_pool: expected a 4-D input [N, C, H, W], got %s",
                      fl_shape_str(s, sizeof s, x->ndim, x->shape));
    const int64_t pos6[6] = { g->kh, g->kw, g->sh, g->sw, g->dh, g->dw };
    for (int i = 0; i < 6; i++)
        if (pos6[i] < 1 || pos6[i] >= FL_WIN_MAX)
            return FL_ERR(FL_EINVAL, "max_pool: kernel, stride and dilation must be in 1..2^31-1, got %lld",
                          (long long)pos6[i]);
    const int64_t pads[4] = { g->pt, g->pb, g->pl, g->pr };
    for (int i = 0; i < 4; i++)
        if (pads[i] < 0 || pads[i] >= FL_WIN_MAX)
            return FL_ERR(FL_EINVAL, "max_pool: padding must be in 0..2^31-1, got %lld", (long long)pads[i]);
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t spanh = g->dh * (g->kh - 1) + 1, spanw = g->dw * (g->kw - 1) + 1;
    const int64_t hp = H + g->pt + g->pb, wp = W + g->pl + g->pr;
    if (hp < spanh || wp < spanw)
        return FL_ERR(FL_EINVAL, "max_pool: the %lld×%lld plane padded to %lld×%lld is smaller than the kernel's span "
                      "%lld×%lld", (long long)H, (long long)W, (long long)hp, (long long)wp, (long long)spanh,
                      (long long)spanw);
    const int64_t oh = (hp - spanh) / g->sh + 1, ow = (wp - spanw) / g->sw + 1, L = oh * ow;
    if (H * W > INT32_MAX)   /* (positions are int32 here, fp32 in the result) */
        return FL_ERR(FL_EINVAL, "max_pool: a %lld×%lld plane has more than 2^31 - 1 positions", (long long)H,
                      (long long)W);
    const int64_t shape[4] = { N, C, oh, ow };
    int64_t numel;
    FL_TRY(fl_shape_numel("max_pool", 4, shape, &numel));
    const bool rec = fl_any_requires_grad(1, &x);
    fl_tensor *hx = NULL, *v = NULL, *ix = NULL;
    int32_t *pv = NULL;   /* for the backward */
    fl_status st = fl_host_f32_read(&hx, x);
    if (st == FL_OK) st = fl_tensor_empty(&v, FL_F32, 4, shape, FL_DEV_CPU);
    if (st == FL_OK) st = fl_tensor_empty(&ix, FL_F32, 4, shape, FL_DEV_CPU);
    if (st == FL_OK && rec) {
        pv = malloc((size_t)(numel > 0 ? numel : 1) * sizeof *pv);
        if (!pv) st = FL_ERR(FL_ENOMEM, "max_pool: out of memory for %lld windows' maxima", (long long)numel);
    }
    if (st == FL_OK && numel > 0) {
        const float *xv = fl_tensor_data(hx);
        float *vv = fl_tensor_data(v), *iv = fl_tensor_data(ix);
        int bad = 0, stop = 0;
        /* a row of windows at a time, kernel offset by kernel offset (each window still sees its offsets in order),
         * the update without branches: taken where no input position was yet, or where the value is a NaN or
         * greater and the maximum so far is not a NaN */
        #pragma omp parallel for schedule(static) if (numel > 4096)
        for (int64_t p = 0; p < N * C; p++) {
            FL_WIN_POLL(stop)
            int32_t *bp = malloc((size_t)ow * sizeof *bp);
            if (!bp) {
                #pragma omp atomic write
                bad = 1;
                continue;
            }
            const float *src = xv + p * H * W;
            for (int64_t oy = 0; oy < oh; oy++) {
                float *vr = vv + p * L + oy * ow;
                for (int64_t ox = 0; ox < ow; ox++) vr[ox] = -__builtin_inff(), bp[ox] = -1;
                for (int64_t i = 0; i < g->kh; i++) {
                    const int64_t iy = oy * g->sh + i * g->dh - g->pt;
                    if (iy < 0 || iy >= H) continue;
                    for (int64_t j = 0; j < g->kw; j++) {
                        const int64_t offw = j * g->dw - g->pl;
                        int64_t lo, hi;
                        fl_window_inside(offw, g->sw, W, ow, &lo, &hi);
                        const float *in = src + iy * W + offw;
                        const int32_t base = (int32_t)(iy * W + offw);
                        for (int64_t ox = lo; ox < hi; ox++) {
                            const float val = in[ox * g->sw], b = vr[ox];
                            const int take = (bp[ox] < 0) | (((val > b) | (val != val)) & (b == b));
                            vr[ox] = take ? val : b;
                            bp[ox] = take ? base + (int32_t)(ox * g->sw) : bp[ox];
                        }
                    }
                }
                for (int64_t ox = 0; ox < ow; ox++) {
                    const int64_t l = p * L + oy * ow + ox;
                    /* -1: a window that holds no input position (padding and dilation can make one; its value is
                     * -inf and it passes no gradient; torch's index there is past the input) */
                    iv[l] = (float)bp[ox];
                    if (pv) pv[l] = bp[ox];
                }
            }
            free(bp);
        }
        if (bad) st = FL_ERR(FL_ENOMEM, "max_pool: out of memory for a row of %lld windows", (long long)ow);
        else st = fl_window_stopped(stop);
    }
    fl_tensor_release(hx);
    if (st == FL_OK) st = fl_host_result(values, v, x->dtype, x->device), v = NULL;
    if (st == FL_OK) st = fl_host_result(indices, ix, FL_F32, x->device), ix = NULL;
    fl_tensor_release(v);
    fl_tensor_release(ix);
    const bool cl = fl_tensor_is_channels_last(x);
    if (st == FL_OK && cl) st = fl_tensor_channels_last_(values);
    if (st == FL_OK && cl) st = fl_tensor_channels_last_(indices);
    if (st == FL_OK && rec) {
        mp_ctx *c = malloc(sizeof *c);
        fl_node *nd = NULL;
        if (!c) st = FL_ERR(FL_ENOMEM, "max_pool: out of memory");
        if (st == FL_OK) st = fl_autograd_record(values, &nd, "MaxPool2DWithIndicesBackward", mp_bwd, 1, &x);
        if (st == FL_OK) {
            c->h = H, c->w = W, c->L = L, c->pos = pv, c->cl = cl, pv = NULL;
            nd->ctx = c, c = NULL;
            nd->ctx_free = mp_ctx_free;
            st = fl_node_input_stub(nd, 0);   /* its shape alone is read */
        }
        free(c);
    }
    free(pv);
    if (st != FL_OK) {
        fl_tensor_release(*values);
        fl_tensor_release(*indices);
        *values = *indices = NULL;
    }
    return st;
}
