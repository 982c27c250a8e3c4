/* cpu_nn_act.c — elementwise NN kernels: ReLU, GELU (erf and tanh forms) and counter-based dropout,
 * forward and backward. Elementwise, so threads split the index range and results are thread-independent. */
#include "cpu_nn_internal.h"
#include "cpu_internal.h"
#include "cpu_vmath.h"
#include "cpu_vtanh.h"
#include "par.h"
#include "philox.h"
#include <pthread.h>

void fl_cpu_relu_fwd(const float *x, float *y, int64_t n) {
    FL_PAR_FOR_SIMD(n > FL_NN_PAR_MIN,,
    for (int64_t i = 0; i < n; i++) y[i] = !(x[i] <= 0.0f) ? x[i] : 0.0f;);   /* a NaN stays NaN, as torch's */
}

void fl_cpu_relu_bwd(const float *x, const float *dy, float *dx, int64_t n) {
    /* x: ReLU's output (core/nn.c saves it, as torch), or its input: the test gives the same on either. The
     * subgradient at 0 is 0, as in PyTorch; a NaN passes dy, as torch's threshold_backward (out <= 0 ? 0 : dy) */
    FL_PAR_FOR_SIMD(n > FL_NN_PAR_MIN,,
    for (int64_t i = 0; i < n; i++) dx[i] = !(x[i] <= 0.0f) ? dy[i] : 0.0f;);
}

#define GELU_RSQRT2PI 0.39894228040143268f   /* 1/√(2π) */
#define GELU_K        0.79788456080286536f   /* √(2/π) */
#define GELU_C        0.044715f

/* Tanh form through one exponential: 0.5v(1 + tanh u) = v·σ(2u) with u = k(v + c·v³), and with
 * e = e^(−2|u|) ≤ 1 (never overflows) σ(2u) = 1/(1+e) for u ≥ 0, e/(1+e) for u < 0 — no cancellation in
 * 1 + tanh u for negative inputs. The derivative is σ(2u) + 2v·σ'(2u)·k(1 + 3c·v²) with
 * σ'(2u) = σ(1 − σ) = e/(1+e)²: one division per element. The span functions are compiled twice
 * (AVX2, AVX-512; see cpu_internal.h); every multiply-add is an explicit fmaf (one rounding, one
 * instruction: the build does not contract a·b + c on its own). */

/* e^a for a ≤ 0 (a NaN gives a finite value; the callers multiply it by v, which is NaN then):
 * e^a < 2^-125 is flushed to 0, so 2^k needs one normal exponent field. Relative error ~1e-7. */
static inline __attribute__((always_inline)) float gelu_exp_neg(float a) {
    float xc = a >= -87.0f ? a : -87.0f;
    const float kk = fmaf(xc, 1.44269504088896341f, 12582912.0f);   /* 1.5·2^23 + k, exactly (k in [-126, 0]) */
    float k = kk - 12582912.0f;
    float r = fmaf(k, -0.693359375f, xc);
    r = fmaf(k, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float y = fmaf(p, r * r, r) + 1.0f;
    /* 2^k from kk's bits (0x4B400000 + k), as (int32_t)k would give it, without a float-to-int conversion: 17% of
     * the exponential's time on Zen 3, the same bits (docs/performance.md, stop 59) */
    union { uint32_t u; float f; } s, q = { .f = kk };
    s.u = (q.u - 0x4B400000u + 127u) << 23;
    return a >= -87.0f ? y * s.f : 0.0f;
}

static inline __attribute__((always_inline)) void gelu_tanh_fwd_span(const float *x, float *y, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float v = x[i], u = GELU_K * fmaf(GELU_C * v, v * v, v);
        float e = gelu_exp_neg(-2.0f * fabsf(u));
        y[i] = v * (u < 0.0f ? e : 1.0f) / (1.0f + e);
    }
}
static inline __attribute__((always_inline)) void gelu_tanh_bwd_span(const float *x, const float *dy, float *dx, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float v = x[i], v2 = v * v, u = GELU_K * fmaf(GELU_C * v, v2, v);
        float e = gelu_exp_neg(-2.0f * fabsf(u));
        float r = 1.0f / (1.0f + e);
        float sig = (u < 0.0f ? e : 1.0f) * r;
        dx[i] = dy[i] * fmaf(2.0f * GELU_K * v * e * r * r, fmaf(3.0f * GELU_C, v2, 1.0f), sig);
    }
}
#ifdef __x86_64__
#include <immintrin.h>
/* The same spans in AVX-512 intrinsics, the same operations in the same order but two: gelu_exp_neg's 2^k is one
 * vscalefps of the polynomial by k (y·2^k rounded once, as the multiply by the built power rounds it), and the
 * clamp of the argument is left out because the lanes below -87 are zeroed at the end either way (vscalefps with
 * a zeroing mask; a NaN argument fails the compare as it does in gelu_exp_neg). Four fewer of the ~30 vector
 * operations each element costs, in a loop the two vector ports bound; the same bits (test_nn_kernels compares
 * them with the AVX2 build of the spans). */
