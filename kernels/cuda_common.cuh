/* cuda_common.cuh — device helpers shared by the kernels/*.cu files (nvcc only): source-element
 * decode, FP8 format traits, the per-thread cast accumulators (amax + counters) with their warp and
 * block reductions, bit-exact fp32 -> bf16/fp16 rounding (the scale rule comes from core/scale_rule.h), and fp32 arithmetic that the compiler may not contract into FMAs (so
 * optimizer updates round exactly as core/optim.c does on the CPU). */
#ifndef FL_CUDA_COMMON_CUH
#define FL_CUDA_COMMON_CUH

#include "fl_cuda.h"
#include "fp8_cvt.h"
#include "scale_rule.h"
#include "half_cvt.h"
#include <cuda_fp16.h>
#include <float.h>
#include <math.h>

/* Separately rounded fp32 operations: on the device the _rn intrinsics are never fused into FMAs;
 * the host compiler (ISO C++, no -mfma) does not contract either. fl_ffma is a fused multiply-add
 * where the CPU kernel it mirrors calls fmaf. */
#if defined(__CUDA_ARCH__)
FL_HD float fl_fadd(float a, float b) { return __fadd_rn(a, b); }
FL_HD float fl_fsub(float a, float b) { return __fsub_rn(a, b); }
FL_HD float fl_fmul(float a, float b) { return __fmul_rn(a, b); }
FL_HD float fl_fdiv(float a, float b) { return __fdiv_rn(a, b); }
FL_HD float fl_fsqrt(float a) { return __fsqrt_rn(a); }
FL_HD float fl_ffma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
#else
FL_HD float fl_fadd(float a, float b) { return a + b; }
FL_HD float fl_fsub(float a, float b) { return a - b; }
FL_HD float fl_fmul(float a, float b) { return a * b; }
FL_HD float fl_fdiv(float a, float b) { return a / b; }
FL_HD float fl_fsqrt(float a) { return sqrtf(a); }
FL_HD float fl_ffma(float a, float b, float c) { return fmaf(a, b, c); }   /* one rounding, as the device's */
#endif

/* Separately rounded fp64 operations, for sums that must round as the CPU's double loops do. */
#if defined(__CUDA_ARCH__)
FL_HD double fl_dadd(double a, double b) { return __dadd_rn(a, b); }
FL_HD double fl_dsub(double a, double b) { return __dsub_rn(a, b); }
FL_HD double fl_dmul(double a, double b) { return __dmul_rn(a, b); }
FL_HD double fl_ddiv(double a, double b) { return __ddiv_rn(a, b); }
FL_HD double fl_dsqrt(double a) { return __dsqrt_rn(a); }
#else
FL_HD double fl_dadd(double a, double b) { return a + b; }
FL_HD double fl_dsub(double a, double b) { return a - b; }
FL_HD double fl_dmul(double a, double b) { return a * b; }
FL_HD double fl_ddiv(double a, double b) { return a / b; }
FL_HD double fl_dsqrt(double a) { return sqrt(a); }
#endif

/* The checks an entry makes on a tensor it is handed: present, a known dtype, on the device the entry
 * runs on (CUDA, or the host for the host runs of the device code), at most FL_MAX_DIMS dims, storage
 * behind a non-empty tensor. Messages say "<op> on cuda: <role> ...". */
static inline fl_status fl_cu_check_tensor(const fl_tensor *t, bool host, const char *op, const char *role) {
    if (!t) return FL_ERR(FL_EINVAL, "%s on cuda: the %s tensor is missing", op, role);
    if ((unsigned)t->dtype >= FL_DTYPE_COUNT) return FL_ERR(FL_EINVAL, "%s on cuda: %s has dtype %d", op, role, (int)t->dtype);
    const int want = host ? FL_DEV_CPU : FL_DEV_CUDA;
    if (t->device != want)
        return FL_ERR(FL_EINVAL, "%s on cuda: %s is a %s tensor, expected %s", op, role, fl_device_name(t->device),
                      host ? "cpu (host run)" : "cuda");
    if (t->ndim < 0 || t->ndim > FL_MAX_DIMS) return FL_ERR(FL_EINVAL, "%s on cuda: %s has %d dims", op, role, t->ndim);
    if (fl_tensor_numel(t) > 0 && (!t->storage || !t->storage->data))
        return FL_ERR(FL_EINVAL, "%s on cuda: %s has no storage", op, role);
    return FL_OK;
}

