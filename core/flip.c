/* flip.c — torch's flip on a CPU tensor: the order of each dim in a set reversed, a copy in the input's dtype, a row
 * (the last dim's run) at a time: moved whole, or reversed where the last dim is flipped. Differentiable: the
 * gradient is the same flip of the output's. (It was an index_select per dim, runs of one element along the last
 * dim: 10× torch's flip.) Other devices keep that composite (lua/fp8/tensor_rearrange.lua). */
#include "ops.h"
#include "autograd.h"
#include "device.h"
#include "cpu/par.h"
#include "profiler.h"
#include <string.h>

static fl_status flip_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    return fl_flip(&gin[0], g, (uint32_t)n->iargs[0]);
}

fl_status fl_flip(fl_tensor **out, const fl_tensor *a, uint32_t dims) {
    *out = NULL;
    FL_PROF_SCOPE("flip"); FL_PROF_SHAPES(a);
    if (a->device != FL_DEV_CPU) return FL_ERR(FL_EINVAL, "flip: a CPU tensor, got one on %s", fl_device_name(a->device));
    if (fl_format(a->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "flip: %s tensor: call :dequantize() first", fl_format(a->dtype)->name);
    if (a->ndim < 32 && (dims >> a->ndim) != 0)
        return FL_ERR(FL_EINVAL, "flip: a dim past the tensor's %d dims", a->ndim);
    fl_tensor *c = NULL, *r = NULL;
    FL_TRY(fl_tensor_contiguous(&c, a));
    fl_status st = fl_tensor_empty(&r, a->dtype, a->ndim, a->shape, FL_DEV_CPU);
    const int64_t n = fl_tensor_numel(a);
    if (st == FL_OK && n > 0) {
        const int nd = a->ndim;
        const int64_t last = nd > 0 ? a->shape[nd - 1] : 1, rows = n / last;
        const bool rev = nd > 0 && (dims >> (nd - 1)) & 1u;
        const size_t es = fl_format(a->dtype)->size;
        const char *src = fl_tensor_data(c);
        char *dst = fl_tensor_data(r);
        FL_PAR_FOR(n >= (1 << 16), schedule(static),
        for (int64_t row = 0; row < rows; row++) {
            int64_t rem = row, from = 0, stride = 1;   /* the source row: row's index with the flipped dims reversed */
            for (int d = nd - 2; d >= 0; d--) {
                const int64_t i = rem % a->shape[d];
                rem /= a->shape[d];
                from += ((dims >> d) & 1u ? a->shape[d] - 1 - i : i) * stride;
                stride *= a->shape[d];
            }
            const char *s = src + (size_t)(from * last) * es;
            char *d = dst + (size_t)(row * last) * es;
            if (!rev) { memcpy(d, s, (size_t)last * es); continue; }
            if (es == 4) {
                const uint32_t *s4 = (const uint32_t *)s;
                uint32_t *d4 = (uint32_t *)d;
                for (int64_t j = 0; j < last; j++) d4[j] = s4[last - 1 - j];
            } else {
                const uint16_t *s2 = (const uint16_t *)s;
                uint16_t *d2 = (uint16_t *)d;
                for (int64_t j = 0; j < last; j++) d2[j] = s2[last - 1 - j];
            }
        });
    }
    fl_tensor_release(c);
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    if (!fl_any_requires_grad(1, &a)) return FL_OK;
    fl_node *node;
    FL_TRY(fl_autograd_record(out, &node, "FlipBackward", flip_bwd, 1, &a));
    node->iargs[0] = (int64_t)dims;
    st = fl_node_input_stub(node, 0);   /* its shape alone is read */
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}
