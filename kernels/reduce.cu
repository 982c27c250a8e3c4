/* reduce.cu — sum, mean, max, min, amax over a whole tensor or one dim (keepdim result), and Σx² for
 * clip_grad_norm_ (core/device.h), reproducing core/cpu/cpu_reduce.c and the CPU's sumsq.
 * Maths: elements decode to fp32 (as the CPU's fl_cpu_load); sums accumulate in double (Σx² as
 * (double)x·(double)x), every add and multiply separately rounded (no FMA contraction); sum = (float)Σ,
 * mean = (float)(Σ / count) (NaN for an empty range); max/min/amax compare in fp32 and return NaN if any
 * element is NaN; the fp32 result is stored rounded to nearest even in dst's dtype (FP8 saturating).
 * Layout: the contiguous input as [outer, size, inner] around the reduced dim (all dims: [1, n, 1]).
 *   inner == 1 (rows): a group of 32 or 256 threads per (row, chunk); thread t takes elements t, t + g,
 *     ... of the chunk, then a fixed butterfly tree (warp shuffles, then one shared-memory stage)
 *     combines the threads; rows longer than 4096 split into at most 1024 chunks whose partials a
 *     second launch combines the same way.
 *   inner > 1 (columns): one thread per (output, chunk of the reduced dim) walks its chunk in order
 *     (coalesced across neighbouring outputs); chunk partials are combined in chunk order by a second
 *     launch.
 * Chunking, group sizes and trees depend on the shape only (never on the GPU's SM count or the grid),
 * so results are deterministic and identical on every GPU — and identical to the host runs of the same
 * code below. They differ from the CPU's double sums only in summation order, so after rounding to fp32
 * they agree to 1 ulp of the result (plus ~1e-15·Σ|x| under cancellation); max/min/amax are exact.
 * Tests: tests/c/test_gpu_ops.c. */
#include "cuda_common.cuh"
#include "fl_cuda_host.h"
#include "cuda_entries.h"
#include <stdlib.h>
#include <string.h>

namespace {

constexpr int kThreads = 256;
constexpr int64_t kRowChunk = 4096;     /* rows longer than this split into chunks ... */
constexpr int64_t kMaxChunks = 1024;    /* ... at most this many */
constexpr int64_t kSplitRows = 1024;    /* with this many rows there is parallelism enough: no split */
constexpr int64_t kColItems = 131072;   /* column reductions aim for this many threads */
constexpr int64_t kMinColChunk = 32;

enum Mode { M_SUM = 0, M_SUMSQ = 1, M_MINMAX = 2 };

/* Separately rounded double arithmetic (the device compiler would otherwise fuse x·x + s). */
FL_HD double r_dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
FL_HD double r_dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
FL_HD double r_ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}

/* ---- codecs (core/format.c's) -------------------------------------------------------------------- */

template <int D> struct Dec;
template <> struct Dec<FL_F32> { typedef float T; static FL_HD float f(T v) { return v; } };
template <> struct Dec<FL_BF16> { typedef uint16_t T; static FL_HD float f(T v) { return fl_bf16_bits_to_f32(v); } };
template <> struct Dec<FL_F16> { typedef uint16_t T; static FL_HD float f(T v) { return fl_f16_bits_to_f32(v); } };
template <> struct Dec<FL_E4M3> { typedef uint8_t T; static FL_HD float f(T v) { return fl_dec_fp8<3, 7>(v); } };
template <> struct Dec<FL_E5M2> { typedef uint8_t T; static FL_HD float f(T v) { return fl_dec_fp8<2, 15>(v); } };

