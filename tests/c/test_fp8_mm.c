/* test_fp8_mm.c — the CPU's own FP8 GEMM (core/cpu/cpu_fp8_mm.c), each kernel family (AMX where the CPU has it;
 * AVX512_BF16 where the CPU has it, by clearing fl_cpu_amx_allowed and fl_cpu_fma512_allowed; AVX-512 FMA where
 * it has AVX-512, by clearing fl_cpu_avx512_bf16_allowed too; AVX2 + FMA everywhere, by clearing
 * fl_cpu_avx512_allowed), against a float64 reference over the
 * decoded values: every product of two FP8 values is exact in fp32, so the only error is fp32 accumulation
 * (|err| ≤ K·2^-23·Σ|a||b|·|scale|) plus the scale and bias roundings. Both formats, both orientations of each
 * operand, sizes that are multiples of no block, the same bits on 1 and 2 threads (split by columns, and by rows
 * with work stealing over several column and K blocks; 2-8 threads over many K blocks), per-row/per-column scales (rowwise scaling), and the
 * switches. */
#include "runner.h"
#include <omp.h>
#include <stdlib.h>
#include "cpu/cpu_fp8_mm.h"
#include "ops.h"
#include "rng.h"
#include "tensor.h"

/* Kernel family f (0: AMX, 1: AVX512_BF16, 2: AVX-512 FMA, 3: AVX2 + FMA) selected; false (and a note) where this
 * CPU has not got it. Callers put the switches back with fam_reset() when done. */
enum { FAMS = 4, FAM_FMA512 = 2, FAM_FMA = 3 };
static const char *const fam_name[FAMS] = { "amx_bf16", "avx512_bf16", "avx512_fma", "avx2_fma" };
static void fam_reset(void) {
    fl_cpu_avx512_allowed = true;
    fl_cpu_avx512_bf16_allowed = true;
    fl_cpu_fma512_allowed = true;
    fl_cpu_amx_allowed = true;
}
static bool fam_select(int f) {
    fam_reset();
    fl_cpu_amx_allowed = f == 0;
    fl_cpu_avx512_bf16_allowed = f <= 1;
    fl_cpu_fma512_allowed = f != 1;   /* on Intel's CPUs it comes before AVX512_BF16 */
    fl_cpu_avx512_allowed = f < FAM_FMA;
    const char *got = fl_cpu_fp8_mm_family();
    if (!got || strcmp(got, fam_name[f]) != 0) {
        fprintf(stderr, "  (%s skipped: not on this CPU)\n", fam_name[f]);
        fam_reset();
        return false;
    }
    return true;
}

/* Random finite FP8 bytes (no NaN, no inf), every exponent. */
static void rand_bytes(uint8_t *q, size_t n, fl_dtype fmt, uint64_t *s) {
    for (size_t i = 0; i < n; i++) {
        uint8_t b;
        do {
            *s = *s * 6364136223846793005ull + 1442695040888963407ull;
            b = (uint8_t)(*s >> 56);
        } while (!isfinite(fl_fp8_to_f32(b, fmt)));
        q[i] = b;
    }
}

/* An FP8 [r, c] operand holding the logical matrix v (r × c bytes, row-major) with scale_inv s: contiguous,
 * or (tr) the transposed view of a contiguous [c, r] tensor. */
static fl_tensor *operand(const uint8_t *v, int64_t r, int64_t c, fl_dtype fmt, float s, bool tr) {
    int64_t shape[2] = { tr ? c : r, tr ? r : c };
    fl_tensor *base = NULL, *out = NULL;
    if (fl_tensor_empty(&base, fmt, 2, shape, FL_DEV_CPU) != FL_OK) return NULL;
    uint8_t *d = fl_tensor_data(base);
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) d[tr ? j * r + i : i * c + j] = v[i * c + j];
    *(float *)fl_tensor_data(base->scale_inv) = s;
    if (!tr) return base;
    fl_status st = fl_tensor_transpose(&out, base, 0, 1);
    fl_tensor_release(base);
    return st == FL_OK ? out : NULL;
}

/* operand() with one scale per index of logical axis `axis` (0: per row, 1: per column) instead of one. */
static fl_tensor *operand_vec(const uint8_t *v, int64_t r, int64_t c, fl_dtype fmt, const float *s, int axis, bool tr) {
    fl_tensor *t = operand(v, r, c, fmt, 1.0f, false);
    if (!t) return NULL;
    int64_t ns = axis == 0 ? r : c;
    fl_tensor_release(t->scale_inv);
    t->scale_inv = NULL;
    if (fl_tensor_empty(&t->scale_inv, FL_F32, 1, &ns, FL_DEV_CPU) != FL_OK) { fl_tensor_release(t); return NULL; }
    memcpy(fl_tensor_data(t->scale_inv), s, (size_t)ns * sizeof(float));
    t->scale_axis = axis;
    if (!tr) return t;
    /* the transposed layout: a contiguous [c, r] holding v transposed, its scales along the other axis */
    uint8_t *vt = malloc((size_t)(r * c));
    for (int64_t i = 0; i < r; i++)
        for (int64_t j = 0; j < c; j++) vt[j * r + i] = v[i * c + j];
    fl_tensor *base = operand_vec(vt, c, r, fmt, s, 1 - axis, false), *out = NULL;
    free(vt);
    fl_tensor_release(t);
    if (!base) return NULL;
    fl_status st = fl_tensor_transpose(&out, base, 0, 1);
    fl_tensor_release(base);
    return st == FL_OK ? out : NULL;
}

