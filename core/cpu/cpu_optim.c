/* cpu_optim.c — the CPU device's optimizer entries (core/device.h; maths in core/optim.h): fused SGD and
 * AdamW on contiguous fp32, MS-AMP's low-bit AdamW, and Σx² for clip_grad_norm_. core/optim.c validates
 * the arguments and marks the written tensors; these only compute. Scalars are formed in double once per
 * call, the per-element work in fp32 as PyTorch's foreach/fused kernels do. */
#include "cpu_internal.h"
#include "optim.h"
#include "par.h"
#include "scale_rule.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements the thread start-up costs more than the update itself. */
#define FL_OPTIM_PAR_MIN (1 << 16)

void fl_sgd_kernel_f32(float *restrict p, const float *restrict g, float *restrict buf, int64_t n, double lr_,
                       double momentum_, double dampening, double weight_decay_, bool nesterov, bool first_step) {
    const float lr = (float)lr_, momentum = (float)momentum_, weight_decay = (float)weight_decay_;
    if (momentum_ == 0.0) {
        FL_PAR_FOR_SIMD(n >= FL_OPTIM_PAR_MIN,,
        for (int64_t i = 0; i < n; i++) p[i] -= lr * (weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i]););
        return;
    }
    const float keep = (float)(1.0 - dampening);
    FL_PAR_FOR_SIMD(n >= FL_OPTIM_PAR_MIN,,
    for (int64_t i = 0; i < n; i++) {
        /* no decay term without decay (torch's): 0·inf would make an infinite weight NaN */
        float d = weight_decay != 0.0f ? g[i] + weight_decay * p[i] : g[i];
        /* PyTorch clones d into a fresh buffer on the first step (no dampening then). */
        float b = first_step ? d : momentum * buf[i] + keep * d;
        buf[i] = b;
        p[i] -= lr * (nesterov ? d + momentum * b : b);
    });
}

void fl_adamw_kernel_f32(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                         float *restrict vmax, int64_t n, double lr, double beta1_, double beta2_, double eps_,
                         double weight_decay, int64_t step) {
    /* Bias corrections in double: β^step for large step is where fp32 would lose digits. */
    double bc1 = 1.0 - pow(beta1_, (double)step);
    double bc2 = 1.0 - pow(beta2_, (double)step);
    const float decay = (float)(1.0 - lr * weight_decay);
    const float step_size = (float)(lr / bc1);
    const float inv_bc2_sqrt = (float)(1.0 / sqrt(bc2));
    const float beta1 = (float)beta1_, beta2 = (float)beta2_, eps = (float)eps_;
    const float a1 = (float)(1.0 - beta1_), a2 = (float)(1.0 - beta2_);
    if (vmax) {   /* amsgrad: the running maximum of v in the denominator (NaN if either is, as torch.maximum) */
        FL_PAR_FOR_SIMD(n >= FL_OPTIM_PAR_MIN,,
        for (int64_t i = 0; i < n; i++) {
            float gi = g[i];
            float mi = beta1 * m[i] + a1 * gi;
            float vi = beta2 * v[i] + a2 * gi * gi;
            float hi = vmax[i];
            hi = (vi <= hi || hi != hi) ? hi : vi;
            m[i] = mi;
            v[i] = vi;
            vmax[i] = hi;
            float denom = __builtin_sqrtf(hi) * inv_bc2_sqrt + eps;
            p[i] = p[i] * decay - step_size * mi / denom;
        });
        return;
    }
    FL_PAR_FOR_SIMD(n >= FL_OPTIM_PAR_MIN,,
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float mi = beta1 * m[i] + a1 * gi;
        float vi = beta2 * v[i] + a2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        /* vectorised with -fno-math-errno (Makefile): sqrtf has no errno branch then */
        float denom = __builtin_sqrtf(vi) * inv_bc2_sqrt + eps;
        p[i] = p[i] * decay - step_size * mi / denom;
    });
}

