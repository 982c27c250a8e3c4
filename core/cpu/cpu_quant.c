/* cpu_quant.c — FP8 quantize (scale, cast, stats), dequantize and amax on the CPU, on top of the
 * fused fp32 kernels in format.h. bf16/fp16 sources are widened to fp32 in chunks first.
 * Per-axis scaling walks the tensor as [outer, size, inner] runs, one scale per run. */
#include "cpu_internal.h"
#include "cpu_nn.h"
#ifdef __x86_64__
#include "cpu_avx2.h"
#endif
#include "par.h"
#include "scale_rule.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#define QCHUNK 16384

/* cm[c] = max(cm[c], |row[c]|) over one row: a column amax in progress (NaN compares false: ignored, as
 * fl_amax_f32 does). */
static inline void col_max(float *cm, const float *row, int64_t cols) {
    #pragma omp simd
    for (int64_t c = 0; c < cols; c++) {
        float a = fabsf(row[c]);
        cm[c] = a > cm[c] ? a : cm[c];
    }
}

/* Column sums made in FL_CPU_SUM_ROWS chunks of rows (psum [chunks, cols], double) combined in chunk order:
 * fl_cpu_dev_reduce's bits. */
static void sums_combine(float *out, const double *psum, int64_t chunks, int64_t cols) {
    for (int64_t c = 0; c < cols; c++) {
        double t = 0;
        for (int64_t ch = 0; ch < chunks; ch++) t += psum[ch * cols + c];
        out[c] = (float)t;
    }
}

/* Quantize n contiguous source elements starting at element `off` into dst bytes at `off`. */
static fl_status quant_run(fl_tensor *dst, const fl_tensor *src, int64_t off, int64_t n, float scale,
                           fl_overflow p, fl_cast_stats *acc, float *buf) {
    uint8_t *d = (uint8_t *)fl_tensor_data(dst) + off;
    fl_cast_stats s;
    if (src->dtype == FL_F32) {
        FL_TRY(fl_quantize_f32((const float *)fl_tensor_data(src) + off, d, (size_t)n, dst->dtype, scale, p, &s));
        fl_cast_stats_merge(acc, &s);
        return FL_OK;
    }
    for (int64_t j = 0; j < n; j += QCHUNK) {
        int64_t len = n - j < QCHUNK ? n - j : QCHUNK;
        fl_cpu_load(src, off + j, 1, len, buf);
        FL_TRY(fl_quantize_f32(buf, d + j, (size_t)len, dst->dtype, scale, p, &s));
        fl_cast_stats_merge(acc, &s);
    }
    return FL_OK;
}

/* fp32 [rows, cols] with one scale per row (per_col false) or per column (per_col true): the shapes of
 * per-row and per-column FP8 scaling. Rows are independent, so threads split them; a per-column row is cast
 * with its column's scale per element, in one pass, each thread's run of rows by one fl_quantize_f32_cols (the
 * scales checked once). A cast that fails (interrupted) makes the whole one fail. */
static fl_status quant_f32_2d(fl_tensor *dst, const fl_tensor *src, const float *scales, int64_t rows, int64_t cols,
                              bool per_col, fl_overflow p, fl_cast_stats *acc) {
    const float *x = fl_tensor_data(src);
    uint8_t *d = fl_tensor_data(dst);
    fl_status err = FL_OK;
    FL_PARALLEL(rows * cols >= FL_CPU_PAR_MIN,,
    {
        fl_cast_stats mine = { 0, 0, 0, 0 };
        fl_status st = FL_OK;
        if (per_col) {
            const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
            const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
            if (r1 > r0)
                st = fl_quantize_f32_cols(x + r0 * cols, d + r0 * cols, (size_t)(r1 - r0), (size_t)cols, dst->dtype,
                                          scales, p, &mine);
        } else {
            FL_PRAGMA(omp for schedule(static))
            for (int64_t r = 0; r < rows; r++) {
                fl_cast_stats s;
                fl_status rs = fl_quantize_f32(x + r * cols, d + r * cols, (size_t)cols, dst->dtype, scales[r], p, &s);
                if (rs == FL_OK) fl_cast_stats_merge(&mine, &s);
                else if (st == FL_OK) st = rs;
            }
        }
        FL_PRAGMA(omp critical)
        {
            fl_cast_stats_merge(acc, &mine);
            if (err == FL_OK) err = st;
        }
    });
    /* the only failure there is an interrupt, whose message a worker thread may have recorded for itself */
    if (err != FL_OK) return err == FL_EINTR ? FL_ERR(FL_EINTR, "interrupted") : err;
    return fl_check_interrupt();
}

