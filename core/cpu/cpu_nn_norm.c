/* cpu_nn_norm.c — LayerNorm over the last dim and Embedding lookup, forward and backward. Per-row work runs whole
 * rows per thread task (LayerNorm's forward two at a time); LayerNorm's parameter gradients are column sums over
 * fixed chunks of rows combined in chunk order, the embedding's are split by columns, each summed over its
 * positions in order: every result is independent of the thread count. */
#include "cpu_nn_internal.h"
#include <omp.h>
#include "cpu_internal.h"
#include "format.h"
#include "par.h"
#include "scale_rule.h"

#include <stdlib.h>

/* Columns per thread task in the embedding's column-split gradient sums: 64 floats = 4 cache lines per row. */
#define COL_BLOCK 64
/* LayerNorm's dw/db: rows a chunk of its column sums (fl_cpu_layernorm_bwd). */
#define LN_SUM_ROWS 64

/* One row's mean and rstd: two passes in double, the mean, then the biased variance Σ(x−mean)²/n (no
 * cancellation), each sum in a fixed order: 8 partial sums, lane l adding the elements j ≡ l (mod 8) in turn (the
 * last cols % 8 elements go to lane 0), then 0 + lane 0 + … + lane 7 (the order the AVX2 build's simd reduction
 * gave before it was written out). ln_stats2_512 makes the same sums for two rows with AVX-512 (test
 * nn_layernorm_avx512_same_bits). */
static inline void ln_stats(const float *xr, int64_t cols, float eps, float *mean, float *rstd) {
    double l[8] = { 0 }, mu, s = 0.0, v = 0.0;
    const int64_t n8 = cols & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8)
        for (int i = 0; i < 8; i++) l[i] += (double)xr[j + i];
    for (int64_t j = n8; j < cols; j++) l[0] += (double)xr[j];
    for (int i = 0; i < 8; i++) s += l[i];
    mu = s / (double)cols;
    for (int i = 0; i < 8; i++) l[i] = 0.0;
    for (int64_t j = 0; j < n8; j += 8)
        for (int i = 0; i < 8; i++) { const double d = (double)xr[j + i] - mu; l[i] += d * d; }
    for (int64_t j = n8; j < cols; j++) { const double d = (double)xr[j] - mu; l[0] += d * d; }
    for (int i = 0; i < 8; i++) v += l[i];
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt(v / (double)cols + (double)eps));
}

