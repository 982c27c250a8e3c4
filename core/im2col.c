/* im2col.c — torch's unfold (im2col) and fold (col2im) over [N, C, H, W] planes, each the other's adjoint and so
 * each the other's backward: unfold copies every window of a padded plane into columns [N, C, K, L] (K = kh·kw
 * kernel offsets, outer; L = OH·OW window positions), fold adds such columns back into a plane. The geometry comes
 * as numbers (fl_window), no index tensor: what the convolutions, poolings and transposed convolutions read and
 * write (lua/fp8/nn/conv.lua, conv_transpose.lua). Unfold copies values (any dtype but FP8, bit for bit; the padding
 * holds pad_value, -inf for the max pools); fold adds in fp32, in the order k, then l (the order a scatter_add over
 * those positions takes), and rounds once to the columns' dtype. Computed on the host (host_ops.h) for every device:
 * contiguous runs of a row are one memcpy, the padding a fill, OpenMP over N·C. */
#include "nn.h"
#include "ops.h"
#include "autograd.h"
#include "format.h"
#include "cpu/par.h"
#include "profiler.h"
#include "window.h"
#include "im2col.h"
#include <stdlib.h>
#include <string.h>

/* ---- geometry ------------------------------------------------------------------------------------------------ */

/* g checked against a plane of h×w: the window counts *oh, *ow (each >= 1). fn names the caller in messages. */
static fl_status window_counts(const char *fn, const fl_window *g, int64_t h, int64_t w, int64_t *oh, int64_t *ow) {
    const int64_t pos[6] = { g->kh, g->kw, g->sh, g->sw, g->dh, g->dw };
    static const char *const names[6] = { "kernel height", "kernel width", "stride height", "stride width",
                                          "dilation height", "dilation width" };
    for (int i = 0; i < 6; i++)
        if (pos[i] < 1 || pos[i] >= FL_WIN_MAX)
            return FL_ERR(FL_EINVAL, "%s: %s must be in 1..2^31-1, got %lld", fn, names[i], (long long)pos[i]);
    /* top and left at least 0; bottom and right may be negative (fold's crop of a transposed convolution's
     * output_padding: the windows then cover less than the plane, and what they miss stays 0) */
    if (g->pt < 0 || g->pl < 0 || g->pt >= FL_WIN_MAX || g->pl >= FL_WIN_MAX || g->pb >= FL_WIN_MAX ||
        g->pr >= FL_WIN_MAX || g->pb <= -FL_WIN_MAX || g->pr <= -FL_WIN_MAX)
        return FL_ERR(FL_EINVAL, "%s: padding top %lld, bottom %lld, left %lld, right %lld out of range (top and left "
                      "in 0..2^31-1, bottom and right in -(2^31-1)..2^31-1)", fn, (long long)g->pt, (long long)g->pb,
                      (long long)g->pl, (long long)g->pr);
    if (h < 0 || w < 0 || h >= FL_MAX_NUMEL || w >= FL_MAX_NUMEL)
        return FL_ERR(FL_EINVAL, "%s: plane %lld×%lld out of range", fn, (long long)h, (long long)w);
    const int64_t hp = h + g->pt + g->pb, wp = w + g->pl + g->pr;
    const int64_t spanh = g->dh * (g->kh - 1) + 1, spanw = g->dw * (g->kw - 1) + 1;
    if (hp < spanh || wp < spanw)
        return FL_ERR(FL_EINVAL, "%s: the %lld×%lld plane padded to %lld×%lld is smaller than the kernel's span "
                      "%lld×%lld (kernel %lld×%lld, dilation %lld×%lld): no window fits", fn, (long long)h,
                      (long long)w, (long long)hp, (long long)wp, (long long)spanh, (long long)spanw,
                      (long long)g->kh, (long long)g->kw, (long long)g->dh, (long long)g->dw);
    *oh = (hp - spanh) / g->sh + 1;
    *ow = (wp - spanw) / g->sw + 1;
    /* each count is under 2^32 but their product may not be (paddings near 2^31 both ways): checked before anyone
     * multiplies them (a wrapped product sized a buffer that the windows then overran) */
    if (*oh > FL_MAX_NUMEL / *ow)
        return FL_ERR(FL_EINVAL, "%s: %lld×%lld windows are too many (more than %lld)", fn, (long long)*oh,
                      (long long)*ow, (long long)FL_MAX_NUMEL);
    return FL_OK;
}

