/* optim.c — the optimizer steps' argument checks and dispatch to the parameter's device (the fused
 * kernels are the devices' sgd/adamw/msamp_adamw entries: core/cpu/cpu_optim.c, kernels/optim.cu),
 * plus Σx² and in-place scaling for gradient clipping. Written tensors are marked (fl_tensor_bump)
 * so caches keyed on their storage version (the FP8 weight cache) see the change. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "device.h"
#include "ops_raw.h"
#include "optim.h"
#include "cpu/par.h"
#include "profiler.h"

/* The device every tensor of a step lives on, and the entry it needs (NULL tensors are skipped). */
static fl_status step_device(const char *fn, int n, const fl_tensor *const *ts, const fl_device **dev) {
    int d = ts[0]->device;
    for (int i = 1; i < n; i++)
        if (ts[i] && ts[i]->device != d)
            return FL_ERR(FL_EINVAL, "%s: the parameter is on %s but another argument is on %s; move them to one device",
                          fn, fl_device_name(d), fl_device_name(ts[i]->device));
    *dev = fl_device_get(d);
    if (!*dev) return FL_ERR(FL_EDEVICE, "%s: device %s is not available", fn, fl_device_name(d));
    return FL_OK;
}

static fl_status missing_entry(const char *fn, const fl_device *dev) {
    return FL_ERR(FL_EUNSUPPORTED, "%s is not supported on %s", fn, dev->name);
}

static fl_status check_f32(const fl_tensor *t, const char *fn, const char *what, int64_t n) {
    if (!t) return FL_ERR(FL_EINVAL, "%s: %s is missing", fn, what);
    if (t->dtype != FL_F32)
        return FL_ERR(FL_EUNSUPPORTED, "%s: %s must be fp32, got %s", fn, what, fl_format(t->dtype)->name);
    if (!fl_tensor_is_contiguous(t))
        return FL_ERR(FL_EINVAL, "%s: %s must be contiguous", fn, what);
    if (n >= 0 && fl_tensor_numel(t) != n) {
        char a[96];
        return FL_ERR(FL_EINVAL, "%s: %s has %lld elements %s, the parameter has %lld", fn, what,
                      (long long)fl_tensor_numel(t), fl_shape_str(a, sizeof a, t->ndim, t->shape), (long long)n);
    }
    return FL_OK;
}

static float *F(const fl_tensor *t) { return t ? (float *)fl_tensor_data(t) : NULL; }

/* A parameter that is a strided view (a transposed leaf: torch steps it in place) is stepped as a contiguous copy,
 * which the caller writes back; one whose elements overlap (an expand) is refused, as torch's in-place update is. */
static fl_status strided_param(const char *fn, const fl_tensor *p, fl_tensor **copy) {
    for (int d = 0; d < p->ndim; d++)
        if (p->stride[d] == 0 && p->shape[d] > 1)
            return FL_ERR(FL_EINVAL, "%s: more than one element of the parameter refers to a single memory "
                          "location (an expand of dim %d), which an update in place cannot write; expand after the "
                          "parameter instead", fn, d + 1);
    return fl_tensor_contiguous(copy, p);
}
/* (and its gradient, which takes a dense parameter's strides, as torch's .grad does since stop 101: a channels_last
 * weight's; read as a contiguous copy beside the parameter's) */
#define STEP_STRIDED_PARAM(fn, call)                                                         \
    if (p && (!fl_tensor_is_contiguous(p) || (g && !fl_tensor_is_contiguous(g)))) {         \
        fl_tensor *c_ = NULL, *gc_ = NULL;                                                   \
        FL_TRY(strided_param(fn, p, &c_));                                                   \
        fl_status st_ = g ? fl_tensor_contiguous(&gc_, g) : FL_OK;                           \
        fl_tensor *p_ = p;                                                                   \
        p = c_;                                                                              \
        if (g) g = gc_;                                                                      \
        if (st_ == FL_OK) st_ = call;                                                        \
        if (st_ == FL_OK && c_ != p_) st_ = fl_tensor_copy_(p_, c_);                         \
        fl_tensor_release(c_);                                                               \
        fl_tensor_release(gc_);                                                              \
        return st_;                                                                          \
    }

