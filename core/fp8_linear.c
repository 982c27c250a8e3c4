/* fp8_linear.c — the FP8 linear layer (see fp8_linear.h) on any device: casts through the device's
 * quantize/amax entries (the CPU's fused scale+cast+amax kernels of format.c), GEMMs through its fp8_gemm
 * entry (the CPU: oneDNN bf16 GEMMs of exactly decoded FP8 bytes; CUDA: cuBLASLt FP8). Recipe state
 * (scales, amax histories) lives on the host; a device may report a cast's statistics later (scaling.h),
 * so a delayed cast needs only its stored scale and a current one derives its scale on the device. */
#include "fp8_linear.h"
#include "autograd.h"
#include "nn.h"
#include "ops_raw.h"
#include "profiler.h"
#include "device.h"
#include "scale_rule.h"
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const fl_fp8_role_names[] = { "input", "weight", "grad" };
_Static_assert(sizeof fl_fp8_role_names / sizeof *fl_fp8_role_names == FL_NROLES, "a role without a name");

#define SHAPE(buf, t) fl_shape_str(buf, sizeof buf, (t)->ndim, (t)->shape)

/* ---- layer object -------------------------------------------------------------------------- */

fl_status fl_fp8_layer_new(fl_fp8_layer **out, fl_scaling roles[FL_NROLES], const bool hp[3], fl_fp8_granularity gran) {
    *out = NULL;
    fl_fp8_layer *l = calloc(1, sizeof *l);
    if (!l) return FL_ERR(FL_ENOMEM, "fp8 linear: out of memory for a layer's recipe state");
    l->refcount = 1;
    for (int i = 0; i < FL_NROLES; i++) { l->role[i] = roles[i]; roles[i].history = NULL; }
    for (int i = 0; i < 3; i++) l->hp[i] = hp ? hp[i] : false;
    l->gran = gran;
    l->fast_accum = true;    /* TransformerEngine's default: fprop fast, dgrad/wgrad split accumulation */
    *out = l;
    return FL_OK;
}

fl_fp8_layer *fl_fp8_layer_retain(fl_fp8_layer *l) { if (l) l->refcount++; return l; }

void fl_fp8_layer_drop_cache(fl_fp8_layer *l) {
    fl_tensor_release(l->wq);
    fl_tensor_release(l->wq_dev);
    l->wq = l->wq_dev = NULL;
    l->wq_storage = NULL;
}

void fl_fp8_layer_release(fl_fp8_layer *l) {
    if (!l || --l->refcount > 0) return;
    fl_fp8_layer_drop_cache(l);
    for (int i = 0; i < FL_NROLES; i++) fl_scaling_free(&l->role[i]);
    free(l);
}

fl_status fl_fp8_layer_update(fl_fp8_layer *l) {
    fl_status st = FL_OK;
    l->syncs++;
    for (int i = 0; i < FL_NROLES; i++) {
        fl_status r = fl_scaling_update(&l->role[i]);
        if (st == FL_OK) st = r;
    }
    return st;
}

/* ---- casts ----------------------------------------------------------------------------------- */

fl_status fl_fp8_amax_2d(const fl_tensor *src, int axis, float *out) {
    const fl_device *dev = fl_device_get(src->device);
    if (!dev || !dev->amax) return FL_ERR(FL_EUNSUPPORTED, "fp8 amax is not supported on %s", fl_device_name(src->device));
    if (fl_tensor_numel(src) == 0) {
        int64_t ns = axis < 0 ? 1 : src->shape[axis];
        for (int64_t i = 0; i < ns; i++) out[i] = 0.0f;
        return FL_OK;
    }
    return dev->amax(src, axis, out);
}

/* An FP8 [R, C] tensor for src's cast along axis, its scale_inv allocated. */
static fl_status new_q(fl_tensor **out, const fl_tensor *src, fl_dtype fmt, int axis) {
    fl_tensor *q = NULL;
    FL_TRY(fl_tensor_empty(&q, fmt, 2, src->shape, src->device));
    if (axis >= 0) {
        int64_t ns = src->shape[axis];
        fl_tensor_release(q->scale_inv);
        q->scale_inv = NULL;
        fl_status st = fl_tensor_empty(&q->scale_inv, FL_F32, 1, &ns, src->device);
        if (st != FL_OK) { fl_tensor_release(q); return st; }
        q->scale_axis = axis;
    }
    *out = q;
    return FL_OK;
}

fl_status fl_fp8_cast_2d(fl_tensor **out, const fl_tensor *src, fl_dtype fmt, int axis, const float *scales) {
    *out = NULL;
    const fl_device *dev = fl_device_get(src->device);
    if (!dev || !dev->quantize) return FL_ERR(FL_EUNSUPPORTED, "fp8 cast is not supported on %s", fl_device_name(src->device));
    fl_tensor *q = NULL;
    FL_TRY(new_q(&q, src, fmt, axis));
    /* Empty tensors too: the entry still writes scale_inv = 1/scales. */
    fl_status st = dev->quantize(q, src, scales, axis, FL_SATURATE);
    if (st != FL_OK) { fl_tensor_release(q); return st; }
    *out = q;
    return FL_OK;
}

fl_status fl_fp8_cast_current_2d(fl_tensor **out, const fl_tensor *src, fl_dtype fmt, int axis, int margin, bool pow2) {
    *out = NULL;
    const fl_device *dev = fl_device_get(src->device);
    if (!dev || !dev->quantize_current)
        return FL_ERR(FL_EUNSUPPORTED, "fp8 cast with current scaling is not supported on %s", fl_device_name(src->device));
    fl_tensor *q = NULL;
    FL_TRY(new_q(&q, src, fmt, axis));
    fl_status st = dev->quantize_current(q, src, axis, margin, pow2, FL_SATURATE);
    if (st != FL_OK) { fl_tensor_release(q); return st; }
    *out = q;
    return FL_OK;
}

/* fp32 contiguous 2-D copy of t (t itself, retained, when it already is one). */
static fl_status as_f32(fl_tensor **out, const fl_tensor *t) {
    if (t->dtype == FL_F32 && fl_tensor_is_contiguous(t)) { *out = fl_tensor_retain((fl_tensor *)t); return FL_OK; }
    return fl_tensor_to(out, t, FL_F32);
}

/* Whether role s casts along `axis` with current scaling (or `force_current`): a delayed role's
 * per-tensor cast uses its stored scale (but in its warm-up: fl_scaling_in_time); every other cast derives its
 * scales from the tensor itself. */
static bool is_current(const fl_scaling *s, bool force_current, int axis) {
    return force_current || fl_scaling_in_time(s) || axis >= 0;
}

/* Cast src32 [rows, cols] to role s's format along `axis` (fl_fp8_cast_current_2d or the stored scale),
 * without touching the role: the caller observes the cast (observe()) when it counts. */
