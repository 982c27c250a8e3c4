/* profiler.c — the event recorder behind core/profiler.h: events in fixed-size chunks (their
 * addresses never move), names interned by content, one mutex for the buffer, and a per-thread
 * stack of open events that gives each new event its parent. */
#include "profiler.h"
#include "tensor.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char *const fl_prof_kind_names[] = { "op", "range", "module" };
_Static_assert(sizeof fl_prof_kind_names / sizeof *fl_prof_kind_names == FL_PROF_KIND_COUNT, "event kind without a name");

atomic_int fl_prof_on;

#define CHUNK_BITS 12
#define CHUNK_LEN ((size_t)1 << CHUNK_BITS)
#define MAX_EVENTS ((size_t)1 << 22)     /* ~4M events (~450 MiB): a forgotten profiler stops growing */
#define MAX_DEPTH 256                   /* the open events a thread's stack holds; deeper ones get no parent */
#define GEN_SHIFT 40
#define GEN_MASK (((uint64_t)1 << 20) - 1)

typedef struct {
    fl_prof_event pub;
    int64_t live0;                       /* profile_memory: fl_bytes_live at begin */
    uint64_t m0, m1;                     /* device marks at begin and end (0: none) */
    bool mem;
    bool hide;                           /* with_flops: the events opened inside this one count none */
    bool hidden;                         /* inside such an event: fl_prof_set_flops leaves this one at 0 */
    bool node;                           /* an autograd node's backward (fl_prof_mark_node) */
    bool nested;                         /* directly inside another op that is not a node: no called-op count */
} ev_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static ev_t **chunks;                    /* chunks[i >> CHUNK_BITS][i & (CHUNK_LEN - 1)] */
static size_t nchunks, cap_chunks, count, dropped;
static size_t max_events = MAX_EVENTS;   /* guarded by mu; fl_prof_set_max_events (tests) lowers it */
static uint64_t gen = 1;                 /* bumped by clear: older tokens and thread stacks are stale */
static atomic_uint flags;
static const fl_prof_device_clock *dclock;   /* guarded by mu */
static uint64_t dorigin;                     /* the session's origin mark (0: no device time) */
static int64_t dorigin_ns;                   /* its CLOCK_MONOTONIC time */

/* Interned strings: open addressing on an FNV-1a hash; freed by clear. */
static char **itab;
static uint64_t *ihash;
static size_t icap, icount;

static _Thread_local uint64_t tl_gen;
/* tl_depth counts every open event of the thread; tl_stack holds the first MAX_DEPTH of them. */
static _Thread_local int64_t tl_stack[MAX_DEPTH];
static _Thread_local int tl_depth;
static _Thread_local uint64_t tl_tid;

int64_t fl_prof_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t thread_id(void) {
    if (!tl_tid) tl_tid = (uint64_t)syscall(SYS_gettid);
    return tl_tid;
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h | 1;                        /* 0 marks an empty slot */
}

static bool intern_grow(void) {
    size_t ncap = icap ? icap * 2 : 256;
    char **nt = calloc(ncap, sizeof *nt);
    uint64_t *nh = calloc(ncap, sizeof *nh);
    if (!nt || !nh) { free(nt); free(nh); return false; }
    for (size_t i = 0; i < icap; i++) {
        if (!ihash[i]) continue;
        size_t j = ihash[i] & (ncap - 1);
        while (nh[j]) j = (j + 1) & (ncap - 1);
        nh[j] = ihash[i];
        nt[j] = itab[i];
    }
    free(itab);
    free(ihash);
    itab = nt;
    ihash = nh;
    icap = ncap;
    return true;
}

/* The stable copy of s (caller holds mu); NULL when out of memory. */
static const char *intern(const char *s) {
    if (2 * (icount + 1) > icap && !intern_grow()) return NULL;
    uint64_t h = fnv1a(s);
    size_t j = h & (icap - 1);
    for (; ihash[j]; j = (j + 1) & (icap - 1))
        if (ihash[j] == h && strcmp(itab[j], s) == 0) return itab[j];
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (!c) return NULL;
    memcpy(c, s, n);
    ihash[j] = h;
    itab[j] = c;
    icount++;
    return c;
}

static ev_t *at(size_t i) { return &chunks[i >> CHUNK_BITS][i & (CHUNK_LEN - 1)]; }

