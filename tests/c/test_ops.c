/* test_ops.c — ops against independent references: broadcasting arithmetic and reductions vs
 * double loops, matmul vs a naive double GEMM (inputs pre-rounded for bf16/fp16), quantization
 * vs scalar casts with scale = fp8_max / amax, and interrupting a long op. */
#include "runner.h"
#include "ops.h"
#include "device.h"
#include "ops_raw.h"
#include "fp8_linear.h"
#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>
#include <stdlib.h>

static float frand(uint32_t *s) { *s = *s * 1664525u + 1013904223u; return (float)((*s >> 8) * (1.0 / 16777216.0)) * 2 - 1; }

static fl_tensor *randt(int ndim, const int64_t *shape, fl_dtype dt, uint32_t seed) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *v = malloc((size_t)(n ? n : 1) * 4);
    for (int64_t i = 0; i < n; i++) v[i] = frand(&seed) * 3;
    fl_tensor *t = NULL;
    fl_tensor_from_f32(&t, v, ndim, shape, dt);
    free(v);
    return t;
}

static float *values(const fl_tensor *t) {
    float *v = malloc((size_t)(fl_tensor_numel(t) ? fl_tensor_numel(t) : 1) * 4);
    fl_tensor_read_f32(t, v);
    return v;
}

/* Every binary op in double on fp32 operands (exact for all but pow, which fl_binary also computes in double). */
static double ref_binop(int op, double x, double y) {
    switch (op) {
    case FL_OP_ADD: return x + y;
    case FL_OP_SUB: return x - y;
    case FL_OP_MUL: return x * y;
    case FL_OP_DIV: return x / y;
    case FL_OP_MAXIMUM: return x > y ? x : y;
    case FL_OP_MINIMUM: return x < y ? x : y;
    case FL_OP_POW: return pow(x, y);
    case FL_OP_WHERE: return x != 0 ? y : -0.0;
    case FL_OP_ATAN2: return (float)atan2(x, y);
    case FL_OP_FMOD: return fmod(x, y);
    case FL_OP_REMAINDER: { double m = fmod(x, y); return m != 0 && ((y < 0) != (m < 0)) ? m + y : m; }
    case FL_OP_HYPOT: return hypot(x, y);   /* (its fp32 rounding exact but within 2^-29 ulp of a tie: test_hypot) */
    case FL_OP_EQ: return x == y;
    case FL_OP_NE: return x != y;
    case FL_OP_LT: return x < y;
    case FL_OP_LE: return x <= y;
    case FL_OP_GT: return x > y;
    default: return x >= y;
    }
}

TEST(ops_broadcast_binary_f32) {
    int64_t sa[3] = { 3, 1, 5 }, sb[2] = { 4, 1 };
    fl_tensor *a = randt(3, sa, FL_F32, 1), *b = randt(2, sb, FL_F32, 2);
    for (int op = 0; op < FL_BINOP_COUNT; op++) {
        fl_tensor *c;
        REQUIRE_OK(fl_binary(&c, (fl_binop)op, a, b));
        REQUIRE(c->ndim == 3 && c->shape[0] == 3 && c->shape[1] == 4 && c->shape[2] == 5, "shape");
        float *va = values(a), *vb = values(b), *vc = values(c);
        int bad = 0;
        for (int i = 0; i < 3; i++) for (int j = 0; j < 4; j++) for (int k = 0; k < 5; k++) {
            double x = va[i * 5 + k], y = vb[j], r = ref_binop(op, x, y);
            float got = vc[(i * 4 + j) * 5 + k];
            bad += !((float)r == got || (r != r && got != got));
        }
        CHECK(bad == 0, "%s: %d wrong", fl_binop_names[op], bad);
        free(va); free(vb); free(vc);
        fl_tensor_release(c);
    }
    fl_tensor *c = NULL;
    int64_t sx[2] = { 2, 3 }, sy[1] = { 4 };
    fl_tensor *x = randt(2, sx, FL_F32, 3), *y = randt(1, sy, FL_F32, 4);
    CHECK(fl_binary(&c, FL_OP_ADD, x, y) == FL_EINVAL && strstr(fl_last_error(), "[2, 3]") && strstr(fl_last_error(), "[4]"),
          "%s", fl_last_error());
    fl_tensor_release(x); fl_tensor_release(y); fl_tensor_release(a); fl_tensor_release(b);
}

TEST(ops_binary_large_and_strided) {
    /* Big enough for the threaded fast path; then the same through a transposed view. */
    int64_t s[2] = { 700, 900 };
    fl_tensor *a = randt(2, s, FL_F32, 5), *b = randt(2, s, FL_F32, 6), *c, *bt, *btt, *d;
    REQUIRE_OK(fl_binary(&c, FL_OP_MUL, a, b));
    float *va = values(a), *vb = values(b), *vc = values(c);
    int bad = 0;
    for (int i = 0; i < 700 * 900; i++) bad += vc[i] != va[i] * vb[i];
    CHECK(bad == 0, "mul: %d wrong", bad);
    REQUIRE_OK(fl_tensor_transpose(&bt, b, 0, 1));
    REQUIRE_OK(fl_tensor_contiguous(&btt, bt));          /* [900, 700] */
    fl_tensor *back;
    REQUIRE_OK(fl_tensor_transpose(&back, btt, 0, 1));   /* [700, 900], strided */
    REQUIRE_OK(fl_binary(&d, FL_OP_SUB, a, back));
    float *vd = values(d);
    bad = 0;
    for (int i = 0; i < 700 * 900; i++) bad += vd[i] != va[i] - vb[i];
    CHECK(bad == 0, "strided sub: %d wrong", bad);
    free(va); free(vb); free(vc); free(vd);
    fl_tensor_release(back); fl_tensor_release(btt); fl_tensor_release(bt);
    fl_tensor_release(d); fl_tensor_release(c); fl_tensor_release(a); fl_tensor_release(b);
}

