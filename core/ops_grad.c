/* ops_grad.c — the differentiable front of the generic ops (ops.h): each runs its history-free half
 * (ops_raw.h, tensor.c) and, when grad mode is on and an input requires grad, records a node whose
 * backward is defined next to it. Gradients are fp32. */
#include "ops_raw.h"
#include "autograd.h"
#include "device.h"
#include "profiler.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE(buf, t) fl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* g (full shape) summed down to input i's shape into gin[i]; takes over the caller's reference to g. */
static fl_status reduce_into(fl_tensor **gin, fl_tensor *g, const fl_tensor *in) {
    fl_status st = fl_sum_to_shape(gin, g, in->ndim, in->shape);
    fl_tensor_release(g);
    return st;
}

/* ---- binary ------------------------------------------------------------------------------- */

/* maximum/minimum's gradient for x against y, torch's rule: 0 where x loses (lose(x, y): LT for maximum, GT for
 * minimum), g/2 where they tie, g otherwise (a NaN on either side included: both operands get it all). */
/* out = v where m is nonzero, +0 elsewhere: a selection, not v·m, so that an inf or NaN in the gradient stays out of
 * the elements that did not take it (torch's masked_fill and where in these backwards) */
/* with_flops: fp8lab runs one op of torch's as several (x·x for torch's x.pow(2), where's select and its +0 for
 * at::where, a product of two masks for a logical and): a scope named as torch's op holds them, so an autograd node
 * that counts its products (node_counts_flops, core/autograd.c) counts none there, as torch counts none for aten::pow,
 * aten::where or aten::logical_and (stop 102). The ops inside stay the same, bit for bit. */
#define AS_TORCH_OP(name, ...) FL_PROF_SCOPE(name); FL_PROF_SHAPES(__VA_ARGS__)
/* with_flops: where fp8lab's formula divides and torch's multiplies or adds (s / x's backward, asin's, acos's), the
 * op runs in a scope named as torch's aten::mul or aten::add that counts as torch counts that call, its first input's
 * elements (n), inside a node that counts its products (node_counts_flops): torch's rows, fp8lab's arithmetic
 * (stop 103; docs/robustness.md, "The profiler's FLOPs and the norms' edges, the rest (stop 103)") */
#define AS_TORCH_COUNTED_OP(name, n, ...) AS_TORCH_OP(name, __VA_ARGS__); FL_PROF_CALLED_FLOPS(n)

static fl_status masked_grad(fl_tensor **out, const fl_tensor *m, const fl_tensor *v) {
    AS_TORCH_OP("where", m, NULL, v);   /* torch's at::where(cond, zeros, v) */
    fl_tensor *u = NULL;
    fl_status st = fl_binary_raw(&u, FL_OP_WHERE, m, v);
    if (st == FL_OK) st = fl_binary_scalar_raw(out, FL_OP_ADD, u, 0.0, false);   /* -0 + 0 = +0 */
    fl_tensor_release(u);
    return st;
}

/* torch's sgn(x): ±1, and +0 at a NaN and at ±0 (fp8lab's sign gives NaN and ±0 there). The +0 comes from adding
 * +0, which turns only -0 into +0. One event, torch's aten::sgn (with_flops: its add counts none). */
static fl_status torch_sgn(fl_tensor **out, const fl_tensor *x) {
    AS_TORCH_OP("sgn", x);
    fl_tensor *sg = NULL, *ok = NULL, *w = NULL;
    fl_status st = fl_unary_raw(&sg, FL_OP_SIGN, x);
    if (st == FL_OK) st = fl_binary_raw(&ok, FL_OP_EQ, x, x);
    if (st == FL_OK) st = fl_binary_raw(&w, FL_OP_WHERE, ok, sg);   /* sg where x == x, -0 elsewhere */
    if (st == FL_OK) st = fl_binary_scalar_raw(out, FL_OP_ADD, w, 0.0, false);
    fl_tensor_release(sg);
    fl_tensor_release(ok);
    fl_tensor_release(w);
    return st;
}

static fl_status select_grad(fl_tensor **out, const fl_tensor *g, const fl_tensor *x, const fl_tensor *y, fl_binop lose) {
    fl_tensor *l = NULL, *tie = NULL, *m = NULL, *k = NULL;
    fl_status st = fl_binary_raw(&l, lose, x, y);
    if (st == FL_OK) st = fl_binary_raw(&tie, FL_OP_EQ, x, y);
    if (st == FL_OK) st = fl_binary_scalar_raw(&m, FL_OP_MUL, tie, 0.5, false);
    if (st == FL_OK) st = fl_binary_raw(&k, FL_OP_ADD, l, m);                      /* what x gives up */
    if (st == FL_OK) { fl_tensor_release(m); m = NULL; st = fl_binary_scalar_raw(&m, FL_OP_SUB, k, 1.0, true); }
    if (st == FL_OK) { fl_tensor_release(k); k = NULL; st = fl_binary_raw(&k, FL_OP_MUL, g, m); }
    if (st == FL_OK) st = masked_grad(out, m, k);
    fl_tensor_release(l);
    fl_tensor_release(tie);
    fl_tensor_release(m);
    fl_tensor_release(k);
    return st;
}

/* atan2(y, x)'s gradients, torch's: g·x/(x² + y²) for y, -g·y/(x² + y²) for x (want: the one for y when for_y) */
/* g·x/(y²+x²) for y, -g·y/(y²+x²) for x; 0 (-0 for x) where y² + x² is 0, as torch's (0/0 there was NaN: at (0, 0), or
 * where both squares underflow) */
static fl_status atan2_grad(fl_tensor **out, const fl_tensor *g, const fl_tensor *y, const fl_tensor *x, bool for_y) {
    fl_tensor *yy = NULL, *xx = NULL, *s = NULL, *q = NULL, *z = NULL, *s1 = NULL, *keep = NULL, *r = NULL;
    fl_status st = fl_binary_raw(&yy, FL_OP_MUL, y, y);
    if (st == FL_OK) st = fl_binary_raw(&xx, FL_OP_MUL, x, x);
    if (st == FL_OK) st = fl_binary_raw(&s, FL_OP_ADD, yy, xx);
    if (st == FL_OK) st = fl_binary_scalar_raw(&z, FL_OP_EQ, s, 0.0, false);        /* 1 where the sum is 0 */
    if (st == FL_OK) st = fl_binary_raw(&s1, FL_OP_ADD, s, z);                       /* ... there divided by 1 */
    if (st == FL_OK) st = fl_binary_scalar_raw(&keep, FL_OP_SUB, z, 1.0, true);      /* 1 - z */
    if (st == FL_OK) st = fl_binary_raw(&q, FL_OP_MUL, g, for_y ? x : y);
    if (st == FL_OK) { fl_tensor_release(yy); yy = NULL; st = fl_binary_raw(&yy, FL_OP_DIV, q, s1); }
    if (st == FL_OK) st = fl_binary_raw(&r, FL_OP_MUL, yy, keep);
    if (st == FL_OK) st = for_y ? (*out = fl_tensor_retain(r), FL_OK) : fl_unary_raw(out, FL_OP_NEG, r);
    fl_tensor *all[] = { yy, xx, s, q, z, s1, keep, r };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fl_tensor_release(all[i]);
    return st;
}

/* torch's floor division of floats (div_floor_floating, Python's //), in fp32: d = (a − fmod(a, b)) / b, one less
 * where the fmod is nonzero with a sign other than b's, rounded to the nearest whole number (d is one up to its
 * rounding); a/b where b is 0. It is not floor(a/b): 1/0.1 rounds up to 10 in fp32 while 1 // 0.1 is 9 (the 0.1
 * of fp32 is a little above 0.1), and -1.5 // inf is -1 where floor(-1.5/inf) is -0. */
static fl_status floor_div(fl_tensor **out, const fl_tensor *a0, const fl_tensor *b0) {
    fl_tensor *a = NULL, *b = NULL, *m = NULL, *d = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *off = NULL, *f = NULL;
    fl_tensor *z = NULL, *q = NULL;
    fl_status st = a0->dtype == FL_F32 ? (a = fl_tensor_retain((fl_tensor *)a0), FL_OK) : fl_tensor_to(&a, a0, FL_F32);
    if (st == FL_OK) st = b0->dtype == FL_F32 ? (b = fl_tensor_retain((fl_tensor *)b0), FL_OK) : fl_tensor_to(&b, b0, FL_F32);
    if (st == FL_OK) st = fl_binary_raw(&m, FL_OP_FMOD, a, b);
    if (st == FL_OK) st = fl_binary_raw(&t1, FL_OP_SUB, a, m);
    if (st == FL_OK) st = fl_binary_raw(&d, FL_OP_DIV, t1, b);                        /* (a − mod) / b */
    if (st == FL_OK) { fl_tensor_release(t1); t1 = NULL; st = fl_binary_scalar_raw(&t1, FL_OP_LT, b, 0.0, false); }
    if (st == FL_OK) st = fl_binary_scalar_raw(&t2, FL_OP_LT, m, 0.0, false);
    if (st == FL_OK) st = fl_binary_raw(&t3, FL_OP_NE, t1, t2);                       /* the signs differ */
    if (st == FL_OK) { fl_tensor_release(t1); t1 = NULL; st = fl_binary_scalar_raw(&t1, FL_OP_NE, m, 0.0, false); }
    if (st == FL_OK) st = fl_binary_raw(&off, FL_OP_MUL, t1, t3);
    if (st == FL_OK) { fl_tensor_release(t1); t1 = NULL; st = fl_binary_raw(&t1, FL_OP_SUB, d, off); }
    if (st == FL_OK) st = fl_unary_raw(&f, FL_OP_FLOOR, t1);
    if (st == FL_OK) { fl_tensor_release(t2); t2 = NULL; st = fl_binary_raw(&t2, FL_OP_SUB, t1, f); }
    if (st == FL_OK) { fl_tensor_release(t3); t3 = NULL; st = fl_binary_scalar_raw(&t3, FL_OP_GT, t2, 0.5, false); }
    if (st == FL_OK) { fl_tensor_release(t2); t2 = NULL; st = fl_binary_raw(&t2, FL_OP_ADD, f, t3); }   /* rounded */
    /* the where() ops below leave -0 where their mask is 0, which the sum of a pair of them takes away (x + -0 = x) */
    if (st == FL_OK) st = fl_binary_raw(&q, FL_OP_DIV, a, b);
    /* a zero quotient takes a/b's sign (torch's copysign(0, a / b)) */
    if (st == FL_OK) { fl_tensor_release(d); d = NULL; st = fl_binary_scalar_raw(&d, FL_OP_EQ, t2, 0.0, false); }
    if (st == FL_OK) { fl_tensor_release(t1); t1 = NULL; st = fl_binary_scalar_raw(&t1, FL_OP_MUL, q, 0.0, false); }
    if (st == FL_OK) { fl_tensor_release(t3); t3 = NULL; st = fl_binary_raw(&t3, FL_OP_WHERE, d, t1); }
    if (st == FL_OK) { fl_tensor_release(m); m = NULL; st = fl_binary_scalar_raw(&m, FL_OP_SUB, d, 1.0, true); }
    if (st == FL_OK) { fl_tensor_release(f); f = NULL; st = fl_binary_raw(&f, FL_OP_WHERE, m, t2); }
    if (st == FL_OK) { fl_tensor_release(t2); t2 = NULL; st = fl_binary_raw(&t2, FL_OP_ADD, t3, f); }
    /* b = 0: a/b (±inf, or NaN at 0/0), as torch's */
    if (st == FL_OK) st = fl_binary_scalar_raw(&z, FL_OP_EQ, b, 0.0, false);
    if (st == FL_OK) { fl_tensor_release(t1); t1 = NULL; st = fl_binary_raw(&t1, FL_OP_WHERE, z, q); }
    if (st == FL_OK) { fl_tensor_release(t3); t3 = NULL; st = fl_binary_scalar_raw(&t3, FL_OP_SUB, z, 1.0, true); }
    if (st == FL_OK) { fl_tensor_release(f); f = NULL; st = fl_binary_raw(&f, FL_OP_WHERE, t3, t2); }
    if (st == FL_OK) st = fl_binary_raw(out, FL_OP_ADD, t1, f);
    fl_tensor *all[] = { a, b, m, d, t1, t2, t3, off, f, z, q };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fl_tensor_release(all[i]);
    return st;
}

