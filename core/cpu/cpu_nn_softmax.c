/* cpu_nn_softmax.c — softmax, log-softmax and cross-entropy over the last dim of [rows, cols]. Each row
 * is done by one thread with fixed-order (SIMD-lane) sums, so results do not depend on the thread count.
 * Stable: rows are shifted by their max; cross-entropy uses log-sum-exp in double.
 *
 * The rows' sums of exponentials have one order on every ISA: 8 lanes, lane l adding the exponentials of elements
 * l, l + 8, l + 16, ... of the row's whole groups of 8 in turn, the last n mod 8 added to lane 0 in turn, then
 * 0 + lane 0 + lane 1 + ... + lane 7. That is the order GCC's -O2 `omp simd` reduction gave the AVX2 loops below
 * (the only copy before stop 92), now spelled out in them; tests/c/test_softmax_bits.c checks both copies against
 * that order written out in scalar code, in the release and the sanitizer builds. The AVX-512 copies take the exponentials 16 at a time (fl_nn_expf's operations, in its order) and
 * add each 16's halves to one 8-lane sum, the lower half first: the same bits, about twice as fast. */
#include "cpu_nn_internal.h"
#include "cpu_internal.h"
#ifdef __x86_64__
#include "cpu_avx2.h"
#endif
#include "par.h"
#include <stdlib.h>

/* Rows per chunk between interrupt polls in the status-returning kernels. */
#define CE_CHUNK 2048

static inline float row_max(const float *x, int64_t n) {
    float m = -INFINITY;
    #pragma omp simd reduction(max:m)
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* The sums below spell the order out (lane arrays, each lane its own accumulator) rather than leave it to an `omp
 * simd` reduction: GCC's -O2 vectorisation gave this order, its -O1 (the sanitizer build) another one, so the bits
 * depended on the optimiser until 2026-12-06. The inner loops of 8 still vectorise. */

/* y[j] = exp(x[j] - m); returns Σ y (float lanes; cols ≤ ~10^5 keeps this well inside fp32). */
static inline float row_exp_sum(const float *x, float *y, int64_t n, float m) {
    float lane[8] = { 0 };
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8) {
        #pragma omp simd
        for (int l = 0; l < 8; l++) { const float e = fl_nn_expf(x[j + l] - m); y[j + l] = e; lane[l] += e; }
    }
    for (int64_t j = n8; j < n; j++) { const float e = fl_nn_expf(x[j] - m); y[j] = e; lane[0] += e; }
    float s = 0.0f;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}

/* Σ y[j]·g[j] (y NULL: Σ g[j]) in the lanes' order, each product rounded to fp32: the backward passes' sums. They
 * were `omp simd reduction(+)` loops, whose order GCC's -O2 made this one (one 8-lane vector from 0, the last n mod 8
 * added to lane 0, then 0 + lane 0 + ... + lane 7: read in its code), now spelled out so that the columns' kernels
 * below give the same bits and the sanitizer's -O1 build no other ones. */
static inline __attribute__((always_inline)) float row_dot(const float *y, const float *g, int64_t n) {
    float lane[8] = { 0 };
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8) {
        #pragma omp simd
        for (int l = 0; l < 8; l++) lane[l] += y ? y[j + l] * g[j + l] : g[j + l];
    }
    for (int64_t j = n8; j < n; j++) lane[0] += y ? y[j] * g[j] : g[j];
    float s = 0.0f;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}

/* Σ v(j) over a row in the lanes' order, in double (v: exp(x[j] - m), or x[j] for the smoothing term) */
static inline double row_sumexp(const float *x, int64_t n, float m) {
    double lane[8] = { 0 };
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8) {
        #pragma omp simd
        for (int l = 0; l < 8; l++) lane[l] += (double)fl_nn_expf(x[j + l] - m);
    }
    for (int64_t j = n8; j < n; j++) lane[0] += (double)fl_nn_expf(x[j] - m);
    double s = 0.0;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}
static inline double row_sum_d(const float *x, int64_t n) {
    double lane[8] = { 0 };
    const int64_t n8 = n & ~(int64_t)7;
    for (int64_t j = 0; j < n8; j += 8) {
        #pragma omp simd
        for (int l = 0; l < 8; l++) lane[l] += (double)x[j + l];
    }
    for (int64_t j = n8; j < n; j++) lane[0] += (double)x[j];
    double s = 0.0;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}

#ifdef __x86_64__
/* fl_nn_expf on 16 lanes: the same operations in the same order (no fused multiply-adds), but its 2^k, two exact
 * factors 2^(k>>1)·2^(k − k>>1) of which only the second multiply rounds, is one vscalefps (y·2^k rounded once). */
FL_CPU_AVX512 static inline __m512 expf16(__m512 x) {
    const __m512 hi = _mm512_set1_ps(88.7228394f), lo = _mm512_set1_ps(-104.0f), sh = _mm512_set1_ps(12582912.0f);
    const __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512 xc = _mm512_mask_mov_ps(x, over, hi);
    xc = _mm512_mask_mov_ps(xc, _mm512_cmp_ps_mask(xc, lo, _CMP_LT_OQ), lo);
    xc = _mm512_mask_mov_ps(xc, nan, _mm512_setzero_ps());
    const __m512 k = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), sh), sh);
    __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(k, _mm512_set1_ps(0.693359375f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(k, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 p = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(1.9875691500e-4f), r), _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r), _mm512_set1_ps(1.0f));
    y = _mm512_scalef_ps(y, k);
    y = _mm512_mask_mov_ps(y, under, _mm512_setzero_ps());
    y = _mm512_mask_mov_ps(y, over, _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(y, nan, x);
}

/* row_max on 16 lanes. A max is the same in any order but for the sign of a zero maximum, which no result depends
 * on: x − m is +0 or −0 for x = ±0, and exp gives 1 for both; log-softmax's (x − m) − log Σ keeps a −0 only where
 * log Σ = 0, that is where the zero is the row's only maximum, and then m is that zero itself. */
