/* optim.cu — SGD, AdamW and MS-AMP's low-bit AdamW on the GPU (core/optim.h), and the optimizer entries
 * of the cuda device table (sgd, adamw, msamp_adamw; core/device.h). SGD is PyTorch's
 *   d = g + wd·p;  momentum ≠ 0: b = first_step ? d : μ·b + (1−dampening)·d, d = nesterov ? d + μ·b : b;
 *   p = p − lr·d   (scalars rounded to fp32 on the host, as core/optim.c fl_sgd_kernel_f32). AdamW is
 *   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²;  p = p·(1 − lr·wd) − (lr/bc1)·m / (√v/√bc2 + eps)
 * with the scalars formed in double on the host and the per-element work in fp32, in core/optim.c's
 * order, every operation separately rounded (no FMA contraction). MS-AMP (O2/O3): m E4M3 and v fp16,
 * each with a scale_inv, are dequantized, updated in fp32 and re-quantized with fresh power-of-two
 * scales (m: 448/amax, v: 65504/amax, rounded down, amax floored at 1e-12) — two passes over the
 * moments (the new amaxes, then the writes); O3 re-casts the E4M3 weight from the new master.
 * Layout: contiguous 1-D arrays; one grid-stride kernel per pass, single-thread kernels for the
 * scales in between. Deterministic: amaxes combine by max. Tolerance: bit-exact with core/optim.c
 * (tests/c/test_gpu_fp8.c; SGD and the entries: tests/c/test_gpu_train_ops.c); the element functions
 * are __host__ __device__ and also run on the host. */
#include "cuda_common.cuh"
#include "fl_cuda_host.h"
#include "cuda_entries.h"

namespace {

constexpr int kThreads = 256;

struct AdamScalars {
    float beta1, beta2, a1, a2, decay, step_size, inv_bc2_sqrt, eps;
};

/* Exactly fl_adamw_kernel_f32's and fl_msamp_adamw_step's scalar set-up. */
AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps, double wd, int64_t step) {
    double bc1 = 1.0 - pow(beta1, (double)step), bc2 = 1.0 - pow(beta2, (double)step);
    AdamScalars s;
    s.decay = (float)(1.0 - lr * wd);
    s.step_size = (float)(lr / bc1);
    s.inv_bc2_sqrt = (float)(1.0 / sqrt(bc2));
    s.beta1 = (float)beta1; s.beta2 = (float)beta2; s.eps = (float)eps;
    s.a1 = (float)(1.0 - beta1); s.a2 = (float)(1.0 - beta2);
    return s;
}

FL_HD void adam_moments(float g, float &m, float &v, const AdamScalars &s) {
    m = fl_fadd(fl_fmul(s.beta1, m), fl_fmul(s.a1, g));
    v = fl_fadd(fl_fmul(s.beta2, v), fl_fmul(fl_fmul(s.a2, g), g));
}

/* p·decay − step_size·m / (√v·inv_bc2_sqrt + eps) */
FL_HD float adam_param(float p, float m, float v, const AdamScalars &s) {
    float denom = fl_fadd(fl_fmul(fl_fsqrt(v), s.inv_bc2_sqrt), s.eps);
    return fl_fsub(fl_fmul(p, s.decay), fl_fdiv(fl_fmul(s.step_size, m), denom));
}

/* vmax non-NULL: amsgrad, the running maximum of v in the denominator (NaN if either is, as torch.maximum) */
FL_HD void adamw_elem(float *p, const float *g, float *m, float *v, float *vmax, size_t i, const AdamScalars &s) {
    float mi = m[i], vi = v[i];
    adam_moments(g[i], mi, vi, s);
    m[i] = mi;
    v[i] = vi;
    if (vmax) {
        float hi = vmax[i];
        hi = (vi <= hi || hi != hi) ? hi : vi;
        vmax[i] = hi;
        vi = hi;
    }
    p[i] = adam_param(p[i], mi, vi, s);
}

