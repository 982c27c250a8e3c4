/* cpu_nn_attn_bf16.c — bf16 attention (bf16 autocast) with AVX-512 BF16 `vdpbf16ps` (the entries hand CPUs
 * without it to cpu_nn_attn_fma.c), one (b, h) head per thread: the head's operands are rounded to bf16 (RNE,
 * as fl_f32_to_bf16) into thread-local packed buffers, each product is a register-blocked small GEMM
 * accumulating in fp32, and the row passes (softmax forward, dS backward) run between them on tiles of query
 * rows that are still in cache. Causal heads skip the key blocks above the diagonal. A head's arithmetic does
 * not depend on the thread count. Where the CPU has AMX-BF16 (fl_cpu_amx) the products run on the tile unit:
 * row tiles of 16 query (or key) rows, each product's whole 16-pair steps by tdpbf16ps (causal bands rounded up to
 * whole steps: pairs_for) and the rest of its inner pairs by the vdpbf16ps tiles, added; on such a CPU vdpbf16ps
 * runs at half the fp32 FMA rate and the tiles at 31 times it (docs/performance.md, "Intel Xeon with AMX").
 * The probabilities go to att for the backward, or in the statistics form (fl_cpu_attn_bf16_stats_*) only each
 * row's max and 1/Σ are kept and the backward makes P again from them, with the same bits (docs/performance.md,
 * "Attention in whole tile steps, and without its probabilities"); where this family does not run, the AVX2 + FMA
 * one has that form too. */
#include "cpu_nn_internal.h"
#include "cpu_internal.h"
#include "bf16_x86.h"
#include "cpu_amx.h"
#include "par.h"
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define ATTN16 FL_CPU_TARGET512("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16")
#define ATTN16_INLINE static inline __attribute__((always_inline)) ATTN16

/* Packed operands are arrays of 32-bit words, each a pair of bf16 values consecutive along the product's
 * inner (summed) dimension, low half first:
 *   A operand (rows of the result): word (r, m) at a[r·ars + m·ams], broadcast to every lane;
 *   B operand: [K/2][ldb] words, word (m, n) holds B[2m, n] and B[2m+1, n] ("VNNI" layout), ldb a
 *   multiple of 16 so whole vectors load. Odd inner lengths are padded with a zero pair half. */
#define MR 4    /* rows of a register tile */
#define NVMAX 4 /* 16-lane column vectors of a register tile: MR·NVMAX fp32 accumulators */
#define RT_AMX 16   /* rows of a row tile on the tile unit (MR otherwise) */
#define ATTN_AMX FL_CPU_AMX

_Atomic bool fl_cpu_attn_bf16_allowed = true;
_Atomic bool fl_cpu_attn_amx_allowed = true;

/* Whether this family runs here; else the AVX2 + FMA one (cpu_nn_attn_fma.c) takes the calls. */
static bool own_family(void) { return fl_cpu_avx512_bf16(); }

bool fl_cpu_attn_bf16_available(void) {
    return fl_cpu_attn_bf16_allowed && (own_family() || fl_cpu_attn_fma_usable());
}

/* c[r, 0..16·NV) = Σ_{m0 ≤ m < m1} A(r, m)·B[m, ·] for r < mr (add: c plus that sum); the last vector stores
 * the columns in `last`. */
ATTN16_INLINE void tile(const int mr, const int nv, const uint32_t *a, int64_t ars, int64_t ams, int64_t m0,
                        int64_t m1, const uint32_t *b, int64_t ldb, float *c, int64_t ldc, __mmask16 last, bool add) {
    __m512 acc[MR][NVMAX];
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
        #pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            acc[r][v] = !add ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(v < nv - 1 ? 0xFFFF : last, c + r * ldc + 16 * v);
    for (int64_t m = m0; m < m1; m++) {
        __m512bh bv[NVMAX];
        #pragma GCC unroll 8
        for (int v = 0; v < nv; v++) bv[v] = (__m512bh)_mm512_loadu_si512(b + m * ldb + 16 * v);
        #pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)a[r * ars + m * ams]);
            #pragma GCC unroll 8
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
        #pragma GCC unroll 8
        for (int v = 0; v < nv - 1; v++) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
        _mm512_mask_storeu_ps(c + r * ldc + 16 * (nv - 1), last, acc[r][nv - 1]);
    }
}

#define TILE_ARGS a, ars, ams, m0, m1, b, ldb, c, ldc, last, add
#define TILE_NV(R)                                        \
    switch (nv) {                                         \
    case 1: tile(R, 1, TILE_ARGS); break;                 \
    case 2: tile(R, 2, TILE_ARGS); break;                 \
    case 3: tile(R, 3, TILE_ARGS); break;                 \
    default: tile(R, 4, TILE_ARGS); break;                \
    }

