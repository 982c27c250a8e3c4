/* nn.h — differentiable neural-network ops: argument checks with shapes in the messages, fp32
 * conversion of bf16/fp16 inputs, the CPU kernels of core/cpu/cpu_nn.h, and autograd nodes saving
 * what backward needs. Results are new tensors (refcount 1) in *out; FP8 inputs are refused. */
#ifndef FL_NN_H
#define FL_NN_H
#include "tensor.h"
#include "rng.h"

/* y = x·Wᵀ + b for x [..., in], W [out, in], b [out] or NULL: one GEMM reading W in place (no
 * transposed copy). Backward: dX = dY·W, dW = dYᵀ·X (over all leading dims), db = Σ dY.
 * Under autocast bf16/fp16 the GEMMs run in that dtype with fp32 results. */
fl_status fl_linear(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b);
/* The shape and dtype checks of a linear (FP8 operands refused with `fp8_hint`); messages start with `who`. */
fl_status fl_linear_check(const char *who, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                          const char *fp8_hint);

fl_status fl_relu(fl_tensor **out, const fl_tensor *x);
/* relu(fl_linear(x, w, b)) rounded once to bf16, under a bf16 autocast and with nothing requiring grad (FL_EINVAL
 * otherwise; no node): the input a bf16-autocast feed-forward block's second linear takes, with the bits of the
 * composite. One pass over the GEMM's fp32 sums where the device has linear_relu_bf16 (x fp32 or bf16, w and b
 * fp32), the composite elsewhere. */
fl_status fl_linear_relu_bf16(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b);
/* approx: 0 exact (erf), 1 tanh */
fl_status fl_gelu(fl_tensor **out, const fl_tensor *x, int approx);
/* x·sigmoid(x), one node (its backward from the input) */
fl_status fl_silu(fl_tensor **out, const fl_tensor *x);
/* silu of a bf16 x computed in fp32 and rounded once to bf16, with no node (FL_EINVAL when x requires grad): the
 * bits of fl_silu on x, then the cast to bf16, in one pass where the device has act_fwd_bf16. */
fl_status fl_silu_bf16(fl_tensor **out, const fl_tensor *x);
/* relu of a bf16 x in bf16, with no node (FL_EINVAL when x requires grad): the bits of fl_relu on x, then the cast
 * to bf16, in one pass on the bf16 bits where the device has act_fwd_bf16 */
fl_status fl_relu_bf16(fl_tensor **out, const fl_tensor *x);
/* Over the last dim. */
fl_status fl_softmax(fl_tensor **out, const fl_tensor *x);
fl_status fl_log_softmax(fl_tensor **out, const fl_tensor *x);
/* F.rms_norm over the last dim of fp32 x (w [cols] or NULL) recording nothing, in one pass where the device can;
 * *out NULL where it cannot (core/nn.c) */
fl_status fl_rms_norm_fwd(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, double eps);
/* softmax (log: log-softmax) over dim (0-based) of x; the result fp32 (see fl_softmax_dim in core/nn.c) */
fl_status fl_softmax_dim(fl_tensor **out, const fl_tensor *x, int dim, int log);
/* logits [..., C], target [...] holding class indices (any non-FP8 dtype, integral values); mean
 * over rows whose target != ignore_index. 0-d result. */
fl_status fl_cross_entropy(fl_tensor **out, const fl_tensor *logits, const fl_tensor *target,
                           int64_t ignore_index, double label_smoothing);
/* mean((x - y)²); y needs the same shape (it may require grad too). */
fl_status fl_mse_loss(fl_tensor **out, const fl_tensor *x, const fl_tensor *y);
/* Over the last dim; w, b [last dim] or NULL. */
fl_status fl_layer_norm(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b, double eps);
/* fl_layer_norm(x + r) recording nothing (FL_EINVAL where an input requires grad): a residual block's norm in
 * inference, with the sum never in memory where the device has add_layernorm_fwd (x, r fp32 contiguous of one
 * shape); the bits of the add, then layer_norm. */