/* y = (x − mean)·rstd·w + b (w, b when not NULL), per element, so any vector width gives the same bits. */
static inline __attribute__((always_inline)) void ln_apply(const float *xr, const float *w, const float *b, float *yr,
                                                           float m, float rs, int64_t cols) {
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

static inline void ln_row(const float *xr, const float *w, const float *b, float *yr, float *mean, float *rstd,
                          int64_t cols, float eps) {
    ln_stats(xr, cols, eps, mean, rstd);
    ln_apply(xr, w, b, yr, *mean, *rstd, cols);
}

#ifdef __x86_64__
/* One sum of ln_stats for two rows in zmm registers of 8 doubles (lane i of a0 is ln_stats's l[i]): the two rows'
 * chains of additions overlap, and a conversion makes 8 doubles where the AVX2 loop makes 4 and an extract (the
 * row's time was in those conversions and the chains). sq: Σ(x − mu)², else Σx. */
FL_CPU_AVX512 static inline __attribute__((always_inline)) void ln_sum2_512(const float *x0, const float *x1,
                                                                            int64_t cols, bool sq, double mu0,
                                                                            double mu1, double *s0, double *s1) {
    const int64_t n8 = cols & ~(int64_t)7;
    const __m512d m0 = _mm512_set1_pd(mu0), m1 = _mm512_set1_pd(mu1);
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    for (int64_t j = 0; j < n8; j += 8) {
        __m512d d0 = _mm512_cvtps_pd(_mm256_loadu_ps(x0 + j)), d1 = _mm512_cvtps_pd(_mm256_loadu_ps(x1 + j));
        if (sq) {
            d0 = _mm512_sub_pd(d0, m0);
            d1 = _mm512_sub_pd(d1, m1);
            d0 = _mm512_mul_pd(d0, d0);
            d1 = _mm512_mul_pd(d1, d1);
        }
        a0 = _mm512_add_pd(a0, d0);
        a1 = _mm512_add_pd(a1, d1);
    }
    double l0[8], l1[8];
    _mm512_storeu_pd(l0, a0);
    _mm512_storeu_pd(l1, a1);
    for (int64_t j = n8; j < cols; j++) {
        double d0 = (double)x0[j], d1 = (double)x1[j];
        if (sq) { d0 -= mu0; d1 -= mu1; d0 *= d0; d1 *= d1; }
        l0[0] += d0;
        l1[0] += d1;
    }
    double t0 = 0.0, t1 = 0.0;
    for (int i = 0; i < 8; i++) { t0 += l0[i]; t1 += l1[i]; }
    *s0 = t0;
    *s1 = t1;
}

/* ln_stats of rows x0 and x1 (mean[0..1], rstd[0..1]), the same bits. */
FL_CPU_AVX512 static void ln_stats2_512(const float *x0, const float *x1, int64_t cols, float eps, float *mean,
                                        float *rstd) {
    double s0, s1, v0, v1;
    ln_sum2_512(x0, x1, cols, false, 0.0, 0.0, &s0, &s1);
    const double mu0 = s0 / (double)cols, mu1 = s1 / (double)cols;
    ln_sum2_512(x0, x1, cols, true, mu0, mu1, &v0, &v1);
    mean[0] = (float)mu0;
    mean[1] = (float)mu1;
    rstd[0] = (float)(1.0 / sqrt(v0 / (double)cols + (double)eps));
    rstd[1] = (float)(1.0 / sqrt(v1 / (double)cols + (double)eps));
}
FL_CPU_AVX512 static void ln_apply512(const float *xr, const float *w, const float *b, float *yr, float m, float rs,
                                      int64_t cols) {
    ln_apply(xr, w, b, yr, m, rs, cols);
}
#endif

/* Rows r and r + 1 of x into y0 and y1 (ln_row's bits): two at a time with AVX-512 where wide, else one by one. */
static inline void ln_rows2(const float *x0, const float *x1, const float *w, const float *b, float *y0, float *y1,
                            float *mean, float *rstd, int64_t cols, float eps, bool wide) {
#ifdef __x86_64__
    if (wide) {
        ln_stats2_512(x0, x1, cols, eps, mean, rstd);
        ln_apply512(x0, w, b, y0, mean[0], rstd[0], cols);
        ln_apply512(x1, w, b, y1, mean[1], rstd[1], cols);
        return;
    }
#endif
    ln_row(x0, w, b, y0, mean, rstd, cols, eps);
    ln_row(x1, w, b, y1, mean + 1, rstd + 1, cols, eps);
}

/* Rows 2·pi and (when there) 2·pi + 1 of x [rows, cols] into y0 and the row after it: the forward's task (an odd
 * count's last task is one row). Returns the task's row count. */
static inline int64_t ln_task(const float *x, const float *w, const float *b, float *y0, float *mean, float *rstd,
                              int64_t rows, int64_t cols, float eps, bool wide, int64_t pi) {
    const int64_t r = 2 * pi, nr = rows - r < 2 ? rows - r : 2;
    if (r + 3 < rows) fl_cpu_prefetch_row(x + (r + 2) * cols, 2 * cols);
    if (nr == 2) ln_rows2(x + r * cols, x + (r + 1) * cols, w, b, y0, y0 + cols, mean + r, rstd + r, cols, eps, wide);
    else ln_row(x + r * cols, w, b, y0, mean + r, rstd + r, cols, eps);
    return nr;
}

void fl_cpu_layernorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                          int64_t rows, int64_t cols, float eps) {
    const bool wide = fl_cpu_avx512();
    FL_PAR_FOR(rows > 1 && rows * cols > FL_NN_PAR_MIN, schedule(static),
    for (int64_t pi = 0; pi < (rows + 1) / 2; pi++)
        ln_task(x, w, b, y + 2 * pi * cols, mean, rstd, rows, cols, eps, wide, pi););
}

/* fl_cpu_layernorm_fwd of x + r (their fp32 sums, the add's rounding) with the sum never in memory: each task's two
 * rows summed into the thread's part of `scratch` (2·cols floats a thread, in L1), then ln_task on them (each row's
 * bits do not depend on the row it is paired with: ln_rows2 gives ln_row's). */
