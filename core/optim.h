/* optim.h — fused optimizer updates (SGD, AdamW) and the gradient helpers of clip_grad_norm_.
 * One pass over memory per parameter, SIMD inner loops, OpenMP across threads for large tensors.
 * Optimizer states are separate tensor arguments so that later states of other dtypes (MS-AMP O2:
 * E4M3 m, fp16 v) can get their own step functions without changing the callers' shape. */
#ifndef FL_OPTIM_H
#define FL_OPTIM_H
#include <stdbool.h>
#include "tensor.h"

/* PyTorch torch.optim.SGD, one parameter:
 *   d = g + wd·p;  momentum ≠ 0: buf = first_step ? d : momentum·buf + (1−dampening)·d,
 *   d = nesterov ? d + momentum·buf : buf;   p −= lr·d.
 * p, g (and buf when momentum ≠ 0) are contiguous fp32 tensors with the same number of elements.
 * buf may be NULL only when momentum == 0. */
fl_status fl_sgd_step(fl_tensor *p, const fl_tensor *g, fl_tensor *momentum_buf, double lr, double momentum,
                      double dampening, double weight_decay, bool nesterov, bool first_step);

/* PyTorch torch.optim.AdamW, with its order of operations:
 *   p *= 1 − lr·wd;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;
 *   bc1 = 1 − β1^step, bc2 = 1 − β2^step;  denom = √v / √bc2 + eps;  p −= (lr/bc1) · m / denom.
 * amsgrad: vmax non-NULL, vmax = max(vmax, v) (NaN if either is, as torch.maximum) and the denominator takes √vmax.
 * step counts from 1 (the step being taken). p, g, m, v (and vmax) contiguous fp32, same element count. */
fl_status fl_adamw_step(fl_tensor *p, const fl_tensor *g, fl_tensor *m, fl_tensor *v, fl_tensor *vmax, double lr,
                        double beta1, double beta2, double eps, double weight_decay, int64_t step);

/* torch.optim.RMSprop, one parameter, in the fp32 operations of lua/fp8/optim/rmsprop.lua's composite (the same
 * bits): g = maximize ? −g : g;  g += wd·p;  sq = α·sq + (1−α)·g²;  centered (gavg non-NULL): gavg += (g − gavg)·(1−α),
 * avg = √(sq − gavg²) + eps, else avg = √sq + eps;  momentum > 0: buf = μ·buf + g/avg, p −= lr·buf; else
 * p −= lr·g/avg. Contiguous fp32 tensors of p's element count; buf needed when momentum > 0. */
fl_status fl_rmsprop_step(fl_tensor *p, const fl_tensor *g, fl_tensor *sq, fl_tensor *gavg, fl_tensor *buf, double lr,
                          double alpha, double eps, double weight_decay, double momentum, bool maximize);
/* torch.optim.Adagrad, one parameter, as lua/fp8/optim/adagrad.lua's composite: g = maximize ? −g : g;  g += wd·p;
 * sum += g²;  p −= clr·g/(√sum + eps), clr the step's lr/(1 + (step−1)·lr_decay). */
fl_status fl_adagrad_step(fl_tensor *p, const fl_tensor *g, fl_tensor *sum, double clr, double eps, double weight_decay,
                          bool maximize);

/* MS-AMP's low-bit AdamW (docs/fp8-spec.md §4, levels O2 and O3), one parameter of n elements:
 *   p      fp32 or fp16 parameter, updated in place (O3: the fp16 master weight);
 *   g      fp32, or FP8 with a per-tensor scale_inv (O1+ weight gradients);
 *   m      E4M3 first moment with a per-tensor scale_inv (fp32 at O1);
 *   v      fp16 second moment, its true value v·v_scale_inv[0] (v_scale_inv: fp32 [1]) (fp32 at O1);
 *   p_fp8  NULL, or (O3) the E4M3 weight the forward uses, re-cast from the updated master.
 * The update is AdamW's (fl_adamw_step) in fp32 on the dequantized values; m and v are then
 * re-quantized with fresh power-of-two scales (m: 448/amax, v: 65504/amax, rounded down), as is
 * p_fp8. Two passes (the new amaxes first, then the writes), no full-size temporaries. */
fl_status fl_msamp_adamw_step(fl_tensor *p, const fl_tensor *g, fl_tensor *m, fl_tensor *v, fl_tensor *v_scale_inv,
                              fl_tensor *p_fp8, double lr, double beta1, double beta2, double eps, double weight_decay,
                              int64_t step);

/* The raw kernels behind them (n contiguous floats), for callers that already hold buffers. Scalars
 * are double so that derived ones (1−β2, 1−lr·wd) are formed before rounding to fp32, as PyTorch does. */
void fl_sgd_kernel_f32(float *p, const float *g, float *buf, int64_t n, double lr, double momentum, double dampening,
                       double weight_decay, bool nesterov, bool first_step);
void fl_adamw_kernel_f32(float *p, const float *g, float *m, float *v, float *vmax, int64_t n, double lr,
                         double beta1, double beta2, double eps, double weight_decay, int64_t step);

/* Σ x² over a tensor of any float dtype and layout, accumulated in double (clip_grad_norm_). */
fl_status fl_sumsq(const fl_tensor *t, double *out);
/* The same for n tensors on one device, out[i] for ts[i]; a device waits once for all of them. */
fl_status fl_sumsq_many(const fl_tensor *const *ts, int n, double *out);
/* t *= s in place (fp32 tensor, any layout). */
fl_status fl_scale_(fl_tensor *t, double s);

#endif
