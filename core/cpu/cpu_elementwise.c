/* cpu_elementwise.c — binary (arithmetic, maximum/minimum, pow, comparisons; with broadcasting), tensor-scalar
 * and unary ops.
 * Same-shape contiguous fp32 runs straight through vectorisable loops; everything else goes tile
 * by tile through fp32 scratch buffers (bf16/fp16 results rounded to nearest even on store). */
#include "cpu_internal.h"
#include "cpu_vmath.h"
#include "cpu_vpow.h"
#include "cpu_vtanh.h"
#include "half_cvt.h"
#include "hypot1.h"
#include "par.h"
#include "bf16_x86.h"
#include <math.h>
#include <string.h>

/* tanh and sigmoid in fp32, vectorised (cpu_vmath.h: within a few ulp of the correctly rounded value; they were
 * double tanh and exp, a libm call per element: 11x slower than torch's SiLU, the LSTM's gates 3x) */
FL_VM_MAPS(fl_vm_sigmoid)

/* BLOCK_MAP(name, plain, fast, full) defines map_name(x, y, n, wide): y[i] = full(x[i]), VM_BLOCK elements at a
 * time. A block whose inputs all pass plain (the usual case) runs fast, which gives full's bits on those inputs
 * without its range handling and checks; any other block runs full. The block is tested before anything is
 * written, so y may be x. The next block is prefetched first: the test pass alone would wait on memory for every
 * block, and the loop after it find the cache warm, the two never overlapping. exp: 41 vector instructions a vector
 * of 16 → 22 with the test; log: 47 → 31 (cpu_vmath.h). */
#define VM_BLOCK 512
#define BLOCK_MAP(name, plain, fast, full)                                                                         \
    static inline __attribute__((always_inline)) void map256_##name(const float *x, float *y, int64_t n) {         \
        for (int64_t i0 = 0; i0 < n; i0 += VM_BLOCK) {                                                             \
            const int64_t m = n - i0 < VM_BLOCK ? n - i0 : VM_BLOCK;                                               \
            const float *xb = x + i0;                                                                              \
            float *yb = y + i0;                                                                                    \
            const int64_t ahead = n - i0 - m < VM_BLOCK ? n - i0 - m : VM_BLOCK;                                   \
            for (int64_t j = 0; j < ahead; j += 16) __builtin_prefetch(xb + m + j);                                \
            int all = 1;                                                                                           \
            _Pragma("omp simd reduction(&:all)")                                                                   \
            for (int64_t i = 0; i < m; i++) all &= plain(xb[i]);                                                   \
            if (all) {                                                                                             \
                _Pragma("omp simd")                                                                                \
                for (int64_t i = 0; i < m; i++) yb[i] = fast(xb[i]);                                               \
            } else {                                                                                               \
                _Pragma("omp simd")                                                                                \
                for (int64_t i = 0; i < m; i++) yb[i] = full(xb[i]);                                               \
            }                                                                                                      \
        }                                                                                                          \
    }                                                                                                              \
    FL_VM_WIDE_COPY(map, name, (const float *x, float *y, int64_t n), (x, y, n))                                   \
    static inline void map_##name(const float *x, float *y, int64_t n, bool wide) {                               \
        if (wide) map512_##name(x, y, n); else map256_##name(x, y, n);                                             \
    }
static inline __attribute__((always_inline)) float log_plain_part(float x) { return fl_vm_log_parts(x, 0); }
BLOCK_MAP(exp_blocks, fl_vm_exp_plain, fl_vm_exp_normal, fl_vm_exp)
BLOCK_MAP(log_blocks, fl_vm_log_plain, log_plain_part, fl_vm_log)

void fl_cpu_map_exp(const float *x, float *y, int64_t n) { map_exp_blocks(x, y, n, fl_cpu_avx512()); }

/* The scalar definitions of the ops that are not one IEEE operation (kernels/elementwise.cu has the same). */
/* Written as selects, without an early return, so that `omp simd` loops vectorise them (with the return, clamp's
 * maximum and minimum ran a float at a time: 3.4× torch's clamp). */
static inline float maximum1(float x, float y) {
    const float m = x > y || (x == y && !signbit(x)) ? x : y;   /* -0 < +0 */
    return x != x || y != y ? x + y : m;                         /* NaN in, NaN out */
}
static inline float minimum1(float x, float y) {
    const float m = x < y || (x == y && signbit(x)) ? x : y;
    return x != x || y != y ? x + y : m;
}
static inline float pow1(float x, float y) { return (float)pow((double)x, (double)y); }
static inline float atan21(float y, float x) { return (float)atan2((double)y, (double)x); }
static inline float remainder1(float x, float y) {   /* torch's: fmod moved by y where the signs differ */
    float m = fmodf(x, y);
    return m != 0.0f && ((y < 0.0f) != (m < 0.0f)) ? m + y : m;
}