typedef struct { __m512 k, c, c3, k2, m2, lo, l2e, sh, ln2hi, ln2lo, p0, p1, p2, p3, p4, p5, one, absm, zero; } gelu512;
FL_CPU_AVX512 static inline gelu512 gelu512_consts(void) {
    gelu512 g;
    g.k = _mm512_set1_ps(GELU_K); g.c = _mm512_set1_ps(GELU_C);
    g.c3 = _mm512_set1_ps(3.0f * GELU_C); g.k2 = _mm512_set1_ps(2.0f * GELU_K);
    g.m2 = _mm512_set1_ps(-2.0f); g.lo = _mm512_set1_ps(-87.0f);
    g.l2e = _mm512_set1_ps(1.44269504088896341f); g.sh = _mm512_set1_ps(12582912.0f);
    g.ln2hi = _mm512_set1_ps(-0.693359375f); g.ln2lo = _mm512_set1_ps(2.12194440e-4f);
    g.p0 = _mm512_set1_ps(1.9875691500e-4f); g.p1 = _mm512_set1_ps(1.3981999507e-3f);
    g.p2 = _mm512_set1_ps(8.3334519073e-3f); g.p3 = _mm512_set1_ps(4.1665795894e-2f);
    g.p4 = _mm512_set1_ps(1.6666665459e-1f); g.p5 = _mm512_set1_ps(5.0000001201e-1f);
    g.one = _mm512_set1_ps(1.0f); g.absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
    g.zero = _mm512_setzero_ps();
    return g;
}
/* e = gelu_exp_neg(-2|u|) of the lanes of v with u = k·(c·v·v² + v); v2 = v·v, neg: the lanes where u < 0 */
FL_CPU_AVX512 static inline __m512 gelu512_e(const gelu512 *g, __m512 v, __m512 *v2, __mmask16 *neg) {
    *v2 = _mm512_mul_ps(v, v);
    const __m512 u = _mm512_mul_ps(g->k, _mm512_fmadd_ps(_mm512_mul_ps(g->c, v), *v2, v));
    *neg = _mm512_cmp_ps_mask(u, g->zero, _CMP_LT_OQ);
    const __m512 a = _mm512_mul_ps(g->m2, _mm512_and_ps(u, g->absm));
    const __mmask16 in = _mm512_cmp_ps_mask(a, g->lo, _CMP_GE_OQ);
    const __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(a, g->l2e, g->sh), g->sh);
    __m512 r = _mm512_fmadd_ps(k, g->ln2hi, a);
    r = _mm512_fmadd_ps(k, g->ln2lo, r);
    __m512 p = _mm512_fmadd_ps(g->p0, r, g->p1);
    p = _mm512_fmadd_ps(p, r, g->p2);
    p = _mm512_fmadd_ps(p, r, g->p3);
    p = _mm512_fmadd_ps(p, r, g->p4);
    p = _mm512_fmadd_ps(p, r, g->p5);
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), g->one);
    return _mm512_maskz_scalef_ps(in, y, k);
}
FL_CPU_AVX512 static void gelu_tanh_fwd_span512(const float *x, float *y, int64_t n) {
    const gelu512 g = gelu512_consts();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = fl_avx512_lanes(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 v2;
        __mmask16 neg;
        const __m512 e = gelu512_e(&g, v, &v2, &neg);
        const __m512 num = _mm512_mask_mul_ps(v, neg, v, e);   /* v·(u < 0 ? e : 1) */
        _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(num, _mm512_add_ps(g.one, e)));
    }
}
FL_CPU_AVX512 static void gelu_tanh_bwd_span512(const float *x, const float *dy, float *dx, int64_t n) {
    const gelu512 g = gelu512_consts();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = fl_avx512_lanes(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 v2;
        __mmask16 neg;
        const __m512 e = gelu512_e(&g, v, &v2, &neg);
        const __m512 r = _mm512_div_ps(g.one, _mm512_add_ps(g.one, e));
        const __m512 sig = _mm512_mask_mul_ps(r, neg, e, r);   /* (u < 0 ? e : 1)·r */
        /* 2k·v·e·r·r, left to right as the C expression multiplies */
        const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(g.k2, v), e), r), r);
        const __m512 d = _mm512_fmadd_ps(t, _mm512_fmadd_ps(g.c3, v2, g.one), sig);
        _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), d));
    }
}
#else
static void gelu_tanh_fwd_span512(const float *x, float *y, int64_t n) { gelu_tanh_fwd_span(x, y, n); }
static void gelu_tanh_bwd_span512(const float *x, const float *dy, float *dx, int64_t n) { gelu_tanh_bwd_span(x, dy, dx, n); }
#endif

