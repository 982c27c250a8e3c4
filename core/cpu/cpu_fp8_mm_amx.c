/* cpu_fp8_mm_amx.c — the CPU FP8 GEMM's AMX kernel family (cpu_fp8_mm.h), for CPUs with AMX-BF16 (Intel Xeon
 * since Sapphire Rapids): the FP8 bytes are decoded to bf16 while the panels are packed, as in the AVX512_BF16
 * family (cpu_fp8_mm_pack.h), and the tile unit's tdpbf16ps sums the exact products in fp32: 16 × 16 × 32
 * products an instruction, where vdpbf16ps makes 16 × 2. On such a CPU the AVX512_BF16 family is no faster than
 * fp32 FMAs (one vdpbf16ps every other cycle), so it is the tile unit or the FP8 step is slower than the bf16 one,
 * whose oneDNN GEMMs use the tiles (docs/performance.md, "Intel Xeon with AMX").
 * Blocking: a micro-tile of C is MR × NR = 32 × 32 in four 16 × 16 fp32 tiles (0-3), A's two 16-row tiles (4, 5)
 * and B's two 16-column tiles (6, 7) are loaded for each 32 bf16 of K; a group is one micro-tile's rows (AG = MR)
 * run over every panel of the B block. The tiles' sums of one K block are added to C in the store (C + sum, then,
 * in the last K block, the scales and the bias: mm_epi's roundings), so every C element is summed over the same K
 * blocks in the same order whichever thread makes it.
 * Packed layouts: the B block as the AVX512_BF16 family's (NR-column VNNI panels, tdpbf16ps's B layout: pairs of
 * K down, 16 columns across a tile row of 64 bytes) but with kcq = ceil(kc/2) rounded up to 16 pairs, zeros past
 * kc, since a tile takes 16 pairs; the A group row-major bf16 (a tile's A layout), AG rows of kcq pairs, rows
 * past M zero; a M-contiguous a (a transposed view) is interleaved into pairs down K as pack_b_n does and then
 * transposed 16 × 16 pairs at a time.
 * K blocks of 1024 and B blocks of 512 columns are the AVX512_BF16 family's, run in slices of KS pairs (run_group);
 * K blocks of 256 and 512, 64-row groups and a deferred epilogue measured no faster (docs/performance.md, "Where
 * the AMX family's time goes"; FL_MM_AMX_KC / FL_MM_AMX_NB override the blocks for experiments).
 * Linux gives a process the tile registers only after it asks (arch_prctl ARCH_REQ_XCOMP_PERM); fl_cpu_amx() asks
 * once and the family is not used if the kernel says no. Each group loads the tile configuration (each thread has its
 * own, and oneDNN's GEMMs load theirs) and releases the tiles when done. tdpbf16ps treats denormal inputs as zero
 * and flushes denormal results, as vdpbf16ps does; neither occurs here (cpu_fp8_mm_bf16.c). */
#define FL_MM_PACK_VBMI 1   /* every CPU with AMX has AVX512_VBMI: the byte-table decode */
#include "cpu_fp8_mm_pack.h"
#include <stdatomic.h>

_Atomic bool fl_cpu_amx_allowed = true;

#ifdef __x86_64__
#include "cpu_amx.h"

#ifndef FL_MM_AMX_KC
#define FL_MM_AMX_KC 1024
#endif
#ifndef FL_MM_AMX_NB
#define FL_MM_AMX_NB 512
#endif
enum { MR = 32, NR = FL_MM_NR, AG = MR, KC = FL_MM_AMX_KC, NB_MAX = FL_MM_AMX_NB };

#define FL_CPU_AMX_MM __attribute__((target(FL_CPU_AMX_TARGETS ",avx512vbmi")))
#define FL_INLINE FL_CPU_AMX_MM static inline __attribute__((always_inline))

static int64_t kcq_of(int64_t kc) { return ((kc + 1) / 2 + 15) & ~(int64_t)15; }

/* A group of a K-contiguous a (a[m·lda + k]): ag decoded rows of kcq pairs, rows ag..AG zero. */
FL_INLINE void pack_a_k(uint16_t *ap, const uint8_t *a, int64_t lda, int64_t kc, int64_t kcq, int64_t ag,
                        const mm_lut *L) {
    for (int64_t m = 0; m < ag; m++) dec_row(ap + m * 2 * kcq, a + m * lda, kc, 2 * kcq, L);
    if (ag < AG) memset(ap + ag * 2 * kcq, 0, (size_t)((AG - ag) * 4 * kcq));
}