/* Row i of a [M, K] times column j of b [K, N] in float64 over the decoded bytes; *S = Σ|a·b| (the bound's scale). */
static double ref_dot(const uint8_t *qa, fl_dtype fa, const uint8_t *qb, fl_dtype fb, int64_t i, int64_t j, int64_t N,
                      int64_t K, double *S) {
    double s = 0;
    *S = 0;
    for (int64_t k = 0; k < K; k++) {
        double p = (double)fl_fp8_to_f32(qa[i * K + k], fa) * fl_fp8_to_f32(qb[k * N + j], fb);
        s += p;
        *S += fabs(p);
    }
    return s;
}

typedef struct { int64_t m, n, k; } shape3;

/* One GEMM through fl_cpu_fp8_mm on `threads` threads (with the addend res [M, N] unless NULL); *got [M, N].
 * Returns whether it ran. */
static bool run_mm_res(int *fl__failed, const fl_tensor *a, const fl_tensor *b, const float *bias, const float *res,
                       float *got, int threads) {
    int64_t shape[2] = { a->shape[0], b->shape[1] };
    fl_tensor *d = NULL;
    if (fl_tensor_empty(&d, FL_F32, 2, shape, FL_DEV_CPU) != FL_OK) return false;
    int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    bool done = false;
    fl_status st = fl_cpu_fp8_mm(d, a, b, bias, res, &done);
    omp_set_num_threads(before);
    CHECK(st == FL_OK, "fp8 mm: %s", fl_last_error());
    memcpy(got, fl_tensor_data(d), (size_t)(shape[0] * shape[1]) * 4);
    fl_tensor_release(d);
    return st == FL_OK && done;
}
static bool run_mm(int *fl__failed, const fl_tensor *a, const fl_tensor *b, const float *bias, float *got, int threads) {
    return run_mm_res(fl__failed, a, b, bias, NULL, got, threads);
}

static void reference_every_layout(int *fl__failed, int fam) {
    const shape3 shapes[] = { { 1, 1, 1 }, { 1, 37, 5 }, { 7, 13, 3 }, { 9, 8, 1 }, { 33, 70, 517 },
                              { 130, 45, 1030 }, { 64, 96, 64 }, { 300, 33, 97 }, { 17, 300, 1 },
                              { 40, 300, 700 },     /* N > M: split by columns on 2 threads */
                              { 50, 40, 1024 },     /* K a whole number of K blocks in both families */
                              { 530, 520, 1100 } }; /* by rows, with stealing: 2 column blocks, 2 K blocks */
    const fl_dtype pairs[][2] = { { FL_E4M3, FL_E4M3 }, { FL_E5M2, FL_E4M3 }, { FL_E4M3, FL_E5M2 }, { FL_E5M2, FL_E5M2 } };
    uint64_t seed = 12345;
    int cases = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int pi = 0; pi < 4; pi++)
            for (int v = 0; v < 8; v++) {
                const bool big = si == sizeof shapes / sizeof *shapes - 1;   /* its float64 reference is slow: 2 cases */
                if (big && (pi != 0 || (v != 0 && v != 7))) continue;
                const int64_t M = shapes[si].m, N = shapes[si].n, K = shapes[si].k;
                const fl_dtype fa = pairs[pi][0], fb = pairs[pi][1];
                const bool ta = v & 1, tb = v & 2, with_bias = v & 4;
                uint8_t *qa = malloc(M * K), *qb = malloc(K * N);
                float *bias = malloc(N * 4), *got = malloc(M * N * 4), *got1 = malloc(M * N * 4);
                rand_bytes(qa, (size_t)(M * K), fa, &seed);
                rand_bytes(qb, (size_t)(K * N), fb, &seed);
                fl_rng r;
                fl_rng_seed(&r, 40 + v);
                fl_rng_normal(&r, bias, (size_t)N, 0.0f, 100.0f);
                const float sa = 0.37f, sb = 1.5f, scale = sa * sb;
                fl_tensor *a = operand(qa, M, K, fa, sa, ta), *b = operand(qb, K, N, fb, sb, tb);
                REQUIRE(a && b, "operands: %s", fl_last_error());
                char what[160];
                snprintf(what, sizeof what, "%s: %s x %s [%lld %lld %lld]%s%s%s", fam_name[fam], fl_format(fa)->name,
                         fl_format(fb)->name, (long long)M, (long long)N, (long long)K, ta ? " a^T" : "", tb ? " b^T" : "",
                         with_bias ? " bias" : "");
                bool ran = run_mm(fl__failed, a, b, with_bias ? bias : NULL, got, 2);
                CHECK(ran, "%s: the new path declined", what);
                bool ran1 = run_mm(fl__failed, a, b, with_bias ? bias : NULL, got1, 1);
                CHECK(ran1 && memcmp(got, got1, (size_t)(M * N) * 4) == 0, "%s: 1 and 2 threads differ", what);
                int bad = 0;
                double worst = 0;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double S, s = ref_dot(qa, fa, qb, fb, i, j, N, K, &S);
                        double ref = s * scale + (with_bias ? bias[j] : 0.0);
                        double tol = (double)(K + 1) * ldexp(1.0, -23) * S * scale + ldexp(1.0, -22) * fabs(ref) + 1e-30;
                        double err = fabs(got[i * N + j] - ref);
                        if (!(err <= tol)) bad++;
                        if (err / tol > worst) worst = err / tol;
                    }
                CHECK(bad == 0, "%s: %d of %lld outside the fp32 accumulation bound (worst %.3g of it)", what, bad,
                      (long long)(M * N), worst);
                cases++;
                fl_tensor_release(a); fl_tensor_release(b);
                free(qa); free(qb); free(bias); free(got); free(got1);
            }
    CHECK(cases == (int)(sizeof shapes / sizeof *shapes - 1) * 4 * 8 + 2, "%s: %d cases", fam_name[fam], cases);
}

