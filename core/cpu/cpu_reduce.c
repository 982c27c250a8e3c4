/* cpu_reduce.c — sum/mean/max/min/amax over all elements or one dim. Sums accumulate in double in
 * a fixed order (fixed-size blocks combined left to right), so results do not depend on threads.
 * max/min/amax propagate NaN, like torch. */
#include "cpu_internal.h"
#include "cpu_vmath.h"
#include "par.h"
#include <math.h>
#include <immintrin.h>
#include <stdlib.h>

#define RBLOCK 65536

typedef struct { double sum; float mx, mn, amax; bool nan; } racc;

static void racc_init(racc *r) { r->sum = 0; r->mx = -INFINITY; r->mn = INFINITY; r->amax = 0; r->nan = false; }

/* A run's double sum in SUM_LANES partial sums, element i into lane i % SUM_LANES, the lanes then added in halves
 * (lane k + lane k + 8, then + 4, ...): a pattern fixed in the source, so the same on every run, ISA and thread count.
 * (omp simd's one vector of 4 doubles waited on the previous add at each step: sum() of [4096, 1024] was 2.9× torch's;
 * four independent vectors keep the adder busy.) */
#define SUM_LANES 16
/* sq: each element's fp32 square (x·x rounded to fp32, binary's product) in place of the element */
typedef double v4d __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) v4d widen4(const float *x, bool sq) {   /* (vcvtps2pd from memory) */
    __m128 f = _mm_loadu_ps(x);
    if (sq) f = _mm_mul_ps(f, f);
    return (v4d)_mm256_cvtps_pd(f);
}
/* The lanes as four vectors of four (lane k is p[k / 4][k % 4]), kept in registers through the loop (an array of
 * sixteen doubles went through memory at every add). lanes_add runs on a run in pieces whose lengths are multiples of
 * SUM_LANES, the last piece aside: the same sums. */
static inline __attribute__((always_inline)) void lanes_add(v4d *p, const float *x, int64_t n, bool sq) {
    v4d p0 = p[0], p1 = p[1], p2 = p[2], p3 = p[3];
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES) {
        /* 2 KiB ahead: a row of x:sum(2) or x:norm(2, 2) is often one 4 KiB page, where the hardware's streamer stops;
         * without it those rows read at ~80% of the speed of torch's (0.73-0.90 ms for [4096, 1024], 0.63-0.71 with
         * it; stop 99). A prefetch changes no value, and one past the end of x is dropped. */
        __builtin_prefetch(x + i + 512);
        p0 += widen4(x + i, sq); p1 += widen4(x + i + 4, sq); p2 += widen4(x + i + 8, sq); p3 += widen4(x + i + 12, sq);
    }
    p[0] = p0; p[1] = p1; p[2] = p2; p[3] = p3;
    for (int k = 0; i + k < n; k++) p[k / 4][k % 4] += (double)(sq ? x[i + k] * x[i + k] : x[i + k]);
}
static inline __attribute__((always_inline)) double lanes_total(const v4d *p) {
    v4d q = (p[0] + p[2]) + (p[1] + p[3]);   /* lane k + lane k + 8, then + lane k + 4 */
    return (q[0] + q[2]) + (q[1] + q[3]);    /* then + 2, then + 1 */
}
static inline __attribute__((always_inline)) double sum_lanes(const float *x, int64_t n, bool sq) {
    v4d p[4] = { { 0 } };
    lanes_add(p, x, n, sq);
    return lanes_total(p);
}
static double sum_f64(const float *x, int64_t n) { return sum_lanes(x, n, false); }
/* sum_f64 of n bf16 values, widened in registers (exactly: the bits << 16) where fl_cpu_load wrote them into a tile
 * buffer that sum_f64 then read back: the same lanes and adds, so the same double. The buffer's round trip took twice
 * the adds' time (x:sum() of a bf16 [32, 128, 32, 32] 1.8× torch's on Zen 3; stop 102). */
