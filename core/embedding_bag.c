/* embedding_bag.c — EmbeddingBag's sum and mean on the host: out[b] = Σ weight[ids[j]] over bag b's entries
 * (starts[b] ≤ j < starts[b + 1]), pad's entries left out (of the mean's count too), a mean divided by the count
 * (1 for an empty bag). Each bag adds its rows in entry order from zero and the backward adds g[b] (over the count)
 * into weight's rows in entry order: the order of the composite it replaces (embedding, index_add, a division;
 * lua/fp8/nn/embedding_bag.lua keeps it for max, per_sample_weights, max_norm and other devices), so the same bits.
 * CPU weights only (FL_EUNSUPPORTED otherwise). */
#include "ops.h"
#include "autograd.h"
#include "host_ops.h"
#include "profiler.h"
#include "device.h"
#include <stdlib.h>

/* Columns per thread task of the backward's sums (threads split columns, never rows: repeated ids add in order). */
#define BAG_COLS 64

typedef struct { const float *ids, *starts; int64_t n, B, V, D, pad; bool mean; } bag_args;

static float bag_count(const bag_args *a, int64_t b) {
    int64_t c = 0;
    for (int64_t j = (int64_t)a->starts[b]; j < (int64_t)a->starts[b + 1]; j++) c += (int64_t)a->ids[j] != a->pad;
    return (float)(c > 0 ? c : 1);
}

static fl_status embedding_bag_bwd(fl_node *nd, const fl_tensor *g, fl_tensor **gin) {
    const fl_tensor *in = nd->inputs[0];
    const bag_args a = { fl_tensor_data(nd->saved[0]), fl_tensor_data(nd->saved[1]), fl_tensor_numel(nd->saved[0]),
                         fl_tensor_numel(nd->saved[1]) - 1, in->shape[0], in->shape[1], nd->iargs[1],
                         nd->iargs[0] != 0 };
    fl_tensor *gh = NULL, *z = NULL;
    fl_status st = fl_host_f32(&gh, g);
    if (st == FL_OK) st = fl_tensor_zeros(&z, FL_F32, 2, in->shape, FL_DEV_CPU);
    if (st != FL_OK) { fl_tensor_release(gh); return st; }
    const float *gv = fl_tensor_data(gh);
    float *zv = fl_tensor_data(z);
    const int64_t D = a.D, nblk = (D + BAG_COLS - 1) / BAG_COLS;
    #pragma omp parallel for if (nblk > 1 && a.n * D > (1 << 16)) schedule(static)
    for (int64_t bk = 0; bk < nblk; bk++) {
        const int64_t j0 = bk * BAG_COLS, nj = D - j0 < BAG_COLS ? D - j0 : BAG_COLS;
        float row[BAG_COLS];
        for (int64_t b = 0; b < a.B; b++) {
            const float *gr = gv + b * D + j0;
            if (a.mean) {
                const float c = bag_count(&a, b);
                for (int64_t j = 0; j < nj; j++) row[j] = gr[j] / c;
            } else {
                for (int64_t j = 0; j < nj; j++) row[j] = gr[j];
            }
            for (int64_t e = (int64_t)a.starts[b]; e < (int64_t)a.starts[b + 1]; e++) {
                const int64_t id = (int64_t)a.ids[e];
                if (id == a.pad) continue;
                float *dst = zv + id * D + j0;
                for (int64_t j = 0; j < nj; j++) dst[j] += row[j];
            }
        }
    }
    fl_tensor_release(gh);
    gin[0] = z;
    return FL_OK;
}

fl_status fl_embedding_bag(fl_tensor **out, const fl_tensor *ids, const fl_tensor *weight, const fl_tensor *starts,
                           bool mean, int64_t pad) {
    char sw[200];
    *out = NULL;
    FL_PROF_SCOPE("embedding_bag"); FL_PROF_SHAPES(ids, weight, starts);
    if (weight->ndim != 2)
        return FL_ERR(FL_EINVAL, "embedding_bag: weight must be [num_embeddings, dim], got %s",
                      fl_shape_str(sw, sizeof sw, weight->ndim, weight->shape));
    if (weight->device != FL_DEV_CPU || weight->dtype != FL_F32)
        return FL_ERR(FL_EUNSUPPORTED, "embedding_bag: this path takes fp32 CPU weights, got %s on %s",
                      fl_format(weight->dtype)->name, fl_device_name(weight->device));
    if (fl_format(ids->dtype)->is_fp8 || fl_format(starts->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "embedding_bag: ids and offsets must hold whole numbers, not FP8");
    if (starts->ndim != 1 || starts->shape[0] < 1)
        return FL_ERR(FL_EINVAL, "embedding_bag: starts must be 1-d with at least one element");
    const int64_t V = weight->shape[0], D = weight->shape[1], n = fl_tensor_numel(ids), B = starts->shape[0] - 1;
    if (n > (int64_t)1 << 24)   /* past 2^24 an fp32 start need not be the position it stands for */
        return FL_ERR(FL_EINVAL, "embedding_bag: %lld ids is more than fp32 starts can count exactly (2^24)", (long long)n);
    fl_tensor *ih = NULL, *sh = NULL, *wc = NULL, *v = NULL;
    fl_status st = fl_host_f32(&ih, ids);
    if (st == FL_OK) st = fl_host_f32(&sh, starts);
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
    if (st == FL_OK) {
        const bag_args a = { fl_tensor_data(ih), fl_tensor_data(sh), n, B, V, D, pad, mean };
        const float *w = fl_tensor_data(wc);
        float *y = fl_tensor_data(v);
        #pragma omp parallel for if (B > 1 && n * D > (1 << 16)) schedule(static)
        for (int64_t b = 0; b < B; b++) {
            float *yr = y + b * D;
            for (int64_t j = 0; j < D; j++) yr[j] = 0.0f;
            for (int64_t e = (int64_t)a.starts[b]; e < (int64_t)a.starts[b + 1]; e++) {
                const int64_t id = (int64_t)a.ids[e];
                if (id == pad) continue;
                const float *wr = w + id * D;
                #pragma omp simd
                for (int64_t j = 0; j < D; j++) yr[j] += wr[j];
            }
            if (mean) {
                const float c = bag_count(&a, b);
                for (int64_t j = 0; j < D; j++) yr[j] /= c;
            }
        }
    }
    fl_tensor_release(wc);
    fl_node *nd = NULL;
    if (st == FL_OK) { *out = v; v = NULL; }
    if (st == FL_OK && fl_any_requires_grad(1, &weight)) {
        st = fl_autograd_record(out, &nd, "EmbeddingBagBackward", embedding_bag_bwd, 1, &weight);
        if (st == FL_OK) {
            nd->iargs[0] = mean;
            nd->iargs[1] = pad;
            st = fl_node_save_detached(nd, 0, ih);
            if (st == FL_OK) st = fl_node_save_detached(nd, 1, sh);
            if (st == FL_OK) st = fl_node_input_stub(nd, 0);   /* its shape alone is read */
        }
    }
    fl_tensor_release(ih);
    fl_tensor_release(sh);
    fl_tensor_release(v);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}
