/* embedding_bag.c — EmbeddingBag on the host: out[b] = Σ weight[ids[j]] (times per-sample weight j for a weighted
 * sum) over bag b's entries (starts[b] ≤ j < starts[b + 1]), pad's entries left out (of the mean's count too), a
 * mean divided by the count (1 for an empty bag); or each column's maximum over the bag (zeros for an empty one).
 * Each bag adds its rows (or products) in entry order from zero and the backward adds g[b] (over the count, times
 * the per-sample weight) into weight's rows in entry order, max's into each column's winning row: the order of the
 * composite it replaces (embedding, index_add, a division, max(dim); lua/fp8/nn/embedding_bag.lua keeps it for
 * max_norm, 16-bit weights and other devices), so the same bits. The per-sample weights' gradient, each entry's
 * <g[b], weight[id]>, is summed in double (the composite's mul backward summed in fp32). CPU weights only
 * (FL_EUNSUPPORTED otherwise). */
#include "ops.h"
#include "autograd.h"
#include "host_ops.h"
#include "cpu/par.h"
#include "profiler.h"
#include "device.h"
#include <math.h>
#include <stdlib.h>

/* Columns per thread task of the backward's sums (threads split columns, never rows: repeated ids add in order). */
#define BAG_COLS 64

typedef struct { const float *ids, *starts, *psw; int64_t n, B, V, D, pad; int mode; } bag_args;

/* max mode's state kept for the backward: each output's (bag, column) winning entry (< 2^24 of them), -1 for an
 * empty bag */
typedef struct { int32_t *arg; } bag_ctx;
static void bag_ctx_free(void *p) {
    bag_ctx *c = p;
    if (c) free(c->arg);
    free(c);
}

static float bag_count(const bag_args *a, int64_t b) {
    int64_t c = 0;
    for (int64_t j = (int64_t)a->starts[b]; j < (int64_t)a->starts[b + 1]; j++) c += (int64_t)a->ids[j] != a->pad;
    return (float)(c > 0 ? c : 1);
}

/* The weight's gradient: g[b] (over the count for a mean, times the entry's per-sample weight) added into its rows in
 * entry order, or for max into each column's winning row, bag by bag. */
static void bag_grad_weight(const bag_args *a, const int32_t *arg, const float *gv, float *zv) {
    const int64_t D = a->D, nblk = (D + BAG_COLS - 1) / BAG_COLS;
    FL_PAR_FOR(nblk > 1 && a->n * D > (1 << 16), schedule(static),
    for (int64_t bk = 0; bk < nblk; bk++) {
        const int64_t j0 = bk * BAG_COLS, nj = D - j0 < BAG_COLS ? D - j0 : BAG_COLS;
        float row[BAG_COLS];
        for (int64_t b = 0; b < a->B; b++) {
            const float *gr = gv + b * D + j0;
            if (a->mode == FL_BAG_MAX) {
                const int32_t *ar = arg + b * D + j0;
                for (int64_t j = 0; j < nj; j++)
                    if (ar[j] >= 0) zv[(int64_t)a->ids[ar[j]] * D + j0 + j] += gr[j];
                continue;
            }
            if (a->mode == FL_BAG_MEAN) {
                const float c = bag_count(a, b);
                for (int64_t j = 0; j < nj; j++) row[j] = gr[j] / c;
            } else {
                for (int64_t j = 0; j < nj; j++) row[j] = gr[j];
            }
            for (int64_t e = (int64_t)a->starts[b]; e < (int64_t)a->starts[b + 1]; e++) {
                const int64_t id = (int64_t)a->ids[e];
                if (id == a->pad) continue;
                float *dst = zv + id * D + j0;
                if (a->psw) {
                    const float p = a->psw[e];
                    for (int64_t j = 0; j < nj; j++) dst[j] += row[j] * p;
                } else {
                    for (int64_t j = 0; j < nj; j++) dst[j] += row[j];
                }
            }
        }
    });
}