/* Rows [0, mr) of C[·, 0..n) (mr ≤ MR), ldc-strided fp32, over inner pairs [m0, m1) (add: added to C). */
static ATTN16 void band_add(int mr, int64_t n, const uint32_t *a, int64_t ars, int64_t ams, int64_t m0, int64_t m1,
                            const uint32_t *b0, int64_t ldb, float *c0, int64_t ldc, bool add) {
    for (int64_t n0 = 0; n0 < n; n0 += 16 * NVMAX) {
        const int64_t nn = n - n0 < 16 * NVMAX ? n - n0 : 16 * NVMAX, tail = nn - 16 * ((nn - 1) / 16);
        const int nv = (int)((nn + 15) / 16);
        const __mmask16 last = (__mmask16)((1u << tail) - 1);
        const uint32_t *b = b0 + n0;
        float *c = c0 + n0;
        switch (mr) {
        case 1: TILE_NV(1); break;
        case 2: TILE_NV(2); break;
        case 3: TILE_NV(3); break;
        default: TILE_NV(4); break;
        }
    }
}
/* Rows [0, mr) of C (any mr), MR at a time. */
static ATTN16 void band_rows(int mr, int64_t n, const uint32_t *a, int64_t ars, int64_t ams, int64_t m0, int64_t m1,
                             const uint32_t *b, int64_t ldb, float *c, int64_t ldc, bool add) {
    for (int r0 = 0; r0 < mr; r0 += MR)
        band_add(mr - r0 < MR ? mr - r0 : MR, n, a + r0 * ars, ars, ams, m0, m1, b, ldb, c + r0 * ldc, ldc, add);
}

/* Word c of the result: the pair (a[c], b[c]) of 32 bf16 laid out as a's 16 then b's 16 (fl_bf16_x86_pack32). */
ATTN16_INLINE __m512i pairs16(__m512i ab) {
    static const uint16_t il[32] = { 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                     8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31 };
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(il), ab);
}

/* The mask of the first n of 16 lanes (none for n ≤ 0). */
static inline __mmask32 lanes32(int64_t n) { return n >= 32 ? (__mmask32)~0u : n <= 0 ? 0 : (__mmask32)((1u << n) - 1); }

/* The packers read a head's rows lds floats apart: in the GPT's packed qkv, 256 bytes of each 3 KiB token row,
 * so nearly every row starts in another 4 KiB page and the hardware prefetchers, which stop at page boundaries,
 * leave each row a demand miss when the tensor comes from memory (as in a training step). Each packer asks for
 * the lines of the row PF_ROWS ahead while it converts the current one. */
#define PF_ROWS 8
static inline void fetch_row(const float *row, int64_t cols) {
    for (int64_t c = 0; c < cols; c += 16) _mm_prefetch((const char *)(row + c), _MM_HINT_T0);
}

/* The lines of a row about to be written (for writing: the scores and probabilities of the next query tile,
 * the next tile's rows of the output or of dq, dk, dv), while the current tile computes: in a training step
 * they are in memory, and each store that misses waited for its line. With cold operands (bench_attn cold,packed:
 * 16 × 4 heads, T 128, D 64, 2 threads) forward 0.80-0.84 → 0.65-0.73 ms, backward 1.03-1.12 → 0.81-0.88
 * (Zen 5, 2026-11-28). */
static inline void fetch_row_w(float *row, int64_t cols) {
    for (int64_t c = 0; c < cols; c += 16) __builtin_prefetch(row + c, 1, 3);
}

/* dst[r, 0..ldd) (bf16, row-major) = src[r, 0..cols) rounded, zero up to ldd (even): an A operand with
 * ars = ldd/2 words, ams = 1. */
static ATTN16 void pack_rows(const float *src, int64_t rows, int64_t cols, int64_t lds, uint16_t *dst, int64_t ldd) {
    for (int64_t r = 0; r < rows; r++) {
        if (r + PF_ROWS < rows) fetch_row(src + (r + PF_ROWS) * lds, cols);
        for (int64_t c = 0; c < ldd; c += 32) {
            const __m512 x0 = _mm512_maskz_loadu_ps(fl_avx512_lanes(cols - c), src + r * lds + c);
            const __m512 x1 = _mm512_maskz_loadu_ps(fl_avx512_lanes(cols - c - 16), src + r * lds + c + 16);
            _mm512_mask_storeu_epi16(dst + r * ldd + c, lanes32(ldd - c), fl_bf16_x86_pack32(x0, x1));
        }
    }
}

/* dst[m, 0..ldd) = pairs (src[2m, ·], src[2m+1, ·]) rounded, zero beyond `cols` and past the last row:
 * src as a B operand (ldd a multiple of 16). */
static ATTN16 void pack_pairs(const float *src, int64_t rows, int64_t cols, int64_t lds, uint32_t *dst, int64_t ldd) {
    for (int64_t m = 0; 2 * m < rows; m++) {
        const float *r0 = src + 2 * m * lds, *r1 = r0 + lds;
        const bool odd = 2 * m + 1 == rows;
        for (int64_t f = 2 * m + PF_ROWS; f < 2 * m + PF_ROWS + 2 && f < rows; f++) fetch_row(src + f * lds, cols);
        for (int64_t c = 0; c < ldd; c += 16) {
            const __mmask16 k = fl_avx512_lanes(cols - c);
            const __m512 x0 = _mm512_maskz_loadu_ps(k, r0 + c), x1 = _mm512_maskz_loadu_ps(odd ? 0 : k, r1 + c);
            _mm512_storeu_si512(dst + m * ldd + c, pairs16(fl_bf16_x86_pack32(x0, x1)));
        }
    }
}

