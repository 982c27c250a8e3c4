/* gemm_lt.h — GEMMs through cuBLASLt (kernels/gemm_lt.cu), as plain C: device pointers, sizes and a
 * stream, no CUDA headers, so core/, tests and benchmarks can call them. Linked only with FL_HAVE_CUDA.
 *
 * Row-major semantics (cuBLASLt's column-major view is the gemm_lt.cu's business):
 *   D[m, n] = alpha · op(A)[m, k] · op(B)[k, n]  (+ bias[n])  (+ D, when accumulate)
 *   A is stored [m, k] (a_trans false) or [k, m] (a_trans true), rows lda elements apart;
 *   B is stored [n, k] (b_trans false: the weight layout, D = A·Bᵀ) or [k, n] (b_trans true: D = A·B);
 *   D is stored [m, n], rows ldd elements apart.
 * FP8 (A or B E4M3/E5M2): both FP8, not both E5M2, a_trans = b_trans = false — the only layout Hopper's
 * FP8 kernels take (cuBLASLt's "TN"); the linear layer's three GEMMs are
 *   fprop  y  = x · Wᵀ       A = x [tokens, in],   B = W  [out, in]
 *   dgrad  dX = dY · W       A = dY [tokens, out], B = Wᵀ [in, out]      (cast_transpose's copy of W)
 *   wgrad  dW = dYᵀ · x      A = dYᵀ [out, tokens], B = xᵀ [in, tokens] (cast_transpose's copies)
 *   alpha = a_scale_inv · b_scale_inv (device floats), accumulation in fp32; k, lda, ldb multiples of
 *   16, n a multiple of 16, pointers 16-byte aligned. D is fp32, bf16, or FP8 (then D = cast(D·d_scale),
 *   saturating as cuBLASLt converts, and no accumulate). fast_accum (cuBLASLt's FAST_ACCUM: partial sums
 *   stay in the tensor cores' reduced-precision accumulator) is for fprop only, as TransformerEngine does.
 * High precision: A, B both fp32, or both bf16/fp16 with D that dtype or fp32; any layout; fp32
 *   accumulation (fp32 inputs: true fp32 products unless tf32).
 * bias: n entries; cuBLASLt's bias epilogue where it takes the dtype (FP8: bf16; otherwise D's dtype),
 *   else a separate add after the GEMM (never for FP8 D). d_amax: max |D| before any d_scale, written
 *   (not accumulated) to one device float — from cuBLASLt (AMAX_D) where it provides it, else from a
 *   pass over the stored D; a NaN in D makes it NaN.
 * Algorithms come from cublasLtMatmulAlgoGetHeuristic once per (shape, dtypes, layout, epilogue,
 * pointer alignment) and are cached; one 32 MiB workspace and one handle per device, so GEMMs of one
 * device must be ordered on one stream (fp8lab uses one). cuBLASLt itself is dlopen'ed on the first
 * GEMM. Every CUDA or cuBLASLt failure returns FL_EDEVICE/FL_EUNSUPPORTED with the call and status
 * name; nothing aborts. */
#ifndef FL_GEMM_LT_H
#define FL_GEMM_LT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The same type as cudaStream_t. NULL means fp8lab's own stream (kernels/cuda_device.cu). */
typedef struct CUstream_st *fl_cuda_stream_t;

typedef struct {
    int64_t m, n, k;
    const void *a; fl_dtype a_dtype; int64_t lda; bool a_trans;
    const void *b; fl_dtype b_dtype; int64_t ldb; bool b_trans;
    void *d; fl_dtype d_dtype; int64_t ldd;
    const float *a_scale_inv, *b_scale_inv;  /* FP8 operands: 1 device float each (dequantize multipliers) */
    const float *d_scale;                    /* FP8 D: 1 device float (quantize multiplier) */
    float *d_amax;                           /* optional: 1 device float */
    const void *bias; fl_dtype bias_dtype;   /* optional: n device values */
    bool fast_accum;                         /* FP8 only; fprop */
    bool accumulate;                         /* D += product (not with FP8 D) */
    bool tf32;                               /* fp32 inputs: allow TF32 tensor cores */
    /* Strided batch (high-precision GEMMs only): batch > 1 runs `batch` independent GEMMs, entry z
     * reading A at a + z·stride_a, B at b + z·stride_b and writing D at d + z·stride_d (elements; a
     * stride of 0 broadcasts that operand; stride_d must be > 0, so every entry writes its own D). batch 0
     * or 1: one GEMM, strides ignored. No bias, d_amax or FP8 with batch > 1 (FL_EINVAL / FL_EUNSUPPORTED).
     * An odd stride is fine: the alignment cuBLASLt is told is that of every entry, not just the first. */
    int64_t batch, stride_a, stride_b, stride_d;
} fl_cuda_gemm_args;

/* Fills a with m, n, k and the defaults: dense leading dimensions, no transposes, no bias/amax. */
void fl_cuda_gemm_args_init(fl_cuda_gemm_args *a, int64_t m, int64_t n, int64_t k);

fl_status fl_cuda_gemm(const fl_cuda_gemm_args *a, fl_cuda_stream_t stream);

/* How many times cublasLtMatmulAlgoGetHeuristic ran in this process (tests check the cache). */
size_t fl_cuda_gemm_heuristic_calls(void);

#ifdef __cplusplus
}
#endif

#endif
