/* device.h — a device is a table of function pointers (ggml-backend style). The CPU device always
 * exists and is the reference; CUDA registers itself at start-up when built in (kernels/) and a GPU is
 * present. core/ops.c validates arguments and shapes, allocates results, then calls these.
 * A NULL entry means "not supported on this device" and ops.c reports it.
 * Kernels receive tensors whose shapes are already checked; for binary ops `a` and `b` are
 * broadcast views with exactly dst's ndim/shape (stride 0 on expanded dims). */
#ifndef FL_DEVICE_H
#define FL_DEVICE_H

#include "ops.h"

typedef struct fl_device {
    const char *name;                  /* "cpu", "cuda" */
    fl_status (*alloc)(size_t nbytes, void **ptr);
    void (*free)(void *ptr);
    /* Raw byte copies between this device and host memory. */
    fl_status (*to_host)(void *host_dst, const void *dev_src, size_t nbytes);
    fl_status (*from_host)(void *dev_dst, const void *host_src, size_t nbytes);

    fl_status (*copy)(fl_tensor *dst, const fl_tensor *src);          /* strided copy with dtype conversion (non-FP8) */
    fl_status (*fill)(fl_tensor *dst, double value);                 /* dst contiguous */
    fl_status (*binary)(fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b);
    fl_status (*binary_scalar)(fl_binop op, fl_tensor *dst, const fl_tensor *a, double s, bool scalar_first);
    fl_status (*unary)(fl_unop op, fl_tensor *dst, const fl_tensor *a);
    /* dim < 0: reduce all into a 1-element dst; else dst has a's shape with shape[dim] == 1 (keepdim layout). */
    fl_status (*reduce)(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim);
    /* dst[b] = a[b] x b[b] for 3-D inputs [B,M,K] x [B,K,N] (B may be 1; a or b may have batch
     * stride 0 for broadcast). Each operand's batch entries are row-major (stride[2] == 1) or
     * column-major, i.e. a transposed matrix (stride[1] == 1, stride[2] == rows); batch stride rows*cols
     * or 0. dst is contiguous. Same dtype for a and b; dst fp32 or that dtype. */
    fl_status (*matmul)(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b);
    /* dst (FP8, contiguous, scale_inv allocated) from src (contiguous fp32/bf16/fp16) with the
     * given per-tensor scale or per-index scales (scales: n floats on host, n = 1 or shape[axis]).
     * Fills dst->qstats and dst->scale_inv. */
    fl_status (*quantize)(fl_tensor *dst, const fl_tensor *src, const float *scales, int axis, fl_overflow p);
    fl_status (*dequantize)(fl_tensor *dst, const fl_tensor *q);      /* dst contiguous */
    /* amax of a contiguous tensor, per tensor (axis < 0, 1 value) or per index along axis (shape[axis] values), into host memory. */
    fl_status (*amax)(const fl_tensor *src, int axis, float *out);
} fl_device;

const fl_device *fl_device_get(int id);   /* NULL if that device is not available */
void fl_device_register(int id, const fl_device *dev);
const fl_device *fl_cpu_device(void);
const char *fl_device_name(int id);       /* "cpu", "cuda" */

#endif