/* ---- the kernels ---------------------------------------------------------------------------------------------- */

/* unfold of nc contiguous planes [h, w] of elements of type T into [nc, K, oh·ow], the padding pad; FL_EINTR if
 * interrupted */
#define UNFOLD_KERNEL(NAME, T)                                                                                      \
static fl_status NAME(const T *x, T *y, int64_t nc, int64_t h, int64_t w, const fl_window *g, int64_t oh,        \
                      int64_t ow, T pad) {                                                                          \
    const int64_t K = g->kh * g->kw, L = oh * ow;                                                                   \
    int stop = 0;                                                                                                   \
    FL_PAR_FOR(nc * K * L > 32768, schedule(static),                                                                \
    for (int64_t p = 0; p < nc; p++) {                                                                              \
        FL_WIN_POLL(stop)                                                                                           \
        const T *src = x + p * h * w;                                                                               \
        T *dst = y + p * K * L;                                                                                     \
        for (int64_t i = 0; i < g->kh; i++)                                                                         \
            for (int64_t j = 0; j < g->kw; j++) {                                                                   \
                const int64_t offw = j * g->dw - g->pl;                                                             \
                int64_t lo, hi;                                                                                     \
                fl_window_inside(offw, g->sw, w, ow, &lo, &hi);                                                     \
                T *row = dst + (i * g->kw + j) * L;                                                                 \
                if (g->sw == 1 && g->sh == 1 && ow == w) {                                                          \
                    /* windows as wide as the plane, stride 1 (a "same" conv): the rows inside the plane are one  \
                     * shifted run of it, copied whole, then the padding written over the ends of each row */     \
                    const int64_t dy = i * g->dh - g->pt, delta = dy * w + offw;                                    \
                    const int64_t oy0 = dy < 0 ? -dy : 0, oy1 = h - dy < oh ? h - dy : oh;                          \
                    for (int64_t oy = 0; oy < oh; oy++)                                                             \
                        if (oy < oy0 || oy >= oy1) for (int64_t ox = 0; ox < ow; ox++) row[oy * ow + ox] = pad;   \
                    if (oy1 <= oy0) continue;                                                                       \
                    int64_t t0 = oy0 * ow, t1 = oy1 * ow;                                                           \
                    if (t0 < -delta) t0 = -delta;                                                                   \
                    if (t1 > h * w - delta) t1 = h * w - delta;                                                     \
                    if (t1 > t0) memcpy(row + t0, src + t0 + delta, (size_t)(t1 - t0) * sizeof(T));                \
                    for (int64_t oy = oy0; oy < oy1; oy++) {                                                        \
                        for (int64_t ox = 0; ox < lo; ox++) row[oy * ow + ox] = pad;                                \
                        for (int64_t ox = hi; ox < ow; ox++) row[oy * ow + ox] = pad;                               \
                    }                                                                                               \
                    continue;                                                                                       \
                }                                                                                                   \
                for (int64_t oy = 0; oy < oh; oy++, row += ow) {                                                    \
                    const int64_t iy = oy * g->sh + i * g->dh - g->pt;                                              \
                    if (iy < 0 || iy >= h) {                                                                        \
                        for (int64_t ox = 0; ox < ow; ox++) row[ox] = pad;                                          \
                        continue;                                                                                   \
                    }                                                                                               \
                    const T *in = src + iy * w + offw;                                                              \
                    for (int64_t ox = 0; ox < lo; ox++) row[ox] = pad;                                              \
                    if (g->sw == 1) {                                                                               \
                        if (hi > lo) memcpy(row + lo, in + lo, (size_t)(hi - lo) * sizeof(T));                      \
                    } else {                                                                                        \
                        for (int64_t ox = lo; ox < hi; ox++) row[ox] = in[ox * g->sw];                              \
                    }                                                                                               \
                    for (int64_t ox = hi; ox < ow; ox++) row[ox] = pad;                                             \
                }                                                                                                   \
            }                                                                                                       \
    });                                                                                                             \
    return fl_window_stopped(stop);                                                                                 \
}
UNFOLD_KERNEL(unfold32, uint32_t)
UNFOLD_KERNEL(unfold16, uint16_t)

