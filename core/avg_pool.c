/* avg_pool.c — torch's average pooling over [N, C, H, W] planes, computed directly over each window (no columns):
 * each window's sum divided by its divisor (divisor_override, or the count of its positions inside the counted
 * region: the input and, with count_include_pad, the padding on each side, never ceil_mode's extra beyond it). The
 * bits are those of the unfold + sum + divide that lua/fp8/nn/conv.lua was made of until 2026-12-06: the sum in
 * double in the order of the kernel offsets, in runs of FL_AVG_SUM_RUN offsets added left to right (the CPU
 * reduction's order over a middle dim, cpu_reduce.c's reduce_strided; the padding's zeros add nothing), rounded to
 * fp32 and then to x's dtype, divided in fp32 and rounded again. Backward: each window's gradient divided by its
 * divisor in fp32, added into the window's input positions in the order of the kernel offsets, then the windows
 * (col2im's order). Computed on the host for every device (host_ops.h), OpenMP over the planes; a channels_last
 * input in its NHWC memory (stop 104: no layout copy), each channel summed and scattered in the same order: the same
 * bits. */
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

/* the reduction's run of rows (cpu_internal.h's FL_CPU_SUM_ROWS): a window of more offsets sums each run from 0
 * and adds the runs in order */
#define FL_AVG_SUM_RUN 256

/* cl: the input was channels_last (torch's suggest_memory_format), so are the result and the input's gradient (torch's
 * layouts), computed in NHWC memory (stop 104: ap_forward_cl, ap_bwd_cl) */
typedef struct { fl_window g; int64_t h, w, oh, ow, divisor; bool count_pad, cl; } ap_ctx;

/* how many of the positions lo, lo+1, ..., lo+k-1 fall in [a, b) */
static inline int64_t inside(int64_t lo, int64_t k, int64_t a, int64_t b) {
    int64_t s = lo > a ? lo : a, e = lo + k < b ? lo + k : b;
    return e > s ? e - s : 0;
}

/* the divisors of one row of windows oy: the override, or the count of each window's positions in the region */
static void divisors(float *dv, const ap_ctx *c, int64_t oy) {
    const fl_window *g = &c->g;
    if (c->divisor > 0) {
        for (int64_t ox = 0; ox < c->ow; ox++) dv[ox] = (float)(double)c->divisor;
        return;
    }
    const int64_t ph = c->count_pad ? g->pt : 0, pw = c->count_pad ? g->pl : 0;
    const int64_t rows = inside(oy * g->sh - g->pt, g->kh, -ph, c->h + ph);
    for (int64_t ox = 0; ox < c->ow; ox++)
        dv[ox] = (float)(double)(rows * inside(ox * g->sw - g->pl, g->kw, -pw, c->w + pw));
}

