/* cpu_internal.h — what the CPU kernel files share: strided load/store of any dtype to fp32 blocks,
 * and a tile walker over N-d (broadcast, non-contiguous) layouts that polls for Ctrl-C. */
#ifndef FL_CPU_INTERNAL_H
#define FL_CPU_INTERNAL_H
#include "device.h"

#define FL_CPU_TILE 512              /* elements per tile: fits fp32 scratch buffers on the stack */
#define FL_CPU_POLL (1 << 20)        /* poll the interrupt flag about every this many elements */
#define FL_CPU_PAR_MIN (1 << 15)     /* below this many elements, stay on one thread */

/* n elements starting at element offset `off` (relative to fl_tensor_data) with element stride
 * `stride`, converted to / from fp32 (stores round to nearest even; FP8 stores saturate, no scale). */
void fl_cpu_load(const fl_tensor *t, int64_t off, int64_t stride, int64_t n, float *dst);
void fl_cpu_store(fl_tensor *t, int64_t off, int64_t stride, int64_t n, const float *src);

/* Calls fn once per tile of up to FL_CPU_TILE elements along the innermost (coalesced) dim of
 * `shape`, giving each tensor's element offset and inner stride. Tiles run in parallel for large
 * work; the interrupt flag is polled between chunks (returns FL_EINTR). nt <= 3. */
typedef void (*fl_cpu_tile_fn)(void *ctx, int64_t n, const int64_t *off, const int64_t *stride);
fl_status fl_cpu_for_tiles(int ndim, const int64_t *shape, int nt, const fl_tensor *const *ts,
                           fl_cpu_tile_fn fn, void *ctx);

/* Device entries implemented in the family files. */
fl_status fl_cpu_binary(fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b);
fl_status fl_cpu_binary_scalar(fl_binop op, fl_tensor *dst, const fl_tensor *a, double s, bool scalar_first);
fl_status fl_cpu_unary(fl_unop op, fl_tensor *dst, const fl_tensor *a);
fl_status fl_cpu_reduce(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim);
fl_status fl_cpu_matmul(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b);
fl_status fl_cpu_quantize(fl_tensor *dst, const fl_tensor *src, const float *scales, int axis, fl_overflow p);
fl_status fl_cpu_dequantize(fl_tensor *dst, const fl_tensor *q);
fl_status fl_cpu_amax(const fl_tensor *src, int axis, float *out);

/* Split a contiguous tensor around `axis` into [outer, size, inner]. */
static inline void fl_cpu_split_axis(const fl_tensor *t, int axis, int64_t *outer, int64_t *size, int64_t *inner) {
    *outer = 1; *inner = 1; *size = t->shape[axis];
    for (int i = 0; i < axis; i++) *outer *= t->shape[i];
    for (int i = axis + 1; i < t->ndim; i++) *inner *= t->shape[i];
}
#endif