TEST(ops_binary_bf16_and_promotion) {
    int64_t s[2] = { 17, 33 };
    fl_tensor *a = randt(2, s, FL_BF16, 7), *b = randt(2, s, FL_BF16, 8), *h = randt(2, s, FL_F16, 9), *c, *p;
    REQUIRE_OK(fl_binary(&c, FL_OP_DIV, a, b));
    CHECK(c->dtype == FL_BF16, "bf16 / bf16 stays bf16");
    const uint16_t *pa = fl_tensor_data(a), *pb = fl_tensor_data(b), *pc = fl_tensor_data(c);
    int bad = 0;
    for (int i = 0; i < 17 * 33; i++) bad += pc[i] != fl_f32_to_bf16(fl_bf16_to_f32(pa[i]) / fl_bf16_to_f32(pb[i]));
    CHECK(bad == 0, "bf16 div: %d not RNE of the fp32 result", bad);
    REQUIRE_OK(fl_binary(&p, FL_OP_ADD, a, h));
    CHECK(p->dtype == FL_F32, "bf16 + fp16 -> fp32, got %s", fl_format(p->dtype)->name);
    fl_tensor *sc;
    REQUIRE_OK(fl_binary_scalar(&sc, FL_OP_SUB, a, 2.0, true));
    const uint16_t *ps = fl_tensor_data(sc);
    bad = 0;
    for (int i = 0; i < 17 * 33; i++) bad += ps[i] != fl_f32_to_bf16(2.0f - fl_bf16_to_f32(pa[i]));
    CHECK(bad == 0, "2 - a: %d wrong", bad);
    fl_tensor *u;
    REQUIRE_OK(fl_unary(&u, FL_OP_EXP, h));
    const uint16_t *ph = fl_tensor_data(h), *pu = fl_tensor_data(u);
    bad = 0;
    for (int i = 0; i < 17 * 33; i++) bad += fabs(fl_f16_to_f32(pu[i]) - exp(fl_f16_to_f32(ph[i]))) > 1e-3 * exp(fl_f16_to_f32(ph[i]));
    CHECK(bad == 0, "exp fp16: %d wrong", bad);
    fl_tensor_release(u); fl_tensor_release(sc);
    fl_tensor_release(p); fl_tensor_release(c); fl_tensor_release(a); fl_tensor_release(b); fl_tensor_release(h);
}

TEST(ops_refuse_fp8_and_devices) {
    int64_t s[1] = { 4 };
    fl_tensor *a = randt(1, s, FL_F32, 1), *q, *c = NULL;
    REQUIRE_OK(fl_quantize(&q, a, FL_E4M3, NULL));
    CHECK(fl_binary(&c, FL_OP_ADD, a, q) == FL_EINVAL && strstr(fl_last_error(), "e4m3 tensor: call :dequantize() first"), "%s", fl_last_error());
    CHECK(fl_unary(&c, FL_OP_ABS, q) == FL_EINVAL, "unary on fp8");
    CHECK(fl_matmul(&c, q, a) == FL_EINVAL, "matmul on fp8");
    fl_tensor_release(q); fl_tensor_release(a);
}

static void ref_reduce(const float *v, int64_t outer, int64_t size, int64_t inner, int op, double *out) {
    for (int64_t o = 0; o < outer; o++) for (int64_t j = 0; j < inner; j++) {
        double s = 0, mx = -INFINITY, mn = INFINITY, am = 0;
        for (int64_t k = 0; k < size; k++) {
            double x = v[(o * size + k) * inner + j];
            s += x; mx = fmax(mx, x); mn = fmin(mn, x); am = fmax(am, fabs(x));
        }
        out[o * inner + j] = op == 0 ? s : op == 1 ? s / size : op == 2 ? mx : op == 3 ? mn : am;
    }
}

/* A dense tensor that is not contiguous, reduced along each dim (stop 105: cpu_reduce.c reads it in memory order, no
 * copy, where the kept dims keep their order in memory; here dims 1 and 2 of the [4, 5, 6] transpose of a contiguous
 * [4, 6, 5], and dim 0 the copy's route): every op against double loops over the contiguous values, fp32 and bf16 */
