/* nn.c — differentiable NN ops over the devices' NN kernels (core/device.h; the CPU's are cpu/cpu_nn.h):
 * checks, fp32 contiguous operands on the input's device, output allocation and autograd nodes (what
 * each backward needs is saved on the node). */
#include "nn.h"
#include "autograd.h"
#include "ops_raw.h"
#include "device.h"
#include "profiler.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE(buf, t) fl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* An fp32 contiguous version of t on its device (t itself, retained, when it already is one). */
static fl_status f32c(fl_tensor **out, const fl_tensor *t, const char *op, const char *what) {
    *out = NULL;
    if (fl_format(t->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "%s: %s is an %s tensor; dequantize it first (e.g. x:dequantize())", op, what, fl_format(t->dtype)->name);
    if (t->dtype == FL_F32 && fl_tensor_is_contiguous(t)) { *out = fl_tensor_retain((fl_tensor *)t); return FL_OK; }
    return fl_tensor_to(out, t, FL_F32);
}

/* The device of t and the entry `fn` of it (NULL: the device has none). */
static fl_status nn_device(const fl_tensor *t, const void *(*pick)(const fl_device *), const char *op,
                           const fl_device **dev) {
    *dev = fl_device_get(t->device);
    if (!*dev) return FL_ERR(FL_EDEVICE, "%s: device %s is not available", op, fl_device_name(t->device));
    if (!pick(*dev)) return FL_ERR(FL_EUNSUPPORTED, "%s is not supported on %s", op, (*dev)->name);
    return FL_OK;
}
#define NN_DEVICE(t, field, op, dev) nn_device(t, pick_##field, op, dev)
#define PICK(field) static const void *pick_##field(const fl_device *d) { return (const void *)d->field; }
PICK(act_fwd) PICK(softmax_fwd) PICK(cross_entropy_fwd) PICK(mse_fwd) PICK(layernorm_fwd) PICK(embedding_fwd)
PICK(dropout_fwd) PICK(sdpa_fwd) PICK(chnorm_fwd)

/* Every tensor of one op on one device: the error names the op and both devices. */
static fl_status same_device(const char *op, int n, const fl_tensor *const *ts) {
    for (int i = 1; i < n; i++)
        if (ts[i] && ts[i]->device != ts[0]->device)
            return FL_ERR(FL_EINVAL, "%s: arguments are on different devices (%s and %s); move them to one device",
                          op, fl_device_name(ts[0]->device), fl_device_name(ts[i]->device));
    return FL_OK;
}

/* The device of a tensor that an op already validated (backward functions). */
static const fl_device *DEV(const fl_tensor *t) { return fl_device_get(t->device); }

static float *F(const fl_tensor *t) { return (float *)fl_tensor_data(t); }

static int64_t last_dim(const fl_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* Attach a node with inputs ins to *out when grad is needed; *np NULL when not recorded. On failure
 * releases *out. */
static fl_status maybe_record(fl_tensor **out, fl_node **np, const char *name, fl_backward_fn fn, int n,
                              const fl_tensor *const *ins) {
    *np = NULL;
    return fl_any_requires_grad(n, ins) ? fl_autograd_record(out, np, name, fn, n, ins) : FL_OK;
}

/* A new fp32 tensor shaped like `like`, on its device; the gradient buffers of backward functions. */
static fl_status new_like(fl_tensor **out, const fl_tensor *like, bool zero) {
    return zero ? fl_tensor_zeros(out, FL_F32, like->ndim, like->shape, like->device)
                : fl_tensor_empty(out, FL_F32, like->ndim, like->shape, like->device);
}

/* A new n-element 1-D fp32 tensor on t's device (zeroed when asked). */
static fl_status new_vec(fl_tensor **out, const fl_tensor *t, int64_t n, bool zero) {
    return zero ? fl_tensor_zeros(out, FL_F32, 1, &n, t->device) : fl_tensor_empty(out, FL_F32, 1, &n, t->device);
}

/* Release a freshly made result on failure. */
static fl_status drop_on_error(fl_status st, fl_tensor **out) {
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* *t (a kernel's contiguous result or input gradient) replaced by its channels_last copy where cl: the norms' layout
 * of a channels_last input, as torch's (stop 103: they allocate in the input's suggest_memory_format), for a device
 * without the NHWC kernels */
static fl_status to_cl(fl_tensor **t, bool cl) {
    return cl && *t ? fl_tensor_channels_last_(t) : FL_OK;
}

/* t's values as fp32 in NHWC memory seen as [N, C, H, W] (fl_tensor_channels_last's strides): t itself (retained)
 * where it is that already, else one copy (stop 104: the NHWC kernels' operands) */
static fl_status f32cl(fl_tensor **out, const fl_tensor *t, const char *op, const char *what) {
    *out = NULL;
    if (fl_format(t->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "%s: %s is an %s tensor; dequantize it first (e.g. x:dequantize())", op, what, fl_format(t->dtype)->name);
    fl_tensor *c = NULL;
    FL_TRY(fl_tensor_channels_last(&c, t));
    if (c->dtype == FL_F32) { *out = c; return FL_OK; }
    fl_status st = fl_tensor_copy_like(out, c, FL_F32);   /* (c dense: its NHWC strides kept) */
    fl_tensor_release(c);
    return st;
}

/* ---- activations -------------------------------------------------------------------------- */

/* dy·f'(x) for a gradient of one element expanded over x (a whole sum's or mean's, which the engine passes on as it
 * is: autograd.c accumulate_node), on the host: the device's act_bwd over pieces of x with dy a buffer of that one
 * value, the bits of the same call on the filled gradient (each element's own), without its pass over memory. */
static fl_status act_bwd_broadcast(fl_act kind, const fl_tensor *xs, const fl_tensor *g, fl_tensor *dx) {
    enum { PIECE = 1 << 16 };   /* 256 KiB of dy: in L2, and each call wide enough for the device's threads */
    const int64_t n = fl_tensor_numel(xs), m = n < PIECE ? n : PIECE;
    const float v = m ? *F(g) : 0.0f;
    float *dy = malloc((size_t)(m ? m : 1) * sizeof *dy);
    if (!dy) return FL_ERR(FL_ENOMEM, "activation backward: out of memory for a %lld-float gradient piece", (long long)m);
    for (int64_t i = 0; i < m; i++) dy[i] = v;
    const bool low = xs->dtype == FL_BF16;
    fl_status st = FL_OK;
    for (int64_t i0 = 0; i0 < n && st == FL_OK; i0 += PIECE) {
        const int64_t len = n - i0 < PIECE ? n - i0 : PIECE;
        st = low ? DEV(xs)->act_bwd_bf16(kind, (const uint16_t *)fl_tensor_data(xs) + i0, dy, F(dx) + i0, len)
                 : DEV(xs)->act_bwd(kind, F(xs) + i0, dy, F(dx) + i0, len);
    }
    free(dy);
    return st;
}

/* saved[0]: GELU's and SiLU's input as it came (a bf16 one in bf16: its fp32 copy is made again here, the same bits, where the
 * node kept it beside the input it holds anyway); ReLU's output, as torch's (its backward passes the gradient where
 * !(v <= 0), which is the same test on the output as on the input: relu keeps positives and NaN, and makes every
 * other value 0), so the input may be written after the forward, and a bf16 input's fp32 copy is not kept. */
static bool same_strides(const fl_tensor *a, const fl_tensor *b) {
    return memcmp(a->stride, b->stride, sizeof a->stride[0] * (size_t)a->ndim) == 0;
}

/* t with lay's strides (lay dense, of t's shape): t itself where it has them, else a copy in t's dtype */
static fl_status in_layout(fl_tensor **out, const fl_tensor *t, const fl_tensor *lay) {
    if (same_strides(t, lay)) { *out = fl_tensor_retain((fl_tensor *)t); return FL_OK; }
    FL_TRY(fl_tensor_empty_like(out, lay, t->dtype));
    fl_status st = fl_tensor_copy_(*out, t);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* act_bwd where the input's gradient takes the strides of lay, a dense tensor that is not contiguous (torch's
 * threshold_backward orders its dims by the saved output, gelu's and silu's backward by the gradient, then the saved
 * input): xs and g (unless expanded: one element) read in lay's memory order as 1-D views, a copy of either where its
 * strides differ. Since stop 102; before, xs was read into a contiguous copy and the gradient was contiguous. */
static fl_status act_bwd_dense(fl_act kind, const fl_tensor *xs, const fl_tensor *g, bool expanded,
                               const fl_tensor *lay, fl_tensor **gin) {
    fl_tensor *xl = NULL, *gl = NULL, *xv = NULL, *x = NULL, *gv = NULL, *dv = NULL;
    const char *op = kind == FL_ACT_RELU ? "relu backward" : kind == FL_ACT_SILU ? "silu backward" : "gelu backward";
    fl_status st = in_layout(&xl, xs, lay);
    if (st == FL_OK) st = fl_tensor_flat(&xv, xl);
    /* a bf16 one read as it is where the device can (not for relu, whose saved output is read in fp32, as below) */
    const bool low = st == FL_OK && xs->dtype == FL_BF16 && kind != FL_ACT_RELU && DEV(xs)->act_bwd_bf16;
    if (st == FL_OK) st = low ? (x = fl_tensor_retain(xv), FL_OK) : f32c(&x, xv, op, "input");
    if (st == FL_OK) st = fl_tensor_empty_like(&gin[0], lay, FL_F32);
    if (st == FL_OK) st = fl_tensor_flat(&dv, gin[0]);
    if (st == FL_OK && expanded) st = act_bwd_broadcast(kind, x, g, dv);
    else if (st == FL_OK) st = in_layout(&gl, g, lay);
    if (st == FL_OK && !expanded) st = fl_tensor_flat(&gv, gl);
    if (st == FL_OK && !expanded)
        st = low ? DEV(xs)->act_bwd_bf16(kind, fl_tensor_data(x), F(gv), F(dv), fl_tensor_numel(x))
                 : DEV(xs)->act_bwd(kind, F(x), F(gv), F(dv), fl_tensor_numel(x));
    fl_tensor_release(xl); fl_tensor_release(gl); fl_tensor_release(xv); fl_tensor_release(x);
    fl_tensor_release(gv); fl_tensor_release(dv);
    if (st != FL_OK) { fl_tensor_release(gin[0]); gin[0] = NULL; }
    return st;
}

static fl_status act_bwd_any(fl_act kind, const fl_tensor *xs, const fl_tensor *g, fl_tensor **gin);

/* g one element expanded over its shape (a whole sum's or mean's gradient: every stride 0 where the size is not 1) */
static bool expanded_one(const fl_tensor *g) {
    for (int i = 0; i < g->ndim; i++) if (g->stride[i] != 0 && g->shape[i] != 1) return false;
    return true;
}

static bool dense_nc(const fl_tensor *t) { return !fl_tensor_is_contiguous(t) && fl_tensor_is_dense(t); }

static fl_status act_bwd(fl_node *n, const fl_tensor *g0, fl_tensor **gin) {
    const fl_tensor *xs = n->saved[0];
    const fl_act kind = (fl_act)n->iargs[0];
    const bool expanded = !fl_tensor_is_contiguous(g0) && expanded_one(g0);
    /* the layout torch's gives the input's gradient: relu's the saved output's (threshold_backward's first operand),
     * gelu's and silu's the gradient's where it orders the dims (not expanded), else the saved input's */
    const fl_tensor *lay = kind == FL_ACT_RELU || expanded ? xs : g0;
    if (dense_nc(lay) && fl_shape_equal(lay->ndim, lay->shape, xs->ndim, xs->shape))
        return act_bwd_dense(kind, xs, g0, expanded, lay, gin);
    /* a contiguous result: a dense gradient (the engine hands dense ones on: autograd.c node_takes_dense) read
     * contiguous, as every gradient was before stop 102 */
    fl_tensor *gc = NULL;
    if (!expanded && !fl_tensor_is_contiguous(g0)) FL_TRY(fl_tensor_contiguous(&gc, g0));
    fl_status sc = act_bwd_any(kind, xs, gc ? gc : g0, gin);
    fl_tensor_release(gc);
    return sc;
}

static fl_status act_bwd_any(fl_act kind, const fl_tensor *xs, const fl_tensor *g, fl_tensor **gin) {
    if (!fl_tensor_is_contiguous(g)) {   /* expanded (accumulate_node: fp32 on the host) */
        const bool low = xs->dtype == FL_BF16 && kind != FL_ACT_RELU && DEV(xs)->act_bwd_bf16 && fl_tensor_is_contiguous(xs);
        fl_tensor *x = NULL;
        fl_status st = low ? (x = fl_tensor_retain((fl_tensor *)xs), FL_OK)
                           : f32c(&x, xs, kind == FL_ACT_SILU ? "silu backward" : "gelu backward", "input");
        if (st == FL_OK) st = new_like(&gin[0], x, false);
        if (st == FL_OK) st = act_bwd_broadcast(kind, x, g, gin[0]);
        fl_tensor_release(x);
        return st;
    }
    /* a contiguous bf16 input read as it is where the device can (its fp32 copy is not made; the same bits) */
    if (xs->dtype == FL_BF16 && kind != FL_ACT_RELU && DEV(xs)->act_bwd_bf16 && fl_tensor_is_contiguous(xs)) {
        FL_TRY(new_like(&gin[0], xs, false));
        return DEV(xs)->act_bwd_bf16(kind, fl_tensor_data(xs), F(g), F(gin[0]), fl_tensor_numel(xs));
    }
    fl_tensor *x;
    FL_TRY(f32c(&x, xs, kind == FL_ACT_SILU ? "silu backward" : "gelu backward", "input"));
    fl_status st = new_like(&gin[0], x, false);
    if (st == FL_OK) st = DEV(x)->act_bwd(kind, F(x), F(g), F(gin[0]), fl_tensor_numel(x));
    fl_tensor_release(x);
    return st;
}

static fl_status activation(fl_tensor **out, const fl_tensor *x, fl_act kind, const char *op) {
    *out = NULL;
    FL_PROF_SCOPE(op); FL_PROF_SHAPES(x);
    const fl_device *dev;
    FL_TRY(NN_DEVICE(x, act_fwd, op, &dev));
    fl_tensor *xc, *xv = NULL;
    /* a dense x that is not contiguous (channels_last, a permutation) is read in memory order as a 1-D view, and the
     * result takes its strides, as torch's TensorIterator gives them (stop 101); it was read through its strides into
     * a contiguous copy and a contiguous result (relu 3-4.5x the contiguous time) */
    if (!fl_tensor_is_contiguous(x) && fl_tensor_is_dense(x)) FL_TRY(fl_tensor_flat(&xv, x));
    const fl_tensor *xm = xv ? xv : x;
    /* a contiguous bf16 input read as it is where the device can (its fp32 copy is not made; the same bits) */
    const bool low = xm->dtype == FL_BF16 && dev->act_fwd_bf16 && fl_tensor_is_contiguous(xm);
    fl_status st = FL_OK;
    if (low) xc = fl_tensor_retain((fl_tensor *)xm);
    else st = f32c(&xc, xm, op, "input");
    fl_tensor_release(xv);
    if (st != FL_OK) return st;
    st = xv ? fl_tensor_empty_like(out, x, FL_F32) : new_like(out, xc, false);
    if (st == FL_OK && low)
        st = drop_on_error(dev->act_fwd_bf16(kind, fl_tensor_data(xc), F(*out), NULL, fl_tensor_numel(xc)), out);
    else if (st == FL_OK) st = drop_on_error(dev->act_fwd(kind, F(xc), F(*out), fl_tensor_numel(xc)), out);
    if (st == FL_OK) {
        fl_node *n;
        st = maybe_record(out, &n, kind == FL_ACT_RELU ? "ReluBackward" : kind == FL_ACT_SILU ? "SiluBackward"
                                   : "GeluBackward", act_bwd, 1, &x);
        if (st == FL_OK && n) {
            n->iargs[0] = kind;
            if (kind == FL_ACT_RELU) {   /* the input's values are not read: the node keeps only its shape */
                st = fl_node_save_detached(n, 0, *out);
                if (st == FL_OK) st = fl_node_input_stub(n, 0);
            } else {
                fl_node_save(n, 0, x);   /* torch's: the input itself (the node holds it as its input too) */
            }
            if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
        }
    }
    fl_tensor_release(xc);
    return st;
}

fl_status fl_relu(fl_tensor **out, const fl_tensor *x) { return activation(out, x, FL_ACT_RELU, "relu"); }
fl_status fl_gelu(fl_tensor **out, const fl_tensor *x, int approx) {
    *out = NULL;
    if (approx != 0 && approx != 1) return FL_ERR(FL_EINVAL, "gelu: approximate must be 0 (none) or 1 (tanh), got %d", approx);
    return activation(out, x, approx ? FL_ACT_GELU_TANH : FL_ACT_GELU, "gelu");
}
fl_status fl_silu(fl_tensor **out, const fl_tensor *x) { return activation(out, x, FL_ACT_SILU, "silu"); }

/* kind(x) of a bf16 x, rounded once to bf16, no node (fl_silu_bf16's and fl_relu_bf16's; the other kinds would go the
 * same way) */
static fl_status act_bf16(fl_tensor **out, const fl_tensor *x, fl_act kind) {
    static const char *const names[FL_ACT_COUNT] = { "relu", "gelu", "gelu", "silu", "sigmoid", "tanh" };
    *out = NULL;
    if ((unsigned)kind >= FL_ACT_COUNT) return FL_ERR(FL_EINVAL, "activation: unknown kind %d", (int)kind);
    const char *op = names[kind];
    FL_PROF_SCOPE(op); FL_PROF_SHAPES(x);
    if (x->dtype != FL_BF16)
        return FL_ERR(FL_EINVAL, "%s: the rounded form takes a bf16 input, got %s", op, fl_format(x->dtype)->name);
    if (fl_any_requires_grad(1, &x))
        return FL_ERR(FL_EINVAL, "%s: the rounded form records no gradient; x requires grad (use the fp32 form)", op);
    const fl_device *dev;
    FL_TRY(NN_DEVICE(x, act_fwd, op, &dev));
    fl_tensor *xc = NULL, *y = NULL;
    fl_status st = FL_OK;
    /* a dense x that is not contiguous in memory order, the result with its strides (activation above) */
    if (dev->act_fwd_bf16 && fl_tensor_is_dense(x)) {
        st = fl_tensor_empty_like(out, x, FL_BF16);
        if (st == FL_OK)
            st = drop_on_error(dev->act_fwd_bf16(kind, fl_tensor_data(x), NULL, fl_tensor_data(*out), fl_tensor_numel(x)),
                               out);
        return st;
    }
    /* the composite: widen, the fp32 kernel, round once */
    st = f32c(&xc, x, op, "input");
    if (st == FL_OK) st = new_like(&y, xc, false);
    if (st == FL_OK) st = dev->act_fwd(kind, F(xc), F(y), fl_tensor_numel(xc));
    if (st == FL_OK) st = fl_tensor_to(out, y, FL_BF16);
    fl_tensor_release(xc);
    fl_tensor_release(y);
    return st;
}
fl_status fl_silu_bf16(fl_tensor **out, const fl_tensor *x) { return act_bf16(out, x, FL_ACT_SILU); }
fl_status fl_relu_bf16(fl_tensor **out, const fl_tensor *x) { return act_bf16(out, x, FL_ACT_RELU); }

/* ---- softmax ------------------------------------------------------------------------------ */

static fl_status softmax_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *y = n->saved[0];
    FL_TRY(new_like(&gin[0], y, false));
    int64_t cols = last_dim(y), rows = cols ? fl_tensor_numel(y) / cols : 0;
    return DEV(y)->softmax_bwd(n->iargs[0] != 0, F(y), F(g), F(gin[0]), rows, cols);
}

static fl_status softmax_any(fl_tensor **out, const fl_tensor *x, int log) {
    const char *op = log ? "log_softmax" : "softmax";
    *out = NULL;
    FL_PROF_SCOPE(op); FL_PROF_SHAPES(x);
    const fl_device *dev;
    FL_TRY(NN_DEVICE(x, softmax_fwd, op, &dev));
    fl_tensor *xc;
    /* a contiguous bf16 input read as it is where the device can (its fp32 copy is not made; the same bits) */
    const bool low = x->dtype == FL_BF16 && dev->softmax_fwd_bf16 && fl_tensor_is_contiguous(x);
    if (low) xc = fl_tensor_retain((fl_tensor *)x);
    else FL_TRY(f32c(&xc, x, op, "input"));
    fl_status st = new_like(out, xc, false);
    int64_t cols = last_dim(xc), rows = cols ? fl_tensor_numel(xc) / cols : 0;
    if (st == FL_OK && low)
        st = drop_on_error(dev->softmax_fwd_bf16(log != 0, fl_tensor_data(xc), F(*out), rows, cols), out);
    else if (st == FL_OK) st = drop_on_error(dev->softmax_fwd(log != 0, F(xc), F(*out), rows, cols), out);
    if (st == FL_OK) {
        fl_node *n;
        st = maybe_record(out, &n, log ? "LogSoftmaxBackward" : "SoftmaxBackward", softmax_bwd, 1, &x);
        if (st == FL_OK && n) {   /* the backward reads the output only: the node keeps the input's shape alone */
            n->iargs[0] = log;
            st = fl_node_save_detached(n, 0, *out);
            if (st == FL_OK) st = fl_node_input_stub(n, 0);
            if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
        }
    }
    fl_tensor_release(xc);
    return st;
}
fl_status fl_softmax(fl_tensor **out, const fl_tensor *x) { return softmax_any(out, x, 0); }
fl_status fl_log_softmax(fl_tensor **out, const fl_tensor *x) { return softmax_any(out, x, 1); }

/* F.rms_norm over the last dim recording nothing: a contiguous fp32 x (and w [cols] or NULL) through the device's
 * rms_norm_fwd, the composite's bits in one pass; *out NULL (FL_OK) where the device has none, for the caller to
 * compose the ops. x or w requiring grad under grad mode is refused (the composite records the graph). */
fl_status fl_rms_norm_fwd(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, double eps) {
    char sx[200], sw[200];
    *out = NULL;
    FL_PROF_SCOPE("rms_norm"); FL_PROF_SHAPES(x);
    if (x->dtype != FL_F32 || (w && w->dtype != FL_F32))
        return FL_ERR(FL_EINVAL, "rms_norm: the one-pass form takes fp32 tensors, got %s%s%s",
                      fl_format(x->dtype)->name, w ? " and " : "", w ? fl_format(w->dtype)->name : "");
    if (x->ndim == 0) return FL_ERR(FL_EINVAL, "rms_norm: input is 0-d; it normalizes over the last dimension");
    if (w && !fl_shape_equal(w->ndim, w->shape, 1, &x->shape[x->ndim - 1]))
        return FL_ERR(FL_EINVAL, "rms_norm: weight %s must be [%lld] for input %s", SHAPE(sw, w),
                      (long long)x->shape[x->ndim - 1], SHAPE(sx, x));
    if (!(eps >= 0 && eps < INFINITY))
        return FL_ERR(FL_EINVAL, "rms_norm: eps must be a finite number >= 0, got %g", eps);
    const fl_tensor *ts[2] = { x, w };
    if (fl_any_requires_grad(w ? 2 : 1, ts))
        return FL_ERR(FL_EINVAL, "rms_norm: the one-pass form records no gradient; an input requires grad");
    if (w) FL_TRY(same_device("rms_norm", 2, ts));
    if (!DEV(x)->rms_norm_fwd) return FL_OK;
    fl_tensor *xc = NULL, *wc = NULL;
    FL_TRY(f32c(&xc, x, "rms_norm", "input"));
    fl_status st = w ? f32c(&wc, w, "rms_norm", "weight") : FL_OK;
    const int64_t cols = last_dim(xc), rows = cols ? fl_tensor_numel(xc) / cols : 0;
    if (st == FL_OK) st = new_like(out, xc, false);
    if (st == FL_OK)
        st = drop_on_error(DEV(x)->rms_norm_fwd(F(xc), wc ? F(wc) : NULL, F(*out), rows, cols, eps), out);
    fl_tensor_release(xc);
    fl_tensor_release(wc);
    return st;
}

/* [outer, size, inner] of t around its dim d */
static void around_dim(const fl_tensor *t, int d, int64_t *outer, int64_t *size, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < d; i++) *outer *= t->shape[i];
    for (int i = d + 1; i < t->ndim; i++) *inner *= t->shape[i];
    *size = t->shape[d];
}

static fl_status softmax_dim_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *y = n->saved[0];
    int64_t outer, size, inner;
    around_dim(y, (int)n->iargs[1], &outer, &size, &inner);
    FL_TRY(new_like(&gin[0], y, false));
    return DEV(y)->softmax_dim_bwd(n->iargs[0] != 0, F(y), F(g), F(gin[0]), outer, size, inner);
}

/* Softmax over dim (0-based) of x: the last dim's kernel. Another dim through the device's columns kernels forward and
 * backward: a contiguous fp32 result in x's layout, as torch's, with the bits of the transposed route (x transposed
 * last and back around the last dim's kernel), whose backward made two transposed copies and the gradient's
 * accumulation from a view (x [4096, 1024] along dim 1, forward + backward: 1.5-1.9× torch's). With nothing to record
 * as well: stop 96 kept the transposed route there (8-10 ms against the columns' 11-14, one thread), whose result is a
 * transposed view, so x:softmax(1):view(...) was refused under no_grad and taken under grad mode (torch's result is
 * contiguous in both); that route made contiguous costs more than the columns (15.8 ms against 13.4). Where the device
 * has no columns kernels (CUDA), the transposed route stays, its result a view in x's layout. */
fl_status fl_softmax_dim(fl_tensor **out, const fl_tensor *x, int dim, int log) {
    const char *op = log ? "log_softmax" : "softmax";
    *out = NULL;
    if (x->ndim == 0) return FL_ERR(FL_EINVAL, "%s: expected a tensor with at least 1 dim, got a 0-d tensor", op);
    if (dim < 0 || dim >= x->ndim) return FL_ERR(FL_EINVAL, "%s: dim %d out of range for a %d-d tensor", op, dim + 1,
                                                 x->ndim);
    if (dim == x->ndim - 1) return softmax_any(out, x, log);
    const fl_device *dev;
    FL_TRY(NN_DEVICE(x, softmax_fwd, op, &dev));
    fl_status st;
    if (!dev->softmax_dim_fwd || !dev->softmax_dim_bwd) {
        fl_tensor *t1 = NULL, *t2 = NULL;
        st = fl_transpose(&t1, x, dim, -1);
        if (st == FL_OK) st = softmax_any(&t2, t1, log);
        if (st == FL_OK) st = fl_transpose(out, t2, dim, -1);
        fl_tensor_release(t1);
        fl_tensor_release(t2);
        return st;
    }
    FL_PROF_SCOPE(op); FL_PROF_SHAPES(x);
    fl_tensor *xc;
    FL_TRY(f32c(&xc, x, op, "input"));
    int64_t outer, size, inner;
    around_dim(xc, dim, &outer, &size, &inner);
    st = new_like(out, xc, false);
    if (st == FL_OK) st = drop_on_error(dev->softmax_dim_fwd(log != 0, F(xc), F(*out), outer, size, inner), out);
    if (st == FL_OK) {
        fl_node *n;
        st = maybe_record(out, &n, log ? "LogSoftmaxBackward" : "SoftmaxBackward", softmax_dim_bwd, 1, &x);
        if (st == FL_OK && n) {   /* the output only, as the last dim's node */
            n->iargs[0] = log;
            n->iargs[1] = dim;
            st = fl_node_save_detached(n, 0, *out);
            if (st == FL_OK) st = fl_node_input_stub(n, 0);
            if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
        }
    }
    fl_tensor_release(xc);
    return st;
}

/* ---- losses ------------------------------------------------------------------------------- */

static fl_status ce_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *lg = n->saved[0], *tg = n->saved[1];
    float dloss;
    FL_TRY(fl_tensor_read_f32(g, &dloss));
    fl_tensor *d;
    FL_TRY(new_like(&d, lg, false));
    int64_t cols = last_dim(lg), rows = cols ? fl_tensor_numel(lg) / cols : 0;
    fl_status st = DEV(lg)->cross_entropy_bwd(F(lg), F(tg), rows, cols, n->iargs[0], (float)n->dargs[0], dloss, F(d));
    if (st != FL_OK) { fl_tensor_release(d); return st; }
    gin[0] = d;
    return FL_OK;
}

