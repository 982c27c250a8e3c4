/* test_softmax_bits.c — the softmax family's sums of exponentials in their one order (core/cpu/cpu_nn_softmax.c:
 * 8 lanes, lane l adding elements l, l + 8, ... of the whole groups of 8, the tail added to lane 0, then 0 + lane 0 +
 * ... + lane 7), written out here in scalar code, against both CPU copies (AVX2 and, where the CPU has it, AVX-512):
 * softmax, log-softmax and cross-entropy forward, and cross-entropy's backward, bit for bit. The AVX2 copy is the
 * code of before stop 92, so this also pins the bits fp8lab gave before the AVX-512 copies. */
#include "runner.h"
#include "cpu/cpu_nn.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_nn_internal.h"
#include <stdint.h>
#include <stdlib.h>

static uint64_t sb_state = 0x9E3779B97F4A7C15ull;
static double sb_rand(void) {   /* xorshift64 */
    sb_state ^= sb_state << 13; sb_state ^= sb_state >> 7; sb_state ^= sb_state << 17;
    return (double)(sb_state >> 11) / 9007199254740992.0;
}

static float ref_max(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}
/* the order, in float lanes (softmax) or double lanes (log-softmax, cross-entropy) */
static float ref_exp_sum(const float *x, float *y, int64_t n, float m) {
    float lane[8] = { 0 };
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n; j++) {
        const float e = fl_nn_expf(x[j] - m);
        if (y) y[j] = e;
        lane[j < n8 ? j % 8 : 0] += e;
    }
    float s = 0.0f;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}
static double ref_sumexp(const float *x, int64_t n, float m) {
    double lane[8] = { 0 };
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n; j++) lane[j < n8 ? j % 8 : 0] += (double)fl_nn_expf(x[j] - m);
    double s = 0.0;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}

/* equal bits, or both NaN (a NaN's payload is not part of the contract) */
static int64_t first_diff(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) && !(isnan(a[i]) && isnan(b[i]))) return i;
    return -1;
}

/* One row of `cols` values of a kind: 0 normal·s, 1 spread over ±200 (subnormal and zero exponentials), 2 with
 * infinities and a NaN, 3 all −inf, 4 zeros of both signs and negatives (a zero maximum), 5 one value repeated */
static void fill_row(float *x, int64_t cols, int kind) {
    for (int64_t j = 0; j < cols; j++) {
        const double u = sb_rand();
        switch (kind) {
        case 0: x[j] = (float)((u - 0.5) * 12.0); break;
        case 1: x[j] = (float)((u - 0.5) * 400.0); break;
        case 2: x[j] = u < 0.1 ? -INFINITY : u < 0.15 ? INFINITY : u < 0.17 ? NAN : (float)(u * 5.0); break;
        case 3: x[j] = -INFINITY; break;
        case 4: x[j] = u < 0.3 ? 0.0f : u < 0.6 ? -0.0f : (float)(-u * 30.0); break;
        default: x[j] = 3.25f; break;
        }
    }
}

