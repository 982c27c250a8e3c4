/* norm_rescue.c — the p-norm kept finite where Σ|x|^p leaves its dtype's range (ops.h's fl_norm_rescue): the slices
 * whose sum over- or underflowed taken again from x scaled by a power of two, on the device (no host read in the
 * common case), and their gradient (NormRescueBackward); the gate (fl_norm_gate, NormGateBackward) that keeps the plain
 * formula's gradient out of the rescued slices. */
#include "ops_raw.h"
#include "autograd.h"
#include "device.h"
#include "profiler.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE(buf, t) fl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* A device without the entries: the CPU's on host copies (a wait for the device; the kernels avoid it) */
static fl_status on_host(fl_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        fl_tensor *h = NULL;
        fl_status st = t[i] ? fl_tensor_to_device(&h, t[i], FL_DEV_CPU) : FL_OK;
        t[i] = h;   /* the caller's references stay the caller's */
        if (st != FL_OK) { for (int j = 0; j < i; j++) fl_tensor_release(t[j]); return st; }
    }
    return FL_OK;
}

static fl_status back_to(fl_tensor **t, int device) {
    fl_tensor *d = NULL;
    fl_status st = fl_tensor_to_device(&d, *t, device);
    fl_tensor_release(*t);
    *t = d;
    return st;
}

/* NormRescueBackward: inputs r, x; saved[0] scale (per slice: 2^k where rescued, else 0), saved[1] x where a slice
 * was rescued; iargs[0] mask, iargs[1] the rescued slices' count (-1 not known), dargs[0] p */
static fl_status norm_rescue_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    if (n->iargs[1] == 0) {   /* none rescued: r's graph takes g as it came, x nothing (the plain formula's bits) */
        gin[0] = fl_tensor_retain((fl_tensor *)g);
        return FL_OK;
    }
    const fl_tensor *scale = n->saved[0], *x = n->saved[1];
    const fl_device *dev = fl_device_get(x->device);
    fl_tensor *gr = NULL, *gx = NULL, *gc = NULL;
    fl_status st = fl_tensor_contiguous(&gc, g);
    if (st == FL_OK) st = fl_tensor_empty(&gr, FL_F32, g->ndim, g->shape, g->device);
    if (st == FL_OK) st = fl_tensor_empty(&gx, FL_F32, x->ndim, x->shape, x->device);
    if (st == FL_OK && dev && dev->norm_rescue_bwd) {
        st = dev->norm_rescue_bwd(gr, gx, gc, scale, x, (uint32_t)n->iargs[0], n->dargs[0]);
    } else if (st == FL_OK) {
        fl_tensor *h[5] = { gr, gx, gc, (fl_tensor *)scale, (fl_tensor *)x };
        st = on_host(h, 5);
        if (st == FL_OK) {
            st = fl_cpu_device()->norm_rescue_bwd(h[0], h[1], h[2], h[3], h[4], (uint32_t)n->iargs[0], n->dargs[0]);
            fl_tensor_release(h[2]); fl_tensor_release(h[3]); fl_tensor_release(h[4]);
            fl_tensor_release(gr); fl_tensor_release(gx);
            gr = h[0]; gx = h[1];
            if (st == FL_OK) st = back_to(&gr, x->device);
            if (st == FL_OK) st = back_to(&gx, x->device);
        } else {
            fl_tensor_release(gr); fl_tensor_release(gx); gr = gx = NULL;
        }
    }
    fl_tensor_release(gc);
    if (st != FL_OK) { fl_tensor_release(gr); fl_tensor_release(gx); return st; }
    gin[0] = gr;
    gin[1] = gx;
    return FL_OK;
}

/* NormGateBackward: input x; saved[0] the rescue's per-slice scale (set by fl_norm_rescue; NULL: not run), iargs[0]
 * mask, iargs[1] the rescued slices' count (-1 not known on the host). g passes where a slice was not rescued (the
 * same tensor where none was: the plain formula's bits), -0 where one was (x + -0 is x: the rescue's gradient alone) */