void fl_cpu_add_layernorm_fwd(const float *x, const float *r, const float *w, const float *b, float *y, float *mean,
                              float *rstd, int64_t rows, int64_t cols, float eps, float *scratch) {
    const bool wide = fl_cpu_avx512();
    FL_PARALLEL(rows > 1 && rows * cols > FL_NN_PAR_MIN,,
    {
        float *s = scratch + (size_t)omp_get_thread_num() * (size_t)(2 * cols);
        FL_PRAGMA(omp for schedule(static))
        for (int64_t pi = 0; pi < (rows + 1) / 2; pi++) {
            const int64_t r0 = 2 * pi, n = (rows - r0 < 2 ? rows - r0 : 2) * cols;
            const float *xa = x + r0 * cols, *ra = r + r0 * cols;
            FL_PRAGMA(omp simd)
            for (int64_t j = 0; j < n; j++) s[j] = xa[j] + ra[j];
            /* ln_task on the pair as rows 0 and 1 of s, its statistics at r0 */
            if (n == 2 * cols) ln_rows2(s, s + cols, w, b, y + r0 * cols, y + (r0 + 1) * cols, mean + r0, rstd + r0, cols, eps, wide);
            else ln_row(s, w, b, y + r0 * cols, mean + r0, rstd + r0, cols, eps);
        }
    });
}

/* ln_task's rows of y from the mean and rstd it stored (its ln_apply, the same bits): the second pass of
 * current scaling. */
static inline int64_t ln_apply_task(const float *x, const float *w, const float *b, float *y0, const float *mean,
                                    const float *rstd, int64_t rows, int64_t cols, bool wide, int64_t pi) {
    const int64_t r = 2 * pi, nr = rows - r < 2 ? rows - r : 2;
    if (r + 3 < rows) fl_cpu_prefetch_row(x + (r + 2) * cols, 2 * cols);
    for (int64_t k = 0; k < nr; k++) {
#ifdef __x86_64__
        if (wide) { ln_apply512(x + (r + k) * cols, w, b, y0 + k * cols, mean[r + k], rstd[r + k], cols); continue; }
#endif
        ln_apply(x + (r + k) * cols, w, b, y0 + k * cols, mean[r + k], rstd[r + k], cols);
    }
    return nr;
}

/* max(lo, the amax of ln_task pi's rows of y) (mean and rstd stored): current scaling's first pass (fl_cpu_amax_made).
 * Every row is made, since the cast's pass needs each row's mean and rstd. */
typedef struct { const float *x, *w, *b; float *mean, *rstd; int64_t rows, cols; float eps; bool wide; } ln_src;
static float ln_task_amax(const void *ctx, int64_t pi, float *yr, float lo) {
    const ln_src *l = ctx;
    const int64_t n = ln_task(l->x, l->w, l->b, yr, l->mean, l->rstd, l->rows, l->cols, l->eps, l->wide, pi) * l->cols;
    const float a = fl_amax_f32(yr, (size_t)n);
    return a > lo ? a : lo;
}

/* fl_cpu_layernorm_fwd with y cast per tensor to fmt as it is made (fl_quantize_f32 two rows at a time from a
 * scratch that stays in cache): q gets y's codes, *st their statistics; y is never in memory. scale NULL: current
 * scaling, y's amax first (ln_task_amax's rows, which store mean and rstd), then the cast's pass applies them. */
fl_status fl_cpu_layernorm_quantize(const float *x, const float *w, const float *b, uint8_t *q, float *mean, float *rstd,
                                    int64_t rows, int64_t cols, float eps, fl_dtype fmt, const float *scale, int margin,
                                    bool pow2, fl_overflow p, fl_cast_stats *st, float *used) {
    fl_cast_stats acc = { 0, 0, 0, 0 };
    int nerr = 0, noom = 0;
    const bool wide = fl_cpu_avx512(), current = !scale;
    float sc;
    if (current) {
        const ln_src l = { x, w, b, mean, rstd, rows, cols, eps, wide };
        float amax;
        FL_TRY(fl_cpu_amax_made((rows + 1) / 2, 2 * cols, rows > 1 && rows * cols > FL_NN_PAR_MIN, ln_task_amax, &l,
                                &amax));
        sc = fl_amax_to_scale_current(amax, (float)fl_format(fmt)->max, margin, pow2);
    } else {
        sc = *scale;
    }
    *used = sc;
    FL_PARALLEL(rows > 1 && rows * cols > FL_NN_PAR_MIN,,
    {
        fl_cast_stats mine = { 0, 0, 0, 0 };
        float *yr = malloc((size_t)(cols > 0 ? 2 * cols : 1) * sizeof(float));
        if (!yr) {
            FL_PRAGMA(omp atomic)
            noom++;
        }
        FL_PRAGMA(omp for schedule(static))
        for (int64_t pi = 0; pi < (rows + 1) / 2; pi++) {
            if (!yr) continue;
            const int64_t nr = current ? ln_apply_task(x, w, b, yr, mean, rstd, rows, cols, wide, pi)
                                       : ln_task(x, w, b, yr, mean, rstd, rows, cols, eps, wide, pi);
            fl_cast_stats s;
            if (fl_quantize_f32(yr, q + 2 * pi * cols, (size_t)(nr * cols), fmt, sc, p, &s) != FL_OK) {
                FL_PRAGMA(omp atomic)
                nerr++;
                continue;
            }
            fl_cast_stats_merge(&mine, &s);
        }
        free(yr);
        FL_PRAGMA(omp critical)
        fl_cast_stats_merge(&acc, &mine);
    });
    if (noom) return FL_ERR(FL_ENOMEM, "layernorm_quantize: out of memory for two rows of %lld", (long long)cols);
    if (nerr) return FL_ERR(FL_EINTR, "interrupted");
    *st = acc;
    return FL_OK;
}