fl_status fl_cross_entropy(fl_tensor **out, const fl_tensor *logits, const fl_tensor *target,
                           int64_t ignore_index, double label_smoothing) {
    char sl[200], stg[200];
    *out = NULL;
    FL_PROF_SCOPE("cross_entropy"); FL_PROF_SHAPES(logits, target);
    if (logits->ndim < 1)
        return FL_ERR(FL_EINVAL, "cross_entropy: logits must be [N, C] (or [..., C]), got a 0-d tensor");
    if (!fl_shape_equal(target->ndim, target->shape, logits->ndim - 1, logits->shape))
        return FL_ERR(FL_EINVAL, "cross_entropy: target %s does not match logits %s (expected the logits' shape without the class dim)",
                      SHAPE(stg, target), SHAPE(sl, logits));
    if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
        return FL_ERR(FL_EINVAL, "cross_entropy: label_smoothing must be in [0, 1], got %g", label_smoothing);
    if (target->requires_grad && fl_grad_enabled())
        return FL_ERR(FL_EINVAL, "cross_entropy: target holds class indices and cannot require grad");
    const fl_device *dev;
    FL_TRY(same_device("cross_entropy", 2, (const fl_tensor *[]){ logits, target }));
    FL_TRY(NN_DEVICE(logits, cross_entropy_fwd, "cross_entropy", &dev));
    fl_tensor *lc = NULL, *tc = NULL;
    FL_TRY(f32c(&lc, logits, "cross_entropy", "logits"));
    fl_status st = f32c(&tc, target, "cross_entropy", "target");
    int64_t cols = last_dim(lc), rows = cols ? fl_tensor_numel(lc) / cols : 0;
    double loss = 0;
    int64_t count = 0;
    if (st == FL_OK) st = dev->cross_entropy_fwd(F(lc), F(tc), rows, cols, ignore_index, (float)label_smoothing, &loss, &count);
    if (st == FL_OK) st = fl_tensor_full(out, FL_F32, 0, NULL, loss, lc->device);
    if (st == FL_OK) {
        fl_node *n;
        st = maybe_record(out, &n, "CrossEntropyBackward", ce_bwd, 1, &logits);
        if (st == FL_OK && n) {
            fl_node_save(n, 0, lc);
            fl_node_save(n, 1, tc);
            n->iargs[0] = ignore_index;
            n->dargs[0] = label_smoothing;
        }
    }
    fl_tensor_release(lc);
    fl_tensor_release(tc);
    return st;
}

