/* triangle.c — torch's tril and triu on a CPU tensor: each matrix of the last two dims with the places on one side of
 * diagonal k kept and the others +0 (a NaN outside the triangle is 0 too), in the input's dtype, a row at a time (a
 * copy of the kept run, zeros for the rest): fp8.where(keep, x, 0)'s values, and the kept bits as they are (where
 * quieted a signalling NaN, as torch's tril does not; its gradient turned a kept -0 into +0). Differentiable: the gradient is the
 * same triangle of the output's. (It was masks of two aranges and a where: four passes, 7× torch's tril.) Other
 * devices keep that composite (lua/fp8/tensor.lua). */
#include "ops.h"
#include "autograd.h"
#include "device.h"
#include "cpu/par.h"
#include "profiler.h"
#include <string.h>

static fl_status triangle_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    return fl_triangle(&gin[0], g, n->iargs[0], n->iargs[1] != 0);
}

fl_status fl_triangle(fl_tensor **out, const fl_tensor *a, int64_t k, bool lower) {
    *out = NULL;
    const char *name = lower ? "tril" : "triu";
    FL_PROF_SCOPE(name); FL_PROF_SHAPES(a);
    if (a->device != FL_DEV_CPU) return FL_ERR(FL_EINVAL, "%s: a CPU tensor, got one on %s", name, fl_device_name(a->device));
    if (fl_format(a->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "%s: %s tensor: dequantize it first", name, fl_format(a->dtype)->name);
    if (a->ndim < 2) return FL_ERR(FL_EINVAL, "%s: expects a matrix (or a batch of them), got a %d-d tensor", name, a->ndim);
    fl_tensor *c = NULL, *r = NULL;
    FL_TRY(fl_tensor_contiguous(&c, a));
    fl_status st = fl_tensor_empty(&r, a->dtype, a->ndim, a->shape, FL_DEV_CPU);
    const int64_t n = fl_tensor_numel(a);
    if (st == FL_OK && n > 0) {
        const int64_t R = a->shape[a->ndim - 2], C = a->shape[a->ndim - 1], rows = n / C;
        /* k clamped to [-R - 1, C + 1]: the same triangles, and i + k cannot overflow */
        const int64_t kk = k > C + 1 ? C + 1 : k < -R - 1 ? -R - 1 : k;
        const size_t es = fl_format(a->dtype)->size;
        const char *src = fl_tensor_data(c);
        char *dst = fl_tensor_data(r);
        FL_PAR_FOR(n >= (1 << 16), schedule(static),
        for (int64_t row = 0; row < rows; row++) {
            const int64_t i = row % R;
            /* lower: j ≤ i + k kept, [0, e); upper: j ≥ i + k kept, [b, C) */
            int64_t b = lower ? 0 : i + kk, e = lower ? i + kk + 1 : C;
            b = b < 0 ? 0 : b > C ? C : b;
            e = e < b ? b : e > C ? C : e;
            const size_t off = (size_t)(row * C) * es;
            memset(dst + off, 0, (size_t)b * es);
            memcpy(dst + off + (size_t)b * es, src + off + (size_t)b * es, (size_t)(e - b) * es);
            memset(dst + off + (size_t)e * es, 0, (size_t)(C - e) * es);
        });
    }
    fl_tensor_release(c);
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    if (!fl_any_requires_grad(1, &a)) return FL_OK;
    fl_node *node;
    FL_TRY(fl_autograd_record(out, &node, lower ? "TrilBackward" : "TriuBackward", triangle_bwd, 1, &a));
    node->iargs[0] = k;
    node->iargs[1] = lower;
    st = fl_node_input_stub(node, 0);   /* its shape alone is read */
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}