/* The 16×16 matrix of 32-bit words in u[0..16) (row i in u[i]) transposed in place. */
ATTN16_INLINE void transpose16(__m512i u[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(u[2 * i], u[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(u[2 * i], u[2 * i + 1]);
    }
    /* u[4g + j], 128-bit lane L: rows 4g..4g+3 of column 4L + j */
    for (int g = 0; g < 4; g++) {
        u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    for (int j = 0; j < 4; j++) {
        const __m512i e01 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), o01 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
        const __m512i e23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
        const __m512i o23 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
        t[j] = _mm512_shuffle_i32x4(e01, e23, 0x88);
        t[8 + j] = _mm512_shuffle_i32x4(e01, e23, 0xDD);
        t[4 + j] = _mm512_shuffle_i32x4(o01, o23, 0x88);
        t[12 + j] = _mm512_shuffle_i32x4(o01, o23, 0xDD);
    }
    for (int i = 0; i < 16; i++) u[i] = t[i];
}

/* dst[m, r] = the pair (src[r, 2m], src[r, 2m+1]) rounded, for r < rows and zero up to rows rounded up to
 * 16: srcᵀ as a B operand (ldd a multiple of 16; src rows lds apart). Blocks of 16 rows × 16 pairs are
 * transposed in registers. */
static ATTN16 void pack_t(const float *src, int64_t rows, int64_t cols, int64_t lds, uint32_t *dst, int64_t ldd) {
    const int64_t h = (cols + 1) / 2;
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        for (int64_t f = r0 + 16; f < r0 + 32 && f < rows; f++) fetch_row(src + f * lds, cols);   /* the next block */
        for (int64_t c0 = 0; c0 < cols; c0 += 32) {
            __m512i u[16];
            for (int i = 0; i < 16; i++) {
                const bool in = r0 + i < rows;
                const float *x = src + (in ? r0 + i : 0) * lds + c0;
                const __m512 x0 = _mm512_maskz_loadu_ps(in ? fl_avx512_lanes(cols - c0) : 0, x);
                const __m512 x1 = _mm512_maskz_loadu_ps(in ? fl_avx512_lanes(cols - c0 - 16) : 0, x + 16);
                u[i] = fl_bf16_x86_pack32(x0, x1);
            }
            transpose16(u);
            for (int64_t m = 0; m < 16 && c0 / 2 + m < h; m++) _mm512_storeu_si512(dst + (c0 / 2 + m) * ldd + r0, u[m]);
        }
    }
}

/* ---- the tile unit (AMX; cpu_amx.h: each head loads the tile configuration, fl_amx_begin, and releases the tiles,
 * fl_amx_end) ---- */

/* Rows [0, mr) (mr ≤ 16) of C[·, 0..n) over inner pairs [m0, m1), A read row-major (pair (r, m) at a[r·ars + m];
 * 16 rows readable), B [·][ldb] pairs (ldb a multiple of 16, n ≤ ldb): the whole 16-pair steps from m0 on the
 * tiles, 32 columns at a time, the rest by the vdpbf16ps tiles, added. */
static ATTN_AMX void band_amx(int mr, int64_t n, const uint32_t *a, int64_t ars, int64_t m0, int64_t m1,
                              const uint32_t *b, int64_t ldb, float *c, int64_t ldc) {
    const int64_t full = (m1 - m0) & ~(int64_t)15;
    if (full > 0) {
        _Alignas(64) float t[16 * 32];
        for (int64_t n0 = 0; n0 < n; n0 += 32) {
            const bool two = n - n0 > 16;
            _tile_zero(0);
            if (two) _tile_zero(1);
            for (int64_t m = m0; m < m0 + full; m += 16) {
                _tile_loadd(4, a + m, 4 * ars);
                _tile_loadd(6, b + m * ldb + n0, 4 * ldb);
                _tile_dpbf16ps(0, 4, 6);
                if (two) {
                    _tile_loadd(7, b + m * ldb + n0 + 16, 4 * ldb);
                    _tile_dpbf16ps(1, 4, 7);
                }
            }
            _tile_stored(0, t, 128);
            if (two) _tile_stored(1, t + 16, 128);
            const __mmask16 k0 = fl_avx512_lanes(n - n0), k1 = fl_avx512_lanes(n - n0 - 16);
            for (int r = 0; r < mr; r++) {
                _mm512_mask_storeu_ps(c + r * ldc + n0, k0, _mm512_load_ps(t + 32 * r));
                if (two) _mm512_mask_storeu_ps(c + r * ldc + n0 + 16, k1, _mm512_load_ps(t + 32 * r + 16));
            }
        }
    }
    if (full < m1 - m0) band_rows(mr, n, a, ars, 1, m0 + full, m1, b, ldb, c, ldc, full > 0);
}

/* band_amx with A read transposed (pair (r, m) at a[r + m·ams], 16 columns r readable): its whole 16-pair steps
 * are transposed into at (16 rows of m1 − m0 pairs) 16 × 16 at a time first; the rest is read in place. */
static ATTN_AMX void band_amx_t(int mr, int64_t n, const uint32_t *a, int64_t ams, int64_t m0, int64_t m1,
                                const uint32_t *b, int64_t ldb, float *c, int64_t ldc, uint32_t *at) {
    const int64_t full = (m1 - m0) & ~(int64_t)15;
    for (int64_t m = m0; m < m0 + full; m += 16) {
        __m512i u[16];
        for (int i = 0; i < 16; i++) u[i] = _mm512_loadu_si512(a + (m + i) * ams);
        transpose16(u);
        for (int r = 0; r < 16; r++) _mm512_storeu_si512(at + r * full + (m - m0), u[r]);
    }
    if (full > 0) band_amx(mr, n, at, full, 0, full, b + m0 * ldb, ldb, c, ldc);
    if (full < m1 - m0) band_rows(mr, n, a, 1, ams, m0 + full, m1, b, ldb, c, ldc, full > 0);
}

/* One product of a head: band_amx (amx) or the vdpbf16ps tiles, A row-major (ams == 1) or transposed (ars == 1,
 * at: band_amx_t's scratch). */
static ATTN16 void band(bool amx, int mr, int64_t n, const uint32_t *a, int64_t ars, int64_t ams, int64_t m0, int64_t m1,
                        const uint32_t *b, int64_t ldb, float *c, int64_t ldc, uint32_t *at) {
    if (!amx) band_rows(mr, n, a, ars, ams, m0, m1, b, ldb, c, ldc, false);
    else if (ams == 1) band_amx(mr, n, a, ars, m0, m1, b, ldb, c, ldc);
    else band_amx_t(mr, n, a, ams, m0, m1, b, ldb, c, ldc, at);
}

/* fl_nn_expf (cpu_nn_internal.h) on 16 lanes, with fused multiply-adds and vscalefps (~1 ulp as well). */
ATTN16_INLINE __m512 exp16(__m512 x) {
    __m512 k;
    const __m512 y = fl_exp16_poly(x, &k);
    return fl_exp16_fix(_mm512_scalef_ps(y, k), x);   /* y·2^k rounded once, subnormal results included */
}

/* Rows [i0, i1) (at most RT_AMX) of a head's [T, T] scores, s pointing at row i0 (rows T apart): s[i, j] ←
 * softmax_j(scale·s[i, j]) over j < n_i (i + 1 when causal, else T), exact zeros for j in [n_i, T)
 * (attn_softmax_row of cpu_nn_internal.h, with tree reductions), and row i of p (ldp bf16 apart) over [0, w) ←
 * the row rounded to bf16 (w ≤ T). The rows go through each step together so that their reductions overlap.
 * st (or NULL): each row's max and 1/Σ at st[2i], st[2i + 1], from which softmax_redo makes the same row. */
ATTN16_INLINE void softmax_tile(float *s, int64_t i0, int64_t i1, int64_t T, int causal, float scale, uint16_t *p,
                                int64_t ldp, int64_t w, float *st) {
    const __m512 sc = _mm512_set1_ps(scale);
    __m512 m[RT_AMX], inv[RT_AMX];
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n = causal ? i + 1 : T;
        const float *r = s + (i - i0) * T;
        __m512 vm = _mm512_set1_ps(-INFINITY);
        for (int64_t j = 0; j < n; j += 16) {
            const __mmask16 k = fl_avx512_lanes(n - j);
            vm = _mm512_mask_max_ps(vm, k, vm, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, r + j), sc));
        }
        m[i - i0] = _mm512_set1_ps(_mm512_reduce_max_ps(vm));
    }
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n = causal ? i + 1 : T;
        float *r = s + (i - i0) * T;
        __m512 vs = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j += 16) {
            const __mmask16 k = fl_avx512_lanes(n - j);
            const __m512 x = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, r + j), sc), m[i - i0]);
            const __m512 e = _mm512_maskz_mov_ps(k, exp16(x));
            _mm512_mask_storeu_ps(r + j, fl_avx512_lanes(T - j), e);
            vs = _mm512_add_ps(vs, e);
        }
        inv[i - i0] = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(vs));
        if (st) {
            st[2 * i] = _mm512_cvtss_f32(m[i - i0]);
            st[2 * i + 1] = _mm512_cvtss_f32(inv[i - i0]);
        }
    }
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n = causal ? i + 1 : T;
        float *r = s + (i - i0) * T;
        uint16_t *pr = p + i * ldp;
        int64_t j = 0;
        for (; j < n; j += 16) {
            const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(fl_avx512_lanes(n - j), r + j), inv[i - i0]);
            _mm512_mask_storeu_ps(r + j, fl_avx512_lanes(T - j), x);
            _mm256_mask_storeu_epi16(pr + j, fl_avx512_lanes(w - j), fl_bf16_x86_pack16(x));
        }
        for (; j < T; j += 16) {
            _mm512_mask_storeu_ps(r + j, fl_avx512_lanes(T - j), _mm512_setzero_ps());
            if (j < w) _mm512_mask_storeu_epi16(pr + j, (__mmask32)fl_avx512_lanes(w - j), _mm512_setzero_si512());
        }
    }
}

