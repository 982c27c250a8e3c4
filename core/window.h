/* window.h — what the window ops share (im2col.c, conv_depthwise.c, max_pool.c, avg_pool.c; the geometry is nn.h's
 * fl_window): the bound of each number of the geometry, which window positions along a dim fall inside the plane,
 * and the interrupt poll of their loops over planes. */
#ifndef FL_WINDOW_H
#define FL_WINDOW_H
#include <stdint.h>
#include "error.h"

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

/* Ctrl-C in a loop over planes (OpenMP or not): at the top of each plane's iteration, skip it once a stop is
 * flagged, flag one where an interrupt is pending (the flag read, not cleared: fl_window_stopped clears it after the
 * loop). A plane is one window pass, thousands of elements at least where it matters: the poll costs nothing. */
#define FL_WIN_POLL(stop)                                                                                           \
    {                                                                                                               \
        int s_;                                                                                                     \
        _Pragma("omp atomic read")                                                                                  \
        s_ = (stop);                                                                                                \
        if (s_) continue;                                                                                           \
        if (fl_interrupt_pending()) {                                                                               \
            _Pragma("omp atomic write")                                                                             \
            (stop) = 1;                                                                                             \
            continue;                                                                                               \
        }                                                                                                           \
    }

/* after such a loop: FL_EINTR ("interrupted", the flag cleared) where it stopped, else FL_OK */
static inline fl_status fl_window_stopped(int stop) {
    if (!stop) return FL_OK;
    fl_status st = fl_check_interrupt();
    return st != FL_OK ? st : FL_ERR(FL_EINTR, "interrupted");
}
#endif