FL_CPU_AVX512 static float row_max16(const float *x, int64_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16)   /* x > m ? x : m, as vmaxps(x, m) */
        m = _mm512_mask_max_ps(m, fl_avx512_lanes(n - j), _mm512_maskz_loadu_ps(fl_avx512_lanes(n - j), x + j), m);
    return _mm512_reduce_max_ps(m);
}

/* row_exp_sum in the file's order: y[j] = exp(x[j] − m), returns Σ y. next: the row after this one (or NULL), asked
 * into the caches a line per 16 exponentials, so that its max pass, which the memory bounds, finds it there (the
 * exponentials bound this loop: the loads ride along; log-softmax and cross-entropy [256, 32000] 14% faster). */
FL_CPU_AVX512 static float row_exp_sum16(const float *x, float *y, int64_t n, float m, const float *next) {
    const __m512 mv = _mm512_set1_ps(m);
    const int64_t n8 = n & ~(int64_t)7;
    __m256 acc = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n8; j += 16) {
        if (next) _mm_prefetch((const char *)(next + j), _MM_HINT_T1);
        const __m512 e = expf16(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv));
        _mm512_storeu_ps(y + j, e);
        acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
        acc = _mm256_add_ps(acc, _mm512_extractf32x8_ps(e, 1));
    }
    float lane[8], t[16];
    if (j < n) {   /* fewer than 16 left: at most one whole 8, then the tail */
        const __mmask16 mk = fl_avx512_lanes(n - j);
        const __m512 e = expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + j), mv));
        _mm512_mask_storeu_ps(y + j, mk, e);
        if (n8 > j) acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
        _mm512_storeu_ps(t, e);
    }
    _mm256_storeu_ps(lane, acc);
    for (int64_t i = n8; i < n; i++) lane[0] += t[i - j];
    float s = 0.0f;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}

/* row_sumexp in the file's order, the 8 lanes in double; next as above */
FL_CPU_AVX512 static double row_sumexp16(const float *x, int64_t n, float m, const float *next) {
    const __m512 mv = _mm512_set1_ps(m);
    const int64_t n8 = n & ~(int64_t)7;
    __m512d acc = _mm512_setzero_pd();
    int64_t j = 0;
    for (; j + 16 <= n8; j += 16) {
        if (next) _mm_prefetch((const char *)(next + j), _MM_HINT_T1);
        const __m512 e = expf16(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    double lane[8];
    float t[16];
    if (j < n) {
        const __m512 e = expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(fl_avx512_lanes(n - j), x + j), mv));
        if (n8 > j) acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        _mm512_storeu_ps(t, e);
    }
    _mm512_storeu_pd(lane, acc);
    for (int64_t i = n8; i < n; i++) lane[0] += (double)t[i - j];
    double s = 0.0;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}
/* The output passes, y[j] = y[j]·a (softmax) or (x[j] − m) − a (log-softmax), elementwise (the same bits on any
 * ISA); `stream`: the whole result is larger than the caches, so its lines go to memory without being read first
 * (non-temporal stores from the first 64-byte boundary on: the tensor's rows need not start on one). */
FL_CPU_AVX512 static void row_out16(const float *x, float *y, int64_t n, float m, float a, bool log_, bool stream) {
    const __m512 mv = _mm512_set1_ps(m), av = _mm512_set1_ps(a);
    int64_t j = 0;
    if (stream) {
        const int64_t head = (int64_t)((64 - ((uintptr_t)y & 63)) & 63) / 4;
        j = head < n ? head : n;
        for (int64_t i = 0; i < j; i++) y[i] = log_ ? (x[i] - m) - a : y[i] * a;
        for (; j + 16 <= n; j += 16) {
            const __m512 v = log_ ? _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv), av)
                                  : _mm512_mul_ps(_mm512_load_ps(y + j), av);
            _mm512_stream_ps(y + j, v);
        }
        _mm_sfence();
    }
    for (; j < n; j += 16) {
        const __mmask16 mk = fl_avx512_lanes(n - j);
        const __m512 v = log_ ? _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + j), mv), av)
                              : _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, y + j), av);
        _mm512_mask_storeu_ps(y + j, mk, v);
    }
}
/* log-softmax's backward output pass, d[j] = g[j] − exp(y[j])·s, in expf16 (fl_nn_expf's bits: elementwise, the same
 * on any ISA; GCC's vectorised fl_nn_expf took ~10 instructions more a vector) */
FL_CPU_AVX512 static void row_logbwd16(const float *y, const float *g, float *d, int64_t n, float s) {
    const __m512 sv = _mm512_set1_ps(s);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 mk = fl_avx512_lanes(n - j);
        const __m512 es = _mm512_mul_ps(expf16(_mm512_maskz_loadu_ps(mk, y + j)), sv);
        _mm512_mask_storeu_ps(d + j, mk, _mm512_sub_ps(_mm512_maskz_loadu_ps(mk, g + j), es));
    }
}

/* The AVX2 copies of the row passes (a host without AVX-512 ran GCC's vectorisation of the plain loops above, which
 * kept three things from the 16-lane copies: the next row's prefetch, the streamed log-softmax output, and a compact
 * exponential). expf8 is fl_nn_expf on 8 lanes, its operations in its order (a multiply and an add where it has them,
 * no fused multiply-adds; 2^k as its two exact factors): its bits, lane by lane. The sums keep the file's order: lane l
 * of the 8-lane accumulator takes elements l, l + 8, ... of the whole groups of 8, the rest go to lane 0 in turn, then
 * 0 + lane 0 + ... + lane 7. tests/c/test_softmax_bits.c checks them against that order written out in scalar code. */