/* A fresh slot at index `count` (caller holds mu); NULL at the cap or out of memory. */
static ev_t *new_slot(void) {
    if (count >= max_events) return NULL;
    size_t c = count >> CHUNK_BITS;
    if (c >= nchunks) {
        if (nchunks == cap_chunks) {
            size_t ncap = cap_chunks ? cap_chunks * 2 : 16;
            ev_t **nc = realloc(chunks, ncap * sizeof *nc);
            if (!nc) return NULL;
            chunks = nc;
            cap_chunks = ncap;
        }
        chunks[nchunks] = malloc(CHUNK_LEN * sizeof(ev_t));
        if (!chunks[nchunks]) return NULL;
        nchunks++;
    }
    return at(count);
}

static void sync_thread(void) {
    if (tl_gen != gen) { tl_gen = gen; tl_depth = 0; }
}

static uint64_t token_of(size_t idx) { return ((gen & GEN_MASK) << GEN_SHIFT) | (uint64_t)(idx + 1); }

/* The event index of a live token (caller holds mu), or -1. */
static int64_t index_of(uint64_t tok) {
    if (!tok || (tok >> GEN_SHIFT) != (gen & GEN_MASK)) return -1;
    uint64_t i = (tok & (((uint64_t)1 << GEN_SHIFT) - 1)) - 1;
    return i < count ? (int64_t)i : -1;
}

void fl_prof_set_device_clock(const fl_prof_device_clock *c) {
    pthread_mutex_lock(&mu);
    dclock = c;
    pthread_mutex_unlock(&mu);
}

bool fl_prof_has_device_clock(void) {
    pthread_mutex_lock(&mu);
    bool r = dclock != NULL;
    pthread_mutex_unlock(&mu);
    return r;
}

fl_status fl_prof_start(unsigned f) {
    pthread_mutex_lock(&mu);
    if (atomic_load(&fl_prof_on)) {
        pthread_mutex_unlock(&mu);
        return FL_ERR(FL_EINVAL, "profiler: already recording (stop the running profiler first)");
    }
    if ((f & FL_PROF_DEVICE) && dclock && !dorigin) dorigin = dclock->origin(&dorigin_ns);
    if (!dorigin) f &= ~(unsigned)FL_PROF_DEVICE;
    atomic_store(&flags, f);
    atomic_store(&fl_prof_on, 1);
    pthread_mutex_unlock(&mu);
    return FL_OK;
}

void fl_prof_stop(void) { atomic_store(&fl_prof_on, 0); }
unsigned fl_prof_flags(void) { return atomic_load_explicit(&flags, memory_order_relaxed); }

uint64_t fl_prof_begin(const char *name, fl_prof_kind kind, const char *note) {
    if (!atomic_load_explicit(&fl_prof_on, memory_order_relaxed) || !name) return 0;
    uint64_t tid = thread_id();
    unsigned f = fl_prof_flags();
    pthread_mutex_lock(&mu);
    sync_thread();
    ev_t *e = new_slot();
    const char *iname = e ? intern(name) : NULL, *inote = note && iname ? intern(note) : NULL;
    if (!e || !iname || (note && !inote)) {
        dropped++;
        pthread_mutex_unlock(&mu);
        return 0;
    }
    size_t idx = count++;
    memset(e, 0, sizeof *e);
    e->pub.name = iname;
    e->pub.note = inote;
    e->pub.kind = kind;
    e->pub.tid = tid;
    e->pub.end_ns = -1;
    /* Past the stack's depth the enclosing event is not known: no parent (then self time never goes negative) */
    e->pub.parent = tl_depth > 0 && tl_depth <= MAX_DEPTH ? tl_stack[tl_depth - 1] : -1;
    e->pub.depth = tl_depth;
    if (e->pub.parent >= 0) {
        const ev_t *p = at((size_t)e->pub.parent);
        e->hidden = p->hide || p->hidden;
        e->nested = p->pub.kind == FL_PROF_OP && !p->node;
    }
    if (tl_depth < MAX_DEPTH) tl_stack[tl_depth] = (int64_t)idx;
    tl_depth++;
    e->mem = (f & FL_PROF_MEMORY) != 0;
    if (e->mem) e->live0 = (int64_t)fl_bytes_live(FL_DEV_CPU);
    e->pub.dev_start_ns = e->pub.dev_end_ns = -1;
    if ((f & FL_PROF_DEVICE) && dclock && dorigin) e->m0 = dclock->mark();
    uint64_t tok = token_of(idx);
    e->pub.start_ns = fl_prof_now_ns();   /* last, so the bookkeeping above is not in the event */
    pthread_mutex_unlock(&mu);
    return tok;
}