__global__ void __launch_bounds__(kThreads) adamw_kernel(float *p, const float *g, float *m, float *v, float *vmax,
                                                         size_t n, AdamScalars s) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        adamw_elem(p, g, m, v, vmax, i, s);
}

/* ---- SGD ------------------------------------------------------------------------------------------ */

struct SgdScalars {
    float lr, momentum, weight_decay, keep;   /* keep = 1 − dampening */
    bool has_momentum, nesterov, first_step;
};

/* Exactly fl_sgd_kernel_f32's scalar set-up. */
SgdScalars sgd_scalars(double lr, double momentum, double dampening, double weight_decay, bool nesterov,
                       bool first_step) {
    SgdScalars s;
    s.lr = (float)lr; s.momentum = (float)momentum; s.weight_decay = (float)weight_decay;
    s.keep = (float)(1.0 - dampening);
    s.has_momentum = momentum != 0.0;
    s.nesterov = nesterov; s.first_step = first_step;
    return s;
}

/* Element i in fl_sgd_kernel_f32's order, each operation rounded on its own. buf is only touched with
 * momentum (it may be NULL without). */
FL_HD void sgd_elem(float *p, const float *g, float *buf, size_t i, const SgdScalars &s) {
    const float d = s.weight_decay != 0.0f ? fl_fadd(g[i], fl_fmul(s.weight_decay, p[i])) : g[i];
    if (!s.has_momentum) {
        p[i] = fl_fsub(p[i], fl_fmul(s.lr, d));
        return;
    }
    /* PyTorch clones d into a fresh buffer on the first step (no dampening then). */
    const float b = s.first_step ? d : fl_fadd(fl_fmul(s.momentum, buf[i]), fl_fmul(s.keep, d));
    buf[i] = b;
    p[i] = fl_fsub(p[i], fl_fmul(s.lr, s.nesterov ? fl_fadd(d, fl_fmul(s.momentum, b)) : b));
}

__global__ void __launch_bounds__(kThreads) sgd_kernel(float *p, const float *g, float *buf, size_t n, SgdScalars s) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sgd_elem(p, g, buf, i, s);
}

fl_status check_sgd(int64_t n, const float *p, const float *g, const float *buf, double momentum) {
    if (n < 0) return FL_ERR(FL_EINVAL, "cuda sgd: n must be >= 0, got %lld", (long long)n);
    if (n && (!p || !g)) return FL_ERR(FL_EINVAL, "cuda sgd: a NULL array");
    if (n && momentum != 0.0 && !buf) return FL_ERR(FL_EINVAL, "cuda sgd: momentum %g needs a momentum buffer", momentum);
    return FL_OK;
}

/* ---- MS-AMP ----------------------------------------------------------------------------------- */

/* Element i of a state as fp32, as core/optim.c widens it: fp32 as is; fp16 times si when si != 1;
 * FP8 decoded times si. */
FL_HD float load_elem(const void *x, int dt, size_t i, float si) {
    switch (dt) {
    case FL_F32: return static_cast<const float *>(x)[i];
    case FL_F16: {
        float f = fl_f16_bits_to_f32(static_cast<const uint16_t *>(x)[i]);
        return si != 1.0f ? fl_fmul(f, si) : f;
    }
    case FL_E4M3: return fl_fmul(fl_dec_fp8<3, 7>(static_cast<const uint8_t *>(x)[i]), si);
    default: return fl_fmul(fl_dec_fp8<2, 15>(static_cast<const uint8_t *>(x)[i]), si);
    }
}

FL_HD uint8_t e4m3_sat(float x) {
    bool over;
    return fl_cvt_fp8<3, 7>(x, false, &over);
}

struct MsampView {   /* one call's arrays and dtypes, and the scale_invs as they were before the update */
    void *p; int pdt;
    const void *g; int gdt; float gsi;
    void *m; int mdt; float msi;
    void *v; int vdt; float vsi;
    uint8_t *p_fp8;
    const float *gsi_p, *msi_p, *vsi_p;   /* where the scale_invs live (device, or host for the host run) */
};

