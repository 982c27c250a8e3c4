/* device.h — a device is a table of function pointers (ggml-backend style). The CPU device always
 * exists and is the reference; CUDA registers itself at start-up when built in (kernels/) and a GPU is
 * present. core/ops.c validates arguments and shapes, allocates results, then calls these.
 * A NULL entry means "not supported on this device" and ops.c reports it.
 * Kernels receive tensors whose shapes are already checked; for binary ops `a` and `b` are
 * broadcast views with exactly dst's ndim/shape (stride 0 on expanded dims). */
#ifndef FL_DEVICE_H
#define FL_DEVICE_H

#include "ops.h"

/* Activation kinds of the act_fwd/act_bwd kernels. */
/* SIGMOID and TANH: the unary ops' forward, and a backward from the output y, as the unary ops' autograd rounds it
 * (dx = dy·((1 − y)·y), dy·(1 − y·y); core/ops_grad.c calls it for fp32 tensors instead of three elementwise ops). */
typedef enum { FL_ACT_RELU = 0, FL_ACT_GELU = 1, FL_ACT_GELU_TANH = 2, FL_ACT_SILU = 3, FL_ACT_SIGMOID = 4,
               FL_ACT_TANH = 5, FL_ACT_COUNT } fl_act;

/* The op entries of a device, each listed once as X(name, (parameters)); every one returns fl_status.
 * fl_device's fields are made from these lists, and each device declares its functions from them
 * (fl_cpu_dev_<name> in core/cpu/cpu_internal.h, fl_cuda_dev_<name> in kernels/cuda_entries.h), so an
 * entry that does not match its field does not compile. A device may leave an entry NULL. */
#define FL_DEVICE_ELEMENTWISE_ENTRIES(X)                                                                           \
    /* strided copy with dtype conversion (non-FP8) */                                                             \
    X(copy, (fl_tensor *dst, const fl_tensor *src))                                                                \
    /* dst contiguous */                                                                                           \
    X(fill, (fl_tensor *dst, double value))                                                                        \
    X(binary, (fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b))                               \
    X(binary_scalar, (fl_binop op, fl_tensor *dst, const fl_tensor *a, double s, bool scalar_first))               \
    X(unary, (fl_unop op, fl_tensor *dst, const fl_tensor *a))                                                     \
    /* dim < 0: reduce all into a 1-element dst; else dst has a's shape with shape[dim] == 1                       \
     * (keepdim layout). */                                                                                        \
    X(reduce, (fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim))