/* fmod's and remainder's gradient for the divisor, torch's: -g·trunc(a/b) (fmod) or -g·(a // b) (remainder: torch's
 * floor division, which the remainder's value a − (a // b)·b is made of) */
static fl_status divisor_grad(fl_tensor **out, const fl_tensor *g, const fl_tensor *a, const fl_tensor *b,
                              fl_binop op) {
    fl_tensor *q = NULL, *r = NULL, *p = NULL;
    fl_status st = FL_OK;
    if (op == FL_OP_FMOD) {
        st = fl_binary_raw(&q, FL_OP_DIV, a, b);
        if (st == FL_OK) st = fl_unary_raw(&r, FL_OP_TRUNC, q);
    } else {
        st = floor_div(&r, a, b);
    }
    if (st == FL_OK) st = fl_binary_raw(&p, FL_OP_MUL, g, r);
    if (st == FL_OK) st = fl_unary_raw(out, FL_OP_NEG, p);
    fl_tensor_release(q);
    fl_tensor_release(r);
    fl_tensor_release(p);
    return st;
}

/* a^b's gradient for the exponent, torch's: g·(a^b·ln a), but g·0 where a = 0 and b >= 0 (0^b is 0 or 1 there, and
 * ln 0 = -inf would make it NaN); a negative base gives NaN (ln a), as torch's */
static fl_status pow_exponent_grad(fl_tensor **out, const fl_tensor *g, const fl_tensor *a, const fl_tensor *b) {
    fl_tensor *r = NULL, *la = NULL, *p = NULL, *za = NULL, *nb = NULL, *c = NULL, *m = NULL, *d = NULL;
    fl_status st = fl_binary_raw(&r, FL_OP_POW, a, b);
    if (st == FL_OK) st = fl_unary_raw(&la, FL_OP_LOG, a);
    if (st == FL_OK) st = fl_binary_raw(&p, FL_OP_MUL, r, la);
    if (st == FL_OK) st = fl_binary_scalar_raw(&za, FL_OP_EQ, a, 0.0, false);
    if (st == FL_OK) st = fl_binary_scalar_raw(&nb, FL_OP_GE, b, 0.0, false);
    if (st == FL_OK) { AS_TORCH_OP("logical_and", za, nb);
                       st = fl_binary_raw(&c, FL_OP_MUL, za, nb); }                /* 1 where a = 0 and b >= 0 */
    if (st == FL_OK) st = fl_binary_scalar_raw(&m, FL_OP_SUB, c, 1.0, true);      /* 1 − c */
    if (st == FL_OK) st = masked_grad(&d, m, p);
    if (st == FL_OK) st = fl_binary_raw(out, FL_OP_MUL, g, d);
    fl_tensor *all[] = { r, la, p, za, nb, c, m, d };
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) fl_tensor_release(all[k]);
    return st;
}

static fl_status binary_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    fl_binop op = (fl_binop)n->iargs[0];
    const fl_tensor *a = n->saved[0], *b = n->saved[1];
    for (int i = 0; i < 2; i++) {
        if (!fl_node_input_needs_grad(n, i)) continue;
        fl_tensor *t = NULL, *u = NULL, *v = NULL;
        fl_status st = FL_OK;
        switch (op) {
        case FL_OP_ADD: t = fl_tensor_retain((fl_tensor *)g); break;
        case FL_OP_SUB:
            if (i == 0) t = fl_tensor_retain((fl_tensor *)g);
            else st = fl_unary_raw(&t, FL_OP_NEG, g);
            break;
        case FL_OP_MUL: st = fl_binary_raw(&t, FL_OP_MUL, g, i == 0 ? b : a); break;
        case FL_OP_DIV:
            if (i == 0) { st = fl_binary_raw(&t, FL_OP_DIV, g, b); break; }
            /* d(a/b)/db = -a/b², as torch makes it: -g·((a/b)/b); b² would overflow (|b| > 2^64) or underflow
             * (|b| < 2^-63) where the gradient itself is finite */
            st = fl_binary_raw(&u, FL_OP_DIV, a, b);
            if (st == FL_OK) st = fl_binary_raw(&v, FL_OP_DIV, u, b);
            if (st == FL_OK) {
                fl_tensor *w = NULL;
                st = fl_binary_raw(&w, FL_OP_MUL, g, v);
                if (st == FL_OK) st = fl_unary_raw(&t, FL_OP_NEG, w);
                fl_tensor_release(w);
            }
            break;
        case FL_OP_MAXIMUM:
        case FL_OP_MINIMUM:
            st = select_grad(&t, g, i == 0 ? a : b, i == 0 ? b : a, op == FL_OP_MAXIMUM ? FL_OP_LT : FL_OP_GT);
            break;
        case FL_OP_WHERE:   /* the mask takes none; the values take g where the mask is nonzero, +0 elsewhere */
            if (i == 0) st = fl_tensor_zeros(&t, FL_F32, g->ndim, g->shape, g->device);
            else {
                st = fl_binary_raw(&u, FL_OP_WHERE, a, g);
                if (st == FL_OK) st = fl_binary_scalar_raw(&t, FL_OP_ADD, u, 0.0, false);   /* -0 + 0 = +0 */
            }
            break;
        case FL_OP_POW:   /* d(a^b)/da = b·a^(b-1), 0 where b = 0 (torch's rule: 0·a^-1 would be NaN at a = 0, so
                           * the exponent there is b - 1 + 1 = 0); d(a^b)/db = a^b·ln a, 0 where a = 0 and b >= 0 */
            if (i == 1) { st = pow_exponent_grad(&t, g, a, b); break; }
            {   /* b - 1, 0 where b = 0: torch's exponent - 1 (aten::sub; its where(exponent == 0, ...) at the end) */
                AS_TORCH_OP("sub", b, NULL, NULL);
                st = fl_binary_scalar_raw(&u, FL_OP_EQ, b, 0.0, false);
                if (st == FL_OK) st = fl_binary_raw(&v, FL_OP_ADD, b, u);
                if (st == FL_OK) { fl_tensor_release(u); u = NULL; st = fl_binary_scalar_raw(&u, FL_OP_SUB, v, 1.0, false); }
            }
            if (st == FL_OK) { fl_tensor_release(v); v = NULL; st = fl_binary_raw(&v, FL_OP_POW, a, u); }
            if (st == FL_OK) { fl_tensor_release(u); u = NULL; st = fl_binary_raw(&u, FL_OP_MUL, v, b); }
            if (st == FL_OK) st = fl_binary_raw(&t, FL_OP_MUL, g, u);
            break;
        case FL_OP_ATAN2: st = atan2_grad(&t, g, a, b, i == 0); break;
        case FL_OP_FMOD:
        case FL_OP_REMAINDER:   /* the dividend's is g; the divisor's -g·trunc (floor) of the quotient */
            if (i == 0) t = fl_tensor_retain((fl_tensor *)g);
            else st = divisor_grad(&t, g, a, b, op);
            break;
        default: break;
        }
        fl_tensor_release(u);
        fl_tensor_release(v);
        if (st != FL_OK) { fl_tensor_release(t); return st; }
        FL_TRY(reduce_into(&gin[i], t, n->inputs[i]));
    }
    return FL_OK;
}

/* Comparisons have no gradient: their results carry no history. */
static const char *const binary_names[FL_BINOP_COUNT] = {
    "AddBackward", "SubBackward", "MulBackward", "DivBackward", "MaximumBackward", "MinimumBackward", "PowBackward",
    "WhereBackward", [FL_OP_ATAN2] = "Atan2Backward", [FL_OP_FMOD] = "FmodBackward",
    [FL_OP_REMAINDER] = "RemainderBackward", [FL_OP_HYPOT] = "HypotBackward" };

fl_status fl_binary(fl_tensor **out, fl_binop op, const fl_tensor *a, const fl_tensor *b) {
    if (op == FL_OP_HYPOT) return fl_hypot(out, a, b);   /* its node keeps both operands, as torch's */
    const fl_tensor *ins[2] = { a, b };
    bool record = !fl_binop_is_comparison(op) && fl_any_requires_grad(2, ins);
    *out = NULL;
    FL_TRY(fl_binary_raw(out, op, a, b));
    if (!record) return FL_OK;
    fl_node *n;
    FL_TRY(fl_autograd_record(out, &n, binary_names[op], binary_bwd, 2, ins));
    n->iargs[0] = op;
    if (op == FL_OP_MUL || op == FL_OP_DIV || op == FL_OP_MAXIMUM || op == FL_OP_MINIMUM || op == FL_OP_POW ||
        op == FL_OP_WHERE || op == FL_OP_ATAN2 || op == FL_OP_FMOD || op == FL_OP_REMAINDER) {
        fl_node_save(n, 0, a);
        if (op != FL_OP_WHERE) fl_node_save(n, 1, b);   /* where's values: only their shape */
        /* a product's operand is read for the other's gradient only, a quotient's dividend for the divisor's, where's
         * mask for the values' (torch keeps them only then) */
        if (op == FL_OP_MUL) { n->saved_for[0] = 2; n->saved_for[1] = 1; }
        if (op == FL_OP_DIV || op == FL_OP_WHERE) n->saved_for[0] = 2;
    }
    fl_status st = FL_OK;
    /* an operand read only for an input that takes no gradient (h * c, h / c with c constant): neither is kept */
    for (int j = 0; j < 2 && st == FL_OK; j++) st = fl_node_drop_unread(n, j, j);
    /* a sum's or difference's operands and where's values: only their shapes are read */
    if (st == FL_OK && (op == FL_OP_ADD || op == FL_OP_SUB)) st = fl_node_input_stub(n, 0);
    if (st == FL_OK && (op == FL_OP_ADD || op == FL_OP_SUB || op == FL_OP_WHERE)) st = fl_node_input_stub(n, 1);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* ---- hypot ----------------------------------------------------------------------------------------- */

/* |a| and |b| in fp32 (*aa, *bb), and the larger and smaller of them (*m, *n) */
static fl_status hypot_parts(fl_tensor **aa, fl_tensor **bb, fl_tensor **m, fl_tensor **n, const fl_tensor *a,
                             const fl_tensor *b) {
    fl_tensor *u = NULL, *v = NULL;
    fl_status st = fl_unary_raw(&u, FL_OP_ABS, a);   /* (refuses an FP8 operand, as arithmetic does) */
    if (st == FL_OK) st = fl_unary_raw(&v, FL_OP_ABS, b);
    if (st == FL_OK) st = u->dtype == FL_F32 ? (*aa = fl_tensor_retain(u), FL_OK) : fl_tensor_to(aa, u, FL_F32);
    if (st == FL_OK) st = v->dtype == FL_F32 ? (*bb = fl_tensor_retain(v), FL_OK) : fl_tensor_to(bb, v, FL_F32);
    if (st == FL_OK) st = fl_binary_raw(m, FL_OP_MAXIMUM, *aa, *bb);
    if (st == FL_OK) st = fl_binary_raw(n, FL_OP_MINIMUM, *aa, *bb);
    fl_tensor_release(u);
    fl_tensor_release(v);
    return st;
}

/* 1 where m is 0 (*z), m with 1 there (*ms), and √(1 + (n/ms)²) (*s): what the value and the gradient share */
static fl_status hypot_root(fl_tensor **z, fl_tensor **ms, fl_tensor **s, const fl_tensor *m, const fl_tensor *n) {
    fl_tensor *q = NULL, *q2 = NULL, *s1 = NULL;
    fl_status st = fl_binary_scalar_raw(z, FL_OP_EQ, m, 0.0, false);
    if (st == FL_OK) st = fl_binary_raw(ms, FL_OP_ADD, m, *z);
    if (st == FL_OK) st = fl_binary_raw(&q, FL_OP_DIV, n, *ms);
    if (st == FL_OK) st = fl_binary_raw(&q2, FL_OP_MUL, q, q);
    if (st == FL_OK) st = fl_binary_scalar_raw(&s1, FL_OP_ADD, q2, 1.0, false);
    if (st == FL_OK) st = fl_unary_raw(s, FL_OP_SQRT, s1);
    fl_tensor_release(q);
    fl_tensor_release(q2);
    fl_tensor_release(s1);
    return st;
}

/* the gradient of input i: g·(x/ms)/s, +0 where both operands are 0, summed to x's shape. Each factor stays within
 * [0, 1] (x/ms) or [1, √2] (s), so no step under- or overflows where x/h itself is finite: torch's g·x/h is 1 at
 * (1e-45, 1e-45), where the derivative is 0.7071, x/h's h having rounded to 1e-45, and 0 at (3e38, 3e38), where h
 * overflowed (before stop 95 hypot was a graph of ops, which divided by m twice: NaN at (1e-45, 1e-45), -inf at
 * (3e-40, 4e-40)). Beside an infinity: inf/inf = NaN for the infinite operand, finite/inf = 0 for the other. */
static fl_status hypot_grads(const fl_tensor *g, const fl_tensor *a, const fl_tensor *b, const bool need[2],
                             fl_tensor *gt[2]) {
    fl_tensor *aa = NULL, *bb = NULL, *m = NULL, *mn = NULL, *z = NULL, *ms = NULL, *s = NULL, *keep = NULL;
    const fl_tensor *in[2] = { a, b };
    fl_status st = hypot_parts(&aa, &bb, &m, &mn, a, b);
    if (st == FL_OK) st = hypot_root(&z, &ms, &s, m, mn);
    if (st == FL_OK) st = fl_binary_scalar_raw(&keep, FL_OP_SUB, z, 1.0, true);   /* 1 - z */
    for (int i = 0; i < 2 && st == FL_OK; i++) {
        if (!need[i]) continue;
        fl_tensor *x = NULL, *r = NULL, *d = NULL, *k = NULL;
        const fl_tensor *xi = in[i];
        st = xi->dtype == FL_F32 ? (x = fl_tensor_retain((fl_tensor *)xi), FL_OK) : fl_tensor_to(&x, xi, FL_F32);
        if (st == FL_OK) st = fl_binary_raw(&r, FL_OP_DIV, x, ms);
        if (st == FL_OK) st = fl_binary_raw(&d, FL_OP_DIV, r, s);
        if (st == FL_OK) st = masked_grad(&k, keep, d);
        if (st == FL_OK) st = fl_binary_raw(&gt[i], FL_OP_MUL, g, k);
        fl_tensor *all[] = { x, r, d, k };
        for (size_t j = 0; j < sizeof all / sizeof *all; j++) fl_tensor_release(all[j]);
    }
    fl_tensor *all[] = { aa, bb, m, mn, z, ms, s, keep };
    for (size_t j = 0; j < sizeof all / sizeof *all; j++) fl_tensor_release(all[j]);
    return st;
}
static fl_status hypot_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const bool need[2] = { fl_node_input_needs_grad(n, 0), fl_node_input_needs_grad(n, 1) };
    fl_tensor *gt[2] = { NULL, NULL };
    fl_status st = hypot_grads(g, n->saved[0], n->saved[1], need, gt);
    for (int i = 0; i < 2; i++) {
        if (st == FL_OK && gt[i]) { st = reduce_into(&gin[i], gt[i], n->inputs[i]); gt[i] = NULL; }
        fl_tensor_release(gt[i]);
    }
    return st;
}

