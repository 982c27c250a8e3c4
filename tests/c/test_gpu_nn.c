/* test_gpu_nn.c — the CUDA device's neural-network entries (kernels/activation.cu, softmax.cu,
 * layernorm.cu, embedding.cu) against the CPU device's entries of the same name (core/cpu; while an entry
 * is missing from the CPU table, the fl_cpu_* kernel of core/cpu/cpu_nn.h it wraps, or core/nn.c's loop).
 * Element-wise results are bit-exact (the kernels mirror the CPU's operations, each separately rounded);
 * results that sum a row or a column in another order get a tolerance derived from the summation error,
 * written next to each check. Every test is named gpu_* (make test-gpu); those that need a device pass
 * with "skipped: no GPU" without one. The *_on_host tests run the kernels' own __host__ __device__ code
 * on the host (fl_cuda_nn_*_host), and the argument checks run before any CUDA call, so both run
 * everywhere CUDA is built in. */
#include "runner.h"
#include "gpu_test.h"
#include "device.h"
#include "error.h"
#include "rng.h"
#include "cpu/cpu_nn.h"
#include "cpu/cpu_nn_internal.h"
#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef FL_HAVE_CUDA

TEST(gpu_nn_kernels_not_built) { printf("  skipped: built without CUDA\n"); }

#else

#include "../../kernels/cuda_entries.h"
#include "../../kernels/fl_cuda_host.h"

/* ---- the CPU reference: the CPU device's entry, or the kernel it wraps -------------------------------- */

static const fl_device *cpu(void) { return fl_cpu_device(); }

static fl_status ref_act_fwd(fl_act k, const float *x, float *y, int64_t n) { return cpu()->act_fwd(k, x, y, n); }
static fl_status ref_act_bwd(fl_act k, const float *x, const float *dy, float *dx, int64_t n) {
    return cpu()->act_bwd(k, x, dy, dx, n);
}
static fl_status ref_dropout_fwd(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed,
                                 uint64_t off) {
    if (cpu()->dropout_fwd) return cpu()->dropout_fwd(x, y, mask, n, p, seed, off);
    fl_cpu_dropout_fwd(x, y, mask, n, p, seed, off);
    return FL_OK;
}
static fl_status ref_dropout_bwd(const uint8_t *mask, const float *dy, float *dx, int64_t n, float p) {
    if (cpu()->dropout_bwd) return cpu()->dropout_bwd(mask, dy, dx, n, p);
    fl_cpu_dropout_bwd(mask, dy, dx, n, p);
    return FL_OK;
}
/* core/linear.c's in-place bias loop */
static fl_status ref_bias_add(float *y, const float *b, int64_t rows, int64_t cols) {
    if (cpu()->bias_add) return cpu()->bias_add(y, b, rows, cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] += b[c];
    return FL_OK;
}
static fl_status ref_softmax_fwd(bool log, const float *x, float *y, int64_t rows, int64_t cols) {
    if (cpu()->softmax_fwd) return cpu()->softmax_fwd(log, x, y, rows, cols);
    if (log) fl_cpu_log_softmax_fwd(x, y, rows, cols);
    else fl_cpu_softmax_fwd(x, y, rows, cols);
    return FL_OK;
}
static fl_status ref_softmax_bwd(bool log, const float *y, const float *dy, float *dx, int64_t rows, int64_t cols) {
    if (cpu()->softmax_bwd) return cpu()->softmax_bwd(log, y, dy, dx, rows, cols);
    if (log) fl_cpu_log_softmax_bwd(y, dy, dx, rows, cols);
    else fl_cpu_softmax_bwd(y, dy, dx, rows, cols);
    return FL_OK;
}
static fl_status ref_ce_fwd(const float *lg, const float *t, int64_t rows, int64_t cols, int64_t ign, float ls,
                            double *loss, int64_t *count) {
    if (cpu()->cross_entropy_fwd) return cpu()->cross_entropy_fwd(lg, t, rows, cols, ign, ls, loss, count);
    return fl_cpu_cross_entropy_fwd(lg, t, rows, cols, ign, ls, loss, count);
}
static fl_status ref_ce_bwd(const float *lg, const float *t, int64_t rows, int64_t cols, int64_t ign, float ls,
                            float dloss, float *d) {
    if (cpu()->cross_entropy_bwd) return cpu()->cross_entropy_bwd(lg, t, rows, cols, ign, ls, dloss, d);
    return fl_cpu_cross_entropy_bwd(lg, t, rows, cols, ign, ls, dloss, d);
}
/* core/nn.c's MSE loops */
static fl_status ref_mse_fwd(const float *x, const float *y, int64_t n, double *sum) {
    if (cpu()->mse_fwd) return cpu()->mse_fwd(x, y, n, sum);
    double s = 0;
    for (int64_t k = 0; k < n; k++) { double d = (double)x[k] - (double)y[k]; s += d * d; }
    *sum = s;
    return FL_OK;
}
static fl_status ref_mse_bwd(const float *x, const float *y, float *dx, int64_t n, float f) {
    if (cpu()->mse_bwd) return cpu()->mse_bwd(x, y, dx, n, f);
    for (int64_t k = 0; k < n; k++) dx[k] = f * (x[k] - y[k]);
    return FL_OK;
}
static fl_status ref_ln_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                            int64_t rows, int64_t cols, float eps) {
    if (cpu()->layernorm_fwd) return cpu()->layernorm_fwd(x, w, b, y, mean, rstd, rows, cols, eps);
    fl_cpu_layernorm_fwd(x, w, b, y, mean, rstd, rows, cols, eps);
    return FL_OK;
}
static fl_status ref_ln_bwd(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                            float *dx, float *dw, float *db, int64_t rows, int64_t cols) {
    if (cpu()->layernorm_bwd) return cpu()->layernorm_bwd(x, w, mean, rstd, dy, dx, dw, db, rows, cols);
    fl_cpu_layernorm_bwd(x, w, mean, rstd, dy, dx, dw, db, rows, cols);
    return FL_OK;
}
static fl_status ref_emb_fwd(const float *idx, int64_t n, const float *w, int64_t vocab, int64_t dim, float *y) {
    if (cpu()->embedding_fwd) return cpu()->embedding_fwd(idx, n, w, vocab, dim, y);
    return fl_cpu_embedding_fwd(idx, n, w, vocab, dim, y);
}
static fl_status ref_emb_bwd(const float *idx, int64_t n, const float *dy, int64_t vocab, int64_t dim, float *dw) {
    if (cpu()->embedding_bwd) return cpu()->embedding_bwd(idx, n, dy, vocab, dim, dw);
    fl_cpu_embedding_bwd(idx, n, dy, dim, dw);
    return FL_OK;
}

/* ---- helpers ------------------------------------------------------------------------------------------ */

static uint64_t rs_state = 0x9E3779B97F4A7C15ull;
static void rseed(uint64_t s) { rs_state = s * 0x9E3779B97F4A7C15ull + 1; }
static double urand(void) {   /* xorshift64: independent of core/rng.c */
    rs_state ^= rs_state << 13; rs_state ^= rs_state >> 7; rs_state ^= rs_state << 17;
    return (double)(rs_state >> 11) / 9007199254740992.0;
}
static double nrand(void) {
    double u1 = urand(), u2 = urand();
    return sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2);
}
static float *fbuf(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }
static float *fnormal(int64_t n, double mean, double sd) {
    float *p = fbuf(n);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(mean + sd * nrand());
    return p;
}
static double *dbuf(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static float *fcopy(const float *x, int64_t n) {
    float *p = fbuf(n);
    if (n > 0) memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}


#define U24 (1.0 / 16777216.0)   /* the fp32 unit roundoff 2^-24 */
/* Two fp32 sums of the same terms in different orders differ by at most u·(d1 + d2)·Σ|terms|, d the
 * longest chain of additions any term goes through in each (the classic bound; for positive terms of
 * uneven size, as softmax's exponentials, the rounding errors are biased and come near it). The CPU's
 * row and column sums are taken as sequential (d = n: its SIMD lanes only shorten them); the device's
 * depths follow from its reduction shapes below. */
static double pair_tol(int64_t d1, int64_t d2) { return U24 * (double)(d1 + d2 + 4); }
/* A device row sum: lanes striding by 32 (a warp per row, cols ≤ 1024) or 512 (a block per row), a
 * 5-step butterfly, then the block's 16 warp values one after another. */
static int64_t gpu_row_depth(int64_t cols) { return cols <= 1024 ? (cols + 31) / 32 + 5 : (cols + 511) / 512 + 5 + 16; }
/* The device's dw/db column sums: chunks of max(64, ⌈rows/256⌉) rows, 8 row lanes per chunk, the lanes
 * in order, then the chunks in order. */
static int64_t gpu_col_depth(int64_t rows) {
    int64_t chunk = (rows + 255) / 256 > 64 ? (rows + 255) / 256 : 64, chunks = (rows + chunk - 1) / chunk;
    return (chunk + 7) / 8 + 8 + chunks;
}

/* Bit-exact (NaN equal to NaN): reports the first difference. */
static bool check_bits(int *fl__failed, const char *what, const float *got, const float *ref, int64_t n) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!same_float(got[i], ref[i])) { if (first < 0) first = i; bad++; }
    CHECK(bad == 0, "%s: %lld of %lld differ, first [%lld]: %.9g (0x%08x) vs %.9g (0x%08x)", what, (long long)bad,
          (long long)n, (long long)first, first >= 0 ? got[first] : 0.0, first >= 0 ? bits_of(got[first]) : 0u,
          first >= 0 ? ref[first] : 0.0, first >= 0 ? bits_of(ref[first]) : 0u);
    return bad == 0;
}