FL_HD void rd_store(char *base, int dt, int64_t off, float v) {
    bool over;
    switch (dt) {
    case FL_F32: reinterpret_cast<float *>(base)[off] = v; break;
    case FL_BF16: reinterpret_cast<uint16_t *>(base)[off] = fl_f32_to_bf16_bits(v); break;
    case FL_F16: reinterpret_cast<uint16_t *>(base)[off] = fl_f32_to_f16_bits(v); break;
    case FL_E4M3: reinterpret_cast<uint8_t *>(base)[off] = fl_cvt_fp8<3, 7>(v, false, &over); break;
    default: reinterpret_cast<uint8_t *>(base)[off] = fl_cvt_fp8<2, 15>(v, false, &over); break;
    }
}

/* ---- accumulators -------------------------------------------------------------------------------- */

struct Part {
    double sum;
    float mx, mn, am;
    int nan;
};

FL_HD Part part_init() {
    Part p;
    p.sum = 0.0;
    p.mx = fl_u2f(0xff800000u);   /* -inf */
    p.mn = fl_u2f(0x7f800000u);   /* +inf */
    p.am = 0.0f;
    p.nan = 0;
    return p;
}

/* One element, as cpu_reduce.c's racc_add: comparisons skip NaN, which only sets the flag. */
template <int MODE> FL_HD void part_add(Part &p, float x) {
    if (MODE == M_SUM) p.sum = r_dadd(p.sum, (double)x);
    else if (MODE == M_SUMSQ) p.sum = r_dadd(p.sum, r_dmul((double)x, (double)x));
    else {
        const float ax = fl_u2f(fl_f2u(x) & 0x7fffffffu);
        p.nan |= x != x;
        p.mx = x > p.mx ? x : p.mx;
        p.mn = x < p.mn ? x : p.mn;
        p.am = ax > p.am ? ax : p.am;
    }
}

/* Two partial results, as racc_merge. */
template <int MODE> FL_HD void part_merge(Part &p, const Part &o) {
    if (MODE != M_MINMAX) p.sum = r_dadd(p.sum, o.sum);
    else {
        p.mx = o.mx > p.mx ? o.mx : p.mx;
        p.mn = o.mn < p.mn ? o.mn : p.mn;
        p.am = o.am > p.am ? o.am : p.am;
        p.nan |= o.nan;
    }
}

/* racc_result. */
FL_HD float part_result(int op, const Part &p, int64_t count) {
    const float qnan = fl_u2f(0x7fc00000u);
    switch (op) {
    case FL_OP_SUM: return (float)p.sum;
    case FL_OP_MEAN: return count ? (float)r_ddiv(p.sum, (double)count) : qnan;
    case FL_OP_MAX: return p.nan ? qnan : p.mx;
    case FL_OP_MIN: return p.nan ? qnan : p.mn;
    default: return p.nan ? qnan : p.am;
    }
}

/* Where output q goes: element q of the contiguous keepdim dst, or (Σx²) the double itself. */
struct Out {
    char *dst;
    int ddt, op;
    int64_t count;
    double *dsum;
};

FL_HD void emit(const Out &o, int64_t q, const Part &p) {
    if (o.dsum) o.dsum[q] = p.sum;
    else rd_store(o.dst, o.ddt, q, part_result(o.op, p, o.count));
}

/* ---- plans ---------------------------------------------------------------------------------------- */

/* inner == 1: rows of `size` contiguous elements, items (row, chunk) = item / chunks, item % chunks. */
struct RowPlan {
    const char *src;
    int64_t rows, size, chunks, clen;
    int g;               /* threads per item: 32 or kThreads */
    Part *part;          /* [rows][chunks], when chunks > 1 */
    Out out;
};

/* Combining the partials of RowPlan (chunks > 1): one group of g threads per row. */
struct FinPlan {
    const Part *part;
    int64_t rows, chunks;
    int g;
    Out out;
};

/* inner > 1: items (chunk, output) = item / nout, item % nout; output q = (o, j) = q / inner, q % inner. */
struct ColPlan {
    const char *src;
    int64_t size, inner, nout, chunks, clen;
    Part *part;          /* [chunks][nout], when chunks > 1 */
    Out out;
};

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

