/* cuda_entries.h — the entries of the "cuda" device table (core/device.h), one family per kernels/<family>.cu
 * file, as plain C so tests can call them directly. Each has exactly the signature and contract of its
 * fl_device field (core/device.h documents them; the CPU device is the reference). Every entry checks
 * what it relies on (device pointers, dtypes, layouts) and returns FL_EINVAL/FL_EUNSUPPORTED/FL_EDEVICE
 * with a message instead of launching; work is queued on fp8lab's one stream (fl_cuda_stream()), and
 * an entry that hands a result to the host synchronizes that stream. Linked only with FL_HAVE_CUDA. */
#ifndef FL_CUDA_ENTRIES_H
#define FL_CUDA_ENTRIES_H

#include <stdbool.h>
#include <stdint.h>
#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* fl_cuda_dev_<name> for every entry core/device.h lists, one family per file: elementwise.cu (copy,
 * fill, binary, scalar and unary ops), reduce.cu (reductions, Σx²), matmul.cu (cuBLASLt GEMMs, gemm_lt.h),
 * cuda_device.cu (quantize, quantize_current, quantize_transpose, dequantize, amax over quantize.cu and
 * cast_transpose.cu), activation.cu (ReLU/GELU, dropout with the CPU's Philox mask, bias add),
 * softmax.cu (softmax, cross-entropy, MSE), layernorm.cu, embedding.cu, attention.cu (batched GEMMs and a
 * fused (causal) softmax), flash_attention.cu (the same attention in bf16, fused into tiles, keeping no
 * probabilities), optim.cu, fp8_gemm.cu (cuBLASLt FP8 GEMM in the TN layout; K-major copies by a byte transpose, per-row/column scales in an epilogue pass; shapes cuBLASLt refuses run as a bf16 GEMM
 * of the exactly decoded bytes). */
#define FL_CUDA_DEV_DECLARE(name, params) fl_status fl_cuda_dev_##name params;
FL_DEVICE_ENTRIES(FL_CUDA_DEV_DECLARE)
#undef FL_CUDA_DEV_DECLARE

#ifdef __cplusplus
}
#endif

#endif