/* The per-sample weights' gradient: each entry's <g[b], weight[id]> (0 for a padding entry), summed in double and
 * rounded once. */
static void bag_grad_psw(const bag_args *a, const float *gv, const float *w, float *dp) {
    const int64_t D = a->D;
    FL_PAR_FOR(a->B > 1 && a->n * D > (1 << 16), schedule(static),
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t e = (int64_t)a->starts[b]; e < (int64_t)a->starts[b + 1]; e++) {
            const int64_t id = (int64_t)a->ids[e];
            double s = 0;
            if (id != a->pad)
                for (int64_t j = 0; j < D; j++) s += (double)gv[b * D + j] * (double)w[id * D + j];
            dp[e] = (float)s;
        });
}

static fl_status embedding_bag_bwd(fl_node *nd, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *in = nd->inputs[0];
    const fl_tensor *psw = nd->saved[2];
    const bag_args a = { fl_tensor_data(nd->saved[0]), fl_tensor_data(nd->saved[1]), psw ? fl_tensor_data(psw) : NULL,
                         fl_tensor_numel(nd->saved[0]), fl_tensor_numel(nd->saved[1]) - 1, in->shape[0], in->shape[1],
                         nd->iargs[1], (int)nd->iargs[0] };
    const bag_ctx *c = nd->ctx;
    const bool need_w = fl_node_input_needs_grad(nd, 0), need_p = nd->ninputs > 1 && fl_node_input_needs_grad(nd, 1);
    fl_tensor *gh = NULL, *z = NULL, *dp = NULL, *rp = NULL;
    fl_status st = fl_host_f32_read(&gh, g);
    if (st == FL_OK && need_w) st = fl_tensor_zeros(&z, FL_F32, 2, in->shape, FL_DEV_CPU);
    if (st == FL_OK && need_p) st = fl_tensor_empty(&dp, FL_F32, 1, (int64_t[]){ a.n }, FL_DEV_CPU);
    if (st == FL_OK && z) bag_grad_weight(&a, c ? c->arg : NULL, fl_tensor_data(gh), fl_tensor_data(z));
    if (st == FL_OK && dp) bag_grad_psw(&a, fl_tensor_data(gh), fl_tensor_data(nd->saved[3]), fl_tensor_data(dp));
    if (st == FL_OK && dp) {
        const fl_tensor *p = nd->inputs[1];
        fl_tensor *r = NULL;
        st = fl_tensor_reshape(&r, dp, p->ndim, p->shape);
        if (st == FL_OK) st = fl_host_result(&rp, r, p->dtype, p->device), r = NULL;
        fl_tensor_release(r);
    }
    fl_tensor_release(gh);
    fl_tensor_release(dp);
    if (st != FL_OK) { fl_tensor_release(z); fl_tensor_release(rp); return st; }
    gin[0] = z;
    if (nd->ninputs > 1) gin[1] = rp;
    return FL_OK;
}

/* bag b's outputs y[D] for max: each column's largest value over the kept entries (the first NaN, else the first of
 * equal maxima: max(dim)'s rule), the entry it came from in arg[D]; an empty bag: zeros and -1. Branch-free per
 * column, so the columns vectorise. */
static void bag_max(const bag_args *a, const float *w, int64_t b, float *y, int32_t *arg) {
    const int64_t D = a->D;
    int64_t e = (int64_t)a->starts[b], end = (int64_t)a->starts[b + 1];
    while (e < end && (int64_t)a->ids[e] == a->pad) e++;
    if (e == end) {
        for (int64_t j = 0; j < D; j++) y[j] = 0.0f, arg[j] = -1;
        return;
    }
    const float *w0 = w + (int64_t)a->ids[e] * D;
    for (int64_t j = 0; j < D; j++) y[j] = w0[j], arg[j] = (int32_t)e;
    for (e++; e < end; e++) {
        const int64_t id = (int64_t)a->ids[e];
        if (id == a->pad) continue;
        const float *wr = w + id * D;
        const int32_t ei = (int32_t)e;
        #pragma omp simd
        for (int64_t j = 0; j < D; j++) {
            const float c = wr[j], cur = y[j];
            const bool take = cur == cur && (c != c || c > cur);
            y[j] = take ? c : cur;
            arg[j] = take ? ei : arg[j];
        }
    }
}

