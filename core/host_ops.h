/* host_ops.h — for the ops computed on the host (sort.c, scan.c, gather.c, im2col.c, conv_depthwise.c, max_pool.c;
 * as ops.c's argmax): a tensor's values as contiguous fp32 there, and a result made there moved to the input's device
 * in the dtype it should have. Included by those files only. */
#ifndef FL_HOST_OPS_H
#define FL_HOST_OPS_H
#include "tensor.h"

/* a's values as contiguous fp32 on the host (*h). */
static inline fl_status fl_host_f32(fl_tensor **h, const fl_tensor *a) {
    fl_tensor *d = NULL, *f = NULL;
    fl_status st = fl_tensor_to_device(&d, a, FL_DEV_CPU);
    if (st == FL_OK) st = fl_tensor_to(&f, d, FL_F32);
    if (st == FL_OK) st = fl_tensor_contiguous(h, f);
    fl_tensor_release(d);
    fl_tensor_release(f);
    return st;
}

/* t's values as contiguous fp32 on the host, read only: t itself (retained) where it already is that (no copy) */
static inline fl_status fl_host_f32_read(fl_tensor **h, const fl_tensor *t) {
    if (t->dtype == FL_F32 && t->device == FL_DEV_CPU) return fl_tensor_contiguous(h, t);
    return fl_host_f32(h, t);
}

/* t (contiguous fp32 on the host) → *out in dtype dt on device dev; the reference to t is taken over (released on
 * every path). */
static inline fl_status fl_host_result(fl_tensor **out, fl_tensor *t, fl_dtype dt, int dev) {
    fl_tensor *c = NULL;
    fl_status st = dt == FL_F32 ? (c = t, FL_OK) : fl_tensor_to(&c, t, dt);
    if (c != t) fl_tensor_release(t);
    if (st != FL_OK) return st;
    if (dev == FL_DEV_CPU) { *out = c; return FL_OK; }
    st = fl_tensor_to_device(out, c, dev);
    fl_tensor_release(c);
    return st;
}
/* t's values as fp32 on the host in NHWC memory seen as [N, C, H, W] (fl_tensor_channels_last's strides), read only:
 * t itself (retained) where it already is that, else one copy (stop 104: the poolings of a channels_last input
 * computed in its memory order) */
static inline fl_status fl_host_f32_cl_read(fl_tensor **h, const fl_tensor *t) {
    *h = NULL;
    fl_tensor *d = NULL, *c = NULL;
    fl_status st = fl_tensor_to_device(&d, t, FL_DEV_CPU);
    if (st == FL_OK) st = fl_tensor_channels_last(&c, d);
    if (st == FL_OK && c->dtype != FL_F32) st = fl_tensor_copy_like(h, c, FL_F32);   /* (NHWC kept: dense) */
    else if (st == FL_OK) *h = fl_tensor_retain(c);
    fl_tensor_release(d);
    fl_tensor_release(c);
    return st;
}

/* t (fp32 on the host, fl_host_f32_cl_read's layout) → *out in dtype dt on device dev, channels_last; the reference
 * to t is taken over (released on every path). */
static inline fl_status fl_host_result_cl(fl_tensor **out, fl_tensor *t, fl_dtype dt, int dev) {
    *out = NULL;
    fl_tensor *c = NULL, *m = NULL;
    fl_status st = dt == FL_F32 ? (c = t, FL_OK) : fl_tensor_copy_like(&c, t, dt);
    if (c != t) fl_tensor_release(t);
    if (st != FL_OK) return st;
    st = fl_tensor_to_device(&m, c, dev);
    fl_tensor_release(c);
    if (st == FL_OK) st = fl_tensor_channels_last(out, m);   /* (no copy where the move kept the strides) */
    fl_tensor_release(m);
    return st;
}
/* The error for index value p (fp32) that names no position of a dim of `size` (dim 0-based): a fraction and NaN
 * said as such ("index 3.5 is not a whole number"), else the range ("index 7 out of range 0..3"). fn names the op. */
static inline fl_status fl_index_error(const char *fn, float p, int64_t size, int dim) {
    if (p != p)
        return FL_ERR(FL_EINVAL, "%s: index NaN for dim %d of size %lld (indices are whole numbers 0..%lld)", fn,
                      dim + 1, (long long)size, (long long)size - 1);
    if (p > -9.3e18f && p < 9.3e18f && p != (float)(int64_t)p)
        return FL_ERR(FL_EINVAL, "%s: index %.9g is not a whole number (dim %d of size %lld takes 0..%lld)", fn,
                      (double)p, dim + 1, (long long)size, (long long)size - 1);
    return FL_ERR(FL_EINVAL, "%s: index %.9g out of range 0..%lld for dim %d of size %lld", fn, (double)p,
                  (long long)size - 1, dim + 1, (long long)size);
}
#endif