static inline __m256 expf8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.7228394f), lo = _mm256_set1_ps(-104.0f), sh = _mm256_set1_ps(12582912.0f);
    const __m256 xc = _mm256_max_ps(_mm256_min_ps(x, hi), lo);   /* a NaN lane: hi here, restored at the end */
    const __m256 k = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)), sh), sh);
    __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(k, _mm256_set1_ps(0.693359375f)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(k, _mm256_set1_ps(-2.12194440e-4f)));
    __m256 p = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(1.9875691500e-4f), r), _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), _mm256_set1_ps(1.0f));
    return fl_avx2_exp_finish(y, k, x, lo, hi);
}
/* row_max on 8 lanes (any order gives the same maximum: see row_max16) */
static float row_max8(const float *x, int64_t n) {
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(_mm256_loadu_ps(x + j), mv);   /* x > m ? x : m */
    float lane[8], m = -INFINITY;
    _mm256_storeu_ps(lane, mv);
    for (int l = 0; l < 8; l++) m = lane[l] > m ? lane[l] : m;
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}
/* row_exp_sum in the file's order; next: the row after (or NULL), a line of it asked for per 16 exponentials */
static float row_exp_sum8(const float *x, float *y, int64_t n, float m, const float *next) {
    const __m256 mv = _mm256_set1_ps(m);
    const int64_t n8 = n & ~(int64_t)7;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t j = 0; j < n8; j += 8) {
        if (next && !(j & 15)) _mm_prefetch((const char *)(next + j), _MM_HINT_T1);
        const __m256 e = expf8(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv));
        _mm256_storeu_ps(y + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float lane[8];
    _mm256_storeu_ps(lane, acc);
    for (int64_t j = n8; j < n; j++) { const float e = fl_nn_expf(x[j] - m); y[j] = e; lane[0] += e; }
    float s = 0.0f;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}
/* row_sumexp in the file's order, lanes 0-3 and 4-7 in two vectors of doubles; next as above */
static double row_sumexp8(const float *x, int64_t n, float m, const float *next) {
    const __m256 mv = _mm256_set1_ps(m);
    const int64_t n8 = n & ~(int64_t)7;
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t j = 0; j < n8; j += 8) {
        if (next && !(j & 15)) _mm_prefetch((const char *)(next + j), _MM_HINT_T1);
        const __m256 e = expf8(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv));
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double lane[8];
    _mm256_storeu_pd(lane, lo);
    _mm256_storeu_pd(lane + 4, hi);
    for (int64_t j = n8; j < n; j++) lane[0] += (double)fl_nn_expf(x[j] - m);
    double s = 0.0;
    for (int l = 0; l < 8; l++) s += lane[l];
    return s;
}
/* row_out16 on 8 lanes (elementwise: the same bits), streamed from the first 32-byte boundary on where `stream` */
static void row_out8(const float *x, float *y, int64_t n, float m, float a, bool log_, bool stream) {
    const __m256 mv = _mm256_set1_ps(m), av = _mm256_set1_ps(a);
    int64_t j = 0;
    if (stream) {
        const int64_t head = (int64_t)((32 - ((uintptr_t)y & 31)) & 31) / 4;
        j = head < n ? head : n;
        for (int64_t i = 0; i < j; i++) y[i] = log_ ? (x[i] - m) - a : y[i] * a;
        for (; j + 8 <= n; j += 8) {
            const __m256 v = log_ ? _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv), av)
                                  : _mm256_mul_ps(_mm256_load_ps(y + j), av);
            _mm256_stream_ps(y + j, v);
        }
        _mm_sfence();
    }
    for (; j + 8 <= n; j += 8) {
        const __m256 v = log_ ? _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv), av)
                              : _mm256_mul_ps(_mm256_loadu_ps(y + j), av);
        _mm256_storeu_ps(y + j, v);
    }
    for (; j < n; j++) y[j] = log_ ? (x[j] - m) - a : y[j] * a;
}
#else
static float row_max8(const float *x, int64_t n) { return row_max(x, n); }
static float row_exp_sum8(const float *x, float *y, int64_t n, float m, const float *next) { return row_exp_sum(x, y, n, m); }
static double row_sumexp8(const float *x, int64_t n, float m, const float *next) { return row_sumexp(x, n, m); }
static void row_out8(const float *x, float *y, int64_t n, float m, float a, bool log_, bool stream) {
    for (int64_t j = 0; j < n; j++) y[j] = log_ ? (x[j] - m) - a : y[j] * a;
}
static void row_logbwd16(const float *y, const float *g, float *d, int64_t n, float s) {
    for (int64_t j = 0; j < n; j++) d[j] = g[j] - fl_nn_expf(y[j]) * s;
}
static void row_out16(const float *x, float *y, int64_t n, float m, float a, bool log_, bool stream) {
    for (int64_t j = 0; j < n; j++) y[j] = log_ ? (x[j] - m) - a : y[j] * a;
}
static float row_max16(const float *x, int64_t n) { return row_max(x, n); }
static float row_exp_sum16(const float *x, float *y, int64_t n, float m, const float *next) { return row_exp_sum(x, y, n, m); }
static double row_sumexp16(const float *x, int64_t n, float m, const float *next) { return row_sumexp(x, n, m); }
#endif

/* The row passes on the copy `wide` picks (fl_cpu_avx512(), asked once per call); next: the row after (NULL: none) */
static inline float row_max_w(const float *x, int64_t n, bool wide) {
    return wide ? row_max16(x, n) : row_max8(x, n);
}
static inline float row_exp_sum_w(const float *x, float *y, int64_t n, float m, bool wide, const float *next) {
    return wide ? row_exp_sum16(x, y, n, m, next) : row_exp_sum8(x, y, n, m, next);
}
static inline double row_sumexp_w(const float *x, int64_t n, float m, bool wide, const float *next) {
    return wide ? row_sumexp16(x, n, m, next) : row_sumexp8(x, n, m, next);
}

