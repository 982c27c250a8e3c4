/* tensor.h — refcounted storage and strided tensors (up to 8 dims, 64-byte aligned memory).
 * An FP8 tensor holds bytes plus its scale_inv: dequantized value = decode(byte) * scale_inv,
 * one fp32 value per tensor or one per index along `scale_axis` (per-row scaling). */
#ifndef FL_TENSOR_H
#define FL_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "format.h"

#define FL_MAX_DIMS 8

typedef enum { FL_DEV_CPU = 0, FL_DEV_CUDA = 1, FL_DEV_COUNT } fl_device_id;

typedef struct fl_storage {
    int refcount;
    int device;        /* fl_device_id */
    size_t nbytes;
    void *data;        /* 64-byte aligned (host) or device pointer */
    uint64_t version;  /* bumped by in-place writes (fl_tensor_bump): caches keyed on it (FP8 weight cache) */
} fl_storage;

struct fl_node;   /* core/autograd.h */

/* Statistics of a cast that a device computes asynchronously (the CUDA device: no stream sync per cast).
 * wait() blocks until they are known and writes them; destroy() frees the future once the last holder
 * lets go. Refcounted: the FP8 tensor and every recipe role that observed the cast hold it. */
typedef struct fl_stats_future {
    int refcount;
    fl_status (*wait)(struct fl_stats_future *f, fl_cast_stats *out);
    void (*destroy)(struct fl_stats_future *f);
} fl_stats_future;

fl_stats_future *fl_stats_future_retain(fl_stats_future *f);   /* NULL is fine */
void fl_stats_future_release(fl_stats_future *f);              /* NULL is fine */

typedef struct fl_tensor {
    int refcount;
    fl_dtype dtype;
    int device;                      /* fl_device_id */
    int ndim;                        /* 0 = scalar */
    int64_t shape[FL_MAX_DIMS];
    int64_t stride[FL_MAX_DIMS];     /* in elements; 0 for broadcast dims */
    int64_t offset;                  /* in elements, into storage */
    fl_storage *storage;
    /* FP8 tensors only (NULL / -1 otherwise): */
    struct fl_tensor *scale_inv;     /* fp32, [1] or [shape[scale_axis]], contiguous, same device */
    int scale_axis;                  /* -1: per-tensor */
    fl_cast_stats qstats;            /* what the quantizing cast reported (amax of the source, counters) */
    fl_stats_future *qfuture;        /* owned; non-NULL while the device has not reported qstats yet:
                                      * read them through fl_tensor_qstats() */
    bool qpart;                      /* a view of part of the cast (select, narrow), an expand that repeats its
                                      * elements, or a copy of one: qstats describe the whole cast, not these */
    bool qunknown;                   /* read from a file (or a view or copy of one): no cast made these bytes
                                      * here, and qstats (zeros) say nothing of the source */
    /* Autograd (core/autograd.h). Every new header — fresh tensors, views, copies — starts with these
     * cleared: the layout functions in this file record no history; the differentiable views are
     * fl_view/fl_reshape/... in ops.h. */
    bool requires_grad;
    struct fl_tensor *grad;          /* owned; fp32, this tensor's shape; NULL until a backward reaches it */
    struct fl_node *grad_fn;         /* owned; NULL for leaves */
    fl_dtype grad_dtype;             /* FL_F32 (the default): fp32 grads; FL_E4M3/FL_E5M2: grads are kept
                                      * quantized with a per-tensor power-of-two scale (MS-AMP O1+) */
    /* owned; a view made by fl_view/fl_narrow/... (ops.h) with grad mode off, or a view of such a view: the tensor
     * first viewed so. While it requires grad an element write to this view under grad mode is refused, as torch
     * refuses one to a view made in no_grad mode (its base's flag is read at the write, as torch's). NULL else. */
    struct fl_tensor *nograd_base;
    /* t:retain_grad() on a tensor an op made (fl_tensor_retain_grad): its grad_fn's owner is this tensor, and a
     * backward adds the gradient reaching it into .grad, as a leaf's */
    bool retains_grad;
    struct fl_grad_hooks *hooks;     /* owned (a reference); gradient hooks (fl_tensor_add_grad_hook), NULL: none */
    struct fl_grad_hooks *post_hooks; /* owned (a reference); a leaf's post-accumulate-grad hooks, NULL: none */
} fl_tensor;

