/* cpu_gelu_erf.c — the exact GELU's forward v·Φ(v) on AVX2, with each 8-lane block's lanes sorted by Φ's form:
 * cpu_vmath.h's fl_vm_normal_cdf takes erf's short polynomial below |v|/√2 = 0.5 and erfc's (an exponential, a
 * division, a degree-9 polynomial) from there; a loop that computes both for every lane and selects spent most of its
 * time on the erfc side of lanes that did not want it (a lane of normal data takes either side at random, so no whole
 * vector ever skips one). Here a tile's erfc lanes are packed together (a permutation per block, from a table), run
 * through erfc's side alone, and put back; every lane still gets fl_vm_normal_cdf's operations in its order, so the
 * bits are the scalar function's (tests/c/test_vmath.c: test gelu_erf_avx2_*). docs/performance.md, "The exact
 * GELU's forward on Zen 3 (stop 105)". The AVX-512 copy (FL_VM_MAPS's map512) is not changed. */
#include "cpu_nn_internal.h"
#include "cpu_vmath.h"
#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>

/* For each mask of 8 lanes, the permutation that packs the set lanes first (PACK: the k-th set lane in nibble k) and
 * the one that puts a packed run back (UNPACK: in nibble i, the rank of lane i among the set lanes); vpermps reads an
 * index's low 3 bits, so a nibble shifted down to bit 0 is an index as it stands. */