static fl_status mse_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *x = n->saved[0], *y = n->saved[1];
    float dl;
    FL_TRY(fl_tensor_read_f32(g, &dl));
    int64_t m = fl_tensor_numel(x);
    /* in double, as torch's 2/numel · grad: 2·dl in fp32 is inf from dl > 1.7e38 (a GradScaler's scale of 2^127,
     * whose gradients torch keeps finite, and an inf here skipped the step) */
    float f = m ? (float)(2.0 * (double)dl / (double)m) : 0.0f;
    for (int i = 0; i < 2; i++) {
        if (!fl_node_input_needs_grad(n, i)) continue;
        FL_TRY(new_like(&gin[i], x, false));
        FL_TRY(DEV(x)->mse_bwd(F(x), F(y), F(gin[i]), m, i == 0 ? f : -f));
    }
    return FL_OK;
}

fl_status fl_mse_loss(fl_tensor **out, const fl_tensor *x, const fl_tensor *y) {
    char a[200], b[200];
    *out = NULL;
    FL_PROF_SCOPE("mse_loss"); FL_PROF_SHAPES(x, y);
    if (!fl_shape_equal(x->ndim, x->shape, y->ndim, y->shape))
        return FL_ERR(FL_EINVAL, "mse_loss: input %s and target %s must have the same shape", SHAPE(a, x), SHAPE(b, y));
    const fl_device *dev;
    FL_TRY(same_device("mse_loss", 2, (const fl_tensor *[]){ x, y }));
    FL_TRY(NN_DEVICE(x, mse_fwd, "mse_loss", &dev));
    fl_tensor *xc = NULL, *yc = NULL;
    FL_TRY(f32c(&xc, x, "mse_loss", "input"));
    fl_status st = f32c(&yc, y, "mse_loss", "target");
    if (st == FL_OK) {
        int64_t m = fl_tensor_numel(xc);
        double s = 0;
        st = dev->mse_fwd(F(xc), F(yc), m, &s);
        if (st == FL_OK) st = fl_tensor_full(out, FL_F32, 0, NULL, m ? s / (double)m : NAN, xc->device);
    }
    if (st == FL_OK) {
        const fl_tensor *ins[2] = { x, y };
        fl_node *n;
        st = maybe_record(out, &n, "MseLossBackward", mse_bwd, 2, ins);
        if (st == FL_OK && n) { fl_node_save(n, 0, xc); fl_node_save(n, 1, yc); }
    }
    fl_tensor_release(xc);
    fl_tensor_release(yc);
    return st;
}

