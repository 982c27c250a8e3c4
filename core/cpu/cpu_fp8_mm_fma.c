/* cpu_fp8_mm_fma.c — the CPU FP8 GEMM's AVX2 + FMA kernel family (cpu_fp8_mm.h), for CPUs without AVX512_BF16
 * (the build's x86-64-v3 baseline: Zen 2/3, Intel before Cooper Lake): the FP8 bytes are decoded to fp32 while the
 * panels are packed (as fp16 bit patterns, converted by F16C), and each product, exact in fp32 (two FP8
 * significands of at most 4 bits, exponents well inside fp32's range), is added to its fp32 sum by one FMA, so a
 * sum is rounded once per product, in K order. The scales and the bias are applied as C is stored (mm_epi).
 * It also runs bf16 and fp16 operands (job.wide), whose products are exact in fp32 as well (significands of 8 and
 * 11 bits; fp16's smallest product, 2⁻⁴⁸, is a normal fp32), and fp32 ones, each product then rounded with its
 * sum by the FMA. */
#include "cpu_fp8_mm.h"
#include <stdatomic.h>
#include <string.h>

#ifdef __x86_64__
#include "cpu_avx2.h"
#include <cpuid.h>
#include "fp8_x86.h"

/* Blocking. Micro-tile MR × NR of C in 2·MR ymm accumulators (each 8 columns), the two B vectors and one A
 * broadcast: 15 of the 16 registers. K in blocks of at most KC, B in blocks of at most NB_MAX columns, each cut
 * into equal parts by the driver (balance); B's block (fp32: at most 256 KiB, half of Zen 3's L2) stays in L2
 * while A is decoded AG rows at a time and run over it. On a shared Zen 3 no other KC (128-384), NB_MAX (128-512)
 * or AG (12-48) measured faster (docs/performance.md, "CPUs without AVX-512 (Zen 3)"); FL_MM_FMA_KC, FL_MM_FMA_NB
 * and FL_MM_FMA_AG override them for experiments.
 * Packed layouts (fp32):
 *   B block: NR-column panels, panel j = [kc][NR], columns past N zero.
 *   A group, a K-contiguous: AG rows of kc8 = kc rounded up to 8 (row-major), rows past M zero;
 *            a M-contiguous (a transposed view): one panel [kc][AG]. */
#ifndef FL_MM_FMA_KC
#define FL_MM_FMA_KC 256
#endif
#ifndef FL_MM_FMA_NB
#define FL_MM_FMA_NB 256
#endif
#ifndef FL_MM_FMA_AG
#define FL_MM_FMA_AG 24
#endif
enum { MR = 6, NR = 16, AG = FL_MM_FMA_AG, KC = FL_MM_FMA_KC, NB_MAX = FL_MM_FMA_NB };

/* The operand formats a packer is compiled for (each packer once per format, so that no format test is in its
 * loops): FP8 (one byte an element), bf16 and fp16 (two), fp32 (four). */
enum { F_E4M3, F_E5M2, F_BF16, F_F16, F_F32 };
#define ESZ(f) ((f) == F_F32 ? 4 : (f) >= F_BF16 ? 2 : 1)

/* FP8 codes to fp32 without a table (fp8_x86.h's fl_fp8_x86_fp16: by way of their fp16 bit patterns, converted by
 * F16C), where an AVX2 gather through a 256-entry table took ~3 cycles per code on Zen 3. bf16 is the upper half of
 * its fp32; fp16 converts by F16C; fp32 is loaded. */
static inline __m256 widen(__m128i h, int f) {
    if (f == F_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    const __m256 v = _mm256_cvtph_ps(h);
    return f == F_E4M3 ? _mm256_mul_ps(v, _mm256_set1_ps(256.0f)) : v;
}

/* n elements at p (≤ 0: none, ≥ 16: 16) in 16-bit lanes: FP8 codes, or the bf16/fp16 bits; missing lanes 0. */
static inline __m256i load16(const uint8_t *p, int64_t n, int f) {
    const int64_t es = ESZ(f);
    if (n >= 16) return es == 1 ? _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p))
                                : _mm256_loadu_si256((const __m256i *)p);
    uint8_t t[32] = { 0 };
    if (n > 0) memcpy(t, p, (size_t)(n * es));
    return es == 1 ? _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)t)) : _mm256_loadu_si256((const __m256i *)t);
}


