/* test_gpu_train_ops.c — the CUDA device's attention, optimizer and FP8 GEMM entries (kernels/attention.cu,
 * kernels/optim.cu, kernels/fp8_gemm.cu) against independent references: float64 attention with error
 * bounds derived from fp32 dot-product error, SGD/AdamW/MS-AMP bit-exact with core/optim.c, the FP8 GEMM
 * against float64 sums of the decoded bytes. Every test is named gpu_*; those that need a device pass
 * with "skipped: no GPU" without one. The *_on_host tests run the kernels' own __host__ __device__ code
 * on the host (exp, softmax rows, SGD elements, FP8 → bf16 decode, tiled transpose, GEMM epilogue), and
 * the argument checks run before any CUDA call, so both run wherever CUDA is built in. */
#include "runner.h"
#include "gpu_test.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_nn_internal.h"
#include "device.h"
#include "format.h"
#include "fp8_linear.h"
#include "optim.h"
#include "rng.h"
#include "tensor.h"
#include "autograd.h"
#include "nn.h"
#include "ops.h"
#include <float.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef FL_HAVE_CUDA

TEST(gpu_train_ops_not_built) { printf("  skipped: built without CUDA\n"); }

#else

#include "../../kernels/cuda_entries.h"
#include "../../kernels/fl_cuda_host.h"
#include "../../kernels/fl_cuda_ops.h"


/* ---- helpers ------------------------------------------------------------------------------------- */

#define FP32_U (1.0 / 16777216.0)   /* 2^-24: fp32's unit roundoff */



static uint64_t xs_state = 0x2545F4914F6CDD1Dull;
static uint64_t xs_next(void) { xs_state ^= xs_state << 13; xs_state ^= xs_state >> 7; xs_state ^= xs_state << 17; return xs_state; }
static double urand(void) { return (double)(xs_next() >> 11) / 9007199254740992.0; }

static float *rnormal(size_t n, uint64_t seed, float std) {
    float *x = malloc((n ? n : 1) * 4);
    fl_rng r;
    fl_rng_seed(&r, seed);
    fl_rng_normal(&r, x, n, 0.0f, std);
    return x;
}

/* Random FP8 codes without NaN or inf. */
static void rand_codes(uint8_t *q, size_t n, fl_dtype fmt) {
    for (size_t i = 0; i < n; i++) {
        uint8_t b;
        do b = (uint8_t)(xs_next() >> 24);
        while (fmt == FL_E4M3 ? (b & 0x7f) == 0x7f : (b & 0x7c) == 0x7c);
        q[i] = b;
    }
}

/* ---- SGD: the kernel's element code on the host ------------------------------------------------- */

typedef struct { double momentum, dampening, wd; bool nesterov, first; } sgd_cfg;
static const sgd_cfg SGD_CFGS[] = {
    { 0.0, 0.0, 0.0, false, false },  { 0.0, 0.0, 0.01, false, false }, { 0.9, 0.0, 0.0, false, true },
    { 0.9, 0.1, 0.01, false, false }, { 0.9, 0.0, 0.01, true, false },  { 0.9, 0.0, 0.01, true, true },
    { 0.5, 0.5, 0.0, false, false },
};
#define NSGD (sizeof SGD_CFGS / sizeof SGD_CFGS[0])

/* Without weight decay d is g itself, not g + 0·p: an infinite p stays infinite (0·inf made it NaN) and
 * g = -0 stays -0 (g + 0·p gave +0 for p ≥ +0, which the momentum buffer keeps). So the wd = 0
 * configurations get ±inf, NaN and ±0 among p and g, at elements 0, 3, 6, ... (those below n). */
static void sgd_specials(float *p, float *g, int64_t n, const sgd_cfg *c) {
    static const float sp[][2] = {   /* p, g */
        { INFINITY, 0.01f }, { -INFINITY, -0.02f }, { NAN, 0.01f }, { -0.0f, -0.0f }, { 0.1f, -0.0f },
        { 0.1f, INFINITY }, { -0.1f, -INFINITY }, { 0.2f, NAN }, { INFINITY, -INFINITY }, { -INFINITY, NAN },
        { -0.0f, 0.0f }, { 0.0f, -0.0f }, { INFINITY, -0.0f },
    };
    if (c->wd != 0.0) return;
    for (size_t k = 0; k < sizeof sp / sizeof sp[0] && (int64_t)(3 * k) < n; k++) {
        p[3 * k] = sp[k][0];
        g[3 * k] = sp[k][1];
    }
}

/* n floats bit for bit, NaN equal to NaN (GPU arithmetic returns a canonical NaN) */
static bool same_floats(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!same_float(a[i], b[i])) return false;
    return true;
}

TEST(gpu_sgd_device_code_matches_cpu_on_host) {
    const int64_t n = 10007;
    for (size_t ci = 0; ci < NSGD; ci++) {
        const sgd_cfg c = SGD_CFGS[ci];
        float *p0 = rnormal((size_t)n, 10 + ci, 0.1f), *g = rnormal((size_t)n, 20 + ci, 0.01f),
              *b0 = rnormal((size_t)n, 30 + ci, 0.01f);
        float *p1 = malloc(n * 4), *b1 = malloc(n * 4);
        sgd_specials(p0, g, n, &c);
        memcpy(p1, p0, n * 4); memcpy(b1, b0, n * 4);
        const bool mom = c.momentum != 0.0;
        for (int step = 1; step <= 3; step++) {
            bool first = c.first && step == 1;
            fl_sgd_kernel_f32(p0, g, mom ? b0 : NULL, n, 0.05, c.momentum, c.dampening, c.wd, c.nesterov, first);
            REQUIRE_OK(fl_cuda_sgd_host(p1, g, mom ? b1 : NULL, n, 0.05, c.momentum, c.dampening, c.wd, c.nesterov, first));
            CHECK(same_floats(p0, p1, n), "cfg %zu step %d: parameters differ", ci, step);
            CHECK(!mom || same_floats(b0, b1, n), "cfg %zu step %d: momentum buffers differ", ci, step);
        }
        free(p0); free(g); free(b0); free(p1); free(b1);
    }
}

/* ---- attention row code on the host --------------------------------------------------------------- */

/* Rows of exact scores through the forward row code against a float64 softmax. Error sources: scale·s
 * (u·|x|) and x − m (u·|x − m|) in numerator and denominator, the exp (≤ 4u, twice), the sum ((n − 1)·u),
 * 1/sum and the product (2u); so |p − ref| ≤ ref·((n + 12)·u + 2u·(max|x| + max|x − m|)). Masked entries
 * must be +0 exactly. */
TEST(gpu_attention_softmax_rows_on_host) {
    const int64_t Ts[] = { 1, 2, 5, 33, 70 };
    const float scales[] = { 0.125f, 1.0f, 0.37f };
    for (size_t ti = 0; ti < 5; ti++)
        for (int causal = 0; causal < 2; causal++)
            for (int si = 0; si < 3; si++) {
                const int64_t T = Ts[ti], rows = 3 * T;   /* three heads */
                const float scale = scales[si];
                float *s = rnormal((size_t)(rows * T), 100 + ti * 7 + si, si == 1 ? 6.0f : 2.0f);
                float *p = malloc(rows * T * 4);
                memcpy(p, s, rows * T * 4);
                fl_cuda_attn_softmax_rows_host(p, rows, T, scale, causal);
                int bad = 0, badz = 0;
                for (int64_t r = 0; r < rows; r++) {
                    const int64_t i = r % T, n = causal ? i + 1 : T;
                    const float *sr = s + r * T, *pr = p + r * T;
                    double m = -INFINITY, sum = 0.0, xmax = 0.0, dmax = 0.0;
                    for (int64_t j = 0; j < n; j++) m = fmax(m, (double)sr[j] * scale);
                    for (int64_t j = 0; j < n; j++) {
                        double x = (double)sr[j] * scale;
                        sum += exp(x - m);
                        xmax = fmax(xmax, fabs(x));
                        dmax = fmax(dmax, fabs(x - m));
                    }
                    for (int64_t j = 0; j < T; j++) {
                        if (j >= n) { badz += bits_of(pr[j]) != 0; continue; }
                        double x = (double)sr[j] * scale, ref = exp(x - m) / sum;
                        double tol = ref * ((double)(n + 12) * FP32_U + 2 * FP32_U * (xmax + dmax)) + 1e-38;
                        if (!(fabs(pr[j] - ref) <= tol) && bad++ == 0)
                            CHECK(0, "T %lld causal %d scale %g row %lld col %lld: %.9g vs %.9g (tol %.3g)", (long long)T,
                                  causal, scale, (long long)r, (long long)j, pr[j], ref, tol);
                    }
                }
                CHECK(bad == 0 && badz == 0, "T %lld causal %d: %d values off, %d masked entries not +0", (long long)T,
                      causal, bad, badz);
                free(s); free(p);
            }
}

/* dS = scale·P ⊙ (dP − Σ P⊙dP) over each row's live length (trailing zeros of P are cut, as the CPU
 * does), +0 beyond. Bound: dot error (n + 2)·u·Σ P|dP|, then the subtraction and two products 3u. */
TEST(gpu_attention_dsoftmax_rows_on_host) {
    const int64_t T = 37, rows = 2 * T;
    const float scale = 0.3f;
    for (int causal = 0; causal < 2; causal++) {
        float *p = rnormal((size_t)(rows * T), 7, 1.0f), *dp = rnormal((size_t)(rows * T), 8, 1.0f);
        fl_cuda_attn_softmax_rows_host(p, rows, T, 1.0f, causal);
        p[5 * T + 2] = 0.0f;                              /* a zero inside a live row */
        for (int64_t j = 0; j < T; j++) p[3 * T + j] = 0.0f;   /* an all-zero row: live length 1 */
        float *ds = malloc(rows * T * 4), *ds2 = malloc(rows * T * 4);
        uint16_t *s16 = malloc(rows * T * 2);
        memcpy(ds, dp, rows * T * 4);
        memcpy(ds2, dp, rows * T * 4);
        fl_cuda_attn_dsoftmax_rows_host(p, ds, NULL, rows, T, scale);
        /* bf16 mode: dS only as bf16, the fp32 buffer left holding dP */
        fl_cuda_attn_dsoftmax_rows_host(p, ds2, s16, rows, T, scale);
        int bad16 = 0;
        for (int64_t i = 0; i < rows * T; i++)
            bad16 += s16[i] != fl_f32_to_bf16(ds[i]) || bits_of(ds2[i]) != bits_of(dp[i]);
        CHECK(bad16 == 0, "causal %d: %d entries of the bf16 dS differ from the fp32 dS rounded, or dP was overwritten",
              causal, bad16);
        int bad = 0, badz = 0;
        for (int64_t r = 0; r < rows; r++) {
            const float *pr = p + r * T, *dr = dp + r * T, *gr = ds + r * T;
            int64_t n = T;
            while (n > 1 && pr[n - 1] == 0.0f) n--;
            if (causal) CHECK(n <= r % T + 1, "row %lld: live length %lld past the diagonal", (long long)r, (long long)n);
            double dot = 0.0, adot = 0.0;
            for (int64_t j = 0; j < n; j++) { dot += (double)pr[j] * dr[j]; adot += fabs((double)pr[j] * dr[j]); }
            const double edot = (double)(n + 2) * FP32_U * adot;
            for (int64_t j = 0; j < T; j++) {
                if (j >= n) { badz += bits_of(gr[j]) != 0; continue; }
                double ref = (double)scale * pr[j] * (dr[j] - dot);
                double tol = fabs((double)scale * pr[j]) * (edot + 4 * FP32_U * (fabs(dr[j]) + fabs(dot) + edot)) + 1e-38;
                if (!(fabs(gr[j] - ref) <= tol) && bad++ == 0)
                    CHECK(0, "causal %d row %lld col %lld: %.9g vs %.9g", causal, (long long)r, (long long)j, gr[j], ref);
            }
        }
        CHECK(bad == 0 && badz == 0, "causal %d: %d values off, %d entries beyond the live length not +0", causal, bad, badz);
        free(p); free(dp); free(ds); free(ds2); free(s16);
    }
}