static fl_status cast_role(fl_tensor **q, const fl_tensor *src32, const fl_scaling *s, bool force_current, int axis) {
    if (is_current(s, force_current, axis)) return fl_fp8_cast_current_2d(q, src32, s->fmt, axis, s->margin, s->pow2);
    return fl_fp8_cast_2d(q, src32, s->fmt, -1, &s->scale);
}

/* Role s observes the cast that made q (possibly still pending on the device: scaling.h). A per-tensor
 * current-scaling cast also sets the role's scale, which fp8.stats reports. */
static fl_status observe(fl_scaling *s, const fl_tensor *q, bool record) {
    bool take_scale = q->scale_axis < 0 && fl_scaling_in_time(s);
    return fl_scaling_observe_cast(s, q, fl_tensor_numel(q), record, take_scale);
}

/* cast_role + observe on the role itself. */
static fl_status cast_observed(fl_tensor **q, const fl_tensor *src32, fl_scaling *s, int axis, bool record) {
    FL_TRY(cast_role(q, src32, s, false, axis));
    fl_status st = observe(s, *q, record);
    if (st != FL_OK) { fl_tensor_release(*q); *q = NULL; }
    return st;
}

/* The per-tensor scale role s casts with, as the device's fused casts take it: its stored scale, or NULL for
 * current scaling (with s->margin and s->pow2). */
static const float *fused_scale(const fl_scaling *s) { return is_current(s, false, -1) ? NULL : &s->scale; }

/* cast_observed per tensor of GELU(src32), in GELU's pass (the device's quantize_gelu). */
static fl_status cast_observed_gelu(fl_tensor **q, const fl_tensor *src32, fl_scaling *s, bool record) {
    fl_tensor *a = NULL;
    fl_status st = new_q(&a, src32, s->fmt, -1);
    if (st == FL_OK)
        st = fl_device_get(src32->device)->quantize_gelu(a, src32, fused_scale(s), s->margin, s->pow2, 1, FL_SATURATE);
    if (st == FL_OK) st = observe(s, a, record);
    if (st != FL_OK) { fl_tensor_release(a); return st; }
    *q = a;
    return FL_OK;
}

/* cast_observed per tensor, plus the transposed copy *qt ([C, R], sharing q's scale and statistics) when
 * `want_t` and the device makes one in the same pass (quantize_transpose); else *qt stays NULL and the
 * device's GEMM transposes when it needs to. */
static fl_status cast_observed_t(fl_tensor **q, fl_tensor **qt, const fl_tensor *src32, fl_scaling *s, bool record,
                                 bool want_t) {
    *qt = NULL;
    const fl_device *dev = fl_device_get(src32->device);
    if (!want_t || !dev || !dev->quantize_transpose) return cast_observed(q, src32, s, -1, record);
    fl_tensor *a = NULL, *b = NULL;
    const int64_t ts[2] = { src32->shape[1], src32->shape[0] };
    fl_status st = new_q(&a, src32, s->fmt, -1);
    if (st == FL_OK) st = fl_tensor_empty(&b, s->fmt, 2, ts, src32->device);
    if (st == FL_OK) {
        fl_tensor_release(b->scale_inv);
        b->scale_inv = fl_tensor_retain(a->scale_inv);
        st = dev->quantize_transpose(a, b, src32, is_current(s, false, -1) ? NULL : &s->scale, s->margin, s->pow2,
                                     FL_SATURATE);
    }
    if (st == FL_OK) st = observe(s, a, record);
    if (st != FL_OK) { fl_tensor_release(a); fl_tensor_release(b); return st; }
    *q = a;
    *qt = b;
    return FL_OK;
}

/* dY's per-tensor cast (cast_observed_t), and with `db` the bias gradient Σ_rows dY: read in the cast's pass
 * where the device sums while it casts (quantize_dbias: no transposed copy wanted from a device that makes one);
 * else *db stays NULL and the caller reduces dY itself. */
static fl_status cast_dy(fl_tensor **q, fl_tensor **qt, fl_tensor **db, const fl_tensor *g32, fl_scaling *s, bool record,
                         bool want_t) {
    const fl_device *dev = fl_device_get(g32->device);
    if (!db || !dev || !dev->quantize_dbias || (want_t && dev->quantize_transpose))
        return cast_observed_t(q, qt, g32, s, record, want_t);
    *qt = NULL;
    fl_tensor *a = NULL, *b = NULL;
    const int64_t n = g32->shape[1];
    fl_status st = new_q(&a, g32, s->fmt, -1);
    if (st == FL_OK) st = fl_tensor_empty(&b, FL_F32, 1, &n, g32->device);
    if (st == FL_OK) st = dev->quantize_dbias(a, g32, fused_scale(s), s->margin, s->pow2, FL_SATURATE, b);
    if (st == FL_OK) st = observe(s, a, record);
    if (st != FL_OK) { fl_tensor_release(a); fl_tensor_release(b); return st; }
    *q = a;
    *db = b;
    return FL_OK;
}

/* ROWWISE: g32 [R, C] cast per row for role s (a GEMM's a), observed; and where the device reads it once for more
 * (quantize_rows_aux), in the same read the column amaxes its per-column cast needs (cmax, when not NULL;
 * *have_cmax then true) and the bias gradient (*db, when db is not NULL). Else *have_cmax stays false and *db
 * NULL, and the caller makes those passes. */
static fl_status cast_rows(fl_tensor **q, float *cmax, bool *have_cmax, fl_tensor **db, const fl_tensor *g32,
                           fl_scaling *s, bool record) {
    *have_cmax = false;
    const fl_device *dev = fl_device_get(g32->device);
    if ((!cmax && !db) || !dev || !dev->quantize_rows_aux) return cast_observed(q, g32, s, 0, record);
    fl_tensor *a = NULL, *b = NULL;
    const int64_t n = g32->shape[1];
    fl_status st = new_q(&a, g32, s->fmt, 0);
    if (st == FL_OK && db) st = fl_tensor_empty(&b, FL_F32, 1, &n, g32->device);
    if (st == FL_OK) st = dev->quantize_rows_aux(a, g32, s->margin, s->pow2, FL_SATURATE, cmax, b);
    if (st == FL_OK) st = observe(s, a, record);
    if (st != FL_OK) { fl_tensor_release(a); fl_tensor_release(b); return st; }
    *q = a;
    if (db) *db = b;
    *have_cmax = cmax != NULL;
    return FL_OK;
}

/* ROWWISE: src32 [R, C] cast per column for role s with current power-of-two scales, not observed (cast_role's
 * bits), from the column amaxes cast_rows gave (cmax, turned into the scales in place) or with a read of its own
 * (have_cmax false). */