/* A group of a M-contiguous a (a[k·lda + m]): rows k, k+1 of the AG columns interleaved into pairs, 16 pairs at a
 * time in tmp ([16][AG] u32, 2 KiB: it stays in L1), each 16 transposed into ap ([AG][kcq] u32) at once; columns
 * past ag and pairs past kc are zero. */
FL_INLINE void pack_a_m(uint16_t *ap, uint32_t *tmp, const uint8_t *a, int64_t lda, int64_t kc, int64_t kcq, int64_t ag,
                        const mm_lut *L) {
    const int64_t kcp = (kc + 1) / 2;
    uint32_t *d = (uint32_t *)ap;
    for (int64_t k0 = 0; k0 < kcq; k0 += 16) {
        for (int64_t kp = k0; kp < k0 + 16; kp++) {
            __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
            if (kp < kcp) pair_rows(a + 2 * kp * lda, lda, ag, kp, kc, L, &lo, &hi);
            _mm512_store_si512(tmp + (kp - k0) * AG, lo);
            _mm512_store_si512(tmp + (kp - k0) * AG + 16, hi);
        }
        for (int64_t m0 = 0; m0 < AG; m0 += 16)   /* pairs k0..k0+15 of columns m0.. → rows m0.. of d */
            tr16x16_u32(tmp + m0, AG, d + m0 * kcq + k0, kcq, 16);
    }
}

/* The 32 × 32 micro-tile's sums in sum[32][32] (rows i < mr, columns < nv) into C: added to C's earlier K
 * blocks' (load_c), and in the last K block multiplied by the scales and given the bias and the addend as mm_epi
 * says. */
FL_INLINE void store_tile(const float *sum, float *c, int64_t ldc, int64_t mr, int64_t nv, bool load_c, bool last,
                          const mm_epi *E) {
    const mm_epi32 P = epi_setup(E, nv, last);
    for (int64_t i = 0; i < mr; i++) {
        __m512 v0 = _mm512_load_ps(sum + i * NR), v1 = _mm512_load_ps(sum + i * NR + 16);
        if (load_c) {
            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(P.k0, c + i * ldc), v0);
            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(P.k1, c + i * ldc + 16), v1);
        }
        if (last) epi_row(&P, E, i, &v0, &v1);
        _mm512_mask_storeu_ps(c + i * ldc, P.k0, v0);
        _mm512_mask_storeu_ps(c + i * ldc + 16, P.k1, v1);
    }
}

/* B's block [k0, k0+kc) × [n0, n0+nb) into bpk (tmp: pack_b_k's scratch). */
FL_CPU_AMX_MM static void pack_b_block(const mm_job *J, int64_t n0, int64_t nb, int64_t k0, int64_t kc, void *bpk, void *tmp) {
    const mm_lut LB = mm_lut_load(J->e5_b);
    if (J->b_kcontig) pack_b_k(bpk, tmp, J->b + n0 * J->ldb + k0, J->ldb, kc, kcq_of(kc), nb, &LB);
    else pack_b_n(bpk, J->b + k0 * J->ldb + n0, J->ldb, kc, kcq_of(kc), nb, &LB);
}

/* Rows [m, m+ag) (ag ≤ AG) of C[ , n0 .. n0+nb) for the K block [k0, k0+kc), whose B block is in bpk. apk holds
 * the packed group, after it pack_a_m's scratch (16 × AG u32), and after that the panels' partial sums (part_bytes).
 * The block's pairs are run KS at a time over every panel: a slice of the group (32 rows × KS pairs) and of a
 * panel (KS pairs × 32 columns) are 16 KiB each, so the slice stays in L1 while the panels pass, where a whole
 * group of a long K block does not (with K blocks of 1024 the tile loop ran at ~60% of its rate on slices:
 * docs/performance.md, "Where the AMX family's time goes"). Between slices each micro-tile's four accumulator
 * tiles are stored to its partial sums and loaded back, which is exact, so every C element gets the same
 * tdpbf16ps sequence as over the whole block at once. */