_Atomic bool fl_cpu_avx512_allowed = true;

/* Elements per task of the span-based loops. */
#define ACT_SPAN FL_CPU_ACT_SPAN
/* body once per span [i0, i0 + len) of the caller's n elements, spans split among threads (each element's result is
 * its own, so the split changes no bit) */
#define ACT_SPANS(body)                                                                     \
    do {                                                                                    \
        const int64_t spans_ = (n + ACT_SPAN - 1) / ACT_SPAN;                               \
        FL_PAR_FOR(n > FL_NN_PAR_MIN / 8, schedule(static),                                 \
        for (int64_t c_ = 0; c_ < spans_; c_++) {                                           \
            const int64_t i0 = c_ * ACT_SPAN, len = n - i0 < ACT_SPAN ? n - i0 : ACT_SPAN;  \
            body;                                                                           \
        });                                                                                 \
    } while (0)

/* The exact form: v·Φ(v), and Φ(v) + v·φ(v) for the derivative (cpu_vmath.h's Φ, which keeps the left tail's
 * relative precision that 0.5v(1 + erf(v/√2)) lost; vectorised where glibc's erff is a call per element). Threads
 * carry large tensors; the threshold is lower than for cheap ops because each element costs tens of cycles. */
static inline __attribute__((always_inline)) float gelu_erf1(float v) {
    float g;
    return v * fl_vm_normal_cdf(v, &g);
}
static inline __attribute__((always_inline)) float gelu_erf1_d(float v) {
    float g;
    const float cdf = fl_vm_normal_cdf(v, &g);
    return fmaf(v, GELU_RSQRT2PI * g, cdf);
}
FL_VM_MAPS(gelu_erf1)
FL_VM_MAPS(gelu_erf1_d)
FL_VM_MAPS(fl_vm_silu)
FL_VM_MAPS(fl_vm_silu_grad)

/* The forward's map: without AVX-512, the kernel that runs only the form of Φ each lane takes (cpu_gelu_erf.c, the
 * same bits; ~0.7× the time of map256's both forms on Zen 3) */
static inline void gelu_erf1_map(const float *x, float *y, int64_t n, bool wide) {
#ifdef __x86_64__
    if (!wide) {
        fl_cpu_gelu_erf_fwd_avx2(x, y, n);
        return;
    }
#endif
    map_gelu_erf1(x, y, n, wide);
}

void fl_cpu_gelu_fwd(const float *x, float *y, int64_t n, int approx) {
    const bool wide = fl_cpu_avx512();
    if (approx) {
        ACT_SPANS(if (wide) gelu_tanh_fwd_span512(x + i0, y + i0, len); else gelu_tanh_fwd_span(x + i0, y + i0, len));
    } else {
        ACT_SPANS(gelu_erf1_map(x + i0, y + i0, len, wide));
    }
}

/* fl_cpu_gelu_fwd's and fl_cpu_gelu_bwd's tanh forms on this thread alone, for callers already inside a parallel
 * region (a nested region costs its set-up even when it runs on one thread). */
