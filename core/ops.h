/* ops.h — every tensor op, declared once. Each validates its arguments (shapes, dtypes,
 * devices), allocates the result and dispatches to the tensor's device (core/device.h).
 * Results are new tensors with refcount 1 in *out. Compute happens in fp32; the result dtype
 * is the promotion of the inputs (fp32 > bf16 = fp16; bf16 with fp16 → fp32).
 * Arithmetic on FP8 tensors is refused with a message saying to dequantize first. */
#ifndef FL_OPS_H
#define FL_OPS_H

#include "tensor.h"
#include "rng.h"

/* maximum/minimum: NaN when either operand is NaN; -0 < +0 (IEEE 754-2019's maximum and minimum).
 * pow: x^y computed in double and rounded once (C's pow: x^0 = 1, 1^y = 1, NaN for a negative base with a
 * non-integer exponent). where: b where a is nonzero (NaN counts as nonzero), else -0: a selection, never a
 * product, so an inf or NaN in the other branch stays out; -0 is the identity of addition, so
 * where(m, x) + where(!m, y) is exactly torch's where(m, x, y) (fl_where). eq..ge: comparisons, 1 where true and
 * 0 where false in the result's dtype (there is no bool dtype); NaN compares unequal to everything, itself
 * included. Comparisons carry no history. atan2(y, x): the angle of (x, y) in (-pi, pi], in double and rounded once.
 * fmod: C's fmod, exact, the sign of the dividend (torch.fmod); remainder: fmod moved by the divisor where the signs
 * differ, so the sign of the divisor (torch.remainder, Python's %). hypot: √(a² + b²) correctly rounded
 * (core/hypot1.h), +inf where either is infinite (the other NaN included); its autograd node is fl_hypot's. */
typedef enum {
    FL_OP_ADD = 0, FL_OP_SUB, FL_OP_MUL, FL_OP_DIV, FL_OP_MAXIMUM, FL_OP_MINIMUM, FL_OP_POW, FL_OP_WHERE,
    FL_OP_EQ, FL_OP_NE, FL_OP_LT, FL_OP_LE, FL_OP_GT, FL_OP_GE, FL_OP_ATAN2, FL_OP_FMOD, FL_OP_REMAINDER,
    FL_OP_HYPOT,
    FL_BINOP_COUNT
} fl_binop;
static inline bool fl_binop_is_comparison(fl_binop op) { return op >= FL_OP_EQ && op <= FL_OP_GE; }
/* sign: 1 for x > 0, -1 for x < 0, x itself for ±0 and NaN. tanh, sigmoid (1 / (1 + e^-x)), sin, cos, erf,
 * log1p, expm1, tan, asin, acos, atan, sinh, cosh, log2, log10 and exp2 are computed in double and rounded once.
 * floor, ceil, round (half to even, torch's) and trunc are exact; their gradient is 0. rsqrt is 1/√x as two
 * fp32 roundings, the square root's then the division's (the bits of x:sqrt() then 1 / that), in one pass. */
typedef enum {
    FL_OP_ABS = 0, FL_OP_NEG, FL_OP_EXP, FL_OP_LOG, FL_OP_SQRT, FL_OP_SIGN, FL_OP_TANH, FL_OP_SIGMOID,
    FL_OP_SIN, FL_OP_COS, FL_OP_FLOOR, FL_OP_CEIL, FL_OP_ROUND, FL_OP_TRUNC, FL_OP_ERF, FL_OP_LOG1P, FL_OP_EXPM1,
    FL_OP_TAN, FL_OP_ASIN, FL_OP_ACOS, FL_OP_ATAN, FL_OP_SINH, FL_OP_COSH, FL_OP_LOG2, FL_OP_LOG10, FL_OP_EXP2,
    FL_OP_RSQRT,
    FL_UNOP_COUNT
} fl_unop;
/* floor, ceil, round, trunc: piecewise constant (a zero gradient, as torch's) */
static inline bool fl_unop_is_rounding(fl_unop op) { return op >= FL_OP_FLOOR && op <= FL_OP_TRUNC; }
typedef enum { FL_OP_SUM = 0, FL_OP_MEAN, FL_OP_MAX, FL_OP_MIN, FL_OP_AMAX, FL_REDOP_COUNT } fl_redop;
extern const char *const fl_binop_names[];    /* FL_BINOP_COUNT names (ops.c checks the count) */
extern const char *const fl_unop_names[];     /* FL_UNOP_COUNT */
extern const char *const fl_redop_names[];    /* FL_REDOP_COUNT */