/* fold of fp32 columns [nc, K, oh·ow] into zeroed planes [nc, h, w]: per plane in the order k, then l; FL_EINTR if
 * interrupted */
static fl_status fold_f32(const float *x, float *y, int64_t nc, int64_t h, int64_t w, const fl_window *g, int64_t oh,
                          int64_t ow) {
    const int64_t K = g->kh * g->kw, L = oh * ow;
    int stop = 0;
    FL_PAR_FOR(nc * K * L > 32768, schedule(static),
    for (int64_t p = 0; p < nc; p++) {
        FL_WIN_POLL(stop)
        const float *src = x + p * K * L;
        float *dst = y + p * h * w;
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const int64_t offw = j * g->dw - g->pl;
                int64_t lo, hi;
                fl_window_inside(offw, g->sw, w, ow, &lo, &hi);
                const float *row = src + (i * g->kw + j) * L;
                for (int64_t oy = 0; oy < oh; oy++, row += ow) {
                    const int64_t iy = oy * g->sh + i * g->dh - g->pt;
                    if (iy < 0 || iy >= h) continue;
                    float *out = dst + iy * w + offw;
                    if (g->sw == 1) {
                        for (int64_t ox = lo; ox < hi; ox++) out[ox] += row[ox];
                    } else {
                        for (int64_t ox = lo; ox < hi; ox++) out[ox * g->sw] += row[ox];
                    }
                }
            }
    });
    return fl_window_stopped(stop);
}

fl_status fl_im2col_planes(void *y, const void *x, int bytes, int64_t nc, int64_t h, int64_t w, const fl_window *g,
                           int64_t oh, int64_t ow) {
    return bytes == 4 ? unfold32(x, y, nc, h, w, g, oh, ow, 0) : unfold16(x, y, nc, h, w, g, oh, ow, 0);
}

fl_status fl_col2im_planes(float *y, const float *x, int64_t nc, int64_t h, int64_t w, const fl_window *g, int64_t oh,
                           int64_t ow) {
    return fold_f32(x, y, nc, h, w, g, oh, ow);
}

/* ---- the ops --------------------------------------------------------------------------------------------------- */

static fl_status check_4d(const char *fn, const fl_tensor *x, const char *layout) {
    char s[200];
    if (fl_format(x->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "%s: %s tensor: call :dequantize() first (FP8 tensors only hold quantized data)", fn,
                      fl_format(x->dtype)->name);
    if (x->ndim != 4)
        return FL_ERR(FL_EINVAL, "%s: expected a 4-D input %s, got %s", fn, layout,
                      fl_shape_str(s, sizeof s, x->ndim, x->shape));
    return FL_OK;
}

typedef struct { fl_window g; int64_t h, w; } win_ctx;   /* a node's geometry and its plane's size */

static fl_status unfold_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin);
static fl_status fold_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin);

static fl_status record(fl_tensor **out, const fl_tensor *x, const fl_window *g, int64_t h, int64_t w, bool unfold) {
    if (!fl_any_requires_grad(1, &x)) return FL_OK;
    win_ctx *c = malloc(sizeof *c);
    if (!c) {
        fl_tensor_release(*out);
        *out = NULL;
        return FL_ERR(FL_ENOMEM, "%s: out of memory", unfold ? "unfold" : "fold");
    }
    c->g = *g, c->h = h, c->w = w;
    return fl_autograd_record_ctx(out, unfold ? "Im2ColBackward" : "Col2ImBackward", unfold ? unfold_bwd : fold_bwd, x,
                                  c, free);
}