fl_status fl_cpu_dev_quantize(fl_tensor *dst, const fl_tensor *src, const float *scales, int axis, fl_overflow p) {
    fl_cast_stats acc = { 0, 0, 0, 0 };
    float *buf = NULL;
    fl_status st = FL_OK;
    if (src->dtype != FL_F32 && !(buf = malloc(QCHUNK * sizeof(float))))
        return FL_ERR(FL_ENOMEM, "quantize: out of memory");
    int64_t n = fl_tensor_numel(src);
    float *si = fl_tensor_data(dst->scale_inv);
    if (axis < 0) {
        st = quant_run(dst, src, 0, n, scales[0], p, &acc, buf);
        si[0] = 1.0f / scales[0];
    } else {
        int64_t outer, size, inner;
        fl_cpu_split_axis(src, axis, &outer, &size, &inner);
        for (int64_t s = 0; s < size; s++) si[s] = 1.0f / scales[s];
        if (src->dtype == FL_F32 && (inner == 1 || outer == 1)) {
            free(buf);
            st = quant_f32_2d(dst, src, scales, inner == 1 ? outer : size, inner == 1 ? size : inner, inner == 1, p, &acc);
            if (st == FL_OK) dst->qstats = acc;
            return st;
        }
        int64_t done = 0;
        for (int64_t o = 0; o < outer && st == FL_OK; o++)
            for (int64_t s = 0; s < size && st == FL_OK; s++) {
                st = quant_run(dst, src, (o * size + s) * inner, inner, scales[s], p, &acc, buf);
                /* Short runs (per-column scaling) never reach format.c's own poll. */
                if ((done += inner) >= FL_CPU_POLL) { done = 0; if (st == FL_OK) st = fl_check_interrupt(); }
            }
    }
    free(buf);
    if (st == FL_OK) dst->qstats = acc;
    return st;
}

/* GELU's tanh form and the per-tensor cast of its output a chunk at a time (whole GELU spans, so each element is
 * computed as fl_cpu_gelu_fwd on the whole array computes it; the cast is per element and its statistics are a max
 * and counts), threads splitting the chunks: the fp32 activation never reaches memory. */
#define GQ_CHUNK (4 * FL_CPU_ACT_SPAN)

/* The per-tensor scale of current scaling for a cast into dst's format of values whose amax is `amax`:
 * fl_cpu_dev_quantize_current's. */
static float current_scale(const fl_tensor *dst, float amax, int margin, bool pow2) {
    return fl_amax_to_scale_current(amax, (float)fl_format(dst->dtype)->max, margin, pow2);
}

/* Elements per skip decision in current scaling's GELU passes below: a block is made only where its bound
 * (fl_cpu_gelu_tanh_bound, _dbound) exceeds the largest |value| made so far. */
#define GQ_SKIP 32

/* Whether any of the m ≤ GQ_SKIP elements at x (and the gradient g, when not NULL) may give |GELU| (|g·GELU'|) above
 * lo: some bound > lo. A NaN bound (g is NaN) never asks, as its value is NaN. With g, x is read only where
 * |g|·FL_CPU_GELU_DBOUND_MAX exceeds lo (in the GPT's steps, about 1% of blocks). */
#ifdef __x86_64__
__attribute__((target("avx2,fma")))
static bool gelu_may_exceed(const float *x, const float *g, int64_t m, float lo) {
    const __m256 l = _mm256_set1_ps(lo), absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 b = _mm256_setzero_ps();
    if (g) {
        for (int64_t k = 0; k < m; k += 8) b = _mm256_max_ps(_mm256_and_ps(fl_avx2_load_n(g + k, m - k), absm), b);
        if (!_mm256_movemask_ps(_mm256_cmp_ps(_mm256_mul_ps(b, _mm256_set1_ps(FL_CPU_GELU_DBOUND_MAX)), l, _CMP_GT_OQ)))
            return false;
        b = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < m; k += 8) {
        const __m256 v = fl_avx2_load_n(x + k, m - k);
        const __m256 t = g ? _mm256_mul_ps(_mm256_and_ps(fl_avx2_load_n(g + k, m - k), absm),
                                           fl_cpu_gelu_tanh_dbound8(v))
                           : fl_cpu_gelu_tanh_bound8(v);
        b = _mm256_max_ps(t, b);
    }
    return _mm256_movemask_ps(_mm256_cmp_ps(b, l, _CMP_GT_OQ)) != 0;
}
#else
static bool gelu_may_exceed(const float *x, const float *g, int64_t m, float lo) {
    for (int64_t k = 0; k < m; k++)
        if ((g ? fabsf(g[k]) * fl_cpu_gelu_tanh_dbound(x[k]) : fl_cpu_gelu_tanh_bound(x[k])) > lo) return true;
    return false;
}
#endif