/* One row of softmax: y = exp(x − m) / Σ */
static inline __attribute__((always_inline)) void softmax_row(const float *xr, float *yr, int64_t cols, bool wide,
                                                              const float *next) {
    float m = row_max_w(xr, cols, wide);
    float inv = 1.0f / row_exp_sum_w(xr, yr, cols, m, wide, next);
    /* (y's lines are in the caches: streamed, 60% slower) */
    if (wide) row_out16(xr, yr, cols, m, inv, false, false);
    else row_out8(xr, yr, cols, m, inv, false, false);
}

void fl_cpu_softmax_fwd(const float *x, float *y, int64_t rows, int64_t cols) {
    const bool wide = fl_cpu_avx512();
    FL_PAR_FOR(rows > 1 && rows * cols > FL_NN_PAR_MIN, schedule(static),
    for (int64_t r = 0; r < rows; r++) softmax_row(x + r * cols, y + r * cols, cols, wide, r + 1 < rows ? x + (r + 1) * cols : NULL););
}

/* dx = y ⊙ (dy − Σ y·dy) */
void fl_cpu_softmax_bwd(const float *y, const float *dy, float *dx, int64_t rows, int64_t cols) {
    FL_PAR_FOR(rows > 1 && rows * cols > FL_NN_PAR_MIN, schedule(static),
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        float *dr = dx + r * cols;
        const float s = row_dot(yr, gr, cols);
        FL_PRAGMA(omp simd)
        for (int64_t j = 0; j < cols; j++) dr[j] = yr[j] * (gr[j] - s);
    });
}

/* Results past this many bytes are stored without being read into the caches first (log-softmax's output pass) */
#define STREAM_MIN_BYTES (8 << 20)

/* One row of log-softmax: y = (x − m) − log Σ exp(x − m) */
static inline __attribute__((always_inline)) void log_softmax_row(const float *xr, float *yr, int64_t cols, bool wide,
                                                                  const float *next, bool stream) {
    float m = row_max_w(xr, cols, wide);
    /* (x − m) − log Σ: x − m is exact near the max, so large logits keep their precision
     * (x − (m + log Σ) would round log Σ at the scale of m) */
    float ls = (float)log(row_sumexp_w(xr, cols, m, wide, next));
    if (wide) row_out16(xr, yr, cols, m, ls, true, stream);
    else row_out8(xr, yr, cols, m, ls, true, stream);
}

/* (rows shorter than 1024 stream too little of each row to pay for its fence) */
static bool log_softmax_streams(int64_t rows, int64_t cols) {
    return (double)rows * (double)cols * 4.0 > STREAM_MIN_BYTES && cols >= 1024;
}

void fl_cpu_log_softmax_fwd(const float *x, float *y, int64_t rows, int64_t cols) {
    const bool wide = fl_cpu_avx512(), stream = log_softmax_streams(rows, cols);
    FL_PAR_FOR(rows > 1 && rows * cols > FL_NN_PAR_MIN, schedule(static),
    for (int64_t r = 0; r < rows; r++)
        log_softmax_row(x + r * cols, y + r * cols, cols, wide, r + 1 < rows ? x + (r + 1) * cols : NULL, stream););
}

/* The bf16 input's rows widened (exactly) into a buffer of each thread's, then the fp32 rows' passes on it: the bits
 * of the fp32 kernels on the widened tensor, without that tensor (bf16 F.softmax/F.log_softmax wrote and read back
 * an fp32 copy of x: 1.7-1.9× torch's time on Zen 3; docs/performance.md, "The ops against PyTorch on Zen 3, the rest
 * (stop 103)"). No next-row prefetch: the widening reads the row in order. */
bool fl_cpu_softmax_fwd_bf16(bool log, const uint16_t *x, float *y, int64_t rows, int64_t cols) {
    const bool wide = fl_cpu_avx512(), stream = log_softmax_streams(rows, cols);
    bool ok = true;
    FL_PARALLEL(rows > 1 && rows * cols > FL_NN_PAR_MIN,,
    {
        float *buf = malloc((size_t)(cols > 0 ? cols : 1) * sizeof(float));
        if (!buf) {
            FL_PRAGMA(omp atomic write)
            ok = false;
        }
        FL_PRAGMA(omp for schedule(static))
        for (int64_t r = 0; r < rows; r++) {
            if (!buf) continue;
            fl_bf16_to_f32_n(x + r * cols, buf, (size_t)cols);
            if (log) log_softmax_row(buf, y + r * cols, cols, wide, NULL, stream);
            else softmax_row(buf, y + r * cols, cols, wide, NULL);
        }
        free(buf);
    });
    return ok;
}

/* dx = dy − exp(y)·Σ dy */
void fl_cpu_log_softmax_bwd(const float *y, const float *dy, float *dx, int64_t rows, int64_t cols) {
    const bool wide = fl_cpu_avx512();
    FL_PAR_FOR(rows > 1 && rows * cols > FL_NN_PAR_MIN, schedule(static),
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * cols, *gr = dy + r * cols;
        float *dr = dx + r * cols;
        const float s = row_dot(NULL, gr, cols);
        if (wide) { row_logbwd16(yr, gr, dr, cols, s); continue; }
        FL_PRAGMA(omp simd)
        for (int64_t j = 0; j < cols; j++) dr[j] = gr[j] - fl_nn_expf(yr[j]) * s;
    });
}

/* ---- along a dim with a stride ---------------------------------------------------------------------------- */

