/* activation.cu — ReLU, SiLU and GELU (erf and tanh forms) forward and backward, inverted dropout with the
 * CPU's Philox mask, and the linear layer's bias add, as the "cuda" device entries (core/device.h);
 * core/cpu/cpu_nn_act.c is the reference, mirrored operation by operation.
 * Maths: relu y = max(x, 0), dx = dy·[x > 0] (subgradient 0 at 0; a NaN x passes dy).
 * GELU erf: y = x·Φ(x), dx = dy(Φ(x) + x·φ(x)), Φ and φ as cpu_vmath.h computes them. SiLU: y = x·σ(x),
 * dx = dy·σ(x)(1 + x(1 − σ(x))). Sigmoid and tanh (the unary ops' backward from the output y): dy·((1 − y)·y),
 * dy·(1 − y·y).
 * GELU tanh through one exponential: u = √(2/π)(x + 0.044715x³), e = e^(−2|u|),
 * y = x·σ(2u) with σ(2u) = 1/(1+e) (u ≥ 0) or e/(1+e) (u < 0), dx = dy(σ + 2x·e/(1+e)²·√(2/π)(1 + 3·0.044715x²)),
 * with the CPU's exponential for a ≤ 0 and its fused multiply-adds (cpu_nn_act.c) ported bit for bit. Dropout: element i keeps iff
 * (word i%4 of Philox4x32-10(key seed, counter offset + i/4)) >> 8 ≥ ⌊p·2^24⌋, kept values scaled by
 * 1/(1−p); p ≤ 0 (or NaN) is the identity, p ≥ 1 drops everything. Bias: y[r, :] += b.
 * Layouts: contiguous fp32 (mask: n bytes); grid-stride loops with 64-bit indices, one thread per element
 * (per Philox block of 4 elements for dropout); bias add on a 2-D grid of columns × rows.
 * Tolerance: every operation is separately rounded (the _rn intrinsics: no FMA contraction) or fused where
 * the CPU calls fmaf (fl_ffma), so all results
 * are bit-exact with the CPU (tests/c/test_gpu_nn.c; before 2026-12-06 GELU's erf form called CUDA's erff, within
 * 2 ulp of glibc's). The element functions are __host__ __device__;
 * the fl_cuda_nn_*_host functions at the end run them on the host for tests without a GPU. */
#include "cuda_common.cuh"
#include "philox.h"
#include "fl_cuda_host.h"
#include "cuda_entries.h"

