/* cpu_fp8_mm_bf16.c — the CPU FP8 GEMM's AVX512_BF16 kernel family (cpu_fp8_mm.h): the FP8 bytes are decoded to
 * bf16 by table lookup while the panels are packed (no full-size bf16 copies), exact products are summed in fp32
 * by vdpbf16ps, and the scales and the bias are applied as C is stored (mm_epi).
 * vdpbf16ps treats denormal inputs as zero and flushes denormal results; neither occurs here: every FP8 value is a
 * normal bf16, and every partial sum is a multiple of the smallest product (2^-32) or zero. */
#include "cpu_fp8_mm_pack.h"

_Atomic bool fl_cpu_avx512_bf16_allowed = true;

#ifdef __x86_64__
#include <immintrin.h>
/* Blocking. Micro-tile MR × NR of C in 2·MR zmm accumulators (each 16 columns); K in blocks of KC; B's
 * block (KC × at most NB_MAX columns, bf16: up to 1 MiB) stays in L2 while A is decoded AG rows at a time
 * into L1 and run over it. Each K block re-reads and re-writes the tile of C, so a long K in few blocks
 * matters where the tile is large: the char GPT's fc2 wgrad (M 256, N 1024, K 2048; 512 KiB of C per
 * thread) took 3.0-3.45 ms with KC 256 and 2.6-2.8 ms with KC 512 (2 threads, Zen 4, scripts/bench_fp8_gemm.c);
 * its other eleven GEMMs and NB 256-1024 were within noise. With operands and C cold, as in a training step
 * (the bench's cold mode since it evicts for real), KC 1024 took the GEMMs with K 768 and 1024 from 1.05-1.45
 * to 0.90-1.29 ms (one pass over C instead of two) and left the rest within noise (Zen 5, 2026-11-28).
 * FL_MM_KC / FL_MM_NB override the two for experiments.
 * Packed layouts (u32 = one bf16 pair (k even, k odd), the unit vdpbf16ps multiplies):
 *   B block: NR-column panels, panel j = [kcp][NR] u32 (the VNNI layout), columns past N are zero.
 *   A group, a K-contiguous: AG rows of kcp u32 (bf16 row-major, K padded to even), rows past M zero;
 *            a M-contiguous (a transposed view): two MR-row panels [kcp][MR] u32 made by interleaving rows.
 * kcp = ceil(kc/2): an odd K gets a zero pair partner in both operands. */
#ifndef FL_MM_KC
#define FL_MM_KC 1024
#endif
#ifndef FL_MM_NB
#define FL_MM_NB 512
#endif
enum { MR = 8, NR = FL_MM_NR, AG = 2 * MR, KC = FL_MM_KC, NB_MAX = FL_MM_NB };

#define FL_CPU_BF16 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16")))
#define FL_INLINE FL_CPU_BF16 static inline __attribute__((always_inline))

/* A group (AG rows × kc) of a K-contiguous a (a[m·lda + k]): decoded rows of kcp pairs; rows ag..AG zero. */
FL_CPU_BF16 static void pack_a_k(uint16_t *ap, const uint8_t *a, int64_t lda, int64_t kc, int64_t ag, const fl_fp8_lut4 *L) {
    const int64_t kcp = (kc + 1) / 2;
    for (int64_t m = 0; m < ag; m++) dec_row(ap + m * 2 * kcp, a + m * lda, kc, 2 * kcp, L);
    if (ag < AG) memset(ap + ag * 2 * kcp, 0, (size_t)((AG - ag) * 4 * kcp));
}

/* A group of a M-contiguous a (a[k·lda + m]): rows k, k+1 of the AG = 2·MR columns interleaved into pairs
 * and split into two MR-row panels [kcp][MR]; rows past ag are zero. */
FL_CPU_BF16 static void pack_a_m(uint16_t *ap, const uint8_t *a, int64_t lda, int64_t kc, int64_t ag, const fl_fp8_lut4 *L) {
    const int64_t kcp = (kc + 1) / 2;
    uint32_t *d = (uint32_t *)ap;
    for (int64_t kp = 0; kp < kcp; kp++) {
        __m512i lo, hi;
        pair_rows(a + 2 * kp * lda, lda, ag, kp, kc, L, &lo, &hi);
        _mm256_store_si256((__m256i *)(d + kp * MR), _mm512_castsi512_si256(lo));
        _mm256_store_si256((__m256i *)(d + kcp * MR + kp * MR), _mm512_extracti64x4_epi64(lo, 1));
    }
}

