/* cpu_dnnl_create.c — oneDNN descriptors and primitives made only where the address space they need is free
 * (cpu_internal.h, fl_cpu_dnnl_room and fl_cpu_dnnl_create). oneDNN 2.6's JIT generators are Xbyak code arrays built
 * without exceptions: the mmap of a kernel's code buffer (256 KiB to start, doubled as it grows) is not checked, and
 * the generator then writes its first instruction through NULL, so under a narrow `ulimit -v`
 * dnnl_primitive_desc_create (brgconv makes kernels there) and dnnl_primitive_create died of SIGSEGV. A trial
 * mapping of the scratchpad oneDNN allocates with the primitive (its library mode) plus FL_CPU_DNNL_HEADROOM for the
 * code and its own structures, released before the call, turns that into an out-of-memory error. Freed tensors keep
 * their address space (cpu_device.c keeps them for reuse), so where the room is missing the conv's kept blocked
 * copies, the device's kept blocks and the free top of the heap are given back first, then oneDNN's primitive cache
 * and the cached matmul primitives one by one, the least recently used first, each followed by the trial again
 * (stop 101), then the cached conv primitives (stop 102). A kernel whose code outgrows the headroom can still meet the old failure (docs/robustness.md, stop 100). */
#include "cpu_internal.h"
#include <dnnl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* PROT_NONE and MAP_NORESERVE: the mapping takes address space (what RLIMIT_AS counts) and no memory */
static bool room_for(size_t n) {
    void *p = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    munmap(p, n);
    return true;
}

/* oneDNN's primitive cache emptied of what no handle holds (its capacity set to 0 and back) */
static void flush_dnnl_cache(void) {
    int cap = 0;
    if (dnnl_get_primitive_cache_capacity(&cap) != dnnl_success || cap <= 0) return;
    dnnl_set_primitive_cache_capacity(0);
    dnnl_set_primitive_cache_capacity(cap);
}

fl_status fl_cpu_dnnl_room(const char *op, size_t need) {
    const size_t n = need + (size_t)FL_CPU_DNNL_HEADROOM;
    if (n < need) return FL_ERR(FL_ENOMEM, "%s: out of memory: oneDNN would need %zu bytes", op, need);
    if (room_for(n)) return FL_OK;
    fl_cpu_conv_arena_free();   /* (every caller holds fl_cpu_dnnl_acquire's lock, before a conv's run) */
    fl_cpu_release_kept();
    malloc_trim(0);
    if (room_for(n)) return FL_OK;
    /* the primitives' code: oneDNN's own primitive cache keeps every primitive made (its implementation and JIT
     * code) after its handle is destroyed, so it is emptied first (the entries still held, ours, stay alive), then
     * the cached matmul primitives go, the least recently used first (a generate's 32 lengths held ~120 MiB), each
     * followed by the emptying and the trial again; then the cached conv primitives the same way (stop 102) */
    for (bool more = true; more; more = fl_cpu_matmul_drop_oldest() || fl_cpu_conv_drop_oldest()) {
        flush_dnnl_cache();
        if (room_for(n)) return FL_OK;
    }
    return FL_ERR(FL_ENOMEM, "%s: out of memory: oneDNN's primitive needs about %zu bytes of address space to be created "
                  "(its JIT code and scratchpad), which the process does not have left", op, n);
}

fl_status fl_cpu_dnnl_create(void *prim, const void *pd, const char *op) {
    const_dnnl_primitive_desc_t d = pd;
    dnnl_primitive_t *p = prim;
    *p = NULL;
    int64_t scratch = 0;
    if (dnnl_primitive_desc_query(d, dnnl_query_memory_consumption_s64, 0, &scratch) != dnnl_success || scratch < 0)
        scratch = 0;
    FL_TRY(fl_cpu_dnnl_room(op, (size_t)scratch));
    dnnl_status_t s = dnnl_primitive_create(p, d);
    if (s == dnnl_out_of_memory) return FL_ERR(FL_ENOMEM, "%s: out of memory creating oneDNN's primitive", op);
    if (s != dnnl_success) return FL_ERR(FL_EDEVICE, "%s: oneDNN dnnl_primitive_create failed (status %d)", op, (int)s);
    return FL_OK;
}

fl_status fl_cpu_dnnl_status(int s, const char *op, const char *call) {
    if (s == dnnl_success) return FL_OK;
    if (s == dnnl_out_of_memory) return FL_ERR(FL_ENOMEM, "%s: out of memory in oneDNN's %s", op, call);
    return FL_ERR(FL_EDEVICE, "%s: oneDNN %s failed (status %d)", op, call, s);
}

/* FP8LAB_TEST_DNNL_OOM, read once: the call it names and how many of them fail (-1: every one) */
static struct { _Atomic int state; char call[32]; _Atomic long left; } inj;   /* state: 0 unread, 1 none, 2 set */

bool fl_cpu_dnnl_fail_injected(const char *call) {
    int st = atomic_load(&inj.state);
    if (st == 0) {
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&lock);
        if ((st = atomic_load(&inj.state)) == 0) {
            const char *e = getenv("FP8LAB_TEST_DNNL_OOM");
            const char *colon = e ? strchr(e, ':') : NULL;
            size_t n = e ? (colon ? (size_t)(colon - e) : strlen(e)) : 0;
            st = 1;
            if (n > 0 && n < sizeof inj.call) {
                memcpy(inj.call, e, n);
                inj.call[n] = 0;
                atomic_store(&inj.left, colon ? strtol(colon + 1, NULL, 10) : -1);
                st = 2;
            }
            atomic_store(&inj.state, st);
        }
        pthread_mutex_unlock(&lock);
    }
    if (st != 2 || strcmp(call, inj.call) != 0) return false;
    long left = atomic_load(&inj.left);
    while (left != 0) {
        if (left < 0 || atomic_compare_exchange_weak(&inj.left, &left, left - 1)) return true;
    }
    return false;
}
