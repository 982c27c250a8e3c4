/* ops.c — the device-independent half of every op: argument checks with messages that show the
 * shapes, dtype promotion, result allocation, broadcasting, then dispatch to the device table. */
#include "ops.h"
#include "device.h"
#include "ops_raw.h"
#include "profiler.h"
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

const char *const fl_binop_names[] = { "add", "sub", "mul", "div", "maximum", "minimum", "pow", "where",
                                       "eq", "ne", "lt", "le", "gt", "ge", "atan2", "fmod", "remainder",
                                       "hypot" };
const char *const fl_unop_names[] = { "abs", "neg", "exp", "log", "sqrt", "sign", "tanh", "sigmoid", "sin", "cos",
                                      "floor", "ceil", "round", "trunc", "erf", "log1p", "expm1", "tan", "asin",
                                      "acos", "atan", "sinh", "cosh", "log2", "log10", "exp2", "rsqrt" };
const char *const fl_redop_names[] = { "sum", "mean", "max", "min", "amax" };
_Static_assert(sizeof fl_binop_names / sizeof *fl_binop_names == FL_BINOP_COUNT, "binop without a name");
_Static_assert(sizeof fl_unop_names / sizeof *fl_unop_names == FL_UNOP_COUNT, "unop without a name");
_Static_assert(sizeof fl_redop_names / sizeof *fl_redop_names == FL_REDOP_COUNT, "redop without a name");

#define SHAPE(buf, t) fl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

static fl_status get_device(const fl_tensor *t, const char *op, const fl_device **dev) {
    *dev = fl_device_get(t->device);
    if (!*dev) return FL_ERR(FL_EDEVICE, "%s: device %s is not available", op, fl_device_name(t->device));
    return FL_OK;
}

static fl_status need_entry(const void *fn, const fl_device *dev, const char *op) {
    if (!fn) return FL_ERR(FL_EUNSUPPORTED, "%s is not supported on %s", op, dev->name);
    return FL_OK;
}

static fl_status refuse_fp8(const fl_tensor *t, const char *op) {
    if (fl_format(t->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "%s: %s tensor: call :dequantize() first (FP8 tensors only hold quantized data)",
                      op, fl_format(t->dtype)->name);
    return FL_OK;
}

static fl_status same_device(const fl_tensor *a, const fl_tensor *b, const char *op) {
    if (a->device != b->device)
        return FL_ERR(FL_EINVAL, "%s: tensors are on different devices (%s and %s); move one with :to()",
                      op, fl_device_name(a->device), fl_device_name(b->device));
    return FL_OK;
}

/* fp32 > bf16 = fp16; bf16 with fp16 → fp32 (neither holds the other). */
static fl_dtype promote(fl_dtype a, fl_dtype b) {
    if (a == b) return a;
    return FL_F32;
}

fl_status fl_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out) {
    int n = na > nb ? na : nb;
    if (n > FL_MAX_DIMS) return FL_ERR(FL_EINVAL, "broadcast: more than %d dims", FL_MAX_DIMS);
    int64_t res[FL_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        int ia = i - (n - na), ib = i - (n - nb);
        int64_t x = ia >= 0 ? a[ia] : 1, y = ib >= 0 ? b[ib] : 1;
        if (x != y && x != 1 && y != 1) {
            char sa[200], sb[200];
            /* dims in messages count from 1, as the Lua API does (docs/lua-api.md); i is the dim of the result */
            return FL_ERR(FL_EINVAL, "shapes %s and %s cannot be broadcast together (dim %d of the result: %lld vs %lld)",
                          fl_shape_str(sa, sizeof sa, na, a), fl_shape_str(sb, sizeof sb, nb, b), i + 1, (long long)x, (long long)y);
        }
        res[i] = x == 1 ? y : x;
    }
    *nout = n;
    memcpy(out, res, sizeof(int64_t) * (size_t)n);
    return FL_OK;
}

/* torch's TensorIterator fast setup (NON_OVERLAPPING_DENSE): operands of one shape, dense without being contiguous (a
 * channels_last tensor, a permutation) and with the same strides, are walked in memory order, and the result takes
 * their strides (torch 2.15's result; stop 101). They were read through their strides and the result was contiguous:
 * relu 3-4.5x its contiguous time. A contiguous operand keeps its route (the same bits either way: elementwise). */
static bool dense_alike(const fl_tensor *a, const fl_tensor *b) {
    if (fl_tensor_is_contiguous(a) || !fl_tensor_is_dense(a)) return false;
    return !b || (fl_shape_equal(a->ndim, a->shape, b->ndim, b->shape) &&
                  memcmp(a->stride, b->stride, sizeof(int64_t) * (size_t)a->ndim) == 0);
}

/* *r a new tensor of dtype dt with a's strides (a dense), fr, fa and fb (b may be NULL) 1-D views of r's, a's and b's
 * memory; on failure all NULL */
static fl_status flat_operands(fl_tensor **r, fl_tensor **fr, fl_tensor **fa, fl_tensor **fb, fl_dtype dt,
                               const fl_tensor *a, const fl_tensor *b) {
    *fr = *fa = NULL;
    if (fb) *fb = NULL;
    fl_status st = fl_tensor_empty_like(r, a, dt);
    if (st == FL_OK) st = fl_tensor_flat(fr, *r);
    if (st == FL_OK) st = fl_tensor_flat(fa, a);
    if (st == FL_OK && b) st = fl_tensor_flat(fb, b);
    if (st != FL_OK) {
        fl_tensor_release(*r); fl_tensor_release(*fr); fl_tensor_release(*fa);
        *r = *fr = *fa = NULL;
        if (fb) { fl_tensor_release(*fb); *fb = NULL; }
    }
    return st;
}

/* The operand whose layout a broadcast or mixed-layout binary op's result takes, torch's TensorIterator's
 * reorder_dimensions: the first operand decides the order of any two dims where both its strides are nonzero, the
 * next where it does not; so a of the result's shape, dense without being contiguous, gives its layout (x_cl + y, x_cl
 * + bias: channels_last), and so does b where a is broadcast along all of its dims of size > 1 but one (bias + x_cl);
 * NULL: a contiguous result (anything else, where torch's order can differ: a contiguous a first decides NCHW). */
static const fl_tensor *layout_operand(const fl_tensor *a, const fl_tensor *b, int n, const int64_t *shape) {
    /* a of the result's shape but one element expanded over it (a whole sum's gradient, which the elementwise
     * backwards read as it is since stop 102) orders no dim: b decides, as in torch's reorder_dimensions */
    bool flat_a = !fl_tensor_is_contiguous(a);
    for (int i = 0; i < a->ndim && flat_a; i++) flat_a = a->stride[i] == 0 || a->shape[i] == 1;
    if (fl_shape_equal(a->ndim, a->shape, n, shape) && !flat_a)
        return !fl_tensor_is_contiguous(a) && fl_tensor_is_dense(a) ? a : NULL;
    if (!fl_shape_equal(b->ndim, b->shape, n, shape) || fl_tensor_is_contiguous(b) || !fl_tensor_is_dense(b))
        return NULL;
    int moving = 0;   /* a's dims (aligned at the right) of size > 1 */
    for (int i = 0; i < a->ndim; i++) moving += a->shape[i] > 1;
    return moving <= 1 || flat_a ? b : NULL;
}

/* *v ← a view of t (of the result's shape) with its dims in lay's memory order, outermost first (perm) */
static fl_status permuted(fl_tensor **v, const fl_tensor *t, const int *perm) {
    FL_TRY(fl_tensor_expand(v, t, t->ndim, t->shape));
    for (int i = 0; i < t->ndim; i++) { (*v)->shape[i] = t->shape[perm[i]]; (*v)->stride[i] = t->stride[perm[i]]; }
    return FL_OK;
}