void fl_cpu_gelu_tanh_fwd_serial(const float *x, float *y, int64_t n) {
    const bool wide = fl_cpu_avx512();
    for (int64_t i0 = 0; i0 < n; i0 += ACT_SPAN) {
        const int64_t len = n - i0 < ACT_SPAN ? n - i0 : ACT_SPAN;
        if (wide) gelu_tanh_fwd_span512(x + i0, y + i0, len);
        else gelu_tanh_fwd_span(x + i0, y + i0, len);
    }
}

void fl_cpu_gelu_tanh_bwd_serial(const float *x, const float *dy, float *dx, int64_t n) {
    const bool wide = fl_cpu_avx512();
    for (int64_t i0 = 0; i0 < n; i0 += ACT_SPAN) {
        const int64_t len = n - i0 < ACT_SPAN ? n - i0 : ACT_SPAN;
        if (wide) gelu_tanh_bwd_span512(x + i0, dy + i0, dx + i0, len);
        else gelu_tanh_bwd_span(x + i0, dy + i0, dx + i0, len);
    }
}

/* Exact derivative: d/dx xΦ(x) = Φ(x) + x·φ(x); the tanh form's is above. */
void fl_cpu_gelu_bwd(const float *x, const float *dy, float *dx, int64_t n, int approx) {
    const bool wide = fl_cpu_avx512();
    if (approx) {
        ACT_SPANS(if (wide) gelu_tanh_bwd_span512(x + i0, dy + i0, dx + i0, len);
                  else gelu_tanh_bwd_span(x + i0, dy + i0, dx + i0, len));
    } else {
        ACT_SPANS(grad_gelu_erf1_d(x + i0, dy + i0, dx + i0, len, wide));
    }
}

/* SiLU x·σ(x) and its derivative (cpu_vmath.h), the same way */
void fl_cpu_silu_fwd(const float *x, float *y, int64_t n) {
    const bool wide = fl_cpu_avx512();
    ACT_SPANS(map_fl_vm_silu(x + i0, y + i0, len, wide));
}

void fl_cpu_silu_bwd(const float *x, const float *dy, float *dx, int64_t n) {
    const bool wide = fl_cpu_avx512();
    ACT_SPANS(grad_fl_vm_silu_grad(x + i0, dy + i0, dx + i0, len, wide));
}

FL_VM_MAPS(fl_vm_sigmoid)

/* One span of a bf16 input: widened (exactly) into a buffer in L1, the fp32 kernel's span on it, the result written
 * as fp32 or rounded once to bf16: the fp32 kernel's bits on the widened tensor, without its fp32 copy in memory. */
#define ACT_LOW_SPAN 1024
/* ReLU of bf16 bits, in bf16: what widening, !(v <= 0) ? v : 0 and rounding back give, without the fp32 values (the
 * widening is exact, and so is the rounding of a value it made; a NaN comes back quiet, fl_f32_to_bf16's bit 0x0040
 * set): a NaN quieted, any other value with the sign bit (−0 included) 0, the rest as it is. Plain integer lanes, which
 * the build's AVX2 (x86-64-v3) vectorises 16 to a register; it took three passes through two L1 buffers (stop 102). */
static void relu_bf16_bits(const uint16_t *x, uint16_t *y, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const uint16_t v = x[i];
        const uint16_t nan = (uint16_t)(-(uint16_t)((v & 0x7FFF) > 0x7F80));   /* all ones for a NaN */
        const uint16_t neg = (uint16_t)(-(uint16_t)(v >> 15));                 /* all ones with the sign bit */
        y[i] = (uint16_t)((v & (uint16_t)(~neg | nan)) | (nan & 0x0040));
    }
}
static void act_bf16_span(int kind, const uint16_t *x, float *y, uint16_t *y16, int64_t n, bool wide) {
    if (kind == FL_ACT_RELU && !y) { relu_bf16_bits(x, y16, n); return; }
    float xb[ACT_LOW_SPAN] __attribute__((aligned(64))), yb[ACT_LOW_SPAN] __attribute__((aligned(64)));
    for (int64_t k0 = 0; k0 < n; k0 += ACT_LOW_SPAN) {
        const int64_t m = n - k0 < ACT_LOW_SPAN ? n - k0 : ACT_LOW_SPAN;
        float *yo = y ? y + k0 : yb;
        fl_bf16_to_f32_n(x + k0, xb, (size_t)m);
        switch (kind) {
        case FL_ACT_RELU:
            for (int64_t i = 0; i < m; i++) yo[i] = !(xb[i] <= 0.0f) ? xb[i] : 0.0f;   /* fl_cpu_relu_fwd's */
            break;
        case FL_ACT_GELU: gelu_erf1_map(xb, yo, m, wide); break;
        case FL_ACT_GELU_TANH:
            if (wide) gelu_tanh_fwd_span512(xb, yo, m); else gelu_tanh_fwd_span(xb, yo, m);
            break;
        case FL_ACT_SILU: map_fl_vm_silu(xb, yo, m, wide); break;
        case FL_ACT_SIGMOID: map_fl_vm_sigmoid(xb, yo, m, wide); break;
        default: fl_vtanh_map(xb, yo, m, wide); break;
        }
        if (!y) fl_f32_to_bf16_n(yb, y16 + k0, (size_t)m);
    }
}

