/* window.h — what the window ops share (im2col.c, conv_depthwise.c, max_pool.c; the geometry is nn.h's fl_window):
 * the bound of each number of the geometry, and which window positions along a dim fall inside the plane. */
#ifndef FL_WINDOW_H
#define FL_WINDOW_H
#include <stdint.h>

#define FL_WIN_MAX (INT64_C(1) << 31)   /* kernel, stride, dilation and padding below 2^31 (no int64 overflow) */

/* the window positions ox whose column ox·s + off (off = kernel offset · dilation − left padding) falls in [0, w):
 * [*lo, *hi), clamped to [0, ow) */
static inline void fl_window_inside(int64_t off, int64_t s, int64_t w, int64_t ow, int64_t *lo, int64_t *hi) {
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;              /* first with ox·s + off >= 0 */
    int64_t b = w - off <= 0 ? 0 : (w - off + s - 1) / s;       /* first with ox·s + off >= w */
    if (a > ow) a = ow;
    if (b > ow) b = ow;
    if (b < a) b = a;
    *lo = a, *hi = b;
}
#endif