fl_status fl_sgd_step(fl_tensor *p, const fl_tensor *g, fl_tensor *buf, double lr, double momentum, double dampening,
                      double weight_decay, bool nesterov, bool first_step) {
    STEP_STRIDED_PARAM("sgd_step", fl_sgd_step(p, g, buf, lr, momentum, dampening, weight_decay, nesterov, first_step));
    FL_PROF_SCOPE("sgd_step"); FL_PROF_SHAPES(p);
    FL_TRY(check_f32(p, "sgd_step", "parameter", -1));
    int64_t n = fl_tensor_numel(p);
    FL_TRY(check_f32(g, "sgd_step", "gradient", n));
    if (momentum != 0.0) FL_TRY(check_f32(buf, "sgd_step", "momentum buffer", n));
    else buf = NULL;
    if (nesterov && (momentum <= 0.0 || dampening != 0.0))
        return FL_ERR(FL_EINVAL, "sgd_step: nesterov needs momentum > 0 and dampening = 0 (got momentum %g, dampening %g)",
                      momentum, dampening);
    const fl_device *dev;
    FL_TRY(step_device("sgd_step", 3, (const fl_tensor *[]){ p, g, buf }, &dev));
    if (!dev->sgd) return missing_entry("sgd_step", dev);
    fl_tensor_bump(p);
    return dev->sgd(F(p), F(g), F(buf), n, lr, momentum, dampening, weight_decay, nesterov, first_step);
}

fl_status fl_adamw_step(fl_tensor *p, const fl_tensor *g, fl_tensor *m, fl_tensor *v, fl_tensor *vmax, double lr,
                        double beta1, double beta2, double eps, double weight_decay, int64_t step) {
    STEP_STRIDED_PARAM("adamw_step", fl_adamw_step(p, g, m, v, vmax, lr, beta1, beta2, eps, weight_decay, step));
    FL_PROF_SCOPE("adamw_step"); FL_PROF_SHAPES(p);
    FL_TRY(check_f32(p, "adamw_step", "parameter", -1));
    int64_t n = fl_tensor_numel(p);
    FL_TRY(check_f32(g, "adamw_step", "gradient", n));
    FL_TRY(check_f32(m, "adamw_step", "first moment (exp_avg)", n));
    FL_TRY(check_f32(v, "adamw_step", "second moment (exp_avg_sq)", n));
    if (vmax) FL_TRY(check_f32(vmax, "adamw_step", "amsgrad maximum (max_exp_avg_sq)", n));
    if (step < 1) return FL_ERR(FL_EINVAL, "adamw_step: step counts from 1, got %lld", (long long)step);
    if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
        return FL_ERR(FL_EINVAL, "adamw_step: betas must be in [0, 1), got (%g, %g)", beta1, beta2);
    const fl_device *dev;
    FL_TRY(step_device("adamw_step", vmax ? 5 : 4, (const fl_tensor *[]){ p, g, m, v, vmax }, &dev));
    if (!dev->adamw) return missing_entry("adamw_step", dev);
    fl_tensor_bump(p);
    return dev->adamw(F(p), F(g), F(m), F(v), F(vmax), n, lr, beta1, beta2, eps, weight_decay, step);
}

