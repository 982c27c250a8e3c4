/* test_fma_mm.c — the CPU's own GEMM on bf16, fp16 and fp32 operands (fl_cpu_fma_mm: cpu_fp8_mm.c's driver with
 * an FMA family widening the 16-bit values while it packs: AVX-512 where the CPU has it, and AVX2, the same bits),
 * against a float64 reference: every product of two bf16 or two fp16 values is exact in fp32, so the only error is fp32 accumulation (|err| ≤ K·2⁻²³·Σ|a·b|),
 * and an fp32 product is rounded with its sum by the FMA (the same bound). The three types, every orientation of
 * each operand, batches (one operand broadcast), sizes that are multiples of no block, a 16-bit result rounded as
 * fl_cpu_store rounds, the same bits on 1 and 2 threads, non-finite values, and the device entry (cpu_matmul.c)
 * taking it on CPUs without AVX-512 (fp32 from FL_CPU_FMA_MM_F32_MIN FLOPs), and bf16 where an FMA family is the
 * CPU's fastest (AMX and AVX512_BF16 disallowed). */
#include "runner.h"
#include <omp.h>
#include <stdlib.h>
#include "cpu/cpu_internal.h"
#include "ops_raw.h"
#include "rng.h"
#include "tensor.h"

/* A [B, r, c] tensor of type dt holding v (fp32, B·r·c values, each exact in dt): contiguous, or (tr) the
 * transposed view of a contiguous [B, c, r]. */
static fl_tensor *operand(const float *v, int64_t B, int64_t r, int64_t c, fl_dtype dt, bool tr) {
    int64_t shape[3] = { B, tr ? c : r, tr ? r : c };
    fl_tensor *f = NULL, *base = NULL, *out = NULL;
    if (fl_tensor_empty(&f, FL_F32, 3, shape, FL_DEV_CPU) != FL_OK) return NULL;
    float *d = fl_tensor_data(f);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) d[b * r * c + (tr ? j * r + i : i * c + j)] = v[b * r * c + i * c + j];
    fl_status st = fl_tensor_to(&base, f, dt);
    fl_tensor_release(f);
    if (st != FL_OK) return NULL;
    if (!tr) return base;
    st = fl_tensor_transpose(&out, base, 1, 2);
    fl_tensor_release(base);
    return st == FL_OK ? out : NULL;
}

/* n values exact in dt, spread over many binades (dt's subnormals included for fp16). */
static void rand_values(float *v, size_t n, fl_dtype dt, fl_rng *r) {
    fl_rng_normal(r, v, n, 0.0f, 1.0f);
    for (size_t i = 0; i < n; i++) {
        const int e = (int)(((uint64_t)(i + n) * 0x9E3779B97F4A7C15ull) >> 58) % 17 - (dt == FL_F16 ? 12 : 8);
        v[i] = ldexpf(v[i], dt == FL_F16 && i % 7 == 0 ? -20 : e);
    }
    fl_tensor *f = NULL, *h = NULL, *back = NULL;   /* round each to dt */
    int64_t shape[1] = { (int64_t)n };
    if (fl_tensor_empty(&f, FL_F32, 1, shape, FL_DEV_CPU) != FL_OK) return;
    memcpy(fl_tensor_data(f), v, n * 4);
    if (fl_tensor_to(&h, f, dt) == FL_OK && fl_tensor_to(&back, h, FL_F32) == FL_OK) memcpy(v, fl_tensor_data(back), n * 4);
    fl_tensor_release(f); fl_tensor_release(h); fl_tensor_release(back);
}

/* fl_cpu_fma_mm into a new [B, M, N] tensor of type odt on `threads` threads; NULL if it failed or declined. */
static fl_tensor *run_fma(int *fl__failed, const fl_tensor *a, const fl_tensor *b, int64_t B, fl_dtype odt, int threads) {
    int64_t shape[3] = { B, a->shape[1], b->shape[2] };
    fl_tensor *d = NULL;
    if (fl_tensor_empty(&d, odt, 3, shape, FL_DEV_CPU) != FL_OK) return NULL;
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    bool done = false;
    fl_status st = fl_cpu_fma_mm(d, a, b, &done);
    omp_set_num_threads(before);
    CHECK(st == FL_OK, "half mm: %s", fl_last_error());
    if (st != FL_OK || !done) { fl_tensor_release(d); return NULL; }
    return d;
}