TEST(ops_reductions_dense_permuted_vs_double) {
    const int64_t s[3] = { 4, 6, 5 };   /* a's; at = a.transpose(1, 2): [4, 5, 6] at strides {30, 1, 5} */
    for (int dti = 0; dti < 2; dti++) {
        const fl_dtype dt = dti ? FL_BF16 : FL_F32;
        fl_tensor *a = randt(3, s, dt, 23), *at = NULL, *r = NULL;
        REQUIRE_OK(fl_tensor_transpose(&at, a, 1, 2));
        float *v = values(a);   /* (bf16: the rounded values, exact in fp32) */
        const int64_t ts[3] = { 4, 5, 6 };
        for (int op = 0; op < FL_REDOP_COUNT; op++)
            for (int dim = 0; dim < 3; dim++) {
                REQUIRE_OK(fl_reduce(&r, (fl_redop)op, at, dim, false));
                float *got = values(r);
                int bad = 0;
                const int k0 = dim == 0 ? 1 : 0, k1 = dim == 2 ? 1 : 2;   /* the kept dims of at, in order */
                for (int64_t i = 0; i < ts[k0]; i++)
                    for (int64_t j = 0; j < ts[k1]; j++) {
                        double sum = 0, mx = -INFINITY, mn = INFINITY, am = 0;
                        for (int64_t q = 0; q < ts[dim]; q++) {
                            int64_t id[3];
                            id[dim] = q; id[k0] = i; id[k1] = j;
                            const double x = v[id[0] * 30 + id[2] * 5 + id[1]];   /* at[n, l, c] = a[n, c, l] */
                            sum += x; mx = x > mx ? x : mx; mn = x < mn ? x : mn; am = fabs(x) > am ? fabs(x) : am;
                        }
                        const double e = op == 0 ? sum : op == 1 ? sum / (double)ts[dim] : op == 2 ? mx : op == 3 ? mn : am;
                        const float g = got[i * ts[k1] + j];
                        /* bf16 results: one rounding of the fp32 value */
                        bad += fabs(g - e) > (dt == FL_BF16 ? 1.0 / 128 : 1e-6) * (1 + fabs(e));
                    }
                CHECK(bad == 0, "%s %s dim %d: %d wrong", fl_format(dt)->name, fl_redop_names[op], dim, bad);
                free(got);
                fl_tensor_release(r);
            }
        free(v);
        fl_tensor_release(at);
        fl_tensor_release(a);
    }
}

TEST(ops_reductions_vs_double) {
    int64_t s[3] = { 5, 7, 300 };
    fl_tensor *a = randt(3, s, FL_F32, 11), *at, *r;
    float *v = values(a);
    REQUIRE_OK(fl_tensor_transpose(&at, a, 0, 2));       /* [300, 7, 5], non-contiguous input */
    double ref[2100];
    for (int op = 0; op < FL_REDOP_COUNT; op++) {
        for (int dim = 0; dim < 3; dim++) {
            /* reducing dim d of `at` is reducing dim 2-d of `a` */
            int ad = 2 - dim;
            int64_t outer = 1, inner = 1;
            for (int i = 0; i < ad; i++) outer *= s[i];
            for (int i = ad + 1; i < 3; i++) inner *= s[i];
            ref_reduce(v, outer, s[ad], inner, op, ref);
            REQUIRE_OK(fl_reduce(&r, (fl_redop)op, at, dim, false));
            CHECK(r->ndim == 2, "keepdim=false drops the dim");
            float *got = values(r);
            /* r is laid out as `at` without dim; compare through the index map. */
            int bad = 0;
            int64_t n0 = r->shape[0], n1 = r->shape[1];
            for (int64_t i = 0; i < n0; i++) for (int64_t j = 0; j < n1; j++) {
                int64_t idx_at[3], k = 0, ia[3];
                for (int d = 0; d < 3; d++) idx_at[d] = d == dim ? 0 : (k++ == 0 ? i : j);
                for (int d = 0; d < 3; d++) ia[d] = idx_at[2 - d];
                int64_t ro = ad == 0 ? ia[1] * s[2] + ia[2] : ad == 1 ? ia[0] * s[2] + ia[2] : ia[0] * s[1] + ia[1];
                double e = ref[ro];
                bad += fabs(got[i * n1 + j] - e) > 1e-6 * (1 + fabs(e));
            }
            CHECK(bad == 0, "%s dim %d: %d wrong", fl_redop_names[op], dim, bad);
            free(got);
            fl_tensor_release(r);
        }
        REQUIRE_OK(fl_reduce(&r, (fl_redop)op, at, FL_ALL_DIMS, false));
        CHECK(r->ndim == 0, "all-reduce is 0-d");
        ref_reduce(v, 1, 5 * 7 * 300, 1, op, ref);
        float g;
        fl_tensor_read_f32(r, &g);
        CHECK_CLOSE(g, ref[0], 1e-6, 1e-6);
        fl_tensor_release(r);
    }
    CHECK(fl_reduce(&r, FL_OP_SUM, a, 3, false) == FL_EINVAL && strstr(fl_last_error(), "[5, 7, 300]"), "%s", fl_last_error());
    REQUIRE_OK(fl_reduce(&r, FL_OP_MEAN, a, -1, true));
    CHECK(r->ndim == 3 && r->shape[2] == 1, "keepdim");
    fl_tensor_release(r);
    free(v);
    fl_tensor_release(at); fl_tensor_release(a);
}

/* Naive double GEMM over [B, M, K] x [B?, K, N]; inputs already as the GEMM sees them. */
static void ref_gemm(const float *a, const float *b, double *c, int64_t B, int64_t M, int64_t K, int64_t N, bool bcast_b) {
    for (int64_t z = 0; z < B; z++) for (int64_t i = 0; i < M; i++) for (int64_t j = 0; j < N; j++) {
        double s = 0;
        const float *bb = b + (bcast_b ? 0 : z * K * N);
        for (int64_t k = 0; k < K; k++) s += (double)a[(z * M + i) * K + k] * bb[k * N + j];
        c[(z * M + i) * N + j] = s;
    }
}

