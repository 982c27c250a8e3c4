/* fl_cuda_ops.h — the FP8 kernels of the CUDA backend as plain C (device pointers, sizes, a stream;
 * no CUDA headers): fused cast + transpose + amax (cast_transpose.cu), AdamW and MS-AMP's low-bit Adam (optim.cu), and the
 * cuBLASLt GEMMs (gemm_lt.h). For core/, tests and benchmarks; linked only with FL_HAVE_CUDA.
 * Every launcher checks its arguments before touching the GPU (so a bad call fails the same way with
 * or without one), takes a stream (NULL: fp8lab's stream) and checks the launch. Results are
 * deterministic: reductions are max-only (order-free) and every element is written by one thread. */
#ifndef FL_CUDA_OPS_H
#define FL_CUDA_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "format.h"
#include "gemm_lt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Cast counters in device memory, zeroed by the caller before a launch, which adds to them:
 * amax_bits = float bits of max |x| over the unscaled source (NaN ignored; non-negative floats
 * order as integers, so one atomicMax per block combines them); underflow, saturated and nan count
 * as core/format.c's fl_cast_stats does. */
typedef struct {
    unsigned int amax_bits;
    unsigned int pad;
    unsigned long long underflow, saturated, nan;
} fl_cuda_qstats;

/* ---- cast_transpose.cu ------------------------------------------------------------------------
 * src [rows, cols] row-major fp32 or bf16 (contiguous). One pass: out[r][c] = fp8(src[r][c]·s) and
 * out_t[c][r] = the same byte (the transposed copy dgrad and wgrad need), saturating, RNE.
 * Per tensor: s = *scale (device float, e.g. a delayed recipe's scale); scale_inv (optional, device)
 *   receives 1/s. record_amax (optional) points at a history slot 0 (a device float, ≥ 0 or NaN)
 *   and receives max(slot, this cast's amax), NaN if the source had one — fl_scaling_record's rule.
 * out or out_t may be NULL (not both); stats may be NULL. */
fl_status fl_cuda_cast_transpose(const void *src, fl_dtype src_dt, int64_t rows, int64_t cols, fl_dtype fmt,
                                 const float *scale, float *scale_inv, uint8_t *out, uint8_t *out_t,
                                 fl_cuda_qstats *stats, float *record_amax, fl_cuda_stream_t stream);
/* Per row (torchao rowwise, current scaling): row_amax[r] = max |src[r][:]| (NaN ignored), the row's
 * scale s_r = the current rule (core/scale_rule.h fl_amax_to_scale_current) of row_amax[r] with the
 * format's max, margin and pow2, scale_inv[r] = 1/s_r; out and out_t as above with s_r per source row
 * (so out_t carries one scale per column). row_amax and scale_inv: rows device floats. Two launches
 * (row amax, then the cast), so the source is read twice. */
fl_status fl_cuda_cast_transpose_rowwise(const void *src, fl_dtype src_dt, int64_t rows, int64_t cols,
                                         fl_dtype fmt, int margin, bool pow2, float *row_amax, float *scale_inv,
                                         uint8_t *out, uint8_t *out_t, fl_cuda_qstats *stats,
                                         fl_cuda_stream_t stream);

/* ---- optim.cu ---------------------------------------------------------------------------------
 * AdamW (PyTorch's, core/optim.h fl_adamw_step), fp32 p/g/m/v of n elements, one grid-stride pass;
 * the per-element arithmetic is core/optim.c's, in the same order, rounded the same way; vmax NULL, or amsgrad's
 * running maximum of v (fp32, n elements). */
fl_status fl_cuda_adamw(float *p, const float *g, float *m, float *v, float *vmax, size_t n, double lr, double beta1,
                        double beta2, double eps, double weight_decay, int64_t step, fl_cuda_stream_t stream);

/* MS-AMP's low-bit AdamW (core/optim.h fl_msamp_adamw_step). dtypes and scale_invs as there:
 *   p      FL_F32 or FL_F16;  g FL_F32 (g_scale_inv ignored) or FL_E4M3/FL_E5M2 (g_scale_inv: 1 float);
 *   m      FL_E4M3 (m_scale_inv: 1 float, replaced) or FL_F32;  v FL_F16 (v_scale_inv: 1 float,
 *          replaced) or FL_F32;  p_fp8 NULL or (O3) E4M3 bytes with p_fp8_scale_inv (1 float, replaced).
 * work: FL_CUDA_MSAMP_WORK_WORDS 32-bit words of device memory for the amaxes and scales that pass
 * between the launches (any content; not shared with a concurrent call). Launches: new-moment amaxes,
 * scales, the update, the new scale_invs (and O3's scale), O3's re-cast. */
#define FL_CUDA_MSAMP_WORK_WORDS 8
typedef struct {
    void *p; fl_dtype p_dtype;
    const void *g; fl_dtype g_dtype; const float *g_scale_inv;
    void *m; fl_dtype m_dtype; float *m_scale_inv;
    void *v; fl_dtype v_dtype; float *v_scale_inv;
    uint8_t *p_fp8; float *p_fp8_scale_inv;
    size_t n;
    double lr, beta1, beta2, eps, weight_decay;
    int64_t step;
} fl_cuda_msamp_args;
fl_status fl_cuda_msamp_adamw(const fl_cuda_msamp_args *a, unsigned int *work, fl_cuda_stream_t stream);

/* ---- host runs of the device code -------------------------------------------------------------
 * The rules above are __host__ __device__ functions; these run them on the host over host memory
 * (sequentially, same per-element code), so tests can check them against core/ without a GPU. */
uint16_t fl_cuda_f32_to_f16_host(float x);
fl_status fl_cuda_adamw_host(float *p, const float *g, float *m, float *v, float *vmax, size_t n, double lr,
                             double beta1, double beta2, double eps, double weight_decay, int64_t step);
fl_status fl_cuda_msamp_adamw_host(const fl_cuda_msamp_args *a);

#ifdef __cplusplus
}
#endif

#endif