static inline __attribute__((always_inline)) void widen8_bf16(const uint16_t *x, v4d *lo, v4d *hi) {
    const __m256 f = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)x)), 16));
    *lo = (v4d)_mm256_cvtps_pd(_mm256_castps256_ps128(f));
    *hi = (v4d)_mm256_cvtps_pd(_mm256_extractf128_ps(f, 1));
}
static double sum_bf16_f64(const uint16_t *x, int64_t n) {
    v4d p[4] = { { 0 } }, p0 = p[0], p1 = p[1], p2 = p[2], p3 = p[3];
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES) {
        __builtin_prefetch(x + i + 1024);   /* (2 KiB ahead, lanes_add's) */
        v4d a, b, c, d;
        widen8_bf16(x + i, &a, &b);
        widen8_bf16(x + i + 8, &c, &d);
        p0 += a; p1 += b; p2 += c; p3 += d;
    }
    p[0] = p0; p[1] = p1; p[2] = p2; p[3] = p3;
    for (int k = 0; i + k < n; k++) p[k / 4][k % 4] += (double)fl_bf16_to_f32(x[i + k]);
    return lanes_total(p);
}
static double sum_sq_f64(const float *x, int64_t n) { return sum_lanes(x, n, true); }
double fl_cpu_sum_sq_f64(const float *x, int64_t n) { return sum_sq_f64(x, n); }

/* One pass per op family; the sum in sum_f64's fixed pattern, so the result is the same on every run (and
 * independent of thread count: blocks are fixed-size). */
static void racc_add(racc *r, fl_redop op, const float *x, int64_t n) {
    if (op == FL_OP_SUM || op == FL_OP_MEAN) {
        r->sum += sum_f64(x, n);
        return;
    }
    float mx = r->mx, mn = r->mn, am = r->amax;
    int nan = 0;
    #pragma omp simd reduction(max:mx,am) reduction(min:mn) reduction(|:nan)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        nan |= v != v;
        mx = v > mx ? v : mx;
        mn = v < mn ? v : mn;
        am = fabsf(v) > am ? fabsf(v) : am;
    }
    r->mx = mx; r->mn = mn; r->amax = am; r->nan |= nan != 0;
}

static void racc_merge(racc *r, const racc *o) {
    r->sum += o->sum;
    if (o->mx > r->mx) r->mx = o->mx;
    if (o->mn < r->mn) r->mn = o->mn;
    if (o->amax > r->amax) r->amax = o->amax;
    r->nan |= o->nan;
}

static float racc_result(fl_redop op, const racc *r, int64_t count) {
    switch (op) {
    case FL_OP_SUM: return (float)r->sum;
    case FL_OP_MEAN: return count ? (float)(r->sum / (double)count) : NAN;
    case FL_OP_MAX: return r->nan ? NAN : r->mx;
    case FL_OP_MIN: return r->nan ? NAN : r->mn;
    default: return r->nan ? NAN : r->amax;
    }
}

/* Accumulate a contiguous run of any dtype, converting in tiles. */
static void racc_run(racc *r, fl_redop op, const fl_tensor *t, int64_t off, int64_t stride, int64_t n) {
    if (t->dtype == FL_F32 && stride == 1) { racc_add(r, op, (const float *)fl_tensor_data(t) + off, n); return; }
    if (t->dtype == FL_BF16 && stride == 1 && (op == FL_OP_SUM || op == FL_OP_MEAN)) {
        const uint16_t *x = (const uint16_t *)fl_tensor_data(t) + off;   /* the tiles below, read in place */
        for (int64_t j = 0; j < n; j += FL_CPU_TILE)
            r->sum += sum_bf16_f64(x + j, n - j < FL_CPU_TILE ? n - j : FL_CPU_TILE);
        return;
    }
    float buf[FL_CPU_TILE];
    for (int64_t j = 0; j < n; j += FL_CPU_TILE) {
        int64_t len = n - j < FL_CPU_TILE ? n - j : FL_CPU_TILE;
        fl_cpu_load(t, off + j * stride, stride, len, buf);
        racc_add(r, op, buf, len);
    }
}