/* y [nc, oh, ow] (fp32, each already rounded through dt) = the averages of x [nc, h, w]; 1 if interrupted */
static int ap_forward(const float *x, float *y, int64_t nc, const ap_ctx *c, fl_dtype dt, int *oom) {
    const fl_window *g = &c->g;
    const int64_t h = c->h, w = c->w, oh = c->oh, ow = c->ow, K = g->kh * g->kw;
    const fl_format_traits *f = fl_format(dt);
    const bool round16 = dt != FL_F32;
    int stop = 0;
    /* the kernel offsets whose column of positions meets the input (a wider window's others lie in its padding) */
    const int64_t j0 = g->pl - (ow - 1) * g->sw > 0 ? g->pl - (ow - 1) * g->sw : 0;
    const int64_t j1 = w + g->pl < g->kw ? w + g->pl : g->kw;
    FL_PAR_FOR((double)nc * (double)oh * (double)ow * (double)K > 32768, schedule(static),
    for (int64_t p = 0; p < nc; p++) {
        FL_WIN_POLL(stop)
        double *acc = malloc((size_t)(2 * ow) * sizeof(double));
        float *dv = malloc((size_t)ow * sizeof(float));
        if (!acc || !dv) {
            free(acc), free(dv);
            FL_PRAGMA(omp atomic write)
            *oom = 1;
            continue;
        }
        double *part = acc + ow;
        const float *src = x + p * h * w;
        for (int64_t oy = 0; oy < oh; oy++) {
            for (int64_t ox = 0; ox < ow; ox++) acc[ox] = 0, part[ox] = 0;
            /* only the offsets that meet the input: the rows i with 0 <= iy < h, the columns j0..j1. The runs of 256
             * offsets are still cut where the offset index crosses a multiple of 256 (a run of offsets wholly in the
             * padding adds zeros: leaving it out, and its cut, changes no bit), so a window of 2^24 × 16 over a
             * 2 × 2 plane costs its few real positions, not 2^28 steps */
            const int64_t base = oy * g->sh - g->pt;
            const int64_t i0 = base < 0 ? -base : 0, i1 = h - base < g->kh ? h - base : g->kh;
            int64_t run = 0;   /* the run the sums in part belong to */
            for (int64_t i = i0; i < i1; i++) {
                const int64_t iy = base + i;
                for (int64_t j = j0; j < j1; j++) {
                    const int64_t k = i * g->kw + j;
                    if (k / FL_AVG_SUM_RUN != run) {   /* (only windows of more than 256 offsets) */
                        for (int64_t ox = 0; ox < ow; ox++) acc[ox] += part[ox], part[ox] = 0;
                        run = k / FL_AVG_SUM_RUN;
                    }
                    const int64_t offw = j - g->pl;
                    int64_t lo, hi;
                    fl_window_inside(offw, g->sw, w, ow, &lo, &hi);
                    const float *in = src + iy * w + offw;
                    if (g->sw == 1)
                        for (int64_t ox = lo; ox < hi; ox++) part[ox] += (double)in[ox];
                    else
                        for (int64_t ox = lo; ox < hi; ox++) part[ox] += (double)in[ox * g->sw];
                }
            }
            divisors(dv, c, oy);
            float *out = y + (p * oh + oy) * ow;
            for (int64_t ox = 0; ox < ow; ox++) {
                float sum = (float)(K > FL_AVG_SUM_RUN ? acc[ox] + part[ox] : part[ox]);
                if (round16) sum = f->to_float(f->from_float(sum, FL_IEEE));   /* the sum's tensor was x's dtype */
                out[ox] = sum / dv[ox];
            }
        }
        free(acc);
        free(dv);
    });
    return stop;
}

/* ap_forward over NHWC memory (x [N, h, w, C], y [N, oh, ow, C]): each output pixel's window of C-vectors, every
 * channel's sum in ap_forward's order (the same offsets, the same runs), so the same bits; 1 if interrupted */
static int ap_forward_cl(const float *x, float *y, int64_t N, int64_t C, const ap_ctx *c, fl_dtype dt, int *oom) {
    const fl_window *g = &c->g;
    const int64_t h = c->h, w = c->w, oh = c->oh, ow = c->ow, K = g->kh * g->kw;
    const fl_format_traits *f = fl_format(dt);
    const bool round16 = dt != FL_F32;
    int stop = 0;
    const int64_t j0 = g->pl - (ow - 1) * g->sw > 0 ? g->pl - (ow - 1) * g->sw : 0;
    const int64_t j1 = w + g->pl < g->kw ? w + g->pl : g->kw;
    FL_PAR_FOR(N * oh > 1 && (double)N * (double)oh * (double)ow * (double)K * (double)C > 32768, schedule(static),
    for (int64_t r = 0; r < N * oh; r++) {
        FL_WIN_POLL(stop)
        const int64_t C1 = C > 0 ? C : 1;
        double *acc = malloc((size_t)(2 * C1) * sizeof(double));
        float *dv = malloc((size_t)ow * sizeof(float));
        if (!acc || !dv) {
            free(acc), free(dv);
            FL_PRAGMA(omp atomic write)
            *oom = 1;
            continue;
        }
        double *part = acc + C1;
        const int64_t n = r / oh, oy = r % oh;
        const float *src = x + n * h * w * C;
        divisors(dv, c, oy);
        const int64_t base = oy * g->sh - g->pt;
        const int64_t i0 = base < 0 ? -base : 0, i1 = h - base < g->kh ? h - base : g->kh;
        for (int64_t ox = 0; ox < ow; ox++) {
            for (int64_t k = 0; k < C; k++) acc[k] = 0, part[k] = 0;
            int64_t run = 0;
            for (int64_t i = i0; i < i1; i++) {
                const int64_t iy = base + i;
                for (int64_t j = j0; j < j1; j++) {
                    const int64_t q = i * g->kw + j;
                    if (q / FL_AVG_SUM_RUN != run) {   /* (only windows of more than 256 offsets) */
                        for (int64_t k = 0; k < C; k++) acc[k] += part[k], part[k] = 0;
                        run = q / FL_AVG_SUM_RUN;
                    }
                    const int64_t ix = ox * g->sw + j - g->pl;
                    if (ix < 0 || ix >= w) continue;
                    const float *in = src + (iy * w + ix) * C;
                    FL_PRAGMA(omp simd)
                    for (int64_t k = 0; k < C; k++) part[k] += (double)in[k];
                }
            }
            float *out = y + (r * ow + ox) * C;
            for (int64_t k = 0; k < C; k++) {
                float sum = (float)(K > FL_AVG_SUM_RUN ? acc[k] + part[k] : part[k]);
                if (round16) sum = f->to_float(f->from_float(sum, FL_IEEE));
                out[k] = sum / dv[ox];
            }
        }
        free(acc);
        free(dv);
    });
    return stop;
}