/* rows of the six kinds in turn (rows ≥ 6) */
static void check_cols(int *fl__failed, int64_t ROWS, int64_t cols, bool wide) {
    float *x = malloc(sizeof(float) * ROWS * cols), *y = malloc(sizeof(float) * ROWS * cols);
    float *r = malloc(sizeof(float) * ROWS * cols), *d = malloc(sizeof(float) * ROWS * cols);
    float tg[6];
    for (int k = 0; k < ROWS; k++) fill_row(x + k * cols, cols, k % 6);
    for (int k = 0; k < 6; k++) tg[k] = (float)((k * 7) % cols);
    fl_cpu_avx512_allowed = wide;
    const char *isa = wide ? "AVX-512" : "AVX2";

    fl_cpu_softmax_fwd(x, y, ROWS, cols);
    for (int k = 0; k < ROWS; k++) {
        const float *xr = x + k * cols;
        float *rr = r + k * cols;
        const float m = ref_max(xr, cols), inv = 1.0f / ref_exp_sum(xr, rr, cols, m);
        for (int64_t j = 0; j < cols; j++) rr[j] *= inv;
    }
    int64_t at = first_diff(y, r, ROWS * cols);
    CHECK(at < 0, "%s softmax cols %lld: element %lld %.9g, order's %.9g", isa, (long long)cols, (long long)at,
          at < 0 ? 0.0 : y[at], at < 0 ? 0.0 : r[at]);

    fl_cpu_log_softmax_fwd(x, y, ROWS, cols);
    for (int k = 0; k < ROWS; k++) {
        const float *xr = x + k * cols;
        const float m = ref_max(xr, cols), ls = (float)log(ref_sumexp(xr, cols, m));
        for (int64_t j = 0; j < cols; j++) r[k * cols + j] = (xr[j] - m) - ls;
    }
    at = first_diff(y, r, ROWS * cols);
    CHECK(at < 0, "%s log_softmax cols %lld: element %lld %.9g, order's %.9g", isa, (long long)cols, (long long)at,
          at < 0 ? 0.0 : y[at], at < 0 ? 0.0 : r[at]);

    /* cross-entropy on the finite rows (0, 1, 4, 5), each row's loss alone and the mean, with label smoothing */
    const int fin[4] = { 0, 1, 4, 5 };
    for (int f = 0; f < 4; f++) {
        const float *xr = x + fin[f] * cols;
        const float t = tg[fin[f]];
        for (int s = 0; s < 2; s++) {
            const float eps = s ? 0.1f : 0.0f;
            double loss = 0;
            int64_t cnt = 0;
            CHECK_OK(fl_cpu_cross_entropy_fwd(xr, &t, 1, cols, -100, eps, &loss, &cnt));
            const float m = ref_max(xr, cols);
            double l = ((double)m + log(ref_sumexp(xr, cols, m))) - (1.0 - eps) * (double)xr[(int64_t)t];
            if (eps != 0.0f) {   /* the smoothing term's plain sum is the kernel's own loop on either ISA */
                double sx = 0.0;
                double lane[8] = { 0 };
                const int64_t n8 = cols & ~(int64_t)7;
                for (int64_t j = 0; j < cols; j++) lane[j < n8 ? j % 8 : 0] += (double)xr[j];
                for (int q = 0; q < 8; q++) sx += lane[q];
                l -= (double)eps / (double)cols * sx;
            }
            const double want = (0.0 + l) / 1.0;
            CHECK(!memcmp(&loss, &want, sizeof loss), "%s cross_entropy cols %lld row kind %d eps %g: %.17g, order's %.17g",
                  isa, (long long)cols, fin[f], eps, loss, want);
            CHECK_OK(fl_cpu_cross_entropy_bwd(xr, &t, 1, cols, -100, eps, 1.0f, d));
            const float off = eps / (float)cols, on = 1.0f - eps;
            const float inv = 1.0f / ref_exp_sum(xr, r, cols, m);
            for (int64_t j = 0; j < cols; j++) r[j] = 1.0f * (r[j] * inv - off);
            r[(int64_t)t] -= 1.0f * on;
            at = first_diff(d, r, cols);
            CHECK(at < 0, "%s cross_entropy backward cols %lld row kind %d: element %lld %.9g, order's %.9g", isa,
                  (long long)cols, fin[f], (long long)at, at < 0 ? 0.0 : d[at], at < 0 ? 0.0 : r[at]);
        }
    }
    fl_cpu_avx512_allowed = true;
    free(x); free(y); free(r); free(d);
}

TEST(softmax_sums_in_one_order_on_each_isa) {
    const int64_t cols[] = { 1, 2, 7, 8, 9, 15, 16, 17, 23, 24, 31, 33, 40, 47, 48, 63, 64, 65, 100, 127, 1000, 1001,
                             4099, 32000 };
    for (int w = 0; w < 2; w++) {
        if (w && !fl_cpu_avx512()) { fprintf(stderr, "  (AVX-512 copy skipped: no AVX-512 on this CPU)\n"); break; }
        for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) check_cols(fl__failed, 6, cols[i], w == 1);
        check_cols(fl__failed, 72, 32001, w == 1);   /* 9 MB: log-softmax's streamed stores, rows off 64-byte lines */
    }
}

