/* cpu_nn_chnorm.c — GroupNorm (and so InstanceNorm) and BatchNorm's training pass over a contiguous fp32 x viewed as
 * [N, C, P] (P: the positions), forward and backward, each a few passes where the composite of elementwise ops
 * made about ten. Statistics in double, two passes (the mean, then Σ(x − mean)²: no cancellation); a group's or a
 * channel's sums are one thread's in a fixed order, so every result is independent of the thread count. */
#include "cpu_nn_internal.h"
#include "cpu_internal.h"
#include "par.h"

#include <stdlib.h>

/* Σx and Σ(x − mu)² of a run of n floats, in double. */
static inline double run_sum(const float *x, int64_t n) {
    double s = 0.0;
    #pragma omp simd reduction(+:s)
    for (int64_t j = 0; j < n; j++) s += (double)x[j];
    return s;
}
static inline double run_sq(const float *x, int64_t n, double mu) {
    double s = 0.0;
    #pragma omp simd reduction(+:s)
    for (int64_t j = 0; j < n; j++) { const double d = (double)x[j] - mu; s += d * d; }
    return s;
}
/* Σdy and Σdy·(x − m) of a run, in double. */
static inline void run_dsums(const float *x, const float *dy, int64_t n, float m, double *sdy, double *sdyx) {
    double a = 0.0, b = 0.0;
    #pragma omp simd reduction(+:a, b)
    for (int64_t j = 0; j < n; j++) { a += (double)dy[j]; b += (double)dy[j] * (double)(x[j] - m); }
    *sdy += a;
    *sdyx += b;
}
/* y = (x − m)·sc + sh over a run. */
static inline void run_apply(const float *x, float *y, int64_t n, float m, float sc, float sh) {
    #pragma omp simd
    for (int64_t j = 0; j < n; j++) y[j] = (x[j] - m) * sc + sh;
}
/* dx = a·dy + bx·(x − m) + c0 over a run. */
static inline void run_dx(const float *x, const float *dy, float *dx, int64_t n, float m, float a, float bx, float c0) {
    #pragma omp simd
    for (int64_t j = 0; j < n; j++) dx[j] = a * dy[j] + bx * (x[j] - m) + c0;
}

/* rstd[i] and (var not NULL) var[i] from q = Σ(x − mean)² over n values: the biased variance q/n. */
static void stats_of(double q, int64_t n, float eps, float *rstd, float *var, int64_t i) {
    const double v = q / (double)n;
    rstd[i] = (float)(1.0 / sqrt(v + (double)eps));
    if (var) var[i] = (float)v;
}

/* BatchNorm of [N, C] (P = 1): columns summed along the rows, in double (a per-channel loop would stride by C). */
static fl_status bn_cols_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                             float *var, int64_t N, int64_t C, float eps) {
    double *acc = calloc((size_t)C, sizeof(double));
    if (!acc) return FL_ERR(FL_ENOMEM, "batch_norm: out of memory for %lld sums", (long long)C);
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) acc[c] += (double)xr[c];
    }
    for (int64_t c = 0; c < C; c++) { acc[c] /= (double)N; mean[c] = (float)acc[c]; }
    double *sq = calloc((size_t)C, sizeof(double));
    if (!sq) { free(acc); return FL_ERR(FL_ENOMEM, "batch_norm: out of memory for %lld sums", (long long)C); }
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        #pragma omp simd
        for (int64_t c = 0; c < C; c++) { const double d = (double)xr[c] - acc[c]; sq[c] += d * d; }
    }
    for (int64_t c = 0; c < C; c++) stats_of(sq[c], N, eps, rstd, var, c);
    free(acc);
    free(sq);
    FL_PAR_FOR(N > 1 && N * C > FL_NN_PAR_MIN, schedule(static),
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            y[n * C + c] = (x[n * C + c] - mean[c]) * (w ? rstd[c] * w[c] : rstd[c]) + (b ? b[c] : 0.0f););
    return FL_OK;
}

