/* cpu_nn_internal.h — helpers shared by the cpu_nn_*.c kernel files: a branch-free expf that gcc
 * auto-vectorises (glibc's expf only vectorises under -ffast-math), and the threading threshold. */
#ifndef FL_CPU_NN_INTERNAL_H
#define FL_CPU_NN_INTERNAL_H
#include <stdint.h>
#include <math.h>
#include "cpu_nn.h"

/* The kernel loops only vectorise when gcc may turn the selects of the exp/max code into blends, which
 * the default -ftrapping-math forbids: the Makefile builds everything with -fno-trapping-math (we never
 * rely on FP exception flags). (A `#pragma GCC optimize` here dropped the -march target options of the
 * whole file with gcc 12 and left every loop scalar.) */

/* Below this many elements a kernel stays on one thread (thread start-up costs more than it saves). */
#define FL_NN_PAR_MIN (1 << 16)

#ifdef __x86_64__
/* y = v·Φ(v) (the exact GELU) of n floats on AVX2 + FMA, lanes sorted by Φ's form (cpu_gelu_erf.c): the bits of
 * cpu_vmath.h's fl_vm_normal_cdf, as FL_VM_MAPS's AVX2 loop gives them. One thread. */
void fl_cpu_gelu_erf_fwd_avx2(const float *x, float *y, int64_t n);
#endif

/* bf16 attention (cpu_nn_attn_bf16.c): heads with AVX-512 BF16 dot products, as fl_cpu_sdpa_causal_fwd/bwd
 * specify under bf16, or where the CPU has not got them (or fl_cpu_avx512() disallows AVX-512) the AVX2 + FMA
 * family below; FL_ENOMEM when a thread's buffers cannot be had. Used when available (one of the families
 * runs here and the flag is set: tests and the benchmark clear it to run the batched GEMMs instead). The plain
 * forms take contiguous [BH, T, D] heads; the _at forms read and write heads where a layout puts them (e.g. q, k and v inside one packed [B, T, 3C] tensor), so no
 * copies are made. att is always contiguous [B·H, T, T]. */
typedef struct { int64_t sb, sh, st; } fl_attn_layout;   /* head (b, h), row t, column d at b·sb + h·sh + t·st + d */
extern _Atomic bool fl_cpu_attn_bf16_allowed;
extern _Atomic bool fl_cpu_attn_amx_allowed;   /* the per-head kernels' products on the tile unit where there is one */
bool fl_cpu_attn_bf16_available(void);
fl_status fl_cpu_attn_bf16_fwd(const float *q, const float *k, const float *v, float *out, float *att, int64_t BH,
                               int64_t T, int64_t D, float scale, int causal);
fl_status fl_cpu_attn_bf16_bwd(const float *q, const float *k, const float *v, const float *att, const float *dout,
                               float *dq, float *dk, float *dv, int64_t BH, int64_t T, int64_t D, float scale,
                               int causal);
/* in: where q, k, v are (each pointer is its part's base); out: where out (forward) or dout (backward) is;
 * din: where dq, dk, dv go. Both kernel families have these two forms. */
typedef fl_status fl_attn_fwd_at_fn(const float *q, const float *k, const float *v, fl_attn_layout in, float *out,
                                    fl_attn_layout out_l, float *att, int64_t B, int64_t H, int64_t T, int64_t D,
                                    float scale, int causal);
typedef fl_status fl_attn_bwd_at_fn(const float *q, const float *k, const float *v, fl_attn_layout in,
                                    const float *att, const float *dout, fl_attn_layout out_l, float *dq, float *dk,
                                    float *dv, fl_attn_layout din, int64_t B, int64_t H, int64_t T, int64_t D,
                                    float scale, int causal);
fl_attn_fwd_at_fn fl_cpu_attn_bf16_fwd_at;
fl_attn_bwd_at_fn fl_cpu_attn_bf16_bwd_at;
/* The same with each row's score max and 1/Σ in st ([B·H, T, 2]) in place of att ([B·H, T, T]): the backward makes
 * P again from them, the same bits as from att, so attention keeps O(T) floats a head rather than O(T²). Where
 * either bf16 family runs (fl_cpu_attn_bf16_stats_available). */
bool fl_cpu_attn_bf16_stats_available(void);
fl_attn_fwd_at_fn fl_cpu_attn_bf16_stats_fwd_at;
fl_attn_bwd_at_fn fl_cpu_attn_bf16_stats_bwd_at;
/* The same on CPUs without AVX-512 BF16 (cpu_nn_attn_fma.c: AVX2 + FMA on operands rounded to bf16 and kept in
 * fp32), which the entries above call there; usable where the CPU has AVX2 and FMA. */
bool fl_cpu_attn_fma_usable(void);
/* Its products on 16 lanes where the CPU has AVX-512 (the same bits as on 8); tests clear it to run the 8-lane ones
 * there. */
extern _Atomic bool fl_cpu_attn_fma512_allowed;
/* Each head asks for the next head's rows while it computes (prefetches only: the same bits); benchmarks clear it to
 * time the heads without (bench_attn's mode nofetch). */