enum { KS = 128 };
static size_t part_bytes(int64_t nb) { return (size_t)((nb + NR - 1) / NR * MR * NR * 4); }
FL_CPU_AMX_MM static void run_group(const mm_job *J, int64_t m, int64_t ag, int64_t n0, int64_t nb, int64_t k0, int64_t kc,
                                 const void *bpkv, void *apkv) {
    const uint16_t *bpk = bpkv;
    uint16_t *apk = apkv;
    const mm_lut LA = mm_lut_load(J->e5_a);
    const int64_t kcq = kcq_of(kc), ldc = J->N;
    const bool first = k0 == 0, last = k0 + J->kc >= J->K;
    if (J->a_mcontig) pack_a_m(apk, (uint32_t *)(apk + 2 * kcq * AG), J->a + k0 * J->lda + m, J->lda, kc, kcq, ag, &LA);
    else pack_a_k(apk, J->a + m * J->lda + k0, J->lda, kc, kcq, ag, &LA);
    float *part = (float *)(apk + 2 * kcq * AG + 2 * 16 * AG);
    _Alignas(64) float sum[MR * NR];
    const uint32_t *a0 = (const uint32_t *)apk, *a1 = a0 + 16 * kcq;
    const bool two = ag > 16;   /* rows 16..31 hold something */
    fl_amx_begin();
    for (int64_t ks = 0; ks < kcq; ks += KS) {
        const int64_t ke = kcq - ks < KS ? kcq : ks + KS;
        for (int64_t nj = 0; nj < nb; nj += NR) {
            const uint32_t *bp = (const uint32_t *)(bpk + (nj / NR) * kcq * 2 * NR);
            float *pt = part + (nj / NR) * MR * NR, *acc = ke == kcq ? sum : pt;
            if (ks == 0) {
                _tile_zero(0);
                _tile_zero(1);
                if (two) {
                    _tile_zero(2);
                    _tile_zero(3);
                }
            } else {
                _tile_loadd(0, pt, 4 * NR);
                _tile_loadd(1, pt + 16, 4 * NR);
                if (two) {
                    _tile_loadd(2, pt + 16 * NR, 4 * NR);
                    _tile_loadd(3, pt + 16 * NR + 16, 4 * NR);
                }
            }
            for (int64_t kp = ks; kp < ke; kp += 16) {
                _tile_loadd(4, a0 + kp, 4 * kcq);
                _tile_loadd(6, bp + kp * NR, 4 * NR);
                _tile_loadd(7, bp + kp * NR + 16, 4 * NR);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                if (two) {
                    _tile_loadd(5, a1 + kp, 4 * kcq);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
            _tile_stored(0, acc, 4 * NR);
            _tile_stored(1, acc + 16, 4 * NR);
            if (two) {
                _tile_stored(2, acc + 16 * NR, 4 * NR);
                _tile_stored(3, acc + 16 * NR + 16, 4 * NR);
            }
            if (acc == sum) {
                const int64_t nv = nb - nj < NR ? nb - nj : NR;
                const mm_epi E = { J->scale, J->sa0, J->sb0, J->rs ? J->rs + m : NULL,
                                   J->cs ? J->cs + n0 + nj : NULL, J->bias ? J->bias + n0 + nj : NULL,
                                   J->res ? J->res + m * ldc + n0 + nj : NULL, ldc };
                store_tile(sum, J->c + m * ldc + n0 + nj, ldc, ag, nv, !first, last, &E);
            }
        }
    }
    fl_amx_end();
}

/* The tiles (fl_amx_request: the CPU has them and Linux granted them), asked once. */
static bool amx_permitted(void) {
    static _Atomic int state;   /* 0: not asked yet, 1: yes, 2: no */
    int s = atomic_load(&state);
    if (s) return s == 1;
    const bool ok = fl_amx_request();
    atomic_store(&state, ok ? 1 : 2);
    return ok;
}

bool fl_cpu_amx(void) { return fl_cpu_avx512_bf16() && fl_cpu_isa_allows(FL_ISA_AMX) && amx_permitted(); }

static bool usable(void) { return fl_cpu_amx_allowed && fl_cpu_amx() && __builtin_cpu_supports("avx512vbmi"); }

static void sizes(int64_t kc, int64_t nb, size_t *b, size_t *a, size_t *tmp) {
    const int64_t kcq = kcq_of(kc);
    *b = (size_t)(kcq * 4 * ((nb + NR - 1) / NR * NR));
    *a = (size_t)(kcq * 4 * AG + 16 * 4 * AG) + part_bytes(nb);   /* the group, pack_a_m's scratch, the partial sums */
    *tmp = pack_b_k_tmp(kcq);
}

const mm_kernel fl_mm_amx = { "amx_bf16", NR, AG, KC, NB_MAX, false, 0, usable, sizes, pack_b_block, run_group };
#else
bool fl_cpu_amx(void) { return false; }
#endif