/* hypot(a, b) correctly rounded (hypot1.h): √(a² + b²) in double, vectorised, a block at a time written through r so
 * that d may be a or b; a block where a result is flagged (NaN, subnormal, 0, or near a midpoint between two floats:
 * about 1 in 10^8 ordinary pairs) takes fl_hypot1 for its elements. b is the number s where b is NULL. */
#define HYPOT_BLOCK 256
static inline __attribute__((always_inline)) void hypot_run_t(const float *a, const float *b, float s, float *d,
                                                              int64_t n) {
    for (int64_t i0 = 0; i0 < n; i0 += HYPOT_BLOCK) {
        const int64_t m = n - i0 < HYPOT_BLOCK ? n - i0 : HYPOT_BLOCK;
        const float *ab = a + i0, *bb = b ? b + i0 : NULL;
        float r[HYPOT_BLOCK];
        int any = 0;
        if (bb) {
            _Pragma("omp simd reduction(|:any)")
            for (int64_t i = 0; i < m; i++) {
                const double x = fabs((double)ab[i]), y = fabs((double)bb[i]), h = fl_hypot_root(x, y);
                const bool inf = x == INFINITY || y == INFINITY;
                r[i] = inf ? INFINITY : (float)h;
                any |= fl_hypot_hard(h) & !inf;
            }
        } else {
            const double y = fabs((double)s);
            _Pragma("omp simd reduction(|:any)")
            for (int64_t i = 0; i < m; i++) {
                const double x = fabs((double)ab[i]), h = fl_hypot_root(x, y);
                const bool inf = x == INFINITY || y == INFINITY;
                r[i] = inf ? INFINITY : (float)h;
                any |= fl_hypot_hard(h) & !inf;
            }
        }
        if (any)
            for (int64_t i = 0; i < m; i++) r[i] = fl_hypot1(ab[i], bb ? bb[i] : s);
        memcpy(d + i0, r, (size_t)m * sizeof *d);
    }
}
static void hypot_run_256(const float *a, const float *b, float s, float *d, int64_t n) { hypot_run_t(a, b, s, d, n); }
FL_CPU_AVX512 static void hypot_run_512(const float *a, const float *b, float s, float *d, int64_t n) {
    hypot_run_t(a, b, s, d, n);
}
static void hypot_run(const float *a, const float *b, float s, float *d, int64_t n) {
    if (fl_cpu_avx512()) hypot_run_512(a, b, s, d, n); else hypot_run_256(a, b, s, d, n);
}

#define EW_LOOP(expr)                                              \
    do {                                                           \
        _Pragma("omp simd")                                        \
        for (int64_t i = 0; i < n; i++) d[i] = (expr);             \
    } while (0)
#define CMP(c) ((c) ? 1.0f : 0.0f)

static inline void binop_run(fl_binop op, const float *a, const float *b, float *d, int64_t n) {
    switch (op) {
    case FL_OP_ADD: EW_LOOP(a[i] + b[i]); break;
    case FL_OP_SUB: EW_LOOP(a[i] - b[i]); break;
    case FL_OP_MUL: EW_LOOP(a[i] * b[i]); break;
    case FL_OP_DIV: EW_LOOP(a[i] / b[i]); break;
    case FL_OP_MAXIMUM: EW_LOOP(maximum1(a[i], b[i])); break;
    case FL_OP_MINIMUM: EW_LOOP(minimum1(a[i], b[i])); break;
    case FL_OP_POW: for (int64_t i = 0; i < n; i++) d[i] = pow1(a[i], b[i]); break;
    case FL_OP_WHERE: EW_LOOP(a[i] != 0.0f ? b[i] : -0.0f); break;
    case FL_OP_EQ: EW_LOOP(CMP(a[i] == b[i])); break;
    case FL_OP_NE: EW_LOOP(CMP(a[i] != b[i])); break;
    case FL_OP_LT: EW_LOOP(CMP(a[i] < b[i])); break;
    case FL_OP_LE: EW_LOOP(CMP(a[i] <= b[i])); break;
    case FL_OP_GT: EW_LOOP(CMP(a[i] > b[i])); break;
    case FL_OP_ATAN2: for (int64_t i = 0; i < n; i++) d[i] = atan21(a[i], b[i]); break;
    case FL_OP_FMOD: for (int64_t i = 0; i < n; i++) d[i] = fmodf(a[i], b[i]); break;
    case FL_OP_REMAINDER: for (int64_t i = 0; i < n; i++) d[i] = remainder1(a[i], b[i]); break;
    case FL_OP_HYPOT: hypot_run(a, b, 0.0f, d, n); break;
    default: EW_LOOP(CMP(a[i] >= b[i])); break;   /* FL_OP_GE */
    }
}