/* Reduction over the middle dim of a contiguous [outer, size, inner] with inner > 1 — e.g. dim 0 of a
 * [rows, cols] matrix, a bias gradient. Rows are streamed, never columns: a task takes a tile of up to
 * CW inner positions over a chunk of up to RB consecutive reduced indices and accumulates whole row
 * segments into CW accumulators (contiguous, vectorised; fp32 rows are read in place). Chunk results are
 * then combined left to right in chunk order, so each output is the same fixed-order double sum
 * ((chunk 0) + chunk 1) + ... whatever the thread count, and tiles x chunks give threads work even for
 * a narrow matrix. */
enum { CW = 1024, RB = FL_CPU_SUM_ROWS, RGROUP = 32 };

static inline __attribute__((always_inline)) void add_row_f64(double *ps, const float *row, int64_t n) {
    #pragma omp simd
    for (int64_t j = 0; j < n; j++) ps[j] += (double)row[j];
}
static void add_row_f64_256(double *ps, const float *row, int64_t n) { add_row_f64(ps, row, n); }
FL_CPU_AVX512 static void add_row_f64_512(double *ps, const float *row, int64_t n) { add_row_f64(ps, row, n); }
void fl_cpu_add_row_f64(double *ps, const float *row, int64_t n, bool wide) {
    if (wide) add_row_f64_512(ps, row, n);
    else add_row_f64_256(ps, row, n);
}

fl_status fl_cpu_amax_made(int64_t ntasks, int64_t scratch, bool par, fl_cpu_amax_fn amax, const void *ctx,
                           float *out) {
    float m = 0.0f;
    bool oom = false;
    FL_PARALLEL(par,,
    {
        float mine = 0.0f, *buf = malloc((size_t)(scratch > 0 ? scratch : 1) * sizeof(float));
        FL_PRAGMA(omp for schedule(static))
        for (int64_t t = 0; t < ntasks; t++) {
            if (!buf) continue;
            mine = amax(ctx, t, buf, mine);
        }
        FL_PRAGMA(omp critical)
        {
            m = mine > m ? mine : m;
            if (!buf) oom = true;
        }
        free(buf);
    });
    if (oom) return FL_ERR(FL_ENOMEM, "amax: out of memory for a scratch of %lld floats", (long long)scratch);
    *out = m;
    return fl_check_interrupt();
}

typedef struct { float mx, mn, am; int nan; } mm4;

static void strided_task(fl_redop op, const fl_tensor *a, int64_t o, int64_t size, int64_t inner, int64_t j0,
                         int64_t len, int64_t s0, int64_t s1, double *psum, mm4 *pmm) {
    const bool direct = a->dtype == FL_F32;
    const float *base = direct ? (const float *)fl_tensor_data(a) : NULL;
    float buf[CW];
    if (op == FL_OP_SUM || op == FL_OP_MEAN) {
        const bool wide = fl_cpu_avx512();
        for (int64_t j = 0; j < len; j++) psum[j] = 0;
        for (int64_t s = s0; s < s1; s++) {
            const float *row = buf;
            if (direct) row = base + (o * size + s) * inner + j0;
            else fl_cpu_load(a, (o * size + s) * inner + j0, 1, len, buf);
            fl_cpu_add_row_f64(psum, row, len, wide);
        }
        return;
    }
    float mx[CW], mn[CW], am[CW];
    int nan[CW];
    for (int64_t j = 0; j < len; j++) { mx[j] = -INFINITY; mn[j] = INFINITY; am[j] = 0; nan[j] = 0; }
    for (int64_t s = s0; s < s1; s++) {
        const float *row = buf;
        if (direct) row = base + (o * size + s) * inner + j0;
        else fl_cpu_load(a, (o * size + s) * inner + j0, 1, len, buf);
        #pragma omp simd
        for (int64_t j = 0; j < len; j++) {
            float v = row[j], av = fabsf(v);
            nan[j] |= v != v;
            mx[j] = v > mx[j] ? v : mx[j];
            mn[j] = v < mn[j] ? v : mn[j];
            am[j] = av > am[j] ? av : am[j];
        }
    }
    for (int64_t j = 0; j < len; j++) pmm[j] = (mm4){ mx[j], mn[j], am[j], nan[j] };
}

