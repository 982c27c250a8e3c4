/* cpu_nn_attn_fma.c — bf16 attention (bf16 autocast) on CPUs without AVX-512 BF16, with AVX2 + FMA: the per-head kernel
 * family that cpu_nn_attn_bf16.c's entries call there, and fp32 attention on every CPU. One (b, h) head per thread: its
 * operands are rounded to bf16 (RNE, NaN quieted, as fl_f32_to_bf16) and kept in fp32 in thread-local packed buffers,
 * so each product of two of them is exact in fp32 and each register-blocked small GEMM adds it to its fp32 sum by one
 * FMA, in order along the summed dimension; the row passes (softmax forward, dS backward: cpu_nn_internal.h's on 8
 * lanes, each tile's rows together, the bf16 rounding of their results in the same pass) run between the products on
 * tiles of query rows still in cache. Causal heads skip the keys above the diagonal. A head's arithmetic does not
 * depend on the thread count; it differs from the AVX512_BF16 kernels' (which sum pairs of products) and from the
 * batched GEMMs' in summation order and in the exponential's last bit (FMAs, as the AVX512_BF16 family's) only.
 * The same code runs fp32 attention (fl_cpu_attn_f32_*): the operands are packed as they are, each product rounded with
 * its sum by the FMA, and the products with P read it where the softmax left it (att) instead of a rounded copy;
 * fwd_head and bwd_head are inlined into one copy per family.
 * Where the CPU has AVX-512 the products run on 16 lanes (band512), each sum in the same order, so the same bits as on
 * 8; so do the softmax's exponentials (since stop 92: each row's sum added in the 8-lane order, exp_row16), the
 * other row passes and the packers stay on 8. On the Xeon with AMX (its AVX-512 FMAs) that made a call of the GPT's
 * bf16 attention take 0.89-0.98 of its time at T 128 and 0.80-0.91 at T 512, and fp32 attention faster than oneDNN's
 * batched GEMMs, which ran it there before (docs/performance.md, "Attention's products on 16 lanes").
 * bf16 attention also has the statistics form here (fl_cpu_attn_fma_stats_*), as cpu_nn_attn_bf16.c has: each row's max
 * and 1/Σ kept in place of P, and P made again in the backward from the forward's product and its operations
 * (softmax_redo), so the same bits as keeping P. */
#include "cpu_nn_internal.h"
#include "cpu_internal.h"
#include "cpu_avx2.h"
#include "par.h"
#include <stdlib.h>
#include <string.h>

/* Packed operands (fp32 holding bf16 values), each row a multiple of 8 floats:
 *   A operand (rows of the result): element (r, m) at a[r·ars + m·ams], broadcast to every lane;
 *   B operand: [K][ldb], element (m, n) at b[m·ldb + n], ldb a multiple of 8 so whole vectors load.
 * A register tile is MR rows × NVMAX 8-lane vectors: 12 accumulators, the B vectors and one broadcast. */
#define MR 6
#define NVMAX 2

bool fl_cpu_attn_fma_usable(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

/* x rounded to bf16 (RNE; NaN quieted), kept in fp32: fl_f32_to_bf16 on 8 lanes. */
static inline __m256 r16(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rne = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i r = _mm256_blendv_epi8(rne, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), nan);
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/* x as an operand holds it: rounded to bf16, or (keep: the fp32 family) as it is. */
static inline __m256 op(__m256 x, bool keep) { return keep ? x : r16(x); }

/* d[0, n) = src[0, n) as an operand, zeros up to ld (a multiple of 8, ≥ n). */
static inline void operand_row(const float *src, int64_t n, float *d, int64_t ld, bool keep) {
    for (int64_t c = 0; c < ld; c += 8) _mm256_storeu_ps(d + c, op(fl_avx2_load_n(src + c, n - c), keep));
}

/* c[r, 0..8·nv) = Σ_{m0 ≤ m < m1} A(r, m)·B[m, ·] for r < mr; the last vector stores the lanes in `last`. */
static inline __attribute__((always_inline)) void tile(const int mr, const int nv, const float *a, int64_t ars,
                                                       int64_t ams, int64_t m0, int64_t m1, const float *b,
                                                       int64_t ldb, float *c, int64_t ldc, __m256i last) {
    __m256 acc[MR][NVMAX];
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
        #pragma GCC unroll 8
        for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
    #pragma GCC unroll 4   /* the loop's own instructions shared by four m (docs/performance.md, the seventh session) */
    for (int64_t m = m0; m < m1; m++) {
        __m256 bv[NVMAX];
        #pragma GCC unroll 8
        for (int v = 0; v < nv; v++) bv[v] = _mm256_loadu_ps(b + m * ldb + 8 * v);
        #pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            const __m256 av = _mm256_broadcast_ss(a + r * ars + m * ams);
            #pragma GCC unroll 8
            for (int v = 0; v < nv; v++) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
        }
    }
    /* a masked store is slow on AMD (Zen 3: ~10x an unmasked one), so only a partial last vector takes one */
    const bool full = _mm256_movemask_ps(_mm256_castsi256_ps(last)) == 0xff;
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
        #pragma GCC unroll 8
        for (int v = 0; v < nv - 1; v++) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
        if (full) _mm256_storeu_ps(c + r * ldc + 8 * (nv - 1), acc[r][nv - 1]);
        else _mm256_maskstore_ps(c + r * ldc + 8 * (nv - 1), last, acc[r][nv - 1]);
    }
}