/* a^s for any other finite s (cpu_vpow.h: double code that vectorises, the same bits as (float)pow((double)a, s)), an
 * AVX2 loop and an AVX-512 copy. A block at a time, written through r so that d may be a: the vector loop, and in a
 * block where it found a result near a tie (1 in ~10^4 results; the flags kept out of memory in the first loop,
 * which an array of them slowed by half) the flags again and pow for those results. */
#define POW_BLOCK 256
static inline __attribute__((always_inline)) void pow_run256(const float *a, double s, float *d, int64_t n,
                                                              bool wide) {
    const bool s_int = s == floor(s), s_odd = s_int && fmod(s, 2.0) != 0.0;
    for (int64_t i0 = 0; i0 < n; i0 += POW_BLOCK) {
        const int64_t m = n - i0 < POW_BLOCK ? n - i0 : POW_BLOCK;
        const float *ab = a + i0;
        float r[POW_BLOCK];
        int any = 0;
        _Pragma("omp simd reduction(|:any)")
        for (int64_t i = 0; i < m; i++) {
            int t;
            r[i] = fl_vp_pow_fast(ab[i], s, s_int, s_odd, wide, &t);
            any |= t;
        }
        if (any) {
            int tie[POW_BLOCK];
            _Pragma("omp simd")
            for (int64_t i = 0; i < m; i++) (void)fl_vp_pow_fast(ab[i], s, s_int, s_odd, wide, &tie[i]);
            for (int64_t i = 0; i < m; i++)
                if (tie[i]) r[i] = (float)pow((double)ab[i], s);
        }
        memcpy(d + i0, r, (size_t)m * sizeof *d);
    }
}
static void pow_run_256(const float *a, double s, float *d, int64_t n) { pow_run256(a, s, d, n, false); }
FL_CPU_AVX512 static void pow_run_512(const float *a, double s, float *d, int64_t n) { pow_run256(a, s, d, n, true); }
static void pow_run(const float *a, double s, float *d, int64_t n, bool wide) {
    if (wide) pow_run_512(a, s, d, n); else pow_run_256(a, s, d, n);
}

/* a^s for a scalar s: (float)pow((double)a, s), a libm call per element (12 ns; torch's x.pow(2) was 43× faster).
 * The exponents a model's code uses most take exact shortcuts with the same values (tests/c/test_ops.c,
 * pow_scalar_shortcuts, compares them with pow over every 4093rd float and the specials; every float was compared
 * once by hand, NaNs' sign bits aside): a² is the fp32 product (a·a in double is exact, and one rounding to fp32 is
 * the fp32 multiply's);
 * a³ and a⁴ are one double rounding of an exact a² times a or a², as pow's correctly rounded double, then fp32;
 * a^0.5 is sqrtf (a double square root then fp32 rounds as sqrtf: 53 ≥ 2·24 + 2); a^-1 is 1/a (the same argument
 * for the quotient); a^-2 and a^-0.5 are 1/(a·a) and 1/√a in double, then fp32 (not proven so, but equal to pow's on
 * every float: checked once by hand); a^1 is a, a^0 is 1 (NaN included, as pow); any other finite s pow_run above,
 * ±inf and NaN pow. a^0.5 and a^-0.5 are torch 2.15's sqrt and rsqrt at −0 and −inf too (its CPU kernel takes them
 * for fp32 and bf16, its CUDA kernel for every dtype): −0 and NaN for a^0.5, −inf and NaN for a^-0.5, where pow
 * gives +0 and +inf, +inf and +0 (C's values here until stop 98; every other input's bits are pow's, as before). The
 * backward of x^s takes x^(s−1): pow 2's and 0.5's use these too (x^0.5's gradient at −0 is −inf, at −inf NaN). */