/* ---- FP8 GEMM device code on the host ------------------------------------------------------------- */

/* Every code of both formats decodes to the bf16 the CPU's decoder gives (NaN, inf, subnormals, ±0). */
TEST(gpu_fp8_bf16_decode_matches_cpu_on_host) {
    const fl_dtype fmts[2] = { FL_E4M3, FL_E5M2 };
    for (int f = 0; f < 2; f++) {
        fl_tensor *q = NULL, *dec = NULL;
        int64_t n = 256;
        REQUIRE_OK(fl_tensor_empty(&q, fmts[f], 1, &n, FL_DEV_CPU));
        uint8_t *b = fl_tensor_data(q);
        for (int i = 0; i < 256; i++) b[i] = (uint8_t)i;
        REQUIRE_OK(fl_fp8_decode_bf16(&dec, q));
        const uint16_t *want = fl_tensor_data(dec);
        int bad = 0;
        for (int i = 0; i < 256; i++) {
            uint16_t got = fl_cuda_fp8_bf16_host((uint8_t)i, fmts[f]);
            if (got != want[i] && bad++ < 4) CHECK(0, "%s 0x%02x: 0x%04x vs cpu 0x%04x", fl_format(fmts[f])->name, i, got, want[i]);
            /* and the value is the format's exact value */
            float v = fl_bf16_to_f32(got), ref = fl_fp8_to_f32((uint8_t)i, fmts[f]);
            if (!(v == ref || (v != v && ref != ref)) && bad++ < 4) CHECK(0, "0x%02x: %g vs %g", i, v, ref);
        }
        CHECK(bad == 0, "%s: %d codes decode differently", fl_format(fmts[f])->name, bad);
        fl_tensor_release(q); fl_tensor_release(dec);
    }
}

/* The tiled transpose run thread by thread: every shape class (single row/column, partial edge tiles,
 * exact tiles, several tiles each way) gives dst[c][r] = src[r][c], and nothing is written past dst. */
TEST(gpu_fp8_transpose_index_maths_on_host) {
    const int64_t shapes[][2] = { { 1, 1 }, { 1, 70 }, { 70, 1 }, { 64, 64 }, { 63, 65 }, { 130, 200 }, { 3, 129 }, { 128, 16 } };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t R = shapes[si][0], C = shapes[si][1], n = R * C, guard = 64;
        uint8_t *src = malloc(n), *dst = malloc(n + guard);
        uint16_t *dec = malloc((n + guard) * 2);
        rand_codes(src, (size_t)n, FL_E4M3);
        memset(dst, 0xa5, n + guard);
        for (int64_t i = 0; i < n + guard; i++) dec[i] = 0xa5a5;
        fl_cuda_fp8_transpose_host(src, dst, R, C, FL_F32);
        int bad = 0, badg = 0, badd = 0;
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) bad += dst[c * R + r] != src[r * C + c];
        for (int64_t i = n; i < n + guard; i++) badg += dst[i] != 0xa5;
        for (int f = 0; f < 2; f++) {
            const fl_dtype fmt = f ? FL_E5M2 : FL_E4M3;
            fl_cuda_fp8_transpose_host(src, dec, R, C, fmt);
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < C; c++) badd += dec[c * R + r] != fl_cuda_fp8_bf16_host(src[r * C + c], fmt);
            for (int64_t i = n; i < n + guard; i++) badg += dec[i] != 0xa5a5;
        }
        CHECK(bad == 0 && badd == 0 && badg == 0, "[%lld, %lld]: %d bytes, %d decodes misplaced, %d guard writes",
              (long long)R, (long long)C, bad, badd, badg);
        free(src); free(dst); free(dec);
    }
}

/* The epilogue's element code is core/cpu/cpu_fp8_gemm.c's scale pass (fl_cpu_dev_fp8_gemm), bit for bit:
 *   row[j] * (sa[i or 0] * sb[j or 0]) (+ bias[j] as fp32). */
TEST(gpu_fp8_epilogue_device_code_matches_cpu_on_host) {
    const int64_t M = 7, N = 19;
    float *acc = rnormal((size_t)(M * N), 1, 300.0f), *sa = malloc(M * 4), *sb = malloc(N * 4), *bf = rnormal((size_t)N, 2, 5.0f);
    float *got = malloc(M * N * 4), *want = malloc(M * N * 4), bias32[32];
    uint16_t b16[32];
    for (int64_t i = 0; i < M; i++) sa[i] = (float)(0.001 + urand());
    for (int64_t j = 0; j < N; j++) sb[j] = (float)(0.01 + 3 * urand());
    for (int v = 0; v < 16; v++) {
        bool a_vec = v & 1, b_vec = v & 2;
        int bk = v >> 2;   /* 0 none, 1 fp32, 2 bf16, 3 fp16 */
        fl_dtype bdt = bk == 2 ? FL_BF16 : bk == 3 ? FL_F16 : FL_F32;
        for (int64_t j = 0; j < N; j++) {
            if (bk == 2) { b16[j] = fl_f32_to_bf16(bf[j]); bias32[j] = fl_bf16_to_f32(b16[j]); }
            else if (bk == 3) { b16[j] = fl_f32_to_f16(bf[j]); bias32[j] = fl_f16_to_f32(b16[j]); }
            else bias32[j] = bf[j];
        }
        const void *bias = bk == 0 ? NULL : bk == 1 ? (const void *)bias32 : (const void *)b16;
        memcpy(got, acc, M * N * 4);
        memcpy(want, acc, M * N * 4);
        fl_cuda_fp8_epilogue_host(got, M, N, sa, a_vec, sb, b_vec, bias, bdt);
        for (int64_t i = 0; i < M; i++) {
            float *row = want + i * N;
            const float ra = sa[a_vec ? i : 0];
            for (int64_t j = 0; j < N; j++) {
                float r = ra * sb[b_vec ? j : 0];
                row[j] = bias ? row[j] * r + bias32[j] : row[j] * r;
            }
        }
        CHECK(memcmp(got, want, M * N * 4) == 0, "a_vec %d b_vec %d bias kind %d: epilogue differs from the cpu's",
              a_vec, b_vec, bk);
    }
    free(acc); free(sa); free(sb); free(bf); free(got); free(want);
}

/* ---- argument checks (before any CUDA call: no GPU needed) ----------------------------------------- */

/* A tensor header over fake device memory; never dereferenced. */
static fl_storage fake_storage = { 1, FL_DEV_CUDA, (size_t)1 << 30, (void *)(uintptr_t)0x100000, 0 };
static fl_tensor fake(fl_dtype dt, int64_t r, int64_t c, int64_t s0, int64_t s1, fl_tensor *si, int axis) {
    fl_tensor t;
    memset(&t, 0, sizeof t);
    t.refcount = 1; t.dtype = dt; t.device = FL_DEV_CUDA; t.ndim = 2;
    t.shape[0] = r; t.shape[1] = c; t.stride[0] = s0; t.stride[1] = s1;
    t.storage = &fake_storage; t.scale_inv = si; t.scale_axis = axis;
    return t;
}
static fl_tensor fake_vec(fl_dtype dt, int64_t n) {
    fl_tensor t = fake(dt, n, 1, 1, 1, NULL, -1);
    t.ndim = 1;
    return t;
}

TEST(gpu_train_entries_reject_bad_arguments) {
    float *ff = (float *)(uintptr_t)0x10000;
    CHECK(fl_cuda_dev_sdpa_fwd(ff, ff, ff, ff, ff, -1, 1, 4, 4, 0.5f, true, false) == FL_EINVAL, "B = -1: %s", fl_last_error());
    CHECK(fl_cuda_dev_sdpa_bwd(ff, ff, ff, ff, ff, ff, ff, ff, 1, 1, -4, 4, 0.5f, true, false) == FL_EINVAL, "T = -4");
    CHECK(fl_cuda_dev_sdpa_fwd(NULL, NULL, NULL, NULL, NULL, 0, 3, 4, 4, 0.5f, true, false) == FL_OK, "B = 0 is a no-op");
    CHECK(fl_cuda_dev_sdpa_fwd(ff, ff, ff, ff, NULL, 1, 1, 4, 4, 0.5f, true, false) == FL_EINVAL, "NULL att");
    CHECK(fl_cuda_dev_sgd(ff, ff, NULL, -1, 0.1, 0.0, 0.0, 0.0, false, false) == FL_EINVAL, "n = -1");
    CHECK(fl_cuda_dev_sgd(ff, ff, NULL, 8, 0.1, 0.9, 0.0, 0.0, false, false) == FL_EINVAL &&
          strstr(fl_last_error(), "momentum"), "momentum without a buffer: %s", fl_last_error());
    CHECK(fl_cuda_dev_sgd(NULL, NULL, NULL, 0, 0.1, 0.9, 0.0, 0.0, false, false) == FL_OK, "n = 0 is a no-op");
    CHECK(fl_cuda_dev_adamw(ff, ff, ff, ff, NULL, 8, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0) == FL_EINVAL &&
          strstr(fl_last_error(), "step"), "step 0: %s", fl_last_error());
    CHECK(fl_cuda_dev_adamw(ff, ff, ff, ff, NULL, -2, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1) == FL_EINVAL, "n = -2");

    /* fp8_gemm: a [32, 64], b [64, 48] */
    fl_tensor s1 = fake_vec(FL_F32, 1), s32 = fake_vec(FL_F32, 32);
    fl_tensor a = fake(FL_E4M3, 32, 64, 64, 1, &s1, -1), b = fake(FL_E4M3, 64, 48, 48, 1, &s1, -1);
    fl_tensor dst = fake(FL_F32, 32, 48, 48, 1, NULL, -1);
    fl_tensor x = a;
    x.stride[0] = 128;   /* every other row of something: neither layout */
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &x, &b, NULL, NULL, NULL, false) == FL_EINVAL && strstr(fl_last_error(), "transpose of a"),
          "strided a: %s", fl_last_error());
    x = b; x.stride[0] = 1; x.stride[1] = 128;
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &a, &x, NULL, NULL, NULL, false) == FL_EINVAL, "strided b: %s", fl_last_error());
    x = b; x.shape[0] = 63;
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &a, &x, NULL, NULL, NULL, false) == FL_EINVAL, "K mismatch: %s", fl_last_error());
    x = a; x.dtype = FL_BF16;
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &x, &b, NULL, NULL, NULL, false) == FL_EINVAL, "bf16 a: %s", fl_last_error());
    x = a; x.device = FL_DEV_CPU;
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &x, &b, NULL, NULL, NULL, false) == FL_EINVAL, "cpu a: %s", fl_last_error());
    x = dst; x.dtype = FL_BF16;
    CHECK(fl_cuda_dev_fp8_gemm(&x, &a, &b, NULL, NULL, NULL, false) == FL_EINVAL, "bf16 dst: %s", fl_last_error());
    x = dst; x.shape[1] = 47;
    CHECK(fl_cuda_dev_fp8_gemm(&x, &a, &b, NULL, NULL, NULL, false) == FL_EINVAL, "dst shape: %s", fl_last_error());
    x = a; x.scale_axis = 1;
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &x, &b, NULL, NULL, NULL, false) == FL_EINVAL, "a scaled per column: %s", fl_last_error());
    x = a; x.scale_axis = 0;   /* per row but one scale */
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &x, &b, NULL, NULL, NULL, false) == FL_EINVAL && strstr(fl_last_error(), "scale_inv"),
          "a per row with 1 scale: %s", fl_last_error());
    x = b; x.scale_axis = 0;
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &a, &x, NULL, NULL, NULL, false) == FL_EINVAL, "b scaled per row: %s", fl_last_error());
    x = b; x.scale_axis = 1; x.scale_inv = &s32;
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &a, &x, NULL, NULL, NULL, false) == FL_EINVAL, "b per column with 32 scales: %s", fl_last_error());
    fl_tensor bad_bias = fake_vec(FL_BF16, 47);
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &a, &b, &bad_bias, NULL, NULL, false) == FL_EINVAL, "bias of 47: %s", fl_last_error());
    bad_bias = fake_vec(FL_E4M3, 48);
    CHECK(fl_cuda_dev_fp8_gemm(&dst, &a, &b, &bad_bias, NULL, NULL, false) == FL_EINVAL, "e4m3 bias: %s", fl_last_error());
    /* valid but empty: M = 0 returns before touching the GPU */
    fl_tensor a0 = fake(FL_E4M3, 0, 64, 64, 1, &s1, -1), d0 = fake(FL_F32, 0, 48, 48, 1, NULL, -1);
    CHECK(fl_cuda_dev_fp8_gemm(&d0, &a0, &b, NULL, NULL, NULL, false) == FL_OK, "M = 0: %s", fl_last_error());
}

