/* cpu_nn_norm.c — LayerNorm over the last dim and Embedding lookup, forward and backward. Per-row work
 * runs one row per thread; LayerNorm's parameter gradients are column sums over fixed chunks of rows combined in
 * chunk order, the embedding's are split by columns, each summed over its positions in order: every result is
 * independent of the thread count. */
#include "cpu_nn_internal.h"
#include "cpu_internal.h"
#include "format.h"

#include <stdlib.h>

/* Columns per thread task in the embedding's column-split gradient sums: 64 floats = 4 cache lines per row. */
#define COL_BLOCK 64
/* LayerNorm's dw/db: rows a chunk of its column sums (fl_cpu_layernorm_bwd). */
#define LN_SUM_ROWS 64

/* One row: two passes in double, the mean, then the biased variance Σ(x−mean)²/n (no cancellation); then
 * y = (x − mean)·rstd·w + b. */
static inline void ln_row(const float *xr, const float *w, const float *b, float *yr, float *mean, float *rstd,
                          int64_t cols, float eps) {
    double s = 0.0;
    #pragma omp simd reduction(+:s)
    for (int64_t j = 0; j < cols; j++) s += (double)xr[j];
    double mu = s / (double)cols, v = 0.0;
    #pragma omp simd reduction(+:v)
    for (int64_t j = 0; j < cols; j++) { double d = (double)xr[j] - mu; v += d * d; }
    float m = (float)mu, rs = (float)(1.0 / sqrt(v / (double)cols + (double)eps));
    *mean = m; *rstd = rs;
    if (w && b) {
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] = (xr[j] - m) * rs * w[j] + b[j];
    } else if (w) {
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] = (xr[j] - m) * rs * w[j];
    } else if (b) {
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] = (xr[j] - m) * rs + b[j];
    } else {
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] = (xr[j] - m) * rs;
    }
}

void fl_cpu_layernorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                          int64_t rows, int64_t cols, float eps) {
    #pragma omp parallel for if (rows > 1 && rows * cols > FL_NN_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        if (r + 2 < rows) fl_cpu_prefetch_row(x + (r + 2) * cols, cols);
        ln_row(x + r * cols, w, b, y + r * cols, mean + r, rstd + r, cols, eps);
    }
}

/* fl_cpu_layernorm_fwd with y cast per tensor to fmt with `scale` as it is made (fl_quantize_f32 a row at a time
 * from a scratch row that stays in cache): q gets y's codes, *st their statistics; y is never in memory. */
fl_status fl_cpu_layernorm_quantize(const float *x, const float *w, const float *b, uint8_t *q, float *mean, float *rstd,
                                    int64_t rows, int64_t cols, float eps, fl_dtype fmt, float scale, fl_overflow p,
                                    fl_cast_stats *st) {
    fl_cast_stats acc = { 0, 0, 0, 0 };
    int nerr = 0, noom = 0;
    #pragma omp parallel if (rows > 1 && rows * cols > FL_NN_PAR_MIN)
    {
        fl_cast_stats mine = { 0, 0, 0, 0 };
        float *yr = malloc((size_t)(cols > 0 ? cols : 1) * sizeof(float));
        if (!yr) {
            #pragma omp atomic
            noom++;
        }
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!yr) continue;
            if (r + 2 < rows) fl_cpu_prefetch_row(x + (r + 2) * cols, cols);
            ln_row(x + r * cols, w, b, yr, mean + r, rstd + r, cols, eps);
            fl_cast_stats s;
            if (fl_quantize_f32(yr, q + r * cols, (size_t)cols, fmt, scale, p, &s) != FL_OK) {
                #pragma omp atomic
                nerr++;
                continue;
            }
            fl_cast_stats_merge(&mine, &s);
        }
        free(yr);
        #pragma omp critical
        fl_cast_stats_merge(&acc, &mine);
    }
    if (noom) return FL_ERR(FL_ENOMEM, "layernorm_quantize: out of memory for a row of %lld", (long long)cols);
    if (nerr) return FL_ERR(FL_EINTR, "interrupted");
    *st = acc;
    return FL_OK;
}

/* LayerNorm backward's second and third passes over one row, its sums a = Σ(dy·w)/n and c = Σ(dy·w·x̂)/n made:
 * dx (unless NULL), and the row's terms of dw and db added to the chunk's column sums pw, pb (unless NULL; the
 * row still in cache). Elementwise or per column, never across lanes, so the AVX-512 copy gives the AVX2 copy's
 * bits; the first pass's row sums stay in the build's AVX2 code (their lane count sets their rounding). */
static inline __attribute__((always_inline)) void ln_bwd_rest(const float *xr, const float *gr, const float *w, float m,
                                                              float rs, float a, float c, float *dr, double *pw,
                                                              double *pb, int64_t cols) {
    if (dr && w) {
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) dr[j] = rs * (gr[j] * w[j] - a - (xr[j] - m) * rs * c);
    } else if (dr) {
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) dr[j] = rs * (gr[j] - a - (xr[j] - m) * rs * c);
    }
    if (pw) {
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) { pw[j] += (double)(gr[j] * (xr[j] - m) * rs); pb[j] += (double)gr[j]; }
    }
}
static void ln_bwd_rest256(const float *xr, const float *gr, const float *w, float m, float rs, float a, float c,
                           float *dr, double *pw, double *pb, int64_t cols) {
    ln_bwd_rest(xr, gr, w, m, rs, a, c, dr, pw, pb, cols);
}
FL_CPU_AVX512 static void ln_bwd_rest512(const float *xr, const float *gr, const float *w, float m, float rs, float a,
                                         float c, float *dr, double *pw, double *pb, int64_t cols) {
    ln_bwd_rest(xr, gr, w, m, rs, a, c, dr, pw, pb, cols);
}