/* The view with its scale_invs read (each kernel does this first; the last kernel replaces them). */
FL_HD MsampView resolved(MsampView c) {
    c.gsi = c.gsi_p ? *c.gsi_p : 1.0f;
    c.msi = c.msi_p ? *c.msi_p : 1.0f;
    c.vsi = c.vsi_p ? *c.vsi_p : 1.0f;
    return c;
}

/* The new moments of element i (pass 1 and pass 2 compute them identically). */
FL_HD void msamp_moments(const MsampView &c, size_t i, const AdamScalars &s, float &m, float &v) {
    float g = load_elem(c.g, c.gdt, i, c.gsi);
    m = load_elem(c.m, c.mdt, i, c.msi);
    v = load_elem(c.v, c.vdt, i, c.vsi);
    adam_moments(g, m, v, s);
}

/* Pass 2 for element i: writes p, m (E4M3 with scale ms, or fp32), v (fp16 with scale vs, or fp32);
 * returns the stored parameter as fp32 (for O3's amax). */
FL_HD float msamp_write(const MsampView &c, size_t i, const AdamScalars &s, float ms, float vs) {
    float m, v;
    msamp_moments(c, i, s, m, v);
    float p = adam_param(load_elem(c.p, c.pdt, i, 1.0f), m, v, s);
    float stored = p;
    if (c.pdt == FL_F32) static_cast<float *>(c.p)[i] = p;
    else {
        uint16_t h = fl_f32_to_f16_bits(p);
        static_cast<uint16_t *>(c.p)[i] = h;
        stored = fl_f16_bits_to_f32(h);
    }
    if (c.mdt == FL_F32) static_cast<float *>(c.m)[i] = m;
    else static_cast<uint8_t *>(c.m)[i] = e4m3_sat(fl_fmul(m, ms));
    if (c.vdt == FL_F32) static_cast<float *>(c.v)[i] = v;
    else static_cast<uint16_t *>(c.v)[i] = fl_f32_to_f16_bits(fl_fmul(v, vs));
    return stored;
}

FL_HD float pow2_scale(float amax, float fmt_max) {
    return fl_amax_to_scale_current(amax, fmt_max, 0, true);
}

/* work words: 0 m amax bits, 1 v amax bits, 2 ms, 3 vs, 4 p amax bits, 5 ps (6, 7 spare) */
__device__ __forceinline__ float *wf(unsigned *w, int i) { return reinterpret_cast<float *>(w + i); }

__global__ void __launch_bounds__(kThreads) msamp_amax_kernel(MsampView c, size_t n, AdamScalars s, unsigned *work) {
    c = resolved(c);
    float mmax = 0.0f, vmax = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float m, v;
        msamp_moments(c, i, s, m, v);
        float a = fabsf(m);
        mmax = a > mmax ? a : mmax;                      /* NaN never wins, as on the CPU */
        vmax = v > vmax ? v : vmax;
    }
    mmax = block_max_all(mmax);
    vmax = block_max_all(vmax);
    if (threadIdx.x == 0) {
        if (mmax > 0.0f) atomicMax(work + 0, __float_as_uint(mmax));
        if (vmax > 0.0f) atomicMax(work + 1, __float_as_uint(vmax));
    }
}

__global__ void msamp_scales_kernel(unsigned *work) {
    *wf(work, 2) = pow2_scale(__uint_as_float(work[0]), 448.0f);
    *wf(work, 3) = pow2_scale(__uint_as_float(work[1]), 65504.0f);
}

__global__ void __launch_bounds__(kThreads) msamp_update_kernel(MsampView c, size_t n, AdamScalars s, unsigned *work) {
    c = resolved(c);
    const float ms = *wf(work, 2), vs = *wf(work, 3);
    float pmax = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        pmax = fmaxf(pmax, fabsf(msamp_write(c, i, s, ms, vs)));
    if (c.p_fp8) {
        pmax = block_max_all(pmax);
        if (threadIdx.x == 0 && pmax > 0.0f) atomicMax(work + 4, __float_as_uint(pmax));
    }
}