/* ---- layer norm --------------------------------------------------------------------------- */

/* Where the input's gradient already has a sum in the engine (a residual stream: the block's other branch ran
 * first), dx is added into it in LayerNorm's pass (the device's layernorm_bwd_add, fl_autograd_grad_sum) instead of
 * written and then added by the engine: the same bits, one pass over the sum fewer. */
static fl_status ln_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *x = n->saved[0], *w = n->saved[1], *mean = n->saved[2], *rstd = n->saved[3];
    int64_t cols = last_dim(x), rows = cols ? fl_tensor_numel(x) / cols : 0;
    fl_tensor *dx = NULL, *dw = NULL, *db = NULL;
    fl_tensor *sum = DEV(x)->layernorm_bwd_add ? fl_autograd_grad_sum(n, 0) : NULL;
    fl_status st = sum ? FL_OK : new_like(&dx, x, false);
    if (st == FL_OK && fl_node_input_needs_grad(n, 1)) st = new_vec(&dw, x, cols, true);
    if (st == FL_OK && fl_node_input_needs_grad(n, 2)) st = new_vec(&db, x, cols, true);
    if (st == FL_OK && sum)
        st = DEV(x)->layernorm_bwd_add(F(x), w ? F(w) : NULL, F(mean), F(rstd), F(g), F(sum), dw ? F(dw) : NULL,
                                       db ? F(db) : NULL, rows, cols);
    else if (st == FL_OK)
        st = DEV(x)->layernorm_bwd(F(x), w ? F(w) : NULL, F(mean), F(rstd), F(g), F(dx), dw ? F(dw) : NULL,
                                   db ? F(db) : NULL, rows, cols);
    if (st != FL_OK) { fl_tensor_release(dx); fl_tensor_release(dw); fl_tensor_release(db); return st; }
    if (dx && fl_node_input_needs_grad(n, 0)) gin[0] = dx; else fl_tensor_release(dx);
    gin[1] = dw;
    gin[2] = db;
    return FL_OK;
}

/* layer_norm's argument checks; *dev its device. */
static fl_status ln_check(const fl_tensor *x, const fl_tensor *w, const fl_tensor *b, double eps, const fl_device **dev) {
    char a[200], c[200];
    if (x->ndim < 1) return FL_ERR(FL_EINVAL, "layer_norm: input must have at least 1 dim, got a 0-d tensor");
    int64_t cols = last_dim(x);
    const fl_tensor *wb[2] = { w, b };
    for (int i = 0; i < 2; i++)
        if (wb[i] && (wb[i]->ndim != 1 || wb[i]->shape[0] != cols))
            return FL_ERR(FL_EINVAL, "layer_norm: %s %s does not match input %s (expected [%lld])", i ? "bias" : "weight",
                          SHAPE(a, wb[i]), SHAPE(c, x), (long long)cols);
    if (!(eps >= 0) || !isfinite(eps)) return FL_ERR(FL_EINVAL, "layer_norm: eps must be finite and >= 0, got %g", eps);
    FL_TRY(same_device("layer_norm", 3, (const fl_tensor *[]){ x, w, b }));
    return NN_DEVICE(x, layernorm_fwd, "layer_norm", dev);
}

/* The LayerNorm node on *out: backward reads x (fp32 contiguous xc), w and the saved row statistics. */
static fl_status ln_record(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                           const fl_tensor *xc, const fl_tensor *wc, const fl_tensor *mean, const fl_tensor *rstd) {
    const fl_tensor *ins[3] = { x, w, b };
    fl_node *n;
    FL_TRY(maybe_record(out, &n, "LayerNormBackward", ln_bwd, 3, ins));
    if (n) {
        fl_node_save(n, 0, xc);
        fl_node_save(n, 1, wc);
        fl_node_save(n, 2, mean);
        fl_node_save(n, 3, rstd);
    }
    return FL_OK;
}