/* Scratch device memory from the device's caching allocator, given back on every path (error paths
 * included). Freeing while queued kernels still use it is safe: all work is ordered on the one stream,
 * so a block handed out again is only touched by later work. */
struct fl_cu_scratch {
    void *p = nullptr;
    fl_cu_scratch() = default;
    fl_cu_scratch(const fl_cu_scratch &) = delete;
    fl_cu_scratch &operator=(const fl_cu_scratch &) = delete;
    ~fl_cu_scratch() {
        if (p) fl_device_get(FL_DEV_CUDA)->free(p);
    }
    fl_status alloc(size_t bytes) {
        const fl_device *d = fl_device_get(FL_DEV_CUDA);
        if (!d) return FL_ERR(FL_EDEVICE, "cuda scratch: the cuda device is not available");
        return d->alloc(bytes ? bytes : 1, &p);
    }
};

/* e^x exactly as core/cpu/cpu_nn_internal.h's fl_nn_expf computes it (2^k·e^r, Cephes' degree-6
 * polynomial, 2^k from two exponent fields), every operation separately rounded as the CPU build does,
 * so softmax, GELU and attention give the CPU's bits for the same inputs. NaN propagates, −inf → 0,
 * overflow → inf. */
FL_HD float fl_cu_expf(float x) {
    float xc = x > 88.7228394f ? 88.7228394f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    xc = xc != xc ? 0.0f : xc;
    float k = fl_fsub(fl_fadd(fl_fmul(xc, 1.44269504088896341f), 12582912.0f), 12582912.0f);
    float r = fl_fsub(xc, fl_fmul(k, 0.693359375f));
    r = fl_fsub(r, fl_fmul(k, -2.12194440e-4f));
    float p = 1.9875691500e-4f;
    p = fl_fadd(fl_fmul(p, r), 1.3981999507e-3f);
    p = fl_fadd(fl_fmul(p, r), 8.3334519073e-3f);
    p = fl_fadd(fl_fmul(p, r), 4.1665795894e-2f);
    p = fl_fadd(fl_fmul(p, r), 1.6666665459e-1f);
    p = fl_fadd(fl_fmul(p, r), 5.0000001201e-1f);
    float y = fl_fadd(fl_fadd(fl_fmul(fl_fmul(p, r), r), r), 1.0f);
    int32_t ki = (int32_t)k, k1 = ki >> 1, k2 = ki - k1;
    y = fl_fmul(fl_fmul(y, fl_u2f((uint32_t)(k1 + 127) << 23)), fl_u2f((uint32_t)(k2 + 127) << 23));
    y = x < -104.0f ? 0.0f : y;
    y = x > 88.7228394f ? INFINITY : y;
    return x != x ? x : y;
}

/* core/cpu/cpu_vmath.h's functions, operation by operation (its fmaf calls fl_ffma, every other operation
 * separately rounded), so the sigmoid, tanh, SiLU and exact GELU give the CPU's bits (tests/c/test_gpu_nn.c and
 * test_gpu_ops.c compare them on the host; read the CPU file for the maths and the coefficients' origin). */
