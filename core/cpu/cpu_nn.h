/* cpu_nn.h — CPU kernels of the neural-network ops, forward and backward, on contiguous fp32
 * buffers (row-major; "rows" = product of leading dims, "cols" = last dim). core/nn.c wraps them
 * into differentiable ops (validation, allocation, autograd nodes). Each kernel is checked against a
 * float64 reference in tests/c/test_nn*.c. Long loops poll fl_check_interrupt(). */
#ifndef FL_CPU_NN_H
#define FL_CPU_NN_H
#include <stdbool.h>
#include <stdint.h>
#include <math.h>
#include "error.h"
#include "format.h"

/* y = max(x, 0); dx = dy * (x > 0) */
void fl_cpu_relu_fwd(const float *x, float *y, int64_t n);
void fl_cpu_relu_bwd(const float *x, const float *dy, float *dx, int64_t n);
/* GELU exact: x·Φ(x) (erf); tanh: 0.5x(1+tanh(√(2/π)(x+0.044715x³))). approx: 0 exact, 1 tanh. */
void fl_cpu_gelu_fwd(const float *x, float *y, int64_t n, int approx);
/* The tanh form runs in spans of this many elements (a call on a multiple of it computes each element as a
 * call on the whole array does). */
#define FL_CPU_ACT_SPAN 4096
void fl_cpu_gelu_bwd(const float *x, const float *dy, float *dx, int64_t n, int approx);
void fl_cpu_gelu_tanh_fwd_serial(const float *x, float *y, int64_t n);                    /* no OpenMP region */
void fl_cpu_gelu_tanh_bwd_serial(const float *x, const float *dy, float *dx, int64_t n);   /* no OpenMP region */
/* SiLU: y = x·σ(x); dx = dy·σ(x)(1 + x(1 − σ(x))) */
void fl_cpu_silu_fwd(const float *x, float *y, int64_t n);
/* The forward of any activation kind on a bf16 x, read a span at a time (no fp32 copy of x): y (fp32) or, with y
 * NULL, y16 (bf16, rounded once by fl_f32_to_bf16_n, the cast's rounding); the bits of the fp32 kernel on x widened. */
void fl_cpu_act_fwd_bf16(int kind, const uint16_t *x, float *y, uint16_t *y16, int64_t n);   /* kind: an fl_act */
void fl_cpu_act_bwd_bf16(int kind, const uint16_t *x, const float *dy, float *dx, int64_t n);   /* GELU, SiLU */
void fl_cpu_silu_bwd(const float *x, const float *dy, float *dx, int64_t n);
/* sigmoid or tanh (cpu_vmath.h), and their backward from the output y: dx = dy·((1 − y)·y) or dy·(1 − y·y) */
void fl_cpu_sigmoid_tanh_fwd(bool tanh_, const float *x, float *y, int64_t n);
void fl_cpu_sigmoid_tanh_bwd(bool tanh_, const float *y, const float *dy, float *dx, int64_t n);
/* Bounds of what those two compute, so a pass that wants only the largest |value| can skip elements that cannot
 * reach it (current scaling's first passes, cpu_quant.c). Checked over every float (docs/performance.md, "The ninth
 * session") and over a strided sweep of all floats by test_nn_kernels.
 * - |GELU(v)| ≤ fl_cpu_gelu_tanh_bound(v): GELU(v) = v/(1+e) with e ≥ 0 for v ≥ 0, so never above v; for v < 0,
 *   |v|·e/(1+e), never above |v| nor 0.170041 (the tanh form's minimum, near v = −0.75). A NaN v gives 0.171.
 * - |GELU'(v)| ≤ fl_cpu_gelu_tanh_dbound(v): GELU' rises from −0.129 (v ≈ −1.5) to 1.129 (v ≈ 1.5) and tends to
 *   0 and 1 beyond. The bound is a step per quarter of v over [−1, 1), each step above the largest |GELU'| of every
 *   float in its quarter and in those below it (v clamped to [−1, 0.875], index ⌊4v⌋ + 4 in one rounding: a value
 *   just under a step's edge may round onto the step above, never below, and the steps do not fall). So
 *   |dy·GELU'(v)| ≤ |dy|·fl_cpu_gelu_tanh_dbound(v), both rounded (rounding is monotone). A NaN v gives 0.133
 *   (GELU'(v) and dy·GELU'(v) are NaN, which an amax ignores).
 * The 8-lane forms (x86-64) give the same bits: the clamps are vmaxps/vminps with v first (a NaN v gives the
 * second operand, as the C comparisons do), the index vcvttps2dq of a value in [0, 7.5]. */