#define FL_DEVICE_ENTRIES(X)                                                                                       \
    FL_DEVICE_ELEMENTWISE_ENTRIES(X)                                                                               \
    /* dst = minimum(maximum(a, lo), hi) in one pass, binary_scalar's two ops (their bits, a bf16/fp16 result      \
     * rounded once: the same, as rounding is monotone); a bound at ∓inf is none. NULL entry: the caller makes the \
     * two passes. */                                                                                              \
    X(clamp, (fl_tensor *dst, const fl_tensor *a, double lo, double hi))                                           \
    /* reduce's sum of a·a (a contiguous, the layout reduce's), with the bits of binary's a·a then reduce's sum:    \
     * each product rounded to a's dtype, then summed as reduce sums. NULL entry: the caller makes the two         \
     * passes. */                                                                                                  \
    X(sum_squares, (fl_tensor *dst, const fl_tensor *a, int dim))                                                  \
    /* log Σ exp along dim (≥ 0) of fp32 a (contiguous; dst, m and s fp32 in reduce's keepdim layout): m = the      \
     * largest value (0 where it is ±inf; NaN where one is), s = reduce's sum of exp(a - m), dst = log s + m, each   \
     * step rounded as unary, binary and reduce round it. NULL entry: the caller makes those passes. */            \
    X(logsumexp, (fl_tensor *dst, fl_tensor *m, fl_tensor *s, const fl_tensor *a, int dim))                        \
    /* The p-norm's rescue (core/ops.h's fl_norm_rescue): r and s contiguous, one value per slice of x (any        \
     * layout) over the dims in mask (bit i: dim i is reduced), in the order of x's other dims; each fp32, bf16 or  \
     * fp16; dst (as r) = r's bits, but in a slice whose s is not in [its dtype's smallest normal, inf), or for     \
     * p < 1 whose (1/p)·(r / smallest nonzero |x|)^(1-p) passes 2^126 (ops.h), while its                           \
     * largest |x| is finite and not 0: the norm (Σ|x|^p)^(1/p) from x / c (c = 2^k <= that largest |x| < 2^(k+1);  \
     * that |x| for p > 512) in float64, rounded to fp32 and then r's dtype; scale (fp32) = c in those slices, 0 in  \
     * the others. *rescued: how many (-1: not known on the host without a wait). NULL entry: the host does it on  \
     * a copy. */                                                                                                  \
    X(norm_rescue, (fl_tensor *dst, fl_tensor *scale, const fl_tensor *r, const fl_tensor *s, const fl_tensor *x,  \
                    uint32_t mask, double p, int64_t *rescued))                                                    \
    /* Its gradient from g (fp32, as r): gr (fp32, as r) = g where scale is 0, else 0; gx (fp32, as x) = -0 outside \
     * the rescued slices (x + -0 is x: the plain formula's gradient stays), and inside g times the norm's          \
     * derivative at y = x / c, sign(y)·(|y| / N)^(p-1) (N the norm of y), in float64. */                          \
    X(norm_rescue_bwd, (fl_tensor *gr, fl_tensor *gx, const fl_tensor *g, const fl_tensor *scale,                 \
                        const fl_tensor *x, uint32_t mask, double p))                                              \
    /* conv2d's forward without columns (core/conv_cols.c): y [N, OC, oh, ow] = x [N, C, H, W] convolved with       \
     * w [OC, C/groups, kh, kw] (one dtype, fp32 or bf16), plus b [OC] (fp32) where b is given (one fp32 addition    \
     * to each sum), all contiguous; y fp32, or bf16 for bf16 operands (each fp32 sum rounded once);                 \
     * geo = { kh, kw, sh, sw, dh, dw, pt, pb, pl, pr }. Its own order of each output's fp32 sum. *ran false and     \
     * nothing written where the device declines the geometry or the dtypes: the caller makes columns. NULL entry:  \
     * the columns always (the CPU's: oneDNN, core/cpu/cpu_conv.c). */                                               \
    X(conv2d_direct, (fl_tensor *y, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b, int64_t groups,    \
                      const int64_t *geo, bool *ran))                                                              \
    /* Its gradients, the same way: dx [N, C, H, W] (fp32, every element written) from dy [N, OC, oh, ow] and w     \
     * (one dtype, fp32 or bf16); dw [OC, C/groups, kh, kw] (fp32) and, where db [OC] (fp32) is given, the bias's,   \
     * from x and dy, summed over the batch in the device's order. *ran false and nothing written where it          \
     * declines: the caller's columns. */                                                                           \
    X(conv2d_direct_bwd_data, (fl_tensor *dx, const fl_tensor *dy, const fl_tensor *w, int64_t groups,             \
                               const int64_t *geo, bool *ran))                                                     \
    X(conv2d_direct_bwd_weights, (fl_tensor *dw, fl_tensor *db, const fl_tensor *x, const fl_tensor *dy,           \
                                  int64_t groups, const int64_t *geo, bool *ran))                                  \
    /* dst[b] = a[b] x b[b] for 3-D inputs [B,M,K] x [B,K,N] (B may be 1; a or b may have batch                    \
     * stride 0 for broadcast). Each operand's batch entries are row-major (stride[2] == 1) or                     \
     * column-major, i.e. a transposed matrix (stride[1] == 1, stride[2] == rows); batch stride rows*cols          \
     * or 0. dst is contiguous. Same dtype for a and b; dst fp32 or that dtype. */                                 \
    X(matmul, (fl_tensor *dst, const fl_tensor *a, const fl_tensor *b))                                            \
    /* dst (FP8, contiguous, scale_inv allocated) from src (contiguous fp32/bf16/fp16) with the                    \
     * given per-tensor scale or per-index scales (scales: n floats on host, n = 1 or shape[axis]).                \
     * Fills dst->scale_inv and dst->qstats, or sets dst->qfuture when the statistics come later                   \
     * (tensor.h; the CUDA device: no stream sync per cast). */                                                    \
    X(quantize, (fl_tensor *dst, const fl_tensor *src, const float *scales, int axis, fl_overflow p))              \
    /* The same cast with current scaling, its scales derived on the device from src itself (no host               \
     * round trip): per tensor (axis < 0) or per index along axis, amax = max |src| (NaN ignored) and              \
     * scale = fl_scale_for(max(amax, FL_AMAX_FLOOR), dst's format, margin, pow2, 1) (scaling.h). */               \
    X(quantize_current, (fl_tensor *dst, const fl_tensor *src, int axis, int margin, bool pow2, fl_overflow p))    \
    /* Per-tensor quantize of a 2-D src [R, C] that also writes dst_t [C, R]: the same bytes transposed, in        \
     * the same pass (the K-major copies Hopper's FP8 GEMMs need for dgrad and wgrad). scale: the host scale       \
     * (delayed scaling), or NULL for current scaling with (margin, pow2). Saturating only. dst_t shares dst's     \
     * scale_inv and statistics. NULL entry: the device needs no such copy (the CPU's GEMMs read transposed        \
     * operands in place). The copy may be handed to fp8_gemm as a cache slot's content for that operand. */       \
    X(quantize_transpose, (fl_tensor *dst, fl_tensor *dst_t, const fl_tensor *src, const float *scale,             \
                           int margin, bool pow2, fl_overflow p))                                                  \
    /* Per-tensor quantize of a contiguous fp32 [R, C] src, as quantize with axis < 0, that also writes dbias    \
     * [C] (fp32, contiguous) = Σ_r src[r, :] — a linear layer's bias gradient from the dY it casts, in the       \
     * cast's read of dY — with the bits fl_reduce's sum over dim 0 gives. scale: the host scale (delayed         \
     * scaling), or NULL for current scaling with (margin, pow2): quantize_current's amax, scale and bytes, the    \
     * amax in a read of its own before the cast's. NULL entry: the caller casts and reduces separately. */       \
    X(quantize_dbias, (fl_tensor *dst, const fl_tensor *src, const float *scale, int margin, bool pow2,            \
                       fl_overflow p, fl_tensor *dbias))                                                           \
    /* Per-tensor quantize of GELU(src) (approx 1: the tanh form), for a contiguous fp32 src: the bytes and       \
     * statistics that the device's GELU followed by quantize (scale: the host scale) or quantize_current (scale  \
     * NULL: current scaling with margin, pow2) give, without the fp32 output in memory (an FP8 linear's input   \
     * cast fused into the activation before it; current scaling computes GELU twice, once for the amax). NULL  \
     * entry: the caller runs the two. */                                                                          \
    X(quantize_gelu, (fl_tensor *dst, const fl_tensor *src, const float *scale, int margin, bool pow2, int approx, \
                      fl_overflow p))                                                                              \
    /* Per-tensor quantize of dY = GELU'(x) ⊙ src (the tanh form's derivative), for contiguous fp32 src and x of   \
     * one shape [R, C], and dbias [C] = Σ_r dY[r, :] unless NULL: the bytes, statistics and sums that the        \
     * device's act_bwd followed by quantize_dbias (quantize or quantize_current, without dbias) give, with the  \
     * scale as quantize_dbias takes it, without dY in memory (the dY cast of a linear layer whose output went   \
     * through GELU, fused into GELU's backward; current scaling computes dY twice, once for the amax). NULL     \
     * entry: the caller runs the two. */                                                                          \
    X(quantize_dbias_dgelu, (fl_tensor *dst, const fl_tensor *src, const fl_tensor *x, const float *scale,          \
                             int margin, bool pow2, fl_overflow p, fl_tensor *dbias))                              \
    /* Per-row current scaling of a contiguous fp32 [R, C] src (quantize_current with axis 0) that, in the same   \
     * read, also gives what dY's other uses need under rowwise scaling: col_amax [C] in host memory               \
     * (max_r |src[r, c]|, NaN ignored: wgrad's per-column scales), unless NULL, and dbias [C] (fp32,              \
     * contiguous) = Σ_r src[r, :] with the bits fl_reduce's sum over dim 0 gives, unless NULL. NULL entry:       \
     * the caller makes the separate passes. */                                                                    \
    X(quantize_rows_aux, (fl_tensor *dst, const fl_tensor *src, int margin, bool pow2, fl_overflow p,              \
                          float *col_amax, fl_tensor *dbias))                                                      \
    /* y ← GELU(x) (the tanh form; contiguous fp32 [R, C], y written) and quantize_rows_aux of y (dst per row,     \
     * col_amax unless NULL) in the same visit of each row: the values, bytes, scales and statistics of act_fwd   \
     * followed by quantize_rows_aux, with one read of y fewer (ao rowwise's input cast of a linear layer after    \
     * GELU). NULL entry: the caller runs the two. */                                                              \
    X(quantize_rows_gelu, (fl_tensor *dst, fl_tensor *y, const fl_tensor *x, int margin, bool pow2, fl_overflow p, \
                           float *col_amax))                                                                       \
    /* dy ← GELU'(x) ⊙ dy in place (the tanh form's derivative; contiguous fp32 [R, C]) and quantize_rows_aux of    \
     * the result (dst per row, col_amax and dbias unless NULL) in the same visit of each row: the values, bytes,  \
     * scales, statistics and sums of act_bwd in place followed by quantize_rows_aux, with one read of dy fewer    \
     * (ao rowwise's dY cast of a linear layer whose output went through GELU). NULL entry: the caller runs the   \
     * two. */                                                                                                     \
    X(quantize_rows_dgelu, (fl_tensor *dst, fl_tensor *dy, const fl_tensor *x, int margin, bool pow2, fl_overflow p,\
                            float *col_amax, fl_tensor *dbias))                                                    \
    /* dst contiguous */                                                                                           \
    X(dequantize, (fl_tensor *dst, const fl_tensor *q))                                                            \
    /* amax of a contiguous tensor, per tensor (axis < 0, 1 value) or per index along axis (shape[axis]            \
     * values), into host memory. */                                                                               \
    X(amax, (const fl_tensor *src, int axis, float *out))                                                          \
    /* ---- neural-network kernels (core/nn.c, core/linear.c) ------------------------------------                 \
     * Pointers are this device's memory: contiguous fp32 buffers, row-major, "rows" = product of the              \
     * leading dims, "cols" = the last dim; core/nn.c has checked the shapes. The CPU versions                     \
     * (core/cpu/cpu_nn.h) document the maths of each and are the reference the others are tested                  \
     * against. Results that core/ needs on the host (a loss, a count) come back through host pointers. */         \
    X(act_fwd, (fl_act kind, const float *x, float *y, int64_t n))                                                 \
    /* act_bwd's x: GELU's input; ReLU's output (its input gives the same). */                                   \
    X(act_bwd, (fl_act kind, const float *x, const float *dy, float *dx, int64_t n))                               \
    /* act_fwd of a bf16 x without an fp32 copy of it: the bits of act_fwd on x widened, written as fp32 to y, or  \
     * (y NULL) rounded once to bf16 in y16 as the fp32 → bf16 cast rounds. NULL: core/nn.c widens x itself. */   \
    X(act_fwd_bf16, (fl_act kind, const uint16_t *x, float *y, uint16_t *y16, int64_t n))                          \
    /* act_bwd of GELU (either form) or SiLU on a bf16 x without an fp32 copy of it: the bits of act_bwd on x       \
     * widened. NULL: core/nn.c widens x itself. */                                                                 \
    X(act_bwd_bf16, (fl_act kind, const uint16_t *x, const float *dy, float *dx, int64_t n))                       \
    /* Softmax (log: log-softmax) over the last dim; backward takes the forward output y. */                       \
    X(softmax_fwd, (bool log, const float *x, float *y, int64_t rows, int64_t cols))                               \
    X(softmax_bwd, (bool log, const float *y, const float *dy, float *dx, int64_t rows, int64_t cols))             \
    /* softmax_fwd of a bf16 x without an fp32 copy of it (each row widened where the kernel reads it): the bits   \
     * of softmax_fwd on x widened, an fp32 y. NULL: core/nn.c widens x itself. */                                 \
    X(softmax_fwd_bf16, (bool log, const uint16_t *x, float *y, int64_t rows, int64_t cols))                       \
    /* The same over the middle dim of [outer, size, inner] (a dim with a stride), each of the outer·inner columns \
     * given the bits softmax_fwd/_bwd give it as a row. NULL: core/nn.c transposes the dim last around them.     \
     */                                                                                                            \
    X(softmax_dim_fwd, (bool log, const float *x, float *y, int64_t outer, int64_t size, int64_t inner))           \
    X(softmax_dim_bwd, (bool log, const float *y, const float *dy, float *dx, int64_t outer, int64_t size,         \
                        int64_t inner))                                                                            \
    /* Targets are class indices stored as floats; FL_EINVAL naming the first bad row for a target                 \
     * outside [0, cols) that is not ignore_index. *loss (host) is the mean over counted rows. */                  \
    X(cross_entropy_fwd, (const float *logits, const float *target, int64_t rows, int64_t cols,                    \
                          int64_t ignore_index, float label_smoothing, double *loss, int64_t *count))              \
    X(cross_entropy_bwd, (const float *logits, const float *target, int64_t rows, int64_t cols,                    \
                          int64_t ignore_index, float label_smoothing, float dloss, float *dlogits))               \
    /* *sum (host) = Σ (x−y)² accumulated in double;  backward: dx = f·(x − y). */                                 \
    X(mse_fwd, (const float *x, const float *y, int64_t n, double *sum))                                           \
    X(mse_bwd, (const float *x, const float *y, float *dx, int64_t n, float f))                                    \
    /* LayerNorm over the last dim; w, b may be NULL; mean and rstd [rows] are saved for backward,                 \
     * which writes dx and accumulates (+=) into dw, db when they are non-NULL. */                                 \
    X(layernorm_fwd, (const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,          \
                      int64_t rows, int64_t cols, float eps))                                                      \
    /* F.rms_norm over the last dim of a contiguous fp32 x [rows, cols] (w contiguous fp32 [cols] or NULL) with  \
     * nothing to record: y = (x·r)·w, r = 1/√(mean(x·x) + eps), the bits of the ops F.rms_norm composes (the    \
     * products rounded to fp32, the mean reduce's, eps rounded to fp32 as binary_scalar's add takes it, rsqrt's  \
     * two roundings). NULL: lua/fp8/nn/functional.lua composes the ops. */                                       \
    X(rms_norm_fwd, (const float *x, const float *w, float *y, int64_t rows, int64_t cols, double eps))            \
    /* layernorm_fwd of x + r (contiguous fp32 of one shape; their sum rounded as the add rounds it) without the sum \
     * in memory: the bits of the add then layernorm_fwd (fl_add_layer_norm, a residual block's norm in inference).  \
     * NULL: core/nn.c adds, then runs layernorm_fwd. */                                                            \
    X(add_layernorm_fwd, (const float *x, const float *r, const float *w, const float *b, float *y, float *mean,    \
                          float *rstd, int64_t rows, int64_t cols, float eps))                                     \
    X(layernorm_bwd, (const float *x, const float *w, const float *mean, const float *rstd, const float *dy,       \
                      float *dx, float *dw, float *db, int64_t rows, int64_t cols))                                \
    /* layernorm_bwd with dx added into the buffer rather than written: dx[i] + the value layernorm_bwd writes, one \
     * fp32 add each, the bits of layernorm_bwd then the engine's in-place add (a residual stream's gradient      \
     * summed in LayerNorm's pass: fl_autograd_grad_sum). NULL: core/nn.c writes dx and the engine adds it. */     \
    X(layernorm_bwd_add, (const float *x, const float *w, const float *mean, const float *rstd, const float *dy,   \
                          float *dx, float *dw, float *db, int64_t rows, int64_t cols))                            \
    /* layernorm_fwd of a contiguous fp32 x [rows, cols] (cols its last dim; w, b contiguous fp32 [cols] or NULL)  \
     * with y cast per tensor into the FP8 dst of x's shape as it is made: dst's bytes and statistics are those   \
     * of layernorm_fwd then quantize (scale: the host scale) or quantize_current (scale NULL: current scaling    \
     * with margin, pow2; y's amax in a pass of its own first), mean and rstd [rows] (fp32) are layernorm_fwd's,  \
     * and y is never in memory (an FP8 linear's input cast fused into the LayerNorm before it). NULL entry: the  \
     * caller runs the two. */                                                                                     \
    X(layernorm_quantize, (fl_tensor *dst, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,             \
                           fl_tensor *mean, fl_tensor *rstd, float eps, const float *scale, int margin, bool pow2, \
                           fl_overflow p))                                                                         \
    /* GroupNorm (groups G > 0: statistics per sample and group over its C/G·P values) or BatchNorm's training   \
     * (G == 0: per channel over N·P) of a contiguous fp32 x [N, C, P]; w, b [C] or NULL. mean, rstd: [N·G] or   \
     * [C], saved for backward; var (NULL or as mean): the biased variance. Backward writes dx (unless NULL) and  \
     * accumulates (+=) into dw, db when they are non-NULL. NULL entry: the Lua composite of elementwise ops. */  \
    X(chnorm_fwd, (const float *x, const float *w, const float *b, float *y, float *mean, float *rstd, float *var, \
                   int64_t N, int64_t C, int64_t P, int64_t G, float eps))                                         \
    X(chnorm_bwd, (const float *x, const float *w, const float *mean, const float *rstd, const float *dy,          \
                   float *dx, float *dw, float *db, int64_t N, int64_t C, int64_t P, int64_t G))                   \
    /* BatchNorm's eval pass over contiguous fp32 x [N, C, P]: y = ((x − mean[c]) / den[c])·w[c] + b[c], each        \
     * operation rounded as the composite's elementwise ops round it (den = sqrt(var + eps), made by the caller);  \
     * w, b NULL: that step left out. No backward (core/nn.c records none). NULL entry: the Lua composite. */     \
    X(chnorm_eval, (const float *x, const float *mean, const float *den, const float *w, const float *b, float *y,  \
                    int64_t N, int64_t C, int64_t P))                                                              \
    /* The three above over a channels_last x: its memory [N, P, C] (C contiguous values per position), y and dx  \
     * in that same memory order; the other arguments and the results' meaning as theirs (stop 104: no copy to     \
     * [N, C, P] and back). NULL entry: core/nn.c runs the NCHW entry on copies. */                               \
    X(chnorm_fwd_cl, (const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,          \
                      float *var, int64_t N, int64_t C, int64_t P, int64_t G, float eps))                          \
    X(chnorm_bwd_cl, (const float *x, const float *w, const float *mean, const float *rstd, const float *dy,       \
                      float *dx, float *dw, float *db, int64_t N, int64_t C, int64_t P, int64_t G))                \
    X(chnorm_eval_cl, (const float *x, const float *mean, const float *den, const float *w, const float *b,        \
                       float *y, int64_t N, int64_t C, int64_t P))                                                 \
    /* idx: n floats holding integers; FL_EINVAL for one outside [0, vocab). Backward adds dy rows                 \
     * into dweight (+=), in index order (deterministic). */                                                       \
    X(embedding_fwd, (const float *idx, int64_t n, const float *weight, int64_t vocab, int64_t dim, float *y))     \
    X(embedding_bwd, (const float *idx, int64_t n, const float *dy, int64_t vocab, int64_t dim, float *dweight))   \
    /* Inverted dropout, mask from Philox(seed) at block offset + i/4 for element i, so every device               \
     * draws the same mask for the same (seed, offset). mask: n bytes of this device's memory. */                  \
    X(dropout_fwd, (const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed,                    \
                    uint64_t offset))                                                                              \
    X(dropout_bwd, (const uint8_t *mask, const float *dy, float *dx, int64_t n, float p))                          \
    /* Scaled-dot-product attention on [B, H, T, D] q, k, v; att (B·H·T·T) keeps the probabilities                 \
     * for backward, which overwrites dq, dk, dv. bf16 (bf16 autocast): every GEMM operand (q, k, v, P;            \
     * dO, dS) rounded to bf16, fp32 accumulation; softmax and its backward in fp32 (core/cpu/cpu_nn.h).           \
     * att NULL: no backward will run and P is not wanted; core/nn.c passes NULL to the CPU device alone. */       \
    X(sdpa_fwd, (const float *q, const float *k, const float *v, float *out, float *att, int64_t B, int64_t H,     \
                 int64_t T, int64_t D, float scale, bool causal, bool bf16))                                       \
    X(sdpa_bwd, (const float *q, const float *k, const float *v, const float *att, const float *dout, float *dq,   \
                 float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale, bool causal,       \
                 bool bf16))                                                                                       \
    /* The same attention read from and written to the packed layouts of a fused projection: q, k, v are       \
     * parts 0, 1, 2 of qkv [B, T, 3·H·D] (head h: columns h·D of its part), out and dout are [B, T, H·D],      \
     * dqkv is qkv's shape; att as above, or with att NULL (bf16 only) stats in its place as sdpa_flash_fwd/bwd   \
     * keep them; att and stats both NULL: no backward will run (core/nn.c passes that to the CPU device alone).   \
     * No copies into [B, H, T, D]. Sets *done = false, touching nothing, when the device has no such \
     * kernel for these arguments (the caller then copies and uses sdpa_fwd/bwd or the flash entries); a NULL    \
     * entry: never. */                                                                                            \
    X(sdpa_qkv_fwd, (const float *qkv, float *out, float *att, float *stats, int64_t B, int64_t H, int64_t T,      \
                     int64_t D, float scale, bool causal, bool bf16, bool *done))                                  \
    X(sdpa_qkv_bwd, (const float *qkv, const float *att, const float *stats, const float *dout, float *dqkv,       \
                     int64_t B, int64_t H, int64_t T, int64_t D, float scale, bool causal, bool bf16, bool *done)) \
    /* Fused attention under bf16 autocast (sdpa_fwd/bwd's bf16 maths) that keeps no B·H·T·T probabilities:          \
     * forward writes out and stats (B·H·T·2 floats: each row's score max and 1/Σ), backward recomputes P from   \
     * them. As accurate as sdpa_fwd/bwd; CUDA's are not the same bits (P is rounded for P·V before the         \
     * division by Σ), the CPU's are (it makes P again as its forward made it).                                   \
     * The forward sets *done = false, touching nothing, for sizes it does not take (the caller                  \
     * then runs sdpa_fwd); the backward takes whatever its forward took. A NULL entry: never. */                 \
    X(sdpa_flash_fwd, (const float *q, const float *k, const float *v, float *out, float *stats, int64_t B,        \
                       int64_t H, int64_t T, int64_t D, float scale, bool causal, bool *done))                     \
    X(sdpa_flash_bwd, (const float *q, const float *k, const float *v, const float *stats, const float *dout,      \
                       float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale,    \
                       bool causal))                                                                               \
    /* y[M, N] (bf16) = relu(x[M, K]·w[N, K]ᵀ + b[N]) (b NULL: no bias) of bf16 x and w, rounded once: the bits of  \
     * the device's bf16 matmul with an fp32 result, bias_add, act_fwd's ReLU and the fp32 → bf16 cast in turn, in    \
     * one pass over the fp32 sums (fl_linear_relu_bf16). *done = false where it would not be those bits (the         \
     * caller then runs the four); y's contents are then undefined. NULL entry: never. */                            \
    X(linear_relu_bf16, (const uint16_t *x, const uint16_t *w, const float *b, uint16_t *y, int64_t M, int64_t N,   \
                         int64_t K, bool *done))                                                                   \
    /* y[M, N] (fp32) = x[M, K]·w[N, K]ᵀ + b[N] of bf16 x and w: the bits of the device's bf16 matmul with an fp32   \
     * result, then bias_add, the bias added into the GEMM's result in place (fl_linear under a bf16 autocast, large  \
     * outputs; the CPU's blocks of rows went: stop 93). *done = false where it would not be those bits; y is then    \
     * overwritten by the caller. NULL entry: never. */                                                           \
    X(linear_bias_bf16, (const uint16_t *x, const uint16_t *w, const float *b, float *y, int64_t M, int64_t N,      \
                         int64_t K, bool *done))                                                                   \
    /* y[r, :] += b for r < rows (the linear layer's bias, in place). */                                           \
    X(bias_add, (float *y, const float *b, int64_t rows, int64_t cols))                                            \
    /* ---- optimizers (core/optim.c; maths in core/optim.h) -------------------------------------                 \
     * Contiguous fp32 buffers of n elements; per-element arithmetic in the order of core/optim.c so               \
     * results agree to fp32 rounding. msamp_adamw takes tensors that core/optim.c has validated. */               \
    X(sgd, (float *p, const float *g, float *buf, int64_t n, double lr, double momentum, double dampening,         \
            double weight_decay, bool nesterov, bool first_step))                                                  \
    X(adamw, (float *p, const float *g, float *m, float *v, float *vmax, int64_t n, double lr, double beta1,       \
              double beta2, double eps, double weight_decay, int64_t step))                                        \
    /* RMSprop (gavg non-NULL: centered; buf non-NULL: momentum) and Adagrad (clr: the step's decayed lr), in      \
     * the fp32 operations of lua/fp8/optim/rmsprop.lua's and adagrad.lua's composites (core/optim.h). NULL entry:   \
     * those composites. */                                                                                        \
    X(rmsprop, (float *p, const float *g, float *sq, float *gavg, float *buf, int64_t n, double lr, double alpha,  \
                double eps, double weight_decay, double momentum, bool maximize))                                  \
    X(adagrad, (float *p, const float *g, float *sum, int64_t n, double clr, double eps, double weight_decay,       \
                bool maximize))                                                                                    \
    X(msamp_adamw, (fl_tensor *p, const fl_tensor *g, fl_tensor *m, fl_tensor *v, fl_tensor *v_scale_inv,          \
                    fl_tensor *p_fp8, double lr, double beta1, double beta2, double eps, double weight_decay,      \
                    int64_t step))                                                                                 \
    /* Σ x² of each of n contiguous fp32/bf16/fp16 tensors, accumulated in double, into out[i] in host memory;     \
     * one wait for all of them (clip_grad_norm_ over every gradient).                                            \
     */                                                                                                            \
    X(sumsq, (const fl_tensor *const *ts, int n, double *out))                                                     \
    /* ---- FP8 GEMM (core/fp8_linear.c) -----------------------------------------------------------               \
     * dst [M, N] fp32 contiguous = (Σ_k dec(a)[m, k]·dec(b)[k, n]) · sa[m] · sb[n] (+ bias[n]), fp32              \
     * accumulation of exact FP8 products. a [M, K] and b [K, N] are FP8 tensors, each contiguous or the           \
     * transposed view of a contiguous one; a's scale_inv is per tensor or one per row (scale_axis 0),             \
     * b's per tensor or one per column (scale_axis 1); bias fp32/bf16/fp16 [N] or NULL. a_cache, b_cache          \
     * (optional): slots where the device keeps what it derives from a's / b's bytes (the CPU: their bf16          \
     * decode; CUDA: b's K-major copy) to reuse on the next call with the same bytes in either orientation         \
     * (the weight in fprop and dgrad, dY in dgrad and wgrad); the caller releases a slot when the bytes           \
     * change. A device may leave a slot unused. fast_accum: the caller allows a reduced-precision                 \
     * accumulator (cuBLASLt's FAST_ACCUM on Hopper; TransformerEngine uses it for fprop only); a device           \
     * without one accumulates in fp32 as always. */                                                               \
    X(fp8_gemm, (fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias,                    \
                 fl_tensor **a_cache, fl_tensor **b_cache, bool fast_accum))                                        \
    /* fp8_gemm, then + addend (a contiguous fp32 tensor of dst's shape, on this device) added as C is stored:     \
     * the bits of fp8_gemm followed by binary add (a residual added after a linear layer, without the layer's    \
     * output in memory before the sum). NULL entry: the caller adds. */                                          \
    X(fp8_gemm_add, (fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias,               \
                     const fl_tensor *addend, fl_tensor **a_cache, fl_tensor **b_cache, bool fast_accum))