/* |got − ref| ≤ tol[i] (NaN only where ref is NaN): reports the worst element. */
static bool check_tol(int *fl__failed, const char *what, const float *got, const float *ref, const double *tol,
                      int64_t n) {
    int64_t bad = 0, worst = -1;
    double wr = 0.0;
    for (int64_t i = 0; i < n; i++) {
        bool ok;
        double r = 0.0;
        if (ref[i] != ref[i] || got[i] != got[i]) ok = ref[i] != ref[i] && got[i] != got[i];
        else if (isinf(ref[i]) || isinf(got[i])) ok = got[i] == ref[i];
        else { r = fabs((double)got[i] - (double)ref[i]) / tol[i]; ok = r <= 1.0; }
        if (!ok) { bad++; r = r > 1.0 ? r : INFINITY; }
        if (r > wr || (!ok && worst < 0)) { wr = r; worst = i; }
    }
    CHECK(bad == 0, "%s: %lld of %lld out of tolerance, worst [%lld]: %.9g vs %.9g (tol %.3g)", what, (long long)bad,
          (long long)n, (long long)worst, worst >= 0 ? got[worst] : 0.0, worst >= 0 ? ref[worst] : 0.0,
          worst >= 0 ? tol[worst] : 0.0);
    return bad == 0;
}


#define FB(n) ((size_t)(n) * sizeof(float))

/* ---- tolerances of the row kernels (shared by the host-run and GPU tests) ------------------------------- */

/* softmax: y = e·(1/s) with e bit-exact and s (positive terms) summed in another order, d the depth of
 * the sum under test, plus the final roundings. log-softmax: log Σ in fp64 rounds to fp32 ls equal or
 * 1 ulp apart; y = (x − m) − ls, so ≤ 2 ulp of ls (ls ≤ log cols) and of y. */
static void softmax_fwd_tol(bool lg, const float *ref, int64_t rows, int64_t cols, int64_t d, double *tol) {
    for (int64_t i = 0; i < rows * cols; i++)
        tol[i] = lg ? 4.0 * U24 * (log((double)cols) + 1.0 + fabs(ref[i])) + 1e-45
                     : fabs(ref[i]) * (pair_tol(cols, d) + 4.0 * U24) + 1e-45;
}

/* The device's softmax against fp64 (no CPU in between, so the device's short sums give a tight bound
 * that a lost or doubled term would break). Each e_j = fl_nn_expf(fl32(x_j − m)) is within
 * u·(4 + |x_j − m|) of exp(x_j − m) relative (2 ulp of the exp, and the fp32 rounding of its argument); s
 * adds their weighted sum and u·(depth + 4); softmax then rounds 1/s and e·(1/s); log-softmax rounds x − m,
 * ls (to fp32) and the subtraction. */
static void softmax_f64_check(int *fl__failed, const char *what, bool lg, const float *x, const float *got,
                              int64_t rows, int64_t cols) {
    double *ref = dbuf(cols), *tol = dbuf(cols);
    float *g = fbuf(cols), *rf = fbuf(cols);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        double m = -INFINITY, s = 0.0, se = 0.0;
        for (int64_t j = 0; j < cols; j++) m = xr[j] > m ? xr[j] : m;
        for (int64_t j = 0; j < cols; j++) {
            double e = exp((double)xr[j] - m);
            s += e;
            if (e > 0.0) se += e * U24 * (4.0 + fabs((double)xr[j] - m));
        }
        const double ls = log(s), rel_s = se / s + U24 * (double)(gpu_row_depth(cols) + 4);
        for (int64_t j = 0; j < cols; j++) {
            const double dxm = isinf(xr[j]) ? 0.0 : fabs((double)xr[j] - m);
            ref[j] = lg ? ((double)xr[j] - m) - ls : exp((double)xr[j] - m) / s;
            tol[j] = lg ? U24 * (dxm + 8.0 + 2.0 * fabs(ls) + 4.0 * (isinf(ref[j]) ? 0.0 : fabs(ref[j]))) + rel_s
                        : fabs(ref[j]) * (U24 * (8.0 + dxm) + rel_s) + 1e-44;
            rf[j] = (float)ref[j];
        }
        memcpy(g, got + r * cols, FB(cols));
        if (!check_tol(fl__failed, what, g, rf, tol, cols)) break;
    }
    free(ref); free(tol); free(g); free(rf);
}

/* backward: s = Σ y·dy (Σ dy for log) in another order (d: the depth under test), error ≤
 * pair_tol·Σ|terms|; dx = y·(dy − s) or dy − e^y·s, plus the rounding of those two operations. */
static void softmax_bwd_tol(bool lg, const float *y, const float *dy, const float *ref, int64_t rows, int64_t cols,
                            int64_t d, double *tol) {
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        double s = 0, sa = 0;
        for (int64_t j = 0; j < cols; j++) {
            double t = lg ? gr[j] : (double)yr[j] * gr[j];
            s += t; sa += fabs(t);
        }
        for (int64_t j = 0; j < cols; j++) {
            double f = lg ? exp((double)yr[j]) : fabs((double)yr[j]);
            double a = lg ? fabs(gr[j]) + f * fabs(s) : f * (fabs(gr[j]) + fabs(s));
            tol[r * cols + j] = f * pair_tol(cols, d) * sa + 4.0 * U24 * (a + fabs(ref[r * cols + j])) + 1e-45;
        }
    }
}

/* cross-entropy gradient: g·(p − off) − [t]·g·on with p = e/s (s in another order: pair_tol with the
 * depth d under test), the subtraction's and products' rounding. p is taken from an fp64 softmax. */
static void ce_bwd_tol(const float *lg, const float *t, int64_t rows, int64_t cols, int64_t ign, float ls,
                       float dloss, int64_t cnt, int64_t d, const float *ref, double *tol) {
    double g = cnt ? fabs((double)dloss / (double)cnt) : 0.0, off = ls / (double)cols, on = 1.0 - ls;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = lg + r * cols;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < cols; j++) m = xr[j] > m ? xr[j] : m;
        for (int64_t j = 0; j < cols; j++) s += exp((double)xr[j] - m);
        for (int64_t j = 0; j < cols; j++) {
            double p = exp((double)xr[j] - m) / s;
            bool at = (double)t[r] == (double)j && (double)t[r] != (double)ign;
            tol[r * cols + j] = g * (p * (pair_tol(cols, d) + 4.0 * U24) + 8.0 * U24 * (p + off + (at ? on : 0.0))) +
                                4.0 * U24 * fabs(ref[r * cols + j]) + 1e-45;
        }
    }
}

/* LayerNorm forward: mean/rstd are fp64 values summed in another order, rounded to fp32: equal or 1 ulp
 * apart (the fp64 error of the mean, ~1e-13 of mean|x|, matters only for a mean near 0); y moves by
 * those through (x − m)·rs·w, plus its own rounding. */
static void ln_fwd_tol(const float *x, const float *w, const float *b, const float *mean, const float *rstd,
                       const float *ref, int64_t rows, int64_t cols, double *tm, double *tr, double *ty) {
    for (int64_t r = 0; r < rows; r++) {
        double A = 0;
        for (int64_t j = 0; j < cols; j++) A += fabs(x[r * cols + j]);
        A /= (double)(cols ? cols : 1);
        const double m = mean[r], rs = rstd[r];
        tm[r] = 4.0 * U24 * fabs(m) + 1e-12 * A + 1e-45;
        tr[r] = 4.0 * U24 * fabs(rs) + 1e-45;
        for (int64_t j = 0; j < cols; j++) {
            double wj = w ? fabs(w[j]) : 1.0, bj = b ? fabs(b[j]) : 0.0, xm = fabs(x[r * cols + j] - m);
            ty[r * cols + j] = 8.0 * U24 * (fabs(ref[r * cols + j]) + bj + rs * wj * (fabs(m) + xm)) +
                               1e-12 * A * rs * wj + 1e-45;
        }
    }
}

/* LayerNorm backward dx: a = Σg/n and c = Σg·x̂/n in another order (pair_tol of Σ|g|/n and Σ|g·x̂|/n,
 * d the depth under test), carried by rs into dx = rs·((g − a) − x̂·c), plus that expression's rounding. */
static void ln_dx_tol(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                      const float *ref, int64_t rows, int64_t cols, int64_t d, double *tol) {
    for (int64_t r = 0; r < rows; r++) {
        const double m = mean[r], rs = rstd[r];
        double g1 = 0, g2 = 0, a = 0, c = 0;
        for (int64_t j = 0; j < cols; j++) {
            double g = (double)dy[r * cols + j] * (w ? w[j] : 1.0), xh = ((double)x[r * cols + j] - m) * rs;
            g1 += fabs(g); g2 += fabs(g * xh); a += g; c += g * xh;
        }
        a /= (double)cols; c /= (double)cols;
        for (int64_t j = 0; j < cols; j++) {
            double g = (double)dy[r * cols + j] * (w ? w[j] : 1.0), xh = fabs(((double)x[r * cols + j] - m) * rs);
            tol[r * cols + j] = rs * (pair_tol(cols, d) * (g1 + xh * g2) / (double)cols +
                                      8.0 * U24 * (fabs(g) + fabs(a) + xh * fabs(c))) +
                                4.0 * U24 * fabs(ref[r * cols + j]) + 1e-45;
        }
    }
}

/* LayerNorm dw/db: column sums over rows (CPU: sequential; device: chunks), error ≤ pair_tol of
 * Σ|terms|, plus the += into the old value. */
