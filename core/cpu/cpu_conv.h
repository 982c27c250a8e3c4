/* cpu_conv.h — conv2d's fp32 and bf16 forward and backward through oneDNN's convolution primitives (cpu_conv.c),
 * for core/conv_cols.c (by the CPU's device entries conv2d_direct*). */
#ifndef FL_CPU_CONV_H
#define FL_CPU_CONV_H
#include "error.h"
#include "format.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* y [N, OC, oh, ow] (fp32) = the convolution of x [N, C, H, W] with w [OC, C/groups, kh, kw], both contiguous (NCHW,
 * OIHW) of dtype dt, fp32 or bf16 (bits), plus bias [OC] (fp32) where it is not NULL (one fp32 addition to each sum);
 * geo = { kh, kw, sh, sw, dh, dw, pt, pb, pl, pr } (dilation 1 = dense), the padding zeros. oneDNN's direct kernels
 * (brgconv / jit) sum each output's C/groups·kh·kw products (exact in fp32 for bf16 operands) in fp32 in their own
 * order: not the columns GEMM's bits. *ran = false, nothing written, where oneDNN offers only its GEMM-based or
 * reference kernels (bf16 on a CPU, or under an FP8LAB_CPU_ISA cap, without AVX512_BF16 or AMX), where a padding is
 * wider than the image, or for another dt (the caller keeps the columns). Polls the interrupt flag between chunks of
 * samples. */
fl_status fl_cpu_conv2d(float *y, const void *x, const void *w, const float *bias, fl_dtype dt, int64_t N, int64_t C,
                        int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10], int64_t oh,
                        int64_t ow, bool *ran);

/* Its gradients by oneDNN's backward-data and backward-weights primitives, under the same rules: dx [N, C, H, W]
 * (fp32, every element written) from dy [N, OC, oh, ow] and w (dt); dw [OC, C/groups, kh, kw] (fp32) and, where db is
 * not NULL, the bias's [OC] (fp32, the sum of dy as given) from x and dy (dt), each chunk of samples' sums (the
 * kernel's order, in fp32) added in double in chunk order and rounded once where the batch takes more than one
 * chunk. */
fl_status fl_cpu_conv2d_bwd_data(float *dx, const void *dy, const void *w, fl_dtype dt, int64_t N, int64_t C,
                                 int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10], int64_t oh,
                                 int64_t ow, bool *ran);
fl_status fl_cpu_conv2d_bwd_weights(float *dw, float *db, const void *x, const void *dy, fl_dtype dt, int64_t N,
                                    int64_t C, int64_t H, int64_t W, int64_t OC, int64_t groups, const int64_t geo[10],
                                    int64_t oh, int64_t ow, bool *ran);

/* for tests (test_im2col.c): the route fl_cpu_conv2d takes for N samples of this geometry in dt: *direct as its *ran,
 * *in_place where the kernel reads the NCHW input as it is (no reorder into a blocked or NHWC copy: a first layer's) */
fl_status fl_cpu_conv2d_route(bool *direct, bool *in_place, fl_dtype dt, int64_t N, int64_t C, int64_t H, int64_t W,
                              int64_t OC, int64_t groups, const int64_t geo[10]);
/* for tests: the bytes the blocked copies' buffers kept between calls hold now (cpu_conv.c's arena) */
size_t fl_cpu_conv2d_arena_bytes(void);
#endif