fl_status fl_cpu_chnorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                            float *var, int64_t N, int64_t C, int64_t P, int64_t G, float eps) {
    if (G > 0) {   /* GroupNorm: row r = (n, g) is the contiguous run of its C/G channels */
        const int64_t Cg = C / G, M = Cg * P, rows = N * G;
        FL_PAR_FOR(rows > 1 && rows * M > FL_NN_PAR_MIN, schedule(static),
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * M;
            const double mu = run_sum(xr, M) / (double)M;
            mean[r] = (float)mu;
            stats_of(run_sq(xr, M, mu), M, eps, rstd, var, r);
            const float m = mean[r], rs = rstd[r];
            for (int64_t k = 0; k < Cg; k++) {
                const int64_t c = (r % G) * Cg + k;
                run_apply(xr + k * P, y + r * M + k * P, P, m, w ? rs * w[c] : rs, b ? b[c] : 0.0f);
            }
        });
        return FL_OK;
    }
    /* BatchNorm: channel c is N runs of P, c's statistics over all of them */
    if (P == 1) return bn_cols_fwd(x, w, b, y, mean, rstd, var, N, C, eps);
    const int64_t M = N * P;
    FL_PAR_FOR(C > 1 && N * C * P > FL_NN_PAR_MIN, schedule(static),
    for (int64_t c = 0; c < C; c++) {
        double s = 0.0, q = 0.0;
        for (int64_t n = 0; n < N; n++) s += run_sum(x + (n * C + c) * P, P);
        const double mu = s / (double)M;
        for (int64_t n = 0; n < N; n++) q += run_sq(x + (n * C + c) * P, P, mu);
        mean[c] = (float)mu;
        stats_of(q, M, eps, rstd, var, c);
        const float m = mean[c], sc = w ? rstd[c] * w[c] : rstd[c], sh = b ? b[c] : 0.0f;
        for (int64_t n = 0; n < N; n++) run_apply(x + (n * C + c) * P, y + (n * C + c) * P, P, m, sc, sh);
    });
    return FL_OK;
}

/* With x̂ = (x − m)·rs, g = dy·w: dx = rs·(g − Σg/M − x̂·Σg·x̂/M) over the statistics' M values; dw += Σ dy·x̂,
 * db += Σ dy per channel. GroupNorm's per-channel terms are made per sample, [N, C] of them, and summed over the
 * samples in order at the end. */