static fl_status reduce_strided(fl_redop op, fl_tensor *dst, const fl_tensor *a, int64_t outer, int64_t size, int64_t inner) {
    const bool sum_op = op == FL_OP_SUM || op == FL_OP_MEAN;
    const int64_t tiles = (inner + CW - 1) / CW, chunks = (size + RB - 1) / RB, ntasks = outer * tiles * chunks;
    const int64_t nout = outer * inner, task_work = (size < RB ? size : RB) * (inner < CW ? inner : CW);
    /* running results per output, and one partial row per task of a group */
    double *acc = sum_op ? malloc((size_t)nout * sizeof(double)) : NULL, *psum = NULL;
    mm4 *macc = sum_op ? NULL : malloc((size_t)nout * sizeof(mm4)), *pmm = NULL;
    if (sum_op) psum = malloc((size_t)RGROUP * CW * sizeof(double));
    else pmm = malloc((size_t)RGROUP * CW * sizeof(mm4));
    fl_status st = FL_OK;
    if ((sum_op && (!acc || !psum)) || (!sum_op && (!macc || !pmm))) {
        st = FL_ERR(FL_ENOMEM, "reduce: out of memory for %lld accumulators", (long long)nout);
        goto done;
    }
    for (int64_t i = 0; i < nout; i++) {
        if (sum_op) acc[i] = 0;
        else macc[i] = (mm4){ -INFINITY, INFINITY, 0, 0 };
    }
    for (int64_t c0 = 0; c0 < ntasks; c0 += RGROUP) {
        if ((st = fl_check_interrupt()) != FL_OK) goto done;
        const int64_t c1 = c0 + RGROUP < ntasks ? c0 + RGROUP : ntasks;
        /* task t: output tile (o, tile) = t / chunks, chunk t % chunks */
        FL_PAR_FOR((c1 - c0) > 1 && (c1 - c0) * task_work >= FL_CPU_PAR_MIN, schedule(static),
        for (int64_t t = c0; t < c1; t++) {
            const int64_t ot = t / chunks, ch = t % chunks, o = ot / tiles, j0 = (ot % tiles) * CW;
            const int64_t len = inner - j0 < CW ? inner - j0 : CW, s0 = ch * RB, s1 = s0 + RB < size ? s0 + RB : size;
            strided_task(op, a, o, size, inner, j0, len, s0, s1, psum ? psum + (t - c0) * CW : NULL,
                         pmm ? pmm + (t - c0) * CW : NULL);
        });
        for (int64_t t = c0; t < c1; t++) {   /* in chunk order: the fixed summation order */
            const int64_t ot = t / chunks, o = ot / tiles, j0 = (ot % tiles) * CW, len = inner - j0 < CW ? inner - j0 : CW;
            if (sum_op) {
                double *d = acc + o * inner + j0;
                const double *p = psum + (t - c0) * CW;
                for (int64_t j = 0; j < len; j++) d[j] += p[j];
            } else {
                mm4 *d = macc + o * inner + j0;
                const mm4 *p = pmm + (t - c0) * CW;
                for (int64_t j = 0; j < len; j++) {
                    if (p[j].mx > d[j].mx) d[j].mx = p[j].mx;
                    if (p[j].mn < d[j].mn) d[j].mn = p[j].mn;
                    if (p[j].am > d[j].am) d[j].am = p[j].am;
                    d[j].nan |= p[j].nan;
                }
            }
        }
    }
    float res[CW];
    for (int64_t i0 = 0; i0 < nout; i0 += CW) {
        const int64_t len = nout - i0 < CW ? nout - i0 : CW;
        for (int64_t j = 0; j < len; j++) {
            racc r = sum_op ? (racc){ acc[i0 + j], 0, 0, 0, false }
                            : (racc){ 0, macc[i0 + j].mx, macc[i0 + j].mn, macc[i0 + j].am, macc[i0 + j].nan != 0 };
            res[j] = racc_result(op, &r, size);
        }
        fl_cpu_store(dst, i0, 1, len, res);
    }
done:
    free(acc); free(psum); free(macc); free(pmm);
    return st;
}

