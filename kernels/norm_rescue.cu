/* norm_rescue.cu — the p-norm's rescue where Σ|x|^p left its dtype's range, as the "cuda" device entries norm_rescue
 * and norm_rescue_bwd (core/device.h); core/cpu/cpu_norm_rescue.c is the reference.
 * Maths: per slice o of x over the reduced dims (mask): where s[o] is in [tiny, inf) (tiny the smallest normal number
 * of s's dtype: 2^-126 for fp32 and bf16, 2^-14 for fp16) and, for p < 1, the slice is not steep (the CPU's steep:
 * (1/p)·(r[o] / the smallest nonzero |x|)^(1-p) past 2^126, where the plain formula's backward overflows; tested
 * first with 2^-149 for that |x|, so the common case reads no x), dst[o] = r[o]'s bits and scale[o] = 0; otherwise, where
 * the slice's largest |x| is finite and not 0, scale[o] = c (2^k, frexp's: 2^k <= max|x| < 2^(k+1); max|x| itself
 * for p > 512) and dst[o] = c · (Σ|x / c|^p)^(1/p), the sum in float64 in the slice's element order (the CPU's order:
 * the same bits), rounded to fp32 and then to r's dtype. r, s and x are fp32, bf16 or fp16 (half_cvt.h's conversions,
 * the CPU's). Backward: gr[o] = g[o] where scale[o] is 0, else 0; gx = -0, and in a rescued slice
 * g[o]·sign(y)·(|y| / N)^(p-1), y = x / c, N the slice's norm of y, in float64 (g, gr, gx fp32).
 * Layout: one thread per slice walks its elements through x's strides (any layout): the common case reads only
 * r and s (no host read: *rescued is -1, so the backward runs its kernels too); a rescued slice is walked
 * serially (rare: a sum out of range). gx's fill is a grid-stride pass.
 * Tolerance: bit-exact with the CPU (the same float64 operations in the same order, no contraction: __dadd_rn,
 * __dmul_rn, __ddiv_rn; pow is CUDA's, correctly rounded to within 1 ulp of float64 as glibc's, so p other than 1
 * and 2 may differ from the CPU in the float64 sum's last bits, which the rounding to fp32 hides but at
 * rare ties: review 16). Not run in this session's
 * tests (no GPU): compiled only. */
#include "cuda_common.cuh"
#include "cuda_entries.h"

namespace {

constexpr int kThreads = 128;

struct Layout {
    int ndim;
    uint32_t mask;
    int64_t shape[FL_MAX_DIMS], stride[FL_MAX_DIMS];
    int64_t slice_len;   /* elements in one slice */
};

/* One element of an fp32, bf16 or fp16 array as a float, and a float stored as one (the CPU's ld and st) */
__device__ float ld(const void *p, int dt, int64_t i) {
    return dt == FL_F32 ? ((const float *)p)[i]
           : dt == FL_BF16 ? fl_bf16_bits_to_f32(((const uint16_t *)p)[i])
                           : fl_f16_bits_to_f32(((const uint16_t *)p)[i]);
}
__device__ void st(void *p, int dt, int64_t i, float v) {
    if (dt == FL_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dt == FL_BF16 ? fl_f32_to_bf16_bits(v) : fl_f32_to_f16_bits(v);
}

/* The offset (in elements, from x's first) and the row-major flat index of element j of slice o */
__device__ void element_of(const Layout &L, int64_t o, int64_t j, int64_t *off, int64_t *flat) {
    int64_t c[FL_MAX_DIMS];
    for (int d = L.ndim - 1; d >= 0; d--) {
        if ((L.mask >> d) & 1u) { c[d] = j % L.shape[d]; j /= L.shape[d]; }
        else { c[d] = o % L.shape[d]; o /= L.shape[d]; }
    }
    int64_t a = 0, f = 0;
    for (int d = 0; d < L.ndim; d++) { a += c[d] * L.stride[d]; f = f * L.shape[d] + c[d]; }
    *off = a;
    *flat = f;
}

__device__ double powp(double y, double p) {
    y = fabs(y);
    return p == 2.0 ? __dmul_rn(y, y) : p == 1.0 ? y : pow(y, p);
}
__device__ double rootp(double s, double p) {
    return p == 2.0 ? sqrt(s) : p == 1.0 ? s : pow(s, __ddiv_rn(1.0, p));
}

__device__ double scaled_sum(const void *x, int xt, const Layout &L, int64_t o, double c, double p) {
    double sum = 0.0;
    for (int64_t j = 0; j < L.slice_len; j++) {
        int64_t off, flat;
        element_of(L, o, j, &off, &flat);
        sum = __dadd_rn(sum, powp(__ddiv_rn((double)ld(x, xt, off), c), p));
    }
    return sum;
}

/* p < 1: the plain formula's backward reaches 1/p times x's gradient on the way, (1/p)·(r / |x|)^(1-p) for a unit
 * g, which passes FLT_MAX near it (the CPU's steep, cpu_norm_rescue.c) */
__device__ bool steep(float r, float amin, double p) {
    return p < 1.0 && r == r &&
           __dmul_rn(__ddiv_rn(1.0, p), pow(__ddiv_rn(fabs((double)r), (double)amin), 1.0 - p)) > 0x1p126;
}

__global__ void norm_rescue_kernel(void *dst, float *scale, const void *r, const void *s, const void *x, int rt,
                                   int st_, int xt, float tiny, Layout L, int64_t n, double p) {
    int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n) return;
    const float sv = ld(s, st_, o), rv = ld(r, rt, o);
    if (rt == FL_F32) ((uint32_t *)dst)[o] = ((const uint32_t *)r)[o];   /* r's bits, NaNs included */
    else ((uint16_t *)dst)[o] = ((const uint16_t *)r)[o];
    scale[o] = 0.0f;
    const bool in_range = sv >= tiny && sv < INFINITY;
    if (in_range && !steep(rv, 0x1p-149f, p)) return;   /* the common case */
    float m = 0.0f, mn = INFINITY;
    for (int64_t j = 0; j < L.slice_len; j++) {
        int64_t off, flat;
        element_of(L, o, j, &off, &flat);
        float a = fabsf(ld(x, xt, off));
        if (a > m || a != a) m = a;
        if (a > 0.0f && a < mn) mn = a;   /* the smallest nonzero |x| */
    }
    if (in_range && !steep(rv, mn, p)) return;   /* not steep at its own smallest |x| */
    if (!(m > 0.0f && m < INFINITY)) return;   /* 0 (a sum of 0 that is right), inf, NaN */
    int e;
    frexpf(m, &e);
    const float c = p <= 512.0 ? ldexpf(1.0f, e - 1) : m;
    scale[o] = c;
    st(dst, rt, o, (float)__dmul_rn(rootp(scaled_sum(x, xt, L, o, c, p), p), (double)c));
}

__global__ void fill_neg_zero_kernel(float *gx, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        gx[i] = -0.0f;
}

__global__ void norm_rescue_bwd_kernel(float *gr, float *gx, const float *g, const float *scale, const void *x,
                                       int xt, Layout L, int64_t n, double p) {
    int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n) return;
    const float c = scale[o];
    gr[o] = c == 0.0f ? g[o] : 0.0f;
    if (c == 0.0f) return;
    const double N = rootp(scaled_sum(x, xt, L, o, c, p), p);
    for (int64_t j = 0; j < L.slice_len; j++) {
        int64_t off, flat;
        element_of(L, o, j, &off, &flat);
        double y = __ddiv_rn((double)ld(x, xt, off), (double)c), d = 0.0;
        if (y != 0.0) d = p == 2.0 ? __ddiv_rn(y, N) : copysign(pow(__ddiv_rn(fabs(y), N), p - 1.0), y);
        gx[flat] = (float)__dmul_rn((double)g[o], d);
    }
}