fl_status fl_hypot(fl_tensor **out, const fl_tensor *a, const fl_tensor *b) {
    const fl_tensor *ins[2] = { a, b };
    *out = NULL;
    /* one elementwise op, correctly rounded to fp32 then to a bf16/fp16 result (as torch's, which computes a reduced
     * operand's hypot in fp32): it was m·√(1 + (n/m)²) in fp32 ops, up to 2 ulp off (stop 95's review) */
    fl_status st = fl_binary_raw(out, FL_OP_HYPOT, a, b);
    if (st != FL_OK || !fl_any_requires_grad(2, ins)) return st;
    fl_node *n;
    FL_TRY(fl_autograd_record(out, &n, "HypotBackward", hypot_bwd, 2, ins));
    fl_node_save(n, 0, a);
    fl_node_save(n, 1, b);
    return FL_OK;
}

/* where(cond, a, b)'s node: inputs a and b, and one byte an element of cond's shape, 1 where cond is 0 (b's
 * elements), as an E4M3 tensor with scale 1 (exact 0 and 1 on any device): torch keeps its bool condition alone. */
static fl_status where_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    fl_tensor *m0 = NULL, *m = NULL, *t = NULL;
    fl_status st = fl_dequantize(&m0, n->saved[0], FL_F32);
    for (int i = 0; i < 2 && st == FL_OK; i++) {
        if (!fl_node_input_needs_grad(n, i)) continue;
        if (i == 0) st = fl_binary_scalar_raw(&m, FL_OP_EQ, m0, 0.0, false);   /* a's: cond nonzero */
        else m = fl_tensor_retain(m0);
        if (st == FL_OK) st = masked_grad(&t, m, g);   /* g where taken, +0 elsewhere: as the two halves' backwards */
        if (st == FL_OK) { st = reduce_into(&gin[i], t, n->inputs[i]); t = NULL; }
        fl_tensor_release(m);
        m = NULL;
    }
    fl_tensor_release(m0);
    return st;
}

fl_status fl_where(fl_tensor **out, const fl_tensor *cond, const fl_tensor *a, const fl_tensor *b) {
    *out = NULL;
    int n;
    int64_t s[FL_MAX_DIMS];
    /* the two halves' checks in their order (where(cond, a), then where(cond == 0, b)), then their sum's */
    fl_tensor *t1 = NULL, *m0 = NULL, *t2 = NULL, *r = NULL, *q = NULL;
    fl_status st = fl_binary_raw(&t1, FL_OP_WHERE, cond, a);
    if (st == FL_OK) st = fl_binary_scalar_raw(&m0, FL_OP_EQ, cond, 0.0, false);
    if (st == FL_OK) st = fl_binary_raw(&t2, FL_OP_WHERE, m0, b);
    if (st == FL_OK && fl_broadcast_shape(t1->ndim, t1->shape, t2->ndim, t2->shape, &n, s) != FL_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", fl_last_error_detail());   /* the message buffer is reused */
        st = FL_ERR(FL_EINVAL, "where: %s", msg);
    }
    /* x + -0 = x, bit for bit (-0 too): each half is -0 where the other chose */
    if (st == FL_OK) st = fl_binary_raw(&r, FL_OP_ADD, t1, t2);
    const fl_dtype dt = a->dtype == b->dtype ? a->dtype : FL_F32;
    if (st == FL_OK && r->dtype != dt) {
        fl_tensor *c = NULL;
        st = fl_tensor_to(&c, r, dt);
        fl_tensor_release(r);
        r = c;
    }
    const fl_tensor *ins[2] = { a, b };
    fl_node *nd = NULL;
    if (st == FL_OK && fl_any_requires_grad(2, ins)) {
        fl_quant_opts o;
        fl_quant_opts_default(&o);
        o.scale = 1.0f;
        st = fl_quantize(&q, m0, FL_E4M3, &o);
        if (st == FL_OK) st = fl_autograd_record(&r, &nd, "WhereBackward", where_bwd, 2, ins);
        if (st == FL_OK) {
            fl_node_save(nd, 0, q);
            st = fl_node_input_stub(nd, 0);   /* a's and b's shapes alone are read */
            if (st == FL_OK) st = fl_node_input_stub(nd, 1);
        }
    }
    fl_tensor *all[] = { t1, m0, t2, q };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fl_tensor_release(all[i]);
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

static fl_status binary_scalar_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    fl_binop op = (fl_binop)n->iargs[0];
    bool first = n->iargs[1] != 0;
    double s = n->dargs[0];
    switch (op) {
    case FL_OP_ADD: gin[0] = fl_tensor_retain((fl_tensor *)g); return FL_OK;
    case FL_OP_SUB: if (!first) { gin[0] = fl_tensor_retain((fl_tensor *)g); return FL_OK; }
                    return fl_unary_raw(&gin[0], FL_OP_NEG, g);
    case FL_OP_MUL: return fl_binary_scalar_raw(&gin[0], FL_OP_MUL, g, s, false);
    case FL_OP_DIV: {
        if (!first) return fl_binary_scalar_raw(&gin[0], FL_OP_DIV, g, s, false);
        /* d(s/a)/da = -s/a², as -s·((g/a)/a): a² would overflow or underflow where the gradient is finite.
         * with_flops: torch's s / a is reciprocal(a) * s, its backward MulBackward0's grad * s and ReciprocalBackward0's
         * -grad * (r * r), three aten::mul of a's size; here the two divisions count as its two products of
         * [a, a] shapes and the product by -s as MulBackward0's (stop 103: before, none) */
        fl_tensor *a2 = NULL, *t = NULL;
        const fl_tensor *x = n->saved[0];
        fl_status st;
        { AS_TORCH_COUNTED_OP("mul", fl_tensor_numel(g), g, x); st = fl_binary_raw(&a2, FL_OP_DIV, g, x); }
        if (st == FL_OK) { AS_TORCH_COUNTED_OP("mul", fl_tensor_numel(a2), a2, x); st = fl_binary_raw(&t, FL_OP_DIV, a2, x); }
        if (st == FL_OK) st = fl_binary_scalar_raw(&gin[0], FL_OP_MUL, t, -s, false);
        fl_tensor_release(a2);
        fl_tensor_release(t);
        return st;
    }
    case FL_OP_WHERE:   /* s first: the mask is the number, x the values (g where s is nonzero); else x is the mask */
        if (first && (float)s != 0.0f) { gin[0] = fl_tensor_retain((fl_tensor *)g); return FL_OK; }
        return fl_tensor_zeros(&gin[0], FL_F32, g->ndim, g->shape, g->device);
    case FL_OP_MAXIMUM:   /* clamp's rule: g where x is at or past the bound (x >= s for maximum) */
    case FL_OP_MINIMUM: {
        fl_tensor *m = NULL;
        fl_status st = fl_binary_scalar_raw(&m, op == FL_OP_MAXIMUM ? FL_OP_GE : FL_OP_LE, n->saved[0], s, false);
        if (st == FL_OK) st = masked_grad(&gin[0], m, g);
        fl_tensor_release(m);
        return st;
    }
    case FL_OP_POW: {
        fl_tensor *t = NULL;
        fl_status st;
        /* x^0 = 1 everywhere: 0, also at x = 0 (torch's rule) */
        if (!first && (float)s == 0.0f) return fl_tensor_zeros(&gin[0], FL_F32, g->ndim, g->shape, g->device);
        if (first && (float)s == 0.0f) {
            /* 0^x: torch's g·(0^x·ln 0, but 0 where x >= 0): 0^x is 0 or 1 there (the saved output <= 1), so -inf·g
             * where x < 0, NaN where x is NaN, and g·0 elsewhere (NaN for a NaN g); 0 everywhere until 2026-12-05 */
            fl_tensor *keep = NULL, *m = NULL, *u = NULL;
            st = fl_binary_scalar_raw(&keep, FL_OP_LE, n->saved[0], 1.0, false);
            if (st == FL_OK) st = fl_binary_scalar_raw(&m, FL_OP_SUB, keep, 1.0, true);   /* 1 − keep */
            if (st == FL_OK) st = fl_binary_scalar_raw(&u, FL_OP_MUL, n->saved[0], -INFINITY, false);
            if (st == FL_OK) st = masked_grad(&t, m, u);   /* the derivative */
            if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_MUL, g, t);
            fl_tensor_release(keep);
            fl_tensor_release(m);
            fl_tensor_release(u);
            fl_tensor_release(t);
            return st;
        }
        /* s as the forward took it, the double (since 7d03f14b: a power rounded once), not its fp32 value: until
         * stop 101 the backward took ln (float)s and x^((float)s − 1), the derivative of another power, so x^1.3's
         * gradient at 1e20 was 1299997.1 (torch 2.15's and float64's 1300000) and 1.0000001^x's at 1e6 1.317e-7
         * (float64's 1.105e-7: the forward's own value times ln of the exponent's fp32 rounding) */
        if (first) {   /* d(s^x)/dx = s^x·ln s, from the saved output */
            st = fl_binary_raw(&t, FL_OP_MUL, g, n->saved[0]);
            if (st == FL_OK) st = fl_binary_scalar_raw(&gin[0], FL_OP_MUL, t, log(s), false);
        } else {       /* d(x^s)/dx = s·x^(s-1) */
            st = fl_binary_scalar_raw(&t, FL_OP_POW, n->saved[0], s - 1.0, false);
            if (st == FL_OK) { fl_tensor *u = t; st = fl_binary_raw(&t, FL_OP_MUL, g, u); fl_tensor_release(u); }
            if (st == FL_OK) st = fl_binary_scalar_raw(&gin[0], FL_OP_MUL, t, s, false);
        }
        fl_tensor_release(t);
        return st;
    }
    case FL_OP_ATAN2: {   /* atan2(s, x) (first) or atan2(x, s), with the number as a 0-d operand */
        fl_tensor *c = NULL;
        fl_status st = fl_tensor_full(&c, FL_F32, 0, NULL, s, n->saved[0]->device);
        if (st == FL_OK) st = first ? atan2_grad(&gin[0], g, c, n->saved[0], false)
                                    : atan2_grad(&gin[0], g, n->saved[0], c, true);
        fl_tensor_release(c);
        return st;
    }
    case FL_OP_HYPOT: {   /* hypot(x, s) = hypot(s, x): x's gradient, the number s (as the op took it, in fp32) 0-d */
        fl_tensor *c = NULL, *gt[2] = { NULL, NULL };
        const bool need[2] = { true, false };
        fl_status st = fl_tensor_full(&c, FL_F32, 0, NULL, (double)(float)s, n->saved[0]->device);
        if (st == FL_OK) st = hypot_grads(g, n->saved[0], c, need, gt);
        if (st == FL_OK) gin[0] = gt[0];
        fl_tensor_release(c);
        return st;
    }
    case FL_OP_FMOD:
    case FL_OP_REMAINDER: {
        if (!first) { gin[0] = fl_tensor_retain((fl_tensor *)g); return FL_OK; }
        fl_tensor *c = NULL;
        fl_status st = fl_tensor_full(&c, FL_F32, 0, NULL, s, n->saved[0]->device);
        if (st == FL_OK) st = divisor_grad(&gin[0], g, c, n->saved[0], op);
        fl_tensor_release(c);
        return st;
    }
    default: return FL_ERR(FL_EINVAL, "autograd: unknown binary op %d", (int)op);
    }
}