typedef struct { int64_t b, m, n, k; } shape4;

TEST(fma_mm_matches_float64_reference) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
        fprintf(stderr, "  (skipped: no AVX2 + FMA + F16C)\n");
        return;
    }
    const shape4 shapes[] = { { 1, 1, 1, 1 }, { 1, 7, 13, 3 }, { 1, 9, 8, 1 }, { 2, 33, 70, 517 }, { 1, 130, 45, 1030 },
                              { 3, 17, 40, 64 },     /* batch, b broadcast (below) */
                              { 1, 40, 300, 700 },   /* N > M: split by columns on 2 threads */
                              { 1, 530, 520, 600 } };   /* by rows, with stealing: 2 column blocks, 3 K blocks */
    const fl_dtype types[3] = { FL_BF16, FL_F16, FL_F32 };
    fl_rng r;
    fl_rng_seed(&r, 2026);
    int cases = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int ti = 0; ti < 3; ti++)
            for (int v = 0; v < 8; v++) {
                const bool big = si == sizeof shapes / sizeof *shapes - 1;   /* slow float64 reference: 2 cases */
                if (big && v != 0 && v != 3) continue;
                const int64_t B = shapes[si].b, M = shapes[si].m, N = shapes[si].n, K = shapes[si].k;
                const bool ta = v & 1, tb = v & 2, bcast = (v & 4) && B > 1;
                const int64_t Bb = bcast ? 1 : B;
                const fl_dtype dt = types[ti];
                float *va = malloc(sizeof(float) * B * M * K), *vb = malloc(sizeof(float) * Bb * K * N);
                rand_values(va, (size_t)(B * M * K), dt, &r);
                rand_values(vb, (size_t)(Bb * K * N), dt, &r);
                fl_tensor *a = operand(va, B, M, K, dt, ta), *b = operand(vb, Bb, K, N, dt, tb);
                REQUIRE(a && b, "operands: %s", fl_last_error());
                char what[160];
                snprintf(what, sizeof what, "%s [%lld x %lld %lld %lld]%s%s%s", fl_format(dt)->name, (long long)B,
                         (long long)M, (long long)N, (long long)K, ta ? " a^T" : "", tb ? " b^T" : "",
                         bcast ? " b broadcast" : "");
                fl_tensor *d2 = run_fma(fl__failed, a, b, B, FL_F32, 2), *d1 = run_fma(fl__failed, a, b, B, FL_F32, 1);
                fl_tensor *h = run_fma(fl__failed, a, b, B, dt, 2);
                fl_cpu_avx512_allowed = false;   /* the AVX2 family, where the others ran the AVX-512 one */
                fl_tensor *d0 = run_fma(fl__failed, a, b, B, FL_F32, 2);
                fl_cpu_avx512_allowed = true;
                CHECK(d2 && d1 && h && d0, "%s: declined", what);
                if (d2 && d1 && h && d0) {
                    const float *g = fl_tensor_data(d2);
                    CHECK(memcmp(g, fl_tensor_data(d1), sizeof(float) * B * M * N) == 0, "%s: 1 and 2 threads differ", what);
                    CHECK(memcmp(g, fl_tensor_data(d0), sizeof(float) * B * M * N) == 0, "%s: the families differ", what);
                    int bad = 0;
                    double worst = 0;
                    for (int64_t q = 0; q < B; q++)
                        for (int64_t i = 0; i < M; i++)
                            for (int64_t j = 0; j < N; j++) {
                                double s = 0, S = 0;
                                for (int64_t k = 0; k < K; k++) {
                                    const double p = (double)va[(q * M + i) * K + k] * vb[((bcast ? 0 : q) * K + k) * N + j];
                                    s += p;
                                    S += fabs(p);
                                }
                                const double tol = (double)K * ldexp(1.0, -23) * S + 1e-300;
                                const double err = fabs(g[(q * M + i) * N + j] - s);
                                if (!(err <= tol)) bad++;
                                if (err / tol > worst) worst = err / tol;
                            }
                    CHECK(bad == 0, "%s: %d of %lld outside the fp32 accumulation bound (worst %.3g of it)", what, bad,
                          (long long)(B * M * N), worst);
                    fl_tensor *want = NULL;   /* the 16-bit result: the fp32 one rounded as everywhere else */
                    CHECK_OK(fl_tensor_to(&want, d2, dt));
                    CHECK(want && memcmp(fl_tensor_data(want), fl_tensor_data(h), fl_format(dt)->size * B * M * N) == 0,
                          "%s: the %s result is not the fp32 result rounded", what, fl_format(dt)->name);
                    fl_tensor_release(want);
                }
                cases++;
                fl_tensor_release(d0); fl_tensor_release(d1); fl_tensor_release(d2); fl_tensor_release(h);
                fl_tensor_release(a); fl_tensor_release(b);
                free(va); free(vb);
            }
    CHECK(cases == (int)(sizeof shapes / sizeof *shapes - 1) * 3 * 8 + 6, "%d cases", cases);
}