fl_status fl_cpu_dev_reduce(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim) {
    if (!fl_tensor_is_contiguous(a)) {
        fl_tensor *c;
        FL_TRY(fl_tensor_contiguous(&c, a));
        fl_status st = fl_cpu_dev_reduce(op, dst, c, dim);
        fl_tensor_release(c);
        return st;
    }
    if (dim < 0 || a->ndim == 0) {
        int64_t n = fl_tensor_numel(a), nb = (n + RBLOCK - 1) / RBLOCK;
        racc total;
        racc_init(&total);
        racc *part = malloc((size_t)(nb ? nb : 1) * sizeof *part);
        if (!part) return FL_ERR(FL_ENOMEM, "reduce: out of memory");
        int64_t per_poll = FL_CPU_POLL / RBLOCK;
        for (int64_t c0 = 0; c0 < nb; c0 += per_poll) {
            fl_status st = fl_check_interrupt();
            if (st != FL_OK) { free(part); return st; }
            int64_t c1 = c0 + per_poll < nb ? c0 + per_poll : nb;
            FL_PAR_FOR(c1 - c0 > 1, schedule(static),
            for (int64_t b = c0; b < c1; b++) {
                racc_init(&part[b]);
                int64_t i0 = b * RBLOCK;
                racc_run(&part[b], op, a, i0, 1, n - i0 < RBLOCK ? n - i0 : RBLOCK);
            });
        }
        for (int64_t b = 0; b < nb; b++) racc_merge(&total, &part[b]);
        free(part);
        float v = racc_result(op, &total, n);
        fl_cpu_store(dst, 0, 1, 1, &v);
        return FL_OK;
    }
    int64_t outer, size, inner;
    fl_cpu_split_axis(a, dim, &outer, &size, &inner);
    /* dst is contiguous [outer, 1, inner]. */
    if (inner == 1) {
        int64_t per_poll = FL_CPU_POLL / (size ? size : 1) + 1;
        for (int64_t c0 = 0; c0 < outer; c0 += per_poll) {
            FL_TRY(fl_check_interrupt());
            int64_t c1 = c0 + per_poll < outer ? c0 + per_poll : outer;
            FL_PAR_FOR((c1 - c0) * size >= FL_CPU_PAR_MIN, schedule(static),
            for (int64_t o = c0; o < c1; o++) {
                racc r;
                racc_init(&r);
                racc_run(&r, op, a, o * size, 1, size);
                float v = racc_result(op, &r, size);
                fl_cpu_store(dst, o, 1, 1, &v);
            });
        }
        return FL_OK;
    }
    return reduce_strided(op, dst, a, outer, size, inner);
}

/* Σ a·a along dim (dim < 0: all), each product rounded to fp32 and the sum reduce's (the same blocks, lanes and
 * order, so the bits of binary's a·a then reduce's sum: x:norm(2, dim) made those two passes and the product's tensor,
 * 8× torch's norm). fp32 over everything or along a dim of stride 1 here; otherwise the two passes. */
