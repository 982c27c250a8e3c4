/* profiler.h — a low-overhead recorder of op and range events (wall time on CLOCK_MONOTONIC, thread,
 * nesting, and optionally input shapes, FLOPs and net CPU bytes allocated). While off, an
 * instrumented op pays one predictable branch on the global flag fl_prof_on.
 *
 * Instrumenting a core function (one line after its argument-independent prologue):
 *     FL_PROF_SCOPE("matmul");           the event closes when the function returns (any return)
 *     FL_PROF_SHAPES(a, b);              record_shapes: the tensors' shapes (NULL → "[]")
 *     FL_PROF_FLOPS(2.0 * M * N * K);    with_flops
 *     FL_PROF_HIDE_INNER_FLOPS();        with_flops: the ops it runs inside count none (torch's op counts as one)
 * or, around a call, t = FL_PROF_BEGIN(name) ... FL_PROF_END(t).
 * Events nest per thread: an event begun while another is open on the same thread is its child
 * (parent index, depth; an event more than 256 levels deep has depth but no parent). Ranges
 * (fl_prof_push/fl_prof_end) nest the same way; the Lua side uses them for "ProfilerStep#N" and module
 * paths. Events live in a growable buffer until fl_prof_clear(). Thread-safe; one recording session at a time.
 * Device time (FL_PROF_DEVICE, activities "cuda"): a device that runs work asynchronously registers a
 * clock (the CUDA backend: events on its stream). Every event then also queues a device timestamp where
 * it begins and ends; fl_prof_resolve_device() later turns them into the event's device span — the
 * time the device's queue took to get from the first mark to the second, i.e. the work the event
 * queued plus any time the device sat idle waiting for it. */
#ifndef FL_PROFILER_H
#define FL_PROFILER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "error.h"
#include "prof_clock.h"

struct fl_tensor;

typedef enum { FL_PROF_OP = 0, FL_PROF_RANGE, FL_PROF_MODULE, FL_PROF_KIND_COUNT } fl_prof_kind;
extern const char *const fl_prof_kind_names[];   /* FL_PROF_KIND_COUNT: "op", "range", "module" (profiler.c checks) */

/* Options of a recording session (fl_prof_start). */
enum { FL_PROF_RECORD_SHAPES = 1u, FL_PROF_MEMORY = 2u, FL_PROF_WITH_FLOPS = 4u, FL_PROF_DEVICE = 8u };

typedef struct {
    const char *name;      /* interned: valid until fl_prof_clear() */
    const char *note;      /* interned detail or NULL (module ranges: the module path) */
    const char *shapes;    /* "[[64, 784], [128, 784]]" (record_shapes) or NULL */
    int64_t start_ns;      /* CLOCK_MONOTONIC */
    int64_t end_ns;        /* -1 while open */
    int64_t parent;        /* index of the enclosing event on the same thread, -1 at top level */
    int64_t bytes;         /* profile_memory: net CPU tensor bytes allocated during the event (may be < 0) */
    double flops;          /* with_flops: floating-point operations, 0 when not counted */
    uint64_t tid;          /* kernel thread id */
    int64_t dev_start_ns;  /* FL_PROF_DEVICE: when the device reached the event's begin and end marks, on */
    int64_t dev_end_ns;    /* the CLOCK_MONOTONIC scale (fl_prof_resolve_device); -1 while unknown */
    int depth;             /* 0 at top level */
    fl_prof_kind kind;
} fl_prof_event;

/* Nonzero while recording. Read by the macros below; change it only through start/stop. */
extern atomic_int fl_prof_on;

/* Error if a session is already recording. FL_PROF_DEVICE without a device clock records host time only. */
fl_status fl_prof_start(unsigned flags);
void fl_prof_stop(void);                   /* events stay until fl_prof_clear(); open ones can still end */
unsigned fl_prof_flags(void);              /* the flags of the current (or last) session */
int64_t fl_prof_now_ns(void);

/* Open an event on this thread; returns its token (0 when not recording or out of memory: then
 * nothing is recorded and ending token 0 is a no-op). name and note (may be NULL) are copied
 * (interned by content), so any string works. */
uint64_t fl_prof_begin(const char *name, fl_prof_kind kind, const char *note);
/* Close the event (and any event opened after it on this thread and still open). Tokens from before
 * the last fl_prof_clear() are ignored. */
