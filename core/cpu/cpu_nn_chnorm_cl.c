/* cpu_nn_chnorm_cl.c — GroupNorm and BatchNorm (training forward and backward, eval) over a channels_last fp32 x:
 * its memory [N, P, C], C contiguous values per position (device.h's chnorm_fwd_cl, chnorm_bwd_cl, chnorm_eval_cl;
 * stop 104: no copy to [N, C, P] and back). Every sum is a per-channel vector of doubles added a position (a row of
 * C values) at a time, so the loops run along C; a group's sums are its channels' sums added in channel order.
 * Statistics in double, two passes, as cpu_nn_chnorm.c's; the applied formulas are its own, operation by operation
 * (the same float expressions), so y and dx differ from the NCHW kernels' only where a statistic, summed in another
 * order, rounds differently. BatchNorm's sums run over fixed blocks of rows (CL_ROWS) added in block order, and
 * GroupNorm's per sample: every result is independent of the thread count. */
#include "cpu_nn_internal.h"
#include "cpu_internal.h"
#include "par.h"

#include <stdlib.h>

#define CL_ROWS 256   /* rows (positions) per partial sum of BatchNorm's statistics */

/* acc[c] += x[r·C + c] over the rows r of [r0, r1) */
static inline void col_sum(double *acc, const float *x, int64_t r0, int64_t r1, int64_t C) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C;
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) acc[c] += (double)xr[c];
    }
}
/* acc[c] += (x − mu[c])² over the rows of [r0, r1) */
static inline void col_sq(double *acc, const float *x, const double *mu, int64_t r0, int64_t r1, int64_t C) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C;
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) { const double d = (double)xr[c] - mu[c]; acc[c] += d * d; }
    }
}
/* sdy[c] += dy, sdyx[c] += dy·(x − m[c]) (the difference in fp32, as cpu_nn_chnorm.c's) over the rows of [r0, r1) */
static inline void col_dsums(double *sdy, double *sdyx, const float *x, const float *dy, const float *m, int64_t r0,
                             int64_t r1, int64_t C) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C, *gr = dy + r * C;
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) {
            sdy[c] += (double)gr[c];
            sdyx[c] += (double)gr[c] * (double)(xr[c] - m[c]);
        }
    }
}
/* y = (x − m[c])·sc[c] + sh[c] over the rows of [r0, r1) */
static inline void rows_apply(const float *x, float *y, const float *m, const float *sc, const float *sh, int64_t r0,
                              int64_t r1, int64_t C) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) yr[c] = (xr[c] - m[c]) * sc[c] + sh[c];
    }
}
/* dx = a[c]·dy + bx[c]·(x − m[c]) + c0[c] over the rows of [r0, r1) */
static inline void rows_dx(const float *x, const float *dy, float *dx, const float *m, const float *a, const float *bx,
                           const float *c0, int64_t r0, int64_t r1, int64_t C) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * C, *gr = dy + r * C;
        float *dr = dx + r * C;
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) dr[c] = a[c] * gr[c] + bx[c] * (xr[c] - m[c]) + c0[c];
    }
}

static void stats_of(double q, int64_t n, float eps, float *rstd, float *var, int64_t i) {
    const double v = q / (double)n;
    rstd[i] = (float)(1.0 / sqrt(v + (double)eps));
    if (var) var[i] = (float)v;
}

/* Σ over the rows of x [R, C] per channel into out[C]: blocks of CL_ROWS rows summed (in parallel) then added in
 * block order; mu NULL: Σx, else Σ(x − mu)². part: nb·C doubles of scratch. */
static void bn_colsums(double *out, double *part, const float *x, const double *mu, int64_t R, int64_t C) {
    const int64_t nb = (R + CL_ROWS - 1) / CL_ROWS;
    FL_PAR_FOR(nb > 1 && R * C > FL_NN_PAR_MIN, schedule(static),
    for (int64_t k = 0; k < nb; k++) {
        double *acc = part + k * C;
        for (int64_t c = 0; c < C; c++) acc[c] = 0.0;
        const int64_t r0 = k * CL_ROWS, r1 = r0 + CL_ROWS < R ? r0 + CL_ROWS : R;
        if (mu) col_sq(acc, x, mu, r0, r1, C);
        else col_sum(acc, x, r0, r1, C);
    });
    for (int64_t c = 0; c < C; c++) out[c] = 0.0;
    for (int64_t k = 0; k < nb; k++)
        for (int64_t c = 0; c < C; c++) out[c] += part[k * C + c];
}

/* rows [0, R) cut into the threads' chunks: a parallel loop over chunks of CL_ROWS rows */
#define CL_CHUNKS(R) (((R) + CL_ROWS - 1) / CL_ROWS)

