/* tensor.c — refcounted storage and strided tensors: construction, views, copies, element access.
 * Memory comes from the tensor's device (core/device.h); FP8 views carry their scale_inv along. */
#include "tensor.h"
#include "device.h"
#include "ops.h"
#include "autograd.h"
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdio.h>
#include <float.h>

/* ---- storage ------------------------------------------------------------------------------ */

static _Atomic size_t bytes_live[FL_DEV_COUNT], bytes_peak[FL_DEV_COUNT];

size_t fl_bytes_live(int device) { return device >= 0 && device < FL_DEV_COUNT ? bytes_live[device] : 0; }
size_t fl_bytes_peak(int device) { return device >= 0 && device < FL_DEV_COUNT ? bytes_peak[device] : 0; }
void fl_bytes_reset_peak(int device) {
    if (device >= 0 && device < FL_DEV_COUNT) bytes_peak[device] = bytes_live[device];
}
static void bytes_count(int device, size_t n, bool add) {
    if (device < 0 || device >= FL_DEV_COUNT) return;
    if (!add) { bytes_live[device] -= n; return; }
    /* (the builtin rather than `+=`: clang 14 types an atomic compound assignment as _Atomic) */
    size_t now = __atomic_add_fetch((size_t *)&bytes_live[device], n, __ATOMIC_SEQ_CST), peak = bytes_peak[device];
    while (now > peak && !__atomic_compare_exchange_n((size_t *)&bytes_peak[device], &peak, now, false,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}

void fl_tensor_bump(fl_tensor *t) { if (t && t->storage) t->storage->version++; }

static fl_status storage_new(fl_storage **out, int device, size_t nbytes) {
    const fl_device *dev = fl_device_get(device);
    if (!dev) return FL_ERR(FL_EDEVICE, "device %s is not available (%s)", fl_device_name(device), fl_device_unavailable(device));
    fl_storage *s = calloc(1, sizeof *s);
    if (!s) return FL_ERR(FL_ENOMEM, "out of memory allocating a storage header");
    /* Never ask for 0 bytes: empty tensors still get a valid, aligned pointer. */
    fl_status st = dev->alloc(nbytes ? nbytes : 64, &s->data);
    if (st != FL_OK) { free(s); return st; }
    s->refcount = 1;
    s->device = device;
    s->nbytes = nbytes;
    bytes_count(device, nbytes, true);
    *out = s;
    return FL_OK;
}

static void storage_release(fl_storage *s) {
    if (!s || --s->refcount > 0) return;
    const fl_device *dev = fl_device_get(s->device);
    if (dev && s->data) dev->free(s->data);
    bytes_count(s->device, s->nbytes, false);
    free(s);
}

/* ---- basics ------------------------------------------------------------------------------- */

char *fl_shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t n = 0;
    if (len == 0) return buf;
    n += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < len) snprintf(buf + n, len - n, "]");
    return buf;
}

/* Shapes are checked against FL_MAX_NUMEL when a tensor gets them, so this product cannot overflow;
 * it saturates all the same, so a bug elsewhere cannot turn into a negative count. */
int64_t fl_tensor_numel(const fl_tensor *t) {
    int64_t n = 1;
    /* a 0 anywhere first: the sizes before it may multiply past int64 (an expand to [2^62, 2, 0], as torch's) */
    for (int i = 0; i < t->ndim; i++) if (t->shape[i] == 0) return 0;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(n, t->shape[i], &n)) return INT64_MAX;
    return n;
}

fl_status fl_shape_numel(const char *what, int ndim, const int64_t *shape, int64_t *numel) {
    char b[200];
    int64_t n = 1;
    bool overflow = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return FL_ERR(FL_EINVAL, "%s: size must be >= 0, got %lld at dim %d", what, (long long)shape[i], i + 1);
        if (!overflow && __builtin_mul_overflow(n, shape[i], &n)) overflow = true;
        if (shape[i] == 0) { n = 0; overflow = false; break; }
    }
    if (overflow)
        return FL_ERR(FL_EINVAL, "%s: too large: shape %s has more than 2^63 elements (limit %lld)", what,
                      fl_shape_str(b, sizeof b, ndim, shape), (long long)FL_MAX_NUMEL);
    if (n > FL_MAX_NUMEL)
        return FL_ERR(FL_EINVAL, "%s: too large: %lld elements (limit %lld) in shape %s", what, (long long)n,
                      (long long)FL_MAX_NUMEL, fl_shape_str(b, sizeof b, ndim, shape));
    *numel = n;
    return FL_OK;
}

bool fl_tensor_is_contiguous(const fl_tensor *t) {
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] == 0) return true;    /* no elements: any strides (torch's answer too) */
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] == 1) continue;       /* the stride of a size-1 dim never matters */
        if (t->stride[i] != expect) return false;
        expect *= t->shape[i];
    }
    return true;
}

bool fl_tensor_is_channels_last(const fl_tensor *t) {
    static const int order[4] = { 1, 3, 2, 0 };   /* innermost first */
    if (t->ndim != 4 || t->stride[1] == 0) return false;
    int64_t min = 0;
    for (int i = 0; i < 4; i++) {
        const int d = order[i];
        if (t->shape[d] == 0 || t->stride[d] < min) return false;
        if (d == 0 && min == t->stride[1]) return false;   /* (N111's ambiguity: NCHW) */
        min = t->stride[d];
        if (t->shape[d] > 1) min *= t->shape[d];
    }
    return true;
}

