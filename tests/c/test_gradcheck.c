/* test_gradcheck.c — every differentiable op's backward against finite differences. For each op: random
 * inputs, loss = Σ op(x)·R with random R; the analytic gradient comes from fl_backward(out, R), the
 * numeric one from central differences (h = 1e-6) of a FLOAT64 re-implementation of the op's forward
 * written here, so the only fp32 error is in the code under test (tolerance 2e-3 abs + 1e-2 rel).
 * The fp32 forward is also checked against the float64 one. */
#include "runner.h"
#include "autograd.h"
#include "nn.h"
#include "ops.h"
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define MAXIN 4
typedef struct gc_case {
    const char *name;
    int nin;
    int ndim[MAXIN];
    int64_t shape[MAXIN][4];
    bool grad[MAXIN];
    void (*init)(int i, double *v, int64_t n);             /* NULL: N(0,1)-ish values */
    fl_status (*f32)(fl_tensor **out, fl_tensor **in);
    void (*f64)(const double *const *in, double *out);      /* writes numel(out) values */
    int iarg;                                               /* op parameter for both versions */
} gc_case;

static const gc_case *cur;   /* the case f64/f32 are running for (its shapes and iarg) */

static uint64_t lcg = 12345;
static double urand(void) { lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL; return (double)(lcg >> 11) / 9007199254740992.0; }
static double nrand(void) { return (urand() + urand() + urand() - 1.5) * 2.0; }

static int64_t numel_of(int nd, const int64_t *s) { int64_t n = 1; for (int i = 0; i < nd; i++) n *= s[i]; return n; }

static void gradcheck(int *fl__failed, const gc_case *c) {
    cur = c;
    fl_tensor *in[MAXIN] = { NULL }, *out = NULL, *R = NULL;
    double *v[MAXIN] = { NULL };
    int64_t n[MAXIN];
    for (int i = 0; i < c->nin; i++) {
        n[i] = numel_of(c->ndim[i], c->shape[i]);
        v[i] = malloc(sizeof(double) * (size_t)(n[i] ? n[i] : 1));
        float *f = malloc(sizeof(float) * (size_t)(n[i] ? n[i] : 1));
        if (c->init) c->init(i, v[i], n[i]); else for (int64_t j = 0; j < n[i]; j++) v[i][j] = nrand();
        for (int64_t j = 0; j < n[i]; j++) { f[j] = (float)v[i][j]; v[i][j] = f[j]; }   /* same values in both */
        CHECK_OK(fl_tensor_from_f32(&in[i], f, c->ndim[i], c->shape[i], FL_F32));
        free(f);
        if (c->grad[i]) CHECK_OK(fl_tensor_set_requires_grad(in[i], true));
    }
    fl_status st = c->f32(&out, in);
    CHECK(st == FL_OK, "%s: forward failed: %s", c->name, fl_last_error());
    if (st != FL_OK) goto done;
    int64_t m = fl_tensor_numel(out);
    double *ref = malloc(sizeof(double) * (size_t)(m ? m : 1)), *rr = malloc(sizeof(double) * (size_t)(m ? m : 1));
    float *of = malloc(sizeof(float) * (size_t)(m ? m : 1)), *rf = malloc(sizeof(float) * (size_t)(m ? m : 1));
    for (int64_t j = 0; j < m; j++) { rf[j] = (float)nrand(); rr[j] = rf[j]; }
    CHECK_OK(fl_tensor_from_f32(&R, rf, out->ndim, out->shape, FL_F32));
    c->f64((const double *const *)v, ref);
    CHECK_OK(fl_tensor_read_f32(out, of));
    for (int64_t j = 0; j < m; j++)
        if (fabs(of[j] - ref[j]) > 1e-4 + 1e-4 * fabs(ref[j])) { CHECK(0, "%s: forward[%lld] %.8g vs float64 %.8g", c->name, (long long)j, of[j], ref[j]); break; }
    CHECK(out->requires_grad, "%s: output does not require grad", c->name);
    st = fl_backward(out, R, false);
    CHECK(st == FL_OK, "%s: backward failed: %s", c->name, fl_last_error());
    for (int i = 0; i < c->nin && st == FL_OK; i++) {
        if (!c->grad[i]) continue;
        REQUIRE(in[i]->grad, "%s: input %d got no gradient", c->name, i);
        float *g = malloc(sizeof(float) * (size_t)n[i]);
        CHECK_OK(fl_tensor_read_f32(in[i]->grad, g));
        int bad = 0;
        for (int64_t j = 0; j < n[i] && bad < 3; j++) {
            const double h = 1e-6, x0 = v[i][j];
            double lp = 0, lm = 0;
            v[i][j] = x0 + h; c->f64((const double *const *)v, ref); for (int64_t k = 0; k < m; k++) lp += ref[k] * rr[k];
            v[i][j] = x0 - h; c->f64((const double *const *)v, ref); for (int64_t k = 0; k < m; k++) lm += ref[k] * rr[k];
            v[i][j] = x0;
            double num = (lp - lm) / (2 * h);
            if (fabs(g[j] - num) > 2e-3 + 1e-2 * fabs(num)) {
                CHECK(0, "%s: d/d input%d[%lld]: analytic %.7g vs numeric %.7g", c->name, i, (long long)j, g[j], num);
                bad++;
            }
        }
        free(g);
    }
    free(ref); free(rr); free(of); free(rf);
done:
    for (int i = 0; i < c->nin; i++) { fl_tensor_release(in[i]); free(v[i]); }
    fl_tensor_release(out);
    fl_tensor_release(R);
}