fl_status fl_cpu_dev_sgd(float *p, const float *g, float *buf, int64_t n, double lr, double momentum, double dampening,
                     double weight_decay, bool nesterov, bool first_step) {
    fl_sgd_kernel_f32(p, g, buf, n, lr, momentum, dampening, weight_decay, nesterov, first_step);
    return FL_OK;
}

fl_status fl_cpu_dev_adamw(float *p, const float *g, float *m, float *v, float *vmax, int64_t n, double lr,
                           double beta1, double beta2, double eps, double weight_decay, int64_t step) {
    fl_adamw_kernel_f32(p, g, m, v, vmax, n, lr, beta1, beta2, eps, weight_decay, step);
    return FL_OK;
}

/* RMSprop and Adagrad: each line one fp32 operation of the composites they replace (lua/fp8/optim/rmsprop.lua,
 * adagrad.lua), the scalars rounded to fp32 as the composites' tensor-scalar ops round them (1 − alpha in double
 * first), so the same bits; the build's -std=c11 keeps a*b + c from becoming a fused multiply-add. */
/* One loop per combination of the options (each a constant in its copy, so every copy is a plain vector loop). */
static inline __attribute__((always_inline)) void rmsprop_run(float *restrict p, const float *restrict g,
                                                              float *restrict sq, float *restrict gavg,
                                                              float *restrict buf, int64_t n, float lrf, float alpha,
                                                              float oma, float eps, float wd, float mom,
                                                              const bool centered, const bool with_buf,
                                                              const bool maximize, const bool decay) {
    FL_PAR_FOR_SIMD(n >= FL_OPTIM_PAR_MIN,,
    for (int64_t i = 0; i < n; i++) {
        float gi = maximize ? -g[i] : g[i];
        if (decay) gi = gi + p[i] * wd;
        const float s = sq[i] * alpha + gi * gi * oma;
        sq[i] = s;
        float avg;
        if (centered) {
            const float a = gavg[i] + (gi - gavg[i]) * oma;
            gavg[i] = a;
            avg = __builtin_sqrtf(s - a * a) + eps;
        } else {
            avg = __builtin_sqrtf(s) + eps;
        }
        if (with_buf) {
            const float b = buf[i] * mom + gi / avg;
            buf[i] = b;
            p[i] = p[i] - b * lrf;
        } else {
            p[i] = p[i] - gi / avg * lrf;
        }
    });
}

fl_status fl_cpu_dev_rmsprop(float *p, const float *g, float *sq, float *gavg, float *buf, int64_t n, double lr,
                             double alpha_, double eps_, double weight_decay, double momentum, bool maximize) {
    const float alpha = (float)alpha_, oma = (float)(1.0 - alpha_), eps = (float)eps_, wd = (float)weight_decay;
    const float mom = (float)momentum, lrf = (float)lr;
    const bool decay = weight_decay != 0.0;
#define RMS(c, b, m, d) rmsprop_run(p, g, sq, gavg, buf, n, lrf, alpha, oma, eps, wd, mom, c, b, m, d)
#define RMS_MD(c, b)                                  \
    do {                                              \
        if (maximize) { if (decay) RMS(c, b, true, true); else RMS(c, b, true, false); }    \
        else { if (decay) RMS(c, b, false, true); else RMS(c, b, false, false); }           \
    } while (0)
    if (gavg) { if (buf) RMS_MD(true, true); else RMS_MD(true, false); }
    else { if (buf) RMS_MD(false, true); else RMS_MD(false, false); }
#undef RMS_MD
#undef RMS
    return FL_OK;
}

static inline __attribute__((always_inline)) void adagrad_run(float *restrict p, const float *restrict g,
                                                              float *restrict sum, int64_t n, float lrf, float eps,
                                                              float wd, const bool maximize, const bool decay) {
    FL_PAR_FOR_SIMD(n >= FL_OPTIM_PAR_MIN,,
    for (int64_t i = 0; i < n; i++) {
        float gi = maximize ? -g[i] : g[i];
        if (decay) gi = gi + p[i] * wd;
        const float s = sum[i] + gi * gi;
        sum[i] = s;
        p[i] = p[i] - gi / (__builtin_sqrtf(s) + eps) * lrf;
    });
}