fl_status fl_cpu_chnorm_bwd(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                            float *dx, float *dw, float *db, int64_t N, int64_t C, int64_t P, int64_t G) {
    if (G > 0) {
        const int64_t Cg = C / G, M = Cg * P, rows = N * G;
        double *part = calloc((size_t)(N * C > 0 ? N * C : 1) * 2, sizeof(double));
        if (!part) return FL_ERR(FL_ENOMEM, "group_norm backward: out of memory for %lld sums", (long long)(2 * N * C));
        FL_PAR_FOR(rows > 1 && rows * M > FL_NN_PAR_MIN, schedule(static),
        for (int64_t r = 0; r < rows; r++) {
            const int64_t n = r / G, g = r % G;
            const float m = mean[r], rs = rstd[r];
            double sg = 0.0, sgx = 0.0;
            for (int64_t k = 0; k < Cg; k++) {
                const int64_t c = g * Cg + k, o = r * M + k * P;
                double sdy = 0.0, sdyx = 0.0;
                run_dsums(x + o, dy + o, P, m, &sdy, &sdyx);
                part[2 * (n * C + c)] = sdyx * rs;
                part[2 * (n * C + c) + 1] = sdy;
                const double wc = w ? (double)w[c] : 1.0;
                sg += wc * sdy;
                sgx += wc * sdyx;
            }
            if (!dx) continue;
            /* Σg·x̂ = rs·sgx */
            const float c0 = (float)(-(double)rs * sg / (double)M);
            const float bx = (float)(-(double)rs * rs * rs * sgx / (double)M);
            for (int64_t k = 0; k < Cg; k++) {
                const int64_t c = g * Cg + k, o = r * M + k * P;
                run_dx(x + o, dy + o, dx + o, P, m, w ? rs * w[c] : rs, bx, c0);
            }
        });
        for (int64_t c = 0; c < C; c++) {
            double tw = 0.0, tb = 0.0;
            for (int64_t n = 0; n < N; n++) { tw += part[2 * (n * C + c)]; tb += part[2 * (n * C + c) + 1]; }
            if (dw) dw[c] += (float)tw;
            if (db) db[c] += (float)tb;
        }
        free(part);
        return FL_OK;
    }
    /* BatchNorm: each (sample, channel) run's sums first, in memory order (a channel's N runs lie C·P apart, a
     * stride that maps them onto the same cache sets), then combined per channel over the samples in order; for
     * [N, C] (P = 1) the runs are single values, summed as columns along the rows (the same order) */
    const int64_t M = N * P, rows = N * C, np = P == 1 ? C : rows;
    double *part = calloc((size_t)(np > 0 ? np : 1) * 2, sizeof(double));
    float *co = malloc((size_t)(C > 0 ? C : 1) * 3 * sizeof(float));
    if (!part || !co) {
        free(part);
        free(co);
        return FL_ERR(FL_ENOMEM, "batch_norm backward: out of memory for %lld sums", (long long)(2 * np));
    }
    float *ca = co, *cb = co + C, *cc = co + 2 * C;   /* dx = ca·dy + cb·(x − mean) + cc, per channel */
    if (P == 1) {
        double *sdy = part, *sdyx = part + C;
        for (int64_t n = 0; n < N; n++) {
            const float *xr = x + n * C, *gr = dy + n * C;
            #pragma omp simd
            for (int64_t c = 0; c < C; c++) {
                sdy[c] += (double)gr[c];
                sdyx[c] += (double)gr[c] * (double)(xr[c] - mean[c]);
            }
        }
    } else {
        FL_PAR_FOR(rows > 1 && rows * P > FL_NN_PAR_MIN, schedule(static),
        for (int64_t r = 0; r < rows; r++) {
            double sdy = 0.0, sdyx = 0.0;
            run_dsums(x + r * P, dy + r * P, P, mean[r % C], &sdy, &sdyx);
            part[2 * r] = sdy;
            part[2 * r + 1] = sdyx;
        });
    }
    for (int64_t c = 0; c < C; c++) {
        double sdy = 0.0, sdyx = 0.0;
        if (P == 1) {
            sdy = part[c];
            sdyx = part[C + c];
        } else {
            for (int64_t n = 0; n < N; n++) { sdy += part[2 * (n * C + c)]; sdyx += part[2 * (n * C + c) + 1]; }
        }
        const float rs = rstd[c];
        if (dw) dw[c] += (float)(sdyx * rs);
        if (db) db[c] += (float)sdy;
        const double a = w ? (double)rs * w[c] : (double)rs;
        ca[c] = (float)a;
        cb[c] = (float)(-a * rs * rs * sdyx / (double)M);
        cc[c] = (float)(-a * sdy / (double)M);
    }
    if (dx && P == 1) {
        FL_PAR_FOR(N > 1 && rows > FL_NN_PAR_MIN, schedule(static),
        for (int64_t n = 0; n < N; n++) {
            const float *xr = x + n * C, *gr = dy + n * C;
            float *dr = dx + n * C;
            FL_PRAGMA(omp simd)
            for (int64_t c = 0; c < C; c++) dr[c] = ca[c] * gr[c] + cb[c] * (xr[c] - mean[c]) + cc[c];
        });
    } else if (dx) {
        FL_PAR_FOR(rows > 1 && rows * P > FL_NN_PAR_MIN, schedule(static),
        for (int64_t r = 0; r < rows; r++) {
            const int64_t c = r % C;
            run_dx(x + r * P, dy + r * P, dx + r * P, P, mean[c], ca[c], cb[c], cc[c]);
        });
    }
    free(part);
    free(co);
    return FL_OK;
}

/* BatchNorm's eval pass: the composite's four elementwise ops ((x − mean) / den, · w, + b) in one, each operation
 * rounded as they round it (the build does not contract the multiply and the add). A missing weight is a multiply
 * by 1 and a missing bias an add of −0: both give every x back bit for bit (−0 + +0 would be +0), so one loop serves
 * the four cases. Channels of positions (P > 1) by rows; [N, C] (P = 1) along the channels. */
void fl_cpu_chnorm_eval(const float *x, const float *mean, const float *den, const float *w, const float *b, float *y,
                        int64_t N, int64_t C, int64_t P) {
    if (P == 1) {
        FL_PAR_FOR(N * C > FL_NN_PAR_MIN, schedule(static),
        for (int64_t n = 0; n < N; n++) {
            const float *xr = x + n * C;
            float *yr = y + n * C;
            FL_PRAGMA(omp simd)
            for (int64_t c = 0; c < C; c++)
                yr[c] = ((xr[c] - mean[c]) / den[c]) * (w ? w[c] : 1.0f) + (b ? b[c] : -0.0f);
        });
        return;
    }
    FL_PAR_FOR(N * C * P > FL_NN_PAR_MIN, schedule(static),
    for (int64_t r = 0; r < N * C; r++) {
        const int64_t c = r % C;
        const float m = mean[c], d = den[c], wc = w ? w[c] : 1.0f, bc = b ? b[c] : -0.0f;
        const float *xr = x + r * P;
        float *yr = y + r * P;
        FL_PRAGMA(omp simd)
        for (int64_t p = 0; p < P; p++) yr[p] = ((xr[p] - m) / d) * wc + bc;
    });
}