fl_status fl_binary_scalar(fl_tensor **out, fl_binop op, const fl_tensor *a, double s, bool scalar_first) {
    FL_TRY(fl_binary_scalar_raw(out, op, a, s, scalar_first));
    if (fl_binop_is_comparison(op) || !fl_any_requires_grad(1, &a)) return FL_OK;
    fl_node *n;
    FL_TRY(fl_autograd_record(out, &n, binary_names[op], binary_scalar_bwd, 1, &a));
    n->iargs[0] = op;
    n->iargs[1] = scalar_first;
    n->dargs[0] = s;
    if ((op == FL_OP_DIV && scalar_first) || op == FL_OP_MAXIMUM || op == FL_OP_MINIMUM ||
        (op == FL_OP_POW && !scalar_first) || op == FL_OP_ATAN2 || op == FL_OP_HYPOT ||
        ((op == FL_OP_FMOD || op == FL_OP_REMAINDER) && scalar_first))
        fl_node_save(n, 0, a);
    else {
        if (op == FL_OP_POW) FL_TRY(fl_node_save_detached(n, 0, *out));
        FL_TRY(fl_node_input_stub(n, 0));   /* no value of a is read: its storage goes when nothing else holds it */
    }
    return FL_OK;
}

/* clamp between two numbers (a bound at -inf / +inf is none: clamp_min, clamp_max): maximum(x, lo) then minimum(.,
 * hi) in one node that keeps x alone, as torch's ClampBackward keeps the input. Its gradient is torch's (2.15 on):
 * the minimum-norm subgradient, the output's gradient where lo < x < hi strictly, none at a bound (as relu's at 0)
 * and none for a NaN x; a missing bound masks nothing (clamp_max lets -inf through). */
static fl_status clamp_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *x = n->saved[0];
    double lo = n->dargs[0], hi = n->dargs[1];
    fl_tensor *m = NULL, *g2 = NULL;
    fl_status st = FL_OK;
    if (hi < INFINITY) {
        st = fl_binary_scalar_raw(&m, FL_OP_LT, x, hi, false);
        if (st == FL_OK) st = masked_grad(&g2, m, g);
        fl_tensor_release(m);
        m = NULL;
    }
    const fl_tensor *cur = g2 ? g2 : g;
    if (st == FL_OK && lo > -INFINITY) {
        st = fl_binary_scalar_raw(&m, FL_OP_GT, x, lo, false);
        if (st == FL_OK) st = masked_grad(&gin[0], m, cur);
    } else if (st == FL_OK) {
        gin[0] = fl_tensor_retain((fl_tensor *)cur);
    }
    fl_tensor_release(m);
    fl_tensor_release(g2);
    return st;
}

fl_status fl_clamp_scalar(fl_tensor **out, const fl_tensor *a, double lo, double hi) {
    *out = NULL;
    /* maximum with −inf and minimum with +inf change no value (a NaN stays NaN): a missing bound takes no pass, and
     * with both, minimum runs in place on maximum's result (two passes over one new tensor; it made a second) */
    fl_status st;
    const fl_device *dev = fl_device_get(a->device);
    if (lo != -INFINITY && hi != INFINITY && dev && dev->clamp && !fl_format(a->dtype)->is_fp8) {
        /* both bounds, on a device with the one-pass clamp: the same bits (FP8 goes below, to be refused) */
        FL_PROF_SCOPE("clamp"); FL_PROF_SHAPES(a, NULL);
        /* a dense a that is not contiguous in memory order, the result with its strides (ops.c's dense_alike) */
        fl_tensor *fo = NULL, *fa = NULL;
        st = fl_tensor_empty_like(out, a, a->dtype);
        if (st == FL_OK && !fl_tensor_is_contiguous(a) && fl_tensor_is_dense(a)) {
            st = fl_tensor_flat(&fo, *out);
            if (st == FL_OK) st = fl_tensor_flat(&fa, a);
        }
        if (st == FL_OK && fl_tensor_numel(*out) > 0) st = dev->clamp(fo ? fo : *out, fa ? fa : a, lo, hi);
        fl_tensor_release(fo);
        fl_tensor_release(fa);
        if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    } else if (lo == -INFINITY && hi != INFINITY) st = fl_binary_scalar_raw(out, FL_OP_MINIMUM, a, hi, false);
    else {   /* (a NaN bound takes its pass: NaN everywhere, as the chain and torch) */
        st = fl_binary_scalar_raw(out, FL_OP_MAXIMUM, a, lo, false);
        fl_tensor *fo = NULL;   /* (a dense result that is not contiguous: its memory, in order) */
        if (st == FL_OK && !fl_tensor_is_contiguous(*out) && fl_tensor_is_dense(*out)) st = fl_tensor_flat(&fo, *out);
        if (st == FL_OK && hi != INFINITY && fl_tensor_numel(*out) > 0)
            st = fl_device_get((*out)->device)->binary_scalar(FL_OP_MINIMUM, fo ? fo : *out, fo ? fo : *out, hi, false);
        fl_tensor_release(fo);
        if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    }
    if (st != FL_OK || !fl_any_requires_grad(1, &a)) return st;
    fl_node *n;
    FL_TRY(fl_autograd_record(out, &n, "ClampBackward", clamp_bwd, 1, &a));
    n->dargs[0] = lo;
    n->dargs[1] = hi;
    fl_node_save(n, 0, a);
    return FL_OK;
}

/* ---- unary -------------------------------------------------------------------------------- */