TEST(fp8_mm_matches_float64_reference_every_layout) {
    for (int fam = 0; fam < FAMS; fam++)
        if (fam_select(fam)) reference_every_layout(fl__failed, fam);
    fam_reset();
}

/* The row split's stealing across K blocks: no barrier between the K blocks, a group's step waits for its own
 * previous one. More threads than CPUs (3, 4 and 8 on this machine's 2) are preempted mid-group, so threads run
 * steps apart and take each other's groups; every call must give the 1-thread bits. A shape of many K blocks
 * (12 of 250 in the AVX2 family) and groups (21 of 24 rows), small columns so each call is quick; both
 * orientations of each operand (a transposed b: every thread decodes and transposes its own copy of each B
 * block). Without the wait a group's K block can read C before the one before it stored it. */
static void steal_across_k_blocks(int *fl__failed, int fam) {
    const int64_t M = 500, N = 64, K = 3000;
    uint64_t seed = 7;
    uint8_t *qa = malloc(M * K), *qb = malloc(K * N);
    float *got = malloc(M * N * 4), *got1 = malloc(M * N * 4);
    rand_bytes(qa, (size_t)(M * K), FL_E4M3, &seed);
    rand_bytes(qb, (size_t)(K * N), FL_E5M2, &seed);
    for (int v = 0; v < 4; v++) {
        const bool ta = v & 1, tb = v & 2;
        fl_tensor *a = operand(qa, M, K, FL_E4M3, 0.25f, ta), *b = operand(qb, K, N, FL_E5M2, 2.0f, tb);
        REQUIRE(a && b, "operands: %s", fl_last_error());
        REQUIRE(run_mm(fl__failed, a, b, NULL, got1, 1), "%s: the new path declined", fam_name[fam]);
        const int threads[] = { 2, 3, 4, 8 };
        int differ = 0, calls = 0;
        for (int t = 0; t < 4; t++)
            for (int rep = 0; rep < 12; rep++, calls++) {
                memset(got, 0xff, (size_t)(M * N) * 4);
                if (!run_mm(fl__failed, a, b, NULL, got, threads[t]) || memcmp(got, got1, (size_t)(M * N) * 4) != 0)
                    differ++;
            }
        CHECK(differ == 0, "%s%s%s: %d of %d calls on 2-8 threads differ from 1 thread", fam_name[fam], ta ? " a^T" : "",
              tb ? " b^T" : "", differ, calls);
        fl_tensor_release(a); fl_tensor_release(b);
    }
    free(qa); free(qb); free(got); free(got1);
}
TEST(fp8_mm_steals_across_k_blocks) {
    for (int fam = 0; fam < FAMS; fam++)
        if (fam_select(fam)) steal_across_k_blocks(fl__failed, fam);
    fam_reset();
}

/* The codes that are not finite numbers: E4M3's NaN (0x7f, 0xff) in a row of a makes that row of C NaN, and
 * E5M2's NaN (0x7e) in b a column; E5M2's infinities (0x7c, 0xfc) at (k, j) of b make column j infinite (NaN
 * where a[i, k] is ±0); every other element stays finite. Each family, both orientations of each operand. */
static void nonfinite_codes(int *fl__failed, int fam) {
    const int64_t M = 30, N = 21, K = 40;
    uint64_t seed = 99;
    uint8_t *qa = malloc(M * K), *qb = malloc(K * N);
    float *got = malloc(M * N * 4);
    for (int v = 0; v < 4; v++) {
        const bool ta = v & 1, tb = v & 2;
        rand_bytes(qa, (size_t)(M * K), FL_E4M3, &seed);
        rand_bytes(qb, (size_t)(K * N), FL_E5M2, &seed);
        qa[1 * K + 3] = 0x7f;
        qa[7 * K + 0] = 0xff;
        qb[5 * N + 2] = 0x7c;    /* +inf at (k 5, column 2) */
        qb[9 * N + 11] = 0xfc;   /* -inf at (k 9, column 11) */
        qb[20 * N + 17] = 0x7e;  /* NaN at (k 20, column 17) */
        fl_tensor *a = operand(qa, M, K, FL_E4M3, 0.5f, ta), *b = operand(qb, K, N, FL_E5M2, 2.0f, tb);
        REQUIRE(a && b, "operands: %s", fl_last_error());
        CHECK(run_mm(fl__failed, a, b, NULL, got, 2), "%s: the new path declined", fam_name[fam]);
        int bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                const float c = got[i * N + j];
                const bool nan_row = i == 1 || i == 7, nan_col = j == 17;
                const bool inf = j == 2 || j == 11;
                if (nan_row || nan_col ? !isnan(c) : inf ? isfinite(c) : !isfinite(c)) bad++;
            }
        CHECK(bad == 0, "%s%s%s: %d of %lld elements with the wrong finiteness", fam_name[fam], ta ? " a^T" : "",
              tb ? " b^T" : "", bad, (long long)(M * N));
        fl_tensor_release(a); fl_tensor_release(b);
    }
    free(qa); free(qb); free(got);
}
TEST(fp8_mm_nan_and_inf_codes) {
    for (int fam = 0; fam < FAMS; fam++)
        if (fam_select(fam)) nonfinite_codes(fl__failed, fam);
    fam_reset();
}

/* Every finite code of both formats through each family's packers, exactly: a [256, 2] holds code i in row i at K
 * position `pos` (0 or 1: the first or second of a bf16 pair) and +0 at the other, b [2, 1] two ones, so C[i] is
 * the one product code i × 1, exact in fp32 (added to +0, so -0 gives +0); and the same with the codes in b
 * [2, 256] and a [1, 2] two ones.
 * Both layouts of each operand (the K-contiguous rows and the paired walk down K, for a the transposed one) and
 * non-finite codes skipped (nonfinite_codes has them). */