/* With x̂ = (x−mean)·rstd and g = dy·w: dx = rstd·(g − mean(g) − x̂·mean(g·x̂)); dw += Σ_rows dy·x̂,
 * db += Σ_rows dy. One pass over x and dy: a row's dx, then its terms of dw and db added to its chunk's column
 * sums (LN_SUM_ROWS rows a chunk, in double), which are combined in chunk order at the end; threads take whole
 * chunks, so every result is independent of the thread count. */
fl_status fl_cpu_layernorm_bwd(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                               float *dx, float *dw, float *db, int64_t rows, int64_t cols) {
    const bool wide = fl_cpu_avx512();
    const int par = rows > 1 && rows * cols > FL_NN_PAR_MIN;
    const bool sums = dw || db;
    const int64_t chunks = (rows + LN_SUM_ROWS - 1) / LN_SUM_ROWS;
    double *ps = sums ? calloc((size_t)(chunks > 0 ? chunks : 1) * 2 * (size_t)(cols > 0 ? cols : 1), sizeof(double)) : NULL;
    if (sums && !ps)
        return FL_ERR(FL_ENOMEM, "layer_norm backward: out of memory for %lld column sums", (long long)(2 * chunks * cols));
    #pragma omp parallel for if (par && chunks > 1) schedule(static)
    for (int64_t ch = 0; ch < chunks; ch++) {
        double *pw = sums ? ps + ch * 2 * cols : NULL, *pb = sums ? pw + cols : NULL;
        const int64_t r1 = (ch + 1) * LN_SUM_ROWS < rows ? (ch + 1) * LN_SUM_ROWS : rows;
        for (int64_t r = ch * LN_SUM_ROWS; r < r1; r++) {
            const float *xr = x + r * cols, *gr = dy + r * cols;
            const float m = mean[r], rs = rstd[r];
            if (r + 2 < r1) {
                fl_cpu_prefetch_row(xr + 2 * cols, cols);
                fl_cpu_prefetch_row(gr + 2 * cols, cols);
            }
            float a = 0.0f, c = 0.0f;
            if (dx) {
                float sg = 0.0f, sgx = 0.0f;
                if (w) {
                    #pragma omp simd reduction(+:sg, sgx)
                    for (int64_t j = 0; j < cols; j++) {
                        float g = gr[j] * w[j];
                        sg += g; sgx += g * (xr[j] - m) * rs;
                    }
                } else {
                    #pragma omp simd reduction(+:sg, sgx)
                    for (int64_t j = 0; j < cols; j++) { sg += gr[j]; sgx += gr[j] * (xr[j] - m) * rs; }
                }
                a = sg / (float)cols, c = sgx / (float)cols;
            }
            float *dr = dx ? dx + r * cols : NULL;
            if (wide) ln_bwd_rest512(xr, gr, w, m, rs, a, c, dr, pw, pb, cols);
            else ln_bwd_rest256(xr, gr, w, m, rs, a, c, dr, pw, pb, cols);
        }
    }
    if (sums) {
        for (int64_t j = 0; j < cols; j++) {
            double tw = 0.0, tb = 0.0;
            for (int64_t ch = 0; ch < chunks; ch++) { tw += ps[ch * 2 * cols + j]; tb += ps[ch * 2 * cols + cols + j]; }
            if (dw) dw[j] += (float)tw;
            if (db) db[j] += (float)tb;
        }
    }
    free(ps);
    return FL_OK;
}

fl_status fl_cpu_embedding_fwd(const float *idx, int64_t n, const float *weight, int64_t vocab, int64_t dim, float *y) {
    for (int64_t i = 0; i < n; i++) {
        double t = idx[i];
        if (!(t >= 0.0 && t < (double)vocab) || t != floor(t))
            return FL_ERR(FL_EINVAL, "embedding: index %g at position %lld is out of range [0, %lld) (vocab size %lld)",
                          t, (long long)i, (long long)vocab, (long long)vocab);
    }
    #pragma omp parallel for if (n > 1 && n * dim > FL_NN_PAR_MIN) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *src = weight + (int64_t)idx[i] * dim;
        float *dst = y + i * dim;
        #pragma omp simd
        for (int64_t j = 0; j < dim; j++) dst[j] = src[j];
    }
    return FL_OK;
}

/* Repeated indices add into the same row, so threads split columns (never rows) and each visits the
 * positions in order: deterministic sums. Indices were validated by the forward. */
void fl_cpu_embedding_bwd(const float *idx, int64_t n, const float *dy, int64_t dim, float *dweight) {
    const int64_t nblk = (dim + COL_BLOCK - 1) / COL_BLOCK;
    #pragma omp parallel for if (nblk > 1 && n * dim > FL_NN_PAR_MIN) schedule(static)
    for (int64_t bk = 0; bk < nblk; bk++) {
        const int64_t j0 = bk * COL_BLOCK, nj = dim - j0 < COL_BLOCK ? dim - j0 : COL_BLOCK;
        for (int64_t i = 0; i < n; i++) {
            float *dst = dweight + (int64_t)idx[i] * dim + j0;
            const float *src = dy + i * dim + j0;
            #pragma omp simd
            for (int64_t j = 0; j < nj; j++) dst[j] += src[j];
        }
    }
}