fl_status fl_tensor_channels_last(fl_tensor **out, const fl_tensor *t) {
    *out = NULL;
    if (t->ndim != 4) return FL_ERR(FL_EINVAL, "channels_last: expected a 4-D tensor, got %d dims", t->ndim);
    const int64_t *sz = t->shape, *sd = t->stride;
    const int64_t C = sz[1], W = sz[3], H = sz[2];
    if (sd[1] == 1 && sd[3] == C && sd[2] == C * W && sd[0] == C * W * H) {
        *out = fl_tensor_retain((fl_tensor *)t);
        return FL_OK;
    }
    /* a new [N, H, W, C] seen as [N, C, H, W], t copied in (a fresh tensor's strides, never those fl_tensor_contiguous
     * keeps for size-1 dims) */
    fl_status st = fl_tensor_empty_cl(out, t->dtype, sz, t->device);
    if (st == FL_OK) st = fl_tensor_copy_(*out, t);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

fl_status fl_tensor_empty_cl(fl_tensor **out, fl_dtype dt, const int64_t shape[4], int device) {
    *out = NULL;
    const int64_t nhwc[4] = { shape[0], shape[2], shape[3], shape[1] };
    fl_tensor *m = NULL, *a = NULL;
    fl_status st = fl_tensor_empty(&m, dt, 4, nhwc, device);
    if (st == FL_OK) st = fl_tensor_transpose(&a, m, 1, 2);      /* [N, W, H, C] */
    if (st == FL_OK) st = fl_tensor_transpose(out, a, 1, 3);     /* [N, C, H, W] */
    fl_tensor_release(a);
    fl_tensor_release(m);
    return st;
}

fl_status fl_tensor_channels_last_(fl_tensor **t) {
    fl_tensor *c = NULL;
    fl_status st = fl_tensor_channels_last(&c, *t);
    fl_tensor_release(*t);
    *t = c;
    return st;
}

bool fl_tensor_is_dense(const fl_tensor *t) {
    if (fl_tensor_is_contiguous(t)) return true;
    /* c10's compute_non_overlapping_and_dense: the dims of size > 1 sorted by stride, innermost first, each stride
     * the product of the sizes inside it */
    int perm[FL_MAX_DIMS], n = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] != 1) perm[n++] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && t->stride[perm[j - 1]] > t->stride[perm[j]]; j--) {
            const int k = perm[j]; perm[j] = perm[j - 1]; perm[j - 1] = k;
        }
    int64_t expect = 1;
    for (int i = 0; i < n; i++) {
        if (t->stride[perm[i]] != expect) return false;
        expect *= t->shape[perm[i]];
    }
    return true;
}

void *fl_tensor_data(const fl_tensor *t) {
    if (!t->storage) return NULL;   /* a header without storage (fl_tensor_header, autograd's input stubs) */
    return (char *)t->storage->data + t->offset * (int64_t)fl_format(t->dtype)->size;
}

bool fl_shape_equal(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++) if (a[i] != b[i]) return false;
    return true;
}

/* A tensor with gradient hooks tells the binding when it gains a second reference and when it is back to one
 * (fl_set_hooks_shared, autograd.h: Lua holds such a tensor's hook functions strongly only while it is shared) */
fl_tensor *fl_tensor_retain(fl_tensor *t) {
    if (t && t->refcount++ == 1 && (t->hooks || t->post_hooks)) fl_hooks_shared_note(t, true);
    return t;
}

fl_stats_future *fl_stats_future_retain(fl_stats_future *f) { if (f) f->refcount++; return f; }

void fl_stats_future_release(fl_stats_future *f) {
    if (f && --f->refcount == 0) f->destroy(f);
}

fl_status fl_tensor_qstats(const fl_tensor *t, fl_cast_stats *out) {
    fl_tensor *m = (fl_tensor *)t;   /* resolving a pending future only caches what was always the value */
    if (m->qfuture) {
        FL_TRY(m->qfuture->wait(m->qfuture, &m->qstats));
        fl_stats_future_release(m->qfuture);
        m->qfuture = NULL;
    }
    *out = m->qstats;
    return FL_OK;
}

void fl_tensor_release(fl_tensor *t) {
    if (!t) return;
    if (--t->refcount > 0) {
        if (t->refcount == 1 && (t->hooks || t->post_hooks)) fl_hooks_shared_note(t, false);
        return;
    }
    storage_release(t->storage);
    fl_stats_future_release(t->qfuture);
    fl_tensor_release(t->scale_inv);
    fl_tensor_release(t->grad);
    /* the node outlives the tensor (the tensor holds it): its weak link to the tensor goes first; the tensor's
     * gradient hooks stay with the node and run in its backward all the same (torch's live on the grad_fn) */
    if (t->grad_fn && t->grad_fn->owner == t) {
        if (t->hooks && t->hooks->n > 0) {
            fl_grad_hooks_release(t->grad_fn->orphan_hooks);
            t->grad_fn->orphan_hooks = fl_grad_hooks_retain(t->hooks);
        }
        t->grad_fn->owner = NULL;
    }
    fl_grad_hooks_release(t->hooks);
    fl_grad_hooks_release(t->post_hooks);
    fl_node_release(t->grad_fn);
    fl_tensor_release(t->nograd_base);
    free(t);
}

/* Checks sizes and that numel * element size fits; writes numel. */
static fl_status check_shape(int ndim, const int64_t *shape, fl_dtype dt, int64_t *numel) {
    if (ndim < 0 || ndim > FL_MAX_DIMS)
        return FL_ERR(FL_EINVAL, "a tensor has at most %d dims, got %d", FL_MAX_DIMS, ndim);
    if (ndim > 0 && !shape) return FL_ERR(FL_EINVAL, "shape is missing for a %d-d tensor", ndim);
    int64_t n = 1;
    FL_TRY(fl_shape_numel("tensor", ndim, shape, &n));
    /* The contiguous strides are the products of the sizes (a 0 counted as 1): torch refuses [2^31, 2^31, 4, 0]
     * ("Storage size calculation overflowed"), whose strides would overflow int64 */
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--)
        if (__builtin_mul_overflow(stride, shape[i] ? shape[i] : 1, &stride)) {
            char b[200];
            return FL_ERR(FL_EINVAL, "tensor: too large: the sizes of shape %s multiply past 2^63 (its strides "
                          "would overflow)", fl_shape_str(b, sizeof b, ndim, shape));
        }
    int64_t bytes;
    if (__builtin_mul_overflow(n, (int64_t)fl_format(dt)->size, &bytes) || bytes > (INT64_C(1) << 48)) {
        char b[200];
        return FL_ERR(FL_EINVAL, "shape %s has too many elements", fl_shape_str(b, sizeof b, ndim, shape));
    }
    *numel = n;
    return FL_OK;
}