static fl_status cast_cols(fl_tensor **q, const fl_tensor *src32, const fl_scaling *s, float *cmax, bool have_cmax) {
    if (!have_cmax) return cast_role(q, src32, s, true, 1);
    const float fmax = (float)fl_format(s->fmt)->max;
    for (int64_t c = 0; c < src32->shape[1]; c++) cmax[c] = fl_amax_to_scale_current(cmax[c], fmax, s->margin, s->pow2);
    return fl_fp8_cast_2d(q, src32, s->fmt, 1, cmax);
}

/* ROWWISE: src32 [R, C] cast per row (observed: *rq) and per column (*cq, cast_cols), the column amaxes from the row
 * cast's read where the device gives them: the forward's input, whose per-column cast wgrad reads (torchao casts it
 * in the backward, from the high-precision input it keeps: the same bits). With gelu, of GELU(src32), made once into
 * an fp32 scratch in the row cast's pass (the device's quantize_rows_gelu, with the column amaxes), which the column
 * cast then reads: the bits of fl_gelu followed by the two casts, with one read of GELU's output fewer. */
static fl_status cast_rows_cols(fl_tensor **rq, fl_tensor **cq, const fl_tensor *src32, fl_scaling *s, bool record,
                                bool gelu) {
    const int64_t C = src32->shape[1];
    float *cmax = malloc((size_t)(C > 0 ? C : 1) * sizeof(float));
    if (!cmax) return FL_ERR(FL_ENOMEM, "fp8 linear: out of memory for %lld column amaxes", (long long)C);
    bool have = false;
    fl_tensor *y = NULL;   /* with gelu: GELU(src32), what both casts are of */
    fl_status st = FL_OK;
    if (gelu) {
        st = new_q(rq, src32, s->fmt, 0);
        if (st == FL_OK) st = fl_tensor_empty(&y, FL_F32, 2, src32->shape, src32->device);
        if (st == FL_OK)
            st = fl_device_get(src32->device)->quantize_rows_gelu(*rq, y, src32, s->margin, s->pow2, FL_SATURATE, cmax);
        if (st == FL_OK) st = observe(s, *rq, record);
        have = true;
    } else {
        st = cast_rows(rq, cmax, &have, NULL, src32, s, record);
    }
    if (st == FL_OK) st = cast_cols(cq, gelu ? y : src32, s, cmax, have);
    if (st != FL_OK) { fl_tensor_release(*rq); *rq = NULL; }
    fl_tensor_release(y);
    free(cmax);
    return st;
}

/* ---- GEMMs ----------------------------------------------------------------------------------- */

/* *y ← addend + *y (a residual added after the layer, as `x + layer(x)` adds it), recorded for autograd or raw;
 * *y is released and replaced (NULL on failure). */
static fl_status add_to(fl_tensor **y, const fl_tensor *addend, bool record) {
    fl_tensor *s = NULL;
    fl_status st = record ? fl_binary(&s, FL_OP_ADD, addend, *y) : fl_binary_raw(&s, FL_OP_ADD, addend, *y);
    fl_tensor_release(*y);
    *y = st == FL_OK ? s : NULL;
    return st;
}

/* Whether the layer itself adds `res` to its output (linear_impl): fp32, the output's shape, on x's device. Any
 * other residual is added after the layer by fl_binary (its broadcasting and type promotion). */
static bool fits_residual(const fl_tensor *res, const fl_tensor *x, const fl_tensor *w) {
    if (res->dtype != FL_F32 || res->device != x->device || res->ndim != x->ndim) return false;
    for (int d = 0; d < x->ndim; d++)
        if (res->shape[d] != (d == x->ndim - 1 ? w->shape[0] : x->shape[d])) return false;
    return true;
}

/* out [M, N] fp32 = (a·b) ⊙ (sa ⊗ sb) (+ bias[N]) on the operands' device: a [M, K], b [K, N] FP8 with
 * their scales (device.h fp8_gemm; transposed views are read as they are). a_cache / b_cache: slots for
 * what the device derives from a's / b's bytes (dY shared by dgrad and wgrad; the cached FP8 weight), or
 * NULL. fast_accum: fprop only (fl_fp8_layer.fast_accum). addend (or NULL): fp32, contiguous, the result's shape,
 * added in the GEMM's store where the device has fp8_gemm_add, else after it (add_to): the same bits. */