/* The exact GELU of a bf16 x by table: a bf16 input has 65536 values, so its fp32 result is one of 65536 floats, which
 * map_gelu_erf1 computes once (on the 65536 patterns widened, as the spans above widen them) into gelu_lut; a span then
 * reads each result there, the same bits. Computing Φ per element (~80 AVX-512 instructions per 16 values, a division
 * among them) made F.gelu of a bf16 x 2.5× torch's, which keeps bf16 and writes half the bytes; the table (256 KB)
 * stays in L2. The tanh form and the other kinds are as fast as torch's computed, and keep their spans. */
#define GELU_STREAM_MIN_BYTES (8 << 20)   /* an fp32 result past this is stored past the caches */
static float gelu_lut[1 << 16] __attribute__((aligned(64)));
/* the derivative Φ(v) + v·φ(v) of each pattern (gelu_erf1_d, which fl_cpu_gelu_bwd multiplies dy by), for the backward
 * (stop 97): filled by the same code at the same time */
static float gelu_d_lut[1 << 16] __attribute__((aligned(64)));
static pthread_once_t gelu_lut_once = PTHREAD_ONCE_INIT;
static void gelu_lut_fill(void) {
    for (int64_t k0 = 0; k0 < (1 << 16); k0 += ACT_LOW_SPAN) {
        uint16_t b[ACT_LOW_SPAN];
        float xb[ACT_LOW_SPAN] __attribute__((aligned(64)));
        for (int i = 0; i < ACT_LOW_SPAN; i++) b[i] = (uint16_t)(k0 + i);
        fl_bf16_to_f32_n(b, xb, ACT_LOW_SPAN);
        map_gelu_erf1(xb, gelu_lut + k0, ACT_LOW_SPAN, fl_cpu_avx512());
        map_gelu_erf1_d(xb, gelu_d_lut + k0, ACT_LOW_SPAN, fl_cpu_avx512());
    }
}
#ifdef __x86_64__
/* y[i] = gelu_lut[x[i]] sixteen at a time (vpgatherdd); stream: y's lines go to memory without being read first (the
 * result is larger than the caches), from its first 64-byte boundary on */
FL_CPU_AVX512 static void gelu_lut_gather16(const uint16_t *x, float *y, int64_t n, bool stream) {
    int64_t i = 0;
    if (stream) {
        const int64_t head = (int64_t)((64 - ((uintptr_t)y & 63)) & 63) / 4;
        for (; i < head && i < n; i++) y[i] = gelu_lut[x[i]];
    }
    for (; i + 16 <= n; i += 16) {
        const __m512i k = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i)));
        const __m512 v = _mm512_i32gather_ps(k, gelu_lut, 4);
        if (stream) _mm512_stream_ps(y + i, v);
        else _mm512_storeu_ps(y + i, v);
    }
    for (; i < n; i++) y[i] = gelu_lut[x[i]];
    if (stream) _mm_sfence();
}
#endif
static void gelu_bf16_lookup(const uint16_t *x, float *y, uint16_t *y16, int64_t n, bool wide, bool stream) {
    float yb[ACT_LOW_SPAN] __attribute__((aligned(64)));
#ifdef __x86_64__
    if (y && wide) { gelu_lut_gather16(x, y, n, stream); return; }
#endif
    for (int64_t k0 = 0; k0 < n; k0 += ACT_LOW_SPAN) {
        const int64_t m = n - k0 < ACT_LOW_SPAN ? n - k0 : ACT_LOW_SPAN;
        float *yo = y ? y + k0 : yb;
        for (int64_t i = 0; i < m; i++) yo[i] = gelu_lut[x[k0 + i]];
        if (!y) fl_f32_to_bf16_n(yb, y16 + k0, (size_t)m);
    }
}