static void set_contiguous_strides(fl_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) { t->stride[i] = s; s *= t->shape[i] ? t->shape[i] : 1; }
}

/* A header sharing t's storage (retained) and FP8 scale (retained); the caller fixes shape/strides. */
static fl_status view_header(fl_tensor **out, const fl_tensor *t) {
    fl_tensor *v = malloc(sizeof *v);
    if (!v) return FL_ERR(FL_ENOMEM, "out of memory allocating a tensor header");
    *v = *t;
    v->refcount = 1;
    /* The copied header must not share (and later double-release) t's history. */
    v->requires_grad = false;
    v->grad = NULL;
    v->grad_fn = NULL;
    v->nograd_base = NULL;
    v->retains_grad = false;
    v->hooks = NULL;
    v->post_hooks = NULL;
    v->storage->refcount++;
    fl_tensor_retain(v->scale_inv);
    fl_stats_future_retain(v->qfuture);
    *out = v;
    return FL_OK;
}

static fl_status check_dtype(fl_dtype dt) {
    if ((int)dt < 0 || dt >= FL_DTYPE_COUNT) return FL_ERR(FL_EINVAL, "unknown dtype %d (expected one of %s)", (int)dt, fl_dtype_choices());
    return FL_OK;
}

/* ---- construction ------------------------------------------------------------------------- */

/* A contiguous header of the shape with no storage yet; *numel its element count. */
static fl_status new_header(fl_tensor **out, fl_dtype dt, int ndim, const int64_t *shape, int device, int64_t *numel) {
    *out = NULL;
    FL_TRY(check_dtype(dt));
    FL_TRY(check_shape(ndim, shape, dt, numel));
    fl_tensor *t = calloc(1, sizeof *t);
    if (!t) return FL_ERR(FL_ENOMEM, "out of memory allocating a tensor header");
    t->refcount = 1;
    t->dtype = dt;
    t->device = device;
    t->ndim = ndim;
    t->scale_axis = -1;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    set_contiguous_strides(t);
    *out = t;
    return FL_OK;
}

fl_status fl_tensor_empty(fl_tensor **out, fl_dtype dt, int ndim, const int64_t *shape, int device) {
    int64_t numel = 0;
    fl_tensor *t = NULL;
    FL_TRY(new_header(&t, dt, ndim, shape, device, &numel));
    fl_status st = storage_new(&t->storage, device, (size_t)numel * fl_format(dt)->size);
    if (st != FL_OK) { free(t); return st; }
    /* An FP8 tensor always has a scale; a fresh one decodes its bytes as they are (scale_inv 1). */
    if (fl_format(dt)->is_fp8) {
        int64_t one = 1;
        st = fl_tensor_full(&t->scale_inv, FL_F32, 1, &one, 1.0, device);
        if (st != FL_OK) { fl_tensor_release(t); return st; }
    }
    *out = t;
    return FL_OK;
}

fl_status fl_tensor_header(fl_tensor **out, fl_dtype dt, int ndim, const int64_t *shape, int device) {
    int64_t numel = 0;
    *out = NULL;
    if (dt >= 0 && dt < FL_DTYPE_COUNT && fl_format(dt)->is_fp8)
        return FL_ERR(FL_EINVAL, "a header without storage cannot be an FP8 tensor (it has no scale)");
    return new_header(out, dt, ndim, shape, device, &numel);
}

fl_status fl_tensor_full(fl_tensor **out, fl_dtype dt, int ndim, const int64_t *shape, double value, int device) {
    FL_TRY(fl_tensor_empty(out, dt, ndim, shape, device));
    if (fl_tensor_numel(*out) == 0) return FL_OK;
    const fl_device *dev = fl_device_get(device);
    fl_status st = dev->fill ? dev->fill(*out, value)
                             : FL_ERR(FL_EUNSUPPORTED, "fill is not supported on %s", dev->name);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

fl_status fl_tensor_zeros(fl_tensor **out, fl_dtype dt, int ndim, const int64_t *shape, int device) {
    return fl_tensor_full(out, dt, ndim, shape, 0.0, device);
}

fl_status fl_tensor_from_f32(fl_tensor **out, const float *src, int ndim, const int64_t *shape, fl_dtype dt) {
    *out = NULL;
    FL_TRY(check_dtype(dt));
    if (fl_format(dt)->is_fp8)
        return FL_ERR(FL_EINVAL, "cannot build a %s tensor from floats without a scale: quantize an fp32 tensor instead", fl_format(dt)->name);
    FL_TRY(fl_tensor_empty(out, dt, ndim, shape, FL_DEV_CPU));
    size_t n = (size_t)fl_tensor_numel(*out);
    void *d = fl_tensor_data(*out);
    if (n && !src) { fl_tensor_release(*out); *out = NULL; return FL_ERR(FL_EINVAL, "from_f32: source data is NULL"); }
    switch (dt) {
    case FL_F32: if (n) memcpy(d, src, n * sizeof(float)); break;
    case FL_BF16: fl_f32_to_bf16_n(src, d, n); break;
    case FL_F16: fl_f32_to_f16_n(src, d, n); break;
    default: break;
    }
    return FL_OK;
}

/* ---- views -------------------------------------------------------------------------------- */

static fl_status norm_dim(int *dim, int ndim, const char *what) {
    int n = ndim > 0 ? ndim : 1;
    if (*dim < -n || *dim >= n)
        return FL_ERR(FL_EINVAL, "%s: dim %d out of range for a %d-d tensor (expected %d..%d)", what, *dim, ndim, -n, n - 1);
    if (*dim < 0) *dim += n;
    return FL_OK;
}

/* Resolve a single -1 and check the element count. */
static fl_status infer_shape(const fl_tensor *t, int ndim, const int64_t *shape, int64_t *res) {
    if (ndim < 0 || ndim > FL_MAX_DIMS)
        return FL_ERR(FL_EINVAL, "a tensor has at most %d dims, got %d", FL_MAX_DIMS, ndim);
    int64_t numel = fl_tensor_numel(t), known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        res[i] = shape[i];
        if (shape[i] == -1) {
            if (infer >= 0) return FL_ERR(FL_EINVAL, "only one dimension can be inferred (-1), got -1 at dims %d and %d", infer, i);
            infer = i;
        } else if (shape[i] < 0) {
            return FL_ERR(FL_EINVAL, "size must be >= 0, got %lld at dim %d", (long long)shape[i], i + 1);
        } else if (__builtin_mul_overflow(known, shape[i], &known)) {
            return FL_ERR(FL_EINVAL, "shape has too many elements");
        }
    }
    char b[200];
    if (infer >= 0) {
        if (known == 0 || numel % known != 0) {
            fl_shape_str(b, sizeof b, ndim, shape);
            return FL_ERR(FL_EINVAL, "shape %s is invalid for a tensor of %lld elements", b, (long long)numel);
        }
        res[infer] = numel / known;
    } else if (known != numel) {
        fl_shape_str(b, sizeof b, ndim, shape);
        return FL_ERR(FL_EINVAL, "shape %s is invalid for a tensor of %lld elements", b, (long long)numel);
    }
    return FL_OK;
}

