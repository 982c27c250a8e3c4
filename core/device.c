/* device.c — the device registry. The CPU device always exists; the CUDA device (kernels/) is
 * registered lazily on first request. This is the only core file that knows about FL_HAVE_CUDA. */
#include <string.h>
#include "device.h"

static const fl_device *fl_devices[FL_DEV_COUNT];
static const char *const fl_device_names[] = { "cpu", "cuda" };
_Static_assert(sizeof fl_device_names / sizeof fl_device_names[0] == FL_DEV_COUNT, "a device without a name");

#ifdef FL_HAVE_CUDA
/* kernels/: registers the "cuda" device when a GPU is present; prints its own notice otherwise. */
#include "../kernels/cuda_api.h"
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
    if (id == FL_DEV_CUDA) {
        const char *r = fl_cuda_unavailable_reason();
        return r && r[0] ? r : "no CUDA GPU";
    }
    return "unknown device";
#else
    return id == FL_DEV_CUDA ? "fp8lab was built without CUDA" : "unknown device";
#endif
}

int fl_device_has_entry(int id, const char *name) {
    const fl_device *d = NULL;
    if (id < 0 || id >= FL_DEV_COUNT) d = NULL;
    else if (id == FL_DEV_CPU || fl_devices[id]) d = fl_device_get(id);   /* registered: no probe on each call */
    else if (fl_device_count(id) > 0) d = fl_device_get(id);   /* probes quietly: no notice where there is no GPU */
#define FL_HAS_ENTRY(n, params) if (strcmp(name, #n) == 0) return d != NULL && d->n != NULL;
    FL_DEVICE_ENTRIES(FL_HAS_ENTRY)
#undef FL_HAS_ENTRY
    return -1;
}

const char *fl_device_name(int id) {
    return (id >= 0 && id < FL_DEV_COUNT) ? fl_device_names[id] : "?";
}

/* ---- device management (device.h) ------------------------------------------------------------ */

int fl_device_count(int id) {
    if (id == FL_DEV_CPU) return 1;
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA) return fl_cuda_device_count();
#endif
    return 0;
}

const char *fl_device_probe_reason(int id) {
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA) return fl_cuda_unavailable_reason();
#endif
    return id == FL_DEV_CPU ? "" : fl_device_unavailable(id);
}

fl_status fl_device_synchronize(int id) {
    if (id == FL_DEV_CPU) return FL_OK;
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA) return fl_cuda_synchronize();
#endif
    return FL_ERR(FL_EDEVICE, "synchronize: %s", fl_device_unavailable(id));
}

size_t fl_device_memory_allocated(int id) {
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA) return fl_cuda_memory_allocated();
#endif
    return id == FL_DEV_CPU ? fl_bytes_live(FL_DEV_CPU) : 0;
}

size_t fl_device_max_memory_allocated(int id) {
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA) return fl_cuda_max_memory_allocated();
#endif
    return id == FL_DEV_CPU ? fl_bytes_peak(FL_DEV_CPU) : 0;
}

void fl_device_reset_peak_memory(int id) {
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA) { fl_cuda_reset_peak_memory(); return; }
#endif
    if (id == FL_DEV_CPU) fl_bytes_reset_peak(FL_DEV_CPU);
}

size_t fl_device_memory_reserved(int id) {
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA) return fl_cuda_memory_reserved();
#endif
    return id == FL_DEV_CPU ? fl_bytes_live(FL_DEV_CPU) : 0;
}

size_t fl_device_max_memory_reserved(int id) {
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA) return fl_cuda_max_memory_reserved();
#endif
    return id == FL_DEV_CPU ? fl_bytes_peak(FL_DEV_CPU) : 0;
}

void fl_device_empty_cache(int id) {
#ifdef FL_HAVE_CUDA
    if (id == FL_DEV_CUDA) fl_cuda_empty_cache();
#endif
    (void)id;
}