#define TILE_ARGS a, ars, ams, m0, m1, b, ldb, c, ldc, last
/* TILE(R) with R the row count mr, a constant in each case. */
#define PER_MR(TILE)                \
    switch (mr) {                   \
    case 1: TILE(1); break;         \
    case 2: TILE(2); break;         \
    case 3: TILE(3); break;         \
    case 4: TILE(4); break;         \
    case 5: TILE(5); break;         \
    default: TILE(6); break;        \
    }
#define TILE_NV(R)                              \
    if (nv == 1) tile(R, 1, TILE_ARGS);         \
    else tile(R, 2, TILE_ARGS);

/* tile on 16 lanes where the CPU has AVX-512 (fl_cpu_avx512): MR rows × up to NV5 16-lane vectors, 24
 * accumulators. Each sum is made in tile's order (one FMA per m, m0 first, from zero), so the same bits. B's last
 * vector is loaded under the store's mask: its row may end 8 floats into it. */
#define NV5 4
static inline __attribute__((always_inline)) FL_CPU_AVX512 void tile512(const int mr, const int nv, const float *a,
                                                                      int64_t ars, int64_t ams, int64_t m0, int64_t m1,
                                                                      const float *b, int64_t ldb, float *c,
                                                                      int64_t ldc, __mmask16 last) {
    __m512 acc[MR][NV5];
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++)
        #pragma GCC unroll 8
        for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    #pragma GCC unroll 4   /* as tile's */
    for (int64_t m = m0; m < m1; m++) {
        __m512 bv[NV5];
        #pragma GCC unroll 8
        for (int v = 0; v < nv; v++)
            bv[v] = _mm512_maskz_loadu_ps(v < nv - 1 ? (__mmask16)0xFFFF : last, b + m * ldb + 16 * v);
        #pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            const __m512 av = _mm512_set1_ps(a[r * ars + m * ams]);
            #pragma GCC unroll 8
            for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
        #pragma GCC unroll 8
        for (int v = 0; v < nv - 1; v++) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
        _mm512_mask_storeu_ps(c + r * ldc + 16 * (nv - 1), last, acc[r][nv - 1]);
    }
}

#define TILE512_NV(R)                                    \
    switch (nv) {                                        \
    case 1: tile512(R, 1, TILE_ARGS); break;             \
    case 2: tile512(R, 2, TILE_ARGS); break;             \
    case 3: tile512(R, 3, TILE_ARGS); break;             \
    default: tile512(R, 4, TILE_ARGS); break;            \
    }

/* band's work on 16 lanes (tile512). */
__attribute__((noinline)) FL_CPU_AVX512 static void band512(int mr, int64_t n, const float *a, int64_t ars, int64_t ams,
                                                            int64_t m0, int64_t m1, const float *b0, int64_t ldb,
                                                            float *c0, int64_t ldc) {
    for (int64_t n0 = 0; n0 < n; n0 += 16 * NV5) {
        const int64_t nn = n - n0 < 16 * NV5 ? n - n0 : 16 * NV5;
        const int nv = (int)((nn + 15) / 16);
        const __mmask16 last = fl_avx512_lanes(nn - 16 * (nv - 1));
        const float *b = b0 + n0;
        float *c = c0 + n0;
        PER_MR(TILE512_NV)
    }
}

/* Rows [0, mr) of C[·, 0..n) (mr ≤ MR), ldc-strided fp32, over the summed range [m0, m1); on 16 lanes (wide) or 8,
 * the same bits. */
static void band(bool wide, int mr, int64_t n, const float *a, int64_t ars, int64_t ams, int64_t m0, int64_t m1,
                 const float *b0, int64_t ldb, float *c0, int64_t ldc) {
    if (wide) {
        band512(mr, n, a, ars, ams, m0, m1, b0, ldb, c0, ldc);
        return;
    }
    for (int64_t n0 = 0; n0 < n; n0 += 8 * NVMAX) {
        const int64_t nn = n - n0 < 8 * NVMAX ? n - n0 : 8 * NVMAX;
        const int nv = (int)((nn + 7) / 8);
        const __m256i last = fl_avx2_lanes(nn - 8 * (nv - 1));
        const float *b = b0 + n0;
        float *c = c0 + n0;
        PER_MR(TILE_NV)
    }
}

/* fl_nn_expf (cpu_nn_internal.h) on 8 lanes, with fused multiply-adds (~1 ulp as well, like the AVX512_BF16
 * family's exp16); 2^k is applied as fl_nn_expf applies it, as two exact power-of-two factors. */
static inline __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.7228394f), lo = _mm256_set1_ps(-104.0f), c = _mm256_set1_ps(12582912.0f);
    const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);   /* NaN → lo here, restored at the end */
    const __m256 k = _mm256_sub_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), c), c);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    return fl_avx2_exp_finish(y, k, x, lo, hi);
}