FL_HD float fl_cu_vm_exp_reduce(float a, float *k, int32_t *ki, float *r) {
    const float kk = fl_ffma(a, 1.44269504088896341f, 12582912.0f);
    *k = fl_fsub(kk, 12582912.0f);
    *ki = (int32_t)*k;
    float rr = fl_ffma(*k, -0.693359375f, a);
    rr = fl_ffma(*k, 2.12194440e-4f, rr);
    *r = rr;
    float p = 1.9875691500e-4f;
    p = fl_ffma(p, rr, 1.3981999507e-3f);
    p = fl_ffma(p, rr, 8.3334519073e-3f);
    p = fl_ffma(p, rr, 4.1665795894e-2f);
    p = fl_ffma(p, rr, 1.6666665459e-1f);
    return fl_ffma(p, rr, 5.0000001201e-1f);
}
FL_HD float fl_cu_vm_em1_reduced(float a, float *k, int32_t *ki) {
    float r;
    const float p = fl_cu_vm_exp_reduce(a, k, ki, &r);
    return fl_ffma(p, fl_fmul(r, r), r);
}
FL_HD float fl_cu_vm_pow2i(int32_t ki) { return fl_u2f((uint32_t)(ki + 127) << 23); }
FL_HD float fl_cu_vm_exp_neg(float a) {
    const float ac = a >= -104.0f ? a : -104.0f;
    float k;
    int32_t ki;
    const float y = fl_fadd(fl_cu_vm_em1_reduced(ac, &k, &ki), 1.0f);
    const int32_t k1 = ki >> 1, k2 = ki - k1;
    return a >= -104.0f ? fl_fmul(fl_fmul(y, fl_cu_vm_pow2i(k1)), fl_cu_vm_pow2i(k2)) : 0.0f;
}
FL_HD float fl_cu_vm_exp(float a) {
    float ac = a >= -104.0f ? a : -104.0f;
    ac = ac <= 89.0f ? ac : 89.0f;
    float k, r;
    int32_t ki;
    const float p = fl_cu_vm_exp_reduce(ac, &k, &ki, &r);
    const float y = fl_ffma(r, fl_ffma(p, r, 1.0f), 1.0f);
    const int32_t k1 = ki >> 1, k2 = ki - k1;
    const float e = fl_fmul(fl_fmul(y, fl_cu_vm_pow2i(k1)), fl_cu_vm_pow2i(k2));
    return a != a ? a : (a >= -104.0f ? e : 0.0f);
}
FL_HD float fl_cu_vm_log(float x) {
    const bool sub = x < 1.17549435e-38f;   /* 2^-126 */
    const uint32_t u = fl_f2u(sub ? fl_fmul(x, 8388608.0f) : x);
    const int32_t e = (int32_t)(u - 0x3F3504F3u) >> 23;
    const float f = fl_fsub(fl_u2f(u - ((uint32_t)e << 23)), 1.0f);
    const float ef = (float)(sub ? e - 23 : e);
    const float z = fl_fmul(f, f);
    float c = -7.6344296336e-02f;
    c = fl_ffma(c, f, 1.2761549652e-01f);
    c = fl_ffma(c, f, -1.3160194457e-01f);
    c = fl_ffma(c, f, 1.4201761782e-01f);
    c = fl_ffma(c, f, -1.6623356938e-01f);
    c = fl_ffma(c, f, 2.0001226664e-01f);
    c = fl_ffma(c, f, -2.5000822544e-01f);
    c = fl_ffma(c, f, 3.3333331347e-01f);
    float y = fl_ffma(fl_fmul(f, z), c, fl_fmul(ef, -2.12194440e-4f));
    y = fl_ffma(-0.5f, fl_ffma(f, f, -z), y);
    y = fl_ffma(-0.5f, z, y);
    float l = fl_ffma(ef, 0.693359375f, fl_fadd(f, y));
    l = x > 0.0f ? l : (x == 0.0f ? -INFINITY : NAN);
    l = x == INFINITY ? x : l;
    return x != x ? x : l;
}
FL_HD float fl_cu_vm_sigmoid(float x) {
    const float e = fl_cu_vm_exp_neg(-fabsf(x));
    const float y = fl_fdiv(x < 0.0f ? e : 1.0f, fl_fadd(1.0f, e));
    return x != x ? x : y;
}
FL_HD float fl_cu_vm_tanh(float x) {
    const float a = fabsf(x), a2 = fl_fmul(a, a);
    float p = 7.654416840523481e-4f;
    p = fl_ffma(p, a2, -2.7027507312595844e-3f);
    p = fl_ffma(p, a2, 5.204496439546347e-3f);
    p = fl_ffma(p, a2, -9.80947632342577e-3f);
    p = fl_ffma(p, a2, 2.214633673429489e-2f);
    p = fl_ffma(p, a2, -5.400605499744415e-2f);
    p = fl_ffma(p, a2, 1.333351880311966e-1f);
    p = fl_ffma(p, a2, -3.333333432674408e-1f);
    const float near_ = fl_ffma(fl_fmul(a, a2), p, a);
    const float e = fl_cu_vm_exp_neg(fl_fmul(-2.0f, a));
    const float far_ = fl_fsub(1.0f, fl_fdiv(fl_fadd(e, e), fl_fadd(1.0f, e)));
    const float t = a < 0.9f ? near_ : far_;
    return x != x ? x : copysignf(t, x);
}
FL_HD float fl_cu_vm_silu(float x) {
    const float e = fl_cu_vm_exp_neg(-fabsf(x));
    const float y = fl_fdiv(x < 0.0f ? fl_fmul(x, e) : x, fl_fadd(1.0f, e));
    return x != x ? x : y;
}
FL_HD float fl_cu_vm_silu_grad(float x) {
    const float e = fl_cu_vm_exp_neg(-fabsf(x));
    const float r = fl_fdiv(1.0f, fl_fadd(1.0f, e));
    const float sig = x < 0.0f ? fl_fmul(e, r) : r, one_minus = x < 0.0f ? r : fl_fmul(e, r);
    const float d = fl_fmul(sig, fl_ffma(x, one_minus, 1.0f));
    return x != x ? x : d;
}
FL_HD float fl_cu_vm_normal_cdf(float v, float *gauss) {
    const float a = fabsf(v), z = fl_fmul(a, 0.70710678118654752f);
    const float ac = a < 20.0f ? a : 20.0f;
    const float hi = fl_fmul(ac, ac), lo = fl_ffma(ac, ac, -hi);
    const float g = fl_fmul(fl_cu_vm_exp_neg(fl_fmul(-0.5f, hi)), fl_ffma(-0.5f, lo, 1.0f));
    const float z2 = fl_fmul(z, z);
    float p = 4.718052036650738e-3f;
    p = fl_ffma(p, z2, -2.675721342306259e-2f);
    p = fl_ffma(p, z2, 1.128282323440478e-1f);
    p = fl_ffma(p, z2, -3.761260859242733e-1f);
    p = fl_ffma(p, z2, 1.128379165568777f);
    const float erf_z = fl_fmul(z, p);
    const float t = fl_fdiv(1.0f, fl_ffma(0.5f, z, 1.0f));
    float r = -7.368668125673768e-2f;
    r = fl_ffma(r, t, 3.481846544011542e-1f);
    r = fl_ffma(r, t, -6.054186665711102e-1f);
    r = fl_ffma(r, t, 4.007090827197877e-1f);
    r = fl_ffma(r, t, -1.045433370200122e-1f);
    r = fl_ffma(r, t, 2.339821784922968e-1f);
    r = fl_ffma(r, t, 2.351928839033002e-1f);
    r = fl_ffma(r, t, 2.835839711995525e-1f);
    r = fl_ffma(r, t, 2.819854878313426e-1f);
    r = fl_ffma(r, t, 3.499567743910657e-6f);
    const float half_erfc = fl_fmul(fl_fmul(0.5f, g), r);
    const float near_ = v < 0.0f ? fl_ffma(-0.5f, erf_z, 0.5f) : fl_ffma(0.5f, erf_z, 0.5f);
    const float far_ = v < 0.0f ? half_erfc : fl_fsub(1.0f, half_erfc);
    *gauss = g;
    return z < 0.5f ? near_ : far_;
}