#define FL_CPU_GELU_NEG_BOUND 0.171f
#define FL_CPU_GELU_DBOUND_MAX 1.13f   /* the largest step: |GELU'(v)| ≤ it for every v */
#define FL_CPU_GELU_DBOUNDS { 0.133f, 0.133f, 0.305f, 0.5001f, 0.696f, 0.868f, 1.0f, FL_CPU_GELU_DBOUND_MAX }
static inline float fl_cpu_gelu_tanh_bound(float v) {
    const float a = -v < FL_CPU_GELU_NEG_BOUND ? -v : FL_CPU_GELU_NEG_BOUND;
    return v >= 0.0f ? v : a;
}
static inline float fl_cpu_gelu_tanh_dbound(float v) {
    static const float steps[8] = FL_CPU_GELU_DBOUNDS;
    const float lo = v > -1.0f ? v : -1.0f, c = lo < 0.875f ? lo : 0.875f;
    return steps[(int)fmaf(c, 4.0f, 4.0f)];
}
#ifdef __x86_64__
#include <immintrin.h>
static inline __attribute__((always_inline, target("avx2,fma"))) __m256 fl_cpu_gelu_tanh_bound8(__m256 v) {
    const __m256 a = _mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), v), _mm256_set1_ps(FL_CPU_GELU_NEG_BOUND));
    return _mm256_blendv_ps(a, v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ));
}
static inline __attribute__((always_inline, target("avx2,fma"))) __m256 fl_cpu_gelu_tanh_dbound8(__m256 v) {
    const float steps[8] = FL_CPU_GELU_DBOUNDS;
    const __m256 c = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-1.0f)), _mm256_set1_ps(0.875f));
    const __m256i i = _mm256_cvttps_epi32(_mm256_fmadd_ps(c, _mm256_set1_ps(4.0f), _mm256_set1_ps(4.0f)));
    return _mm256_permutevar8x32_ps(_mm256_loadu_ps(steps), i);
}
#endif
/* Softmax / log-softmax over the last dim of [rows, cols]; backward takes the forward output y. */
void fl_cpu_softmax_fwd(const float *x, float *y, int64_t rows, int64_t cols);
void fl_cpu_softmax_bwd(const float *y, const float *dy, float *dx, int64_t rows, int64_t cols);
void fl_cpu_log_softmax_fwd(const float *x, float *y, int64_t rows, int64_t cols);
/* fl_cpu_softmax_fwd (log: fl_cpu_log_softmax_fwd) of a bf16 x, each row widened into a buffer of the thread's (the
 * same bits as on the widened tensor); false where that buffer could not be had (the device entry's FL_ENOMEM). */
bool fl_cpu_softmax_fwd_bf16(bool log, const uint16_t *x, float *y, int64_t rows, int64_t cols);
void fl_cpu_log_softmax_bwd(const float *y, const float *dy, float *dx, int64_t rows, int64_t cols);
/* F.rms_norm's forward over the last dim (device.h's rms_norm_fwd), w NULL: none */
void fl_cpu_rms_norm_fwd(const float *x, const float *w, float *y, int64_t rows, int64_t cols, double eps);
/* The same over the middle dim of [outer, size, inner], each column given the bits the above give it as a row. */
void fl_cpu_softmax_dim_fwd(bool log, const float *x, float *y, int64_t outer, int64_t size, int64_t inner);
void fl_cpu_softmax_dim_bwd(bool log, const float *y, const float *dy, float *dx, int64_t outer, int64_t size,
                            int64_t inner);
/* Cross-entropy of logits [rows, cols] with integer class targets (0-based, stored as float; a target
 * equal to ignore_index contributes nothing), label smoothing eps (PyTorch semantics: target
 * distribution (1-eps)·onehot + eps/cols), mean over non-ignored rows. Returns the loss in *loss and
 * the count of non-ignored rows in *count; FL_EINVAL if a target is out of [0, cols) and not ignored.
 * Backward: dlogits = dloss · (softmax − target_dist) / count on non-ignored rows, 0 on ignored. */
fl_status fl_cpu_cross_entropy_fwd(const float *logits, const float *target, int64_t rows, int64_t cols,
                                   int64_t ignore_index, float label_smoothing, double *loss, int64_t *count);
fl_status fl_cpu_cross_entropy_bwd(const float *logits, const float *target, int64_t rows, int64_t cols,
                                   int64_t ignore_index, float label_smoothing, float dloss, float *dlogits);