/* softmax_tile's fp32 rows again from the same scores (s at row i0) and its statistics st: the same operations on
 * the same values (e^x from the scaled score less the row's max, times 1/Σ), so the same bits, without its
 * reductions. */
ATTN16_INLINE void softmax_redo(float *s, int64_t i0, int64_t i1, int64_t T, int causal, float scale, const float *st) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n = causal ? i + 1 : T;
        float *r = s + (i - i0) * T;
        const __m512 m = _mm512_set1_ps(st[2 * i]), inv = _mm512_set1_ps(st[2 * i + 1]);
        int64_t j = 0;
        for (; j < n; j += 16) {
            const __mmask16 k = fl_avx512_lanes(n - j);
            const __m512 x = _mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, r + j), sc), m);
            _mm512_mask_storeu_ps(r + j, fl_avx512_lanes(T - j), _mm512_mul_ps(_mm512_maskz_mov_ps(k, exp16(x)), inv));
        }
        for (; j < T; j += 16) _mm512_mask_storeu_ps(r + j, fl_avx512_lanes(T - j), _mm512_setzero_ps());
    }
}

/* Σ_{j<n} p[j]·d[j] */
ATTN16_INLINE float row_dot(const float *p, const float *d, int64_t n) {
    __m512 vd = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 k = fl_avx512_lanes(n - j);
        vd = _mm512_add_ps(vd, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), _mm512_maskz_loadu_ps(k, d + j)));
    }
    return _mm512_reduce_add_ps(vd);
}

