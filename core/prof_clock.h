/* prof_clock.h — the device clock the profiler (core/profiler.h) uses for device time, in a header of
 * its own so that CUDA code (kernels/cuda_device.cu, C++) can provide one without the recorder's C11
 * atomics. origin() waits until the device is idle, queues a mark, waits for it and gives the
 * CLOCK_MONOTONIC time it happened (the anchor of the device timeline); mark() queues a mark and returns
 * its handle (0 when it cannot); elapsed_ns() waits for both marks and gives the time between them
 * (false when unknown); release() frees a mark. They are called with the recorder's lock held and must
 * not call back into the profiler. */
#ifndef FL_PROF_CLOCK_H
#define FL_PROF_CLOCK_H
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t (*origin)(int64_t *cpu_ns);
    uint64_t (*mark)(void);
    bool (*elapsed_ns)(uint64_t a, uint64_t b, int64_t *ns);
    void (*release)(uint64_t m);
} fl_prof_device_clock;

void fl_prof_set_device_clock(const fl_prof_device_clock *c);   /* NULL: none (the default) */
bool fl_prof_has_device_clock(void);
int64_t fl_prof_now_ns(void);                                   /* CLOCK_MONOTONIC */

#endif