static const uint32_t PACK[256] = {
    0x00000000, 0x00000000, 0x00000001, 0x00000010, 0x00000002, 0x00000020, 0x00000021, 0x00000210,
    0x00000003, 0x00000030, 0x00000031, 0x00000310, 0x00000032, 0x00000320, 0x00000321, 0x00003210,
    0x00000004, 0x00000040, 0x00000041, 0x00000410, 0x00000042, 0x00000420, 0x00000421, 0x00004210,
    0x00000043, 0x00000430, 0x00000431, 0x00004310, 0x00000432, 0x00004320, 0x00004321, 0x00043210,
    0x00000005, 0x00000050, 0x00000051, 0x00000510, 0x00000052, 0x00000520, 0x00000521, 0x00005210,
    0x00000053, 0x00000530, 0x00000531, 0x00005310, 0x00000532, 0x00005320, 0x00005321, 0x00053210,
    0x00000054, 0x00000540, 0x00000541, 0x00005410, 0x00000542, 0x00005420, 0x00005421, 0x00054210,
    0x00000543, 0x00005430, 0x00005431, 0x00054310, 0x00005432, 0x00054320, 0x00054321, 0x00543210,
    0x00000006, 0x00000060, 0x00000061, 0x00000610, 0x00000062, 0x00000620, 0x00000621, 0x00006210,
    0x00000063, 0x00000630, 0x00000631, 0x00006310, 0x00000632, 0x00006320, 0x00006321, 0x00063210,
    0x00000064, 0x00000640, 0x00000641, 0x00006410, 0x00000642, 0x00006420, 0x00006421, 0x00064210,
    0x00000643, 0x00006430, 0x00006431, 0x00064310, 0x00006432, 0x00064320, 0x00064321, 0x00643210,
    0x00000065, 0x00000650, 0x00000651, 0x00006510, 0x00000652, 0x00006520, 0x00006521, 0x00065210,
    0x00000653, 0x00006530, 0x00006531, 0x00065310, 0x00006532, 0x00065320, 0x00065321, 0x00653210,
    0x00000654, 0x00006540, 0x00006541, 0x00065410, 0x00006542, 0x00065420, 0x00065421, 0x00654210,
    0x00006543, 0x00065430, 0x00065431, 0x00654310, 0x00065432, 0x00654320, 0x00654321, 0x06543210,
    0x00000007, 0x00000070, 0x00000071, 0x00000710, 0x00000072, 0x00000720, 0x00000721, 0x00007210,
    0x00000073, 0x00000730, 0x00000731, 0x00007310, 0x00000732, 0x00007320, 0x00007321, 0x00073210,
    0x00000074, 0x00000740, 0x00000741, 0x00007410, 0x00000742, 0x00007420, 0x00007421, 0x00074210,
    0x00000743, 0x00007430, 0x00007431, 0x00074310, 0x00007432, 0x00074320, 0x00074321, 0x00743210,
    0x00000075, 0x00000750, 0x00000751, 0x00007510, 0x00000752, 0x00007520, 0x00007521, 0x00075210,
    0x00000753, 0x00007530, 0x00007531, 0x00075310, 0x00007532, 0x00075320, 0x00075321, 0x00753210,
    0x00000754, 0x00007540, 0x00007541, 0x00075410, 0x00007542, 0x00075420, 0x00075421, 0x00754210,
    0x00007543, 0x00075430, 0x00075431, 0x00754310, 0x00075432, 0x00754320, 0x00754321, 0x07543210,
    0x00000076, 0x00000760, 0x00000761, 0x00007610, 0x00000762, 0x00007620, 0x00007621, 0x00076210,
    0x00000763, 0x00007630, 0x00007631, 0x00076310, 0x00007632, 0x00076320, 0x00076321, 0x00763210,
    0x00000764, 0x00007640, 0x00007641, 0x00076410, 0x00007642, 0x00076420, 0x00076421, 0x00764210,
    0x00007643, 0x00076430, 0x00076431, 0x00764310, 0x00076432, 0x00764320, 0x00764321, 0x07643210,
    0x00000765, 0x00007650, 0x00007651, 0x00076510, 0x00007652, 0x00076520, 0x00076521, 0x00765210,
    0x00007653, 0x00076530, 0x00076531, 0x00765310, 0x00076532, 0x00765320, 0x00765321, 0x07653210,
    0x00007654, 0x00076540, 0x00076541, 0x00765410, 0x00076542, 0x00765420, 0x00765421, 0x07654210,
    0x00076543, 0x00765430, 0x00765431, 0x07654310, 0x00765432, 0x07654320, 0x07654321, 0x76543210,
};
static const uint32_t UNPACK[256] = {
    0x00000000, 0x00000000, 0x00000000, 0x00000010, 0x00000000, 0x00000100, 0x00000100, 0x00000210,
    0x00000000, 0x00001000, 0x00001000, 0x00002010, 0x00001000, 0x00002100, 0x00002100, 0x00003210,
    0x00000000, 0x00010000, 0x00010000, 0x00020010, 0x00010000, 0x00020100, 0x00020100, 0x00030210,
    0x00010000, 0x00021000, 0x00021000, 0x00032010, 0x00021000, 0x00032100, 0x00032100, 0x00043210,
    0x00000000, 0x00100000, 0x00100000, 0x00200010, 0x00100000, 0x00200100, 0x00200100, 0x00300210,
    0x00100000, 0x00201000, 0x00201000, 0x00302010, 0x00201000, 0x00302100, 0x00302100, 0x00403210,
    0x00100000, 0x00210000, 0x00210000, 0x00320010, 0x00210000, 0x00320100, 0x00320100, 0x00430210,
    0x00210000, 0x00321000, 0x00321000, 0x00432010, 0x00321000, 0x00432100, 0x00432100, 0x00543210,
    0x00000000, 0x01000000, 0x01000000, 0x02000010, 0x01000000, 0x02000100, 0x02000100, 0x03000210,
    0x01000000, 0x02001000, 0x02001000, 0x03002010, 0x02001000, 0x03002100, 0x03002100, 0x04003210,
    0x01000000, 0x02010000, 0x02010000, 0x03020010, 0x02010000, 0x03020100, 0x03020100, 0x04030210,
    0x02010000, 0x03021000, 0x03021000, 0x04032010, 0x03021000, 0x04032100, 0x04032100, 0x05043210,
    0x01000000, 0x02100000, 0x02100000, 0x03200010, 0x02100000, 0x03200100, 0x03200100, 0x04300210,
    0x02100000, 0x03201000, 0x03201000, 0x04302010, 0x03201000, 0x04302100, 0x04302100, 0x05403210,
    0x02100000, 0x03210000, 0x03210000, 0x04320010, 0x03210000, 0x04320100, 0x04320100, 0x05430210,
    0x03210000, 0x04321000, 0x04321000, 0x05432010, 0x04321000, 0x05432100, 0x05432100, 0x06543210,
    0x00000000, 0x10000000, 0x10000000, 0x20000010, 0x10000000, 0x20000100, 0x20000100, 0x30000210,
    0x10000000, 0x20001000, 0x20001000, 0x30002010, 0x20001000, 0x30002100, 0x30002100, 0x40003210,
    0x10000000, 0x20010000, 0x20010000, 0x30020010, 0x20010000, 0x30020100, 0x30020100, 0x40030210,
    0x20010000, 0x30021000, 0x30021000, 0x40032010, 0x30021000, 0x40032100, 0x40032100, 0x50043210,
    0x10000000, 0x20100000, 0x20100000, 0x30200010, 0x20100000, 0x30200100, 0x30200100, 0x40300210,
    0x20100000, 0x30201000, 0x30201000, 0x40302010, 0x30201000, 0x40302100, 0x40302100, 0x50403210,
    0x20100000, 0x30210000, 0x30210000, 0x40320010, 0x30210000, 0x40320100, 0x40320100, 0x50430210,
    0x30210000, 0x40321000, 0x40321000, 0x50432010, 0x40321000, 0x50432100, 0x50432100, 0x60543210,
    0x10000000, 0x21000000, 0x21000000, 0x32000010, 0x21000000, 0x32000100, 0x32000100, 0x43000210,
    0x21000000, 0x32001000, 0x32001000, 0x43002010, 0x32001000, 0x43002100, 0x43002100, 0x54003210,
    0x21000000, 0x32010000, 0x32010000, 0x43020010, 0x32010000, 0x43020100, 0x43020100, 0x54030210,
    0x32010000, 0x43021000, 0x43021000, 0x54032010, 0x43021000, 0x54032100, 0x54032100, 0x65043210,
    0x21000000, 0x32100000, 0x32100000, 0x43200010, 0x32100000, 0x43200100, 0x43200100, 0x54300210,
    0x32100000, 0x43201000, 0x43201000, 0x54302010, 0x43201000, 0x54302100, 0x54302100, 0x65403210,
    0x32100000, 0x43210000, 0x43210000, 0x54320010, 0x43210000, 0x54320100, 0x54320100, 0x65430210,
    0x43210000, 0x54321000, 0x54321000, 0x65432010, 0x54321000, 0x65432100, 0x65432100, 0x76543210,
};