static fl_status unary_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    fl_unop op = (fl_unop)n->iargs[0];
    const fl_tensor *x = n->saved[0];     /* input (abs, log) or output (exp, sqrt) */
    switch (op) {
    case FL_OP_NEG: return fl_unary_raw(&gin[0], FL_OP_NEG, g);
    case FL_OP_EXP: return fl_binary_raw(&gin[0], FL_OP_MUL, g, x);
    case FL_OP_LOG: return fl_binary_raw(&gin[0], FL_OP_DIV, g, x);
    case FL_OP_SQRT: {
        fl_tensor *t = NULL;
        fl_status st = fl_binary_raw(&t, FL_OP_DIV, g, x);
        if (st == FL_OK) st = fl_binary_scalar_raw(&gin[0], FL_OP_MUL, t, 0.5, false);
        fl_tensor_release(t);
        return st;
    }
    case FL_OP_ABS: {   /* g·sgn(x), torch's: +0·g at x = ±0 and at a NaN (until stop 102 sign(x)·g: NaN at a NaN,
                         * -0·g at -0), so the 1-norm's gradient (norm, dist, pairwise_distance) is 0 at a NaN */
        fl_tensor *sg = NULL;
        fl_status st = torch_sgn(&sg, x);
        if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_MUL, g, sg);
        fl_tensor_release(sg);
        return st;
    }
    case FL_OP_SIGN: return fl_tensor_zeros(&gin[0], FL_F32, g->ndim, g->shape, g->device);   /* flat almost everywhere */
    case FL_OP_TANH:      /* g·(1 - y²), from the output, as torch's tanh_backward rounds it */
    case FL_OP_SIGMOID: { /* g·y·(1 - y) */
        fl_tensor *t = NULL, *u = NULL;
        fl_status st;
        /* fp32 and contiguous (the usual case): the device's one pass, each operation rounded as the three ops
         * below round it (the same bits; a tensor of the input's size written once instead of three times) */
        const fl_device *dev = fl_device_get(x->device);
        if (x->dtype == FL_F32 && g->dtype == FL_F32 && x->device == g->device && dev && dev->act_bwd &&
            fl_shape_equal(x->ndim, x->shape, g->ndim, g->shape) && fl_tensor_is_contiguous(x) &&
            fl_tensor_is_contiguous(g)) {
            FL_TRY(fl_tensor_empty(&gin[0], FL_F32, x->ndim, x->shape, x->device));
            st = dev->act_bwd(op == FL_OP_TANH ? FL_ACT_TANH : FL_ACT_SIGMOID, fl_tensor_data(x), fl_tensor_data(g),
                              fl_tensor_data(gin[0]), fl_tensor_numel(x));
            if (st != FL_OK) { fl_tensor_release(gin[0]); gin[0] = NULL; }
            return st;
        }
        /* tanh: 1 - y², torch's rounding ((1 - y)(1 + y) made tanhshrink's gradient at 1e-6 6e-8, not 1e-12) */
        if (op == FL_OP_TANH) {
            st = fl_binary_raw(&u, FL_OP_MUL, x, x);
            if (st == FL_OK) st = fl_binary_scalar_raw(&t, FL_OP_SUB, u, 1.0, true);   /* 1 - y² */
        } else {
            st = fl_binary_scalar_raw(&u, FL_OP_SUB, x, 1.0, true);                      /* 1 - y */
            if (st == FL_OK) st = fl_binary_raw(&t, FL_OP_MUL, u, x);
        }
        if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_MUL, g, t);
        fl_tensor_release(t);
        fl_tensor_release(u);
        return st;
    }
    case FL_OP_SIN:       /* g·cos x */
    case FL_OP_COS:       /* -g·sin x */
    case FL_OP_ERF:       /* g·(2/√π)·e^(-x²) */
    case FL_OP_LOG1P: {   /* g / (1 + x) */
        fl_tensor *t = NULL, *u = NULL;
        fl_status st;
        if (op == FL_OP_SIN) st = fl_unary_raw(&t, FL_OP_COS, x);
        else if (op == FL_OP_COS) {
            st = fl_unary_raw(&u, FL_OP_SIN, x);
            if (st == FL_OK) st = fl_unary_raw(&t, FL_OP_NEG, u);
        } else if (op == FL_OP_ERF) {   /* torch's 2/√π·exp(-(x.pow(2)))·g: x² its aten::pow, -x² its aten::neg */
            { AS_TORCH_OP("pow", x, NULL); st = fl_binary_raw(&u, FL_OP_MUL, x, x); }
            if (st == FL_OK) st = fl_unary_raw(&t, FL_OP_NEG, u);
            if (st == FL_OK) { fl_tensor_release(u); u = t; t = NULL; st = fl_unary_raw(&t, FL_OP_EXP, u); }
            if (st == FL_OK) { fl_tensor_release(u); u = t; t = NULL;
                               st = fl_binary_scalar_raw(&t, FL_OP_MUL, u, 1.1283791670955126, false); }   /* 2/√π */
        } else {
            st = fl_binary_scalar_raw(&t, FL_OP_ADD, x, 1.0, false);
            if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_DIV, g, t);
            fl_tensor_release(t);
            return st;
        }
        if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_MUL, g, t);
        fl_tensor_release(t);
        fl_tensor_release(u);
        return st;
    }
    case FL_OP_EXPM1: {   /* g·(y + 1), from the output */
        fl_tensor *t = NULL;
        fl_status st = fl_binary_scalar_raw(&t, FL_OP_ADD, x, 1.0, false);
        if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_MUL, g, t);
        fl_tensor_release(t);
        return st;
    }
    case FL_OP_TAN:       /* g·(1 + y²), from the output (torch's) */
    case FL_OP_EXP2: {    /* g·y·ln 2, from the output */
        fl_tensor *t = NULL, *u = NULL;
        fl_status st;
        if (op == FL_OP_TAN) {   /* g·(1 + y.pow(2)): y² torch's aten::pow */
            { AS_TORCH_OP("pow", x, NULL); st = fl_binary_raw(&u, FL_OP_MUL, x, x); }
            if (st == FL_OK) st = fl_binary_scalar_raw(&t, FL_OP_ADD, u, 1.0, false);
        } else {
            st = fl_binary_scalar_raw(&t, FL_OP_MUL, x, 0.6931471805599453, false);
        }
        if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_MUL, g, t);
        fl_tensor_release(t);
        fl_tensor_release(u);
        return st;
    }
    case FL_OP_ASIN:      /* g / √(1 - x²) */
    case FL_OP_ACOS:      /* -g / √(1 - x²) */
    case FL_OP_ATAN:      /* g / (1 + x²) */
    case FL_OP_LOG2:      /* g / (x·ln 2) */
    case FL_OP_LOG10: {   /* g / (x·ln 10) */
        fl_tensor *t = NULL, *u = NULL;
        fl_status st;
        if (op == FL_OP_LOG2 || op == FL_OP_LOG10)
            st = fl_binary_scalar_raw(&t, FL_OP_MUL, x, op == FL_OP_LOG2 ? 0.6931471805599453 : 2.302585092994046,
                                      false);
        else {
            st = fl_binary_raw(&u, FL_OP_MUL, x, x);
            if (st == FL_OK && op == FL_OP_ATAN) st = fl_binary_scalar_raw(&t, FL_OP_ADD, u, 1.0, false);
            else if (st == FL_OK) {
                /* torch's (-self * self + 1).rsqrt() * grad: its aten::add counts x's elements (the same value) */
                { AS_TORCH_COUNTED_OP("add", fl_tensor_numel(u), u, NULL, NULL);
                  st = fl_binary_scalar_raw(&t, FL_OP_SUB, u, 1.0, true); }   /* 1 - x² */
                if (st == FL_OK) { fl_tensor_release(u); u = t; t = NULL; st = fl_unary_raw(&t, FL_OP_SQRT, u); }
                if (st == FL_OK && op == FL_OP_ACOS) {
                    fl_tensor_release(u); u = t; t = NULL;
                    st = fl_unary_raw(&t, FL_OP_NEG, u);
                }
            }
        }
        if (st == FL_OK && (op == FL_OP_ASIN || op == FL_OP_ACOS)) {
            /* torch multiplies g by the rsqrt (aten::mul, g's elements); g / √(1 - x²) rounds once where
             * g·rsqrt(1 - x²) rounds twice: the division stays, counted as torch's product (stop 103) */
            AS_TORCH_COUNTED_OP("mul", fl_tensor_numel(g), g, t);
            st = fl_binary_raw(&gin[0], FL_OP_DIV, g, t);
        } else if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_DIV, g, t);
        fl_tensor_release(t);
        fl_tensor_release(u);
        return st;
    }
    case FL_OP_SINH:      /* g·cosh x */
    case FL_OP_COSH: {    /* g·sinh x */
        fl_tensor *t = NULL;
        fl_status st = fl_unary_raw(&t, op == FL_OP_SINH ? FL_OP_COSH : FL_OP_SINH, x);
        if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_MUL, g, t);
        fl_tensor_release(t);
        return st;
    }
    case FL_OP_RSQRT: {
        /* -g/(2r³), r = √x, from the input: as the graph of 1 / x:sqrt() rounded it (((g/r)/r)·-1 from the division,
         * then /r·0.5 from the root), the same bits. torch's -0.5·g·y³ (y the output) is 1.12 ulp off on average and
         * 5.2 at worst against the exact value; this 0.88 and 4.1 (2^20 x over [e^-55, e^55], g = 1). */
        fl_tensor *r = NULL, *t = NULL, *u = NULL;
        fl_status st = fl_unary_raw(&r, FL_OP_SQRT, x);
        if (st == FL_OK) st = fl_binary_raw(&t, FL_OP_DIV, g, r);
        if (st == FL_OK) st = fl_binary_raw(&u, FL_OP_DIV, t, r);
        fl_tensor_release(t); t = NULL;
        if (st == FL_OK) st = fl_binary_scalar_raw(&t, FL_OP_MUL, u, -1.0, false);
        fl_tensor_release(u); u = NULL;
        if (st == FL_OK) st = fl_binary_raw(&u, FL_OP_DIV, t, r);
        if (st == FL_OK) st = fl_binary_scalar_raw(&gin[0], FL_OP_MUL, u, 0.5, false);
        fl_tensor_release(r); fl_tensor_release(t); fl_tensor_release(u);
        return st;
    }
    case FL_OP_FLOOR: case FL_OP_CEIL: case FL_OP_ROUND: case FL_OP_TRUNC:   /* piecewise constant */
        return fl_tensor_zeros(&gin[0], FL_F32, g->ndim, g->shape, g->device);
    default: return FL_ERR(FL_EINVAL, "autograd: unknown unary op %d", (int)op);
    }
}

static const char *const unary_names[FL_UNOP_COUNT] = {
    "AbsBackward", "NegBackward", "ExpBackward", "LogBackward", "SqrtBackward", "SignBackward", "TanhBackward",
    "SigmoidBackward", "SinBackward", "CosBackward", "FloorBackward", "CeilBackward", "RoundBackward", "TruncBackward",
    "ErfBackward", "Log1PBackward", "Expm1Backward", "TanBackward", "AsinBackward", "AcosBackward", "AtanBackward",
    "SinhBackward", "CoshBackward", "Log2Backward", "Log10Backward", "Exp2Backward", "RsqrtBackward" };

fl_status fl_unary(fl_tensor **out, fl_unop op, const fl_tensor *a) {
    FL_TRY(fl_unary_raw(out, op, a));
    if (!fl_any_requires_grad(1, &a)) return FL_OK;
    fl_node *n;
    FL_TRY(fl_autograd_record(out, &n, unary_names[op], unary_bwd, 1, &a));
    n->iargs[0] = op;
    if (op == FL_OP_ABS || op == FL_OP_LOG || op == FL_OP_SIN || op == FL_OP_COS || op == FL_OP_ERF ||
        op == FL_OP_LOG1P || (op >= FL_OP_ASIN && op <= FL_OP_LOG10) || op == FL_OP_RSQRT) {
        fl_node_save(n, 0, a);
    } else {
        if (op == FL_OP_EXP || op == FL_OP_SQRT || op == FL_OP_TANH || op == FL_OP_SIGMOID || op == FL_OP_EXPM1 ||
            op == FL_OP_TAN || op == FL_OP_EXP2)
            FL_TRY(fl_node_save_detached(n, 0, *out));
        FL_TRY(fl_node_input_stub(n, 0));   /* the output or nothing is read: the input's storage may go */
    }
    return FL_OK;
}

/* ---- reductions --------------------------------------------------------------------------- */

static fl_status reduce_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *in = n->inputs[0];
    bool mean = n->iargs[0] == FL_OP_MEAN;
    int dim = (int)n->iargs[1];
    int64_t count = dim < 0 ? fl_tensor_numel(in) : in->shape[dim];
    double f = mean ? (count ? 1.0 / (double)count : NAN) : 1.0;
    fl_tensor *k = NULL, *e = NULL;
    fl_status st;
    if (dim < 0) {
        /* one element expanded over a's shape (strides 0), as torch's SumBackward0/MeanBackward0 expand theirs:
         * filling a's shape cost a pass over memory that a leaf's .grad += g repeated; the consumers make it
         * a real tensor where they keep it (autograd.c: accumulate, fl_accumulate_grad) */
        float v;
        FL_TRY(fl_tensor_read_f32(g, &v));
        fl_tensor *one = NULL;
        const int64_t none[1] = { 1 };   /* (0-d: no size is read) */
        FL_TRY(fl_tensor_full(&one, FL_F32, 0, none, v * f, in->device));
        st = fl_tensor_expand(&gin[0], one, in->ndim, in->shape);
        fl_tensor_release(one);
        return st;
    }
    int64_t ks[FL_MAX_DIMS];
    for (int i = 0; i < in->ndim; i++) ks[i] = i == dim ? 1 : in->shape[i];
    st = fl_tensor_reshape(&k, g, in->ndim, ks);
    if (st == FL_OK) st = fl_tensor_expand(&e, k, in->ndim, in->shape);
    if (st == FL_OK) st = fl_binary_scalar_raw(&gin[0], FL_OP_MUL, e, f, false);
    fl_tensor_release(k);
    fl_tensor_release(e);
    return st;
}

/* max / min / amax (max |x|): the gradient goes to the elements equal to the result, split evenly among ties
 * (torch's rule for max() and amax; a NaN result takes the NaN elements), times sign(x) for amax (0 at a NaN). */
static fl_status extreme_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *x = n->inputs[0], *r = n->saved[0];
    int op = (int)n->iargs[0], dim = (int)n->iargs[1];
    int64_t ks[FL_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) ks[i] = dim < 0 || i == dim ? 1 : x->shape[i];
    fl_tensor *rk = NULL, *gk = NULL, *xa = NULL, *m = NULL, *rn = NULL, *xn = NULL, *t = NULL, *m2 = NULL, *cnt = NULL,
              *q = NULL, *res = NULL, *s = NULL;
    fl_status st = fl_tensor_reshape(&rk, r, x->ndim, ks);
    if (st == FL_OK) st = fl_tensor_reshape(&gk, g, x->ndim, ks);
    if (st == FL_OK) st = op == FL_OP_AMAX ? fl_unary_raw(&xa, FL_OP_ABS, x) : FL_OK;
    if (st == FL_OK) st = fl_binary_raw(&m, FL_OP_EQ, xa ? xa : x, rk);
    if (st == FL_OK) st = fl_binary_raw(&rn, FL_OP_NE, rk, rk);   /* the result is NaN ... */
    if (st == FL_OK) st = fl_binary_raw(&xn, FL_OP_NE, x, x);     /* ... and these elements are */
    if (st == FL_OK) st = fl_binary_raw(&t, FL_OP_MUL, rn, xn);
    if (st == FL_OK) st = fl_binary_raw(&m2, FL_OP_ADD, m, t);
    if (st == FL_OK) st = fl_reduce_raw(&cnt, FL_OP_SUM, m2, dim < 0 ? FL_ALL_DIMS : dim, false);
    if (st == FL_OK) { fl_tensor_release(t); t = NULL; st = fl_tensor_reshape(&t, cnt, x->ndim, ks); }
    if (st == FL_OK) st = fl_binary_raw(&q, FL_OP_DIV, gk, t);
    if (st == FL_OK) { fl_tensor_release(t); t = NULL; st = fl_binary_raw(&t, FL_OP_MUL, m2, q); }
    if (st == FL_OK) st = masked_grad(&res, m2, t);   /* not m2·q: an inf or NaN g stays off the other elements */
    if (st == FL_OK && op == FL_OP_AMAX) {
        /* torch's sgn(x) (the inf-norm's gradient in a slice holding a NaN is 0 there, where it was NaN until stop
         * 99, and +0 as torch's since stop 101: where's fill and sign(-0) made it -0) */
        st = torch_sgn(&s, x);
        if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_MUL, res, s);
    } else if (st == FL_OK) {
        gin[0] = res;
        res = NULL;
    }
    fl_tensor *all[] = { rk, gk, xa, m, rn, xn, t, m2, cnt, q, res, s };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fl_tensor_release(all[i]);
    return st;
}