/* One MR × NR micro-tile over kcp pairs: A pair (i, kp) at ap[i·ars + kp·aks], B panel bp. C rows past mr
 * and columns past nv are not touched. load_c: continue the sums already in C (a later K block); last:
 * store C as E says, else the raw sum. */
FL_INLINE void kern(const uint32_t *ap, int64_t ars, int64_t aks, const uint16_t *bp, int64_t kcp, float *c, int64_t ldc,
                    int64_t mr, int64_t nv, bool load_c, bool last, const mm_epi *E) {
    const __mmask16 k0 = nv >= 16 ? 0xFFFF : (__mmask16)((1u << nv) - 1u);
    const __mmask16 k1 = nv >= 32 ? 0xFFFF : nv <= 16 ? 0 : (__mmask16)((1u << (nv - 16)) - 1u);
    __m512 acc[MR][2];
    #pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        acc[i][0] = load_c && i < mr ? _mm512_maskz_loadu_ps(k0, c + i * ldc) : _mm512_setzero_ps();
        acc[i][1] = load_c && i < mr ? _mm512_maskz_loadu_ps(k1, c + i * ldc + 16) : _mm512_setzero_ps();
    }
    #pragma GCC unroll 4   /* the loop's own instructions shared by four pairs, as the FMA families' kernels */
    for (int64_t kp = 0; kp < kcp; kp++) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(bp + kp * 2 * NR), b1 = (__m512bh)_mm512_load_si512(bp + kp * 2 * NR + 32);
        #pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)ap[i * ars + kp * aks]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
        }
    }
    const mm_epi32 P = epi_setup(E, nv, last);
    #pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
        if (i >= mr) break;
        __m512 v0 = acc[i][0], v1 = acc[i][1];
        if (last) epi_row(&P, E, i, &v0, &v1);
        _mm512_mask_storeu_ps(c + i * ldc, k0, v0);
        _mm512_mask_storeu_ps(c + i * ldc + 16, k1, v1);
    }
}

FL_CPU_BF16 __attribute__((noinline)) static void kern_rows(const uint32_t *ap, int64_t ars, const uint16_t *bp, int64_t kcp,
                                                            float *c, int64_t ldc, int64_t mr, int64_t nv, bool load_c,
                                                            bool last, const mm_epi *E) {
    kern(ap, ars, 1, bp, kcp, c, ldc, mr, nv, load_c, last, E);
}

FL_CPU_BF16 __attribute__((noinline)) static void kern_panel(const uint32_t *ap, const uint16_t *bp, int64_t kcp, float *c,
                                                             int64_t ldc, int64_t mr, int64_t nv, bool load_c, bool last,
                                                             const mm_epi *E) {
    kern(ap, 1, MR, bp, kcp, c, ldc, mr, nv, load_c, last, E);
}

/* B's block [k0, k0+kc) × [n0, n0+nb) into bpk (tmp: pack_b_k's scratch). */
FL_CPU_BF16 static void pack_b_block(const mm_job *J, int64_t n0, int64_t nb, int64_t k0, int64_t kc, void *bpk, void *tmp) {
    const fl_fp8_lut4 LB = fl_fp8_lut_load(fl_fp8_bf16_lut(J->e5_b));
    if (J->b_kcontig) pack_b_k(bpk, tmp, J->b + n0 * J->ldb + k0, J->ldb, kc, (kc + 1) / 2, nb, &LB);
    else pack_b_n(bpk, J->b + k0 * J->ldb + n0, J->ldb, kc, (kc + 1) / 2, nb, &LB);
}

/* Software prefetches for what a training step leaves in memory rather than in the caches (its GEMMs' operands
 * and outputs are written by other ops, tens of MiB apart): the next A group's FP8 rows of this K block (a
 * K-contiguous a; the thread's next group as it takes its run from the front), a share of them before each
 * micro-tile of the current group rather than all at once (up to 256 lines, more than the misses a core keeps in
 * flight: the K 768 and 1024 dgrads' median calls 2-6% faster), and the next micro-tile's C lines, for writing,
 * while the current one computes. Measured with bench_fp8_gemm's cold mode (docs/performance.md, "Zen 5 (AMD EPYC
 * family 26)", "Cold operands"). */