static inline void pow_by_scalar(const float *a, double sd, float *d, int64_t n) {
    if (sd == 2.0) EW_LOOP(a[i] * a[i]);
    else if (sd == 3.0) EW_LOOP((float)((double)a[i] * (double)a[i] * (double)a[i]));
    else if (sd == 4.0) EW_LOOP((float)(((double)a[i] * (double)a[i]) * ((double)a[i] * (double)a[i])));
    else if (sd == 0.5) EW_LOOP(sqrtf(a[i]));
    else if (sd == -1.0) EW_LOOP(1.0f / a[i]);
    else if (sd == -2.0) EW_LOOP((float)(1.0 / ((double)a[i] * (double)a[i])));
    else if (sd == -0.5) EW_LOOP((float)(1.0 / sqrt((double)a[i])));
    else if (sd == 1.0) EW_LOOP(a[i]);
    else if (sd == 0.0) EW_LOOP(1.0f);
    else if (isfinite(sd)) pow_run(a, sd, d, n, fl_cpu_avx512());
    else for (int64_t i = 0; i < n; i++) d[i] = (float)pow((double)a[i], sd);
}

/* s op a when first, else a op s. The scalar comes as the double it was given: pow takes it so (a double power,
 * rounded once: x^1.3 with the exponent rounded to fp32 first was 37 ulp off at 1e20); the others take s, its fp32
 * value (a broadcast operand's own bits: where's select returns them, a signalling NaN unquieted). */
static inline void scalar_run_f(fl_binop op, const float *a, float s, double sd, bool first, float *d, int64_t n) {
    switch (op) {
    case FL_OP_ADD: EW_LOOP(a[i] + s); break;
    case FL_OP_SUB: if (first) EW_LOOP(s - a[i]); else EW_LOOP(a[i] - s); break;
    case FL_OP_MUL: EW_LOOP(a[i] * s); break;
    case FL_OP_DIV: if (first) EW_LOOP(s / a[i]); else EW_LOOP(a[i] / s); break;
    case FL_OP_MAXIMUM: if (first) EW_LOOP(maximum1(s, a[i])); else EW_LOOP(maximum1(a[i], s)); break;
    case FL_OP_MINIMUM: if (first) EW_LOOP(minimum1(s, a[i])); else EW_LOOP(minimum1(a[i], s)); break;
    case FL_OP_POW:
        if (first) for (int64_t i = 0; i < n; i++) d[i] = (float)pow(sd, (double)a[i]);
        else pow_by_scalar(a, sd, d, n);
        break;
    case FL_OP_WHERE: if (first) EW_LOOP(s != 0.0f ? a[i] : -0.0f); else EW_LOOP(a[i] != 0.0f ? s : -0.0f); break;
    case FL_OP_EQ: EW_LOOP(CMP(a[i] == s)); break;
    case FL_OP_NE: EW_LOOP(CMP(a[i] != s)); break;
    case FL_OP_LT: if (first) EW_LOOP(CMP(s < a[i])); else EW_LOOP(CMP(a[i] < s)); break;
    case FL_OP_LE: if (first) EW_LOOP(CMP(s <= a[i])); else EW_LOOP(CMP(a[i] <= s)); break;
    case FL_OP_GT: if (first) EW_LOOP(CMP(s > a[i])); else EW_LOOP(CMP(a[i] > s)); break;
    case FL_OP_ATAN2:
        if (first) for (int64_t i = 0; i < n; i++) d[i] = atan21(s, a[i]);
        else for (int64_t i = 0; i < n; i++) d[i] = atan21(a[i], s);
        break;
    case FL_OP_FMOD:
        if (first) for (int64_t i = 0; i < n; i++) d[i] = fmodf(s, a[i]);
        else for (int64_t i = 0; i < n; i++) d[i] = fmodf(a[i], s);
        break;
    case FL_OP_REMAINDER:
        if (first) for (int64_t i = 0; i < n; i++) d[i] = remainder1(s, a[i]);
        else for (int64_t i = 0; i < n; i++) d[i] = remainder1(a[i], s);
        break;
    case FL_OP_HYPOT: hypot_run(a, NULL, s, d, n); break;   /* symmetric: first or not */
    default: if (first) EW_LOOP(CMP(s >= a[i])); else EW_LOOP(CMP(a[i] >= s)); break;   /* FL_OP_GE */
    }
}
static inline void scalar_run(fl_binop op, const float *a, double sd, bool first, float *d, int64_t n) {
    scalar_run_f(op, a, (float)sd, sd, first, d, n);
}

