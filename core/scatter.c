/* scatter.c — torch's scatter and scatter_add, gather's inverse: out = a, then along dim
 * out[..., index[..., r, ...], ...] = src[..., r, ...] (scatter: in order, so of repeated positions the last write
 * stays, as torch's CPU loop) or += (scatter_add: every value added). index and src have one shape, a's but for dim
 * (torch's smaller index sizes: lua/fp8/tensor_scatter.lua narrows a and src first), the index holding whole 0-based
 * positions.
 * Differentiable in a and src, as torch's: src's gradient is the output's gradient gathered at index (for a repeated
 * position too, whose overwritten values still get it), a's the output's gradient, with the positions scatter wrote
 * zeroed. Computed on the host, as gather is (host_ops.h); index_add and index_copy are made of these in Lua. */
#include "ops.h"
#include "ops_raw.h"
#include "host_ops.h"
#include "autograd.h"
#include "profiler.h"
#include <string.h>

/* a's extent around dim: outer (the dims before), size (dim's own), inner (the dims after) */
static void extent(const fl_tensor *a, int dim, int64_t *outer, int64_t *size, int64_t *inner) {
    *outer = *inner = 1;
    *size = a->shape[dim];
    for (int i = 0; i < a->ndim; i++) {
        if (i < dim) *outer *= a->shape[i];
        if (i > dim) *inner *= a->shape[i];
    }
}

/* the output's gradient on the host: a's part (the positions scatter wrote zeroed) and src's (gathered at index) */
static fl_status scatter_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    const bool add = n->iargs[0] != 0;
    const int dim = (int)n->iargs[1];
    const fl_tensor *a = n->inputs[0], *ix = n->saved[0];
    int64_t outer, size, inner;
    extent(a, dim, &outer, &size, &inner);
    const int64_t k = ix->shape[dim];
    const bool need_a = fl_node_input_needs_grad(n, 0), need_src = fl_node_input_needs_grad(n, 1);
    fl_tensor *gh = NULL, *za = NULL, *gs = NULL;
    fl_status st = fl_host_f32_read(&gh, g);
    if (st == FL_OK && need_a && !add) {   /* a copy of its own to zero the written positions in */
        st = fl_tensor_empty(&za, FL_F32, gh->ndim, gh->shape, FL_DEV_CPU);
        if (st == FL_OK) memcpy(fl_tensor_data(za), fl_tensor_data(gh), (size_t)fl_tensor_numel(gh) * sizeof(float));
    }
    if (st == FL_OK && need_src) st = fl_tensor_empty(&gs, FL_F32, ix->ndim, ix->shape, FL_DEV_CPU);
    if (st == FL_OK) {
        const float *gv = fl_tensor_data(gh), *iv = fl_tensor_data(ix);
        float *zv = za ? fl_tensor_data(za) : NULL, *sv = gs ? fl_tensor_data(gs) : NULL;
        for (int64_t o = 0; sv && o < outer; o++)
            for (int64_t r = 0; r < k; r++)
                for (int64_t j = 0; j < inner; j++) {
                    const int64_t at = (o * k + r) * inner + j;
                    sv[at] = gv[(o * size + (int64_t)iv[at]) * inner + j];
                }
        /* zeroed in a copy of its own: a position written twice gives both of its src values the gradient */
        for (int64_t o = 0; zv && o < outer; o++)
            for (int64_t r = 0; r < k; r++)
                for (int64_t j = 0; j < inner; j++)
                    zv[(o * size + (int64_t)iv[(o * k + r) * inner + j]) * inner + j] = 0.0f;
    }
    fl_tensor_release(gh);
    fl_tensor *ga = NULL, *gsrc = NULL;
    if (st == FL_OK && za) st = fl_host_result(&ga, za, FL_F32, (int)n->iargs[2]), za = NULL;
    if (st == FL_OK && gs) st = fl_host_result(&gsrc, gs, FL_F32, (int)n->iargs[3]), gs = NULL;
    fl_tensor_release(za);
    fl_tensor_release(gs);
    if (st != FL_OK) { fl_tensor_release(ga); fl_tensor_release(gsrc); return st; }
    gin[0] = need_a ? (add ? fl_tensor_retain((fl_tensor *)g) : ga) : NULL;
    gin[1] = gsrc;
    return FL_OK;
}