/* Query rows i and i + 1 of dS (one: row i alone, the pairs' upper halves zero) from their rows of P (p0, p1)
 * and dP (d0, d1): dS[j] = scale·p[j]·(d[j] − Σ p·d) over the live length of p (up to its last nonzero
 * probability, which is below n0, n1), zeros beyond: cpu_nn_internal.h's attn_dsoftmax_row with tree
 * reductions. Written only rounded to bf16: rows g0, g1 [0, w) for dQ, and for the key tiles the pair words of dS
 * (gp) and of P (pp) for columns [0, wp), wp ≥ w a multiple of 16. */
ATTN16_INLINE void dsoftmax_pair(const float *p0, const float *d0, const float *p1, const float *d1, bool one,
                                 int64_t n0, int64_t n1, int64_t T, float scale, uint16_t *g0, uint16_t *g1, int64_t w,
                                 uint32_t *gp, uint32_t *pp, int64_t wp) {
    if (one) n1 = 0;
    while (n0 > 1 && p0[n0 - 1] == 0.0f) n0--;
    while (n1 > 1 && p1[n1 - 1] == 0.0f) n1--;
    const __m512 sc = _mm512_set1_ps(scale), dot0 = _mm512_set1_ps(row_dot(p0, d0, n0));
    const __m512 dot1 = _mm512_set1_ps(row_dot(p1, d1, n1));
    for (int64_t j = 0; j < wp; j += 16) {
        const __mmask16 k0 = fl_avx512_lanes(n0 - j), k1 = fl_avx512_lanes(n1 - j), kt = fl_avx512_lanes(T - j);
        const __m512 P0 = _mm512_maskz_loadu_ps(kt, p0 + j), P1 = _mm512_maskz_loadu_ps(one ? 0 : kt, p1 + j);
        const __m512 x0 = _mm512_maskz_mul_ps(k0, _mm512_mul_ps(sc, P0), _mm512_sub_ps(_mm512_maskz_loadu_ps(k0, d0 + j), dot0));
        const __m512 x1 = _mm512_maskz_mul_ps(k1, _mm512_mul_ps(sc, P1), _mm512_sub_ps(_mm512_maskz_loadu_ps(k1, d1 + j), dot1));
        const __m512i h = fl_bf16_x86_pack32(x0, x1);
        _mm256_mask_storeu_epi16(g0 + j, fl_avx512_lanes(w - j), _mm512_castsi512_si256(h));
        if (!one) _mm256_mask_storeu_epi16(g1 + j, fl_avx512_lanes(w - j), _mm512_extracti64x4_epi64(h, 1));
        _mm512_storeu_si512(gp + j, pairs16(h));
        _mm512_storeu_si512(pp + j, pairs16(fl_bf16_x86_pack32(P0, P1)));
    }
}

/* The shapes of one call and a thread's buffers (words unless noted). */
typedef struct {
    int64_t T, D, Tp, Dp, Th, Dh;   /* T, D rounded up to 16; halves of T, D rounded up */
} shape;
static shape shape_of(int64_t T, int64_t D) {
    return (shape){ T, D, (T + 15) & ~(int64_t)15, (D + 15) & ~(int64_t)15, (T + 1) / 2, (D + 1) / 2 };
}
/* Key columns of the product for query rows [0, i1): up to i1 rounded up to 16 when causal (what the row
 * pass reads), all T otherwise. */
static inline int64_t keys_for(const shape *s, int64_t i1, int causal) {
    const int64_t n = (i1 + 15) & ~(int64_t)15;
    return causal && n < s->T ? n : s->T;
}

/* Inner pairs of the products over keys (P·V, dS·K) for query rows [0, i1): the keys up to i1 in pairs when causal
 * (what the row pass left nonzero), all of them otherwise; on the tile unit (amx) rounded up to whole 16-pair
 * steps where the buffers' Th pairs allow, so the band's tail is not left to the vdpbf16ps tiles: the row pass
 * writes those probabilities and dS as zeros (0·v adds nothing unless v holds a NaN or an infinity, which then
 * reaches the tile's rows as the keys of its own band already do). */
static inline int64_t pairs_for(const shape *s, int64_t i1, int causal, bool amx) {
    if (!causal) return s->Th;
    const int64_t k = (i1 + 1) / 2, r = amx ? (k + 15) & ~(int64_t)15 : k;
    return r < s->Th ? r : s->Th;
}