static int gemm_mismatches(const float *got, const double *ref, int64_t n, const float *a, const float *b,
                           int64_t K, double rel) {
    (void)a; (void)b;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad += fabs(got[i] - ref[i]) > rel * (1 + fabs(ref[i])) * sqrt((double)K);
    return bad;
}

TEST(ops_matmul_f32_bf16_f16) {
    int64_t sa[2] = { 37, 53 }, sb[2] = { 53, 29 };
    fl_dtype dts[3] = { FL_F32, FL_BF16, FL_F16 };
    for (int d = 0; d < 3; d++) {
        fl_tensor *a = randt(2, sa, dts[d], 21), *b = randt(2, sb, dts[d], 22), *c;
        REQUIRE_OK(fl_matmul(&c, a, b));
        REQUIRE(c->ndim == 2 && c->shape[0] == 37 && c->shape[1] == 29 && c->dtype == dts[d], "shape/dtype");
        float *va = values(a), *vb = values(b), *vc = values(c);   /* va, vb: the rounded inputs */
        double ref[37 * 29];
        ref_gemm(va, vb, ref, 1, 37, 53, 29, false);
        /* fp32 accumulation; a bf16/fp16 output adds one rounding of its own */
        double rel = d == 0 ? 1e-6 : d == 1 ? 4e-3 : 5e-4;
        int bad = gemm_mismatches(vc, ref, 37 * 29, va, vb, 53, rel);
        CHECK(bad == 0, "%s matmul: %d of %d outside tolerance", fl_format(dts[d])->name, bad, 37 * 29);
        free(va); free(vb); free(vc);
        fl_tensor_release(c); fl_tensor_release(a); fl_tensor_release(b);
    }
    fl_tensor *a = randt(2, sa, FL_F32, 1), *c = NULL;
    CHECK(fl_matmul(&c, a, a) == FL_EINVAL && strstr(fl_last_error(), "matmul: shapes [37, 53] and [37, 53] are not aligned (53 != 37)"),
          "%s", fl_last_error());
    fl_tensor_release(a);
}

TEST(ops_matmul_batched_broadcast) {
    /* [3, 1, 4, 6] x [2, 6, 5] -> [3, 2, 4, 5]; a's batch row repeats over 2, b's over 3 */
    int64_t sa[4] = { 3, 1, 4, 6 }, sb[3] = { 2, 6, 5 };
    fl_tensor *a = randt(4, sa, FL_F32, 31), *b = randt(3, sb, FL_F32, 32), *c;
    REQUIRE_OK(fl_matmul(&c, a, b));
    REQUIRE(c->ndim == 4 && c->shape[0] == 3 && c->shape[1] == 2 && c->shape[2] == 4 && c->shape[3] == 5, "shape");
    float *va = values(a), *vb = values(b), *vc = values(c);
    int bad = 0;
    for (int x = 0; x < 3; x++) for (int y = 0; y < 2; y++) {
        double ref[20];
        ref_gemm(va + x * 24, vb + y * 30, ref, 1, 4, 6, 5, false);
        for (int i = 0; i < 20; i++) bad += fabs(vc[(x * 2 + y) * 20 + i] - ref[i]) > 1e-5;
    }
    CHECK(bad == 0, "broadcast batched matmul: %d wrong", bad);
    free(va); free(vb); free(vc); fl_tensor_release(c);
    /* [2, 4, 6] x [6, 5] (shared weight) and vector forms */
    int64_t s3[3] = { 2, 4, 6 }, sw[2] = { 6, 5 }, sv[1] = { 6 };
    fl_tensor *x = randt(3, s3, FL_BF16, 33), *w = randt(2, sw, FL_BF16, 34), *y;
    REQUIRE_OK(fl_matmul(&y, x, w));
    REQUIRE(y->ndim == 3 && y->shape[0] == 2 && y->shape[2] == 5, "shape");
    float *vx = values(x), *vw = values(w), *vy = values(y);
    double ref[40];
    ref_gemm(vx, vw, ref, 2, 4, 6, 5, true);
    bad = 0;
    for (int i = 0; i < 40; i++) bad += fabs(vy[i] - ref[i]) > 8e-3 * (1 + fabs(ref[i]));
    CHECK(bad == 0, "bf16 shared-weight batch: %d wrong", bad);
    free(vx); free(vw); free(vy); fl_tensor_release(y);
    fl_tensor *v = randt(1, sv, FL_F32, 35), *wf = randt(2, sw, FL_F32, 36), *r;
    REQUIRE_OK(fl_matmul(&r, v, wf));
    CHECK(r->ndim == 1 && r->shape[0] == 5, "[6] x [6, 5] -> [5]");
    fl_tensor_release(r);
    REQUIRE_OK(fl_matmul(&r, v, v));
    CHECK(r->ndim == 0, "[6] x [6] -> scalar");
    float *vv = values(v), dot;
    double sdot = 0;
    for (int i = 0; i < 6; i++) sdot += (double)vv[i] * vv[i];
    fl_tensor_read_f32(r, &dot);
    CHECK_CLOSE(dot, sdot, 1e-5, 1e-6);
    free(vv); fl_tensor_release(r);
    fl_tensor_release(v); fl_tensor_release(wf); fl_tensor_release(x); fl_tensor_release(w);
    fl_tensor_release(a); fl_tensor_release(b);
}