fl_status fl_scatter(fl_tensor **out, const fl_tensor *a, int dim, const fl_tensor *index, const fl_tensor *src,
                     bool add) {
    const char *fn = add ? "scatter_add" : "scatter";
    char sa[200], si[200], ss[200];
    *out = NULL;
    FL_PROF_SCOPE(fn); FL_PROF_SHAPES(a, index);
    if (fl_format(a->dtype)->is_fp8 || fl_format(src->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "%s: FP8 tensor: call :dequantize() first (FP8 tensors only hold quantized data)", fn);
    if (fl_format(index->dtype)->is_fp8) return FL_ERR(FL_EINVAL, "%s: the index must hold whole numbers, not FP8", fn);
    if (src->dtype != a->dtype)
        return FL_ERR(FL_EINVAL, "%s: src's dtype %s differs from the tensor's %s (torch's: they must be equal)", fn,
                      fl_format(src->dtype)->name, fl_format(a->dtype)->name);
    if (a->ndim == 0) return FL_ERR(FL_EINVAL, "%s: a 0-d tensor has no dim to scatter along", fn);
    if (dim < -a->ndim || dim >= a->ndim)
        return FL_ERR(FL_EINVAL, "%s: dim %d out of range for a tensor of shape %s", fn, dim,
                      fl_shape_str(sa, sizeof sa, a->ndim, a->shape));
    if (dim < 0) dim += a->ndim;
    bool fits = index->ndim == a->ndim && src->ndim == a->ndim;
    for (int i = 0; fits && i < a->ndim; i++)
        fits = index->shape[i] == src->shape[i] && (i == dim || index->shape[i] == a->shape[i]);
    if (!fits)
        return FL_ERR(FL_EINVAL, "%s: index %s and src %s must have one shape, the tensor %s's but for dim %d (the Lua "
                      "methods narrow the tensor and src to torch's smaller index sizes first)", fn,
                      fl_shape_str(si, sizeof si, index->ndim, index->shape),
                      fl_shape_str(ss, sizeof ss, src->ndim, src->shape),
                      fl_shape_str(sa, sizeof sa, a->ndim, a->shape), dim + 1);
    int64_t outer, size, inner;
    extent(a, dim, &outer, &size, &inner);
    const int64_t k = index->shape[dim];
    fl_tensor *h = NULL, *ih = NULL, *sh = NULL, *ix = NULL, *r = NULL;
    fl_status st = fl_host_f32(&ih, index);
    /* the positions first, all of them: a bad one changes nothing */
    if (st == FL_OK) {
        const float *iv = fl_tensor_data(ih);
        for (int64_t i = 0, n = fl_tensor_numel(ih); i < n; i++)
            if (!(iv[i] >= 0 && (double)iv[i] < (double)size && iv[i] == (float)(int64_t)iv[i])) {
                st = fl_index_error(fn, iv[i], size, dim);
                break;
            }
    }
    if (st == FL_OK) st = fl_host_f32_read(&h, a);
    if (st == FL_OK) st = fl_host_f32_read(&sh, src);
    if (st == FL_OK) st = fl_tensor_empty(&r, FL_F32, a->ndim, a->shape, FL_DEV_CPU);
    if (st == FL_OK) {
        const float *x = fl_tensor_data(h), *iv = fl_tensor_data(ih), *sv = fl_tensor_data(sh);
        float *y = fl_tensor_data(r);
        memcpy(y, x, (size_t)fl_tensor_numel(h) * sizeof(float));
        for (int64_t o = 0; o < outer; o++)
            for (int64_t q = 0; q < k; q++)
                for (int64_t j = 0; j < inner; j++) {
                    const int64_t at = (o * k + q) * inner + j, to = (o * size + (int64_t)iv[at]) * inner + j;
                    y[to] = add ? y[to] + sv[at] : sv[at];
                }
    }
    fl_tensor_release(h);
    fl_tensor_release(sh);
    if (st == FL_OK) st = fl_host_result(out, r, a->dtype, a->device), r = NULL;
    fl_tensor_release(r);
    const fl_tensor *ins[2] = { a, src };
    fl_node *nd = NULL;
    if (st == FL_OK && fl_any_requires_grad(2, ins)) {
        ix = ih, ih = NULL;   /* the node keeps the positions (fp32 on the host, what the backward reads) */
        st = fl_autograd_record(out, &nd, add ? "ScatterAddBackward" : "ScatterBackward", scatter_bwd, 2, ins);
        if (st == FL_OK) {
            nd->iargs[0] = add;
            nd->iargs[1] = dim;
            nd->iargs[2] = a->device;   /* where each gradient goes */
            nd->iargs[3] = src->device;
            fl_node_save(nd, 0, ix);
            st = fl_node_input_stub(nd, 0);   /* a's and src's shapes alone are read */
            if (st == FL_OK) st = fl_node_input_stub(nd, 1);
        }
    }
    fl_tensor_release(ih);
    fl_tensor_release(ix);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}