/* n elements at p (as load16) → 16 fp32 in *lo, *hi; missing lanes +0. */
static inline void dec16(__m256 *lo, __m256 *hi, const uint8_t *p, int64_t n, int f) {
    if (f == F_F32) {
        *lo = fl_avx2_load_n((const float *)p, n);
        *hi = fl_avx2_load_n((const float *)(p + 32), n - 8);
        return;
    }
    __m256i h = load16(p, n, f);
    if (f <= F_E5M2) h = fl_fp8_x86_fp16(h, f == F_E5M2);
    *lo = widen(_mm256_castsi256_si128(h), f);
    *hi = widen(_mm256_extracti128_si256(h, 1), f);
}

/* n elements at p (≤ 0: none, ≥ 8: 8) → 8 fp32; missing lanes +0. */
static inline __m256 dec8(const uint8_t *p, int64_t n, int f) {
    if (f == F_F32) return fl_avx2_load_n((const float *)p, n);
    const int64_t es = ESZ(f);
    __m128i v;
    if (n >= 8) v = es == 1 ? _mm_loadl_epi64((const __m128i *)p) : _mm_loadu_si128((const __m128i *)p);
    else {
        uint8_t t[16] = { 0 };
        if (n > 0) memcpy(t, p, (size_t)(n * es));
        v = _mm_loadu_si128((const __m128i *)t);
    }
    if (f <= F_E5M2)
        v = _mm256_castsi256_si128(fl_fp8_x86_fp16(_mm256_castsi128_si256(_mm_cvtepu8_epi16(v)), f == F_E5M2));
    return widen(v, f);
}

/* kc elements at s decoded into d[0, kc8) (zeros past kc). */
static inline void dec_row(float *d, const uint8_t *s, int64_t kc, int f) {
    int64_t i = 0;
    for (; i + 8 < kc; i += 16) {
        __m256 lo, hi;
        dec16(&lo, &hi, s + i * ESZ(f), kc - i, f);
        _mm256_store_ps(d + i, lo);
        _mm256_store_ps(d + i + 8, hi);
    }
    if (i < kc) _mm256_store_ps(d + i, dec8(s + i * ESZ(f), kc - i, f));
}

/* B block (kc × nb) of a N-contiguous b (b[k·ldb + n]) into NR-column panels. */
static inline __attribute__((always_inline)) void pack_b_n(float *bp, const uint8_t *b, int64_t ldb, int64_t kc,
                                                            int64_t nb, int f) {
    for (int64_t j = 0; j * NR < nb; j++) {
        float *d = bp + j * kc * NR;
        const int64_t nv = nb - j * NR;
        for (int64_t k = 0; k < kc; k++) {
            const uint8_t *r = b + (k * ldb + j * NR) * ESZ(f);
            __m256 lo, hi;
            dec16(&lo, &hi, r, nv, f);
            _mm256_store_ps(d + k * NR, lo);
            _mm256_store_ps(d + k * NR + 8, hi);
        }
    }
}

/* B block of a K-contiguous b (b[n·ldb + k], a transposed view): each column's elements decoded into tmp (NR rows
 * of kc8), then 8 × 8 blocks transposed into the panel. */
static inline __attribute__((always_inline)) void pack_b_k(float *bp, float *tmp, const uint8_t *b, int64_t ldb,
                                                            int64_t kc, int64_t nb, int f) {
    const int64_t kc8 = (kc + 7) & ~(int64_t)7;
    for (int64_t j = 0; j * NR < nb; j++) {
        for (int64_t c = 0; c < NR; c++) {
            float *row = tmp + c * kc8;
            if (j * NR + c < nb) dec_row(row, b + (j * NR + c) * ldb * ESZ(f), kc, f);
            else memset(row, 0, (size_t)kc8 * sizeof(float));
        }
        float *d = bp + j * kc * NR;
        for (int64_t k0 = 0; k0 < kc; k0 += 8)
            for (int64_t c0 = 0; c0 < NR; c0 += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; i++) r[i] = _mm256_load_ps(tmp + (c0 + i) * kc8 + k0);
                fl_avx2_transpose8(r);   /* r[i]: k = k0 + i */
                for (int i = 0; i < 8 && k0 + i < kc; i++) _mm256_store_ps(d + (k0 + i) * NR + c0, r[i]);
            }
    }
}