/* The maximum and the sum of 8 lanes, in every lane (a tree: lanes l and l + 4, then l + 2, then l + 1). */
static inline __m256 hmax8(__m256 v) {
    v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_max_ps(v, _mm256_permute_ps(v, 0x4e));
    return _mm256_max_ps(v, _mm256_permute_ps(v, 0xb1));
}
static inline __m256 hsum8(__m256 v) {
    v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_add_ps(v, _mm256_permute_ps(v, 0x4e));
    return _mm256_add_ps(v, _mm256_permute_ps(v, 0xb1));
}

/* v's first n lanes to p (n ≥ 8: all 8, by an unmasked store). */
static inline void store_n(float *p, int64_t n, __m256 v) {
    if (n >= 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, fl_avx2_lanes(n), v);
}

/* exp8 on 16 lanes, operation for operation (2^k by the same two factors): the same bits per lane. */
FL_CPU_AVX512 static inline __m512 exp16(__m512 x) {
    __m512 k;
    __m512 y = fl_exp16_poly(x, &k);
    const __m512i ki = _mm512_cvttps_epi32(k), k1 = _mm512_srai_epi32(ki, 1), b = _mm512_set1_epi32(127);
    const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, b), 23));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_sub_epi32(ki, k1), b), 23));
    return fl_exp16_fix(_mm512_mul_ps(_mm512_mul_ps(y, s1), s2), x);
}

/* softmax_tile's exponential pass for one row on 16 lanes: r[j] ← e^(scale·r[j] − m) over j < n (stored there only),
 * and Σ in softmax_tile's 8-lane order: each 16's lower half, then its upper half (zeros past n, as the 8-lane
 * loop's masked lanes, and a +0 added to a lane changes nothing). Returns the 8 lanes' sum vector. */
FL_CPU_AVX512 static __m256 exp_row16(float *r, int64_t n, float scale, __m256 m8) {
    const __m512 sc = _mm512_set1_ps(scale), m = _mm512_broadcast_f32x8(m8);
    __m256 vs = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 mk = fl_avx512_lanes(n - j);
        const __m512 e = _mm512_maskz_mov_ps(mk, exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(mk, r + j), sc), m)));
        _mm512_mask_storeu_ps(r + j, mk, e);
        vs = _mm256_add_ps(vs, _mm512_castps512_ps256(e));
        vs = _mm256_add_ps(vs, _mm512_extractf32x8_ps(e, 1));
    }
    return vs;
}

/* Rows [i0, i1) (at most MR) of a head's [T, T] scores, s pointing at row i0 (rows T apart): s[i, j] ←
 * softmax_j(scale·s[i, j]) over j < n_i (i + 1 when causal, else T), exact zeros for j in [n_i, T)
 * (attn_softmax_row of cpu_nn_internal.h, with tree reductions), and (!keep: the bf16 family) row i of pr (ldp
 * apart) over [0, w) ← the row rounded to bf16, zeros from n_i (w a multiple of 8, ≥ every n_i); the fp32 family
 * reads P from s itself. The rows go through each step together so that their reductions overlap. st (or NULL):
 * each row's max and 1/Σ at st[2i], st[2i + 1], from which softmax_redo makes the same row. */
static void softmax_tile(float *s, int64_t i0, int64_t i1, int64_t T, int causal, float scale, float *pr, int64_t ldp,
                         int64_t w, bool keep, float *st, bool wide) {
    const __m256 sc = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    __m256 m[MR], inv[MR];
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n = causal ? i + 1 : T;
        const float *r = s + (i - i0) * T;
        __m256 vm = ninf;
        for (int64_t j = 0; j < n; j += 8) {
            __m256 x = _mm256_mul_ps(fl_avx2_load_n(r + j, n - j), sc);
            if (n - j < 8) x = _mm256_blendv_ps(ninf, x, _mm256_castsi256_ps(fl_avx2_lanes(n - j)));
            vm = _mm256_max_ps(x, vm);
        }
        m[i - i0] = hmax8(vm);
    }
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n = causal ? i + 1 : T;
        float *r = s + (i - i0) * T;
        __m256 vs = _mm256_setzero_ps();
        if (wide) vs = exp_row16(r, n, scale, m[i - i0]);   /* (the pass below reads only [0, n) of the row) */
        else
            for (int64_t j = 0; j < n; j += 8) {
                __m256 e = exp8(_mm256_sub_ps(_mm256_mul_ps(fl_avx2_load_n(r + j, n - j), sc), m[i - i0]));
                if (n - j < 8) e = _mm256_and_ps(e, _mm256_castsi256_ps(fl_avx2_lanes(n - j)));
                store_n(r + j, T - j, e);
                vs = _mm256_add_ps(vs, e);
            }
        inv[i - i0] = _mm256_div_ps(_mm256_set1_ps(1.0f), hsum8(vs));
        if (st) {
            st[2 * i] = _mm256_cvtss_f32(m[i - i0]);
            st[2 * i + 1] = _mm256_cvtss_f32(inv[i - i0]);
        }
    }
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n = causal ? i + 1 : T;
        float *r = s + (i - i0) * T, *d = keep ? NULL : pr + i * ldp;
        const int64_t wd = keep ? 0 : w;
        int64_t j = 0;
        for (; j < n; j += 8) {
            __m256 x = _mm256_mul_ps(fl_avx2_load_n(r + j, n - j), inv[i - i0]);
            if (n - j < 8) x = _mm256_and_ps(x, _mm256_castsi256_ps(fl_avx2_lanes(n - j)));
            store_n(r + j, T - j, x);
            if (!keep) _mm256_storeu_ps(d + j, r16(x));
        }
        for (; j < T || j < wd; j += 8) {
            if (j < T) store_n(r + j, T - j, _mm256_setzero_ps());
            if (j < wd) _mm256_storeu_ps(d + j, _mm256_setzero_ps());
        }
    }
}

