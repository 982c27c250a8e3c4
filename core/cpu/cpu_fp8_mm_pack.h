/* cpu_fp8_mm_pack.h — the packers the bf16-pair kernel families of the CPU FP8 GEMM share (cpu_fp8_mm_bf16.c:
 * AVX512_BF16, cpu_fp8_mm_amx.c: AMX): FP8 bytes decoded to bf16 by table lookup (fl_fp8_dec32, or dec64 in the AMX
 * family) and laid out as bf16 pairs (u32: (k even, k odd)), the unit vdpbf16ps and AMX's tdpbf16ps multiply.
 *   B block: FL_MM_NR-column panels, panel j = [kcpo][FL_MM_NR] u32 (the VNNI layout; AMX reads it as two
 *            16-column tiles), columns past N and pairs past kc zero.
 * kcpo ≥ ceil(kc/2) is the pair count a family's panels hold: ceil(kc/2) for AVX512_BF16, that rounded up to a
 * tile's 16 for AMX (an odd kc gets a zero pair partner in both operands). Included by those two files only; every
 * function is inlined into its caller's target. */
#ifndef FL_CPU_FP8_MM_PACK_H
#define FL_CPU_FP8_MM_PACK_H
#include "cpu_fp8_mm.h"
#ifdef __x86_64__
#include <string.h>
#include <immintrin.h>

#define FL_MM_NR 32
#ifdef FL_MM_PACK_VBMI
#define FL_MM_PACK static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512dq,avx512bw,avx512vbmi")))
#else
#define FL_MM_PACK static inline __attribute__((always_inline, target("avx512f,avx512vl,avx512dq,avx512bw")))
#endif

/* The decode table in registers (mm_lut, mm_lut_load): fl_fp8_lut4's four registers of bf16 words (vpermi2w, 32
 * codes at a time), or with FL_MM_PACK_VBMI (defined by a family whose CPUs all have AVX512_VBMI, the AMX one)
 * the words' high and low bytes as two byte tables (vpermi2b, a third of vpermi2w's cost on Intel's cores: one
 * uop against three), which decode 64 codes at once (dec64). */
#ifdef FL_MM_PACK_VBMI
typedef struct { __m512i h0, h1, l0, l1; } mm_lut;
FL_MM_PACK __m512i bytes64(__m512i a, __m512i b) {   /* the low bytes of a's and b's 32 words */
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi16_epi8(a)), _mm512_cvtepi16_epi8(b), 1);
}
FL_MM_PACK mm_lut mm_lut_load(bool e5) {
    const fl_fp8_lut4 W = fl_fp8_lut_load(fl_fp8_bf16_lut(e5));
    mm_lut L = { bytes64(_mm512_srli_epi16(W.t0, 8), _mm512_srli_epi16(W.t1, 8)),
                 bytes64(_mm512_srli_epi16(W.t2, 8), _mm512_srli_epi16(W.t3, 8)), bytes64(W.t0, W.t1),
                 bytes64(W.t2, W.t3) };
    return L;
}

/* 64 FP8 codes, reordered by vpermb with `order` first (the caller's permutation composed with DEC64_ORDER below),
 * → the bf16 words of the reordered codes 0..31 (*w0) and 32..63 (*w1). Each code's high and low byte are looked
 * up by its low 7 bits, bit 7 is the sign; unpacking the two bytes of each word works within 128-bit lanes, which
 * the reordering has arranged for. */
FL_MM_PACK void dec64(__m512i codes, __m512i order, const mm_lut *L, __m512i *w0, __m512i *w1) {
    const __m512i v = _mm512_permutexvar_epi8(order, codes);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(L->h0, v, L->h1), v, _mm512_set1_epi8(-128),
                                                 0xF8);   /* table | (v & 0x80) */
    const __m512i lo = _mm512_permutex2var_epi8(L->l0, v, L->l1);
    *w0 = _mm512_unpacklo_epi8(lo, hi);
    *w1 = _mm512_unpackhi_epi8(lo, hi);
}
/* DEC64_ORDER(t): which of the 64 codes goes to byte t so that dec64's unpacks give codes 0..31 then 32..63 in
 * order (unpacklo takes bytes 0-7 of each 16-byte lane, unpackhi bytes 8-15). */