/* Strides for viewing t as `shape` without copying (PyTorch's computeStride): each run of old dims
 * that is contiguous in memory can be split into new dims. Returns false when impossible. */
static bool view_strides(const fl_tensor *t, int ndim, const int64_t *shape, int64_t *stride) {
    int64_t numel = fl_tensor_numel(t);
    if (numel == 0 || t->ndim == 0) {
        int64_t s = 1;
        for (int i = ndim - 1; i >= 0; i--) { stride[i] = s; s *= shape[i] ? shape[i] : 1; }
        return true;
    }
    int view_d = ndim - 1;
    int64_t chunk_base_stride = t->stride[t->ndim - 1], tensor_numel = 1, view_numel = 1;
    for (int td = t->ndim - 1; td >= 0; td--) {
        tensor_numel *= t->shape[td];
        if (td == 0 || (t->shape[td - 1] != 1 && t->stride[td - 1] != tensor_numel * chunk_base_stride)) {
            while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
                stride[view_d] = view_numel * chunk_base_stride;
                view_numel *= shape[view_d];
                view_d--;
            }
            if (view_numel != tensor_numel) return false;
            if (td > 0) { chunk_base_stride = t->stride[td - 1]; tensor_numel = 1; view_numel = 1; }
        }
    }
    return view_d == -1;
}

/* Where a per-axis FP8 scale axis lands in a new shape: the new dim with the same size and the same
 * number of elements before it. -1 if the axis does not survive intact. */
static int map_scale_axis(const fl_tensor *t, int ndim, const int64_t *shape) {
    int64_t before = 1;
    for (int i = 0; i < t->scale_axis; i++) before *= t->shape[i];
    int64_t acc = 1;
    for (int j = 0; j < ndim; j++) {
        if (acc == before && shape[j] == t->shape[t->scale_axis]) return j;
        acc *= shape[j];
    }
    return -1;
}

static fl_status per_axis_reshape_check(const fl_tensor *t, int ndim, const int64_t *shape, int *axis, const char *what) {
    *axis = -1;
    /* a scale axis of size 1 holds one scale for every element: the view is scaled per tensor (as a select) */
    if (t->scale_axis < 0 || t->shape[t->scale_axis] == 1) return FL_OK;
    *axis = map_scale_axis(t, ndim, shape);
    if (*axis < 0) {
        char a[200], b[200];
        return FL_ERR(FL_EINVAL, "%s: %s tensor %s is scaled per index along dim %d, which shape %s would split or merge; dequantize first",
                      what, fl_format(t->dtype)->name, fl_shape_str(a, sizeof a, t->ndim, t->shape), t->scale_axis + 1,
                      fl_shape_str(b, sizeof b, ndim, shape));
    }
    return FL_OK;
}

fl_status fl_tensor_flat(fl_tensor **out, const fl_tensor *t) {
    *out = NULL;
    if (!fl_tensor_is_dense(t)) return FL_ERR(FL_EINVAL, "flat: the tensor's elements are not dense in memory");
    fl_tensor *v;
    FL_TRY(view_header(&v, t));
    v->ndim = 1;
    v->shape[0] = fl_tensor_numel(t);
    v->stride[0] = 1;
    *out = v;
    return FL_OK;
}

fl_status fl_tensor_empty_like(fl_tensor **out, const fl_tensor *t, fl_dtype dt) {
    FL_TRY(fl_tensor_empty(out, dt, t->ndim, t->shape, t->device));
    /* the same element count fills [0, numel) under t's strides too, where t is dense */
    if (!fl_format(dt)->is_fp8 && !fl_tensor_is_contiguous(t) && fl_tensor_is_dense(t))
        memcpy((*out)->stride, t->stride, sizeof t->stride);
    return FL_OK;
}

fl_status fl_tensor_copy_like(fl_tensor **out, const fl_tensor *t, fl_dtype dt) {
    *out = NULL;
    if (fl_format(t->dtype)->is_fp8 || fl_format(dt)->is_fp8)
        return FL_ERR(FL_EINVAL, "copy_like: %s to %s: FP8 is not copied in memory order (its scales)",
                      fl_format(t->dtype)->name, fl_format(dt)->name);
    /* (a t that is not dense has no flat walk: a contiguous copy, as empty_like makes for it; stop 104) */
    if (!fl_tensor_is_dense(t)) return fl_tensor_to(out, t, dt);
    fl_tensor *r = NULL, *fr = NULL, *ft = NULL;
    fl_status st = fl_tensor_empty_like(&r, t, dt);
    if (st == FL_OK) st = fl_tensor_flat(&fr, r);
    if (st == FL_OK) st = fl_tensor_flat(&ft, t);
    if (st == FL_OK) st = fl_tensor_copy_(fr, ft);
    fl_tensor_release(fr);
    fl_tensor_release(ft);
    if (st != FL_OK) { fl_tensor_release(r); r = NULL; }
    *out = r;
    return st;
}