static inline void unop_run(fl_unop op, const float *a, float *d, int64_t n) {
    switch (op) {
    case FL_OP_ABS: for (int64_t i = 0; i < n; i++) d[i] = fabsf(a[i]); break;
    case FL_OP_NEG: for (int64_t i = 0; i < n; i++) d[i] = -a[i]; break;
    case FL_OP_EXP: map_exp_blocks(a, d, n, fl_cpu_avx512()); break;   /* cpu_vmath.h: < 1 ulp, as torch's */
    case FL_OP_LOG: map_log_blocks(a, d, n, fl_cpu_avx512()); break;
    case FL_OP_SIGN: for (int64_t i = 0; i < n; i++) d[i] = a[i] > 0 ? 1.0f : a[i] < 0 ? -1.0f : a[i]; break;
    case FL_OP_TANH: fl_vtanh_map(a, d, n, fl_cpu_avx512()); break;
    case FL_OP_SIGMOID: map_fl_vm_sigmoid(a, d, n, fl_cpu_avx512()); break;
    case FL_OP_SIN: for (int64_t i = 0; i < n; i++) d[i] = (float)sin((double)a[i]); break;
    case FL_OP_COS: for (int64_t i = 0; i < n; i++) d[i] = (float)cos((double)a[i]); break;
    case FL_OP_FLOOR: for (int64_t i = 0; i < n; i++) d[i] = floorf(a[i]); break;
    case FL_OP_CEIL: for (int64_t i = 0; i < n; i++) d[i] = ceilf(a[i]); break;
    case FL_OP_ROUND: for (int64_t i = 0; i < n; i++) d[i] = rintf(a[i]); break;   /* the default mode: half to even */
    case FL_OP_TRUNC: for (int64_t i = 0; i < n; i++) d[i] = truncf(a[i]); break;
    case FL_OP_ERF: for (int64_t i = 0; i < n; i++) d[i] = (float)erf((double)a[i]); break;
    case FL_OP_LOG1P: for (int64_t i = 0; i < n; i++) d[i] = (float)log1p((double)a[i]); break;
    case FL_OP_EXPM1: for (int64_t i = 0; i < n; i++) d[i] = (float)expm1((double)a[i]); break;
    case FL_OP_TAN: for (int64_t i = 0; i < n; i++) d[i] = (float)tan((double)a[i]); break;
    case FL_OP_ASIN: for (int64_t i = 0; i < n; i++) d[i] = (float)asin((double)a[i]); break;
    case FL_OP_ACOS: for (int64_t i = 0; i < n; i++) d[i] = (float)acos((double)a[i]); break;
    case FL_OP_ATAN: for (int64_t i = 0; i < n; i++) d[i] = (float)atan((double)a[i]); break;
    case FL_OP_SINH: for (int64_t i = 0; i < n; i++) d[i] = (float)sinh((double)a[i]); break;
    case FL_OP_COSH: for (int64_t i = 0; i < n; i++) d[i] = (float)cosh((double)a[i]); break;
    case FL_OP_LOG2: for (int64_t i = 0; i < n; i++) d[i] = (float)log2((double)a[i]); break;
    case FL_OP_LOG10: for (int64_t i = 0; i < n; i++) d[i] = (float)log10((double)a[i]); break;
    case FL_OP_EXP2: for (int64_t i = 0; i < n; i++) d[i] = (float)exp2((double)a[i]); break;
    case FL_OP_SQRT: for (int64_t i = 0; i < n; i++) d[i] = sqrtf(a[i]); break;
    /* 1/√x rounded twice, as the two ops it was (√x, then 1 / that: the same bits), in one pass: the two passes
     * were 2.6× torch's rsqrt */
    case FL_OP_RSQRT: for (int64_t i = 0; i < n; i++) d[i] = 1.0f / sqrtf(a[i]); break;
    default: break;   /* fl_unary_raw checks the op */
    }
}
#undef CMP

/* All-fp32, all-contiguous, same shape: chunked for interrupt polling, threads within a chunk. */
static bool all_f32_contig(int nt, const fl_tensor *const *ts) {
    for (int k = 0; k < nt; k++)
        if (ts[k]->dtype != FL_F32 || !fl_tensor_is_contiguous(ts[k])) return false;
    return true;
}

typedef struct { int op; fl_tensor *dst; const fl_tensor *a, *b; double s, s2; bool first; } ew_ctx;

/* An fp32 run of n read in place beside d's: the same run as d's or apart from it (a run that overlaps d's in part
 * goes through the scratch buffers, which read the whole tile before writing any of it). */
static inline bool run_apart(const float *p, const float *d, int64_t n) { return p == d || p + n <= d || d + n <= p; }