/* ---- optimizers on the GPU -------------------------------------------------------------------------- */

TEST(gpu_sgd_entry_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    const int64_t sizes[] = { 100003, 1 };
    for (int si = 0; si < 2; si++)
        for (size_t ci = 0; ci < NSGD; ci++) {
            const int64_t n = sizes[si];
            const sgd_cfg c = SGD_CFGS[ci];
            const bool mom = c.momentum != 0.0;
            float *p = rnormal((size_t)n, 40 + ci, 0.1f), *g = rnormal((size_t)n, 50 + ci, 0.01f),
                  *b = rnormal((size_t)n, 60 + ci, 0.01f), *got = malloc(n * 4);
            sgd_specials(p, g, n, &c);
            float *dp = dput(&pl, p, n * 4), *dg = dput(&pl, g, n * 4), *db = dput(&pl, b, n * 4);
            REQUIRE(dp && dg && db, "alloc: %s", fl_last_error());
            for (int step = 1; step <= 3; step++) {
                bool first = c.first && step == 1;
                fl_sgd_kernel_f32(p, g, mom ? b : NULL, n, 0.05, c.momentum, c.dampening, c.wd, c.nesterov, first);
                REQUIRE_OK(fl_cuda_dev_sgd(dp, dg, mom ? db : NULL, n, 0.05, c.momentum, c.dampening, c.wd, c.nesterov,
                                           first));
            }
            REQUIRE_OK(d->to_host(got, dp, n * 4));
            CHECK(same_floats(got, p, n), "n %lld cfg %zu: parameters differ after 3 steps", (long long)n, ci);
            if (mom) {
                REQUIRE_OK(d->to_host(got, db, n * 4));
                CHECK(same_floats(got, b, n), "n %lld cfg %zu: momentum buffers differ", (long long)n, ci);
            }
            pool_free(&pl);
            free(p); free(g); free(b); free(got);
        }
}

TEST(gpu_adamw_entry_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    const int64_t n = 100003;
    for (int ams = 0; ams < 2; ams++) {   /* array 4: amsgrad's running maximum of v */
        pool pl = { d, { 0 }, 0 };
        float *h[5], *dv[5], *got = malloc(n * 4);
        for (int k = 0; k < 5; k++) {
            h[k] = rnormal((size_t)n, 70 + k, k >= 3 ? 1e-3f : 0.1f);
            if (k >= 3) for (int64_t i = 0; i < n; i++) h[k][i] *= h[k][i];
            /* amsgrad's NaN rule (the maximum is NaN if either is): a NaN vmax stays, a NaN g makes v and vmax NaN */
            if (ams && k == 4) h[k][5] = NAN;
            if (ams && k == 1) h[k][9] = NAN;
            dv[k] = dput(&pl, h[k], n * 4);
            REQUIRE(dv[k], "alloc");
        }
        for (int step = 1; step <= 3; step++) {
            fl_adamw_kernel_f32(h[0], h[1], h[2], h[3], ams ? h[4] : NULL, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, step);
            REQUIRE_OK(fl_cuda_dev_adamw(dv[0], dv[1], dv[2], dv[3], ams ? dv[4] : NULL, n, 1e-3, 0.9, 0.999, 1e-8,
                                         0.01, step));
        }
        for (int k = 0; k < 5; k++) {
            REQUIRE_OK(d->to_host(got, dv[k], n * 4));
            CHECK(same_floats(got, h[k], n), "amsgrad %d: array %d differs after 3 steps", ams, k);
            free(h[k]);
        }
        free(got);
        pool_free(&pl);
    }
}

/* A 1-d tensor of n elements on `dev` holding host bytes; FP8 ones get scale_inv = si. */
static fl_tensor *tensor_on(int dev, fl_dtype dt, int64_t n, const void *host, float si) {
    fl_tensor *t = NULL;
    if (fl_tensor_empty(&t, dt, 1, &n, dev) != FL_OK) return NULL;
    const fl_device *d = fl_device_get(dev);
    if (d->from_host(fl_tensor_data(t), host, (size_t)n * fl_format(dt)->size) != FL_OK ||
        (t->scale_inv && d->from_host(fl_tensor_data(t->scale_inv), &si, 4) != FL_OK)) {
        fl_tensor_release(t);
        return NULL;
    }
    return t;
}

static bool same_bytes(const fl_tensor *cpu, const fl_tensor *gpu, const fl_device *d) {
    size_t nb = (size_t)fl_tensor_numel(cpu) * fl_format(cpu->dtype)->size;
    void *h = malloc(nb ? nb : 1);
    bool ok = d->to_host(h, fl_tensor_data(gpu), nb) == FL_OK && memcmp(h, fl_tensor_data(cpu), nb) == 0;
    free(h);
    return ok;
}

static bool same_scale(const fl_tensor *cpu, const fl_tensor *gpu, const fl_device *d) {
    float g;
    return d->to_host(&g, fl_tensor_data(gpu), 4) == FL_OK && bits_of(g) == bits_of(*(const float *)fl_tensor_data(cpu));
}

/* The msamp entry on cuda tensors against core/optim.c's step on the same data, bit for bit. */
TEST(gpu_msamp_entry_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    const struct { fl_dtype p, g, m, v; bool o3; } cfgs[] = {
        { FL_F32, FL_F32, FL_F32, FL_F32, false }, { FL_F32, FL_E4M3, FL_E4M3, FL_F16, false },
        { FL_F16, FL_E5M2, FL_E4M3, FL_F16, true }, { FL_F16, FL_E4M3, FL_F32, FL_F32, true } };
    const int64_t n = 70001;
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        float *x = rnormal((size_t)n, 80 + ci, 1.0f);
        void *bufs[4];
        float sis[4] = { 1.0f, 1.0f / 65536.0f, 1.0f / 1048576.0f, 1.0f };
        const fl_dtype dts[4] = { cfgs[ci].p, cfgs[ci].g, cfgs[ci].m, cfgs[ci].v };
        const float stds[4] = { 0.05f, 1e-3f, 1e-4f, 1e-4f };
        for (int k = 0; k < 4; k++) {   /* p, g, m, v in their dtypes */
            float *y = malloc(n * 4);
            for (int64_t i = 0; i < n; i++) y[i] = x[(i * 7 + k * 13) % n] * stds[k];
            if (k == 3) for (int64_t i = 0; i < n; i++) y[i] *= y[i] * 1e4f;
            bufs[k] = malloc(n * 4);
            if (dts[k] == FL_F32) memcpy(bufs[k], y, n * 4);
            else if (dts[k] == FL_F16) fl_f32_to_f16_n(y, bufs[k], (size_t)n);
            else fl_quantize_f32(y, bufs[k], (size_t)n, dts[k], 1.0f / sis[k], FL_SATURATE, NULL);
            free(y);
        }
        const float vsi0 = 1.0f;
        uint8_t *pf = calloc((size_t)n, 1);
        fl_tensor *c[6], *g[6];
        for (int k = 0; k < 4; k++) {
            c[k] = tensor_on(FL_DEV_CPU, dts[k], n, bufs[k], sis[k]);
            g[k] = tensor_on(FL_DEV_CUDA, dts[k], n, bufs[k], sis[k]);
        }
        c[4] = tensor_on(FL_DEV_CPU, FL_F32, 1, &vsi0, 1.0f);
        g[4] = tensor_on(FL_DEV_CUDA, FL_F32, 1, &vsi0, 1.0f);
        c[5] = cfgs[ci].o3 ? tensor_on(FL_DEV_CPU, FL_E4M3, n, pf, 1.0f) : NULL;
        g[5] = cfgs[ci].o3 ? tensor_on(FL_DEV_CUDA, FL_E4M3, n, pf, 1.0f) : NULL;
        bool ok = true;
        for (int k = 0; k < 5; k++) ok = ok && c[k] && g[k];
        ok = ok && (!cfgs[ci].o3 || (c[5] && g[5]));
        CHECK(ok, "cfg %zu: tensors: %s", ci, fl_last_error());
        for (int step = 1; ok && step <= 2; step++) {
            REQUIRE_OK(fl_msamp_adamw_step(c[0], c[1], c[2], c[3], c[4], c[5], 1e-3, 0.9, 0.999, 1e-8, 0.01, step));
            REQUIRE_OK(fl_cuda_dev_msamp_adamw(g[0], g[1], g[2], g[3], g[4], g[5], 1e-3, 0.9, 0.999, 1e-8, 0.01, step));
            CHECK(same_bytes(c[0], g[0], d) && same_bytes(c[2], g[2], d) && same_bytes(c[3], g[3], d),
                  "cfg %zu step %d: p, m or v bytes differ", ci, step);
            CHECK(same_scale(c[4], g[4], d), "cfg %zu step %d: v scale_inv differs", ci, step);
            if (cfgs[ci].m == FL_E4M3)
                CHECK(same_scale(c[2]->scale_inv, g[2]->scale_inv, d), "cfg %zu step %d: m scale_inv differs", ci, step);
            if (cfgs[ci].o3)
                CHECK(same_bytes(c[5], g[5], d) && same_scale(c[5]->scale_inv, g[5]->scale_inv, d),
                      "cfg %zu step %d: the FP8 weight differs", ci, step);
        }
        for (int k = 0; k < 6; k++) { fl_tensor_release(c[k]); fl_tensor_release(g[k]); }
        for (int k = 0; k < 4; k++) free(bufs[k]);
        free(pf); free(x);
    }
}

