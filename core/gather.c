/* gather.c — torch's gather: out[..., r, ...] = a[..., index[..., r, ...], ...] along one dim, the index tensor of
 * a's shape but for that dim (k positions there); differentiable in a, each value's gradient going back to the
 * position it came from (the index backward of max(dim) and topk, ops_grad.c, where repeated positions add).
 * Computed on the host as sort is (host_ops.h). */
#include "ops.h"
#include "ops_raw.h"
#include "host_ops.h"
#include "profiler.h"
#include <stdlib.h>

fl_status fl_gather(fl_tensor **out, const fl_tensor *a, int dim, const fl_tensor *index) {
    char sa[200], si[200];
    *out = NULL;
    FL_PROF_SCOPE("gather"); FL_PROF_SHAPES(a, index);
    if (fl_format(a->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "gather: %s tensor: call :dequantize() first (FP8 tensors only hold quantized data)",
                      fl_format(a->dtype)->name);
    if (fl_format(index->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "gather: the index must hold whole numbers, not FP8");
    if (a->ndim == 0) return FL_ERR(FL_EINVAL, "gather: a 0-d tensor has no dim to gather along");
    if (dim < -a->ndim || dim >= a->ndim)
        return FL_ERR(FL_EINVAL, "gather: dim %d out of range for a tensor of shape %s", dim,
                      fl_shape_str(sa, sizeof sa, a->ndim, a->shape));
    if (dim < 0) dim += a->ndim;
    bool fits = index->ndim == a->ndim;
    for (int i = 0; fits && i < a->ndim; i++) fits = i == dim || index->shape[i] == a->shape[i];
    if (!fits)
        return FL_ERR(FL_EINVAL, "gather: index %s must have input %s's shape but for dim %d (torch's smaller index "
                      "sizes elsewhere are not offered)", fl_shape_str(si, sizeof si, index->ndim, index->shape),
                      fl_shape_str(sa, sizeof sa, a->ndim, a->shape), dim + 1);
    const int64_t size = a->shape[dim], k = index->shape[dim];
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (i < dim) outer *= a->shape[i];
        if (i > dim) inner *= a->shape[i];
    }
    fl_tensor *h = NULL, *ih = NULL, *v = NULL, *ix = NULL;
    fl_status st = fl_host_f32(&h, a);
    if (st == FL_OK) st = fl_host_f32(&ih, index);
    if (st == FL_OK) st = fl_tensor_empty(&v, FL_F32, index->ndim, index->shape, FL_DEV_CPU);
    if (st == FL_OK) {
        const float *x = fl_tensor_data(h), *iv = fl_tensor_data(ih);
        float *y = fl_tensor_data(v);
        for (int64_t o = 0; o < outer && st == FL_OK; o++)
            for (int64_t r = 0; r < k && st == FL_OK; r++)
                for (int64_t j = 0; j < inner; j++) {
                    const int64_t at = (o * k + r) * inner + j;
                    const float p = iv[at];
                    /* (in double: size rounded to fp32 refused 2^24 for a dim of 2^24 + 1) */
                    if (!(p >= 0 && (double)p < (double)size && p == (float)(int64_t)p)) {
                        st = FL_ERR(FL_EINVAL, "gather: index %.9g out of range 0..%lld for dim %d of size %lld",
                                    (double)p, (long long)size - 1, dim + 1, (long long)size);
                        break;
                    }
                    y[at] = x[(o * size + (int64_t)p) * inner + j];
                }
    }
    fl_tensor_release(h);
    if (st == FL_OK) st = fl_host_result(out, v, a->dtype, a->device), v = NULL;
    fl_tensor_release(v);
    /* the node keeps the index (as fp32 on the host, what the backward reads) */
    if (st == FL_OK) st = fl_host_result(&ix, ih, FL_F32, FL_DEV_CPU), ih = NULL;
    fl_tensor_release(ih);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; return st; }
    st = fl_record_index_grad(out, &ix, a, dim, "GatherBackward", 0);
    fl_tensor_release(ix);   /* the node saved its own copy (or there is none) */
    return st;
}
