/* format_internal.h — hooks into format.c for tests and benchmarks only: choose the quantize /
 * amax code path explicitly so the AVX-512, AVX2 and portable kernels can be compared. */
#ifndef FL_FORMAT_INTERNAL_H
#define FL_FORMAT_INTERNAL_H
#include "format.h"

enum { FL_PATH_AUTO = 0, FL_PATH_PORTABLE = 1, FL_PATH_AVX512 = 2, FL_PATH_AVX2 = 3 };

/* 1 when this CPU can run the AVX-512 kernels (AVX-512 F and BW) and FP8LAB_CPU_ISA allows them (cpu_isa.h);
 * FL_PATH_AVX512 falls back to portable otherwise. */
int fl_format_has_avx512(void);
fl_status fl_quantize_f32_path(const float *src, uint8_t *dst, size_t n, fl_dtype fmt, float scale,
                               fl_overflow p, fl_cast_stats *stats, int path);
fl_status fl_quantize_f32_scales_path(const float *src, uint8_t *dst, size_t n, fl_dtype fmt, const float *scales,
                                      fl_overflow p, fl_cast_stats *stats, int path);
fl_status fl_quantize_f32_cols_path(const float *src, uint8_t *dst, size_t rows, size_t cols, fl_dtype fmt,
                                    const float *scales, fl_overflow p, fl_cast_stats *stats, int path);
float fl_amax_f32_path(const float *src, size_t n, int path);
#endif