static fl_status gemm_fp8(fl_tensor **out, const fl_tensor *a, const fl_tensor *b, const fl_tensor *bias,
                          const fl_tensor *addend, fl_tensor **a_cache, fl_tensor **b_cache, bool fast_accum) {
    *out = NULL;
    FL_PROF_SCOPE("fp8_gemm"); FL_PROF_SHAPES(a, b);
    FL_PROF_FLOPS(2.0 * (double)a->shape[0] * (double)b->shape[1] * (double)a->shape[1]);
    const fl_device *dev = fl_device_get(a->device);
    if (!dev || !dev->fp8_gemm) return FL_ERR(FL_EUNSUPPORTED, "fp8 gemm is not supported on %s", fl_device_name(a->device));
    int64_t shape[2] = { a->shape[0], b->shape[1] };
    FL_TRY(fl_tensor_empty(out, FL_F32, 2, shape, a->device));
    const bool fused = addend && dev->fp8_gemm_add;
    fl_status st = !fl_tensor_numel(*out) ? FL_OK
                 : fused ? dev->fp8_gemm_add(*out, a, b, bias, addend, a_cache, b_cache, fast_accum)
                         : dev->fp8_gemm(*out, a, b, bias, a_cache, b_cache, fast_accum);
    if (st == FL_OK && addend && !fused) st = add_to(out, addend, false);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

/* out = A·B in high precision: operands rounded to cdt (fp32/bf16/fp16), fp32 result (+ bias). */
static fl_status gemm_hp(fl_tensor **out, const fl_tensor *a, const fl_tensor *b, fl_dtype cdt, const fl_tensor *bias) {
    FL_TRY(fl_matmul_raw(out, a, b, cdt, FL_F32));
    if (!bias) return FL_OK;
    fl_tensor *y = *out, *b32 = NULL;
    fl_status st = as_f32(&b32, bias);
    if (st == FL_OK) {
        const fl_device *dev = fl_device_get(y->device);
        st = dev->bias_add ? dev->bias_add(fl_tensor_data(y), fl_tensor_data(b32), y->shape[0], y->shape[1])
                           : FL_ERR(FL_EUNSUPPORTED, "bias add is not supported on %s", dev->name);
    }
    fl_tensor_release(b32);
    if (st != FL_OK) { fl_tensor_release(y); *out = NULL; }
    return st;
}

/* The weight cache slot to hand the device when `wq` is the layer's cached FP8 weight. */
static fl_tensor **wcache(fl_fp8_layer *l, const fl_tensor *wq) { return wq == l->wq ? &l->wq_dev : NULL; }

static fl_status transposed(fl_tensor **out, const fl_tensor *t) { return fl_tensor_transpose(out, t, 0, 1); }

/* ---- forward / backward ------------------------------------------------------------------------ */

/* the node's inputs: x, w, b, and with a residual added in the forward (fl_fp8_linear's residual) that one */
enum { SV_RES_IN = 3 };
enum { SV_X = 0, SV_W = 1, SV_XHP = 2, SV_WHP = 3, SV_XT = 4 /* x's FP8 bytes transposed (wgrad), when made */,
       SV_XPRE = 5 /* with a fused GELU (iargs[2]): its input, for GELU's backward */,
       SV_DB = 6 /* the bias gradient summed with an FP8 dY handed over by the consumer (handover_dgelu) */,
       SV_XC = 7 /* ROWWISE: x cast per column in the forward (wgrad's b), when made */,
       /* ROWWISE, handed over by the consumer with a fused GELU (handover_dgelu_rows): dY's per-row cast and its
        * column amaxes (fp32 [M]); SV_DB the bias gradient, and iargs[IA_GREF], [IA_GREF + 1] the data address and
        * size of the gradient they were made from (not retained: the engine takes a gradient no one else holds as it
        * is, and copies one that is shared), [IA_GREF + 2] the backward that made them (fl_autograd_backward_id) */
       SV_GROWS = 8, SV_GCMAX = 9 };
enum { IA_GREF = 3 };

/* The weight operand of a TENSOR-granularity forward: the caller's FP8 weight, the cache, or a
 * fresh cast (then cached). want_t: dgrad will run in FP8, so a device that casts with a transposed copy
 * makes it now and it becomes the cache's device slot (what dgrad's GEMM reads). */
static fl_status weight_q(fl_tensor **wq, fl_fp8_layer *l, const fl_tensor *w, const fl_tensor *w_fp8, bool record,
                          bool want_t) {
    fl_scaling *s = &l->role[FL_ROLE_WEIGHT];
    if (w_fp8) { *wq = fl_tensor_retain((fl_tensor *)w_fp8); return FL_OK; }
    bool hit = l->wq && l->wq_storage == w->storage && l->wq_version == w->storage->version &&
               l->wq_offset == w->offset && (s->rule != FL_SCALE_DELAYED || l->wq_scale == s->scale);
    if (hit) {
        l->cache_hits++;
        FL_TRY(observe(s, l->wq, record));
        *wq = fl_tensor_retain(l->wq);
        return FL_OK;
    }
    fl_tensor *w32 = NULL, *wqt = NULL;
    FL_TRY(as_f32(&w32, w));
    fl_status st = cast_observed_t(wq, &wqt, w32, s, record, want_t);
    fl_tensor_release(w32);
    if (st != FL_OK) return st;
    l->weight_casts++;
    fl_fp8_layer_drop_cache(l);
    l->wq = fl_tensor_retain(*wq);
    l->wq_dev = wqt;
    l->wq_storage = w->storage;
    l->wq_version = w->storage->version;
    l->wq_offset = w->offset;
    l->wq_scale = s->scale;
    return FL_OK;
}

static void layer_ctx_free(void *p) { fl_fp8_layer_release(p); }

static fl_status fp8_linear_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin);

/* Whether a layer's backward (node p) casts dY per tensor for FP8 GEMMs alone, so a consumer may cast dY for it
 * (handover_dgelu): TENSOR granularity, dgrad and wgrad in FP8, and dX or dW wanted. */
static bool takes_fp8_dy(const fl_node *p) {
    const fl_fp8_layer *l = p->ctx;
    return l->gran == FL_GRAN_TENSOR && !l->hp[1] && !l->hp[2] &&
           (fl_node_input_needs_grad(p, 0) || fl_node_input_needs_grad(p, 1)) &&
           !(p->ninputs > SV_RES_IN && fl_node_input_needs_grad(p, SV_RES_IN));   /* a residual takes dY as it is */
}

/* A fused GELU's backward (node n, iargs[2]) with dgrad's output t = ∂L/∂GELU(x): where the layer that made x
 * (an FP8 linear, node p) would cast dY = GELU'(x) ⊙ t per tensor and nothing else adds to that dY
 * (fl_autograd_sole_consumer), dY is cast here for p, its bias gradient summed in the same pass (the device's
 * quantize_dbias_dgelu) and left in p's SV_DB, and *out is the FP8 dY with x's shape: p's backward takes it
 * as its gradient. dY in fp32 is never written. *out stays NULL where this does not apply. */
/* The FP8 linear (node p) that made a fused GELU's input (node n's input 0), when n is its output's only consumer and
 * dgrad's output t is contiguous fp32: where the hand-overs below may make p's dY; else NULL. */
static fl_node *dgelu_producer(fl_node *n, const fl_tensor *t) {
    fl_node *p = n->inputs[0]->grad_fn;
    if (!p || p->backward != fp8_linear_bwd || !fl_autograd_sole_consumer(n, 0) || t->dtype != FL_F32 ||
        !fl_tensor_is_contiguous(t))
        return NULL;
    return p;
}

static fl_status handover_dgelu(fl_tensor **out, fl_node *n, const fl_tensor *t) {
    *out = NULL;
    const fl_tensor *x = n->inputs[0];
    fl_node *p = dgelu_producer(n, t);
    const fl_device *dev = fl_device_get(t->device);
    if (!p || !dev || !dev->quantize_dbias_dgelu || !takes_fp8_dy(p)) return FL_OK;
    fl_fp8_layer *l = p->ctx;
    fl_scaling *s = &l->role[FL_ROLE_GRAD];
    fl_tensor *q = NULL, *db = NULL;
    fl_status st = new_q(&q, t, s->fmt, -1);
    if (st == FL_OK && fl_node_input_needs_grad(p, 2)) st = fl_tensor_empty(&db, FL_F32, 1, &t->shape[1], t->device);
    if (st == FL_OK)
        st = dev->quantize_dbias_dgelu(q, t, n->saved[SV_XPRE], fused_scale(s), s->margin, s->pow2, FL_SATURATE, db);
    if (st == FL_OK) st = observe(s, q, p->iargs[1] != 0);
    if (st == FL_OK) st = fl_tensor_reshape(out, q, x->ndim, x->shape);
    if (st == FL_OK) fl_node_save(p, SV_DB, db);
    fl_tensor_release(q);
    fl_tensor_release(db);
    return st;
}

/* ROWWISE: the same hand-over for a layer p that casts dY per row and per column (ROWWISE, dgrad in FP8): dY =
 * GELU'(x) ⊙ t is made in place in t (dgrad's fresh output, which stays the gradient p receives, in fp32: p's
 * per-column cast reads it), and in the same pass cast per row for p with its column amaxes and bias gradient
 * (quantize_rows_dgelu), left in p's slots (SV_GROWS, SV_GCMAX, SV_DB; t's address in its iargs). *done: t is dY
 * now. Else *done stays false and t untouched. */