/* A group (AG rows × kc) of a K-contiguous a (a[m·lda + k]): decoded rows of kc8; rows ag..AG zero. */
static inline __attribute__((always_inline)) void pack_a_k(float *ap, const uint8_t *a, int64_t lda, int64_t kc,
                                                            int64_t ag, int f) {
    const int64_t kc8 = (kc + 7) & ~(int64_t)7;
    for (int64_t m = 0; m < ag; m++) dec_row(ap + m * kc8, a + m * lda * ESZ(f), kc, f);
    if (ag < AG) memset(ap + ag * kc8, 0, (size_t)((AG - ag) * kc8) * sizeof(float));
}

/* A group of a M-contiguous a (a[k·lda + m]): the AG elements of each k decoded into one row of [kc][AG];
 * columns past ag zero. */
static inline __attribute__((always_inline)) void pack_a_m(float *ap, const uint8_t *a, int64_t lda, int64_t kc,
                                                            int64_t ag, int f) {
    for (int64_t k = 0; k < kc; k++) {
        if (k + 8 < kc) {
            const char *q = (const char *)(a + ((k + 8) * lda) * ESZ(f));
            for (int i = 0; i < AG * ESZ(f); i += 64) _mm_prefetch(q + i, _MM_HINT_T0);
        }
        int i = 0;
        for (; i + 16 <= AG; i += 16) {   /* 16 at a time: one FP8 decode for both halves */
            __m256 lo, hi;
            dec16(&lo, &hi, a + (k * lda + i) * ESZ(f), ag - i, f);
            _mm256_storeu_ps(ap + k * AG + i, lo);
            _mm256_storeu_ps(ap + k * AG + i + 8, hi);
        }
        for (; i < AG; i += 8) {
            const __m256 v = dec8(a + (k * lda + i) * ESZ(f), ag - i, f);
            if (AG - i >= 8) _mm256_storeu_ps(ap + k * AG + i, v);
            else _mm256_maskstore_ps(ap + k * AG + i, fl_avx2_lanes(AG - i), v);
        }
    }
}

/* One MR × NR micro-tile over kc: A (i, k) at ap[i·ars + k·aks], B panel bp. C rows past mr and columns past nv
 * are not touched. load_c: continue the sums already in C (a later K block); last: store C as E says, else the
 * raw sum. */