fl_status fl_reduce(fl_tensor **out, fl_redop op, const fl_tensor *a, int dim, bool keepdim) {
    FL_TRY(fl_reduce_raw(out, op, a, dim, keepdim));
    if (!fl_any_requires_grad(1, &a)) return FL_OK;
    bool all = dim == FL_ALL_DIMS || a->ndim == 0;
    fl_node *n;
    if (op == FL_OP_MAX || op == FL_OP_MIN || op == FL_OP_AMAX) {
        FL_TRY(fl_autograd_record(out, &n, op == FL_OP_MAX ? "MaxBackward" : op == FL_OP_MIN ? "MinBackward" : "AmaxBackward",
                                  extreme_bwd, 1, &a));
        n->inputs_read = 1u;   /* which elements equal the result: x's values */
        n->iargs[0] = op;
        n->iargs[1] = all ? -1 : (dim < 0 ? dim + a->ndim : dim);
        return fl_node_save_detached(n, 0, *out);
    }
    if (op != FL_OP_SUM && op != FL_OP_MEAN) return FL_OK;
    FL_TRY(fl_autograd_record(out, &n, op == FL_OP_SUM ? "SumBackward" : "MeanBackward", reduce_bwd, 1, &a));
    n->iargs[0] = op;
    n->iargs[1] = all ? -1 : (dim < 0 ? dim + a->ndim : dim);
    n->iargs[2] = keepdim;
    fl_status st = fl_node_input_stub(n, 0);   /* the gradient is spread over a's shape: no value of a is read */
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* Σ a² (SumSquaresBackward): g spread over a's shape (as SumBackward), times a, then doubled: the bits of the graph
 * of a·a then its sum, whose MulBackward gives g·a to each operand and adds the two (g·a + g·a = 2·(g·a) exactly).
 * iargs[0]: dim, or -1 for all. */
static fl_status sum_squares_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *x = n->saved[0];
    int dim = (int)n->iargs[0];
    int64_t ks[FL_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) ks[i] = dim < 0 || i == dim ? 1 : x->shape[i];
    fl_tensor *k = NULL, *e = NULL, *t = NULL;
    fl_status st = fl_tensor_reshape(&k, g, x->ndim, ks);
    if (st == FL_OK) st = fl_tensor_expand(&e, k, x->ndim, x->shape);
    if (st == FL_OK) st = fl_binary_raw(&t, FL_OP_MUL, e, x);
    if (st == FL_OK) st = fl_binary_scalar_raw(&gin[0], FL_OP_MUL, t, 2.0, false);
    fl_tensor_release(k); fl_tensor_release(e); fl_tensor_release(t);
    return st;
}

fl_status fl_sum_squares(fl_tensor **out, const fl_tensor *a, int dim, bool keepdim) {
    FL_TRY(fl_sum_squares_raw(out, a, dim, keepdim));
    if (!fl_any_requires_grad(1, &a)) return FL_OK;
    bool all = dim == FL_ALL_DIMS || a->ndim == 0;
    fl_node *n;
    FL_TRY(fl_autograd_record(out, &n, "SumSquaresBackward", sum_squares_bwd, 1, &a));
    n->iargs[0] = all ? -1 : (dim < 0 ? dim + a->ndim : dim);
    fl_node_save(n, 0, a);
    return FL_OK;
}

/* logsumexp (LogsumexpBackward): exp(a − m) times g / s spread along dim, which the graph of its ops gave (LogBackward
 * g / s, SumBackward's spread, ExpBackward's product with exp(a − m); m had no history). saved: a, m, s; iargs[0]:
 * dim. */
static fl_status logsumexp_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *a = n->saved[0], *m = n->saved[1], *s = n->saved[2];
    fl_tensor *gk = NULL, *q = NULL, *qe = NULL, *d = NULL, *e = NULL;
    fl_status st = fl_tensor_reshape(&gk, g, s->ndim, s->shape);
    if (st == FL_OK) st = fl_binary_raw(&q, FL_OP_DIV, gk, s);
    if (st == FL_OK) st = fl_tensor_expand(&qe, q, a->ndim, a->shape);
    if (st == FL_OK) st = fl_binary_raw(&d, FL_OP_SUB, a, m);
    if (st == FL_OK) st = fl_unary_raw(&e, FL_OP_EXP, d);
    if (st == FL_OK) st = fl_binary_raw(&gin[0], FL_OP_MUL, qe, e);
    fl_tensor *all[] = { gk, q, qe, d, e };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fl_tensor_release(all[i]);
    return st;
}

fl_status fl_logsumexp(fl_tensor **out, const fl_tensor *a, int dim, bool keepdim) {
    fl_tensor *m = NULL, *s = NULL;
    FL_TRY(fl_logsumexp_raw(out, &m, &s, a, dim, keepdim));
    fl_status st = FL_OK;
    if (fl_any_requires_grad(1, &a)) {
        fl_node *n;
        st = fl_autograd_record(out, &n, "LogsumexpBackward", logsumexp_bwd, 1, &a);
        if (st == FL_OK) {
            n->iargs[0] = dim < 0 ? dim + a->ndim : dim;
            fl_node_save(n, 0, a);
            st = fl_node_save_detached(n, 1, m);
            if (st == FL_OK) st = fl_node_save_detached(n, 2, s);
        }
    }
    fl_tensor_release(m);
    fl_tensor_release(s);
    return st;
}

/* max(dim) / min(dim), sort, topk: the values were gathered from a at their indices (fp32, 0-based) along dim, k of
 * them for each place of the other dims (max/min: one, the dim dropped or kept; dim -1: one over all of a, by flat
 * index), and each value's gradient goes whole to its index (torch's MaxBackward for a dim, whose node keeps the
 * indices alone; a tie's other elements take none; sort's and topk's indices are distinct). Scattered on the host,
 * as the indices were made there. iargs[1]: dim, or -1. */
static fl_status index_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *in = n->inputs[0];
    const int dim = (int)n->iargs[1];
    int64_t size = dim < 0 ? fl_tensor_numel(in) : in->shape[dim], outer = 1, inner = 1;
    for (int i = 0; dim >= 0 && i < in->ndim; i++) {
        if (i < dim) outer *= in->shape[i];
        if (i > dim) inner *= in->shape[i];
    }
    const int64_t places = outer * inner, k = places > 0 ? fl_tensor_numel(n->saved[0]) / places : 0;
    fl_tensor *gh = NULL, *gc = NULL, *ih = NULL, *ic = NULL, *z = NULL;
    fl_status st = fl_tensor_to_device(&gh, g, FL_DEV_CPU);
    if (st == FL_OK) st = fl_tensor_contiguous(&gc, gh);
    if (st == FL_OK) st = fl_tensor_to_device(&ih, n->saved[0], FL_DEV_CPU);
    if (st == FL_OK) st = fl_tensor_contiguous(&ic, ih);
    if (st == FL_OK) st = fl_tensor_zeros(&z, FL_F32, in->ndim, in->shape, FL_DEV_CPU);
    if (st == FL_OK) {
        const float *gv = fl_tensor_data(gc), *iv = fl_tensor_data(ic);
        float *zv = fl_tensor_data(z);
        for (int64_t o = 0; o < outer && st == FL_OK; o++)
            for (int64_t r = 0; r < k && st == FL_OK; r++)
                for (int64_t j = 0; j < inner; j++) {
                    const int64_t at = (o * k + r) * inner + j;
                    const float x = iv[at];
                    /* the engine refuses indices written since the forward; this guards the memory whatever else */
                    if (!(x >= 0 && (double)x < (double)size && x == (float)(int64_t)x)) {
                        st = FL_ERR(FL_EINVAL, "%s: index %.9g out of range 0..%lld", n->name, (double)x,
                                    (long long)size - 1);
                        break;
                    }
                    zv[(o * size + (int64_t)x) * inner + j] += gv[at];
                }
    }
    fl_tensor *all[] = { gh, gc, ih, ic };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) fl_tensor_release(all[i]);
    if (st == FL_OK && in->device != FL_DEV_CPU) {
        fl_tensor *d = NULL;
        st = fl_tensor_to_device(&d, z, in->device);
        fl_tensor_release(z);
        z = d;
    }
    if (st != FL_OK) { fl_tensor_release(z); return st; }
    gin[0] = z;
    return FL_OK;
}

fl_status fl_record_index_grad(fl_tensor **values, fl_tensor **indices, const fl_tensor *a, int dim, const char *name,
                               int64_t tag) {
    fl_status st = FL_OK;
    fl_node *n = NULL;
    if (fl_any_requires_grad(1, &a)) {
        st = fl_autograd_record(values, &n, name, index_bwd, 1, &a);
        if (st == FL_OK) {
            n->iargs[0] = tag;
            n->iargs[1] = dim;
            st = fl_node_save_detached(n, 0, *indices);
            if (st == FL_OK) st = fl_node_input_stub(n, 0);   /* its shape alone is read */
        }
    }
    if (st != FL_OK) {
        fl_tensor_release(*values);
        fl_tensor_release(*indices);
        *values = *indices = NULL;
    }
    return st;
}

fl_status fl_reduce_index(fl_tensor **values, fl_tensor **indices, fl_redop op, const fl_tensor *a, int dim,
                          bool keepdim) {
    *values = *indices = NULL;
    if (op != FL_OP_MAX && op != FL_OP_MIN) return FL_ERR(FL_EINVAL, "reduce_index: max or min, got %d", (int)op);
    FL_TRY(fl_reduce_raw(values, op, a, dim, keepdim));
    fl_status st = fl_argreduce(indices, a, dim, keepdim, op == FL_OP_MIN);
    if (st != FL_OK) {
        fl_tensor_release(*values);
        *values = NULL;
        return st;
    }
    const bool all = dim == FL_ALL_DIMS || a->ndim == 0;
    return fl_record_index_grad(values, indices, a, all ? -1 : (dim < 0 ? dim + a->ndim : dim),
                                op == FL_OP_MAX ? "MaxBackward" : "MinBackward", op);
}

/* ---- matmul ------------------------------------------------------------------------------- */

/* The GEMM compute dtype: autocast rounds the operands to bf16/fp16 (fl_autocast_gemm); else the promotion. */
static void matmul_dtypes(const fl_tensor *a, const fl_tensor *b, fl_dtype *cdt, fl_dtype *odt) {
    if (fl_autocast_gemm(a->dtype, b->dtype, cdt, odt)) return;
    *cdt = FL_DTYPE_COUNT;   /* the promotion */
    *odt = FL_DTYPE_COUNT;
}

/* with_flops (stop 103): the scope of input i's gradient GEMM where the forward was torch's aten::mv or aten::dot
 * (n->iargs[1], fl_matmul_torch_inner): torch's MvBackward0 runs grad.ger(vec), an aten::mul of [R, 1] and [K] that
 * counts the matrix's R rows, for the matrix, and self.t().mv(grad), none, for the vector; DotBackward0 grad * other,
 * an aten::mul of [] and [K] (1), for each. fp8lab's GEMM (its rounding under autocast too) runs inside, uncounted.
 * Returns the event's token (0: an mm or bmm forward, whose GEMMs count as themselves). */
static uint64_t torch_inner_grad_scope(const fl_node *n, int i, const fl_tensor *ia, const fl_tensor *ib) {
    int route = (int)n->iargs[1];
    if (route == FL_TORCH_MM) return 0;
    const fl_tensor *mat = ib->ndim == 1 ? ia : ib, *vec = ib->ndim == 1 ? ib : ia;
    int64_t K = vec->shape[0], R = 1;
    for (int d = 0; d < mat->ndim; d++)   /* the matrix's rows: every dim but the one K runs along */
        if (d != (mat == ia ? mat->ndim - 1 : mat->ndim - 2)) R *= mat->shape[d];
    bool mul = route == FL_TORCH_DOT || (i == 0) == (mat == ia);
    uint64_t tok = FL_PROF_BEGIN(mul ? "mul" : "mv");
    if (!tok) return 0;
    fl_tensor h[2];
    memset(h, 0, sizeof h);
    if (route == FL_TORCH_DOT) { h[1].ndim = 1; h[1].shape[0] = K; }                    /* [] and [K] */
    else if (mul) { h[0].ndim = 2; h[0].shape[0] = R; h[0].shape[1] = 1; h[1].ndim = 1; h[1].shape[0] = K; }
    else { h[0].ndim = 2; h[0].shape[0] = K; h[0].shape[1] = R; h[1].ndim = 1; h[1].shape[0] = R; }
    const fl_tensor *ts[2] = { &h[0], &h[1] };
    if (fl_prof_flags() & FL_PROF_RECORD_SHAPES) fl_prof_set_shapes(tok, 2, ts);
    fl_prof_hide_inner_flops(tok);
    if (mul) fl_prof_set_called_flops(tok, route == FL_TORCH_DOT ? 1.0 : (double)R);
    return tok;
}