/* softmax_tile's fp32 rows again from the same scores (s at row i0) and its statistics st: the same operations on
 * the same values (e^x from the scaled score less the row's max, masked, times 1/Σ, masked), so the same bits,
 * without its reductions. */
static void softmax_redo(float *s, int64_t i0, int64_t i1, int64_t T, int causal, float scale, const float *st) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n = causal ? i + 1 : T;
        float *r = s + (i - i0) * T;
        const __m256 m = _mm256_set1_ps(st[2 * i]), inv = _mm256_set1_ps(st[2 * i + 1]);
        int64_t j = 0;
        for (; j < n; j += 8) {
            __m256 e = exp8(_mm256_sub_ps(_mm256_mul_ps(fl_avx2_load_n(r + j, n - j), sc), m));
            if (n - j < 8) e = _mm256_and_ps(e, _mm256_castsi256_ps(fl_avx2_lanes(n - j)));
            __m256 x = _mm256_mul_ps(e, inv);
            if (n - j < 8) x = _mm256_and_ps(x, _mm256_castsi256_ps(fl_avx2_lanes(n - j)));
            store_n(r + j, T - j, x);
        }
        for (; j < T; j += 8) store_n(r + j, T - j, _mm256_setzero_ps());
    }
}

/* Rows [i0, i1) of dS from their rows of P (pt at row i0, T apart) and dP (ds, T apart, from row i0): dS[j] =
 * scale·p[j]·(d[j] − Σ p·d) over the live length of p (up to its last nonzero probability, below i + 1 when
 * causal, else T), zeros beyond (cpu_nn_internal.h's attn_dsoftmax_row with tree reductions). Written only
 * as operands, row i of sr (ldp apart) over [0, w), w a multiple of 8 that covers every live length: in the bf16
 * family rounded, with P's row rounded into pr for the key tiles (its entries past T as zeros); in the fp32
 * family (keep) as they are, the key tiles reading P from att. */
static void dsoftmax_tile(const float *pt, const float *ds, int64_t i0, int64_t i1, int64_t T, int causal, float scale,
                          float *sr, float *pr, int64_t ldp, int64_t w, bool keep) {
    const __m256 sc = _mm256_set1_ps(scale);
    __m256 dot[MR];
    int64_t live[MR];
    for (int64_t i = i0; i < i1; i++) {
        const float *p = pt + (i - i0) * T, *d = ds + (i - i0) * T;
        const int64_t n = attn_live_len(p, causal ? i + 1 : T);
        __m256 vd = _mm256_setzero_ps();
        for (int64_t j = 0; j < n; j += 8)
            vd = _mm256_fmadd_ps(fl_avx2_load_n(p + j, n - j), fl_avx2_load_n(d + j, n - j), vd);
        dot[i - i0] = hsum8(vd);
        live[i - i0] = n;
    }
    for (int64_t i = i0; i < i1; i++) {
        const float *p = pt + (i - i0) * T, *d = ds + (i - i0) * T;
        const int64_t n = live[i - i0];
        float *g = sr + i * ldp, *q = keep ? NULL : pr + i * ldp;
        for (int64_t j = 0; j < w; j += 8) {
            const __m256 P = j < T ? fl_avx2_load_n(p + j, T - j) : _mm256_setzero_ps();
            __m256 x = _mm256_setzero_ps();
            if (j < n) {
                x = _mm256_mul_ps(_mm256_mul_ps(sc, P), _mm256_sub_ps(fl_avx2_load_n(d + j, n - j), dot[i - i0]));
                if (n - j < 8) x = _mm256_and_ps(x, _mm256_castsi256_ps(fl_avx2_lanes(n - j)));
            }
            _mm256_storeu_ps(g + j, op(x, keep));
            if (!keep) _mm256_storeu_ps(q + j, r16(P));
        }
    }
}

/* The packers read a head's rows lds floats apart: in the GPT's packed qkv, 256 bytes of each 3 KiB token row,
 * so nearly every row starts in another 4 KiB page, where the hardware prefetchers stop (cpu_nn_attn_bf16.c).
 * Each packer asks for the lines of the row PF_ROWS ahead while it converts the current one. */