static fl_status handover_dgelu_rows(bool *done, fl_node *n, fl_tensor *t) {
    *done = false;
    fl_node *p = dgelu_producer(n, t);
    const fl_device *dev = fl_device_get(t->device);
    if (!p || !dev || !dev->quantize_rows_dgelu || t->ndim != 2) return FL_OK;
    fl_fp8_layer *l = p->ctx;
    if (l->gran != FL_GRAN_ROWWISE || l->hp[1] || !fl_node_input_needs_grad(p, 0)) return FL_OK;
    fl_scaling *s = &l->role[FL_ROLE_GRAD];
    const bool want_cmax = fl_node_input_needs_grad(p, 1) && !l->hp[2], want_db = fl_node_input_needs_grad(p, 2);
    fl_tensor *q = NULL, *cm = NULL, *db = NULL;
    fl_status st = new_q(&q, t, s->fmt, 0);
    if (st == FL_OK && want_cmax) st = fl_tensor_empty(&cm, FL_F32, 1, &t->shape[1], FL_DEV_CPU);
    if (st == FL_OK && want_db) st = fl_tensor_empty(&db, FL_F32, 1, &t->shape[1], t->device);
    if (st == FL_OK)
        st = dev->quantize_rows_dgelu(q, t, n->saved[SV_XPRE], s->margin, s->pow2, FL_SATURATE,
                                      cm ? fl_tensor_data(cm) : NULL, db);
    if (st == FL_OK) st = observe(s, q, p->iargs[1] != 0);
    if (st == FL_OK) {
        fl_node_save(p, SV_GROWS, q);
        fl_node_save(p, SV_GCMAX, cm);
        fl_node_save(p, SV_DB, db);
        p->iargs[IA_GREF] = (int64_t)(intptr_t)fl_tensor_data(t);
        p->iargs[IA_GREF + 1] = fl_tensor_numel(t);
        p->iargs[IA_GREF + 2] = (int64_t)fl_autograd_backward_id();
        *done = true;
    }
    fl_tensor_release(q);
    fl_tensor_release(cm);
    fl_tensor_release(db);
    return st;
}

/* ROWWISE dY [N, M] per row (cast_rows), or what the consumer handed over for this gradient in this backward
 * (handover_dgelu_rows: g32's data is what it made them from), which the node then lets go. */
static fl_status dy_rows(fl_tensor **q, float *cmax, bool *have_cmax, fl_tensor **db, fl_node *n, const fl_tensor *g32,
                         fl_scaling *s, bool record) {
    const fl_tensor *rows = n->saved[SV_GROWS], *cm = n->saved[SV_GCMAX];
    const bool handed = rows && n->iargs[IA_GREF] == (int64_t)(intptr_t)fl_tensor_data(g32) &&
                        n->iargs[IA_GREF + 1] == fl_tensor_numel(g32) &&
                        n->iargs[IA_GREF + 2] == (int64_t)fl_autograd_backward_id() && (!cmax || cm) &&
                        (!db || n->saved[SV_DB]);
    fl_status st = FL_OK;
    if (handed) {
        *q = fl_tensor_retain((fl_tensor *)rows);
        *have_cmax = cmax != NULL;
        if (cmax) memcpy(cmax, fl_tensor_data(cm), (size_t)fl_tensor_numel(cm) * sizeof(float));
        if (db) *db = fl_tensor_retain(n->saved[SV_DB]);
        ((fl_fp8_layer *)n->ctx)->dy_handovers++;
    }
    const int slots[3] = { SV_GROWS, SV_GCMAX, SV_DB };
    for (int i = 0; i < 3; i++) fl_node_save(n, slots[i], NULL);
    n->iargs[IA_GREF] = n->iargs[IA_GREF + 1] = n->iargs[IA_GREF + 2] = 0;
    if (!handed) st = cast_rows(q, cmax, have_cmax, db, g32, s, record);
    return st;
}