/* Reference per-tensor / per-row quantization from scalar casts. */
TEST(ops_quantize_per_tensor_and_row) {
    int64_t s[2] = { 6, 50 };
    fl_tensor *a = randt(2, s, FL_F32, 41), *q, *qr;
    float *v = values(a);
    for (int j = 0; j < 50; j++) v[2 * 50 + j] = 0;     /* an all-zero row keeps scale 1 */
    fl_tensor_release(a);
    REQUIRE_OK(fl_tensor_from_f32(&a, v, 2, s, FL_F32));
    fl_dtype fmts[2] = { FL_E4M3, FL_E5M2 };
    for (int f = 0; f < 2; f++) {
        float fmax = (float)fl_format(fmts[f])->max;
        REQUIRE_OK(fl_quantize(&q, a, fmts[f], NULL));
        float amax = 0;
        for (int i = 0; i < 300; i++) amax = fmaxf(amax, fabsf(v[i]));
        float scale = fmax / amax, sinv;
        fl_tensor_read_f32(q->scale_inv, &sinv);
        CHECK(sinv == 1.0f / scale, "%s scale_inv %g vs %g", fl_format(fmts[f])->name, sinv, 1.0f / scale);
        CHECK(q->qstats.amax == amax, "qstats.amax %g vs %g", q->qstats.amax, amax);
        const uint8_t *pq = fl_tensor_data(q);
        int bad = 0;
        for (int i = 0; i < 300; i++) bad += pq[i] != fl_f32_to_fp8(v[i] * scale, fmts[f], FL_SATURATE);
        CHECK(bad == 0, "%s per-tensor: %d bytes differ", fl_format(fmts[f])->name, bad);
        fl_tensor_release(q);
        fl_quant_opts o;
        fl_quant_opts_default(&o);
        o.axis = 0;
        REQUIRE_OK(fl_quantize(&qr, a, fmts[f], &o));
        const uint8_t *pr = fl_tensor_data(qr);
        float si[6];
        fl_tensor_read_f32(qr->scale_inv, si);
        bad = 0;
        for (int r = 0; r < 6; r++) {
            float ra = 0;
            for (int j = 0; j < 50; j++) ra = fmaxf(ra, fabsf(v[r * 50 + j]));
            float rs = ra > 0 ? fmax / ra : 1.0f;
            bad += si[r] != 1.0f / rs;
            for (int j = 0; j < 50; j++) bad += pr[r * 50 + j] != fl_f32_to_fp8(v[r * 50 + j] * rs, fmts[f], FL_SATURATE);
        }
        CHECK(bad == 0, "%s per-row: %d differ", fl_format(fmts[f])->name, bad);
        /* dequantize = decode(byte) * scale_inv of the row */
        fl_tensor *d;
        REQUIRE_OK(fl_dequantize(&d, qr, FL_F32));
        const float *pd = fl_tensor_data(d);
        bad = 0;
        for (int i = 0; i < 300; i++) bad += pd[i] != fl_fp8_to_f32(pr[i], fmts[f]) * si[i / 50];
        CHECK(bad == 0, "dequantize per-row: %d differ", bad);
        fl_tensor_release(d);
        fl_tensor_release(qr);
    }
    /* A given scale is used as is; a bf16 source goes through the same cast. */
    fl_quant_opts o;
    fl_quant_opts_default(&o);
    o.scale = 4.0f;
    fl_tensor *ab;
    REQUIRE_OK(fl_tensor_to(&ab, a, FL_BF16));
    REQUIRE_OK(fl_quantize(&q, ab, FL_E4M3, &o));
    const uint8_t *pq = fl_tensor_data(q);
    const uint16_t *pb = fl_tensor_data(ab);
    int bad = 0;
    for (int i = 0; i < 300; i++) bad += pq[i] != fl_f32_to_e4m3(fl_bf16_to_f32(pb[i]) * 4.0f, FL_SATURATE);
    CHECK(bad == 0, "given scale on bf16: %d differ", bad);
    fl_tensor_release(q); fl_tensor_release(ab);
    fl_tensor *bad_q = NULL;
    o.axis = 2;
    CHECK(fl_quantize(&bad_q, a, FL_E4M3, &o) == FL_EINVAL && strstr(fl_last_error(), "[6, 50]"), "%s", fl_last_error());
    CHECK(fl_quantize(&bad_q, a, FL_BF16, NULL) == FL_EINVAL, "bf16 target refused");
    free(v);
    fl_tensor_release(a);
}

TEST(ops_interrupt_long_op) {
    int64_t s[1] = { 8 << 20 };
    fl_tensor *a, *c = NULL;
    REQUIRE_OK(fl_tensor_full(&a, FL_F32, 1, s, 1.0, FL_DEV_CPU));
    fl_interrupt_set();
    CHECK(fl_binary(&c, FL_OP_ADD, a, a) == FL_EINTR && c == NULL, "add not interrupted");
    fl_interrupt_set();
    CHECK(fl_reduce(&c, FL_OP_SUM, a, FL_ALL_DIMS, false) == FL_EINTR, "sum not interrupted");
    fl_interrupt_set();
    CHECK(fl_quantize(&c, a, FL_E4M3, NULL) == FL_EINTR, "quantize not interrupted");
    fl_interrupt_clear();
    REQUIRE_OK(fl_reduce(&c, FL_OP_SUM, a, FL_ALL_DIMS, false));
    float sum;
    fl_tensor_read_f32(c, &sum);
    CHECK(sum == (float)(8 << 20), "sum after clearing %g", sum);
    fl_tensor_release(c);
    fl_tensor_release(a);
}