/* ---- attention on the GPU ---------------------------------------------------------------------------- */

typedef struct { int64_t B, H, T, D; bool causal; float scale, qstd; } attn_cfg;
static const attn_cfg ATTN_CFGS[] = {
    { 1, 1, 1, 1, false, 1.0f, 1.0f },  { 1, 1, 1, 5, true, 0.447f, 1.0f },   { 2, 3, 17, 24, true, 0.2041f, 1.0f },
    { 2, 3, 17, 24, false, 0.2041f, 1.0f }, { 1, 2, 33, 7, false, 0.3f, 3.0f }, { 3, 1, 130, 12, true, 0.2887f, 1.0f },
    { 2, 2, 64, 64, true, 0.125f, 1.0f }, { 1, 1, 40, 1, true, 2.0f, 1.0f },   { 1, 2, 9, 3, false, 1.0f, 4.0f },
};
#define NATTN (sizeof ATTN_CFGS / sizeof ATTN_CFGS[0])

/* float64 forward of one config with the error bound of each entry (see the test comment). */
static void attn_ref(const attn_cfg *c, const float *q, const float *k, const float *v, double *p, double *ptol,
                     double *o, double *otol) {
    const int64_t T = c->T, D = c->D, BH = c->B * c->H;
    double *x = malloc(T * 8);
    for (int64_t bh = 0; bh < BH; bh++)
        for (int64_t i = 0; i < T; i++) {
            const float *qi = q + (bh * T + i) * D;
            const int64_t n = c->causal ? i + 1 : T;
            double m = -INFINITY, E = 0.0, R = 0.0, sum = 0.0;
            for (int64_t j = 0; j < n; j++) {
                const float *kj = k + (bh * T + j) * D;
                double dot = 0.0, adot = 0.0;
                for (int64_t e = 0; e < D; e++) { dot += (double)qi[e] * kj[e]; adot += fabs((double)qi[e] * kj[e]); }
                x[j] = dot * c->scale;
                double ej = (double)(D + 2) * FP32_U * fabs((double)c->scale) * adot + FP32_U * fabs(x[j]);
                E = ej > E ? ej : E;
                m = x[j] > m ? x[j] : m;
            }
            for (int64_t j = 0; j < n; j++) { sum += exp(x[j] - m); R = fabs(x[j] - m) > R ? fabs(x[j] - m) : R; }
            double *pr = p + (bh * T + i) * T, *tr = ptol + (bh * T + i) * T;
            /* relative: the scores' errors move p by at most e^{2E} − 1; rounding of x − m, exp, sum, 1/sum, × */
            const double rel = expm1(2.0 * (E + FP32_U * R)) * 1.01 + (double)(n + 12) * FP32_U;
            for (int64_t j = 0; j < T; j++) {
                pr[j] = j < n ? exp(x[j] - m) / sum : 0.0;
                tr[j] = pr[j] * rel + 1e-38;
            }
            for (int64_t e = 0; e < D; e++) {
                double acc = 0.0, err = 0.0, mag = 0.0;
                for (int64_t j = 0; j < n; j++) {
                    double vj = v[(bh * T + j) * D + e];
                    acc += pr[j] * vj;
                    err += tr[j] * fabs(vj);
                    mag += (pr[j] + tr[j]) * fabs(vj);
                }
                o[(bh * T + i) * D + e] = acc;
                otol[(bh * T + i) * D + e] = err + (double)(T + 2) * FP32_U * mag + 1e-38;
            }
        }
    free(x);
}

static int count_off(const float *got, const double *ref, const double *tol, int64_t n, int64_t *first) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - ref[i]) <= tol[i] + 1e-30)) { if (!bad) *first = i; bad++; }
    return bad;
}

/* Forward: att within the bound of a float64 softmax of float64 scores (fp32 GEMM error (D+2)·u·Σ|q·k|
 * per score, propagated: |Δp| ≤ p·(e^{2E} − 1) plus the row's own rounding), masked entries +0 exactly,
 * out within Σ_j Δp·|v| + (T+2)·u·Σ p·|v|; a second run gives the same bits. */
TEST(gpu_sdpa_fwd_matches_f64) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    for (size_t ci = 0; ci < NATTN; ci++) {
        const attn_cfg *c = &ATTN_CFGS[ci];
        const int64_t BH = c->B * c->H, nq = BH * c->T * c->D, na = BH * c->T * c->T;
        float *q = rnormal((size_t)nq, 200 + ci, c->qstd), *k = rnormal((size_t)nq, 300 + ci, 1.0f),
              *v = rnormal((size_t)nq, 400 + ci, 1.0f);
        float *att = malloc(na * 4), *out = malloc((nq ? nq : 1) * 4), *att2 = malloc(na * 4), *out2 = malloc((nq ? nq : 1) * 4);
        double *p = malloc(na * 8), *pt = malloc(na * 8), *o = malloc((nq ? nq : 1) * 8), *ot = malloc((nq ? nq : 1) * 8);
        attn_ref(c, q, k, v, p, pt, o, ot);
        float *dq = dput(&pl, q, nq * 4), *dk = dput(&pl, k, nq * 4), *dv = dput(&pl, v, nq * 4);
        float *dout = dalloc(&pl, nq * 4), *datt = dalloc(&pl, na * 4);
        REQUIRE(dq && dk && dv && dout && datt, "alloc: %s", fl_last_error());
        char what[128];
        snprintf(what, sizeof what, "B %lld H %lld T %lld D %lld%s scale %g", (long long)c->B, (long long)c->H,
                 (long long)c->T, (long long)c->D, c->causal ? " causal" : "", c->scale);
        for (int run = 0; run < 2; run++) {
            REQUIRE_OK(fl_cuda_dev_sdpa_fwd(dq, dk, dv, dout, datt, c->B, c->H, c->T, c->D, c->scale, c->causal, false));
            REQUIRE_OK(d->to_host(run ? att2 : att, datt, na * 4));
            REQUIRE_OK(d->to_host(run ? out2 : out, dout, nq * 4));
        }
        int64_t f = 0;
        int bad = count_off(att, p, pt, na, &f);
        CHECK(bad == 0, "%s: %d att entries off, first [%lld] %.9g vs %.9g (tol %.3g)", what, bad, (long long)f,
              bad ? att[f] : 0.0f, bad ? p[f] : 0.0, bad ? pt[f] : 0.0);
        int badz = 0;
        if (c->causal)
            for (int64_t r = 0; r < BH * c->T; r++)
                for (int64_t j = r % c->T + 1; j < c->T; j++) badz += bits_of(att[r * c->T + j]) != 0;
        CHECK(badz == 0, "%s: %d masked entries are not +0", what, badz);
        bad = count_off(out, o, ot, nq, &f);
        CHECK(bad == 0, "%s: %d out entries off, first [%lld] %.9g vs %.9g (tol %.3g)", what, bad, (long long)f,
              bad ? out[f] : 0.0f, bad ? o[f] : 0.0, bad ? ot[f] : 0.0);
        CHECK(memcmp(att, att2, na * 4) == 0 && memcmp(out, out2, nq * 4) == 0, "%s: a second run differs", what);
        pool_free(&pl);
        free(q); free(k); free(v); free(att); free(out); free(att2); free(out2); free(p); free(pt); free(o); free(ot);
    }
}

/* bf16 attention (bf16 autocast) against the CPU's bf16 attention on the same inputs: both round q, k, v,
 * P, dO and dS to bf16 and accumulate in fp32, so they differ by summation order and by a bf16 rounding of
 * P or dS that lands on the other side of a tie: |gpu − cpu| ≤ 2^-7·(|cpu| + mean |cpu|). A second run
 * gives the same bits. */
TEST(gpu_sdpa_bf16_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    const fl_device *cpu = fl_cpu_device();
    pool pl = { d, { 0 }, 0 };
    for (size_t ci = 0; ci < NATTN; ci++) {
        const attn_cfg *c = &ATTN_CFGS[ci];
        const int64_t BH = c->B * c->H, nq = BH * c->T * c->D, na = BH * c->T * c->T;
        if (nq == 0) continue;
        float *q = rnormal((size_t)nq, 700 + ci, c->qstd), *k = rnormal((size_t)nq, 710 + ci, 1.0f),
              *v = rnormal((size_t)nq, 720 + ci, 1.0f), *go = rnormal((size_t)nq, 730 + ci, 1.0f);
        float *ro = malloc(nq * 4), *ra = malloc(na * 4), *rg[3] = { malloc(nq * 4), malloc(nq * 4), malloc(nq * 4) };
        float *o = malloc(nq * 4), *o2 = malloc(nq * 4), *g[3] = { malloc(nq * 4), malloc(nq * 4), malloc(nq * 4) };
        REQUIRE_OK(cpu->sdpa_fwd(q, k, v, ro, ra, c->B, c->H, c->T, c->D, c->scale, c->causal, true));
        REQUIRE_OK(cpu->sdpa_bwd(q, k, v, ra, go, rg[0], rg[1], rg[2], c->B, c->H, c->T, c->D, c->scale, c->causal, true));
        float *dq = dput(&pl, q, nq * 4), *dk = dput(&pl, k, nq * 4), *dv = dput(&pl, v, nq * 4), *dgo = dput(&pl, go, nq * 4);
        float *dout = dalloc(&pl, nq * 4), *datt = dalloc(&pl, na * 4), *dg[3] = { dalloc(&pl, nq * 4), dalloc(&pl, nq * 4),
                                                                                dalloc(&pl, nq * 4) };
        REQUIRE(dq && dk && dv && dgo && dout && datt && dg[0] && dg[1] && dg[2], "alloc: %s", fl_last_error());
        for (int run = 0; run < 2; run++) {
            REQUIRE_OK(fl_cuda_dev_sdpa_fwd(dq, dk, dv, dout, datt, c->B, c->H, c->T, c->D, c->scale, c->causal, true));
            REQUIRE_OK(d->to_host(run ? o2 : o, dout, nq * 4));
        }
        CHECK(memcmp(o, o2, nq * 4) == 0, "attn cfg %zu: a second bf16 run differs", ci);
        REQUIRE_OK(fl_cuda_dev_sdpa_bwd(dq, dk, dv, datt, dgo, dg[0], dg[1], dg[2], c->B, c->H, c->T, c->D, c->scale,
                                        c->causal, true));
        for (int w = 0; w < 3; w++) REQUIRE_OK(d->to_host(g[w], dg[w], nq * 4));
        const float *got[4] = { o, g[0], g[1], g[2] }, *ref[4] = { ro, rg[0], rg[1], rg[2] };
        static const char *const nm[4] = { "out", "dq", "dk", "dv" };
        for (int w = 0; w < 4; w++) {
            double mean = 0;
            for (int64_t i = 0; i < nq; i++) mean += fabs(ref[w][i]);
            mean /= (double)nq;
            int bad = 0;
            for (int64_t i = 0; i < nq; i++)
                bad += !(fabs((double)got[w][i] - ref[w][i]) <= 0x1p-7 * (fabs(ref[w][i]) + mean));
            CHECK(bad == 0, "attn cfg %zu bf16 %s: %d of %lld entries off the CPU's", ci, nm[w], bad, (long long)nq);
        }
        pool_free(&pl);
        free(q); free(k); free(v); free(go); free(ro); free(ra); free(o); free(o2);
        for (int w = 0; w < 3; w++) { free(rg[w]); free(g[w]); }
    }
}