#define FL_ALL_DIMS (-1000)

/* Broadcast result shape of two shapes (numpy rules); error shows both shapes. */
fl_status fl_broadcast_shape(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);

fl_status fl_binary(fl_tensor **out, fl_binop op, const fl_tensor *a, const fl_tensor *b);
/* a op s, or s op a when scalar_first. */
fl_status fl_binary_scalar(fl_tensor **out, fl_binop op, const fl_tensor *a, double s, bool scalar_first);
/* torch.where: a where cond is nonzero (NaN included), b elsewhere, the three broadcast; a selection, each value the
 * chosen one's bits (-0 and an inf or NaN in the branch not taken included), in a's and b's dtype (fp32 when they
 * differ). Differentiable in a and b (each takes g where chosen, +0 elsewhere); cond takes none, and the node keeps
 * one byte per element of cond's shape (torch keeps its bool condition), not a, b or cond. */
fl_status fl_where(fl_tensor **out, const fl_tensor *cond, const fl_tensor *a, const fl_tensor *b);
/* clamp between two numbers: minimum(maximum(a, lo), hi), the same values and gradient as those two calls, in one
 * node that keeps a alone (as torch's clamp) */
fl_status fl_clamp_scalar(fl_tensor **out, const fl_tensor *a, double lo, double hi);
/* torch.hypot: √(a² + b²) without overflow or underflow in the squares, correctly rounded to fp32 (FL_OP_HYPOT: the
 * squares' sum in double, where no fp32 pair over- or underflows, and an exact decision near a tie), then rounded once
 * to the result's dtype: a's and b's, fp32 where they differ; 0 where both are 0; inf where either is infinite, the
 * other NaN included (C's hypot); the two broadcast. Differentiable, torch's x/h for each operand computed as
 * (x/m)/√(1 + (n/m)²), m and n the larger and smaller of |a| and |b|, right for every finite pair (torch's x/h is off
 * where h is subnormal or overflows); NaN for an infinite operand and 0 for a finite one beside it, as torch's; 0 for
 * both at (0, 0), where torch's 0/0 is NaN (its subgradient, as norm's). Not for FP8 operands. */
fl_status fl_hypot(fl_tensor **out, const fl_tensor *a, const fl_tensor *b);
fl_status fl_unary(fl_tensor **out, fl_unop op, const fl_tensor *a);
/* dim == FL_ALL_DIMS reduces everything to a 0-d tensor; negative dim counts from the end. */
fl_status fl_reduce(fl_tensor **out, fl_redop op, const fl_tensor *a, int dim, bool keepdim);
/* Σ a² over everything (FL_ALL_DIMS) or along dim: the values and gradient (2·a·g) of fl_reduce's sum of a·a, bit for
 * bit, in one pass on the CPU (the device entry sum_squares; elsewhere the two passes). Norm's sum of squares. */
fl_status fl_sum_squares(fl_tensor **out, const fl_tensor *a, int dim, bool keepdim);
/* The p-norm ‖x‖_p = (Σ|x|^p)^(1/p) kept finite where Σ|x|^p leaves its dtype's range: r (the norm as the caller's ops
 * computed it) and s (the sum it is the root of), of one shape, one value per slice of x over the dims in mask (bit i:
 * dim i is reduced; r's order is x's other dims'); r, s and x fp32, bf16 or fp16 (torch's half norms accumulate in
 * fp32: a caller passes fp32 ones, or the dtype's own); p > 0 finite. out (r's dtype) = r with r's history, but in a
 * slice whose s overflowed (inf) or fell below the smallest normal number of s's dtype (0 or subnormal) while its
 * largest |x| is finite and not 0: the norm of x / c (c = 2^k <= that |x| < 2^(k+1), exact; that |x| itself for
 * p > 512), in float64, times c, rounded to fp32 and then to r's dtype (within an ulp of the float64 norm), whose
 * gradient is the norm's derivative at x / c (the same at x): [1e20, 1e20]'s Σx² is inf and [1e-30, 1e-30]'s 0,
 * where the norms are 1.414e20 and 1.414e-30. So too, for p < 1, a slice whose plain backward would overflow on the
 * way though its gradient need not: (1/p)·(r / its smallest nonzero |x|)^(1-p) past 2^126 (the root's 1/p reaches x's
 * gradient before the power's p: x:norm(0.5) of [3e38, 1e-38], stop 100; tested first at 2^-149 from r alone, so the
 * common case reads no x). The others keep r's value bits, and r's graph its gradient bits (r
 * takes g there and 0 in the rescued slices; x takes −0 outside them, which adds nothing). One pass over the sums on
 * the CPU where none is rescued (the device entry norm_rescue: no host read; elsewhere on a host copy).
 * gate: NULL, or fl_norm_gate(x, mask)'s result, through which the caller computed r and s: in the rescued slices the
 * plain formula's own backward at x with g = 0 can be NaN (|x|^(p-1) overflows for p > 2: 0·inf), and the gate then
 * passes -0 there instead of what reaches it. */