RowPlan row_plan(const char *src, int64_t rows, int64_t size) {
    RowPlan p;
    memset(&p, 0, sizeof p);
    p.src = src; p.rows = rows; p.size = size;
    p.chunks = 1; p.clen = size;
    if (size > kRowChunk && rows < kSplitRows) {
        int64_t c = cdiv(size, kRowChunk);
        if (c > kMaxChunks) c = kMaxChunks;
        p.clen = cdiv(size, c);
        p.chunks = cdiv(size, p.clen);
    }
    p.g = p.chunks == 1 && p.clen <= 1024 ? 32 : kThreads;
    return p;
}

FinPlan fin_plan(const RowPlan &r) {
    FinPlan f;
    memset(&f, 0, sizeof f);
    f.part = r.part; f.rows = r.rows; f.chunks = r.chunks;
    f.g = r.chunks <= 64 ? 32 : kThreads;
    f.out = r.out;
    return f;
}

ColPlan col_plan(const char *src, int64_t outer, int64_t size, int64_t inner) {
    ColPlan p;
    memset(&p, 0, sizeof p);
    p.src = src; p.size = size; p.inner = inner; p.nout = outer * inner;
    p.chunks = 1; p.clen = size;
    if (size > 0) {
        int64_t want = cdiv(kColItems, p.nout), maxc = cdiv(size, kMinColChunk);
        if (maxc > kMaxChunks) maxc = kMaxChunks;
        int64_t c = want < maxc ? want : maxc;
        if (c < 1) c = 1;
        p.clen = cdiv(size, c);
        p.chunks = cdiv(size, p.clen);
    }
    return p;
}

/* ---- per-thread work (shared by the kernels and the host runs) ------------------------------------ */

template <int D, int MODE>
FL_HD Part rows_lane(const RowPlan &p, int64_t item, int lane) {
    typedef typename Dec<D>::T T;
    const int64_t row = item / p.chunks, c = item % p.chunks;
    const int64_t b = c * p.clen, e = b + p.clen < p.size ? b + p.clen : p.size;
    const T *x = reinterpret_cast<const T *>(p.src) + row * p.size;
    Part acc = part_init();
    for (int64_t i = b + lane; i < e; i += p.g) part_add<MODE>(acc, Dec<D>::f(x[i]));
    return acc;
}

FL_HD void rows_emit(const RowPlan &p, int64_t item, const Part &v) {
    if (p.chunks > 1) p.part[item] = v;
    else emit(p.out, item, v);
}

template <int MODE>
FL_HD Part fin_lane(const FinPlan &p, int64_t row, int lane) {
    Part acc = part_init();
    for (int64_t c = lane; c < p.chunks; c += p.g) part_merge<MODE>(acc, p.part[row * p.chunks + c]);
    return acc;
}

template <int D, int MODE>
FL_HD void cols_item(const ColPlan &p, int64_t item) {
    typedef typename Dec<D>::T T;
    const int64_t q = item % p.nout, c = item / p.nout;
    const int64_t o = q / p.inner, j = q % p.inner;
    const int64_t s0 = c * p.clen, s1 = s0 + p.clen < p.size ? s0 + p.clen : p.size;
    const T *x = reinterpret_cast<const T *>(p.src) + o * p.size * p.inner + j;
    Part acc = part_init();
    for (int64_t s = s0; s < s1; s++) part_add<MODE>(acc, Dec<D>::f(x[s * p.inner]));
    if (p.chunks > 1) p.part[item] = acc;
    else emit(p.out, q, acc);
}

template <int MODE>
FL_HD void cols_fin(const ColPlan &p, int64_t q) {
    Part acc = part_init();
    for (int64_t c = 0; c < p.chunks; c++) part_merge<MODE>(acc, p.part[c * p.nout + q]);
    emit(p.out, q, acc);
}