/* One head; q, k, v rows ldi apart, o rows ldo apart; rt query rows a tile (RT_AMX on the tile unit: amx). The
 * probabilities go to att (T × T), or with att NULL each tile's scores and probabilities to sc (rt × T, thread
 * scratch) and the rows' statistics to st (T × 2), from which the backward makes them again. */
static ATTN16 void fwd_head(const float *q, const float *k, const float *v, int64_t ldi, float *o, int64_t ldo, float *att,
                            float *st, float *sc, const shape *s, float scale, int causal, uint32_t *w, bool amx) {
    const int64_t T = s->T, D = s->D, rt = amx ? RT_AMX : MR;
    uint32_t *q16 = w, *kt = q16 + s->Tp * s->Dh, *v2 = kt + s->Dh * s->Tp, *p16 = v2 + s->Th * s->Dp;
    pack_rows(q, T, D, ldi, (uint16_t *)q16, 2 * s->Dh);
    pack_t(k, T, D, ldi, kt, s->Tp);
    pack_pairs(v, T, D, ldi, v2, s->Dp);
    if (amx) fl_amx_begin();
    for (int64_t i0 = 0; i0 < T; i0 += rt) {
        const int mr = (int)(T - i0 < rt ? T - i0 : rt);
        const int64_t i1 = i0 + mr;
        for (int64_t i = i1; i < i1 + rt && i < T; i++) {
            if (att) fetch_row_w(att + i * T, keys_for(s, i + 1, causal));
            fetch_row_w(o + i * ldo, D);
        }
        float *si = att ? att + i0 * T : sc;
        band(amx, mr, keys_for(s, i1, causal), q16 + i0 * s->Dh, s->Dh, 1, 0, s->Dh, kt, s->Tp, si, T, NULL);
        const int64_t kp = pairs_for(s, i1, causal, amx), w = 2 * kp < T ? 2 * kp : T;
        softmax_tile(si, i0, i1, T, causal, scale, (uint16_t *)p16, 2 * s->Th, w, att ? NULL : st);
        band(amx, mr, D, p16 + i0 * s->Th, s->Th, 1, 0, kp, v2, s->Dp, o + i0 * ldo, ldo, NULL);
    }
    if (amx) fl_amx_end();
}

/* One head; q, k, v rows ldi apart, dout rows ldo apart, dq, dk, dv rows ldd apart; ds: rt rows of dP; rt rows a
 * tile (RT_AMX on the tile unit: amx, with at band_amx_t's scratch). P is read from att (T × T), or with att NULL
 * made again a query tile at a time into pr (rt × T) from the forward's statistics st (fwd_head): the scores by the
 * forward's product on the forward's packing of q and k, then softmax_redo, so every bit as the forward had it. */