__global__ void msamp_finish_kernel(unsigned *work, bool mq, bool vq, float *m_si, float *v_si, float *pf_si) {
    if (mq) *m_si = fl_fdiv(1.0f, *wf(work, 2));
    if (vq) *v_si = fl_fdiv(1.0f, *wf(work, 3));
    if (pf_si) {
        float ps = pow2_scale(__uint_as_float(work[4]), 448.0f);
        *wf(work, 5) = ps;
        *pf_si = fl_fdiv(1.0f, ps);
    }
}

__global__ void __launch_bounds__(kThreads) msamp_recast_kernel(const void *p, int pdt, uint8_t *p_fp8, size_t n,
                                                                const unsigned *work) {
    const float ps = __uint_as_float(work[5]);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p_fp8[i] = e4m3_sat(fl_fmul(load_elem(p, pdt, i, 1.0f), ps));
}

fl_status check_adam_scalars(const char *fn, double beta1, double beta2, int64_t step) {
    if (step < 1) return FL_ERR(FL_EINVAL, "%s: step counts from 1, got %lld", fn, (long long)step);
    if (!(beta1 >= 0.0 && beta1 < 1.0) || !(beta2 >= 0.0 && beta2 < 1.0))
        return FL_ERR(FL_EINVAL, "%s: betas must be in [0, 1), got (%g, %g)", fn, beta1, beta2);
    return FL_OK;
}

const char *dt_name(fl_dtype t) { return fl_format(t) ? fl_format(t)->name : "an unknown dtype"; }

fl_status check_msamp(const fl_cuda_msamp_args *a) {
    const char *fn = "cuda msamp_adamw";
    if (!a) return FL_ERR(FL_EINVAL, "%s: no arguments", fn);
    FL_TRY(check_adam_scalars(fn, a->beta1, a->beta2, a->step));
    if (a->p_dtype != FL_F32 && a->p_dtype != FL_F16)
        return FL_ERR(FL_EINVAL, "%s: the parameter must be fp32 or fp16, got %s", fn, dt_name(a->p_dtype));
    if (a->g_dtype != FL_F32 && !is_fp8_dtype(a->g_dtype))
        return FL_ERR(FL_EINVAL, "%s: the gradient must be fp32, e4m3 or e5m2, got %s", fn, dt_name(a->g_dtype));
    if (a->m_dtype != FL_F32 && a->m_dtype != FL_E4M3)
        return FL_ERR(FL_EINVAL, "%s: the first moment must be e4m3 or fp32, got %s", fn, dt_name(a->m_dtype));
    if (a->v_dtype != FL_F32 && a->v_dtype != FL_F16)
        return FL_ERR(FL_EINVAL, "%s: the second moment must be fp16 or fp32, got %s", fn, dt_name(a->v_dtype));
    if (is_fp8_dtype(a->g_dtype) && !a->g_scale_inv)
        return FL_ERR(FL_EINVAL, "%s: an FP8 gradient needs its scale_inv", fn);
    if (a->m_dtype == FL_E4M3 && !a->m_scale_inv) return FL_ERR(FL_EINVAL, "%s: the e4m3 first moment needs its scale_inv", fn);
    if (a->v_dtype == FL_F16 && !a->v_scale_inv) return FL_ERR(FL_EINVAL, "%s: the fp16 second moment needs its scale_inv", fn);
    if (a->p_fp8 && !a->p_fp8_scale_inv) return FL_ERR(FL_EINVAL, "%s: the FP8 weight needs its scale_inv", fn);
    if (a->n && (!a->p || !a->g || !a->m || !a->v)) return FL_ERR(FL_EINVAL, "%s: a NULL array", fn);
    return FL_OK;
}