/* max(lo, the amax of GELU over chunk c of x (n elements)), GELU as quantize_gelu makes it: current scaling's first
 * pass (fl_cpu_amax_made). Blocks whose GELU cannot exceed lo are not made: the amax of what they would give is not
 * above lo (a NaN GELU is ignored by the amax either way), so the result is the amax of GELU over the whole chunk. */
typedef struct { const float *x; int64_t n; } gelu_src;
static float gelu_chunk_amax(const void *ctx, int64_t c, float *buf, float lo) {
    const gelu_src *g = ctx;
    const int64_t i0 = c * GQ_CHUNK, len = g->n - i0 < GQ_CHUNK ? g->n - i0 : GQ_CHUNK;
    if (i0 + 2 * GQ_CHUNK <= g->n) fl_cpu_prefetch_row(g->x + i0 + GQ_CHUNK, GQ_CHUNK);   /* the next chunk */
    for (int64_t j = i0; j < i0 + len; j += GQ_SKIP) {
        const int64_t m = i0 + len - j < GQ_SKIP ? i0 + len - j : GQ_SKIP;
        if (!gelu_may_exceed(g->x + j, NULL, m, lo)) continue;
        fl_cpu_gelu_tanh_fwd_serial(g->x + j, buf, m);
        const float a = fl_amax_f32(buf, (size_t)m);
        lo = a > lo ? a : lo;
    }
    return lo;
}

