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

/* elementwise.cu: strided copy with fp32/bf16/fp16 conversion (same-dtype copies move bytes, FP8
 * included), fill, broadcast binary ops, scalar ops, unary ops. */
fl_status fl_cuda_dev_copy(fl_tensor *dst, const fl_tensor *src);
fl_status fl_cuda_dev_fill(fl_tensor *dst, double value);
fl_status fl_cuda_dev_binary(fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b);
fl_status fl_cuda_dev_binary_scalar(fl_binop op, fl_tensor *dst, const fl_tensor *a, double s, bool scalar_first);
fl_status fl_cuda_dev_unary(fl_unop op, fl_tensor *dst, const fl_tensor *a);
/* reduce.cu: sum/mean/max/min/amax over everything or one dim; Σx² for clip_grad_norm_. */
fl_status fl_cuda_dev_reduce(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim);
fl_status fl_cuda_dev_sumsq(const fl_tensor *t, double *out);
/* matmul.cu: batched GEMMs through cuBLASLt (gemm_lt.h). */
fl_status fl_cuda_dev_matmul(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b);

/* activation.cu: ReLU/GELU, dropout (Philox, the same mask as the CPU), bias add. */
fl_status fl_cuda_dev_act_fwd(fl_act kind, const float *x, float *y, int64_t n);
fl_status fl_cuda_dev_act_bwd(fl_act kind, const float *x, const float *dy, float *dx, int64_t n);
fl_status fl_cuda_dev_dropout_fwd(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed,
                                  uint64_t offset);
fl_status fl_cuda_dev_dropout_bwd(const uint8_t *mask, const float *dy, float *dx, int64_t n, float p);
fl_status fl_cuda_dev_bias_add(float *y, const float *b, int64_t rows, int64_t cols);
/* softmax.cu: softmax/log-softmax, fused cross-entropy, mean-squared error. */
fl_status fl_cuda_dev_softmax_fwd(bool log, const float *x, float *y, int64_t rows, int64_t cols);
fl_status fl_cuda_dev_softmax_bwd(bool log, const float *y, const float *dy, float *dx, int64_t rows, int64_t cols);
fl_status fl_cuda_dev_cross_entropy_fwd(const float *logits, const float *target, int64_t rows, int64_t cols,
                                        int64_t ignore_index, float label_smoothing, double *loss, int64_t *count);
fl_status fl_cuda_dev_cross_entropy_bwd(const float *logits, const float *target, int64_t rows, int64_t cols,
                                        int64_t ignore_index, float label_smoothing, float dloss, float *dlogits);
fl_status fl_cuda_dev_mse_fwd(const float *x, const float *y, int64_t n, double *sum);
fl_status fl_cuda_dev_mse_bwd(const float *x, const float *y, float *dx, int64_t n, float f);
/* layernorm.cu */
fl_status fl_cuda_dev_layernorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                                    int64_t rows, int64_t cols, float eps);
fl_status fl_cuda_dev_layernorm_bwd(const float *x, const float *w, const float *mean, const float *rstd,
                                    const float *dy, float *dx, float *dw, float *db, int64_t rows, int64_t cols);
/* embedding.cu */
fl_status fl_cuda_dev_embedding_fwd(const float *idx, int64_t n, const float *weight, int64_t vocab, int64_t dim,
                                    float *y);
fl_status fl_cuda_dev_embedding_bwd(const float *idx, int64_t n, const float *dy, int64_t vocab, int64_t dim,
                                    float *dweight);
/* attention.cu: batched GEMMs (fp32, or bf16 operands with bf16) + fused (causal) softmax. */
fl_status fl_cuda_dev_sdpa_fwd(const float *q, const float *k, const float *v, float *out, float *att, int64_t B,
                               int64_t H, int64_t T, int64_t D, float scale, bool causal, bool bf16);
fl_status fl_cuda_dev_sdpa_bwd(const float *q, const float *k, const float *v, const float *att, const float *dout,
                               float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D,
                               float scale, bool causal, bool bf16);
/* optim.cu */
fl_status fl_cuda_dev_sgd(float *p, const float *g, float *buf, int64_t n, double lr, double momentum,
                          double dampening, double weight_decay, bool nesterov, bool first_step);
fl_status fl_cuda_dev_adamw(float *p, const float *g, float *m, float *v, int64_t n, double lr, double beta1,
                            double beta2, double eps, double weight_decay, int64_t step);
fl_status fl_cuda_dev_msamp_adamw(fl_tensor *p, const fl_tensor *g, fl_tensor *m, fl_tensor *v, fl_tensor *v_scale_inv,
                                  fl_tensor *p_fp8, double lr, double beta1, double beta2, double eps,
                                  double weight_decay, int64_t step);
/* fp8_gemm.cu: cuBLASLt FP8 GEMM in the TN layout (K-major copies made by a byte transpose where an
 * operand is not), per-row/per-column scales applied in the epilogue pass; shapes cuBLASLt's FP8
 * kernels refuse run as a bf16 GEMM of the exactly decoded bytes (the same products). */
fl_status fl_cuda_dev_fp8_gemm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias,
                               fl_tensor **a_cache, fl_tensor **b_cache, bool fast_accum);

#ifdef __cplusplus
}
#endif

#endif