extern _Atomic bool fl_cpu_attn_fetch_next;
fl_attn_fwd_at_fn fl_cpu_attn_fma_fwd_at;
fl_attn_bwd_at_fn fl_cpu_attn_fma_bwd_at;
/* And its statistics form, which the statistics entries above call there (the same bits as its form with P). */
fl_attn_fwd_at_fn fl_cpu_attn_fma_stats_fwd_at;
fl_attn_bwd_at_fn fl_cpu_attn_fma_stats_bwd_at;
/* fp32 attention through the same family with its operands as they are (no rounding; each product and its sum
 * rounded once by the FMA), which fl_cpu_sdpa_causal_fwd/bwd and the packed entries call for fp32 where it is
 * available: AVX2 and FMA (its products on 16 lanes with AVX-512), and the flag set (tests and the benchmark clear
 * it to run the batched GEMMs). */
extern _Atomic bool fl_cpu_attn_f32_allowed;
bool fl_cpu_attn_f32_available(void);
fl_attn_fwd_at_fn fl_cpu_attn_f32_fwd_at;
fl_attn_bwd_at_fn fl_cpu_attn_f32_bwd_at;

/* e^x to ~1 ulp over the whole float range: e^x = 2^k·e^r with |r| <= ln2/2 and Cephes' degree-6
 * polynomial. 2^k is built from two exponent fields (k split in halves) so subnormal results are
 * right too. Every step is arithmetic or a select, so loops calling it vectorise. NaN propagates,
 * -inf → 0, overflow → inf. */
static inline float fl_nn_expf(float x) {
    float xc = x > 88.7228394f ? 88.7228394f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    xc = xc != xc ? 0.0f : xc;   /* keep the int conversion below defined; NaN is restored at the end */
    /* round-to-nearest via the 1.5·2^23 trick: pure float adds, no libm rintf */
    float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - k * 0.693359375f;        /* ln2 split hi + lo: k·hi is exact */
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
    union { uint32_t u; float f; } s1, s2;
    s1.u = (uint32_t)(k1 + 127) << 23;   /* k1, k2 in [-75, 64]: normal exponent fields */
    s2.u = (uint32_t)(k2 + 127) << 23;
    y = y * s1.f * s2.f;
    y = x < -104.0f ? 0.0f : y;
    y = x > 88.7228394f ? INFINITY : y;
    return x != x ? x : y;
}

/* tanh(u) = sign(u)·(1 − e)/(1 + e) with e = e^(−2|u|) ≤ 1 (no overflow). Absolute error ~1e-7 (relative
 * precision is lost only near 0, where GELU adds it to 1 anyway); vectorises, unlike libm's tanhf,
 * which cost half of a GPT step's GELU time. NaN propagates. */
static inline float fl_nn_tanhf(float u) {
    float a = u < 0.0f ? -u : u;
    float e = fl_nn_expf(-2.0f * a);
    float t = (1.0f - e) / (1.0f + e);
    return u < 0.0f ? -t : t;
}
/* The attention's row passes (cpu_nn_attn.c, and the AVX2 bf16 kernel cpu_nn_attn_fma.c).
 * The row length that matters: entries after the last nonzero probability have P = 0 exactly (the
 * causal mask, or underflow), so their dS is 0 whatever dP is. n: the row's length (i + 1 for causal row i,
 * else T), from where the search for the last nonzero starts. */
static inline int64_t attn_live_len(const float *p, int64_t n) {
    while (n > 1 && p[n - 1] == 0.0f) n--;
    return n;
}

/* The causal rows have every length 1..T, so their vector loops would spend much of their time in
 * scalar remainders (an exp each). Instead they run over the length rounded up to 16 lanes (within
 * the row) and mask the extra entries, which are then stored as the exact zeros they must be. Those
 * entries may hold anything (the GEMMs do not write past the block's keys): they are only selected
 * away, never used. */
static inline int64_t attn_lanes_up(int64_t n, int64_t T) { int64_t p = (n + 15) & ~(int64_t)15; return p < T ? p : T; }

/* Row i of a head: s[j] ← softmax_j(scale·s[j]) over j < n, exact zeros for j in [n, T). */
static inline __attribute__((always_inline)) void attn_softmax_row(float *s, int64_t n, int64_t T, float scale) {
    const int64_t np = attn_lanes_up(n, T);
    float m = -INFINITY;
    #pragma omp simd reduction(max:m)
    for (int64_t j = 0; j < np; j++) { float x = j < n ? s[j] * scale : -INFINITY; m = x > m ? x : m; }
    float sum = 0.0f;
    #pragma omp simd reduction(+:sum)
    for (int64_t j = 0; j < np; j++) { float e = j < n ? fl_nn_expf(s[j] * scale - m) : 0.0f; s[j] = e; sum += e; }
    const float inv = 1.0f / sum;
    #pragma omp simd
    for (int64_t j = 0; j < np; j++) s[j] *= inv;
    for (int64_t j = np; j < T; j++) s[j] = 0.0f;
}

/* d[j] ← scale·p[j]·(d[j] − Σ_j p·d) over the live length of p (within its first len entries), zeros beyond. */
static inline __attribute__((always_inline)) void attn_dsoftmax_row(const float *p, float *d, int64_t len, int64_t T,
                                                                    float scale) {
    const int64_t n = attn_live_len(p, len), np = attn_lanes_up(n, T);
    float dot = 0.0f;
    #pragma omp simd reduction(+:dot)
    for (int64_t j = 0; j < np; j++) dot += j < n ? p[j] * d[j] : 0.0f;
    #pragma omp simd
    for (int64_t j = 0; j < np; j++) d[j] = j < n ? scale * p[j] * (d[j] - dot) : 0.0f;
    for (int64_t j = np; j < T; j++) d[j] = 0.0f;
}

#endif