static void every_code(int *fl__failed, int fam) {
    const fl_dtype fmts[2] = { FL_E4M3, FL_E5M2 };
    int bad = 0, cases = 0;
    for (int f = 0; f < 2; f++)
        for (int v = 0; v < 8; v++) {
            const fl_dtype fmt = fmts[f], fo = fmts[1 - f];
            const bool tr = v & 1, in_b = v & 2;
            const int pos = (v >> 2) & 1;
            uint8_t one = 0;
            while (fl_fp8_to_f32(one, fo) != 1.0f) one++;
            uint8_t codes[512], ones[2] = { one, one };
            for (int i = 0; i < 256; i++) {
                codes[2 * i + pos] = (uint8_t)i;
                codes[2 * i + 1 - pos] = 0;
            }
            uint8_t codes_t[512];   /* b [2, 256]: row k holds each code's k-th element */
            for (int i = 0; i < 256; i++) {
                codes_t[pos * 256 + i] = (uint8_t)i;
                codes_t[(1 - pos) * 256 + i] = 0;
            }
            fl_tensor *a = in_b ? operand(ones, 1, 2, fo, 1.0f, tr) : operand(codes, 256, 2, fmt, 1.0f, tr);
            fl_tensor *b = in_b ? operand(codes_t, 2, 256, fmt, 1.0f, tr) : operand(ones, 2, 1, fo, 1.0f, tr);
            REQUIRE(a && b, "operands: %s", fl_last_error());
            float got[256];
            CHECK(run_mm(fl__failed, a, b, NULL, got, 1), "%s: the new path declined", fam_name[fam]);
            for (int i = 0; i < 256; i++) {
                const float dec = fl_fp8_to_f32((uint8_t)i, fmt);
                if (!isfinite(dec)) continue;
                const volatile float zero = 0.0f;   /* the sums start at +0: -0's sum is +0 */
                const float want = zero + dec;
                cases++;
                if (memcmp(&got[i], &want, 4) != 0 && bad++ < 4)
                    fprintf(stderr, "  %s %s code 0x%02x in %s (%s, pair slot %d): got %a, want %a\n", fam_name[fam],
                            fl_format(fmt)->name, i, in_b ? "b" : "a", tr ? "transposed" : "contiguous", pos,
                            (double)got[i], (double)want);
            }
            fl_tensor_release(a); fl_tensor_release(b);
        }
    CHECK(bad == 0 && cases > 0, "%s: %d of %d codes decoded wrongly", fam_name[fam], bad, cases);
}
TEST(fp8_mm_decodes_every_code_exactly) {
    for (int fam = 0; fam < FAMS; fam++)
        if (fam_select(fam)) every_code(fl__failed, fam);
    fam_reset();
}

/* Per-row scales of a and per-column scales of b (rowwise scaling; either alone, or both), applied as C is
 * stored: each element is sum·(sa[i]·sb[j]) + bias[j] with the fp32 product of the two scales, as decode +
 * oneDNN's scale pass computes it. Within the accumulation bound of a float64 reference, the same bits on 1 and
 * 2 threads, within two bounds of decode + oneDNN; a scale axis along K is declined. */