/* Construction. `shape` may be NULL when ndim == 0. Sizes must be >= 0.
 * New tensors are contiguous, uninitialised (empty) or filled. Each returns a tensor with refcount 1. */
fl_status fl_tensor_empty(fl_tensor **out, fl_dtype dt, int ndim, const int64_t *shape, int device);
fl_status fl_tensor_zeros(fl_tensor **out, fl_dtype dt, int ndim, const int64_t *shape, int device);
fl_status fl_tensor_full(fl_tensor **out, fl_dtype dt, int ndim, const int64_t *shape, double value, int device);
/* Wrap a copy of n fp32 values as a tensor of the given shape and dtype (cast with RNE). */
fl_status fl_tensor_from_f32(fl_tensor **out, const float *src, int ndim, const int64_t *shape, fl_dtype dt);

/* A header with a shape, dtype and device but no storage (fl_tensor_data is NULL): for an op's output whose
 * values nobody reads, kept for its shape and autograd history (fl_fp8_linear_layernorm's LayerNorm output,
 * which only its FP8 cast leaves memory as). Not for FP8 dtypes; never handed to Lua. */
fl_status fl_tensor_header(fl_tensor **out, fl_dtype dt, int ndim, const int64_t *shape, int device);

fl_tensor *fl_tensor_retain(fl_tensor *t);
void fl_tensor_release(fl_tensor *t);   /* NULL is fine */
/* dst, a fresh copy of the FP8 tensor src's bytes, takes scale_inv (a reference the call takes over) as its scale
 * inverse, and src's scale axis and cast counters (qstats, qpart, qunknown and a retained qfuture) */
void fl_tensor_adopt_scale(fl_tensor *dst, fl_tensor *scale_inv, const fl_tensor *src);

int64_t fl_tensor_numel(const fl_tensor *t);
/* The most elements any tensor may have (2^48; also the byte limit of one storage). Every shape a
 * tensor gets (factories, views, expand) is checked against it, so products of sizes never overflow. */
#define FL_MAX_NUMEL (INT64_C(1) << 48)
/* numel of a shape with overflow-safe arithmetic; FL_EINVAL "too large: N elements (limit ...)" when
 * it exceeds FL_MAX_NUMEL (or int64), "size must be >= 0" for a negative size. `what` prefixes the message. */
fl_status fl_shape_numel(const char *what, int ndim, const int64_t *shape, int64_t *numel);
/* The statistics of the cast that made FP8 tensor t, waiting for the device when they are still pending
 * (they are then kept in t->qstats). */
fl_status fl_tensor_qstats(const fl_tensor *t, fl_cast_stats *out);
bool fl_tensor_is_contiguous(const fl_tensor *t);
/* torch's is_non_overlapping_and_dense: t's elements fill [offset, offset + numel) each once, in some order of its dims
 * (a contiguous tensor, a channels_last one, any permutation of either) */
bool fl_tensor_is_dense(const fl_tensor *t);
/* torch's guess of channels_last from a 4-D tensor's strides (c10's is_channels_last_strides_2d_s4, which
 * suggest_memory_format reads; an N111 shape whose strides fit both reads as NCHW, as torch's) */
bool fl_tensor_is_channels_last(const fl_tensor *t);
/* A 4-D t's values with NHWC memory seen as [N, C, H, W] (torch's contiguous(memory_format=channels_last): an N111
 * shape gets strides {C, 1, C, C}): t itself (retained) where its strides are so already, else a copy (stop 103: the
 * result and input gradient of the norms and poolings that keep a channels_last input's layout, as torch's) */
fl_status fl_tensor_channels_last(fl_tensor **out, const fl_tensor *t);
/* *t replaced by fl_tensor_channels_last's of it (the old reference released; *t NULL on failure) */
fl_status fl_tensor_channels_last_(fl_tensor **t);
/* A new uninitialised tensor of dtype dt, shape [N, C, H, W] = shape, on device, with NHWC memory (the strides
 * fl_tensor_channels_last gives; stop 104: the NHWC kernels' results) */
fl_status fl_tensor_empty_cl(fl_tensor **out, fl_dtype dt, const int64_t shape[4], int device);
/* t dense (above): a 1-D view [numel] of its memory in memory order (TensorIterator's walk of such a tensor) */
fl_status fl_tensor_flat(fl_tensor **out, const fl_tensor *t);
/* A new tensor of dtype dt (not FP8) with t's shape, and t's strides where t is dense (torch's empty_like under
 * preserve_format there), else contiguous */