void fl_prof_end(uint64_t tok);
void fl_prof_set_flops(uint64_t tok, double flops);
/* with_flops: the events opened inside tok's event (on this thread, while it is open) count no FLOPs, as torch counts
 * the op as one (aten::scaled_dot_product_attention: none, whatever it runs inside; aten::conv2d: its own count) */
void fl_prof_hide_inner_flops(uint64_t tok);
/* with_flops: an elementwise op's count (torch's aten::add and aten::mul), kept only where the user called the op:
 * an event not inside another op, or directly inside an autograd node's event (torch's MulBackward0 calls aten::mul);
 * one that a composite op runs inside itself (linear's bias, an optimizer's step) counts none, as torch's fused op */
void fl_prof_set_called_flops(uint64_t tok, double flops);
/* tok's event is an autograd node's backward (fl_autograd's walk); counts_inner false: the ops it runs count no
 * FLOPs (torch's own backward of that op is one uncounted op: ConvolutionBackward0, SoftmaxBackward0, ...) */
void fl_prof_mark_node(uint64_t tok, bool counts_inner);
void fl_prof_set_shapes(uint64_t tok, int n, const struct fl_tensor *const *ts);
/* Close every open event of this thread (stop() on the Lua side, after an error unwound ranges). */
void fl_prof_end_all(void);

/* Reading: the index of an event equals its position since the last clear. fl_prof_get copies
 * one event (strings stay valid until fl_prof_clear). */
size_t fl_prof_count(void);
size_t fl_prof_dropped(void);              /* events lost to allocation failures or the cap */
size_t fl_prof_max_events(void);           /* the cap: events recorded between two fl_prof_clear() */
void fl_prof_set_max_events(size_t n);     /* lower the cap (tests); 0 or more than the default: the default */
bool fl_prof_get(size_t i, fl_prof_event *out);
int64_t fl_prof_index(uint64_t tok);       /* the index of a token's event, -1 for a stale token */
void fl_prof_clear(void);                  /* frees events and names; not while recording on another thread */
/* Fill dev_start_ns/dev_end_ns of every closed event that has device marks (waiting for the device) and
 * free the marks; events still open keep theirs. Returns how many events got a device span. */
size_t fl_prof_resolve_device(void);

/* ---- instrumentation macros --------------------------------------------------------------- */

typedef struct { uint64_t tok; } fl_prof_scope;
static inline void fl_prof_scope_end(fl_prof_scope *s) { if (s->tok) fl_prof_end(s->tok); }

#define FL_PROF_LIKELY_OFF() __builtin_expect(atomic_load_explicit(&fl_prof_on, memory_order_relaxed), 0)
#define FL_PROF_BEGIN(name) (FL_PROF_LIKELY_OFF() ? fl_prof_begin((name), FL_PROF_OP, NULL) : 0)
#define FL_PROF_END(tok) do { if (tok) fl_prof_end(tok); } while (0)

#if defined(__GNUC__) || defined(__clang__)
/* The event closes when the enclosing block is left, whichever return is taken. */
#define FL_PROF_SCOPE(name) \
    fl_prof_scope fl__prof __attribute__((cleanup(fl_prof_scope_end))) = { FL_PROF_BEGIN(name) }
#else
#define FL_PROF_SCOPE(name) fl_prof_scope fl__prof = { 0 }   /* no cleanup attribute: not recorded */
#endif
#define FL_PROF_FLOPS(expr) do { if (fl__prof.tok) fl_prof_set_flops(fl__prof.tok, (double)(expr)); } while (0)
#define FL_PROF_CALLED_FLOPS(expr) \
    do { if (fl__prof.tok) fl_prof_set_called_flops(fl__prof.tok, (double)(expr)); } while (0)
#define FL_PROF_HIDE_INNER_FLOPS() do { if (fl__prof.tok) fl_prof_hide_inner_flops(fl__prof.tok); } while (0)
#define FL_PROF_SHAPES(...)                                                                          \
    do {                                                                                             \
        if (fl__prof.tok && (fl_prof_flags() & FL_PROF_RECORD_SHAPES)) {                             \
            const struct fl_tensor *const fl__ts[] = { __VA_ARGS__ };                                \
            fl_prof_set_shapes(fl__prof.tok, (int)(sizeof fl__ts / sizeof fl__ts[0]), fl__ts);       \
        }                                                                                            \
    } while (0)

#endif