/* Softmax over the middle dim of [outer, size, inner]: each column (o, c) gets the bits the row kernels above give
 * it as a row, without the transposed copies around them (x [4096, 1024] along dim 1, forward + backward: four
 * whole-tensor copies). A tile of w columns (a multiple of 16, its size·w inputs about COL_TILE_BYTES so that they
 * stay in L2 between the passes) is walked row by row, each pass vectorised across the columns: the max
 * (x > m ? x : m, the rows' test; a max is the same in any order but for a zero's sign, which no result reads:
 * row_max16's comment), e = exp(x − m) (fl_nn_expf's operations, which expf16 repeats), its sum in the rows' lane
 * order (element i into lane i mod 8 for the column's whole eights, the rest into lane 0 in turn, then
 * 0 + lane 0 + ... + lane 7; lanes in double for log-softmax), then y = e·(1/s) or (x − m) − (float)log s. The
 * backward's sums (row_dot's) the same way. The first pass asks for the tile's rows COL_AHEAD ahead: a row of the
 * tile starts a page of its own once inner·4 reaches 4 KB, where the hardware's prefetchers stop. Tiles whose rows
 * are 16 floats apart or more are first copied into a buffer (cols_fwd_packed below, since stop 100). */
#define COL_MAX 256
#define COL_MIN 64
#define COL_TILE_BYTES (1 << 20)
#define COL_AHEAD 8

static int64_t col_width(int64_t size) {
    int64_t w = COL_TILE_BYTES / 4 / (size > 0 ? size : 1) / 16 * 16;
    return w < COL_MIN ? COL_MIN : w > COL_MAX ? COL_MAX : w;
}

static inline __attribute__((always_inline)) void col_ahead(const float *p, int64_t w) {
    for (int64_t c = 0; c < w; c += 16) __builtin_prefetch(p + c);
}

/* log-softmax's lanes: dlane[l][c] = Σ (double)e^(x − m) over column c's rows i with l = i mod 8 for its whole
 * eights, the rest in lane 0 (rows sst apart in src); then a[c] = (float)log of the lanes' sum, 0 + lane 0 + ... +
 * lane 7: the rows' order (the comment above) */
static inline __attribute__((always_inline)) void cols_dexp(const float *src, int64_t sst, int64_t size, int64_t w,
                                                            const float *m, double (*dlane)[COL_MAX]) {
    const int64_t n8 = size & ~(int64_t)7;
    for (int l = 0; l < 8; l++) for (int64_t c = 0; c < w; c++) dlane[l][c] = 0.0;
    for (int64_t i = 0; i < size; i++) {
        const float *xr = src + i * sst;
        double *ln = dlane[i < n8 ? (i & 7) : 0];
        #pragma omp simd
        for (int64_t c = 0; c < w; c++) ln[c] += (double)fl_nn_expf(xr[c] - m[c]);
    }
}

static inline __attribute__((always_inline)) void cols_log(double (*dlane)[COL_MAX], int64_t w, float *a) {
    for (int64_t c = 0; c < w; c++) {
        double s = 0.0;
        for (int l = 0; l < 8; l++) s += dlane[l][c];
        a[c] = (float)log(s);
    }
}

static inline __attribute__((always_inline)) void cols_fwd(bool log_, const float *x, float *y, int64_t size,
                                                           int64_t st, int64_t w) {
    float m[COL_MAX], a[COL_MAX], lane[8][COL_MAX];
    double dlane[8][COL_MAX];
    const int64_t n8 = size & ~(int64_t)7;
    for (int64_t c = 0; c < w; c++) m[c] = -INFINITY;
    for (int64_t i = 0; i < size; i++) {
        const float *xr = x + i * st;
        if (i + COL_AHEAD < size) col_ahead(xr + COL_AHEAD * st, w);
        #pragma omp simd
        for (int64_t c = 0; c < w; c++) m[c] = xr[c] > m[c] ? xr[c] : m[c];
    }
    if (log_) {
        cols_dexp(x, st, size, w, m, dlane);
        cols_log(dlane, w, a);
        for (int64_t i = 0; i < size; i++) {
            const float *xr = x + i * st;
            float *yr = y + i * st;
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) yr[c] = (xr[c] - m[c]) - a[c];
        }
        return;
    }
    for (int l = 0; l < 8; l++) for (int64_t c = 0; c < w; c++) lane[l][c] = 0.0f;
    for (int64_t i = 0; i < size; i++) {
        const float *xr = x + i * st;
        float *ln = lane[i < n8 ? (i & 7) : 0];
        #pragma omp simd
        for (int64_t c = 0; c < w; c++) ln[c] += fl_nn_expf(xr[c] - m[c]);
    }
    for (int64_t c = 0; c < w; c++) {
        float s = 0.0f;
        for (int l = 0; l < 8; l++) s += lane[l][c];
        a[c] = 1.0f / s;
    }
    for (int64_t i = 0; i < size; i++) {   /* e again (the same bits) rather than kept: the tile's x alone in L2 */
        const float *xr = x + i * st;
        float *yr = y + i * st;
        #pragma omp simd
        for (int64_t c = 0; c < w; c++) yr[c] = fl_nn_expf(xr[c] - m[c]) * a[c];
    }
}

/* dx = y ⊙ (dy − Σ y·dy) (softmax) or dy − exp(y)·Σ dy (log-softmax) down each column, the sums row_dot's */
static inline __attribute__((always_inline)) void cols_bwd(bool log_, const float *y, const float *g, float *dx,
                                                           int64_t size, int64_t st, int64_t w) {
    float s[COL_MAX], lane[8][COL_MAX];
    const int64_t n8 = size & ~(int64_t)7;
    for (int l = 0; l < 8; l++) for (int64_t c = 0; c < w; c++) lane[l][c] = 0.0f;
    for (int64_t i = 0; i < size; i++) {
        const float *yr = y + i * st, *gr = g + i * st;
        float *ln = lane[i < n8 ? (i & 7) : 0];
        if (i + COL_AHEAD < size) { col_ahead(gr + COL_AHEAD * st, w); if (!log_) col_ahead(yr + COL_AHEAD * st, w); }
        if (log_) {
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) ln[c] += gr[c];
        } else {
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) ln[c] += yr[c] * gr[c];
        }
    }
    for (int64_t c = 0; c < w; c++) {
        float t = 0.0f;
        for (int l = 0; l < 8; l++) t += lane[l][c];
        s[c] = t;
    }
    for (int64_t i = 0; i < size; i++) {
        const float *yr = y + i * st, *gr = g + i * st;
        float *dr = dx + i * st;
        if (log_) {
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) dr[c] = gr[c] - fl_nn_expf(yr[c]) * s[c];
        } else {
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) dr[c] = yr[c] * (gr[c] - s[c]);
        }
    }
}

