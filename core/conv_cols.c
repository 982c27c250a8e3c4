/* conv_cols.c — torch's conv2d (any groups, stride, padding, dilation) as im2col + GEMM with the columns made a few
 * samples at a time: a chunk's columns (about 2 MiB of fp32) are written and read by the GEMM while they are in the
 * cache, where the whole batch's (75 MB for [32, 64, 32, 32], 3×3) went to memory and back. Each chunk's GEMM is the
 * call lua/fp8/nn/conv.lua made for the whole batch (the weight [OC, C·K] or [g, OC/g, cg·K] against the columns
 * [n, C·K, L] or [n, g, cg·K, L]), on fewer batch entries, so every output has the same products summed in the same
 * order (im2col_spec compares the bits with the composite). Backward the same way per chunk: the columns' gradient
 * Wᵀ·dY folded into the input's (fold's order), the weight's dY·colsᵀ per sample summed over the batch in double in
 * sample order, in runs of 256 samples (the reduction's order for sum_to_shape: cpu_reduce.c), rounded once; the
 * columns made again from the input rather than kept. The backward's GEMMs are fp32 (16-bit operands widened, exact),
 * as the composite's were, or with bwd16 in the operands' 16-bit dtype with the output gradient rounded to it: what
 * torch does (its gradient of a bf16 output is bf16) and what autocast's matmul did in the composite. CPU tensors
 * only (the caller keeps the composite for others). Since stop 98 an fp32 forward runs oneDNN's direct convolution
 * (cpu/cpu_conv.c: no columns; its own order of each output's sum, so not the GEMM's bits), but for a 1×1 kernel at
 * stride 1 without padding, whose columns are the input; since stop 99 its backward too, by oneDNN's backward-data and
 * backward-weights primitives (the device entries conv2d_direct_bwd_*; the bias's gradient with the weight's), each
 * falling back to the columns where the device declines; since stop 100 bf16 too (oneDNN's bf16 primitives: the
 * fp32 sums in the kernel's order, a bf16 result rounded once), fp16 keeping the columns. Since stop 101 a
 * channels-last conv (torch's rule on the input's or the weight's strides: channels_last below) gives a channels-last
 * result, as torch's, and its direct route reads the input and the output gradient NHWC in place (cpu_conv.c's nhwc
 * descriptors), a 1×1 kernel at stride 1 without padding included (its columns would want the input NCHW and the
 * result copied back); the columns work on NCHW copies. */
#include "nn.h"
#include "ops.h"
#include "ops_raw.h"
#include "autograd.h"
#include "format.h"
#include "im2col.h"
#include "window.h"
#include "profiler.h"
#include "device.h"
#include <stdlib.h>
#include <string.h>

#define CC_CHUNK (INT64_C(1) << 19)   /* column elements per chunk */
#define CC_SUM_RUN 256                /* cpu_internal.h's FL_CPU_SUM_ROWS: the reduction's runs of rows */

/* cl: the conv is channels-last (torch's channels_last: its result NHWC, and its input's gradient on every route,
 * which the autograd hands on so: stop 102) */
typedef struct { fl_window g; int64_t groups, oh, ow; bool wide, bwd16, plain_1x1, direct, cl; } cc_ctx;

/* the samples per chunk for columns of ckl elements per sample */
static int64_t chunk_of(int64_t N, int64_t ckl) {
    int64_t nb = CC_CHUNK / (ckl > 0 ? ckl : 1);
    if (nb < 1) nb = 1;
    return nb < N ? nb : N;
}

/* t (batch-first, contiguous or a narrowed contiguous block) viewed as the GEMM's operand of nb entries: [nb, r, c]
 * for one group, [nb, g, r / g, c] for g */
static fl_status as_operand(fl_tensor **out, const fl_tensor *t, int64_t nb, int64_t g, int64_t r, int64_t c) {
    const int64_t s1[3] = { nb, r, c }, sg[4] = { nb, g, r / g, c };
    return g == 1 ? fl_tensor_view(out, t, 3, s1) : fl_tensor_view(out, t, 4, sg);
}

