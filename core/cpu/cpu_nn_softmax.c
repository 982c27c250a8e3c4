/* cpu_nn_softmax.c — softmax, log-softmax and cross-entropy over the last dim of [rows, cols]. Each row
 * is done by one thread with fixed-order (SIMD-lane) sums, so results do not depend on the thread count.
 * Stable: rows are shifted by their max; cross-entropy uses log-sum-exp in double. */
#include "cpu_nn_internal.h"
#include <stdlib.h>

/* Rows per chunk between interrupt polls in the status-returning kernels. */
#define CE_CHUNK 2048

static inline float row_max(const float *x, int64_t n) {
    float m = -INFINITY;
    #pragma omp simd reduction(max:m)
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* y[j] = exp(x[j] - m); returns Σ y (float lanes; cols ≤ ~10^5 keeps this well inside fp32). */
static inline float row_exp_sum(const float *x, float *y, int64_t n, float m) {
    float s = 0.0f;
    #pragma omp simd reduction(+:s)
    for (int64_t j = 0; j < n; j++) { float e = fl_nn_expf(x[j] - m); y[j] = e; s += e; }
    return s;
}

/* Σ exp(x[j] - m) without storing; double accumulation for the loss. */
static inline double row_sumexp(const float *x, int64_t n, float m) {
    double s = 0.0;
    #pragma omp simd reduction(+:s)
    for (int64_t j = 0; j < n; j++) s += (double)fl_nn_expf(x[j] - m);
    return s;
}

void fl_cpu_softmax_fwd(const float *x, float *y, int64_t rows, int64_t cols) {
    #pragma omp parallel for if (rows > 1 && rows * cols > FL_NN_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = row_max(xr, cols);
        float inv = 1.0f / row_exp_sum(xr, yr, cols, m);
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] *= inv;
    }
}

/* dx = y ⊙ (dy − Σ y·dy) */
void fl_cpu_softmax_bwd(const float *y, const float *dy, float *dx, int64_t rows, int64_t cols) {
    #pragma omp parallel for if (rows > 1 && rows * cols > FL_NN_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        float *dr = dx + r * cols;
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (int64_t j = 0; j < cols; j++) s += yr[j] * gr[j];
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) dr[j] = yr[j] * (gr[j] - s);
    }
}

void fl_cpu_log_softmax_fwd(const float *x, float *y, int64_t rows, int64_t cols) {
    #pragma omp parallel for if (rows > 1 && rows * cols > FL_NN_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float m = row_max(xr, cols);
        /* (x − m) − log Σ: x − m is exact near the max, so large logits keep their precision
         * (x − (m + log Σ) would round log Σ at the scale of m) */
        float ls = (float)log(row_sumexp(xr, cols, m));
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) yr[j] = (xr[j] - m) - ls;
    }
}

/* dx = dy − exp(y)·Σ dy */
void fl_cpu_log_softmax_bwd(const float *y, const float *dy, float *dx, int64_t rows, int64_t cols) {
    #pragma omp parallel for if (rows > 1 && rows * cols > FL_NN_PAR_MIN) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        float *dr = dx + r * cols;
        float s = 0.0f;
        #pragma omp simd reduction(+:s)
        for (int64_t j = 0; j < cols; j++) s += gr[j];
        #pragma omp simd
        for (int64_t j = 0; j < cols; j++) dr[j] = gr[j] - fl_nn_expf(yr[j]) * s;
    }
}

/* Checks every target and counts the non-ignored rows. Targets are floats holding class ids; a
 * fractional, NaN or out-of-range value that is not ignore_index is the caller's error. */
static fl_status ce_check_targets(const float *target, int64_t rows, int64_t cols, int64_t ignore_index,
                                  int64_t *count) {
    int64_t c = 0;
    for (int64_t r = 0; r < rows; r++) {
        double t = target[r];
        if (t == (double)ignore_index) continue;
        if (t >= 0.0 && t < (double)cols && t != floor(t))
            return FL_ERR(FL_EINVAL, "cross_entropy: target %g at row %lld is not a whole number (class indices are "
                          "integers)", t, (long long)r);
        if (!(t >= 0.0 && t < (double)cols))
            return FL_ERR(FL_EINVAL, "cross_entropy: target %g at row %lld is out of range [0, %lld)",
                          t, (long long)r, (long long)cols);
        c++;
    }
    *count = c;
    return FL_OK;
}

