/* cpu_fp8_mm.h — what the CPU FP8 GEMM's driver (cpu_fp8_mm.c: tiles, threads, work stealing, the scales)
 * shares with its kernel families, each of which decodes the FP8 bytes while it packs the panels and sums exact
 * products in fp32:
 *   cpu_fp8_mm_amx.c   AMX-BF16 (tdpbf16ps on 16 × 32 bf16 tiles), where the CPU has it;
 *   cpu_fp8_mm_bf16.c  AVX512_BF16 (vdpbf16ps on bf16 pairs), where the CPU has it;
 *   cpu_fp8_mm_fma.c   AVX-512 FMA (fp32 FMA on decoded fp32, 16 lanes), where the CPU has AVX-512 and its
 *                      vdpbf16ps is not the faster (Intel's: Skylake-SP to Ice Lake, or AVX512_BF16 without AMX),
 *                      and AVX2 + FMA (8 lanes, the same bits), every x86-64-v3 CPU, the build's baseline.
 * The FMA families also run GEMMs of bf16, fp16 or fp32 operands (job.wide): on CPUs without AVX-512, and the
 * 16-bit ones where an FMA family is the CPU's fastest (fl_cpu_fma_mm).
 * The driver walks C in tiles of rows or columns, K in blocks of kc, B in blocks of at most nb_max columns; a
 * family packs one B block (pack_b) and runs one group of at most ag rows of C over it (group). Each C element
 * is summed over K in a fixed order whatever thread makes it, so results do not depend on the thread count. */
#ifndef FL_CPU_FP8_MM_H
#define FL_CPU_FP8_MM_H
#include "cpu_internal.h"

typedef struct mm_kernel mm_kernel;

typedef struct {
    const uint8_t *a, *b;
    int64_t M, N, K, lda, ldb, mb, nb;   /* mb × nb: the tile size */
    int64_t kc;                          /* the K block */
    bool a_mcontig, b_kcontig;           /* a read transposed (a[k·lda + m]), b read transposed (b[n·ldb + k]) */
    bool e5_a, e5_b;                     /* E5M2 (else E4M3) */
    fl_dtype wide;                       /* FL_BF16, FL_F16 or FL_F32: both operands of that type (the FMA
                                            families only); FL_DTYPE_COUNT: FP8 as e5_a, e5_b say */
    float *c;
    float scale, sa0, sb0;   /* sa0·sb0, a's and b's first (or only) scale */
    const float *rs, *cs;    /* a's per-row, b's per-column scales; NULL: per tensor */
    const float *bias;
    const float *res;        /* C's addend (its layout: res[i·N + j]) or NULL */
    const mm_kernel *kern;
} mm_job;

/* What the last K block applies as it stores a micro-tile: C = sum·s (+ bias[j]) (+ res[i][j]) with s = scale
 * (per-tensor scales: rs and cs NULL) or s = (rs ? rs[i] : sa0)·(cs ? cs[j] : sb0), rs and cs pointing at the
 * tile's first row's and first column's scale (per-row scales of a, per-column scales of b); bias at its first
 * column; res at the tile's first element of the addend, its rows ldr apart. These are cpu_fp8_gemm.c's scale
 * pass's roundings: sum·(sa·sb), then + bias, then + the addend (a residual added after the layer). */
typedef struct {
    float scale, sa0, sb0;
    const float *rs, *cs, *bias;
    const float *res;
    int64_t ldr;
} mm_epi;

struct mm_kernel {
    const char *name;
    int nr, ag;          /* columns per B panel (nb is rounded to it), rows per A group */
    int64_t kc, nb_max;  /* K block, most columns of a B block */
    bool balance;        /* cut K and N into equal blocks of at most kc and nb_max, instead of full ones and a rest */
    int64_t bt_min_rows; /* a transposed b with fewer rows of C per thread goes to decode + oneDNN (measured) */
    bool (*usable)(void);
    /* bytes of the B block (kc × nb), of one A group, of pack_b's scratch */
    void (*sizes)(int64_t kc, int64_t nb, size_t *b, size_t *a, size_t *tmp);
    /* B's block [k0, k0+kc) × [n0, n0+nb) into bpk */
    void (*pack_b)(const mm_job *J, int64_t n0, int64_t nb, int64_t k0, int64_t kc, void *bpk, void *tmp);
    /* rows [m, m+ag) of C[ , n0 .. n0+nb) for the K block [k0, k0+kc), whose B block is in bpk */
    void (*group)(const mm_job *J, int64_t m, int64_t ag, int64_t n0, int64_t nb, int64_t k0, int64_t kc, const void *bpk,
                  void *apk);
};

#ifdef __x86_64__
extern const mm_kernel fl_mm_amx, fl_mm_bf16, fl_mm_fma512, fl_mm_fma;
extern _Atomic bool fl_cpu_fma512_allowed;   /* cpu_fp8_mm_fma.c; tests clear it to run AVX512_BF16 on Intel */
#endif
#endif