#define PF_ROWS 8
static inline void fetch_row(const float *row, int64_t cols) {
    for (int64_t c = 0; c < cols; c += 16) _mm_prefetch((const char *)(row + c), _MM_HINT_T0);
}

/* The next head's rows (the thread's next job under the static schedule), asked for a share at a time while this head
 * computes, so that its packers find them in cache: the packers' own look-ahead (PF_ROWS) came too late for rows
 * that come from memory, and their loads held nearly all of fwd_one's and bwd_one's own time in the GPT's te step
 * (docs/performance.md, "The te step outside its GEMMs on Zen 3, and attention's next head fetched early"). Up to
 * four inputs of T rows of D floats (ldi apart) and up to three outputs (ldo apart), whose lines are asked for
 * writing. Only prefetches: no bit changes (test_nn_kernels' nn_sdpa_fma_fetch_same_bits). */
typedef struct { const float *in[4], *out[3]; int64_t ldi[4], ldo[3]; int nin, nout; } next_rows;
static inline void fetch_share(const next_rows *nx, int64_t T, int64_t D, int64_t part, int64_t parts) {
    if (!nx) return;
    const int64_t r0 = part * T / parts, r1 = (part + 1) * T / parts;
    for (int i = 0; i < nx->nin; i++)
        for (int64_t r = r0; r < r1; r++) fetch_row(nx->in[i] + r * nx->ldi[i], D);
    for (int i = 0; i < nx->nout; i++)
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = 0; c < D; c += 16) __builtin_prefetch(nx->out[i] + r * nx->ldo[i] + c, 1);
}

/* dst[r, 0..ldd) = src[r, 0..cols) as operands (operand_row), zeros up to ldd: an A operand (ars = ldd, ams = 1)
 * or a B operand with rows along the summed dimension. */
static inline __attribute__((always_inline)) void pack_rows(const float *src, int64_t rows, int64_t cols, int64_t lds,
                                                            float *dst, int64_t ldd, bool keep) {
    for (int64_t r = 0; r < rows; r++) {
        if (r + PF_ROWS < rows) fetch_row(src + (r + PF_ROWS) * lds, cols);
        operand_row(src + r * lds, cols, dst + r * ldd, ldd, keep);
    }
}

/* dst[c, r] = src[r, c] as operands, for c < cols and r < rows, zeros for r up to rows rounded up to 8: srcᵀ as a B
 * operand (ldd ≥ that, a multiple of 8). Blocks of 8 × 8 are transposed in registers. */
static inline __attribute__((always_inline)) void pack_t(const float *src, int64_t rows, int64_t cols, int64_t lds,
                                                         float *dst, int64_t ldd, bool keep) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
        for (int64_t f = r0 + 8; f < r0 + 16 && f < rows; f++) fetch_row(src + f * lds, cols);   /* the next block */
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            __m256 u[8];
            for (int i = 0; i < 8; i++)
                u[i] = r0 + i < rows ? op(fl_avx2_load_n(src + (r0 + i) * lds + c0, cols - c0), keep) : _mm256_setzero_ps();
            fl_avx2_transpose8(u);
            for (int64_t m = 0; m < 8 && c0 + m < cols; m++) _mm256_storeu_ps(dst + (c0 + m) * ldd + r0, u[m]);
        }
    }
}

/* The shapes of one call: T and D rounded up to 8 (the packed rows' lengths). */
typedef struct { int64_t T, D, Tp, Dp; } shape;
static shape shape_of(int64_t T, int64_t D) { return (shape){ T, D, (T + 7) & ~(int64_t)7, (D + 7) & ~(int64_t)7 }; }
/* Key columns that query rows [0, i1) need: up to i1 rounded up to 8 when causal (the row passes' vectors mask
 * the rest), all T otherwise. */
static inline int64_t keys_for(const shape *s, int64_t i1, int causal) {
    const int64_t n = (i1 + 7) & ~(int64_t)7;
    return causal && n < s->T ? n : s->T;
}

/* One head; q, k, v rows ldi apart, o rows ldo apart; w: fwd_floats(s, !att) floats. keep: the fp32 family
 * (operands as they are, P read from att); else bf16. The probabilities go to att (T × T), or with att NULL (bf16
 * only) each tile's scores and probabilities to the thread's MR rows after w's buffers and the rows' statistics to
 * st (T × 2), from which bwd_head makes them again. Inlined into each family's caller with keep a constant. */
