/* cpu_linear_act.c — a linear layer's GEMM, bias, ReLU and bf16 rounding in one pass over its fp32 sums (device.h's
 * linear_relu_bf16), and its GEMM and bias alone (linear_bias_bf16): what a bf16-autocast feed-forward block's first
 * linear gives its second, which would round the fp32 result to bf16 anyway. The composite wrote [M, N] fp32 sums to memory, added the bias in place, wrote the ReLU's
 * fp32 copy and a bf16 copy of that: four passes over 16-32 MB at the TransformerEncoderLayer's size. Here the GEMM runs
 * into a buffer (the composite's GEMM call: the same M, N, K and layout, so the same sums), and its rows take the bias, the
 * ReLU and the rounding a row at a time while the row is in cache, so only the bf16 result is written back. Each step
 * is the composite's operation on the same values. (The loop over blocks of rows stays for a GEMM whose sums do not
 * depend on M; block_rows says why it is one block here.) */
#include "cpu_internal.h"
#include "cpu_nn_internal.h"
#include "format.h"
#include "bf16_x86.h"
#include "par.h"
#include <stdlib.h>

/* One row's epilogue, the portable form: bias_add's y + b, act_fwd's ReLU (a NaN stays NaN), in place, then the
 * cast's rounding (fl_f32_to_bf16_n). */
static void row_generic(float *row, const float *b, uint16_t *y, int64_t N) {
    if (b) {
        #pragma omp simd
        for (int64_t j = 0; j < N; j++) {
            const float v = row[j] + b[j];
            row[j] = !(v <= 0.0f) ? v : 0.0f;
        }
    } else {
        #pragma omp simd
        for (int64_t j = 0; j < N; j++) row[j] = !(row[j] <= 0.0f) ? row[j] : 0.0f;
    }
    fl_f32_to_bf16_n(row, y, (size_t)N);
}

_Atomic bool fl_cpu_linear_act_wide_allowed = true;

#ifdef __x86_64__
/* The same operations 32 lanes at a time in registers (AVX512_BF16: bf16_x86.h's rounding, fl_f32_to_bf16_n's bits).
 * Plain stores: the next GEMM reads the result at once, from the caches (streaming it past them was 5-10% slower on the
 * whole encoder layer, on a Xeon with a 480 MB L3). The tail goes the portable way. */
FL_BF16_X86_TARGET static void row_avx512(float *row, const float *b, uint16_t *y, int64_t N) {
    const __m512 zero = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= N; j += 32) {
        __m512 lo = _mm512_loadu_ps(row + j), hi = _mm512_loadu_ps(row + j + 16);
        if (b) {
            lo = _mm512_add_ps(lo, _mm512_loadu_ps(b + j));
            hi = _mm512_add_ps(hi, _mm512_loadu_ps(b + j + 16));
        }
        lo = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(lo, zero, _CMP_LE_OQ), lo, zero);   /* v <= 0: 0; NaN kept */
        hi = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(hi, zero, _CMP_LE_OQ), hi, zero);
        _mm512_storeu_si512(y + j, fl_bf16_x86_pack32(lo, hi));
    }
    if (j < N) row_generic(row + j, b ? b + j : NULL, y + j, N - j);
}
#endif

/* Rows per block: all of them, one GEMM call of the composite's M. Blocks of about 2 MiB of sums (a core's L2) were
 * 10% faster on the layer ([2048, 256] x [256, 2048] with bias and ReLU, CPU time one thread: 3.25-3.40 ms against
 * 3.7-3.8 for one block; the composite 5.4-7.8), but oneDNN's bf16 GEMM does not add in one order whatever M is: on
 * AMX, with K >= 1024, a primitive for 512 rows gave other sums for those rows than one for 520 (a stop 93 review:
 * 252,634 of 524,288 sums of [520, 2048] x [2048, 1024] differed, and an encoder's no_grad forward differed from its
 * training-mode forward), so a block boundary would move bits that the composite's single call fixes. */
/* One row: the AVX-512 kernel where `wide`, else the generic one (the same bits). */
static inline void row_any(bool wide, float *s, const float *b, uint16_t *y, int64_t N) {
#ifdef __x86_64__
    if (wide) { row_avx512(s, b, y, N); return; }
#endif
    (void)wide;
    row_generic(s, b, y, N);
}

static int64_t block_rows(int64_t M, int64_t N) {
    (void)N;
    return M;
}

fl_status fl_cpu_dev_linear_relu_bf16(const uint16_t *x, const uint16_t *w, const float *b, uint16_t *y, int64_t M,
                                      int64_t N, int64_t K, bool *done) {
    *done = false;
    if (M <= 0 || N <= 0 || K <= 0) return FL_OK;
    const int64_t R = block_rows(M, N);
    float *s = aligned_alloc(64, ((size_t)(R * N) * sizeof(float) + 63) / 64 * 64);
    if (!s) return FL_OK;   /* no buffer: the composite runs (it needs more memory than this, and reports it) */
    fl_status st = FL_OK;
    bool ran = true;
#ifdef __x86_64__
    const bool wide = fl_cpu_linear_act_wide_allowed && fl_bf16_x86_available();
#else
    const bool wide = false;
#endif
    for (int64_t r0 = 0; r0 < M && st == FL_OK && ran; r0 += R) {
        const int64_t m = M - r0 < R ? M - r0 : R;
        st = fl_cpu_matmul_bf16_nt(x + r0 * K, w, s, m, N, K, &ran);
        if (st != FL_OK || !ran) break;
        uint16_t *yb = y + r0 * N;
        FL_PAR_FOR(m * N > FL_NN_PAR_MIN, schedule(static),
        for (int64_t i = 0; i < m; i++) row_any(wide, s + i * N, b, yb + i * N, N););
    }
    free(s);
    *done = st == FL_OK && ran;
    return st;
}

/* y[M, N] (fp32) = x·wᵀ + b, the bias added into the GEMM's result in place (block_rows: one block): the bits of the
 * bf16 GEMM then bias_add (device.h's linear_bias_bf16). */
fl_status fl_cpu_dev_linear_bias_bf16(const uint16_t *x, const uint16_t *w, const float *b, float *y, int64_t M,
                                      int64_t N, int64_t K, bool *done) {
    *done = false;
    if (M <= 0 || N <= 0 || K <= 0) return FL_OK;
    const int64_t R = block_rows(M, N);
    fl_status st = FL_OK;
    bool ran = true;
    for (int64_t r0 = 0; r0 < M && st == FL_OK && ran; r0 += R) {
        const int64_t m = M - r0 < R ? M - r0 : R;
        float *yb = y + r0 * N;
        st = fl_cpu_matmul_bf16_nt(x + r0 * K, w, yb, m, N, K, &ran);
        if (st != FL_OK || !ran) break;
        FL_PAR_FOR(m * N > FL_NN_PAR_MIN, schedule(static),
        for (int64_t i = 0; i < m; i++) {
            float *row = yb + i * N;
            FL_PRAGMA(omp simd)
            for (int64_t j = 0; j < N; j++) row[j] += b[j];
        });
    }
    *done = st == FL_OK && ran;
    return st;
}