fl_status fl_norm_rescue(fl_tensor **out, const fl_tensor *r, const fl_tensor *s, const fl_tensor *x, uint32_t mask,
                         double p, const fl_tensor *gate);
/* x under a new header whose gradient is the one it receives, but -0 in the slices (over the dims in mask) that a
 * later fl_norm_rescue given it as its gate rescued (all of it passes where none was, or where no rescue ran). x
 * itself where x takes no gradient (grad mode off, or x not requiring grad). */
fl_status fl_norm_gate(fl_tensor **out, const fl_tensor *x, uint32_t mask);
/* torch.logsumexp along one dim (FL_ALL_DIMS refused) of an fp32 tensor (of at least one dim, the dim not empty):
 * log Σ exp(a − m) + m, m the largest value along dim (0 where that is ±inf), with the bits of those ops one after
 * another (max, a − m, exp, sum, log, + m), in two passes on the CPU (the device entry logsumexp). Differentiable:
 * exp(a − m)·(g / s), the graph of those ops' gradient bit for bit (LogsumexpBackward keeps a, m and s). */
fl_status fl_logsumexp(fl_tensor **out, const fl_tensor *a, int dim, bool keepdim);
/* Indices (0-based, as fp32: exact up to 2^24) of the largest (want_min: smallest) element along dim, or
 * the flat index over all elements when dim == FL_ALL_DIMS (a 0-d result). The first one wins a tie; a NaN
 * counts as the extreme (torch's rule). No history. Computed on the host: a tensor on another device is
 * read back, and the indices go to its device. */
fl_status fl_argreduce(fl_tensor **out, const fl_tensor *a, int dim, bool keepdim, bool want_min);
/* max(dim) / min(dim) as torch's: the values as fl_reduce's and their indices as fl_argreduce's (the first of a
 * tie, a NaN wins), both in *values and *indices. Differentiable: the gradient goes whole to the index (torch's
 * rule for a dim; fl_reduce's max and min split it among a tie, torch's rule without one), and the node keeps the
 * indices alone. */
fl_status fl_reduce_index(fl_tensor **values, fl_tensor **indices, fl_redop op, const fl_tensor *a, int dim,
                          bool keepdim);
/* Matrix product: [m,k]x[k,n], [k]x[k,n], [m,k]x[k], and batched [...,m,k]x[...,k,n] with
 * broadcast batch dims. fp32 accumulation. fp32 inputs → fp32 GEMM; bf16/fp16 inputs →
 * bf16/fp16 GEMM with fp32 accumulation (oneDNN on the CPU). */
fl_status fl_matmul(fl_tensor **out, const fl_tensor *a, const fl_tensor *b);
/* torch's dot: the inner product of two 1-d tensors of one size, the sum of their elementwise product (the same
 * arithmetic as (a * b):sum(): the product in the promoted dtype, the sum as fl_reduce's), one node (DotBackward: the
 * 0-d gradient times the other vector, torch's DotBackward0). */
fl_status fl_dot(fl_tensor **out, const fl_tensor *a, const fl_tensor *b);
/* a and b both bf16 or both fp16: the GEMM in that dtype (fp32 accumulation) and the result fp32, not rounded (what a
 * bias is added to before one rounding: the convolutions'); the backward's GEMMs in fp32 (the operands widened
 * exactly), as fl_matmul's of the widened operands. */