fl_status fl_layer_norm(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b, double eps) {
    *out = NULL;
    FL_PROF_SCOPE("layer_norm"); FL_PROF_SHAPES(x, w, b);
    const fl_device *dev;
    FL_TRY(ln_check(x, w, b, eps, &dev));
    int64_t cols = last_dim(x);
    fl_tensor *xc = NULL, *wc = NULL, *bc = NULL, *mean = NULL, *rstd = NULL;
    int64_t rows = cols ? fl_tensor_numel(x) / cols : 0;
    fl_status st = f32c(&xc, x, "layer_norm", "input");
    if (st == FL_OK && w) st = f32c(&wc, w, "layer_norm", "weight");
    if (st == FL_OK && b) st = f32c(&bc, b, "layer_norm", "bias");
    if (st == FL_OK) st = new_vec(&mean, x, rows, false);
    if (st == FL_OK) st = new_vec(&rstd, x, rows, false);
    if (st == FL_OK) st = new_like(out, xc, false);
    if (st == FL_OK)
        st = dev->layernorm_fwd(F(xc), wc ? F(wc) : NULL, bc ? F(bc) : NULL, F(*out), F(mean), F(rstd), rows, cols, (float)eps);
    if (st == FL_OK) st = ln_record(out, x, w, b, xc, wc, mean, rstd);
    fl_tensor_release(xc); fl_tensor_release(wc); fl_tensor_release(bc);
    fl_tensor_release(mean); fl_tensor_release(rstd);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* layer_norm(x + r) with no node, the sum never in memory where the device can (add_layernorm_fwd: x and r fp32 of
 * one shape); else the composite, fl_binary's add then fl_layer_norm. */
fl_status fl_add_layer_norm(fl_tensor **out, const fl_tensor *x, const fl_tensor *r, const fl_tensor *w,
                            const fl_tensor *b, double eps) {
    char a[200], c[200];
    *out = NULL;
    const fl_tensor *ins[4] = { x, r, w, b };
    if (fl_any_requires_grad(4, ins))
        return FL_ERR(FL_EINVAL, "add_layer_norm: records no gradient; an input requires grad (use add, then layer_norm)");
    if (!fl_shape_equal(x->ndim, x->shape, r->ndim, r->shape))
        return FL_ERR(FL_EINVAL, "add_layer_norm: x %s and r %s must have one shape", SHAPE(a, x), SHAPE(c, r));
    const fl_device *dev;
    FL_TRY(ln_check(x, w, b, eps, &dev));
    FL_TRY(same_device("add_layer_norm", 2, (const fl_tensor *[]){ x, r }));
    const int64_t cols = last_dim(x), rows = cols ? fl_tensor_numel(x) / cols : 0;
    if (dev->add_layernorm_fwd && x->dtype == FL_F32 && r->dtype == FL_F32 && fl_tensor_is_contiguous(x) &&
        fl_tensor_is_contiguous(r) && rows > 0 && cols > 0) {
        FL_PROF_SCOPE("add_layer_norm"); FL_PROF_SHAPES(x, r, w, b);
        fl_tensor *wc = NULL, *bc = NULL, *mean = NULL, *rstd = NULL;
        fl_status st = FL_OK;
        if (w) st = f32c(&wc, w, "layer_norm", "weight");
        if (st == FL_OK && b) st = f32c(&bc, b, "layer_norm", "bias");
        if (st == FL_OK) st = new_vec(&mean, x, rows, false);
        if (st == FL_OK) st = new_vec(&rstd, x, rows, false);
        if (st == FL_OK) st = new_like(out, x, false);
        if (st == FL_OK)
            st = dev->add_layernorm_fwd(F(x), F(r), wc ? F(wc) : NULL, bc ? F(bc) : NULL, F(*out), F(mean), F(rstd), rows,
                                        cols, (float)eps);
        fl_tensor_release(wc); fl_tensor_release(bc); fl_tensor_release(mean); fl_tensor_release(rstd);
        if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
        return st;
    }
    fl_tensor *s = NULL;
    fl_status st = fl_binary(&s, FL_OP_ADD, x, r);
    if (st == FL_OK) st = fl_layer_norm(out, s, w, b, eps);
    fl_tensor_release(s);
    return st;
}

/* ---- group and batch norms ---------------------------------------------------------------- */

/* x [N, C, ...] as [N, C, P]: its N, C and P. */
static void ncp(const fl_tensor *x, int64_t *N, int64_t *C, int64_t *P) {
    *N = x->shape[0];
    *C = x->shape[1];
    *P = 1;
    for (int d = 2; d < x->ndim; d++) *P *= x->shape[d];
}

/* (g: any dense layout, autograd.c's node_takes_dense; read as the kernel's x is, NHWC or [N, C, P]) */
static fl_status chnorm_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *x = n->saved[0], *w = n->saved[1], *mean = n->saved[2], *rstd = n->saved[3];
    const bool nhwc = n->iargs[1] != 0;   /* x saved NHWC, the device's chnorm_bwd_cl */
    int64_t N, C, P;
    ncp(x, &N, &C, &P);
    fl_tensor *dx = NULL, *dw = NULL, *db = NULL, *gc = NULL;
    const char *op = n->dargs[0] > 0 ? "group_norm backward" : "batch_norm backward";
    fl_status st = nhwc ? f32cl(&gc, g, op, "gradient") : f32c(&gc, g, op, "gradient");
    if (st == FL_OK && fl_node_input_needs_grad(n, 0))
        st = nhwc ? fl_tensor_empty_like(&dx, x, FL_F32) : new_like(&dx, x, false);
    if (st == FL_OK && fl_node_input_needs_grad(n, 1)) st = new_vec(&dw, x, C, true);
    if (st == FL_OK && fl_node_input_needs_grad(n, 2)) st = new_vec(&db, x, C, true);
    if (st == FL_OK)
        st = (nhwc ? DEV(x)->chnorm_bwd_cl : DEV(x)->chnorm_bwd)(F(x), w ? F(w) : NULL, F(mean), F(rstd), F(gc),
                                                                 dx ? F(dx) : NULL, dw ? F(dw) : NULL,
                                                                 db ? F(db) : NULL, N, C, P, (int64_t)n->dargs[0]);
    fl_tensor_release(gc);
    /* a channels_last input's gradient: channels_last (made so by the NHWC kernel, else copied) */
    if (st == FL_OK && !nhwc) st = to_cl(&dx, n->iargs[0] != 0);
    if (st != FL_OK) { fl_tensor_release(dx); fl_tensor_release(dw); fl_tensor_release(db); return st; }
    gin[0] = dx;
    gin[1] = dw;
    gin[2] = db;
    return FL_OK;
}

fl_status fl_channel_norm(fl_tensor **out, fl_tensor **mean_out, fl_tensor **var_out, const fl_tensor *x,
                          const fl_tensor *w, const fl_tensor *b, int64_t groups, double eps) {
    *out = NULL;
    if (mean_out) *mean_out = NULL;
    if (var_out) *var_out = NULL;
    const char *op = groups > 0 ? "group_norm" : "batch_norm";
    FL_PROF_SCOPE("channel_norm"); FL_PROF_SHAPES(x, w, b);
    char a[200], c[200];
    if (x->ndim < 2) return FL_ERR(FL_EINVAL, "%s: expected an input [N, C, ...], got %s", op, SHAPE(a, x));
    int64_t N, C, P;
    ncp(x, &N, &C, &P);
    if (groups < 0 || (groups > 0 && (groups > C || C % groups != 0)))
        return FL_ERR(FL_EINVAL, "%s: groups must be 0 (batch statistics) or a positive divisor of the channels (%lld), "
                      "got %lld", op, (long long)C, (long long)groups);
    const fl_tensor *wb[2] = { w, b };
    for (int i = 0; i < 2; i++)
        if (wb[i] && (wb[i]->ndim != 1 || wb[i]->shape[0] != C))
            return FL_ERR(FL_EINVAL, "%s: %s %s does not match input %s (expected [%lld])", op, i ? "bias" : "weight",
                          SHAPE(a, wb[i]), SHAPE(c, x), (long long)C);
    if (!(eps >= 0) || !isfinite(eps)) return FL_ERR(FL_EINVAL, "%s: eps must be finite and >= 0, got %g", op, eps);
    FL_TRY(same_device(op, 3, (const fl_tensor *[]){ x, w, b }));
    const fl_device *dev;
    FL_TRY(NN_DEVICE(x, chnorm_fwd, op, &dev));
    if (!dev->chnorm_bwd) return FL_ERR(FL_EUNSUPPORTED, "%s's backward is not supported on %s", op, dev->name);
    const int64_t ns = groups > 0 ? N * groups : C;
    /* a channels_last x (torch's suggest_memory_format: the result's and dx's layout) is computed in its NHWC memory
     * where the device has the kernels (stop 104), else on a contiguous copy whose results are copied back */
    const bool cl = fl_tensor_is_channels_last(x), nhwc = cl && dev->chnorm_fwd_cl && dev->chnorm_bwd_cl;
    fl_tensor *xc = NULL, *wc = NULL, *bc = NULL, *mean = NULL, *rstd = NULL, *var = NULL;
    fl_status st = nhwc ? f32cl(&xc, x, op, "input") : f32c(&xc, x, op, "input");
    if (st == FL_OK && w) st = f32c(&wc, w, op, "weight");
    if (st == FL_OK && b) st = f32c(&bc, b, op, "bias");
    if (st == FL_OK) st = new_vec(&mean, x, ns, false);
    if (st == FL_OK) st = new_vec(&rstd, x, ns, false);
    if (st == FL_OK && var_out) st = new_vec(&var, x, ns, false);
    if (st == FL_OK) st = nhwc ? fl_tensor_empty_like(out, xc, FL_F32) : new_like(out, xc, false);
    if (st == FL_OK)
        st = (nhwc ? dev->chnorm_fwd_cl : dev->chnorm_fwd)(F(xc), wc ? F(wc) : NULL, bc ? F(bc) : NULL, F(*out),
                                                           F(mean), F(rstd), var ? F(var) : NULL, N, C, P, groups,
                                                           (float)eps);
    if (st == FL_OK && !nhwc) st = to_cl(out, cl);
    fl_node *nd = NULL;
    const fl_tensor *ins[3] = { x, w, b };
    if (st == FL_OK) st = maybe_record(out, &nd, groups > 0 ? "GroupNormBackward" : "BatchNormBackward", chnorm_bwd, 3, ins);
    if (st == FL_OK && nd) {
        nd->dargs[0] = (double)groups;
        nd->iargs[0] = cl;
        nd->iargs[1] = nhwc;
        fl_node_save(nd, 0, xc);
        fl_node_save(nd, 1, wc);
        fl_node_save(nd, 2, mean);
        fl_node_save(nd, 3, rstd);
    }
    fl_tensor_release(xc); fl_tensor_release(wc); fl_tensor_release(bc); fl_tensor_release(rstd);
    if (st == FL_OK) {
        if (mean_out) *mean_out = mean; else fl_tensor_release(mean);
        if (var_out) *var_out = var;
        return FL_OK;
    }
    fl_tensor_release(mean); fl_tensor_release(var);
    fl_tensor_release(*out); *out = NULL;
    return st;
}

