/* norm_rescue.cu — the p-norm's rescue where Σ|x|^p left fp32's range, as the "cuda" device entries norm_rescue and
 * norm_rescue_bwd (core/device.h); core/cpu/cpu_norm_rescue.c is the reference.
 * Maths: per slice o of x over the reduced dims (mask): where s[o] is in [2^-126, inf), dst[o] = r[o] and scale[o]
 * = 0; otherwise, where the slice's largest |x| is finite and not 0, scale[o] = 2^k (frexp's: 2^k <= max|x| <
 * 2^(k+1)) and dst[o] = (float)(2^k · (Σ|x / 2^k|^p)^(1/p)), the sum in float64 in the slice's element order (the
 * CPU's order: the same bits). Backward: gr[o] = g[o] where scale[o] is 0, else 0; gx = -0, and in a rescued
 * slice g[o]·sign(y)·(|y| / N)^(p-1), y = x / 2^k, N the slice's norm of y, in float64.
 * Layout: one thread per slice walks its elements through x's strides (any layout): the common case reads only
 * r and s (no host read: *rescued is -1, so the backward runs its kernels too); a rescued slice is walked
 * serially (rare: a sum out of fp32's range). gx's fill is a grid-stride pass.
 * Tolerance: bit-exact with the CPU for p 1 and 2 (the same float64 operations in the same order, no contraction:
 * __dadd_rn, __dmul_rn; sqrt correctly rounded on both); for other p within CUDA's pow (2 ulp of a float64) of
 * glibc's, which the rounding to fp32 hides but at rare ties (review 16). Not run in this session's tests (no GPU):
 * compiled only. */
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
__device__ double rootp(double s, double p) { return p == 2.0 ? sqrt(s) : p == 1.0 ? s : pow(s, 1.0 / p); }

__device__ double scaled_sum(const float *x, const Layout &L, int64_t o, double k, double p) {
    double sum = 0.0;
    for (int64_t j = 0; j < L.slice_len; j++) {
        int64_t off, flat;
        element_of(L, o, j, &off, &flat);
        sum = __dadd_rn(sum, powp(__ddiv_rn((double)x[off], k), p));
    }
    return sum;
}

__global__ void norm_rescue_kernel(float *dst, float *scale, const float *r, const float *s, const float *x,
                                   Layout L, int64_t n, double p) {
    int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n) return;
    const float sv = s[o];
    dst[o] = r[o];
    scale[o] = 0.0f;
    if (sv >= 0x1p-126f && sv < INFINITY) return;   /* the common case */
    float m = 0.0f;
    for (int64_t j = 0; j < L.slice_len; j++) {
        int64_t off, flat;
        element_of(L, o, j, &off, &flat);
        float a = fabsf(x[off]);
        if (a > m || a != a) m = a;
    }
    if (!(m > 0.0f && m < INFINITY)) return;   /* 0 (a sum of 0 that is right), inf, NaN */
    int e;
    frexpf(m, &e);
    const float k = ldexpf(1.0f, e - 1);
    scale[o] = k;
    dst[o] = (float)__dmul_rn(rootp(scaled_sum(x, L, o, k, p), p), (double)k);
}

__global__ void fill_neg_zero_kernel(float *gx, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        gx[i] = -0.0f;
}

__global__ void norm_rescue_bwd_kernel(float *gr, float *gx, const float *g, const float *scale, const float *x,
                                       Layout L, int64_t n, double p) {
    int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n) return;
    const float k = scale[o];
    gr[o] = k == 0.0f ? g[o] : 0.0f;
    if (k == 0.0f) return;
    const double N = rootp(scaled_sum(x, L, o, k, p), p);
    for (int64_t j = 0; j < L.slice_len; j++) {
        int64_t off, flat;
        element_of(L, o, j, &off, &flat);
        double y = __ddiv_rn((double)x[off], (double)k), d = 0.0;
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

}  // namespace

extern "C" fl_status fl_cuda_dev_norm_rescue(fl_tensor *dst, fl_tensor *scale, const fl_tensor *r, const fl_tensor *s,
                                             const fl_tensor *x, uint32_t mask, double p, int64_t *rescued) {
    Layout L;
    FL_TRY(layout_of(x, mask, &L));
    const int64_t n = fl_tensor_numel(r);
    *rescued = -1;   /* on the device: not read back */
    if (n == 0) return FL_OK;
    cudaStream_t stream = fl_cuda_stream();
    norm_rescue_kernel<<<(unsigned)((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        (float *)fl_tensor_data(dst), (float *)fl_tensor_data(scale), (const float *)fl_tensor_data(r),
        (const float *)fl_tensor_data(s), (const float *)fl_tensor_data(x), L, n, p);
    FL_CUDA_CHECK(cudaGetLastError(), "norm_rescue_kernel launch");
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_norm_rescue_bwd(fl_tensor *gr, fl_tensor *gx, const fl_tensor *g,
                                                 const fl_tensor *scale, const fl_tensor *x, uint32_t mask, double p) {
    Layout L;
    FL_TRY(layout_of(x, mask, &L));
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
        (const float *)fl_tensor_data(scale), (const float *)fl_tensor_data(x), L, n, p);
    FL_CUDA_CHECK(cudaGetLastError(), "norm_rescue_bwd_kernel launch");
    return FL_OK;
}