static ATTN16 void bwd_head(const float *q, const float *k, const float *v, int64_t ldi, const float *att,
                            const float *st, const float *dout, int64_t ldo, float *dq, float *dk, float *dv, int64_t ldd,
                            const shape *s, float scale, int causal, uint32_t *w, float *ds, float *pr, bool amx) {
    const int64_t T = s->T, D = s->D, rt = amx ? RT_AMX : MR;
    uint32_t *o16 = w, *vt = o16 + s->Tp * s->Dh, *o2 = vt + s->Dh * s->Tp, *k2 = o2 + s->Th * s->Dp;
    uint32_t *q2 = k2 + s->Th * s->Dp, *p2 = q2 + s->Th * s->Dp, *s16 = p2 + s->Th * s->Tp, *s2 = s16 + s->Tp * s->Th;
    uint32_t *at = s2 + s->Th * s->Tp, *q16 = at + 16 * s->Th, *kt = q16 + s->Tp * s->Dh;   /* q16, kt: att NULL */
    pack_rows(dout, T, D, ldo, (uint16_t *)o16, 2 * s->Dh);
    pack_t(v, T, D, ldi, vt, s->Tp);
    pack_pairs(dout, T, D, ldo, o2, s->Dp);
    pack_pairs(k, T, D, ldi, k2, s->Dp);
    pack_pairs(q, T, D, ldi, q2, s->Dp);
    if (!att) {
        pack_rows(q, T, D, ldi, (uint16_t *)q16, 2 * s->Dh);
        pack_t(k, T, D, ldi, kt, s->Tp);
    }
    /* query tiles: dP = dO·Vᵀ into ds, dS (row pass) in bf16 rows and pairs, P in pairs, dQ = dS·K */
    if (amx) fl_amx_begin();
    for (int64_t i0 = 0; i0 < T; i0 += rt) {
        const int mr = (int)(T - i0 < rt ? T - i0 : rt);
        const int64_t i1 = i0 + mr, nk = keys_for(s, i1, causal);
        for (int64_t i = i1; i < i1 + rt && i < T; i++) {
            if (att) fetch_row(att + i * T, keys_for(s, i + 1, causal));
            fetch_row_w(dq + i * ldd, D);
        }
        const float *pt = att ? att + i0 * T : pr;   /* row i0 of P */
        if (!att) {
            band(amx, mr, nk, q16 + i0 * s->Dh, s->Dh, 1, 0, s->Dh, kt, s->Tp, pr, T, NULL);
            softmax_redo(pr, i0, i1, T, causal, scale, st);
        }
        band(amx, mr, nk, o16 + i0 * s->Dh, s->Dh, 1, 0, s->Dh, vt, s->Tp, ds, T, NULL);
        const int64_t kp = pairs_for(s, i1, causal, amx), w = 2 * kp < T ? 2 * kp : T;
        const int64_t wp = causal ? (2 * kp > nk ? 2 * kp : nk) : s->Tp;
        for (int64_t i = i0; i < i1; i += 2) {
            const bool one = i + 1 == i1;
            const float *pi = pt + (i - i0) * T, *di = ds + (i - i0) * T;
            dsoftmax_pair(pi, di, one ? pi : pi + T, one ? di : di + T, one, causal ? i + 1 : T,
                          causal ? i + 2 : T, T, scale,
                          (uint16_t *)(s16 + i * s->Th), (uint16_t *)(s16 + (i + 1) * s->Th), w, s2 + i / 2 * s->Tp,
                          p2 + i / 2 * s->Tp, (wp + 15) & ~(int64_t)15);
        }
        band(amx, mr, D, s16 + i0 * s->Th, s->Th, 1, 0, kp, k2, s->Dp, dq + i0 * ldd, ldd, NULL);
    }
    /* key tiles: dV = Pᵀ·dO and dK = dSᵀ·Q over the query rows that see them */
    for (int64_t j0 = 0; j0 < T; j0 += rt) {
        const int mr = (int)(T - j0 < rt ? T - j0 : rt);
        /* causal: the query pairs from the key tile's diagonal on, and on the tile unit from the 16-pair step
         * that holds it (the pairs above it are zero in P and dS) */
        const int64_t m0 = !causal ? 0 : amx ? j0 / 2 & ~(int64_t)15 : j0 / 2;
        for (int64_t j = j0 + rt; j < j0 + 2 * rt && j < T; j++) {
            fetch_row_w(dv + j * ldd, D);
            fetch_row_w(dk + j * ldd, D);
        }
        band(amx, mr, D, p2 + j0, 1, s->Tp, m0, s->Th, o2, s->Dp, dv + j0 * ldd, ldd, at);
        band(amx, mr, D, s2 + j0, 1, s->Tp, m0, s->Th, q2, s->Dp, dk + j0 * ldd, ldd, at);
    }
    if (amx) fl_amx_end();
}

/* Words of a thread's buffers: forward q, kᵀ, v pairs, P; backward dO, vᵀ, dO, k and q pairs, P and dS
 * pairs, dS rows, band_amx_t's 16 rows, and where P is made again (redo) q and kᵀ as the forward packs them (then,
 * in floats, the rt rows of dP, and with redo the rt rows of P; the forward's rt rows of scores with redo). The
 * row-major ones (q, P, dO, dS rows) have T rounded up to 16 rows, which a tile reads whole. */
static int64_t fwd_words(const shape *s) { return s->Tp * s->Dh + s->Dh * s->Tp + s->Th * s->Dp + s->Tp * s->Th; }
static int64_t bwd_words(const shape *s, bool redo) {
    return s->Tp * s->Dh + s->Dh * s->Tp + 3 * s->Th * s->Dp + 2 * s->Th * s->Tp + s->Tp * s->Th + 16 * s->Th +
           (redo ? 2 * s->Tp * s->Dh : 0);
}

/* Zeroed, 64-byte aligned thread scratch of `words` words and `floats` floats (NULL when out of memory);
 * the pads the packers skip stay zero across heads of one call. */