/* r = op(a, b) with r given lay's strides (layout_operand), computed on views in lay's memory order: r's contiguous */
static fl_status binary_in_order(fl_tensor **out, fl_binop op, const fl_device *dev, const fl_tensor *lay,
                                 const fl_tensor *a, const fl_tensor *b, int n, const int64_t *shape) {
    int perm[FL_MAX_DIMS];
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = 1; i < n; i++)   /* outermost first: strides descending, size-1 dims kept in place among equals */
        for (int j = i; j > 0 && lay->stride[perm[j - 1]] < lay->stride[perm[j]]; j--) {
            const int k = perm[j]; perm[j] = perm[j - 1]; perm[j - 1] = k;
        }
    fl_tensor *r = NULL, *ea = NULL, *eb = NULL, *pr = NULL, *pa = NULL, *pb = NULL;
    fl_status st = fl_tensor_empty_like(&r, lay, promote(a->dtype, b->dtype));
    if (st == FL_OK) st = fl_tensor_expand(&ea, a, n, shape);
    if (st == FL_OK) st = fl_tensor_expand(&eb, b, n, shape);
    if (st == FL_OK) st = permuted(&pr, r, perm);
    if (st == FL_OK) st = permuted(&pa, ea, perm);
    if (st == FL_OK) st = permuted(&pb, eb, perm);
    if (st == FL_OK && !fl_tensor_is_contiguous(pr)) st = FL_ERR(FL_EINVAL, "%s: internal: the result's order", fl_binop_names[op]);
    if (st == FL_OK && fl_tensor_numel(r) > 0) st = dev->binary(op, pr, pa, pb);
    fl_tensor_release(ea); fl_tensor_release(eb);
    fl_tensor_release(pr); fl_tensor_release(pa); fl_tensor_release(pb);
    if (st != FL_OK) { fl_tensor_release(r); r = NULL; }
    *out = r;
    return st;
}