fl_status fl_tensor_view(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape) {
    int64_t res[FL_MAX_DIMS], stride[FL_MAX_DIMS];
    *out = NULL;
    FL_TRY(infer_shape(t, ndim, shape, res));
    int axis;
    FL_TRY(per_axis_reshape_check(t, ndim, res, &axis, "view"));
    if (!view_strides(t, ndim, res, stride)) {
        char a[200], b[200], c[200];
        return FL_ERR(FL_EINVAL, "view %s is not compatible with the layout of tensor %s (strides %s); use reshape, which copies",
                      fl_shape_str(b, sizeof b, ndim, res), fl_shape_str(a, sizeof a, t->ndim, t->shape),
                      fl_shape_str(c, sizeof c, t->ndim, t->stride));
    }
    FL_TRY(view_header(out, t));
    (*out)->ndim = ndim;
    for (int i = 0; i < ndim; i++) { (*out)->shape[i] = res[i]; (*out)->stride[i] = stride[i]; }
    (*out)->scale_axis = axis;
    return FL_OK;
}

fl_status fl_tensor_reshape(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape) {
    int64_t res[FL_MAX_DIMS], stride[FL_MAX_DIMS];
    *out = NULL;
    FL_TRY(infer_shape(t, ndim, shape, res));
    int axis;
    FL_TRY(per_axis_reshape_check(t, ndim, res, &axis, "reshape"));
    if (view_strides(t, ndim, res, stride)) return fl_tensor_view(out, t, ndim, res);
    fl_tensor *c;
    FL_TRY(fl_tensor_contiguous(&c, t));
    fl_status st = fl_tensor_view(out, c, ndim, res);
    fl_tensor_release(c);
    return st;
}

fl_status fl_tensor_transpose(fl_tensor **out, const fl_tensor *t, int d0, int d1) {
    *out = NULL;
    FL_TRY(norm_dim(&d0, t->ndim, "transpose"));
    FL_TRY(norm_dim(&d1, t->ndim, "transpose"));
    FL_TRY(view_header(out, t));
    fl_tensor *v = *out;
    if (t->ndim == 0) return FL_OK;
    int64_t s = v->shape[d0]; v->shape[d0] = v->shape[d1]; v->shape[d1] = s;
    s = v->stride[d0]; v->stride[d0] = v->stride[d1]; v->stride[d1] = s;
    if (v->scale_axis == d0) v->scale_axis = d1;
    else if (v->scale_axis == d1) v->scale_axis = d0;
    return FL_OK;
}

/* A [len] view of the per-axis scale vector starting at `start` (stays contiguous). */
static fl_status narrow_scale(fl_tensor **out, fl_tensor *scale_inv, int64_t start, int64_t len) {
    FL_TRY(view_header(out, scale_inv));
    (*out)->offset += start * scale_inv->stride[0];
    (*out)->shape[0] = len;
    return FL_OK;
}

fl_status fl_tensor_select(fl_tensor **out, const fl_tensor *t, int dim, int64_t index) {
    *out = NULL;
    if (t->ndim == 0) return FL_ERR(FL_EINVAL, "select: cannot index a 0-d tensor");
    FL_TRY(norm_dim(&dim, t->ndim, "select"));
    if (index < 0 || index >= t->shape[dim])
        return FL_ERR(FL_EINVAL, "index %lld out of range for dim %d of size %lld", (long long)index, dim, (long long)t->shape[dim]);
    FL_TRY(view_header(out, t));
    fl_tensor *v = *out;
    v->offset += index * t->stride[dim];
    if (t->shape[dim] > 1) v->qpart = true;
    for (int i = dim; i < t->ndim - 1; i++) { v->shape[i] = t->shape[i + 1]; v->stride[i] = t->stride[i + 1]; }
    v->ndim--;
    if (t->scale_axis == dim) {
        /* One row of a per-row tensor is a per-tensor tensor with that row's scale. */
        fl_tensor_release(v->scale_inv);
        v->scale_inv = NULL;
        v->scale_axis = -1;
        fl_status st = narrow_scale(&v->scale_inv, t->scale_inv, index, 1);
        if (st != FL_OK) { fl_tensor_release(v); *out = NULL; return st; }
    } else if (t->scale_axis > dim) {
        v->scale_axis--;
    }
    return FL_OK;
}

fl_status fl_tensor_alias(fl_tensor **out, const fl_tensor *t) {
    *out = NULL;
    return view_header(out, t);
}

fl_status fl_tensor_narrow(fl_tensor **out, const fl_tensor *t, int dim, int64_t start, int64_t length) {
    *out = NULL;
    if (t->ndim == 0) return FL_ERR(FL_EINVAL, "narrow: cannot narrow a 0-d tensor");
    FL_TRY(norm_dim(&dim, t->ndim, "narrow"));
    if (start < 0 || length < 0 || start > t->shape[dim] || length > t->shape[dim] - start)
        /* counted from 1 in the message, as the Lua API counts (docs/lua-api.md) */
        return FL_ERR(FL_EINVAL, "narrow: range start %lld, length %lld out of range for dim %d of size %lld",
                      (long long)start + 1, (long long)length, dim + 1, (long long)t->shape[dim]);
    FL_TRY(view_header(out, t));
    fl_tensor *v = *out;
    v->offset += start * t->stride[dim];
    if (length < t->shape[dim]) v->qpart = true;
    v->shape[dim] = length;
    if (t->scale_axis == dim) {
        fl_tensor_release(v->scale_inv);
        v->scale_inv = NULL;
        fl_status st = narrow_scale(&v->scale_inv, t->scale_inv, start, length);
        if (st != FL_OK) { fl_tensor_release(v); *out = NULL; return st; }
    }
    return FL_OK;
}