static inline __attribute__((always_inline)) void fwd_head(const float *q, const float *k, const float *v, int64_t ldi,
                                                           float *o, int64_t ldo, float *att, float *st, const shape *s,
                                                           float scale, int causal, float *w, const bool keep,
                                                           bool wide, const next_rows *nx) {
    const int64_t T = s->T, D = s->D, Tp = s->Tp, Dp = s->Dp, parts = (T + MR - 1) / MR;
    float *qr = w, *kt = qr + T * Dp, *vr = kt + D * Tp, *pr = vr + T * Dp, *sc = pr + T * Tp;
    pack_rows(q, T, D, ldi, qr, Dp, keep);
    pack_t(k, T, D, ldi, kt, Tp, keep);
    pack_rows(v, T, D, ldi, vr, Dp, keep);
    for (int64_t i0 = 0; i0 < T; i0 += MR) {
        const int mr = (int)(T - i0 < MR ? T - i0 : MR);
        const int64_t i1 = i0 + mr, nk = keys_for(s, i1, causal), kend = causal ? i1 : T;
        float *si = att ? att + i0 * T : sc;   /* the tile's rows of S, then P (att NULL, st NULL: P kept nowhere) */
        fetch_share(nx, T, D, i0 / MR, parts);
        band(wide, mr, nk, qr + i0 * Dp, Dp, 1, 0, D, kt, Tp, si, T);   /* S = Q·Kᵀ */
        softmax_tile(si, i0, i1, T, causal, scale, pr, Tp, (kend + 7) & ~(int64_t)7, keep, att ? NULL : st, wide);
        if (keep) band(wide, mr, D, si, T, 1, 0, kend, vr, Dp, o + i0 * ldo, ldo);   /* O = P·V */
        else band(wide, mr, D, pr + i0 * Tp, Tp, 1, 0, kend, vr, Dp, o + i0 * ldo, ldo);
    }
}

/* One head; q, k, v rows ldi apart, dout rows ldo apart, dq, dk, dv rows ldd apart; w: bwd_floats(s, !att) floats,
 * MR·T of them the tile's rows of dP. P is read from att, or with att NULL (bf16 only) made again a query tile at a
 * time from the forward's statistics st (fwd_head): the scores by the forward's product on the forward's packing of
 * q and k (qr is that packing), then softmax_redo, so every bit as the forward had it. */
static inline __attribute__((always_inline)) void bwd_head(const float *q, const float *k, const float *v, int64_t ldi,
                                                           const float *att, const float *st, const float *dout,
                                                           int64_t ldo, float *dq, float *dk, float *dv, int64_t ldd,
                                                           const shape *s, float scale, int causal, float *w,
                                                           const bool keep, bool wide, const next_rows *nx) {
    const int64_t T = s->T, D = s->D, Tp = s->Tp, Dp = s->Dp, parts = 2 * ((T + MR - 1) / MR);
    float *dor = w, *vt = dor + T * Dp, *kr = vt + D * Tp, *qr = kr + T * Dp, *pr = qr + T * Dp, *sr = pr + T * Tp;
    float *ds = sr + T * Tp, *kt = ds + MR * T, *pm = kt + D * Tp;   /* kt, pm (MR rows of P): att NULL */
    pack_rows(dout, T, D, ldo, dor, Dp, keep);
    pack_t(v, T, D, ldi, vt, Tp, keep);
    pack_rows(k, T, D, ldi, kr, Dp, keep);
    pack_rows(q, T, D, ldi, qr, Dp, keep);
    if (!att) pack_t(k, T, D, ldi, kt, Tp, keep);
    /* query tiles: dP = dO·Vᵀ into ds, dS (row pass) and (bf16) P rounded into their rows, dQ = dS·K. Row i's
     * written rows reach the key columns of its tile's nk, which covers every key tile that reads them below. */
    for (int64_t i0 = 0; i0 < T; i0 += MR) {
        const int mr = (int)(T - i0 < MR ? T - i0 : MR);
        const int64_t i1 = i0 + mr, nk = keys_for(s, i1, causal), kend = causal ? i1 : T;
        fetch_share(nx, T, D, i0 / MR, parts);
        if (!att) {
            band(wide, mr, nk, qr + i0 * Dp, Dp, 1, 0, D, kt, Tp, pm, T);
            softmax_redo(pm, i0, i1, T, causal, scale, st);
        }
        band(wide, mr, nk, dor + i0 * Dp, Dp, 1, 0, D, vt, Tp, ds, T);
        const float *pt = att ? att + i0 * T : pm;   /* the tile's rows of P */
        dsoftmax_tile(pt, ds, i0, i1, T, causal, scale, sr, pr, Tp, (nk + 7) & ~(int64_t)7, keep);
        band(wide, mr, D, sr + i0 * Tp, Tp, 1, 0, kend, kr, Dp, dq + i0 * ldd, ldd);
    }
    /* key tiles: dV = Pᵀ·dO and dK = dSᵀ·Q over the query rows that see them */
    for (int64_t j0 = 0; j0 < T; j0 += MR) {
        const int mr = (int)(T - j0 < MR ? T - j0 : MR);
        const int64_t m0 = causal ? j0 : 0;
        fetch_share(nx, T, D, parts / 2 + j0 / MR, parts);
        if (keep) band(wide, mr, D, att + j0, 1, T, m0, T, dor, Dp, dv + j0 * ldd, ldd);
        else band(wide, mr, D, pr + j0, 1, Tp, m0, T, dor, Dp, dv + j0 * ldd, ldd);
        band(wide, mr, D, sr + j0, 1, Tp, m0, T, qr, Dp, dk + j0 * ldd, ldd);
    }
}