fl_status fl_binary_raw(fl_tensor **out, fl_binop op, const fl_tensor *a, const fl_tensor *b) {
    *out = NULL;
    if ((int)op < 0 || op >= FL_BINOP_COUNT) return FL_ERR(FL_EINVAL, "unknown binary op %d", (int)op);
    const char *name = fl_binop_names[op];
    FL_PROF_SCOPE(name);
    /* record_shapes: torch's aten::add and aten::sub take alpha as a third input, a scalar ([]) */
    if (op == FL_OP_ADD || op == FL_OP_SUB) FL_PROF_SHAPES(a, b, NULL); else FL_PROF_SHAPES(a, b);
    /* with_flops: torch's count for aten::add and aten::mul, the first input's element count (v + x with v [8] and x
     * [4, 8] counts 8; x + v 32), for every dtype; torch counts no other elementwise op */
    if (op == FL_OP_ADD || op == FL_OP_MUL) FL_PROF_CALLED_FLOPS(fl_tensor_numel(a));
    FL_TRY(refuse_fp8(a, name));
    FL_TRY(refuse_fp8(b, name));
    FL_TRY(same_device(a, b, name));
    const fl_device *dev;
    FL_TRY(get_device(a, name, &dev));
    FL_TRY(need_entry((const void *)dev->binary, dev, name));
    int n;
    int64_t shape[FL_MAX_DIMS];
    if (fl_broadcast_shape(a->ndim, a->shape, b->ndim, b->shape, &n, shape) != FL_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", fl_last_error_detail());   /* the message buffer is reused */
        return FL_ERR(FL_EINVAL, "%s: %s", name, msg);
    }
    fl_tensor *r = NULL, *ea = NULL, *eb = NULL, *fr = NULL;
    fl_status st;
    if (dense_alike(a, b)) {   /* (ea, eb: a's and b's memory as 1-D views) */
        st = flat_operands(&r, &fr, &ea, &eb, promote(a->dtype, b->dtype), a, b);
        if (st == FL_OK && fl_tensor_numel(r) > 0) st = dev->binary(op, fr, ea, eb);
        fl_tensor_release(fr);
        fl_tensor_release(ea);
        fl_tensor_release(eb);
        if (st != FL_OK) { fl_tensor_release(r); return st; }
        *out = r;
        return FL_OK;
    }
    const fl_tensor *lay = layout_operand(a, b, n, shape);
    if (lay) return binary_in_order(out, op, dev, lay, a, b, n, shape);
    st = fl_tensor_empty(&r, promote(a->dtype, b->dtype), n, shape, a->device);
    if (st == FL_OK) st = fl_tensor_expand(&ea, a, n, shape);
    if (st == FL_OK) st = fl_tensor_expand(&eb, b, n, shape);
    if (st == FL_OK && fl_tensor_numel(r) > 0) st = dev->binary(op, r, ea, eb);
    fl_tensor_release(ea);
    fl_tensor_release(eb);
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

fl_status fl_binary_scalar_raw(fl_tensor **out, fl_binop op, const fl_tensor *a, double s, bool scalar_first) {
    *out = NULL;
    if ((int)op < 0 || op >= FL_BINOP_COUNT) return FL_ERR(FL_EINVAL, "unknown binary op %d", (int)op);
    /* A comparison takes the scalar in the tensor's dtype, as torch casts a Python number for one
     * (bf16 x == 0.1 is true where x holds bf16(0.1)); arithmetic keeps it in fp32. */
    /* (and fmod's and remainder's divisor: torch rounds it to the dtype too, and 2.59375 fmod 1.3 in bf16 is 0 there,
     * 2.59375 being 2 × bf16's 1.3, 1.296875; the divisor unrounded gave 1.296875) */
    bool rounds = fl_binop_is_comparison(op) || op == FL_OP_FMOD || op == FL_OP_REMAINDER;
    if (rounds && a->dtype == FL_BF16) s = fl_bf16_to_f32(fl_f32_to_bf16((float)s));
    else if (rounds && a->dtype == FL_F16) s = fl_f16_to_f32(fl_f32_to_f16((float)s));
    const char *name = fl_binop_names[op];
    FL_PROF_SCOPE(name);
    if (op == FL_OP_ADD || op == FL_OP_SUB) FL_PROF_SHAPES(a, NULL, NULL); else FL_PROF_SHAPES(a, NULL);
    /* (torch's 2 * x and 1 + x are aten::mul(x, 2) and aten::add(x, 1): x's element count either way; its 2 / x is
     * aten::reciprocal then aten::mul(·, 2), which counts the same) */
    if (op == FL_OP_ADD || op == FL_OP_MUL || (op == FL_OP_DIV && scalar_first))
        FL_PROF_CALLED_FLOPS(fl_tensor_numel(a));
    FL_TRY(refuse_fp8(a, name));
    const fl_device *dev;
    FL_TRY(get_device(a, name, &dev));
    FL_TRY(need_entry((const void *)dev->binary_scalar, dev, name));
    fl_tensor *r, *fr, *fa;
    if (dense_alike(a, NULL)) {   /* memory order, a's strides (dense_alike above) */
        FL_TRY(flat_operands(&r, &fr, &fa, NULL, a->dtype, a, NULL));
        fl_status st = fl_tensor_numel(r) ? dev->binary_scalar(op, fr, fa, s, scalar_first) : FL_OK;
        fl_tensor_release(fr);
        fl_tensor_release(fa);
        if (st != FL_OK) { fl_tensor_release(r); return st; }
        *out = r;
        return FL_OK;
    }
    FL_TRY(fl_tensor_empty(&r, a->dtype, a->ndim, a->shape, a->device));
    fl_status st = fl_tensor_numel(r) ? dev->binary_scalar(op, r, a, s, scalar_first) : FL_OK;
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

fl_status fl_unary_raw(fl_tensor **out, fl_unop op, const fl_tensor *a) {
    *out = NULL;
    if ((int)op < 0 || op >= FL_UNOP_COUNT) return FL_ERR(FL_EINVAL, "unknown unary op %d", (int)op);
    const char *name = fl_unop_names[op];
    FL_PROF_SCOPE(name); FL_PROF_SHAPES(a);
    FL_TRY(refuse_fp8(a, name));
    const fl_device *dev;
    FL_TRY(get_device(a, name, &dev));
    FL_TRY(need_entry((const void *)dev->unary, dev, name));
    fl_tensor *r, *fr, *fa;
    if (dense_alike(a, NULL)) {   /* memory order, a's strides (dense_alike above) */
        FL_TRY(flat_operands(&r, &fr, &fa, NULL, a->dtype, a, NULL));
        fl_status st = fl_tensor_numel(r) ? dev->unary(op, fr, fa) : FL_OK;
        fl_tensor_release(fr);
        fl_tensor_release(fa);
        if (st != FL_OK) { fl_tensor_release(r); return st; }
        *out = r;
        return FL_OK;
    }
    FL_TRY(fl_tensor_empty(&r, a->dtype, a->ndim, a->shape, a->device));
    fl_status st = fl_tensor_numel(r) ? dev->unary(op, r, a) : FL_OK;
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

/* The dim of a reduction: *all when everything is reduced (FL_ALL_DIMS, or a 0-d tensor), else *dim
 * made non-negative; out of range is an error naming the op. */
static fl_status reduce_dim(const fl_tensor *a, const char *name, int *dim, bool *all) {
    char sa[200];
    *all = *dim == FL_ALL_DIMS || a->ndim == 0;
    if (!*all) {
        if (*dim < -a->ndim || *dim >= a->ndim)
            return FL_ERR(FL_EINVAL, "%s: dim %d out of range for a tensor of shape %s (expected %d..%d)",
                          name, *dim, SHAPE(sa, a), -a->ndim, a->ndim - 1);
        if (*dim < 0) *dim += a->ndim;
    } else if (*dim != FL_ALL_DIMS && (*dim < -1 || *dim > 0)) {
        return FL_ERR(FL_EINVAL, "%s: dim %d out of range for a 0-d tensor", name, *dim);
    }
    return FL_OK;
}

/* *r (a's shape with dim of size 1, contiguous) → a view without that dim; *r is replaced (NULL on failure). */
static fl_status drop_dim(fl_tensor **r, const fl_tensor *a, int dim) {
    int64_t shape[FL_MAX_DIMS];
    for (int i = 0, j = 0; i < a->ndim; i++) if (i != dim) shape[j++] = a->shape[i];
    fl_tensor *v;
    fl_status st = fl_tensor_view(&v, *r, a->ndim - 1, shape);
    fl_tensor_release(*r);
    *r = st == FL_OK ? v : NULL;
    return st;
}

/* dim's reduction of a dense a that is not contiguous (a channels_last x, a transpose) in a's memory order, where the
 * dims kept follow each other there in their own order (so the result's contiguous layout is that order): *c the
 * contiguous [outer, size, inner] that a's memory is (an alias, no copy) and *cdim 1; *c NULL where the layout does
 * not allow it (stop 105: adaptive_avg_pool2d's global mean of a channels_last x, [N, C, H·W] at {H·W·C, 1, C},
 * copied x contiguous first). The device then sums along dim in its strided order where the copy's run was
 * contiguous: the same fp32 result unless the double sums had to round (magnitudes spanning more than about 2^29),
 * as for a channels_last sum() (docs/lua-api.md). */
static fl_status memory_order_view(fl_tensor **c, int *cdim, const fl_tensor *a, int dim) {
    *c = NULL;   /* (a contiguous a is read as it is: reduce_impl retains it, no header made) */
    if (a->shape[dim] < 2 || fl_tensor_is_contiguous(a) || !dense_alike(a, NULL)) return FL_OK;
    int perm[FL_MAX_DIMS], n = 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != 1) perm[n++] = i;
    for (int i = 1; i < n; i++)   /* outermost first (a dense tensor's dims of size > 1 have distinct strides) */
        for (int j = i; j > 0 && a->stride[perm[j - 1]] < a->stride[perm[j]]; j--) {
            const int k = perm[j]; perm[j] = perm[j - 1]; perm[j - 1] = k;
        }
    int64_t outer = 1, inner = 1;
    int last = -1;
    bool after = false;
    for (int i = 0; i < n; i++) {
        const int d = perm[i];
        if (d == dim) { after = true; continue; }
        if (d < last) return FL_OK;   /* the kept dims out of their order: the result's order is not the memory's */
        last = d;
        if (after) inner *= a->shape[d];
        else outer *= a->shape[d];
    }
    FL_TRY(fl_tensor_alias(c, a));
    const int64_t size = a->shape[dim];
    (*c)->ndim = 3;
    (*c)->shape[0] = outer; (*c)->shape[1] = size; (*c)->shape[2] = inner;
    (*c)->stride[0] = size * inner; (*c)->stride[1] = inner; (*c)->stride[2] = 1;
    *cdim = 1;
    return FL_OK;
}

/* squares: the sum of a·a (device entry sum_squares; op is FL_OP_SUM) */
static fl_status reduce_impl(fl_tensor **out, fl_redop op, const fl_tensor *a, int dim, bool keepdim, bool squares) {
    *out = NULL;
    if ((int)op < 0 || op >= FL_REDOP_COUNT) return FL_ERR(FL_EINVAL, "unknown reduction %d", (int)op);
    const char *name = squares ? "sum_squares" : fl_redop_names[op];
    FL_PROF_SCOPE(name); FL_PROF_SHAPES(a);
    char sa[200];
    FL_TRY(refuse_fp8(a, name));
    const fl_device *dev;
    FL_TRY(get_device(a, name, &dev));
    FL_TRY(need_entry(squares ? (const void *)dev->sum_squares : (const void *)dev->reduce, dev, name));
    bool all;
    FL_TRY(reduce_dim(a, name, &dim, &all));
    int64_t count = all ? fl_tensor_numel(a) : a->shape[dim];
    if (count == 0 && (op == FL_OP_MAX || op == FL_OP_MIN || op == FL_OP_AMAX))
        return FL_ERR(FL_EINVAL, "%s: the reduced range of tensor %s is empty and %s has no identity", name, SHAPE(sa, a), name);
    int64_t kshape[FL_MAX_DIMS];
    int kn = all ? 0 : a->ndim;
    for (int i = 0; i < kn; i++) kshape[i] = i == dim ? 1 : a->shape[i];
    if (all && keepdim) { kn = a->ndim; for (int i = 0; i < kn; i++) kshape[i] = 1; }
    fl_tensor *r = NULL, *c = NULL;
    fl_status st = fl_tensor_empty(&r, a->dtype, kn, kshape, a->device);
    /* a full reduction of a dense tensor that is not contiguous (channels_last, a permutation) reads its memory in
     * order, as torch's TensorIterator does (stop 101), where it was copied to a contiguous tensor first: sum 4-7x
     * the contiguous time. A sum's order is then memory's, not the indices': its bits may differ from the contiguous
     * tensor's in the last place (torch's do too), and are the same on any number of threads (docs/lua-api.md). */
    int cdim = all ? -1 : dim;
    if (st == FL_OK && !all) st = memory_order_view(&c, &cdim, a, dim);
    if (st == FL_OK && !c) {
        cdim = all ? -1 : dim;
        st = all && dense_alike(a, NULL) ? fl_tensor_flat(&c, a) : fl_tensor_contiguous(&c, a);
    }
    if (st == FL_OK && fl_tensor_numel(r) > 0)
        st = squares ? dev->sum_squares(r, c, cdim) : dev->reduce(op, r, c, cdim);
    fl_tensor_release(c);
    if (st == FL_OK && !all && !keepdim) st = drop_dim(&r, a, dim);
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

fl_status fl_reduce_raw(fl_tensor **out, fl_redop op, const fl_tensor *a, int dim, bool keepdim) {
    return reduce_impl(out, op, a, dim, keepdim, false);
}

/* logsumexp's passes as ops (a device without the entry): max, ±inf made 0 on the host, a - m, exp, sum, log, + m */
static fl_status logsumexp_ops(fl_tensor *r, fl_tensor **m, fl_tensor **s, const fl_tensor *a, int dim) {
    fl_tensor *mx = NULL, *h = NULL, *d = NULL, *e = NULL, *l = NULL, *t = NULL;
    fl_status st = fl_reduce_raw(&mx, FL_OP_MAX, a, dim, true);
    if (st == FL_OK) st = fl_tensor_to_device(&h, mx, FL_DEV_CPU);
    if (st == FL_OK) {
        float *hp = (float *)fl_tensor_data(h);
        for (int64_t i = 0; i < fl_tensor_numel(h); i++) if (isinf(hp[i])) hp[i] = 0.0f;
        st = fl_tensor_to_device(m, h, a->device);
    }
    if (st == FL_OK) st = fl_binary_raw(&d, FL_OP_SUB, a, *m);
    if (st == FL_OK) st = fl_unary_raw(&e, FL_OP_EXP, d);
    if (st == FL_OK) st = fl_reduce_raw(s, FL_OP_SUM, e, dim, true);
    if (st == FL_OK) st = fl_unary_raw(&l, FL_OP_LOG, *s);
    if (st == FL_OK) st = fl_binary_raw(&t, FL_OP_ADD, l, *m);
    if (st == FL_OK) st = fl_tensor_copy_(r, t);
    fl_tensor *all[] = { mx, h, d, e, l, t };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fl_tensor_release(all[i]);
    return st;
}

fl_status fl_logsumexp_raw(fl_tensor **out, fl_tensor **m, fl_tensor **s, const fl_tensor *a, int dim, bool keepdim) {
    *out = NULL; *m = NULL; *s = NULL;
    FL_PROF_SCOPE("logsumexp"); FL_PROF_SHAPES(a);
    char sa[200];
    if (a->dtype != FL_F32)
        return FL_ERR(FL_EINVAL, "logsumexp: expected an fp32 tensor (bf16/fp16 are computed in fp32 first), got %s",
                      fl_format(a->dtype)->name);
    if (a->ndim == 0) return FL_ERR(FL_EINVAL, "logsumexp: expected a tensor of at least one dim, got a 0-d tensor");
    bool all;
    FL_TRY(reduce_dim(a, "logsumexp", &dim, &all));
    /* (FL_ALL_DIMS, fl_reduce's "all", read the shape at index -1000: x:_logsumexp(nil) returned garbage) */
    if (all) return FL_ERR(FL_EINVAL, "logsumexp: expected one dim to reduce, got none (all dims)");
    if (a->shape[dim] == 0)
        return FL_ERR(FL_EINVAL, "logsumexp: dim %d of tensor %s is empty (the caller gives -inf)", dim + 1,
                      SHAPE(sa, a));
    const fl_device *dev;
    FL_TRY(get_device(a, "logsumexp", &dev));
    int64_t kshape[FL_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) kshape[i] = i == dim ? 1 : a->shape[i];
    fl_tensor *r = NULL, *c = NULL;
    fl_status st = fl_tensor_empty(&r, FL_F32, a->ndim, kshape, a->device);
    if (st == FL_OK) st = fl_tensor_contiguous(&c, a);
    if (st == FL_OK && fl_tensor_numel(r) > 0) {
        if (dev->logsumexp) {
            st = fl_tensor_empty(m, FL_F32, a->ndim, kshape, a->device);
            if (st == FL_OK) st = fl_tensor_empty(s, FL_F32, a->ndim, kshape, a->device);
            if (st == FL_OK) st = dev->logsumexp(r, *m, *s, c, dim);
        } else {
            st = logsumexp_ops(r, m, s, c, dim);
        }
    } else if (st == FL_OK) {   /* nothing to reduce into: m and s empty too */
        st = fl_tensor_empty(m, FL_F32, a->ndim, kshape, a->device);
        if (st == FL_OK) st = fl_tensor_empty(s, FL_F32, a->ndim, kshape, a->device);
    }
    fl_tensor_release(c);
    if (st == FL_OK && !keepdim) st = drop_dim(&r, a, dim);
    if (st != FL_OK) {
        fl_tensor_release(r); fl_tensor_release(*m); fl_tensor_release(*s);
        *m = NULL; *s = NULL;
        return st;
    }
    *out = r;
    return FL_OK;
}

fl_status fl_sum_squares_raw(fl_tensor **out, const fl_tensor *a, int dim, bool keepdim) {
    *out = NULL;
    const fl_device *dev = fl_device_get(a->device);
    if (dev && dev->sum_squares) return reduce_impl(out, FL_OP_SUM, a, dim, keepdim, true);
    fl_tensor *sq = NULL;   /* the device's two passes */
    fl_status st = fl_binary_raw(&sq, FL_OP_MUL, a, a);
    if (st == FL_OK) st = fl_reduce_raw(out, FL_OP_SUM, sq, dim, keepdim);
    fl_tensor_release(sq);
    return st;
}

/* argmax / argmin's rule (torch's): the first position of the largest (smallest) value, where -0 and +0 are equal,
 * and the first NaN where there is one. One contiguous run: a vectorised pass for the extreme value and whether a
 * NaN is there, then a scan for its first position (it was one scalar pass with a branch per element: 3× torch's
 * max(dim)). */
static int64_t arg_extreme_run(const float *p, int64_t n, bool want_min) {
    float m = p[0];
    int nan = 0;
    if (want_min) {
        _Pragma("omp simd reduction(min:m) reduction(|:nan)")
        for (int64_t s = 0; s < n; s++) { m = p[s] < m ? p[s] : m; nan |= p[s] != p[s]; }
    } else {
        _Pragma("omp simd reduction(max:m) reduction(|:nan)")
        for (int64_t s = 0; s < n; s++) { m = p[s] > m ? p[s] : m; nan |= p[s] != p[s]; }
    }
    int64_t s = 0;
    if (nan) while (p[s] == p[s]) s++;
    else while (p[s] != m) s++;
    return s;
}
/* Along a dim with `inner` columns after it: each column's running extreme and its position, the columns
 * vectorised (a NaN, once taken, stays: later values are not compared with it). */
static void arg_extreme_cols(const float *p, int64_t n, int64_t inner, bool want_min, float *idx) {
    enum { W = 256 };
    for (int64_t j0 = 0; j0 < inner; j0 += W) {
        const int64_t w = inner - j0 < W ? inner - j0 : W;
        float bv[W], bi[W];
        for (int64_t j = 0; j < w; j++) { bv[j] = p[j0 + j]; bi[j] = 0.0f; }
        for (int64_t s = 1; s < n; s++) {
            const float *row = p + s * inner + j0, fs = (float)s;
            if (want_min) {
                _Pragma("omp simd")
                for (int64_t j = 0; j < w; j++) {
                    const bool take = bv[j] == bv[j] && (row[j] != row[j] || row[j] < bv[j]);
                    bv[j] = take ? row[j] : bv[j];
                    bi[j] = take ? fs : bi[j];
                }
            } else {
                _Pragma("omp simd")
                for (int64_t j = 0; j < w; j++) {
                    const bool take = bv[j] == bv[j] && (row[j] != row[j] || row[j] > bv[j]);
                    bv[j] = take ? row[j] : bv[j];
                    bi[j] = take ? fs : bi[j];
                }
            }
        }
        for (int64_t j = 0; j < w; j++) idx[j0 + j] = bi[j];
    }
}

fl_status fl_argreduce(fl_tensor **out, const fl_tensor *a, int dim, bool keepdim, bool want_min) {
    *out = NULL;
    const char *name = want_min ? "argmin" : "argmax";
    FL_PROF_SCOPE(name); FL_PROF_SHAPES(a);
    char sa[200];
    FL_TRY(refuse_fp8(a, name));
    bool all;
    FL_TRY(reduce_dim(a, name, &dim, &all));
    int64_t size = all ? fl_tensor_numel(a) : a->shape[dim];
    if (size == 0) return FL_ERR(FL_EINVAL, "%s: the reduced range of tensor %s is empty", name, SHAPE(sa, a));
    if (size > (INT64_C(1) << 24))
        return FL_ERR(FL_EINVAL, "%s: %lld positions along the reduced range of %s: indices above 2^24 are not exact in "
                      "fp32, the index dtype", name, (long long)size, SHAPE(sa, a));
    int64_t outer = 1, inner = 1;
    if (!all) {
        for (int i = 0; i < dim; i++) outer *= a->shape[i];
        for (int i = dim + 1; i < a->ndim; i++) inner *= a->shape[i];
    }
    int64_t kshape[FL_MAX_DIMS];
    int kn = all ? (keepdim ? a->ndim : 0) : a->ndim;
    for (int i = 0; i < kn; i++) kshape[i] = (all || i == dim) ? 1 : a->shape[i];
    /* the values as contiguous fp32 on the host */
    fl_tensor *h = NULL, *f = NULL, *c = NULL, *r = NULL;
    fl_status st = fl_tensor_to_device(&h, a, FL_DEV_CPU);
    if (st == FL_OK) {   /* (fl_tensor_to copies even to its own dtype) */
        if (h->dtype == FL_F32) f = fl_tensor_retain(h);
        else st = fl_tensor_to(&f, h, FL_F32);
    }
    if (st == FL_OK) st = fl_tensor_contiguous(&c, f);
    if (st == FL_OK) st = fl_tensor_empty(&r, FL_F32, kn, kshape, FL_DEV_CPU);
    if (st == FL_OK) {
        const float *x = fl_tensor_data(c);
        float *idx = fl_tensor_data(r);
        for (int64_t o = 0; o < outer; o++) {
            if ((o & 255) == 0 && (st = fl_check_interrupt()) != FL_OK) break;
            if (inner == 1) idx[o] = (float)arg_extreme_run(x + o * size, size, want_min);
            else arg_extreme_cols(x + o * size * inner, size, inner, want_min, idx + o * inner);
        }
    }
    fl_tensor_release(h); fl_tensor_release(f); fl_tensor_release(c);
    if (st == FL_OK && !all && !keepdim) st = drop_dim(&r, a, dim);
    if (st == FL_OK && a->device != FL_DEV_CPU) {
        fl_tensor *d;
        st = fl_tensor_to_device(&d, r, a->device);
        fl_tensor_release(r);
        r = st == FL_OK ? d : NULL;
    }
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

/* Whether the device GEMM can read a 3-D [B, rows, cols] view as it is: each batch entry row-major
 * or column-major (a transposed matrix, e.g. Wᵀ of a linear layer) and batch stride rows·cols or 0.
 * Canonicalises the strides of size-1 dims so the device only has to look at stride[2]. */
static bool gemm_ready(fl_tensor *t) {
    int64_t r = t->shape[1], c = t->shape[2];
    if (!(t->shape[0] == 1 || t->stride[0] == 0 || t->stride[0] == r * c)) return false;
    bool row = (c == 1 || t->stride[2] == 1) && (r == 1 || t->stride[1] == c);
    bool col = (r == 1 || t->stride[1] == 1) && (c == 1 || t->stride[2] == r);
    if (row) { t->stride[1] = c; t->stride[2] = 1; }
    else if (col) { t->stride[1] = 1; t->stride[2] = r; }
    else return false;
    if (t->shape[0] == 1) t->stride[0] = r * c;
    return true;
}

/* [batch..., rows, cols] operand → 3-D [B, rows, cols] the device GEMM accepts (batch stride 0 when
 * the operand has no batch of its own and B > 1). Copies only when the layout needs it: a transposed
 * view (stride pattern of Wᵀ) goes through as it is. */
static fl_status as_batched(fl_tensor **out, const fl_tensor *t, int nt, const int64_t *tshape,
                            int nbatch, const int64_t *batch, int64_t B) {
    fl_tensor *v = NULL, *e = NULL, *c = NULL;
    int64_t rows = tshape[nt - 2], cols = tshape[nt - 1], own = 1;
    for (int i = 0; i < nt - 2; i++) own *= tshape[i];
    int64_t s3[3] = { 1, rows, cols }, b3[3] = { B, rows, cols };
    fl_status st;
    *out = NULL;
    if (own == 1) {
        st = fl_tensor_reshape(&v, t, 3, s3);
        if (st == FL_OK && !gemm_ready(v)) {
            st = fl_tensor_contiguous(&c, v);
            fl_tensor_release(v);
            v = c;
            c = NULL;
        }
        if (st == FL_OK) st = fl_tensor_expand(out, v, 3, b3);
        if (st == FL_OK) gemm_ready(*out);
    } else {
        int64_t full[FL_MAX_DIMS];
        memcpy(full, batch, sizeof(int64_t) * (size_t)nbatch);
        full[nbatch] = rows;
        full[nbatch + 1] = cols;
        st = fl_tensor_reshape(&v, t, nt, tshape);
        if (st == FL_OK) st = fl_tensor_expand(&e, v, nbatch + 2, full);
        if (st == FL_OK && fl_tensor_view(out, e, 3, b3) == FL_OK && gemm_ready(*out)) {
            /* a view the GEMM reads directly */
        } else if (st == FL_OK) {
            fl_clear_error();
            fl_tensor_release(*out);
            *out = NULL;
            st = fl_tensor_contiguous(&c, e);
            if (st == FL_OK) st = fl_tensor_view(out, c, 3, b3);
        }
    }
    fl_tensor_release(v);
    fl_tensor_release(e);
    fl_tensor_release(c);
    return st;
}

/* record_shapes: matmul's input shapes as torch's inner op has them (aten::mm, aten::bmm, aten::mv, aten::dot; their
 * FLOPs are the one count): torch's _matmul_impl (2.15) runs a vector times a matrix as [1, K] @ [K, N]; folds the
 * batch of a 3-d or larger operand times a matrix or a vector into one matrix, [2, 3, 4, 5] @ [5, 6] as [24, 5] @
 * [5, 6] — where that needs no copy (the batch dims' strides nest), or where the other operand requires grad — and a
 * matrix or vector times a 3-d or larger one through the transposes ([4, 5] @ [3, 5, 6] folds only when the first
 * requires grad: [18, 5] @ [5, 4]); otherwise it expands both batches to their broadcast and runs bmm of [B, n, k]
 * and [B, k, p]. Shapes that do not multiply are recorded as given (the error follows). Returns whether torch's inner
 * op takes a vector second (aten::mv or aten::dot, which torch counts none for): b a vector, or since stop 102 a
 * vector times a batch that torch folds (the vector requires grad: [5] @ [3, 5, 6] is aten::mv of [18, 5] and [5]).
 * The shapes are recorded only with record_shapes. */
static bool grad_required(const fl_tensor *t) { return t->requires_grad || t->grad_fn != NULL; }

static bool matmul_torch_shapes(uint64_t tok, const fl_tensor *a, const fl_tensor *b) {
    const bool rec = tok && (fl_prof_flags() & FL_PROF_RECORD_SHAPES) != 0;
#define fl_prof_set_shapes(tok, n, ts) (rec ? fl_prof_set_shapes(tok, n, ts) : (void)0)
    fl_tensor h[2];
    memset(h, 0, sizeof h);
    const fl_tensor *given[2] = { a, b }, *ts[2] = { &h[0], &h[1] };
    int da = a->ndim, db = b->ndim;
    if (da == 0 || db == 0 || da > FL_MAX_DIMS || db > FL_MAX_DIMS) { fl_prof_set_shapes(tok, 2, given); return db == 1; }
    int64_t K = a->shape[da - 1];
    if (da == 1 && db == 2) {                                                   /* unsqueeze(0).mm */
        h[0].ndim = 2; h[0].shape[0] = 1; h[0].shape[1] = K;
        h[1] = (fl_tensor){ .ndim = 2, .shape = { b->shape[0], b->shape[1] } };
        fl_prof_set_shapes(tok, 2, ts);
        return false;
    }
    if (da <= 2 && db <= 2) { fl_prof_set_shapes(tok, 2, given); return db == 1; }     /* dot, mv, mm */
    /* should_fold: t1 the larger operand (the second's transpose when it is), t2 the other */
    bool first_larger = da >= db;
    int d1 = first_larger ? da : db, d2 = first_larger ? db : da;
    bool fold = false;
    if (d1 >= 3 && d2 <= 2) {
        if (grad_required(first_larger ? b : a)) fold = true;
        else if (da != 2) {
            const fl_tensor *t1 = first_larger ? a : b;
            int64_t sh[FL_MAX_DIMS], sd[FL_MAX_DIMS];
            memcpy(sh, t1->shape, sizeof(int64_t) * (size_t)d1);
            memcpy(sd, t1->stride, sizeof(int64_t) * (size_t)d1);
            if (!first_larger) {                                                /* mT: the last two swapped */
                int64_t x = sh[d1 - 1]; sh[d1 - 1] = sh[d1 - 2]; sh[d1 - 2] = x;
                x = sd[d1 - 1]; sd[d1 - 1] = sd[d1 - 2]; sd[d1 - 2] = x;
            }
            int64_t numel = 1;
            for (int i = 0; i < d1; i++) numel *= sh[i];
            fold = true;
            for (int i = 0; numel != 0 && i < d1 - 2; i++)
                if (sd[i] != sd[i + 1] * sh[i + 1]) fold = false;
        }
    }
    if (fold) {
        const fl_tensor *big = first_larger ? a : b, *small = first_larger ? b : a;
        int64_t rows = 1, inner = first_larger ? big->shape[d1 - 1] : big->shape[d1 - 2];
        for (int i = 0; i < d1 - 2; i++) rows *= big->shape[i];
        rows *= first_larger ? big->shape[d1 - 2] : big->shape[d1 - 1];
        h[0].ndim = 2; h[0].shape[0] = rows; h[0].shape[1] = inner;
        if (d2 == 1) { h[1].ndim = 1; h[1].shape[0] = small->shape[0]; }
        else if (first_larger) { h[1].ndim = 2; h[1].shape[0] = small->shape[0]; h[1].shape[1] = small->shape[1]; }
        else { h[1].ndim = 2; h[1].shape[0] = small->shape[1]; h[1].shape[1] = small->shape[0]; }   /* t() */
        fl_prof_set_shapes(tok, 2, ts);
        return d2 == 1;
    }
    /* bmm of the broadcast batches */
    int nba = da > 2 ? da - 2 : 0, nbb = db > 2 ? db - 2 : 0, nbatch;
    int64_t batch[FL_MAX_DIMS], Bn = 1;
    if (fl_broadcast_shape(nba, a->shape, nbb, b->shape, &nbatch, batch) != FL_OK) {
        fl_clear_error();
        fl_prof_set_shapes(tok, 2, given);
        return db == 1;
    }
    for (int i = 0; i < nbatch; i++) Bn *= batch[i];
    h[0] = (fl_tensor){ .ndim = 3, .shape = { Bn, da > 1 ? a->shape[da - 2] : 1, K } };
    h[1] = (fl_tensor){ .ndim = 3, .shape = { Bn, db > 1 ? b->shape[db - 2] : b->shape[0], db > 1 ? b->shape[db - 1] : 1 } };
    fl_prof_set_shapes(tok, 2, ts);
    /* a vector second here too is aten::bmm's [B, K, 1] (a batch torch does not fold, [4, 3, 5] transposed @ [5]:
     * 120 FLOPs, torch 2.15's; until stop 103 none) */
    return false;
#undef fl_prof_set_shapes
}

int fl_matmul_torch_inner(const fl_tensor *a, const fl_tensor *b) {
    if (a->ndim == 1 && b->ndim == 1) return FL_TORCH_DOT;
    return matmul_torch_shapes(0, a, b) ? FL_TORCH_MV : FL_TORCH_MM;
}

fl_status fl_matmul_raw(fl_tensor **out, const fl_tensor *a, const fl_tensor *b, fl_dtype cdt, fl_dtype odt) {
    char sa[200], sb[200];
    *out = NULL;
    FL_PROF_SCOPE("matmul");
    const bool torch_mv = fl__prof.tok ? matmul_torch_shapes(fl__prof.tok, a, b) : b->ndim == 1;
    FL_TRY(refuse_fp8(a, "matmul"));
    FL_TRY(refuse_fp8(b, "matmul"));
    FL_TRY(same_device(a, b, "matmul"));
    if (a->ndim == 0 || b->ndim == 0)
        return FL_ERR(FL_EINVAL, "matmul: both arguments need at least 1 dim, got shapes %s and %s", SHAPE(sa, a), SHAPE(sb, b));
    const fl_device *dev;
    FL_TRY(get_device(a, "matmul", &dev));
    FL_TRY(need_entry((const void *)dev->matmul, dev, "matmul"));
    int na = a->ndim, nb = b->ndim;
    int64_t as[FL_MAX_DIMS + 1], bs[FL_MAX_DIMS + 1];
    if (na == 1) { as[0] = 1; as[1] = a->shape[0]; na = 2; } else memcpy(as, a->shape, sizeof(int64_t) * (size_t)na);
    if (nb == 1) { bs[0] = b->shape[0]; bs[1] = 1; nb = 2; } else memcpy(bs, b->shape, sizeof(int64_t) * (size_t)nb);
    int64_t M = as[na - 2], K = as[na - 1], N = bs[nb - 1];
    if (bs[nb - 2] != K)
        return FL_ERR(FL_EINVAL, "matmul: shapes %s and %s are not aligned (%lld != %lld)",
                      SHAPE(sa, a), SHAPE(sb, b), (long long)K, (long long)bs[nb - 2]);
    int nbatch;
    int64_t batch[FL_MAX_DIMS];
    if (fl_broadcast_shape(na - 2, as, nb - 2, bs, &nbatch, batch) != FL_OK)
        return FL_ERR(FL_EINVAL, "matmul: batch dims of shapes %s and %s cannot be broadcast together", SHAPE(sa, a), SHAPE(sb, b));
    int64_t B = 1;
    for (int i = 0; i < nbatch; i++) B *= batch[i];
    /* torch's matmul runs aten::mm or aten::bmm, whose count this is, unless its second operand is a vector: then
     * aten::dot or aten::mv (addmv_), which torch counts none for (matmul_torch_shapes) */
    if (!torch_mv) FL_PROF_FLOPS(2.0 * (double)B * (double)M * (double)N * (double)K);
    int64_t oshape[FL_MAX_DIMS + 2];
    int no = 0;
    for (int i = 0; i < nbatch; i++) oshape[no++] = batch[i];
    if (a->ndim > 1) oshape[no++] = M;
    if (b->ndim > 1) oshape[no++] = N;
    if (no > FL_MAX_DIMS) return FL_ERR(FL_EINVAL, "matmul: result would have more than %d dims", FL_MAX_DIMS);

    fl_dtype dt = cdt == FL_DTYPE_COUNT ? promote(a->dtype, b->dtype) : cdt;
    if (odt == FL_DTYPE_COUNT) odt = dt;
    fl_tensor *ca = NULL, *cb = NULL, *a3 = NULL, *b3 = NULL, *d = NULL, *r = NULL;
    int64_t d3[3] = { B, M, N };
    fl_status st = a->dtype == dt ? (ca = fl_tensor_retain((fl_tensor *)a), FL_OK) : fl_tensor_to(&ca, a, dt);
    if (st == FL_OK) st = b->dtype == dt ? (cb = fl_tensor_retain((fl_tensor *)b), FL_OK) : fl_tensor_to(&cb, b, dt);
    if (st == FL_OK) st = fl_tensor_empty(&d, odt, 3, d3, a->device);
    if (st == FL_OK && B * M * N > 0) {
        if (K == 0) {
            st = dev->fill(d, 0.0);
        } else {
            st = as_batched(&a3, ca, na, as, nbatch, batch, B);
            if (st == FL_OK) st = as_batched(&b3, cb, nb, bs, nbatch, batch, B);
            if (st == FL_OK) st = dev->matmul(d, a3, b3);
        }
    }
    if (st == FL_OK) st = fl_tensor_view(&r, d, no, oshape);
    fl_tensor_release(ca);
    fl_tensor_release(cb);
    fl_tensor_release(a3);
    fl_tensor_release(b3);
    fl_tensor_release(d);
    if (st != FL_OK) return st;
    *out = r;
    return FL_OK;
}

/* ---- factories ---------------------------------------------------------------------------- */

static fl_status check_factory_dtype(fl_dtype dt, const char *op) {
    if ((int)dt < 0 || dt >= FL_DTYPE_COUNT) return FL_ERR(FL_EINVAL, "%s: unknown dtype %d (expected one of %s)", op, (int)dt, fl_dtype_choices());
    if (fl_format(dt)->is_fp8)
        return FL_ERR(FL_EINVAL, "%s: cannot make %s values directly; make fp32 and quantize", op, fl_format(dt)->name);
    return FL_OK;
}

/* Builds an fp32 CPU tensor, lets fill() write its values, converts to dt. Every allocation comes before fill(): a
 * generator's draws happen only where the result is made (as torch allocates before it draws), so a randn that runs
 * out of memory draws nothing, and the binding's retry after a collection draws the same numbers (before, a bf16
 * result that did not fit after the fp32 draws moved the generator on, once per try). */
static fl_status make_f32(fl_tensor **out, int ndim, const int64_t *shape, fl_dtype dt,
                          void (*fill)(void *ctx, float *p, size_t n), void *ctx) {
    fl_tensor *f, *o = NULL;
    if (dt != FL_F32) FL_TRY(fl_tensor_empty(&o, dt, ndim, shape, FL_DEV_CPU));
    fl_status st = fl_tensor_empty(&f, FL_F32, ndim, shape, FL_DEV_CPU);
    if (st != FL_OK) { fl_tensor_release(o); return st; }
    fill(ctx, fl_tensor_data(f), (size_t)fl_tensor_numel(f));
    if (!o) { *out = f; return FL_OK; }
    st = fl_tensor_copy_(o, f);   /* the device's copy, as fl_tensor_to converts */
    fl_tensor_release(f);
    if (st != FL_OK) { fl_tensor_release(o); return st; }
    *out = o;
    return FL_OK;
}

typedef struct { double start, step; } arange_ctx;
static void arange_fill(void *vc, float *p, size_t n) {
    arange_ctx *c = vc;
    for (size_t i = 0; i < n; i++) p[i] = (float)(c->start + (double)i * c->step);
}

fl_status fl_arange(fl_tensor **out, double start, double end, double step, fl_dtype dt) {
    *out = NULL;
    FL_TRY(check_factory_dtype(dt, "arange"));
    if (step == 0 || !isfinite(step) || !isfinite(start) || !isfinite(end))
        return FL_ERR(FL_EINVAL, "arange: start, end and step must be finite and step nonzero, got %g, %g, %g", start, end, step);
    double cnt = ceil((end - start) / step);
    if (cnt < 0)   /* torch's refusal: an empty result would hide the swapped bounds or the step's sign */
        return FL_ERR(FL_EINVAL, "arange: upper bound and lower bound inconsistent with step sign (start %g, end %g, "
                      "step %g)", start, end, step);
    if (cnt > 1e15) return FL_ERR(FL_EINVAL, "arange: %g elements is too many", cnt);
    int64_t n = (int64_t)cnt;
    arange_ctx c = { start, step };
    return make_f32(out, 1, &n, dt, arange_fill, &c);
}

/* digits (uniform only; 0: fp32): the draws of a bf16 or fp16 tensor on the grid of 2^-digits (8 and 11, the
 * dtype's significand), as torch draws at the dtype's precision: rounded from fp32's 24 bits, the values just
 * under 1 became 1.0 (2080 of a million in bf16), outside U[0, 1). */
typedef struct { fl_rng *r; bool normal; int digits; } rng_ctx;
static void rng_fill(void *vc, float *p, size_t n) {
    rng_ctx *c = vc;
    if (c->normal) fl_rng_normal(c->r, p, n, 0.0f, 1.0f);
    else fl_rng_uniform(c->r, p, n, 0.0f, 1.0f);
    if (!c->normal && c->digits > 0) {
        const float up = ldexpf(1.0f, c->digits), down = ldexpf(1.0f, -c->digits);
        for (size_t i = 0; i < n; i++) p[i] = floorf(p[i] * up) * down;
    }
}

fl_status fl_rand(fl_tensor **out, fl_rng *r, int ndim, const int64_t *shape, fl_dtype dt) {
    *out = NULL;
    FL_TRY(check_factory_dtype(dt, "rand"));
    rng_ctx c = { r ? r : fl_default_rng(), false, dt == FL_F32 ? 0 : fl_format(dt)->mant_bits + 1 };
    return make_f32(out, ndim, shape, dt, rng_fill, &c);
}

fl_status fl_randn(fl_tensor **out, fl_rng *r, int ndim, const int64_t *shape, fl_dtype dt) {
    *out = NULL;
    FL_TRY(check_factory_dtype(dt, "randn"));
    rng_ctx c = { r ? r : fl_default_rng(), true, 0 };
    return make_f32(out, ndim, shape, dt, rng_fill, &c);
}

/* The largest integer every smaller one of which dt holds exactly: 2^(mantissa bits + 1) (fp32 2^24, bf16 256,
 * fp16 2048). */
static int64_t exact_ints(fl_dtype dt) { return (int64_t)1 << (fl_format(dt)->mant_bits + 1); }

typedef struct { fl_rng *r; int64_t lo, hi; } int_ctx;
static void int_fill(void *vc, float *p, size_t n) {
    int_ctx *c = vc;
    fl_rng_integers(c->r, p, n, c->lo, c->hi);
}

fl_status fl_randint(fl_tensor **out, fl_rng *r, int64_t low, int64_t high, int ndim, const int64_t *shape,
                     fl_dtype dt) {
    *out = NULL;
    FL_TRY(check_factory_dtype(dt, "randint"));
    if (high <= low)
        return FL_ERR(FL_EINVAL, "randint: high (%lld) must be greater than low (%lld): the values are in [low, high)",
                      (long long)high, (long long)low);
    const int64_t lim = exact_ints(dt);
    if (low < -lim || high - 1 > lim)
        return FL_ERR(FL_EINVAL,
                      "randint: [%lld, %lld) holds integers %s cannot hold exactly (it holds every integer in "
                      "[-%lld, %lld]%s)", (long long)low, (long long)high, fl_format(dt)->name, (long long)lim,
                      (long long)lim, dt == FL_F32 ? "" : "; use fp32");
    int_ctx c = { r ? r : fl_default_rng(), low, high };
    return make_f32(out, ndim, shape, dt, int_fill, &c);
}

static void perm_fill(void *vc, float *p, size_t n) { fl_rng_permutation(vc, p, n); }

fl_status fl_randperm(fl_tensor **out, fl_rng *r, int64_t n, fl_dtype dt) {
    *out = NULL;
    FL_TRY(check_factory_dtype(dt, "randperm"));
    if (n < 0) return FL_ERR(FL_EINVAL, "randperm: n must be >= 0, got %lld", (long long)n);
    if (n > exact_ints(dt))
        return FL_ERR(FL_EINVAL, "randperm: n = %lld: %s holds the integers up to %lld exactly%s", (long long)n,
                      fl_format(dt)->name, (long long)exact_ints(dt), dt == FL_F32 ? "" : "; use fp32");
    return make_f32(out, 1, &n, dt, perm_fill, r ? r : fl_default_rng());
}

/* ---- quantization ------------------------------------------------------------------------- */

void fl_quant_opts_default(fl_quant_opts *o) {
    o->scale = 0;
    o->amax = 0;
    o->margin = 0;
    o->axis = -1;
    o->overflow = FL_SATURATE;
}

fl_status fl_quantize(fl_tensor **out, const fl_tensor *src, fl_dtype fmt, const fl_quant_opts *opts) {
    char sa[200];
    *out = NULL;
    FL_PROF_SCOPE("quantize"); FL_PROF_SHAPES(src);
    fl_quant_opts o;
    if (opts) o = *opts; else fl_quant_opts_default(&o);
    if ((int)fmt < 0 || fmt >= FL_DTYPE_COUNT || !fl_format(fmt)->is_fp8)
        return FL_ERR(FL_EINVAL, "quantize: target must be e4m3 or e5m2, got %s",
                      (int)fmt >= 0 && fmt < FL_DTYPE_COUNT ? fl_format(fmt)->name : "an unknown dtype");
    if (fl_format(src->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "quantize: source is already %s; dequantize it first", fl_format(src->dtype)->name);
    if (o.axis < -1 || o.axis >= src->ndim)
        return FL_ERR(FL_EINVAL, "quantize: axis %d out of range for shape %s (expected -1 for per-tensor, or 0..%d)",
                      o.axis, SHAPE(sa, src), src->ndim - 1);
    if (o.overflow != FL_SATURATE && o.overflow != FL_IEEE)
        return FL_ERR(FL_EINVAL, "quantize: unknown overflow policy %d", (int)o.overflow);
    if (o.scale > 0 && !isfinite(o.scale)) return FL_ERR(FL_EINVAL, "quantize: scale must be finite, got %g", (double)o.scale);
    if (isnan(o.scale) || isnan(o.amax)) return FL_ERR(FL_EINVAL, "quantize: scale and amax must not be NaN");
    const fl_device *dev;
    FL_TRY(get_device(src, "quantize", &dev));
    FL_TRY(need_entry((const void *)dev->quantize, dev, "quantize"));
    int64_t ns = o.axis >= 0 ? src->shape[o.axis] : 1;
    /* an empty tensor's axis may be as long as any size (an expand to [2^62, 2, 0]): the byte count wrapped to 0 */
    if (ns > FL_MAX_NUMEL)
        return FL_ERR(FL_EINVAL, "quantize: too large: %lld scales, one per index of the axis (limit %lld)",
                      (long long)ns, (long long)FL_MAX_NUMEL);
    float *scales = malloc((size_t)(ns ? ns : 1) * sizeof(float));
    if (!scales) return FL_ERR(FL_ENOMEM, "quantize: out of memory for %lld scales", (long long)ns);
    fl_tensor *c = NULL, *r = NULL;
    fl_status st = fl_tensor_contiguous(&c, src);
    if (st == FL_OK) {
        if (o.scale > 0) {
            for (int64_t i = 0; i < ns; i++) scales[i] = o.scale;
        } else if (o.amax > 0) {
            float s = fl_scale_from_amax(o.amax, fmt, o.margin, 1.0f);
            for (int64_t i = 0; i < ns; i++) scales[i] = s;
        } else {
            st = need_entry((const void *)dev->amax, dev, "amax");
            if (st == FL_OK && fl_tensor_numel(c) > 0) st = dev->amax(c, o.axis, scales);
            else for (int64_t i = 0; i < ns; i++) scales[i] = 0;
            /* An all-zero tensor or row (amax 0) keeps scale 1. */
            for (int64_t i = 0; st == FL_OK && i < ns; i++) scales[i] = fl_scale_from_amax(scales[i], fmt, o.margin, 1.0f);
        }
    }
    if (st == FL_OK) st = fl_tensor_empty(&r, fmt, src->ndim, src->shape, src->device);
    if (st == FL_OK && o.axis >= 0) {
        fl_tensor_release(r->scale_inv);
        r->scale_inv = NULL;
        st = fl_tensor_empty(&r->scale_inv, FL_F32, 1, &ns, src->device);
        r->scale_axis = o.axis;
    }
    if (st == FL_OK) st = dev->quantize(r, c, scales, o.axis, o.overflow);
    free(scales);
    fl_tensor_release(c);
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

fl_status fl_dequantize(fl_tensor **out, const fl_tensor *q, fl_dtype dt) {
    *out = NULL;
    FL_PROF_SCOPE("dequantize"); FL_PROF_SHAPES(q);
    if (!fl_format(q->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "dequantize: expected an e4m3 or e5m2 tensor, got %s", fl_format(q->dtype)->name);
    if ((int)dt < 0 || dt >= FL_DTYPE_COUNT || fl_format(dt)->is_fp8)
        return FL_ERR(FL_EINVAL, "dequantize: target must be fp32, bf16 or fp16");
    if (!q->scale_inv) return FL_ERR(FL_EINVAL, "dequantize: %s tensor has no scale_inv", fl_format(q->dtype)->name);
    const fl_device *dev;
    FL_TRY(get_device(q, "dequantize", &dev));
    FL_TRY(need_entry((const void *)dev->dequantize, dev, "dequantize"));
    fl_tensor *c = NULL, *r = NULL;
    fl_status st = fl_tensor_contiguous(&c, q);
    if (st == FL_OK) st = fl_tensor_empty(&r, dt, q->ndim, q->shape, q->device);
    if (st == FL_OK && fl_tensor_numel(r) > 0) st = dev->dequantize(r, c);
    fl_tensor_release(c);
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}