/* the weight as the GEMM's other operand: [OC, C/g·K] or [g, OC/g, C/g·K], in dt */
static fl_status weight_operand(fl_tensor **out, const fl_tensor *w, int64_t g, fl_dtype dt) {
    const int64_t OC = w->shape[0], ck = w->shape[1] * w->shape[2] * w->shape[3];
    const int64_t s1[2] = { OC, ck }, sg[3] = { g, OC / g, ck };
    fl_tensor *r = NULL, *c = NULL;
    fl_status st = g == 1 ? fl_tensor_reshape(&r, w, 2, s1) : fl_tensor_reshape(&r, w, 3, sg);
    if (st == FL_OK && r->dtype != dt) {
        st = fl_tensor_to(&c, r, dt);
        fl_tensor_release(r);
        r = c;
    }
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

/* t [N, C, H, W] (4-D) with NHWC memory, in dtype dt, seen as [N, C, H, W]: a view of t where it is so already, else
 * a copy */
static fl_status nhwc_of(fl_tensor **out, const fl_tensor *t, fl_dtype dt) {
    fl_tensor *a = NULL, *b = NULL, *c = NULL;
    *out = NULL;
    fl_status st = fl_tensor_transpose(&a, t, 1, 3);          /* [N, W, H, C] */
    if (st == FL_OK) st = fl_tensor_transpose(&b, a, 1, 2);   /* [N, H, W, C] */
    fl_tensor_release(a);
    a = NULL;
    if (st == FL_OK) st = b->dtype == dt ? fl_tensor_contiguous(&c, b) : fl_tensor_to(&c, b, dt);
    if (st == FL_OK) st = fl_tensor_transpose(&a, c, 1, 2);
    if (st == FL_OK) st = fl_tensor_transpose(out, a, 1, 3);
    fl_tensor_release(a);
    fl_tensor_release(b);
    fl_tensor_release(c);
    return st;
}

/* a new tensor [N, C, H, W] of dtype dt with NHWC memory (zeroed where zero) */
static fl_status nhwc_new(fl_tensor **out, fl_dtype dt, const int64_t shape[4], bool zero) {
    const int64_t s[4] = { shape[0], shape[2], shape[3], shape[1] };
    fl_tensor *t = NULL, *a = NULL;
    *out = NULL;
    fl_status st = zero ? fl_tensor_zeros(&t, dt, 4, s, FL_DEV_CPU) : fl_tensor_empty(&t, dt, 4, s, FL_DEV_CPU);
    if (st == FL_OK) st = fl_tensor_transpose(&a, t, 1, 2);   /* [N, W, H, C] */
    if (st == FL_OK) st = fl_tensor_transpose(out, a, 1, 3);
    fl_tensor_release(a);
    fl_tensor_release(t);
    return st;
}

static fl_status check(const fl_tensor *x, const fl_tensor *w, const fl_window *g, int64_t groups, bool wide,
                       int64_t *oh, int64_t *ow) {
    char sx[200], sw[200];
    if (x->dtype != w->dtype || (x->dtype != FL_F32 && x->dtype != FL_BF16 && x->dtype != FL_F16))
        return FL_ERR(FL_EINVAL, "conv2d_cols: expected an input and a weight of one dtype, fp32, bf16 or fp16, got %s "
                      "and %s", fl_format(x->dtype)->name, fl_format(w->dtype)->name);
    if (wide && x->dtype == FL_F32)
        return FL_ERR(FL_EINVAL, "conv2d_cols: wide (an fp32 result of 16-bit operands) needs bf16 or fp16 operands");
    if (x->device != FL_DEV_CPU || w->device != FL_DEV_CPU)
        return FL_ERR(FL_EINVAL, "conv2d_cols: CPU tensors only, got the input on %s and the weight on %s",
                      fl_device_name(x->device), fl_device_name(w->device));
    if (groups < 1 || x->ndim != 4 || w->ndim != 4 || x->shape[1] % groups != 0 || w->shape[0] % groups != 0 ||
        x->shape[1] / groups != w->shape[1] || w->shape[2] != g->kh || w->shape[3] != g->kw)
        return FL_ERR(FL_EINVAL, "conv2d_cols: expected an input [N, C, H, W] and a weight [OC, C/groups, %lld, %lld] "
                      "with C and OC divisible by groups = %lld, got %s and %s", (long long)g->kh, (long long)g->kw,
                      (long long)groups, fl_shape_str(sx, sizeof sx, x->ndim, x->shape),
                      fl_shape_str(sw, sizeof sw, w->ndim, w->shape));
    if (g->pad_value != 0)
        return FL_ERR(FL_EINVAL, "conv2d_cols: the padding holds 0, got a pad value %g", g->pad_value);
    const int64_t pos[6] = { g->kh, g->kw, g->sh, g->sw, g->dh, g->dw };
    for (int i = 0; i < 6; i++)
        if (pos[i] < 1 || pos[i] >= FL_WIN_MAX)
            return FL_ERR(FL_EINVAL, "conv2d_cols: kernel, stride and dilation must be in 1..2^31-1, got %lld",
                          (long long)pos[i]);
    const int64_t pads[4] = { g->pt, g->pb, g->pl, g->pr };
    for (int i = 0; i < 4; i++)
        if (pads[i] < 0 || pads[i] >= FL_WIN_MAX)
            return FL_ERR(FL_EINVAL, "conv2d_cols: padding must be in 0..2^31-1, got %lld", (long long)pads[i]);
    const int64_t h = x->shape[2], wd = x->shape[3];
    const int64_t spanh = g->dh * (g->kh - 1) + 1, spanw = g->dw * (g->kw - 1) + 1;
    const int64_t hp = h + g->pt + g->pb, wp = wd + g->pl + g->pr;
    if (hp < spanh || wp < spanw)
        return FL_ERR(FL_EINVAL, "conv2d_cols: the %lld×%lld plane padded to %lld×%lld is smaller than the kernel's "
                      "span %lld×%lld", (long long)h, (long long)wd, (long long)hp, (long long)wp, (long long)spanh,
                      (long long)spanw);
    *oh = (hp - spanh) / g->sh + 1;
    *ow = (wp - spanw) / g->sw + 1;
    if (*oh > FL_MAX_NUMEL / *ow)   /* (checked before the product is formed) */
        return FL_ERR(FL_EINVAL, "conv2d_cols: %lld×%lld windows are too many", (long long)*oh, (long long)*ow);
    /* one sample's columns: C·K·L elements */
    const int64_t cs[3] = { x->shape[1], g->kh * g->kw, *oh * *ow };
    int64_t n;
    return fl_shape_numel("conv2d_cols", 3, cs, &n);
}

static fl_status cc_bwd(fl_node *n, const fl_tensor *gy, fl_tensor **gin);

fl_status fl_conv2d_cols(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                         const fl_window *g, int64_t groups, bool wide, bool bwd16) {
    *out = NULL;
    FL_PROF_SCOPE("conv2d_cols"); FL_PROF_SHAPES(x, w);
    int64_t oh = 0, ow = 0, numel;
    FL_TRY(check(x, w, g, groups, wide, &oh, &ow));
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], OC = w->shape[0];
    /* with_flops: torch's aten::conv2d count, 2·N·OC·OH·OW·(C/groups)·kh·kw (the bias not counted), on this event
     * whichever route runs it (oneDNN's direct convolution, the columns' GEMMs: those count none) */
    FL_PROF_FLOPS(2.0 * (double)N * (double)OC * (double)(oh * ow) * (double)(C / groups) * (double)(g->kh * g->kw));
    FL_PROF_HIDE_INNER_FLOPS();
    if (b && (b->dtype != FL_F32 || b->device != FL_DEV_CPU || b->ndim != 1 || b->shape[0] != OC ||
              (x->dtype != FL_F32 && !wide)))
        return FL_ERR(FL_EINVAL, "conv2d_cols: the bias must be an fp32 CPU tensor [%lld] added to an fp32 result (an "
                      "fp32 conv, or wide)", (long long)OC);
    const int64_t K = g->kh * g->kw, L = oh * ow, CKL = C * K * L;
    const int64_t shape[4] = { N, OC, oh, ow };
    FL_TRY(fl_shape_numel("conv2d_cols", 4, shape, &numel));
    const fl_dtype dt = x->dtype, odt = wide ? FL_F32 : dt;
    const int es = fl_format(dt)->bits / 8, eo = fl_format(odt)->bits / 8;
    const int64_t nb = chunk_of(N, CKL);
    /* channels-last (torch's rule, channels_last above): the result NHWC (yl) on every route; the direct route reads
     * the input NHWC in place (xn: a copy only where the input is not NHWC already) and writes the result so, where
     * the columns below work in NCHW (xc, y), the result copied into NHWC after */
    /* torch 2.15's conv2d gives a channels_last result where its input or its weight is so, and reads the input
     * NHWC (stop 101) */
    const bool cl = fl_tensor_is_channels_last(x) || fl_tensor_is_channels_last(w);
    fl_tensor *xc = NULL, *a = NULL, *cols = NULL, *y = NULL, *bc = NULL, *xn = NULL, *yl = NULL;
    fl_status st = FL_OK;
    if (b) st = fl_tensor_contiguous(&bc, b);
    if (st == FL_OK) st = weight_operand(&a, w, groups, dt);
    /* fp32 and bf16: oneDNN's direct convolution where it has one (cpu_conv.c), but for a 1×1 kernel at stride 1
     * without padding, whose columns are the input itself (the GEMM alone, faster than the primitive's reorders;
     * channels-last, the primitive, with no reorder, 0.4-0.5× the columns' time with their copies: stop 101).
     * bf16: the products summed in fp32 into an fp32 result, rounded to bf16 once (where the result is bf16), as the
     * columns' bf16 GEMM and torch 2.15's mkldnn bf16 conv do; each output's sum in the kernel's order */
    bool direct = false;
    const bool plain_1x1 = g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 && g->pb == 0 &&
                           g->pl == 0 && g->pr == 0;
    if (st == FL_OK && numel > 0 && CKL > 0 && (dt == FL_F32 || dt == FL_BF16) && (!plain_1x1 || cl)) {
        const int64_t geo[10] = { g->kh, g->kw, g->sh, g->sw, g->dh, g->dw, g->pt, g->pb, g->pl, g->pr };
        const fl_device *cpu = fl_cpu_device();
        fl_tensor *wc = NULL, *w4 = NULL;   /* the weight operand (dt) back in w's shape, [OC, C/groups, kh, kw] */
        if (cpu->conv2d_direct) st = fl_tensor_contiguous(&wc, a);
        if (st == FL_OK && wc) st = fl_tensor_reshape(&w4, wc, 4, w->shape);
        if (st == FL_OK && w4) st = cl ? nhwc_of(&xn, x, dt) : fl_tensor_contiguous(&xc, x);
        if (st == FL_OK && w4) st = cl ? nhwc_new(&yl, odt, shape, false) : fl_tensor_empty(&y, odt, 4, shape, FL_DEV_CPU);
        /* the bias added by the entry as below, one fp32 addition, in its copy out of the kernel's layout (a bf16
         * result rounded there) */
        if (st == FL_OK && w4) st = cpu->conv2d_direct(cl ? yl : y, cl ? xn : xc, w4, bc, groups, geo, &direct);
        fl_tensor_release(w4);
        fl_tensor_release(wc);
    }
    if (st == FL_OK && !direct && !xc) st = fl_tensor_contiguous(&xc, x);
    if (st == FL_OK && !direct && !y)
        st = CKL > 0 ? fl_tensor_empty(&y, odt, 4, shape, FL_DEV_CPU)
                     : fl_tensor_zeros(&y, odt, 4, shape, FL_DEV_CPU);   /* (no input channels: 0) */
    if (st == FL_OK && numel > 0 && CKL == 0 && bc) {   /* no input channels: the bias alone (0 + b, the add's) */
        const float *bv = fl_tensor_data(bc);
        float *yv = fl_tensor_data(y);
        for (int64_t q = 0; q < N * OC; q++)
            for (int64_t l = 0; l < L; l++) yv[q * L + l] = 0.0f + bv[q % OC];
    }
    if (st == FL_OK && numel > 0 && CKL > 0 && !direct) {
        const int64_t cshape[3] = { nb, C * K, L };
        st = fl_tensor_empty(&cols, dt, 3, cshape, FL_DEV_CPU);
    }
    for (int64_t n0 = 0; st == FL_OK && numel > 0 && CKL > 0 && !direct && n0 < N; n0 += nb) {
        const int64_t m = N - n0 < nb ? N - n0 : nb;
        fl_tensor *part = NULL, *b = NULL, *r = NULL;
        st = fl_check_interrupt();
        if (st == FL_OK)
            st = fl_im2col_planes(fl_tensor_data(cols), (const char *)fl_tensor_data(xc) + n0 * C * H * W * es, es,
                                  m * C, H, W, g, oh, ow);
        if (st == FL_OK) st = fl_tensor_narrow(&part, cols, 0, 0, m);
        if (st == FL_OK) st = as_operand(&b, part, m, groups, C * K, L);
        if (st == FL_OK) st = fl_matmul_raw(&r, a, b, dt, odt);
        if (st == FL_OK && !bc) {
            memcpy((char *)fl_tensor_data(y) + n0 * OC * L * eo, fl_tensor_data(r), (size_t)(m * OC * L * eo));
        } else if (st == FL_OK) {   /* the bias added as the elementwise add did it: one fp32 addition */
            const float *rv = fl_tensor_data(r), *bv = fl_tensor_data(bc);
            float *yv = (float *)fl_tensor_data(y) + n0 * OC * L;
            for (int64_t q = 0; q < m * OC; q++) {
                const float bq = bv[q % OC];
                for (int64_t l = 0; l < L; l++) yv[q * L + l] = rv[q * L + l] + bq;
            }
        }
        fl_tensor_release(part);
        fl_tensor_release(b);
        fl_tensor_release(r);
    }
    if (st == FL_OK && cl && !direct) {   /* the columns' NCHW result into the channels-last one */
        fl_tensor_release(yl);   /* (the one the declined direct route was given) */
        st = nhwc_of(&yl, y, odt);
    }
    if (cl) {
        fl_tensor_release(y);
        y = yl;
    } else {
        fl_tensor_release(yl);
    }
    fl_tensor_release(xc);
    fl_tensor_release(xn);
    fl_tensor_release(a);
    fl_tensor_release(cols);
    fl_tensor_release(bc);
    if (st != FL_OK) { fl_tensor_release(y); return st; }
    *out = y;
    const fl_tensor *ins[3] = { x, w, b };
    if (!fl_any_requires_grad(b ? 3 : 2, ins)) return FL_OK;
    cc_ctx *c = malloc(sizeof *c);
    if (!c) { fl_tensor_release(*out); *out = NULL; return FL_ERR(FL_ENOMEM, "conv2d_cols: out of memory"); }
    *c = (cc_ctx){ *g, groups, oh, ow, wide, bwd16 && dt != FL_F32, plain_1x1, direct, cl };
    fl_node *nd = NULL;
    st = fl_autograd_record(out, &nd, "ConvolutionBackward", cc_bwd, b ? 3 : 2, ins);
    if (st != FL_OK) { free(c); return st; }
    nd->ctx = c;
    nd->ctx_free = free;
    nd->inputs_read = 3u;   /* the input for the weight's gradient, the weight for the input's (the bias: its shape) */
    return FL_OK;
}