fl_status layout_of(const fl_tensor *x, uint32_t mask, Layout *L) {
    if (x->ndim > FL_MAX_DIMS) return FL_ERR(FL_EINVAL, "norm_rescue on cuda: %d dims", x->ndim);
    L->ndim = x->ndim;
    L->mask = mask;
    L->slice_len = 1;
    for (int d = 0; d < x->ndim; d++) {
        L->shape[d] = x->shape[d];
        L->stride[d] = x->stride[d];
        if ((mask >> d) & 1u) L->slice_len *= x->shape[d];
    }
    return FL_OK;
}

bool half_or_f32(fl_dtype t) { return t == FL_F32 || t == FL_BF16 || t == FL_F16; }

}  // namespace

extern "C" fl_status fl_cuda_dev_norm_rescue(fl_tensor *dst, fl_tensor *scale, const fl_tensor *r, const fl_tensor *s,
                                             const fl_tensor *x, uint32_t mask, double p, int64_t *rescued) {
    Layout L;
    FL_TRY(layout_of(x, mask, &L));
    if (!half_or_f32(r->dtype) || !half_or_f32(s->dtype) || !half_or_f32(x->dtype) || dst->dtype != r->dtype)
        return FL_ERR(FL_EINVAL, "norm_rescue on cuda: dtypes %s, %s, %s", fl_format(r->dtype)->name,
                      fl_format(s->dtype)->name, fl_format(x->dtype)->name);
    const int64_t n = fl_tensor_numel(r);
    *rescued = -1;   /* on the device: not read back */
    if (n == 0) return FL_OK;
    const float tiny = (float)fl_format(s->dtype)->min_normal;
    cudaStream_t stream = fl_cuda_stream();
    norm_rescue_kernel<<<(unsigned)((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        fl_tensor_data(dst), (float *)fl_tensor_data(scale), fl_tensor_data(r), fl_tensor_data(s),
        fl_tensor_data(x), (int)r->dtype, (int)s->dtype, (int)x->dtype, tiny, L, n, p);
    FL_CUDA_CHECK(cudaGetLastError(), "norm_rescue_kernel launch");
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_norm_rescue_bwd(fl_tensor *gr, fl_tensor *gx, const fl_tensor *g,
                                                 const fl_tensor *scale, const fl_tensor *x, uint32_t mask, double p) {
    Layout L;
    FL_TRY(layout_of(x, mask, &L));
    if (!half_or_f32(x->dtype))
        return FL_ERR(FL_EINVAL, "norm_rescue_bwd on cuda: dtype %s", fl_format(x->dtype)->name);
    const int64_t n = fl_tensor_numel(g), nx = fl_tensor_numel(gx);
    cudaStream_t stream = fl_cuda_stream();
    if (nx > 0) {
        int64_t blocks = (nx + kThreads - 1) / kThreads;
        if (blocks > 4096) blocks = 4096;
        fill_neg_zero_kernel<<<(unsigned)blocks, kThreads, 0, stream>>>((float *)fl_tensor_data(gx), nx);
        FL_CUDA_CHECK(cudaGetLastError(), "fill_neg_zero_kernel launch");
    }
    if (n == 0) return FL_OK;
    norm_rescue_bwd_kernel<<<(unsigned)((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        (float *)fl_tensor_data(gr), (float *)fl_tensor_data(gx), (const float *)fl_tensor_data(g),
        (const float *)fl_tensor_data(scale), fl_tensor_data(x), (int)x->dtype, L, n, p);
    FL_CUDA_CHECK(cudaGetLastError(), "norm_rescue_bwd_kernel launch");
    return FL_OK;
}
