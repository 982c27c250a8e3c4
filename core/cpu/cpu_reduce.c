/* cpu_reduce.c — sum/mean/max/min/amax over all elements or one dim. Sums accumulate in double in
 * a fixed order (fixed-size blocks combined left to right), so results do not depend on threads.
 * max/min/amax propagate NaN, like torch. */
#include "cpu_internal.h"
#include <math.h>
#include <stdlib.h>

#define RBLOCK 65536

typedef struct { double sum; float mx, mn, amax; bool nan; } racc;

static void racc_init(racc *r) { r->sum = 0; r->mx = -INFINITY; r->mn = INFINITY; r->amax = 0; r->nan = false; }

/* One pass per op family; the sum is split into SIMD lanes in a fixed pattern, so the result is
 * the same on every run (and independent of thread count: blocks are fixed-size). */
static void racc_add(racc *r, fl_redop op, const float *x, int64_t n) {
    if (op == FL_OP_SUM || op == FL_OP_MEAN) {
        double s = 0;
        #pragma omp simd reduction(+:s)
        for (int64_t i = 0; i < n; i++) s += x[i];
        r->sum += s;
        return;
    }
    float mx = r->mx, mn = r->mn, am = r->amax;
    int nan = 0;
    #pragma omp simd reduction(max:mx,am) reduction(min:mn) reduction(|:nan)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        nan |= v != v;
        mx = v > mx ? v : mx;
        mn = v < mn ? v : mn;
        am = fabsf(v) > am ? fabsf(v) : am;
    }
    r->mx = mx; r->mn = mn; r->amax = am; r->nan |= nan != 0;
}

static void racc_merge(racc *r, const racc *o) {
    r->sum += o->sum;
    if (o->mx > r->mx) r->mx = o->mx;
    if (o->mn < r->mn) r->mn = o->mn;
    if (o->amax > r->amax) r->amax = o->amax;
    r->nan |= o->nan;
}

static float racc_result(fl_redop op, const racc *r, int64_t count) {
    switch (op) {
    case FL_OP_SUM: return (float)r->sum;
    case FL_OP_MEAN: return count ? (float)(r->sum / (double)count) : NAN;
    case FL_OP_MAX: return r->nan ? NAN : r->mx;
    case FL_OP_MIN: return r->nan ? NAN : r->mn;
    default: return r->nan ? NAN : r->amax;
    }
}

/* Accumulate a contiguous run of any dtype, converting in tiles. */
static void racc_run(racc *r, fl_redop op, const fl_tensor *t, int64_t off, int64_t stride, int64_t n) {
    if (t->dtype == FL_F32 && stride == 1) { racc_add(r, op, (const float *)fl_tensor_data(t) + off, n); return; }
    float buf[FL_CPU_TILE];
    for (int64_t j = 0; j < n; j += FL_CPU_TILE) {
        int64_t len = n - j < FL_CPU_TILE ? n - j : FL_CPU_TILE;
        fl_cpu_load(t, off + j * stride, stride, len, buf);
        racc_add(r, op, buf, len);
    }
}

fl_status fl_cpu_reduce(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim) {
    if (!fl_tensor_is_contiguous(a)) {
        fl_tensor *c;
        FL_TRY(fl_tensor_contiguous(&c, a));
        fl_status st = fl_cpu_reduce(op, dst, c, dim);
        fl_tensor_release(c);
        return st;
    }
    if (dim < 0 || a->ndim == 0) {
        int64_t n = fl_tensor_numel(a), nb = (n + RBLOCK - 1) / RBLOCK;
        racc total;
        racc_init(&total);
        racc *part = malloc((size_t)(nb ? nb : 1) * sizeof *part);
        if (!part) return FL_ERR(FL_ENOMEM, "reduce: out of memory");
        int64_t per_poll = FL_CPU_POLL / RBLOCK;
        for (int64_t c0 = 0; c0 < nb; c0 += per_poll) {
            fl_status st = fl_check_interrupt();
            if (st != FL_OK) { free(part); return st; }
            int64_t c1 = c0 + per_poll < nb ? c0 + per_poll : nb;
            #pragma omp parallel for schedule(static) if (c1 - c0 > 1)
            for (int64_t b = c0; b < c1; b++) {
                racc_init(&part[b]);
                int64_t i0 = b * RBLOCK;
                racc_run(&part[b], op, a, i0, 1, n - i0 < RBLOCK ? n - i0 : RBLOCK);
            }
        }
        for (int64_t b = 0; b < nb; b++) racc_merge(&total, &part[b]);
        free(part);
        float v = racc_result(op, &total, n);
        fl_cpu_store(dst, 0, 1, 1, &v);
        return FL_OK;
    }
    int64_t outer, size, inner;
    fl_cpu_split_axis(a, dim, &outer, &size, &inner);
    /* dst is contiguous [outer, 1, inner]. */
    if (inner == 1) {
        int64_t per_poll = FL_CPU_POLL / (size ? size : 1) + 1;
        for (int64_t c0 = 0; c0 < outer; c0 += per_poll) {
            FL_TRY(fl_check_interrupt());
            int64_t c1 = c0 + per_poll < outer ? c0 + per_poll : outer;
            #pragma omp parallel for schedule(static) if ((c1 - c0) * size >= FL_CPU_PAR_MIN)
            for (int64_t o = c0; o < c1; o++) {
                racc r;
                racc_init(&r);
                racc_run(&r, op, a, o * size, 1, size);
                float v = racc_result(op, &r, size);
                fl_cpu_store(dst, o, 1, 1, &v);
            }
        }
        return FL_OK;
    }
    /* Strided reduction: one tile of up to 256 inner positions at a time, walking the reduced dim
     * with contiguous loads, so memory is read in order. */
    enum { W = 256 };
    int64_t tiles_per = (inner + W - 1) / W, ntiles = outer * tiles_per;
    int64_t per_poll = FL_CPU_POLL / ((size ? size : 1) * W) + 1;
    for (int64_t c0 = 0; c0 < ntiles; c0 += per_poll) {
        FL_TRY(fl_check_interrupt());
        int64_t c1 = c0 + per_poll < ntiles ? c0 + per_poll : ntiles;
        #pragma omp parallel for schedule(static) if ((c1 - c0) * size * W >= FL_CPU_PAR_MIN)
        for (int64_t t = c0; t < c1; t++) {
            int64_t o = t / tiles_per, j0 = (t % tiles_per) * W, len = inner - j0 < W ? inner - j0 : W;
            double sum[W];
            float mx[W], mn[W], am[W], buf[W], res[W];
            bool nan[W];
            for (int64_t j = 0; j < len; j++) { sum[j] = 0; mx[j] = -INFINITY; mn[j] = INFINITY; am[j] = 0; nan[j] = false; }
            for (int64_t s = 0; s < size; s++) {
                fl_cpu_load(a, (o * size + s) * inner + j0, 1, len, buf);
                for (int64_t j = 0; j < len; j++) {
                    float v = buf[j];
                    sum[j] += v;
                    nan[j] |= v != v;
                    if (v > mx[j]) mx[j] = v;
                    if (v < mn[j]) mn[j] = v;
                    if (fabsf(v) > am[j]) am[j] = fabsf(v);
                }
            }
            for (int64_t j = 0; j < len; j++) {
                racc r = { sum[j], mx[j], mn[j], am[j], nan[j] };
                res[j] = racc_result(op, &r, size);
            }
            fl_cpu_store(dst, o * inner + j0, 1, len, res);
        }
    }
    return FL_OK;
}