namespace {

constexpr int kThreads = 256;

constexpr float kRsqrt2Pi = 0.39894228040143268f;   /* 1/√(2π) */
constexpr float kGeluK = 0.79788456080286536f;      /* √(2/π) */
constexpr float kGeluC = 0.044715f;


FL_HD float relu_fwd(float x) { return !(x <= 0.0f) ? x : 0.0f; }   /* a NaN stays NaN, as torch's */
/* x: ReLU's output (core/nn.c saves it) or its input, the same test on either; a NaN passes dy, as torch's */
FL_HD float relu_bwd(float x, float dy) { return !(x <= 0.0f) ? dy : 0.0f; }

/* v·Φ(v) (cuda_common.cuh's port of cpu_vmath.h's Φ) */
FL_HD float gelu_fwd(float v) {
    float g;
    return fl_fmul(v, fl_cu_vm_normal_cdf(v, &g));
}
/* dy·fma(v, g/√(2π), Φ), g = e^(−v²/2) */
FL_HD float gelu_bwd(float v, float dy) {
    float g;
    const float cdf = fl_cu_vm_normal_cdf(v, &g);
    return fl_fmul(dy, fl_ffma(v, fl_fmul(kRsqrt2Pi, g), cdf));
}
/* SiLU v·σ(v) and dy·σ(v)(1 + v(1 − σ(v))) */
FL_HD float silu_fwd(float v) { return fl_cu_vm_silu(v); }
FL_HD float silu_bwd(float v, float dy) { return fl_fmul(dy, fl_cu_vm_silu_grad(v)); }
/* sigmoid and tanh, and their backward from the output y: dy·((1 − y)·y), dy·(1 − y·y) */
FL_HD float sigmoid_bwd(float y, float dy) { return fl_fmul(dy, fl_fmul(fl_fsub(1.0f, y), y)); }
FL_HD float tanh_bwd(float y, float dy) { return fl_fmul(dy, fl_fsub(1.0f, fl_fmul(y, y))); }

/* e^a for a ≤ 0 as cpu_nn_act.c's gelu_exp_neg: flushed to 0 below −87, fused multiply-adds where it
 * calls fmaf, one exponent field for 2^k. */
FL_HD float gelu_exp_neg(float a) {
    float xc = a >= -87.0f ? a : -87.0f;
    float k = fl_fsub(fl_ffma(xc, 1.44269504088896341f, 12582912.0f), 12582912.0f);
    float r = fl_ffma(k, -0.693359375f, xc);
    r = fl_ffma(k, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fl_ffma(p, r, 1.3981999507e-3f);
    p = fl_ffma(p, r, 8.3334519073e-3f);
    p = fl_ffma(p, r, 4.1665795894e-2f);
    p = fl_ffma(p, r, 1.6666665459e-1f);
    p = fl_ffma(p, r, 5.0000001201e-1f);
    float y = fl_fadd(fl_ffma(p, fl_fmul(r, r), r), 1.0f);
    return a >= -87.0f ? fl_fmul(y, fl_u2f((uint32_t)((int32_t)k + 127) << 23)) : 0.0f;
}

/* u = K·fma(C·v, v·v, v) */
FL_HD float gelu_tanh_u(float v) { return fl_fmul(kGeluK, fl_ffma(fl_fmul(kGeluC, v), fl_fmul(v, v), v)); }

/* (v·(u < 0 ? e : 1)) / (1 + e) */
FL_HD float gelu_tanh_fwd(float v) {
    float u = gelu_tanh_u(v);
    float e = gelu_exp_neg(fl_fmul(-2.0f, u < 0.0f ? -u : u));
    return fl_fdiv(fl_fmul(v, u < 0.0f ? e : 1.0f), fl_fadd(1.0f, e));
}
/* dy·fma((((2K·v)·e)·r)·r, fma(3C, v·v, 1), sig), r = 1/(1+e), sig = (u < 0 ? e : 1)·r */
FL_HD float gelu_tanh_bwd(float v, float dy) {
    float u = gelu_tanh_u(v);
    float e = gelu_exp_neg(fl_fmul(-2.0f, u < 0.0f ? -u : u));
    float r = fl_fdiv(1.0f, fl_fadd(1.0f, e));
    float sig = fl_fmul(u < 0.0f ? e : 1.0f, r);
    float t = fl_fmul(fl_fmul(fl_fmul(fl_fmul(2.0f * kGeluK, v), e), r), r);
    return fl_fmul(dy, fl_ffma(t, fl_ffma(3.0f * kGeluC, fl_fmul(v, v), 1.0f), sig));
}

FL_HD float act_fwd_elem(int kind, float x) {
    return kind == FL_ACT_RELU ? relu_fwd(x) : kind == FL_ACT_GELU ? gelu_fwd(x) : kind == FL_ACT_SILU ? silu_fwd(x)
           : kind == FL_ACT_SIGMOID ? fl_cu_vm_sigmoid(x) : kind == FL_ACT_TANH ? fl_cu_vm_tanh(x) : gelu_tanh_fwd(x);
}
FL_HD float act_bwd_elem(int kind, float x, float dy) {
    return kind == FL_ACT_RELU ? relu_bwd(x, dy) : kind == FL_ACT_GELU ? gelu_bwd(x, dy)
           : kind == FL_ACT_SILU ? silu_bwd(x, dy) : kind == FL_ACT_SIGMOID ? sigmoid_bwd(x, dy)
           : kind == FL_ACT_TANH ? tanh_bwd(x, dy) : gelu_tanh_bwd(x, dy);
}

/* What fl_cpu_dropout_fwd/_bwd derive from p on the host: mode 0 identity (p ≤ 0 or NaN), 1 all
 * dropped (p ≥ 1), 2 random; thr = ⌊p·2^24⌋; scale = 1/(1−p) (forward), and the backward's scale. */
struct DropoutParams {
    int mode;
    uint32_t thr;
    float scale;
};
DropoutParams dropout_params(float p) {
    DropoutParams d = { 2, 0, 1.0f };
    if (!(p > 0.0f)) d.mode = 0;
    else if (p >= 1.0f) d.mode = 1;
    else {
        d.thr = (uint32_t)((double)p * 16777216.0);
        d.scale = 1.0f / (1.0f - p);
    }
    return d;
}
float dropout_bwd_scale(float p) { return p > 0.0f && p < 1.0f ? 1.0f / (1.0f - p) : (p >= 1.0f ? 0.0f : 1.0f); }

/* Philox block b: elements 4b .. 4b+3 (those < n). */
FL_HD void dropout_block(const float *x, float *y, uint8_t *mask, int64_t n, int64_t b, const DropoutParams &d,
                         uint64_t seed, uint64_t offset) {
    const int64_t i0 = b * 4;
    if (d.mode != 2) {
        for (int64_t j = 0; j < 4 && i0 + j < n; j++) {
            y[i0 + j] = d.mode == 0 ? x[i0 + j] : fl_fmul(x[i0 + j], 0.0f);   /* x·0, as the CPU's */
            mask[i0 + j] = d.mode == 0 ? 1 : 0;
        }
        return;
    }
    uint32_t w[4];
    fl_philox4x32_10(seed, offset + (uint64_t)b, w);
    for (int64_t j = 0; j < 4 && i0 + j < n; j++) {
        uint8_t keep = (w[j] >> 8) >= d.thr;
        mask[i0 + j] = keep;
        y[i0 + j] = fl_fmul(x[i0 + j], keep ? d.scale : 0.0f);
    }
}

/* dy·0 where dropped (a NaN or inf gradient stays NaN, a negative one gives -0), as torch's dy·mask·scale */
FL_HD float dropout_bwd_elem(uint8_t m, float dy, float scale) { return fl_fmul(dy, m ? scale : 0.0f); }

/* ---- kernels ------------------------------------------------------------------------------------- */

template <int KIND>
__global__ void __launch_bounds__(kThreads) act_fwd_kernel(const float *x, float *y, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = act_fwd_elem(KIND, x[i]);
}

template <int KIND>
__global__ void __launch_bounds__(kThreads) act_bwd_kernel(const float *x, const float *dy, float *dx, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dx[i] = act_bwd_elem(KIND, x[i], dy[i]);
}

__global__ void __launch_bounds__(kThreads) dropout_fwd_kernel(const float *x, float *y, uint8_t *mask, int64_t n,
                                                               DropoutParams d, uint64_t seed, uint64_t offset) {
    const int64_t blocks = (n + 3) / 4;
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < blocks; b += (int64_t)gridDim.x * blockDim.x)
        dropout_block(x, y, mask, n, b, d, seed, offset);
}

__global__ void __launch_bounds__(kThreads) dropout_bwd_kernel(const uint8_t *mask, const float *dy, float *dx,
                                                               int64_t n, float scale) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dx[i] = dropout_bwd_elem(mask[i], dy[i], scale);
}