static void binary_tile(void *vc, int64_t n, const int64_t *off, const int64_t *st) {
    ew_ctx *c = vc;
    /* All fp32 and the result's run contiguous: each operand read where it is, a broadcast one (stride 0) as a number,
     * in one pass (the loads and store through scratch made four: x + c with c [4096, 1] was 2.2× torch); the same
     * bits, as scalar_run_f computes what binop_run does with the number in every place (x^c aside, below). */
    if (c->dst->dtype == FL_F32 && c->a->dtype == FL_F32 && c->b->dtype == FL_F32 && st[0] == 1 &&
        (st[1] == 1 || st[2] == 1) && (st[1] | 1) == 1 && (st[2] | 1) == 1) {
        float *d = (float *)fl_tensor_data(c->dst) + off[0];
        const float *p = (const float *)fl_tensor_data(c->a) + off[1], *q = (const float *)fl_tensor_data(c->b) + off[2];
        if (st[1] == 1 && st[2] == 1) {
            if (run_apart(p, d, n) && run_apart(q, d, n)) { binop_run((fl_binop)c->op, p, q, d, n); return; }
        } else if (st[2] == 0) {
            if (run_apart(p, d, n) && c->op != FL_OP_POW) {   /* (pow's shortcuts differ in a NaN's sign) */
                scalar_run_f((fl_binop)c->op, p, *q, (double)*q, false, d, n);
                return;
            }
        } else if (run_apart(q, d, n)) {
            scalar_run_f((fl_binop)c->op, q, *p, (double)*p, true, d, n);
            return;
        }
    }
    float x[FL_CPU_TILE], y[FL_CPU_TILE], z[FL_CPU_TILE];
    fl_cpu_load(c->a, off[1], st[1], n, x);
    fl_cpu_load(c->b, off[2], st[2], n, y);
    binop_run((fl_binop)c->op, x, y, z, n);
    fl_cpu_store(c->dst, off[0], st[0], n, z);
}

static void scalar_tile(void *vc, int64_t n, const int64_t *off, const int64_t *st) {
    ew_ctx *c = vc;
    float x[FL_CPU_TILE], z[FL_CPU_TILE];
    fl_cpu_load(c->a, off[1], st[1], n, x);
    scalar_run((fl_binop)c->op, x, c->s, c->first, z, n);
    fl_cpu_store(c->dst, off[0], st[0], n, z);
}

/* clamp between two numbers as maximum then minimum, both binary_scalar's, in one loop (two passes over a tensor were
 * 2.0× torch's clamp). With bounds that are not NaN (the usual case), maximum1 and minimum1 are one compare and one
 * select each, the compare picked by the bound's zero: a bound other than ±0 equal to x has x's bits, so either
 * select gives them; at lo = +0, max as x > lo ? x : lo gives +0 for x = -0, at lo = -0, x < lo ? lo : x keeps
 * x = +0 (maximum's -0 < +0); at hi = +0, min as m > hi ? hi : m keeps m = -0, elsewhere m < hi ? m : hi (at hi = -0,
 * -0 for m = +0: minimum's). A NaN x gives x + lo (maximum1's x + y; minimum1's NaN + hi is that NaN again): the
 * same bits. The general form's ~20 vector instructions for 8 floats kept clamp of [4096, 1024] at 2.1 ms, 1.25-1.34
 * now (the fastest of 90 calls each, alternating; torch 2.15's 1.3-1.4 in the same hours; stop 99). */
static inline __attribute__((always_inline)) void clamp_sel(const float *a, float lo, float hi, float *d, int64_t n,
                                                            bool lo_gt, bool hi_gt) {
    _Pragma("omp simd")
    for (int64_t i = 0; i < n; i++) {
        const float x = a[i];
        const float m = lo_gt ? (x > lo ? x : lo) : (x < lo ? lo : x);
        const float r = hi_gt ? (m > hi ? hi : m) : (m < hi ? m : hi);
        d[i] = x != x ? x + lo : r;
    }
}
static inline void clamp_run(const float *a, float lo, float hi, float *d, int64_t n) {
    if (lo != lo || hi != hi) { EW_LOOP(minimum1(maximum1(a[i], lo), hi)); return; }
    const bool lo_gt = !(lo == 0.0f && signbit(lo)), hi_gt = hi == 0.0f && !signbit(hi);
    if (lo_gt && !hi_gt) clamp_sel(a, lo, hi, d, n, true, false);
    else if (lo_gt) clamp_sel(a, lo, hi, d, n, true, true);
    else if (!hi_gt) clamp_sel(a, lo, hi, d, n, false, false);
    else clamp_sel(a, lo, hi, d, n, false, true);
}