fl_status fl_unfold(fl_tensor **out, const fl_tensor *x, const fl_window *g) {
    *out = NULL;
    FL_PROF_SCOPE("unfold"); FL_PROF_SHAPES(x);
    FL_TRY(check_4d("unfold", x, "[N, C, H, W]"));
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    int64_t oh, ow, numel;
    FL_TRY(window_counts("unfold", g, H, W, &oh, &ow));
    const int64_t shape[4] = { N, C, g->kh * g->kw, oh * ow };
    /* (kh·kw under 2^62, oh·ow under FL_MAX_NUMEL: window_counts; the whole is checked without overflowing) */
    FL_TRY(fl_shape_numel("unfold", 4, shape, &numel));
    const int es = fl_format(x->dtype)->bits / 8;
    fl_tensor *h = NULL, *hc = NULL, *y = NULL;
    fl_status st = fl_tensor_to_device(&h, x, FL_DEV_CPU);
    if (st == FL_OK) st = fl_tensor_contiguous(&hc, h);
    if (st == FL_OK) st = fl_tensor_empty(&y, x->dtype, 4, shape, FL_DEV_CPU);
    if (st == FL_OK && numel > 0) {
        if (es == 4) {
            const float v = (float)g->pad_value;
            uint32_t pad;
            memcpy(&pad, &v, sizeof pad);
            st = unfold32(fl_tensor_data(hc), fl_tensor_data(y), N * C, H, W, g, oh, ow, pad);
        } else {
            const uint16_t pad = (uint16_t)fl_format(x->dtype)->from_float((float)g->pad_value, FL_IEEE);
            st = unfold16(fl_tensor_data(hc), fl_tensor_data(y), N * C, H, W, g, oh, ow, pad);
        }
    }
    fl_tensor_release(h);
    fl_tensor_release(hc);
    if (st == FL_OK && x->device != FL_DEV_CPU) {
        fl_tensor *d = NULL;
        st = fl_tensor_to_device(&d, y, x->device);
        fl_tensor_release(y);
        y = d;
    }
    if (st != FL_OK) { fl_tensor_release(y); return st; }
    *out = y;
    return record(out, x, g, H, W, true);
}

fl_status fl_fold(fl_tensor **out, const fl_tensor *cols, int64_t h, int64_t w, const fl_window *g) {
    char s[200];
    *out = NULL;
    FL_PROF_SCOPE("fold"); FL_PROF_SHAPES(cols);
    FL_TRY(check_4d("fold", cols, "of columns [N, C, kh·kw, L]"));
    int64_t oh, ow, numel;
    FL_TRY(window_counts("fold", g, h, w, &oh, &ow));
    const int64_t N = cols->shape[0], C = cols->shape[1];
    if (cols->shape[2] != g->kh * g->kw || cols->shape[3] != oh * ow)
        return FL_ERR(FL_EINVAL, "fold: columns %s do not match the windows of a %lld×%lld plane: expected [N, C, "
                      "%lld, %lld] (kernel %lld×%lld, %lld×%lld windows)", fl_shape_str(s, sizeof s, 4, cols->shape),
                      (long long)h, (long long)w, (long long)(g->kh * g->kw), (long long)(oh * ow), (long long)g->kh,
                      (long long)g->kw, (long long)oh, (long long)ow);
    const int64_t shape[4] = { N, C, h, w };
    FL_TRY(fl_shape_numel("fold", 4, shape, &numel));
    fl_tensor *d = NULL, *f = NULL, *y = NULL;
    fl_status st = fl_tensor_to_device(&d, cols, FL_DEV_CPU);
    if (st == FL_OK) st = cols->dtype == FL_F32 ? fl_tensor_contiguous(&f, d) : fl_tensor_to(&f, d, FL_F32);
    if (st == FL_OK) st = fl_tensor_zeros(&y, FL_F32, 4, shape, FL_DEV_CPU);
    if (st == FL_OK && numel > 0 && fl_tensor_numel(f) > 0)
        st = fold_f32(fl_tensor_data(f), fl_tensor_data(y), N * C, h, w, g, oh, ow);
    fl_tensor_release(d);
    fl_tensor_release(f);
    d = NULL;
    if (st == FL_OK && cols->dtype != FL_F32) {
        st = fl_tensor_to(&d, y, cols->dtype);
        fl_tensor_release(y);
        y = d, d = NULL;
    }
    if (st == FL_OK && cols->device != FL_DEV_CPU) {
        st = fl_tensor_to_device(&d, y, cols->device);
        fl_tensor_release(y);
        y = d;
    }
    if (st != FL_OK) { fl_tensor_release(y); return st; }
    *out = y;
    return record(out, cols, g, h, w, false);
}

/* unfold's gradient: the columns' gradient folded back (the padding's part dropped); fp32 as it came */
static fl_status unfold_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const win_ctx *c = n->ctx;
    return fl_fold(&gin[0], g, c->h, c->w, &c->g);
}

/* fold's gradient: the plane's gradient unfolded (the padding 0) */
static fl_status fold_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const win_ctx *c = n->ctx;
    fl_window z = c->g;
    z.pad_value = 0;
    return fl_unfold(&gin[0], g, &z);
}