static void ln_param_tol(const float *x, const float *mean, const float *rstd, const float *dy, const float *old,
                         const float *ref, int64_t rows, int64_t cols, bool for_w, double *tol) {
    for (int64_t j = 0; j < cols; j++) {
        double sa = 0;
        for (int64_t r = 0; r < rows; r++) {
            double g = dy[r * cols + j];
            sa += for_w ? fabs(g * ((double)x[r * cols + j] - mean[r]) * rstd[r]) : fabs(g);
        }
        tol[j] = pair_tol(rows, gpu_col_depth(rows)) * sa + 4.0 * U24 * (fabs(old[j]) + fabs(ref[j])) + 1e-45;
    }
}

/* Rows of random logits: normal·scale; row 2 shifted by 80 (near exp's overflow without the max
 * subtracted), and with `masked` a −inf entry in row 1 (not for cross-entropy, where it makes the loss
 * infinite). */
static float *logits_data(int64_t rows, int64_t cols, double scale, bool masked) {
    float *x = fnormal(rows * cols, 0.0, scale);
    if (rows > 2 && cols > 2) {
        if (masked) x[1 * cols + 0] = -INFINITY;
        for (int64_t j = 0; j < cols; j++) x[2 * cols + j] += 80.0f;
    }
    return x;
}

/* ---- host runs of the device code ------------------------------------------------------------------------ */

TEST(gpu_nn_philox_words_match_rng_on_host) {
    static const uint64_t keys[] = { 0, 1, 42, 0x00000000FFFFFFFFull, 0xFFFFFFFF00000000ull, 0xDEADBEEFCAFEBABEull,
                                     UINT64_MAX };
    static const uint64_t bases[] = { 0, 0xFFFFFFF0ull, 0x1234567890ull, UINT64_MAX - 600 };
    int bad = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++)
            for (uint64_t c = bases[b]; c - bases[b] < 600; c++) {
                uint32_t w0[4], w1[4];
                fl_philox4x32(keys[k], c, w0);
                fl_cuda_nn_philox_host(keys[k], c, w1);
                if (memcmp(w0, w1, sizeof w0)) {
                    if (!bad) CHECK(false, "key %llx counter %llx: %08x.. vs %08x..", (unsigned long long)keys[k],
                                    (unsigned long long)c, w1[0], w0[0]);
                    bad++;
                }
            }
    CHECK(bad == 0, "%d blocks differ", bad);
}

TEST(gpu_nn_expf_matches_cpu_on_host) {
    int bad = 0;
    float worst_x = 0.0f;
    /* a dense grid over the whole interesting range, then random bit patterns, then the edges */
    for (int64_t i = 0; i <= 2100000; i++) {
        float x = (float)(-110.0 + (double)i * 1e-4);
        if (!same_float(fl_cuda_expf_host(x), fl_nn_expf(x))) { if (!bad) worst_x = x; bad++; }
    }
    rseed(5);
    for (int i = 0; i < 1000000; i++) {
        float x = from_bits((uint32_t)(urand() * 4294967296.0));
        if (!same_float(fl_cuda_expf_host(x), fl_nn_expf(x))) { if (!bad) worst_x = x; bad++; }
    }
    static const float edges[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, -104.0f, -103.99999f, -104.00001f,
                                   88.7228394f, 88.72284f, 88.7228317f, 1e-45f, -1e-45f, 1e-38f, 87.0f, -87.0f,
                                   -87.3365f, -100.0f, FLT_MAX, -FLT_MAX };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        if (!same_float(fl_cuda_expf_host(edges[i]), fl_nn_expf(edges[i]))) { if (!bad) worst_x = edges[i]; bad++; }
    CHECK(bad == 0, "%d inputs differ, first x = %.9g: %.9g vs %.9g", bad, worst_x, fl_cuda_expf_host(worst_x),
          fl_nn_expf(worst_x));
}

/* Inputs for the activations: a dense grid over [-30, 30], large magnitudes, the specials. */
static int64_t act_inputs(float **xp, float **dyp) {
    const int64_t ngrid = 60 * 512 + 1;
    static const float extra[] = { 0.0f, -0.0f, 1e-45f, -1e-45f, 1e-30f, -1e-30f, 100.0f, -100.0f, 1e4f, -1e4f,
                                   3e12f, -3e12f, 1e20f, -1e20f, 3e38f, -3e38f, INFINITY, -INFINITY, NAN };
    const int64_t n = ngrid + (int64_t)(sizeof extra / sizeof extra[0]);
    float *x = fbuf(n), *dy = fnormal(n, 0.0, 1.0);
    for (int64_t i = 0; i < ngrid; i++) x[i] = (float)(-30.0 + (double)i / 512.0);
    memcpy(x + ngrid, extra, sizeof extra);
    *xp = x; *dyp = dy;
    return n;
}

TEST(gpu_nn_activation_device_code_matches_cpu_on_host) {
    rseed(11);
    float *x, *dy;
    int64_t n = act_inputs(&x, &dy);
    float *y0 = fbuf(n), *y1 = fbuf(n);
    static const char *names[FL_ACT_COUNT] = { "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh" };
    for (int k = 0; k < FL_ACT_COUNT; k++) {
        char what[64];
        /* host erff is glibc's, as the CPU's: bit-exact for every kind here */
        REQUIRE_OK(ref_act_fwd((fl_act)k, x, y0, n));
        REQUIRE_OK(fl_cuda_nn_act_fwd_host((fl_act)k, x, y1, n));
        snprintf(what, sizeof what, "%s forward", names[k]);
        check_bits(fl__failed, what, y1, y0, n);
        REQUIRE_OK(ref_act_bwd((fl_act)k, x, dy, y0, n));
        REQUIRE_OK(fl_cuda_nn_act_bwd_host((fl_act)k, x, dy, y1, n));
        snprintf(what, sizeof what, "%s backward", names[k]);
        check_bits(fl__failed, what, y1, y0, n);
    }
    CHECK(fl_cuda_nn_act_fwd_host(FL_ACT_COUNT, x, y1, 1) == FL_EINVAL, "kind FL_ACT_COUNT accepted");
    free(x); free(dy); free(y0); free(y1);
}

TEST(gpu_nn_dropout_device_code_matches_cpu_on_host) {
    static const float ps[] = { 0.0f, -0.5f, 0.1f, 0.5f, 0.9f, 1.0f - 1.0f / 16777216.0f, 1.0f, 1.5f, NAN };
    static const int64_t ns[] = { 0, 1, 3, 4, 5, 1001, 100003 };
    static const uint64_t offs[] = { 0, 7, 0xFFFFFFFEull, UINT64_MAX - 3 };
    rseed(12);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        int64_t n = ns[a];
        float *x = fnormal(n, 0, 1), *dy = fnormal(n, 0, 1), *y0 = fbuf(n), *y1 = fbuf(n);
        uint8_t *m0 = calloc((size_t)n + 1, 1), *m1 = calloc((size_t)n + 1, 1);
        for (int64_t i = 0; i < n && i < 3; i++) {   /* x·0 and dy·0 */
            x[i] = i == 2 ? NAN : i == 0 ? -INFINITY : INFINITY;
            dy[i] = i == 0 ? NAN : i == 1 ? -INFINITY : INFINITY;
        }
        for (size_t b = 0; b < sizeof ps / sizeof ps[0]; b++)
            for (size_t c = 0; c < sizeof offs / sizeof offs[0]; c++) {
                uint64_t seed = 1000 + b * 7 + c;
                char what[96];
                snprintf(what, sizeof what, "n %lld p %g offset %llx", (long long)n, ps[b], (unsigned long long)offs[c]);
                REQUIRE_OK(ref_dropout_fwd(x, y0, m0, n, ps[b], seed, offs[c]));
                fl_cuda_nn_dropout_fwd_host(x, y1, m1, n, ps[b], seed, offs[c]);
                CHECK(n == 0 || memcmp(m0, m1, (size_t)n) == 0, "%s: masks differ", what);
                check_bits(fl__failed, what, y1, y0, n);
                REQUIRE_OK(ref_dropout_bwd(m0, dy, y0, n, ps[b]));
                fl_cuda_nn_dropout_bwd_host(m0, dy, y1, n, ps[b]);
                check_bits(fl__failed, what, y1, y0, n);
            }
        free(x); free(dy); free(y0); free(y1); free(m0); free(m1);
    }
}

static const int64_t ROW_SHAPES[][2] = { { 1, 1 }, { 3, 7 }, { 5, 33 }, { 4, 1000 }, { 3, 5000 }, { 1, 70000 } };
#define N_ROW_SHAPES (sizeof ROW_SHAPES / sizeof ROW_SHAPES[0])

TEST(gpu_nn_softmax_device_code_matches_cpu_on_host) {
    rseed(13);
    for (size_t s = 0; s < N_ROW_SHAPES; s++) {
        const int64_t rows = ROW_SHAPES[s][0], cols = ROW_SHAPES[s][1], n = rows * cols;
        float *x = logits_data(rows, cols, 3.0, true), *dy = fnormal(n, 0, 1), *y0 = fbuf(n), *y1 = fbuf(n);
        float *d0 = fbuf(n), *d1 = fbuf(n);
        double *tol = dbuf(n);
        for (int lg = 0; lg < 2; lg++) {
            char what[80];
            snprintf(what, sizeof what, "%s [%lld, %lld]", lg ? "log_softmax" : "softmax", (long long)rows,
                     (long long)cols);
            REQUIRE_OK(ref_softmax_fwd(lg, x, y0, rows, cols));
            fl_cuda_nn_softmax_fwd_host(lg, x, y1, rows, cols);
            softmax_fwd_tol(lg, y0, rows, cols, cols, tol);
            check_tol(fl__failed, what, y1, y0, tol, n);
            REQUIRE_OK(ref_softmax_bwd(lg, y0, dy, d0, rows, cols));
            fl_cuda_nn_softmax_bwd_host(lg, y0, dy, d1, rows, cols);
            softmax_bwd_tol(lg, y0, dy, d0, rows, cols, cols, tol);
            check_tol(fl__failed, what, d1, d0, tol, n);
        }
        free(x); free(dy); free(y0); free(y1); free(d0); free(d1); free(tol);
    }
}

