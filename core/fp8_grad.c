/* fp8_grad.c — MS-AMP's FP8 weight gradients (fp8_grad.h): accumulation into a gradient kept in FP8.
 * Autograd calls it for a tensor whose grad_dtype is E4M3/E5M2; it uses only the device's current-scaling
 * cast, no recipe state. */
#include "fp8_grad.h"
#include "device.h"
#include "ops.h"
#include "ops_raw.h"

/* MS-AMP's FP8 weight gradients: the sum so far (dequantized) plus g, re-cast with a fresh per-tensor
 * power-of-two scale from its current amax. An inf in the sum becomes NaN (IEEE policy) so that
 * overflow checks still see it; saturation would hide it. */
fl_status fl_fp8_grad_accumulate(fl_tensor *t, const fl_tensor *g) {
    fl_tensor *sum = NULL, *q = NULL;
    fl_status st;
    if (t->grad) {
        fl_tensor *old = NULL;
        st = fl_dequantize(&old, t->grad, FL_F32);
        if (st == FL_OK) st = fl_binary_raw(&sum, FL_OP_ADD, old, g);
        fl_tensor_release(old);
    } else if (g->dtype == FL_F32 && fl_tensor_is_contiguous(g)) {
        sum = fl_tensor_retain((fl_tensor *)g);   /* only read below: no copy (1-2 ms of an msamp O2 step) */
        st = FL_OK;
    } else {
        st = fl_tensor_to(&sum, g, FL_F32);
    }
    if (st != FL_OK) return st;
    /* Current scaling on the sum's device (no host round trip): scale = 2^floor(log2(max/amax)) from its
     * amax, so no finite value overflows and the IEEE policy only changes what an inf becomes. */
    const fl_device *dev = fl_device_get(sum->device);
    st = fl_tensor_empty(&q, t->grad_dtype, sum->ndim, sum->shape, sum->device);
    if (st == FL_OK) st = dev->quantize_current ? dev->quantize_current(q, sum, -1, 0, true, FL_IEEE)
                                                : FL_ERR(FL_EUNSUPPORTED, "FP8 gradients are not supported on %s", dev->name);
    fl_tensor_release(sum);
    if (st != FL_OK) { fl_tensor_release(q); return st; }
    fl_tensor_release(t->grad);
    t->grad = q;
    return FL_OK;
}