/* Block (tx, ty): tx threads along the columns, ty rows; both grid dimensions stride. */
__global__ void __launch_bounds__(kThreads) bias_add_kernel(float *y, const float *b, int64_t rows, int64_t cols) {
    const int64_t c0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, cs = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += (int64_t)gridDim.y * blockDim.y) {
        float *yr = y + r * cols;
        for (int64_t c = c0; c < cols; c += cs) yr[c] = fl_fadd(yr[c], b[c]);
    }
}

fl_status check_kind(const char *fn, fl_act kind) {
    if ((int)kind < 0 || (int)kind >= FL_ACT_COUNT)
        return FL_ERR(FL_EINVAL, "%s on cuda: unknown activation kind %d", fn, (int)kind);
    return FL_OK;
}

fl_status check_n(const char *fn, int64_t n) {
    if (n < 0) return FL_ERR(FL_EINVAL, "%s on cuda: negative element count %lld", fn, (long long)n);
    return FL_OK;
}

fl_status check_ptrs(const char *fn, int64_t n, const void *a, const void *b, const void *c) {
    if (n > 0 && (!a || !b || !c)) return FL_ERR(FL_EINVAL, "%s on cuda: a NULL buffer", fn);
    return FL_OK;
}

unsigned grid_1d(int64_t work) { return grid_for_work((size_t)work, kThreads, 8); }

}  // namespace