/* Per row: loss_r = lse − (1−ε)·x_t − (ε/C)·Σ_j x_j  (= −Σ_j q_j log p_j with q the smoothed target).
 * Row losses go to a buffer and are summed in row order, so the total is thread-independent.
 * All rows ignored: 0/0 = NaN, as PyTorch's mean reduction gives. */
fl_status fl_cpu_cross_entropy_fwd(const float *logits, const float *target, int64_t rows, int64_t cols,
                                   int64_t ignore_index, float label_smoothing, double *loss, int64_t *count) {
    int64_t cnt = 0;
    FL_TRY(ce_check_targets(target, rows, cols, ignore_index, &cnt));
    double stack[256], *buf = rows <= 256 ? stack : malloc((size_t)rows * sizeof(double));
    if (!buf) return FL_ERR(FL_ENOMEM, "cross_entropy: out of memory for %lld row losses", (long long)rows);
    const double eps = label_smoothing;
    fl_status st = FL_OK;
    for (int64_t r0 = 0; r0 < rows; r0 += CE_CHUNK) {
        int64_t r1 = r0 + CE_CHUNK < rows ? r0 + CE_CHUNK : rows;
        #pragma omp parallel for if ((r1 - r0) > 1 && (r1 - r0) * cols > FL_NN_PAR_MIN) schedule(static)
        for (int64_t r = r0; r < r1; r++) {
            double t = target[r];
            if (t == (double)ignore_index) { buf[r] = 0.0; continue; }
            const float *xr = logits + r * cols;
            float m = row_max(xr, cols);
            double lse = (double)m + log(row_sumexp(xr, cols, m));
            double l = lse - (1.0 - eps) * (double)xr[(int64_t)t];
            if (eps != 0.0) {
                double sx = 0.0;
                #pragma omp simd reduction(+:sx)
                for (int64_t j = 0; j < cols; j++) sx += (double)xr[j];
                l -= eps / (double)cols * sx;
            }
            buf[r] = l;
        }
        if ((st = fl_check_interrupt()) != FL_OK) goto done;
    }
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) total += buf[r];
    *loss = cnt ? total / (double)cnt : NAN;
    if (count) *count = cnt;
done:
    if (buf != stack) free(buf);
    return st;
}

/* dlogits_r = dloss/count · (softmax(x_r) − q_r) on non-ignored rows, 0 on ignored rows (and
 * everywhere when all are ignored, matching PyTorch's zero gradient there). */
fl_status fl_cpu_cross_entropy_bwd(const float *logits, const float *target, int64_t rows, int64_t cols,
                                   int64_t ignore_index, float label_smoothing, float dloss, float *dlogits) {
    int64_t cnt = 0;
    FL_TRY(ce_check_targets(target, rows, cols, ignore_index, &cnt));
    const float g = cnt ? (float)((double)dloss / (double)cnt) : 0.0f;
    const float off = label_smoothing / (float)cols, on = 1.0f - label_smoothing;
    for (int64_t r0 = 0; r0 < rows; r0 += CE_CHUNK) {
        int64_t r1 = r0 + CE_CHUNK < rows ? r0 + CE_CHUNK : rows;
        #pragma omp parallel for if ((r1 - r0) > 1 && (r1 - r0) * cols > FL_NN_PAR_MIN) schedule(static)
        for (int64_t r = r0; r < r1; r++) {
            float *dr = dlogits + r * cols;
            double t = target[r];
            if (t == (double)ignore_index) {
                #pragma omp simd
                for (int64_t j = 0; j < cols; j++) dr[j] = 0.0f;
                continue;
            }
            const float *xr = logits + r * cols;
            float m = row_max(xr, cols);
            float inv = 1.0f / row_exp_sum(xr, dr, cols, m);
            #pragma omp simd
            for (int64_t j = 0; j < cols; j++) dr[j] = g * (dr[j] * inv - off);
            dr[(int64_t)t] -= g * on;
        }
        FL_TRY(fl_check_interrupt());
    }
    return FL_OK;
}