static void per_row_and_per_column_scales(int *fl__failed, int fam) {
    const shape3 shapes[] = { { 33, 70, 517 }, { 130, 45, 1030 }, { 300, 33, 97 }, { 40, 300, 700 }, { 530, 100, 600 } };
    uint64_t seed = 777;
    int cases = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int v = 0; v < 12; v++) {
            const int64_t M = shapes[si].m, N = shapes[si].n, K = shapes[si].k;
            const bool ta = v & 1, tb = v & 2;
            const int kind = v / 4;   /* 0: both vectors, 1: rows of a only, 2: columns of b only */
            const bool va = kind != 2, vb = kind != 1, with_bias = si % 2 == 0;
            uint8_t *qa = malloc(M * K), *qb = malloc(K * N);
            float *sa = malloc(M * 4), *sb = malloc(N * 4), *bias = malloc(N * 4);
            float *got = malloc(M * N * 4), *got1 = malloc(M * N * 4), *old = malloc(M * N * 4);
            rand_bytes(qa, (size_t)(M * K), FL_E4M3, &seed);
            rand_bytes(qb, (size_t)(K * N), v % 2 ? FL_E5M2 : FL_E4M3, &seed);
            const fl_dtype fb = v % 2 ? FL_E5M2 : FL_E4M3;
            fl_rng r;
            fl_rng_seed(&r, 70 + v);
            fl_rng_uniform(&r, sa, (size_t)M, 0.01f, 4.0f);
            fl_rng_uniform(&r, sb, (size_t)N, 0.01f, 4.0f);
            fl_rng_normal(&r, bias, (size_t)N, 0.0f, 10.0f);
            fl_tensor *a = va ? operand_vec(qa, M, K, FL_E4M3, sa, 0, ta) : operand(qa, M, K, FL_E4M3, sa[0], ta);
            fl_tensor *b = vb ? operand_vec(qb, K, N, fb, sb, 1, tb) : operand(qb, K, N, fb, sb[0], tb);
            REQUIRE(a && b, "operands: %s", fl_last_error());
            char what[160];
            snprintf(what, sizeof what, "%s: [%lld %lld %lld]%s%s scales %s", fam_name[fam], (long long)M, (long long)N, (long long)K,
                     ta ? " a^T" : "", tb ? " b^T" : "", kind == 0 ? "rows+columns" : kind == 1 ? "rows" : "columns");
            const float *pb = with_bias ? bias : NULL;
            bool ran = run_mm(fl__failed, a, b, pb, got, 2);
            CHECK(ran, "%s: the new path declined", what);
            bool ran1 = run_mm(fl__failed, a, b, pb, got1, 1);
            CHECK(ran1 && memcmp(got, got1, (size_t)(M * N) * 4) == 0, "%s: 1 and 2 threads differ", what);
            /* decode + oneDNN and its scale pass */
            int64_t shape[2] = { M, N };
            fl_tensor *d = NULL, *bt = NULL;
            REQUIRE_OK(fl_tensor_empty(&d, FL_F32, 2, shape, FL_DEV_CPU));
            if (with_bias) {
                REQUIRE_OK(fl_tensor_empty(&bt, FL_F32, 1, &shape[1], FL_DEV_CPU));
                memcpy(fl_tensor_data(bt), bias, (size_t)N * 4);
            }
            fl_cpu_fp8_mm_allowed = false;
            CHECK_OK(fl_cpu_device()->fp8_gemm(d, a, b, bt, NULL, NULL, false));
            fl_cpu_fp8_mm_allowed = true;
            memcpy(old, fl_tensor_data(d), (size_t)(M * N) * 4);
            fl_tensor_release(d); fl_tensor_release(bt);
            int bad = 0, bad_old = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double S, sum = ref_dot(qa, FL_E4M3, qb, fb, i, j, N, K, &S);
                    const float sc = (va ? sa[i] : sa[0]) * (vb ? sb[j] : sb[0]);
                    double ref = sum * sc + (with_bias ? bias[j] : 0.0);
                    double bound = (double)(K + 1) * ldexp(1.0, -23) * S * sc;
                    if (!(fabs(got[i * N + j] - ref) <= bound + ldexp(1.0, -22) * fabs(ref) + 1e-30)) bad++;
                    if (!(fabs((double)got[i * N + j] - old[i * N + j]) <= 2.0 * bound + ldexp(1.0, -21) * fabs(ref) + 1e-30))
                        bad_old++;
                }
            CHECK(bad == 0, "%s: %d of %lld outside the fp32 accumulation bound", what, bad, (long long)(M * N));
            CHECK(bad_old == 0, "%s: %d of %lld differ from decode + oneDNN by more than two bounds", what, bad_old,
                  (long long)(M * N));
            cases++;
            fl_tensor_release(a); fl_tensor_release(b);
            free(qa); free(qb); free(sa); free(sb); free(bias); free(got); free(got1); free(old);
        }
    CHECK(cases == 5 * 12, "%s: %d cases", fam_name[fam], cases);
    /* scales along K (a per column, b per row) are not what the epilogue applies: declined */
    const int64_t M = 20, N = 24, K = 16;
    uint8_t q[20 * 24];
    float s[24];
    for (int i = 0; i < 24; i++) s[i] = 1.0f + (float)i;
    memset(q, 0x38, sizeof q);
    fl_tensor *a = operand_vec(q, M, K, FL_E4M3, s, 1, false), *b = operand(q, K, N, FL_E4M3, 1.0f, false);
    fl_tensor *bk = operand_vec(q, K, N, FL_E4M3, s, 0, false), *a1 = operand(q, M, K, FL_E4M3, 1.0f, false);
    REQUIRE(a && b && bk && a1, "operands: %s", fl_last_error());
    int64_t shape[2] = { M, N };
    fl_tensor *d = NULL;
    REQUIRE_OK(fl_tensor_empty(&d, FL_F32, 2, shape, FL_DEV_CPU));
    bool done = true;
    CHECK_OK(fl_cpu_fp8_mm(d, a, b, NULL, NULL, &done));
    CHECK(!done, "a scaled per column (along K): expected to decline");
    done = true;
    CHECK_OK(fl_cpu_fp8_mm(d, a1, bk, NULL, NULL, &done));
    CHECK(!done, "b scaled per row (along K): expected to decline");
    fl_tensor_release(a); fl_tensor_release(b); fl_tensor_release(bk); fl_tensor_release(a1); fl_tensor_release(d);
}

TEST(fp8_mm_per_row_and_per_column_scales) {
    for (int fam = 0; fam < FAMS; fam++)
        if (fam_select(fam)) per_row_and_per_column_scales(fl__failed, fam);
    fam_reset();
}

/* Through the device entry: the new path and decode + oneDNN (switch cleared) agree within the bound of
 * each; the switch makes fl_cpu_fp8_mm decline, fl_cpu_avx512_allowed cleared makes it take AVX2 + FMA; the
 * shape policy. */
