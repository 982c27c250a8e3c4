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
