/* sort.c — ordering along a dim and drawing from categorical distributions: sort, topk (values and their indices,
 * the values carrying gradients back to where they came from) and multinomial. Computed on the host, as argmax is
 * (ops.c fl_argreduce): the values as contiguous fp32, the results moved to the input's device. Indices are fp32
 * values 0 .. n−1 (the index dtype of fp8lab's argmax, embedding and cross_entropy), exact below 2^24. */
#include "ops.h"
#include "ops_raw.h"
#include "host_ops.h"
#include "profiler.h"
#include "rng.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The order: ascending by value with NaN after every number (torch's: NaN is the largest), descending the reverse;
 * equal values keep their positions' order, so the result does not depend on the sort's algorithm. */
typedef struct { float v; int64_t i; } keyed;
static int cmp_asc(const void *pa, const void *pb) {
    const keyed *a = pa, *b = pb;
    const bool na = a->v != a->v, nb = b->v != b->v;
    if (na != nb) return na ? 1 : -1;
    if (!na && a->v != b->v) return a->v < b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}
static int cmp_desc(const void *pa, const void *pb) {
    const keyed *a = pa, *b = pb;
    const bool na = a->v != a->v, nb = b->v != b->v;
    if (na != nb) return na ? -1 : 1;
    if (!na && a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

typedef int (*keyed_cmp)(const void *, const void *);
static inline void kswap(keyed *a, keyed *b) { keyed t = *a; *a = *b; *b = t; }

/* Moves the k first of row[0 .. n) in cmp's order into row[0 .. k), in any order (topk: the whole line was sorted
 * to keep k of it, 1e6 values for k = 100): quickselect with a median-of-three pivot. cmp is a total order (equal
 * values by position), so the k are the ones a full sort puts first. Past 2·log2(n) + 8 rounds (an input that
 * defeats the pivot) the range left is sorted instead, which bounds the time at a sort's. */
static void select_first(keyed *row, int64_t n, int64_t k, keyed_cmp cmp) {
    int64_t lo = 0, hi = n - 1;   /* the boundary k − 1 lies in [lo, hi] */
    int budget = 8;
    for (int64_t m = n; m > 1; m >>= 1) budget += 2;
    while (hi > lo) {
        if (budget-- == 0) { qsort(row + lo, (size_t)(hi - lo + 1), sizeof *row, cmp); return; }
        const int64_t mid = lo + (hi - lo) / 2;
        if (cmp(&row[mid], &row[lo]) < 0) kswap(&row[mid], &row[lo]);
        if (cmp(&row[hi], &row[lo]) < 0) kswap(&row[hi], &row[lo]);
        if (cmp(&row[mid], &row[hi]) < 0) kswap(&row[mid], &row[hi]);   /* row[hi]: the median of the three */
        const keyed p = row[hi];
        int64_t s = lo;
        for (int64_t i = lo; i < hi; i++)
            if (cmp(&row[i], &p) < 0) kswap(&row[i], &row[s++]);
        kswap(&row[s], &row[hi]);
        if (s == k - 1) return;
        if (s < k - 1) lo = s + 1; else hi = s - 1;
    }
}

/* A full line in cmp's order without comparisons (qsort's calls were 2× torch's sort): an LSD radix sort, stable,
 * of 32-bit keys that order as the values do: NaN above every number (below, descending), -0 equal to +0, so equal
 * values keep their positions' order, which is cmp's tie rule: the same result as qsort with cmp. Four passes of 8
 * bits; a pass whose byte is the same in every key is skipped. tmp: n more places; key, key2: n keys each. */
static uint32_t sort_key(float v, bool descending) {
    uint32_t u;
    if (v != v) u = 0xFFFFFFFFu;
    else {
        if (v == 0.0f) v = 0.0f;   /* -0 as +0 */
        memcpy(&u, &v, 4);
        u = (u & 0x80000000u) ? ~u : u | 0x80000000u;
    }
    return descending ? ~u : u;
}
static void radix_line(keyed *row, keyed *tmp, uint32_t *key, uint32_t *key2, int64_t n, bool descending) {
    for (int64_t i = 0; i < n; i++) key[i] = sort_key(row[i].v, descending);
    for (int shift = 0; shift < 32; shift += 8) {
        int64_t count[257] = { 0 };
        for (int64_t i = 0; i < n; i++) count[((key[i] >> shift) & 0xFF) + 1]++;
        if (count[((key[0] >> shift) & 0xFF) + 1] == n) continue;   /* one byte value throughout: no move */
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (int64_t i = 0; i < n; i++) {
            const int64_t at = count[(key[i] >> shift) & 0xFF]++;
            tmp[at] = row[i];
            key2[at] = key[i];
        }
        memcpy(row, tmp, sizeof *row * (size_t)n);
        memcpy(key, key2, sizeof *key * (size_t)n);
    }
}

fl_status fl_sort(fl_tensor **values, fl_tensor **indices, const fl_tensor *a, int dim, bool descending, int64_t k,
                  const char *name) {
    char sa[200];
    *values = *indices = NULL;
    FL_PROF_SCOPE(name); FL_PROF_SHAPES(a);
    if (fl_format(a->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "%s: %s tensor: call :dequantize() first (FP8 tensors only hold quantized data)", name,
                      fl_format(a->dtype)->name);
    if (a->ndim == 0) return FL_ERR(FL_EINVAL, "%s: a 0-d tensor has no dim to order along", name);
    if (dim < -a->ndim || dim >= a->ndim)
        return FL_ERR(FL_EINVAL, "%s: dim %d out of range for a tensor of shape %s", name, dim,
                      fl_shape_str(sa, sizeof sa, a->ndim, a->shape));
    if (dim < 0) dim += a->ndim;
    const int64_t size = a->shape[dim];
    if (k < 0) k = size;
    if (k > size)
        return FL_ERR(FL_EINVAL, "%s: k = %lld is more than the %lld values along dim %d of %s", name, (long long)k,
                      (long long)size, dim + 1, fl_shape_str(sa, sizeof sa, a->ndim, a->shape));
    if (size > (INT64_C(1) << 24))
        return FL_ERR(FL_EINVAL, "%s: %lld positions along dim %d: indices above 2^24 are not exact in fp32, the index "
                      "dtype", name, (long long)size, dim + 1);
    int64_t outer = 1, inner = 1, shape[FL_MAX_DIMS];
    for (int i = 0; i < a->ndim; i++) {
        if (i < dim) outer *= a->shape[i];
        if (i > dim) inner *= a->shape[i];
        shape[i] = i == dim ? k : a->shape[i];
    }
    fl_tensor *h = NULL, *v = NULL, *ix = NULL;
    keyed *row = NULL, *tmp = NULL;
    uint32_t *key = NULL;
    const bool radix = k == size && size >= 64;   /* (below 64 values qsort is as quick) */
    fl_status st = fl_host_f32_read(&h, a);
    if (st == FL_OK) st = fl_tensor_empty(&v, FL_F32, a->ndim, shape, FL_DEV_CPU);
    if (st == FL_OK) st = fl_tensor_empty(&ix, FL_F32, a->ndim, shape, FL_DEV_CPU);
    const size_t line = (size_t)(size > 0 ? size : 1);
    if (st == FL_OK && (!(row = malloc(sizeof *row * line)) ||
                        (radix && (!(tmp = malloc(sizeof *tmp * line)) || !(key = malloc(sizeof *key * 2 * line))))))
        st = FL_ERR(FL_ENOMEM, "%s: out of memory for a line of %lld values", name, (long long)size);
    if (st == FL_OK && size > 0 && fl_tensor_numel(a) > 0) {   /* (an empty line of 2^62 columns walked each) */
        const float *x = fl_tensor_data(h);
        float *vv = fl_tensor_data(v), *iv = fl_tensor_data(ix);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < inner; j++) {
                for (int64_t s = 0; s < size; s++) row[s] = (keyed){ x[(o * size + s) * inner + j], s };
                const keyed_cmp cmp = descending ? cmp_desc : cmp_asc;
                if (radix) radix_line(row, tmp, key, key + size, size, descending);
                else {
                    if (k < size && k > 0) select_first(row, size, k, cmp);   /* topk: the k first, then their order */
                    if (k > 0) qsort(row, (size_t)k, sizeof *row, cmp);
                }
                for (int64_t r = 0; r < k; r++) {
                    vv[(o * k + r) * inner + j] = row[r].v;
                    iv[(o * k + r) * inner + j] = (float)row[r].i;
                }
            }
    }
    free(row);
    free(tmp);
    free(key);
    fl_tensor_release(h);
    /* the values in a's dtype (an exact conversion back: each is one of a's), the indices fp32, on a's device */
    if (st == FL_OK) st = fl_host_result(values, v, a->dtype, a->device), v = NULL;
    if (st == FL_OK) st = fl_host_result(indices, ix, FL_F32, a->device), ix = NULL;
    fl_tensor_release(v);
    fl_tensor_release(ix);
    if (st != FL_OK) {
        fl_tensor_release(*values);
        fl_tensor_release(*indices);
        *values = *indices = NULL;
        return st;
    }
    return fl_record_index_grad(values, indices, a, dim, k == size ? "SortBackward" : "TopkBackward", 0);
}

fl_status fl_multinomial(fl_tensor **out, const fl_tensor *probs, int64_t n, bool replacement, fl_rng *r) {
    char sa[200];
    *out = NULL;
    FL_PROF_SCOPE("multinomial"); FL_PROF_SHAPES(probs);
    if (fl_format(probs->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "multinomial: %s tensor: call :dequantize() first", fl_format(probs->dtype)->name);
    if (probs->ndim != 1 && probs->ndim != 2)
        return FL_ERR(FL_EINVAL, "multinomial: probabilities must be 1-d or 2-d (a row per distribution), got %s",
                      fl_shape_str(sa, sizeof sa, probs->ndim, probs->shape));
    const int64_t rows = probs->ndim == 2 ? probs->shape[0] : 1, cats = probs->shape[probs->ndim - 1];
    if (cats == 0) return FL_ERR(FL_EINVAL, "multinomial: no categories (shape %s)",
                                 fl_shape_str(sa, sizeof sa, probs->ndim, probs->shape));
    if (cats > (INT64_C(1) << 24))
        return FL_ERR(FL_EINVAL, "multinomial: %lld categories: indices above 2^24 are not exact in fp32",
                      (long long)cats);
    if (n < 1) return FL_ERR(FL_EINVAL, "multinomial: num_samples must be >= 1, got %lld", (long long)n);
    if (!replacement && n > cats)
        return FL_ERR(FL_EINVAL, "multinomial: cannot draw %lld samples from %lld categories without replacement",
                      (long long)n, (long long)cats);
    fl_tensor *h = NULL, *res = NULL;
    double *w = NULL;
    fl_status st = fl_host_f32_read(&h, probs);
    const int64_t shape[2] = { rows, n };
    if (st == FL_OK) st = fl_tensor_empty(&res, FL_F32, probs->ndim, probs->ndim == 2 ? shape : shape + 1, FL_DEV_CPU);
    if (st == FL_OK && !(w = malloc(sizeof *w * (size_t)cats)))
        st = FL_ERR(FL_ENOMEM, "multinomial: out of memory for %lld weights", (long long)cats);
    if (!r) r = fl_default_rng();
    for (int64_t b = 0; b < rows && st == FL_OK; b++) {
        const float *p = (const float *)fl_tensor_data(h) + b * cats;
        float *dst = (float *)fl_tensor_data(res) + b * n;
        int64_t nonzero = 0;
        double total = 0;
        for (int64_t c = 0; c < cats; c++) {
            if (!(p[c] >= 0 && p[c] < INFINITY)) {
                st = FL_ERR(FL_EINVAL,
                            "multinomial: row %lld, category %lld holds %g: probabilities must be finite and >= 0",
                            (long long)b + 1, (long long)c, (double)p[c]);
                break;
            }
            w[c] = p[c];
            total += w[c];
            nonzero += p[c] > 0;
        }
        if (st != FL_OK) break;
        if (!(total > 0)) {
            st = FL_ERR(FL_EINVAL, "multinomial: row %lld sums to 0: no category can be drawn", (long long)b + 1);
            break;
        }
        if (!replacement && n > nonzero) {
            st = FL_ERR(FL_EINVAL, "multinomial: row %lld has %lld categories of probability > 0, fewer than the %lld "
                        "samples drawn without replacement", (long long)b + 1, (long long)nonzero, (long long)n);
            break;
        }
        for (int64_t s = 0; s < n; s++) {
            float u;
            fl_rng_uniform(r, &u, 1, 0.0f, 1.0f);
            /* the first category whose running sum passes u·total; a zero-probability one never (the sum does not
             * grow there), and rounding at the end falls on the last one with weight */
            const double target = (double)u * total;
            double acc = 0;
            int64_t pick = -1;
            for (int64_t c = 0; c < cats; c++) {
                if (w[c] <= 0) continue;
                pick = c;
                acc += w[c];
                if (acc > target) break;
            }
            dst[s] = (float)pick;
            if (!replacement) {   /* drawn once: the rest from what is left */
                total -= w[pick];
                w[pick] = 0;
                if (!(total > 0)) {   /* what is left rounds to nothing: the remaining positive weights, from scratch */
                    total = 0;
                    for (int64_t c = 0; c < cats; c++) total += w[c];
                }
            }
        }
    }
    free(w);
    fl_tensor_release(h);
    if (st == FL_OK) st = fl_host_result(out, res, FL_F32, probs->device), res = NULL;
    fl_tensor_release(res);
    return st;
}
