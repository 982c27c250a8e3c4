/* scan.c — running sums along a dim: cumsum, torch's, differentiable (the gradient is the running sum of the
 * output's gradient taken from the other end). Computed on the host in double, each result rounded once to the
 * input's dtype (fp32 gradients), and moved to the input's device, as argmax and sort are. */
#include "ops.h"
#include "ops_raw.h"
#include "host_ops.h"
#include "autograd.h"
#include "profiler.h"
#include <string.h>

/* out (a's shape, dtype dt, on a's device) = the running sums of a along dim (reverse: from the last position). */
static fl_status scan(fl_tensor **out, const fl_tensor *a, int dim, bool reverse, fl_dtype dt) {
    int64_t size = a->ndim ? a->shape[dim] : 1, outer = 1, inner = 1;   /* a 0-d tensor: one place of one */
    for (int i = 0; i < a->ndim; i++) {
        if (i < dim) outer *= a->shape[i];
        if (i > dim) inner *= a->shape[i];
    }
    fl_tensor *c = NULL, *r = NULL;
    fl_status st = fl_host_f32_read(&c, a);
    if (st == FL_OK) st = fl_tensor_empty(&r, FL_F32, a->ndim, a->shape, FL_DEV_CPU);
    if (st == FL_OK && fl_tensor_numel(r) > 0) {   /* (an empty tensor of 2^62 columns walked its blocks) */
        const float *x = fl_tensor_data(c);
        float *y = fl_tensor_data(r);
        if (inner == 1) {
            for (int64_t o = 0; o < outer; o++) {
                double acc = 0;
                for (int64_t s = 0; s < size; s++) {
                    const int64_t at = o * size + (reverse ? size - 1 - s : s);
                    acc += x[at];
                    y[at] = (float)acc;
                }
            }
        } else {
            /* along an outer dim: a row of running sums (each column's own, in the same order), the rows read in
             * turn; it walked one column at a time down the dim, a cache line per element (1.3× torch's cumsum(1)) */
            enum { W = 512 };
            double acc[W];
            for (int64_t o = 0; o < outer; o++)
                for (int64_t j0 = 0; j0 < inner; j0 += W) {
                    const int64_t w = inner - j0 < W ? inner - j0 : W;
                    for (int64_t j = 0; j < w; j++) acc[j] = 0;
                    for (int64_t s = 0; s < size; s++) {
                        const int64_t at = (o * size + (reverse ? size - 1 - s : s)) * inner + j0;
                        #pragma omp simd
                        for (int64_t j = 0; j < w; j++) {
                            /* (the running sum's NaN kept, as the scalar loop's addition keeps it: a vectorised
                             * add may return x's NaN instead) */
                            acc[j] = acc[j] != acc[j] ? acc[j] : acc[j] + x[at + j];
                            y[at + j] = (float)acc[j];
                        }
                    }
                }
        }
    }
    fl_tensor_release(c);
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    return fl_host_result(out, r, dt, a->device);
}

static fl_status cumsum_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    return scan(&gin[0], g, (int)n->iargs[0], true, FL_F32);
}

fl_status fl_cumsum(fl_tensor **out, const fl_tensor *a, int dim) {
    char sa[200];
    *out = NULL;
    FL_PROF_SCOPE("cumsum"); FL_PROF_SHAPES(a);
    if (fl_format(a->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "cumsum: %s tensor: call :dequantize() first (FP8 tensors only hold quantized data)",
                      fl_format(a->dtype)->name);
    const int nd = a->ndim > 0 ? a->ndim : 1;   /* a 0-d tensor's one implicit dim, as torch's */
    if (dim < -nd || dim >= nd)
        return FL_ERR(FL_EINVAL, "cumsum: dim %d out of range for a tensor of shape %s", dim,
                      fl_shape_str(sa, sizeof sa, a->ndim, a->shape));
    if (dim < 0) dim += nd;
    if (a->ndim == 0) dim = 0;
    FL_TRY(scan(out, a, dim, false, a->dtype));
    if (!fl_any_requires_grad(1, &a)) return FL_OK;
    fl_node *n = NULL;
    fl_status st = fl_autograd_record(out, &n, "CumsumBackward", cumsum_bwd, 1, &a);
    if (st == FL_OK) {
        n->iargs[0] = dim;
        st = fl_node_input_stub(n, 0);   /* no value of a is read */
    }
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}