#define DEC64_ORDER(t) ((t) % 16 < 8 ? (t) / 16 * 8 + (t) % 16 : 32 + (t) / 16 * 8 + (t) % 16 - 8)
#else
typedef fl_fp8_lut4 mm_lut;
FL_MM_PACK mm_lut mm_lut_load(bool e5) { return fl_fp8_lut_load(fl_fp8_bf16_lut(e5)); }
#endif

/* The packers that walk an operand down its rows (b N-contiguous, a M-contiguous: 32 or 16 bytes of each row,
 * rows a whole row apart) ask for the rows PF_PAIRS pairs ahead: the hardware prefetchers stop at the 4 KiB
 * pages these walks cross every few rows, and in a step the operand is in memory. With cold operands the
 * wgrads' median calls went from 1.42-1.44 to 1.26-1.36 ms (N 256 and 1024, 6 rounds of bench_fp8_gemm cold);
 * the fastest calls and the other GEMMs stayed within noise (Zen 5, 2026-11-28). */
#define PF_PAIRS 32

/* n bytes (≤ 0: none, ≥ 32: 32) zero-extended to 16-bit lanes; missing lanes read as byte 0 (bf16 +0). */
FL_MM_PACK __m512i load32(const uint8_t *p, int64_t n) {
    const __mmask32 k = n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1u);
    return _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, p));
}

/* x, y: 32 bf16 of rows k, k+1 → the pairs (x[c], y[c]) of c = 0..15 (*lo) and c = 16..31 (*hi). */
FL_MM_PACK void interleave(__m512i x, __m512i y, __m512i *lo, __m512i *hi) {
    static const uint16_t il[64] = { 0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                     8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47,
                                     16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                     24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63 };
    *lo = _mm512_permutex2var_epi16(x, _mm512_loadu_si512(il), y);
    *hi = _mm512_permutex2var_epi16(x, _mm512_loadu_si512(il + 32), y);
}

/* kc bytes at s decoded into d[0, kcpad) (zeros past kc). */
FL_MM_PACK void dec_row(uint16_t *d, const uint8_t *s, int64_t kc, int64_t kcpad, const mm_lut *L) {
#ifdef FL_MM_PACK_VBMI
    _Alignas(64) static const uint8_t ord[64] = {
#define O4(t) DEC64_ORDER(t), DEC64_ORDER(t + 1), DEC64_ORDER(t + 2), DEC64_ORDER(t + 3)
        O4(0), O4(4), O4(8), O4(12), O4(16), O4(20), O4(24), O4(28),
        O4(32), O4(36), O4(40), O4(44), O4(48), O4(52), O4(56), O4(60) };
#undef O4
    const __m512i order = _mm512_load_si512(ord);
    for (int64_t i = 0; i < kcpad; i += 64) {   /* kcpad: a multiple of 32 */
        const int64_t n = kc - i;
        const __mmask64 k = n >= 64 ? ~(__mmask64)0 : n <= 0 ? 0 : ((__mmask64)1 << n) - 1;
        __m512i w0, w1;
        dec64(_mm512_maskz_loadu_epi8(k, s + i), order, L, &w0, &w1);
        _mm512_storeu_si512(d + i, w0);
        if (i + 32 < kcpad) _mm512_storeu_si512(d + i + 32, w1);
    }
#else
    for (int64_t i = 0; i < kcpad; i += 32) {
        const int64_t r = kcpad - i;
        const __mmask32 k = r >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << r) - 1u);
        _mm512_mask_storeu_epi16(d + i, k, fl_fp8_dec32(load32(s + i, kc - i), L));
    }
#endif
}

/* The transpose of a 16 × 16 block of u32: row i of the block at t + i·lds (16 u32 each) → d[j·ldd + i] for the
 * first nj rows j of the result. */