/* fp32 states carry no scale (core/optim.c ignores theirs). */
MsampView view_of(const fl_cuda_msamp_args *a) {
    MsampView c;
    c.p = a->p; c.pdt = a->p_dtype;
    c.g = a->g; c.gdt = a->g_dtype;
    c.m = a->m; c.mdt = a->m_dtype;
    c.v = a->v; c.vdt = a->v_dtype;
    c.p_fp8 = a->p_fp8;
    c.gsi_p = is_fp8_dtype(a->g_dtype) ? a->g_scale_inv : NULL;
    c.msi_p = a->m_dtype == FL_E4M3 ? a->m_scale_inv : NULL;
    c.vsi_p = a->v_dtype == FL_F16 ? a->v_scale_inv : NULL;
    c.gsi = c.msi = c.vsi = 1.0f;
    return c;
}

}  // namespace

extern "C" fl_status fl_cuda_adamw(float *p, const float *g, float *m, float *v, float *vmax, size_t n, double lr,
                                   double beta1, double beta2, double eps, double weight_decay, int64_t step,
                                   fl_cuda_stream_t stream) {
    FL_TRY(check_adam_scalars("cuda adamw", beta1, beta2, step));
    if (n && (!p || !g || !m || !v)) return FL_ERR(FL_EINVAL, "cuda adamw: a NULL array");
    if (n == 0) return FL_OK;
    AdamScalars s = adam_scalars(lr, beta1, beta2, eps, weight_decay, step);
    adamw_kernel<<<grid_for_work(n, kThreads, 8), kThreads, 0, pick_stream(stream)>>>(p, g, m, v, vmax, n, s);
    FL_CUDA_CHECK(cudaGetLastError(), "adamw_kernel launch");
    return FL_OK;
}

extern "C" fl_status fl_cuda_msamp_adamw(const fl_cuda_msamp_args *a, unsigned int *work, fl_cuda_stream_t stream) {
    FL_TRY(check_msamp(a));
    if (!work) return FL_ERR(FL_EINVAL, "cuda msamp_adamw: work (%d device words) is NULL", FL_CUDA_MSAMP_WORK_WORDS);
    if (a->n == 0) return FL_OK;
    cudaStream_t st = pick_stream(stream);
    AdamScalars s = adam_scalars(a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->step);
    MsampView c = view_of(a);
    bool mq = a->m_dtype != FL_F32, vq = a->v_dtype != FL_F32;
    unsigned grid = grid_for_work(a->n, kThreads, 8);
    FL_CUDA_CHECK(cudaMemsetAsync(work, 0, FL_CUDA_MSAMP_WORK_WORDS * sizeof(unsigned), st), "cudaMemsetAsync");
    if (mq || vq) {
        msamp_amax_kernel<<<grid, kThreads, 0, st>>>(c, a->n, s, work);
        FL_CUDA_CHECK(cudaGetLastError(), "msamp_amax_kernel launch");
    }
    msamp_scales_kernel<<<1, 1, 0, st>>>(work);
    FL_CUDA_CHECK(cudaGetLastError(), "msamp_scales_kernel launch");
    msamp_update_kernel<<<grid, kThreads, 0, st>>>(c, a->n, s, work);
    FL_CUDA_CHECK(cudaGetLastError(), "msamp_update_kernel launch");
    msamp_finish_kernel<<<1, 1, 0, st>>>(work, mq, vq, a->m_scale_inv, a->v_scale_inv,
                                         a->p_fp8 ? a->p_fp8_scale_inv : NULL);
    FL_CUDA_CHECK(cudaGetLastError(), "msamp_finish_kernel launch");
    if (a->p_fp8) {
        msamp_recast_kernel<<<grid, kThreads, 0, st>>>(a->p, a->p_dtype, a->p_fp8, a->n, work);
        FL_CUDA_CHECK(cudaGetLastError(), "msamp_recast_kernel launch");
    }
    return FL_OK;
}

/* ---- the device-table entries (core/device.h) ----------------------------------------------------- */