static inline __attribute__((always_inline)) void kern(const float *ap, int64_t ars, int64_t aks, const float *bp,
                                                       int64_t kc, float *c, int64_t ldc, int64_t mr, int64_t nv,
                                                       bool load_c, bool last, const mm_epi *E) {
    const bool full = nv >= NR;
    const __m256i k0 = fl_avx2_lanes(nv), k1 = fl_avx2_lanes(nv - 8);
    __m256 acc[MR][2];
    #pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        if (load_c && i < mr) {
            acc[i][0] = full ? _mm256_loadu_ps(c + i * ldc) : _mm256_maskload_ps(c + i * ldc, k0);
            acc[i][1] = full ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_maskload_ps(c + i * ldc + 8, k1);
        } else {
            acc[i][0] = _mm256_setzero_ps();
            acc[i][1] = _mm256_setzero_ps();
        }
    }
    #pragma GCC unroll 4   /* the loop's own instructions shared by four k (docs/performance.md: 5% at one thread) */
    for (int64_t k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(bp + k * NR), b1 = _mm256_load_ps(bp + k * NR + 8);
        #pragma GCC unroll 6
        for (int i = 0; i < MR; i++) {
            const __m256 av = _mm256_broadcast_ss(ap + i * ars + k * aks);
            acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
        }
    }
    const float *bias = E->bias;
    const bool vec = E->rs || E->cs;
    const __m256 bv0 = bias ? _mm256_maskload_ps(bias, k0) : _mm256_setzero_ps();
    const __m256 bv1 = bias ? _mm256_maskload_ps(bias + 8, k1) : _mm256_setzero_ps();
    const __m256 sc = _mm256_set1_ps(E->scale);
    const bool ld = last && E->cs;   /* the column scales are read only by the last K block */
    const __m256 cs0 = ld ? _mm256_maskload_ps(E->cs, k0) : _mm256_set1_ps(E->sb0);
    const __m256 cs1 = ld ? _mm256_maskload_ps(E->cs + 8, k1) : _mm256_set1_ps(E->sb0);
    #pragma GCC unroll 6
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
        __m256 v0 = acc[i][0], v1 = acc[i][1];
        if (last) {   /* sum·(sa·sb), then + bias (mm_epi) */
            __m256 s0 = sc, s1 = sc;
            if (vec) {
                const __m256 ra = _mm256_set1_ps(E->rs ? E->rs[i] : E->sa0);
                s0 = _mm256_mul_ps(ra, cs0);
                s1 = _mm256_mul_ps(ra, cs1);
            }
            v0 = _mm256_mul_ps(v0, s0);
            v1 = _mm256_mul_ps(v1, s1);
            if (bias) { v0 = _mm256_add_ps(v0, bv0); v1 = _mm256_add_ps(v1, bv1); }
            if (E->res) {   /* then + the addend */
                const float *r = E->res + i * E->ldr;
                v0 = _mm256_add_ps(v0, full ? _mm256_loadu_ps(r) : _mm256_maskload_ps(r, k0));
                v1 = _mm256_add_ps(v1, full ? _mm256_loadu_ps(r + 8) : _mm256_maskload_ps(r + 8, k1));
            }
        }
        if (full) {
            _mm256_storeu_ps(c + i * ldc, v0);
            _mm256_storeu_ps(c + i * ldc + 8, v1);
        } else {
            _mm256_maskstore_ps(c + i * ldc, k0, v0);
            _mm256_maskstore_ps(c + i * ldc + 8, k1, v1);
        }
    }
}

__attribute__((noinline)) static void kern_rows(const float *ap, int64_t ars, const float *bp, int64_t kc, float *c,
                                                int64_t ldc, int64_t mr, int64_t nv, bool load_c, bool last,
                                                const mm_epi *E) {
    kern(ap, ars, 1, bp, kc, c, ldc, mr, nv, load_c, last, E);
}

__attribute__((noinline)) static void kern_panel(const float *ap, const float *bp, int64_t kc, float *c, int64_t ldc,
                                                 int64_t mr, int64_t nv, bool load_c, bool last, const mm_epi *E) {
    kern(ap, 1, AG, bp, kc, c, ldc, mr, nv, load_c, last, E);
}


/* The AVX-512 family (fl_mm_fma512) runs the same packed panels with the same arithmetic: one FMA per product in K
 * order, then the same epilogue operations, so it gives the AVX2 family's bits, at twice the lanes. Micro-tile
 * MR5 × NP5·NR: NP5 adjacent panels (bp[0..NP5)) in MR5·NP5 zmm accumulators, each A element broadcast from memory
 * into NP5 FMAs (NP5 B loads and MR5 broadcasts per MR5·NP5 FMAs). Past the last panel bp[p] is the first panel
 * again and its columns are not stored. */
#ifndef FL_MM_FMA512_MR
#define FL_MM_FMA512_MR 6
#endif
#ifndef FL_MM_FMA512_NP
#define FL_MM_FMA512_NP 4
#endif
/* K blocks of KC5: a B block of 512 KiB (fp32, 256 columns), half of Skylake-SP's L2. The GPT's twelve GEMMs alone
 * (operands evicted, the two builds alternating) 32.0-33.5 ms against 33.0-34.0 with the AVX2 family's 256; in the
 * step no difference showed (the GEMMs' profiled time within 2%). The micro-tile 6 × 64: with every loop over the
 * panels unrolled (below; without that pragma GCC 12 kept a 6 × 64 tile's sums in memory, 98.7-111.1 ms), its 24
 * FMAs take 4 B loads and 6 broadcasts against 12 × 32's 2 and 12, and 64 divides the GPT's widths (48 would not):
 * the twelve GEMMs on one thread 49.5-51.3 ms against 52.4-56.1 for 12 × 32, 8 × 48 55.0-56.4 (docs/performance.md,
 * "Intel without the tiles" and the seventh session's section). */