TEST(fp8_mm_switches_and_device_entry) {
    const int64_t M = 70, N = 90, K = 300;
    uint64_t seed = 99;
    uint8_t *qa = malloc(M * K), *qb = malloc(K * N);
    rand_bytes(qa, (size_t)(M * K), FL_E5M2, &seed);
    rand_bytes(qb, (size_t)(K * N), FL_E4M3, &seed);
    fl_tensor *a = operand(qa, M, K, FL_E5M2, 0.25f, true), *b = operand(qb, K, N, FL_E4M3, 3.0f, false);
    REQUIRE(a && b, "operands: %s", fl_last_error());
    int64_t shape[2] = { M, N };
    fl_tensor *d1 = NULL, *d2 = NULL;
    REQUIRE_OK(fl_tensor_empty(&d1, FL_F32, 2, shape, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&d2, FL_F32, 2, shape, FL_DEV_CPU));
    CHECK(fl_cpu_fp8_mm_faster(a, b), "a^T x b [70 x 300 x 90]: the policy should take the new path");
    REQUIRE_OK(fl_cpu_device()->fp8_gemm(d1, a, b, NULL, NULL, NULL, false));
    fl_cpu_fp8_mm_allowed = false;
    bool done = true;
    CHECK_OK(fl_cpu_fp8_mm(d2, a, b, NULL, NULL, &done));
    CHECK(!done, "switched off, yet it ran");
    CHECK_OK(fl_cpu_device()->fp8_gemm(d2, a, b, NULL, NULL, NULL, false));
    fl_cpu_fp8_mm_allowed = true;
    fl_cpu_avx512_allowed = false;   /* as on a CPU without AVX-512: the AVX2 + FMA family runs */
    done = false;
    fl_tensor *d3 = NULL;
    REQUIRE_OK(fl_tensor_empty(&d3, FL_F32, 2, shape, FL_DEV_CPU));
    CHECK_OK(fl_cpu_fp8_mm(d3, a, b, NULL, NULL, &done));
    CHECK(done, "AVX-512 disallowed: the AVX2 + FMA family did not run");
    fl_cpu_avx512_allowed = true;
    const float *g1 = fl_tensor_data(d1), *g2 = fl_tensor_data(d2), *g3 = fl_tensor_data(d3);
    int bad = 0, bad3 = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double S;
            ref_dot(qa, FL_E5M2, qb, FL_E4M3, i, j, N, K, &S);
            if (fabs((double)g1[i * N + j] - g2[i * N + j]) > 2.0 * (K + 1) * ldexp(1.0, -23) * S * 0.75) bad++;
            if (fabs((double)g3[i * N + j] - g2[i * N + j]) > 2.0 * (K + 1) * ldexp(1.0, -23) * S * 0.75) bad3++;
        }
    CHECK(bad == 0, "%d elements: new path and decode + oneDNN differ by more than two accumulation bounds", bad);
    CHECK(bad3 == 0, "%d elements: AVX2 + FMA and decode + oneDNN differ by more than two accumulation bounds", bad3);
    fl_tensor_release(a); fl_tensor_release(b); fl_tensor_release(d1); fl_tensor_release(d2); fl_tensor_release(d3);
    free(qa); free(qb);
    /* the policy for a transposed b: on AVX512_BF16 fewer than 512 rows of C per thread go to decode + oneDNN;
     * AVX2 + FMA takes every shape */
    int64_t sx[2] = { 2048, 256 }, sw[2] = { 768, 256 }, sm[2] = { 256, 256 };
    fl_tensor *x = NULL, *w = NULL, *xs = NULL, *wt = NULL;
    REQUIRE_OK(fl_tensor_empty(&x, FL_E4M3, 2, sx, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&xs, FL_E4M3, 2, sm, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&w, FL_E4M3, 2, sw, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_transpose(&wt, w, 0, 1));
    int before = omp_get_max_threads();
    omp_set_num_threads(2);
    for (int fam = 0; fam < FAMS; fam++) {
        if (!fam_select(fam)) continue;
        CHECK(fl_cpu_fp8_mm_faster(x, wt), "%s: fprop 2048 x 768 x 256 on 2 threads: new path expected", fam_name[fam]);
        CHECK(fl_cpu_fp8_mm_faster(xs, wt) == (fam != 1), "%s: fprop 256 x 768 x 256 on 2 threads: %s expected",
              fam_name[fam], fam != 1 ? "new path" : "decode + oneDNN");
    }
    fam_reset();
    omp_set_num_threads(before);
    fl_tensor_release(x); fl_tensor_release(xs); fl_tensor_release(w); fl_tensor_release(wt);
}

/* One case's inputs for the epilogue tests: random finite FP8 a [M, K] (format fa) and b [K, N] (fb), a bias, an
 * addend (normal, sd res_sd), and a and b as tensors: per-tensor scales, or (v & 8) per-row scales of a and
 * per-column scales of b; a transposed (v & 1), b transposed (v & 2). */
typedef struct {
    uint8_t *qa, *qb;
    float *bias, *res, *sa, *sb;
    fl_tensor *a, *b;
} mm_case;
static bool case_make(mm_case *c, int64_t M, int64_t N, int64_t K, fl_dtype fa, fl_dtype fb, int v, uint64_t *seed,
                      float res_sd) {
    c->qa = malloc(M * K), c->qb = malloc(K * N);
    c->bias = malloc(N * 4), c->res = malloc(M * N * 4), c->sa = malloc(M * 4), c->sb = malloc(N * 4);
    rand_bytes(c->qa, (size_t)(M * K), fa, seed);
    rand_bytes(c->qb, (size_t)(K * N), fb, seed);
    fl_rng r;
    fl_rng_seed(&r, 90 + v);
    fl_rng_normal(&r, c->bias, (size_t)N, 0.0f, 10.0f);
    fl_rng_normal(&r, c->res, (size_t)(M * N), 0.0f, res_sd);
    for (int64_t i = 0; i < M; i++) c->sa[i] = ldexpf(1.0f, (int)(i % 5) - 2);
    for (int64_t j = 0; j < N; j++) c->sb[j] = 0.75f + 0.125f * (float)(j % 4);
    const bool ta = v & 1, tb = v & 2, vec = v & 8;
    c->a = vec ? operand_vec(c->qa, M, K, fa, c->sa, 0, ta) : operand(c->qa, M, K, fa, 0.5f, ta);
    c->b = vec ? operand_vec(c->qb, K, N, fb, c->sb, 1, tb) : operand(c->qb, K, N, fb, 1.5f, tb);
    return c->a && c->b;
}
static void case_free(mm_case *c) {
    fl_tensor_release(c->a); fl_tensor_release(c->b);
    free(c->qa); free(c->qb); free(c->bias); free(c->res); free(c->sa); free(c->sb);
}