/* ---- entries ----------------------------------------------------------------------------------------- */

extern "C" fl_status fl_cuda_dev_act_fwd(fl_act kind, const float *x, float *y, int64_t n) {
    FL_TRY(check_kind("act_fwd", kind));
    FL_TRY(check_n("act_fwd", n));
    FL_TRY(check_ptrs("act_fwd", n, x, y, y));
    if (n == 0) return FL_OK;
    cudaStream_t st = fl_cuda_stream();
    unsigned g = grid_1d(n);
    if (kind == FL_ACT_RELU) act_fwd_kernel<FL_ACT_RELU><<<g, kThreads, 0, st>>>(x, y, n);
    else if (kind == FL_ACT_GELU) act_fwd_kernel<FL_ACT_GELU><<<g, kThreads, 0, st>>>(x, y, n);
    else if (kind == FL_ACT_SILU) act_fwd_kernel<FL_ACT_SILU><<<g, kThreads, 0, st>>>(x, y, n);
    else if (kind == FL_ACT_SIGMOID) act_fwd_kernel<FL_ACT_SIGMOID><<<g, kThreads, 0, st>>>(x, y, n);
    else if (kind == FL_ACT_TANH) act_fwd_kernel<FL_ACT_TANH><<<g, kThreads, 0, st>>>(x, y, n);
    else act_fwd_kernel<FL_ACT_GELU_TANH><<<g, kThreads, 0, st>>>(x, y, n);
    FL_CUDA_CHECK(cudaGetLastError(), "act_fwd_kernel launch");
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_act_bwd(fl_act kind, const float *x, const float *dy, float *dx, int64_t n) {
    FL_TRY(check_kind("act_bwd", kind));
    FL_TRY(check_n("act_bwd", n));
    FL_TRY(check_ptrs("act_bwd", n, x, dy, dx));
    if (n == 0) return FL_OK;
    cudaStream_t st = fl_cuda_stream();
    unsigned g = grid_1d(n);
    if (kind == FL_ACT_RELU) act_bwd_kernel<FL_ACT_RELU><<<g, kThreads, 0, st>>>(x, dy, dx, n);
    else if (kind == FL_ACT_GELU) act_bwd_kernel<FL_ACT_GELU><<<g, kThreads, 0, st>>>(x, dy, dx, n);
    else if (kind == FL_ACT_SILU) act_bwd_kernel<FL_ACT_SILU><<<g, kThreads, 0, st>>>(x, dy, dx, n);
    else if (kind == FL_ACT_SIGMOID) act_bwd_kernel<FL_ACT_SIGMOID><<<g, kThreads, 0, st>>>(x, dy, dx, n);
    else if (kind == FL_ACT_TANH) act_bwd_kernel<FL_ACT_TANH><<<g, kThreads, 0, st>>>(x, dy, dx, n);
    else act_bwd_kernel<FL_ACT_GELU_TANH><<<g, kThreads, 0, st>>>(x, dy, dx, n);
    FL_CUDA_CHECK(cudaGetLastError(), "act_bwd_kernel launch");
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_dropout_fwd(const float *x, float *y, uint8_t *mask, int64_t n, float p,
                                             uint64_t seed, uint64_t offset) {
    FL_TRY(check_n("dropout_fwd", n));
    FL_TRY(check_ptrs("dropout_fwd", n, x, y, mask));
    if (n == 0) return FL_OK;
    DropoutParams d = dropout_params(p);
    dropout_fwd_kernel<<<grid_1d((n + 3) / 4), kThreads, 0, fl_cuda_stream()>>>(x, y, mask, n, d, seed, offset);
    FL_CUDA_CHECK(cudaGetLastError(), "dropout_fwd_kernel launch");
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_dropout_bwd(const uint8_t *mask, const float *dy, float *dx, int64_t n, float p) {
    FL_TRY(check_n("dropout_bwd", n));
    FL_TRY(check_ptrs("dropout_bwd", n, mask, dy, dx));
    if (n == 0) return FL_OK;
    dropout_bwd_kernel<<<grid_1d(n), kThreads, 0, fl_cuda_stream()>>>(mask, dy, dx, n, dropout_bwd_scale(p));
    FL_CUDA_CHECK(cudaGetLastError(), "dropout_bwd_kernel launch");
    return FL_OK;
}

extern "C" fl_status fl_cuda_dev_bias_add(float *y, const float *b, int64_t rows, int64_t cols) {
    if (rows < 0 || cols < 0)
        return FL_ERR(FL_EINVAL, "bias_add on cuda: negative shape [%lld, %lld]", (long long)rows, (long long)cols);
    if (rows == 0 || cols == 0) return FL_OK;
    FL_TRY(check_ptrs("bias_add", rows * cols, y, b, b));
    /* Narrow rows get narrow blocks: tx = cols rounded up to a warp (≤ 256), ty = 256/tx rows. */
    int64_t tx64 = cols >= kThreads ? kThreads : (cols + 31) / 32 * 32;
    unsigned tx = (unsigned)tx64, ty = kThreads / tx;
    int64_t gx = (cols + tx - 1) / tx, gy = (rows + ty - 1) / ty;
    dim3 grid((unsigned)(gx < 65535 ? gx : 65535), (unsigned)(gy < 65535 ? gy : 65535));
    bias_add_kernel<<<grid, dim3(tx, ty), 0, fl_cuda_stream()>>>(y, b, rows, cols);
    FL_CUDA_CHECK(cudaGetLastError(), "bias_add_kernel launch");
    return FL_OK;
}

/* ---- the same element code on the host (tests/c/test_gpu_nn.c) ------------------------------------- */

extern "C" void fl_cuda_nn_philox_host(uint64_t key, uint64_t counter, uint32_t out[4]) {
    fl_philox4x32_10(key, counter, out);
}

extern "C" float fl_cuda_expf_host(float x) { return fl_cu_expf(x); }

extern "C" fl_status fl_cuda_nn_act_fwd_host(fl_act kind, const float *x, float *y, int64_t n) {
    FL_TRY(check_kind("act_fwd", kind));
    for (int64_t i = 0; i < n; i++) y[i] = act_fwd_elem(kind, x[i]);
    return FL_OK;
}

extern "C" fl_status fl_cuda_nn_act_bwd_host(fl_act kind, const float *x, const float *dy, float *dx, int64_t n) {
    FL_TRY(check_kind("act_bwd", kind));
    for (int64_t i = 0; i < n; i++) dx[i] = act_bwd_elem(kind, x[i], dy[i]);
    return FL_OK;
}

extern "C" void fl_cuda_nn_dropout_fwd_host(const float *x, float *y, uint8_t *mask, int64_t n, float p, uint64_t seed,
                                            uint64_t offset) {
    DropoutParams d = dropout_params(p);
    for (int64_t b = 0; b < (n + 3) / 4; b++) dropout_block(x, y, mask, n, b, d, seed, offset);
}

extern "C" void fl_cuda_nn_dropout_bwd_host(const uint8_t *mask, const float *dy, float *dx, int64_t n, float p) {
    float s = dropout_bwd_scale(p);
    for (int64_t i = 0; i < n; i++) dx[i] = dropout_bwd_elem(mask[i], dy[i], s);
}
