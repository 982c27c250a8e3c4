/* rows.cuh — row kernels' shared machinery (nvcc only; kernels/softmax.cu, layernorm.cu): a row is
 * handled by one warp (W = 32, kWarpRowsBlock/32 rows per block, up to kWarpMaxCols columns) or by one
 * block (W = kRowBlock); reductions over the group are deterministic — a commutative xor butterfly in
 * each warp, then the warps' values in warp order — and identical in every thread of the group. */
#ifndef FL_ROWS_CUH
#define FL_ROWS_CUH

#include "cuda_common.cuh"

namespace {

constexpr int kWarpRowsBlock = 256;   /* warp-per-row kernels: 8 rows per block */
constexpr int kRowBlock = 512;        /* block-per-row kernels */
constexpr int kWarpMaxCols = 1024;    /* above this a row gets a whole block */

template <int W> struct Rows {
    static constexpr int kBlock = W == 32 ? kWarpRowsBlock : W;
    static constexpr int kPerBlock = kBlock / W;
    static __device__ __forceinline__ int lane() { return W == 32 ? (int)(threadIdx.x & 31) : (int)threadIdx.x; }
    static __device__ __forceinline__ int64_t first() { return (int64_t)blockIdx.x * kPerBlock + threadIdx.x / W; }
    static __device__ __forceinline__ int64_t step() { return (int64_t)gridDim.x * kPerBlock; }
};

struct AddF { __device__ float operator()(float a, float b) const { return fl_fadd(a, b); } };
struct AddD { __device__ double operator()(double a, double b) const { return fl_dadd(a, b); } };
/* Symmetric in its operands (a +0/−0 tie gives +0 whichever comes first), so every lane of a butterfly
 * ends with the same value. Operands are never NaN (per-thread maxima start at −inf and skip NaN). */
struct MaxF {
    __device__ float operator()(float a, float b) const {
        return a > b ? a : b > a ? b : (signbit(a) ? b : a);
    }
};

/* The group's reduction of v, identical in every thread of the group (the op is commutative, so both
 * lanes of each butterfly pair compute the same value; the warps' values are then combined in warp order
 * by every thread). Block mode: every thread of the block must call it. */
template <int W, typename T, typename Op>
__device__ __forceinline__ T group_reduce(T v, Op op) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if constexpr (W > 32) {
        __shared__ T sh[W / 32];
        __syncthreads();                     /* the previous call's readers are done */
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
        __syncthreads();
        v = sh[0];
#pragma unroll
        for (int k = 1; k < W / 32; k++) v = op(v, sh[k]);
    }
    return v;
}

/* Blocks for `rows` row groups of width W: enough to cover them, at most 32 per SM (grid-stride beyond). */
template <int W>
unsigned rows_grid(int64_t rows) {
    int64_t g = (rows + Rows<W>::kPerBlock - 1) / Rows<W>::kPerBlock, cap = (int64_t)fl_cuda_sm_count() * 32;
    if (g > cap) g = cap;
    return g > 0 ? (unsigned)g : 1u;
}

}  // namespace

#endif