/* Floats of a thread's buffers: forward q, kᵀ, v, P, and with the statistics (stats) MR rows of scores; backward
 * dO, vᵀ, k, q, P, dS, MR rows of dP, and with the statistics kᵀ and MR rows of P. */
static int64_t fwd_floats(const shape *s, bool stats) {
    return 2 * s->T * s->Dp + s->D * s->Tp + s->T * s->Tp + (stats ? MR * s->T : 0);
}
static int64_t bwd_floats(const shape *s, bool stats) {
    return 3 * s->T * s->Dp + s->D * s->Tp + 2 * s->T * s->Tp + MR * s->T + (stats ? s->D * s->Tp + MR * s->T : 0);
}

_Atomic bool fl_cpu_attn_fma512_allowed = true;
_Atomic bool fl_cpu_attn_fetch_next = true;
/* The products on 16 lanes: where the CPU has AVX-512 and the switch allows it. */
static bool wide_here(void) { return fl_cpu_attn_fma512_allowed && fl_cpu_avx512(); }

/* Each head's job, on the thread that runs it, with that thread's zeroed buffer of `floats` floats. */
typedef struct {
    const float *q, *k, *v, *att, *dout;   /* att: P, read by the backward (NULL: made again from st) */
    float *out, *p, *dq, *dk, *dv;          /* p: where the forward writes P (NULL: the statistics to st) */
    float *st;                              /* [B·H, T, 2]: each row's max and 1/Σ (p, att NULL) */
    fl_attn_layout in, out_l, din;
    int64_t H;
    shape s;
    float scale;
    int causal;
    bool keep;   /* the fp32 family: operands as they are */
    bool wide;   /* the products on 16 lanes (band512) */
    bool fetch;  /* the next head's rows fetched during each head (fetch_share) */
    int64_t BH;
} heads_job;
typedef void head_fn(const heads_job *J, int64_t bh, float *w);

static inline int64_t head_at(fl_attn_layout l, int64_t bh, int64_t H) { return (bh / H) * l.sb + (bh % H) * l.sh; }

/* Each family's copy of a head's code (keep a constant in each call). */
static void fwd_one(const heads_job *J, int64_t bh, float *w) {
    const int64_t hi = head_at(J->in, bh, J->H);
    next_rows nx;
    const bool next = J->fetch && bh + 1 < J->BH;
    if (next) {
        const int64_t ni = head_at(J->in, bh + 1, J->H);
        nx = (next_rows){ .in = { J->q + ni, J->k + ni, J->v + ni }, .ldi = { J->in.st, J->in.st, J->in.st }, .nin = 3,
                          .out = { J->out + head_at(J->out_l, bh + 1, J->H) }, .ldo = { J->out_l.st }, .nout = 1 };
    }
#define FWD_HEAD(KEEP)                                                                                                  \
    fwd_head(J->q + hi, J->k + hi, J->v + hi, J->in.st, J->out + head_at(J->out_l, bh, J->H), J->out_l.st,            \
             J->p ? J->p + bh * J->s.T * J->s.T : NULL, J->p || !J->st ? NULL : J->st + bh * 2 * J->s.T, &J->s,     \
             J->scale,                                                                                           \
             J->causal, w, KEEP, J->wide, next ? &nx : NULL)
    if (J->keep) FWD_HEAD(true);
    else FWD_HEAD(false);
#undef FWD_HEAD
}
static void bwd_one(const heads_job *J, int64_t bh, float *w) {
    const int64_t hi = head_at(J->in, bh, J->H), hd = head_at(J->din, bh, J->H);
    next_rows nx;
    const bool next = J->fetch && bh + 1 < J->BH;
    if (next) {
        const int64_t ni = head_at(J->in, bh + 1, J->H), nd = head_at(J->din, bh + 1, J->H);
        nx = (next_rows){ .in = { J->dout + head_at(J->out_l, bh + 1, J->H), J->q + ni, J->k + ni, J->v + ni },
                          .ldi = { J->out_l.st, J->in.st, J->in.st, J->in.st }, .nin = 4,
                          .out = { J->dq + nd, J->dk + nd, J->dv + nd }, .ldo = { J->din.st, J->din.st, J->din.st },
                          .nout = 3 };
    }
#define BWD_HEAD(KEEP)                                                                                                  \
    bwd_head(J->q + hi, J->k + hi, J->v + hi, J->in.st, J->att ? J->att + bh * J->s.T * J->s.T : NULL,             \
             J->att ? NULL : J->st + bh * 2 * J->s.T, J->dout + head_at(J->out_l, bh, J->H), J->out_l.st, J->dq + hd, \
             J->dk + hd, J->dv + hd, J->din.st, &J->s, J->scale, J->causal, w, KEEP, J->wide, next ? &nx : NULL)
    if (J->keep) BWD_HEAD(true);
    else BWD_HEAD(false);
#undef BWD_HEAD
}