static void clamp_tile(void *vc, int64_t n, const int64_t *off, const int64_t *st) {
    ew_ctx *c = vc;
    float x[FL_CPU_TILE], z[FL_CPU_TILE];
    fl_cpu_load(c->a, off[1], st[1], n, x);
    clamp_run(x, (float)c->s, (float)c->s2, z, n);
    fl_cpu_store(c->dst, off[0], st[0], n, z);
}

static void unary_tile(void *vc, int64_t n, const int64_t *off, const int64_t *st) {
    ew_ctx *c = vc;
    float x[FL_CPU_TILE], z[FL_CPU_TILE];
    fl_cpu_load(c->a, off[1], st[1], n, x);
    unop_run((fl_unop)c->op, x, z, n);
    fl_cpu_store(c->dst, off[0], st[0], n, z);
}

#define CHUNKED(n, body)                                                                  \
    for (int64_t c0 = 0; c0 < (n); c0 += FL_CPU_POLL) {                                   \
        FL_TRY(fl_check_interrupt());                                                     \
        int64_t c1 = c0 + FL_CPU_POLL < (n) ? c0 + FL_CPU_POLL : (n);                      \
        int64_t nblk = (c1 - c0 + 4095) / 4096;                                            \
        FL_PAR_FOR(c1 - c0 >= FL_CPU_PAR_MIN, schedule(static),                           \
        for (int64_t blk = 0; blk < nblk; blk++) {                                        \
            int64_t i0 = c0 + blk * 4096, len = c1 - i0 < 4096 ? c1 - i0 : 4096;          \
            body;                                                                         \
        });                                                                               \
    }

/* bf16 a (op) b into bf16 d, all contiguous, for + - * /: 32 elements at a time widened in registers, the fp32
 * operation, and fl_f32_to_bf16_n's rounding (bf16_x86.h's pack32), the bits of the tiles' route (widen a tile of each
 * into scratch, binop_run, round the tile back: three more passes, bf16 add and mul 1.2-1.35× torch's, stop 99); the
 * tail of fewer than 32 the same way one at a time. d may be a or b (each group is read before it is written). */
#ifdef __x86_64__
FL_BF16_X86_INLINE __m512 bf16_widen16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
#define BF16_BINOP_LOOP(vop, sop)                                                                                   \
    do {                                                                                                          \
        for (; i + 32 <= n; i += 32) {                                                                            \
            const __m512 lo = vop(bf16_widen16(a + i), bf16_widen16(b + i));                                      \
            const __m512 hi = vop(bf16_widen16(a + i + 16), bf16_widen16(b + i + 16));                            \
            _mm512_storeu_si512(d + i, fl_bf16_x86_pack32(lo, hi));                                               \
        }                                                                                                         \
        for (; i < n; i++) d[i] = fl_f32_to_bf16(fl_bf16_to_f32(a[i]) sop fl_bf16_to_f32(b[i]));                  \
    } while (0)
FL_BF16_X86_TARGET static void bf16_binop_run(fl_binop op, const uint16_t *a, const uint16_t *b, uint16_t *d,
                                              int64_t n) {
    int64_t i = 0;
    switch (op) {
    case FL_OP_ADD: BF16_BINOP_LOOP(_mm512_add_ps, +); break;
    case FL_OP_SUB: BF16_BINOP_LOOP(_mm512_sub_ps, -); break;
    case FL_OP_MUL: BF16_BINOP_LOOP(_mm512_mul_ps, *); break;
    default: BF16_BINOP_LOOP(_mm512_div_ps, /); break;   /* FL_OP_DIV */
    }
}
#undef BF16_BINOP_LOOP
#endif
/* The same without AVX512_BF16 (AVX2 hosts: Zen 3, and Intel's before Cooper Lake): each value widened, the fp32
 * operation, rounded by half_cvt.h's fl_f32_to_bf16_bits (fl_f32_to_bf16_n's rounding and NaN), in one loop the build's
 * AVX2 vectorises; such a host took the tiles' route (bf16 x + y of [4096, 1024] 1.2-1.5x torch's on Zen 3; stop 102).
 * The same bits as the route and the loop above. */
#define BF16_LOOP(expr)                                                                  \
    do {                                                                                 \
        _Pragma("omp simd")                                                              \
        for (int64_t i = 0; i < n; i++) {                                                \
            const float x = fl_bf16_bits_to_f32(a[i]), y = fl_bf16_bits_to_f32(b[i]);    \
            d[i] = fl_f32_to_bf16_bits(expr);                                            \
        }                                                                                \
    } while (0)