static fl_status fp8_linear_bwd(fl_node *n, const fl_tensor *g, fl_tensor **gin) {
    fl_fp8_layer *l = n->ctx;
    const fl_tensor *x = n->inputs[0], *w = n->inputs[1];
    fl_dtype cdt = (fl_dtype)n->iargs[0];
    bool record = n->iargs[1] != 0;
    int64_t M = w->shape[0];
    bool need_dx = fl_node_input_needs_grad(n, 0), need_dw = fl_node_input_needs_grad(n, 1),
         need_db = fl_node_input_needs_grad(n, 2);
    bool fp8_dx = need_dx && !l->hp[1], fp8_dw = need_dw && !l->hp[2] && l->gran != FL_GRAN_ROWWISE_GW_HP;
    int64_t gs[2] = { -1, M };
    fl_tensor *g2 = NULL, *g32 = NULL, *gq = NULL, *gqc = NULL, *t = NULL, *tt = NULL, *wq2 = NULL, *xq2 = NULL;
    fl_tensor *gq_dev = NULL;   /* what the device derived from gq's bytes: shared by dgrad and wgrad */
    fl_tensor *xt = NULL;       /* x's FP8 bytes transposed, when the cast made them (wgrad's b) */
    fl_tensor *db = NULL;       /* the bias gradient, when dY's cast summed it */
    float *cmax = NULL;         /* ROWWISE: dY's column amaxes from dgrad's cast, then wgrad's scales */
    bool have_cmax = false;
    l->backwards++;
    fl_status st = fl_tensor_reshape(&g2, g, 2, gs);
    if (st == FL_OK && fl_format(g->dtype)->is_fp8) {
        /* dY cast by the consumer's backward (handover_dgelu), its bias gradient with it */
        if (!takes_fp8_dy(n) || (need_db && !n->saved[SV_DB]))
            st = FL_ERR(FL_EINVAL, "fp8 linear backward: an FP8 gradient this layer cannot take (%s)", fl_format(g->dtype)->name);
        else {
            gq = fl_tensor_retain(g2);
            db = need_db ? fl_tensor_retain(n->saved[SV_DB]) : NULL;
            l->dy_handovers++;
            fl_node_save(n, SV_DB, NULL);
        }
    } else if (st == FL_OK) {
        st = as_f32(&g32, g2);
    }
    fl_scaling *sg = &l->role[FL_ROLE_GRAD];

    /* dgrad: dX [N, K] = dY [N, M] · W [M, K] */
    if (st == FL_OK && need_dx) {
        if (!fp8_dx) {
            st = gemm_hp(&t, g32, n->saved[SV_WHP] ? n->saved[SV_WHP] : w, cdt, NULL);
        } else if (l->gran == FL_GRAN_TENSOR) {
            /* gq_dev: dY's bytes transposed, made in the cast's pass where the device can (wgrad's dYᵀ) */
            if (!gq) st = cast_dy(&gq, &gq_dev, need_db ? &db : NULL, g32, sg, record, fp8_dw);
            /* fprop ran in high precision: this is the weight's FP8 cast, and it feeds the role's amax history
             * (as TransformerEngine's weight cast does whichever GEMMs then read it in FP8) */
            if (st == FL_OK && !n->saved[SV_W]) st = weight_q(&wq2, l, w, NULL, record, true);
            const fl_tensor *wq = n->saved[SV_W] ? n->saved[SV_W] : wq2;
            if (st == FL_OK) st = gemm_fp8(&t, gq, wq, NULL, NULL, &gq_dev, wcache(l, wq), false);
        } else {
            /* dY per row; W per column (ROWWISE) or per tensor (GW_HP), current power-of-two scales. */
            fl_tensor *w32 = NULL;
            if (fp8_dw && !(cmax = malloc((size_t)(M > 0 ? M : 1) * sizeof(float))))
                st = FL_ERR(FL_ENOMEM, "fp8 linear: out of memory for %lld column amaxes", (long long)M);
            if (st == FL_OK) st = dy_rows(&gq, cmax, &have_cmax, need_db ? &db : NULL, n, g32, sg, record);
            if (st == FL_OK) st = as_f32(&w32, n->saved[SV_W]);
            if (st == FL_OK)
                st = cast_role(&wq2, w32, &l->role[FL_ROLE_WEIGHT], true, l->gran == FL_GRAN_ROWWISE ? 1 : -1);
            fl_tensor_release(w32);
            if (st == FL_OK) st = gemm_fp8(&t, gq, wq2, NULL, NULL, NULL, NULL, false);
        }
        fl_tensor *ho = NULL;
        if (st == FL_OK && n->iargs[2]) {
            /* the layer's input was GELU(x) (fl_fp8_linear_gelu): dX ← GELU'(x) ⊙ dX, as GeluBackward computes it,
             * cast for the layer before it where that layer takes it so; else in place in dgrad's fresh output
             * (the fused path runs on the CPU, whose act_bwd is per element) */
            bool done = false;
            st = handover_dgelu(&ho, n, t);
            if (st == FL_OK && !ho) st = handover_dgelu_rows(&done, n, t);
            if (st == FL_OK && !ho && !done)
                st = fl_device_get(t->device)->act_bwd(FL_ACT_GELU_TANH, fl_tensor_data(n->saved[SV_XPRE]),
                                                       fl_tensor_data(t), fl_tensor_data(t), fl_tensor_numel(t));
        }
        if (st == FL_OK && ho) gin[0] = ho;
        else if (st == FL_OK) st = fl_tensor_reshape(&gin[0], t, x->ndim, x->shape);
        fl_tensor_release(t); t = NULL;
        if (l->gran != FL_GRAN_TENSOR) { fl_tensor_release(gq); gq = NULL; }   /* TENSOR: wgrad reuses it */
    }
    /* wgrad: dW [M, K] = dYᵀ [M, N] · X [N, K] */
    if (st == FL_OK && need_dw) {
        if (!fp8_dw) {
            const fl_tensor *xhp = n->saved[SV_XHP] ? n->saved[SV_XHP] : n->saved[SV_X];
            st = transposed(&tt, g32);
            if (st == FL_OK) st = gemm_hp(&gin[1], tt, xhp, cdt, NULL);
        } else if (l->gran == FL_GRAN_TENSOR) {
            if (!gq) st = cast_dy(&gq, &gq_dev, need_db ? &db : NULL, g32, sg, record, true);
            if (st == FL_OK && !n->saved[SV_X]) {   /* fprop ran in high precision: the input's FP8 cast is this one */
                fl_tensor *x32 = NULL;
                st = as_f32(&x32, n->saved[SV_XHP]);
                if (st == FL_OK) st = cast_observed_t(&xq2, &xt, x32, &l->role[FL_ROLE_INPUT], record, true);
                fl_tensor_release(x32);
            } else if (st == FL_OK) {
                xt = fl_tensor_retain(n->saved[SV_XT]);
            }
            if (st == FL_OK) st = transposed(&tt, gq);
            if (st == FL_OK)
                st = gemm_fp8(&gin[1], tt, n->saved[SV_X] ? n->saved[SV_X] : xq2, NULL, NULL, &gq_dev, xt ? &xt : NULL, false);
        } else {
            /* ROWWISE: dY per column (one scale per output feature), X per column (per input feature); dY's
             * column amaxes from dgrad's read of dY where the device gave them. */
            fl_tensor *x32 = NULL;
            st = cast_cols(&gqc, g32, sg, cmax, have_cmax);
            /* without an FP8 dgrad no per-row cast of dY was made: this one is the role's observation (its amax,
             * underflow and saturation, for fp8.stats), else a layer whose input takes no gradient shows none */
            if (st == FL_OK && !fp8_dx) st = observe(sg, gqc, record);
            if (st == FL_OK && !n->saved[SV_XC]) {   /* the forward kept x in high precision */
                st = as_f32(&x32, n->saved[SV_X]);
                if (st == FL_OK) st = cast_role(&xq2, x32, &l->role[FL_ROLE_INPUT], true, 1);
            }
            fl_tensor_release(x32);
            if (st == FL_OK) st = transposed(&tt, gqc);
            if (st == FL_OK) st = gemm_fp8(&gin[1], tt, xq2 ? xq2 : n->saved[SV_XC], NULL, NULL, NULL, NULL, false);
        }
    }
    if (st == FL_OK && need_db) {
        if (db) { gin[2] = db; db = NULL; }
        else st = fl_reduce_raw(&gin[2], FL_OP_SUM, g32, 0, false);
    }
    /* the residual's gradient is dY itself (an add's backward); takes_fp8_dy keeps an FP8 dY away from here */
    if (st == FL_OK && n->ninputs > SV_RES_IN && fl_node_input_needs_grad(n, SV_RES_IN))
        gin[SV_RES_IN] = fl_tensor_retain((fl_tensor *)g);
    free(cmax);
    fl_tensor_release(db);
    fl_tensor_release(gq_dev);
    fl_tensor_release(xt);
    fl_tensor_release(tt);
    fl_tensor_release(gq);
    fl_tensor_release(gqc);
    fl_tensor_release(wq2);
    fl_tensor_release(xq2);
    fl_tensor_release(g32);
    fl_tensor_release(g2);
    return st;
}

