/* max_pool.c — torch's max pooling over [N, C, H, W] planes, computed directly over each window (no columns): the
 * maximum of the window's input positions and its flat 0-based input position (fp32, as the max pools' indices have
 * always been: exact to 2^24, which lua/fp8/nn/conv.lua checks). The rule is argmax's over the window padded with
 * -inf, kernel offsets in order (ops.c fl_argreduce: the first NaN, else the first strict maximum), and a window of
 * -inf alone takes its first position inside the input (torch's kernel starts there): the windows, max and gather
 * conv.lua was made of gave these same values, indices and gradients. Backward: each window's gradient goes to its
 * maximum, the windows taken last to first: two windows that reach one position reach it at kernel offsets in the
 * opposite order of the windows (the later window, below or to the right, through an offset above or to the left), so
 * each position adds its gradients in the order of the kernel offsets, then the windows: the columns' adjoint's.
 * Computed on the host for every device (host_ops.h), OpenMP over the planes; a channels_last input in its NHWC
 * memory (stop 104: no layout copy), OpenMP over rows of windows, each channel seeing the offsets and the windows in
 * the same order: the same values, indices and gradient bits. */
#include "nn.h"
#include "ops.h"
#include "autograd.h"
#include "format.h"
#include "host_ops.h"
#include "cpu/par.h"
#include "window.h"
#include "profiler.h"
#include <stdlib.h>
#include <string.h>

/* a node's record: the planes' size, and each window's maximum's input position (cl: the input was channels_last,
 * torch's suggest_memory_format: so are the results and the input's gradient, computed in NHWC memory since stop
 * 104, pos in the order [N, oh·ow, C]) */
typedef struct { int64_t h, w, L; int32_t *pos; bool cl; } mp_ctx;

static void mp_ctx_free(void *p) {
    mp_ctx *c = p;
    if (c) free(c->pos);
    free(c);
}

/* the NHWC backward: mp_bwd's order (per channel, the windows last to first) with the loops along the channels */
static int mp_bwd_cl(const float *gv, const int32_t *pos, float *d, int64_t N, int64_t C, int64_t L, int64_t hw) {
    int stop = 0;
    FL_PAR_FOR(N > 1 && N * C * L > 32768, schedule(static),
    for (int64_t n = 0; n < N; n++) {
        FL_WIN_POLL(stop)
        float *dp = d + n * hw * C;
        for (int64_t l = L - 1; l >= 0; l--) {
            const int32_t *pp = pos + (n * L + l) * C;
            const float *gp = gv + (n * L + l) * C;
            for (int64_t k = 0; k < C; k++)
                if (pp[k] >= 0) dp[(int64_t)pp[k] * C + k] += gp[k];
        }
    });
    return stop;
}

/* (g: any dense layout, autograd.c's node_takes_dense: read contiguous, or NHWC for a channels_last input) */
static fl_status mp_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const mp_ctx *c = n->ctx;
    const fl_tensor *x = n->inputs[0];
    const int64_t NC = x->shape[0] * x->shape[1], L = c->L, hw = c->h * c->w;
    fl_tensor *hg = NULL, *dx = NULL;
    if (c->cl) {
        fl_status st = fl_host_f32_cl_read(&hg, g);
        if (st == FL_OK) st = fl_tensor_empty_cl(&dx, FL_F32, x->shape, FL_DEV_CPU);
        if (st == FL_OK) memset(fl_tensor_data(dx), 0, (size_t)(NC * hw) * sizeof(float));
        if (st == FL_OK && NC * hw > 0 && L > 0)
            st = fl_window_stopped(mp_bwd_cl(fl_tensor_data(hg), c->pos, fl_tensor_data(dx), x->shape[0],
                                             x->shape[1], L, hw));
        fl_tensor_release(hg);
        if (st == FL_OK) return fl_host_result_cl(&gin[0], dx, FL_F32, x->device);
        fl_tensor_release(dx);
        return st;
    }
    fl_status st = fl_host_f32_read(&hg, g);
    if (st == FL_OK) st = fl_tensor_zeros(&dx, FL_F32, 4, x->shape, FL_DEV_CPU);
    if (st == FL_OK && NC * hw > 0 && L > 0) {
        const float *gv = fl_tensor_data(hg);
        const int32_t *pos = c->pos;
        float *d = fl_tensor_data(dx);
        int stop = 0;
        FL_PAR_FOR(NC * L > 32768, schedule(static),
        for (int64_t p = 0; p < NC; p++) {
            FL_WIN_POLL(stop)
            const int32_t *pp = pos + p * L;
            const float *gp = gv + p * L;
            float *dp = d + p * hw;
            for (int64_t l = L - 1; l >= 0; l--)
                if (pp[l] >= 0) dp[pp[l]] += gp[l];
        });
        st = fl_window_stopped(stop);
    }
    fl_tensor_release(hg);
    if (st == FL_OK) st = fl_host_result(&gin[0], dx, FL_F32, x->device), dx = NULL;
    fl_tensor_release(dx);
    return st;
}

/* The NHWC forward of a channels_last input: each output pixel's window of C-vectors, its kernel offsets in order
 * (every channel sees them in fl_max_pool's order and takes its rule: the same values and positions); x [N, H, W, C],
 * v, iv (and pv where not NULL) [N, oh, ow, C]. Returns 1 if interrupted; *oom on a failed allocation. */