void fl_cpu_act_fwd_bf16(int kind, const uint16_t *x, float *y, uint16_t *y16, int64_t n) {
    const bool wide = fl_cpu_avx512();
    if (kind == FL_ACT_GELU) {
        pthread_once(&gelu_lut_once, gelu_lut_fill);
        const bool stream = y && (double)n * 4.0 > GELU_STREAM_MIN_BYTES;
        ACT_SPANS(gelu_bf16_lookup(x + i0, y ? y + i0 : NULL, y ? NULL : y16 + i0, len, wide, stream));
        return;
    }
    ACT_SPANS(act_bf16_span(kind, x + i0, y ? y + i0 : NULL, y ? NULL : y16 + i0, len, wide));
}
/* The backward of GELU or SiLU on a bf16 x (the node keeps x in bf16). The exact GELU's: dx = dy·gelu_d_lut[x], the
 * product fl_cpu_gelu_bwd forms (dy times gelu_erf1_d of the widened value), sixteen at a time with vpgatherdd on
 * AVX-512: the same bits, where each call widened x into an fp32 tensor and computed Φ and φ per element (~2.3× the
 * forward's lookup). The tanh form and SiLU widen a span into L1 and run their fp32 spans on it (the fp32 copy of x
 * is not made; the same bits). */
#ifdef __x86_64__
FL_CPU_AVX512 static void gelu_d_gather16(const uint16_t *x, const float *dy, float *dx, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i k = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i)));
        const __m512 d = _mm512_i32gather_ps(k, gelu_d_lut, 4);
        _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dy + i), d));
    }
    for (; i < n; i++) dx[i] = dy[i] * gelu_d_lut[x[i]];
}
#endif
static void act_bwd_bf16_span(int kind, const uint16_t *x, const float *dy, float *dx, int64_t n, bool wide) {
    if (kind == FL_ACT_GELU) {
#ifdef __x86_64__
        if (wide) { gelu_d_gather16(x, dy, dx, n); return; }
#endif
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * gelu_d_lut[x[i]];
        return;
    }
    float xb[ACT_LOW_SPAN] __attribute__((aligned(64)));
    for (int64_t k0 = 0; k0 < n; k0 += ACT_LOW_SPAN) {
        const int64_t m = n - k0 < ACT_LOW_SPAN ? n - k0 : ACT_LOW_SPAN;
        fl_bf16_to_f32_n(x + k0, xb, (size_t)m);
        if (kind == FL_ACT_SILU) grad_fl_vm_silu_grad(xb, dy + k0, dx + k0, m, wide);
        else if (wide) gelu_tanh_bwd_span512(xb, dy + k0, dx + k0, m);
        else gelu_tanh_bwd_span(xb, dy + k0, dx + k0, m);
    }
}
void fl_cpu_act_bwd_bf16(int kind, const uint16_t *x, const float *dy, float *dx, int64_t n) {
    const bool wide = fl_cpu_avx512();
    if (kind == FL_ACT_GELU) pthread_once(&gelu_lut_once, gelu_lut_fill);
    ACT_SPANS(act_bwd_bf16_span(kind, x + i0, dy + i0, dx + i0, len, wide));
}

void fl_cpu_sigmoid_tanh_fwd(bool tanh_, const float *x, float *y, int64_t n) {
    const bool wide = fl_cpu_avx512();
    ACT_SPANS(if (tanh_) fl_vtanh_map(x + i0, y + i0, len, wide);
              else map_fl_vm_sigmoid(x + i0, y + i0, len, wide));
}

/* The unary ops' backward in one pass, each operation rounded as their three tensor ops round it */
void fl_cpu_sigmoid_tanh_bwd(bool tanh_, const float *y, const float *dy, float *dx, int64_t n) {
    if (tanh_) {
        FL_PAR_FOR_SIMD(n > FL_NN_PAR_MIN,,
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]););
    } else {
        FL_PAR_FOR_SIMD(n > FL_NN_PAR_MIN,,
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * ((1.0f - y[i]) * y[i]););
    }
}