/* ---- fused (flash) attention: kernels/flash_attention.cu ------------------------------------------------
 * Both the fused kernels and the CPU's bf16 attention round q, k, v, dO and the GEMM operands P and dS to bf16
 * with fp32 accumulation, at different places (the fused forward rounds e^(s − running max) before dividing by
 * the row's sum, the CPU rounds P), so they do not give the same bits: an output that is a small difference of
 * large terms can differ by more than its own size. The test holds them to the same accuracy instead: against
 * float64 attention of the bf16-rounded q, k, v, dO (P and dS unrounded), the fused result's error
 * ‖x − ref‖₂ is at most twice the CPU's (plus 2^-20·‖ref‖₂), output by output. Shapes: T below, at and across
 * the 64-row tiles, D from 16 to 128, causal or not, several heads. */
static const attn_cfg FLASH_CFGS[] = {
    { 1, 1, 1, 16, true, 0.25f, 1.0f },    { 2, 3, 17, 32, true, 0.1768f, 1.0f }, { 2, 2, 64, 64, true, 0.125f, 1.0f },
    { 1, 2, 100, 64, false, 0.125f, 2.0f }, { 1, 1, 130, 48, true, 0.1443f, 1.0f }, { 2, 1, 129, 128, true, 0.0884f, 1.0f },
    { 1, 1, 200, 16, false, 0.25f, 3.0f },
};
#define NFLASH (sizeof FLASH_CFGS / sizeof FLASH_CFGS[0])

static double bf(float x) { return fl_bf16_to_f32(fl_f32_to_bf16(x)); }

/* float64 attention of cfg c on bf16-rounded inputs: out, dq, dk, dv into ref[4] (n = B·H·T·D each). */
static void flash_ref64(const attn_cfg *c, float *const in[4], double *ref[4]) {
    const int64_t T = c->T, D = c->D, BH = c->B * c->H;
    double *P = malloc(T * T * 8), *dS = malloc(T * T * 8);
    for (int w = 0; w < 4; w++) memset(ref[w], 0, BH * T * D * 8);
    for (int64_t bh = 0; bh < BH; bh++) {
        const float *q = in[0] + bh * T * D, *k = in[1] + bh * T * D, *v = in[2] + bh * T * D, *go = in[3] + bh * T * D;
        double *o = ref[0] + bh * T * D, *dq = ref[1] + bh * T * D, *dk = ref[2] + bh * T * D, *dv = ref[3] + bh * T * D;
        for (int64_t i = 0; i < T; i++) {
            const int64_t n = c->causal ? i + 1 : T;
            double m = -INFINITY, sum = 0, delta = 0;
            for (int64_t j = 0; j < T; j++) {
                double x = 0;
                for (int64_t e = 0; e < D; e++) x += bf(q[i * D + e]) * bf(k[j * D + e]);
                P[i * T + j] = x * c->scale;
                if (j < n && P[i * T + j] > m) m = P[i * T + j];
            }
            for (int64_t j = 0; j < T; j++) sum += j < n ? exp(P[i * T + j] - m) : 0.0;
            for (int64_t j = 0; j < T; j++) {
                P[i * T + j] = j < n ? exp(P[i * T + j] - m) / sum : 0.0;
                double dp = 0;
                for (int64_t e = 0; e < D; e++) {
                    o[i * D + e] += P[i * T + j] * bf(v[j * D + e]);
                    dp += bf(go[i * D + e]) * bf(v[j * D + e]);
                }
                dS[i * T + j] = dp;
                delta += P[i * T + j] * dp;
            }
            for (int64_t j = 0; j < T; j++) dS[i * T + j] = c->scale * P[i * T + j] * (dS[i * T + j] - delta);
        }
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++)
                for (int64_t e = 0; e < D; e++) {
                    dq[i * D + e] += dS[i * T + j] * bf(k[j * D + e]);
                    dk[j * D + e] += dS[i * T + j] * bf(q[i * D + e]);
                    dv[j * D + e] += P[i * T + j] * bf(go[i * D + e]);
                }
    }
    free(P); free(dS);
}

/* The fused results got[4] against the float64 reference, next to the CPU's bf16 attention cpu[4] (see above). */
static void flash_compare(int *fl__failed, const char *what, size_t ci, float *const got[4], float *const cpu[4],
                          double *const ref[4], int64_t n) {
    static const char *const nm[4] = { "out", "dq", "dk", "dv" };
    for (int w = 0; w < 4; w++) {
        double eg = 0, ec = 0, nr = 0;
        for (int64_t i = 0; i < n; i++) {
            eg += (got[w][i] - ref[w][i]) * (got[w][i] - ref[w][i]);
            ec += (cpu[w][i] - ref[w][i]) * (cpu[w][i] - ref[w][i]);
            nr += ref[w][i] * ref[w][i];
        }
        eg = sqrt(eg); ec = sqrt(ec); nr = sqrt(nr);
        if (getenv("FL_TEST_VERBOSE"))
            printf("  %s cfg %zu %s: |ref| %.4g, error %.3g (cpu %.3g), ratio %.3f\n", what, ci, nm[w], nr, eg / nr, ec / nr,
                   ec > 0 ? eg / ec : 0.0);
        CHECK(eg <= 2 * ec + 0x1p-20 * nr, "%s cfg %zu %s: error %.4g of |ref| %.4g, more than twice the CPU's bf16 (%.4g)",
              what, ci, nm[w], eg, nr, ec);
    }
}

/* Cfg ci's inputs (seeded by ci: q, k, v, dO), the CPU's bf16 attention of them (out, dq, dk, dv) and the float64
 * reference. */
static void flash_case(int *fl__failed, size_t ci, float *in[4], float *cpu[4], double *ref[4]) {
    const attn_cfg *c = &FLASH_CFGS[ci];
    const int64_t BH = c->B * c->H, nq = BH * c->T * c->D, na = BH * c->T * c->T;
    in[0] = rnormal((size_t)nq, 900 + ci, c->qstd);
    in[1] = rnormal((size_t)nq, 910 + ci, 1.0f);
    in[2] = rnormal((size_t)nq, 920 + ci, 1.0f);
    in[3] = rnormal((size_t)nq, 930 + ci, 1.0f);
    float *att = malloc(na * 4);
    for (int w = 0; w < 4; w++) { cpu[w] = malloc(nq * 4); ref[w] = malloc(nq * 8); }
    const fl_device *dev = fl_cpu_device();
    CHECK(dev->sdpa_fwd(in[0], in[1], in[2], cpu[0], att, c->B, c->H, c->T, c->D, c->scale, c->causal, true) == FL_OK,
          "cpu sdpa_fwd: %s", fl_last_error());
    CHECK(dev->sdpa_bwd(in[0], in[1], in[2], att, in[3], cpu[1], cpu[2], cpu[3], c->B, c->H, c->T, c->D, c->scale,
                        c->causal, true) == FL_OK, "cpu sdpa_bwd: %s", fl_last_error());
    free(att);
    flash_ref64(c, in, ref);
}

/* The block programs run on the host (every phase of every block in turn, shared memory poisoned per block). */
TEST(gpu_flash_attention_matches_cpu_on_host) {
    for (size_t ci = 0; ci < NFLASH; ci++) {
        const attn_cfg *c = &FLASH_CFGS[ci];
        const int64_t BH = c->B * c->H, nq = BH * c->T * c->D;
        float *in[4], *cpu[4], *got[4], *stats = malloc(BH * c->T * 8);
        double *ref[4];
        flash_case(fl__failed, ci, in, cpu, ref);
        for (int w = 0; w < 4; w++) got[w] = malloc(nq * 4);
        REQUIRE(fl_cuda_flash_supports_host(c->D), "D %lld", (long long)c->D);
        fl_cuda_flash_fwd_host(in[0], in[1], in[2], got[0], stats, c->B, c->H, c->T, c->D, c->scale, c->causal);
        fl_cuda_flash_bwd_host(in[0], in[1], in[2], stats, in[3], got[1], got[2], got[3], c->B, c->H, c->T, c->D,
                               c->scale, c->causal);
        flash_compare(fl__failed, "host", ci, got, cpu, ref, nq);
        for (int w = 0; w < 4; w++) { free(in[w]); free(cpu[w]); free(ref[w]); free(got[w]); }
        free(stats);
    }
}

/* Sizes the fused kernels do not take are declined (done = false, nothing touched; the caller runs sdpa_fwd), and
 * the arguments are checked, all before any CUDA call. */
TEST(gpu_flash_attention_declines_other_sizes) {
    float f[4] = { 1, 2, 3, 4 };
    static const int64_t D[] = { 0, 8, 24, 144, 256 };
    for (size_t i = 0; i < sizeof D / sizeof D[0]; i++) {
        bool done = true;
        CHECK(fl_cuda_dev_sdpa_flash_fwd(f, f, f, f, f, 1, 1, 4, D[i], 0.5f, true, &done) == FL_OK && !done,
              "D = %lld: not declined", (long long)D[i]);
        CHECK(!fl_cuda_flash_supports_host(D[i]), "D = %lld", (long long)D[i]);
    }
    bool done = true;
    CHECK(fl_cuda_dev_sdpa_flash_fwd(f, f, f, f, f, 0, 1, 4, 64, 0.5f, true, &done) == FL_OK && !done, "B = 0");
    CHECK(fl_cuda_dev_sdpa_flash_fwd(f, f, f, f, f, 1, 1, 4, 64, 0.5f, true, NULL) == FL_EINVAL, "done NULL");
    CHECK(fl_cuda_dev_sdpa_flash_bwd(f, f, f, f, f, f, f, f, 1, 1, 4, 24, 0.5f, true) == FL_EUNSUPPORTED, "bwd D = 24");
}

/* The autograd plumbing of the fused kernels (core/nn.c: their statistics saved in att's place, the backward
 * that reads them), on the host: a stand-in for the CPU whose fused entries are the block programs' host runs.
 * With the size threshold at 0, under bf16 autocast, fl_sdpa_qkv (the GPT's packed projection, here through
 * copies) and fl_sdpa take the fused kernels when D is a multiple of 16 and give the CPU's gradients within bf16
 * rounding; with D = 24 they decline and the CPU's own kernels give its bits; in fp32 they are never asked; at
 * the default threshold (1 GiB of probabilities) these small calls never ask either. */