#define FL_DEVICE_FIELD(name, params) fl_status(*name) params;

typedef struct fl_device {
    const char *name;                  /* "cpu", "cuda" */
    fl_status (*alloc)(size_t nbytes, void **ptr);
    void (*free)(void *ptr);
    /* Raw byte copies between this device and host memory. */
    fl_status (*to_host)(void *host_dst, const void *dev_src, size_t nbytes);
    fl_status (*from_host)(void *dev_dst, const void *host_src, size_t nbytes);

    /* The op entries, as FL_DEVICE_ENTRIES lists them. */
    FL_DEVICE_ENTRIES(FL_DEVICE_FIELD)
} fl_device;

const fl_device *fl_device_get(int id);   /* NULL if that device is not available */
void fl_device_register(int id, const fl_device *dev);
const fl_device *fl_cpu_device(void);
/* The kernel family the CPU device's own FP8 GEMM runs on this CPU ("amx_bf16", "avx512_bf16", "avx512_fma",
 * "avx2_fma"; NULL: none, FP8 GEMMs decode + oneDNN): core/cpu/cpu_fp8_mm.c. */
const char *fl_cpu_fp8_mm_family(void);
/* Probabilities' bytes (fp32, B·H·T·T) above which the CPU's bf16 attention keeps each row's statistics instead and
 * makes P again in the backward (its sdpa_flash and sdpa_qkv entries with stats: the same bits): 0 where the
 * products run on the tile unit (faster at every size measured), else 64 MiB (on the vdpbf16ps tiles it measured
 * 0.97-0.99x the time of keeping P at that size, 1.04x at four times it, 1.09-1.13x at 4 MiB; the AVX2 + FMA
 * family 0.98x and 1.06x on 16 lanes, 1.06x and 1.07x on 8, 1.08x and 1.19x at 4 MiB: from there the memory is
 * worth it). docs/performance.md, "Attention in whole tile steps, and without its probabilities" and "Attention's
 * products on 16 lanes"; core/cpu/cpu_nn_attn_bf16.c, cpu_nn_attn_fma.c. */
