/* fl_cuda.h — the core headers, seen from C++ (nvcc), plus the CUDA error helpers every .cu uses.
 * Only the .cu files under kernels/ include this; core/ and lua/ never see CUDA headers. */
#ifndef FL_CUDA_H
#define FL_CUDA_H

#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "error.h"
#include "format.h"
#include "tensor.h"
#include "device.h"
#include "cuda_api.h"
#include "fl_cuda_ops.h"
}

/* Turn a CUDA error into FL_EDEVICE with "cudaXxx failed: <code name>: <string>", never abort.
 * Also clears the sticky "last error" so one failure does not poison later calls. */
static inline fl_status fl_cuda_fail(cudaError_t e, const char *what, const char *file, int line) {
    (void)cudaGetLastError();
    return fl_set_error(FL_EDEVICE, file, line, "%s failed: %s: %s", what, cudaGetErrorName(e),
                        cudaGetErrorString(e));
}
#define FL_CUDA_CHECK(call, what)                                                       \
    do { cudaError_t fl__e = (call);                                                    \
         if (fl__e != cudaSuccess) return fl_cuda_fail(fl__e, what, __FILE__, __LINE__); } while (0)

/* The one stream all fp8lab work on the (single) CUDA device is ordered on; the caching allocator
 * relies on this: a block freed and handed out again is only touched by later work on this stream. */
cudaStream_t fl_cuda_stream(void);
/* Multiprocessor count of the device, to size grid-stride launches. */
int fl_cuda_sm_count(void);

/* Launchers (kernels/quantize.cu). Pointers are device memory; counters are device memory laid
 * out as fl_cuda_qstats (fl_cuda_ops.h). Each checks its preconditions and the launch. */

/* Per-tensor: dst[i] = fp8(src[i] * scale), scale read from dscale (device) when that is non-NULL; dst may
 * be NULL (amax and counters only). */
fl_status cuda_quantize(const void *src, fl_dtype src_dt, uint8_t *dst, size_t n, fl_dtype fmt,
                        float scale, const float *dscale, fl_overflow p, fl_cuda_qstats *stats, cudaStream_t stream);
/* n scales and their inverses on the device: scale[i] = the current rule (core/scale_rule.h
 * fl_amax_to_scale_current with fmt's max, margin, pow2) of amax_bits[i] (float bits); without amax_bits,
 * given[i] (device), or `value` when given is NULL too; scale_inv[i] = 1/scale[i] (IEEE division, as the
 * host computes it). scale may be NULL. */
fl_status cuda_scales(size_t n, const unsigned int *amax_bits, const float *given, float value, fl_dtype fmt,
                      int margin, bool pow2, float *scale, float *scale_inv, cudaStream_t stream);
/* Per-index along an axis: the tensor is `outer` x `len` x `inner` (row-major); element
 * (o, r, i) uses scales[r]; row_amax_bits[r] (len entries, zeroed by the caller) receives max |x|
 * of index r. dst may be NULL. scales may be NULL when dst is NULL. */
fl_status cuda_quantize_rows(const void *src, fl_dtype src_dt, uint8_t *dst, size_t outer, size_t len,
                             size_t inner, fl_dtype fmt, const float *scales, fl_overflow p,
                             fl_cuda_qstats *stats, unsigned int *row_amax_bits, cudaStream_t stream);
/* dst[i] = decode(q[i]) * scale_inv[(i / inner) % len]  (len == 1, inner == n: per-tensor),
 * written as dst_dt (fp32/bf16/fp16, round to nearest even). */
fl_status cuda_dequantize(const uint8_t *q, fl_dtype fmt, void *dst, fl_dtype dst_dt, size_t n,
                          const float *scale_inv, size_t len, size_t inner, cudaStream_t stream);

#endif