/* NaN and infinity in, NaN and infinity out where IEEE arithmetic puts them; the switch; mixed types declined;
 * the device entry's choice (below). */
TEST(fma_mm_nonfinite_switch_and_device_entry) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
        fprintf(stderr, "  (skipped: no AVX2 + FMA + F16C)\n");
        return;
    }
    const int64_t M = 70, N = 90, K = 300;
    fl_rng r;
    fl_rng_seed(&r, 7);
    for (int ti = 0; ti < 3; ti++) {
        const fl_dtype dt = ti == 0 ? FL_BF16 : ti == 1 ? FL_F16 : FL_F32;
        float *va = malloc(sizeof(float) * M * K), *vb = malloc(sizeof(float) * K * N);
        rand_values(va, (size_t)(M * K), dt, &r);
        rand_values(vb, (size_t)(K * N), dt, &r);
        va[3 * K + 5] = NAN;             /* row 3 of C: NaN */
        va[4 * K + 6] = INFINITY;        /* row 4: ±inf where b[6, j] ≠ 0, NaN where it is 0 */
        vb[6 * N + 2] = 0.0f;
        for (int64_t k = 0; k < K; k++) va[5 * K + k] = k == 9 ? INFINITY : 0.0f;   /* row 5: inf·b[9, j] only */
        vb[9 * N + 1] = 0.0f;
        vb[9 * N + 4] = 2.0f;
        fl_tensor *a = operand(va, 1, M, K, dt, true), *b = operand(vb, 1, K, N, dt, false);
        REQUIRE(a && b, "operands: %s", fl_last_error());
        fl_tensor *d = run_fma(fl__failed, a, b, 1, FL_F32, 2);
        REQUIRE(d, "%s: declined", fl_format(dt)->name);
        const float *g = fl_tensor_data(d);
        int bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                const float x = g[i * N + j];
                const bool ok = i == 3 ? isnan(x)
                              : i == 4 ? (j == 2 ? isnan(x) : isinf(x) || isnan(x))
                              : i == 5 ? (j == 1 ? isnan(x) : j == 4 ? x == INFINITY : !isfinite(x))
                              : isfinite(x);
                if (!ok) bad++;
            }
        CHECK(bad == 0, "%s: %d elements with the wrong finiteness", fl_format(dt)->name, bad);
        CHECK(g[5 * N + 4] == INFINITY && isnan(g[5 * N + 1]), "%s: inf·2 = %g, inf·0 = %g", fl_format(dt)->name,
              (double)g[5 * N + 4], (double)g[5 * N + 1]);
        fl_tensor_release(d);
        /* the switch, and what it does not read: mixed types */
        bool done = true;
        int64_t shape[3] = { 1, M, N };
        fl_tensor *e = NULL, *a32 = NULL;
        REQUIRE_OK(fl_tensor_empty(&e, FL_F32, 3, shape, FL_DEV_CPU));
        fl_cpu_fma_mm_allowed = false;
        CHECK_OK(fl_cpu_fma_mm(e, a, b, &done));
        CHECK(!done, "switched off, yet it ran");
        fl_cpu_fma_mm_allowed = true;
        REQUIRE_OK(fl_tensor_to(&a32, a, dt == FL_F32 ? FL_BF16 : FL_F32));
        done = true;
        CHECK_OK(fl_cpu_fma_mm(e, a32, b, &done));
        CHECK(!done, "%s x %s: it should decline", fl_format(a32->dtype)->name, fl_format(dt)->name);
        fl_tensor_release(e); fl_tensor_release(a32);
        fl_tensor_release(a); fl_tensor_release(b);
        free(va); free(vb);
    }
    /* The device entry: a linear layer's fprop (x [B, M, K] · Wᵀ, W [N, K]) through fl_matmul_raw: bf16 [3, 70, 300]
     * x [300, 90], where fl_cpu_fma_mm runs on a CPU without AVX-512 (oneDNN has no bf16 kernel there); fp32
     * [1, 520, 500] x [500, 500] (260 MFLOP, at least FL_CPU_FMA_MM_F32_MIN), where it runs whenever AVX-512 is not
     * used, so also with it disallowed; fp32 [3, 70, 300] x [300, 90] (below it), where oneDNN runs. Where
     * fl_cpu_fma_mm runs the entry gives its bits, else those of the switched-off call; the two are within two
     * accumulation bounds of each other. */
    for (int ti = 0; ti < 3; ti++) {
        const fl_dtype dt = ti ? FL_F32 : FL_BF16;
        const bool big = ti == 1, own = dt == FL_F32 ? big : true;
        const int64_t B = big ? 1 : 3, M = big ? 520 : 70, K = big ? 500 : 300, N = big ? 500 : 90;
        char name[64];
        snprintf(name, sizeof name, "%s [%lld x %lld %lld %lld]", fl_format(dt)->name, (long long)B, (long long)M,
                 (long long)N, (long long)K);
        float *vx = malloc(sizeof(float) * B * M * K), *vw = malloc(sizeof(float) * N * K);
        rand_values(vx, (size_t)(B * M * K), dt, &r);
        rand_values(vw, (size_t)(N * K), dt, &r);
        fl_tensor *x = operand(vx, B, M, K, dt, false), *w = operand(vw, 1, N, K, dt, false);
        REQUIRE(x && w, "operands: %s", fl_last_error());
        fl_tensor *w2 = NULL, *wt = NULL, *wt3 = NULL, *y = NULL, *yw = NULL;
        int64_t s2[2] = { N, K };
        REQUIRE_OK(fl_tensor_reshape(&w2, w, 2, s2));
        REQUIRE_OK(fl_tensor_transpose(&wt, w2, 0, 1));
        REQUIRE_OK(fl_tensor_transpose(&wt3, w, 1, 2));
        if (dt == FL_F32) fl_cpu_avx512_allowed = false;
        /* bf16: as on a CPU whose fastest family is an FMA one (Intel without AMX, AVX-512 without BF16, or no
         * AVX-512), where the device entry takes it */
        fl_cpu_amx_allowed = fl_cpu_avx512_bf16_allowed = dt == FL_F32;
        CHECK(dt == FL_F32 || fl_cpu_fma_mm_first(), "%s: an FMA family should come first", name);
        CHECK_OK(fl_matmul_raw(&y, x, wt, dt, FL_F32));
        fl_cpu_fma_mm_allowed = false;
        CHECK_OK(fl_matmul_raw(&yw, x, wt, dt, FL_F32));
        fl_cpu_fma_mm_allowed = true;
        fl_cpu_avx512_allowed = fl_cpu_amx_allowed = fl_cpu_avx512_bf16_allowed = true;
        fl_tensor *direct = run_fma(fl__failed, x, wt3, B, FL_F32, omp_get_max_threads());
        REQUIRE(direct && y && yw, "%s: a call failed or declined", name);
        const float *gy = fl_tensor_data(y), *gw = fl_tensor_data(yw), *gd = fl_tensor_data(direct);
        int bad = 0;
        for (int64_t q = 0; q < B; q++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double S = 0;
                    for (int64_t k = 0; k < K; k++) S += fabs((double)vx[(q * M + i) * K + k] * vw[j * K + k]);
                    if (fabs((double)gy[(q * M + i) * N + j] - gw[(q * M + i) * N + j]) > 2.0 * K * ldexp(1.0, -23) * S)
                        bad++;
                }
        CHECK(bad == 0, "%s: %d elements: the device entry and oneDNN differ by more than two bounds", name, bad);
        const size_t bytes = sizeof(float) * (size_t)(B * M * N);
        if (own) CHECK(memcmp(gy, gd, bytes) == 0, "%s: the device entry did not run fl_cpu_fma_mm", name);
        else if (dt == FL_F32) CHECK(memcmp(gy, gw, bytes) == 0, "%s: below the threshold, yet not oneDNN's bits", name);
        fl_tensor_release(x); fl_tensor_release(w); fl_tensor_release(w2); fl_tensor_release(wt); fl_tensor_release(wt3);
        fl_tensor_release(y); fl_tensor_release(yw); fl_tensor_release(direct);
        free(vx); free(vw);
    }
}