fl_status fl_cpu_dev_sum_squares(fl_tensor *dst, const fl_tensor *a, int dim) {
    int64_t outer = 1, size = fl_tensor_numel(a), inner = 1;
    bool all = dim < 0 || a->ndim == 0;
    if (!all) fl_cpu_split_axis(a, dim, &outer, &size, &inner);
    if (a->dtype != FL_F32 || !fl_tensor_is_contiguous(a) || inner != 1) {
        fl_tensor *sq;
        FL_TRY(fl_tensor_empty(&sq, a->dtype, a->ndim, a->shape, a->device));
        fl_status st = fl_cpu_dev_binary(FL_OP_MUL, sq, a, a);
        if (st == FL_OK) st = fl_cpu_dev_reduce(FL_OP_SUM, dst, sq, all ? -1 : dim);
        fl_tensor_release(sq);
        return st;
    }
    const float *x = (const float *)fl_tensor_data(a);
    float *d = (float *)fl_tensor_data(dst);
    if (all) {
        int64_t n = size, nb = (n + RBLOCK - 1) / RBLOCK;
        double *part = malloc((size_t)(nb ? nb : 1) * sizeof *part);
        if (!part) return FL_ERR(FL_ENOMEM, "sum_squares: out of memory");
        int64_t per_poll = FL_CPU_POLL / RBLOCK;
        for (int64_t c0 = 0; c0 < nb; c0 += per_poll) {
            fl_status st = fl_check_interrupt();
            if (st != FL_OK) { free(part); return st; }
            int64_t c1 = c0 + per_poll < nb ? c0 + per_poll : nb;
            FL_PAR_FOR(c1 - c0 > 1, schedule(static),
            for (int64_t b = c0; b < c1; b++) {
                int64_t i0 = b * RBLOCK;
                part[b] = sum_sq_f64(x + i0, n - i0 < RBLOCK ? n - i0 : RBLOCK);
            });
        }
        double total = 0;
        for (int64_t b = 0; b < nb; b++) total += part[b];
        free(part);
        d[0] = (float)total;
        return FL_OK;
    }
    int64_t per_poll = FL_CPU_POLL / (size ? size : 1) + 1;
    for (int64_t c0 = 0; c0 < outer; c0 += per_poll) {
        FL_TRY(fl_check_interrupt());
        int64_t c1 = c0 + per_poll < outer ? c0 + per_poll : outer;
        FL_PAR_FOR((c1 - c0) * size >= FL_CPU_PAR_MIN, schedule(static),
        for (int64_t o = c0; o < c1; o++) d[o] = (float)(0.0 + sum_sq_f64(x + o * size, size)););
    }
    return FL_OK;
}

/* logsumexp along a dim with a stride (inner > 1), after m: s = Σ exp(a − m) and log s + m in one more read of a, with
 * the bits of a − m, exp, sum (reduce_strided's tasks, chunks and order: each task's rows added in double in order,
 * the chunks' partial sums then added left to right), log and + m as the five whole-tensor passes gave them (it made
 * those passes and a tensor of a's size: logsumexp(1) of [4096, 1024] took twice this code's time) */
static fl_status lse_strided(float *dp, float *sp, const float *mp, const float *x, int64_t outer, int64_t size,
                             int64_t inner) {
    const int64_t tiles = (inner + CW - 1) / CW, chunks = (size + RB - 1) / RB, ntasks = outer * tiles * chunks;
    const int64_t nout = outer * inner, task_work = (size < RB ? size : RB) * (inner < CW ? inner : CW);
    double *acc = calloc((size_t)nout, sizeof *acc), *psum = malloc((size_t)RGROUP * CW * sizeof *psum);
    fl_status st = FL_OK;
    if (!acc || !psum) {
        st = FL_ERR(FL_ENOMEM, "logsumexp: out of memory for %lld accumulators", (long long)nout);
        goto done;
    }
    const bool wide = fl_cpu_avx512();
    for (int64_t c0 = 0; c0 < ntasks; c0 += RGROUP) {
        if ((st = fl_check_interrupt()) != FL_OK) goto done;
        const int64_t c1 = c0 + RGROUP < ntasks ? c0 + RGROUP : ntasks;
        FL_PAR_FOR((c1 - c0) > 1 && (c1 - c0) * task_work >= FL_CPU_PAR_MIN, schedule(static),
        for (int64_t t = c0; t < c1; t++) {
            const int64_t ot = t / chunks, ch = t % chunks, o = ot / tiles, j0 = (ot % tiles) * CW;
            const int64_t len = inner - j0 < CW ? inner - j0 : CW, s0 = ch * RB, s1 = s0 + RB < size ? s0 + RB : size;
            double *ps = psum + (t - c0) * CW;
            const float *mo = mp + o * inner + j0;
            float e[CW];
            for (int64_t j = 0; j < len; j++) ps[j] = 0;
            for (int64_t k = s0; k < s1; k++) {
                const float *row = x + (o * size + k) * inner + j0;
                FL_PRAGMA(omp simd)
                for (int64_t j = 0; j < len; j++) e[j] = row[j] - mo[j];
                fl_cpu_map_exp(e, e, len);
                fl_cpu_add_row_f64(ps, e, len, wide);
            }
        });
        for (int64_t t = c0; t < c1; t++) {   /* in chunk order: the sum's fixed order */
            const int64_t ot = t / chunks, o = ot / tiles, j0 = (ot % tiles) * CW;
            const int64_t len = inner - j0 < CW ? inner - j0 : CW;
            double *d = acc + o * inner + j0;
            const double *p = psum + (t - c0) * CW;
            for (int64_t j = 0; j < len; j++) d[j] += p[j];
        }
    }
    for (int64_t i = 0; i < nout; i++) {
        const float so = (float)acc[i];
        sp[i] = so;
        dp[i] = fl_vm_log(so) + mp[i];
    }
done:
    free(acc);
    free(psum);
    return st;
}

