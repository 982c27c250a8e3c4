/* cpu_fp8_gemm.c — the CPU device's FP8 GEMM (core/device.h fp8_gemm). It goes to our own GEMM (cpu_fp8_mm.c:
 * decodes while packing, applies per-tensor or per-row/per-column scales as it stores) where that takes it;
 * otherwise both operands' bytes are decoded exactly to bf16 (every E4M3/E5M2 value is a bf16 value, and
 * every product of two is exact in fp32), one oneDNN bf16 GEMM with fp32 accumulation reading transposed
 * operands in place, which also applies per-tensor scales and the bias in its epilogue; per-row/per-column
 * scales take one pass after it. */
#include "cpu_internal.h"
#include "par.h"
#include <float.h>
#include <pthread.h>
#include <string.h>

#define PAR_MIN (1 << 15)

/* FP8 byte → bf16 bits, branch-free so the compiler vectorises it (every FP8 value is exact in bf16).
 * Normal E4M3 s.eeee.mmm is bf16 s | (e+120)<<7 | m<<4 = s | (em + 960)<<4; subnormals m·2^-9 go
 * through float; NaN (s.1111.111) → quiet NaN. E5M2 s.eeeee.mm: s | (em + 448)<<5, subnormals
 * m·2^-16, e = 31 → inf or NaN. */
static inline uint16_t f32_hi(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); }

static void decode_e4m3(const uint8_t *restrict s, uint16_t *restrict d, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = s[i], em = b & 0x7f;
        uint16_t sign = (uint16_t)((b & 0x80) << 8);
        uint16_t normal = (uint16_t)((em + 960) << 4), sub = f32_hi((float)em * 0x1p-9f);
        uint16_t r = em >= 8 ? normal : sub;
        d[i] = sign | (em == 0x7f ? 0x7fc0 : r);
    }
}

static void decode_e5m2(const uint8_t *restrict s, uint16_t *restrict d, int64_t n) {
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        uint32_t b = s[i], em = b & 0x7f;
        uint16_t sign = (uint16_t)((b & 0x80) << 8);
        uint16_t normal = (uint16_t)((em + 448) << 5), sub = f32_hi((float)em * 0x1p-16f);
        uint16_t r = em >= 4 ? normal : sub;
        r = em >= 0x7c ? (em == 0x7c ? 0x7f80 : 0x7fc0) : r;
        d[i] = sign | r;
    }
}

/* The table of the 128 magnitudes' bf16 bits (cpu_internal.h), built from the scalar decode above, so the
 * table-lookup decodes agree with it by construction. */
#ifdef __x86_64__
static uint16_t lut_e4m3[128], lut_e5m2[128];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;
static void lut_init(void) {
    uint8_t b[128];
    for (int i = 0; i < 128; i++) b[i] = (uint8_t)i;
    decode_e4m3(b, lut_e4m3, 128);
    decode_e5m2(b, lut_e5m2, 128);
}

const uint16_t *fl_fp8_bf16_lut(bool e5) {
    pthread_once(&lut_once, lut_init);
    return e5 ? lut_e5m2 : lut_e4m3;
}

FL_CPU_AVX512 static void decode_lut512(const uint8_t *restrict s, uint16_t *restrict d, int64_t n, const uint16_t *lut) {
    const fl_fp8_lut4 L = fl_fp8_lut_load(lut);
    for (int64_t i = 0; i < n; i += 32) {
        const __mmask32 k = n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_epi16(d + i, k, fl_fp8_dec32(_mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(k, s + i)), &L));
    }
}
#endif

static void decode_span(const uint8_t *s, uint16_t *d, int64_t n, bool e5) {
#ifdef __x86_64__
    if (fl_cpu_avx512()) { decode_lut512(s, d, n, fl_fp8_bf16_lut(e5)); return; }
#endif
    if (e5) decode_e5m2(s, d, n); else decode_e4m3(s, d, n);
}

fl_status fl_fp8_decode_bf16(fl_tensor **out, const fl_tensor *q) {
    *out = NULL;
    if (!fl_format(q->dtype)->is_fp8) return FL_ERR(FL_EINVAL, "fp8 decode: expected e4m3 or e5m2, got %s", fl_format(q->dtype)->name);
    if (!fl_tensor_is_contiguous(q) || q->device != FL_DEV_CPU)
        return FL_ERR(FL_EINVAL, "fp8 decode: needs a contiguous CPU tensor");
    fl_tensor *r = NULL;
    FL_TRY(fl_tensor_empty(&r, FL_BF16, q->ndim, q->shape, FL_DEV_CPU));
    const uint8_t *s = fl_tensor_data(q);
    uint16_t *d = fl_tensor_data(r);
    int64_t n = fl_tensor_numel(q), blk = 1 << 16, nb = (n + blk - 1) / blk;
    bool e5 = q->dtype == FL_E5M2;
    FL_PAR_FOR(n >= 4 * PAR_MIN, schedule(static),
    for (int64_t k = 0; k < nb; k++) {
        int64_t o = k * blk, len = n - o < blk ? n - o : blk;
        decode_span(s + o, d + o, len, e5);
    });
    *out = r;
    return FL_OK;
}