fl_status fl_cpu_dev_chnorm_fwd_cl(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                                   float *var, int64_t N, int64_t C, int64_t P, int64_t G, float eps) {
    const int64_t R = N * P;
    if (G == 0) {
        const int64_t nb = CL_CHUNKS(R);
        double *sc = malloc((size_t)(C > 0 ? C : 1) * (size_t)(nb + 2) * sizeof(double));
        float *co = malloc((size_t)(C > 0 ? C : 1) * 3 * sizeof(float));
        if (!sc || !co) {
            free(sc), free(co);
            return FL_ERR(FL_ENOMEM, "batch_norm: out of memory for %lld sums", (long long)((nb + 2) * C));
        }
        double *mu = sc, *q = sc + C, *part = sc + 2 * C;
        bn_colsums(mu, part, x, NULL, R, C);
        for (int64_t c = 0; c < C; c++) { mu[c] /= (double)R; mean[c] = (float)mu[c]; }
        bn_colsums(q, part, x, mu, R, C);
        float *m = co, *s = co + C, *h = co + 2 * C;
        for (int64_t c = 0; c < C; c++) {
            stats_of(q[c], R, eps, rstd, var, c);
            m[c] = mean[c], s[c] = w ? rstd[c] * w[c] : rstd[c], h[c] = b ? b[c] : 0.0f;
        }
        FL_PAR_FOR(nb > 1 && R * C > FL_NN_PAR_MIN, schedule(static),
        for (int64_t k = 0; k < nb; k++)
            rows_apply(x, y, m, s, h, k * CL_ROWS, k * CL_ROWS + CL_ROWS < R ? k * CL_ROWS + CL_ROWS : R, C););
        free(sc);
        free(co);
        return FL_OK;
    }
    /* GroupNorm: sample n's rows [n·P, (n+1)·P); group g its channels [g·Cg, (g+1)·Cg) */
    const int64_t Cg = C / G, M = Cg * P;
    int bad = 0;
    FL_PAR_FOR(N > 1 && R * C > FL_NN_PAR_MIN, schedule(static),
    for (int64_t n = 0; n < N; n++) {
        double *acc = malloc((size_t)(C > 0 ? C : 1) * 2 * sizeof(double));
        float *co = malloc((size_t)(C > 0 ? C : 1) * 3 * sizeof(float));
        if (!acc || !co) {
            free(acc), free(co);
            FL_PRAGMA(omp atomic write)
            bad = 1;
            continue;
        }
        double *mu = acc + C;
        for (int64_t c = 0; c < C; c++) acc[c] = 0.0;
        col_sum(acc, x, n * P, (n + 1) * P, C);
        for (int64_t g = 0; g < G; g++) {
            double s = 0.0;
            for (int64_t k = 0; k < Cg; k++) s += acc[g * Cg + k];
            s /= (double)M;
            mean[n * G + g] = (float)s;
            for (int64_t k = 0; k < Cg; k++) mu[g * Cg + k] = s;
        }
        for (int64_t c = 0; c < C; c++) acc[c] = 0.0;
        col_sq(acc, x, mu, n * P, (n + 1) * P, C);
        float *m = co, *sc = co + C, *sh = co + 2 * C;
        for (int64_t g = 0; g < G; g++) {
            double q = 0.0;
            for (int64_t k = 0; k < Cg; k++) q += acc[g * Cg + k];
            stats_of(q, M, eps, rstd, var, n * G + g);
            const float mg = mean[n * G + g], rs = rstd[n * G + g];
            for (int64_t k = 0; k < Cg; k++) {
                const int64_t c = g * Cg + k;
                m[c] = mg, sc[c] = w ? rs * w[c] : rs, sh[c] = b ? b[c] : 0.0f;
            }
        }
        rows_apply(x, y, m, sc, sh, n * P, (n + 1) * P, C);
        free(acc);
        free(co);
    });
    if (bad) return FL_ERR(FL_ENOMEM, "group_norm: out of memory for %lld sums", (long long)(2 * C));
    return FL_OK;
}

/* cpu_nn_chnorm.c's backward formulas with the per-channel sums made along C: BatchNorm's over all rows (blocks of
 * CL_ROWS, in block order), GroupNorm's per sample (its channels' sums, then each group's in channel order). */