fl_status fl_matmul_wide(fl_tensor **out, const fl_tensor *a, const fl_tensor *b);
/* fl_binary, fl_binary_scalar, fl_unary, fl_reduce, fl_matmul record autograd nodes (core/autograd.h); comparisons
 * carry no history. fl_reduce's max/min/amax split the gradient among a tie (torch's max() and amax).
 * maximum/minimum send the gradient to the operand that wins (torch's rule: half to each on a tie, all to both beside
 * a NaN; against a scalar, clamp's rule: all of it where x >= s, resp. x <= s); pow's exponent, when a tensor, takes
 * no gradient (refused when it requires one), and the base's gradient is 0 where the exponent is 0, as torch's;
 * where's mask takes none (its values take g where the mask is nonzero). A comparison with a scalar takes the scalar
 * rounded to a bf16/fp16 tensor's dtype (torch's casting of a number). Under autocast (fl_autocast_dtype()
 * bf16/fp16) fl_matmul rounds fp32 inputs to that dtype and returns fp32. */

/* Differentiable views and copies: the tensor.c layout functions (fl_tensor_view, ...) plus an
 * autograd node when grad mode is on and t requires grad. Lua's view methods call these. */
fl_status fl_view(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape);
fl_status fl_reshape(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape);
fl_status fl_transpose(fl_tensor **out, const fl_tensor *t, int d0, int d1);
fl_status fl_expand(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape);
fl_status fl_narrow(fl_tensor **out, const fl_tensor *t, int dim, int64_t start, int64_t length);
fl_status fl_select(fl_tensor **out, const fl_tensor *t, int dim, int64_t index);
fl_status fl_contiguous(fl_tensor **out, const fl_tensor *t);
/* The n tensors joined along dim (negative from the end): every other dim equal, one device, the dtype
 * of them all (mixed: fp32). FP8 and 0-d tensors are refused. Differentiable: each input's gradient is
 * its part of the output's (with more than FL_NODE_MAX_INPUTS inputs needing gradients, the parts are
 * joined in groups, one copy more per level of the tree). */
fl_status fl_cat(fl_tensor **out, int n, const fl_tensor *const *ts, int dim);
/* flip.c: a CPU tensor's dims whose bits are set in dims (bit d: dim d, 0-based) reversed, a copy in its dtype (not
 * FP8); differentiable (the gradient flipped back). */
fl_status fl_flip(fl_tensor **out, const fl_tensor *a, uint32_t dims);
/* triangle.c: tril (lower) or triu of a CPU tensor of >= 2 dims: each matrix's places with column − row ≤ k (lower)
 * or ≥ k kept, the others +0, in its dtype (not FP8); differentiable (the same triangle of the gradient). */
fl_status fl_triangle(fl_tensor **out, const fl_tensor *a, int64_t k, bool lower);
fl_status fl_to(fl_tensor **out, const fl_tensor *t, fl_dtype dt);   /* fp32/bf16/fp16; gradient flows back as fp32 */
/* t on another device (fl_tensor_to_device); the gradient flows back to t's device. */
fl_status fl_to_device(fl_tensor **out, const fl_tensor *t, int device);

/* Factories. */
fl_status fl_arange(fl_tensor **out, double start, double end, double step, fl_dtype dt);
fl_status fl_rand(fl_tensor **out, fl_rng *r, int ndim, const int64_t *shape, fl_dtype dt); /* U[0,1) */
fl_status fl_randn(fl_tensor **out, fl_rng *r, int ndim, const int64_t *shape, fl_dtype dt); /* N(0,1) */
/* integers uniform in [low, high) (fl_rng_integers; |low|, |high| ≤ 2^24, and every value exact in dt) */
fl_status fl_randint(fl_tensor **out, fl_rng *r, int64_t low, int64_t high, int ndim, const int64_t *shape,
                     fl_dtype dt);
/* sort.c: the values along dim in order (descending or ascending; NaN counts as the largest; ties in position
 * order) and their indices (fp32, 0-based), the first k of them (k < 0: all); the values carry gradients back to
 * their positions. name: "sort", "topk" or "argsort", for the messages. */
fl_status fl_sort(fl_tensor **values, fl_tensor **indices, const fl_tensor *a, int dim, bool descending, int64_t k,
                  const char *name);
/* n category indices (fp32, 0-based) drawn from each row of probs (1-d: one distribution, 2-d: one a row) with
 * weights proportional to its entries (finite, >= 0, a positive sum), with or without replacement; r NULL: the
 * default generator. */