/* Lines [e0, e1) of the next A group (rows from m + AG, columns k0 .. k0+kc; lpr lines a row). */
FL_INLINE void prefetch_next_group(const mm_job *J, int64_t m, int64_t k0, int64_t lpr, int64_t e0, int64_t e1) {
    const uint8_t *an = J->a + (m + AG) * J->lda + k0;
    for (int64_t e = e0; e < e1; e++) __builtin_prefetch(an + (e / lpr) * J->lda + (e % lpr) * 64, 0, 3);
}
FL_INLINE void prefetch_c_tile(const float *c, int64_t ldc, int64_t rows) {
    for (int64_t i = 0; i < MR && i < rows; i++) {
        __builtin_prefetch(c + i * ldc, 1, 3);
        __builtin_prefetch(c + i * ldc + 16, 1, 3);
    }
}

/* Rows [m, m+ag) (one A group, ag ≤ AG) of C[ , n0 .. n0+nb) for the K block [k0, k0+kc), whose B block is in bpk. */
FL_CPU_BF16 static void run_group(const mm_job *J, int64_t m, int64_t ag, int64_t n0, int64_t nb, int64_t k0, int64_t kc,
                                  const void *bpkv, void *apkv) {
    const uint16_t *bpk = bpkv;
    uint16_t *apk = apkv;
    const fl_fp8_lut4 LA = fl_fp8_lut_load(fl_fp8_bf16_lut(J->e5_a));
    const int64_t kcp = (kc + 1) / 2, ldc = J->N;
    const bool first = k0 == 0, last = k0 + J->kc >= J->K;
    /* the next group's A lines (K-contiguous a), spread over this group's micro-tiles */
    const int64_t lpr = (kc + 63) / 64, nrows = J->a_mcontig ? 0 : J->M - m - AG < AG ? J->M - m - AG : AG;
    const int64_t pf_total = nrows > 0 ? nrows * lpr : 0, ntiles = (nb + NR - 1) / NR * ((ag + MR - 1) / MR);
    const int64_t pf_per = (pf_total + ntiles - 1) / ntiles;
    int64_t pf_next = 0;
    if (J->a_mcontig) pack_a_m(apk, J->a + k0 * J->lda + m, J->lda, kc, ag, &LA);
    else pack_a_k(apk, J->a + m * J->lda + k0, J->lda, kc, ag, &LA);
    for (int64_t nj = 0; nj < nb; nj += NR) {
        const int64_t nv = nb - nj < NR ? nb - nj : NR;
        const uint16_t *bp = bpk + (nj / NR) * kcp * 2 * NR;
        mm_epi E = { J->scale, J->sa0, J->sb0, NULL, J->cs ? J->cs + n0 + nj : NULL, J->bias ? J->bias + n0 + nj : NULL,
                     NULL, ldc };
        for (int64_t mi = 0; mi < ag; mi += MR) {
            const int64_t mr = ag - mi < MR ? ag - mi : MR;
            const uint32_t *ap = (const uint32_t *)apk + mi * kcp;   /* both layouts: MR rows = MR·kcp pairs */
            float *c = J->c + (m + mi) * ldc + n0 + nj;
            E.rs = J->rs ? J->rs + m + mi : NULL;
            E.res = J->res ? J->res + (m + mi) * ldc + n0 + nj : NULL;
            if (pf_next < pf_total) {
                const int64_t e1 = pf_next + pf_per < pf_total ? pf_next + pf_per : pf_total;
                prefetch_next_group(J, m, k0, lpr, pf_next, e1);
                pf_next = e1;
            }
            if (mi + MR < ag) prefetch_c_tile(c + MR * ldc, ldc, ag - mi - MR);   /* the next micro-tile's C */
            else if (nj + NR < nb) prefetch_c_tile(J->c + m * ldc + n0 + nj + NR, ldc, ag < MR ? ag : MR);
            if (J->a_mcontig) kern_panel(ap, bp, kcp, c, ldc, mr, nv, !first, last, &E);
            else kern_rows(ap, kcp, bp, kcp, c, ldc, mr, nv, !first, last, &E);
        }
    }
}


static bool usable(void) { return fl_cpu_avx512_bf16(); }

static void sizes(int64_t kc, int64_t nb, size_t *b, size_t *a, size_t *tmp) {
    const int64_t kcp = (kc + 1) / 2;
    *b = (size_t)(kcp * 4 * ((nb + NR - 1) / NR * NR));
    *a = (size_t)(kcp * 4 * AG);
    *tmp = pack_b_k_tmp(kcp);
}

const mm_kernel fl_mm_bf16 = { "avx512_bf16", NR, AG, KC, NB_MAX, false, 512, usable, sizes, pack_b_block, run_group };
#endif
