/* embedding.cu — embedding lookup (forward) and its weight gradient (backward), as the "cuda" device
 * entries (core/device.h); core/cpu/cpu_nn_norm.c is the reference.
 * Maths: y[i, :] = weight[idx[i], :], idx[i] a float holding an integer in [0, vocab) (otherwise FL_EINVAL
 * naming the first bad position, with the CPU's message); backward dweight[v, :] += Σ_{i: idx[i] = v} dy[i, :]
 * added one position at a time in increasing i, starting from dweight's value: exactly the CPU's order.
 * Forward: one pass that copies the rows of valid indices and takes the minimum bad position (atomicMin:
 * order-free), read back to the host (the entry synchronizes). Blocks of 32..128 column threads × rows of
 * positions; float4 copies when dim % 4 == 0 and the pointers allow.
 * Backward: (index, position) pairs sorted by index with CUB's stable LSD radix sort (equal indices keep
 * increasing positions; invalid indices get the key vocab and sort past every run, skipped); then one
 * group of column threads per run head (a sorted slot whose key differs from the previous one) walks its
 * run in position order: acc = dweight[v][j]; acc += dy[pos][j] ...; dweight[v][j] = acc. Every element
 * of dweight has one writer and a fixed order of additions: bit-exact with the CPU, run to run.
 * Tolerance: bit-exact (tests/c/test_gpu_nn.c). */
#include "cuda_common.cuh"
#include "cuda_entries.h"
#include <cub/device/device_radix_sort.cuh>

namespace {

constexpr int kThreads = 128;

/* fl_cpu_embedding_fwd's test of one index */
FL_HD bool index_ok(float f, int64_t vocab) {
    double t = f;
    return t >= 0.0 && t < (double)vocab && t == floor(t);
}

/* Block (tx, ty): tx threads along the row (in units of T: float or float4), ty positions. */
template <typename T>
__global__ void __launch_bounds__(kThreads) embedding_fwd_kernel(const float *idx, int64_t n, const T *weight,
                                                                 int64_t vocab, int64_t dimT, T *y,
                                                                 unsigned long long *bad) {
    const int64_t j0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, js = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; i < n; i += (int64_t)gridDim.y * blockDim.y) {
        const float f = idx[i];
        if (!index_ok(f, vocab)) {
            if (blockIdx.x == 0 && threadIdx.x == 0) atomicMin(bad, (unsigned long long)i);
            continue;
        }
        const T *src = weight + (int64_t)f * dimT;
        T *dst = y + i * dimT;
        for (int64_t j = j0; j < dimT; j += js) dst[j] = src[j];
    }
}

__global__ void __launch_bounds__(256) embedding_keys_kernel(const float *idx, int64_t n, int64_t vocab,
                                                             uint32_t *keys, uint32_t *pos) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float f = idx[i];
        keys[i] = index_ok(f, vocab) ? (uint32_t)(int64_t)f : (uint32_t)vocab;
        pos[i] = (uint32_t)i;
    }
}

/* Slot s of the sorted pairs starts a run when s == 0 or its key differs from slot s − 1. */
__global__ void __launch_bounds__(kThreads) embedding_bwd_runs_kernel(const uint32_t *keys, const uint32_t *pos,
                                                                      int64_t n, const float *dy, int64_t vocab,
                                                                      int64_t dim, float *dweight) {
    const int64_t j0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, js = (int64_t)gridDim.x * blockDim.x;
    for (int64_t s = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; s < n; s += (int64_t)gridDim.y * blockDim.y) {
        const uint32_t v = keys[s];
        if ((int64_t)v >= vocab || (s > 0 && keys[s - 1] == v)) continue;
        float *dst = dweight + (int64_t)v * dim;
        for (int64_t j = j0; j < dim; j += js) {
            float acc = dst[j];
            for (int64_t t = s; t < n && keys[t] == v; t++) acc = fl_fadd(acc, dy[(int64_t)pos[t] * dim + j]);
            dst[j] = acc;
        }
    }
}

/* Threads along a row of `width` elements: a warp multiple up to kThreads; the rest of the block takes
 * more rows. Grid dimensions capped at 65535; the kernels stride. */
void row_launch_shape(int64_t width, int64_t rows, dim3 *grid, dim3 *block) {
    int64_t tx = width >= kThreads ? kThreads : (width + 31) / 32 * 32;
    if (tx < 32) tx = 32;
    int64_t ty = kThreads / tx, gx = (width + tx - 1) / tx, gy = (rows + ty - 1) / ty;
    *block = dim3((unsigned)tx, (unsigned)ty);
    *grid = dim3((unsigned)(gx < 1 ? 1 : gx < 65535 ? gx : 65535), (unsigned)(gy < 1 ? 1 : gy < 65535 ? gy : 65535));
}


bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

size_t round256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