static fl_status ap_bwd(fl_node *n, const fl_tensor *gy, fl_tensor **gin);

fl_status fl_avg_pool(fl_tensor **out, const fl_tensor *x, const fl_window *g, bool count_pad, int64_t divisor) {
    char s[200];
    *out = NULL;
    FL_PROF_SCOPE("avg_pool"); FL_PROF_SHAPES(x);
    if (fl_format(x->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "avg_pool: %s tensor: call :dequantize() first (FP8 tensors only hold quantized data)",
                      fl_format(x->dtype)->name);
    if (x->ndim != 4)
        return FL_ERR(FL_EINVAL, "avg_pool: expected a 4-D input [N, C, H, W], got %s",
                      fl_shape_str(s, sizeof s, x->ndim, x->shape));
    const int64_t pos4[4] = { g->kh, g->kw, g->sh, g->sw };
    for (int i = 0; i < 4; i++)
        if (pos4[i] < 1 || pos4[i] >= FL_WIN_MAX)
            return FL_ERR(FL_EINVAL, "avg_pool: kernel and stride must be in 1..2^31-1, got %lld", (long long)pos4[i]);
    if (g->dh != 1 || g->dw != 1)
        return FL_ERR(FL_EINVAL, "avg_pool: dilation must be 1, got %lld×%lld", (long long)g->dh, (long long)g->dw);
    if (g->pt < 0 || g->pl < 0 || g->pb < g->pt || g->pr < g->pl || g->pb >= FL_WIN_MAX || g->pr >= FL_WIN_MAX)
        return FL_ERR(FL_EINVAL, "avg_pool: padding top %lld, bottom %lld, left %lld, right %lld: expected top and left "
                      "in 0..2^31-1, bottom and right at least as large (their excess is ceil_mode's) and below 2^31",
                      (long long)g->pt, (long long)g->pb, (long long)g->pl, (long long)g->pr);
    if (2 * g->pt > g->kh || 2 * g->pl > g->kw)   /* torch's rule; past it a window may hold no position (0/0) */
        return FL_ERR(FL_EINVAL, "avg_pool: padding top %lld, left %lld must be at most half the kernel %lld×%lld",
                      (long long)g->pt, (long long)g->pl, (long long)g->kh, (long long)g->kw);
    if (divisor < 0)
        return FL_ERR(FL_EINVAL, "avg_pool: divisor must be >= 1 (0: the count), got %lld", (long long)divisor);
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
    const int64_t hp = H + g->pt + g->pb, wp = W + g->pl + g->pr;
    if (hp < g->kh || wp < g->kw)
        return FL_ERR(FL_EINVAL, "avg_pool: the %lld×%lld plane padded to %lld×%lld is smaller than the kernel %lld×%lld",
                      (long long)H, (long long)W, (long long)hp, (long long)wp, (long long)g->kh, (long long)g->kw);
    const int64_t oh = (hp - g->kh) / g->sh + 1, ow = (wp - g->kw) / g->sw + 1;
    if (oh > FL_MAX_NUMEL / ow)   /* (checked before the product is formed) */
        return FL_ERR(FL_EINVAL, "avg_pool: %lld×%lld windows are too many", (long long)oh, (long long)ow);
    const int64_t shape[4] = { N, C, oh, ow };
    int64_t numel;
    FL_TRY(fl_shape_numel("avg_pool", 4, shape, &numel));
    if (g->kh > FL_MAX_NUMEL / g->kw)
        return FL_ERR(FL_EINVAL, "avg_pool: a %lld×%lld kernel is too large", (long long)g->kh, (long long)g->kw);
    ap_ctx cx = { *g, H, W, oh, ow, divisor, count_pad, fl_tensor_is_channels_last(x) };
    fl_tensor *hx = NULL, *y = NULL;
    fl_status st = cx.cl ? fl_host_f32_cl_read(&hx, x) : fl_host_f32_read(&hx, x);
    if (st == FL_OK) st = cx.cl ? fl_tensor_empty_cl(&y, FL_F32, shape, FL_DEV_CPU) : fl_tensor_empty(&y, FL_F32, 4, shape, FL_DEV_CPU);
    if (st == FL_OK && numel > 0) {
        int oom = 0;
        const int stop = cx.cl ? ap_forward_cl(fl_tensor_data(hx), fl_tensor_data(y), N, C, &cx, x->dtype, &oom)
                               : ap_forward(fl_tensor_data(hx), fl_tensor_data(y), N * C, &cx, x->dtype, &oom);
        if (oom) st = FL_ERR(FL_ENOMEM, "avg_pool: out of memory for a row of %lld windows", (long long)ow);
        else st = fl_window_stopped(stop);
    }
    fl_tensor_release(hx);
    if (st == FL_OK) st = (cx.cl ? fl_host_result_cl : fl_host_result)(out, y, x->dtype, x->device), y = NULL;
    fl_tensor_release(y);
    if (st != FL_OK || !fl_any_requires_grad(1, &x)) return st;
    ap_ctx *c = malloc(sizeof *c);
    if (!c) { fl_tensor_release(*out); *out = NULL; return FL_ERR(FL_ENOMEM, "avg_pool: out of memory"); }
    *c = cx;
    return fl_autograd_record_ctx(out, "AvgPool2DBackward", ap_bwd, x, c, free);
}

/* ap_bwd over NHWC memory (gv [N, oh, ow, C], d [N, h, w, C] zeroed): every channel's additions in ap_bwd's order
 * (kernel offset, then window), along the channels; q: per sample, its L·C gradients over their divisors. 1 if
 * interrupted. */
static int ap_bwd_cl(const float *gv, float *d, const float *dv, int64_t N, int64_t C, const ap_ctx *c, int *oom) {
    const fl_window *g = &c->g;
    const int64_t h = c->h, w = c->w, oh = c->oh, ow = c->ow, L = oh * ow;
    const int64_t i0 = g->pt - (oh - 1) * g->sh > 0 ? g->pt - (oh - 1) * g->sh : 0;
    const int64_t i1 = h + g->pt < g->kh ? h + g->pt : g->kh;
    const int64_t j0 = g->pl - (ow - 1) * g->sw > 0 ? g->pl - (ow - 1) * g->sw : 0;
    const int64_t j1 = w + g->pl < g->kw ? w + g->pl : g->kw;
    int stop = 0;
    FL_PAR_FOR(N > 1 && (double)N * (double)L * (double)C * (double)g->kh * (double)g->kw > 32768, schedule(static),
    for (int64_t n = 0; n < N; n++) {
        FL_WIN_POLL(stop)
        float *q = malloc((size_t)(L * C > 0 ? L * C : 1) * sizeof *q);
        if (!q) {
            FL_PRAGMA(omp atomic write)
            *oom = 1;
            continue;
        }
        const float *gp = gv + n * L * C;
        for (int64_t l = 0; l < L; l++)
            for (int64_t k = 0; k < C; k++) q[l * C + k] = gp[l * C + k] / dv[l];
        float *dst = d + n * h * w * C;
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = j0; j < j1; j++) {
                const int64_t offw = j - g->pl;
                int64_t lo, hi;
                fl_window_inside(offw, g->sw, w, ow, &lo, &hi);
                for (int64_t oy = 0; oy < oh; oy++) {
                    const int64_t iy = oy * g->sh + i - g->pt;
                    if (iy < 0 || iy >= h) continue;
                    for (int64_t ox = lo; ox < hi; ox++) {
                        float *o = dst + (iy * w + ox * g->sw + offw) * C;
                        const float *qr = q + (oy * ow + ox) * C;
                        FL_PRAGMA(omp simd)
                        for (int64_t k = 0; k < C; k++) o[k] += qr[k];
                    }
                }
            }
        free(q);
    });
    return stop;
}

