/* device.c — the device registry. The CPU device always exists; the CUDA device (kernels/) is
 * registered lazily on first request. This is the only core file that knows about FL_HAVE_CUDA. */
#include "device.h"

static const fl_device *fl_devices[FL_DEV_COUNT];
static const char *const fl_device_names[FL_DEV_COUNT] = { "cpu", "cuda" };
_Static_assert(sizeof fl_device_names / sizeof fl_device_names[0] == FL_DEV_COUNT, "a device without a name");

#ifdef FL_HAVE_CUDA
/* kernels/: registers the "cuda" device when a GPU is present; prints its own notice otherwise. */
extern fl_status fl_cuda_register(void);
static int fl_cuda_tried;
#endif

const fl_device *fl_device_get(int id) {
    if (id < 0 || id >= FL_DEV_COUNT) return NULL;
    if (id == FL_DEV_CPU) return fl_devices[id] ? fl_devices[id] : fl_cpu_device();
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA && !fl_devices[id] && !fl_cuda_tried) {
        fl_cuda_tried = 1;
        (void)fl_cuda_register();
    }
#endif
    return fl_devices[id];
}

void fl_device_register(int id, const fl_device *dev) {
    if (id >= 0 && id < FL_DEV_COUNT) fl_devices[id] = dev;
}

const char *fl_device_unavailable(int id) {
    if (id == FL_DEV_CPU) return "";
#ifdef FL_HAVE_CUDA
    extern const char *fl_cuda_unavailable_reason(void);
    if (id == FL_DEV_CUDA) {
        const char *r = fl_cuda_unavailable_reason();
        return r && r[0] ? r : "no CUDA GPU";
    }
    return "unknown device";
#else
    return id == FL_DEV_CUDA ? "fp8lab was built without CUDA" : "unknown device";
#endif
}

const char *fl_device_name(int id) {
    return (id >= 0 && id < FL_DEV_COUNT) ? fl_device_names[id] : "?";
}