fl_status fl_rmsprop_step(fl_tensor *p, const fl_tensor *g, fl_tensor *sq, fl_tensor *gavg, fl_tensor *buf, double lr,
                          double alpha, double eps, double weight_decay, double momentum, bool maximize) {
    STEP_STRIDED_PARAM("rmsprop_step", fl_rmsprop_step(p, g, sq, gavg, buf, lr, alpha, eps, weight_decay, momentum,
                                                       maximize));
    FL_PROF_SCOPE("rmsprop_step"); FL_PROF_SHAPES(p);
    FL_TRY(check_f32(p, "rmsprop_step", "parameter", -1));
    int64_t n = fl_tensor_numel(p);
    FL_TRY(check_f32(g, "rmsprop_step", "gradient", n));
    FL_TRY(check_f32(sq, "rmsprop_step", "square_avg", n));
    if (gavg) FL_TRY(check_f32(gavg, "rmsprop_step", "grad_avg", n));
    if (momentum > 0.0) FL_TRY(check_f32(buf, "rmsprop_step", "momentum_buffer", n));
    else buf = NULL;
    const double hyper[] = { lr, alpha, eps, weight_decay, momentum };
    for (size_t i = 0; i < sizeof hyper / sizeof *hyper; i++)
        if (!(hyper[i] >= 0.0) || !isfinite(hyper[i]))
            return FL_ERR(FL_EINVAL, "rmsprop_step: lr, alpha, eps, weight_decay and momentum must be finite and >= 0, "
                          "got %g", hyper[i]);
    const fl_device *dev;
    FL_TRY(step_device("rmsprop_step", 5, (const fl_tensor *[]){ p, g, sq, gavg, buf }, &dev));
    if (!dev->rmsprop) return missing_entry("rmsprop_step", dev);
    fl_tensor_bump(p);
    return dev->rmsprop(F(p), F(g), F(sq), F(gavg), F(buf), n, lr, alpha, eps, weight_decay, momentum, maximize);
}

fl_status fl_adagrad_step(fl_tensor *p, const fl_tensor *g, fl_tensor *sum, double clr, double eps, double weight_decay,
                          bool maximize) {
    STEP_STRIDED_PARAM("adagrad_step", fl_adagrad_step(p, g, sum, clr, eps, weight_decay, maximize));
    FL_PROF_SCOPE("adagrad_step"); FL_PROF_SHAPES(p);
    FL_TRY(check_f32(p, "adagrad_step", "parameter", -1));
    int64_t n = fl_tensor_numel(p);
    FL_TRY(check_f32(g, "adagrad_step", "gradient", n));
    FL_TRY(check_f32(sum, "adagrad_step", "sum", n));
    const double hyper[] = { clr, eps, weight_decay };
    for (size_t i = 0; i < sizeof hyper / sizeof *hyper; i++)
        if (!(hyper[i] >= 0.0) || !isfinite(hyper[i]))
            return FL_ERR(FL_EINVAL, "adagrad_step: lr, eps and weight_decay must be finite and >= 0, got %g", hyper[i]);
    const fl_device *dev;
    FL_TRY(step_device("adagrad_step", 3, (const fl_tensor *[]){ p, g, sum }, &dev));
    if (!dev->adagrad) return missing_entry("adagrad_step", dev);
    fl_tensor_bump(p);
    return dev->adagrad(F(p), F(g), F(sum), n, clr, eps, weight_decay, maximize);
}

static fl_status check_msamp(const fl_tensor *t, const char *what, int64_t n, int dtmask) {
    if (!t) return FL_ERR(FL_EINVAL, "msamp_adamw_step: %s is missing", what);
    if (!(dtmask & (1 << t->dtype)))
        return FL_ERR(FL_EINVAL, "msamp_adamw_step: %s has dtype %s, which this step does not take", what,
                      fl_format(t->dtype)->name);
    if (!fl_tensor_is_contiguous(t))
        return FL_ERR(FL_EINVAL, "msamp_adamw_step: %s must be contiguous", what);
    if (n >= 0 && fl_tensor_numel(t) != n)
        return FL_ERR(FL_EINVAL, "msamp_adamw_step: %s has %lld elements, the parameter %lld", what,
                      (long long)fl_tensor_numel(t), (long long)n);
    if (fl_format(t->dtype)->is_fp8 && (!t->scale_inv || t->scale_axis >= 0))
        return FL_ERR(FL_EINVAL, "msamp_adamw_step: %s must have one per-tensor scale", what);
    return FL_OK;
}