fl_status fl_cpu_dev_chnorm_bwd_cl(const float *x, const float *w, const float *mean, const float *rstd,
                                   const float *dy, float *dx, float *dw, float *db, int64_t N, int64_t C, int64_t P,
                                   int64_t G) {
    const int64_t R = N * P, C1 = C > 0 ? C : 1;
    if (G == 0) {
        const int64_t nb = CL_CHUNKS(R);
        double *part = malloc((size_t)C1 * (size_t)(2 * nb + 2) * sizeof(double));
        float *co = malloc((size_t)C1 * 3 * sizeof(float));
        if (!part || !co) {
            free(part), free(co);
            return FL_ERR(FL_ENOMEM, "batch_norm backward: out of memory for %lld sums", (long long)(2 * nb * C));
        }
        FL_PAR_FOR(nb > 1 && R * C > FL_NN_PAR_MIN, schedule(static),
        for (int64_t k = 0; k < nb; k++) {
            double *a = part + 2 * k * C, *bb = a + C;
            for (int64_t c = 0; c < C; c++) a[c] = 0.0, bb[c] = 0.0;
            col_dsums(a, bb, x, dy, mean, k * CL_ROWS, k * CL_ROWS + CL_ROWS < R ? k * CL_ROWS + CL_ROWS : R, C);
        });
        double *sdy = part + 2 * nb * C, *sdyx = sdy + C;
        for (int64_t c = 0; c < C; c++) sdy[c] = 0.0, sdyx[c] = 0.0;
        for (int64_t k = 0; k < nb; k++)
            for (int64_t c = 0; c < C; c++) sdy[c] += part[2 * k * C + c], sdyx[c] += part[2 * k * C + C + c];
        float *ca = co, *cb = co + C, *cc = co + 2 * C;
        for (int64_t c = 0; c < C; c++) {
            const float rs = rstd[c];
            if (dw) dw[c] += (float)(sdyx[c] * rs);
            if (db) db[c] += (float)sdy[c];
            const double a = w ? (double)rs * w[c] : (double)rs;
            ca[c] = (float)a;
            cb[c] = (float)(-a * rs * rs * sdyx[c] / (double)R);
            cc[c] = (float)(-a * sdy[c] / (double)R);
        }
        if (dx) {
            FL_PAR_FOR(nb > 1 && R * C > FL_NN_PAR_MIN, schedule(static),
            for (int64_t k = 0; k < nb; k++)
                rows_dx(x, dy, dx, mean, ca, cb, cc, k * CL_ROWS, k * CL_ROWS + CL_ROWS < R ? k * CL_ROWS + CL_ROWS : R, C););
        }
        free(part);
        free(co);
        return FL_OK;
    }
    const int64_t Cg = C / G, M = Cg * P;
    double *part = calloc((size_t)(N * C > 0 ? N * C : 1) * 2, sizeof(double));   /* per (n, c): dw's, db's terms */
    if (!part) return FL_ERR(FL_ENOMEM, "group_norm backward: out of memory for %lld sums", (long long)(2 * N * C));
    int bad = 0;
    FL_PAR_FOR(N > 1 && R * C > FL_NN_PAR_MIN, schedule(static),
    for (int64_t n = 0; n < N; n++) {
        double *acc = malloc((size_t)C1 * 2 * sizeof(double));
        float *co = malloc((size_t)C1 * 4 * sizeof(float));
        if (!acc || !co) {
            free(acc), free(co);
            FL_PRAGMA(omp atomic write)
            bad = 1;
            continue;
        }
        double *sdy = acc, *sdyx = acc + C;
        float *m = co, *a = co + C, *bx = co + 2 * C, *c0 = co + 3 * C;
        for (int64_t c = 0; c < C; c++) sdy[c] = 0.0, sdyx[c] = 0.0, m[c] = mean[n * G + c / Cg];
        col_dsums(sdy, sdyx, x, dy, m, n * P, (n + 1) * P, C);
        for (int64_t g = 0; g < G; g++) {
            const float rs = rstd[n * G + g];
            double sg = 0.0, sgx = 0.0;
            for (int64_t k = 0; k < Cg; k++) {
                const int64_t c = g * Cg + k;
                part[2 * (n * C + c)] = sdyx[c] * rs;
                part[2 * (n * C + c) + 1] = sdy[c];
                const double wc = w ? (double)w[c] : 1.0;
                sg += wc * sdy[c];
                sgx += wc * sdyx[c];
            }
            const float cz = (float)(-(double)rs * sg / (double)M);
            const float bz = (float)(-(double)rs * rs * rs * sgx / (double)M);
            for (int64_t k = 0; k < Cg; k++) {
                const int64_t c = g * Cg + k;
                a[c] = w ? rs * w[c] : rs, bx[c] = bz, c0[c] = cz;
            }
        }
        if (dx) rows_dx(x, dy, dx, m, a, bx, c0, n * P, (n + 1) * P, C);
        free(acc);
        free(co);
    });
    if (bad) { free(part); return FL_ERR(FL_ENOMEM, "group_norm backward: out of memory for %lld sums", (long long)(2 * C)); }
    for (int64_t c = 0; c < C; c++) {
        double tw = 0.0, tb = 0.0;
        for (int64_t n = 0; n < N; n++) { tw += part[2 * (n * C + c)]; tb += part[2 * (n * C + c) + 1]; }
        if (dw) dw[c] += (float)tw;
        if (db) db[c] += (float)tb;
    }
    free(part);
    return FL_OK;
}

/* BatchNorm's eval pass along the channels: cpu_nn_chnorm.c's expression, so the same bits as the NCHW kernel's */
fl_status fl_cpu_dev_chnorm_eval_cl(const float *x, const float *mean, const float *den, const float *w,
                                    const float *b, float *y, int64_t N, int64_t C, int64_t P) {
    const int64_t R = N * P;
    FL_PAR_FOR(R * C > FL_NN_PAR_MIN, schedule(static),
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        FL_PRAGMA(omp simd)
        for (int64_t c = 0; c < C; c++)
            yr[c] = ((xr[c] - mean[c]) / den[c]) * (w ? w[c] : 1.0f) + (b ? b[c] : -0.0f);
    });
    return FL_OK;
}