/* Philox4x32-10 (core/philox.h) for PHILOX_LANES consecutive counters at once, written lane-wise so
 * the 32×32→64 multiplies vectorise (fl_philox4x32 does one block per call: 4x slower here). The
 * dropout test checks every word against fl_philox4x32. */
#define PHILOX_LANES 8
static void philox_lanes(uint64_t key, uint64_t counter, uint32_t out[4][PHILOX_LANES]) {
    uint32_t c0[PHILOX_LANES], c1[PHILOX_LANES], c2[PHILOX_LANES], c3[PHILOX_LANES];
    for (int l = 0; l < PHILOX_LANES; l++) {
        uint64_t c = counter + (uint64_t)l;
        c0[l] = (uint32_t)c; c1[l] = (uint32_t)(c >> 32); c2[l] = 0; c3[l] = 0;
    }
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int r = 0; r < 10; r++) {
        #pragma omp simd
        for (int l = 0; l < PHILOX_LANES; l++) {
            uint32_t a0 = c0[l], a1 = c1[l], a2 = c2[l], a3 = c3[l];
            fl_philox_round(&a0, &a1, &a2, &a3, k0, k1);
            c0[l] = a0; c1[l] = a1; c2[l] = a2; c3[l] = a3;
        }
        k0 += FL_PHILOX_W0;
        k1 += FL_PHILOX_W1;
    }
    for (int l = 0; l < PHILOX_LANES; l++) { out[0][l] = c0[l]; out[1][l] = c1[l]; out[2][l] = c2[l]; out[3][l] = c3[l]; }
}

/* Element i draws word i%4 of Philox block (offset + i/4) under key `seed`, so the mask depends only
 * on (seed, offset, i) — not on threads — and a caller advances `offset` by ceil(n/4) per call.
 * Keep iff the word's top 24 bits, read as u in [0,1), are >= p: P(keep) = 1 − p up to 2^-24. */
void fl_cpu_dropout_fwd(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed, uint64_t offset) {
    if (!(p > 0.0f)) {   /* p = 0 (or NaN, rejected by the caller): identity, full mask */
        FL_PAR_FOR_SIMD(n > FL_NN_PAR_MIN,,
        for (int64_t i = 0; i < n; i++) { y[i] = x[i]; mask[i] = 1; });
        return;
    }
    /* A dropped element is x·0, as torch's x·mask/(1−p): 0 with x's sign, NaN for a NaN or an infinity (a literal 0 hid
     * a diverged activation from a NaN check) */
    if (p >= 1.0f) {     /* everything dropped; 1/(1-p) would be inf, PyTorch returns x·0 */
        FL_PAR_FOR_SIMD(n > FL_NN_PAR_MIN,,
        for (int64_t i = 0; i < n; i++) { y[i] = x[i] * 0.0f; mask[i] = 0; });
        return;
    }
    const uint32_t thr = (uint32_t)((double)p * 16777216.0);
    const float scale = 1.0f / (1.0f - p);
    const int64_t blocks = (n + 3) / 4, groups = (blocks + PHILOX_LANES - 1) / PHILOX_LANES;
    FL_PAR_FOR(n > FL_NN_PAR_MIN / 4, schedule(static),
    for (int64_t gi = 0; gi < groups; gi++) {
        uint32_t w[4][PHILOX_LANES];
        philox_lanes(seed, offset + (uint64_t)(gi * PHILOX_LANES), w);
        for (int l = 0; l < PHILOX_LANES; l++) {
            int64_t i0 = (gi * PHILOX_LANES + l) * 4;
            for (int64_t j = 0; j < 4 && i0 + j < n; j++) {
                uint8_t keep = (w[j][l] >> 8) >= thr;
                mask[i0 + j] = keep;
                y[i0 + j] = x[i0 + j] * (keep ? scale : 0.0f);
            }
        }
    });
}

void fl_cpu_dropout_bwd(const uint8_t *mask, const float *dy, float *dx, int64_t n, float p) {
    const float scale = p > 0.0f && p < 1.0f ? 1.0f / (1.0f - p) : (p >= 1.0f ? 0.0f : 1.0f);
    FL_PAR_FOR_SIMD(n > FL_NN_PAR_MIN,,
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (mask[i] ? scale : 0.0f););   /* dy·0 where dropped: torch's */
}
