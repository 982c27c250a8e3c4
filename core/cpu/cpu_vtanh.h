/* cpu_vtanh.h — tanh's AVX-512 map split by branch: each element computes only its own branch of fl_vm_tanh
 * (cpu_vmath.h), where the vectorised loop computed both for every element (the polynomial below |x| = 0.9, the
 * exponential and the division above) and selected one. A block's |x| above the branch point are packed together
 * (vcompressps), the far branch computed on them 16 at a time, and put back in place (vexpandps) over the near
 * branch's values; the sign and a NaN are restored as fl_vm_tanh restores them. Every lane goes through the same
 * operations in the same order as in fl_vm_tanh, so the bits are fl_vm_tanh's (checked over all 2^32 floats against
 * the AVX-512 and AVX2 loops: docs/performance.md, "index_select, gather and tanh (stop 100)"). The AVX2 copy
 * (FL_VM_MAPS's map256) keeps the loop with both branches. Needs cpu_internal.h (FL_CPU_AVX512) and cpu_vmath.h. */
#ifndef FL_CPU_VTANH_H
#define FL_CPU_VTANH_H
#include <stdbool.h>
#include <stdint.h>
#ifdef __x86_64__
#include <immintrin.h>

/* elements a block: the packed far values and the masks stay in L1 */
#define FL_VTANH_BLOCK 512
/* how far ahead of the put-back pass x is prefetched, and y for writing (the packing pass alone waited on memory,
 * the other two found it idle: without these the split was no faster on x [4096, 1024] than the loop). Past the
 * call's n too: the elementwise op calls the map 4096 elements at a time, and a prefetch stopped at n left each
 * call's first 1024 cold (8% less time than the loop instead of 19%, in a C program). A prefetch never faults, so
 * one past the end of an allocation only fetches a line or is dropped (its address made as an integer). */
#define FL_VTANH_AHEAD 1024

/* fl_vm_tanh_near on 16 lanes: the same multiply-adds */
FL_CPU_AVX512 static inline __attribute__((always_inline)) __m512 fl_vtanh_near16(__m512 a) {
    const __m512 a2 = _mm512_mul_ps(a, a);
    __m512 p = _mm512_set1_ps(FL_VM_TANH_P7);
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(FL_VM_TANH_P6));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(FL_VM_TANH_P5));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(FL_VM_TANH_P4));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(FL_VM_TANH_P3));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(FL_VM_TANH_P2));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(FL_VM_TANH_P1));
    p = _mm512_fmadd_ps(p, a2, _mm512_set1_ps(FL_VM_TANH_P0));
    return _mm512_fmadd_ps(_mm512_mul_ps(a, a2), p, a);
}

/* the far branch over n packed values in place (n a multiple of 16: the caller zeroes the pad) */
FL_CPU_AVX512 static inline __attribute__((always_inline)) void fl_vtanh_far_n(float *f, int64_t n) {
    _Pragma("omp simd")
    for (int64_t i = 0; i < n; i++) f[i] = fl_vm_tanh_far(f[i]);
}

/* y[i] = fl_vm_tanh(x[i]) for i < n; y may be x */
FL_CPU_AVX512 static inline void fl_vtanh_map512(const float *x, float *y, int64_t n) {
    float fa[FL_VTANH_BLOCK + 16] __attribute__((aligned(64)));
    __mmask16 km[FL_VTANH_BLOCK / 16];
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff)), edge = _mm512_set1_ps(FL_VM_TANH_EDGE);
    int64_t i0 = 0;
    while (n - i0 >= 16) {
        const int64_t m = (n - i0 < FL_VTANH_BLOCK ? n - i0 : FL_VTANH_BLOCK) & ~(int64_t)15;
        const float *xb = x + i0;
        float *yb = y + i0;
        /* the far lanes' |x| packed (y is written only in the last pass, each vector after x's is read: y may be x) */
        int nf = 0;
        for (int64_t i = 0; i < m; i += 16) {
            const __m512 a = _mm512_and_ps(_mm512_loadu_ps(xb + i), absm);
            const __mmask16 kf = _mm512_cmp_ps_mask(a, edge, _CMP_NLT_UQ);   /* !(a < edge): fl_vm_tanh's far */
            _mm512_storeu_ps(fa + nf, _mm512_maskz_compress_ps(kf, a));   /* (a store to memory by mask is slow) */
            nf += __builtin_popcount(kf);
            km[i / 16] = kf;
        }
        _mm512_storeu_ps(fa + nf, _mm512_setzero_ps());
        fl_vtanh_far_n(fa, (nf + 15) & ~15);
        int off = 0;
        for (int64_t i = 0; i < m; i += 16) {
            __builtin_prefetch((const void *)((uintptr_t)(xb + i) + FL_VTANH_AHEAD * sizeof(float)));
            __builtin_prefetch((const void *)((uintptr_t)(yb + i) + FL_VTANH_AHEAD * sizeof(float)), 1);
            const __m512 v = _mm512_loadu_ps(xb + i);
            /* the near branch for every lane, the far lanes' values put over it */
            __m512 t = fl_vtanh_near16(_mm512_and_ps(v, absm));
            t = _mm512_mask_expand_ps(t, km[i / 16], _mm512_loadu_ps(fa + off));
            off += __builtin_popcount(km[i / 16]);
            t = _mm512_or_ps(t, _mm512_andnot_ps(absm, v));   /* copysignf(t, x): t's sign bit is clear */
            t = _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);   /* a NaN stays itself */
            _mm512_storeu_ps(yb + i, t);
        }
        i0 += m;
    }
    for (; i0 < n; i0++) y[i0] = fl_vm_tanh(x[i0]);
}
#endif

/* y[i] = fl_vm_tanh(x[i]): the split map where wide (fl_cpu_avx512()), else the AVX2 loop with both branches */
static inline __attribute__((always_inline)) void fl_vtanh_map256(const float *x, float *y, int64_t n) {
    _Pragma("omp simd")
    for (int64_t i = 0; i < n; i++) y[i] = fl_vm_tanh(x[i]);
}
static inline void fl_vtanh_map(const float *x, float *y, int64_t n, bool wide) {
#ifdef __x86_64__
    if (wide) { fl_vtanh_map512(x, y, n); return; }
#endif
    (void)wide;
    fl_vtanh_map256(x, y, n);
}
#endif