static int mp_forward_cl(const float *xv, float *vv, float *iv, int32_t *pv, int64_t N, int64_t C, int64_t H,
                         int64_t W, int64_t oh, int64_t ow, const fl_window *g, int *oom) {
    int stop = 0;
    FL_PAR_FOR(N * oh > 1 && N * oh * ow * C > 4096, schedule(static),
    for (int64_t r = 0; r < N * oh; r++) {
        FL_WIN_POLL(stop)
        int32_t *bp = malloc((size_t)(C > 0 ? C : 1) * sizeof *bp);
        if (!bp) {
            FL_PRAGMA(omp atomic write)
            *oom = 1;
            continue;
        }
        const int64_t n = r / oh, oy = r % oh;
        const float *src = xv + n * H * W * C;
        for (int64_t ox = 0; ox < ow; ox++) {
            const int64_t l = (r * ow + ox) * C;
            float *vr = vv + l;
            for (int64_t k = 0; k < C; k++) vr[k] = -__builtin_inff(), bp[k] = -1;
            for (int64_t i = 0; i < g->kh; i++) {
                const int64_t iy = oy * g->sh + i * g->dh - g->pt;
                if (iy < 0 || iy >= H) continue;
                for (int64_t j = 0; j < g->kw; j++) {
                    const int64_t ix = ox * g->sw + j * g->dw - g->pl;
                    if (ix < 0 || ix >= W) continue;
                    const int32_t at = (int32_t)(iy * W + ix);
                    const float *in = src + (iy * W + ix) * C;
                    FL_PRAGMA(omp simd)
                    for (int64_t k = 0; k < C; k++) {
                        const float val = in[k], b = vr[k];
                        const int take = (bp[k] < 0) | (((val > b) | (val != val)) & (b == b));
                        vr[k] = take ? val : b;
                        bp[k] = take ? at : bp[k];
                    }
                }
            }
            for (int64_t k = 0; k < C; k++) {
                iv[l + k] = (float)bp[k];
                if (pv) pv[l + k] = bp[k];
            }
        }
        free(bp);
    });
    return stop;
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
    /* a channels_last input (torch's suggest_memory_format: the results' and the gradient's layout) is read in its
     * NHWC memory and the results made so (stop 104) */
    const bool cl = fl_tensor_is_channels_last(x);
    fl_tensor *hx = NULL, *v = NULL, *ix = NULL;
    int32_t *pv = NULL;   /* for the backward */
    fl_status st = cl ? fl_host_f32_cl_read(&hx, x) : fl_host_f32_read(&hx, x);
    if (st == FL_OK) st = cl ? fl_tensor_empty_cl(&v, FL_F32, shape, FL_DEV_CPU) : fl_tensor_empty(&v, FL_F32, 4, shape, FL_DEV_CPU);
    if (st == FL_OK) st = cl ? fl_tensor_empty_cl(&ix, FL_F32, shape, FL_DEV_CPU) : fl_tensor_empty(&ix, FL_F32, 4, shape, FL_DEV_CPU);
    if (st == FL_OK && rec) {
        pv = malloc((size_t)(numel > 0 ? numel : 1) * sizeof *pv);
        if (!pv) st = FL_ERR(FL_ENOMEM, "max_pool: out of memory for %lld windows' maxima", (long long)numel);
    }
    if (st == FL_OK && numel > 0 && cl) {
        int oom = 0;
        const int stop = mp_forward_cl(fl_tensor_data(hx), fl_tensor_data(v), fl_tensor_data(ix), pv, N, C, H, W, oh,
                                       ow, g, &oom);
        if (oom) st = FL_ERR(FL_ENOMEM, "max_pool: out of memory for a window's %lld channels", (long long)C);
        else st = fl_window_stopped(stop);
    } else if (st == FL_OK && numel > 0) {
        const float *xv = fl_tensor_data(hx);
        float *vv = fl_tensor_data(v), *iv = fl_tensor_data(ix);
        int bad = 0, stop = 0;
        /* a row of windows at a time, kernel offset by kernel offset (each window still sees its offsets in order),
         * the update without branches: taken where no input position was yet, or where the value is a NaN or
         * greater and the maximum so far is not a NaN */
        FL_PAR_FOR(numel > 4096, schedule(static),
        for (int64_t p = 0; p < N * C; p++) {
            FL_WIN_POLL(stop)
            int32_t *bp = malloc((size_t)ow * sizeof *bp);
            if (!bp) {
                FL_PRAGMA(omp atomic write)
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
        });
        if (bad) st = FL_ERR(FL_ENOMEM, "max_pool: out of memory for a row of %lld windows", (long long)ow);
        else st = fl_window_stopped(stop);
    }
    fl_tensor_release(hx);
    if (st == FL_OK) st = (cl ? fl_host_result_cl : fl_host_result)(values, v, x->dtype, x->device), v = NULL;
    if (st == FL_OK) st = (cl ? fl_host_result_cl : fl_host_result)(indices, ix, FL_F32, x->device), ix = NULL;
    fl_tensor_release(v);
    fl_tensor_release(ix);
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