/* An addend (a residual after the layer) added as C is stored: the bits of the GEMM and then one fp32 add, in every
 * family, with and without bias, per-tensor and per-row/per-column scales, both orientations of each operand, shapes
 * with ragged edges, several K blocks (the addend only in the last one) and the row split with stealing over column
 * blocks; the same bits on 1 and 2 threads. */
static void adds_a_residual(int *fl__failed, int fam) {
    const shape3 shapes[] = { { 7, 13, 3 }, { 33, 70, 517 }, { 130, 45, 1030 }, { 530, 520, 1100 }, { 40, 300, 2100 } };
    uint64_t seed = 4242;
    int bad = 0, cases = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int v = 0; v < 16; v++) {
            const int64_t M = shapes[si].m, N = shapes[si].n, K = shapes[si].k;
            if (si >= 3 && (v & 3) != (int)(si & 3)) continue;   /* the big shapes: one layout each, to stay quick */
            mm_case c;
            REQUIRE(case_make(&c, M, N, K, FL_E4M3, FL_E5M2, v, &seed, 1000.0f), "operands: %s", fl_last_error());
            const fl_tensor *a = c.a, *b = c.b;
            const float *res = c.res, *pb = (v & 4) ? c.bias : NULL;
            float *plain = malloc(M * N * 4), *got = malloc(M * N * 4), *got1 = malloc(M * N * 4);
            bool ran = run_mm_res(fl__failed, a, b, pb, NULL, plain, 2);
            ran = run_mm_res(fl__failed, a, b, pb, res, got, 2) && ran;
            ran = run_mm_res(fl__failed, a, b, pb, res, got1, 1) && ran;
            CHECK(ran, "%s [%lld %lld %lld] v%d: the new path declined", fam_name[fam], (long long)M, (long long)N,
                  (long long)K, v);
            for (int64_t e = 0; e < M * N; e++) {
                const float want = res[e] + plain[e];
                if ((memcmp(&got[e], &want, 4) != 0 || memcmp(&got1[e], &want, 4) != 0) && bad++ < 4)
                    fprintf(stderr, "  %s [%lld %lld %lld] v%d element %lld: got %a (1 thread %a), want %a\n", fam_name[fam],
                            (long long)M, (long long)N, (long long)K, v, (long long)e, (double)got[e], (double)got1[e],
                            (double)want);
            }
            cases++;
            case_free(&c);
            free(plain); free(got); free(got1);
        }
    CHECK(bad == 0 && cases == 3 * 16 + 2 * 4, "%s: %d elements differ from the GEMM then the add (%d cases)", fam_name[fam],
          bad, cases);
}
/* The AVX-512 FMA family makes the AVX2 + FMA family's bits (the same FMA per product in K order and the same
 * epilogue, at twice the lanes): both orientations of each operand, per-tensor and per-row/per-column scales,
 * bias and addend, ragged edges (one panel left: 1-16 columns past a 32-column step), several K blocks, 1 and 2
 * threads. */
TEST(fp8_mm_avx512_fma_makes_the_avx2_bits) {
    if (!fam_select(FAM_FMA512)) return;
    fam_reset();
    const shape3 shapes[] = { { 1, 1, 1 }, { 13, 7, 3 }, { 25, 17, 300 }, { 37, 33, 517 }, { 130, 48, 1030 },
                              { 530, 520, 1100 }, { 40, 300, 2100 } };
    uint64_t seed = 777;
    int bad = 0, cases = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (int v = 0; v < 32; v++) {
            const int64_t M = shapes[si].m, N = shapes[si].n, K = shapes[si].k;
            if (si >= 5 && (v & 3) != (int)(si & 3)) continue;   /* the big shapes: one layout each */
            mm_case c;
            REQUIRE(case_make(&c, M, N, K, FL_E5M2, FL_E4M3, v, &seed, 100.0f), "operands: %s", fl_last_error());
            float *got[2][2];
            bool ran = true;
            for (int f = 0; f < 2; f++)
                for (int t = 0; t < 2; t++) {
                    REQUIRE(fam_select(f ? FAM_FMA : FAM_FMA512), "%s", fam_name[f ? FAM_FMA : FAM_FMA512]);
                    got[f][t] = malloc(M * N * 4);
                    ran = run_mm_res(fl__failed, c.a, c.b, (v & 4) ? c.bias : NULL, (v & 16) ? c.res : NULL,
                                     got[f][t], t + 1) && ran;
                }
            fam_reset();
            CHECK(ran, "[%lld %lld %lld] v%d: a family declined", (long long)M, (long long)N, (long long)K, v);
            for (int64_t e = 0; e < M * N; e++)
                if ((memcmp(&got[0][0][e], &got[1][0][e], 4) != 0 || memcmp(&got[0][1][e], &got[1][0][e], 4) != 0) &&
                    bad++ < 4)
                    fprintf(stderr, "  [%lld %lld %lld] v%d element %lld: avx512_fma %a (2 threads %a), avx2_fma %a\n",
                            (long long)M, (long long)N, (long long)K, v, (long long)e, (double)got[0][0][e],
                            (double)got[0][1][e], (double)got[1][0][e]);
            cases++;
            for (int f = 0; f < 2; f++)
                for (int t = 0; t < 2; t++) free(got[f][t]);
            case_free(&c);
        }
    CHECK(bad == 0 && cases == 5 * 32 + 2 * 8, "%d elements differ between the families (%d cases)", bad, cases);
}

TEST(fp8_mm_adds_a_residual_as_it_stores) {
    for (int fam = 0; fam < FAMS; fam++)
        if (fam_select(fam)) adds_a_residual(fl__failed, fam);
    fam_reset();
}