/* ---- float64 references ------------------------------------------------------------------- */

#define S(i, d) (cur->shape[i][d])

/* [M,K] x [K,N] */
static void mm64(const double *a, const double *b, double *o, int64_t M, int64_t K, int64_t N) {
    for (int64_t i = 0; i < M; i++) for (int64_t j = 0; j < N; j++) {
        double s = 0; for (int64_t k = 0; k < K; k++) s += a[i * K + k] * b[k * N + j]; o[i * N + j] = s; }
}
static void f64_matmul(const double *const *in, double *o) { mm64(in[0], in[1], o, S(0, 0), S(0, 1), S(1, 1)); }
static fl_status f32_matmul(fl_tensor **o, fl_tensor **in) { return fl_matmul(o, in[0], in[1]); }

/* batched [B,M,K] x [K,N] (b broadcast over the batch) */
static void f64_bmm(const double *const *in, double *o) {
    int64_t B = S(0, 0), M = S(0, 1), K = S(0, 2), N = S(1, 1);
    for (int64_t b = 0; b < B; b++) mm64(in[0] + b * M * K, in[1], o + b * M * N, M, K, N);
}
/* [K] x [B,K,N] → [B,N] (vector promoted and broadcast) */
static void f64_vbmm(const double *const *in, double *o) {
    int64_t K = S(0, 0), B = S(1, 0), N = S(1, 2);
    for (int64_t b = 0; b < B; b++) mm64(in[0], in[1] + b * K * N, o + b * N, 1, K, N);
}

/* linear: x [R, in], W [out, in], b [out] */
static void f64_linear(const double *const *in, double *o) {
    int64_t R = S(0, 0) * (cur->ndim[0] == 3 ? S(0, 1) : 1), I = S(1, 1), O = S(1, 0);
    for (int64_t r = 0; r < R; r++) for (int64_t j = 0; j < O; j++) {
        double s = cur->nin > 2 ? in[2][j] : 0;
        for (int64_t k = 0; k < I; k++) s += in[0][r * I + k] * in[1][j * I + k];
        o[r * O + j] = s;
    }
}
static fl_status f32_linear(fl_tensor **o, fl_tensor **in) { return fl_linear(o, in[0], in[1], cur->nin > 2 ? in[2] : NULL); }

/* binary with broadcasting of a [A,1,C]-style shape against b [B?,C]: generic index mapping */
/* The differentiable binary ops in float64 (comparisons have no gradient and are not checked here). */
static double f64_op(int op, double a, double b) {
    switch (op) {
    case FL_OP_ADD: return a + b;
    case FL_OP_SUB: return a - b;
    case FL_OP_MUL: return a * b;
    case FL_OP_DIV: return a / b;
    case FL_OP_MAXIMUM: return a > b ? a : b;
    case FL_OP_MINIMUM: return a < b ? a : b;
    case FL_OP_WHERE: return a != 0 ? b : -0.0;
    case FL_OP_ATAN2: return atan2(a, b);
    case FL_OP_FMOD: return fmod(a, b);
    case FL_OP_REMAINDER: { double m = fmod(a, b); return m != 0 && ((b < 0) != (m < 0)) ? m + b : m; }
    case FL_OP_HYPOT: return hypot(a, b);
    default: return pow(a, b);   /* FL_OP_POW */
    }
}
static void f64_binary(const double *const *in, double *o) {
    int n0 = cur->ndim[0], n1 = cur->ndim[1], n = n0 > n1 ? n0 : n1;
    int64_t os[4], total = 1;
    for (int d = 0; d < n; d++) {
        int d0 = d - (n - n0), d1 = d - (n - n1);
        int64_t x = d0 >= 0 ? S(0, d0) : 1, y = d1 >= 0 ? S(1, d1) : 1;
        os[d] = x > y ? x : y;
        total *= os[d];
    }
    for (int64_t f = 0; f < total; f++) {
        int64_t rem = f, ia = 0, ib = 0, sa = 1, sb = 1;
        for (int d = n - 1; d >= 0; d--) {
            int64_t idx = rem % os[d]; rem /= os[d];
            int d0 = d - (n - n0), d1 = d - (n - n1);
            if (d0 >= 0) { ia += (S(0, d0) == 1 ? 0 : idx) * sa; sa *= S(0, d0); }
            if (d1 >= 0) { ib += (S(1, d1) == 1 ? 0 : idx) * sb; sb *= S(1, d1); }
        }
        o[f] = f64_op(cur->iarg, in[0][ia], in[1][ib]);
    }
}
static fl_status f32_binary(fl_tensor **o, fl_tensor **in) { return fl_binary(o, (fl_binop)cur->iarg, in[0], in[1]); }
static void init_div(int i, double *v, int64_t n) {   /* keep divisors away from 0 */
    for (int64_t j = 0; j < n; j++) { double x = nrand(); v[j] = i == 1 ? (x >= 0 ? 0.5 + x : -0.5 + x) : x; }
}