/* ---- the combining tree: warp butterfly, then (g == 256) one shared-memory stage ------------------- */

template <int MODE> __device__ __forceinline__ Part shfl_part(const Part &v, int o) {
    Part w = v;
    if (MODE != M_MINMAX) {
        w.sum = __shfl_xor_sync(0xffffffffu, v.sum, o);
    } else {
        w.mx = __shfl_xor_sync(0xffffffffu, v.mx, o);
        w.mn = __shfl_xor_sync(0xffffffffu, v.mn, o);
        w.am = __shfl_xor_sync(0xffffffffu, v.am, o);
        w.nan = __shfl_xor_sync(0xffffffffu, v.nan, o);
    }
    return w;
}

template <int MODE> __device__ __forceinline__ Part warp_tree(Part v) {
    for (int o = 16; o > 0; o >>= 1) {
        const Part w = shfl_part<MODE>(v, o);
        part_merge<MODE>(v, w);
    }
    return v;
}

/* Every thread of the group calls it (g == kThreads: every thread of the block, the same number of
 * times); the result is valid in the group's lane 0. */
template <int MODE> __device__ Part group_reduce(Part v, int g, Part *sh) {
    v = warp_tree<MODE>(v);
    if (g == 32) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();                  /* the previous item's readers are done with sh */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = lane < kThreads / 32 ? sh[lane] : part_init();
    return warp_tree<MODE>(v);
}

/* The same tree on the host: lanes[0..g) in, lane 0's result out. */
template <int MODE> void host_warp_tree(Part *lanes) {
    Part next[32];
    for (int o = 16; o > 0; o >>= 1) {
        for (int l = 0; l < 32; l++) {
            next[l] = lanes[l];
            part_merge<MODE>(next[l], lanes[l ^ o]);
        }
        memcpy(lanes, next, sizeof next);
    }
}
template <int MODE> Part host_group_reduce(Part *lanes, int g) {
    for (int w = 0; w < g / 32; w++) host_warp_tree<MODE>(lanes + 32 * w);
    if (g == 32) return lanes[0];
    Part top[32];
    for (int l = 0; l < 32; l++) top[l] = l < kThreads / 32 ? lanes[32 * l] : part_init();
    host_warp_tree<MODE>(top);
    return top[0];
}

/* ---- kernels -------------------------------------------------------------------------------------- */

template <int D, int MODE>
__global__ void __launch_bounds__(kThreads) reduce_rows_kernel(const __grid_constant__ RowPlan p) {
    __shared__ Part sh[32];
    const int gpb = kThreads / p.g, lane = threadIdx.x % p.g;
    const int64_t items = p.rows * p.chunks;
    for (int64_t item = (int64_t)blockIdx.x * gpb + threadIdx.x / p.g; item < items; item += (int64_t)gridDim.x * gpb) {
        Part v = rows_lane<D, MODE>(p, item, lane);
        v = group_reduce<MODE>(v, p.g, sh);
        if (lane == 0) rows_emit(p, item, v);
    }
}

template <int MODE>
__global__ void __launch_bounds__(kThreads) reduce_fin_kernel(const __grid_constant__ FinPlan p) {
    __shared__ Part sh[32];
    const int gpb = kThreads / p.g, lane = threadIdx.x % p.g;
    for (int64_t row = (int64_t)blockIdx.x * gpb + threadIdx.x / p.g; row < p.rows; row += (int64_t)gridDim.x * gpb) {
        Part v = fin_lane<MODE>(p, row, lane);
        v = group_reduce<MODE>(v, p.g, sh);
        if (lane == 0) emit(p.out, row, v);
    }
}

template <int D, int MODE>
__global__ void __launch_bounds__(kThreads) reduce_cols_kernel(const __grid_constant__ ColPlan p) {
    const int64_t items = p.nout * p.chunks;
    for (int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; item < items; item += (int64_t)gridDim.x * blockDim.x)
        cols_item<D, MODE>(p, item);
}