fl_status fl_cpu_dev_quantize_gelu(fl_tensor *dst, const fl_tensor *src, const float *scale, int margin, bool pow2,
                                   int approx, fl_overflow p) {
    const int64_t n = fl_tensor_numel(src);
    if (approx != 1 || src->dtype != FL_F32 || !fl_tensor_is_contiguous(src) || !fl_tensor_is_contiguous(dst) ||
        fl_tensor_numel(dst) != n || !fl_format(dst->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "quantize_gelu: expects the tanh GELU of a contiguous fp32 source into FP8 of its size");
    const float *x = fl_tensor_data(src);
    uint8_t *d = fl_tensor_data(dst);
    float cur;
    if (!scale) {   /* current scaling: GELU's amax in a pass of its own, GELU made again for the cast */
        const gelu_src g = { x, n };
        float amax;
        FL_TRY(fl_cpu_amax_made((n + GQ_CHUNK - 1) / GQ_CHUNK, GQ_SKIP, n >= FL_CPU_PAR_MIN, gelu_chunk_amax, &g,
                                &amax));
        cur = current_scale(dst, amax, margin, pow2);
        scale = &cur;
    }
    fl_cast_stats acc = { 0, 0, 0, 0 };
    fl_status st = FL_OK;
    const int64_t chunks = (n + GQ_CHUNK - 1) / GQ_CHUNK;
    FL_PARALLEL(n >= FL_CPU_PAR_MIN,,
    {
        fl_cast_stats mine = { 0, 0, 0, 0 };
        float *buf = malloc(GQ_CHUNK * sizeof(float));
        fl_status my = buf ? FL_OK : FL_ERR(FL_ENOMEM, "quantize_gelu: out of memory");
        FL_PRAGMA(omp for schedule(static))
        for (int64_t c = 0; c < chunks; c++) {
            if (my != FL_OK) continue;
            const int64_t i0 = c * GQ_CHUNK, len = n - i0 < GQ_CHUNK ? n - i0 : GQ_CHUNK;
            fl_cast_stats s;
            if (i0 + 2 * GQ_CHUNK <= n) fl_cpu_prefetch_row(x + i0 + GQ_CHUNK, GQ_CHUNK);   /* the next chunk */
            fl_cpu_gelu_tanh_fwd_serial(x + i0, buf, len);
            my = fl_quantize_f32(buf, d + i0, (size_t)len, dst->dtype, scale[0], p, &s);
            if (my == FL_OK) fl_cast_stats_merge(&mine, &s);
        }
        free(buf);
        FL_PRAGMA(omp critical)
        {
            fl_cast_stats_merge(&acc, &mine);
            if (st == FL_OK) st = my;
        }
    });
    if (st != FL_OK) return st;
    ((float *)fl_tensor_data(dst->scale_inv))[0] = 1.0f / scale[0];
    dst->qstats = acc;
    return fl_check_interrupt();
}

/* max(lo, the amax of row r of dY = GELU'(gx) ⊙ src ([R, C])), dY as quant_dbias_rows makes it: current scaling's
 * first pass (fl_cpu_amax_made). As gelu_chunk_amax, blocks whose |src|·fl_cpu_gelu_tanh_dbound(gx) cannot exceed
 * lo are not made. */
typedef struct { const float *src, *gx; int64_t R, C; } dgelu_src;
static float dgelu_row_amax(const void *ctx, int64_t r, float *dy, float lo) {
    const dgelu_src *g = ctx;
    const int64_t C = g->C;
    if (r + 2 < g->R) fl_cpu_prefetch_row(g->src + (r + 2) * C, C);   /* gx is read only where src is large */
    for (int64_t j = 0; j < C; j += GQ_SKIP) {
        const int64_t m = C - j < GQ_SKIP ? C - j : GQ_SKIP;
        const float *s = g->src + r * C + j, *v = g->gx + r * C + j;
        if (!gelu_may_exceed(v, s, m, lo)) continue;
        fl_cpu_gelu_tanh_bwd_serial(v, s, dy, m);
        const float a = fl_amax_f32(dy, (size_t)m);
        lo = a > lo ? a : lo;
    }
    return lo;
}

/* dY's per-tensor cast and, with dbias, its column sums in one read, the sums in fl_cpu_dev_reduce's order
 * (FL_CPU_SUM_ROWS). With gx, dY is GELU'(gx) ⊙ src, made a row at a time into a scratch row that stays in cache
 * (GELU's backward per element: the values act_bwd gives on the whole array). scale NULL: current scaling with
 * (margin, pow2), dY's amax in a read before the cast's (dY made twice with gx). */
static fl_status quant_dbias_rows(fl_tensor *dst, const fl_tensor *src, const fl_tensor *gx, const float *scale,
                                  int margin, bool pow2, fl_overflow p, fl_tensor *dbias) {
    const int64_t R = src->shape[0], C = src->shape[1], chunks = (R + FL_CPU_SUM_ROWS - 1) / FL_CPU_SUM_ROWS;
    const float *x = fl_tensor_data(src), *xg = gx ? fl_tensor_data(gx) : NULL;
    uint8_t *d = fl_tensor_data(dst);
    float *db = dbias ? fl_tensor_data(dbias) : NULL;
    float cur;
    if (!scale) {
        float amax = 0.0f;
        const dgelu_src g = { x, xg, R, C };
        if (xg) FL_TRY(fl_cpu_amax_made(R, GQ_SKIP, R * C >= FL_CPU_PAR_MIN, dgelu_row_amax, &g, &amax));
        else if (R * C > 0) FL_TRY(fl_cpu_dev_amax(src, -1, &amax));
        cur = current_scale(dst, amax, margin, pow2);
        scale = &cur;
    }
    ((float *)fl_tensor_data(dst->scale_inv))[0] = 1.0f / scale[0];
    double *psum = db ? calloc((size_t)(chunks > 0 ? chunks : 1) * (size_t)(C > 0 ? C : 1), sizeof(double)) : NULL;
    if (db && !psum) return FL_ERR(FL_ENOMEM, "quantize_dbias: out of memory for %lld column sums", (long long)(chunks * C));
    fl_cast_stats acc = { 0, 0, 0, 0 };
    int nerr = 0, noom = 0;
    const bool wide = fl_cpu_avx512();
    FL_PARALLEL(chunks > 1 && R * C >= FL_CPU_PAR_MIN,,
    {
        fl_cast_stats mine = { 0, 0, 0, 0 };
        float *dy = xg ? malloc((size_t)(C > 0 ? C : 1) * sizeof(float)) : NULL;
        if (xg && !dy) {
            FL_PRAGMA(omp atomic)
            noom++;
        }
        FL_PRAGMA(omp for schedule(static))
        for (int64_t ch = 0; ch < chunks; ch++) {
            if (xg && !dy) continue;
            double *ps = psum ? psum + ch * C : NULL;
            const int64_t r1 = (ch + 1) * FL_CPU_SUM_ROWS < R ? (ch + 1) * FL_CPU_SUM_ROWS : R;
            for (int64_t r = ch * FL_CPU_SUM_ROWS; r < r1; r++) {
                const float *row = x + r * C;
                if (r + 2 < r1) {   /* two rows ahead (fl_cpu_prefetch_row) */
                    fl_cpu_prefetch_row(row + 2 * C, C);
                    if (xg) fl_cpu_prefetch_row(xg + (r + 2) * C, C);
                }
                if (xg) {
                    fl_cpu_gelu_tanh_bwd_serial(xg + r * C, row, dy, C);
                    row = dy;
                }
                fl_cast_stats s;
                if (fl_quantize_f32(row, d + r * C, (size_t)C, dst->dtype, scale[0], p, &s) != FL_OK) {
                    FL_PRAGMA(omp atomic)
                    nerr++;
                    break;
                }
                fl_cast_stats_merge(&mine, &s);
                if (ps) fl_cpu_add_row_f64(ps, row, C, wide);   /* the row is still in cache */
            }
        }
        free(dy);
        FL_PRAGMA(omp critical)
        fl_cast_stats_merge(&acc, &mine);
    });
    if (!nerr && !noom) {
        if (db) sums_combine(db, psum, chunks, C);
        dst->qstats = acc;
    }
    free(psum);
    if (noom) return FL_ERR(FL_ENOMEM, "quantize_dbias_dgelu: out of memory for a row of %lld", (long long)C);
    if (nerr) return FL_ERR(FL_EINTR, "interrupted");
    return fl_check_interrupt();
}

fl_status fl_cpu_dev_quantize_dbias(fl_tensor *dst, const fl_tensor *src, const float *scale, int margin, bool pow2,
                                    fl_overflow p, fl_tensor *dbias) {
    if (src->dtype != FL_F32 || src->ndim != 2 || !fl_tensor_is_contiguous(src) || dbias->dtype != FL_F32 ||
        !fl_tensor_is_contiguous(dbias) || fl_tensor_numel(dbias) != src->shape[1])
        return FL_ERR(FL_EINVAL, "quantize_dbias: expects a contiguous fp32 [R, C] source and an fp32 [C] bias gradient");
    return quant_dbias_rows(dst, src, NULL, scale, margin, pow2, p, dbias);
}

fl_status fl_cpu_dev_quantize_dbias_dgelu(fl_tensor *dst, const fl_tensor *src, const fl_tensor *x, const float *scale,
                                          int margin, bool pow2, fl_overflow p, fl_tensor *dbias) {
    if (src->dtype != FL_F32 || src->ndim != 2 || !fl_tensor_is_contiguous(src) || x->dtype != FL_F32 ||
        !fl_shape_equal(2, src->shape, x->ndim, x->shape) || !fl_tensor_is_contiguous(x) ||
        !fl_format(dst->dtype)->is_fp8 || !fl_shape_equal(2, src->shape, dst->ndim, dst->shape) ||
        !fl_tensor_is_contiguous(dst) ||
        (dbias && (dbias->dtype != FL_F32 || !fl_tensor_is_contiguous(dbias) || fl_tensor_numel(dbias) != src->shape[1])))
        return FL_ERR(FL_EINVAL, "quantize_dbias_dgelu: expects contiguous fp32 [R, C] dY and GELU input into FP8 of "
                      "that shape, and an fp32 [C] bias gradient or none");
    return quant_dbias_rows(dst, src, x, scale, margin, pow2, p, dbias);
}

/* Current scaling with one scale per row of a contiguous fp32 [rows, cols]: each row's amax, scale and cast in
 * one visit (the row is still in cache for the cast), the same numbers as the amax pass followed by the cast.
 * In the same visit, when asked: col_amax (the column maxima, NaN ignored: order-independent) and dbias (the
 * column sums in FL_CPU_SUM_ROWS chunks of rows, in double, the chunks combined in order: fl_cpu_dev_reduce's
 * bits). With gx, each row of src is made first (written into src), GELU per element so the values of act_fwd or
 * act_bwd on the whole: GELU of gx's row (quantize_rows_gelu), or with dgelu GELU'(gx's row) ⊙ the row, in place
 * (quantize_rows_dgelu). Threads take whole chunks. */
static fl_status quant_current_rows(fl_tensor *dst, const fl_tensor *src, int64_t rows, int64_t cols, int margin,
                                   bool pow2, fl_overflow p, float *col_amax, float *dbias, const float *gx,
                                   bool dgelu) {
    const float *x = fl_tensor_data(src);
    uint8_t *d = fl_tensor_data(dst);
    float *si = fl_tensor_data(dst->scale_inv);
    const float fmax = (float)fl_format(dst->dtype)->max;
    const int64_t chunks = (rows + FL_CPU_SUM_ROWS - 1) / FL_CPU_SUM_ROWS;
    double *psum = dbias ? calloc((size_t)(chunks > 0 ? chunks : 1) * (size_t)(cols > 0 ? cols : 1), sizeof(double)) : NULL;
    if (dbias && !psum) return FL_ERR(FL_ENOMEM, "quantize: out of memory for %lld column sums", (long long)(chunks * cols));
    if (col_amax) for (int64_t c = 0; c < cols; c++) col_amax[c] = 0.0f;
    fl_cast_stats acc = { 0, 0, 0, 0 };
    int nerr = 0;
    const bool wide = fl_cpu_avx512();
    FL_PARALLEL(rows * cols >= FL_CPU_PAR_MIN,,
    {
        fl_cast_stats mine = { 0, 0, 0, 0 };
        float *cm = col_amax && omp_get_num_threads() > 1 ? calloc((size_t)cols + 1, sizeof(float)) : col_amax;
        if (col_amax && !cm) {
            FL_PRAGMA(omp atomic)
            nerr++;
        }
        FL_PRAGMA(omp for schedule(static))
        for (int64_t ch = 0; ch < chunks; ch++) {
            if (col_amax && !cm) continue;
            double *ps = psum ? psum + ch * cols : NULL;
            const int64_t r1 = (ch + 1) * FL_CPU_SUM_ROWS < rows ? (ch + 1) * FL_CPU_SUM_ROWS : rows;
            for (int64_t r = ch * FL_CPU_SUM_ROWS; r < r1; r++) {
                const float *row = x + r * cols;
                if (gx && dgelu) fl_cpu_gelu_tanh_bwd_serial(gx + r * cols, row, (float *)row, cols);
                else if (gx) fl_cpu_gelu_tanh_fwd_serial(gx + r * cols, (float *)row, cols);
                const float scale = fl_amax_to_scale_current(cols ? fl_amax_f32(row, (size_t)cols) : 0.0f, fmax, margin, pow2);
                fl_cast_stats st;
                fl_quantize_f32(row, d + r * cols, (size_t)cols, dst->dtype, scale, p, &st);
                si[r] = 1.0f / scale;
                fl_cast_stats_merge(&mine, &st);
                if (cm) col_max(cm, row, cols);
                if (ps) fl_cpu_add_row_f64(ps, row, cols, wide);   /* the row is still in cache */
            }
        }
        FL_PRAGMA(omp critical)
        {
            fl_cast_stats_merge(&acc, &mine);
            if (cm && cm != col_amax)
                for (int64_t c = 0; c < cols; c++) col_amax[c] = cm[c] > col_amax[c] ? cm[c] : col_amax[c];
        }
        if (cm != col_amax) free(cm);
    });
    if (nerr) { free(psum); return FL_ERR(FL_ENOMEM, "quantize: out of memory for %lld column maxima", (long long)cols); }
    if (dbias) sums_combine(dbias, psum, chunks, cols);
    free(psum);
    dst->qstats = acc;
    return fl_check_interrupt();
}

fl_status fl_cpu_dev_quantize_rows_aux(fl_tensor *dst, const fl_tensor *src, int margin, bool pow2, fl_overflow p,
                                       float *col_amax, fl_tensor *dbias) {
    if (src->dtype != FL_F32 || src->ndim != 2 || !fl_tensor_is_contiguous(src) ||
        (dbias && (dbias->dtype != FL_F32 || !fl_tensor_is_contiguous(dbias) || fl_tensor_numel(dbias) != src->shape[1])) ||
        dst->scale_axis != 0 || fl_tensor_numel(dst->scale_inv) != src->shape[0])
        return FL_ERR(FL_EINVAL, "quantize_rows_aux: expects a contiguous fp32 [R, C] source, a destination scaled per row "
                      "and an fp32 [C] bias gradient");
    return quant_current_rows(dst, src, src->shape[0], src->shape[1], margin, pow2, p, col_amax,
                              dbias ? fl_tensor_data(dbias) : NULL, NULL, false);
}

fl_status fl_cpu_dev_quantize_rows_gelu(fl_tensor *dst, fl_tensor *y, const fl_tensor *x, int margin, bool pow2,
                                        fl_overflow p, float *col_amax) {
    if (x->dtype != FL_F32 || x->ndim != 2 || !fl_tensor_is_contiguous(x) || y->dtype != FL_F32 ||
        !fl_tensor_is_contiguous(y) || !fl_shape_equal(2, x->shape, y->ndim, y->shape) ||
        !fl_format(dst->dtype)->is_fp8 || !fl_tensor_is_contiguous(dst) ||
        !fl_shape_equal(2, x->shape, dst->ndim, dst->shape) || dst->scale_axis != 0 ||
        fl_tensor_numel(dst->scale_inv) != x->shape[0])
        return FL_ERR(FL_EINVAL, "quantize_rows_gelu: expects a contiguous fp32 [R, C] GELU input, an fp32 output of "
                      "its shape and an FP8 destination of its shape scaled per row");
    return quant_current_rows(dst, y, x->shape[0], x->shape[1], margin, pow2, p, col_amax, NULL, fl_tensor_data(x),
                              false);
}

fl_status fl_cpu_dev_quantize_rows_dgelu(fl_tensor *dst, fl_tensor *dy, const fl_tensor *x, int margin, bool pow2,
                                         fl_overflow p, float *col_amax, fl_tensor *dbias) {
    if (x->dtype != FL_F32 || x->ndim != 2 || !fl_tensor_is_contiguous(x) || dy->dtype != FL_F32 ||
        !fl_tensor_is_contiguous(dy) || !fl_shape_equal(2, x->shape, dy->ndim, dy->shape) ||
        !fl_format(dst->dtype)->is_fp8 || !fl_tensor_is_contiguous(dst) ||
        !fl_shape_equal(2, x->shape, dst->ndim, dst->shape) || dst->scale_axis != 0 ||
        fl_tensor_numel(dst->scale_inv) != x->shape[0] ||
        (dbias && (dbias->dtype != FL_F32 || !fl_tensor_is_contiguous(dbias) || fl_tensor_numel(dbias) != x->shape[1])))
        return FL_ERR(FL_EINVAL, "quantize_rows_dgelu: expects a contiguous fp32 [R, C] GELU input and dY of its "
                      "shape, an FP8 destination of that shape scaled per row and an fp32 [C] bias gradient or none");
    return quant_current_rows(dst, dy, x->shape[0], x->shape[1], margin, pow2, p, col_amax,
                              dbias ? fl_tensor_data(dbias) : NULL, fl_tensor_data(x), true);
}

fl_status fl_cpu_dev_quantize_current(fl_tensor *dst, const fl_tensor *src, int axis, int margin, bool pow2, fl_overflow p) {
    if (axis >= 0 && src->dtype == FL_F32 && fl_tensor_is_contiguous(src)) {
        int64_t outer, size, inner;
        fl_cpu_split_axis(src, axis, &outer, &size, &inner);
        if (outer == 1) return quant_current_rows(dst, src, size, inner, margin, pow2, p, NULL, NULL, NULL, false);
    }
    int64_t ns = axis < 0 ? 1 : src->shape[axis];
    float one, *scales = ns <= 1 ? &one : malloc((size_t)ns * sizeof(float));
    if (!scales) return FL_ERR(FL_ENOMEM, "quantize: out of memory for %lld scales", (long long)ns);
    fl_status st = FL_OK;
    if (fl_tensor_numel(src) > 0) st = fl_cpu_dev_amax(src, axis, scales);
    else for (int64_t i = 0; i < ns; i++) scales[i] = 0.0f;
    for (int64_t i = 0; st == FL_OK && i < ns; i++)
        scales[i] = fl_amax_to_scale_current(scales[i], (float)fl_format(dst->dtype)->max, margin, pow2);
    if (st == FL_OK) st = fl_cpu_dev_quantize(dst, src, scales, axis, p);
    if (scales != &one) free(scales);
    return st;
}

fl_status fl_cpu_dev_dequantize(fl_tensor *dst, const fl_tensor *q) {
    if (!fl_tensor_is_contiguous(q)) {
        fl_tensor *c;
        FL_TRY(fl_tensor_contiguous(&c, q));
        fl_status st = fl_cpu_dev_dequantize(dst, c);
        fl_tensor_release(c);
        return st;
    }
    int64_t outer = 1, size = 1, inner = fl_tensor_numel(q);
    if (q->scale_axis >= 0) fl_cpu_split_axis(q, q->scale_axis, &outer, &size, &inner);
    const float *si = fl_tensor_data(q->scale_inv);
    const uint8_t *src = fl_tensor_data(q);
    float *buf = NULL;
    if (dst->dtype != FL_F32 && !(buf = malloc(QCHUNK * sizeof(float))))
        return FL_ERR(FL_ENOMEM, "dequantize: out of memory");
    int64_t done = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t s = 0; s < size; s++) {
            int64_t off = (o * size + s) * inner;
            float sc = si[q->scale_axis >= 0 ? s * q->scale_inv->stride[0] : 0];
            for (int64_t j = 0; j < inner; j += QCHUNK) {
                int64_t len = inner - j < QCHUNK ? inner - j : QCHUNK;
                if ((done += len) >= FL_CPU_POLL) {
                    done = 0;
                    fl_status st = fl_check_interrupt();
                    if (st != FL_OK) { free(buf); return st; }
                }
                if (dst->dtype == FL_F32) {
                    fl_dequantize_f32(src + off + j, (float *)fl_tensor_data(dst) + off + j, (size_t)len, q->dtype, sc);
                } else {
                    fl_dequantize_f32(src + off + j, buf, (size_t)len, q->dtype, sc);
                    fl_cpu_store(dst, off + j, 1, len, buf);
                }
            }
        }
    free(buf);
    return FL_OK;
}