/* scalar ops: iarg = op*2 + scalar_first, scalar 1.7 */
static void f64_bscalar(const double *const *in, double *o) {
    int op = cur->iarg / 2, first = cur->iarg % 2;
    for (int64_t j = 0, m = numel_of(cur->ndim[0], cur->shape[0]); j < m; j++) {
        o[j] = first ? f64_op(op, 1.7, in[0][j]) : f64_op(op, in[0][j], 1.7);
    }
}
static fl_status f32_bscalar(fl_tensor **o, fl_tensor **in) { return fl_binary_scalar(o, (fl_binop)(cur->iarg / 2), in[0], 1.7, cur->iarg % 2); }

static void init_pos(int i, double *v, int64_t n) { for (int64_t j = 0; j < n; j++) v[j] = 0.3 + 2 * urand(); }
/* fmod/remainder: quotients away from the integers, where the two jump: dividends ±[3.3, 3.7] over divisors ±[2, 3]
 * (|a/b| in (1.1, 1.85)); against the scalar 1.7, operands ±[2, 3] (x/1.7 in (1.17, 1.77), 1.7/x in (0.56, 0.85)) */
static void init_mod(int i, double *v, int64_t n) {
    for (int64_t j = 0; j < n; j++) v[j] = (urand() < 0.5 ? -1 : 1) * (i == 0 ? 3.3 + 0.4 * urand() : 2 + urand());
}
static void init_mod_scalar(int i, double *v, int64_t n) {
    (void)i;
    for (int64_t j = 0; j < n; j++) v[j] = (urand() < 0.5 ? -1 : 1) * (2 + urand());
}
/* floor/ceil/round/trunc: values k + [0.1, 0.4), k in -3..2, away from the steps at integers and halves */
static void init_steps(int i, double *v, int64_t n) {
    for (int64_t j = 0; j < n; j++) v[j] = floor(6 * urand()) - 3 + 0.1 + 0.3 * urand();
}
/* tan, asin, acos: (-0.8, 0.8), inside their domains and away from tan's poles */
static void init_unit(int i, double *v, int64_t n) { for (int64_t j = 0; j < n; j++) v[j] = 1.6 * urand() - 0.8; }
static void f64_unary(const double *const *in, double *o) {
    for (int64_t j = 0, m = numel_of(cur->ndim[0], cur->shape[0]); j < m; j++) {
        double x = in[0][j];
        switch (cur->iarg) {
        case FL_OP_ABS: o[j] = fabs(x); break;
        case FL_OP_NEG: o[j] = -x; break;
        case FL_OP_EXP: o[j] = exp(x); break;
        case FL_OP_LOG: o[j] = log(x); break;
        case FL_OP_SIGN: o[j] = x > 0 ? 1 : x < 0 ? -1 : 0; break;
        case FL_OP_TANH: o[j] = tanh(x); break;
        case FL_OP_SIGMOID: o[j] = 1.0 / (1.0 + exp(-x)); break;
        case FL_OP_SIN: o[j] = sin(x); break;
        case FL_OP_COS: o[j] = cos(x); break;
        case FL_OP_FLOOR: o[j] = floor(x); break;
        case FL_OP_CEIL: o[j] = ceil(x); break;
        case FL_OP_ROUND: o[j] = nearbyint(x); break;
        case FL_OP_TRUNC: o[j] = trunc(x); break;
        case FL_OP_ERF: o[j] = erf(x); break;
        case FL_OP_LOG1P: o[j] = log1p(x); break;
        case FL_OP_EXPM1: o[j] = expm1(x); break;
        case FL_OP_TAN: o[j] = tan(x); break;
        case FL_OP_ASIN: o[j] = asin(x); break;
        case FL_OP_ACOS: o[j] = acos(x); break;
        case FL_OP_ATAN: o[j] = atan(x); break;
        case FL_OP_SINH: o[j] = sinh(x); break;
        case FL_OP_COSH: o[j] = cosh(x); break;
        case FL_OP_LOG2: o[j] = log2(x); break;
        case FL_OP_LOG10: o[j] = log10(x); break;
        case FL_OP_EXP2: o[j] = exp2(x); break;
        case FL_OP_RSQRT: o[j] = 1.0 / sqrt(x); break;
        default: o[j] = sqrt(x); break;
        }
    }
}
static fl_status f32_unary(fl_tensor **o, fl_tensor **in) { return fl_unary(o, (fl_unop)cur->iarg, in[0]); }