fl_status fl_embedding_bag(fl_tensor **out, const fl_tensor *ids, const fl_tensor *weight, const fl_tensor *starts,
                           int mode, int64_t pad, const fl_tensor *psw) {
    char sw[200];
    *out = NULL;
    FL_PROF_SCOPE("embedding_bag"); FL_PROF_SHAPES(ids, weight, starts);
    if (weight->ndim != 2)
        return FL_ERR(FL_EINVAL, "embedding_bag: weight must be [num_embeddings, dim], got %s",
                      fl_shape_str(sw, sizeof sw, weight->ndim, weight->shape));
    if (weight->device != FL_DEV_CPU || weight->dtype != FL_F32)
        return FL_ERR(FL_EUNSUPPORTED, "embedding_bag: this path takes fp32 CPU weights, got %s on %s",
                      fl_format(weight->dtype)->name, fl_device_name(weight->device));
    if (mode != FL_BAG_SUM && mode != FL_BAG_MEAN && mode != FL_BAG_MAX)
        return FL_ERR(FL_EINVAL, "embedding_bag: mode %d is not sum, mean or max", mode);
    if (fl_format(ids->dtype)->is_fp8 || fl_format(starts->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "embedding_bag: ids and offsets must hold whole numbers, not FP8");
    if (starts->ndim != 1 || starts->shape[0] < 1)
        return FL_ERR(FL_EINVAL, "embedding_bag: starts must be 1-d with at least one element");
    const int64_t V = weight->shape[0], D = weight->shape[1], n = fl_tensor_numel(ids), B = starts->shape[0] - 1;
    if (psw && mode != FL_BAG_SUM)
        return FL_ERR(FL_EINVAL, "embedding_bag: per-sample weights apply to mode sum only");
    if (psw && (fl_tensor_numel(psw) != n || psw->dtype != FL_F32 || psw->device != FL_DEV_CPU))
        return FL_ERR(FL_EINVAL, "embedding_bag: per-sample weights must be fp32 CPU values, one per id (%lld), got "
                      "%lld %s on %s", (long long)n, (long long)fl_tensor_numel(psw), fl_format(psw->dtype)->name,
                      fl_device_name(psw->device));
    if (n > (int64_t)1 << 24)   /* past 2^24 an fp32 start need not be the position it stands for */
        return FL_ERR(FL_EINVAL, "embedding_bag: %lld ids is more than fp32 starts can count exactly (2^24)", (long long)n);
    fl_tensor *ih = NULL, *sh = NULL, *ph = NULL, *wc = NULL, *v = NULL;
    bag_ctx *ctx = NULL;
    fl_status st = fl_host_f32(&ih, ids);
    if (st == FL_OK) st = fl_host_f32(&sh, starts);
    if (st == FL_OK && psw) st = fl_host_f32(&ph, psw);
    if (st == FL_OK) {
        const float *iv = fl_tensor_data(ih), *sv = fl_tensor_data(sh);
        for (int64_t j = 0; j < n && st == FL_OK; j++)
            if (!(iv[j] >= 0 && (double)iv[j] < (double)V && iv[j] == (float)(int64_t)iv[j]))
                st = FL_ERR(FL_EINVAL, "embedding_bag: index %.9g at %lld is out of range for %lld embeddings",
                            (double)iv[j], (long long)j, (long long)V);
        for (int64_t b = 0; b <= B && st == FL_OK; b++) {
            const float s = sv[b];
            const bool ok = s >= 0 && (double)s <= (double)n && s == (float)(int64_t)s &&
                            (b == 0 ? s == 0 : s >= sv[b - 1]) && (b < B || (double)s == (double)n);
            if (!ok) st = FL_ERR(FL_EINVAL, "embedding_bag: starts must rise from 0 to %lld, got %.9g at %lld",
                                 (long long)n, (double)s, (long long)b);
        }
    }
    if (st == FL_OK) st = fl_tensor_contiguous(&wc, weight);
    if (st == FL_OK) st = fl_tensor_empty(&v, FL_F32, 2, (int64_t[]){ B, D }, FL_DEV_CPU);
    if (st == FL_OK && mode == FL_BAG_MAX) {
        ctx = calloc(1, sizeof *ctx);
        if (ctx) ctx->arg = malloc((size_t)(B * D > 0 ? B * D : 1) * sizeof *ctx->arg);
        if (!ctx || !ctx->arg) st = FL_ERR(FL_ENOMEM, "embedding_bag: out of memory for [%lld, %lld] maxima", (long long)B,
                                          (long long)D);
    }
    if (st == FL_OK) {
        const bag_args a = { fl_tensor_data(ih), fl_tensor_data(sh), ph ? fl_tensor_data(ph) : NULL, n, B, V, D, pad,
                             mode };
        const float *w = fl_tensor_data(wc);
        float *y = fl_tensor_data(v);
        FL_PAR_FOR(B > 1 && n * D > (1 << 16), schedule(static),
        for (int64_t b = 0; b < B; b++) {
            float *yr = y + b * D;
            if (mode == FL_BAG_MAX) { bag_max(&a, w, b, yr, ctx->arg + b * D); continue; }
            for (int64_t j = 0; j < D; j++) yr[j] = 0.0f;
            for (int64_t e = (int64_t)a.starts[b]; e < (int64_t)a.starts[b + 1]; e++) {
                const int64_t id = (int64_t)a.ids[e];
                if (id == pad) continue;
                const float *wr = w + id * D;
                if (a.psw) {
                    const float p = a.psw[e];
                    FL_PRAGMA(omp simd)
                    for (int64_t j = 0; j < D; j++) yr[j] += wr[j] * p;
                } else {
                    FL_PRAGMA(omp simd)
                    for (int64_t j = 0; j < D; j++) yr[j] += wr[j];
                }
            }
            if (mode == FL_BAG_MEAN) {
                const float c = bag_count(&a, b);
                for (int64_t j = 0; j < D; j++) yr[j] /= c;
            }
        });
    }
    fl_node *nd = NULL;
    if (st == FL_OK) { *out = v; v = NULL; }
    const fl_tensor *ins[2] = { weight, psw };
    const int nin = psw ? 2 : 1;
    if (st == FL_OK && fl_any_requires_grad(nin, ins)) {
        st = fl_autograd_record(out, &nd, "EmbeddingBagBackward", embedding_bag_bwd, nin, ins);
        if (st == FL_OK) {
            nd->iargs[0] = mode;
            nd->iargs[1] = pad;
            nd->ctx = ctx, nd->ctx_free = bag_ctx_free, ctx = NULL;
            st = fl_node_save_detached(nd, 0, ih);
            if (st == FL_OK) st = fl_node_save_detached(nd, 1, sh);
            if (st == FL_OK && ph) st = fl_node_save_detached(nd, 2, ph);
            if (st == FL_OK && psw && fl_any_requires_grad(1, &psw)) st = fl_node_save_detached(nd, 3, wc);
            if (st == FL_OK) st = fl_node_input_stub(nd, 0);   /* its shape alone is read (psw's values: saved[2]) */
            if (st == FL_OK && psw) st = fl_node_input_stub(nd, 1);
        }
    }
    bag_ctx_free(ctx);
    fl_tensor_release(wc);
    fl_tensor_release(ih);
    fl_tensor_release(sh);
    fl_tensor_release(ph);
    fl_tensor_release(v);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}