static void bf16_binop_run_any(fl_binop op, const uint16_t *a, const uint16_t *b, uint16_t *d, int64_t n) {
    switch (op) {
    case FL_OP_ADD: BF16_LOOP(x + y); break;
    case FL_OP_SUB: BF16_LOOP(x - y); break;
    case FL_OP_MUL: BF16_LOOP(x * y); break;
    default: BF16_LOOP(x / y); break;   /* FL_OP_DIV */
    }
}
#undef BF16_LOOP
static bool bf16_binop_fused(fl_binop op, const fl_tensor *const *ts) {
    if (op != FL_OP_ADD && op != FL_OP_SUB && op != FL_OP_MUL && op != FL_OP_DIV) return false;
    for (int k = 0; k < 3; k++)
        if (ts[k]->dtype != FL_BF16 || !fl_tensor_is_contiguous(ts[k]) ||
            fl_tensor_numel(ts[k]) != fl_tensor_numel(ts[0]))
            return false;
    return true;
}

fl_status fl_cpu_dev_binary(fl_binop op, fl_tensor *dst, const fl_tensor *a, const fl_tensor *b) {
    const fl_tensor *ts[3] = { dst, a, b };
    int64_t n = fl_tensor_numel(dst);
    if (all_f32_contig(3, ts) && fl_tensor_numel(a) == n && fl_tensor_numel(b) == n) {
        float *d = fl_tensor_data(dst);
        const float *x = fl_tensor_data(a), *y = fl_tensor_data(b);
        CHUNKED(n, binop_run(op, x + i0, y + i0, d + i0, len));
        return FL_OK;
    }
    if (bf16_binop_fused(op, ts)) {
        uint16_t *d = fl_tensor_data(dst);
        const uint16_t *x = fl_tensor_data(a), *y = fl_tensor_data(b);
        if ((x == d || x + n <= d || d + n <= x) && (y == d || y + n <= d || d + n <= y)) {
#ifdef __x86_64__
            if (fl_bf16_x86_available()) {
                CHUNKED(n, bf16_binop_run(op, x + i0, y + i0, d + i0, len));
                return FL_OK;
            }
#endif
            CHUNKED(n, bf16_binop_run_any(op, x + i0, y + i0, d + i0, len));
            return FL_OK;
        }
    }
    ew_ctx c = { op, dst, a, b, 0, 0, false };
    return fl_cpu_for_tiles(dst->ndim, dst->shape, 3, ts, binary_tile, &c);
}

fl_status fl_cpu_dev_binary_scalar(fl_binop op, fl_tensor *dst, const fl_tensor *a, double s, bool scalar_first) {
    const fl_tensor *ts[2] = { dst, a };
    int64_t n = fl_tensor_numel(dst);
    if (all_f32_contig(2, ts)) {
        float *d = fl_tensor_data(dst);
        const float *x = fl_tensor_data(a);
        CHUNKED(n, scalar_run(op, x + i0, s, scalar_first, d + i0, len));
        return FL_OK;
    }
    ew_ctx c = { op, dst, a, NULL, s, 0, scalar_first };
    return fl_cpu_for_tiles(dst->ndim, dst->shape, 2, ts, scalar_tile, &c);
}

fl_status fl_cpu_dev_unary(fl_unop op, fl_tensor *dst, const fl_tensor *a) {
    const fl_tensor *ts[2] = { dst, a };
    int64_t n = fl_tensor_numel(dst);
    if (all_f32_contig(2, ts)) {
        float *d = fl_tensor_data(dst);
        const float *x = fl_tensor_data(a);
        CHUNKED(n, unop_run(op, x + i0, d + i0, len));
        return FL_OK;
    }
    ew_ctx c = { op, dst, a, NULL, 0, 0, false };
    return fl_cpu_for_tiles(dst->ndim, dst->shape, 2, ts, unary_tile, &c);
}

fl_status fl_cpu_dev_clamp(fl_tensor *dst, const fl_tensor *a, double lo, double hi) {
    const fl_tensor *ts[2] = { dst, a };
    int64_t n = fl_tensor_numel(dst);
    if (all_f32_contig(2, ts)) {
        float *d = fl_tensor_data(dst);
        const float *x = fl_tensor_data(a);
        CHUNKED(n, clamp_run(x + i0, (float)lo, (float)hi, d + i0, len));
        return FL_OK;
    }
    ew_ctx c = { 0, dst, a, NULL, lo, hi, false };
    return fl_cpu_for_tiles(dst->ndim, dst->shape, 2, ts, clamp_tile, &c);
}