static fl_status check_args(const fl_tensor *x, const fl_tensor *w, const fl_tensor *b, const fl_tensor *w_fp8) {
    char sw[200];
    FL_TRY(fl_linear_check("fp8 linear", x, w, b, "pass high-precision tensors (the layer casts them)"));
    if (w_fp8 && (w_fp8->dtype != FL_E4M3 || !fl_shape_equal(2, w->shape, w_fp8->ndim, w_fp8->shape) ||
                  !fl_tensor_is_contiguous(w_fp8) || w_fp8->scale_axis >= 0))
        return FL_ERR(FL_EINVAL, "fp8 linear: the FP8 weight must be a contiguous per-tensor e4m3 %s", SHAPE(sw, w));
    if (x->device != w->device || (b && b->device != w->device) || (w_fp8 && w_fp8->device != w->device))
        return FL_ERR(FL_EINVAL, "fp8 linear: input, weight%s must be on one device (got %s and %s%s%s)",
                      b ? " and bias" : "", fl_device_name(x->device), fl_device_name(w->device), b ? ", " : "",
                      b ? fl_device_name(b->device) : "");
    return FL_OK;
}

/* fl_fp8_linear; with `gelu` set the same layer applied to GELU(x) (tanh form) whose input cast runs in GELU's
 * pass (fl_fp8_linear_gelu decides when); with xq_pre, x's per-tensor cast already made and observed by the op
 * before (fl_fp8_linear_layernorm: x is then a header without storage, only its shape and history are read);
 * with res, res + the layer: a residual that fits_residual takes is the node's fourth input, added in the FP8
 * GEMM's store where the device can (fp8_gemm_add); any other is added after the layer by fl_binary. */