fl_status fl_msamp_adamw_step(fl_tensor *p, const fl_tensor *g, fl_tensor *m, fl_tensor *v, fl_tensor *v_scale_inv,
                              fl_tensor *p_fp8, double lr, double beta1, double beta2, double eps, double weight_decay,
                              int64_t step) {
    STEP_STRIDED_PARAM("msamp_adamw_step",
                       fl_msamp_adamw_step(p, g, m, v, v_scale_inv, p_fp8, lr, beta1, beta2, eps, weight_decay, step));
    FL_PROF_SCOPE("msamp_adamw_step"); FL_PROF_SHAPES(p);
    const int F32 = 1 << FL_F32, F16 = 1 << FL_F16, FP8 = (1 << FL_E4M3) | (1 << FL_E5M2);
    FL_TRY(check_msamp(p, "parameter", -1, F32 | F16));
    int64_t n = fl_tensor_numel(p);
    FL_TRY(check_msamp(g, "gradient", n, F32 | FP8));
    FL_TRY(check_msamp(m, "first moment (exp_avg)", n, (1 << FL_E4M3) | F32));
    FL_TRY(check_msamp(v, "second moment (exp_avg_sq)", n, F16 | F32));
    FL_TRY(check_msamp(v_scale_inv, "second-moment scale_inv", 1, F32));
    if (p_fp8) FL_TRY(check_msamp(p_fp8, "FP8 weight", n, 1 << FL_E4M3));
    if (step < 1) return FL_ERR(FL_EINVAL, "msamp_adamw_step: step counts from 1, got %lld", (long long)step);
    if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
        return FL_ERR(FL_EINVAL, "msamp_adamw_step: betas must be in [0, 1), got (%g, %g)", beta1, beta2);
    const fl_device *dev;
    FL_TRY(step_device("msamp_adamw_step", 6, (const fl_tensor *[]){ p, g, m, v, v_scale_inv, p_fp8 }, &dev));
    if (!dev->msamp_adamw) return missing_entry("msamp_adamw_step", dev);
    fl_status st = dev->msamp_adamw(p, g, m, v, v_scale_inv, p_fp8, lr, beta1, beta2, eps, weight_decay, step);
    fl_tensor_bump(p);
    fl_tensor_bump(m);
    fl_tensor_bump(v);
    if (p_fp8) fl_tensor_bump(p_fp8);
    return st;
}

fl_status fl_sumsq_many(const fl_tensor *const *ts, int n, double *out) {
    if (n < 0 || (n > 0 && (!ts || !out)))
        return FL_ERR(FL_EINVAL, "sumsq: expected n >= 0 tensors and a result array, got n = %d", n);
    for (int i = 0; i < n; i++)
        if (!ts[i]) return FL_ERR(FL_EINVAL, "sumsq: tensor %d of %d is missing", i + 1, n);
    if (n == 0) return FL_OK;
    for (int i = 1; i < n; i++)
        if (ts[i]->device != ts[0]->device) {   /* tensors on several devices: each on its own */
            for (int j = 0; j < n; j++) FL_TRY(fl_sumsq_many(&ts[j], 1, &out[j]));
            return FL_OK;
        }
    const fl_device *dev;
    FL_TRY(step_device("sumsq", 1, ts, &dev));
    if (!dev->sumsq) return missing_entry("sumsq", dev);
    /* FP8 (dequantized) and non-contiguous layouts become contiguous fp32/bf16/fp16 tensors first; the device
     * gets them in batches, each closed by the copy that brings its copies to SUMSQ_COPY_BYTES or more (so a
     * batch holds under that plus one tensor's copy; MS-AMP's FP8 gradients would otherwise be held in fp32 all
     * at once), contiguous ones as they are. */
    enum { SUMSQ_COPY_BYTES = 64 << 20 };
    fl_tensor **c = calloc((size_t)n, sizeof *c);
    if (!c) return FL_ERR(FL_ENOMEM, "sumsq: out of memory for %d tensors", n);
    fl_status st = FL_OK;
    size_t held = 0;
    for (int i = 0, start = 0; i < n && st == FL_OK; i++) {
        st = fl_format(ts[i]->dtype)->is_fp8 ? fl_dequantize(&c[i], ts[i], FL_F32) : fl_tensor_contiguous(&c[i], ts[i]);
        if (st != FL_OK) break;
        if (c[i] != ts[i]) held += (size_t)fl_tensor_numel(c[i]) * fl_format(c[i]->dtype)->size;
        if (held < SUMSQ_COPY_BYTES && i + 1 < n) continue;
        st = dev->sumsq((const fl_tensor *const *)c + start, i + 1 - start, out + start);
        for (; start <= i; start++) { fl_tensor_release(c[start]); c[start] = NULL; }
        held = 0;
    }
    for (int i = 0; i < n; i++) fl_tensor_release(c[i]);
    free(c);
    return st;
}