/* q's bytes decoded into a bf16 tensor of q's shape and strides: q is contiguous or the transposed
 * view of a contiguous tensor (base); the decode is of the base, transposed back as a view. `cache`
 * (optional) holds the base's decode across calls, which may see the base in either orientation. With a
 * dim of 1 both readings of q describe the same bytes in the same order, so the cached decode is
 * re-viewed in the base shape this call implies rather than trusted to have it. */
static fl_status decoded(fl_tensor **out, const fl_tensor *q, fl_tensor **cache) {
    *out = NULL;
    bool tr = !fl_tensor_is_contiguous(q);
    int64_t base_shape[2] = { tr ? q->shape[1] : q->shape[0], tr ? q->shape[0] : q->shape[1] };
    fl_tensor *dec = NULL;
    if (cache && *cache) {
        FL_TRY(fl_tensor_view(&dec, *cache, 2, base_shape));
    } else {
        fl_tensor *base = NULL;
        if (tr) {
            fl_status st = fl_tensor_transpose(&base, q, 0, 1);
            if (st == FL_OK && !fl_tensor_is_contiguous(base))
                st = FL_ERR(FL_EINVAL, "fp8 gemm: an operand must be contiguous or a transposed contiguous matrix");
            if (st != FL_OK) { fl_tensor_release(base); return st; }
        } else {
            base = fl_tensor_retain((fl_tensor *)q);
        }
        fl_status st = fl_fp8_decode_bf16(&dec, base);
        fl_tensor_release(base);
        FL_TRY(st);
        if (cache) *cache = fl_tensor_retain(dec);
    }
    if (!tr) { *out = dec; return FL_OK; }
    fl_status st = fl_tensor_transpose(out, dec, 0, 1);
    fl_tensor_release(dec);
    return st;
}

/* The smallest and largest of n dequantization scales (FLT_MAX, 0 where none is finite and > 0). */
static void scale_range(const float *s, int64_t n, float *lo, float *hi) {
    *lo = FLT_MAX;
    *hi = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (s[i] > 0.0f && s[i] <= FLT_MAX) { *lo = s[i] < *lo ? s[i] : *lo; *hi = s[i] > *hi ? s[i] : *hi; }
}

/* Whether some product sa·sb of a's and b's dequantization scales leaves fp32's normal range: a scale rule's
 * extremes (te's margin 16 after an amax of 1e37 gives an input scale_inv of 8.5e37) times a weight's. The product
 * overflowed to inf and a row the cast had flushed to zeros came out 0·inf = NaN, for good (2026-12-05); such a
 * GEMM applies the two scales in double instead (gemm_then_scale), the fast paths keep sum·(sa·sb) otherwise. */
static bool scale_product_out_of_range(const fl_tensor *a, const fl_tensor *b) {
    float alo, ahi, blo, bhi;
    scale_range(fl_tensor_data(a->scale_inv), a->scale_axis >= 0 ? fl_tensor_numel(a->scale_inv) : 1, &alo, &ahi);
    scale_range(fl_tensor_data(b->scale_inv), b->scale_axis >= 0 ? fl_tensor_numel(b->scale_inv) : 1, &blo, &bhi);
    if (ahi == 0.0f || bhi == 0.0f) return false;
    return (double)ahi * bhi > FLT_MAX || (double)alo * blo < FLT_MIN;
}

/* The GEMM into dst, then one pass over dst applying the scales (per tensor, per row of a, per column of
 * b) and the bias: the path for per-row/per-column scales and for shapes oneDNN cannot fuse; with wide, the scales
 * are applied in double (their fp32 product would leave the normal range). */
static fl_status gemm_then_scale(fl_tensor *dst, const fl_tensor *ad, const fl_tensor *bd, const fl_tensor *a,
                                 const fl_tensor *b, const float *pb, bool wide) {
    const int64_t m = dst->shape[0], n = dst->shape[1], K = ad->shape[1];
    const int64_t s3a[3] = { 1, m, K }, s3b[3] = { 1, K, n }, s3d[3] = { 1, m, n };
    fl_tensor *a3 = NULL, *b3 = NULL, *d3 = NULL;
    fl_status st = fl_tensor_view(&a3, ad, 3, s3a);
    if (st == FL_OK) st = fl_tensor_view(&b3, bd, 3, s3b);
    if (st == FL_OK) st = fl_tensor_view(&d3, dst, 3, s3d);
    if (st == FL_OK) st = K == 0 ? fl_cpu_device()->fill(dst, 0.0) : fl_cpu_device()->matmul(d3, a3, b3);
    fl_tensor_release(a3);
    fl_tensor_release(b3);
    fl_tensor_release(d3);
    FL_TRY(st);
    const float *sa = fl_tensor_data(a->scale_inv), *sb = fl_tensor_data(b->scale_inv);
    const bool sa_vec = a->scale_axis >= 0, sb_vec = b->scale_axis >= 0;
    float *py = fl_tensor_data(dst);
    FL_PAR_FOR(m * n >= PAR_MIN, schedule(static),
    for (int64_t i = 0; i < m; i++) {
        float *out = py + i * n;
        const float ra = sa[sa_vec ? i : 0];
        if (wide) {
            for (int64_t j = 0; j < n; j++) {
                out[j] = (float)((double)out[j] * ra * sb[sb_vec ? j : 0]);
                if (pb) out[j] += pb[j];
            }
        } else if (sb_vec) {
            if (pb) { for (int64_t j = 0; j < n; j++) out[j] = out[j] * (ra * sb[j]) + pb[j]; }
            else    { for (int64_t j = 0; j < n; j++) out[j] = out[j] * (ra * sb[j]); }
        } else {
            const float r = ra * sb[0];
            if (pb) { for (int64_t j = 0; j < n; j++) out[j] = out[j] * r + pb[j]; }
            else    { for (int64_t j = 0; j < n; j++) out[j] = out[j] * r; }
        }
    });
    return FL_OK;
}