fl_status fl_add_layer_norm(fl_tensor **out, const fl_tensor *x, const fl_tensor *r, const fl_tensor *w,
                            const fl_tensor *b, double eps);
/* LayerNorm(x) cast per tensor to FP8 fmt in LayerNorm's pass (the device's layernorm_quantize), with the host scale
 * or, where scale is NULL, current scaling (margin, pow2): *q that cast (its statistics in qstats, scale_inv 1/the
 * scale), *y LayerNorm's output as a header without storage
 * (fl_tensor_header) that carries its history: fl_layer_norm's backward, which reads x and not y. For a consumer
 * that keeps only *q (fl_fp8_linear_layernorm). FL_EUNSUPPORTED where the device has no such entry. */
fl_status fl_layer_norm_fp8(fl_tensor **y, fl_tensor **q, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                            double eps, fl_dtype fmt, const float *scale, int margin, bool pow2);
/* GroupNorm (groups > 0: each sample's channel groups normalised over their values) or BatchNorm with the batch's
 * statistics (groups == 0: each channel over the samples and positions) of x [N, C, ...]: y = (x − mean)·rstd·w + b,
 * w, b [C] or NULL; differentiable in x, w, b. *mean_out, *var_out (when not NULL): the statistics taken, [N·groups]
 * or [C], var biased (not differentiable). FL_EUNSUPPORTED where the device has no chnorm entries. */
fl_status fl_channel_norm(fl_tensor **out, fl_tensor **mean_out, fl_tensor **var_out, const fl_tensor *x,
                          const fl_tensor *w, const fl_tensor *b, int64_t groups, double eps);
/* BatchNorm's eval pass of x [N, C, ...] with given statistics, as fp32: y = ((x − mean) / den)·w + b per channel,
 * each operation rounded as the elementwise ops round it; mean, den (= sqrt(running_var + eps)), w, b [C], w and b
 * may be NULL. No node: FL_EINVAL when an argument requires grad. FL_EUNSUPPORTED where the device has no kernel. */
fl_status fl_batch_norm_eval(fl_tensor **out, const fl_tensor *x, const fl_tensor *mean, const fl_tensor *den,
                             const fl_tensor *w, const fl_tensor *b);
/* idx [...] integral values in [0, vocab), weight [vocab, dim] → [..., dim] */
fl_status fl_embedding(fl_tensor **out, const fl_tensor *idx, const fl_tensor *weight);
/* Inverted dropout. Not training or p == 0: x itself (retained). rng NULL: fl_default_rng(); its
 * seed and counter pick the mask and the counter advances past the blocks used. */
fl_status fl_dropout(fl_tensor **out, const fl_tensor *x, double p, bool training, fl_rng *rng);
/* q, k, v [B, H, T, D] → [B, H, T, D]; scale <= 0 means 1/√D; causal masks j > i. */
fl_status fl_sdpa(fl_tensor **out, const fl_tensor *q, const fl_tensor *k, const fl_tensor *v, bool causal, double scale);
/* The same attention on the packed projection a transformer makes: qkv [B, T, 3·C] (q, k, v side by side,
 * C = H·D) → [B, T, C], heads split and merged by strided copies on the device. One node whose backward
 * writes dqkv directly: splitting with narrow would cost a zero-filled [B, T, 3·C] per part and their sum. */
fl_status fl_sdpa_qkv(fl_tensor **out, const fl_tensor *qkv, int64_t heads, bool causal, double scale);
/* Both run a device's fused attention (sdpa_flash_fwd/bwd: no B·H·T·T probabilities kept) under bf16 autocast
 * when the probabilities of the call would take more than this many bytes (fp32), and the probabilities'
 * kernels otherwise: on an H200 the fused kernels took 1.4× (forward) and 6× (backward) the time of the
 * others at the GPT-2-medium shape, so for now they are the way to fit long sequences, not a speed-up
 * (docs/cuda.md, "Fused attention"). Default 1 GiB; tests lower it. */