#ifdef __x86_64__
/* cols_fwd_packed's exponential pass on 16 columns at a time in expf16 (fl_nn_expf's operations: its bits, which the
 * rows' AVX-512 kernels rest on too), the lanes as the loop below adds them: e into lane[l] (softmax, and into buf),
 * or (double)e into dlane[l] (log-softmax), l = i mod 8 for the column's whole eights, else 0 */
FL_CPU_AVX512 static void cols_exp16(bool log_, float *buf, int64_t size, int64_t w, const float *m,
                                     float (*lane)[COL_MAX], double (*dlane)[COL_MAX]) {
    const int64_t n8 = size & ~(int64_t)7;
    for (int64_t i = 0; i < size; i++) {
        float *br = buf + i * w;
        const int l = i < n8 ? (int)(i & 7) : 0;
        for (int64_t c = 0; c < w; c += 16) {
            const __mmask16 mk = fl_avx512_lanes(w - c);
            const __m512 e = expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, br + c), _mm512_maskz_loadu_ps(mk, m + c)));
            if (log_) {
                const __mmask8 lo = (__mmask8)mk, hi = (__mmask8)(mk >> 8);
                double *d = dlane[l] + c;
                _mm512_mask_storeu_pd(d, lo, _mm512_add_pd(_mm512_maskz_loadu_pd(lo, d),
                                                            _mm512_cvtps_pd(_mm512_castps512_ps256(e))));
                _mm512_mask_storeu_pd(d + 8, hi, _mm512_add_pd(_mm512_maskz_loadu_pd(hi, d + 8),
                                                                _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1))));
            } else {
                _mm512_mask_storeu_ps(br + c, mk, e);
                _mm512_mask_storeu_ps(lane[l] + c, mk, _mm512_add_ps(_mm512_maskz_loadu_ps(mk, lane[l] + c), e));
            }
        }
    }
}
#endif

/* cols_fwd on a tile whose rows it first copies into buf [size][w], contiguous: the same operations on the same
 * values in the same order, so the same bits. Where a tile's rows lie a page or more apart (inner ≥ 1024 floats),
 * every row puts its w columns in the same few sets of L2 (the offset within a page picks the set: 32 sets of 2048
 * for each line of a row), so a tile of 4096 rows held an eighth of itself there: each of cols_fwd's three passes
 * read x from memory and waited on it (the log-softmax's output pass: 29% of the samples on its first load). The
 * copy is the max pass's reads; the other passes read buf from L2, and softmax keeps e there (y = e·(1/s), not a
 * second exp of x − m: the same float). stream: y's rows are whole 64-byte lines, stored past the caches (no read
 * of each line before its write; with them cached, the output pass took 40% of the samples). */
static inline __attribute__((always_inline)) void cols_fwd_packed(bool log_, const float *x, float *y, int64_t size,
                                                                  int64_t st, int64_t w, float *buf, bool stream,
                                                                  bool wide) {
    float m[COL_MAX], a[COL_MAX], lane[8][COL_MAX];
    double dlane[8][COL_MAX];
    const int64_t n8 = size & ~(int64_t)7;
    for (int64_t c = 0; c < w; c++) m[c] = -INFINITY;
    for (int64_t i = 0; i < size; i++) {
        const float *xr = x + i * st;
        float *br = buf + i * w;
        if (i + COL_AHEAD < size) col_ahead(xr + COL_AHEAD * st, w);
        #pragma omp simd
        for (int64_t c = 0; c < w; c++) { const float v = xr[c]; br[c] = v; m[c] = v > m[c] ? v : m[c]; }
    }
    if (log_) {
#ifdef __x86_64__
        if (wide) {
            for (int l = 0; l < 8; l++) for (int64_t c = 0; c < w; c++) dlane[l][c] = 0.0;
            cols_exp16(true, buf, size, w, m, lane, dlane);
        } else
#endif
        cols_dexp(buf, w, size, w, m, dlane);
        cols_log(dlane, w, a);
        for (int64_t i = 0; i < size; i++) {
            const float *br = buf + i * w;
            float *yr = y + i * st;
#ifdef __x86_64__
            if (stream) {
                for (int64_t c = 0; c < w; c += 8)
                    _mm256_stream_ps(yr + c, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(br + c), _mm256_loadu_ps(m + c)),
                                                           _mm256_loadu_ps(a + c)));
                continue;
            }
#endif
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) yr[c] = (br[c] - m[c]) - a[c];
        }
#ifdef __x86_64__
        if (stream) _mm_sfence();
#endif
        return;
    }
    for (int l = 0; l < 8; l++) for (int64_t c = 0; c < w; c++) lane[l][c] = 0.0f;
#ifdef __x86_64__
    if (wide) cols_exp16(false, buf, size, w, m, lane, dlane); else
#endif
    for (int64_t i = 0; i < size; i++) {
        float *br = buf + i * w;
        float *ln = lane[i < n8 ? (i & 7) : 0];
        #pragma omp simd
        for (int64_t c = 0; c < w; c++) { const float e = fl_nn_expf(br[c] - m[c]); br[c] = e; ln[c] += e; }
    }
    for (int64_t c = 0; c < w; c++) {
        float s = 0.0f;
        for (int l = 0; l < 8; l++) s += lane[l][c];
        a[c] = 1.0f / s;
    }
    for (int64_t i = 0; i < size; i++) {
        const float *br = buf + i * w;
        float *yr = y + i * st;
#ifdef __x86_64__
        if (stream) {
            for (int64_t c = 0; c < w; c += 8)
                _mm256_stream_ps(yr + c, _mm256_mul_ps(_mm256_loadu_ps(br + c), _mm256_loadu_ps(a + c)));
            continue;
        }
#endif
        #pragma omp simd
        for (int64_t c = 0; c < w; c++) yr[c] = br[c] * a[c];
    }