/* LayerNorm backward's second and third passes over one row, its sums a = Σ(dy·w)/n and c = Σ(dy·w·x̂)/n made:
 * dx (unless NULL; with add, added to what dr holds: one fp32 add, the build's ISO C mode contracting no product
 * into it), and the row's terms of dw and db added to the chunk's column sums pw, pb (unless NULL; the row still in
 * cache). Elementwise or per column, never across lanes, so the AVX-512 copy gives the AVX2 copy's bits; the first
 * pass's row sums stay in the build's AVX2 code (their lane count sets their rounding). */
static inline __attribute__((always_inline)) void ln_bwd_rest(const float *xr, const float *gr, const float *w, float m,
                                                              float rs, float a, float c, float *dr, double *pw,
                                                              double *pb, int64_t cols, const bool add) {
    if (dr && w && add) {
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) {
            const float d = rs * (gr[j] * w[j] - a - (xr[j] - m) * rs * c);
            dr[j] = dr[j] + d;
        }
    } else if (dr && add) {
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) {
            const float d = rs * (gr[j] - a - (xr[j] - m) * rs * c);
            dr[j] = dr[j] + d;
        }
    } else if (dr && w) {
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
                           float *dr, double *pw, double *pb, int64_t cols, bool add) {
    if (add) ln_bwd_rest(xr, gr, w, m, rs, a, c, dr, pw, pb, cols, true);
    else ln_bwd_rest(xr, gr, w, m, rs, a, c, dr, pw, pb, cols, false);
}
FL_CPU_AVX512 static void ln_bwd_rest512(const float *xr, const float *gr, const float *w, float m, float rs, float a,
                                         float c, float *dr, double *pw, double *pb, int64_t cols, bool add) {
    if (add) ln_bwd_rest(xr, gr, w, m, rs, a, c, dr, pw, pb, cols, true);
    else ln_bwd_rest(xr, gr, w, m, rs, a, c, dr, pw, pb, cols, false);
}

/* With x̂ = (x−mean)·rstd and g = dy·w: dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) (with add: dx += that); dw +=
 * Σ_rows dy·x̂, db += Σ_rows dy. One pass over x and dy: a row's dx, then its terms of dw and db added to its
 * chunk's column sums (LN_SUM_ROWS rows a chunk, in double), which are combined in chunk order at the end; threads
 * take whole chunks, so every result is independent of the thread count. Nothing is written before the one
 * allocation has succeeded. */
static fl_status ln_bwd_rows(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                             float *dx, float *dw, float *db, int64_t rows, int64_t cols, bool add) {
    const bool wide = fl_cpu_avx512();
    const int par = rows > 1 && rows * cols > FL_NN_PAR_MIN;
    const bool sums = dw || db;
    const int64_t chunks = (rows + LN_SUM_ROWS - 1) / LN_SUM_ROWS;
    double *ps = sums ? calloc((size_t)(chunks > 0 ? chunks : 1) * 2 * (size_t)(cols > 0 ? cols : 1), sizeof(double)) : NULL;
    if (sums && !ps)
        return FL_ERR(FL_ENOMEM, "layer_norm backward: out of memory for %lld column sums", (long long)(2 * chunks * cols));
    FL_PAR_FOR(par && chunks > 1, schedule(static),
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
                    FL_PRAGMA(omp simd reduction(+:sg, sgx))
                    for (int64_t j = 0; j < cols; j++) {
                        float g = gr[j] * w[j];
                        sg += g; sgx += g * (xr[j] - m) * rs;
                    }
                } else {
                    FL_PRAGMA(omp simd reduction(+:sg, sgx))
                    for (int64_t j = 0; j < cols; j++) { sg += gr[j]; sgx += gr[j] * (xr[j] - m) * rs; }
                }
                a = sg / (float)cols, c = sgx / (float)cols;
            }
            float *dr = dx ? dx + r * cols : NULL;
            if (wide) ln_bwd_rest512(xr, gr, w, m, rs, a, c, dr, pw, pb, cols, add);
            else ln_bwd_rest256(xr, gr, w, m, rs, a, c, dr, pw, pb, cols, add);
        }
    });
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