fl_status fl_tensor_expand(fl_tensor **out, const fl_tensor *t, int ndim, const int64_t *shape) {
    char a[200], b[200];
    *out = NULL;
    if (ndim > FL_MAX_DIMS || ndim < t->ndim)
        return FL_ERR(FL_EINVAL, "expand: cannot expand shape %s to %s", fl_shape_str(a, sizeof a, t->ndim, t->shape),
                      fl_shape_str(b, sizeof b, ndim < 0 ? 0 : ndim > FL_MAX_DIMS ? FL_MAX_DIMS : ndim, shape));
    int lead = ndim - t->ndim;
    int64_t st[FL_MAX_DIMS], sh[FL_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        int j = i - lead;
        int64_t want = shape[i];
        if (j < 0) {
            if (want < 0) goto bad;
            sh[i] = want; st[i] = 0;
        } else if (want == -1 || want == t->shape[j]) {
            sh[i] = t->shape[j]; st[i] = t->stride[j];
        } else if (t->shape[j] == 1 && want >= 0) {
            sh[i] = want; st[i] = 0;
        } else goto bad;
    }
    int64_t n_expanded;
    FL_TRY(fl_shape_numel("expand", ndim, sh, &n_expanded));
    const bool one_scale = t->scale_axis >= 0 && t->shape[t->scale_axis] == 1;   /* per tensor, as a select */
    if (t->scale_axis >= 0 && !one_scale && sh[t->scale_axis + lead] != t->shape[t->scale_axis])
        return FL_ERR(FL_EINVAL, "expand: %s tensor %s is scaled per index along dim %d, which cannot be expanded; dequantize first",
                      fl_format(t->dtype)->name, fl_shape_str(a, sizeof a, t->ndim, t->shape), t->scale_axis + 1);
    FL_TRY(view_header(out, t));
    (*out)->ndim = ndim;
    for (int i = 0; i < ndim; i++) { (*out)->shape[i] = sh[i]; (*out)->stride[i] = st[i]; }
    if (t->scale_axis >= 0) (*out)->scale_axis = one_scale ? -1 : t->scale_axis + lead;
    /* repeated elements: the cast's counters (one underflow) no longer count this view's (four) */
    if (t->scale_inv && n_expanded > fl_tensor_numel(t)) (*out)->qpart = true;
    return FL_OK;
bad:
    return FL_ERR(FL_EINVAL, "expand: cannot expand shape %s to %s (only size-1 dims can grow)",
                  fl_shape_str(a, sizeof a, t->ndim, t->shape), fl_shape_str(b, sizeof b, ndim, shape));
}

/* ---- copies ------------------------------------------------------------------------------- */

static fl_status device_of(const fl_tensor *t, const fl_device **dev) {
    *dev = fl_device_get(t->device);
    if (!*dev) return FL_ERR(FL_EDEVICE, "device %s is not available", fl_device_name(t->device));
    return FL_OK;
}

void fl_tensor_adopt_scale(fl_tensor *dst, fl_tensor *scale_inv, const fl_tensor *src) {
    fl_tensor_release(dst->scale_inv);
    fl_stats_future_release(dst->qfuture);
    dst->scale_inv = scale_inv;
    dst->scale_axis = src->scale_axis;
    dst->qstats = src->qstats;
    dst->qpart = src->qpart;
    dst->qunknown = src->qunknown;
    dst->qfuture = fl_stats_future_retain(src->qfuture);
}

/* A packed copy of t in its own dtype; an FP8 one with a copy of t's scale inverse (its own: a scale shared with t
 * made a clone follow t's later in-place scaling, clip_grad_norm_ of an E4M3 gradient clipped its clone too), and
 * t's axis and counters. */
static fl_status packed_copy(fl_tensor **out, const fl_tensor *t) {
    *out = NULL;
    const fl_device *dev;
    FL_TRY(device_of(t, &dev));
    fl_tensor *c;
    FL_TRY(fl_tensor_empty(&c, t->dtype, t->ndim, t->shape, t->device));
    /* Same dtype, so FP8 bytes are copied as they are. */
    fl_status st = dev->copy(c, t);
    if (st != FL_OK) { fl_tensor_release(c); return st; }
    if (t->scale_inv) {
        fl_tensor *si = NULL;
        st = packed_copy(&si, t->scale_inv);
        if (st != FL_OK) { fl_tensor_release(c); return st; }
        fl_tensor_adopt_scale(c, si, t);
    }
    *out = c;
    return FL_OK;
}

fl_status fl_tensor_contiguous(fl_tensor **out, const fl_tensor *t) {
    *out = NULL;
    if (fl_tensor_is_contiguous(t)) { *out = fl_tensor_retain((fl_tensor *)t); return FL_OK; }
    return packed_copy(out, t);
}

static fl_status check_hp(fl_dtype dt, const char *what) {
    if (fl_format(dt)->is_fp8)
        return FL_ERR(FL_EINVAL, "%s: %s target needs a scale; use quantize", what, fl_format(dt)->name);
    return FL_OK;
}

fl_status fl_tensor_to(fl_tensor **out, const fl_tensor *t, fl_dtype dt) {
    *out = NULL;
    FL_TRY(check_dtype(dt));
    if (fl_format(t->dtype)->is_fp8 && dt == t->dtype) return packed_copy(out, t);   /* clone: bytes and scales */
    FL_TRY(check_hp(dt, "to"));
    if (fl_format(t->dtype)->is_fp8) return fl_dequantize(out, t, dt);
    const fl_device *dev;
    FL_TRY(device_of(t, &dev));
    fl_tensor *c;
    FL_TRY(fl_tensor_empty(&c, dt, t->ndim, t->shape, t->device));
    fl_status st = fl_tensor_numel(t) ? dev->copy(c, t) : FL_OK;
    if (st != FL_OK) { fl_tensor_release(c); return st; }
    *out = c;
    return FL_OK;
}