/* sum/mean over dim 1 of [A,B,C] (iarg 0 sum, 1 mean) and over all (iarg 2 sum, 3 mean) */
static void f64_reduce(const double *const *in, double *o) {
    int64_t A = S(0, 0), B = S(0, 1), C = S(0, 2);
    if (cur->iarg >= 2) {
        double s = 0; for (int64_t j = 0; j < A * B * C; j++) s += in[0][j];
        o[0] = cur->iarg == 3 ? s / (double)(A * B * C) : s;
        return;
    }
    for (int64_t a = 0; a < A; a++) for (int64_t c = 0; c < C; c++) {
        double s = 0; for (int64_t b = 0; b < B; b++) s += in[0][(a * B + b) * C + c];
        o[a * C + c] = cur->iarg == 1 ? s / (double)B : s;
    }
}
static fl_status f32_reduce(fl_tensor **o, fl_tensor **in) {
    return fl_reduce(o, cur->iarg % 2 ? FL_OP_MEAN : FL_OP_SUM, in[0], cur->iarg >= 2 ? FL_ALL_DIMS : 1, false);
}

/* view chain: x [2,3,4] → transpose(0,2) [4,3,2] → reshape [4,6] → ·(weights 1..) → tanh-free: y = v*v */
static void f64_views(const double *const *in, double *o) {
    for (int64_t i = 0; i < 4; i++) for (int64_t j = 0; j < 3; j++) for (int64_t k = 0; k < 2; k++) {
        double x = in[0][(k * 3 + j) * 4 + i];
        o[i * 6 + j * 2 + k] = x * x;
    }
}
static fl_status f32_views(fl_tensor **o, fl_tensor **in) {
    fl_tensor *t = NULL, *r = NULL;
    int64_t s[2] = { 4, 6 };
    FL_TRY(fl_transpose(&t, in[0], 0, 2));
    fl_status st = fl_reshape(&r, t, 2, s);
    if (st == FL_OK) st = fl_binary(o, FL_OP_MUL, r, r);
    fl_tensor_release(t);
    fl_tensor_release(r);
    return st;
}
/* narrow(1, 1, 2) then select(0, 1) of [3,4] */
static void f64_slices(const double *const *in, double *o) { o[0] = in[0][1 * 4 + 1]; o[1] = in[0][1 * 4 + 2]; }
static fl_status f32_slices(fl_tensor **o, fl_tensor **in) {
    fl_tensor *t = NULL;
    FL_TRY(fl_narrow(&t, in[0], 1, 1, 2));
    fl_status st = fl_select(o, t, 0, 1);
    fl_tensor_release(t);
    return st;
}

static double gelu64(double x, int tanh_approx) {
    if (tanh_approx) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}
static void f64_act(const double *const *in, double *o) {
    for (int64_t j = 0, m = numel_of(cur->ndim[0], cur->shape[0]); j < m; j++)
        o[j] = cur->iarg < 0 ? (in[0][j] > 0 ? in[0][j] : 0) : gelu64(in[0][j], cur->iarg);
}
static fl_status f32_act(fl_tensor **o, fl_tensor **in) { return cur->iarg < 0 ? fl_relu(o, in[0]) : fl_gelu(o, in[0], cur->iarg); }

