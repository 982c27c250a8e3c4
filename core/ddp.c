/* ddp.c — the bucketed gradient reducer of ddp.h on the communicator of dist.h.
 * Items (dense buckets and single FP8-gradient parameters) are started strictly in item order, as
 * PyTorch's Reducer does: MPI collectives must be issued in the same order on every rank, and a rank
 * whose backward finishes parameters in another order only starts later, never out of order. */
#include "ddp.h"
#include "autograd.h"
#include "dist.h"
#include "fault.h"
#include "scaling.h"   /* fl_scale_for: the shared scale rule */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* Address space held from each synchronising backward's start and given back before a failed one's collectives
 * (fl_ddp_finish): a process whose backward ran out of memory still has to run them, and MPI's non-blocking
 * all-reduce allocates inside (under `ulimit -v` with the space taken, MPI_Iallreduce failed, MPI_ERR_INTERN, and the
 * other process waited in its bucket's all-reduce until the process group's timeout: stop 102). PROT_NONE and
 * MAP_NORESERVE: what RLIMIT_AS counts, no memory. */
#define DDP_RESERVE ((size_t)16 << 20)

typedef struct {
    bool fp8;                 /* one FP8-gradient parameter */
    int first, count;         /* params[order[first .. first+count)] */
    int pending;              /* parameters not yet ready in this backward */
    bool started;
    bool amax_done;           /* FP8: this backward's amax all-reduce ran and buf holds the cast gradient */
    void *buf;                /* wire buffer */
    int64_t numel;
    fl_dtype wire;
    fl_dist_req *req;
    float scale;              /* FP8: the shared scale of this reduction */
} item;

struct fl_ddp {
    int n;
    fl_tensor **params;
    char **names;
    int *order;               /* item layout: parameter indices in reverse registration order */
    int *item_of;             /* param index → item */
    bool *ready;
    int nitems, next;         /* next item to start */
    item *items;
    fl_ddp_opts o;
    fl_ddp_stats stats;
    bool armed;
    struct { fl_tensor *p; int i; } *lookup;   /* sorted by pointer */
    float *flags;             /* fl_ddp_finish's flags (n + 1), made with the reducer: nothing allocated there */
    bool *skip;               /* fl_ddp_finish's unused-everywhere map (n) */
    fl_tensor **fresh;        /* fl_ddp_finish's new .grad tensors, made before its flags (n; NULL: none needed) */
    void *reserve;            /* DDP_RESERVE bytes of address space, or NULL */
};