/* gy contiguous (NCHW) in fp32 (gradients come fp32, contiguous or, since stop 102, dense channels-last: copied) */
static fl_status contiguous_f32(fl_tensor **out, const fl_tensor *gy) {
    fl_tensor *h = NULL, *f = NULL;
    *out = NULL;
    fl_status st = fl_tensor_contiguous(&h, gy);
    if (st == FL_OK && h->dtype != FL_F32) {
        st = fl_tensor_to(&f, h, FL_F32);
        fl_tensor_release(h);
        h = f;
    }
    if (st == FL_OK) *out = h;
    else fl_tensor_release(h);
    return st;
}

static fl_status cc_bwd(fl_node *n, const fl_tensor *gy, fl_tensor **gin) {
    const cc_ctx *c = n->ctx;
    const fl_window *g = &c->g;
    const fl_tensor *x = n->inputs[0], *w = n->inputs[1];
    const int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3], OC = w->shape[0];
    const int64_t gr = c->groups, K = g->kh * g->kw, L = c->oh * c->ow, CKL = C * K * L;
    const int64_t wn = OC * (C / gr) * K;   /* the weight's elements */
    const bool need_x = fl_node_input_needs_grad(n, 0), need_w = fl_node_input_needs_grad(n, 1);
    const bool need_b = n->ninputs > 2 && fl_node_input_needs_grad(n, 2);
    const fl_dtype dt = x->dtype;
    /* the GEMMs' operands: fp32 (16-bit ones widened, exact), or with bwd16 the 16-bit dtype, the output gradient
     * rounded to it (matmul_raw converts it), the products summed in fp32 */
    const fl_dtype gdt = c->bwd16 ? dt : FL_F32, cdt = c->bwd16 ? dt : FL_DTYPE_COUNT;
    const int es = fl_format(dt)->bits / 8;
    const int64_t nb = chunk_of(N, CKL);
    /* fp32, and bf16 with bwd16, where the forward took oneDNN's direct convolution by the rules (not a 1×1 kernel
     * at stride 1 without padding, whose columns are the input): its backward-data and backward-weights primitives
     * (fp32: the bias's gradient with the weight's; bf16: the output gradient rounded to bf16 once, as the columns'
     * GEMMs read it, the products summed in fp32 into fp32 gradients, the bias's the fp32 gradient's sum as below),
     * each falling back to the columns below where the device declines */
    const fl_device *cpu = fl_cpu_device();
    /* (bf16 where the forward ran direct: the device declines the rest, whose output gradient would be rounded to
     * bf16 for nothing) */
    const bool try_direct = (dt == FL_F32 || (dt == FL_BF16 && c->bwd16 && c->direct)) && !c->plain_1x1 && CKL > 0 &&
                            N > 0 && OC > 0;
    const int64_t geo[10] = { g->kh, g->kw, g->sh, g->sw, g->dh, g->dw, g->pt, g->pb, g->pl, g->pr };
    bool dx_direct = false, dw_direct = false;
    fl_tensor *hg = NULL, *xc = NULL, *aw = NULL, *at = NULL, *cols = NULL, *dx = NULL, *dw = NULL, *db = NULL;
    fl_tensor *hd = NULL;   /* the output gradient as the direct route reads it: hg, or rounded to bf16 */
    double *acc = NULL, *run = NULL;
    /* channels-last (c->cl): the direct route reads the output gradient and the input NHWC (hd, xc: views where they
     * are so already) and writes the input's gradient NHWC, where its kernel works; the columns and the bias's sum
     * below read the NCHW gradient (hg), made where they need it */
    fl_status st = FL_OK;
    if (!(c->cl && try_direct)) st = contiguous_f32(&hg, gy);
    if (st == FL_OK && try_direct && (need_x || need_w))
        st = c->cl ? nhwc_of(&hd, gy, dt) : dt == FL_F32 ? (hd = fl_tensor_retain(hg), FL_OK) : fl_tensor_to(&hd, hg, dt);
    if (st == FL_OK && need_x && try_direct && cpu->conv2d_direct_bwd_data) {
        fl_tensor *wc = NULL;
        st = fl_tensor_contiguous(&wc, w);
        if (st == FL_OK) st = c->cl ? nhwc_new(&dx, FL_F32, x->shape, false)
                                    : fl_tensor_empty(&dx, FL_F32, 4, x->shape, FL_DEV_CPU);
        if (st == FL_OK) st = cpu->conv2d_direct_bwd_data(dx, hd, wc, gr, geo, &dx_direct);
        if (st == FL_OK && !dx_direct) {   /* the columns': an NCHW gradient of zeros to fold into */
            fl_tensor_release(dx);
            dx = NULL;
            st = fl_tensor_zeros(&dx, FL_F32, 4, x->shape, FL_DEV_CPU);
        }
        fl_tensor_release(wc);
    } else if (st == FL_OK && need_x) {
        st = fl_tensor_zeros(&dx, FL_F32, 4, x->shape, FL_DEV_CPU);
    }
    if (st == FL_OK && need_w && try_direct && cpu->conv2d_direct_bwd_weights) {
        const int64_t b1[1] = { OC };
        st = c->cl ? nhwc_of(&xc, x, dt) : fl_tensor_contiguous(&xc, x);
        if (st == FL_OK) st = fl_tensor_empty(&dw, FL_F32, 4, w->shape, FL_DEV_CPU);
        if (st == FL_OK && need_b && dt == FL_F32) st = fl_tensor_empty(&db, FL_F32, 1, b1, FL_DEV_CPU);
        if (st == FL_OK) st = cpu->conv2d_direct_bwd_weights(dw, db, xc, hd, gr, geo, &dw_direct);
        if (!dw_direct) {
            fl_tensor_release(dw); fl_tensor_release(db);
            dw = db = NULL;
        }
        if (c->cl) {   /* (the columns make theirs from the NCHW input) */
            fl_tensor_release(xc);
            xc = NULL;
        }
    }
    if (st == FL_OK && need_w && !dw_direct && !xc) st = fl_tensor_contiguous(&xc, x);
    const bool cols_x0 = need_x && !dx_direct, cols_w0 = need_w && !dw_direct;
    if (st == FL_OK && !hg && (cols_x0 || cols_w0 || (need_b && !db))) st = contiguous_f32(&hg, gy);
    if (st == FL_OK && need_b && !db) {
        /* the bias's gradient as the add's was taken: gy summed to [1, OC, 1, 1] (dim by dim), then [OC] */
        const int64_t bs[4] = { 1, OC, 1, 1 }, b1[1] = { OC };
        fl_tensor *s4 = NULL;
        st = fl_sum_to_shape(&s4, hg, 4, bs);
        if (st == FL_OK) st = fl_tensor_reshape(&db, s4, 1, b1);
        fl_tensor_release(s4);
    }
    const bool cols_x = need_x && !dx_direct, cols_w = need_w && !dw_direct;
    if (st == FL_OK && cols_x) st = weight_operand(&aw, w, gr, gdt);
    if (st == FL_OK && cols_x) st = fl_tensor_transpose(&at, aw, -1, -2);
    if (st == FL_OK && cols_w) {
        acc = calloc((size_t)(wn > 0 ? wn : 1), sizeof *acc);
        run = calloc((size_t)(wn > 0 ? wn : 1), sizeof *run);
        if (!acc || !run)
            st = FL_ERR(FL_ENOMEM, "conv2d_cols: out of memory for the weight's gradient (%lld values)", (long long)wn);
        if (st == FL_OK && CKL > 0) {
            const int64_t cshape[3] = { nb, C * K, L };
            st = fl_tensor_empty(&cols, dt, 3, cshape, FL_DEV_CPU);
        }
    }
    int64_t in_run = 0;   /* samples summed into run since it was last added to acc */
    for (int64_t n0 = 0; st == FL_OK && (cols_x || cols_w) && CKL > 0 && N > 0 && n0 < N; n0 += nb) {
        const int64_t m = N - n0 < nb ? N - n0 : nb;
        fl_tensor *gpart = NULL, *gop = NULL, *t = NULL;
        st = fl_check_interrupt();
        if (st == FL_OK) st = fl_tensor_narrow(&gpart, hg, 0, n0, m);
        if (st == FL_OK) st = as_operand(&gop, gpart, m, gr, OC, L);
        if (st == FL_OK && c->bwd16) {   /* rounded once for both GEMMs (each would convert it the same way) */
            fl_tensor *r16 = NULL;
            st = fl_tensor_to(&r16, gop, dt);
            fl_tensor_release(gop);
            gop = r16;
        }
        if (st == FL_OK && cols_x) {
            /* the columns' gradient Wᵀ·dY, folded into the input's */
            st = fl_matmul_raw(&t, at, gop, cdt, FL_F32);
            if (st == FL_OK)
                st = fl_col2im_planes((float *)fl_tensor_data(dx) + n0 * C * H * W, fl_tensor_data(t), m * C, H, W,
                                      g, c->oh, c->ow);
            fl_tensor_release(t);
            t = NULL;
        }
        if (st == FL_OK && cols_w) {
            /* dY·colsᵀ per sample, the columns made again (in gdt: widened where 16-bit and not bwd16) */
            fl_tensor *part = NULL, *pf = NULL, *b = NULL, *bt = NULL;
            st = fl_im2col_planes(fl_tensor_data(cols), (const char *)fl_tensor_data(xc) + n0 * C * H * W * es, es,
                                  m * C, H, W, g, c->oh, c->ow);
            if (st == FL_OK) st = fl_tensor_narrow(&part, cols, 0, 0, m);
            if (st == FL_OK) st = dt == gdt ? (pf = fl_tensor_retain(part), FL_OK) : fl_tensor_to(&pf, part, FL_F32);
            if (st == FL_OK) st = as_operand(&b, pf, m, gr, C * K, L);
            if (st == FL_OK) st = fl_tensor_transpose(&bt, b, -1, -2);
            if (st == FL_OK) st = fl_matmul_raw(&t, gop, bt, cdt, FL_F32);
            if (st == FL_OK) {
                const float *tv = fl_tensor_data(t);   /* [m, the weight's elements] */
                for (int64_t s = 0; s < m; s++) {
                    const float *ts = tv + s * wn;
                    #pragma omp simd
                    for (int64_t j = 0; j < wn; j++) run[j] += (double)ts[j];
                    if (++in_run == CC_SUM_RUN) {
                        for (int64_t j = 0; j < wn; j++) acc[j] += run[j], run[j] = 0;
                        in_run = 0;
                    }
                }
            }
            fl_tensor_release(part); fl_tensor_release(pf); fl_tensor_release(b); fl_tensor_release(bt);
            fl_tensor_release(t);
        }
        fl_tensor_release(gpart);
        fl_tensor_release(gop);
    }
    if (st == FL_OK && cols_w) {
        st = fl_tensor_empty(&dw, FL_F32, 4, w->shape, FL_DEV_CPU);
        if (st == FL_OK) {
            float *d = fl_tensor_data(dw);
            for (int64_t j = 0; j < wn; j++) d[j] = (float)(in_run ? acc[j] + run[j] : acc[j]);
        }
    }
    free(acc);
    free(run);
    if (st == FL_OK && c->cl && dx && !dx_direct) {
        /* the columns' NCHW input gradient into a channels-last one, as the forward's result: torch's gradient of a
         * channels_last conv's input is channels_last, and the engine hands it on so (autograd.c node_takes_dense;
         * until stop 102 every gradient was made contiguous there) */
        fl_tensor *dl = NULL;
        st = nhwc_of(&dl, dx, FL_F32);
        fl_tensor_release(dx);
        dx = dl;
    }
    fl_tensor_release(hg); fl_tensor_release(hd); fl_tensor_release(xc); fl_tensor_release(aw); fl_tensor_release(at);
    fl_tensor_release(cols);
    if (st != FL_OK) { fl_tensor_release(dx); fl_tensor_release(dw); fl_tensor_release(db); return st; }
    gin[0] = dx;
    gin[1] = dw;
    if (n->ninputs > 2) gin[2] = db;
    else fl_tensor_release(db);
    return FL_OK;
}