static void f64_softmax(const double *const *in, double *o) {
    int64_t C = cur->shape[0][cur->ndim[0] - 1], R = numel_of(cur->ndim[0], cur->shape[0]) / C;
    for (int64_t r = 0; r < R; r++) {
        const double *x = in[0] + r * C;
        double mx = x[0], s = 0;
        for (int64_t c = 0; c < C; c++) mx = x[c] > mx ? x[c] : mx;
        for (int64_t c = 0; c < C; c++) s += exp(x[c] - mx);
        for (int64_t c = 0; c < C; c++) o[r * C + c] = cur->iarg ? x[c] - mx - log(s) : exp(x[c] - mx) / s;
    }
}
static fl_status f32_softmax(fl_tensor **o, fl_tensor **in) { return cur->iarg ? fl_log_softmax(o, in[0]) : fl_softmax(o, in[0]); }

/* cross entropy: iarg 0 plain, 1 label smoothing 0.1 + ignore_index 2 (target row 1 set to 2) */
static void init_ce(int i, double *v, int64_t n) {
    if (i == 0) { for (int64_t j = 0; j < n; j++) v[j] = nrand() * 2; return; }
    for (int64_t j = 0; j < n; j++) v[j] = (double)((j * 3 + 1) % 5);
    if (cur->iarg) v[1] = 2;
}
static void f64_ce(const double *const *in, double *o) {
    int64_t N = S(0, 0), C = S(0, 1);
    double eps = cur->iarg ? 0.1 : 0, total = 0;
    int64_t cnt = 0;
    for (int64_t r = 0; r < N; r++) {
        int64_t t = (int64_t)in[1][r];
        if (cur->iarg && t == 2) continue;
        const double *x = in[0] + r * C;
        double mx = x[0], s = 0;
        for (int64_t c = 0; c < C; c++) mx = x[c] > mx ? x[c] : mx;
        for (int64_t c = 0; c < C; c++) s += exp(x[c] - mx);
        double lse = mx + log(s), l = 0;
        for (int64_t c = 0; c < C; c++) l -= ((c == t ? 1 - eps : 0) + eps / (double)C) * (x[c] - lse);
        total += l;
        cnt++;
    }
    o[0] = total / (double)cnt;
}
static fl_status f32_ce(fl_tensor **o, fl_tensor **in) { return fl_cross_entropy(o, in[0], in[1], cur->iarg ? 2 : -100, cur->iarg ? 0.1 : 0); }

static void f64_mse(const double *const *in, double *o) {
    int64_t m = numel_of(cur->ndim[0], cur->shape[0]);
    double s = 0; for (int64_t j = 0; j < m; j++) s += (in[0][j] - in[1][j]) * (in[0][j] - in[1][j]);
    o[0] = s / (double)m;
}
static fl_status f32_mse(fl_tensor **o, fl_tensor **in) { return fl_mse_loss(o, in[0], in[1]); }