/* Targets: class ids, with every 5th row ignored when ign is used. */
static float *ce_targets(int64_t rows, int64_t cols, int64_t ign) {
    float *t = fbuf(rows);
    for (int64_t r = 0; r < rows; r++) t[r] = r % 5 == 3 ? (float)ign : (float)(int64_t)(urand() * (double)cols);
    return t;
}

typedef fl_status (*ce_fwd_fn)(const float *, const float *, int64_t, int64_t, int64_t, float, double *, int64_t *);
typedef fl_status (*ce_bwd_fn)(const float *, const float *, int64_t, int64_t, int64_t, float, float, float *);

/* The same error, word for word, from both sides; the CPU names the first bad row. */
static void ce_bad_target_case(int *fl__failed, ce_fwd_fn f, ce_bwd_fn b, const float *lg, int64_t rows, int64_t cols,
                               const char *who) {
    float *t = ce_targets(rows, cols, -100);
    float *d = fbuf(rows * cols);
    t[rows - 1] = (float)cols;   /* out of range */
    t[rows / 2] = 1.5f;          /* not an integer: the first bad row */
    char cpu_msg[512];
    double loss = 7.0;
    int64_t cnt = 7;
    CHECK(ref_ce_fwd(lg, t, rows, cols, -100, 0.0f, &loss, &cnt) == FL_EINVAL, "cpu accepted a bad target");
    snprintf(cpu_msg, sizeof cpu_msg, "%s", fl_last_error_detail());
    CHECK(f(lg, t, rows, cols, -100, 0.0f, &loss, &cnt) == FL_EINVAL, "%s forward accepted a bad target", who);
    CHECK(strcmp(fl_last_error_detail(), cpu_msg) == 0, "%s forward: \"%s\" vs \"%s\"", who, fl_last_error_detail(),
          cpu_msg);
    CHECK(loss == 7.0 && cnt == 7, "%s forward wrote its results on an error", who);
    CHECK(b(lg, t, rows, cols, -100, 0.0f, 1.0f, d) == FL_EINVAL, "%s backward accepted a bad target", who);
    CHECK(strcmp(fl_last_error_detail(), cpu_msg) == 0, "%s backward: \"%s\" vs \"%s\"", who, fl_last_error_detail(),
          cpu_msg);
    CHECK(strstr(cpu_msg, "at row") != NULL, "%s", cpu_msg);
    free(t); free(d);
}

static const int64_t CE_SHAPES[][2] = { { 1, 1 }, { 7, 5 }, { 64, 1000 }, { 3, 50257 }, { 1000, 3 } };
#define N_CE_SHAPES (sizeof CE_SHAPES / sizeof CE_SHAPES[0])

TEST(gpu_nn_cross_entropy_device_code_matches_cpu_on_host) {
    rseed(14);
    for (size_t s = 0; s < N_CE_SHAPES; s++) {
        const int64_t rows = CE_SHAPES[s][0], cols = CE_SHAPES[s][1], n = rows * cols;
        float *lg = logits_data(rows, cols, 2.0, false), *d0 = fbuf(n), *d1 = fbuf(n);
        double *tol = dbuf(n);
        for (int v = 0; v < 4; v++) {
            const float ls = v & 1 ? 0.1f : 0.0f;
            const int64_t ign = v & 2 ? -100 : -1000000;
            float *t = ce_targets(rows, cols, v & 2 ? -100 : 0);
            char what[96];
            snprintf(what, sizeof what, "cross_entropy [%lld, %lld] smoothing %g ignore %lld", (long long)rows,
                     (long long)cols, ls, (long long)ign);
            double l0 = 0, l1 = 0;
            int64_t c0 = -1, c1 = -2;
            REQUIRE_OK(ref_ce_fwd(lg, t, rows, cols, ign, ls, &l0, &c0));
            REQUIRE_OK(fl_cuda_nn_cross_entropy_fwd_host(lg, t, rows, cols, ign, ls, &l1, &c1));
            CHECK(c0 == c1, "%s: count %lld vs %lld", what, (long long)c1, (long long)c0);
            /* fp64 row losses summed in another order; the fp32 parts are the same */
            CHECK(fabs(l1 - l0) <= 1e-12 * (1.0 + fabs(l0)), "%s: loss %.17g vs %.17g", what, l1, l0);
            REQUIRE_OK(ref_ce_bwd(lg, t, rows, cols, ign, ls, 0.75f, d0));
            REQUIRE_OK(fl_cuda_nn_cross_entropy_bwd_host(lg, t, rows, cols, ign, ls, 0.75f, d1));
            ce_bwd_tol(lg, t, rows, cols, ign, ls, 0.75f, c0, cols, d0, tol);
            check_tol(fl__failed, what, d1, d0, tol, n);
            free(t);
        }
        if (rows >= 3) ce_bad_target_case(fl__failed, fl_cuda_nn_cross_entropy_fwd_host,
                                          fl_cuda_nn_cross_entropy_bwd_host, lg, rows, cols, "host run");
        free(lg); free(d0); free(d1); free(tol);
    }
    /* every row ignored: NaN loss (0/0), count 0, zero gradient */
    float lg[6] = { 1, 2, 3, 4, 5, 6 }, t[2] = { -100, -100 }, d[6];
    double l = 0;
    int64_t c = 5;
    REQUIRE_OK(fl_cuda_nn_cross_entropy_fwd_host(lg, t, 2, 3, -100, 0.0f, &l, &c));
    CHECK(isnan(l) && c == 0, "loss %g count %lld", l, (long long)c);
    REQUIRE_OK(fl_cuda_nn_cross_entropy_bwd_host(lg, t, 2, 3, -100, 0.0f, 1.0f, d));
    for (int i = 0; i < 6; i++) CHECK(d[i] == 0.0f, "d[%d] = %g", i, d[i]);
}

TEST(gpu_nn_mse_device_code_matches_cpu_on_host) {
    rseed(15);
    const int64_t n = 100003;
    float *x = fnormal(n, 0, 2), *y = fnormal(n, 1, 1);
    double s0 = 0;
    REQUIRE_OK(ref_mse_fwd(x, y, n, &s0));
    double s1 = fl_cuda_nn_mse_sum_host(x, y, n);
    /* positive fp64 terms; the CPU's OpenMP reduction sums them in another order: ≤ n·2^-53 relative */
    CHECK(fabs(s1 - s0) <= 1e-16 * (double)n * s0, "%.17g vs %.17g", s1, s0);
    /* and a sum that goes wrong shows: one term left out */
    CHECK(fabs(fl_cuda_nn_mse_sum_host(x, y, n - 1) - s0) > 1e-16 * (double)n * s0, "the tolerance hides a term");
    free(x); free(y);
}

static const int64_t LN_SHAPES[][2] = { { 1, 1 }, { 3, 7 }, { 17, 768 }, { 5, 3000 }, { 300, 64 }, { 20000, 8 } };
#define N_LN_SHAPES (sizeof LN_SHAPES / sizeof LN_SHAPES[0])

typedef void (*ln_fwd_fn)(const float *, const float *, const float *, float *, float *, float *, int64_t, int64_t,
                          float);

TEST(gpu_nn_layernorm_device_code_matches_cpu_on_host) {
    rseed(16);
    for (size_t s = 0; s < N_LN_SHAPES; s++) {
        const int64_t rows = LN_SHAPES[s][0], cols = LN_SHAPES[s][1], n = rows * cols;
        float *x = fnormal(n, 5.0, 3.0), *dy = fnormal(n, 0, 1), *w = fnormal(cols, 1, 0.5), *b = fnormal(cols, 0, 1);
        float *y0 = fbuf(n), *y1 = fbuf(n), *m0 = fbuf(rows), *m1 = fbuf(rows), *r0 = fbuf(rows), *r1 = fbuf(rows);
        float *dw0 = fnormal(cols, 0, 1), *db0 = fnormal(cols, 0, 1), *dw1 = fcopy(dw0, cols), *db1 = fcopy(db0, cols);
        float *old_w = fcopy(dw0, cols), *old_b = fcopy(db0, cols);
        double *ty = dbuf(n), *tm = dbuf(rows), *tr = dbuf(rows), *tp = dbuf(cols);
        for (int v = 0; v < 4; v++) {
            const float *wv = v & 1 ? w : NULL, *bv = v & 2 ? b : NULL;
            char what[96];
            snprintf(what, sizeof what, "layernorm [%lld, %lld] w %d b %d", (long long)rows, (long long)cols, v & 1,
                     v >> 1);
            REQUIRE_OK(ref_ln_fwd(x, wv, bv, y0, m0, r0, rows, cols, 1e-5f));
            fl_cuda_nn_layernorm_fwd_host(x, wv, bv, y1, m1, r1, rows, cols, 1e-5f);
            ln_fwd_tol(x, wv, bv, m0, r0, y0, rows, cols, tm, tr, ty);
            check_tol(fl__failed, what, m1, m0, tm, rows);
            check_tol(fl__failed, what, r1, r0, tr, rows);
            check_tol(fl__failed, what, y1, y0, ty, n);
            /* backward from the CPU's saved statistics; dw/db accumulate into random values */
            memcpy(dw0, old_w, FB(cols)); memcpy(dw1, old_w, FB(cols));
            memcpy(db0, old_b, FB(cols)); memcpy(db1, old_b, FB(cols));
            REQUIRE_OK(ref_ln_bwd(x, wv, m0, r0, dy, y0, dw0, db0, rows, cols));
            fl_cuda_nn_layernorm_bwd_host(x, wv, m0, r0, dy, y1, dw1, db1, rows, cols);
            ln_dx_tol(x, wv, m0, r0, dy, y0, rows, cols, cols, ty);
            check_tol(fl__failed, what, y1, y0, ty, n);
            ln_param_tol(x, m0, r0, dy, old_w, dw0, rows, cols, true, tp);
            check_tol(fl__failed, what, dw1, dw0, tp, cols);
            ln_param_tol(x, m0, r0, dy, old_b, db0, rows, cols, false, tp);
            check_tol(fl__failed, what, db1, db0, tp, cols);
        }
        free(x); free(dy); free(w); free(b); free(y0); free(y1); free(m0); free(m1); free(r0); free(r1);
        free(dw0); free(db0); free(dw1); free(db1); free(old_w); free(old_b); free(ty); free(tm); free(tr); free(tp);
    }
}