FL_MM_PACK void tr16x16_u32(const uint32_t *t, int64_t lds, uint32_t *d, int64_t ldd, int64_t nj) {
    __m512i r[16], s[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(t + i * lds);
    for (int i = 0; i < 16; i += 2) {
        s[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        s[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(s[i], s[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(s[i], s[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(s[i + 1], s[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(s[i + 1], s[i + 3]);
    }
    /* r[4g + q], 128-bit lane l: element 4l + q of rows 4g..4g+3. Two rounds of 128-bit lane shuffles gather
     * element j's four lanes (rows 0-3, 4-7, 8-11, 12-15) into r[j]. */
    for (int i = 0; i < 4; i++) {
        s[i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0x88);        /* lanes 0, 2 of r[i], r[4+i] */
        s[4 + i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0xdd);    /* lanes 1, 3 */
        s[8 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0x88);
        s[12 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(s[i], s[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_i32x4(s[i], s[8 + i], 0xdd);
        r[4 + i] = _mm512_shuffle_i32x4(s[4 + i], s[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_i32x4(s[4 + i], s[12 + i], 0xdd);
    }
    for (int i = 0; i < 16 && i < nj; i++) _mm512_storeu_si512(d + i * ldd, r[i]);
}

/* Rows 2kp and 2kp + 1 of an operand walked down its rows (r: row 2kp; ld: elements a row; n elements of each
 * row, ≤ 32; kc rows in all, a missing row 2kp + 1 reads as zeros) decoded and interleaved into pairs (*lo: the
 * first 16 elements' pairs, *hi: the next 16), asking for the rows PF_PAIRS pairs ahead. */
FL_MM_PACK void pair_rows(const uint8_t *r, int64_t ld, int64_t n, int64_t kp, int64_t kc, const mm_lut *L,
                          __m512i *lo, __m512i *hi) {
    if (2 * (kp + PF_PAIRS) + 1 < kc) {
        __builtin_prefetch(r + 2 * PF_PAIRS * ld, 0, 3);
        __builtin_prefetch(r + (2 * PF_PAIRS + 1) * ld, 0, 3);
    }
#ifdef FL_MM_PACK_VBMI
    /* row 2kp's n bytes in bytes 0-31, row 2kp+1's in 32-63, interleaved into pairs by the decode's reordering */
    _Alignas(64) static const uint8_t ord[64] = {
#define P1(t) (DEC64_ORDER(t) % 2 ? 32 + DEC64_ORDER(t) / 2 : DEC64_ORDER(t) / 2)
#define P4(t) P1(t), P1(t + 1), P1(t + 2), P1(t + 3)
        P4(0), P4(4), P4(8), P4(12), P4(16), P4(20), P4(24), P4(28),
        P4(32), P4(36), P4(40), P4(44), P4(48), P4(52), P4(56), P4(60) };
#undef P4
#undef P1
    const __mmask32 k = n >= 32 ? (__mmask32)0xFFFFFFFFu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1u);
    const __m256i x = _mm256_maskz_loadu_epi8(k, r);
    const __m256i y = 2 * kp + 1 < kc ? _mm256_maskz_loadu_epi8(k, r + ld) : _mm256_setzero_si256();
    dec64(_mm512_inserti64x4(_mm512_castsi256_si512(x), y, 1), _mm512_load_si512(ord), L, lo, hi);
#else
    const __m512i x = fl_fp8_dec32(load32(r, n), L);
    const __m512i y = 2 * kp + 1 < kc ? fl_fp8_dec32(load32(r + ld, n), L) : _mm512_setzero_si512();
    interleave(x, y, lo, hi);
#endif
}

/* B block (kc × nb) of a N-contiguous b (b[k·ldb + n]) into panels of kcpo pairs: rows k, k+1 interleaved. */
FL_MM_PACK void pack_b_n(uint16_t *bp, const uint8_t *b, int64_t ldb, int64_t kc, int64_t kcpo, int64_t nb,
                         const mm_lut *L) {
    const int64_t kcp = (kc + 1) / 2;
    for (int64_t j = 0; j * FL_MM_NR < nb; j++) {
        uint16_t *d = bp + j * kcpo * 2 * FL_MM_NR;
        const int64_t nv = nb - j * FL_MM_NR;
        for (int64_t kp = 0; kp < kcp; kp++) {
            __m512i lo, hi;
            pair_rows(b + 2 * kp * ldb + j * FL_MM_NR, ldb, nv, kp, kc, L, &lo, &hi);
            _mm512_store_si512(d + kp * 2 * FL_MM_NR, lo);
            _mm512_store_si512(d + kp * 2 * FL_MM_NR + 32, hi);
        }
        if (kcpo > kcp) memset(d + kcp * 2 * FL_MM_NR, 0, (size_t)((kcpo - kcp) * 4 * FL_MM_NR));
    }
}

/* B block of a K-contiguous b (b[n·ldb + k], a transposed view): each column's bytes decoded into tmp
 * (FL_MM_NR rows of kcq pairs, kcq = kcpo rounded up to 16), then 16 × 16 blocks of pairs transposed into the
 * panel. */
FL_MM_PACK void pack_b_k(uint16_t *bp, uint16_t *tmp, const uint8_t *b, int64_t ldb, int64_t kc, int64_t kcpo,
                         int64_t nb, const mm_lut *L) {
    const int64_t kcq = (kcpo + 15) & ~(int64_t)15;
    for (int64_t j = 0; j * FL_MM_NR < nb; j++) {
        for (int64_t c = 0; c < FL_MM_NR; c++) {
            uint16_t *row = tmp + c * 2 * kcq;
            if (j * FL_MM_NR + c < nb) dec_row(row, b + (j * FL_MM_NR + c) * ldb, kc, 2 * kcq, L);
            else memset(row, 0, (size_t)(4 * kcq));
        }
        const uint32_t *t = (const uint32_t *)tmp;
        uint32_t *d = (uint32_t *)(bp + j * kcpo * 2 * FL_MM_NR);
        for (int64_t k0 = 0; k0 < kcpo; k0 += 16)
            for (int64_t c0 = 0; c0 < FL_MM_NR; c0 += 16)   /* rows c0..c0+15 of tmp, pairs k0.. → d[k][c0..] */
                tr16x16_u32(t + c0 * kcq + k0, kcq, d + k0 * FL_MM_NR + c0, FL_MM_NR, kcpo - k0);
    }
}

/* The epilogue of a 32-column micro-tile's rows (mm_epi): set up once per micro-tile, then applied to each row's
 * two vectors of sums in the last K block: v·s (+ bias) (+ res) with s = scale (per-tensor scales) or
 * (rs ? rs[i] : sa0)·(cs ? cs[j] : sb0); the same roundings as cpu_fp8_gemm.c's scale pass: sum·(sa·sb), then
 * + bias, then + the addend. k0, k1: the columns [0, 16) and [16, 32) below nv. */
typedef struct {
    __mmask16 k0, k1;
    bool vec, bias;
    __m512 bv0, bv1, sc, cs0, cs1;
} mm_epi32;
FL_MM_PACK mm_epi32 epi_setup(const mm_epi *E, int64_t nv, bool last) {
    mm_epi32 P;
    P.k0 = nv >= 16 ? 0xFFFF : (__mmask16)((1u << nv) - 1u);
    P.k1 = nv >= 32 ? 0xFFFF : nv <= 16 ? 0 : (__mmask16)((1u << (nv - 16)) - 1u);
    P.vec = E->rs || E->cs;
    P.bias = E->bias != NULL;
    P.bv0 = P.bias ? _mm512_maskz_loadu_ps(P.k0, E->bias) : _mm512_setzero_ps();
    P.bv1 = P.bias ? _mm512_maskz_loadu_ps(P.k1, E->bias + 16) : _mm512_setzero_ps();
    P.sc = _mm512_set1_ps(E->scale);
    const bool ld = last && E->cs;   /* the column scales are read only by the last K block */
    P.cs0 = ld ? _mm512_maskz_loadu_ps(P.k0, E->cs) : _mm512_set1_ps(E->sb0);
    P.cs1 = ld ? _mm512_maskz_loadu_ps(P.k1, E->cs + 16) : _mm512_set1_ps(E->sb0);
    return P;
}
FL_MM_PACK void epi_row(const mm_epi32 *P, const mm_epi *E, int64_t i, __m512 *v0, __m512 *v1) {
    __m512 s0 = P->sc, s1 = P->sc;
    if (P->vec) {
        const __m512 ra = _mm512_set1_ps(E->rs ? E->rs[i] : E->sa0);
        s0 = _mm512_mul_ps(ra, P->cs0);
        s1 = _mm512_mul_ps(ra, P->cs1);
    }
    *v0 = _mm512_mul_ps(*v0, s0);
    *v1 = _mm512_mul_ps(*v1, s1);
    if (P->bias) {
        *v0 = _mm512_add_ps(*v0, P->bv0);
        *v1 = _mm512_add_ps(*v1, P->bv1);
    }
    if (E->res) {
        const float *r = E->res + i * E->ldr;
        *v0 = _mm512_add_ps(*v0, _mm512_maskz_loadu_ps(P->k0, r));
        *v1 = _mm512_add_ps(*v1, _mm512_maskz_loadu_ps(P->k1, r + 16));
    }
}

/* pack_b_k's scratch: FL_MM_NR rows of kcpo pairs rounded up to 16. */
static inline size_t pack_b_k_tmp(int64_t kcpo) { return (size_t)(FL_MM_NR * 4 * ((kcpo + 15) & ~(int64_t)15)); }
#endif
#endif