fl_status fl_batch_norm_eval(fl_tensor **out, const fl_tensor *x, const fl_tensor *mean, const fl_tensor *den,
                             const fl_tensor *w, const fl_tensor *b) {
    *out = NULL;
    FL_PROF_SCOPE("batch_norm"); FL_PROF_SHAPES(x, mean, den);
    char a[200], c[200];
    if (x->ndim < 2) return FL_ERR(FL_EINVAL, "batch_norm: expected an input [N, C, ...], got %s", SHAPE(a, x));
    if (!mean || !den) return FL_ERR(FL_EINVAL, "batch_norm: the eval kernel needs the mean and the denominator");
    int64_t N, C, P;
    ncp(x, &N, &C, &P);
    const fl_tensor *vs[4] = { mean, den, w, b };
    static const char *const names[4] = { "running mean", "denominator", "weight", "bias" };
    for (int i = 0; i < 4; i++)
        if (vs[i] && (vs[i]->ndim != 1 || vs[i]->shape[0] != C))
            return FL_ERR(FL_EINVAL, "batch_norm: %s %s does not match input %s (expected [%lld])", names[i],
                          SHAPE(a, vs[i]), SHAPE(c, x), (long long)C);
    const fl_tensor *all[5] = { x, mean, den, w, b };
    if (fl_any_requires_grad(5, all))
        return FL_ERR(FL_EINVAL, "batch_norm: the eval kernel records no gradient, and an argument requires grad");
    FL_TRY(same_device("batch_norm", 5, all));
    const fl_device *dev = fl_device_get(x->device);
    if (!dev) return FL_ERR(FL_EDEVICE, "batch_norm: device %s is not available", fl_device_name(x->device));
    if (!dev->chnorm_eval) return FL_ERR(FL_EUNSUPPORTED, "batch_norm's eval kernel is not supported on %s", dev->name);
    fl_tensor *t[5] = { NULL, NULL, NULL, NULL, NULL };
    fl_status st = FL_OK;
    const bool cl = fl_tensor_is_channels_last(x), nhwc = cl && dev->chnorm_eval_cl;   /* as fl_channel_norm's */
    for (int i = 0; i < 5 && st == FL_OK; i++)
        if (all[i]) st = (i == 0 && nhwc ? f32cl : f32c)(&t[i], all[i], "batch_norm", i ? names[i - 1] : "input");
    if (st == FL_OK) st = nhwc ? fl_tensor_empty_like(out, t[0], FL_F32) : new_like(out, t[0], false);
    if (st == FL_OK)
        st = drop_on_error((nhwc ? dev->chnorm_eval_cl : dev->chnorm_eval)(F(t[0]), F(t[1]), F(t[2]),
                                                                           t[3] ? F(t[3]) : NULL,
                                                                           t[4] ? F(t[4]) : NULL, F(*out), N, C, P),
                           out);
    if (st == FL_OK && !nhwc) st = drop_on_error(to_cl(out, cl), out);
    for (int i = 0; i < 5; i++) fl_tensor_release(t[i]);
    return st;
}

fl_status fl_layer_norm_fp8(fl_tensor **y, fl_tensor **q, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                            double eps, fl_dtype fmt, const float *scale, int margin, bool pow2) {
    *y = NULL;
    *q = NULL;
    FL_PROF_SCOPE("layer_norm"); FL_PROF_SHAPES(x, w, b);
    const fl_device *dev;
    FL_TRY(ln_check(x, w, b, eps, &dev));
    if (!dev->layernorm_quantize) return FL_ERR(FL_EUNSUPPORTED, "layer_norm with an FP8 cast is not supported on %s", dev->name);
    if (!fl_format(fmt)->is_fp8) return FL_ERR(FL_EINVAL, "layer_norm: the cast's format must be FP8, got %s", fl_format(fmt)->name);
    int64_t cols = last_dim(x), rows = cols ? fl_tensor_numel(x) / cols : 0;
    fl_tensor *xc = NULL, *wc = NULL, *bc = NULL, *mean = NULL, *rstd = NULL;
    fl_status st = f32c(&xc, x, "layer_norm", "input");
    if (st == FL_OK && w) st = f32c(&wc, w, "layer_norm", "weight");
    if (st == FL_OK && b) st = f32c(&bc, b, "layer_norm", "bias");
    if (st == FL_OK) st = new_vec(&mean, x, rows, false);
    if (st == FL_OK) st = new_vec(&rstd, x, rows, false);
    if (st == FL_OK) st = fl_tensor_empty(q, fmt, x->ndim, x->shape, x->device);
    if (st == FL_OK)
        st = dev->layernorm_quantize(*q, xc, wc, bc, mean, rstd, (float)eps, scale, margin, pow2, FL_SATURATE);
    if (st == FL_OK) st = fl_tensor_header(y, FL_F32, x->ndim, x->shape, x->device);
    if (st == FL_OK) st = ln_record(y, x, w, b, xc, wc, mean, rstd);
    fl_tensor_release(xc); fl_tensor_release(wc); fl_tensor_release(bc);
    fl_tensor_release(mean); fl_tensor_release(rstd);
    if (st != FL_OK) { fl_tensor_release(*y); fl_tensor_release(*q); *y = NULL; *q = NULL; }
    return st;
}

/* ---- embedding ---------------------------------------------------------------------------- */

static fl_status emb_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *idx = n->saved[0], *w = n->inputs[1];
    FL_TRY(fl_tensor_zeros(&gin[1], FL_F32, 2, w->shape, w->device));
    return DEV(w)->embedding_bwd(F(idx), fl_tensor_numel(idx), F(g), w->shape[0], w->shape[1], F(gin[1]));
}

fl_status fl_embedding(fl_tensor **out, const fl_tensor *idx, const fl_tensor *weight) {
    char a[200];
    *out = NULL;
    FL_PROF_SCOPE("embedding"); FL_PROF_SHAPES(idx, weight);
    if (weight->ndim != 2) return FL_ERR(FL_EINVAL, "embedding: weight must be 2-D [num_embeddings, dim], got %s", SHAPE(a, weight));
    if (idx->ndim + 1 > FL_MAX_DIMS) return FL_ERR(FL_EINVAL, "embedding: indices have too many dims (%d)", idx->ndim);
    const fl_device *dev;
    FL_TRY(same_device("embedding", 2, (const fl_tensor *[]){ weight, idx }));
    FL_TRY(NN_DEVICE(weight, embedding_fwd, "embedding", &dev));
    fl_tensor *ic = NULL, *wc = NULL;
    FL_TRY(f32c(&ic, idx, "embedding", "indices"));
    fl_status st = f32c(&wc, weight, "embedding", "weight");
    int64_t shape[FL_MAX_DIMS];
    memcpy(shape, idx->shape, sizeof(int64_t) * (size_t)idx->ndim);
    shape[idx->ndim] = weight->shape[1];
    if (st == FL_OK) st = fl_tensor_empty(out, FL_F32, idx->ndim + 1, shape, weight->device);
    if (st == FL_OK) st = dev->embedding_fwd(F(ic), fl_tensor_numel(ic), F(wc), weight->shape[0], weight->shape[1], F(*out));
    if (st == FL_OK) {
        const fl_tensor *ins[2] = { NULL, weight };   /* indices get no gradient */
        fl_node *n;
        st = maybe_record(out, &n, "EmbeddingBackward", emb_bwd, 2, ins);
        if (st == FL_OK && n) fl_node_save(n, 0, ic);
    }
    fl_tensor_release(ic);
    fl_tensor_release(wc);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* ---- dropout ------------------------------------------------------------------------------ */

/* The keep mask lives on the input's device, one byte per element, owned by the backward node. */
typedef struct { uint8_t *mask; int device; } dropout_ctx;
static void dropout_ctx_free(void *p) {
    dropout_ctx *c = p;
    const fl_device *dev = fl_device_get(c->device);
    if (dev && c->mask) dev->free(c->mask);
    free(c);
}

/* (g: any dense layout, autograd.c's node_takes_dense; read in the mask's order: contiguous, or a channels_last
 * input's NHWC, the gradient given in that layout) */
static fl_status dropout_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    dropout_ctx *c = n->ctx;
    fl_tensor *gc = NULL;
    FL_TRY(n->iargs[0] ? f32cl(&gc, g, "dropout backward", "gradient") : f32c(&gc, g, "dropout backward", "gradient"));
    fl_status st = n->iargs[0] ? fl_tensor_empty_like(&gin[0], gc, FL_F32) : new_like(&gin[0], gc, false);
    if (st == FL_OK)
        st = DEV(g)->dropout_bwd(c->mask, F(gc), F(gin[0]), fl_tensor_numel(g), (float)n->dargs[0]);
    fl_tensor_release(gc);
    return st;
}