#ifdef __x86_64__
    if (stream) _mm_sfence();
#endif
}

#ifdef __x86_64__
/* cols_bwd_packed's log-softmax output pass, dx = dy − exp(y)·s, 16 columns at a time in expf16 (fl_nn_expf's bits);
 * stream as cols_fwd_packed's */
FL_CPU_AVX512 static void cols_logbwd_out16(const float *y, const float *gb, float *dx, int64_t size, int64_t st,
                                            int64_t w, const float *s, bool stream) {
    for (int64_t i = 0; i < size; i++) {
        const float *yr = y + i * st, *gbr = gb + i * w;
        float *dr = dx + i * st;
        if (i + COL_AHEAD < size) col_ahead(yr + COL_AHEAD * st, w);
        for (int64_t c = 0; c < w; c += 16) {
            const __mmask16 mk = fl_avx512_lanes(w - c);
            const __m512 e = expf16(_mm512_maskz_loadu_ps(mk, yr + c));
            const __m512 es = _mm512_mul_ps(e, _mm512_maskz_loadu_ps(mk, s + c));
            const __m512 v = _mm512_sub_ps(_mm512_maskz_loadu_ps(mk, gbr + c), es);
            if (stream) _mm512_stream_ps(dr + c, v); else _mm512_mask_storeu_ps(dr + c, mk, v);
        }
    }
    if (stream) _mm_sfence();
}
#endif

/* cols_bwd with the sums' inputs copied into buf as the sums read them (softmax: y then dy, [size][w] each;
 * log-softmax: dy), the output pass reading them from there; the same operations, the same bits */
static inline __attribute__((always_inline)) void cols_bwd_packed(bool log_, const float *y, const float *g, float *dx,
                                                                  int64_t size, int64_t st, int64_t w, float *buf,
                                                                  bool stream, bool wide) {
    float s[COL_MAX], lane[8][COL_MAX];
    float *yb = buf, *gb = log_ ? buf : buf + size * w;
    const int64_t n8 = size & ~(int64_t)7;
    for (int l = 0; l < 8; l++) for (int64_t c = 0; c < w; c++) lane[l][c] = 0.0f;
    for (int64_t i = 0; i < size; i++) {
        const float *yr = y + i * st, *gr = g + i * st;
        float *ln = lane[i < n8 ? (i & 7) : 0], *gbr = gb + i * w;
        if (i + COL_AHEAD < size) { col_ahead(gr + COL_AHEAD * st, w); if (!log_) col_ahead(yr + COL_AHEAD * st, w); }
        if (log_) {
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) { const float v = gr[c]; gbr[c] = v; ln[c] += v; }
        } else {
            float *ybr = yb + i * w;
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) {
                const float u = yr[c], v = gr[c];
                ybr[c] = u; gbr[c] = v; ln[c] += u * v;
            }
        }
    }
    for (int64_t c = 0; c < w; c++) {
        float t = 0.0f;
        for (int l = 0; l < 8; l++) t += lane[l][c];
        s[c] = t;
    }
#ifdef __x86_64__
    if (log_ && wide) { cols_logbwd_out16(y, gb, dx, size, st, w, s, stream); return; }
#endif
    for (int64_t i = 0; i < size; i++) {
        const float *gbr = gb + i * w;
        float *dr = dx + i * st;
        if (log_) {
            const float *yr = y + i * st;
            if (i + COL_AHEAD < size) col_ahead(yr + COL_AHEAD * st, w);
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) dr[c] = gbr[c] - fl_nn_expf(yr[c]) * s[c];
        } else {
            const float *ybr = yb + i * w;
#ifdef __x86_64__
            if (stream) {
                for (int64_t c = 0; c < w; c += 8) {
                    const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(gbr + c), _mm256_loadu_ps(s + c));
                    _mm256_stream_ps(dr + c, _mm256_mul_ps(_mm256_loadu_ps(ybr + c), v));
                }
                continue;
            }
#endif
            #pragma omp simd
            for (int64_t c = 0; c < w; c++) dr[c] = ybr[c] * (gbr[c] - s[c]);
        }
    }
#ifdef __x86_64__
    if (stream) _mm_sfence();
#endif
}

static void cols_fwd256(bool log_, const float *x, float *y, int64_t size, int64_t st, int64_t w, float *buf,
                        bool stream) {
    if (buf) cols_fwd_packed(log_, x, y, size, st, w, buf, stream, false); else cols_fwd(log_, x, y, size, st, w);
}
static void cols_bwd256(bool log_, const float *y, const float *g, float *dx, int64_t size, int64_t st, int64_t w,
                        float *buf, bool stream) {
    if (buf) cols_bwd_packed(log_, y, g, dx, size, st, w, buf, stream, false);
    else cols_bwd(log_, y, g, dx, size, st, w);
}
#ifdef __x86_64__
FL_CPU_AVX512 static void cols_fwd512(bool log_, const float *x, float *y, int64_t size, int64_t st, int64_t w,
                                      float *buf, bool stream) {
    if (buf) cols_fwd_packed(log_, x, y, size, st, w, buf, stream, true); else cols_fwd(log_, x, y, size, st, w);
}
FL_CPU_AVX512 static void cols_bwd512(bool log_, const float *y, const float *g, float *dx, int64_t size, int64_t st,
                                      int64_t w, float *buf, bool stream) {
    if (buf) cols_bwd_packed(log_, y, g, dx, size, st, w, buf, stream, true);
    else cols_bwd(log_, y, g, dx, size, st, w);
}
#else
#define cols_fwd512 cols_fwd256
#define cols_bwd512 cols_bwd256
#endif