extern double fl_sdpa_fused_min_bytes;
/* The same choice on the CPU device, where the fused form is the bf16 kernels keeping each row's max and 1/Σ and
 * making P again in the backward (cpu_nn_attn_bf16.c): the same bits as keeping P, so the choice is one of speed
 * and memory. Negative (the default): the CPU's own threshold, fl_cpu_sdpa_fused_min_bytes() (device.h); tests
 * set it to force either form. */
extern double fl_sdpa_cpu_fused_min_bytes;

/* im2col.c: the windows of [N, C, H, W] planes (torch's unfold / fold). Kernel, stride and dilation per dim
 * (>= 1), padding per side: top and left >= 0; bottom and right may be negative (fewer windows: fold's crop).
 * OH = (H + pt + pb - dh·(kh - 1) - 1) / sh + 1 windows down, OW likewise across, each >= 1. */
typedef struct {
    int64_t kh, kw, sh, sw, dh, dw;
    int64_t pt, pb, pl, pr;
    double pad_value;   /* unfold's value at padded positions (0; -inf for max pooling) */
} fl_window;
/* x [N, C, H, W] (any dtype but FP8) → [N, C, kh·kw, OH·OW]: each window's values, kernel offset outer (torch's
 * unfold as [N, C, K, L]), copied bit for bit. Differentiable: the gradient is fold's. */
fl_status fl_unfold(fl_tensor **out, const fl_tensor *x, const fl_window *g);
/* cols [N, C, kh·kw, OH·OW] (the windows of an h×w plane) → [N, C, h, w]: each value added into the position unfold
 * reads it from, in fp32 (order k, then l) and rounded once to cols' dtype. Differentiable: the gradient is unfold's
 * (padding 0). */
fl_status fl_fold(fl_tensor **out, const fl_tensor *cols, int64_t h, int64_t w, const fl_window *g);
/* conv_depthwise.c: torch's conv2d with groups = C: x [N, C, H, W], w [C·m, 1, kh, kw] of x's dtype (not FP8), g's
 * kernel w's, its padding 0 → [N, C·m, OH, OW], each output the fp32 sum of its kernel's products (in the order of the
 * kernel offsets, fused multiply-adds) rounded once to x's dtype. Differentiable in x and w (fp32 gradients). */
fl_status fl_conv_depthwise(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_window *g);
/* max_pool.c: torch's max pooling of x [N, C, H, W] (not FP8) over g's windows (the padding never taken): *values
 * [N, C, OH, OW] in x's dtype, differentiable (the gradient to each window's maximum), and *indices, each maximum's
 * flat 0-based input position as fp32 (no history). A NaN is taken first; a window of -inf alone takes its first
 * input position. */
fl_status fl_max_pool(fl_tensor **values, fl_tensor **indices, const fl_tensor *x, const fl_window *g);
/* conv_cols.c: torch's conv2d of CPU tensors x [N, C, H, W] and w [OC, C/groups, kh, kw] of one dtype (fp32, bf16,
 * fp16), g's kernel w's, its padding 0 → [N, OC, OH, OW] in that dtype (wide: fp32, of 16-bit operands), as im2col and
 * a GEMM per group with the columns made a few samples at a time: the bits of unfold + matmul over the whole batch,
 * then + b (optional: fp32 [OC], an fp32 result only) as the elementwise add. Differentiable in x, w and b (fp32
 * gradients; bwd16: the backward's GEMMs in the 16-bit dtype, the output gradient rounded to it, as torch's; else in
 * fp32). */
fl_status fl_conv2d_cols(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                         const fl_window *g, int64_t groups, bool wide, bool bwd16);
/* avg_pool.c: torch's average pooling of x [N, C, H, W] (not FP8) over g's windows (dilation 1; bottom and right
 * padding at least top and left: the excess is ceil_mode's, never counted) → [N, C, OH, OW] in x's dtype: each
 * window's sum over divisor (> 0), or over the count of its positions in the input (and, count_pad, in the top/left
 * padding's width on each side). The bits of unfold + sum + divide; differentiable (fp32 gradient). */
fl_status fl_avg_pool(fl_tensor **out, const fl_tensor *x, const fl_window *g, bool count_pad, int64_t divisor);

#endif