fl_status fl_multinomial(fl_tensor **out, const fl_tensor *probs, int64_t n, bool replacement, fl_rng *r);
/* gather.c: out = a's values along dim at index's positions (0-based, whole numbers; index has a's shape but for
 * dim), torch's gather; differentiable in a */
fl_status fl_gather(fl_tensor **out, const fl_tensor *a, int dim, const fl_tensor *index);
/* gather.c: torch's index_select, out = a's runs along dim at the 1-d index's positions (0-based, whole numbers;
 * gather's rule and messages), in a's dtype; differentiable in a (an index_add) */
fl_status fl_index_select(fl_tensor **out, const fl_tensor *a, int dim, const fl_tensor *index);
/* resample.c: x (fp32, any device) resampled along dim to m positions, each the weighted sum of taps (1..8) source
 * positions, y[..., j, ...] = Σ_t x[..., pos[j·taps + t], ...]·w[j·taps + t] (pos in [0, n), w finite; both m·taps
 * long, copied), the products rounded and added left to right; differentiable in x. F.interpolate's linear and cubic
 * modes. */
fl_status fl_resample(fl_tensor **out, const fl_tensor *x, int dim, int64_t m, int taps, const int64_t *pos,
                      const float *w);
/* embedding_bag.c: EmbeddingBag's sum (mean: divided by the count; max: each column's maximum) of weight's rows at
 * ids (any shape, whole numbers in [0, V)) over bags starts[b] <= j < starts[b + 1] (starts [B + 1], rising from 0 to
 * ids' numel), entries equal to pad (-1: none) left out; psw (NULL: none; sum only): fp32 CPU per-sample weights, one
 * per id, scaling each row; weight fp32 on the CPU [V, D] (FL_EUNSUPPORTED otherwise); out [B, D], differentiable in
 * weight and psw */
enum { FL_BAG_SUM, FL_BAG_MEAN, FL_BAG_MAX };
fl_status fl_embedding_bag(fl_tensor **out, const fl_tensor *ids, const fl_tensor *weight, const fl_tensor *starts,
                           int mode, int64_t pad, const fl_tensor *psw);
/* scatter.c: out = a with src's values written (add false: torch's scatter, the last of repeated positions stays) or
 * added (torch's scatter_add) along dim at index's positions (0-based, whole numbers; index and src of one shape, a's
 * but for dim); differentiable in a and src */
fl_status fl_scatter(fl_tensor **out, const fl_tensor *a, int dim, const fl_tensor *index, const fl_tensor *src,
                     bool add);
/* scan.c: the running sums of a along dim (torch's cumsum; in double, rounded once to a's dtype), differentiable */
fl_status fl_cumsum(fl_tensor **out, const fl_tensor *a, int dim);
/* a random permutation of 0 .. n−1 (fl_rng_permutation; n ≤ 2^24, and every value exact in dt) */
fl_status fl_randperm(fl_tensor **out, fl_rng *r, int64_t n, fl_dtype dt);

/* Quantization (docs/fp8-spec.md §1). Scale choice, in order: opts.scale if > 0; else from opts.amax
 * if > 0; else from the tensor's own amax (per tensor, or per index along `axis`):
 * scale = fl_scale_from_amax(amax, fmt, margin, 1). An all-zero tensor/row gets scale 1. */
typedef struct {
    float scale;       /* <= 0: not given */
    float amax;        /* <= 0: not given */
    int margin;        /* default 0 */
    int axis;          /* -1 per-tensor; else the dim that keeps one scale per index (per-row: 0 of a 2-D tensor) */
    fl_overflow overflow; /* default FL_SATURATE */
} fl_quant_opts;
void fl_quant_opts_default(fl_quant_opts *o);
fl_status fl_quantize(fl_tensor **out, const fl_tensor *src, fl_dtype fmt, const fl_quant_opts *opts);
/* FP8 → dt (fp32/bf16/fp16), applying scale_inv. */
fl_status fl_dequantize(fl_tensor **out, const fl_tensor *q, fl_dtype dt);
/* The same casts recording autograd history (the Lua methods): the gradient passes straight through, unchanged,
 * as torch's casts to and from float8 do (ToCopyBackward); the recipes' casts use the plain ones above. */
fl_status fl_quantize_ag(fl_tensor **out, const fl_tensor *src, fl_dtype fmt, const fl_quant_opts *opts);
fl_status fl_dequantize_ag(fl_tensor **out, const fl_tensor *q, fl_dtype dt);

#endif