fl_status fl_cpu_layernorm_bwd(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                               float *dx, float *dw, float *db, int64_t rows, int64_t cols) {
    return ln_bwd_rows(x, w, mean, rstd, dy, dx, dw, db, rows, cols, false);
}

fl_status fl_cpu_layernorm_bwd_add(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                                   float *dx, float *dw, float *db, int64_t rows, int64_t cols) {
    return ln_bwd_rows(x, w, mean, rstd, dy, dx, dw, db, rows, cols, true);
}

fl_status fl_cpu_embedding_fwd(const float *idx, int64_t n, const float *weight, int64_t vocab, int64_t dim, float *y) {
    for (int64_t i = 0; i < n; i++) {
        double t = idx[i];
        if (t >= 0.0 && t < (double)vocab && t != floor(t))   /* (1.5 was said to be out of range) */
            return FL_ERR(FL_EINVAL, "embedding: index %g at position %lld is not a whole number (token ids are "
                          "integers)", t, (long long)i);
        if (!(t >= 0.0 && t < (double)vocab))
            return FL_ERR(FL_EINVAL, "embedding: index %g at position %lld is out of range [0, %lld) (vocab size %lld)",
                          t, (long long)i, (long long)vocab, (long long)vocab);
    }
    FL_PAR_FOR(n > 1 && n * dim > FL_NN_PAR_MIN, schedule(static),
    for (int64_t i = 0; i < n; i++) {
        const float *src = weight + (int64_t)idx[i] * dim;
        float *dst = y + i * dim;
        FL_PRAGMA(omp simd)
        for (int64_t j = 0; j < dim; j++) dst[j] = src[j];
    });
    return FL_OK;
}

/* Repeated indices add into the same row, so threads split columns (never rows) and each visits the
 * positions in order: deterministic sums. Indices were validated by the forward. */
void fl_cpu_embedding_bwd(const float *idx, int64_t n, const float *dy, int64_t dim, float *dweight) {
    const int64_t nblk = (dim + COL_BLOCK - 1) / COL_BLOCK;
    FL_PAR_FOR(nblk > 1 && n * dim > FL_NN_PAR_MIN, schedule(static),
    for (int64_t bk = 0; bk < nblk; bk++) {
        const int64_t j0 = bk * COL_BLOCK, nj = dim - j0 < COL_BLOCK ? dim - j0 : COL_BLOCK;
        for (int64_t i = 0; i < n; i++) {
            float *dst = dweight + (int64_t)idx[i] * dim + j0;
            const float *src = dy + i * dim + j0;
            FL_PRAGMA(omp simd)
            for (int64_t j = 0; j < nj; j++) dst[j] += src[j];
        }
    });
}

/* RMSNorm's forward with nothing to record (device.h's rms_norm_fwd): per row, ms = mean(x·x) as reduce's mean of the
 * squares' tensor gives it ((0 + Σ) / cols in double, rounded once), r = 1/√(ms + (float)eps) in rsqrt's two
 * roundings, then y = (x·r)·w, each product rounded: the bits of lua/fp8/nn/functional.lua's composite, which made
 * five passes over x's size (x·x, its mean, x·r, ·w, and the tensors between): 1.8× torch's. Rows split among
 * threads, each row's result its own. */
void fl_cpu_rms_norm_fwd(const float *x, const float *w, float *y, int64_t rows, int64_t cols, double eps) {
    const float e = (float)eps;
    FL_PAR_FOR(rows > 1 && rows * cols > FL_NN_PAR_MIN, schedule(static),
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        const float ms = (float)((0.0 + fl_cpu_sum_sq_f64(xr, cols)) / (double)cols);
        const float rs = 1.0f / sqrtf(ms + e);
        if (w) {
            FL_PRAGMA(omp simd)
            for (int64_t j = 0; j < cols; j++) yr[j] = (xr[j] * rs) * w[j];
        } else {
            FL_PRAGMA(omp simd)
            for (int64_t j = 0; j < cols; j++) yr[j] = xr[j] * rs;
        }
    });
}