/* fp8_gemm, and with res (fp32, contiguous, dst's shape) the addend: our own GEMM adds it as it stores C, the
 * decode + oneDNN path in a pass after it (the same roundings: the result, then + the addend). */
static fl_status fp8_gemm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias, const fl_tensor *res,
                          fl_tensor **a_cache, fl_tensor **b_cache) {
    fl_tensor *ad = NULL, *bd = NULL, *b32 = NULL;
    fl_status st = FL_OK;
    if (bias) st = bias->dtype == FL_F32 && fl_tensor_is_contiguous(bias) ? (b32 = fl_tensor_retain((fl_tensor *)bias), FL_OK)
                                                                         : fl_tensor_to(&b32, bias, FL_F32);
    const float *pb = b32 ? fl_tensor_data(b32) : NULL;
    const bool wide = scale_product_out_of_range(a, b);
    const bool per_tensor = a->scale_axis < 0 && b->scale_axis < 0 && !wide;
    const float r = per_tensor ? ((const float *)fl_tensor_data(a->scale_inv))[0] * ((const float *)fl_tensor_data(b->scale_inv))[0] : 0.0f;
    /* Our own GEMM decodes while it packs and applies per-tensor or per-row/per-column scales as it stores
     * (cpu_fp8_mm.c), where it reads the layout and measured faster; the caches stay unused then. */
    const float *pr = res ? fl_tensor_data(res) : NULL;
    bool done = false;
    if (st == FL_OK && !wide && fl_cpu_fp8_mm_faster(a, b)) st = fl_cpu_fp8_mm(dst, a, b, pb, pr, &done);
    if (st != FL_OK || done) { fl_tensor_release(b32); return st; }
    st = decoded(&ad, a, a_cache);
    if (st == FL_OK) st = decoded(&bd, b, b_cache);
    /* Per-tensor scales: oneDNN applies (sa·sb) and then the bias in the GEMM's epilogue, the same fp32
     * operations as gemm_then_scale's pass without a second sweep over the output. (Its run-time output
     * scales would do the same but select a non-JIT kernel in oneDNN 2.6: ~1.6x slower, measured.) */
    bool fused = false;
    if (st == FL_OK && per_tensor) st = fl_cpu_matmul_scaled(dst, ad, bd, r, pb, &fused);
    if (st == FL_OK && !fused) st = gemm_then_scale(dst, ad, bd, a, b, pb, wide);
    if (st == FL_OK && pr) {
        float *py = fl_tensor_data(dst);
        const int64_t n = fl_tensor_numel(dst);
        FL_PAR_FOR_SIMD(n >= PAR_MIN,,
        for (int64_t i = 0; i < n; i++) py[i] += pr[i];);
    }
    fl_tensor_release(ad);
    fl_tensor_release(bd);
    fl_tensor_release(b32);
    return st;
}

fl_status fl_cpu_dev_fp8_gemm(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias,
                          fl_tensor **a_cache, fl_tensor **b_cache, bool fast_accum) {
    (void)fast_accum;   /* both paths' bf16 products accumulate in fp32 whatever the caller allows */
    return fp8_gemm(dst, a, b, bias, NULL, a_cache, b_cache);
}

fl_status fl_cpu_dev_fp8_gemm_add(fl_tensor *dst, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias,
                                  const fl_tensor *addend, fl_tensor **a_cache, fl_tensor **b_cache, bool fast_accum) {
    (void)fast_accum;
    if (!addend || addend->dtype != FL_F32 || !fl_tensor_is_contiguous(addend) || addend->device != FL_DEV_CPU ||
        !fl_shape_equal(dst->ndim, dst->shape, addend->ndim, addend->shape))
        return FL_ERR(FL_EINVAL, "fp8 gemm: the addend must be a contiguous fp32 CPU tensor of the result's shape");
    return fp8_gemm(dst, a, b, bias, addend, a_cache, b_cache);
}