#define C8(v) _mm256_set1_ps(v)

/* v·Φ(v) by erf's side, fl_vm_normal_cdf's `near` times v */
static inline __attribute__((always_inline)) __m256 gelu_near8(__m256 v, __m256 z) {
    const __m256 z2 = _mm256_mul_ps(z, z);
    __m256 p = C8(4.718052036650738e-3f);
    p = _mm256_fmadd_ps(p, z2, C8(-2.675721342306259e-2f));
    p = _mm256_fmadd_ps(p, z2, C8(1.128282323440478e-1f));
    p = _mm256_fmadd_ps(p, z2, C8(-3.761260859242733e-1f));
    p = _mm256_fmadd_ps(p, z2, C8(1.128379165568777f));
    const __m256 erf_z = _mm256_mul_ps(z, p);
    const __m256 h = _mm256_blendv_ps(C8(0.5f), C8(-0.5f), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_mul_ps(v, _mm256_fmadd_ps(h, erf_z, C8(0.5f)));
}

/* erfc's side from t = 1/(1 + z/2) and hg = 0.5·e^(−v²/2): v·(1 − hg·R(t)), or v·hg·R(t) for v < 0 */
static inline __attribute__((always_inline)) __m256 gelu_far_tail(__m256 v, __m256 z, __m256 hg) {
    const __m256 t = _mm256_div_ps(C8(1.0f), _mm256_fmadd_ps(C8(0.5f), z, C8(1.0f)));
    __m256 r = C8(-7.368668125673768e-2f);
    r = _mm256_fmadd_ps(r, t, C8(3.481846544011542e-1f));
    r = _mm256_fmadd_ps(r, t, C8(-6.054186665711102e-1f));
    r = _mm256_fmadd_ps(r, t, C8(4.007090827197877e-1f));
    r = _mm256_fmadd_ps(r, t, C8(-1.045433370200122e-1f));
    r = _mm256_fmadd_ps(r, t, C8(2.339821784922968e-1f));
    r = _mm256_fmadd_ps(r, t, C8(2.351928839033002e-1f));
    r = _mm256_fmadd_ps(r, t, C8(2.835839711995525e-1f));
    r = _mm256_fmadd_ps(r, t, C8(2.819854878313426e-1f));
    r = _mm256_fmadd_ps(r, t, C8(3.499567743910657e-6f));
    const __m256 he = _mm256_mul_ps(hg, r);
    const __m256 far = _mm256_blendv_ps(_mm256_sub_ps(C8(1.0f), he), he,
                                        _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_mul_ps(v, far);
}

/* fl_vm_exp_reduce's k (as kk, the shifted sum) and 1 + r + r²·p(r) of a = −v²/2's rounded part en */
static inline __attribute__((always_inline)) __m256 gelu_exp_y(__m256 en, __m256 *kk) {
    *kk = _mm256_fmadd_ps(en, C8(FL_VM_LOG2E), C8(FL_VM_SHIFT));
    const __m256 k = _mm256_sub_ps(*kk, C8(FL_VM_SHIFT));
    __m256 r = _mm256_fmadd_ps(k, C8(-FL_VM_LN2_HI), en);
    r = _mm256_fmadd_ps(k, C8(FL_VM_LN2_LO), r);
    __m256 p = C8(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, C8(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, C8(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, C8(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, C8(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, C8(5.0000001201e-1f));
    return _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), C8(1.0f));
}

/* erfc's side as fl_vm_normal_cdf computes it for any v: |v| clamped at 20, −v²/2 at −104 (0 below), 2^k as two
 * factors (subnormal results rounded once), g = e^(−v²/2)·(1 − lo/2), then 0.5·g */
static inline __attribute__((always_inline)) __m256 gelu_far8(__m256 v) {
    const __m256 a = _mm256_andnot_ps(C8(-0.0f), v), z = _mm256_mul_ps(a, C8(0.70710678118654752f));
    const __m256 ac = _mm256_blendv_ps(C8(20.0f), a, _mm256_cmp_ps(a, C8(20.0f), _CMP_LT_OQ));
    const __m256 hi = _mm256_mul_ps(ac, ac), lo = _mm256_fmsub_ps(ac, ac, hi);
    const __m256 en = _mm256_mul_ps(C8(-0.5f), hi);
    const __m256 in = _mm256_cmp_ps(en, C8(-104.0f), _CMP_GE_OQ);
    __m256 kk;
    const __m256 y = gelu_exp_y(_mm256_blendv_ps(C8(-104.0f), en, in), &kk);
    const __m256i ki = _mm256_sub_epi32(_mm256_castps_si256(kk), _mm256_set1_epi32(0x4B400000));
    const __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23));
    const __m256 e = _mm256_and_ps(_mm256_mul_ps(_mm256_mul_ps(y, s1), s2), in);
    const __m256 g = _mm256_mul_ps(e, _mm256_fmadd_ps(C8(-0.5f), lo, C8(1.0f)));
    const __m256 out = gelu_far_tail(v, z, _mm256_mul_ps(C8(0.5f), g));
    /* a NaN v: v quieted, sign and payload kept, as the scalar v·Φ gives it (Φ is a NaN of z's payload and sign +
     * there, and which of two NaNs a product returns depends on the operands' order, which the compiler chooses) */
    const __m256 quiet = _mm256_or_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
    return _mm256_blendv_ps(out, quiet, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* The same for |v| ≤ 13, with fewer operations and the same bits: no clamp acts (−v²/2 ≥ −84.5), k ≥ −122, so
 * y·2^k1·2^k2 = y·2^k is a normal float and exact, and so is every scaling by 0.5 after it: 0.5·(e·c) = (y·2^(k−1))·c
 * (the product's rounding commutes with a power of two while it stays normal; e·c ≥ 2^-123 here). */
static inline __attribute__((always_inline)) __m256 gelu_far8_mid(__m256 v) {
    const __m256 a = _mm256_andnot_ps(C8(-0.0f), v), z = _mm256_mul_ps(a, C8(0.70710678118654752f));
    const __m256 hi = _mm256_mul_ps(a, a), lo = _mm256_fmsub_ps(a, a, hi);
    __m256 kk;
    const __m256 y = gelu_exp_y(_mm256_mul_ps(C8(-0.5f), hi), &kk);
    /* 2^(k−1): kk's bits less 0x4B400000 are k; (k − 1 + 127) << 23 */
    const __m256 s = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_castps_si256(kk), _mm256_set1_epi32(0x4B400000 - 126)), 23));
    const __m256 hg = _mm256_mul_ps(_mm256_mul_ps(y, s), _mm256_fmadd_ps(C8(-0.5f), lo, C8(1.0f)));
    return gelu_far_tail(v, z, hg);
}

static inline __attribute__((always_inline)) __m256 gelu_far8_any(__m256 v) {
    const __m256 big = _mm256_cmp_ps(_mm256_andnot_ps(C8(-0.0f), v), C8(13.0f), _CMP_NLE_UQ);   /* NaN too */
    return _mm256_movemask_ps(big) ? gelu_far8(v) : gelu_far8_mid(v);
}

#define GELU_TILE 1024   /* elements a tile: x's, the erf results' and the packed erfc lanes' 4 KiB each stay in L1 */

void fl_cpu_gelu_erf_fwd_avx2(const float *x, float *y, int64_t n) {
    float packed[GELU_TILE + 8] __attribute__((aligned(32))), near[GELU_TILE] __attribute__((aligned(32)));
    uint8_t masks[GELU_TILE / 8];
    const __m256i nibble = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i to_sign = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
    for (int64_t i0 = 0; i0 < n; i0 += GELU_TILE) {
        const int64_t len = n - i0 < GELU_TILE ? n - i0 : GELU_TILE, nb = len / 8;
        const float *xt = x + i0;
        float *yt = y + i0;
        /* erf's side for every lane, into a buffer in L1 (y is written once, below); the erfc lanes (z ≥ 0.5, or
         * NaN) packed */
        int np = 0;
        for (int64_t b = 0; b < nb; b++) {
            const __m256 v = _mm256_loadu_ps(xt + 8 * b);
            const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(C8(-0.0f), v), C8(0.70710678118654752f));
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(z, C8(0.5f), _CMP_NLT_UQ));
            masks[b] = (uint8_t)m;
            _mm256_store_ps(near + 8 * b, gelu_near8(v, z));
            const __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int)PACK[m]), nibble);
            _mm256_storeu_ps(packed + np, _mm256_permutevar8x32_ps(v, idx));
            np += __builtin_popcount((unsigned)m);
        }
        _mm256_storeu_ps(packed + np, _mm256_setzero_ps());   /* the last vector's unused lanes: defined values */
        /* erfc's side of the packed lanes; meanwhile the next tile's x and y are asked into the caches, which the
         * loops above and below would otherwise wait on (a lab copy on [4096, 1024], one thread, Zen 3: 6.4-8.5 ms
         * without, 4.8-7.2 with; docs/performance.md) */
        int64_t ahead = i0 + GELU_TILE;   /* the next element to ask for, two lines of x and of y a vector */
        for (int k = 0; k < np; k += 8) {
            if (ahead < n) {
                _mm_prefetch((const char *)(x + ahead), _MM_HINT_T0);
                _mm_prefetch((const char *)(x + ahead) + 64, _MM_HINT_T0);
                __builtin_prefetch(y + ahead, 1, 3);
                __builtin_prefetch(y + ahead + 16, 1, 3);
                ahead += 32;
            }
            _mm256_store_ps(packed + k, gelu_far8_any(_mm256_load_ps(packed + k)));
        }
        /* y: each block's erf lanes with its erfc lanes put back in their places */
        int pp = 0;
        for (int64_t b = 0; b < nb; b++) {
            const int m = masks[b];
            const __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int)UNPACK[m]), nibble);
            const __m256 f = _mm256_permutevar8x32_ps(_mm256_loadu_ps(packed + pp), idx);
            const __m256 sel = _mm256_castsi256_ps(_mm256_sllv_epi32(_mm256_set1_epi32(m), to_sign));
            _mm256_storeu_ps(yt + 8 * b, _mm256_blendv_ps(_mm256_load_ps(near + 8 * b), f, sel));
            pp += __builtin_popcount((unsigned)m);
        }
        if (len > 8 * nb) {   /* the last few: both forms on one padded vector (a scalar v·Φ may give a NaN v's
                               * result the sign of Φ's NaN, by the order the compiler puts a product's operands in) */
            float tmp[8] __attribute__((aligned(32))) = { 0 };
            memcpy(tmp, xt + 8 * nb, (size_t)(len - 8 * nb) * 4);
            const __m256 v = _mm256_load_ps(tmp);
            const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(C8(-0.0f), v), C8(0.70710678118654752f));
            _mm256_store_ps(tmp, _mm256_blendv_ps(gelu_far8_any(v), gelu_near8(v, z),
                                                  _mm256_cmp_ps(z, C8(0.5f), _CMP_LT_OQ)));
            memcpy(yt + 8 * nb, tmp, (size_t)(len - 8 * nb) * 4);
        }
    }
}
#endif