TEST(ops_arange_rand) {
    fl_tensor *t;
    REQUIRE_OK(fl_arange(&t, 0, 1, 0.25, FL_F32));
    float v[4];
    CHECK(fl_tensor_numel(t) == 4, "arange count");
    fl_tensor_read_f32(t, v);
    CHECK(v[3] == 0.75f, "arange value");
    fl_tensor_release(t);
    CHECK(fl_arange(&t, 0, 1, 0, FL_F32) == FL_EINVAL, "step 0 refused");
}

TEST(ops_matmul_transposed_and_empty_k) {
    int64_t sw[2] = { 9, 13 }, sx[2] = { 4, 13 };
    fl_tensor *w = randt(2, sw, FL_F32, 51), *x = randt(2, sx, FL_F32, 52), *wt, *y;
    REQUIRE_OK(fl_tensor_transpose(&wt, w, 0, 1));       /* x · wᵀ, the linear-layer layout */
    REQUIRE_OK(fl_matmul(&y, x, wt));
    float *vx = values(x), *vw = values(w), *vy = values(y);
    int bad = 0;
    for (int i = 0; i < 4; i++) for (int j = 0; j < 9; j++) {
        double s = 0;
        for (int k = 0; k < 13; k++) s += (double)vx[i * 13 + k] * vw[j * 13 + k];
        bad += fabs(vy[i * 9 + j] - s) > 1e-5;
    }
    CHECK(bad == 0, "x . w^T: %d wrong", bad);
    free(vx); free(vw); free(vy);
    fl_tensor_release(y); fl_tensor_release(wt); fl_tensor_release(w); fl_tensor_release(x);
    int64_t a0[2] = { 3, 0 }, b0[2] = { 0, 2 };
    fl_tensor *a, *b, *c;
    REQUIRE_OK(fl_tensor_empty(&a, FL_F32, 2, a0, FL_DEV_CPU));
    REQUIRE_OK(fl_tensor_empty(&b, FL_F32, 2, b0, FL_DEV_CPU));
    REQUIRE_OK(fl_matmul(&c, a, b));
    float v[6];
    fl_tensor_read_f32(c, v);
    CHECK(v[0] == 0 && v[5] == 0, "K = 0 gives zeros");
    fl_tensor_release(c); fl_tensor_release(a); fl_tensor_release(b);
}

/* Per-column and per-row current scaling of a tensor large enough for threads, with the values that test the
 * statistics: a column of zeros, a NaN, a column whose small values underflow. Codes, scales and stats against a
 * scalar reference, and the same on 1 and 2 threads. */
TEST(ops_quantize_per_axis_threads_match_scalar) {
    const int R = 2000, C = 70;
    int64_t s[2] = { R, C };
    fl_tensor *a = randt(2, s, FL_F32, 62);
    float *v = values(a);
    for (int i = 0; i < R; i++) {
        v[i * C + 3] = 0.0f;                                    /* amax 0 */
        if (i > 0) v[i * C + 5] *= 1e-6f;                       /* underflows next to row 0's 3.0 */
    }
    v[0 * C + 5] = 3.0f;
    v[777 * C + 9] = NAN;
    fl_tensor_release(a);
    REQUIRE_OK(fl_tensor_from_f32(&a, v, 2, s, FL_F32));
    uint8_t *first = malloc((size_t)(R * C));
    float *si = malloc(R * sizeof(float)), *si1 = malloc(R * sizeof(float));
    fl_cast_stats st1 = { 0, 0, 0, 0 };
    const int before = omp_get_max_threads();
    for (int run = 0; run < 4; run++) {
        const int axis = run / 2, threads = run % 2 + 1;
        fl_quant_opts o;
        fl_quant_opts_default(&o);
        o.axis = axis;
        const int ns = axis ? C : R, len = axis ? R : C;   /* scales, and the elements under each */
        omp_set_num_threads(threads);
        fl_tensor *q = NULL;
        REQUIRE_OK(fl_quantize(&q, a, FL_E4M3, &o));
        const uint8_t *p = fl_tensor_data(q);
        fl_tensor_read_f32(q->scale_inv, si);
        fl_cast_stats st;
        REQUIRE_OK(fl_tensor_qstats(q, &st));
        int bad = 0;
        int64_t unf = 0, nan = 0;
        float amax = 0.0f;
        for (int j = 0; j < ns; j++) {
            float am = 0.0f;
            for (int i = 0; i < len; i++) {
                const float x = axis ? v[i * C + j] : v[j * C + i];
                if (!isnan(x)) am = fmaxf(am, fabsf(x));
            }
            amax = fmaxf(amax, am);
            const float sc = 1.0f / si[j];
            if (am > 0.0f) bad += fabsf(si[j] - am / 448.0f) > 1e-6f * (am / 448.0f);
            for (int i = 0; i < len; i++) {
                const int64_t at = axis ? (int64_t)i * C + j : (int64_t)j * C + i;
                const float x = v[at];
                const uint8_t want = fl_f32_to_e4m3(x * sc, FL_SATURATE);
                bad += p[at] != want;
                nan += isnan(x);
                unf += x != 0.0f && !isnan(x) && (want & 0x7f) == 0;
            }
        }
        CHECK(bad == 0, "axis %d, %d threads: %d codes or scales differ from the scalar reference", axis, threads, bad);
        CHECK(st.amax == amax && st.nan == nan && st.underflow == unf && st.saturated == 0,
              "axis %d, %d threads: stats amax %g nan %lld underflow %lld saturated %lld, expected %g %lld %lld 0", axis, threads,
              st.amax, (long long)st.nan, (long long)st.underflow, (long long)st.saturated, amax, (long long)nan,
              (long long)unf);
        CHECK(unf > 1000, "the small column should underflow (%lld)", (long long)unf);
        if (threads == 1) {
            memcpy(first, p, (size_t)(R * C));
            memcpy(si1, si, (size_t)ns * sizeof(float));
            st1 = st;
        } else {
            CHECK(memcmp(first, p, (size_t)(R * C)) == 0 && memcmp(si1, si, (size_t)ns * sizeof(float)) == 0 &&
                  st1.underflow == st.underflow && st1.amax == st.amax, "axis %d: 1 and 2 threads differ", axis);
        }
        fl_tensor_release(q);
    }
    omp_set_num_threads(before);
    free(first); free(si); free(si1);
    free(v);
    fl_tensor_release(a);
}