/* amax (NaN ignored, as fl_amax_f32 does) of a contiguous run of any non-FP8 dtype. */
static float amax_run(const fl_tensor *t, int64_t off, int64_t n) {
    if (t->dtype == FL_F32) return fl_amax_f32((const float *)fl_tensor_data(t) + off, (size_t)n);
    float buf[FL_CPU_TILE], m = 0;
    for (int64_t j = 0; j < n; j += FL_CPU_TILE) {
        int64_t len = n - j < FL_CPU_TILE ? n - j : FL_CPU_TILE;
        fl_cpu_load(t, off + j, 1, len, buf);
        float v = fl_amax_f32(buf, (size_t)len);
        if (v > m) m = v;
    }
    return m;
}

fl_status fl_cpu_dev_amax(const fl_tensor *src, int axis, float *out) {
    if (!fl_tensor_is_contiguous(src)) {
        fl_tensor *c;
        FL_TRY(fl_tensor_contiguous(&c, src));
        fl_status st = fl_cpu_dev_amax(c, axis, out);
        fl_tensor_release(c);
        return st;
    }
    int64_t n = fl_tensor_numel(src);
    if (axis < 0) {
        /* Blocks of 1M: poll between them; max is order-independent so threads may split a block. */
        float m = 0;
        for (int64_t i = 0; i < n; i += FL_CPU_POLL) {
            FL_TRY(fl_check_interrupt());
            int64_t len = n - i < FL_CPU_POLL ? n - i : FL_CPU_POLL;
            int64_t nsub = (len + 65535) / 65536;
            float part[FL_CPU_POLL / 65536 + 1];
            FL_PAR_FOR(len >= FL_CPU_PAR_MIN * 4, schedule(static),
            for (int64_t b = 0; b < nsub; b++) {
                int64_t j = b * 65536;
                part[b] = amax_run(src, i + j, len - j < 65536 ? len - j : 65536);
            });
            for (int64_t b = 0; b < nsub; b++) if (part[b] > m) m = part[b];
        }
        out[0] = m;
        return FL_OK;
    }
    int64_t outer, size, inner;
    fl_cpu_split_axis(src, axis, &outer, &size, &inner);
    if (src->dtype == FL_F32 && outer == 1) {   /* one amax per row: rows are independent */
        const float *x = fl_tensor_data(src);
        FL_PAR_FOR(size * inner >= FL_CPU_PAR_MIN, schedule(static),
        for (int64_t r = 0; r < size; r++) out[r] = fl_amax_f32(x + r * inner, (size_t)inner););
        return fl_check_interrupt();
    }
    for (int64_t s = 0; s < size; s++) out[s] = 0;
    if (src->dtype == FL_F32 && inner == 1) {
        /* One amax per column: each thread streams its rows into a max vector of its own, and the vectors
         * are combined by max, which is order-independent: the same result on any number of threads. */
        const float *x = fl_tensor_data(src);
        int nerr = 0;
        FL_PARALLEL(outer * size >= FL_CPU_PAR_MIN,,
        {
            float *mine = omp_get_num_threads() > 1 ? calloc((size_t)size, sizeof(float)) : out;
            if (!mine) {
                FL_PRAGMA(omp atomic)
                nerr++;
            }
            FL_PRAGMA(omp for schedule(static))
            for (int64_t o = 0; o < outer; o++) {
                if (mine) col_max(mine, x + o * size, size);
            }
            if (mine && mine != out) {
                FL_PRAGMA(omp critical)
                for (int64_t c = 0; c < size; c++) out[c] = mine[c] > out[c] ? mine[c] : out[c];
                free(mine);
            }
        });
        if (nerr) return FL_ERR(FL_ENOMEM, "amax: out of memory for %lld column maxima", (long long)size);
        return fl_check_interrupt();
    }
    int64_t done = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t s = 0; s < size; s++) {
            float v = amax_run(src, (o * size + s) * inner, inner);
            if (v > out[s]) out[s] = v;
            if ((done += inner) >= FL_CPU_POLL) { done = 0; FL_TRY(fl_check_interrupt()); }
        }
    return FL_OK;
}