enum { MR5 = FL_MM_FMA512_MR, NP5 = FL_MM_FMA512_NP, KC5 = 512 };
_Static_assert(AG % MR5 == 0, "the AVX-512 micro-tiles cut an A group into whole steps");
_Static_assert(MR5 * NP5 + NP5 <= 32, "the accumulators and B vectors fit the 32 registers");
static inline __attribute__((always_inline)) FL_CPU_AVX512 void kern512(const float *ap, int64_t ars, int64_t aks,
                                                                      const float *const *bp, int64_t kc, float *c,
                                                                      int64_t ldc, int64_t mr, int64_t nv, bool load_c,
                                                                      bool last, const mm_epi *E) {
    __mmask16 km[NP5];
    #pragma GCC unroll 8
    for (int p = 0; p < NP5; p++) km[p] = fl_avx512_lanes(nv - p * NR);
    __m512 acc[MR5][NP5];
    #pragma GCC unroll 16
    for (int i = 0; i < MR5; i++)
        #pragma GCC unroll 8
        for (int p = 0; p < NP5; p++)
            acc[i][p] = load_c && i < mr ? _mm512_maskz_loadu_ps(km[p], c + i * ldc + p * NR) : _mm512_setzero_ps();
    const float *bq[NP5];
    #pragma GCC unroll 8
    for (int p = 0; p < NP5; p++) bq[p] = bp[p];
    #pragma GCC unroll 4   /* as kern's loop */
    for (int64_t k = 0; k < kc; k++) {
        __m512 bv[NP5];
        #pragma GCC unroll 8
        for (int p = 0; p < NP5; p++) bv[p] = _mm512_load_ps(bq[p] + k * NR);
        #pragma GCC unroll 16
        for (int i = 0; i < MR5; i++) {
            const __m512 av = _mm512_set1_ps(ap[i * ars + k * aks]);
            #pragma GCC unroll 8
            for (int p = 0; p < NP5; p++) acc[i][p] = _mm512_fmadd_ps(av, bv[p], acc[i][p]);
        }
    }
    const float *bias = E->bias;
    const bool vec = E->rs || E->cs;
    const bool ld = last && E->cs;   /* the column scales are read only by the last K block */
    __m512 bvv[NP5], csv[NP5];
    #pragma GCC unroll 8
    for (int p = 0; p < NP5; p++) {
        bvv[p] = bias ? _mm512_maskz_loadu_ps(km[p], bias + p * NR) : _mm512_setzero_ps();
        csv[p] = ld ? _mm512_maskz_loadu_ps(km[p], E->cs + p * NR) : _mm512_set1_ps(E->sb0);
    }
    const __m512 sc = _mm512_set1_ps(E->scale);
    #pragma GCC unroll 16
    for (int i = 0; i < MR5; i++) {
        if (i >= mr) break;
        const __m512 ra = _mm512_set1_ps(vec && E->rs ? E->rs[i] : E->sa0);
        #pragma GCC unroll 8
        for (int p = 0; p < NP5; p++) {
            __m512 v = acc[i][p];
            if (last) {   /* sum·(sa·sb), then + bias, then + the addend: kern's operations */
                v = _mm512_mul_ps(v, vec ? _mm512_mul_ps(ra, csv[p]) : sc);
                if (bias) v = _mm512_add_ps(v, bvv[p]);
                if (E->res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km[p], E->res + i * E->ldr + p * NR));
            }
            _mm512_mask_storeu_ps(c + i * ldc + p * NR, km[p], v);
        }
    }
}