/* logsumexp along dim: m (max, ±inf made 0), s = Σ exp(a − m), log s + m, with the bits of those ops one after another
 * (x:logsumexp(2) made seven passes over [4096, 1024]: 2.6× torch's). A contiguous fp32 row (dim of stride 1) in one
 * read for m and one for the rest, exp a piece at a time into a buffer that stays in cache, summed in the sum's lanes;
 * a dim with a stride, the same two reads (lse_strided). */
#define LSE_PIECE 1024   /* a multiple of SUM_LANES */
fl_status fl_cpu_dev_logsumexp(fl_tensor *dst, fl_tensor *m, fl_tensor *s, const fl_tensor *a, int dim) {
    if (a->dtype != FL_F32 || m->dtype != FL_F32 || s->dtype != FL_F32 || dst->dtype != FL_F32)
        return FL_ERR(FL_EINVAL, "logsumexp: fp32 only on the device");
    FL_TRY(fl_cpu_dev_reduce(FL_OP_MAX, m, a, dim));
    float *mp = (float *)fl_tensor_data(m), *sp = (float *)fl_tensor_data(s), *dp = (float *)fl_tensor_data(dst);
    const float *x = (const float *)fl_tensor_data(a);
    int64_t outer, size, inner;
    fl_cpu_split_axis(a, dim, &outer, &size, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < inner; j++) {
            float *mo = mp + o * inner + j;
            if (isinf(*mo)) *mo = 0.0f;   /* an infinite largest value shifts by 0 */
            /* a NaN along a dim of stride 1: the first one, its own bits, as max(dim)'s value was (along a dim with a
             * stride max(dim) gave reduce's NaN, as here) */
            if (*mo != *mo && inner == 1)
                for (int64_t k = 0; k < size; k++) {
                    const float v = x[(o * size + k) * inner + j];
                    if (v != v) { *mo = v; break; }
                }
        }
    if (inner != 1) return lse_strided(dp, sp, mp, x, outer, size, inner);
    int64_t per_poll = FL_CPU_POLL / (size ? size : 1) + 1;
    for (int64_t c0 = 0; c0 < outer; c0 += per_poll) {
        FL_TRY(fl_check_interrupt());
        int64_t c1 = c0 + per_poll < outer ? c0 + per_poll : outer;
        FL_PAR_FOR((c1 - c0) * size >= FL_CPU_PAR_MIN, schedule(static),
        for (int64_t o = c0; o < c1; o++) {
            const float *row = x + o * size;
            const float mo = mp[o];
            float e[LSE_PIECE];
            v4d p[4] = { { 0 } };
            for (int64_t j0 = 0; j0 < size; j0 += LSE_PIECE) {
                const int64_t len = size - j0 < LSE_PIECE ? size - j0 : LSE_PIECE;
                FL_PRAGMA(omp simd)
                for (int64_t j = 0; j < len; j++) e[j] = row[j0 + j] - mo;
                fl_cpu_map_exp(e, e, len);
                lanes_add(p, e, len, false);
            }
            const float so = (float)(0.0 + lanes_total(p));
            sp[o] = so;
            dp[o] = fl_vm_log(so) + mo;
        });
    }
    return FL_OK;
}