extern "C" fl_status fl_cuda_dev_sgd(float *p, const float *g, float *buf, int64_t n, double lr, double momentum,
                                     double dampening, double weight_decay, bool nesterov, bool first_step) {
    FL_TRY(check_sgd(n, p, g, buf, momentum));
    if (n == 0) return FL_OK;
    SgdScalars s = sgd_scalars(lr, momentum, dampening, weight_decay, nesterov, first_step);
    sgd_kernel<<<grid_for_work((size_t)n, kThreads, 8), kThreads, 0, fl_cuda_stream()>>>(p, g, buf, (size_t)n, s);
    FL_CUDA_CHECK(cudaGetLastError(), "sgd_kernel launch");
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_adamw(float *p, const float *g, float *m, float *v, float *vmax, int64_t n,
                                       double lr, double beta1, double beta2, double eps, double weight_decay,
                                       int64_t step) {
    if (n < 0) return FL_ERR(FL_EINVAL, "cuda adamw: n must be >= 0, got %lld", (long long)n);
    return fl_cuda_adamw(p, g, m, v, vmax, (size_t)n, lr, beta1, beta2, eps, weight_decay, step, NULL);
}

namespace {

/* A tensor the msamp entry reads: on the GPU, contiguous, n elements; its data pointer. */
fl_status msamp_tensor(const fl_tensor *t, const char *what, int64_t n, void **data) {
    if (!t) return FL_ERR(FL_EINVAL, "cuda msamp_adamw: %s is missing", what);
    if (t->device != FL_DEV_CUDA || !fl_tensor_is_contiguous(t))
        return FL_ERR(FL_EINVAL, "cuda msamp_adamw: %s must be a contiguous cuda tensor", what);
    if (n >= 0 && fl_tensor_numel(t) != n)
        return FL_ERR(FL_EINVAL, "cuda msamp_adamw: %s has %lld elements, expected %lld", what,
                      (long long)fl_tensor_numel(t), (long long)n);
    *data = fl_tensor_data(t);
    return FL_OK;
}

/* The per-tensor scale_inv of an FP8 (or scaled) tensor: one fp32 on the GPU. */
fl_status msamp_scale(const fl_tensor *t, const char *what, float **si) {
    void *d = NULL;
    if (!t->scale_inv) return FL_ERR(FL_EINVAL, "cuda msamp_adamw: %s needs its scale_inv", what);
    if (t->scale_inv->dtype != FL_F32 || t->scale_axis >= 0)
        return FL_ERR(FL_EINVAL, "cuda msamp_adamw: %s must have one fp32 per-tensor scale", what);
    FL_TRY(msamp_tensor(t->scale_inv, what, 1, &d));
    *si = static_cast<float *>(d);
    return FL_OK;
}


}  // namespace

extern "C" fl_status fl_cuda_dev_msamp_adamw(fl_tensor *p, const fl_tensor *g, fl_tensor *m, fl_tensor *v,
                                             fl_tensor *v_scale_inv, fl_tensor *p_fp8, double lr, double beta1,
                                             double beta2, double eps, double weight_decay, int64_t step) {
    fl_cuda_msamp_args a;
    memset(&a, 0, sizeof a);
    void *pd = NULL, *gd = NULL, *md = NULL, *vd = NULL, *vsd = NULL, *pfd = NULL;
    FL_TRY(msamp_tensor(p, "the parameter", -1, &pd));
    const int64_t n = fl_tensor_numel(p);
    FL_TRY(msamp_tensor(g, "the gradient", n, &gd));
    FL_TRY(msamp_tensor(m, "the first moment", n, &md));
    FL_TRY(msamp_tensor(v, "the second moment", n, &vd));
    FL_TRY(msamp_tensor(v_scale_inv, "the second-moment scale_inv", 1, &vsd));
    if (v_scale_inv->dtype != FL_F32)
        return FL_ERR(FL_EINVAL, "cuda msamp_adamw: the second-moment scale_inv must be fp32");
    a.p = pd; a.p_dtype = p->dtype;
    a.g = gd; a.g_dtype = g->dtype;
    if (is_fp8_dtype(g->dtype)) {
        float *gsi = NULL;
        FL_TRY(msamp_scale(g, "the FP8 gradient", &gsi));
        a.g_scale_inv = gsi;
    }
    a.m = md; a.m_dtype = m->dtype;
    if (m->dtype == FL_E4M3) FL_TRY(msamp_scale(m, "the e4m3 first moment", &a.m_scale_inv));
    a.v = vd; a.v_dtype = v->dtype;
    a.v_scale_inv = static_cast<float *>(vsd);
    if (p_fp8) {
        FL_TRY(msamp_tensor(p_fp8, "the FP8 weight", n, &pfd));
        if (p_fp8->dtype != FL_E4M3) return FL_ERR(FL_EINVAL, "cuda msamp_adamw: the FP8 weight must be e4m3");
        a.p_fp8 = static_cast<uint8_t *>(pfd);
        FL_TRY(msamp_scale(p_fp8, "the FP8 weight", &a.p_fp8_scale_inv));
    }
    a.n = (size_t)n;
    a.lr = lr; a.beta1 = beta1; a.beta2 = beta2; a.eps = eps; a.weight_decay = weight_decay; a.step = step;
    FL_TRY(check_msamp(&a));   /* dtypes and scalars, before any allocation */
    if (n == 0) return FL_OK;
    fl_cu_scratch w;
    FL_TRY(w.alloc(FL_CUDA_MSAMP_WORK_WORDS * sizeof(unsigned)));
    /* The words go back to the allocator on return; their next user is ordered after these launches. */
    return fl_cuda_msamp_adamw(&a, static_cast<unsigned *>(w.p), NULL);
}

/* ---- the same element code on the host ----------------------------------------------------------- */

/* fl_cuda_dev_sgd's element code over host memory (tests; declared there). */
extern "C" fl_status fl_cuda_sgd_host(float *p, const float *g, float *buf, int64_t n, double lr, double momentum,
                                      double dampening, double weight_decay, bool nesterov, bool first_step) {
    FL_TRY(check_sgd(n, p, g, buf, momentum));
    SgdScalars s = sgd_scalars(lr, momentum, dampening, weight_decay, nesterov, first_step);
    for (int64_t i = 0; i < n; i++) sgd_elem(p, g, buf, (size_t)i, s);
    return FL_OK;
}

extern "C" uint16_t fl_cuda_f32_to_f16_host(float x) { return fl_f32_to_f16_bits(x); }

extern "C" fl_status fl_cuda_adamw_host(float *p, const float *g, float *m, float *v, float *vmax, size_t n,
                                        double lr, double beta1, double beta2, double eps, double weight_decay,
                                        int64_t step) {
    FL_TRY(check_adam_scalars("cuda adamw", beta1, beta2, step));
    AdamScalars s = adam_scalars(lr, beta1, beta2, eps, weight_decay, step);
    for (size_t i = 0; i < n; i++) adamw_elem(p, g, m, v, vmax, i, s);
    return FL_OK;
}

extern "C" fl_status fl_cuda_msamp_adamw_host(const fl_cuda_msamp_args *a) {
    FL_TRY(check_msamp(a));
    AdamScalars s = adam_scalars(a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->step);
    MsampView c = resolved(view_of(a));
    float mmax = 0.0f, vmax = 0.0f, pmax = 0.0f;
    for (size_t i = 0; i < a->n; i++) {
        float m, v;
        msamp_moments(c, i, s, m, v);
        float am = fabsf(m);
        mmax = am > mmax ? am : mmax;
        vmax = v > vmax ? v : vmax;
    }
    const float ms = pow2_scale(mmax, 448.0f), vs = pow2_scale(vmax, 65504.0f);
    for (size_t i = 0; i < a->n; i++) pmax = fmaxf(pmax, fabsf(msamp_write(c, i, s, ms, vs)));
    if (a->m_dtype != FL_F32) *a->m_scale_inv = 1.0f / ms;
    if (a->v_dtype != FL_F32) *a->v_scale_inv = 1.0f / vs;
    if (a->p_fp8) {
        const float ps = pow2_scale(pmax, 448.0f);
        for (size_t i = 0; i < a->n; i++) a->p_fp8[i] = e4m3_sat(load_elem(a->p, a->p_dtype, i, 1.0f) * ps);
        *a->p_fp8_scale_inv = 1.0f / ps;
    }
    return FL_OK;
}