static void *scratch(int64_t words, int64_t floats) {
    const size_t bytes = ((size_t)(words + floats) * 4 + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

/* The tile unit where the CPU has it and the switch allows it (tests clear fl_cpu_attn_amx_allowed to compare). */
static bool use_amx(void) { return fl_cpu_attn_amx_allowed && fl_cpu_amx(); }

static inline int64_t head_at(fl_attn_layout l, int64_t bh, int64_t H) { return (bh / H) * l.sb + (bh % H) * l.sh; }

/* The forward of every head: probabilities into att ([B·H, T, T]), or with att NULL the rows' statistics into st
 * ([B·H, T, 2]: fwd_head). */
static fl_status fwd_heads(const float *q, const float *k, const float *v, fl_attn_layout in, float *out,
                           fl_attn_layout out_l, float *att, float *st, int64_t B, int64_t H, int64_t T, int64_t D,
                           float scale, int causal) {
    const shape s = shape_of(T, D);
    const int64_t BH = B * H, sa = T * T, nw = fwd_words(&s);
    const bool amx = use_amx();
    bool oom = false;
    FL_PARALLEL(BH > 1 && BH * T * T * D > FL_NN_PAR_MIN, reduction(||:oom),
    {
        uint32_t *w = scratch(nw, att ? 0 : (amx ? RT_AMX : MR) * T);
        oom = !w;
        FL_PRAGMA(omp for schedule(static))
        for (int64_t bh = 0; bh < BH; bh++) {
            const int64_t hi = head_at(in, bh, H);
            if (w)
                fwd_head(q + hi, k + hi, v + hi, in.st, out + head_at(out_l, bh, H), out_l.st, att ? att + bh * sa : NULL,
                         att ? NULL : st + bh * 2 * T, (float *)(w + nw), &s, scale, causal, w, amx);
        }
        free(w);
    });
    return oom ? FL_ERR(FL_ENOMEM, "attention: out of memory for bf16 head buffers") : FL_OK;
}

/* The backward of every head from att, or with att NULL from the statistics st (bwd_head). */
static fl_status bwd_heads(const float *q, const float *k, const float *v, fl_attn_layout in, const float *att,
                           const float *st, const float *dout, fl_attn_layout out_l, float *dq, float *dk, float *dv,
                           fl_attn_layout din, int64_t B, int64_t H, int64_t T, int64_t D, float scale, int causal) {
    const shape s = shape_of(T, D);
    const int64_t BH = B * H, sa = T * T, nw = bwd_words(&s, !att);
    const bool amx = use_amx();
    const int64_t rows = (amx ? RT_AMX : MR) * T;   /* dP's tile, and with att NULL P's */
    bool oom = false;
    FL_PARALLEL(BH > 1 && BH * T * T * D > FL_NN_PAR_MIN, reduction(||:oom),
    {
        uint32_t *w = scratch(nw, att ? rows : 2 * rows);
        oom = !w;
        FL_PRAGMA(omp for schedule(static))
        for (int64_t bh = 0; bh < BH; bh++) {
            const int64_t hi = head_at(in, bh, H), hd = head_at(din, bh, H);
            if (w)
                bwd_head(q + hi, k + hi, v + hi, in.st, att ? att + bh * sa : NULL, att ? NULL : st + bh * 2 * T,
                         dout + head_at(out_l, bh, H), out_l.st, dq + hd, dk + hd, dv + hd, din.st, &s, scale, causal, w,
                         (float *)(w + nw), (float *)(w + nw) + rows, amx);
        }
        free(w);
    });
    return oom ? FL_ERR(FL_ENOMEM, "attention: out of memory for bf16 head buffers") : FL_OK;
}

fl_status fl_cpu_attn_bf16_fwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, float *out,
                                  fl_attn_layout out_l, float *att, int64_t B, int64_t H, int64_t T, int64_t D,
                                  float scale, int causal) {
    if (!own_family()) return fl_cpu_attn_fma_fwd_at(q, k, v, in, out, out_l, att, B, H, T, D, scale, causal);
    return fwd_heads(q, k, v, in, out, out_l, att, NULL, B, H, T, D, scale, causal);
}

fl_status fl_cpu_attn_bf16_bwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, const float *att,
                                  const float *dout, fl_attn_layout out_l, float *dq, float *dk, float *dv,
                                  fl_attn_layout din, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                                  int causal) {
    if (!own_family())
        return fl_cpu_attn_fma_bwd_at(q, k, v, in, att, dout, out_l, dq, dk, dv, din, B, H, T, D, scale, causal);
    return bwd_heads(q, k, v, in, att, NULL, dout, out_l, dq, dk, dv, din, B, H, T, D, scale, causal);
}

bool fl_cpu_attn_bf16_stats_available(void) { return fl_cpu_attn_bf16_available(); }

double fl_cpu_sdpa_fused_min_bytes(void) { return use_amx() ? 0.0 : 64.0 * 1048576.0; }

fl_status fl_cpu_attn_bf16_stats_fwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, float *out,
                                        fl_attn_layout out_l, float *st, int64_t B, int64_t H, int64_t T, int64_t D,
                                        float scale, int causal) {
    if (!own_family()) return fl_cpu_attn_fma_stats_fwd_at(q, k, v, in, out, out_l, st, B, H, T, D, scale, causal);
    return fwd_heads(q, k, v, in, out, out_l, NULL, st, B, H, T, D, scale, causal);
}

fl_status fl_cpu_attn_bf16_stats_bwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, const float *st,
                                        const float *dout, fl_attn_layout out_l, float *dq, float *dk, float *dv,
                                        fl_attn_layout din, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                                        int causal) {
    if (!own_family())
        return fl_cpu_attn_fma_stats_bwd_at(q, k, v, in, st, dout, out_l, dq, dk, dv, din, B, H, T, D, scale, causal);
    return bwd_heads(q, k, v, in, NULL, st, dout, out_l, dq, dk, dv, din, B, H, T, D, scale, causal);
}

/* Contiguous [BH, T, D] heads: one "batch" of BH heads T·D apart, rows D apart. */
fl_status fl_cpu_attn_bf16_fwd(const float *q, const float *k, const float *v, float *out, float *att, int64_t BH,
                               int64_t T, int64_t D, float scale, int causal) {
    const fl_attn_layout l = { 0, T * D, D };
    return fl_cpu_attn_bf16_fwd_at(q, k, v, l, out, l, att, 1, BH, T, D, scale, causal);
}

fl_status fl_cpu_attn_bf16_bwd(const float *q, const float *k, const float *v, const float *att, const float *dout,
                               float *dq, float *dk, float *dv, int64_t BH, int64_t T, int64_t D, float scale,
                               int causal) {
    const fl_attn_layout l = { 0, T * D, D };
    return fl_cpu_attn_bf16_bwd_at(q, k, v, l, att, dout, l, dq, dk, dv, l, 1, BH, T, D, scale, causal);
}