static int flash_fwd_calls, flash_bwd_calls;
static fl_status host_flash_fwd(const float *q, const float *k, const float *v, float *out, float *stats, int64_t B,
                                int64_t H, int64_t T, int64_t D, float scale, bool causal, bool *done) {
    *done = fl_cuda_flash_supports_host(D) && B > 0 && H > 0 && T > 0;
    if (*done) { fl_cuda_flash_fwd_host(q, k, v, out, stats, B, H, T, D, scale, causal); flash_fwd_calls++; }
    return FL_OK;
}
static fl_status host_flash_bwd(const float *q, const float *k, const float *v, const float *stats, const float *dout,
                                float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                                bool causal) {
    fl_cuda_flash_bwd_host(q, k, v, stats, dout, dq, dk, dv, B, H, T, D, scale, causal);
    flash_bwd_calls++;
    return FL_OK;
}
static fl_device flash_fake;

/* d(Σ y·w)/dx of attention over x ([B, T, 3·H·D] packed, causal; or with `split` q, k, v = x's three parts as
 * [B, H, T, D] heads through fl_sdpa, not causal, scale 0.3), under autocast dtype ad, on the current CPU device. */
static fl_status attn_grad(fl_tensor **grad, const fl_tensor *base, const fl_tensor *wsum, bool split, fl_dtype ad) {
    fl_tensor *x = NULL, *y = NULL, *yw = NULL, *s = NULL, *parts[3] = { NULL, NULL, NULL };
    fl_status st = fl_tensor_to(&x, base, FL_F32);
    if (st == FL_OK) fl_tensor_set_requires_grad(x, true);
    fl_dtype prev = fl_set_autocast_dtype(ad);
    if (st == FL_OK && !split) st = fl_sdpa_qkv(&y, x, 2, true, 0.0);
    if (st == FL_OK && split) {
        const int64_t B = base->shape[0], T = base->shape[1], C = base->shape[2] / 3, s4[4] = { B, T, 2, C / 2 };
        for (int i = 0; i < 3 && st == FL_OK; i++) {
            fl_tensor *nar = NULL, *v4 = NULL;
            st = fl_narrow(&nar, x, 2, i * C, C);
            if (st == FL_OK) st = fl_view(&v4, nar, 4, s4);
            if (st == FL_OK) st = fl_transpose(&parts[i], v4, 1, 2);
            fl_tensor_release(nar); fl_tensor_release(v4);
        }
        if (st == FL_OK) st = fl_sdpa(&y, parts[0], parts[1], parts[2], false, 0.3);
    }
    if (st == FL_OK) st = fl_binary(&yw, FL_OP_MUL, y, wsum);   /* a weighted sum: every output's gradient differs */
    if (st == FL_OK) st = fl_reduce(&s, FL_OP_SUM, yw, FL_ALL_DIMS, false);
    if (st == FL_OK) st = fl_backward(s, NULL, false);
    fl_set_autocast_dtype(prev);
    if (st == FL_OK) *grad = fl_tensor_retain(x->grad);
    for (int i = 0; i < 3; i++) fl_tensor_release(parts[i]);
    fl_tensor_release(x); fl_tensor_release(y); fl_tensor_release(yw); fl_tensor_release(s);
    return st;
}

TEST(gpu_flash_attention_through_autograd_on_host) {
    static const int64_t Ds[] = { 32, 24, 32 };
    const double threshold = fl_sdpa_fused_min_bytes;
    for (size_t di = 0; di < 3; di++)
        for (int split = 0; split < 2; split++)
            for (int bf16 = 1; bf16 >= 0; bf16--) {
                fl_sdpa_fused_min_bytes = di < 2 ? 0.0 : threshold;   /* the last round: the default */
                const int64_t D = Ds[di], shape[3] = { 2, 70, 3 * 2 * D };
                fl_tensor *base = NULL, *w = NULL, *g_cpu = NULL, *g_fused = NULL;
                fl_manual_seed(21 + di);
                REQUIRE_OK(fl_randn(&base, NULL, 3, shape, FL_F32));
                const int64_t ws3[3] = { 2, 70, 2 * D }, ws4[4] = { 2, 2, 70, D };   /* y: [B, T, H·D] or [B, H, T, D] */
                REQUIRE_OK(fl_randn(&w, NULL, split ? 4 : 3, split ? ws4 : ws3, FL_F32));
                const fl_dtype ad = bf16 ? FL_BF16 : FL_F32;
                fl_status st = attn_grad(&g_cpu, base, w, split, ad);
                flash_fake = *fl_cpu_device();
                flash_fake.sdpa_flash_fwd = host_flash_fwd;
                flash_fake.sdpa_flash_bwd = host_flash_bwd;
                flash_fake.sdpa_qkv_fwd = NULL;   /* as on CUDA: the packed layout goes through copies */
                flash_fake.sdpa_qkv_bwd = NULL;
                flash_fwd_calls = flash_bwd_calls = 0;
                fl_device_register(FL_DEV_CPU, &flash_fake);
                if (st == FL_OK) st = attn_grad(&g_fused, base, w, split, ad);
                fl_device_register(FL_DEV_CPU, NULL);
                fl_sdpa_fused_min_bytes = threshold;
                REQUIRE(st == FL_OK, "D %lld split %d bf16 %d: %s", (long long)D, split, bf16, fl_last_error());
                const bool fused = bf16 && D % 16 == 0 && di < 2;
                CHECK(flash_fwd_calls == fused && flash_bwd_calls == fused, "D %lld split %d bf16 %d: %d/%d fused calls",
                      (long long)D, split, bf16, flash_fwd_calls, flash_bwd_calls);
                const int64_t n = fl_tensor_numel(base);
                const float *gc = fl_tensor_data(g_cpu), *gf = fl_tensor_data(g_fused);
                double mean = 0;
                for (int64_t i = 0; i < n; i++) mean += fabs(gc[i]);
                mean /= (double)n;
                int bad = 0;
                for (int64_t i = 0; i < n; i++)
                    bad += fused ? !(fabs((double)gf[i] - gc[i]) <= 0x1p-5 * (fabs(gc[i]) + mean)) : gf[i] != gc[i];
                CHECK(bad == 0, "D %lld split %d bf16 %d: %d of %lld gradient entries off the CPU's%s", (long long)D, split,
                      bf16, bad, (long long)n, fused ? "" : " bits");
                fl_tensor_release(base); fl_tensor_release(w); fl_tensor_release(g_cpu); fl_tensor_release(g_fused);
            }
}

/* On the GPU: the same comparison; a second run gives the same bits (every output written by one block). */
TEST(gpu_flash_attention_matches_cpu) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    for (size_t ci = 0; ci < NFLASH; ci++) {
        const attn_cfg *c = &FLASH_CFGS[ci];
        const int64_t BH = c->B * c->H, nq = BH * c->T * c->D, ns = BH * c->T * 2;
        float *in[4], *cpu[4], *got[4], *again[4];
        double *ref[4];
        flash_case(fl__failed, ci, in, cpu, ref);
        float *din[4], *dres[4], *dstats = dalloc(&pl, ns * 4);
        for (int w = 0; w < 4; w++) {
            got[w] = malloc(nq * 4);
            again[w] = malloc(nq * 4);
            din[w] = dput(&pl, in[w], nq * 4);
            dres[w] = dalloc(&pl, nq * 4);
        }
        REQUIRE(din[0] && din[1] && din[2] && din[3] && dres[0] && dres[1] && dres[2] && dres[3] && dstats, "alloc: %s",
                fl_last_error());
        for (int run = 0; run < 2; run++) {
            bool done = false;
            REQUIRE_OK(d->sdpa_flash_fwd(din[0], din[1], din[2], dres[0], dstats, c->B, c->H, c->T, c->D, c->scale,
                                         c->causal, &done));
            REQUIRE(done, "cfg %zu: the GPU declined D = %lld", ci, (long long)c->D);
            REQUIRE_OK(d->sdpa_flash_bwd(din[0], din[1], din[2], dstats, din[3], dres[1], dres[2], dres[3], c->B, c->H,
                                         c->T, c->D, c->scale, c->causal));
            for (int w = 0; w < 4; w++) REQUIRE_OK(d->to_host(run ? again[w] : got[w], dres[w], nq * 4));
        }
        flash_compare(fl__failed, "gpu", ci, got, cpu, ref, nq);
        for (int w = 0; w < 4; w++)
            CHECK(memcmp(got[w], again[w], nq * 4) == 0, "cfg %zu: a second run differs (output %d)", ci, w);
        pool_free(&pl);
        for (int w = 0; w < 4; w++) { free(in[w]); free(cpu[w]); free(ref[w]); free(got[w]); free(again[w]); }
    }
}

/* D = 0: every score is 0, so each row is uniform over its keys. */
TEST(gpu_sdpa_fwd_no_features) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    enum { T = 6 };
    float att[2 * T * T];
    float *datt = dalloc(&pl, sizeof att), *dummy = dalloc(&pl, 4);
    REQUIRE(datt && dummy, "alloc");
    REQUIRE_OK(fl_cuda_dev_sdpa_fwd(dummy, dummy, dummy, dummy, datt, 2, 1, T, 0, 0.5f, true, false));
    REQUIRE_OK(d->to_host(att, datt, sizeof att));
    int bad = 0;
    for (int64_t r = 0; r < 2 * T; r++)
        for (int64_t j = 0; j < T; j++) {
            int64_t n = r % T + 1;
            float want = j < n ? (float)(1.0 / (double)n) : 0.0f;
            bad += fabsf(att[r * T + j] - want) > 4e-7f * want;
        }
    CHECK(bad == 0, "%d entries differ from the uniform rows", bad);
    pool_free(&pl);
}

/* Backward from a given P (the float64 softmax rounded to fp32, masked entries 0): dq, dk, dv against
 * float64 with bounds propagated from the fp32 GEMMs (see the code), and a second run gives the same bits. */