static void reserve_take(fl_ddp *d) {
    if (d->reserve) return;
    void *p = mmap(NULL, DDP_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    d->reserve = p == MAP_FAILED ? NULL : p;
}

static void reserve_give(fl_ddp *d) {
    if (d->reserve) munmap(d->reserve, DDP_RESERVE);
    d->reserve = NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A collective of the step that MPI failed on this process. It may have sent part of its messages, or none, and the
 * others may be waiting in it: no collective issued after it can be trusted to pair with theirs (a retry could meet
 * their next one; going on, this process's next collective would), and a failure flag would have to travel over the
 * same communicator. The job ends, naming the collective and this rank (the watchdog's end, without its wait). */
static void collective_failed(const char *what, fl_status st) {
    (void)st;
    /* except where MPI found the processes' collectives paired wrongly (MPI_ERR_TRUNCATE, dist.c's "did not pair"): a
     * script's error (a step one process skipped), which every process meets and raises with its hint, as before */
    if (strstr(fl_last_error_detail(), "did not pair")) return;
    char msg[768];
    snprintf(msg, sizeof msg, "rank %d: DDP's %s failed (%s); the processes' collectives can no longer pair (the "
             "others may be waiting in it, or meet this process's next one), so the job ends", fl_dist_rank(), what,
             fl_last_error_detail());
    fl_dist_abort(msg);
}

static int cmp_lookup(const void *a, const void *b) {
    uintptr_t x = (uintptr_t)*(fl_tensor *const *)a, y = (uintptr_t)*(fl_tensor *const *)b;
    return x < y ? -1 : x > y;
}

static int index_of(const fl_ddp *d, const fl_tensor *t) {
    int lo = 0, hi = d->n - 1;
    while (lo <= hi) {
        int m = (lo + hi) / 2;
        if (d->lookup[m].p == t) return d->lookup[m].i;
        if ((uintptr_t)d->lookup[m].p < (uintptr_t)t) lo = m + 1; else hi = m - 1;
    }
    return -1;
}

static bool is_fp8(fl_dtype dt) { return fl_format(dt)->is_fp8; }

void fl_ddp_free(fl_ddp *d) {
    if (!d) return;
    bool inflight = false;
    for (int k = 0; k < d->nitems; k++) if (d->items[k].req) inflight = true;
    if (d->armed) fl_autograd_set_grad_ready_hook(NULL, NULL);
    reserve_give(d);
    for (int i = 0; i < d->n; i++) { fl_tensor_release(d->params[i]); free(d->names ? d->names[i] : NULL); }
    /* a collective still in flight (after a failed backward) may write its buffer: leave it to MPI */
    if (!inflight) for (int k = 0; k < d->nitems; k++) free(d->items[k].buf);
    free(d->params); free(d->names); free(d->order); free(d->item_of); free(d->ready); free(d->items); free(d->lookup);
    free(d->flags); free(d->skip);
    if (d->fresh) for (int i = 0; i < d->n; i++) fl_tensor_release(d->fresh[i]);
    free(d->fresh);
    free(d);
}

fl_status fl_ddp_new(fl_ddp **out, fl_tensor *const *params, const char *const *names, int n, const fl_ddp_opts *o) {
    *out = NULL;
    if (n < 0) return FL_ERR(FL_EINVAL, "ddp: negative parameter count");
    if (!(o->bucket_cap_bytes > 0)) return FL_ERR(FL_EINVAL, "ddp: bucket_cap must be > 0");
    if (o->wire != FL_F32 && o->wire != FL_F16 && o->wire != FL_BF16)
        return FL_ERR(FL_EINVAL, "ddp: the wire dtype must be fp32, fp16 or bf16, got %s", fl_format(o->wire)->name);
    fl_ddp *d = calloc(1, sizeof *d);
    if (!d) return FL_ERR(FL_ENOMEM, "ddp: out of memory");
    d->n = n;
    d->o = *o;
    d->params = calloc(n ? n : 1, sizeof *d->params);
    d->names = calloc(n ? n : 1, sizeof *d->names);
    d->order = calloc(n ? n : 1, sizeof *d->order);
    d->item_of = calloc(n ? n : 1, sizeof *d->item_of);
    d->ready = calloc(n ? n : 1, sizeof *d->ready);
    d->items = calloc(n ? n : 1, sizeof *d->items);
    d->lookup = calloc(n ? n : 1, sizeof *d->lookup);
    d->flags = calloc((size_t)n + 1, sizeof *d->flags);
    d->skip = calloc(n ? n : 1, sizeof *d->skip);
    d->fresh = calloc(n ? n : 1, sizeof *d->fresh);
    if (!d->params || !d->names || !d->order || !d->item_of || !d->ready || !d->items || !d->lookup || !d->flags ||
        !d->skip || !d->fresh)
        goto oom;
    for (int i = 0; i < n; i++) {
        const fl_tensor *p = params[i];
        if (p->device != FL_DEV_CPU) { fl_ddp_free(d); return fl_dist_check_tensor_cpu(p, "ddp (the bucketed reducer runs on CPU gradients)"); }
        d->params[i] = fl_tensor_retain((fl_tensor *)p);
        d->names[i] = strdup(names && names[i] ? names[i] : "?");
        if (!d->names[i]) goto oom;
        d->lookup[i].p = d->params[i];
        d->lookup[i].i = i;
    }
    qsort(d->lookup, n, sizeof *d->lookup, cmp_lookup);
    for (int i = 1; i < n; i++)
        if (d->lookup[i].p == d->lookup[i - 1].p) {
            fl_status st = FL_ERR(FL_EINVAL, "ddp: parameter '%s' is listed twice", d->names[d->lookup[i].i]);
            fl_ddp_free(d);
            return st;
        }
    /* items, in reverse registration order */
    double cap_elems = o->bucket_cap_bytes / 4.0;   /* the cap counts fp32 gradient bytes, as PyTorch's */
    for (int k = 0; k < n; k++) d->order[k] = n - 1 - k;
    int cur = -1;
    for (int k = 0; k < n; k++) {
        int i = d->order[k];
        int64_t ne = fl_tensor_numel(d->params[i]);
        bool f8 = is_fp8(d->params[i]->grad_dtype);
        if (f8 || cur < 0 || d->items[cur].fp8 || (double)(d->items[cur].numel + ne) > cap_elems) {
            cur = d->nitems++;
            d->items[cur] = (item){ .fp8 = f8, .first = k, .count = 0, .wire = f8 ? d->params[i]->grad_dtype : o->wire };
            if (!f8) d->stats.buckets++;
        }
        d->items[cur].count++;
        d->items[cur].numel += ne;
        d->item_of[i] = cur;
    }
    for (int k = 0; k < d->nitems; k++) {
        item *it = &d->items[k];
        size_t esz = it->fp8 ? 1 : (it->wire == FL_F32 ? 4 : 2);
        it->buf = malloc((size_t)(it->numel ? it->numel : 1) * esz);
        if (!it->buf) goto oom;
    }
    *out = d;
    return FL_OK;
oom:
    fl_ddp_free(d);
    return FL_ERR(FL_ENOMEM, "ddp: out of memory for %d parameters", n);
}

/* ---- packing ----------------------------------------------------------------------------- */

/* The gradient of p as contiguous fp32 values into dst (zeros when it has none), times mul. */
static fl_status grad_f32(const fl_tensor *p, float *dst, float mul) {
    int64_t ne = fl_tensor_numel(p);
    const fl_tensor *g = p->grad;
    if (!g) { memset(dst, 0, (size_t)ne * sizeof *dst); return FL_OK; }
    fl_tensor *c = NULL;
    if (g->device != FL_DEV_CPU) return fl_dist_check_tensor_cpu(g, "ddp");
    if (g->dtype == FL_F32 && fl_tensor_is_contiguous(g)) {
        const float *s = fl_tensor_data(g);
        for (int64_t j = 0; j < ne; j++) dst[j] = s[j] * mul;
        return FL_OK;
    }
    if (is_fp8(g->dtype)) {
        if (!g->scale_inv || g->scale_axis != -1 || !fl_tensor_is_contiguous(g))
            return FL_ERR(FL_EUNSUPPORTED, "ddp: FP8 gradients need one per-tensor scale");
        fl_dequantize_f32(fl_tensor_data(g), dst, (size_t)ne, g->dtype, *(float *)fl_tensor_data(g->scale_inv) * mul);
        return FL_OK;
    }
    FL_TRY(fl_tensor_to(&c, g, FL_F32));
    const float *s = fl_tensor_data(c);
    for (int64_t j = 0; j < ne; j++) dst[j] = s[j] * mul;
    fl_tensor_release(c);
    return FL_OK;
}

/* Whether any of v[0..n) is a NaN: the exponent all ones with a nonzero mantissa, tested on the bits (an OR
 * reduction the compiler vectorises; isnan in a loop with an early exit it does not). */
static bool has_nan(const float *v, int64_t n) {
    uint32_t any = 0;
    for (int64_t j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, &v[j], sizeof u);   /* the bits, without breaking aliasing rules */
        any |= (u & 0x7fffffffu) > 0x7f800000u;
    }
    return any != 0;
}

/* Codes whose magnitude is at least the format's max (its max and, in E5M2, infinity): the saturation count of an
 * FP8 sum, read per byte from a table built from the decoder (256 decodes a call, against one per value before). */
static int64_t count_saturated(const uint8_t *b, int64_t n, fl_dtype fmt) {
    uint8_t sat[256];
    const float mx = fl_format(fmt)->max;
    for (int c = 0; c < 256; c++) sat[c] = fabsf(fl_fp8_to_f32((uint8_t)c, fmt)) >= mx;
    int64_t k = 0;
    for (int64_t j = 0; j < n; j++) k += sat[b[j]];
    return k;
}

/* The item's collectives are issued whatever its packing met (out of memory, a gradient it cannot read): the buffer
 * then holds zeros, the packing's error is returned and the backward fails on this process, which fl_ddp_finish's
 * flag makes an error on every process; a packing error that returned before the collectives (until stop 102) left
 * the other processes waiting in them. */
static fl_status start_item(fl_ddp *d, item *it) {
    double t0 = now_s();
    float inv_n = 1.0f / (float)fl_dist_size();
    fl_status st = FL_OK, pack = FL_OK;
    const size_t wbytes = (size_t)(it->numel ? it->numel : 1) * (it->fp8 ? 1 : it->wire == FL_F32 ? 4 : 2);
    if (!it->fp8) {
        float *tmp = NULL;
        if (it->wire != FL_F32 && fl_fault("ddp_pack", fl_dist_rank()))
            pack = FL_ERR(FL_ENOMEM, "ddp: out of memory packing a bucket (a failure injected by FP8LAB_FAULT_DIST, "
                          "a test hook)");
        else if (it->wire != FL_F32 && !(tmp = malloc((size_t)(it->numel ? it->numel : 1) * sizeof *tmp)))
            pack = FL_ERR(FL_ENOMEM, "ddp: out of memory packing a bucket");
        float *dst = it->wire == FL_F32 ? it->buf : tmp;
        int64_t off = 0;
        for (int k = it->first; k < it->first + it->count && pack == FL_OK; k++) {
            const fl_tensor *p = d->params[d->order[k]];
            pack = grad_f32(p, dst + off, inv_n);    /* divided before the sum, as PyTorch's Reducer */
            off += fl_tensor_numel(p);
        }
        if (pack == FL_OK && it->wire == FL_F16) fl_f32_to_f16_n(tmp, it->buf, (size_t)it->numel);
        if (pack == FL_OK && it->wire == FL_BF16) fl_f32_to_bf16_n(tmp, it->buf, (size_t)it->numel);
        free(tmp);
        if (pack != FL_OK) memset(it->buf, 0, wbytes);
        st = fl_dist_iallreduce(it->buf, it->numel, it->wire, FL_RED_SUM, &it->req);
        d->stats.wire_bytes += it->numel * (it->wire == FL_F32 ? 4 : 2);
    } else if (!it->amax_done) {
        /* FP8: shared power-of-two scale from the MAX-reduced amax, grad/N cast with it, bytes summed. */
        const fl_tensor *p = d->params[d->order[it->first]];
        float *v = malloc((size_t)(it->numel ? it->numel : 1) * sizeof *v);
        if (!v) pack = FL_ERR(FL_ENOMEM, "ddp: out of memory packing an FP8 gradient");
        if (pack == FL_OK) pack = grad_f32(p, v, 1.0f);
        /* a NaN anywhere makes the amax infinite, as an infinity does (fl_amax_f32 itself ignores NaNs); a packing
         * that failed takes part with 0 */
        float amax = pack == FL_OK ? (has_nan(v, it->numel) ? INFINITY : fl_amax_f32(v, (size_t)it->numel)) : 0.0f;
        st = fl_dist_allreduce(&amax, 1, FL_F32, FL_RED_MAX);
        /* (until stop 104 it was issued again in fl_ddp_finish, which paired only where it had sent nothing) */
        if (st != FL_OK) collective_failed("MAX all-reduce of an FP8 gradient's amax (MS-AMP)", st);
        if (st == FL_OK && pack != FL_OK) {
            it->scale = 1.0f;
            memset(it->buf, 0, wbytes);
        } else if (st == FL_OK) {
            it->scale = isfinite(amax) ? fl_scale_for(amax, it->wire, 0, true, 1.0f) : 1.0f;
            fl_cast_stats cs;
            if (!isfinite(amax)) for (int64_t j = 0; j < it->numel; j++) v[j] = NAN;   /* every rank sees the overflow */
            /* a cast that fails (interrupted: its poll) is a packing that failed, zeros sent; until stop 104 it left
             * the item unissued after its amax all-reduce, and fl_ddp_finish ran that all-reduce again */
            pack = fl_quantize_f32(v, it->buf, (size_t)it->numel, it->wire, it->scale * inv_n, FL_SATURATE, &cs);
            if (pack == FL_OK) d->stats.fp8_underflow += cs.underflow;   /* nonzero values cast to zero */
            else { it->scale = 1.0f; memset(it->buf, 0, wbytes); }
            d->stats.fp8_n += it->numel;
        }
        free(v);
        /* the amax all-reduce ran on every process (st: its status): an item issued again (its MPI_Iallreduce
         * failed) issues only its sum, from the bytes cast here. Until stop 103 it ran the amax all-reduce again,
         * which met the other processes' sum (or flags) all-reduce: MPI_ERR_TRUNCATE there, or a step that one
         * process took as averaged */
        it->amax_done = st == FL_OK;
        if (st == FL_OK) st = fl_dist_iallreduce(it->buf, it->numel, it->wire, FL_RED_SUM, &it->req);
        d->stats.wire_bytes += it->numel + 4;
    } else {
        st = fl_dist_iallreduce(it->buf, it->numel, it->wire, FL_RED_SUM, &it->req);
    }
    d->stats.comm_s += now_s() - t0;
    /* not started where the collective itself failed (MPI_Iallreduce answered MPI_ERR_INTERN with the address space
     * taken): fl_ddp_finish issues it again, with DDP_RESERVE given back; counted as started, it was never issued
     * here and the other processes waited in it, or Open MPI's libnbc crashed in its progress (stop 102) */
    it->started = st == FL_OK;
    return st != FL_OK ? st : pack;
}

/* Start every item, in order, whose parameters are all ready. */
static fl_status start_ready(fl_ddp *d, bool in_backward) {
    /* every ready item is started, and counted as started, even where one's packing failed (start_item issued its
     * collectives): stopping there left the rest unstarted here and started on the other processes; one whose
     * collective failed stays the next (not issued) */
    fl_status first = FL_OK;
    while (d->next < d->nitems && d->items[d->next].pending == 0) {
        fl_status s = start_item(d, &d->items[d->next]);
        if (first == FL_OK) first = s;
        if (!d->items[d->next].started) break;
        if (in_backward) d->stats.early++;
        d->next++;
    }
    FL_TRY(first);
    /* MPI progresses non-blocking collectives inside MPI calls: poke the started ones */
    for (int k = 0; k < d->next; k++) {
        bool done;
        if (d->items[k].req) FL_TRY(fl_dist_test(d->items[k].req, &done));
    }
    return FL_OK;
}

static fl_status on_ready(fl_tensor *leaf, void *ud) {
    fl_ddp *d = ud;
    int i = index_of(d, leaf);
    if (i < 0 || d->ready[i]) return FL_OK;
    d->ready[i] = true;
    d->items[d->item_of[i]].pending--;
    /* find_unused: every item starts after backward, in fl_ddp_finish (a parameter unused here would hold its
     * item and every later one back anyway: items start in order) */
    return d->o.find_unused ? FL_OK : start_ready(d, true);
}

fl_status fl_ddp_begin(fl_ddp *d) {
    for (int i = 0; i < d->n; i++) d->ready[i] = false;
    for (int k = 0; k < d->nitems; k++) {
        item *it = &d->items[k];
        if (it->req) return FL_ERR(FL_EINVAL, "ddp: a reduction is still in flight (a backward failed?)");
        it->pending = it->count;
        it->started = false;
        it->amax_done = false;
    }
    d->next = 0;
    d->stats.early = 0;
    d->stats.wire_bytes = 0;
    d->stats.wait_s = 0;
    d->stats.comm_s = 0;
    d->stats.fp8_underflow = d->stats.fp8_saturated = d->stats.fp8_n = 0;
    fl_autograd_set_grad_ready_hook(on_ready, d);
    d->armed = true;
    reserve_take(d);
    return FL_OK;
}

void fl_ddp_cancel(fl_ddp *d) {
    if (d->armed) fl_autograd_set_grad_ready_hook(NULL, NULL);
    d->armed = false;
}

/* Whether parameter p's .grad cannot take item it's reduced values as it is (none, another dtype or layout). */
static bool needs_fresh(const item *it, const fl_tensor *p) {
    const fl_tensor *g = p->grad;
    if (it->fp8) return !g || g->dtype != it->wire || !fl_tensor_is_contiguous(g) || !g->scale_inv;
    return !g || g->dtype != FL_F32 || !fl_tensor_is_contiguous(g) || g->device != FL_DEV_CPU;
}

static void drop_fresh(fl_ddp *d) {
    for (int i = 0; i < d->n; i++) { fl_tensor_release(d->fresh[i]); d->fresh[i] = NULL; }
}

/* The new .grad tensors the write-back will need, made before fl_ddp_finish's flags: a failure here (out of memory) is
 * then the step's failure on every process. Until stop 104 the write-back made them after the flags, and one
 * process's failure there failed its step while the others' ran (their parameters then differed). */
static fl_status make_fresh(fl_ddp *d) {
    for (int k = 0; k < d->nitems; k++) {
        const item *it = &d->items[k];
        for (int j = it->first; j < it->first + it->count; j++) {
            const int i = d->order[j];
            const fl_tensor *p = d->params[i];
            if (!needs_fresh(it, p)) continue;
            if (fl_fault("ddp_grad", fl_dist_rank()))
                return FL_ERR(FL_ENOMEM, "ddp: out of memory making the gradient of '%s' (a failure injected by "
                              "FP8LAB_FAULT_DIST, a test hook)", d->names[i]);
            fl_tensor *q = NULL, *si = NULL;
            int64_t one = 1;
            fl_status st = fl_tensor_empty(&q, it->fp8 ? it->wire : FL_F32, p->ndim, p->shape, FL_DEV_CPU);
            if (st == FL_OK && it->fp8) st = fl_tensor_empty(&si, FL_F32, 1, &one, FL_DEV_CPU);
            if (st != FL_OK) { fl_tensor_release(q); return st; }
            if (si) { fl_tensor_release(q->scale_inv); q->scale_inv = si; q->scale_axis = -1; }
            d->fresh[i] = q;
        }
    }
    return FL_OK;
}

/* Writes the reduced item back into its parameters' gradients: nothing allocated (make_fresh made what it needs; a
 * 16-bit wire is widened 256 values at a time on the stack), so nothing fails after the flags' agreement. */
static void unpack(fl_ddp *d, item *it, const bool *skip) {
    int64_t off = 0;
    for (int k = it->first; k < it->first + it->count; k++) {
        int i = d->order[k];
        fl_tensor *p = d->params[i];
        int64_t ne = fl_tensor_numel(p);
        if (skip && skip[i]) { off += ne; continue; }    /* unused on every rank: .grad stays as it was */
        if (d->fresh[i]) { fl_tensor_release(p->grad); p->grad = d->fresh[i]; d->fresh[i] = NULL; }
        fl_tensor *g = p->grad;
        if (it->fp8) {
            memcpy(fl_tensor_data(g), it->buf, (size_t)ne);
            *(float *)fl_tensor_data(g->scale_inv) = 1.0f / it->scale;   /* the 1/N went in before the cast */
            d->stats.fp8_saturated += count_saturated(it->buf, ne, it->wire);
        } else if (it->wire == FL_F32) {
            memcpy(fl_tensor_data(g), (const float *)it->buf + off, (size_t)ne * sizeof(float));
        } else {
            const uint16_t *src = (const uint16_t *)it->buf + off;
            float *dst = fl_tensor_data(g);
            for (int64_t j = 0; j < ne; j += 256) {
                const size_t m = ne - j < 256 ? (size_t)(ne - j) : 256;
                if (it->wire == FL_F16) fl_f16_to_f32_n(src + j, dst + j, m);
                else fl_bf16_to_f32_n(src + j, dst + j, m);
            }
        }
        off += ne;
    }
}

fl_status fl_ddp_end(fl_ddp *d) { return fl_ddp_finish(d, false); }

/* Every process runs the same collectives whatever happened on it: the buckets not started yet (a parameter the
 * backward never reached packs its gradient or zeros), and one MAX all-reduce of flags — the used map under
 * find_unused (PyTorch's local_used_map), and "this process failed" — so that a failure on one process (its
 * backward raised, a parameter got no gradient, a bucket's packing failed) is an error on every process instead of
 * a wait in a collective on the others, and leaves no reduction in flight. The flags go after the buckets, under
 * find_unused too: the used map decides only what is written back (an unused parameter packs zeros), and a packing
 * that failed in the buckets started here must reach the flag (until stop 103 the flags went first under
 * find_unused, and such a failure was this process's error only: the others took the step as averaged). Nothing
 * here allocates before the collectives (the flags are the reducer's own). */
fl_status fl_ddp_finish(fl_ddp *d, bool failed) {
    fl_ddp_cancel(d);
    if (failed) reserve_give(d);   /* the collectives below need room (DDP_RESERVE) */
    int missing = -1;
    if (!d->o.find_unused && !failed)
        for (int k = 0; k < d->n && missing < 0; k++) if (!d->ready[d->order[k]]) missing = d->order[k];
    int nf = (d->o.find_unused ? d->n : 0) + 1;
    float *flags = d->flags;
    bool *skip = d->skip;
    /* used: a gradient now, whether from this backward or from no_sync / accumulation micro-steps before it (torch
     * marks a parameter used once in a no_sync session); one left out would stay local to a rank */
    if (d->o.find_unused) for (int i = 0; i < d->n; i++) flags[i] = d->params[i]->grad ? 1.0f : 0.0f;
    flags[nf - 1] = failed || missing >= 0 ? 1.0f : 0.0f;
    for (int k = 0; k < d->nitems; k++) d->items[k].pending = 0;
    fl_status st = start_ready(d, false), s2;
    if (d->next < d->nitems) {
        /* an item's MPI_Iallreduce failed here (out of memory inside MPI; under find_unused every bucket starts
         * here, with DDP_RESERVE still held): once more with the reserve given back */
        reserve_give(d);
        s2 = start_ready(d, false);
        if (st == FL_OK) st = s2;
    }
    if (d->next < d->nitems) {
        /* Still not issued: the other processes' collectives can no longer pair with this one's (the next would meet
         * their bucket's sum: a truncation, or a step one of them takes as averaged), and they would wait in it until
         * the process group's timeout. The job ends now, saying why. */
        char msg[640];
        snprintf(msg, sizeof msg, "rank %d: DDP could not issue the all-reduce of its gradient item %d of %d (%s); "
                 "the processes' collectives can no longer pair, so the job ends", fl_dist_rank(), d->next + 1,
                 d->nitems, fl_last_error_detail());
        fl_dist_abort(msg);
    }
    /* the write-back's new .grad tensors: made here, so that a failure is on the flag */
    if (st == FL_OK && !failed && missing < 0) st = make_fresh(d);
    if (st != FL_OK) flags[nf - 1] = 1.0f;   /* a packing that failed here fails the step everywhere */
    s2 = fl_dist_allreduce(flags, nf, FL_F32, FL_RED_MAX);
    if (s2 != FL_OK) collective_failed("all-reduce of the step's failure flags", s2);
    if (st == FL_OK) st = s2;
    if (d->o.find_unused) for (int i = 0; i < d->n; i++) skip[i] = flags[i] == 0.0f;
    bool any_failed = flags[nf - 1] != 0.0f;
    double t0 = now_s();
    for (int k = 0; k < d->nitems; k++) {
        item *it = &d->items[k];
        fl_status w = it->req ? fl_dist_wait(it->req) : FL_OK;
        it->req = NULL;
        /* after the flags: a reduction that failed on one process alone would leave its gradients apart from the
         * others' (until stop 104 its step failed there and ran on the others) */
        if (w != FL_OK) collective_failed("wait for a gradient all-reduce", w);
        if (st == FL_OK) st = w;
    }
    d->stats.wait_s = now_s() - t0;
    if (st == FL_OK && missing >= 0)
        st = FL_ERR(FL_EINVAL, "DDP: parameter '%s' received no gradient in this backward (it was not used to compute "
                    "the loss, or backward's inputs= left it out); pass "
                    "DistributedDataParallelKwargs{find_unused_parameters=true}", d->names[missing]);
    else if (st == FL_OK && failed)
        st = FL_ERR(FL_EINVAL, "ddp: this process's backward failed; no gradient was averaged");
    else if (st == FL_OK && any_failed)
        st = FL_ERR(FL_EINVAL, "DDP: another process's backward failed or left a parameter without a gradient (its "
                    "error names it); no gradient of this step was averaged");
    if (st == FL_OK) {
        for (int k = 0; k < d->nitems; k++) unpack(d, &d->items[k], d->o.find_unused ? skip : NULL);
        d->stats.steps++;
    }
    drop_fresh(d);   /* those not taken: unused everywhere, or a step that failed */
    return st;
}

const fl_ddp_stats *fl_ddp_get_stats(const fl_ddp *d) { return &d->stats; }

int fl_ddp_bucket_of(const fl_ddp *d, int i) {
    if (i < 0 || i >= d->n) return -2;
    const item *it = &d->items[d->item_of[i]];
    if (it->fp8) return -1;
    int b = 0;
    for (int k = 0; k < d->item_of[i]; k++) if (!d->items[k].fp8) b++;
    return b;
}
