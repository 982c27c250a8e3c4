/* ops_raw.h — the history-free halves of the differentiable ops in ops.h, for the autograd layer
 * (core/ops_grad.c, core/linear.c, core/nn.c) and backward functions. They never record nodes. */
#ifndef FL_OPS_RAW_H
#define FL_OPS_RAW_H
#include "ops.h"

fl_status fl_binary_raw(fl_tensor **out, fl_binop op, const fl_tensor *a, const fl_tensor *b);
fl_status fl_binary_scalar_raw(fl_tensor **out, fl_binop op, const fl_tensor *a, double s, bool scalar_first);
fl_status fl_unary_raw(fl_tensor **out, fl_unop op, const fl_tensor *a);
fl_status fl_reduce_raw(fl_tensor **out, fl_redop op, const fl_tensor *a, int dim, bool keepdim);
fl_status fl_sum_squares_raw(fl_tensor **out, const fl_tensor *a, int dim, bool keepdim);
/* fl_logsumexp's values, and its m (the shift) and s (Σ exp(a − m)) in the keepdim layout, for its node */
fl_status fl_logsumexp_raw(fl_tensor **out, fl_tensor **m, fl_tensor **s, const fl_tensor *a, int dim, bool keepdim);
/* Matmul with explicit compute dtype cdt (inputs converted to it when they differ; FL_DTYPE_COUNT:
 * the promotion of the inputs) and output dtype odt (FL_DTYPE_COUNT: cdt). Transposed views of
 * either operand are read in place. */
fl_status fl_matmul_raw(fl_tensor **out, const fl_tensor *a, const fl_tensor *b, fl_dtype cdt, fl_dtype odt);
/* torch's inner op for matmul(a, b) (a and b as the user gave them, requires_grad read): aten::dot (two vectors),
 * aten::mv (a vector second, or a vector times a batch that torch folds) or aten::mm / aten::bmm. Its backward node
 * is DotBackward0, MvBackward0 or MmBackward0 / BmmBackward0, whose FLOPs the profiler counts (matmul_bwd). */
enum { FL_TORCH_MM = 0, FL_TORCH_MV = 1, FL_TORCH_DOT = 2 };
int fl_matmul_torch_inner(const fl_tensor *a, const fl_tensor *b);
/* values gathered from a at indices along dim (-1: over all of a, by flat index; k a place, 0-based fp32): when a
 * requires grad, the node that sends each value's gradient to its index (name, e.g. "MaxBackward"; tag in its
 * iargs[0]). On failure releases both and sets them NULL. */
fl_status fl_record_index_grad(fl_tensor **values, fl_tensor **indices, const fl_tensor *a, int dim, const char *name,
                               int64_t tag);

#endif