double fl_cpu_sdpa_fused_min_bytes(void);
const char *fl_device_name(int id);       /* "cpu", "cuda" */
/* Whether device id's op table fills the entry called name (one of FL_DEVICE_ENTRIES): 1 it does, 0 it leaves it
 * NULL (the caller runs its composite) or the device is not available, -1 no entry has that name. The Lua side
 * asks this to pick a fused path, so a device that gains a kernel is used without a change there. */
int fl_device_has_entry(int id, const char *name);
/* Why fl_device_get(id) gives NULL ("" for the CPU): for error messages. */
const char *fl_device_unavailable(int id);

/* Managing a device kind beyond its op table (what fp8.cuda offers), so bindings need no device
 * header. CUDA calls go to kernels/cuda_api.h; a kind that is not built in answers 0 / "" / FL_EDEVICE.
 * The CPU: count 1, nothing queued, memory = its tensor storage (tensor.h fl_bytes_live). */
int fl_device_count(int id);                    /* usable units (probes quietly: no notice) */
const char *fl_device_probe_reason(int id);     /* why unusable; "" when usable or not probed yet */
fl_status fl_device_synchronize(int id);        /* waits for queued work; brings the device up */
size_t fl_device_memory_allocated(int id);      /* bytes held by live tensors */
size_t fl_device_max_memory_allocated(int id);  /* peak since start or the last reset */
void fl_device_reset_peak_memory(int id);
size_t fl_device_memory_reserved(int id);       /* live + cached free blocks */
size_t fl_device_max_memory_reserved(int id);   /* its peak since start or the last reset */
void fl_device_empty_cache(int id);             /* returns cached free blocks */

#endif