/* The B·H heads on the threads (one thread below FL_NN_PAR_MIN of work). */
static fl_status run_heads(const heads_job *J, int64_t BH, int64_t floats, head_fn *fn) {
    const size_t bytes = ((size_t)floats * sizeof(float) + 63) & ~(size_t)63;
    bool oom = false;
    FL_PARALLEL(BH > 1 && BH * J->s.T * J->s.T * J->s.D > FL_NN_PAR_MIN, reduction(||:oom),
    {
        float *w = aligned_alloc(64, bytes > 0 ? bytes : 64);
        oom = !w;
        if (w) memset(w, 0, bytes);
        FL_PRAGMA(omp for schedule(static))
        for (int64_t bh = 0; bh < BH; bh++)
            if (w) fn(J, bh, w);
        free(w);
    });
    return oom ? FL_ERR(FL_ENOMEM, "attention: out of memory for %s head buffers", J->keep ? "fp32" : "bf16") : FL_OK;
}

/* P to att, or with att NULL (bf16: !keep) each row's statistics to st. */
static fl_status fwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, float *out,
                        fl_attn_layout out_l, float *att, float *st, int64_t B, int64_t H, int64_t T, int64_t D,
                        float scale, int causal, bool keep) {
    const heads_job J = { .q = q, .k = k, .v = v, .p = att, .st = st, .out = out, .in = in, .out_l = out_l, .H = H,
                          .s = shape_of(T, D), .scale = scale, .causal = causal, .keep = keep, .wide = wide_here(),
                          .fetch = fl_cpu_attn_fetch_next, .BH = B * H };
    return run_heads(&J, B * H, fwd_floats(&J.s, !att), fwd_one);
}

/* From P in att, or with att NULL (bf16: !keep) from the statistics in st. */
static fl_status bwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, const float *att,
                        const float *st, const float *dout, fl_attn_layout out_l, float *dq, float *dk, float *dv,
                        fl_attn_layout din, int64_t B, int64_t H, int64_t T, int64_t D, float scale, int causal,
                        bool keep) {
    const heads_job J = { .q = q, .k = k, .v = v, .att = att, .st = (float *)st, .dout = dout, .dq = dq, .dk = dk,
                          .dv = dv, .in = in, .out_l = out_l, .din = din, .H = H, .s = shape_of(T, D), .scale = scale,
                          .causal = causal, .keep = keep, .wide = wide_here(), .fetch = fl_cpu_attn_fetch_next,
                          .BH = B * H };
    return run_heads(&J, B * H, bwd_floats(&J.s, !att), bwd_one);
}

fl_status fl_cpu_attn_fma_fwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, float *out,
                                 fl_attn_layout out_l, float *att, int64_t B, int64_t H, int64_t T, int64_t D,
                                 float scale, int causal) {
    return fwd_at(q, k, v, in, out, out_l, att, NULL, B, H, T, D, scale, causal, false);
}
fl_status fl_cpu_attn_fma_bwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, const float *att,
                                 const float *dout, fl_attn_layout out_l, float *dq, float *dk, float *dv,
                                 fl_attn_layout din, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                                 int causal) {
    if (!att) return FL_ERR(FL_EINVAL, "attention backward: no probabilities given (the statistics form has its entry)");
    return bwd_at(q, k, v, in, att, NULL, dout, out_l, dq, dk, dv, din, B, H, T, D, scale, causal, false);
}

fl_status fl_cpu_attn_fma_stats_fwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, float *out,
                                       fl_attn_layout out_l, float *st, int64_t B, int64_t H, int64_t T, int64_t D,
                                       float scale, int causal) {
    return fwd_at(q, k, v, in, out, out_l, NULL, st, B, H, T, D, scale, causal, false);
}
fl_status fl_cpu_attn_fma_stats_bwd_at(const float *q, const float *k, const float *v, fl_attn_layout in,
                                       const float *st, const float *dout, fl_attn_layout out_l, float *dq, float *dk,
                                       float *dv, fl_attn_layout din, int64_t B, int64_t H, int64_t T, int64_t D,
                                       float scale, int causal) {
    if (!st) return FL_ERR(FL_EINVAL, "attention backward: no row statistics given");
    return bwd_at(q, k, v, in, NULL, st, dout, out_l, dq, dk, dv, din, B, H, T, D, scale, causal, false);
}

_Atomic bool fl_cpu_attn_f32_allowed = true;

bool fl_cpu_attn_f32_available(void) {
    return fl_cpu_attn_f32_allowed && fl_cpu_attn_fma_usable();
}

fl_status fl_cpu_attn_f32_fwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, float *out,
                                 fl_attn_layout out_l, float *att, int64_t B, int64_t H, int64_t T, int64_t D,
                                 float scale, int causal) {
    return fwd_at(q, k, v, in, out, out_l, att, NULL, B, H, T, D, scale, causal, true);
}
fl_status fl_cpu_attn_f32_bwd_at(const float *q, const float *k, const float *v, fl_attn_layout in, const float *att,
                                 const float *dout, fl_attn_layout out_l, float *dq, float *dk, float *dv,
                                 fl_attn_layout din, int64_t B, int64_t H, int64_t T, int64_t D, float scale,
                                 int causal) {
    return bwd_at(q, k, v, in, att, NULL, dout, out_l, dq, dk, dv, din, B, H, T, D, scale, causal, true);
}