/* quantize_rows_aux (rowwise dY: the per-row cast, dY's column amaxes and the bias gradient in one read) gives
 * bit for bit what the three separate passes give, on 1 and 2 threads; with either extra output left out too. */
TEST(ops_quantize_rows_aux_matches_separate_passes) {
    const int R = 1000, C = 96;   /* 4 chunks of FL_CPU_SUM_ROWS rows, the last one short */
    int64_t s[2] = { R, C };
    fl_tensor *a = randt(2, s, FL_F32, 63);
    float *v = values(a);
    v[5 * C + 7] = NAN;
    for (int i = 0; i < R; i++) v[i * C + 11] *= 1e-12f;   /* below E5M2 subnormals once scaled per row */
    fl_tensor_release(a);
    REQUIRE_OK(fl_tensor_from_f32(&a, v, 2, s, FL_F32));
    const fl_device *dev = fl_cpu_device();
    REQUIRE(dev->quantize_rows_aux != NULL, "the CPU has quantize_rows_aux");
    /* the separate passes */
    fl_tensor *q0 = NULL, *db0 = NULL;
    float cm0[96];
    REQUIRE_OK(fl_fp8_cast_current_2d(&q0, a, FL_E5M2, 0, 0, true));
    REQUIRE_OK(dev->amax(a, 1, cm0));
    REQUIRE_OK(fl_reduce_raw(&db0, FL_OP_SUM, a, 0, false));
    fl_cast_stats st0;
    REQUIRE_OK(fl_tensor_qstats(q0, &st0));
    const int before = omp_get_max_threads();
    for (int run = 0; run < 6; run++) {
        const int threads = run % 2 + 1;
        const bool want_cm = run / 2 != 1, want_db = run / 2 != 2;
        omp_set_num_threads(threads);
        fl_tensor *q = NULL, *db = NULL, *si = NULL;
        int64_t rs = R, cs = C;
        REQUIRE_OK(fl_tensor_empty(&q, FL_E5M2, 2, s, FL_DEV_CPU));
        REQUIRE_OK(fl_tensor_empty(&si, FL_F32, 1, &rs, FL_DEV_CPU));
        fl_tensor_release(q->scale_inv);
        q->scale_inv = si;
        q->scale_axis = 0;
        if (want_db) REQUIRE_OK(fl_tensor_empty(&db, FL_F32, 1, &cs, FL_DEV_CPU));
        float cm[96];
        REQUIRE_OK(dev->quantize_rows_aux(q, a, 0, true, FL_SATURATE, want_cm ? cm : NULL, db));
        fl_cast_stats st;
        REQUIRE_OK(fl_tensor_qstats(q, &st));
        CHECK(memcmp(fl_tensor_data(q), fl_tensor_data(q0), (size_t)(R * C)) == 0 &&
              memcmp(fl_tensor_data(q->scale_inv), fl_tensor_data(q0->scale_inv), (size_t)R * 4) == 0,
              "run %d: codes or scales differ from the per-row cast", run);
        CHECK(st.amax == st0.amax && st.underflow == st0.underflow && st.saturated == st0.saturated && st.nan == st0.nan,
              "run %d: stats differ", run);
        if (want_cm) CHECK(memcmp(cm, cm0, sizeof cm) == 0, "run %d: column amaxes differ from the amax pass", run);
        if (want_db) CHECK(memcmp(fl_tensor_data(db), fl_tensor_data(db0), (size_t)C * 4) == 0,
                           "run %d: the bias gradient differs from the reduction's bits", run);
        fl_tensor_release(q); fl_tensor_release(db);
    }
    omp_set_num_threads(before);
    CHECK(st0.nan == 1 && st0.underflow > 100, "the data should hold a NaN and underflows (%lld, %lld)",
          (long long)st0.nan, (long long)st0.underflow);
    /* a per-tensor destination is refused */
    fl_tensor *qt = NULL;
    REQUIRE_OK(fl_tensor_empty(&qt, FL_E5M2, 2, s, FL_DEV_CPU));
    CHECK(dev->quantize_rows_aux(qt, a, 0, true, FL_SATURATE, NULL, NULL) == FL_EINVAL, "per-tensor dst accepted");
    fl_tensor_release(qt);
    fl_tensor_release(q0); fl_tensor_release(db0); fl_tensor_release(a);
    free(v);
}