/* dx: each window's gradient over its divisor, added into its positions in the order kernel offset, then window
 * (gy: any dense layout, autograd.c's node_takes_dense: read contiguous, or NHWC for a channels_last input) */
static fl_status ap_bwd(fl_node *n, const fl_tensor *gy, fl_tensor **gin) {
    const ap_ctx *c = n->ctx;
    const fl_window *g = &c->g;
    const fl_tensor *x = n->inputs[0];
    const int64_t NC = x->shape[0] * x->shape[1], h = c->h, w = c->w, oh = c->oh, ow = c->ow, L = oh * ow;
    fl_tensor *hg = NULL, *dx = NULL;
    if (c->cl) {
        fl_status st = fl_host_f32_cl_read(&hg, gy);
        if (st == FL_OK) st = fl_tensor_empty_cl(&dx, FL_F32, x->shape, FL_DEV_CPU);
        if (st == FL_OK) memset(fl_tensor_data(dx), 0, (size_t)(NC * h * w) * sizeof(float));
        if (st == FL_OK && NC * h * w > 0 && L > 0) {
            float *dv = malloc((size_t)L * sizeof *dv);
            int oom = 0;
            if (!dv) st = FL_ERR(FL_ENOMEM, "avg_pool: out of memory for %lld windows' divisors", (long long)L);
            if (st == FL_OK) {
                for (int64_t oy = 0; oy < oh; oy++) divisors(dv + oy * ow, c, oy);
                const int stop = ap_bwd_cl(fl_tensor_data(hg), fl_tensor_data(dx), dv, x->shape[0], x->shape[1], c, &oom);
                if (oom) st = FL_ERR(FL_ENOMEM, "avg_pool: out of memory for a sample's %lld gradients", (long long)(L * x->shape[1]));
                else st = fl_window_stopped(stop);
            }
            free(dv);
        }
        fl_tensor_release(hg);
        if (st == FL_OK) return fl_host_result_cl(&gin[0], dx, FL_F32, x->device);
        fl_tensor_release(dx);
        return st;
    }
    fl_status st = fl_host_f32_read(&hg, gy);
    if (st == FL_OK) st = fl_tensor_zeros(&dx, FL_F32, 4, x->shape, FL_DEV_CPU);
    if (st == FL_OK && NC * h * w > 0 && L > 0) {
        float *dv = malloc((size_t)L * sizeof *dv);   /* each window's divisor */
        if (!dv) st = FL_ERR(FL_ENOMEM, "avg_pool: out of memory for %lld windows' divisors", (long long)L);
        if (st == FL_OK) for (int64_t oy = 0; oy < oh; oy++) divisors(dv + oy * ow, c, oy);
        const float *gv = st == FL_OK ? fl_tensor_data(hg) : NULL;
        float *d = st == FL_OK ? fl_tensor_data(dx) : NULL;
        int stop = 0, oom = 0;
        /* the offsets that meet the input, as the forward's (the others add nothing anywhere) */
        const int64_t i0 = g->pt - (oh - 1) * g->sh > 0 ? g->pt - (oh - 1) * g->sh : 0;
        const int64_t i1 = h + g->pt < g->kh ? h + g->pt : g->kh;
        const int64_t j0 = g->pl - (ow - 1) * g->sw > 0 ? g->pl - (ow - 1) * g->sw : 0;
        const int64_t j1 = w + g->pl < g->kw ? w + g->pl : g->kw;
        FL_PAR_FOR(st == FL_OK && (double)NC * (double)L * (double)g->kh * (double)g->kw > 32768, schedule(static),
        for (int64_t p = 0; p < (st == FL_OK ? NC : 0); p++) {
            FL_WIN_POLL(stop)
            float *q = malloc((size_t)L * sizeof *q);
            if (!q) {
                FL_PRAGMA(omp atomic write)
                oom = 1;
                continue;
            }
            const float *gp = gv + p * L;
            for (int64_t l = 0; l < L; l++) q[l] = gp[l] / dv[l];
            float *dst = d + p * h * w;
            for (int64_t i = i0; i < i1; i++)
                for (int64_t j = j0; j < j1; j++) {
                    const int64_t offw = j - g->pl;
                    int64_t lo, hi;
                    fl_window_inside(offw, g->sw, w, ow, &lo, &hi);
                    for (int64_t oy = 0; oy < oh; oy++) {
                        const int64_t iy = oy * g->sh + i - g->pt;
                        if (iy < 0 || iy >= h) continue;
                        float *o = dst + iy * w + offw;
                        const float *row = q + oy * ow;
                        if (g->sw == 1)
                            for (int64_t ox = lo; ox < hi; ox++) o[ox] += row[ox];
                        else
                            for (int64_t ox = lo; ox < hi; ox++) o[ox * g->sw] += row[ox];
                    }
                }
            free(q);
        });
        free(dv);
        if (st == FL_OK && oom) st = FL_ERR(FL_ENOMEM, "avg_pool: out of memory for a plane's %lld gradients", (long long)L);
        if (st == FL_OK) st = fl_window_stopped(stop);
    }
    fl_tensor_release(hg);
    if (st == FL_OK) st = fl_host_result(&gin[0], dx, FL_F32, x->device), dx = NULL;
    fl_tensor_release(dx);
    return st;
}