fl_status fl_tensor_copy_(fl_tensor *dst, const fl_tensor *src) {
    char a[200], b[200];
    if (!fl_shape_equal(dst->ndim, dst->shape, src->ndim, src->shape))
        return FL_ERR(FL_EINVAL, "copy_: shapes differ: destination %s, source %s",
                      fl_shape_str(a, sizeof a, dst->ndim, dst->shape), fl_shape_str(b, sizeof b, src->ndim, src->shape));
    if (fl_format(dst->dtype)->is_fp8 || fl_format(src->dtype)->is_fp8)
        return FL_ERR(FL_EINVAL, "copy_: %s into %s: FP8 tensors are made by quantize and read by dequantize",
                      fl_format(src->dtype)->name, fl_format(dst->dtype)->name);
    if (fl_tensor_numel(dst) == 0) return FL_OK;
    fl_tensor_bump(dst);
    const fl_device *ddev, *sdev;
    FL_TRY(device_of(dst, &ddev));
    FL_TRY(device_of(src, &sdev));
    if (dst->device == src->device) return ddev->copy(dst, src);
    /* Across devices: convert on the source side, move contiguous bytes through the host side,
     * then lay them out on the destination device. */
    fl_tensor *s = NULL, *d = NULL;
    fl_status st = fl_tensor_to(&s, src, dst->dtype);
    if (st == FL_OK) st = fl_tensor_empty(&d, dst->dtype, dst->ndim, dst->shape, dst->device);
    if (st == FL_OK) {
        size_t nb = (size_t)fl_tensor_numel(s) * fl_format(s->dtype)->size;
        if (src->device == FL_DEV_CPU) st = ddev->from_host(fl_tensor_data(d), fl_tensor_data(s), nb);
        else if (dst->device == FL_DEV_CPU) st = sdev->to_host(fl_tensor_data(d), fl_tensor_data(s), nb);
        else {
            void *tmp = malloc(nb ? nb : 1);
            if (!tmp) st = FL_ERR(FL_ENOMEM, "copy_: out of memory for a %zu-byte staging buffer", nb);
            else {
                st = sdev->to_host(tmp, fl_tensor_data(s), nb);
                if (st == FL_OK) st = ddev->from_host(fl_tensor_data(d), tmp, nb);
                free(tmp);
            }
        }
    }
    if (st == FL_OK) st = ddev->copy(dst, d);
    fl_tensor_release(s);
    fl_tensor_release(d);
    return st;
}

/* ---- devices ------------------------------------------------------------------------------ */

/* Contiguous bytes of t (any dtype) copied to a new tensor on `device`; FP8 keeps its scale state. */
static fl_status copy_to_device(fl_tensor **out, const fl_tensor *t, int device) {
    *out = NULL;
    const fl_device *sdev, *ddev;
    FL_TRY(device_of(t, &sdev));
    if (!(ddev = fl_device_get(device)))
        return FL_ERR(FL_EDEVICE, "device %s is not available (%s)", fl_device_name(device), fl_device_unavailable(device));
    fl_tensor *c = NULL, *r = NULL;
    FL_TRY(fl_tensor_contiguous(&c, t));
    fl_status st = fl_tensor_empty(&r, t->dtype, t->ndim, t->shape, device);
    size_t nb = (size_t)fl_tensor_numel(c) * fl_format(c->dtype)->size;
    if (st == FL_OK && nb) {
        if (t->device == FL_DEV_CPU) st = ddev->from_host(fl_tensor_data(r), fl_tensor_data(c), nb);
        else if (device == FL_DEV_CPU) st = sdev->to_host(fl_tensor_data(r), fl_tensor_data(c), nb);
        else {
            void *tmp = malloc(nb);
            st = tmp ? sdev->to_host(tmp, fl_tensor_data(c), nb) : FL_ERR(FL_ENOMEM, "to: out of memory for %zu bytes", nb);
            if (st == FL_OK) st = ddev->from_host(fl_tensor_data(r), tmp, nb);
            free(tmp);
        }
    }
    if (st == FL_OK && t->scale_inv) {
        fl_tensor *si = NULL;
        st = copy_to_device(&si, t->scale_inv, device);
        if (st == FL_OK) {
            fl_tensor_adopt_scale(r, si, t);
        }
    }
    fl_tensor_release(c);
    if (st != FL_OK) { fl_tensor_release(r); return st; }
    *out = r;
    return FL_OK;
}

fl_status fl_tensor_to_device(fl_tensor **out, const fl_tensor *t, int device) {
    *out = NULL;
    if (device < 0 || device >= FL_DEV_COUNT) return FL_ERR(FL_EINVAL, "to: unknown device %d", device);
    if (t->device == device) { *out = fl_tensor_retain((fl_tensor *)t); return FL_OK; }
    return copy_to_device(out, t, device);
}

fl_status fl_tensor_move_(fl_tensor *t, int device) {
    if (t->device == device) return FL_OK;
    fl_tensor *c = NULL, *g = NULL;
    FL_TRY(fl_tensor_to_device(&c, t, device));
    fl_status st = t->grad ? fl_tensor_to_device(&g, t->grad, device) : FL_OK;
    if (st != FL_OK) { fl_tensor_release(c); return st; }
    /* Take over c's storage and layout; c's header (with t's old storage after the swap) is released. */
    fl_storage *old = t->storage;
    t->storage = c->storage;
    c->storage = old;
    t->device = device;
    t->offset = 0;
    memcpy(t->stride, c->stride, sizeof t->stride);
    fl_tensor *si = t->scale_inv;
    t->scale_inv = c->scale_inv;
    c->scale_inv = si;
    if (t->grad) { fl_tensor_release(t->grad); t->grad = g; }
    fl_tensor_bump(t);
    fl_tensor_release(c);
    return FL_OK;
}

/* ---- element access ----------------------------------------------------------------------- */