fl_status fl_dropout(fl_tensor **out, const fl_tensor *x, double p, bool training, fl_rng *rng) {
    *out = NULL;
    FL_PROF_SCOPE("dropout"); FL_PROF_SHAPES(x);
    if (!(p >= 0.0 && p <= 1.0)) return FL_ERR(FL_EINVAL, "dropout: p must be in [0, 1], got %g", p);
    if (!training || p == 0.0) { *out = fl_tensor_retain((fl_tensor *)x); return FL_OK; }
    const fl_device *dev;
    FL_TRY(NN_DEVICE(x, dropout_fwd, "dropout", &dev));
    /* a channels_last input (torch's suggest_memory_format) is read and written in its memory order, the mask drawn in
     * that order: the result and the input gradient keep its layout, as torch's (its mask is the input's empty_like) */
    const bool cl = fl_tensor_is_channels_last(x);
    fl_tensor *xc;
    FL_TRY(cl ? f32cl(&xc, x, "dropout", "input") : f32c(&xc, x, "dropout", "input"));
    int64_t m = fl_tensor_numel(xc);
    dropout_ctx *c = calloc(1, sizeof *c);
    fl_status st = c ? dev->alloc((size_t)(m ? m : 1), (void **)&c->mask)
                     : FL_ERR(FL_ENOMEM, "dropout: out of memory for its backward state");
    if (c) c->device = xc->device;
    if (st == FL_OK) st = cl ? fl_tensor_empty_like(out, xc, FL_F32) : new_like(out, xc, false);
    if (st == FL_OK) {
        fl_rng *r = rng ? rng : fl_default_rng();
        /* The kernel draws Philox block offset + i/4 for element i: claim those blocks. */
        st = drop_on_error(dev->dropout_fwd(F(xc), F(*out), c->mask, m, (float)p, r->seed, r->counter), out);
        r->counter += (uint64_t)((m + 3) / 4);
    }
    if (st == FL_OK) {
        fl_node *n;
        st = maybe_record(out, &n, "DropoutBackward", dropout_bwd, 1, &x);
        if (st == FL_OK && n) {
            n->ctx = c;
            n->ctx_free = dropout_ctx_free;
            n->dargs[0] = p;
            n->iargs[0] = cl;
            c = NULL;
            st = drop_on_error(fl_node_input_stub(n, 0), out);   /* the mask alone is read */
        }
    }
    if (c) dropout_ctx_free(c);
    fl_tensor_release(xc);
    return st;
}

/* ---- attention ---------------------------------------------------------------------------- */

/* The backward of either attention kernel: att (saved[3]) holds the probabilities, or with iargs[3] set the fused
 * forward's row statistics. */
static fl_status sdpa_bwd_run(const fl_node *n, const fl_tensor *q, const fl_tensor *k, const fl_tensor *v,
                              const fl_tensor *g, fl_tensor *d[3]) {
    const fl_tensor *att = n->saved[3];
    const float scale = (float)n->dargs[0];
    const bool causal = n->iargs[0] != 0;
    if (n->iargs[3])
        return DEV(q)->sdpa_flash_bwd(F(q), F(k), F(v), F(att), F(g), F(d[0]), F(d[1]), F(d[2]), q->shape[0], q->shape[1],
                                      q->shape[2], q->shape[3], scale, causal);
    return DEV(q)->sdpa_bwd(F(q), F(k), F(v), F(att), F(g), F(d[0]), F(d[1]), F(d[2]), q->shape[0], q->shape[1],
                            q->shape[2], q->shape[3], scale, causal, n->iargs[1] != 0);
}

double fl_sdpa_fused_min_bytes = 1073741824.0;
double fl_sdpa_cpu_fused_min_bytes = -1.0;

/* Whether a call on dev runs the fused kernels (nn.h, fl_sdpa_fused_min_bytes, fl_sdpa_cpu_fused_min_bytes). */
static bool sdpa_fuses(const fl_device *dev, bool bf16, int64_t B, int64_t H, int64_t T) {
    const double min = dev != fl_cpu_device()             ? fl_sdpa_fused_min_bytes
                       : fl_sdpa_cpu_fused_min_bytes >= 0 ? fl_sdpa_cpu_fused_min_bytes
                                                          : fl_cpu_sdpa_fused_min_bytes();
    return bf16 && dev->sdpa_flash_fwd && 4.0 * (double)B * (double)H * (double)T * (double)T > min;
}

/* The fused forward where sdpa_fuses says so (the fused kernels are bf16's maths): out and *stats ([B, H, T, 2])
 * written and *fused set; else nothing done and *fused false. */
static fl_status sdpa_fused_fwd(const fl_device *dev, const fl_tensor *q, const fl_tensor *k, const fl_tensor *v,
                                fl_tensor *out, fl_tensor **stats, double scale, bool causal, bool bf16, bool *fused) {
    *fused = false;
    *stats = NULL;
    if (!sdpa_fuses(dev, bf16, q->shape[0], q->shape[1], q->shape[2])) return FL_OK;
    const int64_t ss[4] = { q->shape[0], q->shape[1], q->shape[2], 2 };
    FL_TRY(fl_tensor_empty(stats, FL_F32, 4, ss, q->device));
    fl_status st = dev->sdpa_flash_fwd(F(q), F(k), F(v), F(out), F(*stats), q->shape[0], q->shape[1], q->shape[2],
                                       q->shape[3], (float)scale, causal, fused);
    if (st != FL_OK || !*fused) { fl_tensor_release(*stats); *stats = NULL; }
    return st;
}

static fl_status sdpa_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *q = n->saved[0], *k = n->saved[1], *v = n->saved[2];
    fl_tensor *d[3] = { NULL, NULL, NULL };
    fl_status st = FL_OK;
    for (int i = 0; i < 3 && st == FL_OK; i++) st = new_like(&d[i], q, false);   /* the kernel overwrites them */
    if (st == FL_OK) st = sdpa_bwd_run(n, q, k, v, g, d);
    for (int i = 0; i < 3; i++) {
        if (st == FL_OK && fl_node_input_needs_grad(n, i)) gin[i] = d[i];
        else fl_tensor_release(d[i]);
    }
    return st;
}

/* View of part `i` (0 q, 1 k, 2 v) of a packed [B, T, 3C] tensor as [B, H, T, D] (strided), or with i < 0
 * the whole [B, T, C] tensor seen that way. */
static fl_status heads_view(fl_tensor **out, const fl_tensor *t, int i, int64_t H) {
    *out = NULL;
    int64_t B = t->shape[0], T = t->shape[1], C = i < 0 ? t->shape[2] : t->shape[2] / 3;
    int64_t s4[4] = { B, T, H, C / H };
    fl_tensor *part = NULL, *v4 = NULL;
    fl_status st = i < 0 ? (part = fl_tensor_retain((fl_tensor *)t), FL_OK) : fl_tensor_narrow(&part, t, 2, i * C, C);
    if (st == FL_OK) st = fl_tensor_view(&v4, part, 4, s4);
    if (st == FL_OK) st = fl_tensor_transpose(out, v4, 1, 2);
    fl_tensor_release(part);
    fl_tensor_release(v4);
    return st;
}

/* Copies of q, k, v out of the packed qkv [B, T, 3C], as contiguous [B, H, T, D]. */
static fl_status qkv_parts(fl_tensor *p[3], const fl_tensor *x, int64_t H) {
    fl_status st = FL_OK;
    for (int i = 0; i < 3 && st == FL_OK; i++) {
        fl_tensor *view = NULL;
        st = heads_view(&view, x, i, H);
        if (st == FL_OK) st = fl_tensor_contiguous(&p[i], view);
        fl_tensor_release(view);
    }
    return st;
}

/* Saved: q, k, v as [B, H, T, D] copies and att (or the fused forward's statistics, iargs[3]), or (iargs[2] = H,
 * the forward ran on the packed layout) the packed qkv itself and att. The packed backward writes dqkv directly;
 * when the device declines it, the copies are made now and the [B, H, T, D] entry runs. */
static fl_status sdpa_qkv_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *att = n->saved[3];
    const bool packed = n->iargs[2] > 0;
    const int64_t H = packed ? n->iargs[2] : n->saved[0]->shape[1];
    const float scale = (float)n->dargs[0];
    const bool causal = n->iargs[0] != 0, bf16 = n->iargs[1] != 0;
    fl_tensor *p[3] = { NULL, NULL, NULL }, *d[3] = { NULL, NULL, NULL }, *gv = NULL, *gc = NULL, *dqkv = NULL;
    const int64_t B = g->shape[0], T = g->shape[1], C = g->shape[2], ds[3] = { B, T, 3 * C };
    fl_status st = fl_tensor_empty(&dqkv, FL_F32, 3, ds, g->device);
    bool done = false;
    if (st == FL_OK && packed) {
        const fl_tensor *x = n->saved[0];
        st = f32c(&gc, g, "attention backward", "gradient");
        if (st == FL_OK)
            st = DEV(x)->sdpa_qkv_bwd(F(x), n->iargs[3] ? NULL : F(att), n->iargs[3] ? F(att) : NULL, F(gc), F(dqkv), B, H,
                                      T, C / H, scale, causal, bf16, &done);
        fl_tensor_release(gc);
        gc = NULL;
        if (st == FL_OK && !done) st = qkv_parts(p, x, H);
    } else if (st == FL_OK) {
        for (int i = 0; i < 3; i++) p[i] = fl_tensor_retain(n->saved[i]);
    }
    if (st == FL_OK && !done) {
        st = heads_view(&gv, g, -1, H);
        if (st == FL_OK) st = fl_tensor_contiguous(&gc, gv);
        for (int i = 0; i < 3 && st == FL_OK; i++) st = new_like(&d[i], p[0], false);   /* the kernel overwrites them */
        if (st == FL_OK) st = sdpa_bwd_run(n, p[0], p[1], p[2], gc, d);
        for (int i = 0; i < 3 && st == FL_OK; i++) {
            fl_tensor *part = NULL;
            st = heads_view(&part, dqkv, i, H);
            if (st == FL_OK) st = fl_tensor_copy_(part, d[i]);
            fl_tensor_release(part);
        }
    }
    for (int i = 0; i < 3; i++) { fl_tensor_release(p[i]); fl_tensor_release(d[i]); }
    fl_tensor_release(gv);
    fl_tensor_release(gc);
    if (st == FL_OK) gin[0] = dqkv;
    else fl_tensor_release(dqkv);
    return st;
}