/* Argument checks come before any CUDA call: the same answers with or without a GPU. The fake pointers
 * are never dereferenced; zero-size calls succeed without touching the device. */
TEST(gpu_nn_entries_reject_bad_arguments) {
    float *f = (float *)(uintptr_t)0x10000;
    uint8_t *m = (uint8_t *)(uintptr_t)0x20000;
    double loss = 1.0;
    int64_t cnt = 9;
    CHECK(fl_cuda_dev_act_fwd(FL_ACT_COUNT, f, f, 4) == FL_EINVAL && strstr(fl_last_error(), "kind"), "%s",
          fl_last_error());
    CHECK(fl_cuda_dev_act_bwd((fl_act)-1, f, f, f, 4) == FL_EINVAL, "kind -1");
    CHECK(fl_cuda_dev_act_fwd(FL_ACT_GELU, f, f, -1) == FL_EINVAL, "n = -1");
    CHECK(fl_cuda_dev_act_fwd(FL_ACT_GELU, NULL, f, 4) == FL_EINVAL, "NULL x");
    CHECK(fl_cuda_dev_act_fwd(FL_ACT_RELU, NULL, NULL, 0) == FL_OK, "n = 0: %s", fl_last_error());
    CHECK(fl_cuda_dev_act_bwd(FL_ACT_GELU_TANH, NULL, NULL, NULL, 0) == FL_OK, "n = 0");
    CHECK(fl_cuda_dev_dropout_fwd(f, f, m, -4, 0.5f, 1, 0) == FL_EINVAL, "dropout n = -4");
    CHECK(fl_cuda_dev_dropout_fwd(f, f, NULL, 4, 0.5f, 1, 0) == FL_EINVAL, "dropout NULL mask");
    CHECK(fl_cuda_dev_dropout_bwd(NULL, NULL, NULL, 0, 0.5f) == FL_OK, "dropout n = 0");
    CHECK(fl_cuda_dev_bias_add(f, f, -1, 3) == FL_EINVAL, "bias rows = -1");
    CHECK(fl_cuda_dev_bias_add(NULL, NULL, 0, 3) == FL_OK && fl_cuda_dev_bias_add(NULL, NULL, 3, 0) == FL_OK, "empty bias");
    CHECK(fl_cuda_dev_softmax_fwd(true, f, f, 2, -1) == FL_EINVAL, "softmax cols = -1");
    CHECK(fl_cuda_dev_softmax_bwd(false, NULL, NULL, NULL, 0, 5) == FL_OK, "softmax rows = 0");
    CHECK(fl_cuda_dev_cross_entropy_fwd(f, f, 2, 3, -100, 0.0f, NULL, &cnt) == FL_EINVAL, "no loss pointer");
    CHECK(fl_cuda_dev_cross_entropy_fwd(NULL, NULL, 0, 3, -100, 0.0f, &loss, &cnt) == FL_OK && isnan(loss) && cnt == 0,
          "no rows: loss %g count %lld", loss, (long long)cnt);
    CHECK(fl_cuda_dev_cross_entropy_bwd(f, f, -2, 3, -100, 0.0f, 1.0f, f) == FL_EINVAL, "ce rows = -2");
    loss = 1.0;
    CHECK(fl_cuda_dev_mse_fwd(NULL, NULL, 0, &loss) == FL_OK && loss == 0.0, "mse n = 0: %g", loss);
    CHECK(fl_cuda_dev_mse_fwd(f, f, 4, NULL) == FL_EINVAL, "mse no sum pointer");
    CHECK(fl_cuda_dev_mse_bwd(f, f, f, -1, 1.0f) == FL_EINVAL, "mse n = -1");
    CHECK(fl_cuda_dev_layernorm_fwd(f, NULL, NULL, f, NULL, f, 2, 3, 1e-5f) == FL_EINVAL, "layernorm no mean");
    CHECK(fl_cuda_dev_layernorm_fwd(NULL, NULL, NULL, NULL, NULL, NULL, 0, 3, 1e-5f) == FL_OK, "layernorm rows = 0");
    CHECK(fl_cuda_dev_layernorm_bwd(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 4, 0) == FL_OK, "layernorm cols = 0");
    CHECK(fl_cuda_dev_layernorm_bwd(f, NULL, NULL, f, f, f, NULL, NULL, 2, 3) == FL_EINVAL, "layernorm_bwd no mean");
    CHECK(fl_cuda_dev_embedding_fwd(f, -1, f, 3, 3, f) == FL_EINVAL, "embedding n = -1");
    CHECK(fl_cuda_dev_embedding_fwd(NULL, 0, NULL, 3, 3, NULL) == FL_OK, "embedding n = 0");
    CHECK(fl_cuda_dev_embedding_bwd(f, 4, f, (int64_t)1 << 33, 3, f) == FL_EUNSUPPORTED, "vocab 2^33: %s",
          fl_last_error());
    CHECK(fl_cuda_dev_embedding_bwd(NULL, 0, NULL, 3, 3, NULL) == FL_OK, "embedding_bwd n = 0");
}

/* ---- on the GPU ---------------------------------------------------------------------------------------- */

TEST(gpu_act_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(21);
    static const int64_t ns[] = { 0, 1, 5, 1000, (1 << 22) + 3 };
    static const char *names[FL_ACT_COUNT] = { "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh" };
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        float *x, *dy;
        int64_t n = ns[a];
        if (a == 3) n = act_inputs(&x, &dy);   /* the dense grid with the specials */
        else { x = fnormal(n, 0, 4); dy = fnormal(n, 0, 1); }
        float *y0 = fbuf(n), *y1 = fbuf(n);
        pool pl = { d, { 0 }, 0 };
        float *dx_ = dput(&pl, x, FB(n)), *ddy = dput(&pl, dy, FB(n)), *dout = dalloc(&pl, FB(n));
        REQUIRE(dx_ && ddy && dout, "device alloc");
        for (int k = 0; k < FL_ACT_COUNT; k++) {
            char what[64];
            for (int bwd = 0; bwd < 2; bwd++) {
                snprintf(what, sizeof what, "%s %s n %lld", names[k], bwd ? "backward" : "forward", (long long)n);
                if (bwd) {
                    REQUIRE_OK(ref_act_bwd((fl_act)k, x, dy, y0, n));
                    REQUIRE_OK(fl_cuda_dev_act_bwd((fl_act)k, dx_, ddy, dout, n));
                } else {
                    REQUIRE_OK(ref_act_fwd((fl_act)k, x, y0, n));
                    REQUIRE_OK(fl_cuda_dev_act_fwd((fl_act)k, dx_, dout, n));
                }
                REQUIRE_OK(dget(&pl, y1, dout, FB(n)));
                /* every kind bit for bit (GELU's erf form too since 2026-12-06: its Φ is cpu_vmath.h's, ported) */
                check_bits(fl__failed, what, y1, y0, n);
            }
        }
        pool_free(&pl);
        free(x); free(dy); free(y0); free(y1);
    }
}

TEST(gpu_dropout_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(22);
    static const int64_t ns[] = { 0, 1, 3, 4, 5, 1001, (1 << 22) + 5 };
    static const float ps[] = { 0.0f, 0.1f, 0.5f, 0.9f, 1.0f };
    static const uint64_t offs[] = { 0, 12345, 0xFFFFFFF0ull };
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        const int64_t n = ns[a];
        float *x = fnormal(n, 0, 1), *dy = fnormal(n, 0, 1), *y0 = fbuf(n), *y1 = fbuf(n);
        uint8_t *m0 = calloc((size_t)n + 1, 1), *m1 = calloc((size_t)n + 1, 1);
        /* x·0 and dy·0 where dropped (p = 1, and p = 0.5 by the mask): NaN stays NaN and ±inf gives NaN, not 0;
         * twelve of them, so that p = 0.5 both keeps and drops each kind */
        static const float sp[] = { NAN, -INFINITY, INFINITY };
        for (int64_t i = 0; i < n && i < 12; i++) { x[i] = sp[i % 3]; dy[i] = sp[(i + 1) % 3]; }
        pool pl = { d, { 0 }, 0 };
        float *dxx = dput(&pl, x, FB(n)), *ddy = dput(&pl, dy, FB(n)), *dout = dalloc(&pl, FB(n));
        uint8_t *dm = dalloc(&pl, (size_t)n);
        REQUIRE(dxx && ddy && dout && dm, "device alloc");
        for (size_t b = 0; b < sizeof ps / sizeof ps[0]; b++)
            for (size_t c = 0; c < sizeof offs / sizeof offs[0]; c++) {
                char what[96];
                uint64_t seed = 77 + b * 3 + c;
                snprintf(what, sizeof what, "dropout n %lld p %g offset %llx", (long long)n, ps[b],
                         (unsigned long long)offs[c]);
                REQUIRE_OK(ref_dropout_fwd(x, y0, m0, n, ps[b], seed, offs[c]));
                REQUIRE_OK(fl_cuda_dev_dropout_fwd(dxx, dout, dm, n, ps[b], seed, offs[c]));
                REQUIRE_OK(dget(&pl, y1, dout, FB(n)));
                REQUIRE_OK(dget(&pl, m1, dm, (size_t)n));
                CHECK(n == 0 || memcmp(m0, m1, (size_t)n) == 0, "%s: masks differ", what);
                check_bits(fl__failed, what, y1, y0, n);
                /* backward from the device's own mask (equal to the CPU's when the line above passed) */
                REQUIRE_OK(ref_dropout_bwd(m1, dy, y0, n, ps[b]));
                REQUIRE_OK(fl_cuda_dev_dropout_bwd(dm, ddy, dout, n, ps[b]));
                REQUIRE_OK(dget(&pl, y1, dout, FB(n)));
                check_bits(fl__failed, what, y1, y0, n);
            }
        pool_free(&pl);
        free(x); free(dy); free(y0); free(y1); free(m0); free(m1);
    }
}