TEST(gpu_sdpa_bwd_matches_f64) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    pool pl = { d, { 0 }, 0 };
    for (size_t ci = 0; ci < NATTN; ci++) {
        const attn_cfg *c = &ATTN_CFGS[ci];
        const int64_t T = c->T, D = c->D, BH = c->B * c->H, nq = BH * T * D, na = BH * T * T;
        const double sc = c->scale;
        float *q = rnormal((size_t)nq, 500 + ci, c->qstd), *k = rnormal((size_t)nq, 600 + ci, 1.0f),
              *v = rnormal((size_t)nq, 700 + ci, 1.0f), *go = rnormal((size_t)nq, 800 + ci, 1.0f);
        double *p = malloc(na * 8), *pt = malloc(na * 8), *o = malloc(nq * 8), *ot = malloc(nq * 8);
        attn_ref(c, q, k, v, p, pt, o, ot);
        float *pf = malloc(na * 4);
        for (int64_t i = 0; i < na; i++) pf[i] = (float)p[i];
        /* reference dS and its error bound, row by row */
        double *ds = calloc((size_t)na, 8), *es = calloc((size_t)na, 8);
        for (int64_t r = 0; r < BH * T; r++) {
            const int64_t bh = r / T;
            const float *pr = pf + r * T, *gr = go + r * D;
            int64_t n = T;
            while (n > 1 && pr[n - 1] == 0.0f) n--;
            double *dpv = malloc(T * 8), *edp = malloc(T * 8), dot = 0.0, adot = 0.0, edot = 0.0;
            for (int64_t j = 0; j < n; j++) {
                const float *vj = v + (bh * T + j) * D;
                double s = 0.0, a = 0.0;
                for (int64_t e = 0; e < D; e++) { s += (double)gr[e] * vj[e]; a += fabs((double)gr[e] * vj[e]); }
                dpv[j] = s;
                edp[j] = (double)(D + 2) * FP32_U * a;
                dot += pr[j] * s;
                adot += fabs(pr[j] * s);
                edot += pr[j] * edp[j];
            }
            edot += (double)(n + 2) * FP32_U * adot;
            for (int64_t j = 0; j < n; j++) {
                ds[r * T + j] = sc * pr[j] * (dpv[j] - dot);
                es[r * T + j] = fabs(sc) * pr[j] *
                                (edp[j] + edot + 4 * FP32_U * (fabs(dpv[j]) + fabs(dot) + edp[j] + edot)) + 1e-38;
            }
            free(dpv); free(edp);
        }
        /* dQ = dS·K, dK = dSᵀ·Q, dV = Pᵀ·dO with bounds Σ e·|x| + (T+2)·u·Σ (|y| + e)·|x| */
        double *rq = calloc(nq, 8), *tq = calloc(nq, 8), *rk = calloc(nq, 8), *tk = calloc(nq, 8),
               *rv = calloc(nq, 8), *tv = calloc(nq, 8);
        for (int64_t bh = 0; bh < BH; bh++)
            for (int64_t i = 0; i < T; i++)
                for (int64_t j = 0; j < T; j++) {
                    const int64_t a = (bh * T + i) * T + j;
                    const double s = ds[a], e = es[a], pp = pf[a];
                    for (int64_t f = 0; f < D; f++) {
                        const int64_t qi = (bh * T + i) * D + f, kj = (bh * T + j) * D + f;
                        rq[qi] += s * k[kj];
                        tq[qi] += e * fabs(k[kj]) + (double)(T + 2) * FP32_U * (fabs(s) + e) * fabs(k[kj]);
                        rk[kj] += s * q[qi];
                        tk[kj] += e * fabs(q[qi]) + (double)(T + 2) * FP32_U * (fabs(s) + e) * fabs(q[qi]);
                        rv[kj] += pp * go[qi];
                        tv[kj] += (double)(T + 2) * FP32_U * pp * fabs(go[qi]);
                    }
                }
        float *dqh[2], *dkh[2], *dvh[2];
        float *dq = dput(&pl, q, nq * 4), *dk = dput(&pl, k, nq * 4), *dv = dput(&pl, v, nq * 4),
              *dgo = dput(&pl, go, nq * 4), *datt = dput(&pl, pf, na * 4);
        float *gq = dalloc(&pl, nq * 4), *gk = dalloc(&pl, nq * 4), *gv = dalloc(&pl, nq * 4);
        REQUIRE(dq && dk && dv && dgo && datt && gq && gk && gv, "alloc: %s", fl_last_error());
        for (int run = 0; run < 2; run++) {
            dqh[run] = malloc(nq * 4); dkh[run] = malloc(nq * 4); dvh[run] = malloc(nq * 4);
            REQUIRE_OK(fl_cuda_dev_sdpa_bwd(dq, dk, dv, datt, dgo, gq, gk, gv, c->B, c->H, T, D, c->scale, c->causal, false));
            REQUIRE_OK(d->to_host(dqh[run], gq, nq * 4));
            REQUIRE_OK(d->to_host(dkh[run], gk, nq * 4));
            REQUIRE_OK(d->to_host(dvh[run], gv, nq * 4));
        }
        char what[128];
        snprintf(what, sizeof what, "B %lld H %lld T %lld D %lld%s", (long long)c->B, (long long)c->H, (long long)T,
                 (long long)D, c->causal ? " causal" : "");
        const float *gots[3] = { dqh[0], dkh[0], dvh[0] };
        const double *refs[3] = { rq, rk, rv }, *tols[3] = { tq, tk, tv };
        const char *names[3] = { "dq", "dk", "dv" };
        for (int w = 0; w < 3; w++) {
            int64_t f = 0;
            int bad = count_off(gots[w], refs[w], tols[w], nq, &f);
            CHECK(bad == 0, "%s: %d %s entries off, first [%lld] %.9g vs %.9g (tol %.3g)", what, bad, names[w],
                  (long long)f, bad ? gots[w][f] : 0.0f, bad ? refs[w][f] : 0.0, bad ? tols[w][f] : 0.0);
        }
        CHECK(memcmp(dqh[0], dqh[1], nq * 4) == 0 && memcmp(dkh[0], dkh[1], nq * 4) == 0 &&
              memcmp(dvh[0], dvh[1], nq * 4) == 0, "%s: a second run differs", what);
        pool_free(&pl);
        for (int run = 0; run < 2; run++) { free(dqh[run]); free(dkh[run]); free(dvh[run]); }
        free(q); free(k); free(v); free(go); free(p); free(pt); free(o); free(ot); free(pf); free(ds); free(es);
        free(rq); free(tq); free(rk); free(tk); free(rv); free(tv);
    }
}

/* ---- FP8 GEMM on the GPU ------------------------------------------------------------------------------ */

/* An FP8 [R, C] operand on the GPU with logical codes vals[r·C + c]: stored [R, C], or (transposed) the
 * transpose view of a stored [C, R]. Scales: axis −1 one value, else one per index of logical axis `axis`. */
static fl_tensor *fp8_operand(fl_dtype dt, int64_t R, int64_t C, bool transposed, const uint8_t *vals, const float *si,
                              int axis) {
    const fl_device *d = fl_device_get(FL_DEV_CUDA);
    int64_t shape[2] = { transposed ? C : R, transposed ? R : C };
    fl_tensor *t = NULL, *v = NULL;
    uint8_t *st = malloc((size_t)(R * C) + 1);
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) st[transposed ? c * R + r : r * C + c] = vals[r * C + c];
    fl_status s = fl_tensor_empty(&t, dt, 2, shape, FL_DEV_CUDA);
    if (s == FL_OK) s = d->from_host(fl_tensor_data(t), st, (size_t)(R * C));
    free(st);
    if (s == FL_OK && axis >= 0) {
        int64_t len = axis == 0 ? R : C;
        fl_tensor_release(t->scale_inv);
        t->scale_inv = NULL;
        s = fl_tensor_empty(&t->scale_inv, FL_F32, 1, &len, FL_DEV_CUDA);
        if (s == FL_OK) s = d->from_host(fl_tensor_data(t->scale_inv), si, (size_t)len * 4);
        t->scale_axis = transposed ? 1 - axis : axis;
    } else if (s == FL_OK) {
        s = d->from_host(fl_tensor_data(t->scale_inv), si, 4);
    }
    if (s == FL_OK && transposed) s = fl_tensor_transpose(&v, t, 0, 1);
    else if (s == FL_OK) v = fl_tensor_retain(t);
    fl_tensor_release(t);
    return s == FL_OK ? v : NULL;
}

typedef struct { int64_t M, N, K; fl_dtype adt, bdt; } gemm_shape;

static bool fp8_eligible(const gemm_shape *s);

/* One fp8_gemm call against float64; returns the number of entries off. slot: NULL or a cache slot. */
static int run_fp8_gemm(int *fl__failed, const gemm_shape *sh, bool at, bool bt, bool fast, int scale_mode, int bias_kind,
                        fl_tensor **slot, const char *tag) {
    const fl_device *d = fl_device_get(FL_DEV_CUDA);
    const int64_t M = sh->M, N = sh->N, K = sh->K;
    const bool a_vec = scale_mode & 1, b_vec = scale_mode & 2;
    uint8_t *qa = malloc(M * K + 1), *qb = malloc(K * N + 1);
    float *sa = malloc(M * 4 + 4), *sb = malloc(N * 4 + 4), *bias = malloc(N * 4 + 4), *got = malloc(M * N * 4 + 4);
    uint16_t *b16 = malloc(N * 2 + 2);
    rand_codes(qa, (size_t)(M * K), sh->adt);
    rand_codes(qb, (size_t)(K * N), sh->bdt);
    for (int64_t i = 0; i < M; i++) sa[i] = a_vec ? (float)(0.01 + urand()) : 0.37f;
    for (int64_t j = 0; j < N; j++) sb[j] = b_vec ? (float)(0.001 + 0.1 * urand()) : 0.0625f;
    fl_dtype bdt = bias_kind == 2 ? FL_BF16 : bias_kind == 3 ? FL_F16 : FL_F32;
    for (int64_t j = 0; j < N; j++) {
        float x = (float)(200.0 * (urand() - 0.5));
        if (bias_kind == 2) { b16[j] = fl_f32_to_bf16(x); bias[j] = fl_bf16_to_f32(b16[j]); }
        else if (bias_kind == 3) { b16[j] = fl_f32_to_f16(x); bias[j] = fl_f16_to_f32(b16[j]); }
        else bias[j] = x;
    }
    fl_tensor *a = fp8_operand(sh->adt, M, K, at, qa, sa, a_vec ? 0 : -1);
    fl_tensor *b = fp8_operand(sh->bdt, K, N, bt, qb, sb, b_vec ? 1 : -1);
    fl_tensor *dst = NULL, *tb = NULL;
    int64_t ds[2] = { M, N }, nb = N;
    fl_status s = fl_tensor_empty(&dst, FL_F32, 2, ds, FL_DEV_CUDA);
    if (s == FL_OK && bias_kind) {
        s = fl_tensor_empty(&tb, bdt, 1, &nb, FL_DEV_CUDA);
        if (s == FL_OK) s = d->from_host(fl_tensor_data(tb), bias_kind == 1 ? (void *)bias : (void *)b16, (size_t)N * fl_format(bdt)->size);
    }
    int bad = -1;
    char what[200];
    snprintf(what, sizeof what, "%s%s %s%s x %s%s [%lld %lld %lld] scales %s/%s bias %s", tag, fast ? " fast" : "",
             fl_format(sh->adt)->name,
             at ? "(t)" : "", fl_format(sh->bdt)->name, bt ? "(t)" : "", (long long)M, (long long)N, (long long)K,
             a_vec ? "row" : "tensor", b_vec ? "col" : "tensor", bias_kind ? fl_format(bdt)->name : "none");
    CHECK(a && b && s == FL_OK, "%s: setting up: %s", what, fl_last_error());
    if (a && b && s == FL_OK) {
        CHECK(a->scale_axis == (a_vec ? 0 : -1) && b->scale_axis == (b_vec ? 1 : -1), "%s: scale axes %d %d", what,
              a->scale_axis, b->scale_axis);
        s = fl_cuda_dev_fp8_gemm(dst, a, b, tb, NULL, slot, fast);
        CHECK(s == FL_OK, "%s: %s", what, fl_last_error());
        if (s == FL_OK && d->to_host(got, fl_tensor_data(dst), (size_t)(M * N) * 4) == FL_OK) {
            /* products of FP8 values are exact; fp32 accumulation of K of them: (K + 2)·u·Σ|a·b| (at least the
             * 1e-5 test_gpu_fp8.c holds cuBLASLt's FP8 kernels to); the scaling and the bias add round twice more. */
            double tol_s = fmax(1e-5, (double)(K + 2) * FP32_U);
            /* on the FP8 route, fast or split accumulation: the tensor cores' group sums (gpu_test.h fp8_mma_tol) */
            if (fp8_eligible(sh) && fl_cuda_fp8_gemm_native()) tol_s = fmax(tol_s, fp8_mma_tol(K));
            bad = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double acc = 0.0, S = 0.0;
                    for (int64_t l = 0; l < K; l++) {
                        double pr = (double)fl_fp8_to_f32(qa[i * K + l], sh->adt) * fl_fp8_to_f32(qb[l * N + j], sh->bdt);
                        acc += pr;
                        S += fabs(pr);
                    }
                    const double s2 = (double)sa[a_vec ? i : 0] * sb[b_vec ? j : 0];
                    const double ref = acc * s2 + (bias_kind ? bias[j] : 0.0);
                    const double tol = tol_s * S * fabs(s2) + 4 * FP32_U * (fabs(ref) + (bias_kind ? fabs(bias[j]) : 0.0)) + 1e-30;
                    const double err = fabs((double)got[i * N + j] - ref);
                    if (!(err <= tol) && bad++ == 0)
                        CHECK(0, "%s: dst[%lld][%lld] = %.9g, want %.9g (err %.3g > tol %.3g)", what, (long long)i,
                              (long long)j, got[i * N + j], ref, err, tol);
                }
            CHECK(bad == 0, "%s: %d of %lld entries off", what, bad, (long long)(M * N));
        }
    }
    fl_tensor_release(a); fl_tensor_release(b); fl_tensor_release(dst); fl_tensor_release(tb);
    free(qa); free(qb); free(sa); free(sb); free(bias); free(got); free(b16);
    return bad;
}