static void f64_ln(const double *const *in, double *o) {
    int64_t C = S(0, 1), R = S(0, 0);
    for (int64_t r = 0; r < R; r++) {
        const double *x = in[0] + r * C;
        double mu = 0, var = 0;
        for (int64_t c = 0; c < C; c++) mu += x[c];
        mu /= (double)C;
        for (int64_t c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
        var /= (double)C;
        double rs = 1 / sqrt(var + 1e-5);
        for (int64_t c = 0; c < C; c++) o[r * C + c] = (x[c] - mu) * rs * in[1][c] + in[2][c];
    }
}
static fl_status f32_ln(fl_tensor **o, fl_tensor **in) { return fl_layer_norm(o, in[0], in[1], in[2], 1e-5); }

static void init_emb(int i, double *v, int64_t n) {
    if (i == 0) { for (int64_t j = 0; j < n; j++) v[j] = (double)((j * 2) % 5); return; }  /* repeats: accumulation */
    for (int64_t j = 0; j < n; j++) v[j] = nrand();
}
static void f64_emb(const double *const *in, double *o) {
    int64_t n = numel_of(cur->ndim[0], cur->shape[0]), D = S(1, 1);
    for (int64_t i = 0; i < n; i++) for (int64_t d = 0; d < D; d++) o[i * D + d] = in[1][(int64_t)in[0][i] * D + d];
}
static fl_status f32_emb(fl_tensor **o, fl_tensor **in) { return fl_embedding(o, in[0], in[1]); }

/* dropout: the float64 reference reuses the mask the fp32 forward drew (seeded), read back from its output. */
static float dmask[64];
static void f64_dropout(const double *const *in, double *o) {
    for (int64_t j = 0; j < 64; j++) o[j] = dmask[j] ? in[0][j] / (1 - 0.3) : 0;
}
static fl_status f32_dropout(fl_tensor **o, fl_tensor **in) {
    fl_rng r;
    fl_rng_seed(&r, 99);
    FL_TRY(fl_dropout(o, in[0], 0.3, true, &r));
    FL_TRY(fl_tensor_read_f32(*o, dmask));
    return FL_OK;
}

static void f64_sdpa(const double *const *in, double *o) {
    int64_t B = S(0, 0), H = S(0, 1), T = S(0, 2), D = S(0, 3);
    double sc = 1 / sqrt((double)D), s[16];
    for (int64_t bh = 0; bh < B * H; bh++) {
        const double *q = in[0] + bh * T * D, *k = in[1] + bh * T * D, *v = in[2] + bh * T * D;
        for (int64_t i = 0; i < T; i++) {
            int64_t n = cur->iarg ? i + 1 : T;
            double mx = -1e300, sum = 0;
            for (int64_t j = 0; j < n; j++) {
                double d = 0; for (int64_t e = 0; e < D; e++) d += q[i * D + e] * k[j * D + e];
                s[j] = d * sc; mx = s[j] > mx ? s[j] : mx;
            }
            for (int64_t j = 0; j < n; j++) { s[j] = exp(s[j] - mx); sum += s[j]; }
            for (int64_t e = 0; e < D; e++) {
                double acc = 0; for (int64_t j = 0; j < n; j++) acc += s[j] / sum * v[j * D + e];
                o[(bh * T + i) * D + e] = acc;
            }
        }
    }
}
static fl_status f32_sdpa(fl_tensor **o, fl_tensor **in) { return fl_sdpa(o, in[0], in[1], in[2], cur->iarg != 0, 0); }

/* ---- the cases ---------------------------------------------------------------------------- */

TEST(gradcheck_matmul) {
    gc_case c = { "matmul 2d", 2, { 2, 2 }, { { 5, 7 }, { 7, 3 } }, { true, true }, NULL, f32_matmul, f64_matmul, 0 };
    gradcheck(fl__failed, &c);
    gc_case b = { "matmul batched x 2d", 2, { 3, 2 }, { { 2, 4, 5 }, { 5, 3 } }, { true, true }, NULL, f32_matmul, f64_bmm, 0 };
    gradcheck(fl__failed, &b);
    gc_case v = { "matmul vector x batched", 2, { 1, 3 }, { { 4 }, { 2, 4, 3 } }, { true, true }, NULL, f32_matmul, f64_vbmm, 0 };
    gradcheck(fl__failed, &v);
}

TEST(gradcheck_linear) {
    gc_case c = { "linear with bias", 3, { 2, 2, 1 }, { { 6, 5 }, { 4, 5 }, { 4 } }, { true, true, true }, NULL, f32_linear, f64_linear, 0 };
    gradcheck(fl__failed, &c);
    gc_case d = { "linear 3-d input, no bias", 2, { 3, 2 }, { { 2, 3, 5 }, { 4, 5 } }, { true, true }, NULL, f32_linear, f64_linear, 0 };
    gradcheck(fl__failed, &d);
}

TEST(gradcheck_linear_autocast_bf16) {
    /* bf16 GEMMs: compare with a looser tolerance through the forward check only being approximate,
     * so here we only check that gradients exist, are finite and close to the fp32 ones. */
    fl_tensor *x, *w, *y, *y2;
    int64_t xs[2] = { 8, 16 }, ws[2] = { 4, 16 };
    REQUIRE_OK(fl_randn(&x, NULL, 2, xs, FL_F32));
    REQUIRE_OK(fl_randn(&w, NULL, 2, ws, FL_F32));
    REQUIRE_OK(fl_tensor_set_requires_grad(w, true));
    REQUIRE_OK(fl_linear(&y, x, w, NULL));
    REQUIRE_OK(fl_backward(y, y, false));      /* loss = Σ y²/2 */
    float g32[64], g16[64];
    REQUIRE_OK(fl_tensor_read_f32(w->grad, g32));
    fl_tensor_zero_grad(w);
    fl_dtype prev = fl_set_autocast_dtype(FL_BF16);
    REQUIRE_OK(fl_linear(&y2, x, w, NULL));
    fl_set_autocast_dtype(prev);
    CHECK(y2->dtype == FL_F32, "autocast output must be fp32");
    REQUIRE_OK(fl_backward(y2, y2, false));
    REQUIRE_OK(fl_tensor_read_f32(w->grad, g16));
    for (int i = 0; i < 64; i++) CHECK_CLOSE(g16[i], g32[i], 0.15, 0.03);
    fl_tensor_release(x); fl_tensor_release(w); fl_tensor_release(y); fl_tensor_release(y2);
}

/* pow's base positive (a negative one has no real power), its exponent N(0,1)-ish */
static void init_pow(int i, double *v, int64_t n) {
    for (int64_t j = 0; j < n; j++) v[j] = i == 0 ? 0.3 + 2 * urand() : nrand();
}

TEST(gradcheck_binary_broadcast) {
    for (int op = 0; op < FL_BINOP_COUNT; op++) {
        if (fl_binop_is_comparison((fl_binop)op)) continue;
        /* pow: the base's and the exponent's gradients (the base positive); where: the values' (the mask takes none) */
        gc_case c = { fl_binop_names[op], 2, { 3, 2 }, { { 2, 1, 4 }, { 3, 4 } }, { op != FL_OP_WHERE, true },
                      op == FL_OP_DIV ? init_div : op == FL_OP_POW ? init_pow
                      : op == FL_OP_FMOD || op == FL_OP_REMAINDER ? init_mod : NULL, f32_binary, f64_binary, op };
        gradcheck(fl__failed, &c);
    }
    for (int k = 0; k < 2 * FL_BINOP_COUNT; k++) {
        int op = k / 2, first = k % 2;
        if (fl_binop_is_comparison((fl_binop)op)) continue;
        /* s / x and x ^ s need x > 0 */
        bool pos = (op == FL_OP_DIV && first) || (op == FL_OP_POW && !first);
        bool mod = op == FL_OP_FMOD || op == FL_OP_REMAINDER;
        gc_case c = { "binary scalar", 1, { 2 }, { { 3, 4 } }, { true }, pos ? init_pos : mod ? init_mod_scalar : NULL,
                      f32_bscalar, f64_bscalar, k };
        gradcheck(fl__failed, &c);
    }
}

/* Comparisons record nothing; a tensor exponent's gradient is torch's a^b·ln a, 0 where a = 0 and b >= 0; x^0's
 * gradient is 0 (also at 0). */
TEST(gradcheck_comparisons_and_pow_edges) {
    int64_t sh[1] = { 3 };
    float xa[3] = { 0.0f, 2.0f, -1.0f }, xb[3] = { 1.0f, 2.0f, 3.0f };
    fl_tensor *a = NULL, *b = NULL, *r = NULL;
    REQUIRE_OK(fl_tensor_from_f32(&a, xa, 1, sh, FL_F32));
    REQUIRE_OK(fl_tensor_from_f32(&b, xb, 1, sh, FL_F32));
    a->requires_grad = b->requires_grad = true;
    for (int op = FL_OP_EQ; op <= FL_OP_GE; op++) {
        REQUIRE_OK(fl_binary(&r, (fl_binop)op, a, b));
        CHECK(r->grad_fn == NULL && !r->requires_grad, "%s: a comparison must carry no history", fl_binop_names[op]);
        fl_tensor_release(r);
        REQUIRE_OK(fl_binary_scalar(&r, (fl_binop)op, a, 1.0, false));
        CHECK(r->grad_fn == NULL && !r->requires_grad, "%s (scalar): no history", fl_binop_names[op]);
        fl_tensor_release(r);
    }
    {   /* a = {0, 2, -1}, b = {1, 2, 3}: d/db = {0 (a = 0, b >= 0), 4·ln 2, NaN (ln of a negative)} */
        fl_tensor *q = NULL;
        REQUIRE_OK(fl_binary(&r, FL_OP_POW, a, b));
        REQUIRE_OK(fl_reduce(&q, FL_OP_SUM, r, FL_ALL_DIMS, false));
        REQUIRE_OK(fl_backward(q, NULL, false));
        float gb[3];
        REQUIRE_OK(fl_tensor_read_f32(b->grad, gb));
        CHECK(gb[0] == 0.0f && fabsf(gb[1] - 4.0f * logf(2.0f)) < 1e-6f && isnan(gb[2]),
              "d(a^b)/db = %g %g %g", gb[0], gb[1], gb[2]);
        fl_tensor_release(q);
        fl_tensor_release(r);
        fl_tensor_zero_grad(a);
        fl_tensor_zero_grad(b);
    }
    fl_tensor *p = NULL;
    REQUIRE_OK(fl_binary_scalar(&p, FL_OP_POW, a, 0.0, false));
    REQUIRE_OK(fl_reduce(&r, FL_OP_SUM, p, FL_ALL_DIMS, false));
    fl_tensor_release(p);
    REQUIRE_OK(fl_backward(r, NULL, false));
    float g[3];
    REQUIRE_OK(fl_tensor_read_f32(a->grad, g));
    CHECK(g[0] == 0.0f && g[1] == 0.0f && g[2] == 0.0f, "d(x^0)/dx = 0, got %g %g %g", g[0], g[1], g[2]);
    fl_tensor_release(r);
    fl_tensor_release(a);
    fl_tensor_release(b);
}

TEST(gradcheck_unary) {
    for (int op = 0; op < FL_UNOP_COUNT; op++) {
        gc_case c = { fl_unop_names[op], 1, { 2 }, { { 3, 5 } }, { true },
                      op == FL_OP_LOG || op == FL_OP_SQRT || op == FL_OP_LOG1P || op == FL_OP_LOG2 || op == FL_OP_LOG10 ||
                              op == FL_OP_RSQRT
                          ? init_pos
                      : op == FL_OP_TAN || op == FL_OP_ASIN || op == FL_OP_ACOS ? init_unit
                      : fl_unop_is_rounding((fl_unop)op) ? init_steps : NULL, f32_unary, f64_unary, op };
        gradcheck(fl__failed, &c);
    }
}

TEST(gradcheck_sum_mean) {
    for (int k = 0; k < 4; k++) {
        gc_case c = { k % 2 ? "mean" : "sum", 1, { 3 }, { { 2, 3, 4 } }, { true }, NULL, f32_reduce, f64_reduce, k };
        gradcheck(fl__failed, &c);
    }
}

TEST(gradcheck_views) {
    gc_case c = { "transpose+reshape", 1, { 3 }, { { 2, 3, 4 } }, { true }, NULL, f32_views, f64_views, 0 };
    gradcheck(fl__failed, &c);
    gc_case s = { "narrow+select", 1, { 2 }, { { 3, 4 } }, { true }, NULL, f32_slices, f64_slices, 0 };
    gradcheck(fl__failed, &s);
}

TEST(gradcheck_activations) {
    const char *names[3] = { "relu", "gelu exact", "gelu tanh" };
    for (int k = -1; k <= 1; k++) {
        gc_case c = { names[k + 1], 1, { 2 }, { { 4, 6 } }, { true }, NULL, f32_act, f64_act, k };
        gradcheck(fl__failed, &c);
    }
}

TEST(gradcheck_softmax) {
    gc_case c = { "softmax", 1, { 3 }, { { 2, 3, 5 } }, { true }, NULL, f32_softmax, f64_softmax, 0 };
    gradcheck(fl__failed, &c);
    gc_case l = { "log_softmax", 1, { 2 }, { { 4, 6 } }, { true }, NULL, f32_softmax, f64_softmax, 1 };
    gradcheck(fl__failed, &l);
}

TEST(gradcheck_cross_entropy) {
    gc_case c = { "cross_entropy", 2, { 2, 1 }, { { 6, 5 }, { 6 } }, { true, false }, init_ce, f32_ce, f64_ce, 0 };
    gradcheck(fl__failed, &c);
    gc_case s = { "cross_entropy smoothing+ignore", 2, { 2, 1 }, { { 6, 5 }, { 6 } }, { true, false }, init_ce, f32_ce, f64_ce, 1 };
    gradcheck(fl__failed, &s);
}

TEST(gradcheck_mse_layernorm_embedding) {
    gc_case m = { "mse_loss", 2, { 2, 2 }, { { 3, 4 }, { 3, 4 } }, { true, true }, NULL, f32_mse, f64_mse, 0 };
    gradcheck(fl__failed, &m);
    gc_case l = { "layer_norm", 3, { 2, 1, 1 }, { { 4, 8 }, { 8 }, { 8 } }, { true, true, true }, NULL, f32_ln, f64_ln, 0 };
    gradcheck(fl__failed, &l);
    gc_case e = { "embedding", 2, { 2, 2 }, { { 2, 3 }, { 5, 4 } }, { false, true }, init_emb, f32_emb, f64_emb, 0 };
    gradcheck(fl__failed, &e);
}

TEST(gradcheck_dropout_seeded) {
    gc_case c = { "dropout", 1, { 2 }, { { 8, 8 } }, { true }, NULL, f32_dropout, f64_dropout, 0 };
    gradcheck(fl__failed, &c);
    int kept = 0;
    for (int j = 0; j < 64; j++) kept += dmask[j] != 0;
    CHECK(kept > 30 && kept < 60, "dropout p=0.3 kept %d of 64", kept);
}

TEST(gradcheck_sdpa) {
    gc_case c = { "sdpa causal", 3, { 4, 4, 4 }, { { 1, 2, 5, 3 }, { 1, 2, 5, 3 }, { 1, 2, 5, 3 } }, { true, true, true },
                  NULL, f32_sdpa, f64_sdpa, 1 };
    gradcheck(fl__failed, &c);
    gc_case n = { "sdpa full", 3, { 4, 4, 4 }, { { 2, 1, 4, 3 }, { 2, 1, 4, 3 }, { 2, 1, 4, 3 } }, { true, true, true },
                  NULL, f32_sdpa, f64_sdpa, 0 };
    gradcheck(fl__failed, &n);
}