/* The backward passes' sums in the same order (row_dot: y·dy, or dy alone for log-softmax), and the columns kernels
 * (fl_cpu_softmax_dim_fwd/_bwd, a dim with a stride: stop 96) against the row kernels on the transposed copy, bit for
 * bit, forward and backward, on both copies, over [outer, size, inner] shapes whose tiles end in part-vectors. */
static void check_dims(int *fl__failed, int64_t outer, int64_t size, int64_t inner, bool wide) {
    const int64_t n = outer * size * inner;
    float *x = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n), *xt = malloc(sizeof(float) * n);
    float *gt = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n), *yt = malloc(sizeof(float) * n);
    float *d = malloc(sizeof(float) * n), *dt = malloc(sizeof(float) * n), *r = malloc(sizeof(float) * n);
    /* each column (o, c) of x a row of fill_row's kinds in turn */
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < inner; c++) {
            fill_row(r, size, (int)((o * inner + c) % 6));
            for (int64_t i = 0; i < size; i++) {
                x[(o * size + i) * inner + c] = r[i];
                g[(o * size + i) * inner + c] = (float)((sb_rand() - 0.5) * 4.0);
            }
        }
    /* xt: [outer, inner, size], the columns as rows */
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < size; i++)
            for (int64_t c = 0; c < inner; c++) {
                xt[(o * inner + c) * size + i] = x[(o * size + i) * inner + c];
                gt[(o * inner + c) * size + i] = g[(o * size + i) * inner + c];
            }
    fl_cpu_avx512_allowed = wide;
    const char *isa = wide ? "AVX-512" : "AVX2";
    for (int log_ = 0; log_ < 2; log_++) {
        const char *fn = log_ ? "log_softmax" : "softmax";
        if (log_) {
            fl_cpu_log_softmax_fwd(xt, yt, outer * inner, size);
            fl_cpu_log_softmax_bwd(yt, gt, dt, outer * inner, size);
        } else {
            fl_cpu_softmax_fwd(xt, yt, outer * inner, size);
            fl_cpu_softmax_bwd(yt, gt, dt, outer * inner, size);
        }
        /* the row backward against the order written out */
        for (int64_t k = 0; k < outer * inner; k++) {
            const float *yr = yt + k * size, *gr = gt + k * size;
            float lane[8] = { 0 }, s = 0.0f;
            const int64_t n8 = size & ~(int64_t)7;
            for (int64_t j = 0; j < size; j++) lane[j < n8 ? j % 8 : 0] += log_ ? gr[j] : yr[j] * gr[j];
            for (int l = 0; l < 8; l++) s += lane[l];
            for (int64_t j = 0; j < size; j++)
                r[k * size + j] = log_ ? gr[j] - fl_nn_expf(yr[j]) * s : yr[j] * (gr[j] - s);
        }
        int64_t at = first_diff(dt, r, n);
        CHECK(at < 0, "%s %s backward rows of %lld: element %lld %.9g, order's %.9g", isa, fn, (long long)size,
              (long long)at, at < 0 ? 0.0 : dt[at], at < 0 ? 0.0 : r[at]);
        fl_cpu_softmax_dim_fwd(log_, x, y, outer, size, inner);
        fl_cpu_softmax_dim_bwd(log_, y, g, d, outer, size, inner);
        int64_t bad_y = -1, bad_d = -1;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < size; i++)
                for (int64_t c = 0; c < inner; c++) {
                    const int64_t a = (o * size + i) * inner + c, b = (o * inner + c) * size + i;
                    if (bad_y < 0 && first_diff(y + a, yt + b, 1) >= 0) bad_y = a;
                    if (bad_d < 0 && first_diff(d + a, dt + b, 1) >= 0) bad_d = a;
                }
        CHECK(bad_y < 0, "%s %s along [%lld, %lld, %lld]'s middle dim: element %lld differs from the rows' kernel", isa,
              fn, (long long)outer, (long long)size, (long long)inner, (long long)bad_y);
        CHECK(bad_d < 0, "%s %s backward along [%lld, %lld, %lld]'s middle dim: element %lld differs from the rows'",
              isa, fn, (long long)outer, (long long)size, (long long)inner, (long long)bad_d);
    }
    fl_cpu_avx512_allowed = true;
    free(x); free(g); free(xt); free(gt); free(y); free(yt); free(d); free(dt); free(r);
}

