/* im2col.h — im2col.c's plane kernels for the ops that run them on their own buffers (conv_cols.c: a convolution
 * whose columns are made a few samples at a time). Core-internal; the ops themselves are nn.h's. */
#ifndef FL_IM2COL_H
#define FL_IM2COL_H
#include "nn.h"

/* nc contiguous planes [h, w] of x (fp32, or any 16-bit dtype: bf16, fp16) → columns [nc, kh·kw, oh·ow] at y, the
 * padding 0; FL_EINTR if interrupted (the flag polled per plane) */
fl_status fl_im2col_planes(void *y, const void *x, int bytes, int64_t nc, int64_t h, int64_t w, const fl_window *g,
                           int64_t oh, int64_t ow);
/* fp32 columns [nc, kh·kw, oh·ow] added into the planes [nc, h, w] at y (zeroed by the caller), in the order kernel
 * offset, then window (fold's); FL_EINTR if interrupted */
fl_status fl_col2im_planes(float *y, const float *x, int64_t nc, int64_t h, int64_t w, const fl_window *g, int64_t oh,
                           int64_t ow);
#endif