TEST(gpu_bias_add_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(23);
    static const int64_t shapes[][2] = { { 0, 5 }, { 5, 0 }, { 1, 1 }, { 1, 777 }, { 3000, 1 }, { 37, 1000 },
                                         { 70000, 3 }, { 2, 300000 }, { 600000, 1 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
        float *y0 = fnormal(n, 0, 1), *b = fnormal(cols, 0, 1), *y1 = fbuf(n);
        pool pl = { d, { 0 }, 0 };
        float *dy = dput(&pl, y0, FB(n)), *db = dput(&pl, b, FB(cols));
        REQUIRE(dy && db, "device alloc");
        REQUIRE_OK(ref_bias_add(y0, b, rows, cols));
        REQUIRE_OK(fl_cuda_dev_bias_add(dy, db, rows, cols));
        REQUIRE_OK(dget(&pl, y1, dy, FB(n)));
        char what[64];
        snprintf(what, sizeof what, "bias_add [%lld, %lld]", (long long)rows, (long long)cols);
        check_bits(fl__failed, what, y1, y0, n);
        pool_free(&pl);
        free(y0); free(b); free(y1);
    }
}

/* Rows of one warp (cols ≤ 1024) and of one block, the boundary either side, cols 1, many rows (more than
 * one pass of the grid), one very long row. */
static const int64_t GPU_ROW_SHAPES[][2] = { { 1, 1 }, { 5, 1 }, { 3, 31 }, { 9, 32 }, { 17, 33 }, { 64, 1000 },
                                             { 8, 1024 }, { 8, 1025 }, { 4, 5000 }, { 100000, 3 }, { 2, 70000 },
                                             { 1, 1 << 20 } };
#define N_GPU_ROW_SHAPES (sizeof GPU_ROW_SHAPES / sizeof GPU_ROW_SHAPES[0])

TEST(gpu_softmax_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(24);
    for (size_t s = 0; s < N_GPU_ROW_SHAPES; s++) {
        const int64_t rows = GPU_ROW_SHAPES[s][0], cols = GPU_ROW_SHAPES[s][1], n = rows * cols;
        float *x = logits_data(rows, cols, 3.0, true), *dy = fnormal(n, 0, 1), *y0 = fbuf(n), *y1 = fbuf(n);
        float *d0 = fbuf(n), *d1 = fbuf(n);
        double *tol = dbuf(n);
        pool pl = { d, { 0 }, 0 };
        float *dxx = dput(&pl, x, FB(n)), *ddy = dput(&pl, dy, FB(n)), *dyy = dalloc(&pl, FB(n));
        float *dyr = dalloc(&pl, FB(n)), *dout = dalloc(&pl, FB(n));
        REQUIRE(dxx && ddy && dyy && dyr && dout, "device alloc");
        for (int lg = 0; lg < 2; lg++) {
            char what[80];
            snprintf(what, sizeof what, "%s [%lld, %lld]", lg ? "log_softmax" : "softmax", (long long)rows,
                     (long long)cols);
            REQUIRE_OK(ref_softmax_fwd(lg, x, y0, rows, cols));
            REQUIRE_OK(fl_cuda_dev_softmax_fwd(lg, dxx, dyy, rows, cols));
            REQUIRE_OK(dget(&pl, y1, dyy, FB(n)));
            softmax_fwd_tol(lg, y0, rows, cols, gpu_row_depth(cols), tol);
            check_tol(fl__failed, what, y1, y0, tol, n);
            softmax_f64_check(fl__failed, what, lg, x, y1, rows, cols);
            /* backward from the CPU's y on both sides */
            REQUIRE(d->from_host(dyr, y0, FB(n)) == FL_OK, "upload");
            REQUIRE_OK(ref_softmax_bwd(lg, y0, dy, d0, rows, cols));
            REQUIRE_OK(fl_cuda_dev_softmax_bwd(lg, dyr, ddy, dout, rows, cols));
            REQUIRE_OK(dget(&pl, d1, dout, FB(n)));
            softmax_bwd_tol(lg, y0, dy, d0, rows, cols, gpu_row_depth(cols), tol);
            check_tol(fl__failed, what, d1, d0, tol, n);
        }
        pool_free(&pl);
        free(x); free(dy); free(y0); free(y1); free(d0); free(d1); free(tol);
    }
}

static const int64_t GPU_CE_SHAPES[][2] = { { 1, 1 }, { 7, 5 }, { 33, 1024 }, { 9, 1025 }, { 3, 50257 },
                                            { 100000, 3 } };
#define N_GPU_CE_SHAPES (sizeof GPU_CE_SHAPES / sizeof GPU_CE_SHAPES[0])

static fl_status gpu_ce_fwd_host_ptrs(const float *lg, const float *t, int64_t rows, int64_t cols, int64_t ign,
                                      float ls, double *loss, int64_t *count);
static fl_status gpu_ce_bwd_host_ptrs(const float *lg, const float *t, int64_t rows, int64_t cols, int64_t ign,
                                      float ls, float dloss, float *d);

TEST(gpu_cross_entropy_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(25);
    for (size_t s = 0; s < N_GPU_CE_SHAPES; s++) {
        const int64_t rows = GPU_CE_SHAPES[s][0], cols = GPU_CE_SHAPES[s][1], n = rows * cols;
        float *lg = logits_data(rows, cols, 2.0, false), *d0 = fbuf(n), *d1 = fbuf(n);
        double *tol = dbuf(n);
        pool pl = { d, { 0 }, 0 };
        float *dlg = dput(&pl, lg, FB(n)), *dt = dalloc(&pl, FB(rows)), *dd = dalloc(&pl, FB(n));
        REQUIRE(dlg && dt && dd, "device alloc");
        for (int v = 0; v < 4; v++) {
            const float ls = v & 1 ? 0.1f : 0.0f;
            const int64_t ign = v & 2 ? -100 : -1000000;
            float *t = ce_targets(rows, cols, v & 2 ? -100 : 0);
            REQUIRE(d->from_host(dt, t, FB(rows)) == FL_OK, "upload");
            char what[96];
            snprintf(what, sizeof what, "cross_entropy [%lld, %lld] smoothing %g ignore %lld", (long long)rows,
                     (long long)cols, ls, (long long)ign);
            double l0 = 0, l1 = 0;
            int64_t c0 = -1, c1 = -2;
            REQUIRE_OK(ref_ce_fwd(lg, t, rows, cols, ign, ls, &l0, &c0));
            REQUIRE_OK(fl_cuda_dev_cross_entropy_fwd(dlg, dt, rows, cols, ign, ls, &l1, &c1));
            CHECK(c0 == c1, "%s: count %lld vs %lld", what, (long long)c1, (long long)c0);
            /* fp64 row losses (the fp32 parts bit-exact) summed in another order */
            CHECK(fabs(l1 - l0) <= 1e-12 * (1.0 + fabs(l0)), "%s: loss %.17g vs %.17g", what, l1, l0);
            REQUIRE_OK(ref_ce_bwd(lg, t, rows, cols, ign, ls, 0.75f, d0));
            REQUIRE_OK(fl_cuda_dev_cross_entropy_bwd(dlg, dt, rows, cols, ign, ls, 0.75f, dd));
            REQUIRE_OK(dget(&pl, d1, dd, FB(n)));
            ce_bwd_tol(lg, t, rows, cols, ign, ls, 0.75f, c0, gpu_row_depth(cols), d0, tol);
            check_tol(fl__failed, what, d1, d0, tol, n);
            free(t);
        }
        pool_free(&pl);
        free(lg); free(d0); free(d1); free(tol);
    }
}

/* The device entries behind host pointers (upload, run, download), for ce_bad_target_case. */
static fl_status gpu_ce_fwd_host_ptrs(const float *lg, const float *t, int64_t rows, int64_t cols, int64_t ign,
                                      float ls, double *loss, int64_t *count) {
    const fl_device *d = fl_device_get(FL_DEV_CUDA);
    pool pl = { d, { 0 }, 0 };
    float *dlg = dput(&pl, lg, FB(rows * cols)), *dt = dput(&pl, t, FB(rows));
    fl_status st = dlg && dt ? fl_cuda_dev_cross_entropy_fwd(dlg, dt, rows, cols, ign, ls, loss, count) : FL_ENOMEM;
    pool_free(&pl);
    return st;
}
static fl_status gpu_ce_bwd_host_ptrs(const float *lg, const float *t, int64_t rows, int64_t cols, int64_t ign,
                                      float ls, float dloss, float *dh) {
    const fl_device *d = fl_device_get(FL_DEV_CUDA);
    pool pl = { d, { 0 }, 0 };
    float *dlg = dput(&pl, lg, FB(rows * cols)), *dt = dput(&pl, t, FB(rows)), *dd = dalloc(&pl, FB(rows * cols));
    fl_status st = dlg && dt && dd ? fl_cuda_dev_cross_entropy_bwd(dlg, dt, rows, cols, ign, ls, dloss, dd) : FL_ENOMEM;
    if (st == FL_OK) st = dget(&pl, dh, dd, FB(rows * cols));
    pool_free(&pl);
    return st;
}

TEST(gpu_cross_entropy_rejects_bad_targets_like_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(26);
    static const int64_t shapes[][2] = { { 3, 4 }, { 40, 7 }, { 100000, 3 }, { 5, 2000 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        float *lg = logits_data(shapes[s][0], shapes[s][1], 1.0, false);
        ce_bad_target_case(fl__failed, gpu_ce_fwd_host_ptrs, gpu_ce_bwd_host_ptrs, lg, shapes[s][0], shapes[s][1],
                           "gpu");
        free(lg);
    }
    /* a NaN target and a negative one; the NaN (row 1) comes first */
    float lg[12] = { 0 }, t[4] = { 0, NAN, -3, 2 };
    double loss = 0;
    int64_t cnt = 0;
    CHECK(gpu_ce_fwd_host_ptrs(lg, t, 4, 3, -100, 0.0f, &loss, &cnt) == FL_EINVAL &&
          strstr(fl_last_error_detail(), "at row 1 "), "%s", fl_last_error_detail());
    /* every row ignored: NaN, 0, zero gradient */
    float ti[4] = { -100, -100, -100, -100 }, dh[12];
    for (int i = 0; i < 12; i++) dh[i] = 1.0f;
    REQUIRE_OK(gpu_ce_fwd_host_ptrs(lg, ti, 4, 3, -100, 0.0f, &loss, &cnt));
    CHECK(isnan(loss) && cnt == 0, "loss %g count %lld", loss, (long long)cnt);
    REQUIRE_OK(gpu_ce_bwd_host_ptrs(lg, ti, 4, 3, -100, 0.1f, 1.0f, dh));
    for (int i = 0; i < 12; i++) CHECK(dh[i] == 0.0f, "dlogits[%d] = %g", i, dh[i]);
}

TEST(gpu_mse_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(27);
    static const int64_t ns[] = { 1, 255, 256, 257, 100003, (1 << 22) + 7 };
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        const int64_t n = ns[a];
        float *x = fnormal(n, 0, 2), *y = fnormal(n, 0.5, 1), *g0 = fbuf(n), *g1 = fbuf(n);
        pool pl = { d, { 0 }, 0 };
        float *dx = dput(&pl, x, FB(n)), *dy = dput(&pl, y, FB(n)), *dg = dalloc(&pl, FB(n));
        REQUIRE(dx && dy && dg, "device alloc");
        double s0 = 0, s1 = -1;
        REQUIRE_OK(ref_mse_fwd(x, y, n, &s0));
        REQUIRE_OK(fl_cuda_dev_mse_fwd(dx, dy, n, &s1));
        /* positive fp64 terms summed in another order: relative error ≤ ~n·2^-53 worst case */
        CHECK(fabs(s1 - s0) <= 1e-16 * (double)n * s0 + 1e-300, "n %lld: %.17g vs %.17g", (long long)n, s1, s0);
        const float f = 2.0f * 0.375f / (float)n;
        REQUIRE_OK(ref_mse_bwd(x, y, g0, n, f));
        REQUIRE_OK(fl_cuda_dev_mse_bwd(dx, dy, dg, n, f));
        REQUIRE_OK(dget(&pl, g1, dg, FB(n)));
        check_bits(fl__failed, "mse backward", g1, g0, n);
        pool_free(&pl);
        free(x); free(y); free(g0); free(g1);
    }
}

static const int64_t GPU_LN_SHAPES[][2] = { { 1, 1 }, { 1, 1024 }, { 3, 1025 }, { 257, 768 }, { 5, 5000 },
                                            { 20000, 8 }, { 100000, 1 }, { 2, 100000 } };
#define N_GPU_LN_SHAPES (sizeof GPU_LN_SHAPES / sizeof GPU_LN_SHAPES[0])

TEST(gpu_layernorm_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(28);
    for (size_t s = 0; s < N_GPU_LN_SHAPES; s++) {
        const int64_t rows = GPU_LN_SHAPES[s][0], cols = GPU_LN_SHAPES[s][1], n = rows * cols;
        float *x = fnormal(n, 5.0, 3.0), *dy = fnormal(n, 0, 1), *w = fnormal(cols, 1, 0.5), *b = fnormal(cols, 0, 1);
        float *y0 = fbuf(n), *y1 = fbuf(n), *m0 = fbuf(rows), *m1 = fbuf(rows), *r0 = fbuf(rows), *r1 = fbuf(rows);
        float *old_w = fnormal(cols, 0, 1), *old_b = fnormal(cols, 0, 1);
        float *dw0 = fbuf(cols), *db0 = fbuf(cols), *dw1 = fbuf(cols), *db1 = fbuf(cols), *dwh = fbuf(cols),
              *dbh = fbuf(cols);
        double *ty = dbuf(n), *tm = dbuf(rows), *tr = dbuf(rows), *tp = dbuf(cols);
        pool pl = { d, { 0 }, 0 };
        float *dX = dput(&pl, x, FB(n)), *dDY = dput(&pl, dy, FB(n)), *dW = dput(&pl, w, FB(cols));
        float *dB = dput(&pl, b, FB(cols)), *dY = dalloc(&pl, FB(n)), *dM = dalloc(&pl, FB(rows));
        float *dR = dalloc(&pl, FB(rows)), *dDW = dalloc(&pl, FB(cols)), *dDB = dalloc(&pl, FB(cols));
        REQUIRE(dX && dDY && dW && dB && dY && dM && dR && dDW && dDB, "device alloc");
        for (int v = 0; v < 4; v++) {
            const float *wv = v & 1 ? w : NULL, *bv = v & 2 ? b : NULL;
            const float *dwv = v & 1 ? dW : NULL, *dbv = v & 2 ? dB : NULL;
            char what[96];
            snprintf(what, sizeof what, "layernorm [%lld, %lld] w %d b %d", (long long)rows, (long long)cols, v & 1,
                     v >> 1);
            REQUIRE_OK(ref_ln_fwd(x, wv, bv, y0, m0, r0, rows, cols, 1e-5f));
            REQUIRE_OK(fl_cuda_dev_layernorm_fwd(dX, dwv, dbv, dY, dM, dR, rows, cols, 1e-5f));
            REQUIRE_OK(dget(&pl, y1, dY, FB(n)));
            REQUIRE_OK(dget(&pl, m1, dM, FB(rows)));
            REQUIRE_OK(dget(&pl, r1, dR, FB(rows)));
            ln_fwd_tol(x, wv, bv, m0, r0, y0, rows, cols, tm, tr, ty);
            check_tol(fl__failed, what, m1, m0, tm, rows);
            check_tol(fl__failed, what, r1, r0, tr, rows);
            check_tol(fl__failed, what, y1, y0, ty, n);
            /* backward from the CPU's statistics on both sides; dw/db accumulate into random values;
             * v == 3 also leaves dx out (NULL) */
            REQUIRE(d->from_host(dM, m0, FB(rows)) == FL_OK && d->from_host(dR, r0, FB(rows)) == FL_OK &&
                    d->from_host(dDW, old_w, FB(cols)) == FL_OK && d->from_host(dDB, old_b, FB(cols)) == FL_OK,
                    "upload");
            memcpy(dw0, old_w, FB(cols)); memcpy(db0, old_b, FB(cols));
            memcpy(dwh, old_w, FB(cols)); memcpy(dbh, old_b, FB(cols));
            REQUIRE_OK(ref_ln_bwd(x, wv, m0, r0, dy, y0, dw0, db0, rows, cols));
            fl_cuda_nn_layernorm_bwd_host(x, wv, m0, r0, dy, NULL, dwh, dbh, rows, cols);
            REQUIRE_OK(fl_cuda_dev_layernorm_bwd(dX, dwv, dM, dR, dDY, v == 3 ? NULL : dY, dDW, v == 2 ? NULL : dDB,
                                                 rows, cols));
            REQUIRE_OK(dget(&pl, dw1, dDW, FB(cols)));
            REQUIRE_OK(dget(&pl, db1, dDB, FB(cols)));
            if (v != 3) {
                REQUIRE_OK(dget(&pl, y1, dY, FB(n)));
                ln_dx_tol(x, wv, m0, r0, dy, y0, rows, cols, gpu_row_depth(cols), ty);
                check_tol(fl__failed, what, y1, y0, ty, n);
            }
            ln_param_tol(x, m0, r0, dy, old_w, dw0, rows, cols, true, tp);
            check_tol(fl__failed, what, dw1, dw0, tp, cols);
            /* the device's chunked column sums, replayed on the host in the same order: bit for bit */
            check_bits(fl__failed, what, dw1, dwh, cols);
            if (v == 2) check_bits(fl__failed, "db left out stays", db1, old_b, cols);
            else {
                ln_param_tol(x, m0, r0, dy, old_b, db0, rows, cols, false, tp);
                check_tol(fl__failed, what, db1, db0, tp, cols);
                check_bits(fl__failed, what, db1, dbh, cols);
            }
        }
        pool_free(&pl);
        free(x); free(dy); free(w); free(b); free(y0); free(y1); free(m0); free(m1); free(r0); free(r1);
        free(old_w); free(old_b); free(dw0); free(db0); free(dw1); free(db1); free(dwh); free(dbh);
        free(ty); free(tm); free(tr); free(tp);
    }
}

TEST(gpu_embedding_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(29);
    /* (n, vocab, dim): one position, dims that are and are not multiples of 4, many repeats of few
     * indices (long runs), a large vocabulary with few repeats */
    static const int64_t cases[][3] = { { 1, 1, 1 }, { 1, 5, 768 }, { 37, 10, 3 }, { 5000, 10, 4 }, { 4096, 50257, 64 },
                                        { 20000, 7, 130 }, { 300, 1000, 1030 }, { 70000, 3, 1 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t n = cases[c][0], vocab = cases[c][1], dim = cases[c][2];
        float *idx = fbuf(n), *w = fnormal(vocab * dim, 0, 1), *y0 = fbuf(n * dim), *y1 = fbuf(n * dim);
        float *dy = fnormal(n * dim, 0, 1), *g0 = fnormal(vocab * dim, 0, 1), *g1 = fbuf(vocab * dim);
        for (int64_t i = 0; i < n; i++) idx[i] = (float)(int64_t)(urand() * (double)vocab);
        if (n > 2) idx[n - 1] = idx[0];
        pool pl = { d, { 0 }, 0 };
        float *dI = dput(&pl, idx, FB(n)), *dW = dput(&pl, w, FB(vocab * dim)), *dY = dalloc(&pl, FB(n * dim));
        float *dDY = dput(&pl, dy, FB(n * dim)), *dG = dput(&pl, g0, FB(vocab * dim));
        REQUIRE(dI && dW && dY && dDY && dG, "device alloc");
        char what[96];
        snprintf(what, sizeof what, "embedding n %lld vocab %lld dim %lld", (long long)n, (long long)vocab,
                 (long long)dim);
        REQUIRE_OK(ref_emb_fwd(idx, n, w, vocab, dim, y0));
        REQUIRE_OK(fl_cuda_dev_embedding_fwd(dI, n, dW, vocab, dim, dY));
        REQUIRE_OK(dget(&pl, y1, dY, FB(n * dim)));
        check_bits(fl__failed, what, y1, y0, n * dim);
        /* the same additions in the same order as the CPU: bit for bit */
        REQUIRE_OK(ref_emb_bwd(idx, n, dy, vocab, dim, g0));
        REQUIRE_OK(fl_cuda_dev_embedding_bwd(dI, n, dDY, vocab, dim, dG));
        REQUIRE_OK(dget(&pl, g1, dG, FB(vocab * dim)));
        check_bits(fl__failed, what, g1, g0, vocab * dim);
        pool_free(&pl);
        free(idx); free(w); free(y0); free(y1); free(dy); free(g0); free(g1);
    }
    /* an unaligned view (offset by one float): the scalar copy path */
    float idx[3] = { 2, 0, 2 }, w[13], y0[12], y1[12];
    for (int i = 0; i < 13; i++) w[i] = (float)i;
    pool pl = { d, { 0 }, 0 };
    float *dI = dput(&pl, idx, sizeof idx), *dW = dput(&pl, w, sizeof w), *dY = dalloc(&pl, sizeof y1 + 4);
    REQUIRE(dI && dW && dY, "device alloc");
    REQUIRE_OK(ref_emb_fwd(idx, 3, w + 1, 3, 4, y0));
    REQUIRE_OK(fl_cuda_dev_embedding_fwd(dI, 3, dW + 1, 3, 4, dY + 1));
    REQUIRE_OK(dget(&pl, y1, dY + 1, sizeof y1));
    check_bits(fl__failed, "embedding unaligned", y1, y0, 12);
    pool_free(&pl);
}

TEST(gpu_embedding_rejects_bad_indices_like_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    static const float bads[][2] = { { 10.0f, 3.0f }, { -1.0f, 2.5f }, { NAN, 11.0f }, { 2.5f, -0.5f } };
    float w[40] = { 0 }, y[80];
    for (size_t c = 0; c < sizeof bads / sizeof bads[0]; c++) {
        float idx[20];
        for (int i = 0; i < 20; i++) idx[i] = (float)(i % 10);
        idx[13] = bads[c][1];
        idx[6] = bads[c][0];   /* the first bad position */
        char cpu_msg[512];
        CHECK(ref_emb_fwd(idx, 20, w, 10, 4, y) == FL_EINVAL, "cpu accepted index %g", bads[c][0]);
        snprintf(cpu_msg, sizeof cpu_msg, "%s", fl_last_error_detail());
        pool pl = { d, { 0 }, 0 };
        float *dI = dput(&pl, idx, sizeof idx), *dW = dput(&pl, w, sizeof w), *dY = dalloc(&pl, sizeof y);
        REQUIRE(dI && dW && dY, "device alloc");
        CHECK(fl_cuda_dev_embedding_fwd(dI, 20, dW, 10, 4, dY) == FL_EINVAL, "gpu accepted index %g", bads[c][0]);
        CHECK(strcmp(fl_last_error_detail(), cpu_msg) == 0 && strstr(cpu_msg, "position 6"), "\"%s\" vs \"%s\"",
              fl_last_error_detail(), cpu_msg);
        /* dim 0 still checks the indices */
        CHECK(fl_cuda_dev_embedding_fwd(dI, 20, dW, 10, 0, dY) == FL_EINVAL, "dim 0 accepted index %g", bads[c][0]);
        /* the backward skips what it cannot place (the CPU's is not defined there) and leaves the rest as the
         * CPU would with those positions removed */
        float g0[40], g1[40], dyh[80], idx_ok[20];
        for (int i = 0; i < 40; i++) g0[i] = (float)i * 0.25f;
        for (int i = 0; i < 80; i++) dyh[i] = (float)(i % 7) - 3.0f;
        float *dG = dput(&pl, g0, sizeof g0), *dDY = dput(&pl, dyh, sizeof dyh);
        REQUIRE(dG && dDY, "device alloc");
        REQUIRE_OK(fl_cuda_dev_embedding_bwd(dI, 20, dDY, 10, 4, dG));
        REQUIRE_OK(dget(&pl, g1, dG, sizeof g1));
        int64_t m = 0;
        float dy_ok[80];
        for (int i = 0; i < 20; i++) {
            double t = idx[i];
            if (!(t >= 0 && t < 10 && t == floor(t))) continue;
            idx_ok[m] = idx[i];
            memcpy(dy_ok + m * 4, dyh + i * 4, 4 * sizeof(float));
            m++;
        }
        REQUIRE_OK(ref_emb_bwd(idx_ok, m, dy_ok, 10, 4, g0));
        check_bits(fl__failed, "embedding backward with bad indices", g1, g0, 40);
        pool_free(&pl);
    }
}

/* The same calls twice give the same bits: every reduction has a fixed order. */
TEST(gpu_nn_reductions_are_deterministic) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    rseed(30);
    const int64_t rows = 4099, cols = 771, n = rows * cols, vocab = 13;
    float *x = fnormal(n, 1, 2), *dy = fnormal(n, 0, 1), *t = ce_targets(rows, cols, -100), *idx = fbuf(rows);
    for (int64_t i = 0; i < rows; i++) idx[i] = (float)(i % vocab);
    const int64_t nout = 2 * cols + vocab * cols;
    float *zero = fbuf(nout), *out[2] = { fbuf(nout), fbuf(nout) };
    double loss[2], sum[2];
    pool pl = { d, { 0 }, 0 };
    float *dX = dput(&pl, x, FB(n)), *dDY = dput(&pl, dy, FB(n)), *dT = dput(&pl, t, FB(rows));
    float *dI = dput(&pl, idx, FB(rows)), *dY = dalloc(&pl, FB(n)), *dM = dalloc(&pl, FB(rows));
    float *dR = dalloc(&pl, FB(rows)), *dAcc = dalloc(&pl, FB(nout));
    REQUIRE(dX && dDY && dT && dI && dY && dM && dR && dAcc, "device alloc");
    float *dW = dAcc, *dB = dAcc + cols, *dG = dAcc + 2 * cols;
    REQUIRE_OK(fl_cuda_dev_layernorm_fwd(dX, NULL, NULL, dY, dM, dR, rows, cols, 1e-5f));
    for (int k = 0; k < 2; k++) {
        int64_t cnt = 0;
        REQUIRE_OK(fl_cuda_dev_cross_entropy_fwd(dX, dT, rows, cols, -100, 0.1f, &loss[k], &cnt));
        REQUIRE_OK(fl_cuda_dev_mse_fwd(dX, dDY, n, &sum[k]));
        REQUIRE(d->from_host(dAcc, zero, FB(nout)) == FL_OK, "upload");
        REQUIRE_OK(fl_cuda_dev_layernorm_bwd(dX, NULL, dM, dR, dDY, dY, dW, dB, rows, cols));
        REQUIRE_OK(fl_cuda_dev_embedding_bwd(dI, rows, dDY, vocab, cols, dG));
        REQUIRE_OK(dget(&pl, out[k], dAcc, FB(nout)));
    }
    CHECK(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0, "cross-entropy %.17g then %.17g", loss[0], loss[1]);
    CHECK(memcmp(&sum[0], &sum[1], sizeof sum[0]) == 0, "mse %.17g then %.17g", sum[0], sum[1]);
    check_bits(fl__failed, "dw, db, dweight of two runs", out[1], out[0], nout);
    pool_free(&pl);
    free(x); free(dy); free(t); free(idx); free(zero); free(out[0]); free(out[1]);
}

#endif