static fl_status linear_impl(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                             const fl_tensor *res, fl_fp8_layer *l, bool record, const fl_tensor *w_fp8, bool gelu,
                             const fl_tensor *xq_pre) {
    fl_dtype ac = fl_autocast_dtype();
    fl_dtype cdt = (ac == FL_BF16 || ac == FL_F16) ? ac : FL_F32;
    int64_t M = w->shape[0], K = w->shape[1];
    int64_t x2s[2] = { -1, K };
    int64_t ys[FL_MAX_DIMS];
    memcpy(ys, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    ys[x->ndim - 1] = M;
    const fl_tensor *ts[4] = { x, w, b, res };
    const int nin = res ? 4 : 3;
    bool grad = fl_any_requires_grad(nin, ts);
    bool rowwise = l->gran != FL_GRAN_TENSOR;
    fl_tensor *x2 = NULL, *x32 = NULL, *xq = NULL, *xqt = NULL, *wq = NULL, *w32 = NULL, *y2 = NULL, *xhp = NULL;
    fl_tensor *xqc = NULL;  /* ROWWISE: x per column, for wgrad */
    fl_tensor *r2 = NULL;   /* res as [N, M], contiguous */
    if (xq_pre && (rowwise || l->hp[0] || l->hp[1] || l->hp[2]))
        return FL_ERR(FL_EINVAL, "fp8 linear: an input cast before the layer needs per-tensor scaling and every GEMM in FP8");
    if (res && !fits_residual(res, x, w)) {
        FL_TRY(linear_impl(out, x, w, b, NULL, l, record, w_fp8, gelu, xq_pre));
        return add_to(out, res, true);
    }
    l->forwards++;
    fl_status st = FL_OK;
    if (res) {
        const int64_t r2s[2] = { -1, M };
        fl_tensor *rc = NULL;
        st = fl_tensor_contiguous(&rc, res);
        if (st == FL_OK) st = fl_tensor_view(&r2, rc, 2, r2s);
        fl_tensor_release(rc);
    }
    if (st == FL_OK && !xq_pre) {
        st = fl_tensor_reshape(&x2, x, 2, x2s);
        if (st == FL_OK) st = as_f32(&x32, x2);
    }
    if (st == FL_OK && !xq_pre && l->hp[0]) {
        /* fprop in high precision: the layer still records the input amax for its statistics. */
        fl_tensor *wt = NULL;
        float xa = 0.0f;
        st = fl_fp8_amax_2d(x32, -1, &xa);
        if (st == FL_OK) st = fl_scaling_flush(&l->role[FL_ROLE_INPUT]);   /* keep the casts' order */
        if (st == FL_OK) fl_scaling_observe(&l->role[FL_ROLE_INPUT], xa, fl_tensor_numel(x32), 0, 0, false);
        if (st == FL_OK) st = transposed(&wt, w);
        if (st == FL_OK) st = gemm_hp(&y2, x32, wt, cdt, b);
        if (st == FL_OK && r2) st = add_to(&y2, r2, false);
        fl_tensor_release(wt);
    } else if (st == FL_OK) {
        int axis = rowwise ? 0 : -1;
        if (rowwise) {
            st = as_f32(&w32, w);
            if (st == FL_OK) st = cast_observed(&wq, w32, &l->role[FL_ROLE_WEIGHT], 0, record);
        } else {
            st = weight_q(&wq, l, w, w_fp8, record, grad && !l->hp[1]);
        }
        /* wgrad in FP8 reads x's bytes transposed: made in the cast's pass where the device can */
        if (gelu || xq_pre) l->fused_input_casts++;
        if (st == FL_OK && xq_pre)
            st = fl_tensor_reshape(&xq, xq_pre, 2, x2s);
        else if (st == FL_OK && gelu && rowwise)   /* fl_fp8_linear_gelu's ROWWISE path: wgrad's x made now */
            st = cast_rows_cols(&xq, &xqc, x32, &l->role[FL_ROLE_INPUT], record, true);
        else if (st == FL_OK && gelu)
            st = cast_observed_gelu(&xq, x32, &l->role[FL_ROLE_INPUT], record);
        else if (st == FL_OK && !rowwise)
            st = cast_observed_t(&xq, &xqt, x32, &l->role[FL_ROLE_INPUT], record, grad && !l->hp[2]);
        else if (st == FL_OK && l->gran == FL_GRAN_ROWWISE && !l->hp[2] && fl_any_requires_grad(1, &w))
            st = cast_rows_cols(&xq, &xqc, x32, &l->role[FL_ROLE_INPUT], record, false);   /* wgrad's x made now */
        else if (st == FL_OK) st = cast_observed(&xq, x32, &l->role[FL_ROLE_INPUT], axis, record);
        fl_tensor *wt = NULL;
        if (st == FL_OK) st = transposed(&wt, wq);
        if (st == FL_OK) st = gemm_fp8(&y2, xq, wt, b, r2, NULL, rowwise ? NULL : wcache(l, wq), l->fast_accum);
        if (st == FL_OK && r2 && fl_device_get(y2->device)->fp8_gemm_add) l->residual_adds++;
        fl_tensor_release(wt);
    }
    if (st == FL_OK) st = fl_tensor_view(out, y2, x->ndim, ys);
    if (st == FL_OK && grad) {
        fl_node *n = NULL;
        st = fl_node_new(&n, "FP8LinearBackward", fp8_linear_bwd, nin, ts);
        if (st == FL_OK) n->inputs_read = 3u;   /* x and the weight: re-cast in backward when not saved */
        if (st == FL_OK) {
            fl_autograd_attach(*out, n);
            n->ctx = fl_fp8_layer_retain(l);
            n->ctx_free = layer_ctx_free;
            n->iargs[0] = cdt;
            n->iargs[1] = record;
            n->iargs[2] = gelu;
            if (gelu) fl_node_save(n, SV_XPRE, x32);
            /* What backward reads. TENSOR: the FP8 operands the forward made (1 byte per element) for
             * the FP8 backward GEMMs; high-precision copies only where a GEMM runs in high precision
             * or the forward made no FP8 copy. ROWWISE: the high-precision weight, re-cast per column in
             * backward (torchao's choice), and x's per-column cast, made in the forward (1 byte per element
             * kept, not 4; torchao casts the input it keeps in backward, with the same bits). Where wgrad runs in
             * high precision (ROWWISE_GW_HP, hp[2]) or the weight takes no gradient, x itself. */
            if (!rowwise) {
                /* Backward reads only the FP8 copy of x: let the fp32 activation go (docs/fp8-spec.md §2). */
                if (!l->hp[0] && !l->hp[2]) {
                    fl_node_save(n, SV_X, xq);
                    fl_node_save(n, SV_XT, xqt);
                    st = fl_node_input_stub(n, 0);
                }
                if (!l->hp[0] && !l->hp[1]) fl_node_save(n, SV_W, wq);
                if (l->hp[2] || l->hp[0]) {
                    if (l->hp[2] && cdt != FL_F32) st = fl_tensor_to(&xhp, x2, cdt);
                    else xhp = fl_tensor_retain(x2);
                    fl_node_save(n, SV_XHP, xhp);
                }
                if (l->hp[1] || l->hp[0]) fl_node_save(n, SV_WHP, w);
            } else {
                /* wgrad reads x's per-column cast where the forward made it, and nothing else reads x */
                if (xqc) {
                    fl_node_save(n, SV_XC, xqc);
                    st = fl_node_input_stub(n, 0);
                } else {
                    fl_node_save(n, SV_X, x2);
                }
                fl_node_save(n, SV_W, w);
            }
            if (st == FL_OK && res) st = fl_node_input_stub(n, SV_RES_IN);   /* its gradient is dY: only its shape is read */
        }
    }
    fl_tensor_release(x2);
    fl_tensor_release(x32);
    fl_tensor_release(xq);
    fl_tensor_release(xqt);
    fl_tensor_release(xqc);
    fl_tensor_release(wq);
    fl_tensor_release(w32);
    fl_tensor_release(y2);
    fl_tensor_release(xhp);
    fl_tensor_release(r2);
    if (st != FL_OK) { fl_tensor_release(*out); *out = NULL; }
    return st;
}

fl_status fl_fp8_linear(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                        fl_fp8_layer *l, bool record, const fl_tensor *w_fp8, const fl_tensor *residual) {
    *out = NULL;
    FL_PROF_SCOPE("fp8_linear"); FL_PROF_SHAPES(x, w, b);   /* no FLOPs here: its GEMM (fp8_gemm or matmul) counts them */
    if (!l) return FL_ERR(FL_EINVAL, "fp8 linear: no recipe state");
    FL_TRY(check_args(x, w, b, w_fp8));
    return linear_impl(out, x, w, b, residual, l, record, w_fp8, false, NULL);
}

fl_status fl_fp8_linear_gelu(fl_tensor **out, const fl_tensor *x, const fl_tensor *w, const fl_tensor *b,
                             fl_fp8_layer *l, bool record, const fl_tensor *w_fp8, const fl_tensor *residual) {
    *out = NULL;
    if (!l) return FL_ERR(FL_EINVAL, "fp8 linear: no recipe state");
    FL_TRY(check_args(x, w, b, w_fp8));
    const fl_device *dev = fl_device_get(x->device);
    /* Fused where the input cast is a per-tensor cast (stored or current scale) that backward keeps only in FP8;
     * and under ROWWISE where the weight takes a gradient (x per row and per column, both from GELU's one pass:
     * backward keeps the per-column cast and GELU's input, as it does for a per-tensor cast) */
    const bool tensor = dev && dev->quantize_gelu && l->gran == FL_GRAN_TENSOR && !l->hp[0] && !l->hp[1] && !l->hp[2];
    const bool rows = dev && dev->quantize_rows_gelu && l->gran == FL_GRAN_ROWWISE && !l->hp[0] && !l->hp[2] &&
                      fl_any_requires_grad(1, &w);
    if (tensor || rows) {
        FL_PROF_SCOPE("fp8_linear"); FL_PROF_SHAPES(x, w, b);
        return linear_impl(out, x, w, b, residual, l, record, w_fp8, true, NULL);
    }
    fl_tensor *h = NULL;
    FL_TRY(fl_gelu(&h, x, 1));
    fl_status st = fl_fp8_linear(out, h, w, b, l, record, w_fp8, residual);
    fl_tensor_release(h);
    return st;
}

fl_status fl_fp8_linear_layernorm(fl_tensor **out, const fl_tensor *x, const fl_tensor *ln_w, const fl_tensor *ln_b,
                                  double eps, const fl_tensor *w, const fl_tensor *b, fl_fp8_layer *l, bool record,
                                  const fl_tensor *w_fp8) {
    *out = NULL;
    if (!l) return FL_ERR(FL_EINVAL, "fp8 linear: no recipe state");
    FL_TRY(check_args(x, w, b, w_fp8));
    const fl_device *dev = fl_device_get(x->device);
    fl_scaling *s = &l->role[FL_ROLE_INPUT];
    /* Fused where the input cast is a per-tensor cast (stored or current scale) that backward keeps only in FP8 */
    if (dev && dev->layernorm_quantize && l->gran == FL_GRAN_TENSOR && !l->hp[0] && !l->hp[1] && !l->hp[2]) {
        FL_PROF_SCOPE("fp8_linear"); FL_PROF_SHAPES(x, w, b);
        fl_tensor *y = NULL, *q = NULL;
        fl_status st = fl_layer_norm_fp8(&y, &q, x, ln_w, ln_b, eps, s->fmt, fused_scale(s), s->margin, s->pow2);
        if (st == FL_OK) st = observe(s, q, record);
        if (st == FL_OK) st = linear_impl(out, y, w, b, NULL, l, record, w_fp8, false, q);
        fl_tensor_release(y);
        fl_tensor_release(q);
        return st;
    }
    fl_tensor *h = NULL;
    FL_TRY(fl_layer_norm(&h, x, ln_w, ln_b, eps));
    fl_status st = fl_fp8_linear(out, h, w, b, l, record, w_fp8, NULL);
    fl_tensor_release(h);
    return st;
}