fl_status fl_tensor_empty_like(fl_tensor **out, const fl_tensor *t, fl_dtype dt);
/* t's values in a new tensor of dtype dt made by fl_tensor_empty_like, converted in memory order (one flat walk where
 * t is dense and not contiguous: torch's to/clone under preserve_format; a t that is not dense: a contiguous copy).
 * FP8 on either side is refused (FL_EINVAL). */
fl_status fl_tensor_copy_like(fl_tensor **out, const fl_tensor *t, fl_dtype dt);
/* Address of element 0 (storage data + offset * element size). */
void *fl_tensor_data(const fl_tensor *t);
bool fl_shape_equal(int na, const int64_t *a, int nb, const int64_t *b);
/* Writes "[2, 3]" into buf; returns buf. */
char *fl_shape_str(char *buf, size_t len, int ndim, const int64_t *shape);

/* Views (share storage). A shape entry of -1 is inferred. view needs a layout that allows it
 * (error otherwise, suggesting reshape); reshape copies when it must. */
fl_status fl_tensor_view(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape);
fl_status fl_tensor_reshape(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape);
fl_status fl_tensor_transpose(fl_tensor **out, const fl_tensor *t, int d0, int d1); /* negative dims count from the end */
fl_status fl_tensor_select(fl_tensor **out, const fl_tensor *t, int dim, int64_t index); /* drops dim */
fl_status fl_tensor_narrow(fl_tensor **out, const fl_tensor *t, int dim, int64_t start, int64_t length);
/* A new header over t's storage with t's shape, strides (those of size-1 dims too, which view recomputes), offset and
 * scale, without t's history: torch's alias, which detach and .data give (stop 105: a channels_last [1, C, H, W]
 * detached through view got {C, 1, W·C, C} for N's stride, read as contiguous by torch's rule) */
fl_status fl_tensor_alias(fl_tensor **out, const fl_tensor *t);
/* Broadcast view to `shape` (stride 0 on expanded dims); error names both shapes. */
fl_status fl_tensor_expand(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape);
/* Contiguous tensor with the same values: t itself (retained) when already contiguous. */
fl_status fl_tensor_contiguous(fl_tensor **out, const fl_tensor *t);
/* Copy into a new contiguous tensor of dtype dt (fp32/bf16/fp16; RNE). FP8 targets: use fl_quantize. */
fl_status fl_tensor_to(fl_tensor **out, const fl_tensor *t, fl_dtype dt);
/* Copy src into dst (same shape, any layouts; dtypes among fp32/bf16/fp16 are converted). */
fl_status fl_tensor_copy_(fl_tensor *dst, const fl_tensor *src);

/* A contiguous copy of t on another device (t itself, retained, when it is already there). FP8 tensors
 * keep their bytes, scale_inv (moved along), scale_axis and cast statistics. Records no history (the
 * differentiable version is fl_to_device in ops.h). */
fl_status fl_tensor_to_device(fl_tensor **out, const fl_tensor *t, int device);
/* Moves t's data to `device` in place: t gets a fresh contiguous storage there (its grad, if any, is
 * moved too), so every holder of this tensor sees it on the new device — what Module:to() does to
 * parameters. Views made earlier keep the old data. */
fl_status fl_tensor_move_(fl_tensor *t, int device);

/* Mark t's storage as written in place (optimizer steps, copy_, set, fill): bumps storage->version. */
void fl_tensor_bump(fl_tensor *t);
/* Bytes of tensor storage currently allocated on a device, and the peak since the last reset:
 * what "memory from the allocator" means in benchmarks (headers and caches outside storages excluded). */
size_t fl_bytes_live(int device);
size_t fl_bytes_peak(int device);
void fl_bytes_reset_peak(int device);

/* Element access by full index (negative indices are not accepted here; the binding normalises). */
fl_status fl_tensor_get(const fl_tensor *t, const int64_t *index, double *value);
fl_status fl_tensor_set(fl_tensor *t, const int64_t *index, double value);
/* Whole tensor as fp32, row-major, into a caller buffer of numel floats (FP8: dequantized). */
fl_status fl_tensor_read_f32(const fl_tensor *t, float *dst);

#endif