template <int MODE>
__global__ void __launch_bounds__(kThreads) reduce_cols_fin_kernel(const __grid_constant__ ColPlan p) {
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < p.nout; q += (int64_t)gridDim.x * blockDim.x)
        cols_fin<MODE>(p, q);
}

/* ---- running a plan on the GPU or (host runs) on the host ----------------------------------------- */

/* Scratch for partials: the device allocator's (freed blocks are only reused by later work on the one
 * stream), or malloc for host runs. */
struct Scratch {
    void *p = NULL;
    bool host = false;
    const fl_device *dev = NULL;
    ~Scratch() {
        if (!p) return;
        if (host) free(p);
        else dev->free(p);
    }
    fl_status get(size_t bytes, bool on_host) {
        host = on_host;
        if (on_host) {
            p = malloc(bytes ? bytes : 1);
            return p ? FL_OK : FL_ERR(FL_ENOMEM, "reduce: out of host memory for %zu bytes of partials", bytes);
        }
        dev = fl_device_get(FL_DEV_CUDA);
        if (!dev) return FL_ERR(FL_EDEVICE, "reduce on cuda: the cuda device is not available");
        return dev->alloc(bytes ? bytes : 1, &p);
    }
};

unsigned blocks_for(int64_t threads) { return grid_for_work((size_t)threads, kThreads, 8); }

template <int D, int MODE>
fl_status run_rows(RowPlan p, bool host) {
    Scratch s;
    if (p.chunks > 1) {
        FL_TRY(s.get((size_t)(p.rows * p.chunks) * sizeof(Part), host));
        p.part = static_cast<Part *>(s.p);
    }
    const int64_t items = p.rows * p.chunks;
    if (host) {
        Part lanes[kThreads];
        for (int64_t item = 0; item < items; item++) {
            for (int l = 0; l < p.g; l++) lanes[l] = rows_lane<D, MODE>(p, item, l);
            rows_emit(p, item, host_group_reduce<MODE>(lanes, p.g));
        }
    } else {
        reduce_rows_kernel<D, MODE><<<blocks_for(items * p.g), kThreads, 0, fl_cuda_stream()>>>(p);
        FL_CUDA_CHECK(cudaGetLastError(), "reduce_rows_kernel launch");
    }
    if (p.chunks == 1) return FL_OK;
    const FinPlan f = fin_plan(p);
    if (host) {
        Part lanes[kThreads];
        for (int64_t row = 0; row < f.rows; row++) {
            for (int l = 0; l < f.g; l++) lanes[l] = fin_lane<MODE>(f, row, l);
            emit(f.out, row, host_group_reduce<MODE>(lanes, f.g));
        }
        return FL_OK;
    }
    reduce_fin_kernel<MODE><<<blocks_for(f.rows * f.g), kThreads, 0, fl_cuda_stream()>>>(f);
    FL_CUDA_CHECK(cudaGetLastError(), "reduce_fin_kernel launch");
    return FL_OK;   /* s is freed now; the kernels that use it are ordered before any later user */
}

template <int D, int MODE>
fl_status run_cols(ColPlan p, bool host) {
    Scratch s;
    if (p.chunks > 1) {
        FL_TRY(s.get((size_t)(p.nout * p.chunks) * sizeof(Part), host));
        p.part = static_cast<Part *>(s.p);
    }
    const int64_t items = p.nout * p.chunks;
    if (host) {
        for (int64_t item = 0; item < items; item++) cols_item<D, MODE>(p, item);
        if (p.chunks > 1)
            for (int64_t q = 0; q < p.nout; q++) cols_fin<MODE>(p, q);
        return FL_OK;
    }
    reduce_cols_kernel<D, MODE><<<blocks_for(items), kThreads, 0, fl_cuda_stream()>>>(p);
    FL_CUDA_CHECK(cudaGetLastError(), "reduce_cols_kernel launch");
    if (p.chunks == 1) return FL_OK;
    reduce_cols_fin_kernel<MODE><<<blocks_for(p.nout), kThreads, 0, fl_cuda_stream()>>>(p);
    FL_CUDA_CHECK(cudaGetLastError(), "reduce_cols_fin_kernel launch");
    return FL_OK;
}