static void close_ev(ev_t *e, int64_t now) {
    if (e->pub.end_ns >= 0) return;
    e->pub.end_ns = now;
    if (e->m0 && dclock) e->m1 = dclock->mark();
    if (e->mem) e->pub.bytes = (int64_t)fl_bytes_live(FL_DEV_CPU) - e->live0;
}

/* Close this thread's open events after index i (caller holds mu). */
static void close_after(int64_t i, int64_t now) {
    uint64_t tid = thread_id();
    for (size_t j = (size_t)i + 1; j < count; j++)
        if (at(j)->pub.tid == tid) close_ev(at(j), now);
}

void fl_prof_end(uint64_t tok) {
    if (!tok) return;
    int64_t now = fl_prof_now_ns();      /* first, for the same reason */
    pthread_mutex_lock(&mu);
    int64_t i = index_of(tok);
    if (i >= 0) {
        sync_thread();
        /* Close the event and whatever this thread opened after it (ranges a Lua error skipped). An open
         * event of this thread's current generation was opened at stack position `depth`; those past the
         * stack are found by a scan (every event of this thread opened after an open one lies inside it). */
        ev_t *e = at((size_t)i);
        int d = e->pub.depth;
        if (e->pub.end_ns < 0 && e->pub.tid == thread_id() && d < tl_depth && (d >= MAX_DEPTH || tl_stack[d] == i)) {
            if (tl_depth > MAX_DEPTH) close_after(i, now);
            for (int k = (tl_depth < MAX_DEPTH ? tl_depth : MAX_DEPTH) - 1; k > d; k--) close_ev(at((size_t)tl_stack[k]), now);
            tl_depth = d;
        }
        close_ev(e, now);
    }
    pthread_mutex_unlock(&mu);
}

void fl_prof_end_all(void) {
    int64_t now = fl_prof_now_ns();
    pthread_mutex_lock(&mu);
    sync_thread();
    if (tl_depth > MAX_DEPTH) { close_after(tl_stack[MAX_DEPTH - 1], now); tl_depth = MAX_DEPTH; }
    while (tl_depth > 0) close_ev(at((size_t)tl_stack[--tl_depth]), now);
    pthread_mutex_unlock(&mu);
}

void fl_prof_set_flops(uint64_t tok, double fl) {
    if (!(fl_prof_flags() & FL_PROF_WITH_FLOPS)) return;
    pthread_mutex_lock(&mu);
    int64_t i = index_of(tok);
    if (i >= 0 && !at((size_t)i)->hidden) at((size_t)i)->pub.flops = fl;
    pthread_mutex_unlock(&mu);
}

void fl_prof_set_called_flops(uint64_t tok, double fl) {
    if (!(fl_prof_flags() & FL_PROF_WITH_FLOPS)) return;
    pthread_mutex_lock(&mu);
    int64_t i = index_of(tok);
    if (i >= 0 && !at((size_t)i)->hidden && !at((size_t)i)->nested) at((size_t)i)->pub.flops = fl;
    pthread_mutex_unlock(&mu);
}

void fl_prof_mark_node(uint64_t tok, bool counts_inner) {
    if (!(fl_prof_flags() & FL_PROF_WITH_FLOPS)) return;   /* (it only decides counts) */
    pthread_mutex_lock(&mu);
    int64_t i = index_of(tok);
    if (i >= 0) {
        at((size_t)i)->node = true;
        if (!counts_inner) at((size_t)i)->hide = true;
    }
    pthread_mutex_unlock(&mu);
}

void fl_prof_hide_inner_flops(uint64_t tok) {
    if (!(fl_prof_flags() & FL_PROF_WITH_FLOPS)) return;
    pthread_mutex_lock(&mu);
    int64_t i = index_of(tok);
    if (i >= 0) at((size_t)i)->hide = true;
    pthread_mutex_unlock(&mu);
}