fl_status fl_cpu_dev_adagrad(float *p, const float *g, float *sum, int64_t n, double clr, double eps_,
                             double weight_decay, bool maximize) {
    const float eps = (float)eps_, wd = (float)weight_decay, lrf = (float)clr;
    const bool decay = weight_decay != 0.0;
    if (maximize) { if (decay) adagrad_run(p, g, sum, n, lrf, eps, wd, true, true); else adagrad_run(p, g, sum, n, lrf, eps, wd, true, false); }
    else { if (decay) adagrad_run(p, g, sum, n, lrf, eps, wd, false, true); else adagrad_run(p, g, sum, n, lrf, eps, wd, false, false); }
    return FL_OK;
}

/* MS-AMP Adam works in chunks: each chunk of m, v, g (and p) is widened to fp32 scratch with the bulk
 * vectorised conversions of format.h, updated with plain SIMD fp32 arithmetic, and narrowed again. 1024
 * elements, so the four scratch buffers (16 KiB) stay in L1: 6.05-6.11 ms of msamp_adamw_step a GPT step against
 * 6.40-6.52 with 4096 (Zen 5, 2026-11-28; the same results). */
#define MSAMP_CHUNK 1024

typedef struct {
    const void *g; fl_dtype gdt; float gsi;
    void *m; fl_dtype mdt; float msi;
    void *v; fl_dtype vdt; float vsi;
    float beta1, beta2, a1, a2;
} msamp_ctx;

static void widen(const void *src, fl_dtype dt, int64_t off, int64_t len, float si, float *dst) {
    switch (dt) {
    case FL_F32: memcpy(dst, (const float *)src + off, (size_t)len * sizeof(float)); break;
    case FL_F16:
        fl_f16_to_f32_n((const uint16_t *)src + off, dst, (size_t)len);
        if (si != 1.0f) for (int64_t i = 0; i < len; i++) dst[i] *= si;
        break;
    default: fl_dequantize_f32((const uint8_t *)src + off, dst, (size_t)len, dt, si); break;
    }
}

/* New moments of elements [off, off+len) into mb, vb (gb: the gradient, kept for the caller). */
static void msamp_moments(const msamp_ctx *c, int64_t off, int64_t len, float *gb, float *mb, float *vb) {
    widen(c->g, c->gdt, off, len, c->gsi, gb);
    widen(c->m, c->mdt, off, len, c->msi, mb);
    widen(c->v, c->vdt, off, len, c->vsi, vb);
    const float b1 = c->beta1, b2 = c->beta2, a1 = c->a1, a2 = c->a2;
    #pragma omp simd
    for (int64_t i = 0; i < len; i++) {
        mb[i] = b1 * mb[i] + a1 * gb[i];
        vb[i] = b2 * vb[i] + a2 * gb[i] * gb[i];
    }
}