fl_status fl_sdpa_qkv(fl_tensor **out, const fl_tensor *qkv, int64_t H, bool causal, double scale) {
    char a[200];
    *out = NULL;
    FL_PROF_SCOPE("scaled_dot_product_attention"); FL_PROF_SHAPES(qkv);
    if (qkv->ndim != 3 || H < 1 || qkv->shape[2] % (3 * H) != 0)
        return FL_ERR(FL_EINVAL, "attention: expected qkv [B, T, 3·C] with C divisible by %lld heads, got %s",
                      (long long)H, SHAPE(a, qkv));
    if (!isfinite(scale)) return FL_ERR(FL_EINVAL, "attention: scale must be finite, got %g", scale);
    const fl_device *dev;
    FL_TRY(NN_DEVICE(qkv, sdpa_fwd, "scaled_dot_product_attention", &dev));
    int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, D = C / H;
    /* with_flops: none, as torch's aten::scaled_dot_product_attention (its fused kernels have no count) */
    FL_PROF_HIDE_INNER_FLOPS();
    fl_tensor *x = NULL, *p[3] = { NULL, NULL, NULL }, *o = NULL, *att = NULL, *ov = NULL;
    fl_status st = f32c(&x, qkv, "attention", "qkv");
    int64_t as[4] = { B, H, T, T }, os[3] = { B, T, C };
    if (scale <= 0) scale = D ? 1.0 / sqrt((double)D) : 1.0;
    const bool bf16 = fl_autocast_dtype() == FL_BF16;   /* GEMM operands in bf16, as linear layers under autocast */
    if (st == FL_OK) st = fl_tensor_empty(out, FL_F32, 3, os, qkv->device);
    /* The packed layout where the device reads it in place; else copies into [B, H, T, D] and back, through the
     * fused kernels where the device has them (no att then: the node keeps their statistics in its place). */
    bool packed = false, fused = false;
    /* no backward to come: the CPU device keeps no probabilities (att and stats NULL, as fl_sdpa's; the same bits) */
    const bool keep = fl_any_requires_grad(1, &qkv) || dev != fl_cpu_device();
    if (st == FL_OK && dev->sdpa_qkv_fwd && !keep && !sdpa_fuses(dev, bf16, B, H, T)) {
        st = dev->sdpa_qkv_fwd(F(x), F(*out), NULL, NULL, B, H, T, D, (float)scale, causal, bf16, &packed);
        if (st == FL_OK && packed) goto done;
    }
    if (st == FL_OK && dev->sdpa_qkv_fwd) {
        /* the fused maths where sdpa_fuses says so: att then holds the rows' statistics, [B, H, T, 2] */
        const bool flash = sdpa_fuses(dev, bf16, B, H, T);
        const int64_t ss[4] = { B, H, T, 2 };
        st = fl_tensor_empty(&att, FL_F32, 4, flash ? ss : as, qkv->device);
        if (st == FL_OK)
            st = dev->sdpa_qkv_fwd(F(x), F(*out), flash ? NULL : F(att), flash ? F(att) : NULL, B, H, T, D, (float)scale,
                                   causal, bf16, &packed);
        fused = packed && flash;
    }
    if (st == FL_OK && !packed) {
        st = qkv_parts(p, x, H);
        if (st == FL_OK) st = new_like(&o, p[0], false);
        if (st == FL_OK && sdpa_fuses(dev, bf16, B, H, T)) {
            fl_tensor_release(att);
            att = NULL;
            st = sdpa_fused_fwd(dev, p[0], p[1], p[2], o, &att, scale, causal, bf16, &fused);
        }
        if (st == FL_OK && !att) st = fl_tensor_empty(&att, FL_F32, 4, as, qkv->device);
        if (st == FL_OK && !fused)
            st = dev->sdpa_fwd(F(p[0]), F(p[1]), F(p[2]), F(o), F(att), B, H, T, D, (float)scale, causal, bf16);
        if (st == FL_OK) st = heads_view(&ov, *out, -1, H);
        if (st == FL_OK) st = fl_tensor_copy_(ov, o);
    }
done:
    if (st == FL_OK) {
        fl_node *n;
        st = maybe_record(out, &n, "SdpaBackward", sdpa_qkv_bwd, 1, (const fl_tensor *[]){ qkv });
        if (st == FL_OK && n) {
            if (packed) fl_node_save(n, 0, x);
            else for (int i = 0; i < 3; i++) fl_node_save(n, i, p[i]);
            fl_node_save(n, 3, att);
            n->dargs[0] = scale;
            n->iargs[0] = causal;
            n->iargs[1] = bf16;
            n->iargs[2] = packed ? H : 0;
            n->iargs[3] = fused;
        }
    }
    for (int i = 0; i < 3; i++) fl_tensor_release(p[i]);
    fl_tensor_release(x); fl_tensor_release(o); fl_tensor_release(att); fl_tensor_release(ov);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

fl_status fl_sdpa(fl_tensor **out, const fl_tensor *q, const fl_tensor *k, const fl_tensor *v, bool causal, double scale) {
    char a[200], b[200], c[200];
    *out = NULL;
    /* record_shapes: torch's eight inputs (q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa) */
    FL_PROF_SCOPE("scaled_dot_product_attention"); FL_PROF_SHAPES(q, k, v, NULL, NULL, NULL, NULL, NULL);
    if (q->ndim != 4 || !fl_shape_equal(q->ndim, q->shape, k->ndim, k->shape) || !fl_shape_equal(q->ndim, q->shape, v->ndim, v->shape))
        return FL_ERR(FL_EINVAL, "scaled_dot_product_attention: q, k, v must all be [B, H, T, D] of one shape, got %s, %s, %s",
                      SHAPE(a, q), SHAPE(b, k), SHAPE(c, v));
    if (!isfinite(scale)) return FL_ERR(FL_EINVAL, "scaled_dot_product_attention: scale must be finite, got %g", scale);
    const fl_device *dev;
    FL_TRY(same_device("scaled_dot_product_attention", 3, (const fl_tensor *[]){ q, k, v }));
    FL_TRY(NN_DEVICE(q, sdpa_fwd, "scaled_dot_product_attention", &dev));
    int64_t B = q->shape[0], H = q->shape[1], T = q->shape[2], D = q->shape[3];
    /* with_flops: none, as torch's aten::scaled_dot_product_attention (its fused kernels have no count) */
    FL_PROF_HIDE_INNER_FLOPS();
    fl_tensor *qc = NULL, *kc = NULL, *vc = NULL, *att = NULL;
    fl_status st = f32c(&qc, q, "scaled_dot_product_attention", "q");
    if (st == FL_OK) st = f32c(&kc, k, "scaled_dot_product_attention", "k");
    if (st == FL_OK) st = f32c(&vc, v, "scaled_dot_product_attention", "v");
    int64_t as[4] = { B, H, T, T }, att_numel;
    /* the probabilities' size checked whether or not they are kept (att NULL below: the CPU's no-grad path makes them
     * a row block at a time, or in a temporary it sizes from this; [1, 1, 2^32, 0] wrapped T·T there) */
    if (st == FL_OK) st = fl_shape_numel("scaled_dot_product_attention", 4, as, &att_numel);
    if (st == FL_OK) st = new_like(out, qc, false);
    if (scale <= 0) scale = D ? 1.0 / sqrt((double)D) : 1.0;
    const bool bf16 = fl_autocast_dtype() == FL_BF16;   /* GEMM operands in bf16, as linear layers under autocast */
    const fl_tensor *ins[3] = { q, k, v };
    /* no backward to come (no_grad, or no operand requiring grad): the CPU device keeps no probabilities (att NULL:
     * B·H·T·T floats neither allocated nor written, 2 GB for [16, 8, 2048, ·]; the same bits) */
    const bool want_att = fl_any_requires_grad(3, ins) || dev != fl_cpu_device();
    bool fused = false;   /* the fused kernels where the device has them: their statistics in att's place */
    if (st == FL_OK) st = sdpa_fused_fwd(dev, qc, kc, vc, *out, &att, scale, causal, bf16, &fused);
    if (st == FL_OK && !fused && want_att) st = fl_tensor_empty(&att, FL_F32, 4, as, q->device);
    if (st == FL_OK && !fused)
        st = dev->sdpa_fwd(F(qc), F(kc), F(vc), F(*out), att ? F(att) : NULL, B, H, T, D, (float)scale, causal, bf16);
    if (st == FL_OK) {
        fl_node *n;
        st = maybe_record(out, &n, "SdpaBackward", sdpa_bwd, 3, ins);
        if (st == FL_OK && n) {
            fl_node_save(n, 0, qc); fl_node_save(n, 1, kc); fl_node_save(n, 2, vc); fl_node_save(n, 3, att);
            /* an operand read through its fp32 contiguous copy (a head view of a packed projection): the view's
             * storage may go (torch's keeps the views alone) */
            const fl_tensor *cs[3] = { qc, kc, vc };
            for (int i = 0; i < 3 && st == FL_OK; i++) if (cs[i] != ins[i]) st = fl_node_input_stub(n, i);
            n->dargs[0] = scale;
            n->iargs[0] = causal;
            n->iargs[1] = bf16;
            n->iargs[3] = fused;
        }
    }
    fl_tensor_release(qc); fl_tensor_release(kc); fl_tensor_release(vc); fl_tensor_release(att);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}