template <int MODE>
fl_status dispatch_rows(int dt, const RowPlan &p, bool host) {
    switch (dt) {
    case FL_F32: return run_rows<FL_F32, MODE>(p, host);
    case FL_BF16: return run_rows<FL_BF16, MODE>(p, host);
    case FL_F16: return run_rows<FL_F16, MODE>(p, host);
    case FL_E4M3: return run_rows<FL_E4M3, MODE>(p, host);
    default: return run_rows<FL_E5M2, MODE>(p, host);
    }
}

template <int MODE>
fl_status dispatch_cols(int dt, const ColPlan &p, bool host) {
    switch (dt) {
    case FL_F32: return run_cols<FL_F32, MODE>(p, host);
    case FL_BF16: return run_cols<FL_BF16, MODE>(p, host);
    case FL_F16: return run_cols<FL_F16, MODE>(p, host);
    case FL_E4M3: return run_cols<FL_E4M3, MODE>(p, host);
    default: return run_cols<FL_E5M2, MODE>(p, host);
    }
}

/* ---- entries -------------------------------------------------------------------------------------- */

fl_status reduce_contig(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim, bool host) {
    const char *name = fl_redop_names[op];
    int64_t outer = 1, size = fl_tensor_numel(a), inner = 1;
    if (dim >= 0 && a->ndim > 0) {
        size = a->shape[dim];
        for (int i = 0; i < dim; i++) outer *= a->shape[i];
        for (int i = dim + 1; i < a->ndim; i++) inner *= a->shape[i];
    }
    const int64_t nout = outer * inner;
    if (fl_tensor_numel(dst) != nout || !fl_tensor_is_contiguous(dst)) {
        char s[200];
        return FL_ERR(FL_EINVAL, "%s on cuda: expected a contiguous destination of %lld element(s) (keepdim layout) "
                      "for input %s, dim %d", name, (long long)nout, fl_shape_str(s, sizeof s, a->ndim, a->shape), dim);
    }
    if (nout == 0) return FL_OK;
    Out out;
    memset(&out, 0, sizeof out);
    out.dst = (char *)fl_tensor_data(dst);
    out.ddt = dst->dtype;
    out.op = op;
    out.count = size;
    const char *src = (const char *)fl_tensor_data(a);
    const bool sum = op == FL_OP_SUM || op == FL_OP_MEAN;
    if (inner == 1) {
        RowPlan p = row_plan(src, outer, size);
        p.out = out;
        return sum ? dispatch_rows<M_SUM>(a->dtype, p, host) : dispatch_rows<M_MINMAX>(a->dtype, p, host);
    }
    ColPlan p = col_plan(src, outer, size, inner);
    p.out = out;
    return sum ? dispatch_cols<M_SUM>(a->dtype, p, host) : dispatch_cols<M_MINMAX>(a->dtype, p, host);
}

fl_status reduce_impl(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim, bool host) {
    if ((int)op < 0 || op >= FL_REDOP_COUNT) return FL_ERR(FL_EINVAL, "reduce on cuda: unknown reduction %d", (int)op);
    const char *name = fl_redop_names[op];
    FL_TRY(fl_cu_check_tensor(dst, host, name, "destination"));
    FL_TRY(fl_cu_check_tensor(a, host, name, "input"));
    if (dim >= a->ndim && a->ndim > 0)
        return FL_ERR(FL_EINVAL, "%s on cuda: dim %d out of range for a %d-d tensor", name, dim, a->ndim);
    if (fl_tensor_is_contiguous(a)) return reduce_contig(op, dst, a, dim, host);
    fl_tensor *c = NULL;   /* as the CPU: reduce a contiguous copy */
    FL_TRY(fl_tensor_contiguous(&c, a));
    fl_status st = reduce_contig(op, dst, c, dim, host);
    fl_tensor_release(c);
    return st;
}