extern "C" fl_status fl_cuda_dev_embedding_fwd(const float *idx, int64_t n, const float *weight, int64_t vocab,
                                               int64_t dim, float *y) {
    if (n < 0 || vocab < 0 || dim < 0)
        return FL_ERR(FL_EINVAL, "embedding_fwd on cuda: negative size (n %lld, vocab %lld, dim %lld)", (long long)n,
                      (long long)vocab, (long long)dim);
    if (n == 0) return FL_OK;
    if (!idx || (dim > 0 && (!y || (vocab > 0 && !weight))))
        return FL_ERR(FL_EINVAL, "embedding_fwd on cuda: a NULL buffer");
    cudaStream_t st = fl_cuda_stream();
    fl_cu_scratch s;
    FL_TRY(s.alloc(sizeof(unsigned long long)));
    unsigned long long *bad = (unsigned long long *)s.p;
    FL_CUDA_CHECK(cudaMemsetAsync(bad, 0xff, sizeof *bad, st), "cudaMemsetAsync");
    dim3 grid, block;
    /* dim == 0 still runs: the indices are checked whatever the row width, as on the CPU */
    if (dim % 4 == 0 && aligned16(weight) && aligned16(y)) {
        row_launch_shape(dim / 4, n, &grid, &block);
        embedding_fwd_kernel<float4><<<grid, block, 0, st>>>(idx, n, (const float4 *)weight, vocab, dim / 4,
                                                              (float4 *)y, bad);
    } else {
        row_launch_shape(dim, n, &grid, &block);
        embedding_fwd_kernel<float><<<grid, block, 0, st>>>(idx, n, weight, vocab, dim, y, bad);
    }
    FL_CUDA_CHECK(cudaGetLastError(), "embedding_fwd_kernel launch");
    unsigned long long h;
    FL_CUDA_CHECK(cudaMemcpyAsync(&h, bad, sizeof h, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
    FL_CUDA_CHECK(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    if (h != ~0ull) {
        float f;
        FL_CUDA_CHECK(cudaMemcpyAsync(&f, idx + h, sizeof f, cudaMemcpyDeviceToHost, st), "cudaMemcpyAsync");
        FL_CUDA_CHECK(cudaStreamSynchronize(st), "cudaStreamSynchronize");
        if (f >= 0.0f && (double)f < (double)vocab && f != floorf(f))   /* the CPU's message */
            return FL_ERR(FL_EINVAL, "embedding: index %g at position %lld is not a whole number (token ids are "
                          "integers)", (double)f, (long long)h);
        return FL_ERR(FL_EINVAL, "embedding: index %g at position %lld is out of range [0, %lld) (vocab size %lld)",
                      (double)f, (long long)h, (long long)vocab, (long long)vocab);
    }
    return FL_OK;
}

/* Indices are not re-validated (the forward did, as on the CPU); an invalid one is skipped rather than
 * written out of bounds. */
extern "C" fl_status fl_cuda_dev_embedding_bwd(const float *idx, int64_t n, const float *dy, int64_t vocab,
                                               int64_t dim, float *dweight) {
    if (n < 0 || vocab < 0 || dim < 0)
        return FL_ERR(FL_EINVAL, "embedding_bwd on cuda: negative size (n %lld, vocab %lld, dim %lld)", (long long)n,
                      (long long)vocab, (long long)dim);
    if (n == 0 || dim == 0 || vocab == 0) return FL_OK;
    if (!idx || !dy || !dweight) return FL_ERR(FL_EINVAL, "embedding_bwd on cuda: a NULL buffer");
    if (n > 0x7fffffff || vocab > 0x7fffffff)
        return FL_ERR(FL_EUNSUPPORTED, "embedding_bwd on cuda: %lld positions over a vocabulary of %lld is too large "
                      "(at most 2^31 - 1 each)", (long long)n, (long long)vocab);
    cudaStream_t st = fl_cuda_stream();
    const int num = (int)n;
    int end_bit = 1;   /* keys are 0..vocab (vocab: the invalid-index sentinel) */
    while (end_bit < 32 && ((uint64_t)vocab >> end_bit) != 0) end_bit++;
    size_t temp_bytes = 0;
    FL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, (const uint32_t *)nullptr, (uint32_t *)nullptr,
                                                  (const uint32_t *)nullptr, (uint32_t *)nullptr, num, 0, end_bit, st),
                  "cub::DeviceRadixSort::SortPairs (size query)");
    /* scratch: [temp][keys in][positions in][keys out][positions out], each 256-byte aligned */
    const size_t arr = round256((size_t)n * sizeof(uint32_t)), tb = round256(temp_bytes);
    fl_cu_scratch s;
    FL_TRY(s.alloc(tb + 4 * arr));
    char *base = (char *)s.p;
    uint32_t *keys_in = (uint32_t *)(base + tb), *pos_in = (uint32_t *)(base + tb + arr);
    uint32_t *keys = (uint32_t *)(base + tb + 2 * arr), *pos = (uint32_t *)(base + tb + 3 * arr);
    embedding_keys_kernel<<<grid_for_work((size_t)n, 256, 8), 256, 0, st>>>(idx, n, vocab, keys_in, pos_in);
    FL_CUDA_CHECK(cudaGetLastError(), "embedding_keys_kernel launch");
    FL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base, temp_bytes, keys_in, keys, pos_in, pos, num, 0, end_bit, st),
                  "cub::DeviceRadixSort::SortPairs");
    dim3 grid, block;
    row_launch_shape(dim, n, &grid, &block);
    embedding_bwd_runs_kernel<<<grid, block, 0, st>>>(keys, pos, n, dy, vocab, dim, dweight);
    FL_CUDA_CHECK(cudaGetLastError(), "embedding_bwd_runs_kernel launch");
    return FL_OK;
}
