/* format.h — the dtype traits table and bit-exact conversions between fp32 and
 * bf16, fp16, E4M3 (OCP E4M3FN) and E5M2. See docs/fp8-spec.md §1. */
#ifndef FL_FORMAT_H
#define FL_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"

/* Append-only; FL_DTYPE_COUNT last. */
typedef enum { FL_F32 = 0, FL_BF16, FL_F16, FL_E4M3, FL_E5M2, FL_DTYPE_COUNT } fl_dtype;

/* Overflow policy of a cast to a narrow format.
 * FL_SATURATE: |x| > max → ±max, NaN stays NaN (training casts).
 * FL_IEEE:     overflow → ±inf where the format has it (E5M2, fp16, bf16), NaN for E4M3
 *              (what ml_dtypes / PyTorch do). */
typedef enum { FL_SATURATE = 0, FL_IEEE = 1 } fl_overflow;

typedef struct {
    const char *name;        /* canonical short name: "fp32", "bf16", "fp16", "e4m3", "e5m2" */
    const char *long_name;   /* "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2" */
    int bits;                /* storage bits */
    size_t size;             /* storage bytes */
    int exp_bits, mant_bits, bias;
    double max;              /* largest finite */
    double min_normal;       /* smallest positive normal */
    double min_subnormal;    /* smallest positive subnormal */
    bool has_inf;
    bool is_fp8;
    int nan_count;           /* number of NaN encodings (of 2^bits) */
    float (*to_float)(uint32_t bits);            /* decode one value */
    uint32_t (*from_float)(float x, fl_overflow); /* encode one value, round to nearest even */
} fl_format_traits;

const fl_format_traits *fl_format(fl_dtype t);
/* Accepts canonical and long names and common aliases ("float", "half", "bfloat16",
 * "float8_e4m3fn", "E4M3", ...), case-insensitively. Returns false if unknown. */
bool fl_dtype_from_name(const char *name, fl_dtype *out);
/* "fp32, bf16, fp16, e4m3, e5m2" — for error messages. */
const char *fl_dtype_choices(void);

/* Scalar conversions. */
float    fl_bf16_to_f32(uint16_t h);
uint16_t fl_f32_to_bf16(float x);            /* RNE, overflow → inf, NaN quiet */
float    fl_f16_to_f32(uint16_t h);
uint16_t fl_f32_to_f16(float x);             /* RNE, overflow → inf */
float    fl_e4m3_to_f32(uint8_t b);
float    fl_e5m2_to_f32(uint8_t b);
uint8_t  fl_f32_to_e4m3(float x, fl_overflow p);
uint8_t  fl_f32_to_e5m2(float x, fl_overflow p);
uint8_t  fl_f32_to_fp8(float x, fl_dtype fmt, fl_overflow p);
float    fl_fp8_to_f32(uint8_t b, fl_dtype fmt);
bool     fl_fp8_is_nan(uint8_t b, fl_dtype fmt);

/* Counters a quantizing cast reports. */
typedef struct {
    float amax;          /* max |x| over the source (NaN ignored) */
    int64_t underflow;   /* nonzero sources whose scaled value rounded to ±0 */
    int64_t saturated;   /* non-NaN sources, ±∞ included, whose scaled magnitude exceeded the format max (clamped
                          * to ±max, or overflowed to inf/NaN under the IEEE policy) */
    int64_t nan;         /* NaN sources */
} fl_cast_stats;

/* t ← the statistics of t's cast and s's together (the larger amax, the counts added): order-independent. */
static inline void fl_cast_stats_merge(fl_cast_stats *t, const fl_cast_stats *s) {
    if (s->amax > t->amax) t->amax = s->amax;
    t->underflow += s->underflow;
    t->saturated += s->saturated;
    t->nan += s->nan;
}

/* Fused scale + cast + amax over n contiguous fp32 values: dst[i] = fp8(src[i]*scale).
 * stats may be NULL; if given, it is overwritten. One pass; vectorised where the CPU allows.
 * Polls the interrupt flag between blocks (returns FL_EINTR). */
fl_status fl_quantize_f32(const float *src, uint8_t *dst, size_t n, fl_dtype fmt,
                          float scale, fl_overflow p, fl_cast_stats *stats);
/* The same with one scale per element, dst[i] = fp8(src[i]*scales[i]): a row of a per-column scaled matrix in
 * one pass (amax and the counters describe src, as above). */
fl_status fl_quantize_f32_scales(const float *src, uint8_t *dst, size_t n, fl_dtype fmt, const float *scales,
                                 fl_overflow p, fl_cast_stats *stats);
/* rows × cols contiguous fp32, dst[r·cols + j] = fp8(src[r·cols + j]·scales[j]): per-column scaling of a matrix (or
 * of a run of its rows), on the calling thread (callers split the rows between threads), the same bytes and
 * statistics as fl_quantize_f32_scales row by row. Polls the interrupt flag once, at the start. */
fl_status fl_quantize_f32_cols(const float *src, uint8_t *dst, size_t rows, size_t cols, fl_dtype fmt,
                               const float *scales, fl_overflow p, fl_cast_stats *stats);
/* amax of n contiguous floats (NaN ignored). */
float fl_amax_f32(const float *src, size_t n);
/* dst[i] = decode(src[i]) * scale_inv */
void fl_dequantize_f32(const uint8_t *src, float *dst, size_t n, fl_dtype fmt, float scale_inv);
/* b[i] = fp8(decode(a[i]) + decode(b[i])) in fmt, saturating, rounded to nearest even: one step of an FP8 sum
 * all-reduce (dist.c's MPI operation), the same bits as fl_f32_to_fp8 of the fp32 sum (NaN for NaN), vectorised. One thread, no
 * interrupt polling (it runs inside MPI, where it cannot fail). */
void fl_fp8_add_n(const uint8_t *a, uint8_t *b, size_t n, fl_dtype fmt);

/* Bulk conversions between fp32 and the 16-bit formats (RNE). */
void fl_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);
void fl_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void fl_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
void fl_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);

/* The scale a recipe derives from an amax: fp8_max * 2^-margin / amax; keeps `fallback`
 * when amax is 0, negative or not finite; an infinite result becomes FLT_MAX. */
float fl_scale_from_amax(float amax, fl_dtype fmt, int margin, float fallback);

#endif