TEST(ops_quantize_per_column) {
    /* axis 1 of [5, 3]: one scale per column, runs of length 1 */
    int64_t s[2] = { 5, 3 };
    fl_tensor *a = randt(2, s, FL_F32, 61), *q;
    float *v = values(a);
    fl_quant_opts o;
    fl_quant_opts_default(&o);
    o.axis = 1;
    o.margin = 1;
    REQUIRE_OK(fl_quantize(&q, a, FL_E4M3, &o));
    const uint8_t *p = fl_tensor_data(q);
    float si[3];
    fl_tensor_read_f32(q->scale_inv, si);
    int bad = 0;
    for (int j = 0; j < 3; j++) {
        float am = 0;
        for (int i = 0; i < 5; i++) am = fmaxf(am, fabsf(v[i * 3 + j]));
        float sc = 448.0f / 2.0f / am;                     /* margin 1: one power of two of headroom */
        bad += fabsf(si[j] - 1.0f / sc) > 1e-7f * (1.0f / sc);
        for (int i = 0; i < 5; i++) bad += p[i * 3 + j] != fl_f32_to_e4m3(v[i * 3 + j] * sc, FL_SATURATE);
    }
    CHECK(bad == 0, "per-column: %d differ", bad);
    free(v);
    fl_tensor_release(q); fl_tensor_release(a);
}

/* x^s by a scalar s: the shortcuts for s = 2, 3, 4, 0.5, -1, -2, -0.5, 1, 0 (core/cpu/cpu_elementwise.c, pow_by_scalar) give
 * the bits of (float)pow((double)x, s), the path every other s takes: every 4093rd float and the specials (every float
 * was compared once by hand: none differs but NaNs' sign and payload bits, which are not compared here), but x^0.5
 * and x^-0.5 at −0 and −inf, torch's sqrt and rsqrt there (−0 and NaN, −inf and NaN; since stop 98). */
TEST(pow_scalar_shortcuts) {
    static const float specials[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, FLT_MIN, -FLT_MIN, FLT_MAX,
                                      -FLT_MAX, 1e-45f, -1e-45f, 1.8446744e19f, 5.421011e-20f, 3.4028235e38f };
    const int64_t nspec = (int64_t)(sizeof specials / sizeof specials[0]);
    const int64_t n = (int64_t)(0xFFFFFFFFull / 4093) + 1 + nspec;
    float *x = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n - nspec; i++) { uint32_t u = (uint32_t)((uint64_t)i * 4093); memcpy(&x[i], &u, 4); }
    memcpy(x + n - nspec, specials, sizeof specials);
    fl_tensor *t = NULL;
    CHECK_OK(fl_tensor_from_f32(&t, x, 1, &n, FL_F32));
    static const double exps[] = { 2, 3, 4, 0.5, -1, -2, -0.5, 1, 0, 2.5 };
    for (size_t e = 0; e < sizeof exps / sizeof exps[0]; e++) {
        fl_tensor *r = NULL;
        CHECK_OK(fl_binary_scalar_raw(&r, FL_OP_POW, t, exps[e], false));
        const float *got = fl_tensor_data(r);
        int64_t bad = 0, first = -1;
        float want_first = 0.0f;
        for (int64_t i = 0; i < n; i++) {
            float want = (float)pow((double)x[i], exps[e]);
            if ((exps[e] == 0.5 || exps[e] == -0.5) && (x[i] == -INFINITY || (x[i] == 0.0f && signbit(x[i]))))
                want = exps[e] == 0.5 ? sqrtf(x[i]) : (float)(1.0 / sqrt((double)x[i]));
            uint32_t a, b;
            memcpy(&a, &got[i], 4);
            memcpy(&b, &want, 4);
            if (a != b && !(isnan(want) && isnan(got[i]))) { bad++; if (first < 0) { first = i; want_first = want; } }
        }
        CHECK(bad == 0, "x^%g: %lld of %lld differ from the wanted value, first at x = %a: %a, want %a", exps[e],
              (long long)bad, (long long)n, first >= 0 ? (double)x[first] : 0.0, first >= 0 ? (double)got[first] : 0.0,
              (double)want_first);
        fl_tensor_release(r);
    }
    fl_tensor_release(t);
    free(x);
}

/* fl_logsumexp reduces one dim: FL_ALL_DIMS is refused (it read shape[-1000] before 2026-12-06, the API sweep's
 * seed 104 under UBSan, reached from Lua as x:_logsumexp(nil)), as are a dim out of range and a 0-d tensor */
TEST(logsumexp_refuses_all_dims) {
    int64_t s[2] = { 2, 3 };
    fl_tensor *a = randt(2, s, FL_F32, 7), *r = NULL, *z = NULL;
    CHECK(fl_logsumexp(&r, a, FL_ALL_DIMS, false) == FL_EINVAL && strstr(fl_last_error(), "expected one dim"), "%s",
          fl_last_error());
    CHECK(r == NULL, "no result on a refusal");
    CHECK(fl_logsumexp(&r, a, 2, false) == FL_EINVAL && strstr(fl_last_error(), "out of range"), "%s", fl_last_error());
    REQUIRE_OK(fl_tensor_full(&z, FL_F32, 0, NULL, 1.0, a->device));
    CHECK(fl_logsumexp(&r, z, FL_ALL_DIMS, false) == FL_EINVAL, "0-d refused");
    REQUIRE_OK(fl_logsumexp(&r, a, -1, false));
    CHECK(r->ndim == 1 && r->shape[0] == 2, "one dim reduced");
    fl_tensor_release(r); fl_tensor_release(z); fl_tensor_release(a);
}