static fl_status matmul_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *a = n->saved[0], *b = n->saved[1], *ia = n->inputs[0], *ib = n->inputs[1];
    fl_dtype cdt = (fl_dtype)n->iargs[0];
    fl_tensor *a2 = NULL, *b2 = NULL, *g2 = NULL, *t = NULL, *tt = NULL, *s = NULL;
    int64_t shp[FL_MAX_DIMS + 2];
    fl_status st = FL_OK;
    /* Promote 1-D operands to matrices and put the dropped M / N dims back into g. The shapes are the inputs': an
     * operand read only for a gradient that is not taken was not kept (a is NULL when B takes none, b when A). */
    int64_t K = ia->shape[ia->ndim - 1];
    int64_t as2[2] = { 1, K }, bs2[2] = { K, 1 };
    const int an = ia->ndim == 1 ? 2 : ia->ndim, bn = ib->ndim == 1 ? 2 : ib->ndim;   /* the promoted shapes */
    const int64_t *ash = ia->ndim == 1 ? as2 : ia->shape, *bsh = ib->ndim == 1 ? bs2 : ib->shape;
    if (a) { if (a->ndim == 1) st = fl_tensor_view(&a2, a, 2, as2); else a2 = fl_tensor_retain((fl_tensor *)a); }
    if (st == FL_OK && b) {
        if (b->ndim == 1) st = fl_tensor_view(&b2, b, 2, bs2); else b2 = fl_tensor_retain((fl_tensor *)b);
    }
    if (st == FL_OK) {
        int ng = g->ndim;
        memcpy(shp, g->shape, sizeof(int64_t) * (size_t)ng);
        if (ib->ndim == 1) shp[ng++] = 1;
        if (ia->ndim == 1) { shp[ng] = shp[ng - 1]; shp[ng - 1] = 1; ng++; }
        st = fl_tensor_reshape(&g2, g, ng, shp);
    }
    if (st == FL_OK && fl_node_input_needs_grad(n, 0)) {
        /* dA = dY · Bᵀ (summed over broadcast batch dims) */
        uint64_t ev = torch_inner_grad_scope(n, 0, ia, ib);
        st = fl_tensor_transpose(&tt, b2, -1, -2);
        if (st == FL_OK) st = fl_matmul_raw(&t, g2, tt, cdt, FL_F32);
        FL_PROF_END(ev);
        if (st == FL_OK) st = fl_sum_to_shape(&s, t, an, ash);
        if (st == FL_OK) st = fl_tensor_reshape(&gin[0], s, ia->ndim, ia->shape);
        fl_tensor_release(t); fl_tensor_release(tt); fl_tensor_release(s);
        t = tt = s = NULL;
    }
    if (st == FL_OK && fl_node_input_needs_grad(n, 1)) {
        uint64_t ev = torch_inner_grad_scope(n, 1, ia, ib);
        if (bn == 2 && an > 2) {
            /* B shared across a batch: one GEMM over the flattened rows, dB = A_flatᵀ · dY_flat */
            /* the rows counted, not -1, which is ambiguous when K or N is 0 (an empty tensor) */
            int64_t rows = 1;
            for (int d = 0; d < an - 1; d++) rows *= ash[d];
            int64_t af[2] = { rows, K }, gf[2] = { rows, g2->shape[g2->ndim - 1] };
            fl_tensor *af2 = NULL, *gf2 = NULL;
            st = fl_tensor_reshape(&af2, a2, 2, af);
            if (st == FL_OK) st = fl_tensor_reshape(&gf2, g2, 2, gf);
            if (st == FL_OK) st = fl_tensor_transpose(&tt, af2, 0, 1);
            if (st == FL_OK) st = fl_matmul_raw(&s, tt, gf2, cdt, FL_F32);
            fl_tensor_release(af2); fl_tensor_release(gf2);
        } else {
            st = fl_tensor_transpose(&tt, a2, -1, -2);
            if (st == FL_OK) st = fl_matmul_raw(&t, tt, g2, cdt, FL_F32);
            if (st == FL_OK) st = fl_sum_to_shape(&s, t, bn, bsh);
        }
        FL_PROF_END(ev);
        if (st == FL_OK) st = fl_tensor_reshape(&gin[1], s, ib->ndim, ib->shape);
        fl_tensor_release(t); fl_tensor_release(tt); fl_tensor_release(s);
    }
    fl_tensor_release(a2);
    fl_tensor_release(b2);
    fl_tensor_release(g2);
    return st;
}

fl_status fl_matmul(fl_tensor **out, const fl_tensor *a, const fl_tensor *b) {
    *out = NULL;
    fl_dtype cdt, odt;
    matmul_dtypes(a, b, &cdt, &odt);
    const fl_tensor *ins[2] = { a, b };
    bool rec = fl_any_requires_grad(2, ins);
    if (!rec) return fl_matmul_raw(out, a, b, cdt, odt);
    /* Convert once and keep the converted operands for backward (no second conversion there). */
    fl_tensor *ca = NULL, *cb = NULL;
    fl_status st = FL_OK;
    if (cdt != FL_DTYPE_COUNT && a->dtype != cdt && !fl_format(a->dtype)->is_fp8) st = fl_tensor_to(&ca, a, cdt);
    else ca = fl_tensor_retain((fl_tensor *)a);
    if (st == FL_OK) {
        if (cdt != FL_DTYPE_COUNT && b->dtype != cdt && !fl_format(b->dtype)->is_fp8) st = fl_tensor_to(&cb, b, cdt);
        else cb = fl_tensor_retain((fl_tensor *)b);
    }
    if (st == FL_OK) st = fl_matmul_raw(out, ca, cb, cdt, odt);
    fl_node *n = NULL;
    if (st == FL_OK) st = fl_autograd_record(out, &n, "MatmulBackward", matmul_bwd, 2, ins);
    if (st == FL_OK) {
        fl_node_save(n, 0, ca);
        fl_node_save(n, 1, cb);
        n->saved_for[0] = 2;   /* dB = Aᵀ·dY, dA = dY·Bᵀ: a write to A matters only for B's gradient (torch's rule) */
        n->saved_for[1] = 1;
        n->iargs[0] = cdt;
        n->iargs[1] = fl_matmul_torch_inner(a, b);   /* with_flops: torch's backward node (torch_inner_grad_scope) */
        /* an operand rounded for autocast is read through its copy: its own storage may go (torch's keeps the
         * copy alone) */
        if (ca != a) st = fl_node_input_stub(n, 0);
        if (st == FL_OK && cb != b) st = fl_node_input_stub(n, 1);
        /* an operand read only for the gradient of one that takes none (h @ c, c a constant): neither is kept */
        for (int j = 0; j < 2 && st == FL_OK; j++) st = fl_node_drop_unread(n, j, j);
    }
    fl_tensor_release(ca);
    fl_tensor_release(cb);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* ---- dot ---------------------------------------------------------------------------------- */

/* torch's DotBackward0: the 0-d gradient times the other vector, one product of torch's aten::mul each (with_flops: 1,
 * the gradient's one element, as torch counts a mul). The products' bits are those of (a * b):sum()'s graph, whose
 * SumBackward spread g over n elements and MulBackward multiplied each by the other operand (until stop 104, when dot
 * was that graph: 2·n FLOPs counted, and three nodes). */
static fl_status dot_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *a = n->saved[0], *b = n->saved[1];
    for (int i = 0; i < 2; i++) {
        if (!fl_node_input_needs_grad(n, i)) continue;
        const fl_tensor *other = i == 0 ? b : a;
        AS_TORCH_COUNTED_OP("mul", fl_tensor_numel(g), g, other);
        FL_TRY(fl_binary_raw(&gin[i], FL_OP_MUL, g, other));
    }
    return FL_OK;
}

fl_status fl_dot(fl_tensor **out, const fl_tensor *a, const fl_tensor *b) {
    *out = NULL;
    if (a->ndim != 1 || b->ndim != 1 || a->shape[0] != b->shape[0]) {
        char sa[64], sb[64];
        return FL_ERR(FL_EINVAL, "dot: expected two 1-d tensors of one size, got %s and %s", SHAPE(sa, a), SHAPE(sb, b));
    }
    /* (named here: the mul below said 'mul: e4m3 tensor ...' for x:_dot(y), an op the caller never named) */
    for (int i = 0; i < 2; i++) {
        const fl_tensor *t = i == 0 ? a : b;
        if (fl_format(t->dtype)->is_fp8)
            return FL_ERR(FL_EINVAL, "dot: %s tensor: call :dequantize() first (FP8 tensors only hold quantized data)",
                          fl_format(t->dtype)->name);
    }
    fl_tensor *p = NULL;
    FL_TRY(fl_binary_raw(&p, FL_OP_MUL, a, b));   /* the promoted dtype's products, then fl_reduce's sum of them */
    fl_status st = fl_reduce_raw(out, FL_OP_SUM, p, FL_ALL_DIMS, false);
    fl_tensor_release(p);
    if (st != FL_OK) return st;
    const fl_tensor *ins[2] = { a, b };
    if (!fl_any_requires_grad(2, ins)) return FL_OK;
    fl_node *n;
    FL_TRY(fl_autograd_record(out, &n, "DotBackward", dot_bwd, 2, ins));
    fl_node_save(n, 0, a);
    fl_node_save(n, 1, b);
    n->saved_for[0] = 2;   /* a is read for b's gradient only, b for a's (a product's rule) */
    n->saved_for[1] = 1;
    for (int j = 0; j < 2 && st == FL_OK; j++) st = fl_node_drop_unread(n, j, j);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}


fl_status fl_matmul_wide(fl_tensor **out, const fl_tensor *a, const fl_tensor *b) {
    *out = NULL;
    if (a->dtype != b->dtype || (a->dtype != FL_BF16 && a->dtype != FL_F16))
        return FL_ERR(FL_EINVAL, "matmul_wide: expected two bf16 or two fp16 operands, got %s and %s",
                      fl_format(a->dtype)->name, fl_format(b->dtype)->name);
    FL_TRY(fl_matmul_raw(out, a, b, a->dtype, FL_F32));
    const fl_tensor *ins[2] = { a, b };
    if (!fl_any_requires_grad(2, ins)) return FL_OK;
    /* the node keeps the operands widened to fp32 (exactly), in their own layout: the backward's transposes are then
     * views an fp32 GEMM reads in place, as it did when the caller widened them (a widening of a transposed view
     * made a transposed copy, 2× slower for a conv's columns) */
    fl_tensor *wa = NULL, *wb = NULL;
    fl_node *n = NULL;
    fl_status st = fl_tensor_to(&wa, a, FL_F32);
    if (st == FL_OK) st = fl_tensor_to(&wb, b, FL_F32);
    if (st == FL_OK) st = fl_autograd_record(out, &n, "MatmulBackward", matmul_bwd, 2, ins);
    else { fl_tensor_release(*out); *out = NULL; }
    if (st == FL_OK) {
        fl_node_save(n, 0, wa);
        fl_node_save(n, 1, wb);
        n->saved_for[0] = 2;
        n->saved_for[1] = 1;
        n->iargs[0] = FL_DTYPE_COUNT;   /* the backward's GEMMs promote: fp32 */
        st = fl_node_input_stub(n, 0);  /* read through the widened copies */
        if (st == FL_OK) st = fl_node_input_stub(n, 1);
        for (int j = 0; j < 2 && st == FL_OK; j++) st = fl_node_drop_unread(n, j, j);
    }
    fl_tensor_release(wa);
    fl_tensor_release(wb);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* ---- views and copies --------------------------------------------------------------------- */

static fl_status reshape_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    return fl_tensor_reshape(&gin[0], g, n->inputs[0]->ndim, n->inputs[0]->shape);
}
static fl_status transpose_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    return fl_tensor_transpose(&gin[0], g, (int)n->iargs[0], (int)n->iargs[1]);
}
static fl_status expand_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    return fl_sum_to_shape(&gin[0], g, n->inputs[0]->ndim, n->inputs[0]->shape);
}
static fl_status identity_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    (void)n;
    gin[0] = fl_tensor_retain((fl_tensor *)g);
    return FL_OK;
}
/* narrow / select: zeros of the input's shape with g written into the selected part. */
static fl_status slice_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *in = n->inputs[0];
    fl_tensor *z = NULL, *part = NULL;
    FL_TRY(fl_tensor_zeros(&z, FL_F32, in->ndim, in->shape, in->device));
    fl_status st = n->iargs[3] ? fl_tensor_select(&part, z, (int)n->iargs[0], n->iargs[1])
                               : fl_tensor_narrow(&part, z, (int)n->iargs[0], n->iargs[1], n->iargs[2]);
    if (st == FL_OK) st = fl_tensor_copy_(part, g);
    fl_tensor_release(part);
    if (st != FL_OK) { fl_tensor_release(z); return st; }
    gin[0] = z;
    return FL_OK;
}