namespace {

template <int SRC> struct SrcT;            /* element type and its decode to fp32 */
template <> struct SrcT<FL_F32> {
    typedef float T;
    static FL_HD float f(T v) { return v; }
};
template <> struct SrcT<FL_BF16> {
    typedef uint16_t T;
    static FL_HD float f(T v) { return fl_bf16_bits_to_f32(v); }
};
template <> struct SrcT<FL_F16> {
    typedef uint16_t T;
    /* the host's conversion (half_cvt.h): __half2float would return the canonical NaN and lose the sign that
     * the CPU keeps (-NaN is 0xff in E4M3 on both devices) */
    static FL_HD float f(T v) { return fl_f16_bits_to_f32(v); }
};

template <int FMT> struct FmtT;
template <> struct FmtT<FL_E4M3> { enum { M = 3, B = 7 }; };
template <> struct FmtT<FL_E5M2> { enum { M = 2, B = 15 }; };

struct Acc {
    float amax;
    unsigned long long underflow, saturated, nan;
};

/* One element: cast, and fold its contribution into the thread's accumulators (core/format.c's
 * counters: underflow = x != 0 whose code is ±0; saturated = non-NaN x, ±inf included, whose x·s rounds past the
 * max code). */
template <int FMT, bool IEEE>
FL_HD uint8_t quant_one(float x, float scale, Acc &acc) {
    typedef FmtT<FMT> F;
    float ax = fabsf(x);
    acc.amax = fmaxf(acc.amax, ax);          /* fmaxf drops a NaN operand */
    bool over;
    /* A NaN passes through unscaled: the GPU's multiply returns the canonical NaN and would lose the sign
     * that the CPU's keeps (-NaN is 0xff in E4M3 on both devices). */
    uint8_t q = fl_cvt_fp8<F::M, F::B>(x != x ? x : fl_fmul(x, scale), IEEE, &over);
    if (x != x) acc.nan++;
    else {
        if (x != 0.0f && (q & 0x7f) == 0) acc.underflow++;
        if (over) acc.saturated++;
    }
    return q;
}

__device__ __forceinline__ Acc warp_reduce(Acc a) {
    for (int o = 16; o > 0; o >>= 1) {
        a.amax = fmaxf(a.amax, __shfl_xor_sync(0xffffffffu, a.amax, o));
        a.underflow += __shfl_xor_sync(0xffffffffu, a.underflow, o);
        a.saturated += __shfl_xor_sync(0xffffffffu, a.saturated, o);
        a.nan += __shfl_xor_sync(0xffffffffu, a.nan, o);
    }
    return a;
}

/* Block-wide reduction of the accumulators (blockDim.x a multiple of 32); the result is valid in
 * thread 0. Every thread of the block must call it. */
__device__ Acc block_reduce(Acc a) {
    __shared__ Acc sh[32];
    a = warp_reduce(a);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = a;
    __syncthreads();
    if (warp == 0) {
        a = lane < (int)(blockDim.x >> 5) ? sh[lane] : Acc{0.0f, 0, 0, 0};
        a = warp_reduce(a);
    }
    __syncthreads();   /* sh is reused by the next call */
    return a;
}

/* One atomic per block and counter; amax as integer max on the float bits (both non-negative). */
__device__ __forceinline__ void flush(const Acc &a, fl_cuda_qstats *st) {
    if (!st) return;
    if (a.amax > 0.0f) atomicMax(&st->amax_bits, __float_as_uint(a.amax));
    if (a.underflow) atomicAdd(&st->underflow, a.underflow);
    if (a.saturated) atomicAdd(&st->saturated, a.saturated);
    if (a.nan) atomicAdd(&st->nan, a.nan);
}

/* Block-wide max of non-negative floats (NaN operands dropped); valid in every thread. */
__device__ float block_max_all(float v) {
    __shared__ float sh[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

inline cudaStream_t pick_stream(fl_cuda_stream_t s) { return s ? (cudaStream_t)s : fl_cuda_stream(); }

/* Grid for a grid-stride loop over `work` items of `threads` each: enough blocks to fill the GPU a
 * few times over, never more than the work needs. */
inline unsigned grid_for_work(size_t work, int threads, int per_sm) {
    size_t cap = (size_t)fl_cuda_sm_count() * (size_t)per_sm, g = (work + (size_t)threads - 1) / (size_t)threads;
    if (g > cap) g = cap;
    return g ? (unsigned)g : 1u;
}

inline bool is_fp8_dtype(fl_dtype t) { return t == FL_E4M3 || t == FL_E5M2; }

}  // namespace

#endif