/* The device entry fp8_gemm_add: our own GEMM and decode + oneDNN (switch cleared) both give fp8_gemm's bits then
 * one add; an addend of another shape, dtype or layout is refused. */
TEST(fp8_gemm_add_device_entry) {
    const int64_t M = 70, N = 90, K = 300;
    uint64_t seed = 5;
    uint8_t *qa = malloc(M * K), *qb = malloc(K * N);
    rand_bytes(qa, (size_t)(M * K), FL_E4M3, &seed);
    rand_bytes(qb, (size_t)(K * N), FL_E4M3, &seed);
    fl_tensor *a = operand(qa, M, K, FL_E4M3, 0.25f, false), *b = operand(qb, K, N, FL_E4M3, 3.0f, true);
    REQUIRE(a && b, "operands: %s", fl_last_error());
    int64_t shape[2] = { M, N }, nb = N;
    fl_tensor *d1 = NULL, *d2 = NULL, *res = NULL, *bias = NULL;
    REQUIRE_OK(fl_tensor_empty(&d1, FL_F32, 2, shape, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&d2, FL_F32, 2, shape, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&res, FL_F32, 2, shape, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&bias, FL_F32, 1, &nb, FL_DEV_CPU));
    fl_rng r;
    fl_rng_seed(&r, 3);
    fl_rng_normal(&r, fl_tensor_data(res), (size_t)(M * N), 0.0f, 50.0f);
    fl_rng_normal(&r, fl_tensor_data(bias), (size_t)N, 0.0f, 5.0f);
    const fl_device *dev = fl_cpu_device();
    int bad = 0;
    for (int path = 0; path < 2; path++) {
        fl_cpu_fp8_mm_allowed = path == 0;
        REQUIRE_OK(dev->fp8_gemm(d1, a, b, bias, NULL, NULL, false));
        REQUIRE_OK(dev->fp8_gemm_add(d2, a, b, bias, res, NULL, NULL, false));
        const float *g1 = fl_tensor_data(d1), *g2 = fl_tensor_data(d2), *pr = fl_tensor_data(res);
        for (int64_t e = 0; e < M * N; e++) {
            const float want = pr[e] + g1[e];
            if (memcmp(&g2[e], &want, 4) != 0) bad++;
        }
    }
    fl_cpu_fp8_mm_allowed = true;
    CHECK(bad == 0, "%d elements of fp8_gemm_add differ from fp8_gemm then the add", bad);
    /* refused: another shape, a transposed view, another dtype, none */
    int64_t other[2] = { M, N - 1 };
    fl_tensor *wrong = NULL, *rt = NULL, *r16 = NULL;
    REQUIRE_OK(fl_tensor_empty(&wrong, FL_F32, 2, other, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_transpose(&rt, res, 0, 1));
    REQUIRE_OK(fl_tensor_empty(&r16, FL_BF16, 2, shape, FL_DEV_CPU));
    CHECK(dev->fp8_gemm_add(d2, a, b, NULL, wrong, NULL, NULL, false) == FL_EINVAL, "an addend of another shape was taken");
    CHECK(strstr(fl_last_error(), "addend") != NULL, "error names the addend: %s", fl_last_error());
    CHECK(dev->fp8_gemm_add(d2, a, b, NULL, rt, NULL, NULL, false) == FL_EINVAL, "a transposed addend was taken");
    CHECK(dev->fp8_gemm_add(d2, a, b, NULL, r16, NULL, NULL, false) == FL_EINVAL, "a bf16 addend was taken");
    CHECK(dev->fp8_gemm_add(d2, a, b, NULL, NULL, NULL, NULL, false) == FL_EINVAL, "no addend was taken");
    fl_tensor_release(wrong); fl_tensor_release(rt); fl_tensor_release(r16);
    fl_tensor_release(a); fl_tensor_release(b); fl_tensor_release(d1); fl_tensor_release(d2);
    fl_tensor_release(res); fl_tensor_release(bias);
    free(qa); free(qb);
}

/* FP8LAB_CPU_ISA's cap (core/cpu_isa.h): a word outside its choices refused with them named; once oneDNN ran a GEMM
 * (here, after one fp32 matmul, uncapped) another cap is refused, the same one taken. The caps' effect on each
 * family and on oneDNN is tests/spec/cli_spec.lua's (a process each). */
TEST(cpu_isa_cap_refuses_bad_words_and_changes_after_onednn) {
    CHECK(fl_cpu_isa_limit("avx512bf16") == FL_EINVAL, "a misspelt cap taken");
    CHECK(strstr(fl_last_error(), "avx2, avx512, avx512_bf16, amx") != NULL, "choices not named: %s", fl_last_error());
    CHECK(fl_cpu_isa_limit(NULL) == FL_EINVAL, "no word taken");
    int64_t s[2] = { 4, 4 };
    fl_tensor *a = NULL, *c = NULL;
    REQUIRE_OK(fl_tensor_zeros(&a, FL_F32, 2, s, FL_DEV_CPU));
    REQUIRE_OK(fl_matmul(&c, a, a));
    CHECK(strcmp(fl_cpu_isa_limit_name(), "amx") == 0, "cap %s in the test process", fl_cpu_isa_limit_name());
    CHECK(fl_cpu_isa_limit("avx2") == FL_EUNSUPPORTED, "cap changed after oneDNN ran");
    CHECK(strstr(fl_last_error(), "before the first GEMM") != NULL, "%s", fl_last_error());
    CHECK(strcmp(fl_cpu_isa_limit_name(), "amx") == 0 && fl_cpu_avx512_bf16() == !!__builtin_cpu_supports("avx512bf16"),
          "a refused cap applied");
    CHECK_OK(fl_cpu_isa_limit("amx"));
    fl_tensor_release(c);
    fl_tensor_release(a);
}