/* bf16 GEMMs with K = 63 on two threads: oneDNN 2.6's AMX kernel died of SIGILL there (the whole process; every M
 * and N tried), so where oneDNN runs AMX cpu_matmul.c declines small K tails to its fp32 path (amx_k_tail). Both
 * entries — the device's matmul (a transposed B, a batch) and the raw strided GEMM attention uses — against a float64
 * reference, with K around the tail. On other CPUs the same calls take oneDNN's own kernels and must agree too. */
TEST(bf16_gemm_small_k_tails_two_threads) {
    const int64_t ks[] = { 63, 31, 33, 62, 64, 65 };
    fl_rng r;
    fl_rng_seed(&r, 63);
    const int before = omp_get_max_threads();
    omp_set_num_threads(2);
    for (size_t t = 0; t < 3 * sizeof ks / sizeof ks[0]; t++) {
        /* one [M, K] · [K, N] (B row-major, then column-major), then a batch of 2 with B broadcast */
        const int form = (int)(t % 3);
        const int64_t B = form == 2 ? 2 : 1, M = 17, N = 48, K = ks[t / 3];
        float *va = malloc(sizeof(float) * (size_t)(B * M * K)), *vb = malloc(sizeof(float) * (size_t)(K * N));
        REQUIRE(va && vb, "out of memory");
        rand_values(va, (size_t)(B * M * K), FL_BF16, &r);
        rand_values(vb, (size_t)(K * N), FL_BF16, &r);
        fl_tensor *a = operand(va, B, M, K, FL_BF16, false), *b1 = operand(vb, 1, K, N, FL_BF16, form > 0), *b = NULL;
        int64_t bs[3] = { B, K, N };
        REQUIRE(a && b1 && fl_tensor_expand(&b, b1, 3, bs) == FL_OK, "K=%lld: operands", (long long)K);
        int64_t ds[3] = { B, M, N };
        fl_tensor *d = NULL;
        REQUIRE(fl_tensor_empty(&d, FL_F32, 3, ds, FL_DEV_CPU) == FL_OK, "alloc");
        CHECK_OK(fl_cpu_dev_matmul(d, a, b));
        /* the raw GEMM: A as bf16 rows of lda = K + 3 (a view into a wider buffer), B column-major, one batch */
        const int64_t lda = K + 3;
        uint16_t *ha = calloc((size_t)(M * lda), 2), *hb = malloc((size_t)(K * N) * 2);
        float *c = malloc(sizeof(float) * (size_t)(M * N));
        REQUIRE(ha && hb && c, "out of memory");
        for (int64_t i = 0; i < M; i++) fl_f32_to_bf16_n(va + i * K, ha + i * lda, (size_t)K);
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < K; k++) fl_f32_to_bf16_n(vb + k * N + j, hb + j * K + k, 1);
        CHECK_OK(fl_cpu_gemm_bf16(1, M, N, K, ha, lda, M * lda, false, hb, K, K * N, true, c, N, M * N));
        const float *gd = fl_tensor_data(d);
        int bad = 0;
        for (int64_t q = 0; q < B; q++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double S = 0, A = 0;
                    for (int64_t k = 0; k < K; k++) {
                        const double p = (double)va[(q * M + i) * K + k] * vb[k * N + j];
                        S += p;
                        A += fabs(p);
                    }
                    const double tol = (K + 2) * ldexp(1.0, -23) * A;
                    if (fabs(gd[(q * M + i) * N + j] - S) > tol) bad++;
                    if (q == 0 && fabs(c[i * N + j] - S) > tol) bad++;
                }
        CHECK(bad == 0, "K=%lld, form %d: %d elements off the float64 reference by more than fp32 accumulation's bound",
              (long long)K, form, bad);
        fl_tensor_release(a); fl_tensor_release(b1); fl_tensor_release(b); fl_tensor_release(d);
        free(va); free(vb); free(ha); free(hb); free(c);
    }
    omp_set_num_threads(before);
}