fl_status fl_cpu_dev_msamp_adamw(fl_tensor *p, const fl_tensor *g, fl_tensor *m, fl_tensor *v, fl_tensor *v_scale_inv,
                             fl_tensor *p_fp8, double lr, double beta1_, double beta2_, double eps_, double weight_decay,
                             int64_t step) {
    const int64_t n = fl_tensor_numel(p);
    const double bc1 = 1.0 - pow(beta1_, (double)step), bc2 = 1.0 - pow(beta2_, (double)step);
    const float decay = (float)(1.0 - lr * weight_decay), step_size = (float)(lr / bc1);
    const float inv_bc2_sqrt = (float)(1.0 / sqrt(bc2)), eps = (float)eps_;
    float *msi = m->scale_inv ? fl_tensor_data(m->scale_inv) : NULL, *vsi = fl_tensor_data(v_scale_inv);
    msamp_ctx c = {
        .g = fl_tensor_data(g), .gdt = g->dtype,
        .gsi = g->scale_inv ? *(const float *)fl_tensor_data(g->scale_inv) : 1.0f,
        .m = fl_tensor_data(m), .mdt = m->dtype, .msi = msi ? *msi : 1.0f,
        .v = fl_tensor_data(v), .vdt = v->dtype, .vsi = v->dtype == FL_F32 ? 1.0f : *vsi,
        .beta1 = (float)beta1_, .beta2 = (float)beta2_, .a1 = (float)(1.0 - beta1_), .a2 = (float)(1.0 - beta2_),
    };
    const int64_t nch = (n + MSAMP_CHUNK - 1) / MSAMP_CHUNK;
    const bool par = n >= FL_OPTIM_PAR_MIN;
    /* Pass 1: the amaxes of the new moments (only the quantized ones need them; O1 keeps fp32). */
    float mmax = 0.0f, vmax = 0.0f;
    if (c.mdt != FL_F32 || c.vdt != FL_F32) {
        FL_PARALLEL(par, reduction(max : mmax, vmax),
        {
            float gb[MSAMP_CHUNK], mb[MSAMP_CHUNK], vb[MSAMP_CHUNK];
            FL_PRAGMA(omp for schedule(static))
            for (int64_t k = 0; k < nch; k++) {
                int64_t off = k * MSAMP_CHUNK, len = n - off < MSAMP_CHUNK ? n - off : MSAMP_CHUNK;
                msamp_moments(&c, off, len, gb, mb, vb);
                /* format.h's amax (NaN ignored, 8 or 16 lanes a step); v ≥ 0, so its amax is its max */
                const float ma = fl_amax_f32(mb, (size_t)len), va = fl_amax_f32(vb, (size_t)len);
                mmax = ma > mmax ? ma : mmax;
                vmax = va > vmax ? va : vmax;
            }
        });
    }
    const float ms = fl_amax_to_scale_current(mmax, (float)fl_format(FL_E4M3)->max, 0, true);
    const float vs = fl_amax_to_scale_current(vmax, (float)fl_format(FL_F16)->max, 0, true);
    /* Pass 2: the same arithmetic again, now writing m, v and the parameter. */
    FL_PARALLEL(par,,
    {
        float gb[MSAMP_CHUNK], mb[MSAMP_CHUNK], vb[MSAMP_CHUNK], pb[MSAMP_CHUNK];
        FL_PRAGMA(omp for schedule(static))
        for (int64_t k = 0; k < nch; k++) {
            int64_t off = k * MSAMP_CHUNK, len = n - off < MSAMP_CHUNK ? n - off : MSAMP_CHUNK;
            msamp_moments(&c, off, len, gb, mb, vb);
            widen(fl_tensor_data(p), p->dtype, off, len, 1.0f, pb);
            FL_PRAGMA(omp simd)
            for (int64_t i = 0; i < len; i++)
                pb[i] = pb[i] * decay - step_size * mb[i] / (sqrtf(vb[i]) * inv_bc2_sqrt + eps);
            if (p->dtype == FL_F32) memcpy((float *)fl_tensor_data(p) + off, pb, (size_t)len * sizeof(float));
            else fl_f32_to_f16_n(pb, (uint16_t *)fl_tensor_data(p) + off, (size_t)len);
            if (c.mdt == FL_F32) memcpy((float *)c.m + off, mb, (size_t)len * sizeof(float));
            else fl_quantize_f32(mb, (uint8_t *)c.m + off, (size_t)len, FL_E4M3, ms, FL_SATURATE, NULL);
            if (c.vdt == FL_F32) memcpy((float *)c.v + off, vb, (size_t)len * sizeof(float));
            else {
                for (int64_t i = 0; i < len; i++) vb[i] *= vs;
                fl_f32_to_f16_n(vb, (uint16_t *)c.v + off, (size_t)len);
            }
        }
    });
    if (c.mdt != FL_F32) *msi = 1.0f / ms;
    if (c.vdt != FL_F32) *vsi = 1.0f / vs;
    if (p_fp8) {
        /* O3: the forward's E4M3 weight from the new master, fresh power-of-two scale. */
        fl_tensor *p32 = NULL;
        FL_TRY(fl_tensor_to(&p32, p, FL_F32));
        const float *pf = fl_tensor_data(p32);
        float pmax = fl_amax_f32(pf, (size_t)n);
        const float ps = fl_amax_to_scale_current(pmax, (float)fl_format(FL_E4M3)->max, 0, true);
        fl_status st = fl_quantize_f32(pf, fl_tensor_data(p_fp8), (size_t)n, FL_E4M3, ps, FL_SATURATE, NULL);
        fl_tensor_release(p32);
        FL_TRY(st);
        *(float *)fl_tensor_data(p_fp8->scale_inv) = 1.0f / ps;
    }
    return FL_OK;
}