__attribute__((noinline)) FL_CPU_AVX512 static void kern512_rows(const float *ap, int64_t ars, const float *const *bp,
                                                                 int64_t kc, float *c, int64_t ldc, int64_t mr,
                                                                 int64_t nv, bool load_c, bool last, const mm_epi *E) {
    kern512(ap, ars, 1, bp, kc, c, ldc, mr, nv, load_c, last, E);
}

__attribute__((noinline)) FL_CPU_AVX512 static void kern512_panel(const float *ap, const float *const *bp, int64_t kc,
                                                                  float *c, int64_t ldc, int64_t mr, int64_t nv,
                                                                  bool load_c, bool last, const mm_epi *E) {
    kern512(ap, 1, AG, bp, kc, c, ldc, mr, nv, load_c, last, E);
}

/* The format of operand a (b: !is_a) of J. */
static int fmt_of(const mm_job *J, bool is_a) {
    if (J->wide != FL_DTYPE_COUNT) return J->wide == FL_BF16 ? F_BF16 : J->wide == FL_F16 ? F_F16 : F_F32;
    return (is_a ? J->e5_a : J->e5_b) ? F_E5M2 : F_E4M3;
}

/* Each packer compiled once per format (f a constant in each case). */
#define PER_FORMAT(f, call) \
    switch (f) { case F_E4M3: { enum { f_ = F_E4M3 }; call; } break; case F_E5M2: { enum { f_ = F_E5M2 }; call; } break; \
                 case F_BF16: { enum { f_ = F_BF16 }; call; } break; case F_F16: { enum { f_ = F_F16 }; call; } break; \
                 default: { enum { f_ = F_F32 }; call; } break; }

static void pack_b_block(const mm_job *J, int64_t n0, int64_t nb, int64_t k0, int64_t kc, void *bpk, void *tmp) {
    const int f = fmt_of(J, false);
    const uint8_t *bk = J->b + (n0 * J->ldb + k0) * ESZ(f), *bn = J->b + (k0 * J->ldb + n0) * ESZ(f);
    if (J->b_kcontig) PER_FORMAT(f, pack_b_k(bpk, tmp, bk, J->ldb, kc, nb, f_))
    else PER_FORMAT(f, pack_b_n(bpk, bn, J->ldb, kc, nb, f_))
}