/* Appends "[d0, d1, ...]" to buf at *len (no snprintf: this runs once per recorded op); false when full. */
static bool put_shape(char *buf, size_t cap, size_t *len, const fl_tensor *t) {
    size_t n = *len;
    if (n + 2 >= cap) return false;
    buf[n++] = '[';
    for (int d = 0; t && d < t->ndim; d++) {
        char digits[24];
        int k = 0;
        uint64_t v = t->shape[d] < 0 ? 0 : (uint64_t)t->shape[d];
        do { digits[k++] = (char)('0' + v % 10); v /= 10; } while (v);
        if (n + (size_t)k + 4 >= cap) return false;
        if (d) { buf[n++] = ','; buf[n++] = ' '; }
        while (k) buf[n++] = digits[--k];
    }
    buf[n++] = ']';
    *len = n;
    return true;
}

void fl_prof_set_shapes(uint64_t tok, int n, const struct fl_tensor *const *ts) {
    char buf[1024];
    size_t len = 0;
    buf[len++] = '[';
    for (int k = 0; k < n; k++) {
        size_t mark = len;
        if (k) { buf[len++] = ','; buf[len++] = ' '; }
        if (!put_shape(buf, sizeof buf - 2, &len, ts[k])) { len = mark; break; }
    }
    buf[len++] = ']';
    buf[len] = '\0';
    pthread_mutex_lock(&mu);
    int64_t i = index_of(tok);
    if (i >= 0) at((size_t)i)->pub.shapes = intern(buf);   /* NULL when out of memory: no shapes */
    pthread_mutex_unlock(&mu);
}

size_t fl_prof_count(void) {
    pthread_mutex_lock(&mu);
    size_t n = count;
    pthread_mutex_unlock(&mu);
    return n;
}

size_t fl_prof_max_events(void) {
    pthread_mutex_lock(&mu);
    size_t n = max_events;
    pthread_mutex_unlock(&mu);
    return n;
}

void fl_prof_set_max_events(size_t n) {
    pthread_mutex_lock(&mu);
    max_events = n && n < MAX_EVENTS ? n : MAX_EVENTS;
    pthread_mutex_unlock(&mu);
}

size_t fl_prof_dropped(void) {
    pthread_mutex_lock(&mu);
    size_t n = dropped;
    pthread_mutex_unlock(&mu);
    return n;
}

bool fl_prof_get(size_t i, fl_prof_event *out) {
    pthread_mutex_lock(&mu);
    bool ok = i < count;
    if (ok) *out = at(i)->pub;
    pthread_mutex_unlock(&mu);
    return ok;
}

int64_t fl_prof_index(uint64_t tok) {
    pthread_mutex_lock(&mu);
    int64_t i = index_of(tok);
    pthread_mutex_unlock(&mu);
    return i;
}

/* Give every device mark back (caller holds mu). */
static void release_marks(void) {
    for (size_t i = 0; dclock && i < count; i++) {
        ev_t *e = at(i);
        if (e->m0) dclock->release(e->m0);
        if (e->m1) dclock->release(e->m1);
        e->m0 = e->m1 = 0;
    }
}

size_t fl_prof_resolve_device(void) {
    size_t n = 0;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; dclock && dorigin && i < count; i++) {
        ev_t *e = at(i);
        if (!e->m0 || !e->m1) continue;
        int64_t a, b;
        if (dclock->elapsed_ns(dorigin, e->m0, &a) && dclock->elapsed_ns(dorigin, e->m1, &b)) {
            e->pub.dev_start_ns = dorigin_ns + a;
            e->pub.dev_end_ns = dorigin_ns + (b > a ? b : a);
            n++;
        }
        dclock->release(e->m0);
        dclock->release(e->m1);
        e->m0 = e->m1 = 0;
    }
    pthread_mutex_unlock(&mu);
    return n;
}

void fl_prof_clear(void) {
    pthread_mutex_lock(&mu);
    release_marks();
    if (dorigin && dclock && !atomic_load(&fl_prof_on)) { dclock->release(dorigin); dorigin = 0; }
    for (size_t c = 0; c < nchunks; c++) free(chunks[c]);
    free(chunks);
    chunks = NULL;
    nchunks = cap_chunks = count = dropped = 0;
    for (size_t j = 0; j < icap; j++) free(itab[j]);
    free(itab);
    free(ihash);
    itab = NULL;
    ihash = NULL;
    icap = icount = 0;
    gen++;
    pthread_mutex_unlock(&mu);
}