TEST(softmax_along_a_strided_dim_gives_the_rows_bits) {
    const int64_t shapes[][3] = { { 1, 1, 1 }, { 1, 7, 3 }, { 2, 8, 5 }, { 3, 9, 16 }, { 1, 17, 17 }, { 2, 33, 31 },
                                  { 1, 4, 300 }, { 2, 100, 65 }, { 1, 1030, 20 }, { 1, 6000, 3 }, { 1, 2, 530 },
                                  { 3, 70, 64 }, { 1, 9, 1040 },
                                  { 1, 2100, 1024 } };   /* (8.6 MB: the copied tiles' results streamed) */
    for (int w = 0; w < 2; w++) {
        if (w && !fl_cpu_avx512()) { fprintf(stderr, "  (AVX-512 copy skipped: no AVX-512 on this CPU)\n"); break; }
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            check_dims(fl__failed, shapes[i][0], shapes[i][1], shapes[i][2], w == 1);
    }
}

/* The bf16 entry (fl_cpu_softmax_fwd_bf16: each row widened into a buffer, then the fp32 rows' passes) against the fp32
 * kernels on the widened tensor, bit for bit, softmax and log-softmax, on both copies, over fill_row's kinds rounded to
 * bf16 (a NaN, infinities, all −inf, signed zeros) and lengths around the 8- and 16-lane groups; the last 8.7 MB of
 * fp32 results (log-softmax's streamed stores). */
static void check_bf16(int *fl__failed, int64_t rows, int64_t cols, bool wide) {
    float *x = malloc(sizeof(float) * rows * cols), *y = malloc(sizeof(float) * rows * cols);
    float *r = malloc(sizeof(float) * rows * cols);
    uint16_t *xb = malloc(sizeof(uint16_t) * rows * cols);
    for (int64_t k = 0; k < rows; k++) fill_row(x + k * cols, cols, (int)(k % 6));
    for (int64_t i = 0; i < rows * cols; i++) { xb[i] = fl_f32_to_bf16(x[i]); x[i] = fl_bf16_to_f32(xb[i]); }
    fl_cpu_avx512_allowed = wide;
    for (int log_ = 0; log_ < 2; log_++) {
        if (log_) fl_cpu_log_softmax_fwd(x, r, rows, cols); else fl_cpu_softmax_fwd(x, r, rows, cols);
        CHECK(fl_cpu_softmax_fwd_bf16(log_, xb, y, rows, cols), "no row buffer");
        const int64_t at = first_diff(y, r, rows * cols);
        CHECK(at < 0, "%s bf16 %s [%lld, %lld]: element %lld %.9g, the fp32 kernel's %.9g", wide ? "AVX-512" : "AVX2",
              log_ ? "log_softmax" : "softmax", (long long)rows, (long long)cols, (long long)at, at < 0 ? 0.0 : y[at],
              at < 0 ? 0.0 : r[at]);
    }
    fl_cpu_avx512_allowed = true;
    free(x); free(y); free(r); free(xb);
}

TEST(softmax_of_bf16_rows_gives_the_fp32_kernels_bits) {
    const int64_t cols[] = { 1, 7, 8, 9, 16, 17, 33, 100, 1000, 1024, 4099 };
    for (int w = 0; w < 2; w++) {
        if (w && !fl_cpu_avx512()) { fprintf(stderr, "  (AVX-512 copy skipped: no AVX-512 on this CPU)\n"); break; }
        for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) check_bf16(fl__failed, 12, cols[i], w == 1);
        check_bf16(fl__failed, 68, 32001, w == 1);
    }
}