/* LayerNorm over the last dim: y = (x-mean)·rstd·w + b (w, b may be NULL); saves mean and rstd [rows].
 * Backward: dx, and dw/db accumulated (+=) when non-NULL. */
void fl_cpu_layernorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                          int64_t rows, int64_t cols, float eps);
/* fl_cpu_layernorm_fwd of x + r (the fp32 add's sums) without the sum in memory; scratch: 2·cols floats per OpenMP
 * thread (omp_get_max_threads()). */
void fl_cpu_add_layernorm_fwd(const float *x, const float *r, const float *w, const float *b, float *y, float *mean,
                              float *rstd, int64_t rows, int64_t cols, float eps, float *scratch);
/* LayerNorm's y cast per tensor to fmt as it is made, y never in memory: with *scale, or where scale is NULL with
 * current scaling (margin, pow2: y's amax in a pass of its own first); *used: the scale the cast took. */
fl_status fl_cpu_layernorm_quantize(const float *x, const float *w, const float *b, uint8_t *q, float *mean, float *rstd,
                                    int64_t rows, int64_t cols, float eps, fl_dtype fmt, const float *scale, int margin,
                                    bool pow2, fl_overflow p, fl_cast_stats *st, float *used);
fl_status fl_cpu_layernorm_bwd(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                          float *dx, float *dw, float *db, int64_t rows, int64_t cols);
/* fl_cpu_layernorm_bwd with dx added into dx's buffer (dx[i] + the value it writes, one fp32 add). */
fl_status fl_cpu_layernorm_bwd_add(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                                   float *dx, float *dw, float *db, int64_t rows, int64_t cols);
/* GroupNorm (G > 0) or BatchNorm's training statistics (G == 0) of x [N, C, P] (cpu_nn_chnorm.c; device.h's
 * chnorm_fwd/chnorm_bwd). */
fl_status fl_cpu_chnorm_fwd(const float *x, const float *w, const float *b, float *y, float *mean, float *rstd,
                            float *var, int64_t N, int64_t C, int64_t P, int64_t G, float eps);
fl_status fl_cpu_chnorm_bwd(const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
                            float *dx, float *dw, float *db, int64_t N, int64_t C, int64_t P, int64_t G);
/* BatchNorm's eval pass (device.h's chnorm_eval): y = ((x − mean[c]) / den[c])·w[c] + b[c] over x [N, C, P]. */
void fl_cpu_chnorm_eval(const float *x, const float *mean, const float *den, const float *w, const float *b, float *y,
                        int64_t N, int64_t C, int64_t P);
/* Embedding: y[i,:] = weight[idx[i],:]; idx as floats holding integers in [0, vocab). Backward adds
 * dy rows into dweight (+=). */
fl_status fl_cpu_embedding_fwd(const float *idx, int64_t n, const float *weight, int64_t vocab, int64_t dim, float *y);
void fl_cpu_embedding_bwd(const float *idx, int64_t n, const float *dy, int64_t dim, float *dweight);
/* Dropout with a counter-based mask: keep with prob 1-p, scale kept by 1/(1-p). mask (n bytes) is
 * written in forward and reused in backward. Deterministic for (seed, offset). */
void fl_cpu_dropout_fwd(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed, uint64_t offset);
void fl_cpu_dropout_bwd(const uint8_t *mask, const float *dy, float *dx, int64_t n, float p);
/* Causal scaled-dot-product attention on [B, H, T, D] contiguous q, k, v → out [B, H, T, D];
 * att (B·H·T·T floats) holds the softmax probabilities for backward. scale usually 1/√D. Backward
 * overwrites dq, dk, dv and takes the forward's `causal` and `bf16`. bf16 (bf16 autocast): every GEMM
 * operand — q, k, v and P forward; dO, v, P, dS, k, q backward — is rounded to bf16 (RNE), products
 * accumulate in fp32; the softmax and its backward stay fp32 (dS rounded after its scale). */
void fl_cpu_sdpa_causal_fwd(const float *q, const float *k, const float *v, float *out, float *att,
                            int64_t B, int64_t H, int64_t T, int64_t D, float scale, int causal, bool bf16);
void fl_cpu_sdpa_causal_bwd(const float *q, const float *k, const float *v, const float *att, const float *dout,
                            float *dq, float *dk, float *dv, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                            int causal, bool bf16);
/* The attention kernels use batched GEMMs (oneDNN) and fall back to per-row loops when a GEMM cannot
 * run; tests clear this to check the fallback. */
extern _Atomic bool fl_cpu_sdpa_gemm_allowed;
#endif