static bool fp8_eligible(const gemm_shape *s) {
    return s->K > 0 && s->K % 16 == 0 && s->N % 16 == 0 && !(s->adt == FL_E5M2 && s->bdt == FL_E5M2);
}

/* Every layout pair, scale kind and bias dtype over shapes that take the FP8 path and shapes that fall back
 * (k or n not multiples of 16, e5m2 × e5m2, sizes of 1, k = 0). With a cache slot and b stored [K, N],
 * the slot's dtype shows which route ran: b's (FP8 K-major copy) or bf16 (the decode); a K-major b leaves it empty. */
TEST(gpu_fp8_gemm_matches_f64) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    const gemm_shape shapes[] = {
        { 64, 48, 128, FL_E4M3, FL_E4M3 }, { 33, 32, 64, FL_E5M2, FL_E4M3 }, { 1, 16, 16, FL_E4M3, FL_E5M2 },
        { 130, 96, 256, FL_E4M3, FL_E4M3 }, { 37, 20, 24, FL_E4M3, FL_E4M3 }, { 5, 7, 3, FL_E5M2, FL_E4M3 },
        { 1, 1, 1, FL_E4M3, FL_E4M3 },     { 16, 16, 32, FL_E5M2, FL_E5M2 }, { 8, 16, 0, FL_E4M3, FL_E4M3 },
        { 70, 1, 48, FL_E4M3, FL_E4M3 },
    };
    const bool native = fl_cuda_fp8_gemm_native();
    printf("  FP8 tensor cores: %s\n", native ? "yes" : "no (every case takes the bf16 route)");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int lay = 0; lay < 4; lay++)
            for (int v = 0; v < 4; v++) {
                const bool at = lay & 1, bt = lay & 2;
                const int scale_mode = v, bias_kind = (int)((v + lay + si) % 4);
                fl_tensor *slot = NULL;
                const bool with_slot = (v + si) % 2 == 0;
                run_fp8_gemm(fl__failed, &shapes[si], at, bt, (v + lay) % 3 == 0, scale_mode, bias_kind,
                             with_slot ? &slot : NULL, "fp8_gemm");
                const bool b_kmajor = bt || shapes[si].K <= 1 || shapes[si].N == 1;   /* b's bytes already [N, K] */
                if (with_slot && shapes[si].K > 0 && shapes[si].M >= 16) {
                    const bool fp8 = native && fp8_eligible(&shapes[si]);
                    if (b_kmajor)   /* either route: a K-major b neither reads nor writes the slot (fp8_gemm.cu) */
                        CHECK(slot == NULL, "shape %zu layout %d: a K-major b needs no cache", si, lay);
                    else
                        CHECK(slot && slot->dtype == (fp8 ? shapes[si].bdt : FL_BF16) && slot->shape[0] == shapes[si].N &&
                              slot->shape[1] == shapes[si].K, "shape %zu layout %d: the cache holds %s, expected %s",
                              si, lay, slot ? fl_format(slot->dtype)->name : "nothing",
                              fp8 ? fl_format(shapes[si].bdt)->name : "bf16");
                }
                fl_tensor_release(slot);
            }
}

/* b_cache: filled on the first call, reused as is (same tensor, same bits) on later calls — so much that
 * new bytes in b are not seen until the caller clears it — and replaced when it holds the other form. */
TEST(gpu_fp8_gemm_b_cache_reuse) {
    const fl_device *d = gpu_or_skip();
    if (!d) return;
    const bool native = fl_cuda_fp8_gemm_native();
    const int64_t shapes[2][3] = { { 64, 64, 128 }, { 40, 24, 40 } };   /* FP8 route (on sm_89+), bf16 route */
    for (int si = 0; si < 2; si++) {
        const int64_t M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
        const bool fp8 = native && si == 0;
        uint8_t *qa = malloc(M * K), *qb = malloc(K * N), *qb2 = malloc(K * N);
        float one = 1.0f, *r1 = malloc(M * N * 4), *r2 = malloc(M * N * 4), *r3 = malloc(M * N * 4);
        rand_codes(qa, (size_t)(M * K), FL_E4M3);
        rand_codes(qb, (size_t)(K * N), FL_E4M3);
        rand_codes(qb2, (size_t)(K * N), FL_E4M3);
        fl_tensor *a = fp8_operand(FL_E4M3, M, K, false, qa, &one, -1), *b = fp8_operand(FL_E4M3, K, N, false, qb, &one, -1);
        fl_tensor *dst = NULL, *slot = NULL;
        int64_t ds[2] = { M, N };
        REQUIRE(a && b, "operands: %s", fl_last_error());
        REQUIRE_OK(fl_tensor_empty(&dst, FL_F32, 2, ds, FL_DEV_CUDA));
        REQUIRE_OK(fl_cuda_dev_fp8_gemm(dst, a, b, NULL, NULL, &slot, false));
        REQUIRE(slot, "shape %d: no cache made for a b stored [K, N]", si);
        CHECK(slot->dtype == (fp8 ? FL_E4M3 : FL_BF16) && slot->device == FL_DEV_CUDA, "shape %d: cache dtype %s", si,
              fl_format(slot->dtype)->name);
        fl_tensor *first = slot;
        REQUIRE_OK(d->to_host(r1, fl_tensor_data(dst), M * N * 4));
        REQUIRE_OK(fl_cuda_dev_fp8_gemm(dst, a, b, NULL, NULL, &slot, false));
        REQUIRE_OK(d->to_host(r2, fl_tensor_data(dst), M * N * 4));
        CHECK(slot == first, "shape %d: the cache was replaced on reuse", si);
        CHECK(memcmp(r1, r2, M * N * 4) == 0, "shape %d: the second call differs", si);
        /* new bytes in b, cache kept: the old result (the cache is what is read) */
        REQUIRE_OK(d->from_host(fl_tensor_data(b), qb2, (size_t)(K * N)));
        REQUIRE_OK(fl_cuda_dev_fp8_gemm(dst, a, b, NULL, NULL, &slot, false));
        REQUIRE_OK(d->to_host(r3, fl_tensor_data(dst), M * N * 4));
        CHECK(memcmp(r1, r3, M * N * 4) == 0, "shape %d: b's bytes were read despite the cache", si);
        /* cleared: the new bytes */
        fl_tensor_release(slot);
        slot = NULL;
        REQUIRE_OK(fl_cuda_dev_fp8_gemm(dst, a, b, NULL, NULL, &slot, false));
        REQUIRE_OK(d->to_host(r3, fl_tensor_data(dst), M * N * 4));
        int bad = 0;
        for (int64_t i = 0; i < M && bad < 1; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0.0, S = 0.0;
                for (int64_t l = 0; l < K; l++) {
                    double pr = (double)fl_e4m3_to_f32(qa[i * K + l]) * fl_e4m3_to_f32(qb2[l * N + j]);
                    acc += pr; S += fabs(pr);
                }
                if (!(fabs(r3[i * N + j] - acc) <= (fp8 ? fp8_mma_tol(K) : 1e-5) * S + 1e-30)) { bad++; break; }
            }
        CHECK(bad == 0, "shape %d: after clearing the cache the result is not the new b's", si);
        /* the other form in the slot is replaced by the needed one (and not used) */
        fl_tensor *other = NULL;
        int64_t cs[2] = { N, K };
        REQUIRE_OK(fl_tensor_empty(&other, fp8 ? FL_BF16 : FL_E4M3, 2, cs, FL_DEV_CUDA));
        uint8_t *kb = calloc((size_t)(N * K), 2);
        if (!fp8)   /* an FP8 K-major copy is b's bytes, so give it the right ones; the bf16 one is zeros */
            for (int64_t l = 0; l < K; l++) for (int64_t j = 0; j < N; j++) kb[j * K + l] = qb2[l * N + j];
        REQUIRE_OK(d->from_host(fl_tensor_data(other), kb, (size_t)(N * K) * (fp8 ? 2 : 1)));
        free(kb);
        fl_tensor_release(slot);
        slot = other;
        REQUIRE_OK(fl_cuda_dev_fp8_gemm(dst, a, b, NULL, NULL, &slot, false));
        REQUIRE_OK(d->to_host(r2, fl_tensor_data(dst), M * N * 4));
        CHECK(slot != other || !fp8, "shape %d: the bf16 cache was not replaced on the FP8 route", si);
        CHECK(slot && slot->dtype == (fp8 ? FL_E4M3 : FL_BF16), "shape %d: cache now %s", si,
              slot ? fl_format(slot->dtype)->name : "nothing");
        CHECK(memcmp(r2, r3, M * N * 4) == 0, "shape %d: the result with a replaced cache differs", si);
        fl_tensor_release(slot);
        fl_tensor_release(a); fl_tensor_release(b); fl_tensor_release(dst);
        free(qa); free(qb); free(qb2); free(r1); free(r2); free(r3);
    }
}

#endif /* FL_HAVE_CUDA */