static fl_status element_offset(const fl_tensor *t, const int64_t *index, int64_t *off) {
    int64_t o = t->offset;
    for (int i = 0; i < t->ndim; i++) {
        if (index[i] < 0 || index[i] >= t->shape[i])
            return FL_ERR(FL_EINVAL, "index %lld out of range for dim %d of size %lld", (long long)index[i], i, (long long)t->shape[i]);
        o += index[i] * t->stride[i];
    }
    *off = o;
    return FL_OK;
}

/* Reads one fp32 value of the scale vector (handles device memory). */
static fl_status scale_at(const fl_tensor *t, const int64_t *index, float *s) {
    *s = 1.0f;
    if (!t->scale_inv) return FL_OK;
    int64_t i = t->scale_axis >= 0 ? index[t->scale_axis] : 0;
    const fl_tensor *si = t->scale_inv;
    const fl_device *dev;
    FL_TRY(device_of(si, &dev));
    return dev->to_host(s, (const float *)fl_tensor_data(si) + i * (si->ndim ? si->stride[0] : 0), sizeof(float));
}

static double decode(fl_dtype dt, const void *p) {
    switch (dt) {
    case FL_F32: return *(const float *)p;
    case FL_BF16: return fl_bf16_to_f32(*(const uint16_t *)p);
    case FL_F16: return fl_f16_to_f32(*(const uint16_t *)p);
    default: return fl_fp8_to_f32(*(const uint8_t *)p, dt);
    }
}

fl_status fl_tensor_get(const fl_tensor *t, const int64_t *index, double *value) {
    int64_t off;
    const fl_device *dev;
    FL_TRY(element_offset(t, index, &off));
    FL_TRY(device_of(t, &dev));
    size_t es = fl_format(t->dtype)->size;
    unsigned char buf[8];
    FL_TRY(dev->to_host(buf, (char *)t->storage->data + off * (int64_t)es, es));
    *value = decode(t->dtype, buf);
    if (t->scale_inv) {
        float s;
        FL_TRY(scale_at(t, index, &s));
        *value = (float)*value * s;   /* in fp32, as dequantize (decode × scale_inv in double is no fp32) */
    }
    return FL_OK;
}

fl_status fl_tensor_set(fl_tensor *t, const int64_t *index, double value) {
    int64_t off;
    const fl_device *dev;
    FL_TRY(element_offset(t, index, &off));
    FL_TRY(device_of(t, &dev));
    fl_tensor_bump(t);
    size_t es = fl_format(t->dtype)->size;
    unsigned char buf[8];
    float f = (float)value;
    switch (t->dtype) {
    case FL_F32: memcpy(buf, &f, 4); break;
    case FL_BF16: { uint16_t h = fl_f32_to_bf16(f); memcpy(buf, &h, 2); break; }
    case FL_F16: { uint16_t h = fl_f32_to_f16(f); memcpy(buf, &h, 2); break; }
    default: {
        /* Encode with the tensor's own scale, saturating like a training cast: cast(x·scale) with the scale
         * scale() reports (1/scale_inv in fp32), as quantize multiplies; x / scale_inv rounds otherwise near a tie. */
        float s;
        FL_TRY(scale_at(t, index, &s));
        float sc = s != 0.0f ? 1.0f / s : 1.0f;
        if (sc > FLT_MAX) sc = FLT_MAX;   /* 1/scale_inv of the largest scale, FLT_MAX, overflows: capped */
        buf[0] = fl_f32_to_fp8(f * sc, t->dtype, FL_SATURATE);
    }
    }
    return dev->from_host((char *)t->storage->data + off * (int64_t)es, buf, es);
}

fl_status fl_tensor_read_f32(const fl_tensor *t, float *dst) {
    int64_t n = fl_tensor_numel(t);
    if (n == 0) return FL_OK;
    fl_tensor *c = NULL;
    const fl_device *dev;
    FL_TRY(device_of(t, &dev));
    FL_TRY(fl_tensor_contiguous(&c, t));
    size_t es = fl_format(t->dtype)->size, nb = (size_t)n * es;
    const void *host = fl_tensor_data(c);
    void *tmp = NULL;
    fl_status st = FL_OK;
    if (t->device != FL_DEV_CPU) {
        tmp = malloc(nb);
        if (!tmp) { fl_tensor_release(c); return FL_ERR(FL_ENOMEM, "read_f32: out of memory for %zu bytes", nb); }
        st = dev->to_host(tmp, host, nb);
        host = tmp;
    }
    if (st == FL_OK) {
        switch (t->dtype) {
        case FL_F32: memcpy(dst, host, nb); break;
        case FL_BF16: fl_bf16_to_f32_n(host, dst, (size_t)n); break;
        case FL_F16: fl_f16_to_f32_n(host, dst, (size_t)n); break;
        default: {
            /* FP8: bytes x scale_inv, one scale or one per index along scale_axis. */
            const fl_tensor *si = t->scale_inv;
            int64_t ns = si ? fl_tensor_numel(si) : 1;
            float *sc = malloc((size_t)(ns > 0 ? ns : 1) * sizeof(float));   /* (an empty axis: no scales, n = 0) */
            if (!sc) { st = FL_ERR(FL_ENOMEM, "read_f32: out of memory"); break; }
            if (si) st = fl_tensor_read_f32(si, sc); else sc[0] = 1.0f;
            if (st == FL_OK) {
                int64_t inner = 1, size = 1;
                if (t->scale_axis >= 0) {
                    size = t->shape[t->scale_axis];
                    for (int i = t->scale_axis + 1; i < t->ndim; i++) inner *= t->shape[i];
                }
                for (int64_t i = 0; i < n; i++) {
                    float s = t->scale_axis >= 0 ? sc[(i / inner) % size] : sc[0];
                    dst[i] = fl_fp8_to_f32(((const uint8_t *)host)[i], t->dtype) * s;
                }
            }
            free(sc);
        }
        }
    }
    free(tmp);
    fl_tensor_release(c);
    return st;
}