/* Σx² of fp32: below FL_OPTIM_PAR_MIN in order, one lane; from there in blocks of FL_OPTIM_PAR_MIN elements, each
 * block's sum in a fixed SIMD pattern, the blocks' sums added left to right, groups of SUMSQ_GROUP blocks at a time
 * (their sums on the stack). The blocks do not depend on the thread count, so neither does the sum: a thread-split
 * reduction (OpenMP's reduction(+)) gave clip_grad_norm_ another norm on 1 and on 2 threads in the last bits of its
 * double for a gradient of 2^16 elements or more (cpu_reduce.c's rule for sums). */
enum { SUMSQ_GROUP = 64 };
static double sumsq_f32(const float *x, int64_t n) {
    double s = 0.0;
    if (n < FL_OPTIM_PAR_MIN) {
        for (int64_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
        return s;
    }
    for (int64_t g0 = 0; g0 < n; g0 += (int64_t)FL_OPTIM_PAR_MIN * SUMSQ_GROUP) {
        double part[SUMSQ_GROUP];
        const int64_t left = n - g0, nb0 = (left + FL_OPTIM_PAR_MIN - 1) / FL_OPTIM_PAR_MIN;
        const int nb = nb0 < SUMSQ_GROUP ? (int)nb0 : SUMSQ_GROUP;
        FL_PAR_FOR(nb > 1, schedule(static),
        for (int b = 0; b < nb; b++) {
            const int64_t lo = g0 + (int64_t)b * FL_OPTIM_PAR_MIN, hi = lo + FL_OPTIM_PAR_MIN < n ? lo + FL_OPTIM_PAR_MIN : n;
            double bs = 0.0;
            FL_PRAGMA(omp simd reduction(+ : bs))
            for (int64_t i = lo; i < hi; i++) bs += (double)x[i] * (double)x[i];
            part[b] = bs;
        });
        for (int b = 0; b < nb; b++) s += part[b];
    }
    return s;
}

static double sumsq_one(const fl_tensor *t) {
    int64_t n = fl_tensor_numel(t);
    double s = 0.0;
    if (t->dtype == FL_F32) {
        s = sumsq_f32(fl_tensor_data(t), n);
    } else {
        float buf[FL_CPU_TILE];
        for (int64_t j = 0; j < n; j += FL_CPU_TILE) {
            int64_t len = n - j < FL_CPU_TILE ? n - j : FL_CPU_TILE;
            fl_cpu_load(t, j, 1, len, buf);
            for (int64_t i = 0; i < len; i++) s += (double)buf[i] * (double)buf[i];
        }
    }
    return s;
}

fl_status fl_cpu_dev_sumsq(const fl_tensor *const *ts, int n, double *out) {
    for (int i = 0; i < n; i++) out[i] = sumsq_one(ts[i]);
    return FL_OK;
}