static fl_status norm_gate_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *scale = n->saved[0];
    if (!scale || n->iargs[1] == 0) {
        gin[0] = fl_tensor_retain((fl_tensor *)g);
        return FL_OK;
    }
    int64_t ks[FL_MAX_DIMS];   /* the slices in g's shape with the reduced dims kept as 1 (the scale's order) */
    for (int d = 0; d < g->ndim; d++) ks[d] = ((uint32_t)n->iargs[0] >> d) & 1u ? 1 : g->shape[d];
    fl_tensor *sv = NULL, *keep = NULL, *z = NULL;
    fl_status st = fl_tensor_view(&sv, scale, g->ndim, ks);
    if (st == FL_OK) st = fl_binary_scalar(&keep, FL_OP_EQ, sv, 0.0, false);
    if (st == FL_OK) st = fl_tensor_full(&z, FL_F32, 0, NULL, -0.0, g->device);
    if (st == FL_OK) st = fl_where(&gin[0], keep, g, z);
    fl_tensor_release(sv); fl_tensor_release(keep); fl_tensor_release(z);
    return st;
}

fl_status fl_norm_gate(fl_tensor **out, const fl_tensor *x, uint32_t mask) {
    *out = NULL;
    if (x->ndim < 32 && (mask >> x->ndim) != 0) {
        char sa[200];
        return FL_ERR(FL_EINVAL, "norm_gate: the reduced dims (mask 0x%x) are not all dims of tensor %s", mask,
                      SHAPE(sa, x));
    }
    const fl_tensor *ins[1] = { x };
    if (!fl_any_requires_grad(1, ins)) {   /* nothing to gate: x itself */
        *out = fl_tensor_retain((fl_tensor *)x);
        return FL_OK;
    }
    fl_node *nd;
    FL_TRY(fl_tensor_detach(out, x));   /* x's data under a new header, whose history is the gate */
    FL_TRY(fl_autograd_record(out, &nd, "NormGateBackward", norm_gate_bwd, 1, ins));
    nd->iargs[0] = mask;
    nd->iargs[1] = -1;
    fl_status st = fl_node_input_stub(nd, 0);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

static bool float_dtype(fl_dtype t) { return t == FL_F32 || t == FL_BF16 || t == FL_F16; }

fl_status fl_norm_rescue(fl_tensor **out, const fl_tensor *r, const fl_tensor *s, const fl_tensor *x, uint32_t mask,
                         double p, const fl_tensor *gate) {
    *out = NULL;
    FL_PROF_SCOPE("norm_rescue"); FL_PROF_SHAPES(x);
    char sa[200], sb[200], sx[200];   /* one buffer per shape a message shows (sa twice showed one shape for r and x) */
    if (!float_dtype(r->dtype) || !float_dtype(s->dtype) || !float_dtype(x->dtype))
        return FL_ERR(FL_EINVAL, "norm_rescue: expected fp32, bf16 or fp16 norms, sums and input, got %s, %s and %s",
                      fl_format(r->dtype)->name, fl_format(s->dtype)->name, fl_format(x->dtype)->name);
    if (r->device != x->device || s->device != x->device)
        return FL_ERR(FL_EINVAL, "norm_rescue: the norms, sums and input must be on one device");
    if (!(p > 0 && p < INFINITY))   /* (NaN by name: %g printed 0/0 as -nan) */
        return p != p ? FL_ERR(FL_EINVAL, "norm_rescue: p must be a finite number > 0, got NaN")
                      : FL_ERR(FL_EINVAL, "norm_rescue: p must be a finite number > 0, got %g", p);
    if (x->ndim < 32 && (mask >> x->ndim) != 0)
        return FL_ERR(FL_EINVAL, "norm_rescue: the reduced dims (mask 0x%x) are not all dims of tensor %s", mask,
                      SHAPE(sa, x));
    int64_t slices = 1;
    for (int d = 0; d < x->ndim; d++) if (!((mask >> d) & 1u)) slices *= x->shape[d];
    if (fl_tensor_numel(r) != slices || fl_tensor_numel(s) != slices)
        return FL_ERR(FL_EINVAL, "norm_rescue: norms %s and sums %s must hold one value per slice of tensor %s (%lld)",
                      SHAPE(sa, r), SHAPE(sb, s), SHAPE(sx, x), (long long)slices);
    fl_node *gn = gate && gate->grad_fn && gate->grad_fn->backward == norm_gate_bwd ? gate->grad_fn : NULL;
    if (gate && gate != x && (!gn || (uint32_t)gn->iargs[0] != mask || gate->device != x->device ||
                              gate->ndim != x->ndim || fl_tensor_data(gate) != fl_tensor_data(x) ||
                              memcmp(gate->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0))
        return FL_ERR(FL_EINVAL, "norm_rescue: the gate must be x:_norm_gate(mask)'s result for this x and mask, got "
                      "a tensor %s", SHAPE(sa, gate));
    const fl_device *dev;
    if (!(dev = fl_device_get(x->device)))
        return FL_ERR(FL_EINVAL, "norm_rescue: device %d is not available", x->device);
    int64_t n1[1] = { slices }, rescued = -1;
    fl_tensor *d = NULL, *scale = NULL, *rc = NULL, *sc = NULL;
    fl_status st = fl_tensor_empty(&d, r->dtype, r->ndim, r->shape, r->device);
    if (st == FL_OK) st = fl_tensor_empty(&scale, FL_F32, 1, n1, r->device);   /* the entry writes it all */
    if (st == FL_OK) st = fl_tensor_contiguous(&rc, r);
    if (st == FL_OK) st = fl_tensor_contiguous(&sc, s);
    if (st == FL_OK && slices > 0 && fl_tensor_numel(x) > 0) {
        if (dev->norm_rescue) {
            st = dev->norm_rescue(d, scale, rc, sc, x, mask, p, &rescued);
        } else {
            fl_tensor *h[5] = { d, scale, rc, sc, (fl_tensor *)x };
            st = on_host(h, 5);
            if (st == FL_OK) {
                st = fl_cpu_device()->norm_rescue(h[0], h[1], h[2], h[3], h[4], mask, p, &rescued);
                if (st == FL_OK) st = fl_tensor_copy_(d, h[0]);
                if (st == FL_OK) st = fl_tensor_copy_(scale, h[1]);
                for (int i = 0; i < 5; i++) fl_tensor_release(h[i]);
            }
        }
    } else if (st == FL_OK) {   /* nothing to reduce (an empty x's sums are 0 and right) or no slices */
        st = fl_tensor_copy_(d, rc);
        rescued = 0;   /* (scale is not read: the backward reads it only where a slice was rescued) */
    }
    fl_tensor_release(rc);
    fl_tensor_release(sc);
    if (st == FL_OK) {
        const fl_tensor *ins[2] = { r, x };
        if (fl_any_requires_grad(2, ins)) {
            fl_node *nd;
            st = fl_autograd_record(&d, &nd, "NormRescueBackward", norm_rescue_bwd, 2, ins);
            if (st == FL_OK) {
                nd->iargs[0] = mask;
                nd->iargs[1] = rescued;
                nd->dargs[0] = p;
                if (rescued != 0) { fl_node_save(nd, 0, scale); fl_node_save(nd, 1, x); }
                st = fl_node_input_stub(nd, 0);
                if (st == FL_OK) st = fl_node_input_stub(nd, 1);
            }
        }
    }
    if (st == FL_OK && gn) {   /* the gate learns which slices the rescue took (-0 there in its backward) */
        gn->iargs[1] = rescued;
        fl_node_save(gn, 0, rescued != 0 ? scale : NULL);
    }
    fl_tensor_release(scale);
    if (st != FL_OK) { fl_tensor_release(d); return st; }
    *out = d;
    return FL_OK;
}
