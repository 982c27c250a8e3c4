/* fl_cuda_host.h — the kernels' own __host__ __device__ code run on the host over host memory (same
 * per-element and per-row code, sequentially), so tests can check it against core/ without a GPU. Each
 * is defined in the .cu file named before its group. Test use only; linked only with FL_HAVE_CUDA. */
#ifndef FL_CUDA_HOST_H
#define FL_CUDA_HOST_H

#include <stdbool.h>
#include <stdint.h>
#include "device.h"
#include "gemm_lt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host runs of the device code (kernels/elementwise.cu, reduce.cu, matmul.cu): CPU tensors in.
 * fl_cuda_<name>_host for the elementwise entries of core/device.h (copy ... reduce), with their
 * parameters; then Σx² and the GEMM's argument setup. */
#define FL_CUDA_HOST_DECLARE(name, params) fl_status fl_cuda_##name##_host params;
FL_DEVICE_ELEMENTWISE_ENTRIES(FL_CUDA_HOST_DECLARE)
#undef FL_CUDA_HOST_DECLARE
fl_status fl_cuda_sumsq_host(const fl_tensor *const *ts, int n, double *out);
fl_status fl_cuda_matmul_args_host(const fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, fl_cuda_gemm_args *g);
uint16_t fl_cuda_f32_to_bf16_host(float x);
float fl_cuda_f16_to_f32_host(uint16_t h);

/* The device code run on the host (defined in the kernels' .cu files). */
void fl_cuda_nn_philox_host(uint64_t key, uint64_t counter, uint32_t out[4]);
float fl_cuda_expf_host(float x);
fl_status fl_cuda_nn_act_fwd_host(fl_act kind, const float *x, float *y, int64_t n);
fl_status fl_cuda_nn_act_bwd_host(fl_act kind, const float *x, const float *dy, float *dx, int64_t n);
void fl_cuda_nn_dropout_fwd_host(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed,
                                 uint64_t offset);
void fl_cuda_nn_dropout_bwd_host(const uint8_t *mask, const float *dy, float *dx, int64_t n, float p);
void fl_cuda_nn_softmax_fwd_host(bool log, const float *x, float *y, int64_t rows, int64_t cols);
void fl_cuda_nn_softmax_bwd_host(bool log, const float *y, const float *dy, float *dx, int64_t rows, int64_t cols);
fl_status fl_cuda_nn_cross_entropy_fwd_host(const float *logits, const float *target, int64_t rows, int64_t cols,
                                            int64_t ignore_index, float label_smoothing, double *loss, int64_t *count);
fl_status fl_cuda_nn_cross_entropy_bwd_host(const float *logits, const float *target, int64_t rows, int64_t cols,
                                            int64_t ignore_index, float label_smoothing, float dloss, float *dlogits);
double fl_cuda_nn_mse_sum_host(const float *x, const float *y, int64_t n);
void fl_cuda_nn_layernorm_fwd_host(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                                   int64_t rows, int64_t cols, float eps);
void fl_cuda_nn_layernorm_bwd_host(const float *x, const float *w, const float *mean, const float *rstd,
                                   const float *dy, float *dx, float *dw, float *db, int64_t rows, int64_t cols);

/* Host runs of the kernels' device code (defined in kernels/attention.cu, flash_attention.cu, optim.cu, fp8_gemm.cu). */
void fl_cuda_attn_softmax_rows_host(float *att, int64_t rows, int64_t T, float scale, bool causal);
void fl_cuda_attn_dsoftmax_rows_host(const float *att, float *ds, uint16_t *s16, int64_t rows, int64_t T, float scale);
/* kernels/flash_attention.cu's block programs, every block in turn on the host (a warp's tile product as a loop):
 * the sdpa_flash_fwd/bwd entries' results for these arguments (D a multiple of 16 up to 128: supports_host). */
int fl_cuda_flash_supports_host(int64_t D);
void fl_cuda_flash_fwd_host(const float *q, const float *k, const float *v, float *out, float *stats, int64_t B,
                            int64_t H, int64_t T, int64_t D, float scale, bool causal);
void fl_cuda_flash_bwd_host(const float *q, const float *k, const float *v, const float *stats, const float *dout,
                            float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                            bool causal);
fl_status fl_cuda_sgd_host(float *p, const float *g, float *buf, int64_t n, double lr, double momentum,
                           double dampening, double weight_decay, bool nesterov, bool first_step);
int fl_cuda_fp8_gemm_native(void);
uint16_t fl_cuda_fp8_bf16_host(uint8_t b, int fmt);
void fl_cuda_fp8_transpose_host(const uint8_t *src, void *dst, int64_t R, int64_t C, int decode_fmt);
void fl_cuda_fp8_epilogue_host(float *d, int64_t M, int64_t N, const float *sa, bool a_vec, const float *sb,
                               bool b_vec, const void *bias, int bias_dt);
/* kernels/quantize.cu's per-column cast (quantize_cols_kernel: its geometry for `sms` SMs and its work items, block
 * after block) on an fp32 [outer, len, inner] source: bytes into dst (NULL: the amax pass), per-index amax into
 * col_amax[len], the whole cast's statistics into *stats. */
fl_status fl_cuda_quantize_cols_host(const float *src, uint8_t *dst, size_t outer, size_t len, size_t inner,
                                     fl_dtype fmt, const float *scales, fl_overflow p, int sms, fl_cast_stats *stats,
                                     float *col_amax);

#ifdef __cplusplus
}
#endif

#endif