/* Σx² of each of n tensors into out[i]: every reduction queued on the stream into one device array, then one
 * copy back and one wait (clip_grad_norm_ reads all its gradients' sums at once). */
fl_status sumsq_impl(const fl_tensor *const *ts, int n, double *out, bool host) {
    if (!out || n < 0 || (n > 0 && !ts))
        return FL_ERR(FL_EINVAL, "sumsq on cuda: expected n >= 0 tensors and a result array, got n = %d", n);
    for (int i = 0; i < n; i++) {
        const fl_tensor *t = ts[i];
        if (!t) return FL_ERR(FL_EINVAL, "sumsq on cuda: tensor %d of %d is missing", i + 1, n);
        FL_TRY(fl_cu_check_tensor(t, host, "sumsq", "input"));
        if (t->dtype != FL_F32 && t->dtype != FL_BF16 && t->dtype != FL_F16)
            return FL_ERR(FL_EINVAL, "sumsq on cuda: expected an fp32, bf16 or fp16 tensor, got %s",
                          fl_format(t->dtype)->name);
        if (!fl_tensor_is_contiguous(t)) return FL_ERR(FL_EINVAL, "sumsq on cuda: expected a contiguous tensor");
    }
    if (n == 0) return FL_OK;
    Scratch s;
    double *dsum = out;
    cudaStream_t stream = host ? nullptr : fl_cuda_stream();
    if (host) {
        for (int i = 0; i < n; i++) out[i] = 0.0;
    } else {
        FL_TRY(s.get((size_t)n * sizeof(double), false));
        dsum = static_cast<double *>(s.p);
        FL_CUDA_CHECK(cudaMemsetAsync(dsum, 0, (size_t)n * sizeof(double), stream), "cudaMemsetAsync (sumsq)");
    }
    for (int i = 0; i < n; i++) {
        const int64_t m = fl_tensor_numel(ts[i]);
        if (m == 0) continue;   /* its sum stays 0 */
        RowPlan p = row_plan((const char *)fl_tensor_data(ts[i]), 1, m);
        p.out.dsum = dsum + i;
        p.out.op = FL_OP_SUM;
        fl_status st;
        if (ts[i]->dtype == FL_F32) st = run_rows<FL_F32, M_SUMSQ>(p, host);
        else if (ts[i]->dtype == FL_BF16) st = run_rows<FL_BF16, M_SUMSQ>(p, host);
        else st = run_rows<FL_F16, M_SUMSQ>(p, host);
        FL_TRY(st);
    }
    if (host) return FL_OK;
    FL_CUDA_CHECK(cudaMemcpyAsync(out, dsum, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, stream),
                  "cudaMemcpyAsync (sumsq)");
    FL_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize (sumsq)");
    return FL_OK;
}

}  // namespace

extern "C" fl_status fl_cuda_dev_reduce(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim) {
    return reduce_impl(op, dst, a, dim, false);
}
extern "C" fl_status fl_cuda_dev_sumsq(const fl_tensor *const *ts, int n, double *out) {
    return sumsq_impl(ts, n, out, false);
}

/* Host runs of the device code (tests): the same plans, per-thread work and trees over CPU tensors. */
extern "C" fl_status fl_cuda_reduce_host(fl_redop op, fl_tensor *dst, const fl_tensor *a, int dim) {
    return reduce_impl(op, dst, a, dim, true);
}
extern "C" fl_status fl_cuda_sumsq_host(const fl_tensor *const *ts, int n, double *out) {
    return sumsq_impl(ts, n, out, true);
}