/* Tiles are copied into a buffer of each thread's (cols_fwd_packed, cols_bwd_packed) where their rows lie PACK_INNER
 * floats apart or more (a whole 64-byte line a row: one thread, x [64, 4096, 64] along dim 2 27.5 → 21 ms forward,
 * [16, 1024, 256] 6.3 → 5.2, [4096, 1024] along dim 1 11.7 → 6.6, [32, 4096, 32] along dim 2 7.9 → 5.2, [512, 256,
 * 16] 4.7 → 3.5; an inner size of 8 took 2.3× the time copied, its tile's vectors half empty, one of 3 no less) and the
 * buffer is at most PACK_MAX_BYTES (a dim of up to 16384 for the softmax's backward, which copies y and dy; a longer
 * one's tile would not stay in L2 either way); the buffer's allocation failing falls back on the tile in place (the
 * same bits). */
#define PACK_INNER 16
#define PACK_MAX_BYTES (8 << 20)

/* The tiles (o, columns [c0, c0 + w)) split among threads; each column's result is its own, so no bit depends on
 * the thread count. nbuf: the arrays a packed tile copies (0: none). */
static void dim_tiles(bool bwd, bool log_, const float *x, const float *g, float *y, int64_t outer, int64_t size,
                      int64_t inner, int nbuf) {
    const bool wide = fl_cpu_avx512();
    const int64_t wp = col_width(size * (nbuf > 0 ? nbuf : 1));
    const bool pack = inner >= PACK_INNER && nbuf > 0 && (double)(nbuf * wp) * (double)size * 4.0 <= PACK_MAX_BYTES;
    const int64_t w = pack ? wp : col_width(size), per = (inner + w - 1) / w, tiles = outer * per;
    /* the result's rows whole 64-byte lines: streamed past the caches where it is larger than they are */
    const bool stream = pack && (double)outer * (double)size * (double)inner * 4.0 > STREAM_MIN_BYTES && inner % 16 == 0
                        && ((uintptr_t)y & 63) == 0;
    FL_PARALLEL(tiles > 1 && outer * size * inner > FL_NN_PAR_MIN,,
    {
        float *buf = NULL;
        bool asked = false;
        FL_PRAGMA(omp for schedule(static))
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t o = t / per, c0 = t % per * w, wc = inner - c0 < w ? inner - c0 : w;
            const int64_t at = o * size * inner + c0;
            if (pack && !asked) {   /* (a thread with no tile asks for none) */
                buf = aligned_alloc(64, ((size_t)(nbuf * size * w) * sizeof(float) + 63) / 64 * 64);
                asked = true;
            }
            if (bwd) {
                if (wide) cols_bwd512(log_, x + at, g + at, y + at, size, inner, wc, buf, stream);
                else cols_bwd256(log_, x + at, g + at, y + at, size, inner, wc, buf, stream);
            } else {
                if (wide) cols_fwd512(log_, x + at, y + at, size, inner, wc, buf, stream);
                else cols_fwd256(log_, x + at, y + at, size, inner, wc, buf, stream);
            }
        }
        free(buf);
    });
}

void fl_cpu_softmax_dim_fwd(bool log_, const float *x, float *y, int64_t outer, int64_t size, int64_t inner) {
    dim_tiles(false, log_, x, NULL, y, outer, size, inner, 1);
}

void fl_cpu_softmax_dim_bwd(bool log_, const float *y, const float *dy, float *dx, int64_t outer, int64_t size,
                            int64_t inner) {
    dim_tiles(true, log_, y, dy, dx, outer, size, inner, log_ ? 1 : 2);
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
    const bool wide = fl_cpu_avx512();
    fl_status st = FL_OK;
    for (int64_t r0 = 0; r0 < rows; r0 += CE_CHUNK) {
        int64_t r1 = r0 + CE_CHUNK < rows ? r0 + CE_CHUNK : rows;
        FL_PAR_FOR((r1 - r0) > 1 && (r1 - r0) * cols > FL_NN_PAR_MIN, schedule(static),
        for (int64_t r = r0; r < r1; r++) {
            double t = target[r];
            if (t == (double)ignore_index) { buf[r] = 0.0; continue; }
            const float *xr = logits + r * cols;
            float m = row_max_w(xr, cols, wide);
            double lse = (double)m + log(row_sumexp_w(xr, cols, m, wide, r + 1 < r1 ? xr + cols : NULL));
            double l = lse - (1.0 - eps) * (double)xr[(int64_t)t];
            if (eps != 0.0) {
                l -= eps / (double)cols * row_sum_d(xr, cols);
            }
            buf[r] = l;
        });
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
    const bool wide = fl_cpu_avx512();
    for (int64_t r0 = 0; r0 < rows; r0 += CE_CHUNK) {
        int64_t r1 = r0 + CE_CHUNK < rows ? r0 + CE_CHUNK : rows;
        FL_PAR_FOR((r1 - r0) > 1 && (r1 - r0) * cols > FL_NN_PAR_MIN, schedule(static),
        for (int64_t r = r0; r < r1; r++) {
            float *dr = dlogits + r * cols;
            double t = target[r];
            if (t == (double)ignore_index) {
                FL_PRAGMA(omp simd)
                for (int64_t j = 0; j < cols; j++) dr[j] = 0.0f;
                continue;
            }
            const float *xr = logits + r * cols;
            float m = row_max_w(xr, cols, wide);
            float inv = 1.0f / row_exp_sum_w(xr, dr, cols, m, wide, r + 1 < r1 ? xr + cols : NULL);
            FL_PRAGMA(omp simd)
            for (int64_t j = 0; j < cols; j++) dr[j] = g * (dr[j] * inv - off);
            dr[(int64_t)t] -= g * on;
        });
        FL_TRY(fl_check_interrupt());
    }
    return FL_OK;
}