/* The node of a view or copy: its backward reads the input's shape (and device) alone, so a copy's input (contiguous,
 * to, a reshape that copies) goes when nothing else holds it, as torch's */
static fl_status view_record(fl_tensor **out, const fl_tensor *t, const char *name, fl_backward_fn fn, fl_node **np) {
    fl_node *n = NULL;
    if (np) *np = NULL;
    /* a view made under no_grad, or of such a view, remembers the tensor first viewed so (fl_tensor.nograd_base) */
    if ((*out)->storage == t->storage && *out != t && (t->nograd_base || !fl_grad_enabled()))
        (*out)->nograd_base = fl_tensor_retain(t->nograd_base ? t->nograd_base : (fl_tensor *)t);
    if (!fl_any_requires_grad(1, &t)) return FL_OK;
    FL_TRY(fl_autograd_record(out, &n, name, fn, 1, &t));
    fl_status st = fl_node_input_stub(n, 0);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; return st; }
    if (np) *np = n;
    return FL_OK;
}

fl_status fl_view(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape) {
    FL_TRY(fl_tensor_view(out, t, ndim, shape));
    return view_record(out, t, "ViewBackward", reshape_bwd, NULL);
}
fl_status fl_reshape(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape) {
    FL_TRY(fl_tensor_reshape(out, t, ndim, shape));
    return view_record(out, t, "ReshapeBackward", reshape_bwd, NULL);
}
fl_status fl_transpose(fl_tensor **out, const fl_tensor *t, int d0, int d1) {
    FL_TRY(fl_tensor_transpose(out, t, d0, d1));
    fl_node *n;
    FL_TRY(view_record(out, t, "TransposeBackward", transpose_bwd, &n));
    if (n) { n->iargs[0] = d0; n->iargs[1] = d1; }
    return FL_OK;
}
fl_status fl_expand(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape) {
    FL_TRY(fl_tensor_expand(out, t, ndim, shape));
    return view_record(out, t, "ExpandBackward", expand_bwd, NULL);
}
fl_status fl_narrow(fl_tensor **out, const fl_tensor *t, int dim, int64_t start, int64_t length) {
    FL_TRY(fl_tensor_narrow(out, t, dim, start, length));
    fl_node *n;
    FL_TRY(view_record(out, t, "NarrowBackward", slice_bwd, &n));
    if (n) { n->iargs[0] = dim < 0 ? dim + t->ndim : dim; n->iargs[1] = start; n->iargs[2] = length; n->iargs[3] = 0; }
    return FL_OK;
}
fl_status fl_select(fl_tensor **out, const fl_tensor *t, int dim, int64_t index) {
    FL_TRY(fl_tensor_select(out, t, dim, index));
    fl_node *n;
    FL_TRY(view_record(out, t, "SelectBackward", slice_bwd, &n));
    if (n) { n->iargs[0] = dim < 0 ? dim + t->ndim : dim; n->iargs[1] = index; n->iargs[3] = 1; }
    return FL_OK;
}
fl_status fl_contiguous(fl_tensor **out, const fl_tensor *t) {
    FL_TRY(fl_tensor_contiguous(out, t));
    if (*out == t) return FL_OK;    /* already contiguous: the same tensor, with its own history */
    return view_record(out, t, "ContiguousBackward", identity_bwd, NULL);
}
/* torch's to/clone under preserve_format: a dense t that is not contiguous (channels_last, a permutation) gives a
 * result with its strides, converted in memory order (stop 101; it was copied to a contiguous result through t's
 * strides); anything else a contiguous one. (The core's fl_tensor_to stays contiguous: its callers read the result
 * as such.) */
static fl_status to_preserving(fl_tensor **out, const fl_tensor *t, fl_dtype dt) {
    if (fl_format(t->dtype)->is_fp8 || fl_format(dt)->is_fp8 || fl_tensor_is_contiguous(t) || !fl_tensor_is_dense(t))
        return fl_tensor_to(out, t, dt);
    return fl_tensor_copy_like(out, t, dt);
}

fl_status fl_to(fl_tensor **out, const fl_tensor *t, fl_dtype dt) {
    FL_TRY(to_preserving(out, t, dt));
    return view_record(out, t, "ToBackward", identity_bwd, NULL);
}

/* cat: input i's gradient is its slice of g along dim (iargs[0]), copied out of g. */
static fl_status cat_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const int dim = (int)n->iargs[0];
    int64_t off = 0;
    for (int i = 0; i < n->ninputs; i++) {
        const int64_t len = n->inputs[i]->shape[dim];
        if (fl_node_input_needs_grad(n, i)) {
            fl_tensor *part = NULL;
            fl_status st = fl_tensor_narrow(&part, g, dim, off, len);
            if (st == FL_OK) st = fl_tensor_empty(&gin[i], FL_F32, part->ndim, part->shape, part->device);
            if (st == FL_OK) st = fl_tensor_copy_(gin[i], part);
            fl_tensor_release(part);
            if (st != FL_OK) return st;
        }
        off += len;
    }
    return FL_OK;
}

/* an input cat reads as channels_last (and not contiguous, which a size-1 C or HW makes it too) */
static bool cat_channels_last(const fl_tensor *t) {
    return !fl_tensor_is_contiguous(t) && fl_tensor_is_channels_last(t);
}

/* The forward of fl_cat: checks, then one copy of each input into its part of a new tensor. */
static fl_status cat_raw(fl_tensor **out, int n, const fl_tensor *const *ts, int *dimp) {
    *out = NULL;
    char sa[200], sb[200];
    if (n < 1) return FL_ERR(FL_EINVAL, "cat: expected at least one tensor");
    const fl_tensor *a = ts[0];
    if (a->ndim == 0) return FL_ERR(FL_EINVAL, "cat: tensor 1 is 0-d (reshape it to [1] first)");
    int dim = *dimp;
    if (dim < -a->ndim || dim >= a->ndim)
        return FL_ERR(FL_EINVAL, "cat: dim %d out of range for tensors of %d dims (expected %d..%d)", dim, a->ndim,
                      -a->ndim, a->ndim - 1);
    if (dim < 0) dim += a->ndim;
    *dimp = dim;
    fl_dtype dt = a->dtype;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const fl_tensor *t = ts[i];
        if (fl_format(t->dtype)->is_fp8)
            return FL_ERR(FL_EINVAL, "cat: tensor %d is %s: call :dequantize() first (its scale covers only its own values)",
                          i + 1, fl_format(t->dtype)->name);
        if (t->device != a->device)
            return FL_ERR(FL_EINVAL, "cat: tensor %d is on %s, tensor 1 on %s; move one with :to()", i + 1,
                          fl_device_name(t->device), fl_device_name(a->device));
        bool same = t->ndim == a->ndim;
        for (int d = 0; same && d < a->ndim; d++) same = d == dim || t->shape[d] == a->shape[d];
        if (!same)
            return FL_ERR(FL_EINVAL, "cat: tensor %d has shape %s, tensor 1 %s: they may differ only in dim %d", i + 1,
                          SHAPE(sa, t), SHAPE(sb, a), dim + 1);
        if (t->dtype != dt) dt = FL_F32;
        total += t->shape[dim];
    }
    int64_t shape[FL_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) shape[d] = d == dim ? total : a->shape[d];
    /* channels-last inputs (every one: torch's compute_output_memory_format; a contiguous one, or another layout,
     * makes the result contiguous) give a channels-last result, as torch 2.15's (stop 102; it was contiguous) */
    bool cl = a->ndim == 4;
    for (int i = 0; i < n && cl; i++) cl = cat_channels_last(ts[i]);
    fl_tensor *r;
    if (cl) {
        const int64_t nhwc[4] = { shape[0], shape[2], shape[3], shape[1] };
        fl_tensor *t = NULL, *u = NULL;
        fl_status s0 = fl_tensor_empty(&t, dt, 4, nhwc, a->device);
        if (s0 == FL_OK) s0 = fl_tensor_transpose(&u, t, 1, 2);   /* [N, W, H, C] */
        if (s0 == FL_OK) s0 = fl_tensor_transpose(&r, u, 1, 3);   /* [N, C, H, W] */
        fl_tensor_release(t);
        fl_tensor_release(u);
        if (s0 != FL_OK) return s0;
    } else {
        FL_TRY(fl_tensor_empty(&r, dt, a->ndim, shape, a->device));
    }
    int64_t off = 0;
    fl_status st = FL_OK;
    for (int i = 0; i < n && st == FL_OK; i++) {
        const int64_t len = ts[i]->shape[dim];
        if (len == 0) continue;
        fl_tensor *part = NULL;
        st = fl_tensor_narrow(&part, r, dim, off, len);
        if (st == FL_OK) st = fl_tensor_copy_(part, ts[i]);
        fl_tensor_release(part);
        off += len;
    }
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

fl_status fl_cat(fl_tensor **out, int n, const fl_tensor *const *ts, int dim) {
    *out = NULL;
    FL_PROF_SCOPE("cat");
    if (n > FL_NODE_MAX_INPUTS && fl_any_requires_grad(n, ts)) {
        /* a node holds at most FL_NODE_MAX_INPUTS inputs: join groups of them first, then the groups */
        const int groups = (n + FL_NODE_MAX_INPUTS - 1) / FL_NODE_MAX_INPUTS;
        fl_tensor **parts = calloc((size_t)groups, sizeof *parts);
        if (!parts) return FL_ERR(FL_ENOMEM, "cat: out of memory");
        fl_status st = FL_OK;
        for (int g = 0; g < groups && st == FL_OK; g++) {
            const int lo = g * FL_NODE_MAX_INPUTS, cnt = n - lo < FL_NODE_MAX_INPUTS ? n - lo : FL_NODE_MAX_INPUTS;
            st = fl_cat(&parts[g], cnt, ts + lo, dim);
        }
        if (st == FL_OK) st = fl_cat(out, groups, (const fl_tensor *const *)parts, dim);
        for (int g = 0; g < groups; g++) fl_tensor_release(parts[g]);
        free(parts);
        return st;
    }
    FL_TRY(cat_raw(out, n, ts, &dim));
    if (!fl_any_requires_grad(n, ts)) return FL_OK;
    fl_node *node;
    FL_TRY(fl_autograd_record(out, &node, "CatBackward", cat_bwd, n, ts));
    node->iargs[0] = dim;
    fl_status st = FL_OK;
    for (int i = 0; i < n && st == FL_OK; i++) st = fl_node_input_stub(node, i);   /* their lengths alone are read */
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

fl_status fl_quantize_ag(fl_tensor **out, const fl_tensor *src, fl_dtype fmt, const fl_quant_opts *opts) {
    FL_TRY(fl_quantize(out, src, fmt, opts));
    return view_record(out, src, "QuantizeBackward", identity_bwd, NULL);
}
fl_status fl_dequantize_ag(fl_tensor **out, const fl_tensor *q, fl_dtype dt) {
    FL_TRY(fl_dequantize(out, q, dt));
    return view_record(out, q, "DequantizeBackward", identity_bwd, NULL);
}

static fl_status to_device_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    return fl_tensor_to_device(&gin[0], g, n->inputs[0]->device);
}
fl_status fl_to_device(fl_tensor **out, const fl_tensor *t, int device) {
    FL_TRY(fl_tensor_to_device(out, t, device));
    if (*out == t) return FL_OK;    /* already there: the same tensor, with its own history */
    return view_record(out, t, "ToDeviceBackward", to_device_bwd, NULL);
}
