/* cpu_linear_act.c — a linear layer's GEMM, bias, ReLU and bf16 rounding in one pass over its fp32 sums (device.h's
 * linear_relu_bf16), and its GEMM and bias alone a block of rows at a time (linear_bias_bf16): what a bf16-autocast feed-forward block's first linear gives its second, which would round the
 * fp32 result to bf16 anyway. The composite wrote [M, N] fp32 sums to memory, added the bias in place, wrote the ReLU's
 * fp32 copy and a bf16 copy of that: four passes over 16-32 MB at the TransformerEncoderLayer's size. Here the GEMM runs
 * a block of rows at a time into a buffer that stays in L2 (the same oneDNN primitive per row count as the composite's
 * GEMM, whose sums do not depend on the rows' count or place), and each block's sums take the bias, the ReLU and the
 * rounding there, so only the bf16 result goes to memory. Each step is the composite's operation on the same values. */
#include "cpu_internal.h"
#include "cpu_nn_internal.h"
#include "format.h"
#include "bf16_x86.h"
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

/* Rows per block: about 2 MiB of fp32 sums, a core's L2 on the Xeon timed (a multiple of 16 rows, the GEMM's tile
 * height; at least 16). At [2048, 256] x [256, 2048] with bias and ReLU, CPU time one thread: 3.25-3.40 ms; 1 MiB
 * blocks 3.45, 512 KiB 3.6-3.9, 256 KiB 4.8 (oneDNN's cost per call and per short M), 4 MiB 3.5-3.6, one block of
 * all rows (16 MB of sums through memory) 3.7-3.8. */
static int64_t block_rows(int64_t M, int64_t N) {
    int64_t r = (int64_t)(2048 * 1024 / 4) / (N > 0 ? N : 1);
    r = r / 16 * 16;
    if (r < 16) r = 16;
    return r < M ? r : M;
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
#endif
    for (int64_t r0 = 0; r0 < M && st == FL_OK && ran; r0 += R) {
        const int64_t m = M - r0 < R ? M - r0 : R;
        st = fl_cpu_matmul_bf16_nt(x + r0 * K, w, s, m, N, K, &ran);
        if (st != FL_OK || !ran) break;
        uint16_t *yb = y + r0 * N;
        #pragma omp parallel for if (m * N > FL_NN_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < m; i++) {
#ifdef __x86_64__
            if (wide) { row_avx512(s + i * N, b, yb + i * N, N); continue; }
#endif
            row_generic(s + i * N, b, yb + i * N, N);
        }
    }
    free(s);
    *done = st == FL_OK && ran;
    return st;
}

/* y[M, N] (fp32) = x·wᵀ + b a block of rows at a time, each block's sums taking the bias while they are in L2: the bits
 * of the bf16 GEMM then bias_add (device.h's linear_bias_bf16). */
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
        #pragma omp parallel for if (m * N > FL_NN_PAR_MIN) schedule(static)
        for (int64_t i = 0; i < m; i++) {
            float *row = yb + i * N;
            #pragma omp simd
            for (int64_t j = 0; j < N; j++) row[j] += b[j];
        }
    }
    *done = st == FL_OK && ran;
    return st;
}