fl_status fl_sumsq(const fl_tensor *t, double *out) {
    if (!t) return FL_ERR(FL_EINVAL, "sumsq: tensor is missing");
    return fl_sumsq_many(&t, 1, out);
}

/* Visit every element offset of a strided tensor (row-major order). */
#define FOR_EACH_OFFSET(t, off, body)                                                        \
    do {                                                                                      \
        int64_t idx_[FL_MAX_DIMS] = {0}, n_ = fl_tensor_numel(t);                            \
        for (int64_t k_ = 0; k_ < n_; k_++) {                                                 \
            int64_t off = 0;                                                                  \
            for (int d_ = 0; d_ < (t)->ndim; d_++) off += idx_[d_] * (t)->stride[d_];        \
            body;                                                                             \
            for (int d_ = (t)->ndim - 1; d_ >= 0; d_--) {                                     \
                if (++idx_[d_] < (t)->shape[d_]) break;                                       \
                idx_[d_] = 0;                                                                 \
            }                                                                                 \
        }                                                                                     \
    } while (0)

fl_status fl_scale_(fl_tensor *t, double s) {
    if (!t) return FL_ERR(FL_EINVAL, "scale_: tensor is missing");
    const fl_device *dev;
    FL_TRY(step_device("scale_", 1, (const fl_tensor *const *)&t, &dev));
    if (fl_format(t->dtype)->is_fp8 && t->scale_inv) {
        /* A quantized tensor scales exactly through its scale_inv (the bytes stay). */
        if (t->device == FL_DEV_CPU) {
            float *si = fl_tensor_data(t->scale_inv);
            for (int64_t i = 0; i < fl_tensor_numel(t->scale_inv); i++) si[i] *= (float)s;
            return FL_OK;
        }
        return dev->binary_scalar(FL_OP_MUL, t->scale_inv, t->scale_inv, s, false);
    }
    if (t->dtype != FL_F32)
        return FL_ERR(FL_EUNSUPPORTED, "scale_: needs an fp32 or FP8 tensor, got %s", fl_format(t->dtype)->name);
    fl_tensor_bump(t);
    if (t->device != FL_DEV_CPU) {
        /* Elementwise in place on the device: dst and source are the same contiguous tensor. */
        if (fl_tensor_is_contiguous(t)) return dev->binary_scalar(FL_OP_MUL, t, t, s, false);
        fl_tensor *c = NULL, *r = NULL;
        FL_TRY(fl_tensor_contiguous(&c, t));
        fl_status st = fl_binary_scalar_raw(&r, FL_OP_MUL, c, s, false);
        if (st == FL_OK) st = fl_tensor_copy_(t, r);
        fl_tensor_release(c);
        fl_tensor_release(r);
        return st;
    }
    float *x = (float *)t->storage->data + t->offset;
    const float f = (float)s;
    if (fl_tensor_is_contiguous(t)) {
        int64_t n = fl_tensor_numel(t);
        FL_PAR_FOR_SIMD(n >= (1 << 16),,
        for (int64_t i = 0; i < n; i++) x[i] *= f;);
    } else {
        FOR_EACH_OFFSET(t, off, x[off] *= f);
    }
    return FL_OK;
}
