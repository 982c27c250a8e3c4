/* cpu_conv.h — conv2d's fp32 forward and backward through oneDNN's convolution primitives (cpu_conv.c), for
 * core/conv_cols.c (by the CPU's device entries conv2d_direct*). */
#ifndef FL_CPU_CONV_H
#define FL_CPU_CONV_H
#include "error.h"
#include <stdbool.h>
#include <stdint.h>

/* y [N, OC, oh, ow] = the convolution of x [N, C, H, W] with w [OC, C/groups, kh, kw], all contiguous fp32 (NCHW,
 * OIHW), plus bias [OC] where it is not NULL (one fp32 addition to each sum); geo = { kh, kw, sh, sw, dh, dw, pt, pb,
 * pl, pr } (dilation 1 = dense), the padding zeros. oneDNN's direct kernels (brgconv / jit) sum each output's
 * C/groups·kh·kw products in their own order: not the columns GEMM's bits. *ran = false, nothing written, where oneDNN
 * offers only its GEMM-based or reference kernels, or where a padding is wider than the image (the caller keeps the
 * columns). Polls the interrupt flag between chunks of samples. */
fl_status fl_cpu_conv2d_f32(float *y, const float *x, const float *w, const float *bias, int64_t N, int64_t C,
                            int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10], int64_t oh,
                            int64_t ow, bool *ran);

/* Its gradients by oneDNN's backward-data and backward-weights primitives, under the same rules: dx [N, C, H, W]
 * (every element written) from dy [N, OC, oh, ow] and w; dw [OC, C/groups, kh, kw] and, where db is not NULL, the
 * bias's [OC] from x and dy, each chunk of samples' sums (the kernel's order) added in double in chunk order and
 * rounded once where the batch takes more than one chunk. */
fl_status fl_cpu_conv2d_f32_bwd_data(float *dx, const float *dy, const float *w, int64_t N, int64_t C, int64_t H,
                                     int64_t W, int64_t OC, int64_t groups, const int64_t geo[10], int64_t oh,
                                     int64_t ow, bool *ran);
fl_status fl_cpu_conv2d_f32_bwd_weights(float *dw, float *db, const float *x, const float *dy, int64_t N, int64_t C,
                                        int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10],
                                        int64_t oh, int64_t ow, bool *ran);

/* for tests (test_im2col.c): the route fl_cpu_conv2d_f32 takes for N samples of this geometry: *direct as its *ran,
 * *in_place where the kernel reads the NCHW input as it is (no reorder into a blocked or NHWC copy: a first layer's) */
fl_status fl_cpu_conv2d_f32_route(bool *direct, bool *in_place, int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC,
                                  int64_t groups, const int64_t geo[10]);
#endif