/* The group: A packed, then its micro-tiles over each panel (wide: the AVX-512 kernels, two panels a tile). */
static inline __attribute__((always_inline)) void group_impl(const mm_job *J, int64_t m, int64_t ag, int64_t n0,
                                                             int64_t nb, int64_t k0, int64_t kc, const void *bpkv,
                                                             void *apkv, bool wide) {
    const float *bpk = bpkv;
    float *apk = apkv;
    const int64_t kc8 = (kc + 7) & ~(int64_t)7, ldc = J->N;
    const bool first = k0 == 0, last = k0 + J->kc >= J->K;
    const int f = fmt_of(J, true);
    const uint8_t *am = J->a + (k0 * J->lda + m) * ESZ(f), *ak = J->a + (m * J->lda + k0) * ESZ(f);
    if (J->a_mcontig) PER_FORMAT(f, pack_a_m(apk, am, J->lda, kc, ag, f_))
    else PER_FORMAT(f, pack_a_k(apk, ak, J->lda, kc, ag, f_))
    /* A K-contiguous a's next group (rows m + AG ..) of this K block, asked for a share of its lines at a time
     * while this group's panels run, when K spans several blocks: each row's kc elements then lie apart from the
     * next row's, where the hardware's prefetchers stop, and in a step they come from memory (with one block
     * the group is one run of bytes; an M-contiguous a is prefetched as it is packed). */
    const bool pf = !J->a_mcontig && J->K > J->kc;
    const int64_t es = ESZ(f), mn = m + AG, rn = !pf || mn >= J->M ? 0 : J->M - mn < AG ? J->M - mn : AG;
    const int64_t step = wide ? NP5 * NR : NR, mr_step = wide ? MR5 : MR;
    const int64_t lpr = (kc * es + 63) / 64 + 1, nlines = lpr * rn, npanel = (nb + step - 1) / step;
    const int64_t per = (nlines + npanel - 1) / npanel;
    const uint8_t *an = J->a + (mn * J->lda + k0) * es;
    int64_t line = 0;
    for (int64_t nj = 0; nj < nb; nj += step) {
        const int64_t nv = nb - nj < step ? nb - nj : step;
        for (int64_t e = line + per < nlines ? line + per : nlines; line < e; line++)
            _mm_prefetch((const char *)(an + (line / lpr) * J->lda * es + (line % lpr) * 64), _MM_HINT_T0);
        const float *bp = bpk + (nj / NR) * kc * NR, *bps[NP5];
        if (wide)   /* the tile's panels; past the last, the first again (kern512) */
            for (int p = 0; p < NP5; p++) bps[p] = nv > p * NR ? bp + p * kc * NR : bp;
        mm_epi E = { J->scale, J->sa0, J->sb0, NULL, J->cs ? J->cs + n0 + nj : NULL, J->bias ? J->bias + n0 + nj : NULL,
                     NULL, ldc };
        for (int64_t mi = 0; mi < ag; mi += mr_step) {
            const int64_t mr = ag - mi < mr_step ? ag - mi : mr_step;
            float *c = J->c + (m + mi) * ldc + n0 + nj;
            E.rs = J->rs ? J->rs + m + mi : NULL;
            E.res = J->res ? J->res + (m + mi) * ldc + n0 + nj : NULL;
            if (wide && J->a_mcontig) kern512_panel(apk + mi, bps, kc, c, ldc, mr, nv, !first, last, &E);
            else if (wide) kern512_rows(apk + mi * kc8, kc8, bps, kc, c, ldc, mr, nv, !first, last, &E);
            else if (J->a_mcontig) kern_panel(apk + mi, bp, kc, c, ldc, mr, nv, !first, last, &E);
            else kern_rows(apk + mi * kc8, kc8, bp, kc, c, ldc, mr, nv, !first, last, &E);
        }
    }
}

static void run_group(const mm_job *J, int64_t m, int64_t ag, int64_t n0, int64_t nb, int64_t k0, int64_t kc,
                      const void *bpkv, void *apkv) {
    group_impl(J, m, ag, n0, nb, k0, kc, bpkv, apkv, false);
}

static void run_group512(const mm_job *J, int64_t m, int64_t ag, int64_t n0, int64_t nb, int64_t k0, int64_t kc,
                         const void *bpkv, void *apkv) {
    group_impl(J, m, ag, n0, nb, k0, kc, bpkv, apkv, true);
}

/* F16C by cpuid (leaf 1, ECX): clang 14's __builtin_cpu_supports has no "f16c" (scripts/analyze.sh builds this
 * file with it). Asked once: every GEMM asks usable() several times (mm_pick), and in a virtual machine cpuid
 * traps to the hypervisor (11.8 µs a call on the Zen 3 VM of docs/performance.md, ~1 ms of a GPT step). */
static bool has_f16c(void) {
    static _Atomic int known = -1;   /* -1: not asked yet; racing first calls ask alike */
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (v < 0) {
        unsigned a, b, c, d;
        v = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v != 0;
}

static bool usable(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
}

static void sizes(int64_t kc, int64_t nb, size_t *b, size_t *a, size_t *tmp) {
    const int64_t kc8 = (kc + 7) & ~(int64_t)7;
    *b = (size_t)(kc * NR * ((nb + NR - 1) / NR)) * sizeof(float);
    *a = (size_t)(kc8 * AG) * sizeof(float);
    *tmp = (size_t)(NR * kc8) * sizeof(float);
}

const mm_kernel fl_mm_fma = { "avx2_fma", NR, AG, KC, NB_MAX, true, 0, usable, sizes, pack_b_block, run_group };
_Atomic bool fl_cpu_fma512_allowed = true;
static bool usable512(void) { return fl_cpu_fma512_allowed && usable() && fl_cpu_avx512(); }
const mm_kernel fl_mm_fma512 = { "avx512_fma", NR, AG, KC5, NB_MAX, true, 0, usable512, sizes, pack_b_block,
                                 run_group512 };
#endif
